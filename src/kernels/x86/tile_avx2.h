/* Register-level pieces of the AVX2 6 x 16 tile that gemm_avx2.c's micro-kernels and conv_avx2.c's
 * direct tile share: lane masks, the 6-lane moves, the 8 x 8 in-register transpose and the C^T tile
 * update. One copy, so the two kernels' stores give the same bits by construction. Included only by
 * files compiled with the AVX2 flags. */
#ifndef AMP_TILE_AVX2_H
#define AMP_TILE_AVX2_H

#include <immintrin.h>
#include <stdint.h>

enum { AMP_TILE_AVX2_MR = 6, AMP_TILE_AVX2_NR = 16 }; /* the tile: 6 rows x 2 vectors of 8 columns */

#define UNROLL_8 _Pragma("GCC unroll 8") /* loops over registers unroll completely, or their vectors live on the stack */

static inline __m256i lane_mask(int n) { /* all-ones in lanes j < n */
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* lanes 0-5 of v to d[0, 6), and d[0, 6) into lanes 0-5 (6, 7 zero): plain moves, 4 + 2 lanes (a
 * full 8-lane move would reach past a 6-row panel or a C^T column; a masked one is microcoded on AMD) */
static inline void store6(float *d, __m256 v) {
    _mm_storeu_ps(d, _mm256_castps256_ps128(v));
    _mm_storel_pi((__m64 *)(void *)(d + 4), _mm256_extractf128_ps(v, 1));
}

static inline __m256 load6(const float *d) {
    return _mm256_set_m128(_mm_loadl_pi(_mm_setzero_ps(), (const __m64 *)(const void *)(d + 4)), _mm_loadu_ps(d));
}

/* In-register transpose of an 8 x 8 block: on return v[j] holds column j of the rows v[0..7]. */
static inline __attribute__((always_inline)) void transpose8(__m256 v[8]) {
    __m256 t[8];
    UNROLL_8
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
    }
    UNROLL_8
    for (int g = 0; g < 2; g++) { /* v[4g + j], 128-bit half h: column 4h + j of rows 4g..4g+3 */
        v[4 * g + 0] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        v[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        v[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        v[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    UNROLL_8
    for (int j = 0; j < 4; j++) {
        t[j] = _mm256_permute2f128_ps(v[j], v[4 + j], 0x20);
        t[j + 4] = _mm256_permute2f128_ps(v[j], v[4 + j], 0x31);
    }
    UNROLL_8
    for (int j = 0; j < 8; j++) v[j] = t[j];
}

/* C^T = alpha * acc + beta * C^T on the tile's m x n part, tile element (i, j) at c[j * ldc + i]
 * (beta == 0: C unread): each half of the tile is transposed in registers (rows 6 and 7 zero), so
 * tile column j becomes one 6-lane row of C, with store_tile's arithmetic per element (the same
 * bits); plain moves for full rows (m = 6), masked ones at the edge. */
static inline __attribute__((always_inline)) void store_tile_transposed(__m256 acc[AMP_TILE_AVX2_MR][2], float *c,
                                                                        int64_t ldc, int m, int n, float alpha,
                                                                        float beta) {
    const __m256i km = lane_mask(m);
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    UNROLL_8
    for (int h = 0; h < 2; h++) {
        __m256 v[8];
        UNROLL_8
        for (int i = 0; i < 8; i++) v[i] = i < AMP_TILE_AVX2_MR ? acc[i][h] : _mm256_setzero_ps();
        transpose8(v);
        UNROLL_8
        for (int j = 0; j < 8; j++) {
            if (8 * h + j >= n) break;
            float *cj = c + (8 * h + j) * ldc;
            if (m == AMP_TILE_AVX2_MR) {
                store6(cj, beta == 0.0f ? _mm256_mul_ps(va, v[j])
                                        : _mm256_fmadd_ps(va, v[j], _mm256_mul_ps(vb, load6(cj))));
                continue;
            }
            const __m256 r = beta == 0.0f ? _mm256_mul_ps(va, v[j])
                                          : _mm256_fmadd_ps(va, v[j], _mm256_mul_ps(vb, _mm256_maskload_ps(cj, km)));
            _mm256_maskstore_ps(cj, km, r);
        }
    }
}

#endif
