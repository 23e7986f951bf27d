/* The independent reference formats (see reference_formats.h for the method and why it is exact). */
#include "reference_formats.h"

#include <math.h>
#include <string.h>

/* Written from the specifications; the order is amp_dtype's, checked by test_reference_tables. */
static const ref_format formats[REF_NARROW_COUNT] = {
    {AMP_F16, "f16", 16, 5, 10, 15, true, 65504.0, 0x7E00u},
    {AMP_BF16, "bf16", 16, 8, 7, 127, true, 0x1.FEp127, 0x7FC0u}, /* (2 - 2^-7) * 2^127 */
    {AMP_F8E4M3, "f8e4m3", 8, 4, 3, 7, false, 448.0, 0x7Fu},
    {AMP_F8E5M2, "f8e5m2", 8, 5, 2, 15, true, 57344.0, 0x7Eu},
};

const amp_dtype ref_narrow_dtypes[REF_NARROW_COUNT] = {AMP_F16, AMP_BF16, AMP_F8E4M3, AMP_F8E5M2};

const ref_format *ref_format_get(amp_dtype dtype) {
    for (int i = 0; i < REF_NARROW_COUNT; i++)
        if (formats[i].dtype == dtype) return &formats[i];
    return NULL;
}

uint32_t ref_pattern_count(amp_dtype dtype) { return UINT32_C(1) << ref_format_get(dtype)->bits; }

static unsigned exp_all_ones(const ref_format *f) { return (1u << f->exp_bits) - 1u; }
static unsigned man_all_ones(const ref_format *f) { return (1u << f->man_bits) - 1u; }

bool ref_is_nan(amp_dtype dtype, unsigned bits) {
    const ref_format *f = ref_format_get(dtype);
    const unsigned e = (bits >> f->man_bits) & exp_all_ones(f), m = bits & man_all_ones(f);
    if (e != exp_all_ones(f)) return false;
    return f->has_inf ? m != 0 : m == man_all_ones(f);
}

double ref_decode_value(amp_dtype dtype, unsigned bits) {
    const ref_format *f = ref_format_get(dtype);
    const double sign = (bits >> (f->bits - 1)) & 1u ? -1.0 : 1.0;
    const unsigned e = (bits >> f->man_bits) & exp_all_ones(f), m = bits & man_all_ones(f);
    if (ref_is_nan(dtype, bits)) return copysign(NAN, sign); /* sign * NAN may drop the sign */
    if (f->has_inf && e == exp_all_ones(f)) return sign * INFINITY;
    /* Subnormals (e == 0) have no implicit bit and the exponent of the smallest normal binade. */
    if (e == 0) return sign * ldexp((double)m, 1 - f->bias - f->man_bits);
    return sign * ldexp((double)m + ldexp(1.0, f->man_bits), (int)e - f->bias - f->man_bits);
}

