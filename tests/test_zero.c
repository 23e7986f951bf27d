/* ZeRO stage 1 (amp_train_config.zero_stage) in one process: the sharded optimizer of one rank must
 * be the unsharded run, bit for bit (losses, and the checkpoint file byte for byte), in every kind of
 * step (scaler with and without clipping, fp16 gradients with clipping, the scaler off with clipping,
 * stochastic rounding); through a recording communicator of one rank with reduce_scatter and
 * allgather (called once per step over the whole gradient buffer; a second gather on the steps the
 * gradient statistics sample) and through one without them (the emulation: the whole buffer summed
 * by start_grads); a --zero 1 checkpoint resumes without zero and the other way round along the
 * uninterrupted run; bad stages are refused. And the optimizer's side of the slices, two ranks
 * simulated in one process: slice optimizers (numbered from their global first element, clipping with
 * the summed squares) update a model exactly as one optimizer over all of it. Several ranks of
 * amp_train_run: tests/cli/zero.sh, under mpirun. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/optim/optim_shard.h"
#include "amp.h"
#include "harness.h"
#include "test_util.h"
#include "tests.h"

enum { ERR_SIZE = 512, MAX_CALLS = 256 };

/* A one-rank communicator that records its calls. */
typedef struct rec_comm {
    amp_comm base;
    int starts, waits, scatters, gathers;
    size_t start_values, scatter_values, gather_bytes[MAX_CALLS];
    size_t scatter_counts_bad;
} rec_comm;

static int rec_f64(amp_comm *c, double *buf, size_t n, amp_comm_reduce op) {
    (void)c, (void)buf, (void)n, (void)op;
    return AMP_OK; /* one rank: the reduction of one value is the value */
}
static int rec_u64(amp_comm *c, uint64_t *buf, size_t n, amp_comm_reduce op) {
    (void)c, (void)buf, (void)n, (void)op;
    return AMP_OK;
}
static int rec_start(amp_comm *c, void *buf, size_t n, amp_dtype dtype, amp_dtype wire) {
    (void)buf, (void)dtype, (void)wire;
    rec_comm *r = (rec_comm *)c;
    r->starts++;
    r->start_values = n;
    return AMP_OK;
}
static int rec_wait(amp_comm *c) {
    ((rec_comm *)c)->waits++;
    return AMP_OK;
}
static int rec_scatter(amp_comm *c, void *buf, const size_t *counts, amp_dtype dtype, amp_dtype wire) {
    (void)buf;
    rec_comm *r = (rec_comm *)c;
    r->scatters++;
    r->scatter_values = counts[0];
    if (dtype != wire) r->scatter_counts_bad++;
    return AMP_OK;
}
static int rec_gather(amp_comm *c, void *buf, const size_t *counts) {
    (void)buf;
    rec_comm *r = (rec_comm *)c;
    if (r->gathers < MAX_CALLS) r->gather_bytes[r->gathers] = counts[0];
    r->gathers++;
    return AMP_OK;
}
static const char *rec_error(const amp_comm *c) {
    (void)c;
    return "";
}

static rec_comm rec_make(bool native) {
    rec_comm r;
    memset(&r, 0, sizeof r);
    r.base = (amp_comm){.rank = 0, .size = 1, .allreduce_f64 = rec_f64, .allreduce_u64 = rec_u64,
                        .start_grads = rec_start, .wait_grads = rec_wait, .error = rec_error};
    if (native) r.base.reduce_scatter = rec_scatter, r.base.allgather = rec_gather;
    return r;
}

static amp_train_config small_gpt(const char *text, amp_precision precision) {
    amp_train_config c = amp_train_default_config(AMP_MODEL_GPT);
    c.data = text;
    c.precision = precision;
    c.model.hidden = 16, c.model.embed = 8, c.model.layers = 1, c.model.heads = 2, c.model.context = 16;
    c.batch = 4, c.steps = 8, c.eval_batches = 2, c.threads = 1;
    return c;
}

