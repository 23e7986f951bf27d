/* Register-level pieces of the AVX-512 12 x 32 tile that gemm_avx512.c's micro-kernels and
 * conv_avx512.c's direct tiles share: lane masks, the 16 x 16 in-register transpose and the C^T
 * tile update. One copy, so the two kernels' stores give the same bits by construction. Included
 * only by files compiled with the AVX-512 flags. */
#ifndef AMP_TILE_AVX512_H
#define AMP_TILE_AVX512_H

#include <immintrin.h>
#include <stdint.h>

enum { AMP_TILE_MR = 12 }; /* the tile's rows; 2 x 16 columns */

/* Loops over registers must be unrolled completely, or their arrays of vectors live on the stack. */
#define UNROLL_ALL _Pragma("GCC unroll 16")

/* The first n lanes (none for n <= 0, all for n >= 16). */
static inline __mmask16 mask16(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* In-register transpose: on return v[c] holds column c of the 16 x 16 input rows v[0..15]. */
static inline __attribute__((always_inline)) void transpose16(__m512 v[16]) {
    __m512 t[16];
    UNROLL_ALL
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
    }
    UNROLL_ALL
    for (int g = 0; g < 4; g++) { /* v[4g + j], lane L: column 4L + j of rows 4g..4g+3 */
        v[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        v[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        v[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        v[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    UNROLL_ALL
    for (int j = 0; j < 4; j++) { /* gather the four row groups' 128-bit pieces of each column */
        t[j] = _mm512_shuffle_f32x4(v[j], v[4 + j], 0x88);
        t[j + 4] = _mm512_shuffle_f32x4(v[j], v[4 + j], 0xDD);
        t[j + 8] = _mm512_shuffle_f32x4(v[8 + j], v[12 + j], 0x88);
        t[j + 12] = _mm512_shuffle_f32x4(v[8 + j], v[12 + j], 0xDD);
    }
    UNROLL_ALL
    for (int j = 0; j < 4; j++) {
        v[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
        v[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xDD);
        v[j + 4] = _mm512_shuffle_f32x4(t[j + 4], t[j + 12], 0x88);
        v[j + 12] = _mm512_shuffle_f32x4(t[j + 4], t[j + 12], 0xDD);
    }
}

/* The same update for a tile of C^T: tile element (i, j) is c[j * ldc + i]. Each half of the tile
 * is transposed in registers (rows 12..15 zero), so tile column j becomes one masked 12-lane row
 * of C; the arithmetic per element is the same as store_tile's. */
static inline __attribute__((always_inline)) void store_tile_transposed(__m512 acc[AMP_TILE_MR][2], float *c, int64_t ldc,
                                                                        int m, int n, float alpha, float beta) {
    const __mmask16 km = mask16(m);
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int h = 0; h < 2; h++) {
        __m512 v[16];
        UNROLL_ALL
        for (int i = 0; i < 16; i++) v[i] = i < AMP_TILE_MR ? acc[i][h] : _mm512_setzero_ps();
        transpose16(v);
        UNROLL_ALL
        for (int j = 0; j < 16; j++) {
            if (16 * h + j >= n) break;
            float *cj = c + (16 * h + j) * ldc;
            const __m512 r = beta == 0.0f ? _mm512_mul_ps(va, v[j])
                                          : _mm512_fmadd_ps(va, v[j], _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(km, cj)));
            _mm512_mask_storeu_ps(cj, km, r);
        }
    }
}

#endif
