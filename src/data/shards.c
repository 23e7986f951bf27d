/* A text corpus from llm.c's token shards: one file or a glob's files, concatenated in name order. */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "amp/tokenizer.h"
#include "data_internal.h"

bool amp_text_is_token_shards(const char *path) {
    if (!path) return false;
    if (strpbrk(path, "*?[")) return true;
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return false;
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    uint8_t m[4];
    const bool magic = fread(m, 1, 4, f) == 4 &&
                       ((uint32_t)m[0] | (uint32_t)m[1] << 8 | (uint32_t)m[2] << 16 | (uint32_t)m[3] << 24) == AMP_SHARD_MAGIC;
    fclose(f);
    return magic;
}

static int name_cmp(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

/* The tokens of the files `pattern` matches, in strcmp order of their names, appended to *v; per-file
 * token counts go to the caller through *max_stored (the largest vocabulary size a header stored). */
static int read_pattern(const char *pattern, const char *what, amp_tokens *v, uint32_t *max_stored, char *err,
                        size_t err_size) {
    glob_t g;
    memset(&g, 0, sizeof g);
    const int gr = glob(pattern, GLOB_NOSORT, NULL, &g);
    if (gr == GLOB_NOMATCH || (gr == 0 && g.gl_pathc == 0)) {
        globfree(&g);
        return amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: no %s shard matches", pattern, what);
    }
    if (gr != 0) {
        globfree(&g);
        return amp_err_fmt(err, err_size, gr == GLOB_NOSPACE ? AMP_ERR_OUT_OF_MEMORY : AMP_ERR_IO,
                           "%s: cannot list the %s shards", pattern, what);
    }
    qsort(g.gl_pathv, g.gl_pathc, sizeof *g.gl_pathv, name_cmp);
    int rc = AMP_OK;
    for (size_t i = 0; i < g.gl_pathc && rc == AMP_OK; i++) {
        uint32_t stored = 0;
        rc = amp_token_shard_read_vocab(g.gl_pathv[i], v, &stored, err, err_size);
        if (stored > *max_stored) *max_stored = stored;
        if (rc == AMP_OK && v->len > (size_t)AMP_DATA_MAX_BYTES)
            rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: more than %llu tokens", pattern,
                             (unsigned long long)AMP_DATA_MAX_BYTES);
    }
    globfree(&g);
    return rc;
}

/* The first token >= vocab among the files `pattern` matched (in the order read), named by file and
 * position within it; AMP_OK when there is none. v holds all of them; start is where they begin. */
static int check_ids(const char *pattern, const amp_tokens *v, size_t start, uint64_t vocab, char *err, size_t err_size) {
    size_t bad = SIZE_MAX;
    for (size_t i = start; i < v->len && bad == SIZE_MAX; i++)
        if (v->data[i] >= vocab) bad = i;
    if (bad == SIZE_MAX) return AMP_OK;
    /* Name the file: list the pattern again and count each file's tokens from its header. */
    glob_t g;
    memset(&g, 0, sizeof g);
    const char *file = pattern;
    size_t pos = bad - start;
    if (glob(pattern, GLOB_NOSORT, NULL, &g) == 0) {
        qsort(g.gl_pathv, g.gl_pathc, sizeof *g.gl_pathv, name_cmp);
        for (size_t i = 0; i < g.gl_pathc; i++) {
            struct stat st;
            const uint64_t body = stat(g.gl_pathv[i], &st) == 0 && st.st_size > 4 * AMP_SHARD_HEADER_INTS
                                      ? (uint64_t)st.st_size - 4 * AMP_SHARD_HEADER_INTS : 0;
            FILE *f = fopen(g.gl_pathv[i], "rb");
            uint8_t h[8] = {0};
            const bool ok = f && fread(h, 1, 8, f) == 8;
            if (f) fclose(f);
            const uint64_t count = ok ? body / (h[4] == 1 ? 2 : 4) : 0;
            if (pos < count || i + 1 == g.gl_pathc) {
                file = g.gl_pathv[i];
                break;
            }
            pos -= count;
        }
    }
    const int rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: token at position %zu is %u, not below the vocabulary size %llu",
                               file, pos, v->data[bad], (unsigned long long)vocab);
    globfree(&g);
    return rc;
}

