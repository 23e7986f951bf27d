/* amp_gemm_fused (src/gemm/gemm_fused.h): the epilogue must give exactly the bits of amp_gemm
 * followed by a separate bias pass and amp_convert, on every path, for the normal and the transposed
 * (narrow C) orientation, several k blocks, the alpha == 0 shortcut, and any thread count. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"
#include "tests.h"
#include "../src/gemm/gemm_fused.h"

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
    for (size_t q = 0; q < sizeof cases / sizeof cases[0]; q++) {
        const fused_case *fc = &cases[q];
        const int64_t m = fc->m, n = fc->n, k = fc->k;
        const int64_t lda = fc->trans_a ? m : k, ldb = fc->trans_b ? k : n, ldc = n + 3, ldo = n + 1;
        void *a = malloc((size_t)(m * k + 1) * 4), *b = malloc((size_t)(k * n + 1) * 4);
        float *bias = malloc((size_t)n * sizeof *bias), *c0 = malloc((size_t)(m * ldc) * sizeof *c0);
        float *want = malloc((size_t)(m * ldc) * sizeof *want), *got = malloc((size_t)(m * ldc) * sizeof *got);
        void *out_want = malloc((size_t)(m * ldo) * 4), *out_got = malloc((size_t)(m * ldo) * 4);
        if (!CHECK(a && b && bias && c0 && want && got && out_want && out_got)) return;
        for (int64_t j = 0; j < n; j++) bias[j] = small_value(&rng);
        for (int64_t i = 0; i < m * ldc; i++) c0[i] = small_value(&rng);
        for (size_t d = 0; d < sizeof in_dts / sizeof in_dts[0]; d++) {
            const amp_dtype dt = in_dts[d];
            fill(dt, a, (size_t)(m * k), &rng);
            fill(dt, b, (size_t)(k * n), &rng);
            for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
                if (!test_isa_begin(isa)) continue;
                for (size_t o = 0; o < sizeof out_dts / sizeof out_dts[0]; o++) {
                    const amp_dtype odt = out_dts[o];
                    const size_t os = amp_dtype_size(odt);
                    memcpy(want, c0, (size_t)(m * ldc) * sizeof *want);
                    memset(out_want, 0xA5, (size_t)(m * ldo) * 4);
                    CHECK_EQ_INT(amp_gemm(dt, fc->trans_a, fc->trans_b, m, n, k, fc->alpha, a, lda, b, ldb, fc->beta,
                                          want, ldc),
                                 AMP_OK);
                    for (int64_t i = 0; i < m; i++) {
                        for (int64_t j = 0; j < n; j++) want[i * ldc + j] += bias[j];
                        amp_convert((char *)out_want + (size_t)(i * ldo) * os, odt, want + i * ldc, AMP_F32, (size_t)n);
                    }
                    for (int threads = 1; threads <= 3; threads++) {
                        amp_set_num_threads(threads);
                        memcpy(got, c0, (size_t)(m * ldc) * sizeof *got);
                        memset(out_got, 0xA5, (size_t)(m * ldo) * 4);
                        const amp_gemm_epilogue ep = {bias, out_got, odt, ldo};
                        CHECK_EQ_INT(amp_gemm_fused(dt, fc->trans_a, fc->trans_b, m, n, k, fc->alpha, a, lda, b, ldb,
                                                    fc->beta, got, ldc, &ep),
                                     AMP_OK);
                        CHECK_MSG(memcmp(got, want, (size_t)(m * ldc) * sizeof *got) == 0 &&
                                      memcmp(out_got, out_want, (size_t)(m * ldo) * os) == 0,
                                  "%s %s->%s %lldx%lldx%lld, %d threads: fused epilogue differs from the passes",
                                  amp_isa_name(isa), amp_dtype_name(dt), amp_dtype_name(odt), (long long)m,
                                  (long long)n, (long long)k, threads);
                    }
                    amp_set_num_threads(0);
                }
            }
            test_isa_end();
        }
        free(a), free(b), free(bias), free(c0), free(want), free(got), free(out_want), free(out_got);
    }
}
