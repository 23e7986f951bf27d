/* The LSTM pointwise kernels (src/kernels/lstm_kernels.h) of every SIMD path
 * the CPU has against the reference twin: the bits must be identical (the
 * kernels promise the reference's arithmetic in the reference's order). Rows of
 * every length up to 70 (tails of 8 and 16 lanes, and none), with and without
 * the second hidden-state gradient, dc_prev aliasing dc (how the sequence calls
 * it) and not, activations drawn from (0, 1) and (-1, 1) plus the edges 0, 1,
 * -1, and gradients with both zeros, subnormals, huge values, infinities and
 * NaN; acc and add3 (with and without c, in place) on the same rows. cell_forward of every path
 * (the reference's too) against amp_lstm_cell_forward_composed on that path's own tables: row
 * lengths up to 70, every bias combination, pre-activations from ordinary to saturating, infinite
 * and NaN. cell_backward_bf16 where a path has it against its composition (cell_backward, acc,
 * amp_convert), with and without the bias sum, on the same rows as cell_backward; cell_forward_bf16
 * against cell_forward, amp_convert of h' and c' to bf16 and c' back. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../src/kernels/lstm_kernels.h"
#include "../src/kernels/vecmath.h"
#include "amp/formats.h"
#include "harness.h"
#include "tests.h"

enum { MAXH = 70 };

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static float unit(uint64_t *s) { return (float)(next(s) >> 40) / (float)(1 << 24); } /* [0, 1) */

/* a gradient: mostly ordinary values, sometimes an edge case */
static float grad(uint64_t *s) {
    static const float edges[] = {0.0f, -0.0f, 1e-40f, -1e-42f, 3e38f, -3e38f, INFINITY, -INFINITY, NAN, 1.0f};
    const uint64_t r = next(s);
    if (r % 16 == 0) return edges[(r >> 8) % (sizeof edges / sizeof edges[0])];
    return (unit(s) * 2.0f - 1.0f) * (float)(1 << (r >> 20) % 8);
}

/* The same bits, or both NaN: which NaN's payload a multiply passes on depends on its operand order,
 * which the compiler may swap, so payloads are not compared. */
static bool same_bits(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof *a) != 0 && !(isnan(a[i]) && isnan(b[i]))) return false;
    return true;
}

/* bf16 patterns: the same, or both NaN (the sign a NaN gets from a multiply of two NaNs depends on
 * the operand order, as above) */
static bool same_bf16(const uint16_t *a, const uint16_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i] && !((a[i] & 0x7FFF) > 0x7F80 && (b[i] & 0x7FFF) > 0x7F80)) return false;
    return true;
}

void test_lstm_kernels(void) {
    const amp_lstm_kernels *ref = amp_lstm_kernels_for(AMP_ISA_REF);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    float act[5 * MAXH], cprev[MAXH], dh[MAXH], dh2[MAXH], dc[MAXH];
    float dgr_r[4 * MAXH], dgr_k[4 * MAXH], dcp_r[MAXH], dcp_k[MAXH], acc_r[4 * MAXH], acc_k[4 * MAXH];
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (isa == AMP_ISA_REF || !amp_isa_supported((amp_isa)isa)) continue;
        const amp_lstm_kernels *k = amp_lstm_kernels_for((amp_isa)isa);
        int bad_bwd = 0, bad_acc = 0, bad_add = 0;
        for (size_t H = 0; H <= MAXH; H++) {
            for (int rep = 0; rep < 8; rep++) {
                for (size_t j = 0; j < 5 * H; j++) {
                    /* i, f, o in (0, 1), g and tanh(c') in (-1, 1), with the edges now
                     * and then */
                    const size_t gate = j / (H ? H : 1);
                    float v = gate == 2 || gate == 4 ? unit(&s) * 2.0f - 1.0f : unit(&s);
                    if (next(&s) % 32 == 0) v = (float)((int)(next(&s) % 3) - (gate == 2 || gate == 4 ? 1 : 0));
                    act[j] = v;
                }
                for (size_t j = 0; j < H; j++)
                    cprev[j] = grad(&s), dh[j] = grad(&s), dh2[j] = grad(&s), dc[j] = grad(&s);
                const bool two = rep & 1, alias = rep & 2;
                memset(dgr_r, 0, sizeof dgr_r), memset(dgr_k, 0xff, sizeof dgr_k);
                memcpy(dcp_r, dc, sizeof dc), memcpy(dcp_k, dc, sizeof dc);
                ref->cell_backward(dgr_r, dcp_r, act, cprev, dh, two ? dh2 : NULL, alias ? dcp_r : dc, H);
                k->cell_backward(dgr_k, dcp_k, act, cprev, dh, two ? dh2 : NULL, alias ? dcp_k : dc, H);
                if (!same_bits(dgr_r, dgr_k, 4 * H) || !same_bits(dcp_r, dcp_k, H)) bad_bwd++;

                for (size_t j = 0; j < 4 * H; j++) acc_r[j] = acc_k[j] = grad(&s);
                ref->acc(acc_r, dgr_r, 4 * H);
                k->acc(acc_k, dgr_r, 4 * H);
                if (!same_bits(acc_r, acc_k, 4 * H)) bad_acc++;

                /* add3 with and without its third operand, out of place and in place on a */
                const float *c3 = two ? act : NULL;
                ref->add3(dgr_r, acc_r, dgr_k, c3, 4 * H);
                k->add3(acc_k, acc_r, dgr_k, c3, 4 * H);
                if (!same_bits(dgr_r, acc_k, 4 * H)) bad_add++;
                memcpy(acc_k, acc_r, sizeof acc_k);
                ref->add3(acc_r, acc_r, dgr_k, c3, 4 * H);
                k->add3(acc_k, acc_k, dgr_k, c3, 4 * H);
                if (!same_bits(acc_r, acc_k, 4 * H)) bad_add++;
            }
        }
        CHECK_MSG(bad_bwd == 0 && bad_acc == 0 && bad_add == 0,
                  "lstm kernels %s: %d cell_backward, %d acc and %d add3 cases differ from ref",
                  amp_isa_name((amp_isa)isa), bad_bwd, bad_acc, bad_add);
    }
}

