/* amp_gemm_fp8 on every SIMD path and bf16 method against a double oracle, its reference twin and
 * amp_gemm, bit for bit where the contract (amp/gemm.h) says the bits are those of another product.
 *
 * Oracle. Every stored element decodes exactly to fp32 (fp8, bf16), a block factor is multiplied into
 * it in fp32 (the test computes that product the same way, one fp32 multiplication), and each
 * product of two fp32 values is exact in double, so a double sum stands for the exact result (its
 * own error, about k 2^-53 sum|ab|, is negligible). The tolerance is test_gemm.c's fp32 dot-product
 * bound: |c - c_exact| <= 2 (k + 4) 2^-24 (|alpha_eff| sum_p |a_ip b_pj| + |beta c_ij|), plus the
 * rounding of alpha_eff = (alpha sa) sb itself (two fp32 roundings, folded into the same bound).
 *
 * Data. Random fp8 bit patterns over every finite value (subnormals and the largest included), bf16
 * and fp32 operands holding fp8 values (fp32 with a few more mantissa bits). Factors: per tensor any
 * fp32 value; per block, powers of 2 in [2^-8, 2^8] (exact, so the bf16 route applies) and, in one
 * case, values that are not powers of 2 (the fp32 route). Every decoded value times its factor stays
 * above 2^-126 in magnitude or is 0, so the bf16 dot method's flush of subnormals does not show.
 *
 * Bits. On the fp32 route the result must equal amp_gemm_fp8_ref's (amp_gemm in fp32 on the decoded
 * operands); on the bf16 route (AVX-512 with the dot method, fp8 or bf16 operands, power-of-2 or no
 * block factors) amp_gemm(AMP_BF16) under the dot method on the same values in bf16. Both also meet
 * the oracle's bound, and the bits are the same for 1, 2 and 3 threads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"
#include "tests.h"
#include "../src/gemm/gemm_fp8.h"
#include "../src/kernels/gemm_kernels.h"

/* One operand of a case: its dtype, whether stored transposed, and its factors' block shape (in the
 * stored matrix) and kind. */
typedef enum factor_kind { F_NONE, F_TENSOR, F_POW2, F_ANY } factor_kind;

typedef struct opspec {
    amp_dtype dt;
    bool trans;
    factor_kind fk;
    int64_t br, bc; /* block shape for F_POW2 / F_ANY */
} opspec;

/* A stored operand with its decoded, scaled values (fp32, leading dimension cols). */
typedef struct opdata {
    amp_gemm_fp8_operand op;
    int64_t rows, cols; /* stored shape */
    void *data;
    float *scales;
    float *vals; /* decode(x) * factor (block factors only), [rows][cols] */
} opdata;

/* A random finite fp8 pattern (NaN and infinity patterns redrawn). */
static uint8_t random_fp8(test_rng *rng, amp_dtype dt) {
    for (;;) {
        const uint8_t b = (uint8_t)test_rng_next(rng);
        if (dt == AMP_F8E4M3 && (b & 0x7F) == 0x7F) continue;
        if (dt == AMP_F8E5M2 && (b & 0x7C) == 0x7C) continue;
        return b;
    }
}

static float decode_scalar(amp_dtype dt, const void *data, size_t i) {
    switch (dt) {
    case AMP_F8E4M3: return amp_fp8e4m3_to_fp32(((const uint8_t *)data)[i]);
    case AMP_F8E5M2: return amp_fp8e5m2_to_fp32(((const uint8_t *)data)[i]);
    case AMP_BF16: return amp_bf16_to_fp32(((const uint16_t *)data)[i]);
    default: return ((const float *)data)[i];
    }
}

static float block_factor(test_rng *rng, factor_kind fk) {
    if (fk == F_ANY) return (float)(0.25 + (double)test_rng_below(rng, 1u << 20) / (double)(1u << 19));
    return ldexpf(1.0f, (int)test_rng_below(rng, 17) - 8);
}

