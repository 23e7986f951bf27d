/* Internal: the table of conversion kernels, one table per SIMD path.
 *
 * Every narrow dtype has a decode kernel (narrow -> fp32), two encode kernels (fp32 -> narrow,
 * overflowing and saturating) and an acc_rounded kernel (fp32 rounded to it, widened back and added
 * into fp32: below). The reference path fills every entry; a SIMD path overrides the ones
 * it accelerates and inherits the rest, so a missing fast kernel is slow, never wrong. */
#ifndef AMP_CONVERT_KERNELS_H
#define AMP_CONVERT_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/cpu.h"
#include "amp/dtype.h"

typedef void (*amp_encode_kernel)(void *dst, const float *src, size_t n);
typedef void (*amp_decode_kernel)(float *dst, const void *src, size_t n);
/* How acc_rounded writes acc: AMP_ACC_ADD, acc[i] += the value; AMP_ACC_STORE, acc[i] = 0 + the
 * value and acc is not read (core/accumulate.h's two forms); AMP_ACC_STREAM, AMP_ACC_STORE's values
 * with non-temporal stores where the path has them, for an acc that nothing reads again soon: a
 * parameter's fp32 master gradient, written once by the backward and read next by the optimizer,
 * hundreds of MB later, so its lines are not fetched only to be overwritten (an AVX-512 GPT-2 124M
 * step: a third of the acc step's time).
 *
 * Streamed stores are not fenced by the kernel: the writing thread's own loads see them, other
 * threads only after it calls the table's stream_fence. A caller fences once after its last streaming
 * call, before its task ends (a GEMM task, an optimizer segment): a fence per call, per row of a
 * weight gradient or per block of a weight copy, waited for the stores to reach memory each time
 * (3% of an AVX-512 GPT-2 124M amp-bf16 step at B=4 T=64). */
typedef enum amp_acc_mode { AMP_ACC_ADD, AMP_ACC_STORE, AMP_ACC_STREAM } amp_acc_mode;

/* The smallest destination (a whole gradient, a whole weight copy) written past the caches: a
 * smaller one, with the rest of a small model, is likely still cached when it is read next, so it
 * takes plain stores. */
#define AMP_STREAM_MIN_BYTES ((size_t)1 << 20)

/* acc[i] (+)= v[i] rounded to the table entry's dtype (the overflowing encode) and widened back,
 * i < n, as `mode` says. What a weight gradient computed in fp32 for a narrow weight copy does on its
 * way into the fp32 master gradient (the GEMM epilogue's acc step, gemm.c): the bits of encode, then
 * decode, then amp_acc_f32, in one pass without the narrow row in between (a NaN comes out a NaN, its
 * payload unspecified). Returns the largest of the values left in acc[0, n) as the elementwise
 * kernels' absmax_bits gives it (the bits of |x| compared as integers, so a NaN above every number;
 * 0 for n = 0): the gradient's inf/NaN check in the same pass, where a second one would read the row
 * back (and rule out the stream mode). */
typedef uint32_t (*amp_acc_rounded_kernel)(float *acc, const float *v, size_t n, amp_acc_mode mode);

typedef struct amp_convert_kernels {
    amp_encode_kernel encode[AMP_DTYPE_COUNT][2]; /* [dst dtype][saturate]; AMP_F32 row unused */
    amp_decode_kernel decode[AMP_DTYPE_COUNT];    /* [src dtype]; AMP_F32 unused */
    amp_acc_rounded_kernel acc_rounded[AMP_DTYPE_COUNT]; /* [narrow dtype]; AMP_F32 unused */
    /* [narrow dtype]: encode[dt][0]'s bits, with non-temporal stores where the path has them (not
     * fenced: stream_fence, above), for a destination that nothing reads soon: the optimizer's weight
     * copies, rewritten every step and read by the next forward only after the whole update, so their
     * lines are not fetched only to be overwritten. The SIMD paths stream fp16 and bf16. */
    amp_encode_kernel encode_stream[AMP_DTYPE_COUNT];
    /* orders this thread's streamed stores (AMP_ACC_STREAM, encode_stream) before its later stores,
     * so that a thread which sees those (the thread pool's completion) sees the streamed values;
     * nothing on a path that does not stream */
    void (*stream_fence)(void);
} amp_convert_kernels;

void amp_convert_kernels_ref(amp_convert_kernels *k);
#if defined(__x86_64__)
void amp_convert_kernels_avx2(amp_convert_kernels *k);
void amp_convert_kernels_avx512(amp_convert_kernels *k);
#endif

/* The kernels for `isa`, which must be supported by this CPU. */
const amp_convert_kernels *amp_convert_kernels_for(amp_isa isa);

#endif
