/* Builds one kernel table per SIMD path, once, and hands out the one for a path. */
#include <pthread.h>

#include "convert_kernels.h"

static amp_convert_kernels tables[AMP_ISA_COUNT];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void build_tables(void) {
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) amp_convert_kernels_ref(&tables[isa]);
#if defined(__x86_64__)
    if (amp_isa_supported(AMP_ISA_AVX2)) amp_convert_kernels_avx2(&tables[AMP_ISA_AVX2]);
    if (amp_isa_supported(AMP_ISA_AVX512)) {
        amp_convert_kernels_avx2(&tables[AMP_ISA_AVX512]); /* AVX-512 machines run AVX2 too */
        amp_convert_kernels_avx512(&tables[AMP_ISA_AVX512]);
    }
#endif
}

const amp_convert_kernels *amp_convert_kernels_for(amp_isa isa) {
    pthread_once(&tables_once, build_tables);
    return &tables[(unsigned)isa < AMP_ISA_COUNT ? isa : AMP_ISA_REF];
}
