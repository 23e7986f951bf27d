/* AVX-512 conversion kernels (F/BW/VL; F16C semantics through the 512-bit VCVTPS2PH/VCVTPH2PS).
 *
 * Each loop processes 16 fp32 lanes per step; the tail reuses the same code with masked loads and
 * stores, so every element of an array goes through one algorithm. Bit-exactness with the reference
 * rests on three fixes around the hardware instructions:
 *   - VCVTPS2PH rounds to nearest even and produces subnormals, but keeps NaN payloads: NaN lanes are
 *     replaced by the canonical quiet NaN with the input's sign.
 *   - VCVTPH2PS quiets signalling NaNs: NaN lanes are rebuilt by integer widening (payload intact).
 *   - bf16 and fp8 encode with integer rounding on the fp32 bit pattern (not VCVTNEPS2BF16, which
 *     flushes subnormal inputs to zero), which makes ties, subnormals and overflow exact and is as
 *     fast as memory allows.
 * All kernels assume MXCSR's DAZ is clear (the default) for VCVTPH2PS/VCVTPS2PH inputs. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "../convert_kernels.h"

static inline __mmask16 tail_mask(size_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* The canonical NaN of a 16-bit format with each fp32 lane's sign: (sign << 15) | nan_bits. */
static inline __m512i canonical_nan16(__m512i x, uint32_t nan_bits) {
    return _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(x, 31), 15), _mm512_set1_epi32((int)nan_bits));
}

/* ---- fp16 ---- */

static inline __m256i f16_from_f32x16(__m512 v, int saturate) {
    if (saturate) { /* min/max return the second operand for NaN, so NaN lanes pass through */
        const __m512 max = _mm512_set1_ps(65504.0f);
        v = _mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), max), _mm512_min_ps(max, v));
    }
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    if (nan) {
        __m512i fix = canonical_nan16(_mm512_castps_si512(v), 0x7E00u);
        h = _mm256_mask_blend_epi16(nan, h, _mm512_cvtepi32_epi16(fix));
    }
    return h;
}

static inline void encode_f16_impl(void *dst, const float *src, size_t n, int saturate) {
    uint16_t *out = dst;
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(out + i), f16_from_f32x16(_mm512_loadu_ps(src + i), saturate));
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        _mm256_mask_storeu_epi16(out + i, m, f16_from_f32x16(_mm512_maskz_loadu_ps(m, src + i), saturate));
    }
}
static void encode_f16(void *dst, const float *src, size_t n) { encode_f16_impl(dst, src, n, 0); }
static void encode_f16_sat(void *dst, const float *src, size_t n) { encode_f16_impl(dst, src, n, 1); }

/* fp16 bits (zero-extended in 32-bit lanes, or packed 16 x u16) to fp32, NaN payloads kept. */
static inline __m512 f32_from_f16x16(__m256i h) {
    __m512 f = _mm512_cvtph_ps(h);
    __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    if (nan) {
        __m512i w = _mm512_cvtepu16_epi32(h);
        __m512i bits = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x8000)), 16),
                                       _mm512_or_si512(_mm512_set1_epi32(0x7F800000),
                                                       _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x3FF)), 13)));
        f = _mm512_mask_mov_ps(f, nan, _mm512_castsi512_ps(bits));
    }
    return f;
}

static void decode_f16(float *dst, const void *src, size_t n) {
    const uint16_t *in = src;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, f32_from_f16x16(_mm256_loadu_si256((const __m256i *)(in + i))));
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(dst + i, m, f32_from_f16x16(_mm256_maskz_loadu_epi16(m, in + i)));
    }
}

/* ---- bf16 ---- */

static inline __m512i bf16_from_f32x16(__m512i x, int saturate) {
    const __m512i one = _mm512_set1_epi32(1);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb), 16);
    if (saturate) { /* magnitude above the largest finite (including inf) clips to it; keep the sign */
        __m512i mag = _mm512_and_si512(r, _mm512_set1_epi32(0x7FFF));
        __mmask16 over = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7F7F));
        r = _mm512_mask_or_epi32(r, over, _mm512_and_si512(r, _mm512_set1_epi32(0x8000)), _mm512_set1_epi32(0x7F7F));
    }
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    if (nan) r = _mm512_mask_mov_epi32(r, nan, canonical_nan16(x, 0x7FC0u));
    return r;
}

