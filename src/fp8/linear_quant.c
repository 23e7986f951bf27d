/* One GEMM operand of the fp8 linear quantized under its recipe (fp8_linear.h), with the cast's
 * statistics: amax, the scales used, saturated and flushed values.
 *
 * A 16-bit source (the bf16 activations and gradients of amp-bf16) is never decoded whole: bands of
 * its rows are decoded to fp32 (exact) into a buffer that stays in cache, and each band is cast as
 * it comes. Every recipe's scales are local to a band or need only the whole tensor's amax, so the
 * bits are those of casting the fp32 tensor: MXFP8's blocks and block scaling's tiles lie within
 * bands of 32 or 128 rows (band_rows_of); per-tensor scaling uses one scale for every band, which
 * current scaling takes from a first pass of the bands' amaxes and delayed scaling from its history. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "amp/formats.h"
#include "amp/status.h"
#include "../core/alloc_internal.h"
#include "../core/float_bits.h"
#include "../kernels/fp8_kernels.h"
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
 * as bf16 and fp16), and where it is not fp32 a buffer of one band's rows. */
typedef struct band_src {
    const void *data;
    amp_dtype dtype;
    int64_t rows, cols;
    int64_t band; /* rows per band: all of them for an fp32 source */
    float *buf;
    /* a bf16 source under MXFP8 or block scaling with whole tiles along its rows (cols a multiple of
     * tile, 32 or 128), else tile 0: each band decoded with its maxima (decode_band_bf16), tmax the rows'
     * tile maxima and cmax the column maxima, room for a band */
    int64_t tile;
    float *tmax, *cmax;
    amp_fp8_band_fn fn; /* called on each band once (amp_fp8_linear_quantize2), or NULL */
    void *fn_arg;
} band_src;

/* Rows per band of a 16-bit source: a multiple of MXFP8's 32 x 1 blocks (32: 384 KiB of fp32 at
 * 3072 columns, in L2) or of block scaling's 128-row tiles. */
static int64_t band_rows_of(amp_fp8_recipe r) { return r == AMP_FP8_RECIPE_BLOCK ? 128 : 32; }

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
    const int64_t band = src->band;
    amp_fp8_delayed *d = s->recipe == AMP_FP8_RECIPE_DELAYED ? s->delayed[role] : NULL;
    const bool init = amp_fp8_delayed_needs_init(d); /* the amax init wants this tensor's amax first */
    float m = 0.0f, scale = 1.0f;
    bool saw_nan = false;
    if (s->recipe == AMP_FP8_RECIPE_CURRENT || whole || init) {
        for (int64_t r0 = 0; r0 < src->rows; r0 += band) {
            const int64_t n = src->rows - r0 < band ? src->rows - r0 : band;
            m = fmaxf(m, amp_fp8_amax_skip_nan(band_rows(src, r0, n), (size_t)(n * src->cols), init ? &saw_nan : NULL));
        }
    }
    if (init) {
        float a = saw_nan ? INFINITY : m; /* a NaN keeps scale 1, as an infinite amax does */
        int st = AMP_OK;
        if (!s->paused && s->amax_reduce) st = s->amax_reduce(s->amax_reduce_arg, &a);
        if (st == AMP_OK && !s->paused) st = amp_fp8_delayed_init(d, a);
        if (st != AMP_OK) return st;
        scale = s->paused ? amp_fp8_delayed_init_scale(d, a) : amp_fp8_delayed_scale(d);
    } else if (d && s->replaying && s->have_replay && role != AMP_FP8_DY) {
        scale = s->replay_scale[role]; /* a recomputed forward: the scale its first forward cast with */
    } else if (d) {
        scale = amp_fp8_delayed_scale(d);
    } else if (s->recipe == AMP_FP8_RECIPE_CURRENT) {
        scale = amp_fp8_current_scale(m, q->dtype, 0.0f, false);
    }
    if (isinf(scale)) return AMP_ERR_INVALID_ARGUMENT; /* the cast's check (amp_fp8_quantize) */
    /* a scale of 0 (delayed, margin near 127) casts every value to 0: kept out of the encoder's way
     * (FLT_MIN saturates nothing and flushes what 0 would: the statistics are those of 0 too) */
    q->scale_inv[0] = scale > 0.0f ? 1.0f / scale : 1.0f;
    q->scale = scale;
    const bool amax_here = s->recipe != AMP_FP8_RECIPE_CURRENT && !whole && !init; /* delayed, noscale: while casting */
    for (int64_t r0 = 0; r0 < src->rows; r0 += band) {
        const int64_t n = src->rows - r0 < band ? src->rows - r0 : band;
        const float *x = band_rows(src, r0, n);
        if (amax_here) m = fmaxf(m, amp_fp8_amax_skip_nan(x, (size_t)(n * src->cols), NULL));
        if (src->fn) src->fn(src->fn_arg, x, r0, n);
        amp_fp8_scaled_encode_tally((uint8_t *)q->data + r0 * src->cols, q->dtype, x, (size_t)(n * src->cols),
                                    scale > 0.0f ? scale : FLT_MIN, t);
    }
    t->scale_min = t->scale_max = scale;
    *amax = m;
    if (s->recipe == AMP_FP8_RECIPE_DELAYED && !s->paused) return amp_fp8_delayed_record(s->delayed[role], m);
    return AMP_OK;
}

