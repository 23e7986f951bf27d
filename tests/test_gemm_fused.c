/* amp_gemm_fused (src/gemm/gemm_fused.h): the epilogue must give exactly the bits of amp_gemm
 * followed by a separate bias pass, relu and amp_convert, on every path, for the normal and the
 * transposed (narrow C) orientation, several k blocks, the alpha == 0 shortcut, and any thread count;
 * its relu before the rounding exactly the bits of a relu after it (amp_linear_relu's claim); its
 * gelu those of the path's gelu composition on the fp32 values, with the derivative that times 1 is
 * the gradient composition's (any NaN matching any NaN there), grad_mul an fp32 multiply first, and
 * the residual an fp32 add after the bias, of the value rounded to res_round and decoded. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"
#include "tests.h"
#include "../src/gemm/gemm_fused.h"
#include "../src/kernels/vecmath.h"

typedef struct fused_case {
    int64_t m, n, k;
    bool trans_a, trans_b;
    float alpha, beta;
} fused_case;

/* A random value of moderate size, exact in every input dtype (8 significant bits). */
static float small_value(test_rng *rng) { return (float)((int)test_rng_below(rng, 255) - 127) / 64.0f; }

static void fill(amp_dtype dt, void *buf, size_t n, test_rng *rng) {
    for (size_t i = 0; i < n; i++) {
        const float v = small_value(rng);
        amp_convert((char *)buf + i * amp_dtype_size(dt), dt, &v, AMP_F32, 1);
    }
}

/* rows x cols values of dtype dt, row stride ld (the padding included where cols = ld), the same bits,
 * or (any_nan) both NaN */
static bool same_values(const void *a, const void *b, amp_dtype dt, int64_t rows, int64_t cols, int64_t ld,
                        bool any_nan) {
    const size_t es = amp_dtype_size(dt);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            const size_t off = (size_t)(i * ld + j) * es;
            if (memcmp((const char *)a + off, (const char *)b + off, es) == 0) continue;
            float x, y;
            amp_convert(&x, AMP_F32, (const char *)a + off, dt, 1);
            amp_convert(&y, AMP_F32, (const char *)b + off, dt, 1);
            if (!(any_nan && isnan(x) && isnan(y))) return false;
        }
    return true;
}

