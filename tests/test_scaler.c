/* The GradScaler (amp/scaler.h): its kernels on every SIMD path against the reference twin and
 * against PyTorch (tests/fixtures/scaler_kernels.txt), whole training loops replayed against
 * torch.amp.GradScaler (tests/fixtures/scaler_sequences.txt; both written by
 * tests/fixtures/gen_scaler_fixtures.py, whose docstring describes the formats), the state machine's
 * misuse errors with PyTorch's messages, the disabled scaler, saving and loading, and amp's extras
 * (hysteresis, min/max scale, safe mode, the floor error, counters, step reports, the fused step,
 * fp16 gradients).
 *
 * The fixtures are read from tests/fixtures relative to the working directory, or from
 * $AMP_FIXTURE_DIR. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/unscale_kernels.h"
#include "amp.h"
#include "harness.h"
#include "test_util.h"
#include "tests.h"

/* ---- small helpers ---- */

static bool is_nan_bits(amp_dtype dtype, uint32_t b) {
    switch (dtype) {
    case AMP_F32: return (b & 0x7F800000u) == 0x7F800000u && (b & 0x007FFFFFu) != 0;
    case AMP_F16: return (b & 0x7C00u) == 0x7C00u && (b & 0x03FFu) != 0;
    default: return (b & 0x7F80u) == 0x7F80u && (b & 0x007Fu) != 0;
    }
}

static bool is_nonfinite_bits(amp_dtype dtype, uint32_t b) {
    switch (dtype) {
    case AMP_F32: return (b & 0x7F800000u) == 0x7F800000u;
    case AMP_F16: return (b & 0x7C00u) == 0x7C00u;
    default: return (b & 0x7F80u) == 0x7F80u;
    }
}

static float elem_as_f32(amp_dtype dtype, const void *buf, size_t i) {
    const uint32_t b = test_elem_get(dtype, buf, i);
    return f32_from_bits(dtype == AMP_F32 ? b : test_scalar_decode(dtype, b));
}

static const char *fixture_path(char *buf, size_t size, const char *name) {
    const char *env = getenv("AMP_FIXTURE_DIR");
    snprintf(buf, size, "%s/%s", env && *env ? env : "tests/fixtures", name);
    return buf;
}

/* The whole file, NUL-terminated, or NULL. */
static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        const size_t got = fread(buf + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
}

/* Splits the next line off *cursor (in place); NULL at the end. */
static char *next_line(char **cursor) {
    char *line = *cursor;
    if (!line || !*line) return NULL;
    char *nl = strchr(line, '\n');
    if (nl) {
        *nl = '\0';
        *cursor = nl + 1;
    } else {
        *cursor = line + strlen(line);
    }
    return line;
}

/* Splits a line into at most max whitespace-separated tokens; returns how many. */
static int split(char *line, char **tok, int max) {
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(line, " \t\r", &save); t && n < max; t = strtok_r(NULL, " \t\r", &save)) tok[n++] = t;
    return n;
}

static bool dtype_from_token(const char *t, amp_dtype *out) {
    return amp_dtype_from_name(t, out) == AMP_OK && (*out == AMP_F32 || *out == AMP_F16 || *out == AMP_BF16);
}

/* A 64-byte aligned buffer with room for n elements after `offset` elements, and guard elements
 * around, all set to a pattern. */
enum { GUARD = 16 };
static void *guarded_alloc(amp_dtype dtype, size_t n) {
    const size_t bytes = (n + 2 * GUARD + 64) * amp_dtype_size(dtype);
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p) memset(p, 0xA5, (bytes + 63) / 64 * 64);
    return p;
}

/* The GUARD elements before and after [GUARD + offset, GUARD + offset + n) still hold the fill. */
static bool guards_intact(amp_dtype dtype, const void *base, size_t offset, size_t n) {
    const uint32_t pattern = amp_dtype_size(dtype) == 4 ? 0xA5A5A5A5u : 0xA5A5u;
    for (size_t i = 0; i < GUARD + offset; i++)
        if (test_elem_get(dtype, base, i) != pattern) return false;
    for (size_t i = GUARD + offset + n; i < 2 * GUARD + offset + n; i++)
        if (test_elem_get(dtype, base, i) != pattern) return false;
    return true;
}

/* ---- the kernels: every SIMD path against the reference twin ---- */

/* Random elements of every class: normal over the whole range, subnormal, zero, inf, NaN (random
 * payloads, signalling ones too), and values next to the dtype's overflow threshold. */
static uint32_t random_elem(test_rng *rng, amp_dtype dtype) {
    const uint32_t r = test_rng_below(rng, 100);
    const uint32_t sign = (uint32_t)(test_rng_next(rng) & 1);
    uint64_t bits = test_rng_next(rng);
    if (dtype == AMP_F32) {
        uint32_t mag;
        if (r < 60) mag = (uint32_t)(bits % 0x7F800000u);
        else if (r < 70) mag = (uint32_t)(bits & 0x007FFFFFu);               /* subnormal or zero */
        else if (r < 75) mag = 0;
        else if (r < 80) mag = 0x7F800000u;
        else if (r < 88) mag = 0x7F800000u | (uint32_t)(1 + bits % 0x7FFFFFu); /* NaN */
        else mag = 0x7F7FFFFFu - (uint32_t)(bits % 0x01000000u);             /* near FLT_MAX */
        return sign << 31 | mag;
    }
    const uint32_t exp = dtype == AMP_F16 ? 0x7C00u : 0x7F80u, frac = dtype == AMP_F16 ? 0x3FFu : 0x7Fu;
    uint32_t mag;
    if (r < 60) mag = (uint32_t)(bits % exp);
    else if (r < 70) mag = (uint32_t)(bits & frac);
    else if (r < 75) mag = 0;
    else if (r < 80) mag = exp;
    else if (r < 88) mag = exp | (uint32_t)(1 + bits % frac);
    else mag = (exp - 1) - (uint32_t)(bits % (frac + 1));
    return sign << 15 | mag;
}

/* The bits PyTorch stores for element i of n (input bits `in`), written out from the rule in
 * src/kernels/unscale_kernels.h independently of its code: PyTorch's vector loop takes two vectors
 * per step (16 floats, 32 halves) over [0, nv), its scalar code the rest; an x86 multiply returns its
 * NaN operand quieted (the first one when both are NaN: the scale in the second vector of a step) or,
 * for 0 * inf, the default NaN 0xFFC00000; f16 NaNs keep their sign and top payload bits, quieted;
 * bf16 NaNs are 0xFFFF in the vector loop and 0x7FC0 in the tail; at inv_scale 1 nothing is
 * multiplied and f32 elements are left as they are. */
static uint32_t torch_unscale_bits(amp_dtype dt, uint32_t in, float inv, size_t i, size_t n) {
    const size_t step = dt == AMP_F32 ? 16 : 32, nv = n - n % step;
    if (dt == AMP_F32 && inv == 1.0f) return in;
    uint32_t v = dt == AMP_F32 ? in : test_scalar_decode(dt, in);
    const bool v_nan = (v & 0x7FFFFFFFu) > 0x7F800000u, s_nan = isnan(inv);
    if (v_nan && dt != AMP_F32) v |= 0x00400000u; /* widening quiets an f16 signalling NaN */
    uint32_t p;
    if (inv == 1.0f) p = v;
    else if (v_nan && s_nan) p = (i < nv && i % step >= step / 2 ? f32_bits(inv) : v) | 0x00400000u;
    else if (v_nan) p = v | 0x00400000u;
    else if (s_nan) p = f32_bits(inv) | 0x00400000u;
    else {
        const float prod = f32_from_bits(v) * inv;
        p = isnan(prod) ? 0xFFC00000u : f32_bits(prod);
    }
    if (dt == AMP_F32) return p;
    if ((p & 0x7FFFFFFFu) > 0x7F800000u) {
        if (dt == AMP_BF16) return i < nv ? 0xFFFFu : 0x7FC0u;
        return ((p >> 16) & 0x8000u) | 0x7E00u | ((p >> 13) & 0x03FFu);
    }
    return test_scalar_encode(dt, f32_from_bits(p), false);
}

