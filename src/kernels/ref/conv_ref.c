/* Reference kernels of conv2d (src/ops/conv.c; conv_kernels.h declares them): im2col and col2im,
 * general and through a zero-padded plane (stride 1), the implicit GEMM's column panels, the bias
 * gradient's sums and the forward's row store. They are the oracle the SIMD versions in
 * src/kernels/x86/conv_*.c are tested against bit for bit, and the path every CPU can run. */
#include <string.h>

#include "../convert_kernels.h"
#include "../../core/float_bits.h"
#include "../conv_kernels.h"

typedef amp_conv_geom conv_geom;

/* Output columns ox in [*lo, *hi) read inside the image for kernel column kx (ix = ox*s - p + kx). */
static void valid_range(int64_t kx, int64_t stride, int64_t pad, int64_t width, int64_t out_w, int64_t *lo,
                        int64_t *hi) {
    /* ix >= 0  <=>  ox >= ceil((pad - kx) / stride);  ix < width  <=>  ox < ceil((width + pad - kx) / stride) */
    const int64_t a = pad - kx, b = width + pad - kx;
    int64_t l = a <= 0 ? 0 : (a + stride - 1) / stride, h = b <= 0 ? 0 : (b + stride - 1) / stride;
    if (h > out_w) h = out_w;
    if (l > h) l = h;
    *lo = l, *hi = h;
}

/* im2col of image b0 + b of x (contiguous, element size es) into its columns [b*P, (b+1)*P) of col
 * [K, nb*P]. */
void amp_conv_im2col_ref(const conv_geom *g, const void *x, size_t es, int64_t b0, int64_t nb, int64_t b, void *col) {
    const int64_t p_img = amp_conv_geom_p(g), ld = nb * p_img;
    for (int64_t c = 0; c < g->c; c++) {
        const unsigned char *plane = (const unsigned char *)x + (size_t)(((b0 + b) * g->c + c) * g->h * g->w) * es;
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < g->kw; kx++) {
                const int64_t r = (c * g->kh + ky) * g->kw + kx;
                int64_t lo, hi;
                valid_range(kx, g->stride, g->pad, g->w, g->ow, &lo, &hi);
                unsigned char *dst = (unsigned char *)col + (size_t)(r * ld + b * p_img) * es;
                for (int64_t oy = 0; oy < g->oh; oy++, dst += (size_t)g->ow * es) {
                    const int64_t iy = oy * g->stride - g->pad + ky;
                    if (iy < 0 || iy >= g->h || lo == hi) {
                        memset(dst, 0, (size_t)g->ow * es);
                        continue;
                    }
                    const unsigned char *src = plane + (size_t)(iy * g->w + lo * g->stride - g->pad + kx) * es;
                    memset(dst, 0, (size_t)lo * es);
                    if (g->stride == 1) {
                        memcpy(dst + (size_t)lo * es, src, (size_t)(hi - lo) * es);
                    } else if (es == 2) {
                        uint16_t *d16 = (uint16_t *)(void *)(dst + (size_t)lo * es);
                        const uint16_t *s16 = (const uint16_t *)(const void *)src;
                        for (int64_t i = 0; i < hi - lo; i++) d16[i] = s16[i * g->stride];
                    } else {
                        uint32_t *d32 = (uint32_t *)(void *)(dst + (size_t)lo * es);
                        const uint32_t *s32 = (const uint32_t *)(const void *)src;
                        for (int64_t i = 0; i < hi - lo; i++) d32[i] = s32[i * g->stride];
                    }
                    memset(dst + (size_t)hi * es, 0, (size_t)(g->ow - hi) * es);
                }
            }
    }
}

/* col2im of image b0 + b: adds its columns of dcol [K, nb*P] (fp32) into dx [N, C, H, W] (fp32). */
/* d[i] += s[i]: stride 1's contiguous rows, in blocks of 8, then one of 4, with a fixed inner count
 * so gcc's -O2 vectorizer takes them (the same additions in the same order as the strided loop).
 * Inline, with the block of 4: the cnn's rows are 14 and 28 elements, called per row. */