/* a gate pre-activation: mostly in the range where the activations bend, sometimes saturating or
 * special */
static float preact(uint64_t *s) {
    static const float edges[] = {0.0f, -0.0f, 1e-40f, 12.0f, -12.0f, 95.0f, -110.0f, INFINITY, -INFINITY, NAN};
    const uint64_t r = next(s);
    if (r % 32 == 0) return edges[(r >> 8) % (sizeof edges / sizeof edges[0])];
    return (unit(s) * 2.0f - 1.0f) * (float)(1 << (r >> 20) % 4);
}

void test_lstm_cell_forward_kernels(void) {
    uint64_t s = 0x2545f4914f6cdd1dull;
    float gr[4 * MAXH], bi[4 * MAXH], bh[4 * MAXH], c0[MAXH];
    uint16_t hb_r[MAXH], hb_k[MAXH];
    /* 64-byte aligned rows, so the streaming stores of the AVX-512 kernel run where H allows */
    _Alignas(64) float act_r[5 * MAXH], act_k[5 * MAXH], cs_r[MAXH], cs_k[MAXH];
    float c_r[MAXH], c_k[MAXH], h_r[MAXH], h_k[MAXH];
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!amp_isa_supported((amp_isa)isa)) continue;
        const amp_lstm_kernels *k = amp_lstm_kernels_for((amp_isa)isa);
        const amp_vmath_kernels *vm = amp_vmath_kernels_for((amp_isa)isa);
        int bad = 0;
        for (size_t H = 0; H <= MAXH; H++) {
            for (int rep = 0; rep < 8; rep++) {
                for (size_t j = 0; j < 4 * H; j++) gr[j] = preact(&s), bi[j] = preact(&s), bh[j] = preact(&s);
                for (size_t j = 0; j < H; j++) c0[j] = grad(&s);
                const float *b1 = rep & 1 ? bi : NULL, *b2 = rep & 2 ? bh : NULL;
                const bool save = rep & 4, stream = (rep + H) & 1;
                memcpy(c_r, c0, sizeof c0), memcpy(c_k, c0, sizeof c0);
                memset(act_r, 0, sizeof act_r), memset(act_k, 0xff, sizeof act_k);
                memset(h_r, 0, sizeof h_r), memset(h_k, 0xff, sizeof h_k);
                memset(cs_r, 0, sizeof cs_r), memset(cs_k, 0, sizeof cs_k);
                amp_lstm_cell_forward_composed(vm, k, act_r, save ? cs_r : NULL, c_r, h_r, gr, b1, b2, H);
                k->cell_forward(act_k, save ? cs_k : NULL, c_k, h_k, gr, b1, b2, H, stream);
                if (!same_bits(act_r, act_k, 5 * H) || !same_bits(c_r, c_k, H) || !same_bits(h_r, h_k, H) ||
                    !same_bits(cs_r, cs_k, H))
                    bad++;
                if (k->cell_forward_bf16) { /* from the composition's results: h' and c' rounded */
                    uint16_t cb[MAXH];
                    amp_convert(hb_r, AMP_BF16, h_r, AMP_F32, H);
                    amp_convert(cb, AMP_BF16, c_r, AMP_F32, H);
                    amp_convert(c_r, AMP_F32, cb, AMP_BF16, H);
                    memcpy(c_k, c0, sizeof c0);
                    memset(act_k, 0xff, sizeof act_k), memset(cs_k, 0, sizeof cs_k), memset(hb_k, 0xff, sizeof hb_k);
                    k->cell_forward_bf16(act_k, save ? cs_k : NULL, c_k, hb_k, gr, b1, b2, H, !stream);
                    if (!same_bits(act_r, act_k, 5 * H) || !same_bits(c_r, c_k, H) || !same_bits(cs_r, cs_k, H) ||
                        !same_bf16(hb_r, hb_k, H))
                        bad++;
                }
            }
        }
        CHECK_MSG(bad == 0, "lstm cell_forward %s: %d rows differ from the composition of its vecmath and add3",
                  amp_isa_name((amp_isa)isa), bad);
    }
}

