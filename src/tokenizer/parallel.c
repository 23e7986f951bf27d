/* One text encoded on several threads, token for token as amp_tokenizer_encode encodes it.
 *
 * Why it is exact. The pre-tokenizer's search (tiktoken's find_iter) has one piece of state: the
 * position it resumes from, `at` (where the last match ended). Started at a position the whole-text
 * search also stands at, a search over the same whole text (lookaheads and `$` see all of it) finds
 * the same matches from there on; and a piece's tokens depend on the piece's bytes alone. So:
 *   1. the valid UTF-8 prefix is cut at candidate points (after a newline where one is near, always on
 *      a character boundary); thread k searches from its candidate p_k until it reaches p_(k+1) or
 *      beyond, and records the positions it stood at (with its token count there) over its first
 *      SYNC_WINDOW bytes;
 *   2. stitching, in order: chunk 0 starts at 0, which the whole-text search stands at, so its tokens
 *      are right and its end E_0 is a position the whole-text search stands at. For each later chunk,
 *      when the stitched position is one chunk k stood at, chunk k's tokens from there on are taken and
 *      the position becomes chunk k's end; otherwise the search runs here, from the stitched position,
 *      until it stands where chunk k stood (then as before) or passes chunk k's end.
 * A candidate inside a piece (a run of spaces that crosses it, say) costs a short serial stretch,
 * never a wrong token. Invalid UTF-8 is then handled after the prefix, as amp_tokenizer_encode does. */
#include <pthread.h>
#include <string.h>

#include "../core/alloc_internal.h"
#include "../core/status_internal.h"
#include "tokenizer_internal.h"

enum {
    MIN_CHUNK = 64 * 1024,          /* bytes per thread at least: below it, fewer threads */
    MAX_THREADS = 256,
    NEWLINE_SEARCH = 4096,          /* how far past the even cut a newline is looked for */
    SYNC_WINDOW = 1024 * 1024,      /* positions recorded over a chunk's first this many bytes */
    SYNC_STOP = 1                   /* a piece callback's "stop here" (errors are negative) */
};

typedef struct {
    size_t at, ntok; /* the search stood at `at` with ntok tokens of this chunk before it */
} sync_point;

typedef struct {
    const amp_tokenizer *t;
    const uint8_t *s;
    size_t n;                /* the valid prefix's length: the search's whole text */
    size_t from, stop;       /* this chunk's candidate start; the next one's (n for the last) */
    size_t end_at;           /* where this chunk's search stood when it finished (>= stop) */
    amp_tokens tokens;
    sync_point *sync;
    size_t n_sync, cap_sync;
    size_t last_piece_len;   /* tokens of this chunk's last piece */
    int rc;
} chunk;

static int push_sync(chunk *c, size_t at) {
    if (c->n_sync == c->cap_sync) {
        const size_t cap = c->cap_sync ? 2 * c->cap_sync : 1024;
        sync_point *p = amp_realloc(c->sync, cap * sizeof *p);
        if (!p) return AMP_ERR_OUT_OF_MEMORY;
        c->sync = p, c->cap_sync = cap;
    }
    c->sync[c->n_sync++] = (sync_point){at, c->tokens.len};
    return AMP_OK;
}

static int chunk_piece(void *arg, size_t a, size_t b) {
    chunk *c = arg;
    const size_t before = c->tokens.len;
    int rc = amp_tok_encode_piece(c->t, c->s + a, b - a, &c->tokens);
    c->last_piece_len = c->tokens.len - before;
    if (rc == AMP_OK && b - c->from < SYNC_WINDOW && b < c->stop) rc = push_sync(c, b);
    return rc;
}

static void *chunk_run(void *arg) {
    chunk *c = arg;
    c->rc = push_sync(c, c->from);
    if (c->rc == AMP_OK) c->rc = amp_tok_split_range(c->t->re, c->s, c->n, c->from, c->stop, chunk_piece, c, &c->end_at);
    return NULL;
}

/* The index of the sync point at `at` in c (sorted by at), or SIZE_MAX. */
static size_t find_sync(const chunk *c, size_t at) {
    size_t lo = 0, hi = c->n_sync;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (c->sync[mid].at < at) lo = mid + 1;
        else hi = mid;
    }
    return lo < c->n_sync && c->sync[lo].at == at ? lo : SIZE_MAX;
}

/* The serial stretch of stitching: encodes pieces into out until the search stands where chunk c
 * stood (SYNC_STOP) or reaches c's end. */
typedef struct {
    const amp_tokenizer *t;
    const uint8_t *s;
    amp_tokens *out;
    const chunk *c;
    size_t last_piece_len;
} stitch_state;

static int stitch_piece(void *arg, size_t a, size_t b) {
    stitch_state *st = arg;
    const size_t before = st->out->len;
    const int rc = amp_tok_encode_piece(st->t, st->s + a, b - a, st->out);
    st->last_piece_len = st->out->len - before;
    if (rc != AMP_OK) return rc;
    return find_sync(st->c, b) != SIZE_MAX ? SYNC_STOP : AMP_OK;
}

