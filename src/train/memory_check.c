/* The memory a training run needs, estimated from its shapes before anything large is allocated, and
 * the check amp_train_run makes with it (amp/train.h, skip_memory_check). */
#include "memory_check.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the estimate ------------------------------------------------------------------------------- */

/* ---- gpt, gpt2 ----
 * What a step holds, from what the ops keep (src/nn/layers_seq.c's block over src/ops), in bytes per
 * token-channel (one of batch x context x width) unless said otherwise.
 *
 * Each block keeps for backward, in fp32: ln_1's output (4), c_attn's q, k, v (12), attention's
 * output (4; attention keeps no probabilities: backward recomputes them in a T x T scratch per
 * thread, src/ops/attention.c), c_proj's output with the residual added (4), ln_2's output (4), c_fc's
 * GELU output and GELU's derivative (16 + 16) and the second residual sum (4): 64, and per token the
 * two norms' mean and rstd (16 bytes). Under 16-bit autocast the linears' and the norms' outputs are
 * 16-bit and GELU is an op of its own keeping its input (2 + 6 + 2 + 2 + 8 + 8), the residual sums stay
 * fp32 (4 + 4): 36. With 16-bit parameters the residual stream is 16-bit, each sum is an add after its
 * projection (2 + 2 twice) and the norms (fp32 under autocast) keep fp32 copies of their 16-bit inputs:
 * 44, measured. With recompute a block keeps only its input (the stream: 4 or 2) and one block's
 * activations exist at a time, while backward recomputes it.
 *
 * The trunk keeps the token embedding's output, its sum with the positions' and the final norm's
 * output; the head the logits (batch x context x vocabulary, in the compute dtype) and the loss's
 * per-token target and statistics (12 bytes per token). Backward adds, at its peak, either the head's
 * gradients (the logits', the final norm's output's and, for gpt2, that of the tied head's rows of
 * wte in the parameters' dtype; under autocast none: the head's GEMM adds it, rounded to 16 bits, into
 * wte's fp32 gradient) or one block's gradients alive at once (the reuse pool of src/tensor/autograd.c
 * gives a dropped gradient's memory to the next; measured), whichever is larger. The embeddings' and
 * the head's gradients reach wte's a block of rows at a time (src/ops/grad_range.h): no full fp32
 * copy. Autocast's 16-bit copies of the weights the linears read (gpt2's head: of wte) stay in the
 * arena for the step (with recompute: the head's and one block's, made again in each region), or,
 * with the parameters' cast copies (amp_train_cast_copies_on), are those copies.
 *
 * The scratch (the ops' temporary fp32 memory, reused from op to op) peaks at the largest of: what a
 * block's ops stage per token-channel (a 16-bit linear's fp32 product, GELU's gradient; measured),
 * under 16-bit compute the head's fp32 product (vocabulary per token), its weight gradient's
 * (vocabulary x width) and c_fc's product alone in forward (16), and attention's (per thread two fp32
 * T x T blocks and one in the compute dtype, one batch element's fp32 q, k, v gradient).
 *
 * The process's peak RSS holds besides what the first step grew through (first_step): the scratch's
 * blocks for its smaller needs, and with recompute up to a block's activations in the arena. The
 * estimate against measured GPT-2 124M peaks (the process's own few tens of MiB left out):
 * docs/design.md, "The up-front check".
 */
typedef struct tf_rates {
    double block;       /* each block's kept activations */
    double stream;      /* the residual stream (with recompute, each block's input) */
    double trunk;       /* the embeddings' outputs, their sum, the final norm's output */
    double act;         /* bytes of a linear's output element: the logits and their gradient */
    double grad_block;  /* a block's gradients alive at once in backward (measured) */
    double grad_region; /* the same for a recomputed block (measured) */
    double cast;        /* autocast's copies, per cast weight element */
    double tied;        /* gpt2: the head's weight gradient, per element of vocabulary x width (under
                           autocast made only where a hook reads the gradients, the statistics steps: the
                           head's GEMM adds it into wte's otherwise, tensor/autograd.c's master_of) */
    double tied_view;   /* gpt2 under autocast, those steps: the 16-bit gradient of wte's cast (padded
                           rows), made once the logits' gradient is dropped (in its memory where that is
                           larger) */
    double scratch;     /* the ops' fp32 staging per token-channel (measured) */
} tf_rates;

