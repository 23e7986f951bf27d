# Golden tests of the text models on token data: `amp train --data SHARDS` with shards written by
# `amp tokenize` (a glob of two shards trains exactly as their concatenation), held-out shards, the
# vocabulary, bad shards (a lying header, an id past the vocabulary), sequential order; `amp train
# --tokenizer RANKS` on text (the cache written, then reused with the same losses, a corrupt one
# rebuilt), and bits/char per byte of held-out text against a closed form.
. "$(dirname "$0")/lib.sh"

export AMP_CACHE_DIR="$TMP/cache"
# A small gpt: every run below takes well under a second.
GPT="--model gpt --layers 1 --hidden 16 --heads 2 --context 8 --batch 2 --eval-batches 2 --threads 1 --precision fp32"

# The text: numbered lines, in two files.
mat_lines 120 >"$TMP/all.txt"
head -n 60 "$TMP/all.txt" >"$TMP/a.txt"
tail -n +61 "$TMP/all.txt" >"$TMP/b.txt"
run "$AMP" tokenizer train --vocab 300 --pattern gpt2 "$TMP/all.txt" -o "$TMP/r.tiktoken"
expect_rc 0 "tokenizer train"

# ---- shards: a glob of two equals their concatenation ----------------------------------------------
mkdir "$TMP/sh"
run "$AMP" tokenize --ranks "$TMP/r.tiktoken" --pattern gpt2 "$TMP/a.txt" -o "$TMP/sh/part_000.bin"
run "$AMP" tokenize --ranks "$TMP/r.tiktoken" --pattern gpt2 "$TMP/b.txt" -o "$TMP/sh/part_001.bin"
run "$AMP" tokenize --ranks "$TMP/r.tiktoken" --pattern gpt2 "$TMP/a.txt" "$TMP/b.txt" -o "$TMP/one.bin"
expect_rc 0 "tokenize two files into one shard"
losses() { # the progress lines without the timing, then the result's losses at full precision
    sed -n 's/  [0-9.]* samples\/s.*//p; /test loss/p' "$TMP/err"
    tail -n 1 "$TMP/out" | jq -c '[.train_loss, .test_loss, .bits_per_char]'
}
# shellcheck disable=SC2086 # $GPT is a list of flags
run "$AMP" train $GPT --steps 6 --data "$TMP/one.bin" --json
expect_rc 0 "train on one shard"
expect_err_has "token shards: " "the data note names shards"
expect_err_has "vocabulary 300 (no rank file: bits per token only)" "the vocabulary from amp's header"
expect_err_has "bits/token " "shards without ranks: bits per token"
losses >"$TMP/one.losses"
# shellcheck disable=SC2086
run "$AMP" train $GPT --steps 6 --data "$TMP/sh/part_*.bin" --json
expect_rc 0 "train on a glob of two shards"
losses >"$TMP/glob.losses"
cmp -s "$TMP/one.losses" "$TMP/glob.losses" && pass || fail "glob vs one shard: $(diff "$TMP/one.losses" "$TMP/glob.losses" | head -4)"
grep -q 'step 6/6' "$TMP/one.losses" && pass || fail "the losses hold every step"
# with the ranks, bits/char
# shellcheck disable=SC2086
run "$AMP" train $GPT --steps 2 --data "$TMP/one.bin" --tokenizer "$TMP/r.tiktoken" --json
expect_rc 0 "shards with ranks"
expect_json_eq '.bits_per_char > 0' true "shards with ranks: bits/char"
# held-out shards, sequential order, --vocab
# shellcheck disable=SC2086
run "$AMP" train $GPT --steps 2 --data "$TMP/sh/part_000.bin" --val-data "$TMP/sh/part_001.bin" --data-order sequential --vocab 320 --json
expect_rc 0 "held-out shards, sequential"
expect_err_has "vocabulary 320" "--vocab"
n0=$(od -An -tu4 -j8 -N4 "$TMP/sh/part_000.bin" | tr -d ' ')
n1=$(od -An -tu4 -j8 -N4 "$TMP/sh/part_001.bin" | tr -d ' ')
expect_err_has "token shards: $n0 training + $n1 held-out tokens" "every training shard's token trains"

# sequential order reads consecutive windows, advancing by batch x context = 16 tokens: with lr 0 (the
# model never changes) the steps on the shard cut 16 tokens later lose what the steps 2, 3, ... lost
le32() { printf "\\$(printf %o $(($1 & 255)))\\$(printf %o $(($1 >> 8 & 255)))\\$(printf %o $(($1 >> 16 & 255)))\\$(printf %o $(($1 >> 24 & 255)))"; }
n=$(od -An -tu4 -j8 -N4 "$TMP/one.bin" | tr -d ' ')
{ head -c 8 "$TMP/one.bin"; le32 $((n - 16)); tail -c +13 "$TMP/one.bin" | head -c 1012; tail -c +$((1024 + 32 + 1)) "$TMP/one.bin"; } >"$TMP/later.bin"
step_losses() { jq -r 'select(.type == "step") | .loss' "$1/metrics.jsonl" | tr '\n' ' '; }
# shellcheck disable=SC2086
run "$AMP" train $GPT --steps 4 --lr 0 --no-eval --data "$TMP/one.bin" --data-order sequential --report "$TMP/rep1"
expect_rc 0 "sequential, lr 0"
# shellcheck disable=SC2086
run "$AMP" train $GPT --steps 3 --lr 0 --no-eval --data "$TMP/later.bin" --data-order sequential --report "$TMP/rep2"
expect_rc 0 "sequential, lr 0, 16 tokens later"
l1=$(step_losses "$TMP/rep1" | cut -d' ' -f2-4) l2=$(step_losses "$TMP/rep2" | cut -d' ' -f1-3)
[ -n "$l1" ] && [ "$l1" = "$l2" ] && pass || fail "sequential windows advance by batch x context: '$l1' vs '$l2'"
[ "$(step_losses "$TMP/rep1" | cut -d' ' -f1)" != "$(step_losses "$TMP/rep1" | cut -d' ' -f2)" ] && pass ||
    fail "the steps' batches differ"

