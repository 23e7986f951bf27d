/* Optimizers (amp/optim.h): SGD, Adam and AdamW against torch.optim fixtures, clip_grad_norm_ and the
 * learning-rate schedules against torch's values, fp32 master weights under F16/BF16 parameters,
 * stochastic rounding (unbiased, reproducible, resumable), the fused unscale + check + clip + update
 * pass, argument checks, and no heap allocation per step.
 *
 * The fixtures (tests/fixtures/optim_*.txt) and the script that writes them by hand,
 * tests/fixtures/gen_optim_fixtures.py, describe themselves; like the golden tests, they are read
 * from tests/fixtures relative to the working directory, or from $AMP_FIXTURE_DIR. What is exact and
 * what is not, and why, is said above test_optim_vs_pytorch: SGD, clipping and the schedules match
 * torch bit for bit; Adam/AdamW in their moments, and in their parameters up to torch's MKL sqrt. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/optim/optim_internal.h"
#include "fixture_reader.h"
#include "harness.h"
#include "tests.h"
#include "test_util.h"

/* ---- helpers ---- */

/* Bit patterns of any float dtype (fp32 too), as test_elem_get/test_elem_set hold them. */
static uint32_t enc(amp_dtype dtype, float x) {
    return dtype == AMP_F32 ? f32_bits(x) : test_scalar_encode(dtype, x, false);
}
static uint32_t dec(amp_dtype dtype, uint32_t bits) {
    return dtype == AMP_F32 ? bits : test_scalar_decode(dtype, bits);
}

static amp_ctx *new_ctx(void) {
    amp_ctx_config cfg = amp_ctx_default_config();
    cfg.arena_bytes = 1 << 16;
    amp_ctx *ctx = NULL;
    CHECK(amp_ctx_create(&cfg, &ctx) == AMP_OK);
    return ctx;
}

/* Loads tests/fixtures/<name>.txt into *fx (a failure is a failed check). */
static bool load_fixture(const char *name, fixture *fx) {
    char file[256];
    snprintf(file, sizeof file, "%s.txt", name);
    return test_fixture_load(file, fx);
}

static const fixture_tensor *need(const fixture *fx, const char *name) {
    const fixture_tensor *t = fixture_find(fx, name);
    CHECK_MSG(t != NULL, "%s: no tensor %s", fx->model, name);
    return t;
}

static float need_scalar(const fixture *fx, const char *name) {
    const fixture_tensor *t = need(fx, name);
    return t && !t->is_int && t->numel == 1 ? t->values[0] : NAN;
}

static int need_int(const fixture *fx, const char *name) {
    const fixture_tensor *t = need(fx, name);
    return t && t->is_int && t->numel == 1 ? t->ints[0] : -1;
}

/* ---- torch.optim fixtures ---- */

enum { FX_PARAMS = 3, FX_MAX_STEPS = 64, FX_MAX_NUMEL = 37 };
static const int64_t fx_numel[FX_PARAMS] = {37, 12, 5}; /* SHAPES in the generator, flattened */

/* The spacing of fp32 values at |x| (its ulp; 2^-149 at zero). */
static double ulp_of(float x) {
    int e;
    frexpf(fabsf(x), &e); /* |x| = m 2^e, m in [0.5, 1) */
    return x == 0.0f || e - 24 < -149 ? ldexp(1.0, -149) : ldexp(1.0, e - 24);
}

typedef struct optim_fx_stats {
    uint64_t values, exact;             /* parameter values compared, and how many of them were bit-exact */
    double max_ulps;                    /* the largest |amp - torch|, in the units stats_add describes */
    uint64_t state_values, state_exact; /* the same for the optimizer's state (momentum, moments) */
} optim_fx_stats;

/* Parameters: the error of a step is measured in ulps of the largest of the parameter before the
 * step, after it, and the update (torch's after - before): an update that nearly cancels the parameter
 * leaves a small result whose own ulp says nothing about the arithmetic, and a one-ulp change of the
 * update shows in the result at the update's scale. A free run accumulates the errors of its steps,
 * so there the unit is the sum of those per-step ulps so far (`budget`, one per element). */
static void stats_add(optim_fx_stats *s, const float *got, const float *want, const float *before, int64_t n,
                      double *budget) {
    for (int64_t i = 0; i < n; i++) {
        const float update = want[i] - before[i];
        float scale = fabsf(want[i]) > fabsf(before[i]) ? fabsf(want[i]) : fabsf(before[i]);
        if (fabsf(update) > scale) scale = fabsf(update);
        double unit = ulp_of(scale);
        if (budget) unit = budget[i] += unit;
        s->values++;
        if (f32_bits(got[i]) == f32_bits(want[i])) {
            s->exact++;
            continue;
        }
        const double d = isnan(got[i]) ? INFINITY : fabs((double)got[i] - (double)want[i]) / unit;
        if (d > s->max_ulps) s->max_ulps = d;
    }
}

static void stats_add_state(optim_fx_stats *s, const float *got, const float *want, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        s->state_values++;
        s->state_exact += f32_bits(got[i]) == f32_bits(want[i]);
    }
}

/* Expected agreement with torch per fixture, in the units of optim_fx_stats.max_ulps (0: bit-exact).
 * See test_optim_vs_pytorch. */
typedef struct optim_fx_case {
    const char *name;
    double free_run_ulps;    /* amp's own 50-step trajectory against torch's */
    double single_step_ulps; /* each step taken from torch's parameters and state after the one before */
} optim_fx_case;

static const optim_fx_case optim_fx_cases[] = {
    {"sgd_plain", 0, 0},        {"sgd_momentum", 0, 0}, {"sgd_nesterov", 0, 0},
    {"sgd_weight_decay", 0, 0}, {"adam", 2, 2},         {"adam_weight_decay", 2, 2},
    {"adam_low_beta", 2, 2},    {"adamw", 2, 2},        {"adamw_no_decay", 2, 2},
};

/* Builds a context with the fixture's three fp32 parameters and an optimizer with its configuration. */
static bool optim_fx_setup(const fixture *fx, amp_ctx **ctx_out, amp_optimizer **opt_out,
                           amp_tensor *params[FX_PARAMS]) {
    *ctx_out = NULL;
    *opt_out = NULL;
    amp_ctx *ctx = new_ctx();
    if (!ctx) return false;
    *ctx_out = ctx;
    for (int j = 0; j < FX_PARAMS; j++) params[j] = amp_param_new(ctx, "p", AMP_F32, 1, &fx_numel[j]);
    if (!CHECK(amp_ctx_alloc_params(ctx) == AMP_OK)) return false;
    const int kind = need_int(fx, "config.kind");
    if (!CHECK_MSG(kind >= 0 && kind <= 2, "%s: config.kind %d", fx->model, kind)) return false;
    amp_optim_config cfg = amp_optim_default_config((amp_optim_kind)kind);
    cfg.lr = need_scalar(fx, "config.lr");
    cfg.momentum = need_scalar(fx, "config.momentum");
    cfg.dampening = need_scalar(fx, "config.dampening");
    cfg.weight_decay = need_scalar(fx, "config.weight_decay");
    cfg.beta1 = need_scalar(fx, "config.beta1");
    cfg.beta2 = need_scalar(fx, "config.beta2");
    cfg.eps = need_scalar(fx, "config.eps");
    cfg.nesterov = need_int(fx, "config.nesterov") == 1;
    if (!CHECK_MSG(amp_optimizer_create(ctx, &cfg, opt_out) == AMP_OK, "%s: create", fx->model)) return false;
    for (int j = 0; j < FX_PARAMS; j++) {
        char name[32];
        snprintf(name, sizeof name, "p%d.init", j);
        const fixture_tensor *init = need(fx, name);
        if (!init || !CHECK(init->numel == fx_numel[j])) return false;
        memcpy(params[j]->data, init->values, (size_t)fx_numel[j] * sizeof(float));
    }
    return true;
}

/* Row `step` of tensor p<j>.<what> ([steps, numel]), or NULL. */
static const float *fx_row(const fixture *fx, int j, const char *what, int step) {
    char name[40];
    snprintf(name, sizeof name, "p%d.%s", j, what);
    const fixture_tensor *t = fixture_find(fx, name);
    if (!t || t->ndim != 2 || step >= t->shape[0] || t->shape[1] != fx_numel[j]) return NULL;
    return t->values + (size_t)step * (size_t)fx_numel[j];
}

/* Copies row `step` of p<j>.<what> into dst; false (a failed check) when the fixture lacks it. */
static bool fx_copy(const fixture *fx, int j, const char *what, int step, float *dst) {
    const float *row = fx_row(fx, j, what, step);
    if (!CHECK_MSG(row != NULL, "%s: no row %d of p%d.%s", fx->model, step, j, what)) return false;
    memcpy(dst, row, (size_t)fx_numel[j] * sizeof(float));
    return true;
}

/* The state tensors a configuration keeps, with the fixture's names. */
static int fx_states(const amp_optimizer *opt, amp_optim_state which[2], const char *names[2]) {
    if (opt->config.kind != AMP_OPTIM_SGD) {
        which[0] = AMP_OPTIM_STATE_EXP_AVG, names[0] = "exp_avg";
        which[1] = AMP_OPTIM_STATE_EXP_AVG_SQ, names[1] = "exp_avg_sq";
        return 2;
    }
    if (opt->config.momentum != 0.0f) {
        which[0] = AMP_OPTIM_STATE_MOMENTUM, names[0] = "momentum";
        return 1;
    }
    return 0;
}

