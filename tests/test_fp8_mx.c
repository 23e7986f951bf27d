/* MXFP8 (amp_mx_quantize / amp_mx_dequantize) against torchao 0.18's to_mx, bit for bit, from
 * tests/fixtures/mx_torchao.txt (written by tests/fixtures/gen_fp8_fixtures.py, whose docstring gives
 * the format and the flags of the documented differences), on every SIMD path; the dequantization
 * against its closed form in double; the arguments; the training's column-wise quantization (with its
 * statistics) against amp_mx_quantize of the gathered columns. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "harness.h"
#include "reference_formats.h"
#include "test_util.h"
#include "tests.h"
#include "../src/fp8/fp8_internal.h"
#include "../src/kernels/gemm_kernels.h"

enum { MAX_BLOCKS = 256, N_MODES = 8 };

typedef struct mx_fixture {
    int n_blocks;
    float x[MAX_BLOCKS * AMP_MX_BLOCK];
    struct {
        amp_dtype elem;
        amp_mx_scale_mode mode;
        uint8_t scale[MAX_BLOCKS];
        char flag[MAX_BLOCKS];
        uint8_t q[MAX_BLOCKS * AMP_MX_BLOCK];
    } m[N_MODES];
    int n_modes;
} mx_fixture;

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static bool parse_mode(mx_fixture *f, const char *line) {
    char e[8], m[8];
    if (f->n_modes >= N_MODES || sscanf(line, "mode %7s %7s", e, m) != 2) return false;
    static const char *names[] = {"floor", "rceil", "ceil", "even"};
    int mode = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(m, names[i]) == 0) mode = i;
    if (mode < 0 || (strcmp(e, "e4m3") != 0 && strcmp(e, "e5m2") != 0)) return false;
    f->m[f->n_modes].elem = e[1] == '4' ? AMP_F8E4M3 : AMP_F8E5M2;
    f->m[f->n_modes].mode = (amp_mx_scale_mode)mode; /* names[] is in the enum's order */
    f->n_modes++;
    return true;
}

static bool parse_x(mx_fixture *f, char *line) {
    char *p = line + 2, *end;
    const long b = strtol(p, &end, 10);
    if (b != f->n_blocks || b >= MAX_BLOCKS) return false;
    for (int i = 0; i < AMP_MX_BLOCK; i++) {
        p = end;
        const unsigned long v = strtoul(p, &end, 16);
        if (end == p) return false;
        f->x[b * AMP_MX_BLOCK + i] = f32_from_bits((uint32_t)v);
    }
    f->n_blocks++;
    return true;
}

static bool parse_block(mx_fixture *f, const char *line) {
    int b;
    unsigned scale;
    char flag, hex[2 * AMP_MX_BLOCK + 1];
    if (f->n_modes == 0 || sscanf(line, "%d %x %c %64s", &b, &scale, &flag, hex) != 4) return false;
    if (b < 0 || b >= f->n_blocks || strlen(hex) != 2 * AMP_MX_BLOCK) return false;
    const int k = f->n_modes - 1;
    f->m[k].scale[b] = (uint8_t)scale;
    f->m[k].flag[b] = flag;
    for (int i = 0; i < AMP_MX_BLOCK; i++) {
        const int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return false;
        f->m[k].q[b * AMP_MX_BLOCK + i] = (uint8_t)(hi * 16 + lo);
    }
    return true;
}

static bool load_fixture(mx_fixture *f) {
    const char *dir = getenv("AMP_FIXTURE_DIR");
    char path[512];
    snprintf(path, sizeof path, "%s/mx_torchao.txt", dir && *dir ? dir : "tests/fixtures");
    FILE *fp = fopen(path, "r");
    if (!CHECK_MSG(fp != NULL, "cannot read %s (run from the repository root or set AMP_FIXTURE_DIR)", path))
        return false;
    static char line[1024];
    int lineno = 0;
    bool ok = fgets(line, sizeof line, fp) && strncmp(line, "amp-mx-fixture 1", 16) == 0;
    while (ok && fgets(line, sizeof line, fp)) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n') continue;
        ok = line[0] == 'x' ? parse_x(f, line) : line[0] == 'm' ? parse_mode(f, line) : parse_block(f, line);
    }
    fclose(fp);
    return CHECK_MSG(ok && f->n_modes == N_MODES, "%s: malformed near line %d", path, lineno + 1);
}

