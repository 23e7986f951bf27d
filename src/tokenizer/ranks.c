/* The rank table: building it, tiktoken's rank files (base64 of the token's bytes, a space, the rank),
 * the hash lookup from bytes to rank. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/alloc_internal.h"
#include "../core/status_internal.h"
#include "tokenizer_internal.h"

const char amp_tokenizer_pattern_gpt2[] =
    "'(?:[sdmt]|ll|ve|re)| ?\\p{L}++| ?\\p{N}++| ?[^\\s\\p{L}\\p{N}]++|\\s++$|\\s+(?!\\S)|\\s";
const char amp_tokenizer_pattern_cl100k[] =
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}++|\\p{N}{1,3}+| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*+|\\s++$|"
    "\\s*[\\r\\n]|\\s+(?!\\S)|\\s";

const char *amp_tokenizer_pattern_named(const char *name) {
    if (!name) return NULL;
    if (strcmp(name, "gpt2") == 0) return amp_tokenizer_pattern_gpt2;
    if (strcmp(name, "cl100k") == 0) return amp_tokenizer_pattern_cl100k;
    return NULL;
}

int32_t amp_tok_lookup(const amp_tokenizer *t, const uint8_t *s, size_t n) {
    const uint64_t h = amp_tok_hash(s, n);
    const uint32_t tag = (uint32_t)(h >> 32);
    for (uint64_t i = h & t->mask;; i = (i + 1) & t->mask) {
        const uint64_t e = t->slots[i];
        if (e == 0) return AMP_TOK_NONE;
        if ((uint32_t)(e >> 32) != tag) continue;
        const uint32_t r = (uint32_t)e - 1;
        const uint8_t *tok = t->blob + t->off[r];
        if (t->off[r + 1] - t->off[r] == n && memcmp(tok, s, n) == 0) return (int32_t)r;
    }
}

void amp_tokenizer_free(amp_tokenizer *t) {
    if (!t) return;
    pcre2_code_free(t->re);
    amp_free(t->blob), amp_free(t->off), amp_free(t->slots), amp_free(t->present), amp_free(t->pattern);
    amp_free(t);
}

uint32_t amp_tokenizer_vocab_size(const amp_tokenizer *t) { return t ? t->vocab : 0; }
uint32_t amp_tokenizer_n_tokens(const amp_tokenizer *t) { return t ? t->n_tokens : 0; }
const char *amp_tokenizer_pattern(const amp_tokenizer *t) { return t ? t->pattern : NULL; }

const uint8_t *amp_tokenizer_token(const amp_tokenizer *t, uint32_t rank, size_t *len) {
    if (!t || rank >= t->vocab || !t->present[rank]) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->off[rank + 1] - t->off[rank];
    return t->blob + t->off[rank];
}

/* Builds the table from tokens with ranks (ranks[i] < vocab, distinct). *what names a failure as
 * "token i ..." for the caller's message; returns the token index at fault or -1. */
static int64_t build(amp_tokenizer *t, const uint8_t *const *tok, const size_t *lens, const uint32_t *ranks,
                     uint32_t n, uint32_t vocab, const char **what) {
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (lens[i] > SIZE_MAX - total) return -2; /* no memory holds them */
        total += lens[i];
    }
    t->vocab = vocab, t->n_tokens = n;
    t->blob = amp_malloc(total ? total : 1);
    t->off = amp_calloc((size_t)vocab + 1, sizeof *t->off);
    t->present = amp_calloc(vocab ? vocab : 1, sizeof *t->present);
    uint64_t cap = 1024;
    while (cap < 2 * (uint64_t)n) cap *= 2;
    t->mask = cap - 1;
    t->slots = amp_malloc(cap * sizeof *t->slots);
    size_t *len_of = amp_calloc(vocab ? vocab : 1, sizeof *len_of);
    const uint8_t **src = amp_calloc(vocab ? vocab : 1, sizeof *src);
    if (!t->blob || !t->off || !t->present || !t->slots || !len_of || !src) {
        amp_free(len_of), amp_free(src);
        *what = "out of memory";
        return -2;
    }
    int64_t bad = -1;
    for (uint32_t i = 0; i < n && bad < 0; i++) {
        if (lens[i] == 0) *what = "is empty", bad = i;
        else if (t->present[ranks[i]]) *what = "repeats a rank", bad = i;
        else t->present[ranks[i]] = true, len_of[ranks[i]] = lens[i], src[ranks[i]] = tok[i];
    }
    size_t at = 0;
    for (uint32_t r = 0; r < vocab && bad < 0; r++) {
        t->off[r] = at;
        if (len_of[r]) memcpy(t->blob + at, src[r], len_of[r]);
        at += len_of[r];
    }
    t->off[vocab] = at;
    amp_free(len_of), amp_free(src);
    memset(t->slots, 0, cap * sizeof *t->slots);
    for (uint32_t i = 0; i < n && bad < 0; i++) {
        const uint32_t r = ranks[i];
        const uint8_t *s = t->blob + t->off[r];
        const size_t len = lens[i];
        if (amp_tok_lookup(t, s, len) != AMP_TOK_NONE) {
            *what = "repeats a token's bytes", bad = i;
            break;
        }
        const uint64_t hash = amp_tok_hash(s, len);
        uint64_t h = hash & t->mask;
        while (t->slots[h]) h = (h + 1) & t->mask;
        t->slots[h] = (hash >> 32) << 32 | (uint64_t)(r + 1);
    }
    for (int b = 0; b < 256 && bad < 0; b++) {
        const uint8_t byte = (uint8_t)b;
        if (amp_tok_lookup(t, &byte, 1) == AMP_TOK_NONE) *what = "lacks a single byte", bad = n + (int64_t)b;
    }
    return bad;
}

