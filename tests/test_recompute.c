/* Activation recomputation (amp/recompute.h): the gpt and gpt2 with recompute on give the same loss
 * and parameter gradients, bit for bit, as with it off (the same ops in the same order), in fp32 and
 * under bf16 and fp16 autocast with a loss scale; the backward-gradient hook sees the same op outputs
 * in the same order and the gradient-ready hook fires for the same parameters in the same order; the
 * arena's high-water mark drops. A region with dropout recomputes the same mask (the random streams
 * are restored); the recomputation runs under the forward's autocast state, not the backward's, and
 * leaves the autocast state as it was. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "harness.h"
#include "tests.h"

enum { TRACE_MAX = 4096 };

typedef struct trace {
    int n_act, n_ready;
    int ops[TRACE_MAX];
    int64_t numel[TRACE_MAX];
    uint32_t first_bits[TRACE_MAX]; /* the gradient's first element as f32 bits */
    size_t ready[TRACE_MAX];
} trace;

static void act_hook(amp_ctx *ctx, const amp_tensor *out, const amp_tensor *grad, void *user) {
    (void)ctx;
    trace *t = user;
    if (t->n_act >= TRACE_MAX) return;
    t->ops[t->n_act] = (int)out->op;
    t->numel[t->n_act] = amp_tensor_numel(grad);
    const float g0 = amp_tensor_get(grad, 0);
    memcpy(&t->first_bits[t->n_act], &g0, sizeof g0);
    t->n_act++;
}

static void ready_hook(amp_ctx *ctx, size_t index, void *user) {
    (void)ctx;
    trace *t = user;
    if (t->n_ready < TRACE_MAX) t->ready[t->n_ready++] = index;
}

typedef struct run_out {
    float loss[2];
    unsigned char *grads; /* the last step's gradient buffer */
    size_t grad_bytes;
    size_t arena_peak;
    trace tr;
} run_out;

/* Two steps (forward, loss, backward with `seed`) of a tiny model of `kind`, under autocast to `ac`
 * (AMP_F32: none), with recompute on or off; the hooks record the second step's backward. */
static bool run_model(amp_model_kind kind, amp_dtype ac, float seed, bool recompute, run_out *o) {
    memset(o, 0, sizeof *o);
    amp_model_config mc = amp_model_default_config(kind);
    mc.vocab = 61, mc.context = 12, mc.hidden = 32, mc.layers = 3, mc.heads = 4, mc.recompute = recompute;
    if (kind == AMP_MODEL_GPT2) mc.vocab_padded = 64;
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    bool ok = CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK) && CHECK(amp_model_create(ctx, &mc, &m) == AMP_OK) &&
              CHECK(amp_ctx_alloc_params(ctx) == AMP_OK) && CHECK(amp_model_init(m, 7) == AMP_OK);
    enum { B = 3 };
    int32_t tokens[B * 12], targets[B * 12];
    for (int step = 0; step < 2 && ok; step++) {
        for (int i = 0; i < B * 12; i++) {
            tokens[i] = (int32_t)((i * 7 + step * 5 + i / 5) % 61);
            targets[i] = (int32_t)((i * 11 + step + 3) % 61);
        }
        amp_ctx_reset(ctx);
        amp_zero_grad(ctx);
        if (step == 1) {
            amp_ctx_set_backward_grad_hook(ctx, act_hook, &o->tr);
            amp_ctx_set_grad_ready_hook(ctx, ready_hook, &o->tr);
        }
        if (ac != AMP_F32) amp_autocast_enter(ac);
        amp_tensor *logits = amp_model_forward(m, ctx, NULL, tokens, B, true);
        amp_tensor *loss = logits ? amp_cross_entropy(ctx, logits, targets) : NULL;
        if (ac != AMP_F32) amp_autocast_exit();
        ok = CHECK_MSG(loss != NULL, "forward: %s", amp_ctx_error(ctx)) &&
             CHECK_MSG(amp_backward_scaled(ctx, loss, seed) == AMP_OK, "backward: %s", amp_ctx_error(ctx));
        if (ok) o->loss[step] = amp_tensor_get(loss, 0);
    }
    if (ok) {
        const void *g = amp_ctx_grad_memory(ctx, &o->grad_bytes);
        o->grads = malloc(o->grad_bytes);
        if (o->grads) memcpy(o->grads, g, o->grad_bytes);
        o->arena_peak = amp_ctx_arena_peak(ctx);
    }
    amp_model_free(m);
    amp_ctx_free(ctx);
    return ok && o->grads;
}

