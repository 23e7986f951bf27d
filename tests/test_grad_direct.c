/* A linear's weight gradient under autocast, rounded to the weight copy's dtype and added into the
 * fp32 master gradient inside the GEMM's epilogue (amp_grad_sink_open, src/tensor/autograd.c),
 * against the unfused path: the copy's gradient as a tensor, then the cast's backward. A no-op
 * backward-grad hook forces the unfused path (the hook must see every node's gradient), so the two
 * run the same graph in one binary; every gradient must match bit for bit. The cases are the ones
 * where a shortcut could change the order of the additions into the master's gradient: a copy read
 * twice, a parameter also read directly between its cast and the linear, a gradient accumulated
 * over backward calls, a retained copy, bf16 and fp16, and plain fp32 weights. */
#include <string.h>

#include "../src/tensor/ctx_internal.h"
#include "amp.h"
#include "harness.h"
#include "tests.h"

enum { ROWS = 24, IN = 40, HID = 48, OUT = 20, N_PARAMS = 6 };

typedef struct rig {
    amp_ctx *ctx;
    amp_tensor *w1, *b1, *w2, *w3, *wd, *unused;
} rig;

static bool rig_make(rig *r) {
    memset(r, 0, sizeof *r);
    if (amp_ctx_create(NULL, &r->ctx) != AMP_OK) return false;
    amp_ctx *c = r->ctx;
    r->w1 = amp_param_new(c, "w1", AMP_F32, 2, (const int64_t[]){HID, IN});
    r->b1 = amp_param_new(c, "b1", AMP_F32, 1, (const int64_t[]){HID});
    r->w2 = amp_param_new(c, "w2", AMP_F32, 2, (const int64_t[]){OUT, HID});
    r->w3 = amp_param_new(c, "w3", AMP_F32, 2, (const int64_t[]){OUT, OUT});
    r->wd = amp_param_new(c, "wd", AMP_F32, 2, (const int64_t[]){OUT, HID});
    r->unused = amp_param_new(c, "unused", AMP_F32, 1, (const int64_t[]){7});
    if (!r->unused || amp_ctx_alloc_params(c) != AMP_OK) return false;
    for (size_t i = 0; i < amp_ctx_num_params(c); i++) {
        amp_tensor *p = amp_ctx_param(c, i);
        const int64_t n = amp_tensor_numel(p);
        float *v = p->data;
        for (int64_t e = 0; e < n; e++) v[e] = (float)((e * 37 + (int64_t)i * 11) % 101) / 97.0f - 0.5f;
    }
    return true;
}

static void noop_hook(amp_ctx *ctx, const amp_tensor *out, const amp_tensor *grad, void *user) {
    (void)ctx, (void)out, (void)grad, (void)user;
}

/* One forward and backward of micro-batch `mb` of case `which`; the grads accumulate. */
static bool step(rig *r, int which, amp_dtype cast, int mb, bool unfused, amp_tensor **copy) {
    amp_ctx *c = r->ctx;
    amp_ctx_reset(c);
    float xv[ROWS * IN];
    for (int i = 0; i < ROWS * IN; i++) xv[i] = (float)((i * 13 + mb * 7) % 29) / 7.0f - 2.0f;
    amp_tensor *x = amp_tensor_from(c, AMP_F32, 2, (const int64_t[]){ROWS, IN}, xv, AMP_F32);
    if (cast != AMP_F32) amp_autocast_enter(cast);
    amp_tensor *h = amp_relu(c, amp_linear(c, x, r->w1, r->b1));
    amp_tensor *y;
    if (which == 1) { /* w3's copy read by two linears: its gradient sums in the copy's dtype first */
        y = amp_linear(c, amp_linear(c, amp_linear(c, h, r->w2, NULL), r->w3, NULL), r->w3, NULL);
    } else if (which == 2) { /* wd read directly (fp32) after its cast and before the linear */
        amp_tensor *wc = cast != AMP_F32 ? amp_cast(c, r->wd, cast) : r->wd;
        amp_autocast_enter_disabled();
        amp_tensor *direct = amp_sum_all(c, amp_mul(c, r->wd, r->wd));
        amp_autocast_exit();
        y = amp_add(c, amp_linear(c, h, wc, NULL), amp_linear(c, h, r->w2, NULL));
        y = amp_add(c, amp_sum_all(c, y), direct);
    } else if (which == 3) { /* w2's copy retains its gradient */
        y = amp_linear(c, h, r->w2, NULL);
        amp_tensor *w2c = y && y->grad_fn ? y->grad_fn->in[1] : NULL;
        if (w2c && w2c != r->w2) amp_tensor_retain_grad(w2c);
        if (copy) *copy = w2c;
    } else {
        y = amp_linear(c, h, r->w2, NULL);
    }
    if (cast != AMP_F32) amp_autocast_exit();
    amp_tensor *loss = y ? amp_mean_all(c, amp_mul(c, y, y)) : NULL;
    amp_ctx_set_backward_grad_hook(c, unfused ? noop_hook : NULL, NULL);
    const int st = loss ? amp_backward_scaled(c, loss, 64.0f) : AMP_ERR_INVALID_ARGUMENT;
    amp_ctx_set_backward_grad_hook(c, NULL, NULL);
    return CHECK_MSG(st == AMP_OK, "case %d: %s", which, amp_ctx_error(c));
}

