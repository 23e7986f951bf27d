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
 * against cell_forward, act16_pack of its activations, amp_convert of c, h' and c' to bf16 and c'
 * back. The 16-bit saved state (act16): act16_pack and cell_backward16 of every path against the
 * reference bit for bit; the codec against fp64 over a sweep of fp32 values in [-1, 1] (each value
 * and its complement 1 - |v| within bf16's unit roundoff 2^-8, the edges 0, +-0.5, +-1 and NaN
 * exactly); and cell_backward16's gate gradients against an fp64 evaluation of the formula on the
 * unrounded fp32 activations, within 6 * 2^-8 (at most 3 bf16 ulps) of the magnitude bound (the
 * formula on absolute values: |dG| where dc' and the h' path do not cancel), which the fp32-saved
 * cell_backward meets to about fp32 precision. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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

/* The kernel table tested as path i: each ISA's (NULL where the CPU lacks it), then at i =
 * AMP_ISA_COUNT the AVX-512 table with the encoders a CPU without AVX-512 BF16 runs (in *soft). */
static const amp_lstm_kernels *table_at(int i, amp_lstm_kernels *soft, const char **name) {
    if (i < AMP_ISA_COUNT) {
        *name = amp_isa_name((amp_isa)i);
        return amp_isa_supported((amp_isa)i) ? amp_lstm_kernels_for((amp_isa)i) : NULL;
    }
    *name = "avx512 (no AVX-512 BF16)";
#if defined(__x86_64__)
    if (!amp_isa_supported(AMP_ISA_AVX512)) return NULL;
    *soft = *amp_lstm_kernels_for(AMP_ISA_AVX512);
    amp_lstm_kernels_avx512_soft(soft);
    return soft;
#else
    (void)soft;
    return NULL;
#endif
}

/* max over v of the error of act16's v and 1 - |v| against fp64, relative to |v| (to 2^-117 below
 * it: a subnormal v is stored as zero, an absolute error under 2^-126 = 2^-9 * 2^-117) and 1 - |v|;
 * an edge that does not come back exactly counts as infinite */
static void act16_errors(float v, double *ev, double *ec) {
    float comp;
    const float x = amp_lstm_act16_decode(amp_lstm_act16_encode(v), &comp);
    const double c = 1.0 - fabs((double)v);
    if (isnan(v)) {
        if (!isnan(x) || !isnan(comp)) *ev = INFINITY;
        return;
    }
    if (v == 0.0f || fabsf(v) == 0.5f || fabsf(v) == 1.0f) { /* exactly, sign included */
        if (memcmp(&x, &v, sizeof v) != 0 || (double)comp != c) *ev = INFINITY;
        return;
    }
    *ev = fmax(*ev, fabs((double)x - (double)v) / fmax(fabs((double)v), 0x1p-117));
    if (c > 0) *ec = fmax(*ec, fabs((double)comp - c) / c);
}

/* The codec over every 251st fp32 pattern in [0, 1] with both signs (subnormals to 1 - 2^-24), and
 * the edges. The bound: rounding to bf16 (2^-8) plus the fp32 operations that rebuild the other value
 * (a few 2^-24). */
