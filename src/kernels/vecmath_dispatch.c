/* Builds one elementwise-math kernel table per SIMD path, once (the convert_dispatch.c pattern: a
 * path inherits the reference for anything it does not override). */
#include <pthread.h>

#include "vecmath.h"

static amp_vmath_kernels tables[AMP_ISA_COUNT];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void build_tables(void) {
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) amp_vmath_kernels_ref(&tables[isa]);
#if defined(__x86_64__)
    if (amp_isa_supported(AMP_ISA_AVX2)) amp_vmath_kernels_avx2(&tables[AMP_ISA_AVX2]);
    if (amp_isa_supported(AMP_ISA_AVX512)) amp_vmath_kernels_avx512(&tables[AMP_ISA_AVX512]);
#endif
}

const amp_vmath_kernels *amp_vmath_kernels_for(amp_isa isa) {
    pthread_once(&tables_once, build_tables);
    return &tables[(unsigned)isa < AMP_ISA_COUNT ? isa : AMP_ISA_REF];
}

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
