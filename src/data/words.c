/* A word vocabulary on top of a byte-level text corpus: the most frequent words of the training part
 * become tokens, the rest of the text stays bytes. This gives language models the large vocabulary
 * (thousands of classes) under which a wrong class's share of the loss gradient, p / tokens, falls
 * below fp16's smallest subnormal: the situation loss scaling was invented for.
 *
 * Segmentation (the same for counting and tokenizing): at each position, a space followed by ASCII
 * letters is one candidate (" the"), letters not after a space are one ("The" at a line start), and
 * every other byte is a segment of its own. Counting uses a hash table (open addressing, FNV-1a) over
 * the candidates' bytes in place. */
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"

typedef struct word_slot {
    uint32_t off, len; /* the candidate's first occurrence in the corpus; len 0: empty slot */
    uint32_t count;
    int32_t id; /* its token id, -1 when it did not make the vocabulary */
} word_slot;

typedef struct word_table {
    word_slot *slots;
    uint64_t mask;
    const uint8_t *bytes;
} word_table;

/* A vocabulary entry while choosing: self-contained, so qsort needs no context. */
typedef struct word_rank {
    const uint8_t *p;
    uint32_t len, count;
    uint64_t slot;
} word_rank;

static bool is_letter(uint8_t b) { return (uint8_t)((b | 32) - 'a') < 26; }

/* The segment starting at i (< hi): sets *end and returns whether it is a word candidate. */
static bool next_segment(const uint8_t *b, int64_t i, int64_t hi, int64_t *end) {
    int64_t j;
    if (b[i] == ' ' && i + 1 < hi && is_letter(b[i + 1])) {
        j = i + 1;
    } else if (is_letter(b[i])) {
        j = i;
    } else {
        *end = i + 1;
        return false;
    }
    while (j < hi && is_letter(b[j])) j++;
    *end = j;
    return j - i <= AMP_TEXT_MAX_WORD_BYTES;
}

