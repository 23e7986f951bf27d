/* An independent reference for amp's narrow formats, the oracle of every conversion test.
 *
 * It shares no code and no algorithm with the library (src/core/float_bits.h rounds with integer
 * adds on the fp32 bit pattern). Here a pattern is decoded as sign * significand * 2^exponent with
 * ldexp() in double, and a float is encoded by exact double arithmetic: the quantum of x's binade in
 * the target, q = 2^(max(floor(log2|x|), emin) - M), then r = rint(x / q) * q in the default
 * round-to-nearest-even mode, then the overflow rule, and finally the fields of r from frexp().
 * Every step is exact in double (a target value needs at most 12 significant bits), so the only
 * rounding is the one rint() does, which is the one the formats specify. */
#ifndef AMP_TESTS_REFERENCE_FORMATS_H
#define AMP_TESTS_REFERENCE_FORMATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp.h"

/* A narrow format's parameters, written down from the specifications (IEEE 754 binary16, bfloat16,
 * OCP 8-bit Floating Point v1.0), not read from amp's dtype table: the tests compare the two. */
typedef struct ref_format {
    amp_dtype dtype;
    const char *name;
    int bits;          /* storage bits, including the sign */
    int exp_bits;
    int man_bits;      /* stored fraction bits, M */
    int bias;
    bool has_inf;      /* false: e4m3 "fn", where only S.1111.111 is NaN and S.1111.000-110 are finite */
    double max_finite; /* the closed form: 65504, (2 - 2^-7) * 2^127, 448, 57344 */
    unsigned nan_bits; /* the canonical quiet NaN amp documents, positive */
} ref_format;

/* The four narrow formats in dtype order, and a lookup (NULL for AMP_F32 or an invalid dtype). */
enum { REF_NARROW_COUNT = 4 };
extern const amp_dtype ref_narrow_dtypes[REF_NARROW_COUNT];
const ref_format *ref_format_get(amp_dtype dtype);

/* Number of bit patterns of a narrow format (2^bits). */
uint32_t ref_pattern_count(amp_dtype dtype);
/* True when the pattern is a NaN of the format. */
bool ref_is_nan(amp_dtype dtype, unsigned bits);
/* The value of a pattern as a double: exact for finite values and infinities, NaN for NaNs. */
double ref_decode_value(amp_dtype dtype, unsigned bits);
/* The fp32 bit pattern amp documents for decoding `bits`: the exact value, and for NaN the sign and
 * payload rule of amp/formats.h (payload shifted into the top of the fp32 fraction, no quieting;
 * e4m3's NaN becomes 0x7FC00000 | sign). */
uint32_t ref_decode(amp_dtype dtype, unsigned bits);

/* Encodes a float: `saturate` selects the *_sat rule (finite overflow and +-inf become +-max). */
unsigned ref_encode(amp_dtype dtype, float x, bool saturate);
/* Encodes n floats twice, with the overflowing and the saturating rule, into arrays in the dtype's
 * own storage (uint16_t or uint8_t elements), ready to memcmp against amp_convert's output. Faster
 * per element than ref_encode (it reuses binade computations between neighbouring inputs), with the
 * same results. Either output may be NULL. */
void ref_encode_array(amp_dtype dtype, const float *x, size_t n, void *out, void *out_sat);

/* The largest finite pattern, the infinity pattern (has_inf only), both positive; derived from the
 * format's parameters. */
unsigned ref_max_bits(amp_dtype dtype);
unsigned ref_inf_bits(amp_dtype dtype);

#endif /* AMP_TESTS_REFERENCE_FORMATS_H */
