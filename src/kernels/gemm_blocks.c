/* The GEMM micro-kernels' cache blocks per path (BLIS's per-configuration blksz table), set on each
 * path's GEMM kernels when the kernel table is built (kernels.c). */
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
 * Chosen with `amp bench gemm` for a core with a 32 KiB L1D and 1 MiB of L2: kc = 512 (f32) and
 * 1024 (bf16 pairs: 512 pairs) keep the A panel in L1 while making few passes over C (a smaller kc
 * passes over C more often). Each value is rounded down to a multiple of the tile it blocks. The AVX2 kernel's A panel
 * has 6 rows, so kc = 512 keeps it at 12 KiB; the ref path's values only need to be sane.
 * AMX's tiles (32 x 32, 2 KiB of A and of B per 32 k): kc = 512 and nc = 1024 keep the B block at
 * 1 MiB, within a 2 MiB L2; chosen with `amp bench gemm --threads 1` and GPT-2's step on such a core
 * against kc = 256 to 1024 and nc = 256 to 2048. */
static const blocks block_table[AMP_ISA_COUNT][AMP_GEMM_PACKED_COUNT] = {
    [AMP_ISA_REF] = {[AMP_GEMM_PACKED_F32] = {.mc = 128, .kc = 256, .nc = 2048},
                     [AMP_GEMM_PACKED_BF16_PAIRS] = {.mc = 128, .kc = 256, .nc = 2048},
                     [AMP_GEMM_PACKED_BF16_TILES] = {.mc = 128, .kc = 256, .nc = 2048}},
    [AMP_ISA_AVX2] = {[AMP_GEMM_PACKED_F32] = {.mc = 144, .kc = 512, .nc = 2048},
                      [AMP_GEMM_PACKED_BF16_PAIRS] = {.mc = 144, .kc = 512, .nc = 2048},
                      [AMP_GEMM_PACKED_BF16_TILES] = {.mc = 144, .kc = 512, .nc = 2048}},
    [AMP_ISA_AVX512] = {[AMP_GEMM_PACKED_F32] = {.mc = 144, .kc = 512, .nc = 2048},
                        [AMP_GEMM_PACKED_BF16_PAIRS] = {.mc = 144, .kc = 1024, .nc = 2048},
                        [AMP_GEMM_PACKED_BF16_TILES] = {.mc = 128, .kc = 512, .nc = 1024}},
};

static int round_down(int x, int unit) { return x < unit ? unit : x - x % unit; }

void amp_gemm_kernels_set_blocks(amp_gemm_kernels *t, amp_isa isa) {
    /* for_dtype, then for_dtype8 (AMP_DTYPE_COUNT + dt), then bf16_dot, bf16_dot8 and bf16_tiles */
    for (int e = 0; e < 2 * AMP_DTYPE_COUNT + 3; e++) {
        amp_gemm_kernel *k = e < AMP_DTYPE_COUNT             ? &t->for_dtype[e]
                             : e < 2 * AMP_DTYPE_COUNT       ? &t->for_dtype8[e - AMP_DTYPE_COUNT]
                             : e == 2 * AMP_DTYPE_COUNT     ? &t->bf16_dot
                             : e == 2 * AMP_DTYPE_COUNT + 1 ? &t->bf16_dot8
                                                             : &t->bf16_tiles;
        if (!k->ukernel) continue;
        const blocks *b = &block_table[isa][k->packed];
        k->mc = round_down(b->mc, k->mr);
        k->nc = round_down(b->nc, k->nr);
        k->kc = round_down(b->kc, k->k_unit);
    }
}
