/* A text corpus: one file, or a directory's files concatenated in name order, as one token per byte
 * (the word vocabulary is words.c). The token ids go into one allocation: the training part is its
 * start and the held-out part its end. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data_internal.h"

enum { TEXT_PATH_MAX = 4096 };

/* A growable byte buffer from the caller's allocator. */
typedef struct text_buf {
    char *p;
    size_t len, cap;
} text_buf;

static bool text_buf_append(text_buf *b, const amp_allocator *a, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n) cap *= 2;
        char *p = a->alloc(cap, 16, a->user);
        if (!p) return false;
        if (b->len) memcpy(p, b->p, b->len);
        if (b->p) a->free(b->p, a->user);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return true;
}

static int text_cmp(const void *x, const void *y) {
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

static bool text_has_suffix(const char *s, const char *suffix) {
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Reads exactly `size` bytes of `path` into dst. */
static int text_read_file(const char *path, char *dst, int64_t size, char *err, size_t err_size) {
    FILE *f = fopen(path, "rb");
    if (!f) return amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    const size_t got = size ? fread(dst, 1, (size_t)size, f) : 0;
    const int bad = ferror(f);
    const int extra = fgetc(f);
    fclose(f);
    if (bad) return amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: read error", path);
    if ((int64_t)got != size || extra != EOF)
        return amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: changed size while being read", path);
    return AMP_OK;
}

/* The corpus's bytes, before mapping to ids. */
int text_gather(const char *path, const amp_allocator *a, uint8_t **bytes, int64_t *total, char *err, size_t err_size) {
    struct stat st;
    *bytes = NULL;
    *total = 0;
    if (stat(path, &st) != 0)
        return amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: not found (%s)", path, strerror(errno));
    if (S_ISREG(st.st_mode)) {
        if ((uint64_t)st.st_size > AMP_DATA_MAX_BYTES)
            return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: %lld bytes: more than the %llu-byte limit", path,
                              (long long)st.st_size, (unsigned long long)AMP_DATA_MAX_BYTES);
        if (st.st_size == 0) return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: empty", path);
        uint8_t *b = a->alloc((size_t)st.st_size, 64, a->user);
        if (!b) return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        const int rc = text_read_file(path, (char *)b, (int64_t)st.st_size, err, err_size);
        if (rc != AMP_OK) {
            a->free(b, a->user);
            return rc;
        }
        *bytes = b;
        *total = (int64_t)st.st_size;
        return AMP_OK;
    }
    if (!S_ISDIR(st.st_mode))
        return amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: not a regular file or directory", path);

    /* The directory's candidate names, NUL-separated, then sorted through a pointer array. */
    DIR *d = opendir(path);
    if (!d) return amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: cannot open directory: %s", path, strerror(errno));
    text_buf names = {0};
    size_t count = 0;
    int rc = AMP_OK;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        /* Hidden files, and the fortune package's index files (strfile's .dat, the .u8 links). */
        if (e->d_name[0] == '.' || text_has_suffix(e->d_name, ".dat") || text_has_suffix(e->d_name, ".u8")) continue;
        if (!text_buf_append(&names, a, e->d_name, strlen(e->d_name) + 1)) {
            rc = amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory listing the directory", path);
            break;
        }
        count++;
    }
    closedir(d);
    const char **list = NULL;
    if (rc == AMP_OK && count) {
        list = a->alloc(count * sizeof *list, 16, a->user);
        if (!list) rc = amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory listing the directory", path);
    }
    char full[TEXT_PATH_MAX];
    uint8_t *b = NULL;
    int64_t sum = 0;
    size_t files = 0;
    if (rc == AMP_OK && count) {
        const char *s = names.p;
        for (size_t i = 0; i < count; i++, s += strlen(s) + 1) list[i] = s;
        qsort(list, count, sizeof *list, text_cmp);
        /* Keep the regular files (stat follows links), summing their sizes. */
        for (size_t i = 0; i < count && rc == AMP_OK; i++) {
            const int n = snprintf(full, sizeof full, "%s/%s", path, list[i]);
            if (n < 0 || (size_t)n >= sizeof full) {
                rc = amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s/%s: path too long", path, list[i]);
            } else if (stat(full, &st) == 0 && S_ISREG(st.st_mode)) {
                if ((uint64_t)st.st_size > AMP_DATA_MAX_BYTES - (uint64_t)sum)
                    rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: more than the %llu-byte limit of text", path,
                                    (unsigned long long)AMP_DATA_MAX_BYTES);
                sum += (int64_t)st.st_size;
                list[files++] = list[i];
            }
        }
    }
    if (rc == AMP_OK && sum == 0)
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: empty (no text in its %zu regular files)", path, files);
    if (rc == AMP_OK) {
        b = a->alloc((size_t)sum, 64, a->user);
        if (!b) rc = amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld bytes", path, (long long)sum);
    }
    int64_t at = 0;
    for (size_t i = 0; i < files && rc == AMP_OK; i++) {
        snprintf(full, sizeof full, "%s/%s", path, list[i]);
        if (stat(full, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > sum - at) {
            rc = amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: changed while being read", full);
            break;
        }
        rc = text_read_file(full, (char *)b + at, (int64_t)st.st_size, err, err_size);
        at += (int64_t)st.st_size;
    }
    if (rc == AMP_OK && at != sum) rc = amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: changed while being read", path);
    if (list) a->free(list, a->user);
    if (names.p) a->free(names.p, a->user);
    if (rc != AMP_OK) {
        if (b) a->free(b, a->user);
        return rc;
    }
    *bytes = b;
    *total = sum;
    return AMP_OK;
}

