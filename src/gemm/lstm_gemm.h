/* Internal: the GEMM drivers of the LSTM sequence (src/ops/lstm_sequence.c and
 * lstm_sequence_backward.c). They run gemm.c's pack routines and micro-kernels on operands amp_gemm
 * would pack again per call, so they live with the GEMM framework; the op supplies the memory.
 *
 * Products against a weight packed once per pass. The sequence multiplies by the same W_hh at every
 * step (T products of B rows). amp_gemm would pack W_hh's panels again for each of them (B times less
 * arithmetic than packing work would justify); these functions pack it once per pass with the GEMM
 * path's own pack routine and run the same micro-kernels over the same k blocks (kc of the path, each
 * block's sum added to C as gemm.c does: beta for the first block, 1 for the others), so every element
 * of C gets the bits amp_gemm would give it (gemm.c: they depend on the path and the shape only), which
 * the tests check against the per-step cell. Only the B rows of h or dG_t are packed per step.
 *
 * With B = 32 rows against a 12-row tile, C = X W^T fills 32/36 of its tiles; C^T = W X^T (W's 4H or H
 * rows on the 12-row side, X's B rows on the 32-wide side) fills 99% (gemm.c's transposed product,
 * ukernel_ct: products commute exactly, so the bits are the same); where the path has an 8-row kernel
 * (amp_gemm_kernel_rows8, on AVX-512: bf16 pairs on AVX512-BF16, and the fp32 kernel for fp32 and for
 * f16 and bf16 decoded to fp32), C = X W^T on it fills 100% and needs no transposes. The weight side
 * is packed as whichever operand the better fill makes it, but only for k >= LSTM_FLIP_MIN_K
 * (lstm_gemm.c).
 *
 * The weight gradients' operand [X | H_prev] (amp_lstm_gemm_xh) is never stored: its blocks are packed
 * from x and h in place as amp_gemm_implicit_b requests them. */
#ifndef AMP_LSTM_GEMM_H
#define AMP_LSTM_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/dtype.h"
#include "../kernels/gemm_kernels.h"

/* W [n, k] packed for products with m-row operands X: C [m, n] = X W^T */
typedef struct amp_lstm_packed_w {
    const amp_gemm_kernel *kern;
    bool flip;            /* W packed as the A operand (panels of mr) and C^T computed; else as B (nr) */
    int64_t n, k, kc_pad; /* n: W's rows (C's columns); kc_pad: one k block's packed depth, padded */
    size_t es;            /* bytes per element of the source dtype (of both operands) */
    char *panels;         /* k block q at panels + q * round_up(n, r) * kc_pad * packed_size */
} amp_lstm_packed_w;

/* X [m, k] packed for a product with a packed W */
typedef struct amp_lstm_packed_x {
    char *data; /* X packed for every k block: amp_lstm_gemm_x_bytes(pw, m) */
    int64_t m;
    unsigned char *tmp; /* with tasks: a buffer of tmp_bytes for each thread (amp_lstm_gemm_pack_x); else NULL */
    size_t tmp_bytes;
} amp_lstm_packed_x;

/* Chooses the kernel and orientation for W [n, k] (dtype dt) against m-row operands and sets pw's
 * fields but panels; returns the bytes of the panels to give amp_lstm_gemm_pack_w (every k block). */
size_t amp_lstm_gemm_w_init(amp_lstm_packed_w *pw, amp_dtype dt, int64_t n, int64_t k, int64_t m);

/* Packs W [n, k] (W[i, p] = src[trans ? p * ld + i : i * ld + p]) into panels (pw set up by
 * amp_lstm_gemm_w_init). */
void amp_lstm_gemm_pack_w(amp_lstm_packed_w *pw, void *panels, const void *src, int64_t ld, bool trans);

/* amp_lstm_gemm_pack_w for W = [A | B]^T [na + nb, k] (pw->n = na + nb) with W[i, p] = a[p * lda + i]
 * (i < na), b[p * ldb + i - na] (else), packed from a and b in place: the values kern->pack gives W
 * stored, without writing [A | B] out. */
void amp_lstm_gemm_pack_w_cat(amp_lstm_packed_w *pw, void *panels, const void *a, int64_t lda, int64_t na,
                              const void *b, int64_t ldb);

/* Bytes of X [m, k] packed for a product with pw (every k block), and of the buffer each thread needs
 * to pack some of its rows (amp_lstm_gemm_pack_x). */
size_t amp_lstm_gemm_x_bytes(const amp_lstm_packed_w *pw, int64_t m);
size_t amp_lstm_gemm_x_tmp_bytes(const amp_lstm_packed_w *pw);

/* Rows [b0, b1) of X [m, k] (X[i, p] = x[i * ldx + p], W's source dtype) packed into xp, writing only
 * those rows' places, with thread_id's buffer: the values kern->pack gives them when it packs all of X,
 * so the rows' own tasks can pack X for the next product. Whole panels (b0 = 0, b1 = m) need no
 * buffer. */
void amp_lstm_gemm_pack_x(const amp_lstm_packed_w *pw, const amp_lstm_packed_x *xp, const void *x, int64_t ldx,
                          int64_t b0, int64_t b1, int thread_id);

/* c [m, n] (ldc) = X W[0:n]^T + beta c with X [m, k] packed in xp, n <= W's rows, as amp_gemm(dt, false,
 * ...) with alpha 1 gives it; split between the threads when large enough. */
void amp_lstm_gemm_run(const amp_lstm_packed_w *pw, const amp_lstm_packed_x *xp, int64_t n, float beta, float *c,
                       int64_t ldc);

/* Rows [i0, i1) of amp_lstm_gemm_run's product against every W panel, on the calling thread: i0 a
 * multiple of X's panel rows, and i1 one too or X's last row, so the range's tiles are its own (the
 * kernel stores a tile's rows below i1 only). Each element is amp_lstm_gemm_run's: a tile's arithmetic
 * does not depend on which tiles run with it. */
void amp_lstm_gemm_rows(const amp_lstm_packed_w *pw, const amp_lstm_packed_x *xp, int64_t i0, int64_t i1, int64_t n,
                        float beta, float *c, int64_t ldc);

/* The weight gradients' right operand [X | H_prev] [B*T, NX + H] (NX = I, or 0 for H_prev alone):
 * row b*T + t is x's row b*T + t, then h_{t-1} (row b*T + t - 1 of h, zero at t = 0). */
typedef struct amp_lstm_xh {
    const char *x, *h; /* x [B*T, NX], h the sequence's output [B, T, H], es bytes per element */
    int64_t T, NX, H;
    size_t es;
} amp_lstm_xh;

/* c [G, NX + H] = dG^T [X | H_prev] (dG [R = B*T, G] in dt) with amp_gemm's bits; amp_gemm's status. */
int amp_lstm_gemm_xh(amp_dtype dt, const amp_lstm_xh *s, int64_t G, int64_t R, const void *dg, float *c);

#endif /* AMP_LSTM_GEMM_H */
