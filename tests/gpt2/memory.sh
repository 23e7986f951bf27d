#!/bin/sh
# Memory and speed of GPT-2 124M training in amp's precision options: fp32, amp-bf16, amp-bf16 with
# bf16 parameters (--param-dtype bf16) and amp-bf16 with block recomputation (--recompute), each
# for STEPS steps (default 4) at B=4, T=64 and at B=2, T=512, THREADS threads (default 2), on random
# GPT-2 token ids (memory and speed do not depend on the text). Prints one line per run: peak RSS,
# arena peak, parameter and optimizer bytes (MiB), and seconds per step (from the JSON result's
# samples/s). REPEATS rounds (default 2) run the four back to back (compare ratios within a round).
# Usage: tests/gpt2/memory.sh [AMP]   (AMP: the CLI, default build/amp; SHAPES="BxT ..." other shapes)
set -eu
AMP=${1:-build/amp}
STEPS=${STEPS:-4}
THREADS=${THREADS:-2}
REPEATS=${REPEATS:-2}
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
run() { # label, batch, context, flags...
    label=$1 b=$2 t=$3
    shift 3
    "$AMP" train --model gpt2 --size 124m --batch "$b" --context "$t" --data "$TMP/train.bin" --val-data "$TMP/val.bin" \
        --vocab 50257 --steps "$STEPS" --threads "$THREADS" --no-eval --sample-tokens 0 --quiet --json "$@" >"$TMP/out"
    tail -n 1 "$TMP/out" | jq -r --arg l "$label" --arg b "$b" --arg t "$t" '"\($l) B=\($b) T=\($t) rss_mib=\(.peak_rss_bytes / 1048576 | floor) arena_mib=\(.arena_peak_bytes / 1048576 | floor) scratch_mib=\(.scratch_peak_bytes / 1048576 | floor) params_mib=\(.param_bytes / 1048576 | floor) optim_mib=\(.optimizer_state_bytes / 1048576 | floor) s_per_step=\(($b | tonumber) / .samples_per_sec * 1000 | round / 1000)"'
}
for shape in ${SHAPES:-4x64 2x512}; do
    B=${shape%x*} T=${shape#*x}
    r=1
    while [ "$r" -le "$REPEATS" ]; do
        echo "# round $r, B=$B T=$T"
        run fp32 "$B" "$T" --precision fp32
        run amp-bf16 "$B" "$T" --precision amp-bf16
        run amp-bf16+param-bf16 "$B" "$T" --precision amp-bf16 --param-dtype bf16
        run amp-bf16+recompute "$B" "$T" --precision amp-bf16 --recompute
        r=$((r + 1))
    done
done
