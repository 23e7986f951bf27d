/* The AVX2 pieces of max pooling's kernel 2, stride 2 rows that pool_avx2.c and pool_avx512.c share:
 * eight windows at a time, forward and backward, and a row's whole blocks of 8. Included only by
 * files compiled with the AVX2 flags. */
#ifndef AMP_POOL_AVX2_H
#define AMP_POOL_AVX2_H

#include <immintrin.h>
#include <stdint.h>

/* Eight windows at a time from their rows' 16 + 16 elements: the even and odd elements split by
 * shuffles (in the lane order 0 1 4 5 2 3 6 7, put back at the end), then the scalar picks as compare
 * masks and blends: (v > max, ordered) | (v unordered with itself), which is (v > max) | (v != v).
 * *y gets the maxima, *k their offsets as int32 lanes. */
static inline void max_pool_k2_x8(__m256 t0, __m256 t1, __m256 u0, __m256 u1, __m256 *y, __m256i *k) {
    const __m256 a = _mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m256 b = _mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1));
    const __m256 c = _mm256_shuffle_ps(u0, u1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m256 d = _mm256_shuffle_ps(u0, u1, _MM_SHUFFLE(3, 1, 3, 1));
    __m256 m = a, o = _mm256_setzero_ps();
    __m256 t = _mm256_or_ps(_mm256_cmp_ps(b, m, _CMP_GT_OQ), _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
    m = _mm256_blendv_ps(m, b, t), o = _mm256_blendv_ps(o, _mm256_castsi256_ps(_mm256_set1_epi32(1)), t);
    t = _mm256_or_ps(_mm256_cmp_ps(c, m, _CMP_GT_OQ), _mm256_cmp_ps(c, c, _CMP_UNORD_Q));
    m = _mm256_blendv_ps(m, c, t), o = _mm256_blendv_ps(o, _mm256_castsi256_ps(_mm256_set1_epi32(2)), t);
    t = _mm256_or_ps(_mm256_cmp_ps(d, m, _CMP_GT_OQ), _mm256_cmp_ps(d, d, _CMP_UNORD_Q));
    m = _mm256_blendv_ps(m, d, t), o = _mm256_blendv_ps(o, _mm256_castsi256_ps(_mm256_set1_epi32(3)), t);
    *y = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(m), _MM_SHUFFLE(3, 1, 2, 0)));
    *k = _mm256_permute4x64_epi64(_mm256_castps_si256(o), _MM_SHUFFLE(3, 1, 2, 0));
}

/* int32 lanes (0..3) -> 8 bytes */
static inline __m128i offsets_to_bytes(__m256i k) {
    const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(k), _mm256_extracti128_si256(k, 1));
    return _mm_packus_epi16(w16, w16);
}

/* The row's whole blocks of 8 windows (both paths' main loop); returns the first window left. */
static inline int64_t max_pool_k2_blocks(const float *r0, const float *r1, int64_t ow, float *y, uint8_t *offsets) {
    int64_t ox = 0;
    __m256 m;
    __m256i k;
    for (; ox + 8 <= ow; ox += 8) {
        max_pool_k2_x8(_mm256_loadu_ps(r0 + 2 * ox), _mm256_loadu_ps(r0 + 2 * ox + 8), _mm256_loadu_ps(r1 + 2 * ox),
                       _mm256_loadu_ps(r1 + 2 * ox + 8), &m, &k);
        _mm256_storeu_ps(y + ox, m);
        _mm_storel_epi64((__m128i *)(void *)(offsets + ox), offsets_to_bytes(k));
    }
    return ox;
}

/* Eight windows: g + 0 masked by offset == 0, 1, 2, 3 (the same bits as the scalar selects), then
 * (0, 1) and (2, 3) interleaved into the two rows. */
static inline void max_pool_backward_k2_x8(__m256 g, __m256i k, __m256 *d0lo, __m256 *d0hi, __m256 *d1lo,
                                           __m256 *d1hi) {
    const __m256 v = _mm256_add_ps(_mm256_setzero_ps(), g);
    const __m256 w0 = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, _mm256_setzero_si256())));
    const __m256 w1 = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, _mm256_set1_epi32(1))));
    const __m256 w2 = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, _mm256_set1_epi32(2))));
    const __m256 w3 = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, _mm256_set1_epi32(3))));
    const __m256 a = _mm256_unpacklo_ps(w0, w1), b = _mm256_unpackhi_ps(w0, w1);
    const __m256 c = _mm256_unpacklo_ps(w2, w3), d = _mm256_unpackhi_ps(w2, w3);
    *d0lo = _mm256_permute2f128_ps(a, b, 0x20), *d0hi = _mm256_permute2f128_ps(a, b, 0x31);
    *d1lo = _mm256_permute2f128_ps(c, d, 0x20), *d1hi = _mm256_permute2f128_ps(c, d, 0x31);
}

/* The row's whole blocks of 8 windows (both paths' main loop); returns the first window left. */
static inline int64_t max_pool_backward_k2_blocks(const float *g, const uint8_t *offsets, int64_t ow, float *d0,
                                                  float *d1) {
    int64_t ox = 0;
    __m256 a, b, c, d;
    for (; ox + 8 <= ow; ox += 8) {
        const __m256i k = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(offsets + ox)));
        max_pool_backward_k2_x8(_mm256_loadu_ps(g + ox), k, &a, &b, &c, &d);
        _mm256_storeu_ps(d0 + 2 * ox, a), _mm256_storeu_ps(d0 + 2 * ox + 8, b);
        _mm256_storeu_ps(d1 + 2 * ox, c), _mm256_storeu_ps(d1 + 2 * ox + 8, d);
    }
    return ox;
}

#endif /* AMP_POOL_AVX2_H */
