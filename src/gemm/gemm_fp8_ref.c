/* amp_gemm_fp8's checks and its reference twin: decode both operands to fp32 with their block
 * factors, then amp_gemm in fp32 (amp/gemm.h states the contract). */
#include <stddef.h>
#include <stdint.h>

#include "amp/formats.h"
#include "amp/gemm.h"
#include "amp/status.h"
#include "gemm_fp8.h"
#include "../core/alloc_internal.h"

static bool dtype_ok(amp_dtype d) { return d == AMP_F8E4M3 || d == AMP_F8E5M2 || d == AMP_BF16 || d == AMP_F32; }

void amp_gemm_fp8_stored_shape(const amp_gemm_fp8_operand *x, int64_t rows, int64_t cols, int64_t *sr, int64_t *sc) {
    *sr = x->trans ? cols : rows;
    *sc = x->trans ? rows : cols;
}

/* A stored r x c matrix with leading dimension ld: ld covers a row and the last element is
 * addressable (amp_gemm's rule). */
static int check_matrix(int64_t r, int64_t c, int64_t ld, size_t esize) {
    if (ld < c) return AMP_ERR_INVALID_ARGUMENT;
    if (r == 0 || c == 0) return AMP_OK;
    const int64_t limit = (int64_t)(PTRDIFF_MAX / (ptrdiff_t)esize);
    if (c > limit || r - 1 > (limit - c) / ld) return AMP_ERR_INVALID_ARGUMENT;
    return AMP_OK;
}

static int check_operand(const amp_gemm_fp8_operand *x, int64_t rows, int64_t cols) {
    int64_t sr, sc;
    amp_gemm_fp8_stored_shape(x, rows, cols, &sr, &sc);
    int st = check_matrix(sr, sc, x->ld, amp_dtype_size(x->dtype));
    if (st != AMP_OK) return st;
    if (x->block_rows < 0 || x->block_cols < 0 || (x->block_rows == 0) != (x->block_cols == 0))
        return AMP_ERR_INVALID_ARGUMENT;
    if (x->block_rows == 0) return AMP_OK;
    const int64_t br = sr / x->block_rows + (sr % x->block_rows != 0);
    const int64_t bc = sc / x->block_cols + (sc % x->block_cols != 0);
    return check_matrix(br, bc, x->ld_scale, sizeof(float));
}

int amp_gemm_fp8_check(int64_t m, int64_t n, int64_t k, const amp_gemm_fp8_operand *a, const amp_gemm_fp8_operand *b,
                       const float *c, int64_t ldc) {
    if (!a || !b) return AMP_ERR_NULL_POINTER;
    if (!dtype_ok(a->dtype) || !dtype_ok(b->dtype)) return AMP_ERR_UNSUPPORTED_DTYPE;
    if (m < 0 || n < 0 || k < 0) return AMP_ERR_INVALID_ARGUMENT;
    int st;
    if ((st = check_operand(a, m, k)) != AMP_OK || (st = check_operand(b, k, n)) != AMP_OK ||
        (st = check_matrix(m, n, ldc, sizeof(float))) != AMP_OK)
        return st;
    if ((!a->data && m > 0 && k > 0) || (!b->data && k > 0 && n > 0) || (!c && m > 0 && n > 0))
        return AMP_ERR_NULL_POINTER;
    return AMP_OK;
}

static float tensor_factor(const amp_gemm_fp8_operand *x) {
    return x->scale_inv && x->block_rows == 0 ? x->scale_inv[0] : 1.0f;
}

float amp_gemm_fp8_alpha(float alpha, const amp_gemm_fp8_operand *a, const amp_gemm_fp8_operand *b) {
    return alpha * tensor_factor(a) * tensor_factor(b);
}

void amp_gemm_fp8_scale_c(int64_t m, int64_t n, float beta, float *c, int64_t ldc) {
    for (int64_t i = 0; i < m; i++) {
        float *row = c + i * ldc;
        if (beta == 0.0f) {
            for (int64_t j = 0; j < n; j++) row[j] = 0.0f;
        } else if (beta != 1.0f) {
            for (int64_t j = 0; j < n; j++) row[j] *= beta;
        }
    }
}

void amp_gemm_fp8_decode(float *dst, const amp_gemm_fp8_operand *x, int64_t sr, int64_t sc) {
    const size_t es = amp_dtype_size(x->dtype);
    const bool blocks = x->scale_inv && x->block_rows > 0;
    for (int64_t i = 0; i < sr; i++) {
        float *row = dst + i * sc;
        amp_convert(row, AMP_F32, (const char *)x->data + (size_t)(i * x->ld) * es, x->dtype, (size_t)sc);
        if (!blocks) continue;
        const float *f = x->scale_inv + (i / x->block_rows) * x->ld_scale;
        for (int64_t j = 0; j < sc; j++) row[j] *= f[j / x->block_cols];
    }
}

int amp_gemm_fp8_ref(int64_t m, int64_t n, int64_t k, float alpha, const amp_gemm_fp8_operand *a,
                     const amp_gemm_fp8_operand *b, float beta, float *c, int64_t ldc) {
    int st = amp_gemm_fp8_check(m, n, k, a, b, c, ldc);
    if (st != AMP_OK) return st;
    const float alpha_eff = amp_gemm_fp8_alpha(alpha, a, b);
    if (m == 0 || n == 0) return AMP_OK;
    if (k == 0 || alpha_eff == 0.0f) {
        amp_gemm_fp8_scale_c(m, n, beta, c, ldc);
        return AMP_OK;
    }
    int64_t ar, ac, br, bc;
    amp_gemm_fp8_stored_shape(a, m, k, &ar, &ac);
    amp_gemm_fp8_stored_shape(b, k, n, &br, &bc);
    float *af = amp_malloc((size_t)(ar * ac) * sizeof(float));
    float *bf = amp_malloc((size_t)(br * bc) * sizeof(float));
    if (!af || !bf) {
        amp_free(af);
        amp_free(bf);
        return AMP_ERR_OUT_OF_MEMORY;
    }
    amp_gemm_fp8_decode(af, a, ar, ac);
    amp_gemm_fp8_decode(bf, b, br, bc);
    st = amp_gemm(AMP_F32, a->trans, b->trans, m, n, k, alpha_eff, af, ac, bf, bc, beta, c, ldc);
    amp_free(af);
    amp_free(bf);
    return st;
}
