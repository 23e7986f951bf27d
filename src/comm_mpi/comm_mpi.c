/* amp_comm over MPI (amp/comm_mpi.h says what and why). Built only when MPI is available. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/comm_mpi.h"
#include "amp/formats.h"
#include "amp/status.h"

/* A narrow-type sum (f16, bf16 or e5m2 values on the wire, as bytes): stage 1, the reduce-scatter
 * (MPI_Ialltoall on comm), starts with the bucket; stage 2, the allgather (MPI_Iallgather on comm2),
 * starts once stage 1 is complete, from progress() or wait_grads(), always in bucket order, so every rank issues the same collectives in the same
 * order on each communicator. Slots and their buffers are kept from step to step (the same buckets
 * come back each step: no allocation in a steady step). */
typedef struct narrow_sum {
    void *buf;
    size_t n, chunk;
    amp_dtype dtype, wire;
    int stage; /* 1: alltoall in flight, 2: allgather in flight */
    MPI_Request req;
    unsigned char *send, *recv, *own, *full; /* wire values: p * chunk, p * chunk, chunk, p * chunk */
    size_t es;                                 /* bytes per wire value: 2 (f16, bf16) or 1 (e5m2) */
    float *acc, *tmp;                   /* chunk each */
    size_t cap_chunk;                   /* chunk the buffers hold */
} narrow_sum;

typedef struct mpi_impl {
    MPI_Comm comm, comm2; /* comm2: the narrow sums' second stage */
    MPI_Request *reqs;
    int n_reqs, cap_reqs;
    narrow_sum *narrow;
    int n_narrow, cap_narrow, next_gather; /* slots in use this step; the next one to start stage 2 */
    char error[256];
} mpi_impl;

static int fail(amp_comm *c, int status, const char *fmt, ...) {
    mpi_impl *m = c->impl;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->error, sizeof m->error, fmt, ap);
    va_end(ap);
    return status;
}

static int mpi_fail(amp_comm *c, int code, const char *call) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", code);
    return fail(c, AMP_ERR_IO, "%s: %s", call, s);
}

static MPI_Op mpi_op(amp_comm_reduce op) {
    return op == AMP_COMM_MAX ? MPI_MAX : op == AMP_COMM_MIN ? MPI_MIN : MPI_SUM;
}

static int allreduce_f64(amp_comm *c, double *buf, size_t n, amp_comm_reduce op) {
    if (n > (size_t)INT32_MAX) return fail(c, AMP_ERR_INVALID_ARGUMENT, "allreduce of %zu values", n);
    const int code = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, mpi_op(op), ((mpi_impl *)c->impl)->comm);
    return code == MPI_SUCCESS ? AMP_OK : mpi_fail(c, code, "MPI_Allreduce");
}

static int allreduce_u64(amp_comm *c, uint64_t *buf, size_t n, amp_comm_reduce op) {
    if (n > (size_t)INT32_MAX) return fail(c, AMP_ERR_INVALID_ARGUMENT, "allreduce of %zu values", n);
    const int code = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_UINT64_T, mpi_op(op), ((mpi_impl *)c->impl)->comm);
    return code == MPI_SUCCESS ? AMP_OK : mpi_fail(c, code, "MPI_Allreduce");
}

static int grow_slot(amp_comm *c, narrow_sum *q);

