/* AVX-512 fp8 kernels (fp8_kernels.h), 16 fp32 lanes per step, masked tails: the reference's bits.
 *
 * Decode: e5m2 is the top byte of an fp16, and e4m3's value is 2^8 times the fp16 whose bits are
 * (b & 0x7F) << 7 (its 4-bit exponent fits the fp16 exponent field, subnormals included), so both go
 * through VCVTPH2PS exactly; e4m3's NaN pattern (S.1111.111) is set apart. The factor is one VMULPS;
 * the bf16 output keeps the top half of each fp32 (VPMOVDW after a shift).
 *
 * Encode: x * scale, then the reference's parametric integer rounding to nearest even, saturating
 * (convert_avx512.c's encoder with the multiplication folded in: one pass instead of a staged one). */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "../../core/float_bits.h"
#include "../fp8_kernels.h"
#include "tile_avx512.h"

static inline __mmask16 tail_mask(size_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* ---- decode ---- */

static inline __attribute__((always_inline)) __m512 f32_from_e4m3x16(__m128i b) {
    const __m256i w = _mm256_cvtepu8_epi16(b);
    const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7F));
    const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8);
    const __m512 f = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_or_si256(_mm256_slli_epi16(mag, 7), sign)),
                                   _mm512_set1_ps(256.0f));
    const __mmask16 nan = _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7F));
    return _mm512_mask_mov_ps(f, nan, _mm512_set1_ps(NAN));
}

static inline __attribute__((always_inline)) __m512 f32_from_e5m2x16(__m128i b) {
    return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8));
}

/* 16 (or, masked, fewer) elements of dtype dt at p, decoded to fp32; dt is a constant where inlined */
static inline __attribute__((always_inline)) __m512 load_dec(amp_dtype dt, const void *p, __mmask16 m) {
    switch (dt) {
    case AMP_F8E4M3: return f32_from_e4m3x16(_mm_maskz_loadu_epi8(m, p));
    case AMP_F8E5M2: return f32_from_e5m2x16(_mm_maskz_loadu_epi8(m, p));
    case AMP_BF16: return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
    default: return _mm512_maskz_loadu_ps(m, p);
    }
}

static inline __attribute__((always_inline)) void store_out(bool bf16, void *dst, __m512 v, __mmask16 m) {
    if (bf16)
        _mm256_mask_storeu_epi16(dst, m, _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16)));
    else
        _mm512_mask_storeu_ps(dst, m, v);
}

/* n elements from src to dst, each times f (when mul) or times its own factor fv[j] (when per_elem) */
static inline __attribute__((always_inline)) void decode_run(amp_dtype dt, bool bf16, char *dst, const char *src,
                                                             size_t n, bool mul, float f, const float *fv) {
    const size_t es = dt == AMP_F32 ? 4 : dt == AMP_BF16 ? 2 : 1, os = bf16 ? 2 : 4;
    const __m512 fs = _mm512_set1_ps(f);
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 v = load_dec(dt, src + j * es, 0xFFFF);
        if (fv) v = _mm512_mul_ps(v, _mm512_loadu_ps(fv + j));
        else if (mul) v = _mm512_mul_ps(v, fs);
        store_out(bf16, dst + j * os, v, 0xFFFF);
    }
    if (j < n) {
        const __mmask16 m = tail_mask(n - j);
        __m512 v = load_dec(dt, src + j * es, m);
        if (fv) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, fv + j));
        else if (mul) v = _mm512_mul_ps(v, fs);
        store_out(bf16, dst + j * os, v, m);
    }
}

/* The bf16 bits of each fp8 magnitude pattern (the sign bit clear): e4m3's m * 2^-9 below 8, then
 * (1 + (m & 7) / 8) 2^((m >> 3) - 7), its NaN 0x7F as 0x7FC0; e5m2's m * 2^-16 below 4, then
 * (1 + (m & 3) / 4) 2^((m >> 2) - 15), inf (0x7C) 0x7F80 and NaN 0x7FC0. Every finite one is exact and
 * normal in bf16. */
static const uint16_t bf16_of_e4m3[128] __attribute__((aligned(64))) = {
    0x0000, 0x3B00, 0x3B80, 0x3BC0, 0x3C00, 0x3C20, 0x3C40, 0x3C60, 0x3C80, 0x3C90, 0x3CA0, 0x3CB0, 0x3CC0, 0x3CD0, 0x3CE0, 0x3CF0,
    0x3D00, 0x3D10, 0x3D20, 0x3D30, 0x3D40, 0x3D50, 0x3D60, 0x3D70, 0x3D80, 0x3D90, 0x3DA0, 0x3DB0, 0x3DC0, 0x3DD0, 0x3DE0, 0x3DF0,
    0x3E00, 0x3E10, 0x3E20, 0x3E30, 0x3E40, 0x3E50, 0x3E60, 0x3E70, 0x3E80, 0x3E90, 0x3EA0, 0x3EB0, 0x3EC0, 0x3ED0, 0x3EE0, 0x3EF0,
    0x3F00, 0x3F10, 0x3F20, 0x3F30, 0x3F40, 0x3F50, 0x3F60, 0x3F70, 0x3F80, 0x3F90, 0x3FA0, 0x3FB0, 0x3FC0, 0x3FD0, 0x3FE0, 0x3FF0,
    0x4000, 0x4010, 0x4020, 0x4030, 0x4040, 0x4050, 0x4060, 0x4070, 0x4080, 0x4090, 0x40A0, 0x40B0, 0x40C0, 0x40D0, 0x40E0, 0x40F0,
    0x4100, 0x4110, 0x4120, 0x4130, 0x4140, 0x4150, 0x4160, 0x4170, 0x4180, 0x4190, 0x41A0, 0x41B0, 0x41C0, 0x41D0, 0x41E0, 0x41F0,
    0x4200, 0x4210, 0x4220, 0x4230, 0x4240, 0x4250, 0x4260, 0x4270, 0x4280, 0x4290, 0x42A0, 0x42B0, 0x42C0, 0x42D0, 0x42E0, 0x42F0,
    0x4300, 0x4310, 0x4320, 0x4330, 0x4340, 0x4350, 0x4360, 0x4370, 0x4380, 0x4390, 0x43A0, 0x43B0, 0x43C0, 0x43D0, 0x43E0, 0x7FC0,
};
static const uint16_t bf16_of_e5m2[128] __attribute__((aligned(64))) = {
    0x0000, 0x3780, 0x3800, 0x3840, 0x3880, 0x38A0, 0x38C0, 0x38E0, 0x3900, 0x3920, 0x3940, 0x3960, 0x3980, 0x39A0, 0x39C0, 0x39E0,
    0x3A00, 0x3A20, 0x3A40, 0x3A60, 0x3A80, 0x3AA0, 0x3AC0, 0x3AE0, 0x3B00, 0x3B20, 0x3B40, 0x3B60, 0x3B80, 0x3BA0, 0x3BC0, 0x3BE0,
    0x3C00, 0x3C20, 0x3C40, 0x3C60, 0x3C80, 0x3CA0, 0x3CC0, 0x3CE0, 0x3D00, 0x3D20, 0x3D40, 0x3D60, 0x3D80, 0x3DA0, 0x3DC0, 0x3DE0,
    0x3E00, 0x3E20, 0x3E40, 0x3E60, 0x3E80, 0x3EA0, 0x3EC0, 0x3EE0, 0x3F00, 0x3F20, 0x3F40, 0x3F60, 0x3F80, 0x3FA0, 0x3FC0, 0x3FE0,
    0x4000, 0x4020, 0x4040, 0x4060, 0x4080, 0x40A0, 0x40C0, 0x40E0, 0x4100, 0x4120, 0x4140, 0x4160, 0x4180, 0x41A0, 0x41C0, 0x41E0,
    0x4200, 0x4220, 0x4240, 0x4260, 0x4280, 0x42A0, 0x42C0, 0x42E0, 0x4300, 0x4320, 0x4340, 0x4360, 0x4380, 0x43A0, 0x43C0, 0x43E0,
    0x4400, 0x4420, 0x4440, 0x4460, 0x4480, 0x44A0, 0x44C0, 0x44E0, 0x4500, 0x4520, 0x4540, 0x4560, 0x4580, 0x45A0, 0x45C0, 0x45E0,
    0x4600, 0x4620, 0x4640, 0x4660, 0x4680, 0x46A0, 0x46C0, 0x46E0, 0x4700, 0x4720, 0x4740, 0x4760, 0x7F80, 0x7FC0, 0x7FC0, 0x7FC0,
};