static void run_optim_fixture(const optim_fx_case *c, bool note) {
    char model[64];
    snprintf(model, sizeof model, "optim_%s", c->name);
    fixture *fx = calloc(1, sizeof *fx);
    if (!CHECK(fx != NULL) || !load_fixture(model, fx)) {
        free(fx);
        return;
    }
    amp_ctx *ctx = NULL;
    amp_optimizer *opt = NULL;
    amp_tensor *params[FX_PARAMS];
    const fixture_tensor *g0 = need(fx, "p0.grad");
    const int steps = g0 && g0->ndim == 2 ? (int)g0->shape[0] : 0;
    optim_fx_stats free_run = {0}, single = {0};
    double budget[FX_PARAMS][FX_MAX_NUMEL] = {{0}};
    amp_optim_state which[2];
    const char *names[2];
    if (!optim_fx_setup(fx, &ctx, &opt, params) || !CHECK(steps > 1 && steps <= FX_MAX_STEPS)) goto done;
    const int n_states = fx_states(opt, which, names);

    /* 1. The free run: amp's own trajectory against torch's. */
    for (int t = 0; t < steps; t++) {
        for (int j = 0; j < FX_PARAMS; j++)
            if (!fx_copy(fx, j, "grad", t, params[j]->grad->data)) goto done;
        CHECK(amp_optimizer_step(opt) == AMP_OK);
        for (int j = 0; j < FX_PARAMS; j++) {
            const float *want = fx_row(fx, j, "param", t);
            char init_name[32];
            snprintf(init_name, sizeof init_name, "p%d.init", j);
            const fixture_tensor *init = fixture_find(fx, init_name);
            const float *before = t > 0 ? fx_row(fx, j, "param", t - 1) : init ? init->values : NULL;
            if (!CHECK(want != NULL && before != NULL)) goto done;
            stats_add(&free_run, params[j]->data, want, before, fx_numel[j], budget[j]);
            for (int k = 0; k < n_states; k++)
                stats_add_state(&free_run, amp_optimizer_state(opt, which[k], (size_t)j), fx_row(fx, j, names[k], t),
                                fx_numel[j]);
        }
    }
    CHECK_EQ_INT(amp_optimizer_step_count(opt), steps);

    /* 2. Single steps: amp's step t from torch's parameters and state after step t - 1. */
    for (int t = 1; t < steps; t++) {
        for (int j = 0; j < FX_PARAMS; j++) {
            if (!fx_copy(fx, j, "param", t - 1, params[j]->data) || !fx_copy(fx, j, "grad", t, params[j]->grad->data))
                goto done;
            for (int k = 0; k < n_states; k++)
                if (!fx_copy(fx, j, names[k], t - 1, amp_optimizer_state(opt, which[k], (size_t)j))) goto done;
        }
        CHECK(amp_optimizer_set_step_count(opt, t) == AMP_OK);
        CHECK(amp_optimizer_step(opt) == AMP_OK);
        for (int j = 0; j < FX_PARAMS; j++) {
            stats_add(&single, params[j]->data, fx_row(fx, j, "param", t), fx_row(fx, j, "param", t - 1), fx_numel[j],
                      NULL);
            for (int k = 0; k < n_states; k++)
                stats_add_state(&single, amp_optimizer_state(opt, which[k], (size_t)j), fx_row(fx, j, names[k], t),
                                fx_numel[j]);
        }
    }
    if (note)
        harness_note("%-17s free run: %llu/%llu params bit-exact (worst %.2f ulp), state %llu/%llu; single steps: "
                     "%llu/%llu (worst %.2f ulp), state %llu/%llu",
                     c->name, (unsigned long long)free_run.exact, (unsigned long long)free_run.values,
                     free_run.max_ulps, (unsigned long long)free_run.state_exact,
                     (unsigned long long)free_run.state_values, (unsigned long long)single.exact,
                     (unsigned long long)single.values, single.max_ulps, (unsigned long long)single.state_exact,
                     (unsigned long long)single.state_values);
    CHECK_MSG(free_run.max_ulps <= c->free_run_ulps, "%s: free run off by %.2f ulp, allowed %.2f", c->name,
              free_run.max_ulps, c->free_run_ulps);
    CHECK_MSG(single.max_ulps <= c->single_step_ulps, "%s: single steps off by %.2f ulp, allowed %.2f", c->name,
              single.max_ulps, c->single_step_ulps);
    /* The state never depends on the square root, so single steps reproduce it exactly. */
    CHECK_MSG(single.state_exact == single.state_values, "%s: %llu of %llu state values differ from torch's", c->name,
              (unsigned long long)(single.state_values - single.state_exact), (unsigned long long)single.state_values);
done:
    amp_optimizer_free(opt);
    amp_ctx_free(ctx);
    fixture_free(fx);
    free(fx);
}

/* What amp achieves against torch.optim (torch 2.15.0 on x86-64 with AVX-512 and MKL), per fixture,
 * two ways: the free run (amp's own 50 steps from the same start and gradients) and single steps
 * (each step t from torch's parameters and state after step t - 1):
 *   - SGD (plain, momentum + dampening, Nesterov, weight decay): bit-exact, parameters and momentum
 *     buffers, free run and single steps. Every operation is one fp32 operation or one fused
 *     multiply-add, as in ATen's CPU kernels, so there is nothing left to differ.
 *   - Adam, AdamW (with and without weight decay, beta1 < 0.5 for lerp's other form): exp_avg and
 *     exp_avg_sq bit-exact in every single step; parameters bit-exact in over 99% of single steps,
 *     the rest within 2 ulps of the update's scale. The one difference is the square root: torch's
 *     CPU sqrt here is MKL's vsSqrt (VML_HA), which is faithful but one ulp off the correctly rounded
 *     result for about 1 input in 6, while amp's sqrtf is correctly rounded; the division by
 *     sqrt(bias_correction2) that follows can make that two ulps of denom and so of the update.
 *     A replay of every single step in numpy with torch.sqrt substituted for a correctly rounded sqrt
 *     matched torch in all 13230 parameter values, so no other operation differs. The free run
 *     accumulates such steps (and, with L2 weight decay, feeds them back through the gradient): the
 *     bound is 2 in units of the per-step ulps summed over the steps so far (measured: at most 1).
 * Every SIMD path this CPU has is checked (the notes come from the first, the scalar reference). */
void test_optim_vs_pytorch(void) {
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!test_isa_begin(isa)) continue;
        for (size_t i = 0; i < sizeof optim_fx_cases / sizeof optim_fx_cases[0]; i++)
            run_optim_fixture(&optim_fx_cases[i], isa == 0);
    }
    test_isa_end();
}

/* ---- clip_grad_norm_ against torch ---- */

/* A context with fp32 parameters of the fixture shapes and an SGD optimizer over them. */
static bool fx_plain_setup(amp_ctx **ctx_out, amp_optimizer **opt_out, amp_tensor *params[FX_PARAMS]) {
    *opt_out = NULL;
    amp_ctx *ctx = *ctx_out = new_ctx();
    if (!ctx) return false;
    for (int j = 0; j < FX_PARAMS; j++) params[j] = amp_param_new(ctx, "p", AMP_F32, 1, &fx_numel[j]);
    if (!CHECK(amp_ctx_alloc_params(ctx) == AMP_OK)) return false;
    const amp_optim_config cfg = amp_optim_default_config(AMP_OPTIM_SGD);
    return CHECK(amp_optimizer_create(ctx, &cfg, opt_out) == AMP_OK);
}

/* torch computes the total norm in fp32 (a norm of per-tensor norms); amp sums squares in fp64 and
 * rounds the root once. The two agree to an ulp of fp32, and the clipped gradients (g * coef, coef
 * from that norm by torch's fp32 formula) then to an ulp. */
void test_optim_clip_vs_pytorch(void) {
    fixture *fx = calloc(1, sizeof *fx);
    if (!CHECK(fx != NULL) || !load_fixture("optim_clip", fx)) {
        free(fx);
        return;
    }
    int exact_norms = 0, cases = 0;
    uint64_t grads = 0, exact_grads = 0;
    for (int k = 0;; k++) {
        char name[32];
        snprintf(name, sizeof name, "c%d.max_norm", k);
        if (!fixture_find(fx, name)) break;
        cases++;
        const float max_norm = need_scalar(fx, name);
        snprintf(name, sizeof name, "c%d.norm", k);
        const float want_norm = need_scalar(fx, name);
        amp_ctx *ctx = NULL;
        amp_optimizer *opt = NULL;
        amp_tensor *params[FX_PARAMS];
        if (fx_plain_setup(&ctx, &opt, params)) {
            bool have = true;
            for (int j = 0; j < FX_PARAMS; j++) {
                snprintf(name, sizeof name, "c%d.g%d", k, j);
                const fixture_tensor *g = need(fx, name);
                if (!g || !CHECK(g->numel == fx_numel[j]))
                    have = false;
                else
                    memcpy(params[j]->grad->data, g->values, (size_t)g->numel * sizeof(float));
            }
            const double norm = have ? amp_optimizer_clip_grad_norm(opt, max_norm) : 0.0;
            const float norm32 = (float)norm;
            exact_norms += f32_bits(norm32) == f32_bits(want_norm);
            CHECK_MSG(fabs((double)norm32 - (double)want_norm) <= ulp_of(want_norm), "case %d: norm %.9g, torch %.9g",
                      k, norm, (double)want_norm);
            for (int j = 0; have && j < FX_PARAMS; j++) {
                snprintf(name, sizeof name, "c%d.clipped%d", k, j);
                const fixture_tensor *want = need(fx, name);
                if (!want) continue;
                const float *got = params[j]->grad->data;
                for (int64_t i = 0; i < want->numel; i++) {
                    grads++;
                    exact_grads += f32_bits(got[i]) == f32_bits(want->values[i]);
                    CHECK_MSG(fabs((double)got[i] - (double)want->values[i]) <= ulp_of(want->values[i]),
                              "case %d: clipped g%d[%lld] = %a, torch %a", k, j, (long long)i, (double)got[i],
                              (double)want->values[i]);
                }
            }
        }
        amp_optimizer_free(opt);
        amp_ctx_free(ctx);
    }
    CHECK(cases >= 4);
    harness_note("clip_grad_norm_: %d/%d norms and %llu/%llu clipped gradients bit-exact (the rest within 1 ulp)",
                 exact_norms, cases, (unsigned long long)exact_grads, (unsigned long long)grads);
    fixture_free(fx);
    free(fx);
}

