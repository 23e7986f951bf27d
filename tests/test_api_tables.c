/* The small public tables: ISA selection and names, the dtype traits table, status strings. */
#include <math.h>
#include <string.h>

#include "amp.h"
#include "harness.h"
#include "reference_formats.h"
#include "test_util.h"
#include "tests.h"

void test_isa_selection(void) {
    const amp_isa before = amp_isa_active();
    CHECK(amp_isa_supported(AMP_ISA_REF));
    CHECK(amp_isa_supported(amp_isa_best()));
    CHECK(amp_isa_supported(before));

    /* Values outside the enum: rejected, and the active path stays. */
    const int invalid[] = {AMP_ISA_COUNT, AMP_ISA_COUNT + 1, -1};
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        CHECK_EQ_INT(amp_isa_set((amp_isa)invalid[i]), AMP_ERR_INVALID_ARGUMENT);
        CHECK_EQ_INT(amp_isa_active(), before);
        CHECK(!amp_isa_supported((amp_isa)invalid[i]));
        CHECK_STR_EQ(amp_isa_name((amp_isa)invalid[i]), "invalid");
    }

    static const char *const names[AMP_ISA_COUNT] = {"ref", "avx2", "avx512"};
    int unsupported = 0;
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        CHECK_STR_EQ(amp_isa_name((amp_isa)isa), names[isa]);
        amp_isa parsed = (amp_isa)-1;
        CHECK_EQ_INT(amp_isa_from_name(amp_isa_name((amp_isa)isa), &parsed), AMP_OK);
        CHECK_EQ_INT(parsed, isa);
        if (amp_isa_supported((amp_isa)isa)) {
            CHECK_EQ_INT(amp_isa_set((amp_isa)isa), AMP_OK);
            CHECK_EQ_INT(amp_isa_active(), isa);
            CHECK_MSG(isa <= (int)amp_isa_best(), "%s is supported but best is %s",
                      amp_isa_name((amp_isa)isa), amp_isa_name(amp_isa_best()));
        } else {
            /* A path this CPU lacks: refused, and nothing changes. */
            unsupported++;
            const amp_isa active = amp_isa_active();
            CHECK_EQ_INT(amp_isa_set((amp_isa)isa), AMP_ERR_UNSUPPORTED_ISA);
            CHECK_EQ_INT(amp_isa_active(), active);
        }
    }
    if (unsupported == 0) harness_note("every ISA is supported here: AMP_ERR_UNSUPPORTED_ISA not exercised");

    amp_isa parsed = AMP_ISA_REF;
    CHECK_EQ_INT(amp_isa_from_name("sse9", &parsed), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_isa_from_name("", &parsed), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_isa_from_name("AVX2", &parsed), AMP_ERR_INVALID_ARGUMENT); /* names are exact */
    CHECK_EQ_INT(parsed, AMP_ISA_REF);
    CHECK(amp_isa_from_name(NULL, &parsed) < 0);
    CHECK(amp_isa_from_name("ref", NULL) < 0);

    CHECK_EQ_INT(amp_isa_set(before), AMP_OK);
    CHECK_EQ_INT(amp_isa_active(), before);
}