enum { MX_PANEL = 16 }; /* stored rows staged at a time where MXFP8 pads k along the columns */

/* How an MXFP8 or block-scaled cast of one matrix goes: k along its rows or columns, the block shape
 * (block scaling), and its tally and amax. */
typedef struct local_cast {
    amp_fp8_qmat q;
    bool k_along_rows;
    amp_fp8_block_shape shape;
    amp_fp8_cast_tally t;
    float amax;
} local_cast;

/* Rows [r0, r0 + n) of the source (fp32 in x, row-major with src_cols columns) into c's blocks: MXFP8
 * (E8M0 scales kept as fp32 scale_inv, blocks of 32 along k) with k along the rows: the column-wise
 * kernel (fp8_internal.h) in the source's layout, r0 a multiple of 32, q->rows the source's rounded
 * up to 32; with k along the columns: rows zero-padded to q->cols (a multiple of 32), MX_PANEL rows at
 * a time through pad ([MX_PANEL, q->cols] fp32) where k is padded. Block scaling: r0 a multiple of
 * 128, each band's scales at its rows' place. tmax and cmax: NULL, or the band's maxima
 * (decode_band_bf16's with MXFP8's 32 or block scaling's 128 as the tile), which the casts take
 * instead of their own. The statistics count MXFP8's padding zeros among the values (never saturated
 * nor flushed). */
static void cast_band(local_cast *c, amp_mx_scale_mode mode, const float *x, int64_t r0, int64_t n, int64_t src_cols,
                      float *pad, const float *tmax, const float *cmax) {
    amp_fp8_qmat *q = &c->q;
    uint8_t *out = q->data;
    if (q->block_cols == 0 || q->block_rows == 0) return;
    if (q->block_rows == AMP_MX_BLOCK && q->block_cols == 1) { /* MXFP8, k along rows */
        amp_mx_quantize_columns_tally(out + r0 * src_cols, q->scale_inv + (r0 / AMP_MX_BLOCK) * src_cols, x, (size_t)n,
                                      (size_t)src_cols, AMP_F8E4M3, mode, cmax, &c->t, &c->amax);
        return;
    }
    if (q->block_rows == 1 && q->block_cols == AMP_MX_BLOCK) { /* MXFP8, k along columns */
        const int64_t kp = q->cols, k = src_cols;
        if (kp == k) {
            amp_mx_quantize_tally(out + r0 * kp, NULL, q->scale_inv + r0 * (kp / AMP_MX_BLOCK), x, (size_t)(n * kp),
                                  AMP_F8E4M3, mode, tmax, &c->t, &c->amax);
            return;
        }
        for (int64_t i0 = 0; i0 < n; i0 += MX_PANEL) {
            const int64_t pr = n - i0 < MX_PANEL ? n - i0 : MX_PANEL;
            for (int64_t i = 0; i < pr; i++) {
                float *row = pad + i * kp;
                memcpy(row, x + (i0 + i) * k, (size_t)k * sizeof(float));
                for (int64_t j = k; j < kp; j++) row[j] = 0.0f;
            }
            amp_mx_quantize_tally(out + (r0 + i0) * kp, NULL, q->scale_inv + (r0 + i0) * (kp / AMP_MX_BLOCK), pad,
                                  (size_t)(pr * kp), AMP_F8E4M3, mode, NULL, &c->t, &c->amax);
        }
        return;
    }
    float m = 0.0f; /* block scaling */
    amp_fp8_block_quantize_tally(out + r0 * src_cols, q->scale_inv + (r0 / q->block_rows) * q->ld_scale, x, (size_t)n,
                                 (size_t)src_cols, q->dtype, c->shape, c->shape == AMP_FP8_BLOCK_128X1 ? cmax : tmax,
                                 &c->t, &m);
    c->amax = fmaxf(c->amax, m);
}

