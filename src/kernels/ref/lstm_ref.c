/* Reference LSTM pointwise kernels (kernels/lstm_kernels.h): the scalar loops
 * the ops ran before the SIMD paths existed. Always built; the ops' results
 * under AMP_ISA=ref. */
#include "../lstm_kernels.h"

static void cell_backward_ref(float *dgr, float *dc_prev, const float *act, const float *cprev, const float *dh,
                              const float *dh2, const float *dc, size_t H) {
    for (size_t j = 0; j < H; j++) amp_lstm_cell_backward_at(dgr, dc_prev, act, cprev, dh, dh2, dc, H, j);
}

static void acc_ref(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static void add3_ref(float *dst, const float *a, const float *b, const float *c, size_t n) {
    if (c)
        for (size_t i = 0; i < n; i++) dst[i] = a[i] + b[i] + c[i];
    else
        for (size_t i = 0; i < n; i++) dst[i] = a[i] + b[i];
}

void amp_lstm_kernels_ref(amp_lstm_kernels *k) {
    k->add3 = add3_ref;
    k->cell_backward = cell_backward_ref;
    k->acc = acc_ref;
}