static void compare_mode(const mx_fixture *f, int k, const uint8_t *scale, const uint8_t *q, const char *isa) {
    int bad = 0;
    for (int b = 0; b < f->n_blocks; b++) {
        const bool same = scale[b] == f->m[k].scale[b] &&
                          memcmp(q + b * AMP_MX_BLOCK, f->m[k].q + b * AMP_MX_BLOCK, AMP_MX_BLOCK) == 0;
        if (same) continue;
        if (bad++ >= 4) continue;
        int i = 0;
        while (i < AMP_MX_BLOCK - 1 && q[b * AMP_MX_BLOCK + i] == f->m[k].q[b * AMP_MX_BLOCK + i]) i++;
        CHECK_MSG(0, "%s %s mode %d block %d (flag %c): scale 0x%02X want 0x%02X; x[%d]=0x%08X q 0x%02X want 0x%02X",
                  isa, amp_dtype_name(f->m[k].elem), (int)f->m[k].mode, b, f->m[k].flag[b], scale[b],
                  f->m[k].scale[b], i, (unsigned)f32_bits(f->x[b * AMP_MX_BLOCK + i]), q[b * AMP_MX_BLOCK + i],
                  f->m[k].q[b * AMP_MX_BLOCK + i]);
    }
    if (bad == 0) harness_pass((uint64_t)f->n_blocks);
}

void test_mx_torchao(void) {
    mx_fixture *f = calloc(1, sizeof *f);
    uint8_t *q = malloc(MAX_BLOCKS * AMP_MX_BLOCK), scale[MAX_BLOCKS];
    if (!CHECK(f && q) || !load_fixture(f)) goto done;
    /* each documented difference only where fp8.h says it can occur */
    int flags[128] = {0};
    for (int k = 0; k < f->n_modes; k++)
        for (int b = 0; b < f->n_blocks; b++) {
            const char c = f->m[k].flag[b];
            flags[(unsigned char)c & 127]++;
            CHECK_MSG(c == '=' || (c == 'z' && f->m[k].scale[b] == 0) || (c == 'r' && f->m[k].mode == AMP_MX_RCEIL) ||
                          (c == 'n' && f->m[k].elem == AMP_F8E5M2),
                      "mode %d block %d: flag %c out of place", k, b, c);
        }
    harness_note("%d blocks x %d modes; documented differences from torchao: z %d, r %d, n %d", f->n_blocks,
                 f->n_modes, flags['z'], flags['r'], flags['n']);
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!test_isa_begin(isa)) continue;
        for (int k = 0; k < f->n_modes; k++) {
            memset(q, 0xAA, MAX_BLOCKS * AMP_MX_BLOCK);
            const size_t n = (size_t)f->n_blocks * AMP_MX_BLOCK;
            CHECK_EQ_INT(amp_mx_quantize(q, scale, f->x, n, f->m[k].elem, f->m[k].mode), AMP_OK);
            compare_mode(f, k, scale, q, amp_isa_name((amp_isa)isa));
        }
    }
    test_isa_end();
done:
    free(f);
    free(q);
}

/* The E8M0 byte of each mode from its definition (fp8.h), in double: frexp gives amax = m * 2^e with
 * m in [0.5, 1), so floor(log2 amax) = e - 1. */
