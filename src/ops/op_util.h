/* Internal: the checks and conventions every op shares. */
#ifndef AMP_OP_UTIL_H
#define AMP_OP_UTIL_H

#include <stdbool.h>

#include "../autocast/autocast_internal.h"
#include "../tensor/autograd.h"

/* False (and an error recorded unless one is already there) when x is NULL, a tensor of an earlier
 * step (made before the last amp_ctx_reset), a parameter or buffer with no storage yet (before
 * amp_ctx_alloc_params), or not of a float dtype ops can compute in (F32, F16, BF16). */
bool amp_op_input_ok(amp_ctx *ctx, amp_op op, const amp_tensor *x);
/* The dtype two inputs compute in: equal dtypes stay, anything with F32 is F32, F16 with BF16 is F32
 * (neither holds the other). */
amp_dtype amp_promote(amp_dtype a, amp_dtype b);
/* A dim in [-ndim, ndim) normalized to [0, ndim), or -1 (error recorded) when out of range. */
int amp_op_dim(amp_ctx *ctx, amp_op op, const amp_tensor *x, int dim);
/* Records "op: message" as an invalid-argument error; returns NULL for `return amp_op_fail(...)`. */
amp_tensor *amp_op_fail(amp_ctx *ctx, amp_op op, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* x itself when it already has `dtype`, else a differentiable cast (amp_cast). */
amp_tensor *amp_op_as(amp_ctx *ctx, amp_tensor *x, amp_dtype dtype);

/* The lstm model's fast path (src/ops/lstm_sequence.c explains it): T steps of amp_lstm_cell from a zero state
 * as one node. x [B, T, I]; w_ih [4H, I], w_hh [4H, H], biases [4H] or NULL. Returns h for every step,
 * [B, T, H] in the compute dtype (recorded as AMP_OP_LSTM_CELL: autocast applies lstm_cell's policy),
 * or NULL with the error in ctx. */
amp_tensor *amp_lstm_sequence(amp_ctx *ctx, amp_tensor *x, amp_tensor *w_ih, amp_tensor *w_hh, amp_tensor *b_ih,
                              amp_tensor *b_hh);

/* The same sequence with its inputs rows of an embedding: x_t's row b is embedding[tokens[b * steps +
 * t]] ([V, I]; tokens [batch, steps], copied). The values of amp_embedding followed by
 * amp_lstm_sequence: h bit for bit; the gradients of embedding and w_ih from products of V rows instead
 * of batch * steps (src/ops/lstm_sequence_backward.c token_grads: sums in another order, and dE without the per-token
 * rounding of dx to the compute dtype). */
amp_tensor *amp_lstm_sequence_tokens(amp_ctx *ctx, amp_tensor *embedding, const int32_t *tokens, int64_t batch,
                                     int64_t steps, amp_tensor *w_ih, amp_tensor *w_hh, amp_tensor *b_ih,
                                     amp_tensor *b_hh);

/* Causal self-attention on a fused projection (src/ops/attention.c): qkv [B, T, 3C] holds q, k, v in
 * its three column blocks, each split into `heads` heads of C / heads columns; returns the heads'
 * outputs merged, [B, T, C] in qkv's dtype (recorded as AMP_OP_ATTENTION), or NULL with the error in
 * ctx. The same values as amp_causal_attention on the split heads, without the copies. */
amp_tensor *amp_causal_self_attention(amp_ctx *ctx, amp_tensor *qkv, int64_t heads);

/* relu's gradient on n contiguous values of dt (f32, f16 or bf16), threaded (src/ops/unary.c):
 * dx = x > 0 or NaN ? g : +0 on the bits (core/relu_bits.h), where x may be relu's input or its
 * output. dx overlaps neither x nor g. */
void amp_relu_grad_run(void *dx, const void *x, const void *g, int64_t n, amp_dtype dt);

#endif
