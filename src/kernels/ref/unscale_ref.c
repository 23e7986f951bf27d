/* Reference unscale + non-finite check kernels: plain loops over the scalar algorithm
 * (kernels/unscale_kernels.h). Always built; every SIMD kernel is tested bit for bit against these.
 * At inv_scale == 1 they only read, except that f16/bf16 arrays with a non-finite element are
 * rewritten with inv_scale 1: exact for every value but a NaN, which is re-encoded as PyTorch does. */
#include <stdint.h>

#include "../unscale_kernels.h"

static void unscale_f32(void *grads, size_t n, float inv_scale, float *found_inf, float *found_after) {
    unsigned bad_in = 0, bad_out = 0;
    amp_unscale_f32_scalar(grads, 0, n, inv_scale, inv_scale != 1.0f, &bad_in, &bad_out);
    amp_unscale_publish(bad_in, bad_out, found_inf, found_after);
}

static void unscale_f16(void *grads, size_t n, float inv_scale, float *found_inf, float *found_after) {
    unsigned bad_in = 0, bad_out = 0;
    const int write = inv_scale != 1.0f;
    amp_unscale_f16_scalar(grads, 0, n, inv_scale, write, &bad_in, &bad_out);
    if (!write && bad_in) amp_unscale_f16_scalar(grads, 0, n, inv_scale, 1, &bad_in, &bad_out);
    amp_unscale_publish(bad_in, bad_out, found_inf, found_after);
}

static void unscale_bf16(void *grads, size_t n, float inv_scale, float *found_inf, float *found_after) {
    unsigned bad_in = 0, bad_out = 0;
    const int write = inv_scale != 1.0f;
    amp_unscale_bf16_scalar(grads, 0, n, inv_scale, write, &bad_in, &bad_out);
    if (!write && bad_in) amp_unscale_bf16_scalar(grads, 0, n, inv_scale, 1, &bad_in, &bad_out);
    amp_unscale_publish(bad_in, bad_out, found_inf, found_after);
}

void amp_unscale_kernels_ref(amp_unscale_kernels *k) {
    k->unscale[AMP_F32] = unscale_f32;
    k->unscale[AMP_F16] = unscale_f16;
    k->unscale[AMP_BF16] = unscale_bf16;
}
