/* Every test function, one per line, grouped by file; tests/main.c lists them in its table. */
#ifndef AMP_TESTS_TESTS_H
#define AMP_TESTS_TESTS_H

/* test_reference.c: the oracle itself, against closed forms (a wrong oracle hides library bugs) */
void test_reference_formats(void);
void test_reference_round_trip(void);

/* test_api_tables.c: ISA selection, the dtype traits table, status strings */
void test_isa_selection(void);
void test_dtype_info(void);
void test_status_strings(void);

/* test_decode.c: narrow -> fp32 */
void test_decode_literals(void);
void test_decode_exhaustive(void);

/* test_encode_edges.c: fp32 -> narrow, hand-derived boundary cases */
void test_encode_edge_cases(void);

/* test_lstm_sequence.c: the lstm model's fused sequence op against T lstm_cell calls */
void test_lstm_sequence(void);
/* test_threads.c: ops split between threads give the one-thread bits */
void test_threads_elementwise(void);
void test_threads_pool(void);
void test_threads_attention(void);
void test_threads_convert(void);
void test_threads_loss(void);
void test_threads_linear_bias(void);
void test_threads_range(void);
void test_threads_gang(void);
/* test_relu_bits.c: relu's bit paths against their reference twins (fp16/bf16: all 2^16 inputs; fp32: 2^20) */
void test_relu_bits(void);
void test_relu_bits_f32(void);
/* test_vecmath.c: exp, tanh, sigmoid, erfc kernels against double libm, strided 2^32 sweep, edges, tails */
void test_vecmath(void);
/* test_encode_sweep.c: fp32 -> narrow, all 2^32 inputs (strided under AMP_TEST_QUICK) */
void test_encode_sweep(void);

/* test_narrow_to_narrow.c: narrow -> narrow, identity copies, in-place conversion */
void test_narrow_to_narrow(void);
void test_identity_copies(void);

/* test_convert_api.c: amp_convert's lengths, alignments, guard regions and statuses */
void test_convert_lengths_offsets(void);
void test_convert_status(void);

/* test_ops_core.c: core ops against double references (gradcheck.h) */
void test_ops_binary_broadcast(void);
void test_ops_binary_mixed_in_place(void);
void test_ops_linear_batch_in_place(void);
void test_ops_scale_reduce(void);
void test_ops_shape(void);
void test_ops_matmul_linear(void);

/* test_tensor_core.c: context, arena, parameters, autograd engine */
void test_tensor_params_and_steady_state(void);
void test_tensor_grad_mode_and_retain(void);
void test_tensor_errors_are_sticky(void);
void test_tensor_allocation_failure(void);
void test_tensor_views_and_access(void);

/* test_ops_lstm_attention.c: the fused LSTM cell and causal attention */
void test_ops_lstm_cell(void);
void test_ops_lstm_cell_api(void);
void test_ops_causal_attention(void);
void test_ops_attention_api(void);

/* test_ops_activation.c: relu, gelu, tanh, sigmoid, pow, exp, log, dropout */
void test_ops_unary(void);
void test_ops_unary_meta(void);
void test_ops_unary_nonfinite(void);
void test_ops_dropout(void);

/* test_ops_softmax_loss.c: softmax, log_softmax, cross_entropy, mse_loss */
void test_ops_softmax(void);
void test_ops_softmax_edges(void);
void test_ops_losses(void);
void test_ops_losses_edges(void);
void test_ops_losses_autocast_in_place(void);
void test_ops_cross_entropy_narrow_rows(void);

/* test_gemm.c: amp_gemm on every path against the fp32 twin and a double oracle, edge cases,
 * statuses, bit-identical results for any thread count; the thread pool */
void test_gemm_vs_reference(void);
void test_gemm_edge_cases(void);
void test_gemm_determinism(void);
void test_gemm_rows8_kernel(void); /* the 8-row bf16 kernel against the 12-row one, bit for bit */
void test_gemm_partial_panel(void); /* a partial A panel against the same rows of a full one, bit for bit */
void test_gemm_a_in_place(void);
/* test_gemm_direct.c: the small products on stored operands against amp_gemm, bit for bit */
void test_gemm_direct(void);
void test_gemm_ref_path_is_the_oracle(void);
void test_gemm_arguments(void);
void test_gemm_bf16_method(void);
void test_parallel_pool(void);

/* test_ops_norm.c: layer_norm, batch_norm (running statistics, evaluation mode) */
void test_ops_layer_norm(void);
void test_ops_layer_norm_to(void);
void test_ops_layer_norm_threads(void);
void test_ops_batch_norm(void);

/* test_ops_conv_pool.c: conv2d (batch chunking), max/avg pooling (ties, NaN), embedding */
void test_ops_conv2d(void);
void test_ops_pool2d(void);
void test_ops_embedding(void);

/* test_golden_pytorch.c: MLP, CNN, LSTM cell, attention against PyTorch fixtures (tests/fixtures/);
 * the fixture reader's strictness */
void test_fixture_reader(void);
void test_golden_pytorch(void);

/* test_autocast.c: regions, policies, dtypes, the cast cache */
void test_autocast_regions(void);
void test_autocast_policies_and_dtypes(void);
void test_autocast_cast_cache(void);
void test_precision_presets(void);
void test_autocast_vs_pytorch_cpu(void);

/* test_optim.c: SGD, Adam, AdamW against torch.optim fixtures; clip_grad_norm_ and the lr schedules
 * against torch; fp32 master weights; stochastic rounding; the fused step; arguments, allocations */