# ---- bad shards ------------------------------------------------------------------------------------
usage() { # LABEL TEXT CMD...
    label=$1 text=$2
    shift 2
    run "$@"
    expect_rc 2 "$label"
    expect_err_lines 1 "$label: one line"
    expect_err_has "$text" "$label"
}
cp "$TMP/sh/part_001.bin" "$TMP/sh/part_002.bin"
printf '\377\377\000\000' | dd of="$TMP/sh/part_002.bin" bs=1 seek=8 conv=notrunc 2>/dev/null
# shellcheck disable=SC2086
usage "lying header" "$TMP/sh/part_002.bin: the header says 65535 tokens" "$AMP" train $GPT --steps 1 --data "$TMP/sh/part_*.bin"
rm "$TMP/sh/part_002.bin"
# shellcheck disable=SC2086
usage "id past the vocabulary" "$TMP/sh/part_000.bin: token at position" "$AMP" train $GPT --steps 1 --data "$TMP/sh/part_*.bin" --vocab 257
expect_err_has "not below the vocabulary size 257" "id past the vocabulary: the size"
# shellcheck disable=SC2086
usage "no shard matches" "no training shard matches" "$AMP" train $GPT --steps 1 --data "$TMP/sh/none_*.bin"
# shellcheck disable=SC2086
usage "--val-data on text" "applies to token shards only" "$AMP" train $GPT --steps 1 --data "$TMP/all.txt" --val-data "$TMP/one.bin"
# shellcheck disable=SC2086
usage "bad --data-order" "--data-order wants random or sequential" "$AMP" train $GPT --data-order shuffled
# shellcheck disable=SC2086
usage "bad --pattern" "--pattern wants gpt2 or cl100k" "$AMP" train $GPT --pattern o200k
# shellcheck disable=SC2086
usage "sequential, too little held-out text" "held-out tokens: " "$AMP" train $GPT --steps 1 --batch 64 --data "$TMP/one.bin" --data-order sequential

# ---- BPE text: the cache ---------------------------------------------------------------------------
# shellcheck disable=SC2086
run "$AMP" train $GPT --steps 4 --data "$TMP/all.txt" --tokenizer "$TMP/r.tiktoken" --pattern gpt2 --json
expect_rc 0 "BPE text, first run"
expect_err_has "BPE tokens encoded and cached in $TMP/cache/bpe-" "the first run writes the cache"
losses >"$TMP/bpe1.losses"
# shellcheck disable=SC2086
run "$AMP" train $GPT --steps 4 --data "$TMP/all.txt" --tokenizer "$TMP/r.tiktoken" --pattern gpt2 --json
expect_err_has "BPE tokens reused from the cache $TMP/cache/bpe-" "the second run reuses it"
losses >"$TMP/bpe2.losses"
cmp -s "$TMP/bpe1.losses" "$TMP/bpe2.losses" && pass || fail "the cache gives the same losses"
for f in "$TMP"/cache/bpe-*.tokens; do printf 'garbage' | dd of="$f" bs=1 seek=60 conv=notrunc 2>/dev/null; done
# shellcheck disable=SC2086
run "$AMP" train $GPT --steps 4 --data "$TMP/all.txt" --tokenizer "$TMP/r.tiktoken" --pattern gpt2 --json
expect_err_has "BPE tokens encoded and cached in" "a corrupt cache is rebuilt"
losses >"$TMP/bpe3.losses"
cmp -s "$TMP/bpe1.losses" "$TMP/bpe3.losses" && pass || fail "the rebuilt cache gives the same losses"
# shellcheck disable=SC2086
run "$AMP" train $GPT --steps 1 --data "$TMP/all.txt" --tokenizer "$TMP/r.tiktoken" --pattern cl100k --token-cache ""
expect_err_has "BPE tokens encoded (no cache)" "--token-cache \"\": no cache"
[ "$(ls "$TMP/cache" | wc -l)" = 1 ] && pass || fail "one cache file: $(ls "$TMP/cache")"

# ---- bits/char per byte: a closed form -------------------------------------------------------------
# "abc" repeated, and one merge: the tokens alternate "ab" and "c". The held-out part (the last 10%,
# 300 bytes, starting on an "abc") is that alternation, so every window's 8 targets spell 4 x 2 + 4 x 1
# = 12 bytes: bits/char = (test loss / ln 2) x 8 / 12.
awk 'BEGIN { for (i = 0; i < 1000; i++) printf "abc" }' >"$TMP/abc.txt"
run "$AMP" tokenizer train --vocab 257 "$TMP/abc.txt" -o "$TMP/abc.tiktoken"
[ "$(sed -n 257p "$TMP/abc.tiktoken")" = "YWI= 256" ] && pass || fail "the one merge is ab: $(sed -n 257p "$TMP/abc.tiktoken")"
# shellcheck disable=SC2086
run "$AMP" train $GPT --steps 3 --data "$TMP/abc.txt" --tokenizer "$TMP/abc.tiktoken" --json
expect_rc 0 "BPE on abc"
tail -n 1 "$TMP/out" | jq -e '.bits_per_char as $b | .test_loss as $l | (($b - $l / (2 | log) * 8 / 12) | fabs) < 1e-12 * $b' >/dev/null &&
    pass || fail "bits/char per byte: $(tail -n 1 "$TMP/out" | jq -c '[.test_loss, .bits_per_char]')"

finish
