/* Internal: a GEMM's fp32 result written into a gradient sink (amp_grad_sink, tensor/autograd.h) by
 * the GEMM's epilogue (gemm/gemm_fused.h), block by block while C is in cache, instead of through a
 * full fp32 scratch copy and amp_grad_accumulate's second pass over it. The epilogue's rounding and
 * acc step are the sink's per-element contract, so the bits are amp_grad_accumulate's. */
#ifndef AMP_GRAD_SINK_GEMM_H
#define AMP_GRAD_SINK_GEMM_H

#include "amp/dtype.h"
#include "../gemm/gemm_fused.h"
#include "../kernels/convert_kernels.h"
#include "../tensor/autograd.h"
#include "../tensor/ctx_internal.h"

/* The epilogue that writes rows of n gradient values starting at element `off` of the sink; a stored
 * master gradient of AMP_STREAM_MIN_BYTES or more goes past the caches. */
static inline amp_gemm_epilogue amp_sink_epilogue(const amp_grad_sink *s, int64_t off, int64_t n) {
    const int64_t ld = n > 0 ? n : 1;
    return (amp_gemm_epilogue){.out = s->out ? (char *)s->out + (size_t)off * amp_dtype_size(s->out_dtype) : NULL,
                               .out_dtype = s->out_dtype,
                               .ldo = ld,
                               .acc = s->acc ? s->acc + off : NULL,
                               .ldacc = ld,
                               .acc_store = s->acc_store,
                               .acc_stream = s->acc_store && (size_t)s->numel * sizeof(float) >= AMP_STREAM_MIN_BYTES};
}

/* The sink's own storage when all it does is store fp32 values: a new fp32 gradient, or an fp32
 * gradient claimed empty that takes fp32 values (acc_store: the acc step stores them unrounded). The
 * GEMM can write C there directly (the epilogue's fp32 -> fp32 rounding and its store are copies);
 * else NULL. A parameter's first fp32 gradient of a step thus skips a pass over it (mlp fp32, one
 * thread: the epilogue's copies were 4% of the step). */
static inline float *amp_sink_direct(const amp_grad_sink *s) {
    if (s->out && !s->acc && s->out_dtype == AMP_F32) return (float *)s->out;
    if (!s->out && s->acc && s->acc_store && s->out_dtype == AMP_F32) return s->acc;
    return NULL;
}

/* A product C [m, n] bound for t's gradient (t's elements in row-major order): amp_grad_gemm_open
 * gives the fp32 buffer to compute C into (the sink's own storage when amp_sink_direct, else scratch;
 * NULL: out of memory, the error is in ctx) and the epilogue that takes C to the sink (a new gradient,
 * an fp32 one, or under autocast the master weight's) with the backward check's note of a parameter's
 * fp32 gradient; amp_grad_gemm_close notes, closes the sink, or without one sends C through
 * amp_grad_accumulate. The bits are amp_grad_accumulate's of the same product. The struct must stay
 * where it is between the two (the epilogue points at its absmax). */
typedef struct amp_grad_gemm {
    amp_grad_sink sink;
    bool sunk, direct, note;
    amp_gemm_epilogue ep;
    _Atomic uint32_t absmax;
} amp_grad_gemm;

static inline float *amp_grad_gemm_open(amp_ctx *ctx, amp_tensor *t, int64_t m, int64_t n, amp_grad_gemm *g) {
    g->sunk = amp_grad_sink_open(ctx, t, &g->sink);
    float *direct = g->sunk ? amp_sink_direct(&g->sink) : NULL;
    g->direct = direct != NULL;
    g->ep = g->sunk && !direct ? amp_sink_epilogue(&g->sink, 0, n) : (amp_gemm_epilogue){.ldo = 1, .ldacc = 1};
    /* the backward check's note: a parameter's fp32 gradient (acc), every element of it written here */
    atomic_init(&g->absmax, 0);
    g->note = g->sunk && g->sink.slot >= 0 && g->sink.acc && m * n == g->sink.numel;
    if (g->note) g->ep.absmax = &g->absmax;
    return direct ? direct : amp_f32_scratch(ctx, m * n);
}