void test_scaler_kernels_vs_reference(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    test_rng rng = {seed ^ 0x5CA1E5u};
    const amp_dtype dtypes[3] = {AMP_F32, AMP_F16, AMP_BF16};
    const float invs[] = {1.0f,
                          0.5f,
                          0x1p-16f,
                          amp_inv_scale(3.0f),
                          amp_inv_scale(1.7f * 65536.0f),
                          8.0f,
                          0x1p-140f,
                          INFINITY,
                          -INFINITY,
                          0.0f,
                          -0.0f,
                          amp_inv_scale(0x1p-10f),
                          f32_from_bits(0x7FC00000u),
                          f32_from_bits(0xFFA00001u)}; /* NaN inv_scales: which NaN wins depends on i */
    enum { MAX_N = 130, MAX_OFF = 5 };
    unsigned char *src = malloc((MAX_N + MAX_OFF) * 4);
    unsigned char *ref = guarded_alloc(AMP_F32, MAX_N + MAX_OFF);
    unsigned char *got = guarded_alloc(AMP_F32, MAX_N + MAX_OFF);
    if (!CHECK(src && ref && got)) goto done;
    const amp_unscale_kernels *kref = amp_unscale_kernels_for(AMP_ISA_REF);
    uint64_t passed = 0;
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!test_isa_begin(isa)) continue;
        for (int d = 0; d < 3; d++) {
            const amp_dtype dt = dtypes[d];
            const size_t es = amp_dtype_size(dt);
            for (size_t n = 0; n <= MAX_N; n++) {
                for (size_t off = 0; off <= MAX_OFF; off += (n < 40 ? 1 : 2)) {
                    for (size_t k = 0; k < sizeof invs / sizeof invs[0]; k++) {
                        for (size_t i = 0; i < n; i++) test_elem_set(dt, src, i, random_elem(&rng, dt));
                        for (int safe = 0; safe < 2; safe++) {
                            /* reference (the ref table directly) and the path under test (public API) */
                            memset(ref, 0xA5, (MAX_N + MAX_OFF + 2 * GUARD + 64) * es);
                            memset(got, 0xA5, (MAX_N + MAX_OFF + 2 * GUARD + 64) * es);
                            unsigned char *r = ref + (GUARD + off) * es, *g = got + (GUARD + off) * es;
                            memcpy(r, src, n * es);
                            memcpy(g, src, n * es);
                            float fr = 0, fg = 0, ar = 0, ag = 0;
                            kref->unscale[dt](r, n, invs[k], &fr, safe ? &ar : NULL);
                            if (safe)
                                amp_non_finite_check_and_unscale_safe(g, dt, n, &fg, &ag, invs[k]);
                            else
                                amp_non_finite_check_and_unscale(g, dt, n, &fg, invs[k]);
                            bool ok = fr == fg && ar == ag && memcmp(r, g, n * es) == 0 &&
                                      guards_intact(dt, got, off, n);
                            if (!ok) {
                                size_t i = 0;
                                while (i < n && test_elem_get(dt, r, i) == test_elem_get(dt, g, i)) i++;
                                CHECK_MSG(false,
                                          "%s %s n=%zu off=%zu inv=%a safe=%d: found %g/%g (ref/got), after %g/%g, "
                                          "first difference at %zu: in 0x%x ref 0x%x got 0x%x, guards %s",
                                          amp_isa_name((amp_isa)isa), amp_dtype_name(dt), n, off, (double)invs[k], safe,
                                          (double)fr, (double)fg, (double)ar, (double)ag, i,
                                          i < n ? test_elem_get(dt, src, i) : 0, i < n ? test_elem_get(dt, r, i) : 0,
                                          i < n ? test_elem_get(dt, g, i) : 0,
                                          guards_intact(dt, got, off, n) ? "intact" : "overwritten");
                                goto done;
                            }
                            /* the reference against the definition, every bit of every element */
                            bool any_in = false, any_after = false;
                            size_t first_bad = n;
                            for (size_t i = 0; i < n; i++) {
                                const uint32_t in = test_elem_get(dt, src, i), out = test_elem_get(dt, r, i);
                                any_in |= is_nonfinite_bits(dt, in);
                                any_after |= !is_nonfinite_bits(dt, in) && is_nonfinite_bits(dt, out);
                                if (out != torch_unscale_bits(dt, in, invs[k], i, n) && first_bad == n) first_bad = i;
                            }
                            ok &= first_bad == n;
                            ok &= fr == (any_in ? 1.0f : 0.0f) && ar == (safe && any_after ? 1.0f : 0.0f);
                            if (!CHECK_MSG(ok,
                                           "ref %s n=%zu inv=%a safe=%d: flags %g/%g or element %zu (in 0x%x: 0x%x, "
                                           "want 0x%x) differ from the definition",
                                           amp_dtype_name(dt), n, (double)invs[k], safe, (double)fr, (double)ar,
                                           first_bad, first_bad < n ? test_elem_get(dt, src, first_bad) : 0,
                                           first_bad < n ? test_elem_get(dt, r, first_bad) : 0,
                                           first_bad < n ? torch_unscale_bits(dt, test_elem_get(dt, src, first_bad),
                                                                              invs[k], first_bad, n)
                                                         : 0))
                                goto done;
                            passed++;
                        }
                    }
                }
            }
            /* found_inf is never cleared: preset flags survive a clean buffer */
            float f = 1.0f, a = 1.0f;
            const uint32_t one = dt == AMP_F32 ? 0x3F800000u : (dt == AMP_F16 ? 0x3C00u : 0x3F80u);
            for (size_t i = 0; i < 64; i++) test_elem_set(dt, got, i, one);
            amp_non_finite_check_and_unscale_safe(got, dt, 64, &f, &a, 0.5f);
            CHECK_MSG(f == 1.0f && a == 1.0f, "%s %s: a set flag was cleared", amp_isa_name((amp_isa)isa),
                      amp_dtype_name(dt));
            amp_non_finite_check_and_unscale_safe(got, dt, 64, &f, &a, 1.0f);
            CHECK(f == 1.0f && a == 1.0f);
        }
    }
    test_isa_end();
    harness_pass(passed);
    /* arguments the public kernel ignores */
    float f = 0.0f;
    amp_non_finite_check_and_unscale(NULL, AMP_F32, 10, &f, 0.5f);
    uint8_t fp8[4] = {0x7F, 0x7F, 0x7F, 0x7F};
    amp_non_finite_check_and_unscale(fp8, AMP_F8E4M3, 4, &f, 0.5f);
    amp_non_finite_check_and_unscale(fp8, (amp_dtype)99, 4, &f, 0.5f);
    CHECK(f == 0.0f && fp8[0] == 0x7F);
done:
    test_isa_end();
    free(src);
    free(ref);
    free(got);
}

/* ---- the kernels against PyTorch ---- */

static bool parse_bits_line(char *line, const char *tag, amp_dtype dtype, uint32_t *out, int n) {
    char *save = NULL;
    char *t = strtok_r(line, " ", &save);
    if (!t || strcmp(t, tag) != 0) return false;
    for (int i = 0; i < n; i++) {
        t = strtok_r(NULL, " ", &save);
        if (!t) return false;
        char *end;
        const unsigned long v = strtoul(t, &end, 16);
        if (*end || v > (dtype == AMP_F32 ? 0xFFFFFFFFul : 0xFFFFul)) return false;
        out[i] = (uint32_t)v;
    }
    return strtok_r(NULL, " ", &save) == NULL;
}

/* One unscale case of the fixture (header tokens parsed, the in/out lines next at *cursor) on every
 * path at two buffer offsets: every bit of every element, NaNs included, and found_inf. */
static bool replay_unscale_case(amp_dtype dt, const char *what, float inv, int n, float found_want, char **cursor,
                                int *lineno, unsigned char *buf) {
    enum { MAX_N = 256 };
    uint32_t in[MAX_N], out[MAX_N];
    char *l_in = next_line(cursor), *l_out = next_line(cursor);
    *lineno += 2;
    if (!CHECK_MSG(n > 0 && n <= MAX_N && l_in && l_out && parse_bits_line(l_in, "in", dt, in, n) &&
                       parse_bits_line(l_out, "out", dt, out, n),
                   "line %d: bad unscale case", *lineno))
        return false;
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!test_isa_begin(isa)) continue;
        for (size_t off = 0; off < 4; off += 3) {
            unsigned char *x = buf + (GUARD + off) * amp_dtype_size(dt);
            for (int i = 0; i < n; i++) test_elem_set(dt, x, (size_t)i, in[i]);
            float found = 0.0f;
            amp_non_finite_check_and_unscale(x, dt, (size_t)n, &found, inv);
            int bad = 0;
            for (int i = 0; i < n; i++) {
                const uint32_t g = test_elem_get(dt, x, (size_t)i);
                if (g != out[i] && bad++ < 3)
                    CHECK_MSG(false, "line %d %s %s %s off %zu: element %d of %d in 0x%x: amp 0x%x, PyTorch 0x%x",
                              *lineno, amp_isa_name((amp_isa)isa), amp_dtype_name(dt), what, off, i, n, in[i], g,
                              out[i]);
            }
            CHECK_MSG(found == found_want, "line %d %s: found_inf %g, PyTorch %g", *lineno,
                      amp_isa_name((amp_isa)isa), (double)found, (double)found_want);
            if (!bad) harness_pass((uint64_t)n);
        }
    }
    test_isa_end();
    return true;
}

void test_scaler_kernels_pytorch(void) {
    char path[512];
    char *text = read_text(fixture_path(path, sizeof path, "scaler_kernels.txt"));
    if (!CHECK_MSG(text != NULL, "cannot read %s (run from the repository root or set AMP_FIXTURE_DIR)", path)) return;
    char *cursor = text, *line = next_line(&cursor);
    CHECK(line && strcmp(line, "amp-scaler-kernels 2") == 0);
    unsigned char *buf = guarded_alloc(AMP_F32, 256 + 8);
    int n_unscale = 0, n_nan_inv = 0, n_update = 0, lineno = 1;
    while (buf && (line = next_line(&cursor)) != NULL) {
        lineno++;
        if (line[0] == '#' || line[0] == '\0') continue;
        char *tok[12];
        const int nt = split(line, tok, 12);
        if (strcmp(tok[0], "unscale") == 0) {
            amp_dtype dt;
            if (!CHECK_MSG(nt == 6 && dtype_from_token(tok[1], &dt), "line %d: bad unscale header", lineno)) break;
            const float scale = strtof(tok[2], NULL), inv = strtof(tok[3], NULL);
            /* PyTorch's inv_scale = scale.double().reciprocal().float() */
            CHECK_EQ_BITS(f32_bits(amp_inv_scale(scale)), f32_bits(inv), "amp_inv_scale(%a)", (double)scale);
            char what[64];
            snprintf(what, sizeof what, "scale %a", (double)scale);
            if (!replay_unscale_case(dt, what, inv, atoi(tok[4]), strtof(tok[5], NULL), &cursor, &lineno, buf)) break;
            n_unscale++;
        } else if (strcmp(tok[0], "unscale-inv") == 0) {
            amp_dtype dt;
            char *end = NULL;
            const unsigned long bits = nt == 5 ? strtoul(tok[2], &end, 16) : 0;
            if (!CHECK_MSG(nt == 5 && dtype_from_token(tok[1], &dt) && end && *end == '\0' && bits <= 0xFFFFFFFFul,
                           "line %d: bad unscale-inv header", lineno))
                break;
            char what[64];
            snprintf(what, sizeof what, "inv_scale bits 0x%08lx", bits);
            if (!replay_unscale_case(dt, what, f32_from_bits((uint32_t)bits), atoi(tok[3]), strtof(tok[4], NULL),
                                     &cursor, &lineno, buf))
                break;
            n_unscale++;
            n_nan_inv++;
        } else if (strcmp(tok[0], "update") == 0) {
            if (!CHECK_MSG(nt == 9, "line %d: bad update line", lineno)) break;
            float scale = strtof(tok[1], NULL);
            int32_t tracker = (int32_t)strtol(tok[2], NULL, 10);
            const float found = strtof(tok[3], NULL);
            const double growth = strtod(tok[4], NULL), backoff = strtod(tok[5], NULL);
            const int32_t interval = (int32_t)strtol(tok[6], NULL, 10);
            const float want_scale = strtof(tok[7], NULL);
            const int32_t want_tracker = (int32_t)strtol(tok[8], NULL, 10);
            const float before = scale;
            amp_update_scale(&scale, &tracker, found, growth, backoff, interval);
            const bool same = isnan(want_scale) ? isnan(scale) : f32_bits(scale) == f32_bits(want_scale);
            CHECK_MSG(same && tracker == want_tracker,
                      "line %d: update(%a, found %g, growth %a, backoff %a, interval %d): amp %a/%d, PyTorch %a/%d",
                      lineno, (double)before, (double)found, growth, backoff, interval, (double)scale, tracker,
                      (double)want_scale, want_tracker);
            n_update++;
        } else {
            CHECK_MSG(false, "line %d: unknown record '%s'", lineno, tok[0]);
            break;
        }
    }
    CHECK_MSG(n_unscale >= 180 && n_nan_inv >= 48 && n_update >= 40,
              "%d unscale (%d NaN inv_scale) and %d update cases read", n_unscale, n_nan_inv, n_update);
    harness_note("%d unscale cases (%d with a NaN inv_scale) x every path, every bit; %d update cases", n_unscale,
                 n_nan_inv, n_update);
    free(buf);
    free(text);
}

/* ---- whole training loops against torch.amp.GradScaler ---- */

enum { SEQ_MAX_PARAMS = 16, SEQ_MAX_OPTS = 8 };