static int finish(amp_tokenizer *t, const char *pattern, amp_tokenizer **out, char *err, size_t err_size) {
    t->pattern = amp_strdup(pattern ? pattern : amp_tokenizer_pattern_cl100k);
    if (!t->pattern) {
        amp_tokenizer_free(t);
        return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    const int rc = amp_tok_compile(t->pattern, &t->re, err, err_size);
    if (rc != AMP_OK) {
        amp_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return AMP_OK;
}

int amp_tokenizer_create(const uint8_t *const *tokens, const size_t *lens, uint32_t n, const char *pattern,
                         amp_tokenizer **out, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!out || (n && (!tokens || !lens)))
        return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_tokenizer_create: NULL argument");
    *out = NULL;
    if (n > (uint32_t)INT32_MAX) return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "tokenizer: too many tokens");
    for (uint32_t i = 0; i < n; i++)
        if (!tokens[i] && lens[i])
            return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_tokenizer_create: token %u is NULL", i);
    amp_tokenizer *t = amp_calloc(1, sizeof *t);
    uint32_t *ranks = amp_malloc((n ? n : 1) * sizeof *ranks);
    if (!t || !ranks) {
        amp_free(t), amp_free(ranks);
        return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    for (uint32_t i = 0; i < n; i++) ranks[i] = i;
    const char *what = "";
    const int64_t bad = build(t, tokens, lens, ranks, n, n, &what);
    amp_free(ranks);
    if (bad != -1) {
        amp_tokenizer_free(t);
        if (bad == -2) return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        if (bad >= n) return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "tokenizer: no token is the byte 0x%02x", (unsigned)(bad - n));
        return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "tokenizer: token %" PRId64 " %s", bad, what);
    }
    return finish(t, pattern, out, err, err_size);
}

/* ---- rank files ---- */

static int b64_value(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decodes standard base64 (padded) s[0, n) into out (at least n / 4 * 3 bytes); -1 when malformed. */
static int64_t b64_decode(const char *s, size_t n, uint8_t *out) {
    if (n == 0 || n % 4 != 0) return -1;
    size_t pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        for (int j = 0; j < 4; j++) {
            const bool padded = i + 4 == n && j >= 4 - (int)pad;
            v[j] = padded ? (s[i + j] == '=' ? 0 : -1) : b64_value((unsigned char)s[i + j]);
            if (v[j] < 0) return -1;
        }
        const uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[k++] = (uint8_t)(w >> 16);
        if (!(i + 4 == n && pad == 2)) out[k++] = (uint8_t)(w >> 8);
        if (!(i + 4 == n && pad >= 1)) out[k++] = (uint8_t)w;
        /* the bits the padding drops must be zero (one spelling per byte string) */
        if (i + 4 == n && ((pad == 2 && (w & 0xffff)) || (pad == 1 && (w & 0xff)))) return -1;
    }
    return (int64_t)k;
}

static size_t b64_encode(const uint8_t *s, size_t n, char *out) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
        out[k++] = A[w >> 18 & 63], out[k++] = A[w >> 12 & 63];
        out[k++] = i + 1 < n ? A[w >> 6 & 63] : '=';
        out[k++] = i + 2 < n ? A[w & 63] : '=';
    }
    return k;
}

