# Golden tests of `amp train`: JSON results for each precision preset, determinism, the text models,
# and the error paths. The data are generated here: a tiny IDX image set (4x4 images whose label is
# the bright quadrant) and a small text file. Keep it fast (a few seconds).
. "$(dirname "$0")/lib.sh"

mkdir -p "$TMP/idx"
idx_pair train 64 0
idx_pair t10k 32 1

fox_text 40 >"$TMP/text.txt"

# train ARGS...: an mlp run on the tiny set with small layers, JSON out.
train() { run "$AMP" train --model mlp --data "$TMP/idx" --steps 30 --batch 16 --hidden 32 --threads 2 --json "$@"; }

train --precision fp32
expect_rc 0 "fp32 run"
expect_json_eq '[.model, .precision, .scaler, .steps, .epochs, .skipped_steps, .final_scale]' \
    '["mlp","fp32","off",30,8,0,1]' "fp32 JSON"
expect_json_eq '.test_accuracy > 0.5 and .bits_per_char == null and .train_loss < 1.2' 'true' "fp32 learns the quadrants"
expect_json_eq '[.samples_per_sec, .wall_seconds, .test_loss] | map(type == "number") | all' 'true' "fp32 numbers"
expect_json_eq 'keys | length >= 15' 'true' "JSON has every key"
tail -n 1 "$TMP/out" | jq -r .train_loss >"$TMP/loss_a"
expect_err_has "epoch 8/8" "plain progress shows the epochs"
expect_err_has "accuracy" "evaluation line"

train --precision fp32
tail -n 1 "$TMP/out" | jq -r .train_loss >"$TMP/loss_b"
if cmp -s "$TMP/loss_a" "$TMP/loss_b"; then pass; else fail "same seed and threads: different loss"; fi
train --precision fp32 --seed 7
tail -n 1 "$TMP/out" | jq -r .train_loss >"$TMP/loss_c"
if cmp -s "$TMP/loss_a" "$TMP/loss_c"; then fail "another seed gave the same loss"; else pass; fi

train --precision amp-fp16
expect_rc 0 "amp-fp16 run"
expect_json_eq '[.precision, .scaler, .final_scale, .skipped_steps]' '["amp-fp16","dynamic",65536,0]' "amp-fp16 JSON"
expect_json_eq '.test_accuracy > 0.5' 'true' "amp-fp16 learns"

train --precision amp-bf16
expect_rc 0 "amp-bf16 run"
expect_json_eq '[.precision, .scaler, .final_scale]' '["amp-bf16","off",1]' "amp-bf16 JSON"

train --precision fp16-master --quiet
expect_rc 0 "fp16-master run"
expect_json_eq '[.precision, .scaler, .final_scale]' '["fp16-master","dynamic",65536]' "fp16-master JSON"
expect_err_lines 0 "--quiet prints nothing on stderr"

train --precision fp16-pure --scaler static:1024
expect_rc 0 "fp16-pure with a static scale"
expect_json_eq '[.precision, .scaler, .final_scale]' '["fp16-pure","static:1024",1024]' "static scale JSON"

train --precision bf16-pure --accum 2 --clip 1 --optimizer adam --lr 0.01
expect_rc 0 "bf16-pure, accumulation, clipping, adam"
expect_json_eq '[.precision, .optimizer, .accum, .steps]' '["bf16-pure","adam",2,30]' "bf16-pure JSON"

run "$AMP" train --model cnn --data "$TMP/idx" --steps 4 --batch 8 --hidden 16 --threads 2 --precision amp-fp16 --json
expect_rc 0 "cnn run"
expect_json_eq '.model' '"cnn"' "cnn JSON"

# text models with small sizes
run "$AMP" train --model lstm --data "$TMP/text.txt" --steps 10 --batch 4 --hidden 16 --embed 8 --context 16 \
    --eval-batches 2 --threads 2 --json
expect_rc 0 "lstm run"
expect_json_eq '[.model, .precision, .optimizer, .steps, .test_accuracy]' '["lstm","amp-fp16","adamw",10,null]' "lstm JSON"
expect_json_eq '.bits_per_char > 0 and .bits_per_char < 8' 'true' "lstm reports bits/char"
run "$AMP" train --model gpt --data "$TMP/text.txt" --steps 10 --batch 4 --hidden 16 --layers 1 --heads 2 \
    --context 16 --eval-batches 2 --threads 2 --precision amp-bf16 --json
expect_rc 0 "gpt run"
expect_json_eq '[.model, .precision] + [.bits_per_char > 0]' '["gpt","amp-bf16",true]' "gpt JSON"

