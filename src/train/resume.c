/* Checkpoints of a training run: what amp_checkpoint_save stores (model, optimizer, scaler, the
 * context's random streams) plus the run's own generator states and bookkeeping, so that a resumed
 * run continues bit for bit (amp/train.h, "Checkpoints"). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/checkpoint.h"
#include "amp/vocab.h"
#include "train_internal.h"
#include "../core/alloc_internal.h"

/* The info's u64 slots. */
enum { SLOT_DATA_SEED, SLOT_DATA_EPOCH, SLOT_DATA_POS, SLOT_TEXT_SEED, SLOT_TEXT_COUNTER, N_SLOTS };

#define K_MODEL "train.model"
#define K_PRECISION "train.precision"
#define K_SCALER "train.scaler"
#define K_BATCH "train.batch"
#define K_ACCUM "train.accum"
#define K_SKIPPED "train.skipped"
#define K_LOSS "train.loss" /* ema bits, epoch loss sum bits, epoch step count */
#define K_GSTATS "train.grad_stats" /* samples, the three sums' bits */
#define K_GLAST "train.grad_last"   /* step, scale bits, count, zeros, nonfinite, the three fractions' bits */
#define K_USTATS "train.update_stats" /* stalled-update samples and sum's bits, activation-underflow sum's bits */
#define K_GHIST "train.grad_hist"   /* the latest histogram's AMP_GRAD_HIST_BINS counts */
#define K_SIZES "train.model_sizes" /* the model's sizes (sample.c), for loading it without the data */

