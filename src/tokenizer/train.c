/* BPE training: unique pieces with their counts, pair counts updated incrementally on each merge (only
 * the words holding the merged pair are touched), the most frequent pair from a lazy max-heap. */
#include <string.h>

#include "../core/alloc_internal.h"
#include "../core/status_internal.h"
#include "tokenizer_internal.h"

/* A growable array of anything: len and cap count elements of size `size`. */
static bool grow(void **p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = amp_realloc(*p, c * size);
    if (!q) return false;
    *p = q, *cap = c;
    return true;
}

/* A map from byte strings to ids (the unique pieces, then the tokens' bytes). */
typedef struct {
    uint8_t *blob;
    size_t blob_len, blob_cap;
    size_t *off; /* id i: blob[off[i], off[i + 1]) */
    size_t n, off_cap;
    int32_t *slots;
    uint64_t mask;
} bytes_map;

static bool bmap_rehash(bytes_map *m, uint64_t cap) {
    int32_t *s = amp_malloc(cap * sizeof *s);
    if (!s) return false;
    memset(s, 0xff, cap * sizeof *s);
    for (size_t i = 0; i < m->n; i++) {
        uint64_t h = amp_tok_hash(m->blob + m->off[i], m->off[i + 1] - m->off[i]) & (cap - 1);
        while (s[h] >= 0) h = (h + 1) & (cap - 1);
        s[h] = (int32_t)i;
    }
    amp_free(m->slots);
    m->slots = s, m->mask = cap - 1;
    return true;
}

/* The id of s[0, n), added when new (*added set); -1 when out of memory. */
static int64_t bmap_get(bytes_map *m, const uint8_t *s, size_t n, bool *added) {
    if (m->n >= (size_t)INT32_MAX) return -1; /* ids are int32 */
    if (!m->slots || 2 * (m->n + 1) > m->mask + 1) {
        if (!bmap_rehash(m, m->slots ? 2 * (m->mask + 1) : 4096)) return -1;
        if (!m->off && !grow((void **)&m->off, &m->off_cap, 1, sizeof *m->off)) return -1;
        m->off[0] = 0;
    }
    uint64_t h = amp_tok_hash(s, n) & m->mask;
    for (; m->slots[h] >= 0; h = (h + 1) & m->mask) {
        const int32_t i = m->slots[h];
        if (m->off[i + 1] - m->off[i] == n && memcmp(m->blob + m->off[i], s, n) == 0) {
            *added = false;
            return i;
        }
    }
    if (!grow((void **)&m->blob, &m->blob_cap, m->blob_len + n, 1) ||
        !grow((void **)&m->off, &m->off_cap, m->n + 2, sizeof *m->off))
        return -1;
    memcpy(m->blob + m->blob_len, s, n);
    m->blob_len += n;
    m->off[m->n + 1] = m->blob_len;
    m->slots[h] = (int32_t)m->n;
    *added = true;
    return (int64_t)m->n++;
}

static void bmap_free(bytes_map *m) { amp_free(m->blob), amp_free(m->off), amp_free(m->slots); }

typedef struct {
    int64_t count;
    uint32_t a, b;
    int32_t *occ; /* words that held the pair at some point (a word at most once in a row) */
    size_t n_occ, cap_occ;
    bool dirty;
} pair_t;

typedef struct {
    int64_t count;
    uint32_t a, b;
} heap_entry;

typedef struct {
    bytes_map pieces;   /* the unique pieces */
    int64_t *piece_count;
    size_t piece_count_cap;
    uint32_t *sym;      /* each word's tokens; word w at sym + word_off[w], word_len[w] of them */
    size_t *word_off;
    uint32_t *word_len;
    uint32_t *seen;     /* the merge that last touched each word */
    pair_t *pairs;
    size_t n_pairs, cap_pairs;
    uint64_t *pkeys;    /* hash of pair keys ((a << 32 | b) + 1; 0 empty) to pair index */
    int32_t *pidx;
    uint64_t pmask;
    size_t *dirty;
    size_t n_dirty, cap_dirty;
    heap_entry *heap;
    size_t n_heap, cap_heap;
    bytes_map tokens;   /* the tokens' bytes, id = rank */
} trainer;

static int add_piece(void *arg, size_t a, size_t b);

