/* amp_comm over MPI (amp/comm_mpi.h says what and why). Built only when MPI is available. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/comm_mpi.h"
#include "amp/formats.h"
#include "amp/status.h"

/* A narrow-type sum waiting for wait_grads (it needs two blocking collectives in sequence). */
typedef struct narrow_sum {
    void *buf;
    size_t n;
    amp_dtype dtype, wire;
} narrow_sum;

typedef struct mpi_impl {
    MPI_Comm comm;
    MPI_Request *reqs;
    int n_reqs, cap_reqs;
    narrow_sum *narrow;
    int n_narrow, cap_narrow;
    /* scratch for narrow sums, grown on demand and kept (no allocation in a steady step) */
    uint16_t *send, *recv, *own, *full;
    float *acc, *tmp;
    size_t scratch_chunk; /* elements per rank the scratch holds */
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

static int start_grads(amp_comm *c, void *buf, size_t n, amp_dtype dtype, amp_dtype wire) {
    mpi_impl *m = c->impl;
    if (dtype != AMP_F32 && dtype != AMP_F16 && dtype != AMP_BF16)
        return fail(c, AMP_ERR_UNSUPPORTED_DTYPE, "cannot sum %s gradients", amp_dtype_name(dtype));
    if (dtype != AMP_F32) wire = dtype;
    if (wire != AMP_F32 && wire != AMP_F16 && wire != AMP_BF16)
        return fail(c, AMP_ERR_UNSUPPORTED_DTYPE, "cannot send gradients as %s", amp_dtype_name(wire));
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
        m->narrow = q, m->cap_narrow = cap;
    }
    m->narrow[m->n_narrow++] = (narrow_sum){.buf = buf, .n = n, .dtype = dtype, .wire = wire};
    return AMP_OK;
}

static void progress(amp_comm *c) {
    mpi_impl *m = c->impl;
    if (m->n_reqs == 0) return;
    int done = 0;
    /* Errors surface again in wait_grads' MPI_Waitall. */
    (void)MPI_Testall(m->n_reqs, m->reqs, &done, MPI_STATUSES_IGNORE);
}

static int grow_scratch(amp_comm *c, size_t chunk) {
    mpi_impl *m = c->impl;
    if (chunk <= m->scratch_chunk) return AMP_OK;
    const size_t all = chunk * (size_t)c->size;
    free(m->send), free(m->recv), free(m->own), free(m->full), free(m->acc), free(m->tmp);
    m->send = malloc(all * sizeof *m->send);
    m->recv = malloc(all * sizeof *m->recv);
    m->full = malloc(all * sizeof *m->full);
    m->own = malloc(chunk * sizeof *m->own);
    m->acc = malloc(chunk * sizeof *m->acc);
    m->tmp = malloc(chunk * sizeof *m->tmp);
    if (!m->send || !m->recv || !m->full || !m->own || !m->acc || !m->tmp) {
        free(m->send), free(m->recv), free(m->own), free(m->full), free(m->acc), free(m->tmp);
        m->send = m->recv = m->own = m->full = NULL;
        m->acc = m->tmp = NULL;
        m->scratch_chunk = 0;
        return fail(c, AMP_ERR_OUT_OF_MEMORY, "out of memory for a gradient bucket");
    }
    m->scratch_chunk = chunk;
    return AMP_OK;
}

/* Reduce-scatter with fp32 accumulation, one rounding, then allgather (see the header). */
static int narrow_allreduce(amp_comm *c, const narrow_sum *q) {
    mpi_impl *m = c->impl;
    const size_t p = (size_t)c->size, chunk = (q->n + p - 1) / p;
    int st = grow_scratch(c, chunk);
    if (st != AMP_OK) return st;
    /* Outgoing values in the wire type, padded with zeros to p equal chunks. */
    st = amp_convert(m->send, q->wire, q->buf, q->dtype, q->n);
    if (st != AMP_OK) return fail(c, st, "converting a gradient bucket to %s", amp_dtype_name(q->wire));
    memset(m->send + q->n, 0, (chunk * p - q->n) * sizeof *m->send);
    int code = MPI_Alltoall(m->send, (int)chunk, MPI_UINT16_T, m->recv, (int)chunk, MPI_UINT16_T, m->comm);
    if (code != MPI_SUCCESS) return mpi_fail(c, code, "MPI_Alltoall");
    /* m->recv[r * chunk + i]: rank r's value of element (this rank's chunk start + i); summed in rank
     * order in fp32, so every run and every rank counts the same way. */
    memset(m->acc, 0, chunk * sizeof *m->acc);
    for (size_t r = 0; r < p; r++) {
        amp_convert(m->tmp, AMP_F32, m->recv + r * chunk, q->wire, chunk);
        for (size_t i = 0; i < chunk; i++) m->acc[i] += m->tmp[i];
    }
    amp_convert(m->own, q->wire, m->acc, AMP_F32, chunk);
    code = MPI_Allgather(m->own, (int)chunk, MPI_UINT16_T, m->full, (int)chunk, MPI_UINT16_T, m->comm);
    if (code != MPI_SUCCESS) return mpi_fail(c, code, "MPI_Allgather");
    st = amp_convert(q->buf, q->dtype, m->full, q->wire, q->n);
    return st == AMP_OK ? AMP_OK : fail(c, st, "converting a gradient bucket from %s", amp_dtype_name(q->wire));
}

static int wait_grads(amp_comm *c) {
    mpi_impl *m = c->impl;
    int st = AMP_OK;
    if (m->n_reqs > 0) {
        const int code = MPI_Waitall(m->n_reqs, m->reqs, MPI_STATUSES_IGNORE);
        m->n_reqs = 0;
        if (code != MPI_SUCCESS) st = mpi_fail(c, code, "MPI_Waitall");
    }
    for (int i = 0; i < m->n_narrow && st == AMP_OK; i++) st = narrow_allreduce(c, &m->narrow[i]);
    m->n_narrow = 0;
    return st;
}

static const char *error(const amp_comm *c) { return ((const mpi_impl *)c->impl)->error; }

static void comm_free(amp_comm *c) {
    if (!c) return;
    mpi_impl *m = c->impl;
    if (m) {
        if (m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
        free(m->reqs), free(m->narrow);
        free(m->send), free(m->recv), free(m->own), free(m->full), free(m->acc), free(m->tmp);
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
    m->comm = MPI_COMM_NULL;
    c->impl = m;
    c->allreduce_f64 = allreduce_f64;
    c->allreduce_u64 = allreduce_u64;
    c->start_grads = start_grads;
    c->progress = progress;
    c->wait_grads = wait_grads;
    c->error = error;
    c->free = comm_free;
    int code = MPI_Comm_dup(comm, &m->comm);
    if (code == MPI_SUCCESS) code = MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
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
