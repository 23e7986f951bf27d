# Golden tests of `amp inspect` on the committed checkpoint fixture (written by tests/test_checkpoint.c:
# the tiny f16 mlp after 3 AdamW steps with a scaler) and on corrupt copies: a malformed file exits 2
# with one line on stderr naming the file and the problem.
. "$(dirname "$0")/lib.sh"

FIX=tests/fixtures/checkpoint_mlp_tiny.safetensors

# ---- text -----------------------------------------------------------------------------------------
run "$AMP" inspect "$FIX"
expect_rc 0 "inspect"
expect_err_lines 0 "inspect writes nothing to stderr"
expect_out_has "$FIX: 24 tensors, 3290 bytes of data" "summary line"
expect_out_has "  amp.step = 3" "metadata: step"
expect_out_has "  amp.optimizer.step_count = 3" "metadata: optimizer step count"
expect_out_has '  amp.scaler = {"scale": 2048.0, "growth_factor": 2.0,' "metadata: scaler state dict"
if grep -qE '^  1\.weight +F16 +\[8, 16\] +256$' "$TMP/out"; then pass; else fail "row for 1.weight"; fi
if grep -qE '^  master\.1\.weight +F32 +\[8, 16\] +512$' "$TMP/out"; then pass; else fail "row for master.1.weight"; fi
if grep -qE '^  optimizer\.state\.5\.bias\.exp_avg_sq +F32 +\[3\] +12$' "$TMP/out"; then pass; else fail "row for an Adam moment"; fi

# ---- JSON -----------------------------------------------------------------------------------------
run "$AMP" inspect "$FIX" --json
expect_rc 0 "inspect --json"
[ "$(wc -l <"$TMP/out")" = 1 ] && pass || fail "--json prints exactly one line"
expect_json_eq '.tensors | length' '24' "24 tensors"
expect_json_eq '.data_bytes' '3290' "data bytes"
expect_json_eq '.tensors[0]' '{"name":"1.weight","dtype":"F16","shape":[8,16],"bytes":256}' "first tensor"
expect_json_eq '[.tensors[] | select(.name | startswith("master.")) | .dtype] | unique' '["F32"]' "master weights are F32"
expect_json_eq '.metadata["amp.step"]' '"3"' "metadata in JSON"
expect_json_eq '.metadata["amp.scaler"] | fromjson | .scale' '2048' "the scaler state parses as JSON"

# ---- malformed files: exit 2, one line -------------------------------------------------------------
bad() { # LABEL TEXT: the last run exits 2 with one stderr line containing TEXT
    expect_rc 2 "$1"
    expect_err_lines 1 "$1: one line"
    expect_err_has "$2" "$1"
}
head -c 100 "$FIX" >"$TMP/truncated.safetensors"
run "$AMP" inspect "$TMP/truncated.safetensors"
bad "truncated header" "$TMP/truncated.safetensors: header length 2784 exceeds the file's 100 bytes"
size=$(wc -c <"$FIX")
head -c $((size - 1)) "$FIX" >"$TMP/short.safetensors"
run "$AMP" inspect "$TMP/short.safetensors"
bad "truncated data" "beyond the 3289-byte data region (truncated file?)"
head -c 7 "$FIX" >"$TMP/seven.safetensors"
run "$AMP" inspect "$TMP/seven.safetensors"
bad "7-byte file" "7 bytes, too short"
: >"$TMP/empty.safetensors"
run "$AMP" inspect "$TMP/empty.safetensors"
bad "empty file" "0 bytes, too short"
# A header length of 2^63 (little-endian: seven zero bytes, then 0x80).
printf '\000\000\000\000\000\000\000\200{}' >"$TMP/huge.safetensors"
run "$AMP" inspect "$TMP/huge.safetensors"
bad "header length 2^63" "header length 9223372036854775808 exceeds the file"
# A valid length over a header that is not JSON.
printf '\004\000\000\000\000\000\000\000{"a"' >"$TMP/json.safetensors"
run "$AMP" inspect "$TMP/json.safetensors"
bad "invalid JSON" "header is not valid JSON"
run "$AMP" inspect "$TMP/does-not-exist.safetensors"
bad "missing file" "cannot open"

# ---- usage ----------------------------------------------------------------------------------------
run "$AMP" inspect
expect_rc 2 "no file"
expect_err_has "no file given (try \`amp inspect --help\`)" "no file: usage hint"
run "$AMP" inspect "$FIX" --frobnicate
expect_rc 2 "unknown option"
expect_err_has "unknown option '--frobnicate'" "unknown option named"
run "$AMP" inspect --help
expect_rc 0 "--help"
expect_out_has "usage: amp inspect FILE [--json]" "--help text"

finish
