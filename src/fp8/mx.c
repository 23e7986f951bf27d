/* MXFP8 (OCP Microscaling v1.0): blocks of 32 values sharing one E8M0 scale 2^(byte-127), with the
 * four ways of choosing the exponent that torchao's to_mx offers. fp8.h states the rules and the
 * documented differences from torchao. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "amp/fp8.h"
#include "amp/status.h"
#include "../core/float_bits.h"
#include "../kernels/fp8_kernels.h"
#include "fp8_internal.h"

enum { E8M0_NAN = 0xFF, AMAX_CHUNK = 64 };

/* The scale bytes, the encode's multipliers 2^(127 - byte), the GEMM's factors and the tallies of a
 * run of blocks are the active path's mx_scales kernel (kernels/fp8_kernels.h), which holds the four
 * rules of amp/fp8.h. */

/* The payload of a NaN block, torchao's bits on x86 (fp8.h); the values are NaN on decode anyway. */
static float nan_block_value(float x, amp_mx_scale_mode mode) {
    if (mode == AMP_MX_RCEIL) return amp_f32_from_bits(0x7FC00000u);
    if (isnan(x)) return x;
    if (isinf(x)) return amp_f32_from_bits(0xFFC00000u); /* inf / inf: the default NaN */
    return copysignf(0.0f, x);                            /* x / inf */
}

/* The scale 2^(byte-127) an E8M0 byte stands for: 2^-127 is the subnormal 0x00400000; 0xFF is NaN (the
 * OCP definition). */
static float e8m0_value(uint8_t byte) {
    return byte == E8M0_NAN ? amp_f32_from_bits(0x7FC00000u)
           : byte == 0      ? amp_f32_from_bits(0x00400000u)
                            : amp_f32_from_bits((uint32_t)byte << 23);
}

static int check_mx(const void *a, const void *b, const void *c, size_t n, amp_dtype elem) {
    if (!amp_fp8_dtype_ok(elem)) return AMP_ERR_UNSUPPORTED_DTYPE;
    if (n % AMP_MX_BLOCK != 0) return AMP_ERR_INVALID_ARGUMENT;
    if (n > 0 && (!a || !b || !c)) return AMP_ERR_NULL_POINTER;
    return AMP_OK;
}

/* A NaN block (scale byte 0xFF): its payloads, and its statistics under the NaN scale: nothing
 * saturates (|x * NaN| > max is false); a finite nonzero value whose byte is +-0 is flushed. */
static void quantize_nan_block(uint8_t *out, const float *x, amp_dtype elem, amp_mx_scale_mode mode,
                               amp_fp8_cast_tally *t) {
    float v[AMP_MX_BLOCK];
    for (int i = 0; i < AMP_MX_BLOCK; i++) v[i] = nan_block_value(x[i], mode);
    amp_fp8_scaled_encode(out, elem, v, AMP_MX_BLOCK, 1.0f);
    for (int i = 0; i < AMP_MX_BLOCK; i++) t->counts[1] += isfinite(x[i]) && x[i] != 0.0f && (out[i] & 0x7F) == 0;
}

void amp_mx_quantize_tally(void *dst, uint8_t *scales_e8m0, float *scale_inv, const float *src, size_t n,
                           amp_dtype elem, amp_mx_scale_mode mode, const float *pre, amp_fp8_cast_tally *t,
                           float *amax) {
    uint8_t *out = dst;
    const amp_fp8_kernels *fk = amp_fp8_kernels_active();
    float bmax[AMAX_CHUNK], mult[AMAX_CHUNK];
    uint8_t byte[AMAX_CHUNK];
    const size_t nblocks = n / AMP_MX_BLOCK;
    float m = *amax;
    for (size_t b0 = 0; b0 < nblocks; b0 += AMAX_CHUNK) { /* AMAX_CHUNK blocks at a time */
        const size_t nb = nblocks - b0 < AMAX_CHUNK ? nblocks - b0 : AMAX_CHUNK;
        const float *x = src + b0 * AMP_MX_BLOCK;
        if (pre) memcpy(bmax, pre + b0, nb * sizeof(float));
        else fk->block_amax(bmax, x, nb, AMP_MX_BLOCK); /* NaN where a block has one */
        float stats[3] = {t->scale_min, t->scale_max, m};
        const bool nan = fk->mx_scales(byte, mult, scale_inv ? scale_inv + b0 : NULL, bmax, nb, elem, mode, stats);
        t->scale_min = stats[0], t->scale_max = stats[1], m = stats[2];
        if (scales_e8m0) memcpy(scales_e8m0 + b0, byte, nb);
        if (!nan) {
            fk->encode_stats[elem](out + b0 * AMP_MX_BLOCK, x, nb * AMP_MX_BLOCK, 0.0f, mult, AMP_MX_BLOCK, t->counts);
            continue;
        }
        for (size_t b = 0; b < nb;) { /* runs of blocks with finite scales through the fused encode */
            size_t e = b;
            while (e < nb && byte[e] != E8M0_NAN) e++;
            if (e > b)
                fk->encode_stats[elem](out + (b0 + b) * AMP_MX_BLOCK, x + b * AMP_MX_BLOCK, (e - b) * AMP_MX_BLOCK, 0.0f,
                                       mult + b, AMP_MX_BLOCK, t->counts);
            if (e < nb) {
                const float a = fk->amax(x + e * AMP_MX_BLOCK, AMP_MX_BLOCK, NULL);
                if (a > m) m = a;
                quantize_nan_block(out + (b0 + e) * AMP_MX_BLOCK, x + e * AMP_MX_BLOCK, elem, mode, t);
                e++;
            }
            b = e;
        }
    }
    *amax = m;
}

