/* amp_train_run: one training run (amp/train.h describes what it does and why). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sys/resource.h>

#include "amp.h"
#include "amp/train.h"
#include "train_internal.h"
#include "memory_check.h"
#include "../core/alloc_internal.h"

/* The smoothed loss's weight for the newest step (an exponential moving average). */
#define LOSS_EMA_WEIGHT 0.1

/* Purposes of the run's generators, each keyed by (seed, purpose) so one never shifts another. */
enum { RNG_DATA_ORDER = 1, RNG_TEXT_STARTS = 2 }; /* RNG_INJECT = 3: inject.c */

const char *amp_scaler_mode_name(amp_scaler_mode mode) {
    switch (mode) {
    case AMP_SCALER_DEFAULT: return "default";
    case AMP_SCALER_DYNAMIC: return "dynamic";
    case AMP_SCALER_OFF: return "off";
    case AMP_SCALER_STATIC: return "static";
    }
    return "invalid";
}

amp_train_config amp_train_default_config(amp_model_kind kind) {
    const bool text = amp_model_is_text(kind);
    amp_train_config c = {
        .model = amp_model_default_config(kind),
        .data = NULL,
        .precision = AMP_PRECISION_FP32,
        .scaler = AMP_SCALER_DEFAULT,
        .static_scale = 65536.0f,
        .optim = amp_optim_default_config(text ? AMP_OPTIM_ADAMW : AMP_OPTIM_SGD),
        .batch = text ? 32 : 128,
        .epochs = 1,
        .steps = 0,
        .seed = 0,
        .threads = 0,
        .accum = 1,
        .clip = 0.0f,
        .eval = true,
        .eval_batches = AMP_TRAIN_EVAL_BATCHES,
        .detect_anomaly = false,
        .checkpoint = NULL,
        .checkpoint_every = 0,
        .resume = NULL,
        .grad_stats_every = 0,
        .lr_schedule = text ? AMP_LR_CONSTANT : AMP_LR_COSINE,
        .warmup_steps = 0,
        .comm = NULL,
        .grad_wire = AMP_F32,
        .bucket_bytes = 0,
        .check_replicas_every = 0,
        .inject_nonfinite = 0.0,
        .inject_rank = -1,
        .sample_tokens = 0,
    };
    c.optim.lr = text ? AMP_TRAIN_TEXT_LR : AMP_TRAIN_IMAGE_LR;
    if (!text) c.optim.momentum = 0.9f;
    return c;
}

/* ---- small helpers ------------------------------------------------------------------------------ */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define mix64 amp_train_mix64

int amp_train_fail(amp_train_run_state *r, int status, const char *fmt, ...) {
    if (r->err && r->err_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err, r->err_size, fmt, ap);
        va_end(ap);
    }
    return status;
}

/* ---- data ----------------------------------------------------------------------------------------- */

/* A default path that is not there (st AMP_ERR_IO, no --data): the message says which package has it */
static int default_data_hint(amp_train_run_state *r, int st, const char *hint) {
    if (st == AMP_ERR_IO && !r->cfg.data && r->err && r->err_size > 0) {
        const size_t len = strlen(r->err);
        if (len + 1 < r->err_size) snprintf(r->err + len, r->err_size - len, " (%s)", hint);
    }
    return st;
}

/* Token shards, or text through a BPE (amp/data.h); r->data_note says which, and for BPE what the
 * cache did. Returns 1 when the data is neither (bytes or words load as before). */
static int load_tokens(amp_train_run_state *r, const char *path) {
    const amp_train_config *c = &r->cfg;
    const bool shards = amp_text_is_token_shards(path);
    if (!shards && !c->tokenizer) {
        if (c->val_data || c->vocab > 0)
            return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "%s: %s applies to token shards only", path,
                                  c->val_data ? "a held-out file" : "a vocabulary size");
        return 1;
    }
    if (c->text_words > 0)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "a word vocabulary and %s exclude each other",
                              shards ? "token shards" : "a BPE tokenizer");
    r->token_corpus = true;
    if (shards) {
        const int st = amp_text_corpus_load_shards(path, c->val_data, AMP_TEXT_CORPUS_DEFAULT_HOLDOUT, c->vocab,
                                                   c->tokenizer, NULL, &r->corpus, r->err, r->err_size);
        if (st == AMP_OK)
            snprintf(r->data_note, sizeof r->data_note, "token shards: %lld training + %lld held-out tokens, vocabulary %d%s",
                     (long long)r->corpus.train_len, (long long)r->corpus.heldout_len, r->corpus.vocab_size,
                     c->tokenizer ? "" : " (no rank file: bits per token only)");
        return st;
    }
    if (c->val_data || c->vocab > 0)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "%s: %s applies to token shards only", path,
                              c->val_data ? "a held-out file" : "a vocabulary size");
    amp_token_cache_info info;
    const int st = amp_text_corpus_load_bpe(path, AMP_TEXT_CORPUS_DEFAULT_HOLDOUT, c->tokenizer, c->tokenizer_pattern,
                                            c->token_cache, &info, NULL, &r->corpus, r->err, r->err_size);
    if (st != AMP_OK) return st;
    r->token_cache = info.status;
    const char *what = info.status == AMP_TOKEN_CACHE_REUSED    ? "reused from the cache"
                       : info.status == AMP_TOKEN_CACHE_WRITTEN ? "encoded and cached in"
                       : info.status == AMP_TOKEN_CACHE_UNWRITABLE ? "encoded; could not write the cache"
                                                                    : "encoded (no cache)";
    snprintf(r->data_note, sizeof r->data_note, "BPE tokens %s %s: %lld training + %lld held-out tokens", what, info.path,
             (long long)r->corpus.train_len, (long long)r->corpus.heldout_len);
    return AMP_OK;
}

