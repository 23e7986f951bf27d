/* AVX-512 elementwise math kernels (kernels/vecmath.h): 16 lanes per vector, tails under a mask with
 * the same vector code, so every element's result depends only on its value.
 *
 * All of them rest on one exp core: x = n ln2 + r with n = round(x log2 e) and |r| <= ln2/2 (Cody-Waite
 * with a 15-bit ln2_hi, so n ln2_hi is exact for |n| < 2^9 and the subtraction is exact), then
 * e^r - 1 = r + r^2 P(r), P a degree-5 polynomial (vecmath_coeffs.h; relative error 2.7e-9 on
 * [-ln2/2, ln2/2], ~1/20 ulp), and e^x = (1 + (e^r - 1)) 2^n by VSCALEFPS, which rounds once even
 * when the result is subnormal and overflows to +inf: no hand-made two-step scaling.
 *   tanh |x| = E/(E + 2) with E = e^(2|x|) - 1 = 2^n (e^r - 1) + (2^n - 1), no cancellation near 0
 *     (tanh x = x for tiny x, -0 kept through the sign), saturating to exactly 1 from |x| = 10;
 *   sigmoid x = (x >= 0 ? 1 : e)/(1 + e) with e = e^-|x| <= 1, which never overflows;
 * Clamping before the core uses MINPS/MAXPS with the constant first: they return their second operand
 * when either is NaN, so a NaN input reaches the arithmetic and comes out NaN. */
#include <immintrin.h>
#include <stdint.h>

#include "../vecmath.h"
#include "../vecmath_coeffs.h"
#include "vecmath_avx512.h"

/* ---- erfc (algorithm and fits: vecmath_coeffs.h) ---- */

/* coefficient j of each lane's interval */
static inline __m512 coef(__m512i idx, int j) { return _mm512_permutexvar_ps(idx, _mm512_loadu_ps(erfc_poly[j])); }

static inline __m512 erfc_v(__m512 x) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    const __m512 a = _mm512_andnot_ps(sign, x);
    /* small */
    const __m512 s = _mm512_mul_ps(x, x);
    __m512 p = _mm512_fmadd_ps(set1(erfc_small[5]), s, set1(erfc_small[4]));
    p = _mm512_fmadd_ps(p, s, set1(erfc_small[3]));
    p = _mm512_fmadd_ps(p, s, set1(erfc_small[2]));
    p = _mm512_fmadd_ps(p, s, set1(erfc_small[1]));
    p = _mm512_fmadd_ps(p, s, set1(erfc_small[0]));
    const __m512 small = _mm512_fnmadd_ps(x, p, set1(1.0f));
    /* Every lane on the small side (no NaN among them): the large side's result would be blended away,
     * so it is not computed; the same bits either way. gelu's argument is -x/sqrt 2, and near a
     * model's initialization most of its pre-activations are small (the gpt's c_fc outputs have a
     * standard deviation of about 0.23 at nanoGPT's init), so the skip pays there; where few vectors
     * are all small it costs only the compare and a branch never taken. */
    const __mmask16 is_small = _mm512_cmp_ps_mask(a, set1(ERFC_SMALL), _CMP_LT_OQ);
    if (is_small == 0xFFFF) return small;
    /* large: interval index floor(2|x|) - 1 below 4, then floor|x| + 3, at most 11: the smaller of the
     * two, which is the right one on each side of 4 (a min, not a blend: clang 14 -O2 -g crashes in
     * instruction selection on the blend) */
    const __m512 ac = _mm512_min_ps(_mm512_max_ps(a, set1(ERFC_SMALL)), set1(ERFC_BIG));
    const __m512i i_lo = _mm512_sub_epi32(_mm512_cvttps_epi32(_mm512_add_ps(ac, ac)), _mm512_set1_epi32(1));
    const __m512i i_hi = _mm512_min_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(ac), _mm512_set1_epi32(3)),
                                          _mm512_set1_epi32(11));
    const __m512i idx = _mm512_min_epi32(i_lo, i_hi);
    const __m512 t = _mm512_sub_ps(ac, _mm512_permutexvar_ps(idx, _mm512_loadu_ps(erfc_mid)));
    __m512 f = coef(idx, 7);
    f = _mm512_fmadd_ps(f, t, coef(idx, 6));
    f = _mm512_fmadd_ps(f, t, coef(idx, 5));
    f = _mm512_fmadd_ps(f, t, coef(idx, 4));
    f = _mm512_fmadd_ps(f, t, coef(idx, 3));
    f = _mm512_fmadd_ps(f, t, coef(idx, 2));
    f = _mm512_fmadd_ps(f, t, coef(idx, 1));
    f = _mm512_fmadd_ps(f, t, coef(idx, 0));
    const __m512 h = _mm512_mul_ps(ac, ac), l = _mm512_fmsub_ps(ac, ac, h);
    __m512 n;
    __m512 r = reduce(_mm512_sub_ps(_mm512_setzero_ps(), h), &n);
    r = _mm512_sub_ps(r, l);
    const __m512 e = _mm512_add_ps(expm1_reduced(r), set1(1.0f));
    __m512 big = _mm512_scalef_ps(_mm512_mul_ps(e, f), n);
    big = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, set1(ERFC_BIG), _CMP_GE_OQ), big, _mm512_setzero_ps());
    const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    big = _mm512_mask_sub_ps(big, neg, set1(2.0f), big);
    __m512 y = _mm512_mask_blend_ps(is_small, big, small);
    return _mm512_mask_add_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x, x);
}

