/* amp_gemm on every SIMD path against two oracles, its edge cases and statuses, its determinism,
 * and the thread pool under it.
 *
 * Oracles. (1) amp_gemm_ref, the naive fp32 triple loop (the reference twin). (2) A naive GEMM in
 * double: every input is exact in fp32 once decoded (f16 and bf16 decode exactly), each product of
 * two fp32 values is exact in double (24 + 24 <= 53 significant bits) and the double sum's own error
 * (about k 2^-53 sum|ab|) is negligible next to the bound below, so it stands for the exact result.
 *
 * Tolerance, from the arithmetic. The only rounding amp does is fp32's (unit roundoff u = 2^-24):
 * along the path from one product a_p b_p to c, at most k - 1 roundings in the sum of its k block
 * (one more when the product itself is rounded, i.e. without FMA), at most one per later k block
 * added into c (fewer than k blocks), and at most two for alpha * sum + beta * c. That is at most
 * 2(k + 2) roundings, so by the usual recursive-summation bound (Higham, Accuracy and Stability of
 * Numerical Algorithms, 2nd ed., section 3.1: |error| <= gamma_n sum|terms|, gamma_n = nu/(1-nu)):
 *     |c - c_exact| <= 2 (k + 4) u (|alpha| sum_p |a_ip b_pj| + |beta c_ij|)
 * with (k + 4) instead of (k + 2) absorbing gamma's 1/(1 - nu) and the double oracle's error.
 * Against the fp32 twin, whose error obeys the same bound, the difference is at most twice that.
 * The bf16 VDPBF16PS (dot) method flushes subnormals, and where the CPU has it each bf16 test runs
 * both methods (amp/gemm.h's amp_gemm_bf16_method); the test data keeps every product and partial
 * sum out of the subnormal range (inputs are 0 or of magnitude >= 2^-8, so products are multiples
 * of 2^-34 for bf16 and 2^-46 for fp16: a nonzero partial sum is never below 2^-46).
 *
 * Determinism. Every element is computed by one thread in a k order fixed by the path and the shape,
 * and tiles do the same arithmetic whatever their position (src/gemm/gemm.c), so amp guarantees the
 * same bits for any thread count, and this file tests exactly that: 1, 2 and 3 threads, and repeated
 * calls, give identical bits. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "test_util.h"
#include "tests.h"
#include "../src/core/parallel.h"
#include "../src/kernels/gemm_kernels.h"

static const amp_dtype gemm_dtypes[] = {AMP_F32, AMP_F16, AMP_BF16};
enum { N_GEMM_DTYPES = 3 };

/* One test problem: op(A) is m x k, op(B) is k x n; the leading dimensions exceed the row by pad. */
typedef struct problem {
    int64_t m, n, k;
    bool trans_a, trans_b;
    int64_t pad; /* extra elements per row of A, B and C (C's extras are a guard band) */
    float alpha, beta;
} problem;

/* Inputs and expected values of one problem for one dtype. */
typedef struct fixture {
    problem pr;
    amp_dtype dt;
    int64_t lda, ldb, ldc, a_rows, b_rows;
    void *a, *b;          /* stored in dt */
    float *af, *bf;       /* the same values decoded to fp32 (exact) */
    float *c0;            /* C before the call ([m][ldc]; NaN where beta == 0, guard values past n) */
    double *exact, *bound; /* [m][n]: the double oracle and the tolerance */
    float *twin;          /* amp_gemm_ref's result, [m][ldc] */
} fixture;

static float random_value(test_rng *rng, amp_dtype dt) {
    /* sign * (1 + f) * 2^e with e in [-8, 1]: inside every format's normal range; one in 16 is zero */
    const uint64_t r = test_rng_next(rng);
    if ((r & 15) == 0) return 0.0f;
    const float mant = 1.0f + (float)(r >> 41) / (float)(1u << 23);
    const float v = ldexpf(mant, (int)((r >> 4) % 10) - 8) * ((r >> 8) & 1 ? -1.0f : 1.0f);
    /* rounding to dt and back gives a value dt holds exactly (and keeps it >= 2^-8 in magnitude) */
    switch (dt) {
    case AMP_F16: return amp_fp16_to_fp32(amp_fp16_from_fp32(v));
    case AMP_BF16: return amp_bf16_to_fp32(amp_bf16_from_fp32(v));
    default: return v;
    }
}

static void store_value(amp_dtype dt, void *buf, size_t i, float v) {
    if (dt == AMP_F32)
        ((float *)buf)[i] = v;
    else
        ((uint16_t *)buf)[i] = dt == AMP_F16 ? amp_fp16_from_fp32(v) : amp_bf16_from_fp32(v);
}

static void fixture_free(fixture *f) {
    free(f->a), free(f->b), free(f->af), free(f->bf), free(f->c0), free(f->exact), free(f->bound), free(f->twin);
    memset(f, 0, sizeof *f);
}

static bool fixture_init(fixture *f, const problem *pr, amp_dtype dt, test_rng *rng) {
    memset(f, 0, sizeof *f);
    f->pr = *pr;
    f->dt = dt;
    const int64_t m = pr->m, n = pr->n, k = pr->k;
    f->a_rows = pr->trans_a ? k : m;
    f->lda = (pr->trans_a ? m : k) + pr->pad;
    f->b_rows = pr->trans_b ? n : k;
    f->ldb = (pr->trans_b ? k : n) + pr->pad;
    f->ldc = n + pr->pad;
    const size_t na = (size_t)(f->a_rows * f->lda), nb = (size_t)(f->b_rows * f->ldb), nc = (size_t)(m * f->ldc);
    const size_t es = amp_dtype_size(dt);
    f->a = malloc(na * es + 1), f->b = malloc(nb * es + 1);
    f->af = malloc(na * sizeof(float) + 1), f->bf = malloc(nb * sizeof(float) + 1);
    f->c0 = malloc(nc * sizeof(float) + 1), f->twin = malloc(nc * sizeof(float) + 1);
    f->exact = malloc((size_t)(m * n) * sizeof(double) + 1), f->bound = malloc((size_t)(m * n) * sizeof(double) + 1);
    if (!CHECK(f->a && f->b && f->af && f->bf && f->c0 && f->twin && f->exact && f->bound)) {
        fixture_free(f);
        return false;
    }
    for (size_t i = 0; i < na; i++) store_value(dt, f->a, i, f->af[i] = random_value(rng, dt));
    for (size_t i = 0; i < nb; i++) store_value(dt, f->b, i, f->bf[i] = random_value(rng, dt));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < f->ldc; j++)
            f->c0[i * f->ldc + j] = j >= n ? 1234.5f + (float)j /* guard */
                                    : pr->beta == 0.0f ? NAN
                                                       : random_value(rng, AMP_F32);
    const double u = ldexp(1.0, -24);
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double sum = 0.0, abs_sum = 0.0;
            for (int64_t p = 0; p < k; p++) {
                const double x = f->af[pr->trans_a ? p * f->lda + i : i * f->lda + p];
                const double y = f->bf[pr->trans_b ? j * f->ldb + p : p * f->ldb + j];
                sum += x * y;
                abs_sum += fabs(x * y);
            }
            const double cij = pr->beta == 0.0f ? 0.0 : (double)f->c0[i * f->ldc + j];
            f->exact[i * n + j] = (double)pr->alpha * sum + (double)pr->beta * cij;
            f->bound[i * n + j] =
                2.0 * (double)(k + 4) * u * (fabs((double)pr->alpha) * abs_sum + fabs((double)pr->beta * cij));
        }
    }
    memcpy(f->twin, f->c0, nc * sizeof(float));
    amp_gemm_ref(dt, pr->trans_a, pr->trans_b, m, n, k, pr->alpha, f->a, f->lda, f->b, f->ldb, pr->beta, f->twin,
                 f->ldc);
    return true;
}

