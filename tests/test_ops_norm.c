/* Layer norm and batch norm against double-precision references written here (gradcheck.h), in f32,
 * f16 and bf16; batch norm's running statistics against their closed form; errors, mixed dtypes
 * and NaN propagation.
 *
 * Tolerances (factors of the dtype's unit roundoff u, see gradcheck.h), per dtype because the error
 * sources differ:
 *   - f16, bf16: every operand amp reads (inputs, seed gradient) is representable and is exactly what
 *     the reference sees, and amp computes in fp32, so the error is the one rounding of each result
 *     (<= u/2 |ref|) plus fp32 noise, which is below u even for ill-conditioned rows. LOWP_FACTOR 2.
 *     Measured over 1400 seeds: at most 0.50 u (in units of u * (max|ref| + |ref|)).
 *   - f32: the fp32 noise is the whole error, and normalization amplifies it by the condition number
 *     of the row (|x| / std: the mean's rounding u |x| shifts every deviation), and the backward
 *     formula cancels (dy - mean(dy) - xhat mean(dy xhat)). Measured over 1400 seeds: median 1.4 u,
 *     worst 49 u (batch norm's dx over 4 values with an unlucky small spread). F32_FACTOR 256
 *     (1.5e-5 of the largest value) is still far below any indexing or formula error (>= 1e-2). */
#include <math.h>
#include <string.h>

#include "gradcheck.h"
#include "harness.h"
#include "test_util.h"
#include "tests.h"

#define EPS 1e-5f
#define LOWP_FACTOR 2
#define F32_FACTOR 256

/* f32 first at f32_factor, then f16 and bf16 at the check's own (low-precision) factors: the two
 * error sources differ too much for one factor of u to fit both (see the top of this file). */
static void run_dtypes(gradcheck c, double f32_factor) {
    gradcheck f32 = c;
    f32.rtol_factor = f32.atol_factor = f32_factor;
    gradcheck_run(&f32, AMP_F32);
    gradcheck_run(&c, AMP_F16);
    gradcheck_run(&c, AMP_BF16);
}

/* ---- layer norm: x [3, 2, 5] over the last dim, with optional weight and bias [5] ---- */

enum { LN_ROWS = 6, LN_D = 5 };

typedef struct {
    bool weight, bias;
} ln_user;

static amp_tensor *build_layer_norm(amp_ctx *ctx, amp_tensor *const *in, const void *user) {
    const ln_user *u = user;
    int k = 1;
    amp_tensor *w = u->weight ? in[k++] : NULL;
    amp_tensor *b = u->bias ? in[k++] : NULL;
    amp_tensor *out = amp_layer_norm(ctx, in[0], w, b, EPS);
    if (out) {
        CHECK_EQ_INT(out->op, AMP_OP_LAYER_NORM);
        CHECK_EQ_INT(out->compute_dtype, in[0]->dtype);
        CHECK_EQ_INT(out->dtype, in[0]->dtype);
    }
    return out;
}

static void ref_layer_norm(const double *const *in, double *out, const void *user) {
    const ln_user *u = user;
    int k = 1;
    const double *w = u->weight ? in[k++] : NULL;
    const double *b = u->bias ? in[k++] : NULL;
    for (int r = 0; r < LN_ROWS; r++) {
        const double *x = in[0] + r * LN_D;
        double mean = 0, var = 0;
        for (int j = 0; j < LN_D; j++) mean += x[j];
        mean /= LN_D;
        for (int j = 0; j < LN_D; j++) var += (x[j] - mean) * (x[j] - mean);
        var /= LN_D;
        const double rstd = 1.0 / sqrt(var + (double)EPS);
        for (int j = 0; j < LN_D; j++) out[r * LN_D + j] = (x[j] - mean) * rstd * (w ? w[j] : 1.0) + (b ? b[j] : 0.0);
    }
}

