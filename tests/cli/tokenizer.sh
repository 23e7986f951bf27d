# Golden tests of `amp tokenizer train`, `amp tokenize` and `amp detokenize`: round trips (invalid
# UTF-8 included), the shard format, training's first merges, usage errors (exit 2, one line), a
# malformed rank file (its line number), a shard whose header lies, and no output left on failure.
. "$(dirname "$0")/lib.sh"

RANKS=tests/fixtures/tokenizer/ranks.tiktoken

# ---- train -----------------------------------------------------------------------------------------
printf 'the cat sat on the mat; the cat ate the rat. aaaa aaaa aaaa\n' >"$TMP/small.txt"
run "$AMP" tokenizer train --vocab 270 --pattern gpt2 "$TMP/small.txt" -o "$TMP/small.tiktoken"
expect_rc 0 "tokenizer train"
expect_out_has "$TMP/small.tiktoken: 270 tokens from 60 bytes in 1 file" "train summary"
[ "$(wc -l <"$TMP/small.tiktoken")" = 270 ] && pass || fail "270 lines in the rank file"
[ "$(sed -n 1p "$TMP/small.tiktoken")" = "AA== 0" ] && pass || fail "rank 0 is the byte 0"
# 'aa' (9: overlapping pairs count), 'at' (6), then 'he' before 'th' (4 each: the smaller ids win)
[ "$(sed -n '257,259p' "$TMP/small.tiktoken" | tr '\n' ' ')" = "YWE= 256 YXQ= 257 aGU= 258 " ] && pass ||
    fail "first merges: $(sed -n '257,259p' "$TMP/small.tiktoken" | tr '\n' ' ')"

# ---- tokenize, detokenize: round trips -------------------------------------------------------------
printf 'In the beginning God created the heaven and the earth.\n\n  Tabs\tand   spaces\r\n' >"$TMP/a.txt"
printf 'caf\303\251 \342\202\254 \360\237\230\200 bad: \377\376 \303 end' >"$TMP/bad.txt"
run "$AMP" tokenize --ranks "$RANKS" --pattern gpt2 "$TMP/a.txt" "$TMP/bad.txt" -o "$TMP/s.bin"
expect_rc 0 "tokenize two files"
expect_out_has "$TMP/s.bin: " "tokenize summary"
expect_out_has " in 2 files" "tokenize counts files"
magic=$(od -An -tu4 -N12 "$TMP/s.bin" | tr -s ' ')
n=$(echo "$magic" | cut -d' ' -f4)
[ "$(echo "$magic" | cut -d' ' -f2,3)" = "20240520 1" ] && pass || fail "shard header: $magic"
[ "$(wc -c <"$TMP/s.bin")" = $((1024 + 2 * n)) ] && pass || fail "shard length: 1024 + 2 x $n"
run "$AMP" detokenize --ranks "$RANKS" "$TMP/s.bin" -o "$TMP/back.txt"
expect_rc 0 "detokenize"
cat "$TMP/a.txt" "$TMP/bad.txt" >"$TMP/both.txt"
cmp -s "$TMP/back.txt" "$TMP/both.txt" && pass || fail "detokenize(tokenize(x)) == x, invalid UTF-8 included"
run "$AMP" detokenize --ranks "$RANKS" "$TMP/s.bin"
cmp -s "$TMP/out" "$TMP/both.txt" && pass || fail "detokenize to stdout"
# the same tokens with four threads
run "$AMP" tokenize --ranks "$RANKS" --pattern gpt2 --threads 4 "$TMP/a.txt" "$TMP/bad.txt" -o "$TMP/s4.bin"
expect_rc 0 "tokenize --threads 4"
cmp -s "$TMP/s.bin" "$TMP/s4.bin" && pass || fail "--threads 4 writes the same shard"
# one large file on several threads: cut where the pattern's search stands, the same tokens. Random
# text (letters, digits, apostrophes, runs of spaces and newlines, a two-byte letter), then random
# bytes (invalid UTF-8 early: one thread), then the King James Bible where the `bible` reader is.
seed=${AMP_TEST_SEED:-$(date +%s)}
echo "tokenizer.sh: seed $seed"
awk -v seed="$seed" 'BEGIN {
    srand(seed); n = split("a b c t h e 1 2 3 '"'"' \303\251 . ,", al, " "); al[n + 1] = " "; al[n + 2] = "\n"
    for (i = 0; i < 300000; i++) { k = int(rand() * (n + 2)) + 1; r = rand() < 0.001 ? 200 : 1; for (j = 0; j < r; j++) printf "%s", al[k] }
}' >"$TMP/big.txt"
head -c 300000 /dev/urandom >"$TMP/rand.bin"
set -- "$TMP/big.txt" "$TMP/rand.bin"
if command -v bible >/dev/null 2>&1; then bible -f Gen1:1-Rev22:21 >"$TMP/kjv.txt" && set -- "$@" "$TMP/kjv.txt"; fi
for f in "$@"; do
    for p in gpt2 cl100k; do
        run "$AMP" tokenize --ranks "$RANKS" --pattern $p --threads 1 "$f" -o "$TMP/t1.bin"
        for n in 2 7; do
            run "$AMP" tokenize --ranks "$RANKS" --pattern $p --threads $n "$f" -o "$TMP/tn.bin"
            expect_rc 0 "tokenize --threads $n one file"
            cmp -s "$TMP/t1.bin" "$TMP/tn.bin" && pass || fail "$(basename "$f"), $p: --threads $n differs from --threads 1"
        done
    done
