/* 2-D convolution (PyTorch's conv2d: cross-correlation, zero padding, groups = 1) lowered to amp_gemm
 * through im2col.
 *
 * Why im2col and not a direct loop: the GEMM is the only kernel amp has that is blocked, vectorized
 * and threaded, and im2col keeps its operands in the compute dtype, so f16/bf16 convolutions run the
 * low-precision GEMM paths (fp32 accumulation) instead of a scalar fp32 loop; a direct convolution as
 * fast would need its own per-ISA kernels. Measured on the cnn model's layers, batch 128, forward and
 * forward + backward (dx, dW, db), 1 thread, thread CPU time, best of 7, AMD EPYC (Zen 4, AVX-512),
 * gcc 12 -O2; "direct" is a 6-loop fp32 convolution (inner loop along an output row) built the same
 * way:
 *                                         im2col+GEMM f32   im2col+GEMM bf16   direct f32
 *     Conv2d(1, 32, 5, pad 2), 28x28:       6.7 / 23 ms        5.0 / 17 ms      28 / 93 ms
 *     Conv2d(32, 64, 5, pad 2), 14x14:     52 / 150 ms        32 / 97 ms       445 / 1285 ms
 * (forward / forward + backward). The im2col, col2im and permutation passes run on the thread pool
 * too, one task per image or channel.
 * The price is memory: the column matrix holds C*KH*KW values per output pixel, so the batch is
 * processed in chunks whose scratch (columns, their fp32 gradient, the fp32 GEMM output) stays under
 * CONV_SCRATCH_BYTES. A chunk holds at least one image, so a single image whose columns exceed the
 * bound still runs (in one chunk, with that much scratch).
 *
 * Layout, per chunk of nb images (K = C*KH*KW, P = H'*W'):
 *   col [K, nb*P] in the compute dtype: col[(c*KH + ky)*KW + kx][b*P + oy*W' + ox] = x[b, c, iy, ix]
 *     with iy = oy*stride - pad + ky, ix = ox*stride - pad + kx (0 outside the image);
 *   forward   Y [O, nb*P] = W [O, K] col                       (fp32, + bias, rounded once into out)
 *   backward  dW [O, K] += dY [O, nb*P] col^T                   (fp32 across chunks, GEMM beta = 1)
 *             dX: stride 1 with a square kernel and pad <= k - 1 (the cnn's), the correlation of dY
 *               with the flipped kernel, [C, O*KH*KW], through the forward's path on a derived
 *               geometry (conv_dx_correlate, in its own chunks); otherwise dcol [K, nb*P] = W^T dY,
 *               then col2im adds it into dx (fp32)
 *             db [O] = sums of dY (fp32)
 * dY is the output gradient in the compute dtype (the output's dtype: exact), permuted to [O, nb*P]
 * (with nb = 1 that is dY's image [O, P] itself, used in place).
 *
 * Implicit GEMM (AVX-512, stride 1, padded plane within its bound): where the GEMM computes a
 * product as C^T (gemm.c's compute_transposed: the cnn's conv2, O = 64 against the kernel's 12 rows),
 * col is never written. Each chunk's images are copied once into zero-padded planes xp, and the
 * GEMM's pack of the col side calls back here (gemm/gemm_implicit.h) for panels built straight from
 * xp (conv_kernels.h; src/kernels/x86/conv_avx512.c): the forward's (and dX's) panels of 12 pixels,
 * the weight gradient's panels of 12 k indices (fp32 and bf16). The packed values are the ones the
 * GEMM's pack would make from col, so the bits are the same; the chunks of the backward are too
 * (dW is summed per chunk), while the forward's only bound is xp and Y. Measured on the cnn, bf16,
 * 1 thread (perf samples against the im2col version's whole step): im2col + packing 10.8% -> 8.1%
 * (the panels cost about what the packing of col did; what goes is im2col's writes and reads of
 * col; conv1, whose k = 25 keeps im2col, and dW's other operand remain). dX's correlation sums each
 * element once over O*KH*KW terms in the GEMM's order, where col2im summed the O-term sums of W^T dY
 * over the kernel's positions: other bits, the same values to fp32 rounding. Measured on the cnn,
 * 1 thread, interleaved A/B against col2im and the fp32 columns of dW: amp-bf16 +1.3% samples/s
 * (col2im's 3.9% goes, dX's panels cost 4%, the GEMM, k = 1600 into 32 rows instead of k = 64 into
 * 800, gets faster); fp32 about even (dX's panels cost what col2im and the fp32 dcol did).
 *
 * Direct tiles (every flipped implicit product: the forward's, dX's and the weight gradient's): no
 * implicit panels at all; conv.c runs the GEMM's loops itself and a copy of its 12 x 32 kernel
 * reads the implicit operand straight from xp (conv_gemm_direct). Same bits. Measured on the cnn's
 * conv2 alone (forward + backward, 1 thread, thread CPU time, min of 10): bf16 46.0 -> 42.1 ms,
 * fp32 87 -> 74.5 ms (the forward and dX: 46.0 -> 43.3 and 87 -> 79).
 * On AVX2 (no implicit panels there) every stride-1 product within the plane's bound takes the
 * direct tiles, 6 x 16, in either orientation (avx2_direct_kernel says why the bits allow it), bf16
 * and f16 on an fp32 padded chunk: im2col (9% of the cnn's fp32 step at two threads on Zen 3) and
 * the packing of col (most of another 14%) go. Measured on AMD Zen 3 (2 vCPUs), cnn, old and new
 * binaries alternating: fp32 1.20-1.36x samples/s at one thread, 1.32-1.45x at two; amp-bf16 1.33x
 * and 1.37x; amp-fp16 1.20x and 1.13x. */
#include <stdlib.h>
#include <string.h>

#include "../core/parallel.h"
#include "amp/cpu.h"
#include "amp/formats.h"
#include "amp/gemm.h"
#include "../core/float_bits.h"
#include "../gemm/gemm_implicit.h"
#include "../kernels/convert_kernels.h"
#include "../kernels/conv_kernels.h"
#include "grad_sink_gemm.h"
#include "op_util.h"

/* Scratch bound per chunk of images: columns, their fp32 gradient and the fp32 GEMM output. About
 * one core's L2 (2 MiB on Zen 4), so im2col's columns are still in cache when the GEMM packs them and
 * the GEMM's fp32 output when col2im and the store read it; with 64 MiB every pass streamed from
 * DRAM. Measured on the cnn model, amp-bf16, 1 thread, CPU time of a fixed run (median of 3): 64 MiB
 * 1.93 s, 8 MiB 1.80 s, 2 MiB 1.65 s. The chunk depends on the shapes only, not the thread count. */
#ifndef CONV_SCRATCH_BYTES
#define CONV_SCRATCH_BYTES ((int64_t)2 << 20)
#endif
/* Below this many elements a pass runs on the calling thread: waking the pool costs more. */
#define CONV_MIN_PARALLEL_ELEMENTS ((int64_t)1 << 15)

typedef amp_conv_geom conv_geom;

static int64_t geom_k(const conv_geom *g) { return g->c * g->kh * g->kw; }
static int64_t geom_p(const conv_geom *g) { return g->oh * g->ow; }

/* Images per chunk, so that nb * per_image_bytes <= CONV_SCRATCH_BYTES (at least 1). */
static int64_t chunk_images(const conv_geom *g, int64_t per_image_bytes) {
    int64_t nb = per_image_bytes > 0 ? CONV_SCRATCH_BYTES / per_image_bytes : g->n;
    if (nb < 1) nb = 1;
    return nb < g->n ? nb : g->n;
}

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
    const int64_t p_img = geom_p(g), ld = nb * p_img;
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
    const int64_t p_img = geom_p(g), ld = nb * p_img;
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
 * copied in fixed-size pieces the compiler inlines. Used while the padded plane fits on the stack. */
#define CONV_PAD_PLANE_BYTES AMP_CONV_PAD_PLANE_BYTES

bool amp_conv_padded_ok(const conv_geom *g) {
    return g->stride == 1 && (size_t)((g->h + 2 * g->pad) * (g->w + 2 * g->pad)) * 4 <= CONV_PAD_PLANE_BYTES;
}

/* d[0, n) = s[0, n), n >= 2 bytes. Up to 128 bytes (the cnn's fp32 rows are 112) as a few
 * fixed-size pieces that may overlap (no loop, which gcc would turn back into a memcpy call); longer
 * rows call memcpy, whose cost they amortize. */