/* fp32 parameters without autocast; fp32 parameters under 16-bit autocast; 16-bit parameters */
static const tf_rates TF_FP32 = {64, 4, 12, 4, 44, 28, 0, 4, 0, 16};
static const tf_rates TF_AUTOCAST = {36, 4, 10, 2, 34, 26, 2, 2, 2, 32};
static const tf_rates TF_PARAM16 = {44, 2, 10, 2, 38, 22, 0, 2, 0, 32};

static const tf_rates *tf_rates_of(const amp_precision_info *prec) {
    if (prec->param_dtype != AMP_F32) return &TF_PARAM16;
    return prec->autocast_dtype == AMP_F32 ? &TF_FP32 : &TF_AUTOCAST;
}

static double max2(double a, double b) { return a > b ? a : b; }

/* gpt, gpt2: autocast's copies, the arena's other peak, the scratch's, and what the first step leaves
 * resident beside them. */
static void transformer_bytes(const amp_model_config *m, int64_t batch, int threads, const amp_precision_info *prec,
                              double *casts, double *act, double *scratch, double *first_step) {
    const tf_rates *k = tf_rates_of(prec);
    const double B = (double)batch, T = (double)m->context, C = (double)m->hidden, L = (double)m->layers;
    const double BT = B * T, V = (double)m->vocab; /* gpt2's head reads the vocabulary's rows of wte */
    const bool gpt2 = m->kind == AMP_MODEL_GPT2;
    const double block = BT * (C * k->block + 16);
    const double kept = m->recompute ? L * BT * C * k->stream + block : L * block;
    const double trunk = BT * (C * k->trunk + 8 + 12);
    const double Vp = 128 * ((double)((m->vocab + 127) / 128)); /* wte's padded rows (src/nn/gpt2.c) */
    const double logits_grad = BT * V * k->act, view = Vp * C * k->tied_view;
    const double tied = gpt2 ? V * C * k->tied + (view > logits_grad ? view : 0) : 0;
    const double head_grads = logits_grad + BT * C * k->act + tied;
    const double block_grads = BT * C * (m->recompute ? k->grad_region : k->grad_block);
    *act = kept + trunk + BT * V * k->act + max2(head_grads, block_grads);
    const double block_weights = 12 * C * C + 9 * C, head_weight = V * C;
    *casts = k->cast * ((m->recompute ? 1 : L) * block_weights + head_weight);
    /* the scratch's needs: the largest is its peak; in the first step it grew through blocks for the
     * others, resident too (later steps have one block of their sum, src/tensor/arena.c). With
     * recompute the arena's first step too leaves up to a block's activations resident past its peak:
     * the tail of an arena block that released regions used, skipped by an allocation too large for it. */
    const bool narrow = prec->autocast_dtype != AMP_F32 || prec->param_dtype != AMP_F32;
    const double th = threads > 1 ? (double)threads : 1;
    double need[5] = {BT * C * k->scratch, th * T * T * (narrow ? 10 : 8) + T * 3 * C * 4, 0, 0, 0};
    if (narrow) /* the head's fp32 product, its weight gradient's, c_fc's product (forward, alone) */
        need[2] = 4 * BT * V, need[3] = 4 * V * C, need[4] = 16 * BT * C;
    double largest = 0, sum = 0;
    for (int i = 0; i < 5; i++) largest = max2(largest, need[i]), sum += need[i];
    *scratch = largest;
    *first_step = sum - largest + (m->recompute ? block : 0);
}