static void check_act16_codec(void) {
    double ev = 0, ec = 0;
    for (uint32_t u = 0; u <= 0x3F800000u; u += 251)
        for (int sg = 0; sg < 2; sg++) {
            float v;
            const uint32_t b = u | (sg ? 0x80000000u : 0);
            memcpy(&v, &b, sizeof v);
            act16_errors(v, &ev, &ec);
        }
    const float edges[] = {0.0f, -0.0f, 0.5f, -0.5f, 1.0f, -1.0f, NAN, -NAN, 0x1p-149f, 1.0f - 0x1p-24f,
                           -(1.0f - 0x1p-24f), 0.5f - 0x1p-25f, 0.5f + 0x1p-24f, 0.998f, 0.99998f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) act16_errors(edges[i], &ev, &ec);
    const double bound = 0x1p-8 + 4 * 0x1p-24;
    CHECK_MSG(ev <= bound && ec <= bound, "act16 codec: v error %.3g, 1 - |v| error %.3g (relative; bound %.3g)", ev,
              ec, bound);
    /* every path's act16_pack on the same sweep (every 4093rd pattern up to 2, both signs, chunks of 37
     * for the tails) against the scalar encode */
    const amp_lstm_kernels *ref = amp_lstm_kernels_for(AMP_ISA_REF);
    amp_lstm_kernels soft;
    for (int isa = 0; isa <= AMP_ISA_COUNT; isa++) {
        const char *name;
        const amp_lstm_kernels *k = table_at(isa, &soft, &name);
        if (!k) continue;
        float v[37];
        uint16_t got[37], want[37];
        size_t n = 0, bad = 0;
        for (uint32_t u = 0; u <= 0x40000000u; u += 4093)
            for (int sg = 0; sg < 2; sg++) {
                const uint32_t b = u | (sg ? 0x80000000u : 0);
                memcpy(&v[n++], &b, sizeof b);
                if (n == 37) {
                    ref->act16_pack(want, v, n), k->act16_pack(got, v, n);
                    bad += memcmp(got, want, sizeof got) != 0;
                    n = 0;
                }
            }
        /* and the edges of the forms and of the rounding, 16 and more so that the vector code sees them:
         * 0.5, 1 and their neighbours, 2, NaNs with payloads (quiet, signalling, all ones), infinities,
         * zeros, subnormals, the smallest normal, a tie to even */
        static const uint32_t eb[24] = {0x3F000000u, 0xBF000000u, 0x3F800000u, 0xBF800000u, 0x3EFFFFFFu, 0xBEFFFFFFu,
                                        0x3F7FFFFFu, 0xBF7FFFFFu, 0x3F800001u, 0x40000000u, 0xC0000000u, 0x7FC00000u,
                                        0xFFC12345u, 0x7F800001u, 0xFFFFFFFFu, 0x7F800000u, 0xFF800000u, 0x00000000u,
                                        0x80000000u, 0x00000001u, 0x807FFFFFu, 0x00800000u, 0x3E808000u, 0x3F408000u};
        float e[24];
        uint16_t eg[24], ew[24];
        memcpy(e, eb, sizeof e);
        ref->act16_pack(ew, e, 24), k->act16_pack(eg, e, 24);
        bad += memcmp(eg, ew, sizeof eg) != 0;
        CHECK_MSG(bad == 0, "act16_pack %s: %zu chunks of the sweep and its edges differ from the scalar encode", name,
                  bad);
    }
}

/* cell_backward16 (the active path; the paths agree bit for bit above) on rows of random activations,
 * a third of them within 2^-12 of +-1, against fp64 on the unrounded fp32 values: each gate gradient
 * within 6 * 2^-8 of its magnitude bound (each of up to 6 factors read within 2^-8, see
 * lstm_kernels.h; plus fp32 roundoff), and the fp32-saved cell_backward on the same values for
 * comparison. */