typedef struct seq_spec {
    char name[64];
    uint64_t seed;
    amp_scaler_config config;
    int emin, erange, reload, n_opts, iters;
    int n_params;
    int owner[SEQ_MAX_PARAMS];
    amp_dtype dtype[SEQ_MAX_PARAMS];
    int numel[SEQ_MAX_PARAMS];
} seq_spec;

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser, as the generator's mix() */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint32_t true_grad_bits(const seq_spec *sp, int it, int p, int e) {
    const uint64_t h = mix64(sp->seed ^ mix64(((uint64_t)it << 32) | ((uint64_t)p << 16) | (uint64_t)e));
    const uint32_t sign = (uint32_t)(h & 1);
    const int exp = sp->emin + (int)((h >> 1) % (uint64_t)sp->erange);
    const uint32_t frac = (uint32_t)((h >> 8) & 0x7FFFFF);
    return sign << 31 | (uint32_t)(exp + 127) << 23 | frac;
}

typedef struct fnv64 {
    uint64_t h;
} fnv64;

static void fnv_add(fnv64 *f, uint32_t v, int bytes) {
    for (int i = 0; i < bytes; i++) {
        f->h ^= (v >> (8 * i)) & 0xFF;
        f->h *= 0x100000001B3ull;
    }
}

static bool parse_seq_header(char **tok, int nt, seq_spec *sp) {
    memset(sp, 0, sizeof *sp);
    if (nt != 13) return false;
    snprintf(sp->name, sizeof sp->name, "%s", tok[1]);
    sp->config = amp_scaler_default_config();
    int got = 0;
    for (int i = 2; i < nt; i++) {
        char *eq = strchr(tok[i], '=');
        if (!eq) return false;
        *eq = '\0';
        const char *k = tok[i], *v = eq + 1;
        got++;
        if (strcmp(k, "seed") == 0) sp->seed = strtoull(v, NULL, 16);
        else if (strcmp(k, "init") == 0) sp->config.init_scale = strtof(v, NULL);
        else if (strcmp(k, "growth") == 0) sp->config.growth_factor = strtod(v, NULL);
        else if (strcmp(k, "backoff") == 0) sp->config.backoff_factor = strtod(v, NULL);
        else if (strcmp(k, "interval") == 0) sp->config.growth_interval = atoi(v);
        else if (strcmp(k, "emin") == 0) sp->emin = atoi(v);
        else if (strcmp(k, "erange") == 0) sp->erange = atoi(v);
        else if (strcmp(k, "reload") == 0) sp->reload = atoi(v);
        else if (strcmp(k, "fp16") == 0) (void)0; /* amp accepts fp16 gradients anyway */
        else if (strcmp(k, "opts") == 0) sp->n_opts = atoi(v);
        else if (strcmp(k, "iters") == 0) sp->iters = atoi(v);
        else return false;
    }
    return got == 11 && sp->n_opts > 0 && sp->n_opts <= SEQ_MAX_OPTS && sp->erange > 0 && sp->iters > 0;
}

/* The scaler after state_dict -> text -> parse -> a fresh scaler's load_state_dict, as the generator
 * does with json.dumps / json.loads. */
static amp_scaler *reload_scaler(amp_scaler *s, const amp_scaler_config *config) {
    amp_scaler_state st, back;
    amp_scaler_state_dict(s, &st);
    char text[1024], err[128];
    CHECK(amp_scaler_state_format(&st, text, sizeof text) < sizeof text);
    if (!CHECK_MSG(amp_scaler_state_parse(text, strlen(text), &back, err, sizeof err) == AMP_OK, "%s: %s", text, err))
        return s;
    amp_scaler *fresh = NULL;
    if (!CHECK(amp_scaler_create(config, &fresh) == AMP_OK)) return s;
    CHECK(amp_scaler_load_state_dict(fresh, &back) == AMP_OK);
    amp_scaler_free(s);
    return fresh;
}

/* Replays one sequence; *cursor is after its header. Returns false on a malformed fixture. */
static bool replay_sequence(const seq_spec *sp, char **cursor, int *lineno, amp_isa isa) {
    amp_ctx_config cc = amp_ctx_default_config();
    cc.arena_bytes = 1 << 16;
    amp_ctx *ctx = NULL;
    amp_scaler *s = NULL;
    amp_optimizer *opts[SEQ_MAX_OPTS] = {NULL};
    amp_tensor *params[SEQ_MAX_PARAMS] = {NULL};
    bool ok = CHECK(amp_ctx_create(&cc, &ctx) == AMP_OK);
    for (int i = 0; ok && i < sp->n_params; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        params[i] = amp_param_new(ctx, name, sp->dtype[i], 1, (const int64_t[]){sp->numel[i]});
        ok = CHECK(params[i] != NULL);
    }
    ok = ok && CHECK(amp_ctx_alloc_params(ctx) == AMP_OK);
    amp_optim_config oc = amp_optim_default_config(AMP_OPTIM_SGD);
    for (int o = 0; ok && o < sp->n_opts; o++) {
        amp_tensor *mine[SEQ_MAX_PARAMS];
        size_t k = 0;
        for (int i = 0; i < sp->n_params; i++)
            if (sp->owner[i] == o) mine[k++] = params[i];
        ok = CHECK(amp_optimizer_create_for(ctx, &oc, mine, k, &opts[o]) == AMP_OK);
    }
    ok = ok && CHECK(amp_scaler_create(&sp->config, &s) == AMP_OK);

    fnv64 fnv = {0xCBF29CE484222325ull};
    float last_scale = NAN;
    bool diverged = !ok, well_formed = true;
    for (int it = 0; it < sp->iters; it++) {
        char *line = next_line(cursor);
        (*lineno)++;
        char *tok[10];
        const int nt = line ? split(line, tok, 10) : 0;
        if (nt != 9 || atoi(tok[0]) != it) {
            well_formed = false;
            break;
        }
        if (diverged) continue; /* read the rest of the sequence, check nothing more */
        const unsigned used = (unsigned)strtoul(tok[1], NULL, 16), unscaled = (unsigned)strtoul(tok[2], NULL, 16);
        const unsigned skip_want = (unsigned)strtoul(tok[5], NULL, 16);
        const float scale = amp_scaler_scale(s);
        for (int i = 0; i < sp->n_params; i++) {
            if (!(used >> sp->owner[i] & 1)) continue;
            for (int e = 0; e < sp->numel[i]; e++) {
                const float g = f32_from_bits(true_grad_bits(sp, it, i, e)) * scale;
                CHECK(amp_convert((unsigned char *)params[i]->grad->data + (size_t)e * amp_dtype_size(sp->dtype[i]),
                                  sp->dtype[i], &g, AMP_F32, 1) == AMP_OK);
            }
        }
        if (strcmp(tok[4], "-") != 0) {
            char *save = NULL;
            for (char *inj = strtok_r(tok[4], ",", &save); inj; inj = strtok_r(NULL, ",", &save)) {
                int p = -1, e = -1;
                unsigned bits = 0;
                if (sscanf(inj, "%d.%d.%x", &p, &e, &bits) != 3 || p < 0 || p >= sp->n_params || e < 0 ||
                    e >= sp->numel[p]) {
                    well_formed = false;
                    break;
                }
                test_elem_set(sp->dtype[p], params[p]->grad->data, (size_t)e, bits);
            }
        }
        for (int o = 0; o < sp->n_opts; o++)
            if (unscaled >> o & 1) CHECK(amp_scaler_unscale(s, opts[o]) == AMP_OK);
        unsigned skipped = 0;
        for (int o = 0; o < sp->n_opts; o++) {
            if (!(used >> o & 1)) continue;
            const int64_t before = amp_optimizer_step_count(opts[o]);
            amp_step_report rep;
            CHECK(amp_scaler_step(s, opts[o], &rep) == AMP_OK);
            skipped |= (unsigned)rep.skipped << o;
            CHECK(amp_optimizer_step_count(opts[o]) == before + (rep.skipped ? 0 : 1));
            CHECK(rep.found_inf == (rep.skipped ? 1.0f : 0.0f) && rep.scale == scale);
        }
        for (int i = 0; i < sp->n_params; i++) {
            if (!(used >> sp->owner[i] & 1)) continue;
            for (int e = 0; e < sp->numel[i]; e++) {
                uint32_t b = test_elem_get(sp->dtype[i], params[i]->grad->data, (size_t)e);
                if (sp->dtype[i] != AMP_F32 && is_nan_bits(sp->dtype[i], b)) b = 0x7FFF;
                fnv_add(&fnv, b, (int)amp_dtype_size(sp->dtype[i]));
            }
        }
        if (strcmp(tok[3], "u") == 0)
            CHECK(amp_scaler_update(s) == AMP_OK);
        else
            CHECK(amp_scaler_update_to(s, strtof(tok[3], NULL)) == AMP_OK);
        if (sp->reload && (it + 1) % sp->reload == 0) s = reload_scaler(s, &sp->config);
        const float want_scale = strcmp(tok[6], "=") == 0 ? last_scale : strtof(tok[6], NULL);
        last_scale = want_scale;
        const int32_t want_tracker = (int32_t)strtol(tok[7], NULL, 10);
        const float got_scale = amp_scaler_get_scale(s);
        const int32_t got_tracker = amp_scaler_get_growth_tracker(s);
        bool same = f32_bits(got_scale) == f32_bits(want_scale) && got_tracker == want_tracker && skipped == skip_want;
        if (strcmp(tok[8], "-") != 0) same &= fnv.h == strtoull(tok[8], NULL, 16);
        if (!same) {
            CHECK_MSG(false,
                      "%s (%s) iteration %d (line %d): amp scale %a tracker %d skipped %x grads %016llx; PyTorch "
                      "scale %a tracker %d skipped %x grads %s",
                      sp->name, amp_isa_name(isa), it, *lineno, (double)got_scale, got_tracker, skipped,
                      (unsigned long long)fnv.h, (double)want_scale, want_tracker, skip_want, tok[8]);
            diverged = true;
        }
    }
    char *end = next_line(cursor);
    (*lineno)++;
    well_formed = well_formed && end && strcmp(end, "end") == 0;
    if (!diverged) harness_pass((uint64_t)sp->iters);
    amp_scaler_free(s);
    for (int o = 0; o < sp->n_opts; o++) amp_optimizer_free(opts[o]);
    amp_ctx_free(ctx);
    return well_formed;
}

