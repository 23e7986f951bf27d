/* The model object: the model table, configuration and its checks, the parameters a model declared
 * (with the layers of amp/layers.h), initialization (one generator of amp/init.h, the model's init
 * rules), and the forward's input checks before the model's own forward. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../tensor/autograd.h"
#include "nn_internal.h"
#include "../core/alloc_internal.h"

/* The model table: every built-in model's row, by kind (AMP_MODEL_LIST, amp/nn.h). */
static const nn_model *const models[AMP_MODEL_COUNT] = {
#define NN_MODEL_ROW_(kind, name) [kind] = &nn_model_##name,
    AMP_MODEL_LIST(NN_MODEL_ROW_)
#undef NN_MODEL_ROW_
};

/* The row of `kind`; NULL outside the enum. */
static const nn_model *model_of(amp_model_kind kind) { return (unsigned)kind < AMP_MODEL_COUNT ? models[kind] : NULL; }

const char *amp_model_kind_name(amp_model_kind kind) {
    const nn_model *def = model_of(kind);
    return def ? def->name : "invalid";
}

int amp_model_kind_from_name(const char *name, amp_model_kind *out) {
    if (!name || !out) return AMP_ERR_INVALID_ARGUMENT;
    for (int k = 0; k < AMP_MODEL_COUNT; k++)
        if (!strcmp(name, models[k]->name)) {
            *out = (amp_model_kind)k;
            return AMP_OK;
        }
    return AMP_ERR_INVALID_ARGUMENT;
}

bool amp_model_is_text(amp_model_kind kind) {
    const nn_model *def = model_of(kind);
    return def && def->task == NN_CHAR_LM;
}

amp_model_config amp_model_default_config(amp_model_kind kind) {
    /* Every field has a value for every kind, so switching cfg.kind keeps a usable config; a model's
     * row sets the sizes where its own defaults differ. */
    amp_model_config c = {
        .kind = kind,
        .in_channels = 1, .image_rows = 28, .image_cols = 28, .classes = 10, /* MNIST's layout */
        .vocab = 256,                                                        /* one id per byte */
        .context = 64,
        .hidden = 1024,
        .conv1_channels = 32, .conv2_channels = 64, .kernel = 5,
        .embed = 64,
        .layers = 4, .heads = 4,
        .param_dtype = AMP_F32,
    };
    const nn_model *def = model_of(kind);
    if (def && def->defaults) def->defaults(&c);
    return c;
}

/* ---- errors ---- */

amp_tensor *nn_fail(amp_ctx *ctx, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ctx) amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT, "model: %s", msg);
    return NULL;
}

/* The checks every model shares (the dtype, hidden, the task's input sizes), then the model's own. */
static int validate(amp_ctx *ctx, const amp_model_config *c) {
    const int64_t cap = NN_SIZE_CAP;
    const nn_model *def = model_of(c->kind);
    NN_NEED(ctx, def != NULL, "unknown model kind %d", (int)c->kind);
    NN_NEED(ctx, c->param_dtype == AMP_F32 || c->param_dtype == AMP_F16 || c->param_dtype == AMP_BF16,
            "param_dtype must be f32, f16 or bf16");
    NN_NEED(ctx, c->hidden > 0 && c->hidden <= cap, "hidden size %lld out of range", (long long)c->hidden);
    switch (def->task) {
    case NN_IMAGE_CLASSIFIER:
        NN_NEED(ctx, c->in_channels > 0 && c->in_channels <= cap && c->image_rows > 0 && c->image_rows <= 65536 &&
                         c->image_cols > 0 && c->image_cols <= 65536 && c->classes > 0 && c->classes <= cap,
                "%s: image %lldx%lldx%lld, %lld classes out of range", def->name, (long long)c->in_channels,
                (long long)c->image_rows, (long long)c->image_cols, (long long)c->classes);
        break;
    case NN_CHAR_LM:
        NN_NEED(ctx, c->vocab > 0 && c->vocab <= INT32_MAX && c->vocab <= cap, "vocab %lld out of range",
                (long long)c->vocab);
        NN_NEED(ctx, c->context > 0 && c->context <= 65536, "context %lld out of range", (long long)c->context);
        break;
    }
    return def->validate ? def->validate(ctx, c) : AMP_OK;
}

/* ---- parameters ---- */

/* After the model's declare: the parameters it declared, ctx's from index `first` on, in order. */
static int collect_params(amp_model *m, size_t first) {
    const size_t n = amp_ctx_num_params(m->ctx) - first;
    m->params = amp_malloc((n ? n : 1) * sizeof *m->params);
    if (!m->params) return amp_ctx_fail(m->ctx, AMP_ERR_OUT_OF_MEMORY, "model: out of memory");
    for (size_t i = 0; i < n; i++) m->params[i] = amp_ctx_param(m->ctx, first + i);
    m->n_params = n;
    return AMP_OK;
}

void *nn_layers_alloc(amp_model *m, size_t bytes) {
    void *p = amp_calloc(1, bytes);
    if (!p) amp_ctx_fail(m->ctx, AMP_ERR_OUT_OF_MEMORY, "model: out of memory");
    return p;
}

_Thread_local amp_model *nn_declaring_model;

