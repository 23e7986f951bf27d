/* MXFP8 (OCP Microscaling v1.0): blocks of 32 values sharing one E8M0 scale 2^(byte-127), with the
 * four ways of choosing the exponent that torchao's to_mx offers. fp8.h states the rules and the
 * documented differences from torchao. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "amp/fp8.h"
#include "amp/status.h"
#include "../core/alloc_internal.h"
#include "../core/float_bits.h"
#include "../kernels/fp8_kernels.h"
#include "fp8_internal.h"

enum { E8M0_NAN = 0xFF, E8M0_INF_RCEIL = 0xFE, AMAX_CHUNK = 64 };

/* RCEIL: amax / fp8_max rounded up to a power of 2 in E8M0, saturating at 0xFE (the rounding of
 * cvt.rp.satfinite.ue8m0x2.f32: 2^-127 is the smallest scale, so anything up to it gives byte 0). */
static uint8_t rceil_byte(float amax, amp_dtype elem) {
    const uint32_t d = amp_f32_bits(amax / amp_fp8_max_finite(elem));
    const uint32_t e = d >> 23, m = d & 0x7FFFFFu;
    if (e == 0xFF) return m ? E8M0_NAN : E8M0_INF_RCEIL;
    if (e == 0) return m > 0x400000u ? 1 : 0; /* subnormal: above 2^-127 rounds up to 2^-126 */
    const uint32_t b = e + (m != 0);
    return (uint8_t)(b > E8M0_INF_RCEIL ? E8M0_INF_RCEIL : b);
}

static uint8_t scale_byte(float amax, amp_dtype elem, amp_mx_scale_mode mode) {
    if (isnan(amax)) return E8M0_NAN;
    if (mode == AMP_MX_RCEIL) return rceil_byte(amax, elem);
    const int emax = elem == AMP_F8E4M3 ? 8 : 15;   /* log2 of the largest power of 2 in elem */
    const unsigned mbits = elem == AMP_F8E4M3 ? 3 : 2;
    uint32_t a = amp_f32_bits(amax);
    if (mode == AMP_MX_EVEN) a = (a + (1u << (22 - mbits))) & 0xFF800000u;
    int e = (int)((a >> 23) & 0xFF) - 127;
    if (mode == AMP_MX_CEIL) e += (a & 0x7FFFFFu) != 0;
    int u = e - emax;
    if (u < -127) u = -127;
    return (uint8_t)(u + 127); /* u <= 128 - 8: no upper clamp needed */
}

/* The payload of a NaN block, torchao's bits on x86 (fp8.h); the values are NaN on decode anyway. */
static float nan_block_value(float x, amp_mx_scale_mode mode) {
    if (mode == AMP_MX_RCEIL) return amp_f32_from_bits(0x7FC00000u);
    if (isnan(x)) return x;
    if (isinf(x)) return amp_f32_from_bits(0xFFC00000u); /* inf / inf: the default NaN */
    return copysignf(0.0f, x);                            /* x / inf */
}