static inline void encode_bf16_impl(void *dst, const float *src, size_t n, int saturate) {
    uint16_t *out = dst;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i r = bf16_from_f32x16(_mm512_loadu_si512(src + i), saturate);
        _mm256_storeu_si256((__m256i *)(out + i), _mm512_cvtepi32_epi16(r));
    }
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        __m512i r = bf16_from_f32x16(_mm512_maskz_loadu_epi32(m, src + i), saturate);
        _mm256_mask_storeu_epi16(out + i, m, _mm512_cvtepi32_epi16(r));
    }
}
static void encode_bf16(void *dst, const float *src, size_t n) { encode_bf16_impl(dst, src, n, 0); }
static void encode_bf16_sat(void *dst, const float *src, size_t n) { encode_bf16_impl(dst, src, n, 1); }

static void decode_bf16(float *dst, const void *src, size_t n) {
    const uint16_t *in = src;
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(in + i))), 16));
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_epi32(dst + i, m, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, in + i)), 16));
    }
}

/* ---- encode_stream (convert_kernels.h): the encodes above, non-temporal stores ---- */

static inline __m256i f16_encode16(__m512 v) { return f16_from_f32x16(v, 0); }
static inline __m256i bf16_encode16(__m512 v) { return _mm512_cvtepi32_epi16(bf16_from_f32x16(_mm512_castps_si512(v), 0)); }

/* up to dst's next 32-byte boundary by a masked store, then whole vectors by non-temporal stores and
 * the tail masked: each element by the same encode */
#define DEFINE_ENCODE_STREAM(name, enc16)                                                                     \
    static void name(void *dst, const float *src, size_t n) {                                                 \
        uint16_t *out = dst;                                                                                  \
        size_t i = 0;                                                                                         \
        if (((uintptr_t)out & 1) == 0 && n >= 32) {                                                           \
            i = (32 - ((uintptr_t)out & 31)) % 32 / sizeof *out;                                              \
            if (i) _mm256_mask_storeu_epi16(out, tail_mask(i), enc16(_mm512_maskz_loadu_ps(tail_mask(i), src))); \
            for (; i + 16 <= n; i += 16)                                                                      \
                _mm256_stream_si256((__m256i *)(void *)(out + i), enc16(_mm512_loadu_ps(src + i)));           \
        }                                                                                                     \
        for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i *)(void *)(out + i), enc16(_mm512_loadu_ps(src + i))); \
        if (i < n) {                                                                                          \
            const __mmask16 m = tail_mask(n - i);                                                             \
            _mm256_mask_storeu_epi16(out + i, m, enc16(_mm512_maskz_loadu_ps(m, src + i)));                   \
        }                                                                                                     \
    }
DEFINE_ENCODE_STREAM(encode_f16_stream, f16_encode16)
DEFINE_ENCODE_STREAM(encode_bf16_stream, bf16_encode16)

/* ---- acc_rounded: encode, decode and the fp32 add per vector (convert_kernels.h) ---- */

/* acc + v, or 0 + v for store: the reference's adds (core/accumulate.h), per element the same */
static inline __m512 acc_add(__mmask16 m, const float *acc, __m512 v, bool store) {
    return _mm512_add_ps(store ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, acc), v);
}

static inline __m512 f32_rounded_bf16(__m512 v) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(bf16_from_f32x16(_mm512_castps_si512(v), 0), 16));
}

static inline __m512 f32_rounded_f16(__m512 v) { return f32_from_f16x16(f16_from_f32x16(v, 0)); }

/* |x|'s bits raised into m: absmax_bits's comparison, lane by lane */
static inline __m512i max_abs_bits(__m512i m, __m512 x) {
    return _mm512_max_epu32(m, _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7FFFFFFF)));
}

/* AMP_ACC_STREAM: the elements up to acc's next 64-byte boundary by a masked store, whole lines by
 * non-temporal stores (unfenced: convert_kernels.h), the rest as AMP_ACC_STORE; each element's arithmetic is the
 * same either way. Lanes a mask leaves out are +0 in the maximum. */
