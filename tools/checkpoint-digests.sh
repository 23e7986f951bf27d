#!/bin/sh
# Trains each built-in model (gpt2 at 2 x 64) a few steps in fp32, amp-bf16 and amp-fp16 at 1 and 2 threads on every
# SIMD path this CPU has, and prints one line per run: the checkpoint's SHA-256 and its settings.
# A change that must not alter what amp computes (a refactor, a new file layout) keeps this output
# byte for byte:  sh tools/checkpoint-digests.sh > before.txt; ...; sh tools/checkpoint-digests.sh | diff before.txt -
#   AMP=build/amp  STEPS=6  ISAS="ref avx2 avx512" (paths the CPU lacks are skipped)
# Every hyperparameter whose default has changed is pinned (PINNED), so the output stays comparable
# across such changes: the image models' learning-rate schedule became cosine.
set -eu
AMP=${AMP:-build/amp}
STEPS=${STEPS:-6}
ISAS=${ISAS:-"ref avx2 avx512"}
PINNED="--lr-schedule constant"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
have=$("$AMP" info | sed -n 's/^simd paths: //p')
# the AVX-512 path multiplies bf16 two ways where the CPU has AVX512-BF16, three with AMX (amp/gemm.h):
# check each
dot=$("$AMP" info | grep -c '^bf16 products (avx512)' || true)
amx=$("$AMP" info | grep -c '^bf16 products (avx512).*AMX tiles usable' || true)
for isa in $ISAS; do
    case " $have " in *" $isa "*) ;; *) echo "# $isa: not on this CPU, skipped"; continue ;; esac
    methods=fma
    [ "$isa" = avx512 ] && [ "$dot" -gt 0 ] && methods="fma dot"
    [ "$isa" = avx512 ] && [ "$amx" -gt 0 ] && methods="fma dot amx"
    for method in $methods; do
    for model in mlp cnn lstm gpt gpt2; do
        case $model in
        mlp|cnn) size="--batch 32" ;;
        lstm) size="--batch 8 --context 32" ;;
        gpt) size="--batch 8 --context 32" ;;
        gpt2) size="--layers 2 --hidden 64 --heads 4 --batch 8 --context 32" ;;
        esac
        for precision in fp32 amp-bf16 amp-fp16; do
            for threads in 1 2; do
                ck="$tmp/ck.safetensors"
                # shellcheck disable=SC2086
                AMP_ISA=$isa AMP_GEMM_BF16=$method "$AMP" train --model "$model" --precision "$precision" --threads "$threads" \
                    --steps "$STEPS" --seed 1 --no-eval --quiet $size $PINNED --checkpoint "$ck" >/dev/null
                echo "$(sha256sum < "$ck" | cut -c1-64) $isa bf16=$method $model $precision threads=$threads"
            done
        done
    done
    done
done
