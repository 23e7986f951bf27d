/* Internal: the table of conversion kernels, one table per SIMD path.
 *
 * Every narrow dtype has a decode kernel (narrow -> fp32) and two encode kernels (fp32 -> narrow,
 * overflowing and saturating). The reference path fills every entry; a SIMD path overrides the ones
 * it accelerates and inherits the rest, so a missing fast kernel is slow, never wrong. */
#ifndef AMP_CONVERT_KERNELS_H
#define AMP_CONVERT_KERNELS_H

#include <stddef.h>

#include "amp/cpu.h"
#include "amp/dtype.h"

typedef void (*amp_encode_kernel)(void *dst, const float *src, size_t n);
typedef void (*amp_decode_kernel)(float *dst, const void *src, size_t n);

typedef struct amp_convert_kernels {
    amp_encode_kernel encode[AMP_DTYPE_COUNT][2]; /* [dst dtype][saturate]; AMP_F32 row unused */
    amp_decode_kernel decode[AMP_DTYPE_COUNT];    /* [src dtype]; AMP_F32 unused */
} amp_convert_kernels;

void amp_convert_kernels_ref(amp_convert_kernels *k);
#if defined(__x86_64__)
void amp_convert_kernels_avx2(amp_convert_kernels *k);
void amp_convert_kernels_avx512(amp_convert_kernels *k);
#endif

/* The kernels for `isa`, which must be supported by this CPU. */
const amp_convert_kernels *amp_convert_kernels_for(amp_isa isa);

#endif
