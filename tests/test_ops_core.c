/* Gradient checks of the core ops (shape, elementwise with broadcasting, reductions, matmul, linear)
 * against double-precision references written here, in f32, f16 and bf16. */
#include <math.h>
#include <string.h>

#include "../src/tensor/autograd.h" /* amp_node: which tensors a node reads */
#include "gradcheck.h"
#include "harness.h"
#include "tests.h"

/* ---- elementwise binary with broadcasting: a [2,3,4] op b [3,1] ---- */

typedef struct {
    amp_tensor *(*op)(amp_ctx *, amp_tensor *, amp_tensor *);
    char sym;
} binary_user;

static amp_tensor *build_binary(amp_ctx *ctx, amp_tensor *const *in, const void *user) {
    return ((const binary_user *)user)->op(ctx, in[0], in[1]);
}

static void ref_binary(const double *const *in, double *out, const void *user) {
    const char s = ((const binary_user *)user)->sym;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) {
                const double a = in[0][(i * 3 + j) * 4 + k], b = in[1][j];
                out[(i * 3 + j) * 4 + k] = s == '+' ? a + b : s == '-' ? a - b : s == '*' ? a * b : a / b;
            }
}

void test_ops_binary_broadcast(void) {
    const binary_user users[4] = {{amp_add, '+'}, {amp_sub, '-'}, {amp_mul, '*'}, {amp_div, '/'}};
    const char *names[4] = {"add", "sub", "mul", "div"};
    for (int i = 0; i < 4; i++) {
        gradcheck c = {.name = names[i],
                       .n_inputs = 2,
                       .inputs = {{.ndim = 3, .shape = {2, 3, 4}}, {.ndim = 2, .shape = {3, 1}, .lo = 0.5f, .hi = 2.0f}},
                       .build = build_binary,
                       .reference = ref_binary,
                       .user = &users[i],
                       .rtol_factor = 8};
        gradcheck_run_all_dtypes(&c);
    }
}

/* ---- mixed float dtypes are read in place (src/ops/binary.c, amp_autocast_inputs_exact) ----
 * a narrow [2,3,4] op an fp32 b (full, or broadcast [3,1]), inside an autocast region (promote) and
 * outside it, against the same op on an explicit fp32 copy of a (what promotion made before): the
 * result's bits and dtype and both gradients bit for bit, with a second reader of a (its gradient
 * reaches a first, so the accumulation is compared too); a is the node's input (no cast node) and the
 * arena holds less. Then the policies: fp32 on two bf16 inputs gives fp32, read in place; lower casts. */
typedef struct {
    amp_ctx *ctx;
    amp_tensor *a, *b, *y;
    size_t arena;
} bm_run;

static bool bm_forward_backward(bm_run *r, amp_tensor *(*op)(amp_ctx *, amp_tensor *, amp_tensor *), amp_dtype dt,
                                bool broadcast, bool autocast, bool explicit_copy) {
    memset(r, 0, sizeof *r);
    if (!CHECK(amp_ctx_create(NULL, &r->ctx) == AMP_OK)) return false;
    amp_ctx *c = r->ctx;
    float av[24], bv[24];
    for (int i = 0; i < 24; i++) av[i] = (float)((i * 37) % 23) * 0.137f - 1.3f;
    for (int i = 0; i < 24; i++) bv[i] = 0.7f + (float)((i * 5) % 7) * 0.31f; /* away from 0: div */
    r->a = amp_tensor_from(c, dt, 3, (const int64_t[]){2, 3, 4}, av, AMP_F32);
    r->b = broadcast ? amp_tensor_from(c, AMP_F32, 2, (const int64_t[]){3, 1}, bv, AMP_F32)
                     : amp_tensor_from(c, AMP_F32, 3, (const int64_t[]){2, 3, 4}, bv, AMP_F32);
    if (!r->a || !r->b) return false;
    amp_tensor_set_requires_grad(r->a, true);
    amp_tensor_set_requires_grad(r->b, true);
    if (autocast) amp_autocast_enter(dt);
    r->y = op(c, explicit_copy ? amp_cast(c, r->a, AMP_F32) : r->a, r->b);
    amp_tensor *other = amp_scale(c, amp_sum_all(c, r->a), 0.25f); /* on the tape after y: reaches a first */
    if (autocast) amp_autocast_exit();
    amp_tensor *total = amp_add(c, amp_sum_all(c, amp_mul(c, r->y, r->y)), other);
    r->arena = amp_ctx_arena_used(c);
    return CHECK_MSG(total && amp_backward_scaled(c, total, 512.0f) == AMP_OK, "%s", amp_ctx_error(c)) &&
           CHECK(r->a->grad && r->b->grad);
}