/* amp's traits table against the reference's parameters, which were written from the specs. */
void test_dtype_info(void) {
    const amp_dtype_info *f32 = amp_dtype_get_info(AMP_F32);
    if (CHECK(f32 != NULL)) {
        CHECK_EQ_INT(f32->size, 4);
        CHECK_EQ_INT(f32->bits, 32);
        CHECK_EQ_BITS(f32->max_finite_bits, 0x7F7FFFFFu, "f32 max");
        CHECK(isnan(f32_from_bits(f32->canonical_nan)));
    }
    for (int d = 0; d < REF_NARROW_COUNT; d++) {
        const amp_dtype dt = ref_narrow_dtypes[d];
        const ref_format *f = ref_format_get(dt);
        const amp_dtype_info *info = amp_dtype_get_info(dt);
        if (!CHECK_MSG(info != NULL, "amp_dtype_get_info(%s) is NULL", f->name)) continue;
        CHECK_STR_EQ(info->name, f->name);
        CHECK_STR_EQ(amp_dtype_name(dt), f->name);
        CHECK(info->long_name && info->long_name[0]);
        CHECK_EQ_INT(info->size * 8, info->bits);
        CHECK_EQ_INT(amp_dtype_size(dt), info->size);
        CHECK_EQ_INT(info->bits, f->bits);
        CHECK_EQ_INT(info->exponent_bits, f->exp_bits);
        CHECK_EQ_INT(info->mantissa_bits, f->man_bits);
        CHECK_EQ_INT(info->exponent_bias, f->bias);
        CHECK_EQ_INT(info->has_inf, f->has_inf);
        CHECK_EQ_INT(1 + info->exponent_bits + info->mantissa_bits, info->bits);
        CHECK_EQ_BITS(info->max_finite_bits, ref_max_bits(dt), "%s max_finite_bits", f->name);
        CHECK_EQ_BITS(info->canonical_nan, f->nan_bits, "%s canonical_nan", f->name);
        /* Decoded by the library, the table's patterns are the closed-form max and a NaN. */
        const float max_value = f32_from_bits(test_scalar_decode(dt, info->max_finite_bits));
        CHECK_MSG((double)max_value == f->max_finite, "%s: max_finite_bits decodes to %a, want %a", f->name,
                  (double)max_value, f->max_finite);
        const float nan_value = f32_from_bits(test_scalar_decode(dt, info->canonical_nan));
        CHECK_MSG(isnan(nan_value), "%s: canonical_nan 0x%X decodes to %a", f->name, info->canonical_nan,
                  (double)nan_value);
        CHECK(ref_is_nan(dt, info->canonical_nan));
    }
    for (int d = 0; d < AMP_DTYPE_COUNT; d++) {
        amp_dtype parsed = (amp_dtype)-1;
        CHECK_EQ_INT(amp_dtype_from_name(amp_dtype_name((amp_dtype)d), &parsed), AMP_OK);
        CHECK_EQ_INT(parsed, d);
    }
    /* Aliases promised by amp/dtype.h. */
    static const struct {
        const char *name;
        amp_dtype dtype;
    } aliases[] = {{"fp32", AMP_F32},       {"float32", AMP_F32},    {"fp16", AMP_F16},   {"float16", AMP_F16},
                   {"bfloat16", AMP_BF16},   {"fp8e4m3", AMP_F8E4M3}, {"e4m3", AMP_F8E4M3}, {"fp8e5m2", AMP_F8E5M2},
                   {"e5m2", AMP_F8E5M2}};
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        amp_dtype parsed = (amp_dtype)-1;
        CHECK_MSG(amp_dtype_from_name(aliases[i].name, &parsed) == AMP_OK && parsed == aliases[i].dtype,
                  "amp_dtype_from_name(\"%s\") gave %d", aliases[i].name, (int)parsed);
    }
    amp_dtype parsed = AMP_F16;
    CHECK_EQ_INT(amp_dtype_from_name("f12", &parsed), AMP_ERR_UNSUPPORTED_DTYPE);
    CHECK_EQ_INT(parsed, AMP_F16);
    CHECK(amp_dtype_get_info(AMP_DTYPE_COUNT) == NULL);
    CHECK(amp_dtype_get_info((amp_dtype)-1) == NULL);
    CHECK_STR_EQ(amp_dtype_name(AMP_DTYPE_COUNT), "invalid");
    CHECK_EQ_INT(amp_dtype_size(AMP_DTYPE_COUNT), 0);
}

/* The codes come from the same X-macro table as the library's, so a new code is covered here too. */
void test_status_strings(void) {
#define STATUS_CODE_(name, value, text) name,
#define STATUS_TEXT_(name, value, text) text,
    static const int codes[] = {AMP_STATUS_LIST(STATUS_CODE_)};
    static const char *const texts[] = {AMP_STATUS_LIST(STATUS_TEXT_)};
#undef STATUS_CODE_
#undef STATUS_TEXT_
    enum { N = sizeof codes / sizeof codes[0] };
    for (int i = 0; i < N; i++) {
        const char *s = amp_status_str(codes[i]);
        CHECK_MSG(s && s[0], "amp_status_str(%d) is empty", codes[i]);
        CHECK_STR_EQ(s, texts[i]);
        CHECK_MSG(s && strcmp(s, "unknown status") != 0, "amp_status_str(%d) is \"unknown status\"", codes[i]);
        for (int j = 0; j < i; j++) {
            CHECK_MSG(s && strcmp(s, amp_status_str(codes[j])) != 0, "codes %d and %d share \"%s\"", codes[i],
                      codes[j], s);
            CHECK_MSG(codes[i] != codes[j], "two statuses share the value %d", codes[i]);
        }
        if (i > 0) CHECK_MSG(codes[i] < 0, "failure status %d is not negative", codes[i]);
    }
    CHECK_EQ_INT(codes[0], AMP_OK);
    CHECK_EQ_INT(AMP_OK, 0);
    CHECK_STR_EQ(amp_status_str(AMP_OK), "success");
    CHECK_STR_EQ(amp_status_str(1), "unknown status");
    CHECK_STR_EQ(amp_status_str(-1000), "unknown status");
}
