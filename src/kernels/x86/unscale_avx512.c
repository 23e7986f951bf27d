/* AVX-512 (F/BW/VL) unscale + non-finite check kernels: 16 lanes per vector, four vectors per loop
 * step for fp32 and two for the 16-bit formats; tails use masked loads and stores, so no element is
 * read or written outside the array. The result of every element is the reference's
 * (kernels/unscale_kernels.h):
 *   - the non-finite test is an integer compare of the exponent field on the stored bits, so it
 *     sees NaN payloads and signalling NaNs exactly as the scalar code does;
 *   - the multiply is VMULPS in the default MXCSR (round to nearest even, DAZ and FTZ clear), the
 *     same instruction the scalar code compiles to; with at most one NaN operand its result does
 *     not depend on the operands' order, and a NaN inv_scale (where it would) runs the scalar code;
 *   - f16 results go through VCVTPS2PH (round to nearest even, subnormals kept, a NaN's sign and
 *     top payload bits kept, as PyTorch's); bf16 results use the integer rounding of the fp32 bit
 *     pattern (VCVTNEPS2BF16 would flush subnormal inputs to zero), NaNs as PyTorch's vector loop
 *     writes them in the first n - n % AMP_UNSCALE_TORCH_STEP_16 elements and as its scalar tail
 *     writes them after.
 * When inv_scale == 1 the kernels only read, unless an f16/bf16 input is non-finite (then the array
 * is rewritten with inv_scale 1). */
#include <immintrin.h>
#include <stdint.h>

#include "../unscale_kernels.h"

static inline __mmask16 tail_mask(size_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* ---- fp32 ---- */

static inline __mmask16 f32_nonfinite(__m512 v) {
    const __m512i e = _mm512_set1_epi32(AMP_UNSCALE_F32_EXP);
    return _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v), e), e);
}

/* One vector: returns the non-finite input lanes; multiplies and stores (mask m) when `write`;
 * ORs finite-in, non-finite-out lanes into *bad_out when `check_out`. */
static inline __mmask16 f32_step(float *p, __mmask16 m, __m512 s, int write, int check_out, __mmask16 *bad_out) {
    const __m512 v = _mm512_maskz_loadu_ps(m, p);
    const __mmask16 nf = f32_nonfinite(v) & m;
    if (write) {
        const __m512 r = _mm512_mul_ps(v, s);
        _mm512_mask_storeu_ps(p, m, r);
        if (check_out) *bad_out |= f32_nonfinite(r) & (__mmask16)~nf & m;
    }
    return nf;
}

static inline void unscale_f32_impl(float *x, size_t n, float inv, int write, int check_out, unsigned *bad_in,
                                    unsigned *bad_out) {
    const __m512 s = _mm512_set1_ps(inv);
    __mmask16 in = 0, out = 0;
    size_t i = 0;
    if (!write) { /* read only: the cheapest loop, the exponent fields' maximum */
        const __m512i e = _mm512_set1_epi32(AMP_UNSCALE_F32_EXP);
        __m512i acc0 = _mm512_setzero_si512(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
        for (; i + 64 <= n; i += 64) {
            acc0 = _mm512_max_epu32(acc0, _mm512_and_si512(_mm512_loadu_si512(x + i), e));
            acc1 = _mm512_max_epu32(acc1, _mm512_and_si512(_mm512_loadu_si512(x + i + 16), e));
            acc2 = _mm512_max_epu32(acc2, _mm512_and_si512(_mm512_loadu_si512(x + i + 32), e));
            acc3 = _mm512_max_epu32(acc3, _mm512_and_si512(_mm512_loadu_si512(x + i + 48), e));
        }
        const __m512i acc = _mm512_max_epu32(_mm512_max_epu32(acc0, acc1), _mm512_max_epu32(acc2, acc3));
        in = _mm512_cmpeq_epi32_mask(acc, e);
    } else {
        for (; i + 64 <= n; i += 64) {
            in |= f32_step(x + i, 0xFFFF, s, 1, check_out, &out);
            in |= f32_step(x + i + 16, 0xFFFF, s, 1, check_out, &out);
            in |= f32_step(x + i + 32, 0xFFFF, s, 1, check_out, &out);
            in |= f32_step(x + i + 48, 0xFFFF, s, 1, check_out, &out);
        }
    }
    for (; i < n; i += 16) in |= f32_step(x + i, tail_mask(n - i), s, write, check_out, &out);
    *bad_in |= in != 0;
    *bad_out |= out != 0;
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

/* ---- fp16 and bf16: 16 elements per vector ---- */

static inline __mmask16 u16_nonfinite(__m256i h, uint16_t exp) {
    const __m256i e = _mm256_set1_epi16((short)exp);
    return _mm256_cmpeq_epi16_mask(_mm256_and_si256(h, e), e);
}

static inline __m256i f16_mul(__m256i h, __m512 s) { /* VCVTPS2PH keeps NaN payloads, as PyTorch's */
    return _mm512_cvtps_ph(_mm512_mul_ps(_mm512_cvtph_ps(h), s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/* nan: the bf16 NaN to store (a 32-bit lane per element) */
static inline __m256i bf16_mul(__m256i h, __m512 s, __m512i nan) {
    const __m512 p = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)), s);
    const __m512i x = _mm512_castps_si512(p);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb), 16);
    const __mmask16 is_nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    r = _mm512_mask_mov_epi32(r, is_nan, nan);
    return _mm512_cvtepi32_epi16(r);
}

