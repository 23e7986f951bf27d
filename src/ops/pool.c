/* 2-D max and average pooling, PyTorch's semantics without padding, floor mode: x [N, C, H, W] (or
 * [C, H, W]) -> [..., H', W'] with H' = (H - kernel) / stride + 1. The result keeps x's dtype. Max
 * pooling is exact (the max is one of the inputs); it saves, per output, the index of the element it
 * took, the first maximum in row-major window order on ties and the last NaN when the window has any
 * (torch's CPU kernel: `if (val > maxval || isnan(val))`), and backward routes the gradient there.
 * Average pooling sums the window in fp32 and divides once; backward spreads dy / kernel^2 evenly. */
#include <math.h>
#include <string.h>

#include "op_util.h"

typedef struct {
    int64_t planes, h, w, oh, ow, kernel, stride;
} pool_geom;

static bool pool_geometry(amp_ctx *ctx, amp_op op, const amp_tensor *x, int kernel, int stride, pool_geom *pg) {
    char sx[64];
    if (x->ndim != 3 && x->ndim != 4) {
        amp_op_fail(ctx, op, "x %s must be [N, C, H, W] or [C, H, W]", amp_shape_str(x, sx, sizeof sx));
        return false;
    }
    if (kernel < 1 || stride < 1) {
        amp_op_fail(ctx, op, "kernel (%d) and stride (%d) must be at least 1", kernel, stride);
        return false;
    }
    pg->h = x->shape[x->ndim - 2], pg->w = x->shape[x->ndim - 1];
    pg->planes = amp_shape_numel(x->ndim - 2, x->shape);
    if (pg->h < kernel || pg->w < kernel) {
        amp_op_fail(ctx, op, "kernel %d is larger than the input %s", kernel, amp_shape_str(x, sx, sizeof sx));
        return false;
    }
    pg->kernel = kernel, pg->stride = stride;
    pg->oh = (pg->h - kernel) / stride + 1, pg->ow = (pg->w - kernel) / stride + 1;
    return true;
}

static amp_tensor *pool_output(amp_ctx *ctx, const amp_tensor *x, const pool_geom *pg) {
    int64_t shape[AMP_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 2] = pg->oh, shape[x->ndim - 1] = pg->ow;
    return amp_ctx_new_tensor(ctx, x->dtype, x->ndim, shape, true);
}

static void save_geometry(amp_node *node, const pool_geom *pg) {
    node->i[0] = pg->planes, node->i[1] = pg->h, node->i[2] = pg->w, node->i[3] = pg->oh, node->i[4] = pg->ow;
    node->i[5] = pg->kernel, node->i[6] = pg->stride;
}

static pool_geom saved_geometry(const amp_node *node) {
    return (pool_geom){node->i[0], node->i[1], node->i[2], node->i[3], node->i[4], node->i[5], node->i[6]};
}

/* ---- max ---- */

static void max_pool_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *x = node->in[0];
    const pool_geom pg = saved_geometry(node);
    const int64_t *argmax = node->saved; /* [planes * oh * ow], flat indices into x */
    const int64_t n_out = pg.planes * pg.oh * pg.ow, n_in = pg.planes * pg.h * pg.w;
    const float *g = amp_grad_out(ctx, node);
    float *dx = amp_f32_scratch(ctx, n_in);
    if (!g || !dx) return;
    memset(dx, 0, (size_t)n_in * sizeof *dx);
    for (int64_t i = 0; i < n_out; i++) dx[argmax[i]] += g[i];
    amp_grad_accumulate(ctx, x, dx);
}

/* One window element in scan order: it becomes the max when greater, or when it is NaN (NaN wins, as
 * in torch; a later NaN replaces an earlier one). Written as selects so the compiler need not branch
 * on data whose order is a coin flip. */
static inline void pool_pick(float v, int64_t idx, float *vmax, int64_t *best) {
    const bool take = v > *vmax || v != v;
    *vmax = take ? v : *vmax;
    *best = take ? idx : *best;
}

