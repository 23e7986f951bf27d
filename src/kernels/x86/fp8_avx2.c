/* AVX2 + F16C fp8 kernels (fp8_kernels.h), 8 fp32 lanes per step; tails (fewer than 8 elements) run
 * the reference's scalar algorithm (core/float_bits.h), so every element gets the reference's bits.
 * The decode and the encode are fp8_avx512.c's, which explains them. */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "../../core/float_bits.h"
#include "../fp8_kernels.h"

/* ---- decode ---- */

static inline __attribute__((always_inline)) __m256 f32_from_e4m3x8(__m128i b) {
    const __m128i w = _mm_cvtepu8_epi16(b);
    const __m128i mag = _mm_and_si128(w, _mm_set1_epi16(0x7F));
    const __m128i sign = _mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x80)), 8);
    const __m256 f = _mm256_mul_ps(_mm256_cvtph_ps(_mm_or_si128(_mm_slli_epi16(mag, 7), sign)), _mm256_set1_ps(256.0f));
    const __m256 nan = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7F))));
    return _mm256_blendv_ps(f, _mm256_set1_ps(NAN), nan);
}

static inline __attribute__((always_inline)) __m256 f32_from_e5m2x8(__m128i b) {
    return _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(b), 8));
}

/* 8 elements of dtype dt at p decoded to fp32; dt is a constant where inlined */
static inline __attribute__((always_inline)) __m256 load_dec(amp_dtype dt, const void *p) {
    switch (dt) {
    case AMP_F8E4M3: return f32_from_e4m3x8(_mm_loadl_epi64(p));
    case AMP_F8E5M2: return f32_from_e5m2x8(_mm_loadl_epi64(p));
    case AMP_BF16: return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(p)), 16));
    default: return _mm256_loadu_ps(p);
    }
}

static inline __attribute__((always_inline)) void store_out(bool bf16, void *dst, __m256 v) {
    if (bf16) {
        const __m256i t = _mm256_srli_epi32(_mm256_castps_si256(v), 16);
        _mm_storeu_si128(dst, _mm_packus_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1)));
    } else {
        _mm256_storeu_ps(dst, v);
    }
}

