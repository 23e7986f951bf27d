/* GPT-2 (amp_model gpt2, include/amp/nn.h) and the pieces it added: GELU's tanh approximation
 * (amp_gelu_tanh, amp_linear_gelu_tanh), amp_narrow_rows, the sizes. Against PyTorch fixtures written
 * by tests/fixtures/gen_gpt2_fixtures.py (a hand-written torch GPT-2 mirroring llm.c's train_gpt2.py)
 * and against closed forms in double precision.
 *
 * Tolerances (u = 2^-24):
 *   gelu_tanh values: |amp - ref| <= 16 u (|y| + |x|/2): the approximation is 0.5x(1 + t); both
 *     sides' tanh differ by a few ulps of |t| <= 1, which 0.5x carries (1 + t cancels for x < 0);
 *   its gradient: |amp - ref| <= 16 u |g| (1 + |x| (1 + 0.134 x^2)): the same for 1 - t^2 times the
 *     inner derivative x * beta * (1 + 3 kappa x^2);
 *   the tiny model (2 layers, width 32): logits within 64 u * max|logit| (test_nn.c's bound), the
 *     loss within 1e-6 relative, each parameter's gradient within 2^-16 * max|its gradient| (both
 *     sides fp32 with other summation orders and libm; measured figures are printed as notes). A
 *     semantic error (exact GELU instead of tanh, an untied head, the padding in the softmax) moves
 *     them by far more. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture_reader.h"
#include "harness.h"
#include "tests.h"

static bool load(fixture *fx, const char *file) { return test_fixture_load(file, fx); }

static amp_ctx *new_ctx(void) {
    amp_ctx_config cc = amp_ctx_default_config();
    cc.arena_bytes = (size_t)8 << 20;
    amp_ctx *ctx = NULL;
    CHECK(amp_ctx_create(&cc, &ctx) == AMP_OK);
    return ctx;
}

/* ---- GELU's tanh approximation ---- */

static const double BETA = 0.79788456080286535588, KAPPA = 0.044715;

static double gelu_tanh_exact(double x) { return 0.5 * x * (1.0 + tanh(BETA * (x + KAPPA * x * x * x))); }

