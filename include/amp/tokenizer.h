/* Byte-level BPE tokenization, compatible with tiktoken: rank files, encode, decode, training, and
 * llm.c's token shards.
 *
 * A tokenizer is a rank table (every token is a byte string with a rank, its id; the 256 single bytes
 * are always tokens) and a pre-tokenization pattern (a PCRE2 regular expression, run in UTF mode with
 * Unicode properties). Encoding splits the text into the pattern's matches ("pieces"); a piece that is
 * itself a token is that token, any other piece is split into its bytes and the adjacent pair whose
 * concatenation has the lowest rank is merged, leftmost first on equal ranks, until no adjacent pair
 * is a token: tiktoken's `_byte_pair_merge`, so `amp_tokenizer_encode` gives tiktoken's tokens token
 * for token (`tiktoken.Encoding(name, pat_str=..., mergeable_ranks=..., special_tokens={})`).
 *
 * The patterns run as tiktoken's regex engine (Rust's) runs them: `$` is the end of the text only, and
 * \s is Unicode's White_Space (PCRE2's own \s would add U+180E). One difference remains: \p{L} and
 * \p{N} come from PCRE2's Unicode tables (Unicode 14 in Debian 12's PCRE2 10.42), so a letter or digit
 * assigned later (U+11F04 KAWI LETTER A, Unicode 15) is neither here, and pieces around it can differ.
 *
 * Invalid UTF-8, as tiktoken's `Encoding._encode_bytes` treats it: the longest valid prefix is encoded
 * as text; the tokens of its last piece (and, when that piece's first token is all spaces, tabs and
 * newlines, the all-whitespace tokens just before it) are taken back, and their bytes followed by every
 * byte from the first invalid one to the end are encoded as one piece (so a long text with an early
 * stray byte is mostly one piece: exact, but merged by the slower heap). decode(encode(x)) == x for
 * every byte string. Valid UTF-8 follows Rust's `str::from_utf8` (RFC 3629: no surrogates, no overlong forms,
 * nothing above U+10FFFF).
 *
 * Errors go to the caller's err buffer (err may be NULL, err_size 0) as one line naming the file and,
 * for a rank file, the line. Functions return AMP_OK or a negative amp_status. */
#ifndef AMP_TOKENIZER_H
#define AMP_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct amp_tokenizer amp_tokenizer;

/* "gpt2" or "cl100k" to its pattern, exactly as tiktoken spells it (GPT-2's is tiktoken's
 * r50k_pat_str, cl100k's the pat_str of cl100k_base); NULL for any other name. */
const char *amp_tokenizer_pattern_named(const char *name);

/* A tokenizer from tokens (n byte strings; token i has rank i) and a pattern (NULL: cl100k). Every
 * token must be non-empty and distinct, and the 256 single bytes must be among them. */
int amp_tokenizer_create(const uint8_t *const *tokens, const size_t *lens, uint32_t n, const char *pattern,
                         amp_tokenizer **out, char *err, size_t err_size);
/* Reads a tiktoken rank file: one token a line, base64 of its bytes, one space, its rank (decimal);
 * empty lines are skipped, a line may end in CRLF. Ranks need not be sorted, and may leave gaps while
 * the largest stays below 2 x the number of tokens + 1024; tokens and ranks must be distinct; the
 * 256 single bytes must have ranks. A malformed line gives AMP_ERR_FORMAT and "PATH:LINE: what is
 * wrong". */
int amp_tokenizer_load(const char *path, const char *pattern, amp_tokenizer **out, char *err, size_t err_size);
/* Writes the rank file (by rank), atomically: a temp file renamed over path; nothing on failure. */
int amp_tokenizer_save(const amp_tokenizer *t, const char *path, char *err, size_t err_size);
void amp_tokenizer_free(amp_tokenizer *t);

/* One more than the largest rank. */
uint32_t amp_tokenizer_vocab_size(const amp_tokenizer *t);
/* The number of tokens (equal to the vocabulary size when the ranks are dense). */
uint32_t amp_tokenizer_n_tokens(const amp_tokenizer *t);
/* Token `rank`'s bytes and length; NULL (and *len 0) when no token has that rank. */
const uint8_t *amp_tokenizer_token(const amp_tokenizer *t, uint32_t rank, size_t *len);
/* The tokenizer's pattern (a copy it owns). */
const char *amp_tokenizer_pattern(const amp_tokenizer *t);

