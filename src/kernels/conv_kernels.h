/* Internal: conv2d's kernels (src/ops/conv.c describes the layout): the column passes, the implicit
 * GEMM's panels and direct tiles, the bias gradient's sums and the forward's row store. The _ref
 * versions (src/kernels/ref/conv_ref.c) are the oracle; the tests compare the SIMD ones
 * (src/kernels/x86/conv_*.c) with them bit for bit. */
#ifndef AMP_CONV_KERNELS_H
#define AMP_CONV_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "amp/cpu.h"
#include "amp/dtype.h"

typedef struct amp_conv_geom {
    int64_t n, c, h, w, o, kh, kw, oh, ow, stride, pad;
} amp_conv_geom;

/* K = C*KH*KW (rows of the column matrix) and P = OH*OW (output pixels per image). */
static inline int64_t amp_conv_geom_k(const amp_conv_geom *g) { return g->c * g->kh * g->kw; }
static inline int64_t amp_conv_geom_p(const amp_conv_geom *g) { return g->oh * g->ow; }

/* d[0, n) = s[0, n), n >= 2 bytes. Up to 128 bytes as a few fixed-size pieces that may overlap (no
 * loop, which gcc would turn back into a memcpy call); longer rows call memcpy, whose cost they
 * amortize. The padded planes' rows are short: a memcpy call per row costs more than the copy.
 * Inline: it runs once per row. */
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

/* im2col of image b0 + b of x ([N, C, H, W] contiguous, element size es: 2 or 4) into its columns
 * [b*P, (b+1)*P) of col [C*KH*KW, nb*P], P = OH*OW. */
void amp_conv_im2col_ref(const amp_conv_geom *g, const void *x, size_t es, int64_t b0, int64_t nb, int64_t b,
                         void *col);
/* col2im of image b0 + b: adds its columns of dcol [C*KH*KW, nb*P] (fp32) into dx [N, C, H, W]. */
void amp_conv_col2im_ref(const amp_conv_geom *g, const float *dcol, int64_t b0, int64_t nb, int64_t b, float *dx);

/* The padded plane's bound (bytes, as fp32), a stack buffer. */
#define AMP_CONV_PAD_PLANE_BYTES 16384

/* Whether the padded-plane versions take this geometry (stride 1, padded plane within a stack
 * buffer). */
bool amp_conv_padded_ok(const amp_conv_geom *g);
/* The same columns as amp_conv_im2col_ref; the _ref versions are the C ones, the plain names take
 * the active path's (the kernel table's im2col_padded and col2im_padded, below). */
void amp_conv_im2col_padded_ref(const amp_conv_geom *g, const void *x, size_t es, int64_t b0, int64_t nb, int64_t b,
                                void *col);
void amp_conv_im2col_padded(const amp_conv_geom *g, const void *x, size_t es, int64_t b0, int64_t nb, int64_t b,
                            void *col);
/* Writes image b0 + b's planes of dx with the bits amp_conv_col2im_ref adds into a zeroed dx. */
void amp_conv_col2im_padded_ref(const amp_conv_geom *g, const float *dcol, int64_t b0, int64_t nb, int64_t b,
                                float *dx);
void amp_conv_col2im_padded(const amp_conv_geom *g, const float *dcol, int64_t b0, int64_t nb, int64_t b, float *dx);
#if defined(__x86_64__)
/* src/kernels/x86/conv_avx512.c: the same bits as the _ref versions; only when the CPU has AVX-512 */
void amp_conv_im2col_padded_avx512(const amp_conv_geom *g, const void *x, size_t es, int64_t b0, int64_t nb, int64_t b,
                                   void *col);
void amp_conv_col2im_padded_avx512(const amp_conv_geom *g, const float *dcol, int64_t b0, int64_t nb, int64_t b,
                                   float *dx);
#endif

/* The fp32 sum of v[0, n) in eight interleaved partial sums (element i into sum i % 8), combined
 * pairwise, then the tail: a fixed order, so fixed bits. amp_conv_sum_bf16_ref: the same of bf16
 * values, widened as they are read (exact). */
float amp_conv_sum_f32_ref(const float *v, int64_t n);
float amp_conv_sum_bf16_ref(const uint16_t *v, int64_t n);

/* The bias gradient's sums: out[j] = the fp32 sum of the n bf16 values at v + j*stride, j < 4, each
 * element i into partial sum i % 8 for i < n / 8 * 8, the partial sums combined ((0+1)+(2+3)) +
 * ((4+5)+(6+7)), then the rest added in order (amp_conv_sum_bf16_ref). The AVX-512 version gives the
 * same bits. */