void test_gemm_fused_epilogue(void) {
    const fused_case cases[] = {
        {300, 157, 530, false, true, 1.0f, 0.0f},  /* linear's forward: X W^T */
        {520, 9, 700, false, true, 1.0f, 0.0f},    /* narrow C: computed as C^T */
        {37, 200, 2100, true, false, 0.75f, 0.5f}, /* several k blocks on every path */
        {64, 33, 0, false, false, 1.0f, 0.5f},     /* k == 0: C = beta C, then the epilogue */
    };
    const amp_dtype in_dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    const amp_dtype out_dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    test_rng rng = {harness_seed() ^ 0xE9u};
    { /* epilogues that say two things at once, or whose matrices are too narrow: refused, C untouched */
        float a2[4] = {1, 2, 3, 4}, b2[4] = {1, 0, 0, 1}, c2[4] = {9, 9, 9, 9}, d2[4];
        _Atomic uint32_t am = 0;
        const amp_gemm_epilogue bad[] = {
            {.out = d2, .out_dtype = AMP_F32, .ldo = 2, .absmax = &am}, /* absmax of an out (C is not the result) */
            {.relu = true, .gelu = true},                   /* two activations */
            {.gelu_deriv = d2, .ldderiv = 2},               /* a derivative without gelu */
            {.gelu = true, .gelu_deriv = d2, .ldderiv = 1}, /* a row stride below n */
            {.grad_mul = d2, .ldmul = 1},                   /* likewise */
            {.residual = d2, .ldres = 1},                   /* likewise */
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            CHECK_EQ_INT(amp_gemm_fused(AMP_F32, false, false, 2, 2, 2, 1.0f, a2, 2, b2, 2, 0.0f, c2, 2, &bad[i]),
                         AMP_ERR_INVALID_ARGUMENT);
            CHECK(c2[0] == 9.0f && c2[3] == 9.0f);
        }
        const amp_gemm_epilogue fp8_round = {.residual = d2, .ldres = 2, .res_round = AMP_F8E4M3};
        CHECK_EQ_INT(amp_gemm_fused(AMP_F32, false, false, 2, 2, 2, 1.0f, a2, 2, b2, 2, 0.0f, c2, 2, &fp8_round),
                     AMP_ERR_UNSUPPORTED_DTYPE);
        CHECK(c2[0] == 9.0f && c2[3] == 9.0f);
    }
    for (size_t q = 0; q < sizeof cases / sizeof cases[0]; q++) {
        const fused_case *fc = &cases[q];
        const int64_t m = fc->m, n = fc->n, k = fc->k;
        const int64_t lda = fc->trans_a ? m : k, ldb = fc->trans_b ? k : n, ldc = n + 3, ldo = n + 1;
        void *a = malloc((size_t)(m * k + 1) * 4), *b = malloc((size_t)(k * n + 1) * 4);
        float *bias = malloc((size_t)n * sizeof *bias), *c0 = malloc((size_t)(m * ldc) * sizeof *c0);
        float *want = malloc((size_t)(m * ldc) * sizeof *want), *got = malloc((size_t)(m * ldc) * sizeof *got);
        void *out_want = malloc((size_t)(m * ldo) * 4), *out_got = malloc((size_t)(m * ldo) * 4);
        void *mask = malloc((size_t)(m * ldo) * 4);
        float *mul = malloc((size_t)(m * ldo) * sizeof *mul), *ones = malloc((size_t)n * sizeof *ones);
        float *d_want = malloc((size_t)(m * ldo) * sizeof *d_want), *d_got = malloc((size_t)(m * ldo) * sizeof *d_got);
        if (!CHECK(a && b && bias && c0 && want && got && out_want && out_got && mask && mul && ones && d_want && d_got))
            return;
        for (int64_t i = 0; i < m * ldo; i++) mul[i] = small_value(&rng);
        for (int64_t j = 0; j < n; j++) ones[j] = 1.0f;
        for (int64_t j = 0; j < n; j++) bias[j] = small_value(&rng);
        for (int64_t i = 0; i < m * ldc; i++) c0[i] = small_value(&rng);
        for (size_t d = 0; d < sizeof in_dts / sizeof in_dts[0]; d++) {
            const amp_dtype dt = in_dts[d];
            fill(dt, a, (size_t)(m * k), &rng);
            fill(dt, b, (size_t)(k * n), &rng);
            if (m * k > 0) { /* a NaN in A: a row of NaN in C, which relu must keep */
                const float nan = NAN;
                amp_convert((char *)a + (size_t)(fc->trans_a ? 0 : 3 * k) * amp_dtype_size(dt), dt, &nan, AMP_F32, 1);
            }
            for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
                if (!test_isa_begin(isa)) continue;
                /* mode 0: bias; 1: bias and relu; 2: relu alone; 3: relu_mask (of dtype odt); 4: bias and
                 * gelu with its derivative; 5: gelu alone, no derivative; 6: grad_mul then bias; 7: bias
                 * then the residual (mul's values), C rounded to odt before it is added */
                const amp_vmath_kernels *vk = amp_vmath_active();
                for (int mode = 0; mode < 8; mode++)
                    for (size_t o = 0; o < sizeof out_dts / sizeof out_dts[0]; o++) {
                        const amp_dtype odt = out_dts[o];
                        const size_t os = amp_dtype_size(odt);
                        if (mode == 3) { /* a relu output: positives, +0 and -0 (both dropped), NaN (kept) */
                            for (int64_t e = 0; e < m * ldo; e++) {
                                const uint32_t r = test_rng_below(&rng, 8);
                                const float mv = r < 4 ? small_value(&rng) : r < 6 ? 0.0f : r == 6 ? -0.0f : NAN;
                                amp_convert((char *)mask + (size_t)e * os, odt, &mv, AMP_F32, 1);
                            }
                        }
                        memcpy(want, c0, (size_t)(m * ldc) * sizeof *want);
                        memset(d_want, 0xA5, (size_t)(m * ldo) * sizeof *d_want);
                        memset(out_want, 0xA5, (size_t)(m * ldo) * 4);
                        CHECK_EQ_INT(amp_gemm(dt, fc->trans_a, fc->trans_b, m, n, k, fc->alpha, a, lda, b, ldb,
                                              fc->beta, want, ldc),
                                     AMP_OK);
                        for (int64_t i = 0; i < m; i++) {
                            float *row = want + i * ldc;
                            char *orow = (char *)out_want + (size_t)(i * ldo) * os;
                            if (mode == 3) { /* relu's backward after the rounding, on decoded values */
                                amp_convert(orow, odt, row, AMP_F32, (size_t)n);
                                for (int64_t j = 0; j < n; j++) {
                                    float v, mv;
                                    amp_convert(&v, AMP_F32, orow + (size_t)j * os, odt, 1);
                                    amp_convert(&mv, AMP_F32, (const char *)mask + (size_t)(i * ldo + j) * os, odt, 1);
                                    v = mv <= 0.0f ? 0.0f : v; /* NaN mask: kept */
                                    amp_convert(orow + (size_t)j * os, odt, &v, AMP_F32, 1);
                                    row[j] = mv <= 0.0f ? 0.0f : row[j];
                                }
                                continue;
                            }
                            if (mode == 6)
                                for (int64_t j = 0; j < n; j++) row[j] *= mul[i * ldo + j];
                            if (mode < 2 || mode == 4 || mode >= 6)
                                for (int64_t j = 0; j < n; j++) row[j] += bias[j];
                            if (mode == 7) /* amp_add of the fp32 residual and the linear's value in odt */
                                for (int64_t j = 0; j < n; j++) {
                                    float v;
                                    amp_convert(orow + (size_t)j * os, odt, &row[j], AMP_F32, 1);
                                    amp_convert(&v, AMP_F32, orow + (size_t)j * os, odt, 1);
                                    row[j] = mul[i * ldo + j] + v;
                                }
                            if (mode == 4 || mode == 5) { /* on the fp32 values, then rounded once */
                                amp_vmath_gelu_grad_composed(vk, d_want + i * ldo, ones, row, (size_t)n);
                                amp_vmath_gelu_composed(vk, row, row, (size_t)n);
                            }
                            /* out: the separate ops' order, rounded first and relu on the decoded value */
                            amp_convert(orow, odt, row, AMP_F32, (size_t)n);
                            if (mode == 0 || mode >= 4) continue;
                            for (int64_t j = 0; j < n; j++) {
                                float v;
                                amp_convert(&v, AMP_F32, orow + (size_t)j * os, odt, 1);
                                v = v > 0.0f || isnan(v) ? v : 0.0f;
                                amp_convert(orow + (size_t)j * os, odt, &v, AMP_F32, 1);
                                row[j] = row[j] > 0.0f || isnan(row[j]) ? row[j] : 0.0f;
                            }
                        }
                        for (int threads = 1; threads <= 3; threads++) {
                            amp_set_num_threads(threads);
                            memcpy(got, c0, (size_t)(m * ldc) * sizeof *got);
                            memset(out_got, 0xA5, (size_t)(m * ldo) * 4);
                            memset(d_got, 0xA5, (size_t)(m * ldo) * sizeof *d_got);
                            const amp_gemm_epilogue ep = {.bias = mode < 2 || mode == 4 || mode >= 6 ? bias : NULL,
                                                          .relu = mode == 1 || mode == 2,
                                                          .relu_mask = mode == 3 ? mask : NULL,
                                                          .relu_mask_dtype = odt,
                                                          .ldmask = ldo,
                                                          .gelu = mode == 4 || mode == 5,
                                                          .gelu_deriv = mode == 4 ? d_got : NULL,
                                                          .ldderiv = ldo,
                                                          .grad_mul = mode == 6 ? mul : NULL,
                                                          .ldmul = ldo,
                                                          .residual = mode == 7 ? mul : NULL,
                                                          .ldres = ldo,
                                                          .res_round = odt,
                                                          .out = out_got,
                                                          .out_dtype = odt,
                                                          .ldo = ldo};
                            CHECK_EQ_INT(amp_gemm_fused(dt, fc->trans_a, fc->trans_b, m, n, k, fc->alpha, a, lda, b,
                                                        ldb, fc->beta, got, ldc, &ep),
                                         AMP_OK);
                            /* gelu: tests/test_gelu_kernels.c; the residual's add: either NaN operand */
                            const bool any_nan = mode == 4 || mode == 5 || mode == 7;
                            CHECK_MSG(same_values(got, want, AMP_F32, m, ldc, ldc, any_nan) &&
                                          same_values(out_got, out_want, odt, m, ldo, ldo, any_nan) &&
                                          (mode != 4 || same_values(d_got, d_want, AMP_F32, m, ldo, ldo, true)),
                                      "%s %s->%s %lldx%lldx%lld, mode %d, %d threads: fused epilogue differs from "
                                      "the passes",
                                      amp_isa_name(isa), amp_dtype_name(dt), amp_dtype_name(odt), (long long)m,
                                      (long long)n, (long long)k, mode, threads);
                        }
                        amp_set_num_threads(0);
                    }
            }
            test_isa_end();
        }
        free(a), free(b), free(bias), free(c0), free(want), free(got), free(out_want), free(out_got), free(mask);
        free(mul), free(ones), free(d_want), free(d_got);
    }
}

