/* AVX2 row kernels (kernels/elem_kernels.h): 8 lanes, the reference's arithmetic in its order (no
 * FMA), so the same bits. The reductions keep the 16 lanes in two registers (lanes 0-7 and 8-15);
 * a row's tail goes through the reference's scalar loop into the stored lanes. */
#include <immintrin.h>
#include <string.h>

#include "../elem_kernels.h"
#include "../../core/relu_bits.h"

#if defined(__clang__)
#pragma clang fp contract(off) /* -mfma is on here; the scalar tails must not fuse */
#endif

/* the header's fold on lanes 0-7 (a) and 8-15 (b) */
static inline float fold(__m256 a, __m256 b) {
    const __m256 t = _mm256_add_ps(a, b);
    const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    const __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

static void add_avx2(float *dst, const float *a, const float *b, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (; i < n; i++) dst[i] = a[i] + b[i];
}

static void add_scalar_avx2(float *dst, const float *src, float c, size_t n) {
    const __m256 vc = _mm256_set1_ps(c);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(src + i), vc));
    for (; i < n; i++) dst[i] = src[i] + c;
}

static void acc_avx2(float *dst, const float *src, size_t n) { add_avx2(dst, dst, src, n); }

/* relu's selections (core/relu_bits.h) as lane masks, as in elem_avx512.c; tails by the scalar ones */
static inline __m256i relu_keep_nan(__m256i x) {
    const __m256i a = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    return _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
}

static void bias_relu_avx2(float *row, const float *bias, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i x = _mm256_castps_si256(_mm256_add_ps(_mm256_loadu_ps(row + i), _mm256_loadu_ps(bias + i)));
        const __m256i keep = _mm256_or_si256(_mm256_cmpgt_epi32(x, _mm256_set1_epi32(-1)), relu_keep_nan(x));
        _mm256_storeu_si256((__m256i *)(void *)(row + i), _mm256_and_si256(x, keep));
    }
    amp_bias_relu_row32(row + i, bias + i, n - i);
}

static void relu_grad_avx2(float *g, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(x + i));
        const __m256i keep = _mm256_or_si256(_mm256_cmpgt_epi32(xv, _mm256_setzero_si256()), relu_keep_nan(xv));
        const __m256i gv = _mm256_loadu_si256((const __m256i *)(const void *)(g + i));
        _mm256_storeu_si256((__m256i *)(void *)(g + i), _mm256_and_si256(gv, keep));
    }
    amp_relu_grad_row32(g + i, x + i, n - i);
}

static float max_avx2(const float *x, size_t n) {
    __m256 m = _mm256_set1_ps(x[0]);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
    float l[8], r;
    _mm256_storeu_ps(l, m);
    r = l[0];
    for (int j = 1; j < 8; j++) r = l[j] > r ? l[j] : r;
    for (; i < n; i++) r = x[i] > r ? x[i] : r;
    return r;
}

static uint32_t absmax_bits_avx2(const float *x, size_t n) {
    const __m256i abs = _mm256_set1_epi32(0x7fffffff);
    __m256i m = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(x + i)), abs));
    uint32_t l[8], r = 0;
    _mm256_storeu_si256((__m256i *)(void *)l, m);
    for (int j = 0; j < 8; j++) r = l[j] > r ? l[j] : r;
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        u &= 0x7fffffffu;
        r = u > r ? u : r;
    }
    return r;
}

/* The 16-lane sums: body(i) is the vector term of elements i..i+7, term(i) the scalar one. */
#define LANE_SUM(n, vterm, sterm)                                                       \
    do {                                                                                \
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();                      \
        size_t i = 0;                                                                   \
        for (; i + 16 <= (n); i += 16) {                                                \
            s0 = _mm256_add_ps(s0, vterm(i));                                           \
            s1 = _mm256_add_ps(s1, vterm(i + 8));                                       \
        }                                                                               \
        if (i < (n)) {                                                                  \
            float l_[AMP_ELEM_LANES];                                                   \
            _mm256_storeu_ps(l_, s0);                                                   \
            _mm256_storeu_ps(l_ + 8, s1);                                               \
            for (size_t j_ = 0; i + j_ < (n); j_++) l_[j_] += sterm(i + j_);            \
            s0 = _mm256_loadu_ps(l_), s1 = _mm256_loadu_ps(l_ + 8);                     \
        }                                                                               \
        return fold(s0, s1);                                                            \
    } while (0)

