/* Internal: amp_gemm with an implicit B, packed by the caller while the GEMM runs (an implicit-GEMM
 * convolution builds its column panels straight from the image, without writing the column matrix
 * and reading it back).
 *
 * op(B) is k x n and never stored: when the driver needs a block of it, it calls
 *   pack(arg, kern, dst, j0, cols, p0, kc, r)
 * which must write rows [j0, j0 + cols) x columns [p0, p0 + kc) of M = op(B)^T (so M[j, p] =
 * op(B)[p, j]) into dst exactly as kern->pack would from a stored M: ceil(cols / r) panels of r
 * rows in kern->packed's layout (gemm_kernels.h), missing rows and the pad of an odd kc zero. r is
 * kern->nr, or kern->mr when the driver computes C^T (amp_gemm_computes_transposed). Given the same
 * packed values, every element of C gets the bits amp_gemm_untiled gives it on the stored op(B) (and
 * amp_gemm's, but for the AMX method's tiles, whose panels the callbacks do not make). The
 * callback runs on the GEMM's threads, several at once, on disjoint dst. */
#ifndef AMP_GEMM_IMPLICIT_H
#define AMP_GEMM_IMPLICIT_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/dtype.h"
#include "gemm_fused.h"
#include "../kernels/gemm_kernels.h"

typedef void (*amp_gemm_pack_cb)(const void *arg, const amp_gemm_kernel *kern, void *dst, int64_t j0, int64_t cols,
                                 int64_t p0, int64_t kc, int r);

/* amp_gemm with the kernel implicit products take: never AMX's tiles (amp/gemm.h, AMP_GEMM_BF16_AMX),
 * which amp_gemm uses for bf16 under that method. For a route whose twin has implicit operands (conv's
 * im2col beside its implicit GEMM, the LSTM's cell beside its sequence's packed weights), so that both
 * give the same bits. */
int amp_gemm_untiled(amp_dtype ab_dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const void *a, int64_t lda, const void *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* C = alpha op(A) op(B) + beta C, then the epilogue ep (NULL: none), op(B) as described above; the
 * arguments, checks and return values of amp_gemm_fused, b and ldb aside. */
int amp_gemm_implicit_b(amp_dtype ab_dtype, bool trans_a, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                        int64_t lda, amp_gemm_pack_cb pack_b, const void *pack_arg, float beta, float *c, int64_t ldc,
                        const amp_gemm_epilogue *ep);

/* C = alpha op(A) op(B) + beta C with both operands implicit: pack_a(arg_a, ...) packs rows of
 * M = op(A) (m x k), pack_b(arg_b, ...) rows of M = op(B)^T (n x k), each as described above (panels of
 * kern->mr or kern->nr rows, whichever side the driver puts it on). No epilogue. Given the same packed
 * values, the bits of amp_gemm on stored operands (the kernel and the order depend on ab_dtype, the
 * path and the shape only). Checks: ab_dtype, m, n, k, ldc and the NULLs, as amp_gemm's. */
int amp_gemm_implicit_ab(amp_dtype ab_dtype, int64_t m, int64_t n, int64_t k, float alpha, amp_gemm_pack_cb pack_a,
                         const void *arg_a, amp_gemm_pack_cb pack_b, const void *arg_b, float beta, float *c,
                         int64_t ldc);

/* Whether amp_gemm on this shape, with the active path's kernel for ab_dtype, computes C^T (the
 * implicit B is then packed in panels of kern->mr rows). */
bool amp_gemm_computes_transposed(amp_dtype ab_dtype, int64_t m, int64_t n, int64_t k);

#endif /* AMP_GEMM_IMPLICIT_H */
