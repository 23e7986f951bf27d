# Golden tests of `amp train`: JSON results for each precision preset, determinism, the text models,
# and the error paths. The data are generated here: a tiny IDX image set (4x4 images whose label is
# the bright quadrant) and a small text file. Keep it fast (a few seconds).
. "$(dirname "$0")/lib.sh"

# be32 N: four big-endian bytes.
be32() { printf "\\$(printf %o $(($1 >> 24 & 255)))\\$(printf %o $(($1 >> 16 & 255)))\\$(printf %o $(($1 >> 8 & 255)))\\$(printf %o $(($1 & 255)))"; }
# idx_pair PREFIX COUNT OFFSET: PREFIX-images-idx3-ubyte and PREFIX-labels-idx1-ubyte in $TMP/idx;
# image i has label (i % 4) and that quadrant bright, the rest low noise.
idx_pair() {
    img="$TMP/idx/$1-images-idx3-ubyte"
    lab="$TMP/idx/$1-labels-idx1-ubyte"
    { printf '\000\000\010\003'; be32 "$2"; be32 4; be32 4; } >"$img"
    { printf '\000\000\010\001'; be32 "$2"; } >"$lab"
    i=0
    while [ $i -lt "$2" ]; do
        k=$(( (i + $3) % 4 ))
        printf "\\$(printf %o $k)" >>"$lab"
        p=0
        while [ $p -lt 16 ]; do
            q=$(( (p / 8) * 2 + (p % 4) / 2 ))
            if [ $q = $k ]; then v=$(( 150 + (i * 37 + p * 11) % 100 )); else v=$(( (i * 7 + p * 13 + $3) % 80 )); fi
            printf "\\$(printf %o $v)"
            p=$((p + 1))
        done >>"$img"
        i=$((i + 1))
    done
}
mkdir -p "$TMP/idx"
idx_pair train 64 0
idx_pair t10k 32 1

i=0
while [ $i -lt 40 ]; do printf 'the quick brown fox jumps over the lazy dog %d times. ' $i; i=$((i + 1)); done >"$TMP/text.txt"

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

run "$AMP" train --model mlp --data "$TMP/idx" --steps 3 --batch 16 --hidden 16 --detect-anomaly --quiet
expect_rc 0 "--detect-anomaly on a healthy run"
expect_out_has "test accuracy" "human summary"

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
