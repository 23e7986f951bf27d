/* Softmax, log-softmax, cross-entropy and MSE against double-precision references written here, in
 * f32, f16 and bf16; plus the cases a reference on random inputs does not reach: stability for large
 * logits, -inf/NaN entries, strided views, closed forms, argument errors, and the op and
 * compute_dtype each result records. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/tensor/autograd.h"
#include "gradcheck.h"
#include "harness.h"
#include "tests.h"

static amp_ctx *make_ctx(void) {
    amp_ctx_config cfg = amp_ctx_default_config();
    cfg.arena_bytes = 1 << 20;
    amp_ctx *ctx = NULL;
    return amp_ctx_create(&cfg, &ctx) == AMP_OK ? ctx : NULL;
}

/* ---- softmax and log-softmax of x [2, 3, 4] along each dim ---- */

typedef struct {
    int dim;
    bool log;
} softmax_user;

static amp_tensor *build_softmax(amp_ctx *ctx, amp_tensor *const *in, const void *user) {
    const softmax_user *s = user;
    return s->log ? amp_log_softmax(ctx, in[0], s->dim) : amp_softmax(ctx, in[0], s->dim);
}

static void ref_softmax(const double *const *in, double *out, const void *user) {
    const softmax_user *s = user;
    const int shape[3] = {2, 3, 4};
    const int d = s->dim < 0 ? s->dim + 3 : s->dim;
    int outer = 1, inner = 1;
    for (int i = 0; i < d; i++) outer *= shape[i];
    for (int i = d + 1; i < 3; i++) inner *= shape[i];
    const int len = shape[d];
    for (int o = 0; o < outer; o++)
        for (int i = 0; i < inner; i++) {
            double sum = 0; /* no max shift: the inputs are small and double has range to spare */
            for (int l = 0; l < len; l++) sum += exp(in[0][(o * len + l) * inner + i]);
            for (int l = 0; l < len; l++) {
                const int k = (o * len + l) * inner + i;
                out[k] = s->log ? in[0][k] - log(sum) : exp(in[0][k]) / sum;
            }
        }
}

void test_ops_softmax(void) {
    const int dims[5] = {0, 1, 2, -1, -2};
    for (int lg = 0; lg < 2; lg++)
        for (int k = 0; k < 5; k++) {
            const softmax_user u = {dims[k], lg == 1};
            char name[48];
            /* Forward alone (input without grad): a few fp32 roundings (exp of x - max, a sum of <= 4
             * terms, a division or a log) and one rounding to the dtype: factor 4. */
            snprintf(name, sizeof name, "%s dim %d forward", lg ? "log_softmax" : "softmax", dims[k]);
            gradcheck c = {.name = name,
                           .n_inputs = 1,
                           .inputs = {{.ndim = 3, .shape = {2, 3, 4}, .lo = -3, .hi = 3, .no_grad = true}},
                           .build = build_softmax,
                           .reference = ref_softmax,
                           .user = &u,
                           .rtol_factor = 4,
                           .atol_factor = 4};
            gradcheck_run_all_dtypes(&c);
            /* Backward. Its error scales with |y| max|g|, while gradcheck's absolute tolerance scales
             * with max|dx|, which cancellation makes smaller: softmax's g - sum(g y) (with slices of 2
             * to 4 elements and every g in [-1, 1] it can be a small fraction of |g|), log_softmax's
             * g - exp(y) sum(g) less so. Measured over 10^5 random draws of these shapes, the worst
             * error in units of u * max|dx|: softmax 41 in f32 (y itself carries ~5 fp32 roundings:
             * x - max, exp, the sum, the division), 10 in f16/bf16 (y is one rounding); log_softmax
             * 7.5 in f32, 2 in f16/bf16. Factors: about 1.5-3x those worst cases. */
            snprintf(name, sizeof name, "%s dim %d", lg ? "log_softmax" : "softmax", dims[k]);
            c.inputs[0].no_grad = false;
            c.rtol_factor = c.atol_factor = lg ? 16 : 64;
            gradcheck_run(&c, AMP_F32);
            c.rtol_factor = c.atol_factor = lg ? 8 : 24;
            gradcheck_run(&c, AMP_F16);
            gradcheck_run(&c, AMP_BF16);
        }
}