/* Checks C against both oracles and the guard band; counts one check per problem when all agree. */
static void check_result(const fixture *f, const float *c, const char *who) {
    const problem *pr = &f->pr;
    int64_t bad = 0;
    for (int64_t i = 0; i < pr->m; i++) {
        for (int64_t j = 0; j < f->ldc; j++) {
            const float got = c[i * f->ldc + j];
            bool ok;
            if (j >= pr->n) {
                ok = f32_bits(got) == f32_bits(f->c0[i * f->ldc + j]);
            } else {
                const double err = fabs((double)got - f->exact[i * pr->n + j]);
                const double twin_err = fabs((double)got - (double)f->twin[i * f->ldc + j]);
                ok = !isnan(got) && err <= f->bound[i * pr->n + j] && twin_err <= 2.0 * f->bound[i * pr->n + j];
            }
            if (!ok && bad++ < 3)
                CHECK_MSG(false,
                          "%s %s %lldx%lldx%lld ta=%d tb=%d pad=%lld alpha=%g beta=%g: c[%lld][%lld] = %.9g, "
                          "exact %.9g (bound %.3g), twin %.9g%s",
                          who, amp_dtype_name(f->dt), (long long)pr->m, (long long)pr->n, (long long)pr->k,
                          pr->trans_a, pr->trans_b, (long long)pr->pad, (double)pr->alpha, (double)pr->beta,
                          (long long)i, (long long)j, (double)got,
                          j < pr->n ? f->exact[i * pr->n + j] : 0.0, j < pr->n ? f->bound[i * pr->n + j] : 0.0,
                          j < pr->n ? (double)f->twin[i * f->ldc + j] : (double)f->c0[i * f->ldc + j],
                          j >= pr->n ? " (guard band past n overwritten)" : "");
        }
    }
    if (bad == 0) harness_pass(1);
}

/* Runs amp_gemm on the active path and checks it. */
static void run_and_check(const fixture *f, const char *who) {
    const problem *pr = &f->pr;
    const size_t nc = (size_t)(pr->m * f->ldc);
    float *c = malloc(nc * sizeof(float) + 1);
    if (!CHECK(c)) return;
    memcpy(c, f->c0, nc * sizeof(float));
    const int st = amp_gemm(f->dt, pr->trans_a, pr->trans_b, pr->m, pr->n, pr->k, pr->alpha, f->a, f->lda, f->b,
                            f->ldb, pr->beta, c, f->ldc);
    if (CHECK_MSG(st == AMP_OK, "%s: amp_gemm returned %d", who, st)) check_result(f, c, who);
    free(c);
}

/* The bf16 methods this CPU runs (amp/gemm.h's amp_gemm_bf16_method), the active one first. */
static int bf16_methods(amp_gemm_bf16_method out[AMP_GEMM_BF16_METHOD_COUNT]) {
    int n = 0;
    out[n++] = amp_gemm_bf16_method_active();
    for (int m = 0; m < AMP_GEMM_BF16_METHOD_COUNT; m++)
        if (m != (int)out[0] && amp_gemm_bf16_method_supported((amp_gemm_bf16_method)m)) out[n++] = (amp_gemm_bf16_method)m;
    return n;
}

/* run_and_check on the active path, and for bf16 on AVX-512 with each bf16 method in turn (the
 * active one restored after). */
static void run_and_check_methods(const fixture *f, amp_isa isa) {
    if (f->dt != AMP_BF16 || isa != AMP_ISA_AVX512) {
        run_and_check(f, amp_isa_name(isa));
        return;
    }
    amp_gemm_bf16_method methods[AMP_GEMM_BF16_METHOD_COUNT];
    const int n = bf16_methods(methods);
    for (int m = 0; m < n; m++) {
        char who[64];
        snprintf(who, sizeof who, "avx512 (bf16 %s)", amp_gemm_bf16_method_name(methods[m]));
        CHECK_EQ_INT(amp_gemm_bf16_method_set(methods[m]), AMP_OK);
        run_and_check(f, who);
    }
    amp_gemm_bf16_method_set(methods[0]);
}

/* Awkward sizes: single elements, primes, one off the 12x32, 6x16 and 4x16 tiles either way, and
 * sizes past each cache block (k > kc = 256, 512 or 1024, m > mc = 144, n > nc = 2048). */
static const int64_t base_shapes[][3] = {
    {1, 1, 1},     {7, 13, 17},   {31, 1, 29},   {1, 97, 5},    {12, 32, 64},  {13, 33, 65},  {11, 31, 63},
    {6, 16, 8},    {5, 15, 3},    {4, 17, 2},    {48, 64, 1},   {25, 70, 300}, {300, 40, 20}, {37, 41, 530},
    {5, 19, 1100}, {100, 7, 50},  {130, 10, 33}, /* the last two (and 31x1x29): narrow C, computed as C^T */
};
enum { N_BASE_SHAPES = sizeof base_shapes / sizeof base_shapes[0] };

static const float alphas[] = {1.0f, -1.5f, 0.25f, 1.0f};
static const float betas[] = {0.0f, 1.0f, 0.5f, 0.0f};

void test_gemm_vs_reference(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu (AMP_TEST_SEED=%llu replays it)", (unsigned long long)seed, (unsigned long long)seed);
    amp_isa isas[AMP_ISA_COUNT];
    const int n_isas = test_supported_isas(isas);
    int index = 0;
    for (int s = 0; s <= N_BASE_SHAPES; s++) {
        for (int t = 0; t < 4; t++, index++) {
            problem pr = {.trans_a = t & 1, .trans_b = (t >> 1) & 1, .pad = (index % 3) * 3 % 7,
                          .alpha = alphas[index % 4], .beta = betas[(index / 4 + index) % 4]};
            if (s < N_BASE_SHAPES) {
                pr.m = base_shapes[s][0], pr.n = base_shapes[s][1], pr.k = base_shapes[s][2];
            } else { /* n past nc = 2048: one transpose combination each way is enough */
                if (t == 1 || t == 2) continue;
                pr.m = 13, pr.n = 2061, pr.k = 67;
            }
            for (int d = 0; d < N_GEMM_DTYPES; d++) {
                test_rng rng = {seed ^ (uint64_t)(index * 31 + d)};
                fixture f;
                if (!fixture_init(&f, &pr, gemm_dtypes[d], &rng)) return;
                check_result(&f, f.twin, "the fp32 twin"); /* the oracles agree with each other */
                for (int i = 0; i < n_isas; i++) {
                    if (!test_isa_begin(isas[i])) continue;
                    run_and_check_methods(&f, isas[i]);
                }
                test_isa_end();
                fixture_free(&f);
            }
        }
    }
}

