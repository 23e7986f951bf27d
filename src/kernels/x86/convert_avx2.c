/* AVX2 + F16C conversion kernels, 8 fp32 lanes per step; tails (fewer than 8 elements) run the
 * reference's scalar algorithm (core/float_bits.h), so every element gets the same bits.
 * The NaN and rounding fixes are those of convert_avx512.c, which explains them; MXCSR's DAZ is
 * assumed clear (the default). */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "../../core/float_bits.h"
#include "../convert_kernels.h"
#include "bf16_avx2.h"

/* ---- fp16 ---- */

static inline __m128i f16_from_f32x8(__m256 v, int saturate) {
    if (saturate) { /* min/max return the second operand for NaN, so NaN lanes pass through */
        const __m256 max = _mm256_set1_ps(65504.0f);
        v = _mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), max), _mm256_min_ps(max, v));
    }
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    if (_mm256_movemask_ps(nan)) {
        __m128i fix = pack_u32_to_u16(canonical_nan16(_mm256_castps_si256(v), 0x7E00u));
        __m128i mask16 = _mm_packs_epi32(_mm256_castsi256_si128(_mm256_castps_si256(nan)),
                                         _mm256_extracti128_si256(_mm256_castps_si256(nan), 1));
        h = _mm_blendv_epi8(h, fix, mask16);
    }
    return h;
}

static inline void encode_f16_impl(void *dst, const float *src, size_t n, int saturate) {
    uint16_t *out = dst;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm_storeu_si128((__m128i *)(out + i), f16_from_f32x8(_mm256_loadu_ps(src + i), saturate));
    for (; i < n; i++) out[i] = amp_f16_encode(amp_f32_bits(src[i]), saturate ? AMP_OVERFLOW_SATURATE : AMP_OVERFLOW_INF);
}
static void encode_f16(void *dst, const float *src, size_t n) { encode_f16_impl(dst, src, n, 0); }
static void encode_f16_sat(void *dst, const float *src, size_t n) { encode_f16_impl(dst, src, n, 1); }

static void decode_f16(float *dst, const void *src, size_t n) {
    const uint16_t *in = src;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(in + i));
        __m256 f = _mm256_cvtph_ps(h);
        __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
        if (_mm256_movemask_ps(nan)) { /* rebuild NaNs by widening: VCVTPH2PS would quiet them */
            __m256i w = _mm256_cvtepu16_epi32(h);
            __m256i bits = _mm256_or_si256(
                _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x8000)), 16),
                _mm256_or_si256(_mm256_set1_epi32(0x7F800000), _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x3FF)), 13)));
            f = _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), nan);
        }
        _mm256_storeu_ps(dst + i, f);
    }
    for (; i < n; i++) dst[i] = amp_f32_from_bits(amp_f16_decode(in[i]));
}

/* ---- bf16 ---- */

static inline void encode_bf16_impl(void *dst, const float *src, size_t n, int saturate) {
    uint16_t *out = dst;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i lo = bf16_from_f32x8(_mm256_loadu_si256((const __m256i *)(src + i)), saturate);
        __m256i hi = bf16_from_f32x8(_mm256_loadu_si256((const __m256i *)(src + i + 8)), saturate);
        /* packus interleaves 128-bit lanes; the permute restores element order */
        _mm256_storeu_si256((__m256i *)(out + i), _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8));
    }
    for (; i < n; i++) out[i] = amp_bf16_encode(amp_f32_bits(src[i]), saturate ? AMP_OVERFLOW_SATURATE : AMP_OVERFLOW_INF);
}
static void encode_bf16(void *dst, const float *src, size_t n) { encode_bf16_impl(dst, src, n, 0); }
static void encode_bf16_sat(void *dst, const float *src, size_t n) { encode_bf16_impl(dst, src, n, 1); }

static void decode_bf16(float *dst, const void *src, size_t n) {
    const uint16_t *in = src;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(in + i))), 16));
    for (; i < n; i++) dst[i] = amp_f32_from_bits(amp_bf16_decode(in[i]));
}

/* ---- encode_stream (convert_kernels.h): the encodes above, non-temporal stores ---- */

/* up to dst's next 32-byte boundary by the scalar algorithm, then 16 elements at a time by
 * non-temporal stores (fp16: two of 16 bytes), the rest by the plain loop: each element
 * by the same encode */
#define DEFINE_ENCODE_STREAM(name, scalar, vec16, plain)                                                      \
    static void name(void *dst, const float *src, size_t n) {                                                 \
        uint16_t *out = dst;                                                                                  \
        size_t i = 0;                                                                                         \
        if (((uintptr_t)out & 1) == 0 && n >= 32) {                                                           \
            for (; ((uintptr_t)(out + i) & 31) != 0; i++) out[i] = scalar(amp_f32_bits(src[i]), AMP_OVERFLOW_INF); \
            for (; i + 16 <= n; i += 16) vec16(out + i, src + i);                                             \
        }                                                                                                     \
        plain(out + i, src + i, n - i, 0);                                                                    \
    }
