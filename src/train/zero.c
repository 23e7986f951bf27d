/* ZeRO stage 1 (amp/train.h's zero_stage, docs/distributed.md): each rank keeps the optimizer state
 * of its slice of the parameters only.
 *
 * The slice. The parameters' elements, taken one after another in the context's order (the
 * optimizer's flat order), are cut at E_p = floor(p * total / N) rounded down to a multiple of
 * ZERO_ALIGN, E_N = total; rank p owns [E_p, E_p+1). In the flat parameter and gradient buffers
 * (which hold the parameters at their offsets, with zero padding between them) that is one
 * contiguous byte range per rank, padding included: the reduce-scatter and the allgather work on
 * those ranges. The part of each parameter in the slice is a piece; the rank's own context holds one
 * 1-D parameter per piece (its values, its gradient) and the optimizer runs over that context, so
 * every update rule, master weight, the scaler and stochastic rounding (numbered by the global
 * element index) work on a slice as they do on a whole model.
 *
 * A step: the gradients summed into the rank's range (reduce-scatter), copied into the pieces, then
 * as one process would: unscale and check (the flag all-reduced with MAX), clip to the global norm
 * (each rank's fp64 sum of squares all-reduced, then sqrt), update; the pieces are written back into
 * the parameter buffer and the buffer all-gathered. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "allreduce_fp8.h"
#include "train_internal.h"
#include "../core/alloc_internal.h"
#include "../optim/optim_shard.h"

enum { ZERO_ALIGN = 16 }; /* slice boundaries: multiples of 16 elements (64 bytes of fp32) */

typedef struct zero_piece {
    size_t param;        /* the whole model's parameter */
    int64_t start, len;  /* its elements [start, start + len) */
    amp_tensor *t;       /* the piece in the shard's context */
} zero_piece;

typedef struct amp_train_zero {
    amp_ctx *ctx;          /* the shard's context: the pieces and their gradients */
    amp_dtype dtype;       /* of every parameter and gradient */
    size_t *elems;         /* [ranks + 1]: E_p */
    size_t *counts;        /* [ranks]: values of each rank's range of the buffers */
    size_t *bytes;         /* [ranks]: bytes of each rank's range */
    size_t begin;          /* this rank's range's first byte */
    zero_piece *pieces;
    size_t n_pieces;
    uint64_t *words;       /* the allgather's emulation (a backend without allgather) */
    size_t n_words;
} amp_train_zero;

static int comm_fail(amp_train_run_state *r, int st, const char *what) {
    const amp_comm *c = r->cfg.comm;
    const char *msg = c && c->error ? c->error(c) : "";
    return amp_train_fail(r, st != AMP_OK ? st : AMP_ERR_IO, "rank %d of %d: %s: %s", r->rank, r->ranks, what,
                          msg && msg[0] ? msg : amp_status_str(st));
}

/* ---- the collectives, native or emulated (amp/comm.h) ---- */

/* The sums of this rank's range of buf (values of `dtype`, sent as `wire`), native or emulated. */
static int sum_ranges(amp_train_run_state *r, void *buf, amp_dtype dtype, amp_dtype wire) {
    amp_comm *c = r->cfg.comm;
    const amp_train_zero *z = r->zero;
    if (c->reduce_scatter) return c->reduce_scatter(c, buf, z->counts, dtype, wire);
    size_t n = 0;
    for (int p = 0; p < r->ranks; p++) n += z->counts[p];
    int st = c->start_grads(c, buf, n, dtype, wire);
    if (st == AMP_OK) st = c->wait_grads(c);
    return st;
}

static int reduce_scatter(amp_train_run_state *r, void *buf) {
    const amp_train_zero *z = r->zero;
    const amp_dtype wire = z->dtype == AMP_F32 ? r->cfg.grad_wire : z->dtype;
    size_t total = 0;
    for (int p = 0; p < r->ranks; p++) total += z->counts[p];
    int st;
    if (wire != AMP_F8E5M2) {
        r->wire_bytes += amp_wire_bytes(total, amp_dtype_size(wire), r->ranks) / 2;
        st = sum_ranges(r, buf, z->dtype, wire);
    } else {
        /* e5m2 (allreduce_fp8.h): one scale per parameter over the whole buffer, the bytes
           reduce-scattered, this rank's range decoded (an inf or NaN anywhere: the fp32 sum) */
        amp_wire_fp8 *w = &r->wire8[0];
        const size_t n_seg = amp_ctx_num_params(r->ctx), lo = z->begin / sizeof(float);
        st = amp_wire_fp8_encode(w, r->cfg.comm, buf, total, r->wire8_flat, n_seg);
        r->wire_bytes += amp_wire_bytes(n_seg, sizeof(double), r->ranks) +
                         amp_wire_bytes(total, w->fp32 ? sizeof(float) : 1, r->ranks) / 2;
        if (st == AMP_OK && total > 0)
            st = w->fp32 ? sum_ranges(r, buf, AMP_F32, AMP_F32) : sum_ranges(r, w->bytes, AMP_F8E5M2, AMP_F8E5M2);
        if (st == AMP_OK) st = amp_wire_fp8_decode(w, lo, lo + z->counts[r->rank]);
    }
    return st == AMP_OK ? AMP_OK : comm_fail(r, st, "reduce-scattering the gradients");
}