void test_ops_layer_norm(void) {
    const ln_user users[3] = {{true, true}, {false, false}, {true, false}};
    const char *names[3] = {"layer_norm", "layer_norm no affine", "layer_norm weight only"};
    for (int v = 0; v < 3; v++) {
        gradcheck c = {.name = names[v],
                       .n_inputs = 1,
                       .inputs = {{.ndim = 3, .shape = {3, 2, LN_D}}},
                       .build = build_layer_norm,
                       .reference = ref_layer_norm,
                       .user = &users[v],
                       .rtol_factor = LOWP_FACTOR};
        if (users[v].weight)
            c.inputs[c.n_inputs++] = (gradcheck_input){.ndim = 1, .shape = {LN_D}, .lo = 0.5f, .hi = 1.5f};
        if (users[v].bias) c.inputs[c.n_inputs++] = (gradcheck_input){.ndim = 1, .shape = {LN_D}};
        run_dtypes(c, F32_FACTOR);
    }

    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    /* mixed dtypes, PyTorch's rule for norms: f16 x with an f32 weight computes and returns f16 */
    const float xs[8] = {1, 2, 3, 4, -1, 0, 1, NAN};
    amp_tensor *x = amp_tensor_from(ctx, AMP_F16, 2, (const int64_t[]){2, 4}, xs, AMP_F32);
    amp_tensor *w = amp_tensor_from(ctx, AMP_F32, 1, (const int64_t[]){4}, (const float[]){1, 1, 1, 1}, AMP_F32);
    amp_tensor *y = amp_layer_norm(ctx, x, w, NULL, EPS);
    if (CHECK(y != NULL)) {
        CHECK_EQ_INT(y->dtype, AMP_F16);
        CHECK_EQ_INT(y->compute_dtype, AMP_F16);
        /* row 0: mean 2.5, var 1.25: (1 - 2.5) / sqrt(1.25 + eps), rounded once to f16 */
        CHECK(amp_tensor_get(y, 0) == amp_fp16_to_fp32(amp_fp16_from_fp32((float)(-1.5 / sqrt(1.25 + 1e-5)))));
        /* a NaN poisons its own row only */
        for (int j = 4; j < 8; j++) CHECK_MSG(isnan(amp_tensor_get(y, j)), "element %d not NaN", j);
        for (int j = 0; j < 4; j++) CHECK(isfinite(amp_tensor_get(y, j)));
    }
    /* a weight of the wrong length */
    amp_tensor *w3 = amp_tensor_zeros(ctx, AMP_F16, 1, (const int64_t[]){3});
    CHECK(amp_layer_norm(ctx, x, w3, NULL, EPS) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(amp_ctx_error(ctx), "layer_norm") != NULL, "error: %s", amp_ctx_error(ctx));
    amp_ctx_free(ctx);
}

/* ---- batch norm ---- */

typedef struct {
    int n, c, s; /* x [n, c] (s == 0) or [n, c, h, w] with h*w = s */
    int64_t h, w;
    bool training;
} bn_user;

/* inputs: x, weight, bias, and in evaluation mode running_mean, running_var (not differentiated) */
static amp_tensor *build_batch_norm(amp_ctx *ctx, amp_tensor *const *in, const void *user) {
    const bn_user *u = user;
    amp_tensor *out = amp_batch_norm(ctx, in[0], in[1], in[2], u->training ? NULL : in[3], u->training ? NULL : in[4],
                                     u->training, 0.1f, EPS);
    if (out) {
        CHECK_EQ_INT(out->op, AMP_OP_BATCH_NORM);
        CHECK_EQ_INT(out->compute_dtype, in[0]->dtype);
    }
    return out;
}

static void ref_batch_norm(const double *const *in, double *out, const void *user) {
    const bn_user *u = user;
    const int sp = u->s ? u->s : 1, cnt = u->n * sp;
    for (int c = 0; c < u->c; c++) {
        double mean = 0, var = 0;
        if (u->training) {
            for (int i = 0; i < u->n; i++)
                for (int k = 0; k < sp; k++) mean += in[0][(i * u->c + c) * sp + k];
            mean /= cnt;
            for (int i = 0; i < u->n; i++)
                for (int k = 0; k < sp; k++) {
                    const double d = in[0][(i * u->c + c) * sp + k] - mean;
                    var += d * d;
                }
            var /= cnt;
        } else {
            mean = in[3][c], var = in[4][c];
        }
        const double rstd = 1.0 / sqrt(var + (double)EPS);
        for (int i = 0; i < u->n; i++)
            for (int k = 0; k < sp; k++) {
                const int idx = (i * u->c + c) * sp + k;
                out[idx] = (in[0][idx] - mean) * rstd * in[1][c] + in[2][c];
            }
    }
}

/* One training step on x [N, C, H, W] with known running statistics, checked against the closed form
 * running = 0.9 running + 0.1 stat (unbiased variance); then evaluation with them. fp32 buffers with
 * an x of dtype `dt` (the mixed-precision layout: statistics stay fp32). */
