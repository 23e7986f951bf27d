/* Autocast: regions, the policy table, output dtypes, fp32 parameter gradients, the cast cache and
 * its no-grad pitfall. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "reference_formats.h"
#include "tests.h"
#include "amp.h"

typedef struct {
    amp_ctx *ctx;
    amp_tensor *w, *b;
} model;

static model make_model(void) {
    model m = {0};
    amp_ctx_config cfg = amp_ctx_default_config();
    cfg.arena_bytes = 1 << 20;
    CHECK(amp_ctx_create(&cfg, &m.ctx) == AMP_OK);
    m.w = amp_param_new(m.ctx, "w", AMP_F32, 2, (const int64_t[]){3, 4});
    m.b = amp_param_new(m.ctx, "b", AMP_F32, 1, (const int64_t[]){3});
    CHECK(amp_ctx_alloc_params(m.ctx) == AMP_OK);
    for (int i = 0; i < 12; i++) ((float *)m.w->data)[i] = 0.25f * (float)(i % 5) - 0.5f;
    for (int i = 0; i < 3; i++) ((float *)m.b->data)[i] = 0.1f * (float)i;
    return m;
}

static amp_tensor *input(amp_ctx *ctx) {
    const float x[8] = {1, -2, 0.5f, 3, 0.25f, 1, -1, 2};
    return amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){2, 4}, x, AMP_F32);
}

void test_autocast_regions(void) {
    CHECK(!amp_autocast_enabled() && amp_autocast_dtype() == AMP_F32 && amp_autocast_depth() == 0);
    CHECK_EQ_INT(amp_autocast_exit(), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_autocast_enter(AMP_F8E4M3), AMP_ERR_UNSUPPORTED_DTYPE);
    CHECK(amp_autocast_depth() == 0);
    /* AMP_F32: a disabled region (one code path for every precision), left like any other */
    CHECK_EQ_INT(amp_autocast_enter(AMP_F32), AMP_OK);
    CHECK(!amp_autocast_enabled() && amp_autocast_dtype() == AMP_F32 && amp_autocast_depth() == 1);
    CHECK_EQ_INT(amp_autocast_exit(), AMP_OK);
    CHECK(amp_autocast_depth() == 0);
    CHECK_EQ_INT(amp_autocast_enter(AMP_BF16), AMP_OK);
    CHECK(amp_autocast_enabled() && amp_autocast_dtype() == AMP_BF16);
    CHECK_EQ_INT(amp_autocast_enter(AMP_F16), AMP_OK); /* a nested region may change the dtype */
    CHECK(amp_autocast_dtype() == AMP_F16 && amp_autocast_depth() == 2);
    CHECK_EQ_INT(amp_autocast_enter_disabled(), AMP_OK);
    CHECK(!amp_autocast_enabled() && amp_autocast_dtype() == AMP_F32 && amp_autocast_depth() == 3);
    CHECK_EQ_INT(amp_autocast_exit(), AMP_OK);
    CHECK(amp_autocast_dtype() == AMP_F16);
    CHECK_EQ_INT(amp_autocast_exit(), AMP_OK);
    CHECK(amp_autocast_dtype() == AMP_BF16);
    CHECK_EQ_INT(amp_autocast_exit(), AMP_OK);
    CHECK(!amp_autocast_enabled());
}

