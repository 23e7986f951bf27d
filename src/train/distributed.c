/* Data-parallel training over an amp_comm (amp/train.h describes the scheme): the batch split, the
 * gradient buckets started from the grad-ready hook while backward runs, the inf/NaN flag and the
 * replica check. Nothing here knows MPI. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "allreduce_fp8.h"
#include "train_internal.h"
#include "../core/alloc_internal.h"

/* A run of consecutive parameters [first, last] whose gradients are summed in one call: the bytes
 * [begin, end) of the gradient buffer (alignment padding between parameters is zero everywhere and
 * summing it is harmless). */
typedef struct amp_train_bucket {
    size_t first, last;
    size_t begin, end;
} amp_train_bucket;

static size_t param_end(const amp_ctx *ctx, size_t i) {
    const amp_tensor *p = amp_ctx_param(ctx, i);
    return amp_ctx_param_offset(ctx, i) + (size_t)amp_tensor_numel(p) * amp_dtype_size(p->dtype);
}

static int comm_fail(amp_train_run_state *r, int st, const char *what) {
    const amp_comm *c = r->cfg.comm;
    const char *msg = c->error ? c->error(c) : "";
    return amp_train_fail(r, st != AMP_OK ? st : AMP_ERR_IO, "rank %d of %d: %s: %s", r->rank, r->ranks, what,
                          msg && msg[0] ? msg : amp_status_str(st));
}

int amp_train_dist_setup(amp_train_run_state *r) {
    amp_comm *c = r->cfg.comm;
    r->rank = 0;
    r->ranks = 1;
    r->local_batch = r->cfg.batch;
    if (!c) return AMP_OK;
    if (c->size < 1 || c->rank < 0 || c->rank >= c->size || !c->allreduce_f64 || !c->allreduce_u64 ||
        !c->start_grads || !c->wait_grads)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "communicator: rank %d of %d, or a function missing", c->rank,
                              c->size);
    r->rank = c->rank;
    r->ranks = c->size;
    if (r->cfg.batch % c->size != 0)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT,
                              "batch %lld does not split evenly over %d ranks (the batch is global: each rank "
                              "takes batch / ranks samples)",
                              (long long)r->cfg.batch, c->size);
    r->local_batch = r->cfg.batch / c->size;
    const amp_dtype wire = r->cfg.grad_wire;
    if (wire != AMP_F32 && wire != AMP_F16 && wire != AMP_BF16 && wire != AMP_F8E5M2)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "gradient wire dtype %s: use f32, f16, bf16 or f8e5m2",
                              amp_dtype_name(wire));

    /* Buckets from the last parameter back (backward finishes the last layers first). */
    const size_t n = amp_ctx_num_params(r->ctx);
    const size_t target = r->cfg.bucket_bytes ? r->cfg.bucket_bytes : AMP_TRAIN_BUCKET_BYTES;
    r->buckets = amp_calloc(n ? n : 1, sizeof *r->buckets);
    r->bucket_of = amp_calloc(n ? n : 1, sizeof *r->bucket_of);
    r->bucket_pending = amp_calloc(n ? n : 1, sizeof *r->bucket_pending);
    if (!r->buckets || !r->bucket_of || !r->bucket_pending)
        return amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY, "out of memory for the gradient buckets");
    int b = -1;
    for (size_t k = n; k-- > 0;) {
        if (b < 0 || r->buckets[b].end - r->buckets[b].begin >= target) {
            b++;
            r->buckets[b] = (amp_train_bucket){.first = k, .last = k, .begin = 0, .end = param_end(r->ctx, k)};
        }
        r->buckets[b].first = k;
        r->buckets[b].begin = amp_ctx_param_offset(r->ctx, k);
        r->bucket_of[k] = b;
    }
    r->n_buckets = b + 1;
    if (wire == AMP_F8E5M2) {
        r->wire8 = amp_calloc((size_t)r->n_buckets, sizeof *r->wire8);
        r->wire8_seg = amp_calloc(n ? n : 1, sizeof *r->wire8_seg);
        r->wire8_flat = amp_calloc(n ? n : 1, sizeof *r->wire8_flat);
        if (!r->wire8 || !r->wire8_seg || !r->wire8_flat)
            return amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY, "out of memory for the e5m2 gradient buckets");
        size_t grad_bytes = 0;
        amp_ctx_grad_memory(r->ctx, &grad_bytes);
        for (size_t i = 0; i < n; i++) /* zero_stage 1: the whole buffer, one segment per parameter */
            r->wire8_flat[i] = (i + 1 == n ? grad_bytes : param_end(r->ctx, i)) / sizeof(float);
        /* bucket b's segments at wire8_seg[first ..= last]: each parameter's end in the bucket's fp32
           values (alignment padding goes with the parameter before it) */
        for (int k = 0; k < r->n_buckets; k++) {
            const amp_train_bucket *bk = &r->buckets[k];
            for (size_t i = bk->first; i <= bk->last; i++)
                r->wire8_seg[i] = (i == bk->last ? bk->end : param_end(r->ctx, i)) - bk->begin;
            for (size_t i = bk->first; i <= bk->last; i++) r->wire8_seg[i] /= sizeof(float);
        }
    }
    return AMP_OK;
}

