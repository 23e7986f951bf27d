/* Internal: the gradient unscale + non-finite check kernels, one table per SIMD path.
 *
 * Semantics: torch._amp_foreach_non_finite_check_and_unscale_ on the CPU, every bit of it, NaN
 * encodings included (aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp). Per element:
 *     v = (float)x;                       f16/bf16 widen exactly (an f16 signalling NaN is quieted)
 *     if (!isfinite(v)) found_inf = 1;    the check is on the scaled (incoming) value
 *     x = (dtype)(inv_scale == 1 ? v : v * inv_scale);   fp32 multiply, round to nearest even
 * The NaNs PyTorch stores follow from how its kernel is built:
 *   - its AVX-512 build registers no kernel for this op (REGISTER_DISPATCH gives AVX-512 a null
 *     entry), so every x86 CPU with AVX2 runs the AVX2 build: a vector loop that takes two vectors
 *     per step, 2 x 8 floats or 2 x 16 f16/bf16 (AMP_UNSCALE_TORCH_STEP_*), over the first
 *     n - n % step elements, and its scalar code over the last n % step;
 *   - f32: the multiply's own NaN (a NaN operand quieted, its sign and payload kept; 0 * inf gives
 *     the default NaN 0xFFC00000); at inv_scale == 1 the element is left as it is;
 *   - f16: both paths round with VCVTPS2PH, which keeps a NaN's sign and the top 10 bits of its
 *     payload (quieted): an f16 NaN comes back quieted with its payload, also at inv_scale == 1;
 *   - bf16: the vector path writes every NaN as 0xFFFF, the scalar path as 0x7FC0 (BFloat16's
 *     round_to_nearest_even), whatever the sign, also at inv_scale == 1: the element's position
 *     decides, e.g. -0.0 * inf is 0xFFFF at index 0 of 32 elements and 0x7FC0 at index 32 of 33;
 *   - a NaN inv_scale times a NaN element: an x86 multiply returns its first operand's NaN, and
 *     PyTorch's compiled loop puts the element first in its scalar code and in the first vector of
 *     each step, the scale first in the second vector (amp_unscale_nan_product).
 * amp follows this rule for every n, which is PyTorch's result whenever its kernel runs as one
 * piece: n <= 32768 (its grain size) or one thread. With T > 1 threads and n > 32768, PyTorch cuts
 * the array into min(T, ceil(n / 32768)) pieces of ceil(n / pieces) elements and each piece has its
 * own scalar tail (positions amp cannot know without PyTorch's thread count); on a CPU without
 * AVX2, or with ATEN_CPU_CAPABILITY=default, every bf16 NaN is 0x7FC0. Finite results never depend
 * on any of this.
 *
 * The optional second flag (`found_after`, NULL when not wanted) is amp's safe mode: it is set when a
 * finite input gives a non-finite stored result, which PyTorch never detects (pytorch#99640: an
 * inv_scale > 1, or an inf inv_scale from a zero scale). Flags are only ever set to 1.0f, never
 * cleared: pre-zeroing is the caller's job, as in PyTorch.
 *
 * The scalar helpers below are the reference algorithm; the SIMD kernels run them on their tails and
 * for a NaN inv_scale, so every element of an array goes through one definition of the result. When
 * inv_scale == 1 the kernels only read, unless an f16/bf16 input is non-finite: then they rewrite the
 * array with inv_scale 1, which re-encodes its NaNs as PyTorch does and leaves every other value as
 * it is. */
#ifndef AMP_UNSCALE_KERNELS_H
#define AMP_UNSCALE_KERNELS_H

#include <stdbool.h>
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
    AMP_UNSCALE_BF16_EXP = 0x7F80,
    AMP_UNSCALE_TORCH_STEP_F32 = 16, /* elements per step of PyTorch's vector loop: two vectors */
    AMP_UNSCALE_TORCH_STEP_16 = 32,
    AMP_UNSCALE_BF16_NAN_VECTOR = 0xFFFF, /* PyTorch's bf16 NaN: vector loop, scalar tail */
    AMP_UNSCALE_BF16_NAN_SCALAR = 0x7FC0
};

/* The product PyTorch stores at index j when inv_scale is NaN, from the bits of the element v and
 * of inv (its vector loop ending at nv, two vectors of `half` elements per step): every product is
 * a NaN, the first operand's when both are NaN (the x86 multiply's rule), quieted. PyTorch's loop
 * has the scale first in the second vector of each step. */
static inline uint32_t amp_unscale_nan_product(uint32_t v, uint32_t inv, size_t j, size_t nv, size_t half) {
    const bool v_first = (v & 0x7FFFFFFFu) > 0x7F800000u && !(j < nv && j % (2 * half) >= half);
    return (v_first ? v : inv) | 0x00400000u;
}

/* fp32 bits to f16 as VCVTPS2PH rounds (PyTorch's conversion on both of its paths): to nearest even,
 * and a NaN keeps its sign and the top 10 bits of its payload, quieted. */
