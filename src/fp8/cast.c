/* Tensor-wise scaled casts (delayed and current scaling) and the amax they start from. */
#include <math.h>
#include <stdint.h>

#include "amp/fp8.h"
#include "amp/status.h"
#include "../kernels/convert_kernels.h"
#include "fp8_internal.h"

enum { STAGE_ELEMS = 512 };

void amp_fp8_scaled_encode(void *dst, amp_dtype fp8, const float *src, size_t n, float scale) {
    const amp_encode_kernel encode = amp_convert_kernels_for(amp_isa_active())->encode[fp8][1];
    float stage[STAGE_ELEMS];
    uint8_t *out = dst;
    for (size_t done = 0; done < n; done += STAGE_ELEMS) {
        const size_t len = n - done < STAGE_ELEMS ? n - done : STAGE_ELEMS;
        for (size_t i = 0; i < len; i++) stage[i] = src[done + i] * scale;
        encode(out + done, stage, len);
    }
}

void amp_fp8_scaled_decode(float *dst, amp_dtype fp8, const void *src, size_t n, float scale_inv) {
    amp_convert_kernels_for(amp_isa_active())->decode[fp8](dst, src, n);
    for (size_t i = 0; i < n; i++) dst[i] *= scale_inv;
}

float amp_fp8_amax_skip_nan(const float *src, size_t n, bool *saw_nan) {
    float m = 0.0f;
    bool nan = false;
    for (size_t i = 0; i < n; i++) {
        const float a = fabsf(src[i]);
        if (a > m) m = a;       /* false for NaN: skipped, as fmaxf does */
        nan |= a != a;
    }
    if (saw_nan) *saw_nan = nan;
    return m;
}

int amp_fp8_amax(float *amax, bool *saw_nan, const float *src, size_t n) {
    if (!amax || (n > 0 && !src)) return AMP_ERR_NULL_POINTER;
    *amax = amp_fp8_amax_skip_nan(src, n, saw_nan);
    return AMP_OK;
}

static int check_cast(const void *dst, amp_dtype fp8, const void *src, size_t n, float scale) {
    if (!amp_fp8_dtype_ok(fp8)) return AMP_ERR_UNSUPPORTED_DTYPE;
    if (!(isfinite(scale) && scale > 0.0f)) return AMP_ERR_INVALID_ARGUMENT;
    if (n > 0 && (!dst || !src)) return AMP_ERR_NULL_POINTER;
    return AMP_OK;
}

int amp_fp8_quantize(void *dst, amp_dtype fp8, const float *src, size_t n, float scale) {
    const int st = check_cast(dst, fp8, src, n, scale);
    if (st == AMP_OK) amp_fp8_scaled_encode(dst, fp8, src, n, scale);
    return st;
}

int amp_fp8_dequantize(float *dst, const void *src, amp_dtype fp8, size_t n, float scale_inv) {
    const int st = check_cast(dst, fp8, src, n, scale_inv);
    if (st == AMP_OK) amp_fp8_scaled_decode(dst, fp8, src, n, scale_inv);
    return st;
}