/* Fills x with a random stored rows x cols matrix (leading dimension cols + pad) and its factors. */
static bool make_operand(opdata *x, const opspec *s, int64_t rows, int64_t cols, int64_t pad, test_rng *rng) {
    memset(x, 0, sizeof *x);
    x->rows = rows, x->cols = cols;
    const int64_t ld = cols + pad;
    const size_t es = amp_dtype_size(s->dt);
    x->data = calloc((size_t)(rows * ld) + 1, es);
    x->vals = calloc((size_t)(rows * cols) + 1, sizeof(float));
    const int64_t sbr = s->br ? (rows + s->br - 1) / s->br : 0, sbc = s->bc ? (cols + s->bc - 1) / s->bc + rows % 2 : 0; /* ld_scale: a row of blocks, or one more */
    x->scales = calloc((size_t)(sbr * sbc) + 1, sizeof(float));
    if (!x->data || !x->vals || !x->scales) return false;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < ld; j++) {
            const size_t at = (size_t)(i * ld + j);
            const uint8_t b = random_fp8(rng, s->dt == AMP_F8E5M2 ? AMP_F8E5M2 : AMP_F8E4M3);
            const float v = amp_fp8e4m3_to_fp32(b);
            switch (s->dt) {
            case AMP_F8E4M3:
            case AMP_F8E5M2: ((uint8_t *)x->data)[at] = b; break;
            case AMP_BF16: ((uint16_t *)x->data)[at] = (uint16_t)(f32_bits(v) >> 16); break;
            default: ((float *)x->data)[at] = v * (1.0f + (float)test_rng_below(rng, 1024) * 0x1p-20f); break;
            }
        }
    x->op = (amp_gemm_fp8_operand){.dtype = s->dt, .data = x->data, .ld = ld, .trans = s->trans};
    if (s->fk == F_TENSOR) {
        x->scales[0] = (float)(0.1 + (double)test_rng_below(rng, 1000) / 250.0);
        x->op.scale_inv = x->scales;
    } else if (s->fk == F_POW2 || s->fk == F_ANY) {
        for (int64_t i = 0; i < sbr * sbc; i++) x->scales[i] = block_factor(rng, s->fk);
        x->op.scale_inv = x->scales;
        x->op.block_rows = s->br, x->op.block_cols = s->bc, x->op.ld_scale = sbc;
    }
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            float v = decode_scalar(s->dt, x->data, (size_t)(i * ld + j));
            if (x->op.block_rows) v *= x->scales[(i / s->br) * sbc + j / s->bc];
            x->vals[i * cols + j] = v;
        }
    return true;
}

static void free_operand(opdata *x) {
    free(x->data);
    free(x->vals);
    free(x->scales);
}

/* op(X)[i, p] from the decoded values (A: i < m, p < k; B as op(B)^T: i < n, p < k). */
static double op_val(const opdata *x, bool is_b, int64_t i, int64_t p) {
    const bool stored_ip = is_b ? x->op.trans : !x->op.trans; /* stored as [i][p] */
    return stored_ip ? x->vals[i * x->cols + p] : x->vals[p * x->cols + i];
}

/* Whether amp_gemm_fp8 takes the bf16 route for these operands on the active path (amp/gemm.h). */
static bool bf16_route(const opdata *a, const opdata *b) {
    const amp_gemm_kernel *kern = amp_gemm_kernel_active(AMP_BF16);
    if (kern->packed != AMP_GEMM_PACKED_BF16_PAIRS) return false;
    const opdata *ops[2] = {a, b};
    for (int t = 0; t < 2; t++) {
        if (ops[t]->op.dtype == AMP_F32) return false;
        if (ops[t]->op.block_rows) {
            const int64_t n = (ops[t]->rows + ops[t]->op.block_rows - 1) / ops[t]->op.block_rows * ops[t]->op.ld_scale;
            for (int64_t i = 0; i < n; i++) {
                const float f = ops[t]->scales[i];
                if ((f32_bits(f) & 0x7FFFFFu) != 0) return false;
            }
        }
    }
    return true;
}

/* amp_gemm(AMP_BF16) on the operands' values in bf16 (exact) under the dot method: the bf16 route's
 * bits. */