static void check_running_stats(amp_dtype dt) {
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    enum { N = 3, C = 2, S = 4 };
    float xs[N * C * S];
    for (int i = 0; i < N * C * S; i++) xs[i] = (float)((i * 7) % 11) * 0.25f - 1.0f; /* exact in every dtype */
    const float rm0[C] = {0.5f, -1.0f}, rv0[C] = {2.0f, 0.25f};
    amp_tensor *x = amp_tensor_from(ctx, dt, 4, (const int64_t[]){N, C, 2, 2}, xs, AMP_F32);
    amp_tensor *rm = amp_tensor_from(ctx, AMP_F32, 1, (const int64_t[]){C}, rm0, AMP_F32);
    amp_tensor *rv = amp_tensor_from(ctx, AMP_F32, 1, (const int64_t[]){C}, rv0, AMP_F32);
    amp_tensor *y = amp_batch_norm(ctx, x, NULL, NULL, rm, rv, true, 0.1f, EPS);
    if (!CHECK_MSG(y != NULL, "batch_norm failed: %s", amp_ctx_error(ctx))) goto done;
    CHECK_EQ_INT(y->dtype, dt);
    double mean[C], var[C];
    for (int c = 0; c < C; c++) {
        double s = 0, q = 0;
        for (int i = 0; i < N; i++)
            for (int k = 0; k < S; k++) s += xs[(i * C + c) * S + k];
        mean[c] = s / (N * S);
        for (int i = 0; i < N; i++)
            for (int k = 0; k < S; k++) q += (xs[(i * C + c) * S + k] - mean[c]) * (xs[(i * C + c) * S + k] - mean[c]);
        var[c] = q / (N * S);
        const double want_m = 0.9 * rm0[c] + 0.1 * mean[c];
        const double want_v = 0.9 * rv0[c] + 0.1 * var[c] * (N * S) / (N * S - 1.0);
        CHECK_MSG(fabs(amp_tensor_get(rm, c) - want_m) <= 1e-6 * (1 + fabs(want_m)),
                  "%s running_mean[%d] %.9g, want %.9g", amp_dtype_name(dt), c, amp_tensor_get(rm, c), want_m);
        CHECK_MSG(fabs(amp_tensor_get(rv, c) - want_v) <= 1e-6 * (1 + fabs(want_v)),
                  "%s running_var[%d] %.9g, want %.9g", amp_dtype_name(dt), c, amp_tensor_get(rv, c), want_v);
        /* the batch statistics normalized the output: element 0 of channel c */
        const double want_y = (xs[c * S] - mean[c]) / sqrt(var[c] + 1e-5);
        CHECK_MSG(fabs(amp_tensor_get(y, c * S) - want_y) <= 2 * gradcheck_unit_roundoff(dt) * (1 + fabs(want_y)),
                  "%s y[%d] %.9g, want %.9g", amp_dtype_name(dt), c * S, amp_tensor_get(y, c * S), want_y);
    }
    /* evaluation normalizes with the (updated) running statistics and leaves them alone */
    float rm1[C], rv1[C];
    amp_tensor_read(rm, rm1, AMP_F32);
    amp_tensor_read(rv, rv1, AMP_F32);
    amp_tensor *ye = amp_batch_norm(ctx, x, NULL, NULL, rm, rv, false, 0.1f, EPS);
    if (CHECK(ye != NULL)) {
        for (int c = 0; c < C; c++) {
            CHECK(amp_tensor_get(rm, c) == rm1[c] && amp_tensor_get(rv, c) == rv1[c]);
            const double want = (xs[C * S + c * S + 1] - (double)rm1[c]) / sqrt((double)rv1[c] + 1e-5);
            const float got = amp_tensor_get(ye, C * S + c * S + 1);
            CHECK_MSG(fabs(got - want) <= 2 * gradcheck_unit_roundoff(dt) * (1 + fabs(want)), "%s eval %.9g, want %.9g",
                      amp_dtype_name(dt), got, want);
        }
    }
    /* momentum 1 makes the running statistics the batch's (a second closed form) */
    CHECK(amp_batch_norm(ctx, x, NULL, NULL, rm, rv, true, 1.0f, EPS) != NULL);
    for (int c = 0; c < C; c++) {
        CHECK(fabs(amp_tensor_get(rm, c) - mean[c]) <= 1e-6);
        CHECK(fabs(amp_tensor_get(rv, c) - var[c] * (N * S) / (N * S - 1.0)) <= 1e-6 * (1 + var[c]));
    }
done:
    amp_ctx_free(ctx);
}

