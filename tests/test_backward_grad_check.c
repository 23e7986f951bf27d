/* The inf/NaN check made where backward writes the weight gradients (amp_ctx_set_backward_grad_check,
 * amp/tensor.h): the fused step with it on against the same model, inputs and step with it off (the
 * read pass over every gradient, the step the optimizer and scaler tests compare with PyTorch). A
 * two-layer model (relu between; over 2^20 parameters, so the step runs on the thread pool) plus a
 * parameter no op uses, SGD with momentum, two fused steps, in fp32 and under bf16 and fp16 autocast,
 * on every path, at 1-3 threads: found_inf, the norm's bits, every parameter and gradient bit for bit,
 * and the notes really used (the weights' elements counted as checked by them). Then the cases that
 * must be found with the notes on as with them off: an fp16 weight gradient overflowing under a large
 * scale, an fp32 one overflowing, a NaN input, an inv_scale that overflows finite gradients, a NaN written into a gradient
 * after backward and reported with amp_ctx_grads_changed (and, not reported, not seen: the contract),
 * a NaN added by a backward op after the GEMM noted the gradient, the scaler's explicit unscale
 * overflowing finite gradients before its fused step; and the step's arithmetic on a note (NaN, inf,
 * a finite maximum that inv_scale overflows or not); amp's writes to all gradients (clipping, the fused
 * step, the gradient buffer handed out) drop the notes;
 * and the cases that must not use the notes: clipping, a grad-ready hook (it may write the gradient),
 * the check switched off. */
#include <math.h>
#include <string.h>

#include "../src/optim/optim_internal.h"
#include "../src/tensor/ctx_internal.h"
#include "amp.h"
#include "harness.h"
#include "test_util.h"
#include "tests.h"

enum { ROWS = 8, IN = 1030, HID = 1024, OUT = 9, UNUSED = 35 };

typedef struct gc_rig {
    amp_ctx *ctx;
    amp_optimizer *opt;
    amp_tensor *w1, *b1, *w2, *b2, *unused;
    bool no_norm; /* step: the fused step told that nothing reads the norm (optim_fused_step) */
} gc_rig;

static bool rig_init(gc_rig *r, test_rng *rng, bool check) {
    memset(r, 0, sizeof *r);
    if (amp_ctx_create(NULL, &r->ctx) != AMP_OK) return false;
    amp_ctx_set_backward_grad_check(r->ctx, check);
    r->w1 = amp_param_new(r->ctx, "w1", AMP_F32, 2, (const int64_t[]){HID, IN});
    r->b1 = amp_param_new(r->ctx, "b1", AMP_F32, 1, (const int64_t[]){HID});
    r->w2 = amp_param_new(r->ctx, "w2", AMP_F32, 2, (const int64_t[]){OUT, HID});
    r->b2 = amp_param_new(r->ctx, "b2", AMP_F32, 1, (const int64_t[]){OUT});
    r->unused = amp_param_new(r->ctx, "unused", AMP_F32, 1, (const int64_t[]){UNUSED});
    if (!r->unused || amp_ctx_alloc_params(r->ctx) != AMP_OK) return false;
    test_fill_params_eighths(r->ctx, rng);
    amp_optim_config oc = amp_optim_default_config(AMP_OPTIM_SGD);
    oc.lr = 0.01f, oc.momentum = 0.9f;
    return amp_optimizer_create(r->ctx, &oc, &r->opt) == AMP_OK;
}

static void rig_free(gc_rig *r) {
    amp_optimizer_free(r->opt);
    amp_ctx_free(r->ctx);
}

static void ready_hook(amp_ctx *ctx, size_t index, void *user) {
    (void)ctx, (void)index;
    ++*(int *)user;
}

/* Forward and backward with seed `scale` (a scaled loss), then the fused step with 1 / inv_scale. */
/* With nan_term, the loss also has mean(w2 * z) and mean(reshape(w1) * z1), z and z1 zeros but one
 * NaN, recorded before the layers: their backwards run after the linears' and add a NaN into the
 * gradients the GEMMs noted as finite (w2's through a gradient sink, w1's through the reshape's
 * accumulation). */
