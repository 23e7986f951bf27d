/* Operations on tensors. Each computes eagerly, records itself on the tape when grad mode is on and
 * an input requires grad, and has a backward that accumulates into its inputs' gradients.
 *
 * Dtypes: inputs may be F32, F16 or BF16; arithmetic accumulates in fp32 and the result is rounded
 * once to the output dtype. Unless an op says otherwise, inputs of different dtypes are promoted to
 * the widest (fp32 > bf16/fp16; bf16 with fp16 gives fp32), the op computes in that dtype and returns
 * it; `compute_dtype` of the result records it. Shapes follow PyTorch's conventions (NCHW images,
 * [out, in] linear weights). Integer inputs (class targets, token ids) are plain int32 arrays, copied
 * by the op.
 *
 * Every function returns NULL on error (recorded in the context, see amp/tensor.h). */
#ifndef AMP_OPS_H
#define AMP_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dtype and shape ---- */
amp_tensor *amp_cast(amp_ctx *ctx, amp_tensor *x, amp_dtype dtype); /* gradient cast back to x's dtype */
amp_tensor *amp_contiguous(amp_ctx *ctx, amp_tensor *x);            /* copy of a view, or x itself */
/* A view when x is contiguous, else a copy. One entry of shape may be -1 (inferred). */
amp_tensor *amp_reshape(amp_ctx *ctx, amp_tensor *x, int ndim, const int64_t *shape);
/* Flattens dims start_dim..last into one: [N,C,H,W] with start_dim 1 gives [N, C*H*W]. */
amp_tensor *amp_flatten(amp_ctx *ctx, amp_tensor *x, int start_dim);
amp_tensor *amp_transpose(amp_ctx *ctx, amp_tensor *x, int dim0, int dim1); /* a strided view */
/* The first `rows` of x along dim 0 (0 <= rows <= x's first dim) as a view of x's leading elements (x
 * made contiguous first); backward gives x the view's gradient on those rows and zeros on the rest.
 * Recorded as AMP_OP_RESHAPE. (GPT-2's tied head: logits over the first V rows of a Vp-row table.) */
amp_tensor *amp_narrow_rows(amp_ctx *ctx, amp_tensor *x, int64_t rows);
amp_tensor *amp_concat(amp_ctx *ctx, amp_tensor *const *xs, int n, int dim);

/* ---- elementwise, with NumPy/PyTorch broadcasting ---- */
amp_tensor *amp_add(amp_ctx *ctx, amp_tensor *a, amp_tensor *b);
amp_tensor *amp_sub(amp_ctx *ctx, amp_tensor *a, amp_tensor *b);
amp_tensor *amp_mul(amp_ctx *ctx, amp_tensor *a, amp_tensor *b);
amp_tensor *amp_div(amp_ctx *ctx, amp_tensor *a, amp_tensor *b);
amp_tensor *amp_scale(amp_ctx *ctx, amp_tensor *x, float s); /* x * s */
amp_tensor *amp_relu(amp_ctx *ctx, amp_tensor *x);
amp_tensor *amp_gelu(amp_ctx *ctx, amp_tensor *x); /* exact: x/2 * (1 + erf(x/sqrt 2)), PyTorch's default */
/* GELU's tanh approximation, F.gelu(x, approximate='tanh') (GPT-2's, llm.c's):
 * x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), with PyTorch's backward formula. Recorded as
 * AMP_OP_GELU (autocast treats it as gelu). */
amp_tensor *amp_gelu_tanh(amp_ctx *ctx, amp_tensor *x);
amp_tensor *amp_tanh(amp_ctx *ctx, amp_tensor *x);
amp_tensor *amp_sigmoid(amp_ctx *ctx, amp_tensor *x);
amp_tensor *amp_pow(amp_ctx *ctx, amp_tensor *x, float exponent);
amp_tensor *amp_exp(amp_ctx *ctx, amp_tensor *x);
amp_tensor *amp_log(amp_ctx *ctx, amp_tensor *x);
/* Zeroes each element with probability p and scales the rest by 1/(1-p) when training; identity
 * otherwise. The mask comes from the context's dropout generator (amp_ctx_random purpose 0). */
amp_tensor *amp_dropout(amp_ctx *ctx, amp_tensor *x, float p, bool training);

/* ---- reductions ---- */
amp_tensor *amp_sum(amp_ctx *ctx, amp_tensor *x, int dim, bool keepdim);  /* dim may be negative */
amp_tensor *amp_mean(amp_ctx *ctx, amp_tensor *x, int dim, bool keepdim);
amp_tensor *amp_sum_all(amp_ctx *ctx, amp_tensor *x);  /* a 0-dim tensor */
amp_tensor *amp_mean_all(amp_ctx *ctx, amp_tensor *x);
amp_tensor *amp_softmax(amp_ctx *ctx, amp_tensor *x, int dim);
amp_tensor *amp_log_softmax(amp_ctx *ctx, amp_tensor *x, int dim);

/* ---- losses (0-dim fp32 results, mean over the batch) ---- */
/* logits [N, C]; targets: N class indices in [0, C). */
amp_tensor *amp_cross_entropy(amp_ctx *ctx, amp_tensor *logits, const int32_t *targets);
amp_tensor *amp_mse_loss(amp_ctx *ctx, amp_tensor *pred, amp_tensor *target);