static int start_bucket(amp_train_run_state *r, int b) {
    amp_comm *c = r->cfg.comm;
    const amp_train_bucket *bk = &r->buckets[b];
    const amp_dtype dtype = amp_ctx_param(r->ctx, bk->first)->dtype;
    const amp_dtype wire = dtype == AMP_F32 ? r->cfg.grad_wire : dtype;
    unsigned char *base = amp_ctx_grad_memory(r->ctx, NULL);
    const size_t count = (bk->end - bk->begin) / amp_dtype_size(dtype);
    if (wire != AMP_F8E5M2) {
        r->wire_bytes += amp_wire_bytes(count, amp_dtype_size(wire), r->ranks);
        return c->start_grads(c, base + bk->begin, count, dtype, wire);
    }
    amp_wire_fp8 *w = &r->wire8[b];
    const size_t n_seg = bk->last - bk->first + 1;
    const int st = amp_wire_fp8_start(w, c, (float *)(void *)(base + bk->begin), count, r->wire8_seg + bk->first, n_seg);
    r->wire_bytes += amp_wire_bytes(n_seg, sizeof(double), r->ranks) +
                     amp_wire_bytes(count, w->fp32 ? sizeof(float) : 1, r->ranks);
    return st;
}

/* After wait_grads: the e5m2 sums decoded into the gradients. */
static int finish_wire8(amp_train_run_state *r) {
    if (!r->wire8) return AMP_OK;
    for (int b = 0; b < r->n_buckets; b++) {
        if (amp_ctx_param(r->ctx, r->buckets[b].first)->dtype != AMP_F32) continue;
        const int st = amp_wire_fp8_finish(&r->wire8[b]);
        if (st != AMP_OK) return amp_train_fail(r, st, "decoding the e5m2 gradient sums: %s", amp_status_str(st));
    }
    return AMP_OK;
}

/* Starts every bucket from next_bucket on whose parameters are all ready, in bucket order, so that
 * every rank starts the same sums in the same order. */
static void start_ready_buckets(amp_train_run_state *r) {
    while (r->dist_status == AMP_OK && r->next_bucket < r->n_buckets && r->bucket_pending[r->next_bucket] == 0)
        r->dist_status = start_bucket(r, r->next_bucket++);
}

static void on_grad_ready(amp_ctx *ctx, size_t index, void *user) {
    (void)ctx;
    amp_train_run_state *r = user;
    const int b = r->bucket_of[index];
    if (r->bucket_pending[b] > 0) r->bucket_pending[b]--;
    start_ready_buckets(r);
    if (r->cfg.comm->progress) r->cfg.comm->progress(r->cfg.comm);
}

void amp_train_dist_arm(amp_train_run_state *r) {
    if (!r->cfg.comm) return;
    for (int b = 0; b < r->n_buckets; b++) r->bucket_pending[b] = (int)(r->buckets[b].last - r->buckets[b].first + 1);
    r->next_bucket = 0;
    r->dist_status = AMP_OK;
    amp_ctx_set_grad_ready_hook(r->ctx, on_grad_ready, r);
}