# --words: the pangram's words seen twice in the training part are " quick", " brown", " fox", " jumps",
# " over", " the", " lazy", " dog", " times" (the bare "the" at the start occurs once): 9 tokens more,
# each with an embedding row (8) and a head row and bias (16 + 1).
lstm_small() { run "$AMP" train --model lstm --data "$TMP/text.txt" --steps 4 --batch 4 --hidden 16 --embed 8 \
    --context 16 --eval-batches 2 --threads 1 --json --quiet "$@"; }
lstm_small
tail -n 1 "$TMP/out" | jq -r .params >"$TMP/params_bytes"
lstm_small --words 20 --checkpoint "$TMP/words.st"
expect_rc 0 "lstm with --words"
expect_json_eq ".params - $(cat "$TMP/params_bytes")" '225' "--words 20 keeps the 9 repeated words"
# bits/char is per byte of held-out text: below the per-token loss in bits, since tokens hold > 1 byte.
expect_json_eq '.bits_per_char > 0 and .bits_per_char < .test_loss / 0.6931471805599453' 'true' "--words bits/char per byte"
lstm_small --words 0
expect_rc 2 "--words 0"
lstm_small --steps 6 --resume "$TMP/words.st"
expect_rc 2 "resuming a word-vocabulary checkpoint with bytes"
expect_err_has "embedding.weight" "names the mismatched tensor"
lstm_small --steps 6 --resume "$TMP/words.st" --words 20
expect_rc 0 "resuming with the same --words"

run "$AMP" train --model mlp --data "$TMP/idx" --steps 3 --batch 16 --hidden 16 --detect-anomaly --quiet
expect_rc 0 "--detect-anomaly on a healthy run"
expect_out_has "test accuracy" "human summary"

# checkpoints: 2N steps in one run and N steps + resume + N steps end in the same bytes (weights,
# optimizer, scaler, generators, loss bookkeeping, gradient statistics), and report the same JSON
# numbers except time; the resumed half runs on another thread count. A constant learning rate: the
# image models' default cosine decay spans the run's total, so a 5-step run is not the first half of
# a 10-step one (a 10-step run stopped after a --checkpoint-every checkpoint would be).
nums='del(.wall_seconds, .samples_per_sec, .threads, .peak_rss_bytes, .arena_peak_bytes, .scratch_peak_bytes)' # time and process memory
train --precision amp-fp16 --steps 10 --grad-stats-every 3 --lr-schedule constant --checkpoint "$TMP/full.st"
expect_rc 0 "10 steps with a checkpoint"
tail -n 1 "$TMP/out" | jq -c "$nums" >"$TMP/json_full"
train --precision amp-fp16 --steps 5 --grad-stats-every 3 --lr-schedule constant --checkpoint "$TMP/half.st" --quiet
expect_rc 0 "5 steps with a checkpoint"
train --precision amp-fp16 --steps 10 --grad-stats-every 3 --lr-schedule constant --resume "$TMP/half.st" \
    --checkpoint "$TMP/resumed.st" --threads 1
expect_rc 0 "resume to 10 steps"
tail -n 1 "$TMP/out" | jq -c "$nums" >"$TMP/json_resumed"
if cmp -s "$TMP/json_full" "$TMP/json_resumed"; then pass; else fail "resume: JSON differs: $(cat "$TMP/json_full") vs $(cat "$TMP/json_resumed")"; fi
if cmp -s "$TMP/full.st" "$TMP/resumed.st"; then pass; else fail "resume: the checkpoints of 10 and 5+5 steps differ"; fi
run "$AMP" inspect "$TMP/full.st" --json
expect_rc 0 "inspect the checkpoint"
tail -n 1 "$TMP/out" | jq -S 'del(.file)' >"$TMP/inspect_full"
run "$AMP" inspect "$TMP/resumed.st" --json
tail -n 1 "$TMP/out" | jq -S 'del(.file)' >"$TMP/inspect_resumed"
if cmp -s "$TMP/inspect_full" "$TMP/inspect_resumed"; then pass; else fail "resume: amp inspect --json differs"; fi
expect_out_has '"train.model"' "the checkpoint carries the run's state"
expect_json_eq '.metadata["amp.step"]' '"10"' "the checkpoint's step"

# the same for a text model with AdamW and accumulation, resumed from a --checkpoint-every run
lstm() { run "$AMP" train --model lstm --data "$TMP/text.txt" --batch 4 --hidden 16 --embed 8 --context 16 --eval-batches 2 \
    --accum 2 --threads 2 --json --quiet "$@"; }
