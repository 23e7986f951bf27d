/* The row kernels (src/kernels/elem_kernels.h) of every SIMD path the CPU has against the reference
 * twin, bit for bit (NaN payloads aside): rows of every length up to 80 (tails of 8 and 16 lanes, and
 * none) at misaligned offsets, values with both zeros, subnormals, huge values, infinities and NaN
 * now and then, weights and biases present or not, in place where the ops use it so. max may pick
 * either zero and any NaN (see the header): compared by value, NaN as NaN. absmax_bits exactly, and
 * the reference's against fabsf's largest (or inf's bits, or above them with a NaN); relu's selections
 * (bias_relu, relu_grad) bit for bit, and the reference's against relu's definition. Also: the reference's
 * sums, in their 16-lane order, are within n unit roundoffs of the exact (double) sums of
 * well-scaled rows, and the lane order is what the header says on a row where it shows. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../src/kernels/elem_kernels.h"
#include "harness.h"
#include "tests.h"

enum { MAXN = 80, PAD = 3 };

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static float unit(uint64_t *s) { return (float)(next(s) >> 40) / (float)(1 << 24); } /* [0, 1) */

static float value(uint64_t *s, bool edges) {
    static const float edge[] = {0.0f, -0.0f, 1e-40f, -1e-42f, 3e38f, -3e38f, INFINITY, -INFINITY, NAN, -NAN, 1.0f};
    const uint64_t r = next(s);
    if (edges && r % 24 == 0) return edge[(r >> 8) % (sizeof edge / sizeof edge[0])];
    return (unit(s) * 2.0f - 1.0f) * (float)(1 << (r >> 20) % 8);
}

static bool same(float a, float b) { return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b)); }
static bool same_bits(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!same(a[i], b[i])) return false;
    return true;
}

