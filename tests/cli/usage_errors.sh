# Bad command-line usage on every command: an unknown option, a malformed number, an unknown model or
# precision, a missing value or a stray argument each exits 2 with exactly one line on stderr, which
# starts with "amp: " and ends with the hint naming that command's --help; nothing goes to stdout.
# (A bare `amp` or `amp bench` prints the usage instead, exit 2: tests/cli/cli_basics.sh.)
. "$(dirname "$0")/lib.sh"

# usage_error HINT_COMMAND TEXT ARGS...: `amp ARGS...` is refused as described above, mentioning TEXT.
usage_error() {
    hint=$1 text=$2
    shift 2
    run "$AMP" "$@"
    label="amp $*"
    expect_rc 2 "$label"
    expect_err_lines 1 "$label"
    expect_err_has "$text" "$label"
    if [ -n "$hint" ]; then hint_text="(try \`amp $hint --help\`)"; else hint_text="(try \`amp --help\`)"; fi
    line=$(head -n 1 "$TMP/err")
    case "$line" in
        "amp: "*"$hint_text") pass ;;
        *) fail "$label: stderr is not 'amp: ... $hint_text': $line" ;;
    esac
    if [ -s "$TMP/out" ]; then fail "$label: wrote to stdout"; else pass; fi
}

usage_error "" "unknown command 'frobnicate'" frobnicate
usage_error "" "unknown command '--bogus'" --bogus

for cmd in explain policy info inspect train compare; do
    usage_error "$cmd" "unknown option '--bogus'" "$cmd" --bogus
done
usage_error explain "unknown option 'extra'" explain --json extra
usage_error inspect "no file given" inspect
usage_error inspect "more than one file" inspect a.safetensors b.safetensors

# bench: each benchmark's hint names it.
usage_error bench "unknown benchmark 'bogus'" bench bogus
for b in convert gemm gemm-fp8 unscale; do
    usage_error "bench $b" "unknown option '--bogus'" bench $b --bogus
    usage_error "bench $b" "--repeats needs a positive integer" bench $b --repeats 2x
    usage_error "bench $b" "--repeats needs a positive integer" bench $b --repeats
done
usage_error "bench convert" "--mib needs a positive integer" bench convert --mib -1
usage_error "bench unscale" "unknown SIMD path 'sse9'" bench unscale --isa sse9
usage_error "bench gemm" "--threads needs a positive integer" bench gemm --threads 0
usage_error "bench gemm" "--shape needs MxNxK" bench gemm --shape 64x64
usage_error "bench gemm" "--shape needs MxNxK" bench gemm --shape 64x64x99999999999999999999

# train and compare share their flags: both refuse the same way.
for cmd in train compare; do
    usage_error $cmd "unknown model 'resnet'" $cmd --model resnet
    usage_error $cmd "--steps wants an integer" $cmd --steps 12abc
    usage_error $cmd "--steps wants an integer" $cmd --steps 0
    usage_error $cmd "--batch wants an integer" $cmd --batch 1e3
    usage_error $cmd "--seed" $cmd --seed -5
    usage_error $cmd "--threads wants an integer" $cmd --threads 99999
    usage_error $cmd "--lr wants a number" $cmd --lr x
    usage_error $cmd "--lr wants a number" $cmd --lr nan
    usage_error $cmd "--epochs needs a value" $cmd --epochs
    usage_error $cmd "unexpected argument 'extra'" $cmd extra
done
usage_error train "unknown precision 'fp64'" train --precision fp64
usage_error train "unknown precision 'amp_fp16'" train --precision amp_fp16
usage_error train "--scaler wants dynamic, off or static:S" train --scaler static:-1
usage_error train "unknown optimizer 'lion'" train --optimizer lion
usage_error train "--clip must be >= 0" train --clip -1
usage_error train "--momentum applies to sgd only" train --optimizer adam --momentum 0.9
usage_error train "--checkpoint-every needs --checkpoint" train --checkpoint-every 5
usage_error compare "--runs wants a comma-separated list" compare --runs fp64
usage_error compare "--runs wants a comma-separated list" compare --runs fp32,amp-fp16/static:0
usage_error compare "unknown option '--precision'" compare --precision fp32

finish
