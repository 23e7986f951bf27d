/* A text corpus as BPE tokens (amp/tokenizer.h), encoded once and cached on disk; and the token
 * tables (each id's bytes) that BPE and shard corpora share.
 *
 * Cache file: "AMPBPE01", the 16-byte key, then little-endian uint64 train_len, heldout_len,
 * vocab_size, then train_len + heldout_len uint32 tokens, then a uint64 hash of those token bytes. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amp/threads.h"
#include "amp/tokenizer.h"
#include "data_internal.h"
#include "../core/alloc_internal.h"

static const char CACHE_MAGIC[8] = {'A', 'M', 'P', 'B', 'P', 'E', '0', '1'};
enum { CACHE_HEAD = 8 + 16 + 3 * 8 };

int text_token_tables(amp_text_corpus *c, const amp_allocator *a, const amp_tokenizer *t) {
    size_t total = 0;
    for (int i = 0; t && i < c->vocab_size; i++) {
        size_t len = 0;
        amp_tokenizer_token(t, (uint32_t)i, &len);
        total += len;
    }
    if (total > UINT32_MAX) return AMP_ERR_FORMAT;
    c->byte_count = 0;
    for (int v = 0; v < 256; v++) {
        c->byte_to_id[v] = -1;
        c->id_to_byte[v] = 0;
    }
    c->token_offset = a->alloc(((size_t)c->vocab_size + 1) * sizeof *c->token_offset, 64, a->user);
    c->token_text = a->alloc(total ? total : 1, 64, a->user);
    if (!c->token_offset || !c->token_text) return AMP_ERR_OUT_OF_MEMORY;
    size_t at = 0;
    for (int i = 0; i < c->vocab_size; i++) {
        c->token_offset[i] = (uint32_t)at;
        size_t len = 0;
        const uint8_t *tok = t ? amp_tokenizer_token(t, (uint32_t)i, &len) : NULL;
        if (tok) memcpy(c->token_text + at, tok, len);
        if (tok && len == 1) c->byte_to_id[tok[0]] = (int16_t)(i < INT16_MAX ? i : -1);
        at += len;
    }
    c->token_offset[c->vocab_size] = (uint32_t)at;
    return AMP_OK;
}

const char *amp_token_cache_default_dir(char *buf, size_t size) {
    const char *env = getenv("AMP_CACHE_DIR"), *home = getenv("HOME");
    int n = -1;
    if (env && env[0]) n = snprintf(buf, size, "%s", env);
    else if (home && home[0]) n = snprintf(buf, size, "%s/.cache/amp", home);
    return n >= 0 && (size_t)n < size ? buf : NULL;
}

/* ---- the key: two 64-bit lanes over the inputs ---- */

typedef struct {
    uint64_t a, b;
} key128;

static void key_add(key128 *k, const void *data, size_t n) {
    const uint8_t *p = data;
    k->a ^= n, k->b += n * 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = 0;
        const size_t m = n - i < 8 ? n - i : 8;
        memcpy(&w, p + i, m); /* little-endian hosts (amp's build targets) */
        k->a = (k->a ^ w) * 0xff51afd7ed558ccdu;
        k->a ^= k->a >> 32;
        k->b = (k->b + w) * 0xc4ceb9fe1a85ec53u;
        k->b ^= k->b >> 29;
    }
}

static uint64_t hash_bytes(const void *data, size_t n) {
    key128 k = {0x243f6a8885a308d3u, 0x13198a2e03707344u};
    key_add(&k, data, n);
    return k.a ^ (k.b * 0x9e3779b97f4a7c15u);
}

static key128 corpus_key(const uint8_t *bytes, int64_t total, int64_t split, const amp_tokenizer *t, const char *pattern) {
    key128 k = {0x6a09e667f3bcc908u, 0xbb67ae8584caa73bu};
    key_add(&k, bytes, (size_t)total);
    key_add(&k, &split, sizeof split);
    const uint32_t vocab = amp_tokenizer_vocab_size(t);
    for (uint32_t r = 0; r < vocab; r++) {
        size_t len = 0;
        const uint8_t *tok = amp_tokenizer_token(t, r, &len);
        const uint64_t head[2] = {r, tok ? len : UINT64_MAX};
        key_add(&k, head, sizeof head);
        if (tok) key_add(&k, tok, len);
    }
    key_add(&k, pattern, strlen(pattern));
    return k;
}

/* ---- the cache file ---- */

static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Reads the cache file into c->train (allocated by a): true when it is whole, of this key and holds
 * only ids below the vocabulary. */