static inline uint16_t amp_unscale_f16_round(uint32_t f) {
    if ((f & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)(((f >> 16) & 0x8000u) | 0x7E00u | ((f >> 13) & 0x03FFu));
    return amp_f16_encode(f, AMP_OVERFLOW_INF);
}

/* fp32 bits to bf16 as PyTorch stores them at index j (its vector loop ending at nv): to nearest
 * even, a NaN as 0xFFFF in the vector loop and 0x7FC0 in the scalar tail. */
static inline uint16_t amp_unscale_bf16_round(uint32_t f, size_t j, size_t nv) {
    if ((f & 0x7FFFFFFFu) > 0x7F800000u) return j < nv ? AMP_UNSCALE_BF16_NAN_VECTOR : AMP_UNSCALE_BF16_NAN_SCALAR;
    return amp_bf16_encode(f, AMP_OVERFLOW_INF);
}

/* A NaN inv_scale on elements [i, n) of x[0..n) (see amp_unscale_*_scalar): every result is a NaN,
 * so every finite input counts for *bad_out. */
static inline void amp_unscale_f32_nan_scale(float *x, size_t i, size_t n, float inv, unsigned *bad_in,
                                             unsigned *bad_out) {
    const size_t nv = n - n % AMP_UNSCALE_TORCH_STEP_F32;
    unsigned in = 0, out = 0;
    for (; i < n; i++) {
        const uint32_t v = amp_f32_bits(x[i]);
        const unsigned nf = (v & AMP_UNSCALE_F32_EXP) == AMP_UNSCALE_F32_EXP;
        in |= nf;
        out |= !nf;
        x[i] = amp_f32_from_bits(amp_unscale_nan_product(v, amp_f32_bits(inv), i, nv, AMP_UNSCALE_TORCH_STEP_F32 / 2));
    }
    *bad_in |= in;
    *bad_out |= out;
}

static inline void amp_unscale_f16_nan_scale(uint16_t *x, size_t i, size_t n, float inv, unsigned *bad_in,
                                             unsigned *bad_out) {
    const size_t nv = n - n % AMP_UNSCALE_TORCH_STEP_16;
    unsigned in = 0, out = 0;
    for (; i < n; i++) {
        const unsigned nf = (x[i] & AMP_UNSCALE_F16_EXP) == AMP_UNSCALE_F16_EXP;
        in |= nf;
        out |= !nf;
        const uint32_t p = amp_unscale_nan_product(amp_f16_decode(x[i]), amp_f32_bits(inv), i, nv,
                                                   AMP_UNSCALE_TORCH_STEP_16 / 2);
        x[i] = amp_unscale_f16_round(p);
    }
    *bad_in |= in;
    *bad_out |= out;
}

/* Each helper handles elements [i, n) of the array x[0..n) and ORs 1 into *bad_in for a non-finite
 * input and into *bad_out for a finite input whose stored result is non-finite. `write` 0: only
 * read (inv_scale == 1 before any non-finite input was seen). */
static inline void amp_unscale_f32_scalar(float *x, size_t i, size_t n, float inv, int write, unsigned *bad_in,
                                          unsigned *bad_out) {
    if (write && inv != inv) {
        amp_unscale_f32_nan_scale(x, i, n, inv, bad_in, bad_out);
        return;
    }
    unsigned in = 0, out = 0;
    for (; i < n; i++) {
        const unsigned nf = (amp_f32_bits(x[i]) & AMP_UNSCALE_F32_EXP) == AMP_UNSCALE_F32_EXP;
        in |= nf;
        if (write) {
            const float p = x[i] * inv; /* at most one NaN operand: the order does not matter */
            x[i] = p;
            out |= ((amp_f32_bits(p) & AMP_UNSCALE_F32_EXP) == AMP_UNSCALE_F32_EXP) & !nf;
        }
    }
    *bad_in |= in;
    *bad_out |= out;
}

static inline void amp_unscale_f16_scalar(uint16_t *x, size_t i, size_t n, float inv, int write, unsigned *bad_in,
                                          unsigned *bad_out) {
    if (write && inv != inv) {
        amp_unscale_f16_nan_scale(x, i, n, inv, bad_in, bad_out);
        return;
    }
    unsigned in = 0, out = 0;
    for (; i < n; i++) {
        const unsigned nf = (x[i] & AMP_UNSCALE_F16_EXP) == AMP_UNSCALE_F16_EXP;
        in |= nf;
        if (write) {
            const float p = amp_f32_from_bits(amp_f16_decode(x[i])) * inv;
            const uint16_t h = amp_unscale_f16_round(amp_f32_bits(p));
            x[i] = h;
            out |= ((h & AMP_UNSCALE_F16_EXP) == AMP_UNSCALE_F16_EXP) & !nf;
        }
    }
    *bad_in |= in;
    *bad_out |= out;
}

static inline void amp_unscale_bf16_scalar(uint16_t *x, size_t i, size_t n, float inv, int write, unsigned *bad_in,
                                           unsigned *bad_out) {
    const size_t nv = n - n % AMP_UNSCALE_TORCH_STEP_16;
    unsigned in = 0, out = 0;
    for (; i < n; i++) {
        const unsigned nf = (x[i] & AMP_UNSCALE_BF16_EXP) == AMP_UNSCALE_BF16_EXP;
        in |= nf;
        if (write) {
            /* a NaN's payload is not stored, so a NaN inv_scale needs no special case */
            const float p = amp_f32_from_bits(amp_bf16_decode(x[i])) * inv;
            const uint16_t h = amp_unscale_bf16_round(amp_f32_bits(p), i, nv);
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

/* A whole f16 or bf16 array through the scalar algorithm: the SIMD kernels' way for a NaN inv_scale,
 * whose per-lane results follow PyTorch's compiled loop rather than one vector rule. */
static inline void amp_unscale_u16_scalar(uint16_t *x, size_t n, float inv, int is_bf16, unsigned *bad_in,
                                          unsigned *bad_out) {
    if (is_bf16)
        amp_unscale_bf16_scalar(x, 0, n, inv, 1, bad_in, bad_out);
    else
        amp_unscale_f16_scalar(x, 0, n, inv, 1, bad_in, bad_out);
}

#endif