void test_ops_batch_norm(void) {
    static const bn_user users[4] = {
        {4, 3, 0, 0, 0, true}, {2, 3, 6, 2, 3, true}, {4, 3, 0, 0, 0, false}, {2, 3, 6, 2, 3, false}};
    const char *names[4] = {"batch_norm 2-D training", "batch_norm 4-D training", "batch_norm 2-D eval",
                            "batch_norm 4-D eval"};
    for (int v = 0; v < 4; v++) {
        const bn_user *u = &users[v];
        gradcheck c = {.name = names[v],
                       .n_inputs = 3,
                       .build = build_batch_norm,
                       .reference = ref_batch_norm,
                       .user = u,
                       .rtol_factor = LOWP_FACTOR};
        c.inputs[0] = u->s ? (gradcheck_input){.ndim = 4, .shape = {u->n, u->c, u->h, u->w}}
                           : (gradcheck_input){.ndim = 2, .shape = {u->n, u->c}};
        c.inputs[1] = (gradcheck_input){.ndim = 1, .shape = {u->c}, .lo = 0.5f, .hi = 1.5f};
        c.inputs[2] = (gradcheck_input){.ndim = 1, .shape = {u->c}};
        if (!u->training) { /* running statistics in the dtype under test; var kept positive */
            c.inputs[3] = (gradcheck_input){.ndim = 1, .shape = {u->c}, .lo = -0.5f, .hi = 0.5f, .no_grad = true};
            c.inputs[4] = (gradcheck_input){.ndim = 1, .shape = {u->c}, .lo = 0.5f, .hi = 2.0f, .no_grad = true};
            c.n_inputs = 5;
        }
        run_dtypes(c, F32_FACTOR);
    }
    check_running_stats(AMP_F32);
    check_running_stats(AMP_BF16);
    check_running_stats(AMP_F16);

    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    amp_tensor *x = amp_tensor_zeros(ctx, AMP_F32, 2, (const int64_t[]){4, 3});
    amp_tensor *w16 = amp_tensor_zeros(ctx, AMP_BF16, 1, (const int64_t[]){3});
    amp_tensor *xb = amp_tensor_zeros(ctx, AMP_BF16, 2, (const int64_t[]){4, 3});
    /* mixed dtypes (Apex O2's fp32 batch norm): bf16 x with an f32 weight computes in bf16 */
    amp_tensor *w32 = amp_tensor_zeros(ctx, AMP_F32, 1, (const int64_t[]){3});
    amp_tensor *y = amp_batch_norm(ctx, xb, w32, NULL, NULL, NULL, true, 0.1f, EPS);
    if (CHECK(y != NULL)) CHECK_EQ_INT(y->compute_dtype, AMP_BF16);
    y = amp_batch_norm(ctx, xb, w16, NULL, NULL, NULL, true, 0.1f, EPS);
    if (CHECK(y != NULL)) {
        CHECK_EQ_INT(y->compute_dtype, AMP_BF16);
        CHECK_EQ_INT(y->dtype, AMP_BF16);
    }
    /* evaluation without running statistics */
    CHECK(amp_batch_norm(ctx, x, NULL, NULL, NULL, NULL, false, 0.1f, EPS) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(amp_ctx_error(ctx), "running_mean") != NULL, "error: %s", amp_ctx_error(ctx));
    amp_ctx_clear_error(ctx);
    /* one value per channel cannot be normalized by batch statistics (PyTorch's error) */
    amp_tensor *x1 = amp_tensor_zeros(ctx, AMP_F32, 2, (const int64_t[]){1, 3});
    CHECK(amp_batch_norm(ctx, x1, NULL, NULL, NULL, NULL, true, 0.1f, EPS) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_clear_error(ctx);
    /* 3-D input, and running statistics of the wrong length */
    amp_tensor *x3 = amp_tensor_zeros(ctx, AMP_F32, 3, (const int64_t[]){2, 3, 4});
    CHECK(amp_batch_norm(ctx, x3, NULL, NULL, NULL, NULL, true, 0.1f, EPS) == NULL);
    amp_ctx_clear_error(ctx);
    amp_tensor *r2 = amp_tensor_zeros(ctx, AMP_F32, 1, (const int64_t[]){2});
    CHECK(amp_batch_norm(ctx, x, NULL, NULL, r2, r2, true, 0.1f, EPS) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_clear_error(ctx);
    /* NaN in one channel stays in that channel (and its running statistics) */
    float xs[12] = {0};
    for (int i = 0; i < 12; i++) xs[i] = (float)i;
    xs[4] = NAN; /* row 1, channel 1 */
    amp_tensor *xn = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){4, 3}, xs, AMP_F32);
    amp_tensor *rm = amp_tensor_zeros(ctx, AMP_F32, 1, (const int64_t[]){3});
    amp_tensor *rv = amp_tensor_zeros(ctx, AMP_F32, 1, (const int64_t[]){3});
    y = amp_batch_norm(ctx, xn, NULL, NULL, rm, rv, true, 0.1f, EPS);
    if (CHECK(y != NULL)) {
        for (int i = 0; i < 12; i++)
            CHECK_MSG((i % 3 == 1) == (bool)isnan(amp_tensor_get(y, i)), "element %d: %g", i, amp_tensor_get(y, i));
        CHECK(isnan(amp_tensor_get(rm, 1)) && isfinite(amp_tensor_get(rm, 0)) && isfinite(amp_tensor_get(rv, 2)));
    }
    amp_ctx_free(ctx);
}

