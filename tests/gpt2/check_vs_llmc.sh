#!/bin/sh
# amp's gpt2 against llm.c itself (karpathy/llm.c's train_gpt2.c, the fp32 CPU trainer): the same
# random GPT-2 (an llm.c model file written by make_llmc_inputs.py, not by amp) and the same token
# shards, llm.c's unshuffled DataLoader order (amp: --data-order sequential), B=4, T=64, AdamW with
# llm.c's hyperparameters (lr 1e-4, betas 0.9 and 0.999, eps 1e-8, weight decay 0), STEPS steps. Both
# print the training loss of every step (the forward before that step's update): step 1 (the same
# weights) must agree to 1e-5 relative, every step to 1e-4 relative.
#
# usage: LLMC_DIR=/path/to/llm.c tests/gpt2/check_vs_llmc.sh     (from the repository root, after make)
#   LLMC_SHAPE=small (default: 4 layers, 4 heads, width 128, vocabulary 50257) or 124m (GPT-2 small:
#   12, 12, 768; a few minutes on two cores); STEPS (default 11: ten updates between the first loss
#   and the last); THREADS (default 2: OMP_NUM_THREADS and amp's --threads); AMP (default build/amp).
# Skips (exit 0, "skipped: ...") without LLMC_DIR/train_gpt2.c, a C compiler with OpenMP or numpy.
# Only the temporary copy of train_gpt2.c is patched: the train loader's shuffle off, STEPS steps, no
# validation pass, the loss printed with 9 digits.
set -eu
AMP=${AMP:-build/amp}
STEPS=${STEPS:-11}
THREADS=${THREADS:-2}
SHAPE=${LLMC_SHAPE:-small}
LLMC_DIR=${LLMC_DIR:-}
if [ -z "$LLMC_DIR" ] || [ ! -f "$LLMC_DIR/train_gpt2.c" ] || [ ! -d "$LLMC_DIR/llmc" ]; then
    echo "skipped: set LLMC_DIR to a checkout of karpathy/llm.c (train_gpt2.c, llmc/)"
    exit 0
fi
if ! python3 -c "import numpy" 2>/dev/null; then echo "skipped: numpy is missing"; exit 0; fi
CC=${CC:-gcc}
if ! echo 'int main(void){return 0;}' | "$CC" -fopenmp -x c - -o /dev/null 2>/dev/null; then
    echo "skipped: $CC cannot build with -fopenmp"
    exit 0
fi
[ -x "$AMP" ] || { echo "error: $AMP not found (run make)"; exit 1; }
case $SHAPE in
small) L=4 NH=4 C=128 ;;
124m) L=12 NH=12 C=768 ;;
*) echo "error: LLMC_SHAPE is small or 124m, not $SHAPE"; exit 1 ;;
esac
HERE=$(cd "$(dirname "$0")" && pwd)
AMP=$(cd "$(dirname "$AMP")" && pwd)/$(basename "$AMP")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# llm.c: a temporary copy, patched, built as the brief of its CPU trainer says (-O2, OpenMP)
cp -r "$LLMC_DIR/train_gpt2.c" "$LLMC_DIR/llmc" "$TMP/"
sed -i -e 's/dataloader_init(&train_loader, train_tokens, B, T, 0, 1, 1);/dataloader_init(\&train_loader, train_tokens, B, T, 0, 1, 0);/' \
    -e "s/for (int step = 0; step <= 40; step++) {/for (int step = 0; step < $STEPS; step++) {/" \
    -e 's/if (step % 10 == 0) {/if (0) {/' \
    -e 's/printf("step %d: train loss %f (took %f ms)\\n"/printf("step %d: train loss %.9g (took %f ms)\\n"/' \
    "$TMP/train_gpt2.c"
for pattern in 'should_shuffle, 0\|B, T, 0, 1, 0);' "step < $STEPS" 'if (0) {' 'train loss %.9g'; do
    grep -q "$pattern" "$TMP/train_gpt2.c" || { echo "error: could not patch train_gpt2.c ($pattern)"; exit 1; }
done
(cd "$TMP" && "$CC" -O2 -fopenmp train_gpt2.c -lm -o train_gpt2)

# the inputs, where llm.c looks for them (its tiny_shakespeare paths)
python3 "$HERE/make_llmc_inputs.py" "$TMP" "$L" "$NH" "$C"
mkdir -p "$TMP/dev/data/tinyshakespeare"
cp "$TMP/train.bin" "$TMP/dev/data/tinyshakespeare/tiny_shakespeare_train.bin"
cp "$TMP/val.bin" "$TMP/dev/data/tinyshakespeare/tiny_shakespeare_val.bin"

start=$(date +%s)
(cd "$TMP" && OMP_NUM_THREADS=$THREADS ./train_gpt2 > llmc.log 2>&1) || { cat "$TMP/llmc.log"; exit 1; }
mid=$(date +%s)
"$AMP" train --model gpt2 --init-from "$TMP/gpt2_124M.bin" --context 64 --batch 4 --data "$TMP/train.bin" \
    --val-data "$TMP/val.bin" --vocab 50257 --data-order sequential --precision fp32 --optimizer adamw --lr 1e-4 \
    --beta1 0.9 --beta2 0.999 --eps 1e-8 --weight-decay 0 --lr-schedule constant --steps "$STEPS" --no-eval \
    --threads "$THREADS" --quiet --report "$TMP/report" > "$TMP/amp.log" 2>&1 || { cat "$TMP/amp.log"; exit 1; }
end=$(date +%s)

grep '^step [0-9]*: train loss' "$TMP/llmc.log" | sed 's/^step \([0-9]*\): train loss \([^ ]*\).*/\2/' > "$TMP/llmc.txt"
python3 - "$TMP/report/metrics.jsonl" > "$TMP/amp.txt" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("type", "step") == "step" and "loss" in r and "step" in r:
        print(repr(r["loss"]))
PY
python3 - "$TMP/llmc.txt" "$TMP/amp.txt" "$SHAPE" "$((mid - start))" "$((end - mid))" <<'PY'
import sys
llmc = [float(x) for x in open(sys.argv[1])]
amp = [float(x) for x in open(sys.argv[2])]
if len(llmc) != len(amp) or not llmc:
    print("error: llm.c printed %d losses, amp %d" % (len(llmc), len(amp)))
    sys.exit(1)
worst = 0.0
for i, (a, b) in enumerate(zip(llmc, amp)):
    rel = abs(a - b) / abs(a)
    worst = max(worst, rel)
    print("step %2d  llm.c %.9g  amp %.9g  relative %.2e" % (i + 1, a, b, rel))
first = abs(llmc[0] - amp[0]) / abs(llmc[0])
print("shape %s: step 1 relative %.2e (limit 1e-5), worst of %d steps %.2e (limit 1e-4); llm.c %s s, amp %s s"
      % (sys.argv[3], first, len(llmc), worst, sys.argv[4], sys.argv[5]))
ok = first <= 1e-5 and worst <= 1e-4 and llmc[-1] < llmc[0]
print("ok" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
