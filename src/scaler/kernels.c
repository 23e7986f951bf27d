/* The two public kernels: unscale + non-finite check (dispatched to the active SIMD path) and the
 * scale update, both as in PyTorch's CPU kernels (aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp). */
#include <math.h>
#include <stdint.h>

#include "../kernels/unscale_kernels.h"
#include "amp/cpu.h"
#include "amp/scaler.h"

void amp_non_finite_check_and_unscale_safe(void *grads, amp_dtype dtype, size_t n, float *found_inf,
                                           float *found_after, float inv_scale) {
    if (grads == NULL || n == 0 || (unsigned)dtype >= AMP_DTYPE_COUNT) return;
    const amp_unscale_kernel k = amp_unscale_kernels_for(amp_isa_active())->unscale[dtype];
    if (k) k(grads, n, inv_scale, found_inf, found_after);
}

void amp_non_finite_check_and_unscale(void *grads, amp_dtype dtype, size_t n, float *found_inf, float inv_scale) {
    amp_non_finite_check_and_unscale_safe(grads, dtype, n, found_inf, NULL, inv_scale);
}

/* _amp_update_scale_cpu_kernel, line for line. `scale * factor` is float times double in C++, i.e.
 * a double multiply rounded to float on assignment; the tracker is incremented before the exact
 * comparison, and growth is refused (but the tracker still reset) when the product is not finite. */
void amp_update_scale(float *scale, int32_t *growth_tracker, float found_inf, double growth_factor,
                      double backoff_factor, int32_t growth_interval) {
    if (found_inf != 0.0f) { /* C++'s `if (*found_inf_ptr)`: NaN counts as found */
        *scale = (float)((double)*scale * backoff_factor);
        *growth_tracker = 0;
    } else {
        /* int + 1 as PyTorch computes it, with the wrap at INT32_MAX made defined */
        const int32_t successful = (int32_t)(uint32_t)((uint32_t)*growth_tracker + 1u);
        if (successful == growth_interval) {
            const float new_scale = (float)((double)*scale * growth_factor);
            if (isfinite(new_scale)) *scale = new_scale;
            *growth_tracker = 0;
        } else {
            *growth_tracker = successful;
        }
    }
}

float amp_inv_scale(float scale) { return (float)(1.0 / (double)scale); }
