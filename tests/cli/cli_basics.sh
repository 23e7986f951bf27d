# Golden tests of the CLI's front door, `amp info`, AMP_ISA handling and `amp bench convert`.
. "$(dirname "$0")/lib.sh"

run "$AMP"
expect_rc 2 "no command"
expect_err_has "usage: amp <command>" "no command prints usage"

run "$AMP" --help
expect_rc 0 "--help"
expect_out_has "explain" "--help lists explain"

run "$AMP" --version
expect_rc 0 "--version"
expect_out_has "amp 0." "--version prints the version"

run "$AMP" frobnicate
expect_rc 2 "unknown command"
expect_err_has "unknown command 'frobnicate'" "unknown command names it"
expect_err_lines 1 "unknown command is one line"

run "$AMP" info
expect_rc 0 "info"
expect_out_has "active path:" "info shows the active path"

# Forcing each supported path is honoured; the reference path is supported everywhere.
for isa in ref avx2 avx512; do
    if "$AMP" info | grep -q "simd paths:.* $isa\(\s\|$\)"; then
        run env AMP_ISA=$isa "$AMP" info
        expect_rc 0 "AMP_ISA=$isa"
        expect_out_has "active path: $isa " "AMP_ISA=$isa is honoured"
        expect_err_lines 0 "AMP_ISA=$isa prints no warning"
    fi
done

# An unknown or unsupported path falls back to the best one, with one warning line.
best=$("$AMP" info | sed -n 's/.*(best: \(.*\))/\1/p')
run env AMP_ISA=sse9 "$AMP" info
expect_rc 0 "AMP_ISA=sse9 still runs"
expect_out_has "active path: $best " "AMP_ISA=sse9 falls back to the best path"
expect_err_has "warning: AMP_ISA=sse9 is not one of ref, avx2, avx512; using $best" "AMP_ISA=sse9 warns"
expect_err_lines 1 "AMP_ISA=sse9 warns once"
for isa in avx2 avx512; do
    if "$AMP" info | grep -q "$isa(unsupported)"; then
        run env AMP_ISA=$isa "$AMP" info
        expect_err_has "AMP_ISA=$isa is not supported by this CPU; using $best" "unsupported AMP_ISA=$isa warns"
    fi
done

run "$AMP" bench convert --mib 1 --repeats 1 --json
expect_rc 0 "bench convert --json"
expect_json_eq '.bench' '"convert"' "bench JSON names the benchmark"
expect_json_eq '[.results[] | select(.isa == "ref")] | length' '8' "bench measures all 8 conversions on ref"
expect_json_eq '(.results | length) as $n | [.results[] | select(.gbps > 0 and .vs_memcpy > 0)] | length == $n' 'true' \
    "bench figures are positive"

run "$AMP" bench convert --mib 0
expect_rc 2 "bench --mib 0 is refused"
expect_err_lines 1 "bench --mib 0 is one line"
run "$AMP" bench convert --isa sse9
expect_rc 2 "bench --isa sse9 is refused"
run "$AMP" bench nothing
expect_rc 2 "unknown benchmark"

finish
