/* Builds one kernel table per SIMD path, once, and hands out the one for a path. */
#include <pthread.h>
#include <stdatomic.h>

#include "convert_kernels.h"

static amp_convert_kernels tables[AMP_ISA_COUNT];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;
static atomic_bool tables_built; /* set (release) when build_tables is done: the fast path skips pthread_once */

static void build_tables(void) {
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) amp_convert_kernels_ref(&tables[isa]);
#if defined(__x86_64__)
    if (amp_isa_supported(AMP_ISA_AVX2)) amp_convert_kernels_avx2(&tables[AMP_ISA_AVX2]);
    if (amp_isa_supported(AMP_ISA_AVX512)) {
        amp_convert_kernels_avx2(&tables[AMP_ISA_AVX512]); /* AVX-512 machines run AVX2 too */
        amp_convert_kernels_avx512(&tables[AMP_ISA_AVX512]);
    }
#endif
    atomic_store_explicit(&tables_built, true, memory_order_release);
}

const amp_convert_kernels *amp_convert_kernels_for(amp_isa isa) {
    if (!atomic_load_explicit(&tables_built, memory_order_acquire)) pthread_once(&tables_once, build_tables);
    return &tables[(unsigned)isa < AMP_ISA_COUNT ? isa : AMP_ISA_REF];
}