/* Whether C needs the epilogue (g->ep) on its way to the gradient. */
static inline bool amp_grad_gemm_epilogue_needed(const amp_grad_gemm *g) {
    return (g->sunk && !g->direct) || g->note;
}

/* c: the buffer amp_grad_gemm_open gave, holding C unless c is NULL or ctx failed. */
static inline int amp_grad_gemm_close(amp_ctx *ctx, amp_tensor *t, amp_grad_gemm *g, float *c) {
    if (g->note && c && ctx->status == AMP_OK) amp_ctx_grad_note(ctx, g->sink.slot, atomic_load(&g->absmax));
    if (g->sunk) amp_grad_sink_close(ctx, &g->sink);
    else if (c && ctx->status == AMP_OK) amp_grad_accumulate(ctx, t, c);
    return ctx->status;
}

/* Adds C [m, n] = op(A) op(B) into t's gradient (amp_grad_gemm_open's places) by the GEMM's epilogue,
 * or by the GEMM itself when that is a new fp32 gradient, so no fp32 copy of the product goes back to
 * memory to be read again; else through fp32 scratch and amp_grad_accumulate. a_sums: NULL, or [m]
 * fp32 to which the GEMM adds op(A)'s row sums (gemm_fused.h). relu_mask: NULL, or a contiguous
 * [m, n] relu output whose backward the epilogue applies to the product first; grad_mul: NULL, or
 * [m, n] fp32 that the product is multiplied by first (a stored gelu derivative). The caller has made
 * sure that nothing but that backward reads t's gradient (amp_linear_relu, amp_linear_gelu:
 * src/ops/matmul.c). Returns ctx's status; a failed GEMM is reported as op's. */
static inline int amp_gemm_into_grad_masked(amp_ctx *ctx, amp_op op, amp_dtype dt, bool ta, bool tb, int64_t m,
                                            int64_t n, int64_t k, const void *a, int64_t lda, const void *b,
                                            int64_t ldb, amp_tensor *t, float *a_sums, const amp_tensor *relu_mask,
                                            const float *grad_mul) {
    amp_grad_gemm g;
    float *c = amp_grad_gemm_open(ctx, t, m, n, &g);
    g.ep.a_sums = a_sums;
    if (relu_mask)
        g.ep.relu_mask = relu_mask->data, g.ep.relu_mask_dtype = relu_mask->dtype, g.ep.ldmask = n > 0 ? n : 1;
    if (grad_mul) g.ep.grad_mul = grad_mul, g.ep.ldmul = n > 0 ? n : 1;
    if (c) {
        const bool ep = amp_grad_gemm_epilogue_needed(&g) || a_sums || relu_mask || grad_mul;
        const int st = amp_gemm_fused(dt, ta, tb, m, n, k, 1.0f, a, lda > 0 ? lda : 1, b, ldb > 0 ? ldb : 1, 0.0f, c,
                                      n > 0 ? n : 1, ep ? &g.ep : NULL);
        if (st != AMP_OK) amp_ctx_fail(ctx, st, "%s: amp_gemm failed: %s", amp_op_name(op), amp_status_str(st));
    }
    return amp_grad_gemm_close(ctx, t, &g, c);
}

static inline int amp_gemm_into_grad_sums(amp_ctx *ctx, amp_op op, amp_dtype dt, bool ta, bool tb, int64_t m,
                                          int64_t n, int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb,
                                          amp_tensor *t, float *a_sums) {
    return amp_gemm_into_grad_masked(ctx, op, dt, ta, tb, m, n, k, a, lda, b, ldb, t, a_sums, NULL, NULL);
}

