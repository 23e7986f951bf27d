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
 * LSTM). Each forms the products exactly and adds in fp32; they differ in speed, which depends on the
 * core, and in the order of the adds and the subnormals (so in the last bits):
 *   AMP_GEMM_BF16_FMA  bf16 decoded to fp32 while packing, then the fp32 kernel (VFMADD231PS), one
 *                      k at a time; keeps subnormals. The only method of the ref and AVX2 paths.
 *   AMP_GEMM_BF16_DOT  VDPBF16PS (AVX512-BF16) on pairs of k: half the packed bytes; flushes
 *                      subnormals (see above).
 *   AMP_GEMM_BF16_AMX  AMX's TDPBF16PS on tiles (16 rows x 32 k by 32 k x 16 columns per
 *                      instruction) for amp_gemm and the ops built on it (linear, matmul, attention),
 *                      VDPBF16PS as DOT for conv2d, the LSTM and amp_gemm_fp8, whose other routes
 *                      pack their operands themselves (so each op keeps one kernel on every route);
 *                      flushes subnormals like DOT. Where the CPU has AMX-BF16 and Linux grants the
 *                      process its tile registers (amp asks on first use).
 * The default is AMX where it is usable; else the one of FMA and DOT whose instruction has more flops
 * per second on this core, measured once (about a millisecond) on first use: cores with AVX512-BF16
 * differ, VDPBF16PS having twice the FMA's flops on some and half on others. The environment variable
 * AMP_GEMM_BF16=fma|dot|amx overrides it (an unknown or unsupported value warns and keeps the
 * default). The choice is process-wide, like amp_isa_set, and must not change while a product or a
 * training step is running. The AMX kernels configure each thread's tiles once and leave them so: a
 * program that also runs other AMX code on amp's threads must configure its tiles itself (oneDNN
 * does, before each of its kernels) and leave them as it found them. */
typedef enum amp_gemm_bf16_method {
    AMP_GEMM_BF16_FMA = 0,
    AMP_GEMM_BF16_DOT = 1,
    AMP_GEMM_BF16_AMX = 2,
    AMP_GEMM_BF16_METHOD_COUNT
} amp_gemm_bf16_method;

/* The method the AVX-512 path uses now. */
amp_gemm_bf16_method amp_gemm_bf16_method_active(void);
/* True for AMP_GEMM_BF16_FMA; for AMP_GEMM_BF16_DOT where the CPU has AVX-512 with AVX512-BF16; for
 * AMP_GEMM_BF16_AMX where it also has AMX-BF16 that this process may use. */
bool amp_gemm_bf16_method_supported(amp_gemm_bf16_method method);
/* Returns AMP_OK, AMP_ERR_INVALID_ARGUMENT for a value outside the enum, or AMP_ERR_UNSUPPORTED_ISA
 * (and changes nothing) when this CPU cannot run it. */
int amp_gemm_bf16_method_set(amp_gemm_bf16_method method);
/* VDPBF16PS's flops per second over VFMADD231PS's on this core, as measured for the default; 0
 * without AVX512-BF16. */
double amp_gemm_bf16_dot_speed(void);
/* "fma", "dot", "amx"; "invalid" otherwise. */
const char *amp_gemm_bf16_method_name(amp_gemm_bf16_method method);
/* Parses one of the names above: AMP_OK, AMP_ERR_INVALID_ARGUMENT, or AMP_ERR_NULL_POINTER. */
int amp_gemm_bf16_method_from_name(const char *name, amp_gemm_bf16_method *out);

