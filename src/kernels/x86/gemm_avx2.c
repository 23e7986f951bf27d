/* AVX2 GEMM kernels (AVX2 + FMA + F16C).
 *
 * One micro-kernel for every input dtype: f16 and bf16 are decoded exactly to fp32 while packing
 * (F16C for f16, a shift for bf16), and the 6 x 16 fp32 tile (BLIS's Haswell sgemm shape) lives in
 * 12 ymm accumulators: 6 rows x 2 vectors of 8 columns, plus 2 B vectors and 1 broadcast of A, 15
 * of the 16 ymm registers. 12 independent FMAs per k cover the 2-per-cycle, 4-cycle-latency FMA
 * pipes of current x86 cores (8 in flight needed). The C update is the same masked code for full and
 * edge tiles, so an element's bits do not depend on its position in the tile. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "../../gemm/gemm_kernels.h"

static inline float gemm_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); } /* F16C: exact, keeps subnormals */

#include "../../gemm/gemm_pack.h"

enum { MR = 6, NR = 16 };
_Static_assert(MR <= AMP_GEMM_MAX_TILE && NR <= AMP_GEMM_MAX_TILE, "tile wider than AMP_GEMM_MAX_TILE");

#define GEMM_UNROLL _Pragma("GCC unroll 6")

static inline __m256i lane_mask(int n) { /* all-ones in lanes j < n */
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline __attribute__((always_inline)) void compute_f32(int64_t kc, const float *a /* [kc][MR] */,
                                                               const float *b /* [kc][NR] */, __m256 acc[MR][2]) {
    GEMM_UNROLL
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t p = 0; p < kc; p++, a += MR, b += NR) {
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        GEMM_UNROLL
        for (int i = 0; i < MR; i++) {
            const __m256 ai = _mm256_broadcast_ss(a + i);
            acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
}

static void ukernel_f32(int64_t kc, const void *a, const void *b, float *c, int64_t ldc, int m, int n, float alpha,
                        float beta) {
    __m256 acc[MR][2];
    compute_f32(kc, a, b, acc);
    /* maskload/maskstore never touch masked-off lanes, so edge tiles stay inside C */
    const __m256i k0 = lane_mask(n), k1 = lane_mask(n - 8);
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    GEMM_UNROLL
    for (int i = 0; i < MR; i++) {
        if (i >= m) break;
        float *ci = c + i * ldc;
        __m256 r0 = _mm256_mul_ps(va, acc[i][0]), r1 = _mm256_mul_ps(va, acc[i][1]);
        if (beta != 0.0f) {
            r0 = _mm256_fmadd_ps(va, acc[i][0], _mm256_mul_ps(vb, _mm256_maskload_ps(ci, k0)));
            r1 = _mm256_fmadd_ps(va, acc[i][1], _mm256_mul_ps(vb, _mm256_maskload_ps(ci + 8, k1)));
        }
        _mm256_maskstore_ps(ci, k0, r0);
        _mm256_maskstore_ps(ci + 8, k1, r1);
    }
}

/* Tile element (i, j) to c[j * ldc + i]: through a buffer, with the scalar forms of the same
 * operations (fmaf is the FMA instruction here), so each element gets the bits ukernel_f32 gives. */
static void ukernel_f32_ct(int64_t kc, const void *a, const void *b, float *c, int64_t ldc, int m, int n, float alpha,
                           float beta) {
    __m256 acc[MR][2];
    compute_f32(kc, a, b, acc);
    float tile[MR][NR];
    for (int i = 0; i < MR; i++) {
        _mm256_storeu_ps(tile[i], acc[i][0]);
        _mm256_storeu_ps(tile[i] + 8, acc[i][1]);
    }
    for (int j = 0; j < n; j++) {
        float *cj = c + j * ldc;
        for (int i = 0; i < m; i++) cj[i] = beta == 0.0f ? alpha * tile[i][j] : fmaf(alpha, tile[i][j], beta * cj[i]);
    }
}

#define PACK_F32_FN(name, dtype)                                                                          \
    static void name(void *dst, const void *src, int64_t ld, bool trans, int64_t rows, int64_t kc, int r) { \
        if (r == MR)                                                                                      \
            gemm_pack_f32_generic(dst, src, dtype, ld, trans, rows, kc, MR);                              \
        else if (r == NR)                                                                                 \
            gemm_pack_f32_generic(dst, src, dtype, ld, trans, rows, kc, NR);                              \
        else                                                                                              \
            gemm_pack_f32_generic(dst, src, dtype, ld, trans, rows, kc, r);                               \
    }
PACK_F32_FN(pack_f32, AMP_F32)
PACK_F32_FN(pack_f16, AMP_F16)
PACK_F32_FN(pack_bf16, AMP_BF16)

void amp_gemm_kernels_avx2(amp_gemm_kernels *k) {
    static const amp_gemm_pack_fn packs[3] = {pack_f32, pack_f16, pack_bf16};
    static const char *const names[3] = {"avx2 f32 6x16", "avx2 f16->f32 6x16", "avx2 bf16->f32 6x16"};
    for (int dt = AMP_F32; dt <= AMP_BF16; dt++) {
        k->for_dtype[dt] = (amp_gemm_kernel){
            .name = names[dt],
            .ukernel = ukernel_f32,
            .ukernel_ct = ukernel_f32_ct,
            .pack = packs[dt],
            .packed = AMP_GEMM_PACKED_F32,
            .mr = MR,
            .nr = NR,
            .k_unit = 1,
            .packed_size = 4,
        };
    }
}
