/* One GEMM operand of the fp8 linear quantized under its recipe (fp8_linear.h), with the cast's
 * statistics: amax, the scales used, saturated and flushed values.
 *
 * A 16-bit source (the bf16 activations and gradients of amp-bf16) is never decoded whole: bands of
 * its rows are decoded to fp32 (exact) into a buffer that stays in cache, and each band is cast as
 * it comes. Every recipe's scales are local to a band or need only the whole tensor's amax, so the
 * bits are those of casting the fp32 tensor: MXFP8's blocks and block scaling's tiles lie within
 * bands of 32 or 128 rows (BAND_ROWS); per-tensor scaling uses one scale for every band, which
 * current scaling takes from a first pass of the bands' amaxes and delayed scaling from its history. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "amp/formats.h"
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

/* Adds one cast of q (its element count, the tally of its counts and scales, the amax) to the step's
 * statistics. */
static void record_cast(amp_fp8_cast_stats *st, const amp_fp8_qmat *q, float amax, const amp_fp8_cast_tally *t) {
    if (st->casts == 0) st->scale_min = t->scale_min, st->scale_max = t->scale_max;
    else st->scale_min = fminf(st->scale_min, t->scale_min), st->scale_max = fmaxf(st->scale_max, t->scale_max);
    st->amax = fmaxf(st->amax, amax);
    st->count += q->rows * q->cols, st->saturated += t->counts[0], st->flushed += t->counts[1];
    st->casts++;
}

/* The source: row-major [rows, cols] in dtype (fp32, or any dtype amp_convert decodes exactly, such
 * as bf16 and fp16), and where it is not fp32 a buffer of BAND_ROWS rows (MX_PANEL rows of k padded
 * for MXFP8 with k along the columns). */
typedef struct band_src {
    const void *data;
    amp_dtype dtype;
    int64_t rows, cols;
    float *buf;
} band_src;

/* A multiple of MXFP8's 32 x 1 blocks and of block scaling's 128-row tiles. */
enum { BAND_ROWS = 128 };

/* Rows [r0, r0 + n) of the source as fp32: in place where it is fp32, else decoded into buf. */
static const float *band_rows(const band_src *b, int64_t r0, int64_t n) {
    if (b->dtype == AMP_F32) return (const float *)b->data + r0 * b->cols;
    const char *p = (const char *)b->data + (size_t)(r0 * b->cols) * amp_dtype_size(b->dtype);
    amp_convert(b->buf, AMP_F32, p, b->dtype, (size_t)(n * b->cols));
    return b->buf;
}

/* Per-tensor recipes: one scale for the whole matrix; the bands' amaxes (current scaling's scale
 * needs them all first) and casts. */
static int quantize_tensorwise(amp_fp8_linear *s, amp_fp8_tensor_role role, const band_src *src, float *amax,
                               amp_fp8_qmat *q, amp_fp8_cast_tally *t) {
    const bool whole = src->dtype == AMP_F32;
    const int64_t band = whole ? src->rows : BAND_ROWS;
    float m = 0.0f, scale = 1.0f;
    if (s->recipe == AMP_FP8_RECIPE_CURRENT || whole) {
        for (int64_t r0 = 0; r0 < src->rows; r0 += band) {
            const int64_t n = src->rows - r0 < band ? src->rows - r0 : band;
            m = fmaxf(m, amp_fp8_amax_skip_nan(band_rows(src, r0, n), (size_t)(n * src->cols), NULL));
        }
    }
    if (s->recipe == AMP_FP8_RECIPE_DELAYED) scale = amp_fp8_delayed_scale(s->delayed[role]);
    else if (s->recipe == AMP_FP8_RECIPE_CURRENT) scale = amp_fp8_current_scale(m, q->dtype, 0.0f, false);
    if (isinf(scale)) return AMP_ERR_INVALID_ARGUMENT; /* the cast's check (amp_fp8_quantize) */
    /* a scale of 0 (delayed, margin near 127) casts every value to 0: kept out of the encoder's way
     * (FLT_MIN saturates nothing and flushes what 0 would: the statistics are those of 0 too) */
    q->scale_inv[0] = scale > 0.0f ? 1.0f / scale : 1.0f;
    q->scale = scale;
    const bool amax_here = s->recipe != AMP_FP8_RECIPE_CURRENT && !whole; /* delayed, noscale: while casting */
    for (int64_t r0 = 0; r0 < src->rows; r0 += band) {
        const int64_t n = src->rows - r0 < band ? src->rows - r0 : band;
        const float *x = band_rows(src, r0, n);
        if (amax_here) m = fmaxf(m, amp_fp8_amax_skip_nan(x, (size_t)(n * src->cols), NULL));
        amp_fp8_scaled_encode_tally((uint8_t *)q->data + r0 * src->cols, q->dtype, x, (size_t)(n * src->cols),
                                    scale > 0.0f ? scale : FLT_MIN, t);
    }
    t->scale_min = t->scale_max = scale;
    *amax = m;
    if (s->recipe == AMP_FP8_RECIPE_DELAYED && !s->paused) return amp_fp8_delayed_record(s->delayed[role], m);
    return AMP_OK;
}

