/* The fp8 kernels (src/kernels/fp8_kernels.h) of every SIMD path against the reference kernels, bit
 * for bit: the decode into the GEMM's packing (every fp8 pattern, bf16 and fp32 values, with and
 * without block factors, fp32 and bf16 output; pairs and whole panels of bf16 pairs with exponent
 * adds), amax and block amax (NaN, inf, subnormals, -0), and
 * the saturating scaled encode (a strided sweep over every fp32 bit pattern, plus random values times
 * random scales, overflow and underflow included), the encode with statistics (the same bytes and
 * the saturated and flushed counts taken from them, one scale or one per value or block), the
 * column maxima with their NaN flag, a bf16 band's decode with its tile and column maxima, and block
 * scaling's scales (against amp_fp8_current_scale). The reference kernels are themselves the library's
 * scalar codecs (core/float_bits.h), which test_decode.c and test_encode_edges.c check against
 * independent oracles; the threaded amax and cast (src/fp8/cast.c) are checked against them at 1, 2
 * and 3 threads. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"
#include "tests.h"
#include "../src/kernels/fp8_kernels.h"

/* A random fp32: mostly ordinary values over a wide exponent range, with NaN, inf, zeros and
 * subnormals mixed in. */
static float random_special(test_rng *rng) {
    const uint64_t r = test_rng_next(rng);
    switch (r % 16) {
    case 0: return f32_from_bits(0x7FC00000u | (uint32_t)(r >> 40 & 0x3FFFFF) | (uint32_t)(r >> 20 & 1) << 31); /* NaN */
    case 1: return (r >> 8) & 1 ? INFINITY : -INFINITY;
    case 2: return (r >> 8) & 1 ? 0.0f : -0.0f;
    case 3: return f32_from_bits((uint32_t)(r >> 32) & 0x807FFFFFu); /* subnormal */
    default: return f32_from_bits(((uint32_t)(r >> 32) & 0x807FFFFFu) | ((uint32_t)(100 + (r >> 8) % 60) << 23));
    }
}

static bool same_f32(float a, float b) { return f32_bits(a) == f32_bits(b) || (isnan(a) && isnan(b)); }

static const char *out_name(int bf16) { return bf16 ? "bf16" : "f32"; }

void test_fp8_decode_row_paths(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    test_rng rng = {seed ^ 0xDEC0DEu};
    enum { N = 600 };
    uint8_t f8[N];
    uint16_t b16[N];
    float f32[N];
    float factors[N + 1];
    const amp_fp8_kernels *ref = amp_fp8_kernels_for(AMP_ISA_REF);
    const amp_dtype dts[] = {AMP_F8E4M3, AMP_F8E5M2, AMP_BF16, AMP_F32};
    amp_isa isas[AMP_ISA_COUNT];
    const int n_isas = test_supported_isas(isas);
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < N; i++) { /* every fp8 pattern (twice over), then random */
            f8[i] = round == 0 ? (uint8_t)i : (uint8_t)test_rng_next(&rng);
            f32[i] = random_special(&rng);
            b16[i] = (uint16_t)(f32_bits(random_special(&rng)) >> 16);
        }
        /* powers of 2 (round 2: at and past the ends of the range where every fp8 value times them is a
         * normal bf16, and negative, zero, infinite), and others */
        static const float edge[] = {0x1p-126f, 0x1p-118f, 0x1p-117f, 0x1p-111f, 0x1p-110f, 0x1p111f, 0x1p112f,
                                     0x1p119f, 0x1p120f, 0x1p127f, -2.0f, 0.0f, INFINITY, 1.0f};
        for (int i = 0; i <= N; i++)
            factors[i] = round == 3   ? 0.75f + (float)i
                         : round == 2 ? edge[test_rng_below(&rng, sizeof edge / sizeof edge[0])]
                                      : ldexpf(1.0f, (int)test_rng_below(&rng, 60) - 30);
        for (int d = 0; d < 4; d++) {
            const void *s = d == 2 ? (const void *)b16 : d == 3 ? (const void *)f32 : (const void *)f8;
            const size_t n_max = N;
            for (int bf16 = 0; bf16 < 2; bf16++)
                for (int fmode = 0; fmode < 4; fmode++) {
                    /* factors: none; one per element; blocks of 32 entered 5 in; blocks of 3 */
                    const float *f = fmode ? factors : NULL;
                    const size_t block = fmode == 1 ? 1 : fmode == 2 ? 32 : 3, lead = fmode == 1 ? 1 : fmode == 2 ? 27 : 2;
                    const size_t lens[] = {0, 1, 7, 15, 16, 17, 33, 100, n_max};
                    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                        const size_t n = lens[li];
                        float want[N + 1], got[N + 1];
                        memset(want, 0, sizeof want);
                        ref->decode_row[dts[d]][bf16](want, s, n, f, lead, block);
                        for (int k = 0; k < n_isas; k++) {
                            memset(got, 0xA5, sizeof got);
                            amp_fp8_kernels_for(isas[k])->decode_row[dts[d]][bf16](got, s, n, f, lead, block);
                            int bad = 0;
                            for (size_t j = 0; j < n && bad < 3; j++) {
                                const float w = bf16 ? f32_from_bits((uint32_t)((const uint16_t *)want)[j] << 16) : want[j];
                                const float g = bf16 ? f32_from_bits((uint32_t)((const uint16_t *)got)[j] << 16) : got[j];
                                if (!CHECK_MSG(same_f32(g, w), "%s decode %s -> %s factors %d n %zu [%zu]: got 0x%08X want 0x%08X",
                                               amp_isa_name(isas[k]), amp_dtype_name(dts[d]), out_name(bf16), fmode, n, j,
                                               f32_bits(g), f32_bits(w)))
                                    bad++;
                            }
                            /* nothing written past n */
                            const size_t os = bf16 ? 2 : 4;
                            CHECK_MSG(((const uint8_t *)got)[n * os] == 0xA5, "%s decode wrote past n = %zu",
                                      amp_isa_name(isas[k]), n);
                        }
                    }
                }
        }
    }
}