static float scalar_decode(amp_dtype dt, const char *src, size_t j) {
    uint32_t u;
    switch (dt) {
    case AMP_F8E4M3: u = amp_f8e4m3_decode((uint8_t)src[j]); break;
    case AMP_F8E5M2: u = amp_f8e5m2_decode((uint8_t)src[j]); break;
    case AMP_BF16: {
        uint16_t h;
        memcpy(&h, src + 2 * j, 2);
        u = amp_bf16_decode(h);
        break;
    }
    default: memcpy(&u, src + 4 * j, 4); break;
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* n elements from src to dst, each times f (when mul) or times its own factor fv[j] (when fv) */
static inline __attribute__((always_inline)) void decode_run(amp_dtype dt, bool bf16, char *dst, const char *src,
                                                             size_t n, bool mul, float f, const float *fv) {
    const size_t es = dt == AMP_F32 ? 4 : dt == AMP_BF16 ? 2 : 1, os = bf16 ? 2 : 4;
    const __m256 fs = _mm256_set1_ps(f);
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = load_dec(dt, src + j * es);
        if (fv) v = _mm256_mul_ps(v, _mm256_loadu_ps(fv + j));
        else if (mul) v = _mm256_mul_ps(v, fs);
        store_out(bf16, dst + j * os, v);
    }
    for (; j < n; j++) {
        float v = scalar_decode(dt, src, j);
        if (fv) v *= fv[j];
        else if (mul) v *= f;
        if (bf16) {
            const uint16_t h = (uint16_t)(amp_f32_bits(v) >> 16);
            memcpy(dst + 2 * j, &h, 2);
        } else {
            memcpy(dst + 4 * j, &v, 4);
        }
    }
}

static inline __attribute__((always_inline)) void decode_row(amp_dtype dt, bool bf16, void *dst, const void *src,
                                                             size_t n, const float *factors, size_t lead, size_t block) {
    const size_t es = dt == AMP_F32 ? 4 : dt == AMP_BF16 ? 2 : 1, os = bf16 ? 2 : 4;
    if (!factors || block == 1) { /* no factors, or one per element (factors[j]) */
        decode_run(dt, bf16, dst, src, n, false, 1.0f, factors);
        return;
    }
    size_t j = 0, len = lead;
    for (; j < n; j += len, len = block, factors++) {
        const size_t run = n - j < len ? n - j : len;
        decode_run(dt, bf16, (char *)dst + j * os, (const char *)src + j * es, run, true, *factors, NULL);
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

/* ---- amax ---- */

static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

/* VMAXPS returns its second operand when either is NaN: max(|x|, m) skips a NaN x (fmaxf). */
static float amax_avx2(const float *src, size_t n, bool *saw_nan) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 m0 = _mm256_setzero_ps(), m1 = m0, m2 = m0, m3 = m0, nan = m0;
    size_t i = 0;
#define AMAX_STEP(acc, off)                                                        \
    do {                                                                           \
        const __m256 a = _mm256_and_ps(_mm256_loadu_ps(src + i + (off)), abs_mask); \
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));                 \
        acc = _mm256_max_ps(a, acc);                                               \
    } while (0)
    for (; i + 32 <= n; i += 32) {
        AMAX_STEP(m0, 0);
        AMAX_STEP(m1, 8);
        AMAX_STEP(m2, 16);
        AMAX_STEP(m3, 24);
    }
    for (; i + 8 <= n; i += 8) AMAX_STEP(m0, 0);
#undef AMAX_STEP
    float m = hmax8(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
    bool any_nan = _mm256_movemask_ps(nan) != 0;
    for (; i < n; i++) {
        const float a = fabsf(src[i]);
        if (a > m) m = a;
        any_nan |= a != a;
    }
    if (saw_nan) *saw_nan = any_nan;
    return m;
}

static void block_amax_avx2(float *out, const float *src, size_t nblocks, size_t block) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    for (size_t b = 0; b < nblocks; b++) {
        const float *x = src + b * block;
        float m = 0.0f;
        bool nan = block % 8 != 0; /* odd blocks: the scalar pass below */
        if (!nan) {
            __m256 acc = _mm256_setzero_ps(), nv = acc;
            for (size_t i = 0; i < block; i += 8) {
                const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask);
                nv = _mm256_or_ps(nv, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
                acc = _mm256_max_ps(a, acc);
            }
            m = hmax8(acc);
            nan = _mm256_movemask_ps(nv) != 0;
        }
        if (nan) { /* the reference's scalar answer: the first NaN, or the max */
            m = 0.0f;
            for (size_t i = 0; i < block; i++) {
                const float a = fabsf(x[i]);
                if (a != a) {
                    m = a;
                    break;
                }
                if (a > m) m = a;
            }
        }
        out[b] = m;
    }
}

/* ---- scaled encode ---- */

typedef struct {
    float clamp, max_finite, to_f16;
    int32_t c_shift, c_min;
    int drop;
    uint16_t nan_bits;
} fp8_format;

/* fp8_avx512.c's FPU rounding ((a + c) - c, then the fp16's top bits) on 8 lanes; it explains the
 * steps. Returns the 8 bytes in the low half. */
static inline __attribute__((always_inline)) __m128i fp8_sat_from_f32x8(__m256 x, const fp8_format *fmt) {
    const __m256 sign_bit = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    const __m256 a = _mm256_min_ps(_mm256_set1_ps(fmt->clamp), _mm256_andnot_ps(sign_bit, x)); /* NaN stays */
    const __m256i cb = _mm256_max_epi32(_mm256_add_epi32(_mm256_and_si256(_mm256_castps_si256(a), _mm256_set1_epi32(0x7F800000)),
                                                         _mm256_set1_epi32(fmt->c_shift)),
                                        _mm256_set1_epi32(fmt->c_min));
    const __m256 c = _mm256_castsi256_ps(cb);
    const __m256 r = _mm256_min_ps(_mm256_set1_ps(fmt->max_finite), _mm256_sub_ps(_mm256_add_ps(a, c), c));
    const __m256 rs = _mm256_or_ps(r, _mm256_and_ps(x, sign_bit));
    const __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(rs, _mm256_set1_ps(fmt->to_f16)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m128i mag = _mm_min_epu16(_mm_srl_epi16(_mm_slli_epi16(h, 1), _mm_cvtsi32_si128(fmt->drop + 1)),
                                      _mm_set1_epi16((short)fmt->nan_bits));
    const __m128i b = _mm_or_si128(mag, _mm_and_si128(_mm_srli_epi16(h, 8), _mm_set1_epi16(0x80)));
    return _mm_packus_epi16(b, b);
}

static inline __attribute__((always_inline)) void scaled_encode(uint8_t *dst, const float *src, size_t n, float scale,
                                                                const fp8_format *fmt, bool e4m3) {
    const __m256 s = _mm256_set1_ps(scale);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m128i lo = fp8_sat_from_f32x8(_mm256_mul_ps(_mm256_loadu_ps(src + i), s), fmt);
        const __m128i hi = fp8_sat_from_f32x8(_mm256_mul_ps(_mm256_loadu_ps(src + i + 8), s), fmt);
        _mm_storeu_si128((__m128i *)(dst + i), _mm_unpacklo_epi64(lo, hi));
    }
    for (; i + 8 <= n; i += 8)
        _mm_storel_epi64((__m128i *)(dst + i), fp8_sat_from_f32x8(_mm256_mul_ps(_mm256_loadu_ps(src + i), s), fmt));
    for (; i < n; i++) {
        const uint32_t bits = amp_f32_bits(src[i] * scale);
        dst[i] = e4m3 ? amp_f8e4m3_encode(bits, AMP_OVERFLOW_SATURATE) : amp_f8e5m2_encode(bits, AMP_OVERFLOW_SATURATE);
    }
}