/* Every rank's range of buf (bytes per rank: counts) to every rank. */
static int allgather(amp_train_run_state *r, void *buf, const size_t *counts, const char *what) {
    amp_comm *c = r->cfg.comm;
    amp_train_zero *z = r->zero;
    if (!c) return AMP_OK;
    if (c->allgather) {
        const int st = c->allgather(c, buf, counts);
        return st == AMP_OK ? AMP_OK : comm_fail(r, st, what);
    }
    size_t total = 0, begin = 0;
    for (int p = 0; p < r->ranks; p++) {
        if (p == r->rank) begin = total;
        total += counts[p];
    }
    const size_t words = (total + 7) / 8;
    if (words > z->n_words) {
        amp_free(z->words);
        z->n_words = 0;
        if (!(z->words = amp_malloc(words * sizeof *z->words)))
            return amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY, "out of memory for the allgather");
        z->n_words = words;
    }
    memset(z->words, 0, words * sizeof *z->words);
    memcpy((unsigned char *)z->words + begin, (unsigned char *)buf + begin, counts[r->rank]);
    const int st = c->allreduce_u64(c, z->words, words, AMP_COMM_SUM);
    if (st != AMP_OK) return comm_fail(r, st, what);
    memcpy(buf, z->words, total);
    return AMP_OK;
}

/* ---- set-up ---- */

/* The byte offset of global element e in the parameter (or gradient) buffer of `bytes` bytes. */
static size_t byte_of(const amp_ctx *ctx, size_t e, size_t total, size_t bytes) {
    if (e >= total) return bytes;
    size_t first = 0;
    for (size_t k = 0;; k++) {
        const amp_tensor *p = amp_ctx_param(ctx, k);
        const size_t numel = (size_t)amp_tensor_numel(p);
        if (e < first + numel) return amp_ctx_param_offset(ctx, k) + (e - first) * amp_dtype_size(p->dtype);
        first += numel;
    }
}

/* The slices' boundaries, ranges and this rank's pieces; checks the model fits the scheme. */
static int plan(amp_train_run_state *r, amp_train_zero *z) {
    const size_t n = amp_ctx_num_params(r->ctx), ranks = (size_t)r->ranks;
    size_t total = 0, pbytes = 0, gbytes = 0;
    z->dtype = n ? amp_ctx_param(r->ctx, 0)->dtype : AMP_F32;
    for (size_t k = 0; k < n; k++) {
        const amp_tensor *p = amp_ctx_param(r->ctx, k);
        if (p->dtype != z->dtype || !p->grad || p->grad->dtype != p->dtype)
            return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT,
                                  "--zero 1 needs every parameter and gradient in one dtype (parameter %zu is %s, "
                                  "the first %s)",
                                  k, amp_dtype_name(p->dtype), amp_dtype_name(z->dtype));
        total += (size_t)amp_tensor_numel(p);
    }
    amp_ctx_param_memory(r->ctx, &pbytes);
    amp_ctx_grad_memory(r->ctx, &gbytes);
    const size_t es = amp_dtype_size(z->dtype);
    if (pbytes != gbytes || gbytes % es != 0)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "--zero 1: the gradient buffer (%zu bytes) does not mirror "
                              "the parameter buffer (%zu bytes)", gbytes, pbytes);
    if (total < ranks * ZERO_ALIGN)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT,
                              "--zero 1: %zu parameters are too few to split over %d ranks", total, r->ranks);
    z->elems = amp_calloc(ranks + 1, sizeof *z->elems);
    z->counts = amp_calloc(ranks, sizeof *z->counts);
    z->bytes = amp_calloc(ranks, sizeof *z->bytes);
    z->pieces = amp_calloc(n ? n : 1, sizeof *z->pieces);
    if (!z->elems || !z->counts || !z->bytes || !z->pieces)
        return amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY, "out of memory for the optimizer's slices");
    for (size_t p = 1; p < ranks; p++) {
        const size_t e = total / ranks * p + total % ranks * p / ranks; /* floor(p * total / ranks) */
        z->elems[p] = e / ZERO_ALIGN * ZERO_ALIGN;
    }
    z->elems[ranks] = total;
    for (size_t p = 0; p < ranks; p++) {
        const size_t b0 = p == 0 ? 0 : byte_of(r->ctx, z->elems[p], total, gbytes);
        const size_t b1 = byte_of(r->ctx, z->elems[p + 1], total, gbytes);
        z->bytes[p] = b1 - b0;
        z->counts[p] = (b1 - b0) / es;
        if ((int)p == r->rank) z->begin = b0;
    }
    const size_t lo = z->elems[r->rank], hi = z->elems[r->rank + 1];
    size_t first = 0;
    for (size_t k = 0; k < n; k++) {
        const size_t numel = (size_t)amp_tensor_numel(amp_ctx_param(r->ctx, k));
        const size_t a = first > lo ? first : lo, b = first + numel < hi ? first + numel : hi;
        if (a < b)
            z->pieces[z->n_pieces++] = (zero_piece){.param = k, .start = (int64_t)(a - first), .len = (int64_t)(b - a)};
        first += numel;
    }
    return AMP_OK;
}

