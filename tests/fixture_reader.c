/* The fixture reader (fixture_reader.h): one pass over the lines, a small state machine (header,
 * then tensor headers each followed by exactly numel values). */
#include "fixture_reader.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_TOKENS = 4 + AMP_MAX_DIMS + 1 }; /* a header line's tokens; value lines are streamed */

typedef struct parser {
    const char *p, *end; /* the unread text */
    int line;            /* number of the line being parsed, from 1 */
    char *err;
    size_t err_size;
} parser;

#if defined(__GNUC__)
#define FIXTURE_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FIXTURE_PRINTF(a, b)
#endif

static int fail_at(parser *ps, const char *fmt, ...) FIXTURE_PRINTF(2, 3);

/* Records "line N: message" and returns AMP_ERR_FORMAT. */
static int fail_at(parser *ps, const char *fmt, ...) {
    if (ps->err && ps->err_size > 0) {
        int n = snprintf(ps->err, ps->err_size, "line %d: ", ps->line);
        if (n >= 0 && (size_t)n < ps->err_size) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(ps->err + n, ps->err_size - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return AMP_ERR_FORMAT;
}

/* ---- tokens ---- */

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* Splits line[0..len) (a copy, NUL-terminated, that this modifies) into at most max tokens.
 * Returns the count, or max + 1 when there are more. */
static int split(char *line, char **tok, int max) {
    int n = 0;
    char *s = line;
    for (;;) {
        while (is_space(*s)) s++;
        if (!*s) return n;
        if (n == max) return max + 1;
        tok[n++] = s;
        while (*s && !is_space(*s)) s++;
        if (*s) *s++ = '\0';
    }
}

/* A decimal integer in [lo, hi]: optional '-', then 1..10 digits, nothing else. */
static bool parse_int(const char *s, long long lo, long long hi, long long *out) {
    const char *d = s[0] == '-' ? s + 1 : s;
    size_t nd = strlen(d);
    if (nd == 0 || nd > 10) return false;
    for (size_t i = 0; i < nd; i++)
        if (d[i] < '0' || d[i] > '9') return false;
    long long v = strtoll(s, NULL, 10);
    if (v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool is_hex_digit(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* A C99 hex float: -?0x H+ (. H*)? p [+-]? D+, finite and exactly an fp32 value. */
static bool parse_hex_float(const char *s, float *out) {
    const char *c = s;
    if (*c == '-') c++;
    if (c[0] != '0' || (c[1] != 'x' && c[1] != 'X')) return false;
    c += 2;
    if (!is_hex_digit(*c)) return false;
    while (is_hex_digit(*c)) c++;
    if (*c == '.') {
        c++;
        while (is_hex_digit(*c)) c++;
    }
    if (*c != 'p' && *c != 'P') return false;
    c++;
    if (*c == '+' || *c == '-') c++;
    if (*c < '0' || *c > '9') return false;
    int exp_digits = 0;
    while (*c >= '0' && *c <= '9') c++, exp_digits++;
    if (*c || exp_digits > 5) return false;
    errno = 0;
    char *e = NULL;
    double d = strtod(s, &e);
    if (*e || !isfinite(d)) return false;   /* ERANGE underflow to 0 is caught below */
    float f = (float)d;
    if ((double)f != d) return false;       /* not an fp32 value (includes fp32 overflow) */
    if (f == 0.0f && errno == ERANGE) return false;
    *out = f;
    return true;
}

/* Whether fp32 value v is exactly a value of dtype. */
static bool representable(float v, amp_dtype dtype) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    switch (dtype) {
    case AMP_F32: return true;
    case AMP_BF16: return (bits & 0xFFFFu) == 0;
    case AMP_F16: {
        float back = amp_fp16_to_fp32(amp_fp16_from_fp32(v));
        uint32_t bb;
        memcpy(&bb, &back, sizeof bb);
        return bb == bits;
    }
    default: return false;
    }
}

/* Exactly f32, bf16 or f16 (the file's own names; no aliases). */
static bool parse_dtype(const char *s, amp_dtype *out) {
    if (!strcmp(s, "f32")) *out = AMP_F32;
    else if (!strcmp(s, "bf16")) *out = AMP_BF16;
    else if (!strcmp(s, "f16")) *out = AMP_F16;
    else return false;
    return true;
}

static bool valid_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n >= FIXTURE_MAX_NAME) return false;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == ':' || c == '-'))
            return false;
    }
    return true;
}

/* ---- lines ---- */

/* Copies the next line into buf (NUL-terminated, without '\n') and advances. Returns 1 for a line,
 * 0 at the end of the text, or AMP_ERR_FORMAT (too long, or a NUL byte). */