void test_optim_vs_pytorch(void);
void test_optim_clip_vs_pytorch(void);
void test_optim_lr_schedules(void);
void test_optim_master_weights(void);
void test_optim_stochastic_rounding(void);
void test_optim_fused_step(void);
void test_optim_arguments(void);

/* test_scaler.c: the GradScaler's kernels (every path vs the reference, and vs PyTorch), training
 * loops replayed against torch.amp.GradScaler, the state machine, saving/loading, the extras */
void test_scaler_kernels_vs_reference(void);
void test_scaler_kernels_pytorch(void);
void test_scaler_sequences_pytorch(void);
void test_scaler_state_machine(void);
void test_scaler_config_and_disabled(void);
void test_scaler_state_io(void);
void test_scaler_hysteresis(void);
void test_scaler_min_max_floor(void);
void test_scaler_safe_mode(void);
void test_scaler_fused_step(void);
void test_scaler_fp16_gradients(void);

/* test_data.c: IDX image sets (plain, gzipped, every error path), text corpora, batches, the
 * shuffler, allocation failure */
void test_data_idx_load(void);
void test_data_idx_errors(void);
void test_data_idx_batch(void);
void test_data_text(void);
void test_data_words(void);
void test_data_allocation_failure(void);
void test_data_shuffle(void);

/* test_nn.c: the four models vs PyTorch (names, shapes, counts, forward), init, FLOPs, SGD steps */
void test_nn_default_shapes(void);
void test_nn_param_counts_and_flops(void);
void test_nn_forward_pytorch(void);
void test_nn_init_deterministic(void);
void test_nn_sgd_lowers_loss(void);
void test_grad_ready_hook(void);
void test_backward_grad_hook(void);
void test_nn_errors_and_dtypes(void);

/* test_train.c: amp_train_run on generated data: learning, determinism, presets and scaler modes,
 * fp16-pure's vanishing updates, accumulation, text models, errors and --detect-anomaly */
void test_train_learns_and_is_deterministic(void);
void test_train_presets_and_scalers(void);
void test_train_pure_updates_vanish(void);
void test_train_accumulation(void);
void test_train_text_models(void);
void test_train_errors_and_anomaly(void);
void test_train_data_parallel_plumbing(void);

/* test_checkpoint.c: safetensors writer and reader, hostile files, checkpoint round trips and
 * bit-exact resumption, mismatches, atomic writes (injected full disk, SIGKILL), the committed fixture */
void test_safetensors_write_read(void);
void test_safetensors_hostile(void);
void test_checkpoint_round_trip(void);
void test_checkpoint_resume(void);
void test_checkpoint_mismatch(void);
void test_checkpoint_atomic(void);
void test_checkpoint_fixture(void);

/* test_alloc_fail.c: the process-wide heap hooks; every create/load entry point with each of its
 * allocations refused in turn (an error status, no crash, no leak) */
void test_alloc_hooks(void);
void test_alloc_failure_loops(void);
/* test_alloc_huge_pages.c: the default heap's large blocks on 2 MiB boundaries, advised for huge pages */
void test_alloc_huge_pages(void);

/* test_data_float.c: float32/float64 IDX images, their batches, non-finite values refused */
void test_data_idx_float(void);

/* test_lstm_kernels.c: the LSTM pointwise kernels of every SIMD path against the reference, bit for bit */
void test_lstm_kernels(void);
/* ... and the fused forward row kernel of every path against the composition of its own kernels */
void test_lstm_cell_forward_kernels(void);
/* ... and the fused backward row with the bias sum and the bf16 rounding against its composition */
void test_lstm_cell_backward_bf16_kernels(void);

/* test_attention_fused.c: the gpt model's self-attention on a fused qkv against split heads + attention */
void test_attention_fused(void);
/* test_grad_chunks.c: gelu, add and layer_norm input gradients written in chunks against sliced runs */
void test_grad_chunks(void);

/* test_gelu_kernels.c: the fused gelu kernels of every path against their erfc/exp composition, bit for bit */
void test_gelu_kernels(void);
/* test_ce_kernels.c: the fused cross-entropy row kernels against their exp composition, bit for bit, and
 * the composition against double precision */
void test_ce_kernels(void);
/* test_acc_rounded.c: the convert table's acc_rounded kernels of every path against the format reference */
void test_acc_rounded(void);

/* test_grad_reuse.c: dropped non-leaf gradients' arena blocks reused: same gradients, lower peak */
void test_grad_reuse(void);
void test_grad_hand_over(void);

/* test_gemm_fused.c: amp_gemm_fused's epilogue against amp_gemm and separate passes, bit for bit */
void test_gemm_fused_epilogue(void);
void test_gemm_fused_acc(void);
void test_gemm_fused_a_sums(void);
/* test_elem_kernels.c: the layer norm, softmax and add row kernels of every SIMD path against the
 * reference, bit for bit, and the reference's summation order */
void test_elem_kernels(void);
/* test_grad_fused.c: bf16 gradients added into fp32 ones (and fp32 into bf16) in one pass, bit for bit */
void test_grad_fused(void);
/* test_grad_direct.c: weight gradients into the fp32 master's inside the GEMM, against the unfused path */
void test_grad_direct(void);
/* test_linear_act.c: amp_linear_relu and amp_linear_gelu against amp_relu(amp_linear(...)) and
 * amp_gelu(amp_linear(...)), values and gradients bit for bit */
void test_linear_relu(void);
void test_linear_gelu(void);
void test_linear_residual(void);
void test_backward_grad_check(void);
void test_grad_lazy_zero(void);

#endif /* AMP_TESTS_TESTS_H */
