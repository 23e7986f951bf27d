/* Internal: fp32 accumulation of a row of values into an fp32 buffer, the one place that defines the
 * additions gradient accumulation makes (src/tensor/autograd.c), the GEMM epilogue's acc step that
 * must give the same bits (src/gemm/gemm.c), and the linear's bias sums (src/ops/matmul.c).
 *
 *   store false: acc[i] += v[i]
 *   store true:  acc[i] = 0 + v[i], acc not read: the bits of a zeroed acc plus v (-0 becomes +0),
 *                for a buffer whose zeros were never written (amp_zero_grad, tensor/ctx_internal.h)
 *
 * Blocks of 16 with a fixed inner count: gcc's -O2 vectorizer (the "very cheap" model) leaves a loop
 * of unknown count scalar but turns a fixed block into SIMD; the same additions in the same order
 * either way. The bf16 forms add the values decoded exactly (the bits shifted up), so they equal
 * amp_convert to fp32 followed by the fp32 form. */
#ifndef AMP_CORE_ACCUMULATE_H
#define AMP_CORE_ACCUMULATE_H

#include <stdbool.h>
#include <stdint.h>

#include "float_bits.h"

static inline void amp_acc_f32(float *restrict acc, const float *restrict v, int64_t n, bool store) {
    int64_t i = 0;
    if (store) {
        for (; i + 16 <= n; i += 16)
            for (int q = 0; q < 16; q++) acc[i + q] = 0.0f + v[i + q];
        for (; i < n; i++) acc[i] = 0.0f + v[i];
        return;
    }
    for (; i + 16 <= n; i += 16)
        for (int q = 0; q < 16; q++) acc[i + q] += v[i + q];
    for (; i < n; i++) acc[i] += v[i];
}

static inline void amp_acc_bf16(float *restrict acc, const uint16_t *restrict h, int64_t n, bool store) {
    int64_t i = 0;
    if (store) {
        for (; i + 16 <= n; i += 16)
            for (int q = 0; q < 16; q++) acc[i + q] = 0.0f + amp_f32_from_bits(amp_bf16_decode(h[i + q]));
        for (; i < n; i++) acc[i] = 0.0f + amp_f32_from_bits(amp_bf16_decode(h[i]));
        return;
    }
    for (; i + 16 <= n; i += 16)
        for (int q = 0; q < 16; q++) acc[i + q] += amp_f32_from_bits(amp_bf16_decode(h[i + q]));
    for (; i < n; i++) acc[i] += amp_f32_from_bits(amp_bf16_decode(h[i]));
}

#endif /* AMP_CORE_ACCUMULATE_H */
