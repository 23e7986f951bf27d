/* Vocabularies: the bytes each token id of a text model spells, kept in the checkpoint `amp train`
 * writes, so that a trained model's output can be decoded and its prompts encoded without the data
 * it was trained on.
 *
 * A vocabulary is a table like amp_text_corpus's (amp/data.h): token id spells
 * text[offset[id] .. offset[id + 1]). In a checkpoint it is the metadata value of AMP_VOCAB_META_KEY
 * (safetensors metadata holds strings only, and JSON strings must be UTF-8): each token's bytes as
 * lowercase hex, the tokens separated by commas, in id order ("0a,20,2074686520" is "\n", " ",
 * " the "). Checkpoints without the key (written before it existed, or of image models) have no
 * vocabulary; neither have the token shards of a model trained without a rank file (their ids spell
 * nothing). Errors go to err (may be NULL) as one line. */
#ifndef AMP_VOCAB_H
#define AMP_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AMP_VOCAB_META_KEY "train.vocab"
/* With a BPE vocabulary (ids are a rank file's ranks): the pre-tokenization pattern's name, "gpt2" or
 * "cl100k", so prompts are encoded as the training text was (amp_tokenizer_create on the tokens). */
#define AMP_VOCAB_PATTERN_META_KEY "train.vocab_pattern"
/* The most tokens a vocabulary may have (llm.c's and tiktoken's vocabularies fit with room). */
#define AMP_VOCAB_MAX_TOKENS (1 << 22)

typedef struct amp_vocab {
    int64_t size;     /* tokens */
    uint32_t *offset; /* [size + 1] */
    uint8_t *text;    /* [offset[size]] */
} amp_vocab;

/* The metadata value of size tokens (offset[size + 1], text) into *out (amp's allocator, free with
 * amp_vocab_meta_free). Returns AMP_OK, AMP_ERR_NULL_POINTER, AMP_ERR_INVALID_ARGUMENT (size outside
 * [1, AMP_VOCAB_MAX_TOKENS], offsets decreasing) or AMP_ERR_OUT_OF_MEMORY. */
int amp_vocab_to_meta(const uint32_t *offset, const void *text, int64_t size, char **out);
void amp_vocab_meta_free(char *meta);
/* Parses a metadata value into *out (free with amp_vocab_free). Returns AMP_OK, AMP_ERR_NULL_POINTER,
 * AMP_ERR_FORMAT (not hex pairs and commas, too many tokens) or AMP_ERR_OUT_OF_MEMORY; *out zeroed
 * on failure. */
int amp_vocab_from_meta(const char *value, amp_vocab *out, char *err, size_t err_size);
/* A vocabulary from n byte strings (tokens[i] of lens[i] bytes is id i; a NULL token is empty). */
int amp_vocab_from_tokens(const uint8_t *const *tokens, const size_t *lens, int64_t n, amp_vocab *out);
/* Frees what the vocabulary owns and zeroes it. NULL is fine. */
void amp_vocab_free(amp_vocab *v);
/* Token id's bytes and their count; NULL (and *len 0) outside the vocabulary. */
const uint8_t *amp_vocab_token(const amp_vocab *v, int64_t id, size_t *len);
/* Encodes text[0, len) by greedy longest match: at each position the longest token that matches
 * there (the lowest id among equally long ones), into out[cap]. amp's byte vocabulary encodes
 * exactly as the corpus did; a word vocabulary may differ from the corpus's segmentation (which
 * does not make " theory" from " the" + "ory"), still spelling the text exactly. Returns the number
 * of tokens, or -1 when a byte has no token (a byte the corpus never held) or cap is too small. */
int64_t amp_vocab_encode(const amp_vocab *v, const void *text, size_t len, int32_t *out, int64_t cap);

#ifdef __cplusplus
}
#endif
#endif /* AMP_VOCAB_H */
