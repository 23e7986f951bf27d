/* Builds one GEMM kernel table per SIMD path, once, and sets each kernel's cache blocks from the
 * per-path table below. */
#include <pthread.h>

#include "gemm_kernels.h"

_Static_assert(AMP_F32 == 0 && AMP_F16 == 1 && AMP_BF16 == 2, "gemm tables index by dtype");

typedef struct blocks {
    int mc, kc, nc;
} blocks;

/* Cache blocks per path and packed format (BLIS's per-configuration blksz table). The loops in
 * gemm.c keep one mr x kc A panel in L1 and stream kc x nr B panels from the kc x nc B block:
 *   kc:  the A panel, mr * kc * packed_size, stays within about 2/3 of a 32-48 KiB L1D; a large
 *        kc also means fewer passes over C (one read-modify-write of C per k block);
 *   nc:  the B block, kc * nc * packed_size (4 MiB here), lives in L3; a large nc means A is
 *        packed fewer times (once per nc columns);
 *   mc:  only sets how much of A is packed at a time (mc * kc * packed_size, in L2).
 * Tuned on AMD Zen 4 (32 KiB L1D, 1 MiB L2 per core, 32 MiB L3) with `amp bench gemm`: at
 * 1024^3 on one core, kc = 512 (f32) and 1024 (bf16 pairs: 512 pairs) gave 90-94% of peak, kc =
 * 256 about 5% less. Each value is rounded down to a multiple of the tile it blocks. The AVX2
 * kernel's A panel has 6 rows, so kc = 512 keeps it at 12 KiB; the ref path's values only need
 * to be sane. */
static const blocks block_table[AMP_ISA_COUNT][AMP_GEMM_PACKED_COUNT] = {
    [AMP_ISA_REF] = {[AMP_GEMM_PACKED_F32] = {.mc = 128, .kc = 256, .nc = 2048},
                     [AMP_GEMM_PACKED_BF16_PAIRS] = {.mc = 128, .kc = 256, .nc = 2048}},
    [AMP_ISA_AVX2] = {[AMP_GEMM_PACKED_F32] = {.mc = 144, .kc = 512, .nc = 2048},
                      [AMP_GEMM_PACKED_BF16_PAIRS] = {.mc = 144, .kc = 512, .nc = 2048}},
    [AMP_ISA_AVX512] = {[AMP_GEMM_PACKED_F32] = {.mc = 144, .kc = 512, .nc = 2048},
                        [AMP_GEMM_PACKED_BF16_PAIRS] = {.mc = 144, .kc = 1024, .nc = 2048}},
};

static amp_gemm_kernels tables[AMP_ISA_COUNT];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static int round_down(int x, int unit) { return x < unit ? unit : x - x % unit; }

static void build_tables(void) {
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) amp_gemm_kernels_ref(&tables[isa]);
#if defined(__x86_64__)
    if (amp_isa_supported(AMP_ISA_AVX2)) amp_gemm_kernels_avx2(&tables[AMP_ISA_AVX2]);
    if (amp_isa_supported(AMP_ISA_AVX512)) amp_gemm_kernels_avx512(&tables[AMP_ISA_AVX512]);
#endif
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        for (int dt = AMP_F32; dt <= AMP_BF16; dt++) {
            amp_gemm_kernel *k = &tables[isa].for_dtype[dt];
            const blocks *b = &block_table[isa][k->packed];
            k->mc = round_down(b->mc, k->mr);
            k->nc = round_down(b->nc, k->nr);
            k->kc = round_down(b->kc, k->k_unit);
        }
    }
}

const amp_gemm_kernel *amp_gemm_kernel_for(amp_isa isa, amp_dtype dtype) {
    pthread_once(&tables_once, build_tables);
    if ((unsigned)dtype > AMP_BF16) return NULL;
    return &tables[(unsigned)isa < AMP_ISA_COUNT ? isa : AMP_ISA_REF].for_dtype[dtype];
}