enum { MX_PANEL = 16 }; /* stored rows staged at a time where k must be padded or decoded */

/* MXFP8: E8M0 scales (by `mode`) kept as fp32 scale_inv, blocks of 32 along k. k along src's columns:
 * src's rows zero-padded to q->cols (a multiple of 32), unpadded fp32 ones quantized in place, others
 * MX_PANEL at a time through src->buf ([MX_PANEL, q->cols] fp32). k along src's rows: the column-wise
 * kernel (fp8_internal.h), in src's layout with q->rows (a multiple of 32) rows, BAND_ROWS source rows
 * at a time. The statistics count the padding's zeros among the values (never saturated nor
 * flushed). */
static void quantize_mx(const band_src *src, bool k_along_rows, amp_mx_scale_mode mode, amp_fp8_qmat *q,
                        amp_fp8_cast_tally *t, float *amax) {
    const int64_t kp = q->cols, k = src->cols, rows = src->rows, cols = src->cols;
    uint8_t *out = q->data;
    if (k_along_rows) {
        const int64_t band = src->dtype == AMP_F32 ? rows : BAND_ROWS;
        for (int64_t r0 = 0; r0 < rows; r0 += band) {
            const int64_t n = rows - r0 < band ? rows - r0 : band;
            amp_mx_quantize_columns_tally(out + r0 * cols, q->scale_inv + (r0 / AMP_MX_BLOCK) * cols,
                                          band_rows(src, r0, n), (size_t)n, (size_t)cols, AMP_F8E4M3, mode, t, amax);
        }
        return;
    }
    if (!src->buf) {
        amp_mx_quantize_tally(out, NULL, q->scale_inv, src->data, (size_t)(q->rows * kp), AMP_F8E4M3, mode, t, amax);
        return;
    }
    const size_t es = amp_dtype_size(src->dtype);
    for (int64_t i0 = 0; i0 < q->rows; i0 += MX_PANEL) {
        const int64_t pr = q->rows - i0 < MX_PANEL ? q->rows - i0 : MX_PANEL;
        for (int64_t i = 0; i < pr; i++) {
            float *row = src->buf + i * kp;
            amp_convert(row, AMP_F32, (const char *)src->data + (size_t)((i0 + i) * cols) * es, src->dtype, (size_t)k);
            for (int64_t j = k; j < kp; j++) row[j] = 0.0f;
        }
        amp_mx_quantize_tally(out + i0 * kp, NULL, q->scale_inv + i0 * (kp / AMP_MX_BLOCK), src->buf,
                              (size_t)(pr * kp), AMP_F8E4M3, mode, t, amax);
    }
}

/* Block scaling: BAND_ROWS rows at a time (whole tiles), each band's scales at its rows' place. */
static void quantize_block(const band_src *src, amp_fp8_block_shape shape, amp_fp8_qmat *q, amp_fp8_cast_tally *t,
                           float *amax) {
    const int64_t band = src->dtype == AMP_F32 ? src->rows : BAND_ROWS, cols = src->cols;
    for (int64_t r0 = 0; r0 < src->rows; r0 += band) {
        const int64_t n = src->rows - r0 < band ? src->rows - r0 : band;
        float m = 0.0f;
        amp_fp8_block_quantize_tally((uint8_t *)q->data + r0 * cols, q->scale_inv + (r0 / q->block_rows) * q->ld_scale,
                                     band_rows(src, r0, n), (size_t)n, (size_t)cols, q->dtype, shape, t, &m);
        *amax = fmaxf(*amax, m);
    }
}