static double gelu_tanh_deriv_exact(double x) {
    const double t = tanh(BETA * (x + KAPPA * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * BETA * (1.0 + 3.0 * KAPPA * x * x);
}

static double y_tol(double x, double y) { return 16.0 * ldexp(1.0, -24) * (fabs(y) + 0.5 * fabs(x)); }
static double dx_tol(double x, double g) {
    return 16.0 * ldexp(1.0, -24) * fabs(g) * (1.0 + fabs(x) * (1.0 + 0.134 * x * x));
}

/* amp_gelu_tanh on every path against PyTorch's fp32 and against the closed form in double. */
void test_gelu_tanh_pytorch(void) {
    fixture *fx = calloc(1, sizeof *fx);
    if (!CHECK(fx != NULL) || !load(fx, "gelu_tanh.txt")) {
        free(fx);
        return;
    }
    const fixture_tensor *x = fixture_find(fx, "input.x"), *g = fixture_find(fx, "input.g");
    const fixture_tensor *y = fixture_find(fx, "output.y"), *dx = fixture_find(fx, "output.dx");
    const amp_isa saved = amp_isa_active();
    for (int isa = 0; x && g && y && dx && isa < AMP_ISA_COUNT; isa++) {
        if (!amp_isa_supported((amp_isa)isa)) continue;
        amp_isa_set((amp_isa)isa);
        amp_ctx *ctx = new_ctx();
        amp_tensor *xt = ctx ? amp_tensor_from(ctx, AMP_F32, 1, x->shape, x->values, AMP_F32) : NULL;
        if (xt) amp_tensor_set_requires_grad(xt, true);
        amp_tensor *yt = xt ? amp_gelu_tanh(ctx, xt) : NULL;
        amp_tensor *gt = yt ? amp_tensor_from(ctx, AMP_F32, 1, g->shape, g->values, AMP_F32) : NULL;
        amp_tensor *loss = gt ? amp_sum_all(ctx, amp_mul(ctx, yt, gt)) : NULL;
        if (CHECK_MSG(loss && amp_backward(ctx, loss, NULL) == AMP_OK, "%s", ctx ? amp_ctx_error(ctx) : "no ctx")) {
            int64_t bad_y = 0, bad_dx = 0, bad_exact = 0;
            double worst_y = 0, worst_dx = 0;
            for (int64_t i = 0; i < x->numel; i++) {
                const double xi = x->values[i], gi = g->values[i];
                const double ya = amp_tensor_get(yt, i), da = amp_tensor_get(xt->grad, i);
                const double ey = fabs(ya - y->values[i]), ed = fabs(da - dx->values[i]);
                worst_y = fmax(worst_y, ey / y_tol(xi, y->values[i]) * 16.0);
                worst_dx = fmax(worst_dx, ed / dx_tol(xi, gi) * 16.0);
                bad_y += ey > y_tol(xi, y->values[i]);
                bad_dx += ed > dx_tol(xi, gi);
                bad_exact += fabs(ya - gelu_tanh_exact(xi)) > y_tol(xi, ya) ||
                             fabs(da - gi * gelu_tanh_deriv_exact(xi)) > dx_tol(xi, gi);
            }
            harness_note("gelu_tanh %s: worst |amp - PyTorch| %.3g u-units (value), %.3g (gradient)",
                         amp_isa_name((amp_isa)isa), worst_y, worst_dx);
            CHECK_MSG(bad_y == 0 && bad_dx == 0, "gelu_tanh %s: %lld values, %lld gradients off PyTorch's",
                      amp_isa_name((amp_isa)isa), (long long)bad_y, (long long)bad_dx);
            CHECK_MSG(bad_exact == 0, "gelu_tanh %s: %lld elements off the double closed form", amp_isa_name((amp_isa)isa),
                      (long long)bad_exact);
        }
        amp_ctx_free(ctx);
    }
    amp_isa_set(saved);
    fixture_free(fx);
    free(fx);
}

/* amp_linear_gelu_tanh against amp_gelu_tanh(amp_linear(...)): values and all three gradients bit for
 * bit, in fp32 (the fused pass) and under bf16 autocast (the pair). */
void test_linear_gelu_tanh(void) {
    enum { R = 7, IN = 19, OUT = 37 };
    uint64_t s = harness_seed() ^ 0x6a09e667f3bcc908ull;
    harness_note("seed %llu", (unsigned long long)harness_seed());
    float x[R * IN], w[OUT * IN], b[OUT], gy[R * OUT];
    float *all[] = {x, w, b, gy};
    const int n[] = {R * IN, OUT * IN, OUT, R * OUT};
    for (int a = 0; a < 4; a++)
        for (int i = 0; i < n[a]; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            all[a][i] = (float)((double)(s >> 40) * 0x1p-24 * 6.0 - 3.0);
        }
    for (int cast = 0; cast < 2; cast++) {
        float got[2][R * OUT], grads[2][3][OUT * IN];
        for (int fused = 0; fused < 2; fused++) {
            amp_ctx *ctx = new_ctx();
            if (!ctx) return;
            amp_tensor *xt = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){R, IN}, x, AMP_F32);
            amp_tensor *wt = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){OUT, IN}, w, AMP_F32);
            amp_tensor *bt = amp_tensor_from(ctx, AMP_F32, 1, (const int64_t[]){OUT}, b, AMP_F32);
            amp_tensor *gt = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){R, OUT}, gy, AMP_F32);
            amp_tensor_set_requires_grad(xt, true), amp_tensor_set_requires_grad(wt, true);
            amp_tensor_set_requires_grad(bt, true);
            if (cast) amp_autocast_enter(AMP_BF16);
            amp_tensor *y = fused ? amp_linear_gelu_tanh(ctx, xt, wt, bt) : amp_gelu_tanh(ctx, amp_linear(ctx, xt, wt, bt));
            if (cast) amp_autocast_exit();
            amp_tensor *loss = y ? amp_sum_all(ctx, amp_mul(ctx, y, gt)) : NULL;
            if (CHECK_MSG(loss && amp_backward(ctx, loss, NULL) == AMP_OK, "%s", amp_ctx_error(ctx))) {
                amp_tensor_read(y, got[fused], AMP_F32);
                amp_tensor_read(xt->grad, grads[fused][0], AMP_F32);
                amp_tensor_read(wt->grad, grads[fused][1], AMP_F32);
                amp_tensor_read(bt->grad, grads[fused][2], AMP_F32);
            }
            amp_ctx_free(ctx);
        }
        CHECK_MSG(!memcmp(got[0], got[1], sizeof got[0]), "linear_gelu_tanh (%s): values differ from the pair",
                  cast ? "bf16" : "fp32");
        CHECK_MSG(!memcmp(grads[0][0], grads[1][0], (size_t)R * IN * sizeof(float)) &&
                      !memcmp(grads[0][1], grads[1][1], (size_t)OUT * IN * sizeof(float)) &&
                      !memcmp(grads[0][2], grads[1][2], (size_t)OUT * sizeof(float)),
                  "linear_gelu_tanh (%s): gradients differ from the pair", cast ? "bf16" : "fp32");
    }
}

