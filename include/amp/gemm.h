/* Matrix multiplication with low-precision inputs and fp32 accumulation.
 *
 *     C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C[m,n]
 *
 * Row-major, like C arrays: element (i, j) of a stored matrix X is x[i * ldx + j]. op(A) is A when
 * trans_a is false (A stored m x k, lda >= k) and A^T when it is true (A stored k x m, lda >= m);
 * likewise op(B) is B (stored k x n, ldb >= n) or B^T (stored n x k, ldb >= k). C is fp32, m x n,
 * ldc >= n.
 *
 * Arithmetic. A and B share ab_dtype: AMP_F32, AMP_F16 or AMP_BF16. Inputs are decoded exactly to
 * fp32 (an fp16 is never rounded to bf16 on the way), each product is formed and summed in fp32, and
 * alpha and beta are applied in fp32. The error against the exact result is that of an fp32 dot
 * product: |c - c_exact| <= about (k + 2) * 2^-24 * sum_p |alpha a_ip b_pj| + 2^-24 |beta c_ij|.
 * One exception, on CPUs with AVX512-BF16 (the fast bf16 path uses VDPBF16PS, which treats
 * subnormal inputs, products and sums as zero): for bf16 inputs, values below 2^-126 in magnitude
 * may be flushed to zero. The fp32 and fp16 paths keep subnormals.
 *
 * BLAS semantics: with beta == 0, C is not read (it may hold NaN or garbage) and is overwritten;
 * with alpha == 0 or k == 0, A and B are not read and C becomes beta * C; with m == 0 or n == 0
 * nothing happens. NaN and infinity in A or B propagate as IEEE arithmetic says.
 *
 * Determinism. Each element of C is computed by one thread, in an order over k that depends only on
 * the SIMD path (amp/cpu.h) and the shape, so the result is bit-identical from run to run and for
 * any thread count (amp/threads.h). Different SIMD paths may differ in the last bits.
 *
 * Threads and memory. amp_gemm runs on amp_get_num_threads() threads (fewer for small products).
 * Each thread keeps its packing buffers between calls, so calls of a steady shape do not allocate.
 * It is safe to call from several threads at once on distinct C.
 *
 * Returns AMP_OK, or (checked in this order, before anything is read or written):
 *   AMP_ERR_UNSUPPORTED_DTYPE  ab_dtype is not AMP_F32, AMP_F16 or AMP_BF16;
 *   AMP_ERR_INVALID_ARGUMENT   m, n or k negative; lda, ldb or ldc shorter than the row it strides
 *                              (see above); a matrix too large to address;
 *   AMP_ERR_NULL_POINTER       a, b or c NULL while that matrix has elements;
 *   AMP_ERR_OUT_OF_MEMORY      a packing buffer could not be allocated (C is then unspecified). */
#ifndef AMP_GEMM_H
#define AMP_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

int amp_gemm(amp_dtype ab_dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
             const void *a, int64_t lda, const void *b, int64_t ldb, float beta, float *c, int64_t ldc);

#ifdef __cplusplus
}
#endif
#endif /* AMP_GEMM_H */
