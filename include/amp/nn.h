/* Models: the five architectures `amp train` trains, built from amp's ops.
 *
 *   mlp   Flatten, Linear(in,1024), ReLU, Linear(1024,1024), ReLU, Linear(1024,classes)
 *   cnn   Conv2d(C,32,5,padding=2), ReLU, MaxPool2d(2), Conv2d(32,64,5,padding=2), ReLU, MaxPool2d(2),
 *         Flatten, Linear(64*(H/4)*(W/4),1024), ReLU, Linear(1024,classes)
 *   lstm  character LM: Embedding(vocab,64), one LSTM layer of 256 unrolled over 64 steps, Linear(256,vocab)
 *   gpt   character LM (nanoGPT's GPT): 4 layers, 4 heads, width 128, context 128, learned position
 *         embedding, pre-LayerNorm blocks (causal self-attention; MLP Linear(C,4C), GELU, Linear(4C,C)),
 *         final LayerNorm, untied Linear(C,vocab) head without bias; no dropout.
 *   gpt2  GPT-2 (OpenAI's, as llm.c's train_gpt2.py): the gpt's blocks with GELU's tanh approximation,
 *         the output head tied to the token embedding, whose table has vocab_padded rows (llm.c's Vp;
 *         the head reads the first `vocab`); sizes 124m (default: 12 layers, 12 heads, width 768,
 *         context 1024, vocabulary 50257 padded to 50304), 350m, 774m, 1558m (amp_model_gpt2_size).
 * The defaults are a contract (results compare with PyTorch on the same architecture); the sizes can be
 * overridden through amp_model_config.
 *
 * Parameter names and layouts are PyTorch's state_dict of the same architecture, so a checkpoint loads
 * into PyTorch with load_state_dict:
 *   mlp   as nn.Sequential: 1.weight [1024, in], 1.bias, 3.weight, 3.bias, 5.weight, 5.bias
 *   cnn   as nn.Sequential: 0.weight [32, C, 5, 5], 0.bias, 3.*, 7.*, 9.*
 *   lstm  a module with embedding (nn.Embedding), lstm (nn.LSTM, batch_first), head (nn.Linear):
 *         embedding.weight, lstm.weight_ih_l0 [4H, E], lstm.weight_hh_l0 [4H, H], lstm.bias_ih_l0,
 *         lstm.bias_hh_l0, head.weight [vocab, H], head.bias
 *   gpt   nanoGPT's names without the "transformer." prefix: wte.weight, wpe.weight,
 *         h.<i>.ln_1.{weight,bias}, h.<i>.attn.c_attn.{weight [3C, C],bias}, h.<i>.attn.c_proj.*,
 *         h.<i>.ln_2.*, h.<i>.mlp.c_fc.*, h.<i>.mlp.c_proj.*, ln_f.{weight,bias}, lm_head.weight
 *   gpt2  the gpt's names without lm_head.weight (tied: wte.weight [vocab_padded, C] is the head);
 *         Hugging Face's GPT2LMHeadModel names them transformer.* with Conv1D weights [in, out] and
 *         wte [vocab, C] (amp/llmc.h writes that layout)
 * Parameters are declared in that (state_dict) order, by the layers of amp/layers.h.
 *
 * Use:
 *     amp_model_config cfg = amp_model_default_config(AMP_MODEL_CNN);
 *     cfg.classes = 10;                              // from the data
 *     amp_model *m;  amp_model_create(ctx, &cfg, &m);  // declares the parameters
 *     amp_ctx_alloc_params(ctx);  amp_model_init(m, seed);
 *     logits = amp_model_forward(m, ctx, x, NULL, batch, true);   // then amp_cross_entropy, backward
 *     ...  amp_ctx_free(ctx);  amp_model_free(m);
 * The context keeps its own copies of the parameters' names: the two may be freed in either order. */
#ifndef AMP_NN_H
#define AMP_NN_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The built-in models, one row each: the enum value and the name, in the enum's order. A row's model
 * is src/nn/<name>.c, which defines its description (src/nn/nn_internal.h: nn_model); the enum and
 * the library's model table are generated from this list. */
