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

/* Adds one cast of q (its element count, the tally of its counts and scales, the amax) to the step's
 * statistics. */
static void record_cast(amp_fp8_cast_stats *st, const amp_fp8_qmat *q, float amax, const amp_fp8_cast_tally *t) {
    if (st->casts == 0) st->scale_min = t->scale_min, st->scale_max = t->scale_max;
    else st->scale_min = fminf(st->scale_min, t->scale_min), st->scale_max = fmaxf(st->scale_max, t->scale_max);
    st->amax = fmaxf(st->amax, amax);
    st->count += q->rows * q->cols, st->saturated += t->counts[0], st->flushed += t->counts[1];
    st->casts++;
}

/* Per-tensor recipes: one scale for the whole matrix. */
static int quantize_tensorwise(amp_fp8_linear *s, amp_fp8_tensor_role role, const float *src, float amax,
                               amp_fp8_qmat *q, amp_fp8_cast_tally *t) {
    float scale = 1.0f;
    if (s->recipe == AMP_FP8_RECIPE_DELAYED) {
        scale = amp_fp8_delayed_scale(s->delayed[role]);
        const int st = s->paused ? AMP_OK : amp_fp8_delayed_record(s->delayed[role], amax);
        if (st != AMP_OK) return st;
    } else if (s->recipe == AMP_FP8_RECIPE_CURRENT) {
        scale = amp_fp8_current_scale(amax, q->dtype, 0.0f, false);
    }
    if (isinf(scale)) return AMP_ERR_INVALID_ARGUMENT; /* the cast's check (amp_fp8_quantize) */
    /* a scale of 0 (delayed, margin near 127) casts every value to 0: kept out of the encoder's way
     * (FLT_MIN saturates nothing and flushes what 0 would: the statistics are those of 0 too) */
    q->scale_inv[0] = scale > 0.0f ? 1.0f / scale : 1.0f;
    q->scale = scale;
    amp_fp8_scaled_encode_tally(q->data, q->dtype, src, (size_t)(q->rows * q->cols), scale > 0.0f ? scale : FLT_MIN, t);
    t->scale_min = t->scale_max = scale;
    return AMP_OK;
}

enum { MX_PANEL = 16 }; /* stored rows staged at a time where k must be padded */

/* MXFP8: E8M0 scales (by `mode`) kept as fp32 scale_inv, blocks of 32 along k. k along src's columns:
 * src's rows zero-padded to q->cols (a multiple of 32), unpadded ones quantized in place, padded ones
 * MX_PANEL at a time through tmp ([MX_PANEL, q->cols] fp32). k along src's rows: the column-wise
 * kernel (fp8_internal.h), in src's layout with q->rows (a multiple of 32) rows. The statistics count
 * the padding's zeros among the values (never saturated nor flushed). */
static void quantize_mx(const float *src, int64_t rows, int64_t cols, bool k_along_rows, amp_mx_scale_mode mode,
                       amp_fp8_qmat *q, float *tmp, amp_fp8_cast_tally *t, float *amax) {
    const int64_t kp = q->cols, k = cols;
    uint8_t *out = q->data;
    if (k_along_rows) {
        amp_mx_quantize_columns_tally(out, q->scale_inv, src, (size_t)rows, (size_t)cols, AMP_F8E4M3, mode, t, amax);
        return;
    }
    if (!tmp) {
        amp_mx_quantize_tally(out, NULL, q->scale_inv, src, (size_t)(q->rows * kp), AMP_F8E4M3, mode, t, amax);
        return;
    }
    for (int64_t i0 = 0; i0 < q->rows; i0 += MX_PANEL) {
        const int64_t pr = q->rows - i0 < MX_PANEL ? q->rows - i0 : MX_PANEL;
        for (int64_t i = 0; i < pr; i++) {
            float *row = tmp + i * kp;
            memcpy(row, src + (i0 + i) * cols, (size_t)k * sizeof(float));
            for (int64_t j = k; j < kp; j++) row[j] = 0.0f;
        }
        amp_mx_quantize_tally(out + i0 * kp, NULL, q->scale_inv + i0 * (kp / AMP_MX_BLOCK), tmp, (size_t)(pr * kp),
                              AMP_F8E4M3, mode, t, amax);
    }
}

int amp_fp8_linear_quantize(amp_fp8_linear *s, amp_fp8_tensor_role role, const float *src, int64_t rows,
                            int64_t cols, bool k_along_rows, amp_fp8_alloc_fn alloc, void *user, amp_fp8_qmat *out) {
    if (!s || !src || !alloc || !out) return AMP_ERR_NULL_POINTER;
    if ((unsigned)role >= AMP_FP8_ROLES || rows < 1 || cols < 1) return AMP_ERR_INVALID_ARGUMENT;
    const size_t n = (size_t)(rows * cols);
    float amax = 0.0f;
    int st = AMP_OK;
    amp_fp8_cast_tally t = AMP_FP8_CAST_TALLY_INIT;
    amp_fp8_qmat q = {.dtype = role_dtype(s->recipe, role), .rows = rows, .cols = cols};
    float *tmp = NULL;
    switch (s->recipe) {
    case AMP_FP8_RECIPE_MXFP8: {
        const int64_t k = k_along_rows ? rows : cols, kp = (k + AMP_MX_BLOCK - 1) / AMP_MX_BLOCK * AMP_MX_BLOCK;
        if (k_along_rows) /* [kp, cols]: 32 x 1 blocks */
            q.rows = kp, q.block_rows = AMP_MX_BLOCK, q.block_cols = 1, q.ld_scale = cols;
        else /* [rows, kp]: 1 x 32 blocks */
            q.cols = kp, q.block_rows = 1, q.block_cols = AMP_MX_BLOCK, q.ld_scale = kp / AMP_MX_BLOCK;
        q.data = alloc(user, (size_t)(q.rows * q.cols));
        q.scale_inv = alloc(user, (size_t)(q.rows / q.block_rows * q.ld_scale) * sizeof(float));
        const bool staged = !k_along_rows && kp != k;
        if (staged) tmp = amp_malloc((size_t)(MX_PANEL * kp) * sizeof(float));
        if (!q.data || !q.scale_inv || (staged && !tmp)) st = AMP_ERR_OUT_OF_MEMORY;
        if (st == AMP_OK) quantize_mx(src, rows, cols, k_along_rows, s->mx_scale, &q, tmp, &t, &amax);
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
        if (st == AMP_OK)
            amp_fp8_block_quantize_tally(q.data, q.scale_inv, src, (size_t)rows, (size_t)cols, q.dtype, shape, &t, &amax);
        break;
    }
    default:
        q.data = alloc(user, n);
        q.scale_inv = alloc(user, sizeof(float));
        if (!q.data || !q.scale_inv) st = AMP_ERR_OUT_OF_MEMORY;
        if (st == AMP_OK) amax = amp_fp8_amax_skip_nan(src, n, NULL);
        if (st == AMP_OK) st = quantize_tensorwise(s, role, src, amax, &q, &t);
        break;
    }
    if (st == AMP_OK && !s->paused) record_cast(&s->step[role], &q, amax, &t);
    amp_free(tmp);
    if (st == AMP_OK) *out = q;
    return st;
}