/* The bf16 bits of 32 fp8 magnitudes (the 16-bit lanes of w, the fp8 patterns; the sign bit is not
 * looked at) from the 128-entry table: two VPERMT2W over 64 entries each, bit 6 choosing between them. */
static inline __attribute__((always_inline)) __m512i bf16_magnitudes(amp_dtype dt, __m512i w) {
    const uint16_t *t = dt == AMP_F8E4M3 ? bf16_of_e4m3 : bf16_of_e5m2;
    const __m512i lo = _mm512_permutex2var_epi16(_mm512_load_si512(t), w, _mm512_load_si512(t + 32));
    const __m512i hi = _mm512_permutex2var_epi16(_mm512_load_si512(t + 64), w, _mm512_load_si512(t + 96));
    return _mm512_mask_mov_epi16(lo, _mm512_test_epi16_mask(w, _mm512_set1_epi16(0x40)), hi);
}

/* v | the sign of each fp8 pattern in w (bit 7, moved to bit 15) */
static inline __attribute__((always_inline)) __m512i with_sign(__m512i v, __m512i w) {
    return _mm512_ternarylogic_epi32(v, _mm512_slli_epi16(w, 8), _mm512_set1_epi16((short)0x8000), 0xF8);
}

/* fp8 to bf16 without factors, 32 lanes of 16 bits: the magnitude from the table, the sign ORed in. */
static inline __attribute__((always_inline)) __m512i bf16_from_fp8x32(amp_dtype dt, __m256i bytes) {
    const __m512i w = _mm512_cvtepu8_epi16(bytes);
    return with_sign(bf16_magnitudes(dt, w), w);
}

/* ... times 2^e when add = e << 7 is not 0: e is added to the exponent of every finite nonzero
 * magnitude (0 < bits < 0x7F80; the caller makes sure the results stay normal: exact, the bits of the
 * fp32 product's top half), then the sign ORed in */
static inline __attribute__((always_inline)) __m512i bf16_from_fp8x32_scaled(amp_dtype dt, __m256i bytes, __m512i add) {
    const __m512i w = _mm512_cvtepu8_epi16(bytes);
    const __m512i mag = bf16_magnitudes(dt, w);
    const __mmask32 scale = _mm512_cmplt_epu16_mask(_mm512_sub_epi16(mag, _mm512_set1_epi16(1)), _mm512_set1_epi16(0x7F7F));
    return with_sign(_mm512_mask_add_epi16(mag, scale, mag, add), w);
}

static inline __attribute__((always_inline)) void decode_fp8_bf16(amp_dtype dt, uint16_t *dst, const uint8_t *src,
                                                                  size_t n, int add) {
    const __m512i a = _mm512_set1_epi16((short)add);
    size_t j = 0;
    for (; j + 32 <= n; j += 32) {
        const __m256i b = _mm256_loadu_si256((const __m256i *)(src + j));
        _mm512_storeu_si512(dst + j, add ? bf16_from_fp8x32_scaled(dt, b, a) : bf16_from_fp8x32(dt, b));
    }
    if (j < n) {
        const __mmask32 m = n - j >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << (n - j)) - 1u);
        const __m256i b = _mm256_maskz_loadu_epi8(m, src + j);
        _mm512_mask_storeu_epi16(dst + j, m, add ? bf16_from_fp8x32_scaled(dt, b, a) : bf16_from_fp8x32(dt, b));
    }
}

/* Pairs: panel t takes r (<= 32) values of each row, interleaved word by word (VPERMT2W, as the bf16
 * pack does), stored as r 32-bit words, the words past n zero. */
static inline __attribute__((always_inline)) void decode_pairs(amp_dtype dt, uint16_t *dst, size_t panel_stride,
                                                               const uint8_t *src0, const uint8_t *src1,
                                                               const int16_t *adds, size_t n, int r) {
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37,
                                        5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    const __mmask16 w_lo = r >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << r) - 1u);
    const __mmask16 w_hi = r <= 16 ? 0 : r >= 32 ? (__mmask16)0xFFFF : (__mmask16)((1u << (r - 16)) - 1u);
    for (size_t j = 0; j < n; j += (size_t)r, dst += panel_stride) {
        const size_t left = n - j < (size_t)r ? n - j : (size_t)r;
        const __mmask32 m = left >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << left) - 1u);
        __m512i a, b = _mm512_setzero_si512();
        if (adds) {
            const __m512i e = _mm512_maskz_loadu_epi16(m, adds + j);
            a = bf16_from_fp8x32_scaled(dt, _mm256_maskz_loadu_epi8(m, src0 + j), e);
            if (src1) b = bf16_from_fp8x32_scaled(dt, _mm256_maskz_loadu_epi8(m, src1 + j), e);
        } else {
            a = bf16_from_fp8x32(dt, _mm256_maskz_loadu_epi8(m, src0 + j));
            if (src1) b = bf16_from_fp8x32(dt, _mm256_maskz_loadu_epi8(m, src1 + j));
        }
        a = _mm512_maskz_mov_epi16(m, a), b = _mm512_maskz_mov_epi16(m, b);
        _mm512_mask_storeu_epi32(dst, w_lo, _mm512_permutex2var_epi16(a, lo, b));
        if (w_hi) _mm512_mask_storeu_epi32(dst + 32, w_hi, _mm512_permutex2var_epi16(a, hi, b));
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

enum { PANEL_PREFETCH = 256 };

/* A panel: 16 rows at a time, 16 pairs (32 values) of each decoded into one vector (its exponent add
 * broadcast), the 16 x 16 words transposed in registers (as the bf16 pack does), one vector per pair
 * index stored to the panel. */