/* decode_pairs: every fp8 pattern in both rows, each panel height the kernels use, partial panels,
 * the missing second row of an odd k, exponent adds at the ends of their range; the panels' words past
 * n must be zero. */
void test_fp8_decode_pairs_paths(void) {
    enum { N = 300, STRIDE = 80 };
    uint8_t s0[N], s1[N];
    int16_t adds[N];
    for (int i = 0; i < N; i++) s0[i] = (uint8_t)i, s1[i] = (uint8_t)(255 - i);
    const amp_fp8_kernels *ref = amp_fp8_kernels_for(AMP_ISA_REF);
    amp_isa isas[AMP_ISA_COUNT];
    const int n_isas = test_supported_isas(isas);
    const int heights[] = {4, 8, 12, 16, 32};
    const size_t lens[] = {0, 1, 11, 12, 31, 32, 33, 100, N};
    uint16_t want[(N / 4 + 1) * STRIDE], got[(N / 4 + 1) * STRIDE];
    for (int dt = AMP_F8E4M3; dt <= AMP_F8E5M2; dt++)
        for (int h = 0; h < 5; h++)
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
                for (int odd = 0; odd < 4; odd++) { /* bit 0: no second row; bit 1: exponent adds */
                    const int r = heights[h];
                    /* the range ends where every product stays a normal bf16, and between */
                    const int lo = dt == AMP_F8E4M3 ? -117 : -110, hi = dt == AMP_F8E4M3 ? 119 : 111;
                    for (int i = 0; i < N; i++) adds[i] = (int16_t)((i % 3 == 0 ? lo : i % 3 == 1 ? hi : i % 17 - 8) * 128);
                    const int16_t *ad = odd & 2 ? adds : NULL;
                    const size_t n = lens[li], panels = (n + (size_t)r - 1) / (size_t)r;
                    memset(want, 0x5A, sizeof want);
                    ref->decode_pairs[dt](want, STRIDE, s0, odd & 1 ? NULL : s1, ad, n, r);
                    for (int k = 1; k < n_isas; k++) {
                        memset(got, 0x5A, sizeof got);
                        amp_fp8_kernels_for(isas[k])->decode_pairs[dt](got, STRIDE, s0, odd & 1 ? NULL : s1, ad, n, r);
                        int bad = 0;
                        for (size_t t = 0; t < panels + 1 && bad < 3; t++)
                            for (size_t j = 0; j < STRIDE && bad < 3; j++) {
                                const uint16_t g = got[t * STRIDE + j], w = want[t * STRIDE + j];
                                const bool nan = (g & 0x7F80) == 0x7F80 && (g & 0x7F) && (w & 0x7F80) == 0x7F80 && (w & 0x7F);
                                if (!CHECK_MSG(g == w || nan, "%s %s pairs r %d n %zu%s: panel %zu word %zu: 0x%04X, want 0x%04X",
                                               amp_isa_name(isas[k]), amp_dtype_name((amp_dtype)dt), r, n,
                                               odd & 1 ? " (no second row)" : "", t, j, g, w))
                                    bad++;
                            }
                    }
                }
}

/* decode_panel: every fp8 pattern, each panel height the kernels use, partial panels (fewer rows
 * than the height), k odd and short of a 32-value chunk, exponent adds per row and chunk at the ends
 * of their range; the whole panel is compared (its zero rows and pad included) and nothing may be
 * written past it. */
