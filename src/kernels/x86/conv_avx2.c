/* AVX2 versions of conv2d's direct tile and its bf16 forward store (kernels/conv_kernels.h). The AVX2
 * path has no im2col of its own: every product that would take the padded-plane im2col takes the
 * direct tiles instead (conv.c's avx2_direct_kernel). */
#include <immintrin.h>

#include "../../core/float_bits.h"
#include "../conv_kernels.h"
#include "bf16_avx2.h"
#include "tile_avx2.h"

/* The direct tile (src/gemm/conv_gemm.c's direct product): gemm_avx2.c's compute_strided with the
 * implicit operand's element (i, p) read from xp[rows[i] + steps[p]] instead of a packed panel: the
 * same FMAs in the same order, then the same C^T update (tile_avx2.h), so the bits of
 * amp_conv_pack_panel_ref's 6-row panel through ukernel_f32_ct. The step's pointer at row 0's offset
 * is the base of each broadcast's address and the other 5 rows' offsets from row 0 the indexes, held
 * in general registers (conv_avx512.c's layout, which keeps fewer registers busy than a pointer per
 * row). */
void amp_conv_direct_tile_avx2(const float *xp, const int32_t *steps, const int32_t rows[6], int64_t kc,
                               const float *bpanel, float *c, int64_t ldc, int m, int n, float beta) {
    enum { R = AMP_TILE_AVX2_MR, NR = AMP_TILE_AVX2_NR };
    __m256 acc[R][2];
    int64_t rel[R];
    UNROLL_8
    for (int i = 0; i < R; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps(), rel[i] = (int64_t)rows[i] - rows[0];
    const float *x0 = xp + rows[0], *b = bpanel;
    for (int64_t p = 0; p < kc; p++, b += NR) {
        const float *xe = x0 + steps[p];
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        UNROLL_8
        for (int i = 0; i < R; i++) {
            const __m256 ai = _mm256_broadcast_ss(i == 0 ? xe : xe + rel[i]);
            acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
    store_tile_transposed(acc, c, ldc, m, n, 1.0f, beta);
}

/* ---- the forward's store ----
 * out[i] = bf16(y[i] + bias): the fp32 add, then amp_convert's rounding (bf16_avx2.h), in one pass
 * where conv.c added the bias in place and then converted (two passes over the row). The tail's
 * fewer than 8 elements take the scalar encoder on the same sum. */
void amp_conv_store_bf16_avx2(uint16_t *out, const float *y, float bias, int64_t n) {
    const __m256 vb = _mm256_set1_ps(bias);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i r = bf16_from_f32x8(_mm256_castps_si256(_mm256_add_ps(_mm256_loadu_ps(y + i), vb)), 0);
        _mm_storeu_si128((void *)(out + i), pack_u32_to_u16(r));
    }
    for (; i < n; i++) out[i] = amp_bf16_encode(amp_f32_bits(y[i] + bias), AMP_OVERFLOW_INF);
}

/* amp_conv_direct_tile_avx2 in the table's form (conv_kernels.h): fp32 only, es is 4 */
static void direct_tile(const void *xp, size_t es, const int32_t *steps, const int32_t *rows, int64_t kc,
                        const void *bpanel, float *c, int64_t ldc, int m, int n, float beta) {
    (void)es;
    amp_conv_direct_tile_avx2(xp, steps, rows, kc, bpanel, c, ldc, m, n, beta);
}

/* The AVX2 path's conv2d entries: the fused store, and the direct tile for every stride-1 fp32
 * product (no implicit panels here). */
void amp_conv_kernels_avx2(amp_conv_kernels *k) {
    k->store_bf16 = amp_conv_store_bf16_avx2;
    k->direct_tile = direct_tile;
    k->direct_mr = AMP_TILE_AVX2_MR;
    k->direct_nr = AMP_TILE_AVX2_NR;
    k->direct_every = true;
}
