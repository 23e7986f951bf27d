/* AVX2 version of conv2d's stride-1 padded-plane im2col (ops/conv_kernels.h): the reference's loop
 * (ops/conv_im2col.h) with a row copy of 32-byte moves, the last one of a row overlapping the one
 * before it, where the reference's amp_conv_copy_bytes moves 16 bytes at a time (the portable build
 * has no 32-byte vectors). The same bytes, so the same columns (tests/test_ops_conv_pool.c compares
 * them with the reference). Measured on AMD Zen 3, one thread: the reference's im2col was 9% of the
 * cnn's fp32 step (its conv1 forward, dX's correlation and the weight gradient's columns; the
 * AVX-512 path builds most of these panels straight from the plane instead); this one, against it,
 * 1.03x the cnn's fp32 samples/s (1.02-1.10x at two threads). */
#include <immintrin.h>
#include <string.h>

#include "../../ops/conv_im2col.h"

/* d[0, n) = s[0, n), n >= 2 bytes; the source and destination do not overlap */
static inline void copy_row(unsigned char *restrict d, const unsigned char *restrict s, size_t n) {
    if (n >= 32) {
        size_t i = 0;
        for (; i + 32 < n; i += 32)
            _mm256_storeu_si256((__m256i *)(void *)(d + i), _mm256_loadu_si256((const __m256i *)(const void *)(s + i)));
        _mm256_storeu_si256((__m256i *)(void *)(d + n - 32), _mm256_loadu_si256((const __m256i *)(const void *)(s + n - 32)));
    } else {
        amp_conv_copy_bytes(d, s, n); /* n >= 2: an fp32 or 16-bit row */
    }
}

void amp_conv_im2col_padded_avx2(const amp_conv_geom *g, const void *x, size_t es, int64_t b0, int64_t nb, int64_t b,
                                 void *col) {
    amp_conv_im2col_padded_loop(g, x, es, b0, nb, b, col, copy_row);
}
