/* Internal: the AVX-512 exp, tanh and sigmoid of vecmath_avx512.c (the algorithm is described at the top
 * of that file) as inline functions of one vector, so a fused kernel of another file (lstm_avx512.c)
 * computes each element with exactly the instructions of the vecmath table's maps: the same bits.
 * Include only from files compiled for AVX-512. */
#ifndef AMP_VECMATH_AVX512_H
#define AMP_VECMATH_AVX512_H

#include <immintrin.h>

#include "../vecmath_coeffs.h"

static inline __m512 set1(float v) { return _mm512_set1_ps(v); }

/* e^r - 1 for |r| <= ln2/2 */
static inline __m512 expm1_reduced(__m512 r) {
    __m512 p = _mm512_fmadd_ps(set1(P5), r, set1(P4));
    p = _mm512_fmadd_ps(p, r, set1(P3));
    p = _mm512_fmadd_ps(p, r, set1(P2));
    p = _mm512_fmadd_ps(p, r, set1(P1));
    p = _mm512_fmadd_ps(p, r, set1(P0));
    return _mm512_fmadd_ps(_mm512_mul_ps(r, r), p, r);
}

/* x = n ln2 + r; returns r and stores n (an integer-valued float) */
static inline __m512 reduce(__m512 x, __m512 *n) {
    *n = _mm512_roundscale_ps(_mm512_mul_ps(x, set1(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_fnmadd_ps(*n, set1(LN2_HI), x);
    return _mm512_fnmadd_ps(*n, set1(LN2_LO), r);
}

/* e^x for x in [EXP_LO, EXP_HI] or NaN */
static inline __m512 exp_core(__m512 x) {
    __m512 n;
    const __m512 r = reduce(x, &n);
    return _mm512_scalef_ps(_mm512_add_ps(expm1_reduced(r), set1(1.0f)), n);
}

static inline __m512 exp_v(__m512 x) {
    return exp_core(_mm512_min_ps(set1(EXP_HI), _mm512_max_ps(set1(EXP_LO), x)));
}

static inline __m512 tanh_v(__m512 x) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    const __m512 a = _mm512_min_ps(set1(TANH_SAT), _mm512_andnot_ps(sign, x));
    __m512 n;
    const __m512 q = expm1_reduced(reduce(_mm512_add_ps(a, a), &n));
    const __m512 p2 = _mm512_scalef_ps(set1(1.0f), n);                       /* 2^n, n in [0, 29] */
    const __m512 e = _mm512_fmadd_ps(q, p2, _mm512_sub_ps(p2, set1(1.0f))); /* e^(2|x|) - 1 */
    const __m512 t = _mm512_div_ps(e, _mm512_add_ps(e, set1(2.0f)));
    return _mm512_or_ps(t, _mm512_and_ps(sign, x));
}

static inline __m512 sigmoid_v(__m512 x) {
    const __m512 na = _mm512_or_ps(x, _mm512_set1_ps(-0.0f)); /* -|x| */
    const __m512 e = exp_core(_mm512_max_ps(set1(EXP_LO), na));
    const __mmask16 nonneg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
    const __m512 num = _mm512_mask_blend_ps(nonneg, e, set1(1.0f));
    return _mm512_div_ps(num, _mm512_add_ps(e, set1(1.0f)));
}

#endif