/* ---- amp_layer_norm_to: the norm rounded straight to the dtype of the linear that reads it ----
 * Against amp_cast(amp_layer_norm(...)) in one binary: the result's bits and, after a backward through
 * a linear and a loss, the gradients of x, the norm's weight and bias and the linear's weight, bit for
 * bit; under autocast and without, to bf16, f16 and f32; with a row of large values (f16 overflows)
 * and a NaN row. And the point of it: the fp32 tensor is not kept (less of the arena in use). */
enum { LNT_ROWS = 9, LNT_D = 40, LNT_OUT = 12 };

typedef struct {
    amp_ctx *ctx;
    amp_tensor *x, *out; /* the input, the norm's result as the linear reads it */
    size_t arena;        /* in use after the loss */
} lnt_run;

static float lnt_uniform(test_rng *g) { return (float)(test_rng_next(g) >> 40) / (float)(1 << 24); }

/* One forward and backward; params 0, 1, 2 of r->ctx: the norm's weight, bias, the linear's weight. */
static bool lnt_run_once(lnt_run *r, amp_dtype to, bool direct, bool autocast, uint64_t seed) {
    memset(r, 0, sizeof *r);
    if (!CHECK(amp_ctx_create(NULL, &r->ctx) == AMP_OK)) return false;
    amp_ctx *c = r->ctx;
    amp_tensor *w = amp_param_new(c, "w", AMP_F32, 1, (const int64_t[]){LNT_D});
    amp_tensor *b = amp_param_new(c, "b", AMP_F32, 1, (const int64_t[]){LNT_D});
    amp_tensor *lw = amp_param_new(c, "lw", AMP_F32, 2, (const int64_t[]){LNT_OUT, LNT_D});
    if (!CHECK(w && b && lw && amp_ctx_alloc_params(c) == AMP_OK)) return false;
    test_rng g = {seed};
    float xv[LNT_ROWS * LNT_D];
    for (int i = 0; i < LNT_ROWS * LNT_D; i++) xv[i] = lnt_uniform(&g) * 4.0f - 2.0f;
    for (int j = 0; j < LNT_D; j++) xv[3 * LNT_D + j] *= 3e4f; /* normalized: as any row; its products are not */
    xv[5 * LNT_D + 7] = NAN;
    float *wv = w->data, *bv = b->data, *lv = lw->data;
    for (int j = 0; j < LNT_D; j++) wv[j] = lnt_uniform(&g) * 300.0f, bv[j] = lnt_uniform(&g) - 0.5f;
    for (int j = 0; j < LNT_OUT * LNT_D; j++) lv[j] = lnt_uniform(&g) - 0.5f;
    r->x = amp_tensor_from(c, AMP_F32, 2, (const int64_t[]){LNT_ROWS, LNT_D}, xv, AMP_F32);
    if (r->x) amp_tensor_set_requires_grad(r->x, true);
    if (autocast) amp_autocast_enter(to == AMP_F32 ? AMP_BF16 : to);
    r->out = direct ? amp_layer_norm_to(c, r->x, w, b, EPS, to) : amp_cast(c, amp_layer_norm(c, r->x, w, b, EPS), to);
    amp_tensor *y = amp_linear(c, r->out, lw, NULL);
    if (autocast) amp_autocast_exit();
    amp_tensor *loss = amp_mean_all(c, amp_mul(c, y, y));
    r->arena = amp_ctx_arena_used(c);
    return CHECK_MSG(loss && amp_backward_scaled(c, loss, 1.0f) == AMP_OK, "%s", amp_ctx_error(c));
}