/* k == 0, m or n == 0, alpha == 0 (A and B unread), NaN and infinity propagation. */
void test_gemm_edge_cases(void) {
    amp_isa isas[AMP_ISA_COUNT];
    const int n_isas = test_supported_isas(isas);
    for (int i = 0; i < n_isas; i++) {
        if (!test_isa_begin(isas[i])) continue;
        for (int d = 0; d < N_GEMM_DTYPES; d++) {
            const amp_dtype dt = gemm_dtypes[d];
            uint32_t a[64], b[64]; /* big enough for every dtype: 3 x 5 and 5 x 4 elements */
            memset(a, 0, sizeof a), memset(b, 0, sizeof b);
            for (int e = 0; e < 20; e++) store_value(dt, a, (size_t)e, 1.0f), store_value(dt, b, (size_t)e, 2.0f);
            float c[3 * 4];

            /* k == 0: C = beta C; beta == 0 overwrites NaN with zeros */
            for (int e = 0; e < 12; e++) c[e] = NAN;
            CHECK_EQ_INT(amp_gemm(dt, false, false, 3, 4, 0, 1.0f, a, 0, b, 4, 0.0f, c, 4), AMP_OK);
            for (int e = 0; e < 12; e++) CHECK_EQ_BITS(f32_bits(c[e]), 0u, "k=0 beta=0 c[%d]", e);
            for (int e = 0; e < 12; e++) c[e] = (float)e;
            CHECK_EQ_INT(amp_gemm(dt, false, false, 3, 4, 0, 1.0f, NULL, 0, NULL, 4, 0.5f, c, 4), AMP_OK);
            for (int e = 0; e < 12; e++)
                CHECK_EQ_BITS(f32_bits(c[e]), f32_bits(0.5f * (float)e), "k=0 beta=0.5 c[%d]", e);

            /* m == 0 or n == 0: nothing is touched, NULL is fine where there are no elements */
            CHECK_EQ_INT(amp_gemm(dt, false, false, 0, 4, 5, 1.0f, NULL, 5, b, 4, 0.0f, NULL, 4), AMP_OK);
            c[0] = 7.0f;
            CHECK_EQ_INT(amp_gemm(dt, false, false, 3, 0, 5, 1.0f, a, 5, NULL, 0, 0.0f, c, 0), AMP_OK);
            CHECK_EQ_BITS(f32_bits(c[0]), f32_bits(7.0f), "n=0 leaves C alone");

            /* alpha == 0: A and B are not read, so their NaNs do not reach C */
            uint32_t nan_a[64];
            for (int e = 0; e < 64; e++) nan_a[e] = 0x7FC07FC0u; /* NaN in f32, bf16 and f16 (0x7FC0) */
            for (int e = 0; e < 12; e++) c[e] = 2.0f;
            CHECK_EQ_INT(amp_gemm(dt, false, false, 3, 4, 5, 0.0f, nan_a, 5, nan_a, 4, 0.5f, c, 4), AMP_OK);
            for (int e = 0; e < 12; e++) CHECK_EQ_BITS(f32_bits(c[e]), f32_bits(1.0f), "alpha=0 c[%d]", e);

            /* a NaN in row 1 of A poisons row 1 of C only; infinity * 0 is NaN too */
            store_value(dt, a, 5 + 2, NAN);
            CHECK_EQ_INT(amp_gemm(dt, false, false, 3, 4, 5, 1.0f, a, 5, b, 4, 0.0f, c, 4), AMP_OK);
            for (int e = 0; e < 12; e++) {
                if (e / 4 == 1)
                    CHECK_MSG(isnan(c[e]), "%s %s: NaN in row 1 of A, c[%d] = %g", amp_isa_name(isas[i]),
                              amp_dtype_name(dt), e, (double)c[e]);
                else
                    CHECK_EQ_BITS(f32_bits(c[e]), f32_bits(10.0f), "%s %s: rows without NaN c[%d]",
                                  amp_isa_name(isas[i]), amp_dtype_name(dt), e);
            }
            store_value(dt, a, 5 + 2, INFINITY);
            store_value(dt, b, 2 * 4 + 3, 0.0f); /* row 2 of B, column 3 */
            CHECK_EQ_INT(amp_gemm(dt, false, false, 3, 4, 5, 1.0f, a, 5, b, 4, 0.0f, c, 4), AMP_OK);
            CHECK_MSG(isnan(c[1 * 4 + 3]), "inf * 0 gives NaN: %g", (double)c[7]);
            CHECK_MSG(isinf(c[1 * 4 + 0]) && c[4] > 0, "inf * 2 + finite gives +inf: %g", (double)c[4]);

            /* subnormal inputs are kept by the f32 and f16 paths and by bf16's FMA method; bf16's
             * VDPBF16PS (dot) method may flush them to zero, as amp/gemm.h says:
             * 1 x 1 x 2, a = (3 x 2^-24 for f16, else 2^-130; 0), b = (2^10; 1) */
            const float tiny = dt == AMP_F16 ? ldexpf(3.0f, -24) : ldexpf(1.0f, -130);
            store_value(dt, a, 0, tiny), store_value(dt, a, 1, 0.0f);
            store_value(dt, b, 0, 1024.0f), store_value(dt, b, 1, 1.0f);
            amp_gemm_bf16_method methods[AMP_GEMM_BF16_METHOD_COUNT];
            const int n_methods = dt == AMP_BF16 && isas[i] == AMP_ISA_AVX512 ? bf16_methods(methods) : 1;
            for (int m = 0; m < n_methods; m++) {
                if (n_methods > 1) CHECK_EQ_INT(amp_gemm_bf16_method_set(methods[m]), AMP_OK);
                c[0] = NAN;
                CHECK_EQ_INT(amp_gemm(dt, false, false, 1, 1, 2, 1.0f, a, 2, b, 1, 0.0f, c, 1), AMP_OK);
                const bool may_flush = amp_gemm_kernel_for(isas[i], dt)->packed == AMP_GEMM_PACKED_BF16_PAIRS;
                CHECK_MSG(f32_bits(c[0]) == f32_bits(tiny * 1024.0f) || (may_flush && f32_bits(c[0]) == 0),
                          "%s %s%s: subnormal input: got %g, want %g", amp_isa_name(isas[i]), amp_dtype_name(dt),
                          may_flush ? " (dot)" : "", (double)c[0], (double)(tiny * 1024.0f));
            }
            if (n_methods > 1) amp_gemm_bf16_method_set(methods[0]);
        }
    }
    test_isa_end();
}

/* Same bits for 1, 2 and 3 threads and for repeated calls, on every path and dtype, for a C
 * computed directly and for a narrow C computed as C^T, and for a wide C of few rows, which the
 * threads split along n into several tasks each, handed out as threads come free (gemm.c's
 * split_finer, for an fp32 A read by rows in place), and for C split along one side only, where
 * the tasks share the other side's packed operand (gemm.c's run_shared: A for the first and third,
 * B for the last), packed whole or, the last run, in chunks of one k block (or not at all where a
 * block exceeds the limit the test sets). Each product is large enough (2mnk above 3 x 2^21 flops) that amp_gemm really uses 3
 * threads when asked. */