uint32_t ref_decode(amp_dtype dtype, unsigned bits) {
    const ref_format *f = ref_format_get(dtype);
    const uint32_t sign = ((bits >> (f->bits - 1)) & 1u) ? 0x80000000u : 0u;
    if (ref_is_nan(dtype, bits)) {
        if (!f->has_inf) return sign | 0x7FC00000u;
        /* amp keeps the payload: the fraction bits move to the top of fp32's fraction, unquieted. */
        return sign | 0x7F800000u | ((uint32_t)(bits & man_all_ones(f)) << (23 - f->man_bits));
    }
    const float v = (float)ref_decode_value(dtype, bits); /* exact: every target value fits fp32 */
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

/* The rounding grid of one binade of the input: inputs in [lo, hi) have quantum 2^qexp.
 * Neighbouring inputs of a sweep share it, so ilogb and ldexp run once per binade, not per input. */
typedef struct grid_cache {
    double lo, hi;
    double to_grid;   /* 2^-qexp: x * to_grid is exact, x in units of the quantum */
    double from_grid; /* 2^qexp */
} grid_cache;

/* The bit fields of one binade of rounded values r in [lo, hi): pattern = field << M | mantissa,
 * mantissa = r * scale - implicit (exact integers). */
typedef struct field_cache {
    double lo, hi;
    double scale, implicit;
    unsigned field;
} field_cache;

/* |x| rounded to nearest even on the format's grid, with no upper limit on the exponent (the caller
 * applies the overflow rule to the result). ax is finite and > 0. */
static inline double round_magnitude(const ref_format *f, grid_cache *c, double ax) {
    if (!(ax >= c->lo && ax < c->hi)) {
        const int emin = 1 - f->bias;
        int e = ilogb(ax); /* floor(log2 ax), exact for the double holding a float */
        if (e < emin) {
            /* Below the smallest normal binade the quantum stays that of the subnormals. */
            c->lo = 0.0;
            c->hi = ldexp(1.0, emin);
            e = emin;
        } else {
            c->lo = ldexp(1.0, e);
            c->hi = ldexp(1.0, e + 1);
        }
        c->to_grid = ldexp(1.0, f->man_bits - e);
        c->from_grid = ldexp(1.0, e - f->man_bits);
    }
    /* ax * to_grid < 2^(M+1) is exact; rint rounds it to an integer, to nearest even in the default
     * mode, which nothing in the tests changes. rint is nearbyint without the save and restore of the
     * floating-point environment (it may raise FE_INEXACT, which nobody reads), so it is three times
     * faster in glibc; that matters 2^34 times in the sweep. */
    return rint(ax * c->to_grid) * c->from_grid;
}

/* The pattern (without sign) of a value r >= 0 of the format, r <= max finite. */
static inline unsigned magnitude_bits(const ref_format *f, field_cache *c, double r) {
    if (r == 0.0) return 0;
    if (!(r >= c->lo && r < c->hi)) {
        int ex;
        (void)frexp(r, &ex); /* r = fr * 2^ex with 0.5 <= fr < 1, so floor(log2 r) = ex - 1 */
        const int e = ex - 1, emin = 1 - f->bias;
        if (e < emin) {
            /* Subnormal: exponent field 0, r = mantissa * 2^(emin - M). */
            c->lo = 0.0;
            c->hi = ldexp(1.0, emin);
            c->field = 0;
            c->scale = ldexp(1.0, f->man_bits - emin);
            c->implicit = 0.0;
        } else {
            /* Normal: r = (1 + mantissa / 2^M) * 2^e, field e + bias. */
            c->lo = ldexp(1.0, e);
            c->hi = ldexp(1.0, e + 1);
            c->field = (unsigned)(e + f->bias);
            c->scale = ldexp(1.0, f->man_bits - e);
            c->implicit = ldexp(1.0, f->man_bits);
        }
    }
    /* The mantissa is an exact integer below 2^M; converting through int is cheaper than unsigned. */
    return (c->field << f->man_bits) | (unsigned)(int)(r * c->scale - c->implicit);
}

unsigned ref_max_bits(amp_dtype dtype) {
    const ref_format *f = ref_format_get(dtype);
    field_cache c = {0};
    return magnitude_bits(f, &c, f->max_finite);
}

unsigned ref_inf_bits(amp_dtype dtype) {
    const ref_format *f = ref_format_get(dtype);
    return exp_all_ones(f) << f->man_bits;
}

/* The per-call state of an encoding pass: the format's constants and the binade caches. */
typedef struct encoder {
    const ref_format *f;
    unsigned sign_bit, overflow, max_bits;
    grid_cache grid;
    field_cache fields;
} encoder;

static encoder encoder_make(amp_dtype dtype) {
    encoder e = {0};
    e.f = ref_format_get(dtype);
    e.sign_bit = 1u << (e.f->bits - 1);
    /* Overflow gives inf where the format has one; e4m3fn has none, so NaN (PyTorch, ml_dtypes). */
    e.overflow = e.f->has_inf ? ref_inf_bits(dtype) : e.f->nan_bits;
    e.max_bits = ref_max_bits(dtype);
    return e;
}

/* The sweep calls encode_one 2^34 times; GCC does not inline it on its own, and the call costs a
 * third of the reference's time. */
#if defined(__GNUC__)
#define REF_ALWAYS_INLINE __attribute__((always_inline)) inline
#else
#define REF_ALWAYS_INLINE inline
#endif

/* Encodes x with the overflowing rule (the return value) and the saturating one (*sat). */
static REF_ALWAYS_INLINE unsigned encode_one(encoder *e, float x, unsigned *sat) {
    const double v = x;
    const unsigned sign = signbit(v) ? e->sign_bit : 0u;
    unsigned plain;
    if (isnan(v)) {
        plain = *sat = e->f->nan_bits;
    } else if (isinf(v)) {
        plain = e->overflow;
        *sat = e->max_bits;
    } else if (v == 0.0) {
        plain = *sat = 0; /* the sign is kept below */
    } else {
        const double r = round_magnitude(e->f, &e->grid, fabs(v));
        if (r > e->f->max_finite) {
            plain = e->overflow;
            *sat = e->max_bits;
        } else {
            plain = *sat = magnitude_bits(e->f, &e->fields, r);
        }
    }
    *sat |= sign;
    return plain | sign;
}

/* One loop per storage type, so the element size is not decided per element. */
#define ENCODE_LOOP(type)                                                                            \
    do {                                                                                             \
        type *o = out, *os = out_sat;                                                                \
        for (size_t i = 0; i < n; i++) {                                                             \
            unsigned s;                                                                              \
            const unsigned p = encode_one(&e, x[i], &s);                                             \
            if (o) o[i] = (type)p;                                                                   \
            if (os) os[i] = (type)s;                                                                 \
        }                                                                                            \
    } while (0)

void ref_encode_array(amp_dtype dtype, const float *x, size_t n, void *out, void *out_sat) {
    encoder e = encoder_make(dtype);
    if (e.f->bits == 16)
        ENCODE_LOOP(uint16_t);
    else
        ENCODE_LOOP(uint8_t);
}

unsigned ref_encode(amp_dtype dtype, float x, bool saturate) {
    uint16_t plain = 0, sat = 0; /* the storage of a one-element array of the format */
    uint8_t plain8 = 0, sat8 = 0;
    if (ref_format_get(dtype)->bits == 16) {
        ref_encode_array(dtype, &x, 1, &plain, &sat);
        return saturate ? sat : plain;
    }
    ref_encode_array(dtype, &x, 1, &plain8, &sat8);
    return saturate ? sat8 : plain8;
}