void test_elem_kernels(void) {
    const amp_elem_kernels *ref = amp_elem_kernels_for(AMP_ISA_REF);
    uint64_t s = 0x2545f4914f6cdd1dull;
    float xa[MAXN + PAD], ya[MAXN + PAD], wa[MAXN + PAD], ba[MAXN + PAD];
    float r1[MAXN + PAD], k1[MAXN + PAD], r2[MAXN + PAD], k2[MAXN + PAD], r3[MAXN + PAD], k3[MAXN + PAD];
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (isa == AMP_ISA_REF || !amp_isa_supported((amp_isa)isa)) continue;
        const amp_elem_kernels *k = amp_elem_kernels_for((amp_isa)isa);
        int bad_elem = 0, bad_red = 0, bad_norm = 0, bad_max = 0;
        for (size_t n = 0; n <= MAXN; n++) {
            for (int rep = 0; rep < 12; rep++) {
                const bool edges = rep % 3 == 2, use_w = rep & 1, use_b = rep & 2;
                const size_t o = (size_t)rep % PAD; /* misaligned rows */
                float *x = xa + o, *y = ya + o, *w = use_w ? wa + o : NULL, *b = use_b ? ba + o : NULL;
                for (size_t i = 0; i < n; i++) x[i] = value(&s, edges), y[i] = value(&s, edges);
                for (size_t i = 0; i < n; i++) wa[o + i] = value(&s, edges), ba[o + i] = value(&s, edges);
                const float c = value(&s, false), mu = value(&s, edges), rs = unit(&s) * 4.0f;

                /* elementwise */
                ref->add(r1, x, y, n), k->add(k1, x, y, n);
                bad_elem += !same_bits(r1, k1, n);
                ref->add_scalar(r1, x, 0.0f, n), k->add_scalar(k1, x, 0.0f, n);
                bad_elem += !same_bits(r1, k1, n);
                memcpy(r1, y, n * sizeof *y), memcpy(k1, y, n * sizeof *y);
                ref->acc(r1, x, n), k->acc(k1, x, n);
                bad_elem += !same_bits(r1, k1, n);
                memcpy(r1, x, n * sizeof *x), memcpy(k1, x, n * sizeof *x);
                ref->sub_scalar(r1, c, n), k->sub_scalar(k1, c, n);
                bad_elem += !same_bits(r1, k1, n);
                ref->div_scalar(r1, c, n), k->div_scalar(k1, c, n);
                bad_elem += !same_bits(r1, k1, n);
                memcpy(r1, y, n * sizeof *y), memcpy(k1, y, n * sizeof *y);
                ref->softmax_grad(r1, x, c, n), k->softmax_grad(k1, x, c, n);
                bad_elem += !same_bits(r1, k1, n);
                memcpy(r1, y, n * sizeof *y), memcpy(k1, y, n * sizeof *y);
                ref->bias_relu(r1, x, n), k->bias_relu(k1, x, n);
                bad_elem += !same_bits(r1, k1, n);
                memcpy(r1, y, n * sizeof *y), memcpy(k1, y, n * sizeof *y);
                ref->relu_grad(r1, x, n), k->relu_grad(k1, x, n);
                bad_elem += n > 0 && memcmp(r1, k1, n * sizeof *r1) != 0; /* selections: NaN payloads too */

                /* reductions */
                bad_red += !same(ref->sum(x, n), k->sum(x, n));
                bad_red += !same(ref->dot(x, y, n), k->dot(x, y, n));
                bad_red += !same(ref->sum_sq_dev(x, mu, n), k->sum_sq_dev(x, mu, n));
                if (n > 0) {
                    const float mr = ref->max(x, n), mk = k->max(x, n);
                    bad_max += !(mr == mk || (isnan(mr) && isnan(mk)));
                    bool any_nan = false;
                    for (size_t i = 0; i < n; i++) any_nan |= isnan(x[i]);
                    if (!any_nan) bad_max += !(mr == mk);
                }

                /* the absolute maximum's bits: the reference against the path, and against fabsf's
                 * largest (finite rows) or the class of what the row holds */
                const uint32_t ar = ref->absmax_bits(x, n), ak = k->absmax_bits(x, n);
                bool has_nan = false, has_inf = false;
                float amax = 0.0f;
                for (size_t i = 0; i < n; i++) {
                    has_nan |= isnan(x[i]), has_inf |= isinf(x[i]);
                    if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
                }
                uint32_t ab;
                memcpy(&ab, &amax, sizeof ab);
                bad_max += ar != ak;
                bad_max += has_nan ? !(ar > 0x7f800000u) : has_inf ? ar != 0x7f800000u : ar != ab;

                /* layer norm rows */
                ref->norm_apply(r1, x, mu, rs, w, b, n), k->norm_apply(k1, x, mu, rs, w, b, n);
                bad_norm += !same_bits(r1, k1, n);
                float sr[2], sk[2];
                ref->norm_grad_sums(sr, y, x, w, mu, rs, n), k->norm_grad_sums(sk, y, x, w, mu, rs, n);
                bad_norm += !same_bits(sr, sk, 2);
                const bool dx = rep & 4, dw = rep & 8;
                memcpy(r2, wa, sizeof wa), memcpy(k2, wa, sizeof wa), memcpy(r3, ba, sizeof ba), memcpy(k3, ba, sizeof ba);
                ref->norm_grad_apply(dx ? r1 : NULL, dw ? r2 : NULL, r3, y, x, w, mu, rs, sr[0], sr[1], n);
                k->norm_grad_apply(dx ? k1 : NULL, dw ? k2 : NULL, k3, y, x, w, mu, rs, sr[0], sr[1], n);
                bad_norm += (dx && !same_bits(r1, k1, n)) + !same_bits(r2, k2, n) + !same_bits(r3, k3, n);
            }
        }
        CHECK_MSG(bad_elem == 0 && bad_red == 0 && bad_norm == 0 && bad_max == 0,
                  "elem kernels %s: %d elementwise, %d reduction, %d norm and %d max cases differ from ref",
                  amp_isa_name((amp_isa)isa), bad_elem, bad_red, bad_norm, bad_max);
    }

    /* the reference's order: lane l holds the elements l, l + 16, ...; the fold pairs l with l + 8 */
    float row[32] = {0};
    row[0] = 1e8f, row[16] = -1e8f, row[8] = 1.0f; /* (1e8 + -1e8) + 1: exact 1 only in this order */
    CHECK(ref->sum(row, 32) == 1.0f);
    /* accuracy: within n unit roundoffs of the exact sum of |terms| */
    int bad_acc = 0;
    for (size_t n = 1; n <= MAXN; n++) {
        for (size_t i = 0; i < n; i++) xa[i] = value(&s, false), ya[i] = value(&s, false);
        double e = 0.0, ea = 0.0, d = 0.0, da = 0.0;
        for (size_t i = 0; i < n; i++) {
            e += xa[i], ea += fabs(xa[i]);
            d += (double)xa[i] * ya[i], da += fabs((double)xa[i] * ya[i]);
        }
        const double u = ldexp(1.0, -24) * (double)n;
        bad_acc += fabs(ref->sum(xa, n) - e) > u * ea + 1e-30;
        bad_acc += fabs(ref->dot(xa, ya, n) - d) > 2.0 * u * da + 1e-30;
    }
    CHECK_MSG(bad_acc == 0, "elem kernels ref: %d sums outside n unit roundoffs", bad_acc);

    /* relu's definitions on the reference: bias_relu gives x + b where that sum is > 0 or NaN, else +0
     * (-0 and -inf included); relu_grad keeps g where x > 0 or NaN, else +0 */
    const float pos0 = 0.0f;
    int bad_relu = 0;
    for (int t = 0; t < 20000; t++) {
        const float g = value(&s, true), x = value(&s, true), b = value(&s, true);
        float v = g, d = g;
        ref->bias_relu(&v, &b, 1);
        ref->relu_grad(&d, &x, 1);
        const float sum = g + b;
        bad_relu += sum > 0.0f || isnan(sum) ? !same(v, sum) : memcmp(&v, &pos0, sizeof v) != 0;
        bad_relu += x > 0.0f || isnan(x) ? memcmp(&d, &g, sizeof d) != 0 : memcmp(&d, &pos0, sizeof d) != 0;
    }
    CHECK_MSG(bad_relu == 0, "elem kernels ref: %d relu results other than relu's definition", bad_relu);
}