#define DEFINE_ACC_ROUNDED(name, round)                                                                  \
    static uint32_t name(float *acc, const float *v, size_t n, amp_acc_mode mode) {                     \
        const bool store = mode != AMP_ACC_ADD;                                                          \
        __m512i mx = _mm512_setzero_si512();                                                             \
        size_t i = 0;                                                                                    \
        if (mode == AMP_ACC_STREAM && n >= 32) {                                                         \
            const size_t head = (64 - ((uintptr_t)acc & 63)) % 64 / sizeof(float);                      \
            if (head) {                                                                                  \
                const __mmask16 m = tail_mask(head);                                                     \
                const __m512 r = _mm512_maskz_mov_ps(m, acc_add(m, acc, round(_mm512_maskz_loadu_ps(m, v)), true)); \
                _mm512_mask_storeu_ps(acc, m, r);                                                        \
                mx = max_abs_bits(mx, r);                                                                \
            }                                                                                            \
            for (i = head; i + 16 <= n; i += 16) {                                                       \
                const __m512 r = acc_add(0xFFFF, acc + i, round(_mm512_loadu_ps(v + i)), true);          \
                _mm512_stream_ps(acc + i, r);                                                            \
                mx = max_abs_bits(mx, r);                                                                \
            }                                                                                            \
        }                                                                                                \
        for (; i + 16 <= n; i += 16) {                                                                   \
            const __m512 r = acc_add(0xFFFF, acc + i, round(_mm512_loadu_ps(v + i)), store);             \
            _mm512_storeu_ps(acc + i, r);                                                                \
            mx = max_abs_bits(mx, r);                                                                    \
        }                                                                                                \
        if (i < n) {                                                                                     \
            const __mmask16 m = tail_mask(n - i);                                                        \
            const __m512 r = _mm512_maskz_mov_ps(m, acc_add(m, acc + i, round(_mm512_maskz_loadu_ps(m, v + i)), store)); \
            _mm512_mask_storeu_ps(acc + i, m, r);                                                        \
            mx = max_abs_bits(mx, r);                                                                    \
        }                                                                                                \
        return (uint32_t)_mm512_reduce_max_epu32(mx);                                                    \
    }
DEFINE_ACC_ROUNDED(acc_rounded_bf16, f32_rounded_bf16)
DEFINE_ACC_ROUNDED(acc_rounded_f16, f32_rounded_f16)

/* ---- fp8: the reference's parametric integer rounding, 16 lanes at a time ---- */

typedef struct {
    unsigned E, M;
    int B;
    uint32_t max_finite, overflow_bits, nan_bits; /* overflow_bits: inf, NaN (e4m3fn) or max (saturating) */
} fp8_format;

static inline __m128i fp8_from_f32x16(__m512i x, const fp8_format *fmt) {
    const __m512i a = _mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF));
    /* Target's biased exponent if normal there; >= 1 selects the normal path. */
    const __m512i e = _mm512_add_epi32(_mm512_srli_epi32(a, 23), _mm512_set1_epi32(fmt->B - 127));
    const __mmask16 normal = _mm512_cmpgt_epi32_mask(e, _mm512_setzero_si512());
    /* Normal: rebias and drop 23-M bits. Subnormal: implicit bit made explicit, shift by 1-e more. */
    const __m512i rebiased = _mm512_sub_epi32(a, _mm512_set1_epi32((int)((uint32_t)(127 - fmt->B) << 23)));
    const __m512i implicit = _mm512_maskz_mov_epi32(_mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x007FFFFF)),
                                                    _mm512_set1_epi32(0x00800000));
    const __m512i sig = _mm512_or_si512(_mm512_and_si512(a, _mm512_set1_epi32(0x007FFFFF)), implicit);
    __m512i s_sub = _mm512_sub_epi32(_mm512_set1_epi32((int)(23 - fmt->M + 1)), e);
    s_sub = _mm512_min_epu32(s_sub, _mm512_set1_epi32(25));
    const __m512i v = _mm512_mask_mov_epi32(sig, normal, rebiased);
    const __m512i s = _mm512_mask_mov_epi32(s_sub, normal, _mm512_set1_epi32((int)(23 - fmt->M)));
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i half_minus_one = _mm512_sub_epi32(_mm512_sllv_epi32(one, _mm512_sub_epi32(s, one)), one);
    const __m512i lsb = _mm512_and_si512(_mm512_srlv_epi32(v, s), one);
    __m512i out = _mm512_srlv_epi32(_mm512_add_epi32(_mm512_add_epi32(v, half_minus_one), lsb), s);
    /* Overflow (including inf, whose exponent lands far above the range). */
    out = _mm512_mask_mov_epi32(out, _mm512_cmpgt_epu32_mask(out, _mm512_set1_epi32((int)fmt->max_finite)),
                                _mm512_set1_epi32((int)fmt->overflow_bits));
    out = _mm512_mask_mov_epi32(out, _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7F800000)),
                                _mm512_set1_epi32((int)fmt->nan_bits));
    const __m512i sign = _mm512_slli_epi32(_mm512_srli_epi32(x, 31), (unsigned)(fmt->E + fmt->M));
    return _mm512_cvtepi32_epi8(_mm512_or_si512(out, sign));
}

