/* The models of include/amp/nn.h: parameter names, shapes and counts equal to PyTorch's state_dict
 * of the same architecture (tests/fixtures/nn_shapes_<model>.txt), the fp32 forward of each model at
 * reduced sizes equal to PyTorch's with the same weights (tests/fixtures/nn_<model>.txt; both written
 * by tests/fixtures/gen_nn_fixtures.py, which states the reduced sizes; gpt2's by gen_gpt2_fixtures.py),
 * logits shapes, deterministic
 * initialization, FLOP counts, argument errors, and a few SGD steps that lower the loss.
 *
 * Forward tolerance: max|amp - PyTorch| <= NN_FORWARD_FACTOR * 2^-24 * max|PyTorch| per model. Both
 * sides compute in fp32 with different summation orders and libm; the golden op tests measured up to
 * ~6 u per op, and these models measured 1.8 (lstm) to 5.7 (gpt) u against torch 2.15, so 64 leaves
 * room for other ISA paths. A semantic error (a wrong gate order, a swapped q/k/v block, a missing
 * bias, eps or scale) moves the logits by far more than 64 u (~4e-6 relative). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture_reader.h"
#include "harness.h"
#include "tests.h"

enum { NN_FORWARD_FACTOR = 64 };

static bool load(fixture *fx, const char *file) { return test_fixture_load(file, fx); }

static amp_ctx *new_ctx(void) {
    amp_ctx_config cc = amp_ctx_default_config();
    cc.arena_bytes = (size_t)4 << 20;
    amp_ctx *ctx = NULL;
    CHECK(amp_ctx_create(&cc, &ctx) == AMP_OK);
    return ctx;
}

/* The reduced configurations gen_nn_fixtures.py uses (SMALL there). */
static amp_model_config small_config(amp_model_kind kind) {
    amp_model_config c = amp_model_default_config(kind);
    switch (kind) {
    case AMP_MODEL_MLP:
        c.in_channels = 1, c.image_rows = 4, c.image_cols = 4, c.hidden = 8, c.classes = 3;
        break;
    case AMP_MODEL_CNN:
        c.in_channels = 1, c.image_rows = 8, c.image_cols = 8, c.conv1_channels = 3, c.conv2_channels = 4;
        c.kernel = 3, c.hidden = 8, c.classes = 3;
        break;
    case AMP_MODEL_LSTM:
        c.vocab = 7, c.embed = 5, c.hidden = 6, c.context = 4;
        break;
    default:
        c.vocab = 7, c.context = 5, c.hidden = 8, c.layers = 2, c.heads = 2;
        break;
    }
    return c;
}

/* ---- names, shapes and counts of the default models ---- */

void test_nn_default_shapes(void) {
    fixture *fx = calloc(1, sizeof *fx);
    if (!CHECK(fx != NULL)) return;
    for (int k = 0; k < AMP_MODEL_COUNT; k++) {
        amp_ctx *ctx = new_ctx();
        amp_model *m = NULL;
        amp_model_config cfg = amp_model_default_config((amp_model_kind)k);
        char file[64];
        snprintf(file, sizeof file, "nn_shapes_%s.txt", amp_model_kind_name((amp_model_kind)k));
        if (ctx && CHECK(amp_model_create(ctx, &cfg, &m) == AMP_OK) && load(fx, file)) {
            CHECK_EQ_INT(amp_model_num_tensors(m), fx->n_tensors);
            CHECK_EQ_INT(amp_ctx_num_params(ctx), fx->n_tensors);
            int64_t total = 0;
            for (int i = 0; i < fx->n_tensors && i < (int)amp_model_num_tensors(m); i++) {
                const fixture_tensor *want = &fx->tensors[i];
                const amp_tensor *t = amp_model_tensor(m, (size_t)i);
                CHECK_STR_EQ(t->name, want->name);
                bool same = t->ndim == want->numel;
                for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == want->ints[d];
                CHECK_MSG(same, "%s %s: shape differs from PyTorch's", file, want->name);
                CHECK(t->dtype == AMP_F32);
                int64_t n = 1;
                for (int d = 0; d < (int)want->numel; d++) n *= want->ints[d];
                total += n;
            }
            CHECK_EQ_INT(amp_model_num_params(m), total);
        }
        fixture_free(fx);
        amp_ctx_free(ctx);
        amp_model_free(m);
    }
    free(fx);
}

