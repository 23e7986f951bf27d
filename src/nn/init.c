/* Parameter initialization (amp/init.h): the seeded generator, the fills, and PyTorch's default
 * initialization of each layer kind. */
#include <math.h>

#include "amp/formats.h"
#include "amp/init.h"
#include "../tensor/ctx_internal.h"

/* ---- the generator: xoshiro256** seeded by splitmix64 ---- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void amp_rng_seed(amp_rng *rng, uint64_t seed) {
    if (!rng) return;
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&seed);
}

uint64_t amp_rng_next(amp_rng *rng) {
    if (!rng) return 0;
    uint64_t *s = rng->s;
    const uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = rotl(s[3], 45);
    return out;
}

double amp_rng_uniform(amp_rng *rng) { return (double)(amp_rng_next(rng) >> 11) * 0x1p-53; }

/* ---- fills ---- */

typedef enum fill_kind { FILL_UNIFORM, FILL_NORMAL, FILL_CONSTANT } fill_kind;

/* What to write: uniform mid + half * (2u - 1); normal std * z (+ mean); constant `a`. */
typedef struct fill {
    fill_kind kind;
    double a, b; /* uniform: mid, half; normal: mean, std; constant: the value */
} fill;

static double draw(const fill *f, amp_rng *rng) {
    switch (f->kind) {
    case FILL_UNIFORM:
        return f->a + f->b * (2.0 * amp_rng_uniform(rng) - 1.0);
    case FILL_NORMAL: {
        /* Box-Muller, one value per pair of draws (simple; initialization speed does not matter) */
        const double u1 = 1.0 - amp_rng_uniform(rng), u2 = amp_rng_uniform(rng);
        const double v = sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2) * f->b;
        return f->a != 0.0 ? v + f->a : v; /* mean 0 adds nothing, not even to a zero's sign */
    }
    case FILL_CONSTANT:
        break;
    }
    return f->a;
}

/* AMP_OK when t can be filled; else records why (in ctx, when given) and returns the status. */
static int check_tensor(amp_ctx *ctx, const char *fn, const amp_tensor *t) {
    int st = AMP_OK;
    if (!t) {
        st = AMP_ERR_NULL_POINTER;
        if (ctx) amp_ctx_fail(ctx, st, "%s: no tensor (NULL)", fn);
    } else if (t->dtype != AMP_F32 && t->dtype != AMP_F16 && t->dtype != AMP_BF16) {
        st = AMP_ERR_UNSUPPORTED_DTYPE;
        if (ctx) amp_ctx_fail(ctx, st, "%s: %s is %s; fills write f32, f16 or bf16", fn, t->name ? t->name : "tensor",
                              amp_dtype_name(t->dtype));
    } else if (!t->data && amp_tensor_numel(t) > 0) {
        st = AMP_ERR_STATE;
        if (ctx) amp_ctx_fail(ctx, st, "%s: parameter '%s' has no memory yet: call amp_ctx_alloc_params(ctx) after "
                              "declaring the parameters and before initializing them", fn, t->name ? t->name : "");
    } else if (!amp_tensor_is_contiguous(t)) {
        st = AMP_ERR_INVALID_ARGUMENT;
        if (ctx) amp_ctx_fail(ctx, st, "%s: the tensor is a view that is not contiguous", fn);
    }
    return st;
}

/* Writes t's elements in row-major order from f, through an fp32 chunk rounded once to t's dtype. */
static int fill_tensor(amp_tensor *t, const fill *f, amp_rng *rng) {
    enum { CHUNK = 256 };
    float buf[CHUNK];
    const int64_t n = amp_tensor_numel(t);
    const size_t es = amp_dtype_size(t->dtype);
    for (int64_t i = 0; i < n; i += CHUNK) {
        const int64_t len = n - i < CHUNK ? n - i : CHUNK;
        for (int64_t j = 0; j < len; j++) buf[j] = (float)draw(f, rng);
        const int st = amp_convert((unsigned char *)t->data + (size_t)i * es, t->dtype, buf, AMP_F32, (size_t)len);
        if (st != AMP_OK) return st;
    }
    return AMP_OK;
}

