/* AVX-512 row kernels (kernels/elem_kernels.h): 16 lanes, tails under a mask, the reference's
 * arithmetic in its order (no FMA) and its 16-lane summation order, so the same bits. */
#include <immintrin.h>

#include "../elem_kernels.h"
#include "../../core/relu_bits.h"

static inline __mmask16 tail_mask(size_t r) { return (__mmask16)((1u << r) - 1u); } /* r < 16 */

/* the header's fold: t = s[0:8] + s[8:16], u = t[0:4] + t[4:8], v = u[0:2] + u[2:4], v[0] + v[1] */
static inline float fold(__m512 s) {
    const __m256 t = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
    const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    const __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

static void add_avx512(float *dst, const float *a, const float *b, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
    if (i < n) {
        const __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(dst + i, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i)));
    }
}

static void add_scalar_avx512(float *dst, const float *src, float c, size_t n) {
    const __m512 vc = _mm512_set1_ps(c);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_add_ps(_mm512_loadu_ps(src + i), vc));
    if (i < n) {
        const __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(dst + i, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, src + i), vc));
    }
}

static void acc_avx512(float *dst, const float *src, size_t n) { add_avx512(dst, dst, src, n); }

/* relu's selections (core/relu_bits.h) as lane masks: amp_relu_one32 keeps x where its sign is clear
 * or it is NaN (|x|'s bits above infinity's); amp_relu_grad_one32 keeps g where x > 0 as an int32 (sign
 * clear, not +0) or x is NaN. The rest become +0. */
static inline __m512 relu_v(__m512 v) {
    const __m512i x = _mm512_castps_si512(v);
    const __m512i a = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 keep = _mm512_cmpge_epi32_mask(x, _mm512_setzero_si512()) |
                           _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7f800000));
    return _mm512_maskz_mov_ps(keep, v);
}

static void bias_relu_avx512(float *row, const float *bias, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(row + i, relu_v(_mm512_add_ps(_mm512_loadu_ps(row + i), _mm512_loadu_ps(bias + i))));
    if (i < n) {
        const __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(row + i, k,
                              relu_v(_mm512_add_ps(_mm512_maskz_loadu_ps(k, row + i), _mm512_maskz_loadu_ps(k, bias + i))));
    }
}

static inline __m512 relu_grad_v(__m512 g, __m512i x) {
    const __m512i a = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 keep = _mm512_cmpgt_epi32_mask(x, _mm512_setzero_si512()) |
                           _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7f800000));
    return _mm512_maskz_mov_ps(keep, g);
}

static void relu_grad_avx512(float *g, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(g + i, relu_grad_v(_mm512_loadu_ps(g + i), _mm512_loadu_si512(x + i)));
    if (i < n) {
        const __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(g + i, k, relu_grad_v(_mm512_maskz_loadu_ps(k, g + i), _mm512_maskz_loadu_epi32(k, x + i)));
    }
}

static float max_avx512(const float *x, size_t n) {
    __m512 m = _mm512_set1_ps(x[0]);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) m = _mm512_max_ps(_mm512_loadu_ps(x + i), m);
    if (i < n) m = _mm512_max_ps(_mm512_mask_loadu_ps(m, tail_mask(n - i), x + i), m);
    return _mm512_reduce_max_ps(m);
}

static uint32_t absmax_bits_avx512(const float *x, size_t n) {
    const __m512i abs = _mm512_set1_epi32(0x7fffffff);
    __m512i m = _mm512_setzero_si512();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_loadu_si512(x + i), abs));
    if (i < n) m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_maskz_loadu_epi32(tail_mask(n - i), x + i), abs));
    return (uint32_t)_mm512_reduce_max_epu32(m);
}

static float sum_avx512(const float *x, size_t n) {
    __m512 s = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) s = _mm512_add_ps(s, _mm512_loadu_ps(x + i));
    if (i < n) {
        const __mmask16 k = tail_mask(n - i);
        s = _mm512_mask_add_ps(s, k, s, _mm512_maskz_loadu_ps(k, x + i));
    }
    return fold(s);
}

static float dot_avx512(const float *a, const float *b, size_t n) {
    __m512 s = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) s = _mm512_add_ps(s, _mm512_mul_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
    if (i < n) {
        const __mmask16 k = tail_mask(n - i);
        s = _mm512_mask_add_ps(s, k, s, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i)));
    }
    return fold(s);
}

static float sum_sq_dev_avx512(const float *x, float mu, size_t n) {
    const __m512 vm = _mm512_set1_ps(mu);
    __m512 s = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i), vm);
        s = _mm512_add_ps(s, _mm512_mul_ps(d, d));
    }
    if (i < n) {
        const __mmask16 k = tail_mask(n - i);
        const __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm);
        s = _mm512_mask_add_ps(s, k, s, _mm512_mul_ps(d, d));
    }
    return fold(s);
}

static void sub_scalar_avx512(float *x, float c, size_t n) {
    const __m512 vc = _mm512_set1_ps(c);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_sub_ps(_mm512_loadu_ps(x + i), vc));
    if (i < n) {
        const __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, k, _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vc));
    }
}

static void div_scalar_avx512(float *x, float c, size_t n) {
    const __m512 vc = _mm512_set1_ps(c);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_div_ps(_mm512_loadu_ps(x + i), vc));
    if (i < n) {
        const __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, k, _mm512_div_ps(_mm512_maskz_loadu_ps(k, x + i), vc));
    }
}