static int run(const amp_train_config *c, amp_train_result *r, char *err) {
    return amp_train_run(c, NULL, r, err, ERR_SIZE);
}

/* Runs c unsharded (checkpoint A) and sharded (checkpoint B), both with comm (a rec_comm or NULL,
 * whose counts then are the sharded run's); both must agree bit for bit. */
static void check_same(const char *what, amp_train_config c, rec_comm *comm, const char *dir) {
    char a_path[1024], b_path[1024], err[ERR_SIZE];
    snprintf(a_path, sizeof a_path, "%s/a.safetensors", dir);
    snprintf(b_path, sizeof b_path, "%s/b.safetensors", dir);
    amp_train_result a, b;
    c.checkpoint = a_path;
    c.zero_stage = 0;
    c.comm = comm ? &comm->base : NULL;
    if (!CHECK_MSG(run(&c, &a, err) == AMP_OK, "%s, unsharded: %s", what, err)) return;
    if (comm) *comm = rec_make(comm->base.reduce_scatter != NULL);
    c.checkpoint = b_path;
    c.zero_stage = 1;
    c.comm = comm ? &comm->base : NULL;
    if (!CHECK_MSG(run(&c, &b, err) == AMP_OK, "%s, --zero 1: %s", what, err)) return;
    CHECK_MSG(!memcmp(&a.train_loss, &b.train_loss, sizeof(double)) && !memcmp(&a.test_loss, &b.test_loss, sizeof(double)),
              "%s: train loss %.17g vs %.17g, test loss %.17g vs %.17g", what, a.train_loss, b.train_loss, a.test_loss,
              b.test_loss);
    CHECK_MSG(a.skipped_steps == b.skipped_steps && a.final_scale == b.final_scale, "%s: skipped %lld vs %lld", what,
              (long long)a.skipped_steps, (long long)b.skipped_steps);
    CHECK_MSG(test_same_file(a_path, b_path), "%s: the --zero 1 checkpoint differs from the unsharded one", what);
    /* One rank owns everything: the same state bytes. */
    CHECK_MSG(a.optimizer_state_bytes == b.optimizer_state_bytes && a.optimizer_state_bytes > 0,
              "%s: optimizer state %lld vs %lld bytes", what, (long long)a.optimizer_state_bytes,
              (long long)b.optimizer_state_bytes);
}