static inline void copy_bytes(unsigned char *restrict d, const unsigned char *restrict s, size_t n) {
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

void amp_conv_im2col_padded_ref(const conv_geom *g, const void *x, size_t es, int64_t b0, int64_t nb, int64_t b,
                                void *col) {
    const int64_t p_img = geom_p(g), ld = nb * p_img, wp = g->w + 2 * g->pad, hp = g->h + 2 * g->pad;
    _Alignas(64) unsigned char pad[CONV_PAD_PLANE_BYTES];
    memset(pad, 0, (size_t)(hp * wp) * es); /* the border stays zero; the interior is rewritten per plane */
    for (int64_t c = 0; c < g->c; c++) {
        const unsigned char *plane = (const unsigned char *)x + (size_t)(((b0 + b) * g->c + c) * g->h * g->w) * es;
        for (int64_t iy = 0; iy < g->h; iy++)
            copy_bytes(pad + (size_t)((iy + g->pad) * wp + g->pad) * es, plane + (size_t)(iy * g->w) * es,
                       (size_t)g->w * es);
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < g->kw; kx++) {
                const int64_t r = (c * g->kh + ky) * g->kw + kx;
                unsigned char *dst = (unsigned char *)col + (size_t)(r * ld + b * p_img) * es;
                const unsigned char *src = pad + (size_t)(ky * wp + kx) * es;
                for (int64_t oy = 0; oy < g->oh; oy++)
                    copy_bytes(dst + (size_t)(oy * g->ow) * es, src + (size_t)(oy * wp) * es, (size_t)g->ow * es);
            }
    }
}

/* Writes (not adds) image b0 + b's planes of dx: the additions onto each element are amp_conv_col2im_ref's,
 * in its order, starting from the padded plane's zero, so the bits are those of amp_conv_col2im_ref into a
 * zeroed dx. */
void amp_conv_col2im_padded_ref(const conv_geom *g, const float *dcol, int64_t b0, int64_t nb, int64_t b, float *dx) {
    const int64_t p_img = geom_p(g), ld = nb * p_img, wp = g->w + 2 * g->pad, hp = g->h + 2 * g->pad;
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
            copy_bytes((unsigned char *)(plane + iy * g->w), (const unsigned char *)(pad + (iy + g->pad) * wp + g->pad),
                       (size_t)g->w * sizeof *plane);
    }
}

void amp_conv_im2col_padded(const conv_geom *g, const void *x, size_t es, int64_t b0, int64_t nb, int64_t b, void *col) {
#if defined(__x86_64__)
    if (amp_isa_active() == AMP_ISA_AVX512) {
        amp_conv_im2col_padded_avx512(g, x, es, b0, nb, b, col);
        return;
    }
#endif
    amp_conv_im2col_padded_ref(g, x, es, b0, nb, b, col);
}

void amp_conv_col2im_padded(const conv_geom *g, const float *dcol, int64_t b0, int64_t nb, int64_t b, float *dx) {
#if defined(__x86_64__)
    if (amp_isa_active() == AMP_ISA_AVX512) {
        amp_conv_col2im_padded_avx512(g, dcol, b0, nb, b, dx);
        return;
    }
#endif
    amp_conv_col2im_padded_ref(g, dcol, b0, nb, b, dx);
}

/* ---- implicit GEMM: column panels from the padded chunk (conv_kernels.h) ---- */

int64_t amp_conv_pixel_offset(const amp_conv_implicit *ci, int64_t i) {
    const conv_geom *g = ci->g;
    const int64_t p_img = geom_p(g), wp = g->w + 2 * g->pad, hp = g->h + 2 * g->pad;
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

typedef bool (*panel_simd_fn)(const amp_conv_implicit *, void *, int64_t, int64_t, int64_t, int64_t, int);
typedef void (*panel_ref_fn)(const amp_conv_implicit *, void *, int64_t, int64_t, int64_t, int64_t, int);

/* Slices of a 32-row panel that simd_2x16 packs at a time (even: pairs stay whole) */
#define PANEL_SLICE 64

/* A panel of r = 32 rows (the kernel's nr, where the GEMM does not compute C^T) from two 16-row
 * panels of the SIMD version, PANEL_SLICE columns at a time: both layouts keep a k unit's rows
 * together (fp32: column p at p*r; pairs: pair q at q*2r), so a k unit of the 32-row panel is the
 * 16-row panels' k units, one after the other (64 bytes each). The same values as the reference's
 * 32-row panel; false (the panel then left to the reference) where the SIMD version declines. */
static bool simd_2x16(const amp_conv_implicit *ci, const amp_gemm_kernel *kern, unsigned char *panel, int64_t i0,
                      int64_t rows, int64_t p0, int64_t kc, panel_simd_fn simd_fn) {
    _Alignas(64) unsigned char half[2][16 * PANEL_SLICE * 4];
    const size_t unit = (size_t)(16 * kern->k_unit * kern->packed_size); /* bytes of one k unit, 16 rows */
    if (unit != 64) return false;
    for (int64_t s0 = 0; s0 < kc; s0 += PANEL_SLICE) {
        const int64_t n = kc - s0 < PANEL_SLICE ? kc - s0 : PANEL_SLICE, units = (n + kern->k_unit - 1) / kern->k_unit;
        for (int h = 0; h < 2; h++) {
            const int64_t hr = rows - 16 * h < 16 ? rows - 16 * h : 16;
            if (hr <= 0)
                memset(half[h], 0, (size_t)units * unit);
            else if (!simd_fn(ci, half[h], i0 + 16 * h, hr, p0 + s0, n, 16))
                return false;
        }
        unsigned char *d = panel + (size_t)(s0 / kern->k_unit) * 2 * unit;
        for (int64_t u = 0; u < units; u++) {
            memcpy(d + (size_t)u * 2 * unit, half[0] + (size_t)u * unit, unit);
            memcpy(d + (size_t)u * 2 * unit + unit, half[1] + (size_t)u * unit, unit);
        }
    }
    return true;
}

/* Packs columns [j0, j0 + cols) of the implicit operand as consecutive panels of r, each by the
 * AVX-512 version when the path is active and it takes the panel (r = 32: simd_2x16), else by the
 * reference. */
static void pack_panels(const amp_conv_implicit *ci, const amp_gemm_kernel *kern, void *dst, int64_t j0, int64_t cols,
                        int64_t p0, int64_t kc, int r, panel_simd_fn simd_fn, panel_ref_fn ref_fn) {
    const size_t panel_bytes = (size_t)r * (size_t)((kc + kern->k_unit - 1) / kern->k_unit * kern->k_unit) *
                               (size_t)kern->packed_size;
    const bool simd = simd_fn && amp_isa_active() == AMP_ISA_AVX512;
    for (int64_t t = 0; t * r < cols; t++) {
        unsigned char *panel = (unsigned char *)dst + (size_t)t * panel_bytes;
        const int64_t i0 = j0 + t * r, rows = cols - t * r < r ? cols - t * r : r;
        if (simd && (r == 32 ? simd_2x16(ci, kern, panel, i0, rows, p0, kc, simd_fn) : simd_fn(ci, panel, i0, rows, p0, kc, r)))
            continue;
        ref_fn(ci, panel, i0, rows, p0, kc, r);
    }
}

#if defined(__x86_64__)
#define PANEL_SIMD(f) f
#else
#define PANEL_SIMD(f) NULL
#endif

/* The weight gradient's pack callback: panels of r k indices. */
static void conv_pack_k_cb(const void *arg, const amp_gemm_kernel *kern, void *dst, int64_t j0, int64_t cols,
                           int64_t p0, int64_t kc, int r) {
    pack_panels(arg, kern, dst, j0, cols, p0, kc, r, PANEL_SIMD(amp_conv_pack_panel_k_avx512),
                amp_conv_pack_panel_k_ref);
}

/* The GEMM's pack callback: panels of r pixels. */
static void conv_pack_cb(const void *arg, const amp_gemm_kernel *kern, void *dst, int64_t j0, int64_t cols, int64_t p0,
                         int64_t kc, int r) {
    pack_panels(arg, kern, dst, j0, cols, p0, kc, r, PANEL_SIMD(amp_conv_pack_panel_avx512), amp_conv_pack_panel_ref);
}

/* dY's chunk as a GEMM operand packed straight from dY [N, O, P]: M = dY permuted, [O, nb*P] (rows:
 * output channels, columns: the chunk's pixels), each panel's columns split at image boundaries
 * into runs that are plain [rows, len] matrices of row stride P, each packed by the kernel's own
 * pack at its column offset in the panel (the packed layouts put column p of a panel at p*r
 * elements, in pairs for bf16: so the runs start at even columns, P even, when k_unit = 2). The
 * values are those the kernel packs from the permuted copy, so are the bits. */
typedef struct {
    const conv_geom *g;
    const unsigned char *gy; /* dY [N, O, P] in the compute dtype */
    size_t es;
    int64_t b0; /* the chunk's first image */
} conv_dy_src;

static void conv_pack_dy_cb(const void *arg, const amp_gemm_kernel *kern, void *dst, int64_t j0, int64_t cols,
                            int64_t p0, int64_t kc, int r) {
    const conv_dy_src *d = arg;
    const int64_t p_img = geom_p(d->g);
    const size_t ps = (size_t)kern->packed_size;
    const size_t panel_bytes = (size_t)r * (size_t)((kc + kern->k_unit - 1) / kern->k_unit * kern->k_unit) * ps;
    for (int64_t t = 0; t * r < cols; t++) {
        unsigned char *panel = (unsigned char *)dst + (size_t)t * panel_bytes;
        const int64_t o0 = j0 + t * r, rows = cols - t * r < r ? cols - t * r : r;
        for (int64_t p = p0; p < p0 + kc;) {
            const int64_t b = p / p_img, e = p % p_img, len = p_img - e < p0 + kc - p ? p_img - e : p0 + kc - p;
            const unsigned char *src = d->gy + (size_t)(((d->b0 + b) * d->g->o + o0) * p_img + e) * d->es;
            kern->pack(panel + (size_t)((p - p0) * r) * ps, src, p_img, false, rows, len, r);
            p += len;
        }
    }
}

/* koff [K] and pix [nb*P] of amp_conv_implicit, for chunks of up to nb images. */
static void implicit_tables(const conv_geom *g, int64_t nb, int32_t *koff, int32_t *pix) {
    const int64_t hp = g->h + 2 * g->pad, wp = g->w + 2 * g->pad;
    for (int64_t c = 0, r = 0; c < g->c; c++)
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < g->kw; kx++) koff[r++] = (int32_t)((c * hp + ky) * wp + kx);
    const amp_conv_implicit ci = {.g = g};
    for (int64_t i = 0; i < nb * geom_p(g); i++) pix[i] = (int32_t)amp_conv_pixel_offset(&ci, i);
}