void test_scaler_sequences_pytorch(void) {
    char path[512];
    char *text = read_text(fixture_path(path, sizeof path, "scaler_sequences.txt"));
    if (!CHECK_MSG(text != NULL, "cannot read %s (run from the repository root or set AMP_FIXTURE_DIR)", path)) return;
    const size_t len = strlen(text);
    char *work = malloc(len + 1);
    if (!CHECK(work != NULL)) {
        free(text);
        return;
    }
    amp_isa isas[AMP_ISA_COUNT];
    const int n_isas = test_supported_isas(isas);
    for (int k = 0; k < n_isas; k++) {
        if (!test_isa_begin((int)isas[k])) continue;
        memcpy(work, text, len + 1);
        char *cursor = work, *line = next_line(&cursor);
        int lineno = 1, n_seq = 0, n_iters = 0;
        CHECK(line && strcmp(line, "amp-scaler-sequences 1") == 0);
        while ((line = next_line(&cursor)) != NULL) {
            lineno++;
            if (line[0] == '#' || line[0] == '\0') continue;
            char *tok[16];
            const int nt = split(line, tok, 16);
            seq_spec sp;
            if (!CHECK_MSG(strcmp(tok[0], "seq") == 0 && parse_seq_header(tok, nt, &sp), "line %d: bad sequence header",
                           lineno))
                break;
            bool ok = true;
            while (ok) { /* param lines */
                char *save_cursor = cursor;
                char *pl = next_line(&cursor);
                if (!pl || strncmp(pl, "param ", 6) != 0) {
                    if (pl) pl[strlen(pl)] = '\n'; /* put the line back */
                    cursor = save_cursor;
                    break;
                }
                lineno++;
                char *pt[5];
                ok = split(pl, pt, 5) == 4 && sp.n_params < SEQ_MAX_PARAMS;
                if (!ok) break;
                sp.owner[sp.n_params] = atoi(pt[1]);
                ok = dtype_from_token(pt[2], &sp.dtype[sp.n_params]) && sp.owner[sp.n_params] < sp.n_opts;
                sp.numel[sp.n_params] = atoi(pt[3]);
                ok = ok && sp.numel[sp.n_params] > 0;
                sp.n_params++;
            }
            if (!CHECK_MSG(ok && sp.n_params > 0, "line %d: bad param line", lineno)) break;
            if (!CHECK_MSG(replay_sequence(&sp, &cursor, &lineno, isas[k]), "%s: malformed near line %d", sp.name, lineno))
                break;
            n_seq++;
            n_iters += sp.iters;
        }
        CHECK_MSG(n_seq >= 8 && n_iters >= 4000, "%d sequences, %d iterations read", n_seq, n_iters);
        if (k == 0) harness_note("%d sequences, %d iterations, on every path", n_seq, n_iters);
    }
    test_isa_end();
    free(work);
    free(text);
}

/* ---- a small rig: a context, parameters, optimizers ---- */

enum { RIG_PARAMS = 3, RIG_N = 8 };

typedef struct rig {
    amp_ctx *ctx;
    amp_tensor *p[RIG_PARAMS]; /* p0, p1: F32; p2: F16 */
    amp_optimizer *a;          /* over p0 */
    amp_optimizer *b;          /* over p1 and p2 */
} rig;

static bool rig_init(rig *r, amp_dtype dtype0) {
    memset(r, 0, sizeof *r);
    amp_ctx_config cc = amp_ctx_default_config();
    cc.arena_bytes = 1 << 16;
    if (!CHECK(amp_ctx_create(&cc, &r->ctx) == AMP_OK)) return false;
    const amp_dtype dts[RIG_PARAMS] = {dtype0, AMP_F32, AMP_F16};
    for (int i = 0; i < RIG_PARAMS; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        r->p[i] = amp_param_new(r->ctx, name, dts[i], 1, (const int64_t[]){RIG_N});
    }
    if (!CHECK(amp_ctx_alloc_params(r->ctx) == AMP_OK)) return false;
    amp_optim_config oc = amp_optim_default_config(AMP_OPTIM_SGD);
    oc.lr = 0.25f;
    return CHECK(amp_optimizer_create_for(r->ctx, &oc, &r->p[0], 1, &r->a) == AMP_OK) &&
           CHECK(amp_optimizer_create_for(r->ctx, &oc, &r->p[1], 2, &r->b) == AMP_OK);
}

static void rig_free(rig *r) {
    amp_optimizer_free(r->a);
    amp_optimizer_free(r->b);
    amp_ctx_free(r->ctx);
}

/* Sets every gradient element of parameter i to v (in its dtype). */
static void set_grad(rig *r, int i, float v) {
    for (int e = 0; e < RIG_N; e++)
        amp_convert((unsigned char *)r->p[i]->grad->data + (size_t)e * amp_dtype_size(r->p[i]->dtype),
                    r->p[i]->dtype, &v, AMP_F32, 1);
}

static float grad_at(const rig *r, int i, int e) { return elem_as_f32(r->p[i]->dtype, r->p[i]->grad->data, (size_t)e); }

static amp_scaler *new_scaler(const amp_scaler_config *c) {
    amp_scaler *s = NULL;
    CHECK(amp_scaler_create(c, &s) == AMP_OK);
    return s;
}

/* ---- the state machine ---- */

#define NO_SCALE_MSG(cfn, fn)                                                                            \
    cfn ": Attempted " fn " but _scale is None.  This may indicate your script did not use amp_scaler_backward " \
    "(or amp_scaler_scale) earlier in the iteration."

void test_scaler_state_machine(void) {
    rig r;
    if (!rig_init(&r, AMP_F32)) {
        rig_free(&r);
        return;
    }
    amp_scaler *s = new_scaler(NULL);
    if (!s) {
        rig_free(&r);
        return;
    }
    /* PyTorch's defaults */
    CHECK(amp_scaler_is_enabled(s) && amp_scaler_get_scale(s) == 65536.0f && amp_scaler_get_growth_tracker(s) == 0);
    CHECK(amp_scaler_get_growth_factor(s) == 2.0 && amp_scaler_get_backoff_factor(s) == 0.5 &&
          amp_scaler_get_growth_interval(s) == 2000);
    CHECK(amp_scaler_status(s) == AMP_OK && strcmp(amp_scaler_error(s), "") == 0);

    /* before scale(): _check_scale_growth_tracker's assertion, for each entry point */
    CHECK_EQ_INT(amp_scaler_unscale(s, r.a), AMP_ERR_STATE);
    CHECK_STR_EQ(amp_scaler_error(s), NO_SCALE_MSG("amp_scaler_unscale", "unscale_"));
    CHECK_EQ_INT(amp_scaler_step(s, r.a, NULL), AMP_ERR_STATE);
    CHECK_STR_EQ(amp_scaler_error(s), NO_SCALE_MSG("amp_scaler_step", "step"));
    CHECK_EQ_INT(amp_scaler_step_fused(s, r.a, 0.0f, NULL), AMP_ERR_STATE);
    CHECK_EQ_INT(amp_scaler_update(s), AMP_ERR_STATE);
    CHECK_STR_EQ(amp_scaler_error(s), NO_SCALE_MSG("amp_scaler_update", "update"));
    CHECK_EQ_INT(amp_scaler_update_to(s, 8.0f), AMP_ERR_STATE);
    CHECK_EQ_INT(amp_scaler_status(s), AMP_ERR_STATE);
    CHECK_EQ_INT(amp_optimizer_step_count(r.a), 0);
    amp_scaler_clear_error(s);
    CHECK(amp_scaler_status(s) == AMP_OK && amp_scaler_error(s)[0] == '\0');

    CHECK(amp_scaler_scale(s) == 65536.0f);
    /* update with nothing checked */
    CHECK_EQ_INT(amp_scaler_update(s), AMP_ERR_STATE);
    CHECK_STR_EQ(amp_scaler_error(s), "amp_scaler_update: No inf checks were recorded prior to update.");

    /* unscale, unscale again, step (no second unscale), step again, unscale after step */
    set_grad(&r, 0, 65536.0f * 3.0f);
    CHECK_EQ_INT(amp_scaler_unscale(s, r.a), AMP_OK);
    CHECK(amp_scaler_get_stage(s, r.a) == AMP_STAGE_UNSCALED && amp_scaler_get_stage(s, r.b) == AMP_STAGE_READY);
    CHECK(grad_at(&r, 0, 0) == 3.0f);
    CHECK_EQ_INT(amp_scaler_unscale(s, r.a), AMP_ERR_STATE);
    CHECK_STR_EQ(amp_scaler_error(s),
                 "amp_scaler_unscale: unscale_() has already been called on this optimizer since the last update().");
    CHECK(grad_at(&r, 0, 0) == 3.0f);
    amp_step_report rep;
    CHECK_EQ_INT(amp_scaler_step(s, r.a, &rep), AMP_OK);
    CHECK(!rep.skipped && rep.reason == AMP_SKIP_NONE && rep.scale == 65536.0f && rep.inv_scale == 0x1p-16f);
    CHECK(grad_at(&r, 0, 0) == 3.0f); /* not unscaled a second time */
    CHECK_EQ_INT(amp_optimizer_step_count(r.a), 1);
    CHECK(amp_scaler_get_stage(s, r.a) == AMP_STAGE_STEPPED);
    CHECK_EQ_INT(amp_scaler_step(s, r.a, &rep), AMP_ERR_STATE);
    CHECK_STR_EQ(amp_scaler_error(s), "amp_scaler_step: step() has already been called since the last update().");
    CHECK_EQ_INT(amp_scaler_step_fused(s, r.a, 1.0f, &rep), AMP_ERR_STATE);
    CHECK_EQ_INT(amp_scaler_unscale(s, r.a), AMP_ERR_STATE);
    CHECK_STR_EQ(amp_scaler_error(s), "amp_scaler_unscale: unscale_() is being called after step().");
    CHECK_EQ_INT(amp_optimizer_step_count(r.a), 1);
    /* b is independent: its own unscale and step in the same iteration */
    set_grad(&r, 1, 65536.0f);
    set_grad(&r, 2, 1.0f);
    CHECK_EQ_INT(amp_scaler_step(s, r.b, &rep), AMP_OK);
    CHECK(grad_at(&r, 1, 3) == 1.0f && grad_at(&r, 2, 0) == 0x1p-16f);
    CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
    CHECK(amp_scaler_get_stage(s, r.a) == AMP_STAGE_READY && amp_scaler_get_stage(s, r.b) == AMP_STAGE_READY);
    CHECK_EQ_INT(amp_scaler_get_growth_tracker(s), 1);

    /* step after update without a new unscale_ is allowed: the state is READY again, so step
     * unscales (with the current scale) and steps, as in PyTorch */
    set_grad(&r, 0, 65536.0f * 5.0f);
    CHECK_EQ_INT(amp_scaler_step(s, r.a, &rep), AMP_OK);
    CHECK(!rep.skipped && grad_at(&r, 0, 0) == 5.0f);
    CHECK_EQ_INT(amp_optimizer_step_count(r.a), 2);
    CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);

    /* an optimizer whose parameters have no gradient: "No inf checks were recorded for this
     * optimizer." (PyTorch: every p.grad is None); the stage is left UNSCALED, as PyTorch leaves it */
    amp_tensor *saved = r.p[0]->grad;
    r.p[0]->grad = NULL;
    CHECK_EQ_INT(amp_scaler_step(s, r.a, &rep), AMP_ERR_STATE);
    CHECK(strstr(amp_scaler_error(s), "amp_scaler_step: No inf checks were recorded for this optimizer.") ==
          amp_scaler_error(s));
    CHECK(amp_scaler_get_stage(s, r.a) == AMP_STAGE_UNSCALED);
    CHECK_EQ_INT(amp_scaler_update(s), AMP_ERR_STATE);
    CHECK_STR_EQ(amp_scaler_error(s), "amp_scaler_update: No inf checks were recorded prior to update.");
    r.p[0]->grad = saved;
    CHECK_EQ_INT(amp_scaler_update_to(s, 1024.0f), AMP_OK); /* resets the stages, keeps the tracker */
    CHECK(amp_scaler_get_scale(s) == 1024.0f && amp_scaler_get_growth_tracker(s) == 2);
    CHECK(amp_scaler_get_stage(s, r.a) == AMP_STAGE_READY);

    /* several optimizers: b skips alone, the scale backs off once for the iteration */
    set_grad(&r, 0, 1024.0f);
    set_grad(&r, 1, 1024.0f);
    float inf = INFINITY;
    amp_convert(r.p[2]->grad->data, AMP_F16, &inf, AMP_F32, 1);
    CHECK_EQ_INT(amp_scaler_step(s, r.a, &rep), AMP_OK);
    CHECK(!rep.skipped);
    CHECK_EQ_INT(amp_scaler_step(s, r.b, &rep), AMP_OK);
    CHECK(rep.skipped && rep.reason == AMP_SKIP_FOUND_INF && rep.found_inf == 1.0f);
    CHECK(amp_scaler_found_inf(s, r.a) == 0.0f && amp_scaler_found_inf(s, r.b) == 1.0f);
    CHECK_EQ_INT(amp_optimizer_step_count(r.a), 3);
    CHECK_EQ_INT(amp_optimizer_step_count(r.b), 1);
    CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
    CHECK(amp_scaler_get_scale(s) == 512.0f && amp_scaler_get_growth_tracker(s) == 0);

    /* the per-iteration table holds 32 optimizers */
    amp_optimizer *many[33] = {NULL};
    amp_optim_config oc = amp_optim_default_config(AMP_OPTIM_SGD);
    int made = 0;
    for (int i = 0; i < 33; i++) made += amp_optimizer_create_for(r.ctx, &oc, &r.p[1], 1, &many[i]) == AMP_OK;
    CHECK_EQ_INT(made, 33);
    if (made == 33) {
        amp_scaler_scale(s);
        for (int i = 0; i < 32; i++) CHECK_EQ_INT(amp_scaler_unscale(s, many[i]), AMP_OK);
        CHECK_EQ_INT(amp_scaler_unscale(s, many[32]), AMP_ERR_STATE);
        CHECK(strstr(amp_scaler_error(s), "more than 32 optimizers") != NULL);
        CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
        CHECK_EQ_INT(amp_scaler_unscale(s, many[32]), AMP_OK); /* a new iteration */
        CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
    }
    for (int i = 0; i < 33; i++) amp_optimizer_free(many[i]);

    /* NULL arguments */
    CHECK_EQ_INT(amp_scaler_unscale(NULL, r.a), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_scaler_step(s, NULL, NULL), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_scaler_update(NULL), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_scaler_create(NULL, NULL), AMP_ERR_NULL_POINTER);
    amp_scaler_free(NULL);
    amp_scaler_free(s);
    rig_free(&r);
}