void test_zero_one_rank(void) {
    char dir[64], text[1024];
    snprintf(dir, sizeof dir, "/tmp/amp_test_zero_XXXXXX");
    if (!CHECK_MSG(mkdtemp(dir) != NULL, "mkdtemp failed")) return;
    snprintf(text, sizeof text, "%s/text.txt", dir);
    FILE *f = fopen(text, "wb");
    if (!CHECK(f != NULL)) return;
    for (int i = 0; i < 60; i++) fprintf(f, "the quick brown fox jumps over the lazy dog %d times. ", i * 7 % 13);
    fclose(f);

    /* Every kind of step, without a communicator. */
    amp_train_config c = small_gpt(text, AMP_PRECISION_AMP_FP16);
    check_same("amp-fp16", c, NULL, dir);
    c.clip = 0.05f; /* small enough to clip every step */
    check_same("amp-fp16 clipped", c, NULL, dir);
    c = small_gpt(text, AMP_PRECISION_FP16_MASTER);
    c.clip = 0.05f;
    check_same("fp16-master clipped", c, NULL, dir);
    c = small_gpt(text, AMP_PRECISION_BF16_PURE);
    c.clip = 0.05f;
    c.optim.stochastic_rounding = true;
    c.optim.seed = 5;
    c.grad_stats_every = -1; /* the stalled-update statistic is not measured under zero (NaN) */
    check_same("bf16-pure clipped, stochastic rounding, scaler off", c, NULL, dir);
    c = small_gpt(text, AMP_PRECISION_FP32);
    c.optim = amp_optim_default_config(AMP_OPTIM_SGD);
    c.optim.lr = 0.05f, c.optim.momentum = 0.9f;
    c.clip = 0.05f;
    check_same("fp32 SGD with momentum, clipped", c, NULL, dir);

    /* Through a communicator with the two collectives: one reduce-scatter and one allgather of the
     * parameters per step (plus the gradients' on sampled steps), each over the whole buffer. */
    static rec_comm rc;
    rc = rec_make(true);
    c = small_gpt(text, AMP_PRECISION_AMP_FP16);
    c.clip = 0.05f;
    c.grad_stats_every = -1; /* no sampled steps: exactly one allgather per step */
    check_same("amp-fp16 clipped, recording communicator", c, &rc, dir);
    CHECK_MSG(rc.scatters == 8 && rc.starts == 0 && rc.scatter_counts_bad == 0, "%d reduce-scatters, %d bucket sums",
              rc.scatters, rc.starts);
    CHECK_MSG(rc.gathers >= 8, "%d allgathers in 8 steps", rc.gathers);
    amp_train_result r;
    char err[ERR_SIZE];
    c.checkpoint = NULL;
    c.zero_stage = 1, c.comm = &rc.base;
    rc = rec_make(true);
    if (CHECK(run(&c, &r, err) == AMP_OK)) {
        /* the buffer: every parameter, plus under 64 bytes of padding per parameter tensor */
        const size_t want = (size_t)r.num_params;
        CHECK_MSG(rc.scatter_values >= want && rc.scatter_values <= want + 64, "reduce-scatter of %zu values for %zu",
                  rc.scatter_values, want);
        CHECK_MSG(rc.gather_bytes[0] == rc.scatter_values * sizeof(float), "allgather of %zu bytes",
                  rc.gather_bytes[0]);
    }
    /* Sampled steps gather the summed gradients too (the statistics read all of them). */
    rc = rec_make(true);
    c.grad_stats_every = 2;
    if (CHECK(run(&c, &r, err) == AMP_OK))
        CHECK_MSG(rc.gathers == 8 + 5, "%d allgathers in 8 steps with 5 sampled (1, 2, 4, 6, 8)", rc.gathers);

    /* Without them: the whole gradient buffer summed by start_grads once per step. */
    rc = rec_make(false);
    c = small_gpt(text, AMP_PRECISION_FP16_MASTER);
    c.clip = 0.05f;
    check_same("fp16-master clipped, communicator without reduce_scatter", c, &rc, dir);
    CHECK_MSG(rc.starts == 8 && rc.waits == 8, "%d sums, %d waits in 8 steps", rc.starts, rc.waits);

    /* Resume: 4 steps with --zero 1 resumed without it for 8, and the other way round, equal the
     * uninterrupted 8-step run. */
    char half[1024], whole[1024], resumed[1024];
    snprintf(half, sizeof half, "%s/half.safetensors", dir);
    snprintf(whole, sizeof whole, "%s/whole.safetensors", dir);
    snprintf(resumed, sizeof resumed, "%s/resumed.safetensors", dir);
    c = small_gpt(text, AMP_PRECISION_AMP_BF16);
    c.clip = 0.05f;
    c.warmup_steps = 6; /* the learning rate changes at every step, across the resume too */
    c.checkpoint = whole;
    CHECK(run(&c, &r, err) == AMP_OK);
    for (int z = 0; z < 2; z++) {
        c.steps = 4, c.checkpoint = half, c.zero_stage = z, c.resume = NULL;
        if (!CHECK_MSG(run(&c, &r, err) == AMP_OK, "%s", err)) continue;
        c.steps = 8, c.checkpoint = resumed, c.zero_stage = 1 - z, c.resume = half;
        if (CHECK_MSG(run(&c, &r, err) == AMP_OK, "resume: %s", err))
            CHECK_MSG(test_same_file(whole, resumed), "4 steps with --zero %d resumed with --zero %d: not the 8-step run", z,
                      1 - z);
    }

    /* Only stages 0 and 1 exist. */
    c = small_gpt(text, AMP_PRECISION_AMP_BF16);
    c.zero_stage = 2;
    CHECK_EQ_INT(run(&c, &r, err), AMP_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "ZeRO stage 2 is not supported") != NULL, "message: %s", err);
    c.zero_stage = -1;
    CHECK_EQ_INT(run(&c, &r, err), AMP_ERR_INVALID_ARGUMENT);
    test_remove_tree(dir);
}

