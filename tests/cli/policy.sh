# Golden tests of `amp policy`.
. "$(dirname "$0")/lib.sh"

run "$AMP" policy
expect_rc 0 "policy"
expect_out_has "linear         lower    lower        lower" "linear is lower everywhere"
expect_out_has "mean           fp32     none         none" "mean is amp's documented departure"

run "$AMP" policy --json
expect_rc 0 "policy --json"
expect_json_eq '[.ops[] | select(.op == "softmax") | .amp, .pytorch_cuda, .pytorch_cpu]' '["fp32","fp32","none"]' \
    "softmax: fp32 on CUDA, unlisted on CPU"
expect_json_eq '[.ops[] | select(.amp == "lower") | .op] | sort' \
    '["attention","conv2d","linear","lstm_cell","matmul"]' "the low-precision ops"
expect_json_eq '[.ops[] | select(.op == "none")] | length' '0' "AMP_OP_NONE is not listed"

run "$AMP" policy --bogus
expect_rc 2 "unknown option"
expect_err_lines 1 "unknown option is one line"
finish
