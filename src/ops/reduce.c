/* Sums and means, over one dimension or all of them. The accumulator is fp32 (a sequential sum per
 * output element); the result keeps the input's dtype, as in PyTorch. */
#include <string.h>

#include "op_util.h"

/* [outer, len, inner] around dim. */
static void reduce_dims(const amp_tensor *x, int dim, int64_t *outer, int64_t *len, int64_t *inner) {
    *outer = 1, *inner = 1;
    for (int i = 0; i < dim; i++) *outer *= x->shape[i];
    for (int i = dim + 1; i < x->ndim; i++) *inner *= x->shape[i];
    *len = x->shape[dim];
}

static void reduce_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *x = node->in[0];
    const int64_t outer = node->i[0], len = node->i[1], inner = node->i[2];
    const float scale = node->f[0]; /* 1 for sum, 1/len for mean */
    const float *g = amp_grad_out(ctx, node);
    float *dx = amp_f32_scratch(ctx, amp_tensor_numel(x));
    if (!g || !dx) return;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t l = 0; l < len; l++)
            for (int64_t i = 0; i < inner; i++) dx[(o * len + l) * inner + i] = g[o * inner + i] * scale;
    amp_grad_accumulate(ctx, x, dx);
}

static amp_tensor *reduce(amp_ctx *ctx, amp_op op, amp_tensor *x, int dim, bool keepdim, bool all) {
    if (!amp_op_input_ok(ctx, op, x) || !amp_autocast_inputs(ctx, op, &x, 1)) return NULL;
    int64_t outer, len, inner, shape[AMP_MAX_DIMS];
    int ndim = 0;
    if (all) {
        outer = 1, len = amp_tensor_numel(x), inner = 1;
    } else {
        int d = amp_op_dim(ctx, op, x, dim);
        if (d < 0) return NULL;
        reduce_dims(x, d, &outer, &len, &inner);
        for (int i = 0; i < x->ndim; i++) {
            if (i != d)
                shape[ndim++] = x->shape[i];
            else if (keepdim)
                shape[ndim++] = 1;
        }
    }
    amp_tensor *out = amp_ctx_new_tensor(ctx, x->dtype, ndim, shape, true);
    if (!out) return NULL;
    const float scale = (op == AMP_OP_MEAN && len > 0) ? 1.0f / (float)len : 1.0f;
    amp_arena_mark m = amp_scratch_mark(ctx);
    const float *xv = amp_f32_view(ctx, x);
    float *y = amp_f32_scratch(ctx, outer * inner);
    if (!xv || !y) {
        amp_scratch_release(ctx, m);
        return NULL;
    }
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            float acc = 0.0f;
            for (int64_t l = 0; l < len; l++) acc += xv[(o * len + l) * inner + i];
            y[o * inner + i] = op == AMP_OP_MEAN ? acc / (float)len : acc;
        }
    }
    amp_store_f32(ctx, out, y);
    amp_scratch_release(ctx, m);
    amp_node *node = amp_autograd_record(ctx, op, x->dtype, out, &x, 1, reduce_backward);
    if (node) {
        node->i[0] = outer, node->i[1] = len, node->i[2] = inner;
        node->f[0] = scale;
    }
    return out;
}

amp_tensor *amp_sum(amp_ctx *ctx, amp_tensor *x, int dim, bool keepdim) {
    return reduce(ctx, AMP_OP_SUM, x, dim, keepdim, false);
}
amp_tensor *amp_mean(amp_ctx *ctx, amp_tensor *x, int dim, bool keepdim) {
    return reduce(ctx, AMP_OP_MEAN, x, dim, keepdim, false);
}
amp_tensor *amp_sum_all(amp_ctx *ctx, amp_tensor *x) { return reduce(ctx, AMP_OP_SUM, x, 0, false, true); }
amp_tensor *amp_mean_all(amp_ctx *ctx, amp_tensor *x) { return reduce(ctx, AMP_OP_MEAN, x, 0, false, true); }