int amp_fp8_linear_quantize(amp_fp8_linear *s, amp_fp8_tensor_role role, const void *src, amp_dtype src_dtype,
                            int64_t rows, int64_t cols, bool k_along_rows, amp_fp8_alloc_fn alloc, void *user,
                            amp_fp8_qmat *out) {
    if (!s || !src || !alloc || !out) return AMP_ERR_NULL_POINTER;
    if ((unsigned)role >= AMP_FP8_ROLES || rows < 1 || cols < 1) return AMP_ERR_INVALID_ARGUMENT;
    if (src_dtype != AMP_F32 && src_dtype != AMP_BF16 && src_dtype != AMP_F16) return AMP_ERR_UNSUPPORTED_DTYPE;
    const size_t n = (size_t)(rows * cols);
    float amax = 0.0f;
    int st = AMP_OK;
    amp_fp8_cast_tally t = AMP_FP8_CAST_TALLY_INIT;
    amp_fp8_qmat q = {.dtype = role_dtype(s->recipe, role), .rows = rows, .cols = cols};
    band_src b = {.data = src, .dtype = src_dtype, .rows = rows, .cols = cols};
    size_t buf_floats = src_dtype == AMP_F32 ? 0 : (size_t)((rows < BAND_ROWS ? rows : BAND_ROWS) * cols);
    switch (s->recipe) {
    case AMP_FP8_RECIPE_MXFP8: {
        const int64_t k = k_along_rows ? rows : cols, kp = (k + AMP_MX_BLOCK - 1) / AMP_MX_BLOCK * AMP_MX_BLOCK;
        if (k_along_rows) /* [kp, cols]: 32 x 1 blocks */
            q.rows = kp, q.block_rows = AMP_MX_BLOCK, q.block_cols = 1, q.ld_scale = cols;
        else /* [rows, kp]: 1 x 32 blocks */
            q.cols = kp, q.block_rows = 1, q.block_cols = AMP_MX_BLOCK, q.ld_scale = kp / AMP_MX_BLOCK;
        q.data = alloc(user, (size_t)(q.rows * q.cols));
        q.scale_inv = alloc(user, (size_t)(q.rows / q.block_rows * q.ld_scale) * sizeof(float));
        if (!k_along_rows && (kp != k || src_dtype != AMP_F32)) buf_floats = (size_t)(MX_PANEL * kp); /* staged */
        b.buf = buf_floats ? amp_malloc(buf_floats * sizeof(float)) : NULL;
        if (!q.data || !q.scale_inv || (buf_floats && !b.buf)) st = AMP_ERR_OUT_OF_MEMORY;
        if (st == AMP_OK) quantize_mx(&b, k_along_rows, s->mx_scale, &q, &t, &amax);
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
        b.buf = buf_floats ? amp_malloc(buf_floats * sizeof(float)) : NULL;
        if (!q.data || !q.scale_inv || (buf_floats && !b.buf)) st = AMP_ERR_OUT_OF_MEMORY;
        if (st == AMP_OK) quantize_block(&b, shape, &q, &t, &amax);
        break;
    }
    default:
        q.data = alloc(user, n);
        q.scale_inv = alloc(user, sizeof(float));
        b.buf = buf_floats ? amp_malloc(buf_floats * sizeof(float)) : NULL;
        if (!q.data || !q.scale_inv || (buf_floats && !b.buf)) st = AMP_ERR_OUT_OF_MEMORY;
        if (st == AMP_OK) st = quantize_tensorwise(s, role, &b, &amax, &q, &t);
        break;
    }
    if (st == AMP_OK && !s->paused) record_cast(&s->step[role], &q, amax, &t);
    amp_free(b.buf);
    if (st == AMP_OK) *out = q;
    return st;
}
