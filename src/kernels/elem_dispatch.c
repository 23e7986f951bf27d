/* Builds one elementwise and row kernel table per SIMD path, once (the
 * vecmath_dispatch.c pattern). */
#include <pthread.h>

#include "elem_kernels.h"

static amp_elem_kernels tables[AMP_ISA_COUNT];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void build_tables(void) {
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) amp_elem_kernels_ref(&tables[isa]);
#if defined(__x86_64__)
    if (amp_isa_supported(AMP_ISA_AVX2)) amp_elem_kernels_avx2(&tables[AMP_ISA_AVX2]);
    if (amp_isa_supported(AMP_ISA_AVX512)) amp_elem_kernels_avx512(&tables[AMP_ISA_AVX512]);
#endif
}

const amp_elem_kernels *amp_elem_kernels_for(amp_isa isa) {
    pthread_once(&tables_once, build_tables);
    return &tables[(unsigned)isa < AMP_ISA_COUNT ? isa : AMP_ISA_REF];
}