void test_fp8_decode_panel_paths(void) {
    enum { ROWS = 32, K = 300, LD = 320, CHUNKS = (K + 31) / 32 };
    static uint8_t src[ROWS * LD];
    int16_t adds[ROWS * CHUNKS];
    for (int i = 0; i < ROWS * LD; i++) src[i] = (uint8_t)(i * 7 + i / LD);
    const amp_fp8_kernels *ref = amp_fp8_kernels_for(AMP_ISA_REF);
    amp_isa isas[AMP_ISA_COUNT];
    const int n_isas = test_supported_isas(isas);
    const int heights[] = {4, 8, 12, 16, 32};
    const size_t lens[] = {0, 1, 2, 31, 32, 33, 64, 100, K};
    enum { WORDS = ROWS * (K + 1) + 64 };
    static uint16_t want[WORDS], got[WORDS];
    for (int dt = AMP_F8E4M3; dt <= AMP_F8E5M2; dt++) {
        const int lo = dt == AMP_F8E4M3 ? -117 : -110, hi = dt == AMP_F8E4M3 ? 119 : 111;
        for (int i = 0; i < ROWS * CHUNKS; i++) adds[i] = (int16_t)((i % 3 == 0 ? lo : i % 3 == 1 ? hi : i % 17 - 8) * 128);
        for (int h = 0; h < 5; h++)
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
                for (int mode = 0; mode < 4; mode++) { /* bit 0: exponent adds; bit 1: a partial panel */
                    const int r = heights[h];
                    const size_t kc = lens[li], ri = mode & 2 ? (size_t)(r * 2 / 3) : (size_t)r;
                    const size_t words = (size_t)r * ((kc + 1) / 2 * 2);
                    const int16_t *ad = mode & 1 ? adds : NULL;
                    memset(want, 0x5A, sizeof want);
                    ref->decode_panel[dt](want, src, LD, ad, CHUNKS, ri, kc, r);
                    for (int k = 1; k < n_isas; k++) {
                        memset(got, 0x5A, sizeof got);
                        amp_fp8_kernels_for(isas[k])->decode_panel[dt](got, src, LD, ad, CHUNKS, ri, kc, r);
                        int bad = 0;
                        for (size_t j = 0; j < words + 64 && bad < 3; j++) {
                            const uint16_t g = got[j], w = want[j];
                            const bool nan = (g & 0x7F80) == 0x7F80 && (g & 0x7F) && (w & 0x7F80) == 0x7F80 && (w & 0x7F);
                            if (!CHECK_MSG(g == w || nan, "%s %s panel r %d rows %zu kc %zu adds %d: word %zu: 0x%04X, want 0x%04X",
                                           amp_isa_name(isas[k]), amp_dtype_name((amp_dtype)dt), r, ri, kc, mode & 1, j, g, w))
                                bad++;
                        }
                    }
                    /* the reference writes exactly the panel's words (0x5A5A is no decoded fp8 value: its
                     * low mantissa bits are not zero) */
                    size_t written = 0;
                    for (size_t j = 0; j < words + 64; j++) written += want[j] != 0x5A5A;
                    CHECK_MSG(written == words && want[words] == 0x5A5A, "reference panel r %d kc %zu: %zu words written, want %zu",
                              r, kc, written, words);
                }
    }
}

void test_fp8_amax_paths(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    test_rng rng = {seed ^ 0xA3A3u};
    const amp_fp8_kernels *ref = amp_fp8_kernels_for(AMP_ISA_REF);
    amp_isa isas[AMP_ISA_COUNT];
    const int n_isas = test_supported_isas(isas);
    enum { N = 2200 }; /* 16 blocks of 128 and more: block_amax's 16 blocks at a time */
    float x[N];
    for (int round = 0; round < 200; round++) {
        const size_t n = round < 100 ? (size_t)round : test_rng_below(&rng, N + 1);
        const int kind = round % 4; /* 0: ordinary values; 1: with specials; 2: all NaN; 3: subnormals only */
        for (size_t i = 0; i < n; i++) {
            const float v = random_special(&rng);
            x[i] = kind == 1 ? v : kind == 2 ? NAN : kind == 3 ? f32_from_bits(f32_bits(v) & 0x807FFFFFu)
                                                               : f32_from_bits(f32_bits(v) & 0xBFFFFFFFu);
        }
        bool want_nan = true, got_nan = false;
        const float want = ref->amax(x, n, &want_nan);
        for (int k = 0; k < n_isas; k++) {
            const float got = amp_fp8_kernels_for(isas[k])->amax(x, n, &got_nan);
            CHECK_EQ_BITS(f32_bits(got), f32_bits(want), "%s amax n %zu kind %d", amp_isa_name(isas[k]), n, kind);
            CHECK_MSG(got_nan == want_nan, "%s amax saw_nan n %zu kind %d", amp_isa_name(isas[k]), n, kind);
            CHECK(amp_fp8_kernels_for(isas[k])->amax(x, n, NULL) == want || isnan(want));
        }
        /* block amax: blocks of 32 (MX), 128 and 24, a NaN planted in some */
        const size_t blocks[] = {32, 128, 24};
        for (size_t bi = 0; bi < 3; bi++) {
            const size_t nb = n / blocks[bi];
            float bw[N], bg[N];
            ref->block_amax(bw, x, nb, blocks[bi]);
            for (int k = 0; k < n_isas; k++) {
                amp_fp8_kernels_for(isas[k])->block_amax(bg, x, nb, blocks[bi]);
                for (size_t b = 0; b < nb; b++)
                    CHECK_EQ_BITS(f32_bits(bg[b]), f32_bits(bw[b]), "%s block_amax %zu block %zu", amp_isa_name(isas[k]),
                                  blocks[bi], b);
            }
        }
    }
}