static int fill_checked(amp_ctx *ctx, const char *fn, amp_tensor *t, const fill *f, amp_rng *rng) {
    int st = check_tensor(ctx, fn, t);
    if (st == AMP_OK && !rng && f->kind != FILL_CONSTANT) {
        st = AMP_ERR_NULL_POINTER;
        if (ctx) amp_ctx_fail(ctx, st, "%s: no generator (NULL): seed one with amp_rng_seed", fn);
    }
    return st == AMP_OK ? fill_tensor(t, f, rng) : st;
}

/* AMP_ERR_INVALID_ARGUMENT, recorded with fn's name, unless ok. */
static int need(amp_ctx *ctx, bool ok, const char *fn, const char *what) {
    if (ok) return AMP_OK;
    if (ctx) amp_ctx_fail(ctx, AMP_ERR_INVALID_ARGUMENT, "%s: %s", fn, what);
    return AMP_ERR_INVALID_ARGUMENT;
}

int amp_init_uniform(amp_ctx *ctx, amp_tensor *t, float low, float high, amp_rng *rng) {
    const char *fn = "amp_init_uniform";
    int st = need(ctx, isfinite(low) && isfinite(high) && low <= high, fn, "needs finite bounds low <= high");
    const fill f = {FILL_UNIFORM, ((double)low + (double)high) * 0.5, ((double)high - (double)low) * 0.5};
    return st == AMP_OK ? fill_checked(ctx, fn, t, &f, rng) : st;
}

int amp_init_normal(amp_ctx *ctx, amp_tensor *t, float mean, float std, amp_rng *rng) {
    const char *fn = "amp_init_normal";
    int st = need(ctx, isfinite(mean) && isfinite(std) && std >= 0.0f, fn, "needs a finite mean and std >= 0");
    const fill f = {FILL_NORMAL, mean, std};
    return st == AMP_OK ? fill_checked(ctx, fn, t, &f, rng) : st;
}

int amp_init_constant(amp_ctx *ctx, amp_tensor *t, float value) {
    const fill f = {FILL_CONSTANT, value, 0.0};
    return fill_checked(ctx, "amp_init_constant", t, &f, NULL);
}

int amp_init_zeros(amp_ctx *ctx, amp_tensor *t) {
    const fill f = {FILL_CONSTANT, 0.0, 0.0};
    return fill_checked(ctx, "amp_init_zeros", t, &f, NULL);
}

int amp_init_ones(amp_ctx *ctx, amp_tensor *t) {
    const fill f = {FILL_CONSTANT, 1.0, 0.0};
    return fill_checked(ctx, "amp_init_ones", t, &f, NULL);
}

/* ---- PyTorch's defaults ---- */

float amp_init_fan_in_bound(int64_t fan_in) { return fan_in > 0 ? (float)(1.0 / sqrt((double)fan_in)) : 0.0f; }

/* Checks the tensors of one default initialization (NULL entries of `optional` are skipped) before
 * any is written, and the generator. */
static int check_all(amp_ctx *ctx, const char *fn, amp_tensor *const *ts, int n, const bool *optional, amp_rng *rng) {
    for (int i = 0; i < n; i++) {
        if (!ts[i] && optional[i]) continue;
        const int st = check_tensor(ctx, fn, ts[i]);
        if (st != AMP_OK) return st;
    }
    if (rng) return AMP_OK;
    if (ctx) amp_ctx_fail(ctx, AMP_ERR_NULL_POINTER, "%s: no generator (NULL): seed one with amp_rng_seed", fn);
    return AMP_ERR_NULL_POINTER;
}

/* U(-bound, bound) into each non-NULL tensor of ts, in order (checked already). */
static int fill_uniform_all(amp_tensor *const *ts, int n, float bound, amp_rng *rng) {
    const fill f = {FILL_UNIFORM, 0.0, bound};
    for (int i = 0; i < n; i++) {
        const int st = ts[i] ? fill_tensor(ts[i], &f, rng) : AMP_OK;
        if (st != AMP_OK) return st;
    }
    return AMP_OK;
}