void amp_conv_sum_bf16_x4_ref(const uint16_t *v, int64_t stride, int64_t n, float out[4]);
#if defined(__x86_64__)
void amp_conv_sum_bf16_x4_avx512(const uint16_t *v, int64_t stride, int64_t n, float out[4]);
#endif

/* The forward's output row of n values: out (in out_dt) = y + *bias in fp32 (bias NULL: y), rounded
 * once by amp_convert; for a 16-bit out_dt the sum is formed in y (y is overwritten). */
void amp_conv_store_row_ref(void *out, amp_dtype out_dt, float *y, const float *bias, int64_t n);
/* The same for a bf16 out with a bias, y left as it is: out[i] = y[i] + bias in fp32, rounded once
 * to bf16 (amp_convert's rounding): the bits of amp_conv_store_row_ref. */
#if defined(__x86_64__)
void amp_conv_store_bf16_avx512(uint16_t *out, const float *y, float bias, int64_t n);
void amp_conv_store_bf16_avx2(uint16_t *out, const float *y, float bias, int64_t n);
#endif

/* ---- implicit GEMM (conv.c's stride-1 forward): the column panels packed straight from the
 * zero-padded images, as the GEMM's B operand (gemm/gemm_implicit.h). Row i of M = col^T is output
 * pixel i of the chunk (image i / P, then oy, ox), column p is (c, ky, kx); M[i, p] is the padded
 * chunk xp at pixel_offset(i) + koff[p]. */
typedef struct amp_conv_implicit {
    const amp_conv_geom *g;
    const void *xp;    /* [nb, C, Hp, Wp] in the compute dtype, then AMP_CONV_IMPLICIT_SLACK bytes */
    size_t es;         /* 4: fp32 into AMP_GEMM_PACKED_F32; 2: bf16 into AMP_GEMM_PACKED_BF16_PAIRS */
    const int32_t *koff; /* [C*KH*KW]: c*Hp*Wp + ky*Wp + kx */
    const int32_t *pix;  /* [nb*P]: amp_conv_pixel_offset of each pixel of the chunk */
} amp_conv_implicit;

/* Bytes after the padded chunk that the AVX-512 panels may read (and never use): the fp32 weight
 * gradient's 64-element windows. */
#define AMP_CONV_IMPLICIT_SLACK 256

/* Offset (elements) of chunk pixel i in xp (what ci->pix holds). */
int64_t amp_conv_pixel_offset(const amp_conv_implicit *ci, int64_t i);
/* One panel of r rows: pixels [i0, i0 + rows) x columns [p0, p0 + kc) of M in the packed layout
 * (fp32: element (p, ii) at p*r + ii; bf16 pairs: at (p/2)*2r + 2ii + p%2), missing rows and the
 * pad of an odd kc (pairs) zero. The reference, any r. */
void amp_conv_pack_panel_ref(const amp_conv_implicit *ci, void *dst, int64_t i0, int64_t rows, int64_t p0, int64_t kc,
                             int r);
/* The same for the weight gradient's product, where M = col (rows: k indices, columns: pixels):
 * rows [j0, j0 + rows) of k indices x pixels [p0, p0 + kc), same layouts. */
void amp_conv_pack_panel_k_ref(const amp_conv_implicit *ci, void *dst, int64_t j0, int64_t rows, int64_t p0,
                               int64_t kc, int r);
#if defined(__x86_64__)
/* The same bits as amp_conv_pack_panel_k_ref for bf16 pairs (fp32), r <= 16, rows within two
 * channels whose offsets lie within a 63-element (64-element) window; false (nothing written)
 * otherwise. */
bool amp_conv_pack_panel_k_avx512(const amp_conv_implicit *ci, void *dst, int64_t j0, int64_t rows, int64_t p0,
                                  int64_t kc, int r);
/* The same bits, for r <= 16 and panels over at most two images whose pixels lie within a 32-element
 * window of each image's plane; returns false (nothing written) for the others. */
bool amp_conv_pack_panel_avx512(const amp_conv_implicit *ci, void *dst, int64_t i0, int64_t rows, int64_t p0,
                                int64_t kc, int r);
/* One 12 x 32 tile of an implicit product computed as C^T, without packing its implicit panel: row
 * ii's element at step p is xp[rows[ii] + steps[p]] (element size es: 4 fp32, 2 bf16); the forward
 * (and dX): rows = 12 pixels' offsets (ci->pix; any valid offset for rows past m), steps = koff +
 * p0; the weight gradient: rows = 12 k indices' koff, steps = pix + p0. Steps [0, kc) against
 * bpanel (the kernel's packed B panel of 32 columns, AMP_GEMM_PACKED_F32 or _BF16_PAIRS by es),
 * stored as C^T: element (i, j) at c[j * ldc + i] for i < m, j < n, = sum + beta * c (beta == 0:
 * C unread). The same bits as packing the reference's 12-row panel (amp_conv_pack_panel_ref, or
 * _k_ref) and running the AVX-512 kernel's ukernel_ct on it (alpha 1). Only with the AVX-512 GEMM
 * kernel for es (bf16: AVX512-BF16). */
