/* Internal: amp_gemm with an epilogue applied while each block of C is still in cache.
 *
 * The ops that follow a product with a per-column bias and a rounding to the compute dtype (linear's
 * forward) would otherwise make two more passes over the whole fp32 C after the GEMM, reading it back
 * from memory. The epilogue runs on each panel of C's rows (a block of C where the loops compute C^T),
 * right after the panel's last k block, while it is in L2:
 *
 *   C[i, j] = +0 where relu_mask[i, j] is not > 0 and not NaN  (when relu_mask is not NULL: relu's
 *                                                                backward, the mask relu's output)
 *   C[i, j] = C[i, j] * grad_mul[i, j]                          (fp32 multiply, when grad_mul is
 *                                                                not NULL: gelu's backward)
 *   C[i, j] = (alpha op(A) op(B) + beta C)[i, j] + bias[j]     (fp32 add, when bias is not NULL)
 *   C[i, j] = relu(C[i, j])                                     (when relu: x > 0 or NaN keeps x,
 *                                                                else +0; core/relu_bits.h)
 *   D[i, j] = gelu'(C[i, j]), C[i, j] = gelu(C[i, j])           (when gelu; D = gelu_deriv if not
 *                                                                NULL; kernels/vecmath.h)
 *   C[i, j] = C[i, j] (rounded to res_round and decoded) + residual[i, j]
 *                                                               (fp32 add, when residual is not NULL:
 *                                                                amp_linear_residual's forward)
 *   out[i * ldo + j] = C[i, j] rounded to out_dtype            (amp_convert, when out is not NULL)
 *   acc[i * ldacc + j] += C[i, j] rounded to out_dtype, as fp32 (when acc is not NULL; with
 *                         acc_store, acc = 0 + that value, acc not read: acc held zeros)
 *
 * The acc step is a weight gradient's way into its fp32 master gradient under autocast: the GEMM's
 * fp32 dW, rounded once to the weight copy's dtype (the copy's gradient), decoded and added into the
 * master's gradient, the cast's backward; done here, no fp32 dW or low-precision gradient tensor
 * goes back to memory and is read again (src/tensor/autograd.c, amp_grad_sink_open).
 *
 * Each element gets exactly the operations, in the same order, that amp_gemm followed by a separate
 * bias pass, amp_convert and the fp32 add would give it, so the bits are those of the unfused
 * sequence. The relu before the rounding gives the bits of amp_relu after it: rounding keeps the sign
 * (a positive value never rounds to -0 or below), and a NaN stays NaN, encoded canonically either way;
 * likewise relu_mask's selection before the rounding gives the bits of relu's backward after it (a
 * kept value rounds as it would have, a dropped one is +0 either way). gelu and grad_mul have no such
 * property: with out_dtype fp32 (no rounding) they give the bits of amp_gelu after an fp32 linear and
 * of its backward; with a narrower out_dtype, gelu of the fp32 pre-activation rounded once, which is
 * not what amp_gelu on a rounded linear output gives. */
#ifndef AMP_GEMM_FUSED_H
#define AMP_GEMM_FUSED_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "amp/dtype.h"

