/* The optimizer's element loops with AVX2 + FMA, eight floats at a time (kernels/update_kernels.h).
 *
 * Each loop is its scalar twin (kernels/ref/update_ref.c) operation for operation: the same IEEE
 * operations on each element, in the same order, with the same fused multiply-adds (fmaf there,
 * _mm256_fmadd_ps here) and nothing else fused, so every path gives the same bits; the tests run
 * both. The remainder of a loop (n % 8 elements) goes to the scalar twin. */
#include <immintrin.h>
#include <math.h>

#include "../update_kernels.h"

/* Nothing may fuse but the explicit _mm256_fmadd_ps: clang by its pragma; GCC by the build's ISO mode
 * (-std=c11 means -ffp-contract=off). The tests compare this path with the scalar one bit for bit. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* The SGD loop, and with `scaled` the fused step's unscale first: g = (g * a) * b stored back, then
 * the update with it, all in one sweep (the element's operations are the same either way). */
static inline __attribute__((always_inline)) void sgd_loop(const amp_sgd_scalars *s, float *p, const float *g_in,
                                                           float *g_out, float a, float b, float *buf, int64_t n,
                                                           bool scaled) {
    const __m256 wd = _mm256_set1_ps(s->weight_decay), mom = _mm256_set1_ps(s->momentum);
    const __m256 damp1 = _mm256_set1_ps(s->one_minus_damp), neg_lr = _mm256_set1_ps(s->neg_lr);
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    const bool decay = s->weight_decay != 0.0f;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 pi = _mm256_loadu_ps(p + i);
        __m256 d = _mm256_loadu_ps(g_in + i);
        if (scaled) {
            d = _mm256_mul_ps(_mm256_mul_ps(d, va), vb);
            _mm256_storeu_ps(g_out + i, d);
        }
        if (decay) d = _mm256_fmadd_ps(pi, wd, d);
        __m256 step = d;
        if (s->use_momentum) {
            const __m256 bm = s->first ? d : _mm256_fmadd_ps(d, damp1, _mm256_mul_ps(_mm256_loadu_ps(buf + i), mom));
            _mm256_storeu_ps(buf + i, bm);
            step = s->nesterov ? _mm256_fmadd_ps(bm, mom, d) : bm;
        }
        _mm256_storeu_ps(p + i, _mm256_fmadd_ps(step, neg_lr, pi));
    }
    if (i < n) {
        if (scaled)
            amp_sgd_scaled_update_ref(s, p + i, g_out + i, a, b, buf ? buf + i : NULL, n - i);
        else
            amp_sgd_update_ref(s, p + i, g_in + i, buf ? buf + i : NULL, n - i);
    }
}

static void sgd_update(const amp_sgd_scalars *s, float *p, const float *g, float *buf, int64_t n) {
    sgd_loop(s, p, g, NULL, 1.0f, 1.0f, buf, n, false);
}

static void sgd_scaled_update(const amp_sgd_scalars *s, float *p, float *g, float a, float b, float *buf, int64_t n) {
    sgd_loop(s, p, g, g, a, b, buf, n, true);
}

static void adam_update(const amp_adam_scalars *s, float *p, const float *g, float *m, float *v, int64_t n) {
    const __m256 wd = _mm256_set1_ps(s->weight_decay), decay = _mm256_set1_ps(s->decay_factor);
    const __m256 w = _mm256_set1_ps(s->lerp_weight), w_minus_1 = _mm256_set1_ps(s->lerp_weight - 1.0f);
    const __m256 b2 = _mm256_set1_ps(s->beta2), value2 = _mm256_set1_ps(s->one_minus_beta2);
    const __m256 bc2 = _mm256_set1_ps(s->bc2_sqrt), eps = _mm256_set1_ps(s->eps);
    const __m256 neg_step = _mm256_set1_ps(s->neg_step_size);
    const bool small = fabsf(s->lerp_weight) < 0.5f, l2 = s->weight_decay != 0.0f;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 param = _mm256_loadu_ps(p + i);
        if (s->decoupled) param = _mm256_mul_ps(param, decay);
        __m256 grad = _mm256_loadu_ps(g + i);
        if (l2) grad = _mm256_fmadd_ps(param, wd, grad);
        const __m256 mi0 = _mm256_loadu_ps(m + i);
        const __m256 diff = _mm256_sub_ps(grad, mi0);
        const __m256 mi = small ? _mm256_fmadd_ps(w, diff, mi0) : _mm256_fmadd_ps(w_minus_1, diff, grad);
        const __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(value2, grad), grad, _mm256_mul_ps(_mm256_loadu_ps(v + i), b2));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
        _mm256_storeu_ps(p + i, _mm256_add_ps(param, _mm256_div_ps(_mm256_mul_ps(neg_step, mi), denom)));
    }
    if (i < n) amp_adam_update_ref(s, p + i, g + i, m + i, v + i, n - i);
}

