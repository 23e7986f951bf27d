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

#endif
