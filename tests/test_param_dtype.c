/* amp_train_config.param_dtype_override (bf16 parameters with fp32 masters on top of amp-bf16):
 * amp_train_run equals the same steps written by hand with the library (bf16 parameters, AdamW with
 * its masters, bf16 autocast) bit for bit, parameters and masters; a run resumed from its
 * checkpoint ends where the uninterrupted one does, byte for byte; the override is refused, with a
 * one-line message, for the presets where it makes no sense, and a checkpoint of one storage dtype
 * does not resume the other; --recompute on top changes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp.h"
#include "harness.h"
#include "tests.h"
#include "test_util.h"

enum { V = 64, T = 8, B = 2, N_IDS = 700, N_TRAIN = 600 };

static void tmp_path(char *buf, size_t n, const char *leaf) {
    snprintf(buf, n, "/tmp/amp_test_param_dtype_%ld_%s", (long)getpid(), leaf);
}

static uint32_t ids[N_IDS];

static amp_train_config base_config(const char *shard, const char *val) {
    amp_train_config cfg = amp_train_default_config(AMP_MODEL_GPT2);
    cfg.model.layers = 2, cfg.model.hidden = 16, cfg.model.heads = 2, cfg.model.context = T;
    cfg.batch = B, cfg.steps = 3, cfg.eval = false, cfg.threads = 1, cfg.seed = 3;
    cfg.data = shard, cfg.val_data = val, cfg.vocab = V;
    cfg.data_order = AMP_DATA_ORDER_SEQUENTIAL;
    cfg.precision = AMP_PRECISION_AMP_BF16;
    cfg.param_dtype_override = AMP_BF16;
    return cfg;
}

typedef struct hand {
    amp_ctx *ctx;
    amp_model *model;
    amp_optimizer *opt;
} hand;

static bool hand_make(hand *h, const amp_train_config *cfg) {
    memset(h, 0, sizeof *h);
    amp_model_config mc = cfg->model;
    mc.vocab = V, mc.param_dtype = AMP_BF16;
    amp_ctx_config cc = amp_ctx_default_config();
    cc.seed = cfg->seed;
    return CHECK(amp_ctx_create(&cc, &h->ctx) == AMP_OK) && CHECK(amp_model_create(h->ctx, &mc, &h->model) == AMP_OK) &&
           CHECK(amp_ctx_alloc_params(h->ctx) == AMP_OK) && CHECK(amp_model_init(h->model, cfg->seed) == AMP_OK) &&
           CHECK(amp_optimizer_create(h->ctx, &cfg->optim, &h->opt) == AMP_OK);
}

static void hand_free(hand *h) {
    amp_optimizer_free(h->opt);
    amp_ctx_free(h->ctx);
    amp_model_free(h->model);
}

/* The run's steps by hand: sequential windows, bf16 autocast, AdamW on masters. */
static bool hand_train(hand *h, int64_t steps) {
    int32_t tok[B * T], tgt[B * T];
    for (int64_t s = 0; s < steps; s++) {
        for (int i = 0; i < B * T; i++) {
            tok[i] = (int32_t)ids[s * B * T + i];
            tgt[i] = (int32_t)ids[s * B * T + i + 1];
        }
        amp_zero_grad(h->ctx);
        amp_ctx_reset(h->ctx);
        amp_autocast_enter(AMP_BF16);
        amp_tensor *logits = amp_model_forward(h->model, h->ctx, NULL, tok, B, true);
        amp_tensor *loss = logits ? amp_cross_entropy(h->ctx, logits, tgt) : NULL;
        amp_autocast_exit();
        if (!CHECK_MSG(loss && amp_backward_scaled(h->ctx, loss, 1.0f) == AMP_OK, "%s", amp_ctx_error(h->ctx)))
            return false;
        amp_optimizer_step(h->opt);
    }
    return true;
}

/* Parameters (bytes) and masters (fp32 bits) of two optimizers over equal models. */
static bool same_state(const hand *a, const hand *b) {
    size_t na = 0, nb = 0;
    const void *pa = amp_ctx_param_memory(a->ctx, &na), *pb = amp_ctx_param_memory(b->ctx, &nb);
    bool same = na == nb && !memcmp(pa, pb, na);
    for (size_t i = 0; same && i < amp_optimizer_num_params(a->opt); i++) {
        const int64_t n = amp_tensor_numel(amp_optimizer_param(a->opt, i));
        same = !memcmp(amp_optimizer_master(a->opt, i), amp_optimizer_master(b->opt, i), (size_t)n * sizeof(float));
    }
    return same;
}

