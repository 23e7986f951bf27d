/* FP8 presets in amp_train_run: every recipe trains the gpt and the cnn (loss falls, the reported
 * statistics cover the fp8 layers and leave the first and last Linear in bf16); fp8-delayed resumes
 * bit for bit (2N steps == N steps + a resumed N, checkpoints identical: the amax histories and
 * scales are restored, Transformer Engine's #982); a checkpoint of one recipe is refused under
 * another with a one-line reason; the checkpoint's size does not grow with the steps (TE #231); data
 * parallel, the amaxes are all-reduced with MAX before the scale update; --recompute's second forward
 * of each block records no statistics. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp.h"
#include "amp/train.h"
#include "harness.h"
#include "test_util.h"
#include "tests.h"

enum { ERR_SIZE = 512 };

static bool make_text(char *dir, size_t size, char *path, size_t psize) {
    snprintf(dir, size, "/tmp/amp_test_fp8_train_XXXXXX");
    if (!CHECK_MSG(mkdtemp(dir) != NULL, "mkdtemp failed")) return false;
    snprintf(path, psize, "%s/text.txt", dir);
    return CHECK_MSG(test_write_fox_text(path, 60), "cannot write %s", path);
}

static amp_train_config small_gpt(const char *path, amp_precision p) {
    amp_train_config c = amp_train_default_config(AMP_MODEL_GPT);
    c.data = path;
    c.precision = p;
    c.model.hidden = 32, c.model.layers = 2, c.model.heads = 2, c.model.context = 16;
    c.batch = 4, c.steps = 12, c.eval_batches = 2, c.threads = 2;
    return c;
}

typedef struct first_loss {
    double loss;
} first_loss;

static void on_progress(const amp_train_progress *p, void *user) {
    if (!p->is_eval && p->step == 1) ((first_loss *)user)->loss = p->last_loss;
}

void test_fp8_train_recipes(void) {
    char dir[64], path[128], err[ERR_SIZE];
    if (!make_text(dir, sizeof dir, path, sizeof path)) return;
    for (int p = AMP_PRECISION_FP8_DELAYED; p <= AMP_PRECISION_FP8_NOSCALE; p++) {
        amp_train_config c = small_gpt(path, (amp_precision)p);
        amp_train_result r;
        first_loss fl = {NAN};
        const amp_train_callbacks cb = {on_progress, &fl};
        const char *name = amp_precision_get_info((amp_precision)p)->name;
        if (!CHECK_MSG(amp_train_run(&c, &cb, &r, err, sizeof err) == AMP_OK, "%s: %s", name, err)) continue;
        /* 2 blocks x 4 Linear + lm_head: 9, less the first (h.0.attn.c_attn) and the last (lm_head) */
        CHECK_MSG(r.fp8_layers == 7 && strcmp(r.fp8[0].name, "h.0.attn.c_proj") == 0 &&
                      strcmp(r.fp8[6].name, "h.1.mlp.c_proj") == 0,
                  "%s: %d fp8 layers, first %s", name, r.fp8_layers, r.fp8[0].name);
        for (int k = 0; k < r.fp8_layers; k++)
            for (int role = 0; role < AMP_FP8_ROLES; role++)
                CHECK_MSG(r.fp8[k].total[role].count > 0 && r.fp8[k].last[role].amax > 0, "%s: %s %s never cast", name,
                          r.fp8[k].name, amp_fp8_tensor_role_name(role));
        if (p != AMP_PRECISION_FP8_NOSCALE)
            CHECK_MSG(r.train_loss < fl.loss, "%s: loss %g did not fall from %g", name, r.train_loss, fl.loss);
        /* with every Linear */
        if (p == AMP_PRECISION_MXFP8) {
            c.fp8_all_layers = true;
            c.steps = 2;
            if (CHECK_MSG(amp_train_run(&c, NULL, &r, err, sizeof err) == AMP_OK, "%s all layers: %s", name, err))
                CHECK_MSG(r.fp8_layers == 9 && strcmp(r.fp8[8].name, "lm_head") == 0, "all layers: %d", r.fp8_layers);
        }
    }
    test_remove_tree(dir);
}

/* --recompute runs each block's forward again in backward: the fp8 casts there record nothing and
 * take the first forward's scales (delayed scaling's from before the forward's update), so every
 * recipe's statistics (counts, saturated, flushed, amax, scales, casts) and the delayed amax
 * histories (hence the loss) are the plain run's; with one micro-batch a step and with two (the
 * second: delayed scaling with the amax init). */