static void compare_runs(const char *what, amp_model_kind kind, amp_dtype ac, float seed) {
    static run_out plain, re; /* large: not on the stack */
    if (run_model(kind, ac, seed, false, &plain) && run_model(kind, ac, seed, true, &re)) {
        for (int s = 0; s < 2; s++)
            CHECK_MSG(memcmp(&plain.loss[s], &re.loss[s], sizeof(float)) == 0, "%s: step %d loss %.9g vs %.9g", what,
                      s + 1, (double)plain.loss[s], (double)re.loss[s]);
        CHECK_MSG(plain.grad_bytes == re.grad_bytes && memcmp(plain.grads, re.grads, plain.grad_bytes) == 0,
                  "%s: the parameter gradients differ with recompute", what);
        CHECK_MSG(plain.tr.n_act == re.tr.n_act, "%s: the backward hook saw %d outputs, with recompute %d", what,
                  plain.tr.n_act, re.tr.n_act);
        bool same = plain.tr.n_act == re.tr.n_act && plain.tr.n_act > 0;
        for (int i = 0; same && i < plain.tr.n_act; i++)
            same = plain.tr.ops[i] == re.tr.ops[i] && plain.tr.numel[i] == re.tr.numel[i] &&
                   plain.tr.first_bits[i] == re.tr.first_bits[i];
        CHECK_MSG(same, "%s: the backward hook's sequence of op outputs differs", what);
        same = plain.tr.n_ready == re.tr.n_ready && plain.tr.n_ready > 0;
        for (int i = 0; same && i < plain.tr.n_ready; i++) same = plain.tr.ready[i] == re.tr.ready[i];
        CHECK_MSG(same, "%s: gradient-ready order differs (%d vs %d calls)", what, plain.tr.n_ready, re.tr.n_ready);
        CHECK_MSG(re.arena_peak < plain.arena_peak, "%s: arena peak %zu with recompute, %zu without", what,
                  re.arena_peak, plain.arena_peak);
        harness_note("%s: arena peak %zu -> %zu bytes", what, plain.arena_peak, re.arena_peak);
    }
    free(plain.grads), free(re.grads);
    plain.grads = re.grads = NULL;
}

void test_recompute_gpt_bitwise(void) {
    compare_runs("gpt fp32", AMP_MODEL_GPT, AMP_F32, 1.0f);
    compare_runs("gpt amp-bf16", AMP_MODEL_GPT, AMP_BF16, 1.0f);
    compare_runs("gpt amp-fp16, scale 2^16", AMP_MODEL_GPT, AMP_F16, 65536.0f);
    compare_runs("gpt2 fp32", AMP_MODEL_GPT2, AMP_F32, 1.0f);
    compare_runs("gpt2 amp-bf16", AMP_MODEL_GPT2, AMP_BF16, 1.0f);
    compare_runs("gpt2 amp-fp16, scale 2^16", AMP_MODEL_GPT2, AMP_F16, 65536.0f);
}

/* ---- a region with dropout and a linear: masks and autocast state ---------------------------- */

typedef struct region_user {
    amp_tensor *w;
    int calls;
    amp_dtype seen[4]; /* autocast dtype at each call (AMP_F32 when off) */
} region_user;

static amp_tensor *dropout_region(amp_ctx *ctx, amp_tensor *const *in, int n_in, void *user) {
    (void)n_in;
    region_user *u = user;
    if (u->calls < 4) u->seen[u->calls] = amp_autocast_enabled() ? amp_autocast_dtype() : AMP_F32;
    u->calls++;
    amp_tensor *h = amp_linear(ctx, in[0], u->w, NULL);
    h = amp_dropout(ctx, h, 0.5f, true);
    return amp_gelu(ctx, h);
}

/* Gradients of w and x through the region (recomputed or not) under bf16 autocast; returns false on
 * failure. gw/gx receive the gradients as f32. */