/* ---- two slice optimizers against one whole one ---- */

enum { SL_A = 96, SL_B = 60, SL_STEPS = 4 };

/* Parameters of numel sizes[0..n) in bf16 (values from rng), in a new context. */
static amp_ctx *sl_ctx(const int64_t *sizes, int n, amp_tensor **out) {
    amp_ctx *ctx = NULL;
    if (amp_ctx_create(NULL, &ctx) != AMP_OK) return NULL;
    for (int i = 0; i < n; i++) out[i] = amp_param_new(ctx, NULL, AMP_BF16, 1, &sizes[i]);
    if (amp_ctx_alloc_params(ctx) != AMP_OK) {
        amp_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

/* Element e of the whole model (A then B) as a pointer into t's data or grad (bf16 bits). */
static uint16_t *sl_at(amp_tensor *const *whole, size_t e, bool grad) {
    amp_tensor *t = e < SL_A ? whole[0] : whole[1];
    const size_t i = e < SL_A ? e : e - SL_A;
    return (uint16_t *)(grad ? t->grad->data : t->data) + i;
}

/* Slices [0, cut) and [cut, A + B) of the whole model A (96) and B (60), each in its own context
 * with its own optimizer, against one optimizer over A and B: AdamW with stochastic rounding, the
 * fused step (clipped when clip > 0, the slices then from the summed squares), SL_STEPS steps of
 * random gradients; the bf16 parameters, masters and moments must be the same bits. */
static void slices_vs_whole(size_t cut, float clip) {
    test_rng rng = {.state = 7 + cut};
    amp_tensor *whole[2] = {NULL, NULL}, *sl[2][2] = {{NULL, NULL}, {NULL, NULL}};
    const int64_t wsz[2] = {SL_A, SL_B};
    amp_ctx *w = sl_ctx(wsz, 2, whole);
    /* slice 0: A[0, cut) (cut <= A here); slice 1: A[cut, A) (when not empty) and B */
    const int64_t s0[1] = {(int64_t)cut}, s1[2] = {SL_A - (int64_t)cut, SL_B};
    const int n1 = cut < SL_A ? 2 : 1;
    amp_ctx *c0 = sl_ctx(s0, 1, sl[0]), *c1 = sl_ctx(n1 == 2 ? s1 : s1 + 1, n1, sl[1]);
    amp_optim_config oc = amp_optim_default_config(AMP_OPTIM_ADAMW);
    oc.lr = 0.01f, oc.stochastic_rounding = true, oc.seed = 11;
    amp_optimizer *ow = NULL, *o0 = NULL, *o1 = NULL;
    if (!CHECK(w && c0 && c1)) goto done;
    for (size_t e = 0; e < SL_A + SL_B; e++) *sl_at(whole, e, false) = (uint16_t)(0x3c00 + test_rng_below(&rng, 0x400));
    if (!CHECK(amp_optimizer_create(w, &oc, &ow) == AMP_OK)) goto done;
    /* the slices' parameters: copies of the whole's, before their optimizers copy them to masters */
    for (size_t e = 0; e < SL_A + SL_B; e++) {
        amp_tensor *t = e < cut ? sl[0][0] : (n1 == 2 && e < SL_A) ? sl[1][0] : sl[1][n1 - 1];
        const size_t i = e < cut ? e : (n1 == 2 && e < SL_A) ? e - cut : e - SL_A;
        ((uint16_t *)t->data)[i] = *sl_at(whole, e, false);
    }
    if (!CHECK(amp_optimizer_create(c0, &oc, &o0) == AMP_OK && amp_optimizer_create(c1, &oc, &o1) == AMP_OK)) goto done;
    optim_shard_set_base_index(o1, cut);
    for (int step = 0; step < SL_STEPS; step++) {
        for (size_t e = 0; e < SL_A + SL_B; e++) {
            const uint16_t g = (uint16_t)((test_rng_below(&rng, 2) << 15) | (0x3800 + test_rng_below(&rng, 0x600)));
            *sl_at(whole, e, true) = g;
            amp_tensor *t = e < cut ? sl[0][0] : (n1 == 2 && e < SL_A) ? sl[1][0] : sl[1][n1 - 1];
            const size_t i = e < cut ? e : (n1 == 2 && e < SL_A) ? e - cut : e - SL_A;
            ((uint16_t *)t->grad->data)[i] = g;
        }
        amp_ctx_grads_changed(w), amp_ctx_grads_changed(c0), amp_ctx_grads_changed(c1);
        if (clip > 0) {
            const double sum = optim_grad_sum_of_squares(o0) + optim_grad_sum_of_squares(o1);
            optim_shard_set_norm_sum(o0, sum), optim_shard_set_norm_sum(o1, sum);
        }
        amp_fused_result rw, r0, r1;
        CHECK(amp_optimizer_fused_step(ow, 1.0f, clip, &rw) == AMP_OK);
        CHECK(amp_optimizer_fused_step(o0, 1.0f, clip, &r0) == AMP_OK);
        CHECK(amp_optimizer_fused_step(o1, 1.0f, clip, &r1) == AMP_OK);
        if (clip > 0)
            CHECK_MSG(rw.clip_coef < 1.0f && rw.clip_coef == r0.clip_coef && rw.clip_coef == r1.clip_coef,
                      "clip factors %.9g (whole) %.9g %.9g (slices)", (double)rw.clip_coef, (double)r0.clip_coef,
                      (double)r1.clip_coef);
    }
    int bad = 0;
    for (size_t e = 0; e < SL_A + SL_B; e++) {
        const int q = e < cut ? 0 : 1;
        const size_t k = e < cut ? 0 : (n1 == 2 && e < SL_A) ? 0 : (size_t)n1 - 1;
        const size_t i = e < cut ? e : (n1 == 2 && e < SL_A) ? e - cut : e - SL_A;
        amp_optimizer *o = q ? o1 : o0;
        const size_t wi = e < SL_A ? 0 : 1, we = e < SL_A ? e : e - SL_A;
        bad += ((uint16_t *)sl[q][k]->data)[i] != *sl_at(whole, e, false);
        for (int role = AMP_OPTIM_STATE_MASTER; role <= AMP_OPTIM_STATE_EXP_AVG_SQ; role++) {
            const float *a = amp_optimizer_state(ow, (amp_optim_state)role, wi), *b = amp_optimizer_state(o, (amp_optim_state)role, k);
            if (a && b) bad += memcmp(&a[we], &b[i], sizeof(float)) != 0;
        }
    }
    CHECK_MSG(bad == 0, "cut at %zu, clip %g: %d values differ from the whole optimizer's", cut, (double)clip, bad);
done:
    amp_optimizer_free(ow), amp_optimizer_free(o0), amp_optimizer_free(o1);
    amp_ctx_free(w), amp_ctx_free(c0), amp_ctx_free(c1);
}

void test_zero_slice_optimizers(void) {
    slices_vs_whole(SL_A, 0.05f); /* at the parameters' boundary: the summed squares are the whole's sum */
    slices_vs_whole(48, 0.0f);    /* inside A: stochastic rounding numbered from the slice's first element */
    slices_vs_whole(48, 0.05f);   /* and clipped: the squares added in another order, the same factor here */
}