void test_autocast_policies_and_dtypes(void) {
    CHECK_EQ_INT(amp_autocast_load_policy_table(AMP_POLICY_TABLE_CUDA), AMP_OK);
    CHECK(amp_autocast_get_policy(AMP_OP_LINEAR) == AMP_POLICY_LOWER);
    CHECK(amp_autocast_get_policy(AMP_OP_SOFTMAX) == AMP_POLICY_FP32);
    CHECK(amp_autocast_get_policy(AMP_OP_RELU) == AMP_POLICY_NONE);
    CHECK(amp_autocast_get_policy(AMP_OP_ADD) == AMP_POLICY_PROMOTE);
    CHECK(amp_autocast_get_policy(AMP_OP_MEAN) == AMP_POLICY_FP32);
    CHECK(amp_autocast_pytorch_policy(AMP_POLICY_TABLE_CUDA, AMP_OP_MEAN) == AMP_POLICY_NONE);
    CHECK(strlen(amp_autocast_policy_note(AMP_OP_MEAN)) > 0 && strlen(amp_autocast_policy_note(AMP_OP_LINEAR)) == 0);
    CHECK_STR_EQ(amp_cast_policy_name(AMP_POLICY_PROMOTE), "promote");
    CHECK_EQ_INT(amp_autocast_set_policy(AMP_OP_COUNT, AMP_POLICY_NONE), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_autocast_set_policy(AMP_OP_CAST, AMP_POLICY_LOWER), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_autocast_set_policy(AMP_OP_RESHAPE, AMP_POLICY_FP32), AMP_ERR_INVALID_ARGUMENT);

    const amp_dtype lows[2] = {AMP_BF16, AMP_F16};
    for (int d = 0; d < 2; d++) {
        model m = make_model();
        amp_tensor *x = input(m.ctx);
        amp_autocast_enter(lows[d]);
        amp_tensor *h = amp_linear(m.ctx, x, m.w, m.b);   /* lower */
        amp_tensor *r = amp_relu(m.ctx, h);                /* none: stays low */
        amp_tensor *s = amp_softmax(m.ctx, r, 1);          /* fp32 */
        amp_tensor *sum = amp_add(m.ctx, r, s);            /* promote: low + f32 = f32 */
        amp_tensor *e = amp_exp(m.ctx, r);                 /* fp32 */
        const int32_t y[2] = {0, 2};
        amp_tensor *loss = amp_cross_entropy(m.ctx, r, y); /* fp32 */
        amp_autocast_exit();
        CHECK_MSG(amp_ctx_status(m.ctx) == AMP_OK, "%s", amp_ctx_error(m.ctx));
        if (!loss) break;
        CHECK(h->dtype == lows[d] && h->compute_dtype == lows[d] && h->op == AMP_OP_LINEAR);
        CHECK(r->dtype == lows[d] && r->compute_dtype == lows[d]);
        CHECK(s->dtype == AMP_F32 && s->compute_dtype == AMP_F32);
        CHECK(sum->dtype == AMP_F32);
        CHECK(e->dtype == AMP_F32);
        CHECK(loss->dtype == AMP_F32 && loss->compute_dtype == AMP_F32);
        /* Outside the region ops run in their inputs' dtype again. */
        amp_tensor *h2 = amp_linear(m.ctx, x, m.w, m.b);
        CHECK(h2->dtype == AMP_F32 && h2->compute_dtype == AMP_F32);
        /* Backward: parameter gradients are fp32 (the casts' backward converts them) and nonzero. */
        CHECK_EQ_INT(amp_backward(m.ctx, loss, NULL), AMP_OK);
        CHECK(m.w->grad->dtype == AMP_F32);
        float gsum = 0;
        for (int i = 0; i < 12; i++) gsum += ((float *)m.w->grad->data)[i] * ((float *)m.w->grad->data)[i];
        CHECK(gsum > 0);
        amp_ctx_free(m.ctx);
    }

    /* Runtime policy changes: linear in fp32 inside a bf16 region. */
    model m = make_model();
    CHECK_EQ_INT(amp_autocast_set_policy(AMP_OP_LINEAR, AMP_POLICY_FP32), AMP_OK);
    amp_autocast_enter(AMP_BF16);
    amp_tensor *h = amp_linear(m.ctx, amp_cast(m.ctx, input(m.ctx), AMP_BF16), m.w, m.b);
    CHECK(h && h->dtype == AMP_F32);
    /* The CPU table: softmax unlisted, so a bf16 input stays bf16. */
    amp_autocast_load_policy_table(AMP_POLICY_TABLE_CPU);
    amp_tensor *hb = amp_linear(m.ctx, input(m.ctx), m.w, m.b);
    amp_tensor *s = amp_softmax(m.ctx, hb, 1);
    CHECK(hb && hb->dtype == AMP_BF16 && s && s->dtype == AMP_BF16);
    /* A disabled sub-region runs in fp32. */
    amp_autocast_enter_disabled();
    amp_tensor *hf = amp_linear(m.ctx, input(m.ctx), m.w, m.b);
    CHECK(hf && hf->dtype == AMP_F32);
    amp_autocast_exit();
    amp_autocast_exit();
    amp_autocast_load_policy_table(AMP_POLICY_TABLE_CUDA);
    amp_ctx_free(m.ctx);
}