static void check_encode(const float *x, size_t n, float scale, const char *what) {
    const amp_fp8_kernels *ref = amp_fp8_kernels_for(AMP_ISA_REF);
    amp_isa isas[AMP_ISA_COUNT];
    const int n_isas = test_supported_isas(isas);
    uint8_t *want = malloc(n + 1), *got = malloc(n + 1);
    if (!CHECK(want && got)) {
        free(want), free(got);
        return;
    }
    for (int dt = AMP_F8E4M3; dt <= AMP_F8E5M2; dt++) {
        ref->scaled_encode[dt](want, x, n, scale);
        for (int k = 1; k < n_isas; k++) {
            got[n] = 0xA5;
            amp_fp8_kernels_for(isas[k])->scaled_encode[dt](got, x, n, scale);
            int bad = 0;
            for (size_t i = 0; i < n && bad < 3; i++)
                if (!CHECK_MSG(got[i] == want[i], "%s %s encode %s x = 0x%08X scale %a: got 0x%02X want 0x%02X",
                               amp_isa_name(isas[k]), amp_dtype_name((amp_dtype)dt), what, f32_bits(x[i]), (double)scale,
                               got[i], want[i]))
                    bad++;
            CHECK_MSG(got[n] == 0xA5, "%s encode wrote past n = %zu", amp_isa_name(isas[k]), n);
        }
    }
    free(want), free(got);
}

/* encode_stats (bytes with the saturated and flushed counts) of every path, including the reference,
 * against the reference's scaled_encode value by value and counts taken from its bytes: one scale,
 * a multiplier per value (block 1) and one per 16 and 32 values (multipliers: scale times a power of
 * 2 from a small random set). */
static void check_encode_stats(const float *x, size_t n, float scale, test_rng *rng, const char *what) {
    amp_isa isas[AMP_ISA_COUNT];
    const int n_isas = test_supported_isas(isas);
    const amp_fp8_kernels *ref = amp_fp8_kernels_for(AMP_ISA_REF);
    uint8_t *want = malloc(n + 1), *got = malloc(n + 1);
    float *mult = malloc((n + 1) * sizeof(float));
    if (!CHECK(want && got && mult)) {
        free(want), free(got), free(mult);
        return;
    }
    const size_t blocks[] = {0, 1, 16, 32}; /* 0: the one scale */
    for (size_t bi = 0; bi < 4; bi++) {
        const size_t block = blocks[bi] ? blocks[bi] : 1;
        for (size_t i = 0; i < n; i++) mult[i] = ldexpf(scale, (int)test_rng_below(rng, 9) - 4);
        for (int dt = AMP_F8E4M3; dt <= AMP_F8E5M2; dt++) {
            const float maxf = dt == AMP_F8E4M3 ? 448.0f : 57344.0f;
            int64_t want_c[2] = {0, 0};
            for (size_t i = 0; i < n; i++) {
                const float m = blocks[bi] ? mult[i / block] : scale;
                ref->scaled_encode[dt](want + i, x + i, 1, m);
                if (!isfinite(x[i]) || x[i] == 0.0f) continue;
                want_c[0] += fabsf(x[i] * m) > maxf;
                want_c[1] += (want[i] & 0x7F) == 0;
            }
            for (int k = 0; k < n_isas; k++) {
                int64_t c[2] = {5, 7}; /* added to */
                got[n] = 0xA5;
                amp_fp8_kernels_for(isas[k])->encode_stats[dt](got, x, n, scale, blocks[bi] ? mult : NULL, block, c);
                int bad = 0;
                for (size_t i = 0; i < n && bad < 3; i++)
                    if (!CHECK_MSG(got[i] == want[i], "%s %s encode_stats %s block %zu x = 0x%08X: got 0x%02X want 0x%02X",
                                   amp_isa_name(isas[k]), amp_dtype_name((amp_dtype)dt), what, blocks[bi], f32_bits(x[i]),
                                   got[i], want[i]))
                        bad++;
                CHECK_MSG(got[n] == 0xA5, "%s encode_stats wrote past n = %zu", amp_isa_name(isas[k]), n);
                CHECK_MSG(c[0] == 5 + want_c[0] && c[1] == 7 + want_c[1],
                          "%s %s encode_stats %s block %zu n %zu: counts %lld %lld, want %lld %lld", amp_isa_name(isas[k]),
                          amp_dtype_name((amp_dtype)dt), what, blocks[bi], n, (long long)c[0] - 5, (long long)c[1] - 7,
                          (long long)want_c[0], (long long)want_c[1]);
            }
        }
    }
    free(want), free(got), free(mult);
}

