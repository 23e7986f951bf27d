/* amp_train_run on data generated here (a 4x4 IDX image set whose label is the bright quadrant, a
 * small text file): it learns, it is deterministic, the presets and scaler modes resolve as
 * documented, fp16-pure's tiny updates vanish, accumulation matches a larger batch, anomalies and
 * data errors are reported. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp.h"
#include "harness.h"
#include "tests.h"

enum { N_TRAIN = 64, N_TEST = 32, SIDE = 4, ERR_SIZE = 512, MAX_EVALS = 64 };

static void put_be32(FILE *f, uint32_t v) {
    const unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8),
                                (unsigned char)v};
    fwrite(b, 1, 4, f);
}

/* PREFIX-images-idx3-ubyte and PREFIX-labels-idx1-ubyte: image i has label (i + offset) % 4 and that
 * quadrant bright, the rest low noise (the same rule as tests/cli/train.sh). */
static void write_pair(const char *dir, const char *prefix, int count, int offset) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", dir, prefix);
    FILE *img = fopen(path, "wb");
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", dir, prefix);
    FILE *lab = fopen(path, "wb");
    if (!CHECK_MSG(img && lab, "cannot write %s", path)) {
        if (img) fclose(img);
        if (lab) fclose(lab);
        return;
    }
    put_be32(img, 0x803), put_be32(img, (uint32_t)count), put_be32(img, SIDE), put_be32(img, SIDE);
    put_be32(lab, 0x801), put_be32(lab, (uint32_t)count);
    for (int i = 0; i < count; i++) {
        const int k = (i + offset) % 4;
        fputc(k, lab);
        for (int p = 0; p < SIDE * SIDE; p++) {
            const int q = (p / 8) * 2 + (p % 4) / 2;
            fputc(q == k ? 150 + (i * 37 + p * 11) % 100 : (i * 7 + p * 13 + offset) % 80, img);
        }
    }
    fclose(img);
    fclose(lab);
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    char path[1024];
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* A directory with the image set and text.txt; false on failure. */
static bool make_data(char *dir, size_t size) {
    snprintf(dir, size, "/tmp/amp_test_train_XXXXXX");
    if (!CHECK_MSG(mkdtemp(dir) != NULL, "mkdtemp failed")) return false;
    write_pair(dir, "train", N_TRAIN, 0);
    write_pair(dir, "t10k", N_TEST, 1);
    char path[1024];
    snprintf(path, sizeof path, "%s/text.txt", dir);
    FILE *f = fopen(path, "wb");
    if (!CHECK(f != NULL)) return false;
    for (int i = 0; i < 40; i++) fprintf(f, "the quick brown fox jumps over the lazy dog %d times. ", i);
    fclose(f);
    return true;
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
    remove_tree(dir);
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
    remove_tree(dir);
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
    remove_tree(dir);
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
    remove_tree(dir);
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
    remove_tree(dir);
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

    /* A learning rate that throws fp16 weights past 65504: the next forward pass overflows. */
    c = small_mlp(dir, AMP_PRECISION_FP16_PURE);
    c.optim.lr = 1e5f;
    c.detect_anomaly = true;
    CHECK_EQ_INT(run(&c, &t, &r, err), AMP_ERR_STATE);
    CHECK_MSG(strstr(err, "anomaly at step") != NULL && strstr(err, "op '") != NULL, "message: %s", err);
    harness_note("%s", err);
    remove_tree(dir);
}
