/* fp32 -> narrow at the places where encoders go wrong: ties, the overflow threshold, the subnormal
 * range, signed zeros, NaNs and infinities. Every expectation is a literal worked out by hand (the
 * comment gives the arithmetic), checked against the reference too, then against the scalar
 * functions and amp_convert / amp_convert_sat on every supported path. */
#include <stdlib.h>

#include "harness.h"
#include "reference_formats.h"
#include "test_util.h"
#include "tests.h"

typedef struct encode_case {
    amp_dtype dtype;
    uint32_t input;    /* fp32 bits */
    unsigned want;     /* amp_convert / amp_*_from_fp32 */
    unsigned want_sat; /* amp_convert_sat / amp_*_from_fp32_sat */
    const char *why;
} encode_case;

static const encode_case cases[] = {
    /* f16: E5 M10 bias 15; max 65504 = 0x7BFF; ulp at 1 is 2^-10; subnormals are k * 2^-24. */
    {AMP_F16, 0x3F801000u, 0x3C00, 0x3C00, "1 + 2^-11: tie, to even 1.0"},
    {AMP_F16, 0x3F803000u, 0x3C02, 0x3C02, "1 + 3*2^-11: tie, to even 1 + 2^-9"},
    {AMP_F16, 0x3F801001u, 0x3C01, 0x3C01, "just above the tie rounds up"},
    {AMP_F16, 0x3F800FFFu, 0x3C00, 0x3C00, "just below the tie rounds down"},
    {AMP_F16, 0x477FE000u, 0x7BFF, 0x7BFF, "65504, the largest finite"},
    {AMP_F16, 0x477FEFFFu, 0x7BFF, 0x7BFF, "65519.996 (below 65520) rounds to max"},
    {AMP_F16, 0x477FF000u, 0x7C00, 0x7BFF, "65520: tie between 65504 and 2^16, to even 2^16 = overflow"},
    {AMP_F16, 0xC77FF000u, 0xFC00, 0xFBFF, "-65520"},
    {AMP_F16, 0x47800000u, 0x7C00, 0x7BFF, "65536"},
    {AMP_F16, 0x7F7FFFFFu, 0x7C00, 0x7BFF, "FLT_MAX"},
    {AMP_F16, 0x7F800000u, 0x7C00, 0x7BFF, "+inf"},
    {AMP_F16, 0xFF800000u, 0xFC00, 0xFBFF, "-inf"},
    {AMP_F16, 0x38800000u, 0x0400, 0x0400, "2^-14, the smallest normal"},
    {AMP_F16, 0x33000000u, 0x0000, 0x0000, "2^-25: tie between 0 and 2^-24, to even 0"},
    {AMP_F16, 0x33000001u, 0x0001, 0x0001, "just above 2^-25 rounds to 2^-24"},
    {AMP_F16, 0xB3000000u, 0x8000, 0x8000, "-2^-25 rounds to -0"},
    {AMP_F16, 0x33C00000u, 0x0002, 0x0002, "1.5 * 2^-24: tie, to even 2 * 2^-24"},
    {AMP_F16, 0x34200000u, 0x0002, 0x0002, "2.5 * 2^-24: tie, to even 2 * 2^-24"},
    {AMP_F16, 0x387FE000u, 0x0400, 0x0400, "1023.5 * 2^-24: largest subnormal's tie, up to 2^-14"},
    {AMP_F16, 0x387FDFFFu, 0x03FF, 0x03FF, "just below it stays the largest subnormal"},
    {AMP_F16, 0x00000001u, 0x0000, 0x0000, "fp32's smallest subnormal underflows to 0"},
    {AMP_F16, 0x80000001u, 0x8000, 0x8000, "and its negative to -0"},
    {AMP_F16, 0x00000000u, 0x0000, 0x0000, "+0"},
    {AMP_F16, 0x80000000u, 0x8000, 0x8000, "-0"},
    {AMP_F16, 0x7FC00000u, 0x7E00, 0x7E00, "quiet NaN"},
    {AMP_F16, 0xFFC00000u, 0xFE00, 0xFE00, "-quiet NaN"},
    {AMP_F16, 0x7F800001u, 0x7E00, 0x7E00, "signalling NaN becomes the canonical quiet NaN"},
    {AMP_F16, 0xFF800001u, 0xFE00, 0xFE00, "-signalling NaN"},
    {AMP_F16, 0x7F802000u, 0x7E00, 0x7E00, "the image of f16 0x7C01: payload not kept on encode"},
    {AMP_F16, 0x7FBFFFFFu, 0x7E00, 0x7E00, "signalling NaN, full payload"},
    {AMP_F16, 0xFFFFFFFFu, 0xFE00, 0xFE00, "-NaN, full payload"},
    /* bf16: the top half of fp32, rounded; its exponent range is fp32's, so fp32 subnormals are exact
     * inputs to a subnormal-capable bf16. */
    {AMP_BF16, 0x3F808000u, 0x3F80, 0x3F80, "1 + 2^-8: tie, to even 1.0"},
    {AMP_BF16, 0x3F818000u, 0x3F82, 0x3F82, "1 + 3*2^-8: tie, to even"},
    {AMP_BF16, 0x3F808001u, 0x3F81, 0x3F81, "just above the tie"},
    {AMP_BF16, 0x7F7F0000u, 0x7F7F, 0x7F7F, "(2 - 2^-7) * 2^127, the largest finite"},
    {AMP_BF16, 0x7F7F7FFFu, 0x7F7F, 0x7F7F, "just below the overflow tie"},
    {AMP_BF16, 0x7F7F8000u, 0x7F80, 0x7F7F, "(2 - 2^-8) * 2^127: tie, to even 2^128 = overflow"},
    {AMP_BF16, 0xFF7F8000u, 0xFF80, 0xFF7F, "its negative"},
    {AMP_BF16, 0x7F7FFFFFu, 0x7F80, 0x7F7F, "FLT_MAX overflows"},
    {AMP_BF16, 0x7F800000u, 0x7F80, 0x7F7F, "+inf"},
    {AMP_BF16, 0xFF800000u, 0xFF80, 0xFF7F, "-inf"},
    {AMP_BF16, 0x00012345u, 0x0001, 0x0001, "fp32 subnormal, low half below the tie"},
    {AMP_BF16, 0x80012345u, 0x8001, 0x8001, "its negative"},
    {AMP_BF16, 0x00018000u, 0x0002, 0x0002, "subnormal tie, odd 0x0001 up to even 0x0002"},
    {AMP_BF16, 0x00028000u, 0x0002, 0x0002, "subnormal tie, even 0x0002 stays"},
    {AMP_BF16, 0x00008000u, 0x0000, 0x0000, "2^-134: tie between 0 and 2^-133, to 0"},
    {AMP_BF16, 0x00008001u, 0x0001, 0x0001, "just above it"},
    {AMP_BF16, 0x007E8000u, 0x007E, 0x007E, "tie below an even subnormal"},
    {AMP_BF16, 0x007F8000u, 0x0080, 0x0080, "largest subnormal's tie, up to 2^-126"},
    {AMP_BF16, 0x007FFFFFu, 0x0080, 0x0080, "fp32's largest subnormal rounds to 2^-126"},
    {AMP_BF16, 0x80000000u, 0x8000, 0x8000, "-0"},
    {AMP_BF16, 0x7FC00000u, 0x7FC0, 0x7FC0, "quiet NaN"},
    {AMP_BF16, 0x7F800001u, 0x7FC0, 0x7FC0, "signalling NaN (truncation would give inf)"},
    {AMP_BF16, 0xFF800001u, 0xFFC0, 0xFFC0, "-signalling NaN"},
    {AMP_BF16, 0x7FFFFFFFu, 0x7FC0, 0x7FC0, "NaN whose rounding would carry"},
    {AMP_BF16, 0xFFFFFFFFu, 0xFFC0, 0xFFC0, "-NaN"},
    /* e4m3fn: E4 M3 bias 7; 0x7E = 1.75 * 2^8 = 448 is the largest finite, 0x7F the only NaN. */
    {AMP_F8E4M3, 0x43E00000u, 0x7E, 0x7E, "448"},
    {AMP_F8E4M3, 0x43E80000u, 0x7E, 0x7E, "464 = 1.8125 * 2^8: tie between 448 (even) and 480"},
    {AMP_F8E4M3, 0x43E7FFFFu, 0x7E, 0x7E, "just below 464"},
    {AMP_F8E4M3, 0x43E80001u, 0x7F, 0x7E, "just above 464 rounds to 480 > 448: NaN, or max"},
    {AMP_F8E4M3, 0xC3E80000u, 0xFE, 0xFE, "-464"},
    {AMP_F8E4M3, 0xC3E80001u, 0xFF, 0xFE, "just below -464"},
    {AMP_F8E4M3, 0x43F00000u, 0x7F, 0x7E, "480"},
    {AMP_F8E4M3, 0x4E6E6B28u, 0x7F, 0x7E, "1e9"},
    {AMP_F8E4M3, 0x7F800000u, 0x7F, 0x7E, "+inf: no inf in fn, NaN"},
    {AMP_F8E4M3, 0xFF800000u, 0xFF, 0xFE, "-inf"},
    {AMP_F8E4M3, 0x43800000u, 0x78, 0x78, "256 = S.1111.000, finite in fn"},
    {AMP_F8E4M3, 0x43700000u, 0x77, 0x77, "240"},
    {AMP_F8E4M3, 0x43780000u, 0x78, 0x78, "248: tie between 240 (odd) and 256 (even)"},
    {AMP_F8E4M3, 0x3F880000u, 0x38, 0x38, "1 + 2^-4: tie, to even 1.0"},
    {AMP_F8E4M3, 0x3F980000u, 0x3A, 0x3A, "1 + 3*2^-4: tie, to even"},
    {AMP_F8E4M3, 0x3C800000u, 0x08, 0x08, "2^-6, the smallest normal"},
    {AMP_F8E4M3, 0x3A800000u, 0x00, 0x00, "2^-10: tie between 0 and 2^-9, to 0"},
    {AMP_F8E4M3, 0x3A800001u, 0x01, 0x01, "just above 2^-10"},
    {AMP_F8E4M3, 0x3B400000u, 0x02, 0x02, "1.5 * 2^-9: tie, to even 2 * 2^-9"},
    {AMP_F8E4M3, 0x3C700000u, 0x08, 0x08, "7.5 * 2^-9: largest subnormal's tie, up to 2^-6"},
    {AMP_F8E4M3, 0x3C6FFFFFu, 0x07, 0x07, "just below it"},
    {AMP_F8E4M3, 0x80000000u, 0x80, 0x80, "-0"},
    {AMP_F8E4M3, 0x7FC00000u, 0x7F, 0x7F, "quiet NaN"},
    {AMP_F8E4M3, 0xFF800001u, 0xFF, 0xFF, "-signalling NaN"},
    /* e5m2: E5 M2 bias 15; 0x7B = 1.75 * 2^15 = 57344 is the largest finite, 0x7C inf. */
    {AMP_F8E5M2, 0x47600000u, 0x7B, 0x7B, "57344"},
    {AMP_F8E5M2, 0x47700000u, 0x7C, 0x7B, "61440: tie between 57344 (odd) and 2^16, to 2^16 = inf"},
    {AMP_F8E5M2, 0x476FFFFFu, 0x7B, 0x7B, "just below 61440"},
    {AMP_F8E5M2, 0xC7700000u, 0xFC, 0xFB, "-61440"},
    {AMP_F8E5M2, 0x47800000u, 0x7C, 0x7B, "65536"},
    {AMP_F8E5M2, 0x7F800000u, 0x7C, 0x7B, "+inf"},
    {AMP_F8E5M2, 0xFF800000u, 0xFC, 0xFB, "-inf"},
    {AMP_F8E5M2, 0x3F900000u, 0x3C, 0x3C, "1 + 2^-3: tie, to even 1.0"},
    {AMP_F8E5M2, 0x3FB00000u, 0x3E, 0x3E, "1 + 3*2^-3: tie, to even"},
    {AMP_F8E5M2, 0x3F900001u, 0x3D, 0x3D, "just above the tie"},
    {AMP_F8E5M2, 0x37000000u, 0x00, 0x00, "2^-17: tie between 0 and 2^-16, to 0"},
    {AMP_F8E5M2, 0x37000001u, 0x01, 0x01, "just above 2^-17"},
    {AMP_F8E5M2, 0x37C00000u, 0x02, 0x02, "1.5 * 2^-16: tie, to even"},
    {AMP_F8E5M2, 0x38600000u, 0x04, 0x04, "3.5 * 2^-16: largest subnormal's tie, up to 2^-14"},
    {AMP_F8E5M2, 0x385FFFFFu, 0x03, 0x03, "just below it"},
    {AMP_F8E5M2, 0x80000000u, 0x80, 0x80, "-0"},
    {AMP_F8E5M2, 0x7FC00000u, 0x7E, 0x7E, "quiet NaN"},
    {AMP_F8E5M2, 0x7F800001u, 0x7E, 0x7E, "signalling NaN"},
    {AMP_F8E5M2, 0xFFFFFFFFu, 0xFE, 0xFE, "-NaN"},
};
enum { CASE_COUNT = sizeof cases / sizeof cases[0] };

