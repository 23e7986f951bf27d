/* Layers (amp/layers.h): linear, layer norm, embedding and conv2d; their shared declaration step. The
 * sequence layers (LSTM, attention, the transformer block) are in layers_seq.c. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "amp/autocast.h"
#include "amp/fp8.h"
#include "nn_internal.h"
#include "../tensor/ctx_internal.h"

/* The largest size of one dimension a layer declares (token ids are int32). */
#define LAYER_SIZE_CAP ((int64_t)INT32_MAX)

int nn_layer_fail(amp_ctx *ctx, const char *fn, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ctx) amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT, "%s: %s", fn, msg);
    return AMP_ERR_INVALID_ARGUMENT;
}

int nn_declare_status(amp_ctx *ctx) {
    const int st = amp_ctx_status(ctx);
    return st != AMP_OK ? st : AMP_ERR_INVALID_ARGUMENT;
}

int nn_layer_name(amp_ctx *ctx, const char *fn, char *buf, const char *prefix, const char *leaf) {
    const bool bare = !prefix || !*prefix;
    const int len = bare ? snprintf(buf, AMP_LAYER_MAX_NAME, "%s", leaf)
                         : snprintf(buf, AMP_LAYER_MAX_NAME, "%s.%s", prefix, leaf);
    if (len >= 0 && len < AMP_LAYER_MAX_NAME) return AMP_OK;
    return nn_layer_fail(ctx, fn, "the name '%s.%s' is longer than %d bytes", bare ? "" : prefix, leaf,
                         AMP_LAYER_MAX_NAME - 1);
}

amp_tensor *nn_layer_param(amp_ctx *ctx, const char *fn, const char *prefix, const char *leaf, amp_dtype dtype,
                           int ndim, const int64_t *shape) {
    char name[AMP_LAYER_MAX_NAME];
    if (dtype != AMP_F32 && dtype != AMP_F16 && dtype != AMP_BF16) {
        nn_layer_fail(ctx, fn, "parameters are f32, f16 or bf16, not %s", amp_dtype_name(dtype));
        return NULL;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0 || shape[i] > LAYER_SIZE_CAP) {
            nn_layer_fail(ctx, fn, "%s: size %lld out of range [1, %lld]", leaf, (long long)shape[i],
                          (long long)LAYER_SIZE_CAP);
            return NULL;
        }
    if (nn_layer_name(ctx, fn, name, prefix, leaf) != AMP_OK) return NULL;
    return amp_param_new(ctx, name, dtype, ndim, shape); /* copies the name */
}

/* The first checks of every declare function: the context and the layer (zeroed here). */
static int declare_start(amp_ctx *ctx, void *layer, size_t bytes, const char *fn) {
    if (!ctx) return AMP_ERR_NULL_POINTER;
    if (!layer) {
        amp_ctx_fail(ctx, AMP_ERR_NULL_POINTER, "%s: no layer (NULL)", fn);
        return AMP_ERR_NULL_POINTER;
    }
    memset(layer, 0, bytes);
    return AMP_OK;
}

/* Returns a failed declaration's status with the layer zeroed (no half-declared tensors left in it). */
static int declare_failed(amp_ctx *ctx, void *layer, size_t bytes) {
    memset(layer, 0, bytes);
    return nn_declare_status(ctx);
}

int nn_need_layer(amp_ctx *ctx, const void *layer, const char *fn) {
    if (layer) return AMP_OK;
    if (ctx) amp_ctx_fail(ctx, AMP_ERR_NULL_POINTER, "%s: no layer (NULL)", fn);
    return AMP_ERR_NULL_POINTER;
}

/* ---- linear ---- */

int amp_linear_layer_declare(amp_ctx *ctx, amp_linear_layer *l, const char *prefix, int64_t in, int64_t out,
                             bool bias, amp_dtype dtype) {
    const char *fn = "amp_linear_layer_declare";
    int st = declare_start(ctx, l, sizeof *l, fn);
    if (st != AMP_OK) return st;
    l->in = in, l->out = out;
    l->weight = nn_layer_param(ctx, fn, prefix, "weight", dtype, 2, (const int64_t[]){out, in});
    if (l->weight && bias) l->bias = nn_layer_param(ctx, fn, prefix, "bias", dtype, 1, (const int64_t[]){out});
    if (l->weight && (l->bias || !bias)) return nn_note_linear(l);
    return declare_failed(ctx, l, sizeof *l);
}

