# Golden tests of the fp8 presets on the command line: `amp train --precision fp8-*` on the mlp and
# the gpt (JSON keys, the per-layer table, --fp8-all-layers), checkpoints and resume of fp8-delayed,
# the refusal of another recipe's checkpoint, mxfp8's --mx-scale floor (and the refusal of its
# checkpoint under the default rule), `amp compare` over the recipes (its fp8 summary lines and
# report), fp8-delayed's history, amax algorithm, margin and amax init (the scales, the checkpoint,
# the refusal), two data-parallel ranks under mpirun, and the usage errors. Keep it fast (a few seconds).
. "$(dirname "$0")/lib.sh"

mkdir -p "$TMP/idx"
idx_pair train 64 0
idx_pair t10k 32 1
fox_text 40 >"$TMP/text.txt"

gpt() { run "$AMP" train --model gpt --data "$TMP/text.txt" --layers 2 --hidden 32 --heads 2 --context 16 --batch 4 \
    --eval-batches 2 --threads 2 "$@"; }

for p in fp8-delayed fp8-current mxfp8 fp8-block fp8-noscale; do
    run "$AMP" train --model mlp --data "$TMP/idx" --steps 20 --batch 16 --hidden 32 --threads 2 --json --precision $p
    expect_rc 0 "mlp $p"
    expect_json_eq '[.precision, .scaler, (.fp8 | length), .fp8[0].layer]' "[\"$p\",\"off\",1,\"3\"]" "mlp $p: the middle Linear in fp8"
done
run "$AMP" train --model mlp --data "$TMP/idx" --steps 20 --batch 16 --hidden 32 --threads 2 --json --precision fp8-current
expect_json_eq '.test_accuracy > 0.5' 'true' "mlp fp8-current learns the quadrants"

gpt --steps 4 --precision fp8-delayed --quiet
expect_rc 0 "gpt fp8-delayed"
expect_out_has "fp8 casts (fp8-delayed, 7 layers)" "the table's title"
expect_out_has "h.0.attn.c_proj" "the first fp8 layer"
if grep -q "lm_head" "$TMP/out"; then fail "lm_head is bf16 by default"; else pass; fi
gpt --steps 2 --precision mxfp8 --fp8-all-layers --quiet --json
expect_json_eq '[(.fp8 | length), .fp8[0].layer, .fp8[8].layer]' '[9,"h.0.attn.c_attn","lm_head"]' "--fp8-all-layers"

# resume: 6 steps == 3 + 3, bit for bit (the checkpoints are the same file)
gpt --steps 6 --precision fp8-delayed --quiet --no-eval --checkpoint "$TMP/full.st"
expect_rc 0 "6 steps"
gpt --steps 3 --precision fp8-delayed --quiet --no-eval --checkpoint "$TMP/half.st"
gpt --steps 6 --precision fp8-delayed --quiet --no-eval --resume "$TMP/half.st" --checkpoint "$TMP/resumed.st"
expect_rc 0 "resumed"
if cmp -s "$TMP/full.st" "$TMP/resumed.st"; then pass; else fail "6 steps and 3 + 3 steps differ"; fi
gpt --steps 6 --precision fp8-current --quiet --no-eval --resume "$TMP/half.st"
expect_rc 2 "another recipe's checkpoint"
expect_err_has "it was trained in fp8-delayed, this run uses fp8-current" "the refusal names both"
expect_err_lines 1 "one line"