#define AMP_MODEL_LIST(X)   \
    X(AMP_MODEL_MLP, mlp)   \
    X(AMP_MODEL_CNN, cnn)   \
    X(AMP_MODEL_LSTM, lstm) \
    X(AMP_MODEL_GPT, gpt)   \
    X(AMP_MODEL_GPT2, gpt2)

typedef enum amp_model_kind {
#define AMP_MODEL_ENUM_ITEM_(kind, name) kind,
    AMP_MODEL_LIST(AMP_MODEL_ENUM_ITEM_)
#undef AMP_MODEL_ENUM_ITEM_
    AMP_MODEL_COUNT
} amp_model_kind;

/* "mlp", "cnn", "lstm", "gpt", "gpt2"; "invalid" outside the enum. */
const char *amp_model_kind_name(amp_model_kind kind);
/* Parses a model name. Returns AMP_OK or AMP_ERR_INVALID_ARGUMENT. */
int amp_model_kind_from_name(const char *name, amp_model_kind *out);
/* True for the language models (lstm, gpt, gpt2). */
bool amp_model_is_text(amp_model_kind kind);

typedef struct amp_model_config {
    amp_model_kind kind;
    /* image models (mlp, cnn): input [batch, in_channels, image_rows, image_cols] (the mlp also takes
     * [batch, in_channels*image_rows*image_cols]); defaults 1, 28, 28, 10 (MNIST's layout) */
    int64_t in_channels, image_rows, image_cols, classes;
    /* text models: vocabulary size (default 256, one per byte; set it from the data) and sequence
     * length: the lstm's unroll (64), the gpt's context (128) */
    int64_t vocab, context;
    /* mlp: both hidden layers (1024); cnn: the hidden linear layer (1024); lstm: the LSTM's hidden size
     * (256); gpt: the width C (128) */
    int64_t hidden;
    int64_t conv1_channels, conv2_channels, kernel; /* cnn: 32, 64, 5 (padding kernel/2) */
    int64_t embed;                                  /* lstm: embedding size (64) */
    int64_t layers, heads;                          /* gpt: 4, 4 (hidden % heads == 0) */
    amp_dtype param_dtype; /* storage dtype of the parameters (the precision preset's param_dtype); AMP_F32 */
    /* gpt2: rows of the token embedding, >= vocab; 0 (the default): vocab rounded up to a multiple of
     * 128, llm.c's Vp (50257 -> 50304). The rows past vocab are never looked up nor in the logits. */
    int64_t vocab_padded;
    /* gpt2: rows of the position embedding wpe, >= context (0, the default: context): llm.c's maxT, so
     * a model made for 1024 positions trains on shorter windows (the first `context` rows are used) */
    int64_t positions;
    /* gpt, gpt2: recompute each transformer block in backward instead of keeping its activations
     * (amp/recompute.h): the blocks' inputs are kept, the rest of each block is computed again when
     * backward reaches it; the gradients are bit for bit the same, at the cost of one more forward
     * of the blocks. Other models ignore it. false (default) */
    bool recompute;
} amp_model_config;

typedef struct amp_model amp_model;

/* The contract's defaults for `kind` (an invalid kind gives the mlp's config with kind unchanged). */
amp_model_config amp_model_default_config(amp_model_kind kind);
/* Sets cfg's layers, heads, hidden and context to GPT-2's released size `name`: "124m" (12, 12, 768),
 * "350m" (24, 16, 1024), "774m" (36, 20, 1280), "1558m" (48, 25, 1600), context 1024 each; other fields
 * unchanged. Returns AMP_OK, AMP_ERR_NULL_POINTER or AMP_ERR_INVALID_ARGUMENT (an unknown name). */
int amp_model_gpt2_size(const char *name, amp_model_config *cfg);
/* The rows of gpt2's token embedding for cfg: vocab_padded, or vocab rounded up to a multiple of 128
 * when that is 0. 0 for a NULL cfg. */