/* amp_narrow_rows: a view of the leading rows; the gradient reaches those rows, zeros elsewhere. */
void test_narrow_rows(void) {
    amp_ctx *ctx = new_ctx();
    if (!ctx) return;
    float v[5 * 3];
    for (int i = 0; i < 15; i++) v[i] = (float)i - 4.0f;
    amp_tensor *w = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){5, 3}, v, AMP_F32);
    amp_tensor_set_requires_grad(w, true);
    amp_tensor *h = amp_narrow_rows(ctx, w, 3);
    if (CHECK(h != NULL) && CHECK(h->ndim == 2 && h->shape[0] == 3 && h->shape[1] == 3)) {
        for (int i = 0; i < 9; i++) CHECK(amp_tensor_get(h, i) == v[i]);
        amp_tensor *loss = amp_sum_all(ctx, amp_mul(ctx, h, h)); /* d/dw = 2w on the first 3 rows */
        if (CHECK(loss && amp_backward(ctx, loss, NULL) == AMP_OK))
            for (int i = 0; i < 15; i++)
                CHECK_MSG(amp_tensor_get(w->grad, i) == (i < 9 ? 2.0f * v[i] : 0.0f), "narrow_rows: gradient %d", i);
    }
    CHECK(amp_narrow_rows(ctx, w, 6) == NULL && amp_ctx_status(ctx) == AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_free(ctx);
}

/* A tied table's backwards into a gradient that exists, which add chunk by chunk (src/ops/grad_range.h;
 * fp16/bf16: bf16 parameters, fp32: the embedding's): narrow_rows' view gradient, then an embedding's
 * scatter-add with repeated indices in several row blocks, then the view again. Each element must be
 * what one fp32 pass over the whole table gives: its fp32 sum (positions in order, from 0) added to
 * the decoded gradient and rounded once, -0 + 0 = +0 included, compared bit for bit against that
 * computed here elementwise. */