static int ref_mx_byte(float amax, amp_dtype elem, amp_mx_scale_mode mode) {
    const int emax = elem == AMP_F8E4M3 ? 8 : 15, mbits = elem == AMP_F8E4M3 ? 3 : 2;
    const double fmax = elem == AMP_F8E4M3 ? 448.0 : 57344.0;
    if (isnan(amax)) return 255;
    int e, u;
    if (mode == AMP_MX_RCEIL) {
        const double d = (double)(float)((double)amax / fmax); /* the fp32 quotient */
        if (isinf(d)) return 254;
        if (d == 0.0) return 0;
        const double m = frexp(d, &e);
        u = m == 0.5 ? e - 1 : e; /* ceil(log2 d) */
        return u + 127 < 0 ? 0 : u + 127 > 254 ? 254 : u + 127;
    }
    if (isinf(amax)) u = 128;                                  /* the exponent field 255 */
    else if (amax < ldexpf(1.0f, -126)) u = -127;              /* zero, subnormal: field 0 */
    else {
        const double m = frexp((double)amax, &e);
        u = e - 1;
        if (mode == AMP_MX_CEIL && m != 0.5) u = e;
        if (mode == AMP_MX_EVEN && floor(ldexp(m, mbits + 1) + 0.5) == ldexp(1.0, mbits + 1)) u = e;
    }
    u -= emax;
    return u < -127 ? 0 : u + 127;
}

/* Random blocks over every binade, with zeros, subnormals, infinities and NaNs, against the closed
 * forms: the byte above and the payload fp8(x * 2^(127 - byte)) of reference_formats.c. */
void test_mx_closed_form(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    enum { BLOCKS = 600 };
    float *x = malloc(BLOCKS * AMP_MX_BLOCK * sizeof *x);
    uint8_t *q = malloc(BLOCKS * AMP_MX_BLOCK), *sc = malloc(BLOCKS);
    if (!CHECK(x && q && sc)) goto done;
    test_rng rng = {seed};
    for (int b = 0; b < BLOCKS; b++) {
        const uint32_t top = test_rng_below(&rng, 256); /* the block's largest exponent field */
        for (int i = 0; i < AMP_MX_BLOCK; i++) {
            const uint32_t ex = top > 16 ? top - test_rng_below(&rng, 16) : test_rng_below(&rng, top + 1);
            uint32_t bits = (uint32_t)test_rng_below(&rng, 2) << 31 | (ex == 255 ? 254 : ex) << 23 |
                            test_rng_below(&rng, 1u << 23);
            if (test_rng_below(&rng, 300) == 0) bits = 0x7F800000u | (bits & 0x80000000u); /* inf */
            if (test_rng_below(&rng, 400) == 0) bits = 0x7FC00000u | (bits & 0x80000000u); /* NaN */
            x[b * AMP_MX_BLOCK + i] = f32_from_bits(bits);
        }
    }
    for (int di = 0; di < 2; di++)
        for (int mode = 0; mode < 4; mode++) {
            const amp_dtype d = di ? AMP_F8E5M2 : AMP_F8E4M3;
            if (!CHECK(amp_mx_quantize(q, sc, x, BLOCKS * AMP_MX_BLOCK, d, (amp_mx_scale_mode)mode) == AMP_OK)) continue;
            int bad = 0;
            for (int b = 0; b < BLOCKS; b++) {
                float amax = 0.0f;
                for (int i = 0; i < AMP_MX_BLOCK; i++) {
                    const float a = fabsf(x[b * AMP_MX_BLOCK + i]);
                    amax = isnan(a) || isnan(amax) ? NAN : a > amax ? a : amax;
                }
                const int byte = ref_mx_byte(amax, d, (amp_mx_scale_mode)mode);
                if (sc[b] != byte && bad++ < 4)
                    CHECK_MSG(0, "%s mode %d block %d amax 0x%08X: byte 0x%02X want 0x%02X", amp_dtype_name(d), mode,
                              b, (unsigned)f32_bits(amax), sc[b], byte);
                if (byte == 255) continue; /* NaN blocks: the fixture test checks torchao's bits */
                for (int i = 0; i < AMP_MX_BLOCK; i++) {
                    const float v = (float)ldexp((double)x[b * AMP_MX_BLOCK + i], 127 - byte);
                    const unsigned want = ref_encode(d, v, true);
                    if (q[b * AMP_MX_BLOCK + i] != want && bad++ < 4)
                        CHECK_MSG(0, "%s mode %d block %d x=0x%08X byte 0x%02X: q 0x%02X want 0x%02X", amp_dtype_name(d),
                                  mode, b, (unsigned)f32_bits(x[b * AMP_MX_BLOCK + i]), byte, q[b * AMP_MX_BLOCK + i], want);
                }
            }
            if (bad == 0) harness_pass(BLOCKS);
        }
done:
    free(x);
    free(q);
    free(sc);
}