/* The slice's context: one 1-D parameter per piece, holding the piece's values. */
static int make_shard_ctx(amp_train_run_state *r, amp_train_zero *z) {
    amp_ctx_config cc = amp_ctx_default_config();
    cc.arena_bytes = 4096; /* nothing is computed in it */
    int st = amp_ctx_create(&cc, &z->ctx);
    for (size_t i = 0; i < z->n_pieces && st == AMP_OK; i++) {
        const amp_tensor *p = amp_ctx_param(r->ctx, z->pieces[i].param);
        z->pieces[i].t = amp_param_new(z->ctx, p->name, z->dtype, 1, &z->pieces[i].len);
        if (!z->pieces[i].t) st = amp_ctx_status(z->ctx) != AMP_OK ? amp_ctx_status(z->ctx) : AMP_ERR_OUT_OF_MEMORY;
    }
    if (st == AMP_OK) st = amp_ctx_alloc_params(z->ctx);
    if (st != AMP_OK) return amp_train_fail(r, st, "--zero 1: cannot make the slice's parameters: %s", amp_status_str(st));
    const size_t es = amp_dtype_size(z->dtype);
    for (size_t i = 0; i < z->n_pieces; i++) {
        const zero_piece *q = &z->pieces[i];
        const amp_tensor *p = amp_ctx_param(r->ctx, q->param);
        memcpy(q->t->data, (const unsigned char *)p->data + (size_t)q->start * es, (size_t)q->len * es);
    }
    return AMP_OK;
}

/* The slice's share of every state role of `full` into `shard` (or back, when to_full). */
static void copy_state(amp_train_zero *z, amp_optimizer *full, amp_optimizer *shard, bool to_full) {
    static const amp_optim_state roles[] = {AMP_OPTIM_STATE_MASTER, AMP_OPTIM_STATE_MOMENTUM, AMP_OPTIM_STATE_EXP_AVG,
                                            AMP_OPTIM_STATE_EXP_AVG_SQ};
    for (size_t k = 0; k < sizeof roles / sizeof roles[0]; k++)
        for (size_t i = 0; i < z->n_pieces; i++) {
            float *f = amp_optimizer_state(full, roles[k], z->pieces[i].param);
            float *s = amp_optimizer_state(shard, roles[k], i);
            if (!f || !s) continue;
            if (to_full) memcpy(f + z->pieces[i].start, s, (size_t)z->pieces[i].len * sizeof *s);
            else memcpy(s, f + z->pieces[i].start, (size_t)z->pieces[i].len * sizeof *s);
        }
}

static void zero_release(amp_train_zero *z) {
    if (!z) return;
    amp_ctx_free(z->ctx);
    amp_free(z->elems);
    amp_free(z->counts);
    amp_free(z->bytes);
    amp_free(z->pieces);
    amp_free(z->words);
    amp_free(z);
}