/* Whether the GEMM computes C^T (gemm.c's compute_transposed: panels of mr columns of the implicit
 * operand) for every chunk size used, nb_max images and the last chunk's: the weight gradient's
 * dW [O, K] (k = nb*P) or the forward's Y [O, nb*P] (k = K). */
static bool flips_every_chunk(const conv_geom *g, amp_dtype dt, int64_t nb_max, bool weight_grad) {
    const int64_t k = geom_k(g), p_img = geom_p(g), last = g->n % nb_max;
    for (int i = 0; i < 2; i++) {
        const int64_t nb = i == 0 ? nb_max : last;
        if (nb == 0) continue;
        const bool flips = weight_grad ? amp_gemm_computes_transposed(dt, g->o, k, nb * p_img)
                                       : amp_gemm_computes_transposed(dt, g->o, nb * p_img, k);
        if (!flips) return false;
    }
    return true;
}

/* The AVX-512 GEMM kernel for dt when the implicit panels can feed it: stride 1 within the padded
 * plane's bound, and the kernel's packed format one the panels' SIMD code writes (fp32 -> fp32, bf16
 * -> VDPBF16PS pairs); else NULL. */
static const amp_gemm_kernel *panel_kernel(const conv_geom *g, amp_dtype dt) {
    if (!amp_conv_padded_ok(g) || amp_isa_active() != AMP_ISA_AVX512) return NULL;
    const amp_gemm_kernel *kern = amp_gemm_kernel_for(amp_isa_active(), dt);
    const bool fits = kern && ((dt == AMP_F32 && kern->packed == AMP_GEMM_PACKED_F32) ||
                               (dt == AMP_BF16 && kern->packed == AMP_GEMM_PACKED_BF16_PAIRS));
    return fits ? kern : NULL;
}

/* The AVX2 GEMM kernel (6 x 16 fp32 tiles; bf16 and f16 are decoded while packing) when the direct
 * tiles (amp_conv_direct_tile_avx2) can run its products: stride 1 within the padded plane's bound,
 * fp32 (panel_dtype sends bf16 and f16 there, decoded once), in either orientation of the GEMM. Each
 * element of C is one chain of FMAs over the k block's products in order, and the same update,
 * whichever operand the tile broadcasts, so the direct tile computing C^T gives the bits of the
 * GEMM that does not flip too (the cnn's forward and dX products: O = 64 or 32 output channels fill
 * 16-column tiles as well as the pixels fill 6-row ones); AVX2 has no implicit panels. */
static const amp_gemm_kernel *avx2_direct_kernel(const conv_geom *g, amp_dtype dt) {
#if defined(__x86_64__)
    if (dt != AMP_F32 || amp_isa_active() != AMP_ISA_AVX2 || !amp_conv_padded_ok(g)) return NULL;
    const amp_gemm_kernel *kern = amp_gemm_kernel_for(AMP_ISA_AVX2, AMP_F32);
    const bool fits = kern && kern->packed == AMP_GEMM_PACKED_F32 && kern->k_unit == 1 && kern->packed_size == 4 &&
                      kern->mr == 6 && kern->nr == 16;
    return fits ? kern : NULL;
#else
    (void)g, (void)dt;
    return NULL;
#endif
}

/* The dtype the implicit panels are fed in for a product in dt: dt, or fp32 for fp16, and for bf16
 * where its GEMM is the fp32 kernel on values decoded while packing (amp_gemm_bf16_method FMA, where
 * VDPBF16PS is the slower: it packs no BF16 pairs, so the bf16 panels do not fit it; fp16 is always
 * that), where the fp32 panels fit:
 * the padded chunk (and W, or dY for the weight gradient, by the bf16 kernel's decoding pack) goes to
 * fp32 once, exactly, and the fp32 panels and direct tiles run on it: the bf16 GEMM's operations on
 * the same values (the same micro-kernel, blocks and order; tests/test_ops_conv_pool.c compares the
 * results with im2col + amp_gemm in bf16 and fp16 bit for bit). The forward's and dX's bits are the im2col
 * route's; the weight gradient's chunk of images grows (a padded fp32 image is smaller than its bf16
 * columns), so its sum over the batch, split at chunk boundaries, rounds at other places. Without
 * it the 16-bit convolutions took im2col and a decoding pack of the columns (Emerald Rapids, the cnn's
 * amp-bf16 step at two threads: 13% and 17% of the samples; in one process, this on against off:
 * 1.43x at two threads, 1.29x at one). */
static amp_dtype panel_dtype(const conv_geom *g, amp_dtype dt) {
    const amp_gemm_kernel *kern = dt == AMP_BF16 || dt == AMP_F16 ? amp_gemm_kernel_for(amp_isa_active(), dt) : NULL;
    return kern && kern->packed == AMP_GEMM_PACKED_F32 && (panel_kernel(g, AMP_F32) || avx2_direct_kernel(g, AMP_F32))
               ? AMP_F32
               : dt;
}

/* Whether the weight gradient takes the implicit GEMM: on AVX2 its direct tiles (avx2_direct_kernel),
 * else a panel_kernel, and a product computed as C^T (panels of mr k indices) for every chunk size. */
static bool implicit_dw_ok(const conv_geom *g, amp_dtype dt, int64_t nb_max) {
    if (avx2_direct_kernel(g, dt)) return true;
    const amp_gemm_kernel *kern = panel_kernel(g, dt);
    return kern && flips_every_chunk(g, dt, nb_max, true);
}

/* Whether the forward takes the implicit GEMM: on AVX2 its direct tiles (avx2_direct_kernel), else a
 * panel_kernel, and panels the SIMD code packs: mr = 12 pixels where the GEMM computes C^T, nr = 32
 * (two 16-pixel panels, simd_2x16) where it does not. The cnn's conv1 (C = 1, K = 25, not flipped)
 * went from im2col + pack_bf16_pairs to this (AVX-512): their samples 0.9% + 3.0% of the amp-bf16
 * step -> 0.5% + 2.6%, the panels' 6.0% -> 6.5% (perf, interleaved runs). */
static bool implicit_ok(const conv_geom *g, amp_dtype dt, int64_t nb_max) {
    if (avx2_direct_kernel(g, dt)) return true;
    const amp_gemm_kernel *kern = panel_kernel(g, dt);
    return kern && (kern->nr == 32 || flips_every_chunk(g, dt, nb_max, false));
}

/* The per-chunk passes around the GEMMs, run on the thread pool: one task per image (im2col, col2im,
 * the output's bias and rounding) or per output channel (dY's permutation and bias gradient). Every
 * task writes its own elements in a fixed order, so the bits do not depend on the thread count. */
