/* The memory a training run needs, estimated from its shapes before anything large is allocated, and
 * the check amp_train_run makes with it (amp/train.h, skip_memory_check). */
#include "memory_check.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the estimate ------------------------------------------------------------------------------- */

/* What the arena of one step holds per unit of a shape, in bytes, for the transformers (gpt, gpt2).
 * The units: a token-channel (batch x context x width), an attention score (batch x heads x context
 * x context, per layer), a token-logit (batch x context x the head's rows). The figures are the
 * arena's measured growth per unit (amp_ctx_arena_peak over runs that vary one size at a time), so
 * they count what forward keeps and what backward adds; tests/test_memory_check.c holds the estimate
 * to the measured peaks. */
typedef struct act_rates {
    double per_layer;    /* each block's kept activations and their gradients, per token-channel */
    double per_score;    /* each block's attention probabilities */
    double trunk;        /* embeddings, the final norm, the head's input and their gradients */
    double head;         /* the logits, the loss's probabilities and their gradient, per token-logit */
    double kept;         /* with recompute: each block's input, per token-channel */
    double cast;         /* autocast's 16-bit weight copies, per parameter */
    double tied;         /* gpt2: the tied token embedding's gradient from the head, per element */
    double scratch_ch;   /* the ops' fp32 staging, per token x 4 x width (the MLP's widest product) */
    double scratch_head; /* the same per token-logit */
    double scratch_emb;  /* the same per element of the token embedding (its gradient's staging) */
} act_rates;

/* fp32 parameters without autocast; fp32 parameters under 16-bit autocast; 16-bit parameters */
static const act_rates RATES_FP32 = {76, 4, 14, 8, 4, 0, 4, 4, 2, 4};
static const act_rates RATES_AUTOCAST = {44, 2.5, 14, 4, 3, 2, 6, 8.5, 4, 4};
static const act_rates RATES_PARAM16 = {57, 1, 12, 4, 2, 0, 2, 8.5, 4, 8};

static const act_rates *rates_of(const amp_precision_info *prec) {
    if (prec->param_dtype != AMP_F32) return &RATES_PARAM16;
    return prec->autocast_dtype == AMP_F32 ? &RATES_FP32 : &RATES_AUTOCAST;
}

static double max2(double a, double b) { return a > b ? a : b; }

/* gpt, gpt2: the arena's activations (casts apart) and the scratch. */
static void transformer_bytes(const amp_model_config *m, int64_t batch, const act_rates *k, double *act, double *scratch) {
    const double B = (double)batch, T = (double)m->context, C = (double)m->hidden, L = (double)m->layers;
    const double NH = (double)m->heads, BT = B * T;
    const bool gpt2 = m->kind == AMP_MODEL_GPT2;
    const double V = gpt2 ? (double)amp_model_padded_vocab(m) : (double)m->vocab;
    const double scores = B * NH * T * T;
    const double head = BT * V * k->head + (gpt2 ? V * C * k->tied : 0);
    if (m->recompute) /* every block's input, and one block's activations while it is recomputed */
        *act = BT * C * (L * k->kept + k->per_layer + k->trunk) + scores * k->per_score + head;
    else
        *act = BT * C * (L * k->per_layer + k->trunk) + L * scores * k->per_score + head;
    /* gpt's head has its own weight; gpt2's 16-bit tied embedding stages its two gradients */
    const double emb_stage = V * C * (gpt2 ? k->scratch_emb : 4);
    *scratch = max2(max2(BT * 4 * C * k->scratch_ch, BT * V * k->scratch_head), emb_stage);
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

void amp_train_memory_estimate(const amp_model_config *m, int64_t num_params, const amp_precision_info *prec,
                               const amp_optim_config *optim, int64_t batch, int ranks, int zero_stage,
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
    const act_rates *k = rates_of(prec);
    double act = 0, scratch = 0;
    switch (m->kind) {
    case AMP_MODEL_GPT:
    case AMP_MODEL_GPT2:
        transformer_bytes(m, batch, k, &act, &scratch);
        out->casts = (int64_t)(k->cast * n);
        break;
    case AMP_MODEL_MLP: mlp_bytes(m, batch, prec, n, &act, &scratch); break;
    case AMP_MODEL_CNN: cnn_bytes(m, batch, prec, n, &act, &scratch); break;
    case AMP_MODEL_LSTM: lstm_bytes(m, batch, prec, n, &act, &scratch); break;
    default: break;
    }
    out->activations = (int64_t)act;
    out->scratch = (int64_t)scratch;
    out->total = out->params + out->grads + out->optimizer + out->casts + out->activations + out->scratch;
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
    amp_train_memory_estimate(&c->model, amp_model_num_params(r->model), r->prec, &c->optim, batch, ranks,
                              c->zero_stage, &need);
    if (need.total <= avail) return AMP_OK;
    char what[128], total[32], state[32], acts[32], have[32], fix[256];
    describe(r, batch, what, sizeof what);
    remedies(r, &need, fix, sizeof fix);
    return amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY,
                          "%s needs about %s (parameters, gradients and optimizer state %s, activations %s); %s is "
                          "available; %s (AMP_MEMORY_CHECK=0 trains anyway)",
                          what, human(need.total, total, sizeof total),
                          human(need.params + need.grads + need.optimizer + need.casts, state, sizeof state),
                          human(need.activations + need.scratch, acts, sizeof acts), human(avail, have, sizeof have),
                          fix);
}
