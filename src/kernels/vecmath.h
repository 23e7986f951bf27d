/* Internal: elementwise fp32 math kernels (exp, tanh, sigmoid, erfc), one table per SIMD path.
 *
 * Each kernel maps dst[i] = f(src[i]) for i < n; dst may equal src (in place), any alignment, n may be
 * 0. The result of an element depends only on its value, never on its position or on n: the SIMD
 * kernels run their tails through the same vector code under a mask (no scalar tail), so an op that
 * splits its data differently (threads, rows, cell vs sequence) gets the same bits.
 *
 * Reference twins (kernels/ref/vecmath_ref.c) are libm's expf, tanhf, erfcf and the two-branch
 * sigmoid below, i.e. what the ops computed before the SIMD paths existed. The SIMD paths are not bit
 * for bit the reference: they are tested against double-precision libm over a strided sweep of all
 * 2^32 inputs (tests/test_vecmath.c) to within AMP_VECMATH_MAX_ULP ulps, with exact special cases:
 * NaN in gives NaN out, exp(+inf) = +inf, exp(-inf) = +0, overflow to +inf and underflow through the
 * subnormals to +0 (one rounding, VSCALEFPS), tanh(+-0) = +-0, tanh and sigmoid saturate to +-1 and
 * 1 / +0 exactly, erfc(+inf) = +0, erfc(-inf) = 2. No fast-math: the MXCSR default (round to nearest
 * even, subnormals kept) is assumed, as everywhere in amp. */
#ifndef AMP_VECMATH_H
#define AMP_VECMATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#include "amp/cpu.h"
#include "../core/float_bits.h"

/* The largest error, in units in the last place of the correctly rounded fp32 result, that any SIMD
 * kernel may have on any input (the test's bound; measured figures are in the test's notes). */
#define AMP_VECMATH_MAX_ULP 4

typedef void (*amp_vmath_kernel)(float *dst, const float *src, size_t n);
/* dx[i] = g[i] f'(x[i]) */
typedef void (*amp_vmath_grad_kernel)(float *dx, const float *g, const float *x, size_t n);
/* y[i] = f(x[i]) and d[i] = f'(x[i]); y may equal x, d overlaps neither */
typedef void (*amp_vmath_deriv_kernel)(float *y, float *d, const float *x, size_t n);

/* Cross-entropy's two passes over one row of C logits (ops/loss.c), x fp32 or (bf16 set) bf16 bit
 * patterns, read in place:
 *   ce_stats: *mx = the row's maximum (NaN skipped; -inf for a row of -inf and NaN only) and *sum =
 *     the sum over c of exp(x[c] - mx), added in 16 lanes (lane l: the c = l mod 16 in increasing c,
 *     from +0), the lanes then folded in halves (lane l += lane l + w, for w = 8, 4, 2, 1): the order
 *     a 16-wide vector adds in, fixed for every path
 *   ce_grad: d[c] = p k and d[t] = (p - 1) k, p = exp((x[c] - mx) - logsum), t < C
 * A path that has them gives exactly the bits of amp_vmath_ce_stats_composed and
 * amp_vmath_ce_grad_composed on its own table (tests/test_ce_kernels.c); where they are NULL the op runs
 * those. *mx may differ in the sign of a zero maximum, which changes no result (x - 0 is x either way
 * but for zeros, whose exp is 1). */
typedef void (*amp_vmath_ce_stats_fn)(const void *x, bool bf16, size_t C, float *mx, float *sum);
typedef void (*amp_vmath_ce_grad_fn)(float *d, const void *x, bool bf16, size_t C, float mx, float logsum, float k,
                                     size_t t);

typedef struct amp_vmath_kernels {
    amp_vmath_kernel exp;     /* e^x */
    amp_vmath_kernel tanh;    /* tanh x */
    amp_vmath_kernel sigmoid; /* 1 / (1 + e^-x) */
    amp_vmath_kernel erfc;    /* 1 - erf x, full relative accuracy in the right tail */
    /* GELU and its gradient in one pass, without intermediate arrays: exactly the bits of
     * amp_vmath_gelu_composed and amp_vmath_gelu_grad_composed on this table (its own erfc and exp,
     * the scalar arithmetic below); tests/test_gelu_kernels.c checks the equality. */
    amp_vmath_kernel gelu;           /* x Phi(x) */
    amp_vmath_grad_kernel gelu_grad; /* g (Phi(x) + x phi(x)) */
    /* y = gelu's value and d = Phi(x) + x phi(x) rounded once, the factor gelu_grad multiplies g by, so
     * that g * d (one fp32 multiply) is gelu_grad's value; one erfc for both (amp_linear_gelu: the
     * derivative made in forward, where backward recomputed erfc). The same test checks y against
     * gelu and g * d against gelu_grad. */
    amp_vmath_deriv_kernel gelu_deriv;
    /* GELU's tanh approximation (below), fused likewise: exactly the bits of amp_vmath_gelu_tanh_composed,
     * amp_vmath_gelu_tanh_grad_composed and amp_vmath_gelu_tanh_deriv_composed on this table (its own
     * tanh, the scalar arithmetic below); tests/test_gelu_kernels.c checks the equality. */
    amp_vmath_kernel gelu_tanh;
    amp_vmath_grad_kernel gelu_tanh_grad;
    amp_vmath_deriv_kernel gelu_tanh_deriv;
    /* cross-entropy's two passes over a row (below), fused; NULL on a path without them */
    amp_vmath_ce_stats_fn ce_stats;
    amp_vmath_ce_grad_fn ce_grad;
} amp_vmath_kernels;

