/* Vocabularies in checkpoint metadata (amp/vocab.h): hex per token, commas between tokens. */
#include <string.h>

#include "amp/status.h"
#include "amp/vocab.h"
#include "../core/alloc_internal.h"
#include "../core/status_internal.h"

static const char HEX[] = "0123456789abcdef";

int amp_vocab_to_meta(const uint32_t *offset, const void *text, int64_t size, char **out) {
    if (out) *out = NULL;
    if (!offset || !out || (!text && size > 0 && offset[size] > offset[0])) return AMP_ERR_NULL_POINTER;
    if (size < 1 || size > AMP_VOCAB_MAX_TOKENS) return AMP_ERR_INVALID_ARGUMENT;
    for (int64_t i = 0; i < size; i++)
        if (offset[i + 1] < offset[i]) return AMP_ERR_INVALID_ARGUMENT;
    const size_t bytes = (size_t)(offset[size] - offset[0]);
    char *s = amp_malloc(2 * bytes + (size_t)size + 1);
    if (!s) return AMP_ERR_OUT_OF_MEMORY;
    const uint8_t *t = text;
    size_t n = 0;
    for (int64_t i = 0; i < size; i++) {
        if (i > 0) s[n++] = ',';
        for (uint32_t j = offset[i]; j < offset[i + 1]; j++) s[n++] = HEX[t[j] >> 4], s[n++] = HEX[t[j] & 15];
    }
    s[n] = '\0';
    *out = s;
    return AMP_OK;
}

void amp_vocab_meta_free(char *meta) { amp_free(meta); }

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int amp_vocab_from_meta(const char *value, amp_vocab *out, char *err, size_t err_size) {
    if (out) memset(out, 0, sizeof *out);
    if (!value || !out) return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "vocabulary: NULL argument");
    int64_t tokens = 1, digits = 0;
    for (const char *p = value; *p; p++) {
        if (*p == ',') tokens++;
        else if (hex_digit(*p) < 0)
            return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "vocabulary: byte %lld is not a hex digit or a comma",
                               (long long)(p - value));
        else digits++;
        if (tokens > AMP_VOCAB_MAX_TOKENS)
            return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "vocabulary: more than %d tokens", AMP_VOCAB_MAX_TOKENS);
    }
    if (digits > 2 * (int64_t)UINT32_MAX)
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "vocabulary: more than 4 GiB of token text");
    out->offset = amp_malloc((size_t)(tokens + 1) * sizeof *out->offset);
    out->text = amp_malloc((size_t)digits / 2 + 1);
    if (!out->offset || !out->text) {
        amp_vocab_free(out);
        return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "vocabulary: out of memory");
    }
    int64_t id = 0;
    uint32_t n = 0;
    out->offset[0] = 0;
    for (const char *p = value;; p++) {
        if (*p == ',' || !*p) {
            out->offset[++id] = n;
            if (!*p) break;
            continue;
        }
        if (hex_digit(p[1]) < 0) {
            amp_vocab_free(out);
            return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "vocabulary: token %lld has an odd number of hex digits",
                               (long long)id);
        }
        out->text[n++] = (uint8_t)(hex_digit(p[0]) << 4 | hex_digit(p[1]));
        p++;
    }
    out->size = tokens;
    return AMP_OK;
}

int amp_vocab_from_tokens(const uint8_t *const *tokens, const size_t *lens, int64_t n, amp_vocab *out) {
    if (out) memset(out, 0, sizeof *out);
    if (!tokens || !lens || !out) return AMP_ERR_NULL_POINTER;
    if (n < 1 || n > AMP_VOCAB_MAX_TOKENS) return AMP_ERR_INVALID_ARGUMENT;
    uint64_t total = 0;
    for (int64_t i = 0; i < n; i++) total += tokens[i] ? lens[i] : 0;
    if (total > UINT32_MAX) return AMP_ERR_INVALID_ARGUMENT;
    out->offset = amp_malloc((size_t)(n + 1) * sizeof *out->offset);
    out->text = amp_malloc((size_t)total + 1);
    if (!out->offset || !out->text) {
        amp_vocab_free(out);
        return AMP_ERR_OUT_OF_MEMORY;
    }
    uint32_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        out->offset[i] = at;
        if (tokens[i] && lens[i]) memcpy(out->text + at, tokens[i], lens[i]);
        at += tokens[i] ? (uint32_t)lens[i] : 0;
    }
    out->offset[n] = at;
    out->size = n;
    return AMP_OK;
}

void amp_vocab_free(amp_vocab *v) {
    if (!v) return;
    amp_free(v->offset);
    amp_free(v->text);
    memset(v, 0, sizeof *v);
}

const uint8_t *amp_vocab_token(const amp_vocab *v, int64_t id, size_t *len) {
    if (len) *len = 0;
    if (!v || !v->offset || id < 0 || id >= v->size) return NULL;
    if (len) *len = v->offset[id + 1] - v->offset[id];
    return v->text + v->offset[id];
}

int64_t amp_vocab_encode(const amp_vocab *v, const void *text, size_t len, int32_t *out, int64_t cap) {
    if (!v || !v->offset || (!text && len) || (!out && len) || v->size > INT32_MAX) return -1;
    const uint8_t *b = text;
    int64_t n = 0;
    for (size_t i = 0; i < len;) {
        int64_t best = -1;
        size_t best_len = 0;
        for (int64_t id = 0; id < v->size; id++) {
            const size_t tl = v->offset[id + 1] - v->offset[id];
            if (tl > best_len && tl <= len - i && memcmp(v->text + v->offset[id], b + i, tl) == 0) best = id, best_len = tl;
        }
        if (best < 0 || n >= cap) return -1;
        out[n++] = (int32_t)best;
        i += best_len;
    }
    return n;
}