void test_ops_binary_mixed_in_place(void) {
    amp_tensor *(*const ops[4])(amp_ctx *, amp_tensor *, amp_tensor *) = {amp_add, amp_sub, amp_mul, amp_div};
    const char *names[4] = {"add", "sub", "mul", "div"};
    const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    for (int o = 0; o < 4; o++)
        for (int d = 0; d < 2; d++)
            for (int bc = 0; bc < 2; bc++)
                for (int ac = 0; ac < 2; ac++) {
                    bm_run x, e;
                    const char *dn = amp_dtype_name(dts[d]);
                    if (bm_forward_backward(&x, ops[o], dts[d], bc, ac, false) &&
                        bm_forward_backward(&e, ops[o], dts[d], bc, ac, true)) {
                        const int64_t nb = amp_tensor_numel(x.b);
                        CHECK_MSG(x.y->dtype == AMP_F32 && memcmp(x.y->data, e.y->data, 24 * sizeof(float)) == 0,
                                  "%s %s (broadcast %d, autocast %d): the result differs from the fp32 copy's", names[o], dn,
                                  bc, ac);
                        CHECK_MSG(x.a->grad->dtype == dts[d] && e.a->grad->dtype == dts[d] &&
                                      memcmp(x.a->grad->data, e.a->grad->data, 24 * amp_dtype_size(dts[d])) == 0,
                                  "%s %s (broadcast %d, autocast %d): a's gradient differs", names[o], dn, bc, ac);
                        CHECK_MSG(memcmp(x.b->grad->data, e.b->grad->data, (size_t)nb * sizeof(float)) == 0,
                                  "%s %s (broadcast %d, autocast %d): b's gradient differs", names[o], dn, bc, ac);
                        CHECK_MSG(x.y->grad_fn && x.y->grad_fn->in[0] == x.a, "%s %s: a is not read in place", names[o], dn);
                        CHECK_MSG(x.arena + 24 * sizeof(float) <= e.arena, "%s %s: arena %zu, with the copy %zu", names[o],
                                  dn, x.arena, e.arena);
                    }
                    amp_ctx_free(x.ctx), amp_ctx_free(e.ctx);
                }
    amp_ctx *ctx = NULL;
    if (!CHECK(amp_ctx_create(NULL, &ctx) == AMP_OK)) return;
    amp_tensor *p = amp_tensor_from(ctx, AMP_BF16, 1, (const int64_t[]){3}, (const float[]){1.5f, -2, 3}, AMP_F32);
    amp_tensor *q = amp_tensor_from(ctx, AMP_F32, 1, (const int64_t[]){3}, (const float[]){1.0f / 3, 0.1f, 7}, AMP_F32);
    if (p) amp_tensor_set_requires_grad(p, true); /* so that the ops record their nodes */
    const amp_cast_policy was = amp_autocast_get_policy(AMP_OP_MUL);
    amp_autocast_enter(AMP_BF16);
    CHECK(amp_autocast_set_policy(AMP_OP_MUL, AMP_POLICY_FP32) == AMP_OK);
    amp_tensor *pp = amp_mul(ctx, p, p);
    if (CHECK(pp && pp->grad_fn))
        CHECK_MSG(pp->dtype == AMP_F32 && pp->grad_fn->in[0] == p && pp->grad_fn->in[1] == p,
                  "fp32 policy: %s, inputs not read in place", amp_dtype_name(pp ? pp->dtype : AMP_F32));
    CHECK(amp_autocast_set_policy(AMP_OP_MUL, AMP_POLICY_LOWER) == AMP_OK);
    amp_tensor *pq = amp_mul(ctx, p, q); /* q rounded to bf16 first: 1/3 -> 0.333984375 */
    if (CHECK(pq && pq->grad_fn))
        CHECK_MSG(pq->dtype == AMP_BF16 && pq->grad_fn->in[1] != q && pq->grad_fn->in[1]->dtype == AMP_BF16 &&
                      amp_tensor_get(pq->grad_fn->in[1], 0) == 0.333984375f,
                  "lower policy: not cast to bf16");
    amp_autocast_set_policy(AMP_OP_MUL, was);
    amp_autocast_exit();
    amp_ctx_free(ctx);
}