static inline void add_row(float *restrict d, const float *restrict s, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) d[i + k] += s[i + k];
    if (i + 4 <= n) {
        for (int k = 0; k < 4; k++) d[i + k] += s[i + k];
        i += 4;
    }
    for (; i < n; i++) d[i] += s[i];
}

void amp_conv_col2im_ref(const conv_geom *g, const float *dcol, int64_t b0, int64_t nb, int64_t b, float *dx) {
    const int64_t p_img = amp_conv_geom_p(g), ld = nb * p_img;
    for (int64_t c = 0; c < g->c; c++) {
        float *plane = dx + ((b0 + b) * g->c + c) * g->h * g->w;
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < g->kw; kx++) {
                const int64_t r = (c * g->kh + ky) * g->kw + kx;
                int64_t lo, hi;
                valid_range(kx, g->stride, g->pad, g->w, g->ow, &lo, &hi);
                const float *src = dcol + r * ld + b * p_img;
                for (int64_t oy = 0; oy < g->oh; oy++, src += g->ow) {
                    const int64_t iy = oy * g->stride - g->pad + ky;
                    if (iy < 0 || iy >= g->h) continue;
                    float *dst = plane + iy * g->w;
                    if (g->stride == 1)
                        add_row(dst + lo - g->pad + kx, src + lo, hi - lo);
                    else
                        for (int64_t ox = lo; ox < hi; ox++) dst[ox * g->stride - g->pad + kx] += src[ox];
                }
            }
    }
}

/* ---- stride 1 through a zero-padded copy of each plane ----
 * With stride 1 the row of col for (c, ky, kx) is the padded plane's window at (ky, kx): each output
 * row oy is the contiguous run padded[oy + ky][kx .. kx + W'), so im2col is one short copy per row,
 * with no bounds to work out and no zeros to write (the border is zeroed once per image), and col2im
 * adds into the padded plane without bounds, then copies the interior out. Rows are short (14 and
 * 28 elements in the cnn): memcpy and memset calls per row cost more than the copies, so rows are
 * copied in fixed-size pieces the compiler inlines (amp_conv_copy_bytes). Used while the padded plane fits on the stack. */
#define CONV_PAD_PLANE_BYTES AMP_CONV_PAD_PLANE_BYTES

bool amp_conv_padded_ok(const conv_geom *g) {
    return g->stride == 1 && (size_t)((g->h + 2 * g->pad) * (g->w + 2 * g->pad)) * 4 <= CONV_PAD_PLANE_BYTES;
}

void amp_conv_im2col_padded_ref(const conv_geom *g, const void *x, size_t es, int64_t b0, int64_t nb, int64_t b,
                                void *col) {
    const int64_t p_img = amp_conv_geom_p(g), ld = nb * p_img, wp = g->w + 2 * g->pad, hp = g->h + 2 * g->pad;
    _Alignas(64) unsigned char pad[CONV_PAD_PLANE_BYTES];
    memset(pad, 0, (size_t)(hp * wp) * es); /* the border stays zero; the interior is rewritten per plane */
    for (int64_t c = 0; c < g->c; c++) {
        const unsigned char *plane = (const unsigned char *)x + (size_t)(((b0 + b) * g->c + c) * g->h * g->w) * es;
        for (int64_t iy = 0; iy < g->h; iy++)
            amp_conv_copy_bytes(pad + (size_t)((iy + g->pad) * wp + g->pad) * es, plane + (size_t)(iy * g->w) * es,
                                (size_t)g->w * es);
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < g->kw; kx++) {
                const int64_t r = (c * g->kh + ky) * g->kw + kx;
                unsigned char *dst = (unsigned char *)col + (size_t)(r * ld + b * p_img) * es;
                const unsigned char *src = pad + (size_t)(ky * wp + kx) * es;
                for (int64_t oy = 0; oy < g->oh; oy++)
                    amp_conv_copy_bytes(dst + (size_t)(oy * g->ow) * es, src + (size_t)(oy * wp) * es,
                                        (size_t)g->ow * es);
            }
    }
}