static inline __attribute__((always_inline)) void decode_panel(amp_dtype dt, uint16_t *dst, const uint8_t *src,
                                                               size_t ld, const int16_t *adds, size_t ld_adds,
                                                               size_t ri, size_t kc, int r) {
    const size_t kq = (kc + 1) / 2;
    for (int row0 = 0; row0 < r; row0 += 16) {
        const int nr = (int)ri - row0 <= 0 ? 0 : (int)ri - row0 < 16 ? (int)ri - row0 : 16;
        const __mmask16 store_mask = mask16(r - row0 < 16 ? r - row0 : 16);
        const uint8_t *s = src + (size_t)row0 * ld;
        const int16_t *a = adds ? adds + (size_t)row0 * ld_adds : NULL;
        for (size_t q = 0; q < kq; q += 16) {
            const size_t nq = kq - q < 16 ? kq - q : 16, nelem = kc - 2 * q < 32 ? kc - 2 * q : 32;
            const __mmask32 k = nelem >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << nelem) - 1u);
            __m512 v[16];
            UNROLL_ALL
            for (int i = 0; i < 16; i++) {
                if (i >= nr) {
                    v[i] = _mm512_setzero_ps();
                    continue;
                }
                if ((q & 31) == 0) /* once per 64 bytes of the row: the line PANEL_PREFETCH bytes on */
                    _mm_prefetch((const char *)(s + (size_t)i * ld + 2 * q + PANEL_PREFETCH), _MM_HINT_T0);
                const __m256i b = _mm256_maskz_loadu_epi8(k, s + (size_t)i * ld + 2 * q);
                v[i] = _mm512_castsi512_ps(a ? bf16_from_fp8x32_scaled(dt, b, _mm512_set1_epi16(a[(size_t)i * ld_adds + q / 16]))
                                             : bf16_from_fp8x32(dt, b));
            }
            transpose16(v);
            UNROLL_ALL
            for (int c = 0; c < 16; c++)
                if ((size_t)c < nq) _mm512_mask_storeu_ps((float *)(void *)(dst + 2 * ((q + (size_t)c) * (size_t)r + (size_t)row0)), store_mask, v[c]);
        }
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

/* Whether a factor f is 2^e with every fp8 value times it normal in bf16 (and finite): e in
 * [amp_fp8_add_exp_min, amp_fp8_add_exp_max] (fp8_kernels.h); then *add = e << 7. */
static inline bool pow2_in_range(amp_dtype dt, float f, int *add) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    const int e = (int)(u >> 23) - 127; /* the sign bit makes e large: refused below */
    if ((u & 0x7FFFFFu) != 0 || e < amp_fp8_add_exp_min(dt) || e > amp_fp8_add_exp_max(dt)) return false;
    *add = e * 128;
    return true;
}

static inline __attribute__((always_inline)) void decode_row(amp_dtype dt, bool bf16, void *dst, const void *src,
                                                             size_t n, const float *factors, size_t lead, size_t block) {
    const size_t es = dt == AMP_F32 ? 4 : dt == AMP_BF16 ? 2 : 1, os = bf16 ? 2 : 4;
    const bool fp8_to_bf16 = bf16 && (dt == AMP_F8E4M3 || dt == AMP_F8E5M2);
    if (!factors && fp8_to_bf16) {
        decode_fp8_bf16(dt, dst, src, n, 0);
        return;
    }
    if (!factors) {
        decode_run(dt, bf16, dst, src, n, false, 1.0f, NULL);
        return;
    }
    if (block == 1) { /* a factor per element: factors[j] */
        decode_run(dt, bf16, dst, src, n, false, 1.0f, factors);
        return;
    }
    /* runs of one factor each: the rest of the first block, then whole blocks */
    size_t j = 0, len = lead;
    for (; j < n; j += len, len = block, factors++) {
        const size_t run = n - j < len ? n - j : len;
        int add;
        if (fp8_to_bf16 && pow2_in_range(dt, *factors, &add))
            decode_fp8_bf16(dt, (uint16_t *)dst + j, (const uint8_t *)src + j, run, add);
        else
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

/* VMAXPS returns its second operand when either is NaN: max(|x|, m) skips a NaN x, as fmaxf does. Four
 * accumulators hide the latency; the max of maxes is the same value in any order (no rounding). */
static float amax_nan_avx512(const float *src, size_t n, bool *saw_nan) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
    __m512 m0 = _mm512_setzero_ps(), m1 = m0, m2 = m0, m3 = m0;
    __mmask16 nan = 0;
    size_t i = 0;
#define AMAX_STEP(acc, off)                                                                                  \
    do {                                                                                                     \
        const __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_loadu_si512(src + i + (off)), abs_mask)); \
        nan |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);                                                       \
        acc = _mm512_max_ps(a, acc);                                                                         \
    } while (0)
    for (; i + 64 <= n; i += 64) {
        AMAX_STEP(m0, 0);
        AMAX_STEP(m1, 16);
        AMAX_STEP(m2, 32);
        AMAX_STEP(m3, 48);
    }
#undef AMAX_STEP
    for (; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        const __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_maskz_loadu_epi32(k, src + i), abs_mask));
        nan |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
        m0 = _mm512_max_ps(a, m0);
    }
    const float m = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
    if (saw_nan) *saw_nan = nan != 0;
    return m;
}

/* amax reads a long array once, two operations per vector, faster than the hardware's prefetchers
 * bring it from beyond L2: four cache lines (64 floats) this far ahead are fetched into L1 with each
 * 64 read (about a fifth more GB/s at 4 MiB; the encode, compute-bound, gains nothing from it). */
enum { PREFETCH_AHEAD = 1024 };
static inline __attribute__((always_inline)) void prefetch64(const float *p) {
    UNROLL_ALL
    for (int k = 0; k < 64; k += 16) _mm_prefetch((const char *)(p + PREFETCH_AHEAD + k), _MM_HINT_T0);
}

/* The magnitudes' bit patterns order as the values do (infinity above every finite, NaNs above it):
 * an unsigned integer max over them is the amax while no NaN is among them, found in one pass of two
 * operations per vector. A NaN (the max above 0x7F800000) sends the array to the NaN-skipping pass. */
static float amax_avx512(const float *src, size_t n, bool *saw_nan) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
    __m512i m0 = _mm512_setzero_si512(), m1 = m0, m2 = m0, m3 = m0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        prefetch64(src + i);
        m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(src + i), abs_mask));
        m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_loadu_si512(src + i + 16), abs_mask));
        m2 = _mm512_max_epu32(m2, _mm512_and_si512(_mm512_loadu_si512(src + i + 32), abs_mask));
        m3 = _mm512_max_epu32(m3, _mm512_and_si512(_mm512_loadu_si512(src + i + 48), abs_mask));
    }
    for (; i < n; i += 16)
        m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_maskz_loadu_epi32(tail_mask(n - i), src + i), abs_mask));
    const uint32_t bits = _mm512_reduce_max_epu32(_mm512_max_epu32(_mm512_max_epu32(m0, m1), _mm512_max_epu32(m2, m3)));
    if (bits > 0x7F800000u) return amax_nan_avx512(src, n, saw_nan);
    if (saw_nan) *saw_nan = false;
    float m;
    memcpy(&m, &bits, sizeof m);
    return m;
}