static int start_grads(amp_comm *c, void *buf, size_t n, amp_dtype dtype, amp_dtype wire) {
    mpi_impl *m = c->impl;
    if (dtype != AMP_F32 && dtype != AMP_F16 && dtype != AMP_BF16 && dtype != AMP_F8E5M2)
        return fail(c, AMP_ERR_UNSUPPORTED_DTYPE, "cannot sum %s gradients", amp_dtype_name(dtype));
    if (dtype != AMP_F32) wire = dtype;
    if (wire != AMP_F32 && wire != AMP_F16 && wire != AMP_BF16 && wire != AMP_F8E5M2)
        return fail(c, AMP_ERR_UNSUPPORTED_DTYPE, "cannot send gradients as %s", amp_dtype_name(wire));
    if (wire == AMP_F8E5M2 && dtype != AMP_F8E5M2) /* e5m2 needs a scale: the caller's (amp/comm.h) */
        return fail(c, AMP_ERR_UNSUPPORTED_DTYPE, "an e5m2 wire wants e5m2 values, not %s", amp_dtype_name(dtype));
    if (n > (size_t)INT32_MAX / 2) return fail(c, AMP_ERR_INVALID_ARGUMENT, "a bucket of %zu values is too large", n);
    if (n == 0) return AMP_OK;
    if (wire == AMP_F32) {
        if (m->n_reqs == m->cap_reqs) {
            const int cap = m->cap_reqs ? 2 * m->cap_reqs : 16;
            MPI_Request *r = realloc(m->reqs, (size_t)cap * sizeof *r);
            if (!r) return fail(c, AMP_ERR_OUT_OF_MEMORY, "out of memory for MPI requests");
            m->reqs = r, m->cap_reqs = cap;
        }
        const int code = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, m->comm, &m->reqs[m->n_reqs]);
        if (code != MPI_SUCCESS) return mpi_fail(c, code, "MPI_Iallreduce");
        m->n_reqs++;
        return AMP_OK;
    }
    if (m->n_narrow == m->cap_narrow) {
        const int cap = m->cap_narrow ? 2 * m->cap_narrow : 16;
        narrow_sum *q = realloc(m->narrow, (size_t)cap * sizeof *q);
        if (!q) return fail(c, AMP_ERR_OUT_OF_MEMORY, "out of memory for gradient buckets");
        memset(q + m->cap_narrow, 0, (size_t)(cap - m->cap_narrow) * sizeof *q);
        m->narrow = q, m->cap_narrow = cap;
    }
    narrow_sum *q = &m->narrow[m->n_narrow];
    const size_t p = (size_t)c->size;
    q->buf = buf, q->n = n, q->dtype = dtype, q->wire = wire, q->chunk = (n + p - 1) / p;
    q->es = amp_dtype_size(wire);
    int st = grow_slot(c, q);
    if (st != AMP_OK) return st;
    /* Outgoing values in the wire type, padded with zeros to p equal chunks. */
    st = amp_convert(q->send, wire, buf, dtype, n);
    if (st != AMP_OK) return fail(c, st, "converting a gradient bucket to %s", amp_dtype_name(wire));
    memset(q->send + n * q->es, 0, (q->chunk * p - n) * q->es);
    const int bytes = (int)(q->chunk * q->es);
    const int code = MPI_Ialltoall(q->send, bytes, MPI_BYTE, q->recv, bytes, MPI_BYTE, m->comm, &q->req);
    if (code != MPI_SUCCESS) return mpi_fail(c, code, "MPI_Ialltoall");
    q->stage = 1;
    m->n_narrow++;
    return AMP_OK;
}

/* Stage 1 of slot q is complete: sum the chunk this rank owns (everyone's values for it, in rank
 * order, in fp32), round it once, and start the allgather. */
static int start_gather(amp_comm *c, narrow_sum *q) {
    mpi_impl *m = c->impl;
    const size_t p = (size_t)c->size, chunk = q->chunk;
    memset(q->acc, 0, chunk * sizeof *q->acc);
    for (size_t r = 0; r < p; r++) {
        amp_convert(q->tmp, AMP_F32, q->recv + r * chunk * q->es, q->wire, chunk);
        for (size_t i = 0; i < chunk; i++) q->acc[i] += q->tmp[i];
    }
    amp_convert(q->own, q->wire, q->acc, AMP_F32, chunk);
    const int bytes = (int)(chunk * q->es);
    const int code = MPI_Iallgather(q->own, bytes, MPI_BYTE, q->full, bytes, MPI_BYTE, m->comm2, &q->req);
    if (code != MPI_SUCCESS) return mpi_fail(c, code, "MPI_Iallgather");
    q->stage = 2;
    return AMP_OK;
}

/* Moves narrow sums from stage 1 to stage 2 in slot order: those already complete (blocking false),
 * or all of them (blocking true). */