static int bf16_twin(int64_t m, int64_t n, int64_t k, float alpha_eff, const opdata *a, const opdata *b, float beta,
                     float *c, int64_t ldc) {
    uint16_t *ab = calloc((size_t)(a->rows * a->cols) + 1, 2), *bb = calloc((size_t)(b->rows * b->cols) + 1, 2);
    if (!ab || !bb) {
        free(ab), free(bb);
        return AMP_ERR_OUT_OF_MEMORY;
    }
    for (int64_t i = 0; i < a->rows * a->cols; i++) ab[i] = (uint16_t)(f32_bits(a->vals[i]) >> 16);
    for (int64_t i = 0; i < b->rows * b->cols; i++) bb[i] = (uint16_t)(f32_bits(b->vals[i]) >> 16);
    const int st = amp_gemm(AMP_BF16, a->op.trans, b->op.trans, m, n, k, alpha_eff, ab, a->cols, bb, b->cols, beta, c,
                            ldc);
    free(ab), free(bb);
    return st;
}

typedef struct shape {
    int64_t m, n, k;
} shape;

/* One case on the active path: oracle bound, the twin's bits, 1/2/3 threads. Returns false when out
 * of memory. */
static bool run_case(const shape *sh, const opspec *sa, const opspec *sb, float alpha, float beta, test_rng *rng,
                     const char *what) {
    const int64_t m = sh->m, n = sh->n, k = sh->k, pad = 3, ldc = n + 2;
    opdata a, b;
    bool ok = make_operand(&a, sa, sa->trans ? k : m, sa->trans ? m : k, pad, rng) &&
              make_operand(&b, sb, sb->trans ? n : k, sb->trans ? k : n, pad, rng);
    float *c0 = calloc((size_t)(m * ldc) + 1, sizeof(float)), *c = calloc((size_t)(m * ldc) + 1, sizeof(float));
    float *twin = calloc((size_t)(m * ldc) + 1, sizeof(float));
    ok = ok && c0 && c && twin;
    if (ok) {
        for (int64_t i = 0; i < m * ldc; i++)
            c0[i] = beta == 0.0f ? NAN : (float)((double)test_rng_below(rng, 2001) / 1000.0 - 1.0);
        const float alpha_eff = amp_gemm_fp8_alpha(alpha, &a.op, &b.op);
        const bool dot = bf16_route(&a, &b);
        memcpy(twin, c0, (size_t)(m * ldc) * sizeof(float));
        const int st_twin = dot ? bf16_twin(m, n, k, alpha_eff, &a, &b, beta, twin, ldc)
                                : amp_gemm_fp8_ref(m, n, k, alpha, &a.op, &b.op, beta, twin, ldc);
        CHECK_EQ_INT(st_twin, AMP_OK);
        for (int threads = 1; threads <= 3; threads++) {
            amp_set_num_threads(threads);
            memcpy(c, c0, (size_t)(m * ldc) * sizeof(float));
            CHECK_EQ_INT(amp_gemm_fp8(m, n, k, alpha, &a.op, &b.op, beta, c, ldc), AMP_OK);
            int bad = 0;
            for (int64_t i = 0; i < m && bad < 3; i++)
                for (int64_t j = 0; j < ldc && bad < 3; j++) {
                    const float got = c[i * ldc + j];
                    if (j >= n) { /* guard band */
                        if (f32_bits(got) != f32_bits(c0[i * ldc + j])) bad++;
                        continue;
                    }
                    if (!CHECK_MSG(f32_bits(got) == f32_bits(twin[i * ldc + j]),
                                   "%s %s t%d %lldx%lldx%lld (%lld,%lld): got %a, twin (%s) %a", amp_isa_name(amp_isa_active()),
                                   what, threads, (long long)m, (long long)n, (long long)k, (long long)i, (long long)j,
                                   (double)got, dot ? "bf16 dot" : "fp32 ref", (double)twin[i * ldc + j]))
                        bad++;
                    if (threads > 1) continue;
                    double exact = 0.0, mag = 0.0;
                    for (int64_t p = 0; p < k && alpha_eff != 0.0f; p++) {
                        const double t = op_val(&a, false, i, p) * op_val(&b, true, j, p);
                        exact += t, mag += fabs(t);
                    }
                    const double cb = beta == 0.0f ? 0.0 : (double)beta * c0[i * ldc + j];
                    exact = (double)alpha_eff * exact + cb;
                    const double bound = 2.0 * (double)(k + 6) * 0x1p-24 * (fabs((double)alpha_eff) * mag + fabs(cb));
                    if (!CHECK_MSG(fabs((double)got - exact) <= bound,
                                   "%s %s %lldx%lldx%lld (%lld,%lld): got %.9g, exact %.9g, bound %.3g",
                                   amp_isa_name(amp_isa_active()), what, (long long)m, (long long)n, (long long)k,
                                   (long long)i, (long long)j, (double)got, exact, bound))
                        bad++;
                }
            CHECK_MSG(bad == 0, "%s %s: %d bad elements (guard band included)", amp_isa_name(amp_isa_active()), what, bad);
        }
        amp_set_num_threads(0);
    }
    free_operand(&a), free_operand(&b);
    free(c0), free(c), free(twin);
    return ok;
}