/* The image and recurrent models: measured the same way, per sample (or token) and per parameter.
 * Under 16-bit autocast or parameters, the arena holds half the bytes per sample and about 4 bytes per
 * parameter more (the weights' 16-bit copies and the staging of their gradients). */
static bool half_of(const amp_precision_info *prec) {
    return prec->autocast_dtype != AMP_F32 || prec->param_dtype != AMP_F32;
}

/* mlp: the input and two hidden layers per sample (each layer's output, its ReLU, their gradients). */
static void mlp_bytes(const amp_model_config *m, int64_t batch, const amp_precision_info *prec, double n_params,
                      double *act, double *scratch) {
    const double in = (double)(m->in_channels * m->image_rows * m->image_cols), H = (double)m->hidden;
    const double B = (double)batch;
    if (half_of(prec)) *act = B * (4.2 * in + 8 * H) + 3.5 * n_params, *scratch = 2.3 * n_params;
    else *act = B * (4.2 * in + 16 * H), *scratch = 4 * B * H;
}

/* cnn: two convolutions (their outputs, ReLUs and pools, their gradients), the hidden linear layer. */
static void cnn_bytes(const amp_model_config *m, int64_t batch, const amp_precision_info *prec, double n_params,
                      double *act, double *scratch) {
    const double B = (double)batch, R = (double)m->image_rows, Cc = (double)m->image_cols;
    const double maps = R * Cc * (double)m->conv1_channels + R / 2 * Cc / 2 * (double)m->conv2_channels;
    const double per_sample = 4 * (3.1 * maps + 2 * (double)m->hidden);
    if (half_of(prec)) *act = B * per_sample / 2 + 4 * n_params, *scratch = 4 * n_params + B * 14e3 * maps / 37632;
    else *act = B * per_sample, *scratch = 3.75e6 + B * 17.5e3 * maps / 37632; /* 37632: the MNIST maps */
}

/* lstm: per token, the four gates, the cell and hidden states and their gradients, the embedding; the
 * scratch stages the gates per token and the weights' gradients. */
static void lstm_bytes(const amp_model_config *m, int64_t batch, const amp_precision_info *prec, double n_params,
                       double *act, double *scratch) {
    const double BT = (double)batch * (double)m->context, H = (double)m->hidden, E = (double)m->embed;
    const double weights = 4 * H * (H + E);
    if (half_of(prec)) *act = BT * (16 * H + 2 * E) + 4 * n_params, *scratch = BT * 13.5 * H + 6 * n_params;
    else *act = BT * (32 * H + 4 * E), *scratch = BT * 20.5 * H + 8 * weights;
}

bool amp_train_cast_copies_on(const amp_precision_info *prec, int zero_stage) {
    return prec->autocast_dtype != AMP_F32 && prec->param_dtype == AMP_F32 && !prec->fp8 && zero_stage == 0;
}

