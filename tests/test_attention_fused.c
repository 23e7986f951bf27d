/* amp_causal_self_attention (src/ops/attention.c, the gpt model's attention on
 * its fused qkv projection) against its reference twin: narrow into q, k, v,
 * reshape and transpose into heads, amp_causal_attention, transpose and reshape
 * back. Forward output and the gradient of qkv, in f32, f16 and bf16, several
 * shapes (one head, odd lengths). The same GEMMs on the same values and the
 * same single rounding of each gradient: the values must be equal (compared as
 * numbers, so +0 and -0 match), over several causal blocks of rows too (T
 * over 48). Shape errors are reported, not crashed on. Neither op keeps the
 * attention probabilities for backward (its B H T^2 elements dominate the
 * memory of long contexts; the backward recomputes them): the arena grows by
 * little more than the output over the forward. */
#include <math.h>
#include <stdlib.h>

#include "../src/ops/op_util.h"
#include "harness.h"
#include "tests.h"

static float urand(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (float)(*s >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

/* how many of n values differ between tensors a and b (read as fp32); n + 1
 * when unreadable */
static int64_t n_differ(const amp_tensor *a, const amp_tensor *b, float *ta, float *tb, int64_t n) {
    if (!a || !b || amp_tensor_read(a, ta, AMP_F32) != AMP_OK || amp_tensor_read(b, tb, AMP_F32) != AMP_OK)
        return n + 1;
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++) d += !(ta[i] == tb[i] || (isnan(ta[i]) && isnan(tb[i])));
    return d;
}

static void check_case(int64_t B, int64_t T, int64_t C, int64_t NH, amp_dtype dt) {
    const int64_t D = C / NH, n = B * T * C;
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    float *qkv_v = malloc(sizeof(float) * (size_t)(3 * n)), *part = malloc(sizeof(float) * (size_t)n);
    float *rv = malloc(sizeof(float) * (size_t)n), *ta = malloc(sizeof(float) * (size_t)(3 * n));
    float *tb = malloc(sizeof(float) * (size_t)(3 * n));
    if (!CHECK(qkv_v && part && rv && ta && tb)) goto out;
    uint64_t s = 0x51ed270b27f1ull + (uint64_t)(B * 1000 + T * 100 + C * 10 + NH);
    for (int64_t i = 0; i < 3 * n; i++) qkv_v[i] = 2.0f * urand(&s);
    for (int64_t i = 0; i < n; i++) rv[i] = urand(&s);
    const int64_t shape3[3] = {B, T, C}, heads4[4] = {B, T, NH, D};
    amp_tensor *R = amp_tensor_from(ctx, dt, 3, shape3, rv, AMP_F32);

    /* fused */
    amp_tensor *qkv = amp_tensor_from(ctx, dt, 3, (const int64_t[]){B, T, 3 * C}, qkv_v, AMP_F32);
    if (qkv) amp_tensor_set_requires_grad(qkv, true);
    amp_tensor *o1 = amp_causal_self_attention(ctx, qkv, NH);
    amp_tensor *l1 = o1 ? amp_sum_all(ctx, amp_mul(ctx, o1, R)) : NULL;
    if (!CHECK_MSG(l1 && amp_backward_scaled(ctx, l1, 1.0f) == AMP_OK, "fused: %s", amp_ctx_error(ctx))) goto out;
    CHECK(o1->op == AMP_OP_ATTENTION && o1->dtype == dt && o1->ndim == 3 && o1->shape[2] == C);

    /* the twin: q, k, v as leaves of their own, split into heads and merged back
     * by views */
    amp_tensor *leaves[3], *hd[3];
    for (int i = 0; i < 3; i++) {
        for (int64_t r = 0; r < B * T; r++)
            for (int64_t c = 0; c < C; c++) part[r * C + c] = qkv_v[r * 3 * C + i * C + c];
        leaves[i] = amp_tensor_from(ctx, dt, 3, shape3, part, AMP_F32);
        if (leaves[i]) amp_tensor_set_requires_grad(leaves[i], true);
        hd[i] = amp_transpose(ctx, amp_reshape(ctx, leaves[i], 4, heads4), 1, 2);
    }
    amp_tensor *att = amp_causal_attention(ctx, hd[0], hd[1], hd[2]);
    amp_tensor *o2 = amp_reshape(ctx, amp_transpose(ctx, att, 1, 2), 3, shape3);
    amp_tensor *l2 = o2 ? amp_sum_all(ctx, amp_mul(ctx, o2, R)) : NULL;
    if (!CHECK_MSG(l2 && amp_backward_scaled(ctx, l2, 1.0f) == AMP_OK, "twin: %s", amp_ctx_error(ctx))) goto out;

    const int64_t dout = n_differ(o1, o2, ta, tb, n);
    int64_t dgrad = 0;
    if (!qkv->grad || amp_tensor_read(qkv->grad, ta, AMP_F32) != AMP_OK) dgrad = 3 * n + 1;
    for (int i = 0; i < 3 && dgrad == 0; i++) {
        if (!leaves[i]->grad || amp_tensor_read(leaves[i]->grad, tb, AMP_F32) != AMP_OK) {
            dgrad = 3 * n + 1;
            break;
        }
        for (int64_t r = 0; r < B * T; r++)
            for (int64_t c = 0; c < C; c++) dgrad += ta[r * 3 * C + i * C + c] != tb[r * C + c];
    }
    CHECK_MSG(dout == 0 && dgrad == 0,
              "self_attention %s B=%lld T=%lld C=%lld heads=%lld: %lld outputs, "
              "%lld gradients differ",
              amp_dtype_name(dt), (long long)B, (long long)T, (long long)C, (long long)NH, (long long)dout,
              (long long)dgrad);
out:
    free(qkv_v), free(part), free(rv), free(ta), free(tb);
    amp_ctx_free(ctx);
}

static void check_error(int64_t C3, int64_t NH) {
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    amp_tensor *qkv = amp_tensor_zeros(ctx, AMP_F32, 3, (const int64_t[]){2, 3, C3});
    CHECK(qkv && amp_causal_self_attention(ctx, qkv, NH) == NULL && amp_ctx_status(ctx) != AMP_OK);
    amp_ctx_free(ctx);
}

/* The arena's growth over one forward of each op with grad on, at a shape where
 * the probabilities (B H T^2) are 16 times the output (B T C): at most the
 * output, its node and tensor headers, far below one copy of them. */
static void check_saves_no_probs(amp_dtype dt) {
    const int64_t B = 2, T = 256, C = 64, NH = 4, D = C / NH, n = B * T * C;
    const size_t es = amp_dtype_size(dt), probs = (size_t)(B * NH * T * T) * es;
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    amp_tensor *qkv = amp_tensor_zeros(ctx, dt, 3, (const int64_t[]){B, T, 3 * C});
    amp_tensor *q = amp_tensor_zeros(ctx, dt, 4, (const int64_t[]){B, NH, T, D});
    if (!CHECK(qkv && q)) goto out;
    amp_tensor_set_requires_grad(qkv, true);
    amp_tensor_set_requires_grad(q, true);
    size_t before = amp_ctx_arena_used(ctx);
    amp_tensor *o1 = amp_causal_self_attention(ctx, qkv, NH);
    const size_t grew1 = amp_ctx_arena_used(ctx) - before;
    before = amp_ctx_arena_used(ctx);
    amp_tensor *o2 = amp_causal_attention(ctx, q, q, q);
    const size_t grew2 = amp_ctx_arena_used(ctx) - before;
    const size_t limit = (size_t)n * es + 4096;
    CHECK_MSG(o1 && o2 && grew1 <= limit && grew2 <= limit,
              "%s: the forwards grew the arena by %zu and %zu bytes (output %zu, probabilities %zu)",
              amp_dtype_name(dt), grew1, grew2, (size_t)n * es, probs);
out:
    amp_ctx_free(ctx);
}

void test_attention_fused(void) {
    const amp_dtype dts[3] = {AMP_F32, AMP_F16, AMP_BF16};
    for (int d = 0; d < 3; d++) {
        check_case(2, 5, 8, 2, dts[d]);
        check_case(1, 19, 24, 3, dts[d]);
        check_case(3, 7, 6, 1, dts[d]);
        check_case(2, 40, 64, 4, dts[d]); /* D = 16 */
        check_case(2, 100, 64, 2, dts[d]); /* the gpt model's head width, D = 32: one B panel in place */
        check_case(1, 61, 160, 2, dts[d]); /* D = 80: two panels in place and a partial one */
        check_case(2, 100, 16, 2, dts[d]); /* several causal blocks of rows, the last one short */
        check_case(1, 144, 6, 1, dts[d]);  /* blocks that end at T */
    }
    for (int d = 0; d < 3; d++) check_saves_no_probs(dts[d]);
    check_error(10, 1); /* not 3C */
    check_error(12, 3); /* C = 4 not a multiple of 3 heads */
    check_error(12, 0);
}
