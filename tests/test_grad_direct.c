/* A linear's weight gradient under autocast, rounded to the weight copy's dtype and added into the
 * fp32 master gradient inside the GEMM's epilogue (amp_grad_sink_open, src/tensor/autograd.c),
 * against the unfused path: the copy's gradient as a tensor, then the cast's backward. A no-op
 * backward-grad hook forces the unfused path (the hook must see every node's gradient), so the two
 * run the same graph in one binary; every gradient must match bit for bit. The cases are the ones
 * where a shortcut could change the order of the additions into the master's gradient: a copy read
 * twice, a parameter also read directly between its cast and the linear, a gradient accumulated
 * over backward calls, a retained copy, a tied head reading the first rows of a weight's cast (its
 * gradient into the weight's first rows, zeros into the rest) with the weight also read before the
 * cast or between the narrowing and the linear, bf16 and fp16, and plain fp32 weights. The unfused side
 * also zeroes its gradients the old way (a memset), the fused one with amp_zero_grad's lazy zeros,
 * over the last step's garbage; test_grad_lazy_zero checks every reader of those zeros. */
#include <math.h>
#include <string.h>

#include "../src/tensor/autograd.h"
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

/* Nonzero gradients everywhere (NaN in the unused parameter's). */
static void fill_grads(rig *r) {
    for (size_t i = 0; i < amp_ctx_num_params(r->ctx); i++) {
        amp_tensor *g = amp_ctx_param(r->ctx, i)->grad;
        float *v = g->data;
        for (int64_t e = 0; e < amp_tensor_numel(g); e++) v[e] = i == 5 ? NAN : 1.5f + (float)e;
    }
}

static uint32_t f32_bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The old amp_zero_grad: a memset of the whole gradient buffer. */
static void eager_zero(rig *r) {
    size_t bytes = 0;
    void *grads = amp_ctx_grad_memory(r->ctx, &bytes);
    memset(grads, 0, bytes);
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
        amp_mul(c, r->w3, r->w3); /* on the tape, reaches no loss: w3 gets no gradient */
        amp_autocast_exit();
        y = amp_add(c, amp_linear(c, h, wc, NULL), amp_linear(c, h, r->w2, NULL));
        y = amp_add(c, amp_sum_all(c, y), direct);
    } else if (which == 3) { /* w2's copy retains its gradient */
        y = amp_linear(c, h, r->w2, NULL);
        amp_tensor *w2c = y && y->grad_fn ? y->grad_fn->in[1] : NULL;
        if (w2c && w2c != r->w2) amp_tensor_retain_grad(w2c);
        if (copy) *copy = w2c;
    } else if (which == 4 || which == 5) {
        /* a tied head: the linear reads the first 17 of wd's 20 rows of its cast (amp_narrow_rows), wd
         * also read directly, before its cast (an embedding's lookup: it runs after), or (5) between
         * the narrowing and the linear, where the shortcut would overtake it */
        amp_autocast_enter_disabled();
        amp_tensor *direct = which == 4 ? amp_sum_all(c, amp_mul(c, r->wd, r->wd)) : NULL;
        amp_autocast_exit();
        amp_tensor *wc = cast != AMP_F32 ? amp_cast(c, r->wd, cast) : r->wd;
        amp_tensor *head = amp_narrow_rows(c, wc, 17);
        amp_autocast_enter_disabled();
        if (which == 5) direct = amp_sum_all(c, amp_mul(c, r->wd, r->wd));
        amp_autocast_exit();
        y = amp_add(c, amp_sum_all(c, amp_linear(c, h, head, NULL)), direct);
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
    static const char *names[] = {"plain", "copy read twice", "direct read between cast and linear", "retained copy",
                                  "tied head (rows of a cast)", "tied head, direct read between"};
    return names[which];
}

