/* The reference fp8 kernels (fp8_kernels.h): portable C on the library's scalar bit codecs. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "../fp8_kernels.h"
#include "../../core/float_bits.h"

static float bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float decode_one(amp_dtype dt, const void *src, size_t j) {
    switch (dt) {
    case AMP_F8E4M3: return bits_to_f32(amp_f8e4m3_decode(((const uint8_t *)src)[j]));
    case AMP_F8E5M2: return bits_to_f32(amp_f8e5m2_decode(((const uint8_t *)src)[j]));
    case AMP_BF16: return bits_to_f32(amp_bf16_decode(((const uint16_t *)src)[j]));
    default: return ((const float *)src)[j];
    }
}

static inline void decode_row(amp_dtype dt, bool bf16, void *dst, const void *src, size_t n, const float *factors,
                              size_t lead, size_t block) {
    size_t left = lead; /* elements left in the current factor's block */
    for (size_t j = 0; j < n; j++) {
        float v = decode_one(dt, src, j);
        if (factors) {
            if (left == 0) {
                factors++;
                left = block;
            }
            v *= *factors;
            left--;
        }
        if (bf16) {
            uint32_t u;
            memcpy(&u, &v, sizeof u);
            ((uint16_t *)dst)[j] = (uint16_t)(u >> 16);
        } else {
            ((float *)dst)[j] = v;
        }
    }
}

#define DECODE_ROW_FN(name, dt, bf16)                                                                   \
    static void name(void *dst, const void *src, size_t n, const float *factors, size_t lead, size_t block) { \
        decode_row(dt, bf16, dst, src, n, factors, lead, block);                                        \
    }
DECODE_ROW_FN(decode_f32_f32, AMP_F32, false)
DECODE_ROW_FN(decode_f32_bf16, AMP_F32, true)
DECODE_ROW_FN(decode_bf16_f32, AMP_BF16, false)
DECODE_ROW_FN(decode_bf16_bf16, AMP_BF16, true)
DECODE_ROW_FN(decode_e4m3_f32, AMP_F8E4M3, false)
DECODE_ROW_FN(decode_e4m3_bf16, AMP_F8E4M3, true)
DECODE_ROW_FN(decode_e5m2_f32, AMP_F8E5M2, false)
DECODE_ROW_FN(decode_e5m2_bf16, AMP_F8E5M2, true)
#undef DECODE_ROW_FN

static inline void decode_pairs(amp_dtype dt, uint16_t *dst, size_t panel_stride, const uint8_t *src0,
                                const uint8_t *src1, const int16_t *adds, size_t n, int r) {
    for (size_t t = 0; t * (size_t)r < n; t++) {
        uint16_t *d = dst + t * panel_stride;
        for (size_t i = 0; i < (size_t)r; i++) {
            const size_t j = t * (size_t)r + i;
            const float f = j < n && adds ? ldexpf(1.0f, adds[j] / 128) : 1.0f;
            const float v0 = j < n ? decode_one(dt, src0, j) * f : 0.0f;
            const float v1 = j < n && src1 ? decode_one(dt, src1, j) * f : 0.0f;
            d[2 * i] = (uint16_t)(amp_f32_bits(v0) >> 16);
            d[2 * i + 1] = (uint16_t)(amp_f32_bits(v1) >> 16);
        }
    }
}

static void decode_pairs_e4m3(uint16_t *dst, size_t panel_stride, const uint8_t *src0, const uint8_t *src1,
                              const int16_t *adds, size_t n, int r) {
    decode_pairs(AMP_F8E4M3, dst, panel_stride, src0, src1, adds, n, r);
}

static void decode_pairs_e5m2(uint16_t *dst, size_t panel_stride, const uint8_t *src0, const uint8_t *src1,
                              const int16_t *adds, size_t n, int r) {
    decode_pairs(AMP_F8E5M2, dst, panel_stride, src0, src1, adds, n, r);
}