void test_scaler_config_and_disabled(void) {
    amp_scaler_config c = amp_scaler_default_config();
    CHECK(c.init_scale == 65536.0f && c.growth_factor == 2.0 && c.backoff_factor == 0.5 && c.growth_interval == 2000 &&
          c.enabled && c.min_scale == 0.0f && c.max_scale == 0.0f && c.hysteresis <= 1 && !c.safe &&
          c.floor_patience == 0);
    CHECK(amp_scaler_config_error(&c) == NULL);
    amp_scaler *s = NULL;
    c.growth_factor = 1.0;
    CHECK_EQ_INT(amp_scaler_create(&c, &s), AMP_ERR_INVALID_ARGUMENT);
    CHECK_STR_EQ(amp_scaler_config_error(&c), "The growth factor must be > 1.0.");
    c = amp_scaler_default_config();
    c.backoff_factor = 1.0;
    CHECK_EQ_INT(amp_scaler_create(&c, &s), AMP_ERR_INVALID_ARGUMENT);
    CHECK_STR_EQ(amp_scaler_config_error(&c), "The backoff factor must be < 1.0.");
    c = amp_scaler_default_config();
    c.min_scale = 8.0f;
    c.max_scale = 4.0f;
    CHECK(amp_scaler_create(&c, &s) == AMP_ERR_INVALID_ARGUMENT && amp_scaler_config_error(&c) != NULL);
    c = amp_scaler_default_config();
    c.hysteresis_mode = (amp_hysteresis_mode)7;
    CHECK(amp_scaler_config_error(&c) != NULL);
    c = amp_scaler_default_config();
    c.floor_patience = -1;
    CHECK(amp_scaler_config_error(&c) != NULL);
    CHECK(s == NULL);

    /* disabled: PyTorch checks the factors only when enabled */
    c = amp_scaler_default_config();
    c.enabled = false;
    c.growth_factor = 0.5;
    CHECK_EQ_INT(amp_scaler_create(&c, &s), AMP_OK);
    if (!s) return;
    rig r;
    if (!rig_init(&r, AMP_F32)) {
        rig_free(&r);
        amp_scaler_free(s);
        return;
    }
    CHECK(!amp_scaler_is_enabled(s) && amp_scaler_scale(s) == 1.0f && amp_scaler_get_scale(s) == 1.0f);
    CHECK(amp_scaler_get_growth_tracker(s) == 0);
    /* backward is a plain backward: d(mean(w*w))/dw = 2w/n */
    float w[RIG_N];
    for (int e = 0; e < RIG_N; e++) w[e] = (float)(e + 1);
    CHECK(amp_tensor_write(r.p[0], w, AMP_F32) == AMP_OK);
    amp_zero_grad(r.ctx);
    amp_tensor *loss = amp_mean_all(r.ctx, amp_mul(r.ctx, r.p[0], r.p[0]));
    CHECK_EQ_INT(amp_scaler_backward(s, r.ctx, loss), AMP_OK);
    CHECK(grad_at(&r, 0, 3) == 2.0f * 4.0f / RIG_N);
    /* unscale: nothing; step: the optimizer, whatever the gradients hold; update: nothing */
    set_grad(&r, 0, INFINITY);
    CHECK_EQ_INT(amp_scaler_unscale(s, r.a), AMP_OK);
    CHECK(isinf(grad_at(&r, 0, 0)));
    amp_step_report rep;
    CHECK_EQ_INT(amp_scaler_step(s, r.a, &rep), AMP_OK);
    CHECK(!rep.skipped && rep.scale == 1.0f);
    CHECK_EQ_INT(amp_optimizer_step_count(r.a), 1);
    CHECK_EQ_INT(amp_scaler_step(s, r.a, &rep), AMP_OK); /* no state machine */
    CHECK_EQ_INT(amp_optimizer_step_count(r.a), 2);
    CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
    CHECK_EQ_INT(amp_scaler_update_to(s, 4.0f), AMP_OK);
    CHECK(amp_scaler_get_scale(s) == 1.0f);
    amp_scaler_state st;
    amp_scaler_state_dict(s, &st);
    CHECK(st.empty);
    char text[64];
    CHECK(amp_scaler_state_format(&st, text, sizeof text) == 2 && strcmp(text, "{}") == 0);
    st.empty = false;
    st.scale = 8.0;
    CHECK_EQ_INT(amp_scaler_load_state_dict(s, &st), AMP_OK);
    CHECK(amp_scaler_get_scale(s) == 1.0f);
    amp_scaler_stats stats;
    amp_scaler_get_stats(s, &stats);
    CHECK(stats.steps_taken == 0 && stats.iterations == 0);
    /* enabling checks the factors, between iterations only */
    CHECK_EQ_INT(amp_scaler_set_enabled(s, true), AMP_ERR_INVALID_ARGUMENT);
    CHECK_STR_EQ(amp_scaler_error(s), "amp_scaler_set_enabled: The growth factor must be > 1.0.");
    amp_scaler_set_growth_factor(s, 2.0);
    CHECK_EQ_INT(amp_scaler_set_enabled(s, true), AMP_OK);
    CHECK(amp_scaler_is_enabled(s) && amp_scaler_get_scale(s) == 65536.0f);
    amp_scaler_scale(s);
    set_grad(&r, 0, 2.0f);
    CHECK_EQ_INT(amp_scaler_unscale(s, r.a), AMP_OK);
    CHECK_EQ_INT(amp_scaler_set_enabled(s, false), AMP_ERR_STATE);
    CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
    CHECK_EQ_INT(amp_scaler_set_enabled(s, false), AMP_OK);
    /* the enabled scaler's backward seeds the scale */
    CHECK_EQ_INT(amp_scaler_set_enabled(s, true), AMP_OK);
    amp_zero_grad(r.ctx);
    amp_ctx_reset(r.ctx);
    CHECK(amp_tensor_write(r.p[0], w, AMP_F32) == AMP_OK); /* the steps above wrote inf into it */
    loss = amp_mean_all(r.ctx, amp_mul(r.ctx, r.p[0], r.p[0]));
    CHECK_EQ_INT(amp_scaler_backward(s, r.ctx, loss), AMP_OK);
    CHECK(grad_at(&r, 0, 3) == 65536.0f * 2.0f * 4.0f / RIG_N);
    /* a second loss in the same iteration: its scaled gradient accumulates */
    amp_tensor *loss2 = amp_sum_all(r.ctx, amp_mul(r.ctx, r.p[0], r.p[0]));
    CHECK_EQ_INT(amp_scaler_backward(s, r.ctx, loss2), AMP_OK);
    CHECK(grad_at(&r, 0, 3) == 65536.0f * (2.0f * 4.0f / RIG_N + 2.0f * 4.0f));
    CHECK_EQ_INT(amp_scaler_unscale(s, r.a), AMP_OK);
    CHECK(grad_at(&r, 0, 3) == 2.0f * 4.0f / RIG_N + 2.0f * 4.0f);
    CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
    rig_free(&r);
    amp_scaler_free(s);
}

/* ---- saving and loading ---- */

static bool states_equal(const amp_scaler_state *a, const amp_scaler_state *b) {
    return a->empty == b->empty && f32_bits((float)a->scale) == f32_bits((float)b->scale) &&
           a->growth_factor == b->growth_factor && a->backoff_factor == b->backoff_factor &&
           a->growth_interval == b->growth_interval && a->growth_tracker == b->growth_tracker &&
           a->has_amp == b->has_amp && a->hysteresis_tracker == b->hysteresis_tracker &&
           a->steps_taken == b->steps_taken && a->steps_skipped == b->steps_skipped && a->iterations == b->iterations &&
           a->iterations_skipped == b->iterations_skipped && a->consecutive_skipped == b->consecutive_skipped &&
           a->overflows_absorbed == b->overflows_absorbed && a->floor_streak == b->floor_streak;
}