void test_grad_direct(void) {
    const amp_dtype casts[] = {AMP_BF16, AMP_F16, AMP_F32};
    for (size_t ci = 0; ci < sizeof casts / sizeof casts[0]; ci++) {
        for (int which = 0; which < 6; which++) {
            rig fused, plain;
            if (!CHECK(rig_make(&fused) && rig_make(&plain))) {
                amp_ctx_free(fused.ctx), amp_ctx_free(plain.ctx);
                continue;
            }
            /* the last step's gradients: garbage that zero_grad must hide. The fused side zeroes lazily
             * (amp_zero_grad), the unfused side writes its zeros itself (the old memset) */
            fill_grads(&fused), fill_grads(&plain);
            amp_zero_grad(fused.ctx);
            eager_zero(&plain);
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
            /* the shortcut is taken where it may be (w1, and w2 unless retained; the tied head's wd
             * from the linear, or (read between) from the narrowing's backward once the direct read's
             * has run), never on the unfused path; 3 micro-batches */
            const uint64_t want = casts[ci] == AMP_F32 ? 0 : (which == 3 ? 1 : 2) * 3;
            CHECK_MSG(fused.ctx->grads_direct == want && plain.ctx->grads_direct == 0,
                      "%s, %s: %llu gradients went straight to the master, want %llu", amp_dtype_name(casts[ci]),
                      case_name(which), (unsigned long long)fused.ctx->grads_direct, (unsigned long long)want);
            amp_ctx_free(fused.ctx), amp_ctx_free(plain.ctx);
        }
    }
}

/* ---- amp_zero_grad's lazy zeros (src/tensor/ctx_internal.h) ---- */

typedef struct ready_log {
    rig *r;
    int order[N_PARAMS], n;
    float snap[N_PARAMS][HID * IN];
} ready_log;

static void on_ready(amp_ctx *ctx, size_t index, void *user) {
    (void)ctx;
    ready_log *log = user;
    const amp_tensor *g = amp_ctx_param(log->r->ctx, index)->grad;
    if (log->n < N_PARAMS) log->order[log->n++] = (int)index;
    memcpy(log->snap[index], g->data, (size_t)amp_tensor_numel(g) * sizeof(float));
}

static bool grads_zero(const rig *r) {
    for (size_t i = 0; i < amp_ctx_num_params(r->ctx); i++) {
        const amp_tensor *g = amp_ctx_param(r->ctx, i)->grad;
        for (int64_t e = 0; e < amp_tensor_numel(g); e++)
            if (f32_bits_of(((const float *)g->data)[e]) != 0) return false;
    }
    return true;
}

/* Every reader sees zeros where no gradient was written: the grad-ready hook (at the moment each
 * parameter is reported, in the order of an eagerly zeroed context), the end of backward (the unused
 * parameter, a failed backward), amp_ctx_grad_memory, the optimizer and the scaler's unscale without
 * any backward. */