/* Every payload byte under every scale byte, decoded, against decode * 2^(byte - 127) in double. */
void test_mx_dequantize(void) {
    uint8_t q[256], scales[8];
    float out[256];
    for (int i = 0; i < 256; i++) q[i] = (uint8_t)i;
    for (int di = 0; di < 2; di++) {
        const amp_dtype d = di ? AMP_F8E5M2 : AMP_F8E4M3;
        for (int s0 = 0; s0 < 256; s0 += 8) {
            for (int j = 0; j < 8; j++) scales[j] = (uint8_t)(s0 + j);
            if (!CHECK(amp_mx_dequantize(out, q, scales, 256, d) == AMP_OK)) return;
            int bad = 0;
            for (int i = 0; i < 256; i++) {
                const int byte = scales[i / AMP_MX_BLOCK];
                const double v = ref_decode_value(d, q[i]);
                const float want = byte == 255 ? NAN : (float)ldexp(v, byte - 127);
                const bool ok = isnan(want) ? isnan(out[i]) : f32_bits(out[i]) == f32_bits(want);
                if (!ok && bad++ < 3)
                    CHECK_MSG(0, "%s q=0x%02X scale 0x%02X: got %g want %g", amp_dtype_name(d), q[i], byte, out[i], want);
            }
            if (bad == 0) harness_pass(1);
        }
    }
}

void test_mx_arguments(void) {
    float x[64] = {0}, out[64];
    uint8_t q[64], s[2];
    CHECK_EQ_INT(amp_mx_quantize(q, s, x, 33, AMP_F8E4M3, AMP_MX_FLOOR), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_mx_quantize(q, s, x, 31, AMP_F8E4M3, AMP_MX_FLOOR), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_mx_quantize(q, s, x, 64, AMP_F8E4M3, (amp_mx_scale_mode)4), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_mx_quantize(q, s, x, 64, AMP_F16, AMP_MX_FLOOR), AMP_ERR_UNSUPPORTED_DTYPE);
    CHECK_EQ_INT(amp_mx_quantize(NULL, s, x, 64, AMP_F8E4M3, AMP_MX_FLOOR), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_mx_quantize(q, NULL, x, 64, AMP_F8E4M3, AMP_MX_FLOOR), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_mx_quantize(q, s, NULL, 64, AMP_F8E4M3, AMP_MX_FLOOR), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_mx_quantize(NULL, NULL, NULL, 0, AMP_F8E5M2, AMP_MX_EVEN), AMP_OK);
    CHECK_EQ_INT(amp_mx_quantize(q, s, x, 64, AMP_F8E5M2, AMP_MX_RCEIL), AMP_OK);
    CHECK(s[0] == 0 && s[1] == 0 && q[0] == 0);
    CHECK_EQ_INT(amp_mx_dequantize(out, q, s, 40, AMP_F8E4M3), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_mx_dequantize(out, q, s, 64, AMP_F32), AMP_ERR_UNSUPPORTED_DTYPE);
    CHECK_EQ_INT(amp_mx_dequantize(out, q, NULL, 64, AMP_F8E4M3), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_mx_dequantize(out, q, s, 64, AMP_F8E4M3), AMP_OK);
    CHECK(out[0] == 0.0f && out[63] == 0.0f);
}