static int append_tokens(amp_tokens *out, const uint32_t *v, size_t n) {
    if (out->len + n > out->cap) {
        size_t cap = out->cap ? out->cap : 256;
        while (cap < out->len + n) cap *= 2;
        uint32_t *d = amp_realloc(out->data, cap * sizeof *d);
        if (!d) return AMP_ERR_OUT_OF_MEMORY;
        out->data = d, out->cap = cap;
    }
    if (n) memcpy(out->data + out->len, v, n * sizeof *v);
    out->len += n;
    return AMP_OK;
}

/* Joins the chunks' tokens into out (see the top of the file); *last_piece_len: the tokens of the
 * whole text's last piece. */
static int stitch(chunk *ch, int k_n, amp_tokens *out, size_t *last_piece_len) {
    int rc = append_tokens(out, ch[0].tokens.data, ch[0].tokens.len);
    size_t cur = ch[0].end_at, last = ch[0].last_piece_len;
    for (int k = 1; k < k_n && rc == AMP_OK; k++) {
        const chunk *c = &ch[k];
        if (cur >= c->end_at) continue; /* the search has passed this chunk whole */
        size_t j = find_sync(c, cur);
        if (j == SIZE_MAX) {
            stitch_state st = {c->t, c->s, out, c, last};
            size_t at = cur;
            rc = amp_tok_split_range(c->t->re, c->s, c->n, cur, c->end_at, stitch_piece, &st, &at);
            last = st.last_piece_len;
            cur = at;
            if (rc != SYNC_STOP) continue; /* an error, or past this chunk's end */
            rc = AMP_OK;
            j = find_sync(c, cur);
        }
        if (c->tokens.len > c->sync[j].ntok) last = c->last_piece_len;
        rc = append_tokens(out, c->tokens.data + c->sync[j].ntok, c->tokens.len - c->sync[j].ntok);
        cur = c->end_at;
    }
    *last_piece_len = last;
    return rc;
}

/* Candidate cut near q: just after a newline followed by a character that is not white space, when
 * one lies within NEWLINE_SEARCH bytes; else the first character boundary at or after q. */
static size_t candidate(const uint8_t *s, size_t n, size_t q) {
    for (size_t p = q; p < n && p < q + NEWLINE_SEARCH; p++)
        if (p > 0 && s[p - 1] == '\n' && s[p] != ' ' && s[p] != '\t' && s[p] != '\r' && s[p] != '\n') return p;
    size_t p = q;
    while (p < n && (s[p] & 0xc0) == 0x80) p++;
    return p;
}

int amp_tokenizer_encode_parallel(const amp_tokenizer *t, const void *text, size_t len, int threads, amp_tokens *out) {
    if (!t || !out || (len && !text)) return AMP_ERR_NULL_POINTER;
    const uint8_t *s = text;
    const size_t valid = amp_tok_utf8_valid_prefix(s, len);
    size_t want = threads > 1 ? (size_t)threads : 1;
    if (want > MAX_THREADS) want = MAX_THREADS;
    if (want > valid / MIN_CHUNK) want = valid / MIN_CHUNK;
    if (want <= 1) return amp_tokenizer_encode(t, text, len, out);

    chunk *ch = amp_calloc(want, sizeof *ch);
    if (!ch) return AMP_ERR_OUT_OF_MEMORY;
    int k_n = 0;
    for (size_t k = 0; k < want; k++) {
        const size_t p = k == 0 ? 0 : candidate(s, valid, k * (valid / want));
        if (k > 0 && (p >= valid || p <= ch[k_n - 1].from)) continue;
        ch[k_n++] = (chunk){.t = t, .s = s, .n = valid, .from = p};
    }
    for (int k = 0; k < k_n; k++) ch[k].stop = k + 1 < k_n ? ch[k + 1].from : valid;
    pthread_t th[MAX_THREADS];
    bool started[MAX_THREADS] = {false};
    for (int k = 1; k < k_n; k++) started[k] = pthread_create(&th[k], NULL, chunk_run, &ch[k]) == 0;
    chunk_run(&ch[0]);
    for (int k = 1; k < k_n; k++) {
        if (started[k]) pthread_join(th[k], NULL);
        else chunk_run(&ch[k]); /* no thread: run it here */
    }
    int rc = AMP_OK;
    for (int k = 0; k < k_n; k++)
        if (ch[k].rc != AMP_OK && rc == AMP_OK) rc = ch[k].rc;
    const size_t start = out->len;
    size_t last_piece_len = 0;
    if (rc == AMP_OK) rc = stitch(ch, k_n, out, &last_piece_len);
    if (rc == AMP_OK && valid < len) rc = amp_tok_encode_invalid_tail(t, out, start, last_piece_len, s, valid, len);
    if (rc != AMP_OK) out->len = start;
    for (int k = 0; k < k_n; k++) amp_tokens_free(&ch[k].tokens), amp_free(ch[k].sync);
    amp_free(ch);
    return rc;
}
