/* 2-D max and average pooling, PyTorch's semantics without padding, floor mode: x [N, C, H, W] (or
 * [C, H, W]) -> [..., H', W'] with H' = (H - kernel) / stride + 1. The result keeps x's dtype. Max
 * pooling is exact (the max is one of the inputs); it saves, per output, where in its window the
 * element it took sits (one byte for kernels up to 16: pool_kernels.h), the first maximum in row-major
 * window order on ties and the last NaN when the window has any (torch's CPU kernel:
 * `if (val > maxval || isnan(val))`), and backward routes the gradient there.
 * Average pooling sums the window in fp32 and divides once; backward spreads dy / kernel^2 evenly. */
#include <string.h>

#include "amp/formats.h"
#include "../core/parallel.h"
#include "op_util.h"
#include "../kernels/kernels.h"

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


/* The row kernels of the active path (pool_kernels.h; the kernel table's pool entries). */
void amp_max_pool_row_k2(const float *r0, const float *r1, int64_t ow, float *y, uint8_t *offsets) {
    amp_kernels_active()->pool.row_k2(r0, r1, ow, y, offsets);
}

void amp_max_pool_row_k2_bf16(const uint16_t *r0, const uint16_t *r1, int64_t ow, uint16_t *y, uint8_t *offsets) {
    amp_kernels_active()->pool.row_k2_bf16(r0, r1, ow, y, offsets);
}

void amp_max_pool_backward_row_k2(const float *g, const uint8_t *offsets, int64_t ow, float *d0, float *d1) {
    amp_kernels_active()->pool.backward_row_k2(g, offsets, ow, d0, d1);
}

void amp_max_pool_backward_row_k2_bf16(const uint16_t *g, const uint8_t *offsets, int64_t ow, uint16_t *d0,
                                       uint16_t *d1) {
    amp_kernels_active()->pool.backward_row_k2_bf16(g, offsets, ow, d0, d1);
}

/* The kernel 2, stride 2 path works on fp32 copies of a few rows at a time (in L1) instead of an fp32
 * copy of the whole input: this many floats of input rows per block. */
#define POOL_K2_BLOCK 4096

static bool use_k2_path(const pool_geom *pg) {
    return pg->kernel == 2 && pg->stride == 2 && 2 * pg->w <= POOL_K2_BLOCK;
}

/* kernel 2, stride 2 backward in blocks of output rows: g ([planes, oh, ow], contiguous, dtype gdt)
 * decoded a block at a time, the block's input rows written in fp32 (in L1) and encoded into dst
 * ([planes, h, w], dtype ddt) in one amp_convert, or written in place when ddt is f32. Every element
 * of dst is written: the rows and column floor mode leaves out get +0 (all-zero bits in every float
 * dtype). The values are those of the fp32 dx that amp_grad_accumulate would round to ddt. */
