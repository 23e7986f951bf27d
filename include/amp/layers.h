/* Layers: small structs that declare their parameters under PyTorch's names, initialize them with
 * PyTorch's defaults (amp/init.h) and run the ops that make the layer (amp/ops.h). The built-in
 * models (amp/nn.h) are written with them. And the helpers a training program needs around a model:
 * argmax and accuracy over logits, evaluation under no-grad.
 *
 *     amp_linear_layer fc1;                  // PyTorch: fc1 = nn.Linear(64, 256)
 *     amp_linear_layer_declare(ctx, &fc1, "fc1", 64, 256, true, AMP_F32);  // fc1.weight, fc1.bias
 *     ... declare the others, then amp_ctx_alloc_params(ctx);
 *     amp_rng rng;  amp_rng_seed(&rng, 1);
 *     amp_linear_layer_init(ctx, &fc1, &rng);                 // U(-1/sqrt(64), 1/sqrt(64))
 *     h = amp_linear_layer_forward(ctx, &fc1, x);             // every step
 *
 * Declaring. A layer's declare function declares its parameters (amp_param_new) in PyTorch's
 * state_dict order, named "<prefix>.<PyTorch's name>" ("fc1.weight"; an empty prefix gives
 * "weight"), so a checkpoint of the context (amp/checkpoint.h) loads into the PyTorch module with
 * load_state_dict. Call it before amp_ctx_alloc_params. The layer struct holds the parameters'
 * tensors and the layer's sizes; it owns nothing (the context owns the tensors) and needs no free.
 * dtype: the parameters' storage dtype, AMP_F32 normally (fp32 master weights; autocast lowers the
 * compute), AMP_F16 or AMP_BF16 for a pure low-precision model.
 * Returns AMP_OK or an error status, recorded in ctx with a message: AMP_ERR_INVALID_ARGUMENT (a size
 * out of range, a name longer than AMP_LAYER_MAX_NAME, parameters already allocated),
 * AMP_ERR_NULL_POINTER, AMP_ERR_OUT_OF_MEMORY. On failure the layer's tensors are NULL; parameters
 * declared before the failure stay declared (a context cannot undeclare).
 *
 * Initializing. A layer's init function applies PyTorch's reset_parameters through amp/init.h,
 * drawing from the generator in declaration order; it needs the parameters allocated.
 *
 * Running. A layer's forward function is the op sequence written next to it; it returns NULL with the
 * error in ctx as every op does. Layers have no state besides their parameters. */
#ifndef AMP_LAYERS_H
#define AMP_LAYERS_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "init.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The longest parameter name a layer makes, prefix and terminating NUL included. */
enum { AMP_LAYER_MAX_NAME = 256 };

/* ---- nn.Linear ---- */

struct amp_fp8_linear; /* amp/fp8.h */

typedef struct amp_linear_layer {
    amp_tensor *weight; /* [out, in] */
    amp_tensor *bias;   /* [out], or NULL without bias */
    int64_t in, out;
    /* NULL (declare's default): the layer runs amp_linear and its fused variants. Else the layer's
     * fp8 recipe state (amp_fp8_linear_create; the caller owns it and frees it after the last
     * backward): every forward of the layer, fused ones included (activation, residual: applied
     * after it as separate ops), runs amp_linear_fp8 with it. */
    struct amp_fp8_linear *fp8;
} amp_linear_layer;

/* The activation a linear layer's forward may apply while the product is in cache (amp_linear_relu,
 * amp_linear_gelu, amp_linear_gelu_tanh: the same values and gradients as the separate op). */
typedef enum amp_activation { AMP_ACT_NONE = 0, AMP_ACT_RELU = 1, AMP_ACT_GELU = 2, AMP_ACT_GELU_TANH = 3 } amp_activation;

/* <prefix>.weight [out, in], <prefix>.bias [out] (when bias). */
int amp_linear_layer_declare(amp_ctx *ctx, amp_linear_layer *l, const char *prefix, int64_t in, int64_t out,
                             bool bias, amp_dtype dtype);
/* amp_init_linear: weight and bias U(-1/sqrt(in), 1/sqrt(in)). */
int amp_linear_layer_init(amp_ctx *ctx, amp_linear_layer *l, amp_rng *rng);
/* x [..., in] -> [..., out]: amp_linear. */
amp_tensor *amp_linear_layer_forward(amp_ctx *ctx, const amp_linear_layer *l, amp_tensor *x);
/* amp_linear, amp_linear_relu or amp_linear_gelu by act (with l->fp8: amp_linear_fp8, then the
 * activation). */
amp_tensor *amp_linear_layer_forward_act(amp_ctx *ctx, const amp_linear_layer *l, amp_tensor *x, amp_activation act);

/* ---- nn.LayerNorm (elementwise affine, with bias) ---- */

typedef struct amp_layer_norm_layer {
    amp_tensor *weight, *bias; /* [dim] each */
    int64_t dim;
    float eps; /* 1e-5, nn.LayerNorm's default; set it after declaring to change it */
} amp_layer_norm_layer;