/* Sequential order: micro-batches per pass over `len` tokens, or a failure when there is none. */
static int sequential_windows(amp_train_run_state *r, int64_t len, const char *what, int64_t *out) {
    const int64_t span = r->cfg.batch * r->cfg.model.context;
    *out = (len - 1) / span;
    if (*out < 1)
        return amp_train_fail(r, AMP_ERR_FORMAT, "%s tokens: %lld, sequential order needs batch x context + 1 = %lld",
                              what, (long long)len, (long long)span + 1);
    return AMP_OK;
}

static int load_data(amp_train_run_state *r) {
    const amp_train_config *c = &r->cfg;
    if (r->text) {
        const char *path = c->data ? c->data : AMP_TEXT_CORPUS_DEFAULT_PATH;
        int st = load_tokens(r, path);
        if (st == 1)
            st = c->text_words > 0 ? amp_text_corpus_load_words(path, AMP_TEXT_CORPUS_DEFAULT_HOLDOUT, c->text_words, NULL,
                                                                &r->corpus, r->err, r->err_size)
                                   : amp_text_corpus_load(path, AMP_TEXT_CORPUS_DEFAULT_HOLDOUT, NULL, &r->corpus,
                                                          r->err, r->err_size);
        if (st != AMP_OK)
            return default_data_hint(r, st, "the default text is Debian's fortunes-min: apt-get install fortunes-min, "
                                            "or give a text file or directory: --data");
        const int64_t need = c->model.context + 1;
        if (r->corpus.train_len < need)
            return amp_train_fail(r, AMP_ERR_FORMAT, "%s: training text is %lld tokens, the context needs %lld", path,
                                  (long long)r->corpus.train_len, (long long)need);
        if (c->eval && r->corpus.heldout_len < need)
            return amp_train_fail(r, AMP_ERR_FORMAT, "%s: held-out text is %lld tokens, the context needs %lld", path,
                                  (long long)r->corpus.heldout_len, (long long)need);
        r->micro_per_epoch = r->corpus.train_len / (c->batch * c->model.context);
        if (r->micro_per_epoch < 1) r->micro_per_epoch = 1;
        if (c->data_order == AMP_DATA_ORDER_SEQUENTIAL) {
            st = sequential_windows(r, r->corpus.train_len, "training", &r->micro_per_epoch);
            if (st == AMP_OK && c->eval) st = sequential_windows(r, r->corpus.heldout_len, "held-out", &r->eval_windows);
        }
        return st;
    }
    const char *dir = c->data ? c->data : AMP_IMAGE_DATASET_DEFAULT_DIR;
    int st = amp_image_dataset_load(dir, true, NULL, &r->train_set, r->err, r->err_size);
    if (st == AMP_OK && c->eval) st = amp_image_dataset_load(dir, false, NULL, &r->test_set, r->err, r->err_size);
    if (st != AMP_OK)
        return default_data_hint(r, st, "the default images are Debian's dataset-fashion-mnist: apt-get install "
                                        "dataset-fashion-mnist, or give a directory of IDX files: --data");
    if (c->eval && (r->test_set.rows != r->train_set.rows || r->test_set.cols != r->train_set.cols))
        return amp_train_fail(r, AMP_ERR_FORMAT, "%s: test images are %lldx%lld, training images %lldx%lld", dir,
                              (long long)r->test_set.rows, (long long)r->test_set.cols, (long long)r->train_set.rows,
                              (long long)r->train_set.cols);
    if (c->batch > r->train_set.count)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "batch %lld is larger than the training set (%lld images)",
                              (long long)c->batch, (long long)r->train_set.count);
    r->micro_per_epoch = r->train_set.count / c->batch;
    /* Normalisation from the training set itself (fp64 sums, rounded once). */
    const int64_t n = r->train_set.count * r->train_set.rows * r->train_set.cols;
    double sum = 0, sum_sq = 0;
    for (int64_t i = 0; i < n; i++) {
        const double v = r->train_set.values ? r->train_set.values[i] : r->train_set.pixels[i] / 255.0;
        sum += v;
        sum_sq += v * v;
    }
    const double mean = sum / (double)n, var = sum_sq / (double)n - mean * mean;
    r->mean = (float)mean;
    r->std = var > 1e-12 ? (float)sqrt(var) : 1.0f;
    return AMP_OK;
}

/* Fills this rank's share of the micro-batch with global index m (0, 1, ...) into r->x / r->tokens
 * and r->y: samples [rank * local, (rank + 1) * local) of the global micro-batch. */
