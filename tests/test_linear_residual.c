/* amp_linear_residual (src/ops/matmul.c): residual + linear(x) with the add in the GEMM's epilogue and
 * the residual's gradient handed over, against amp_add(residual, amp_linear(...)) in the same binary.
 * A transformer's pattern, two residual layers on an fp32 stream: s1 = s0 + linear(x) (s0 a leaf),
 * s2 = s1 + linear(relu(s1)) (no bias; s1 read twice), y = linear(s2). Outputs must have the same
 * bits, gradients (x, s0, every parameter) too, but for NaN payloads and the sign of a zero (the pair's
 * add backward gives 0 + g, the fused op passes g on). In fp32 and under bf16 and fp16 autocast (the
 * linear's 16-bit result rounded in the epilogue before the fp32 add), on every path, at 1-3 threads,
 * in three gradient routes: the hand-over (s0 and s1 get their first gradient from the fused nodes),
 * under a gradient hook, and the copies (s1 retained, s0 read again later in forward so that its
 * gradient exists when the first fused node runs). Values on a coarse grid (many exact zeros); a
 * second pass puts NaN in x. Then the cases that must stay the pair: a broadcast residual, a bf16 one,
 * and a residual of the wrong shape (an error, as amp_add gives). */
#include <math.h>
#include <string.h>

#include "../src/tensor/ctx_internal.h"
#include "amp.h"
#include "harness.h"
#include "test_util.h"
#include "tests.h"

enum { ROWS = 37, IN = 70, HID = 130, OUT = 9 };

typedef struct res_rig {
    amp_ctx *ctx;
    amp_tensor *w1, *b1, *w2, *w3, *b3;
    float s1[ROWS * HID], s2[ROWS * HID], y[ROWS * OUT], dx[ROWS * IN], ds0[ROWS * HID];
    bool fused_nodes; /* both residual layers were recorded as one linear node each */
} res_rig;

static bool rig_init(res_rig *r, test_rng *rng) {
    memset(r, 0, sizeof *r);
    if (amp_ctx_create(NULL, &r->ctx) != AMP_OK) return false;
    r->w1 = amp_param_new(r->ctx, "w1", AMP_F32, 2, (const int64_t[]){HID, IN});
    r->b1 = amp_param_new(r->ctx, "b1", AMP_F32, 1, (const int64_t[]){HID});
    r->w2 = amp_param_new(r->ctx, "w2", AMP_F32, 2, (const int64_t[]){HID, HID});
    r->w3 = amp_param_new(r->ctx, "w3", AMP_F32, 2, (const int64_t[]){OUT, HID});
    r->b3 = amp_param_new(r->ctx, "b3", AMP_F32, 1, (const int64_t[]){OUT});
    if (!r->b3 || amp_ctx_alloc_params(r->ctx) != AMP_OK) return false;
    test_fill_params_eighths(r->ctx, rng);
    return true;
}

/* The gradient routes of the residuals (see the top). */
typedef enum { ROUTE_HAND_OVER, ROUTE_HOOK, ROUTE_COPY, ROUTE_COUNT } route;

static amp_tensor *res_layer(amp_ctx *c, bool fused, amp_tensor *x, amp_tensor *w, amp_tensor *b, amp_tensor *res) {
    if (fused) return amp_linear_residual(c, x, w, b, res);
    amp_tensor *y = amp_linear(c, x, w, b);
    return y ? amp_add(c, res, y) : NULL;
}