static bool close_to(float got, double want, double rel) {
    return fabs((double)got - want) <= rel * fmax(fabs(want), 1e-30);
}

void test_ops_softmax_edges(void) {
    amp_ctx *ctx = make_ctx();
    if (!CHECK(ctx != NULL)) return;
    const int64_t row3[2] = {1, 3};

    /* stability: logits near +-1e4 give softmax([0, 1, 2]) (exp(1e4) overflows in any dtype and
     * exp(-1e4) underflows to 0, so only the shift by the maximum gets these right) */
    for (int sign = -1; sign <= 1; sign += 2) {
        const float base = 10000.0f * (float)sign;
        amp_tensor *big = amp_tensor_from(ctx, AMP_F32, 2, row3, (const float[]){base, base + 1, base + 2}, AMP_F32);
        amp_tensor *y = amp_softmax(ctx, big, 1), *ly = amp_log_softmax(ctx, big, -1);
        const double z = 1 + exp(1.0) + exp(2.0);
        for (int i = 0; y && ly && i < 3; i++) {
            CHECK_MSG(close_to(amp_tensor_get(y, i), exp((double)i) / z, 1e-6), "softmax(%g + %d) = %g", (double)base,
                      i, (double)amp_tensor_get(y, i));
            CHECK_MSG(close_to(amp_tensor_get(ly, i), (double)i - log(z), 1e-6), "log_softmax(%g + %d) = %g",
                      (double)base, i, (double)amp_tensor_get(ly, i));
        }
    }
    amp_tensor *y, *ly;

    /* -inf entries get probability 0 (log: -inf); NaN or +inf makes its slice NaN, other slices not */
    const float vals[3][3] = {{-INFINITY, 0, 0}, {NAN, 1, 2}, {INFINITY, 1, 2}};
    for (int r = 0; r < 3; r++) {
        amp_tensor *x = amp_tensor_from(ctx, AMP_F16, 2, row3, vals[r], AMP_F32);
        y = amp_softmax(ctx, x, 1), ly = amp_log_softmax(ctx, x, 1);
        if (!CHECK(y && ly)) continue;
        if (r == 0) {
            CHECK(amp_tensor_get(y, 0) == 0.0f && amp_tensor_get(y, 1) == 0.5f && amp_tensor_get(y, 2) == 0.5f);
            CHECK(isinf(amp_tensor_get(ly, 0)) && amp_tensor_get(ly, 0) < 0);
            CHECK(close_to(amp_tensor_get(ly, 1), -log(2.0), 1e-3));
        } else {
            for (int i = 0; i < 3; i++) CHECK(isnan(amp_tensor_get(y, i)) && isnan(amp_tensor_get(ly, i)));
        }
    }
    amp_tensor *mixed = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){2, 2}, (const float[]){NAN, 0, 0, 0},
                                        AMP_F32);
    y = amp_softmax(ctx, mixed, 1);
    CHECK(y && isnan(amp_tensor_get(y, 1)) && amp_tensor_get(y, 2) == 0.5f && amp_tensor_get(y, 3) == 0.5f);

    /* a strided view: softmax(x^T, 0) is softmax(x, 1) transposed */
    float xv[12];
    for (int i = 0; i < 12; i++) xv[i] = (float)((i * 7) % 12) / 4.0f - 1.0f;
    amp_tensor *x = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){3, 4}, xv, AMP_F32);
    amp_tensor *a = amp_softmax(ctx, amp_transpose(ctx, x, 0, 1), 0); /* [4, 3] */
    amp_tensor *b = amp_softmax(ctx, x, 1);                           /* [3, 4] */
    for (int i = 0; a && b && i < 4; i++)
        for (int j = 0; j < 3; j++)
            CHECK_MSG(amp_tensor_get(a, i * 3 + j) == amp_tensor_get(b, j * 4 + i), "view (%d, %d)", i, j);

    /* op, compute_dtype, errors */
    const amp_dtype dtypes[3] = {AMP_F32, AMP_F16, AMP_BF16};
    for (int d = 0; d < 3; d++) {
        amp_tensor *t = amp_tensor_from(ctx, dtypes[d], 2, (const int64_t[]){3, 4}, xv, AMP_F32);
        y = amp_softmax(ctx, t, 0), ly = amp_log_softmax(ctx, t, 1);
        CHECK(y && y->op == AMP_OP_SOFTMAX && y->compute_dtype == dtypes[d] && y->dtype == dtypes[d]);
        CHECK(ly && ly->op == AMP_OP_LOG_SOFTMAX && ly->compute_dtype == dtypes[d] && ly->dtype == dtypes[d]);
    }
    /* empty tensors: an empty result, or along an empty dim nothing to normalize; no error */
    amp_tensor *e0 = amp_tensor_zeros(ctx, AMP_F32, 2, (const int64_t[]){0, 3});
    amp_tensor *e1 = amp_tensor_zeros(ctx, AMP_F32, 2, (const int64_t[]){2, 0});
    CHECK(amp_softmax(ctx, e0, 1) && amp_log_softmax(ctx, e0, 0) && amp_softmax(ctx, e1, 1));
    CHECK(amp_ctx_status(ctx) == AMP_OK);
    /* a 0-dim tensor is one slice of one element, as in PyTorch */
    amp_tensor *s0 = amp_tensor_scalar(ctx, AMP_BF16, -3.5f);
    y = amp_softmax(ctx, s0, 0), ly = amp_log_softmax(ctx, s0, -1);
    CHECK(y && y->ndim == 0 && amp_tensor_get(y, 0) == 1.0f && ly && amp_tensor_get(ly, 0) == 0.0f);
    CHECK(amp_ctx_status(ctx) == AMP_OK);
    CHECK(amp_softmax(ctx, s0, 1) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_clear_error(ctx);
    CHECK(amp_softmax(ctx, x, 2) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_clear_error(ctx);
    CHECK(amp_log_softmax(ctx, x, -3) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_free(ctx);
}

/* ---- cross-entropy: logits [4, 5] ---- */

static const int32_t ce_targets[4] = {0, 4, 2, 2};

static amp_tensor *build_ce(amp_ctx *ctx, amp_tensor *const *in, const void *user) {
    (void)user;
    return amp_cross_entropy(ctx, in[0], ce_targets);
}

static void ref_ce(const double *const *in, double *out, const void *user) {
    (void)user;
    double total = 0;
    for (int n = 0; n < 4; n++) {
        double sum = 0;
        for (int c = 0; c < 5; c++) sum += exp(in[0][n * 5 + c]);
        total += log(sum) - in[0][n * 5 + ce_targets[n]];
    }
    out[0] = total / 4;
}

/* ---- mse: pred, target [3, 4] ---- */

static amp_tensor *build_mse(amp_ctx *ctx, amp_tensor *const *in, const void *user) {
    (void)user;
    return amp_mse_loss(ctx, in[0], in[1]);
}

static void ref_mse(const double *const *in, double *out, const void *user) {
    (void)user;
    double s = 0;
    for (int i = 0; i < 12; i++) s += (in[0][i] - in[1][i]) * (in[0][i] - in[1][i]);
    out[0] = s / 12;
}

void test_ops_losses(void) {
    /* The loss itself is fp32 from exact inputs (a few fp32 roundings: well inside any dtype's u).
     * The gradients are one rounding to the input dtype of fp32 values: (softmax - onehot) g / N
     * (exp and a subtraction) and 2 (p - t) g / n. Factor 4. */
    gradcheck ce = {.name = "cross_entropy", .n_inputs = 1, .inputs = {{.ndim = 2, .shape = {4, 5}, .lo = -3, .hi = 3}},
                    .build = build_ce, .reference = ref_ce, .rtol_factor = 4, .atol_factor = 4};
    gradcheck_run_all_dtypes(&ce);
    gradcheck mse = {.name = "mse_loss",
                     .n_inputs = 2,
                     .inputs = {{.ndim = 2, .shape = {3, 4}}, {.ndim = 2, .shape = {3, 4}}},
                     .build = build_mse,
                     .reference = ref_mse,
                     .rtol_factor = 4,
                     .atol_factor = 4};
    gradcheck_run_all_dtypes(&mse);
}

void test_ops_losses_edges(void) {
    amp_ctx *ctx = make_ctx();
    if (!CHECK(ctx != NULL)) return;
    const amp_dtype dtypes[3] = {AMP_F32, AMP_F16, AMP_BF16};
    const int64_t shape[2] = {3, 5};
    const int32_t targets[3] = {0, 4, 1};
    float vals[15];

    /* closed form: equal logits (any value: 0, or +-1000 where exp overflows or underflows) give log C; the result
     * is a 0-dim fp32 tensor whatever the logits' dtype */
    const float uniform[3] = {0.0f, 1000.0f, -1000.0f};
    for (int d = 0; d < 3; d++)
        for (int v = 0; v < 3; v++) {
            for (int i = 0; i < 15; i++) vals[i] = uniform[v];
            amp_tensor *x = amp_tensor_from(ctx, dtypes[d], 2, shape, vals, AMP_F32);
            amp_tensor *loss = amp_cross_entropy(ctx, x, targets);
            if (!CHECK(loss != NULL)) continue;
            CHECK_MSG(close_to(amp_tensor_get(loss, 0), log(5.0), 1e-6), "uniform %s logits %g: loss %.9g",
                      amp_dtype_name(dtypes[d]), (double)uniform[v], (double)amp_tensor_get(loss, 0));
            CHECK(loss->dtype == AMP_F32 && loss->ndim == 0);
            CHECK(loss->op == AMP_OP_CROSS_ENTROPY && loss->compute_dtype == dtypes[d]);
        }

    /* the targets are copied: changing the caller's array after the forward does not change the
     * gradient, (1/C - onehot) / N for uniform logits, accumulated in the logits' dtype */
    for (int d = 0; d < 3; d++) {
        int32_t t[3] = {0, 4, 1};
        for (int i = 0; i < 15; i++) vals[i] = 0.25f;
        amp_tensor *x = amp_tensor_from(ctx, dtypes[d], 2, shape, vals, AMP_F32);
        amp_tensor_set_requires_grad(x, true);
        amp_tensor *loss = amp_cross_entropy(ctx, x, t);
        t[0] = t[1] = t[2] = 3;
        if (!CHECK(loss && amp_backward(ctx, loss, NULL) == AMP_OK && x->grad)) continue;
        CHECK(x->grad->dtype == dtypes[d]);
        for (int n = 0; n < 3; n++)
            for (int c = 0; c < 5; c++) {
                const double want = ((c == targets[n] ? -1.0 : 0.0) + 0.2) / 3;
                CHECK_MSG(close_to(amp_tensor_get(x->grad, n * 5 + c), want, 2 * gradcheck_unit_roundoff(dtypes[d])),
                          "%s grad[%d][%d] = %.9g, want %.9g", amp_dtype_name(dtypes[d]), n, c,
                          (double)amp_tensor_get(x->grad, n * 5 + c), want);
            }
    }

    /* bad targets name the index; NULL targets; logits that are not [N, C] */
    amp_tensor *x = amp_tensor_from(ctx, AMP_F32, 2, shape, vals, AMP_F32);
    const int32_t bad[2][3] = {{0, 5, 1}, {0, 1, -1}};
    const char *want_msg[2] = {"target 5 at index 1", "target -1 at index 2"};
    for (int k = 0; k < 2; k++) {
        amp_ctx_clear_error(ctx);
        CHECK(amp_cross_entropy(ctx, x, bad[k]) == NULL);
        CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
        CHECK_MSG(strstr(amp_ctx_error(ctx), want_msg[k]) != NULL, "error message: %s", amp_ctx_error(ctx));
    }
    amp_ctx_clear_error(ctx);
    CHECK(amp_cross_entropy(ctx, x, NULL) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_NULL_POINTER);
    amp_ctx_clear_error(ctx);
    amp_tensor *flat = amp_tensor_from(ctx, AMP_F32, 1, (const int64_t[]){15}, vals, AMP_F32);
    CHECK(amp_cross_entropy(ctx, flat, targets) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_clear_error(ctx);

    /* a NaN logit makes the loss NaN */
    vals[7] = NAN;
    amp_tensor *xn = amp_tensor_from(ctx, AMP_F32, 2, shape, vals, AMP_F32);
    amp_tensor *ln = amp_cross_entropy(ctx, xn, targets);
    CHECK(ln && isnan(amp_tensor_get(ln, 0)));

    /* mse with mixed dtypes: computed in fp32 from both, result f32, gradients in each input's dtype */
    amp_tensor *p = amp_tensor_from(ctx, AMP_BF16, 1, (const int64_t[]){4}, (const float[]){1, 2, 3, 4}, AMP_F32);
    amp_tensor *t = amp_tensor_from(ctx, AMP_F32, 1, (const int64_t[]){4}, (const float[]){0.5f, 2, 4, 4}, AMP_F32);
    amp_tensor_set_requires_grad(p, true);
    amp_tensor_set_requires_grad(t, true);
    amp_tensor *mse = amp_mse_loss(ctx, p, t);
    if (CHECK(mse != NULL)) {
        CHECK(amp_tensor_get(mse, 0) == 0.3125f); /* (0.25 + 0 + 1 + 0) / 4 */
        CHECK(mse->dtype == AMP_F32 && mse->ndim == 0 && mse->op == AMP_OP_MSE_LOSS && mse->compute_dtype == AMP_F32);
        CHECK(amp_backward(ctx, mse, NULL) == AMP_OK);
        const float dp[4] = {0.25f, 0, -0.5f, 0}; /* 2 (p - t) / 4 */
        for (int i = 0; p->grad && t->grad && i < 4; i++) {
            CHECK(amp_tensor_get(p->grad, i) == dp[i]);
            CHECK(amp_tensor_get(t->grad, i) == -dp[i]);
        }
        CHECK(p->grad && p->grad->dtype == AMP_BF16 && t->grad && t->grad->dtype == AMP_F32);
    }
    amp_tensor *p16 = amp_tensor_from(ctx, AMP_F16, 1, (const int64_t[]){4}, (const float[]){1, 2, 3, 4}, AMP_F32);
    amp_tensor *m16 = amp_mse_loss(ctx, p16, p16);
    CHECK(m16 && m16->compute_dtype == AMP_F16 && m16->dtype == AMP_F32 && amp_tensor_get(m16, 0) == 0.0f);

    /* mse needs equal shapes (no broadcasting) */
    amp_tensor *q = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){2, 2}, (const float[]){1, 2, 3, 4}, AMP_F32);
    CHECK(amp_mse_loss(ctx, q, t) == NULL);
    CHECK_EQ_INT(amp_ctx_status(ctx), AMP_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(amp_ctx_error(ctx), "same shape") != NULL, "error message: %s", amp_ctx_error(ctx));
    amp_ctx_free(ctx);
}

/* ---- the losses under autocast read narrow inputs in place (src/ops/loss.c, loss_autocast) ----
 * Against the same loss of an explicit fp32 copy (what autocast made before): the loss's bits and the
 * narrow input's gradient bit for bit, for bf16 and f16 logits / predictions, with a gradient already
 * in the input (a second reader) so the accumulation is compared too; no cast node (less arena in
 * use); and with the policy changed to "lower" the input is cast as the policy says. */
enum { LA_N = 6, LA_C = 11 };

typedef struct {
    amp_ctx *ctx;
    amp_tensor *x, *loss;
    size_t arena;
} la_run;

static bool la_forward_backward(la_run *r, amp_dtype dt, bool mse, bool explicit_copy) {
    memset(r, 0, sizeof *r);
    if (!CHECK(amp_ctx_create(NULL, &r->ctx) == AMP_OK)) return false;
    amp_ctx *c = r->ctx;
    float v[LA_N * LA_C], tv[LA_N * LA_C];
    for (int i = 0; i < LA_N * LA_C; i++) v[i] = (float)((i * 37) % 23) * 0.37f - 4.0f, tv[i] = (float)(i % 5) * 0.5f;
    v[3] = 3e4f; /* a large logit: the stabilized softmax must not overflow */
    static const int32_t targets[LA_N] = {0, 3, 10, 5, 5, 1};
    r->x = amp_tensor_from(c, dt, 2, (const int64_t[]){LA_N, LA_C}, v, AMP_F32);
    amp_tensor *t = amp_tensor_from(c, dt, 2, (const int64_t[]){LA_N, LA_C}, tv, AMP_F32);
    if (!r->x || !t) return false;
    amp_tensor_set_requires_grad(r->x, true);
    amp_autocast_enter(dt);
    amp_tensor *in = explicit_copy ? amp_cast(c, r->x, AMP_F32) : r->x, *tin = explicit_copy ? amp_cast(c, t, AMP_F32) : t;
    r->loss = mse ? amp_mse_loss(c, in, tin) : amp_cross_entropy(c, in, targets);
    /* a second reader of x, on the tape after the loss: its gradient reaches x first */
    amp_tensor *other = amp_mul(c, amp_sum_all(c, r->x), amp_tensor_from(c, AMP_F32, 0, NULL, (const float[]){0.25f}, AMP_F32));
    amp_autocast_exit();
    amp_tensor *total = amp_add(c, r->loss, other);
    r->arena = amp_ctx_arena_used(c);
    return CHECK_MSG(total && amp_backward_scaled(c, total, 1024.0f) == AMP_OK, "%s", amp_ctx_error(c)) &&
           CHECK(r->x->grad != NULL);
}

void test_ops_losses_autocast_in_place(void) {
    const amp_dtype dts[] = {AMP_BF16, AMP_F16};
    for (size_t di = 0; di < 2; di++)
        for (int mse = 0; mse < 2; mse++) {
            la_run a, b;
            const char *name = mse ? "mse_loss" : "cross_entropy", *dn = amp_dtype_name(dts[di]);
            if (la_forward_backward(&a, dts[di], mse, false) && la_forward_backward(&b, dts[di], mse, true)) {
                CHECK_MSG(amp_tensor_get(a.loss, 0) == amp_tensor_get(b.loss, 0) && a.loss->dtype == AMP_F32 &&
                              a.loss->compute_dtype == AMP_F32,
                          "%s, %s: loss %.9g, through an fp32 copy %.9g", name, dn, amp_tensor_get(a.loss, 0),
                          amp_tensor_get(b.loss, 0));
                CHECK_MSG(a.x->grad->dtype == dts[di] &&
                              memcmp(a.x->grad->data, b.x->grad->data, (size_t)(LA_N * LA_C) * amp_dtype_size(dts[di])) == 0,
                          "%s, %s: the input's gradient differs from the fp32 copy's path", name, dn);
                CHECK_MSG(a.loss->grad_fn && a.loss->grad_fn->in[0] == a.x, "%s, %s: the loss does not read x in place",
                          name, dn);
                CHECK_MSG(a.arena + (size_t)(LA_N * LA_C) * sizeof(float) <= b.arena, "%s, %s: arena %zu, with the copy %zu",
                          name, dn, a.arena, b.arena);
            }
            amp_ctx_free(a.ctx), amp_ctx_free(b.ctx);
        }
    /* another policy: the input is cast as it says (here to the region's dtype, from fp32) */
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    const amp_cast_policy was = amp_autocast_get_policy(AMP_OP_CROSS_ENTROPY);
    CHECK(amp_autocast_set_policy(AMP_OP_CROSS_ENTROPY, AMP_POLICY_LOWER) == AMP_OK);
    amp_tensor *x = amp_tensor_zeros(ctx, AMP_F32, 2, (const int64_t[]){2, 3});
    if (x) amp_tensor_set_requires_grad(x, true);
    amp_autocast_enter(AMP_BF16);
    amp_tensor *loss = amp_cross_entropy(ctx, x, (const int32_t[]){0, 2});
    amp_autocast_exit();
    amp_autocast_set_policy(AMP_OP_CROSS_ENTROPY, was);
    if (CHECK(loss && loss->grad_fn))
        CHECK_MSG(loss->grad_fn->in[0] != x && loss->grad_fn->in[0]->dtype == AMP_BF16, "lower policy: not cast to bf16");
    amp_ctx_free(ctx);
}

/* cross_entropy on narrow logits read in place (no cast node) against the same logits through an
 * explicit fp32 copy (whose fp32 gradient the cast's backward rounds once, as the sink rounds): for
 * rows of 1, 5, 300, 2048, 2049 and 3000 classes (the forward's 256-wide chunks and their tails),
 * bf16 and f16, with an existing gradient (accumulated) and without, the loss and the gradient bit
 * for bit. */
void test_ops_cross_entropy_narrow_rows(void) {
    const int64_t cs[] = {1, 5, 300, 2048, 2049, 3000};
    const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    enum { N = 7 };
    uint64_t seed = 0x5eed0ce1ull;
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
        for (int di = 0; di < 2; di++)
            for (int acc = 0; acc < 2; acc++) {
                const int64_t C = cs[ci];
                float *v = malloc(sizeof(float) * (size_t)(N * C));
                int32_t t[N];
                if (!CHECK(v != NULL)) return;
                for (int64_t i = 0; i < N * C; i++) {
                    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                    v[i] = (float)((int64_t)(seed >> 40) % 2001 - 1000) * 0.01f;
                }
                for (int n = 0; n < N; n++) t[n] = (int32_t)((n * 7919) % C);
                float loss[2] = {0, 0};
                void *grad[2] = {NULL, NULL};
                amp_ctx *ctx[2] = {NULL, NULL};
                const size_t gbytes = (size_t)(N * C) * amp_dtype_size(dts[di]);
                for (int w = 0; w < 2; w++) { /* w = 0: in place; 1: through an fp32 copy */
                    if (!CHECK(amp_ctx_create(NULL, &ctx[w]) == AMP_OK)) break;
                    amp_ctx *c = ctx[w];
                    amp_tensor *x = amp_tensor_from(c, dts[di], 2, (const int64_t[]){N, C}, v, AMP_F32);
                    if (!CHECK(x != NULL)) break;
                    amp_tensor_set_requires_grad(x, true);
                    amp_autocast_enter(dts[di]);
                    amp_tensor *l = amp_cross_entropy(c, w ? amp_cast(c, x, AMP_F32) : x, t);
                    amp_autocast_exit();
                    /* acc: a second reader on the tape after the loss, so the loss's gradient is added */
                    amp_tensor *other = acc ? amp_sum_all(c, x) : NULL;
                    amp_tensor *total = acc && l && other ? amp_add(c, l, other) : l;
                    if (!CHECK_MSG(total && amp_backward_scaled(c, total, 256.0f) == AMP_OK && x->grad, "%s",
                                   amp_ctx_error(c)))
                        break;
                    loss[w] = amp_tensor_get(l, 0);
                    grad[w] = x->grad->data;
                }
                if (grad[0] && grad[1])
                    CHECK_MSG(memcmp(&loss[0], &loss[1], sizeof loss[0]) == 0 && memcmp(grad[0], grad[1], gbytes) == 0,
                              "cross_entropy %s C=%lld acc=%d: in place loss %.9g grad differs: %d; fp32 copy loss %.9g",
                              amp_dtype_name(dts[di]), (long long)C, acc, loss[0], memcmp(grad[0], grad[1], gbytes) != 0,
                              loss[1]);
                amp_ctx_free(ctx[0]), amp_ctx_free(ctx[1]);
                free(v);
            }
}
