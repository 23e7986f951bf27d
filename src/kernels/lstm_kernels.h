/* Internal: the LSTM cell's pointwise backward pass and a row accumulation, one
 * table per SIMD path (the vecmath pattern: a path inherits the reference for
 * anything it does not fill).
 *
 * Only IEEE multiplies and adds in a fixed order, no FMA: every path gives the
 * reference's bits for every element (tests/test_lstm_kernels.c checks
 * equality), so the ops' results do not depend on the path, on how rows are
 * split, or on where an element sits in a vector (tails use the scalar formula
 * below, which is the same arithmetic). The same holds for the 16-bit saved
 * state of a bf16/f16 step (act16, at the end): its encode and decode are
 * comparisons, exact subtractions, one rounding on the bit pattern and a
 * scaling by a power of two. */
#ifndef AMP_LSTM_KERNELS_H
#define AMP_LSTM_KERNELS_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/cpu.h"
#include "../core/float_bits.h"

/* One row of the cell's backward (src/ops/lstm_cell.c, lstm_sequence_backward.c), j < H:
 *   act [5H]   the saved fp32 i, f, g, o activations, then tanh(c')
 *   cprev [H]  c (the state the step read), dh [H] the gradient of h', dh2 [H]
 * a second one added to it (NULL: none), dc [H] the gradient of c' out: dgr
 * [4H] the gate pre-activation gradients, dc_prev [H] = dc'_total * f (may
 * alias dc). */
typedef void (*amp_lstm_cell_backward_fn)(float *dgr, float *dc_prev, const float *act, const float *cprev,
                                          const float *dh, const float *dh2, const float *dc, size_t H);
/* One row of the cell's forward (src/ops/lstm_cell.c, lstm_sequence.c), j < H:
 *   gr [4H] the gate pre-activations without bias, gr2 [4H] a second part of them added first (NULL:
 *     none; the sequence's recurrent product and its looked-up input projection), bi, bh [4H] the
 *     biases (either may be NULL): the pre-activation is ((gr + gr2) + bi) + bh, a missing term skipped
 *   act [5H] out: the i, f, g, o activations, then tanh(c'), as the backward reads them
 *   c_save [H] out: a copy of c as it comes in (NULL: none)
 *   c [H] in: c, out: c' = f c + i g (fp32, in place), h [H] out: h' = o tanh(c') (fp32)
 *   stream: act and c_save are kept for a backward pass much later, so a kernel may store them
 *     around the caches (only where that is safe for any address)
 * Exactly the bits of amp_lstm_cell_forward_composed on the same path's tables (below). */
typedef void (*amp_lstm_cell_forward_fn)(float *act, float *c_save, float *c, float *h, const float *gr,
                                         const float *gr2, const float *bi, const float *bh, size_t H, bool stream);
/* cell_forward's row for bf16 with the 16-bit saved state (act16, below): act [5H] the five values
 * packed as act16_pack packs them, c_save [H] c as it comes in rounded to bf16 (it holds bf16 values
 * here, so exactly), h' stored rounded to bf16 in h, and c' left rounded to bf16 (as an fp32 value)
 * for the next step, tanh still taken of the fp32 c'. Exactly the bits of cell_forward into an fp32
 * row, act16_pack of its act, amp_convert of c to bf16 before and of h' to bf16 after, and c'
 * converted to bf16 and back (the sequence's order). act NULL: nothing saved (with c_save NULL, the
 * forward alone, when no backward will run). NULL on a path without it. */
typedef void (*amp_lstm_cell_forward_bf16_fn)(uint16_t *act, uint16_t *c_save, float *c, uint16_t *h,
                                              const float *gr, const float *gr2, const float *bi, const float *bh,
                                              size_t H, bool stream);
/* cell_backward with the five values read in their act16 form (act [5H] as act16_pack packs them):
 * element j is amp_lstm_cell_backward16_at. */
typedef void (*amp_lstm_cell_backward16_fn)(float *dgr, float *dc_prev, const uint16_t *act, const float *cprev,
                                            const float *dh, const float *dh2, const float *dc, size_t H);
