/* Reference elementwise math kernels: libm per element (kernels/vecmath.h). Always built; the ops'
 * results under AMP_ISA=ref. */
#include <math.h>

#include "../vecmath.h"

static void exp_ref(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = expf(src[i]);
}

static void tanh_ref(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = tanhf(src[i]);
}

static void sigmoid_ref(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = amp_sigmoid_scalar(src[i]);
}

static void erfc_ref(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = erfcf(src[i]);
}

/* amp_vmath_gelu_composed and its gradient with libm, per element */
static void gelu_ref(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = src[i] * (0.5f * erfcf(-src[i] * AMP_VMATH_INV_SQRT2));
}

/* gelu's value (*y) and its derivative d = Phi(v) + v phi(v) at v, from one erfcf: the one formula
 * of gelu_grad_ref (g * d) and gelu_deriv_ref, so their bits agree by construction */
static inline float gelu_deriv_one(float v, float *y) {
    const float half_cdf = 0.5f * erfcf(-v * AMP_VMATH_INV_SQRT2), pdf = expf(-0.5f * v * v);
    *y = v * half_cdf;
    return half_cdf + v * (AMP_VMATH_INV_SQRT_2PI * pdf);
}

static void gelu_grad_ref(float *dx, const float *g, const float *x, size_t n) {
    float y;
    for (size_t i = 0; i < n; i++) dx[i] = g[i] * gelu_deriv_one(x[i], &y);
}

/* y = gelu_ref's value, d = gelu_grad_ref's factor of g; y may be x */
static void gelu_deriv_ref(float *y, float *d, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = gelu_deriv_one(x[i], &y[i]);
}

/* GELU's tanh approximation with libm's tanhf, per element (amp_vmath_gelu_tanh_*_composed's formulas) */
static void gelu_tanh_ref(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float v = src[i];
        dst[i] = (0.5f * v) * (1.0f + tanhf(amp_vmath_gelu_tanh_arg(v)));
    }
}

static void gelu_tanh_grad_ref(float *dx, const float *g, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) dx[i] = g[i] * amp_vmath_gelu_tanh_deriv_of(x[i], tanhf(amp_vmath_gelu_tanh_arg(x[i])));
}

/* y may be x */
static void gelu_tanh_deriv_ref(float *y, float *d, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float v = x[i], t = tanhf(amp_vmath_gelu_tanh_arg(v));
        d[i] = amp_vmath_gelu_tanh_deriv_of(v, t);
        y[i] = (0.5f * v) * (1.0f + t);
    }
}

void amp_vmath_kernels_ref(amp_vmath_kernels *k) {
    k->gelu_tanh = gelu_tanh_ref;
    k->gelu_tanh_grad = gelu_tanh_grad_ref;
    k->gelu_tanh_deriv = gelu_tanh_deriv_ref;
    k->ce_stats = NULL; /* the op composes (vecmath.h) */
    k->ce_grad = NULL;
    k->gelu = gelu_ref;
    k->gelu_grad = gelu_grad_ref;
    k->gelu_deriv = gelu_deriv_ref;
    k->exp = exp_ref;
    k->tanh = tanh_ref;
    k->sigmoid = sigmoid_ref;
    k->erfc = erfc_ref;
}
