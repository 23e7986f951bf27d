/* Tensor-wise scaled casts (delayed and current scaling) and the amax they start from. */
#include <math.h>
#include <stdint.h>

#include "amp/fp8.h"
#include "amp/status.h"
#include "amp/threads.h"
#include "../core/alloc_internal.h"
#include "../core/parallel.h"
#include "../kernels/convert_kernels.h"
#include "../kernels/fp8_kernels.h"
#include "fp8_internal.h"

/* Long arrays are cut into one contiguous range per thread (core/parallel.h): both passes are
 * elementwise or a max, so the bits do not depend on the split. Below PAR_MIN elements per thread
 * the wake-up costs more than it saves. */
enum { PAR_MIN = 1 << 17 };

typedef struct cast_job {
    const float *src;
    uint8_t *dst;
    amp_dtype fp8;
    float scale;
    float amax[AMP_MAX_THREADS];
    bool nan[AMP_MAX_THREADS];
    int64_t counts[AMP_MAX_THREADS][2];
} cast_job;

static void encode_range(void *arg, int64_t i0, int64_t i1, int thread_id) {
    (void)thread_id;
    const cast_job *j = arg;
    amp_fp8_kernels_active()->scaled_encode[j->fp8](j->dst + i0, j->src + i0, (size_t)(i1 - i0), j->scale);
}

/* One pass in registers: the active path's fused kernel multiplies and encodes (kernels/fp8_kernels.h),
 * the bits of the staged multiply-then-encode (each product one fp32 multiplication, then the exact
 * saturating encoder). */
void amp_fp8_scaled_encode(void *dst, amp_dtype fp8, const float *src, size_t n, float scale) {
    if (n < 2 * (size_t)PAR_MIN) {
        amp_fp8_kernels_active()->scaled_encode[fp8](dst, src, n, scale);
        return;
    }
    cast_job j = {.src = src, .dst = dst, .fp8 = fp8, .scale = scale};
    amp_parallel_range((int64_t)n, PAR_MIN, 64, encode_range, &j);
}

static void encode_tally_range(void *arg, int64_t i0, int64_t i1, int thread_id) {
    cast_job *j = arg;
    amp_fp8_kernels_active()->encode_stats[j->fp8](j->dst + i0, j->src + i0, (size_t)(i1 - i0), j->scale, NULL, 1,
                                                   j->counts[thread_id]);
}

void amp_fp8_scaled_encode_tally(void *dst, amp_dtype fp8, const float *src, size_t n, float scale,
                                 amp_fp8_cast_tally *t) {
    t->scale_min = fminf(t->scale_min, scale), t->scale_max = fmaxf(t->scale_max, scale);
    if (n < 2 * (size_t)PAR_MIN) {
        amp_fp8_kernels_active()->encode_stats[fp8](dst, src, n, scale, NULL, 1, t->counts);
        return;
    }
    cast_job *j = amp_calloc(1, sizeof *j); /* every count 0: a thread without a range adds nothing */
    if (!j) { /* one thread then: the same bytes and counts */
        amp_fp8_kernels_active()->encode_stats[fp8](dst, src, n, scale, NULL, 1, t->counts);
        return;
    }
    j->src = src, j->dst = dst, j->fp8 = fp8, j->scale = scale;
    amp_parallel_range((int64_t)n, PAR_MIN, 64, encode_tally_range, j);
    for (int i = 0; i < AMP_MAX_THREADS; i++) t->counts[0] += j->counts[i][0], t->counts[1] += j->counts[i][1];
    amp_free(j);
}

static void amax_range(void *arg, int64_t i0, int64_t i1, int thread_id) {
    cast_job *j = arg;
    j->amax[thread_id] = amp_fp8_kernels_active()->amax(j->src + i0, (size_t)(i1 - i0), &j->nan[thread_id]);
}

void amp_fp8_scaled_decode(float *dst, amp_dtype fp8, const void *src, size_t n, float scale_inv) {
    amp_convert_kernels_for(amp_isa_active())->decode[fp8](dst, src, n);
    for (size_t i = 0; i < n; i++) dst[i] *= scale_inv;
}

float amp_fp8_amax_skip_nan(const float *src, size_t n, bool *saw_nan) {
    if (n < 2 * (size_t)PAR_MIN) return amp_fp8_kernels_active()->amax(src, n, saw_nan);
    cast_job j = {.src = src}; /* every slot 0 and false: a thread without a range adds nothing */
    amp_parallel_range((int64_t)n, PAR_MIN, 64, amax_range, &j);
    float m = 0.0f;
    bool nan = false;
    for (int t = 0; t < AMP_MAX_THREADS; t++) {
        if (j.amax[t] > m) m = j.amax[t];
        nan |= j.nan[t];
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
