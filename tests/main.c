/* amp_tests: runs every C unit test in order; the last line is "N passed, N failed" (tests), and the
 * exit status is 0 iff none failed. Environment: AMP_TEST_QUICK=1 for strided sweeps (sanitizer
 * runs), AMP_TEST_SEED=N to replay a random test, AMP_ISA to choose the path restored between tests. */
#include "harness.h"
#include "tests.h"

/* The printed name drops the test_ prefix. */
#define TEST(name) {#name, test_##name}

/* Cheap tests of the oracle and the tables first, so a broken reference is reported before the
 * sweeps that trust it. */
static const harness_test all_tests[] = {
    TEST(reference_formats),
    TEST(reference_round_trip),
    TEST(isa_selection),
    TEST(dtype_info),
    TEST(status_strings),
    TEST(decode_literals),
    TEST(decode_exhaustive),
    TEST(encode_edge_cases),
    TEST(narrow_to_narrow),
    TEST(identity_copies),
    TEST(convert_lengths_offsets),
    TEST(convert_status),
    TEST(parallel_pool),
    TEST(gemm_arguments),
    TEST(gemm_edge_cases),
    TEST(gemm_ref_path_is_the_oracle),
    TEST(gemm_vs_reference),
    TEST(gemm_determinism),
    TEST(tensor_params_and_steady_state),
    TEST(tensor_grad_mode_and_retain),
    TEST(tensor_errors_are_sticky),
    TEST(tensor_allocation_failure),
    TEST(tensor_views_and_access),
    TEST(ops_binary_broadcast),
    TEST(ops_scale_reduce),
    TEST(ops_shape),
    TEST(ops_matmul_linear),
    TEST(ops_unary),
    TEST(ops_unary_meta),
    TEST(ops_unary_nonfinite),
    TEST(ops_dropout),
    TEST(ops_softmax),
    TEST(ops_softmax_edges),
    TEST(ops_losses),
    TEST(ops_losses_edges),
    TEST(ops_layer_norm),
    TEST(ops_batch_norm),
    TEST(ops_conv2d),
    TEST(ops_pool2d),
    TEST(ops_embedding),
    TEST(ops_lstm_cell),
    TEST(ops_lstm_cell_api),
    TEST(ops_causal_attention),
    TEST(ops_attention_api),
    TEST(fixture_reader),
    TEST(golden_pytorch),
    TEST(autocast_regions),
    TEST(autocast_policies_and_dtypes),
    TEST(autocast_cast_cache),
    TEST(precision_presets),
    TEST(autocast_vs_pytorch_cpu),
    TEST(scaler_kernels_vs_reference),
    TEST(scaler_kernels_pytorch),
    TEST(scaler_fp16_gradients),
    TEST(scaler_state_machine),
    TEST(scaler_config_and_disabled),
    TEST(scaler_state_io),
    TEST(scaler_hysteresis),
    TEST(scaler_min_max_floor),
    TEST(scaler_safe_mode),
    TEST(scaler_fused_step),
    TEST(scaler_sequences_pytorch),
    TEST(optim_vs_pytorch),
    TEST(optim_clip_vs_pytorch),
    TEST(optim_lr_schedules),
    TEST(optim_master_weights),
    TEST(optim_stochastic_rounding),
    TEST(optim_fused_step),
    TEST(optim_arguments),
    TEST(encode_sweep),
};

int main(void) {
    /* The library's default log hook warns on stderr when AMP_ISA names a missing path; that warning
     * is the user's business, so it stays on. */
    return harness_run(all_tests, sizeof all_tests / sizeof all_tests[0]);
}
