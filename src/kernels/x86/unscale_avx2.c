/* AVX2 + F16C unscale + non-finite check kernels: 8 lanes per vector, four vectors per fp32 loop step;
 * tails (fewer than 8 elements) and a NaN inv_scale run the reference's scalar algorithm
 * (kernels/unscale_kernels.h), so every element gets the same bits. The bit-exactness arguments are
 * those of unscale_avx512.c: exponent-field compares on the stored bits, VMULPS in the default MXCSR
 * (one NaN operand at most, so the operands' order does not matter), VCVTPS2PH for f16, integer
 * rounding for bf16 with NaNs as PyTorch's vector loop writes them in the first
 * n - n % AMP_UNSCALE_TORCH_STEP_16 elements and as its scalar tail writes them after. When
 * inv_scale == 1 the kernels only read, unless an f16/bf16 input is non-finite (then the array is
 * rewritten with inv_scale 1). */
#include <immintrin.h>
#include <stdint.h>

#include "../unscale_kernels.h"

/* ---- fp32 ---- */

static inline __m256i f32_exp_ones(__m256 v) { /* all-ones lanes where v is inf or NaN */
    const __m256i e = _mm256_set1_epi32(AMP_UNSCALE_F32_EXP);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), e), e);
}

/* One vector at p: ORs non-finite input lanes into *in; multiplies and stores; ORs finite-in,
 * non-finite-out lanes into *out when check_out. */
static inline void f32_step(float *p, __m256 s, int check_out, __m256i *in, __m256i *out) {
    const __m256 v = _mm256_loadu_ps(p);
    const __m256i nf = f32_exp_ones(v);
    *in = _mm256_or_si256(*in, nf);
    const __m256 r = _mm256_mul_ps(v, s);
    _mm256_storeu_ps(p, r);
    if (check_out) *out = _mm256_or_si256(*out, _mm256_andnot_si256(nf, f32_exp_ones(r)));
}

static inline void unscale_f32_impl(float *x, size_t n, float inv, int write, int check_out, unsigned *bad_in,
                                    unsigned *bad_out) {
    const __m256 s = _mm256_set1_ps(inv);
    __m256i in = _mm256_setzero_si256(), out = in;
    size_t i = 0;
    if (!write) { /* read only: the exponent fields' maximum */
        const __m256i e = _mm256_set1_epi32(AMP_UNSCALE_F32_EXP);
        __m256i acc0 = _mm256_setzero_si256(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
        for (; i + 32 <= n; i += 32) {
            acc0 = _mm256_max_epu32(acc0, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), e));
            acc1 = _mm256_max_epu32(acc1, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i + 8)), e));
            acc2 = _mm256_max_epu32(acc2, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i + 16)), e));
            acc3 = _mm256_max_epu32(acc3, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i + 24)), e));
        }
        const __m256i acc = _mm256_max_epu32(_mm256_max_epu32(acc0, acc1), _mm256_max_epu32(acc2, acc3));
        in = _mm256_cmpeq_epi32(acc, e);
        for (; i + 8 <= n; i += 8) in = _mm256_or_si256(in, f32_exp_ones(_mm256_loadu_ps(x + i)));
    } else {
        for (; i + 32 <= n; i += 32) {
            f32_step(x + i, s, check_out, &in, &out);
            f32_step(x + i + 8, s, check_out, &in, &out);
            f32_step(x + i + 16, s, check_out, &in, &out);
            f32_step(x + i + 24, s, check_out, &in, &out);
        }
        for (; i + 8 <= n; i += 8) f32_step(x + i, s, check_out, &in, &out);
    }
    *bad_in |= !_mm256_testz_si256(in, in);
    *bad_out |= !_mm256_testz_si256(out, out);
    amp_unscale_f32_scalar(x, i, n, inv, write, bad_in, bad_out);
}

static void unscale_f32(void *grads, size_t n, float inv_scale, float *found_inf, float *found_after) {
    unsigned bad_in = 0, bad_out = 0;
    if (inv_scale != inv_scale) /* NaN: which NaN a product keeps depends on the index */
        amp_unscale_f32_scalar(grads, 0, n, inv_scale, 1, &bad_in, &bad_out);
    else if (inv_scale == 1.0f)
        unscale_f32_impl(grads, n, inv_scale, 0, 0, &bad_in, &bad_out);
    else if (found_after)
        unscale_f32_impl(grads, n, inv_scale, 1, 1, &bad_in, &bad_out);
    else
        unscale_f32_impl(grads, n, inv_scale, 1, 0, &bad_in, &bad_out);
    amp_unscale_publish(bad_in, bad_out, found_inf, found_after);
}

/* ---- fp16 and bf16: 8 elements per 128-bit vector ---- */

static inline __m128i u16_exp_ones(__m128i h, uint16_t exp) {
    const __m128i e = _mm_set1_epi16((short)exp);
    return _mm_cmpeq_epi16(_mm_and_si128(h, e), e);
}

