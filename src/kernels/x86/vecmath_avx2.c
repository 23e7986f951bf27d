/* AVX2 + FMA elementwise math kernels (kernels/vecmath.h): the AVX-512 file's algorithms and
 * constants (vecmath_coeffs.h) on 8 lanes. What AVX2 lacks is replaced as follows:
 *   - VSCALEFPS: p 2^n as (p 2^n1) 2^n2 with n1 = trunc(n/2), n2 = n - n1, each power built in the
 *     exponent field (both within [-75, 64], normal); the first product is exact, the second rounds
 *     once, into the subnormals or to +inf as the single VSCALEFPS would;
 *   - opmasks: compare results and VBLENDVPS; tails through VMASKMOVPS (masked-off lanes are neither
 *     read nor written), running the same vector code;
 *   - 16-entry VPERMPS: two 8-entry VPERMPS (the table's halves) and a blend on index >= 8. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "../vecmath.h"
#include "../vecmath_coeffs.h"

static inline __m256 set1(float v) { return _mm256_set1_ps(v); }

/* 2^k for integer-valued k in [-126, 127] */
static inline __m256 pow2i(__m256i k) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

/* p 2^n, n integer-valued in [-150, 128] (NaN p stays NaN) */
static inline __m256 scale(__m256 p, __m256 n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(_mm256_add_epi32(ni, _mm256_srli_epi32(ni, 31)), 1); /* trunc(n/2) */
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    return _mm256_mul_ps(_mm256_mul_ps(p, pow2i(n1)), pow2i(n2));
}

static inline __m256 expm1_reduced(__m256 r) {
    __m256 p = _mm256_fmadd_ps(set1(P5), r, set1(P4));
    p = _mm256_fmadd_ps(p, r, set1(P3));
    p = _mm256_fmadd_ps(p, r, set1(P2));
    p = _mm256_fmadd_ps(p, r, set1(P1));
    p = _mm256_fmadd_ps(p, r, set1(P0));
    return _mm256_fmadd_ps(_mm256_mul_ps(r, r), p, r);
}

static inline __m256 reduce(__m256 x, __m256 *n) {
    *n = _mm256_round_ps(_mm256_mul_ps(x, set1(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 r = _mm256_fnmadd_ps(*n, set1(LN2_HI), x);
    return _mm256_fnmadd_ps(*n, set1(LN2_LO), r);
}

/* e^x for x in [EXP_LO, EXP_HI] or NaN (a NaN lane's n converts to INT_MIN: its product stays NaN) */
static inline __m256 exp_core(__m256 x) {
    __m256 n;
    const __m256 r = reduce(x, &n);
    return scale(_mm256_add_ps(expm1_reduced(r), set1(1.0f)), n);
}

static inline __m256 exp_v(__m256 x) {
    return exp_core(_mm256_min_ps(set1(EXP_HI), _mm256_max_ps(set1(EXP_LO), x)));
}

static inline __m256 tanh_v(__m256 x) {
    const __m256 sign = set1(-0.0f);
    const __m256 a = _mm256_min_ps(set1(TANH_SAT), _mm256_andnot_ps(sign, x));
    __m256 n;
    const __m256 q = expm1_reduced(reduce(_mm256_add_ps(a, a), &n));
    const __m256 p2 = pow2i(_mm256_cvtps_epi32(n)); /* n in [0, 29] */
    const __m256 e = _mm256_fmadd_ps(q, p2, _mm256_sub_ps(p2, set1(1.0f)));
    const __m256 t = _mm256_div_ps(e, _mm256_add_ps(e, set1(2.0f)));
    return _mm256_or_ps(t, _mm256_and_ps(sign, x));
}

static inline __m256 sigmoid_v(__m256 x) {
    const __m256 na = _mm256_or_ps(x, set1(-0.0f));
    const __m256 e = exp_core(_mm256_max_ps(set1(EXP_LO), na));
    const __m256 nonneg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ);
    const __m256 num = _mm256_blendv_ps(e, set1(1.0f), nonneg);
    return _mm256_div_ps(num, _mm256_add_ps(e, set1(1.0f)));
}

/* row idx (0..15) of a 16-entry table */
static inline __m256 lookup16(const float *tab, __m256i idx) {
    const __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(tab), idx);
    const __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(tab + 8), idx);
    return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(7))));
}