static int parse_str(const char *text, amp_scaler_state *st, char *err) {
    return amp_scaler_state_parse(text, strlen(text), st, err, 128);
}

void test_scaler_state_io(void) {
    amp_scaler *s = new_scaler(NULL);
    if (!s) return;
    amp_scaler_state st, back;
    char text[1024], err[128];
    amp_scaler_state_dict(s, &st);
    amp_scaler_state_format(&st, text, sizeof text);
    CHECK_STR_EQ(text, "{\"scale\": 65536.0, \"growth_factor\": 2.0, \"backoff_factor\": 0.5, \"growth_interval\": 2000, "
                       "\"_growth_tracker\": 0, \"amp_hysteresis_tracker\": 1, \"amp_steps_taken\": 0, "
                       "\"amp_steps_skipped\": 0, \"amp_iterations\": 0, \"amp_iterations_skipped\": 0, "
                       "\"amp_consecutive_skipped\": 0, \"amp_overflows_absorbed\": 0, \"amp_floor_streak\": 0}");
    /* a state with history: odd factors, a rounded scale, counters */
    rig r;
    if (!rig_init(&r, AMP_F32)) {
        rig_free(&r);
        amp_scaler_free(s);
        return;
    }
    amp_scaler_set_growth_factor(s, 1.1);
    amp_scaler_set_backoff_factor(s, 0.3);
    amp_scaler_set_growth_interval(s, 3);
    for (int it = 0; it < 10; it++) {
        amp_scaler_scale(s);
        set_grad(&r, 0, it % 4 == 1 ? NAN : 1.0f);
        CHECK_EQ_INT(amp_scaler_step(s, r.a, NULL), AMP_OK);
        CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
    }
    amp_scaler_state_dict(s, &st);
    CHECK(st.has_amp && st.steps_skipped == 3 && st.steps_taken == 7 && st.iterations == 10);
    CHECK((double)(float)st.scale == st.scale && st.scale != 65536.0);
    /* struct round trip into a new scaler */
    amp_scaler *t = new_scaler(NULL);
    if (t) {
        CHECK_EQ_INT(amp_scaler_load_state_dict(t, &st), AMP_OK);
        amp_scaler_state_dict(t, &back);
        CHECK(states_equal(&st, &back));
        CHECK(amp_scaler_get_scale(t) == amp_scaler_get_scale(s) &&
              amp_scaler_get_growth_tracker(t) == amp_scaler_get_growth_tracker(s) &&
              amp_scaler_get_growth_factor(t) == 1.1 && amp_scaler_get_backoff_factor(t) == 0.3 &&
              amp_scaler_get_growth_interval(t) == 3);
        amp_scaler_free(t);
    }
    /* text round trip, every length of buffer (snprintf's convention) */
    const size_t need = amp_scaler_state_format(&st, text, sizeof text);
    CHECK(need == strlen(text) && need < sizeof text);
    CHECK_MSG(parse_str(text, &back, err) == AMP_OK && states_equal(&st, &back), "%s: %s", text, err);
    CHECK(strstr(text, "\"growth_factor\": 1.1,") && strstr(text, "\"backoff_factor\": 0.3,"));
    for (size_t size = 0; size <= need + 1; size++) {
        char small[1024];
        memset(small, 'x', sizeof small);
        CHECK(amp_scaler_state_format(&st, size ? small : NULL, size) == need);
        if (size) CHECK(strlen(small) == (size - 1 < need ? size - 1 : need) && strncmp(small, text, size - 1) == 0);
    }
    /* json.dumps(torch.amp.GradScaler("cpu").state_dict()) after some iterations */
    const char *torch_text = "{\"scale\": 32768.0, \"growth_factor\": 2.0, \"backoff_factor\": 0.5, "
                             "\"growth_interval\": 2000, \"_growth_tracker\": 7}";
    CHECK_EQ_INT(parse_str(torch_text, &back, err), AMP_OK);
    CHECK(!back.empty && !back.has_amp && back.scale == 32768.0 && back.growth_tracker == 7 &&
          back.growth_interval == 2000);
    amp_scaler_config hc = amp_scaler_default_config();
    hc.hysteresis = 3;
    t = new_scaler(&hc);
    if (t) {
        CHECK_EQ_INT(amp_scaler_load_state_dict(t, &back), AMP_OK);
        amp_scaler_stats stats;
        amp_scaler_get_stats(t, &stats);
        CHECK(amp_scaler_get_scale(t) == 32768.0f && amp_scaler_get_growth_tracker(t) == 7 &&
              stats.hysteresis_tracker == 3 && stats.steps_taken == 0);
        amp_scaler_state_dict(t, &st);
        amp_scaler_state_format(&st, text, sizeof text);
        CHECK(strncmp(text, torch_text, strlen(torch_text) - 1) == 0); /* the same five keys first */
        /* an empty state: PyTorch's message */
        CHECK_EQ_INT(parse_str(" { } ", &back, err), AMP_OK);
        CHECK(back.empty);
        CHECK_EQ_INT(amp_scaler_load_state_dict(t, &back), AMP_ERR_INVALID_ARGUMENT);
        CHECK_STR_EQ(amp_scaler_error(t), "amp_scaler_load_state_dict: The source state dict is empty, possibly "
                                          "because it was saved from a disabled instance of GradScaler.");
        amp_scaler_free(t);
    }
    /* non-finite and rounding values: Python's spellings, the scale rounded to fp32 when loaded */
    CHECK_EQ_INT(parse_str("{\"scale\": Infinity, \"growth_factor\": 1e308, \"backoff_factor\": -0.0, "
                           "\"growth_interval\": -5, \"_growth_tracker\": 2147483647}",
                           &back, err),
                 AMP_OK);
    CHECK(isinf(back.scale) && back.growth_factor == 1e308 && back.growth_interval == -5 &&
          back.growth_tracker == 2147483647);
    amp_scaler_state_format(&back, text, sizeof text);
    CHECK(strstr(text, "\"scale\": Infinity,") && strstr(text, "\"growth_factor\": 1e+308,") &&
          strstr(text, "\"backoff_factor\": -0.0,"));
    CHECK_EQ_INT(parse_str("{\"scale\": NaN, \"growth_factor\": 2, \"backoff_factor\": 0.5, \"growth_interval\": 2000.0, "
                           "\"_growth_tracker\": 0}",
                           &back, err),
                 AMP_OK);
    CHECK(isnan(back.scale) && back.growth_interval == 2000);
    CHECK_EQ_INT(parse_str("{\"scale\": 0.1, \"growth_factor\": 2, \"backoff_factor\": 0.5, \"growth_interval\": 1, "
                           "\"_growth_tracker\": 0}",
                           &back, err),
                 AMP_OK);
    t = new_scaler(NULL);
    if (t) {
        CHECK_EQ_INT(amp_scaler_load_state_dict(t, &back), AMP_OK);
        CHECK(amp_scaler_get_scale(t) == 0.1f);
        amp_scaler_free(t);
    }
    /* malformed texts */
    static const char *const bad[] = {
        "",
        "[]",
        "{\"scale\": 1.0}",
        "{\"scale\": 1.0, \"growth_factor\": 2.0, \"backoff_factor\": 0.5, \"growth_interval\": 2000}",
        "{\"scale\": 1.0, \"growth_factor\": 2.0, \"backoff_factor\": 0.5, \"growth_interval\": 2000, "
        "\"_growth_tracker\": 0, \"extra\": 1}",
        "{\"scale\": 1.0, \"scale\": 1.0, \"growth_factor\": 2.0, \"backoff_factor\": 0.5, \"growth_interval\": 2000, "
        "\"_growth_tracker\": 0}",
        "{\"scale\": 1.0, \"growth_factor\": 2.0, \"backoff_factor\": 0.5, \"growth_interval\": 2000, "
        "\"_growth_tracker\": 1.5}",
        "{\"scale\": 1.0, \"growth_factor\": 2.0, \"backoff_factor\": 0.5, \"growth_interval\": 2147483648, "
        "\"_growth_tracker\": 0}",
        "{\"scale\": 0x1p4, \"growth_factor\": 2.0, \"backoff_factor\": 0.5, \"growth_interval\": 2000, "
        "\"_growth_tracker\": 0}",
        "{\"scale\": inf, \"growth_factor\": 2.0, \"backoff_factor\": 0.5, \"growth_interval\": 2000, "
        "\"_growth_tracker\": 0}",
        "{\"scale\": 1.0, \"growth_factor\": 2.0, \"backoff_factor\": 0.5, \"growth_interval\": 2000, "
        "\"_growth_tracker\": 0} x",
        "{\"scale\": 1.0, \"growth_factor\": 2.0, \"backoff_factor\": 0.5, \"growth_interval\": 2000, "
        "\"_growth_tracker\": 0, \"amp_steps_taken\": 3}",
        "{\"scale\": 1.0 \"growth_factor\": 2.0}",
        "{\"scale\": \"1.0\", \"growth_factor\": 2.0, \"backoff_factor\": 0.5, \"growth_interval\": 2000, "
        "\"_growth_tracker\": 0}",
        "{\"sca",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        CHECK_MSG(parse_str(bad[i], &back, err) == AMP_ERR_FORMAT && err[0] != '\0', "accepted: %s", bad[i]);
    }
    /* a length shorter than the string: the object is cut */
    CHECK_EQ_INT(amp_scaler_state_parse(torch_text, strlen(torch_text) - 1, &back, NULL, 0), AMP_ERR_FORMAT);
    rig_free(&r);
    amp_scaler_free(s);
}

/* ---- extras ---- */

/* One iteration with one optimizer: a (scaled) gradient that overflowed or not. */
static void iterate(amp_scaler *s, rig *r, bool overflow, amp_step_report *rep) {
    const float scale = amp_scaler_scale(s);
    set_grad(r, 0, overflow ? INFINITY : scale * 0.25f);
    CHECK_EQ_INT(amp_scaler_step(s, r->a, rep), AMP_OK);
    CHECK(rep->skipped == overflow && rep->reason == (overflow ? AMP_SKIP_FOUND_INF : AMP_SKIP_NONE));
}

