/* Internal: row kernels of the elementwise and row-reduction ops (layer norm, the causal softmax of
 * attention, the add of two same-shape tensors), one table per SIMD path (the lstm_kernels.h
 * pattern: a path inherits the reference for anything it does not fill).
 *
 * Elementwise kernels are IEEE multiplies, adds and divides in the reference's order, no FMA: every
 * path gives the reference's bits.
 *
 * Reductions (sum, dot, the layer norm sums) use one summation order on every path, defined here
 * and by the reference twin (kernels/ref/elem_ref.c): element j is added to lane j mod 16 (each lane
 * starting at +0, elements in increasing j), then the 16 lanes are folded in halves,
 *     t[l] = s[l] + s[l + 8], u[l] = t[l] + t[l + 4], v[l] = u[l] + u[l + 2], result v[0] + v[1].
 * AVX-512 keeps the 16 lanes in one register, AVX2 in two; a tail adds only its own lanes (a lane
 * never holds -0, so adding +0 to the others would change nothing either). So every path gives the
 * reference's bits, and a result depends on the row's values and length only
 * (tests/test_elem_kernels.c checks equality). The order differs from a left-to-right loop's: it
 * is amp's definition of these sums, deterministic like every other. */
#ifndef AMP_ELEM_KERNELS_H
#define AMP_ELEM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "amp/cpu.h"
#include "../core/relu_bits.h"

enum { AMP_ELEM_LANES = 16 };

typedef struct amp_elem_kernels {
    /* dst[i] = a[i] + b[i] (dst may equal a or b) */
    void (*add)(float *dst, const float *a, const float *b, size_t n);
    /* dst[i] = src[i] + c (c = +0 turns -0 into +0, as a gradient accumulated into zeros does) */
    void (*add_scalar)(float *dst, const float *src, float c, size_t n);
    /* dst[i] += src[i] */
    void (*acc)(float *dst, const float *src, size_t n);
    /* the largest x[i], n >= 1 (which zero, with +0 and -0 both largest, or what a NaN gives, is
     * the path's: the softmax's results do not depend on it) */
    float (*max)(const float *x, size_t n);
    /* the largest bit pattern of |x[i]| (x[i]'s with the sign bit cleared), 0 when n is 0: the largest
     * |x[i]| while all are finite, 0x7f800000 with an infinity, above it with any NaN. A maximum of
     * integers, so any order gives it (a GEMM's epilogue takes it over its blocks, gemm_fused.h) */
    uint32_t (*absmax_bits)(const float *x, size_t n);
    /* row[i] = relu(row[i] + bias[i]): the fp32 add, then relu's selection on the sum's bits
     * (core/relu_bits.h amp_relu_one32: x > 0, +0 or NaN keeps x, else +0). A linear's bias and relu
     * in the GEMM epilogue. */
    void (*bias_relu)(float *row, const float *bias, size_t n);
    /* g[i] kept where x[i] > 0 or x[i] is NaN, else +0 (core/relu_bits.h amp_relu_grad_one32): relu's
     * backward on fp32 bits, the GEMM epilogue's relu_mask */
    void (*relu_grad)(float *g, const float *x, size_t n);
    /* sum of x[i], in the lane order above */
    float (*sum)(const float *x, size_t n);
    /* sum of a[i] * b[i], in the lane order above */
    float (*dot)(const float *a, const float *b, size_t n);
    /* sum of (x[i] - mu) * (x[i] - mu), in the lane order above */
    float (*sum_sq_dev)(const float *x, float mu, size_t n);
    /* x[i] = x[i] - c */
    void (*sub_scalar)(float *x, float c, size_t n);
    /* x[i] = x[i] / c */
    void (*div_scalar)(float *x, float c, size_t n);
    /* d[i] = p[i] * (d[i] - r) (the softmax backward's row) */
    void (*softmax_grad)(float *d, const float *p, float r, size_t n);
    /* y[i] = (x[i] - mu) * rs, then * w[i] when w, then + b[i] when b */
    void (*norm_apply)(float *y, const float *x, float mu, float rs, const float *w, const float *b, size_t n);
    /* with gw = g[i] * w[i] (g[i] when w is NULL) and xhat = (x[i] - mu) * rs:
     * out[0] = sum gw, out[1] = sum gw * xhat, both in the lane order above */
    void (*norm_grad_sums)(float out[2], const float *g, const float *x, const float *w, float mu, float rs,
                           size_t n);
    /* with gw and xhat as above: dx[i] = rs * (gw - a - xhat * c) when dx; dw[i] += (g[i] * (x[i] - mu))
     * * rs when dw (the op's order before these kernels); db[i] += g[i] when db */
    void (*norm_grad_apply)(float *dx, float *dw, float *db, const float *g, const float *x, const float *w,
                            float mu, float rs, float a, float c, size_t n);
    /* relu and its gradient on the bits of a whole range (core/relu_bits.h's loops: fp16 or bf16 by
     * hb, or fp32), for amp_relu's passes. y and dx overlap no input, except relu32's y, which may be
     * x. NULL on the reference path, where the op decodes to fp32, selects and rounds back instead:
     * the same bits (tests/test_relu_bits.c), the twin AMP_ISA=ref runs. */
    void (*relu16)(uint16_t *y, const uint16_t *x, int64_t n, amp_half_bits hb);
    void (*relu_grad16)(uint16_t *dx, const uint16_t *x, const uint16_t *g, int64_t n, amp_half_bits hb);
    void (*relu32)(uint32_t *y, const uint32_t *x, int64_t n);
    void (*relu_grad32)(uint32_t *dx, const uint32_t *x, const uint32_t *g, int64_t n);
} amp_elem_kernels;

void amp_elem_kernels_ref(amp_elem_kernels *k);
#if defined(__x86_64__)
void amp_elem_kernels_avx2(amp_elem_kernels *k);
void amp_elem_kernels_avx512(amp_elem_kernels *k);
#endif

/* The kernels for `isa` (a path the CPU lacks, or an invalid one, gets the reference's). */
const amp_elem_kernels *amp_elem_kernels_for(amp_isa isa);
static inline const amp_elem_kernels *amp_elem_active(void) { return amp_elem_kernels_for(amp_isa_active()); }

/* The lanes' fold, shared by the reference and the tests. */
static inline float amp_elem_fold16(const float s[AMP_ELEM_LANES]) {
    float t[8], u[4], v[2];
    for (int l = 0; l < 8; l++) t[l] = s[l] + s[l + 8];
    for (int l = 0; l < 4; l++) u[l] = t[l] + t[l + 4];
    for (int l = 0; l < 2; l++) v[l] = u[l] + u[l + 2];
    return v[0] + v[1];
}

#endif