/* The reference's amax of one block (the first NaN, its sign cleared, where there is one). */
static float block_amax_scalar(const float *x, size_t block) {
    float m = 0.0f;
    for (size_t i = 0; i < block; i++) {
        const float a = fabsf(x[i]);
        if (a != a) return a;
        if (a > m) m = a;
    }
    return m;
}

/* Lane i of the result: the largest dword of v[i], for 16 vectors at once. Four halving steps, each the
 * max of two shuffles of two vectors, leave vector i's maximum at lane pos[i]; one permute puts the
 * lanes in order. */
static inline __attribute__((always_inline)) __m512i hmax16_epu32(const __m512i v[16]) {
    __m512i c[8], d[4], e[2];
    UNROLL_ALL
    for (int i = 0; i < 8; i++) /* 128-bit lanes: v[i]'s two halves folded, then v[i + 8]'s */
        c[i] = _mm512_max_epu32(_mm512_shuffle_i32x4(v[i], v[i + 8], 0x44), _mm512_shuffle_i32x4(v[i], v[i + 8], 0xEE));
    UNROLL_ALL
    for (int i = 0; i < 4; i++) /* lanes: v[i], v[i + 8], v[i + 4], v[i + 12], four dwords each */
        d[i] = _mm512_max_epu32(_mm512_shuffle_i32x4(c[i], c[i + 4], 0x88), _mm512_shuffle_i32x4(c[i], c[i + 4], 0xDD));
    UNROLL_ALL
    for (int i = 0; i < 2; i++) /* in each lane, dwords 0 and 2 from d[i], 1 and 3 from d[i + 2] */
        e[i] = _mm512_max_epu32(_mm512_unpacklo_epi32(d[i], d[i + 2]), _mm512_unpackhi_epi32(d[i], d[i + 2]));
    const __m512i f = _mm512_max_epu32(_mm512_unpacklo_epi64(e[0], e[1]), _mm512_unpackhi_epi64(e[0], e[1]));
    const __m512i pos = _mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15);
    return _mm512_permutexvar_epi32(pos, f);
}

/* Blocks of a multiple of 16 values, 16 blocks at a time: the unsigned max of the magnitudes' bits in
 * each block (the amax while it holds no NaN: the bit patterns order as the values do), the 16 maxima
 * reduced together; a block whose maximum is a NaN pattern gets the reference's answer from a scalar
 * pass over that block only. */
static void block_amax_avx512(float *out, const float *src, size_t nblocks, size_t block) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
    if (block % 16 != 0) {
        for (size_t b = 0; b < nblocks; b++) out[b] = block_amax_scalar(src + b * block, block);
        return;
    }
    size_t b = 0;
    for (; b + 16 <= nblocks; b += 16) {
        __m512i v[16];
        UNROLL_ALL
        for (int i = 0; i < 16; i++) {
            const float *x = src + (b + (size_t)i) * block;
            v[i] = _mm512_and_si512(_mm512_loadu_si512(x), abs_mask);
            for (size_t k = 16; k < block; k += 16) v[i] = _mm512_max_epu32(v[i], _mm512_and_si512(_mm512_loadu_si512(x + k), abs_mask));
        }
        const __m512i m = hmax16_epu32(v);
        _mm512_storeu_si512(out + b, m);
        for (unsigned nan = _mm512_cmpgt_epu32_mask(m, _mm512_set1_epi32(0x7F800000)); nan; nan &= nan - 1) {
            const size_t i = b + (size_t)__builtin_ctz(nan);
            out[i] = block_amax_scalar(src + i * block, block);
        }
    }
    for (; b < nblocks; b++) {
        const float *x = src + b * block;
        __m512i acc = _mm512_setzero_si512();
        for (size_t k = 0; k < block; k += 16) acc = _mm512_max_epu32(acc, _mm512_and_si512(_mm512_loadu_si512(x + k), abs_mask));
        const uint32_t bits = _mm512_reduce_max_epu32(acc);
        out[b] = bits > 0x7F800000u ? block_amax_scalar(x, block) : amp_f32_from_bits(bits);
    }
}

/* ---- scaled encode ----
 *
 * Rounding by the FPU: for a = |x| with exponent e, c = 2^(e + 23 - M) has an ulp of 2^(e - M), the
 * spacing of the fp8 values next to a, so a + c is a rounded to nearest even at the fp8's precision
 * (one rounding, in the addition). Below the fp8's smallest normal the spacing is fixed (2^-9 in
 * e4m3, 2^-16 in e5m2): c is raised to that spacing times 2^23. a is first clamped to the largest
 * finite (saturation: anything above it rounds to it or past it). The sum has c's exponent, so its
 * low bits are q = a / spacing (2^M .. 2^(M+1) for a normal a, 0 .. 2^M below), and the fp8's
 * magnitude bits are q + 2^M (E(c) - E(c_min)), E the biased exponent: bits(a + c) + (bits(c) >>
 * (23 - M)) - bits(c) - k_off, all in 32-bit integer lanes. A NaN (VMINPS returns its second operand,
 * |x|, when one is NaN) gives a difference above every finite fp8's, which an unsigned min with the
 * canonical NaN pattern turns into that NaN; x's sign is then or-ed in. The reference's integer
 * rounding gives the same bits (checked on every fp32 pattern; tests/test_fp8_simd.c checks a
 * strided sweep and every rounding boundary). */

typedef struct {
    float max_finite;       /* the largest finite */
    int32_t c_shift, c_min; /* (23 - M) << 23 added to a's exponent bits; c's smallest bits */
    int32_t nan_bits;       /* the canonical NaN, also the largest fp8 magnitude pattern + 1 */
    int mbits;              /* M, the fp8's mantissa bits */
    int32_t k_off;          /* 2^M times the biased exponent of c_min */
} fp8_format;

/* e4m3's c and offset (below) by a's biased exponent E, at index max(E - 120, 0): E <= 120 (a below
 * the smallest normal 2^-6, or 0) gives c_min = 2^14, E = 121 .. 135 (up to 448) c = 2^(E - 127 + 20);
 * the offset is bits(c) >> 20 - bits(c) - k_off, as computed in lanes for e5m2. */
#define E4M3_CB(i) ((((i) < 1 ? 141 : 140 + (i))) << 23)
#define E4M3_OFF(i) ((E4M3_CB(i) >> 20) - E4M3_CB(i) - 8 * 141)
#define E4M3_ROW(F) F(0), F(1), F(2), F(3), F(4), F(5), F(6), F(7), F(8), F(9), F(10), F(11), F(12), F(13), F(14), F(15)
static const int32_t e4m3_cb[16] __attribute__((aligned(64))) = {E4M3_ROW(E4M3_CB)};
static const int32_t e4m3_off[16] __attribute__((aligned(64))) = {E4M3_ROW(E4M3_OFF)};
#undef E4M3_ROW
#undef E4M3_OFF
#undef E4M3_CB