typedef struct {
    trainer *tr;
    const uint8_t *s;
    bool oom;
} piece_ctx;

static int add_piece(void *arg, size_t a, size_t b) {
    piece_ctx *c = arg;
    trainer *tr = c->tr;
    bool added;
    if (b - a > UINT32_MAX) return AMP_ERR_INVALID_ARGUMENT; /* a piece's length is a uint32 */
    const int64_t id = bmap_get(&tr->pieces, c->s + a, b - a, &added);
    if (id < 0 || !grow((void **)&tr->piece_count, &tr->piece_count_cap, (size_t)id + 1, sizeof *tr->piece_count))
        return AMP_ERR_OUT_OF_MEMORY;
    if (added) tr->piece_count[id] = 0;
    tr->piece_count[id]++;
    return AMP_OK;
}

/* Pieces of one text: valid UTF-8 runs by the pattern, each maximal invalid run one piece. */
static int collect(trainer *tr, const pcre2_code *re, const uint8_t *s, size_t n) {
    piece_ctx c = {tr, s, false};
    size_t i = 0;
    while (i < n) {
        const size_t v = amp_tok_utf8_valid_prefix(s + i, n - i);
        c.s = s + i;
        int rc = amp_tok_split(re, s + i, v, add_piece, &c);
        if (rc != AMP_OK) return rc;
        i += v;
        size_t j = i;
        while (j < n && amp_tok_utf8_valid_prefix(s + j, n - j) == 0) j++;
        if (j > i) {
            c.s = s;
            if ((rc = add_piece(&c, i, j)) != AMP_OK) return rc;
        }
        i = j;
    }
    return AMP_OK;
}

static int64_t pair_find(trainer *tr, uint32_t a, uint32_t b, bool create) {
    const uint64_t key = ((uint64_t)a << 32 | b) + 1;
    if (create && 2 * (tr->n_pairs + 1) > tr->pmask + 1) {
        const uint64_t cap = tr->pkeys ? 2 * (tr->pmask + 1) : 1 << 16;
        uint64_t *k = amp_calloc(cap, sizeof *k);
        int32_t *x = amp_malloc(cap * sizeof *x);
        if (!k || !x) {
            amp_free(k), amp_free(x);
            return -1;
        }
        for (size_t i = 0; i < tr->n_pairs; i++) {
            const uint64_t ki = ((uint64_t)tr->pairs[i].a << 32 | tr->pairs[i].b) + 1;
            uint64_t h = amp_tok_hash((const uint8_t *)&ki, 8) & (cap - 1);
            while (k[h]) h = (h + 1) & (cap - 1);
            k[h] = ki, x[h] = (int32_t)i;
        }
        amp_free(tr->pkeys), amp_free(tr->pidx);
        tr->pkeys = k, tr->pidx = x, tr->pmask = cap - 1;
    }
    if (!tr->pkeys) return -2;
    uint64_t h = amp_tok_hash((const uint8_t *)&key, 8) & tr->pmask;
    for (; tr->pkeys[h]; h = (h + 1) & tr->pmask)
        if (tr->pkeys[h] == key) return tr->pidx[h];
    if (!create) return -2;
    if (!grow((void **)&tr->pairs, &tr->cap_pairs, tr->n_pairs + 1, sizeof *tr->pairs)) return -1;
    tr->pairs[tr->n_pairs] = (pair_t){0, a, b, NULL, 0, 0, false};
    tr->pkeys[h] = key, tr->pidx[h] = (int32_t)tr->n_pairs;
    return (int64_t)tr->n_pairs++;
}

/* Adds delta to the pair's count, notes the word, marks the pair for the heap. */
static bool pair_add(trainer *tr, uint32_t a, uint32_t b, int64_t delta, int32_t word) {
    const int64_t i = pair_find(tr, a, b, true);
    if (i < 0) return false;
    pair_t *p = &tr->pairs[i];
    p->count += delta;
    if (delta > 0 && (p->n_occ == 0 || p->occ[p->n_occ - 1] != word)) {
        if (!grow((void **)&p->occ, &p->cap_occ, p->n_occ + 1, sizeof *p->occ)) return false;
        p->occ[p->n_occ++] = word;
    }
    if (!p->dirty) {
        if (!grow((void **)&tr->dirty, &tr->cap_dirty, tr->n_dirty + 1, sizeof *tr->dirty)) return false;
        p->dirty = true;
        tr->dirty[tr->n_dirty++] = (size_t)i;
    }
    return true;
}

