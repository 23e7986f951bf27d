/* Data for the training program: image classification sets in IDX format (MNIST's layout), a
 * text corpus (characters, or words on top of them), and a deterministic shuffler.
 *
 * Errors. Every loader returns an amp status and writes a one-line message (no trailing newline) into
 * the caller's err buffer (err may be NULL, err_size 0): the message names the file, with the path the
 * caller gave, and the problem, e.g.
 *   "DIR/train-images-idx3-ubyte.gz: truncated: header says 60000 images of 28x28, file holds 1234
 *    (967456 of 47040000 pixel bytes)"
 *   "DIR/train-labels-idx1-ubyte: bad magic 0x00000803 (expected 0x00000801 for labels)"
 * AMP_ERR_IO: a file is missing or cannot be read; AMP_ERR_FORMAT: a file is truncated, corrupt, too
 * large or inconsistent with its partner; AMP_ERR_OUT_OF_MEMORY; AMP_ERR_INVALID_ARGUMENT;
 * AMP_ERR_NULL_POINTER. On failure the output struct is zeroed (its free function accepts it) and
 * nothing is leaked. The library never prints.
 *
 * Memory. The loaders take a caller-replaceable allocator (NULL: malloc); it allocates everything the
 * result owns and the loaders' scratch, and the result keeps a copy of it for its free function.
 * zlib's own stream buffers (gzopen) come from malloc.
 *
 * Limits. A file whose header claims more than AMP_DATA_MAX_BYTES of data (or dimensions whose product
 * overflows) is refused before anything is allocated; so is a text corpus larger than that. */
#ifndef AMP_DATA_H
#define AMP_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2^31 bytes: Fashion-MNIST's training images are 47 MB; anything past this is a corrupt header. */
#define AMP_DATA_MAX_BYTES ((uint64_t)1 << 31)
/* Debian's dataset-fashion-mnist and fortunes packages. */
#define AMP_IMAGE_DATASET_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"
#define AMP_TEXT_CORPUS_DEFAULT_PATH "/usr/share/games/fortunes"
/* The default held-out share of a text corpus: its last 10%. */
#define AMP_TEXT_CORPUS_DEFAULT_HOLDOUT 0.1

/* ---- Images (IDX, MNIST layout) ---------------------------------------------------------------- */

typedef struct amp_image_dataset {
    int64_t count;      /* images (> 0) */
    int64_t rows, cols; /* each image's size, from the file (> 0) */
    int classes;        /* max label + 1 (1..256) */
    uint8_t *pixels;    /* ubyte files: [count, rows, cols], row-major, 0..255 as stored; else NULL */
    float *values;      /* float32/float64 files: [count, rows, cols] as fp32 (all finite); else NULL */
    uint8_t *labels;    /* [count] */
    amp_allocator allocator; /* what allocated pixels and labels */
} amp_image_dataset;

/* Loads DIR/train-images-idx3-ubyte and DIR/train-labels-idx1-ubyte (train) or the t10k-* pair (not
 * train). Each file may be gzipped: NAME.gz is used when it exists, else NAME (either may be gzipped
 * or plain: zlib reads both). The images file must be IDX type ubyte (magic 0x00000803), float32
 * (0x00000D03) or float64 (0x00000E03) with three dimensions, the labels file ubyte with one
 * (0x00000801). Float images are converted to fp32 and must all be finite (and, for float64, within
 * fp32's range): the first that is not is refused with AMP_ERR_FORMAT and a message naming the file,
 * the image index and the pixel; the counts must agree, be non-zero, and the
 * files must hold exactly the data their headers declare (no more, no less). alloc NULL: malloc.
 * Returns AMP_OK or an error status with a message in err (see the top of this file). */
int amp_image_dataset_load(const char *dir, bool train, const amp_allocator *alloc, amp_image_dataset *out,
                           char *err, size_t err_size);
