/* Narrow -> fp32: exact for every pattern, with the NaN sign and payload rule of amp/formats.h, through
 * the scalar functions and through amp_convert / amp_convert_sat on every supported path. */
#include <stdlib.h>

#include "harness.h"
#include "reference_formats.h"
#include "test_util.h"
#include "tests.h"

typedef struct decode_literal {
    amp_dtype dtype;
    unsigned bits;
    uint32_t f32; /* worked out by hand */
} decode_literal;

static const decode_literal literals[] = {
    {AMP_F16, 0x0001, 0x33800000u},  /* 2^-24 */
    {AMP_F16, 0x03FF, 0x387FC000u},  /* 1023 * 2^-24, the largest subnormal */
    {AMP_F16, 0x0400, 0x38800000u},  /* 2^-14 */
    {AMP_F16, 0x3C00, 0x3F800000u},
    {AMP_F16, 0x8000, 0x80000000u},
    {AMP_F16, 0x7BFF, 0x477FE000u},  /* 65504 */
    {AMP_F16, 0x7C00, 0x7F800000u},
    {AMP_F16, 0xFC00, 0xFF800000u},
    {AMP_F16, 0x7C01, 0x7F802000u},  /* signalling NaN stays signalling: payload << 13 */
    {AMP_F16, 0x7E00, 0x7FC00000u},
    {AMP_F16, 0xFE01, 0xFFC02000u},
    {AMP_F16, 0x7FFF, 0x7FFFE000u},
    {AMP_BF16, 0x0001, 0x00010000u}, /* an fp32 subnormal */
    {AMP_BF16, 0x3F80, 0x3F800000u},
    {AMP_BF16, 0x7F81, 0x7F810000u},
    {AMP_BF16, 0xFFFF, 0xFFFF0000u},
    {AMP_F8E4M3, 0x01, 0x3B000000u}, /* 2^-9 */
    {AMP_F8E4M3, 0x08, 0x3C800000u}, /* 2^-6 */
    {AMP_F8E4M3, 0x78, 0x43800000u}, /* 256: S.1111.000 is finite */
    {AMP_F8E4M3, 0x7E, 0x43E00000u}, /* 448 */
    {AMP_F8E4M3, 0x80, 0x80000000u},
    {AMP_F8E4M3, 0x7F, 0x7FC00000u},
    {AMP_F8E4M3, 0xFF, 0xFFC00000u},
    {AMP_F8E5M2, 0x01, 0x37800000u}, /* 2^-16 */
    {AMP_F8E5M2, 0x7B, 0x47600000u}, /* 57344 */
    {AMP_F8E5M2, 0x7C, 0x7F800000u},
    {AMP_F8E5M2, 0xFC, 0xFF800000u},
    {AMP_F8E5M2, 0x7D, 0x7FA00000u}, /* payload 01 << 21, not quieted */
    {AMP_F8E5M2, 0x7E, 0x7FC00000u},
    {AMP_F8E5M2, 0x7F, 0x7FE00000u},
    {AMP_F8E5M2, 0xFD, 0xFFA00000u},
};

void test_decode_literals(void) {
    for (size_t i = 0; i < sizeof literals / sizeof literals[0]; i++) {
        const decode_literal *c = &literals[i];
        const char *name = amp_dtype_name(c->dtype);
        CHECK_EQ_BITS(ref_decode(c->dtype, c->bits), c->f32, "reference %s 0x%X", name, c->bits);
        CHECK_EQ_BITS(test_scalar_decode(c->dtype, c->bits), c->f32, "scalar %s 0x%X", name, c->bits);
        for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
            if (!test_isa_begin(isa)) continue;
            uint32_t src = 0, out = 0;
            test_elem_set(c->dtype, &src, 0, c->bits);
            CHECK_EQ_INT(amp_convert(&out, AMP_F32, &src, c->dtype, 1), AMP_OK);
            CHECK_EQ_BITS(out, c->f32, "amp_convert[%s] %s 0x%X", amp_isa_name((amp_isa)isa), name, c->bits);
        }
        test_isa_end();
    }
}

void test_decode_exhaustive(void) {
    enum { MAX_PATTERNS = 1 << 16 };
    uint16_t *src = malloc(MAX_PATTERNS * sizeof *src);
    uint32_t *want = malloc(MAX_PATTERNS * sizeof *want);
    uint32_t *got = malloc(MAX_PATTERNS * sizeof *got);
    if (!CHECK(src && want && got)) goto done;
    for (int d = 0; d < REF_NARROW_COUNT; d++) {
        const amp_dtype dt = ref_narrow_dtypes[d];
        const char *name = amp_dtype_name(dt);
        const uint32_t count = ref_pattern_count(dt);
        for (uint32_t p = 0; p < count; p++) {
            test_elem_set(dt, src, p, p);
            want[p] = ref_decode(dt, p);
            CHECK_EQ_BITS(test_scalar_decode(dt, p), want[p], "scalar %s 0x%X", name, p);
        }
        for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
            if (!test_isa_begin(isa)) continue;
            const char *isa_name = amp_isa_name((amp_isa)isa);
            /* amp_convert_sat to fp32 is documented to be the same as amp_convert. */
            for (int sat = 0; sat < 2; sat++) {
                memset(got, 0xA5, count * sizeof *got);
                const int status = test_convert(sat, got, AMP_F32, src, dt, count);
                CHECK_EQ_INT(status, AMP_OK);
                for (uint32_t p = 0; p < count; p++)
                    CHECK_EQ_BITS(got[p], want[p], "%s[%s] %s 0x%X", test_convert_name(sat), isa_name,
                                  name, p);
            }
        }
        test_isa_end();
    }
done:
    free(src);
    free(want);
    free(got);
}