done
# an empty file: a shard of no tokens
: >"$TMP/empty.txt"
run "$AMP" tokenize --ranks "$RANKS" "$TMP/empty.txt" -o "$TMP/e.bin"
expect_rc 0 "tokenize an empty file"
[ "$(wc -c <"$TMP/e.bin")" = 1024 ] && pass || fail "an empty shard is its header"

# ---- --help ----------------------------------------------------------------------------------------
for c in "tokenizer train" tokenize detokenize; do
    # shellcheck disable=SC2086 # "tokenizer train" is two words
    run "$AMP" $c --help
    expect_rc 0 "$c --help"
    expect_out_has "usage: amp $c" "$c --help prints its usage"
done
run "$AMP" --help
expect_out_has "tokenize" "amp --help lists tokenize"

# ---- usage errors: exit 2, one line ----------------------------------------------------------------
usage() { # LABEL TEXT CMD...
    label=$1 text=$2
    shift 2
    run "$@"
    expect_rc 2 "$label"
    expect_err_lines 1 "$label: one line"
    expect_err_has "$text" "$label"
}
usage "tokenizer without a subcommand" "expected a subcommand" "$AMP" tokenizer
usage "unknown tokenizer subcommand" "unknown subcommand 'fit'" "$AMP" tokenizer fit
usage "train without --vocab" "--vocab N is required" "$AMP" tokenizer train "$TMP/a.txt" -o "$TMP/x"
usage "train --vocab 100" "--vocab must be an integer in [256" "$AMP" tokenizer train --vocab 100 "$TMP/a.txt" -o "$TMP/x"
usage "train without -o" "-o RANKS is required" "$AMP" tokenizer train --vocab 300 "$TMP/a.txt"
usage "train without files" "no input file" "$AMP" tokenizer train --vocab 300 -o "$TMP/x"
usage "bad --pattern" "--pattern must be gpt2 or cl100k, not 'o200k'" "$AMP" tokenize --ranks "$RANKS" --pattern o200k "$TMP/a.txt" -o "$TMP/x"
usage "tokenize without --ranks" "--ranks RANKS is required" "$AMP" tokenize "$TMP/a.txt" -o "$TMP/x"
usage "tokenize without -o" "-o SHARD.bin is required" "$AMP" tokenize --ranks "$RANKS" "$TMP/a.txt"
usage "bad --threads" "--threads must be an integer in [1, 64]" "$AMP" tokenize --ranks "$RANKS" --threads 0 "$TMP/a.txt" -o "$TMP/x"
usage "unknown option" "unknown option '--bogus'" "$AMP" detokenize --ranks "$RANKS" --bogus "$TMP/s.bin"
usage "missing input" "$TMP/missing.txt: cannot open" "$AMP" tokenize --ranks "$RANKS" "$TMP/missing.txt" -o "$TMP/x"
[ ! -e "$TMP/x" ] && pass || fail "nothing written after a failure"
ls "$TMP" | grep -q '\.tmp\.' && fail "a temp file was left behind" || pass

# ---- a malformed rank file: its line number --------------------------------------------------------
{ head -n 300 "$RANKS"; echo "not!base64 301"; tail -n +302 "$RANKS"; } >"$TMP/broken.tiktoken"
usage "malformed rank file" "$TMP/broken.tiktoken:301: the token is not base64" \
    "$AMP" tokenize --ranks "$TMP/broken.tiktoken" "$TMP/a.txt" -o "$TMP/x"
{ cat "$RANKS"; sed -n 1p "$RANKS" | sed 's/ 0$/ 600/'; } >"$TMP/dup.tiktoken"
usage "a token twice" "$TMP/dup.tiktoken:601: repeats a token's bytes" \
    "$AMP" tokenize --ranks "$TMP/dup.tiktoken" "$TMP/a.txt" -o "$TMP/x"
[ ! -e "$TMP/x" ] && pass || fail "nothing written after a bad rank file"

# ---- a shard whose header lies about its length ----------------------------------------------------
cp "$TMP/s.bin" "$TMP/lie.bin"
printf '\377\377\000\000' | dd of="$TMP/lie.bin" bs=1 seek=8 conv=notrunc 2>/dev/null
usage "lying shard header" "$TMP/lie.bin: the header says 65535 tokens (131070 bytes)" \
    "$AMP" detokenize --ranks "$RANKS" "$TMP/lie.bin" -o "$TMP/y"
[ ! -e "$TMP/y" ] && pass || fail "nothing written after a lying shard"
head -c 1030 "$TMP/s.bin" >"$TMP/short.bin"
usage "truncated shard" "the file holds 6 bytes after the header" "$AMP" detokenize --ranks "$RANKS" "$TMP/short.bin"
printf 'not a shard' >"$TMP/junk.bin"
usage "not a shard" "shorter than a shard's 1024-byte header" "$AMP" detokenize --ranks "$RANKS" "$TMP/junk.bin"
# a token the ranks do not hold (the small fixture has 600)
run "$AMP" tokenize --ranks "$TMP/small.tiktoken" "$TMP/a.txt" -o "$TMP/small.bin"
usage "unknown token" "which $TMP/small.tiktoken holds no token for" "$AMP" detokenize --ranks "$TMP/small.tiktoken" "$TMP/s.bin"

finish