static inline __mmask16 u16_step(uint16_t *p, __mmask16 m, __m512 s, __m512i nan, int is_bf16, int write,
                                 int check_out, __mmask16 *bad_out) {
    const uint16_t exp = is_bf16 ? AMP_UNSCALE_BF16_EXP : AMP_UNSCALE_F16_EXP;
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    const __mmask16 nf = u16_nonfinite(h, exp) & m;
    if (write) {
        const __m256i r = is_bf16 ? bf16_mul(h, s, nan) : f16_mul(h, s);
        _mm256_mask_storeu_epi16(p, m, r);
        if (check_out) *bad_out |= u16_nonfinite(r, exp) & (__mmask16)~nf & m;
    }
    return nf;
}

static inline void unscale_u16_impl(uint16_t *x, size_t n, float inv, int is_bf16, int write, int check_out,
                                    unsigned *bad_in, unsigned *bad_out) {
    const __m512 s = _mm512_set1_ps(inv);
    /* PyTorch's vector loop covers [0, nv) (a multiple of 32), its scalar tail the rest */
    const size_t nv = n - n % AMP_UNSCALE_TORCH_STEP_16;
    const __m512i nan_vec = _mm512_set1_epi32(AMP_UNSCALE_BF16_NAN_VECTOR);
    const __m512i nan_tail = _mm512_set1_epi32(AMP_UNSCALE_BF16_NAN_SCALAR);
    __mmask16 in = 0, out = 0;
    size_t i = 0;
    if (!write) { /* read only: 32 elements per 512-bit load */
        const __m512i e = _mm512_set1_epi16((short)(is_bf16 ? AMP_UNSCALE_BF16_EXP : AMP_UNSCALE_F16_EXP));
        __m512i acc0 = _mm512_setzero_si512(), acc1 = acc0;
        for (; i + 64 <= n; i += 64) {
            acc0 = _mm512_max_epu16(acc0, _mm512_and_si512(_mm512_loadu_si512(x + i), e));
            acc1 = _mm512_max_epu16(acc1, _mm512_and_si512(_mm512_loadu_si512(x + i + 32), e));
        }
        in = _mm512_cmpeq_epi16_mask(_mm512_max_epu16(acc0, acc1), e) != 0;
    } else {
        for (; i < nv; i += 32) {
            in |= u16_step(x + i, 0xFFFF, s, nan_vec, is_bf16, 1, check_out, &out);
            in |= u16_step(x + i + 16, 0xFFFF, s, nan_vec, is_bf16, 1, check_out, &out);
        }
    }
    for (; i < n; i += 16) in |= u16_step(x + i, tail_mask(n - i), s, nan_tail, is_bf16, write, check_out, &out);
    *bad_in |= in != 0;
    *bad_out |= out != 0;
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

void amp_unscale_kernels_avx512(amp_unscale_kernels *k) {
    k->unscale[AMP_F32] = unscale_f32;
    k->unscale[AMP_F16] = unscale_f16;
    k->unscale[AMP_BF16] = unscale_bf16;
}