/* A growable token array; zero-initialize it, free it with amp_tokens_free. */
typedef struct amp_tokens {
    uint32_t *data;
    size_t len, cap;
} amp_tokens;
void amp_tokens_free(amp_tokens *v);

/* Appends the tokens of text[0, len) to out. Safe to call from several threads on one tokenizer. */
int amp_tokenizer_encode(const amp_tokenizer *t, const void *text, size_t len, amp_tokens *out);
/* As amp_tokenizer_encode, on up to `threads` threads (at least 64 KiB of text each; fewer threads, or
 * none beyond the caller's, for shorter texts): the text is cut where the pre-tokenizer's search
 * stands in the whole-text encoding, checked while stitching the parts, so the tokens equal
 * amp_tokenizer_encode's exactly, for any text and pattern (a cut that falls inside a piece costs a
 * short serial stretch, not a different token). */
int amp_tokenizer_encode_parallel(const amp_tokenizer *t, const void *text, size_t len, int threads, amp_tokens *out);
/* The bytes of n tokens into *out (amp's allocator; free with amp_tokenizer_bytes_free), *out_len
 * bytes. AMP_ERR_INVALID_ARGUMENT when a token has no rank in the table. */
int amp_tokenizer_decode(const amp_tokenizer *t, const uint32_t *tokens, size_t n, uint8_t **out, size_t *out_len);
void amp_tokenizer_bytes_free(uint8_t *bytes);

/* BPE training: the 256 byte tokens (rank = the byte), then, until vocab_size tokens (or no pair is
 * left), the most frequent adjacent pair of tokens within the pattern's pieces of the texts becomes a
 * new token, its rank the next one. A pair's frequency counts every adjacent position, overlapping
 * ones included ("aaa" holds (a,a) twice), each piece weighted by how often it occurs; ties go to the
 * pair whose token ids (left, then right) are smallest. A merge whose bytes are already a token reuses
 * it (no new rank). The texts are pre-tokenized as encoding does, invalid UTF-8 aside: a maximal run
 * of bytes that is not valid UTF-8 is a piece of its own. */
int amp_tokenizer_train(const uint8_t *const *texts, const size_t *lens, size_t n_texts, uint32_t vocab_size,
                        const char *pattern, amp_tokenizer **out, char *err, size_t err_size);

/* llm.c's token shards: a header of 256 little-endian int32 (magic 20240520, version, token count,
 * the rest 0), then the tokens, little-endian: version 1 holds uint16 tokens (a vocabulary of at
 * most 65536), version 2 (amp's) uint32 tokens. amp's writer also stores the vocabulary size in int
 * 3 (AMP_SHARD_VOCAB_INT; llm.c writes 0 there and its readers ignore it), so a shard says how many
 * logits a model trained on it needs. */
enum { AMP_SHARD_MAGIC = 20240520, AMP_SHARD_HEADER_INTS = 256, AMP_SHARD_VOCAB_INT = 3 };
/* Writes version 1 when every token < 65536 and vocab_size <= 65536, else version 2; atomically. */
int amp_token_shard_write(const char *path, const uint32_t *tokens, size_t n, uint32_t vocab_size, char *err,
                          size_t err_size);
/* Reads a shard (either version) into out (appending); a header whose count disagrees with the
 * file's length, a bad magic or version is AMP_ERR_FORMAT. */
int amp_token_shard_read(const char *path, amp_tokens *out, char *err, size_t err_size);
/* As amp_token_shard_read; *vocab_size (when not NULL) gets header int AMP_SHARD_VOCAB_INT: the
 * vocabulary size amp's writer stored, 0 for llm.c's shards. */
int amp_token_shard_read_vocab(const char *path, amp_tokens *out, uint32_t *vocab_size, char *err, size_t err_size);

#ifdef __cplusplus
}
#endif
#endif /* AMP_TOKENIZER_H */
