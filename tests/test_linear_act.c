/* amp_linear_relu and amp_linear_gelu (src/ops/matmul.c): the activation applied in the GEMM's
 * epilogue, relu's gradient taken from the output and gelu's from the derivative stored in forward,
 * against amp_relu(amp_linear(...)) and amp_gelu(amp_linear(...)) in the same binary: the outputs,
 * the input's gradient and every parameter's gradient must match bit for bit. Two stacked layers (the
 * second's input gradient flows back through the first's activation), in fp32 and under bf16 and
 * fp16 autocast (gelu's is the pair there), on every path and at 1-3 threads; the shapes have odd
 * tails and a narrow last layer (its product computed transposed). Values on a coarse grid make exact
 * zeros of the pre-activation common (relu's kink: +0 out and a zero gradient), and a second pass puts
 * NaN in the input (both keep it). The first layer's activation gradient is applied in the second
 * layer's input-gradient GEMM, or (under a gradient hook) by the first layer's own backward: both are
 * checked; and a forward without gradients (gelu: no derivative made) gives the same outputs. */
#include <math.h>
#include <string.h>

#include "amp.h"
#include "harness.h"
#include "test_util.h"
#include "tests.h"

enum { ROWS = 37, IN = 70, HID = 130, OUT = 9 };

typedef struct act_rig {
    amp_ctx *ctx;
    amp_tensor *w1, *b1, *w2, *b2;
    float h[ROWS * HID], y[ROWS * OUT], dx[ROWS * IN];
} act_rig;

static bool rig_init(act_rig *r, test_rng *rng) {
    memset(r, 0, sizeof *r);
    if (amp_ctx_create(NULL, &r->ctx) != AMP_OK) return false;
    r->w1 = amp_param_new(r->ctx, "w1", AMP_F32, 2, (const int64_t[]){HID, IN});
    r->b1 = amp_param_new(r->ctx, "b1", AMP_F32, 1, (const int64_t[]){HID});
    r->w2 = amp_param_new(r->ctx, "w2", AMP_F32, 2, (const int64_t[]){OUT, HID});
    r->b2 = amp_param_new(r->ctx, "b2", AMP_F32, 1, (const int64_t[]){OUT});
    if (!r->b2 || amp_ctx_alloc_params(r->ctx) != AMP_OK) return false;
    test_fill_params_eighths(r->ctx, rng);
    return true;
}

/* layer(x) for the activation under test: fused, or the pair */
static amp_tensor *layer(amp_ctx *c, bool gelu, bool fused, amp_tensor *x, amp_tensor *w, amp_tensor *b) {
    if (gelu) return fused ? amp_linear_gelu(c, x, w, b) : amp_gelu(c, amp_linear(c, x, w, b));
    return fused ? amp_linear_relu(c, x, w, b) : amp_relu(c, amp_linear(c, x, w, b));
}

/* One forward and backward; fused or the pair; with a gradient hook, under which the first layer's
 * activation gradient is not applied inside the second layer's input-gradient GEMM (the hook must see
 * the output's own) but by the first layer's backward. Copies h, y (as fp32) and x's gradient into
 * the rig. Without grad: the forward alone, with gradients off (h and y only). */
static bool run(act_rig *r, const float *xv, amp_dtype cast, bool gelu, bool fused, bool hook, bool grad) {
    amp_ctx *c = r->ctx;
    amp_ctx_reset(c);
    amp_zero_grad(c);
    amp_tensor *x = amp_tensor_from(c, AMP_F32, 2, (const int64_t[]){ROWS, IN}, xv, AMP_F32);
    if (!x) return false;
    amp_tensor_set_requires_grad(x, true);
    if (!grad) amp_set_grad_enabled(c, false);
    if (cast != AMP_F32) amp_autocast_enter(cast);
    amp_tensor *h = layer(c, gelu, fused, x, r->w1, r->b1);
    amp_tensor *y = h ? layer(c, gelu, fused, h, r->w2, r->b2) : NULL;
    if (cast != AMP_F32) amp_autocast_exit();
    if (!grad) {
        amp_set_grad_enabled(c, true);
        return CHECK_MSG(y, "%s", amp_ctx_error(c)) && amp_tensor_read(h, r->h, AMP_F32) == AMP_OK &&
               amp_tensor_read(y, r->y, AMP_F32) == AMP_OK;
    }
    amp_tensor *loss = y ? amp_mean_all(c, amp_mul(c, y, y)) : NULL;
    amp_ctx_set_backward_grad_hook(c, hook ? test_noop_grad_hook : NULL, NULL);
    const int st = loss ? amp_backward_scaled(c, loss, 64.0f) : AMP_ERR_INVALID_ARGUMENT;
    amp_ctx_set_backward_grad_hook(c, NULL, NULL);
    if (!CHECK_MSG(st == AMP_OK, "%s", amp_ctx_error(c))) return false;
    if (!CHECK(x->grad && h->dtype == (cast == AMP_F32 ? AMP_F32 : cast))) return false;
    return amp_tensor_read(h, r->h, AMP_F32) == AMP_OK && amp_tensor_read(y, r->y, AMP_F32) == AMP_OK &&
           amp_tensor_read(x->grad, r->dx, AMP_F32) == AMP_OK;
}