#define DEFINE_MAP(name, fn)                                                                        \
    static void name(float *dst, const float *src, size_t n) {                                      \
        size_t i = 0;                                                                               \
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, fn(_mm512_loadu_ps(src + i)));       \
        if (i < n) {                                                                                \
            const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);                                  \
            _mm512_mask_storeu_ps(dst + i, m, fn(_mm512_maskz_loadu_ps(m, src + i)));               \
        }                                                                                           \
    }

DEFINE_MAP(exp_avx512, exp_v)
DEFINE_MAP(tanh_avx512, tanh_v)
DEFINE_MAP(sigmoid_avx512, sigmoid_v)
DEFINE_MAP(erfc_avx512, erfc_v)

/* ---- gelu, fused: amp_vmath_gelu_composed's arithmetic with erfc_v and exp_v, no FMA (vecmath.h) ---- */

static inline __m512 neg_v(__m512 x) { return _mm512_xor_ps(x, _mm512_set1_ps(-0.0f)); }

/* Phi(x) = 0.5 erfc(-x / sqrt 2): gelu's factor of x and the first term of its derivative */
static inline __m512 half_cdf_v(__m512 x) {
    return _mm512_mul_ps(set1(0.5f), erfc_v(_mm512_mul_ps(neg_v(x), set1(AMP_VMATH_INV_SQRT2))));
}

static inline __m512 gelu_v(__m512 x) { return _mm512_mul_ps(x, half_cdf_v(x)); }

/* y = gelu_v's value and d = Phi(x) + x phi(x), from one erfc (vecmath.h, gelu_deriv); gelu_grad_v is
 * g times this d, so the two kernels' bits agree by construction */
static inline void gelu_deriv_v(__m512 v, __m512 *y, __m512 *d) {
    const __m512 hc = half_cdf_v(v);
    const __m512 pdf = exp_v(_mm512_mul_ps(_mm512_mul_ps(set1(-0.5f), v), v));
    const __m512 phi = _mm512_mul_ps(set1(AMP_VMATH_INV_SQRT_2PI), pdf);
    *y = _mm512_mul_ps(v, hc);
    *d = _mm512_add_ps(hc, _mm512_mul_ps(v, phi));
}

static inline __m512 gelu_grad_v(__m512 g, __m512 v) {
    __m512 y, d;
    gelu_deriv_v(v, &y, &d); /* y unused: the compiler drops its multiply */
    return _mm512_mul_ps(g, d);
}

/* deriv and grad kernels from a vector function fn: y and d of x (deriv), g times d (grad); the tail
 * through the same fn under a mask, as DEFINE_MAP's */
#define DEFINE_DERIV(name, fn)                                                                      \
    static void name(float *y, float *d, const float *x, size_t n) {                                \
        size_t i = 0;                                                                               \
        __m512 vy, vd;                                                                              \
        for (; i + 16 <= n; i += 16) {                                                              \
            fn(_mm512_loadu_ps(x + i), &vy, &vd);                                                   \
            _mm512_storeu_ps(y + i, vy);                                                            \
            _mm512_storeu_ps(d + i, vd);                                                            \
        }                                                                                           \
        if (i < n) {                                                                                \
            const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);                                  \
            fn(_mm512_maskz_loadu_ps(m, x + i), &vy, &vd);                                          \
            _mm512_mask_storeu_ps(y + i, m, vy);                                                    \
            _mm512_mask_storeu_ps(d + i, m, vd);                                                    \
        }                                                                                           \
    }

#define DEFINE_GRAD(name, fn)                                                                       \
    static void name(float *dx, const float *g, const float *x, size_t n) {                         \
        size_t i = 0;                                                                               \
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dx + i, fn(_mm512_loadu_ps(g + i), _mm512_loadu_ps(x + i))); \
        if (i < n) {                                                                                \
            const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);                                  \
            _mm512_mask_storeu_ps(dx + i, m, fn(_mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, x + i))); \
        }                                                                                           \
    }

DEFINE_MAP(gelu_avx512, gelu_v)
DEFINE_DERIV(gelu_deriv_avx512, gelu_deriv_v)
DEFINE_GRAD(gelu_grad_avx512, gelu_grad_v)

/* ---- GELU's tanh approximation, fused: amp_vmath_gelu_tanh_*_composed's arithmetic with tanh_v, no FMA
 * (vecmath.h: amp_vmath_gelu_tanh_arg and amp_vmath_gelu_tanh_deriv_of, operation for operation) ---- */

static inline __m512 gelu_tanh_t(__m512 v) {
    const __m512 cube = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
    const __m512 arg = _mm512_add_ps(v, _mm512_mul_ps(set1(AMP_VMATH_GELU_TANH_KAPPA), cube));
    return tanh_v(_mm512_mul_ps(set1(AMP_VMATH_GELU_TANH_BETA), arg));
}

