/* Element types amp stores and computes in, and a traits table describing each one.
 *
 * The traits table (ggml's idea) is the single source of truth for a dtype's name, size and bit
 * layout; code that needs such a fact asks the table instead of switching on the enum. */
#ifndef AMP_DTYPE_H
#define AMP_DTYPE_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum amp_dtype {
    AMP_F32 = 0,    /* IEEE 754 binary32 */
    AMP_F16 = 1,    /* IEEE 754 binary16: 1 sign, 5 exponent, 10 mantissa bits */
    AMP_BF16 = 2,   /* bfloat16: the top half of a binary32 (8 exponent, 7 mantissa bits) */
    AMP_F8E4M3 = 3, /* OCP fp8 E4M3 "fn": no infinities, max 448, S.1111.111 is NaN
                       (PyTorch float8_e4m3fn, ml_dtypes float8_e4m3fn) */
    AMP_F8E5M2 = 4, /* OCP fp8 E5M2: IEEE-like, with infinities (PyTorch float8_e5m2) */
    AMP_DTYPE_COUNT
} amp_dtype;

/* Bit layout and range of a dtype. All fields are exact; the float fields are exactly
 * representable in the dtype itself. */
typedef struct amp_dtype_info {
    const char *name;       /* short name used by the CLI and files: "f32", "f16", "bf16", ... */
    const char *long_name;  /* e.g. "float16 (IEEE binary16)" */
    size_t size;            /* bytes per element */
    int bits;               /* storage bits */
    int exponent_bits;
    int mantissa_bits;      /* explicit (stored) fraction bits */
    int exponent_bias;
    bool has_inf;           /* false for f8e4m3 ("fn": finite and NaN only) */
    unsigned max_finite_bits;  /* bit pattern of the largest positive finite value */
    unsigned canonical_nan;    /* bit pattern of the positive NaN amp's encoders produce */
} amp_dtype_info;

/* Traits of `dtype`, or NULL when it is not a valid amp_dtype. */
const amp_dtype_info *amp_dtype_get_info(amp_dtype dtype);
/* The short name ("f16"), or "invalid" for a value outside the enum. */
const char *amp_dtype_name(amp_dtype dtype);
/* Bytes per element, or 0 for an invalid dtype. */
size_t amp_dtype_size(amp_dtype dtype);
/* Parses a short name; also accepts "fp32", "fp16", "float32", "float16", "bfloat16",
 * "fp8e4m3", "e4m3", "fp8e5m2", "e5m2". Returns AMP_OK or AMP_ERR_UNSUPPORTED_DTYPE. */
int amp_dtype_from_name(const char *name, amp_dtype *out);

#ifdef __cplusplus
}
#endif
#endif /* AMP_DTYPE_H */