static int read_file(const char *path, char **buf, size_t *len, char *err, size_t err_size) {
    FILE *f = fopen(path, "rb");
    if (!f) return amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *b = amp_malloc(cap + 1);
    for (size_t got; b && (got = fread(b + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            char *nb = amp_realloc(b, 2 * cap + 1);
            if (!nb) amp_free(b);
            b = nb, cap *= 2;
        }
    }
    const int bad = ferror(f);
    fclose(f);
    if (!b) return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    if (bad) {
        amp_free(b);
        return amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: read error", path);
    }
    b[n] = '\0';
    *buf = b, *len = n;
    return AMP_OK;
}

/* Parses one line "BASE64 RANK" (no newline) into bytes (appended at blob + *at) and *rank. */
static const char *parse_line(const char *s, size_t n, uint8_t *blob, size_t *at, uint32_t *rank) {
    const char *sp = memchr(s, ' ', n);
    if (!sp) return "expected base64, a space and a rank";
    const int64_t k = b64_decode(s, (size_t)(sp - s), blob + *at);
    if (k <= 0) return "the token is not base64 of a non-empty byte string";
    const char *r = sp + 1, *end = s + n;
    if (r == end) return "no rank after the space";
    uint64_t v = 0;
    for (const char *p = r; p < end; p++) {
        if (*p < '0' || *p > '9') return "the rank is not a decimal number";
        v = v * 10 + (uint64_t)(*p - '0');
        if (v > (uint64_t)INT32_MAX - 1) return "the rank is too large";
    }
    *at += (size_t)k;
    *rank = (uint32_t)v;
    return NULL;
}

/* A rank file's lines, parsed: token i (of n) is toks[i][0, lens[i]) with rank ranks[i], from line
 * line_of[i]; vocab is one more than the largest rank. */
typedef struct {
    uint8_t *blob;
    const uint8_t **toks;
    size_t *lens, *line_of;
    uint32_t *ranks;
    uint32_t n, vocab;
} rank_lines;

static void rank_lines_free(rank_lines *r) {
    amp_free(r->blob), amp_free(r->toks), amp_free(r->lens), amp_free(r->line_of), amp_free(r->ranks);
}

/* Parses text[0, len) into r (allocated here); NULL, or what is wrong with line *bad_line (0: no line,
 * out of memory). */
static const char *parse_rank_lines(const char *text, size_t len, rank_lines *r, size_t *bad_line) {
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    r->blob = amp_malloc(len / 4 * 3 + 1); /* base64 is 4 characters for 3 bytes */
    r->toks = amp_malloc(lines * sizeof *r->toks);
    r->lens = amp_malloc(lines * sizeof *r->lens), r->line_of = amp_malloc(lines * sizeof *r->line_of);
    r->ranks = amp_malloc(lines * sizeof *r->ranks);
    *bad_line = 0;
    if (!r->blob || !r->toks || !r->lens || !r->line_of || !r->ranks) return "out of memory";
    size_t at = 0, line = 0;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - text) : len;
        const size_t next = e + 1;
        if (e > i && text[e - 1] == '\r') e--; /* CRLF, as Python's splitlines reads it */
        line++;
        if (e > i) { /* empty lines are skipped, as tiktoken's loader skips them */
            const size_t start = at;
            const char *what = parse_line(text + i, e - i, r->blob, &at, &r->ranks[r->n]);
            if (what) {
                *bad_line = line;
                return what;
            }
            if (r->n == (uint32_t)INT32_MAX) {
                *bad_line = line;
                return "more tokens than a rank file may hold";
            }
            r->toks[r->n] = r->blob + start; /* the blob is never moved */
            r->lens[r->n] = at - start, r->line_of[r->n] = line;
            if (r->ranks[r->n] + 1 > r->vocab) r->vocab = r->ranks[r->n] + 1;
            r->n++;
        }
        i = next;
    }
    return NULL;
}

int amp_tokenizer_load(const char *path, const char *pattern, amp_tokenizer **out, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!path || !out) return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_tokenizer_load: NULL argument");
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    int rc = read_file(path, &text, &len, err, err_size);
    if (rc != AMP_OK) return rc;
    rank_lines r = {0};
    size_t bad_line;
    const char *what = parse_rank_lines(text, len, &r, &bad_line);
    amp_free(text);
    amp_tokenizer *t = what ? NULL : amp_calloc(1, sizeof *t);
    if (!what && !t) what = "out of memory";
    if (what) {
        rc = bad_line ? amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s:%zu: %s", path, bad_line, what)
                      : amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: %s", path, what);
    } else if (r.n == 0) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: no tokens", path);
    } else if ((uint64_t)r.vocab > 2 * (uint64_t)r.n + 1024) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: ranks too sparse (the largest is %u for %u tokens)", path,
                         r.vocab - 1, r.n);
    } else {
        const int64_t bad = build(t, r.toks, r.lens, r.ranks, r.n, r.vocab, &what);
        if (bad == -2)
            rc = amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        else if (bad >= (int64_t)r.n)
            rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: no token is the byte 0x%02x", path, (unsigned)(bad - r.n));
        else if (bad >= 0)
            rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s:%zu: %s", path, r.line_of[bad], what);
    }
    rank_lines_free(&r);
    if (rc != AMP_OK) {
        amp_tokenizer_free(t);
        return rc;
    }
    return finish(t, pattern, out, err, err_size);
}

int amp_tokenizer_save(const amp_tokenizer *t, const char *path, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!t || !path) return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_tokenizer_save: NULL argument");
    const size_t bytes = t->off[t->vocab];
    const size_t cap = (bytes / 3 + 2 * (size_t)t->n_tokens) * 4 + 16 * (size_t)t->n_tokens + 1;
    char *buf = amp_malloc(cap);
    if (!buf) return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    size_t k = 0;
    for (uint32_t r = 0; r < t->vocab; r++) {
        if (!t->present[r]) continue;
        k += b64_encode(t->blob + t->off[r], t->off[r + 1] - t->off[r], buf + k);
        k += (size_t)sprintf(buf + k, " %" PRIu32 "\n", r);
    }
    const int rc = amp_tok_write_atomic(path, buf, k, NULL, 0, err, err_size);
    amp_free(buf);
    return rc;
}
