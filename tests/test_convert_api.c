/* amp_convert's contract at the edges, on every supported path: every length from 0 to 130 and a few
 * long odd ones (SIMD bodies and tails, the 1024-element staging of narrow -> narrow), source and
 * destination 0..3 elements past 64-byte alignment (unaligned loads and stores), random data full of
 * NaN, inf and subnormals, and guard bytes around dst that must stay untouched. Then the statuses. */
#include <math.h>
#include <stdlib.h>

#include "harness.h"
#include "reference_formats.h"
#include "test_util.h"
#include "tests.h"

enum {
    N_MAX = 4099,
    ALIGN = 64,
    MAX_OFFSET = 3,          /* elements past alignment */
    GUARD = 64,              /* bytes before and after dst that must not change */
    GUARD_BYTE = 0xA5,
    MAX_LENGTHS = 131 + 8,
};

/* A random value that lies where encoders are fragile: a value of some narrow format, or a few fp32
 * ulps away from one, or from the midpoint between two neighbours (the ties). */
static uint32_t near_narrow_value(test_rng *rng) {
    const amp_dtype dt = ref_narrow_dtypes[test_rng_below(rng, REF_NARROW_COUNT)];
    const uint32_t p = test_rng_below(rng, ref_pattern_count(dt));
    if (ref_is_nan(dt, p) || ref_is_nan(dt, p ^ 1u)) return ref_decode(dt, p);
    const double a = ref_decode_value(dt, p), b = ref_decode_value(dt, p ^ 1u);
    /* (a + b) / 2 is exact in double and in float (it has at most 12 significant bits), unless a
     * neighbour is infinite, in which case use a itself. */
    const double mid = (isinf(a) || isinf(b)) ? a : (a + b) / 2;
    const uint32_t base = f32_bits((float)(test_rng_below(rng, 2) ? mid : a));
    return base + test_rng_below(rng, 7) - 3u; /* +-3 ulps; wrapping past 0 gives -NaN or -0: fine */
}

static void fill_random(amp_dtype dtype, void *buf, size_t n, test_rng *rng) {
    static const uint32_t f32_specials[] = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u,
                                            0xFFC00000u, 0x7F800001u, 0xFFBFFFFFu, 0x00000001u, 0x807FFFFFu,
                                            0x00800000u, 0x7F7FFFFFu, 0xFF7FFFFFu};
    for (size_t i = 0; i < n; i++) {
        uint32_t v;
        if (dtype != AMP_F32) {
            v = test_rng_below(rng, ref_pattern_count(dtype));
            const uint32_t sign = test_rng_below(rng, 2) << (8 * amp_dtype_size(dtype) - 1);
            switch (test_rng_below(rng, 8)) { /* 3 in 8: a special of the format, with a random sign */
            case 0: v = sign | ref_inf_bits(dtype); break; /* e4m3: 0x78, 256, a finite value */
            case 1: v = sign | ref_format_get(dtype)->nan_bits | test_rng_below(rng, 2); break;
            case 2: v = sign | test_rng_below(rng, 4); break; /* zero and the smallest subnormals */
            default: break;
            }
        } else {
            switch (test_rng_below(rng, 8)) {
            case 0: case 1: v = (uint32_t)test_rng_next(rng); break;
            case 2: v = f32_specials[test_rng_below(rng, sizeof f32_specials / sizeof f32_specials[0])]; break;
            case 3: v = (uint32_t)test_rng_next(rng) & 0x807FFFFFu; break; /* fp32 subnormal */
            default: v = near_narrow_value(rng); break;
            }
        }
        test_elem_set(dtype, buf, i, v);
    }
}

/* The expected result of converting src pattern p, by the reference. */
static uint32_t expected(amp_dtype dst, amp_dtype src, uint32_t p, bool sat) {
    if (dst == src) return p;
    const uint32_t f32 = src == AMP_F32 ? p : ref_decode(src, p);
    return dst == AMP_F32 ? f32 : ref_encode(dst, f32_from_bits(f32), sat);
}