/* The fp8 magnitude patterns of x, one in each 32-bit lane: a finite x's (0 .. the largest finite
 * pattern), and a positive dword above every fp8 pattern for a NaN, which the callers clamp to the NaN
 * pattern. e4m3 takes c and the offset from two 16-entry tables (VPERMD) indexed by a's exponent, where
 * e5m2 (31 exponents) computes them: 4 vector operations fewer. A NaN a has the exponent 255, index 135
 * (its low four bits pick some entry): a NaN sum (at least 0x7FC00000) plus any offset (above
 * -2^31 + 2^30) stays above the NaN pattern and positive. */
static inline __attribute__((always_inline)) __m512i fp8_mag_from_f32x16(__m512 x, const fp8_format *fmt) {
    const __m512 a = _mm512_min_ps(_mm512_set1_ps(fmt->max_finite), _mm512_abs_ps(x));
    if (fmt->mbits == 3) {
        const __m512i idx = _mm512_subs_epu16(_mm512_srli_epi32(_mm512_castps_si512(a), 23), _mm512_set1_epi32(120));
        const __m512i c = _mm512_permutexvar_epi32(idx, _mm512_load_si512(e4m3_cb));
        const __m512i sum = _mm512_castps_si512(_mm512_add_ps(a, _mm512_castsi512_ps(c)));
        return _mm512_add_epi32(sum, _mm512_permutexvar_epi32(idx, _mm512_load_si512(e4m3_off)));
    }
    const __m512i cb = _mm512_max_epi32(_mm512_add_epi32(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7F800000)),
                                                         _mm512_set1_epi32(fmt->c_shift)),
                                        _mm512_set1_epi32(fmt->c_min));
    const __m512i sum = _mm512_castps_si512(_mm512_add_ps(a, _mm512_castsi512_ps(cb)));
    const __m512i off = _mm512_sub_epi32(_mm512_srli_epi32(cb, 23 - fmt->mbits), _mm512_add_epi32(cb, _mm512_set1_epi32(fmt->k_off)));
    return _mm512_add_epi32(sum, off);
}

/* The fp8 bytes of x from their magnitudes (fp8_mag_from_f32x16's), one in each 32-bit lane: clamped
 * to the NaN pattern (an unsigned min), x's sign or-ed in. */
static inline __attribute__((always_inline)) __m512i fp8_bytes_of_mag(__m512i mag, __m512 x, const fp8_format *fmt) {
    return _mm512_ternarylogic_epi32(_mm512_min_epu32(mag, _mm512_set1_epi32(fmt->nan_bits)),
                                     _mm512_srli_epi32(_mm512_castps_si512(x), 24), _mm512_set1_epi32(0x80), 0xF8);
}

/* 64 bytes from four vectors of magnitudes (fp8_mag_from_f32x16's, one per lane) and the four vectors
 * of values they came from (their signs): signed-saturating packs take each magnitude to a byte (a
 * NaN's to 0xFF, which an unsigned byte min with the NaN pattern clamps), the same packs of the values'
 * bits give bytes whose top bit is the value's sign (a negative dword stays negative), one ternary
 * logic op merges them; the packs are in-lane, so each 128-bit lane holds dword j of the four inputs
 * in turn, and one permute puts the dwords back in order. */
static inline __attribute__((always_inline)) void store_bytes64(uint8_t *dst, const __m512i mag[4], const __m512 x[4],
                                                                const fp8_format *fmt) {
    const __m512i m = _mm512_packus_epi16(_mm512_packs_epi32(mag[0], mag[1]), _mm512_packs_epi32(mag[2], mag[3]));
    const __m512i sg = _mm512_packs_epi16(_mm512_packs_epi32(_mm512_castps_si512(x[0]), _mm512_castps_si512(x[1])),
                                          _mm512_packs_epi32(_mm512_castps_si512(x[2]), _mm512_castps_si512(x[3])));
    const __m512i b = _mm512_ternarylogic_epi32(_mm512_min_epu8(m, _mm512_set1_epi8((char)fmt->nan_bits)), sg,
                                                _mm512_set1_epi8((char)0x80), 0xF8);
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_si512(dst, _mm512_permutexvar_epi32(order, b));
}

static inline __attribute__((always_inline)) void scaled_encode(uint8_t *dst, const float *src, size_t n, float scale,
                                                                const fp8_format *fmt) {
    const __m512 s = _mm512_set1_ps(scale);
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 x[4];
        __m512i mag[4];
        UNROLL_ALL
        for (int k = 0; k < 4; k++) {
            x[k] = _mm512_mul_ps(_mm512_loadu_ps(src + i + 16 * k), s);
            mag[k] = fp8_mag_from_f32x16(x[k], fmt);
        }
        store_bytes64(dst + i, mag, x, fmt);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, src + i), s);
        _mm512_mask_cvtepi32_storeu_epi8(dst + i, m, fp8_bytes_of_mag(fp8_mag_from_f32x16(x, fmt), x, fmt));
    }
}

/* encode_stats (fp8_kernels.h) on 16 values (mask m): their magnitudes (fp8_mag_from_f32x16's) and
 * products (*p) returned, and the counts raised by the lanes whose source is finite and nonzero
 * (VFPCLASSPS: not a NaN, a zero or an infinity) and whose product's magnitude exceeds the largest
 * finite (saturated) or whose magnitude is 0 (flushed): population counts of the masks, in scalar
 * registers, so that the vector ports only compute the masks. */
static inline __attribute__((always_inline)) __m512i encode_stats16(__m512 x, __m512 mult, __mmask16 m,
                                                                    const fp8_format *fmt, __m512 *p, int64_t *sat,
                                                                    int64_t *flush) {
    *p = _mm512_mul_ps(x, mult);
    const __m512i w = fp8_mag_from_f32x16(*p, fmt);
    const __mmask16 live = _kandn_mask16(_mm512_fpclass_ps_mask(x, 0x9F), m); /* 0x9F: NaN, +-0, +-inf */
    const __mmask16 over = _mm512_mask_cmp_ps_mask(live, _mm512_abs_ps(*p), _mm512_set1_ps(fmt->max_finite), _CMP_GT_OQ);
    const __mmask16 zero = _mm512_mask_testn_epi32_mask(live, w, w);
    *sat += __builtin_popcount(over);
    *flush += __builtin_popcount(zero);
    return w;
}

/* The multipliers of values i .. i+15: s (scales NULL), scales[i ..] (block 1), or the one of their
 * block (block a multiple of 16). */
static inline __attribute__((always_inline)) __m512 mult(const float *scales, size_t block, __m512 s, size_t i,
                                                         __mmask16 m) {
    if (!scales) return s;
    if (block == 1) return _mm512_maskz_loadu_ps(m, scales + i);
    return _mm512_set1_ps(scales[i / block]);
}