void test_gemm_determinism(void) {
    const bool quick = harness_quick();
    const problem problems[] = {
        {.m = quick ? 150 : 301, .n = 157, .k = quick ? 300 : 530, .trans_b = true, .pad = 1, .alpha = 0.75f,
         .beta = 0.5f},
        {.m = 520, .n = 9, .k = 700, .trans_a = true, .pad = 2, .alpha = 1.0f, .beta = 0.0f},
        {.m = 36, .n = quick ? 500 : 1000, .k = 700, .pad = 1, .alpha = 1.0f, .beta = 0.25f},
        /* split along m on every path: the tasks share one packed B over three k blocks (an odd k) */
        {.m = 600, .n = 40, .k = 1101, .trans_a = true, .pad = 1, .alpha = 1.0f, .beta = 0.0f},
    };
    test_rng rng = {harness_seed() ^ 0xD5u};
    amp_isa isas[AMP_ISA_COUNT];
    const int n_isas = test_supported_isas(isas);
    for (size_t q = 0; q < sizeof problems / sizeof problems[0]; q++) {
        const problem *pr = &problems[q];
        for (int d = 0; d < N_GEMM_DTYPES; d++) {
            fixture f;
            if (!fixture_init(&f, pr, gemm_dtypes[d], &rng)) return;
            const size_t bytes = (size_t)(pr->m * f.ldc) * sizeof(float);
            float *c[2] = {malloc(bytes), malloc(bytes)};
            for (int i = 0; i < n_isas && CHECK(c[0] && c[1]); i++) {
                if (!test_isa_begin(isas[i])) continue;
                amp_gemm_bf16_method methods[AMP_GEMM_BF16_METHOD_COUNT];
                const int n_methods = f.dt == AMP_BF16 && isas[i] == AMP_ISA_AVX512 ? bf16_methods(methods) : 1;
                for (int mt = 0; mt < n_methods; mt++) {
                    if (n_methods > 1) CHECK_EQ_INT(amp_gemm_bf16_method_set(methods[mt]), AMP_OK);
                    const char *method = n_methods > 1 ? amp_gemm_bf16_method_name(methods[mt]) : "";
                    const int threads[] = {1, 1, 2, 3, 2};
                    for (int t = 0; t < 5; t++) {
                        amp_set_num_threads(threads[t]);
                        amp_gemm_set_shared_pack_max(t == 4 ? (size_t)128 << 10 : 0);
                        float *out = c[t == 0 ? 0 : 1];
                        memcpy(out, f.c0, bytes);
                        CHECK_EQ_INT(amp_gemm(f.dt, pr->trans_a, pr->trans_b, pr->m, pr->n, pr->k, pr->alpha, f.a,
                                              f.lda, f.b, f.ldb, pr->beta, out, f.ldc),
                                     AMP_OK);
                        if (t == 0)
                            check_result(&f, out, amp_isa_name(isas[i]));
                        else
                            CHECK_MSG(memcmp(c[0], c[1], bytes) == 0,
                                      "%s %s %s %lldx%lldx%lld: %d threads gave other bits than 1",
                                      amp_isa_name(isas[i]), amp_dtype_name(f.dt), method, (long long)pr->m,
                                      (long long)pr->n, (long long)pr->k, threads[t]);
                    }
                }
                if (n_methods > 1) amp_gemm_bf16_method_set(methods[0]);
            }
            test_isa_end();
            amp_set_num_threads(0);
            amp_gemm_set_shared_pack_max(0);
            free(c[0]), free(c[1]);
            fixture_free(&f);
        }
    }
}

/* An fp32 A read in place by the kernels against every panel packed (amp_gemm_set_a_in_place(false)):
 * transposed (gemm.c's ukernel_sa, where C's rectangle is one tile wide) and by rows (ukernel_ra, any
 * width; rows 4 KiB apart are packed by the rule, so one such case checks that side too). The same
 * bits, on every path and thread count, with partial panels (m not a multiple of 12), two or three k
 * blocks (k > kc), n within a tile and over several, beta 0 and not, and the result also within the
 * oracle's bound. */
void test_gemm_a_in_place(void) {
    const problem problems[] = {
        {.m = 150, .n = 32, .k = 128, .trans_a = true, .pad = 3, .alpha = 1.0f, .beta = 0.0f},
        {.m = 12, .n = 17, .k = 600, .trans_a = true, .trans_b = true, .pad = 0, .alpha = 0.5f, .beta = 1.0f},
        {.m = 61, .n = 1, .k = 1100, .trans_a = true, .pad = 1, .alpha = 1.0f, .beta = 0.25f},
        {.m = 300, .n = 24, .k = 7, .trans_a = true, .pad = 5, .alpha = -2.0f, .beta = 0.0f},
        {.m = 150, .n = 100, .k = 128, .pad = 3, .alpha = 1.0f, .beta = 0.0f},
        {.m = 61, .n = 70, .k = 1100, .trans_b = true, .pad = 1, .alpha = 0.5f, .beta = 0.25f},
        {.m = 37, .n = 20, .k = 33, .pad = 0, .alpha = -1.0f, .beta = 1.0f},
        {.m = 30, .n = 64, .k = 1024, .pad = 0, .alpha = 1.0f, .beta = 0.0f}, /* lda = 1024: packed */
    };
    test_rng rng = {harness_seed() ^ 0x5Au};
    amp_isa isas[AMP_ISA_COUNT];
    const int n_isas = test_supported_isas(isas);
    for (size_t q = 0; q < sizeof problems / sizeof problems[0]; q++) {
        const problem *pr = &problems[q];
        fixture f;
        if (!fixture_init(&f, pr, AMP_F32, &rng)) return;
        const size_t bytes = (size_t)(pr->m * f.ldc) * sizeof(float);
        float *c[2] = {malloc(bytes), malloc(bytes)};
        for (int i = 0; i < n_isas && CHECK(c[0] && c[1]); i++) {
            if (!test_isa_begin(isas[i])) continue;
            for (int threads = 1; threads <= 3; threads += 2) {
                amp_set_num_threads(threads);
                for (int w = 0; w < 2; w++) {
                    amp_gemm_set_a_in_place(w == 0);
                    memcpy(c[w], f.c0, bytes);
                    CHECK_EQ_INT(amp_gemm(f.dt, pr->trans_a, pr->trans_b, pr->m, pr->n, pr->k, pr->alpha, f.a, f.lda,
                                          f.b, f.ldb, pr->beta, c[w], f.ldc),
                                 AMP_OK);
                }
                amp_gemm_set_a_in_place(true);
                check_result(&f, c[0], amp_isa_name(isas[i]));
                CHECK_MSG(memcmp(c[0], c[1], bytes) == 0,
                          "%s f32 %lldx%lldx%lld %s, %d threads: A read in place gave other bits than A packed",
                          amp_isa_name(isas[i]), (long long)pr->m, (long long)pr->n, (long long)pr->k,
                          pr->trans_a ? "A^T" : "A", threads);
            }
        }
        test_isa_end();
        amp_set_num_threads(0);
        free(c[0]), free(c[1]);
        fixture_free(&f);
    }
}