void test_fp8_encode_stats_paths(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    test_rng rng = {seed ^ 0x57A7u};
    enum { N = 3000 };
    float *x = malloc(N * sizeof(float));
    if (!CHECK(x)) return;
    for (int round = 0; round < (harness_quick() ? 60 : 200); round++) {
        const size_t len = round < 70 ? (size_t)round : test_rng_below(&rng, N);
        /* random specials, or values near the saturation and flush edges of a scale of 1 */
        for (size_t i = 0; i < len; i++)
            x[i] = round % 2 ? random_special(&rng)
                             : ldexpf(1.0f + (float)test_rng_below(&rng, 1 << 20) * 0x1p-20f, (int)test_rng_below(&rng, 40) - 24) *
                                   (test_rng_below(&rng, 2) ? 1.0f : -1.0f);
        const float scale = ldexpf(1.0f + (float)test_rng_below(&rng, 1000) / 1000.0f, (int)test_rng_below(&rng, 20) - 10);
        check_encode_stats(x, len, scale, &rng, round % 2 ? "specials" : "edges");
    }
    /* the column maxima (block scaling's 128x1 tiles): every path against a scalar loop */
    amp_isa isas[AMP_ISA_COUNT];
    const int n_isas = test_supported_isas(isas);
    for (int round = 0; round < 80; round++) {
        const size_t rows = 1 + test_rng_below(&rng, 20), cols = 1 + test_rng_below(&rng, 140), ld = cols + test_rng_below(&rng, 5);
        /* rounds 1 mod 4: NaNs only in the gaps between the rows' columns (ld > cols), which must not
         * count; 3 mod 4: none in the first 64 columns either (one group of 64 without, the rest with) */
        for (size_t i = 0; i < rows * ld; i++) {
            const float v = random_special(&rng);
            const bool keep = round % 4 == 1 ? i % ld >= cols : round % 4 == 3 ? i % ld >= 64 : true;
            x[i] = isnan(v) && !keep ? 1.0f : v;
        }
        float want[150], got[150];
        bool want_nan = false;
        for (size_t j = 0; j < cols; j++) {
            want[j] = j % 3 ? 0.0f : 0.5f; /* a starting value kept where larger */
            for (size_t r = 0; r < rows; r++) {
                const float a = fabsf(x[r * ld + j]);
                want_nan |= isnan(a);
                if (!isnan(a) && a > want[j]) want[j] = a;
            }
        }
        for (int k = 0; k < n_isas; k++) {
            for (size_t j = 0; j < cols + 1; j++) got[j] = j % 3 ? 0.0f : 0.5f;
            const bool nan = amp_fp8_kernels_for(isas[k])->col_amax(got, x, rows, cols, ld);
            CHECK_MSG(nan == want_nan, "%s col_amax rows %zu cols %zu: NaN seen %d, want %d", amp_isa_name(isas[k]), rows,
                      cols, nan, want_nan);
            for (size_t j = 0; j < cols; j++)
                CHECK_EQ_BITS(f32_bits(got[j]), f32_bits(want[j]), "%s col_amax rows %zu cols %zu column %zu",
                              amp_isa_name(isas[k]), rows, cols, j);
            CHECK_MSG(got[cols] == (cols % 3 ? 0.0f : 0.5f), "%s col_amax wrote past its columns", amp_isa_name(isas[k]));
        }
    }
    free(x);
}

/* A bf16 band decoded with its 1x32 / 1x128 tile maxima and column maxima (decode_band_bf16): every
 * path against the definition as a scalar loop (exact decode, NaN-propagating maxima), rows past a
 * 16-row group and column counts past a 128-column strip included. */
void test_fp8_decode_band_paths(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    test_rng rng = {seed ^ 0xBA5Du};
    amp_isa isas[AMP_ISA_COUNT];
    const int n_isas = test_supported_isas(isas);
    enum { R = 40, C = 512 };
    uint16_t *src = malloc(R * C * sizeof(uint16_t));
    float *dst = malloc(R * C * sizeof(float)), *want_t = malloc(R * C / 32 * sizeof(float));
    float *got_t = malloc(R * C / 32 * sizeof(float)), want_c[C], got_c[C];
    if (!CHECK(src && dst && want_t && got_t)) goto out;
    for (int round = 0; round < (harness_quick() ? 40 : 120); round++) {
        const size_t tile = round % 2 ? 32 : 128, rows = 1 + test_rng_below(&rng, R);
        const size_t cols = tile * (1 + test_rng_below(&rng, C / tile)), nt = cols / tile;
        const int kind = round / 2 % 3; /* 0: ordinary values, 1: with specials, 2: a NaN in few places */
        for (size_t i = 0; i < rows * cols; i++) {
            uint16_t b = (uint16_t)(f32_bits(random_special(&rng)) >> 16);
            if (kind != 1 && (b & 0x7F80) == 0x7F80) b = (uint16_t)(b & 0xBFFF); /* no inf or NaN */
            src[i] = b;
        }
        if (kind == 2) src[test_rng_below(&rng, rows * cols)] = 0xFFC1;
        for (size_t j = 0; j < cols; j++) want_c[j] = 0.0f;
        for (size_t r = 0; r < rows; r++)
            for (size_t t = 0; t < nt; t++) {
                float m = 0.0f;
                for (size_t i = 0; i < tile; i++) {
                    const size_t j = t * tile + i;
                    const float a = fabsf(f32_from_bits((uint32_t)src[r * cols + j] << 16));
                    m = isnan(m) || isnan(a) ? NAN : fmaxf(m, a);
                    want_c[j] = isnan(want_c[j]) || isnan(a) ? NAN : fmaxf(want_c[j], a);
                }
                want_t[r * nt + t] = m;
            }
        for (int k = 0; k < n_isas; k++) {
            for (size_t j = 0; j < C; j++) got_c[j] = -1.0f;
            amp_fp8_kernels_for(isas[k])->decode_band_bf16(dst, src, rows, cols, tile, got_t, got_c);
            size_t bad = 0;
            for (size_t i = 0; i < rows * cols; i++) bad += f32_bits(dst[i]) != (uint32_t)src[i] << 16;
            CHECK_MSG(bad == 0, "%s decode_band rows %zu cols %zu: %zu values decoded wrong", amp_isa_name(isas[k]), rows,
                      cols, bad);
            for (size_t t = 0; t < rows * nt; t++)
                CHECK_MSG(same_f32(got_t[t], want_t[t]), "%s decode_band rows %zu cols %zu tile %zu: tile %zu max %g, want %g",
                          amp_isa_name(isas[k]), rows, cols, tile, t, (double)got_t[t], (double)want_t[t]);
            for (size_t j = 0; j < cols; j++)
                CHECK_MSG(same_f32(got_c[j], want_c[j]), "%s decode_band rows %zu cols %zu: column %zu max %g, want %g",
                          amp_isa_name(isas[k]), rows, cols, j, (double)got_c[j], (double)want_c[j]);
            CHECK_MSG(cols == C || got_c[cols] == -1.0f, "%s decode_band wrote past its columns", amp_isa_name(isas[k]));
        }
    }
out:
    free(src), free(dst), free(want_t), free(got_t);
}

