/* Builds the kernel table of every path, once, and hands out the one for a path (kernels.h), with the
 * per-family accessors the ops call. */
#include <pthread.h>
#include <stdatomic.h>

#include "kernels.h"

static amp_kernels tables[AMP_ISA_COUNT];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;
static atomic_bool tables_built; /* set (release) when build_tables is done: the fast path skips pthread_once */

/* A path's init, run on top of the reference's; NULL where this build has none. */
typedef void (*init_fn)(amp_kernels *k);
static const init_fn path_init[AMP_ISA_COUNT] = {
    [AMP_ISA_REF] = NULL, /* the reference table as it is */
#if defined(__x86_64__)
    [AMP_ISA_AVX2] = amp_kernels_init_avx2,
    [AMP_ISA_AVX512] = amp_kernels_init_avx512,
#endif
};

static void build_tables(void) {
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        amp_kernels_init_ref(&tables[isa]);
        if (path_init[isa] && amp_isa_supported((amp_isa)isa)) path_init[isa](&tables[isa]);
        amp_gemm_kernels_set_blocks(&tables[isa].gemm, (amp_isa)isa);
    }
    atomic_store_explicit(&tables_built, true, memory_order_release);
}

const amp_kernels *amp_kernels_for(amp_isa isa) {
    if (!atomic_load_explicit(&tables_built, memory_order_acquire)) pthread_once(&tables_once, build_tables);
    return &tables[(unsigned)isa < AMP_ISA_COUNT ? isa : AMP_ISA_REF];
}

/* ---- the per-family accessors (declared in each family's header) ---- */

const amp_convert_kernels *amp_convert_kernels_for(amp_isa isa) { return &amp_kernels_for(isa)->convert; }
const amp_elem_kernels *amp_elem_kernels_for(amp_isa isa) { return &amp_kernels_for(isa)->elem; }
const amp_vmath_kernels *amp_vmath_kernels_for(amp_isa isa) { return &amp_kernels_for(isa)->vecmath; }
const amp_unscale_kernels *amp_unscale_kernels_for(amp_isa isa) { return &amp_kernels_for(isa)->unscale; }
const amp_lstm_kernels *amp_lstm_kernels_for(amp_isa isa) { return &amp_kernels_for(isa)->lstm; }
const amp_update_kernels *amp_update_kernels_for(amp_isa isa) { return &amp_kernels_for(isa)->update; }
const amp_conv_kernels *amp_conv_kernels_for(amp_isa isa) { return &amp_kernels_for(isa)->conv; }
const amp_pool_kernels *amp_pool_kernels_for(amp_isa isa) { return &amp_kernels_for(isa)->pool; }
const amp_fp8_kernels *amp_fp8_kernels_for(amp_isa isa) { return &amp_kernels_for(isa)->fp8; }
