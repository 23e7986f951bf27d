/* Internal: a small fp32 product on the calling thread, its operands read where they are stored.
 *
 *     C = alpha A B      (m x n, inner size k; C written, not read)
 *     A(i, p) = a[i * a_rs + p * a_cs],  B(p, j) = b[p * b_rs + j * b_cs]   (BLIS's row and column
 *     strides; in each operand one of the two is 1)
 *
 * For the products of attention's heads (src/ops/attention.c: 48-128 x 32-128 x 32-128, thousands per
 * step) where amp_gemm's fixed costs per call (checks, the grid, thread buffers) and its packing (every
 * operand copied, most of them used by a few tiles) cost about as much as the multiply-adds. Here the
 * micro-kernels read A by rows or by columns and B by rows in place (gemm_kernels.h: ukernel_rb,
 * ukernel_ab); only a B whose rows are strided (B = X^T of a row-major X), and the partial panels at
 * the edges, are packed, into the caller's scratch.
 *
 * Bits: each element of C gets exactly amp_gemm's on the same arguments (beta 0, any thread count):
 * the same kernel arithmetic, k split into the same blocks of kern->kc with c = alpha sum for the
 * first and c = alpha sum + c after. tests/test_gemm_direct.c compares them. */
#ifndef AMP_GEMM_DIRECT_H
#define AMP_GEMM_DIRECT_H

#include <stdbool.h>
#include <stdint.h>

/* Whether the active path has the kernels (the AVX-512 path; elsewhere use amp_gemm). */
bool amp_gemm_direct_available(void);

/* Floats of scratch amp_gemm_direct_f32 needs for products of at most n columns and depth k. */
int64_t amp_gemm_direct_scratch(int64_t n, int64_t k);

/* The product above; false (nothing written) when the active path has no direct kernels or neither
 * stride of an operand is 1. m, n, k >= 0; scratch: amp_gemm_direct_scratch(n, k) floats, 64-byte
 * aligned is best. */
bool amp_gemm_direct_f32(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t a_rs, int64_t a_cs,
                         const float *b, int64_t b_rs, int64_t b_cs, float *c, int64_t ldc, float *scratch);

#endif /* AMP_GEMM_DIRECT_H */
