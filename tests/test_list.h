/* Every C unit test, in the order amp_tests runs them: one TEST(file, name) line each, where
 * tests/test_<file>.c defines void test_<name>(void) and the harness prints <name>. tests/tests.h
 * turns the list into prototypes and tests/main.c into its table, so a new test is one line here.
 *
 * Cheap tests of the oracle and the tables come first, so a broken reference is reported before
 * the sweeps that trust it. No include guard: the includer defines TEST(file, name) first. */

/* the oracle itself, against closed forms (a wrong oracle hides library bugs) */
TEST(reference, reference_formats)
TEST(reference, reference_round_trip)
/* ISA selection, the dtype traits table, status strings */
TEST(api_tables, isa_selection)
TEST(api_tables, dtype_info)
TEST(api_tables, status_strings)
/* narrow -> fp32 */
TEST(decode, decode_literals)
TEST(decode, decode_exhaustive)
/* fp32 -> narrow, hand-derived boundary cases */
TEST(encode_edges, encode_edge_cases)
/* narrow -> narrow, identity copies, in-place conversion */
TEST(narrow_to_narrow, narrow_to_narrow)
TEST(narrow_to_narrow, identity_copies)
/* amp_convert's lengths, alignments, guard regions and statuses */
TEST(convert_api, convert_lengths_offsets)
TEST(convert_api, convert_status)
/* amp_gemm on every path against the fp32 twin and a double oracle, edge cases, statuses,
 * bit-identical results for any thread count; the thread pool */
TEST(gemm, parallel_pool)
TEST(gemm, gemm_arguments)
TEST(gemm, gemm_edge_cases)
TEST(gemm, gemm_bf16_method)
TEST(gemm, gemm_ref_path_is_the_oracle)
TEST(gemm, gemm_vs_reference)
TEST(gemm, gemm_determinism)
TEST(gemm, gemm_a_in_place)
/* the small products on stored operands against amp_gemm, bit for bit */
TEST(gemm_direct, gemm_direct)
/* the 8-row bf16 kernel against the 12-row one, and a partial A panel against the same rows of a
 * full one, bit for bit */
TEST(gemm, gemm_rows8_kernel)
TEST(gemm, gemm_partial_panel)
/* context, arena, parameters, autograd engine */
TEST(tensor_core, tensor_params_and_steady_state)
TEST(tensor_core, tensor_grad_mode_and_retain)
TEST(tensor_core, tensor_errors_are_sticky)
TEST(tensor_core, tensor_allocation_failure)
TEST(tensor_core, tensor_views_and_access)
/* core ops against double references (gradcheck.h) */
TEST(ops_core, ops_binary_broadcast)
TEST(ops_core, ops_binary_mixed_in_place)
TEST(ops_core, ops_linear_batch_in_place)
TEST(ops_core, ops_scale_reduce)
TEST(ops_core, ops_shape)
TEST(ops_core, ops_matmul_linear)
/* relu, gelu, tanh, sigmoid, pow, exp, log, dropout */
TEST(ops_activation, ops_unary)
TEST(ops_activation, ops_unary_meta)
TEST(ops_activation, ops_unary_nonfinite)
TEST(ops_activation, ops_dropout)
/* softmax, log_softmax, cross_entropy, mse_loss */
TEST(ops_softmax_loss, ops_softmax)
TEST(ops_softmax_loss, ops_softmax_edges)
TEST(ops_softmax_loss, ops_losses)
TEST(ops_softmax_loss, ops_losses_edges)
TEST(ops_softmax_loss, ops_losses_autocast_in_place)
TEST(ops_softmax_loss, ops_cross_entropy_narrow_rows)
/* layer_norm, batch_norm (running statistics, evaluation mode) */
TEST(ops_norm, ops_layer_norm)
TEST(ops_norm, ops_layer_norm_to)
TEST(ops_norm, ops_layer_norm_threads)
TEST(ops_norm, ops_batch_norm)
/* conv2d (batch chunking), max/avg pooling (ties, NaN), embedding */
TEST(ops_conv_pool, ops_conv2d)
TEST(ops_conv_pool, ops_pool2d)
TEST(ops_conv_pool, ops_embedding)
/* the fused LSTM cell and causal attention */
TEST(ops_lstm_attention, ops_lstm_cell)
TEST(ops_lstm_attention, ops_lstm_cell_api)
TEST(ops_lstm_attention, ops_causal_attention)
TEST(ops_lstm_attention, ops_attention_api)
/* the fixture reader's strictness; MLP, CNN, LSTM cell, attention against PyTorch fixtures
 * (tests/fixtures/) */