static inline void decode_panel(amp_dtype dt, uint16_t *dst, const uint8_t *src, size_t ld, const int16_t *adds,
                                size_t ld_adds, size_t ri, size_t kc, int r) {
    for (size_t p = 0; p < (kc + 1) / 2 * 2; p++)
        for (size_t i = 0; i < (size_t)r; i++) {
            float v = 0.0f;
            if (i < ri && p < kc) {
                v = decode_one(dt, src + i * ld, p);
                if (adds) v *= ldexpf(1.0f, adds[i * ld_adds + p / 32] / 128);
            }
            dst[(p / 2) * 2 * (size_t)r + 2 * i + p % 2] = (uint16_t)(amp_f32_bits(v) >> 16);
        }
}

static void decode_panel_e4m3(uint16_t *dst, const uint8_t *src, size_t ld, const int16_t *adds, size_t ld_adds,
                              size_t ri, size_t kc, int r) {
    decode_panel(AMP_F8E4M3, dst, src, ld, adds, ld_adds, ri, kc, r);
}

static void decode_panel_e5m2(uint16_t *dst, const uint8_t *src, size_t ld, const int16_t *adds, size_t ld_adds,
                              size_t ri, size_t kc, int r) {
    decode_panel(AMP_F8E5M2, dst, src, ld, adds, ld_adds, ri, kc, r);
}

static float amax_ref(const float *src, size_t n, bool *saw_nan) {
    float m = 0.0f;
    bool nan = false;
    for (size_t i = 0; i < n; i++) {
        const float a = fabsf(src[i]);
        if (a > m) m = a; /* false for NaN: skipped, as fmaxf does */
        nan |= a != a;
    }
    if (saw_nan) *saw_nan = nan;
    return m;
}

static void block_amax_ref(float *out, const float *src, size_t nblocks, size_t block) {
    for (size_t b = 0; b < nblocks; b++) {
        const float *x = src + b * block;
        float m = 0.0f;
        for (size_t i = 0; i < block; i++) {
            const float a = fabsf(x[i]);
            if (a != a) {
                m = a;
                break;
            }
            if (a > m) m = a;
        }
        out[b] = m;
    }
}

static void encode_e4m3_ref(uint8_t *dst, const float *src, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) dst[i] = amp_f8e4m3_encode(amp_f32_bits(src[i] * scale), AMP_OVERFLOW_SATURATE);
}

static void encode_e5m2_ref(uint8_t *dst, const float *src, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) dst[i] = amp_f8e5m2_encode(amp_f32_bits(src[i] * scale), AMP_OVERFLOW_SATURATE);
}

/* The staged definition: each product, its encoding, then the two tests on the source value. */
static inline void encode_stats_ref(amp_dtype dt, uint8_t *dst, const float *src, size_t n, float scale,
                                    const float *scales, size_t block, int64_t counts[2]) {
    const float maxf = dt == AMP_F8E4M3 ? 448.0f : 57344.0f;
    int64_t sat = 0, flush = 0;
    for (size_t i = 0; i < n; i++) {
        const float x = src[i], p = x * (scales ? scales[i / block] : scale);
        dst[i] = dt == AMP_F8E4M3 ? amp_f8e4m3_encode(amp_f32_bits(p), AMP_OVERFLOW_SATURATE)
                                  : amp_f8e5m2_encode(amp_f32_bits(p), AMP_OVERFLOW_SATURATE);
        if (!isfinite(x) || x == 0.0f) continue;
        sat += fabsf(p) > maxf;
        flush += (dst[i] & 0x7F) == 0;
    }
    counts[0] += sat, counts[1] += flush;
}

static void encode_stats_e4m3_ref(uint8_t *dst, const float *src, size_t n, float scale, const float *scales,
                                  size_t block, int64_t counts[2]) {
    encode_stats_ref(AMP_F8E4M3, dst, src, n, scale, scales, block, counts);
}

