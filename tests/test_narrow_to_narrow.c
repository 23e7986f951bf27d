/* Narrow -> narrow goes through fp32 (exact), so it must be one correct rounding of the source value:
 * the reference encoder applied to the reference decoding, for every source pattern. Also the
 * identity conversions, which must copy bits (NaN payloads included), and in-place conversion, which
 * amp/formats.h allows when dst == src and the two dtypes have the same size. */
#include <stdlib.h>

#include "harness.h"
#include "reference_formats.h"
#include "test_util.h"
#include "tests.h"

enum { MAX_PATTERNS = 1 << 16 };

/* Runs amp_convert(_sat) of every src pattern to dst, out of place and, when the sizes match, in
 * place; compares against want. `buf` and `out` hold MAX_PATTERNS elements of 2 bytes. */
static void check_pair(amp_dtype dst, amp_dtype src, int sat, const uint16_t *want, uint16_t *buf, uint16_t *out,
                       const char *isa_name) {
    const uint32_t count = ref_pattern_count(src);
    const char *fn = test_convert_name(sat);
    for (int in_place = 0; in_place < 2; in_place++) {
        if (in_place && amp_dtype_size(dst) != amp_dtype_size(src)) continue;
        for (uint32_t p = 0; p < count; p++) test_elem_set(src, buf, p, p);
        void *target = in_place ? (void *)buf : (void *)out;
        const int status = test_convert(sat, target, dst, buf, src, count);
        CHECK_EQ_INT(status, AMP_OK);
        for (uint32_t p = 0; p < count; p++)
            CHECK_EQ_BITS(test_elem_get(dst, target, p), want[p], "%s[%s] %s -> %s%s, source 0x%X", fn, isa_name,
                          amp_dtype_name(src), amp_dtype_name(dst), in_place ? " in place" : "", p);
    }
}

void test_narrow_to_narrow(void) {
    uint16_t *want[2] = {malloc(MAX_PATTERNS * 2), malloc(MAX_PATTERNS * 2)};
    uint16_t *buf = malloc(MAX_PATTERNS * 2), *out = malloc(MAX_PATTERNS * 2);
    if (!CHECK(want[0] && want[1] && buf && out)) goto done;
    for (int s = 0; s < REF_NARROW_COUNT; s++) {
        for (int d = 0; d < REF_NARROW_COUNT; d++) {
            if (s == d) continue;
            const amp_dtype src = ref_narrow_dtypes[s], dst = ref_narrow_dtypes[d];
            for (uint32_t p = 0; p < ref_pattern_count(src); p++) {
                const float x = f32_from_bits(ref_decode(src, p));
                want[0][p] = (uint16_t)ref_encode(dst, x, false);
                want[1][p] = (uint16_t)ref_encode(dst, x, true);
            }
            for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
                if (!test_isa_begin(isa)) continue;
                for (int sat = 0; sat < 2; sat++)
                    check_pair(dst, src, sat, want[sat], buf, out, amp_isa_name((amp_isa)isa));
            }
            test_isa_end();
        }
    }
done:
    free(want[0]);
    free(want[1]);
    free(buf);
    free(out);
}

void test_identity_copies(void) {
    enum { F32_COUNT = 4096 };
    const uint64_t seed = harness_seed();
    harness_note("seed %llu (AMP_TEST_SEED=%llu replays it)", (unsigned long long)seed, (unsigned long long)seed);
    test_rng rng = {seed ^ 0x1D};
    uint16_t *src = malloc(MAX_PATTERNS * 2), *out = malloc(MAX_PATTERNS * 2);
    uint32_t *f32_src = malloc(F32_COUNT * 4), *f32_out = malloc(F32_COUNT * 4);
    if (!CHECK(src && out && f32_src && f32_out)) goto done;
    /* fp32 data: random words (mostly finite), and every kind of NaN amp must not touch. */
    static const uint32_t specials[] = {0x7F800001u, 0xFF800001u, 0x7FBFFFFFu, 0x7FC00001u, 0xFFFFFFFFu,
                                        0x7F800000u, 0x00000001u, 0x80000000u};
    for (int i = 0; i < F32_COUNT; i++) f32_src[i] = (uint32_t)test_rng_next(&rng);
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) f32_src[i * 7] = specials[i];
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!test_isa_begin(isa)) continue;
        const char *isa_name = amp_isa_name((amp_isa)isa);
        for (int sat = 0; sat < 2; sat++) {
            const char *fn = test_convert_name(sat);
            memset(f32_out, 0, F32_COUNT * 4);
            CHECK_EQ_INT(test_convert(sat, f32_out, AMP_F32, f32_src, AMP_F32, F32_COUNT), AMP_OK);
            for (int i = 0; i < F32_COUNT; i++)
                CHECK_EQ_BITS(f32_out[i], f32_src[i], "%s[%s] f32 -> f32, element %d", fn, isa_name, i);
            for (int d = 0; d < REF_NARROW_COUNT; d++) {
                const amp_dtype dt = ref_narrow_dtypes[d];
                const uint32_t count = ref_pattern_count(dt);
                for (uint32_t p = 0; p < count; p++) test_elem_set(dt, src, p, p);
                memset(out, 0, MAX_PATTERNS * 2);
                CHECK_EQ_INT(test_convert(sat, out, dt, src, dt, count), AMP_OK);
                for (uint32_t p = 0; p < count; p++)
                    CHECK_EQ_BITS(test_elem_get(dt, out, p), p, "%s[%s] %s -> %s", fn, isa_name, amp_dtype_name(dt),
                                  amp_dtype_name(dt));
                /* In place: nothing may change. */
                CHECK_EQ_INT(test_convert(sat, src, dt, src, dt, count), AMP_OK);
                for (uint32_t p = 0; p < count; p++)
                    CHECK_EQ_BITS(test_elem_get(dt, src, p), p, "%s[%s] %s -> %s in place", fn, isa_name,
                                  amp_dtype_name(dt), amp_dtype_name(dt));
            }
        }
    }
    test_isa_end();
done:
    free(src);
    free(out);
    free(f32_src);
    free(f32_out);
}