amp_tensor *amp_max_pool2d(amp_ctx *ctx, amp_tensor *x, int kernel, int stride) {
    const amp_op op = AMP_OP_MAX_POOL2D;
    pool_geom pg;
    if (!amp_op_input_ok(ctx, op, x) || !amp_autocast_inputs(ctx, op, &x, 1) ||
        !pool_geometry(ctx, op, x, kernel, stride, &pg))
        return NULL;
    amp_tensor *out = pool_output(ctx, x, &pg);
    if (!out) return NULL;
    const int64_t n_out = pg.planes * pg.oh * pg.ow;
    amp_arena_mark m = amp_scratch_mark(ctx);
    /* argmax goes to scratch and, when a node is recorded, into the arena for backward */
    int64_t *argmax = amp_scratch_alloc(ctx, (size_t)(n_out > 0 ? n_out : 1) * sizeof *argmax);
    const float *xv = amp_f32_view(ctx, x);
    float *y = amp_f32_scratch(ctx, n_out);
    if (!argmax || !xv || !y) {
        amp_scratch_release(ctx, m);
        return NULL;
    }
    for (int64_t p = 0; p < pg.planes; p++)
        for (int64_t oy = 0; oy < pg.oh; oy++)
            for (int64_t ox = 0; ox < pg.ow; ox++) {
                const int64_t y0 = oy * pg.stride, x0 = ox * pg.stride, o = (p * pg.oh + oy) * pg.ow + ox;
                const int64_t top = (p * pg.h + y0) * pg.w + x0;
                int64_t best = top;
                float vmax = -INFINITY;
                if (pg.kernel == 2) { /* the usual 2x2 window, unrolled: selects, not branches */
                    pool_pick(xv[top], top, &vmax, &best);
                    pool_pick(xv[top + 1], top + 1, &vmax, &best);
                    pool_pick(xv[top + pg.w], top + pg.w, &vmax, &best);
                    pool_pick(xv[top + pg.w + 1], top + pg.w + 1, &vmax, &best);
                } else {
                    for (int64_t ky = 0; ky < pg.kernel; ky++)
                        for (int64_t kx = 0; kx < pg.kernel; kx++) pool_pick(xv[top + ky * pg.w + kx], top + ky * pg.w + kx, &vmax, &best);
                }
                y[o] = vmax;
                argmax[o] = best;
            }
    amp_store_f32(ctx, out, y);
    amp_node *node = amp_autograd_record(ctx, op, x->dtype, out, &x, 1, max_pool_backward);
    if (node) {
        save_geometry(node, &pg);
        node->saved = amp_ctx_alloc(ctx, (size_t)(n_out > 0 ? n_out : 1) * sizeof *argmax);
        if (node->saved) memcpy(node->saved, argmax, (size_t)n_out * sizeof *argmax);
    }
    amp_scratch_release(ctx, m);
    return ctx->status == AMP_OK ? out : NULL;
}

/* ---- average ---- */

static void avg_pool_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *x = node->in[0];
    const pool_geom pg = saved_geometry(node);
    const int64_t n_in = pg.planes * pg.h * pg.w;
    const float inv = 1.0f / (float)(pg.kernel * pg.kernel);
    const float *g = amp_grad_out(ctx, node);
    float *dx = amp_f32_scratch(ctx, n_in);
    if (!g || !dx) return;
    memset(dx, 0, (size_t)n_in * sizeof *dx);
    for (int64_t p = 0; p < pg.planes; p++)
        for (int64_t oy = 0; oy < pg.oh; oy++)
            for (int64_t ox = 0; ox < pg.ow; ox++) {
                const float share = g[(p * pg.oh + oy) * pg.ow + ox] * inv;
                for (int64_t ky = 0; ky < pg.kernel; ky++) {
                    float *row = dx + (p * pg.h + oy * pg.stride + ky) * pg.w + ox * pg.stride;
                    for (int64_t kx = 0; kx < pg.kernel; kx++) row[kx] += share;
                }
            }
    amp_grad_accumulate(ctx, x, dx);
}

amp_tensor *amp_avg_pool2d(amp_ctx *ctx, amp_tensor *x, int kernel, int stride) {
    const amp_op op = AMP_OP_AVG_POOL2D;
    pool_geom pg;
    if (!amp_op_input_ok(ctx, op, x) || !amp_autocast_inputs(ctx, op, &x, 1) ||
        !pool_geometry(ctx, op, x, kernel, stride, &pg))
        return NULL;
    amp_tensor *out = pool_output(ctx, x, &pg);
    if (!out) return NULL;
    const int64_t n_out = pg.planes * pg.oh * pg.ow;
    const float area = (float)(pg.kernel * pg.kernel);
    amp_arena_mark m = amp_scratch_mark(ctx);
    const float *xv = amp_f32_view(ctx, x);
    float *y = amp_f32_scratch(ctx, n_out);
    if (!xv || !y) {
        amp_scratch_release(ctx, m);
        return NULL;
    }
    for (int64_t p = 0; p < pg.planes; p++)
        for (int64_t oy = 0; oy < pg.oh; oy++)
            for (int64_t ox = 0; ox < pg.ow; ox++) {
                float sum = 0.0f;
                for (int64_t ky = 0; ky < pg.kernel; ky++) {
                    const float *row = xv + (p * pg.h + oy * pg.stride + ky) * pg.w + ox * pg.stride;
                    for (int64_t kx = 0; kx < pg.kernel; kx++) sum += row[kx];
                }
                y[(p * pg.oh + oy) * pg.ow + ox] = sum / area;
            }
    amp_store_f32(ctx, out, y);
    amp_scratch_release(ctx, m);
    amp_node *node = amp_autograd_record(ctx, op, x->dtype, out, &x, 1, avg_pool_backward);
    if (node) save_geometry(node, &pg);
    return ctx->status == AMP_OK ? out : NULL;
}