/* The bf16 methods to run on the active path: both where AVX-512 has the dot method. */
static int methods_for_path(amp_gemm_bf16_method out[2]) {
    int n = 0;
    out[n++] = AMP_GEMM_BF16_FMA;
    if (amp_isa_active() == AMP_ISA_AVX512 && amp_gemm_bf16_method_supported(AMP_GEMM_BF16_DOT))
        out[n++] = AMP_GEMM_BF16_DOT;
    return n;
}

void test_gemm_fp8_vs_oracle(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    test_rng rng = {seed ^ 0xF8F8u};
    const shape shapes[] = {{1, 1, 1},     {1, 17, 1},   {2, 3, 5},    {13, 33, 127}, {127, 129, 129},
                            {129, 31, 64}, {64, 100, 300}, {37, 250, 128}, {200, 48, 257}, {1, 300, 200}};
    const amp_dtype pairs[][2] = {{AMP_F8E4M3, AMP_F8E4M3}, {AMP_F8E5M2, AMP_F8E4M3}, {AMP_F8E4M3, AMP_F8E5M2},
                                  {AMP_F8E5M2, AMP_F8E5M2}, {AMP_F8E4M3, AMP_BF16},   {AMP_F32, AMP_F8E4M3}};
    /* block shapes of the stored matrices, along k or across it */
    const int64_t blocks[][2] = {{1, 32}, {1, 128}, {128, 128}, {128, 1}, {32, 1}, {3, 5}};
    const amp_gemm_bf16_method saved = amp_gemm_bf16_method_active();
    const bool quick = harness_quick();
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!test_isa_begin(isa)) continue;
        amp_gemm_bf16_method methods[2];
        const int n_methods = methods_for_path(methods);
        for (int mt = 0; mt < n_methods; mt++) {
            if (n_methods > 1) CHECK_EQ_INT(amp_gemm_bf16_method_set(methods[mt]), AMP_OK);
            const char *mname = amp_gemm_bf16_method_name(methods[mt]);
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                if (quick && s % 3 != 0) continue;
                for (size_t pr = 0; pr < sizeof pairs / sizeof pairs[0]; pr++)
                    for (int tr = 0; tr < 4; tr++) {
                        const int variant = (int)((s * 7 + pr * 3 + (size_t)tr) % 8);
                        opspec sa = {pairs[pr][0], tr & 1, F_NONE, 0, 0}, sb = {pairs[pr][1], (tr >> 1) & 1, F_NONE, 0, 0};
                        /* factors: none, per tensor, or blocks (power-of-2, one case not) in turn */
                        if (variant == 1 || variant == 5) sa.fk = sb.fk = F_TENSOR;
                        if (variant >= 2 && variant != 5) {
                            const int64_t *bl = blocks[(s + pr + (size_t)tr) % 6];
                            sa.fk = sb.fk = variant == 7 ? F_ANY : F_POW2;
                            sa.br = bl[0], sa.bc = bl[1];
                            sb.br = bl[1], sb.bc = bl[0];
                            if (variant == 4) sb.fk = F_TENSOR;
                        }
                        const float alpha = variant == 3 ? -0.75f : 1.0f, beta = variant % 2 ? 0.5f : 0.0f;
                        char what[96];
                        snprintf(what, sizeof what, "%s %s%s x %s%s f%d", mname, amp_dtype_name(sa.dt),
                                 sa.trans ? "^T" : "", amp_dtype_name(sb.dt), sb.trans ? "^T" : "", variant);
                        if (!CHECK_MSG(run_case(&shapes[s], &sa, &sb, alpha, beta, &rng, what), "out of memory")) break;
                    }
            }
        }
        if (n_methods > 1) amp_gemm_bf16_method_set(saved);
    }
    test_isa_end();
}