# mxfp8's FLOOR scale rule: recorded with the precision, so the default (RCEIL) refuses its
# checkpoint and FLOOR resumes it; the flag's usage errors
gpt --steps 2 --precision mxfp8 --mx-scale floor --quiet --no-eval --json --checkpoint "$TMP/floor.st"
expect_rc 0 "mxfp8 --mx-scale floor"
expect_json_eq '[.fp8[] | .x[4]] | add > 0' 'true' "FLOOR saturates the largest values of some blocks"
gpt --steps 2 --precision mxfp8 --quiet --no-eval --json
expect_json_eq '[.fp8[] | .x[4], .w[4], .dy[4]] | add' '0' "RCEIL saturates nothing"
gpt --steps 4 --precision mxfp8 --quiet --no-eval --resume "$TMP/floor.st"
expect_rc 2 "an RCEIL run refuses a FLOOR checkpoint"
expect_err_has "it was trained in mxfp8 with FLOOR scales, this run uses mxfp8" "the refusal names both rules"
gpt --steps 4 --precision mxfp8 --mx-scale floor --quiet --no-eval --resume "$TMP/floor.st"
expect_rc 0 "FLOOR resumes FLOOR"
gpt --steps 2 --precision fp8-block --mx-scale floor
expect_rc 2 "--mx-scale floor on another preset"
expect_err_has "--mx-scale floor needs --precision mxfp8" "names the preset it needs"
gpt --steps 2 --precision mxfp8 --mx-scale nearest
expect_rc 2 "--mx-scale nearest"
expect_err_has "--mx-scale wants floor or rceil" "lists the rules"

# fp8-delayed's settings: the margin divides every scale by 2^M (TE's rule), a checkpoint keeps the
# settings (another history is refused), and they apply to fp8-delayed only
gpt --steps 3 --precision fp8-delayed --quiet --no-eval --json
expect_rc 0 "fp8-delayed, TE's defaults"
cp "$TMP/out" "$TMP/default.json"
gpt --steps 3 --precision fp8-delayed --fp8-margin 2 --quiet --no-eval --json
expect_rc 0 "--fp8-margin 2"
ratio=$(tail -n 1 "$TMP/default.json" | jq '.fp8[0].x[3]')
ratio=$(tail -n 1 "$TMP/out" | jq --argjson d "$ratio" '$d / .fp8[0].x[3]')
if [ "$ratio" = "4" ]; then pass; else fail "a margin of 2 gives the scale over 4, got a ratio of $ratio"; fi
gpt --steps 3 --precision fp8-delayed --fp8-history 16 --fp8-amax most_recent --quiet --no-eval --checkpoint "$TMP/h16.st"
expect_rc 0 "--fp8-history 16 --fp8-amax most_recent"
gpt --steps 4 --precision fp8-delayed --quiet --no-eval --resume "$TMP/h16.st"
expect_rc 2 "TE's defaults refuse a history-16 checkpoint"
expect_err_has "it was trained in fp8-delayed (history 16, most recent, margin 0), this run uses fp8-delayed" "names both settings"
gpt --steps 4 --precision fp8-delayed --fp8-history 16 --fp8-amax most_recent --quiet --no-eval --resume "$TMP/h16.st"
expect_rc 0 "the same settings resume"
gpt --steps 4 --precision fp8-delayed --fp8-history 1024 --quiet --no-eval --resume "$TMP/half.st"
expect_rc 0 "an explicit 1024 is TE's default and resumes a default checkpoint"
gpt --steps 2 --precision fp8-current --fp8-margin 1
expect_rc 2 "--fp8-margin on another preset"
expect_err_has "need --precision fp8-delayed" "names the preset"
gpt --steps 2 --precision fp8-delayed --fp8-amax mean
expect_rc 2 "--fp8-amax mean"
gpt --steps 2 --precision fp8-delayed --fp8-margin 128
expect_rc 2 "--fp8-margin 128"

# torchao's amax init: the first step casts with the scales of its own amaxes where TE's fresh state
# casts with 1 (which flushes small values); resume is bit for bit; the checkpoint keeps the setting
gpt --steps 1 --precision fp8-delayed --quiet --no-eval --json
expect_json_eq '[.fp8[] | .x[3], .w[3], .dy[3]] | unique' '[1]' "TE's first step: every scale 1"
expect_json_eq '[.fp8[] | .x[5] + .w[5]] | add > 0' 'true' "TE's first step flushes some small values"
gpt --steps 1 --precision fp8-delayed --fp8-amax-init --quiet --no-eval --json
expect_rc 0 "--fp8-amax-init"
expect_json_eq '[.fp8[] | .x, .w | (.[3] * .[0] / 448 - 1) | fabs < 1e-6] | all' 'true' \
    "the first step's x and W scales are 448 over their own amaxes"