/* Writes (not adds) image b0 + b's planes of dx: the additions onto each element are amp_conv_col2im_ref's,
 * in its order, starting from the padded plane's zero, so the bits are those of amp_conv_col2im_ref into a
 * zeroed dx. */
void amp_conv_col2im_padded_ref(const conv_geom *g, const float *dcol, int64_t b0, int64_t nb, int64_t b, float *dx) {
    const int64_t p_img = amp_conv_geom_p(g), ld = nb * p_img, wp = g->w + 2 * g->pad, hp = g->h + 2 * g->pad;
    _Alignas(64) float pad[CONV_PAD_PLANE_BYTES / sizeof(float)];
    for (int64_t c = 0; c < g->c; c++) {
        memset(pad, 0, (size_t)(hp * wp) * sizeof *pad);
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < g->kw; kx++) {
                const int64_t r = (c * g->kh + ky) * g->kw + kx;
                const float *src = dcol + r * ld + b * p_img;
                for (int64_t oy = 0; oy < g->oh; oy++) add_row(pad + (oy + ky) * wp + kx, src + oy * g->ow, g->ow);
            }
        float *plane = dx + ((b0 + b) * g->c + c) * g->h * g->w;
        for (int64_t iy = 0; iy < g->h; iy++)
            amp_conv_copy_bytes((unsigned char *)(plane + iy * g->w),
                                (const unsigned char *)(pad + (iy + g->pad) * wp + g->pad), (size_t)g->w * sizeof *plane);
    }
}

/* ---- implicit GEMM: column panels from the padded chunk (conv_kernels.h) ---- */

int64_t amp_conv_pixel_offset(const amp_conv_implicit *ci, int64_t i) {
    const conv_geom *g = ci->g;
    const int64_t p_img = amp_conv_geom_p(g), wp = g->w + 2 * g->pad, hp = g->h + 2 * g->pad;
    const int64_t b = i / p_img, e = i % p_img;
    return b * g->c * hp * wp + e / g->ow * wp + e % g->ow;
}

void amp_conv_pack_panel_ref(const amp_conv_implicit *ci, void *dst, int64_t i0, int64_t rows, int64_t p0, int64_t kc,
                             int r) {
    const bool pairs = ci->es == 2;
    const int64_t kc_pad = pairs ? (kc + 1) / 2 * 2 : kc;
    for (int64_t ii = 0; ii < r; ii++) {
        const int64_t po = ii < rows ? amp_conv_pixel_offset(ci, i0 + ii) : 0;
        for (int64_t p = 0; p < kc_pad; p++) {
            const bool real = ii < rows && p < kc;
            if (pairs) {
                const uint16_t v = real ? ((const uint16_t *)ci->xp)[po + ci->koff[p0 + p]] : 0;
                ((uint16_t *)dst)[(p / 2) * 2 * r + 2 * ii + p % 2] = v;
            } else {
                const uint32_t v = real ? ((const uint32_t *)ci->xp)[po + ci->koff[p0 + p]] : 0; /* the bits */
                ((uint32_t *)dst)[p * r + ii] = v;
            }
        }
    }
}