void test_autocast_cast_cache(void) {
    model m = make_model();
    unsigned long long hits0, stores0, hits, stores;
    amp_autocast_cache_stats(&hits0, &stores0);
    amp_autocast_enter(AMP_BF16);
    amp_tensor *x = input(m.ctx);
    amp_tensor *h1 = amp_linear(m.ctx, x, m.w, NULL);
    amp_tensor *h2 = amp_linear(m.ctx, x, m.w, NULL);
    amp_autocast_cache_stats(&hits, &stores);
    /* w cast once and reused; x (not a leaf requiring grad) is cast each time, uncached */
    CHECK_EQ_INT(stores - stores0, 1);
    CHECK_EQ_INT(hits - hits0, 1);
    /* The cache holds w's bf16 copy: its elements x 2 bytes. */
    CHECK_EQ_INT((int)amp_autocast_cache_bytes(), (int)(amp_tensor_numel(m.w) * 2));
    amp_autocast_exit();
    CHECK_EQ_INT((int)amp_autocast_cache_bytes(), 0);
    /* A new outermost region starts with an empty cache. */
    amp_autocast_enter(AMP_BF16);
    amp_linear(m.ctx, x, m.w, NULL);
    amp_autocast_cache_stats(&hits, &stores);
    CHECK_EQ_INT(stores - stores0, 2);
    amp_autocast_exit();
    amp_tensor *loss = amp_sum_all(m.ctx, amp_add(m.ctx, h1, h2));
    CHECK_EQ_INT(amp_backward(m.ctx, loss, NULL), AMP_OK);
    /* d/dw sum(x w^T) twice: both uses reach w through the one cached cast */
    float g0 = ((float *)m.w->grad->data)[0];
    CHECK_MSG(g0 == 2.0f * (1.0f + 0.25f), "dL/dw[0][0] = %g, want 2.5", (double)g0);

    /* PyTorch's pitfall (pytorch#65766): a cast first made under no-grad must not be reused under grad. */
    amp_ctx_reset(m.ctx);
    amp_zero_grad(m.ctx);
    amp_autocast_enter(AMP_BF16);
    bool was = amp_set_grad_enabled(m.ctx, false);
    amp_linear(m.ctx, input(m.ctx), m.w, NULL); /* e.g. an evaluation pass inside the region */
    amp_set_grad_enabled(m.ctx, was);
    amp_tensor *y = amp_linear(m.ctx, input(m.ctx), m.w, NULL);
    amp_autocast_exit();
    CHECK(y && y->requires_grad);
    CHECK_EQ_INT(amp_backward(m.ctx, amp_sum_all(m.ctx, y), NULL), AMP_OK);
    CHECK_MSG(((float *)m.w->grad->data)[0] == 1.25f, "w got gradient %g after a no-grad cast, want 1.25",
              (double)((float *)m.w->grad->data)[0]);

    /* The cache can be turned off. */
    amp_autocast_set_cache_enabled(false);
    amp_autocast_cache_stats(&hits0, &stores0);
    amp_autocast_enter(AMP_BF16);
    amp_linear(m.ctx, input(m.ctx), m.w, NULL);
    amp_linear(m.ctx, input(m.ctx), m.w, NULL);
    amp_autocast_exit();
    amp_autocast_cache_stats(&hits, &stores);
    CHECK(hits == hits0 && stores == stores0);
    amp_autocast_set_cache_enabled(true);
    amp_ctx_free(m.ctx);
}