/* The 8-row kernels (amp_gemm_kernel_rows8: bf16 pairs, fp32, and f16 and bf16 decoded to fp32, bf16
 * under each bf16 method) against the 12-row ones they stand in for, bit for bit: the same A rows
 * packed for each (panels of 8 and of 12), the same packed B, every m to 8, n across the two vectors'
 * masks, k odd and even up to past a kc block, beta 0, 1 and 0.5, alpha 1 and -0.5, random values
 * (some zero; for f16 and bf16 the top halves of fp32 patterns) and C from random values; and that
 * AVX-512 has one for each. */
static float unit_value(test_rng *rng) { return (float)(test_rng_next(rng) >> 40) / (float)(1 << 24); } /* [0, 1) */

/* n random values of dt (fp32, or the top halves of fp32 patterns: bf16's, finite f16 ones), one in seven zero */
static void rows8_fill(test_rng *rng, amp_dtype dt, void *dst, int64_t n) {
    for (int64_t e = 0; e < n; e++) {
        const float v = test_rng_next(rng) % 7 == 0 ? 0.0f : unit_value(rng) * 4.0f - 2.0f;
        if (dt == AMP_F32) ((float *)dst)[e] = v;
        else ((uint16_t *)dst)[e] = (uint16_t)(f32_bits(v) >> 16);
    }
}

void test_gemm_rows8_kernel(void) {
    amp_isa isas[AMP_ISA_COUNT];
    const int n_isas = test_supported_isas(isas);
    test_rng rng = {harness_seed() ^ 0x8Bu};
    enum { MAXK = 1100, LDC = 40 };
    float *a = malloc(8 * MAXK * 4), *b = malloc(32 * MAXK * 4), *pa8 = malloc(8 * (MAXK + 1) * 4),
          *pa12 = malloc(12 * (MAXK + 1) * 4), *pb = malloc(32 * (MAXK + 1) * 4);
    float *c8 = malloc(8 * LDC * sizeof(float)), *c12 = malloc(8 * LDC * sizeof(float)),
          *c0 = malloc(8 * LDC * sizeof(float));
    int tested = 0;
    for (int i = 0; i < n_isas && CHECK(a && b && pa8 && pa12 && pb && c8 && c12 && c0); i++) {
        if (!test_isa_begin(isas[i])) continue;
        /* bf16 twice: under the active bf16 method, then under the FMA one (bf16 decoded to fp32) */
        static const amp_dtype dts[4] = {AMP_BF16, AMP_F32, AMP_F16, AMP_BF16};
        const amp_gemm_bf16_method method = amp_gemm_bf16_method_active();
        for (int d = 0; d < 4; d++) {
            const amp_dtype dt = dts[d];
            if (d == 3 && (method == AMP_GEMM_BF16_FMA || amp_gemm_bf16_method_set(AMP_GEMM_BF16_FMA) != AMP_OK)) break;
            const amp_gemm_kernel *k8 = amp_gemm_kernel_rows8(isas[i], dt);
            const amp_gemm_kernel *k12 = amp_gemm_kernel_for(isas[i], dt);
            /* AVX-512 has one for every dtype (fp32's for fp32 and the decoding packs, bf16_dot8) */
            CHECK_MSG(isas[i] != AMP_ISA_AVX512 || k8, "%s: no 8-row kernel for %s (%s)", amp_isa_name(isas[i]),
                      amp_dtype_name(dt), k12->name);
            if (!k8) continue;
            tested++;
            CHECK(k8->mr == 8 && k8->nr == k12->nr && k8->packed == k12->packed && k8->k_unit == k12->k_unit);
            static const int64_t ks[] = {1, 2, 3, 64, 255, 256, 511, 512, 513, 1024, 1031};
            static const int ns[] = {1, 15, 16, 17, 31, 32};
            static const float betas8[] = {0.0f, 1.0f, 0.5f};
            int64_t bad = 0, runs = 0;
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                const int64_t kc = ks[ki];
                rows8_fill(&rng, dt, a, 8 * kc);
                rows8_fill(&rng, dt, b, 32 * kc);
                k12->pack(pb, b, 32, false, 32, kc, k12->nr); /* B [n][k] rows: op(B) = B^T */
                for (int m = 1; m <= 8; m++) {
                    k8->pack(pa8, a, kc, false, m, kc, 8);
                    k12->pack(pa12, a, kc, false, m, kc, k12->mr);
                    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                        for (size_t bi = 0; bi < 3; bi++) {
                            const float alpha = bi == 1 ? -0.5f : 1.0f, beta = betas8[bi];
                            for (int e = 0; e < 8 * LDC; e++) c0[e] = unit_value(&rng) * 2.0f - 1.0f;
                            memcpy(c8, c0, 8 * LDC * sizeof(float));
                            memcpy(c12, c0, 8 * LDC * sizeof(float));
                            k8->ukernel(kc, pa8, pb, c8, LDC, m, ns[ni], alpha, beta);
                            k12->ukernel(kc, pa12, pb, c12, LDC, m, ns[ni], alpha, beta);
                            bad += memcmp(c8, c12, 8 * LDC * sizeof(float)) != 0, runs++;
                        }
                }
            }
            CHECK_MSG(bad == 0, "%s: the 8-row %s kernel (%s) differs from the 12-row one in %lld of %lld tiles",
                      amp_isa_name(isas[i]), amp_dtype_name(dt), k8->name, (long long)bad, (long long)runs);
        }
        amp_gemm_bf16_method_set(method);
    }
    test_isa_end();
    if (!tested) harness_note("no 8-row kernel on this CPU");
    free(a), free(b), free(pa8), free(pa12), free(pb), free(c8), free(c12), free(c0);
}

/* A partial A panel (m < mr rows, the last panel of a product whose rows are not a multiple of mr)
 * against the same rows in a full panel, bit for bit, on every path's kernel (fp32 and the f16 and
 * bf16 decoding packs, and bf16 under each method): AVX-512 computes a panel of up to 4 or 8 rows on
 * those rows only, and each element's sum must not depend on that. The full panel's other rows hold
 * other values, and C's rows past m must come back untouched. Every m below mr, n across both
 * vectors' masks, k odd and even up to past a kc block, beta 0, 1 and 0.5. */
