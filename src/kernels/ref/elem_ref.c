/* Reference row kernels (kernels/elem_kernels.h): scalar loops, always built; the ops' results
 * under AMP_ISA=ref, and the oracle of the SIMD paths (the same bits). The reductions spell out the
 * 16-lane order the header defines. */
#include <string.h>

#include "../elem_kernels.h"
#include "../../core/relu_bits.h"

#if defined(__clang__)
#pragma clang fp contract(off) /* the SIMD paths do not fuse multiply-adds either */
#endif

static void add_ref(float *dst, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = a[i] + b[i];
}

static void add_scalar_ref(float *dst, const float *src, float c, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = src[i] + c;
}

static void acc_ref(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static void bias_relu_ref(float *row, const float *bias, size_t n) { amp_bias_relu_row32(row, bias, n); }

static void relu_grad_ref(float *g, const float *x, size_t n) { amp_relu_grad_row32(g, x, n); }

/* the loop the causal softmax ran before: a NaN after x[0] is skipped, the first of +0/-0 kept */
static float max_ref(const float *x, size_t n) {
    float m = x[0];
    for (size_t i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

static uint32_t absmax_bits_ref(const float *x, size_t n) {
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        u &= 0x7fffffffu;
        m = u > m ? u : m;
    }
    return m;
}

static float sum_ref(const float *x, size_t n) {
    float s[AMP_ELEM_LANES] = {0};
    for (size_t i = 0; i < n; i++) s[i % AMP_ELEM_LANES] += x[i];
    return amp_elem_fold16(s);
}

static float dot_ref(const float *a, const float *b, size_t n) {
    float s[AMP_ELEM_LANES] = {0};
    for (size_t i = 0; i < n; i++) s[i % AMP_ELEM_LANES] += a[i] * b[i];
    return amp_elem_fold16(s);
}

static float sum_sq_dev_ref(const float *x, float mu, size_t n) {
    float s[AMP_ELEM_LANES] = {0};
    for (size_t i = 0; i < n; i++) s[i % AMP_ELEM_LANES] += (x[i] - mu) * (x[i] - mu);
    return amp_elem_fold16(s);
}

static void sub_scalar_ref(float *x, float c, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] -= c;
}

static void div_scalar_ref(float *x, float c, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] /= c;
}

static void softmax_grad_ref(float *d, const float *p, float r, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = p[i] * (d[i] - r);
}

static void norm_apply_ref(float *y, const float *x, float mu, float rs, const float *w, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = (x[i] - mu) * rs;
        if (w) v *= w[i];
        if (b) v += b[i];
        y[i] = v;
    }
}

static void norm_grad_sums_ref(float out[2], const float *g, const float *x, const float *w, float mu, float rs,
                               size_t n) {
    float s[AMP_ELEM_LANES] = {0}, q[AMP_ELEM_LANES] = {0};
    for (size_t i = 0; i < n; i++) {
        const float gw = w ? g[i] * w[i] : g[i], xhat = (x[i] - mu) * rs;
        s[i % AMP_ELEM_LANES] += gw;
        q[i % AMP_ELEM_LANES] += gw * xhat;
    }
    out[0] = amp_elem_fold16(s), out[1] = amp_elem_fold16(q);
}

static void norm_grad_apply_ref(float *dx, float *dw, float *db, const float *g, const float *x, const float *w,
                                float mu, float rs, float a, float c, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float gw = w ? g[i] * w[i] : g[i], xhat = (x[i] - mu) * rs;
        if (dx) dx[i] = rs * (gw - a - xhat * c);
        if (dw) dw[i] += g[i] * (x[i] - mu) * rs;
        if (db) db[i] += g[i];
    }
}

void amp_elem_kernels_ref(amp_elem_kernels *k) {
    k->add = add_ref;
    k->add_scalar = add_scalar_ref;
    k->acc = acc_ref;
    k->bias_relu = bias_relu_ref;
    k->relu_grad = relu_grad_ref;
    k->max = max_ref;
    k->absmax_bits = absmax_bits_ref;
    k->sum = sum_ref;
    k->dot = dot_ref;
    k->sum_sq_dev = sum_sq_dev_ref;
    k->sub_scalar = sub_scalar_ref;
    k->div_scalar = div_scalar_ref;
    k->softmax_grad = softmax_grad_ref;
    k->norm_apply = norm_apply_ref;
    k->norm_grad_sums = norm_grad_sums_ref;
    k->norm_grad_apply = norm_grad_apply_ref;
}