static void encode_stats_e5m2_ref(uint8_t *dst, const float *src, size_t n, float scale, const float *scales,
                                  size_t block, int64_t counts[2]) {
    encode_stats_ref(AMP_F8E5M2, dst, src, n, scale, scales, block, counts);
}

static bool col_amax_ref(float *amax, const float *src, size_t rows, size_t cols, size_t ld) {
    bool nan = false;
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++) {
            const float a = fabsf(src[r * ld + j]);
            if (a > amax[j]) amax[j] = a; /* false for NaN: skipped */
            nan |= a != a;
        }
    return nan;
}

static void block_scales_ref(float *scale, float *inv, const float *amax, size_t n, float maxf, float stats[3]) {
    for (size_t b = 0; b < n; b++) {
        const float a = amax[b]; /* read before scale[b] is written: they may be the same array */
        float s = 1.0f;
        if (a != 0.0f && !isinf(a)) {
            s = maxf / a;
            if (isinf(s)) s = FLT_MAX;
            s = bits_to_f32(amp_f32_bits(s) & 0xFF800000u);
        }
        scale[b] = s, inv[b] = 1.0f / s;
        if (s < stats[0]) stats[0] = s;
        if (s > stats[1]) stats[1] = s;
        if (a > stats[2]) stats[2] = a;
    }
}

/* The decode, then each tile's and column's maximum: a plain max that a NaN, once met, keeps. */
static void decode_band_bf16_ref(float *dst, const uint16_t *src, size_t rows, size_t cols, size_t tile, float *tmax,
                                 float *cmax) {
    for (size_t j = 0; j < cols; j++) cmax[j] = 0.0f;
    for (size_t r = 0; r < rows; r++)
        for (size_t t = 0; t < cols / tile; t++) {
            float m = 0.0f;
            for (size_t i = 0; i < tile; i++) {
                const size_t j = t * tile + i;
                const float v = bits_to_f32(amp_bf16_decode(src[r * cols + j])), a = fabsf(v);
                dst[r * cols + j] = v;
                if (a != a || a > m) m = m != m ? m : a;
                if (a != a || a > cmax[j]) cmax[j] = cmax[j] != cmax[j] ? cmax[j] : a;
            }
            tmax[r * (cols / tile) + t] = m;
        }
}

static bool factor_adds_ref(int16_t *adds, const float *f, size_t n, amp_dtype dt) {
    const int lo = amp_fp8_add_exp_min(dt), hi = amp_fp8_add_exp_max(dt);
    for (size_t j = 0; j < n; j++) {
        const uint32_t u = amp_f32_bits(f[j]);
        const int e = (int)(u >> 23) - 127; /* a negative f gives e >= 129 */
        if ((u & 0x7FFFFFu) != 0 || e < lo || e > hi) return false;
        adds[j] = (int16_t)(e * 128);
    }
    return true;
}

enum { E8M0_NAN = 0xFF, E8M0_TOP = 0xFE };

/* RCEIL: amax / fp8_max rounded up to a power of 2 in E8M0, saturating at 0xFE (the rounding of
 * cvt.rp.satfinite.ue8m0x2.f32: 2^-127 is the smallest scale, so anything up to it gives byte 0). */
static uint8_t rceil_byte(float amax, amp_dtype elem) {
    const uint32_t d = amp_f32_bits(amax / (elem == AMP_F8E4M3 ? 448.0f : 57344.0f));
    const uint32_t e = d >> 23, m = d & 0x7FFFFFu;
    if (e == 0xFF) return m ? E8M0_NAN : E8M0_TOP;
    if (e == 0) return m > 0x400000u ? 1 : 0; /* subnormal: above 2^-127 rounds up to 2^-126 */
    const uint32_t b = e + (m != 0);
    return (uint8_t)(b > E8M0_TOP ? E8M0_TOP : b);
}

