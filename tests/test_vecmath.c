/* The elementwise math kernels (src/kernels/vecmath.h), every path this CPU runs, against libm in
 * double precision (exp, tanh, 1/(1 + exp(-x)), erfc), rounded-to-fp32 errors measured in ulps of the
 * exact result:
 *   (a) a strided sweep of all 2^32 fp32 bit patterns (every 4099th pattern under AMP_TEST_QUICK,
 *       every 257th otherwise), which visits every binade of both signs, NaNs and infinities;
 *   (b) named edge cases: NaN, +-inf, +-0, the largest and smallest numbers, the overflow and
 *       underflow thresholds of exp, the saturation points of tanh and sigmoid, erfc's tails, whose
 *       special values must be exact (bits for bits where the sign of zero matters);
 *   (c) lengths 0..70 at offsets 0..3 with guard values around dst: nothing outside [0, n) written,
 *       each element's bits equal to a one-element call (tails run the same code), in place equal to
 *       out of place.
 * The bound is AMP_VECMATH_MAX_ULP (4 ulps) for the SIMD paths. The reference path is libm itself,
 * reported as a note and held to the same bound. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/vecmath.h"
#include "amp.h"
#include "harness.h"
#include "tests.h"

enum { FN_EXP, FN_TANH, FN_SIGMOID, FN_ERFC, FN_COUNT };
static const char *const fn_names[FN_COUNT] = {"exp", "tanh", "sigmoid", "erfc"};

static amp_vmath_kernel kernel_of(const amp_vmath_kernels *k, int fn) {
    switch (fn) {
    case FN_EXP: return k->exp;
    case FN_TANH: return k->tanh;
    case FN_SIGMOID: return k->sigmoid;
    default: return k->erfc;
    }
}

static double exact(int fn, float x) {
    const double d = x;
    switch (fn) {
    case FN_EXP: return exp(d);
    case FN_TANH: return tanh(d);
    case FN_SIGMOID: return 1.0 / (1.0 + exp(-d));
    default: return erfc(d);
    }
}

static float f32_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Error of `got` against the exact `want`, in ulps of want's binade (fp32's, subnormals included);
 * 0 for matching NaNs and infinities, 1e9 for a wrong class. */
static double ulp_error(float got, double want) {
    if (isnan(want)) return isnan(got) ? 0.0 : 1e9;
    const float wf = (float)want;
    if (isinf(wf)) return got == wf ? 0.0 : 1e9;
    if (!isfinite(got)) return 1e9;
    int e = 0;
    frexp(want, &e); /* want = m 2^e, m in [0.5, 1) */
    const double ulp = ldexp(1.0, e - 24 > -149 ? e - 24 : -149);
    return fabs((double)got - want) / ulp;
}

typedef struct worst {
    double ulp;
    float x, got;
} worst;

static void judge(worst *w, float x, float got, double want) {
    const double u = ulp_error(got, want);
    if (u > w->ulp || (isnan(u) && !isnan(w->ulp))) w->ulp = u, w->x = x, w->got = got;
}

enum { CHUNK = 4096 };

static void sweep(amp_vmath_kernel k, int fn, uint32_t stride, worst *w) {
    float *in = malloc(sizeof(float) * CHUNK * 2);
    if (!CHECK(in)) return;
    float *out = in + CHUNK;
    uint64_t u = 0;
    while (u < ((uint64_t)1 << 32)) {
        size_t n = 0;
        for (; n < CHUNK && u < ((uint64_t)1 << 32); n++, u += stride) in[n] = f32_of((uint32_t)u);
        k(out, in, n);
        for (size_t i = 0; i < n; i++) judge(w, in[i], out[i], exact(fn, in[i]));
    }
    free(in);
}

/* The edge cases: the same list for every function (each is someone's boundary). */
static const uint32_t edge_bits[] = {
    0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu,
    0x00000001u, 0x80000001u, 0x007FFFFFu, 0x00800000u, 0x80800000u, 0x7F7FFFFFu, 0xFF7FFFFFu,
    0x42B17217u, 0x42B17218u, 0x42B17219u, /* ln(FLT_MAX) = 88.7228: exp's overflow threshold */
    0xC2AEAC4Fu, 0xC2AEAC50u,              /* -87.3365: exp's last normal result */
    0xC2CFF1B4u, 0xC2CFF1B5u, 0xC2D00000u, /* -103.97: exp's last subnormal result */
    0x3F800000u, 0xBF800000u, 0x3F000000u, 0xBF000000u, 0x3F317218u, 0x3E800000u,
};
static const float edge_values[] = {1e-30f, -1e-30f, 1e-7f, -1e-7f, 0.25f, 0.55f, 0.75f, 0.84375f, 1.25f,
                                    2.5f, 4.0f, -4.0f, 8.66f, 9.0f, 9.01f, 10.0f, -10.0f, 10.05f, 10.06f, 15.0f,
                                    -15.0f, 17.0f, 20.0f, 30.0f, 88.0f, -88.0f, 89.0f, -89.0f, 100.0f, -100.0f,
                                    103.0f, -103.0f, 104.0f, -104.0f, 1e10f, -1e10f};

