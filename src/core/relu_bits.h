/* Internal: relu and its gradient as selections on the bits of fp32, fp16 and bf16 values, the one
 * definition that amp_relu's passes (src/ops/unary.c), the GEMM epilogue's relu (src/gemm/gemm.c)
 * and amp_linear_relu's backward (src/ops/matmul.c) share, so a fused relu gives the bits of the
 * separate op.
 *
 * relu keeps x or gives +0, and its gradient keeps g or gives +0: on any format both are bit
 * selections, which equal decoding to fp32, selecting (x > 0 or NaN keeps x; x <= 0 gives +0, -0 and
 * NaN-free negatives included) and rounding back, NaN included once it is canonical (the format's
 * quiet NaN with the sign kept, as every amp encoder gives). The gradient keeps g where x > 0 or x
 * is NaN (PyTorch's threshold_backward: 0 where x <= 0). relu(x) > 0 exactly where x > 0 and is NaN
 * exactly where x is, so the gradient's mask may be taken from y = relu(x) as well as from x.
 *
 * The loops are branch-free (masks, not conditions: the sign of an activation is a coin flip, which a
 * branch mispredicts half the time) and run in blocks of 8 with a fixed inner count, so that gcc's -O2
 * vectorizer takes them. */
#ifndef AMP_CORE_RELU_BITS_H
#define AMP_CORE_RELU_BITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "amp/dtype.h"

typedef struct amp_half_bits {
    uint16_t inf, qnan; /* exponent all ones; the canonical quiet NaN */
} amp_half_bits;

/* The 16-bit format's constants for dt (bf16 or fp16); false for any other dtype. */
static inline bool amp_half_bits_of(amp_dtype dt, amp_half_bits *hb) {
    if (dt == AMP_BF16) *hb = (amp_half_bits){0x7F80u, 0x7FC0u};
    else if (dt == AMP_F16) *hb = (amp_half_bits){0x7C00u, 0x7E00u};
    else return false;
    return true;
}

/* y = x > 0 || isnan(x) ? x : +0, a NaN made canonical */
static inline uint16_t amp_relu_one16(uint16_t x, amp_half_bits hb) {
    const uint16_t nan = (uint16_t)(0u - (uint16_t)((x & 0x7FFFu) > hb.inf)); /* all ones when NaN */
    const uint16_t pos = (uint16_t)((x >> 15) - 1u);                        /* all ones when the sign is clear */
    return (uint16_t)((x & pos & ~nan) | (((x & 0x8000u) | hb.qnan) & nan));
}

/* All ones where relu's gradient keeps g for a 16-bit x (x > 0 or NaN; inf: the format's exponent
 * mask), else 0; also a mask for an fp32 gradient value's bits (the GEMM epilogue's relu_mask). */
static inline uint32_t amp_relu_keep16(uint16_t x, uint16_t inf) {
    const uint16_t a = x & 0x7FFFu;
    return 0u - (uint32_t)((a > inf) | ((x >> 15) == 0u && a != 0u));
}

/* dx = x <= 0 ? +0 : g (NaN x passes g), g's NaN canonical */
static inline uint16_t amp_relu_grad_one16(uint16_t x, uint16_t g, amp_half_bits hb) {
    const uint16_t keep = (uint16_t)amp_relu_keep16(x, hb.inf);
    const uint16_t gnan = (uint16_t)(0u - (uint16_t)((g & 0x7FFFu) > hb.inf));
    return (uint16_t)(((g & ~gnan) | (((g & 0x8000u) | hb.qnan) & gnan)) & keep);
}

/* The same selections on fp32 bits (no rounding: NaN payloads pass unchanged). */
static inline uint32_t amp_relu_one32(uint32_t x) {
    const uint32_t nan = 0u - (uint32_t)((x & 0x7FFFFFFFu) > 0x7F800000u);
    const uint32_t pos = (x >> 31) - 1u;
    return x & (pos | nan);
}

static inline uint32_t amp_relu_grad_one32(uint32_t x, uint32_t g) {
    const uint32_t a = x & 0x7FFFFFFFu;
    return g & (0u - (uint32_t)((a > 0x7F800000u) | ((x >> 31) == 0u && a != 0u)));
}

static inline void amp_relu_bits16(uint16_t *restrict y, const uint16_t *restrict x, int64_t n, amp_half_bits hb) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) y[i + k] = amp_relu_one16(x[i + k], hb);
    for (; i < n; i++) y[i] = amp_relu_one16(x[i], hb);
}

static inline void amp_relu_grad_bits16(uint16_t *restrict dx, const uint16_t *restrict x, const uint16_t *restrict g,
                                        int64_t n, amp_half_bits hb) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) dx[i + k] = amp_relu_grad_one16(x[i + k], g[i + k], hb);
    for (; i < n; i++) dx[i] = amp_relu_grad_one16(x[i], g[i], hb);
}

/* y may be x (in place: each element is read before it is written, in one pass) */
static inline void amp_relu_bits32(uint32_t *y, const uint32_t *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) y[i + k] = amp_relu_one32(x[i + k]);
    for (; i < n; i++) y[i] = amp_relu_one32(x[i]);
}

static inline void amp_relu_grad_bits32(uint32_t *restrict dx, const uint32_t *restrict x, const uint32_t *restrict g,
                                        int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) dx[i + k] = amp_relu_grad_one32(x[i + k], g[i + k]);
    for (; i < n; i++) dx[i] = amp_relu_grad_one32(x[i], g[i]);
}

/* The fp32 row forms the elementwise kernels use (kernels/elem_kernels.h): the reference's whole row
 * and the SIMD paths' tails, one loop for both. row = relu(row + bias), the sum rounded to fp32
 * before the selection; g = relu'(x) * g in place (amp_relu_grad_bits32's arguments are restrict). */
static inline void amp_bias_relu_row32(float *row, const float *bias, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float v = row[i] + bias[i];
        uint32_t u;
        memcpy(&u, &v, sizeof u);
        u = amp_relu_one32(u);
        memcpy(&row[i], &u, sizeof u);
    }
}

static inline void amp_relu_grad_row32(float *g, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t ux, ug;
        memcpy(&ux, &x[i], sizeof ux);
        memcpy(&ug, &g[i], sizeof ug);
        ug = amp_relu_grad_one32(ux, ug);
        memcpy(&g[i], &ug, sizeof ug);
    }
}

#endif /* AMP_CORE_RELU_BITS_H */