void test_param_dtype_bf16_masters(void) {
    char shard[256], val[256], ck[256], ck2[256], ck3[256], err[256];
    tmp_path(shard, sizeof shard, "train.bin");
    tmp_path(val, sizeof val, "val.bin");
    tmp_path(ck, sizeof ck, "ck3.safetensors");
    tmp_path(ck2, sizeof ck2, "ck6.safetensors");
    tmp_path(ck3, sizeof ck3, "ck6r.safetensors");
    for (int i = 0; i < N_IDS; i++) ids[i] = (uint32_t)((i * 37 + i / 7 + (i * i) % 11) % V);
    if (!CHECK(amp_token_shard_write(shard, ids, N_TRAIN, V, err, sizeof err) == AMP_OK) ||
        !CHECK(amp_token_shard_write(val, ids + N_TRAIN, N_IDS - N_TRAIN, V, err, sizeof err) == AMP_OK))
        return;
    amp_train_config cfg = base_config(shard, val);
    cfg.checkpoint = ck;
    amp_train_result r;
    hand byhand, loaded;
    if (CHECK_MSG(amp_train_run(&cfg, NULL, &r, err, sizeof err) == AMP_OK, "%s", err) && hand_make(&byhand, &cfg) &&
        hand_make(&loaded, &cfg)) {
        CHECK(amp_ctx_param(byhand.ctx, 0)->dtype == AMP_BF16);
        CHECK_MSG(r.param_bytes * 2 < (size_t)r.num_params * 4 + 4096, "parameters take %zu bytes for %lld values",
                  r.param_bytes, (long long)r.num_params);
        CHECK(r.optimizer_state_bytes >= r.num_params * 12); /* masters and two moments */
        hand_train(&byhand, 3);
        amp_checkpoint_info info;
        CHECK_MSG(amp_checkpoint_load(ck, loaded.ctx, loaded.opt, NULL, &info, err, sizeof err) == AMP_OK, "%s", err);
        CHECK_MSG(same_state(&byhand, &loaded), "amp_train_run and the hand-written loop end with different weights");
        /* the masters remember what bf16 rounding lost: some are not bf16 values */
        int64_t off_grid = 0;
        for (size_t i = 0; i < amp_optimizer_num_params(byhand.opt); i++) {
            const float *mw = amp_optimizer_master(byhand.opt, i);
            for (int64_t k = 0; k < amp_tensor_numel(amp_optimizer_param(byhand.opt, i)); k++) {
                uint32_t u;
                memcpy(&u, &mw[k], sizeof u);
                off_grid += (u & 0xFFFFu) != 0;
            }
        }
        CHECK_MSG(off_grid > 0, "every master is a bf16 value: no fp32 masters kept");
    }
    hand_free(&byhand), hand_free(&loaded);

    /* 6 steps in one run, with recompute; 3 + resume to 6 without: the same file */
    cfg.steps = 6, cfg.checkpoint = ck2, cfg.model.recompute = true;
    amp_train_result r6, r6b;
    const bool full = CHECK_MSG(amp_train_run(&cfg, NULL, &r6, err, sizeof err) == AMP_OK, "%s", err);
    cfg.checkpoint = ck3, cfg.resume = ck, cfg.model.recompute = false;
    if (full && CHECK_MSG(amp_train_run(&cfg, NULL, &r6b, err, sizeof err) == AMP_OK, "%s", err)) {
        CHECK_EQ_INT(r6b.start_step, 3);
        CHECK(memcmp(&r6.train_loss, &r6b.train_loss, sizeof(double)) == 0);
        long n1 = 0, n2 = 0;
        unsigned char *p1 = test_read_file(ck2, &n1), *p2 = test_read_file(ck3, &n2);
        CHECK_MSG(p1 && p2 && n1 == n2 && !memcmp(p1, p2, (size_t)n1),
                  "the resumed run's checkpoint differs from the uninterrupted one's");
        free(p1), free(p2);
    }
    /* a bf16-parameter checkpoint does not resume an fp32-parameter run */
    cfg.param_dtype_override = AMP_F32;
    CHECK(amp_train_run(&cfg, NULL, &r6b, err, sizeof err) != AMP_OK);
    CHECK_MSG(strchr(err, '\n') == NULL && err[0], "'%s'", err);
    unlink(shard), unlink(val), unlink(ck), unlink(ck2), unlink(ck3);
}

void test_param_dtype_refusals(void) {
    amp_train_config cfg = base_config("/nonexistent", NULL);
    char err[256];
    amp_train_result r;
    for (int p = 0; p < AMP_PRECISION_COUNT; p++) {
        if (p == AMP_PRECISION_AMP_BF16) continue;
        cfg.precision = (amp_precision)p;
        CHECK_EQ_INT(amp_train_run(&cfg, NULL, &r, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
        CHECK_MSG(strstr(err, "amp-bf16") && !strchr(err, '\n'), "%s: '%s'",
                  amp_precision_get_info((amp_precision)p)->name, err);
    }
    cfg.precision = AMP_PRECISION_AMP_BF16;
    cfg.param_dtype_override = AMP_F16;
    CHECK_EQ_INT(amp_train_run(&cfg, NULL, &r, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "only bf16") != NULL, "'%s'", err);
}
