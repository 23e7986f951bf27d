/* Fused gradient accumulation (src/tensor/autograd.c): a bf16 gradient added into an fp32 one in one
 * pass (amp_grad_accumulate_grad, the cast's backward), and an fp32 gradient added into a bf16 one
 * with the decode and the add fused. Both against a scalar oracle of the unfused passes, bit for bit,
 * over every bf16 bit pattern (NaNs, infinities, signed zeros, subnormals) and an odd tail. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/tensor/autograd.h"
#include "amp.h"
#include "harness.h"
#include "tests.h"

enum { N = 65536 + 13 };

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

void test_grad_fused(void) {
    amp_ctx *ctx = NULL;
    uint16_t *h = malloc(N * sizeof *h), *hb = malloc(N * sizeof *hb);
    float *start = malloc(N * sizeof *start), *got = malloc(N * sizeof *got), *g = malloc(N * sizeof *g);
    if (!CHECK(h && hb && start && got && g) || !CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) goto out;
    for (int64_t i = 0; i < N; i++) {
        h[i] = (uint16_t)(i * 40503u); /* every pattern once in the first 65536 (odd multiplier) */
        start[i] = (float)((i * 37) % 101) / 8.0f - 6.0f;
        if (i % 97 == 0) start[i] = -0.0f;
        g[i] = (float)((i * 53) % 89) / 16.0f - 2.75f;
        if (i % 89 == 5) g[i] = -0.0f;
    }
    const int64_t shape[1] = {N};

    /* bf16 into fp32: the first gradient from start, then the bf16 one fused */
    amp_tensor *t = amp_tensor_from(ctx, AMP_F32, 1, shape, start, AMP_F32);
    amp_tensor *gb = amp_tensor_from(ctx, AMP_BF16, 1, shape, h, AMP_BF16);
    if (!CHECK(t && gb)) goto out;
    amp_tensor_set_requires_grad(t, true);
    if (!CHECK(amp_grad_accumulate(ctx, t, start) == AMP_OK) ||
        !CHECK(amp_grad_accumulate_grad(ctx, t, gb) == AMP_OK) || !CHECK(t->grad && t->grad->dtype == AMP_F32))
        goto out;
    memcpy(got, t->grad->data, N * sizeof *got);
    int64_t bad = 0;
    for (int64_t i = 0; i < N; i++) {
        float w = start[i]; /* the first gradient is a copy of start */
        w += amp_bf16_to_fp32(h[i]);
        if (f32_bits(got[i]) != f32_bits(w)) bad++;
    }
    CHECK(bad == 0);

    /* the first gradient of an fp32 tensor from a bf16 one (the staged path): decoded exactly */
    amp_tensor *t2 = amp_tensor_from(ctx, AMP_F32, 1, shape, start, AMP_F32);
    if (!CHECK(t2)) goto out;
    amp_tensor_set_requires_grad(t2, true);
    if (!CHECK(amp_grad_accumulate_grad(ctx, t2, gb) == AMP_OK) || !CHECK(t2->grad)) goto out;
    bad = 0;
    for (int64_t i = 0; i < N; i++)
        if (f32_bits(((const float *)t2->grad->data)[i]) != f32_bits(amp_bf16_to_fp32(h[i]))) bad++;
    CHECK(bad == 0);

    /* fp32 into bf16: decode + add fused, then one rounding */
    amp_tensor *tb = amp_tensor_from(ctx, AMP_BF16, 1, shape, h, AMP_BF16);
    if (!CHECK(tb)) goto out;
    amp_tensor_set_requires_grad(tb, true);
    if (!CHECK(amp_grad_accumulate_grad(ctx, tb, gb) == AMP_OK) || !CHECK(amp_grad_accumulate(ctx, tb, g) == AMP_OK) ||
        !CHECK(tb->grad && tb->grad->dtype == AMP_BF16))
        goto out;
    bad = 0;
    for (int64_t i = 0; i < N; i++) {
        const float acc = amp_bf16_to_fp32(h[i]) + g[i];
        if (!CHECK(amp_convert(&hb[i], AMP_BF16, &acc, AMP_F32, 1) == AMP_OK)) goto out;
        if (((const uint16_t *)tb->grad->data)[i] != hb[i]) bad++;
    }
    CHECK(bad == 0);
out:
    amp_ctx_free(ctx);
    free(h);
    free(hb);
    free(start);
    free(got);
    free(g);
}
