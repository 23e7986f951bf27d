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

static void gelu_grad_ref(float *dx, const float *g, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float v = x[i], cdf = erfcf(-v * AMP_VMATH_INV_SQRT2), pdf = expf(-0.5f * v * v);
        dx[i] = g[i] * (0.5f * cdf + v * (AMP_VMATH_INV_SQRT_2PI * pdf));
    }
}

/* both of the above from one erfcf: y = gelu_ref's value, d = gelu_grad_ref's factor of g; y may be x */
static void gelu_deriv_ref(float *y, float *d, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float v = x[i], cdf = erfcf(-v * AMP_VMATH_INV_SQRT2), pdf = expf(-0.5f * v * v);
        y[i] = v * (0.5f * cdf);
        d[i] = 0.5f * cdf + v * (AMP_VMATH_INV_SQRT_2PI * pdf);
    }
}

void amp_vmath_kernels_ref(amp_vmath_kernels *k) {
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