/* Counts by hand, as the contract states them. */
void test_nn_param_counts_and_flops(void) {
    /* mlp: 784*1024 + 1024 + 1024*1024 + 1024 + 1024*10 + 10 */
    const int64_t mlp_params = 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10;
    /* cnn: 32*1*25 + 32 + 64*32*25 + 64 + (64*7*7)*1024 + 1024 + 1024*10 + 10 */
    const int64_t cnn_params = 32 * 25 + 32 + 64 * 32 * 25 + 64 + 3136 * 1024 + 1024 + 1024 * 10 + 10;
    /* lstm (vocab 256): 256*64 + 1024*64 + 1024*256 + 2*1024 + 256*256 + 256 */
    const int64_t lstm_params = 256 * 64 + 1024 * 64 + 1024 * 256 + 2 * 1024 + 256 * 256 + 256;
    /* gpt (vocab 256): wte 256*128 + wpe 128*128 + 4 blocks of (12*128^2 + 13*128) + ln_f 2*128 + head 256*128 */
    const int64_t gpt_params = 256 * 128 + 128 * 128 + 4 * (12 * 128 * 128 + 13 * 128) + 2 * 128 + 256 * 128;
    /* gpt2 (124m, vocab 50257 padded to 50304, tied head): wte 50304*768 + wpe 1024*768 + 12 blocks +
     * ln_f; llm.c's train_gpt2.c reports num_parameters 124475904 for this model */
    const int64_t gpt2_params = 50304 * 768 + 1024 * 768 + 12 * (12 * 768 * 768 + 13 * 768) + 2 * 768;
    CHECK_EQ_INT(gpt2_params, 124475904);
    const int64_t want[AMP_MODEL_COUNT] = {mlp_params, cnn_params, lstm_params, gpt_params, gpt2_params};
    /* training FLOPs per sample: 3 * 2 * multiply-adds */
    const double flops[AMP_MODEL_COUNT] = {
        6.0 * (784.0 * 1024 + 1024.0 * 1024 + 1024.0 * 10),
        6.0 * (28.0 * 28 * 32 * 25 + 14.0 * 14 * 64 * 32 * 25 + 3136.0 * 1024 + 1024.0 * 10),
        6.0 * 64 * (4.0 * 256 * (64 + 256) + 256.0 * 256),
        6.0 * 128 * (4 * (12.0 * 128 * 128 + 2.0 * 128 * 128) + 128.0 * 256),
        6.0 * 1024 * (12 * (12.0 * 768 * 768 + 2.0 * 1024 * 768) + 768.0 * 50257), /* the head: V, not Vp */
    };
    for (int k = 0; k < AMP_MODEL_COUNT; k++) {
        amp_ctx *ctx = new_ctx();
        amp_model *m = NULL;
        amp_model_config cfg = amp_model_default_config((amp_model_kind)k);
        if (ctx && CHECK(amp_model_create(ctx, &cfg, &m) == AMP_OK)) {
            CHECK_EQ_INT(amp_model_num_params(m), want[k]);
            const double f = amp_model_flops_per_sample(m);
            CHECK_MSG(fabs(f - flops[k]) <= 1e-9 * flops[k], "%s: %.6g FLOPs, want %.6g",
                      amp_model_kind_name((amp_model_kind)k), f, flops[k]);
            /* what amp computes at batch 32: the lstm's input projection and its two gradient products
             * on the 256 embedding rows once per batch instead of on each of the 64 tokens */
            const double want_c = k == AMP_MODEL_LSTM
                                      ? 6.0 * (64 * (4.0 * 256 * 256 + 256.0 * 256) + 256.0 * 4 * 256 * 64 / 32)
                                      : flops[k];
            const double fc = amp_model_flops_computed_per_sample(m, 32);
            CHECK_MSG(fabs(fc - want_c) <= 1e-9 * want_c, "%s: %.6g computed FLOPs, want %.6g",
                      amp_model_kind_name((amp_model_kind)k), fc, want_c);
        }
        amp_ctx_free(ctx);
        amp_model_free(m);
    }
    amp_model_kind kind;
    CHECK(amp_model_kind_from_name("gpt", &kind) == AMP_OK && kind == AMP_MODEL_GPT);
    CHECK(amp_model_kind_from_name("rnn", &kind) == AMP_ERR_INVALID_ARGUMENT);
    CHECK_STR_EQ(amp_model_kind_name(AMP_MODEL_COUNT), "invalid");
    CHECK(amp_model_is_text(AMP_MODEL_LSTM) && !amp_model_is_text(AMP_MODEL_CNN));
}