int amp_train_zero_setup(amp_train_run_state *r) {
    if (r->cfg.zero_stage != 1) return AMP_OK;
    amp_train_zero *z = amp_calloc(1, sizeof *z);
    if (!z) return amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY, "out of memory for the optimizer's slices");
    r->zero = z; /* plan and the collectives read it; taken back on failure */
    int st = plan(r, z);
    if (st == AMP_OK) st = make_shard_ctx(r, z);
    amp_optimizer *shard = NULL;
    if (st == AMP_OK && (st = amp_optimizer_create(z->ctx, &r->cfg.optim, &shard)) != AMP_OK)
        st = amp_train_fail(r, st, "--zero 1: cannot make the slice's optimizer: %s", amp_status_str(st));
    if (st != AMP_OK) {
        r->zero = NULL;
        zero_release(z);
        return st;
    }
    optim_shard_set_base_index(shard, z->elems[r->rank]);
    amp_optimizer_set_lr(shard, amp_optimizer_get_lr(r->opt));
    amp_optimizer_set_step_count(shard, amp_optimizer_step_count(r->opt));
    copy_state(z, r->opt, shard, false); /* a resumed run's state, masters included */
    amp_optimizer_free(r->opt);
    r->opt = shard;
    return AMP_OK;
}

void amp_train_zero_free(amp_train_run_state *r) {
    zero_release(r->zero);
    r->zero = NULL;
}

/* ---- a step ---- */

int amp_train_zero_reduce(amp_train_run_state *r, bool whole) {
    amp_train_zero *z = r->zero;
    if (!z || !r->cfg.comm) return AMP_OK;
    unsigned char *grads = amp_ctx_grad_memory(r->ctx, NULL); /* writes amp_zero_grad's pending zeros */
    int st = reduce_scatter(r, grads);
    if (st == AMP_OK && whole) st = allgather(r, grads, z->bytes, "gathering the gradients");
    return st;
}

/* The summed gradients of the pieces, from the whole model's gradient buffer. */
static void take_grads(amp_train_run_state *r) {
    const amp_train_zero *z = r->zero;
    const size_t es = amp_dtype_size(z->dtype);
    amp_ctx_grad_memory(r->ctx, NULL); /* writes amp_zero_grad's pending zeros */
    for (size_t i = 0; i < z->n_pieces; i++) {
        const zero_piece *q = &z->pieces[i];
        const amp_tensor *p = amp_ctx_param(r->ctx, q->param);
        memcpy(q->t->grad->data, (const unsigned char *)p->grad->data + (size_t)q->start * es, (size_t)q->len * es);
    }
    amp_ctx_grads_changed(z->ctx);
}

/* Clipping to the global norm: each rank's fp64 sum of squares of its slice, summed over the ranks
 * (one all-reduce), handed to the slice's next clip or fused step, which then clips with the factor
 * of the whole model's norm. */
static int give_global_norm(amp_train_run_state *r) {
    double sum = optim_grad_sum_of_squares(r->opt);
    const int st = amp_train_dist_sum(r, &sum, 1);
    if (st == AMP_OK) optim_shard_set_norm_sum(r->opt, sum);
    return st;
}

static int scaler_failure(amp_train_run_state *r, int st) {
    return amp_train_fail(r, st, "scaler at step %lld: %s", (long long)r->step + 1, amp_scaler_error(r->scaler));
}

/* The scaler's half of the step on the slice: unscale, agree on the flag, clip to the global norm,
 * update (or skip), and the new scale. Without a communicator the slice is the model and this is
 * train.c's one-process step. */
static int scaled_update(amp_train_run_state *r) {
    const amp_train_config *c = &r->cfg;
    amp_step_report rep;
    int st;
    if (c->comm) {
        if ((st = amp_scaler_unscale(r->scaler, r->opt)) != AMP_OK) return scaler_failure(r, st);
        const float found = amp_scaler_found_inf(r->scaler, r->opt);
        bool any = false;
        if ((st = amp_train_dist_any_found(r, found, &any)) != AMP_OK) return st;
        if (any && found == 0.0f && (st = amp_scaler_record_found_inf(r->scaler, r->opt)) != AMP_OK)
            return scaler_failure(r, st);
        if (!any && c->clip > 0 && (st = give_global_norm(r)) != AMP_OK) return st;
    }
    if ((st = amp_scaler_step_fused(r->scaler, r->opt, c->clip, &rep)) != AMP_OK) return scaler_failure(r, st);
    st = c->scaler == AMP_SCALER_STATIC ? amp_scaler_update_to(r->scaler, c->static_scale) : amp_scaler_update(r->scaler);
    if (st != AMP_OK) return scaler_failure(r, st);
    r->skipped += rep.skipped;
    return AMP_OK;
}