void test_precision_presets(void) {
    const char *names[] = {"fp32",        "amp-fp16",    "amp-bf16", "fp16-master", "fp16-pure",  "bf16-pure",
                           "fp8-delayed", "fp8-current", "mxfp8",    "fp8-block",   "fp8-noscale"};
    CHECK_EQ_INT(sizeof names / sizeof names[0], AMP_PRECISION_COUNT);
    for (int i = 0; i < AMP_PRECISION_COUNT; i++) {
        amp_precision p;
        CHECK_EQ_INT(amp_precision_from_name(names[i], &p), AMP_OK);
        CHECK_EQ_INT(p, i);
        const amp_precision_info *info = amp_precision_get_info(p);
        CHECK(info && strcmp(info->name, names[i]) == 0 && strlen(info->summary) > 0);
    }
    amp_precision p;
    CHECK_EQ_INT(amp_precision_from_name("fp8", &p), AMP_ERR_INVALID_ARGUMENT);
    CHECK(amp_precision_get_info(AMP_PRECISION_COUNT) == NULL);
    /* The facts the presets encode (Apex O1/O2/O3 and PyTorch AMP). */
    const amp_precision_info *o1 = amp_precision_get_info(AMP_PRECISION_AMP_FP16);
    CHECK(o1->param_dtype == AMP_F32 && o1->autocast_dtype == AMP_F16 && o1->dynamic_scaling && !o1->master_weights);
    const amp_precision_info *bf = amp_precision_get_info(AMP_PRECISION_AMP_BF16);
    CHECK(bf->autocast_dtype == AMP_BF16 && !bf->dynamic_scaling);
    const amp_precision_info *o2 = amp_precision_get_info(AMP_PRECISION_FP16_MASTER);
    CHECK(o2->param_dtype == AMP_F16 && o2->master_weights && o2->batch_norm_fp32 && o2->dynamic_scaling);
    const amp_precision_info *o3 = amp_precision_get_info(AMP_PRECISION_FP16_PURE);
    CHECK(o3->param_dtype == AMP_F16 && !o3->master_weights && !o3->dynamic_scaling && !o3->batch_norm_fp32);
    /* the fp8 presets are amp-bf16 plus a recipe for the Linear GEMMs, in amp_fp8_recipe's order */
    for (int i = AMP_PRECISION_FP8_DELAYED; i <= AMP_PRECISION_FP8_NOSCALE; i++) {
        const amp_precision_info *f = amp_precision_get_info((amp_precision)i);
        CHECK(f->fp8 && f->fp8_recipe == (amp_fp8_recipe)(i - AMP_PRECISION_FP8_DELAYED) && f->param_dtype == AMP_F32 &&
              f->autocast_dtype == AMP_BF16 && !f->dynamic_scaling && !f->master_weights);
    }
    CHECK(!bf->fp8 && !o1->fp8);
}

/* ---- PyTorch's CPU autocast, op by op (tests/fixtures/autocast_cpu_dtypes.txt) ---- */

static amp_tensor *act(amp_ctx *ctx, amp_dtype dt, int ndim, const int64_t *shape) {
    amp_tensor *t = amp_tensor_zeros(ctx, dt, ndim, shape);
    if (t) /* nonzero, positive values: log and the norms stay finite */
        for (int64_t i = 0; i < amp_tensor_numel(t); i++) {
            const float v = 0.5f + 0.125f * (float)(i % 7);
            amp_convert((char *)t->data + i * (int64_t)amp_dtype_size(dt), dt, &v, AMP_F32, 1);
        }
    return t;
}

