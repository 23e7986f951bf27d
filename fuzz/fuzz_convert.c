/* Differential fuzz target: arbitrary bytes, read as a conversion request and its source data, must
 * convert to the same bits on every SIMD path as on the reference path, for amp_convert and
 * amp_convert_sat, and never touch memory outside the buffers (ASan checks that).
 * Input layout: byte 0 = src dtype, byte 1 = dst dtype (both mod AMP_DTYPE_COUNT + 1, so invalid
 * values are exercised too), the rest = source elements. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const amp_dtype src_t = (amp_dtype)(data[0] % (AMP_DTYPE_COUNT + 1));
    const amp_dtype dst_t = (amp_dtype)(data[1] % (AMP_DTYPE_COUNT + 1));
    const size_t in_size = amp_dtype_size(src_t), out_size = amp_dtype_size(dst_t);
    if (in_size == 0 || out_size == 0) {
        /* Invalid dtypes must be refused, never read or written. */
        uint8_t dummy[4];
        if (amp_convert(dummy, dst_t, data, src_t, 1) != AMP_ERR_UNSUPPORTED_DTYPE) abort();
        return 0;
    }
    const size_t n = (size - 2) / in_size;
    /* Exact-size heap copies, so any over-read or over-write is an ASan error. */
    void *src = malloc(n * in_size + 1), *ref = malloc(n * out_size + 1), *got = malloc(n * out_size + 1);
    if (!src || !ref || !got) abort();
    memcpy(src, data + 2, n * in_size);
    const amp_isa original = amp_isa_active();
    for (int sat = 0; sat < 2; sat++) {
        int (*convert)(void *, amp_dtype, const void *, amp_dtype, size_t) = sat ? amp_convert_sat : amp_convert;
        amp_isa_set(AMP_ISA_REF);
        if (convert(ref, dst_t, src, src_t, n) != AMP_OK) abort();
        for (int isa = 1; isa < AMP_ISA_COUNT; isa++) {
            if (amp_isa_set((amp_isa)isa) != AMP_OK) continue;
            if (convert(got, dst_t, src, src_t, n) != AMP_OK) abort();
            if (memcmp(ref, got, n * out_size) != 0) abort();
        }
    }
    amp_isa_set(original);
    free(src), free(ref), free(got);
    return 0;
}
