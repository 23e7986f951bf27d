/* Internal: fp32 -> 16-bit encoding helpers on eight AVX2 lanes (the bf16 rounding, the canonical
 * NaN, the pack to u16), shared by the conversion kernels (convert_avx2.c) and the convolution's
 * fused bias + store (conv_avx2.c), so both round as amp_convert does: to nearest even on the bits,
 * NaN -> sign | 0x7FC0. */
#ifndef AMP_BF16_AVX2_H
#define AMP_BF16_AVX2_H

#include <immintrin.h>
#include <stdint.h>

/* Packs eight 32-bit lanes holding values <= 0xFFFF into eight u16, in order. */
static inline __m128i pack_u32_to_u16(__m256i r) {
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* The canonical NaN of a 16-bit format with each fp32 lane's sign: (sign << 15) | nan_bits. */
static inline __m256i canonical_nan16(__m256i x, uint32_t nan_bits) {
    return _mm256_or_si256(_mm256_slli_epi32(_mm256_srli_epi32(x, 31), 15), _mm256_set1_epi32((int)nan_bits));
}

/* Each lane's fp32 bits x rounded to bf16 in its low 16 bits (high 16 zero); with saturate,
 * magnitudes above the largest finite (inf included) clip to it, else they round to inf. */
static inline __m256i bf16_from_f32x8(__m256i x, int saturate) {
    const __m256i one = _mm256_set1_epi32(1);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    if (saturate) { /* magnitudes above the largest finite (including inf) clip to it */
        __m256i mag = _mm256_and_si256(r, _mm256_set1_epi32(0x7FFF));
        __m256i clipped = _mm256_min_epu32(mag, _mm256_set1_epi32(0x7F7F));
        r = _mm256_or_si256(_mm256_and_si256(r, _mm256_set1_epi32(0x8000)), clipped);
    }
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
    return _mm256_blendv_epi8(r, canonical_nan16(x, 0x7FC0u), nan);
}

#endif
