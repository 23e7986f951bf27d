/* Encoding and decoding: the pre-tokenizer (PCRE2), tiktoken's byte-pair merge, invalid UTF-8. */
#include <string.h>

#include "../core/alloc_internal.h"
#include "../core/status_internal.h"
#include "tokenizer_internal.h"

int amp_tokens_push(amp_tokens *v, uint32_t x) {
    if (v->len == v->cap) {
        const size_t cap = v->cap ? 2 * v->cap : 256;
        uint32_t *d = amp_realloc(v->data, cap * sizeof *d);
        if (!d) return AMP_ERR_OUT_OF_MEMORY;
        v->data = d, v->cap = cap;
    }
    v->data[v->len++] = x;
    return AMP_OK;
}

void amp_tokens_free(amp_tokens *v) {
    if (!v) return;
    amp_free(v->data);
    v->data = NULL, v->len = v->cap = 0;
}

void amp_tokenizer_bytes_free(uint8_t *bytes) { amp_free(bytes); }

/* Unicode's White_Space, which \s is in Rust's regex (tiktoken's engine). PCRE2's \s under UCP adds
 * U+180E (MONGOLIAN VOWEL SEPARATOR, a format character since Unicode 6.3): the pattern is compiled
 * with \s and \S spelled out as this set. */
static const char WHITE_SPACE[] = "\\t\\n\\x{0b}\\f\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"
                                  "\\x{202f}\\x{205f}\\x{3000}";

/* pattern with \s and \S replaced (\S inside a class has no spelling: NULL, *bad set); NULL, *bad
 * clear, when out of memory. */
static char *spell_white_space(const char *pattern, bool *bad) {
    const size_t n = strlen(pattern), ws = strlen(WHITE_SPACE);
    size_t count = 0;
    for (size_t i = 0; i + 1 < n; i++) count += pattern[i] == '\\';
    char *out = amp_malloc(n + count * (ws + 3) + 1);
    *bad = false;
    if (!out) return NULL;
    size_t k = 0;
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        const char c = pattern[i];
        if (c == '\\' && i + 1 < n) {
            const char e = pattern[++i];
            if (e == 's' || e == 'S') {
                if (in_class && e == 'S') {
                    *bad = true;
                    amp_free(out);
                    return NULL;
                }
                if (!in_class) out[k++] = '[';
                if (e == 'S') out[k++] = '^';
                memcpy(out + k, WHITE_SPACE, ws), k += ws;
                if (!in_class) out[k++] = ']';
            } else {
                out[k++] = c, out[k++] = e;
            }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            out[k++] = c;
            if (i + 1 < n && pattern[i + 1] == '^') out[k++] = pattern[++i];
            if (i + 1 < n && pattern[i + 1] == ']') out[k++] = pattern[++i]; /* a leading ] is literal */
            continue;
        }
        if (in_class && c == ']') in_class = false;
        out[k++] = c;
    }
    out[k] = '\0';
    return out;
}

int amp_tok_compile(const char *pattern, pcre2_code **re, char *err, size_t err_size) {
    bool bad;
    char *spelled = spell_white_space(pattern, &bad);
    if (!spelled)
        return bad ? amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "tokenizer: \\S inside a character class is not supported")
                   : amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    int code = 0;
    PCRE2_SIZE at = 0;
    /* DOLLAR_ENDONLY: `$` is the end of the text only, as in Rust's regex (PCRE's `$` would also
     * match before a final newline). */
    *re = pcre2_compile((PCRE2_SPTR)spelled, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY,
                        &code, &at, NULL);
    amp_free(spelled);
    if (!*re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "tokenizer: bad pattern (%s)", (const char *)msg);
    }
    pcre2_jit_compile(*re, PCRE2_JIT_COMPLETE); /* without JIT support, the interpreter runs it */
    return AMP_OK;
}

size_t amp_tok_utf8_valid_prefix(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        const uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint8_t lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) k = 1;
        else if (c == 0xe0) k = 2, lo = 0xa0;
        else if (c == 0xed) k = 2, hi = 0x9f;
        else if (c >= 0xe1 && c <= 0xef) k = 2;
        else if (c == 0xf0) k = 3, lo = 0x90;
        else if (c == 0xf4) k = 3, hi = 0x8f;
        else if (c >= 0xf1 && c <= 0xf3) k = 3;
        else return i;
        if (k >= n - i) return i; /* truncated */
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t j = 2; j <= k; j++)
            if (s[i + j] < 0x80 || s[i + j] > 0xbf) return i;
        i += k + 1;
    }
    return n;
}

int amp_tok_split(const pcre2_code *re, const uint8_t *s, size_t n, amp_tok_piece_fn fn, void *arg) {
    return amp_tok_split_range(re, s, n, 0, n, fn, arg, NULL);
}

