/* Softmax and log-softmax along one dimension (negative dims count from the end).
 *
 * Numerically stable: each slice subtracts its maximum before exp, so no finite input overflows; the
 * sum of exponentials is fp32 and the result is rounded once to the input's dtype. Backward reads the
 * output y (node->out, as PyTorch does); nothing else is saved but [outer, len, inner] in node->i[].
 *   softmax:     dx = y * (g - sum(g * y))
 *   log_softmax: dx = g - exp(y) * sum(g)
 * NaN anywhere in a slice makes the whole slice NaN, as does +inf (inf - inf) or a slice of only
 * -inf, which is PyTorch's behaviour too. */
#include <math.h>

#include "op_util.h"

/* The tensor as [outer, len, inner] around dim. */
static void split_dims(const amp_tensor *x, int dim, int64_t *outer, int64_t *len, int64_t *inner) {
    *outer = 1, *inner = 1;
    for (int i = 0; i < dim; i++) *outer *= x->shape[i];
    for (int i = dim + 1; i < x->ndim; i++) *inner *= x->shape[i];
    *len = x->shape[dim];
}

static void softmax_backward(amp_ctx *ctx, amp_node *node) {
    const int64_t outer = node->i[0], len = node->i[1], inner = node->i[2];
    const bool log_form = node->op == AMP_OP_LOG_SOFTMAX;
    const float *g = amp_grad_out(ctx, node);
    const float *y = amp_f32_view(ctx, node->out);
    float *dx = amp_f32_scratch(ctx, outer * len * inner);
    float *acc = amp_f32_scratch(ctx, inner); /* sum(g*y) or sum(g) of each slice in this outer row */
    if (!g || !y || !dx || !acc) return;
    for (int64_t o = 0; o < outer; o++) {
        const int64_t base = o * len * inner;
        for (int64_t i = 0; i < inner; i++) acc[i] = 0.0f;
        for (int64_t l = 0; l < len; l++)
            for (int64_t i = 0; i < inner; i++) {
                const int64_t k = base + l * inner + i;
                acc[i] += log_form ? g[k] : g[k] * y[k];
            }
        for (int64_t l = 0; l < len; l++)
            for (int64_t i = 0; i < inner; i++) {
                const int64_t k = base + l * inner + i;
                dx[k] = log_form ? g[k] - expf(y[k]) * acc[i] : y[k] * (g[k] - acc[i]);
            }
    }
    amp_grad_accumulate(ctx, node->in[0], dx);
}

static amp_tensor *softmax(amp_ctx *ctx, amp_op op, amp_tensor *x, int dim) {
    if (!amp_op_input_ok(ctx, op, x) || !amp_autocast_inputs(ctx, op, &x, 1)) return NULL;
    int64_t outer = 1, len = 1, inner = 1;
    if (x->ndim > 0 || (dim != 0 && dim != -1)) { /* a 0-dim x takes dim 0 or -1 (one element), as PyTorch */
        const int d = amp_op_dim(ctx, op, x, dim);
        if (d < 0) return NULL;
        split_dims(x, d, &outer, &len, &inner);
    }
    amp_tensor *out = amp_ctx_new_tensor(ctx, x->dtype, x->ndim, x->shape, true);
    if (!out) return NULL;
    const bool log_form = op == AMP_OP_LOG_SOFTMAX;
    amp_arena_mark m = amp_scratch_mark(ctx);
    const float *xv = amp_f32_view(ctx, x);
    float *y = x->dtype == AMP_F32 ? out->data : amp_f32_scratch(ctx, outer * len * inner);
    /* Per slice of the current outer row (the slices are the `inner` columns, walked row by row so
     * memory is read in order): the maximum, then the sum of exp(x - max). */
    float *mx = amp_f32_scratch(ctx, inner), *sum = amp_f32_scratch(ctx, inner);
    if (!xv || !y || !mx || !sum) {
        amp_scratch_release(ctx, m);
        return NULL;
    }
    for (int64_t o = 0; o < outer; o++) {
        const int64_t base = o * len * inner;
        for (int64_t i = 0; i < inner; i++) mx[i] = -INFINITY, sum[i] = 0.0f;
        for (int64_t l = 0; l < len; l++)
            for (int64_t i = 0; i < inner; i++) {
                const float v = xv[base + l * inner + i];
                if (v > mx[i]) mx[i] = v; /* skips NaN, whose exp below makes the sum NaN */
            }
        for (int64_t l = 0; l < len; l++)
            for (int64_t i = 0; i < inner; i++) {
                const int64_t k = base + l * inner + i;
                const float e = expf(xv[k] - mx[i]);
                sum[i] += e;
                if (!log_form) y[k] = e;
            }
        if (log_form) {
            for (int64_t i = 0; i < inner; i++) sum[i] = logf(sum[i]); /* now log(sum) */
            for (int64_t l = 0; l < len; l++)
                for (int64_t i = 0; i < inner; i++) {
                    const int64_t k = base + l * inner + i;
                    y[k] = (xv[k] - mx[i]) - sum[i];
                }
        } else {
            for (int64_t l = 0; l < len; l++)
                for (int64_t i = 0; i < inner; i++) y[base + l * inner + i] /= sum[i];
        }
    }
    if (x->dtype != AMP_F32) amp_store_f32(ctx, out, y);
    amp_scratch_release(ctx, m);
    amp_node *node = amp_autograd_record(ctx, op, x->dtype, out, &x, 1, softmax_backward);
    if (node) node->i[0] = outer, node->i[1] = len, node->i[2] = inner;
    return out;
}

amp_tensor *amp_softmax(amp_ctx *ctx, amp_tensor *x, int dim) { return softmax(ctx, AMP_OP_SOFTMAX, x, dim); }
amp_tensor *amp_log_softmax(amp_ctx *ctx, amp_tensor *x, int dim) {
    return softmax(ctx, AMP_OP_LOG_SOFTMAX, x, dim);
}
