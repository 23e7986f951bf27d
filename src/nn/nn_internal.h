/* Internal: what a model file (src/nn/<name>.c) defines, its description nn_model, and what the
 * model files and the layers share (src/nn/model.c and src/nn/layers.c implement it). */
#ifndef AMP_NN_INTERNAL_H
#define AMP_NN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "amp/init.h"
#include "amp/layers.h"
#include "amp/nn.h"
#include "amp/ops.h"
#include "amp/status.h"

struct amp_model {
    amp_model_config cfg;
    amp_ctx *ctx;
    amp_tensor **params; /* the parameters the model declared, in declaration (state_dict) order */
    size_t n_params;
    const struct nn_model *def; /* the kind's row of the model table */
    void *layers;               /* the model's layer structs (its declare allocates them, amp_free) */
    int32_t *positions;         /* gpt: 0 .. context-1, the position embedding's ids */
    amp_linear_layer **linears; /* the Linear layers its declare declared, in that order */
    size_t n_linears, cap_linears;
};

/* The model whose declare function is running on this thread (model.c sets it around the call), or
 * NULL: amp_linear_layer_declare notes each layer it declares in that model's list (nn_note_linear). */
extern _Thread_local amp_model *nn_declaring_model;
/* Appends l to nn_declaring_model's Linear layers (nothing without one); AMP_ERR_OUT_OF_MEMORY. */
int nn_note_linear(amp_linear_layer *l);

/* A model's layer structs: zeroed memory for m->layers (amp_model_free frees it); NULL with
 * AMP_ERR_OUT_OF_MEMORY recorded in m->ctx. */
void *nn_layers_alloc(amp_model *m, size_t bytes);
/* The i-th declared parameter. */
static inline amp_tensor *nn_p(const amp_model *m, size_t i) { return i < m->n_params ? m->params[i] : NULL; }

/* "<prefix>.<leaf>" (leaf alone for a NULL or empty prefix) into buf[AMP_LAYER_MAX_NAME]: AMP_OK, or
 * AMP_ERR_INVALID_ARGUMENT (recorded for fn) when it does not fit. */
int nn_layer_name(amp_ctx *ctx, const char *fn, char *buf, const char *prefix, const char *leaf);
/* The layers' shared declaration step: declares parameter "<prefix>.<leaf>" (just leaf when prefix is
 * NULL or ""), f32/f16/bf16, for the layer function fn. NULL on error, recorded in ctx. */
amp_tensor *nn_layer_param(amp_ctx *ctx, const char *fn, const char *prefix, const char *leaf, amp_dtype dtype,
                           int ndim, const int64_t *shape);
/* Records "fn: message" as an invalid-argument error in ctx; returns AMP_ERR_INVALID_ARGUMENT. */
int nn_layer_fail(amp_ctx *ctx, const char *fn, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* AMP_ERR_NULL_POINTER, recorded as "fn: no layer (NULL)", when layer is NULL; else AMP_OK. */
int nn_need_layer(amp_ctx *ctx, const void *layer, const char *fn);
/* The status a declare function returns after nn_layer_param gave NULL. */
int nn_declare_status(amp_ctx *ctx);

/* A layer norm whose only reader is a linear: under autocast with the linear lowered and the norm in
 * fp32 (the default policy) its fp32 result would only be cast to the autocast dtype, so
 * amp_layer_norm_to rounds it there directly (the same values and gradients, and the fp32 tensor is
 * never kept until backward); elsewhere amp_layer_norm. */
amp_tensor *nn_norm_for_linear(amp_ctx *ctx, const amp_layer_norm_layer *ln, amp_tensor *x);

/* The fp8 layer's forward (l->fp8 set): amp_linear_fp8, then act as its own op. */
amp_tensor *nn_linear_fp8_act(amp_ctx *ctx, const amp_linear_layer *l, amp_tensor *x, amp_activation act);
/* residual + l(x): amp_linear_residual, or with l->fp8 amp_linear_fp8 and amp_add. */
amp_tensor *nn_linear_residual(amp_ctx *ctx, const amp_linear_layer *l, amp_tensor *x, amp_tensor *residual);

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
    /* Declares the parameters in state_dict order (cfg validated), with the layers of amp/layers.h,
     * keeping the layer structs in m->layers. AMP_OK or an error. */
    int (*declare)(amp_model *m);
    /* amp_model_init's rules: fills every parameter in declaration order from rng (amp/init.h), the
     * parameters allocated. AMP_OK or an error. */
    int (*init)(amp_model *m, amp_rng *rng);
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