/* Frees what the dataset owns and zeroes it. NULL, or a zeroed dataset, is fine. */
void amp_image_dataset_free(amp_image_dataset *d);

/* A batch: images indices[0..n) as fp32 x[n, rows, cols] = (pixel / 255 - mean) / std (float files:
 * (value - mean) / std) and their labels
 * y[n]. Every value is the same fp32 computation, so batches are bit-reproducible. Returns AMP_OK,
 * AMP_ERR_NULL_POINTER, or AMP_ERR_INVALID_ARGUMENT (an index outside [0, count), n < 0, std not
 * positive and finite), in which case nothing is written. */
int amp_image_dataset_batch(const amp_image_dataset *d, const int64_t *indices, int64_t n, float mean, float std,
                            float *x, int32_t *y);

/* The mean and standard deviation of every pixel of the dataset as amp_image_dataset_batch reads it
 * before normalizing (pixel / 255, or the float value): pass them (as float) to
 * amp_image_dataset_batch to normalize as torchvision's Normalize with the training set's statistics.
 * The statistics of amp_mean_std over those values, computed exactly for ubyte pixels (from their
 * counts). Returns AMP_OK, AMP_ERR_NULL_POINTER or AMP_ERR_INVALID_ARGUMENT (fewer than 2 values);
 * nothing is written on error. */
int amp_image_dataset_mean_std(const amp_image_dataset *d, double *mean, double *std);

/* ---- Text (characters, or words with a byte fallback) ------------------------------------------- */

/* Token ids: ids [0, byte_count) are the byte values present in the corpus, ascending; with a word
 * vocabulary, ids [byte_count, vocab_size) are words, most frequent first. Every token stands for a
 * fixed string of bytes (token_offset/token_text), and the token sequence spells the corpus exactly,
 * so bits per character can be computed for either kind from the bytes the targets cover. */
typedef struct amp_text_corpus {
    int vocab_size;           /* byte_count + the words kept */
    int byte_count;           /* distinct byte values present (1..256) */
    int16_t byte_to_id[256];  /* token id of each byte value, -1 where the byte is absent */
    uint8_t id_to_byte[256];  /* [byte_count]: the byte values present, ascending (rest 0) */
    int32_t *train;           /* [train_len] token ids: the corpus's first part */
    int64_t train_len;
    int32_t *heldout;         /* [heldout_len] token ids: the last holdout_fraction of it */
    int64_t heldout_len;
    uint32_t *token_offset;   /* [vocab_size + 1]: token id spells token_text[token_offset[id] ..
                                 token_offset[id + 1]) */
    char *token_text;
    amp_allocator allocator;  /* what allocated the tokens and the tables */
} amp_text_corpus;

/* Loads a text corpus from `path`: a file, or a directory whose regular files (not recursing; names
 * starting with '.' and the fortune index files *.dat and *.u8 skipped) are concatenated in strcmp
 * order of their names, byte for byte. The vocabulary is the byte values present, ascending: one
 * token per byte. The last floor(total * holdout_fraction) bytes are held out; holdout_fraction must
 * lie in [0, 1). The corpus must hold at least 2 bytes and its training part at least 2 tokens (one
 * input/target pair). alloc NULL: malloc. Returns AMP_OK or an error status with a message in err. */
int amp_text_corpus_load(const char *path, double holdout_fraction, const amp_allocator *alloc,
                         amp_text_corpus *out, char *err, size_t err_size);

/* The most words a word vocabulary may keep. */
#define AMP_TEXT_MAX_WORDS (1 << 20)
/* The longest word (in bytes, a leading space included) that can become a token. */
#define AMP_TEXT_MAX_WORD_BYTES 32

