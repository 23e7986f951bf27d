# Golden tests of `amp sample`: a tiny gpt and gpt2 trained here with checkpoints; greedy output
# repeats, seeds repeat and differ, the token count, the checkpoint's vocabulary against an llm.c
# tokenizer file of the same bytes, a gpt2 checkpoint against its llm.c model file, amp train's
# evaluation sample, and the refusals (bad flags, missing or corrupt checkpoints, a model that cannot
# sample, a prompt the vocabulary cannot spell). Keep it fast.
. "$(dirname "$0")/lib.sh"

fox_text 40 >"$TMP/text.txt"
CK="$TMP/gpt.safetensors"

# refused LABEL TEXT ARGS...: `amp sample ARGS...` exits 2 with one line on stderr naming TEXT, nothing on stdout
refused() {
    label=$1 text=$2
    shift 2
    run "$AMP" sample "$@"
    expect_rc 2 "$label"
    expect_err_lines 1 "$label: one line"
    expect_err_has "$text" "$label"
    if [ -s "$TMP/out" ]; then fail "$label: wrote to stdout"; else pass; fi
}

run "$AMP" train --model gpt --data "$TMP/text.txt" --steps 20 --batch 4 --hidden 16 --layers 1 --heads 2 \
    --context 16 --eval-batches 2 --threads 1 --precision fp32 --checkpoint "$CK" --sample-tokens 12
expect_rc 0 "train a tiny gpt"
expect_err_has "sample: " "train prints a sample after the evaluation"
n=$(grep -c '^sample: ' "$TMP/err")
if [ "$n" = 1 ]; then pass; else fail "one evaluation, one sample: got $n"; fi
run "$AMP" train --model gpt --data "$TMP/text.txt" --steps 2 --batch 4 --hidden 16 --layers 1 --heads 2 \
    --context 16 --eval-batches 2 --threads 1 --sample-tokens 0
if grep -q '^sample: ' "$TMP/err"; then fail "--sample-tokens 0 still samples"; else pass; fi
# the evaluation line of a text model is bits/char whether or not a sample follows it
if grep -q 'accuracy' "$TMP/err"; then fail "a text model's evaluation line reports accuracy"; else pass; fi
expect_err_has "bits/char" "--sample-tokens 0: evaluation line"

# sample ARGS...: a sample of the tiny gpt, quiet
sample() { run "$AMP" sample --checkpoint "$CK" --threads 1 --quiet "$@"; }

sample --temperature 0 --tokens 40
expect_rc 0 "greedy"
cp "$TMP/out" "$TMP/greedy1"
sample --temperature 0 --tokens 40
if cmp -s "$TMP/out" "$TMP/greedy1"; then pass; else fail "greedy twice: different text"; fi
sample --top-k 1 --seed 9 --tokens 40
if cmp -s "$TMP/out" "$TMP/greedy1"; then pass; else fail "top-k 1 is not greedy"; fi
# byte vocabulary: the prompt-less sample is 40 bytes and a newline
n=$(wc -c <"$TMP/greedy1")
if [ "$n" = 41 ]; then pass; else fail "40 byte tokens: $n bytes of output"; fi

sample --seed 1 --tokens 40 --temperature 2
cp "$TMP/out" "$TMP/seed1"
sample --seed 1 --tokens 40 --temperature 2
if cmp -s "$TMP/out" "$TMP/seed1"; then pass; else fail "same seed: different text"; fi
sample --seed 2 --tokens 40 --temperature 2
if cmp -s "$TMP/out" "$TMP/seed1"; then fail "seeds 1 and 2 gave the same 40 tokens"; else pass; fi

# the prompt comes first; past the context (16) the window slides; the bf16 and fp16 presets run
sample --prompt "the lazy" --tokens 30 --temperature 0.5 --precision amp-bf16
expect_rc 0 "prompt, amp-bf16"
case "$(head -c 8 "$TMP/out")" in "the lazy") pass ;; *) fail "the output does not start with the prompt" ;; esac
sample --prompt "the lazy" --tokens 30 --precision amp-fp16 --no-cache
expect_rc 0 "amp-fp16 without the cache"

