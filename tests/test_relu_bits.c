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

/* relu forward and backward of n values of dtype dt (bits in xs), seed g (bits); writes the bits of y
 * and dx. 0, or -1 when something failed. */
static int run_relu(amp_dtype dt, int64_t n, const void *xs, const void *g, void *y, void *dx) {
    amp_ctx *ctx = NULL;
    if (amp_ctx_create(NULL, &ctx) != AMP_OK) return -1;
    int rc = -1;
    const size_t bytes = (size_t)n * amp_dtype_size(dt);
    amp_tensor *x = amp_tensor_new(ctx, dt, 1, (const int64_t[]){n});
    amp_tensor *seed = amp_tensor_new(ctx, dt, 1, (const int64_t[]){n});
    if (x && seed) {
        memcpy(x->data, xs, bytes);
        memcpy(seed->data, g, bytes);
        amp_tensor_set_requires_grad(x, true);
        amp_tensor *out = amp_relu(ctx, x);
        if (out && amp_backward(ctx, out, seed) == AMP_OK && x->grad && x->grad->dtype == dt) {
            memcpy(y, out->data, bytes);
            memcpy(dx, x->grad->data, bytes);
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
    uint16_t *g = malloc(sizeof(uint16_t) * N * 6);
    if (!CHECK(g)) return;
    uint16_t *y0 = g + N, *d0 = g + 2 * N, *y1 = g + 3 * N, *d1 = g + 4 * N, *xs = g + 5 * N;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < N; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        g[i] = (uint16_t)(s >> 48);
        xs[i] = (uint16_t)i;
    }
    const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    for (int d = 0; d < 2; d++) {
        amp_isa_set(AMP_ISA_REF);
        const int r0 = run_relu(dts[d], N, xs, g, y0, d0);
        amp_isa_set(best);
        const int r1 = run_relu(dts[d], N, xs, g, y1, d1);
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

/* fp32: the same comparison on 2^20 patterns spread over all 2^32 (a stride of 4093 from a seeded
 * start, plus both zeros, infinities, NaNs with payloads and the subnormal/normal boundary). */
enum { N32 = 1 << 20 };

void test_relu_bits_f32(void) {
    const amp_isa was = amp_isa_active();
    const amp_isa best = amp_isa_supported(AMP_ISA_AVX512) ? AMP_ISA_AVX512
                         : amp_isa_supported(AMP_ISA_AVX2) ? AMP_ISA_AVX2
                                                           : AMP_ISA_REF;
    if (best == AMP_ISA_REF) {
        harness_note("relu_bits_f32: only the reference path on this CPU");
        CHECK(true);
        return;
    }
    uint32_t *xs = malloc(sizeof(uint32_t) * N32 * 6);
    if (!CHECK(xs)) return;
    uint32_t *g = xs + N32, *y0 = g + N32, *d0 = y0 + N32, *y1 = d0 + N32, *d1 = y1 + N32;
    const uint64_t seed = 0x2545F4914F6CDD1Dull;
    harness_note("seed 0x%016llx", (unsigned long long)seed);
    uint64_t s = seed;
    const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u,
                                0x7F800001u, 0xFFBFFFFFu, 0x00000001u, 0x80000001u, 0x007FFFFFu, 0x00800000u,
                                0x3F800000u, 0xBF800000u, 0x7F7FFFFFu, 0xFF7FFFFFu};
    const int n_special = (int)(sizeof special / sizeof special[0]);
    const uint32_t start = (uint32_t)(seed >> 32);
    for (int i = 0; i < N32; i++) {
        xs[i] = i < n_special ? special[i] : start + (uint32_t)i * 4093u;
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        g[i] = (i % 97 == 0) ? 0x7FC01234u : (uint32_t)(s >> 32); /* NaN gradients with a payload too */
    }
    amp_isa_set(AMP_ISA_REF);
    const int r0 = run_relu(AMP_F32, N32, xs, g, y0, d0);
    amp_isa_set(best);
    const int r1 = run_relu(AMP_F32, N32, xs, g, y1, d1);
    amp_isa_set(was);
    if (CHECK(r0 == 0 && r1 == 0)) {
        int bad = 0, first = -1;
        for (int i = 0; i < N32; i++)
            if (y0[i] != y1[i] || d0[i] != d1[i]) bad++, first = first < 0 ? i : first;
        CHECK_MSG(bad == 0, "relu f32: %d of %d patterns differ from the reference (first x = 0x%08x: y %08x vs %08x, dx %08x vs %08x)",
                  bad, N32, first < 0 ? 0 : xs[first], first < 0 ? 0 : y0[first], first < 0 ? 0 : y1[first],
                  first < 0 ? 0 : d0[first], first < 0 ? 0 : d1[first]);
    }
    free(xs);
}