static void max_pool_backward_k2_planes(const pool_geom *pg, const void *g, amp_dtype gdt, const uint8_t *offsets,
                                        void *dst, amp_dtype ddt) {
    const size_t ges = amp_dtype_size(gdt), des = amp_dtype_size(ddt);
    const int64_t rows = POOL_K2_BLOCK / (2 * pg->w) < pg->oh ? POOL_K2_BLOCK / (2 * pg->w) : pg->oh;
    float gb[POOL_K2_BLOCK / 4], db[POOL_K2_BLOCK];
    const amp_pool_kernels *pk = &amp_kernels_active()->pool;
    if (gdt == AMP_BF16 && ddt == AMP_BF16 && pk->backward_rows_k2_bf16) { /* no fp32 copies */
        pk->backward_rows_k2_bf16(g, offsets, pg->planes, pg->h, pg->w, pg->oh, pg->ow, dst);
        return;
    }
    for (int64_t p = 0; p < pg->planes; p++) {
        for (int64_t oy0 = 0; oy0 < pg->oh; oy0 += rows) {
            const int64_t nr = pg->oh - oy0 < rows ? pg->oh - oy0 : rows;
            const int64_t o0 = (p * pg->oh + oy0) * pg->ow, i0 = (p * pg->h + 2 * oy0) * pg->w;
            const unsigned char *gsrc = (const unsigned char *)g + (size_t)o0 * ges;
            const float *gr = gdt == AMP_F32 ? (const float *)(const void *)gsrc : gb;
            float *d = ddt == AMP_F32 ? (float *)dst + i0 : db;
            if (gdt != AMP_F32) amp_convert(gb, AMP_F32, gsrc, gdt, (size_t)(nr * pg->ow));
            for (int64_t i = 0; i < nr; i++) {
                float *d0 = d + 2 * i * pg->w, *d1 = d0 + pg->w;
                pk->backward_row_k2(gr + i * pg->ow, offsets + o0 + i * pg->ow, pg->ow, d0, d1);
                if (pg->w > 2 * pg->ow) d0[pg->w - 1] = d1[pg->w - 1] = 0.0f;
            }
            if (ddt != AMP_F32)
                amp_convert((unsigned char *)dst + (size_t)i0 * des, ddt, db, AMP_F32, (size_t)(2 * nr * pg->w));
        }
        if (pg->h > 2 * pg->oh)
            memset((unsigned char *)dst + (size_t)((p * pg->h + pg->h - 1) * pg->w) * des, 0, (size_t)pg->w * des);
    }
}

/* Planes are independent, and each is computed the same wherever it falls: a range of them runs as
 * its own pooling with pointers moved to its first plane, so splitting the planes between threads
 * leaves every value as it is. */
typedef struct k2_job {
    const pool_geom *pg;
    const void *src;  /* forward: x; backward: dY */
    amp_dtype src_dt;
    void *dst;        /* forward: y; backward: dX */
    amp_dtype dst_dt;
    const uint8_t *offsets_in; /* backward: the forward's window offsets [planes, oh, ow] */
    uint8_t *offsets_out;      /* forward: where they go */
} k2_job;

/* Below this many input elements a thread, one thread (a 28 x 28 plane is 784). */
#define POOL_MIN_PER_THREAD 16384

static int64_t pool_min_planes(const pool_geom *pg) {
    const int64_t plane = pg->h * pg->w > 0 ? pg->h * pg->w : 1;
    return POOL_MIN_PER_THREAD / plane > 1 ? POOL_MIN_PER_THREAD / plane : 1;
}

static void max_pool_backward_k2_range(void *arg, int64_t p0, int64_t p1, int thread_id) {
    (void)thread_id;
    const k2_job *j = arg;
    pool_geom sub = *j->pg;
    sub.planes = p1 - p0;
    const int64_t out0 = p0 * sub.oh * sub.ow, in0 = p0 * sub.h * sub.w;
    max_pool_backward_k2_planes(&sub, (const char *)j->src + (size_t)out0 * amp_dtype_size(j->src_dt), j->src_dt,
                                j->offsets_in + out0, (char *)j->dst + (size_t)in0 * amp_dtype_size(j->dst_dt),
                                j->dst_dt);
}

static void max_pool_backward_k2(const pool_geom *pg, const void *g, amp_dtype gdt, const uint8_t *offsets,
                                 void *dst, amp_dtype ddt) {
    k2_job job = {pg, g, gdt, dst, ddt, offsets, NULL};
    amp_parallel_range(pg->planes, pool_min_planes(pg), 1, max_pool_backward_k2_range, &job);
}

static bool grad_dtype_ok(amp_dtype dt) { return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16; }

