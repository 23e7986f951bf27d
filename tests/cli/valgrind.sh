# A short training run, a resume from its checkpoint, `amp inspect` of that checkpoint and a run on
# missing data, each under valgrind (memcheck, full leak check): no invalid access, no use of
# uninitialised memory, no leak. Tiny generated IDX data, one thread, a few steps: seconds, even
# under valgrind. Skipped (a "skip:" line, counted as neither pass nor fail) when valgrind is not
# installed, and when $AMP is built with AddressSanitizer (make test-sanitize), which valgrind cannot run.
. "$(dirname "$0")/lib.sh"

if ! command -v valgrind >/dev/null 2>&1; then
    echo "skip: valgrind not installed (Debian: apt-get install valgrind)"
    finish
    exit 0
fi
if grep -q __asan_init "$AMP" 2>/dev/null; then
    echo "skip: $AMP is built with AddressSanitizer; valgrind runs only on the plain build"
    finish
    exit 0
fi

mkdir -p "$TMP/idx"
idx_pair train 32 0
idx_pair t10k 16 1

# vg WANT LABEL ARGS...: `amp ARGS...` under memcheck exits WANT. Memcheck's own errors exit 99, so
# they cannot be mistaken for amp's statuses (0, 1, 2); its report is kept for the failure message.
vg() {
    want=$1 label=$2
    shift 2
    run valgrind -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible \
        --errors-for-leak-kinds=definite,indirect,possible --log-file="$TMP/vg.log" "$AMP" "$@"
    if [ "$RC" = "$want" ]; then pass; else
        fail "$label: exit status $RC, expected $want; memcheck: $(grep -m 3 -E 'Invalid|uninitialised|lost|ERROR' "$TMP/vg.log" | tr '\n' ' ')"
    fi
}

common="--model mlp --data $TMP/idx --batch 8 --hidden 16 --threads 1 --json"
vg 0 "training run" train $common --steps 3 --precision amp-fp16 --checkpoint "$TMP/c.safetensors"
vg 0 "resumed run" train $common --steps 5 --precision amp-fp16 --resume "$TMP/c.safetensors"
vg 0 "inspect" inspect "$TMP/c.safetensors"
vg 2 "missing data" train --model mlp --data "$TMP/none" --steps 1 --threads 1

finish