static const fp8_format e4m3_sat = {480.0f, 448.0f, 0x1p-8f, 20 << 23, (14 + 127) << 23, 7, 0x7F};
static const fp8_format e5m2_sat = {65536.0f, 57344.0f, 1.0f, 21 << 23, (7 + 127) << 23, 8, 0x7E};
static void encode_e4m3(uint8_t *dst, const float *src, size_t n, float scale) {
    scaled_encode(dst, src, n, scale, &e4m3_sat, true);
}
static void encode_e5m2(uint8_t *dst, const float *src, size_t n, float scale) {
    scaled_encode(dst, src, n, scale, &e5m2_sat, false);
}

/* encode_stats (fp8_kernels.h): the products staged 64 at a time, the vector encode of them (times 1,
 * exact), then the counts on the staged products and their bytes. */
static inline __attribute__((always_inline)) void encode_stats(uint8_t *dst, const float *src, size_t n, float scale,
                                                               const float *scales, size_t block, int64_t counts[2],
                                                               void (*encode)(uint8_t *, const float *, size_t, float),
                                                               float maxf) {
    float stage[64];
    int64_t sat = 0, flush = 0;
    for (size_t i0 = 0; i0 < n; i0 += 64) {
        const size_t len = n - i0 < 64 ? n - i0 : 64;
        for (size_t j = 0; j < len; j++) stage[j] = src[i0 + j] * (scales ? scales[(i0 + j) / block] : scale);
        encode(dst + i0, stage, len, 1.0f);
        for (size_t j = 0; j < len; j++) {
            const float x = src[i0 + j];
            if (!isfinite(x) || x == 0.0f) continue;
            sat += fabsf(stage[j]) > maxf;
            flush += (dst[i0 + j] & 0x7F) == 0;
        }
    }
    counts[0] += sat, counts[1] += flush;
}
static void encode_stats_e4m3(uint8_t *dst, const float *src, size_t n, float scale, const float *scales,
                              size_t block, int64_t counts[2]) {
    encode_stats(dst, src, n, scale, scales, block, counts, encode_e4m3, 448.0f);
}
static void encode_stats_e5m2(uint8_t *dst, const float *src, size_t n, float scale, const float *scales,
                              size_t block, int64_t counts[2]) {
    encode_stats(dst, src, n, scale, scales, block, counts, encode_e5m2, 57344.0f);
}

void amp_fp8_kernels_avx2(amp_fp8_kernels *k) {
    k->decode_row[AMP_F32][0] = decode_f32_f32;
    k->decode_row[AMP_F32][1] = decode_f32_bf16;
    k->decode_row[AMP_BF16][0] = decode_bf16_f32;
    k->decode_row[AMP_BF16][1] = decode_bf16_bf16;
    k->decode_row[AMP_F8E4M3][0] = decode_e4m3_f32;
    k->decode_row[AMP_F8E4M3][1] = decode_e4m3_bf16;
    k->decode_row[AMP_F8E5M2][0] = decode_e5m2_f32;
    k->decode_row[AMP_F8E5M2][1] = decode_e5m2_bf16;
    k->amax = amax_avx2;
    k->block_amax = block_amax_avx2;
    k->scaled_encode[AMP_F8E4M3] = encode_e4m3;
    k->scaled_encode[AMP_F8E5M2] = encode_e5m2;
    k->encode_stats[AMP_F8E4M3] = encode_stats_e4m3;
    k->encode_stats[AMP_F8E5M2] = encode_stats_e5m2;
}