int amp_linear_layer_init(amp_ctx *ctx, amp_linear_layer *l, amp_rng *rng) {
    const int st = nn_need_layer(ctx, l, "amp_linear_layer_init");
    return st == AMP_OK ? amp_init_linear(ctx, l->weight, l->bias, rng) : st;
}

amp_tensor *amp_linear_layer_forward(amp_ctx *ctx, const amp_linear_layer *l, amp_tensor *x) {
    return amp_linear_layer_forward_act(ctx, l, x, AMP_ACT_NONE);
}

amp_tensor *amp_linear_layer_forward_act(amp_ctx *ctx, const amp_linear_layer *l, amp_tensor *x, amp_activation act) {
    if (nn_need_layer(ctx, l, "amp_linear_layer_forward") != AMP_OK) return NULL;
    if (l->fp8) return nn_linear_fp8_act(ctx, l, x, act);
    switch (act) {
    case AMP_ACT_NONE:
        return amp_linear(ctx, x, l->weight, l->bias);
    case AMP_ACT_RELU:
        return amp_linear_relu(ctx, x, l->weight, l->bias);
    case AMP_ACT_GELU:
        return amp_linear_gelu(ctx, x, l->weight, l->bias);
    case AMP_ACT_GELU_TANH:
        return amp_linear_gelu_tanh(ctx, x, l->weight, l->bias);
    }
    nn_layer_fail(ctx, "amp_linear_layer_forward_act", "unknown activation %d", (int)act);
    return NULL;
}

/* An fp8 layer: amp_linear_fp8, then the activation as its own op (what amp_linear_gelu computes
 * under autocast too: gelu of the rounded output). */
amp_tensor *nn_linear_fp8_act(amp_ctx *ctx, const amp_linear_layer *l, amp_tensor *x, amp_activation act) {
    amp_tensor *y = amp_linear_fp8(ctx, x, l->weight, l->bias, l->fp8);
    switch (act) {
    case AMP_ACT_NONE: return y;
    case AMP_ACT_RELU: return y ? amp_relu(ctx, y) : NULL;
    case AMP_ACT_GELU: return y ? amp_gelu(ctx, y) : NULL;
    case AMP_ACT_GELU_TANH: return y ? amp_gelu_tanh(ctx, y) : NULL;
    }
    nn_layer_fail(ctx, "amp_linear_layer_forward_act", "unknown activation %d", (int)act);
    return NULL;
}

amp_tensor *nn_linear_residual(amp_ctx *ctx, const amp_linear_layer *l, amp_tensor *x, amp_tensor *residual) {
    if (!l->fp8) return amp_linear_residual(ctx, x, l->weight, l->bias, residual);
    amp_tensor *y = amp_linear_fp8(ctx, x, l->weight, l->bias, l->fp8);
    return y ? amp_add(ctx, residual, y) : NULL;
}

/* ---- layer norm ---- */

int amp_layer_norm_layer_declare(amp_ctx *ctx, amp_layer_norm_layer *l, const char *prefix, int64_t dim,
                                 amp_dtype dtype) {
    const char *fn = "amp_layer_norm_layer_declare";
    int st = declare_start(ctx, l, sizeof *l, fn);
    if (st != AMP_OK) return st;
    l->dim = dim, l->eps = 1e-5f;
    l->weight = nn_layer_param(ctx, fn, prefix, "weight", dtype, 1, (const int64_t[]){dim});
    if (l->weight) l->bias = nn_layer_param(ctx, fn, prefix, "bias", dtype, 1, (const int64_t[]){dim});
    return l->bias ? AMP_OK : declare_failed(ctx, l, sizeof *l);
}

int amp_layer_norm_layer_init(amp_ctx *ctx, amp_layer_norm_layer *l) {
    const int st = nn_need_layer(ctx, l, "amp_layer_norm_layer_init");
    return st == AMP_OK ? amp_init_layer_norm(ctx, l->weight, l->bias) : st;
}