/* cell_backward16's row, with cprev [H] and dh [H] in bf16 (c_{t-1} as saved, h's gradient as autocast
 * leaves the gradient of a bf16 output: read in place, never widened into a copy), then db [4H] += dgr
 * (db NULL: no sum) and dg [4H] = dgr rounded to bf16 (round to nearest even, NaN to the quiet NaN of
 * its sign: amp_convert's bits); the fp32 dgr [4H] itself stored only where dgr is not NULL (for sums
 * run elsewhere: the rows split between threads). Exactly the bits of amp_convert of cprev and dh to
 * fp32, cell_backward16, acc and amp_convert in that order (tests/test_lstm_kernels.c). A path without
 * it leaves it NULL and the op runs that composition. */
typedef void (*amp_lstm_cell_backward_bf16_fn)(uint16_t *dg, float *db, float *dgr, float *dc_prev,
                                               const uint16_t *act, const uint16_t *cprev, const uint16_t *dh,
                                               const float *dh2, const float *dc, size_t H);
/* dst[j] = amp_lstm_act16_encode(src[j]), j < n */
typedef void (*amp_lstm_act16_pack_fn)(uint16_t *dst, const float *src, size_t n);
/* dst[j] += src[j], j < n */
typedef void (*amp_lstm_acc_fn)(float *dst, const float *src, size_t n);
/* dst[j] = (a[j] + b[j]) + c[j], or a[j] + b[j] when c is NULL, j < n (the gates' two biases) */
typedef void (*amp_lstm_add3_fn)(float *dst, const float *a, const float *b, const float *c, size_t n);

typedef struct amp_lstm_kernels {
    amp_lstm_cell_forward_fn cell_forward;
    amp_lstm_cell_forward_bf16_fn cell_forward_bf16; /* NULL: compose */
    amp_lstm_cell_backward_fn cell_backward;
    amp_lstm_cell_backward16_fn cell_backward16;
    amp_lstm_cell_backward_bf16_fn cell_backward_bf16; /* NULL: compose */
    amp_lstm_act16_pack_fn act16_pack;
    amp_lstm_acc_fn acc;
    amp_lstm_add3_fn add3;
} amp_lstm_kernels;

struct amp_vmath_kernels;

/* cell_forward's oracle, the passes the ops ran before the fused kernel: act = gr + gr2 (k's add3,
 * when gr2 is not NULL), then act = (act + bi) + bh (add3; a missing bias is skipped), sigmoid over i
 * and f, tanh over g, sigmoid over o (vm's maps, which are per element), then per element
 * c' = f c + i g (two multiplies and an add, no FMA), tanh(c') (vm), h' = o tanh(c'). The reference
 * and AVX2 tables' cell_forward is this composition with their own vecmath and add3. */
void amp_lstm_cell_forward_composed(const struct amp_vmath_kernels *vm, const amp_lstm_kernels *k, float *act,
                                    float *c_save, float *c, float *h, const float *gr, const float *gr2,
                                    const float *bi, const float *bh, size_t H);

void amp_lstm_kernels_ref(amp_lstm_kernels *k);
#if defined(__x86_64__)
void amp_lstm_kernels_avx2(amp_lstm_kernels *k);
void amp_lstm_kernels_avx512(amp_lstm_kernels *k);
#endif

#if defined(__x86_64__)
/* The AVX-512 table's act16 encoders without AVX-512 BF16 (what a CPU without it runs), for the tests */
void amp_lstm_kernels_avx512_soft(amp_lstm_kernels *k);
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