int amp_tok_split_range(const pcre2_code *re, const uint8_t *s, size_t n, size_t from, size_t stop, amp_tok_piece_fn fn,
                        void *arg, size_t *end_at) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    pcre2_jit_stack *js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    int rc = md && mc && js ? AMP_OK : AMP_ERR_OUT_OF_MEMORY;
    if (rc == AMP_OK) pcre2_jit_stack_assign(mc, NULL, js);
    size_t at = from;
    while (rc == AMP_OK && at < stop) { /* NO_UTF_CHECK: the caller passes valid UTF-8 only */
        const int m = pcre2_match(re, s, n, at, PCRE2_NO_UTF_CHECK, md, mc);
        if (m == PCRE2_ERROR_NOMATCH) {
            at = n;
            break;
        }
        if (m < 0) {
            rc = m == PCRE2_ERROR_NOMEMORY || m == PCRE2_ERROR_JIT_STACKLIMIT ? AMP_ERR_OUT_OF_MEMORY : AMP_ERR_FORMAT;
            break;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        const size_t a = ov[0], b = ov[1];
        if (b > a) {
            rc = fn(arg, a, b);
            at = b;
        } else { /* an empty match: step over one character */
            at = a + 1;
            while (at < n && (s[at] & 0xc0) == 0x80) at++;
        }
    }
    pcre2_jit_stack_free(js);
    pcre2_match_context_free(mc);
    pcre2_match_data_free(md);
    if (end_at) *end_at = at;
    return rc;
}

/* ---- the merge ---- */

/* Pieces shorter than this take tiktoken's quadratic scan, longer ones its heap (same results). */
enum { SMALL_PIECE = 128 };

static inline uint32_t rank_of(const amp_tokenizer *t, const uint8_t *s, size_t n) {
    const int32_t r = amp_tok_lookup(t, s, n);
    return r == AMP_TOK_NONE ? UINT32_MAX : (uint32_t)r;
}

/* n parts: start[i] is where part i begins (start[n] = piece length); rank[i] is the rank of parts i
 * and i + 1 joined. Repeatedly joins the lowest-ranked pair, leftmost on ties. */
static int merge_small(const amp_tokenizer *t, const uint8_t *p, size_t len, amp_tokens *out) {
    uint32_t start[SMALL_PIECE + 1], rank[SMALL_PIECE];
    size_t n = len;
    for (size_t i = 0; i <= n; i++) start[i] = (uint32_t)i;
    for (size_t i = 0; i + 1 < n; i++) rank[i] = rank_of(t, p + i, 2);
    if (n) rank[n - 1] = UINT32_MAX;
    for (;;) {
        uint32_t best = UINT32_MAX;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < n; i++)
            if (rank[i] < best) best = rank[i], bi = i;
        if (best == UINT32_MAX) break;
        memmove(start + bi + 1, start + bi + 2, (n - bi - 1) * sizeof *start);
        memmove(rank + bi + 1, rank + bi + 2, (n - bi - 2) * sizeof *rank);
        n--;
        rank[n - 1] = UINT32_MAX;
        if (bi + 1 < n) rank[bi] = rank_of(t, p + start[bi], start[bi + 2] - start[bi]);
        if (bi > 0) rank[bi - 1] = rank_of(t, p + start[bi - 1], start[bi + 1] - start[bi - 1]);
    }
    for (size_t i = 0; i < n; i++) {
        const int rc = amp_tokens_push(out, (uint32_t)amp_tok_lookup(t, p + start[i], start[i + 1] - start[i]));
        if (rc != AMP_OK) return rc;
    }
    return AMP_OK;
}

typedef struct {
    uint32_t rank;
    uint32_t start;
} merge_t;

static inline bool merge_before(merge_t a, merge_t b) { return a.rank < b.rank || (a.rank == b.rank && a.start < b.start); }

