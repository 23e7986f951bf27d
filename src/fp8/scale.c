/* The scale rules of delayed and current scaling, and the HYBRID/E4M3 formats. */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "amp/fp8.h"
#include "../core/float_bits.h"
#include "fp8_internal.h"

float amp_fp8_scale_from_amax(float amax, float prev_scale, amp_dtype fp8, int margin) {
    if (!amp_fp8_dtype_ok(fp8) || margin < -127 || margin > 127) return NAN;
    /* TE: scaled_max = fp8_max * pow(2.f, -margin) in fp32. 2^-margin is an exact normal fp32 for
     * |margin| <= 126 and the subnormal 2^-127 for 127, so the product rounds once (it can overflow to
     * inf for margin <= -120 (e4m3) or <= -113 (e5m2): then the quotient is inf and becomes FLT_MAX below, as in TE). */
    const float pow2 = margin == 127 ? amp_f32_from_bits(0x00400000u)
                                     : amp_f32_from_bits((uint32_t)(127 - margin) << 23);
    const float scaled_max = amp_fp8_max_finite(fp8) * pow2;
    if (!(isfinite(amax) && amax > 0.0f)) return prev_scale;
    float scale = scaled_max / amax;
    if (isinf(scale)) scale = FLT_MAX;
    return scale;
}

float amp_fp8_current_scale(float amax, amp_dtype fp8, float amax_epsilon, bool pow2) {
    if (!amp_fp8_dtype_ok(fp8) || !(isfinite(amax_epsilon) && amax_epsilon >= 0.0f)) return NAN;
    if (amax < amax_epsilon) amax = amax_epsilon; /* false for a NaN amax, handled next */
    if (isinf(amax) || isnan(amax) || amax == 0.0f) return 1.0f;
    float scale = amp_fp8_max_finite(fp8) / amax;
    if (isinf(scale)) scale = FLT_MAX; /* the input type's max: amp's inputs are fp32 */
    if (pow2) scale = amp_f32_from_bits(amp_f32_bits(scale) & 0xFF800000u);
    return scale;
}

amp_dtype amp_fp8_format_dtype(amp_fp8_format format, amp_fp8_role role) {
    if ((unsigned)role > AMP_FP8_GRADIENT) return AMP_DTYPE_COUNT;
    switch (format) {
    case AMP_FP8_HYBRID: return role == AMP_FP8_GRADIENT ? AMP_F8E5M2 : AMP_F8E4M3;
    case AMP_FP8_E4M3: return AMP_F8E4M3;
    default: return AMP_DTYPE_COUNT;
    }
}