/* 2^(127 - byte) for byte in [0, 254]: the exact reciprocal of the scale (2^-127 is subnormal). */
static float inverse_scale(uint8_t byte) {
    return byte == 254 ? amp_f32_from_bits(0x00400000u) : amp_f32_from_bits((uint32_t)(254 - byte) << 23);
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
                           amp_dtype elem, amp_mx_scale_mode mode, amp_fp8_cast_tally *t, float *amax) {
    uint8_t *out = dst;
    const amp_fp8_kernels *fk = amp_fp8_kernels_active();
    float bmax[AMAX_CHUNK], mult[AMAX_CHUNK];
    uint8_t byte[AMAX_CHUNK];
    const size_t nblocks = n / AMP_MX_BLOCK;
    float m = *amax;
    for (size_t b0 = 0; b0 < nblocks; b0 += AMAX_CHUNK) { /* AMAX_CHUNK blocks at a time */
        const size_t nb = nblocks - b0 < AMAX_CHUNK ? nblocks - b0 : AMAX_CHUNK;
        const float *x = src + b0 * AMP_MX_BLOCK;
        fk->block_amax(bmax, x, nb, AMP_MX_BLOCK); /* NaN where a block has one */
        for (size_t b = 0; b < nb; b++) {
            byte[b] = scale_byte(bmax[b], elem, mode);
            if (scales_e8m0) scales_e8m0[b0 + b] = byte[b];
            /* 2^(byte-127): 2^-127 is the subnormal 0x00400000; 0xFF is NaN (the OCP definition) */
            if (scale_inv)
                scale_inv[b0 + b] = byte[b] == E8M0_NAN ? NAN
                                    : byte[b] == 0      ? amp_f32_from_bits(0x00400000u)
                                                        : amp_f32_from_bits((uint32_t)byte[b] << 23);
            if (byte[b] == E8M0_NAN) continue;
            mult[b] = inverse_scale(byte[b]); /* not NaN: plain comparisons are fminf's and fmaxf's */
            if (mult[b] < t->scale_min) t->scale_min = mult[b];
            if (mult[b] > t->scale_max) t->scale_max = mult[b];
            if (bmax[b] > m) m = bmax[b];
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

/* Column i's 32-row block of a band the plain way: gathered, zero-padded, quantized as one block. */
static void quantize_column_block(uint8_t *out, float *inv, const float *src, size_t h, size_t cols, amp_dtype elem,
                                  amp_mx_scale_mode mode, amp_fp8_cast_tally *t, float *amax) {
    float v[AMP_MX_BLOCK];
    for (size_t r = 0; r < AMP_MX_BLOCK; r++) v[r] = r < h ? src[r * cols] : 0.0f;
    amp_mx_quantize_tally(out, NULL, inv, v, AMP_MX_BLOCK, elem, mode, t, amax);
}

/* One round of the byte transpose on a pair of rows: with lo the low half of each 2s-byte group, a
 * keeps its low halves and takes b's below-halves above them; b keeps its high halves and takes a's
 * below them. */
static inline void swap_halves(uint64_t *a, uint64_t *b, int s, uint64_t lo) {
    const uint64_t x = *a, y = *b;
    *a = (x & lo) | ((y & lo) << s);
    *b = ((x >> s) & lo) | (y & ~lo);
}

/* out[c * ld_out] .. + 8 = column c of the 8x8 byte matrix whose row i is the 8 bytes at in + i *
 * ld_in (little endian words; rows and columns swapped by three rounds of block swaps: 4x4, 2x2,
 * 1x1). Named words rather than an array keep it in registers. */
static void transpose8x8_bytes(uint8_t *out, size_t ld_out, const uint8_t *in, size_t ld_in) {
    uint64_t w0, w1, w2, w3, w4, w5, w6, w7;
    memcpy(&w0, in, 8), memcpy(&w1, in + ld_in, 8), memcpy(&w2, in + 2 * ld_in, 8), memcpy(&w3, in + 3 * ld_in, 8);
    memcpy(&w4, in + 4 * ld_in, 8), memcpy(&w5, in + 5 * ld_in, 8), memcpy(&w6, in + 6 * ld_in, 8), memcpy(&w7, in + 7 * ld_in, 8);
    const uint64_t lo32 = 0x00000000FFFFFFFFull, lo16 = 0x0000FFFF0000FFFFull, lo8 = 0x00FF00FF00FF00FFull;
    swap_halves(&w0, &w4, 32, lo32); swap_halves(&w1, &w5, 32, lo32); swap_halves(&w2, &w6, 32, lo32); swap_halves(&w3, &w7, 32, lo32);
    swap_halves(&w0, &w2, 16, lo16); swap_halves(&w1, &w3, 16, lo16); swap_halves(&w4, &w6, 16, lo16); swap_halves(&w5, &w7, 16, lo16);
    swap_halves(&w0, &w1, 8, lo8); swap_halves(&w2, &w3, 8, lo8); swap_halves(&w4, &w5, 8, lo8); swap_halves(&w6, &w7, 8, lo8);
    memcpy(out, &w0, 8), memcpy(out + ld_out, &w1, 8), memcpy(out + 2 * ld_out, &w2, 8), memcpy(out + 3 * ld_out, &w3, 8);
    memcpy(out + 4 * ld_out, &w4, 8), memcpy(out + 5 * ld_out, &w5, 8), memcpy(out + 6 * ld_out, &w6, 8), memcpy(out + 7 * ld_out, &w7, 8);
}

/* out[j * ld_out + r] = bytes[r * cols + j] for r < nrows (a multiple of 8), j < cols: 8x8 tiles
 * through 64-bit words, the last cols % 8 columns one byte at a time. */
static void transpose_rows(uint8_t *out, size_t ld_out, const uint8_t *bytes, size_t cols, size_t nrows) {
    size_t j0 = 0;
    for (; j0 + 8 <= cols; j0 += 8)
        for (size_t r0 = 0; r0 < nrows; r0 += 8) transpose8x8_bytes(out + j0 * ld_out + r0, ld_out, bytes + r0 * cols + j0, cols);
    for (; j0 < cols; j0++)
        for (size_t r = 0; r < nrows; r++) out[j0 * ld_out + r] = bytes[r * cols + j0];
}

/* Column-wise MX of one band of h <= 32 source rows (x, row stride cols), block b of every stored
 * row: the payloads into bytes ([32, cols], padded with fp8 zeros) for the caller to transpose, and
 * true; or, where the band holds a NaN, each column block quantized the plain way straight into out
 * (stored rows of ld_out, this band's block at out + r0) and false. mult: cols floats of room. */
static bool quantize_band(uint8_t *bytes, uint8_t *out, size_t ld_out, size_t r0, float *scale_inv, size_t ld_scale,
                          size_t b, const float *x, size_t h, size_t cols, float *mult, amp_dtype elem,
                          amp_mx_scale_mode mode, amp_fp8_cast_tally *t, float *amax) {
    const amp_fp8_kernels *fk = amp_fp8_kernels_active();
    bool nan = false;
    const float band_max = fk->amax(x, h * cols, &nan);
    if (nan) { /* NaN blocks have their own payloads and amax */
        for (size_t j = 0; j < cols; j++)
            quantize_column_block(out + j * ld_out + r0, scale_inv + j * ld_scale + b, x + j, h, cols, elem, mode, t, amax);
        return false;
    }
    if (band_max > *amax) *amax = band_max;
    for (size_t j = 0; j < cols; j++) mult[j] = 0.0f;
    fk->col_amax(mult, x, h, cols, cols); /* each column block's amax, then its multiplier */
    float smin = t->scale_min, smax = t->scale_max;
    for (size_t j = 0; j < cols; j++) {
        const uint8_t byte = scale_byte(mult[j], elem, mode);
        scale_inv[j * ld_scale + b] = byte == 0 ? amp_f32_from_bits(0x00400000u) : amp_f32_from_bits((uint32_t)byte << 23);
        mult[j] = inverse_scale(byte); /* never NaN here: plain comparisons are fminf's and fmaxf's */
        if (mult[j] < smin) smin = mult[j];
        if (mult[j] > smax) smax = mult[j];
    }
    t->scale_min = smin, t->scale_max = smax;
    for (size_t r = 0; r < AMP_MX_BLOCK; r++) {
        if (r < h) fk->encode_stats[elem](bytes + r * cols, x + r * cols, cols, 0.0f, mult, 1, t->counts);
        else memset(bytes + r * cols, 0, cols); /* the padding: fp8 zeros */
    }
    return true;
}

/* Two bands at a time, so that each stored row gets 64 contiguous bytes (a cache line) per pass. */
int amp_mx_quantize_columns_tally(uint8_t *out, size_t ld_out, float *scale_inv, size_t ld_scale, const float *src,
                                  size_t rows, size_t cols, amp_dtype elem, amp_mx_scale_mode mode,
                                  amp_fp8_cast_tally *t, float *amax) {
    float *mult = amp_malloc(cols * sizeof(float));
    uint8_t *bytes = amp_malloc(2 * AMP_MX_BLOCK * cols);
    if (!mult || !bytes) {
        amp_free(mult), amp_free(bytes);
        return AMP_ERR_OUT_OF_MEMORY;
    }
    for (size_t r0 = 0; r0 < rows; r0 += 2 * AMP_MX_BLOCK) {
        bool ok[2] = {false, false};
        for (size_t k = 0; k < 2 && r0 + k * AMP_MX_BLOCK < rows; k++) {
            const size_t rb = r0 + k * AMP_MX_BLOCK, h = rows - rb < AMP_MX_BLOCK ? rows - rb : AMP_MX_BLOCK;
            ok[k] = quantize_band(bytes + k * AMP_MX_BLOCK * cols, out, ld_out, rb, scale_inv, ld_scale, rb / AMP_MX_BLOCK,
                                  src + rb * cols, h, cols, mult, elem, mode, t, amax);
        }
        if (ok[0] && ok[1]) transpose_rows(out + r0, ld_out, bytes, cols, 2 * AMP_MX_BLOCK);
        else
            for (size_t k = 0; k < 2; k++)
                if (ok[k]) transpose_rows(out + r0 + k * AMP_MX_BLOCK, ld_out, bytes + k * AMP_MX_BLOCK * cols, cols, AMP_MX_BLOCK);
    }
    amp_free(mult), amp_free(bytes);
    return AMP_OK;
}

int amp_mx_quantize(void *dst, uint8_t *scales_e8m0, const float *src, size_t n, amp_dtype elem,
                    amp_mx_scale_mode mode) {
    const int st = check_mx(dst, scales_e8m0, src, n, elem);
    if (st != AMP_OK) return st;
    if ((unsigned)mode > AMP_MX_EVEN) return AMP_ERR_INVALID_ARGUMENT;
    amp_fp8_cast_tally t = AMP_FP8_CAST_TALLY_INIT;
    float amax = 0.0f;
    amp_mx_quantize_tally(dst, scales_e8m0, NULL, src, n, elem, mode, &t, &amax);
    return AMP_OK;
}

int amp_mx_dequantize(float *dst, const void *src, const uint8_t *scales_e8m0, size_t n, amp_dtype elem) {
    const int st = check_mx(dst, src, scales_e8m0, n, elem);
    if (st != AMP_OK) return st;
    const uint8_t *in = src;
    for (size_t b = 0; b < n / AMP_MX_BLOCK; b++) {
        const uint8_t byte = scales_e8m0[b];
        /* 2^(byte-127): 2^-127 is the subnormal 0x00400000; 0xFF is NaN (the OCP definition). */
        const float s = byte == E8M0_NAN ? amp_f32_from_bits(0x7FC00000u)
                        : byte == 0      ? amp_f32_from_bits(0x00400000u)
                                         : amp_f32_from_bits((uint32_t)byte << 23);
        amp_fp8_scaled_decode(dst + b * AMP_MX_BLOCK, elem, in + b * AMP_MX_BLOCK, AMP_MX_BLOCK, s);
    }
    return AMP_OK;
}