/* The E8M0 byte of a block with amax `amax` (amp/fp8.h's four rules, torchao's to_mx). */
static uint8_t scale_byte(float amax, amp_dtype elem, amp_mx_scale_mode mode) {
    if (isnan(amax)) return E8M0_NAN;
    if (mode == AMP_MX_RCEIL) return rceil_byte(amax, elem);
    const int emax = elem == AMP_F8E4M3 ? 8 : 15; /* log2 of the largest power of 2 in elem */
    const unsigned mbits = elem == AMP_F8E4M3 ? 3 : 2;
    uint32_t a = amp_f32_bits(amax);
    if (mode == AMP_MX_EVEN) a = (a + (1u << (22 - mbits))) & 0xFF800000u;
    int e = (int)((a >> 23) & 0xFF) - 127;
    if (mode == AMP_MX_CEIL) e += (a & 0x7FFFFFu) != 0;
    int u = e - emax;
    if (u < -127) u = -127;
    return (uint8_t)(u + 127); /* u <= 128 - 8: no upper clamp needed */
}

static bool mx_scales_ref(uint8_t *bytes, float *mult, float *factor, const float *amax, size_t n, amp_dtype elem,
                          amp_mx_scale_mode mode, float stats[3]) {
    bool nan = false;
    for (size_t b = 0; b < n; b++) {
        const float a = amax[b]; /* read before mult[b] is written: they may be the same array */
        const uint8_t byte = scale_byte(a, elem, mode);
        bytes[b] = byte;
        if (factor)
            factor[b] = byte == E8M0_NAN                        ? bits_to_f32(0x7FC00000u)
                        : (amp_f32_bits(a) & 0x7FFFFFFFu) == 0 ? 1.0f
                        : byte == 0                             ? bits_to_f32(0x00400000u)
                                                                : bits_to_f32((uint32_t)byte << 23);
        if (byte == E8M0_NAN) {
            nan = true;
            continue;
        }
        /* 2^(127 - byte): 2^-127 (byte 254) is subnormal */
        mult[b] = byte == E8M0_TOP ? bits_to_f32(0x00400000u) : bits_to_f32((uint32_t)(254 - byte) << 23);
        if (mult[b] < stats[0]) stats[0] = mult[b];
        if (mult[b] > stats[1]) stats[1] = mult[b];
        if (a > stats[2]) stats[2] = a;
    }
    return nan;
}

void amp_fp8_kernels_ref(amp_fp8_kernels *k) {
    k->decode_row[AMP_F32][0] = decode_f32_f32;
    k->decode_row[AMP_F32][1] = decode_f32_bf16;
    k->decode_row[AMP_BF16][0] = decode_bf16_f32;
    k->decode_row[AMP_BF16][1] = decode_bf16_bf16;
    k->decode_row[AMP_F8E4M3][0] = decode_e4m3_f32;
    k->decode_row[AMP_F8E4M3][1] = decode_e4m3_bf16;
    k->decode_row[AMP_F8E5M2][0] = decode_e5m2_f32;
    k->decode_row[AMP_F8E5M2][1] = decode_e5m2_bf16;
    k->decode_pairs[AMP_F8E4M3] = decode_pairs_e4m3;
    k->decode_pairs[AMP_F8E5M2] = decode_pairs_e5m2;
    k->decode_panel[AMP_F8E4M3] = decode_panel_e4m3;
    k->decode_panel[AMP_F8E5M2] = decode_panel_e5m2;
    k->amax = amax_ref;
    k->block_amax = block_amax_ref;
    k->scaled_encode[AMP_F8E4M3] = encode_e4m3_ref;
    k->scaled_encode[AMP_F8E5M2] = encode_e5m2_ref;
    k->encode_stats[AMP_F8E4M3] = encode_stats_e4m3_ref;
    k->encode_stats[AMP_F8E5M2] = encode_stats_e5m2_ref;
    k->col_amax = col_amax_ref;
    k->factor_adds = factor_adds_ref;
    k->mx_scales = mx_scales_ref;
    k->decode_band_bf16 = decode_band_bf16_ref;
    k->block_scales = block_scales_ref;
}