static inline __m512 gelu_tanh_y(__m512 v, __m512 t) {
    return _mm512_mul_ps(_mm512_mul_ps(set1(0.5f), v), _mm512_add_ps(set1(1.0f), t));
}

static inline __m512 gelu_tanh_d(__m512 v, __m512 t) {
    const __m512 left = _mm512_mul_ps(set1(0.5f), v), right = _mm512_add_ps(set1(1.0f), t);
    const __m512 x2k = _mm512_mul_ps(set1(3.0f * AMP_VMATH_GELU_TANH_KAPPA), _mm512_mul_ps(v, v));
    const __m512 inner_d = _mm512_mul_ps(set1(AMP_VMATH_GELU_TANH_BETA), _mm512_add_ps(set1(1.0f), x2k));
    const __m512 slope = _mm512_mul_ps(_mm512_mul_ps(left, _mm512_sub_ps(set1(1.0f), _mm512_mul_ps(t, t))), inner_d);
    return _mm512_add_ps(_mm512_mul_ps(set1(0.5f), right), slope);
}

static inline __m512 gelu_tanh_v(__m512 v) { return gelu_tanh_y(v, gelu_tanh_t(v)); }

static inline void gelu_tanh_deriv_v(__m512 v, __m512 *y, __m512 *d) {
    const __m512 t = gelu_tanh_t(v);
    *y = gelu_tanh_y(v, t);
    *d = gelu_tanh_d(v, t);
}

static inline __m512 gelu_tanh_grad_v(__m512 g, __m512 v) { return _mm512_mul_ps(g, gelu_tanh_d(v, gelu_tanh_t(v))); }

DEFINE_MAP(gelu_tanh_avx512, gelu_tanh_v)
DEFINE_DERIV(gelu_tanh_deriv_avx512, gelu_tanh_deriv_v)
DEFINE_GRAD(gelu_tanh_grad_avx512, gelu_tanh_grad_v)

/* ---- cross-entropy's row passes, fused: amp_vmath_ce_*_composed with exp_v (vecmath.h) ---- */

/* 16 logits from c (masked lanes 0): fp32, or bf16 patterns widened (exact) */
static inline __m512 ce_load(__mmask16 m, const void *x, bool bf16, size_t c) {
    if (!bf16) return _mm512_maskz_loadu_ps(m, (const float *)x + c);
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)x + c));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

static inline __mmask16 ce_mask(size_t left) { return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u); }

static void ce_stats_avx512(const void *x, bool bf16, size_t C, float *mx, float *sum) {
    __m512 mv = set1(-INFINITY);
    for (size_t c = 0; c < C; c += 16) { /* max(v, m) is m where v is NaN */
        const __mmask16 m = ce_mask(C - c);
        mv = _mm512_mask_max_ps(mv, m, ce_load(m, x, bf16, c), mv);
    }
    const float mxs = _mm512_reduce_max_ps(mv); /* no NaN in mv: the order does not matter */
    const __m512 mb = set1(mxs);
    __m512 s = _mm512_setzero_ps();
    for (size_t c = 0; c < C; c += 16) {
        const __mmask16 m = ce_mask(C - c);
        s = _mm512_mask_add_ps(s, m, s, exp_v(_mm512_sub_ps(ce_load(m, x, bf16, c), mb)));
    }
    /* the lanes folded in halves: l += l + 8, l + 4, l + 2, l + 1 */
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(s),
                                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    *mx = mxs, *sum = _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

static void ce_grad_avx512(float *d, const void *x, bool bf16, size_t C, float mx, float logsum, float kk, size_t t) {
    const __m512 mb = set1(mx), lb = set1(logsum), kb = set1(kk);
    for (size_t c = 0; c < C; c += 16) {
        const __mmask16 m = ce_mask(C - c);
        __m512 p = exp_v(_mm512_sub_ps(_mm512_sub_ps(ce_load(m, x, bf16, c), mb), lb));
        if (t - c < 16) p = _mm512_mask_sub_ps(p, (__mmask16)(1u << (t - c)), p, set1(1.0f)); /* (p - 1) k at t */
        _mm512_mask_storeu_ps(d + c, m, _mm512_mul_ps(p, kb));
    }
}

void amp_vmath_kernels_avx512(amp_vmath_kernels *k) {
    k->gelu_tanh = gelu_tanh_avx512;
    k->gelu_tanh_grad = gelu_tanh_grad_avx512;
    k->gelu_tanh_deriv = gelu_tanh_deriv_avx512;
    k->ce_stats = ce_stats_avx512;
    k->ce_grad = ce_grad_avx512;
    k->gelu = gelu_avx512;
    k->gelu_grad = gelu_grad_avx512;
    k->gelu_deriv = gelu_deriv_avx512;
    k->exp = exp_avx512;
    k->tanh = tanh_avx512;
    k->sigmoid = sigmoid_avx512;
    k->erfc = erfc_avx512;
}