typedef struct buffers {
    unsigned char *src_data; /* N_MAX random elements of the source dtype */
    unsigned char *want;     /* N_MAX expected elements of the destination dtype */
    unsigned char *src;      /* aligned work buffer for the source */
    unsigned char *dst;      /* aligned work buffer: GUARD | offset | n elements | GUARD */
} buffers;

/* One call: checks the result, the guards, and that the source was not written. */
static void run_one(const buffers *b, amp_dtype dst, amp_dtype src, int sat, size_t n, size_t src_off, size_t dst_off,
                    const char *isa_name) {
    const size_t in_size = amp_dtype_size(src), out_size = amp_dtype_size(dst);
    unsigned char *in = b->src + src_off * in_size;
    unsigned char *out = b->dst + GUARD + dst_off * out_size;
    memcpy(in, b->src_data, n * in_size);
    const size_t dst_span = GUARD + dst_off * out_size + n * out_size + GUARD;
    memset(b->dst, GUARD_BYTE, dst_span);
    const int status = test_convert(sat, out, dst, in, src, n);
    const char *fn = test_convert_name(sat);
    if (!CHECK_MSG(status == AMP_OK, "%s[%s] %s -> %s n=%zu returned %d", fn, isa_name, amp_dtype_name(src),
                   amp_dtype_name(dst), n, status))
        return;
    if (memcmp(out, b->want, n * out_size) == 0) {
        harness_pass(1);
    } else {
        size_t i = 0;
        while (test_elem_get(dst, out, i) == test_elem_get(dst, b->want, i)) i++;
        CHECK_EQ_BITS(test_elem_get(dst, out, i), test_elem_get(dst, b->want, i),
                      "%s[%s] %s -> %s n=%zu src+%zu dst+%zu: element %zu, source 0x%X", fn, isa_name,
                      amp_dtype_name(src), amp_dtype_name(dst), n, src_off, dst_off, i, test_elem_get(src, in, i));
    }
    size_t bad = dst_span;
    for (size_t i = 0; i < dst_span; i++) {
        if (i == GUARD + dst_off * out_size) i += n * out_size; /* skip the elements written */
        if (i < dst_span && b->dst[i] != GUARD_BYTE) {
            bad = i;
            break;
        }
    }
    CHECK_MSG(bad == dst_span, "%s[%s] %s -> %s n=%zu src+%zu dst+%zu: wrote byte %td relative to dst", fn,
              isa_name, amp_dtype_name(src), amp_dtype_name(dst), n, src_off, dst_off,
              (ptrdiff_t)bad - (ptrdiff_t)(GUARD + dst_off * out_size));
    CHECK_MSG(memcmp(in, b->src_data, n * in_size) == 0, "%s[%s] %s -> %s n=%zu: the source was modified", fn,
              isa_name, amp_dtype_name(src), amp_dtype_name(dst), n);
}