/* ---- forward against PyTorch ---- */

void test_nn_forward_pytorch(void) {
    fixture *fx = calloc(1, sizeof *fx);
    if (!CHECK(fx != NULL)) return;
    for (int k = 0; k < AMP_MODEL_COUNT; k++) {
        const amp_model_kind kind = (amp_model_kind)k;
        char file[64];
        snprintf(file, sizeof file, "nn_%s.txt", amp_model_kind_name(kind));
        amp_ctx *ctx = new_ctx();
        amp_model *m = NULL;
        amp_model_config cfg = small_config(kind);
        if (!ctx || !load(fx, file) || !CHECK(amp_model_create(ctx, &cfg, &m) == AMP_OK) ||
            !CHECK(amp_ctx_alloc_params(ctx) == AMP_OK))
            goto next;
        int n_param_tensors = 0;
        for (int i = 0; i < fx->n_tensors; i++) n_param_tensors += !strncmp(fx->tensors[i].name, "param.", 6);
        CHECK_EQ_INT(amp_model_num_tensors(m), n_param_tensors);
        for (size_t i = 0; i < amp_model_num_tensors(m); i++) {
            amp_tensor *t = amp_model_tensor(m, i);
            char name[FIXTURE_MAX_NAME + 8];
            snprintf(name, sizeof name, "param.%s", t->name);
            const fixture_tensor *src = fixture_find(fx, name);
            if (!CHECK_MSG(src && src->numel == amp_tensor_numel(t), "%s: no %s of %lld values", file, name,
                           (long long)amp_tensor_numel(t)))
                goto next;
            CHECK(amp_tensor_write(t, src->values, AMP_F32) == AMP_OK);
        }
        amp_tensor *logits;
        int64_t batch;
        if (amp_model_is_text(kind)) {
            const fixture_tensor *tok = fixture_find(fx, "tokens");
            if (!CHECK(tok && tok->is_int && tok->ndim == 2 && tok->shape[1] == cfg.context)) goto next;
            batch = tok->shape[0];
            logits = amp_model_forward(m, ctx, NULL, tok->ints, batch, false);
        } else {
            const fixture_tensor *xs = fixture_find(fx, "input.x");
            if (!CHECK(xs && !xs->is_int)) goto next;
            batch = xs->shape[0];
            amp_tensor *x = amp_tensor_from(ctx, AMP_F32, xs->ndim, xs->shape, xs->values, AMP_F32);
            logits = amp_model_forward(m, ctx, x, NULL, batch, false);
        }
        const fixture_tensor *want = fixture_find(fx, "output.logits");
        if (!CHECK_MSG(logits != NULL, "%s: %s", file, amp_ctx_error(ctx)) || !CHECK(want != NULL)) goto next;
        CHECK_EQ_INT(logits->ndim, 2);
        CHECK_EQ_INT(logits->shape[0], want->shape[0]);
        CHECK_EQ_INT(logits->shape[1], want->shape[1]);
        if (amp_tensor_numel(logits) != want->numel) goto next;
        double max_ref = 0, max_err = 0;
        for (int64_t i = 0; i < want->numel; i++) {
            max_ref = fmax(max_ref, fabs(want->values[i]));
            max_err = fmax(max_err, fabs((double)amp_tensor_get(logits, i) - want->values[i]));
        }
        const double ratio = max_err / (ldexp(1.0, -24) * max_ref);
        harness_note("%s: max |amp - PyTorch| = %.3g u * max|logit|", amp_model_kind_name(kind), ratio);
        CHECK_MSG(ratio <= NN_FORWARD_FACTOR, "%s: logits differ from PyTorch's by %.3g u (limit %d)", file, ratio,
                  NN_FORWARD_FACTOR);
    next:
        fixture_free(fx);
        amp_ctx_free(ctx);
        amp_model_free(m);
    }
    free(fx);
}