void test_grad_lazy_zero(void) {
    rig lazy, eager;
    static ready_log lazy_log, eager_log;
    if (!CHECK(rig_make(&lazy) && rig_make(&eager))) goto out;
    fill_grads(&lazy), fill_grads(&eager);
    amp_zero_grad(lazy.ctx);
    size_t bytes = 0;
    eager_zero(&eager);
    memset(&lazy_log, 0, sizeof lazy_log), memset(&eager_log, 0, sizeof eager_log);
    lazy_log.r = &lazy, eager_log.r = &eager;
    amp_ctx_set_grad_ready_hook(lazy.ctx, on_ready, &lazy_log);
    amp_ctx_set_grad_ready_hook(eager.ctx, on_ready, &eager_log);
    if (!step(&lazy, 2, AMP_BF16, 0, false, NULL) || !step(&eager, 2, AMP_BF16, 0, false, NULL)) goto out;
    CHECK(lazy_log.n == eager_log.n && lazy_log.n == N_PARAMS - 1); /* all but unused are on the tape */
    CHECK(memcmp(lazy_log.order, eager_log.order, sizeof lazy_log.order) == 0);
    for (int q = 0; q < lazy_log.n; q++) {
        const int i = lazy_log.order[q];
        const amp_tensor *g = amp_ctx_param(lazy.ctx, (size_t)i)->grad;
        const size_t nb = (size_t)amp_tensor_numel(g) * sizeof(float);
        const void *want = amp_ctx_param(eager.ctx, (size_t)i)->grad->data;
        CHECK_MSG(memcmp(lazy_log.snap[i], g->data, nb) == 0 && memcmp(g->data, want, nb) == 0,
                  "%s: reported before it was complete, or differs from the eagerly zeroed run",
                  amp_ctx_param(lazy.ctx, (size_t)i)->name);
    }
    const float *u = amp_ctx_param(lazy.ctx, 5)->grad->data, *w3 = amp_ctx_param(lazy.ctx, 3)->grad->data;
    CHECK(f32_bits_of(u[0]) == 0 && f32_bits_of(u[6]) == 0);
    CHECK(f32_bits_of(w3[0]) == 0 && f32_bits_of(w3[OUT * OUT - 1]) == 0);
    amp_ctx_set_grad_ready_hook(lazy.ctx, NULL, NULL);

    /* the first accumulation into an empty gradient stores 0 + g: -0 becomes +0, as when added to zeros */
    fill_grads(&lazy);
    amp_zero_grad(lazy.ctx);
    amp_ctx_reset(lazy.ctx);
    enum { NW3 = OUT * OUT };
    uint16_t hb[NW3];
    float gf[NW3];
    for (int e = 0; e < NW3; e++) {
        hb[e] = e % 3 == 0 ? 0x8000u : (uint16_t)(0x3F80u + (unsigned)e);
        gf[e] = e % 4 == 1 ? -0.0f : (float)e - 100.0f;
    }
    amp_tensor *gb = amp_tensor_from(lazy.ctx, AMP_BF16, 2, (const int64_t[]){OUT, OUT}, hb, AMP_BF16);
    amp_tensor *pw3 = amp_ctx_param(lazy.ctx, 3), *pu = amp_ctx_param(lazy.ctx, 5);
    if (CHECK(gb && amp_grad_accumulate_grad(lazy.ctx, pw3, gb) == AMP_OK &&
              amp_grad_accumulate(lazy.ctx, pu, gf) == AMP_OK)) {
        int bad = 0;
        const float *g3 = pw3->grad->data, *gu = pu->grad->data;
        for (int e = 0; e < NW3; e++) bad += f32_bits_of(g3[e]) != f32_bits_of(0.0f + amp_bf16_to_fp32(hb[e]));
        for (int e = 0; e < 7; e++) bad += f32_bits_of(gu[e]) != f32_bits_of(0.0f + gf[e]);
        CHECK_MSG(bad == 0, "%d gradient elements differ from 0 + g", bad);
    }
    amp_ctx_settle_grads(lazy.ctx);

    /* a backward that fails still leaves zeros */
    fill_grads(&lazy);
    amp_zero_grad(lazy.ctx);
    amp_ctx_reset(lazy.ctx);
    amp_tensor *c = amp_tensor_from(lazy.ctx, AMP_F32, 1, (const int64_t[]){1}, (const float[]){2.0f}, AMP_F32);
    CHECK(c && amp_backward(lazy.ctx, c, NULL) == AMP_ERR_INVALID_ARGUMENT);
    amp_ctx_clear_error(lazy.ctx);
    CHECK(grads_zero(&lazy));

    /* no backward at all: the flat buffer reads zeros */
    fill_grads(&lazy);
    amp_zero_grad(lazy.ctx);
    const unsigned char *flat = amp_ctx_grad_memory(lazy.ctx, &bytes);
    bool all_zero = true;
    for (size_t b = 0; b < bytes; b++) all_zero = all_zero && flat[b] == 0;
    CHECK(all_zero);

    /* ... and the optimizer steps with zero gradients (weight decay and momentum still move w) */
    fill_grads(&lazy), fill_grads(&eager);
    amp_zero_grad(lazy.ctx);
    eager_zero(&eager);
    amp_optim_config oc = amp_optim_default_config(AMP_OPTIM_SGD);
    oc.lr = 0.5f, oc.momentum = 0.9f, oc.weight_decay = 0.25f;
    amp_optimizer *ol = NULL, *oe = NULL;
    if (CHECK(amp_optimizer_create(lazy.ctx, &oc, &ol) == AMP_OK &&
              amp_optimizer_create(eager.ctx, &oc, &oe) == AMP_OK)) {
        fill_grads(&lazy);
        amp_zero_grad(lazy.ctx);
        CHECK(amp_optimizer_step(ol) == AMP_OK && amp_optimizer_step(oe) == AMP_OK);
        size_t pb = 0;
        const void *pl = amp_ctx_param_memory(lazy.ctx, &pb), *pe = amp_ctx_param_memory(eager.ctx, NULL);
        CHECK(memcmp(pl, pe, pb) == 0);
        CHECK(grads_zero(&lazy));
        /* the scaler's unscale: the unused parameter's NaN must not be seen as an overflow */
        amp_scaler *sc = NULL;
        fill_grads(&lazy);
        amp_zero_grad(lazy.ctx);
        if (CHECK(amp_scaler_create(NULL, &sc) == AMP_OK)) {
            amp_scaler_scale(sc);
            CHECK(amp_scaler_unscale(sc, ol) == AMP_OK && amp_scaler_found_inf(sc, ol) == 0.0f);
            CHECK(grads_zero(&lazy));
        }
        amp_scaler_free(sc);
    }
    amp_optimizer_free(ol), amp_optimizer_free(oe);
out:
    amp_ctx_free(lazy.ctx), amp_ctx_free(eager.ctx);
}