/* The vocabulary size (see amp_text_corpus_load_shards) into *vocab, and c's tables from the ranks. */
static int shard_vocab(const amp_tokens *v, int64_t vocab_size, const amp_tokenizer *t, uint32_t max_stored,
                       uint64_t *vocab) {
    if (vocab_size > 0) *vocab = (uint64_t)vocab_size;
    else if (t) *vocab = amp_tokenizer_vocab_size(t);
    else if (max_stored > 0) *vocab = max_stored;
    else {
        uint32_t m = 0;
        for (size_t i = 0; i < v->len; i++)
            if (v->data[i] > m) m = v->data[i];
        *vocab = (uint64_t)m + 1;
    }
    return *vocab <= (uint64_t)INT32_MAX ? AMP_OK : AMP_ERR_FORMAT;
}

int amp_text_corpus_load_shards(const char *train_pattern, const char *val_pattern, double holdout_fraction,
                                int64_t vocab_size, const char *ranks, const amp_allocator *alloc,
                                amp_text_corpus *out, char *err, size_t err_size) {
    amp_allocator a;
    int rc = text_check_args(train_pattern, holdout_fraction, alloc, out, &a, "amp_text_corpus_load_shards", err, err_size);
    if (rc != AMP_OK) return rc;
    if (vocab_size < 0 || vocab_size > INT32_MAX)
        return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "amp_text_corpus_load_shards: vocabulary size %lld",
                           (long long)vocab_size);
    amp_tokenizer *t = NULL;
    if (ranks && (rc = amp_tokenizer_load(ranks, NULL, &t, err, err_size)) != AMP_OK) return rc;
    amp_tokens v = {0};
    uint32_t max_stored = 0;
    rc = read_pattern(train_pattern, "training", &v, &max_stored, err, err_size);
    const size_t n_train_files = v.len;
    if (rc == AMP_OK && val_pattern) rc = read_pattern(val_pattern, "held-out", &v, &max_stored, err, err_size);
    uint64_t vocab = 0;
    if (rc == AMP_OK && shard_vocab(&v, vocab_size, t, max_stored, &vocab) != AMP_OK)
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: vocabulary size %llu is too large", train_pattern,
                         (unsigned long long)vocab);
    if (rc == AMP_OK) rc = check_ids(train_pattern, &v, 0, vocab, err, err_size);
    if (rc == AMP_OK && val_pattern) rc = check_ids(val_pattern, &v, n_train_files, vocab, err, err_size);
    const int64_t total = (int64_t)v.len;
    const int64_t heldout = val_pattern ? total - (int64_t)n_train_files : (int64_t)((double)total * holdout_fraction);
    if (rc == AMP_OK && total - heldout < 2)
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: %lld training tokens (need at least 2)", train_pattern,
                         (long long)(total - heldout));
    amp_text_corpus c = {.allocator = a, .vocab_size = (int)vocab};
    if (rc == AMP_OK) rc = text_token_tables(&c, &a, t);
    if (rc == AMP_OK) {
        c.train = a.alloc((size_t)total * sizeof *c.train, 64, a.user);
        if (!c.train) rc = amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld tokens",
                                       train_pattern, (long long)total);
    } else if (rc == AMP_ERR_OUT_OF_MEMORY) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory for the token tables", train_pattern);
    }
    for (int64_t i = 0; rc == AMP_OK && i < total; i++) c.train[i] = (int32_t)v.data[i];
    amp_tokens_free(&v);
    amp_tokenizer_free(t);
    if (rc != AMP_OK) {
        amp_text_corpus_free(&c);
        return rc;
    }
    c.train_len = total - heldout;
    c.heldout = c.train + c.train_len;
    c.heldout_len = heldout;
    *out = c;
    return AMP_OK;
}
