#!/bin/sh
# Memory and speed of GPT-2 124M training in amp's precision options: fp32, amp-bf16, amp-bf16 with
# bf16 parameters (--param-dtype bf16) and amp-bf16 with block recomputation (--recompute) by default,
# fp32 with --recompute and amp-fp16 when RUNS names them; each for STEPS steps (default 4) at B=4,
# T=64 and at B=2, T=512, THREADS threads (default 2), on random GPT-2 token ids (memory and speed do
# not depend on the text). Prints one line per run: peak RSS, arena and scratch peaks, parameter and
# optimizer bytes (MiB), and seconds per step (from the JSON result's samples/s). REPEATS rounds
# (default 2) run the options back to back (compare ratios within a round). Given several CLIs (two
# builds to compare), each round runs every option with each CLI in turn, and each line names its CLI
# (amp=PATH).
# Usage: tests/gpt2/memory.sh [AMP...]   (AMP: the CLI, default build/amp; SHAPES="BxT ..." other
# shapes; RUNS="fp32 amp-bf16 ..." the options, of fp32, amp-bf16, amp-bf16+param-bf16,
# amp-bf16+recompute, fp32+recompute, amp-fp16)
set -eu
[ $# -gt 0 ] || set -- build/amp
STEPS=${STEPS:-4}
THREADS=${THREADS:-2}
REPEATS=${REPEATS:-2}
RUNS=${RUNS:-"fp32 amp-bf16 amp-bf16+param-bf16 amp-bf16+recompute"}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
python3 - "$TMP" <<'PY'
import struct, sys, random
random.seed(1)
for name, n in (("train.bin", 300000), ("val.bin", 20000)):
    with open(f"{sys.argv[1]}/{name}", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack(f"<{n}H", *(random.randrange(50257) for _ in range(n))))
PY
run() { # cli, label, batch, context
    amp=$1 label=$2 b=$3 t=$4
    case $label in
    fp32) flags="--precision fp32" ;;
    amp-bf16) flags="--precision amp-bf16" ;;
    amp-bf16+param-bf16) flags="--precision amp-bf16 --param-dtype bf16" ;;
    amp-bf16+recompute) flags="--precision amp-bf16 --recompute" ;;
    fp32+recompute) flags="--precision fp32 --recompute" ;;
    amp-fp16) flags="--precision amp-fp16" ;;
    *) echo "unknown run $label (RUNS: fp32 amp-bf16 amp-bf16+param-bf16 amp-bf16+recompute fp32+recompute amp-fp16)" >&2
        exit 2 ;;
    esac
    # shellcheck disable=SC2086
    "$amp" train --model gpt2 --size 124m --batch "$b" --context "$t" --data "$TMP/train.bin" --val-data "$TMP/val.bin" \
        --vocab 50257 --steps "$STEPS" --threads "$THREADS" --no-eval --sample-tokens 0 --quiet --json $flags >"$TMP/out"
    tail -n 1 "$TMP/out" | jq -r --arg l "$label" --arg b "$b" --arg t "$t" --arg a "$amp" '"\($l) B=\($b) T=\($t) rss_mib=\(.peak_rss_bytes / 1048576 | floor) arena_mib=\(.arena_peak_bytes / 1048576 | floor) scratch_mib=\(.scratch_peak_bytes / 1048576 | floor) params_mib=\(.param_bytes / 1048576 | floor) optim_mib=\(.optimizer_state_bytes / 1048576 | floor) s_per_step=\(($b | tonumber) / .samples_per_sec * 1000 | round / 1000) amp=\($a)"'
}
for shape in ${SHAPES:-4x64 2x512}; do
    B=${shape%x*} T=${shape#*x}
    r=1
    while [ "$r" -le "$REPEATS" ]; do
        echo "# round $r, B=$B T=$T"
        for label in $RUNS; do
            for amp in "$@"; do run "$amp" "$label" "$B" "$T"; done
        done
        r=$((r + 1))
    done
done