/* c's shape, blocks and storage under MXFP8 or block scaling for a source [rows, cols]; false when
 * memory is short. */
static bool prepare_local(const amp_fp8_linear *s, amp_fp8_tensor_role role, int64_t rows, int64_t cols,
                          amp_fp8_alloc_fn alloc, void *user, local_cast *c) {
    amp_fp8_qmat *q = &c->q;
    *q = (amp_fp8_qmat){.dtype = role_dtype(s->recipe, role), .rows = rows, .cols = cols};
    c->t = (amp_fp8_cast_tally)AMP_FP8_CAST_TALLY_INIT, c->amax = 0.0f;
    if (s->recipe == AMP_FP8_RECIPE_MXFP8) {
        const int64_t k = c->k_along_rows ? rows : cols, kp = (k + AMP_MX_BLOCK - 1) / AMP_MX_BLOCK * AMP_MX_BLOCK;
        if (c->k_along_rows) /* [kp, cols]: 32 x 1 blocks */
            q->rows = kp, q->block_rows = AMP_MX_BLOCK, q->block_cols = 1, q->ld_scale = cols;
        else /* [rows, kp]: 1 x 32 blocks */
            q->cols = kp, q->block_rows = 1, q->block_cols = AMP_MX_BLOCK, q->ld_scale = kp / AMP_MX_BLOCK;
        q->data = alloc(user, (size_t)(q->rows * q->cols));
        q->scale_inv = alloc(user, (size_t)(q->rows / q->block_rows * q->ld_scale) * sizeof(float));
        return q->data && q->scale_inv;
    }
    c->shape = role == AMP_FP8_W ? AMP_FP8_BLOCK_128X128 : c->k_along_rows ? AMP_FP8_BLOCK_128X1 : AMP_FP8_BLOCK_1X128;
    q->block_rows = c->shape == AMP_FP8_BLOCK_1X128 ? 1 : AMP_FP8_BLOCK_TILE;
    q->block_cols = c->shape == AMP_FP8_BLOCK_128X1 ? 1 : AMP_FP8_BLOCK_TILE;
    q->ld_scale = c->shape == AMP_FP8_BLOCK_128X1 ? cols : (cols + AMP_FP8_BLOCK_TILE - 1) / AMP_FP8_BLOCK_TILE;
    q->data = alloc(user, (size_t)(rows * cols));
    q->scale_inv = alloc(user, amp_fp8_block_scale_count((size_t)rows, (size_t)cols, c->shape) * sizeof(float));
    return q->data && q->scale_inv;
}

/* MXFP8 and block scaling: the n (1 or 2) casts of c from one pass over the source's bands, each band
 * decoded once for all of them. */
static int cast_local(const amp_fp8_linear *s, const band_src *src, local_cast *c, int n) {
    int64_t pad_floats = 0;
    for (int i = 0; i < n; i++)
        if (!c[i].k_along_rows && c[i].q.cols != src->cols) pad_floats = MX_PANEL * c[i].q.cols;
    float *pad = pad_floats ? amp_malloc((size_t)pad_floats * sizeof(float)) : NULL;
    if (pad_floats && !pad) return AMP_ERR_OUT_OF_MEMORY;
    const int64_t band = src->band;
    for (int64_t r0 = 0; r0 < src->rows; r0 += band) {
        const int64_t rn = src->rows - r0 < band ? src->rows - r0 : band;
        const float *x = src->buf;
        if (src->tile)
            amp_fp8_kernels_active()->decode_band_bf16(src->buf, (const uint16_t *)src->data + r0 * src->cols, (size_t)rn,
                                                       (size_t)src->cols, (size_t)src->tile, src->tmax, src->cmax);
        else
            x = band_rows(src, r0, rn);
        for (int i = 0; i < n; i++) cast_band(&c[i], s->mx_scale, x, r0, rn, src->cols, pad, src->tmax, src->cmax);
        if (src->fn) src->fn(src->fn_arg, x, r0, rn);
    }
    amp_free(pad);
    return AMP_OK;
}