amp_tensor *amp_layer_norm_layer_forward(amp_ctx *ctx, const amp_layer_norm_layer *l, amp_tensor *x) {
    if (nn_need_layer(ctx, l, "amp_layer_norm_layer_forward") != AMP_OK) return NULL;
    return amp_layer_norm(ctx, x, l->weight, l->bias, l->eps);
}

amp_tensor *nn_norm_for_linear(amp_ctx *ctx, const amp_layer_norm_layer *ln, amp_tensor *x) {
    if (x && amp_autocast_enabled() && amp_autocast_get_policy(AMP_OP_LINEAR) == AMP_POLICY_LOWER &&
        amp_autocast_get_policy(AMP_OP_LAYER_NORM) == AMP_POLICY_FP32)
        return amp_layer_norm_to(ctx, x, ln->weight, ln->bias, ln->eps, amp_autocast_dtype());
    return amp_layer_norm(ctx, x, ln->weight, ln->bias, ln->eps);
}

/* ---- embedding ---- */

int amp_embedding_layer_declare(amp_ctx *ctx, amp_embedding_layer *l, const char *prefix, int64_t num, int64_t dim,
                                amp_dtype dtype) {
    const char *fn = "amp_embedding_layer_declare";
    int st = declare_start(ctx, l, sizeof *l, fn);
    if (st != AMP_OK) return st;
    l->num = num, l->dim = dim;
    l->weight = nn_layer_param(ctx, fn, prefix, "weight", dtype, 2, (const int64_t[]){num, dim});
    return l->weight ? AMP_OK : declare_failed(ctx, l, sizeof *l);
}

int amp_embedding_layer_init(amp_ctx *ctx, amp_embedding_layer *l, amp_rng *rng) {
    const int st = nn_need_layer(ctx, l, "amp_embedding_layer_init");
    return st == AMP_OK ? amp_init_embedding(ctx, l->weight, rng) : st;
}

amp_tensor *amp_embedding_layer_forward(amp_ctx *ctx, const amp_embedding_layer *l, const int32_t *ids, int ndim,
                                        const int64_t *shape) {
    if (nn_need_layer(ctx, l, "amp_embedding_layer_forward") != AMP_OK) return NULL;
    return amp_embedding(ctx, l->weight, ids, ndim, shape);
}

/* ---- conv2d ---- */

int amp_conv2d_layer_declare(amp_ctx *ctx, amp_conv2d_layer *l, const char *prefix, int64_t in_channels,
                             int64_t out_channels, int64_t kernel, int stride, int padding, bool bias,
                             amp_dtype dtype) {
    const char *fn = "amp_conv2d_layer_declare";
    int st = declare_start(ctx, l, sizeof *l, fn);
    if (st != AMP_OK) return st;
    if (stride < 1 || padding < 0) return nn_layer_fail(ctx, fn, "stride %d must be >= 1, padding %d >= 0", stride, padding);
    *l = (amp_conv2d_layer){.in_channels = in_channels, .out_channels = out_channels, .kernel = kernel,
                            .stride = stride, .padding = padding};
    const int64_t shape[4] = {out_channels, in_channels, kernel, kernel};
    l->weight = nn_layer_param(ctx, fn, prefix, "weight", dtype, 4, shape);
    if (l->weight && bias) l->bias = nn_layer_param(ctx, fn, prefix, "bias", dtype, 1, shape);
    return l->weight && (l->bias || !bias) ? AMP_OK : declare_failed(ctx, l, sizeof *l);
}

int amp_conv2d_layer_init(amp_ctx *ctx, amp_conv2d_layer *l, amp_rng *rng) {
    const int st = nn_need_layer(ctx, l, "amp_conv2d_layer_init");
    return st == AMP_OK ? amp_init_conv2d(ctx, l->weight, l->bias, rng) : st;
}

amp_tensor *amp_conv2d_layer_forward(amp_ctx *ctx, const amp_conv2d_layer *l, amp_tensor *x) {
    if (nn_need_layer(ctx, l, "amp_conv2d_layer_forward") != AMP_OK) return NULL;
    return amp_conv2d(ctx, x, l->weight, l->bias, l->stride, l->padding);
}