TEST(golden_pytorch, fixture_reader)
TEST(golden_pytorch, golden_pytorch)
/* autocast: regions, policies, dtypes, the cast cache, the precision presets */
TEST(autocast, autocast_regions)
TEST(autocast, autocast_policies_and_dtypes)
TEST(autocast, autocast_cast_cache)
TEST(autocast, cast_backward_gradients)
TEST(autocast, precision_presets)
TEST(autocast, autocast_vs_pytorch_cpu)
/* cast copies written by the optimizers: the same bits as casting, taken only while they hold */
TEST(cast_copy, cast_copy_bits)
TEST(cast_copy, cast_copy_writes)
TEST(cast_copy, cast_copy_live_graph)
TEST(cast_copy, cast_copy_memory)
TEST(cast_copy, cast_copy_narrowed_view)
/* the GradScaler's kernels (every path vs the reference, and vs PyTorch), training loops replayed
 * against torch.amp.GradScaler, the state machine, saving/loading, the extras */
TEST(scaler, scaler_kernels_vs_reference)
TEST(scaler, scaler_kernels_pytorch)
TEST(scaler, scaler_fp16_gradients)
TEST(scaler, scaler_state_machine)
TEST(scaler, scaler_config_and_disabled)
TEST(scaler, scaler_state_io)
TEST(scaler, scaler_hysteresis)
TEST(scaler, scaler_min_max_floor)
TEST(scaler, scaler_safe_mode)
TEST(scaler, scaler_fused_step)
TEST(scaler, scaler_sequences_pytorch)
/* SGD, Adam, AdamW against torch.optim fixtures; clip_grad_norm_ and the lr schedules against
 * torch; fp32 master weights; stochastic rounding; the fused step; arguments, allocations */
TEST(optim, optim_vs_pytorch)
TEST(optim, optim_clip_vs_pytorch)
TEST(optim, optim_lr_schedules)
TEST(optim, optim_master_weights)
TEST(optim, optim_stochastic_rounding)
TEST(optim, optim_fused_step)
TEST(optim, optim_arguments)
/* IDX image sets (plain, gzipped, every error path), text corpora, batches, the shuffler,
 * allocation failure */
TEST(data, data_idx_load)
TEST(data, data_idx_errors)
TEST(data, data_idx_batch)
TEST(data, data_text)
TEST(data, data_allocation_failure)
TEST(data, data_shuffle)
/* the BPE tokenizer: tiktoken's tokens under both patterns, round trips, rank files, training, shards */
TEST(tokenizer, tokenizer_vs_tiktoken)
TEST(tokenizer, tokenizer_round_trip)
TEST(tokenizer, tokenizer_rank_files)
TEST(tokenizer, tokenizer_train)
TEST(tokenizer, tokenizer_shards)
/* token corpora: llm.c shards by glob, their vocabulary and bad shards; BPE text split by bytes and
 * its cache; one text encoded on several threads equals one thread's tokens */
TEST(data_shards, data_shards_load)
TEST(data_shards, data_bpe_corpus)
TEST(data_shards, tokenizer_encode_parallel)
/* the built-in models vs PyTorch (names, shapes, counts, forward), init, FLOPs, SGD steps */
TEST(nn, nn_default_shapes)
TEST(nn, nn_param_counts_and_flops)
TEST(nn, nn_forward_pytorch)
TEST(nn, nn_init_deterministic)
TEST(nn, nn_sgd_lowers_loss)
TEST(nn, nn_errors_and_dtypes)
/* GPT-2: GELU's tanh approximation (PyTorch, closed form), its fused linear, amp_narrow_rows, the tiny
 * model's logits, loss and gradients against PyTorch's, the sizes and the init */
TEST(gpt2, gelu_tanh_pytorch)
TEST(gpt2, linear_gelu_tanh)
TEST(gpt2, narrow_rows)
TEST(gpt2, narrow_embedding_lowp)
TEST(gpt2, gpt2_tiny_pytorch)
TEST(gpt2, gpt2_sizes_and_init)
/* activation recomputation: bit-identical gradients and hook sequences, dropout masks and autocast
 * state restored, the contract */
