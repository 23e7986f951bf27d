# Shared helpers for the CLI golden tests. Each tests/cli/*.sh sources this file, runs checks, and
# ends with `finish`, which prints "N passed, N failed" and exits non-zero on any failure.
# $AMP is the CLI under test (set by tests/run.sh).
: "${AMP:?AMP must point at the amp binary}"
PASSED=0
FAILED=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

pass() { PASSED=$((PASSED + 1)); }
fail() { FAILED=$((FAILED + 1)); echo "FAIL: $*" >&2; }

# run NAME CMD...: runs CMD, keeping stdout in $TMP/out, stderr in $TMP/err and the status in $RC.
run() {
    RC=0
    "$@" >"$TMP/out" 2>"$TMP/err" || RC=$?
}
# expect_rc WANT LABEL
expect_rc() { if [ "$RC" = "$1" ]; then pass; else fail "$2: exit status $RC, expected $1 (stderr: $(head -c 300 "$TMP/err"))"; fi; }
# expect_out_has TEXT LABEL (fixed string, in stdout)
expect_out_has() { if grep -qF -- "$1" "$TMP/out"; then pass; else fail "$2: stdout lacks '$1'"; fi; }
# expect_err_has TEXT LABEL (fixed string, in stderr)
expect_err_has() { if grep -qF -- "$1" "$TMP/err"; then pass; else fail "$2: stderr lacks '$1'"; fi; }
# expect_err_lines N LABEL: stderr has exactly N lines
expect_err_lines() { n=$(wc -l <"$TMP/err"); if [ "$n" = "$1" ]; then pass; else fail "$2: stderr has $n lines, expected $1"; fi; }
# expect_json_eq JQ_FILTER WANT LABEL: the last stdout line, parsed by jq, gives WANT under the filter
expect_json_eq() {
    got=$(tail -n 1 "$TMP/out" | jq -c "$1" 2>&1) || { fail "$3: stdout's last line is not JSON ($got)"; return; }
    if [ "$got" = "$2" ]; then pass; else fail "$3: jq '$1' gave $got, expected $2"; fi
}
finish() {
    echo "$PASSED passed, $FAILED failed"
    [ "$FAILED" = 0 ]
}

# Text for the text models, on stdout. fox_text N: N sentences on one line, numbered 0 to N-1;
# mat_lines N: N numbered lines.
fox_text() {
    _k=0
    while [ $_k -lt "$1" ]; do printf 'the quick brown fox jumps over the lazy dog %d times. ' $_k; _k=$((_k + 1)); done
}
mat_lines() {
    _k=0
    while [ $_k -lt "$1" ]; do
        echo "line $_k: the cat sat on the mat, and the dog ate $((_k * 7 % 13)) bones."
        _k=$((_k + 1))
    done
}

# A tiny IDX image dataset for the training CLI tests (written with printf, no other tools).
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