static uint64_t word_hash(const uint8_t *p, int64_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The slot of bytes[off, off + len): the matching one, or the empty one where it would go. */
static uint64_t word_find(const word_table *t, int64_t off, int64_t len) {
    const uint8_t *p = t->bytes + off;
    uint64_t s = word_hash(p, len) & t->mask;
    for (;;) {
        const word_slot *w = &t->slots[s];
        if (w->len == 0 || (w->len == (uint32_t)len && memcmp(t->bytes + w->off, p, (size_t)len) == 0)) return s;
        s = (s + 1) & t->mask;
    }
}

/* The token id of a candidate, -1 when it is not in the vocabulary. */
static int32_t word_id(const word_table *t, int64_t off, int64_t len) {
    const word_slot *w = &t->slots[word_find(t, off, len)];
    return w->len ? w->id : -1;
}

static int rank_cmp(const void *x, const void *y) {
    const word_rank *a = x, *b = y;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    const uint32_t n = a->len < b->len ? a->len : b->len;
    const int c = memcmp(a->p, b->p, n);
    if (c) return c;
    return a->len < b->len ? -1 : a->len > b->len;
}

/* Tokenizes bytes[lo, hi) into out; returns the number of tokens. */
static int64_t word_tokenize(const word_table *t, const amp_text_corpus *c, int64_t lo, int64_t hi, int32_t *out) {
    const uint8_t *b = t->bytes;
    int64_t n = 0;
    for (int64_t i = lo, end; i < hi; i = end) {
        if (next_segment(b, i, hi, &end)) {
            const int32_t id = word_id(t, i, end - i);
            if (id >= 0) {
                out[n++] = id;
                continue;
            }
            if (b[i] == ' ' && end - i > 1) {
                const int32_t bare = word_id(t, i + 1, end - i - 1);
                if (bare >= 0) {
                    out[n++] = c->byte_to_id[' '];
                    out[n++] = bare;
                    continue;
                }
            }
        }
        for (int64_t k = i; k < end; k++) out[n++] = c->byte_to_id[b[k]];
    }
    return n;
}

int amp_text_corpus_load_words(const char *path, double holdout_fraction, int max_words, const amp_allocator *alloc,
                               amp_text_corpus *out, char *err, size_t err_size) {
    static const char fn[] = "amp_text_corpus_load_words";
    amp_allocator a;
    int rc = text_check_args(path, holdout_fraction, alloc, out, &a, fn, err, err_size);
    if (rc != AMP_OK) return rc;
    if (max_words < 1 || max_words > AMP_TEXT_MAX_WORDS)
        return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: %d words is not in [1, %d]", fn, max_words,
                          AMP_TEXT_MAX_WORDS);
    uint8_t *bytes;
    int64_t total;
    rc = text_gather(path, &a, &bytes, &total, err, err_size);
    if (rc != AMP_OK) return rc;
    const int64_t heldout_bytes = (int64_t)((double)total * holdout_fraction);
    const int64_t train_bytes = total - heldout_bytes;

    amp_text_corpus c = {.allocator = a};
    text_byte_vocab(bytes, total, &c);
    word_table t = {.bytes = bytes};
    word_rank *ranks = NULL;

    /* The table holds every distinct candidate of the training part: at most one per candidate. */
    int64_t candidates = 0;
    for (int64_t i = 0, end; i < train_bytes; i = end) candidates += next_segment(bytes, i, train_bytes, &end);
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)candidates) cap *= 2;
    t.mask = cap - 1;
    t.slots = a.alloc(cap * sizeof *t.slots, 64, a.user);
    if (!t.slots) goto oom;
    memset(t.slots, 0, cap * sizeof *t.slots);
    int64_t distinct = 0;
    for (int64_t i = 0, end; i < train_bytes; i = end) {
        if (!next_segment(bytes, i, train_bytes, &end)) continue;
        word_slot *w = &t.slots[word_find(&t, i, end - i)];
        if (w->len == 0) {
            *w = (word_slot){.off = (uint32_t)i, .len = (uint32_t)(end - i), .id = -1};
            distinct++;
        }
        w->count++;
    }

    /* Rank the words seen at least twice; keep the first max_words. */
    ranks = a.alloc((size_t)(distinct ? distinct : 1) * sizeof *ranks, 64, a.user);
    if (!ranks) goto oom;
    int64_t kept = 0;
    for (uint64_t s = 0; s < cap; s++)
        if (t.slots[s].count >= 2)
            ranks[kept++] = (word_rank){bytes + t.slots[s].off, t.slots[s].len, t.slots[s].count, s};
    qsort(ranks, (size_t)kept, sizeof *ranks, rank_cmp);
    if (kept > max_words) kept = max_words;
    size_t text_bytes = (size_t)c.byte_count;
    for (int64_t k = 0; k < kept; k++) {
        t.slots[ranks[k].slot].id = (int32_t)(c.byte_count + k);
        text_bytes += ranks[k].len;
    }
    c.vocab_size = c.byte_count + (int)kept;
    if (text_alloc_tables(&c, &a, c.vocab_size, text_bytes) != AMP_OK) goto oom;
    for (int64_t k = 0; k < kept; k++) {
        const uint32_t at = c.token_offset[c.byte_count + k];
        memcpy(c.token_text + at, ranks[k].p, ranks[k].len);
        c.token_offset[c.byte_count + k + 1] = at + ranks[k].len;
    }
    a.free(ranks, a.user);
    ranks = NULL;

    /* Never more tokens than bytes. */
    c.train = a.alloc((size_t)(total ? total : 1) * sizeof *c.train, 64, a.user);
    if (!c.train) goto oom;
    c.train_len = word_tokenize(&t, &c, 0, train_bytes, c.train);
    c.heldout = c.train + c.train_len;
    c.heldout_len = word_tokenize(&t, &c, train_bytes, total, c.heldout);
    a.free(t.slots, a.user);
    a.free(bytes, a.user);
    if (c.train_len < 2) {
        const long long tokens = (long long)c.train_len;
        amp_text_corpus_free(&c);
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT,
                          "%s: too small: %lld bytes leave %lld tokens for training (need at least 2)", path,
                          (long long)total, tokens);
    }
    *out = c;
    return AMP_OK;

oom:
    if (ranks) a.free(ranks, a.user);
    if (t.slots) a.free(t.slots, a.user);
    a.free(bytes, a.user);
    amp_text_corpus_free(&c);
    return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory building the word vocabulary", path);
}
