/* Reference GEMM, in portable C: the oracle (amp_gemm_ref, a naive triple loop) and the "ref" path's
 * kernel table (a plain-C micro-kernel behind the same blocked driver as the SIMD paths, so the
 * packing, blocking and threading are exercised and usable on any CPU). */
#include <stdint.h>

#include "../../core/float_bits.h"
#include "../gemm_kernels.h"

static inline float gemm_f16_to_f32(uint16_t h) { return amp_f32_from_bits(amp_f16_decode(h)); }

#include "../gemm_pack.h"

void amp_gemm_ref(amp_dtype ab_dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const void *a /* [m][lda] or [k][lda] */, int64_t lda, const void *b /* [k][ldb] or [n][ldb] */,
                  int64_t ldb, float beta, float *c /* [m][ldc] */, int64_t ldc) {
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            float *cij = &c[i * ldc + j];
            if (alpha == 0.0f || k == 0) { /* BLAS: A and B are not read */
                *cij = beta == 0.0f ? 0.0f : beta * *cij;
                continue;
            }
            float acc = 0.0f;
            for (int64_t p = 0; p < k; p++) {
                const float x = gemm_load(ab_dtype, a, trans_a ? p * lda + i : i * lda + p);
                const float y = gemm_load(ab_dtype, b, trans_b ? j * ldb + p : p * ldb + j);
                acc += x * y;
            }
            *cij = beta == 0.0f ? alpha * acc : alpha * acc + beta * *cij;
        }
    }
}

/* The ref micro-kernel: 4 x 16, small enough for the baseline's 16 SSE registers, whose inner
 * loops over j the compiler vectorizes. Each element: acc += a * b in increasing p (no FMA), then
 * alpha * acc + beta * c with two roundings. */
enum { REF_MR = 4, REF_NR = 16 };
_Static_assert(REF_MR <= AMP_GEMM_MAX_TILE && REF_NR <= AMP_GEMM_MAX_TILE, "tile wider than AMP_GEMM_MAX_TILE");

static inline void compute_ref(int64_t kc, const float *a /* [kc][REF_MR] */, const float *b /* [kc][REF_NR] */,
                               float acc[REF_MR][REF_NR]) {
    for (int64_t p = 0; p < kc; p++, a += REF_MR, b += REF_NR)
        for (int i = 0; i < REF_MR; i++)
            for (int j = 0; j < REF_NR; j++) acc[i][j] += a[i] * b[j];
}

/* Tile element (i, j) lives at c[i * row_stride + j * col_stride]. */
static inline void store_ref(float acc[REF_MR][REF_NR], float *c, int64_t row_stride, int64_t col_stride, int m, int n,
                             float alpha, float beta) {
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            float *cij = c + i * row_stride + j * col_stride;
            *cij = beta == 0.0f ? alpha * acc[i][j] : alpha * acc[i][j] + beta * *cij;
        }
    }
}

static void ukernel_ref(int64_t kc, const void *a, const void *b, float *c, int64_t ldc, int m, int n, float alpha,
                        float beta) {
    float acc[REF_MR][REF_NR] = {{0}};
    compute_ref(kc, a, b, acc);
    store_ref(acc, c, ldc, 1, m, n, alpha, beta);
}

static void ukernel_ref_ct(int64_t kc, const void *a, const void *b, float *c, int64_t ldc, int m, int n, float alpha,
                           float beta) {
    float acc[REF_MR][REF_NR] = {{0}};
    compute_ref(kc, a, b, acc);
    store_ref(acc, c, 1, ldc, m, n, alpha, beta);
}

static void pack_f32(void *dst, const void *src, int64_t ld, bool trans, int64_t rows, int64_t kc, int r) {
    gemm_pack_f32_generic(dst, src, AMP_F32, ld, trans, rows, kc, r);
}
static void pack_f16(void *dst, const void *src, int64_t ld, bool trans, int64_t rows, int64_t kc, int r) {
    gemm_pack_f32_generic(dst, src, AMP_F16, ld, trans, rows, kc, r);
}
static void pack_bf16(void *dst, const void *src, int64_t ld, bool trans, int64_t rows, int64_t kc, int r) {
    gemm_pack_f32_generic(dst, src, AMP_BF16, ld, trans, rows, kc, r);
}

void amp_gemm_kernels_ref(amp_gemm_kernels *k) {
    static const amp_gemm_pack_fn packs[3] = {pack_f32, pack_f16, pack_bf16};
    static const char *const names[3] = {"ref f32 4x16", "ref f16->f32 4x16", "ref bf16->f32 4x16"};
    for (int dt = AMP_F32; dt <= AMP_BF16; dt++) {
        k->for_dtype[dt] = (amp_gemm_kernel){
            .name = names[dt],
            .ukernel = ukernel_ref,
            .ukernel_ct = ukernel_ref_ct,
            .pack = packs[dt],
            .packed = AMP_GEMM_PACKED_F32,
            .mr = REF_MR,
            .nr = REF_NR,
            .k_unit = 1,
            .packed_size = 4,
        };
    }
}