void test_fp8_train_recompute(void) {
    char dir[64], path[128], err[ERR_SIZE];
    if (!make_text(dir, sizeof dir, path, sizeof path)) return;
    for (int run = 0; run < 2 * (AMP_PRECISION_FP8_NOSCALE - AMP_PRECISION_FP8_DELAYED + 1); run++) {
        const int p = AMP_PRECISION_FP8_DELAYED + run / 2, accum = 1 + run % 2;
        const char *name = amp_precision_get_info((amp_precision)p)->name;
        amp_train_config c = small_gpt(path, (amp_precision)p);
        c.steps = 3, c.eval = false, c.accum = accum;
        c.fp8_amax_init = accum == 2 && p == AMP_PRECISION_FP8_DELAYED;
        amp_train_result a, b;
        if (!CHECK_MSG(amp_train_run(&c, NULL, &a, err, sizeof err) == AMP_OK, "%s: %s", name, err)) continue;
        c.model.recompute = true;
        if (!CHECK_MSG(amp_train_run(&c, NULL, &b, err, sizeof err) == AMP_OK, "%s recompute: %s", name, err)) continue;
        CHECK_MSG(a.train_loss == b.train_loss, "%s: loss %.17g, recomputed %.17g", name, a.train_loss, b.train_loss);
        for (int k = 0; k < a.fp8_layers; k++)
            for (int role = 0; role < AMP_FP8_ROLES; role++) {
                const amp_fp8_cast_stats *x = &a.fp8[k].total[role], *y = &b.fp8[k].total[role];
                CHECK_MSG(x->count == y->count && x->casts == y->casts && x->saturated == y->saturated &&
                              x->flushed == y->flushed && x->amax == y->amax && x->scale_min == y->scale_min &&
                              x->scale_max == y->scale_max,
                          "%s %s %s: %lld values in %lld casts (recomputed: %lld in %lld), flushed %lld (%lld)", name,
                          a.fp8[k].name, amp_fp8_tensor_role_name(role), (long long)x->count, (long long)x->casts,
                          (long long)y->count, (long long)y->casts, (long long)x->flushed, (long long)y->flushed);
            }
    }
    test_remove_tree(dir);
}

static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fclose(f);
    return n;
}

