/* relu on fp16/bf16 (src/ops/unary.c): the bit-selection fast path against its reference twin (decode
 * to fp32, select, round back; what AMP_ISA=ref runs), forward and backward, on all 2^16 input
 * patterns with gradients drawn from all patterns too (NaNs, infinities, subnormals, both zeros):
 * the bits must be identical. */
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "harness.h"
#include "tests.h"

enum { N = 65536 };

/* relu forward and backward on x = all patterns, seed g; writes y and dx bits */
static int run_relu(amp_dtype dt, const uint16_t *g, uint16_t *y, uint16_t *dx) {
    amp_ctx *ctx = NULL;
    if (amp_ctx_create(NULL, &ctx) != AMP_OK) return -1;
    int rc = -1;
    amp_tensor *x = amp_tensor_new(ctx, dt, 1, (const int64_t[]){N});
    amp_tensor *seed = amp_tensor_new(ctx, dt, 1, (const int64_t[]){N});
    if (x && seed) {
        uint16_t *xb = x->data;
        for (int i = 0; i < N; i++) xb[i] = (uint16_t)i;
        memcpy(seed->data, g, sizeof(uint16_t) * N);
        amp_tensor_set_requires_grad(x, true);
        amp_tensor *out = amp_relu(ctx, x);
        if (out && amp_backward(ctx, out, seed) == AMP_OK && x->grad && x->grad->dtype == dt) {
            memcpy(y, out->data, sizeof(uint16_t) * N);
            memcpy(dx, x->grad->data, sizeof(uint16_t) * N);
            rc = 0;
        }
    }
    amp_ctx_free(ctx);
    return rc;
}

void test_relu_bits(void) {
    /* the fast path runs on any non-reference path: take the best this CPU has, whatever AMP_ISA says */
    const amp_isa was = amp_isa_active();
    const amp_isa best = amp_isa_supported(AMP_ISA_AVX512) ? AMP_ISA_AVX512
                         : amp_isa_supported(AMP_ISA_AVX2) ? AMP_ISA_AVX2
                                                           : AMP_ISA_REF;
    if (best == AMP_ISA_REF) {
        harness_note("relu_bits: only the reference path on this CPU");
        CHECK(true);
        return;
    }
    uint16_t *g = malloc(sizeof(uint16_t) * N * 5);
    if (!CHECK(g)) return;
    uint16_t *y0 = g + N, *d0 = g + 2 * N, *y1 = g + 3 * N, *d1 = g + 4 * N;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < N; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        g[i] = (uint16_t)(s >> 48);
    }
    const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    for (int d = 0; d < 2; d++) {
        amp_isa_set(AMP_ISA_REF);
        const int r0 = run_relu(dts[d], g, y0, d0);
        amp_isa_set(best);
        const int r1 = run_relu(dts[d], g, y1, d1);
        amp_isa_set(was);
        if (!CHECK(r0 == 0 && r1 == 0)) continue;
        int bad = 0, first = -1;
        for (int i = 0; i < N; i++)
            if (y0[i] != y1[i] || d0[i] != d1[i]) bad++, first = first < 0 ? i : first;
        CHECK_MSG(bad == 0, "relu %s: %d of 65536 patterns differ from the reference (first x = 0x%04x: y %04x vs %04x, dx %04x vs %04x)",
                  amp_dtype_name(dts[d]), bad, first < 0 ? 0 : first, first < 0 ? 0 : y0[first], first < 0 ? 0 : y1[first],
                  first < 0 ? 0 : d0[first], first < 0 ? 0 : d1[first]);
    }
    amp_isa_set(was);
    free(g);
}