void test_encode_edge_cases(void) {
    for (int i = 0; i < CASE_COUNT; i++) {
        const encode_case *c = &cases[i];
        const float x = f32_from_bits(c->input);
        const char *name = amp_dtype_name(c->dtype);
        CHECK_EQ_BITS(ref_encode(c->dtype, x, false), c->want, "reference %s 0x%08X: %s", name, c->input, c->why);
        CHECK_EQ_BITS(ref_encode(c->dtype, x, true), c->want_sat, "reference sat %s 0x%08X: %s", name, c->input,
                      c->why);
        CHECK_EQ_BITS(test_scalar_encode(c->dtype, x, false), c->want, "scalar %s 0x%08X: %s", name, c->input, c->why);
        CHECK_EQ_BITS(test_scalar_encode(c->dtype, x, true), c->want_sat, "scalar sat %s 0x%08X: %s", name, c->input,
                      c->why);
    }
    /* Through amp_convert: each case alone (the kernels' tail code) and each dtype's cases as one
     * array (the vector body, once there are more cases than lanes). */
    float batch[CASE_COUNT];
    uint16_t out[CASE_COUNT];
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!test_isa_begin(isa)) continue;
        const char *isa_name = amp_isa_name((amp_isa)isa);
        for (int d = 0; d < REF_NARROW_COUNT; d++) {
            const amp_dtype dt = ref_narrow_dtypes[d];
            int n = 0;
            const encode_case *members[CASE_COUNT];
            for (int i = 0; i < CASE_COUNT; i++) {
                if (cases[i].dtype != dt) continue;
                members[n] = &cases[i];
                batch[n++] = f32_from_bits(cases[i].input);
            }
            for (int sat = 0; sat < 2; sat++) {
                const char *fn = test_convert_name(sat);
                for (int i = 0; i < n; i++) {
                    uint16_t one = 0xA5A5;
                    CHECK_EQ_INT(test_convert(sat, &one, dt, &batch[i], AMP_F32, 1), AMP_OK);
                    CHECK_EQ_BITS(test_elem_get(dt, &one, 0), sat ? members[i]->want_sat : members[i]->want,
                                  "%s[%s] %s 0x%08X alone: %s", fn, isa_name, amp_dtype_name(dt), members[i]->input,
                                  members[i]->why);
                }
                CHECK_EQ_INT(test_convert(sat, out, dt, batch, AMP_F32, (size_t)n), AMP_OK);
                for (int i = 0; i < n; i++)
                    CHECK_EQ_BITS(test_elem_get(dt, out, (size_t)i), sat ? members[i]->want_sat : members[i]->want,
                                  "%s[%s] %s 0x%08X in a batch of %d: %s", fn, isa_name, amp_dtype_name(dt),
                                  members[i]->input, n, members[i]->why);
            }
        }
    }
    test_isa_end();
}