static void check_backward16_error(void) {
    enum { HH = 64 };
    const amp_lstm_kernels *k = amp_lstm_active();
    uint64_t s = 0x5851f42d4c957f2dull;
    float act[5 * HH], cprev[HH], dh[HH], dc[HH], d16[4 * HH], d32[4 * HH], dcp[HH];
    uint16_t a16[5 * HH];
    double e16 = 0, e32 = 0; /* the worst |error| / magnitude bound */
    for (int rep = 0; rep < 2000; rep++) {
        for (size_t j = 0; j < 5 * HH; j++) {
            const bool tanh_like = j / HH == 2 || j / HH == 4;
            float v = unit(&s);
            if (next(&s) % 3 == 0) v = 1.0f - v * 0x1p-12f; /* near 1, where 1 - v cancels */
            if (tanh_like && next(&s) % 2) v = -v;
            act[j] = v;
        }
        for (size_t j = 0; j < HH; j++)
            cprev[j] = unit(&s) * 4 - 2, dh[j] = unit(&s) * 2 - 1, dc[j] = unit(&s) * 2 - 1;
        k->act16_pack(a16, act, 5 * HH);
        k->cell_backward16(d16, dcp, a16, cprev, dh, NULL, dc, HH);
        k->cell_backward(d32, dcp, act, cprev, dh, NULL, dc, HH);
        for (size_t j = 0; j < HH; j++) {
            const double gi = act[j], gf = act[HH + j], gg = act[2 * HH + j], go = act[3 * HH + j];
            const double t = act[4 * HH + j], dot = (double)dh[j] * go * (1 - t * t), dct = dc[j] + dot;
            const double dcta = fabs((double)dc[j]) + fabs(dot);
            const double want[4] = {dct * gg * gi * (1 - gi), dct * cprev[j] * gf * (1 - gf),
                                    dct * gi * (1 - gg * gg), (double)dh[j] * t * go * (1 - go)};
            const double mag[4] = {dcta * fabs(gg) * gi * (1 - gi), dcta * fabs((double)cprev[j]) * gf * (1 - gf),
                                   dcta * gi * (1 - gg * gg), fabs((double)dh[j] * t) * go * (1 - go)};
            for (int q = 0; q < 4; q++) {
                if (mag[q] == 0) continue;
                e16 = fmax(e16, fabs((double)d16[q * HH + j] - want[q]) / mag[q]);
                e32 = fmax(e32, fabs((double)d32[q * HH + j] - want[q]) / mag[q]);
            }
        }
    }
    CHECK_MSG(e16 <= 6 * 0x1p-8 && e16 > 0,
              "lstm cell_backward16 (act16): gate gradient error %.3g of the magnitude bound (%.2f x 2^-8; bound 6); "
              "fp32-saved: %.3g",
              e16, e16 / 0x1p-8, e32);
    if (getenv("AMP_TEST_VERBOSE"))
        printf("# lstm act16 backward: worst gate gradient error %.3g (%.2f x 2^-8) of the magnitude bound; fp32-saved "
               "%.3g\n",
               e16, e16 / 0x1p-8, e32);
}