/* Packs eight 32-bit lanes holding values <= 0xFFFF into eight u16, in order. */
static inline __m128i pack_u32_to_u16(__m256i r) {
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

static inline __m128i f16_mul(__m128i h, __m256 s) { /* VCVTPS2PH keeps NaN payloads, as PyTorch's */
    return _mm256_cvtps_ph(_mm256_mul_ps(_mm256_cvtph_ps(h), s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/* nan: the bf16 NaN to store (a 32-bit lane per element) */
static inline __m128i bf16_mul(__m128i h, __m256 s, __m256i nan) {
    const __m256 p = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)), s);
    const __m256i x = _mm256_castps_si256(p);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    /* NaN: |x| > 0x7F800000 as signed compare is safe since |x| < 2^31 */
    const __m256i is_nan =
        _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
    r = _mm256_blendv_epi8(r, nan, is_nan);
    return pack_u32_to_u16(r);
}

static inline void u16_step(uint16_t *p, __m256 s, __m256i nan, int is_bf16, int check_out, __m128i *in,
                            __m128i *out) {
    const uint16_t exp = is_bf16 ? AMP_UNSCALE_BF16_EXP : AMP_UNSCALE_F16_EXP;
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    const __m128i nf = u16_exp_ones(h, exp);
    *in = _mm_or_si128(*in, nf);
    const __m128i r = is_bf16 ? bf16_mul(h, s, nan) : f16_mul(h, s);
    _mm_storeu_si128((__m128i *)p, r);
    if (check_out) *out = _mm_or_si128(*out, _mm_andnot_si128(nf, u16_exp_ones(r, exp)));
}

static inline void unscale_u16_impl(uint16_t *x, size_t n, float inv, int is_bf16, int write, int check_out,
                                    unsigned *bad_in, unsigned *bad_out) {
    const uint16_t exp = is_bf16 ? AMP_UNSCALE_BF16_EXP : AMP_UNSCALE_F16_EXP;
    const __m256 s = _mm256_set1_ps(inv);
    __m128i in = _mm_setzero_si128(), out = in;
    size_t i = 0;
    if (!write) { /* read only: 16 elements per 256-bit load */
        const __m256i e = _mm256_set1_epi16((short)exp);
        __m256i acc0 = _mm256_setzero_si256(), acc1 = acc0;
        for (; i + 32 <= n; i += 32) {
            acc0 = _mm256_max_epu16(acc0, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), e));
            acc1 = _mm256_max_epu16(acc1, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i + 16)), e));
        }
        const __m256i acc = _mm256_cmpeq_epi16(_mm256_max_epu16(acc0, acc1), e);
        *bad_in |= !_mm256_testz_si256(acc, acc);
        for (; i + 8 <= n; i += 8) in = _mm_or_si128(in, u16_exp_ones(_mm_loadu_si128((const __m128i *)(x + i)), exp));
    } else {
        /* PyTorch's vector loop covers [0, nv) (a multiple of 32), its scalar tail the rest */
        const size_t nv = n - n % AMP_UNSCALE_TORCH_STEP_16;
        const __m256i nan_vec = _mm256_set1_epi32(AMP_UNSCALE_BF16_NAN_VECTOR);
        const __m256i nan_tail = _mm256_set1_epi32(AMP_UNSCALE_BF16_NAN_SCALAR);
        for (; i < nv; i += 16) {
            u16_step(x + i, s, nan_vec, is_bf16, check_out, &in, &out);
            u16_step(x + i + 8, s, nan_vec, is_bf16, check_out, &in, &out);
        }
        for (; i + 8 <= n; i += 8) u16_step(x + i, s, nan_tail, is_bf16, check_out, &in, &out);
    }
    *bad_in |= !_mm_testz_si128(in, in);
    *bad_out |= !_mm_testz_si128(out, out);
    if (is_bf16)
        amp_unscale_bf16_scalar(x, i, n, inv, write, bad_in, bad_out);
    else
        amp_unscale_f16_scalar(x, i, n, inv, write, bad_in, bad_out);
}

/* inv_scale == 1: read; a non-finite input means NaNs to re-encode, so the array is rewritten with
 * inv_scale 1 (exact for every other value). */
#define DEFINE_U16(name, is_bf16)                                                                   \
    static void name(void *grads, size_t n, float inv_scale, float *found_inf, float *found_after) { \
        unsigned bad_in = 0, bad_out = 0;                                                           \
        if (inv_scale != inv_scale) {                                                               \
            amp_unscale_u16_scalar(grads, n, inv_scale, is_bf16, &bad_in, &bad_out);                    \
        } else if (inv_scale == 1.0f) {                                                             \
            unscale_u16_impl(grads, n, inv_scale, is_bf16, 0, 0, &bad_in, &bad_out);                \
            if (bad_in) unscale_u16_impl(grads, n, inv_scale, is_bf16, 1, 0, &bad_in, &bad_out);    \
        } else if (found_after) {                                                                   \
            unscale_u16_impl(grads, n, inv_scale, is_bf16, 1, 1, &bad_in, &bad_out);                \
        } else {                                                                                    \
            unscale_u16_impl(grads, n, inv_scale, is_bf16, 1, 0, &bad_in, &bad_out);                \
        }                                                                                           \
        amp_unscale_publish(bad_in, bad_out, found_inf, found_after);                               \
    }
DEFINE_U16(unscale_f16, 0)
DEFINE_U16(unscale_bf16, 1)

void amp_unscale_kernels_avx2(amp_unscale_kernels *k) {
    k->unscale[AMP_F32] = unscale_f32;
    k->unscale[AMP_F16] = unscale_f16;
    k->unscale[AMP_BF16] = unscale_bf16;
}