/* ---- fp8 operands ------------------------------------------------------------------------------
 *
 * amp_gemm_fp8 multiplies matrices stored in fp8 (amp/fp8.h's scaled casts, MXFP8 and block scaling
 * make them) without the caller decoding them first:
 *
 *     C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C[m,n]
 *
 * where each stored element stands for its decoded value times its factor (the scale_inv of the
 * recipe that quantized it). Shapes, transposes, leading dimensions and BLAS semantics (beta == 0:
 * C not read; alpha == 0 or k == 0: A and B not read, C = beta * C; m == 0 or n == 0: nothing) are
 * amp_gemm's. The two operands may have different dtypes (e5m2 gradients times e4m3 weights).
 *
 * Factors. An operand's scale_inv is NULL (every factor 1), one factor for the whole tensor
 * (block_rows = block_cols = 0), or one factor per block_rows x block_cols block of the STORED matrix
 * (before any transpose): element (i, j) of the stored matrix takes
 * scale_inv[(i / block_rows) * ld_scale + j / block_cols]. Blocks are what MXFP8 (1 x 32 along k)
 * and DeepSeek-style block scaling (1 x 128 tiles, 128 x 128 blocks; 128 x 1 for a tensor stored
 * with k along its rows) give.
 *
 * Arithmetic. Every stored element is decoded exactly to fp32 (fp8, bf16 and fp32 all are), a block
 * factor is multiplied into it in fp32 as it is decoded (exact when the factors are powers of 2 and
 * the products stay normal, as MX's and DeepSeek's are; otherwise the one fp32 rounding of that
 * multiplication), and the product is then amp_gemm's on those fp32 values: products formed exactly,
 * sums in fp32, the error bound of amp/gemm.h. The per-tensor factors sa, sb (1 where not given)
 * fold into alpha once, in fp32, as alpha_eff = (alpha * sa) * sb, which is applied to the fp32 sums
 * as amp_gemm applies alpha: C = alpha_eff * sum + beta * C. So a per-tensor factor costs nothing
 * per element and may be any fp32 value (not finite, negative, zero: IEEE arithmetic says what C
 * becomes, and an alpha_eff of 0, from alpha or a factor, is amp_gemm's alpha == 0: A and B are not
 * read). NaN and infinity in A or B (e5m2 infinities, NaN patterns) propagate as in amp_gemm.
 *
 * Speed. x86 has no fp8 arithmetic: fp8 is decoded while the GEMM packs its panels (amp_gemm's
 * packing, gemm_kernels.h's panel formats). Where the active path multiplies bf16 with VDPBF16PS
 * (AMP_GEMM_BF16_DOT, and AMP_GEMM_BF16_AMX, whose tiles take stored bf16 only) and every decoded
 * value is exact in bf16 (fp8 and bf16 operands, with no factors or with power-of-2 block factors), both operands are decoded to bf16 pairs: half the packed
 * bytes, and the flush of subnormal bf16 values that amp_gemm's dot method does (a decoded value
 * below 2^-126 may become 0). Otherwise (an fp32 operand, a block factor that is not a power of 2,
 * the AVX2 and reference paths, the fma method) the operands are decoded to fp32 panels for the fp32
 * kernel. The choice depends only on the path, the method, the dtypes and the factors.
 *
 * Determinism. As amp_gemm's: each element of C is summed by one thread in an order fixed by the path,
 * the bf16 method, the shape and the choice above, so its bits are the same for any thread count.
 * On the fp32 route the bits are exactly those of amp_gemm(AMP_F32, ...) on the decoded (and
 * block-scaled) operands with alpha_eff; on the bf16 route, those of amp_gemm(AMP_BF16, ...) on the
 * same values rounded to bf16 (no rounding happens: they are exact) under the dot method (under the amx
 * method too, which amp_gemm would run on tiles: the same bits as with AMP_GEMM_BF16_DOT). (A NaN
 * element of C is NaN on every route; its payload is not specified.)
 *
 * Threads and memory: amp_gemm's. The packing buffers are per thread and kept between calls.
 *
 * Returns AMP_OK, or (checked in this order, before anything is read or written):
 *   AMP_ERR_NULL_POINTER       a or b (the operand structs) NULL;
 *   AMP_ERR_UNSUPPORTED_DTYPE  an operand's dtype not AMP_F8E4M3, AMP_F8E5M2, AMP_BF16 or AMP_F32;
 *   AMP_ERR_INVALID_ARGUMENT   m, n or k negative; an ld shorter than its stored row, or ldc < n; a
 *                              matrix too large to address; block_rows or block_cols negative, or
 *                              one of them 0 and not the other; with blocks, ld_scale shorter than
 *                              the blocks across the stored matrix (ceil(cols / block_cols));
 *   AMP_ERR_NULL_POINTER       an operand's data NULL while it has elements (m k > 0, or k n > 0),
 *                              c NULL while C has elements;
 *   AMP_ERR_OUT_OF_MEMORY      a packing or decoding buffer could not be allocated (C is then
 *                              unspecified). */

/* One operand of amp_gemm_fp8: a stored matrix (row-major, leading dimension ld) whose elements are
 * AMP_F8E4M3 or AMP_F8E5M2 (also AMP_BF16 or AMP_F32, for an unquantized operand), used as itself
 * or transposed, and the factors that turn stored elements back into the values they stand for. */
typedef struct amp_gemm_fp8_operand {
    amp_dtype dtype;
    const void *data;
    int64_t ld;
    bool trans;              /* op(X) = X^T: A stored k x m, B stored n x k (as amp_gemm) */
    const float *scale_inv;  /* NULL: every factor 1 */
    int64_t block_rows, block_cols; /* 0, 0: one factor, scale_inv[0], for the whole tensor, applied to
                                       C in fp32 after accumulation (any value); else a factor per
                                       block_rows x block_cols block of the STORED matrix,
                                       scale_inv[(i / block_rows) * ld_scale + j / block_cols],
                                       multiplied into each element as it is decoded (exact when the
                                       factors are powers of two in range: MX, DeepSeek) */
    int64_t ld_scale;
} amp_gemm_fp8_operand;

/* C[m,n] = alpha * op(A) op(B) + beta * C, products exact, accumulation fp32: the contract above. */
int amp_gemm_fp8(int64_t m, int64_t n, int64_t k, float alpha, const amp_gemm_fp8_operand *a,
                 const amp_gemm_fp8_operand *b, float beta, float *c, int64_t ldc);

#ifdef __cplusplus
}
#endif
#endif /* AMP_GEMM_H */