typedef struct {
    const conv_geom *g;
    amp_dtype dt;
    size_t es;
    int64_t b0, nb;
    const void *x;     /* im2col source, contiguous [N, C, H, W] */
    void *col;         /* [K, nb*P] in dt */
    const float *dcol; /* [K, nb*P] fp32 */
    float *dx;         /* [N, C, H, W] fp32 */
    float *y;          /* forward GEMM output [O, nb*P] fp32 */
    const float *bias; /* [O] or NULL */
    void *out;         /* [N, O, P] in out_dt (element size out_es) */
    amp_dtype out_dt;
    size_t out_es;
    const void *gy;    /* dY [N, O, P] in dt */
    void *gp;          /* dY permuted, [O, nb*P] in dt (when copy_gp; conv_backward says when not) */
    bool copy_gp;
    float *db;         /* [O] or NULL */
    void *xp;          /* implicit GEMM: padded chunk [nb, C, Hp, Wp] in xp_dt (dt, or fp32: panel_dtype) */
    amp_dtype xp_dt;
    const amp_grad_sink *sink; /* task_store: out's values (fp32, no bias) go here instead */
} conv_pass;

/* Runs fn for tasks [0, n) on the pool, or serially for a small pass (the same per-task work, so the
 * same bits either way). */
static void run_pass(int64_t n, amp_task_fn fn, conv_pass *a, int64_t elements) {
    if (elements < CONV_MIN_PARALLEL_ELEMENTS || amp_parallel_max_threads() == 1) {
        for (int64_t t = 0; t < n; t++) fn(a, t, 0);
        return;
    }
    amp_parallel_for(n, fn, a);
}

static void task_im2col(void *arg, int64_t b, int thread_id) {
    const conv_pass *a = arg;
    (void)thread_id;
    if (amp_conv_padded_ok(a->g))
        amp_conv_im2col_padded(a->g, a->x, a->es, a->b0, a->nb, b, a->col);
    else
        amp_conv_im2col_ref(a->g, a->x, a->es, a->b0, a->nb, b, a->col);
}

/* x's image b0 + b -> the interior of its padded planes in xp (decoded to fp32 where xp_dt is fp32
 * and dt is not: panel_dtype). The border is zeroed once per product (xp_zero), not per chunk: every
 * chunk writes the same interiors over it. */
static void task_pad(void *arg, int64_t b, int thread_id) {
    const conv_pass *a = arg;
    const conv_geom *g = a->g;
    const int64_t wp = g->w + 2 * g->pad, hp = g->h + 2 * g->pad;
    const size_t xes = amp_dtype_size(a->xp_dt);
    (void)thread_id;
    unsigned char *dst = (unsigned char *)a->xp + (size_t)(b * g->c * hp * wp) * xes;
    const unsigned char *src = (const unsigned char *)a->x + (size_t)((a->b0 + b) * g->c * g->h * g->w) * a->es;
    /* The decoder looked up once per image (xp_dt is then fp32), not per row by amp_convert, whose
     * dispatch cost more than decoding a row of 28. */
    const amp_decode_kernel decode =
        a->xp_dt == a->dt ? NULL : amp_convert_kernels_for(amp_isa_active())->decode[a->dt];
    for (int64_t c = 0; c < g->c; c++)
        for (int64_t iy = 0; iy < g->h; iy++) {
            unsigned char *d = dst + (size_t)((c * hp + iy + g->pad) * wp + g->pad) * xes;
            const unsigned char *sr = src + (size_t)((c * g->h + iy) * g->w) * a->es;
            if (decode)
                decode((float *)(void *)d, sr, (size_t)g->w);
            else
                copy_bytes(d, sr, (size_t)g->w * a->es);
        }
}

/* Zeroes the padded chunk of nb_max images (the borders task_pad leaves) and the slack after it. */
static void xp_zero(void *xp, int64_t xp_bytes) { memset(xp, 0, (size_t)xp_bytes + AMP_CONV_IMPLICIT_SLACK); }

static void task_col2im(void *arg, int64_t b, int thread_id) {
    const conv_pass *a = arg;
    (void)thread_id;
    if (amp_conv_padded_ok(a->g))
        amp_conv_col2im_padded(a->g, a->dcol, a->b0, a->nb, b, a->dx);
    else
        amp_conv_col2im_ref(a->g, a->dcol, a->b0, a->nb, b, a->dx);
}

/* d[i] = s[i] + bo, and d[i] += bo, in blocks of 16 with a fixed inner count, which gcc's -O2
 * vectorizer takes (the plain loop stayed scalar: 2% of the cnn's bf16 step). */
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

/* y [O, nb*P] -> out [b0 + b, O, P]: bias added in fp32, then the one rounding (fp32: the sum is
 * written straight into out, no copy). */
static void task_store(void *arg, int64_t b, int thread_id) {
    const conv_pass *a = arg;
    const int64_t p_img = geom_p(a->g), ld = a->nb * p_img;
    (void)thread_id;
    if (a->sink) { /* the image's O rows of P values, straight into the gradient (sink's contract) */
        const amp_gemm_epilogue ep = amp_sink_epilogue(a->sink, (a->b0 + b) * a->g->o * p_img, p_img);
        amp_gemm_epilogue_apply(&ep, a->y + b * p_img, ld, a->g->o, p_img);
        return;
    }
    /* The path's fused bias + bf16 store (conv_kernels.h), chosen once per image; else add, then convert. */
    void (*store_bf16)(uint16_t *, const float *, float, int64_t) = NULL;
#if defined(__x86_64__)
    if (a->bias && a->out_dt == AMP_BF16) {
        const amp_isa isa = amp_isa_active();
        store_bf16 = isa == AMP_ISA_AVX512 ? amp_conv_store_bf16_avx512
                     : isa == AMP_ISA_AVX2 ? amp_conv_store_bf16_avx2
                                           : NULL;
    }
#endif
    for (int64_t o = 0; o < a->g->o; o++) {
        float *yo = a->y + o * ld + b * p_img;
        unsigned char *dst = (unsigned char *)a->out + (size_t)(((a->b0 + b) * a->g->o + o) * p_img) * a->out_es;
        if (a->out_dt == AMP_F32) {
            if (a->bias)
                add_scalar_to((float *)(void *)dst, yo, a->bias[o], p_img);
            else
                memcpy(dst, yo, (size_t)p_img * sizeof *yo);
            continue;
        }
        if (store_bf16) {
            store_bf16((uint16_t *)(void *)dst, yo, a->bias[o], p_img);
            continue;
        }
        if (a->bias) add_scalar(yo, a->bias[o], p_img);
        amp_convert(dst, a->out_dt, yo, AMP_F32, (size_t)p_img);
    }
}

/* The fp32 sum of v[0, n) in eight interleaved partial sums (element i into sum i % 8), combined
 * pairwise, then the tail: a fixed order, so fixed bits, and a vectorizable one (one sum in order
 * is a chain of dependent adds, 4 cycles each: 4% of the cnn's step for the bias gradients). */
static float sum_f32(const float *v, int64_t n) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += v[i + k];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += v[i];
    return s;
}

/* sum_f32 of bf16 values, widened as they are read (exact: the bits shifted up), so the same sum
 * in the same order without amp_convert's fp32 copy (its decode pass was 1% of the cnn's bf16
 * step). */
static float sum_bf16(const uint16_t *v, int64_t n) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += amp_f32_from_bits(amp_bf16_decode(v[i + k]));
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += amp_f32_from_bits(amp_bf16_decode(v[i]));
    return s;
}

/* sum_bf16 of four rows of n values at once, out[j] for v + j*stride: the same operations in the same
 * order for each, four independent chains of adds instead of one (sum_bf16 is bound by its adds'
 * latency; the cnn's bias gradients sum 4.8M bf16 a step). The reference of the AVX-512 version
 * (conv_kernels.h). */
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

/* amp_conv_sum_bf16_x4_ref's bits, by the active path's version: gcc kept the reference's 32
 * partial sums on the stack (a load, an add and a store per 4 lanes, each chain through memory):
 * 1.4% of the cnn's bf16 step. */
static void sum_bf16_x4(const uint16_t *v, int64_t stride, int64_t n, float out[4]) {
#if defined(__x86_64__)
    if (amp_isa_active() == AMP_ISA_AVX512) {
        amp_conv_sum_bf16_x4_avx512(v, stride, n, out);
        return;
    }
#endif
    amp_conv_sum_bf16_x4_ref(v, stride, n, out);
}

