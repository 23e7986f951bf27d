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