/* amp_gemm_into_grad_sums with no row sums */
static inline int amp_gemm_into_grad(amp_ctx *ctx, amp_op op, amp_dtype dt, bool ta, bool tb, int64_t m, int64_t n,
                                     int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb, amp_tensor *t) {
    return amp_gemm_into_grad_sums(ctx, op, dt, ta, tb, m, n, k, a, lda, b, ldb, t, NULL);
}

/* An elementwise backward's way to the same places, in chunks: amp_grad_chunks_open gives the fp32
 * buffer to compute up to `chunk` gradient values at a time into (the sink's own storage, all numel
 * at once, when amp_sink_direct; else scratch), amp_grad_chunk_put sends the `len` values computed
 * for elements [off, off + len) on while they are in cache, amp_grad_chunks_close finishes. Without
 * a sink the whole gradient is staged in scratch and goes through amp_grad_accumulate; each element
 * gets the same operations either way. */
typedef struct amp_grad_chunks {
    amp_grad_sink sink;
    bool sunk;
    float *buf;    /* where the chunks are computed; NULL: out of memory (the error is in ctx) */
    int64_t chunk; /* values per chunk */
    bool whole;    /* buf holds all numel values (direct, or staged for amp_grad_accumulate) */
} amp_grad_chunks;

static inline void amp_grad_chunks_open(amp_ctx *ctx, amp_tensor *t, int64_t numel, int64_t chunk,
                                        amp_grad_chunks *gc) {
    gc->sunk = amp_grad_sink_open(ctx, t, &gc->sink);
    float *direct = gc->sunk ? amp_sink_direct(&gc->sink) : NULL;
    gc->whole = !gc->sunk || direct || chunk >= numel;
    gc->chunk = gc->whole ? numel : chunk;
    gc->buf = direct ? direct : amp_f32_scratch(ctx, gc->chunk);
}

/* Where the values of elements [off, off + len) are computed. */
static inline float *amp_grad_chunk_at(const amp_grad_chunks *gc, int64_t off) {
    return gc->whole ? gc->buf + off : gc->buf;
}

/* amp_grad_chunk_put with the values computed in src instead of where amp_grad_chunk_at says (a
 * thread's own chunk buffer, when several threads send disjoint ranges on at once); src must be
 * where they go when gc is whole. Reads gc only, so threads may call it together. */
static inline void amp_grad_chunk_put_from(const amp_grad_chunks *gc, float *src, int64_t off, int64_t len) {
    if (!gc->sunk || amp_sink_direct(&gc->sink)) return;
    const amp_gemm_epilogue ep = amp_sink_epilogue(&gc->sink, off, len);
    amp_gemm_epilogue_apply(&ep, src, len, 1, len);
}

static inline void amp_grad_chunk_put(amp_grad_chunks *gc, int64_t off, int64_t len) {
    amp_grad_chunk_put_from(gc, amp_grad_chunk_at(gc, off), off, len);
}

static inline void amp_grad_chunks_close(amp_ctx *ctx, amp_tensor *t, amp_grad_chunks *gc) {
    if (gc->sunk) amp_grad_sink_close(ctx, &gc->sink);
    else if (gc->buf && ctx->status == AMP_OK) amp_grad_accumulate(ctx, t, gc->buf);
}

/* An elementwise backward's gradient of t (numel n) in chunks of `chunk` values, the chunks split
 * between threads from min_per_thread values per thread: fn(arg, dst, off, len) computes the values of
 * elements [off, off + len) into dst, which is where they go (the new fp32 gradient itself), or a
 * chunk buffer of the thread's own that is sent on at once while in cache. Each element gets the same
 * operations on any thread. The error, if any, is in ctx. */
typedef void (*amp_grad_chunk_fn)(const void *arg, float *dst, int64_t off, int64_t len);
void amp_grad_chunks_parallel(amp_ctx *ctx, amp_tensor *t, int64_t n, int64_t chunk, int64_t min_per_thread,
                              amp_grad_chunk_fn fn, const void *arg);

#endif /* AMP_GRAD_SINK_GEMM_H */
