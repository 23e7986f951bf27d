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
 * One exception, where the AVX-512 path multiplies bf16 with VDPBF16PS (AMP_GEMM_BF16_DOT below),
 * which treats subnormal inputs, products and sums as zero: for bf16 inputs, values below 2^-126 in
 * magnitude may be flushed to zero. The fp32 and fp16 products, and bf16 by AMP_GEMM_BF16_FMA, keep
 * subnormals.
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

/* How the AVX-512 path multiplies bf16 (amp_gemm and every product built on it: linear, conv, the
 * LSTM). Both form each product exactly and add in fp32; they differ in speed, which depends on the
 * core, and in the order of the adds and the subnormals (so in the last bits):
 *   AMP_GEMM_BF16_FMA  bf16 decoded to fp32 while packing, then the fp32 kernel (VFMADD231PS), one
 *                      k at a time; keeps subnormals. The only method of the ref and AVX2 paths.
 *   AMP_GEMM_BF16_DOT  VDPBF16PS (AVX512-BF16) on pairs of k: half the packed bytes; flushes
 *                      subnormals (see above).
 * The default is the one whose instruction has more flops per second on this core, measured once
 * (about a millisecond) on first use: cores with AVX512-BF16 differ, VDPBF16PS having twice the
 * FMA's flops on some and half on others. The
 * environment variable AMP_GEMM_BF16=fma|dot overrides it (an unknown or unsupported value warns and
 * keeps the default). The choice is process-wide, like amp_isa_set, and must not change while a
 * product or a training step is running. */
typedef enum amp_gemm_bf16_method {
    AMP_GEMM_BF16_FMA = 0,
    AMP_GEMM_BF16_DOT = 1,
    AMP_GEMM_BF16_METHOD_COUNT
} amp_gemm_bf16_method;

/* The method the AVX-512 path uses now. */
amp_gemm_bf16_method amp_gemm_bf16_method_active(void);
/* True for AMP_GEMM_BF16_FMA; for AMP_GEMM_BF16_DOT where the CPU has AVX-512 with AVX512-BF16. */
bool amp_gemm_bf16_method_supported(amp_gemm_bf16_method method);
/* Returns AMP_OK, AMP_ERR_INVALID_ARGUMENT for a value outside the enum, or AMP_ERR_UNSUPPORTED_ISA
 * (and changes nothing) when this CPU cannot run it. */
int amp_gemm_bf16_method_set(amp_gemm_bf16_method method);
/* VDPBF16PS's flops per second over VFMADD231PS's on this core, as measured for the default; 0
 * without AVX512-BF16. */
double amp_gemm_bf16_dot_speed(void);
/* "fma", "dot"; "invalid" otherwise. */
const char *amp_gemm_bf16_method_name(amp_gemm_bf16_method method);
/* Parses one of the names above: AMP_OK, AMP_ERR_INVALID_ARGUMENT, or AMP_ERR_NULL_POINTER. */
int amp_gemm_bf16_method_from_name(const char *name, amp_gemm_bf16_method *out);

#ifdef __cplusplus
}
#endif
#endif /* AMP_GEMM_H */
