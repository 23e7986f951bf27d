/* Gradient sums with e5m2 on the wire (amp_train_config.grad_wire = AMP_F8E5M2), MS-AMP's scheme
 * (FP8-LM, Peng et al. 2023; msamp/nn/parallel/distributed.py) with a headroom that makes the sum
 * unable to overflow. Folder-internal to train/; the unit tests call it directly.
 *
 * One sum covers n fp32 values cut into segments (one per parameter tensor, as MS-AMP scales each
 * tensor on its own; segment i is [seg_end[i-1], seg_end[i]), seg_end[-1] = 0, seg_end[n_seg-1] = n):
 *   1. each rank takes every segment's amax (a NaN counts as +inf, as MS-AMP maps NaN to inf before
 *      its MAX all-reduce, since a MAX may skip NaNs) and the amaxes are all-reduced with MAX: every
 *      rank then holds the same amax A per segment;
 *   2. if any A is not finite, the whole sum travels in fp32 instead (comm->start_grads with an fp32
 *      wire), so an inf or NaN reaches every rank as the fp32 sum makes it and the scaler sees it;
 *   3. otherwise segment i gets the scale s = amp_wire_fp8_scale(A, ranks): the power of 2 that
 *      current scaling gives (e5m2's 57344 / A rounded down to a power of 2), divided by 2^k, the
 *      smallest power of 2 >= ranks. Every rank encodes its values as e5m2(x * s) (rounded to nearest,
 *      saturating: amp_fp8_quantize), and comm->start_grads sums the bytes (decoded, added in fp32,
 *      rounded once to e5m2). |e5m2(x * s)| <= 57344 / 2^k, so the sum of the ranks' values is at
 *      most 57344 and never overflows (MS-AMP's pre-scale 1/sqrt(ranks) does not guarantee that);
 *   4. after comm->wait_grads, finish decodes: x = e5m2 sum * (1 / s) (exact: s is a power of 2).
 * Every rank gets the same bits (the backend's contract), so the replicas stay identical. */
#ifndef AMP_TRAIN_ALLREDUCE_FP8_H
#define AMP_TRAIN_ALLREDUCE_FP8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/comm.h"

/* One sum's state; kept from step to step (its buffers grow, never shrink). Zero-initialize. */
typedef struct amp_wire_fp8 {
    float *buf;          /* the values being summed (the caller's) */
    size_t n;
    const size_t *seg_end; /* the caller's; must outlive the sum */
    size_t n_seg;
    bool fp32;           /* this sum fell back to fp32 (a non-finite amax) */
    uint8_t *bytes;      /* n e5m2 values */
    size_t cap_bytes;
    double *amax;        /* n_seg: the all-reduced amaxes */
    float *scale;        /* n_seg */
    size_t cap_seg;
} amp_wire_fp8;

/* The scale of a segment whose all-reduced amax is `amax` (finite, >= 0) with `ranks` ranks: 2^(e -
 * k) with 2^e = amp_fp8_current_scale(amax, AMP_F8E5M2, 0, pow2) and 2^k the smallest power of 2 >=
 * ranks (ranks >= 1). An amax of 0 gives 2^-k. */
float amp_wire_fp8_scale(float amax, int ranks);

/* Steps 1 to 3 above: all-reduces the amaxes (blocking, comm->allreduce_f64) and starts the sum
 * (comm->start_grads, non-blocking). buf must stay untouched until amp_wire_fp8_finish. */
int amp_wire_fp8_start(amp_wire_fp8 *w, amp_comm *c, float *buf, size_t n, const size_t *seg_end, size_t n_seg);
/* Step 4, after comm->wait_grads returned AMP_OK: the sums, decoded into buf. */
int amp_wire_fp8_finish(amp_wire_fp8 *w);
/* The parts, for a caller that sums otherwise (zero_stage 1's reduce-scatter): encode does steps 1
 * to 3 without the sum, leaving w->fp32 (sum buf in fp32) or the e5m2 values in w->bytes (sum those);
 * decode decodes the summed bytes [lo, hi) into buf (nothing when w->fp32). */
int amp_wire_fp8_encode(amp_wire_fp8 *w, amp_comm *c, float *buf, size_t n, const size_t *seg_end, size_t n_seg);
int amp_wire_fp8_decode(amp_wire_fp8 *w, size_t lo, size_t hi);
void amp_wire_fp8_free(amp_wire_fp8 *w);

/* The bytes one rank sends for a sum of n values of `elem_bytes` bytes over `ranks` ranks, counted
 * as a reduce-scatter and an allgather (a ring all-reduce) send them: 2 (ranks - 1) ceil(n / ranks)
 * elem_bytes; 0 with one rank. */
int64_t amp_wire_bytes(size_t n, size_t elem_bytes, int ranks);

#endif /* AMP_TRAIN_ALLREDUCE_FP8_H */