/* <prefix>.weight [dim], <prefix>.bias [dim]; eps 1e-5. */
int amp_layer_norm_layer_declare(amp_ctx *ctx, amp_layer_norm_layer *l, const char *prefix, int64_t dim,
                                 amp_dtype dtype);
/* amp_init_layer_norm: weight ones, bias zeros (no draws). */
int amp_layer_norm_layer_init(amp_ctx *ctx, amp_layer_norm_layer *l);
/* x [..., dim] normalized over its last dimension: amp_layer_norm. */
amp_tensor *amp_layer_norm_layer_forward(amp_ctx *ctx, const amp_layer_norm_layer *l, amp_tensor *x);

/* ---- nn.Embedding ---- */

typedef struct amp_embedding_layer {
    amp_tensor *weight; /* [num, dim] */
    int64_t num, dim;
} amp_embedding_layer;

/* <prefix>.weight [num, dim]. */
int amp_embedding_layer_declare(amp_ctx *ctx, amp_embedding_layer *l, const char *prefix, int64_t num, int64_t dim,
                                amp_dtype dtype);
/* amp_init_embedding: N(0, 1). */
int amp_embedding_layer_init(amp_ctx *ctx, amp_embedding_layer *l, amp_rng *rng);
/* ids: numel(shape) ids in [0, num) -> [shape..., dim]: amp_embedding. */
amp_tensor *amp_embedding_layer_forward(amp_ctx *ctx, const amp_embedding_layer *l, const int32_t *ids, int ndim,
                                        const int64_t *shape);

/* ---- nn.Conv2d (square kernel, equal stride and padding on both axes) ---- */

typedef struct amp_conv2d_layer {
    amp_tensor *weight; /* [out_channels, in_channels, kernel, kernel] */
    amp_tensor *bias;   /* [out_channels], or NULL */
    int64_t in_channels, out_channels, kernel;
    int stride, padding;
} amp_conv2d_layer;

/* <prefix>.weight [out, in, kernel, kernel], <prefix>.bias [out] (when bias). */
int amp_conv2d_layer_declare(amp_ctx *ctx, amp_conv2d_layer *l, const char *prefix, int64_t in_channels,
                             int64_t out_channels, int64_t kernel, int stride, int padding, bool bias,
                             amp_dtype dtype);
/* amp_init_conv2d: weight and bias U(-1/sqrt(in * kernel^2), ..). */
int amp_conv2d_layer_init(amp_ctx *ctx, amp_conv2d_layer *l, amp_rng *rng);
/* x [N, in, H, W] -> [N, out, H', W']: amp_conv2d. */
amp_tensor *amp_conv2d_layer_forward(amp_ctx *ctx, const amp_conv2d_layer *l, amp_tensor *x);

/* ---- nn.LSTM (one layer, batch_first, from a zero state) ---- */

typedef struct amp_lstm_layer {
    amp_tensor *w_ih; /* weight_ih_l0 [4H, I], gates i, f, g, o as PyTorch */
    amp_tensor *w_hh; /* weight_hh_l0 [4H, H] */
    amp_tensor *b_ih; /* bias_ih_l0 [4H], or NULL */
    amp_tensor *b_hh; /* bias_hh_l0 [4H], or NULL */
    int64_t input, hidden;
} amp_lstm_layer;

/* <prefix>.weight_ih_l0, <prefix>.weight_hh_l0, then (when bias) <prefix>.bias_ih_l0,
 * <prefix>.bias_hh_l0: nn.LSTM(input, hidden)'s names and order. */
int amp_lstm_layer_declare(amp_ctx *ctx, amp_lstm_layer *l, const char *prefix, int64_t input, int64_t hidden,
                           bool bias, amp_dtype dtype);
/* amp_init_lstm: every tensor U(-1/sqrt(hidden), 1/sqrt(hidden)). */
int amp_lstm_layer_init(amp_ctx *ctx, amp_lstm_layer *l, amp_rng *rng);
/* x [B, T, input] -> h of every step [B, T, hidden]: amp_lstm_cell over t = 0..T-1 from h = c = 0,
 * the steps computed as one node (the same values as the cells). */
amp_tensor *amp_lstm_layer_forward(amp_ctx *ctx, const amp_lstm_layer *l, amp_tensor *x);
/* The same with x the rows of an embedding for tokens [B, T] (copied): the values of
 * amp_lstm_layer_forward(amp_embedding_layer_forward(emb, tokens)), with the input projection
 * computed once per embedding row instead of once per token (the weights' gradients sum in another
 * order). emb->dim must equal l->input. */
amp_tensor *amp_lstm_layer_forward_tokens(amp_ctx *ctx, const amp_lstm_layer *l, const amp_embedding_layer *emb,
                                          const int32_t *tokens, int64_t batch, int64_t steps);

/* ---- causal self-attention (nanoGPT's CausalSelfAttention, no dropout) ---- */