void test_fp8_train_resume(void) {
    char dir[64], path[128], err[ERR_SIZE], full[160], half[160], resumed[160], longer[160];
    if (!make_text(dir, sizeof dir, path, sizeof path)) return;
    snprintf(full, sizeof full, "%s/full.st", dir);
    snprintf(half, sizeof half, "%s/half.st", dir);
    snprintf(resumed, sizeof resumed, "%s/resumed.st", dir);
    snprintf(longer, sizeof longer, "%s/longer.st", dir);
    amp_train_config c = small_gpt(path, AMP_PRECISION_FP8_DELAYED);
    c.eval = false;
    amp_train_result a, b, h;
    c.steps = 10, c.checkpoint = full;
    const bool ok_a = CHECK_MSG(amp_train_run(&c, NULL, &a, err, sizeof err) == AMP_OK, "full: %s", err);
    c.steps = 5, c.checkpoint = half;
    const bool ok_h = CHECK_MSG(amp_train_run(&c, NULL, &h, err, sizeof err) == AMP_OK, "half: %s", err);
    c.steps = 10, c.checkpoint = resumed, c.resume = half;
    const bool ok_b = ok_h && CHECK_MSG(amp_train_run(&c, NULL, &b, err, sizeof err) == AMP_OK, "resumed: %s", err);
    if (ok_a && ok_b) {
        CHECK_MSG(test_same_file(full, resumed), "10 steps and 5 + 5 steps end in different checkpoints");
        CHECK_MSG(a.train_loss == b.train_loss, "train loss %.17g vs %.17g", a.train_loss, b.train_loss);
        /* the last step's scales: the restored histories give the uninterrupted run's */
        for (int k = 0; k < a.fp8_layers; k++)
            for (int role = 0; role < AMP_FP8_ROLES; role++)
                CHECK(a.fp8[k].last[role].scale_min == b.fp8[k].last[role].scale_min &&
                      a.fp8[k].last[role].amax == b.fp8[k].last[role].amax);
    }
    /* the saved state is the live one: scales learned from the amaxes, not the initial 1 */
    amp_st_file *f = NULL;
    if (ok_h && CHECK(amp_safetensors_open(half, &f, err, sizeof err) == AMP_OK)) {
        float scale = 0, hist[1024];
        CHECK(amp_safetensors_read(f, "fp8.h.1.mlp.c_fc.dy.scale", &scale, AMP_F32, 1, (const int64_t[]){1}, err,
                                   sizeof err) == AMP_OK);
        CHECK(amp_safetensors_read(f, "fp8.h.1.mlp.c_fc.dy.amax_history", hist, AMP_F32, 1, (const int64_t[]){1024},
                                   err, sizeof err) == AMP_OK);
        CHECK_MSG(scale > 1000.0f && hist[1023] > 0 && hist[0] == 0, "saved dy scale %g, newest amax %g", (double)scale,
                  (double)hist[1023]);
        CHECK(amp_safetensors_find(f, "fp8.h.0.attn.c_attn.x.scale") == NULL); /* the first Linear is bf16 */
        amp_safetensors_close(f);
    }
    /* the checkpoint does not grow with the steps: 5 and 40 steps, the same tensors (only the
     * metadata's numbers change length) */
    c.resume = NULL, c.steps = 40, c.checkpoint = longer;
    if (ok_h && CHECK_MSG(amp_train_run(&c, NULL, &b, err, sizeof err) == AMP_OK, "longer: %s", err)) {
        const long s5 = file_size(half), s40 = file_size(longer);
        CHECK_MSG(labs(s40 - s5) < 64, "checkpoint of 5 steps: %ld bytes, of 40 steps: %ld", s5, s40);
    }
    /* another recipe refuses the checkpoint, before training, in one line naming both */
    c = small_gpt(path, AMP_PRECISION_FP8_CURRENT);
    c.eval = false, c.steps = 10, c.resume = half;
    CHECK_EQ_INT(amp_train_run(&c, NULL, &b, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "fp8-delayed") && strstr(err, "fp8-current") && !strchr(err, '\n'), "message: %s", err);
    c.precision = AMP_PRECISION_AMP_BF16;
    CHECK_EQ_INT(amp_train_run(&c, NULL, &b, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
    test_remove_tree(dir);
}

/* ---- data parallel: the amax all-reduce ---------------------------------------------------------- */

/* A communicator of one rank that stands for two: MAX reductions return twice each value (a peer
 * whose amaxes are twice this rank's), SUMs are this rank's own; gradient sums are identities. */
typedef struct peer_comm {
    amp_comm base;
    int max_calls;
    size_t max_values;
    bool single_too; /* also double single values (the amax init's; the inf/NaN flag 0 stays 0) */
    int single_calls;
} peer_comm;

static int peer_f64(amp_comm *c, double *buf, size_t n, amp_comm_reduce op) {
    peer_comm *p = (peer_comm *)c;
    if (op == AMP_COMM_MAX && n > 1) { /* the amaxes (the inf/NaN flag is a single value) */
        p->max_calls++, p->max_values += n;
        for (size_t i = 0; i < n; i++) buf[i] *= 2.0;
    }
    if (op == AMP_COMM_MAX && n == 1 && p->single_too) p->single_calls++, buf[0] *= 2.0;
    return AMP_OK;
}
static int peer_u64(amp_comm *c, uint64_t *buf, size_t n, amp_comm_reduce op) {
    (void)c, (void)buf, (void)n, (void)op;
    return AMP_OK;
}
static int peer_start(amp_comm *c, void *buf, size_t n, amp_dtype dtype, amp_dtype wire) {
    (void)c, (void)buf, (void)n, (void)dtype, (void)wire;
    return AMP_OK;
}
static void peer_progress(amp_comm *c) { (void)c; }
static int peer_wait(amp_comm *c) {
    (void)c;
    return AMP_OK;
}
static const char *peer_error(const amp_comm *c) {
    (void)c;
    return "";
}

/* One step of fp8-delayed: the history's newest amax (slot 1023 after the roll) and the scale made
 * from it are the group's, twice this rank's own; 3 values per fp8 layer travel per micro-batch, x's
 * and W's after the forward, dY's after the backward. */
void test_fp8_train_amax_allreduce(void) {
    char dir[64], path[128], err[ERR_SIZE], alone[160], group[160];
    if (!make_text(dir, sizeof dir, path, sizeof path)) return;
    snprintf(alone, sizeof alone, "%s/alone.st", dir);
    snprintf(group, sizeof group, "%s/group.st", dir);
    static peer_comm peer;
    memset(&peer, 0, sizeof peer);
    peer.base = (amp_comm){.rank = 0, .size = 1, .allreduce_f64 = peer_f64, .allreduce_u64 = peer_u64,
                           .start_grads = peer_start, .progress = peer_progress, .wait_grads = peer_wait,
                           .error = peer_error};
    amp_train_config c = small_gpt(path, AMP_PRECISION_FP8_DELAYED);
    c.eval = false, c.steps = 1;
    amp_train_result r;
    c.checkpoint = alone;
    const bool ok_a = CHECK_MSG(amp_train_run(&c, NULL, &r, err, sizeof err) == AMP_OK, "alone: %s", err);
    c.checkpoint = group, c.comm = &peer.base;
    const bool ok_g = CHECK_MSG(amp_train_run(&c, NULL, &r, err, sizeof err) == AMP_OK, "group: %s", err);
    CHECK_MSG(peer.max_calls == 2 && peer.max_values == 7 * 3, "%d MAX all-reduces of %zu values in all", peer.max_calls,
              peer.max_values);
    amp_st_file *fa = NULL, *fg = NULL;
    if (ok_a && ok_g && CHECK(amp_safetensors_open(alone, &fa, err, sizeof err) == AMP_OK) &&
        CHECK(amp_safetensors_open(group, &fg, err, sizeof err) == AMP_OK)) {
        static const char *const names[] = {"fp8.h.0.attn.c_proj", "fp8.h.1.mlp.c_proj"};
        static const char *const roles[] = {"x", "w", "dy"};
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 3; k++) {
                char name[96];
                float ha[1024], hg[1024], sa = 0, sg = 0;
                snprintf(name, sizeof name, "%s.%s.amax_history", names[i], roles[k]);
                CHECK(amp_safetensors_read(fa, name, ha, AMP_F32, 1, (const int64_t[]){1024}, err, sizeof err) == AMP_OK);
                CHECK(amp_safetensors_read(fg, name, hg, AMP_F32, 1, (const int64_t[]){1024}, err, sizeof err) == AMP_OK);
                snprintf(name, sizeof name, "%s.%s.scale", names[i], roles[k]);
                CHECK(amp_safetensors_read(fa, name, &sa, AMP_F32, 1, (const int64_t[]){1}, err, sizeof err) == AMP_OK);
                CHECK(amp_safetensors_read(fg, name, &sg, AMP_F32, 1, (const int64_t[]){1}, err, sizeof err) == AMP_OK);
                const float fmax = k == 2 ? 57344.0f : 448.0f;
                CHECK_MSG(ha[1023] > 0 && hg[1023] == 2.0f * ha[1023] && sg == fmax / hg[1023] && sa == fmax / ha[1023],
                          "%s %s: amax %g alone, %g in the group; scales %g, %g", names[i], roles[k], (double)ha[1023],
                          (double)hg[1023], (double)sa, (double)sg);
            }
    }
    amp_safetensors_close(fa);
    amp_safetensors_close(fg);
    test_remove_tree(dir);
}

/* The amax init under data parallel: the first step's every cast takes the group's amax (twice this
 * rank's here) through one MAX all-reduce per layer and role, so its scale is fp8_max over that. */
void test_fp8_train_amax_init_allreduce(void) {
    char dir[64], path[128], err[ERR_SIZE];
    if (!make_text(dir, sizeof dir, path, sizeof path)) return;
    static peer_comm peer;
    memset(&peer, 0, sizeof peer);
    peer.base = (amp_comm){.rank = 0, .size = 1, .allreduce_f64 = peer_f64, .allreduce_u64 = peer_u64,
                           .start_grads = peer_start, .progress = peer_progress, .wait_grads = peer_wait,
                           .error = peer_error};
    peer.single_too = true;
    amp_train_config c = small_gpt(path, AMP_PRECISION_FP8_DELAYED);
    c.eval = false, c.steps = 1, c.fp8_amax_init = true;
    for (int grouped = 0; grouped < 2; grouped++) {
        static amp_train_result r;
        c.comm = grouped ? &peer.base : NULL;
        if (!CHECK_MSG(amp_train_run(&c, NULL, &r, err, sizeof err) == AMP_OK, "%s: %s", grouped ? "group" : "alone", err))
            continue;
        CHECK_EQ_INT(r.fp8_layers, 7);
        for (int i = 0; i < r.fp8_layers; i++)
            for (int k = 0; k < AMP_FP8_ROLES; k++) {
                const amp_fp8_cast_stats *st = &r.fp8[i].last[k];
                const float fmax = k == AMP_FP8_DY ? 57344.0f : 448.0f, want = fmax / ((float)(1 + grouped) * st->amax);
                CHECK_MSG(st->amax > 0 && st->scale_min == want && st->scale_max == want,
                          "%s %s %s: amax %g, scale %g, want %g", grouped ? "group" : "alone", r.fp8[i].name,
                          amp_fp8_tensor_role_name(k), (double)st->amax, (double)st->scale_min, (double)want);
            }
    }
    CHECK_MSG(peer.single_calls >= 7 * 3, "%d single-value MAX all-reduces, want at least the 21 inits", peer.single_calls);
    test_remove_tree(dir);
}