/* Edge shapes: m, n or k 0 (C = beta C, or untouched), alpha 0 and a zero factor (A and B unread:
 * NULL data is fine), beta 0 over NaN in C. */
void test_gemm_fp8_edges(void) {
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!test_isa_begin(isa)) continue;
        uint8_t a[12], b[12];
        for (int i = 0; i < 12; i++) a[i] = 0x38, b[i] = 0x40; /* e4m3: 1 and 2 */
        float c[12];
        const amp_gemm_fp8_operand oa = {.dtype = AMP_F8E4M3, .data = a, .ld = 4};
        const amp_gemm_fp8_operand ob = {.dtype = AMP_F8E4M3, .data = b, .ld = 3};
        for (int i = 0; i < 12; i++) c[i] = NAN;
        CHECK_EQ_INT(amp_gemm_fp8(3, 3, 4, 1.0f, &oa, &ob, 0.0f, c, 3), AMP_OK);
        for (int i = 0; i < 9; i++) CHECK_EQ_BITS(f32_bits(c[i]), f32_bits(8.0f), "%s 1*2*4 c[%d]", amp_isa_name(isa), i);
        /* k == 0: C = beta C, A and B not read */
        const amp_gemm_fp8_operand na = {.dtype = AMP_F8E4M3, .ld = 0}, nb = {.dtype = AMP_F8E5M2, .ld = 3};
        CHECK_EQ_INT(amp_gemm_fp8(3, 3, 0, 1.0f, &na, &nb, 2.0f, c, 3), AMP_OK);
        CHECK_EQ_BITS(f32_bits(c[4]), f32_bits(16.0f), "%s k == 0 beta 2", amp_isa_name(isa));
        CHECK_EQ_INT(amp_gemm_fp8(3, 3, 0, 1.0f, &na, &nb, 0.0f, c, 3), AMP_OK);
        CHECK_EQ_BITS(f32_bits(c[4]), 0, "%s k == 0 beta 0", amp_isa_name(isa));
        /* m == 0, n == 0: nothing read or written */
        const amp_gemm_fp8_operand ea = {.dtype = AMP_F8E4M3, .ld = 4}, eb = {.dtype = AMP_F8E4M3, .ld = 0};
        CHECK_EQ_INT(amp_gemm_fp8(0, 3, 4, 1.0f, &ea, &ob, 1.0f, NULL, 3), AMP_OK);
        CHECK_EQ_INT(amp_gemm_fp8(3, 0, 4, 1.0f, &oa, &eb, 1.0f, NULL, 0), AMP_OK);
        /* a per-tensor factor of 0 makes alpha_eff 0: C = beta C without reading A (a NaN here) */
        const float zero = 0.0f;
        uint8_t nan_a[12];
        memset(nan_a, 0x7F, sizeof nan_a);
        const amp_gemm_fp8_operand za = {.dtype = AMP_F8E4M3, .data = nan_a, .ld = 4, .scale_inv = &zero};
        for (int i = 0; i < 9; i++) c[i] = 1.5f;
        CHECK_EQ_INT(amp_gemm_fp8(3, 3, 4, 1.0f, &za, &ob, 2.0f, c, 3), AMP_OK);
        CHECK_EQ_BITS(f32_bits(c[8]), f32_bits(3.0f), "%s zero factor", amp_isa_name(isa));
        /* per-tensor factors fold into alpha: (alpha sa) sb */
        const float sa = 3.0f, sb = 0.25f;
        amp_gemm_fp8_operand fa = oa, fb = ob;
        fa.scale_inv = &sa, fb.scale_inv = &sb;
        CHECK_EQ_INT(amp_gemm_fp8(3, 3, 4, 2.0f, &fa, &fb, 0.0f, c, 3), AMP_OK);
        CHECK_EQ_BITS(f32_bits(c[0]), f32_bits(12.0f), "%s 2 * 3 * 0.25 * 8", amp_isa_name(isa));
    }
    test_isa_end();
}