static inline void encode_fp8_impl(void *dst, const float *src, size_t n, const fp8_format *fmt) {
    uint8_t *out = dst;
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm_storeu_si128((__m128i *)(out + i), fp8_from_f32x16(_mm512_loadu_si512(src + i), fmt));
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        _mm_mask_storeu_epi8(out + i, m, fp8_from_f32x16(_mm512_maskz_loadu_epi32(m, src + i), fmt));
    }
}

static const fp8_format e4m3 = {4, 3, 7, 0x7E, 0x7F, 0x7F}, e4m3_sat = {4, 3, 7, 0x7E, 0x7E, 0x7F};
static const fp8_format e5m2 = {5, 2, 15, 0x7B, 0x7C, 0x7E}, e5m2_sat = {5, 2, 15, 0x7B, 0x7B, 0x7E};
static void encode_e4m3(void *dst, const float *src, size_t n) { encode_fp8_impl(dst, src, n, &e4m3); }
static void encode_e4m3_sat(void *dst, const float *src, size_t n) { encode_fp8_impl(dst, src, n, &e4m3_sat); }
static void encode_e5m2(void *dst, const float *src, size_t n) { encode_fp8_impl(dst, src, n, &e5m2); }
static void encode_e5m2_sat(void *dst, const float *src, size_t n) { encode_fp8_impl(dst, src, n, &e5m2_sat); }

/* e5m2 is the top byte of an fp16; e4m3's value is 2^8 times the fp16 whose bits are (b & 0x7F) << 7
 * (its 4-bit exponent fits the fp16 exponent field, subnormals included), so both decode through
 * VCVTPH2PS exactly. */
static inline __m512 f32_from_e5m2x16(__m128i b) {
    return f32_from_f16x16(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8));
}

static inline __m512 f32_from_e4m3x16(__m128i b) {
    const __m256i w = _mm256_cvtepu8_epi16(b);
    const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7F));
    __m512 f = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_slli_epi16(mag, 7)), _mm512_set1_ps(256.0f));
    const __m512i w32 = _mm512_cvtepu16_epi32(w);
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(w32, _mm512_set1_epi32(0x80)), 24);
    f = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(f), sign));
    const __mmask16 nan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(w32, _mm512_set1_epi32(0x7F)), _mm512_set1_epi32(0x7F));
    return _mm512_mask_mov_ps(f, nan, _mm512_castsi512_ps(_mm512_or_si512(sign, _mm512_set1_epi32(0x7FC00000))));
}

#define DEFINE_FP8_DECODE(name, fn)                                                          \
    static void name(float *dst, const void *src, size_t n) {                                \
        const uint8_t *in = src;                                                             \
        size_t i = 0;                                                                        \
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, fn(_mm_loadu_si128((const __m128i *)(in + i)))); \
        if (i < n) {                                                                         \
            __mmask16 m = tail_mask(n - i);                                                  \
            _mm512_mask_storeu_ps(dst + i, m, fn(_mm_maskz_loadu_epi8(m, in + i)));          \
        }                                                                                    \
    }
DEFINE_FP8_DECODE(decode_e5m2, f32_from_e5m2x16)
DEFINE_FP8_DECODE(decode_e4m3, f32_from_e4m3x16)

/* SFENCE: the streamed stores before this thread's later stores (convert_kernels.h) */
static void stream_fence_avx512(void) { _mm_sfence(); }

void amp_convert_kernels_avx512(amp_convert_kernels *k) {
    k->stream_fence = stream_fence_avx512;
    k->encode_stream[AMP_F16] = encode_f16_stream;
    k->encode_stream[AMP_BF16] = encode_bf16_stream;
    k->encode[AMP_F16][0] = encode_f16;
    k->encode[AMP_F16][1] = encode_f16_sat;
    k->decode[AMP_F16] = decode_f16;
    k->encode[AMP_BF16][0] = encode_bf16;
    k->encode[AMP_BF16][1] = encode_bf16_sat;
    k->decode[AMP_BF16] = decode_bf16;
    k->acc_rounded[AMP_F16] = acc_rounded_f16;
    k->acc_rounded[AMP_BF16] = acc_rounded_bf16;
    k->encode[AMP_F8E4M3][0] = encode_e4m3;
    k->encode[AMP_F8E4M3][1] = encode_e4m3_sat;
    k->decode[AMP_F8E4M3] = decode_e4m3;
    k->encode[AMP_F8E5M2][0] = encode_e5m2;
    k->encode[AMP_F8E5M2][1] = encode_e5m2_sat;
    k->decode[AMP_F8E5M2] = decode_e5m2;
}