/* One forward and backward, fused or the pair; copies s1, s2, y and the gradients of x and s0. */
static bool run(res_rig *r, const float *xv, const float *s0v, amp_dtype cast, bool fused, route rt) {
    amp_ctx *c = r->ctx;
    amp_ctx_reset(c);
    amp_zero_grad(c);
    amp_tensor *x = amp_tensor_from(c, AMP_F32, 2, (const int64_t[]){ROWS, IN}, xv, AMP_F32);
    amp_tensor *s0 = amp_tensor_from(c, AMP_F32, 2, (const int64_t[]){ROWS, HID}, s0v, AMP_F32);
    if (!x || !s0) return false;
    amp_tensor_set_requires_grad(x, true);
    amp_tensor_set_requires_grad(s0, true);
    if (cast != AMP_F32) amp_autocast_enter(cast);
    amp_tensor *s1 = res_layer(c, fused, x, r->w1, r->b1, s0);
    if (s1 && rt == ROUTE_COPY) amp_tensor_retain_grad(s1);
    amp_tensor *s2 = s1 ? res_layer(c, fused, amp_relu(c, s1), r->w2, NULL, s1) : NULL;
    amp_tensor *y = s2 ? amp_linear(c, s2, r->w3, r->b3) : NULL;
    if (cast != AMP_F32) amp_autocast_exit();
    amp_tensor *loss = y ? amp_mean_all(c, amp_mul(c, y, y)) : NULL;
    if (loss && rt == ROUTE_COPY) loss = amp_add(c, loss, amp_mean_all(c, amp_mul(c, s0, s2)));
    if (!CHECK_MSG(loss, "%s", amp_ctx_error(c))) return false;
    r->fused_nodes = s1->grad_fn && s1->grad_fn->op == AMP_OP_LINEAR && s2->grad_fn && s2->grad_fn->op == AMP_OP_LINEAR;
    amp_ctx_set_backward_grad_hook(c, rt == ROUTE_HOOK ? test_noop_grad_hook : NULL, NULL);
    const int st = amp_backward_scaled(c, loss, 64.0f);
    amp_ctx_set_backward_grad_hook(c, NULL, NULL);
    if (!CHECK_MSG(st == AMP_OK, "%s", amp_ctx_error(c))) return false;
    if (!CHECK(x->grad && s0->grad && s1->dtype == AMP_F32 && s2->dtype == AMP_F32)) return false;
    return amp_tensor_read(s1, r->s1, AMP_F32) == AMP_OK && amp_tensor_read(s2, r->s2, AMP_F32) == AMP_OK &&
           amp_tensor_read(y, r->y, AMP_F32) == AMP_OK && amp_tensor_read(x->grad, r->dx, AMP_F32) == AMP_OK &&
           amp_tensor_read(s0->grad, r->ds0, AMP_F32) == AMP_OK;
}

/* The same bits, but NaN for NaN (an add passes on one of two NaN operands as the compiler orders them)
 * and, with zero_sign, 0 for 0 (a gradient the pair computed as 0 + g) */
static bool same_bits(const float *a, const float *b, int64_t n, bool zero_sign) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof *a) != 0 && !(isnan(a[i]) && isnan(b[i])) &&
            !(zero_sign && a[i] == 0.0f && b[i] == 0.0f))
            return false;
    return true;
}

static const char *const route_names[ROUTE_COUNT] = {"hand-over", "hook", "copies"};

static void check_against_pair(void) {
    const amp_dtype casts[] = {AMP_F32, AMP_BF16, AMP_F16};
    test_rng rng = {harness_seed() ^ 0x2E51u};
    static float xv[ROWS * IN], s0v[ROWS * HID];
    res_rig fused, pair;
    test_rng r1 = rng, r2 = rng; /* the same parameters in both */
    if (!CHECK(rig_init(&fused, &r1) && rig_init(&pair, &r2))) goto out;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < ROWS * IN; i++) xv[i] = (float)((int)test_rng_below(&rng, 5) - 2) / 4.0f;
        for (int i = 0; i < ROWS * HID; i++) s0v[i] = (float)((int)test_rng_below(&rng, 7) - 3) / 8.0f;
        if (pass == 1) xv[5 * IN + 3] = NAN, xv[20 * IN] = NAN; /* two rows of NaN from the first layer on */
        for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
            if (!test_isa_begin(isa)) continue;
            for (size_t ci = 0; ci < sizeof casts / sizeof casts[0]; ci++)
                for (int threads = 1; threads <= 3; threads++)
                    for (int rt = 0; rt < ROUTE_COUNT; rt++) {
                        amp_set_num_threads(threads);
                        if (!run(&fused, xv, s0v, casts[ci], true, (route)rt) ||
                            !run(&pair, xv, s0v, casts[ci], false, (route)rt))
                            continue;
                        bool same = fused.fused_nodes && same_bits(fused.s1, pair.s1, ROWS * HID, false) &&
                                    same_bits(fused.s2, pair.s2, ROWS * HID, false) &&
                                    same_bits(fused.y, pair.y, ROWS * OUT, false) &&
                                    same_bits(fused.dx, pair.dx, ROWS * IN, true) &&
                                    same_bits(fused.ds0, pair.ds0, ROWS * HID, true);
                        for (size_t p = 0; p < amp_ctx_num_params(fused.ctx); p++) {
                            const amp_tensor *a = amp_ctx_param(fused.ctx, p), *b = amp_ctx_param(pair.ctx, p);
                            same = same && a->grad && b->grad &&
                                   same_bits(a->grad->data, b->grad->data, amp_tensor_numel(a), true);
                        }
                        CHECK_MSG(same, "%s, %s, %d threads, %s, pass %d: amp_linear_residual differs from the pair%s",
                                  amp_isa_name(isa), amp_dtype_name(casts[ci]), threads, route_names[rt], pass,
                                  fused.fused_nodes ? "" : " (not fused)");
                    }
            amp_set_num_threads(0);
        }
        test_isa_end();
    }
