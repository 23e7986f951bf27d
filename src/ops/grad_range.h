/* Internal: fp32 values added into a range of a gradient that exists already, chunk by chunk, with
 * amp_grad_accumulate's bits but with no fp32 copy of the whole tensor: for a backward whose gradient
 * is sparse or covers a prefix of a large table (embedding, narrow_rows: at GPT-2's vocabulary such a
 * copy is 147 MiB of scratch). An fp16/bf16 gradient's elements are decoded to fp32, added and
 * rounded once; an fp32 gradient's are added in place (amp_zero_grad's pending zeros written first:
 * 0 + v, as amp_grad_accumulate's store form gives). Every element must get exactly one add per
 * accumulation (0 where the backward has nothing for it), as amp_grad_accumulate's pass would. */
#ifndef AMP_GRAD_RANGE_H
#define AMP_GRAD_RANGE_H

#include "amp/formats.h"
#include "../core/accumulate.h"
#include "../tensor/autograd.h"

/* Values per chunk of the fp32 staging. */
enum { AMP_GRAD_RANGE_CHUNK = 16384 };

/* True when t requires grad and its gradient exists, contiguous, in fp16/bf16 (or fp32 too when
 * with_f32); then, as amp_grad_accumulate does first, the backward check's note of it is dropped
 * and amp_zero_grad's pending zeros are written, and *grad is that gradient. False: use
 * amp_grad_accumulate. */
static inline bool amp_grad_range_open(amp_ctx *ctx, amp_tensor *t, bool with_f32, amp_tensor **grad) {
    if (!t || !t->requires_grad || !t->grad || ctx->status != AMP_OK) return false;
    amp_tensor *g = t->grad;
    if ((g->dtype == AMP_F32 && !with_f32) || !g->data || !amp_tensor_is_contiguous(g)) return false;
    const int64_t k = amp_ctx_param_index(ctx, t);
    if (ctx->backward_grad_check) amp_ctx_grad_note_drop(ctx, k);
    if (ctx->n_grads_empty && k >= 0) amp_ctx_settle_grad(ctx, (size_t)k);
    *grad = g;
    return true;
}

/* grad's elements [off, off + len) += v[0, len), through acc (len fp32 values of scratch; unused
 * for an fp32 gradient). */
static inline void amp_grad_range_add(amp_tensor *grad, float *acc, const float *v, int64_t off, int64_t len) {
    unsigned char *gd = (unsigned char *)grad->data + (size_t)off * amp_dtype_size(grad->dtype);
    if (grad->dtype == AMP_F32) {
        amp_acc_f32((float *)gd, v, len, false);
        return;
    }
    amp_convert(acc, AMP_F32, gd, grad->dtype, (size_t)len);
    amp_acc_f32(acc, v, len, false);
    amp_convert(gd, grad->dtype, acc, AMP_F32, (size_t)len);
}

#endif /* AMP_GRAD_RANGE_H */