static int next_line(parser *ps, char *buf) {
    if (ps->p >= ps->end) return 0;
    ps->line++;
    const char *nl = memchr(ps->p, '\n', (size_t)(ps->end - ps->p));
    const char *stop = nl ? nl : ps->end;
    const size_t len = (size_t)(stop - ps->p);
    if (len > FIXTURE_MAX_LINE) return fail_at(ps, "line longer than %d bytes", FIXTURE_MAX_LINE);
    if (memchr(ps->p, '\0', len)) return fail_at(ps, "NUL byte");
    memcpy(buf, ps->p, len);
    buf[len] = '\0';
    ps->p = nl ? nl + 1 : ps->end;
    return 1;
}

static bool skippable(const char *line) {
    while (is_space(*line)) line++;
    return *line == '\0' || *line == '#';
}

/* Parses a tensor or itensor header from its tokens into t (no allocation). */
static int parse_tensor_header(parser *ps, fixture *f, char **tok, int n, fixture_tensor *t) {
    const bool is_int = !strcmp(tok[0], "itensor");
    if (!is_int && strcmp(tok[0], "tensor")) return fail_at(ps, "expected 'tensor' or 'itensor', got '%.32s'", tok[0]);
    const int first_dim = is_int ? 3 : 4; /* index of the first dimension token */
    if (n < first_dim) return fail_at(ps, "%s header: too few fields", tok[0]);
    memset(t, 0, sizeof *t);
    t->is_int = is_int;
    if (!valid_name(tok[1])) return fail_at(ps, "bad tensor name '%.32s'", tok[1]);
    for (int i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, tok[1])) return fail_at(ps, "duplicate tensor name '%s'", tok[1]);
    memcpy(t->name, tok[1], strlen(tok[1]) + 1);
    if (!is_int && !parse_dtype(tok[2], &t->dtype))
        return fail_at(ps, "unknown dtype '%.32s' (f32, bf16 or f16)", tok[2]);
    if (is_int) t->dtype = AMP_F32; /* unused */
    long long ndim;
    if (!parse_int(tok[first_dim - 1], 0, AMP_MAX_DIMS, &ndim))
        return fail_at(ps, "ndim '%.32s' is not an integer in [0, %d]", tok[first_dim - 1], AMP_MAX_DIMS);
    if (n != first_dim + ndim) return fail_at(ps, "ndim %lld but %d dimensions", ndim, n - first_dim);
    t->ndim = (int)ndim;
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        long long v;
        if (!parse_int(tok[first_dim + d], 1, FIXTURE_MAX_NUMEL, &v))
            return fail_at(ps, "dimension '%.32s' is not an integer in [1, %d]", tok[first_dim + d], FIXTURE_MAX_NUMEL);
        t->shape[d] = v;
        numel *= v; /* no overflow: numel <= FIXTURE_MAX_NUMEL before, v <= FIXTURE_MAX_NUMEL */
        if (numel > FIXTURE_MAX_NUMEL) return fail_at(ps, "more than %d elements", FIXTURE_MAX_NUMEL);
    }
    t->numel = numel;
    /* n values take at least 2n - 1 bytes ("0 0 ... 0") */
    if (numel > ((int64_t)(ps->end - ps->p) + 1) / 2)
        return fail_at(ps, "%lld elements cannot fit in the %lld bytes left", (long long)numel,
                       (long long)(ps->end - ps->p));
    return AMP_OK;
}

/* Parses the values on one line into t, from index *have. */
static int parse_values(parser *ps, char *line, fixture_tensor *t, int64_t *have) {
    char *s = line;
    for (;;) {
        while (is_space(*s)) s++;
        if (!*s) return AMP_OK;
        char *tok = s;
        while (*s && !is_space(*s)) s++;
        if (*s) *s++ = '\0';
        if (*have == t->numel)
            return fail_at(ps, "tensor %s: more than %lld values ('%.32s')", t->name, (long long)t->numel, tok);
        if (t->is_int) {
            long long v;
            if (!parse_int(tok, INT32_MIN, INT32_MAX, &v))
                return fail_at(ps, "tensor %s: '%.32s' is not an int32", t->name, tok);
            t->ints[(*have)++] = (int32_t)v;
        } else {
            float v;
            if (!parse_hex_float(tok, &v))
                return fail_at(ps, "tensor %s: '%.32s' is not a finite fp32 hex float", t->name, tok);
            if (!representable(v, t->dtype))
                return fail_at(ps, "tensor %s: %.32s is not exact in %s", t->name, tok, amp_dtype_name(t->dtype));
            t->values[(*have)++] = v;
        }
    }
}

