/* The convert table's acc_rounded kernels (kernels/convert_kernels.h: acc += v rounded to a narrow
 * dtype and widened back, or acc = 0 + that with store or stream), every path and every narrow dtype, against
 * the independent format reference (reference_formats.h: ref_encode, then ref_decode) and an fp32
 * add written here: bit for bit, any NaN matching any NaN. Values: random magnitudes across each
 * format's range with its subnormals, rounding ties, overflow to inf, NaN, +-inf and signed zeros;
 * acc starting random, at -0 and at +-inf (inf + -inf is NaN); in store and stream modes acc starts
 * as garbage that must not show. Every length to 70 and a few across vector and chunk boundaries, at
 * sixteen alignments of both pointers (acc at every float of a 64-byte line, so every length of the
 * stream mode's unaligned head); guard values around acc must stay untouched; the returned maximum
 * is that of the bits of |value| over the values left (above inf where one is NaN). The seed is
 * printed. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/convert_kernels.h"
#include "harness.h"
#include "reference_formats.h"
#include "test_util.h"
#include "tests.h"

enum { MAX_N = 4208, PAD = 16, GUARD = 16 }; /* (MAX_N + PAD + 2 GUARD) floats: whole 64-byte lines */

static bool same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b)); }

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static float bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A value for dtype: mostly random magnitudes from below its subnormals to past its largest finite,
 * some exact ties between two neighbours of the format, some specials */
static float test_value(uint64_t *s, amp_dtype dt) {
    const ref_format *f = ref_format_get(dt);
    const uint64_t r = next(s);
    switch (r % 16) {
    case 0: return (r >> 8) % 2 ? INFINITY : -INFINITY;
    case 1: return bits_to_f32(0x7FC00000u | (uint32_t)(r >> 40 & 0x3FFFFF) | (uint32_t)(r >> 8 & 1) << 31); /* NaN */
    case 2: return (r >> 8) % 2 ? 0.0f : -0.0f;
    case 3: { /* a tie: the midpoint of two neighbouring patterns (exact in fp32 for every narrow format) */
        const unsigned lo = (unsigned)(r >> 12) % ref_max_bits(dt);
        const double a = ref_decode_value(dt, lo), b = ref_decode_value(dt, lo + 1);
        const float t = (float)((a + b) / 2.0);
        return (r >> 9) % 2 ? -t : t;
    }
    default: { /* sign * 2^e * [1, 2), e from 3 binades under the smallest subnormal to 2 over the max */
        const int emin = 1 - f->bias - f->man_bits - 3, emax = (int)ceil(log2(f->max_finite)) + 2;
        const int e = emin + (int)((r >> 8) % (uint64_t)(emax - emin + 1));
        const float m = 1.0f + (float)(r >> 40) / (float)(1u << 24);
        const float v = ldexpf(m, e);
        return (r >> 7) % 2 ? -v : v;
    }
    }
}

static float rounded_ref(amp_dtype dt, float v) { return bits_to_f32(ref_decode(dt, ref_encode(dt, v, false))); }

