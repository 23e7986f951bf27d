/* llm.c's GPT-2 model files (karpathy/llm.c: train_gpt2.py's write_model, train_gpt2.c's
 * gpt2_build_from_checkpoint), read into and written from the parameters of amp's gpt2 model
 * (amp/nn.h), so a run can start from llm.c's weights and llm.c can continue from amp's.
 *
 * The file: a header of 256 little-endian int32,
 *     [0] 20240326 (AMP_LLMC_MODEL_MAGIC), [1] version: 3 = fp32 parameters, 5 = bf16 parameters,
 *     [2] maxT (wpe's rows), [3] V (vocabulary), [4] L (layers), [5] NH (heads), [6] C (width),
 *     [7] Vp (wte's rows, V padded; llm.c: a multiple of 128), the rest 0;
 * then the parameters, back to back in this order and shape (each per-layer tensor holds the L
 * layers one after another, layer 0 first), weights [out, in] as nn.Linear's and amp's:
 *     wte [Vp, C], wpe [maxT, C], ln1w [L, C], ln1b [L, C], qkvw [L, 3C, C], qkvb [L, 3C],
 *     attprojw [L, C, C], attprojb [L, C], ln2w [L, C], ln2b [L, C], fcw [L, 4C, C], fcb [L, 4C],
 *     fcprojw [L, C, 4C], fcprojb [L, C], lnfw [C], lnfb [C]
 * amp's names for them: wte.weight, wpe.weight, h.<l>.ln_1.weight, h.<l>.ln_1.bias,
 * h.<l>.attn.c_attn.weight, .bias, h.<l>.attn.c_proj.weight, .bias, h.<l>.ln_2.*, h.<l>.mlp.c_fc.*,
 * h.<l>.mlp.c_proj.*, ln_f.weight, ln_f.bias. The output head is wte (tied), as in both programs.
 * llm.c's CPU trainer (train_gpt2.c) reads version 3 only; its CUDA trainer both.
 *
 *     amp_llmc_header h;
 *     amp_llmc_read_header("gpt2_124M.bin", &h, err, sizeof err);     // sizes, to build the model
 *     cfg.layers = h.layers, ... (amp_llmc_model_config does it)
 *     amp_model_create(ctx, &cfg, &m);  amp_ctx_alloc_params(ctx);
 *     amp_llmc_load("gpt2_124M.bin", ctx, err, sizeof err);             // the weights
 *     ... train ...
 *     amp_llmc_save("out.bin", ctx, &h, err, sizeof err);               // atomically */
#ifndef AMP_LLMC_H
#define AMP_LLMC_H

#include <stddef.h>
#include <stdint.h>

#include "nn.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AMP_LLMC_MODEL_MAGIC 20240326
#define AMP_LLMC_HEADER_INTS 256

typedef struct amp_llmc_header {
    int version;          /* 3: fp32 parameters; 5: bf16 */
    int64_t max_seq_len;  /* maxT */
    int64_t vocab;        /* V */
    int64_t layers;       /* L */
    int64_t heads;        /* NH */
    int64_t channels;     /* C */
    int64_t padded_vocab; /* Vp */
} amp_llmc_header;

/* Reads and checks a model file's header: the magic, a version of 3 or 5, sizes in range (each >= 1,
 * C % NH == 0, Vp >= V, no size over 2^24 nor a parameter count over 2^40) and the file's length,
 * exactly the header plus the parameters. Returns AMP_OK, AMP_ERR_IO (cannot open or read),
 * AMP_ERR_FORMAT (anything else wrong, a truncated file included) or AMP_ERR_NULL_POINTER; err gets
 * a one-line message naming the file. */
int amp_llmc_read_header(const char *path, amp_llmc_header *h, char *err, size_t err_size);

/* The parameters a header describes (elements, the tied head once). */
int64_t amp_llmc_num_params(const amp_llmc_header *h);

/* cfg's gpt2 sizes from h: layers, heads, hidden = C, vocab = V, vocab_padded = Vp, positions = maxT;
 * kind becomes AMP_MODEL_GPT2; context is left as it is (it must be at most maxT). */
void amp_llmc_model_config(const amp_llmc_header *h, amp_model_config *cfg);

/* Reads the file's parameters into ctx's parameters of those names and shapes (f32, f16 or bf16:
 * each value converted, rounded to nearest even where narrower), after checking the header and that
 * every one of them is there with its shape and that ctx has no layer past the file's: on any error
 * nothing has been written. Other parameters of ctx are left alone. Returns AMP_OK, the errors of
 * amp_llmc_read_header, AMP_ERR_INVALID_ARGUMENT (ctx lacks a parameter or has it in another shape:
 * the message names it), AMP_ERR_STATE (parameters not allocated) or AMP_ERR_OUT_OF_MEMORY. h_out,
 * when not NULL, gets the header. */
int amp_llmc_load(const char *path, amp_ctx *ctx, amp_llmc_header *h_out, char *err, size_t err_size);

/* Writes ctx's parameters named as above in the layout of h (h->version 3: fp32, 5: bf16 rounded to
 * nearest even), atomically: a temporary file beside path, flushed, then renamed over it; on failure
 * path is untouched. Checks h and the parameters' shapes first, as amp_llmc_load. Returns AMP_OK,
 * AMP_ERR_INVALID_ARGUMENT, AMP_ERR_IO, AMP_ERR_OUT_OF_MEMORY or AMP_ERR_NULL_POINTER. */
int amp_llmc_save(const char *path, amp_ctx *ctx, const amp_llmc_header *h, char *err, size_t err_size);

/* Writes ctx's gpt2 parameters as a safetensors file in Hugging Face's GPT2LMHeadModel layout, fp32:
 * transformer.wte.weight [V, C] (the first h->vocab rows of wte), transformer.wpe.weight,
 * transformer.h.<l>.{ln_1,attn.c_attn,attn.c_proj,ln_2,mlp.c_fc,mlp.c_proj}.{weight,bias} with the
 * four projections' weights transposed to Conv1D's [in, out], transformer.ln_f.*; no lm_head.weight
 * (tied to wte, as save_pretrained writes it). With a config.json of the same sizes (n_embd C,
 * n_layer L, n_head NH, n_positions maxT, vocab_size V) the directory loads with
 * GPT2LMHeadModel.from_pretrained (tests/gpt2/check_hf_export.py). Reads h's vocab and layers only.
 * Atomic (amp_safetensors_write). Returns AMP_OK, AMP_ERR_INVALID_ARGUMENT (a parameter missing),
 * AMP_ERR_OUT_OF_MEMORY, AMP_ERR_IO or AMP_ERR_NULL_POINTER. */
int amp_llmc_save_hf(const char *path, amp_ctx *ctx, const amp_llmc_header *h, char *err, size_t err_size);

#ifdef __cplusplus
}
#endif
#endif /* AMP_LLMC_H */