static int parse(parser *ps, fixture *f) {
    char line[FIXTURE_MAX_LINE + 1];
    char *tok[MAX_TOKENS];
    int st = next_line(ps, line);
    if (st < 0) return st;
    if (st == 0) {
        ps->line = 1;
        return fail_at(ps, "empty file");
    }
    int n = split(line, tok, MAX_TOKENS);
    if (n != 4 || strcmp(tok[0], "amp-fixture")) return fail_at(ps, "expected 'amp-fixture 1 <model> <dtype>'");
    if (strcmp(tok[1], "1")) return fail_at(ps, "unsupported format version '%.16s' (this reader knows 1)", tok[1]);
    if (!valid_name(tok[2])) return fail_at(ps, "bad model name '%.32s'", tok[2]);
    memcpy(f->model, tok[2], strlen(tok[2]) + 1);
    if (!parse_dtype(tok[3], &f->dtype)) return fail_at(ps, "unknown dtype '%.32s' (f32, bf16 or f16)", tok[3]);

    fixture_tensor *cur = NULL; /* the tensor whose values are being read */
    int64_t have = 0;
    while ((st = next_line(ps, line)) == 1) {
        if (skippable(line)) continue;
        if (cur && have < cur->numel) {
            if ((st = parse_values(ps, line, cur, &have)) != AMP_OK) return st;
            continue;
        }
        cur = NULL;
        n = split(line, tok, MAX_TOKENS);
        if (n > MAX_TOKENS) return fail_at(ps, "too many fields for a tensor header");
        if (f->n_tensors == FIXTURE_MAX_TENSORS) return fail_at(ps, "more than %d tensors", FIXTURE_MAX_TENSORS);
        fixture_tensor t;
        if ((st = parse_tensor_header(ps, f, tok, n, &t)) != AMP_OK) return st;
        if (t.is_int) t.ints = malloc((size_t)t.numel * sizeof *t.ints);
        else t.values = malloc((size_t)t.numel * sizeof *t.values);
        if (!t.ints && !t.values) return AMP_ERR_OUT_OF_MEMORY;
        f->tensors[f->n_tensors] = t;
        cur = &f->tensors[f->n_tensors++];
        have = 0;
    }
    if (st < 0) return st;
    if (cur && have < cur->numel)
        return fail_at(ps, "end of file in tensor %s: %lld of %lld values", cur->name, (long long)have,
                       (long long)cur->numel);
    return AMP_OK;
}

int fixture_parse(const char *text, size_t len, fixture *out, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!out) return AMP_ERR_NULL_POINTER;
    memset(out, 0, sizeof *out);
    if (!text && len) return AMP_ERR_NULL_POINTER;
    parser ps = {.p = text, .end = text ? text + len : text, .line = 0, .err = err, .err_size = err_size};
    if (len > FIXTURE_MAX_BYTES) {
        ps.line = 1;
        fail_at(&ps, "input larger than %d bytes", FIXTURE_MAX_BYTES);
        return AMP_ERR_FORMAT;
    }
    int st = parse(&ps, out);
    if (st != AMP_OK) {
        if (st == AMP_ERR_OUT_OF_MEMORY && err && err_size) snprintf(err, err_size, "line %d: out of memory", ps.line);
        fixture_free(out);
    }
    return st;
}

int fixture_load(const char *path, fixture *out, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!out) return AMP_ERR_NULL_POINTER;
    memset(out, 0, sizeof *out);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        if (err && err_size) snprintf(err, err_size, "cannot open %s: %s", path, strerror(errno));
        return AMP_ERR_IO;
    }
    char *buf = malloc((size_t)FIXTURE_MAX_BYTES + 1);
    if (!buf) {
        fclose(fp);
        return AMP_ERR_OUT_OF_MEMORY;
    }
    const size_t len = fread(buf, 1, (size_t)FIXTURE_MAX_BYTES + 1, fp);
    const bool bad = ferror(fp) != 0;
    fclose(fp);
    int st;
    if (bad || len > FIXTURE_MAX_BYTES) {
        if (err && err_size)
            snprintf(err, err_size, "%s: %s", path, bad ? "read error" : "larger than FIXTURE_MAX_BYTES");
        st = AMP_ERR_IO;
    } else {
        st = fixture_parse(buf, len, out, err, err_size);
    }
    free(buf);
    return st;
}

void fixture_free(fixture *f) {
    if (!f) return;
    for (int i = 0; i < f->n_tensors; i++) {
        free(f->tensors[i].values);
        free(f->tensors[i].ints);
    }
    memset(f, 0, sizeof *f);
}

const fixture_tensor *fixture_find(const fixture *f, const char *name) {
    for (int i = 0; f && i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}