typedef struct amp_attention_layer {
    amp_linear_layer c_attn; /* [3C, C]: q, k, v in three column blocks of its output */
    amp_linear_layer c_proj; /* [C, C] */
    int64_t dim, heads;      /* C, and heads dividing it */
} amp_attention_layer;

/* <prefix>.c_attn.weight [3C, C], <prefix>.c_attn.bias, <prefix>.c_proj.weight [C, C],
 * <prefix>.c_proj.bias (biases when bias). */
int amp_attention_layer_declare(amp_ctx *ctx, amp_attention_layer *l, const char *prefix, int64_t dim, int64_t heads,
                                bool bias, amp_dtype dtype);
/* nn.Linear's default on both projections. */
int amp_attention_layer_init(amp_ctx *ctx, amp_attention_layer *l, amp_rng *rng);
/* x [B, T, C] -> c_proj(attention(c_attn(x))) [B, T, C], causal scaled-dot-product attention per
 * head; plus residual (amp_linear_residual) when residual is not NULL. */
amp_tensor *amp_attention_layer_forward(amp_ctx *ctx, const amp_attention_layer *l, amp_tensor *x,
                                        amp_tensor *residual);

/* ---- a transformer block (nanoGPT's Block, no dropout) ---- */

typedef struct amp_transformer_block {
    amp_layer_norm_layer ln_1;
    amp_attention_layer attn;
    amp_layer_norm_layer ln_2;
    amp_linear_layer mlp_fc;   /* mlp.c_fc [4C, C] */
    amp_linear_layer mlp_proj; /* mlp.c_proj [C, 4C] */
    bool gelu_tanh;            /* the mlp's GELU: false exact (nanoGPT's nn.GELU()), true the tanh
                                  approximation (GPT-2's); declare sets false */
} amp_transformer_block;

/* <prefix>.ln_1.*, <prefix>.attn.c_attn.*, <prefix>.attn.c_proj.*, <prefix>.ln_2.*,
 * <prefix>.mlp.c_fc.*, <prefix>.mlp.c_proj.* (weight then bias each), nanoGPT's order. */
int amp_transformer_block_declare(amp_ctx *ctx, amp_transformer_block *b, const char *prefix, int64_t dim,
                                  int64_t heads, amp_dtype dtype);
/* PyTorch's defaults (nn.Linear's, nn.LayerNorm's) in declaration order. nanoGPT's own
 * initialization (N(0, 0.02), the residual projections scaled) is amp_init_normal on the fields. */
int amp_transformer_block_init(amp_ctx *ctx, amp_transformer_block *b, amp_rng *rng);
/* x [B, T, C] -> x + attn(ln_1(x)), then + mlp(ln_2(.)), mlp = c_proj(gelu(c_fc(.))) (exact GELU, or
 * its tanh approximation with b->gelu_tanh).
 * Under autocast with linear lowered and layer norm in fp32 (the default policy) each norm's result
 * is rounded to the autocast dtype directly (amp_layer_norm_to: the values of the cast the linear
 * would make). */
amp_tensor *amp_transformer_block_forward(amp_ctx *ctx, const amp_transformer_block *b, amp_tensor *x);

/* ---- evaluation ---- */

/* Row-wise argmax of logits [N, C] (any float dtype, views too): out[i] is the index of row i's
 * largest value, the first on ties, and the first NaN where a row has one (torch.argmax's rules).
 * Returns AMP_OK, AMP_ERR_NULL_POINTER or AMP_ERR_INVALID_ARGUMENT (not 2-D, or no columns). */
int amp_argmax_rows(const amp_tensor *logits, int32_t *out);
/* The number of rows of logits [N, C] whose argmax equals labels[i]; -1 on the errors above. */
int64_t amp_count_correct(const amp_tensor *logits, const int32_t *labels);

/* A model's forward pass as a function: x -> logits [N, C] (NULL on error, recorded in ctx). */
typedef amp_tensor *(*amp_forward_fn)(amp_ctx *ctx, amp_tensor *x, void *user);

/* Sums over the batches evaluated. Zero it before the first batch. */
typedef struct amp_eval_totals {
    double loss_sum; /* mean cross-entropy of each batch times its rows */
    int64_t correct; /* rows whose argmax is the label */
    int64_t count;   /* rows */
} amp_eval_totals;

/* Evaluates one batch with grad mode off (amp_set_grad_enabled; the previous mode is restored):
 * logits = forward(ctx, x, user), loss = amp_cross_entropy(logits, labels); adds the loss times the
 * rows, the correct rows and the rows to *totals. Nothing is recorded on the tape; the batch's
 * tensors stay in the arena until the next amp_ctx_reset. Under an autocast region the forward runs
 * autocast, as any op. The mean loss is loss_sum / count, the accuracy correct / count. Returns
 * AMP_OK or the error the forward or the loss recorded in ctx (totals unchanged). */
int amp_evaluate_batch(amp_ctx *ctx, amp_forward_fn forward, void *user, amp_tensor *x, const int32_t *labels,
                       amp_eval_totals *totals);

#ifdef __cplusplus
}
#endif
#endif /* AMP_LAYERS_H */