void test_scaler_hysteresis(void) {
    /* Hand-traced from other_mixed_precision_systems.md 2.2 (DeepSpeed) and 3.2 (Megatron) with
     * hysteresis 2, interval 3, growth 2, backoff 0.5, from 1024; O = overflow, C = clean. */
    static const bool events[11] = {1, 1, 0, 1, 0, 0, 0, 1, 0, 1, 1}; /* O O C O C C C O C O O */
    static const struct {
        amp_hysteresis_mode mode;
        float scale[11];
        int32_t hyst[11];
        int absorbed;
    } want[3] = {
        /* refilled only on growth: the first overflow after a growth (or the start) is absorbed */
        {AMP_HYSTERESIS_DEEPSPEED,
         {1024, 512, 512, 256, 256, 256, 512, 512, 512, 256, 128},
         {1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1},
         2},
        /* refilled by every clean update: only two overflows in a row back off */
        {AMP_HYSTERESIS_DEEPSPEED_CONSECUTIVE,
         {1024, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 512},
         {1, 1, 2, 1, 2, 2, 2, 1, 2, 1, 1},
         4},
        /* Megatron: DeepSpeed's scales, the tracker keeps counting down */
        {AMP_HYSTERESIS_MEGATRON,
         {1024, 512, 512, 256, 256, 256, 512, 512, 512, 256, 128},
         {1, 0, 0, -1, -1, -1, 2, 1, 1, 0, -1},
         2},
    };
    static const int32_t trackers[11] = {0, 0, 1, 0, 1, 2, 0, 0, 1, 0, 0};
    rig r;
    if (!rig_init(&r, AMP_F32)) {
        rig_free(&r);
        return;
    }
    for (int m = 0; m < 3; m++) {
        amp_scaler_config c = amp_scaler_default_config();
        c.init_scale = 1024.0f;
        c.growth_interval = 3;
        c.hysteresis = 2;
        c.hysteresis_mode = want[m].mode;
        amp_scaler *s = new_scaler(&c);
        if (!s) break;
        for (int i = 0; i < 11; i++) {
            amp_step_report rep;
            iterate(s, &r, events[i], &rep); /* an absorbed overflow still skips the step */
            CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
            amp_scaler_stats st;
            amp_scaler_get_stats(s, &st);
            CHECK_MSG(amp_scaler_get_scale(s) == want[m].scale[i] && st.hysteresis_tracker == want[m].hyst[i] &&
                          amp_scaler_get_growth_tracker(s) == trackers[i],
                      "mode %d update %d: scale %g hysteresis %d tracker %d; want %g %d %d", m, i,
                      (double)amp_scaler_get_scale(s), st.hysteresis_tracker, amp_scaler_get_growth_tracker(s),
                      (double)want[m].scale[i], want[m].hyst[i], trackers[i]);
        }
        amp_scaler_stats st;
        amp_scaler_get_stats(s, &st);
        CHECK(st.overflows_absorbed == want[m].absorbed && st.iterations == 11 && st.iterations_skipped == 6 &&
              st.steps_skipped == 6 && st.steps_taken == 5 && st.consecutive_skipped == 2);
        /* the hysteresis tracker survives a save and load */
        amp_scaler_state sd;
        amp_scaler_state_dict(s, &sd);
        CHECK(sd.hysteresis_tracker == want[m].hyst[10] && sd.overflows_absorbed == want[m].absorbed);
        amp_scaler_free(s);
    }
    /* hysteresis 3, consecutive: two overflows in a row absorbed, the third backs off */
    amp_scaler_config c = amp_scaler_default_config();
    c.init_scale = 64.0f;
    c.hysteresis = 3;
    c.hysteresis_mode = AMP_HYSTERESIS_DEEPSPEED_CONSECUTIVE;
    amp_scaler *s = new_scaler(&c);
    if (s) {
        static const bool ev[6] = {1, 1, 0, 1, 1, 1};
        static const float sc[6] = {64, 64, 64, 64, 64, 32};
        for (int i = 0; i < 6; i++) {
            amp_step_report rep;
            iterate(s, &r, ev[i], &rep);
            CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
            CHECK_MSG(amp_scaler_get_scale(s) == sc[i], "H=3 update %d: %g", i, (double)amp_scaler_get_scale(s));
        }
        amp_scaler_free(s);
    }
    /* hysteresis 1 is PyTorch */
    c = amp_scaler_default_config();
    c.hysteresis = 1;
    s = new_scaler(&c);
    if (s) {
        amp_step_report rep;
        iterate(s, &r, true, &rep);
        CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
        CHECK(amp_scaler_get_scale(s) == 32768.0f);
        amp_scaler_free(s);
    }
    rig_free(&r);
}

void test_scaler_min_max_floor(void) {
    rig r;
    if (!rig_init(&r, AMP_F32)) {
        rig_free(&r);
        return;
    }
    amp_scaler_config c = amp_scaler_default_config();
    c.init_scale = 1024.0f;
    c.growth_interval = 1;
    c.min_scale = 256.0f;
    c.max_scale = 4096.0f;
    c.floor_patience = 2;
    amp_scaler *s = new_scaler(&c);
    if (!s) {
        rig_free(&r);
        return;
    }
    /* growth clamped at max_scale, backoff at min_scale; the floor error after two skipped updates at
     * the floor in a row, repeated while it lasts, reset by a clean update */
    static const bool ev[10] = {0, 0, 0, 1, 1, 1, 1, 1, 0, 1};
    static const float sc[10] = {2048, 4096, 4096, 2048, 1024, 512, 256, 256, 512, 256};
    int floor_errors = 0;
    for (int i = 0; i < 10; i++) {
        amp_step_report rep;
        iterate(s, &r, ev[i], &rep);
        const int code = amp_scaler_update(s);
        if (code == AMP_ERR_SCALE_FLOOR) floor_errors++;
        CHECK_MSG(amp_scaler_get_scale(s) == sc[i], "update %d: scale %g, want %g", i, (double)amp_scaler_get_scale(s),
                  (double)sc[i]);
    }
    CHECK_EQ_INT(floor_errors, 0); /* the streak was 1 at most: 256 reached at update 6, overflow at 7 */
    amp_scaler_stats st;
    amp_scaler_get_stats(s, &st);
    CHECK_EQ_INT(st.floor_streak, 0); /* update 9 overflowed from 512 */
    for (int i = 0; i < 3; i++) {
        amp_step_report rep;
        iterate(s, &r, true, &rep);
        const int code = amp_scaler_update(s);
        amp_scaler_get_stats(s, &st);
        CHECK_EQ_INT(st.floor_streak, i + 1);
        CHECK_EQ_INT(code, i + 1 >= 2 ? AMP_ERR_SCALE_FLOOR : AMP_OK);
        CHECK(amp_scaler_get_scale(s) == 256.0f);
    }
    CHECK_EQ_INT(amp_scaler_status(s), AMP_ERR_SCALE_FLOOR);
    CHECK(strstr(amp_scaler_error(s), "Current loss scale already at minimum (256)") != NULL);
    CHECK(strstr(amp_scaler_error(s), "for 3 consecutive skipped steps") != NULL);
    amp_step_report rep;
    iterate(s, &r, false, &rep);
    CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
    amp_scaler_get_stats(s, &st);
    CHECK(st.floor_streak == 0 && st.consecutive_skipped == 0 && amp_scaler_get_scale(s) == 512.0f);
    amp_scaler_free(s);

    /* without min_scale the floor is the smallest positive float (and zero) */
    c = amp_scaler_default_config();
    c.init_scale = 0x1p-148f;
    c.floor_patience = 2;
    s = new_scaler(&c);
    if (s) {
        static const float fl[4] = {0x1p-149f, 0.0f, 0.0f, 0.0f};
        static const int fc[4] = {AMP_OK, AMP_OK, AMP_ERR_SCALE_FLOOR, AMP_ERR_SCALE_FLOOR};
        for (int i = 0; i < 4; i++) {
            amp_scaler_scale(s);
            set_grad(&r, 0, NAN);
            CHECK_EQ_INT(amp_scaler_step(s, r.a, &rep), AMP_OK);
            CHECK_EQ_INT(amp_scaler_update(s), fc[i]);
            CHECK(amp_scaler_get_scale(s) == fl[i]);
        }
        amp_scaler_free(s);
    }
    rig_free(&r);
}

void test_scaler_safe_mode(void) {
    rig r;
    if (!rig_init(&r, AMP_F32)) {
        rig_free(&r);
        return;
    }
    for (int safe = 0; safe < 2; safe++) {
        amp_scaler_config c = amp_scaler_default_config();
        c.safe = safe;
        amp_scaler *s = new_scaler(&c);
        if (!s) break;
        /* update(new_scale) below 1 (pytorch#99640): finite scaled gradients overflow when unscaled */
        amp_scaler_scale(s);
        CHECK_EQ_INT(amp_scaler_update_to(s, 0.0625f), AMP_OK);
        amp_scaler_scale(s);
        set_grad(&r, 0, 3e37f);
        set_grad(&r, 1, 1.0f);
        set_grad(&r, 2, 60000.0f); /* fp16: 960000 overflows fp16 when unscaled */
        const int64_t a0 = amp_optimizer_step_count(r.a), b0 = amp_optimizer_step_count(r.b);
        amp_step_report ra, rb;
        CHECK_EQ_INT(amp_scaler_step(s, r.a, &ra), AMP_OK);
        CHECK_EQ_INT(amp_scaler_step(s, r.b, &rb), AMP_OK);
        CHECK(isinf(grad_at(&r, 0, 0)) && isinf(grad_at(&r, 2, 0)) && grad_at(&r, 1, 0) == 16.0f);
        if (!safe) { /* PyTorch: nothing flagged, the optimizers step on inf gradients */
            CHECK(!ra.skipped && !rb.skipped && ra.found_inf == 0.0f);
            CHECK(amp_optimizer_step_count(r.a) == a0 + 1 && amp_optimizer_step_count(r.b) == b0 + 1);
            CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
            CHECK(amp_scaler_get_scale(s) == 0.0625f && amp_scaler_get_growth_tracker(s) == 1);
        } else {
            CHECK(ra.skipped && ra.reason == AMP_SKIP_NONFINITE_AFTER_UNSCALE && ra.found_inf == 1.0f);
            CHECK(rb.skipped && rb.reason == AMP_SKIP_NONFINITE_AFTER_UNSCALE);
            CHECK(amp_optimizer_step_count(r.a) == a0 && amp_optimizer_step_count(r.b) == b0);
            CHECK(amp_scaler_found_inf(s, r.a) == 1.0f);
            CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
            CHECK(amp_scaler_get_scale(s) == 0.03125f && amp_scaler_get_growth_tracker(s) == 0);
        }
        /* a zero scale: inv_scale is inf, finite gradients become inf or NaN (0 * inf) */
        amp_scaler_scale(s);
        CHECK_EQ_INT(amp_scaler_update_to(s, 0.0f), AMP_OK);
        amp_scaler_scale(s);
        set_grad(&r, 0, 0.0f);
        CHECK_EQ_INT(amp_scaler_unscale(s, r.a), AMP_OK);
        CHECK(isnan(grad_at(&r, 0, 0)));
        CHECK(amp_scaler_found_inf(s, r.a) == (safe ? 1.0f : 0.0f));
        CHECK_EQ_INT(amp_scaler_step(s, r.a, &ra), AMP_OK);
        CHECK(ra.skipped == (bool)safe && (!safe || ra.reason == AMP_SKIP_NONFINITE_AFTER_UNSCALE));
        CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
        /* an inf scaled gradient is reported as found_inf first, in both modes */
        amp_scaler_update_to(s, 1024.0f);
        amp_scaler_scale(s);
        set_grad(&r, 0, 1.0f);
        set_grad(&r, 1, INFINITY);
        set_grad(&r, 2, 1.0f);
        CHECK_EQ_INT(amp_scaler_step(s, r.b, &rb), AMP_OK);
        CHECK(rb.skipped && rb.reason == AMP_SKIP_FOUND_INF);
        CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
        amp_scaler_free(s);
    }
    CHECK_STR_EQ(amp_skip_reason_name(AMP_SKIP_NONE), "none");
    CHECK_STR_EQ(amp_skip_reason_name(AMP_SKIP_FOUND_INF), "found_inf");
    CHECK_STR_EQ(amp_skip_reason_name(AMP_SKIP_NONFINITE_AFTER_UNSCALE), "nonfinite_after_unscale");
    CHECK_STR_EQ(amp_skip_reason_name((amp_skip_reason)9), "invalid");
    rig_free(&r);
}