static uint64_t dbits(double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

static double from_bits(uint64_t u) {
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* Appends "v," style fields: hex (bits) or decimal. */
static void put_u64(char *buf, size_t size, size_t *len, uint64_t v, bool hex) {
    if (*len >= size) return;
    const int w = hex ? snprintf(buf + *len, size - *len, "%s%" PRIx64, *len ? "," : "", v)
                      : snprintf(buf + *len, size - *len, "%s%" PRId64, *len ? "," : "", (int64_t)v);
    if (w > 0) *len += (size_t)w;
}

/* Parses exactly n comma-separated integers (hex when `hex`). */
static bool parse_list(const char *s, uint64_t *out, size_t n, bool hex) {
    for (size_t i = 0; i < n; i++) {
        char *end;
        errno = 0;
        if (!*s) return false;
        if (hex)
            out[i] = (uint64_t)strtoull(s, &end, 16);
        else
            out[i] = (uint64_t)strtoll(s, &end, 10);
        if (errno || end == s || *end != (i + 1 == n ? '\0' : ',')) return false;
        s = end + 1;
    }
    return true;
}

static const char *scaler_word(amp_scaler_mode m) { return amp_scaler_mode_name(m); }

int amp_train_save_checkpoint(amp_train_run_state *r) {
    const amp_train_config *c = &r->cfg;
    const int64_t done = r->step, m = done * c->accum; /* m: the next micro-batch's global index */
    amp_checkpoint_info info = {.step = done, .epoch = done / r->steps_per_epoch, .n_rng = N_SLOTS};
    info.rng[SLOT_DATA_SEED] = r->data_seed;
    info.rng[SLOT_DATA_EPOCH] = (uint64_t)(m / r->micro_per_epoch);
    info.rng[SLOT_DATA_POS] = (uint64_t)(m % r->micro_per_epoch);
    info.rng[SLOT_TEXT_SEED] = r->text_seed;
    info.rng[SLOT_TEXT_COUNTER] = (uint64_t)(m * c->batch);

    char batch[24], accum[24], skipped[24], loss[80], gstats[96], ustats[64], glast[200];
    char *hist = amp_malloc(AMP_GRAD_HIST_BINS * 21 + 1);
    if (!hist) return amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", c->checkpoint);
    snprintf(batch, sizeof batch, "%" PRId64, c->batch);
    snprintf(accum, sizeof accum, "%" PRId64, c->accum);
    snprintf(skipped, sizeof skipped, "%" PRId64, r->skipped);
    size_t len = 0;
    put_u64(loss, sizeof loss, &len, dbits(r->loss_ema), true);
    put_u64(loss, sizeof loss, &len, dbits(r->window_sum), true);
    put_u64(loss, sizeof loss, &len, (uint64_t)r->window_n, true);
    len = 0;
    put_u64(gstats, sizeof gstats, &len, (uint64_t)r->gs_samples, true);
    put_u64(gstats, sizeof gstats, &len, dbits(r->gs_sum.underflow_fp16_unscaled), true);
    put_u64(gstats, sizeof gstats, &len, dbits(r->gs_sum.underflow_fp16_scaled), true);
    put_u64(gstats, sizeof gstats, &len, dbits(r->gs_sum.overflow_fp16_scaled), true);
    len = 0;
    put_u64(ustats, sizeof ustats, &len, (uint64_t)r->us_samples, true);
    put_u64(ustats, sizeof ustats, &len, dbits(r->us_sum), true);
    put_u64(ustats, sizeof ustats, &len, dbits(r->act_sum), true);
    const amp_grad_stats *g = &r->gs_last;
    len = 0;
    put_u64(glast, sizeof glast, &len, (uint64_t)g->step, true);
    put_u64(glast, sizeof glast, &len, dbits((double)g->scale), true);
    put_u64(glast, sizeof glast, &len, (uint64_t)g->count, true);
    put_u64(glast, sizeof glast, &len, (uint64_t)g->zeros, true);
    put_u64(glast, sizeof glast, &len, (uint64_t)g->nonfinite, true);
    put_u64(glast, sizeof glast, &len, dbits(g->underflow_fp16_unscaled), true);
    put_u64(glast, sizeof glast, &len, dbits(g->underflow_fp16_scaled), true);
    put_u64(glast, sizeof glast, &len, dbits(g->overflow_fp16_scaled), true);
    len = 0;
    hist[0] = '\0';
    for (int k = 0; k < AMP_GRAD_HIST_BINS; k++) put_u64(hist, AMP_GRAD_HIST_BINS * 21 + 1, &len, (uint64_t)g->bins[k], false);

    char sizes[256], *vocab = NULL;
    const char *pattern = NULL;
    if (amp_train_model_meta(r, sizes, sizeof sizes, &vocab, &pattern) != AMP_OK) {
        amp_free(hist);
        return amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY, "%s: cannot store the vocabulary", c->checkpoint);
    }
    const amp_st_meta user[] = {
        {K_MODEL, amp_model_kind_name(c->model.kind)},
        {K_PRECISION, amp_train_fp8_precision_word(r)},
        {K_SCALER, scaler_word(c->scaler)},
        {K_BATCH, batch},
        {K_ACCUM, accum},
        {K_SKIPPED, skipped},
        {K_LOSS, loss},
        {K_GSTATS, gstats},
        {K_USTATS, ustats},
        {K_GLAST, glast},
        {K_GHIST, hist},
        {K_SIZES, sizes},
        {AMP_VOCAB_META_KEY, vocab ? vocab : ""},
        {AMP_VOCAB_PATTERN_META_KEY, pattern ? pattern : ""},
    };
    info.user = user;
    /* the vocabulary and its pattern last, each only when there is one (a pattern implies a vocabulary) */
    info.n_user = sizeof user / sizeof user[0] - (vocab ? 0 : 1) - (pattern && vocab ? 0 : 1);
    char msg[400];
    amp_train_fp8_to_buffers(r);
    const int st = amp_checkpoint_save(c->checkpoint, r->ctx, r->opt, r->scaler, &info, msg, sizeof msg);
    amp_free(hist);
    amp_vocab_meta_free(vocab);
    if (st != AMP_OK) return amp_train_fail(r, st, "checkpoint: %s", msg);
    return AMP_OK;
}

/* Reads the run's own metadata from an open checkpoint and checks that it fits this run. */
static int read_run_meta(amp_train_run_state *r, amp_st_file *f, const char *path) {
    const amp_train_config *c = &r->cfg;
    const char *model = amp_safetensors_meta_get(f, K_MODEL);
    if (!model)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT,
                              "cannot resume from %s: no training-run state in it (%s metadata; not written by amp train)",
                              path, K_MODEL);
    const char *want = amp_model_kind_name(c->model.kind);
    if (strcmp(model, want) != 0)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "cannot resume from %s: it is a %.40s checkpoint, this run trains %s",
                              path, model, want);
    const char *v = amp_safetensors_meta_get(f, K_PRECISION), *prec = amp_train_fp8_precision_word(r);
    if (!v || strcmp(v, prec) != 0)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "cannot resume from %s: it was trained in %.80s, this run uses %s",
                              path, v ? v : "(unknown)", prec);
    v = amp_safetensors_meta_get(f, K_SCALER);
    if (!v || strcmp(v, scaler_word(c->scaler)) != 0)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "cannot resume from %s: its loss scaler was %.40s, this run's is %s",
                              path, v ? v : "(unknown)", scaler_word(c->scaler));
    uint64_t batch = 0, accum = 0, skipped = 0, loss[3], gstats[4], glast[8], hist[AMP_GRAD_HIST_BINS];
    const char *vb = amp_safetensors_meta_get(f, K_BATCH), *va = amp_safetensors_meta_get(f, K_ACCUM);
    if (!vb || !va || !parse_list(vb, &batch, 1, false) || !parse_list(va, &accum, 1, false))
        return amp_train_fail(r, AMP_ERR_FORMAT, "cannot resume from %s: bad %s/%s metadata", path, K_BATCH, K_ACCUM);
    if ((int64_t)batch != c->batch || (int64_t)accum != c->accum)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT,
                              "cannot resume from %s: it was trained with batch %" PRId64 " x accum %" PRId64
                              ", this run uses batch %" PRId64 " x accum %" PRId64,
                              path, (int64_t)batch, (int64_t)accum, c->batch, c->accum);
    const char *vs = amp_safetensors_meta_get(f, K_SKIPPED), *vl = amp_safetensors_meta_get(f, K_LOSS),
               *vg = amp_safetensors_meta_get(f, K_GSTATS), *vt = amp_safetensors_meta_get(f, K_GLAST),
               *vh = amp_safetensors_meta_get(f, K_GHIST);
    if (!vs || !vl || !vg || !vt || !vh || !parse_list(vs, &skipped, 1, false) || !parse_list(vl, loss, 3, true) ||
        !parse_list(vg, gstats, 4, true) || !parse_list(vt, glast, 8, true) || !parse_list(vh, hist, AMP_GRAD_HIST_BINS, false))
        return amp_train_fail(r, AMP_ERR_FORMAT, "cannot resume from %s: missing or malformed train.* metadata", path);
    r->skipped = (int64_t)skipped;
    r->loss_ema = from_bits(loss[0]);
    r->window_sum = from_bits(loss[1]);
    r->window_n = (int64_t)loss[2];
    r->gs_samples = (int64_t)gstats[0];
    r->gs_sum.underflow_fp16_unscaled = from_bits(gstats[1]);
    r->gs_sum.underflow_fp16_scaled = from_bits(gstats[2]);
    r->gs_sum.overflow_fp16_scaled = from_bits(gstats[3]);
    uint64_t ustats[3] = {0, 0, 0};
    const char *vu = amp_safetensors_meta_get(f, K_USTATS);
    if (vu && !parse_list(vu, ustats, 3, true))
        return amp_train_fail(r, AMP_ERR_FORMAT, "cannot resume from %s: malformed %s metadata", path, K_USTATS);
    r->us_samples = (int64_t)ustats[0];
    r->us_sum = vu ? from_bits(ustats[1]) : 0.0;
    r->act_sum = vu ? from_bits(ustats[2]) : 0.0;
    amp_grad_stats *g = &r->gs_last;
    g->step = (int64_t)glast[0];
    g->scale = (float)from_bits(glast[1]);
    g->count = (int64_t)glast[2];
    g->zeros = (int64_t)glast[3];
    g->nonfinite = (int64_t)glast[4];
    g->underflow_fp16_unscaled = from_bits(glast[5]);
    g->underflow_fp16_scaled = from_bits(glast[6]);
    g->overflow_fp16_scaled = from_bits(glast[7]);
    for (int k = 0; k < AMP_GRAD_HIST_BINS; k++) g->bins[k] = (int64_t)hist[k];
    return AMP_OK;
}