static float sum_avx2(const float *x, size_t n) {
#define V(i) _mm256_loadu_ps(x + (i))
#define S(i) x[i]
    LANE_SUM(n, V, S);
#undef V
#undef S
}

static float dot_avx2(const float *a, const float *b, size_t n) {
#define V(i) _mm256_mul_ps(_mm256_loadu_ps(a + (i)), _mm256_loadu_ps(b + (i)))
#define S(i) (a[i] * b[i])
    LANE_SUM(n, V, S);
#undef V
#undef S
}

static inline __m256 sq_dev(const float *x, __m256 vm) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x), vm);
    return _mm256_mul_ps(d, d);
}
static float sum_sq_dev_avx2(const float *x, float mu, size_t n) {
    const __m256 vm = _mm256_set1_ps(mu);
#define V(i) sq_dev(x + (i), vm)
#define S(i) ((x[i] - mu) * (x[i] - mu))
    LANE_SUM(n, V, S);
#undef V
#undef S
}

static void sub_scalar_avx2(float *x, float c, size_t n) {
    const __m256 vc = _mm256_set1_ps(c);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_sub_ps(_mm256_loadu_ps(x + i), vc));
    for (; i < n; i++) x[i] -= c;
}

static void div_scalar_avx2(float *x, float c, size_t n) {
    const __m256 vc = _mm256_set1_ps(c);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_div_ps(_mm256_loadu_ps(x + i), vc));
    for (; i < n; i++) x[i] /= c;
}

static void softmax_grad_avx2(float *d, const float *p, float r, size_t n) {
    const __m256 vr = _mm256_set1_ps(r);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_mul_ps(_mm256_loadu_ps(p + i), _mm256_sub_ps(_mm256_loadu_ps(d + i), vr)));
    for (; i < n; i++) d[i] = p[i] * (d[i] - r);
}

static void norm_apply_avx2(float *y, const float *x, float mu, float rs, const float *w, const float *b, size_t n) {
    const __m256 vm = _mm256_set1_ps(mu), vr = _mm256_set1_ps(rs);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vr);
        if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
        if (b) v = _mm256_add_ps(v, _mm256_loadu_ps(b + i));
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < n; i++) {
        float v = (x[i] - mu) * rs;
        if (w) v *= w[i];
        if (b) v += b[i];
        y[i] = v;
    }
}

static void norm_grad_sums_avx2(float out[2], const float *g, const float *x, const float *w, float mu, float rs,
                                size_t n) {
    const __m256 vm = _mm256_set1_ps(mu), vr = _mm256_set1_ps(rs);
    __m256 s[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, q[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int h = 0; h < 2; h++) {
            const size_t o = i + 8 * (size_t)h;
            __m256 gw = _mm256_loadu_ps(g + o);
            if (w) gw = _mm256_mul_ps(gw, _mm256_loadu_ps(w + o));
            const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + o), vm), vr);
            s[h] = _mm256_add_ps(s[h], gw);
            q[h] = _mm256_add_ps(q[h], _mm256_mul_ps(gw, xhat));
        }
    if (i < n) {
        float ls[AMP_ELEM_LANES], lq[AMP_ELEM_LANES];
        _mm256_storeu_ps(ls, s[0]), _mm256_storeu_ps(ls + 8, s[1]);
        _mm256_storeu_ps(lq, q[0]), _mm256_storeu_ps(lq + 8, q[1]);
        for (size_t j = 0; i + j < n; j++) {
            const float gw = w ? g[i + j] * w[i + j] : g[i + j], xhat = (x[i + j] - mu) * rs;
            ls[j] += gw;
            lq[j] += gw * xhat;
        }
        s[0] = _mm256_loadu_ps(ls), s[1] = _mm256_loadu_ps(ls + 8);
        q[0] = _mm256_loadu_ps(lq), q[1] = _mm256_loadu_ps(lq + 8);
    }
    out[0] = fold(s[0], s[1]), out[1] = fold(q[0], q[1]);
}