/* 64 values at a time (their bytes packed into one store, as scaled_encode's), then 16 at a time. */
static inline __attribute__((always_inline)) void encode_stats(uint8_t *dst, const float *src, size_t n, float scale,
                                                               const float *scales, size_t block,
                                                               int64_t counts[2], const fp8_format *fmt) {
    const __m512 s = _mm512_set1_ps(scale);
    int64_t sat = 0, flush = 0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 p[4];
        __m512i mag[4];
        UNROLL_ALL
        for (int k = 0; k < 4; k++)
            mag[k] = encode_stats16(_mm512_loadu_ps(src + i + 16 * k), mult(scales, block, s, i + 16 * (size_t)k, 0xFFFF),
                                    0xFFFF, fmt, &p[k], &sat, &flush);
        store_bytes64(dst + i, mag, p, fmt);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        __m512 p;
        const __m512i w = encode_stats16(_mm512_maskz_loadu_ps(m, src + i), mult(scales, block, s, i, m), m, fmt, &p, &sat, &flush);
        _mm512_mask_cvtepi32_storeu_epi8(dst + i, m, fp8_bytes_of_mag(w, p, fmt));
    }
    counts[0] += sat, counts[1] += flush;
}

static const fp8_format e4m3_sat = {448.0f, 20 << 23, (14 + 127) << 23, 0x7F, 3, 8 * (14 + 127)};
static const fp8_format e5m2_sat = {57344.0f, 21 << 23, (7 + 127) << 23, 0x7E, 2, 4 * (7 + 127)};
static void encode_e4m3(uint8_t *dst, const float *src, size_t n, float scale) {
    scaled_encode(dst, src, n, scale, &e4m3_sat);
}
static void encode_e5m2(uint8_t *dst, const float *src, size_t n, float scale) {
    scaled_encode(dst, src, n, scale, &e5m2_sat);
}

/* Specialised on the ways of taking multipliers: one, one per value, and one per block, MX's 32 and
 * block scaling's 128 as constants (the index of a value's block is then a shift, not a division per
 * vector). */
static inline __attribute__((always_inline)) void encode_stats_fmt(uint8_t *dst, const float *src, size_t n, float scale,
                                                                   const float *scales, size_t block, int64_t counts[2],
                                                                   const fp8_format *fmt) {
    if (!scales) encode_stats(dst, src, n, scale, NULL, 1, counts, fmt);
    else if (block == 1) encode_stats(dst, src, n, scale, scales, 1, counts, fmt);
    else if (block == 32) encode_stats(dst, src, n, scale, scales, 32, counts, fmt);
    else if (block == 128) encode_stats(dst, src, n, scale, scales, 128, counts, fmt);
    else encode_stats(dst, src, n, scale, scales, block, counts, fmt);
}
static void encode_stats_e4m3(uint8_t *dst, const float *src, size_t n, float scale, const float *scales, size_t block,
                              int64_t counts[2]) {
    encode_stats_fmt(dst, src, n, scale, scales, block, counts, &e4m3_sat);
}
static void encode_stats_e5m2(uint8_t *dst, const float *src, size_t n, float scale, const float *scales, size_t block,
                              int64_t counts[2]) {
    encode_stats_fmt(dst, src, n, scale, scales, block, counts, &e5m2_sat);
}

/* Column maxima of 16 columns (mask m) down the rows, the float way: VMAXPS(a, m) skips a NaN a as
 * fmaxf does; *bits gets the unsigned max of the magnitudes' bits (past infinity's: a NaN). */
static inline __attribute__((always_inline)) void col_amax16_float(float *amax, const float *src, size_t rows,
                                                                   size_t ld, __mmask16 m, __m512i *bits) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
    __m512 acc = _mm512_maskz_loadu_ps(m, amax);
    for (size_t r = 0; r < rows; r++) {
        const __m512i a = _mm512_and_si512(_mm512_maskz_loadu_epi32(m, src + r * ld), abs_mask);
        *bits = _mm512_max_epu32(*bits, a);
        acc = _mm512_max_ps(_mm512_castsi512_ps(a), acc);
    }
    _mm512_mask_storeu_ps(amax, m, acc);
}

/* Column maxima down the rows, 64 columns (four independent accumulators) at a time: an unsigned max
 * of the magnitudes' bits, started from amax[]'s bits, which is the float max while no bit pattern
 * passes infinity's (a NaN in src, or an amax[] entry that is negative or NaN); a group where one does
 * is redone the float way. Then 16 columns at a time the float way. */
static bool col_amax_avx512(float *amax, const float *src, size_t rows, size_t cols, size_t ld) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    __m512i bits = _mm512_setzero_si512();
    bool nan = false;
    size_t j = 0;
    for (; j + 64 <= cols; j += 64) {
        __m512i a0 = _mm512_loadu_si512(amax + j), a1 = _mm512_loadu_si512(amax + j + 16);
        __m512i a2 = _mm512_loadu_si512(amax + j + 32), a3 = _mm512_loadu_si512(amax + j + 48);
        for (size_t r = 0; r < rows; r++) {
            const float *x = src + r * ld + j;
            a0 = _mm512_max_epu32(a0, _mm512_and_si512(_mm512_loadu_si512(x), abs_mask));
            a1 = _mm512_max_epu32(a1, _mm512_and_si512(_mm512_loadu_si512(x + 16), abs_mask));
            a2 = _mm512_max_epu32(a2, _mm512_and_si512(_mm512_loadu_si512(x + 32), abs_mask));
            a3 = _mm512_max_epu32(a3, _mm512_and_si512(_mm512_loadu_si512(x + 48), abs_mask));
        }
        const __m512i top = _mm512_max_epu32(_mm512_max_epu32(a0, a1), _mm512_max_epu32(a2, a3));
        if (_mm512_cmpgt_epu32_mask(top, inf)) { /* a NaN somewhere: the float way, which also says whether */
            __m512i b = _mm512_setzero_si512();
            for (size_t c = 0; c < 64; c += 16) col_amax16_float(amax + j + c, src + j + c, rows, ld, 0xFFFF, &b);
            nan |= _mm512_cmpgt_epu32_mask(b, inf) != 0;
            continue;
        }
        _mm512_storeu_si512(amax + j, a0), _mm512_storeu_si512(amax + j + 16, a1);
        _mm512_storeu_si512(amax + j + 32, a2), _mm512_storeu_si512(amax + j + 48, a3);
    }
    for (; j < cols; j += 16) col_amax16_float(amax + j, src + j, rows, ld, tail_mask(cols - j), &bits);
    return nan || _mm512_cmpgt_epu32_mask(bits, inf) != 0;
}

/* Block scaling's scales 16 tiles at a time: the quotient (VDIVPS), infinity clamped to FLT_MAX by a
 * min, the mantissa cleared, 1 where the amax is 0 or inf (VFPCLASSPS); the inverse by a division
 * (exact: a power of 2). */