TEST(recompute, recompute_gpt_bitwise)
TEST(recompute, recompute_dropout_autocast)
TEST(recompute, recompute_contract)
/* bf16 parameters with fp32 masters under amp-bf16: equal to the loop by hand, resumable, refusals */
TEST(param_dtype, param_dtype_bf16_masters)
TEST(param_dtype, param_dtype_refusals)
/* llm.c's model files: round trips (fp32, bf16), the layout, bad files; Hugging Face's layout */
TEST(llmc, llmc_round_trip)
TEST(llmc, llmc_bad_files)
TEST(llmc, llmc_hf_layout)
TEST(llmc, llmc_train_run)
/* generation with a key/value cache: the forward's logits at every position (fp32, bf16, fp16),
 * greedy and seeded sampling, the sliding window, the sampler's distribution, refusals; the
 * vocabulary a checkpoint carries; every allocation refused in turn */
TEST(generate, generate_matches_forward)
TEST(generate, generate_greedy_and_seeds)
TEST(generate, generate_sampler)
TEST(generate, generate_errors)
TEST(generate, generate_vocab)
TEST(generate, generate_alloc_fail)
/* the gradient statistics' counting pass against the definition (frexp, double compares) on edge
 * values and random ones, at power-of-two scales and others */
TEST(grad_tally, grad_tally_edges)
TEST(grad_tally, grad_tally_random)
/* amp_train_run on generated data: learning, determinism, presets and scaler modes, fp16-pure's
 * vanishing updates, accumulation, text models, errors and --detect-anomaly */
TEST(train, train_learns_and_is_deterministic)
TEST(train, train_presets_and_scalers)
TEST(train, train_pure_updates_vanish)
TEST(train, train_accumulation)
TEST(train, train_text_models)
TEST(train, train_errors_and_anomaly)
/* the memory estimate against measured runs, the refusal of a run that does not fit, the override */
TEST(memory_check, memory_available)
TEST(memory_check, memory_estimate_settings)
TEST(memory_check, memory_estimate)
TEST(memory_check, memory_refusal)
/* safetensors writer and reader, hostile files, checkpoint round trips and bit-exact resumption,
 * mismatches, atomic writes (injected full disk, SIGKILL), the committed fixture */
TEST(checkpoint, safetensors_write_read)
TEST(checkpoint, safetensors_hostile)
TEST(checkpoint, checkpoint_round_trip)
TEST(checkpoint, checkpoint_resume)
TEST(checkpoint, checkpoint_mismatch)
TEST(checkpoint, checkpoint_atomic)
TEST(checkpoint, checkpoint_fixture)
/* a one-rank communicator gives the bits of none; gradient buckets cover every gradient once and
 * start while backward runs */
TEST(train, train_data_parallel_plumbing)
/* the e5m2 gradient sum on 1 to 4 threaded ranks against a reference with its own e5m2 codec */
TEST(allreduce_fp8, allreduce_fp8_scale_and_bytes)
TEST(allreduce_fp8, allreduce_fp8_exact)
TEST(allreduce_fp8, allreduce_fp8_no_overflow)
TEST(allreduce_fp8, allreduce_fp8_nonfinite)
/* ZeRO stage 1 in one process: the sharded optimizer equals the unsharded one bit for bit, through
 * recording communicators with and without reduce_scatter/allgather; resume across it */
TEST(zero, zero_one_rank)
TEST(zero, zero_slice_optimizers)
/* the grad-ready hook reports each parameter once, with its final gradient; the backward-grad
 * hook sees each node's gradient */
TEST(nn, grad_ready_hook)
TEST(nn, backward_grad_hook)
/* float32/float64 IDX images, their batches, non-finite values refused */
TEST(data_float, data_idx_float)
/* the process-wide heap hooks; every create/load entry point with each of its allocations refused
 * in turn (an error status, no crash, no leak) */