static inline bool heap_above(heap_entry x, heap_entry y) {
    if (x.count != y.count) return x.count > y.count;
    return x.a != y.a ? x.a < y.a : x.b < y.b;
}

static bool heap_push(trainer *tr, heap_entry e) {
    if (!grow((void **)&tr->heap, &tr->cap_heap, tr->n_heap + 1, sizeof *tr->heap)) return false;
    size_t i = tr->n_heap++;
    while (i > 0 && heap_above(e, tr->heap[(i - 1) / 2])) {
        tr->heap[i] = tr->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    tr->heap[i] = e;
    return true;
}

static heap_entry heap_pop(trainer *tr) {
    heap_entry *h = tr->heap;
    const heap_entry top = h[0], last = h[--tr->n_heap];
    const size_t n = tr->n_heap;
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_above(h[c + 1], h[c])) c++;
        if (!heap_above(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (n) h[i] = last;
    return top;
}

/* Pushes every pair whose count changed since the last flush. */
static bool flush_dirty(trainer *tr) {
    for (size_t k = 0; k < tr->n_dirty; k++) {
        pair_t *p = &tr->pairs[tr->dirty[k]];
        p->dirty = false;
        if (p->count > 0 && !heap_push(tr, (heap_entry){p->count, p->a, p->b})) return false;
    }
    tr->n_dirty = 0;
    return true;
}

/* The words as byte tokens, and the first pair counts. */
static bool init_words(trainer *tr) {
    const size_t nw = tr->pieces.n;
    tr->sym = amp_malloc((tr->pieces.blob_len + 1) * sizeof *tr->sym);
    tr->word_off = amp_malloc((nw + 1) * sizeof *tr->word_off);
    tr->word_len = amp_malloc((nw + 1) * sizeof *tr->word_len);
    tr->seen = amp_calloc(nw + 1, sizeof *tr->seen);
    if (!tr->sym || !tr->word_off || !tr->word_len || !tr->seen) return false;
    for (size_t w = 0; w < nw; w++) {
        const size_t o = tr->pieces.off[w], len = tr->pieces.off[w + 1] - o;
        tr->word_off[w] = o, tr->word_len[w] = (uint32_t)len;
        for (size_t i = 0; i < len; i++) tr->sym[o + i] = tr->pieces.blob[o + i];
        for (size_t i = 0; i + 1 < len; i++)
            if (!pair_add(tr, tr->sym[o + i], tr->sym[o + i + 1], tr->piece_count[w], (int32_t)w)) return false;
    }
    return flush_dirty(tr);
}

/* Replaces (a, b) by t in word w, left to right, updating the pair counts. */
static bool merge_word(trainer *tr, int32_t w, uint32_t a, uint32_t b, uint32_t t) {
    uint32_t *s = tr->sym + tr->word_off[w];
    const uint32_t n = tr->word_len[w];
    const int64_t c = tr->piece_count[w];
    bool has = false;
    for (uint32_t i = 0; i + 1 < n && !has; i++) has = s[i] == a && s[i + 1] == b;
    if (!has) return true;
    for (uint32_t i = 0; i + 1 < n; i++)
        if (!pair_add(tr, s[i], s[i + 1], -c, w)) return false;
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; k++) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) s[k] = t, i += 2;
        else s[k] = s[i], i++;
    }
    tr->word_len[w] = k;
    for (uint32_t i = 0; i + 1 < k; i++)
        if (!pair_add(tr, s[i], s[i + 1], c, w)) return false;
    return true;
}