static bool lnt_same(const amp_tensor *a, const amp_tensor *b) {
    return a && b && a->dtype == b->dtype && amp_tensor_numel(a) == amp_tensor_numel(b) &&
           memcmp(a->data, b->data, (size_t)amp_tensor_numel(a) * amp_dtype_size(a->dtype)) == 0;
}

void test_ops_layer_norm_to(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    const amp_dtype tos[] = {AMP_BF16, AMP_F16, AMP_F32};
    for (size_t ti = 0; ti < sizeof tos / sizeof tos[0]; ti++)
        for (int autocast = 0; autocast < 2; autocast++) {
            lnt_run d, p;
            const bool ok = lnt_run_once(&d, tos[ti], true, autocast, seed) && lnt_run_once(&p, tos[ti], false, autocast, seed);
            const char *dn = amp_dtype_name(tos[ti]), *ac = autocast ? "under autocast" : "no autocast";
            if (ok) {
                CHECK_MSG(d.out->dtype == tos[ti] && lnt_same(d.out, p.out), "%s, %s: the result differs", dn, ac);
                CHECK_MSG(lnt_same(d.x->grad, p.x->grad), "%s, %s: x's gradient differs", dn, ac);
                for (size_t i = 0; i < 3; i++)
                    CHECK_MSG(lnt_same(amp_ctx_param(d.ctx, i)->grad, amp_ctx_param(p.ctx, i)->grad),
                              "%s, %s: %s's gradient differs", dn, ac, amp_ctx_param(d.ctx, i)->name);
                /* the NaN row stays NaN, the others finite */
                CHECK(isnan(amp_tensor_get(d.out, 5 * LNT_D)) && isfinite(amp_tensor_get(d.out, 4 * LNT_D)));
                if (tos[ti] != AMP_F32)
                    CHECK_MSG(d.arena + (size_t)(LNT_ROWS * LNT_D) * sizeof(float) <= p.arena,
                              "%s, %s: arena %zu bytes, the cast's %zu: the fp32 result is still kept", dn, ac,
                              d.arena, p.arena);
            }
            amp_ctx_free(d.ctx), amp_ctx_free(p.ctx);
        }
    /* only float results */
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    amp_tensor *x = amp_tensor_zeros(ctx, AMP_F32, 2, (const int64_t[]){2, 4});
    CHECK(amp_layer_norm_to(ctx, x, NULL, NULL, EPS, AMP_F8E4M3) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(amp_ctx_error(ctx), "layer_norm") && strstr(amp_ctx_error(ctx), "f8"), "error: %s",
              amp_ctx_error(ctx));
    CHECK(amp_layer_norm_to(NULL, x, NULL, NULL, EPS, AMP_BF16) == NULL);
    amp_ctx_free(ctx);
}

/* ---- layer norm on the thread pool: the same bits at 2 and 3 threads as at 1 ----
 * From 2 x 32768 values on, with more than one thread, the forward and dx split by rows and dw and db
 * by columns (a second pass); one thread runs the single-pass loop. So comparing thread counts
 * compares the two codes: y, dx, dw and db must have the same bits. 1000 x 197: dx's rows in three
 * ranges, dw's and db's columns in two or three (ranges aligned to 16, the last with the odd tail). In
 * fp32 and bf16 x (dx rounded chunk by chunk into its gradient), with and without the affine
 * parameters, and x read a second time so that its gradient exists when the norm's is added. */
enum { LNP_ROWS = 1000, LNP_D = 197 };

typedef struct lnp_result {
    float y[LNP_ROWS * LNP_D], dx[LNP_ROWS * LNP_D], dw[LNP_D], db[LNP_D];
} lnp_result;