/* ---- linear reads an fp32 input that needs no gradient in place under autocast (src/ops/matmul.c,
 * linear_reads_in_place) ----
 * x [5, 7] fp32 (a batch), W [6, 7] and b [6] fp32 parameters, in bf16 and f16 regions, against the
 * same linear on an explicit copy of x in the region's dtype (what autocast made before): the output's
 * bits and dtype and W's and b's gradients bit for bit; x is the node's input and the arena holds
 * less. An x that needs a gradient is still cast (its gradient is the cast's, rounded to dt). */
typedef struct {
    amp_ctx *ctx;
    amp_tensor *x, *w, *b, *y;
    size_t arena;
} lb_run;

static bool lb_forward_backward(lb_run *r, amp_dtype dt, bool explicit_copy, bool x_grad) {
    memset(r, 0, sizeof *r);
    if (!CHECK(amp_ctx_create(NULL, &r->ctx) == AMP_OK)) return false;
    amp_ctx *c = r->ctx;
    float xv[35], wv[42], bv[6];
    for (int i = 0; i < 35; i++) xv[i] = (float)((i * 37) % 23) * 0.1371f - 1.3f; /* not all exact in bf16 */
    for (int i = 0; i < 42; i++) wv[i] = (float)((i * 11) % 13) * 0.0917f - 0.5f;
    for (int i = 0; i < 6; i++) bv[i] = 0.01f * (float)i - 0.02f;
    r->x = amp_tensor_from(c, AMP_F32, 2, (const int64_t[]){5, 7}, xv, AMP_F32);
    r->w = amp_tensor_from(c, AMP_F32, 2, (const int64_t[]){6, 7}, wv, AMP_F32);
    r->b = amp_tensor_from(c, AMP_F32, 1, (const int64_t[]){6}, bv, AMP_F32);
    if (!r->x || !r->w || !r->b) return false;
    amp_tensor_set_requires_grad(r->w, true);
    amp_tensor_set_requires_grad(r->b, true);
    amp_tensor_set_requires_grad(r->x, x_grad);
    amp_autocast_enter(dt);
    r->y = amp_linear(c, explicit_copy ? amp_cast(c, r->x, dt) : r->x, r->w, r->b);
    amp_autocast_exit();
    amp_tensor *loss = amp_sum_all(c, amp_mul(c, r->y, r->y));
    r->arena = amp_ctx_arena_used(c);
    return CHECK_MSG(loss && amp_backward_scaled(c, loss, 64.0f) == AMP_OK, "%s", amp_ctx_error(c)) &&
           CHECK(r->w->grad && r->b->grad);
}

