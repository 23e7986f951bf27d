/* Reference LSTM pointwise kernels (kernels/lstm_kernels.h): the scalar loops
 * the ops ran before the SIMD paths existed. Always built; the ops' results
 * under AMP_ISA=ref. */
#include <string.h>

#include "../lstm_kernels.h"
#include "../vecmath.h"

static void cell_backward_ref(float *dgr, float *dc_prev, const float *act, const float *cprev, const float *dh,
                              const float *dh2, const float *dc, size_t H) {
    for (size_t j = 0; j < H; j++) amp_lstm_cell_backward_at(dgr, dc_prev, act, cprev, dh, dh2, dc, H, j);
}

static void cell_backward16_ref(float *dgr, float *dc_prev, const uint16_t *act, const float *cprev, const float *dh,
                                const float *dh2, const float *dc, size_t H) {
    for (size_t j = 0; j < H; j++) amp_lstm_cell_backward16_at(dgr, dc_prev, act, cprev, dh, dh2, dc, H, j);
}

static void act16_pack_ref(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = amp_lstm_act16_encode(src[i]);
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

void amp_lstm_cell_forward_composed(const amp_vmath_kernels *vm, const amp_lstm_kernels *k, float *act,
                                    float *c_save, float *c, float *h, const float *gr, const float *gr2,
                                    const float *bi, const float *bh, size_t H) {
#if defined(__clang__)
#pragma clang fp contract(off) /* c' = f c + i g: two roundings, as every path computes it */
#endif
    const size_t G = 4 * H;
    if (c_save) memcpy(c_save, c, H * sizeof *c);
    if (gr2) { /* the two parts first, then the biases onto their sum in place */
        k->add3(act, gr, gr2, NULL, G);
        gr = act;
    }
    if (bi && bh) k->add3(act, gr, bi, bh, G);
    else if (bi || bh) k->add3(act, gr, bi ? bi : bh, NULL, G);
    else if (gr != act) memcpy(act, gr, G * sizeof *act);
    vm->sigmoid(act, act, 2 * H);
    vm->tanh(act + 2 * H, act + 2 * H, H);
    vm->sigmoid(act + 3 * H, act + 3 * H, H);
    float *tc = act + G;
    for (size_t j = 0; j < H; j++) {
        const float cn = act[H + j] * c[j] + act[j] * act[2 * H + j];
        tc[j] = cn;
        c[j] = cn;
    }
    vm->tanh(tc, tc, H);
    for (size_t j = 0; j < H; j++) h[j] = act[3 * H + j] * tc[j];
}

static void cell_forward_ref(float *act, float *c_save, float *c, float *h, const float *gr, const float *gr2,
                             const float *bi, const float *bh, size_t H, bool stream) {
    (void)stream;
    amp_lstm_cell_forward_composed(amp_vmath_kernels_for(AMP_ISA_REF), amp_lstm_kernels_for(AMP_ISA_REF), act, c_save,
                                   c, h, gr, gr2, bi, bh, H);
}

void amp_lstm_kernels_ref(amp_lstm_kernels *k) {
    k->cell_forward = cell_forward_ref;
    k->add3 = add3_ref;
    k->cell_backward = cell_backward_ref;
    k->cell_backward16 = cell_backward16_ref;
    k->act16_pack = act16_pack_ref;
    k->acc = acc_ref;
}