/* ---- learning-rate schedules ---- */

/* Checks amp_lr_at(sc, t) against torch's values, t = 0 .. n-1, within one fp32 ulp (torch's lr is a
 * double updated recursively; amp's a closed form rounded once). Returns the bit-exact count. */
static int check_lr(const fixture *fx, const char *prefix, const amp_lr_schedule *sc, int *total) {
    char name[48];
    snprintf(name, sizeof name, "%s.lr", prefix);
    const fixture_tensor *want = need(fx, name);
    if (!want) return 0;
    int exact = 0;
    for (int64_t t = 0; t < want->numel; t++) {
        const float got = amp_lr_at(sc, t), w = want->values[t];
        exact += f32_bits(got) == f32_bits(w);
        CHECK_MSG(fabs((double)got - (double)w) <= ulp_of(w), "%s: step %lld: amp %.9g, torch %.9g", prefix,
                  (long long)t, (double)got, (double)w);
    }
    *total += (int)want->numel;
    return exact;
}

static float lr_param(const fixture *fx, const char *prefix, const char *what) {
    char name[48];
    snprintf(name, sizeof name, "%s.%s", prefix, what);
    return need_scalar(fx, name);
}

void test_optim_lr_schedules(void) {
    fixture *fx = calloc(1, sizeof *fx);
    if (!CHECK(fx != NULL) || !load_fixture("optim_lr", fx)) {
        free(fx);
        return;
    }
    int exact = 0, total = 0;
    const amp_lr_schedule step = {.kind = AMP_LR_STEP,
                                  .base_lr = lr_param(fx, "step", "base_lr"),
                                  .step_size = (int64_t)lr_param(fx, "step", "step_size"),
                                  .gamma = lr_param(fx, "step", "gamma")};
    exact += check_lr(fx, "step", &step, &total);
    const amp_lr_schedule cosine = {.kind = AMP_LR_COSINE,
                                    .base_lr = lr_param(fx, "cosine", "base_lr"),
                                    .total_steps = (int64_t)lr_param(fx, "cosine", "total"),
                                    .min_lr = lr_param(fx, "cosine", "min_lr")};
    exact += check_lr(fx, "cosine", &cosine, &total);
    const amp_lr_schedule warmup = {.kind = AMP_LR_CONSTANT,
                                    .base_lr = lr_param(fx, "warmup", "base_lr"),
                                    .warmup_steps = (int64_t)lr_param(fx, "warmup", "warmup")};
    exact += check_lr(fx, "warmup", &warmup, &total);
    const amp_lr_schedule warmup_cosine = {.kind = AMP_LR_COSINE,
                                           .base_lr = lr_param(fx, "warmup_cosine", "base_lr"),
                                           .warmup_steps = (int64_t)lr_param(fx, "warmup_cosine", "warmup"),
                                           .total_steps = (int64_t)lr_param(fx, "warmup_cosine", "total"),
                                           .min_lr = lr_param(fx, "warmup_cosine", "min_lr")};
    exact += check_lr(fx, "warmup_cosine", &warmup_cosine, &total);
    const amp_lr_schedule warmup_step = {.kind = AMP_LR_STEP,
                                         .base_lr = lr_param(fx, "warmup_step", "base_lr"),
                                         .warmup_steps = (int64_t)lr_param(fx, "warmup_step", "warmup"),
                                         .step_size = (int64_t)lr_param(fx, "warmup_step", "step_size"),
                                         .gamma = lr_param(fx, "warmup_step", "gamma")};
    exact += check_lr(fx, "warmup_step", &warmup_step, &total);
    harness_note("schedules: %d/%d learning rates bit-exact against torch (the rest within 1 ulp)", exact, total);
    CHECK(total >= 100);

    /* The closed forms at their edges. */
    CHECK(amp_lr_at(NULL, 3) == 0.0f);
    CHECK(amp_lr_at(&warmup, -5) == amp_lr_at(&warmup, 0));
    CHECK(amp_lr_at(&warmup, 0) == warmup.base_lr / (float)warmup.warmup_steps);
    CHECK(amp_lr_at(&warmup, warmup.warmup_steps - 1) == warmup.base_lr); /* full rate on the last warmup step */
    CHECK(amp_lr_at(&warmup, 1000000) == warmup.base_lr);
    CHECK(amp_lr_at(&cosine, 0) == cosine.base_lr);
    CHECK(amp_lr_at(&cosine, cosine.total_steps) == cosine.min_lr);
    CHECK(amp_lr_at(&cosine, cosine.total_steps + 100) == cosine.min_lr); /* stays (torch's would rise again) */
    CHECK(amp_lr_at(&warmup_cosine, warmup_cosine.warmup_steps) == warmup_cosine.base_lr);
    CHECK(amp_lr_at(&step, step.step_size - 1) == step.base_lr && amp_lr_at(&step, step.step_size) < step.base_lr);
    const amp_lr_schedule no_steps = {.kind = AMP_LR_STEP, .base_lr = 0.5f, .step_size = 0, .gamma = 0.1f};
    CHECK(amp_lr_at(&no_steps, 99) == 0.5f);
    const amp_lr_schedule constant = {.kind = AMP_LR_CONSTANT, .base_lr = 0.25f};
    CHECK(amp_lr_at(&constant, 0) == 0.25f && amp_lr_at(&constant, 1 << 30) == 0.25f);
    /* cosine is monotone from base to min */
    float prev = amp_lr_at(&cosine, 0);
    for (int64_t t = 1; t <= cosine.total_steps; t++) {
        const float lr = amp_lr_at(&cosine, t);
        CHECK_MSG(lr <= prev && lr >= cosine.min_lr, "cosine step %lld: %g after %g", (long long)t, (double)lr,
                  (double)prev);
        prev = lr;
    }
    fixture_free(fx);
    free(fx);
}

/* ---- master weights ---- */

/* A context with one parameter of `dtype` and n elements, all set to `value` (rounded to dtype). */
static amp_ctx *one_param_ctx(amp_dtype dtype, int64_t n, float value, amp_tensor **p) {
    amp_ctx *ctx = new_ctx();
    *p = ctx ? amp_param_new(ctx, "w", dtype, 1, &n) : NULL;
    if (!*p || !CHECK(amp_ctx_alloc_params(ctx) == AMP_OK)) {
        amp_ctx_free(ctx);
        *p = NULL;
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) test_elem_set(dtype, (*p)->data, (size_t)i, enc(dtype, value));
    return ctx;
}

static float elem_f32(amp_dtype dtype, const void *buf, size_t i) {
    return dtype == AMP_F32 ? ((const float *)buf)[i] : f32_from_bits(dec(dtype, test_elem_get(dtype, buf, i)));
}

/* Many updates far below the parameter's resolution: 1.0 - 1e-6 rounds back to 1.0 in bf16 (spacing
 * 2^-8 just below 1) and in f16 (2^-11), so a parameter updated in its own dtype never moves. The fp32
 * master accumulates them, and the parameter, rewritten from it, moves once the master has. */
static void master_accumulates(amp_dtype dtype, int steps) {
    const float lr = 1e-3f, grad = 1e-3f; /* update lr * grad = 1e-6 */
    amp_tensor *p = NULL;
    amp_ctx *ctx = one_param_ctx(dtype, 8, 1.0f, &p);
    if (!ctx) return;
    amp_optim_config cfg = amp_optim_default_config(AMP_OPTIM_SGD);
    cfg.lr = lr;
    amp_optimizer *opt = NULL;
    if (CHECK(amp_optimizer_create(ctx, &cfg, &opt) == AMP_OK)) {
        float *master = amp_optimizer_master(opt, 0);
        CHECK(master != NULL && (void *)master != p->data &&
              master == amp_optimizer_state(opt, AMP_OPTIM_STATE_MASTER, 0));
        CHECK(master[0] == 1.0f); /* made from the parameter, exactly */
        /* the same updates applied to a value of the parameter's dtype */
        float pure = 1.0f, reference = 1.0f;
        for (int s = 0; s < steps; s++) {
            for (int64_t i = 0; i < 8; i++) test_elem_set(dtype, p->grad->data, (size_t)i, enc(dtype, grad));
            CHECK(amp_optimizer_step(opt) == AMP_OK);
            const float g = elem_f32(dtype, p->grad->data, 0);
            pure = f32_from_bits(dec(dtype, enc(dtype, fmaf(g, -lr, pure))));
            reference = fmaf(g, -lr, reference); /* torch's fp32 SGD on the master */
        }
        CHECK_MSG(pure == 1.0f, "%s: a pure %s update moved (%g)", amp_dtype_name(dtype), amp_dtype_name(dtype),
                  (double)pure);
        CHECK_MSG(master[0] == reference, "%s: master %.9g, fp32 SGD %.9g", amp_dtype_name(dtype), (double)master[0],
                  (double)reference);
        const float written = elem_f32(dtype, p->data, 0);
        const float rne = f32_from_bits(dec(dtype, enc(dtype, master[0])));
        CHECK_MSG(written < 1.0f && written == rne, "%s: parameter %.9g after %d steps (master %.9g, rounded %.9g)",
                  amp_dtype_name(dtype), (double)written, steps, (double)master[0], (double)rne);
        CHECK(amp_optimizer_step_count(opt) == steps);
    }
    amp_optimizer_free(opt);
    amp_ctx_free(ctx);
}

