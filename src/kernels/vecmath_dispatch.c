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