static void max_pool_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *x = node->in[0];
    const pool_geom pg = saved_geometry(node);
    const void *offsets = node->saved; /* [planes, oh, ow] window offsets */
    const int64_t n_in = pg.planes * pg.h * pg.w, plane_out = pg.oh * pg.ow, plane_in = pg.h * pg.w;
    if (use_k2_path(&pg)) {
        /* dY as it is when it is contiguous (decoded a block at a time), else through amp_grad_out */
        const amp_tensor *gt = node->out->grad;
        const bool direct = gt && amp_tensor_is_contiguous(gt) && grad_dtype_ok(gt->dtype);
        const void *g = direct ? gt->data : amp_grad_out(ctx, node);
        if (!g) return;
        const amp_dtype gdt = direct ? gt->dtype : AMP_F32;
        if (!x->grad && x->requires_grad) {
            /* x's first gradient, written in x's dtype (what amp_grad_accumulate would create) */
            amp_tensor *grad = amp_ctx_new_tensor(ctx, x->dtype, x->ndim, x->shape, true);
            if (!grad) return;
            max_pool_backward_k2(&pg, g, gdt, offsets, grad->data, x->dtype);
            x->grad = grad;
            return;
        }
        float *dx = amp_f32_scratch(ctx, n_in);
        if (!dx) return;
        max_pool_backward_k2(&pg, g, gdt, offsets, dx, AMP_F32);
        amp_grad_accumulate(ctx, x, dx);
        return;
    }
    const float *g = amp_grad_out(ctx, node);
    float *dx = amp_f32_scratch(ctx, n_in);
    if (!g || !dx) return;
    const size_t osize = pg.kernel <= AMP_POOL_BYTE_KERNEL ? 1 : 4;
    memset(dx, 0, (size_t)n_in * sizeof *dx);
    for (int64_t p = 0; p < pg.planes; p++)
        amp_max_pool_backward_plane_ref(g + p * plane_out, (const char *)offsets + (size_t)(p * plane_out) * osize,
                                        pg.w, pg.kernel, pg.stride, pg.oh, pg.ow, dx + p * plane_in);
    amp_grad_accumulate(ctx, x, dx);
}

/* kernel 2, stride 2, x contiguous: planes in blocks of output rows, each block's input rows decoded to
 * fp32 in one amp_convert (f16/bf16; an f32 x is read in place), its outputs encoded in one. Max
 * pooling is exact, so the output's bits are the picked input's (rounding an exact value). */
static void max_pool_k2_planes(const pool_geom *pg, const void *xdata, amp_dtype dt, void *ydata, uint8_t *offsets) {
    const size_t es = amp_dtype_size(dt);
    const int64_t rows = POOL_K2_BLOCK / (2 * pg->w) < pg->oh ? POOL_K2_BLOCK / (2 * pg->w) : pg->oh;
    float in[POOL_K2_BLOCK], yb[POOL_K2_BLOCK / 4];
    const amp_pool_kernels *pk = &amp_kernels_active()->pool;
    if (dt == AMP_BF16 && pk->rows_k2_bf16) { /* no decoded copy: the same bits */
        pk->rows_k2_bf16(xdata, pg->planes, pg->h, pg->w, pg->oh, pg->ow, ydata, offsets);
        return;
    }
    if (dt == AMP_F32 && pk->rows_k2) { /* the rows in place, the loop inside the kernel */
        pk->rows_k2(xdata, pg->planes, pg->h, pg->w, pg->oh, pg->ow, ydata, offsets);
        return;
    }
    for (int64_t p = 0; p < pg->planes; p++)
        for (int64_t oy0 = 0; oy0 < pg->oh; oy0 += rows) {
            const int64_t nr = pg->oh - oy0 < rows ? pg->oh - oy0 : rows;
            const int64_t o0 = (p * pg->oh + oy0) * pg->ow;
            const unsigned char *src = (const unsigned char *)xdata + (size_t)((p * pg->h + 2 * oy0) * pg->w) * es;
            const float *r = dt == AMP_F32 ? (const float *)(const void *)src : in;
            float *y = dt == AMP_F32 ? (float *)ydata + o0 : yb;
            if (dt != AMP_F32) amp_convert(in, AMP_F32, src, dt, (size_t)(2 * nr * pg->w));
            for (int64_t i = 0; i < nr; i++)
                pk->row_k2(r + 2 * i * pg->w, r + (2 * i + 1) * pg->w, pg->ow, y + i * pg->ow,
                           offsets + o0 + i * pg->ow);
            if (dt != AMP_F32)
                amp_convert((unsigned char *)ydata + (size_t)o0 * es, dt, yb, AMP_F32, (size_t)(nr * pg->ow));
        }
}