# tokens/s on stderr without --quiet
run "$AMP" sample --checkpoint "$CK" --tokens 8
expect_err_has "tokens/s" "tokens/s line"

# an llm.c tokenizer file (magic 20240328, version 2) spelling the same bytes decodes the same text
le32() { printf "\\$(printf %o $(($1 & 255)))\\$(printf %o $(($1 >> 8 & 255)))\\$(printf %o $(($1 >> 16 & 255)))\\$(printf %o $(($1 >> 24 & 255)))"; }
bytes=$(od -An -tu1 -v "$TMP/text.txt" | tr -s ' ' '\n' | grep -v '^$' | sort -nu)
count=$(echo "$bytes" | wc -l)
{
    le32 20240328; le32 2; le32 "$count"; le32 0
    k=4; while [ $k -lt 256 ]; do le32 0; k=$((k + 1)); done
    for b in $bytes; do printf "\\001\\$(printf %o "$b")"; done
} >"$TMP/tok.bin"
sample --temperature 0 --tokens 40 --prompt "the" --tokenizer "$TMP/tok.bin"
expect_rc 0 "llm.c tokenizer file"
cp "$TMP/out" "$TMP/llmc"
sample --temperature 0 --tokens 40 --prompt "the"
if cmp -s "$TMP/out" "$TMP/llmc"; then pass; else fail "llm.c tokenizer file decodes differently from the checkpoint's vocabulary"; fi
head -c 1050 "$TMP/tok.bin" >"$TMP/short.bin"
sample --tokenizer "$TMP/short.bin"
expect_rc 2 "truncated llm.c tokenizer file"
expect_err_lines 1 "truncated tokenizer is one line"
# a rank file whose byte tokens lie past this model's 28 ids: the prompt is refused
"$AMP" tokenizer train --vocab 260 --pattern gpt2 "$TMP/text.txt" -o "$TMP/ranks" >/dev/null 2>&1
sample --tokenizer "$TMP/ranks" --prompt "the"
expect_rc 2 "prompt outside the model's vocabulary"
expect_err_has "outside the model's vocabulary" "says why"

# a word vocabulary (--words): words are tokens of the stored table; the prompt spells back exactly
run "$AMP" train --model gpt --data "$TMP/text.txt" --words 8 --steps 10 --batch 4 --hidden 16 --layers 1 --heads 2 \
    --context 16 --eval-batches 2 --threads 1 --precision fp32 --quiet --checkpoint "$TMP/words.safetensors"
expect_rc 0 "train with --words"
run "$AMP" sample --checkpoint "$TMP/words.safetensors" --threads 1 --quiet --tokens 10 --prompt "the lazy dog jumps"
expect_rc 0 "word vocabulary"
case "$(head -c 18 "$TMP/out")" in "the lazy dog jumps") pass ;; *) fail "word vocabulary: the prompt does not come back" ;; esac

# BPE: a model trained on the rank file's tokens keeps its vocabulary and pattern, so the checkpoint
# alone encodes the prompt and decodes as the rank file does
run "$AMP" train --model gpt --data "$TMP/text.txt" --tokenizer "$TMP/ranks" --pattern gpt2 --steps 10 --batch 4 \
    --hidden 16 --layers 1 --heads 2 --context 16 --eval-batches 2 --threads 1 --precision fp32 --quiet \
    --checkpoint "$TMP/bpe.safetensors"
expect_rc 0 "train on BPE tokens"
run "$AMP" sample --checkpoint "$TMP/bpe.safetensors" --threads 1 --quiet --seed 3 --tokens 30 --prompt "the lazy dog"
expect_rc 0 "BPE checkpoint"
cp "$TMP/out" "$TMP/bpe_ck"
run "$AMP" sample --checkpoint "$TMP/bpe.safetensors" --tokenizer "$TMP/ranks" --threads 1 --quiet --seed 3 --tokens 30 \
    --prompt "the lazy dog"
