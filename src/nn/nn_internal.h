/* Internal: what a model file (src/nn/<name>.c) defines, its description nn_model, and what the
 * model files share (src/nn/model.c implements it). */
#ifndef AMP_NN_INTERNAL_H
#define AMP_NN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "amp/nn.h"
#include "amp/ops.h"
#include "amp/status.h"

/* How amp_model_init fills a parameter. */
typedef enum nn_init_kind { NN_INIT_UNIFORM, NN_INIT_NORMAL, NN_INIT_CONST } nn_init_kind;

typedef struct nn_init {
    nn_init_kind kind;
    float a; /* uniform: bound (U(-a, a)); normal: standard deviation; const: the value */
} nn_init;

typedef struct nn_param_entry {
    amp_tensor *tensor;
    const char *name; /* the context's copy (the tensor's name) */
    nn_init init;
} nn_param_entry;

struct amp_model {
    amp_model_config cfg;
    amp_ctx *ctx;
    nn_param_entry *params; /* declaration (state_dict) order */
    size_t n_params, cap_params;
    const struct nn_model *def; /* the kind's row of the model table */
    int32_t *positions;         /* gpt: 0 .. context-1, the position embedding's ids */
};

/* Declares parameter `name` (printf-style) with the model's param dtype; NULL on error (recorded). */
amp_tensor *nn_param(amp_model *m, nn_init init, int ndim, const int64_t *shape, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
/* The i-th declared parameter (models read theirs by the fixed order they declared them in). */
static inline amp_tensor *nn_p(const amp_model *m, size_t i) { return i < m->n_params ? m->params[i].tensor : NULL; }

/* PyTorch's nn.Linear / nn.Conv2d default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)). */
nn_init nn_fan_in_uniform(int64_t fan_in);

/* Records an invalid-argument error "model: message" in ctx; returns NULL. */
amp_tensor *nn_fail(amp_ctx *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* A cap on every size keeps products of a few of them far from int64 overflow. */
#define NN_SIZE_CAP ((int64_t)1 << 24)

/* Checks one condition of a model's configuration inside a validate function: when it fails,
 * records "model: <message>" in ctx and returns AMP_ERR_INVALID_ARGUMENT. */
#define NN_NEED(ctx, cond, ...)                                                                      \
    do {                                                                                             \
        if (!(cond)) {                                                                               \
            nn_fail((ctx), __VA_ARGS__);                                                             \
            return AMP_ERR_INVALID_ARGUMENT;                                                         \
        }                                                                                            \
    } while (0)

/* What a model does with its input; amp_model_forward checks the input by it. */
typedef enum nn_task {
    NN_IMAGE_CLASSIFIER, /* x [batch, C, H, W] -> logits [batch, classes] */
    NN_CHAR_LM,          /* tokens [batch, context] ids in [0, vocab) -> logits [batch*context, vocab] */
} nn_task;

/* One built-in model: its row of the model table. src/nn/<name>.c defines it as nn_model_<name>,
 * next to the functions it points to; model.c finds it by amp_model_kind (AMP_MODEL_LIST). */
typedef struct nn_model {
    const char *name; /* amp_model_kind_name, `amp train --model`; the list's name */
    nn_task task;
    /* The default sizes where this model's differ from amp_model_default_config's shared ones.
     * NULL: none differ. */
    void (*defaults)(amp_model_config *c);
    /* Checks the sizes only this model reads (model.c has checked the dtype, hidden and the task's
     * sizes), with NN_NEED. NULL: none. */
    int (*validate)(amp_ctx *ctx, const amp_model_config *c);
    /* Declares the parameters in state_dict order with nn_param (cfg validated). AMP_OK or an error. */
    int (*declare)(amp_model *m);
    /* The forward pass on checked inputs: x for an image classifier, tokens for a character LM. */
    amp_tensor *(*forward)(amp_model *m, amp_ctx *ctx, amp_tensor *x, const int32_t *tokens, int64_t batch);
    /* amp_model_flops_per_sample (amp/nn.h) of this configuration. */
    double (*flops)(const amp_model_config *c);
    /* amp_model_flops_computed_per_sample, where amp computes other FLOPs than `flops` counts.
     * NULL: the same. */
    double (*flops_computed)(const amp_model_config *c, int64_t batch);
} nn_model;

/* Every model file's description, by the list's names: nn_model_mlp, nn_model_cnn, ... */
#define NN_MODEL_EXTERN_(kind, name) extern const nn_model nn_model_##name;
AMP_MODEL_LIST(NN_MODEL_EXTERN_)
#undef NN_MODEL_EXTERN_

#endif
