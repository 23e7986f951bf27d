# Golden tests of `amp compare` and of the reports (`amp train --report DIR`, `amp compare --report DIR`)
# on a tiny generated IDX set (4x4 images whose label is the bright quadrant). Keep it fast.
. "$(dirname "$0")/lib.sh"

mkdir -p "$TMP/idx"
idx_pair train 64 0
idx_pair t10k 32 1

# is_png FILE: non-empty with the PNG signature; is_svg FILE: non-empty, an <svg> element.
is_png() { [ -s "$1" ] && [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; }
is_svg() { [ -s "$1" ] && grep -q '<svg' "$1"; }
# expect_report DIR LABEL: metrics, index.html and the three plots as PNG and SVG
expect_report() {
    for f in metrics.jsonl index.html; do
        if [ -s "$1/$f" ]; then pass; else fail "$2: $f missing or empty"; fi
    done
    for p in loss scale grad_hist act_hist; do
        if is_png "$1/$p.png"; then pass; else fail "$2: $p.png is not a PNG"; fi
        if is_svg "$1/$p.svg"; then pass; else fail "$2: $p.svg is not an SVG"; fi
        if grep -qF "$p.png" "$1/index.html"; then pass; else fail "$2: index.html does not show $p.png"; fi
    done
    if jq -e . "$1/metrics.jsonl" >/dev/null 2>&1; then pass; else fail "$2: metrics.jsonl lines are not JSON"; fi
}

compare() { run "$AMP" compare --model mlp --data "$TMP/idx" --steps 12 --batch 16 --hidden 16 --threads 2 "$@"; }

compare --json
expect_rc 0 "compare, default runs"
expect_out_has "uflow@1" "table header"
expect_out_has "amp-fp16/dynamic" "table row"
tail -n 5 "$TMP/out" >"$TMP/json"
if [ "$(jq -s length "$TMP/json" 2>/dev/null)" = 5 ]; then pass; else fail "--json: the last 5 lines are not 5 JSON objects"; fi
got=$(jq -s -c 'map([.precision, .scaler])' "$TMP/json")
want='[["fp32","off"],["amp-fp16","dynamic"],["amp-fp16","off"],["amp-bf16","off"],["fp16-pure","off"]]'
if [ "$got" = "$want" ]; then pass; else fail "default runs: $got"; fi
if [ "$(jq -s -c 'map(.steps == 12 and (.test_accuracy | type) == "number") | all' "$TMP/json")" = true ]; then pass; else fail "--json values"; fi
# the same seed: fp32 here equals `amp train --precision fp32`
fp32_loss=$(jq -s -r '.[0].train_loss' "$TMP/json")
run "$AMP" train --model mlp --data "$TMP/idx" --steps 12 --batch 16 --hidden 16 --threads 2 --precision fp32 --json
if [ "$(tail -n 1 "$TMP/out" | jq -r .train_loss)" = "$fp32_loss" ]; then pass; else fail "compare's fp32 run differs from amp train's"; fi
# --help promises the keys of `amp train --json`: each object has exactly those, in the same order,
# and "run" before them
train_keys=$(tail -n 1 "$TMP/out" | jq -c 'keys_unsorted')
got=$(jq -s -c "map(keys_unsorted == [\"run\"] + $train_keys) | all" "$TMP/json")
if [ "$got" = true ]; then pass; else
    fail "--json keys $(jq -s -c '.[0] | keys_unsorted' "$TMP/json"), amp train --json's $train_keys"; fi

compare --runs fp32,fp16-pure/static:1024 --json --quiet
expect_rc 0 "--runs subset"
expect_err_lines 0 "--quiet"
got=$(tail -n 2 "$TMP/out" | jq -s -c 'map([.precision, .scaler, .final_scale])')
if [ "$got" = '[["fp32","off",1],["fp16-pure","static:1024",1024]]' ]; then pass; else fail "--runs subset: $got"; fi

compare --runs fp32,amp-fp16/dynamic --report "$TMP/rep/compare" --quiet
expect_rc 0 "compare --report"
expect_report "$TMP/rep/compare" "compare --report"
got=$(jq -s -c '[(map(select(.type == "step")) | map(.run) | unique), (map(select(.type == "summary")) | length)]' "$TMP/rep/compare/metrics.jsonl")
if [ "$got" = '[["amp-fp16/dynamic","fp32"],2]' ]; then pass; else fail "metrics.jsonl runs: $got"; fi
if [ "$(jq -s -c 'map(select(.type == "step" and .run == "fp32")) | map(.step) == [range(1; 13)]' "$TMP/rep/compare/metrics.jsonl")" = true ]; then pass; else fail "metrics.jsonl: one step line per step"; fi
if [ "$(jq -s -c 'map(select(.type == "step")) | map(has("loss", "scale", "skipped")) | all' "$TMP/rep/compare/metrics.jsonl")" = true ]; then pass; else fail "step lines lack loss/scale/skipped"; fi
if [ "$(jq -s -c 'map(select(.type == "eval")) | length > 0' "$TMP/rep/compare/metrics.jsonl")" = true ]; then pass; else fail "no eval lines"; fi

# The activation-gradient histogram and the per-op counts agree on every sampled step: the bins hold
# every nonzero value (count - zeros, no inf/NaN here), and the underflows (|g| <= 2^-25) lie between
# the bins below 2^-25 and those up to it (2^-25 itself is bin -25).
agree=$(jq -s -c 'map(select(.type == "grad_hist")) | map(
    ([.act_log2_bins[][1]] | add) as $binned
    | ([.act_by_op[] | .[0] - .[1]] | add) as $nonzero
    | ([.act_by_op[] | .[2]] | add) as $under
    | ([.act_log2_bins[] | select(.[0] <= -26) | .[1]] | add // 0) as $below
    | ([.act_log2_bins[] | select(.[0] <= -25) | .[1]] | add // 0) as $upto
    | $binned == $nonzero and $below <= $under and $under <= $upto and $binned > 0) | (length > 0 and all)' \
    "$TMP/rep/compare/metrics.jsonl")
if [ "$agree" = true ]; then pass; else fail "act_log2_bins disagree with act_by_op"; fi

run "$AMP" train --model mlp --data "$TMP/idx" --steps 8 --batch 16 --hidden 16 --threads 2 --quiet --report "$TMP/rep/train"
expect_rc 0 "train --report"
expect_report "$TMP/rep/train" "train --report"

# errors: exit 2 (bad usage) or 1 (cannot write), one line
compare --runs fp32,fp8
expect_rc 2 "--runs with an unknown preset"
expect_err_lines 1 "--runs error is one line"
compare --runs amp-fp16/sometimes
expect_rc 2 "--runs with an unknown scaler"
compare --frobnicate
expect_rc 2 "unknown flag"
expect_err_has "try \`amp compare --help\`" "usage hint"
expect_err_lines 1 "unknown flag is one line"
compare --steps 0
expect_rc 2 "--steps 0"
compare --report ""
expect_rc 2 "--report ''"
expect_err_lines 1 "--report '' is one line"
: >"$TMP/file"
compare --report "$TMP/file"
expect_rc 2 "--report names a file"
expect_err_lines 1 "--report FILE is one line"
run "$AMP" train --model mlp --data "$TMP/idx" --steps 2 --batch 16 --hidden 16 --report "$TMP/file/sub"
expect_rc 1 "train --report under a file"
expect_err_lines 1 "train --report under a file is one line"
# a directory that cannot be written in is refused before anything is trained (the report directory
# itself is made only when the run has started; root writes anywhere)
if [ "$(id -u)" != 0 ]; then
    mkdir -p "$TMP/ro" && chmod 555 "$TMP/ro"
    run "$AMP" train --model mlp --data "$TMP/idx" --steps 2 --batch 16 --hidden 16 --report "$TMP/ro/sub"
    expect_rc 1 "train --report in a read-only directory"
    expect_err_lines 1 "train --report in a read-only directory is one line"
    expect_err_has "cannot create the report directory" "train --report in a read-only directory says why"
    chmod 755 "$TMP/ro"
fi
compare --data "$TMP/nowhere"
expect_rc 2 "missing data"
expect_err_lines 2 "missing data: the run line and one error line"
# gpt2's flags as amp train takes them: --size (its sizes, then --layers etc. override them), --init-from
i=0
while [ $i -lt 100 ]; do echo "line $i: the cat sat on the mat."; i=$((i + 1)); done >"$TMP/text.txt"
G2="--model gpt2 --size 350m --layers 1 --context 16 --batch 2 --steps 1 --threads 1 --data $TMP/text.txt --eval-batches 1"
run "$AMP" compare $G2 --runs fp32 --json --quiet
expect_rc 0 "compare --size 350m"
got=$(grep '^{' "$TMP/out" | jq .params)
# one block of 350m's width (12 C^2 + 13 C parameters at C = 1024) and its embeddings
if [ "$got" -gt $((12 * 1024 * 1024 + 13 * 1024)) ]; then pass; else fail "compare --size 350m --layers 1: $got parameters"; fi
run "$AMP" train $G2 --no-eval --sample-tokens 0 --json --quiet
if [ "$(tail -n 1 "$TMP/out" | jq .params)" = "$got" ]; then pass; else fail "train and compare differ on --size"; fi
run "$AMP" compare $(echo "$G2" | sed 's/350m/124m/') --runs fp32 --json --quiet
if [ "$(grep '^{' "$TMP/out" | jq .params)" -lt "$got" ]; then pass; else fail "compare --size 124m is not smaller than 350m"; fi
run "$AMP" compare $G2 --runs fp32 --quiet --save-llmc "$TMP/x.bin"
expect_rc 2 "compare takes no --save-llmc"
run "$AMP" train $G2 --no-eval --sample-tokens 0 --quiet --save-llmc "$TMP/g2.bin"
expect_rc 0 "an llm.c file to start from"
run "$AMP" compare --model gpt2 --init-from "$TMP/g2.bin" --context 16 --batch 2 --steps 1 --threads 1 --data "$TMP/text.txt" \
    --eval-batches 1 --runs fp32,amp-bf16 --recompute --json --quiet
expect_rc 0 "compare --init-from --recompute"
if [ "$(grep '^{' "$TMP/out" | jq .params | sort -u)" = "$got" ]; then pass; else fail "compare --init-from: not the file's model"; fi
compare --size 124m
expect_rc 2 "--size with the mlp"
expect_err_has "gpt2 only" "--size names the model it applies to"
compare --recompute
expect_rc 2 "--recompute with the mlp"
run "$AMP" compare --model gpt2 --size 9000m
expect_rc 2 "an unknown --size"
expect_err_lines 1 "an unknown --size is one line"
run "$AMP" compare --help
expect_rc 0 "--help"
expect_out_has "usage: amp compare" "--help prints usage"

finish