void test_ops_linear_batch_in_place(void) {
    const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    for (int d = 0; d < 2; d++) {
        lb_run x, e;
        const char *dn = amp_dtype_name(dts[d]);
        if (lb_forward_backward(&x, dts[d], false, false) && lb_forward_backward(&e, dts[d], true, false)) {
            CHECK_MSG(x.y->dtype == dts[d] && x.y->compute_dtype == dts[d] &&
                          memcmp(x.y->data, e.y->data, 30 * amp_dtype_size(dts[d])) == 0,
                      "%s: the output differs from the copy's", dn);
            CHECK_MSG(memcmp(x.w->grad->data, e.w->grad->data, 42 * sizeof(float)) == 0 &&
                          memcmp(x.b->grad->data, e.b->grad->data, 6 * sizeof(float)) == 0,
                      "%s: the parameters' gradients differ from the copy's", dn);
            CHECK_MSG(x.y->grad_fn && x.y->grad_fn->in[0] == x.x, "%s: x is not read in place", dn);
            CHECK_MSG(x.arena + 35 * amp_dtype_size(dts[d]) <= e.arena, "%s: arena %zu, with the copy %zu", dn, x.arena,
                      e.arena);
        }
        amp_ctx_free(x.ctx), amp_ctx_free(e.ctx);
        if (lb_forward_backward(&x, dts[d], false, true) && CHECK(x.x->grad && x.y->grad_fn))
            CHECK_MSG(x.y->grad_fn->in[0] != x.x && x.y->grad_fn->in[0]->dtype == dts[d] && x.x->grad->dtype == AMP_F32,
                      "%s: an x that needs a gradient is not cast", dn);
        amp_ctx_free(x.ctx);
    }
}

/* ---- scale, sum, mean ---- */

static amp_tensor *build_scale(amp_ctx *ctx, amp_tensor *const *in, const void *user) {
    (void)user;
    return amp_scale(ctx, in[0], -2.5f);
}
static void ref_scale(const double *const *in, double *out, const void *user) {
    (void)user;
    for (int i = 0; i < 12; i++) out[i] = -2.5 * in[0][i];
}

typedef struct {
    int dim;
    bool keepdim, mean, all;
} reduce_user;

static amp_tensor *build_reduce(amp_ctx *ctx, amp_tensor *const *in, const void *user) {
    const reduce_user *r = user;
    if (r->all) return r->mean ? amp_mean_all(ctx, in[0]) : amp_sum_all(ctx, in[0]);
    return r->mean ? amp_mean(ctx, in[0], r->dim, r->keepdim) : amp_sum(ctx, in[0], r->dim, r->keepdim);
}

/* x [3,4,5] reduced over dim (0, 1, 2 or -1) or over everything. */
static void ref_reduce(const double *const *in, double *out, const void *user) {
    const reduce_user *r = user;
    const int shape[3] = {3, 4, 5};
    if (r->all) {
        double s = 0;
        for (int i = 0; i < 60; i++) s += in[0][i];
        out[0] = r->mean ? s / 60 : s;
        return;
    }
    const int d = r->dim < 0 ? r->dim + 3 : r->dim;
    int outer = 1, inner = 1;
    for (int i = 0; i < d; i++) outer *= shape[i];
    for (int i = d + 1; i < 3; i++) inner *= shape[i];
    for (int o = 0; o < outer; o++)
        for (int i = 0; i < inner; i++) {
            double s = 0;
            for (int l = 0; l < shape[d]; l++) s += in[0][(o * shape[d] + l) * inner + i];
            out[o * inner + i] = r->mean ? s / shape[d] : s;
        }
}

void test_ops_scale_reduce(void) {
    gradcheck sc = {.name = "scale", .n_inputs = 1, .inputs = {{.ndim = 2, .shape = {3, 4}}}, .build = build_scale,
                    .reference = ref_scale, .rtol_factor = 2};
    gradcheck_run_all_dtypes(&sc);
    const reduce_user users[] = {{0, false, false, false}, {1, true, false, false}, {-1, false, true, false},
                                 {2, true, true, false},   {0, false, false, true}, {0, false, true, true}};
    const char *names[] = {"sum dim 0", "sum dim 1 keepdim", "mean dim -1", "mean dim 2 keepdim", "sum_all",
                           "mean_all"};
    for (size_t i = 0; i < sizeof users / sizeof users[0]; i++) {
        /* A sequential fp32 sum of up to 60 terms of size <= 1 errs by up to 60 * 2^-24 * sum|x| in
         * absolute terms however much the terms cancel, so the absolute floor is the term count;
         * the result is then rounded once to the dtype (rtol u). */
        gradcheck c = {.name = names[i], .n_inputs = 1, .inputs = {{.ndim = 3, .shape = {3, 4, 5}}}, .build = build_reduce,
                       .reference = ref_reduce, .user = &users[i], .rtol_factor = 4, .atol_factor = 4,
                       .atol_floor = 60};
        gradcheck_run_all_dtypes(&c);
    }
}