int amp_fp8_linear_quantize2(amp_fp8_linear *s, amp_fp8_tensor_role role, const void *src, amp_dtype src_dtype,
                             int64_t rows, int64_t cols, amp_fp8_alloc_fn alloc, void *user, amp_fp8_qmat *by_cols,
                             amp_fp8_qmat *by_rows, amp_fp8_band_fn fn, void *fn_arg) {
    if (!s || !src || !alloc || (!by_cols && !by_rows)) return AMP_ERR_NULL_POINTER;
    if ((unsigned)role >= AMP_FP8_ROLES || rows < 1 || cols < 1) return AMP_ERR_INVALID_ARGUMENT;
    if (src_dtype != AMP_F32 && src_dtype != AMP_BF16 && src_dtype != AMP_F16) return AMP_ERR_UNSUPPORTED_DTYPE;
    const int64_t band = src_dtype == AMP_F32 ? rows : band_rows_of(s->recipe);
    const bool local = s->recipe == AMP_FP8_RECIPE_MXFP8 || s->recipe == AMP_FP8_RECIPE_BLOCK;
    band_src b = {.data = src, .dtype = src_dtype, .rows = rows, .cols = cols, .band = band, .fn = fn, .fn_arg = fn_arg};
    if (src_dtype != AMP_F32) {
        const int64_t tile = s->recipe == AMP_FP8_RECIPE_BLOCK ? AMP_FP8_BLOCK_TILE : AMP_MX_BLOCK;
        const int64_t band_values = (rows < band ? rows : band) * cols;
        if (local && src_dtype == AMP_BF16 && cols % tile == 0) b.tile = tile;
        b.buf = amp_malloc((size_t)(band_values + (b.tile ? band_values / tile + cols : 0)) * sizeof(float));
        if (!b.buf) return AMP_ERR_OUT_OF_MEMORY;
        if (b.tile) b.tmax = b.buf + band_values, b.cmax = b.tmax + band_values / b.tile;
    }
    int st = AMP_OK;
    if (local) {
        local_cast c[2];
        int n = 0;
        if (by_cols) c[n++].k_along_rows = false;
        if (by_rows) c[n++].k_along_rows = true;
        for (int i = 0; i < n && st == AMP_OK; i++)
            if (!prepare_local(s, role, rows, cols, alloc, user, &c[i])) st = AMP_ERR_OUT_OF_MEMORY;
        if (st == AMP_OK) st = cast_local(s, &b, c, n);
        for (int i = 0; i < n && st == AMP_OK; i++) {
            if (!s->paused) record_cast(&s->step[role], &c[i].q, c[i].amax, &c[i].t);
            *(c[i].k_along_rows ? by_rows : by_cols) = c[i].q;
        }
    } else { /* per tensor: the one cast serves k along either dimension */
        amp_fp8_cast_tally t = AMP_FP8_CAST_TALLY_INIT;
        amp_fp8_qmat q = {.dtype = role_dtype(s->recipe, role), .rows = rows, .cols = cols};
        float amax = 0.0f;
        q.data = alloc(user, (size_t)(rows * cols));
        q.scale_inv = alloc(user, sizeof(float));
        st = q.data && q.scale_inv ? quantize_tensorwise(s, role, &b, &amax, &q, &t) : AMP_ERR_OUT_OF_MEMORY;
        if (st == AMP_OK && !s->paused) record_cast(&s->step[role], &q, amax, &t);
        if (st == AMP_OK && by_cols) *by_cols = q;
        if (st == AMP_OK && by_rows) *by_rows = q;
    }
    amp_free(b.buf);
    return st;
}

int amp_fp8_linear_quantize(amp_fp8_linear *s, amp_fp8_tensor_role role, const void *src, amp_dtype src_dtype,
                            int64_t rows, int64_t cols, bool k_along_rows, amp_fp8_alloc_fn alloc, void *user,
                            amp_fp8_qmat *out) {
    if (!out) return AMP_ERR_NULL_POINTER;
    return amp_fp8_linear_quantize2(s, role, src, src_dtype, rows, cols, alloc, user, k_along_rows ? NULL : out,
                                    k_along_rows ? out : NULL, NULL, NULL);
}