void test_fp8_encode_paths(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    test_rng rng = {seed ^ 0xE4C0u};
    /* every fp32 pattern with a stride, from a random offset (the stride is odd: all low bits vary) */
    enum { CHUNK = 1 << 16 };
    float *x = malloc(CHUNK * sizeof(float));
    if (!CHECK(x)) return;
    const uint64_t stride = harness_quick() ? 65537 : 4099;
    uint64_t u = test_rng_below(&rng, (uint32_t)stride);
    while (u < (1ull << 32)) {
        size_t n = 0;
        for (; n < CHUNK && u < (1ull << 32); n++, u += stride) x[n] = f32_from_bits((uint32_t)u);
        check_encode(x, n, 1.0f, "sweep");
    }
    /* every pattern near each fp8 rounding boundary: the midpoints between neighbouring e4m3 and e5m2
     * values (and the range ends), +-2 ulps, both signs */
    size_t n = 0;
    for (int fmt = 0; fmt < 2; fmt++)
        for (uint32_t b = 0; b < 0x80 && n + 10 < CHUNK; b++) {
            const float lo = fmt ? amp_fp8e5m2_to_fp32((uint8_t)b) : amp_fp8e4m3_to_fp32((uint8_t)b);
            const float hi = fmt ? amp_fp8e5m2_to_fp32((uint8_t)(b + 1)) : amp_fp8e4m3_to_fp32((uint8_t)(b + 1));
            const float mid = isfinite(hi) ? (lo + hi) / 2 : lo * 1.0625f;
            for (int d = -2; d <= 2; d++) {
                x[n++] = f32_from_bits(f32_bits(mid) + (uint32_t)d);
                x[n++] = -f32_from_bits(f32_bits(mid) + (uint32_t)d);
            }
        }
    check_encode(x, n, 1.0f, "boundaries");
    /* random values times random scales (products overflow, underflow, go subnormal), all lengths */
    for (int round = 0; round < 300; round++) {
        const size_t len = round < 80 ? (size_t)round : test_rng_below(&rng, 5000);
        for (size_t i = 0; i < len; i++) x[i] = random_special(&rng);
        const float scale = ldexpf(1.0f + (float)test_rng_below(&rng, 1000) / 1000.0f, (int)test_rng_below(&rng, 80) - 40);
        check_encode(x, len, scale, "random");
    }
    free(x);
}

/* amp_fp8_amax and amp_fp8_quantize split long arrays between threads: the same answer as the
 * reference kernel on the whole array, at 1, 2 and 3 threads. */