/* Runs the op the fixture names, on inputs of dtype dt and fp32 parameters, as the generator did. */
static amp_tensor *run_named_op(amp_ctx *ctx, const char *op, amp_dtype dt) {
#define X(...) act(ctx, dt, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__})
#define W(...) act(ctx, AMP_F32, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__})
    static const int32_t targets[4] = {0, 1, 2, 3}, ids[2] = {0, 2};
    if (!strcmp(op, "add")) return amp_add(ctx, X(2, 3), X(2, 3));
    if (!strcmp(op, "mul")) return amp_mul(ctx, X(2, 3), X(2, 3));
    if (!strcmp(op, "concat")) return amp_concat(ctx, (amp_tensor *const[]){X(2, 3), X(2, 3)}, 2, 1);
    if (!strcmp(op, "matmul")) return amp_matmul(ctx, X(2, 3), X(3, 4));
    if (!strcmp(op, "linear")) return amp_linear(ctx, X(2, 3), W(4, 3), W(4));
    if (!strcmp(op, "relu")) return amp_relu(ctx, X(2, 3));
    if (!strcmp(op, "gelu")) return amp_gelu(ctx, X(2, 3));
    if (!strcmp(op, "tanh")) return amp_tanh(ctx, X(2, 3));
    if (!strcmp(op, "sigmoid")) return amp_sigmoid(ctx, X(2, 3));
    if (!strcmp(op, "exp")) return amp_exp(ctx, X(2, 3));
    if (!strcmp(op, "log")) return amp_log(ctx, X(2, 3));
    if (!strcmp(op, "pow")) return amp_pow(ctx, X(2, 3), 2.0f);
    if (!strcmp(op, "sum")) return amp_sum(ctx, X(2, 3), 1, false);
    if (!strcmp(op, "mean")) return amp_mean(ctx, X(2, 3), 1, false);
    if (!strcmp(op, "softmax")) return amp_softmax(ctx, X(2, 3), 1);
    if (!strcmp(op, "log_softmax")) return amp_log_softmax(ctx, X(2, 3), 1);
    if (!strcmp(op, "cross_entropy")) return amp_cross_entropy(ctx, X(4, 5), targets);
    if (!strcmp(op, "mse_loss")) return amp_mse_loss(ctx, X(2, 3), X(2, 3));
    if (!strcmp(op, "layer_norm")) return amp_layer_norm(ctx, X(2, 3), W(3), W(3), 1e-5f);
    if (!strcmp(op, "conv2d")) return amp_conv2d(ctx, X(1, 2, 5, 5), W(3, 2, 3, 3), W(3), 1, 1);
    if (!strcmp(op, "max_pool2d")) return amp_max_pool2d(ctx, X(1, 2, 4, 4), 2, 2);
    if (!strcmp(op, "avg_pool2d")) return amp_avg_pool2d(ctx, X(1, 2, 4, 4), 2, 2);
    if (!strcmp(op, "embedding")) return amp_embedding(ctx, X(4, 3), ids, 1, (const int64_t[]){2});
    if (!strcmp(op, "attention")) return amp_causal_attention(ctx, X(1, 2, 4, 3), X(1, 2, 4, 3), X(1, 2, 4, 3));
#undef X
#undef W
    return NULL;
}

void test_autocast_vs_pytorch_cpu(void) {
    const char *dir = getenv("AMP_FIXTURE_DIR");
    char path[512];
    snprintf(path, sizeof path, "%s/autocast_cpu_dtypes.txt", dir && *dir ? dir : "tests/fixtures");
    FILE *f = fopen(path, "r");
    if (!CHECK_MSG(f != NULL, "cannot open %s", path)) return;
    amp_ctx *ctx = NULL;
    CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK);
    amp_autocast_load_policy_table(AMP_POLICY_TABLE_CPU);
    char line[256];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char op[32], ac[8], in[8], want[8];
        if (!CHECK_MSG(sscanf(line, "%31s %7s %7s %7s", op, ac, in, want) == 4, "bad line: %s", line)) continue;
        amp_dtype acd, ind, wantd;
        if (!CHECK(amp_dtype_from_name(ac, &acd) == AMP_OK && amp_dtype_from_name(in, &ind) == AMP_OK &&
                   amp_dtype_from_name(want, &wantd) == AMP_OK))
            continue;
        amp_ctx_reset(ctx);
        amp_autocast_enter(acd);
        amp_tensor *out = run_named_op(ctx, op, ind);
        amp_autocast_exit();
        if (CHECK_MSG(out != NULL, "%s under %s autocast with %s inputs failed: %s", op, ac, in, amp_ctx_error(ctx)))
            CHECK_MSG(out->dtype == wantd, "%s under %s autocast with %s inputs: amp gives %s, PyTorch %s", op, ac, in,
                      amp_dtype_name(out->dtype), want);
        amp_ctx_clear_error(ctx);
        cases++;
    }
    fclose(f);
    amp_autocast_load_policy_table(AMP_POLICY_TABLE_CUDA);
    harness_note("%d op/dtype cases from %s", cases, path);
    CHECK(cases >= 96);
    amp_ctx_free(ctx);
}