void test_narrow_embedding_lowp(void) {
    enum { V = 700, D = 48, VN = 650, N = 40 }; /* 33600 values: several 16K chunks */
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    const amp_dtype dts[3] = {AMP_BF16, AMP_F16, AMP_F32};
    for (int di = 0; di < 3; di++) {
        const amp_dtype dt = dts[di];
        uint64_t st = seed + (uint64_t)di;
        float *gh = malloc(sizeof(float) * VN * D), *gh2 = malloc(sizeof(float) * VN * D);
        float *ge = malloc(sizeof(float) * N * D), *want = malloc(sizeof(float) * V * D);
        uint32_t *wbits = malloc(sizeof(uint32_t) * V * D);
        amp_ctx *ctx = NULL;
        if (!CHECK(gh && gh2 && ge && want && wbits) || !CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) goto done;
        for (int i = 0; i < VN * D; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            gh[i] = (float)((int64_t)(st >> 40) - (1 << 23)) / (float)(1 << 20);
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            gh2[i] = (float)((int64_t)(st >> 40) - (1 << 23)) / (float)(1 << 22);
        }
        for (int i = 0; i < D; i++) gh[3 * D + i] = gh2[3 * D + i] = -0.0f; /* row 3: no index reads it */
        for (int i = 0; i < N * D; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            ge[i] = (float)((int64_t)(st >> 40) - (1 << 23)) / (float)(1 << 21);
        }
        int32_t ids[N];
        for (int t = 0; t < N; t++) ids[t] = t % 4 == 0 ? 5 : t % 4 == 1 ? 690 : (int32_t)((t * 97) % V);
        ids[7] = 3 + 1; /* not row 3 */
        amp_tensor *w = amp_tensor_zeros(ctx, dt, 2, (const int64_t[]){V, D});
        amp_tensor_set_requires_grad(w, true);
        amp_tensor *seed_h = amp_tensor_from(ctx, dt, 2, (const int64_t[]){VN, D}, gh, AMP_F32);
        amp_tensor *seed_h2 = amp_tensor_from(ctx, dt, 2, (const int64_t[]){VN, D}, gh2, AMP_F32);
        amp_tensor *seed_e = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){N, D}, ge, AMP_F32);
        if (!CHECK(w && seed_h && seed_h2 && seed_e)) goto done;
        CHECK(amp_backward(ctx, amp_narrow_rows(ctx, w, VN), seed_h) == AMP_OK);
        amp_tensor *e = amp_embedding(ctx, w, ids, 1, (const int64_t[]){N});
        /* the embedding's output is dt: its gradient arrives rounded to dt */
        amp_tensor *seed_ed = e ? amp_cast(ctx, seed_e, dt) : NULL;
        if (!CHECK(seed_ed && amp_backward(ctx, e, seed_ed) == AMP_OK)) goto done;
        CHECK(amp_backward(ctx, amp_narrow_rows(ctx, w, VN), seed_h2) == AMP_OK);
        if (!CHECK(w->grad && w->grad->dtype == dt)) goto done;
        /* the reference, elementwise: the seeds as dt holds them, fp32 sums, one rounding per pass */
        float *ged = malloc(sizeof(float) * N * D), *h1 = malloc(sizeof(float) * VN * D);
        float *h2 = malloc(sizeof(float) * VN * D);
        if (CHECK(ged && h1 && h2) && CHECK(amp_tensor_read(seed_ed, ged, AMP_F32) == AMP_OK) &&
            CHECK(amp_tensor_read(seed_h, h1, AMP_F32) == AMP_OK) &&
            CHECK(amp_tensor_read(seed_h2, h2, AMP_F32) == AMP_OK)) {
            for (int i = 0; i < V * D; i++) want[i] = i < VN * D ? h1[i] : 0.0f;
            for (int r = 0; r < V; r++)
                for (int j = 0; j < D; j++) {
                    float sum = 0.0f;
                    for (int t = 0; t < N; t++)
                        if (ids[t] == r) sum += ged[t * D + j];
                    want[r * D + j] += sum;
                }
            amp_convert(wbits, dt, want, AMP_F32, V * D);
            amp_convert(want, AMP_F32, wbits, dt, V * D);
            for (int i = 0; i < V * D; i++) want[i] += i < VN * D ? h2[i] : 0.0f;
            amp_convert(wbits, dt, want, AMP_F32, V * D);
            const size_t es = amp_dtype_size(dt);
            const unsigned char *got = w->grad->data, *exp = (const unsigned char *)wbits;
            int bad = 0;
            for (int i = 0; i < V * D; i++)
                if (memcmp(got + i * es, exp + i * es, es) && bad++ < 5)
                    CHECK_MSG(false, "%s: gradient %d (row %d) is %g, want %g", amp_dtype_name(dt), i, i / D,
                              amp_tensor_get(w->grad, i), want[i]);
            CHECK_MSG(bad == 0, "%s: %d gradient elements differ", amp_dtype_name(dt), bad);
            /* (-0 + 0) + -0 = +0: the embedding's pass added 0 */
            CHECK(!memcmp(got + 3 * D * es, (const unsigned char[4]){0}, es));
        }
        free(ged), free(h1), free(h2);
    done:
        amp_ctx_free(ctx);
        free(gh), free(gh2), free(ge), free(want), free(wbits);
    }
}