/* Adds the squares of the 8 floats at g (times inv) into chains lo (their first 4 lanes) and hi. The
 * square of an fp32 value is exact in fp64 (24 significant bits squared fit in 53), so the fused
 * multiply-add rounds exactly where the scalar twin's multiply-then-add does: the same bits, one
 * instruction less per four lanes. */
#define SQUARES_8(g, inv, lo, hi)                                                         \
    do {                                                                                        \
        const __m256 u_ = _mm256_mul_ps(_mm256_loadu_ps(g), inv);                               \
        const __m256d l_ = _mm256_cvtps_pd(_mm256_castps256_ps128(u_)),                         \
                      h_ = _mm256_cvtps_pd(_mm256_extractf128_ps(u_, 1));                       \
        lo = _mm256_fmadd_pd(l_, l_, lo);                                                       \
        hi = _mm256_fmadd_pd(h_, h_, hi);                                                       \
    } while (0)

/* Eight chains of four fp64 lanes each (lanes 4c..4c+3 in chain c), 32 elements per iteration, so
 * eight adds are in flight and the loop runs at the speed of the loads. Written out by hand: an array
 * of accumulators was kept in memory by GCC -O2, and ran slower than two chains. */
static void sum_squares(const float *g, int64_t n, float inv_scale, double acc[AMP_UPDATE_LANES]) {
    _Static_assert(AMP_UPDATE_LANES == 32, "the loop below holds 32 lanes in 8 registers");
    __m256d a0 = _mm256_loadu_pd(acc), a1 = _mm256_loadu_pd(acc + 4), a2 = _mm256_loadu_pd(acc + 8),
            a3 = _mm256_loadu_pd(acc + 12), a4 = _mm256_loadu_pd(acc + 16), a5 = _mm256_loadu_pd(acc + 20),
            a6 = _mm256_loadu_pd(acc + 24), a7 = _mm256_loadu_pd(acc + 28);
    const __m256 inv = _mm256_set1_ps(inv_scale);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        SQUARES_8(g + i, inv, a0, a1);
        SQUARES_8(g + i + 8, inv, a2, a3);
        SQUARES_8(g + i + 16, inv, a4, a5);
        SQUARES_8(g + i + 24, inv, a6, a7);
    }
    _mm256_storeu_pd(acc, a0), _mm256_storeu_pd(acc + 4, a1), _mm256_storeu_pd(acc + 8, a2);
    _mm256_storeu_pd(acc + 12, a3), _mm256_storeu_pd(acc + 16, a4), _mm256_storeu_pd(acc + 20, a5);
    _mm256_storeu_pd(acc + 24, a6), _mm256_storeu_pd(acc + 28, a7);
    if (i < n) amp_sum_squares_ref(g + i, n - i, inv_scale, acc); /* i is a multiple of 32: lanes line up */
}
#undef SQUARES_8

static void scale(float *dst, const float *src, int64_t n, float a, float b) {
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(src + i), va), vb));
    if (i < n) amp_scale_ref(dst + i, src + i, n - i, a, b);
}

void amp_update_kernels_avx2(amp_update_kernels *k) {
    k->sgd = sgd_update;
    k->adam = adam_update;
    k->sgd_scaled = sgd_scaled_update;
    k->sum_squares = sum_squares;
    k->scale = scale;
}