void amp_train_memory_estimate(const amp_model_config *m, int64_t num_params, const amp_precision_info *prec,
                               const amp_optim_config *optim, int64_t batch, int threads, int ranks, int zero_stage,
                               amp_train_memory_need *out) {
    memset(out, 0, sizeof *out);
    if (!m || !prec || !optim || num_params < 0 || batch < 1) return;
    const double n = (double)num_params;
    const double param_size = (double)amp_dtype_size(prec->param_dtype);
    out->params = (int64_t)(n * param_size);
    out->grads = out->params;
    int moments = 0;
    if (optim->kind == AMP_OPTIM_SGD) moments = optim->momentum != 0.0f;
    else moments = 2;
    const bool masters = prec->param_dtype != AMP_F32 && prec->master_weights;
    double state = n * 4.0 * (moments + (masters ? 1 : 0));
    if (zero_stage == 1 && ranks > 1) state /= ranks;
    out->optimizer = (int64_t)state;
    double casts = 0, act = 0, scratch = 0, first_step = 0;
    switch (m->kind) {
    case AMP_MODEL_GPT:
    case AMP_MODEL_GPT2: transformer_bytes(m, batch, threads, prec, &casts, &act, &scratch, &first_step); break;
    case AMP_MODEL_MLP: mlp_bytes(m, batch, prec, n, &act, &scratch); break;
    case AMP_MODEL_CNN: cnn_bytes(m, batch, prec, n, &act, &scratch); break;
    case AMP_MODEL_LSTM: lstm_bytes(m, batch, prec, n, &act, &scratch); break;
    default: break;
    }
    /* Cast copies: 2 bytes per parameter, kept; the arena then holds no casts (the image and recurrent
     * models' fitted arena figures include 2 bytes per parameter of them, moved to the copies) */
    if (amp_train_cast_copies_on(prec, zero_stage) && n > 0) {
        out->cast_copies = (int64_t)(2 * n);
        if (m->kind == AMP_MODEL_GPT || m->kind == AMP_MODEL_GPT2) casts = 0;
        else act -= 2 * n;
    }
    out->casts = (int64_t)casts;
    out->activations = (int64_t)act;
    out->scratch = (int64_t)scratch;
    out->first_step = (int64_t)first_step;
    out->total =
        out->params + out->grads + out->optimizer + out->casts + out->cast_copies + out->activations + out->scratch +
        out->first_step;
}

/* ---- the memory there is ------------------------------------------------------------------------ */

/* "123", "4G", "512M", ... -> bytes; -1 when malformed. */
static int64_t parse_bytes(const char *s) {
    char *end;
    errno = 0;
    const double v = strtod(s, &end);
    if (end == s || errno != 0 || !(v >= 0)) return -1;
    double scale = 1;
    if (*end) {
        const char *units = "KMGT";
        const char *u = strchr(units, *end == 'k' ? 'K' : *end);
        if (!u || !*u) return -1;
        for (const char *p = units; p <= u; p++) scale *= 1024;
        end++;
        if (*end == 'i') end++; /* "GiB" */
        if (*end == 'B') end++;
        if (*end) return -1;
    }
    return v * scale < 9.2e18 ? (int64_t)(v * scale) : -1;
}

/* The first number of file `path` after `key` (NULL: at its start); -1 when absent or "max". */
static int64_t read_number(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    int64_t v = -1;
    while (fgets(line, sizeof line, f)) {
        const char *p = line;
        if (key) {
            if (strncmp(line, key, strlen(key)) != 0) continue;
            p += strlen(key);
        }
        char *end;
        const long long n = strtoll(p, &end, 10);
        if (end != p) v = n;
        break;
    }
    fclose(f);
    return v;
}

int64_t amp_train_memory_available(void) {
    const char *env = getenv("AMP_MEMORY_AVAILABLE");
    if (env && *env) return parse_bytes(env);
    int64_t avail = read_number("/proc/meminfo", "MemAvailable:");
    if (avail >= 0) avail *= 1024; /* kB */
    const int64_t max = read_number("/sys/fs/cgroup/memory.max", NULL);
    const int64_t cur = read_number("/sys/fs/cgroup/memory.current", NULL);
    if (max >= 0) {
        const int64_t left = cur >= 0 && cur < max ? max - cur : (cur >= 0 ? 0 : max);
        if (avail < 0 || left < avail) avail = left;
    }
    return avail;
}

/* ---- the check ---------------------------------------------------------------------------------- */