/* ---- the model ---- */

/* gen_gpt2_fixtures.py's TINY */
static amp_model_config tiny_config(void) {
    amp_model_config c = amp_model_default_config(AMP_MODEL_GPT2);
    c.layers = 2, c.hidden = 32, c.heads = 4, c.context = 16, c.vocab = 100;
    return c;
}

static double max_abs(const float *v, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(v[i]));
    return m;
}

/* Logits, loss and every parameter's gradient of the tiny GPT-2 against PyTorch's. */
void test_gpt2_tiny_pytorch(void) {
    fixture *fx = calloc(1, sizeof *fx), *fg = calloc(1, sizeof *fg);
    amp_ctx *ctx = new_ctx();
    amp_model *m = NULL;
    const amp_model_config cfg = tiny_config();
    if (!CHECK(fx && fg && ctx) || !load(fx, "gpt2_tiny.txt") || !load(fg, "gpt2_tiny_grads.txt") ||
        !CHECK(amp_model_create(ctx, &cfg, &m) == AMP_OK) || !CHECK(amp_ctx_alloc_params(ctx) == AMP_OK))
        goto done;
    CHECK_EQ_INT(amp_model_padded_vocab(&cfg), 128);
    for (size_t i = 0; i < amp_model_num_tensors(m); i++) {
        amp_tensor *t = amp_model_tensor(m, i);
        char name[FIXTURE_MAX_NAME + 8];
        snprintf(name, sizeof name, "param.%s", t->name);
        const fixture_tensor *src = fixture_find(fx, name);
        if (!CHECK_MSG(src && src->numel == amp_tensor_numel(t), "no %s of %lld values", name,
                       (long long)amp_tensor_numel(t)))
            goto done;
        amp_tensor_write(t, src->values, AMP_F32);
    }
    const fixture_tensor *tok = fixture_find(fx, "tokens"), *tgt = fixture_find(fx, "targets");
    const fixture_tensor *want = fixture_find(fx, "output.logits"), *want_loss = fixture_find(fx, "output.loss");
    if (!CHECK(tok && tgt && want && want_loss)) goto done;
    amp_zero_grad(ctx);
    amp_tensor *logits = amp_model_forward(m, ctx, NULL, tok->ints, tok->shape[0], true);
    amp_tensor *loss = logits ? amp_cross_entropy(ctx, logits, tgt->ints) : NULL;
    if (!CHECK_MSG(loss && amp_backward(ctx, loss, NULL) == AMP_OK, "%s", amp_ctx_error(ctx))) goto done;
    CHECK(logits->shape[0] == want->shape[0] && logits->shape[1] == want->shape[1]);
    double err = 0;
    for (int64_t i = 0; i < want->numel; i++) err = fmax(err, fabs(amp_tensor_get(logits, i) - want->values[i]));
    const double ratio = err / (ldexp(1.0, -24) * max_abs(want->values, want->numel));
    const double lrel = fabs(amp_tensor_get(loss, 0) - want_loss->values[0]) / fabs(want_loss->values[0]);
    harness_note("gpt2 tiny: logits %.3g u * max|logit|, loss %.3g relative", ratio, lrel);
    CHECK_MSG(ratio <= 64, "gpt2 tiny: logits off PyTorch's by %.3g u", ratio);
    CHECK_MSG(lrel <= 1e-6, "gpt2 tiny: loss %.9g, PyTorch %.9g", (double)amp_tensor_get(loss, 0),
              (double)want_loss->values[0]);
    double worst = 0;
    for (size_t i = 0; i < amp_model_num_tensors(m); i++) {
        const amp_tensor *t = amp_model_tensor(m, i);
        char name[FIXTURE_MAX_NAME + 8];
        snprintf(name, sizeof name, "grad.%s", t->name);
        const fixture_tensor *g = fixture_find(fg, name);
        if (!CHECK_MSG(g && g->numel == amp_tensor_numel(t) && t->grad, "no %s", name)) continue;
        const double scale = max_abs(g->values, g->numel);
        double e = 0;
        for (int64_t j = 0; j < g->numel; j++) e = fmax(e, fabs(amp_tensor_get(t->grad, j) - g->values[j]));
        worst = fmax(worst, e / scale);
        CHECK_MSG(e <= ldexp(scale, -16), "gpt2 tiny: %s off PyTorch's by %.3g (max |grad| %.3g)", name, e, scale);
        if (i == 0) /* wte: the padded rows 100..127 get nothing */
            for (int64_t j = cfg.vocab * cfg.hidden; j < g->numel; j++)
                if (!CHECK_MSG(amp_tensor_get(t->grad, j) == 0.0f, "wte.weight: padded row %lld has a gradient",
                               (long long)(j / cfg.hidden)))
                    break;
    }
    harness_note("gpt2 tiny: worst gradient error %.3g of the tensor's max |grad| (%.3g u)", worst,
                 worst / ldexp(1.0, -24));
done:
    amp_model_free(m);
    amp_ctx_free(ctx);
    fixture_free(fx), fixture_free(fg);
    free(fx), free(fg);
}