/* ---- initialization ---- */

static bool init_bytes(amp_model_kind kind, uint64_t seed, unsigned char **out, size_t *bytes) {
    amp_ctx *ctx = new_ctx();
    amp_model *m = NULL;
    amp_model_config cfg = small_config(kind);
    bool ok = ctx && CHECK(amp_model_create(ctx, &cfg, &m) == AMP_OK) &&
              CHECK(amp_model_init(m, seed) == AMP_ERR_STATE); /* before allocation */
    if (ctx) amp_ctx_clear_error(ctx);
    ok = ok && CHECK(amp_ctx_alloc_params(ctx) == AMP_OK) && CHECK(amp_model_init(m, seed) == AMP_OK);
    if (ok) {
        const void *mem = amp_ctx_param_memory(ctx, bytes);
        *out = malloc(*bytes);
        ok = CHECK(*out != NULL);
        if (ok) memcpy(*out, mem, *bytes);
        /* the rules of amp_model_init, on the first layers */
        const amp_tensor *w = amp_model_tensor(m, 0);
        if (kind == AMP_MODEL_MLP) {
            const double bound = 1.0 / sqrt(16.0);
            double most = 0;
            for (int64_t i = 0; i < amp_tensor_numel(w); i++) most = fmax(most, fabs(amp_tensor_get(w, i)));
            CHECK_MSG(most <= bound && most > 0.5 * bound, "mlp 1.weight: max |w| %.4g, bound %.4g", most, bound);
        } else if (kind == AMP_MODEL_GPT) {
            const amp_tensor *ln = amp_model_tensor(m, 2), *ln_b = amp_model_tensor(m, 3);
            CHECK(amp_tensor_get(ln, 0) == 1.0f && amp_tensor_get(ln_b, 0) == 0.0f);
        }
    }
    amp_ctx_free(ctx);
    amp_model_free(m);
    return ok;
}

void test_nn_init_deterministic(void) {
    for (int k = 0; k < AMP_MODEL_COUNT; k++) {
        unsigned char *a = NULL, *b = NULL, *c = NULL;
        size_t na = 0, nb = 0, nc = 0;
        if (init_bytes((amp_model_kind)k, 42, &a, &na) && init_bytes((amp_model_kind)k, 42, &b, &nb) &&
            init_bytes((amp_model_kind)k, 43, &c, &nc)) {
            CHECK_MSG(na == nb && !memcmp(a, b, na), "%s: same seed, different weights",
                      amp_model_kind_name((amp_model_kind)k));
            CHECK_MSG(na == nc && memcmp(a, c, na), "%s: different seeds, same weights",
                      amp_model_kind_name((amp_model_kind)k));
        }
        free(a), free(b), free(c);
    }
}

/* Input buffers for `batch` samples of cfg's model (images or token windows) and their targets; false
 * (all freed) when an allocation fails. */
static bool alloc_inputs(const amp_model_config *cfg, int64_t batch, float **x, int32_t **tokens, int32_t **targets,
                         int64_t *n_in, int64_t *n_targets) {
    const bool text = amp_model_is_text(cfg->kind);
    *n_in = text ? batch * cfg->context : batch * cfg->in_channels * cfg->image_rows * cfg->image_cols;
    *n_targets = text ? batch * cfg->context : batch;
    *x = malloc((size_t)*n_in * sizeof **x);
    *tokens = malloc((size_t)*n_in * sizeof **tokens);
    *targets = malloc((size_t)*n_targets * sizeof **targets);
    if (CHECK(*x && *tokens && *targets)) return true;
    free(*x), free(*tokens), free(*targets);
    *x = NULL, *tokens = *targets = NULL;
    return false;
}

