/* One GEMM operand of the fp8 linear quantized under its recipe (fp8_linear.h), with the cast's
 * statistics: amax, the scales used, saturated and flushed values. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "amp/status.h"
#include "../core/alloc_internal.h"
#include "../core/float_bits.h"
#include "fp8_internal.h"
#include "fp8_linear.h"

/* The fp8 dtype of a role: HYBRID (e4m3 x and W, e5m2 dY) for the per-tensor recipes, e4m3 for all
 * under MXFP8 and block scaling. */
static amp_dtype role_dtype(amp_fp8_recipe recipe, amp_fp8_tensor_role role) {
    if (recipe == AMP_FP8_RECIPE_MXFP8 || recipe == AMP_FP8_RECIPE_BLOCK) return AMP_F8E4M3;
    return role == AMP_FP8_DY ? AMP_F8E5M2 : AMP_F8E4M3;
}

/* Counts, in the n values of src cast with `scale` into b, the finite nonzero ones that saturated
 * (|x * scale| above the format's largest finite value) or flushed to zero. */
static void count_cast(const float *src, const uint8_t *b, int64_t n, float scale, float maxf, int64_t *sat,
                       int64_t *flush) {
    int64_t s = 0, f = 0;
    for (int64_t j = 0; j < n; j++) {
        const float x = src[j];
        if (!isfinite(x) || x == 0.0f) continue;
        s += fabsf(x * scale) > maxf;
        f += (b[j] & 0x7F) == 0;
    }
    *sat += s, *flush += f;
}

/* Adds one cast to the step's statistics: q (row-major [rows, cols] fp8) from src (the same layout
 * in fp32), element (i, j) cast with q->scale (per tensor) or 1 / scale_inv of its block (a power of
 * 2: exact). Walks each row a block's width at a time, so the block's scale is looked up once. */
static void record_cast(amp_fp8_cast_stats *st, const float *src, const amp_fp8_qmat *q, float amax) {
    const float maxf = amp_fp8_max_finite(q->dtype);
    const uint8_t *b = q->data;
    int64_t sat = 0, flush = 0;
    float smin = INFINITY, smax = 0.0f;
    const int64_t width = q->block_rows ? q->block_cols : q->cols;
    for (int64_t i = 0; i < q->rows; i++)
        for (int64_t j0 = 0; j0 < q->cols; j0 += width) {
            const float scale =
                q->block_rows ? 1.0f / q->scale_inv[(i / q->block_rows) * q->ld_scale + j0 / q->block_cols] : q->scale;
            smin = fminf(smin, scale), smax = fmaxf(smax, scale);
            const int64_t n = q->cols - j0 < width ? q->cols - j0 : width;
            count_cast(src + i * q->cols + j0, b + i * q->cols + j0, n, scale, maxf, &sat, &flush);
        }
    if (st->casts == 0) st->scale_min = smin, st->scale_max = smax;
    else st->scale_min = fminf(st->scale_min, smin), st->scale_max = fmaxf(st->scale_max, smax);
    st->amax = fmaxf(st->amax, amax);
    st->count += q->rows * q->cols, st->saturated += sat, st->flushed += flush;
    st->casts++;
}

/* Per-tensor recipes: one scale for the whole matrix. */
static int quantize_tensorwise(amp_fp8_linear *s, amp_fp8_tensor_role role, const float *src, float amax,
                               amp_fp8_qmat *q) {
    float scale = 1.0f;
    if (s->recipe == AMP_FP8_RECIPE_DELAYED) {
        scale = amp_fp8_delayed_scale(s->delayed[role]);
        const int st = s->paused ? AMP_OK : amp_fp8_delayed_record(s->delayed[role], amax);
        if (st != AMP_OK) return st;
    } else if (s->recipe == AMP_FP8_RECIPE_CURRENT) {
        scale = amp_fp8_current_scale(amax, q->dtype, 0.0f, false);
    }
    /* a scale of 0 (delayed, margin near 127) casts every value to 0: kept out of the encoder's way */
    q->scale_inv[0] = scale > 0.0f ? 1.0f / scale : 1.0f;
    q->scale = scale;
    return amp_fp8_quantize(q->data, q->dtype, src, (size_t)(q->rows * q->cols), scale > 0.0f ? scale : FLT_MIN);
}

/* MXFP8: rows of `cols` values, k along the columns, zero-padded to a multiple of 32; scales E8M0
 * (RCEIL), returned as fp32 scale_inv. tmp: [rows, cols padded] fp32 staging. */
