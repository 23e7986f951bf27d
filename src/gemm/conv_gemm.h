/* Internal: conv2d's GEMM drivers (src/gemm/conv_gemm.c), for stride-1 convolutions whose padded
 * plane is within AMP_CONV_PAD_PLANE_BYTES. src/ops/conv.c describes the products; here is how they
 * run without a column matrix.
 *
 * - Implicit GEMM (AVX-512): amp_gemm_implicit_b (gemm_implicit.h) with the column side packed by
 *   amp_conv_pack_cb / amp_conv_pack_k_cb straight from the zero-padded chunk xp
 *   (amp_conv_implicit, conv_kernels.h).
 * - Direct tiles (every product the GEMM would compute as C^T with the implicit operand on the tile's
 *   row side; on AVX2 every product): amp_conv_gemm_direct runs the GEMM's loops itself, its tile
 *   reading the implicit operand from xp in place of a packed panel.
 * Both give each element of C the bits amp_gemm gives it on the stored column matrix.
 *
 * dY's permuted chunk [O, nb*P] as a packed operand, straight from dY [N, O, P], is
 * amp_conv_pack_dy_cb (and amp_conv_direct_pack over images). */
#ifndef AMP_CONV_GEMM_H
#define AMP_CONV_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/dtype.h"
#include "../kernels/conv_kernels.h"
#include "../kernels/gemm_kernels.h"

/* ---- which driver a product takes ---- */

/* The dtype the implicit panels are fed in for a product in dt: dt, or fp32 where the 16-bit GEMM is
 * the fp32 kernel on values decoded while packing (the padded chunk is then decoded to fp32 once). */
amp_dtype amp_conv_panel_dtype(const amp_conv_geom *g, amp_dtype dt);
/* Whether the forward's product (Y = W col, chunks of up to nb_max images) takes the implicit GEMM
 * or the direct tiles, with panels in dt. */
bool amp_conv_implicit_ok(const amp_conv_geom *g, amp_dtype dt, int64_t nb_max);
/* The same for the weight gradient's product (dW = dY col^T). */
bool amp_conv_implicit_dw_ok(const amp_conv_geom *g, amp_dtype dt, int64_t nb_max);
/* The GEMM kernel whose direct tiles run the forward's (weight_grad false) or the weight gradient's
 * product, or NULL: that product then goes through amp_gemm_implicit_b. */
const amp_gemm_kernel *amp_conv_direct_kernel(const amp_conv_geom *g, amp_dtype dt, int64_t nb_max, bool weight_grad);

/* ---- implicit GEMM: pack callbacks (amp_gemm_pack_cb) ---- */

/* koff [K] and pix [nb*P] of amp_conv_implicit, for chunks of up to nb images. */
void amp_conv_implicit_tables(const amp_conv_geom *g, int64_t nb, int32_t *koff, int32_t *pix);
/* arg: an amp_conv_implicit. Panels of r pixels (the forward, dX) or of r k indices (the weight
 * gradient). */
void amp_conv_pack_cb(const void *arg, const amp_gemm_kernel *kern, void *dst, int64_t j0, int64_t cols, int64_t p0,
                      int64_t kc, int r);
void amp_conv_pack_k_cb(const void *arg, const amp_gemm_kernel *kern, void *dst, int64_t j0, int64_t cols,
                        int64_t p0, int64_t kc, int r);

/* dY's chunk as a GEMM operand packed straight from dY [N, O, P]: M = dY permuted, [O, nb*P] (rows:
 * output channels, columns: the chunk's pixels), each panel's columns split at image boundaries
 * into runs that are plain [rows, len] matrices of row stride P, each packed by the kernel's own
 * pack at its column offset in the panel (the packed layouts put column p of a panel at p*r
 * elements, in pairs for bf16: so the runs start at even columns, P even, when k_unit = 2). The
 * values are those the kernel packs from the permuted copy, so are the bits. */
typedef struct amp_conv_dy_src {
    const amp_conv_geom *g;
    const unsigned char *gy; /* dY [N, O, P] in the compute dtype */
    size_t es;
    int64_t b0; /* the chunk's first image */
} amp_conv_dy_src;

/* arg: an amp_conv_dy_src. */
void amp_conv_pack_dy_cb(const void *arg, const amp_gemm_kernel *kern, void *dst, int64_t j0, int64_t cols,
                         int64_t p0, int64_t kc, int r);

/* ---- direct tiles ---- */

typedef struct amp_conv_direct {
    const amp_conv_implicit *ci;
    const amp_gemm_kernel *kern;
    const int32_t *rows;     /* [m] offsets in xp of the tiles' rows: ci->pix, or (weight gradient) ci->koff */
    const int32_t *steps;    /* [k] offsets of the steps: ci->koff, or ci->pix */
    const unsigned char *bp; /* the stored operand's packed panels (amp_conv_direct_pack) */
    size_t blk_bytes;        /* per k block: amp_conv_direct_block_bytes (amp_conv_gemm_direct sets it) */
    int64_t m, n, k; /* C^T [m, n] (element (i, j) at c[j * ldc + i]) = rows x steps x the stored [n, k] */
    float beta, *c;
    int64_t ldc;
    int64_t pc; /* the k block being run (a multiple of kern->kc), or -1: all of them */
} amp_conv_direct;

/* Bytes of the stored operand's packed panels (of the kernel's nr columns) per k block, and the
 * number of k blocks. */
size_t amp_conv_direct_block_bytes(const amp_gemm_kernel *kern, int64_t n, int64_t k, int64_t *blocks);
/* The stored operand [n, k] into per-k-block panels of nr rows at bp, read from images
 * [*, n, p_img] (element size es) starting at image b0 (conv_gemm.c says how). */
void amp_conv_direct_pack(const amp_gemm_kernel *kern, const void *src, size_t es, int64_t n, int64_t p_img,
                          int64_t b0, int64_t k, void *bp);
/* C^T += or = the product (d->beta), k block by k block (k_outer) or tile by tile; on the thread
 * pool. */
void amp_conv_gemm_direct(amp_conv_direct *d, bool k_outer);

#endif /* AMP_CONV_GEMM_H */
