# Golden tests of the two memory options of `amp train`: --recompute (gpt, gpt2: blocks recomputed in
# backward) gives the same losses as without; --param-dtype bf16 (bf16 parameters, fp32 masters)
# runs under amp-bf16 only, resumes to the same result as one uninterrupted run, round-trips llm.c's
# bf16 file exactly, and is refused with one line elsewhere; the summary reports the memory.
. "$(dirname "$0")/lib.sh"

mat_lines 200 >"$TMP/text.txt"
GPT2="--model gpt2 --layers 2 --hidden 32 --heads 2 --context 16 --batch 2 --eval-batches 2 --threads 1 --sample-tokens 0"
summary() { sed -n '1,2p' "$TMP/out"; } # the run and its losses (not the timing or memory lines)

for p in fp32 amp-bf16 amp-fp16; do
    run "$AMP" train $GPT2 --precision $p --steps 3 --data "$TMP/text.txt" --quiet
    expect_rc 0 "gpt2 $p"
    summary >"$TMP/plain"
    run "$AMP" train $GPT2 --precision $p --steps 3 --data "$TMP/text.txt" --quiet --recompute
    expect_rc 0 "gpt2 $p --recompute"
    if summary | cmp -s - "$TMP/plain"; then pass; else fail "gpt2 $p: --recompute changed the losses"; fi
done
expect_out_has "memory: peak RSS" "the summary reports the memory"
run "$AMP" train --model gpt --layers 1 --hidden 16 --heads 2 --context 8 --batch 2 --eval-batches 2 --threads 1 \
    --precision amp-bf16 --steps 2 --data "$TMP/text.txt" --quiet --recompute --sample-tokens 0
expect_rc 0 "gpt --recompute"

# --param-dtype bf16: 4 steps in one run equal 2 steps and a resume to 4
run "$AMP" train $GPT2 --precision amp-bf16 --param-dtype bf16 --steps 4 --data "$TMP/text.txt" --quiet
expect_rc 0 "--param-dtype bf16"
summary >"$TMP/full"
run "$AMP" train $GPT2 --precision amp-bf16 --param-dtype bf16 --steps 2 --data "$TMP/text.txt" --quiet \
    --checkpoint "$TMP/ck.safetensors"
expect_rc 0 "--param-dtype bf16, 2 steps"
run "$AMP" train $GPT2 --precision amp-bf16 --param-dtype bf16 --steps 4 --data "$TMP/text.txt" --quiet \
    --resume "$TMP/ck.safetensors" --recompute
expect_rc 0 "--param-dtype bf16, resumed to 4 steps with --recompute"
if summary | cmp -s - "$TMP/full"; then pass; else fail "the resumed bf16-parameter run differs from the full one"; fi
run "$AMP" train $GPT2 --precision amp-bf16 --steps 4 --data "$TMP/text.txt" --quiet --resume "$TMP/ck.safetensors"
expect_rc 2 "an fp32-parameter run does not resume a bf16-parameter checkpoint"
expect_err_lines 1 "its error is one line"

# llm.c's bf16 file (version 5) holds the bf16 parameters exactly: loaded and saved again with lr 0,
# the same bytes
run "$AMP" train $GPT2 --precision amp-bf16 --param-dtype bf16 --steps 2 --data "$TMP/text.txt" --quiet \
    --save-llmc "$TMP/a.bin" --save-llmc-version 5
expect_rc 0 "--param-dtype bf16 --save-llmc-version 5"
run "$AMP" train --model gpt2 --init-from "$TMP/a.bin" --context 16 --batch 2 --threads 1 --sample-tokens 0 --no-eval \
    --precision amp-bf16 --param-dtype bf16 --steps 1 --lr 0 --data "$TMP/text.txt" --quiet \
    --save-llmc "$TMP/b.bin" --save-llmc-version 5
expect_rc 0 "--init-from a version 5 file into bf16 parameters"
if cmp -s "$TMP/a.bin" "$TMP/b.bin"; then pass; else fail "the version 5 file changed through bf16 parameters at lr 0"; fi

# refusals: one line, exit status 2
for p in fp32 amp-fp16 fp16-master fp16-pure bf16-pure; do
    run "$AMP" train $GPT2 --precision $p --param-dtype bf16 --steps 1 --data "$TMP/text.txt"
    expect_rc 2 "--param-dtype bf16 with $p"
    expect_err_has "needs --precision amp-bf16" "--param-dtype bf16 with $p names the preset it needs"
    expect_err_lines 1 "--param-dtype bf16 with $p: one line"
done
run "$AMP" train $GPT2 --precision amp-bf16 --param-dtype fp8 --steps 1 --data "$TMP/text.txt"
expect_rc 2 "--param-dtype fp8"
expect_err_lines 1 "--param-dtype fp8: one line"
run "$AMP" train --model mlp --recompute --steps 1
expect_rc 2 "--recompute with the mlp"
expect_err_has "gpt and gpt2 only" "--recompute names the models it applies to"
finish