/* Adam over F16 and BF16 parameters: the master's trajectory is exactly the trajectory of the same
 * optimizer over fp32 parameters holding the same values, and each step writes the parameter as the
 * master rounded to nearest even. */
static void master_tracks_fp32(amp_dtype dtype) {
    enum { N = 300, STEPS = 20 };
    amp_ctx *ctx = new_ctx(), *ref_ctx = new_ctx();
    if (!ctx || !ref_ctx) {
        amp_ctx_free(ctx);
        amp_ctx_free(ref_ctx);
        return;
    }
    const int64_t n = N;
    amp_tensor *p = amp_param_new(ctx, "w", dtype, 1, &n), *r = amp_param_new(ref_ctx, "w", AMP_F32, 1, &n);
    amp_optimizer *opt = NULL, *ref = NULL;
    amp_optim_config cfg = amp_optim_default_config(AMP_OPTIM_ADAMW);
    cfg.lr = 0.01f;
    test_rng rng = {.state = 42};
    if (CHECK(amp_ctx_alloc_params(ctx) == AMP_OK && amp_ctx_alloc_params(ref_ctx) == AMP_OK)) {
        for (size_t i = 0; i < N; i++) {
            const float v = ((float)test_rng_below(&rng, 20001) - 10000.0f) / 4096.0f;
            test_elem_set(dtype, p->data, i, enc(dtype, v));
            ((float *)r->data)[i] = elem_f32(dtype, p->data, i);
        }
        if (CHECK(amp_optimizer_create(ctx, &cfg, &opt) == AMP_OK &&
                  amp_optimizer_create(ref_ctx, &cfg, &ref) == AMP_OK)) {
            bool same = true, rounded = true;
            for (int s = 0; s < STEPS; s++) {
                for (size_t i = 0; i < N; i++) {
                    const float g = ((float)test_rng_below(&rng, 2001) - 1000.0f) / 1024.0f;
                    test_elem_set(dtype, p->grad->data, i, enc(dtype, g));
                    ((float *)r->grad->data)[i] = elem_f32(dtype, p->grad->data, i);
                }
                amp_optimizer_step(opt);
                amp_optimizer_step(ref);
                const float *m = amp_optimizer_master(opt, 0), *want = r->data;
                for (size_t i = 0; i < N; i++) {
                    same &= f32_bits(m[i]) == f32_bits(want[i]);
                    rounded &= test_elem_get(dtype, p->data, i) == enc(dtype, m[i]);
                }
            }
            CHECK_MSG(same, "%s: the master weights left the fp32 trajectory", amp_dtype_name(dtype));
            CHECK_MSG(rounded, "%s: a parameter is not its master rounded to nearest even", amp_dtype_name(dtype));
        }
    }
    amp_optimizer_free(opt);
    amp_optimizer_free(ref);
    amp_ctx_free(ctx);
    amp_ctx_free(ref_ctx);
}

void test_optim_master_weights(void) {
    master_accumulates(AMP_BF16, 20000); /* 0.02 below 1: the master passes bf16's 1 - 2^-9 midpoint */
    master_accumulates(AMP_F16, 2000);   /* 0.002 below 1: past f16's 1 - 2^-12 midpoint */
    master_tracks_fp32(AMP_BF16);
    master_tracks_fp32(AMP_F16);
    /* an F32 parameter is its own master */
    amp_tensor *p = NULL;
    amp_ctx *ctx = one_param_ctx(AMP_F32, 4, 0.5f, &p);
    amp_optimizer *opt = NULL;
    const amp_optim_config cfg = amp_optim_default_config(AMP_OPTIM_ADAM);
    if (ctx && CHECK(amp_optimizer_create(ctx, &cfg, &opt) == AMP_OK)) {
        CHECK((void *)amp_optimizer_master(opt, 0) == p->data);
        CHECK(amp_optimizer_state(opt, AMP_OPTIM_STATE_MASTER, 0) == NULL);
        CHECK(amp_optimizer_state(opt, AMP_OPTIM_STATE_MOMENTUM, 0) == NULL);
        CHECK(amp_optimizer_state(opt, AMP_OPTIM_STATE_EXP_AVG, 0) != NULL);
    }
    amp_optimizer_free(opt);
    amp_ctx_free(ctx);
}

/* ---- stochastic rounding ---- */

static float bf16_value(uint16_t b) { return amp_bf16_to_fp32(b); }
static float fp16_value(uint16_t b) { return amp_fp16_to_fp32(b); }

/* The rounding functions themselves: over every value of the random bits that matter, the results
 * average to x exactly (bf16: 16 bits; f16 normal range: 13 bits); special values pass through. */
static void sr_functions(void) {
    test_rng rng = {.state = 7};
    float xs[64];
    int nx = 0;
    const float fixed[] = {1.0f + 0x1p-20f,  -3.14159265f,        0x1.fffffep-1f, 1e-40f,           -1e-42f,
                           0x1.7f1234p+127f, 0x1p-14f + 0x1p-30f, 65500.0f,       -0x1.234568p-10f, 0x1.000002p-126f};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) xs[nx++] = fixed[i];
    while (nx < 64) { /* random fp32 in a wide exponent range, both signs */
        const uint32_t exp = 100 + test_rng_below(&rng, 50), frac = (uint32_t)test_rng_next(&rng) & 0x7FFFFFu;
        xs[nx++] = f32_from_bits((test_rng_below(&rng, 2) << 31) | (exp << 23) | frac);
    }
    for (int k = 0; k < nx; k++) {
        const float x = xs[k];
        /* bf16: the exact expectation over the 2^16 low random bits */
        double sum = 0.0;
        for (uint32_t r = 0; r < (1u << 16); r++) sum += bf16_value(optim_sr_bf16(x, r));
        CHECK_MSG(sum == 65536.0 * (double)x || fabsf(x) > AMP_BF16_MAX, "bf16 SR of %a: mean %a", (double)x,
                  sum / 65536.0);
        /* f16 normal range: over the 2^13 low random bits */
        if (fabsf(x) >= AMP_FP16_MIN_NORMAL && fabsf(x) <= AMP_FP16_MAX) {
            sum = 0.0;
            for (uint32_t r = 0; r < (1u << 13); r++) sum += fp16_value(optim_sr_fp16(x, r));
            CHECK_MSG(sum == 8192.0 * (double)x, "f16 SR of %a: mean %a", (double)x, sum / 8192.0);
        }
        /* the sign is symmetric, and the result is always one of the two neighbours */
        const uint32_t r = (uint32_t)test_rng_next(&rng);
        CHECK(optim_sr_bf16(-x, r) == (optim_sr_bf16(x, r) ^ 0x8000u));
        CHECK(optim_sr_fp16(-x, r) == (optim_sr_fp16(x, r) ^ 0x8000u));
    }
    /* f16 subnormals: spacing 2^-24, round up iff r < f * 2^32 */
    const float q = 5.25f; /* x = 5.25 * 2^-24: f = 1/4, threshold 2^30 */
    const float x = q * 0x1p-24f;
    CHECK(fp16_value(optim_sr_fp16(x, (1u << 30) - 1)) == 6.0f * 0x1p-24f);
    CHECK(fp16_value(optim_sr_fp16(x, 1u << 30)) == 5.0f * 0x1p-24f);
    CHECK(fp16_value(optim_sr_fp16(1e-30f, 0)) == 0x1p-24f && fp16_value(optim_sr_fp16(1e-30f, 1)) == 0.0f);
    CHECK(optim_sr_fp16(0x1.ffcp-15f, 0xFFFFFFFFu) == 0x03FFu); /* the largest subnormal stays */
    CHECK(optim_sr_fp16(0x1.ffep-15f, 0) == 0x0400u);           /* halfway to 2^-14: up with p = 1/2 */
    /* exact values never move; specials pass through; zeros keep their sign */
    for (uint32_t r = 0; r < 4096; r += 97) {
        CHECK(optim_sr_bf16(1.5f, r) == 0x3FC0u && optim_sr_fp16(1.5f, r) == 0x3E00u);
        CHECK(optim_sr_bf16(-0.0f, r) == 0x8000u && optim_sr_fp16(-0.0f, r) == 0x8000u);
        CHECK(optim_sr_bf16(INFINITY, r) == 0x7F80u && optim_sr_fp16(-INFINITY, r) == 0xFC00u);
        CHECK((optim_sr_bf16(NAN, r) & 0x7FFFu) > 0x7F80u && (optim_sr_fp16(NAN, r) & 0x7FFFu) > 0x7C00u);
        CHECK(optim_sr_fp16(65504.0f, r) == 0x7BFFu && optim_sr_fp16(1e6f, r) == 0x7C00u);
    }
    /* the counter-based bits: a pure function of (key, index) */
    const uint64_t key = optim_sr_key(1, 2);
    CHECK(optim_sr_bits(key, 5) == optim_sr_bits(optim_sr_key(1, 2), 5));
    CHECK(optim_sr_key(1, 2) != optim_sr_key(1, 3) && optim_sr_key(1, 2) != optim_sr_key(2, 2));
}

/* Through the optimizer: SGD with lr 0 keeps every master fixed and rewrites the parameters each step
 * with fresh random bits; over many steps each parameter's mean is its master. */