lstm --steps 8 --checkpoint "$TMP/lstm_full.st"
expect_rc 0 "lstm 8 steps"
tail -n 1 "$TMP/out" | jq -c "$nums" >"$TMP/json_full"
lstm --steps 5 --checkpoint "$TMP/lstm_every.st" --checkpoint-every 3
expect_rc 0 "lstm --checkpoint-every"
run "$AMP" inspect "$TMP/lstm_every.st" --json
expect_rc 0 "the --checkpoint-every file is a valid safetensors file"
expect_json_eq '.metadata["amp.step"]' '"5"' "the last checkpoint is the end's"
lstm --steps 8 --resume "$TMP/lstm_every.st" --checkpoint "$TMP/lstm_resumed.st" --threads 3
expect_rc 0 "lstm resume from step 5"
tail -n 1 "$TMP/out" | jq -c "$nums" >"$TMP/json_resumed"
if cmp -s "$TMP/json_full" "$TMP/json_resumed"; then pass; else fail "lstm resume: JSON differs: $(cat "$TMP/json_full") vs $(cat "$TMP/json_resumed")"; fi
if cmp -s "$TMP/lstm_full.st" "$TMP/lstm_resumed.st"; then pass; else fail "lstm resume: the checkpoints differ"; fi

# a checkpoint that does not fit: exit 2 and one line
train --precision amp-fp16 --hidden 16 --steps 12 --resume "$TMP/half.st"
expect_rc 2 "resume with another layer size"
expect_err_has "half.st" "the shape mismatch names the file"
expect_err_lines 1 "the shape mismatch is one line"
lstm --steps 12 --resume "$TMP/half.st"
expect_rc 2 "resume an mlp checkpoint into an lstm"
expect_err_has "it is a mlp checkpoint, this run trains lstm" "model mismatch message"
expect_err_lines 1 "model mismatch is one line"
train --precision fp32 --steps 12 --resume "$TMP/half.st"
expect_rc 2 "resume with another precision"
expect_err_lines 1 "precision mismatch is one line"
train --precision amp-fp16 --steps 5 --resume "$TMP/half.st"
expect_rc 2 "resume at the run's end"
expect_err_has "this run has 5 steps" "nothing left to train"
train --precision amp-fp16 --steps 12 --resume "$TMP/nothing.st"
expect_rc 2 "resume from a missing file"
expect_err_lines 1 "missing resume file is one line"
train --steps 4 --checkpoint-every 2
expect_rc 2 "--checkpoint-every without --checkpoint"

# gradient statistics: fractions in [0, 1]; a run that drives the loss to 0 has gradients below
# fp16's range, which the dynamic scale (>= 1) rescues: unscaled underflow >= scaled underflow
gs='[.grad_underflow_fp16_unscaled, .grad_underflow_fp16_scaled, .grad_overflow_fp16_scaled]'
train --precision amp-fp16 --steps 40 --lr 0.2 --grad-stats-every 5
expect_rc 0 "gradient statistics run"
expect_json_eq "$gs | map(type == \"number\" and . >= 0 and . <= 1) | all" 'true' "fractions in [0, 1]"
expect_json_eq '.final_scale >= 1 and .grad_underflow_fp16_unscaled > .grad_underflow_fp16_scaled' 'true' \
    "the scale rescues underflowing gradients"
train --precision fp32
expect_json_eq "$gs | map(type == \"number\" and . >= 0 and . <= 1) | all" 'true' "default schedule: fractions in [0, 1]"
train --precision fp32 --grad-stats-every 0
expect_json_eq "$gs" '[null,null,null]' "--grad-stats-every 0: no statistics"

# errors: exit 2 and one line
run "$AMP" train --model mlp --data "$TMP/nowhere" --steps 1
expect_rc 2 "missing data"
expect_err_has "nowhere/train-images-idx3-ubyte" "missing data names the file"
expect_err_lines 1 "missing data is one line"
run "$AMP" train --lr abc
expect_rc 2 "--lr abc"
expect_err_has "--lr wants a number, not 'abc'" "--lr abc message"
expect_err_lines 1 "--lr abc is one line"
run "$AMP" train --model foo
expect_rc 2 "--model foo"
expect_err_has "unknown model 'foo'" "--model foo message"
run "$AMP" train --precision fp8
expect_rc 2 "--precision fp8"
expect_err_has "unknown precision 'fp8'" "--precision fp8 message"
run "$AMP" train --optimizer lion
expect_rc 2 "--optimizer lion"
run "$AMP" train --scaler static:0
expect_rc 2 "--scaler static:0"
run "$AMP" train --steps 0
expect_rc 2 "--steps 0"
run "$AMP" train --frobnicate
expect_rc 2 "unknown flag"
expect_err_has "try \`amp train --help\`" "usage hint"
run "$AMP" train --model mlp --data "$TMP/idx" --batch 100 --steps 1
expect_rc 2 "batch larger than the data"
run "$AMP" train --help
expect_rc 0 "--help"
expect_out_has "usage: amp train" "--help prints usage"

finish
