/* amp_gemm_direct_f32 (src/gemm/gemm_direct.h): on every path this CPU runs, either it declines
 * (returns false, C untouched) or its product is amp_gemm's on the same arguments bit for bit, for
 * every operand layout (A by rows or by columns, B by rows or packed from columns), partial tiles in
 * m and n, several k blocks (k > kc), and it is within a double-precision oracle's bound (so the two
 * cannot agree on a wrong answer). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/gemm/gemm_direct.h"
#include "harness.h"
#include "test_util.h"
#include "tests.h"

typedef struct direct_case {
    int64_t m, n, k;
    bool ta, tb; /* amp_gemm's flags: A stored k x m (by columns), B stored n x k */
    int64_t pad; /* extra elements per stored row */
    float alpha;
} direct_case;

static float draw(test_rng *rng) { return (float)((int)test_rng_below(rng, 2001) - 1000) / 512.0f; }

static void check_case(const direct_case *dc, test_rng *rng, const char *isa) {
    const int64_t m = dc->m, n = dc->n, k = dc->k;
    const int64_t lda = (dc->ta ? m : k) + dc->pad, ldb = (dc->tb ? k : n) + dc->pad, ldc = n + dc->pad;
    const int64_t a_rows = dc->ta ? k : m, b_rows = dc->tb ? n : k;
    float *a = malloc((size_t)(a_rows * lda + 1) * sizeof *a), *b = malloc((size_t)(b_rows * ldb + 1) * sizeof *b);
    float *c0 = malloc((size_t)(m * ldc + 1) * sizeof *c0), *c1 = malloc((size_t)(m * ldc + 1) * sizeof *c1);
    const int64_t ns = amp_gemm_direct_scratch(n, k);
    float *scratch = malloc((size_t)(ns > 0 ? ns : 1) * sizeof *scratch);
    if (!CHECK(a && b && c0 && c1 && scratch)) goto done;
    for (int64_t i = 0; i < a_rows * lda; i++) a[i] = draw(rng);
    for (int64_t i = 0; i < b_rows * ldb; i++) b[i] = draw(rng);
    for (int64_t i = 0; i < m * ldc; i++) c0[i] = c1[i] = 1234.5f; /* the pad between rows must survive */
    CHECK_EQ_INT(amp_gemm(AMP_F32, dc->ta, dc->tb, m, n, k, dc->alpha, a, lda, b, ldb, 0.0f, c0, ldc), AMP_OK);
    const bool ran = amp_gemm_direct_f32(m, n, k, dc->alpha, a, dc->ta ? 1 : lda, dc->ta ? lda : 1, b,
                                         dc->tb ? 1 : ldb, dc->tb ? ldb : 1, c1, ldc, scratch);
    CHECK_MSG(ran == amp_gemm_direct_available(), "%s: direct product ran=%d, available=%d", isa, ran,
              amp_gemm_direct_available());
    if (!ran) { /* declined: C untouched */
        for (int64_t i = 0; i < m * ldc; i++)
            if (!CHECK_MSG(c1[i] == 1234.5f, "%s: a declined direct product wrote C[%lld]", isa, (long long)i)) break;
        goto done;
    }
    int64_t bad = 0;
    for (int64_t i = 0; i < m && bad < 3; i++)
        for (int64_t j = 0; j < ldc && bad < 3; j++) {
            const float got = c1[i * ldc + j], want = c0[i * ldc + j];
            if (j >= n) { /* the pad */
                bad += !CHECK_MSG(got == 1234.5f, "%s: direct product wrote past n at (%lld, %lld)", isa,
                                  (long long)i, (long long)j);
                continue;
            }
            double ref = 0.0, mag = 0.0;
            for (int64_t p = 0; p < k; p++) {
                const double x = a[dc->ta ? p * lda + i : i * lda + p], y = b[dc->tb ? j * ldb + p : p * ldb + j];
                ref += x * y, mag += fabs(x * y);
            }
            ref *= dc->alpha, mag *= fabs(dc->alpha);
            bad += !CHECK_MSG(f32_bits(got) == f32_bits(want),
                              "%s %lldx%lldx%lld ta=%d tb=%d: C[%lld, %lld] direct %.9g, amp_gemm %.9g", isa,
                              (long long)m, (long long)n, (long long)k, dc->ta, dc->tb, (long long)i, (long long)j,
                              (double)got, (double)want);
            /* fp32 sums of k products: within k ulps of the sum of magnitudes, plus the alpha rounding */
            bad += !CHECK_MSG(fabs((double)got - ref) <= (double)(k + 2) * 0x1p-24 * mag + 1e-30,
                              "%s %lldx%lldx%lld: C[%lld, %lld] = %.9g, oracle %.9g", isa, (long long)m, (long long)n,
                              (long long)k, (long long)i, (long long)j, (double)got, ref);
        }
done:
    free(a), free(b), free(c0), free(c1), free(scratch);
}

