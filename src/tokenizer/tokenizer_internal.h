/* Internal to src/tokenizer/: the tokenizer's tables, the byte-string hash, the pre-tokenizer (PCRE2)
 * and the BPE merge, shared by encoding (bpe.c) and training (train.c). */
#ifndef AMP_TOKENIZER_INTERNAL_H
#define AMP_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/status.h"
#include "amp/tokenizer.h"

enum { AMP_TOK_NONE = -1 };

extern const char amp_tokenizer_pattern_gpt2[];
extern const char amp_tokenizer_pattern_cl100k[];

struct amp_tokenizer {
    uint8_t *blob;     /* every token's bytes, back to back */
    size_t *off;       /* token i (by rank) starts at blob + off[i]; off[vocab] ends the blob */
    uint64_t *slots;   /* hash table, mask + 1 slots: the hash's high 32 bits, then rank + 1 (0: empty);
                        * the tag skips the bytes of most colliding entries */
    uint64_t mask;
    uint32_t vocab;    /* one more than the largest rank */
    uint32_t n_tokens;
    bool *present;     /* present[rank]: a token has that rank (ranks may have gaps) */
    char *pattern;
    pcre2_code *re;
};

/* The rank of the byte string s[0, n), or AMP_TOK_NONE. */
static inline uint64_t amp_tok_hash(const uint8_t *s, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15u ^ n;
    while (n >= 8) {
        uint64_t w = 0;
        for (int i = 0; i < 8; i++) w |= (uint64_t)s[i] << (8 * i);
        h = (h ^ w) * 0xff51afd7ed558ccdu;
        h ^= h >> 32;
        s += 8, n -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++) w |= (uint64_t)s[i] << (8 * i);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53u;
    return h ^ (h >> 29);
}
int32_t amp_tok_lookup(const amp_tokenizer *t, const uint8_t *s, size_t n);

/* Compiles pattern into *re (UTF, Unicode properties, `$` only at the end, JIT where available). */
int amp_tok_compile(const char *pattern, pcre2_code **re, char *err, size_t err_size);

/* The length of the longest valid UTF-8 prefix of s[0, n) (RFC 3629, as Rust's str::from_utf8). */
size_t amp_tok_utf8_valid_prefix(const uint8_t *s, size_t n);

/* Calls fn(arg, start, end) for each match of re in the valid UTF-8 text s[0, n), left to right, as
 * tiktoken's find_iter: the search resumes where the last match ended; empty matches are skipped.
 * Returns AMP_OK, or the first nonzero value fn returns, or AMP_ERR_OUT_OF_MEMORY. */
typedef int (*amp_tok_piece_fn)(void *arg, size_t start, size_t end);
int amp_tok_split(const pcre2_code *re, const uint8_t *s, size_t n, amp_tok_piece_fn fn, void *arg);
/* As amp_tok_split over the whole text s[0, n) (lookaheads and `$` see all of it), but the search
 * starts at `from` (a character boundary) and stops once it has reached `stop` or beyond: the last
 * match may end past stop. *end_at (when not NULL) gets where the search stood: the end of the last
 * match, or n when nothing more matched. The search's only state is that position, so a search
 * started where another stood continues it exactly: what makes parallel encoding exact. */
int amp_tok_split_range(const pcre2_code *re, const uint8_t *s, size_t n, size_t from, size_t stop, amp_tok_piece_fn fn,
                        void *arg, size_t *end_at);

/* After out[start..] holds the tokens of the valid prefix s[0, valid) of s[0, n) (the last piece's
 * last_piece_len tokens at its end), re-encodes the tail from the first invalid byte as tiktoken's
 * _encode_bytes (amp/tokenizer.h). */
int amp_tok_encode_invalid_tail(const amp_tokenizer *t, amp_tokens *out, size_t start, size_t last_piece_len,
                                const uint8_t *s, size_t valid, size_t n);

/* Appends the BPE tokens of piece[0, n) (n >= 1) to out: a piece that is a token is that token. */
int amp_tok_encode_piece(const amp_tokenizer *t, const uint8_t *piece, size_t n, amp_tokens *out);

int amp_tokens_push(amp_tokens *v, uint32_t x);

/* Writes head[0, head_len) then body[0, body_len) to path through a temp file renamed over it;
 * nothing is left on failure. */
int amp_tok_write_atomic(const char *path, const void *head, size_t head_len, const void *body, size_t body_len,
                         char *err, size_t err_size);

#endif