int amp_train_zero_update(amp_train_run_state *r) {
    amp_train_zero *z = r->zero;
    const amp_train_config *c = &r->cfg;
    int st;
    take_grads(r);
    if (c->scaler != AMP_SCALER_OFF) {
        if ((st = scaled_update(r)) != AMP_OK) return st;
    } else {
        if (c->clip > 0) {
            if ((st = give_global_norm(r)) != AMP_OK) return st;
            amp_optimizer_clip_grad_norm(r->opt, c->clip);
        }
        amp_optimizer_step(r->opt);
    }
    /* The updated pieces into the parameter buffer, then every rank's range to every rank. */
    unsigned char *params = amp_ctx_param_memory(r->ctx, NULL);
    const size_t es = amp_dtype_size(z->dtype);
    for (size_t i = 0; i < z->n_pieces; i++) {
        const zero_piece *q = &z->pieces[i];
        memcpy((unsigned char *)amp_ctx_param(r->ctx, q->param)->data + (size_t)q->start * es, q->t->data,
               (size_t)q->len * es);
    }
    return allgather(r, params, z->bytes, "gathering the parameters");
}

/* ---- checkpoints ---- */

int amp_train_zero_checkpoint(amp_train_run_state *r) {
    amp_train_zero *z = r->zero;
    if (!z) return r->rank == 0 ? amp_train_save_checkpoint(r) : AMP_OK;
    const size_t ranks = (size_t)r->ranks, total = z->elems[ranks];
    amp_optimizer *full = NULL;
    int st = AMP_OK;
    if (r->rank == 0 && (st = amp_optimizer_create(r->ctx, &r->cfg.optim, &full)) != AMP_OK)
        st = amp_train_fail(r, st, "checkpoint: cannot gather the optimizer: %s", amp_status_str(st));
    /* One role at a time through a buffer of every element (fp32): each rank fills its range, the
     * allgather completes it, rank 0 files it by parameter. Every rank takes part in every gather,
     * even after a local failure, so no peer waits forever. */
    size_t *counts = amp_calloc(ranks, sizeof *counts);
    float *all = amp_calloc(total, sizeof *all);
    const int alloc_st = counts && all ? AMP_OK : AMP_ERR_OUT_OF_MEMORY;
    static const amp_optim_state roles[] = {AMP_OPTIM_STATE_MASTER, AMP_OPTIM_STATE_MOMENTUM, AMP_OPTIM_STATE_EXP_AVG,
                                            AMP_OPTIM_STATE_EXP_AVG_SQ};
    for (size_t p = 0; counts && p < ranks; p++) counts[p] = (z->elems[p + 1] - z->elems[p]) * sizeof(float);
    for (size_t k = 0; k < sizeof roles / sizeof roles[0]; k++) {
        /* the same on every rank: the roles this configuration has */
        if (!amp_optimizer_state(r->opt, roles[k], 0)) continue;
        if (alloc_st != AMP_OK) {
            amp_free(counts), amp_free(all), amp_optimizer_free(full);
            return amp_train_fail(r, alloc_st, "checkpoint: out of memory for the optimizer");
        }
        size_t first = 0, piece = 0;
        for (size_t q = 0; q < amp_ctx_num_params(r->ctx); q++) {
            const size_t numel = (size_t)amp_tensor_numel(amp_ctx_param(r->ctx, q));
            for (; piece < z->n_pieces && z->pieces[piece].param == q; piece++)
                memcpy(all + first + (size_t)z->pieces[piece].start, amp_optimizer_state(r->opt, roles[k], piece),
                       (size_t)z->pieces[piece].len * sizeof *all);
            first += numel;
        }
        const int gst = allgather(r, all, counts, "gathering the optimizer state");
        if (st == AMP_OK) st = gst;
        first = 0;
        for (size_t q = 0; full && st == AMP_OK && q < amp_ctx_num_params(r->ctx); q++) {
            const size_t numel = (size_t)amp_tensor_numel(amp_ctx_param(r->ctx, q));
            float *dst = amp_optimizer_state(full, roles[k], q);
            if (dst) memcpy(dst, all + first, numel * sizeof *dst);
            first += numel;
        }
    }
    amp_free(counts);
    amp_free(all);
    if (st == AMP_OK && full) {
        amp_optimizer_set_lr(full, amp_optimizer_get_lr(r->opt));
        amp_optimizer_set_step_count(full, amp_optimizer_step_count(r->opt));
        amp_optimizer *shard = r->opt;
        r->opt = full;
        st = amp_train_save_checkpoint(r);
        r->opt = shard;
    }
    amp_optimizer_free(full);
    return st;
}
