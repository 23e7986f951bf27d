/* amp_train_run on data generated here (a 4x4 IDX image set whose label is the bright quadrant, a
 * small text file): it learns, it is deterministic, the presets and scaler modes resolve as
 * documented, fp16-pure's tiny updates vanish, accumulation matches a larger batch, anomalies and
 * data errors are reported, checkpoints resume bit-exactly (and refuse another model), and the
 * gradient statistics are consistent. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp.h"
#include "harness.h"
#include "test_util.h"
#include "tests.h"

enum { N_TRAIN = 64, N_TEST = 32, SIDE = 4, ERR_SIZE = 512, MAX_EVALS = 64 };

/* PREFIX-images-idx3-ubyte and PREFIX-labels-idx1-ubyte: image i has label (i + offset) % 4 and that
 * quadrant bright, the rest low noise (the same rule as tests/cli/train.sh). */
static int quadrant_label(int i, void *user) { return (i + *(const int *)user) % 4; }

static int quadrant_pixel(int i, int p, void *user) {
    const int offset = *(const int *)user, k = (i + offset) % 4, q = (p / 8) * 2 + (p % 4) / 2;
    return q == k ? 150 + (i * 37 + p * 11) % 100 : (i * 7 + p * 13 + offset) % 80;
}

static void write_pair(const char *dir, const char *prefix, int count, int offset) {
    CHECK_MSG(test_write_idx_images(dir, prefix, count, SIDE, quadrant_label, quadrant_pixel, &offset),
              "cannot write %s/%s-*-ubyte", dir, prefix);
}

/* A directory with the image set and text.txt; false on failure. */
static bool make_data(char *dir, size_t size) {
    snprintf(dir, size, "/tmp/amp_test_train_XXXXXX");
    if (!CHECK_MSG(mkdtemp(dir) != NULL, "mkdtemp failed")) return false;
    write_pair(dir, "train", N_TRAIN, 0);
    write_pair(dir, "t10k", N_TEST, 1);
    char path[1024];
    snprintf(path, sizeof path, "%s/text.txt", dir);
    return CHECK_MSG(test_write_fox_text(path, 40), "cannot write %s", path);
}

static amp_train_config small_mlp(const char *dir, amp_precision precision) {
    amp_train_config c = amp_train_default_config(AMP_MODEL_MLP);
    c.data = dir;
    c.precision = precision;
    c.model.hidden = 32;
    c.batch = 16;
    c.steps = 30;
    c.threads = 2;
    return c;
}

/* Collects the step losses and evaluation losses of a run. */
typedef struct trace {
    double first_loss;
    double eval_loss[MAX_EVALS];
    int n_eval;
} trace;

static void record(const amp_train_progress *p, void *user) {
    trace *t = user;
    if (!p->is_eval && p->step == 1) t->first_loss = p->last_loss;
    if (p->is_eval && t->n_eval < MAX_EVALS) t->eval_loss[t->n_eval++] = p->test_loss;
}

static int run(const amp_train_config *c, trace *t, amp_train_result *r, char *err) {
    memset(t, 0, sizeof *t);
    const amp_train_callbacks cb = {.progress = record, .user = t};
    return amp_train_run(c, &cb, r, err, ERR_SIZE);
}

/* Progress of a checkpointing run: at step `copy_at` + 1 the periodic checkpoint (written after step
 * copy_at) is copied to `copy_to`; the gradient-statistics samples are checked and counted. */
typedef struct ck_trace {
    const char *ck, *copy_to;
    int64_t copy_at;
    bool copied;
    int64_t samples, steps[64], bad;
    double sum[3];
} ck_trace;