static bool step(gc_rig *r, const float *xv, amp_dtype cast, float scale, float inv_scale, float max_norm, bool hook,
                 bool nan_term, amp_fused_result *res) {
    amp_ctx *c = r->ctx;
    amp_ctx_reset(c);
    amp_zero_grad(c);
    amp_tensor *term = NULL;
    if (nan_term) {
        static float zv[OUT * HID];
        memset(zv, 0, sizeof zv);
        zv[OUT * HID / 2] = NAN;
        static float z1v[HID * IN];
        memset(z1v, 0, sizeof z1v);
        z1v[IN + 7] = NAN;
        amp_tensor *z = amp_tensor_from(c, AMP_F32, 2, (const int64_t[]){OUT, HID}, zv, AMP_F32);
        amp_tensor *z1 = amp_tensor_from(c, AMP_F32, 1, (const int64_t[]){HID * IN}, z1v, AMP_F32);
        amp_tensor *w1_flat = amp_reshape(c, r->w1, 1, (const int64_t[]){HID * IN});
        term = z && z1 && w1_flat ? amp_add(c, amp_mean_all(c, amp_mul(c, r->w2, z)),
                                            amp_mean_all(c, amp_mul(c, w1_flat, z1)))
                                  : NULL;
        if (!CHECK_MSG(term, "%s", amp_ctx_error(c))) return false;
    }
    amp_tensor *x = amp_tensor_from(c, AMP_F32, 2, (const int64_t[]){ROWS, IN}, xv, AMP_F32);
    if (cast != AMP_F32) amp_autocast_enter(cast);
    amp_tensor *h = x ? amp_relu(c, amp_linear(c, x, r->w1, r->b1)) : NULL;
    amp_tensor *y = h ? amp_linear(c, h, r->w2, r->b2) : NULL;
    if (cast != AMP_F32) amp_autocast_exit();
    amp_tensor *loss = y ? amp_mean_all(c, amp_mul(c, y, y)) : NULL;
    if (loss && term) loss = amp_add(c, loss, term);
    if (!CHECK_MSG(loss, "%s", amp_ctx_error(c))) return false;
    int calls = 0;
    if (hook) amp_ctx_set_grad_ready_hook(c, ready_hook, &calls);
    const int st = amp_backward_scaled(c, loss, scale);
    amp_ctx_set_grad_ready_hook(c, NULL, NULL);
    if (!CHECK_MSG(st == AMP_OK, "%s", amp_ctx_error(c)) || !CHECK(!hook || calls > 0)) return false;
    if (r->no_norm) return CHECK(optim_fused_step(r->opt, inv_scale, max_norm, false, res) == AMP_OK);
    return CHECK(amp_optimizer_fused_step(r->opt, inv_scale, max_norm, res) == AMP_OK);
}

/* A forward and backward in fp32 with seed `scale`, nothing else: the gradients for the checks below. */
static bool fp32_backward(gc_rig *r, const float *xv, float scale) {
    amp_ctx *c = r->ctx;
    amp_ctx_reset(c);
    amp_zero_grad(c);
    amp_tensor *x = amp_tensor_from(c, AMP_F32, 2, (const int64_t[]){ROWS, IN}, xv, AMP_F32);
    amp_tensor *y = x ? amp_linear(c, amp_relu(c, amp_linear(c, x, r->w1, r->b1)), r->w2, r->b2) : NULL;
    amp_tensor *loss = y ? amp_mean_all(c, amp_mul(c, y, y)) : NULL;
    return CHECK_MSG(loss && amp_backward_scaled(c, loss, scale) == AMP_OK, "%s", amp_ctx_error(c));
}

static bool same_params(const gc_rig *a, const gc_rig *b) {
    for (size_t p = 0; p < amp_ctx_num_params(a->ctx); p++) {
        const amp_tensor *u = amp_ctx_param(a->ctx, p), *v = amp_ctx_param(b->ctx, p);
        const size_t bytes = (size_t)amp_tensor_numel(u) * sizeof(float);
        if (memcmp(u->data, v->data, bytes) != 0 || memcmp(u->grad->data, v->grad->data, bytes) != 0) return false;
    }
    return true;
}

static bool same_result(const amp_fused_result *a, const amp_fused_result *b) {
    return a->found_inf == b->found_inf && a->clip_coef == b->clip_coef &&
           (memcmp(&a->grad_norm, &b->grad_norm, sizeof a->grad_norm) == 0 ||
            (isnan(a->grad_norm) && isnan(b->grad_norm)));
}

