/* Block scaling (amp_fp8_block_quantize / _dequantize: 1x128 and 128x1 tiles, 128x128 blocks) against a
 * double-precision reference written here, for 1x128, 128x128 and 128x1 tiles: per tile the amax (NaNs skipped), the scale 2^floor(log2(
 * fp8_max / amax)) (1 for an all-zero or infinite tile, 2^127 past FLT_MAX), the payload encoded by
 * reference_formats.c from x * scale, and the scale_inv 1 / scale; partial tiles at the edges. */
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "amp.h"
#include "harness.h"
#include "reference_formats.h"
#include "test_util.h"
#include "tests.h"

static double ref_scale(double amax, amp_dtype d) {
    const double fmax = d == AMP_F8E4M3 ? 448.0 : 57344.0;
    if (amax == 0.0 || isinf(amax)) return 1.0;
    const double q = fmax / amax;
    if (q >= ldexp(1.0, 128)) return ldexp(1.0, 127); /* fp32 quotient inf -> FLT_MAX -> 2^127 */
    int e;
    frexp(q, &e);
    return ldexp(1.0, e - 1);
}

typedef struct shape_case {
    size_t rows, cols;
} shape_case;

static void fill(float *x, size_t rows, size_t cols, test_rng *rng) {
    for (size_t r = 0; r < rows; r++) {
        const int row_exp = (int)test_rng_below(rng, 80) - 40; /* rows of very different magnitudes */
        for (size_t c = 0; c < cols; c++) {
            const uint32_t k = test_rng_below(rng, 200);
            float v = ldexpf((float)((int)test_rng_below(rng, 1u << 20) - (1 << 19)) / (1 << 19), row_exp);
            if (k == 0) v = NAN;
            else if (k == 1) v = (test_rng_below(rng, 2) ? 1 : -1) * INFINITY;
            else if (k == 2) v = f32_from_bits(test_rng_below(rng, 1u << 23));
            x[r * cols + c] = v;
        }
        if (r % 7 == 3)
            for (size_t c = 0; c < cols; c++) x[r * cols + c] = 0.0f; /* all-zero rows */
    }
}

static void check_shape(const float *x, size_t rows, size_t cols, amp_dtype d, amp_fp8_block_shape shape,
                        uint8_t *q, float *sinv, float *back) {
    /* tile height and width, and tiles per row of tiles */
    const size_t th = shape == AMP_FP8_BLOCK_1X128 ? 1 : 128, tw = shape == AMP_FP8_BLOCK_128X1 ? 1 : 128;
    const size_t ct = (cols + tw - 1) / tw;
    CHECK_EQ_INT(amp_fp8_block_scale_count(rows, cols, shape), ((rows + th - 1) / th) * ct);
    if (!CHECK(amp_fp8_block_quantize(q, sinv, x, rows, cols, d, shape) == AMP_OK)) return;
    CHECK_EQ_INT(amp_fp8_block_dequantize(back, q, sinv, rows, cols, d, shape), AMP_OK);
    /* the tiles' amaxes, NaNs skipped (a comparison with NaN is false) */
    double *amax = calloc(amp_fp8_block_scale_count(rows, cols, shape) + 1, sizeof *amax);
    if (!CHECK(amax != NULL)) return;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            const double a = fabs((double)x[r * cols + c]);
            double *m = &amax[(r / th) * ct + c / tw];
            if (a > *m) *m = a;
        }
    int bad = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            const size_t tile = (r / th) * ct + c / tw;
            const double scale = ref_scale(amax[tile], d);
            const unsigned want_q = ref_encode(d, (float)((double)x[r * cols + c] * scale), true);
            const float want_inv = (float)(1.0 / scale);
            const double v = ref_decode_value(d, want_q);
            const float want_back = (float)(v * (double)want_inv);
            const bool ok = q[r * cols + c] == want_q && f32_bits(sinv[tile]) == f32_bits(want_inv) &&
                            (isnan(v) ? isnan(back[r * cols + c]) : f32_bits(back[r * cols + c]) == f32_bits(want_back));
            if (!ok && bad++ < 4)
                CHECK_MSG(0, "%s %zux%zu tile %zu (%zu,%zu): x=%g q 0x%02X want 0x%02X, scale_inv %g want %g, back %g want %g",
                          shape == AMP_FP8_BLOCK_1X128 ? "1x128" : shape == AMP_FP8_BLOCK_128X128 ? "128x128" : "128x1", rows, cols, tile, r, c,
                          x[r * cols + c], q[r * cols + c], want_q, sinv[tile], want_inv, back[r * cols + c], want_back);
        }
    free(amax);
    if (bad == 0) harness_pass(1);
}