/* dY [b0.., O, P] -> gp [O, nb*P] for output channel o (nb > 1); db[o] += its sum in fp32. */
static void task_permute_grad(void *arg, int64_t o, int thread_id) {
    const conv_pass *a = arg;
    const int64_t p_img = geom_p(a->g), ld = a->nb * p_img;
    float chunk[256];
    (void)thread_id;
    int64_t b = 0;
    if (a->dt == AMP_BF16 && a->db) /* four images at a time: each image's sum as below, then added in order */
        for (; b + 4 <= a->nb; b += 4) {
            const int64_t img = a->g->o * p_img;
            const uint16_t *src = (const uint16_t *)a->gy + ((a->b0 + b) * a->g->o + o) * p_img;
            float s[4] = {0.0f, 0.0f, 0.0f, 0.0f}, part[4];
            for (int j = 0; j < 4 && a->copy_gp; j++)
                memcpy((uint16_t *)a->gp + o * ld + (b + j) * p_img, src + j * img, (size_t)p_img * sizeof *src);
            for (int64_t i0 = 0; i0 < p_img; i0 += 256) {
                sum_bf16_x4(src + i0, img, p_img - i0 < 256 ? p_img - i0 : 256, part);
                for (int j = 0; j < 4; j++) s[j] += part[j];
            }
            for (int j = 0; j < 4; j++) a->db[o] += s[j];
        }
    for (; b < a->nb; b++) {
        const unsigned char *src = (const unsigned char *)a->gy + (size_t)(((a->b0 + b) * a->g->o + o) * p_img) * a->es;
        if (a->copy_gp) memcpy((unsigned char *)a->gp + (size_t)(o * ld + b * p_img) * a->es, src, (size_t)p_img * a->es);
        if (!a->db) continue;
        float s = 0.0f;
        for (int64_t i0 = 0; i0 < p_img; i0 += 256) {
            const int64_t n = p_img - i0 < 256 ? p_img - i0 : 256;
            const float *v = (const float *)(const void *)(src + (size_t)i0 * a->es);
            if (a->dt == AMP_BF16) {
                s += sum_bf16((const uint16_t *)(const void *)(src + (size_t)i0 * a->es), n);
                continue;
            }
            if (a->dt != AMP_F32) {
                amp_convert(chunk, AMP_F32, src + (size_t)i0 * a->es, a->dt, (size_t)n);
                v = chunk;
            }
            s += sum_f32(v, n);
        }
        a->db[o] += s;
    }
}

static int conv_gemm(amp_ctx *ctx, amp_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                     int64_t lda, const void *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    int st =
        amp_gemm(dt, ta, tb, m, n, k, 1.0f, a, lda > 0 ? lda : 1, b, ldb > 0 ? ldb : 1, beta, c, ldc > 0 ? ldc : 1);
    if (st != AMP_OK) amp_ctx_fail(ctx, st, "conv2d: amp_gemm failed: %s", amp_status_str(st));
    return st;
}

/* conv_gemm with B implicit, packed by cb (gemm_implicit.h), A not transposed, alpha 1 */
static int conv_gemm_implicit(amp_ctx *ctx, amp_dtype dt, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                              amp_gemm_pack_cb cb, const void *cb_arg, float beta, float *c, int64_t ldc) {
    int st = amp_gemm_implicit_b(dt, false, m, n, k, 1.0f, a, lda > 0 ? lda : 1, cb, cb_arg, beta, c, ldc > 0 ? ldc : 1,
                                 NULL);
    if (st != AMP_OK) amp_ctx_fail(ctx, st, "conv2d: amp_gemm failed: %s", amp_status_str(st));
    return st;
}

/* ---- the direct product: the implicit GEMM's flipped case without its implicit panels ----
 * Where the GEMM would compute C^T with the AVX-512 12 x 32 kernel and the implicit operand on the
 * 12-row side (flips_every_chunk: the forward's and dX's pixels, the weight gradient's k indices),
 * or on AVX2 with its 6 x 16 kernel (avx2_direct_kernel: either orientation's bits), conv.c runs its
 * loops here instead: the stored operand (W, or dY's permuted copy) packed as the GEMM packs it,
 * then each mr-row tile x nr columns by amp_conv_direct_tile_avx512 (or _avx2), which reads the
 * implicit operand straight from the padded chunk instead of a packed panel. The GEMM's k blocks are
 * kept (kern->kc from 0, the first one's sum stored with beta, each later one added), so each
 * element gets the GEMM's operations in its order: the same bits. Per k block, the tiles of a block
 * of rows are one task. */
#define DIRECT_MAX_TILE_ROWS 12 /* the kernels' mr: 12 (AVX-512) or 6 (AVX2) */
#define DIRECT_TASK_ROWS 144    /* a multiple of both */

typedef struct {
    const amp_conv_implicit *ci;
    const amp_gemm_kernel *kern;
    const int32_t *rows;     /* [m] offsets in xp of the tiles' rows: ci->pix, or (weight gradient) ci->koff */
    const int32_t *steps;    /* [k] offsets of the steps: ci->koff, or ci->pix */
    const unsigned char *bp; /* the stored operand's packed panels (direct_pack) */
    size_t blk_bytes;        /* per k block: direct_block_bytes (conv_gemm_direct sets it) */
    int64_t m, n, k; /* C^T [m, n] (element (i, j) at c[j * ldc + i]) = rows x steps x the stored [n, k] */
    float beta, *c;
    int64_t ldc;
    int64_t pc; /* the k block being run (a multiple of kern->kc), or -1: all of them */
} conv_direct;

/* Bytes of the stored operand's packed panels (of the kernel's nr columns) per k block, and the
 * number of k blocks. */
static size_t direct_block_bytes(const amp_gemm_kernel *kern, int64_t n, int64_t k, int64_t *blocks) {
    const int64_t kcb = kern->kc < k ? kern->kc : k, unit = kern->k_unit;
    *blocks = (k + kern->kc - 1) / kern->kc;
    const int64_t n_pad = (n + kern->nr - 1) / kern->nr * kern->nr;
    return (size_t)(n_pad * ((kcb + unit - 1) / unit * unit)) * (size_t)kern->packed_size;
}

/* One tile's k blocks [pc0, pc1) (multiples of kern->kc), in order. */
static void direct_tile_blocks(const conv_direct *d, const int32_t ro[DIRECT_MAX_TILE_ROWS], int64_t i0, int rows,
                               int64_t pc0, int64_t pc1) {
    const amp_gemm_kernel *kern = d->kern;
    for (int64_t pc = pc0; pc < pc1; pc += kern->kc) {
        const int64_t kc = d->k - pc < kern->kc ? d->k - pc : kern->kc;
        const size_t kc_pad = (size_t)((kc + kern->k_unit - 1) / kern->k_unit * kern->k_unit);
        const unsigned char *bblock = d->bp + (size_t)(pc / kern->kc) * d->blk_bytes;
        for (int64_t jr = 0; jr < d->n; jr += kern->nr) {
            const unsigned char *bpanel = bblock + (size_t)jr * kc_pad * (size_t)kern->packed_size;
            const int cols = (int)(d->n - jr < kern->nr ? d->n - jr : kern->nr);
            float *c = d->c + i0 + jr * d->ldc;
            const float beta = pc == 0 ? d->beta : 1.0f;
#if defined(__x86_64__)
            if (kern->mr == 6) /* avx2_direct_kernel's */
                amp_conv_direct_tile_avx2(d->ci->xp, d->steps + pc, ro, kc, (const float *)(const void *)bpanel, c,
                                          d->ldc, rows, cols, beta);
            else
                amp_conv_direct_tile_avx512(d->ci->xp, d->ci->es, d->steps + pc, ro, kc, bpanel, c, d->ldc, rows, cols,
                                            beta);
#else
            (void)c, (void)beta;
            (void)bpanel, (void)cols, (void)ro, (void)i0, (void)rows;
#endif
        }
    }
}

/* The stored operand [n, k] into per-k-block panels of nr rows at bp, as the GEMM packs op(A) when it
 * computes C^T (rows 0 .. n, each k block's columns), read from images [*, n, p_img] (element size es)
 * starting at image b0: column p is image b0 + p / p_img's column p % p_img. A plain [n, k] matrix is
 * one image (p_img = k, b0 = 0: W, or dY's permuted copy). The weight gradient's dY chunk [O, nb*P]
 * is packed this way straight from dY [N, O, P] (conv_pack_dy_cb's way), so its permuted copy is not
 * made (0.4% of the cnn's bf16 step): each k block's columns split at image boundaries into runs of
 * plain [rows, len] matrices of row stride P, each packed at its column offset in the panel, 32 rows
 * at a time. Needs P % k_unit == 0 when runs split (they start at whole pairs and, but for the
 * chunk's last, end at them). */