static int advance_narrow(amp_comm *c, bool blocking) {
    mpi_impl *m = c->impl;
    while (m->next_gather < m->n_narrow) {
        narrow_sum *q = &m->narrow[m->next_gather];
        int done = 0, code;
        if (blocking) code = MPI_Wait(&q->req, MPI_STATUS_IGNORE), done = 1;
        else code = MPI_Test(&q->req, &done, MPI_STATUS_IGNORE);
        if (code != MPI_SUCCESS) return mpi_fail(c, code, "MPI_Ialltoall");
        if (!done) return AMP_OK;
        const int st = start_gather(c, q);
        if (st != AMP_OK) return st;
        m->next_gather++;
    }
    return AMP_OK;
}

static void progress(amp_comm *c) {
    mpi_impl *m = c->impl;
    int done = 0;
    /* Errors surface again in wait_grads. */
    if (m->n_reqs > 0) (void)MPI_Testall(m->n_reqs, m->reqs, &done, MPI_STATUSES_IGNORE);
    (void)advance_narrow(c, false);
}

static int grow_slot(amp_comm *c, narrow_sum *q) {
    const size_t chunk = q->chunk, all = chunk * (size_t)c->size;
    if (chunk <= q->cap_chunk) return AMP_OK;
    free(q->send), free(q->recv), free(q->own), free(q->full), free(q->acc), free(q->tmp);
    /* wire buffers sized for 2-byte values, whatever this bucket's wire (a slot serves any) */
    q->send = malloc(all * 2);
    q->recv = malloc(all * 2);
    q->full = malloc(all * 2);
    q->own = malloc(chunk * 2);
    q->acc = malloc(chunk * sizeof *q->acc);
    q->tmp = malloc(chunk * sizeof *q->tmp);
    if (!q->send || !q->recv || !q->full || !q->own || !q->acc || !q->tmp) {
        free(q->send), free(q->recv), free(q->own), free(q->full), free(q->acc), free(q->tmp);
        q->send = q->recv = q->own = q->full = NULL;
        q->acc = q->tmp = NULL;
        q->cap_chunk = 0;
        return fail(c, AMP_ERR_OUT_OF_MEMORY, "out of memory for a gradient bucket");
    }
    q->cap_chunk = chunk;
    return AMP_OK;
}

static int wait_grads(amp_comm *c) {
    mpi_impl *m = c->impl;
    int st = AMP_OK;
    if (m->n_reqs > 0) {
        const int code = MPI_Waitall(m->n_reqs, m->reqs, MPI_STATUSES_IGNORE);
        m->n_reqs = 0;
        if (code != MPI_SUCCESS) st = mpi_fail(c, code, "MPI_Waitall");
    }
    if (st == AMP_OK) st = advance_narrow(c, true);
    for (int i = 0; i < m->n_narrow && st == AMP_OK; i++) {
        narrow_sum *q = &m->narrow[i];
        const int code = MPI_Wait(&q->req, MPI_STATUS_IGNORE);
        if (code != MPI_SUCCESS) {
            st = mpi_fail(c, code, "MPI_Iallgather");
            break;
        }
        st = amp_convert(q->buf, q->dtype, q->full, q->wire, q->n);
        if (st != AMP_OK) st = fail(c, st, "converting a gradient bucket from %s", amp_dtype_name(q->wire));
    }
    m->n_narrow = 0;
    m->next_gather = 0;
    return st;
}

/* ---- sharded training: reduce-scatter and allgather (amp/comm.h) ---- */

/* counts[0 .. size) as MPI's int counts and displacements; fails past INT_MAX. */
static int int_counts(amp_comm *c, const size_t *counts, int **out_counts, int **out_displs) {
    const size_t p = (size_t)c->size;
    int *cn = malloc(p * sizeof *cn), *dp = malloc(p * sizeof *dp);
    if (!cn || !dp) {
        free(cn), free(dp);
        return fail(c, AMP_ERR_OUT_OF_MEMORY, "out of memory for the shard counts");
    }
    size_t at = 0;
    for (size_t r = 0; r < p; r++) {
        if (counts[r] > (size_t)INT32_MAX - at) {
            free(cn), free(dp);
            return fail(c, AMP_ERR_INVALID_ARGUMENT, "a shard of %zu values is too large", counts[r]);
        }
        cn[r] = (int)counts[r], dp[r] = (int)at;
        at += counts[r];
    }
    *out_counts = cn, *out_displs = dp;
    return AMP_OK;
}

