/* Text generation: a trained gpt or gpt2 (amp/nn.h) run token by token with a key/value cache, and the
 * sampling rules that pick the next token from its logits.
 *
 *     amp_generator *g;
 *     amp_generator_create(model, AMP_BF16, &g);            // compute as under amp-bf16's autocast
 *     amp_generator_feed(g, prompt, n, logits);             // prefill: logits [vocab] of the last token
 *     amp_rng rng;  amp_rng_seed(&rng, seed);
 *     amp_sampling s = {.temperature = 0.8f, .top_k = 40};
 *     for (...) { int32_t t = amp_sample_token(logits, vocab, &s, &rng);  amp_generator_feed(g, &t, 1, logits); }
 *     amp_generator_free(g);
 *
 * The computation. Feeding n tokens at positions p .. p+n-1 runs the model's own layers (the ops of
 * amp_model_forward, with grad mode off) on those n tokens only; each block's attention takes the
 * keys and values of positions 0 .. p+n-1 from the cache, where every earlier feed left its own. The
 * cache holds, per layer, K and V of `context` positions in the dtype the qkv projection produced:
 * the autocast dtype (bf16, fp16) under autocast, else the parameters' dtype. The attention of the new
 * rows is amp_causal_self_attention's arithmetic restricted to them: S = q K^T / sqrt(D) by amp_gemm in
 * that dtype with fp32 accumulation, the causal mask and a max-subtracted softmax in fp32 with the
 * same row kernels, P rounded to that dtype, O = P V rounded once. So the logits of position t equal
 * row t of amp_model_forward's logits on a sequence starting with the same tokens, under the same
 * autocast dtype (tests/test_generate.c checks it at every position for fp32, bf16 and fp16).
 *
 * The context. The model's learned position embedding has `context` rows (gpt2: `positions` when
 * set, which may exceed the context it trained on), so a sequence holds at most that many positions
 * (amp_generator_context). amp_generator_feed refuses to go past them (AMP_ERR_INVALID_ARGUMENT);
 * amp_generator_append slides instead: when the cache is full it starts over from position 0 with the
 * last context/2 tokens fed again (one prefill per context/2 new tokens), so each token past the
 * context is predicted from between context/2 and context - 1 tokens before it. (llm.c's sampler
 * recomputes the whole window of the last context tokens for every new token, with no cache;
 * amp_generator_recompute does that, the baseline the cache is measured against.)
 *
 * Contexts and threads. The generator runs its ops in the model's context and ends every feed with
 * amp_ctx_reset of it: use it between training steps, never while a graph of that context is alive
 * (tensors of the current step go stale). Not thread-safe; one generator per model at a time. Errors
 * are recorded in the model's context (amp_ctx_error) as every op's are. */
#ifndef AMP_GENERATE_H
#define AMP_GENERATE_H

#include <stdint.h>

#include "dtype.h"
#include "init.h"
#include "nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct amp_generator amp_generator;

/* A generator for model m (a gpt or gpt2, with its GELU and its head, tied or not; other kinds are
 * AMP_ERR_INVALID_ARGUMENT: the lstm's recurrence would need a cache of its own) computing under autocast to `compute`: AMP_BF16 or AMP_F16
 * (the amp-bf16 and amp-fp16 presets' autocast_dtype), or AMP_F32 for no autocast (ops run in the
 * parameters' dtype). Needs the parameters allocated. Returns AMP_OK, AMP_ERR_NULL_POINTER,
 * AMP_ERR_INVALID_ARGUMENT, AMP_ERR_UNSUPPORTED_DTYPE, AMP_ERR_STATE (parameters not allocated) or
 * AMP_ERR_OUT_OF_MEMORY; *out is NULL on failure. */
int amp_generator_create(amp_model *m, amp_dtype compute, amp_generator **out);
/* NULL is fine. */
void amp_generator_free(amp_generator *g);
/* Empties the cache: the next token fed is at position 0. */
void amp_generator_reset(amp_generator *g);
/* Tokens in the cache (the next position), the model's context and vocabulary. */
int64_t amp_generator_position(const amp_generator *g);
int64_t amp_generator_context(const amp_generator *g);
int64_t amp_generator_vocab(const amp_generator *g);

/* Feeds tokens[0..n) at the next n positions (a prompt's prefill, or one token), writing the fp32
 * logits of the last one to logits[vocab] (may be NULL). n >= 1, ids in [0, vocab), and position + n
 * <= context, else AMP_ERR_INVALID_ARGUMENT and nothing changes. Returns AMP_OK or the error of an
 * op (recorded in the model's context; the cache is then reset). */
int amp_generator_feed(amp_generator *g, const int32_t *tokens, int64_t n, float *logits);
/* As amp_generator_feed, writing the logits of every token fed: logits[n, vocab]. */
int amp_generator_feed_all(amp_generator *g, const int32_t *tokens, int64_t n, float *logits);
/* Appends one token to the sequence and writes the logits of the next: amp_generator_feed of
 * history[len - 1], except that a full cache slides (see above) and an empty one (after a reset or a
 * failure) is filled by amp_generator_recompute. history[0..len) is every token of the sequence so
 * far, the new one last, and the cache must hold the ones before it; len >= 1. */
int amp_generator_append(amp_generator *g, const int32_t *history, int64_t len, float *logits);
/* The cache-free way: resets and feeds the last min(len, context) tokens of history[0..len), writing
 * the logits of the last (llm.c's sampler; `amp sample --no-cache`). */
int amp_generator_recompute(amp_generator *g, const int32_t *history, int64_t len, float *logits);

/* How the next token is drawn from logits. */
typedef struct amp_sampling {
    float temperature; /* 0: greedy (the argmax, the lowest id on ties); > 0: softmax(logits / T) */
    int64_t top_k;     /* > 0: only the k largest logits (ties at the k-th by lower id) take part; 0: all */
} amp_sampling;

/* The next token: greedy when temperature is 0 (or top_k is 1), else one draw u = amp_rng_uniform
 * from the softmax of the top_k logits divided by the temperature: the weights exp((logit - max) / T)
 * in double, and the first candidate in id order where their running sum passes u times their total.
 * The same logits, settings and generator state give the same token on every machine. NaN logits
 * never win (all NaN: 0); an infinite maximum is taken greedily. Returns the id, or -1 for a NULL
 * argument, vocab < 1, a negative or non-finite temperature, top_k < 0, rng NULL when drawing, or no
 * memory for top_k's list. */
int32_t amp_sample_token(const float *logits, int64_t vocab, const amp_sampling *s, amp_rng *rng);

#ifdef __cplusplus
}
#endif
#endif /* AMP_GENERATE_H */