static void fill_x(float *xv, test_rng *rng) {
    for (int i = 0; i < ROWS * IN; i++) xv[i] = (float)((int)test_rng_below(rng, 9) - 4) / 64.0f;
}

static const int64_t weights_numel = (int64_t)HID * IN + (int64_t)OUT * HID;

static void check_same_as_read_pass(void) {
    const amp_dtype casts[] = {AMP_F32, AMP_BF16, AMP_F16};
    test_rng rng = {harness_seed() ^ 0xB6C1u};
    static float xv[ROWS * IN];
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!test_isa_begin(isa)) continue;
        for (size_t ci = 0; ci < sizeof casts / sizeof casts[0]; ci++)
            for (int threads = 1; threads <= 3; threads++) {
                amp_set_num_threads(threads);
                gc_rig on, off;
                test_rng r1 = rng, r2 = rng;
                if (CHECK(rig_init(&on, &r1, true) && rig_init(&off, &r2, false))) {
                    bool same = true, used = true;
                    for (int s = 0; s < 2 && same; s++) {
                        fill_x(xv, &rng);
                        amp_fused_result ra, rb;
                        if (!step(&on, xv, casts[ci], 16.0f, 1.0f / 16.0f, 0.0f, false, false, &ra) ||
                            !step(&off, xv, casts[ci], 16.0f, 1.0f / 16.0f, 0.0f, false, false, &rb))
                            break;
                        same = !ra.found_inf && same_result(&ra, &rb) && same_params(&on, &off);
                        used = used && on.opt->noted_numel >= weights_numel && off.opt->noted_numel == 0;
                    }
                    CHECK_MSG(same && used, "%s, %s, %d threads: the fused step with backward's notes %s",
                              amp_isa_name(isa), amp_dtype_name(casts[ci]), threads,
                              same ? "did not use them" : "differs from the read pass");
                }
                rig_free(&on);
                rig_free(&off);
            }
        amp_set_num_threads(0);
    }
    test_isa_end();
}

/* One step of a rig with the notes on and one with them off, the same parameters, inputs and
 * arguments: the same result, parameters and gradients, found_inf as expected, the notes used or not. */
static bool compare(const char *what, const float *xv, amp_dtype cast, float scale, float inv_scale, float max_norm,
                    bool hook, bool nan_term, bool expect_found, bool expect_notes) {
    test_rng r1 = {harness_seed() ^ 0x51Du}, r2 = r1;
    gc_rig on, off;
    bool ok = false;
    if (CHECK(rig_init(&on, &r1, true) && rig_init(&off, &r2, false))) {
        amp_fused_result ra, rb;
        if (step(&on, xv, cast, scale, inv_scale, max_norm, hook, nan_term, &ra) &&
            step(&off, xv, cast, scale, inv_scale, max_norm, hook, nan_term, &rb)) {
            ok = CHECK_MSG(same_result(&ra, &rb) && same_params(&on, &off) && ra.found_inf == expect_found &&
                               (on.opt->noted_numel >= weights_numel) == expect_notes,
                           "%s: notes on: found %d, norm %g, %lld noted; off: found %d, norm %g (want found %d, notes %s)",
                           what, ra.found_inf, ra.grad_norm, (long long)on.opt->noted_numel, rb.found_inf, rb.grad_norm,
                           expect_found, expect_notes ? "used" : "unused");
        }
    }
    rig_free(&on);
    rig_free(&off);
    return ok;
}

/* A NaN written into w2's gradient between backward and the step, reported or not. */
static void check_written_after_backward(const float *xv) {
    for (int report = 0; report < 2; report++) {
        test_rng r1 = {harness_seed() ^ 0x77u};
        gc_rig on;
        if (CHECK(rig_init(&on, &r1, true))) {
            if (fp32_backward(&on, xv, 1.0f)) {
                ((float *)on.w2->grad->data)[17] = NAN;
                if (report) amp_ctx_grads_changed(on.ctx);
                amp_fused_result r;
                CHECK(amp_optimizer_fused_step(on.opt, 1.0f, 0.0f, &r) == AMP_OK);
                if (report)
                    CHECK_MSG(r.found_inf && on.opt->noted_numel == 0,
                              "a NaN written and reported after backward: found %d, %lld noted", r.found_inf,
                              (long long)on.opt->noted_numel);
                else /* the contract: the notes are trusted (this is what makes the step cheaper) */
                    CHECK_MSG(!r.found_inf && on.opt->noted_numel >= weights_numel,
                              "a NaN written after backward, not reported: found %d, %lld noted", r.found_inf,
                              (long long)on.opt->noted_numel);
            }
        }
        rig_free(&on);
    }
}