void test_convert_acc_rounded(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed 0x%llx", (unsigned long long)seed);
    static const size_t extra_n[] = {127, 128, 129, 255, 256, 257, 511, 512, 513, 1000, 4099};
    float *v = malloc((MAX_N + PAD) * sizeof *v), *acc0 = malloc((MAX_N + PAD) * sizeof *acc0);
    /* got 64-byte aligned, and GUARD a line of floats, so acc + off sits at float off of a line */
    float *got = aligned_alloc(64, (MAX_N + PAD + 2 * GUARD) * sizeof *got);
    float *want = malloc((MAX_N + PAD) * sizeof *want);
    if (!CHECK(v && acc0 && got && want)) goto done;
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!amp_isa_supported((amp_isa)isa)) continue;
        const amp_convert_kernels *k = amp_convert_kernels_for((amp_isa)isa);
        for (int d = 0; d < REF_NARROW_COUNT; d++) {
            const amp_dtype dt = ref_narrow_dtypes[d];
            uint64_t s = (seed ^ ((uint64_t)isa << 32 | (uint64_t)d)) | 1;
            if (!CHECK_MSG(k->acc_rounded[dt] != NULL, "%s: no acc_rounded for %s", amp_isa_name((amp_isa)isa),
                           amp_dtype_name(dt)))
                continue;
            size_t bad = 0, cases = 0;
            for (size_t c = 0; c < 71 + sizeof extra_n / sizeof *extra_n; c++) {
                const size_t n = c < 71 ? c : extra_n[c - 71];
                for (size_t off = 0; off < PAD; off++) {
                    const size_t voff = (off * 5) % PAD; /* the two pointers misaligned differently */
                    for (size_t i = 0; i < n; i++) {
                        v[voff + i] = test_value(&s, dt);
                        const uint64_t r = next(&s) % 10;
                        acc0[i] = r == 0 ? -0.0f : r == 1 ? (next(&s) % 2 ? INFINITY : -INFINITY)
                                                         : ldexpf((float)(next(&s) >> 40) - 8388608.0f, -20);
                    }
                    for (int mode = AMP_ACC_ADD; mode <= AMP_ACC_STREAM; mode++, cases++) {
                        const bool store = mode != AMP_ACC_ADD;
                        for (size_t i = 0; i < n; i++) want[i] = (store ? 0.0f : acc0[i]) + rounded_ref(dt, v[voff + i]);
                        float *a = got + GUARD + off;
                        for (size_t i = 0; i < n + PAD + 2 * GUARD; i++) got[i] = bits_to_f32(0xA5A5A5A5u);
                        if (!store) memcpy(a, acc0, n * sizeof *a);
                        const uint32_t max = k->acc_rounded[dt](a, v + voff, n, (amp_acc_mode)mode);
                        k->stream_fence();
                        size_t wrong = 0;
                        for (size_t i = 0; i < n; i++) wrong += !same_bits(a[i], want[i]);
                        /* the returned maximum: that of |want|'s bits, or above inf where a value is NaN */
                        uint32_t want_max = 0;
                        bool nan = false;
                        for (size_t i = 0; i < n; i++) {
                            uint32_t b;
                            memcpy(&b, &want[i], sizeof b);
                            b &= 0x7FFFFFFFu;
                            nan |= b > 0x7F800000u;
                            want_max = b > want_max ? b : want_max;
                        }
                        if (nan ? max <= 0x7F800000u : max != want_max) {
                            if (bad++ < 3)
                                CHECK_MSG(false, "acc_rounded[%s] %s n=%zu off=%zu mode=%d: returned maximum 0x%08x, want 0x%08x",
                                          amp_isa_name((amp_isa)isa), amp_dtype_name(dt), n, off, mode, max, want_max);
                            continue;
                        }
                        for (size_t i = 0; i < GUARD + off; i++) wrong += memcmp(&got[i], &(uint32_t){0xA5A5A5A5u}, 4) != 0;
                        for (size_t i = GUARD + off + n; i < n + PAD + 2 * GUARD; i++)
                            wrong += memcmp(&got[i], &(uint32_t){0xA5A5A5A5u}, 4) != 0;
                        if (wrong && bad++ < 3) {
                            size_t i = 0;
                            while (i < n && same_bits(a[i], want[i])) i++;
                            CHECK_MSG(false, "acc_rounded[%s] %s n=%zu off=%zu mode=%d: %zu wrong%s (v %a acc %a: %a, want %a)",
                                      amp_isa_name((amp_isa)isa), amp_dtype_name(dt), n, off, mode, wrong,
                                      i < n ? "" : " (guards)", i < n ? (double)v[voff + i] : 0.0,
                                      i < n ? (double)acc0[i] : 0.0, i < n ? (double)a[i] : 0.0,
                                      i < n ? (double)want[i] : 0.0);
                        }
                    }
                }
            }
            CHECK_MSG(bad == 0, "acc_rounded[%s] %s: %zu of %zu cases wrong", amp_isa_name((amp_isa)isa),
                      amp_dtype_name(dt), bad, cases);
        }
    }
done:
    free(v), free(acc0), free(got), free(want);
}