void test_convert_lengths_offsets(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu (AMP_TEST_SEED=%llu replays it)", (unsigned long long)seed, (unsigned long long)seed);
    size_t lengths[MAX_LENGTHS], n_lengths = 0;
    for (size_t n = 0; n <= 130; n++) lengths[n_lengths++] = n;
    /* Long odd lengths: a SIMD body and a tail, and 1025 / 2049 / 4099 cross the 1024-element stage. */
    static const size_t long_lengths[] = {257, 1021, 1025, 2049, N_MAX};
    for (size_t i = 0; i < sizeof long_lengths / sizeof long_lengths[0]; i++) lengths[n_lengths++] = long_lengths[i];

    buffers b;
    const size_t src_bytes = (N_MAX + MAX_OFFSET) * 4, dst_bytes = 2 * GUARD + (N_MAX + MAX_OFFSET) * 4;
    b.src_data = malloc(N_MAX * 4);
    b.want = malloc(N_MAX * 4);
    b.src = aligned_alloc(ALIGN, (src_bytes + ALIGN - 1) / ALIGN * ALIGN);
    /* dst + GUARD is 64-byte aligned too, since GUARD is a multiple of ALIGN. */
    b.dst = aligned_alloc(ALIGN, (dst_bytes + ALIGN - 1) / ALIGN * ALIGN);
    if (!CHECK(b.src_data && b.want && b.src && b.dst)) goto done;

    for (int s = 0; s < AMP_DTYPE_COUNT; s++) {
        const amp_dtype src = (amp_dtype)s;
        test_rng rng = {seed + (uint64_t)s};
        fill_random(src, b.src_data, N_MAX, &rng);
        for (int d = 0; d < AMP_DTYPE_COUNT; d++) {
            const amp_dtype dst = (amp_dtype)d;
            for (int sat = 0; sat < 2; sat++) {
                for (size_t i = 0; i < N_MAX; i++)
                    test_elem_set(dst, b.want, i, expected(dst, src, test_elem_get(src, b.src_data, i), sat));
                for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
                    if (!test_isa_begin(isa)) continue;
                    for (size_t l = 0; l < n_lengths; l++)
                        for (size_t so = 0; so <= MAX_OFFSET; so++)
                            for (size_t dof = 0; dof <= MAX_OFFSET; dof++)
                                run_one(&b, dst, src, sat, lengths[l], so, dof, amp_isa_name((amp_isa)isa));
                }
                test_isa_end();
            }
        }
    }
done:
    free(b.src_data);
    free(b.want);
    free(b.src);
    free(b.dst);
}

void test_convert_status(void) {
    float f32[4] = {1.0f, -2.0f, 0.5f, 3.0f};
    uint32_t out[4] = {0};
    static const int invalid[] = {AMP_DTYPE_COUNT, AMP_DTYPE_COUNT + 1, -1};
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!test_isa_begin(isa)) continue;
        for (int sat = 0; sat < 2; sat++) {
            /* A dtype outside the enum, as source or destination: refused, nothing written. */
            for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
                const amp_dtype bad = (amp_dtype)invalid[i];
                memset(out, 0, sizeof out);
                CHECK_EQ_INT(test_convert(sat, out, bad, f32, AMP_F32, 4), AMP_ERR_UNSUPPORTED_DTYPE);
                CHECK_EQ_INT(test_convert(sat, out, AMP_F16, f32, bad, 4), AMP_ERR_UNSUPPORTED_DTYPE);
                CHECK_EQ_INT(test_convert(sat, out, bad, f32, bad, 4), AMP_ERR_UNSUPPORTED_DTYPE);
                CHECK(out[0] == 0 && out[1] == 0 && out[2] == 0 && out[3] == 0);
            }
            for (int s = 0; s < AMP_DTYPE_COUNT; s++) {
                for (int d = 0; d < AMP_DTYPE_COUNT; d++) {
                    const amp_dtype src = (amp_dtype)s, dst = (amp_dtype)d;
                    CHECK_EQ_INT(test_convert(sat, NULL, dst, f32, src, 1), AMP_ERR_NULL_POINTER);
                    CHECK_EQ_INT(test_convert(sat, out, dst, NULL, src, 1), AMP_ERR_NULL_POINTER);
                    CHECK_EQ_INT(test_convert(sat, NULL, dst, NULL, src, 3), AMP_ERR_NULL_POINTER);
                    /* n == 0 touches nothing, so NULL is fine. */
                    CHECK_EQ_INT(test_convert(sat, NULL, dst, NULL, src, 0), AMP_OK);
                    CHECK_EQ_INT(test_convert(sat, NULL, dst, f32, src, 0), AMP_OK);
                    CHECK_EQ_INT(test_convert(sat, out, dst, NULL, src, 0), AMP_OK);
                }
            }
        }
    }
    test_isa_end();
}
