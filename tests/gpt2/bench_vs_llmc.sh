#!/bin/sh
# Training speed of amp's gpt2 against llm.c's train_gpt2.c on llm.c's CPU shapes: GPT-2 124M (or
# LLMC_SHAPE=small), B=4, T=64, THREADS threads (default 2), the same llm.c model file and shards as
# check_vs_llmc.sh. llm.c is built -O3 -march=native -fopenmp from a temporary copy (no shuffle, STEPS
# steps, no validation); amp runs fp32 and amp-bf16. Prints tokens/s of each (the median step after
# the first, for llm.c from its per-step times; for amp from its training samples/s over STEPS steps,
# which includes the first) and the ratios. Noisy on a shared machine: run it more than once.
#
# usage: LLMC_DIR=/path/to/llm.c tests/gpt2/bench_vs_llmc.sh   (skips without it, as check_vs_llmc.sh)
set -eu
AMP=${AMP:-build/amp}
STEPS=${STEPS:-6}
THREADS=${THREADS:-2}
SHAPE=${LLMC_SHAPE:-124m}
LLMC_DIR=${LLMC_DIR:-}
if [ -z "$LLMC_DIR" ] || [ ! -f "$LLMC_DIR/train_gpt2.c" ]; then echo "skipped: set LLMC_DIR"; exit 0; fi
if ! python3 -c "import numpy" 2>/dev/null; then echo "skipped: numpy is missing"; exit 0; fi
case $SHAPE in
small) L=4 NH=4 C=128 ;;
124m) L=12 NH=12 C=768 ;;
*) echo "error: LLMC_SHAPE is small or 124m"; exit 1 ;;
esac
HERE=$(cd "$(dirname "$0")" && pwd)
AMP=$(cd "$(dirname "$AMP")" && pwd)/$(basename "$AMP")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cp -r "$LLMC_DIR/train_gpt2.c" "$LLMC_DIR/llmc" "$TMP/"
sed -i -e 's/dataloader_init(&train_loader, train_tokens, B, T, 0, 1, 1);/dataloader_init(\&train_loader, train_tokens, B, T, 0, 1, 0);/' \
    -e "s/for (int step = 0; step <= 40; step++) {/for (int step = 0; step < $STEPS; step++) {/" \
    -e 's/if (step % 10 == 0) {/if (0) {/' "$TMP/train_gpt2.c"
(cd "$TMP" && ${CC:-gcc} -O3 -march=native -fopenmp train_gpt2.c -lm -o train_gpt2)
python3 "$HERE/make_llmc_inputs.py" "$TMP" "$L" "$NH" "$C"
mkdir -p "$TMP/dev/data/tinyshakespeare"
cp "$TMP/train.bin" "$TMP/dev/data/tinyshakespeare/tiny_shakespeare_train.bin"
cp "$TMP/val.bin" "$TMP/dev/data/tinyshakespeare/tiny_shakespeare_val.bin"
(cd "$TMP" && OMP_NUM_THREADS=$THREADS ./train_gpt2 > llmc.log 2>&1)
llmc_ms=$(sed -n 's/^step \([0-9]*\): train loss .* (took \([0-9.]*\) ms)$/\1 \2/p' "$TMP/llmc.log" | awk '$1 > 0 {print $2}' | sort -n |
    awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
for p in fp32 amp-bf16; do
    "$AMP" train --model gpt2 --init-from "$TMP/gpt2_124M.bin" --context 64 --batch 4 --data "$TMP/train.bin" \
        --val-data "$TMP/val.bin" --vocab 50257 --data-order sequential --precision "$p" --optimizer adamw --lr 1e-4 \
        --weight-decay 0 --steps "$STEPS" --no-eval --threads "$THREADS" --quiet > "$TMP/amp_$p.log"
done
python3 - "$llmc_ms" "$TMP/amp_fp32.log" "$TMP/amp_amp-bf16.log" "$SHAPE" "$THREADS" <<'PY'
import re, sys
llmc = 256 / (float(sys.argv[1]) / 1000)
def amp(path):
    m = re.search(r"([0-9.]+) samples/s \(training\)", open(path).read())
    return float(m.group(1)) * 64
fp32, bf16 = amp(sys.argv[2]), amp(sys.argv[3])
print("gpt2 %s, B=4 T=64, %s threads: llm.c (-O3 -march=native -fopenmp, fp32) %.1f tokens/s; "
      "amp fp32 %.1f tokens/s (%.2fx llm.c); amp amp-bf16 %.1f tokens/s (%.2fx llm.c, %.2fx amp fp32)"
      % (sys.argv[4], sys.argv[5], llmc, fp32, fp32 / llmc, bf16, bf16 / llmc, bf16 / fp32))
PY