/* ---- linear algebra ---- */
/* a [..., m, k] @ b [k, n] or [..., k, n] (same leading dims) -> [..., m, n]. */
amp_tensor *amp_matmul(amp_ctx *ctx, amp_tensor *a, amp_tensor *b);
/* x [..., in] @ weight [out, in]^T + bias [out] (bias may be NULL) -> [..., out]. */
amp_tensor *amp_linear(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias);
/* amp_relu(ctx, amp_linear(ctx, x, weight, bias)) as one op, with the same values and gradients bit for
 * bit (and autocast's linear policy): the relu is applied while each block of the product is in cache,
 * and the linear's own output is never stored, so backward keeps one tensor where the pair kept two.
 * Recorded as AMP_OP_LINEAR; gradient hooks see the relu's output gradient only. */
amp_tensor *amp_linear_relu(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias);
/* amp_gelu(ctx, amp_linear(ctx, x, weight, bias)) as one op, with the same values and gradients bit for
 * bit. Where the linear computes in fp32 the gelu and its derivative are computed while each block of
 * the product is in cache, and backward multiplies by the stored derivative (it keeps that instead of
 * the pre-activation, and computes no erfc again); under autocast (a 16-bit linear) it is the pair.
 * Recorded as AMP_OP_LINEAR (the fp32 case); gradient hooks see the gelu's output gradient only. */
amp_tensor *amp_linear_gelu(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias);
/* amp_gelu_tanh(ctx, amp_linear(ctx, x, weight, bias)) as one op, the same values and gradients bit for
 * bit, as amp_linear_gelu: in fp32 the activation and its derivative are computed in one pass after
 * the product (the derivative kept for backward instead of the pre-activation); under autocast the
 * pair. */
amp_tensor *amp_linear_gelu_tanh(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias);
/* amp_add(ctx, residual, amp_linear(ctx, x, weight, bias)) as one op (a transformer's residual
 * connection), with the same values and gradients bit for bit but NaN payloads and the sign of a zero
 * gradient (residual gets the output's gradient as it is, as PyTorch passes it on, where amp_add's
 * backward gives 0 + g). Where residual is fp32, contiguous and of the output's shape, the add happens
 * while each block of the product is in cache (the linear's result rounded to its compute dtype first,
 * as amp_add reads a 16-bit one), the linear's own output is never stored, and backward hands the
 * gradient to residual instead of copying it twice; else it is the pair. Recorded as AMP_OP_LINEAR (the
 * fused case); its output is fp32 there, and gradient hooks see the sum's gradient only. */
amp_tensor *amp_linear_residual(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias,
                                amp_tensor *residual);

/* ---- normalization ---- */
/* Normalizes over the last dimension; weight and bias [last dim] may be NULL. */
amp_tensor *amp_layer_norm(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias, float eps);
/* The same norm (computed as amp_layer_norm: fp32 under autocast) with its result rounded once to
 * out_dtype (f32, f16, bf16): the values and gradients of amp_cast(amp_layer_norm(...), out_dtype)
 * without the intermediate tensor. For a norm whose only reader is an autocast matmul (a transformer's
 * ln_1 -> qkv, ln_2 -> mlp, ln_f -> lm_head), which would cast it to the low dtype anyway: like
 * Transformer Engine's LayerNormLinear, the fp32 output is never stored. */
amp_tensor *amp_layer_norm_to(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias, float eps,
                              amp_dtype out_dtype);
/* x [N, C] or [N, C, H, W]; statistics per channel C. Training: batch statistics (biased variance
 * for normalizing), running_mean/var (fp32 buffers, may be NULL) updated with momentum using the
 * unbiased variance, as PyTorch. Evaluation: normalizes with the running statistics. */
amp_tensor *amp_batch_norm(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias,
                           amp_tensor *running_mean, amp_tensor *running_var, bool training, float momentum,
                           float eps);

/* ---- layers ---- */
/* weight [V, D]; indices: numel(shape) ids in [0, V) -> [shape..., D]. */
amp_tensor *amp_embedding(amp_ctx *ctx, amp_tensor *weight, const int32_t *indices, int ndim,
                          const int64_t *shape);
/* x [N, C, H, W], weight [O, C, KH, KW], bias [O] or NULL -> [N, O, H', W']. */
amp_tensor *amp_conv2d(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias, int stride, int padding);
amp_tensor *amp_max_pool2d(amp_ctx *ctx, amp_tensor *x, int kernel, int stride);
amp_tensor *amp_avg_pool2d(amp_ctx *ctx, amp_tensor *x, int kernel, int stride);
/* One LSTM step, PyTorch's LSTMCell: gates = x W_ih^T + b_ih + h W_hh^T + b_hh, split i, f, g, o;
 * c' = sigmoid(f) c + sigmoid(i) tanh(g); h' = sigmoid(o) tanh(c'). x [B, I], h and c [B, H],
 * w_ih [4H, I], w_hh [4H, H], biases [4H] or NULL. Returns AMP_OK or an error status. */
int amp_lstm_cell(amp_ctx *ctx, amp_tensor *x, amp_tensor *h, amp_tensor *c, amp_tensor *w_ih, amp_tensor *w_hh,
                  amp_tensor *b_ih, amp_tensor *b_hh, amp_tensor **h_next, amp_tensor **c_next);
/* Causal scaled-dot-product attention: q, k, v [B, H, T, D] -> softmax(q k^T / sqrt(D) + causal
 * mask) v, [B, H, T, D]. */
amp_tensor *amp_causal_attention(amp_ctx *ctx, amp_tensor *q, amp_tensor *k, amp_tensor *v);

#ifdef __cplusplus
}
#endif
#endif /* AMP_OPS_H */