void amp_conv_pack_panel_k_ref(const amp_conv_implicit *ci, void *dst, int64_t j0, int64_t rows, int64_t p0,
                               int64_t kc, int r) {
    const bool pairs = ci->es == 2;
    const int64_t kc_pad = pairs ? (kc + 1) / 2 * 2 : kc;
    for (int64_t ii = 0; ii < r; ii++) {
        const int64_t ko = ii < rows ? ci->koff[j0 + ii] : 0;
        for (int64_t p = 0; p < kc_pad; p++) {
            const bool real = ii < rows && p < kc;
            const int64_t at = real ? amp_conv_pixel_offset(ci, p0 + p) + ko : 0;
            if (pairs) {
                const uint16_t v = real ? ((const uint16_t *)ci->xp)[at] : 0;
                ((uint16_t *)dst)[(p / 2) * 2 * r + 2 * ii + p % 2] = v;
            } else {
                const uint32_t v = real ? ((const uint32_t *)ci->xp)[at] : 0;
                ((uint32_t *)dst)[p * r + ii] = v;
            }
        }
    }
}

/* ---- the forward's output rows ---- */

/* d[i] = s[i] + bo, and d[i] += bo, in blocks of 16 with a fixed inner count, which gcc's -O2
 * vectorizer takes (it leaves the plain loop scalar). */
static void add_scalar_to(float *restrict d, const float *restrict s, float bo, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int q = 0; q < 16; q++) d[i + q] = s[i + q] + bo;
    for (; i < n; i++) d[i] = s[i] + bo;
}
static void add_scalar(float *d, float bo, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int q = 0; q < 16; q++) d[i + q] += bo;
    for (; i < n; i++) d[i] += bo;
}

void amp_conv_store_row_ref(void *out, amp_dtype out_dt, float *y, const float *bias, int64_t n) {
    if (out_dt == AMP_F32) {
        if (bias)
            add_scalar_to((float *)out, y, *bias, n);
        else
            memcpy(out, y, (size_t)n * sizeof *y);
        return;
    }
    if (bias) add_scalar(y, *bias, n);
    amp_convert_kernels_for(amp_isa_active())->encode[out_dt][0](out, y, (size_t)n); /* amp_convert's rounding */
}

/* ---- the bias gradient's sums ---- */

/* The fp32 sum of v[0, n) in eight interleaved partial sums (element i into sum i % 8), combined
 * pairwise, then the tail: a fixed order, so fixed bits, and a vectorizable one (one sum in order
 * is a chain of dependent adds, bound by their latency). */
float amp_conv_sum_f32_ref(const float *v, int64_t n) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += v[i + k];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += v[i];
    return s;
}

/* amp_conv_sum_f32_ref of bf16 values, widened as they are read (exact: the bits shifted up), so
 * the same sum in the same order without a decoded fp32 copy. */
float amp_conv_sum_bf16_ref(const uint16_t *v, int64_t n) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += amp_f32_from_bits(amp_bf16_decode(v[i + k]));
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += amp_f32_from_bits(amp_bf16_decode(v[i]));
    return s;
}

/* amp_conv_sum_bf16_ref of four rows of n values at once, out[j] for v + j*stride: the same
 * operations in the same order for each, four independent chains of adds instead of one (one sum is
 * bound by its adds' latency). The reference of the AVX-512 version (conv_kernels.h). */
void amp_conv_sum_bf16_x4_ref(const uint16_t *v, int64_t stride, int64_t n, float out[4]) {
    float acc[4][8] = {{0}};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 8; k++) acc[j][k] += amp_f32_from_bits(amp_bf16_decode(v[j * stride + i + k]));
    for (int j = 0; j < 4; j++) {
        const float *a = acc[j];
        float s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        for (int64_t t = i; t < n; t++) s += amp_f32_from_bits(amp_bf16_decode(v[j * stride + t]));
        out[j] = s;
    }
}

/* The reference path's conv2d entries (kernels/kernels.h): no fused store, implicit panels or direct
 * tiles, which the ops then do without. */
void amp_conv_kernels_ref(amp_conv_kernels *k) {
    k->im2col_padded = amp_conv_im2col_padded_ref;
    k->col2im_padded = amp_conv_col2im_padded_ref;
    k->sum_bf16_x4 = amp_conv_sum_bf16_x4_ref;
}