if cmp -s "$TMP/out" "$TMP/bpe_ck"; then pass; else fail "the checkpoint's BPE and the rank file sample differently"; fi

# gpt2 (tanh GELU, tied head): its checkpoint and the llm.c model file amp train writes from the same
# weights sample the same text (the .bin decoded with the llm.c tokenizer file of the same bytes)
run "$AMP" train --model gpt2 --data "$TMP/text.txt" --steps 20 --batch 4 --hidden 16 --layers 1 --heads 2 \
    --context 16 --eval-batches 2 --threads 1 --precision fp32 --checkpoint "$TMP/g2.safetensors" \
    --save-llmc "$TMP/g2.bin" --sample-tokens 8
expect_rc 0 "train a tiny gpt2"
expect_err_has "sample: " "gpt2 training prints a sample"
run "$AMP" sample --checkpoint "$TMP/g2.safetensors" --threads 1 --quiet --seed 5 --tokens 40 --prompt "the"
expect_rc 0 "gpt2 checkpoint"
cp "$TMP/out" "$TMP/g2_st"
run "$AMP" sample --checkpoint "$TMP/g2.bin" --tokenizer "$TMP/tok.bin" --threads 1 --quiet --seed 5 --tokens 40 \
    --prompt "the"
expect_rc 0 "llm.c model file"
if cmp -s "$TMP/out" "$TMP/g2_st"; then pass; else fail "llm.c model file samples differently from the checkpoint"; fi
# without a vocabulary: one token id a line
run "$AMP" sample --checkpoint "$TMP/g2.bin" --threads 1 --quiet --tokens 5
n=$(grep -cE '^[0-9]+$' "$TMP/out")
if [ "$n" = 5 ]; then pass; else fail "no vocabulary: $n id lines of 5"; fi
refused "prompt without a vocabulary" "no vocabulary to encode --prompt" --checkpoint "$TMP/g2.bin" --prompt "the"
head -c 2000 "$TMP/g2.bin" >"$TMP/g2cut.bin"
refused "truncated llm.c model file" "g2cut.bin" --checkpoint "$TMP/g2cut.bin"

# refusals: one line on stderr, exit 2, nothing on stdout
refused "no checkpoint" "--checkpoint FILE is required" --tokens 4
refused "unknown option" "unknown option '--bogus'" --checkpoint "$CK" --bogus
refused "--tokens 0" "--tokens wants an integer" --checkpoint "$CK" --tokens 0
refused "--top-k x" "--top-k wants an integer" --checkpoint "$CK" --top-k x
refused "--temperature -1" "--temperature wants a number" --checkpoint "$CK" --temperature -1
refused "--precision fp16-pure" "--precision wants fp32, amp-bf16 or amp-fp16" --checkpoint "$CK" --precision fp16-pure
refused "--pattern o200k" "--pattern must be gpt2 or cl100k" --checkpoint "$CK" --pattern o200k
refused "missing value" "--seed needs a value" --checkpoint "$CK" --seed
refused "stray argument" "unexpected argument 'x'" --checkpoint "$CK" x
refused "missing checkpoint" "cannot open" --checkpoint "$TMP/none.safetensors"
head -c 300 "$CK" >"$TMP/cut.safetensors"
refused "corrupt checkpoint" "cut.safetensors" --checkpoint "$TMP/cut.safetensors"
refused "unspellable prompt" "a byte the vocabulary lacks" --checkpoint "$CK" --prompt "XYZ"
run "$AMP" train --model lstm --data "$TMP/text.txt" --steps 2 --batch 4 --hidden 16 --embed 8 --context 16 \
    --eval-batches 2 --threads 1 --quiet --checkpoint "$TMP/lstm.safetensors"
expect_rc 0 "train a tiny lstm"
refused "lstm checkpoint" "a lstm checkpoint cannot sample" --checkpoint "$TMP/lstm.safetensors"
run "$AMP" sample --help
expect_rc 0 "--help"
expect_out_has "usage: amp sample" "--help prints the usage"

finish
