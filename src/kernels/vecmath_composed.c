/* The elementwise-math compositions (vecmath.h): gelu and its gradient from a table's erfc and exp,
 * and cross-entropy's two row passes from its exp, with scalar loops around them. The fused kernels'
 * oracles, and what an op runs on a path without the fused kernel. */
#include "vecmath.h"

/* In chunks of GELU_CHUNK elements, so that the intermediate arrays stay in L1. */
enum { GELU_CHUNK = 1024 };

void amp_vmath_gelu_composed(const amp_vmath_kernels *k, float *y, const float *x, size_t n) {
    float z[GELU_CHUNK];
    for (size_t i0 = 0; i0 < n; i0 += GELU_CHUNK) {
        const size_t m = n - i0 < GELU_CHUNK ? n - i0 : GELU_CHUNK;
        const float *xv = x + i0;
        for (size_t i = 0; i < m; i++) z[i] = -xv[i] * AMP_VMATH_INV_SQRT2;
        k->erfc(z, z, m);
        for (size_t i = 0; i < m; i++) y[i0 + i] = xv[i] * (0.5f * z[i]);
    }
}

void amp_vmath_gelu_grad_composed(const amp_vmath_kernels *k, float *dx, const float *g, const float *x, size_t n) {
    float cdf[GELU_CHUNK], pdf[GELU_CHUNK];
    for (size_t i0 = 0; i0 < n; i0 += GELU_CHUNK) {
        const size_t m = n - i0 < GELU_CHUNK ? n - i0 : GELU_CHUNK;
        const float *v = x + i0;
        for (size_t i = 0; i < m; i++) {
            cdf[i] = -v[i] * AMP_VMATH_INV_SQRT2;
            pdf[i] = -0.5f * v[i] * v[i];
        }
        k->erfc(cdf, cdf, m);
        k->exp(pdf, pdf, m);
        for (size_t i = 0; i < m; i++) dx[i0 + i] = g[i0 + i] * (0.5f * cdf[i] + v[i] * (AMP_VMATH_INV_SQRT_2PI * pdf[i]));
    }
}

/* ---- GELU's tanh approximation (vecmath.h) ---- */

/* t[i] = tanh(BETA * (x + KAPPA * x^3)) for a chunk, through the table's tanh */
static void gelu_tanh_inner(const amp_vmath_kernels *k, float *t, const float *x, size_t m) {
    for (size_t i = 0; i < m; i++) t[i] = amp_vmath_gelu_tanh_arg(x[i]);
    k->tanh(t, t, m);
}

void amp_vmath_gelu_tanh_composed(const amp_vmath_kernels *k, float *y, const float *x, size_t n) {
    float t[GELU_CHUNK];
    for (size_t i0 = 0; i0 < n; i0 += GELU_CHUNK) {
        const size_t m = n - i0 < GELU_CHUNK ? n - i0 : GELU_CHUNK;
        gelu_tanh_inner(k, t, x + i0, m);
        for (size_t i = 0; i < m; i++) y[i0 + i] = (0.5f * x[i0 + i]) * (1.0f + t[i]);
    }
}

void amp_vmath_gelu_tanh_deriv_composed(const amp_vmath_kernels *k, float *y, float *d, const float *x, size_t n) {
    float t[GELU_CHUNK];
    for (size_t i0 = 0; i0 < n; i0 += GELU_CHUNK) {
        const size_t m = n - i0 < GELU_CHUNK ? n - i0 : GELU_CHUNK;
        gelu_tanh_inner(k, t, x + i0, m);
        for (size_t i = 0; i < m; i++) {
            const float v = x[i0 + i];
            d[i0 + i] = amp_vmath_gelu_tanh_deriv_of(v, t[i]);
            y[i0 + i] = (0.5f * v) * (1.0f + t[i]);
        }
    }
}

void amp_vmath_gelu_tanh_grad_composed(const amp_vmath_kernels *k, float *dx, const float *g, const float *x,
                                       size_t n) {
    float t[GELU_CHUNK];
    for (size_t i0 = 0; i0 < n; i0 += GELU_CHUNK) {
        const size_t m = n - i0 < GELU_CHUNK ? n - i0 : GELU_CHUNK;
        gelu_tanh_inner(k, t, x + i0, m);
        for (size_t i = 0; i < m; i++) dx[i0 + i] = g[i0 + i] * amp_vmath_gelu_tanh_deriv_of(x[i0 + i], t[i]);
    }
}

/* ---- cross-entropy's row passes (vecmath.h) ---- */

enum { CE_LANES = 16, CE_CHUNK = 256 }; /* CE_CHUNK: a multiple of CE_LANES, so a chunk starts at lane 0 */

void amp_vmath_ce_stats_composed(const amp_vmath_kernels *k, const void *x, bool bf16, size_t C, float *mx,
                                 float *sum) {
    /* the maximum in lanes, then across them (NaN never replaces): the same value in any order */
    float ml[CE_LANES], m = -INFINITY;
    for (int l = 0; l < CE_LANES; l++) ml[l] = -INFINITY;
    size_t c = 0;
    for (; c + CE_LANES <= C; c += CE_LANES)
        for (int l = 0; l < CE_LANES; l++) {
            const float v = amp_vmath_ce_at(x, bf16, c + (size_t)l);
            ml[l] = v > ml[l] ? v : ml[l];
        }
    for (; c < C; c++) {
        const float v = amp_vmath_ce_at(x, bf16, c);
        m = v > m ? v : m;
    }
    for (int l = 0; l < CE_LANES; l++) m = ml[l] > m ? ml[l] : m;
    float s[CE_LANES] = {0}, e[CE_CHUNK];
    for (size_t c0 = 0; c0 < C; c0 += CE_CHUNK) {
        const size_t len = C - c0 < CE_CHUNK ? C - c0 : CE_CHUNK;
        for (size_t i = 0; i < len; i++) e[i] = amp_vmath_ce_at(x, bf16, c0 + i) - m;
        k->exp(e, e, len);
        size_t i = 0;
        for (; i + CE_LANES <= len; i += CE_LANES)
            for (int l = 0; l < CE_LANES; l++) s[l] += e[i + l];
        for (int l = 0; i + (size_t)l < len; l++) s[l] += e[i + l];
    }
    for (int w = CE_LANES / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) s[l] += s[l + w];
    *mx = m, *sum = s[0];
}

void amp_vmath_ce_grad_composed(const amp_vmath_kernels *k, float *d, const void *x, bool bf16, size_t C, float mx,
                                float logsum, float kk, size_t t) {
    for (size_t c = 0; c < C; c++) d[c] = (amp_vmath_ce_at(x, bf16, c) - mx) - logsum;
    k->exp(d, d, C); /* softmax */
    const float dt = (d[t] - 1.0f) * kk;
    for (size_t c = 0; c < C; c++) d[c] *= kk;
    d[t] = dt;
}
