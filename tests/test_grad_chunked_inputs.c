/* Input gradients that gelu's, add's and layer_norm's backward write where they go a chunk of
 * 16384 values at a time (src/ops/grad_sink_gemm.h), against the same graph run on slices of rows
 * small enough to be one chunk each: every op here is row-wise, so each element's gradient must be
 * the same bits either way, and a wrong chunk offset or length shows as a mismatch. Cases: x's
 * first gradient (fp32: computed straight into it; bf16: rounded chunk by chunk), and x read twice
 * so the op's gradient is added into one that exists (fp32: added chunk by chunk; bf16: the staged
 * fallback through amp_grad_accumulate). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "harness.h"
#include "tests.h"

/* 72 x 512 = 36864 values: three chunks of 16384 (two full, one partial); layer_norm's blocks are
 * 32 rows. A slice of 8 rows is 4096 values, one chunk. */
enum { GC_ROWS = 72, GC_COLS = 512, GC_SLICE = 8 };

static float gc_rand(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (float)(*s >> 40) / (float)(1 << 24) * 4.0f - 2.0f;
}

/* sum(op(x) * r), plus gelu(x) * r when x is read twice (its first gradient then comes from add) */
static amp_tensor *gc_loss(amp_ctx *ctx, int kind, bool twice, amp_tensor *x, amp_tensor *r) {
    amp_tensor *y = kind == 0 ? amp_gelu(ctx, x) : kind == 1 ? amp_add(ctx, x, r) : amp_layer_norm(ctx, x, NULL, NULL, 1e-5f);
    if (twice) y = amp_add(ctx, y, x);
    return amp_sum_all(ctx, amp_mul(ctx, y, r));
}

/* x's gradient (rows x GC_COLS, as fp32) into out; false on any error */
static bool gc_grad(int kind, bool twice, amp_dtype dt, const float *xv, const float *rv, int64_t rows, float *out) {
    amp_ctx *ctx = NULL;
    if (amp_ctx_create(NULL, &ctx) != AMP_OK) return false;
    const int64_t shape[2] = {rows, GC_COLS};
    amp_tensor *x = amp_tensor_from(ctx, dt, 2, shape, xv, AMP_F32);
    amp_tensor *r = amp_tensor_from(ctx, dt, 2, shape, rv, AMP_F32);
    if (x) amp_tensor_set_requires_grad(x, true);
    amp_tensor *loss = x && r ? gc_loss(ctx, kind, twice, x, r) : NULL;
    const bool ok = loss && amp_backward_scaled(ctx, loss, 1.0f) == AMP_OK && x->grad &&
                    amp_tensor_read(x->grad, out, AMP_F32) == AMP_OK;
    amp_ctx_free(ctx);
    return ok;
}

void test_grad_chunked_inputs(void) {
    const int64_t n = (int64_t)GC_ROWS * GC_COLS;
    float *xv = malloc(sizeof(float) * (size_t)n), *rv = malloc(sizeof(float) * (size_t)n);
    float *whole = malloc(sizeof(float) * (size_t)n), *sliced = malloc(sizeof(float) * (size_t)n);
    if (!CHECK(xv && rv && whole && sliced)) goto out;
    const uint64_t seed = 0x6a09e667f3bcc909ull;
    harness_note("seed %#llx", (unsigned long long)seed);
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) xv[i] = gc_rand(&s), rv[i] = gc_rand(&s);
    static const char *const names[3] = {"gelu", "add", "layer_norm"};
    const amp_dtype dts[2] = {AMP_F32, AMP_BF16};
    for (int kind = 0; kind < 3; kind++)
        for (int d = 0; d < 2; d++)
            for (int twice = 0; twice < 2; twice++) {
                bool ok = gc_grad(kind, twice, dts[d], xv, rv, GC_ROWS, whole);
                for (int64_t r0 = 0; ok && r0 < GC_ROWS; r0 += GC_SLICE) {
                    const int64_t off = r0 * GC_COLS;
                    ok = gc_grad(kind, twice, dts[d], xv + off, rv + off, GC_SLICE, sliced + off);
                }
                if (!CHECK_MSG(ok, "%s %s%s: backward failed", names[kind], amp_dtype_name(dts[d]),
                               twice ? " read twice" : ""))
                    continue;
                int64_t differ = 0, first = -1;
                for (int64_t i = 0; i < n; i++)
                    if (memcmp(&whole[i], &sliced[i], sizeof(float)) != 0) differ++, first = first < 0 ? i : first;
                CHECK_MSG(differ == 0, "%s %s%s: %lld of %lld gradients differ from the sliced run's (first at %lld)",
                          names[kind], amp_dtype_name(dts[d]), twice ? " read twice" : "", (long long)differ,
                          (long long)n, (long long)first);
            }
out:
    free(xv);
    free(rv);
    free(whole);
    free(sliced);
}
