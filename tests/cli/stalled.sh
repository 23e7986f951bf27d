# The pure presets' stalled updates (amp_train_result.stalled_updates, `amp train --json`'s
# stalled_updates, `amp compare`'s "stalled" column): bf16 keeps 8 significant bits to fp16's 11, so
# at the same learning rate a larger share of bf16-pure's updates falls under half an ulp; presets with
# fp32 weights or masters have no such loss (null); with lr 0 nothing is meant to move (no sample).
. tests/cli/lib.sh

mkdir -p "$TMP/idx"
idx_pair train 256 0
idx_pair t10k 64 1
COMMON="--data $TMP/idx --batch 32 --steps 16 --threads 1 --quiet --json --lr 0.01 --grad-stats-every 1"

stalled() { run "$AMP" train $COMMON "$@"; tail -n 1 "$TMP/out" | jq .stalled_updates; }
f16=$(stalled --precision fp16-pure)
b16=$(stalled --precision bf16-pure)
if awk "BEGIN { exit !($f16 > 0 && $f16 < 1 && $b16 > $f16 && $b16 <= 1) }" 2>/dev/null; then pass; else
    fail "stalled updates: fp16-pure $f16, bf16-pure $b16 (want 0 < fp16 < bf16 <= 1)"; fi
for p in fp32 amp-fp16 fp16-master; do
    got=$(stalled --precision $p)
    if [ "$got" = null ]; then pass; else fail "$p: stalled_updates $got, expected null (fp32 weights or masters)"; fi
done
got=$(run "$AMP" train $COMMON --precision fp16-pure --lr 0; tail -n 1 "$TMP/out" | jq .stalled_updates)
if [ "$got" = null ]; then pass; else fail "lr 0: stalled_updates $got, expected null (no update meant)"; fi
# A smaller learning rate loses more of fp16-pure's updates.
small=$(stalled --precision fp16-pure --lr 0.001)
if awk "BEGIN { exit !($small > $f16) }" 2>/dev/null; then pass; else fail "fp16-pure: lr 0.001 stalls $small, lr 0.01 $f16"; fi

finish