int nn_note_linear(amp_linear_layer *l) {
    amp_model *m = nn_declaring_model;
    if (!m) return AMP_OK;
    if (m->n_linears == m->cap_linears) {
        const size_t cap = m->cap_linears ? 2 * m->cap_linears : 16;
        amp_linear_layer **p = amp_malloc(cap * sizeof *p);
        if (!p) return amp_ctx_fail(m->ctx, AMP_ERR_OUT_OF_MEMORY, "model: out of memory");
        if (m->n_linears) memcpy(p, m->linears, m->n_linears * sizeof *p);
        amp_free(m->linears);
        m->linears = p, m->cap_linears = cap;
    }
    m->linears[m->n_linears++] = l;
    return AMP_OK;
}

size_t amp_model_num_linears(const amp_model *m) { return m ? m->n_linears : 0; }
amp_linear_layer *amp_model_linear(amp_model *m, size_t index) {
    return m && index < m->n_linears ? m->linears[index] : NULL;
}

static void model_free(amp_model *m) {
    amp_free(m->linears);
    amp_free(m->params);
    amp_free(m->layers);
    amp_free(m->positions);
    amp_free(m);
}

int amp_model_create(amp_ctx *ctx, const amp_model_config *cfg, amp_model **out) {
    if (out) *out = NULL;
    if (!ctx || !cfg || !out) return AMP_ERR_NULL_POINTER;
    int st = validate(ctx, cfg);
    if (st != AMP_OK) return st;
    amp_model *m = amp_calloc(1, sizeof *m);
    if (!m) return amp_ctx_fail(ctx, AMP_ERR_OUT_OF_MEMORY, "model: out of memory");
    m->cfg = *cfg;
    m->ctx = ctx;
    m->def = model_of(cfg->kind); /* validated */
    const size_t first = amp_ctx_num_params(ctx);
    nn_declaring_model = m;
    st = m->def->declare(m);
    nn_declaring_model = NULL;
    if (st == AMP_OK && amp_ctx_status(ctx) != AMP_OK) st = amp_ctx_status(ctx);
    if (st == AMP_OK) st = collect_params(m, first);
    if (st != AMP_OK) {
        /* Declared parameters stay in the context (it cannot undeclare), which owns their names. */
        model_free(m);
        return st;
    }
    *out = m;
    return AMP_OK;
}

void amp_model_free(amp_model *m) {
    if (m) model_free(m);
}

const amp_model_config *amp_model_get_config(const amp_model *m) { return m ? &m->cfg : NULL; }
size_t amp_model_num_tensors(const amp_model *m) { return m ? m->n_params : 0; }
amp_tensor *amp_model_tensor(const amp_model *m, size_t index) { return m ? nn_p(m, index) : NULL; }

int64_t amp_model_num_params(const amp_model *m) {
    int64_t n = 0;
    for (size_t i = 0; m && i < m->n_params; i++) n += amp_tensor_numel(m->params[i]);
    return n;
}

double amp_model_flops_per_sample(const amp_model *m) { return m ? m->def->flops(&m->cfg) : 0.0; }

double amp_model_flops_computed_per_sample(const amp_model *m, int64_t batch) {
    if (m && m->def->flops_computed) return m->def->flops_computed(&m->cfg, batch);
    return amp_model_flops_per_sample(m);
}

/* ---- initialization: one generator (amp/init.h), the parameters filled in declaration order ---- */

int amp_model_init(amp_model *m, uint64_t seed) {
    if (!m) return AMP_ERR_NULL_POINTER;
    for (size_t i = 0; i < m->n_params; i++) /* all checked before the first is written */
        if (!m->params[i]->data)
            return amp_ctx_fail(m->ctx, AMP_ERR_STATE, "amp_model_init: parameters not allocated yet: call "
                                "amp_ctx_alloc_params(ctx) after amp_model_create");
    amp_rng rng;
    amp_rng_seed(&rng, seed);
    return m->def->init(m, &rng);
}

/* ---- forward ---- */

amp_tensor *amp_model_forward(amp_model *m, amp_ctx *ctx, amp_tensor *x, const int32_t *tokens, int64_t batch,
                              bool training) {
    (void)training; /* none of the built-in models has dropout or batch-norm */
    if (!ctx) return NULL;
    if (!m) return nn_fail(ctx, "amp_model_forward: no model");
    if (amp_ctx_status(ctx) != AMP_OK) return NULL;
    if (batch <= 0 || batch > ((int64_t)1 << 30)) return nn_fail(ctx, "batch %lld out of range", (long long)batch);
    const amp_model_config *c = &m->cfg;
    const char *name = m->def->name;
    switch (m->def->task) {
    case NN_CHAR_LM:
        if (!tokens) return nn_fail(ctx, "%s: needs tokens", name);
        for (int64_t i = 0; i < batch * c->context; i++)
            if (tokens[i] < 0 || tokens[i] >= c->vocab)
                return nn_fail(ctx, "%s: token %d at %lld outside the vocabulary [0, %lld)", name, (int)tokens[i],
                               (long long)i, (long long)c->vocab);
        break;
    case NN_IMAGE_CLASSIFIER: {
        if (!x) return nn_fail(ctx, "%s: needs an input tensor", name);
        const int64_t per_sample = c->in_channels * c->image_rows * c->image_cols;
        if (x->ndim < 1 || x->shape[0] != batch || amp_tensor_numel(x) != batch * per_sample)
            return nn_fail(ctx, "%s: input must be [%lld, %lld, %lld, %lld]", name, (long long)batch,
                           (long long)c->in_channels, (long long)c->image_rows, (long long)c->image_cols);
        break;
    }
    }
    return m->def->forward(m, ctx, x, tokens, batch);
}