void test_scaler_fused_step(void) {
    rig r, q;
    if (!rig_init(&r, AMP_F32) || !rig_init(&q, AMP_F32)) {
        rig_free(&r);
        rig_free(&q);
        return;
    }
    amp_scaler *s = new_scaler(NULL), *t = new_scaler(NULL);
    if (!s || !t) goto done;
    /* a clean step: fused (r) and unscale-then-step (q) from the same scaled fp32 gradients */
    for (int e = 0; e < RIG_N; e++) {
        const float g = 65536.0f * (0.125f * (float)(e + 1) - 0.3f);
        memcpy((float *)r.p[0]->grad->data + e, &g, 4);
        memcpy((float *)q.p[0]->grad->data + e, &g, 4);
    }
    amp_scaler_scale(s);
    amp_scaler_scale(t);
    amp_step_report rf, rs;
    CHECK_EQ_INT(amp_scaler_step_fused(s, r.a, 0.0f, &rf), AMP_OK);
    CHECK_EQ_INT(amp_scaler_step(t, q.a, &rs), AMP_OK);
    CHECK(rf.fused && !rf.skipped && rf.clip_coef == 1.0f && isfinite(rf.grad_norm) && rf.grad_norm > 0);
    CHECK(!rs.fused && isnan(rs.grad_norm));
    CHECK(amp_optimizer_step_count(r.a) == 1 && amp_optimizer_step_count(q.a) == 1);
    CHECK(amp_scaler_get_stage(s, r.a) == AMP_STAGE_STEPPED);
    CHECK_MSG(memcmp(r.p[0]->data, q.p[0]->data, RIG_N * 4) == 0 && memcmp(r.p[0]->grad->data, q.p[0]->grad->data,
                                                                            RIG_N * 4) == 0,
              "fused and unfused steps differ on fp32 gradients");
    CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
    CHECK_EQ_INT(amp_scaler_update(t), AMP_OK);
    CHECK(amp_scaler_get_growth_tracker(s) == 1);

    /* an inf scaled gradient: skipped, gradients untouched, found_inf for the update */
    amp_scaler_scale(s);
    set_grad(&r, 0, 2.0f);
    ((float *)r.p[0]->grad->data)[3] = INFINITY;
    CHECK_EQ_INT(amp_scaler_step_fused(s, r.a, 1.0f, &rf), AMP_OK);
    CHECK(rf.skipped && rf.reason == AMP_SKIP_FOUND_INF && rf.found_inf == 1.0f && rf.fused);
    CHECK(amp_optimizer_step_count(r.a) == 1 && grad_at(&r, 0, 0) == 2.0f);
    CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
    CHECK(amp_scaler_get_scale(s) == 32768.0f);

    /* finite scaled gradients that overflow when unscaled: the fused pass refuses them even without
     * safe mode, and the scaler reports why and counts it as an overflow */
    amp_scaler_scale(s);
    CHECK_EQ_INT(amp_scaler_update_to(s, 0.0625f), AMP_OK);
    amp_scaler_scale(s);
    set_grad(&r, 0, 3e37f);
    CHECK_EQ_INT(amp_scaler_step_fused(s, r.a, 0.0f, &rf), AMP_OK);
    CHECK(rf.skipped && rf.reason == AMP_SKIP_NONFINITE_AFTER_UNSCALE && rf.found_inf == 1.0f);
    CHECK(amp_optimizer_step_count(r.a) == 1);
    CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
    CHECK(amp_scaler_get_scale(s) == 0.03125f);

    /* after an explicit unscale the fused pass runs with inv_scale 1, and clips */
    amp_scaler_update_to(s, 1024.0f);
    amp_scaler_scale(s);
    set_grad(&r, 0, 1024.0f * 3.0f);
    CHECK_EQ_INT(amp_scaler_unscale(s, r.a), AMP_OK);
    CHECK(grad_at(&r, 0, 0) == 3.0f);
    CHECK_EQ_INT(amp_scaler_step_fused(s, r.a, 1.0f, &rf), AMP_OK);
    CHECK(!rf.skipped && rf.fused && rf.clip_coef < 1.0f && fabs(rf.grad_norm - 3.0 * sqrt((double)RIG_N)) < 1e-6);
    CHECK(amp_optimizer_step_count(r.a) == 2);
    CHECK(fabsf(grad_at(&r, 0, 0) - 3.0f * rf.clip_coef) == 0.0f);
    CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
    /* ... and is not called at all when the unscale found inf */
    amp_scaler_scale(s);
    set_grad(&r, 0, NAN);
    CHECK_EQ_INT(amp_scaler_unscale(s, r.a), AMP_OK);
    CHECK_EQ_INT(amp_scaler_step_fused(s, r.a, 1.0f, &rf), AMP_OK);
    CHECK(rf.skipped && !rf.fused && rf.reason == AMP_SKIP_FOUND_INF && amp_optimizer_step_count(r.a) == 2);
    CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
    /* ... and skips when the gradients became non-finite after the unscale (here: set by hand) */
    amp_scaler_scale(s);
    set_grad(&r, 0, 1.0f);
    CHECK_EQ_INT(amp_scaler_unscale(s, r.a), AMP_OK);
    ((float *)r.p[0]->grad->data)[1] = INFINITY;
    CHECK_EQ_INT(amp_scaler_step_fused(s, r.a, 0.0f, &rf), AMP_OK);
    CHECK(rf.skipped && rf.fused && rf.reason == AMP_SKIP_NONFINITE_AFTER_UNSCALE && rf.found_inf == 1.0f);
    const float before = amp_scaler_get_scale(s);
    CHECK_EQ_INT(amp_scaler_update(s), AMP_OK);
    CHECK(amp_scaler_get_scale(s) == before * 0.5f);

    /* disabled: the fused pass with inv_scale 1 */
    amp_scaler_config c = amp_scaler_default_config();
    c.enabled = false;
    amp_scaler *d = new_scaler(&c);
    if (d) {
        set_grad(&r, 0, 0.5f);
        CHECK_EQ_INT(amp_scaler_step_fused(d, r.a, 0.0f, &rf), AMP_OK);
        CHECK(!rf.skipped && rf.fused && rf.scale == 1.0f && fabs(rf.grad_norm - 0.5 * sqrt((double)RIG_N)) < 1e-9);
        CHECK(amp_optimizer_step_count(r.a) == 3);
        set_grad(&r, 0, INFINITY);
        CHECK_EQ_INT(amp_scaler_step_fused(d, r.a, 0.0f, &rf), AMP_OK);
        CHECK(rf.skipped && amp_optimizer_step_count(r.a) == 3);
        amp_scaler_free(d);
    }
    amp_scaler_stats st;
    amp_scaler_get_stats(s, &st);
    CHECK(st.steps_taken == 2 && st.steps_skipped == 4);
done:
    amp_scaler_free(s);
    amp_scaler_free(t);
    rig_free(&r);
    rig_free(&q);
}

/* fp16 gradients: amp unscales them in fp16 (PyTorch refuses them in unscale_). Hand-derived cases:
 * the product is exact in fp32 and then rounded once to fp16, so small results land on the subnormal
 * grid of 2^-24 and the smallest ones vanish. */
void test_scaler_fp16_gradients(void) {
    static const struct {
        uint16_t in;
        float inv;
        uint16_t out;
    } cases[] = {
        {0x3C00, 0x1p-10f, 0x1400}, /* 1 -> 2^-10: normal, exact */
        {0x3C01, 0x1p-10f, 0x1401}, /* (1 + 2^-10) * 2^-10: exact, every bit kept */
        {0x1400, 0x1p-10f, 0x0010}, /* 2^-10 -> 2^-20 = 16 * 2^-24: an exact subnormal */
        {0x0800, 0x1p-10f, 0x0002}, /* 2^-13 -> 2^-23 = 2 * 2^-24 */
        {0x3C01, 0x1p-20f, 0x0010}, /* 2^-20 + 2^-30 = (16 + 2^-6) * 2^-24 -> 16: the low bits are lost */
        {0x0001, 0x1p-10f, 0x0000}, /* 2^-24 -> 2^-34: underflows to zero */
        {0x8001, 0x1p-1f, 0x8000},  /* -2^-25: a tie between -0 and -2^-24 -> even: -0 */
        {0x0003, 0x1p-1f, 0x0002},  /* 1.5 * 2^-24: a tie between 1 and 2 -> even: 2 */
        {0x5640, 0x1p-16f, 0x1640}, /* 100 = 1.5625 * 2^6 -> 1.5625 * 2^-10 */
        {0x7BFF, 2.0f, 0x7C00},     /* 65504 * 2 overflows to inf (flagged only in safe mode) */
        {0x7BFF, 1.0f, 0x7BFF},     /* inv_scale 1: untouched */
    };
    for (int isa = 0; isa < AMP_ISA_COUNT; isa++) {
        if (!test_isa_begin(isa)) continue;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            uint16_t x[20];
            for (int k = 0; k < 20; k++) x[k] = cases[i].in; /* vector body and tail */
            float found = 0.0f, after = 0.0f;
            amp_non_finite_check_and_unscale_safe(x, AMP_F16, 20, &found, &after, cases[i].inv);
            CHECK_MSG(x[0] == cases[i].out && x[19] == cases[i].out,
                      "%s case %zu: 0x%04x * %a -> 0x%04x/0x%04x, want 0x%04x", amp_isa_name((amp_isa)isa), i,
                      cases[i].in, (double)cases[i].inv, x[0], x[19], cases[i].out);
            CHECK(found == 0.0f && after == (cases[i].out == 0x7C00 ? 1.0f : 0.0f));
        }
    }
    test_isa_end();
}