static int quantize_mx(const float *src, int64_t rows, int64_t cols, bool transpose, amp_fp8_qmat *q, float *tmp) {
    const int64_t kp = q->cols, k = transpose ? rows : cols;
    for (int64_t i = 0; i < q->rows; i++) { /* stored row i: src's row i, or its column i */
        float *row = tmp + i * kp;
        for (int64_t j = 0; j < k; j++) row[j] = transpose ? src[j * cols + i] : src[i * cols + j];
        for (int64_t j = k; j < kp; j++) row[j] = 0.0f;
    }
    uint8_t *e8 = amp_malloc((size_t)(q->rows * kp / AMP_MX_BLOCK));
    if (!e8) return AMP_ERR_OUT_OF_MEMORY;
    int st = amp_mx_quantize(q->data, e8, tmp, (size_t)(q->rows * kp), AMP_F8E4M3, AMP_MX_RCEIL);
    for (int64_t b = 0; st == AMP_OK && b < q->rows * kp / AMP_MX_BLOCK; b++)
        q->scale_inv[b] = e8[b] == 0xFF ? NAN : ldexpf(1.0f, (int)e8[b] - 127);
    amp_free(e8);
    return st;
}

int amp_fp8_linear_quantize(amp_fp8_linear *s, amp_fp8_tensor_role role, const float *src, int64_t rows,
                            int64_t cols, bool k_along_rows, amp_fp8_alloc_fn alloc, void *user, amp_fp8_qmat *out) {
    if (!s || !src || !alloc || !out) return AMP_ERR_NULL_POINTER;
    if ((unsigned)role >= AMP_FP8_ROLES || rows < 1 || cols < 1) return AMP_ERR_INVALID_ARGUMENT;
    const size_t n = (size_t)(rows * cols);
    float amax = 0.0f;
    int st = amp_fp8_amax(&amax, NULL, src, n);
    if (st != AMP_OK) return st;
    amp_fp8_qmat q = {.dtype = role_dtype(s->recipe, role), .rows = rows, .cols = cols};
    const float *stats_src = src;
    float *tmp = NULL;
    switch (s->recipe) {
    case AMP_FP8_RECIPE_MXFP8: {
        const int64_t k = k_along_rows ? rows : cols, kp = (k + AMP_MX_BLOCK - 1) / AMP_MX_BLOCK * AMP_MX_BLOCK;
        q.rows = k_along_rows ? cols : rows, q.cols = kp, q.transposed = k_along_rows;
        q.block_rows = 1, q.block_cols = AMP_MX_BLOCK, q.ld_scale = kp / AMP_MX_BLOCK;
        q.data = alloc(user, (size_t)(q.rows * kp));
        q.scale_inv = alloc(user, (size_t)(q.rows * q.ld_scale) * sizeof(float));
        tmp = amp_malloc((size_t)(q.rows * kp) * sizeof(float));
        if (!q.data || !q.scale_inv || !tmp) st = AMP_ERR_OUT_OF_MEMORY;
        if (st == AMP_OK) st = quantize_mx(src, rows, cols, k_along_rows, &q, tmp);
        stats_src = tmp;
        break;
    }
    case AMP_FP8_RECIPE_BLOCK: {
        const amp_fp8_block_shape shape = role == AMP_FP8_W ? AMP_FP8_BLOCK_128X128
                                          : k_along_rows  ? AMP_FP8_BLOCK_128X1
                                                          : AMP_FP8_BLOCK_1X128;
        q.block_rows = shape == AMP_FP8_BLOCK_1X128 ? 1 : AMP_FP8_BLOCK_TILE;
        q.block_cols = shape == AMP_FP8_BLOCK_128X1 ? 1 : AMP_FP8_BLOCK_TILE;
        q.ld_scale = shape == AMP_FP8_BLOCK_128X1 ? cols : (cols + AMP_FP8_BLOCK_TILE - 1) / AMP_FP8_BLOCK_TILE;
        q.data = alloc(user, n);
        q.scale_inv = alloc(user, amp_fp8_block_scale_count((size_t)rows, (size_t)cols, shape) * sizeof(float));
        if (!q.data || !q.scale_inv) st = AMP_ERR_OUT_OF_MEMORY;
        if (st == AMP_OK) st = amp_fp8_block_quantize(q.data, q.scale_inv, src, (size_t)rows, (size_t)cols, q.dtype, shape);
        break;
    }
    default:
        q.data = alloc(user, n);
        q.scale_inv = alloc(user, sizeof(float));
        if (!q.data || !q.scale_inv) st = AMP_ERR_OUT_OF_MEMORY;
        if (st == AMP_OK) st = quantize_tensorwise(s, role, src, amax, &q);
        break;
    }
    if (st == AMP_OK && !s->paused) record_cast(&s->step[role], stats_src, &q, amax);
    amp_free(tmp);
    if (st == AMP_OK) *out = q;
    return st;
}