static int fill_train_batch(amp_train_run_state *r, int64_t m) {
    const int64_t batch = r->cfg.batch, local = r->local_batch, first = (int64_t)r->rank * local;
    if (r->text) {
        const int64_t ctxlen = r->cfg.model.context, valid = r->corpus.train_len - ctxlen;
        const bool seq = r->cfg.data_order == AMP_DATA_ORDER_SEQUENTIAL;
        for (int64_t b = 0; b < local; b++)
            r->starts[b] = seq ? ((m % r->micro_per_epoch) * batch + first + b) * ctxlen
                               : (int64_t)(mix64(r->text_seed + (uint64_t)(m * batch + first + b)) % (uint64_t)valid);
        return amp_text_corpus_batch(&r->corpus, false, r->starts, local, ctxlen, r->tokens, r->y);
    }
    const int64_t epoch = m / r->micro_per_epoch;
    if (epoch != r->order_epoch) {
        amp_shuffle_indices(r->order, r->train_set.count, r->data_seed, (uint64_t)epoch);
        r->order_epoch = epoch;
    }
    return amp_image_dataset_batch(&r->train_set, r->order + (m % r->micro_per_epoch) * batch + first, local, r->mean,
                                   r->std, r->x, r->y);
}

/* ---- forward ------------------------------------------------------------------------------------ */

/* Builds inputs, forward pass and loss for n samples already in r->x / r->tokens and r->y, under the
 * preset's input dtype and autocast region. Returns the loss, or NULL (error in the context). */
static amp_tensor *forward_loss(amp_train_run_state *r, int64_t n, amp_tensor **logits_out) {
    amp_tensor *xt = NULL;
    if (!r->text) {
        const amp_model_config *mc = &r->cfg.model;
        xt = amp_tensor_from(r->ctx, r->prec->param_dtype, 4, (const int64_t[]){n, 1, mc->image_rows, mc->image_cols},
                             r->x, AMP_F32);
        if (!xt) return NULL;
    }
    const bool autocast = r->prec->autocast_dtype != AMP_F32;
    if (autocast && amp_autocast_enter(r->prec->autocast_dtype) != AMP_OK) return NULL;
    amp_tensor *logits = amp_model_forward(r->model, r->ctx, xt, r->text ? r->tokens : NULL, n, true);
    amp_tensor *loss = logits ? amp_cross_entropy(r->ctx, logits, r->y) : NULL;
    if (autocast) amp_autocast_exit();
    if (logits_out) *logits_out = logits;
    return loss;
}

static int ctx_failure(amp_train_run_state *r, const char *what) {
    const int st = amp_ctx_status(r->ctx);
    return amp_train_fail(r, st != AMP_OK ? st : AMP_ERR_STATE, "%s at step %lld: %s", what,
                          (long long)r->step + 1, st != AMP_OK ? amp_ctx_error(r->ctx) : "no result");
}

/* ---- evaluation --------------------------------------------------------------------------------- */

static int evaluate(amp_train_run_state *r, double *test_loss, double *accuracy, double *bits_per_char) {
    const int64_t batch = r->cfg.batch;
    const bool prev = amp_set_grad_enabled(r->ctx, false);
    amp_train_fp8_recording(r, false);
    double loss_sum = 0, weight = 0, nats = 0, bytes = 0;
    int64_t correct = 0, seen = 0;
    int st = AMP_OK;
    if (r->text) {
        const int64_t ctxlen = r->cfg.model.context, valid = r->corpus.heldout_len - ctxlen;
        const int64_t windows = r->cfg.eval_batches * batch;
        for (int64_t k = r->rank; k < r->cfg.eval_batches && st == AMP_OK; k += r->ranks) {
            amp_ctx_reset(r->ctx);
            for (int64_t b = 0; b < batch; b++)
                r->starts[b] = r->cfg.data_order == AMP_DATA_ORDER_SEQUENTIAL
                                   ? ((k % r->eval_windows) * batch + b) * ctxlen
                                   : (k * batch + b) * valid / windows;
            st = amp_text_corpus_batch(&r->corpus, true, r->starts, batch, ctxlen, r->tokens, r->y);
            amp_tensor *loss = st == AMP_OK ? forward_loss(r, batch, NULL) : NULL;
            if (st == AMP_OK && !loss) st = ctx_failure(r, "evaluation");
            if (st == AMP_OK) {
                const double mean = amp_tensor_get(loss, 0);
                loss_sum += mean, weight += 1;
                /* Words: the loss per token over the bytes those tokens spell. */
                nats += mean * (double)(batch * ctxlen);
                bytes += (double)amp_text_corpus_bytes(&r->corpus, r->y, batch * ctxlen);
            }
        }
    } else {
        const int64_t count = r->test_set.count, classes = r->cfg.model.classes;
        for (int64_t at = (int64_t)r->rank * batch; at < count && st == AMP_OK; at += (int64_t)r->ranks * batch) {
            const int64_t n = count - at < batch ? count - at : batch;
            amp_ctx_reset(r->ctx);
            for (int64_t i = 0; i < n; i++) r->order_eval[i] = at + i;
            st = amp_image_dataset_batch(&r->test_set, r->order_eval, n, r->mean, r->std, r->x, r->y);
            amp_tensor *logits = NULL;
            amp_tensor *loss = st == AMP_OK ? forward_loss(r, n, &logits) : NULL;
            if (st == AMP_OK && !loss) st = ctx_failure(r, "evaluation");
            if (st == AMP_OK) st = amp_tensor_read(logits, r->logits, AMP_F32);
            if (st != AMP_OK) break;
            loss_sum += (double)amp_tensor_get(loss, 0) * (double)n;
            weight += (double)n;
            for (int64_t i = 0; i < n; i++) {
                const float *row = r->logits + i * classes;
                int64_t best = 0;
                for (int64_t j = 1; j < classes; j++)
                    if (row[j] > row[best]) best = j;
                correct += best == r->y[i];
                seen++;
            }
        }
    }
    amp_set_grad_enabled(r->ctx, prev);
    amp_train_fp8_recording(r, true);
    amp_ctx_reset(r->ctx);
    /* Data parallel: each rank evaluated every ranks-th batch; the totals are the sums. (Every rank
     * takes part even after a local failure, so no peer waits forever; the failure still wins.) */
    enum { T_LOSS_SUM, T_WEIGHT, T_CORRECT, T_SEEN, T_NATS, T_BYTES, T_COUNT };
    double totals[T_COUNT] = {
        [T_LOSS_SUM] = loss_sum, [T_WEIGHT] = weight, [T_CORRECT] = (double)correct, [T_SEEN] = (double)seen,
        [T_NATS] = nats, [T_BYTES] = bytes,
    };
    const int sum_st = amp_train_dist_sum(r, totals, T_COUNT);
    if (st == AMP_OK) st = sum_st;
    loss_sum = totals[T_LOSS_SUM], weight = totals[T_WEIGHT], nats = totals[T_NATS], bytes = totals[T_BYTES];
    correct = (int64_t)totals[T_CORRECT], seen = (int64_t)totals[T_SEEN];
    *test_loss = weight > 0 ? loss_sum / weight : NAN;
    /* Words: bits/char is the loss over the held-out bytes. Bytes: one character per token, so
     * bits/char is the loss in bits. */
    if (!r->text) *bits_per_char = NAN;
    else if (r->cfg.text_words > 0 || r->token_corpus) *bits_per_char = bytes > 0 ? nats / bytes / log(2.0) : NAN;
    else *bits_per_char = *test_loss / log(2.0);
    *accuracy = r->text ? NAN : (seen > 0 ? (double)correct / (double)seen : NAN);
    return st;
}