static void sr_expectation(amp_dtype dtype) {
    enum { N = 256, STEPS = 4096 };
    amp_tensor *p = NULL;
    amp_ctx *ctx = one_param_ctx(dtype, N, 0.0f, &p);
    if (!ctx) return;
    amp_optim_config cfg = amp_optim_default_config(AMP_OPTIM_SGD);
    cfg.lr = 0.0f;
    cfg.stochastic_rounding = true;
    cfg.seed = 1234;
    amp_optimizer *opt = NULL;
    static double mean[N];
    if (CHECK(amp_optimizer_create(ctx, &cfg, &opt) == AMP_OK)) {
        float *master = amp_optimizer_master(opt, 0);
        test_rng rng = {.state = 99};
        for (int i = 0; i < N; i++) { /* values between representable ones, over several binades */
            master[i] = (float)(1 + test_rng_below(&rng, 1u << 20)) / (float)(1u << (12 + i % 8));
            mean[i] = 0.0;
        }
        for (int s = 0; s < STEPS; s++) {
            amp_optimizer_step(opt);
            for (int i = 0; i < N; i++) mean[i] += elem_f32(dtype, p->data, (size_t)i);
        }
        double worst = 0.0;
        for (int i = 0; i < N; i++) {
            mean[i] /= STEPS;
            /* lo and hi around the master, its spacing, and the standard deviation of the mean */
            const uint32_t near = enc(dtype, master[i]); /* masters are positive */
            float lo = f32_from_bits(dec(dtype, near)), hi;
            if (lo > master[i]) {
                hi = lo;
                lo = f32_from_bits(dec(dtype, near - 1));
            } else {
                hi = f32_from_bits(dec(dtype, near + 1));
            }
            const double pr = ((double)master[i] - lo) / ((double)hi - lo);
            const double sigma = ((double)hi - lo) * sqrt(pr * (1 - pr) / STEPS);
            const double z = sigma > 0 ? fabs(mean[i] - master[i]) / sigma : (mean[i] == master[i] ? 0 : INFINITY);
            if (z > worst) worst = z;
        }
        /* 256 draws of |z|: above 5 has probability 1.5e-4 in total; the seed is fixed anyway */
        CHECK_MSG(worst < 5.0, "%s: a parameter's mean is %.2f standard deviations from its master",
                  amp_dtype_name(dtype), worst);
        harness_note("%s stochastic rounding: %d steps, worst |mean - master| = %.2f sigma", amp_dtype_name(dtype),
                     STEPS, worst);
    }
    amp_optimizer_free(opt);
    amp_ctx_free(ctx);
}

/* A deterministic gradient for element i at step s (several binades, both signs). */
static float sr_grad(int s, size_t i) {
    const uint32_t h = (uint32_t)((i * 2654435761u) ^ ((uint32_t)s * 40503u));
    return ((float)(h % 2001) - 1000.0f) / 512.0f;
}

/* Steps `from` .. `to` - 1 of a run: the gradients of each step, then the update. */
static void sr_run(amp_optimizer *opt, amp_tensor *p, int from, int to) {
    for (int s = from; s < to; s++) {
        for (size_t i = 0; i < (size_t)amp_tensor_numel(p); i++)
            test_elem_set(p->dtype, p->grad->data, i, enc(p->dtype, sr_grad(s, i)));
        CHECK(amp_optimizer_step(opt) == AMP_OK);
    }
}

/* A context with one `dtype` parameter of 1000 elements (initial values sr_grad(-1, i)) and AdamW
 * with stochastic rounding seeded with `seed`. */
static amp_ctx *sr_setup(amp_dtype dtype, uint64_t seed, amp_tensor **p, amp_optimizer **opt) {
    enum { N = 1000 };
    *opt = NULL;
    amp_ctx *ctx = one_param_ctx(dtype, N, 0.0f, p);
    if (!ctx) return NULL;
    for (size_t i = 0; i < N; i++) test_elem_set(dtype, (*p)->data, i, enc(dtype, sr_grad(-1, i)));
    amp_optim_config cfg = amp_optim_default_config(AMP_OPTIM_ADAMW);
    cfg.lr = 1e-3f;
    cfg.stochastic_rounding = true;
    cfg.seed = seed;
    CHECK(amp_optimizer_create(ctx, &cfg, opt) == AMP_OK);
    return ctx;
}

/* Same seed: the same bits; another seed: other bits; a run stopped at step K, saved (parameters,
 * optimizer state, step count), freed, rebuilt from the save and continued gives the uninterrupted
 * run's bits. */
static void sr_reproducible(amp_dtype dtype) {
    enum { K = 7, STEPS = 15 };
    amp_tensor *pa, *pb, *pc;
    amp_optimizer *a, *b, *c;
    amp_ctx *ca = sr_setup(dtype, 5, &pa, &a), *cb = sr_setup(dtype, 5, &pb, &b), *cc = sr_setup(dtype, 6, &pc, &c);
    if (a && b && c) {
        const size_t pbytes = (size_t)amp_tensor_numel(pa) * amp_dtype_size(dtype);
        sr_run(a, pa, 0, STEPS);
        sr_run(b, pb, 0, K);
        sr_run(c, pc, 0, STEPS);
        CHECK_MSG(memcmp(pa->data, pc->data, pbytes) != 0, "%s: seeds 5 and 6 rounded alike", amp_dtype_name(dtype));
        /* save b at step K */
        size_t state_bytes = 0, param_bytes = 0;
        void *state = amp_optimizer_state_memory(b, &state_bytes);
        void *params = amp_ctx_param_memory(cb, &param_bytes);
        void *saved_state = malloc(state_bytes), *saved_params = malloc(param_bytes);
        const int64_t saved_step = amp_optimizer_step_count(b);
        if (CHECK(state && state_bytes > 0 && saved_state && saved_params && saved_step == K)) {
            memcpy(saved_state, state, state_bytes);
            memcpy(saved_params, params, param_bytes);
            /* a new process: a fresh context and optimizer, then the save written back */
            amp_optimizer_free(b);
            amp_ctx_free(cb);
            cb = sr_setup(dtype, 5, &pb, &b);
            size_t sb = 0, pbb = 0;
            if (b && CHECK(amp_optimizer_state_memory(b, &sb) != NULL && sb == state_bytes)) {
                memcpy(amp_ctx_param_memory(cb, &pbb), saved_params, param_bytes);
                memcpy(amp_optimizer_state_memory(b, NULL), saved_state, state_bytes);
                CHECK(amp_optimizer_set_step_count(b, saved_step) == AMP_OK);
                sr_run(b, pb, K, STEPS);
                CHECK_MSG(memcmp(pa->data, pb->data, pbytes) == 0, "%s: the resumed run's parameters differ",
                          amp_dtype_name(dtype));
                CHECK_MSG(memcmp(amp_optimizer_master(a, 0), amp_optimizer_master(b, 0),
                                 (size_t)amp_tensor_numel(pa) * sizeof(float)) == 0,
                          "%s: the resumed run's masters differ", amp_dtype_name(dtype));
            }
        }
        free(saved_state);
        free(saved_params);
        /* same seed, uninterrupted: the same bits (a second run of a) */
        amp_tensor *pd;
        amp_optimizer *d;
        amp_ctx *cd = sr_setup(dtype, 5, &pd, &d);
        if (d) {
            sr_run(d, pd, 0, STEPS);
            CHECK(memcmp(pa->data, pd->data, pbytes) == 0);
        }
        amp_optimizer_free(d);
        amp_ctx_free(cd);
        /* the written parameter is always a neighbour of the master */
        const float *m = amp_optimizer_master(a, 0);
        bool neighbours = true;
        for (size_t i = 0; i < (size_t)amp_tensor_numel(pa); i++) {
            /* sign-magnitude patterns: the two neighbours of m are RNE(m) and the pattern next to it */
            const uint32_t rne = enc(dtype, m[i]), wb = test_elem_get(dtype, pa->data, i);
            neighbours &= wb == rne || wb == rne + 1 || wb == rne - 1;
        }
        CHECK_MSG(neighbours, "%s: a stochastically rounded parameter is not next to its master",
                  amp_dtype_name(dtype));
    }
    amp_optimizer_free(a);
    amp_optimizer_free(b);
    amp_optimizer_free(c);
    amp_ctx_free(ca);
    amp_ctx_free(cb);
    amp_ctx_free(cc);
}

void test_optim_stochastic_rounding(void) {
    sr_functions();
    sr_expectation(AMP_BF16);
    sr_expectation(AMP_F16);
    sr_reproducible(AMP_BF16);
    sr_reproducible(AMP_F16);
}

/* ---- the fused step ---- */

enum { FUSED_PARAMS = 3 };
static const int64_t fused_numel[FUSED_PARAMS] = {1000, 37, 70000}; /* the last spans three segments */

typedef struct fused_setup {
    amp_ctx *ctx;
    amp_optimizer *opt;
    amp_tensor *p[FUSED_PARAMS];
} fused_setup;

static float fused_init(size_t j, size_t i) { return ((float)((i * 7919u + j * 104729u) % 2001u) - 1000.0f) / 1000.0f; }
static float fused_grad(size_t j, size_t i, int step) {
    return ((float)((i * 2654435761u + j * 40503u + (unsigned)step * 977u) % 4001u) - 2000.0f) / 256.0f;
}

