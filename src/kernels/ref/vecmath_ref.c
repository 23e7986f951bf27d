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

void amp_vmath_kernels_ref(amp_vmath_kernels *k) {
    k->exp = exp_ref;
    k->tanh = tanh_ref;
    k->sigmoid = sigmoid_ref;
    k->erfc = erfc_ref;
}