void test_fp8_block_scaling(void) {
    static const shape_case shapes[] = {{1, 1}, {3, 200}, {130, 257}, {128, 128}, {256, 384}, {1, 1000}, {129, 1}};
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    enum { MAX = 256 * 384 };
    float *x = malloc(MAX * sizeof *x), *back = malloc(MAX * sizeof *back), *sinv = malloc(MAX * sizeof *sinv);
    uint8_t *q = malloc(MAX);
    if (!CHECK(x && back && sinv && q)) goto done;
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!test_isa_begin(isa)) continue;
        test_rng rng = {seed};
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            fill(x, shapes[s].rows, shapes[s].cols, &rng);
            for (int di = 0; di < 2; di++)
                for (int sh = 0; sh < 3; sh++)
                    check_shape(x, shapes[s].rows, shapes[s].cols, di ? AMP_F8E5M2 : AMP_F8E4M3,
                                (amp_fp8_block_shape)sh, q, sinv, back);
        }
    }
    test_isa_end();
    /* 128x1 tiles of x are the 1x128 tiles of x's transpose: the same bytes and scales, transposed */
    {
        enum { R = 300, C = 70 };
        test_rng rng = {seed ^ 0x5EEDu};
        fill(x, R, C, &rng);
        float *xt = malloc(R * C * sizeof *xt), *st = malloc(R * C * sizeof *st);
        uint8_t *qt = malloc(R * C);
        if (CHECK(xt && st && qt)) {
            for (size_t r = 0; r < R; r++)
                for (size_t c = 0; c < C; c++) xt[c * R + r] = x[r * C + c];
            CHECK(amp_fp8_block_quantize(q, sinv, x, R, C, AMP_F8E4M3, AMP_FP8_BLOCK_128X1) == AMP_OK);
            CHECK(amp_fp8_block_quantize(qt, st, xt, C, R, AMP_F8E4M3, AMP_FP8_BLOCK_1X128) == AMP_OK);
            size_t bad = 0;
            for (size_t r = 0; r < R; r++)
                for (size_t c = 0; c < C; c++) bad += q[r * C + c] != qt[c * R + r];
            for (size_t t = 0; t < (R + 127) / 128; t++)
                for (size_t c = 0; c < C; c++) bad += f32_bits(sinv[t * C + c]) != f32_bits(st[c * ((R + 127) / 128) + t]);
            CHECK_MSG(bad == 0, "128x1 vs transposed 1x128: %zu differences", bad);
        }
        free(xt);
        free(st);
        free(qt);
    }
    /* a tile of tiny values: the scale 2^127 (fp8_max / amax overflows fp32) */
    x[0] = f32_from_bits(1);
    x[1] = -f32_from_bits(3);
    CHECK_EQ_INT(amp_fp8_block_quantize(q, sinv, x, 1, 2, AMP_F8E4M3, AMP_FP8_BLOCK_1X128), AMP_OK);
    CHECK(sinv[0] == ldexpf(1.0f, -127));
    /* arguments */
    CHECK_EQ_INT(amp_fp8_block_quantize(q, sinv, x, 2, 2, AMP_F32, AMP_FP8_BLOCK_1X128), AMP_ERR_UNSUPPORTED_DTYPE);
    CHECK_EQ_INT(amp_fp8_block_quantize(q, sinv, x, 2, 2, AMP_F8E4M3, (amp_fp8_block_shape)3), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_fp8_block_quantize(q, NULL, x, 2, 2, AMP_F8E4M3, AMP_FP8_BLOCK_1X128), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_fp8_block_quantize(q, sinv, x, SIZE_MAX, 2, AMP_F8E4M3, AMP_FP8_BLOCK_1X128), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_fp8_block_quantize(NULL, NULL, NULL, 0, 5, AMP_F8E4M3, AMP_FP8_BLOCK_128X128), AMP_OK);
    CHECK_EQ_INT(amp_fp8_block_dequantize(back, NULL, sinv, 2, 2, AMP_F8E4M3, AMP_FP8_BLOCK_1X128), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_fp8_block_scale_count(5, 5, (amp_fp8_block_shape)9), 0);
done:
    free(x);
    free(back);
    free(sinv);
    free(q);
}