void test_gemm_direct(void) {
    const direct_case cases[] = {
        /* the attention's products: S = Q K^T, O = P V, dV = P^T dO, dK = dS^T Q (partial last tiles) */
        {.m = 48, .n = 96, .k = 32, .ta = false, .tb = true, .pad = 5, .alpha = 0.176776695f},
        {.m = 32, .n = 32, .k = 128, .ta = false, .tb = false, .pad = 3, .alpha = 1.0f},
        {.m = 44, .n = 32, .k = 84, .ta = true, .tb = false, .pad = 1, .alpha = 0.125f},
        /* several B panels, full and partial, read in place and packed */
        {.m = 37, .n = 81, .k = 19, .ta = false, .tb = false, .pad = 0, .alpha = -0.5f},
        {.m = 25, .n = 81, .k = 19, .ta = true, .tb = true, .pad = 2, .alpha = 2.0f},
        /* k over one block (kc = 512 on the AVX-512 path): c = alpha s + c after the first */
        {.m = 13, .n = 64, .k = 1100, .ta = false, .tb = false, .pad = 1, .alpha = 1.0f},
        {.m = 12, .n = 40, .k = 600, .ta = true, .tb = true, .pad = 0, .alpha = 0.75f},
        /* tiny and degenerate: fewer rows than a tile, one column, k = 1 */
        {.m = 5, .n = 1, .k = 7, .ta = false, .tb = true, .pad = 0, .alpha = 1.0f},
        {.m = 1, .n = 33, .k = 1, .ta = true, .tb = false, .pad = 4, .alpha = 1.0f},
    };
    direct_case degenerate[] = {
        {.m = 7, .n = 9, .k = 0, .pad = 1, .alpha = 1.0f}, /* C = 0 */
        {.m = 7, .n = 9, .k = 5, .pad = 1, .alpha = 0.0f}, /* C = 0, A and B unread */
    };
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    test_rng rng = {seed ^ 0xD17EC7u};
    amp_isa isas[AMP_ISA_COUNT];
    const int n_isas = test_supported_isas(isas);
    for (int i = 0; i < n_isas; i++) {
        if (!test_isa_begin(isas[i])) continue;
        const char *isa = amp_isa_name(isas[i]);
        for (size_t q = 0; q < sizeof cases / sizeof cases[0]; q++) {
            check_case(&cases[q], &rng, isa);
        }
        for (size_t q = 0; q < sizeof degenerate / sizeof degenerate[0]; q++) check_case(&degenerate[q], &rng, isa);
        /* neither stride 1: declined */
        float x[4] = {1, 2, 3, 4}, c = 7.0f, scratch[64];
        CHECK(!amp_gemm_direct_f32(1, 1, 1, 1.0f, x, 2, 2, x, 1, 1, &c, 1, scratch) && c == 7.0f);
    }
    test_isa_end();
}