/* The sizes, the padded vocabulary, the parameter list (no lm_head) and the residual init. */
void test_gpt2_sizes_and_init(void) {
    static const struct {
        const char *name;
        int64_t layers, heads, hidden;
    } sizes[] = {{"124m", 12, 12, 768}, {"350m", 24, 16, 1024}, {"774m", 36, 20, 1280}, {"1558m", 48, 25, 1600}};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        amp_model_config c = amp_model_default_config(AMP_MODEL_GPT2);
        c.context = 7;
        CHECK(amp_model_gpt2_size(sizes[k].name, &c) == AMP_OK);
        CHECK(c.layers == sizes[k].layers && c.heads == sizes[k].heads && c.hidden == sizes[k].hidden &&
              c.context == 1024 && c.vocab == 50257);
        amp_ctx *ctx = new_ctx();
        amp_model *m = NULL;
        if (ctx && CHECK(amp_model_create(ctx, &c, &m) == AMP_OK)) {
            const int64_t C = c.hidden, want = 50304 * C + 1024 * C + c.layers * (12 * C * C + 13 * C) + 2 * C;
            CHECK_MSG(amp_model_num_params(m) == want, "gpt2 %s: %lld parameters, want %lld", sizes[k].name,
                      (long long)amp_model_num_params(m), (long long)want);
            CHECK_EQ_INT(amp_model_num_tensors(m), 2 + 12 * c.layers + 2);
        }
        amp_model_free(m);
        amp_ctx_free(ctx);
    }
    amp_model_config c = amp_model_default_config(AMP_MODEL_GPT2);
    CHECK(amp_model_gpt2_size("125m", &c) == AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_model_padded_vocab(&c), 50304);
    c.vocab_padded = 50257;
    CHECK_EQ_INT(amp_model_padded_vocab(&c), 50257);
    /* init: N(0, 0.02) and the residual projections N(0, 0.02 / sqrt(2 L)), the sample std within 5% */
    c = tiny_config();
    c.hidden = 64, c.heads = 4, c.layers = 3;
    amp_ctx *ctx = new_ctx();
    amp_model *m = NULL;
    if (ctx && CHECK(amp_model_create(ctx, &c, &m) == AMP_OK) && CHECK(amp_ctx_alloc_params(ctx) == AMP_OK) &&
        CHECK(amp_model_init(m, 5) == AMP_OK)) {
        for (size_t i = 0; i < amp_model_num_tensors(m); i++) {
            const amp_tensor *t = amp_model_tensor(m, i);
            if (t->ndim != 2) continue;
            const bool resid = strstr(t->name, "c_proj") != NULL;
            const double want = resid ? 0.02 / sqrt(6.0) : 0.02;
            double ss = 0;
            for (int64_t j = 0; j < amp_tensor_numel(t); j++) ss += (double)amp_tensor_get(t, j) * amp_tensor_get(t, j);
            const double sd = sqrt(ss / (double)amp_tensor_numel(t));
            CHECK_MSG(fabs(sd / want - 1) < 0.05, "gpt2 init %s: std %.4g, want %.4g", t->name, sd, want);
        }
    }
    amp_model_free(m);
    amp_ctx_free(ctx);
}