static void ck_record(const amp_train_progress *p, void *user) {
    ck_trace *t = user;
    if (p->is_eval) return;
    if (t->copy_to && p->step == t->copy_at + 1) {
        long n = 0;
        unsigned char *buf = test_read_file(t->ck, &n);
        FILE *f = buf ? fopen(t->copy_to, "wb") : NULL;
        t->copied = f && fwrite(buf, 1, (size_t)n, f) == (size_t)n;
        if (f) t->copied &= fclose(f) == 0;
        free(buf);
    }
    const amp_grad_stats *g = p->grad_stats;
    if (!g) return;
    if (t->samples < 64) t->steps[t->samples] = g->step;
    t->samples++;
    int64_t binned = 0;
    for (int k = 0; k < AMP_GRAD_HIST_BINS; k++) binned += g->bins[k];
    const double f[3] = {g->underflow_fp16_unscaled, g->underflow_fp16_scaled, g->overflow_fp16_scaled};
    for (int k = 0; k < 3; k++) {
        t->bad += !(f[k] >= 0 && f[k] <= 1);
        t->sum[k] += f[k];
    }
    t->bad += g->step != p->step || binned + g->zeros + g->nonfinite != g->count || g->count <= 0 || g->scale != p->scale;
    t->bad += g->scale >= 1 && g->nonfinite == 0 && f[0] < f[1]; /* a scale >= 1 only lifts values */
}

static int ck_run(const amp_train_config *c, ck_trace *t, amp_train_result *r, char *err) {
    const amp_train_callbacks cb = {.progress = ck_record, .user = t};
    return amp_train_run(c, &cb, r, err, ERR_SIZE);
}

/* Resume: 10 steps in one run, and 3 steps (from a periodic checkpoint) + a resumed run to 10 on
 * another thread count, end with the same checkpoint bytes and the same results; a checkpoint of
 * another shape or model is refused in one line. fp16-master: fp16 parameters, fp32 masters, SGD
 * momentum, the dynamic scaler. */
static void check_resume(const char *dir) {
    char err[ERR_SIZE], full[128], every[128], at3[128], resumed[128];
    snprintf(full, sizeof full, "%s/full.st", dir);
    snprintf(every, sizeof every, "%s/every.st", dir);
    snprintf(at3, sizeof at3, "%s/at3.st", dir);
    snprintf(resumed, sizeof resumed, "%s/resumed.st", dir);
    amp_train_result a, b;
    ck_trace t = {0};
    amp_train_config c = small_mlp(dir, AMP_PRECISION_FP16_MASTER);
    c.steps = 10;
    c.grad_stats_every = 3;
    c.checkpoint = full;
    const bool ok_a = CHECK_MSG(ck_run(&c, &t, &a, err) == AMP_OK, "10 steps: %s", err);
    memset(&t, 0, sizeof t);
    t.ck = every, t.copy_to = at3, t.copy_at = 3;
    c.checkpoint = every;
    c.checkpoint_every = 3;
    CHECK_MSG(ck_run(&c, &t, &b, err) == AMP_OK, "checkpoint every 3: %s", err);
    CHECK_MSG(t.copied, "the step-3 checkpoint was not there at step 4");
    amp_st_file *f = NULL;
    if (CHECK_MSG(amp_safetensors_open(at3, &f, err, sizeof err) == AMP_OK, "%s", err)) {
        const char *step = amp_safetensors_meta_get(f, "amp.step");
        CHECK_MSG(step && strcmp(step, "3") == 0, "the periodic checkpoint is at step %s", step ? step : "(none)");
        amp_safetensors_close(f);
    }
    CHECK_MSG(test_same_file(full, every), "--checkpoint-every changed the final checkpoint");
    memset(&t, 0, sizeof t);
    c.checkpoint = resumed;
    c.checkpoint_every = 0;
    c.resume = at3;
    c.threads = 1;
    const bool ok_b = CHECK_MSG(ck_run(&c, &t, &b, err) == AMP_OK, "resume: %s", err);
    if (ok_a && ok_b) {
        CHECK_EQ_INT(b.start_step, 3);
        CHECK_EQ_INT(t.samples, 2); /* steps 6 and 9 after the resume */
        CHECK_MSG(test_same_file(full, resumed), "10 steps and 3 + 7 steps end in different checkpoints");
        CHECK_MSG(memcmp(&a.train_loss, &b.train_loss, sizeof(double)) == 0 &&
                      memcmp(&a.test_loss, &b.test_loss, sizeof(double)) == 0 && a.final_scale == b.final_scale &&
                      a.skipped_steps == b.skipped_steps && a.steps == b.steps && a.epochs == b.epochs,
                  "resumed: train loss %.17g vs %.17g, test loss %.17g vs %.17g", a.train_loss, b.train_loss, a.test_loss,
                  b.test_loss);
        CHECK_MSG(a.grad_stats_samples == b.grad_stats_samples &&
                      memcmp(&a.grad_underflow_fp16_unscaled, &b.grad_underflow_fp16_unscaled, sizeof(double)) == 0 &&
                      memcmp(&a.grad_stats, &b.grad_stats, sizeof a.grad_stats) == 0,
                  "resumed: gradient statistics differ");
    }
    /* another hidden size, another model kind, a run that is already over: refused, one line */
    c.checkpoint = NULL;
    c.model.hidden = 16;
    CHECK_EQ_INT(ck_run(&c, &t, &b, err), AMP_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "at3.st") && strstr(err, "shape") && !strchr(err, '\n'), "message: %s", err);
    c.model.hidden = 32;
    c.steps = 3;
    CHECK_EQ_INT(ck_run(&c, &t, &b, err), AMP_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "this run has 3 steps") != NULL, "message: %s", err);
    char text[128];
    snprintf(text, sizeof text, "%s/text.txt", dir);
    amp_train_config l = amp_train_default_config(AMP_MODEL_LSTM);
    l.data = text;
    l.model.hidden = 16, l.model.embed = 8, l.model.context = 16;
    l.batch = 4, l.steps = 5, l.eval_batches = 2, l.threads = 2;
    l.resume = at3;
    CHECK_EQ_INT(ck_run(&l, &t, &b, err), AMP_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "it is a mlp checkpoint, this run trains lstm") != NULL, "message: %s", err);
    c.steps = 10;
    c.checkpoint_every = 2; /* without a checkpoint path */
    CHECK_EQ_INT(ck_run(&c, &t, &b, err), AMP_ERR_INVALID_ARGUMENT);
}