static void block_scales_avx512(float *scale, float *inv, const float *amax, size_t n, float maxf, float stats[3]) {
    const __m512 m = _mm512_set1_ps(maxf), one = _mm512_set1_ps(1.0f);
    __m512 smin = _mm512_set1_ps(stats[0]), smax = _mm512_set1_ps(stats[1]), amx = _mm512_set1_ps(stats[2]);
    for (size_t b = 0; b < n; b += 16) {
        const __mmask16 k = tail_mask(n - b);
        const __m512 a = _mm512_maskz_loadu_ps(k, amax + b);
        const __m512 q = _mm512_min_ps(_mm512_div_ps(m, a), _mm512_set1_ps(FLT_MAX));
        __m512 s = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(q), _mm512_set1_epi32((int)0xFF800000u)));
        s = _mm512_mask_mov_ps(s, _mm512_fpclass_ps_mask(a, 0x1E), one); /* 0x1E: +-0, +-inf */
        _mm512_mask_storeu_ps(scale + b, k, s);
        _mm512_mask_storeu_ps(inv + b, k, _mm512_div_ps(one, s));
        smin = _mm512_mask_min_ps(smin, k, smin, s), smax = _mm512_mask_max_ps(smax, k, smax, s);
        amx = _mm512_mask_max_ps(amx, k, amx, a);
    }
    stats[0] = _mm512_reduce_min_ps(smin), stats[1] = _mm512_reduce_max_ps(smax), stats[2] = _mm512_reduce_max_ps(amx);
}

/* ---- a bf16 band decoded with its block maxima ----
 *
 * In 16-row groups by 128-column strips (four vectors of 32 bf16 per row): each vector decoded (its
 * words in the top halves of dwords) and stored, and its magnitudes' bits (sign cleared) max-ed as 16-bit
 * words, which order as the values do, a NaN above infinity: into the strip's four column vectors, and
 * into a tile vector per row and tile (the four vectors' max for 1x128 tiles, each vector for 1x32).
 * Sixteen tile vectors then reduce together (hmax16_epu32 on their word pairs' maxima); a column
 * vector goes into cmax after its group. The maxima are the largest magnitude's bf16 bits as fp32:
 * the amax, or a NaN. */

/* The 32 bf16 of v as fp32 bits, words 0..15 in *lo and 16..31 in *hi: each word in the top half of
 * its dword (the in-lane unpacks, after a qword permute that keeps the order). */
static inline __attribute__((always_inline)) void f32_from_bf16x32(__m512i v, __m512i *lo, __m512i *hi) {
    const __m512i p = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7), v);
    *lo = _mm512_unpacklo_epi16(_mm512_setzero_si512(), p);
    *hi = _mm512_unpackhi_epi16(_mm512_setzero_si512(), p);
}

/* The 16 largest words of tv[i] (16-bit magnitudes' bits), as fp32 at out[i * stride] for i < h. */
static inline __attribute__((always_inline)) void store_tile_maxima(float *out, size_t stride, const __m512i tv[16],
                                                                    size_t h) {
    __m512i f[16];
    UNROLL_ALL
    for (int i = 0; i < 16; i++) /* each dword: the larger of its two words */
        f[i] = _mm512_max_epu32(_mm512_and_si512(tv[i], _mm512_set1_epi32(0xFFFF)), _mm512_srli_epi32(tv[i], 16));
    float m[16];
    _mm512_storeu_si512(m, _mm512_slli_epi32(hmax16_epu32(f), 16));
    for (size_t i = 0; i < h; i++) out[i * stride] = m[i];
}

/* One strip of h <= 16 rows by nv vectors of 32 bf16 (row stride cols); tmax: the strip's first
 * tile maxima of its first row (row stride nt); cm: the strip's column maxima as 16-bit words. */
static inline __attribute__((always_inline)) void decode_band_strip(float *dst, const uint16_t *src, size_t h,
                                                                    size_t cols, int nv, size_t tile, float *tmax,
                                                                    size_t nt, __m512i cm[4]) {
    const __m512i mag = _mm512_set1_epi16(0x7FFF);
    __m512i tv[4][16];
    for (size_t i = 0; i < 16; i++) {
        __m512i m[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                        _mm512_setzero_si512()};
        UNROLL_ALL
        for (int k = 0; k < nv && i < h; k++) {
            _mm_prefetch((const char *)(src + (i + 16) * cols + 32 * (size_t)k), _MM_HINT_T0);
            const __m512i v = _mm512_loadu_si512(src + i * cols + 32 * (size_t)k);
            __m512i lo, hi;
            f32_from_bf16x32(v, &lo, &hi);
            _mm512_storeu_si512(dst + i * cols + 32 * (size_t)k, lo);
            _mm512_storeu_si512(dst + i * cols + 32 * (size_t)k + 16, hi);
            m[k] = _mm512_and_si512(v, mag);
            cm[k] = _mm512_max_epu16(cm[k], m[k]);
        }
        if (tile == 128) {
            tv[0][i] = _mm512_max_epu16(_mm512_max_epu16(m[0], m[1]), _mm512_max_epu16(m[2], m[3]));
        } else {
            UNROLL_ALL
            for (int k = 0; k < nv; k++) tv[k][i] = m[k];
        }
    }
    if (tile == 128) {
        store_tile_maxima(tmax, nt, tv[0], h);
    } else {
        UNROLL_ALL
        for (int k = 0; k < nv; k++) store_tile_maxima(tmax + k, nt, tv[k], h);
    }
}

static inline __attribute__((always_inline)) void decode_band_tile(float *dst, const uint16_t *src, size_t rows,
                                                                   size_t cols, size_t tile, float *tmax,
                                                                   float *cmax) {
    const size_t nt = cols / tile;
    for (size_t r0 = 0; r0 < rows; r0 += 16) {
        const size_t h = rows - r0 < 16 ? rows - r0 : 16;
        for (size_t s = 0; s < cols; s += 128) {
            __m512i cm[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                             _mm512_setzero_si512()};
            const int nv = cols - s >= 128 ? 4 : (int)((cols - s) / 32);
            const size_t at = r0 * cols + s;
            float *tm = tmax + r0 * nt + s / tile;
            if (nv == 4) decode_band_strip(dst + at, src + at, h, cols, 4, tile, tm, nt, cm);
            else decode_band_strip(dst + at, src + at, h, cols, nv, tile, tm, nt, cm);
            for (int k = 0; k < nv; k++) { /* the strip's column maxima into cmax's bits */
                __m512i lo, hi;
                f32_from_bf16x32(cm[k], &lo, &hi);
                float *c = cmax + s + 32 * (size_t)k;
                if (r0 > 0) {
                    lo = _mm512_max_epu32(lo, _mm512_loadu_si512(c));
                    hi = _mm512_max_epu32(hi, _mm512_loadu_si512(c + 16));
                }
                _mm512_storeu_si512(c, lo);
                _mm512_storeu_si512(c + 16, hi);
            }
        }
    }
}

static void decode_band_bf16_avx512(float *dst, const uint16_t *src, size_t rows, size_t cols, size_t tile,
                                    float *tmax, float *cmax) {
    if (tile == 128) decode_band_tile(dst, src, rows, cols, 128, tmax, cmax);
    else decode_band_tile(dst, src, rows, cols, 32, tmax, cmax);
}

/* ---- block-scale bookkeeping ---- */

/* 16 factors at a time: the exponent field less the bias, refused where the mantissa field is not 0 or
 * the exponent is out of [lo, hi] (a negative factor's sign bit lands it above hi); the adds are the
 * low 16 bits of e << 7 (VPMOVDW truncates). */