void test_fp8_cast_threads(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    test_rng rng = {seed ^ 0x7412u};
    const size_t n = (size_t)3 << 18;
    float *x = malloc(n * sizeof(float));
    uint8_t *want = malloc(n), *got = malloc(n);
    if (!CHECK(x && want && got)) {
        free(x), free(want), free(got);
        return;
    }
    for (size_t i = 0; i < n; i++) x[i] = ldexpf((float)test_rng_below(&rng, 1u << 20) - 524288.0f, -16);
    x[n - 3] = NAN;
    x[n / 2 + 1] = 1000.5f; /* the amax, in the second half */
    const amp_fp8_kernels *ref = amp_fp8_kernels_for(AMP_ISA_REF);
    bool want_nan = false;
    const float want_amax = ref->amax(x, n, &want_nan);
    ref->scaled_encode[AMP_F8E4M3](want, x, n, 0.375f);
    for (int threads = 1; threads <= 3; threads++) {
        amp_set_num_threads(threads);
        float amax = -1.0f;
        bool nan = false;
        CHECK_EQ_INT(amp_fp8_amax(&amax, &nan, x, n), AMP_OK);
        CHECK_EQ_BITS(f32_bits(amax), f32_bits(want_amax), "amax at %d threads", threads);
        CHECK_MSG(nan == want_nan && nan, "saw_nan at %d threads", threads);
        CHECK_EQ_INT(amp_fp8_quantize(got, AMP_F8E4M3, x, n, 0.375f), AMP_OK);
        CHECK_MSG(memcmp(got, want, n) == 0, "quantize at %d threads differs from the reference kernel", threads);
    }
    amp_set_num_threads(0);
    free(x), free(want), free(got);
}

/* MXFP8's scale bookkeeping (mx_scales) of every path against the reference's, which the torchao
 * fixtures and closed forms of test_fp8_mx.c check through amp_mx_quantize: amaxes of every class
 * (0, subnormals, the smallest and largest scales' edges, 448 and 57344 times powers of 2 and their
 * neighbours, inf, NaN), the four rules, both dtypes, tails of every length, in place too; and the
 * exponent adds (factor_adds) of powers of 2 over the whole range, their range's ends, and factors
 * that are none (negative, 0, subnormal, inf, NaN, other mantissas), against e << 7 by hand; block
 * scaling's tile scales and inverses (block_scales) against amp_fp8_current_scale. */