/* Gradient statistics: samples at the documented steps, histograms that add up, fractions in [0, 1]
 * and averaged into the result; driving the loss to 0 leaves gradients below fp16's range that the
 * dynamic scale lifts (unscaled underflow > scaled); fp16 parameter gradients are already flushed. */
static void check_grad_stats(const char *dir) {
    char err[ERR_SIZE];
    amp_train_result r;
    ck_trace t = {0};
    amp_train_config c = small_mlp(dir, AMP_PRECISION_AMP_FP16);
    c.steps = 40;
    c.optim.lr = 0.2f;
    c.grad_stats_every = 5;
    if (CHECK_MSG(ck_run(&c, &t, &r, err) == AMP_OK, "%s", err)) {
        CHECK_EQ_INT(t.samples, 9); /* 1, 5, 10, ..., 40 */
        CHECK_EQ_INT(r.grad_stats_samples, 9);
        CHECK_EQ_INT(t.bad, 0);
        CHECK_EQ_INT(r.grad_stats.step, 40);
        CHECK_EQ_INT(r.grad_stats.count, r.num_params);
        CHECK_MSG(fabs(r.grad_underflow_fp16_unscaled - t.sum[0] / 9) < 1e-15 &&
                      fabs(r.grad_underflow_fp16_scaled - t.sum[1] / 9) < 1e-15 &&
                      fabs(r.grad_overflow_fp16_scaled - t.sum[2] / 9) < 1e-15,
                  "the result's fractions are not the samples' mean");
        CHECK_MSG(r.final_scale >= 1 && r.grad_underflow_fp16_unscaled > r.grad_underflow_fp16_scaled,
                  "underflow unscaled %g, scaled %g (scale %g)", r.grad_underflow_fp16_unscaled,
                  r.grad_underflow_fp16_scaled, (double)r.final_scale);
        harness_note("amp-fp16, loss -> 0: underflow unscaled %.4f, at scale %g %.4f, overflow %.4f",
                     r.grad_underflow_fp16_unscaled, (double)r.final_scale, r.grad_underflow_fp16_scaled,
                     r.grad_overflow_fp16_scaled);
    }
    /* The default schedule: batch 4 gives 16 steps per epoch, so steps 1, 2, 4, 8 of 10. */
    memset(&t, 0, sizeof t);
    c.grad_stats_every = 0;
    c.batch = 4;
    c.steps = 10;
    c.optim.lr = 0.05f;
    if (CHECK_MSG(ck_run(&c, &t, &r, err) == AMP_OK, "%s", err) && CHECK_MSG(t.samples == 4, "%lld samples", (long long)t.samples))
        CHECK_MSG(t.steps[0] == 1 && t.steps[1] == 2 && t.steps[2] == 4 && t.steps[3] == 8, "sampled %lld %lld %lld %lld",
                  (long long)t.steps[0], (long long)t.steps[1], (long long)t.steps[2], (long long)t.steps[3]);
    memset(&t, 0, sizeof t);
    c.grad_stats_every = -1;
    if (CHECK_MSG(ck_run(&c, &t, &r, err) == AMP_OK, "%s", err)) {
        CHECK_EQ_INT(t.samples, 0);
        CHECK(r.grad_stats_samples == 0 && isnan(r.grad_underflow_fp16_unscaled) && r.grad_stats.step == 0);
    }
    /* fp16-pure: the gradients are fp16, so nothing nonzero is below fp16's range at the scale used */
    memset(&t, 0, sizeof t);
    c = small_mlp(dir, AMP_PRECISION_FP16_PURE);
    c.steps = 12;
    c.grad_stats_every = 4;
    if (CHECK_MSG(ck_run(&c, &t, &r, err) == AMP_OK, "%s", err)) {
        CHECK_EQ_INT(t.bad, 0);
        CHECK_MSG(r.grad_underflow_fp16_scaled == 0, "fp16 gradients underflow %g", r.grad_underflow_fp16_scaled);
    }
}