/* The scaler's explicit unscale, then its fused step (as data-parallel training does): the unscale
 * rewrites every gradient, so the notes of the scaled values must not stand for the unscaled ones.
 * Here the unscale overflows finite gradients (a scale of 2^-120 against a seed of 2^20: the
 * gradients times 2^120), which only the fused step's own check can find. */
static void check_unscale_then_fused(const float *xv) {
    test_rng r1 = {harness_seed() ^ 0x99u};
    gc_rig on;
    amp_scaler *sc = NULL;
    amp_scaler_config cfg = amp_scaler_default_config();
    cfg.init_scale = 0x1p-120f;
    if (CHECK(rig_init(&on, &r1, true) && amp_scaler_create(&cfg, &sc) == AMP_OK)) {
        (void)amp_scaler_scale(sc);
        amp_step_report rep;
        if (fp32_backward(&on, xv, 0x1p20f) &&
            CHECK(amp_scaler_unscale(sc, on.opt) == AMP_OK) &&
            CHECK(amp_scaler_step_fused(sc, on.opt, 0.0f, &rep) == AMP_OK))
            CHECK_MSG(rep.skipped && on.opt->noted_numel == 0,
                      "unscale overflowing finite gradients, then the fused step: skipped %d, %lld noted", rep.skipped,
                      (long long)on.opt->noted_numel);
    }
    amp_scaler_free(sc);
    rig_free(&on);
}

/* The fused step's arithmetic on the notes alone: after a clean backward, w2's note replaced by a NaN,
 * an infinity, and a finite 2^100 that an inv_scale of 2^30 overflows and one of 2^20 does not (the
 * gradient's data untouched: the note is what is checked). */
static void check_note_arithmetic(const float *xv) {
    const struct {
        uint32_t bits;
        float inv_scale;
        bool found, nan;
    } cases[] = {{0x7fc00000u, 1.0f, true, true},
                 {0x7f800000u, 1.0f, true, false},
                 {0x71800000u /* 2^100 */, 0x1p30f, true, false},
                 {0x71800000u, 0x1p20f, false, false}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        test_rng r1 = {harness_seed() ^ 0x5Au};
        gc_rig on;
        if (CHECK(rig_init(&on, &r1, true))) {
            amp_fused_result r;
            if (fp32_backward(&on, xv, 1.0f)) {
                amp_ctx_grad_note(on.ctx, amp_ctx_param_index(on.ctx, on.w2), cases[i].bits);
                CHECK(amp_optimizer_fused_step(on.opt, cases[i].inv_scale, 0.0f, &r) == AMP_OK);
                CHECK_MSG(r.found_inf == cases[i].found && on.opt->noted_numel >= weights_numel &&
                              (!cases[i].found || (cases[i].nan ? isnan(r.grad_norm) : isinf(r.grad_norm))),
                          "note %08x, inv_scale %g: found %d, norm %g, %lld noted", (unsigned)cases[i].bits,
                          cases[i].inv_scale, r.found_inf, r.grad_norm, (long long)on.opt->noted_numel);
            }
        }
        rig_free(&on);
    }
}

/* amp's own writes to every gradient after backward drop the notes: clipping, a fused step (it stores
 * the unscaled gradients), amp_ctx_grad_memory (the buffer handed out writable). The step after
 * each must read the gradients (no elements noted). */