/* NaN and infinity in A or B propagate: an e4m3 NaN pattern poisons its row of C, an e5m2 infinity
 * gives inf (or NaN against a 0), on every path and method. */
void test_gemm_fp8_nonfinite(void) {
    const amp_gemm_bf16_method saved = amp_gemm_bf16_method_active();
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!test_isa_begin(isa)) continue;
        amp_gemm_bf16_method methods[2];
        const int n_methods = methods_for_path(methods);
        for (int mt = 0; mt < n_methods; mt++) {
            if (n_methods > 1) CHECK_EQ_INT(amp_gemm_bf16_method_set(methods[mt]), AMP_OK);
            enum { M = 5, N = 40, K = 37 };
            uint8_t a[M * K], b[K * N];
            for (int i = 0; i < M * K; i++) a[i] = 0x3C; /* e5m2 1.0 */
            for (int i = 0; i < K * N; i++) b[i] = 0x40; /* e4m3 2.0 */
            a[1 * K + 30] = 0x7F;                        /* e5m2 NaN in row 1 */
            a[3 * K + 2] = 0x7C;                         /* e5m2 +inf in row 3 */
            b[2 * N + 7] = 0x00;                         /* op(B)[2, 7] = 0: inf * 0 */
            const amp_gemm_fp8_operand oa = {.dtype = AMP_F8E5M2, .data = a, .ld = K};
            const amp_gemm_fp8_operand ob = {.dtype = AMP_F8E4M3, .data = b, .ld = N};
            float c[M * N];
            CHECK_EQ_INT(amp_gemm_fp8(M, N, K, 1.0f, &oa, &ob, 0.0f, c, N), AMP_OK);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    const float got = c[i * N + j];
                    if (i == 1 || (i == 3 && j == 7))
                        CHECK_MSG(isnan(got), "%s (%d,%d): want NaN, got %g", amp_isa_name(isa), i, j, (double)got);
                    else if (i == 3)
                        CHECK_MSG(isinf(got) && got > 0, "%s (%d,%d): want +inf, got %g", amp_isa_name(isa), i, j,
                                  (double)got);
                    else
                        CHECK_EQ_BITS(f32_bits(got), f32_bits(j == 7 ? 2.0f * (K - 1) : 2.0f * K), "%s (%d,%d)",
                                      amp_isa_name(isa), i, j);
                }
        }
        if (n_methods > 1) amp_gemm_bf16_method_set(saved);
    }
    test_isa_end();
}