void test_train_learns_and_is_deterministic(void) {
    char dir[64], err[ERR_SIZE];
    if (!make_data(dir, sizeof dir)) return;
    trace t;
    amp_train_result a, b, s;
    amp_train_config c = small_mlp(dir, AMP_PRECISION_FP32);
    if (CHECK_MSG(run(&c, &t, &a, err) == AMP_OK, "fp32 run: %s", err)) {
        CHECK_EQ_INT(a.steps, 30);
        CHECK_EQ_INT(a.epochs, 8); /* 64 images / 16 per step = 4 steps per epoch */
        CHECK_EQ_INT(t.n_eval, 8);
        CHECK_MSG(a.train_loss < 0.5 * t.first_loss, "loss %g did not fall from %g", a.train_loss, t.first_loss);
        CHECK_MSG(a.test_accuracy > 0.9, "accuracy %g", a.test_accuracy);
        CHECK(isnan(a.bits_per_char));
        CHECK(a.scaler == AMP_SCALER_OFF && a.final_scale == 1.0f && a.skipped_steps == 0);
        CHECK(a.samples_per_sec > 0 && a.wall_seconds > 0);
    }
    if (CHECK(run(&c, &t, &b, err) == AMP_OK)) {
        CHECK_MSG(memcmp(&a.train_loss, &b.train_loss, sizeof(double)) == 0 &&
                      memcmp(&a.test_loss, &b.test_loss, sizeof(double)) == 0,
                  "same seed: train loss %.17g vs %.17g", a.train_loss, b.train_loss);
    }
    c.seed = 5;
    if (CHECK(run(&c, &t, &s, err) == AMP_OK)) CHECK_MSG(s.test_loss != a.test_loss, "another seed, same loss");
    check_resume(dir);
    test_remove_tree(dir);
}