/* A weight of rank `ndim` with a bias (or none) of its first dimension. */
static int check_weight_bias(amp_ctx *ctx, const char *fn, amp_tensor *weight, amp_tensor *bias, int ndim,
                             amp_rng *rng) {
    int st = check_all(ctx, fn, (amp_tensor *const[]){weight, bias}, 2, (const bool[]){false, true}, rng);
    if (st != AMP_OK) return st;
    st = need(ctx, weight->ndim == ndim, fn, ndim == 2 ? "the weight must be [out, in]" : "the weight must be [out, in, kh, kw]");
    if (st == AMP_OK && bias)
        st = need(ctx, bias->ndim == 1 && bias->shape[0] == weight->shape[0], fn, "the bias must be [out]");
    return st;
}

int amp_init_linear(amp_ctx *ctx, amp_tensor *weight, amp_tensor *bias, amp_rng *rng) {
    const int st = check_weight_bias(ctx, "amp_init_linear", weight, bias, 2, rng);
    if (st != AMP_OK) return st;
    return fill_uniform_all((amp_tensor *const[]){weight, bias}, 2, amp_init_fan_in_bound(weight->shape[1]), rng);
}

int amp_init_conv2d(amp_ctx *ctx, amp_tensor *weight, amp_tensor *bias, amp_rng *rng) {
    const int st = check_weight_bias(ctx, "amp_init_conv2d", weight, bias, 4, rng);
    if (st != AMP_OK) return st;
    const int64_t fan_in = weight->shape[1] * weight->shape[2] * weight->shape[3];
    return fill_uniform_all((amp_tensor *const[]){weight, bias}, 2, amp_init_fan_in_bound(fan_in), rng);
}

int amp_init_embedding(amp_ctx *ctx, amp_tensor *weight, amp_rng *rng) {
    const char *fn = "amp_init_embedding";
    int st = check_all(ctx, fn, (amp_tensor *const[]){weight}, 1, (const bool[]){false}, rng);
    if (st == AMP_OK) st = need(ctx, weight->ndim == 2, fn, "the weight must be [num, dim]");
    const fill f = {FILL_NORMAL, 0.0, 1.0};
    return st == AMP_OK ? fill_tensor(weight, &f, rng) : st;
}

int amp_init_layer_norm(amp_ctx *ctx, amp_tensor *weight, amp_tensor *bias) {
    const char *fn = "amp_init_layer_norm";
    for (int i = 0; i < 2; i++) {
        const amp_tensor *t = i ? bias : weight;
        const int st = t ? check_tensor(ctx, fn, t) : AMP_OK;
        if (st != AMP_OK) return st;
    }
    const fill one = {FILL_CONSTANT, 1.0, 0.0}, zero = {FILL_CONSTANT, 0.0, 0.0};
    int st = weight ? fill_tensor(weight, &one, NULL) : AMP_OK;
    if (st == AMP_OK && bias) st = fill_tensor(bias, &zero, NULL);
    return st;
}

int amp_init_lstm(amp_ctx *ctx, amp_tensor *w_ih, amp_tensor *w_hh, amp_tensor *b_ih, amp_tensor *b_hh,
                  amp_rng *rng) {
    const char *fn = "amp_init_lstm";
    amp_tensor *const ts[4] = {w_ih, w_hh, b_ih, b_hh};
    int st = check_all(ctx, fn, ts, 4, (const bool[]){false, false, true, true}, rng);
    if (st == AMP_OK)
        st = need(ctx, w_hh->ndim == 2 && w_hh->shape[0] == 4 * w_hh->shape[1] && w_ih->ndim == 2 &&
                           w_ih->shape[0] == w_hh->shape[0],
                  fn, "the weights must be w_ih [4H, I] and w_hh [4H, H]");
    for (int i = 2; i < 4 && st == AMP_OK; i++)
        if (ts[i]) st = need(ctx, ts[i]->ndim == 1 && ts[i]->shape[0] == w_hh->shape[0], fn, "the biases must be [4H]");
    return st == AMP_OK ? fill_uniform_all(ts, 4, amp_init_fan_in_bound(w_hh->shape[1]), rng) : st;
}