void test_lstm_kernels(void) {
    const amp_lstm_kernels *ref = amp_lstm_kernels_for(AMP_ISA_REF);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    float act[5 * MAXH], cprev[MAXH], dh[MAXH], dh2[MAXH], dc[MAXH];
    float dgr_r[4 * MAXH], dgr_k[4 * MAXH], dcp_r[MAXH], dcp_k[MAXH], acc_r[4 * MAXH], acc_k[4 * MAXH];
    uint16_t a16_r[5 * MAXH], a16_k[5 * MAXH];
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (isa == AMP_ISA_REF || !amp_isa_supported((amp_isa)isa)) continue;
        const amp_lstm_kernels *k = amp_lstm_kernels_for((amp_isa)isa);
        int bad_bwd = 0, bad_acc = 0, bad_add = 0, bad_pack = 0, bad_bwd16 = 0;
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

                /* the same row saved as act16 (NaN activations now and then) */
                if (rep & 4 && H) act[next(&s) % (5 * H)] = NAN;
                memset(a16_k, 0xff, sizeof a16_k);
                ref->act16_pack(a16_r, act, 5 * H);
                k->act16_pack(a16_k, act, 5 * H);
                if (memcmp(a16_r, a16_k, 5 * H * sizeof *a16_r) != 0) bad_pack++;
                memset(dgr_r, 0, sizeof dgr_r), memset(dgr_k, 0xff, sizeof dgr_k);
                memcpy(dcp_r, dc, sizeof dc), memcpy(dcp_k, dc, sizeof dc);
                ref->cell_backward16(dgr_r, dcp_r, a16_r, cprev, dh, two ? dh2 : NULL, alias ? dcp_r : dc, H);
                k->cell_backward16(dgr_k, dcp_k, a16_r, cprev, dh, two ? dh2 : NULL, alias ? dcp_k : dc, H);
                if (!same_bits(dgr_r, dgr_k, 4 * H) || !same_bits(dcp_r, dcp_k, H)) bad_bwd16++;

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
        CHECK_MSG(bad_bwd == 0 && bad_acc == 0 && bad_add == 0 && bad_pack == 0 && bad_bwd16 == 0,
                  "lstm kernels %s: %d cell_backward, %d acc, %d add3, %d act16_pack and %d cell_backward16 cases "
                  "differ from ref",
                  amp_isa_name((amp_isa)isa), bad_bwd, bad_acc, bad_add, bad_pack, bad_bwd16);
    }
    check_act16_codec();
    check_backward16_error();
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
    float gr[4 * MAXH], gr2[4 * MAXH], bi[4 * MAXH], bh[4 * MAXH], c0[MAXH];
    uint16_t hb_r[MAXH], hb_k[MAXH], a16_r[5 * MAXH], cs16_r[MAXH];
    _Alignas(64) uint16_t a16_k[5 * MAXH], cs16_k[MAXH];
    /* 64-byte aligned rows, so the streaming stores of the AVX-512 kernel run where H allows */
    _Alignas(64) float act_r[5 * MAXH], act_k[5 * MAXH], cs_r[MAXH], cs_k[MAXH];
    float c_r[MAXH], c_k[MAXH], h_r[MAXH], h_k[MAXH];
    amp_lstm_kernels soft;
    for (int isa = 0; isa <= AMP_ISA_COUNT; isa++) {
        const char *name;
        const amp_lstm_kernels *k = table_at(isa, &soft, &name);
        if (!k) continue;
        const amp_vmath_kernels *vm = amp_vmath_kernels_for(isa < AMP_ISA_COUNT ? (amp_isa)isa : AMP_ISA_AVX512);
        int bad = 0;
        for (size_t H = 0; H <= MAXH; H++) {
            for (int rep = 0; rep < 16; rep++) {
                for (size_t j = 0; j < 4 * H; j++)
                    gr[j] = preact(&s), gr2[j] = preact(&s), bi[j] = preact(&s), bh[j] = preact(&s);
                for (size_t j = 0; j < H; j++) c0[j] = grad(&s);
                const float *b1 = rep & 1 ? bi : NULL, *b2 = rep & 2 ? bh : NULL, *g2 = rep & 8 ? gr2 : NULL;
                const bool save = rep & 4, stream = (rep + H) & 1;
                memcpy(c_r, c0, sizeof c0), memcpy(c_k, c0, sizeof c0);
                memset(act_r, 0, sizeof act_r), memset(act_k, 0xff, sizeof act_k);
                memset(h_r, 0, sizeof h_r), memset(h_k, 0xff, sizeof h_k);
                memset(cs_r, 0, sizeof cs_r), memset(cs_k, 0, sizeof cs_k);
                amp_lstm_cell_forward_composed(vm, k, act_r, save ? cs_r : NULL, c_r, h_r, gr, g2, b1, b2, H);
                k->cell_forward(act_k, save ? cs_k : NULL, c_k, h_k, gr, g2, b1, b2, H, stream);
                if (!same_bits(act_r, act_k, 5 * H) || !same_bits(c_r, c_k, H) || !same_bits(h_r, h_k, H) ||
                    !same_bits(cs_r, cs_k, H))
                    bad++;
                if (k->cell_forward_bf16) { /* from the composition's results: packed, c, h' and c' rounded */
                    uint16_t cb[MAXH];
                    amp_lstm_kernels_for(AMP_ISA_REF)->act16_pack(a16_r, act_r, 5 * H);
                    amp_convert(cs16_r, AMP_BF16, c0, AMP_F32, H);
                    amp_convert(hb_r, AMP_BF16, h_r, AMP_F32, H);
                    amp_convert(cb, AMP_BF16, c_r, AMP_F32, H);
                    amp_convert(c_r, AMP_F32, cb, AMP_BF16, H);
                    /* rep 3: nothing saved (act and c_save NULL), the forward alone */
                    const bool none = (rep & 3) == 3;
                    memcpy(c_k, c0, sizeof c0);
                    memset(a16_k, 0xff, sizeof a16_k), memset(cs16_k, 0xff, sizeof cs16_k);
                    memset(hb_k, 0xff, sizeof hb_k);
                    k->cell_forward_bf16(none ? NULL : a16_k, save && !none ? cs16_k : NULL, c_k, hb_k, gr, g2, b1, b2,
                                         H, !stream);
                    /* act16 NaNs compared as NaNs: the fp32 NaN's sign may differ, as above */
                    if ((!none && !same_bf16(a16_r, a16_k, 5 * H)) || !same_bits(c_r, c_k, H) ||
                        (save && !none && !same_bf16(cs16_r, cs16_k, H)) || !same_bf16(hb_r, hb_k, H))
                        bad++;
                }
            }
        }
        CHECK_MSG(bad == 0, "lstm cell_forward %s: %d rows differ from the composition of its vecmath and add3",
                  name, bad);
    }
}