static inline void bf16_stream16(uint16_t *out, const float *src) {
    __m256i lo = bf16_from_f32x8(_mm256_loadu_si256((const __m256i *)(const void *)src), 0);
    __m256i hi = bf16_from_f32x8(_mm256_loadu_si256((const __m256i *)(const void *)(src + 8)), 0);
    _mm256_stream_si256((__m256i *)(void *)out, _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8));
}
static inline void f16_stream16(uint16_t *out, const float *src) {
    _mm_stream_si128((__m128i *)(void *)out, f16_from_f32x8(_mm256_loadu_ps(src), 0));
    _mm_stream_si128((__m128i *)(void *)(out + 8), f16_from_f32x8(_mm256_loadu_ps(src + 8), 0));
}
DEFINE_ENCODE_STREAM(encode_f16_stream, amp_f16_encode, f16_stream16, encode_f16_impl)
DEFINE_ENCODE_STREAM(encode_bf16_stream, amp_bf16_encode, bf16_stream16, encode_bf16_impl)

/* ---- acc_rounded: encode, decode and the fp32 add per vector (convert_kernels.h) ---- */

static inline __m256 f32_rounded_bf16(__m256 v) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(bf16_from_f32x8(_mm256_castps_si256(v), 0), 16));
}

/* VCVTPH2PS quiets a NaN, which acc_rounded leaves unspecified: NaN in, NaN out */
static inline __m256 f32_rounded_f16(__m256 v) { return _mm256_cvtph_ps(f16_from_f32x8(v, 0)); }

/* the tail element by the reference's algorithm */
static inline float rounded_bf16_at(float v) {
    return amp_f32_from_bits(amp_bf16_decode(amp_bf16_encode(amp_f32_bits(v), AMP_OVERFLOW_INF)));
}
static inline float rounded_f16_at(float v) {
    return amp_f32_from_bits(amp_f16_decode(amp_f16_encode(amp_f32_bits(v), AMP_OVERFLOW_INF)));
}

/* |x|'s bits raised into m: absmax_bits's comparison, lane by lane */
static inline __m256i max_abs_bits(__m256i m, __m256 x) {
    return _mm256_max_epu32(m, _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7FFFFFFF)));
}

static inline uint32_t max_abs_bit1(uint32_t m, float x) {
    const uint32_t b = amp_f32_bits(x) & 0x7FFFFFFFu;
    return b > m ? b : m;
}

static inline uint32_t fold_max(__m256i m) {
    __m128i h = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0x4E));
    h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0xB1));
    return (uint32_t)_mm_cvtsi128_si32(h);
}

/* AMP_ACC_STREAM: the elements up to acc's next 32-byte boundary by the scalar algorithm, then
 * aligned vectors by non-temporal stores, the rest as AMP_ACC_STORE; each element's
 * arithmetic is the same either way */
#define DEFINE_ACC_ROUNDED(name, round, round_at)                                                        \
    static uint32_t name(float *acc, const float *v, size_t n, amp_acc_mode mode) {                     \
        const bool store = mode != AMP_ACC_ADD;                                                          \
        __m256i mx = _mm256_setzero_si256();                                                             \
        uint32_t m1 = 0;                                                                                 \
        size_t i = 0;                                                                                    \
        if (mode == AMP_ACC_STREAM && n >= 16) {                                                         \
            for (; ((uintptr_t)(acc + i) & 31) != 0; i++) m1 = max_abs_bit1(m1, acc[i] = 0.0f + round_at(v[i])); \
            for (; i + 8 <= n; i += 8) {                                                                 \
                const __m256 r = _mm256_add_ps(_mm256_setzero_ps(), round(_mm256_loadu_ps(v + i)));      \
                _mm256_stream_ps(acc + i, r);                                                            \
                mx = max_abs_bits(mx, r);                                                                \
            }                                                                                            \
        }                                                                                                \
        for (; i + 8 <= n; i += 8) {                                                                     \
            const __m256 a = store ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + i);                     \
            const __m256 r = _mm256_add_ps(a, round(_mm256_loadu_ps(v + i)));                            \
            _mm256_storeu_ps(acc + i, r);                                                                \
            mx = max_abs_bits(mx, r);                                                                    \
        }                                                                                                \
        for (; i < n; i++) m1 = max_abs_bit1(m1, acc[i] = (store ? 0.0f : acc[i]) + round_at(v[i]));     \
        const uint32_t mv = fold_max(mx);                                                                \
        return mv > m1 ? mv : m1;                                                                        \
    }
DEFINE_ACC_ROUNDED(acc_rounded_bf16, f32_rounded_bf16, rounded_bf16_at)
DEFINE_ACC_ROUNDED(acc_rounded_f16, f32_rounded_f16, rounded_f16_at)

/* SFENCE: the streamed stores before this thread's later stores (convert_kernels.h) */
static void stream_fence_avx2(void) { _mm_sfence(); }

void amp_convert_kernels_avx2(amp_convert_kernels *k) {
    k->stream_fence = stream_fence_avx2;
    k->encode_stream[AMP_F16] = encode_f16_stream;
    k->encode_stream[AMP_BF16] = encode_bf16_stream;
    k->acc_rounded[AMP_F16] = acc_rounded_f16;
    k->acc_rounded[AMP_BF16] = acc_rounded_bf16;
    k->encode[AMP_F16][0] = encode_f16;
    k->encode[AMP_F16][1] = encode_f16_sat;
    k->decode[AMP_F16] = decode_f16;
    k->encode[AMP_BF16][0] = encode_bf16;
    k->encode[AMP_BF16][1] = encode_bf16_sat;
    k->decode[AMP_BF16] = decode_bf16;
}
