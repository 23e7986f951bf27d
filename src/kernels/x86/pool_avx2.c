/* AVX2 versions of max pooling's kernel 2, stride 2 rows (kernels/pool_kernels.h): the same picks
 * and bits as the reference (src/kernels/ref/pool_ref.c). */
#include <immintrin.h>

#include "../pool_kernels.h"
#include "pool_avx2.h"

/* The cnn's rows are 14 and 7 windows: in a row of 8 or more, a tail is the row's last 8 windows once
 * more, over the blocks' last (the same values, plain moves); a row of under 8 goes through one vector
 * with masked loads (lanes past the row read as 0; their windows are computed and dropped) and
 * stores. */
void amp_max_pool_row_k2_avx2(const float *r0, const float *r1, int64_t ow, float *y, uint8_t *offsets) {
    const int64_t ox = max_pool_k2_blocks(r0, r1, ow, y, offsets);
    __m256 m;
    __m256i k;
    if (ox >= 8 && ox < ow) {
        max_pool_k2_blocks(r0 + 2 * (ow - 8), r1 + 2 * (ow - 8), 8, y + ow - 8, offsets + ow - 8);
    } else if (ox < ow) {
        const int n = (int)(ow - ox);
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i in_lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * n), lane);     /* 2n input elements */
        const __m256i in_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * n - 8), lane);
        const __m256i out = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);           /* n outputs */
        max_pool_k2_x8(_mm256_maskload_ps(r0 + 2 * ox, in_lo), _mm256_maskload_ps(r0 + 2 * ox + 8, in_hi),
                       _mm256_maskload_ps(r1 + 2 * ox, in_lo), _mm256_maskload_ps(r1 + 2 * ox + 8, in_hi), &m, &k);
        _mm256_maskstore_ps(y + ox, out, m);
        uint8_t bytes[8];
        _mm_storel_epi64((__m128i *)(void *)bytes, offsets_to_bytes(k));
        for (int i = 0; i < n; i++) offsets[ox + i] = bytes[i];
    }
}

void amp_max_pool_backward_row_k2_avx2(const float *g, const uint8_t *offsets, int64_t ow, float *d0, float *d1) {
    const int64_t ox = max_pool_backward_k2_blocks(g, offsets, ow, d0, d1);
    if (ox == ow) return;
    if (ox >= 8) { /* the row's last 8 windows once more, over the blocks' last: the same values, plain stores */
        max_pool_backward_k2_blocks(g + ow - 8, offsets + ow - 8, 8, d0 + 2 * (ow - 8), d1 + 2 * (ow - 8));
        return;
    }
    /* a row of under 8 windows in scalar code: four masked stores (slow on AMD: microcoded) cost more */
    amp_max_pool_backward_row_k2_ref(g + ox, offsets + ox, ow - ox, d0 + 2 * ox, d1 + 2 * ox);
}

/* The AVX2 path's max pooling entries: the fp32 rows. */
void amp_pool_kernels_avx2(amp_pool_kernels *k) {
    k->row_k2 = amp_max_pool_row_k2_avx2;
    k->backward_row_k2 = amp_max_pool_backward_row_k2_avx2;
}