void test_lstm_cell_backward_bf16_kernels(void) {
    uint64_t s = 0x94d049bb133111ebull;
    float act[5 * MAXH], cprev[MAXH], dh[MAXH], dh2[MAXH], dc[MAXH], tmp[4 * MAXH];
    float db_r[4 * MAXH], db_k[4 * MAXH], dcp_r[MAXH], dcp_k[MAXH], dgr_k[4 * MAXH];
    uint16_t dg_r[4 * MAXH], dg_k[4 * MAXH], a16[5 * MAXH], cp16[MAXH], dh16[MAXH];
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
                const bool two = rep & 1, alias = rep & 2, sum = (rep + H) % 3 != 0, keep = (rep + H) % 2 == 0;
                /* the saved state as the forward leaves it: act16 and c in bf16 */
                k->act16_pack(a16, act, 5 * H);
                amp_convert(cp16, AMP_BF16, cprev, AMP_F32, H);
                amp_convert(cprev, AMP_F32, cp16, AMP_BF16, H);
                amp_convert(dh16, AMP_BF16, dh, AMP_F32, H); /* h's gradient in bf16, as the kernel reads it */
                amp_convert(dh, AMP_F32, dh16, AMP_BF16, H);
                memcpy(dcp_r, dc, sizeof dc), memcpy(dcp_k, dc, sizeof dc);
                memset(dg_k, 0xff, sizeof dg_k);
                k->cell_backward16(tmp, dcp_r, a16, cprev, dh, two ? dh2 : NULL, alias ? dcp_r : dc, H);
                if (sum) k->acc(db_r, tmp, 4 * H);
                amp_convert(dg_r, AMP_BF16, tmp, AMP_F32, 4 * H);
                memset(dgr_k, 0xff, sizeof dgr_k);
                k->cell_backward_bf16(dg_k, sum ? db_k : NULL, keep ? dgr_k : NULL, dcp_k, a16, cp16, dh16, two ? dh2 : NULL,
                                      alias ? dcp_k : dc, H);
                if (!same_bf16(dg_r, dg_k, 4 * H) || !same_bits(db_r, db_k, 4 * H) ||
                    !same_bits(dcp_r, dcp_k, H) || (keep && !same_bits(tmp, dgr_k, 4 * H)))
                    bad++;
            }
        }
        CHECK_MSG(bad == 0, "lstm cell_backward_bf16 %s: %d rows differ from cell_backward16 + acc + amp_convert",
                  amp_isa_name((amp_isa)isa), bad);
    }
    if (tested == 0) CHECK(true); /* no path here has the fused kernel */
}