static void norm_grad_apply_avx2(float *dx, float *dw, float *db, const float *g, const float *x, const float *w,
                                 float mu, float rs, float a, float c, size_t n) {
    const __m256 vm = _mm256_set1_ps(mu), vr = _mm256_set1_ps(rs), va = _mm256_set1_ps(a), vc = _mm256_set1_ps(c);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i), dev = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm);
        if (dx) {
            const __m256 gw = w ? _mm256_mul_ps(gv, _mm256_loadu_ps(w + i)) : gv, xhat = _mm256_mul_ps(dev, vr);
            _mm256_storeu_ps(dx + i, _mm256_mul_ps(vr, _mm256_sub_ps(_mm256_sub_ps(gw, va), _mm256_mul_ps(xhat, vc))));
        }
        if (dw) _mm256_storeu_ps(dw + i, _mm256_add_ps(_mm256_loadu_ps(dw + i), _mm256_mul_ps(_mm256_mul_ps(gv, dev), vr)));
        if (db) _mm256_storeu_ps(db + i, _mm256_add_ps(_mm256_loadu_ps(db + i), gv));
    }
    for (; i < n; i++) {
        const float gw = w ? g[i] * w[i] : g[i], xhat = (x[i] - mu) * rs;
        if (dx) dx[i] = rs * (gw - a - xhat * c);
        if (dw) dw[i] += g[i] * (x[i] - mu) * rs;
        if (db) db[i] += g[i];
    }
}

/* core/relu_bits.h's loops, built with this path's flags (the compiler vectorizes them) */
static void relu16_avx2(uint16_t *y, const uint16_t *x, int64_t n, amp_half_bits hb) { amp_relu_bits16(y, x, n, hb); }
static void relu_grad16_avx2(uint16_t *dx, const uint16_t *x, const uint16_t *g, int64_t n, amp_half_bits hb) {
    amp_relu_grad_bits16(dx, x, g, n, hb);
}
static void relu32_avx2(uint32_t *y, const uint32_t *x, int64_t n) { amp_relu_bits32(y, x, n); }
static void relu_grad32_avx2(uint32_t *dx, const uint32_t *x, const uint32_t *g, int64_t n) {
    amp_relu_grad_bits32(dx, x, g, n);
}

void amp_elem_kernels_avx2(amp_elem_kernels *k) {
    k->add = add_avx2;
    k->add_scalar = add_scalar_avx2;
    k->acc = acc_avx2;
    k->bias_relu = bias_relu_avx2;
    k->relu_grad = relu_grad_avx2;
    k->max = max_avx2;
    k->absmax_bits = absmax_bits_avx2;
    k->sum = sum_avx2;
    k->dot = dot_avx2;
    k->sum_sq_dev = sum_sq_dev_avx2;
    k->sub_scalar = sub_scalar_avx2;
    k->div_scalar = div_scalar_avx2;
    k->softmax_grad = softmax_grad_avx2;
    k->norm_apply = norm_apply_avx2;
    k->norm_grad_sums = norm_grad_sums_avx2;
    k->norm_grad_apply = norm_grad_apply_avx2;
    k->relu16 = relu16_avx2;
    k->relu_grad16 = relu_grad16_avx2;
    k->relu32 = relu32_avx2;
    k->relu_grad32 = relu_grad32_avx2;
}