void test_fp8_block_scales_paths(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    test_rng rng = {seed ^ 0x5CA1Eu};
    const amp_fp8_kernels *ref = amp_fp8_kernels_for(AMP_ISA_REF);
    amp_isa isas[AMP_ISA_COUNT];
    const int n_isas = test_supported_isas(isas);
    enum { N = 80 };
    float amax[N], mw[N], mg[N], fw[N], fg[N], inplace[N];
    uint8_t bw[N], bg[N];
    const amp_dtype dts[] = {AMP_F8E4M3, AMP_F8E5M2};
    for (int round = 0; round < 400; round++) {
        const size_t n = (size_t)(round % N) + (round % 7 == 0);
        for (size_t i = 0; i < n; i++) {
            const uint64_t r = test_rng_next(&rng);
            const float p = ldexpf(1.0f, (int)(r >> 8 & 0xFF) - 150);
            switch (r % 8) {
            case 0: amax[i] = fabsf(random_special(&rng)); break;
            case 1: amax[i] = (r >> 20) & 1 ? 448.0f * p : 57344.0f * p; break;
            case 2: amax[i] = nextafterf((r >> 20) & 1 ? 448.0f * p : 57344.0f * p, (r >> 21) & 1 ? INFINITY : 0.0f); break;
            case 3: amax[i] = f32_from_bits((uint32_t)(r >> 32) % 0x00C00000u); break; /* 0, subnormals, 2^-127's edges */
            case 4: amax[i] = (r >> 20) & 1 ? 0.0f : FLT_MAX; break;
            default: amax[i] = f32_from_bits((uint32_t)(r >> 32) & 0x7FFFFFFFu); break; /* any magnitude, NaN and inf too */
            }
        }
        for (int d = 0; d < 2; d++)
            for (int mode = AMP_MX_FLOOR; mode <= AMP_MX_EVEN; mode++) {
                float sw[3] = {INFINITY, 0.0f, (float)(round % 3)}, sg[3];
                const bool nw = ref->mx_scales(bw, mw, fw, amax, n, dts[d], (amp_mx_scale_mode)mode, sw);
                for (int k = 0; k < n_isas; k++) {
                    const amp_fp8_kernels *fk = amp_fp8_kernels_for(isas[k]);
                    for (int in = 0; in < 2; in++) { /* mult apart, then in place over the amaxes */
                        memcpy(inplace, amax, sizeof amax);
                        sg[0] = INFINITY, sg[1] = 0.0f, sg[2] = (float)(round % 3);
                        float *mult = in ? inplace : mg;
                        const bool ng = fk->mx_scales(bg, mult, fg, in ? inplace : amax, n, dts[d], (amp_mx_scale_mode)mode, sg);
                        int bad = 0;
                        for (size_t b = 0; b < n && bad < 3; b++) {
                            const bool ok = bg[b] == bw[b] && same_f32(fg[b], fw[b]) &&
                                            (bw[b] == 0xFF || f32_bits(mult[b]) == f32_bits(mw[b]));
                            if (!CHECK_MSG(ok, "%s mx_scales %s mode %d%s block %zu amax %a: byte %u (%u) factor %a (%a) mult %a (%a)",
                                           amp_isa_name(isas[k]), amp_dtype_name(dts[d]), mode, in ? " in place" : "", b,
                                           (double)amax[b], bg[b], bw[b], (double)fg[b], (double)fw[b], (double)mult[b],
                                           (double)mw[b]))
                                bad++;
                        }
                        CHECK_MSG(ng == nw && f32_bits(sg[0]) == f32_bits(sw[0]) && f32_bits(sg[1]) == f32_bits(sw[1]) &&
                                      f32_bits(sg[2]) == f32_bits(sw[2]),
                                  "%s mx_scales %s mode %d n %zu: nan %d (%d), stats %a %a %a (%a %a %a)",
                                  amp_isa_name(isas[k]), amp_dtype_name(dts[d]), mode, n, ng, nw, (double)sg[0],
                                  (double)sg[1], (double)sg[2], (double)sw[0], (double)sw[1], (double)sw[2]);
                    }
                }
            }
        /* block scaling's scales (block_scales): against amp_fp8_current_scale(amax, dt, 0, true), the
         * amaxes' NaNs made 0 (a tile's amax skips them), apart and in place */
        for (size_t i = 0; i < n; i++)
            if (isnan(amax[i])) amax[i] = 0.0f;
        for (int d = 0; d < 2; d++) {
            float want[3] = {INFINITY, 0.0f, (float)(round % 3)};
            for (size_t b = 0; b < n; b++) {
                fw[b] = amp_fp8_current_scale(amax[b], dts[d], 0.0f, true);
                want[0] = fminf(want[0], fw[b]), want[1] = fmaxf(want[1], fw[b]), want[2] = fmaxf(want[2], amax[b]);
            }
            for (int k = 0; k < n_isas; k++)
                for (int in = 0; in < 2; in++) {
                    memcpy(inplace, amax, sizeof amax);
                    float *sc = in ? inplace : mg, got[3] = {INFINITY, 0.0f, (float)(round % 3)};
                    amp_fp8_kernels_for(isas[k])->block_scales(sc, fg, in ? inplace : amax, n, d ? 57344.0f : 448.0f, got);
                    int bad = 0;
                    for (size_t b = 0; b < n && bad < 3; b++)
                        if (!CHECK_MSG(f32_bits(sc[b]) == f32_bits(fw[b]) && fg[b] == 1.0f / fw[b],
                                       "%s block_scales %s%s tile %zu amax %a: scale %a (%a), inverse %a",
                                       amp_isa_name(isas[k]), amp_dtype_name(dts[d]), in ? " in place" : "", b,
                                       (double)amax[b], (double)sc[b], (double)fw[b], (double)fg[b]))
                            bad++;
                    CHECK_MSG(f32_bits(got[0]) == f32_bits(want[0]) && f32_bits(got[1]) == f32_bits(want[1]) &&
                                  f32_bits(got[2]) == f32_bits(want[2]),
                              "%s block_scales %s n %zu: stats %a %a %a (%a %a %a)", amp_isa_name(isas[k]),
                              amp_dtype_name(dts[d]), n, (double)got[0], (double)got[1], (double)got[2], (double)want[0],
                              (double)want[1], (double)want[2]);
                }
        }
    }
    /* factor_adds: runs of powers of 2 with one planted refusal (or none) */
    float f[N];
    int16_t aw[N], ag[N];
    for (int round = 0; round < 600; round++) {
        const size_t n = 1 + (size_t)(round % N);
        const amp_dtype dt = dts[round % 2];
        const int lo = dt == AMP_F8E4M3 ? -117 : -110, hi = dt == AMP_F8E4M3 ? 119 : 111;
        for (size_t i = 0; i < n; i++) {
            const int e = round % 5 == 0 ? (int)test_rng_below(&rng, 254) - 126 : lo + (int)test_rng_below(&rng, (uint32_t)(hi - lo + 1));
            f[i] = ldexpf(1.0f, e);
        }
        static const float none[] = {-1.0f, 0.0f, -0.0f, 0x1p-127f, 0x1p-149f, INFINITY, NAN, 1.5f, 0x1.000002p0f};
        if (round % 3 != 0) f[test_rng_below(&rng, (uint32_t)n)] = none[test_rng_below(&rng, 9)];
        bool want = true;
        for (size_t i = 0; i < n; i++) {
            const uint32_t u = f32_bits(f[i]);
            const int e = (int)(u >> 23) - 127;
            want = want && (u & 0x7FFFFFu) == 0 && e >= lo && e <= hi;
        }
        for (int k = -1; k < n_isas; k++) {
            const amp_fp8_kernels *fk = k < 0 ? ref : amp_fp8_kernels_for(isas[k]);
            const bool got = fk->factor_adds(ag, f, n, dt);
            if (!CHECK_MSG(got == want, "%s factor_adds round %d: %d, want %d", k < 0 ? "ref" : amp_isa_name(isas[k]),
                           round, got, want) ||
                !want)
                continue;
            for (size_t i = 0; i < n; i++) aw[i] = (int16_t)(((int)(f32_bits(f[i]) >> 23) - 127) * 128);
            CHECK_MSG(memcmp(ag, aw, n * sizeof *ag) == 0, "%s factor_adds round %d: adds differ",
                      k < 0 ? "ref" : amp_isa_name(isas[k]), round);
        }
    }
}
