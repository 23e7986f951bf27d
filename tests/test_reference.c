/* Tests of the oracle (reference_formats.c) against hand-derived closed forms and against itself:
 * every later test trusts it, so it must be right independently of the library. */
#include <math.h>

#include "harness.h"
#include "reference_formats.h"
#include "test_util.h"
#include "tests.h"

typedef struct decode_case {
    amp_dtype dtype;
    unsigned bits;
    double value; /* exact; NAN marks a NaN pattern */
} decode_case;

/* Values worked out by hand from sign * 1.mantissa * 2^(field - bias) and subnormal m * 2^(1-bias-M). */
static const decode_case decode_cases[] = {
    {AMP_F16, 0x0000, 0.0},
    {AMP_F16, 0x0001, 0x1p-24},          /* smallest subnormal */
    {AMP_F16, 0x03FF, 1023 * 0x1p-24},   /* largest subnormal */
    {AMP_F16, 0x0400, 0x1p-14},          /* smallest normal */
    {AMP_F16, 0x3555, 1365.0 / 4096.0},  /* 2^-2 * (1 + 341/1024), f16's nearest to 1/3 */
    {AMP_F16, 0x3C00, 1.0},
    {AMP_F16, 0x3C01, 1.0 + 0x1p-10},
    {AMP_F16, 0xC000, -2.0},
    {AMP_F16, 0x7BFF, 65504.0},
    {AMP_F16, 0x7C00, INFINITY},
    {AMP_F16, 0xFC00, -INFINITY},
    {AMP_F16, 0x7C01, NAN},
    {AMP_F16, 0xFE00, NAN},
    {AMP_BF16, 0x0001, 0x1p-133},
    {AMP_BF16, 0x0080, 0x1p-126},
    {AMP_BF16, 0x3F80, 1.0},
    {AMP_BF16, 0x4049, 3.140625},        /* 2 * (1 + 73/128) */
    {AMP_BF16, 0x7F7F, 0x1.FEp127},
    {AMP_BF16, 0x7F80, INFINITY},
    {AMP_BF16, 0xFF80, -INFINITY},
    {AMP_BF16, 0x7F81, NAN},
    {AMP_F8E4M3, 0x01, 0x1p-9},
    {AMP_F8E4M3, 0x07, 7 * 0x1p-9},
    {AMP_F8E4M3, 0x08, 0x1p-6},
    {AMP_F8E4M3, 0x38, 1.0},
    {AMP_F8E4M3, 0x77, 240.0},           /* 2^7 * 1.875 */
    {AMP_F8E4M3, 0x78, 256.0},           /* S.1111.000 is finite in "fn" */
    {AMP_F8E4M3, 0x7C, 384.0},
    {AMP_F8E4M3, 0x7E, 448.0},
    {AMP_F8E4M3, 0xFE, -448.0},
    {AMP_F8E4M3, 0x7F, NAN},
    {AMP_F8E4M3, 0xFF, NAN},
    {AMP_F8E5M2, 0x01, 0x1p-16},
    {AMP_F8E5M2, 0x03, 3 * 0x1p-16},
    {AMP_F8E5M2, 0x04, 0x1p-14},
    {AMP_F8E5M2, 0x3C, 1.0},
    {AMP_F8E5M2, 0x7B, 57344.0},
    {AMP_F8E5M2, 0xFB, -57344.0},
    {AMP_F8E5M2, 0x7C, INFINITY},
    {AMP_F8E5M2, 0x7D, NAN},
    {AMP_F8E5M2, 0x7F, NAN},
};