void test_lstm_cell_backward_bf16_kernels(void) {
    uint64_t s = 0x94d049bb133111ebull;
    float act[5 * MAXH], cprev[MAXH], dh[MAXH], dh2[MAXH], dc[MAXH], tmp[4 * MAXH];
    float db_r[4 * MAXH], db_k[4 * MAXH], dcp_r[MAXH], dcp_k[MAXH];
    uint16_t dg_r[4 * MAXH], dg_k[4 * MAXH];
    int tested = 0;
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!amp_isa_supported((amp_isa)isa)) continue;
        const amp_lstm_kernels *k = amp_lstm_kernels_for((amp_isa)isa);
        if (!k->cell_backward_bf16) continue;
        tested++;
        int bad = 0;
        for (size_t H = 0; H <= MAXH; H++) {
            for (int rep = 0; rep < 8; rep++) {
                for (size_t j = 0; j < 5 * H; j++) {
                    const size_t gate = j / (H ? H : 1);
                    act[j] = gate == 2 || gate == 4 ? unit(&s) * 2.0f - 1.0f : unit(&s);
                    if (next(&s) % 32 == 0) act[j] = (float)((int)(next(&s) % 3) - (gate == 2 || gate == 4 ? 1 : 0));
                }
                for (size_t j = 0; j < H; j++)
                    cprev[j] = grad(&s), dh[j] = grad(&s), dh2[j] = grad(&s), dc[j] = grad(&s);
                /* gradients whose products land on bf16 rounding ties and in the subnormals */
                if (rep & 4)
                    for (size_t j = 0; j < H; j++) dc[j] = (float)(int)(next(&s) % 512) * 0x1p-130f;
                for (size_t j = 0; j < 4 * H; j++) db_r[j] = db_k[j] = grad(&s);
                const bool two = rep & 1, alias = rep & 2, sum = (rep + H) % 3 != 0;
                memcpy(dcp_r, dc, sizeof dc), memcpy(dcp_k, dc, sizeof dc);
                memset(dg_k, 0xff, sizeof dg_k);
                k->cell_backward(tmp, dcp_r, act, cprev, dh, two ? dh2 : NULL, alias ? dcp_r : dc, H);
                if (sum) k->acc(db_r, tmp, 4 * H);
                amp_convert(dg_r, AMP_BF16, tmp, AMP_F32, 4 * H);
                k->cell_backward_bf16(dg_k, sum ? db_k : NULL, dcp_k, act, cprev, dh, two ? dh2 : NULL,
                                      alias ? dcp_k : dc, H);
                if (!same_bf16(dg_r, dg_k, 4 * H) || !same_bits(db_r, db_k, 4 * H) ||
                    !same_bits(dcp_r, dcp_k, H))
                    bad++;
            }
        }
        CHECK_MSG(bad == 0, "lstm cell_backward_bf16 %s: %d rows differ from cell_backward + acc + amp_convert",
                  amp_isa_name((amp_isa)isa), bad);
    }
    if (tested == 0) CHECK(true); /* no path here has the fused kernel */
}