void test_gemm_partial_panel(void) {
    amp_isa isas[AMP_ISA_COUNT];
    const int n_isas = test_supported_isas(isas);
    test_rng rng = {harness_seed() ^ 0x9Cu};
    enum { MAXR = AMP_GEMM_MAX_TILE, MAXK = 1100, LDC = AMP_GEMM_MAX_TILE + 8 };
    float *a = malloc(MAXR * MAXK * 4), *b = malloc(MAXR * MAXK * 4), *pa = malloc(MAXR * (MAXK + 1) * 4),
          *pb = malloc(MAXR * (MAXK + 1) * 4);
    float *cf = malloc(MAXR * LDC * sizeof(float)), *cp = malloc(MAXR * LDC * sizeof(float)),
          *c0 = malloc(MAXR * LDC * sizeof(float));
    for (int i = 0; i < n_isas && CHECK(a && b && pa && pb && cf && cp && c0); i++) {
        if (!test_isa_begin(isas[i])) continue;
        amp_gemm_bf16_method methods[AMP_GEMM_BF16_METHOD_COUNT];
        const int n_methods = isas[i] == AMP_ISA_AVX512 ? bf16_methods(methods) : 1;
        if (isas[i] != AMP_ISA_AVX512) methods[0] = amp_gemm_bf16_method_active();
        for (int d = 0; d < N_GEMM_DTYPES + n_methods - 1; d++) {
            const amp_dtype dt = d < N_GEMM_DTYPES ? gemm_dtypes[d] : AMP_BF16;
            if (d >= N_GEMM_DTYPES) CHECK_EQ_INT(amp_gemm_bf16_method_set(methods[d - N_GEMM_DTYPES + 1]), AMP_OK);
            const amp_gemm_kernel *k = amp_gemm_kernel_for(isas[i], dt);
            const int mr = k->mr, nr = k->nr;
            static const int64_t ks[] = {1, 2, 3, 64, 255, 513, 1031};
            static const float betas_p[] = {0.0f, 1.0f, 0.5f};
            int64_t bad = 0, runs = 0;
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                const int64_t kc = ks[ki];
                rows8_fill(&rng, dt, a, mr * kc);
                rows8_fill(&rng, dt, b, nr * kc);
                k->pack(pb, b, kc, false, nr, kc, nr); /* B [n][k] rows: op(B) = B^T */
                for (int m = 1; m < mr; m++) {
                    for (int n = 1; n <= nr; n += n % 16 == 15 || n % 16 == 0 ? 1 : 7) {
                        const size_t bi = (size_t)(m + n) % 3;
                        const float alpha = bi == 1 ? -0.5f : 1.0f, beta = betas_p[bi];
                        for (int e = 0; e < mr * LDC; e++) c0[e] = unit_value(&rng) * 2.0f - 1.0f;
                        memcpy(cf, c0, (size_t)(mr * LDC) * sizeof(float));
                        memcpy(cp, c0, (size_t)(mr * LDC) * sizeof(float));
                        k->pack(pa, a, kc, false, mr, kc, mr); /* every row of the panel */
                        k->ukernel(kc, pa, pb, cf, LDC, mr, n, alpha, beta);
                        k->pack(pa, a, kc, false, m, kc, mr); /* the first m rows, the rest zeros */
                        k->ukernel(kc, pa, pb, cp, LDC, m, n, alpha, beta);
                        const size_t top = (size_t)(m * LDC) * sizeof(float);
                        bad += memcmp(cp, cf, top) != 0 ||
                               memcmp(cp + m * LDC, c0 + m * LDC, (size_t)((mr - m) * LDC) * sizeof(float)) != 0;
                        runs++;
                    }
                }
            }
            CHECK_MSG(bad == 0, "%s: kernel %s (%s): a partial A panel differs from the same rows of a full one in %lld of %lld tiles",
                      amp_isa_name(isas[i]), k->name, amp_dtype_name(dt), (long long)bad, (long long)runs);
        }
        amp_gemm_bf16_method_set(methods[0]);
    }
    test_isa_end();
    free(a), free(b), free(pa), free(pb), free(cf), free(cp), free(c0);
}

/* The bf16 method switch (amp/gemm.h): names, statuses, which kernel each method selects, and the
 * default against the measured speeds. (Both methods' products are checked against the oracles by
 * the tests above.) */
void test_gemm_bf16_method(void) {
    const amp_gemm_bf16_method active = amp_gemm_bf16_method_active();
    const double dot = amp_gemm_bf16_dot_speed();
    const bool has_dot = amp_isa_supported(AMP_ISA_AVX512) && amp_cpu_get_features()->avx512_bf16;
    /* AMX: the CPU's CPUID and XCR0 (amp_cpu_features), and Linux's permission, which this process
     * has by now if the method is supported (the method's first use asked for it) */
    const bool has_amx = has_dot && amp_cpu_get_features()->amx_bf16 &&
                         amp_gemm_bf16_method_supported(AMP_GEMM_BF16_AMX);
    harness_note("bf16 method %s; VDPBF16PS at %.2fx the FMA's flops; AMX-BF16 %s", amp_gemm_bf16_method_name(active),
                 dot, amp_cpu_get_features()->amx_bf16 ? (has_amx ? "usable" : "not permitted") : "absent");
    CHECK_MSG(has_dot ? dot > 0.0 : dot == 0.0, "dot speed %g with AVX512-BF16 %d", dot, has_dot);
    /* the default: AMX where usable, else the faster instruction (unless the environment chose) */
    const char *env = getenv("AMP_GEMM_BF16");
    if (!env || !*env)
        CHECK_MSG(active == (has_amx ? AMP_GEMM_BF16_AMX : dot >= 1.0 ? AMP_GEMM_BF16_DOT : AMP_GEMM_BF16_FMA),
                  "default %s with dot speed %g, AMX %d", amp_gemm_bf16_method_name(active), dot, has_amx);
    CHECK(amp_gemm_bf16_method_supported(AMP_GEMM_BF16_FMA));
    CHECK_EQ_INT(amp_gemm_bf16_method_supported(AMP_GEMM_BF16_DOT), has_dot);
    CHECK(!amp_gemm_bf16_method_supported(AMP_GEMM_BF16_AMX) || amp_cpu_get_features()->amx_bf16);
    CHECK_EQ_INT(amp_gemm_bf16_method_set(AMP_GEMM_BF16_METHOD_COUNT), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_gemm_bf16_method_set((amp_gemm_bf16_method)-1), AMP_ERR_INVALID_ARGUMENT);
    if (!has_dot) CHECK_EQ_INT(amp_gemm_bf16_method_set(AMP_GEMM_BF16_DOT), AMP_ERR_UNSUPPORTED_ISA);
    if (!has_amx) CHECK_EQ_INT(amp_gemm_bf16_method_set(AMP_GEMM_BF16_AMX), AMP_ERR_UNSUPPORTED_ISA);
    CHECK_EQ_INT(amp_gemm_bf16_method_active(), active); /* the failed sets changed nothing */
    amp_gemm_bf16_method parsed = AMP_GEMM_BF16_METHOD_COUNT;
    for (int m = 0; m < AMP_GEMM_BF16_METHOD_COUNT; m++) {
        CHECK_EQ_INT(amp_gemm_bf16_method_from_name(amp_gemm_bf16_method_name((amp_gemm_bf16_method)m), &parsed),
                     AMP_OK);
        CHECK_EQ_INT(parsed, m);
    }
    CHECK_EQ_INT(amp_gemm_bf16_method_from_name("vdpbf16ps", &parsed), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_gemm_bf16_method_from_name(NULL, &parsed), AMP_ERR_NULL_POINTER);
    CHECK(strcmp(amp_gemm_bf16_method_name((amp_gemm_bf16_method)7), "invalid") == 0);
    /* each method's kernels: the pairs format for dot and amx on AVX-512 (amx's tiles for stored
     * operands only), fp32 panels everywhere else */
    amp_gemm_bf16_method methods[AMP_GEMM_BF16_METHOD_COUNT];
    const int n = bf16_methods(methods);
    for (int m = 0; m < n; m++) {
        CHECK_EQ_INT(amp_gemm_bf16_method_set(methods[m]), AMP_OK);
        CHECK_EQ_INT(amp_gemm_bf16_method_active(), methods[m]);
        for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
            if (!amp_isa_supported((amp_isa)isa)) continue;
            const amp_gemm_kernel *k = amp_gemm_kernel_for((amp_isa)isa, AMP_BF16);
            const amp_gemm_kernel *ks = amp_gemm_kernel_stored((amp_isa)isa, AMP_BF16);
            const bool pairs = isa == AMP_ISA_AVX512 && methods[m] != AMP_GEMM_BF16_FMA;
            const bool tiles = isa == AMP_ISA_AVX512 && methods[m] == AMP_GEMM_BF16_AMX;
            CHECK_MSG(k && k->packed == (pairs ? AMP_GEMM_PACKED_BF16_PAIRS : AMP_GEMM_PACKED_F32) &&
                          k->k_unit == (pairs ? 2 : 1) && k->kc > 0 && k->mc > 0 && k->nc > 0,
                      "%s bf16 %s: kernel %s", amp_isa_name((amp_isa)isa), amp_gemm_bf16_method_name(methods[m]),
                      k ? k->name : "NULL");
            CHECK_MSG(tiles ? ks && ks->packed == AMP_GEMM_PACKED_BF16_TILES && ks->pack_a && ks->k_unit == 32 &&
                                  ks->kc % 32 == 0 && ks->kc > 0 && ks->mc > 0 && ks->nc > 0
                            : ks == k,
                      "%s bf16 %s: stored operands' kernel %s", amp_isa_name((amp_isa)isa),
                      amp_gemm_bf16_method_name(methods[m]), ks ? ks->name : "NULL");
        }
    }
    amp_gemm_bf16_method_set(active);
}

