# Golden tests of the memory check of `amp train` and `amp compare`: a run that does not fit is refused
# at once, in one line naming what it needs, what there is and the flags that lower it, having
# allocated and written nothing (no --report directory, an earlier report left as it was);
# --no-memory-check and AMP_MEMORY_CHECK=0 train anyway; and the estimate the refusal prints follows
# the process's measured peak RSS (less a small run's, the process's baseline) within 0.75x to 1.35x.
. "$(dirname "$0")/lib.sh"

mat_lines 400 >"$TMP/text.txt"

# GPT-2 1558M at batch 64 x 1024 under a faked 16 GiB, with a checkpoint and llm.c file asked for:
# refused before its 6 GiB of parameters (the process's peak RSS stays under 256 MiB, where GNU time
# can say)
BIG="--model gpt2 --size 1558m --batch 64 --context 1024 --steps 1 --data $TMP/text.txt"
TIME=""
if /usr/bin/time -f %M true >/dev/null 2>&1; then TIME="/usr/bin/time -o $TMP/rss -f %M"; fi
run env AMP_MEMORY_AVAILABLE=16G $TIME "$AMP" train $BIG --precision amp-bf16 --checkpoint "$TMP/ck.safetensors" \
    --save-llmc "$TMP/model.bin" --report "$TMP/rep/refused"
expect_rc 1 "gpt2 1558m at batch 64 x 1024 is refused"
expect_err_lines 1 "the refusal is one line"
for want in "gpt2 1558m at batch 64 x context 1024 needs about" "16.0 GiB is available" "--batch" "--context" \
    "--recompute" "--param-dtype bf16" "--zero 1"; do
    expect_err_has "$want" "the refusal names '$want'"
done
if [ ! -e "$TMP/ck.safetensors" ] && [ ! -e "$TMP/model.bin" ]; then pass; else fail "the refused run wrote a file"; fi
if [ ! -e "$TMP/rep" ]; then pass; else fail "the refused run created its --report directory"; fi
# an earlier report in the --report directory is left as it was
mkdir -p "$TMP/old"
echo '{"type": "summary"}' >"$TMP/old/metrics.jsonl"
run env AMP_MEMORY_AVAILABLE=16G "$AMP" train $BIG --precision amp-bf16 --report "$TMP/old"
expect_rc 1 "refused with an earlier report in --report"
if [ "$(cat "$TMP/old/metrics.jsonl")" = '{"type": "summary"}' ] && [ "$(ls "$TMP/old")" = metrics.jsonl ]; then pass; else
    fail "the refused run changed the earlier report"
fi
if [ -n "$TIME" ]; then
    rss=$(tail -n 1 "$TMP/rss")
    if [ "$rss" -lt 262144 ]; then pass; else fail "the refused run's peak RSS is $rss KiB"; fi
fi

# the same from amp compare, which trains one configuration after another
run env AMP_MEMORY_AVAILABLE=16G "$AMP" compare $BIG --runs fp32,amp-bf16 --quiet --report "$TMP/rep/compare"
expect_rc 1 "compare refuses gpt2 1558m"
expect_err_has "needs about" "compare's refusal says what it needs"
expect_err_lines 1 "compare's refusal is one line"
if [ ! -e "$TMP/rep" ]; then pass; else fail "compare's refused run created its --report directory"; fi

# a small run under a faked 64 KiB: refused, then trained with the check off either way
SMALL="--model gpt2 --layers 1 --hidden 32 --heads 2 --context 16 --batch 2 --steps 1 --no-eval --threads 1 --sample-tokens 0 --data $TMP/text.txt --quiet"
run env AMP_MEMORY_AVAILABLE=64K "$AMP" train $SMALL
expect_rc 1 "a small run under 64 KiB is refused"
run env AMP_MEMORY_AVAILABLE=64K "$AMP" train $SMALL --no-memory-check
expect_rc 0 "--no-memory-check trains it"
run env AMP_MEMORY_AVAILABLE=64K AMP_MEMORY_CHECK=0 "$AMP" train $SMALL
expect_rc 0 "AMP_MEMORY_CHECK=0 trains it"
run env AMP_MEMORY_AVAILABLE=64K "$AMP" compare --model gpt2 --layers 1 --hidden 32 --heads 2 --context 16 --batch 2 \
    --steps 1 --threads 1 --data "$TMP/text.txt" --eval-batches 1 --runs fp32 --quiet --no-memory-check
expect_rc 0 "compare --no-memory-check trains it"
run env AMP_MEMORY_AVAILABLE=64K "$AMP" train $SMALL --no-memory-check --no-memory-check=1
expect_rc 2 "--no-memory-check takes no value"

# estimate (MiB, from the refusal under a 1-byte limit) and peak RSS (MiB, --json) of one configuration
estimate() {
    env AMP_MEMORY_AVAILABLE=1 "$AMP" train "$@" 2>&1 >/dev/null |
        sed -n 's/.* needs about \([0-9.]*\) \([KMG]\)iB .*/\1 \2/p' |
        awk '{print $2 == "G" ? $1 * 1024 : ($2 == "K" ? $1 / 1024 : $1)}'
}
peak_rss() { "$AMP" train "$@" --json --quiet | tail -n 1 | jq '.peak_rss_bytes / 1048576'; }
# (not under AddressSanitizer, whose shadow memory and quarantine are part of the RSS)
if nm "$AMP" 2>/dev/null | grep -q __asan_init; then finish; exit; fi
COMMON="--steps 2 --no-eval --threads 1 --sample-tokens 0 --data $TMP/text.txt"
base_est=$(estimate $SMALL)
base_rss=$(peak_rss $SMALL --no-memory-check)
for cfg in "--model gpt2 --layers 4 --hidden 256 --heads 4 --context 256 --batch 8 --precision fp32" \
    "--model gpt2 --layers 4 --hidden 256 --heads 4 --context 256 --batch 8 --precision amp-bf16 --recompute" \
    "--model gpt --layers 3 --hidden 256 --heads 4 --context 256 --batch 8 --precision amp-bf16 --param-dtype bf16"; do
    est=$(estimate $cfg $COMMON)
    rss=$(peak_rss $cfg $COMMON)
    ratio=$(awk -v e="$est" -v be="$base_est" -v r="$rss" -v br="$base_rss" 'BEGIN { printf "%.3f", (e - be) / (r - br) }')
    echo "  $cfg: estimate $est MiB, peak RSS $rss MiB (baseline $base_est, $base_rss): $ratio"
    if awk -v x="$ratio" 'BEGIN { exit !(x >= 0.75 && x <= 1.35) }'; then pass; else
        fail "$cfg: estimate - baseline over peak RSS - baseline is $ratio (0.75 to 1.35)"
    fi
done
finish