static bool cache_read(const char *path, key128 key, const amp_allocator *a, amp_text_corpus *c) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    uint8_t head[CACHE_HEAD], key_bytes[16], tail[8];
    put64(key_bytes, key.a), put64(key_bytes + 8, key.b);
    bool ok = fread(head, 1, sizeof head, f) == sizeof head && memcmp(head, CACHE_MAGIC, 8) == 0 &&
              memcmp(head + 8, key_bytes, 16) == 0;
    const uint64_t train = ok ? get64(head + 24) : 0, held = ok ? get64(head + 32) : 0, vocab = ok ? get64(head + 40) : 0;
    struct stat st;
    ok = ok && vocab == (uint64_t)c->vocab_size && train >= 2 && train <= AMP_DATA_MAX_BYTES && held <= AMP_DATA_MAX_BYTES &&
         fstat(fileno(f), &st) == 0 && (uint64_t)st.st_size == CACHE_HEAD + 4 * (train + held) + 8;
    uint8_t *body = ok ? a->alloc(4 * (size_t)(train + held) + 1, 64, a->user) : NULL;
    ok = ok && body && fread(body, 1, 4 * (size_t)(train + held), f) == 4 * (size_t)(train + held) &&
         fread(tail, 1, 8, f) == 8 && get64(tail) == hash_bytes(body, 4 * (size_t)(train + held));
    fclose(f);
    int32_t *ids = ok ? a->alloc((size_t)(train + held) * sizeof *ids + 1, 64, a->user) : NULL;
    ok = ok && ids;
    for (uint64_t i = 0; ok && i < train + held; i++) {
        const uint32_t v = (uint32_t)body[4 * i] | (uint32_t)body[4 * i + 1] << 8 | (uint32_t)body[4 * i + 2] << 16 |
                           (uint32_t)body[4 * i + 3] << 24;
        ok = v < vocab;
        ids[i] = (int32_t)v;
    }
    if (body) a->free(body, a->user);
    if (!ok) {
        if (ids) a->free(ids, a->user);
        return false;
    }
    c->train = ids;
    c->train_len = (int64_t)train;
    c->heldout = ids + train;
    c->heldout_len = (int64_t)held;
    return true;
}

/* mkdir -p: true when dir exists (as a directory) afterwards. */
static bool make_dirs(const char *dir) {
    char p[1024];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return false;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        mkdir(p, 0755);
        *s = '/';
    }
    mkdir(p, 0755);
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Writes the corpus's tokens to path through a temp file renamed over it; false on any failure (the
 * temp file removed). */
static bool cache_write(const char *path, key128 key, const amp_text_corpus *c) {
    const uint64_t n = (uint64_t)(c->train_len + c->heldout_len);
    uint8_t *buf = amp_malloc(CACHE_HEAD + 4 * n + 8);
    if (!buf) return false;
    memcpy(buf, CACHE_MAGIC, 8);
    put64(buf + 8, key.a), put64(buf + 16, key.b);
    put64(buf + 24, (uint64_t)c->train_len), put64(buf + 32, (uint64_t)c->heldout_len), put64(buf + 40, (uint64_t)c->vocab_size);
    uint8_t *body = buf + CACHE_HEAD;
    for (uint64_t i = 0; i < n; i++) {
        const uint32_t v = (uint32_t)c->train[i]; /* train and heldout are one array */
        body[4 * i] = (uint8_t)v, body[4 * i + 1] = (uint8_t)(v >> 8);
        body[4 * i + 2] = (uint8_t)(v >> 16), body[4 * i + 3] = (uint8_t)(v >> 24);
    }
    put64(body + 4 * n, hash_bytes(body, 4 * n));
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0;
    size_t left = CACHE_HEAD + 4 * n + 8;
    for (const uint8_t *p = buf; ok && left > 0;) {
        const ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        ok = w > 0;
        if (ok) p += w, left -= (size_t)w;
    }
    if (fd >= 0 && close(fd) != 0) ok = false;
    ok = ok && rename(tmp, path) == 0;
    if (!ok && fd >= 0) unlink(tmp);
    amp_free(buf);
    return ok;
}

/* ---- the loader ---- */

/* Encodes bytes[0, n) into ids (appending at *at). */
static int encode_part(const amp_tokenizer *t, const uint8_t *bytes, int64_t n, amp_tokens *v) {
    const int threads = amp_get_num_threads();
    return amp_tokenizer_encode_parallel(t, bytes, (size_t)n, threads, v);
}