/* As amp_text_corpus_load, with a word-level vocabulary on top of the bytes (a large-vocabulary
 * language model, where each wrong word's share of the loss gradient is tiny). A word is a run of
 * ASCII letters, together with the single space before it when there is one (" the" and "the" are
 * different tokens, as in GPT-2's tokenizer), at most AMP_TEXT_MAX_WORD_BYTES long. The max_words
 * words that occur most often in the training part (at least twice; ties broken by byte order) become
 * tokens; the held-out part is never looked at to choose them. A word out of the vocabulary is spelled
 * as its space token (if the bare word is in the vocabulary) or byte by byte, so nothing is lost. The
 * split point is in bytes, as for amp_text_corpus_load, and the two parts are tokenized separately.
 * max_words must lie in [1, AMP_TEXT_MAX_WORDS]. */
int amp_text_corpus_load_words(const char *path, double holdout_fraction, int max_words, const amp_allocator *alloc,
                               amp_text_corpus *out, char *err, size_t err_size);

/* Frees what the corpus owns and zeroes it. NULL, or a zeroed corpus, is fine. */
void amp_text_corpus_free(amp_text_corpus *c);

/* A batch of n sequences of seq_len tokens from the training part (heldout false) or the held-out
 * part: x[b, t] = tokens[starts[b] + t] and y[b, t] = tokens[starts[b] + t + 1] (the next token),
 * both [n, seq_len] token ids. Each start must satisfy 0 <= start and start + seq_len + 1 <= length of
 * that part. Returns AMP_OK, AMP_ERR_NULL_POINTER or AMP_ERR_INVALID_ARGUMENT (nothing written). */
int amp_text_corpus_batch(const amp_text_corpus *c, bool heldout, const int64_t *starts, int64_t n,
                          int64_t seq_len, int32_t *x, int32_t *y);

/* The bytes the n tokens ids[] spell (ids outside the vocabulary count 0): the denominator of bits
 * per character. */
int64_t amp_text_corpus_bytes(const amp_text_corpus *c, const int32_t *ids, int64_t n);

/* ---- Token shards and BPE ---------------------------------------------------------------------- */

/* For corpora of BPE tokens (the two loaders below), the ids are the ranks of a tokenizer or the ids
 * stored in shards: byte_count is 0 and id_to_byte all 0; byte_to_id[v] is the rank of the one-byte
 * token v when a rank file is given, else -1. token_offset/token_text spell every rank's bytes when a
 * rank file is given (ranks with no token spell nothing), so amp_text_corpus_bytes counts the bytes
 * held-out tokens cover and bits per character stay per byte of text, comparable across byte, word
 * and BPE vocabularies; without a rank file every token spells nothing (amp_text_corpus_bytes is 0:
 * bits per character are unknown, the loss per token is all there is). */

/* True when path names token shards rather than text: it holds a glob character (*, ?, [), or it is a
 * regular file that starts with the shard magic 20240520 (little-endian; no text starts with those
 * four bytes, one of which, 0xf5, never occurs in UTF-8). */
bool amp_text_is_token_shards(const char *path);

/* Loads llm.c token shards (amp/tokenizer.h: version 1, uint16, or amp's version 2, uint32) as a
 * corpus. train_pattern and val_pattern are a file or a glob(3) pattern; the files a pattern matches
 * are concatenated in strcmp order of their names. val_pattern NULL: the last
 * floor(tokens * holdout_fraction) training tokens are held out (holdout_fraction in [0, 1)); else
 * every training token trains and the val shards are held out (holdout_fraction unused).
 * The vocabulary size: vocab_size when > 0; else the rank file's (ranks given); else the largest
 * size amp's writer stored in the shards' headers; else (llm.c's shards store none) the largest token
 * + 1 over all of them (llm.c's GPT-2 shards need 50257 given: their largest token is smaller).
 * ranks (NULL: none) is a tiktoken rank file whose tokens spell the ids (see above); pattern is not
 * needed for that and is not asked. Errors (AMP_ERR_FORMAT, one line naming the file): a shard whose
 * header disagrees with its length, bad magic or version; a token >= the vocabulary size ("FILE:
 * token at position P is T, not below the vocabulary size V"); a pattern that matches nothing
 * (AMP_ERR_IO); fewer than 2 training tokens. glob's own memory comes from malloc. */