/* ---- act16: the saved state of a 16-bit compute dtype ----
 *
 * Under bf16 or f16 autocast the cell saves each of its five values v (the sigmoids i, f, o in [0, 1],
 * the tanhs g and tanh(c') in [-1, 1]) in 16 bits. The backward pass needs v and 1 - |v| (s (1 - s),
 * 1 - t^2 = (1 - |t|)(1 + |t|)), and rounding v itself to 16 bits would lose 1 - |v| when |v| is near 1
 * (s = 0.996 in bf16 leaves no correct bit of 1 - s). So the smaller of the two is rounded to bf16 and
 * the other is computed from it:
 *   0.5 <= |v| < 1:  bf16(v - copysign(1, v)) * 2^64   (form B: -copysign(1 - |v|, v), exact in fp32)
 *   otherwise:       bf16(v)                            (form A: |v| < 0.5, |v| >= 1, NaN)
 * Form B's magnitudes are then at least 2^-24 * 2^64 = 2^40 and form A's at most 1, so |stored| >= 2
 * tells them apart; the factor is an integer add to bf16's exponent field (at most 126 + 64, finite).
 * Both v and 1 - |v| come back within bf16's unit roundoff 2^-8 (the rounded one directly; the
 * other, at least 0.5, from an absolute error of at most 0.5 * 2^-8), so s (1 - s) and 1 - t^2 keep
 * about 8 bits wherever they are. |v| = 1 stays in form A so that 1 - |v| = 0 comes back exactly.
 * Form B stores the complement with the sign opposite to v's (v - copysign(1, v) is one subtraction
 * of a constant with v's sign) and comes back as v = w - copysign(1, w).
 * bf16 rather than f16 also under f16 autocast: f16's range would flush a gate below 2^-24 to zero,
 * and with a loss scale of 2^16 its gradient can still be a normal f16 value.
 * The rounding is VCVTNEPS2BF16's (amp_lstm_act16_round), which AVX-512 BF16 does for two vectors in
 * one instruction: to nearest even, but a subnormal v (below 2^-126, where a gate's derivative does
 * not matter) becomes a zero of its sign, and a NaN keeps its sign and top payload bits, quieted.
 * A NaN is stored as such a NaN (form A: the comparisons are false) and comes back NaN, with NaN for
 * 1 - |v| too. Values outside [-1, 1] are not values of these activations: they are stored (form A)
 * but their complement is not meaningful. */
static inline uint16_t amp_lstm_act16_round(float v) {
    const uint32_t x = amp_f32_bits(v);
    if ((x & 0x7F800000u) == 0) return (uint16_t)((x >> 16) & 0x8000u);          /* zero, subnormal */
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x0040u); /* NaN */
    return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16); /* finite and infinite: to nearest even */
}

static inline uint16_t amp_lstm_act16_encode(float v) {
    const float a = fabsf(v);
    if (a >= 0.5f && a < 1.0f) return (uint16_t)(amp_lstm_act16_round(v - copysignf(1.0f, v)) + (64u << 7));
    return amp_lstm_act16_round(v);
}

/* v from its act16 form; *comp = 1 - |v| */
static inline float amp_lstm_act16_decode(uint16_t r, float *comp) {
    const float raw = amp_f32_from_bits(amp_bf16_decode(r));
    if (fabsf(raw) >= 2.0f) { /* form B: raw = (v - copysign(1, v)) * 2^64 (not NaN: the test is false) */
        const float u = raw * 0x1p-64f;
        *comp = fabsf(u);
        return u - copysignf(1.0f, u);
    }
    *comp = 1.0f - fabsf(raw);
    return raw;
}

/* Element j of cell_backward16: amp_lstm_cell_backward_at with each 1 - v computed from act16's
 * complement (1 - s = comp, 1 - t^2 = comp (2 - comp)). */
static inline void amp_lstm_cell_backward16_at(float *dgr, float *dc_prev, const uint16_t *act, const float *cprev,
                                               const float *dh, const float *dh2, const float *dc, size_t H,
                                               size_t j) {
#if defined(__clang__)
#pragma clang fp contract(off) /* as amp_lstm_cell_backward_at */
#endif
    float ci, cf, cg, co, ct;
    const float gi = amp_lstm_act16_decode(act[j], &ci), gf = amp_lstm_act16_decode(act[H + j], &cf);
    const float gg = amp_lstm_act16_decode(act[2 * H + j], &cg), go = amp_lstm_act16_decode(act[3 * H + j], &co);
    const float t = amp_lstm_act16_decode(act[4 * H + j], &ct);
    const float dh_out = dh2 ? dh[j] + dh2[j] : dh[j];
    const float dct = dc[j] + dh_out * go * (ct * (2.0f - ct));
    dgr[j] = dct * gg * gi * ci;
    dgr[H + j] = dct * cprev[j] * gf * cf;
    dgr[2 * H + j] = dct * gi * (cg * (2.0f - cg));
    dgr[3 * H + j] = dh_out * t * go * co;
    dc_prev[j] = dct * gf;
}

#endif