static void heap_push(merge_t *h, size_t *n, merge_t m) {
    size_t i = (*n)++;
    while (i > 0 && merge_before(m, h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = m;
}

static merge_t heap_pop(merge_t *h, size_t *n) {
    const merge_t top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && merge_before(h[c + 1], h[c])) c++;
        if (!merge_before(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* tiktoken's _byte_pair_merge_large: parts as a linked list over byte positions (a part starting at
 * i ends at end[i]; prev[i] starts the part before), candidate merges in a heap, stale ones skipped. */
static int merge_large(const amp_tokenizer *t, const uint8_t *p, size_t len, amp_tokens *out) {
    if (len >= UINT32_MAX) return AMP_ERR_INVALID_ARGUMENT; /* positions are 32-bit */
    uint32_t *end = amp_malloc(len * sizeof *end), *prev = amp_malloc(len * sizeof *prev);
    uint32_t *next_rank = amp_malloc(len * sizeof *next_rank);
    merge_t *heap = amp_malloc(3 * len * sizeof *heap);
    int rc = end && prev && next_rank && heap ? AMP_OK : AMP_ERR_OUT_OF_MEMORY;
    size_t hn = 0;
    for (size_t i = 0; rc == AMP_OK && i < len; i++) {
        end[i] = (uint32_t)i + 1, prev[i] = i ? (uint32_t)i - 1 : UINT32_MAX;
        next_rank[i] = i + 1 < len ? rank_of(t, p + i, 2) : UINT32_MAX;
        if (next_rank[i] != UINT32_MAX) heap_push(heap, &hn, (merge_t){next_rank[i], (uint32_t)i});
    }
    while (rc == AMP_OK && hn) {
        const merge_t m = heap_pop(heap, &hn);
        if (m.rank != next_rank[m.start]) continue; /* stale */
        const uint32_t a = m.start, b = end[a], c = end[b];
        end[a] = c;
        next_rank[b] = UINT32_MAX;
        next_rank[a] = c < len ? rank_of(t, p + a, end[c] - a) : UINT32_MAX;
        if (next_rank[a] != UINT32_MAX) heap_push(heap, &hn, (merge_t){next_rank[a], a});
        if (c < len) prev[c] = a;
        if (a > 0) {
            const uint32_t q = prev[a];
            next_rank[q] = rank_of(t, p + q, c - q);
            if (next_rank[q] != UINT32_MAX) heap_push(heap, &hn, (merge_t){next_rank[q], q});
        }
        /* each pop adds at most two entries and removes one part: the heap never outgrows 3 * len */
    }
    for (size_t i = 0; rc == AMP_OK && i < len; i = end[i])
        rc = amp_tokens_push(out, (uint32_t)amp_tok_lookup(t, p + i, end[i] - i));
    amp_free(end), amp_free(prev), amp_free(next_rank), amp_free(heap);
    return rc;
}

int amp_tok_encode_piece(const amp_tokenizer *t, const uint8_t *piece, size_t n, amp_tokens *out) {
    const int32_t whole = amp_tok_lookup(t, piece, n);
    if (whole != AMP_TOK_NONE) return amp_tokens_push(out, (uint32_t)whole);
    return n <= SMALL_PIECE ? merge_small(t, piece, n, out) : merge_large(t, piece, n, out);
}

/* ---- encode, decode ---- */

typedef struct {
    const amp_tokenizer *t;
    const uint8_t *s;
    amp_tokens *out;
    size_t last_piece_len; /* tokens of the last piece, as tiktoken counts them */
} encode_state;

static int encode_one(void *arg, size_t a, size_t b) {
    encode_state *e = arg;
    const size_t before = e->out->len;
    const int rc = amp_tok_encode_piece(e->t, e->s + a, b - a, e->out);
    e->last_piece_len = e->out->len - before;
    return rc;
}

static bool all_space(const amp_tokenizer *t, uint32_t r) {
    size_t n;
    const uint8_t *s = amp_tokenizer_token(t, r, &n);
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\n' && s[i] != '\t') return false;
    return s != NULL;
}

int amp_tok_encode_invalid_tail(const amp_tokenizer *t, amp_tokens *out, size_t start, size_t last_piece_len,
                                const uint8_t *s, size_t valid, size_t n) {
    size_t k = out->len - start > 0 ? last_piece_len : 0;
    if (k > 0 && all_space(t, out->data[out->len - k]))
        while (k < out->len - start && all_space(t, out->data[out->len - k - 1])) k++;
    size_t bytes = n - valid;
    for (size_t i = out->len - k; i < out->len; i++) {
        size_t len;
        amp_tokenizer_token(t, out->data[i], &len);
        bytes += len;
    }
    uint8_t *tail = amp_malloc(bytes ? bytes : 1);
    if (!tail) return AMP_ERR_OUT_OF_MEMORY;
    size_t at = 0;
    for (size_t i = out->len - k; i < out->len; i++) {
        size_t len;
        const uint8_t *tok = amp_tokenizer_token(t, out->data[i], &len);
        memcpy(tail + at, tok, len);
        at += len;
    }
    memcpy(tail + at, s + valid, n - valid);
    out->len -= k;
    const int rc = amp_tok_encode_piece(t, tail, bytes, out);
    amp_free(tail);
    return rc;
}

int amp_tokenizer_encode(const amp_tokenizer *t, const void *text, size_t len, amp_tokens *out) {
    if (!t || !out || (len && !text)) return AMP_ERR_NULL_POINTER;
    const uint8_t *s = text;
    const size_t start = out->len;
    const size_t valid = amp_tok_utf8_valid_prefix(s, len);
    encode_state e = {t, s, out, 0};
    int rc = amp_tok_split(t->re, s, valid, encode_one, &e);
    if (rc == AMP_OK && valid < len) rc = amp_tok_encode_invalid_tail(t, out, start, e.last_piece_len, s, valid, len);
    if (rc != AMP_OK) out->len = start;
    return rc;
}

int amp_tokenizer_decode(const amp_tokenizer *t, const uint32_t *tokens, size_t n, uint8_t **out, size_t *out_len) {
    if (!t || !out || !out_len || (n && !tokens)) return AMP_ERR_NULL_POINTER;
    *out = NULL, *out_len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] >= t->vocab || !t->present[tokens[i]]) return AMP_ERR_INVALID_ARGUMENT;
        total += t->off[tokens[i] + 1] - t->off[tokens[i]];
    }
    uint8_t *b = amp_malloc(total ? total : 1);
    if (!b) return AMP_ERR_OUT_OF_MEMORY;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t len = t->off[tokens[i] + 1] - t->off[tokens[i]];
        memcpy(b + at, t->blob + t->off[tokens[i]], len);
        at += len;
    }
    *out = b, *out_len = total;
    return AMP_OK;
}
