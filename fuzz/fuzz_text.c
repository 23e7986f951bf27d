/* Fuzz target for the text corpus loaders: byte 0 picks the holdout fraction (byte / 256, so always
 * in [0, 1)), the rest is written to a per-process temp file and loaded as bytes, then with a word
 * vocabulary of a size the byte also picks; on success a few batches at valid starts are fetched from
 * both parts, an invalid start must be refused, and the word tokens must spell the file back. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp.h"
#include "fuzz_temp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_part(const amp_text_corpus *c, bool heldout, int64_t len) {
    if (len < 2) return;
    int64_t seq_len = len - 1 < 16 ? len - 1 : 16;
    int64_t starts[3] = {0, (len - seq_len - 1) / 2, len - seq_len - 1};
    int32_t *x = malloc(sizeof(int32_t) * (size_t)(3 * seq_len));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)(3 * seq_len));
    if (!x || !y) abort();
    if (amp_text_corpus_batch(c, heldout, starts, 3, seq_len, x, y) != AMP_OK) abort();
    for (int64_t i = 0; i < 3 * seq_len; i++)
        if (x[i] < 0 || x[i] >= c->vocab_size || y[i] < 0 || y[i] >= c->vocab_size) abort();
    int64_t bad = len - seq_len; /* one past the last valid start */
    if (amp_text_corpus_batch(c, heldout, &bad, 1, seq_len, x, y) != AMP_ERR_INVALID_ARGUMENT) abort();
    free(x), free(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const double holdout = data[0] / 256.0;
    const char *path = fuzz_temp_path("text", ".txt");
    if (fuzz_write_file(path, data + 1, size - 1) != 0) abort();
    char err[512];
    amp_text_corpus c;
    const int rc = amp_text_corpus_load(path, holdout, NULL, &c, err, sizeof err);
    if (rc != AMP_OK) {
        if (c.train != NULL || c.heldout != NULL) abort();
        amp_text_corpus_free(&c);
        return 0;
    }
    if (c.vocab_size < 1 || c.vocab_size > 256 || c.train_len < 2 || c.heldout_len < 0) abort();
    if ((size_t)(c.train_len + c.heldout_len) != size - 1) abort();
    check_part(&c, false, c.train_len);
    check_part(&c, true, c.heldout_len);
    amp_text_corpus_free(&c);

    const int words = 1 + data[0] % 64;
    if (amp_text_corpus_load_words(path, holdout, words, NULL, &c, err, sizeof err) != AMP_OK) {
        if (c.train != NULL || c.token_offset != NULL) abort();
        return 0;
    }
    if (c.vocab_size < c.byte_count || c.vocab_size > c.byte_count + words || c.train_len < 2) abort();
    /* Lossless: the tokens spell the file, the training part first. */
    size_t at = 1;
    for (int part = 0; part < 2; part++) {
        const int32_t *t = part ? c.heldout : c.train;
        const int64_t n = part ? c.heldout_len : c.train_len;
        for (int64_t i = 0; i < n; i++) {
            if (t[i] < 0 || t[i] >= c.vocab_size) abort();
            const uint32_t a = c.token_offset[t[i]], b = c.token_offset[t[i] + 1];
            if (b < a || at + (b - a) > size || memcmp(c.token_text + a, data + at, b - a) != 0) abort();
            at += b - a;
        }
    }
    if (at != size) abort();
    check_part(&c, false, c.train_len);
    check_part(&c, true, c.heldout_len);
    amp_text_corpus_free(&c);
    return 0;
}