/* The cast's backward hands a 16-bit gradient to an fp32 input: a new gradient is every element's exact
 * decode (the reference decoder's bits, infinities, -0 and subnormals included), an existing one takes
 * the decoded values added in fp32 (IEEE adds done here). Every pattern but the NaNs (the seed's way
 * in through amp_backward does not keep their payloads), which become -0 or +0. Long enough for the
 * threads to split the pass. */
void test_cast_backward_gradients(void) {
    enum { N = 300007 };
    const amp_dtype dts[2] = {AMP_F16, AMP_BF16};
    uint16_t *seed = malloc(N * sizeof *seed), *seed2 = malloc(N * sizeof *seed2);
    uint32_t *first = malloc(N * sizeof *first);
    if (!CHECK(seed && seed2 && first)) goto done;
    for (int d = 0; d < 2; d++) {
        const amp_dtype dt = dts[d];
        amp_ctx *ctx = NULL;
        if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) continue;
        amp_tensor *x = amp_tensor_zeros(ctx, AMP_F32, 1, (const int64_t[]){N});
        amp_tensor_set_requires_grad(x, true);
        for (uint32_t i = 0; i < N; i++) {
            const uint16_t a = (uint16_t)((i * 2654435761u) >> 16);
            seed[i] = ref_is_nan(dt, a) ? (uint16_t)(a & 0x8000u) : a; /* a seed's NaN payload is not kept */
            const uint16_t b = (uint16_t)((i * 40503u + 7u) & 0xffffu);
            seed2[i] = ref_is_nan(dt, b) ? (uint16_t)(b & 0x8000u) : b;
        }
        amp_tensor *y = amp_cast(ctx, x, dt);
        amp_tensor *s1 = amp_tensor_from(ctx, dt, 1, (const int64_t[]){N}, seed, dt);
        if (CHECK(y && s1) && CHECK(amp_backward(ctx, y, s1) == AMP_OK) && CHECK(x->grad && x->grad->dtype == AMP_F32)) {
            memcpy(first, x->grad->data, N * sizeof *first);
            int bad = 0;
            for (uint32_t i = 0; i < N && bad < 5; i++)
                if (first[i] != ref_decode(dt, seed[i]))
                    bad++, CHECK_MSG(false, "%s: grad[%u] = 0x%08x for 0x%04x, want 0x%08x", amp_dtype_name(dt), i,
                                     first[i], seed[i], ref_decode(dt, seed[i]));
        }
        amp_tensor *y2 = amp_cast(ctx, x, dt);
        amp_tensor *s2 = amp_tensor_from(ctx, dt, 1, (const int64_t[]){N}, seed2, dt);
        if (CHECK(y2 && s2) && CHECK(amp_backward(ctx, y2, s2) == AMP_OK)) {
            const uint32_t *g = x->grad->data;
            int bad = 0;
            for (uint32_t i = 0; i < N && bad < 5; i++) {
                float a, b, sum;
                const uint32_t db = ref_decode(dt, seed2[i]);
                memcpy(&a, &first[i], sizeof a);
                memcpy(&b, &db, sizeof b);
                sum = a + b;
                uint32_t want;
                memcpy(&want, &sum, sizeof want);
                if (g[i] != want)
                    bad++, CHECK_MSG(false, "%s: grad[%u] = 0x%08x after adding 0x%04x, want 0x%08x", amp_dtype_name(dt),
                                     i, g[i], seed2[i], want);
            }
        }
        amp_ctx_free(ctx);
    }
done:
    free(seed);
    free(seed2);
    free(first);
}