/* ---- shape ops: reshape, flatten, transpose, concat, cast ---- */

static amp_tensor *build_transpose_mul(amp_ctx *ctx, amp_tensor *const *in, const void *user) {
    (void)user;
    /* transpose x [2,3,4] to [4,3,2] (a view), then use it elementwise against y [4,3,2] */
    amp_tensor *t = amp_transpose(ctx, in[0], 0, 2);
    return amp_mul(ctx, t, in[1]);
}
static void ref_transpose_mul(const double *const *in, double *out, const void *user) {
    (void)user;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 2; c++) out[(a * 3 + b) * 2 + c] = in[0][(c * 3 + b) * 4 + a] * in[1][(a * 3 + b) * 2 + c];
}

static amp_tensor *build_reshape_concat(amp_ctx *ctx, amp_tensor *const *in, const void *user) {
    (void)user;
    /* flatten x [2,3,2] from dim 1 -> [2,6]; reshape y [3,4] -> [2,-1] = [2,6]; concat along dim 1 */
    amp_tensor *xs[2] = {amp_flatten(ctx, in[0], 1), amp_reshape(ctx, in[1], 2, (const int64_t[]){2, -1})};
    amp_tensor *cat = amp_concat(ctx, xs, 2, 1);
    return amp_scale(ctx, cat, 3.0f);
}
static void ref_reshape_concat(const double *const *in, double *out, const void *user) {
    (void)user;
    for (int r = 0; r < 2; r++)
        for (int j = 0; j < 12; j++) out[r * 12 + j] = 3.0 * (j < 6 ? in[0][r * 6 + j] : in[1][r * 6 + j - 6]);
}

static amp_tensor *build_cast(amp_ctx *ctx, amp_tensor *const *in, const void *user) {
    (void)user;
    /* to fp32 and back to the input's dtype: both casts are exact here */
    amp_tensor *up = amp_cast(ctx, in[0], AMP_F32);
    return amp_cast(ctx, amp_scale(ctx, up, 0.5f), in[0]->dtype);
}
static void ref_cast(const double *const *in, double *out, const void *user) {
    (void)user;
    for (int i = 0; i < 6; i++) out[i] = 0.5 * in[0][i];
}

void test_ops_shape(void) {
    gradcheck t = {.name = "transpose", .n_inputs = 2, .inputs = {{.ndim = 3, .shape = {2, 3, 4}}, {.ndim = 3, .shape = {4, 3, 2}}},
                   .build = build_transpose_mul, .reference = ref_transpose_mul, .rtol_factor = 2};
    gradcheck_run_all_dtypes(&t);
    gradcheck rc = {.name = "reshape+concat", .n_inputs = 2, .inputs = {{.ndim = 3, .shape = {2, 3, 2}}, {.ndim = 2, .shape = {3, 4}}},
                    .build = build_reshape_concat, .reference = ref_reshape_concat, .rtol_factor = 2};
    gradcheck_run_all_dtypes(&rc);
    gradcheck cs = {.name = "cast", .n_inputs = 1, .inputs = {{.ndim = 1, .shape = {6}}}, .build = build_cast, .reference = ref_cast,
                    .rtol_factor = 1};
    gradcheck_run_all_dtypes(&cs);
}

/* ---- matmul and linear ---- */

typedef struct {
    int variant; /* 0: a [5,7] b [7,3]; 1: a^T view; 2: batched [2,5,7]x[2,7,3]; 3: batched a, shared b */
} matmul_user;