void test_train_presets_and_scalers(void) {
    char dir[64], err[ERR_SIZE];
    if (!make_data(dir, sizeof dir)) return;
    trace t;
    amp_train_result r;
    static const struct {
        amp_precision p;
        amp_scaler_mode mode, want_mode;
        float want_scale;
    } cases[] = {
        {AMP_PRECISION_AMP_FP16, AMP_SCALER_DEFAULT, AMP_SCALER_DYNAMIC, 65536.0f},
        {AMP_PRECISION_AMP_FP16, AMP_SCALER_OFF, AMP_SCALER_OFF, 1.0f},
        {AMP_PRECISION_AMP_BF16, AMP_SCALER_DEFAULT, AMP_SCALER_OFF, 1.0f},
        {AMP_PRECISION_FP16_MASTER, AMP_SCALER_DEFAULT, AMP_SCALER_DYNAMIC, 65536.0f},
        {AMP_PRECISION_FP16_MASTER, AMP_SCALER_STATIC, AMP_SCALER_STATIC, 128.0f},
        {AMP_PRECISION_BF16_PURE, AMP_SCALER_DEFAULT, AMP_SCALER_OFF, 1.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        amp_train_config c = small_mlp(dir, cases[i].p);
        c.scaler = cases[i].mode;
        c.static_scale = 128.0f;
        if (!CHECK_MSG(run(&c, &t, &r, err) == AMP_OK, "case %zu: %s", i, err)) continue;
        CHECK_MSG(r.scaler == cases[i].want_mode && r.final_scale == cases[i].want_scale,
                  "case %zu: scaler %s, scale %g", i, amp_scaler_mode_name(r.scaler), (double)r.final_scale);
        CHECK_MSG(r.test_accuracy > 0.9, "case %zu: accuracy %g", i, r.test_accuracy);
    }
    check_grad_stats(dir);
    test_remove_tree(dir);
}

/* fp16-pure: an update far below half an fp16 ulp of the weights is lost, so the model never
 * changes; fp32 (and fp16-master, whose fp32 masters remember) keep moving. */
void test_train_pure_updates_vanish(void) {
    char dir[64], err[ERR_SIZE];
    if (!make_data(dir, sizeof dir)) return;
    trace t;
    amp_train_result r;
    amp_train_config c = small_mlp(dir, AMP_PRECISION_FP16_PURE);
    c.optim.lr = 1e-6f;
    c.optim.momentum = 0;
    c.steps = 12;
    if (CHECK_MSG(run(&c, &t, &r, err) == AMP_OK, "%s", err) && CHECK(t.n_eval == 3))
        CHECK_MSG(t.eval_loss[0] == t.eval_loss[2], "fp16-pure moved: %.9g -> %.9g", t.eval_loss[0], t.eval_loss[2]);
    c.precision = AMP_PRECISION_FP32;
    if (CHECK_MSG(run(&c, &t, &r, err) == AMP_OK, "%s", err) && CHECK(t.n_eval == 3))
        CHECK_MSG(t.eval_loss[0] != t.eval_loss[2], "fp32 did not move");
    test_remove_tree(dir);
}

/* accum 2 x batch 16 sees the same 32 images per step as batch 32 (same epoch orders), so the runs
 * agree up to rounding. */
void test_train_accumulation(void) {
    char dir[64], err[ERR_SIZE];
    if (!make_data(dir, sizeof dir)) return;
    trace t;
    amp_train_result a, b;
    amp_train_config c = small_mlp(dir, AMP_PRECISION_FP32);
    c.steps = 10;
    c.batch = 32;
    const bool ok_a = CHECK_MSG(run(&c, &t, &a, err) == AMP_OK, "%s", err);
    c.batch = 16;
    c.accum = 2;
    const bool ok_b = CHECK_MSG(run(&c, &t, &b, err) == AMP_OK, "%s", err);
    if (ok_a && ok_b) {
        CHECK_EQ_INT(b.epochs, a.epochs);
        CHECK_MSG(fabs(a.test_loss - b.test_loss) <= 1e-4 * fabs(a.test_loss) + 1e-6,
                  "batch 32: %.9g, 2 x 16: %.9g", a.test_loss, b.test_loss);
    }
    test_remove_tree(dir);
}

void test_train_text_models(void) {
    char dir[64], err[ERR_SIZE], path[128];
    if (!make_data(dir, sizeof dir)) return;
    snprintf(path, sizeof path, "%s/text.txt", dir);
    trace t;
    amp_train_result r;
    for (int k = 0; k < 2; k++) {
        amp_train_config c = amp_train_default_config(k ? AMP_MODEL_GPT : AMP_MODEL_LSTM);
        c.data = path;
        c.precision = k ? AMP_PRECISION_AMP_BF16 : AMP_PRECISION_AMP_FP16;
        c.model.hidden = 16, c.model.embed = 8, c.model.layers = 1, c.model.heads = 2, c.model.context = 16;
        c.batch = 4, c.steps = 20, c.eval_batches = 2, c.threads = 2;
        if (!CHECK_MSG(run(&c, &t, &r, err) == AMP_OK, "%s: %s", k ? "gpt" : "lstm", err)) continue;
        CHECK(isnan(r.test_accuracy));
        CHECK_MSG(r.bits_per_char > 0 && r.bits_per_char < 8, "bits/char %g", r.bits_per_char);
        CHECK_MSG(fabs(r.bits_per_char - r.test_loss / log(2.0)) < 1e-12, "bits/char is test loss / ln 2");
        CHECK_MSG(r.train_loss < t.first_loss, "%s: loss %g did not fall from %g", k ? "gpt" : "lstm", r.train_loss,
                  t.first_loss);
    }
    amp_train_config c = amp_train_default_config(AMP_MODEL_GPT);
    c.data = path;
    c.model.context = 1000; /* longer than the held-out tenth of this text (about 200 bytes) */
    c.steps = 1;
    CHECK_EQ_INT(run(&c, &t, &r, err), AMP_ERR_FORMAT);
    CHECK_MSG(strstr(err, "held-out text") != NULL, "message: %s", err);
    test_remove_tree(dir);
}

void test_train_errors_and_anomaly(void) {
    char dir[64], err[ERR_SIZE], missing[128];
    if (!make_data(dir, sizeof dir)) return;
    trace t;
    amp_train_result r;
    snprintf(missing, sizeof missing, "%s/nowhere", dir);
    amp_train_config c = small_mlp(missing, AMP_PRECISION_FP32);
    CHECK_EQ_INT(run(&c, &t, &r, err), AMP_ERR_IO);
    CHECK_MSG(strstr(err, "nowhere/train-images-idx3-ubyte") != NULL, "message: %s", err);
    c = small_mlp(dir, AMP_PRECISION_FP32);
    c.batch = N_TRAIN + 1;
    CHECK_EQ_INT(run(&c, &t, &r, err), AMP_ERR_INVALID_ARGUMENT);
    c = small_mlp(dir, AMP_PRECISION_FP32);
    c.accum = 0;
    CHECK_EQ_INT(run(&c, &t, &r, err), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_train_run(NULL, NULL, &r, err, sizeof err), AMP_ERR_NULL_POINTER);
    /* The default data missing (no data given): the message names the package. Where it is installed
     * the run would train, so only the absent default is checked. */
    if (access(AMP_TEXT_CORPUS_DEFAULT_PATH, F_OK) != 0) {
        amp_train_config l = amp_train_default_config(AMP_MODEL_LSTM);
        CHECK_EQ_INT(run(&l, &t, &r, err), AMP_ERR_IO);
        CHECK_MSG(strstr(err, AMP_TEXT_CORPUS_DEFAULT_PATH) && strstr(err, "apt-get install fortunes-min"),
                  "message: %s", err);
    } else {
        harness_note("%s is installed: its missing-data message not checked", AMP_TEXT_CORPUS_DEFAULT_PATH);
    }
    if (access(AMP_IMAGE_DATASET_DEFAULT_DIR, F_OK) != 0) {
        c = small_mlp(NULL, AMP_PRECISION_FP32);
        CHECK_EQ_INT(run(&c, &t, &r, err), AMP_ERR_IO);
        CHECK_MSG(strstr(err, "apt-get install dataset-fashion-mnist"), "message: %s", err);
    }
    c = small_mlp(missing, AMP_PRECISION_FP32); /* data given: no hint */
    CHECK(run(&c, &t, &r, err) == AMP_ERR_IO && !strstr(err, "apt-get"));

    /* A learning rate that throws fp16 weights past 65504: the next forward pass overflows. */
    c = small_mlp(dir, AMP_PRECISION_FP16_PURE);
    c.optim.lr = 1e5f;
    c.detect_anomaly = true;
    CHECK_EQ_INT(run(&c, &t, &r, err), AMP_ERR_STATE);
    CHECK_MSG(strstr(err, "anomaly at step") != NULL && strstr(err, "op '") != NULL, "message: %s", err);
    harness_note("%s", err);
    test_remove_tree(dir);
}

/* ---- data-parallel plumbing, through a recording communicator of one rank ---- */

enum { FAKE_MAX_STARTS = 4096 };
typedef struct fake_comm {
    amp_comm base;
    int starts, waits, progress_before_wait, f64_calls;
    bool progressed; /* since the last wait */
    const unsigned char *ptr[FAKE_MAX_STARTS];
    size_t bytes[FAKE_MAX_STARTS];
    int step_of[FAKE_MAX_STARTS];
} fake_comm;

static int fake_f64(amp_comm *c, double *buf, size_t n, amp_comm_reduce op) {
    (void)buf, (void)n, (void)op;
    ((fake_comm *)c)->f64_calls++;
    return AMP_OK; /* one rank: the reduction of one value is the value */
}
static int fake_u64(amp_comm *c, uint64_t *buf, size_t n, amp_comm_reduce op) {
    (void)c, (void)buf, (void)n, (void)op;
    return AMP_OK;
}
static int fake_start(amp_comm *c, void *buf, size_t n, amp_dtype dtype, amp_dtype wire) {
    (void)wire;
    fake_comm *f = (fake_comm *)c;
    if (f->starts < FAKE_MAX_STARTS) {
        f->ptr[f->starts] = buf;
        f->bytes[f->starts] = n * amp_dtype_size(dtype);
        f->step_of[f->starts] = f->waits;
    }
    f->starts++;
    return AMP_OK;
}
static void fake_progress(amp_comm *c) { ((fake_comm *)c)->progressed = true; }
static int fake_wait(amp_comm *c) {
    fake_comm *f = (fake_comm *)c;
    f->progress_before_wait += f->progressed;
    f->progressed = false;
    f->waits++;
    return AMP_OK;
}
static const char *fake_error(const amp_comm *c) {
    (void)c;
    return "";
}

/* With a communicator of one rank the run must give the same bits as without one (the split, the
 * seed and the sums are all identities), the buckets must cover every gradient once per step without
 * overlap, and (with small buckets) some must start while backward is still running: the grad-ready
 * hook calls progress() then, finish() does not. */
void test_train_data_parallel_plumbing(void) {
    char dir[64], err[ERR_SIZE];
    if (!make_data(dir, sizeof dir)) return;
    static fake_comm fake;
    memset(&fake, 0, sizeof fake);
    fake.base = (amp_comm){.rank = 0, .size = 1, .allreduce_f64 = fake_f64, .allreduce_u64 = fake_u64,
                           .start_grads = fake_start, .progress = fake_progress, .wait_grads = fake_wait,
                           .error = fake_error};
    trace t;
    amp_train_result a, b;
    amp_train_config c = small_mlp(dir, AMP_PRECISION_AMP_FP16);
    c.steps = 8;
    if (CHECK_MSG(run(&c, &t, &a, err) == AMP_OK, "%s", err)) {
        c.comm = &fake.base;
        c.bucket_bytes = 1024;
        c.check_replicas_every = 2;
        if (CHECK_MSG(run(&c, &t, &b, err) == AMP_OK, "with a communicator: %s", err)) {
            CHECK_MSG(!memcmp(&a.train_loss, &b.train_loss, sizeof(double)) && !memcmp(&a.test_loss, &b.test_loss, sizeof(double)),
                      "one rank changed the run: train loss %.17g vs %.17g", a.train_loss, b.train_loss);
            CHECK_EQ_INT(b.ranks, 1);
            CHECK_EQ_INT(fake.waits, 8);
            CHECK_MSG(fake.starts >= 2 * 8 && fake.starts <= FAKE_MAX_STARTS, "%d bucket starts in 8 steps", fake.starts);
            CHECK_MSG(fake.progress_before_wait == 8, "buckets started during backward in %d of 8 steps",
                      fake.progress_before_wait);
            CHECK(fake.f64_calls >= 8);
            /* Per step: no two ranges overlap, and together they hold every parameter (the gaps are
             * alignment padding, under 64 bytes per parameter tensor). */
            for (int s = 0; s < 8; s++) {
                size_t total = 0;
                int n = 0;
                for (int i = 0; i < fake.starts; i++) {
                    if (fake.step_of[i] != s) continue;
                    total += fake.bytes[i], n++;
                    for (int j = 0; j < fake.starts; j++)
                        if (j != i && fake.step_of[j] == s)
                            CHECK_MSG(fake.ptr[i] + fake.bytes[i] <= fake.ptr[j] || fake.ptr[j] + fake.bytes[j] <= fake.ptr[i],
                                      "step %d: buckets %d and %d overlap", s, i, j);
                }
                const size_t want = (size_t)a.num_params * sizeof(float);
                CHECK_MSG(n >= 2 && total >= want && total <= want + 6 * 64, "step %d: %d buckets of %zu bytes for %zu",
                          s, n, total, want);
            }
        }
        c.batch = 15; /* not a multiple of the rank count is fine for one rank; 0 ranks is not */
        fake.base.size = 0;
        CHECK(run(&c, &t, &b, err) == AMP_ERR_INVALID_ARGUMENT);
    }
    test_remove_tree(dir);
}