void test_gemm_fp8_arguments(void) {
    uint8_t a[64] = {0}, b[64] = {0};
    float c[64], s[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    const amp_gemm_fp8_operand oa = {.dtype = AMP_F8E4M3, .data = a, .ld = 4};
    const amp_gemm_fp8_operand ob = {.dtype = AMP_F8E4M3, .data = b, .ld = 4};
    CHECK_EQ_INT(amp_gemm_fp8(4, 4, 4, 1.0f, NULL, &ob, 0.0f, c, 4), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_gemm_fp8(4, 4, 4, 1.0f, &oa, NULL, 0.0f, c, 4), AMP_ERR_NULL_POINTER);
    amp_gemm_fp8_operand x = oa;
    x.dtype = AMP_F16;
    CHECK_EQ_INT(amp_gemm_fp8(4, 4, 4, 1.0f, &x, &ob, 0.0f, c, 4), AMP_ERR_UNSUPPORTED_DTYPE);
    x.dtype = AMP_DTYPE_COUNT;
    CHECK_EQ_INT(amp_gemm_fp8(4, 4, 4, 1.0f, &oa, &x, 0.0f, c, 4), AMP_ERR_UNSUPPORTED_DTYPE);
    x.dtype = AMP_F16, x.data = NULL; /* the dtype is checked before the pointers */
    CHECK_EQ_INT(amp_gemm_fp8(4, 4, 4, 1.0f, &x, &ob, 0.0f, c, 4), AMP_ERR_UNSUPPORTED_DTYPE);
    CHECK_EQ_INT(amp_gemm_fp8(-1, 4, 4, 1.0f, &oa, &ob, 0.0f, c, 4), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_gemm_fp8(4, 4, -2, 1.0f, &oa, &ob, 0.0f, c, 4), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_gemm_fp8(4, 4, 5, 1.0f, &oa, &ob, 0.0f, c, 4), AMP_ERR_INVALID_ARGUMENT); /* lda < k */
    CHECK_EQ_INT(amp_gemm_fp8(4, 5, 4, 1.0f, &oa, &ob, 0.0f, c, 5), AMP_ERR_INVALID_ARGUMENT); /* ldb < n */
    CHECK_EQ_INT(amp_gemm_fp8(4, 4, 4, 1.0f, &oa, &ob, 0.0f, c, 3), AMP_ERR_INVALID_ARGUMENT); /* ldc < n */
    x = oa, x.trans = true, x.ld = 3; /* A^T stored k x m: ld >= m */
    CHECK_EQ_INT(amp_gemm_fp8(4, 4, 4, 1.0f, &x, &ob, 0.0f, c, 4), AMP_ERR_INVALID_ARGUMENT);
    x.ld = 4;
    CHECK_EQ_INT(amp_gemm_fp8(4, 4, 4, 1.0f, &x, &ob, 0.0f, c, 4), AMP_OK);
    x = oa, x.ld = INT64_MAX / 2;
    CHECK_EQ_INT(amp_gemm_fp8(4, 4, 4, 1.0f, &x, &ob, 0.0f, c, 4), AMP_ERR_INVALID_ARGUMENT); /* unaddressable */
    /* blocks: both sides or neither, nonnegative, ld_scale covering a row of blocks */
    x = oa, x.scale_inv = s, x.block_rows = 1, x.block_cols = 0;
    CHECK_EQ_INT(amp_gemm_fp8(4, 4, 4, 1.0f, &x, &ob, 0.0f, c, 4), AMP_ERR_INVALID_ARGUMENT);
    x.block_rows = -1, x.block_cols = 2, x.ld_scale = 2;
    CHECK_EQ_INT(amp_gemm_fp8(4, 4, 4, 1.0f, &x, &ob, 0.0f, c, 4), AMP_ERR_INVALID_ARGUMENT);
    x.block_rows = 2, x.block_cols = 3, x.ld_scale = 1; /* 4 columns in blocks of 3: 2 per row */
    CHECK_EQ_INT(amp_gemm_fp8(4, 4, 4, 1.0f, &x, &ob, 0.0f, c, 4), AMP_ERR_INVALID_ARGUMENT);
    x.ld_scale = 2;
    CHECK_EQ_INT(amp_gemm_fp8(4, 4, 4, 1.0f, &x, &ob, 0.0f, c, 4), AMP_OK);
    /* NULL data with elements, NULL C */
    x = oa, x.data = NULL;
    CHECK_EQ_INT(amp_gemm_fp8(4, 4, 4, 1.0f, &x, &ob, 0.0f, c, 4), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_gemm_fp8(4, 4, 4, 1.0f, &ob, &x, 0.0f, c, 4), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_gemm_fp8(4, 4, 4, 1.0f, &oa, &ob, 0.0f, NULL, 4), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_gemm_fp8_ref(4, 4, 4, 1.0f, &oa, &ob, 0.0f, NULL, 4), AMP_ERR_NULL_POINTER);
}