expect_json_eq '[.fp8[] | .x[5] + .w[5]] | add' '0' "nothing flushed at the own-amax scales"
gpt --steps 6 --precision fp8-delayed --fp8-amax-init --quiet --no-eval --checkpoint "$TMP/init-full.st"
gpt --steps 3 --precision fp8-delayed --fp8-amax-init --quiet --no-eval --checkpoint "$TMP/init-half.st"
gpt --steps 6 --precision fp8-delayed --fp8-amax-init --quiet --no-eval --resume "$TMP/init-half.st" --checkpoint "$TMP/init-resumed.st"
expect_rc 0 "--fp8-amax-init resumed"
if cmp -s "$TMP/init-full.st" "$TMP/init-resumed.st"; then pass; else fail "amax init: 6 steps and 3 + 3 steps differ"; fi
gpt --steps 6 --precision fp8-delayed --quiet --no-eval --resume "$TMP/init-half.st"
expect_rc 2 "TE's defaults refuse an amax-init checkpoint"
expect_err_has "it was trained in fp8-delayed (history 1024, max, margin 0, amax init), this run uses fp8-delayed" "names the setting"
gpt --steps 2 --precision mxfp8 --fp8-amax-init
expect_rc 2 "--fp8-amax-init on another preset"
expect_err_has "--fp8-amax-init need --precision fp8-delayed" "names the preset"

run "$AMP" compare --model gpt --data "$TMP/text.txt" --layers 1 --hidden 32 --heads 2 --context 16 --batch 4 \
    --eval-batches 2 --threads 2 --steps 3 --runs amp-bf16,fp8-delayed,fp8-block,fp8-delayed/amax-init --quiet \
    --report "$TMP/rep"
expect_rc 0 "compare over recipes"
expect_out_has "fp8 3 layers: x sat" "compare's fp8 summary"
expect_out_has "fp8-delayed/amax-init  fp8 3 layers" "compare runs fp8-delayed with the amax init beside it"
run "$AMP" compare --model gpt --data "$TMP/text.txt" --steps 2 --runs mxfp8/amax-init
expect_rc 2 "the amax init on another preset in --runs"
if grep -q "FP8 casts" "$TMP/rep/index.html" && grep -q '"type": "fp8"' "$TMP/rep/metrics.jsonl"; then pass; else
    fail "the report lacks the fp8 table or records"; fi

# Data parallel (when amp has MPI and mpirun is here, not under the sanitizers): two ranks of
# fp8-delayed train and stay replicas, with the amax all-reduce in every step (its values are tested
# in tests/test_fp8_train.c through a recording communicator).
if "$AMP" info | grep -q '^mpi: yes' && command -v mpirun >/dev/null 2>&1 &&
    case "${EXAMPLE_CFLAGS:-}" in *sanitize*) false ;; *) true ;; esac; then
    run mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2 "$AMP" train --model mlp \
        --data "$TMP/idx" --steps 6 --batch 16 --hidden 32 --threads 1 --quiet --json --precision fp8-delayed \
        --check-replicas 1
    expect_rc 0 "2 ranks of fp8-delayed stay replicas"
    expect_json_eq '[.ranks, (.fp8 | length)]' '[2,1]' "2-rank fp8 JSON"
    # the amax init all-reduces the first casts' amaxes: the ranks start from the same scales
    run mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2 "$AMP" train --model mlp \
        --data "$TMP/idx" --steps 6 --batch 16 --hidden 32 --threads 1 --quiet --json --precision fp8-delayed \
        --fp8-amax-init --check-replicas 1
    expect_rc 0 "2 ranks of fp8-delayed with the amax init stay replicas"
fi

run "$AMP" train --precision fp8
expect_rc 2 "unknown precision"
expect_err_has "fp8-delayed, fp8-current, mxfp8, fp8-block, fp8-noscale" "the error lists the fp8 presets"
finish