/* The column-wise MX quantization (src/fp8: panels of 32 source rows, column maxima, a scaled encode
 * per row, kept in the source's layout) against amp_mx_quantize of each column gathered and
 * zero-padded by hand: the same payloads (the padding's included), scales (as fp32 2^(byte-127), NaN
 * for 0xFF, 1 for a block of zeros: the GEMM's factor), saturated and flushed counts (taken from the gathered rows' bytes), scale range and
 * amax, in FLOOR and RCEIL, on odd shapes (up to 300 columns: panels of 256 and a rest) with NaN,
 * inf, zeros and subnormals in some bands. */
void test_mx_columns(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    test_rng rng = {seed ^ 0xC011u};
    for (int round = 0; round < 24; round++) {
        const size_t rows = 1 + test_rng_below(&rng, 100), cols = 1 + test_rng_below(&rng, round % 4 == 3 ? 300 : 50);
        const size_t kp = (rows + 31) / 32 * 32, nb = kp / 32;
        const amp_mx_scale_mode mode = round % 2 ? AMP_MX_FLOOR : AMP_MX_RCEIL;
        float *src = malloc(rows * cols * sizeof(float)), *col = malloc(kp * sizeof(float));
        float *inv = malloc(cols * nb * sizeof(float));
        uint8_t *got = malloc(cols * kp), *want = malloc(cols * kp), *e8 = malloc(nb);
        if (!CHECK(src && col && inv && got && want && e8)) goto next;
        for (size_t i = 0; i < rows * cols; i++) {
            const uint32_t r = test_rng_below(&rng, 1000);
            const float v = ldexpf(1.0f + (float)test_rng_below(&rng, 1 << 20) * 0x1p-20f, (int)test_rng_below(&rng, 60) - 40);
            src[i] = round % 3 == 0 && r < 3    ? NAN
                     : round % 3 == 0 && r < 6  ? -INFINITY
                     : r < 60                   ? 0.0f
                     : r < 70                   ? 1e-40f
                                                : (r % 2 ? v : -v);
        }
        amp_fp8_cast_tally t = AMP_FP8_CAST_TALLY_INIT;
        float amax = 0.0f;
        amp_mx_quantize_columns_tally(got, inv, src, rows, cols, AMP_F8E4M3, mode, NULL, &t, &amax);
        int64_t sat = 0, flush = 0;
        float smin = INFINITY, smax = 0.0f, want_amax = 0.0f;
        for (size_t j = 0; j < cols; j++) {
            for (size_t r = 0; r < kp; r++) col[r] = r < rows ? src[r * cols + j] : 0.0f;
            CHECK(amp_mx_quantize(want + j * kp, e8, col, kp, AMP_F8E4M3, mode) == AMP_OK);
            for (size_t b = 0; b < nb; b++) {
                const float s = e8[b] == 0xFF ? NAN : ldexpf(1.0f, (int)e8[b] - 127);
                bool zeros = true; /* a block of +-0 only: the GEMM factor 1 (byte 0) */
                for (size_t r = b * 32; r < b * 32 + 32; r++) zeros = zeros && (f32_bits(col[r]) & 0x7FFFFFFFu) == 0;
                const float f = zeros ? 1.0f : s;
                CHECK_MSG(!zeros || e8[b] == 0, "round %d column %zu block %zu: zero block byte 0x%02X", round, j, b, e8[b]);
                CHECK_MSG(f32_bits(inv[b * cols + j]) == f32_bits(f) || (isnan(s) && isnan(inv[b * cols + j])),
                          "round %d column %zu block %zu: scale_inv %a, want %a", round, j, b, (double)inv[b * cols + j], (double)f);
                if (e8[b] != 0xFF) smin = fminf(smin, 1.0f / s), smax = fmaxf(smax, 1.0f / s);
                for (size_t r = b * 32; r < b * 32 + 32; r++) {
                    const float x = col[r];
                    if (!isnan(x) && fabsf(x) > want_amax) want_amax = fabsf(x);
                    if (!isfinite(x) || x == 0.0f) continue;
                    sat += e8[b] != 0xFF && fabsf(x * (1.0f / s)) > 448.0f;
                    flush += (want[j * kp + r] & 0x7F) == 0;
                }
            }
        }
        int bad = 0;
        for (size_t i = 0; i < cols * kp && bad < 3; i++) /* got [kp, cols], want [cols, kp] */
            if (!CHECK_MSG(got[(i % kp) * cols + i / kp] == want[i], "round %d (%zux%zu) row %zu column %zu: 0x%02X, want 0x%02X",
                           round, rows, cols, i % kp, i / kp, got[(i % kp) * cols + i / kp], want[i]))
                bad++;
        CHECK_MSG(t.counts[0] == sat && t.counts[1] == flush && f32_bits(amax) == f32_bits(want_amax) &&
                      t.scale_min == smin && t.scale_max == smax,
                  "round %d: saturated %lld (want %lld), flushed %lld (%lld), amax %g (%g), scales %g..%g (%g..%g)", round,
                  (long long)t.counts[0], (long long)sat, (long long)t.counts[1], (long long)flush, (double)amax,
                  (double)want_amax, (double)t.scale_min, (double)t.scale_max, (double)smin, (double)smax);
    next:
        free(src), free(col), free(inv), free(got), free(want), free(e8);
    }
}