static bool lnp_run(amp_dtype dt, bool affine, bool twice, const float *xv, const float *rv, const float *wv,
                    lnp_result *out) {
    amp_ctx *ctx = NULL;
    if (amp_ctx_create(NULL, &ctx) != AMP_OK) return false;
    amp_tensor *w = affine ? amp_param_new(ctx, "w", AMP_F32, 1, (const int64_t[]){LNP_D}) : NULL;
    amp_tensor *b = affine ? amp_param_new(ctx, "b", AMP_F32, 1, (const int64_t[]){LNP_D}) : NULL;
    bool ok = amp_ctx_alloc_params(ctx) == AMP_OK;
    if (ok && affine) {
        memcpy(w->data, wv, sizeof(float) * LNP_D);
        memcpy(b->data, wv + LNP_D, sizeof(float) * LNP_D);
    }
    const int64_t shape[2] = {LNP_ROWS, LNP_D};
    amp_tensor *x = ok ? amp_tensor_from(ctx, dt, 2, shape, xv, AMP_F32) : NULL;
    amp_tensor *r = ok ? amp_tensor_from(ctx, AMP_F32, 2, shape, rv, AMP_F32) : NULL;
    if (x) amp_tensor_set_requires_grad(x, true);
    amp_tensor *y = x && r ? amp_layer_norm(ctx, x, w, b, EPS) : NULL;
    amp_tensor *loss = y ? amp_sum_all(ctx, amp_mul(ctx, y, r)) : NULL;
    if (loss && twice) loss = amp_add(ctx, loss, amp_sum_all(ctx, amp_mul(ctx, x, x)));
    ok = loss && amp_backward_scaled(ctx, loss, 1.0f) == AMP_OK && x->grad &&
         amp_tensor_read(y, out->y, AMP_F32) == AMP_OK && amp_tensor_read(x->grad, out->dx, AMP_F32) == AMP_OK &&
         (!affine || (w->grad && b->grad && amp_tensor_read(w->grad, out->dw, AMP_F32) == AMP_OK &&
                      amp_tensor_read(b->grad, out->db, AMP_F32) == AMP_OK));
    CHECK_MSG(ok, "layer_norm %s: %s", amp_dtype_name(dt), amp_ctx_error(ctx));
    amp_ctx_free(ctx);
    return ok;
}

void test_ops_layer_norm_threads(void) {
    static float xv[LNP_ROWS * LNP_D], rv[LNP_ROWS * LNP_D], wv[2 * LNP_D];
    static lnp_result one, many;
    test_rng rng = {harness_seed() ^ 0x1A7Eu};
    /* rows of various offsets and spreads, so that mean and rstd differ row by row */
    for (int i = 0; i < LNP_ROWS; i++) {
        const float off = (float)((int)test_rng_below(&rng, 200) - 100) / 16.0f;
        const float spread = (float)(1 + test_rng_below(&rng, 64)) / 16.0f;
        for (int j = 0; j < LNP_D; j++)
            xv[i * LNP_D + j] = off + spread * ((float)test_rng_below(&rng, 4096) / 2048.0f - 1.0f);
    }
    for (int i = 0; i < LNP_ROWS * LNP_D; i++) rv[i] = (float)test_rng_below(&rng, 4096) / 2048.0f - 1.0f;
    for (int i = 0; i < 2 * LNP_D; i++) wv[i] = (float)test_rng_below(&rng, 4096) / 2048.0f - 1.0f;
    const amp_dtype dts[2] = {AMP_F32, AMP_BF16};
    for (int d = 0; d < 2; d++)
        for (int affine = 0; affine < 2; affine++)
            for (int twice = 0; twice < 2; twice++) {
                amp_set_num_threads(1);
                if (!lnp_run(dts[d], affine, twice, xv, rv, wv, &one)) continue;
                for (int threads = 2; threads <= 3; threads++) {
                    amp_set_num_threads(threads);
                    if (!lnp_run(dts[d], affine, twice, xv, rv, wv, &many)) continue;
                    CHECK_MSG(!memcmp(one.y, many.y, sizeof one.y) && !memcmp(one.dx, many.dx, sizeof one.dx) &&
                                  (!affine || (!memcmp(one.dw, many.dw, sizeof one.dw) &&
                                               !memcmp(one.db, many.db, sizeof one.db))),
                              "layer_norm %s%s%s, %d threads: other bits than one thread's", amp_dtype_name(dts[d]),
                              affine ? ", affine" : "", twice ? ", x read twice" : "", threads);
                }
            }
    amp_set_num_threads(0);
}