/* ---- set-up ------------------------------------------------------------------------------------- */

/* param_dtype_override: bf16 storage with fp32 masters, on top of amp-bf16 only (the other presets
 * store fp16 or bf16 already, or would cast bf16 weights to fp16, or compute in the storage dtype). */
static int check_param_dtype(amp_train_run_state *r) {
    const amp_dtype d = r->cfg.param_dtype_override;
    if (d == AMP_F32) return AMP_OK;
    if (d != AMP_BF16)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "parameter dtype %s: only bf16 overrides the preset's",
                              amp_dtype_name(d));
    if (r->cfg.precision != AMP_PRECISION_AMP_BF16)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT,
                              "bf16 parameters need the amp-bf16 preset (%s stores %s parameters%s)", r->prec->name,
                              amp_dtype_name(r->prec->param_dtype),
                              r->prec->autocast_dtype == AMP_F16 ? " and autocasts to fp16" : "");
    r->prec_override = *r->prec;
    r->prec_override.param_dtype = AMP_BF16;
    r->prec_override.master_weights = true;
    r->prec = &r->prec_override;
    return AMP_OK;
}

static int check_config(amp_train_run_state *r) {
    const amp_train_config *c = &r->cfg;
    if (c->model.kind < 0 || c->model.kind >= AMP_MODEL_COUNT)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "unknown model kind %d", (int)c->model.kind);
    if (!r->prec) return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "unknown precision %d", (int)c->precision);
    if (c->batch < 1 || c->batch > ((int64_t)1 << 20))
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "batch %lld out of range", (long long)c->batch);
    if (c->accum < 1 || c->accum > ((int64_t)1 << 20))
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "accum %lld out of range", (long long)c->accum);
    if (c->steps < 0 || (c->steps == 0 && c->epochs < 1))
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "nothing to train: give steps or epochs > 0");
    if (c->scaler < AMP_SCALER_DEFAULT || c->scaler > AMP_SCALER_STATIC)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "unknown scaler mode %d", (int)c->scaler);
    if (c->zero_stage != 0 && c->zero_stage != 1)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT,
                              "ZeRO stage %d is not supported: 0 (off) or 1 (optimizer state sharded over the ranks)",
                              c->zero_stage);
    if (c->scaler == AMP_SCALER_STATIC && !(c->static_scale > 0 && isfinite(c->static_scale)))
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "static loss scale %g must be positive and finite",
                              (double)c->static_scale);
    if (!(c->clip >= 0 && isfinite(c->clip)))
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "clip %g must be >= 0 and finite", (double)c->clip);
    if (r->text && c->eval && c->eval_batches < 1)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "eval_batches must be positive");
    if (c->checkpoint_every < 0)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "checkpoint_every %lld must be >= 0", (long long)c->checkpoint_every);
    if (c->checkpoint_every > 0 && !c->checkpoint)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "checkpoint_every needs a checkpoint path");
    if ((c->checkpoint && !c->checkpoint[0]) || (c->resume && !c->resume[0]))
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "empty checkpoint or resume path");
    if (!(c->inject_nonfinite >= 0 && c->inject_nonfinite <= 1))
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "inject_nonfinite %g must be a probability in [0, 1]",
                              c->inject_nonfinite);
    if (c->inject_rank < -1)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "inject_rank %d must be -1 (every rank) or a rank", c->inject_rank);
    if (c->check_replicas_every < 0)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "check_replicas_every %lld must be >= 0",
                              (long long)c->check_replicas_every);
    if (c->lr_schedule != AMP_LR_CONSTANT && c->lr_schedule != AMP_LR_COSINE)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "lr schedule %d: use constant or cosine", (int)c->lr_schedule);
    if (c->warmup_steps < 0)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "warmup_steps %lld must be >= 0", (long long)c->warmup_steps);
    if (r->text && c->model.context < 1)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "context %lld out of range", (long long)c->model.context);
    return check_param_dtype(r);
}

