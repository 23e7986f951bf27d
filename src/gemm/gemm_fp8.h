/* Internal: amp_gemm_fp8's argument checks and its reference twin, shared by the driver
 * (gemm_fp8.c) and the tests. */
#ifndef AMP_GEMM_FP8_H
#define AMP_GEMM_FP8_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/gemm.h"

/* amp/gemm.h's checks of amp_gemm_fp8, in its order: AMP_OK or the status amp_gemm_fp8 returns. */
int amp_gemm_fp8_check(int64_t m, int64_t n, int64_t k, const amp_gemm_fp8_operand *a, const amp_gemm_fp8_operand *b,
                       const float *c, int64_t ldc);

/* alpha_eff = (alpha * sa) * sb in fp32, sa and sb the per-tensor factors (1 where an operand has none
 * or has block factors). */
float amp_gemm_fp8_alpha(float alpha, const amp_gemm_fp8_operand *a, const amp_gemm_fp8_operand *b);

/* The stored shape sr x sc of an operand whose op() is rows x cols (op(A) is m x k, op(B) k x n). */
void amp_gemm_fp8_stored_shape(const amp_gemm_fp8_operand *x, int64_t rows, int64_t cols, int64_t *sr, int64_t *sc);

/* The stored sr x sc matrix of x decoded to fp32 into dst (leading dimension sc), block factors
 * multiplied in (one fp32 multiplication per element). */
void amp_gemm_fp8_decode(float *dst, const amp_gemm_fp8_operand *x, int64_t sr, int64_t sc);

/* C = beta * C on m x n (beta == 0: zeros, C not read): amp_gemm's result when k == 0 or alpha == 0. */
void amp_gemm_fp8_scale_c(int64_t m, int64_t n, float beta, float *c, int64_t ldc);

/* Whether amp_gemm_fp8 takes the bf16 route (amp/gemm.h) for these operands on the active path: the
 * bf16 kernel multiplies bf16 pairs (AVX-512's dot method) and both operands' decoded values are exact
 * in bf16 (fp8 or bf16, without block factors or with powers of 2). The arguments must be valid. */
bool amp_gemm_fp8_uses_bf16(int64_t m, int64_t n, int64_t k, const amp_gemm_fp8_operand *a,
                            const amp_gemm_fp8_operand *b);

/* The reference twin of amp_gemm_fp8 (same arguments, checks and statuses): each stored operand
 * decoded to a malloc'd fp32 matrix, block factors multiplied in (one fp32 multiplication per
 * element), then amp_gemm(AMP_F32, ...) with alpha_eff. amp_gemm_fp8's fp32 route gives these bits
 * on every path. */
int amp_gemm_fp8_ref(int64_t m, int64_t n, int64_t k, float alpha, const amp_gemm_fp8_operand *a,
                     const amp_gemm_fp8_operand *b, float beta, float *c, int64_t ldc);

#endif /* AMP_GEMM_FP8_H */
