/* amp_convert: any dtype to any dtype, through the active path's kernels.
 *
 * Narrow -> narrow goes through a small fp32 buffer on the stack: decoding is exact, so the result is
 * one correct rounding of the source value, and the buffer stays in L1. */
#include <stdint.h>
#include <string.h>

#include "amp/formats.h"
#include "amp/status.h"
#include "../core/parallel.h"
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

/* From this many elements per thread a conversion is split between threads: each element's result
 * depends only on its own value (one rounding, or an exact decode), so the bits do not change. Not
 * where dst and src overlap: a narrowing in place is correct front to back on one thread only. */
enum { CONVERT_MIN_PER_THREAD = 65536 };

typedef struct convert_job {
    void *dst;
    const void *src;
    amp_dtype dst_dtype, src_dtype;
    int saturate;
} convert_job;

static void convert_range(void *arg, int64_t i0, int64_t i1, int thread_id) {
    (void)thread_id;
    const convert_job *j = arg;
    convert((char *)j->dst + (size_t)i0 * amp_dtype_size(j->dst_dtype), j->dst_dtype,
            (const char *)j->src + (size_t)i0 * amp_dtype_size(j->src_dtype), j->src_dtype, (size_t)(i1 - i0),
            j->saturate);
}

static int convert_split(void *dst, amp_dtype dst_dtype, const void *src, amp_dtype src_dtype, size_t n, int saturate) {
    if (n < 2 * (size_t)CONVERT_MIN_PER_THREAD || (unsigned)dst_dtype >= AMP_DTYPE_COUNT ||
        (unsigned)src_dtype >= AMP_DTYPE_COUNT || !dst || !src || dst_dtype == src_dtype ||
        amp_parallel_max_threads() == 1)
        return convert(dst, dst_dtype, src, src_dtype, n, saturate);
    const uintptr_t d0 = (uintptr_t)dst, d1 = d0 + n * amp_dtype_size(dst_dtype);
    const uintptr_t s0 = (uintptr_t)src, s1 = s0 + n * amp_dtype_size(src_dtype);
    if (d0 < s1 && s0 < d1) return convert(dst, dst_dtype, src, src_dtype, n, saturate);
    convert_job j = {dst, src, dst_dtype, src_dtype, saturate};
    amp_parallel_range((int64_t)n, CONVERT_MIN_PER_THREAD, 64, convert_range, &j);
    return AMP_OK;
}

int amp_convert(void *dst, amp_dtype dst_dtype, const void *src, amp_dtype src_dtype, size_t n) {
    return convert_split(dst, dst_dtype, src, src_dtype, n, 0);
}

int amp_convert_sat(void *dst, amp_dtype dst_dtype, const void *src, amp_dtype src_dtype, size_t n) {
    return convert_split(dst, dst_dtype, src, src_dtype, n, 1);
}