static int setup(amp_train_run_state *r) {
    amp_train_config *c = &r->cfg;
    if (c->threads > 0) amp_set_num_threads(c->threads);
    r->data_seed = mix64(c->seed ^ mix64(RNG_DATA_ORDER));
    r->text_seed = mix64(c->seed ^ mix64(RNG_TEXT_STARTS));
    r->order_epoch = -1;
    r->loss_ema = NAN;
    int st = load_data(r);
    if (st != AMP_OK) return st;
    r->steps_per_epoch = r->micro_per_epoch / c->accum;
    if (r->steps_per_epoch < 1) r->steps_per_epoch = 1;

    c->model.param_dtype = r->prec->param_dtype;
    if (r->text) {
        c->model.vocab = r->corpus.vocab_size;
    } else {
        c->model.in_channels = 1;
        c->model.image_rows = r->train_set.rows;
        c->model.image_cols = r->train_set.cols;
        int classes = r->train_set.classes;
        if (c->eval && r->test_set.classes > classes) classes = r->test_set.classes;
        c->model.classes = classes;
    }
    if ((st = amp_train_llmc_configure(r)) != AMP_OK) return st;
    amp_ctx_config cc = amp_ctx_default_config();
    cc.seed = c->seed;
    st = amp_ctx_create(&cc, &r->ctx);
    if (st != AMP_OK) return amp_train_fail(r, st, "cannot create the context: %s", amp_status_str(st));
    st = amp_model_create(r->ctx, &c->model, &r->model);
    if (st != AMP_OK)
        return amp_train_fail(r, st, "model %s: %s", amp_model_kind_name(c->model.kind),
                              amp_ctx_status(r->ctx) != AMP_OK ? amp_ctx_error(r->ctx) : amp_status_str(st));
    if ((st = amp_train_memory_check(r)) != AMP_OK) return st; /* before the parameters' storage */
    if ((st = amp_train_fp8_setup(r)) != AMP_OK) return st;
    st = amp_ctx_alloc_params(r->ctx);
    if (st == AMP_OK) st = amp_model_init(r->model, c->seed);
    if (st != AMP_OK) return amp_train_fail(r, st, "cannot initialise the model: %s", amp_status_str(st));
    if ((st = amp_train_llmc_load(r)) != AMP_OK) return st;
    st = amp_optimizer_create(r->ctx, &c->optim, &r->opt);
    if (st != AMP_OK) return amp_train_fail(r, st, "optimizer: %s (check lr, momentum, weight decay)", amp_status_str(st));
    /* the optimizer writes the 16-bit copies the next forward's casts of the weights would make */
    if (amp_train_cast_copies_on(r->prec, c->zero_stage) &&
        (st = amp_ctx_keep_cast_copies(r->ctx, r->prec->autocast_dtype)) != AMP_OK)
        return amp_train_fail(r, st, "cannot keep the weights' cast copies: %s", amp_status_str(st));

    amp_scaler_config sc = amp_scaler_default_config();
    if (c->scaler == AMP_SCALER_DEFAULT) c->scaler = r->prec->dynamic_scaling ? AMP_SCALER_DYNAMIC : AMP_SCALER_OFF;
    if (c->scaler == AMP_SCALER_OFF) sc.enabled = false;
    if (c->scaler == AMP_SCALER_STATIC) sc.init_scale = c->static_scale;
    st = amp_scaler_create(&sc, &r->scaler);
    if (st != AMP_OK) return amp_train_fail(r, st, "scaler: %s", amp_status_str(st));
    /* This loop writes gradients between backward and the step only through amp (the drill reports
     * its own write), so the scaler's fused step may take its inf/NaN check from backward's notes
     * (amp/tensor.h); they are of use only there, only without clipping (which needs the norm before
     * the update) and only on one process (data parallel, the unscale reads every gradient first). */
    amp_ctx_set_backward_grad_check(r->ctx, c->scaler != AMP_SCALER_OFF && !(c->clip > 0) && !c->comm);
    if ((st = amp_train_dist_setup(r)) != AMP_OK) return st;

    const int64_t batch = c->batch;
    const int64_t per_sample = r->text ? c->model.context : r->train_set.rows * r->train_set.cols;
    r->y = amp_calloc((size_t)(batch * per_sample), sizeof *r->y);
    if (r->text) {
        r->tokens = amp_calloc((size_t)(batch * per_sample), sizeof *r->tokens);
        r->starts = amp_calloc((size_t)batch, sizeof *r->starts);
        if (!r->tokens || !r->starts) st = AMP_ERR_OUT_OF_MEMORY;
    } else {
        r->x = amp_calloc((size_t)(batch * per_sample), sizeof *r->x);
        r->order = amp_calloc((size_t)r->train_set.count, sizeof *r->order);
        r->order_eval = amp_calloc((size_t)batch, sizeof *r->order_eval);
        r->logits = amp_calloc((size_t)(batch * c->model.classes), sizeof *r->logits);
        if (!r->x || !r->order || !r->order_eval || !r->logits) st = AMP_ERR_OUT_OF_MEMORY;
    }
    if (!r->y || st != AMP_OK) return amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY, "out of memory for the batches");
    if (c->resume && (st = amp_train_resume(r)) != AMP_OK) return st;
    return amp_train_zero_setup(r); /* after the resume: the slice takes its share of the loaded state */
}