/* A value of random sign, 21 significant bits, in [2^-12, 2^4): sums of products that round in fp32. */
static float spread_value(test_rng *rng) {
    const float v = ldexpf(1.0f + (float)test_rng_below(rng, 1u << 20) * 0x1p-20f, (int)test_rng_below(rng, 16) - 12);
    return test_rng_below(rng, 2) ? -v : v;
}

/* MXFP8's blocks of zeros in the fp8 GEMM: a block whose values are all +-0 gets E8M0 byte 0 (2^-127,
 * an fp32 subnormal) but the GEMM factor 1 (fp8_internal.h), row-wise and column-wise; its payloads
 * are +-0, so the operands stand for the values amp_mx_dequantize gives from the bytes, and the product
 * of two such operands takes the route of factors that are all powers of 2: its bits are amp_gemm's on
 * those values, in bf16 under the dot method where AVX-512 has it (the bf16 route), else in fp32. */
void test_mx_zero_blocks(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    test_rng rng = {seed ^ 0x2E80u};
    enum { M = 5, K = 96, N = 7, KB = K / 32 };
    float a[M * K], b[K * N], ainv[M * KB], binv[KB * N], av[M * K], bv[K * N], col[K], c[M * N], want[M * N];
    uint8_t aq[M * K], bq[K * N], ae[M * KB], colq[K], ce[KB];
    for (int i = 0; i < M * K; i++) a[i] = spread_value(&rng);
    for (int i = 0; i < K * N; i++) b[i] = spread_value(&rng);
    for (int p = 0; p < K; p++) a[p] = p % 3 ? 0.0f : -0.0f;               /* row 0: three zero blocks */
    for (int p = 32; p < 64; p++) a[2 * K + p] = p % 2 ? -0.0f : 0.0f;    /* row 2, block 1 */
    for (int p = 0; p < 32; p++) b[p * N + 3] = p % 5 ? 0.0f : -0.0f;     /* column 3, block 0 */
    for (int p = 64; p < K; p++) b[p * N + 6] = 0.0f;                     /* column 6, block 2 */
    amp_fp8_cast_tally t = AMP_FP8_CAST_TALLY_INIT;
    float amax = 0.0f;
    amp_mx_quantize_tally(aq, ae, ainv, a, M * K, AMP_F8E4M3, AMP_MX_RCEIL, NULL, &t, &amax);
    amp_mx_quantize_columns_tally(bq, binv, b, K, N, AMP_F8E4M3, AMP_MX_RCEIL, NULL, &t, &amax);
    CHECK(amp_mx_dequantize(av, aq, ae, M * K, AMP_F8E4M3) == AMP_OK);
    for (int i = 0; i < M * KB; i++) {
        bool zeros = true;
        for (int p = 0; p < 32; p++) zeros = zeros && (f32_bits(a[i * 32 + p]) & 0x7FFFFFFFu) == 0;
        const float f = zeros ? 1.0f : ldexpf(1.0f, (int)ae[i] - 127);
        CHECK_MSG(f32_bits(ainv[i]) == f32_bits(f) && (!zeros || ae[i] == 0), "A block %d: factor %a, byte %u", i,
                  (double)ainv[i], ae[i]);
    }
    for (int j = 0; j < N; j++) { /* B's columns through amp_mx_quantize: the values and the bytes */
        for (int p = 0; p < K; p++) col[p] = b[p * N + j];
        float back[K];
        CHECK(amp_mx_quantize(colq, ce, col, K, AMP_F8E4M3, AMP_MX_RCEIL) == AMP_OK);
        CHECK(amp_mx_dequantize(back, colq, ce, K, AMP_F8E4M3) == AMP_OK);
        for (int p = 0; p < K; p++) bv[p * N + j] = back[p];
        for (int q = 0; q < KB; q++) {
            bool zeros = true;
            for (int p = 0; p < 32; p++) zeros = zeros && (f32_bits(col[q * 32 + p]) & 0x7FFFFFFFu) == 0;
            const float f = zeros ? 1.0f : ldexpf(1.0f, (int)ce[q] - 127);
            CHECK_MSG(f32_bits(binv[q * N + j]) == f32_bits(f) && (!zeros || ce[q] == 0),
                      "B column %d block %d: factor %a, byte %u", j, q, (double)binv[q * N + j], ce[q]);
        }
    }
    const amp_gemm_fp8_operand oa = {AMP_F8E4M3, aq, K, false, ainv, 1, 32, KB};
    const amp_gemm_fp8_operand ob = {AMP_F8E4M3, bq, N, false, binv, 32, 1, N};
    CHECK(amp_gemm_fp8(M, N, K, 1.0f, &oa, &ob, 0.0f, c, N) == AMP_OK);
    const amp_gemm_kernel *kern = amp_gemm_kernel_active(AMP_BF16);
    const bool bf16 = kern->packed == AMP_GEMM_PACKED_BF16_PAIRS;
    if (bf16) {
        uint16_t ab[M * K], bb[K * N];
        for (int i = 0; i < M * K; i++) ab[i] = (uint16_t)(f32_bits(av[i]) >> 16);
        for (int i = 0; i < K * N; i++) bb[i] = (uint16_t)(f32_bits(bv[i]) >> 16);
        /* the dot method's bits (amp/gemm.h): under amx, amp_gemm's stored bf16 would take the tiles */
        const amp_gemm_bf16_method method = amp_gemm_bf16_method_active();
        if (method == AMP_GEMM_BF16_AMX) CHECK_EQ_INT(amp_gemm_bf16_method_set(AMP_GEMM_BF16_DOT), AMP_OK);
        CHECK(amp_gemm(AMP_BF16, false, false, M, N, K, 1.0f, ab, K, bb, N, 0.0f, want, N) == AMP_OK);
        amp_gemm_bf16_method_set(method);
    } else {
        CHECK(amp_gemm(AMP_F32, false, false, M, N, K, 1.0f, av, K, bv, N, 0.0f, want, N) == AMP_OK);
    }
    for (int i = 0; i < M * N; i++)
        CHECK_MSG(f32_bits(c[i]) == f32_bits(want[i]), "C[%d] %a, want %a (%s route)", i, (double)c[i], (double)want[i],
                  bf16 ? "bf16" : "fp32");
}
