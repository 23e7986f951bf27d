/* amp_convert: any dtype to any dtype, through the active path's kernels.
 *
 * Narrow -> narrow goes through a small fp32 buffer on the stack: decoding is exact, so the result is
 * one correct rounding of the source value, and the buffer stays in L1. */
#include <string.h>

#include "amp/formats.h"
#include "amp/status.h"
#include "../kernels/convert_kernels.h"

enum { STAGE_ELEMS = 1024 };

static int convert(void *dst, amp_dtype dst_dtype, const void *src, amp_dtype src_dtype, size_t n, int saturate) {
    if ((unsigned)dst_dtype >= AMP_DTYPE_COUNT || (unsigned)src_dtype >= AMP_DTYPE_COUNT)
        return AMP_ERR_UNSUPPORTED_DTYPE;
    if (n == 0) return AMP_OK;
    if (!dst || !src) return AMP_ERR_NULL_POINTER;
    if (dst_dtype == src_dtype) {
        /* Identity: a bit copy, which keeps NaN payloads (re-encoding would canonicalize them). */
        if (dst != src) memmove(dst, src, n * amp_dtype_size(src_dtype));
        return AMP_OK;
    }
    const amp_convert_kernels *k = amp_convert_kernels_for(amp_isa_active());
    if (src_dtype == AMP_F32) {
        k->encode[dst_dtype][saturate](dst, src, n);
    } else if (dst_dtype == AMP_F32) {
        k->decode[src_dtype](dst, src, n);
    } else {
        float stage[STAGE_ELEMS];
        const size_t in_size = amp_dtype_size(src_dtype), out_size = amp_dtype_size(dst_dtype);
        const char *in = src;
        char *out = dst;
        for (size_t done = 0; done < n; done += STAGE_ELEMS) {
            size_t len = n - done < STAGE_ELEMS ? n - done : STAGE_ELEMS;
            k->decode[src_dtype](stage, in + done * in_size, len);
            k->encode[dst_dtype][saturate](out + done * out_size, stage, len);
        }
    }
    return AMP_OK;
}

int amp_convert(void *dst, amp_dtype dst_dtype, const void *src, amp_dtype src_dtype, size_t n) {
    return convert(dst, dst_dtype, src, src_dtype, n, 0);
}

int amp_convert_sat(void *dst, amp_dtype dst_dtype, const void *src, amp_dtype src_dtype, size_t n) {
    return convert(dst, dst_dtype, src, src_dtype, n, 1);
}