static bool fused_make(fused_setup *f, const amp_dtype dtypes[FUSED_PARAMS], const amp_optim_config *cfg) {
    memset(f, 0, sizeof *f);
    f->ctx = new_ctx();
    if (!f->ctx) return false;
    for (size_t j = 0; j < FUSED_PARAMS; j++) f->p[j] = amp_param_new(f->ctx, "p", dtypes[j], 1, &fused_numel[j]);
    if (!CHECK(amp_ctx_alloc_params(f->ctx) == AMP_OK)) return false;
    for (size_t j = 0; j < FUSED_PARAMS; j++)
        for (size_t i = 0; i < (size_t)fused_numel[j]; i++)
            test_elem_set(dtypes[j], f->p[j]->data, i, enc(dtypes[j], fused_init(j, i)));
    return CHECK(amp_optimizer_create(f->ctx, cfg, &f->opt) == AMP_OK);
}

static void fused_free(fused_setup *f) {
    amp_optimizer_free(f->opt);
    amp_ctx_free(f->ctx);
    memset(f, 0, sizeof *f);
}

/* Writes gradient `step` times `scale` (a power of two: exact) in each gradient's dtype. */
static void fused_set_grads(fused_setup *f, int step, float scale) {
    for (size_t j = 0; j < FUSED_PARAMS; j++) {
        const amp_dtype d = f->p[j]->grad->dtype;
        for (size_t i = 0; i < (size_t)fused_numel[j]; i++)
            test_elem_set(d, f->p[j]->grad->data, i, enc(d, fused_grad(j, i, step) * scale));
    }
}

/* Everything a step may change, as bytes: parameters, gradients, optimizer state, step count. */
typedef struct fused_snapshot {
    void *params, *grads, *state;
    size_t param_bytes, state_bytes;
    int64_t step;
} fused_snapshot;

static void snapshot_take(fused_snapshot *s, const fused_setup *f) {
    void *pm = amp_ctx_param_memory(f->ctx, &s->param_bytes), *gm = amp_ctx_grad_memory(f->ctx, NULL);
    void *st = amp_optimizer_state_memory(f->opt, &s->state_bytes);
    s->params = malloc(s->param_bytes);
    s->grads = malloc(s->param_bytes);
    s->state = malloc(s->state_bytes ? s->state_bytes : 1);
    if (s->params) memcpy(s->params, pm, s->param_bytes);
    if (s->grads) memcpy(s->grads, gm, s->param_bytes);
    if (s->state && s->state_bytes) memcpy(s->state, st, s->state_bytes);
    s->step = amp_optimizer_step_count(f->opt);
}

static bool snapshot_same(const fused_snapshot *s, const fused_setup *f) {
    return s->params && s->grads && s->state &&
           !memcmp(s->params, amp_ctx_param_memory(f->ctx, NULL), s->param_bytes) &&
           !memcmp(s->grads, amp_ctx_grad_memory(f->ctx, NULL), s->param_bytes) &&
           !memcmp(s->state, amp_optimizer_state_memory(f->opt, NULL), s->state_bytes) &&
           s->step == amp_optimizer_step_count(f->opt);
}

static void snapshot_free(fused_snapshot *s) {
    free(s->params);
    free(s->grads);
    free(s->state);
}

/* The fused step against unscale (g *= inv_scale), then amp_optimizer_clip_grad_norm, then
 * amp_optimizer_step, on two identical setups over several steps: the same bits everywhere. */
static void fused_matches_separate(const amp_optim_config *cfg, float scale, float max_norm) {
    const amp_dtype f32s[FUSED_PARAMS] = {AMP_F32, AMP_F32, AMP_F32};
    fused_setup a, b;
    const float inv_scale = 1.0f / scale;
    if (fused_make(&a, f32s, cfg) && fused_make(&b, f32s, cfg)) {
        bool same = true, norms = true, clipped_once = false;
        for (int step = 0; step < 4; step++) {
            fused_set_grads(&a, step, scale);
            fused_set_grads(&b, step, scale);
            amp_fused_result r;
            CHECK(amp_optimizer_fused_step(a.opt, inv_scale, max_norm, &r) == AMP_OK && !r.found_inf);
            for (size_t j = 0; j < FUSED_PARAMS; j++) {
                float *g = b.p[j]->grad->data;
                for (int64_t i = 0; i < fused_numel[j]; i++) g[i] *= inv_scale; /* unscale_ */
            }
            const double norm = amp_optimizer_clip_grad_norm(b.opt, max_norm);
            CHECK(amp_optimizer_step(b.opt) == AMP_OK);
            norms &= r.grad_norm == norm;
            clipped_once |= r.clip_coef < 1.0f;
            const float want_coef = max_norm > 0 ? fminf(1.0f, max_norm / ((float)norm + (float)1e-6)) : 1.0f;
            norms &= r.clip_coef == want_coef;
            size_t pbytes = 0, sbytes = 0;
            amp_ctx_param_memory(a.ctx, &pbytes);
            amp_optimizer_state_memory(a.opt, &sbytes);
            same &= !memcmp(amp_ctx_param_memory(a.ctx, NULL), amp_ctx_param_memory(b.ctx, NULL), pbytes);
            same &= !memcmp(amp_ctx_grad_memory(a.ctx, NULL), amp_ctx_grad_memory(b.ctx, NULL), pbytes);
            same &= sbytes == 0 ||
                    !memcmp(amp_optimizer_state_memory(a.opt, NULL), amp_optimizer_state_memory(b.opt, NULL), sbytes);
        }
        CHECK_MSG(same, "kind %d, scale %g, max_norm %g: fused and separate steps differ", (int)cfg->kind,
                  (double)scale, (double)max_norm);
        CHECK_MSG(norms, "kind %d, scale %g, max_norm %g: the fused step's norm or clip_coef differ", (int)cfg->kind,
                  (double)scale, (double)max_norm);
        if (max_norm > 0.0f && max_norm < 100.0f)
            CHECK_MSG(clipped_once, "max_norm %g never clipped", (double)max_norm);
        CHECK_EQ_INT(amp_optimizer_step_count(a.opt), 4);
    }
    fused_free(&a);
    fused_free(&b);
}