static const char *human(int64_t bytes, char *buf, size_t size) {
    const double b = (double)bytes;
    if (b >= 1024.0 * 1024 * 1024) snprintf(buf, size, "%.1f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024) snprintf(buf, size, "%.0f MiB", b / (1024.0 * 1024));
    else snprintf(buf, size, "%.0f KiB", b / 1024.0);
    return buf;
}

/* "gpt2 1558m at batch 64 x context 1024", "mlp at batch 128", ... */
static void describe(const amp_train_run_state *r, int64_t batch, char *buf, size_t size) {
    const amp_model_config *m = &r->cfg.model;
    static const struct { const char *name; int64_t layers, heads, hidden; } sizes[] = {
        {"124m", 12, 12, 768}, {"350m", 24, 16, 1024}, {"774m", 36, 20, 1280}, {"1558m", 48, 25, 1600}};
    char shape[64] = "";
    if (m->kind == AMP_MODEL_GPT2 || m->kind == AMP_MODEL_GPT) {
        snprintf(shape, sizeof shape, " of %lld layers x %lld", (long long)m->layers, (long long)m->hidden);
        for (size_t i = 0; m->kind == AMP_MODEL_GPT2 && i < sizeof sizes / sizeof sizes[0]; i++)
            if (m->layers == sizes[i].layers && m->heads == sizes[i].heads && m->hidden == sizes[i].hidden)
                snprintf(shape, sizeof shape, " %s", sizes[i].name);
    }
    if (r->text)
        snprintf(buf, size, "%s%s at batch %lld x context %lld", amp_model_kind_name(m->kind), shape, (long long)batch,
                 (long long)m->context);
    else
        snprintf(buf, size, "%s at batch %lld", amp_model_kind_name(m->kind), (long long)batch);
}

/* The settings that lower the need, as `amp train` spells them. */
static void remedies(const amp_train_run_state *r, const amp_train_memory_need *need, char *buf, size_t size) {
    const amp_train_config *c = &r->cfg;
    const bool transformer = c->model.kind == AMP_MODEL_GPT || c->model.kind == AMP_MODEL_GPT2;
    size_t len = (size_t)snprintf(buf, size, "reduce --batch (--accum keeps the samples per step)%s",
                                  r->text ? " or --context" : "");
    const char *more[4];
    int n = 0;
    if (transformer && !c->model.recompute) more[n++] = "--recompute";
    if (c->precision == AMP_PRECISION_FP32) more[n++] = "--precision amp-bf16";
    if (c->precision == AMP_PRECISION_AMP_BF16 && r->prec->param_dtype == AMP_F32) more[n++] = "--param-dtype bf16";
    if (need->optimizer > 0) more[n++] = c->zero_stage == 1 ? "more ranks" : "--zero 1 with more ranks";
    for (int i = 0; i < n && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i == 0 ? ", or use " : ", ", more[i]);
}

int amp_train_memory_check(amp_train_run_state *r) {
    const amp_train_config *c = &r->cfg;
    const char *off = getenv("AMP_MEMORY_CHECK");
    if (c->skip_memory_check || (off && strcmp(off, "0") == 0)) return AMP_OK;
    const int64_t avail = amp_train_memory_available();
    if (avail < 0) return AMP_OK;
    const int ranks = c->comm && c->comm->size > 0 ? c->comm->size : 1;
    const int64_t batch = c->batch / ranks > 0 ? c->batch / ranks : 1;
    amp_train_memory_need need;
    amp_train_memory_estimate(&c->model, amp_model_num_params(r->model), r->prec, &c->optim, batch,
                              amp_get_num_threads(), ranks, c->zero_stage, &need);
    if (need.total <= avail) return AMP_OK;
    char what[128], total[32], state[32], acts[32], have[32], fix[256];
    describe(r, batch, what, sizeof what);
    remedies(r, &need, fix, sizeof fix);
    return amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY,
                          "%s needs about %s (parameters, gradients and optimizer state %s, activations %s); %s is "
                          "available; %s (AMP_MEMORY_CHECK=0 trains anyway)",
                          what, human(need.total, total, sizeof total),
                          human(need.params + need.grads + need.optimizer + need.casts + need.cast_copies, state,
                                sizeof state),
                          human(need.activations + need.scratch + need.first_step, acts, sizeof acts),
                          human(avail, have, sizeof have),
                          fix);
}