/* fp32 on an fp32 wire: MPI_Reduce_scatter in place (the result lands at the buffer's start and is
 * moved to this rank's range). Narrow buffers or wires: the whole buffer summed as start_grads does
 * (fp32 accumulation, one rounding), which leaves every range summed. */
static int reduce_scatter(amp_comm *c, void *buf, const size_t *counts, amp_dtype dtype, amp_dtype wire) {
    mpi_impl *m = c->impl;
    size_t n = 0;
    for (int r = 0; r < c->size; r++) n += counts[r];
    if (dtype != AMP_F32 || wire != AMP_F32) {
        int st = start_grads(c, buf, n, dtype, wire);
        if (st == AMP_OK) st = wait_grads(c);
        return st;
    }
    int *cn, *dp;
    int st = int_counts(c, counts, &cn, &dp);
    if (st != AMP_OK) return st;
    const int code = MPI_Reduce_scatter(MPI_IN_PLACE, buf, cn, MPI_FLOAT, MPI_SUM, m->comm);
    if (code == MPI_SUCCESS && dp[c->rank] > 0)
        memmove((float *)buf + dp[c->rank], buf, (size_t)cn[c->rank] * sizeof(float));
    free(cn), free(dp);
    return code == MPI_SUCCESS ? AMP_OK : mpi_fail(c, code, "MPI_Reduce_scatter");
}

static int allgather(amp_comm *c, void *buf, const size_t *counts) {
    mpi_impl *m = c->impl;
    int *cn, *dp;
    int st = int_counts(c, counts, &cn, &dp);
    if (st != AMP_OK) return st;
    const int code = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cn, dp, MPI_BYTE, m->comm);
    free(cn), free(dp);
    return code == MPI_SUCCESS ? AMP_OK : mpi_fail(c, code, "MPI_Allgatherv");
}

static const char *error(const amp_comm *c) { return ((const mpi_impl *)c->impl)->error; }

static void comm_free(amp_comm *c) {
    if (!c) return;
    mpi_impl *m = c->impl;
    if (m) {
        if (m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
        if (m->comm2 != MPI_COMM_NULL) MPI_Comm_free(&m->comm2);
        for (int i = 0; i < m->cap_narrow; i++) {
            narrow_sum *q = &m->narrow[i];
            free(q->send), free(q->recv), free(q->own), free(q->full), free(q->acc), free(q->tmp);
        }
        free(m->reqs), free(m->narrow);
        free(m);
    }
    free(c);
}

int amp_comm_mpi_create(MPI_Comm comm, amp_comm **out, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!out) return AMP_ERR_NULL_POINTER;
    *out = NULL;
    amp_comm *c = calloc(1, sizeof *c);
    mpi_impl *m = calloc(1, sizeof *m);
    if (!c || !m) {
        free(c), free(m);
        if (err && err_size) snprintf(err, err_size, "out of memory for the communicator");
        return AMP_ERR_OUT_OF_MEMORY;
    }
    m->comm = m->comm2 = MPI_COMM_NULL;
    c->impl = m;
    c->allreduce_f64 = allreduce_f64;
    c->allreduce_u64 = allreduce_u64;
    c->start_grads = start_grads;
    c->progress = progress;
    c->wait_grads = wait_grads;
    c->error = error;
    c->free = comm_free;
    if (!getenv("AMP_COMM_MPI_NO_SHARD_COLLECTIVES")) { /* set: the training's emulation (tests) */
        c->reduce_scatter = reduce_scatter;
        c->allgather = allgather;
    }
    int code = MPI_Comm_dup(comm, &m->comm);
    if (code == MPI_SUCCESS) code = MPI_Comm_dup(comm, &m->comm2);
    if (code == MPI_SUCCESS) code = MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    if (code == MPI_SUCCESS) code = MPI_Comm_set_errhandler(m->comm2, MPI_ERRORS_RETURN);
    if (code == MPI_SUCCESS) code = MPI_Comm_rank(m->comm, &c->rank);
    if (code == MPI_SUCCESS) code = MPI_Comm_size(m->comm, &c->size);
    if (code != MPI_SUCCESS) {
        mpi_fail(c, code, "setting up the MPI communicator");
        if (err && err_size) snprintf(err, err_size, "%s", m->error);
        comm_free(c);
        return AMP_ERR_IO;
    }
    *out = c;
    return AMP_OK;
}