TEST(alloc_fail, alloc_hooks)
TEST(alloc_fail, alloc_failure_loops)
/* the default heap's large blocks on 2 MiB boundaries, advised for huge pages */
TEST(alloc_huge_pages, alloc_huge_pages)
/* the lstm model's fused sequence op against T lstm_cell calls */
TEST(lstm_sequence, lstm_sequence)
/* ops split between threads give the one-thread bits */
TEST(threads, threads_elementwise)
TEST(threads, threads_pool)
TEST(threads, threads_attention)
TEST(threads, threads_convert)
TEST(threads, threads_loss)
TEST(threads, threads_linear_bias)
TEST(threads, threads_range)
TEST(threads, threads_gang)
/* relu's bit paths against their reference twins (fp16/bf16: all 2^16 inputs; fp32: 2^20) */
TEST(relu_bits, relu_bits)
TEST(relu_bits, relu_bits_f32)
/* exp, tanh, sigmoid, erfc kernels against double libm, strided 2^32 sweep, edges, tails */
TEST(vecmath, vecmath)
/* the word vocabulary of amp_text_corpus_load_words */
TEST(data_words, data_words)
/* fp32 -> narrow, all 2^32 inputs (strided under AMP_TEST_QUICK) */
TEST(encode_sweep, encode_sweep)
/* the LSTM pointwise kernels of every SIMD path against the reference, bit for bit; the fused
 * forward row kernel against the composition of its own kernels; the fused backward row with the
 * bias sum and the bf16 rounding against its composition */
TEST(lstm_kernels, lstm_kernels)
TEST(lstm_kernels, lstm_cell_forward_kernels)
TEST(lstm_kernels, lstm_cell_backward_bf16_kernels)
/* the gpt model's self-attention on a fused qkv against split heads + attention */
TEST(attention_fused, attention_fused)
/* gelu, add and layer_norm input gradients written in chunks against sliced runs */
TEST(grad_chunked_inputs, grad_chunked_inputs)
/* the fused gelu kernels of every path against their erfc/exp composition, bit for bit */
TEST(gelu_kernels, gelu_kernels)
/* the fused cross-entropy row kernels against their exp composition, bit for bit, and the
 * composition against double precision */
TEST(ce_kernels, ce_kernels)
/* the convert table's acc_rounded kernels of every path against the format reference */
TEST(convert_acc_rounded, convert_acc_rounded)
/* the convert table's encode_stream kernels of every path against the format reference */
TEST(convert_stream, convert_stream)
/* dropped non-leaf gradients' arena blocks reused: same gradients, lower peak */
TEST(grad_reuse, grad_reuse)
TEST(grad_reuse, grad_hand_over)
/* amp_gemm_fused's epilogue against amp_gemm and separate passes, bit for bit */
TEST(gemm_fused, gemm_fused_epilogue)
TEST(gemm_fused, gemm_fused_acc)
TEST(gemm_fused, gemm_fused_a_sums)
/* the layer norm, softmax and add row kernels of every SIMD path against the reference, bit for
 * bit, and the reference's summation order */
TEST(elem_kernels, elem_kernels)
/* bf16 gradients added into fp32 ones (and fp32 into bf16) in one pass, bit for bit */
TEST(grad_fused, grad_fused)
/* weight gradients into the fp32 master's inside the GEMM, against the unfused path */
TEST(grad_direct, grad_direct)
/* amp_linear_relu and amp_linear_gelu against amp_relu(amp_linear(...)) and
 * amp_gelu(amp_linear(...)), values and gradients bit for bit */
TEST(linear_act, linear_relu)
TEST(linear_act, linear_gelu)
/* amp_linear_residual against amp_add(residual, amp_linear(...)), values and gradients */
TEST(linear_residual, linear_residual)
/* the inf/NaN check backward makes as it writes the weight gradients, against the step's own check */
TEST(backward_grad_check, backward_grad_check)
/* amp_zero_grad's lazy zeros: every reader sees zeros where no gradient was written */
TEST(grad_direct, grad_lazy_zero)
/* the initializers (amp/init.h): the generator's test vectors, the fills' bounds and moments, exact
 * constants, f16/bf16 as the f32 fill rounded once, PyTorch's default bounds, errors, amp_model_init */
TEST(init, init_generator)
TEST(init, init_fills)
TEST(init, init_dtypes_and_stream)
TEST(init, init_pytorch_defaults)
TEST(init, init_errors)
TEST(init, init_model_is_public_fills)
/* the layers (amp/layers.h): PyTorch's names and order, declaration errors, default initialization,
 * each forward against a double reference of its PyTorch module */