/* What the epilogue's absmax must come to over an m x n fp32 matrix: the largest |x| while all are
 * finite, the infinity's bits with one, something above them with a NaN (kernels/elem_kernels.h). */
static uint32_t absmax_bits_of(const float *x, int64_t m, int64_t n, int64_t ld) {
    float big = 0.0f;
    bool inf = false, nan = false;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            const float v = x[i * ld + j];
            nan |= isnan(v), inf |= isinf(v);
            if (fabsf(v) > big) big = fabsf(v);
        }
    uint32_t b;
    memcpy(&b, &big, sizeof b);
    if (nan) { /* the largest NaN pattern present (any is above inf's) */
        b = 0x7f800000u;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                uint32_t u;
                memcpy(&u, &x[i * ld + j], sizeof u);
                u &= 0x7fffffffu;
                if (isnan(x[i * ld + j]) && u > b) b = u;
            }
    }
    return inf && !nan ? 0x7f800000u : b;
}

/* The epilogue's accumulation into an fp32 gradient (acc): C rounded to out_dtype, decoded, added
 * into acc (or stored as 0 + value, acc unread), with and without the out rows written, against
 * amp_gemm, amp_convert both ways and a scalar add. acc starts with signed zeros and infinities (an
 * add keeps the bits of `acc += v`); in store mode it starts as garbage that must not matter. The
 * epilogue's absmax of the acc rows, and of C alone, against a scalar loop over the expected values. */
