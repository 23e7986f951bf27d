/* Communicators: what data-parallel training needs from a group of processes, as a table of
 * functions, so the library itself never links MPI (or anything else).
 *
 * amp_train_run with config.comm set trains data-parallel: every process (rank) holds the whole
 * model, takes its share of each global micro-batch, and the gradients are summed across ranks
 * before the scaler, clipping and the optimizer, which then run identically everywhere. The MPI
 * backend is amp/comm_mpi.h (built when MPI is available: libamp_mpi); tests can plug any
 * implementation of this table.
 *
 * Rules an implementation keeps:
 *   - every call is collective: all ranks make the same calls in the same order with the same n;
 *   - results are identical on every rank (bit for bit: the training relies on it to keep the
 *     replicas identical, and checks it with amp_train_config.check_replicas_every);
 *   - a failure (a peer died, a transport error) returns a nonzero status and leaves a one-line
 *     message for error(); it must not hang forever.
 * All functions return AMP_OK or an amp status (AMP_ERR_IO for transport failures). */
#ifndef AMP_COMM_H
#define AMP_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum amp_comm_reduce { AMP_COMM_SUM, AMP_COMM_MAX, AMP_COMM_MIN } amp_comm_reduce;

typedef struct amp_comm amp_comm;
struct amp_comm {
    int rank, size; /* this process's rank in [0, size) */
    void *impl;     /* the backend's state */

    /* In place: buf[i] = reduce over ranks of buf[i], for n doubles (bookkeeping: losses, counts)
     * or n uint64 (checksums; SUM wraps). */
    int (*allreduce_f64)(amp_comm *c, double *buf, size_t n, amp_comm_reduce op);
    int (*allreduce_u64)(amp_comm *c, uint64_t *buf, size_t n, amp_comm_reduce op);

    /* Gradient sums, in place, non-blocking: starts summing n values of `dtype` at buf over ranks
     * and returns at once; the values are final after wait_grads(). dtype AMP_F32: an fp32 sum (the
     * reduction order is the backend's, the same on every rank). AMP_F16/AMP_BF16 buffers are summed
     * in fp32 and rounded once. wire (AMP_F32, AMP_F16 or AMP_BF16; the buffer's dtype or narrower)
     * is the dtype on the network: with an F32 buffer and a BF16 wire the values travel as bf16
     * (rounded once on the way out), are accumulated in fp32 and rounded once more to bf16 on the
     * way back. AMP_F8E5M2 (dtype and wire both; a backend that cannot returns
     * AMP_ERR_UNSUPPORTED_DTYPE): n e5m2 bytes, decoded, summed in fp32 and rounded once to e5m2 (a
     * sum past 57344 becomes inf); the values carry a scale the caller chose the same on every rank
     * (amp_train_config.grad_wire AMP_F8E5M2: the training scales and encodes, and leaves headroom so
     * the sum cannot overflow). Buffers must stay untouched until wait_grads returns. */
    int (*start_grads)(amp_comm *c, void *buf, size_t n, amp_dtype dtype, amp_dtype wire);
    /* Lets queued sums progress (MPI advances non-blocking collectives only inside MPI calls); may
     * do nothing. */
    void (*progress)(amp_comm *c);
    /* Waits for every sum started since the last wait. */
    int (*wait_grads)(amp_comm *c);

    const char *(*error)(const amp_comm *c); /* the last failure's message ("" if none) */
    void (*free)(amp_comm *c);               /* releases the communicator (not the process group) */

    /* Sharded training (amp_train_config.zero_stage 1). Both are blocking and in place over one
     * buffer cut into `size` consecutive ranges: range p is counts[p] values, starting after ranges
     * 0 .. p-1 (counts has `size` entries, the same on every rank; a count may be 0).
     * reduce_scatter: buf holds n = sum(counts) values of `dtype`; afterwards this rank's range holds
     * the sum over ranks of that range (dtype and wire as in start_grads: fp32 sums, fp16/bf16 summed in
     * fp32 and rounded once; the same bits on every rank for a range, whatever order the backend adds
     * in); the other ranges hold unspecified values. allgather: afterwards every range p holds what
     * rank p had in it (counts in bytes here: any element type), on every rank.
     * Either may be NULL (a backend made before they existed): the training then emulates
     * reduce_scatter by summing the whole buffer (start_grads + wait_grads) and allgather by an
     * allreduce_u64 SUM of the buffer's words with zeros outside this rank's range (exact: x + 0 + ...
     * wraps to x), each moving size times the bytes a native one would. */
    int (*reduce_scatter)(amp_comm *c, void *buf, const size_t *counts, amp_dtype dtype, amp_dtype wire);
    int (*allgather)(amp_comm *c, void *buf, const size_t *counts);
};

#ifdef __cplusplus
}
#endif
#endif /* AMP_COMM_H */