/* ---- training: a few SGD steps on a fixed tiny batch lower the loss ---- */

static float train_step(amp_model *m, amp_ctx *ctx, const float *x, const int32_t *tokens, const int32_t *targets,
                        int64_t batch, float lr, bool update) {
    const amp_model_config *c = amp_model_get_config(m);
    amp_ctx_reset(ctx);
    amp_zero_grad(ctx);
    amp_tensor *xt = NULL;
    if (x) xt = amp_tensor_from(ctx, AMP_F32, 4, (const int64_t[]){batch, c->in_channels, c->image_rows, c->image_cols},
                                x, AMP_F32);
    amp_tensor *logits = amp_model_forward(m, ctx, xt, tokens, batch, true);
    amp_tensor *loss = amp_cross_entropy(ctx, logits, targets);
    if (!CHECK_MSG(loss != NULL, "%s: %s", amp_model_kind_name(c->kind), amp_ctx_error(ctx))) return NAN;
    const float value = amp_tensor_get(loss, 0);
    if (update) {
        if (!CHECK(amp_backward(ctx, loss, NULL) == AMP_OK)) return NAN;
        for (size_t i = 0; i < amp_model_num_tensors(m); i++) {
            amp_tensor *p = amp_model_tensor(m, i);
            const int64_t n = amp_tensor_numel(p);
            float *w = malloc((size_t)n * sizeof *w), *g = malloc((size_t)n * sizeof *g);
            if (CHECK(w && g) && amp_tensor_read(p, w, AMP_F32) == AMP_OK &&
                amp_tensor_read(p->grad, g, AMP_F32) == AMP_OK) {
                for (int64_t j = 0; j < n; j++) w[j] -= lr * g[j];
                amp_tensor_write(p, w, AMP_F32);
            }
            free(w), free(g);
        }
    }
    return value;
}

void test_nn_sgd_lowers_loss(void) {
    enum { B = 4, STEPS = 20 };
    uint64_t state = 0x9E3779B97F4A7C15ull;
    for (int k = 0; k < AMP_MODEL_COUNT; k++) {
        const amp_model_kind kind = (amp_model_kind)k;
        amp_ctx *ctx = new_ctx();
        amp_model *m = NULL;
        amp_model_config cfg = small_config(kind);
        if (!ctx || !CHECK(amp_model_create(ctx, &cfg, &m) == AMP_OK) || !CHECK(amp_ctx_alloc_params(ctx) == AMP_OK) ||
            !CHECK(amp_model_init(m, 7) == AMP_OK)) {
            amp_ctx_free(ctx);
            amp_model_free(m);
            continue;
        }
        const bool text = amp_model_is_text(kind);
        int64_t n_in, n_targets;
        float *x;
        int32_t *tokens, *targets;
        if (alloc_inputs(&cfg, B, &x, &tokens, &targets, &n_in, &n_targets)) {
            for (int64_t i = 0; i < n_in; i++) {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                x[i] = (float)((double)(state >> 40) * 0x1p-24 * 2.0 - 1.0);
                tokens[i] = (int32_t)((state >> 33) % (uint64_t)cfg.vocab);
            }
            for (int64_t i = 0; i < n_targets; i++)
                targets[i] = text ? tokens[(i + 1) % n_targets] : (int32_t)(i % cfg.classes);
            /* logits shape */
            amp_ctx_reset(ctx);
            amp_tensor *xt = text ? NULL
                                  : amp_tensor_from(ctx, AMP_F32, 4,
                                                    (const int64_t[]){B, cfg.in_channels, cfg.image_rows, cfg.image_cols},
                                                    x, AMP_F32);
            amp_tensor *logits = amp_model_forward(m, ctx, xt, text ? tokens : NULL, B, false);
            if (CHECK_MSG(logits != NULL, "%s", amp_ctx_error(ctx))) {
                CHECK_EQ_INT(logits->ndim, 2);
                CHECK_EQ_INT(logits->shape[0], text ? B * cfg.context : B);
                CHECK_EQ_INT(logits->shape[1], text ? cfg.vocab : cfg.classes);
            }
            const float lr = 0.5f;
            const float first = train_step(m, ctx, text ? NULL : x, text ? tokens : NULL, targets, B, lr, true);
            for (int s = 1; s < STEPS; s++) train_step(m, ctx, text ? NULL : x, text ? tokens : NULL, targets, B, lr, true);
            const float last = train_step(m, ctx, text ? NULL : x, text ? tokens : NULL, targets, B, lr, false);
            harness_note("%s: loss %.4f -> %.4f after %d SGD steps", amp_model_kind_name(kind), first, last, STEPS);
            CHECK_MSG(isfinite(last) && last < 0.9f * first, "%s: loss %.4f -> %.4f", amp_model_kind_name(kind), first,
                      last);
        }
        free(x), free(tokens), free(targets);
        amp_ctx_free(ctx);
        amp_model_free(m);
    }
}