static void direct_pack(const amp_gemm_kernel *kern, const void *src, size_t es, int64_t n, int64_t p_img, int64_t b0,
                        int64_t k, void *bp) {
    int64_t blocks;
    const size_t blk = direct_block_bytes(kern, n, k, &blocks), ps = (size_t)kern->packed_size;
    for (int64_t bi = 0; bi < blocks; bi++) {
        const int64_t pc = bi * kern->kc, kc = k - pc < kern->kc ? k - pc : kern->kc;
        const size_t kc_pad = (size_t)((kc + kern->k_unit - 1) / kern->k_unit * kern->k_unit);
        for (int64_t j0 = 0; j0 < n; j0 += kern->nr) {
            unsigned char *panel = (unsigned char *)bp + (size_t)bi * blk + (size_t)j0 * kc_pad * ps;
            const int64_t rows = n - j0 < kern->nr ? n - j0 : kern->nr;
            for (int64_t p = pc; p < pc + kc;) {
                const int64_t b = p / p_img, e = p % p_img, len = p_img - e < pc + kc - p ? p_img - e : pc + kc - p;
                const unsigned char *run = (const unsigned char *)src + (size_t)(((b0 + b) * n + j0) * p_img + e) * es;
                kern->pack(panel + (size_t)((p - pc) * kern->nr) * ps, run, p_img, false, rows, len, kern->nr);
                p += len;
            }
        }
    }
}

/* Task t: the tiles of rows [t*DIRECT_TASK_ROWS, ...), over k block d->pc, or all of them when
 * d->pc < 0. */
static void task_direct(void *arg, int64_t t, int thread_id) {
    const conv_direct *d = arg;
    (void)thread_id;
    const int64_t i_end = (t + 1) * DIRECT_TASK_ROWS < d->m ? (t + 1) * DIRECT_TASK_ROWS : d->m;
    const int64_t pc0 = d->pc < 0 ? 0 : d->pc, pc1 = d->pc < 0 ? d->k : d->pc + 1;
    const int mr = d->kern->mr;
    for (int64_t i0 = t * DIRECT_TASK_ROWS; i0 < i_end; i0 += mr) {
        const int rows = (int)(i_end - i0 < mr ? i_end - i0 : mr);
        int32_t ro[DIRECT_MAX_TILE_ROWS];
        for (int ii = 0; ii < mr; ii++) ro[ii] = d->rows[i0 + (ii < rows ? ii : 0)];
        direct_tile_blocks(d, ro, i0, rows, pc0, pc1);
    }
}

static void run_direct_tasks(conv_direct *d, int64_t tasks) {
    if (amp_parallel_max_threads() == 1 || tasks == 1)
        for (int64_t t = 0; t < tasks; t++) task_direct(d, t, 0);
    else /* rows are disjoint and each task's result its own: any thread may take any task */
        amp_parallel_for_dynamic(tasks, task_direct, d);
}

/* C^T += or = the product (d->beta). k_outer: k block by k block, each block's row tasks on the
 * pool (the weight gradient: its steps are the chunk's pixels, and a block of dY's panels, kc x 64,
 * is what stays in L2 while every tile uses it); else each tile runs all its k blocks while its
 * rows' data is in L1 (the forward: W's panels are all small). Measured on the cnn's conv2, fp32
 * (two k blocks in the forward): k_outer for the forward cost 11% of it. */
static void conv_gemm_direct(conv_direct *d, bool k_outer) {
    const int64_t tasks = (d->m + DIRECT_TASK_ROWS - 1) / DIRECT_TASK_ROWS;
    int64_t blocks;
    d->blk_bytes = direct_block_bytes(d->kern, d->n, d->k, &blocks);
    if (!k_outer) {
        d->pc = -1;
        run_direct_tasks(d, tasks);
        return;
    }
    for (d->pc = 0; d->pc < d->k; d->pc += d->kern->kc) run_direct_tasks(d, tasks);
}

/* The kernel when the forward's product (or the weight gradient's) takes the direct tiles: AVX2's
 * (avx2_direct_kernel), or the AVX-512 implicit GEMM's panel kernel with the 12 x 32 tile the direct
 * tile copies, flipped for every chunk size. */
static const amp_gemm_kernel *direct_kernel(const conv_geom *g, amp_dtype dt, int64_t nb_max, bool weight_grad) {
#if defined(__x86_64__)
    const amp_gemm_kernel *avx2 = avx2_direct_kernel(g, dt);
    if (avx2) return avx2;
    const amp_gemm_kernel *kern = panel_kernel(g, dt);
    const bool ok = kern && kern->mr == 12 && kern->nr == 32 &&
                    flips_every_chunk(g, dt, nb_max, weight_grad);
    return ok ? kern : NULL;
#else
    (void)g, (void)dt, (void)nb_max, (void)weight_grad;
    return NULL;
#endif
}

/* ---- the correlation: the forward's product, and (stride 1) the input gradient's ---- */

/* out [N, O, OH, OW] (in out_dt; or, with sink and no bias, where the sink writes fp32 values) = the correlation of x [N, C, H, W] (contiguous, in dt) with w
 * [O, C*KH*KW] (in dt) over geometry g, + bias [O] (fp32, or NULL), summed in fp32 and rounded once:
 * the forward's chunks of images, each through the implicit GEMM or im2col + GEMM. Scratch is
 * released before returning. */
static int conv_correlate(amp_ctx *ctx, const conv_geom *g, amp_dtype dt, const void *x, const void *w,
                          const float *bv, void *out, amp_dtype out_dt, const amp_grad_sink *sink) {
    const size_t es = amp_dtype_size(dt);
    const int64_t k = geom_k(g), p_img = geom_p(g), hp = g->h + 2 * g->pad, wp = g->w + 2 * g->pad;
    /* implicit GEMM: scratch per image is the padded image (in the panels' dtype) and the fp32 output;
     * else the columns too. The chunk changes no bits here: each output is one sum over K. */
    amp_dtype pdt = panel_dtype(g, dt);
    int64_t nb_max = chunk_images(g, g->c * hp * wp * (int64_t)amp_dtype_size(pdt) + p_img * g->o * 4);
    const bool implicit = implicit_ok(g, pdt, nb_max);
    if (!implicit) {
        pdt = dt;
        nb_max = chunk_images(g, p_img * (k * (int64_t)es + g->o * 4));
    }
    const size_t pes = amp_dtype_size(pdt);
    const amp_gemm_kernel *dkern = implicit ? direct_kernel(g, pdt, nb_max, false) : NULL;
    amp_arena_mark m = amp_scratch_mark(ctx);
    /* W in the panels' dtype (O x K: 200 KiB at the cnn's conv2 in fp32) */
    if (pdt != dt) {
        void *wd = amp_scratch_alloc(ctx, (size_t)(g->o * k) * pes);
        if (!wd) {
            amp_scratch_release(ctx, m);
            return AMP_ERR_OUT_OF_MEMORY;
        }
        amp_convert(wd, pdt, w, dt, (size_t)(g->o * k));
        w = wd;
    }
    int64_t dblocks = 0;
    const size_t dblk = dkern ? direct_block_bytes(dkern, g->o, k, &dblocks) : 0;
    void *dbp = dkern ? amp_scratch_alloc(ctx, dblk * (size_t)dblocks) : NULL;
    if (dkern && !dbp) {
        amp_scratch_release(ctx, m);
        return AMP_ERR_OUT_OF_MEMORY;
    }
    void *col = implicit ? amp_scratch_alloc(ctx, (size_t)(nb_max * g->c * hp * wp) * pes + AMP_CONV_IMPLICIT_SLACK)
                         : amp_scratch_alloc(ctx, (size_t)(k * nb_max * p_img) * es);
    float *y = amp_f32_scratch(ctx, g->o * nb_max * p_img);
    int32_t *koff = implicit ? amp_scratch_alloc(ctx, (size_t)k * sizeof *koff) : NULL;
    int32_t *pix = implicit ? amp_scratch_alloc(ctx, (size_t)(nb_max * p_img) * sizeof *pix) : NULL;
    if (!col || !y || (implicit && (!koff || !pix))) {
        amp_scratch_release(ctx, m);
        return AMP_ERR_OUT_OF_MEMORY;
    }
    conv_pass a = {.g = g, .dt = dt, .es = es, .x = x, .col = col, .y = y, .bias = bv, .out = out, .out_dt = out_dt,
                   .out_es = amp_dtype_size(out_dt), .xp = col, .xp_dt = pdt, .sink = sink};
    const amp_conv_implicit ci = {.g = g, .xp = col, .es = pes, .koff = koff, .pix = pix};
    if (implicit) {
        implicit_tables(g, nb_max, koff, pix);
        xp_zero(col, nb_max * g->c * hp * wp * (int64_t)pes);
    }
    if (dkern) direct_pack(dkern, w, pes, g->o, k, 0, k, dbp);
    int st = AMP_OK;
    for (int64_t b0 = 0; b0 < g->n && st == AMP_OK; b0 += nb_max) {
        const int64_t nb = g->n - b0 < nb_max ? g->n - b0 : nb_max, ld = nb * p_img;
        a.b0 = b0, a.nb = nb;
        if (dkern) {
            run_pass(nb, task_pad, &a, nb * g->c * hp * wp);
            conv_direct d = {.ci = &ci, .kern = dkern, .rows = pix, .steps = koff, .bp = dbp, .m = ld, .n = g->o, .k = k, .beta = 0.0f, .c = y, .ldc = ld};
            conv_gemm_direct(&d, false);
        } else if (implicit) {
            run_pass(nb, task_pad, &a, nb * g->c * hp * wp);
            st = conv_gemm_implicit(ctx, pdt, g->o, ld, k, w, k, conv_pack_cb, &ci, 0.0f, y, ld);
        } else {
            run_pass(nb, task_im2col, &a, k * ld);
            st = conv_gemm(ctx, dt, false, false, g->o, ld, k, w, k, col, ld, 0.0f, y, ld);
        }
        if (st == AMP_OK) run_pass(nb, task_store, &a, g->o * ld);
    }
    amp_scratch_release(ctx, m);
    return st;
}