static void teardown(amp_train_run_state *r) {
    amp_train_fp8_free(r);
    amp_scaler_free(r->scaler);
    amp_optimizer_free(r->opt);
    amp_ctx_free(r->ctx);
    amp_model_free(r->model);
    amp_image_dataset_free(&r->train_set);
    amp_image_dataset_free(&r->test_set);
    amp_text_corpus_free(&r->corpus);
    amp_free(r->x);
    amp_free(r->y);
    amp_free(r->tokens);
    amp_free(r->starts);
    amp_free(r->order);
    amp_free(r->order_eval);
    amp_free(r->logits);
    amp_free(r->gs_buf);
    amp_free(r->us_before);
    amp_train_dist_free(r);
    amp_train_zero_free(r); /* after the optimizer over its context */
}

/* Pure presets: the update is computed from the low-precision parameter itself, not from a master
 * copy that would remember what rounding lost. */
static void reload_masters(amp_train_run_state *r) {
    const size_t n = amp_optimizer_num_params(r->opt);
    for (size_t i = 0; i < n; i++) {
        amp_tensor *p = amp_optimizer_param(r->opt, i);
        if (p->dtype != AMP_F32)
            amp_convert(amp_optimizer_master(r->opt, i), AMP_F32, p->data, p->dtype, (size_t)amp_tensor_numel(p));
    }
}

/* ---- one optimizer step ------------------------------------------------------------------------- */

static int scaler_failure(amp_train_run_state *r, int st) {
    return amp_train_fail(r, st, "scaler at step %lld: %s", (long long)r->step + 1, amp_scaler_error(r->scaler));
}

/* The scaler's half of the step: unscale, check, clip, update (or skip), and the new scale. Data
 * parallel, the check is agreed on first: unscale here, all-reduce the flag, record a peer's find,
 * then the fused pass (which, after an explicit unscale, clips and updates with inv_scale 1, or
 * skips). */
static int scaled_update(amp_train_run_state *r) {
    const amp_train_config *c = &r->cfg;
    int st;
    if (c->comm) {
        if ((st = amp_scaler_unscale(r->scaler, r->opt)) != AMP_OK) return scaler_failure(r, st);
        const float found = amp_scaler_found_inf(r->scaler, r->opt);
        bool any = false;
        if ((st = amp_train_dist_any_found(r, found, &any)) != AMP_OK) return st;
        if (any && found == 0.0f && (st = amp_scaler_record_found_inf(r->scaler, r->opt)) != AMP_OK)
            return scaler_failure(r, st);
    }
    /* no report: the run reads no gradient norm, which the step then need not compute (amp/scaler.h);
     * a skip shows in the scaler's count */
    amp_scaler_stats before, after;
    amp_scaler_get_stats(r->scaler, &before);
    if ((st = amp_scaler_step_fused(r->scaler, r->opt, c->clip, NULL)) != AMP_OK) return scaler_failure(r, st);
    amp_scaler_get_stats(r->scaler, &after);
    st = c->scaler == AMP_SCALER_STATIC ? amp_scaler_update_to(r->scaler, c->static_scale) : amp_scaler_update(r->scaler);
    if (st != AMP_OK) return scaler_failure(r, st);
    r->skipped += after.steps_skipped - before.steps_skipped;
    return AMP_OK;
}