void test_reference_formats(void) {
    for (size_t i = 0; i < sizeof decode_cases / sizeof decode_cases[0]; i++) {
        const decode_case *c = &decode_cases[i];
        const double v = ref_decode_value(c->dtype, c->bits);
        if (isnan(c->value))
            CHECK_MSG(isnan(v) && ref_is_nan(c->dtype, c->bits), "%s 0x%X: got %a, want NaN",
                      amp_dtype_name(c->dtype), c->bits, v);
        else
            CHECK_MSG(v == c->value && !ref_is_nan(c->dtype, c->bits), "%s 0x%X: got %a, want %a",
                      amp_dtype_name(c->dtype), c->bits, v, c->value);
    }
    CHECK(signbit(ref_decode_value(AMP_F16, 0x8000)) && ref_decode_value(AMP_F16, 0x8000) == 0.0);
    CHECK(signbit(ref_decode_value(AMP_F8E4M3, 0x80)) && ref_decode_value(AMP_F8E4M3, 0x80) == 0.0);

    /* The documented fp32 images of NaNs: payload kept and unquieted, e4m3's one NaN canonical. */
    CHECK_EQ_BITS(ref_decode(AMP_F16, 0x7C01), 0x7F802000u, "f16 signalling NaN");
    CHECK_EQ_BITS(ref_decode(AMP_F16, 0xFFFF), 0xFFFFE000u, "f16 -NaN all-ones payload");
    CHECK_EQ_BITS(ref_decode(AMP_BF16, 0xFF81), 0xFF810000u, "bf16 is the top half");
    CHECK_EQ_BITS(ref_decode(AMP_F8E4M3, 0xFF), 0xFFC00000u, "e4m3 -NaN");
    CHECK_EQ_BITS(ref_decode(AMP_F8E5M2, 0x7D), 0x7FA00000u, "e5m2 signalling NaN");
    CHECK_EQ_BITS(ref_decode(AMP_F8E5M2, 0xFE), 0xFFC00000u, "e5m2 -quiet NaN");
    CHECK_EQ_BITS(ref_decode(AMP_F16, 0x7BFF), 0x477FE000u, "65504");
    CHECK_EQ_BITS(ref_decode(AMP_F8E4M3, 0x7E), 0x43E00000u, "448");

    /* NaN patterns per format: 2 signs x (nonzero fractions), or e4m3's two S.1111.111. */
    const uint32_t want_nans[REF_NARROW_COUNT] = {2 * 1023, 2 * 127, 2, 2 * 3};
    const unsigned want_max[REF_NARROW_COUNT] = {0x7BFF, 0x7F7F, 0x7E, 0x7B};
    for (int d = 0; d < REF_NARROW_COUNT; d++) {
        const amp_dtype dt = ref_narrow_dtypes[d];
        uint32_t nans = 0;
        for (uint32_t p = 0; p < ref_pattern_count(dt); p++) nans += ref_is_nan(dt, p);
        CHECK_MSG(nans == want_nans[d], "%s: %u NaN patterns, want %u", amp_dtype_name(dt), nans, want_nans[d]);
        CHECK_EQ_BITS(ref_max_bits(dt), want_max[d], "%s max finite pattern", amp_dtype_name(dt));
        CHECK_MSG(ref_decode_value(dt, ref_max_bits(dt)) == ref_format_get(dt)->max_finite,
                  "%s: max pattern decodes to %a", amp_dtype_name(dt), ref_decode_value(dt, ref_max_bits(dt)));
    }
}

/* Decoding is strictly increasing over the positive finite patterns and encoding inverts it: the
 * layout (field order, implicit bit, subnormal exponent) and the field extraction agree. */
void test_reference_round_trip(void) {
    for (int d = 0; d < REF_NARROW_COUNT; d++) {
        const amp_dtype dt = ref_narrow_dtypes[d];
        const ref_format *f = ref_format_get(dt);
        const unsigned sign_bit = 1u << (f->bits - 1);
        const unsigned max_bits = ref_max_bits(dt);
        for (unsigned p = 0; p < max_bits; p++) {
            const double a = ref_decode_value(dt, p), b = ref_decode_value(dt, p + 1);
            CHECK_MSG(a < b, "%s: value(0x%X) = %a is not below value(0x%X) = %a", f->name, p, a, p + 1, b);
        }
        /* Just above the largest finite pattern: inf, or e4m3fn's NaN. */
        CHECK_MSG(f->has_inf ? isinf(ref_decode_value(dt, max_bits + 1)) : isnan(ref_decode_value(dt, max_bits + 1)),
                  "%s: pattern above max is not %s", f->name, f->has_inf ? "inf" : "NaN");
        for (uint32_t p = 0; p < ref_pattern_count(dt); p++) {
            const float x = f32_from_bits(ref_decode(dt, p)); /* NaNs with their sign and payload */
            const unsigned sign = p & sign_bit;
            if (ref_is_nan(dt, p)) {
                CHECK_EQ_BITS(ref_encode(dt, x, false), sign | f->nan_bits, "%s NaN 0x%X", f->name, p);
                CHECK_EQ_BITS(ref_encode(dt, x, true), sign | f->nan_bits, "%s NaN 0x%X sat", f->name, p);
            } else if (isinf(x)) {
                CHECK_EQ_BITS(ref_encode(dt, x, false), p, "%s inf 0x%X", f->name, p);
                CHECK_EQ_BITS(ref_encode(dt, x, true), sign | max_bits, "%s inf 0x%X sat", f->name, p);
            } else {
                CHECK_EQ_BITS(ref_encode(dt, x, false), p, "%s 0x%X", f->name, p);
                CHECK_EQ_BITS(ref_encode(dt, x, true), p, "%s 0x%X sat", f->name, p);
            }
        }
    }
}