static const char *case_name(int which) {
    static const char *names[] = {"plain", "copy read twice", "direct read between cast and linear", "retained copy"};
    return names[which];
}

void test_grad_direct(void) {
    const amp_dtype casts[] = {AMP_BF16, AMP_F16, AMP_F32};
    for (size_t ci = 0; ci < sizeof casts / sizeof casts[0]; ci++) {
        for (int which = 0; which < 4; which++) {
            rig fused, plain;
            if (!CHECK(rig_make(&fused) && rig_make(&plain))) {
                amp_ctx_free(fused.ctx), amp_ctx_free(plain.ctx);
                continue;
            }
            amp_zero_grad(fused.ctx), amp_zero_grad(plain.ctx);
            amp_tensor *fused_copy = NULL, *plain_copy = NULL;
            for (int mb = 0; mb < 3; mb++) { /* three micro-batches: the later ones add into the first's */
                if (!step(&fused, which, casts[ci], mb, false, &fused_copy) ||
                    !step(&plain, which, casts[ci], mb, true, &plain_copy))
                    break;
                if (which == 3 && casts[ci] != AMP_F32 &&
                    CHECK_MSG(fused_copy && fused_copy->grad && plain_copy && plain_copy->grad,
                              "%s: the retained copy has no gradient", amp_dtype_name(casts[ci])))
                    CHECK(memcmp(fused_copy->grad->data, plain_copy->grad->data,
                                 (size_t)amp_tensor_numel(fused_copy) * amp_dtype_size(fused_copy->dtype)) == 0);
            }
            for (size_t i = 0; i < amp_ctx_num_params(fused.ctx); i++) {
                const amp_tensor *a = amp_ctx_param(fused.ctx, i)->grad, *b = amp_ctx_param(plain.ctx, i)->grad;
                CHECK_MSG(memcmp(a->data, b->data, (size_t)amp_tensor_numel(a) * sizeof(float)) == 0,
                          "%s, %s: %s's gradient differs from the unfused path's", amp_dtype_name(casts[ci]),
                          case_name(which), amp_ctx_param(fused.ctx, i)->name);
            }
            const float *u = amp_ctx_param(fused.ctx, 5)->grad->data;
            CHECK(u[0] == 0.0f && u[6] == 0.0f);
            /* the shortcut is taken where it may be (w1, and w2 unless retained), never on the unfused
             * path; 3 micro-batches */
            const uint64_t want = casts[ci] == AMP_F32 ? 0 : (which == 3 ? 1 : 2) * 3;
            CHECK_MSG(fused.ctx->grads_direct == want && plain.ctx->grads_direct == 0,
                      "%s, %s: %llu gradients went straight to the master, want %llu", amp_dtype_name(casts[ci]),
                      case_name(which), (unsigned long long)fused.ctx->grads_direct, (unsigned long long)want);
            amp_ctx_free(fused.ctx), amp_ctx_free(plain.ctx);
        }
    }
}