static void check_dropped_by_writers(const float *xv) {
    static const char *const names[] = {"amp_optimizer_clip_grad_norm", "amp_optimizer_fused_step",
                                        "amp_ctx_grad_memory"};
    for (int w = 0; w < 3; w++) {
        test_rng r1 = {harness_seed() ^ 0x3Cu};
        gc_rig on;
        if (CHECK(rig_init(&on, &r1, true))) {
            amp_fused_result r;
            if (fp32_backward(&on, xv, 16.0f)) {
                if (w == 0) (void)amp_optimizer_clip_grad_norm(on.opt, 1e-3f);
                if (w == 1) CHECK(amp_optimizer_fused_step(on.opt, 1.0f / 16.0f, 0.0f, &r) == AMP_OK);
                if (w == 2) (void)amp_ctx_grad_memory(on.ctx, NULL);
                CHECK(amp_optimizer_fused_step(on.opt, 1.0f, 0.0f, &r) == AMP_OK);
                CHECK_MSG(on.opt->noted_numel == 0, "after %s: %lld elements still noted", names[w],
                          (long long)on.opt->noted_numel);
            }
        }
        rig_free(&on);
    }
}

/* Told that nothing reads the norm (the training loop's amp_scaler_step_fused with no report), the
 * fused step updates the same bits and leaves the norm out (NaN) where the notes replaced the first pass;
 * with clipping it needs the norm and reports it. */
static void check_no_norm(const float *xv) {
    for (int clip = 0; clip < 2; clip++) {
        gc_rig a, b;
        test_rng ra_rng = {harness_seed() ^ 0x5Eu}, rb_rng = ra_rng;
        const bool ok = rig_init(&a, &ra_rng, true) && rig_init(&b, &rb_rng, true);
        b.no_norm = true;
        amp_fused_result ra, rb;
        const float max_norm = clip ? 0.5f : 0.0f;
        if (CHECK(ok) && step(&a, xv, AMP_F16, 16.0f, 1.0f / 16.0f, max_norm, false, false, &ra) &&
            step(&b, xv, AMP_F16, 16.0f, 1.0f / 16.0f, max_norm, false, false, &rb)) {
            CHECK_MSG(same_params(&a, &b), "clip %d: parameters or gradients differ without the norm", clip);
            CHECK(!ra.found_inf && !rb.found_inf && ra.clip_coef == rb.clip_coef && !isnan(ra.grad_norm));
            if (clip) CHECK_MSG(same_result(&ra, &rb), "with clipping: norm %g and %g", ra.grad_norm, rb.grad_norm);
            else
                CHECK_MSG(isnan(rb.grad_norm) && b.opt->noted_numel >= weights_numel, "norm %g, %lld noted",
                          rb.grad_norm, (long long)b.opt->noted_numel);
        }
        rig_free(&a);
        rig_free(&b);
    }
}

static void check_cases(void) {
    test_rng rng = {harness_seed() ^ 0xC4u};
    static float xv[ROWS * IN];
    fill_x(xv, &rng);
    compare("finite", xv, AMP_F16, 16.0f, 1.0f / 16.0f, 0.0f, false, false, false, true);
    compare("fp16 weight gradients overflowing at scale 2^40", xv, AMP_F16, 0x1p40f, 0x1p-40f, 0.0f, false, false, true, true);
    static float xbig[ROWS * IN];
    memcpy(xbig, xv, sizeof xbig);
    xbig[2 * IN + 5] = 3e38f;
    compare("fp32 gradients overflowing (an input of 3e38)", xbig, AMP_F32, 0x1p10f, 0x1p-10f, 0.0f, false, false, true, true);
    compare("finite gradients times an inv_scale of 2^127", xv, AMP_F32, 0x1p20f, 0x1p127f, 0.0f, false, false, true, true);
    compare("clipping (no notes)", xv, AMP_F16, 16.0f, 1.0f / 16.0f, 0.5f, false, false, false, false);
    compare("a grad-ready hook (no notes)", xv, AMP_BF16, 16.0f, 1.0f / 16.0f, 0.0f, true, false, false, false);
    compare("a NaN added into a noted gradient by a later backward op", xv, AMP_F16, 16.0f, 1.0f / 16.0f, 0.0f, false,
            true, true, false);
    check_written_after_backward(xv);
    check_unscale_then_fused(xv);
    check_note_arithmetic(xv);
    check_dropped_by_writers(xv);
    check_no_norm(xv);
    xv[3 * IN + 11] = NAN;
    compare("a NaN input", xv, AMP_F32, 1.0f, 1.0f, 0.0f, false, false, true, true);
}

void test_backward_grad_check(void) {
    check_same_as_read_pass();
    check_cases();
}