void test_gemm_fused_acc(void) {
    const fused_case cases[] = {
        {300, 157, 530, true, false, -1.0f, 0.0f}, /* a weight gradient, G^T X; -0 in C (alpha < 0) */
        {520, 9, 700, true, false, -1.0f, 0.0f},   /* narrow C: computed as C^T; -0 in C */
        {37, 200, 2100, true, false, 0.75f, 0.5f}, /* several k blocks on every path */
        {64, 33, 0, false, false, 1.0f, 0.5f},     /* k == 0: C = beta C, then the epilogue */
    };
    const amp_dtype in_dts[] = {AMP_F32, AMP_BF16};
    const amp_dtype out_dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    test_rng rng = {harness_seed() ^ 0xACCu};
    for (size_t q = 0; q < sizeof cases / sizeof cases[0]; q++) {
        const fused_case *fc = &cases[q];
        const int64_t m = fc->m, n = fc->n, k = fc->k;
        const int64_t lda = fc->trans_a ? m : k, ldb = fc->trans_b ? k : n, ldc = n + 3, ldo = n + 1, lda_acc = n + 5;
        void *a = malloc((size_t)(m * k + 1) * 4), *b = malloc((size_t)(k * n + 1) * 4);
        float *c0 = malloc((size_t)(m * ldc) * sizeof *c0), *want = malloc((size_t)(m * ldc) * sizeof *want);
        float *got = malloc((size_t)(m * ldc) * sizeof *got), *acc0 = malloc((size_t)(m * lda_acc) * sizeof *acc0);
        float *acc_want = malloc((size_t)(m * lda_acc) * sizeof *acc_want);
        float *acc_got = malloc((size_t)(m * lda_acc) * sizeof *acc_got), *dec = malloc((size_t)n * sizeof *dec);
        void *out_want = malloc((size_t)(m * ldo) * 4), *out_got = malloc((size_t)(m * ldo) * 4);
        if (!CHECK(a && b && c0 && want && got && acc0 && acc_want && acc_got && dec && out_want && out_got)) return;
        for (int64_t i = 0; i < m * ldc; i++) c0[i] = small_value(&rng);
        for (int64_t i = 0; i < m * lda_acc; i++) {
            acc0[i] = small_value(&rng);
            if (i % 7 == 3) acc0[i] = -0.0f;
            if (i % 53 == 11) acc0[i] = i % 2 ? INFINITY : -INFINITY;
        }
        for (size_t d = 0; d < sizeof in_dts / sizeof in_dts[0]; d++) {
            const amp_dtype dt = in_dts[d];
            fill(dt, a, (size_t)(m * k), &rng);
            fill(dt, b, (size_t)(k * n), &rng);
            /* row 0 of op(A) zero, so C's row 0 holds zeros (-0 where alpha < 0 and beta == 0) */
            for (int64_t p = 0; p < k; p++)
                memset((char *)a + (size_t)(fc->trans_a ? p * lda : p) * amp_dtype_size(dt), 0, amp_dtype_size(dt));
            for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
                if (!test_isa_begin(isa)) continue;
                memcpy(want, c0, (size_t)(m * ldc) * sizeof *want);
                CHECK_EQ_INT(amp_gemm(dt, fc->trans_a, fc->trans_b, m, n, k, fc->alpha, a, lda, b, ldb, fc->beta, want,
                                      ldc),
                             AMP_OK);
                for (size_t o = 0; o < sizeof out_dts / sizeof out_dts[0]; o++) {
                    const amp_dtype odt = out_dts[o];
                    const size_t os = amp_dtype_size(odt);
                    for (int mode = 0; mode < 4; mode++) {
                        const bool store = mode & 1, with_out = mode & 2;
                        for (int64_t i = 0; i < m; i++) {
                            char *orow = (char *)out_want + (size_t)(i * ldo) * os;
                            amp_convert(orow, odt, want + i * ldc, AMP_F32, (size_t)n);
                            amp_convert(dec, AMP_F32, orow, odt, (size_t)n);
                            for (int64_t j = 0; j < n; j++) {
                                float v = store ? 0.0f : acc0[i * lda_acc + j];
                                v += dec[j];
                                acc_want[i * lda_acc + j] = v;
                            }
                        }
                        for (int threads = 1; threads <= 3; threads++) {
                            amp_set_num_threads(threads);
                            memcpy(got, c0, (size_t)(m * ldc) * sizeof *got);
                            if (store) memset(acc_got, 0xA5, (size_t)(m * lda_acc) * sizeof *acc_got);
                            else memcpy(acc_got, acc0, (size_t)(m * lda_acc) * sizeof *acc_got);
                            memset(out_got, 0xA5, (size_t)(m * ldo) * 4);
                            _Atomic uint32_t absmax = 0;
                            const amp_gemm_epilogue ep = {.out = with_out ? out_got : NULL, .out_dtype = odt,
                                                          .ldo = ldo, .acc = acc_got, .ldacc = lda_acc,
                                                          .acc_store = store, .absmax = &absmax};
                            CHECK_EQ_INT(amp_gemm_fused(dt, fc->trans_a, fc->trans_b, m, n, k, fc->alpha, a, lda, b,
                                                        ldb, fc->beta, got, ldc, &ep),
                                         AMP_OK);
                            bool same = memcmp(got, want, (size_t)(m * ldc) * sizeof *got) == 0 &&
                                        atomic_load(&absmax) == absmax_bits_of(acc_want, m, n, lda_acc);
                            for (int64_t i = 0; same && i < m; i++)
                                same = memcmp(acc_got + i * lda_acc, acc_want + i * lda_acc, (size_t)n * 4) == 0 &&
                                       (!with_out || memcmp((char *)out_got + (size_t)(i * ldo) * os,
                                                            (char *)out_want + (size_t)(i * ldo) * os,
                                                            (size_t)n * os) == 0);
                            CHECK_MSG(same, "%s %s->%s %lldx%lldx%lld, %s%s, %d threads: acc epilogue differs",
                                      amp_isa_name(isa), amp_dtype_name(dt), amp_dtype_name(odt), (long long)m,
                                      (long long)n, (long long)k, store ? "store" : "add",
                                      with_out ? " with out" : "", threads);
                        }
                        amp_set_num_threads(0);
                    }
                }
                /* absmax alone: C's rows (a gradient the GEMM writes directly), on 1-3 threads */
                for (int threads = 1; threads <= 3; threads++) {
                    amp_set_num_threads(threads);
                    memcpy(got, c0, (size_t)(m * ldc) * sizeof *got);
                    _Atomic uint32_t absmax = 0;
                    const amp_gemm_epilogue ep = {.ldo = 1, .ldacc = 1, .absmax = &absmax};
                    CHECK_EQ_INT(amp_gemm_fused(dt, fc->trans_a, fc->trans_b, m, n, k, fc->alpha, a, lda, b, ldb,
                                                fc->beta, got, ldc, &ep),
                                 AMP_OK);
                    CHECK_MSG(memcmp(got, want, (size_t)(m * ldc) * sizeof *got) == 0 &&
                                  atomic_load(&absmax) == absmax_bits_of(want, m, n, ldc),
                              "%s %s %lldx%lldx%lld, %d threads: absmax of C %08x, want %08x", amp_isa_name(isa),
                              amp_dtype_name(dt), (long long)m, (long long)n, (long long)k, threads,
                              (unsigned)atomic_load(&absmax), (unsigned)absmax_bits_of(want, m, n, ldc));
                }
                amp_set_num_threads(0);
            }
            test_isa_end();
        }
        free(a), free(b), free(c0), free(want), free(got), free(acc0), free(acc_want), free(acc_got), free(dec);
        free(out_want), free(out_got);
    }
}