out:
    amp_ctx_free(fused.ctx);
    amp_ctx_free(pair.ctx);
}

/* Residuals that cannot be added in the epilogue: the pair's values and gradients, recorded as an add;
 * a residual that does not broadcast: amp_add's error. */
static void check_unfused(void) {
    test_rng rng = {harness_seed() ^ 0x2E52u};
    res_rig r;
    if (!CHECK(rig_init(&r, &rng))) goto out;
    static float xv[ROWS * IN], rv[ROWS * (HID + 1)], got[ROWS * HID], want[ROWS * HID];
    for (int i = 0; i < ROWS * IN; i++) xv[i] = (float)((int)test_rng_below(&rng, 5) - 2) / 4.0f;
    for (int i = 0; i < ROWS * (HID + 1); i++) rv[i] = (float)((int)test_rng_below(&rng, 7) - 3) / 8.0f;
    const struct {
        const char *what;
        amp_dtype dt;
        int ndim;
        int64_t shape[2];
    } cases[] = {{"broadcast [HID]", AMP_F32, 1, {HID, 0}}, {"bf16", AMP_BF16, 2, {ROWS, HID}}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        float dres[2][ROWS * HID], dw[2][HID * IN];
        const int64_t nres = cases[k].ndim == 1 ? HID : ROWS * HID;
        for (int fused = 0; fused < 2; fused++) {
            amp_ctx *c = r.ctx;
            amp_ctx_reset(c);
            amp_zero_grad(c);
            amp_tensor *x = amp_tensor_from(c, AMP_F32, 2, (const int64_t[]){ROWS, IN}, xv, AMP_F32);
            amp_tensor *res = amp_tensor_from(c, cases[k].dt, cases[k].ndim, cases[k].shape, rv, AMP_F32);
            if (!CHECK(x && res)) goto out;
            amp_tensor_set_requires_grad(res, true);
            amp_tensor *s = res_layer(c, fused, x, r.w1, r.b1, res);
            amp_tensor *loss = s ? amp_mean_all(c, amp_mul(c, s, s)) : NULL;
            if (!CHECK_MSG(loss && amp_backward(c, loss, NULL) == AMP_OK, "%s: %s", cases[k].what, amp_ctx_error(c))) goto out;
            CHECK_MSG(s->grad_fn && s->grad_fn->op == AMP_OP_ADD, "%s: not the pair", cases[k].what);
            if (!CHECK(res->grad && amp_tensor_read(s, fused ? got : want, AMP_F32) == AMP_OK &&
                       amp_tensor_read(res->grad, dres[fused], AMP_F32) == AMP_OK &&
                       amp_tensor_read(r.w1->grad, dw[fused], AMP_F32) == AMP_OK))
                goto out;
        }
        CHECK_MSG(same_bits(got, want, ROWS * HID, false) && same_bits(dres[0], dres[1], nres, false) &&
                      same_bits(dw[0], dw[1], HID * IN, false),
                  "%s: differs from the pair", cases[k].what);
    }
    /* [ROWS, HID + 1] does not broadcast against [ROWS, HID] */
    amp_ctx_reset(r.ctx);
    amp_tensor *x = amp_tensor_from(r.ctx, AMP_F32, 2, (const int64_t[]){ROWS, IN}, xv, AMP_F32);
    amp_tensor *bad = amp_tensor_from(r.ctx, AMP_F32, 2, (const int64_t[]){ROWS, HID + 1}, rv, AMP_F32);
    if (!CHECK(x && bad)) goto out;
    CHECK_MSG(!amp_linear_residual(r.ctx, x, r.w1, r.b1, bad) && strstr(amp_ctx_error(r.ctx), "broadcast"),
              "a residual of the wrong shape: \"%s\"", amp_ctx_error(r.ctx));
out:
    amp_ctx_free(r.ctx);
}

void test_linear_residual(void) {
    check_against_pair();
    check_unfused();
}
