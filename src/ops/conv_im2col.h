/* Internal: conv2d's stride-1 padded-plane im2col (conv_kernels.h), the loop written once for the
 * reference (conv.c, with the portable row copy below) and the AVX2 version (kernels/x86/
 * conv_avx2.c, with 32-byte moves): each image plane is copied into a zero-bordered plane, and each
 * output row of each (c, ky, kx) is then ow consecutive elements of it. `copy` is a constant at each
 * inlined call, so the row copy inlines too. */
#ifndef AMP_CONV_IM2COL_H
#define AMP_CONV_IM2COL_H

#include <string.h>

#include "conv_kernels.h"

/* d[0, n) = s[0, n), n >= 2 bytes. Up to 128 bytes (the cnn's fp32 rows are 112) as a few
 * fixed-size pieces that may overlap (no loop, which gcc would turn back into a memcpy call); longer
 * rows call memcpy, whose cost they amortize. */
static inline void amp_conv_copy_bytes(unsigned char *restrict d, const unsigned char *restrict s, size_t n) {
    if (n > 128) {
        memcpy(d, s, n);
    } else if (n > 64) {
        for (size_t i = 0; i < 64; i += 16) memcpy(d + i, s + i, 16);
        for (size_t i = 64; i > 0; i -= 16) memcpy(d + n - i, s + n - i, 16);
    } else if (n > 32) {
        memcpy(d, s, 16);
        memcpy(d + 16, s + 16, 16);
        memcpy(d + n - 32, s + n - 32, 16);
        memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 16) {
        memcpy(d, s, 16);
        memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 8) {
        memcpy(d, s, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
        memcpy(d, s, 4);
        memcpy(d + n - 4, s + n - 4, 4);
    } else {
        memcpy(d, s, 2);
        memcpy(d + n - 2, s + n - 2, 2);
    }
}

typedef void (*amp_conv_copy_fn)(unsigned char *restrict d, const unsigned char *restrict s, size_t n);

static inline __attribute__((always_inline)) void amp_conv_im2col_padded_loop(const amp_conv_geom *g, const void *x,
                                                                               size_t es, int64_t b0, int64_t nb,
                                                                               int64_t b, void *col, amp_conv_copy_fn copy) {
    const int64_t p_img = g->oh * g->ow, ld = nb * p_img, wp = g->w + 2 * g->pad, hp = g->h + 2 * g->pad;
    _Alignas(64) unsigned char pad[AMP_CONV_PAD_PLANE_BYTES];
    memset(pad, 0, (size_t)(hp * wp) * es); /* the border stays zero; the interior is rewritten per plane */
    for (int64_t c = 0; c < g->c; c++) {
        const unsigned char *plane = (const unsigned char *)x + (size_t)(((b0 + b) * g->c + c) * g->h * g->w) * es;
        for (int64_t iy = 0; iy < g->h; iy++)
            copy(pad + (size_t)((iy + g->pad) * wp + g->pad) * es, plane + (size_t)(iy * g->w) * es, (size_t)g->w * es);
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < g->kw; kx++) {
                const int64_t r = (c * g->kh + ky) * g->kw + kx;
                unsigned char *dst = (unsigned char *)col + (size_t)(r * ld + b * p_img) * es;
                const unsigned char *src = pad + (size_t)(ky * wp + kx) * es;
                for (int64_t oy = 0; oy < g->oh; oy++)
                    copy(dst + (size_t)(oy * g->ow) * es, src + (size_t)(oy * wp) * es, (size_t)g->ow * es);
            }
    }
}

#endif /* AMP_CONV_IM2COL_H */