static inline __m256 erfc_v(__m256 x) {
    const __m256 sign = set1(-0.0f);
    const __m256 a = _mm256_andnot_ps(sign, x);
    const __m256 s = _mm256_mul_ps(x, x);
    __m256 p = _mm256_fmadd_ps(set1(erfc_small[5]), s, set1(erfc_small[4]));
    p = _mm256_fmadd_ps(p, s, set1(erfc_small[3]));
    p = _mm256_fmadd_ps(p, s, set1(erfc_small[2]));
    p = _mm256_fmadd_ps(p, s, set1(erfc_small[1]));
    p = _mm256_fmadd_ps(p, s, set1(erfc_small[0]));
    const __m256 small = _mm256_fnmadd_ps(x, p, set1(1.0f));
    const __m256 is_small = _mm256_cmp_ps(a, set1(ERFC_SMALL), _CMP_LT_OQ);
    if (_mm256_movemask_ps(is_small) == 0xFF) return small; /* as vecmath_avx512.c's: every lane small */
    const __m256 ac = _mm256_min_ps(_mm256_max_ps(a, set1(ERFC_SMALL)), set1(ERFC_BIG)); /* NaN -> 1/2 */
    const __m256i i_lo = _mm256_sub_epi32(_mm256_cvttps_epi32(_mm256_add_ps(ac, ac)), _mm256_set1_epi32(1));
    const __m256i i_hi = _mm256_min_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(ac), _mm256_set1_epi32(3)),
                                          _mm256_set1_epi32(11));
    const __m256i idx = _mm256_min_epi32(i_lo, i_hi);
    const __m256 t = _mm256_sub_ps(ac, lookup16(erfc_mid, idx));
    __m256 f = lookup16(erfc_poly[7], idx);
    f = _mm256_fmadd_ps(f, t, lookup16(erfc_poly[6], idx));
    f = _mm256_fmadd_ps(f, t, lookup16(erfc_poly[5], idx));
    f = _mm256_fmadd_ps(f, t, lookup16(erfc_poly[4], idx));
    f = _mm256_fmadd_ps(f, t, lookup16(erfc_poly[3], idx));
    f = _mm256_fmadd_ps(f, t, lookup16(erfc_poly[2], idx));
    f = _mm256_fmadd_ps(f, t, lookup16(erfc_poly[1], idx));
    f = _mm256_fmadd_ps(f, t, lookup16(erfc_poly[0], idx));
    const __m256 h = _mm256_mul_ps(ac, ac), l = _mm256_fmsub_ps(ac, ac, h);
    __m256 n;
    __m256 r = reduce(_mm256_sub_ps(_mm256_setzero_ps(), h), &n);
    r = _mm256_sub_ps(r, l);
    const __m256 e = _mm256_add_ps(expm1_reduced(r), set1(1.0f));
    __m256 big = scale(_mm256_mul_ps(e, f), n);
    big = _mm256_blendv_ps(big, _mm256_setzero_ps(), _mm256_cmp_ps(a, set1(ERFC_BIG), _CMP_GE_OQ));
    big = _mm256_blendv_ps(big, _mm256_sub_ps(set1(2.0f), big), _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
    const __m256 y = _mm256_blendv_ps(big, small, is_small);
    return _mm256_blendv_ps(y, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* lanes [0, left) set, left < 8: a tail's maskload / maskstore mask */
static inline __m256i tail_mask(size_t left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#define DEFINE_MAP(name, fn)                                                                        \
    static void name(float *dst, const float *src, size_t n) {                                      \
        size_t i = 0;                                                                               \
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, fn(_mm256_loadu_ps(src + i)));         \
        if (i < n) {                                                                                \
            const __m256i m = tail_mask(n - i);                                                     \
            _mm256_maskstore_ps(dst + i, m, fn(_mm256_maskload_ps(src + i, m)));                    \
        }                                                                                           \
    }

DEFINE_MAP(exp_avx2, exp_v)
DEFINE_MAP(tanh_avx2, tanh_v)
DEFINE_MAP(sigmoid_avx2, sigmoid_v)
DEFINE_MAP(erfc_avx2, erfc_v)

/* ---- gelu, fused: amp_vmath_gelu_composed's arithmetic with erfc_v and exp_v, no FMA (vecmath.h) ---- */

static inline __m256 neg_v(__m256 x) { return _mm256_xor_ps(x, _mm256_set1_ps(-0.0f)); }

/* Phi(x) = 0.5 erfc(-x / sqrt 2): gelu's factor of x and the first term of its derivative */
static inline __m256 half_cdf_v(__m256 x) {
    return _mm256_mul_ps(set1(0.5f), erfc_v(_mm256_mul_ps(neg_v(x), set1(AMP_VMATH_INV_SQRT2))));
}

static inline __m256 gelu_v(__m256 x) { return _mm256_mul_ps(x, half_cdf_v(x)); }

/* y = gelu_v's value and d = Phi(x) + x phi(x), from one erfc (vecmath.h, gelu_deriv); gelu_grad_v is
 * g times this d, so the two kernels' bits agree by construction */
static inline void gelu_deriv_v(__m256 v, __m256 *y, __m256 *d) {
    const __m256 hc = half_cdf_v(v);
    const __m256 pdf = exp_v(_mm256_mul_ps(_mm256_mul_ps(set1(-0.5f), v), v));
    const __m256 phi = _mm256_mul_ps(set1(AMP_VMATH_INV_SQRT_2PI), pdf);
    *y = _mm256_mul_ps(v, hc);
    *d = _mm256_add_ps(hc, _mm256_mul_ps(v, phi));
}

static inline __m256 gelu_grad_v(__m256 g, __m256 v) {
    __m256 y, d;
    gelu_deriv_v(v, &y, &d); /* y unused: the compiler drops its multiply */
    return _mm256_mul_ps(g, d);
}

/* deriv and grad kernels from a vector function fn: y and d of x (deriv), g times d (grad); the tail
 * through the same fn under a mask, as DEFINE_MAP's */
#define DEFINE_DERIV(name, fn)                                                                      \
    static void name(float *y, float *d, const float *x, size_t n) {                                \
        size_t i = 0;                                                                               \
        __m256 vy, vd;                                                                              \
        for (; i + 8 <= n; i += 8) {                                                                \
            fn(_mm256_loadu_ps(x + i), &vy, &vd);                                                   \
            _mm256_storeu_ps(y + i, vy);                                                            \
            _mm256_storeu_ps(d + i, vd);                                                            \
        }                                                                                           \
        if (i < n) {                                                                                \
            const __m256i m = tail_mask(n - i);                                                     \
            fn(_mm256_maskload_ps(x + i, m), &vy, &vd);                                             \
            _mm256_maskstore_ps(y + i, m, vy);                                                      \
            _mm256_maskstore_ps(d + i, m, vd);                                                      \
        }                                                                                           \
    }

#define DEFINE_GRAD(name, fn)                                                                       \
    static void name(float *dx, const float *g, const float *x, size_t n) {                         \
        size_t i = 0;                                                                               \
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dx + i, fn(_mm256_loadu_ps(g + i), _mm256_loadu_ps(x + i))); \
        if (i < n) {                                                                                \
            const __m256i m = tail_mask(n - i);                                                     \
            _mm256_maskstore_ps(dx + i, m, fn(_mm256_maskload_ps(g + i, m), _mm256_maskload_ps(x + i, m))); \
        }                                                                                           \
    }

DEFINE_MAP(gelu_avx2, gelu_v)
DEFINE_DERIV(gelu_deriv_avx2, gelu_deriv_v)
DEFINE_GRAD(gelu_grad_avx2, gelu_grad_v)

/* ---- GELU's tanh approximation, fused: amp_vmath_gelu_tanh_*_composed's arithmetic with tanh_v, no FMA
 * (vecmath.h: amp_vmath_gelu_tanh_arg and amp_vmath_gelu_tanh_deriv_of, operation for operation) ---- */

static inline __m256 gelu_tanh_t(__m256 v) {
    const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
    const __m256 arg = _mm256_add_ps(v, _mm256_mul_ps(set1(AMP_VMATH_GELU_TANH_KAPPA), cube));
    return tanh_v(_mm256_mul_ps(set1(AMP_VMATH_GELU_TANH_BETA), arg));
}

static inline __m256 gelu_tanh_y(__m256 v, __m256 t) {
    return _mm256_mul_ps(_mm256_mul_ps(set1(0.5f), v), _mm256_add_ps(set1(1.0f), t));
}

static inline __m256 gelu_tanh_d(__m256 v, __m256 t) {
    const __m256 left = _mm256_mul_ps(set1(0.5f), v), right = _mm256_add_ps(set1(1.0f), t);
    const __m256 x2k = _mm256_mul_ps(set1(3.0f * AMP_VMATH_GELU_TANH_KAPPA), _mm256_mul_ps(v, v));
    const __m256 inner_d = _mm256_mul_ps(set1(AMP_VMATH_GELU_TANH_BETA), _mm256_add_ps(set1(1.0f), x2k));
    const __m256 slope = _mm256_mul_ps(_mm256_mul_ps(left, _mm256_sub_ps(set1(1.0f), _mm256_mul_ps(t, t))), inner_d);
    return _mm256_add_ps(_mm256_mul_ps(set1(0.5f), right), slope);
}

static inline __m256 gelu_tanh_v(__m256 v) { return gelu_tanh_y(v, gelu_tanh_t(v)); }

static inline void gelu_tanh_deriv_v(__m256 v, __m256 *y, __m256 *d) {
    const __m256 t = gelu_tanh_t(v);
    *y = gelu_tanh_y(v, t);
    *d = gelu_tanh_d(v, t);
}

static inline __m256 gelu_tanh_grad_v(__m256 g, __m256 v) { return _mm256_mul_ps(g, gelu_tanh_d(v, gelu_tanh_t(v))); }

DEFINE_MAP(gelu_tanh_avx2, gelu_tanh_v)
DEFINE_DERIV(gelu_tanh_deriv_avx2, gelu_tanh_deriv_v)
DEFINE_GRAD(gelu_tanh_grad_avx2, gelu_tanh_grad_v)

/* ---- cross-entropy's row passes, fused: amp_vmath_ce_*_composed with exp_v (vecmath.h); the order's
 * 16 lanes as two vectors, lanes 0-7 and 8-15 ---- */

/* logits c .. c + 7 where c + lane < C: fp32, or bf16 patterns widened (exact); lanes past C are 0 and
 * not read (a bf16 tail goes through a zeroed buffer: AVX2 has no 16-bit masked load) */
static inline __m256 ce_load8(const void *x, bool bf16, size_t c, size_t C) {
    const size_t left = c < C ? C - c : 0;
    if (!bf16) {
        const float *f = (const float *)x + c;
        return left >= 8 ? _mm256_loadu_ps(f) : _mm256_maskload_ps(f, tail_mask(left));
    }
    __m128i h;
    if (left >= 8) {
        h = _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)x + c));
    } else {
        uint16_t buf[8] = {0};
        if (left) memcpy(buf, (const uint16_t *)x + c, left * sizeof *buf);
        h = _mm_loadu_si128((const __m128i *)(const void *)buf);
    }
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* lanes c + lane < C all ones */
static inline __m256 ce_lanes8(size_t c, size_t C) {
    return _mm256_castsi256_ps(tail_mask(c >= C ? 0 : C - c >= 8 ? 8 : C - c));
}