/* The ref path runs the blocked driver with a plain-C micro-kernel that adds in the oracle's order
 * without FMA, so where k fits one k block it must match the oracle bit for bit (on x86-64, whose
 * baseline has no FMA for the compiler to contract into). */
void test_gemm_ref_path_is_the_oracle(void) {
#if defined(__x86_64__)
    test_rng rng = {harness_seed() ^ 0x1234u};
    for (int d = 0; d < N_GEMM_DTYPES; d++) {
        const amp_gemm_kernel *kern = amp_gemm_kernel_for(AMP_ISA_REF, gemm_dtypes[d]);
        if (!CHECK(kern)) return;
        const problem pr = {.m = 29, .n = 37, .k = kern->kc, .trans_a = true, .pad = 2, .alpha = 1.25f, .beta = 0.5f};
        fixture f;
        if (!fixture_init(&f, &pr, gemm_dtypes[d], &rng)) return;
        float *c = malloc((size_t)(pr.m * f.ldc) * sizeof(float));
        if (CHECK(c) && test_isa_begin(AMP_ISA_REF)) {
            memcpy(c, f.c0, (size_t)(pr.m * f.ldc) * sizeof(float));
            CHECK_EQ_INT(amp_gemm(f.dt, pr.trans_a, pr.trans_b, pr.m, pr.n, pr.k, pr.alpha, f.a, f.lda, f.b, f.ldb,
                                  pr.beta, c, f.ldc),
                         AMP_OK);
            CHECK_MSG(memcmp(c, f.twin, (size_t)(pr.m * f.ldc) * sizeof(float)) == 0,
                      "ref path %s differs from amp_gemm_ref", amp_dtype_name(f.dt));
        }
        test_isa_end();
        free(c);
        fixture_free(&f);
    }
#else
    harness_note("not x86-64: the compiler may contract the ref kernels differently; skipped");
    harness_pass(1);
#endif
}

void test_gemm_arguments(void) {
    float a[16] = {0}, b[16] = {0}, c[16] = {0};
    /* dtype first, then sizes and strides, then pointers */
    CHECK_EQ_INT(amp_gemm(AMP_F8E4M3, false, false, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2), AMP_ERR_UNSUPPORTED_DTYPE);
    CHECK_EQ_INT(amp_gemm((amp_dtype)99, false, false, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2), AMP_ERR_UNSUPPORTED_DTYPE);
    CHECK_EQ_INT(amp_gemm(AMP_F8E5M2, false, false, -1, 2, 2, 1, NULL, 2, b, 2, 0, c, 2), AMP_ERR_UNSUPPORTED_DTYPE);
    CHECK_EQ_INT(amp_gemm(AMP_F32, false, false, -1, 2, 2, 1, a, 2, b, 2, 0, c, 2), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_gemm(AMP_F32, false, false, 2, -1, 2, 1, a, 2, b, 2, 0, c, 2), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_gemm(AMP_F32, false, false, 2, 2, -1, 1, a, 2, b, 2, 0, c, 2), AMP_ERR_INVALID_ARGUMENT);
    /* A is m x k (lda >= k) or, transposed, k x m (lda >= m): here m = 2, n = 3, k = 4 */
    CHECK_EQ_INT(amp_gemm(AMP_F32, false, false, 2, 3, 4, 1, a, 3, b, 3, 0, c, 3), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_gemm(AMP_F32, false, false, 2, 3, 4, 1, a, 4, b, 3, 0, c, 3), AMP_OK);
    CHECK_EQ_INT(amp_gemm(AMP_F32, true, false, 2, 3, 4, 1, a, 1, b, 3, 0, c, 3), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_gemm(AMP_F32, true, false, 2, 3, 4, 1, a, 2, b, 3, 0, c, 3), AMP_OK);
    /* B is k x n (ldb >= n) or n x k (ldb >= k) */
    CHECK_EQ_INT(amp_gemm(AMP_F32, false, false, 2, 3, 4, 1, a, 4, b, 2, 0, c, 3), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_gemm(AMP_F32, false, true, 2, 3, 4, 1, a, 4, b, 3, 0, c, 3), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_gemm(AMP_F32, false, true, 2, 3, 4, 1, a, 4, b, 4, 0, c, 3), AMP_OK);
    /* C is m x n (ldc >= n); negative strides are always invalid */
    CHECK_EQ_INT(amp_gemm(AMP_F32, false, false, 2, 3, 4, 1, a, 4, b, 3, 0, c, 2), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_gemm(AMP_F32, false, false, 0, 0, 0, 1, a, -1, b, 0, 0, c, 0), AMP_ERR_INVALID_ARGUMENT);
    /* a matrix whose last element cannot be addressed */
    CHECK_EQ_INT(amp_gemm(AMP_F32, false, false, INT64_C(1) << 40, 1, INT64_C(1) << 30, 1, a, INT64_C(1) << 30, b,
                          1, 0, c, 1),
                 AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_gemm(AMP_BF16, false, false, 1, INT64_MAX, 1, 1, a, 1, b, INT64_MAX, 0, c, INT64_MAX),
                 AMP_ERR_INVALID_ARGUMENT);
    /* NULL with elements to read or write */
    CHECK_EQ_INT(amp_gemm(AMP_F32, false, false, 2, 3, 4, 1, NULL, 4, b, 3, 0, c, 3), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_gemm(AMP_F16, false, false, 2, 3, 4, 1, a, 4, NULL, 3, 0, c, 3), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_gemm(AMP_BF16, false, false, 2, 3, 4, 1, a, 4, b, 3, 0, NULL, 3), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_gemm(AMP_F32, false, false, 2, 3, 0, 1, NULL, 0, NULL, 3, 0, c, 3), AMP_OK);
}