void amp_conv_direct_tile_avx512(const void *xp, size_t es, const int32_t *steps, const int32_t rows[12], int64_t kc,
                                 const void *bpanel, float *c, int64_t ldc, int m, int n, float beta);
/* The same for the AVX2 GEMM's 6 x 16 tile, fp32 only (its one packed format: bf16 and f16 are
 * decoded into an fp32 padded chunk first): rows = 6 offsets, bpanel a packed B panel of 16 columns,
 * the bits of amp_conv_pack_panel_ref's 6-row panel through the AVX2 kernel's ukernel_ct. Only when
 * the CPU has AVX2 and FMA. */
void amp_conv_direct_tile_avx2(const float *xp, const int32_t *steps, const int32_t rows[6], int64_t kc,
                               const float *bpanel, float *c, int64_t ldc, int m, int n, float beta);
#endif

/* ---- conv2d's entries of the kernel table (kernels/kernels.h) ---- */

typedef void (*amp_conv_im2col_fn)(const amp_conv_geom *g, const void *x, size_t es, int64_t b0, int64_t nb, int64_t b,
                                   void *col);
typedef void (*amp_conv_col2im_fn)(const amp_conv_geom *g, const float *dcol, int64_t b0, int64_t nb, int64_t b,
                                   float *dx);
typedef void (*amp_conv_sum_bf16_x4_fn)(const uint16_t *v, int64_t stride, int64_t n, float out[4]);
typedef void (*amp_conv_store_bf16_fn)(uint16_t *out, const float *y, float bias, int64_t n);
typedef bool (*amp_conv_pack_panel_fn)(const amp_conv_implicit *ci, void *dst, int64_t i0, int64_t rows, int64_t p0,
                                       int64_t kc, int r);
/* amp_conv_direct_tile_avx512's contract for the path's tile of direct_mr rows (rows [direct_mr])
 * and direct_nr columns; es 4 (fp32) on every path with a tile, 2 (bf16 pairs) where its GEMM has a
 * bf16 pairs kernel of that tile. */
typedef void (*amp_conv_direct_tile_fn)(const void *xp, size_t es, const int32_t *steps, const int32_t *rows,
                                        int64_t kc, const void *bpanel, float *c, int64_t ldc, int m, int n,
                                        float beta);

typedef struct amp_conv_kernels {
    /* every path: the _ref versions, or the same bits */
    amp_conv_im2col_fn im2col_padded;
    amp_conv_col2im_fn col2im_padded;
    amp_conv_sum_bf16_x4_fn sum_bf16_x4;
    /* the forward's bf16 row with its bias, fused; NULL: amp_conv_store_row_ref (the add, then
     * amp_convert) */
    amp_conv_store_bf16_fn store_bf16;
    /* the implicit GEMM's column panels (amp_conv_pack_panel_avx512's contract: false where they
     * decline a panel, which the reference then packs); NULL on a path without the implicit GEMM */
    amp_conv_pack_panel_fn pack_panel, pack_panel_k;
    /* the direct tile (src/gemm/conv_gemm.c; direct_mr at most 12 and a divisor of 144 there), for
     * the path's GEMM kernel whose tile is direct_mr x direct_nr; NULL: no direct product. With
     * direct_every, it runs every stride-1 fp32 product within the padded plane's bound, in either
     * orientation (a path without the implicit GEMM: its tile's bits do not depend on the orientation,
     * conv_gemm.c's every_direct_kernel); else only the products that the GEMM computes as C^T with
     * the implicit operand on the tile's rows. */
    amp_conv_direct_tile_fn direct_tile;
    int direct_mr, direct_nr;
    bool direct_every;
} amp_conv_kernels;

void amp_conv_kernels_ref(amp_conv_kernels *k);
#if defined(__x86_64__)
void amp_conv_kernels_avx2(amp_conv_kernels *k);
void amp_conv_kernels_avx512(amp_conv_kernels *k);
#endif

/* The kernels for `isa` (a path the CPU lacks, or an invalid one, gets the reference's). */
const amp_conv_kernels *amp_conv_kernels_for(amp_isa isa);

#endif /* AMP_CONV_KERNELS_H */
