/* The dtype traits table: every fact about a format lives here once. */
#include <assert.h>
#include <string.h>

#include "amp/dtype.h"
#include "amp/status.h"

static const amp_dtype_info dtype_table[AMP_DTYPE_COUNT] = {
    [AMP_F32] = {"f32", "float32 (IEEE binary32)", 4, 32, 8, 23, 127, true, 0x7F7FFFFFu, 0x7FC00000u},
    [AMP_F16] = {"f16", "float16 (IEEE binary16)", 2, 16, 5, 10, 15, true, 0x7BFFu, 0x7E00u},
    [AMP_BF16] = {"bf16", "bfloat16", 2, 16, 8, 7, 127, true, 0x7F7Fu, 0x7FC0u},
    [AMP_F8E4M3] = {"f8e4m3", "float8 e4m3fn (OCP, no inf)", 1, 8, 4, 3, 7, false, 0x7Eu, 0x7Fu},
    [AMP_F8E5M2] = {"f8e5m2", "float8 e5m2 (OCP)", 1, 8, 5, 2, 15, true, 0x7Bu, 0x7Eu},
};
static_assert(AMP_DTYPE_COUNT == 5, "add the new dtype to dtype_table and to the aliases below");

const amp_dtype_info *amp_dtype_get_info(amp_dtype dtype) {
    if ((unsigned)dtype >= AMP_DTYPE_COUNT) return NULL;
    return &dtype_table[dtype];
}

const char *amp_dtype_name(amp_dtype dtype) {
    const amp_dtype_info *info = amp_dtype_get_info(dtype);
    return info ? info->name : "invalid";
}

size_t amp_dtype_size(amp_dtype dtype) {
    const amp_dtype_info *info = amp_dtype_get_info(dtype);
    return info ? info->size : 0;
}

static const struct {
    const char *alias;
    amp_dtype dtype;
} dtype_aliases[] = {
    {"fp32", AMP_F32},       {"float32", AMP_F32},   {"float", AMP_F32},     {"fp16", AMP_F16},
    {"float16", AMP_F16},    {"half", AMP_F16},      {"bfloat16", AMP_BF16}, {"fp8e4m3", AMP_F8E4M3},
    {"e4m3", AMP_F8E4M3},    {"float8_e4m3fn", AMP_F8E4M3}, {"fp8e5m2", AMP_F8E5M2},
    {"e5m2", AMP_F8E5M2},    {"float8_e5m2", AMP_F8E5M2},
};

int amp_dtype_from_name(const char *name, amp_dtype *out) {
    if (!name || !out) return AMP_ERR_NULL_POINTER;
    for (int d = 0; d < AMP_DTYPE_COUNT; d++) {
        if (strcmp(name, dtype_table[d].name) == 0) {
            *out = (amp_dtype)d;
            return AMP_OK;
        }
    }
    for (size_t i = 0; i < sizeof dtype_aliases / sizeof dtype_aliases[0]; i++) {
        if (strcmp(name, dtype_aliases[i].alias) == 0) {
            *out = dtype_aliases[i].dtype;
            return AMP_OK;
        }
    }
    return AMP_ERR_UNSUPPORTED_DTYPE;
}