/* ---- errors and the low-precision parameter dtypes ---- */

void test_nn_errors_and_dtypes(void) {
    amp_ctx *ctx = new_ctx();
    if (!ctx) return;
    amp_model *m = NULL;
    amp_model_config bad = amp_model_default_config(AMP_MODEL_GPT);
    bad.heads = 3; /* 128 % 3 != 0 */
    CHECK(amp_model_create(ctx, &bad, &m) == AMP_ERR_INVALID_ARGUMENT && m == NULL);
    CHECK(amp_ctx_status(ctx) == AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_clear_error(ctx);
    bad = amp_model_default_config(AMP_MODEL_CNN);
    bad.kernel = 4;
    CHECK(amp_model_create(ctx, &bad, &m) == AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_clear_error(ctx);
    CHECK(amp_model_create(NULL, &bad, &m) == AMP_ERR_NULL_POINTER);
    amp_model_free(NULL);
    amp_ctx_free(ctx);

    /* bf16 parameters: a forward runs and gives bf16 logits; a bad token is an error */
    const amp_dtype dtypes[2] = {AMP_BF16, AMP_F16};
    for (int d = 0; d < 2; d++) {
        ctx = new_ctx();
        m = NULL;
        amp_model_config cfg = small_config(AMP_MODEL_GPT);
        cfg.param_dtype = dtypes[d];
        if (ctx && CHECK(amp_model_create(ctx, &cfg, &m) == AMP_OK) && CHECK(amp_ctx_alloc_params(ctx) == AMP_OK) &&
            CHECK(amp_model_init(m, 1) == AMP_OK)) {
            int32_t tokens[2 * 5] = {0, 1, 2, 3, 4, 5, 6, 0, 1, 2};
            amp_tensor *logits = amp_model_forward(m, ctx, NULL, tokens, 2, true);
            if (CHECK_MSG(logits != NULL, "%s", amp_ctx_error(ctx))) CHECK(logits->dtype == dtypes[d]);
            tokens[3] = 7;
            CHECK(amp_model_forward(m, ctx, NULL, tokens, 2, true) == NULL);
            CHECK(amp_ctx_status(ctx) == AMP_ERR_INVALID_ARGUMENT);
            amp_ctx_clear_error(ctx);
            CHECK(amp_model_forward(m, ctx, NULL, NULL, 2, true) == NULL);
            amp_ctx_clear_error(ctx);
        }
        amp_ctx_free(ctx);
        amp_model_free(m);
    }
    /* an image model given the wrong input shape */
    ctx = new_ctx();
    m = NULL;
    amp_model_config cfg = small_config(AMP_MODEL_MLP);
    if (ctx && CHECK(amp_model_create(ctx, &cfg, &m) == AMP_OK) && CHECK(amp_ctx_alloc_params(ctx) == AMP_OK)) {
        amp_tensor *x = amp_tensor_zeros(ctx, AMP_F32, 2, (const int64_t[]){2, 15});
        CHECK(amp_model_forward(m, ctx, x, NULL, 2, true) == NULL);
        CHECK(amp_ctx_status(ctx) == AMP_ERR_INVALID_ARGUMENT);
    }
    amp_ctx_free(ctx);
    amp_model_free(m);
}

/* ---- the grad-ready hook (data-parallel buckets start from it) ---- */

typedef struct hook_log {
    size_t n;
    int calls[64];
    unsigned char *snap[64]; /* the gradient's bytes when the hook said it was complete */
} hook_log;

static void record_ready(amp_ctx *ctx, size_t index, void *user) {
    hook_log *log = user;
    if (index >= log->n) return;
    log->calls[index]++;
    const amp_tensor *g = amp_ctx_param(ctx, index)->grad;
    const size_t bytes = (size_t)amp_tensor_numel(g) * amp_dtype_size(g->dtype);
    free(log->snap[index]);
    log->snap[index] = malloc(bytes);
    if (log->snap[index]) memcpy(log->snap[index], g->data, bytes);
}

/* Every parameter is reported exactly once per backward, and at that moment its gradient already has
 * its final value: nothing later on the tape adds to it (under autocast too, where the weights reach
 * the matmuls through cached casts, and for the lstm, whose weights are used at every time step). */
void test_grad_ready_hook(void) {
    enum { B = 4 };
    for (int k = 0; k < AMP_MODEL_COUNT; k++) {
        for (int cast = 0; cast < 2; cast++) {
            const amp_model_kind kind = (amp_model_kind)k;
            amp_ctx *ctx = new_ctx();
            amp_model *m = NULL;
            amp_model_config cfg = small_config(kind);
            hook_log log = {0};
            if (!ctx || !CHECK(amp_model_create(ctx, &cfg, &m) == AMP_OK) ||
                !CHECK(amp_ctx_alloc_params(ctx) == AMP_OK) || !CHECK(amp_model_init(m, 3) == AMP_OK) ||
                !CHECK(amp_ctx_num_params(ctx) <= 64)) {
                amp_ctx_free(ctx);
                amp_model_free(m);
                continue;
            }
            log.n = amp_ctx_num_params(ctx);
            const bool text = amp_model_is_text(kind);
            int64_t n_in, n_targets;
            float *x;
            int32_t *tokens, *targets;
            if (alloc_inputs(&cfg, B, &x, &tokens, &targets, &n_in, &n_targets)) {
                for (int64_t i = 0; i < n_in; i++) x[i] = (float)((i * 37) % 11) / 11.0f - 0.5f, tokens[i] = (int32_t)(i % cfg.vocab);
                for (int64_t i = 0; i < n_targets; i++) targets[i] = (int32_t)((i * 5) % (text ? cfg.vocab : cfg.classes));
                amp_zero_grad(ctx);
                amp_tensor *xt = text ? NULL
                                      : amp_tensor_from(ctx, AMP_F32, 4,
                                                        (const int64_t[]){B, cfg.in_channels, cfg.image_rows, cfg.image_cols},
                                                        x, AMP_F32);
                if (cast) amp_autocast_enter(AMP_F16);
                amp_tensor *logits = amp_model_forward(m, ctx, xt, text ? tokens : NULL, B, true);
                amp_tensor *loss = logits ? amp_cross_entropy(ctx, logits, targets) : NULL;
                if (cast) amp_autocast_exit();
                amp_ctx_set_grad_ready_hook(ctx, record_ready, &log);
                if (CHECK_MSG(loss && amp_backward(ctx, loss, NULL) == AMP_OK, "%s: %s", amp_model_kind_name(kind),
                              amp_ctx_error(ctx))) {
                    for (size_t i = 0; i < log.n; i++) {
                        const amp_tensor *p = amp_ctx_param(ctx, i);
                        CHECK_MSG(log.calls[i] == 1, "%s%s: %s reported %d times", amp_model_kind_name(kind),
                                  cast ? " (autocast)" : "", p->name, log.calls[i]);
                        const size_t bytes = (size_t)amp_tensor_numel(p) * amp_dtype_size(p->dtype);
                        CHECK_MSG(log.snap[i] && !memcmp(log.snap[i], p->grad->data, bytes),
                                  "%s%s: %s's gradient changed after it was reported complete",
                                  amp_model_kind_name(kind), cast ? " (autocast)" : "", p->name);
                    }
                }
            }
            for (size_t i = 0; i < 64; i++) free(log.snap[i]);
            free(x), free(tokens), free(targets);
            amp_ctx_free(ctx);
            amp_model_free(m);
        }
    }
}

/* The backward-grad hook sees each op's incoming gradient once, newest op first: for
 * loss = sum(x * w) * 3 backpropagated with seed 0.5 the gradients are closed-form: 0.5 into the scale,
 * 1.5 into the sum, 1.5 everywhere into the product. */
typedef struct grad_seen {
    int calls;
    amp_op ops[8];
    float first_value[8], last_value[8];
    int64_t numel[8];
} grad_seen;

static void record_grad(amp_ctx *ctx, const amp_tensor *out, const amp_tensor *grad, void *user) {
    (void)ctx;
    grad_seen *s = user;
    if (s->calls >= 8) return;
    const int64_t n = amp_tensor_numel(grad);
    s->ops[s->calls] = out->op;
    s->numel[s->calls] = n;
    s->first_value[s->calls] = amp_tensor_get(grad, 0);
    s->last_value[s->calls] = amp_tensor_get(grad, n - 1);
    s->calls++;
}

void test_backward_grad_hook(void) {
    amp_ctx *ctx = new_ctx();
    if (!ctx) return;
    amp_tensor *w = amp_param_new(ctx, "w", AMP_F32, 1, (const int64_t[]){5});
    if (!CHECK(w && amp_ctx_alloc_params(ctx) == AMP_OK)) {
        amp_ctx_free(ctx);
        return;
    }
    const float xs[5] = {1, -2, 3, 0.5f, 4};
    amp_tensor_write(w, xs, AMP_F32);
    amp_tensor *x = amp_tensor_from(ctx, AMP_F32, 1, (const int64_t[]){5}, xs, AMP_F32);
    amp_tensor *loss = amp_scale(ctx, amp_sum_all(ctx, amp_mul(ctx, x, w)), 3.0f);
    grad_seen seen = {0};
    amp_ctx_set_backward_grad_hook(ctx, record_grad, &seen);
    if (CHECK_MSG(loss && amp_backward_scaled(ctx, loss, 0.5f) == AMP_OK, "%s", amp_ctx_error(ctx)) &&
        CHECK_MSG(seen.calls == 3, "hook called %d times, expected 3", seen.calls)) {
        CHECK(seen.ops[0] == AMP_OP_SCALE && seen.numel[0] == 1 && seen.first_value[0] == 0.5f);
        CHECK(seen.ops[1] == AMP_OP_SUM && seen.numel[1] == 1 && seen.first_value[1] == 1.5f);
        CHECK(seen.ops[2] == AMP_OP_MUL && seen.numel[2] == 5 && seen.first_value[2] == 1.5f && seen.last_value[2] == 1.5f);
    }
    amp_ctx_set_backward_grad_hook(ctx, NULL, NULL);
    seen.calls = 0;
    amp_ctx_reset(ctx);
    amp_tensor *x2 = amp_tensor_from(ctx, AMP_F32, 1, (const int64_t[]){5}, xs, AMP_F32);
    amp_tensor *l2 = amp_sum_all(ctx, amp_mul(ctx, x2, w));
    CHECK(l2 && amp_backward_scaled(ctx, l2, 1.0f) == AMP_OK);
    CHECK_EQ_INT(seen.calls, 0); /* removed: not called */
    amp_ctx_free(ctx);
}