void text_byte_vocab(const uint8_t *bytes, int64_t total, amp_text_corpus *c) {
    bool present[256] = {false};
    for (int64_t i = 0; i < total; i++) present[bytes[i]] = true;
    c->byte_count = 0;
    for (int v = 0; v < 256; v++) {
        c->byte_to_id[v] = -1;
        if (present[v]) {
            c->byte_to_id[v] = (int16_t)c->byte_count;
            c->id_to_byte[c->byte_count++] = (uint8_t)v;
        }
    }
    c->vocab_size = c->byte_count;
}

int text_alloc_tables(amp_text_corpus *c, const amp_allocator *a, int vocab_size, size_t text_bytes) {
    c->token_offset = a->alloc(((size_t)vocab_size + 1) * sizeof *c->token_offset, 64, a->user);
    c->token_text = a->alloc(text_bytes ? text_bytes : 1, 64, a->user);
    if (!c->token_offset || !c->token_text) return AMP_ERR_OUT_OF_MEMORY;
    /* The byte tokens first: one character each. */
    for (int i = 0; i < c->byte_count; i++) {
        c->token_offset[i] = (uint32_t)i;
        c->token_text[i] = (char)c->id_to_byte[i];
    }
    c->token_offset[c->byte_count] = (uint32_t)c->byte_count;
    return AMP_OK;
}

int text_check_args(const char *path, double holdout_fraction, const amp_allocator *alloc, amp_text_corpus *out,
                    amp_allocator *a, const char *fn, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (out) memset(out, 0, sizeof *out);
    if (!path || !out) return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "%s: NULL argument", fn);
    if (!(holdout_fraction >= 0.0 && holdout_fraction < 1.0))
        return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: holdout fraction %g is not in [0, 1)", fn,
                          holdout_fraction);
    if (!data_allocator(alloc, a))
        return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: allocator without alloc/free", fn);
    return AMP_OK;
}

int amp_text_corpus_load(const char *path, double holdout_fraction, const amp_allocator *alloc,
                         amp_text_corpus *out, char *err, size_t err_size) {
    amp_allocator a;
    int rc = text_check_args(path, holdout_fraction, alloc, out, &a, "amp_text_corpus_load", err, err_size);
    if (rc != AMP_OK) return rc;
    uint8_t *bytes;
    int64_t total;
    rc = text_gather(path, &a, &bytes, &total, err, err_size);
    if (rc != AMP_OK) return rc;
    const int64_t heldout = (int64_t)((double)total * holdout_fraction);
    const int64_t train = total - heldout;
    if (train < 2) {
        a.free(bytes, a.user);
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT,
                          "%s: too small: %lld bytes leave %lld for training (need at least 2)", path,
                          (long long)total, (long long)train);
    }
    amp_text_corpus c = {.allocator = a};
    text_byte_vocab(bytes, total, &c);
    c.train = a.alloc((size_t)total * sizeof *c.train, 64, a.user);
    if (!c.train || text_alloc_tables(&c, &a, c.vocab_size, (size_t)c.byte_count) != AMP_OK) {
        a.free(bytes, a.user);
        amp_text_corpus_free(&c);
        return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld tokens", path,
                          (long long)total);
    }
    for (int64_t i = 0; i < total; i++) c.train[i] = c.byte_to_id[bytes[i]];
    a.free(bytes, a.user);
    c.train_len = train;
    c.heldout = c.train + train;
    c.heldout_len = heldout;
    *out = c;
    return AMP_OK;
}

void amp_text_corpus_free(amp_text_corpus *c) {
    if (!c) return;
    /* train and heldout share one allocation, which starts at train. */
    if (c->allocator.free) {
        if (c->train) c->allocator.free(c->train, c->allocator.user);
        if (c->token_offset) c->allocator.free(c->token_offset, c->allocator.user);
        if (c->token_text) c->allocator.free(c->token_text, c->allocator.user);
    }
    memset(c, 0, sizeof *c);
}

int64_t amp_text_corpus_bytes(const amp_text_corpus *c, const int32_t *ids, int64_t n) {
    if (!c || !ids || !c->token_offset) return 0;
    int64_t sum = 0;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < c->vocab_size) sum += c->token_offset[ids[i] + 1] - c->token_offset[ids[i]];
    return sum;
}

int amp_text_corpus_batch(const amp_text_corpus *c, bool heldout, const int64_t *starts, int64_t n,
                          int64_t seq_len, int32_t *x, int32_t *y) {
    if (!c || (n > 0 && (!starts || !x || !y))) return AMP_ERR_NULL_POINTER;
    if (n < 0 || seq_len <= 0) return AMP_ERR_INVALID_ARGUMENT;
    const int32_t *tok = heldout ? c->heldout : c->train;
    const int64_t len = heldout ? c->heldout_len : c->train_len;
    for (int64_t b = 0; b < n; b++)
        if (starts[b] < 0 || seq_len >= len || starts[b] > len - seq_len - 1) return AMP_ERR_INVALID_ARGUMENT;
    for (int64_t b = 0; b < n; b++) {
        const int32_t *s = tok + starts[b];
        for (int64_t t = 0; t < seq_len; t++) {
            x[b * seq_len + t] = s[t];
            y[b * seq_len + t] = s[t + 1];
        }
    }
    return AMP_OK;
}