/* A non-finite gradient (given, or made by unscaling) skips the step and leaves everything as it was. */
static void fused_skips(const amp_optim_config *cfg, const amp_dtype dtypes[FUSED_PARAMS]) {
    fused_setup f;
    if (!fused_make(&f, dtypes, cfg)) {
        fused_free(&f);
        return;
    }
    /* one good step first, so that the state is not all zeros */
    fused_set_grads(&f, 0, 1024.0f);
    amp_fused_result r;
    CHECK(amp_optimizer_fused_step(f.opt, 1.0f / 1024.0f, 1.0f, &r) == AMP_OK && !r.found_inf);
    struct {
        size_t param;
        int64_t index;
        float value, inv_scale;
        const char *what;
    } cases[] = {
        {0, 3, INFINITY, 1.0f / 1024.0f, "+inf"},
        {2, 69999, -INFINITY, 1.0f / 1024.0f, "-inf in the last element"},
        {1, 0, NAN, 1.0f / 1024.0f, "NaN"},
        {2, 40000, 3e38f, 16.0f, "3e38 * 16 overflows after unscaling"},
        {0, 0, 0.0f, INFINITY, "inv_scale inf (a zero scale)"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const amp_dtype gd = f.p[cases[c].param]->grad->dtype;
        if (cases[c].value == 3e38f && gd == AMP_F16) continue; /* not an f16 value */
        fused_set_grads(&f, 1, 1.0f);
        if (cases[c].value != 0.0f)
            test_elem_set(gd, f.p[cases[c].param]->grad->data, (size_t)cases[c].index, enc(gd, cases[c].value));
        fused_snapshot s;
        snapshot_take(&s, &f);
        r = (amp_fused_result){.found_inf = false, .grad_norm = 0, .clip_coef = 0};
        CHECK(amp_optimizer_fused_step(f.opt, cases[c].inv_scale, 1.0f, &r) == AMP_OK);
        CHECK_MSG(r.found_inf && !isfinite(r.grad_norm) && r.clip_coef == 1.0f, "%s: found_inf %d, norm %g",
                  cases[c].what, r.found_inf, r.grad_norm);
        CHECK_MSG(snapshot_same(&s, &f), "%s: a skipped step changed something", cases[c].what);
        snapshot_free(&s);
    }
    CHECK_EQ_INT(amp_optimizer_step_count(f.opt), 1);
    /* and clipping alone leaves non-finite gradients as they are, returning the non-finite norm */
    fused_set_grads(&f, 2, 1.0f);
    test_elem_set(f.p[1]->grad->dtype, f.p[1]->grad->data, 5, enc(f.p[1]->grad->dtype, NAN));
    fused_snapshot s;
    snapshot_take(&s, &f);
    CHECK(isnan(amp_optimizer_clip_grad_norm(f.opt, 1.0f)) && snapshot_same(&s, &f));
    snapshot_free(&s);
    fused_free(&f);
}

/* F16 and BF16 gradients (under F16/BF16 parameters) are read as fp32: the masters follow exactly
 * the run of fp32 parameters given the same gradient values, and the gradients are stored back as the
 * unscaled, clipped values rounded to their dtype. */
static void fused_low_precision_grads(const amp_optim_config *cfg) {
    const amp_dtype low[FUSED_PARAMS] = {AMP_F16, AMP_BF16, AMP_BF16};
    const amp_dtype f32s[FUSED_PARAMS] = {AMP_F32, AMP_F32, AMP_F32};
    fused_setup a, b;
    if (fused_make(&a, low, cfg) && fused_make(&b, f32s, cfg)) {
        bool same = true, grads = true, rounded = true;
        /* b starts from a's rounded values and gets a's gradient values */
        for (size_t j = 0; j < FUSED_PARAMS; j++)
            for (size_t i = 0; i < (size_t)fused_numel[j]; i++)
                ((float *)b.p[j]->data)[i] = elem_f32(low[j], a.p[j]->data, i);
        for (int step = 0; step < 3; step++) {
            fused_set_grads(&a, step, 256.0f);
            for (size_t j = 0; j < FUSED_PARAMS; j++)
                for (size_t i = 0; i < (size_t)fused_numel[j]; i++)
                    ((float *)b.p[j]->grad->data)[i] = elem_f32(low[j], a.p[j]->grad->data, i);
            amp_fused_result ra, rb;
            CHECK(amp_optimizer_fused_step(a.opt, 1.0f / 256.0f, 50.0f, &ra) == AMP_OK && !ra.found_inf);
            CHECK(amp_optimizer_fused_step(b.opt, 1.0f / 256.0f, 50.0f, &rb) == AMP_OK && !rb.found_inf);
            same &= ra.grad_norm == rb.grad_norm && ra.clip_coef == rb.clip_coef;
            for (size_t j = 0; j < FUSED_PARAMS; j++) {
                const float *m = amp_optimizer_master(a.opt, j), *want = b.p[j]->data, *g32 = b.p[j]->grad->data;
                for (size_t i = 0; i < (size_t)fused_numel[j]; i++) {
                    same &= f32_bits(m[i]) == f32_bits(want[i]);
                    rounded &= test_elem_get(low[j], a.p[j]->data, i) == enc(low[j], m[i]);
                    grads &= test_elem_get(low[j], a.p[j]->grad->data, i) == enc(low[j], g32[i]);
                }
            }
        }
        CHECK_MSG(same, "F16/BF16 gradients: the masters left the fp32 run");
        CHECK_MSG(rounded, "F16/BF16 parameters are not their masters rounded to nearest even");
        CHECK_MSG(grads, "F16/BF16 gradients were not stored back as the unscaled, clipped values");
    }
    fused_free(&a);
    fused_free(&b);
}

/* One large optimizer (past OPTIM_PARALLEL_MIN, so the sweeps use the thread pool) stepped on every
 * SIMD path and with 1 and 3 threads: the same bits each time (the norm's partial sums are per
 * segment and added in order; every path's loops are the scalar ones, operation for operation).
 * The fp32 parameter's length is not a multiple of any loop's width, so every loop's tail runs. */
static void fused_same_bits_everywhere(const amp_optim_config *config) {
    const int64_t big = OPTIM_PARALLEL_MIN + 12345, tiny = 1000 + 27;
    amp_optim_config cfg = *config;
    cfg.stochastic_rounding = true;
    amp_isa isas[AMP_ISA_COUNT];
    const int n_isas = test_supported_isas(isas);
    const amp_isa before = amp_isa_active();
    const int threads = amp_get_num_threads();
    void *first = NULL;
    size_t first_bytes = 0;
    double first_norm = 0.0;
    for (int run = 0; run < 2 * n_isas; run++) {
        amp_ctx *ctx = new_ctx();
        if (!ctx) break;
        amp_tensor *p = amp_param_new(ctx, "big", AMP_BF16, 1, &big),
                   *q = amp_param_new(ctx, "tiny", AMP_F32, 1, &tiny);
        amp_optimizer *opt = NULL;
        if (CHECK(p && q && amp_ctx_alloc_params(ctx) == AMP_OK) &&
            CHECK(amp_optimizer_create(ctx, &cfg, &opt) == AMP_OK)) {
            amp_isa_set(isas[run / 2]);
            amp_set_num_threads(run % 2 ? 3 : 1);
            amp_fused_result r = {0};
            /* a scale that is not a power of two, with clipping: (g * inv_scale) * coef rounds twice */
            for (int step = 0; step < 2; step++) {
                for (int64_t i = 0; i < big; i++)
                    ((uint16_t *)p->grad->data)[i] = amp_bf16_from_fp32(fused_grad(0, (size_t)i, step) * 1000.0f);
                for (int64_t i = 0; i < tiny; i++)
                    ((float *)q->grad->data)[i] = fused_grad(1, (size_t)i, step) * 1000.0f;
                CHECK(amp_optimizer_fused_step(opt, 1.0f / 1000.0f, 100.0f, &r) == AMP_OK && !r.found_inf);
            }
            size_t pbytes = 0, sbytes = 0;
            const void *pm = amp_ctx_param_memory(ctx, &pbytes), *sm = amp_optimizer_state_memory(opt, &sbytes);
            if (!first) {
                first_bytes = pbytes + sbytes;
                first = malloc(first_bytes);
                if (first) memcpy(first, pm, pbytes), memcpy((char *)first + pbytes, sm, sbytes);
                first_norm = r.grad_norm;
                CHECK(r.clip_coef < 1.0f);
            } else if (first) {
                CHECK_MSG(pbytes + sbytes == first_bytes && !memcmp(first, pm, pbytes) &&
                              !memcmp((const char *)first + pbytes, sm, sbytes) && r.grad_norm == first_norm,
                          "%s path, %d threads: other bits than the %s path with 1 thread", amp_isa_name(isas[run / 2]),
                          run % 2 ? 3 : 1, amp_isa_name(isas[0]));
            }
        }
        amp_optimizer_free(opt);
        amp_ctx_free(ctx);
    }
    free(first);
    amp_isa_set(before);
    amp_set_num_threads(threads);
}

void test_optim_fused_step(void) {
    amp_optim_config adamw = amp_optim_default_config(AMP_OPTIM_ADAMW);
    amp_optim_config adam = amp_optim_default_config(AMP_OPTIM_ADAM);
    adam.weight_decay = 0.01f;
    amp_optim_config sgd = amp_optim_default_config(AMP_OPTIM_SGD);
    sgd.lr = 0.01f;
    sgd.momentum = 0.9f;
    sgd.nesterov = true;
    sgd.weight_decay = 1e-4f;
    const amp_optim_config *cfgs[3] = {&adamw, &adam, &sgd};
    for (int k = 0; k < 3; k++) {
        fused_matches_separate(cfgs[k], 1024.0f, 10.0f); /* clips (norms in the hundreds) */
        fused_matches_separate(cfgs[k], 65536.0f, 0.0f); /* no clipping */
        fused_matches_separate(cfgs[k], 1000.0f, 1e6f);  /* inv_scale not a power of two; coef 1 */
    }
    const amp_dtype all_f32[FUSED_PARAMS] = {AMP_F32, AMP_F32, AMP_F32};
    const amp_dtype mixed[FUSED_PARAMS] = {AMP_BF16, AMP_F16, AMP_F32};
    fused_skips(&adamw, all_f32);
    fused_skips(&sgd, mixed);
    adamw.stochastic_rounding = true;
    fused_skips(&adamw, mixed);
    adamw.stochastic_rounding = false;
    fused_low_precision_grads(&adamw);
    fused_low_precision_grads(&sgd);
    fused_same_bits_everywhere(&adamw);
    sgd.nesterov = false;
    fused_same_bits_everywhere(&sgd); /* fp32 gradients take the one-sweep unscale + update */
}

/* ---- arguments, allocation ---- */

/* An allocator that counts calls and can be told to fail from the n-th call on. */
typedef struct counting_alloc {
    uint64_t calls, allocs, frees; /* calls: including refused ones */
    uint64_t fail_from;            /* refuse calls from this one on (1-based); 0: never */
} counting_alloc;

static void *counting_malloc(size_t size, size_t align, void *user) {
    counting_alloc *c = user;
    c->calls++;
    if (c->fail_from && c->calls >= c->fail_from) return NULL;
    void *p = NULL;
    if (align < sizeof(void *)) align = sizeof(void *);
    if (posix_memalign(&p, align, size ? size : 1) != 0) return NULL;
    c->allocs++;
    return p;
}

static void counting_free(void *p, void *user) {
    counting_alloc *c = user;
    if (p) c->frees++;
    free(p);
}

static amp_ctx *counting_ctx(counting_alloc *c) {
    amp_ctx_config cfg = amp_ctx_default_config();
    cfg.arena_bytes = 1 << 16;
    cfg.allocator = (amp_allocator){.alloc = counting_malloc, .free = counting_free, .user = c};
    amp_ctx *ctx = NULL;
    CHECK(amp_ctx_create(&cfg, &ctx) == AMP_OK);
    return ctx;
}

static void config_checks(amp_ctx *ctx) {
    amp_optimizer *opt = (amp_optimizer *)&opt; /* not NULL: create must clear it on failure */
    const amp_optim_config sgd = amp_optim_default_config(AMP_OPTIM_SGD);
    const amp_optim_config adam = amp_optim_default_config(AMP_OPTIM_ADAM);
    amp_optim_config c;
#define BAD(base, field, value)                                                                                        \
    do {                                                                                                               \
        c = (base);                                                                                                    \
        c.field = (value);                                                                                             \
        CHECK_MSG(amp_optimizer_create(ctx, &c, &opt) == AMP_ERR_INVALID_ARGUMENT && opt == NULL, "%s = %s accepted",  \
                  #field, #value);                                                                                     \
    } while (0)
    BAD(sgd, lr, -1e-3f);
    BAD(sgd, lr, NAN);
    BAD(sgd, lr, INFINITY);
    BAD(sgd, momentum, -0.1f);
    BAD(sgd, weight_decay, -1e-4f);
    BAD(sgd, nesterov, true); /* without momentum */
    BAD(sgd, dampening, NAN);
    BAD(adam, beta1, 1.0f);
    BAD(adam, beta1, -0.1f);
    BAD(adam, beta2, 1.5f);
    BAD(adam, beta2, NAN);
    BAD(adam, eps, -1e-8f);
    BAD(adam, weight_decay, NAN);
    BAD(adam, kind, (amp_optim_kind)7);
    c = sgd;
    c.momentum = 0.9f, c.nesterov = true, c.dampening = 0.1f; /* torch: Nesterov needs zero dampening */
    CHECK(amp_optimizer_create(ctx, &c, &opt) == AMP_ERR_INVALID_ARGUMENT);
#undef BAD
    /* the defaults are torch's */
    CHECK(sgd.lr == 1e-3f && sgd.momentum == 0 && sgd.dampening == 0 && !sgd.nesterov && sgd.weight_decay == 0);
    CHECK(adam.lr == 1e-3f && adam.beta1 == 0.9f && adam.beta2 == 0.999f && adam.eps == 1e-8f &&
          adam.weight_decay == 0);
    CHECK(amp_optim_default_config(AMP_OPTIM_ADAMW).weight_decay == 1e-2f);
    CHECK(!adam.stochastic_rounding);
}

void test_optim_arguments(void) {
    counting_alloc counter = {0, 0, 0, 0};
    amp_ctx *ctx = counting_ctx(&counter);
    if (!ctx) return;
    const amp_optim_config sgd = amp_optim_default_config(AMP_OPTIM_SGD);
    amp_optimizer *opt = NULL;
    /* before the parameters are allocated */
    const int64_t n4 = 4, n6 = 6;
    amp_tensor *a = amp_param_new(ctx, "a", AMP_F32, 1, &n4);
    amp_tensor *b = amp_param_new(ctx, "b", AMP_BF16, 1, &n6);
    amp_tensor *c = amp_param_new(ctx, "c", AMP_F16, 1, &n4);
    CHECK(amp_optimizer_create(ctx, &sgd, &opt) == AMP_ERR_INVALID_ARGUMENT && opt == NULL);
    CHECK(amp_ctx_alloc_params(ctx) == AMP_OK);
    config_checks(ctx);
    /* NULLs */
    CHECK(amp_optimizer_create(NULL, &sgd, &opt) == AMP_ERR_NULL_POINTER && opt == NULL);
    CHECK(amp_optimizer_create(ctx, NULL, &opt) == AMP_ERR_NULL_POINTER);
    CHECK(amp_optimizer_create(ctx, &sgd, NULL) == AMP_ERR_NULL_POINTER);
    CHECK(amp_optimizer_create_for(ctx, &sgd, NULL, 2, &opt) == AMP_ERR_NULL_POINTER);
    CHECK(amp_optimizer_create_for(ctx, &sgd, NULL, 0, &opt) == AMP_ERR_INVALID_ARGUMENT); /* empty list */
    amp_tensor *with_null[2] = {a, NULL};
    CHECK(amp_optimizer_create_for(ctx, &sgd, with_null, 2, &opt) == AMP_ERR_NULL_POINTER);
    /* a tensor that is not one of ctx's parameters; the same parameter twice */
    amp_tensor *arena = amp_tensor_zeros(ctx, AMP_F32, 1, &n4);
    amp_tensor *foreign[2] = {a, arena};
    CHECK(amp_optimizer_create_for(ctx, &sgd, foreign, 2, &opt) == AMP_ERR_INVALID_ARGUMENT && opt == NULL);
    amp_tensor *twice[3] = {a, b, a};
    CHECK(amp_optimizer_create_for(ctx, &sgd, twice, 3, &opt) == AMP_ERR_INVALID_ARGUMENT);
    /* an fp8 parameter */
    amp_ctx *ctx8 = new_ctx();
    if (ctx8) {
        amp_param_new(ctx8, "f8", AMP_F8E4M3, 1, &n4);
        CHECK(amp_ctx_alloc_params(ctx8) == AMP_OK);
        CHECK(amp_optimizer_create(ctx8, &sgd, &opt) == AMP_ERR_UNSUPPORTED_DTYPE && opt == NULL);
        amp_ctx_free(ctx8);
    }
    /* NULL optimizer: free is fine, accessors answer neutrally, actions refuse */
    amp_optimizer_free(NULL);
    CHECK(amp_optimizer_num_params(NULL) == 0 && amp_optimizer_param(NULL, 0) == NULL);
    CHECK(amp_optimizer_step_count(NULL) == 0 && amp_optimizer_get_lr(NULL) == 0.0f);
    amp_optimizer_set_lr(NULL, 1.0f);
    CHECK(amp_optimizer_master(NULL, 0) == NULL && amp_optimizer_state(NULL, AMP_OPTIM_STATE_MASTER, 0) == NULL);
    size_t bytes = 99;
    CHECK(amp_optimizer_state_memory(NULL, &bytes) == NULL && bytes == 0);
    CHECK(amp_optimizer_step(NULL) == AMP_ERR_NULL_POINTER);
    CHECK(amp_optimizer_set_step_count(NULL, 1) == AMP_ERR_NULL_POINTER);
    CHECK(isnan(amp_optimizer_clip_grad_norm(NULL, 1.0f)));
    amp_fused_result r = {.found_inf = true, .grad_norm = 5, .clip_coef = 5};
    CHECK(amp_optimizer_fused_step(NULL, 1.0f, 0.0f, &r) == AMP_ERR_NULL_POINTER && !r.found_inf);

    /* a subset optimizer: only its parameters move */
    amp_tensor *subset[2] = {c, a};
    amp_optim_config mom = sgd;
    mom.momentum = 0.9f;
    mom.lr = 0.5f;
    if (CHECK(amp_optimizer_create_for(ctx, &mom, subset, 2, &opt) == AMP_OK)) {
        CHECK(amp_optimizer_num_params(opt) == 2 && amp_optimizer_param(opt, 0) == c &&
              amp_optimizer_param(opt, 1) == a);
        CHECK(amp_optimizer_param(opt, 2) == NULL && amp_optimizer_master(opt, 2) == NULL);
        CHECK(amp_optimizer_state(opt, AMP_OPTIM_STATE_MOMENTUM, 1) != NULL);
        CHECK(amp_optimizer_state(opt, AMP_OPTIM_STATE_EXP_AVG, 0) == NULL);
        CHECK(amp_optimizer_state(opt, AMP_OPTIM_STATE_MASTER, 0) != NULL);
        CHECK(amp_optimizer_state(opt, (amp_optim_state)9, 0) == NULL);
        CHECK(amp_optimizer_get_lr(opt) == 0.5f);
        amp_optimizer_set_lr(opt, -1.0f); /* ignored */
        amp_optimizer_set_lr(opt, NAN);   /* ignored */
        CHECK(amp_optimizer_get_lr(opt) == 0.5f);
        amp_optimizer_set_lr(opt, 0.25f);
        CHECK(amp_optimizer_get_lr(opt) == 0.25f);
        CHECK(amp_optimizer_set_step_count(opt, -1) == AMP_ERR_INVALID_ARGUMENT);
        CHECK(amp_optimizer_fused_step(opt, 1.0f, NAN, &r) == AMP_ERR_INVALID_ARGUMENT);
        size_t sb = 0;
        CHECK(amp_optimizer_state_memory(opt, &sb) != NULL && sb >= (4 + 6 * 0 + 4 + 4) * sizeof(float));
        for (int i = 0; i < 4; i++) {
            ((float *)a->grad->data)[i] = 1.0f;
            ((uint16_t *)b->grad->data)[i] = 0x3F80; /* bf16 1.0 */
            ((uint16_t *)c->grad->data)[i] = 0x3C00; /* f16 1.0 */
        }
        const uint16_t b0 = ((uint16_t *)b->data)[0];
        /* Steady state: no allocation in any kind of step. */
        CHECK(amp_optimizer_step(opt) == AMP_OK);
        const uint64_t allocs = counter.allocs, heap = amp_ctx_heap_allocations(ctx);
        for (int s = 0; s < 10; s++) {
            CHECK(amp_optimizer_step(opt) == AMP_OK);
            CHECK(amp_optimizer_fused_step(opt, 0.5f, 1.0f, &r) == AMP_OK && !r.found_inf);
            amp_optimizer_clip_grad_norm(opt, 0.1f);
            amp_optimizer_set_lr(
                opt, amp_lr_at(&(amp_lr_schedule){.kind = AMP_LR_COSINE, .base_lr = 0.25f, .total_steps = 10}, s));
        }
        CHECK_MSG(counter.allocs == allocs && amp_ctx_heap_allocations(ctx) == heap, "steps made %llu heap allocations",
                  (unsigned long long)(counter.allocs - allocs));
        CHECK(((float *)a->data)[0] < 0.0f && ((uint16_t *)b->data)[0] == b0); /* b is not in this optimizer */
        CHECK(amp_optimizer_step_count(opt) == 21);
    }
    amp_optimizer_free(opt);
    opt = NULL;
    /* allocation failure: every allocation create makes can fail, and nothing leaks (ASan) */
    const uint64_t before = counter.calls;
    CHECK(amp_optimizer_create_for(ctx, &sgd, twice, 2, &opt) == AMP_OK);
    const uint64_t create_allocs = counter.calls - before;
    amp_optimizer_free(opt);
    CHECK(create_allocs >= 1);
    for (uint64_t k = 0; k < create_allocs; k++) {
        counter.fail_from = counter.calls + 1 + k;
        opt = (amp_optimizer *)&opt;
        CHECK(amp_optimizer_create_for(ctx, &sgd, twice, 2, &opt) == AMP_ERR_OUT_OF_MEMORY && opt == NULL);
        counter.fail_from = 0;
    }
    amp_ctx_free(ctx);
    CHECK_MSG(counter.allocs == counter.frees, "%llu allocations, %llu frees", (unsigned long long)counter.allocs,
              (unsigned long long)counter.frees);
}