/* Whether dX is computed as a correlation (conv_dx_correlate): stride 1, a square kernel (one
 * padding for both axes) and pad <= k - 1 (the derived padding k - 1 - pad is not negative). */
static bool dx_by_correlation(const conv_geom *g) {
    return g->stride == 1 && g->kh == g->kw && g->pad <= g->kh - 1;
}

/* dX [N, C, H, W] (fp32, written) for stride 1 without col2im: dX[c, iy, ix] = sum over (o, ky, kx)
 * of W[o, c, ky, kx] dY[o, iy + pad - ky, ix + pad - kx], which is the correlation of dY padded by
 * k - 1 - pad with W flipped in both axes and transposed to [C, O, KH, KW]: the forward's product
 * (implicit GEMM or im2col + GEMM) on the derived geometry c := O, o := C, pad := k - 1 - pad. One
 * fp32 sum per element over K' = O*KH*KW terms, in the GEMM's order (col2im summed W^T dY's O-term
 * sums over the kernel's positions: other bits, the same value to rounding). Measured on the cnn's
 * conv2 (C 32, O 64, 14x14, 5x5), amp-bf16, 1 thread: col2im went (3.9% of the step) and the GEMM,
 * now k = 1600 into 32 rows instead of k = 64 into 800, got faster too. */
static int conv_dx_correlate(amp_ctx *ctx, const conv_geom *g, amp_dtype dt, const void *gy, const void *w, float *dx,
                             const amp_grad_sink *sink) {
    const conv_geom gd = {.n = g->n, .c = g->o, .h = g->oh, .w = g->ow, .o = g->c, .kh = g->kh, .kw = g->kw,
                          .oh = g->h, .ow = g->w, .stride = 1, .pad = g->kh - 1 - g->pad};
    const size_t es = amp_dtype_size(dt);
    const int64_t khw = g->kh * g->kw;
    amp_arena_mark m = amp_scratch_mark(ctx);
    unsigned char *wt = amp_scratch_alloc(ctx, (size_t)(g->c * g->o * khw) * es); /* [C, O, KH, KW] */
    if (!wt) return AMP_ERR_OUT_OF_MEMORY;
    for (int64_t c = 0; c < g->c; c++)
        for (int64_t o = 0; o < g->o; o++) {
            /* (ky, kx) -> (KH-1-ky, KW-1-kx) is t -> khw - 1 - t; elements copied as bits */
            const int64_t to = (c * g->o + o) * khw, from = (o * g->c + c) * khw + khw - 1;
            if (es == 2)
                for (int64_t t = 0; t < khw; t++) ((uint16_t *)(void *)wt)[to + t] = ((const uint16_t *)w)[from - t];
            else
                for (int64_t t = 0; t < khw; t++) ((uint32_t *)(void *)wt)[to + t] = ((const uint32_t *)w)[from - t];
        }
    const int st = conv_correlate(ctx, &gd, dt, gy, wt, NULL, dx, AMP_F32, sink);
    amp_scratch_release(ctx, m);
    return st;
}

/* ---- backward ---- */

static void conv_backward(amp_ctx *ctx, amp_node *node) {
    amp_tensor *x = node->in[0], *w = node->in[1], *bias = node->n_in > 2 ? node->in[2] : NULL;
    const conv_geom *g = node->saved;
    const amp_dtype dt = node->out->compute_dtype;
    const size_t es = amp_dtype_size(dt);
    const int64_t k = geom_k(g), p_img = geom_p(g);
    const bool need_dx = x->requires_grad, need_dw = w->requires_grad, need_db = bias && bias->requires_grad;

    /* dY in the compute dtype, [N, O, P] contiguous */
    const amp_tensor *gt = node->out->grad;
    const unsigned char *gy = gt->data;
    if (gt->dtype != dt || !amp_tensor_is_contiguous(gt)) {
        void *tmp = amp_scratch_alloc(ctx, (size_t)amp_tensor_numel(gt) * es);
        if (!tmp || amp_tensor_read(gt, tmp, dt) != AMP_OK) return;
        gy = tmp;
    }
    const bool dx_corr = need_dx && dx_by_correlation(g), dx_cols = need_dx && !dx_corr;
    /* dX by correlation goes where x's gradient goes (its own scratch or a sink: below) */
    float *dx = dx_cols ? amp_f32_scratch(ctx, g->n * g->c * g->h * g->w) : NULL;
    float *dw = need_dw ? amp_f32_scratch(ctx, g->o * k) : NULL;
    const amp_gemm_kernel *kern = amp_gemm_kernel_for(amp_isa_active(), dt);
    float *db = need_db ? amp_f32_scratch(ctx, g->o) : NULL;
    /* dX as a correlation (conv_dx_correlate) has its own chunks; the loop below makes the rest */
    const int64_t hp = g->h + 2 * g->pad, wp = g->w + 2 * g->pad;
    /* scratch per image: dY's permuted copy, the columns (or the implicit weight gradient's padded
     * image) and, where dX goes through col2im, the columns' fp32 gradient, counted whether or not
     * x needs a gradient: dW's sum over the batch is split at chunk boundaries, so its bits depend
     * on nb, which depends on the shapes only (not on which gradients are made, nor the threads). */
    const int64_t per_image_gp = p_img * g->o * (int64_t)es + (dx_by_correlation(g) ? 0 : p_img * k * 4);
    /* the implicit weight gradient's padded chunk in the panels' dtype (panel_dtype: bf16 decoded to
     * fp32 where the bf16 GEMM is the fp32 kernel; dY stays bf16, packed by that kernel, pk) */
    amp_dtype pdt = need_dw ? panel_dtype(g, dt) : dt;
    int64_t nb_max = chunk_images(g, per_image_gp + g->c * hp * wp * (int64_t)amp_dtype_size(pdt));
    const bool implicit = need_dw && implicit_dw_ok(g, pdt, nb_max);
    if (!implicit) {
        pdt = dt;
        nb_max = chunk_images(g, per_image_gp + p_img * k * (int64_t)es);
    }
    const size_t pes = amp_dtype_size(pdt);
    const amp_gemm_kernel *dkern = implicit ? direct_kernel(g, pdt, nb_max, true) : NULL;
    const amp_gemm_kernel *pk = dkern && pdt != dt ? kern : dkern; /* packs dY (dt) in dkern's layout */
    int64_t dblocks = 0;
    const size_t dblk = dkern ? direct_block_bytes(dkern, g->o, nb_max * p_img, &dblocks) : 0;
    void *dbp = dkern ? amp_scratch_alloc(ctx, dblk * (size_t)dblocks) : NULL;
    /* dY's permuted copy gp [O, nb*P], the GEMMs' operand, is not made when
     * - one image per chunk: dY's image [O, P] is that already;
     * - dW is the only product and takes the columns (the cnn's conv1): it is computed as
     *   dW^T [K, O] = col dY^T, dY packed straight from [N, O, P] by conv_pack_dy_cb (the same
     *   products summed in the same order: the same bits), then transposed into dW.
     * The cnn's conv1 dY is 3.2M elements: its copy was 1% of the fp32 step. */
    const bool dw_t = need_dw && !implicit && !dx_cols && nb_max > 1 && kern &&
                      (kern->k_unit == 1 || p_img % kern->k_unit == 0);
    /* the direct weight gradient packs dY straight from [N, O, P] (direct_pack over images) */
    const bool dy_direct = dkern && p_img % dkern->k_unit == 0;
    void *gp = nb_max > 1 && ((need_dw && !dw_t && !dy_direct) || dx_cols)
                   ? amp_scratch_alloc(ctx, (size_t)(g->o * nb_max * p_img) * es)
                   : NULL;
    float *dwt = dw_t ? amp_f32_scratch(ctx, k * g->o) : NULL; /* dW^T [K, O] */
    const int64_t xp_bytes = nb_max * g->c * hp * wp * (int64_t)pes;
    void *col = !need_dw    ? NULL
                : implicit ? amp_scratch_alloc(ctx, (size_t)xp_bytes + AMP_CONV_IMPLICIT_SLACK)
                           : amp_scratch_alloc(ctx, (size_t)(k * nb_max * p_img) * es);
    int32_t *koff = implicit ? amp_scratch_alloc(ctx, (size_t)k * sizeof *koff) : NULL;
    int32_t *pix = implicit ? amp_scratch_alloc(ctx, (size_t)(nb_max * p_img) * sizeof *pix) : NULL;
    float *dcol = dx_cols ? amp_f32_scratch(ctx, k * nb_max * p_img) : NULL;
    if (ctx->status != AMP_OK) return;
    const amp_conv_implicit ci = {.g = g, .xp = col, .es = pes, .koff = koff, .pix = pix};
    if (implicit) {
        implicit_tables(g, nb_max, koff, pix);
        xp_zero(col, xp_bytes);
    }
    /* the padded col2im writes every element of dx; the other one adds into zeros */
    if (dx_cols && !amp_conv_padded_ok(g)) memset(dx, 0, (size_t)(g->n * g->c * g->h * g->w) * sizeof *dx);
    if (dw) memset(dw_t ? dwt : dw, 0, (size_t)(g->o * k) * sizeof *dw);
    if (db) memset(db, 0, (size_t)g->o * sizeof *db);

    conv_pass a = {.g = g,
                   .dt = dt,
                   .es = es,
                   .x = x->data,
                   .col = col,
                   .dcol = dcol,
                   .dx = dx,
                   .gy = gy,
                   .gp = gp,
                   .copy_gp = gp != NULL,
                   .db = db,
                   .xp = col,
                   .xp_dt = pdt};
    for (int64_t b0 = 0; b0 < g->n; b0 += nb_max) {
        const int64_t nb = g->n - b0 < nb_max ? g->n - b0 : nb_max, ld = nb * p_img;
        a.b0 = b0, a.nb = nb;
        const void *gop = gp ? gp : gy + (size_t)(b0 * g->o * p_img) * es;
        if (gp || db) run_pass(g->o, task_permute_grad, &a, g->o * ld);
        if (dw && dkern) {
            run_pass(nb, task_pad, &a, nb * g->c * hp * wp);
            if (gp)
                direct_pack(pk, gp, es, g->o, ld, 0, ld, dbp);
            else
                direct_pack(pk, gy, es, g->o, p_img, b0, ld, dbp);
            conv_direct d = {.ci = &ci, .kern = dkern, .rows = koff, .steps = pix, .bp = dbp, .m = k, .n = g->o, .k = ld, .beta = 1.0f, .c = dw, .ldc = k};
            conv_gemm_direct(&d, true);
        } else if (dw && implicit) {
            run_pass(nb, task_pad, &a, nb * g->c * hp * wp);
            if (conv_gemm_implicit(ctx, dt, g->o, k, ld, gop, ld, conv_pack_k_cb, &ci, 1.0f, dw, k)) return;
        } else if (dw_t) {
            run_pass(nb, task_im2col, &a, k * ld);
            const conv_dy_src dys = {.g = g, .gy = gy, .es = es, .b0 = b0};
            if (conv_gemm_implicit(ctx, dt, k, g->o, ld, col, ld, conv_pack_dy_cb, &dys, 1.0f, dwt, g->o)) return;
        } else if (dw) {
            run_pass(nb, task_im2col, &a, k * ld);
            if (conv_gemm(ctx, dt, false, true, g->o, k, ld, gop, ld, col, ld, 1.0f, dw, k)) return;
        }
        if (dx_cols) {
            if (conv_gemm(ctx, dt, true, false, k, ld, g->o, w->data, k, gop, ld, 0.0f, dcol, ld)) return;
            run_pass(nb, task_col2im, &a, k * ld);
        }
    }
    if (dw_t)
        for (int64_t o = 0; o < g->o; o++)
            for (int64_t r = 0; r < k; r++) dw[o * k + r] = dwt[r * g->o + o];
    if (dx_corr) {
        /* the correlation's fp32 output goes into x's gradient image by image while in cache
         * (grad_sink_gemm.h: amp_grad_accumulate's bits), not through an fp32 dX and a pass over it */
        amp_grad_sink sink;
        const bool sunk = amp_grad_sink_open(ctx, x, &sink);
        dx = sunk ? NULL : amp_f32_scratch(ctx, g->n * g->c * g->h * g->w);
        int st = sunk || dx ? conv_dx_correlate(ctx, g, dt, gy, w->data, dx, sunk ? &sink : NULL) : AMP_ERR_OUT_OF_MEMORY;
        if (st != AMP_OK && ctx->status == AMP_OK) amp_ctx_fail(ctx, st, "conv2d: backward: %s", amp_status_str(st));
        if (sunk) amp_grad_sink_close(ctx, &sink);
        if (st != AMP_OK) return;
    }
    if (dx) amp_grad_accumulate(ctx, x, dx);
    if (dw) amp_grad_accumulate(ctx, w, dw);
    if (db) amp_grad_accumulate(ctx, bias, db);
}

