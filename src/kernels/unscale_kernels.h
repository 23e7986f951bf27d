/* Internal: the gradient unscale + non-finite check kernels, one table per SIMD path.
 *
 * Semantics (PyTorch's _amp_foreach_non_finite_check_and_unscale_ CPU kernel, per element):
 *     v = (float)x;                       f16/bf16 widen exactly
 *     if (!isfinite(v)) found_inf = 1;    the check is on the scaled (incoming) value
 *     x = (dtype)(v * inv_scale);         fp32 multiply, then round to nearest even into the dtype
 * with two amp choices: when inv_scale == 1 nothing is written (PyTorch rewrites each element with
 * itself, which only differs for f16/bf16 NaN payloads); f16/bf16 NaN results are amp's canonical
 * NaN with the input's sign (core/float_bits.h), where PyTorch keeps f16 payloads and writes
 * bf16 NaNs as 0xFFFF or 0x7FC0 depending on its vector or scalar path.
 *
 * The optional second flag (`found_after`, NULL when not wanted) is amp's safe mode: it is set when a
 * finite input gives a non-finite stored result, which PyTorch never detects (pytorch#99640: an
 * inv_scale > 1, or an inf inv_scale from a zero scale). Flags are only ever set to 1.0f, never
 * cleared: pre-zeroing is the caller's job, as in PyTorch.
 *
 * The scalar helpers below are the reference algorithm; the SIMD kernels run them on their tails, so
 * every element of an array goes through one definition of the result. */
#ifndef AMP_UNSCALE_KERNELS_H
#define AMP_UNSCALE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "../core/float_bits.h"
#include "amp/cpu.h"
#include "amp/dtype.h"

/* grads: n elements of the table slot's dtype, any alignment; in place. */
typedef void (*amp_unscale_kernel)(void *grads, size_t n, float inv_scale, float *found_inf, float *found_after);

typedef struct amp_unscale_kernels {
    amp_unscale_kernel unscale[AMP_DTYPE_COUNT]; /* F32, F16, BF16; the fp8 slots stay NULL */
} amp_unscale_kernels;

void amp_unscale_kernels_ref(amp_unscale_kernels *k);
#if defined(__x86_64__)
void amp_unscale_kernels_avx2(amp_unscale_kernels *k);
void amp_unscale_kernels_avx512(amp_unscale_kernels *k);
#endif

/* The kernels for `isa`, which must be supported by this CPU. */
const amp_unscale_kernels *amp_unscale_kernels_for(amp_isa isa);

/* ---- the scalar algorithm (ref kernels and SIMD tails) ---- */

enum {
    AMP_UNSCALE_F32_EXP = 0x7F800000, /* exponent field all ones: inf or NaN */
    AMP_UNSCALE_F16_EXP = 0x7C00,
    AMP_UNSCALE_BF16_EXP = 0x7F80
};

/* Each helper handles elements [i, n) and ORs 1 into *bad_in for a non-finite input and into
 * *bad_out for a finite input whose stored result is non-finite. `write` is 0 when inv_scale == 1. */
static inline void amp_unscale_f32_scalar(float *x, size_t i, size_t n, float inv, int write, unsigned *bad_in,
                                          unsigned *bad_out) {
    unsigned in = 0, out = 0;
    for (; i < n; i++) {
        const unsigned nf = (amp_f32_bits(x[i]) & AMP_UNSCALE_F32_EXP) == AMP_UNSCALE_F32_EXP;
        in |= nf;
        if (write) {
            const float p = x[i] * inv;
            x[i] = p;
            out |= ((amp_f32_bits(p) & AMP_UNSCALE_F32_EXP) == AMP_UNSCALE_F32_EXP) & !nf;
        }
    }
    *bad_in |= in;
    *bad_out |= out;
}

static inline void amp_unscale_f16_scalar(uint16_t *x, size_t i, size_t n, float inv, int write, unsigned *bad_in,
                                          unsigned *bad_out) {
    unsigned in = 0, out = 0;
    for (; i < n; i++) {
        const unsigned nf = (x[i] & AMP_UNSCALE_F16_EXP) == AMP_UNSCALE_F16_EXP;
        in |= nf;
        if (write) {
            const float p = amp_f32_from_bits(amp_f16_decode(x[i])) * inv;
            const uint16_t h = amp_f16_encode(amp_f32_bits(p), AMP_OVERFLOW_INF);
            x[i] = h;
            out |= ((h & AMP_UNSCALE_F16_EXP) == AMP_UNSCALE_F16_EXP) & !nf;
        }
    }
    *bad_in |= in;
    *bad_out |= out;
}

static inline void amp_unscale_bf16_scalar(uint16_t *x, size_t i, size_t n, float inv, int write, unsigned *bad_in,
                                           unsigned *bad_out) {
    unsigned in = 0, out = 0;
    for (; i < n; i++) {
        const unsigned nf = (x[i] & AMP_UNSCALE_BF16_EXP) == AMP_UNSCALE_BF16_EXP;
        in |= nf;
        if (write) {
            const float p = amp_f32_from_bits(amp_bf16_decode(x[i])) * inv;
            const uint16_t h = amp_bf16_encode(amp_f32_bits(p), AMP_OVERFLOW_INF);
            x[i] = h;
            out |= ((h & AMP_UNSCALE_BF16_EXP) == AMP_UNSCALE_BF16_EXP) & !nf;
        }
    }
    *bad_in |= in;
    *bad_out |= out;
}

/* Publishes the accumulated flags: only ever stores 1.0f. */
static inline void amp_unscale_publish(unsigned bad_in, unsigned bad_out, float *found_inf, float *found_after) {
    if (bad_in && found_inf) *found_inf = 1.0f;
    if (bad_out && found_after) *found_after = 1.0f;
}

#endif
