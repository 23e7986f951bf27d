/* Shared by the data loaders: the allocator default (their one-line error messages: amp_err_fmt). */
#ifndef AMP_DATA_INTERNAL_H
#define AMP_DATA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "amp/data.h"
#include "amp/tokenizer.h"
#include "../core/status_internal.h"

/* The allocator to use: *alloc, or aligned malloc when alloc is NULL. Returns false when alloc is
 * given without both functions. */
bool data_allocator(const amp_allocator *alloc, amp_allocator *out);

/* Text corpora (text.c, shared with words.c). */
/* Reads the corpus at path (a file, or a directory's files in name order) into *bytes (from a). */
int text_gather(const char *path, const amp_allocator *a, uint8_t **bytes, int64_t *total, char *err, size_t err_size);
/* Sets c's byte vocabulary (byte_count, byte_to_id, id_to_byte; vocab_size = byte_count). */
void text_byte_vocab(const uint8_t *bytes, int64_t total, amp_text_corpus *c);
/* Allocates c->token_offset[vocab_size + 1] and c->token_text[text_bytes] and fills the byte tokens'
 * entries (the first byte_count ids). AMP_ERR_OUT_OF_MEMORY leaves what it got in c for
 * amp_text_corpus_free. */
int text_alloc_tables(amp_text_corpus *c, const amp_allocator *a, int vocab_size, size_t text_bytes);
/* The loaders' argument checks (fn names the loader in the message); zeroes *out. */
int text_check_args(const char *path, double holdout_fraction, const amp_allocator *alloc, amp_text_corpus *out,
                    amp_allocator *a, const char *fn, char *err, size_t err_size);

/* Token corpora (bpe_corpus.c, shared with shards.c): c->vocab_size set, allocates and fills
 * token_offset/token_text with every rank's bytes from t (all empty when t is NULL) and byte_to_id
 * (the one-byte tokens' ranks); byte_count 0. AMP_ERR_OUT_OF_MEMORY, or AMP_ERR_FORMAT when the
 * tokens' bytes pass 2^32, leaves what it got in c for amp_text_corpus_free. */
int text_token_tables(amp_text_corpus *c, const amp_allocator *a, const amp_tokenizer *t);

#endif /* AMP_DATA_INTERNAL_H */