static void softmax_grad_avx512(float *d, const float *p, float r, size_t n) {
    const __m512 vr = _mm512_set1_ps(r);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(d + i, _mm512_mul_ps(_mm512_loadu_ps(p + i), _mm512_sub_ps(_mm512_loadu_ps(d + i), vr)));
    if (i < n) {
        const __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(d + i, k,
                              _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + i), _mm512_sub_ps(_mm512_maskz_loadu_ps(k, d + i), vr)));
    }
}

static inline __m512 load(const float *p, size_t i, size_t n) {
    return n - i >= 16 ? _mm512_loadu_ps(p + i) : _mm512_maskz_loadu_ps(tail_mask(n - i), p + i);
}
static inline void store(float *p, size_t i, size_t n, __m512 v) {
    if (n - i >= 16) _mm512_storeu_ps(p + i, v);
    else _mm512_mask_storeu_ps(p + i, tail_mask(n - i), v);
}

static void norm_apply_avx512(float *y, const float *x, float mu, float rs, const float *w, const float *b, size_t n) {
    const __m512 vm = _mm512_set1_ps(mu), vr = _mm512_set1_ps(rs);
    for (size_t i = 0; i < n; i += 16) {
        __m512 v = _mm512_mul_ps(_mm512_sub_ps(load(x, i, n), vm), vr);
        if (w) v = _mm512_mul_ps(v, load(w, i, n));
        if (b) v = _mm512_add_ps(v, load(b, i, n));
        store(y, i, n, v);
    }
}

static void norm_grad_sums_avx512(float out[2], const float *g, const float *x, const float *w, float mu, float rs,
                                  size_t n) {
    const __m512 vm = _mm512_set1_ps(mu), vr = _mm512_set1_ps(rs);
    __m512 s = _mm512_setzero_ps(), q = _mm512_setzero_ps();
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : tail_mask(n - i);
        __m512 gw = load(g, i, n);
        if (w) gw = _mm512_mul_ps(gw, load(w, i, n));
        const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(load(x, i, n), vm), vr);
        s = _mm512_mask_add_ps(s, k, s, gw);
        q = _mm512_mask_add_ps(q, k, q, _mm512_mul_ps(gw, xhat));
    }
    out[0] = fold(s), out[1] = fold(q);
}

static void norm_grad_apply_avx512(float *dx, float *dw, float *db, const float *g, const float *x, const float *w,
                                   float mu, float rs, float a, float c, size_t n) {
    const __m512 vm = _mm512_set1_ps(mu), vr = _mm512_set1_ps(rs), va = _mm512_set1_ps(a), vc = _mm512_set1_ps(c);
    for (size_t i = 0; i < n; i += 16) {
        const __m512 gv = load(g, i, n), dev = _mm512_sub_ps(load(x, i, n), vm);
        if (dx) {
            const __m512 gw = w ? _mm512_mul_ps(gv, load(w, i, n)) : gv, xhat = _mm512_mul_ps(dev, vr);
            store(dx, i, n, _mm512_mul_ps(vr, _mm512_sub_ps(_mm512_sub_ps(gw, va), _mm512_mul_ps(xhat, vc))));
        }
        if (dw) store(dw, i, n, _mm512_add_ps(load(dw, i, n), _mm512_mul_ps(_mm512_mul_ps(gv, dev), vr)));
        if (db) store(db, i, n, _mm512_add_ps(load(db, i, n), gv));
    }
}

/* core/relu_bits.h's loops, built with this path's flags (the compiler vectorizes them) */
static void relu16_avx512(uint16_t *y, const uint16_t *x, int64_t n, amp_half_bits hb) { amp_relu_bits16(y, x, n, hb); }
static void relu_grad16_avx512(uint16_t *dx, const uint16_t *x, const uint16_t *g, int64_t n, amp_half_bits hb) {
    amp_relu_grad_bits16(dx, x, g, n, hb);
}
static void relu32_avx512(uint32_t *y, const uint32_t *x, int64_t n) { amp_relu_bits32(y, x, n); }
static void relu_grad32_avx512(uint32_t *dx, const uint32_t *x, const uint32_t *g, int64_t n) {
    amp_relu_grad_bits32(dx, x, g, n);
}

void amp_elem_kernels_avx512(amp_elem_kernels *k) {
    k->add = add_avx512;
    k->add_scalar = add_scalar_avx512;
    k->acc = acc_avx512;
    k->bias_relu = bias_relu_avx512;
    k->relu_grad = relu_grad_avx512;
    k->max = max_avx512;
    k->absmax_bits = absmax_bits_avx512;
    k->sum = sum_avx512;
    k->dot = dot_avx512;
    k->sum_sq_dev = sum_sq_dev_avx512;
    k->sub_scalar = sub_scalar_avx512;
    k->div_scalar = div_scalar_avx512;
    k->softmax_grad = softmax_grad_avx512;
    k->norm_apply = norm_apply_avx512;
    k->norm_grad_sums = norm_grad_sums_avx512;
    k->norm_grad_apply = norm_grad_apply_avx512;
    k->relu16 = relu16_avx512;
    k->relu_grad16 = relu_grad16_avx512;
    k->relu32 = relu32_avx512;
    k->relu_grad32 = relu_grad32_avx512;
}