int64_t amp_model_padded_vocab(const amp_model_config *cfg);
/* Validates cfg and declares the model's parameters in ctx (call before amp_ctx_alloc_params).
 * Returns AMP_OK, AMP_ERR_INVALID_ARGUMENT (a bad size, recorded in the context when ctx is given),
 * AMP_ERR_NULL_POINTER or AMP_ERR_OUT_OF_MEMORY. */
int amp_model_create(amp_ctx *ctx, const amp_model_config *cfg, amp_model **out);
/* PyTorch's default initialization, deterministic from `seed` (same seed, same bits on every machine),
 * made with amp/init.h: one generator seeded with `seed` fills the parameters in declaration order:
 *   Linear and Conv2d: weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming_uniform_ with
 *   a=sqrt(5), and the bias rule of nn.Linear.reset_parameters);
 *   Embedding: N(0, 1); LSTM: every tensor U(-1/sqrt(H), 1/sqrt(H));
 *   gpt, gpt2: nanoGPT's (llm.c's train_gpt2.py's) _init_weights: Linear and Embedding weights
 *   N(0, 0.02), biases 0, the residual projections (c_proj) N(0, 0.02/sqrt(2*layers)), LayerNorm
 *   weight 1 and bias 0 (gpt2: the tied wte once, all its vocab_padded rows).
 * Needs the parameters allocated. Returns AMP_OK, AMP_ERR_STATE (not allocated) or an error. */
int amp_model_init(amp_model *m, uint64_t seed);
/* The forward pass; returns the logits, or NULL with the error in ctx.
 * Image models: x [batch, C, H, W] (mlp: or [batch, C*H*W]); tokens NULL; logits [batch, classes].
 * Text models: x NULL; tokens [batch, context] ids in [0, vocab), row-major; logits
 * [batch*context, vocab] (row b*context + t predicts the token after tokens[b][t]), so that
 * amp_cross_entropy applies directly. `training` is accepted for models with dropout; these have none. */
amp_tensor *amp_model_forward(amp_model *m, amp_ctx *ctx, amp_tensor *x, const int32_t *tokens, int64_t batch,
                              bool training);
const amp_model_config *amp_model_get_config(const amp_model *m);
/* Trainable parameters (elements). */
int64_t amp_model_num_params(const amp_model *m);
/* Parameters in declaration order (state_dict order), and how many. */
size_t amp_model_num_tensors(const amp_model *m);
amp_tensor *amp_model_tensor(const amp_model *m, size_t index);
/* Training FLOPs per sample (one image, or one sequence of `context` tokens): 2 * multiply-adds of the
 * forward pass's matrix products, convolutions, attention scores and attention-weighted sums (counted
 * without the causal mask, as nanoGPT and the PaLM paper do), times 3 for forward + backward.
 * Elementwise ops, norms and pooling are left out. */
double amp_model_flops_per_sample(const amp_model *m);
/* The FLOPs per sample amp's implementation computes, counted the same way, at this batch size: the
 * count above, except for the lstm, whose embedding is folded into the LSTM's input projection
 * (computed for the vocabulary's rows once per batch instead of for every token, about 85% of the
 * count at the default shapes). The mlp's and cnn's first input gradient, which the count includes,
 * is computed by neither amp nor PyTorch. */
double amp_model_flops_computed_per_sample(const amp_model *m, int64_t batch);
/* NULL is fine. */
void amp_model_free(amp_model *m);

/* The model's Linear layers (amp/layers.h), in the order the model declared them, which for the
 * built-in models is the order the forward pass runs them (gpt: h.0.attn.c_attn first, lm_head
 * last), and how many. Setting a layer's fp8 field runs it in fp8 (amp/fp8.h); the pointers stay
 * valid until amp_model_free. NULL for an index out of range. */
struct amp_linear_layer;
size_t amp_model_num_linears(const amp_model *m);
struct amp_linear_layer *amp_model_linear(amp_model *m, size_t index);

#ifdef __cplusplus
}
#endif
#endif /* AMP_NN_H */