static void edges(amp_vmath_kernel k, int fn, const char *isa, worst *w) {
    enum { NB = sizeof edge_bits / sizeof edge_bits[0], NV = sizeof edge_values / sizeof edge_values[0] };
    float in[NB + NV], out[NB + NV];
    for (int i = 0; i < NB; i++) in[i] = f32_of(edge_bits[i]);
    for (int i = 0; i < NV; i++) in[NB + i] = edge_values[i];
    k(out, in, NB + NV);
    for (int i = 0; i < NB + NV; i++) {
        const double want = exact(fn, in[i]);
        const double u = ulp_error(out[i], want);
        judge(w, in[i], out[i], want);
        CHECK_MSG(u <= AMP_VECMATH_MAX_ULP, "%s %s(%a) = %a, want %a (%.2f ulp)", isa, fn_names[fn], (double)in[i],
                  (double)out[i], want, u);
        /* zeros and the specials bit for bit: the sign of a zero result must be right */
        if (want == 0.0 || isinf(want) || fabs(want) == 1.0 || want == 2.0)
            CHECK_MSG(bits_of(out[i]) == bits_of((float)want) || (fn == FN_TANH && fabs(in[i]) < 9.0f),
                      "%s %s(%a) = %a, want exactly %a", isa, fn_names[fn], (double)in[i], (double)out[i], want);
        if (isnan(in[i])) CHECK_MSG(isnan(out[i]), "%s %s(NaN) is not NaN", isa, fn_names[fn]);
    }
}

/* tails: lengths 0..70, offsets 0..3, guards; the bits of every element equal a one-element call */
static void lengths(amp_vmath_kernel k, const char *isa, int fn) {
    enum { MAXN = 70, PAD = 8, GUARD = 0x7FBADBADu };
    float src[MAXN + 2 * PAD], dst[MAXN + 2 * PAD], one[MAXN + 2 * PAD], inplace[MAXN + 2 * PAD];
    uint64_t s = 0x2545F4914F6CDD1Dull;
    for (int i = 0; i < MAXN + 2 * PAD; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        src[i] = (float)((double)(int64_t)(s >> 11) * 0x1p-48); /* about +-16 */
        k(&one[i], &src[i], 1);
    }
    int bad = 0;
    for (int off = 0; off < 4; off++)
        for (int n = 0; n <= MAXN; n++) {
            for (int i = 0; i < MAXN + 2 * PAD; i++) dst[i] = f32_of(GUARD);
            memcpy(inplace, src, sizeof src);
            k(dst + PAD + off, src + PAD + off, (size_t)n);
            k(inplace + PAD + off, inplace + PAD + off, (size_t)n);
            for (int i = 0; i < MAXN + 2 * PAD; i++) {
                const bool inside = i >= PAD + off && i < PAD + off + n;
                const uint32_t want = inside ? bits_of(one[i]) : GUARD;
                const uint32_t want_ip = inside ? bits_of(one[i]) : bits_of(src[i]);
                if (bits_of(dst[i]) != want || bits_of(inplace[i]) != want_ip) {
                    if (bad++ < 5)
                        CHECK_MSG(false, "%s %s n=%d off=%d: element %d is %08x (in place %08x), want %08x", isa,
                                  fn_names[fn], n, off, i - PAD - off, bits_of(dst[i]), bits_of(inplace[i]), want);
                }
            }
        }
    CHECK_MSG(bad == 0, "%s %s: %d tail mismatches", isa, fn_names[fn], bad);
}

void test_vecmath(void) {
    const uint32_t stride = harness_quick() ? 4099u : 257u;
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!amp_isa_supported((amp_isa)isa)) continue;
        const amp_vmath_kernels *k = amp_vmath_kernels_for((amp_isa)isa);
        if (isa != AMP_ISA_REF && k->exp == amp_vmath_kernels_for(AMP_ISA_REF)->exp) continue; /* inherits ref */
        const char *name = amp_isa_name((amp_isa)isa);
        char note[256];
        int len = snprintf(note, sizeof note, "vecmath %s max ulp (stride %u + edges):", name, (unsigned)stride);
        for (int fn = 0; fn < FN_COUNT; fn++) {
            const amp_vmath_kernel kf = kernel_of(k, fn);
            worst w = {0.0, 0.0f, 0.0f};
            sweep(kf, fn, stride, &w);
            edges(kf, fn, name, &w);
            lengths(kf, name, fn);
            CHECK_MSG(w.ulp <= AMP_VECMATH_MAX_ULP, "%s %s: %.3f ulp at x = %a (got %a, want %a)", name, fn_names[fn],
                      w.ulp, (double)w.x, (double)w.got, exact(fn, w.x));
            if (len > 0 && (size_t)len < sizeof note)
                len += snprintf(note + len, sizeof note - (size_t)len, " %s %.2f (x=%a)", fn_names[fn], w.ulp,
                                (double)w.x);
        }
        harness_note("%s", note);
    }
}