typedef struct amp_gemm_epilogue {
    const float *bias;   /* [n] fp32, added to every row of C; or NULL */
    bool relu;           /* relu on C after the bias, before out and acc (amp_linear_relu's forward) */
    /* gelu on C after the bias, before out and acc (amp_linear_gelu's forward; not with relu), the
     * active path's kernel (kernels/vecmath.h); with gelu_deriv not NULL (m x n fp32, row stride
     * ldderiv >= n, overlapping no other matrix) also gelu's derivative at the pre-activation there
     * (gelu_deriv: g times it is gelu_grad's value) */
    bool gelu;
    float *gelu_deriv;
    int64_t ldderiv;
    /* m x n in relu_mask_dtype (f32, f16 or bf16), row stride ldmask >= n; or NULL. Applied to C before
     * everything else (amp_linear_relu's backward on the gradient this GEMM produces for its output) */
    const void *relu_mask;
    amp_dtype relu_mask_dtype;
    int64_t ldmask;
    /* m x n fp32, row stride ldmul >= n; or NULL. C times it, after relu_mask and before everything
     * else (amp_linear_gelu's backward on the gradient this GEMM produces for its output: the
     * derivative its forward stored) */
    const float *grad_mul;
    int64_t ldmul;
    /* m x n fp32, row stride ldres >= n; or NULL. Added to C after the activation, before out and acc,
     * C first rounded to res_round (F16 or BF16) and decoded, or as it is (F32): a linear's output in
     * its compute dtype plus an fp32 residual stream, amp_add's bits (amp_linear_residual). Overlaps no
     * other matrix. */
    const float *residual;
    int64_t ldres;
    amp_dtype res_round;
    void *out;           /* m x n in out_dtype, row stride ldo >= n; or NULL (C is the result) */
    amp_dtype out_dtype; /* any dtype amp_convert encodes from fp32 */
    int64_t ldo;
    float *acc;          /* m x n fp32, row stride ldacc >= n; or NULL. Overlaps neither C nor out */
    int64_t ldacc;
    bool acc_store;      /* acc is overwritten with 0 + the rounded value, not read */
    bool acc_stream;     /* with acc_store, a narrow out_dtype and no out: by non-temporal
                          * stores (a large master gradient, read next by the optimizer:
                          * convert_kernels.h's AMP_ACC_STREAM) */
    /* [m] fp32, or NULL: a_sums[i] += op(A)[i, p] for p = 0, 1, ..., k - 1, one fp32 add each in that
     * order (the row sums of op(A), added to what a_sums holds; alpha does not apply). A linear's bias
     * gradient is the column sums of G, the rows of op(A) = G^T in its weight gradient G^T X: the
     * driver adds them from each packed A panel right before the micro-kernels read it, while it is
     * in cache, where a separate pass read G from memory once more (amp_gemm_sums_a_fused says when; otherwise one plain
     * pass over A after the product, the same additions). Each i is summed by one thread, in order of
     * p, so the bits depend on neither the path nor the threads. Overlaps no other matrix. */
    float *a_sums;
    /* NULL, or raised (an atomic maximum, so any threads and blocks) to the elementwise kernels'
     * absmax_bits (kernels/elem_kernels.h) of every final value the epilogue leaves: the acc rows
     * when acc is not NULL, else C's. A weight gradient's inf/NaN check made as backward writes it
     * (amp_ctx_set_backward_grad_check, amp/tensor.h), where the optimizer's fused step would read
     * the whole gradient once more. With out not NULL (and no acc) the caller must not ask. */
    _Atomic uint32_t *absmax;
} amp_gemm_epilogue;

/* amp_gemm (same arguments, checks and return values) followed by the epilogue `ep` (NULL: none).
 * C holds the fp32 result (bias included) afterwards in every case. */
int amp_gemm_fused(amp_dtype ab_dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const void *a, int64_t lda, const void *b, int64_t ldb, float beta, float *c, int64_t ldc,
                   const amp_gemm_epilogue *ep);

/* The epilogue alone on an m x n fp32 C (row stride ldc) that is already the product: for results
 * computed in pieces (attention's gradient, a block at a time) that go to the same places. */
void amp_gemm_epilogue_apply(const amp_gemm_epilogue *ep, float *c, int64_t ldc, int64_t m, int64_t n);

/* Whether amp_gemm_fused adds an epilogue's a_sums from its packed A panels on this shape (the active
 * path's kernel for ab_dtype packs fp32, C is not computed transposed); else it makes a separate pass
 * over A, single-threaded, and a caller with a threaded pass of its own may prefer that. */
bool amp_gemm_sums_a_fused(amp_dtype ab_dtype, int64_t m, int64_t n, int64_t k);

#endif /* AMP_GEMM_FUSED_H */