/* A value whose sums depend on their order: +-(1 + u) 2^e, e in [-12, 12], rounded to dt. */
static float spread_value(test_rng *rng, amp_dtype dt) {
    const float u = (float)test_rng_below(rng, 1u << 20) / (float)(1u << 20);
    const float v = ldexpf(1.0f + u, (int)test_rng_below(rng, 25) - 12) * (test_rng_below(rng, 2) ? 1.0f : -1.0f);
    float r;
    unsigned char enc[4];
    amp_convert(enc, dt, &v, AMP_F32, 1);
    amp_convert(&r, AMP_F32, enc, dt, 1);
    return r;
}

/* The epilogue's a_sums (a linear's bias gradient from its weight gradient's packed G^T panels):
 * a_sums[i] += op(A)[i, p] for p = 0 .. k-1 in that order, one fp32 add each, against that scalar
 * loop bit for bit, on every path, each bf16 method, 1 to 3 threads; where the sums come from the
 * panels (several k blocks, partial panels, n split between threads) and where they take the plain
 * pass (C computed transposed, A not transposed on a packed-pairs path, alpha == 0, n == 0). The
 * product must be amp_gemm's. The values span 2^-12 .. 2^13, so a different order changes the sums
 * (checked: the reversed order differs somewhere). */
void test_gemm_fused_a_sums(void) {
    const fused_case cases[] = {
        {301, 157, 1100, true, false, 1.0f, 0.0f}, /* G^T X: two m blocks, a partial panel, several k blocks */
        {37, 200, 2100, true, false, -0.5f, 0.5f}, /* beta: C read */
        {520, 9, 700, true, false, 1.0f, 0.0f},    /* narrow C: computed as C^T, the plain pass */
        {130, 64, 513, false, true, 1.0f, 0.0f},   /* A stored by rows */
        {40, 30, 200, true, false, 0.0f, 0.5f},    /* alpha == 0: A not multiplied, still summed */
        {25, 0, 90, true, false, 1.0f, 0.0f},      /* n == 0: no product, still summed */
    };
    const amp_dtype in_dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    const uint64_t seed = harness_seed() ^ 0x5A5Au;
    harness_note("seed %llu", (unsigned long long)seed);
    test_rng rng = {seed};
    bool order_matters = false;
    const int saved_threads = amp_get_num_threads();
    for (size_t q = 0; q < sizeof cases / sizeof cases[0]; q++) {
        const fused_case *fc = &cases[q];
        const int64_t m = fc->m, n = fc->n, k = fc->k;
        const int64_t lda = fc->trans_a ? m : k, ldb = fc->trans_b ? k : n, ldc = n + 3;
        void *a = malloc((size_t)(m * k + 1) * 4), *b = malloc((size_t)(k * n + 1) * 4);
        float *af = malloc((size_t)(m * k + 1) * sizeof *af), *c0 = malloc((size_t)(m * ldc + 1) * sizeof *c0);
        float *want = malloc((size_t)(m * ldc + 1) * sizeof *want), *got = malloc((size_t)(m * ldc + 1) * sizeof *got);
        float *s0 = malloc((size_t)m * sizeof *s0), *s_want = malloc((size_t)m * sizeof *s_want);
        float *s_got = malloc((size_t)m * sizeof *s_got);
        if (!CHECK(a && b && af && c0 && want && got && s0 && s_want && s_got)) return;
        for (int64_t i = 0; i < m * ldc; i++) c0[i] = small_value(&rng);
        for (int64_t i = 0; i < m; i++) s0[i] = i % 5 == 2 ? -0.0f : spread_value(&rng, AMP_F32);
        for (size_t d = 0; d < sizeof in_dts / sizeof in_dts[0]; d++) {
            const amp_dtype dt = in_dts[d];
            const size_t es = amp_dtype_size(dt);
            for (int64_t i = 0; i < m * k; i++) {
                af[i] = spread_value(&rng, dt);
                amp_convert((char *)a + (size_t)i * es, dt, &af[i], AMP_F32, 1);
            }
            fill(dt, b, (size_t)(k * n), &rng);
            /* the scalar loop: op(A)[i, p] is af[p * lda + i] (A^T stored) or af[i * lda + p] */
            for (int64_t i = 0; i < m; i++) {
                float s = s0[i], r = s0[i];
                for (int64_t p = 0; p < k; p++) s += fc->trans_a ? af[p * lda + i] : af[i * lda + p];
                for (int64_t p = k - 1; p >= 0; p--) r += fc->trans_a ? af[p * lda + i] : af[i * lda + p];
                s_want[i] = s;
                if (memcmp(&s, &r, sizeof s) != 0) order_matters = true;
            }
            for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
                if (!test_isa_begin(isa)) continue;
                const amp_gemm_bf16_method active = amp_gemm_bf16_method_active();
                for (int mt = 0; mt < AMP_GEMM_BF16_METHOD_COUNT; mt++) {
                    if (dt != AMP_BF16 && mt > 0) break;
                    if (dt == AMP_BF16 && amp_gemm_bf16_method_set((amp_gemm_bf16_method)mt) != AMP_OK) continue;
                    memcpy(want, c0, (size_t)(m * ldc) * sizeof *want);
                    CHECK_EQ_INT(amp_gemm(dt, fc->trans_a, fc->trans_b, m, n, k, fc->alpha, a, lda, b, ldb, fc->beta,
                                          want, ldc),
                                 AMP_OK);
                    const int threads[] = {1, 2, 3};
                    for (int t = 0; t < 3; t++) {
                        amp_set_num_threads(threads[t]);
                        memcpy(got, c0, (size_t)(m * ldc) * sizeof *got);
                        memcpy(s_got, s0, (size_t)m * sizeof *s_got);
                        const amp_gemm_epilogue ep = {.ldo = 1, .ldacc = 1, .a_sums = s_got};
                        CHECK_EQ_INT(amp_gemm_fused(dt, fc->trans_a, fc->trans_b, m, n, k, fc->alpha, a, lda, b, ldb,
                                                    fc->beta, got, ldc, &ep),
                                     AMP_OK);
                        int bad_c = 0, bad_s = 0;
                        for (int64_t i = 0; i < m; i++) {
                            if (memcmp(got + i * ldc, want + i * ldc, (size_t)n * sizeof *got) != 0) bad_c++;
                            if (memcmp(&s_got[i], &s_want[i], sizeof *s_got) != 0) bad_s++;
                        }
                        CHECK_MSG(bad_c == 0 && bad_s == 0,
                                  "%s %s%s %lldx%lldx%lld ta=%d threads %d: %d rows of C and %d sums differ "
                                  "(fused here: %d)",
                                  amp_isa_name(isa), amp_dtype_name(dt),
                                  dt == AMP_BF16 ? amp_gemm_bf16_method_name((amp_gemm_bf16_method)mt) : "",
                                  (long long)m, (long long)n, (long long)k, (int)fc->trans_a, threads[t], bad_c, bad_s,
                                  (int)amp_gemm_sums_a_fused(dt, m, n, k));
                    }
                    amp_set_num_threads(saved_threads);
                }
                if (dt == AMP_BF16) amp_gemm_bf16_method_set(active);
            }
            test_isa_end();
        }
        free(a), free(b), free(af), free(c0), free(want), free(got), free(s0), free(s_want), free(s_got);
    }
    CHECK_MSG(order_matters, "the test's values sum to the same bits in either order: it could not see a wrong order");
}
