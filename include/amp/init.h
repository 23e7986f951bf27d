/* Parameter initialization: a seeded generator, the plain fills (uniform, normal, constant, zeros,
 * ones) and PyTorch's default initialization of each layer kind, the rules amp_model_init applies to
 * the built-in models (amp/nn.h), which it implements with these functions.
 *
 *     amp_rng rng;
 *     amp_rng_seed(&rng, 42);
 *     amp_init_linear(ctx, fc1_weight, fc1_bias, &rng);   // nn.Linear's reset_parameters
 *     amp_init_normal(ctx, embedding, 0.0f, 0.02f, &rng);  // nn.init.normal_(w, 0, 0.02)
 *
 * The generator. amp_rng is xoshiro256** (Blackman and Vigna) whose four state words are the first
 * four outputs of splitmix64 started at the seed: the same seed gives the same numbers on every
 * machine, whatever the thread count or SIMD path. Each uniform draw takes one 64-bit output and
 * keeps its top 53 bits, u = (out >> 11) * 2^-53 in [0, 1). A fill draws from the generator it is
 * given and leaves it after its last draw, so successive fills continue one stream: amp_model_init
 * seeds one generator and fills the parameters in declaration order. The generator is the caller's,
 * none of the context's streams (amp_ctx_random), so initializing never shifts dropout's draws.
 * PyTorch's generator is another one: the distributions are PyTorch's, the values are not.
 *
 * Each fill writes the tensor's elements in row-major order, one value each (uniform: one draw; normal:
 * two), computed in double, rounded to fp32, and that fp32 value rounded once (to nearest even) to the
 * tensor's dtype: F32, F16 or BF16, a parameter or any contiguous tensor. No fill allocates.
 *
 * Every function returns AMP_OK or an error status, and records the error with a message in ctx (ctx
 * may be NULL: the status alone): AMP_ERR_NULL_POINTER (no tensor, or no generator where one is
 * needed), AMP_ERR_STATE (a parameter without memory yet: the message says to call
 * amp_ctx_alloc_params first), AMP_ERR_UNSUPPORTED_DTYPE, AMP_ERR_INVALID_ARGUMENT (a view that is not
 * contiguous, a bound or deviation that is negative or not finite, a weight of the wrong rank). A
 * call refused for its arguments writes nothing: a default initialization checks all its tensors
 * before the first write. */
#ifndef AMP_INIT_H
#define AMP_INIT_H

#include <stdint.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* xoshiro256**'s state; set it with amp_rng_seed. */
typedef struct amp_rng {
    uint64_t s[4];
} amp_rng;

/* Seeds the generator: s[i] = the (i+1)-th output of splitmix64 started at seed. NULL is ignored. */
void amp_rng_seed(amp_rng *rng, uint64_t seed);
/* The next 64 random bits. */
uint64_t amp_rng_next(amp_rng *rng); /* 0 for a NULL rng */
/* The next uniform number in [0, 1): (amp_rng_next >> 11) * 2^-53. */
double amp_rng_uniform(amp_rng *rng);

/* ---- fills ---- */

/* U(low, high): each element is mid + half * (2u - 1), mid = (low + high) / 2, half = (high - low) / 2
 * (in double), so U(-a, a) is (2u - 1) * a. Needs low <= high, both finite. */
int amp_init_uniform(amp_ctx *ctx, amp_tensor *t, float low, float high, amp_rng *rng);
/* N(mean, std^2) by Box-Muller, one value per pair of draws u1, u2: z = sqrt(-2 ln(1 - u1)) *
 * cos(2 pi u2), the element std * z (+ mean when mean is not 0). Needs std >= 0 and finite. */
int amp_init_normal(amp_ctx *ctx, amp_tensor *t, float mean, float std, amp_rng *rng);
/* Every element `value` (rounded once to the tensor's dtype); no draws. */
int amp_init_constant(amp_ctx *ctx, amp_tensor *t, float value);
int amp_init_zeros(amp_ctx *ctx, amp_tensor *t);
int amp_init_ones(amp_ctx *ctx, amp_tensor *t);

/* ---- PyTorch's default initialization, layer by layer ---- */

/* The bound 1/sqrt(fan_in) of PyTorch's kaiming_uniform_(a=sqrt(5)) weights and fan-in biases, in
 * fp32 ((float)(1 / sqrt((double)fan_in))); 0 for fan_in <= 0. */
float amp_init_fan_in_bound(int64_t fan_in);
/* nn.Linear: weight [out, in] and bias [out] (bias may be NULL) both U(-b, b), b = 1/sqrt(in); the
 * weight first, then the bias. */
int amp_init_linear(amp_ctx *ctx, amp_tensor *weight, amp_tensor *bias, amp_rng *rng);
/* nn.Conv2d: weight [out, in, kh, kw] and bias [out] (may be NULL) both U(-b, b), b =
 * 1/sqrt(in * kh * kw); the weight first. */
int amp_init_conv2d(amp_ctx *ctx, amp_tensor *weight, amp_tensor *bias, amp_rng *rng);
/* nn.Embedding: weight [num, dim] N(0, 1). */
int amp_init_embedding(amp_ctx *ctx, amp_tensor *weight, amp_rng *rng);
/* nn.LayerNorm: weight ones, bias zeros (either may be NULL); no draws. */
int amp_init_layer_norm(amp_ctx *ctx, amp_tensor *weight, amp_tensor *bias);
/* nn.LSTM (one layer): w_ih [4H, I], w_hh [4H, H], b_ih [4H], b_hh [4H] (the biases may be NULL),
 * each U(-b, b) with b = 1/sqrt(H), H = w_hh's second dimension, filled in that order. */
int amp_init_lstm(amp_ctx *ctx, amp_tensor *w_ih, amp_tensor *w_hh, amp_tensor *b_ih, amp_tensor *b_hh,
                  amp_rng *rng);

#ifdef __cplusplus
}
#endif
#endif /* AMP_INIT_H */