static int train_step(amp_train_run_state *r, double *step_loss) {
    const amp_train_config *c = &r->cfg;
    const bool scaling = c->scaler != AMP_SCALER_OFF;
    amp_zero_grad(r->ctx);
    const float scale = amp_scaler_scale(r->scaler); /* 1 when off */
    /* The effective batch's loss is the mean over accum micro-batches and, data parallel, over the
     * ranks' equal shares: each backward carries 1 / (accum * ranks) of it. */
    const float seed = scale / (float)(c->accum * r->ranks);
    double sum = 0;
    const bool sampled = amp_train_grad_stats_due(r, r->step + 1);
    for (int64_t a = 0; a < c->accum; a++) {
        amp_ctx_reset(r->ctx);
        int st = fill_train_batch(r, r->step * c->accum + a);
        if (st != AMP_OK) return amp_train_fail(r, st, "cannot build batch %lld", (long long)(r->step * c->accum + a));
        amp_tensor *loss = forward_loss(r, r->local_batch, NULL);
        if (!loss) return ctx_failure(r, "forward");
        if ((st = amp_train_fp8_pass(r, AMP_FP8_PASS_FORWARD)) != AMP_OK) return st;
        sum += amp_tensor_get(loss, 0);
        if (c->detect_anomaly && (st = amp_train_check_forward(r)) != AMP_OK) return st;
        const bool last = a == c->accum - 1;
        if (last && !r->zero) amp_train_dist_arm(r); /* sums start as the last backward completes them */
        if (last && sampled) amp_train_act_stats_arm(r, scaling ? scale : 1.0f);
        const int bst = amp_backward_scaled(r->ctx, loss, seed);
        if (last && sampled && (st = amp_train_act_stats_done(r)) != AMP_OK) return st;
        if (last && (st = r->zero ? amp_train_zero_reduce(r, sampled) : amp_train_dist_finish(r)) != AMP_OK) return st;
        if (bst != AMP_OK) return ctx_failure(r, "backward");
        if ((st = amp_train_fp8_pass(r, AMP_FP8_PASS_BACKWARD)) != AMP_OK) return st;
        if (c->detect_anomaly && !scaling && (st = amp_train_check_backward(r)) != AMP_OK) return st;
    }
    double loss_sum = sum / (double)c->accum;
    int st = amp_train_dist_sum(r, &loss_sum, 1);
    if (st != AMP_OK) return st;
    *step_loss = loss_sum / (double)r->ranks;
    if (sampled) {
        st = amp_train_grad_stats_sample(r, r->step + 1, scaling ? scale : 1.0f);
        if (st != AMP_OK) return st;
    }
    /* The drill goes in after the sum, so with several ranks only the injecting rank sees it and the
     * flag all-reduce below must carry it to the others. */
    if (amp_train_inject_nonfinite(r, r->step + 1)) r->injected++;
    if (!r->prec->master_weights) reload_masters(r);
    const bool update_stats =
        sampled && !r->prec->master_weights && r->prec->param_dtype != AMP_F32 && r->gs_buf && !r->zero;
    if (update_stats && (st = amp_train_update_stats_begin(r)) != AMP_OK) return st;
    if (c->lr_schedule != AMP_LR_CONSTANT || c->warmup_steps > 0) {
        const amp_lr_schedule sched = {.kind = c->lr_schedule, .base_lr = c->optim.lr, .warmup_steps = c->warmup_steps,
                                       .total_steps = r->total_steps - c->warmup_steps, .min_lr = 0.0f};
        amp_optimizer_set_lr(r->opt, amp_lr_at(&sched, r->step));
    }
    if (r->zero) {
        if ((st = amp_train_zero_update(r)) != AMP_OK) return st;
    } else if (scaling) {
        if ((st = scaled_update(r)) != AMP_OK) return st;
    } else {
        if (c->clip > 0) amp_optimizer_clip_grad_norm(r->opt, c->clip);
        amp_optimizer_step(r->opt);
    }
    if (update_stats) amp_train_update_stats_end(r);
    if ((st = amp_train_fp8_step(r)) != AMP_OK) return st;
    if (c->comm && c->check_replicas_every > 0 && (r->step + 1) % c->check_replicas_every == 0)
        return amp_train_dist_check_replicas(r);
    return AMP_OK;
}

/* ---- the run ------------------------------------------------------------------------------------ */

/* The result's memory fields (amp_train_result). */
static void memory_result(const amp_train_run_state *r, amp_train_result *result) {
    result->arena_peak_bytes = amp_ctx_arena_peak(r->ctx);
    result->scratch_peak_bytes = amp_ctx_scratch_peak(r->ctx);
    amp_ctx_param_memory(r->ctx, &result->param_bytes);
    result->cast_copy_bytes = amp_ctx_cast_copy_bytes(r->ctx);
    struct rusage ru;
    result->peak_rss_bytes = getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : -1; /* Linux: KiB */
}