/* Column j's 32-row block of a panel the plain way: gathered, zero-padded, quantized as one block,
 * its 32 payloads (the padding's too) scattered down the column (out, row stride ld). */
static void quantize_column_block(uint8_t *out, size_t ld, float *inv, const float *src, size_t h, size_t cols,
                                  amp_dtype elem, amp_mx_scale_mode mode, amp_fp8_cast_tally *t, float *amax) {
    float v[AMP_MX_BLOCK];
    uint8_t q[AMP_MX_BLOCK];
    for (size_t r = 0; r < AMP_MX_BLOCK; r++) v[r] = r < h ? src[r * cols] : 0.0f;
    amp_mx_quantize_tally(q, NULL, inv, v, AMP_MX_BLOCK, elem, mode, NULL, t, amax);
    for (size_t r = 0; r < AMP_MX_BLOCK; r++) out[r * ld] = q[r];
}

enum { COL_PANEL = 256 }; /* columns per pass: a band's 32 rows of them (32 KiB of fp32) stay in L1 */

/* Column-wise MX of one panel: h <= 32 source rows by w <= COL_PANEL columns at x (row stride ld),
 * into the stored rows at out (row stride ld; rows h..31, the padding, fp8 zeros) and the block row's
 * scale_inv at inv (w floats). A panel holding a NaN is quantized column by column the plain way (its
 * NaN blocks have their own payloads and amax); else the column maxima, a multiplier per column, and
 * each row through the fused encode. */
static void quantize_panel(uint8_t *out, float *inv, const float *x, size_t h, size_t w, size_t ld, amp_dtype elem,
                           amp_mx_scale_mode mode, const float *cmax, amp_fp8_cast_tally *t, float *amax) {
    const amp_fp8_kernels *fk = amp_fp8_kernels_active();
    float mult[COL_PANEL];
    bool nan = false;
    for (size_t j = 0; j < w; j++) mult[j] = cmax ? cmax[j] : 0.0f, nan |= isnan(mult[j]);
    if (!cmax) nan = fk->col_amax(mult, x, h, w, ld); /* each column block's amax (then its multiplier), or a NaN */
    if (nan) {
        for (size_t j = 0; j < w; j++) quantize_column_block(out + j, ld, inv + j, x + j, h, ld, elem, mode, t, amax);
        return;
    }
    uint8_t bytes[COL_PANEL];
    float stats[3] = {t->scale_min, t->scale_max, *amax};
    fk->mx_scales(bytes, mult, inv, mult, w, elem, mode, stats); /* no NaN here: the maxima become multipliers */
    t->scale_min = stats[0], t->scale_max = stats[1], *amax = stats[2];
    for (size_t r = 0; r < h; r++) fk->encode_stats[elem](out + r * ld, x + r * ld, w, 0.0f, mult, 1, t->counts);
    for (size_t r = h; r < AMP_MX_BLOCK; r++) memset(out + r * ld, 0, w); /* the padding: fp8 zeros */
}

void amp_mx_quantize_columns_tally(uint8_t *out, float *scale_inv, const float *src, size_t rows, size_t cols,
                                   amp_dtype elem, amp_mx_scale_mode mode, const float *cmax, amp_fp8_cast_tally *t,
                                   float *amax) {
    for (size_t r0 = 0; r0 < rows; r0 += AMP_MX_BLOCK) {
        const size_t h = rows - r0 < AMP_MX_BLOCK ? rows - r0 : AMP_MX_BLOCK;
        for (size_t c0 = 0; c0 < cols; c0 += COL_PANEL) {
            const size_t w = cols - c0 < COL_PANEL ? cols - c0 : COL_PANEL;
            quantize_panel(out + r0 * cols + c0, scale_inv + (r0 / AMP_MX_BLOCK) * cols + c0, src + r0 * cols + c0, h, w,
                           cols, elem, mode, cmax && rows <= AMP_MX_BLOCK ? cmax + c0 : NULL, t, amax);
        }
    }
}

int amp_mx_quantize(void *dst, uint8_t *scales_e8m0, const float *src, size_t n, amp_dtype elem,
                    amp_mx_scale_mode mode) {
    const int st = check_mx(dst, scales_e8m0, src, n, elem);
    if (st != AMP_OK) return st;
    if ((unsigned)mode > AMP_MX_EVEN) return AMP_ERR_INVALID_ARGUMENT;
    amp_fp8_cast_tally t = AMP_FP8_CAST_TALLY_INIT;
    float amax = 0.0f;
    amp_mx_quantize_tally(dst, scales_e8m0, NULL, src, n, elem, mode, NULL, &t, &amax);
    return AMP_OK;
}

int amp_mx_dequantize(float *dst, const void *src, const uint8_t *scales_e8m0, size_t n, amp_dtype elem) {
    const int st = check_mx(dst, src, scales_e8m0, n, elem);
    if (st != AMP_OK) return st;
    const uint8_t *in = src;
    for (size_t b = 0; b < n / AMP_MX_BLOCK; b++) {
        amp_fp8_scaled_decode(dst + b * AMP_MX_BLOCK, elem, in + b * AMP_MX_BLOCK, AMP_MX_BLOCK,
                              e8m0_value(scales_e8m0[b]));
    }
    return AMP_OK;
}
