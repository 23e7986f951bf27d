/* Internal: the gpt's layer structs (src/nn/gpt.c declares them into m->layers), shared with the
 * code that runs a trained gpt outside the training forward (src/nn/generate.c: token-by-token
 * generation with a key/value cache). */
#ifndef AMP_GPT_INTERNAL_H
#define AMP_GPT_INTERNAL_H

#include "nn_internal.h"

/* The layers in declaration order: the embeddings, the blocks (blocks[layers]), the tail. */
typedef struct gpt_layers {
    amp_embedding_layer wte, wpe;
    amp_layer_norm_layer ln_f;
    amp_linear_layer lm_head;
    amp_transformer_block blocks[]; /* cfg.layers of them */
} gpt_layers;

/* Block l's forward on x: amp_transformer_block_forward, as a recomputed region (amp/recompute.h)
 * when cfg->recompute asks for it (src/nn/gpt.c). */
amp_tensor *gpt_block_forward(amp_ctx *ctx, const amp_model_config *cfg, const amp_transformer_block *b, amp_tensor *x);

/* The initialization both models share (nanoGPT's and train_gpt2.py's _init_weights), in
 * declaration order from rng: wte and wpe N(0, std), each block's LayerNorms 1 and 0, its Linear
 * weights N(0, std) with the residual projections (attn.c_proj, mlp.c_proj) at std / sqrt(2 *
 * layers), biases 0, then ln_f. The gpt then draws its untied head. */
int gpt_init_trunk(amp_model *m, float std, amp_rng *rng);

/* Both models' forward up to the head: embeddings, blocks, ln_f; tokens [B, T] -> [B*T, C]. */
amp_tensor *gpt_forward_trunk(const amp_model *m, amp_ctx *ctx, const int32_t *tokens, int64_t batch);
/* Both models' training flops per sequence (the head's C*V per token included). */
double gpt_flops(const amp_model_config *c);

#endif