/* The same bits; with any_nan, or both NaN: gelu's multiplies pass on one of two NaN operands (x and
 * erfc(-x / sqrt 2), which carries the other sign) as the compiler orders them, which the fused
 * kernel's inlining may change (tests/test_gelu_kernels.c compares its kernels so too). relu's NaN
 * bits are compared. */
static bool same_bits(const float *a, const float *b, int64_t n, bool any_nan) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof *a) != 0 && !(any_nan && isnan(a[i]) && isnan(b[i]))) return false;
    return true;
}

static void check_act(bool gelu) {
    const char *name = gelu ? "amp_linear_gelu" : "amp_linear_relu";
    const amp_dtype casts[] = {AMP_F32, AMP_BF16, AMP_F16};
    test_rng rng = {harness_seed() ^ (gelu ? 0x6E1Cu : 0x11E1u)};
    static float xv[ROWS * IN];
    act_rig fused, pair;
    test_rng r1 = rng, r2 = rng; /* the same parameters in both */
    if (!CHECK(rig_init(&fused, &r1) && rig_init(&pair, &r2))) goto out;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < ROWS * IN; i++) xv[i] = (float)((int)test_rng_below(&rng, 5) - 2) / 4.0f;
        if (pass == 1) xv[5 * IN + 3] = NAN, xv[20 * IN] = NAN; /* two rows of NaN from the first layer on */
        int64_t zeros = 0;
        for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
            if (!test_isa_begin(isa)) continue;
            for (size_t ci = 0; ci < sizeof casts / sizeof casts[0]; ci++)
                for (int threads = 1; threads <= 3; threads++) {
                    amp_set_num_threads(threads);
                    const bool hook = threads == 2; /* one thread count runs the unfused gradient path */
                    if (!run(&fused, xv, casts[ci], gelu, true, hook, true) ||
                        !run(&pair, xv, casts[ci], gelu, false, false, true))
                        continue;
                    bool same = same_bits(fused.h, pair.h, ROWS * HID, gelu) &&
                                same_bits(fused.y, pair.y, ROWS * OUT, gelu) &&
                                same_bits(fused.dx, pair.dx, ROWS * IN, gelu);
                    for (size_t p = 0; p < amp_ctx_num_params(fused.ctx); p++) {
                        const amp_tensor *a = amp_ctx_param(fused.ctx, p), *b = amp_ctx_param(pair.ctx, p);
                        same = same && a->grad && b->grad &&
                               same_bits(a->grad->data, b->grad->data, amp_tensor_numel(a), gelu);
                    }
                    CHECK_MSG(same, "%s, %s, %d threads%s, pass %d: %s differs from the pair", amp_isa_name(isa),
                              amp_dtype_name(casts[ci]), threads, hook ? " (hook)" : "", pass, name);
                    for (int i = 0; i < ROWS * HID; i++) zeros += fused.h[i] == 0.0f;
                    /* the forward alone, no gradients recorded */
                    if (threads == 1 && run(&fused, xv, casts[ci], gelu, true, false, false) &&
                        run(&pair, xv, casts[ci], gelu, false, false, false))
                        CHECK_MSG(same_bits(fused.h, pair.h, ROWS * HID, gelu) &&
                                      same_bits(fused.y, pair.y, ROWS * OUT, gelu),
                                  "%s, %s, pass %d, no grad: %s differs from the pair", amp_isa_name(isa),
                                  amp_dtype_name(casts[ci]), pass, name);
                }
            amp_set_num_threads(0);
        }
        test_isa_end();
        /* the kink must be exercised: a good share of the hidden values is exactly relu's +0 */
        CHECK_MSG(zeros > 0, "pass %d: no hidden value is 0", pass);
    }
out:
    amp_ctx_free(fused.ctx);
    amp_ctx_free(pair.ctx);
}

void test_linear_relu(void) { check_act(false); }
void test_linear_gelu(void) { check_act(true); }