static amp_tensor *build_matmul(amp_ctx *ctx, amp_tensor *const *in, const void *user) {
    const int v = ((const matmul_user *)user)->variant;
    if (v == 1) return amp_matmul(ctx, amp_transpose(ctx, in[0], 0, 1), in[1]); /* in[0] is [7,5] */
    return amp_matmul(ctx, in[0], in[1]);
}

static void ref_matmul(const double *const *in, double *out, const void *user) {
    const int v = ((const matmul_user *)user)->variant;
    const int batches = v >= 2 ? 2 : 1;
    for (int bt = 0; bt < batches; bt++)
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 3; j++) {
                double s = 0;
                for (int p = 0; p < 7; p++) {
                    const double a = v == 1 ? in[0][p * 5 + i] : in[0][bt * 35 + i * 7 + p];
                    const double b = v == 2 ? in[1][bt * 21 + p * 3 + j] : in[1][p * 3 + j];
                    s += a * b;
                }
                out[bt * 15 + i * 3 + j] = s;
            }
}

typedef struct {
    bool bias;
} linear_user;

static amp_tensor *build_linear(amp_ctx *ctx, amp_tensor *const *in, const void *user) {
    return amp_linear(ctx, in[0], in[1], ((const linear_user *)user)->bias ? in[2] : NULL);
}

/* x [2,3,6] @ w [4,6]^T + b [4] */
static void ref_linear(const double *const *in, double *out, const void *user) {
    const bool bias = ((const linear_user *)user)->bias;
    for (int r = 0; r < 6; r++)
        for (int o = 0; o < 4; o++) {
            double s = bias ? in[2][o] : 0.0;
            for (int i = 0; i < 6; i++) s += in[0][r * 6 + i] * in[1][o * 6 + i];
            out[r * 4 + o] = s;
        }
}

void test_ops_matmul_linear(void) {
    const matmul_user mu[4] = {{0}, {1}, {2}, {3}};
#define IN(n, ...) {.ndim = n, .shape = {__VA_ARGS__}}
    const gradcheck_input shapes[4][2] = {{IN(2, 5, 7), IN(2, 7, 3)},
                                          {IN(2, 7, 5), IN(2, 7, 3)},
                                          {IN(3, 2, 5, 7), IN(3, 2, 7, 3)},
                                          {IN(3, 2, 5, 7), IN(2, 7, 3)}};
#undef IN
    const char *names[4] = {"matmul", "matmul a^T view", "matmul batched", "matmul batched a, shared b"};
    for (int v = 0; v < 4; v++) {
        /* 7-term dot products in fp32, output rounded once; backward GEMMs read the rounded gradient
         * and inputs exactly, so the gradient error is one rounding plus fp32 sums: factor 8. */
        gradcheck c = {.name = names[v], .n_inputs = 2, .build = build_matmul, .reference = ref_matmul,
                       .user = &mu[v], .rtol_factor = 8, .atol_factor = 8};
        c.inputs[0] = shapes[v][0];
        c.inputs[1] = shapes[v][1];
        gradcheck_run_all_dtypes(&c);
    }
    const linear_user with = {true}, without = {false};
    gradcheck l = {.name = "linear", .n_inputs = 3, .inputs = {{.ndim = 3, .shape = {2, 3, 6}}, {.ndim = 2, .shape = {4, 6}}, {.ndim = 1, .shape = {4}}},
                   .build = build_linear, .reference = ref_linear, .user = &with, .rtol_factor = 8, .atol_factor = 8};
    gradcheck_run_all_dtypes(&l);
    gradcheck l2 = {.name = "linear no bias", .n_inputs = 2, .inputs = {{.ndim = 3, .shape = {2, 3, 6}}, {.ndim = 2, .shape = {4, 6}}},
                    .build = build_linear, .reference = ref_linear, .user = &without, .rtol_factor = 8,
                    .atol_factor = 8};
    gradcheck_run_all_dtypes(&l2);
}
