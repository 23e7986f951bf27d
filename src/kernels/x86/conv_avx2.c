/* AVX2 version of conv2d's stride-1 padded-plane im2col (ops/conv_kernels.h): the reference's
 * copies (each output row of each (c, ky, kx) is ow consecutive elements of the zero-padded plane)
 * with 32-byte moves, the last one of a row overlapping the one before it, where the reference's
 * copy_bytes moves 16 bytes at a time (the portable build has no 32-byte vectors). The same bytes,
 * so the same columns (tests/test_ops_conv_pool.c compares them with the reference). Measured on
 * AMD Zen 3, one thread: the reference's im2col was 9% of the cnn's fp32 step (its conv1 forward,
 * dX's correlation and the weight gradient's columns; the AVX-512 path builds most of these
 * panels straight from the plane instead). */
#include <immintrin.h>
#include <string.h>

#include "../../ops/conv_kernels.h"

/* d[0, n) = s[0, n), n bytes; the source and destination do not overlap */
static inline void copy_row(unsigned char *d, const unsigned char *s, size_t n) {
    if (n >= 32) {
        size_t i = 0;
        for (; i + 32 < n; i += 32)
            _mm256_storeu_si256((__m256i *)(void *)(d + i), _mm256_loadu_si256((const __m256i *)(const void *)(s + i)));
        _mm256_storeu_si256((__m256i *)(void *)(d + n - 32), _mm256_loadu_si256((const __m256i *)(const void *)(s + n - 32)));
    } else if (n >= 16) {
        _mm_storeu_si128((__m128i *)(void *)d, _mm_loadu_si128((const __m128i *)(const void *)s));
        _mm_storeu_si128((__m128i *)(void *)(d + n - 16), _mm_loadu_si128((const __m128i *)(const void *)(s + n - 16)));
    } else if (n >= 8) {
        memcpy(d, s, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
        memcpy(d, s, 4);
        memcpy(d + n - 4, s + n - 4, 4);
    } else {
        for (size_t i = 0; i < n; i++) d[i] = s[i];
    }
}

void amp_conv_im2col_padded_avx2(const amp_conv_geom *g, const void *x, size_t es, int64_t b0, int64_t nb, int64_t b,
                                 void *col) {
    const int64_t p_img = g->oh * g->ow, ld = nb * p_img, wp = g->w + 2 * g->pad, hp = g->h + 2 * g->pad;
    _Alignas(64) unsigned char pad[AMP_CONV_PAD_PLANE_BYTES];
    memset(pad, 0, (size_t)(hp * wp) * es); /* the border stays zero; the interior is rewritten per plane */
    for (int64_t c = 0; c < g->c; c++) {
        const unsigned char *plane = (const unsigned char *)x + (size_t)(((b0 + b) * g->c + c) * g->h * g->w) * es;
        for (int64_t iy = 0; iy < g->h; iy++)
            copy_row(pad + (size_t)((iy + g->pad) * wp + g->pad) * es, plane + (size_t)(iy * g->w) * es,
                     (size_t)g->w * es);
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < g->kw; kx++) {
                const int64_t r = (c * g->kh + ky) * g->kw + kx;
                unsigned char *dst = (unsigned char *)col + (size_t)(r * ld + b * p_img) * es;
                const unsigned char *src = pad + (size_t)(ky * wp + kx) * es;
                for (int64_t oy = 0; oy < g->oh; oy++)
                    copy_row(dst + (size_t)(oy * g->ow) * es, src + (size_t)(oy * wp) * es, (size_t)g->ow * es);
            }
    }
}