int amp_train_run(const amp_train_config *cfg, const amp_train_callbacks *cb, amp_train_result *result, char *err,
                  size_t err_size) {
    const double t_start = now_seconds();
    if (err && err_size) err[0] = '\0';
    if (!cfg || !result) {
        if (err && err_size) snprintf(err, err_size, "amp_train_run: NULL argument");
        return AMP_ERR_NULL_POINTER;
    }
    amp_train_run_state r;
    memset(&r, 0, sizeof r);
    r.cfg = *cfg;
    r.err = err;
    r.err_size = err_size;
    r.prec = amp_precision_get_info(cfg->precision);
    r.text = amp_model_is_text(cfg->model.kind); /* false for an invalid kind, which check_config refuses */
    memset(result, 0, sizeof *result);
    result->test_loss = result->test_accuracy = result->bits_per_char = result->train_loss = NAN;
    result->grad_underflow_fp16_unscaled = result->grad_underflow_fp16_scaled = result->grad_overflow_fp16_scaled = NAN;
    result->stalled_updates = NAN;
    result->act_underflow_fp16_unscaled = NAN;

    int st = check_config(&r);
    if (st == AMP_OK) st = setup(&r);
    if (st != AMP_OK) {
        teardown(&r);
        return st;
    }
    const amp_train_config *c = &r.cfg;
    const int64_t steps_per_epoch = r.steps_per_epoch;
    const int64_t total = c->steps > 0 ? c->steps : c->epochs * steps_per_epoch;
    r.total_steps = total;
    const int64_t epochs = (total + steps_per_epoch - 1) / steps_per_epoch;
    const double samples_per_step = (double)(c->batch * c->accum);

    result->model = c->model.kind;
    result->precision = c->precision;
    result->scaler = c->scaler;
    result->static_scale = c->static_scale;
    result->num_params = amp_model_num_params(r.model);
    size_t state_bytes = 0;
    amp_optimizer_state_memory(r.opt, &state_bytes);
    result->optimizer_state_bytes = (int64_t)state_bytes;
    result->batch = c->batch;
    result->accum = c->accum;
    result->start_step = r.start_step;
    if (r.start_step >= total) {
        st = amp_train_fail(&r, AMP_ERR_INVALID_ARGUMENT, "cannot resume from %s: it is at step %lld, this run has %lld steps",
                            c->resume, (long long)r.start_step, (long long)total);
    }

    double train_time = 0;
    int64_t last_saved = -1;
    amp_train_progress p = {.epochs = epochs, .total_steps = total};
    for (; r.step < total && st == AMP_OK; r.step++) {
        const double t0 = now_seconds();
        double loss = NAN;
        st = train_step(&r, &loss);
        train_time += now_seconds() - t0;
        if (st != AMP_OK) break;
        r.loss_ema = isnan(r.loss_ema) ? loss : (1 - LOSS_EMA_WEIGHT) * r.loss_ema + LOSS_EMA_WEIGHT * loss;
        r.window_sum += loss;
        r.window_n++;
        const int64_t done = r.step + 1, here = done - r.start_step;
        p.is_eval = false;
        p.epoch = (done + steps_per_epoch - 1) / steps_per_epoch;
        p.step = done;
        p.loss = r.loss_ema;
        p.last_loss = loss;
        p.scale = amp_scaler_get_scale(r.scaler);
        p.skipped = r.skipped;
        p.samples_per_sec = train_time > 0 ? samples_per_step * (double)here / train_time : 0;
        p.eta_seconds = train_time / (double)here * (double)(total - done);
        p.test_loss = p.test_accuracy = p.bits_per_char = NAN;
        p.grad_stats = r.gs_last.step == done ? &r.gs_last : NULL;
        p.data_note = done == r.start_step + 1 && r.data_note[0] ? r.data_note : NULL;
        p.fp8_layers = amp_train_fp8_progress(&r);
        p.fp8 = p.fp8_layers ? r.fp8_stats : NULL;
        if (cb && cb->progress) cb->progress(&p, cb->user);
        p.grad_stats = NULL;
        p.data_note = NULL;
        p.fp8_layers = 0, p.fp8 = NULL;

        const bool epoch_end = done % steps_per_epoch == 0 || done == total;
        if (epoch_end) {
            result->train_loss = r.window_sum / (double)r.window_n;
            if (done != total) r.window_sum = 0, r.window_n = 0;
        }
        if (epoch_end && c->eval) {
            double test_loss, acc, bpc;
            st = evaluate(&r, &test_loss, &acc, &bpc);
            if (st != AMP_OK) break;
            result->test_loss = test_loss;
            result->test_accuracy = acc;
            result->bits_per_char = bpc;
            p.is_eval = true;
            p.test_loss = test_loss;
            p.test_accuracy = acc;
            p.bits_per_char = result->bits_per_char;
            char *sample = NULL;
            if (cb && cb->progress && (st = amp_train_sample(&r, &sample, &p.sample_bytes)) != AMP_OK) break;
            p.sample_text = sample;
            if (cb && cb->progress) cb->progress(&p, cb->user);
            amp_free(sample);
            p.sample_text = NULL, p.sample_bytes = 0;
        }
        if (c->checkpoint && (r.rank == 0 || r.zero) && c->checkpoint_every > 0 && done % c->checkpoint_every == 0 &&
            done != total) {
            r.step = done; /* the state after `done` steps */
            st = r.zero ? amp_train_zero_checkpoint(&r) : amp_train_save_checkpoint(&r);
            r.step = done - 1;
            last_saved = done;
        }
    }
    if (st == AMP_OK && c->checkpoint && (r.rank == 0 || r.zero) && last_saved != r.step)
        st = r.zero ? amp_train_zero_checkpoint(&r) : amp_train_save_checkpoint(&r); /* zero: every rank gathers */
    if (st == AMP_OK && r.rank == 0) st = amp_train_llmc_save(&r);
    result->steps = r.step;
    result->epochs = (r.step + steps_per_epoch - 1) / steps_per_epoch;
    result->skipped_steps = r.skipped;
    result->ranks = r.ranks;
    result->grad_wire_bytes = r.wire_bytes;
    double injected = (double)r.injected; /* over every rank (a collective: only when all got here) */
    if (st == AMP_OK && amp_train_dist_sum(&r, &injected, 1) != AMP_OK) injected = (double)r.injected;
    result->injected_steps = (int64_t)injected;
    result->token_cache = r.token_cache;
    result->final_scale = amp_scaler_get_scale(r.scaler);
    result->samples_per_sec = train_time > 0 ? samples_per_step * (double)(r.step - r.start_step) / train_time : 0;
    result->grad_stats_samples = r.gs_samples;
    result->grad_stats = r.gs_last;
    const double ns = r.gs_samples > 0 ? (double)r.gs_samples : NAN;
    result->grad_underflow_fp16_unscaled = r.gs_sum.underflow_fp16_unscaled / ns;
    result->grad_underflow_fp16_scaled = r.gs_sum.underflow_fp16_scaled / ns;
    result->grad_overflow_fp16_scaled = r.gs_sum.overflow_fp16_scaled / ns;
    result->act_underflow_fp16_unscaled = r.act_sum / ns;
    result->stalled_updates = r.us_samples > 0 ? r.us_sum / (double)r.us_samples : NAN;
    memory_result(&r, result);
    amp_train_fp8_report(&r, result);
    teardown(&r);
    result->wall_seconds = now_seconds() - t_start;
    return st;
}