/* One merge of the best pair; *done when no pair is left. */
static int merge_best(trainer *tr, uint32_t step, bool *done) {
    heap_entry e;
    int64_t pi;
    do {
        if (tr->n_heap == 0) {
            *done = true;
            return AMP_OK;
        }
        e = heap_pop(tr);
        pi = pair_find(tr, e.a, e.b, false);
    } while (pi < 0 || tr->pairs[pi].count != e.count);
    const uint32_t a = e.a, b = e.b;
    const size_t la = tr->tokens.off[a + 1] - tr->tokens.off[a], lb = tr->tokens.off[b + 1] - tr->tokens.off[b];
    uint8_t *buf = amp_malloc(la + lb);
    if (!buf) return AMP_ERR_OUT_OF_MEMORY;
    memcpy(buf, tr->tokens.blob + tr->tokens.off[a], la);
    memcpy(buf + la, tr->tokens.blob + tr->tokens.off[b], lb);
    bool added;
    const int64_t t = bmap_get(&tr->tokens, buf, la + lb, &added);
    amp_free(buf);
    if (t < 0) return AMP_ERR_OUT_OF_MEMORY;
    /* merge_word may grow the pair array: read the occurrence list through the index */
    for (size_t k = 0; k < tr->pairs[pi].n_occ; k++) {
        const int32_t w = tr->pairs[pi].occ[k];
        if (tr->seen[w] == step) continue;
        tr->seen[w] = step;
        if (!merge_word(tr, w, a, b, (uint32_t)t)) return AMP_ERR_OUT_OF_MEMORY;
    }
    pair_t *p = &tr->pairs[pi];
    amp_free(p->occ);
    p->occ = NULL, p->n_occ = p->cap_occ = 0;
    return flush_dirty(tr) ? AMP_OK : AMP_ERR_OUT_OF_MEMORY;
}

static void trainer_free(trainer *tr) {
    bmap_free(&tr->pieces), bmap_free(&tr->tokens);
    amp_free(tr->piece_count), amp_free(tr->sym), amp_free(tr->word_off), amp_free(tr->word_len), amp_free(tr->seen);
    for (size_t i = 0; i < tr->n_pairs; i++) amp_free(tr->pairs[i].occ);
    amp_free(tr->pairs), amp_free(tr->pkeys), amp_free(tr->pidx), amp_free(tr->dirty), amp_free(tr->heap);
}

int amp_tokenizer_train(const uint8_t *const *texts, const size_t *lens, size_t n_texts, uint32_t vocab_size,
                        const char *pattern, amp_tokenizer **out, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!out || (n_texts && (!texts || !lens)))
        return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_tokenizer_train: NULL argument");
    *out = NULL;
    if (vocab_size < 256 || vocab_size > (uint32_t)INT32_MAX)
        return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "tokenizer: vocabulary %u (at least 256)", vocab_size);
    if (!pattern) pattern = amp_tokenizer_pattern_cl100k;
    pcre2_code *re = NULL;
    int rc = amp_tok_compile(pattern, &re, err, err_size);
    if (rc != AMP_OK) return rc;
    trainer tr;
    memset(&tr, 0, sizeof tr);
    for (size_t i = 0; i < n_texts && rc == AMP_OK; i++) rc = collect(&tr, re, texts[i], lens[i]);
    pcre2_code_free(re);
    for (int b = 0; b < 256 && rc == AMP_OK; b++) {
        const uint8_t byte = (uint8_t)b;
        bool added;
        if (bmap_get(&tr.tokens, &byte, 1, &added) < 0) rc = AMP_ERR_OUT_OF_MEMORY;
    }
    if (rc == AMP_OK && !init_words(&tr)) rc = AMP_ERR_OUT_OF_MEMORY;
    bool done = false;
    for (uint32_t step = 1; rc == AMP_OK && !done && tr.tokens.n < vocab_size; step++) rc = merge_best(&tr, step, &done);
    if (rc == AMP_OK) {
        const size_t n = tr.tokens.n;
        const uint8_t **toks = amp_malloc(n * sizeof *toks);
        size_t *tl = amp_malloc(n * sizeof *tl);
        if (!toks || !tl) rc = AMP_ERR_OUT_OF_MEMORY;
        for (size_t i = 0; rc == AMP_OK && i < n; i++)
            toks[i] = tr.tokens.blob + tr.tokens.off[i], tl[i] = tr.tokens.off[i + 1] - tr.tokens.off[i];
        if (rc == AMP_OK) rc = amp_tokenizer_create(toks, tl, (uint32_t)n, pattern, out, err, err_size);
        amp_free(toks), amp_free(tl);
    }
    trainer_free(&tr);
    if (rc == AMP_ERR_OUT_OF_MEMORY) return amp_err_fmt(err, err_size, rc, "tokenizer: out of memory while training");
    if (rc != AMP_OK && (!err || !err[0])) return amp_err_fmt(err, err_size, rc, "tokenizer: training failed");
    return rc;
}
