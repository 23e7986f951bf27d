/* Internal: what the four model files share (src/nn/model.c implements it). */
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
    int32_t *positions; /* gpt: 0 .. context-1, the position embedding's ids */
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

/* amp_concat over any number of tensors (amp_concat takes at most 8): a tree of concats. */
amp_tensor *nn_concat_many(amp_ctx *ctx, amp_tensor **xs, int n, int dim);
/* Records an invalid-argument error "model: message" in ctx; returns NULL. */
amp_tensor *nn_fail(amp_ctx *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Per model: declare the parameters (cfg already validated), run the forward, count FLOPs. */
int nn_mlp_declare(amp_model *m);
amp_tensor *nn_mlp_forward(amp_model *m, amp_ctx *ctx, amp_tensor *x, int64_t batch);
double nn_mlp_flops(const amp_model_config *c);
int nn_cnn_declare(amp_model *m);
amp_tensor *nn_cnn_forward(amp_model *m, amp_ctx *ctx, amp_tensor *x, int64_t batch);
double nn_cnn_flops(const amp_model_config *c);
int nn_lstm_declare(amp_model *m);
amp_tensor *nn_lstm_forward(amp_model *m, amp_ctx *ctx, const int32_t *tokens, int64_t batch);
double nn_lstm_flops(const amp_model_config *c);
double nn_lstm_flops_computed(const amp_model_config *c, int64_t batch);
int nn_gpt_declare(amp_model *m);
amp_tensor *nn_gpt_forward(amp_model *m, amp_ctx *ctx, const int32_t *tokens, int64_t batch);
double nn_gpt_flops(const amp_model_config *c);

#endif