/* 1/sqrt(2) and 1/sqrt(2*pi), for gelu's Gaussian CDF and density. */
#define AMP_VMATH_INV_SQRT2 0.70710678118654752440f
#define AMP_VMATH_INV_SQRT_2PI 0.39894228040143267794f

/* gelu uses Phi(x) = erfc(-x/sqrt 2)/2, the standard normal CDF: x/2 * (1 + erf(x/sqrt 2)) rewritten
 * with erfc, which keeps full relative accuracy in the left tail where 1 + erf cancels; and the
 * density phi(x) = e^(-x^2/2)/sqrt(2 pi). Per element, with erfc and exp of the table k:
 *     y  = x * (0.5 * erfc(-x * INV_SQRT2))
 *     dx = g * (0.5 * erfc(-x * INV_SQRT2) + x * (INV_SQRT_2PI * exp((-0.5 * x) * x)))
 * These compose k->erfc and k->exp with scalar loops (what the gelu op ran before the fused kernels):
 * the fused kernels' oracle. */
void amp_vmath_gelu_composed(const amp_vmath_kernels *k, float *y, const float *x, size_t n);
void amp_vmath_gelu_grad_composed(const amp_vmath_kernels *k, float *dx, const float *g, const float *x, size_t n);

/* GELU's tanh approximation (PyTorch's F.gelu(approximate='tanh'), GPT-2's and llm.c's), composed on a
 * table's tanh kernel with PyTorch's formulas, per element, t = tanh(BETA * (x + KAPPA * x^3)):
 *     y  = (0.5 * x) * (1 + t)
 *     d  = 0.5 * (1 + t) + (0.5 * x) * (1 - t * t) * (BETA * (1 + 3 * KAPPA * x^2))
 *     dx = g * d
 * BETA = sqrt(2/pi), KAPPA = 0.044715. deriv writes y and d (y may equal x; d overlaps neither); grad
 * is g times deriv's d, one fp32 multiply, so the fused linear's stored derivative gives its bits. The
 * reference path's tanh is libm's tanhf; the SIMD paths' is theirs (within AMP_VECMATH_MAX_ULP). */
#define AMP_VMATH_GELU_TANH_BETA 0.79788456080286535588f
#define AMP_VMATH_GELU_TANH_KAPPA 0.044715f

/* tanh's argument, BETA * (x + KAPPA * x^3), and d from x and t = tanh of it, in that order of fp32
 * operations: the one scalar formula of the composition and of the reference path's fused kernels */
static inline float amp_vmath_gelu_tanh_arg(float v) {
    const float cube = v * v * v;
    return AMP_VMATH_GELU_TANH_BETA * (v + AMP_VMATH_GELU_TANH_KAPPA * cube);
}

static inline float amp_vmath_gelu_tanh_deriv_of(float v, float t) {
    const float left = 0.5f * v, right = 1.0f + t;
    const float inner_d = AMP_VMATH_GELU_TANH_BETA * (1.0f + 3.0f * AMP_VMATH_GELU_TANH_KAPPA * (v * v));
    return 0.5f * right + left * (1.0f - t * t) * inner_d;
}

void amp_vmath_gelu_tanh_composed(const amp_vmath_kernels *k, float *y, const float *x, size_t n);
void amp_vmath_gelu_tanh_deriv_composed(const amp_vmath_kernels *k, float *y, float *d, const float *x, size_t n);
void amp_vmath_gelu_tanh_grad_composed(const amp_vmath_kernels *k, float *dx, const float *g, const float *x,
                                       size_t n);

/* Element i of a row as ce_stats and ce_grad read it: fp32, or (bf16) a bf16 pattern widened, exactly */
static inline float amp_vmath_ce_at(const void *x, bool bf16, size_t i) {
    return bf16 ? amp_f32_from_bits(amp_bf16_decode(((const uint16_t *)x)[i])) : ((const float *)x)[i];
}

/* ce_stats and ce_grad as k->exp on rows of fp32 values with scalar loops: the fused kernels' oracle,
 * and what the op runs on a path without them. */
void amp_vmath_ce_stats_composed(const amp_vmath_kernels *k, const void *x, bool bf16, size_t C, float *mx,
                                 float *sum);
void amp_vmath_ce_grad_composed(const amp_vmath_kernels *k, float *d, const void *x, bool bf16, size_t C, float mx,
                                float logsum, float kk, size_t t);

void amp_vmath_kernels_ref(amp_vmath_kernels *k);
#if defined(__x86_64__)
void amp_vmath_kernels_avx2(amp_vmath_kernels *k);
void amp_vmath_kernels_avx512(amp_vmath_kernels *k);
#endif

/* The kernels for `isa` (a path the CPU lacks, or an invalid one, gets the reference's). */
const amp_vmath_kernels *amp_vmath_kernels_for(amp_isa isa);
/* The kernels of the active path (AMP_ISA, amp_isa_set). */
static inline const amp_vmath_kernels *amp_vmath_active(void) { return amp_vmath_kernels_for(amp_isa_active()); }

/* The scalar sigmoid of the reference path: both branches keep full relative accuracy, since e^-|x|
 * never overflows (1/(1 + e^-x) would give 0 instead of a subnormal below x = -88.7). NaN gives NaN. */
static inline float amp_sigmoid_scalar(float x) {
    const float e = expf(-fabsf(x));
    return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}

#endif