TEST(layers, layers_names_and_order)
TEST(layers, layers_declare_errors)
TEST(layers, layers_init)
TEST(layers, layers_forward_linear_norm_embedding_conv)
TEST(layers, layers_forward_lstm)
TEST(layers, layers_forward_attention_block)
/* argmax and the count of correct rows, one batch evaluated under no-grad, the mean/std of a float
 * array and of an image set's pixels */
TEST(eval, eval_argmax_accuracy)
TEST(eval, eval_batch_no_grad)
TEST(eval, eval_mean_std)
/* fp8 recipes (amp/fp8.h): the delayed and current scale rules against TE's formulas in double, the
 * tensor-wise casts, delayed scaling's history against a hand-simulated TE sequence, MXFP8 against
 * torchao's to_mx, block scaling against a double reference */
TEST(fp8_scale, fp8_scale_from_amax)
TEST(fp8_scale, fp8_current_scale)
TEST(fp8_scale, fp8_format_dtype)
TEST(fp8_cast, fp8_amax)
TEST(fp8_cast, fp8_quantize_dequantize)
TEST(fp8_cast, fp8_delayed_history)
TEST(fp8_cast, fp8_delayed_variants)
TEST(fp8_cast, fp8_delayed_amax_init)
TEST(fp8_cast, fp8_delayed_load)
TEST(fp8_mx, mx_torchao)
TEST(fp8_mx, mx_closed_form)
TEST(fp8_mx, mx_dequantize)
TEST(fp8_mx, mx_arguments)
TEST(fp8_mx, mx_columns)
TEST(fp8_mx, mx_zero_blocks)
TEST(fp8_block, fp8_block_scaling)
/* the fp8 kernels (decode into the GEMM's packing, amax, block amax, scaled encode) of every path
 * against the reference kernels bit for bit; the threaded amax and cast */
TEST(fp8_simd, fp8_decode_row_paths)
TEST(fp8_simd, fp8_decode_pairs_paths)
TEST(fp8_simd, fp8_decode_panel_paths)
TEST(fp8_simd, fp8_amax_paths)
TEST(fp8_simd, fp8_encode_paths)
TEST(fp8_simd, fp8_encode_stats_paths)
TEST(fp8_simd, fp8_decode_band_paths)
TEST(fp8_simd, fp8_cast_threads)
TEST(fp8_simd, fp8_block_scales_paths)
/* amp_gemm_fp8 on every path and bf16 method against a double oracle, its reference twin and
 * amp_gemm bit for bit; its edge cases, non-finite inputs and statuses */
TEST(gemm_fp8, gemm_fp8_arguments)
TEST(gemm_fp8, gemm_fp8_edges)
TEST(gemm_fp8, gemm_fp8_nonfinite)
TEST(gemm_fp8, gemm_fp8_vs_oracle)
/* amp_linear_fp8 under each recipe against a double reference quantizing with amp/fp8.h; delayed
 * scaling's history and scales over steps in closed form; saturation without scales; a weight
 * reload's reset; the layers' fp8 hook; fp8 training runs: resume bit for bit, refusals, checkpoint
 * size */
TEST(fp8_linear, fp8_linear_recipes)
TEST(fp8_linear, fp8_linear_delayed_replay)
TEST(fp8_linear, fp8_linear_delayed_micro_batches)
TEST(fp8_linear, fp8_linear_amax_init)
TEST(fp8_linear, fp8_linear_noscale_saturation)
TEST(fp8_linear, fp8_linear_mx_scale_rule)
TEST(fp8_linear, fp8_linear_weights_reload)
TEST(fp8_linear, fp8_linear_layer_hook)
TEST(fp8_linear, fp8_linear_16bit_source)
TEST(fp8_train, fp8_train_recipes)
TEST(fp8_train, fp8_train_resume)
TEST(fp8_train, fp8_train_recompute)
TEST(fp8_train, fp8_train_amax_allreduce)
TEST(fp8_train, fp8_train_amax_init_allreduce)
/* misuse of the library (stale tensors, a second backward, the scaler's and autocast's state,
 * element access, unallocated parameters, NULLs), each in a child process: a clear error, no
 * signal, nothing changed */
TEST(misuse, misuse_lifetime)
TEST(misuse, misuse_backward)
TEST(misuse, misuse_scaler)
TEST(misuse, misuse_state)