/* ---- the thread pool ---- */

typedef struct pool_probe {
    atomic_int runs[1000];
    atomic_int bad_thread_id;
    atomic_int nested_runs;
    int threads;
    bool nest;
} pool_probe;

/* a nested call runs serially as thread 0 of its own call (parallel.h), still inside the region */
static void count_nested(void *arg, int64_t task, int thread_id) {
    (void)task;
    pool_probe *p = arg;
    atomic_fetch_add(&p->nested_runs, 1);
    if (thread_id != 0 || !amp_parallel_in_region() || amp_parallel_max_threads() != 1)
        atomic_fetch_add(&p->bad_thread_id, 1);
}

static void count_task(void *arg, int64_t task, int thread_id) {
    pool_probe *p = arg;
    atomic_fetch_add(&p->runs[task], 1);
    if (thread_id < 0 || thread_id >= p->threads || !amp_parallel_in_region()) atomic_fetch_add(&p->bad_thread_id, 1);
    if (p->nest) amp_parallel_for(7, count_nested, p); /* serial inside a region: must not deadlock */
}

/* Two user threads multiplying at once: one gets the pool, the other runs serially. */
typedef struct concurrent_call {
    const fixture *f;
    float *c;
    int status;
} concurrent_call;

static void *concurrent_gemm(void *arg) {
    concurrent_call *call = arg;
    const problem *pr = &call->f->pr;
    for (int r = 0; r < 5 && call->status == AMP_OK; r++)
        call->status = amp_gemm(call->f->dt, pr->trans_a, pr->trans_b, pr->m, pr->n, pr->k, pr->alpha, call->f->a,
                                call->f->lda, call->f->b, call->f->ldb, 0.0f, call->c, call->f->ldc);
    return NULL;
}

void test_parallel_pool(void) {
    amp_set_num_threads(3);
    CHECK_EQ_INT(amp_get_num_threads(), 3);
    CHECK_EQ_INT(amp_parallel_max_threads(), 3);
    amp_set_num_threads(AMP_MAX_THREADS + 5);
    CHECK_EQ_INT(amp_get_num_threads(), AMP_MAX_THREADS);
    amp_set_num_threads(0);
    CHECK(amp_get_num_threads() >= 1);
    CHECK(!amp_parallel_in_region());

    static pool_probe probe;
    const int64_t task_counts[] = {1, 2, 3, 999, 1000};
    /* both schedules: static slices and tasks handed out dynamically; each task exactly once */
    for (int dynamic = 0; dynamic < 2; dynamic++)
    for (int threads = 1; threads <= 4; threads++) {
        for (int nest = 0; nest < 2; nest++) {
            for (size_t t = 0; t < sizeof task_counts / sizeof task_counts[0]; t++) {
                const int64_t n_tasks = task_counts[t];
                memset(&probe, 0, sizeof probe);
                probe.threads = threads;
                probe.nest = nest;
                amp_set_num_threads(threads);
                if (dynamic)
                    amp_parallel_for_dynamic(n_tasks, count_task, &probe);
                else
                    amp_parallel_for(n_tasks, count_task, &probe);
                int64_t wrong = 0;
                for (int64_t i = 0; i < 1000; i++) wrong += atomic_load(&probe.runs[i]) != (i < n_tasks);
                CHECK_MSG(wrong == 0, "%s, %d threads, %lld tasks: %lld tasks ran other than once",
                          dynamic ? "dynamic" : "static", threads, (long long)n_tasks, (long long)wrong);
                CHECK_EQ_INT(atomic_load(&probe.bad_thread_id), 0);
                CHECK_EQ_INT(atomic_load(&probe.nested_runs), nest ? 7 * n_tasks : 0);
            }
        }
    }
    CHECK(!amp_parallel_in_region());

    /* concurrent callers: each result must be the bits a lone call gives */
    test_rng rng = {harness_seed() ^ 0x77u};
    const problem pr = {.m = 140, .n = 150, .k = 160, .alpha = 1.0f}; /* 6.7 Mflop: big enough for 2 threads */
    fixture f;
    if (!fixture_init(&f, &pr, AMP_F32, &rng)) return;
    amp_set_num_threads(2);
    const size_t bytes = (size_t)(pr.m * f.ldc) * sizeof(float);
    float *want = malloc(bytes), *got[2] = {malloc(bytes), malloc(bytes)};
    if (CHECK(want && got[0] && got[1])) {
        CHECK_EQ_INT(amp_gemm(AMP_F32, false, false, pr.m, pr.n, pr.k, 1.0f, f.a, f.lda, f.b, f.ldb, 0.0f, want, f.ldc),
                     AMP_OK);
        concurrent_call calls[2] = {{&f, got[0], AMP_OK}, {&f, got[1], AMP_OK}};
        pthread_t th[2];
        bool started[2];
        for (int i = 0; i < 2; i++) started[i] = pthread_create(&th[i], NULL, concurrent_gemm, &calls[i]) == 0;
        for (int i = 0; i < 2; i++) {
            if (!CHECK(started[i])) continue;
            pthread_join(th[i], NULL);
            CHECK_EQ_INT(calls[i].status, AMP_OK);
            CHECK_MSG(memcmp(want, got[i], bytes) == 0, "concurrent caller %d got other bits", i);
        }
    }
    free(want), free(got[0]), free(got[1]);

    /* a forked child starts with no workers and must not wait for the parent's (alarm: a hang
     * becomes a failure instead of a stuck test run). ThreadSanitizer cannot start threads in the
     * child of a multithreaded process, so it skips this. */
#if defined(__SANITIZE_THREAD__)
#define GEMM_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GEMM_TEST_TSAN 1
#endif
#endif
#if defined(GEMM_TEST_TSAN)
    harness_note("ThreadSanitizer build: fork test skipped");
    const pid_t child = -2;
#else
    fflush(stdout);
    const pid_t child = fork();
#endif
    if (child == 0) {
        alarm(20);
        float *c = malloc((size_t)(pr.m * f.ldc) * sizeof(float));
        const int st = c ? amp_gemm(AMP_F32, false, false, pr.m, pr.n, pr.k, 1.0f, f.a, f.lda, f.b, f.ldb, 0.0f, c,
                                    f.ldc)
                         : AMP_ERR_OUT_OF_MEMORY;
        _exit(st == AMP_OK ? 0 : 1);
    }
    int wstatus = 0;
    if (child != -2 && CHECK(child > 0) && CHECK(waitpid(child, &wstatus, 0) == child))
        CHECK_MSG(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0, "amp_gemm in a forked child: wait status %d",
                  wstatus);
    fixture_free(&f);
    amp_set_num_threads(0);
}