static int bpe_encode(const char *path, const amp_tokenizer *t, const uint8_t *bytes, int64_t total, int64_t split,
                      const amp_allocator *a, amp_text_corpus *c, char *err, size_t err_size) {
    amp_tokens tr = {0}, ho = {0};
    int rc = encode_part(t, bytes, split, &tr);
    if (rc == AMP_OK) rc = encode_part(t, bytes + split, total - split, &ho);
    if (rc == AMP_OK && tr.len + ho.len > AMP_DATA_MAX_BYTES) rc = AMP_ERR_FORMAT;
    if (rc == AMP_OK) {
        c->train = a->alloc((tr.len + ho.len) * sizeof *c->train + 1, 64, a->user);
        if (!c->train) rc = AMP_ERR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; rc == AMP_OK && i < tr.len; i++) c->train[i] = (int32_t)tr.data[i];
    for (size_t i = 0; rc == AMP_OK && i < ho.len; i++) c->train[tr.len + i] = (int32_t)ho.data[i];
    if (rc == AMP_OK) {
        c->train_len = (int64_t)tr.len;
        c->heldout = c->train + tr.len;
        c->heldout_len = (int64_t)ho.len;
    }
    amp_tokens_free(&tr), amp_tokens_free(&ho);
    if (rc == AMP_ERR_FORMAT)
        return amp_err_fmt(err, err_size, rc, "%s: more than %llu tokens", path, (unsigned long long)AMP_DATA_MAX_BYTES);
    if (rc != AMP_OK) return amp_err_fmt(err, err_size, rc, "%s: encoding failed (%s)", path, amp_status_str(rc));
    return AMP_OK;
}

int amp_text_corpus_load_bpe(const char *path, double holdout_fraction, const char *ranks, const char *pattern,
                             const char *cache_dir, amp_token_cache_info *info, const amp_allocator *alloc,
                             amp_text_corpus *out, char *err, size_t err_size) {
    if (info) memset(info, 0, sizeof *info);
    amp_allocator a;
    int rc = text_check_args(path, holdout_fraction, alloc, out, &a, "amp_text_corpus_load_bpe", err, err_size);
    if (rc != AMP_OK) return rc;
    if (!ranks) return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_text_corpus_load_bpe: no rank file");
    const char *pat = amp_tokenizer_pattern_named(pattern ? pattern : "cl100k");
    if (!pat)
        return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "amp_text_corpus_load_bpe: pattern '%s' (gpt2 or cl100k)",
                           pattern);
    amp_tokenizer *t = NULL;
    if ((rc = amp_tokenizer_load(ranks, pat, &t, err, err_size)) != AMP_OK) return rc;
    uint8_t *bytes = NULL;
    int64_t total = 0;
    rc = text_gather(path, &a, &bytes, &total, err, err_size);
    amp_text_corpus c = {.allocator = a, .vocab_size = (int)amp_tokenizer_vocab_size(t)};
    if (rc == AMP_OK && (rc = text_token_tables(&c, &a, t)) != AMP_OK)
        rc = amp_err_fmt(err, err_size, rc, "%s: %s for the token tables", ranks,
                         rc == AMP_ERR_FORMAT ? "too many bytes" : "out of memory");
    const int64_t split = total - (int64_t)((double)total * holdout_fraction);
    char dir_buf[1024], file[1024] = "";
    const char *dir = cache_dir ? cache_dir : amp_token_cache_default_dir(dir_buf, sizeof dir_buf);
    key128 key = {0, 0};
    if (rc == AMP_OK && dir && dir[0]) {
        key = corpus_key(bytes, total, split, t, pat);
        snprintf(file, sizeof file, "%s/bpe-%016llx%016llx.tokens", dir, (unsigned long long)key.a,
                 (unsigned long long)key.b);
    }
    const bool reused = rc == AMP_OK && file[0] && cache_read(file, key, &a, &c);
    if (rc == AMP_OK && !reused) rc = bpe_encode(path, t, bytes, total, split, &a, &c, err, err_size);
    if (rc == AMP_OK && c.train_len < 2)
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: too small: %lld training tokens (need at least 2)", path,
                         (long long)c.train_len);
    if (rc == AMP_OK && info && file[0]) {
        info->status = reused ? AMP_TOKEN_CACHE_REUSED
                              : make_dirs(dir) && cache_write(file, key, &c) ? AMP_TOKEN_CACHE_WRITTEN
                                                                             : AMP_TOKEN_CACHE_UNWRITABLE;
        snprintf(info->path, sizeof info->path, "%s", file);
    } else if (rc == AMP_OK && file[0] && !reused && make_dirs(dir)) {
        cache_write(file, key, &c);
    }
    if (bytes) a.free(bytes, a.user);
    amp_tokenizer_free(t);
    if (rc != AMP_OK) {
        amp_text_corpus_free(&c);
        return rc;
    }
    *out = c;
    return AMP_OK;
}