static void max_pool_k2_range(void *arg, int64_t p0, int64_t p1, int thread_id) {
    (void)thread_id;
    const k2_job *j = arg;
    pool_geom sub = *j->pg;
    sub.planes = p1 - p0;
    const int64_t out0 = p0 * sub.oh * sub.ow; /* y has x's dtype */
    max_pool_k2_planes(&sub, (const char *)j->src + (size_t)(p0 * sub.h * sub.w) * amp_dtype_size(j->src_dt), j->src_dt,
                       (char *)j->dst + (size_t)out0 * amp_dtype_size(j->dst_dt), j->offsets_out + out0);
}

/* max_pool_k2_planes over all planes, split between threads (k2_job) */
static void max_pool_k2(const amp_tensor *x, amp_tensor *out, const pool_geom *pg, uint8_t *offsets) {
    k2_job job = {pg, x->data, x->dtype, out->data, x->dtype, NULL, offsets};
    amp_parallel_range(pg->planes, pool_min_planes(pg), 1, max_pool_k2_range, &job);
}

amp_tensor *amp_max_pool2d(amp_ctx *ctx, amp_tensor *x, int kernel, int stride) {
    const amp_op op = AMP_OP_MAX_POOL2D;
    pool_geom pg;
    if (!amp_op_input_ok(ctx, op, x) || !amp_autocast_inputs(ctx, op, &x, 1) ||
        !pool_geometry(ctx, op, x, kernel, stride, &pg))
        return NULL;
    amp_tensor *out = pool_output(ctx, x, &pg);
    if (!out) return NULL;
    const int64_t n_out = pg.planes * pg.oh * pg.ow, plane_out = pg.oh * pg.ow;
    const size_t osize = pg.kernel <= AMP_POOL_BYTE_KERNEL ? 1 : 4;
    amp_arena_mark m = amp_scratch_mark(ctx);
    /* the offsets go straight into the arena when backward will need them */
    const size_t obytes = (size_t)(n_out > 0 ? n_out : 1) * osize;
    const bool record = amp_autograd_will_record(ctx, &x, 1);
    void *offsets = record ? amp_ctx_alloc(ctx, obytes) : amp_scratch_alloc(ctx, obytes);
    if (!offsets) {
        amp_scratch_release(ctx, m);
        return NULL;
    }
    if (use_k2_path(&pg) && amp_tensor_is_contiguous(x)) {
        max_pool_k2(x, out, &pg, offsets);
    } else {
        const float *xv = amp_f32_view(ctx, x);
        float *y = amp_f32_scratch(ctx, n_out);
        if (!xv || !y) {
            amp_scratch_release(ctx, m);
            return NULL;
        }
        for (int64_t p = 0; p < pg.planes; p++)
            amp_max_pool_plane_ref(xv + p * pg.h * pg.w, pg.w, pg.kernel, pg.stride, pg.oh, pg.ow, y + p * plane_out,
                                   (char *)offsets + (size_t)(p * plane_out) * osize);
        amp_store_f32(ctx, out, y);
    }
    amp_scratch_release(ctx, m);
    if (ctx->status != AMP_OK) return NULL;
    amp_node *node = amp_autograd_record(ctx, op, x->dtype, out, &x, 1, max_pool_backward);
    if (node) {
        save_geometry(node, &pg);
        node->saved = offsets;
    }
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