int amp_train_resume(amp_train_run_state *r) {
    const amp_train_config *c = &r->cfg;
    const char *path = c->resume;
    char msg[400];
    amp_st_file *f = NULL;
    int st = amp_safetensors_open(path, &f, msg, sizeof msg);
    if (st != AMP_OK) return amp_train_fail(r, st, "cannot resume: %s", msg);
    st = read_run_meta(r, f, path);
    amp_safetensors_close(f);
    if (st != AMP_OK) return st;

    amp_checkpoint_info info;
    st = amp_checkpoint_load(path, r->ctx, r->opt, r->scaler, &info, msg, sizeof msg);
    if (st != AMP_OK)
        return amp_train_fail(r, st == AMP_ERR_UNSUPPORTED_DTYPE ? AMP_ERR_INVALID_ARGUMENT : st, "cannot resume: %s", msg);
    const int64_t m = info.step * c->accum;
    if (info.n_rng != N_SLOTS || info.step < 0 ||
        info.rng[SLOT_DATA_EPOCH] * (uint64_t)r->micro_per_epoch + info.rng[SLOT_DATA_POS] != (uint64_t)m ||
        info.rng[SLOT_DATA_POS] >= (uint64_t)r->micro_per_epoch || info.rng[SLOT_TEXT_COUNTER] != (uint64_t)(m * c->batch))
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT,
                              "cannot resume from %s: its data position does not fit this run's data (%" PRId64
                              " micro-batches per epoch): another dataset?",
                              path, r->micro_per_epoch);
    r->data_seed = info.rng[SLOT_DATA_SEED];
    r->text_seed = info.rng[SLOT_TEXT_SEED];
    r->order_epoch = -1; /* fill_train_batch reshuffles for the saved epoch */
    r->step = r->start_step = info.step;
    return amp_train_fp8_from_buffers(r);
}