static void ce_stats_avx2(const void *x, bool bf16, size_t C, float *mx, float *sum) {
    __m256 m0 = set1(-INFINITY), m1 = m0;
    for (size_t c = 0; c < C; c += 16) { /* max(v, m) is m where v is NaN or equal */
        m0 = _mm256_blendv_ps(m0, _mm256_max_ps(ce_load8(x, bf16, c, C), m0), ce_lanes8(c, C));
        m1 = _mm256_blendv_ps(m1, _mm256_max_ps(ce_load8(x, bf16, c + 8, C), m1), ce_lanes8(c + 8, C));
    }
    /* no NaN in the lanes: the order does not matter */
    const __m256 m8 = _mm256_max_ps(m0, m1);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float mxs = _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
    const __m256 mb = set1(mxs);
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    for (size_t c = 0; c < C; c += 16) { /* a lane past C adds +0: the sum (never -0) keeps its bits */
        const __m256 e0 = exp_v(_mm256_sub_ps(ce_load8(x, bf16, c, C), mb));
        const __m256 e1 = exp_v(_mm256_sub_ps(ce_load8(x, bf16, c + 8, C), mb));
        s0 = _mm256_add_ps(s0, _mm256_and_ps(e0, ce_lanes8(c, C)));
        s1 = _mm256_add_ps(s1, _mm256_and_ps(e1, ce_lanes8(c + 8, C)));
    }
    /* the lanes folded in halves: l += l + 8, l + 4, l + 2, l + 1 */
    const __m256 s8 = _mm256_add_ps(s0, s1);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    *mx = mxs, *sum = _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

static void ce_grad_avx2(float *d, const void *x, bool bf16, size_t C, float mx, float logsum, float kk, size_t t) {
    const __m256 mb = set1(mx), lb = set1(logsum), kb = set1(kk);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (size_t c = 0; c < C; c += 8) {
        __m256 p = exp_v(_mm256_sub_ps(_mm256_sub_ps(ce_load8(x, bf16, c, C), mb), lb));
        if (t - c < 8) { /* (p - 1) k at t */
            const __m256 at = _mm256_castsi256_ps(_mm256_cmpeq_epi32(lane, _mm256_set1_epi32((int)(t - c))));
            p = _mm256_blendv_ps(p, _mm256_sub_ps(p, set1(1.0f)), at);
        }
        const __m256 v = _mm256_mul_ps(p, kb);
        if (C - c >= 8) _mm256_storeu_ps(d + c, v);
        else _mm256_maskstore_ps(d + c, tail_mask(C - c), v);
    }
}

void amp_vmath_kernels_avx2(amp_vmath_kernels *k) {
    k->ce_stats = ce_stats_avx2;
    k->ce_grad = ce_grad_avx2;
    k->gelu_tanh = gelu_tanh_avx2;
    k->gelu_tanh_grad = gelu_tanh_grad_avx2;
    k->gelu_tanh_deriv = gelu_tanh_deriv_avx2;
    k->gelu = gelu_avx2;
    k->gelu_grad = gelu_grad_avx2;
    k->gelu_deriv = gelu_deriv_avx2;
    k->exp = exp_avx2;
    k->tanh = tanh_avx2;
    k->sigmoid = sigmoid_avx2;
    k->erfc = erfc_avx2;
}