static bool dropout_grads(bool recompute, region_user *u, float *gw, float *gx, uint64_t *rng_after) {
    amp_ctx_config cc = amp_ctx_default_config();
    cc.seed = 5;
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(&cc, &ctx) == AMP_OK)) return false;
    u->w = amp_param_new(ctx, "w", AMP_F32, 2, (const int64_t[]){16, 16});
    bool ok = CHECK(amp_ctx_alloc_params(ctx) == AMP_OK);
    float wv[256], xv[64];
    for (int i = 0; i < 256; i++) wv[i] = (float)((i * 37) % 23 - 11) / 16.0f;
    for (int i = 0; i < 64; i++) xv[i] = (float)((i * 13) % 17 - 8) / 8.0f;
    if (ok) amp_tensor_write(u->w, wv, AMP_F32);
    amp_tensor *x = ok ? amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){4, 16}, xv, AMP_F32) : NULL;
    if (x) amp_tensor_set_requires_grad(x, true);
    amp_zero_grad(ctx);
    amp_autocast_enter(AMP_BF16);
    amp_tensor *y = !x ? NULL : recompute ? amp_recompute(ctx, dropout_region, &x, 1, u) : dropout_region(ctx, &x, 1, u);
    amp_tensor *loss = y ? amp_sum_all(ctx, amp_mul(ctx, y, y)) : NULL;
    amp_autocast_exit();
    ok = ok && CHECK_MSG(loss && amp_backward(ctx, loss, NULL) == AMP_OK, "%s", amp_ctx_error(ctx));
    CHECK_EQ_INT(amp_autocast_depth(), 0);
    CHECK(!amp_autocast_enabled());
    if (ok) {
        ok = CHECK(amp_tensor_read(u->w->grad, gw, AMP_F32) == AMP_OK) && CHECK(amp_tensor_read(x->grad, gx, AMP_F32) == AMP_OK);
        *rng_after = amp_ctx_random(ctx, 0);
    }
    amp_ctx_free(ctx);
    return ok;
}

void test_recompute_dropout_autocast(void) {
    region_user a = {0}, b = {0};
    static float gw[2][256], gx[2][64];
    uint64_t ra = 0, rb = 0;
    if (!dropout_grads(false, &a, gw[0], gx[0], &ra) || !dropout_grads(true, &b, gw[1], gx[1], &rb)) return;
    CHECK_EQ_INT(a.calls, 1);
    CHECK_EQ_INT(b.calls, 2); /* forward, and once more in backward */
    CHECK_MSG(b.seen[0] == AMP_BF16 && b.seen[1] == AMP_BF16,
              "the recomputation ran under %s autocast, the forward under %s", amp_dtype_name(b.seen[1]),
              amp_dtype_name(b.seen[0]));
    CHECK_MSG(memcmp(gw[0], gw[1], sizeof gw[0]) == 0, "the weight's gradient differs with recompute");
    CHECK_MSG(memcmp(gx[0], gx[1], sizeof gx[0]) == 0, "the input's gradient differs with recompute");
    CHECK_MSG(ra == rb, "the random streams after backward differ with recompute");
    int zeros = 0; /* the mask dropped some inputs' paths: a nonzero gradient that is not all-equal */
    for (int i = 0; i < 64; i++) zeros += gx[0][i] == 0.0f;
    CHECK(zeros < 64);
}

/* With grad mode off the function simply runs; misuse is refused with the context's error. */
void test_recompute_contract(void) {
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    region_user u = {0};
    u.w = amp_param_new(ctx, "w", AMP_F32, 2, (const int64_t[]){16, 16});
    CHECK(amp_ctx_alloc_params(ctx) == AMP_OK);
    amp_tensor *x = amp_tensor_new(ctx, AMP_F32, 2, (const int64_t[]){4, 16});
    const bool prev = amp_set_grad_enabled(ctx, false);
    amp_tensor *y = amp_recompute(ctx, dropout_region, &x, 1, &u);
    CHECK(y != NULL && y->grad_fn == NULL && u.calls == 1);
    amp_set_grad_enabled(ctx, prev);
    CHECK(amp_recompute(ctx, NULL, &x, 1, &u) == NULL);
    CHECK(amp_ctx_status(ctx) == AMP_ERR_INVALID_ARGUMENT);
    CHECK(strstr(amp_ctx_error(ctx), "amp_recompute") != NULL);
    amp_ctx_free(ctx);
}