/* ---- forward ---- */

amp_tensor *amp_conv2d(amp_ctx *ctx, amp_tensor *x, amp_tensor *weight, amp_tensor *bias, int stride, int padding) {
    const amp_op op = AMP_OP_CONV2D;
    if (!amp_op_input_ok(ctx, op, x) || !amp_op_input_ok(ctx, op, weight)) return NULL;
    if (bias && !amp_op_input_ok(ctx, op, bias)) return NULL;
    amp_tensor *cast_in[3] = {x, weight, bias};
    if (!amp_autocast_inputs(ctx, op, cast_in, 3)) return NULL;
    x = cast_in[0], weight = cast_in[1], bias = cast_in[2];
    char sx[64], sw[64];
    if (x->ndim != 4 || weight->ndim != 4 || weight->shape[1] != x->shape[1])
        return amp_op_fail(ctx, op, "input %s ([N, C, H, W]) does not match weight %s ([O, C, KH, KW])",
                           amp_shape_str(x, sx, sizeof sx), amp_shape_str(weight, sw, sizeof sw));
    if (stride < 1 || padding < 0)
        return amp_op_fail(ctx, op, "stride (%d) must be at least 1 and padding (%d) at least 0", stride, padding);
    conv_geom g = {.n = x->shape[0],
                   .c = x->shape[1],
                   .h = x->shape[2],
                   .w = x->shape[3],
                   .o = weight->shape[0],
                   .kh = weight->shape[2],
                   .kw = weight->shape[3],
                   .stride = stride,
                   .pad = padding};
    if (g.kh < 1 || g.kw < 1 || g.h + 2 * g.pad < g.kh || g.w + 2 * g.pad < g.kw)
        return amp_op_fail(ctx, op, "kernel %s does not fit the input %s padded by %d",
                           amp_shape_str(weight, sw, sizeof sw), amp_shape_str(x, sx, sizeof sx), padding);
    if (bias && (bias->ndim != 1 || bias->shape[0] != g.o))
        return amp_op_fail(ctx, op, "bias %s must have shape [%lld]", amp_shape_str(bias, sx, sizeof sx),
                           (long long)g.o);
    g.oh = (g.h + 2 * g.pad - g.kh) / g.stride + 1;
    g.ow = (g.w + 2 * g.pad - g.kw) / g.stride + 1;

    amp_dtype dt = amp_promote(x->dtype, weight->dtype);
    if (bias) dt = amp_promote(dt, bias->dtype);
    if (!(x = amp_op_as(ctx, x, dt)) || !(weight = amp_op_as(ctx, weight, dt))) return NULL;
    if (bias && !(bias = amp_op_as(ctx, bias, dt))) return NULL;
    if (!(x = amp_contiguous(ctx, x)) || !(weight = amp_contiguous(ctx, weight))) return NULL;

    const int64_t out_shape[4] = {g.n, g.o, g.oh, g.ow};
    amp_tensor *out = amp_ctx_new_tensor(ctx, dt, 4, out_shape, true);
    if (!out) return NULL;
    amp_arena_mark m = amp_scratch_mark(ctx);
    const float *bv = bias ? amp_f32_view(ctx, bias) : NULL;
    const int st = (bias && !bv) ? AMP_ERR_OUT_OF_MEMORY : conv_correlate(ctx, &g, dt, x->data, weight->data, bv, out->data, dt, NULL);
    amp_scratch_release(ctx, m);
    if (st != AMP_OK) return NULL;
    amp_tensor *in[3] = {x, weight, bias};
    amp_node *node = amp_autograd_record(ctx, op, dt, out, in, bias ? 3 : 2, conv_backward);
    if (node) {
        conv_geom *saved = amp_ctx_alloc(ctx, sizeof *saved);
        if (!saved) return NULL;
        *saved = g;
        node->saved = saved;
    }
    return out;
}