static bool factor_adds_avx512(int16_t *adds, const float *f, size_t n, amp_dtype dt) {
    const __m512i lo = _mm512_set1_epi32(amp_fp8_add_exp_min(dt)), hi = _mm512_set1_epi32(amp_fp8_add_exp_max(dt));
    const __m512i man = _mm512_set1_epi32(0x7FFFFF), bias = _mm512_set1_epi32(127);
    __mmask16 bad = 0;
    for (size_t j = 0; j < n; j += 16) {
        const __mmask16 m = tail_mask(n - j);
        const __m512i u = _mm512_maskz_loadu_epi32(m, f + j);
        const __m512i e = _mm512_sub_epi32(_mm512_srli_epi32(u, 23), bias);
        bad |= _mm512_mask_test_epi32_mask(m, u, man) | _mm512_mask_cmplt_epi32_mask(m, e, lo) |
               _mm512_mask_cmpgt_epi32_mask(m, e, hi);
        _mm256_mask_storeu_epi16(adds + j, m, _mm512_cvtepi32_epi16(_mm512_slli_epi32(e, 7)));
    }
    return bad == 0;
}

/* The E8M0 bytes of 16 amaxes (as 32-bit lanes) under the four rules of the reference's scale_byte:
 * integer operations on the bits, RCEIL after one correctly rounded division (the reference's). */
static inline __m512i e8m0_bytes16(__m512 a, amp_dtype elem, amp_mx_scale_mode mode) {
    const __m512i man = _mm512_set1_epi32(0x7FFFFF), top = _mm512_set1_epi32(0xFE), ff = _mm512_set1_epi32(0xFF);
    const __mmask16 nan = _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    __m512i byte;
    if (mode == AMP_MX_RCEIL) {
        const __m512i d = _mm512_castps_si512(_mm512_div_ps(a, _mm512_set1_ps(elem == AMP_F8E4M3 ? 448.0f : 57344.0f)));
        const __m512i e = _mm512_srli_epi32(d, 23), m = _mm512_and_si512(d, man);
        const __mmask16 mnz = _mm512_test_epi32_mask(d, man);
        byte = _mm512_min_epu32(_mm512_mask_add_epi32(e, mnz, e, _mm512_set1_epi32(1)), top); /* normal: e + (m != 0) */
        const __mmask16 sub = _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512());
        byte = _mm512_mask_mov_epi32(byte, sub, _mm512_maskz_mov_epi32(
                                                    _mm512_cmpgt_epu32_mask(m, _mm512_set1_epi32(0x400000)), _mm512_set1_epi32(1)));
        byte = _mm512_mask_mov_epi32(byte, _mm512_cmpeq_epi32_mask(e, ff), top); /* inf; NaN below */
    } else {
        const int emax = elem == AMP_F8E4M3 ? 8 : 15, mbits = elem == AMP_F8E4M3 ? 3 : 2;
        __m512i u = _mm512_castps_si512(a);
        if (mode == AMP_MX_EVEN)
            u = _mm512_and_si512(_mm512_add_epi32(u, _mm512_set1_epi32(1 << (22 - mbits))), _mm512_set1_epi32((int)0xFF800000u));
        __m512i e = _mm512_and_si512(_mm512_srli_epi32(u, 23), ff); /* biased: the byte is e - emax, at least 0 */
        if (mode == AMP_MX_CEIL) e = _mm512_mask_add_epi32(e, _mm512_test_epi32_mask(u, man), e, _mm512_set1_epi32(1));
        byte = _mm512_max_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(emax)), _mm512_setzero_si512());
    }
    return _mm512_mask_mov_epi32(byte, nan, ff);
}

static bool mx_scales_avx512(uint8_t *bytes, float *mult, float *factor, const float *amax, size_t n, amp_dtype elem,
                             amp_mx_scale_mode mode, float stats[3]) {
    const __m512i ff = _mm512_set1_epi32(0xFF), top = _mm512_set1_epi32(0xFE), abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
    const __m512i tiny = _mm512_set1_epi32(0x00400000), one = _mm512_set1_epi32(0x3F800000);
    __m512 smin = _mm512_set1_ps(stats[0]), smax = _mm512_set1_ps(stats[1]), amx = _mm512_set1_ps(stats[2]);
    __mmask16 any_nan = 0;
    for (size_t j = 0; j < n; j += 16) {
        const __mmask16 m = tail_mask(n - j);
        const __m512 a = _mm512_maskz_loadu_ps(m, amax + j);
        const __m512i byte = e8m0_bytes16(a, elem, mode);
        const __mmask16 nan = _mm512_cmpeq_epi32_mask(byte, ff), ok = m & (__mmask16)~nan;
        any_nan |= m & nan;
        _mm_mask_storeu_epi8(bytes + j, m, _mm512_cvtepi32_epi8(byte));
        /* 2^(127 - byte): (254 - byte) << 23, and 2^-127 (the subnormal) for byte 254 */
        const __m512 mu = _mm512_castsi512_ps(_mm512_mask_mov_epi32(_mm512_slli_epi32(_mm512_sub_epi32(top, byte), 23),
                                                                    _mm512_cmpeq_epi32_mask(byte, top), tiny));
        if (factor) { /* 2^(byte - 127), 2^-127 for byte 0, NaN for 0xFF, 1 for an amax of +-0 */
            __m512i f = _mm512_slli_epi32(byte, 23);
            f = _mm512_mask_mov_epi32(f, _mm512_cmpeq_epi32_mask(byte, _mm512_setzero_si512()), tiny);
            f = _mm512_mask_mov_epi32(f, _mm512_testn_epi32_mask(_mm512_castps_si512(a), abs_mask), one);
            f = _mm512_mask_mov_epi32(f, nan, _mm512_set1_epi32(0x7FC00000));
            _mm512_mask_storeu_ps(factor + j, m, _mm512_castsi512_ps(f));
        }
        smin = _mm512_mask_min_ps(smin, ok, mu, smin);
        smax = _mm512_mask_max_ps(smax, ok, mu, smax);
        amx = _mm512_mask_max_ps(amx, ok, a, amx);
        _mm512_mask_storeu_ps(mult + j, ok, mu); /* after the load: mult may be amax */
    }
    stats[0] = _mm512_reduce_min_ps(smin), stats[1] = _mm512_reduce_max_ps(smax), stats[2] = _mm512_reduce_max_ps(amx);
    return any_nan != 0;
}

void amp_fp8_kernels_avx512(amp_fp8_kernels *k) {
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
    k->amax = amax_avx512;
    k->block_amax = block_amax_avx512;
    k->scaled_encode[AMP_F8E4M3] = encode_e4m3;
    k->scaled_encode[AMP_F8E5M2] = encode_e5m2;
    k->encode_stats[AMP_F8E4M3] = encode_stats_e4m3;
    k->encode_stats[AMP_F8E5M2] = encode_stats_e5m2;
    k->col_amax = col_amax_avx512;
    k->factor_adds = factor_adds_avx512;
    k->mx_scales = mx_scales_avx512;
    k->decode_band_bf16 = decode_band_bf16_avx512;
    k->block_scales = block_scales_avx512;
}