int amp_train_dist_finish(amp_train_run_state *r) {
    amp_comm *c = r->cfg.comm;
    if (!c) return AMP_OK;
    amp_ctx_set_grad_ready_hook(r->ctx, NULL, NULL);
    /* Parameters the backward never reached (or a failed backward): start the rest in order. */
    while (r->dist_status == AMP_OK && r->next_bucket < r->n_buckets)
        r->dist_status = start_bucket(r, r->next_bucket++);
    if (r->dist_status != AMP_OK) {
        c->wait_grads(c);
        return comm_fail(r, r->dist_status, "summing the gradients");
    }
    const int st = c->wait_grads(c);
    return st == AMP_OK ? finish_wire8(r) : comm_fail(r, st, "summing the gradients");
}

int amp_train_dist_sum(amp_train_run_state *r, double *v, size_t n) {
    amp_comm *c = r->cfg.comm;
    if (!c) return AMP_OK;
    const int st = c->allreduce_f64(c, v, n, AMP_COMM_SUM);
    return st == AMP_OK ? AMP_OK : comm_fail(r, st, "summing the losses");
}

int amp_train_dist_any_found(amp_train_run_state *r, float found, bool *any) {
    /* NaN-safe: a NaN flag (a corrupted check) counts as found, and MAX over 0/1 never sees a NaN. */
    const bool local = found != 0.0f || isnan(found);
    *any = local;
    amp_comm *c = r->cfg.comm;
    if (!c) return AMP_OK;
    double v = local ? 1.0 : 0.0;
    const int st = c->allreduce_f64(c, &v, 1, AMP_COMM_MAX);
    if (st != AMP_OK) return comm_fail(r, st, "combining the inf/NaN flags");
    *any = v != 0.0;
    return AMP_OK;
}

/* A 64-bit hash of a byte range (word-wise multiply-xor; the range's length is a multiple of 2). */
static uint64_t hash_bytes(uint64_t h, const unsigned char *p, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001B3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ p[i]) * 0x100000001B3ull;
    return h;
}

int amp_train_dist_check_replicas(amp_train_run_state *r) {
    amp_comm *c = r->cfg.comm;
    if (!c) return AMP_OK;
    size_t bytes = 0;
    const unsigned char *params = amp_ctx_param_memory(r->ctx, &bytes);
    uint64_t h = hash_bytes(0xCBF29CE484222325ull, params, bytes);
    const size_t n = amp_optimizer_num_params(r->opt);
    for (size_t i = 0; i < n; i++) {
        const amp_tensor *p = amp_optimizer_param(r->opt, i);
        /* zero_stage 1: each rank's masters are of its own slice; only the parameters are replicas */
        const float *m = p->dtype != AMP_F32 && !r->zero ? amp_optimizer_master(r->opt, i) : NULL;
        if (m) h = hash_bytes(h, (const unsigned char *)m, (size_t)amp_tensor_numel(p) * sizeof *m);
    }
    uint64_t lo = h, hi = h;
    int st = c->allreduce_u64(c, &lo, 1, AMP_COMM_MIN);
    if (st == AMP_OK) st = c->allreduce_u64(c, &hi, 1, AMP_COMM_MAX);
    if (st != AMP_OK) return comm_fail(r, st, "comparing the replicas");
    if (lo != hi)
        return amp_train_fail(r, AMP_ERR_STATE,
                              "replicas diverged after step %lld: the parameter checksum differs across ranks "
                              "(rank %d has %016llx)",
                              (long long)r->step + 1, r->rank, (unsigned long long)h);
    return AMP_OK;
}

void amp_train_dist_free(amp_train_run_state *r) {
    amp_free(r->buckets);
    amp_free(r->bucket_of);
    amp_free(r->bucket_pending);
    for (int b = 0; r->wire8 && b < r->n_buckets; b++) amp_wire_fp8_free(&r->wire8[b]);
    amp_free(r->wire8);
    amp_free(r->wire8_seg);
    amp_free(r->wire8_flat);
    r->wire8 = NULL;
    r->wire8_seg = r->wire8_flat = NULL;
    r->buckets = NULL;
    r->bucket_of = r->bucket_pending = NULL;
}