int amp_text_corpus_load_shards(const char *train_pattern, const char *val_pattern, double holdout_fraction,
                                int64_t vocab_size, const char *ranks, const amp_allocator *alloc,
                                amp_text_corpus *out, char *err, size_t err_size);

/* What amp_text_corpus_load_bpe did with its token cache. */
typedef enum amp_token_cache_status {
    AMP_TOKEN_CACHE_OFF = 0,    /* no cache directory */
    AMP_TOKEN_CACHE_WRITTEN,    /* encoded, and the cache file written */
    AMP_TOKEN_CACHE_REUSED,     /* read from the cache file: nothing encoded */
    AMP_TOKEN_CACHE_UNWRITABLE  /* encoded; the cache file could not be written (the run goes on) */
} amp_token_cache_status;

typedef struct amp_token_cache_info {
    amp_token_cache_status status;
    char path[1024]; /* the cache file (empty with AMP_TOKEN_CACHE_OFF; truncated past 1023 bytes) */
} amp_token_cache_info;

/* The cache directory used when none is given: $AMP_CACHE_DIR when set and non-empty, else
 * $HOME/.cache/amp, written into buf (size bytes). Returns buf, or NULL when neither is set or buf is
 * too small. */
const char *amp_token_cache_default_dir(char *buf, size_t size);

/* Loads a text corpus (a file or directory, as amp_text_corpus_load) as BPE tokens: the bytes are split
 * first (the last floor(total * holdout_fraction) bytes are held out, as for bytes and words), then
 * each part is encoded on its own with the tiktoken rank file `ranks` and the pattern named `pattern`
 * ("gpt2" or "cl100k"; NULL: cl100k) by amp_tokenizer_encode (amp/tokenizer.h), using amp's thread
 * count. The vocabulary is the rank file's; token_offset/token_text spell its tokens (see above).
 * Cache: cache_dir NULL means amp_token_cache_default_dir, "" no cache. The tokens are stored in
 * CACHE_DIR/bpe-KEY.tokens, KEY a 128-bit hash of the corpus bytes, the split point, every token's
 * bytes and the pattern, written atomically (a temp file renamed; the directory is created); a later
 * load with the same key reads it instead of encoding. A cache file that is short, corrupt (its
 * checksum), of another key, or holds a token outside the vocabulary is ignored and rewritten.
 * info (may be NULL) says what happened. */
int amp_text_corpus_load_bpe(const char *path, double holdout_fraction, const char *ranks, const char *pattern,
                             const char *cache_dir, amp_token_cache_info *info, const amp_allocator *alloc,
                             amp_text_corpus *out, char *err, size_t err_size);

/* ---- Statistics -------------------------------------------------------------------------------- */

/* The mean and standard deviation of x[0..n) as torch's x.mean() and x.std(): the std with Bessel's
 * correction (the squared deviations summed, divided by n - 1). Computed in double in two passes (the
 * mean, then the squared deviations from it). Returns AMP_OK, AMP_ERR_NULL_POINTER or
 * AMP_ERR_INVALID_ARGUMENT (n < 2); a non-finite value gives a NaN or infinite result. Nothing is
 * written on error. */
int amp_mean_std(const float *x, int64_t n, double *mean, double *std);

/* ---- Order ------------------------------------------------------------------------------------- */

/* Writes a uniformly random permutation of 0..n-1 into idx[n]: Fisher-Yates driven by a counter-based
 * generator keyed by (seed, epoch), so epoch e's order depends only on (n, seed, epoch) and a resumed
 * run reproduces it without replaying earlier epochs. n <= 0: nothing. */
void amp_shuffle_indices(int64_t *idx, int64_t n, uint64_t seed, uint64_t epoch);

#ifdef __cplusplus
}
#endif
#endif /* AMP_DATA_H */
