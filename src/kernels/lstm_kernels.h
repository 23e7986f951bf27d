/* Internal: the LSTM cell's pointwise backward pass and a row accumulation, one
 * table per SIMD path (the vecmath pattern: a path inherits the reference for
 * anything it does not fill).
 *
 * Only IEEE multiplies and adds in a fixed order, no FMA: every path gives the
 * reference's bits for every element (tests/test_lstm_kernels.c checks
 * equality), so the ops' results do not depend on the path, on how rows are
 * split, or on where an element sits in a vector (tails use the scalar formula
 * below, which is the same arithmetic). */
#ifndef AMP_LSTM_KERNELS_H
#define AMP_LSTM_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/cpu.h"

/* One row of the cell's backward (src/ops/lstm.c), j < H:
 *   act [5H]   the saved fp32 i, f, g, o activations, then tanh(c')
 *   cprev [H]  c (the state the step read), dh [H] the gradient of h', dh2 [H]
 * a second one added to it (NULL: none), dc [H] the gradient of c' out: dgr
 * [4H] the gate pre-activation gradients, dc_prev [H] = dc'_total * f (may
 * alias dc). */
typedef void (*amp_lstm_cell_backward_fn)(float *dgr, float *dc_prev, const float *act, const float *cprev,
                                          const float *dh, const float *dh2, const float *dc, size_t H);
/* One row of the cell's forward (src/ops/lstm.c), j < H:
 *   gr [4H] the gate pre-activations without bias, bi, bh [4H] the biases (either may be NULL)
 *   act [5H] out: the i, f, g, o activations, then tanh(c'), as the backward reads them
 *   c_save [H] out: a copy of c as it comes in (NULL: none)
 *   c [H] in: c, out: c' = f c + i g (fp32, in place), h [H] out: h' = o tanh(c') (fp32)
 *   stream: act and c_save are kept for a backward pass much later, so a kernel may store them
 *     around the caches (only where that is safe for any address)
 * Exactly the bits of amp_lstm_cell_forward_composed on the same path's tables (below). */
typedef void (*amp_lstm_cell_forward_fn)(float *act, float *c_save, float *c, float *h, const float *gr,
                                         const float *bi, const float *bh, size_t H, bool stream);
/* cell_forward's row for bf16: h' stored rounded to bf16 in h, and c' left rounded to bf16 (as an fp32
 * value) for the next step, tanh still taken of the fp32 c'. Exactly the bits of cell_forward into an
 * fp32 row, amp_convert of that row to bf16, and c' converted to bf16 and back (the sequence's order).
 * NULL on a path without it. */
typedef void (*amp_lstm_cell_forward_bf16_fn)(float *act, float *c_save, float *c, uint16_t *h, const float *gr,
                                              const float *bi, const float *bh, size_t H, bool stream);
/* cell_backward's row, then db [4H] += dgr (db NULL: no sum) and dg [4H] = dgr rounded to bf16 (round
 * to nearest even, NaN to the quiet NaN of its sign: amp_convert's bits), the fp32 dgr never stored.
 * Exactly the bits of cell_backward, acc and amp_convert in that order (tests/test_lstm_kernels.c).
 * A path without it leaves it NULL and the op runs that composition. */
typedef void (*amp_lstm_cell_backward_bf16_fn)(uint16_t *dg, float *db, float *dc_prev, const float *act,
                                               const float *cprev, const float *dh, const float *dh2, const float *dc,
                                               size_t H);
/* dst[j] += src[j], j < n */
typedef void (*amp_lstm_acc_fn)(float *dst, const float *src, size_t n);
/* dst[j] = (a[j] + b[j]) + c[j], or a[j] + b[j] when c is NULL, j < n (the gates' two biases) */
typedef void (*amp_lstm_add3_fn)(float *dst, const float *a, const float *b, const float *c, size_t n);

typedef struct amp_lstm_kernels {
    amp_lstm_cell_forward_fn cell_forward;
    amp_lstm_cell_forward_bf16_fn cell_forward_bf16; /* NULL: compose */
    amp_lstm_cell_backward_fn cell_backward;
    amp_lstm_cell_backward_bf16_fn cell_backward_bf16; /* NULL: compose */
    amp_lstm_acc_fn acc;
    amp_lstm_add3_fn add3;
} amp_lstm_kernels;

struct amp_vmath_kernels;

/* cell_forward's oracle, the passes the ops ran before the fused kernel: act = (gr + bi) + bh (k's
 * add3; a missing bias is skipped), sigmoid over i and f, tanh over g, sigmoid over o (vm's maps,
 * which are per element), then per element c' = f c + i g (two multiplies and an add, no FMA),
 * tanh(c') (vm), h' = o tanh(c'). The reference and AVX2 tables' cell_forward is this composition
 * with their own vecmath and add3. */
void amp_lstm_cell_forward_composed(const struct amp_vmath_kernels *vm, const amp_lstm_kernels *k, float *act,
                                    float *c_save, float *c, float *h, const float *gr, const float *bi,
                                    const float *bh, size_t H);

void amp_lstm_kernels_ref(amp_lstm_kernels *k);
#if defined(__x86_64__)
void amp_lstm_kernels_avx2(amp_lstm_kernels *k);
void amp_lstm_kernels_avx512(amp_lstm_kernels *k);
#endif

/* The kernels for `isa` (a path the CPU lacks, or an invalid one, gets the
 * reference's). */
const amp_lstm_kernels *amp_lstm_kernels_for(amp_isa isa);
static inline const amp_lstm_kernels *amp_lstm_active(void) { return amp_lstm_kernels_for(amp_isa_active()); }

/* Element j of cell_backward, the reference arithmetic (the SIMD paths' tails
 * call it too). c' reaches the loss directly (dc') and through h' = o tanh(c').
 */
static inline void amp_lstm_cell_backward_at(float *dgr, float *dc_prev, const float *act, const float *cprev,
                                             const float *dh, const float *dh2, const float *dc, size_t H, size_t j) {
#if defined(__clang__)
/* The SIMD paths' files are built with -mfma, where clang would fuse the multiply-adds below into
 * FMAs (its default -ffp-contract=on) and the tails would differ from the reference's bits; gcc's
 * -std=c11 does not contract. */
#pragma clang fp contract(off)
#endif
    const float gi = act[j], gf = act[H + j], gg = act[2 * H + j], go = act[3 * H + j], t = act[4 * H + j];
    const float dh_out = dh2 ? dh[j] + dh2[j] : dh[j];
    const float dct = dc[j] + dh_out * go * (1.0f - t * t);
    dgr[j] = dct * gg * gi * (1.0f - gi);
    dgr[H + j] = dct * cprev[j] * gf * (1.0f - gf);
    dgr[2 * H + j] = dct * gi * (1.0f - gg * gg);
    dgr[3 * H + j] = dh_out * t * go * (1.0f - go);
    dc_prev[j] = dct * gf;
}

#endif
