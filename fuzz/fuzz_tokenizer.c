/* Fuzz target for the BPE tokenizer: byte 0 picks the mode, the rest is the input.
 *   0, 1: the input is text, encoded under GPT-2's (0) or cl100k's (1) pattern with a small rank table
 *         trained in-process (merges across spaces, letters, digits and multi-byte characters), and
 *         decode(encode(x)) must be x, every token in range, and a second encoding equal to the first;
 *   2:    the input is a rank file: loading it must succeed or fail cleanly, and a table that loads
 *         must round-trip a fixed text and the input itself. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp.h"
#include "fuzz_temp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static amp_tokenizer *tables[2];

static const char TRAIN[] = "In the beginning God created the heaven and the earth. It's 12345 o'clock!!\n"
                            "  \t\t  naïve café 日本語 😀👍🏽 \xe1\xa0\x8e\xe1\xa0\x8e ſ's 'LL 3.14159 \r\n\r\n"
                            "aaaaaaaa bbbb    spaces\n\n\n  x";

static void init_tables(void) {
    if (tables[0]) return;
    const uint8_t *texts[1] = {(const uint8_t *)TRAIN};
    const size_t lens[1] = {sizeof TRAIN - 1};
    static const char *const names[2] = {"gpt2", "cl100k"};
    for (int i = 0; i < 2; i++)
        if (amp_tokenizer_train(texts, lens, 1, 400, amp_tokenizer_pattern_named(names[i]), &tables[i], NULL, 0) != AMP_OK)
            abort();
}

static void round_trip(const amp_tokenizer *t, const uint8_t *x, size_t n) {
    amp_tokens a = {0}, b = {0};
    if (amp_tokenizer_encode(t, x, n, &a) != AMP_OK || amp_tokenizer_encode(t, x, n, &b) != AMP_OK) abort();
    if (a.len != b.len || (a.len && memcmp(a.data, b.data, a.len * sizeof *a.data) != 0)) abort();
    if (n && !a.len) abort();
    for (size_t i = 0; i < a.len; i++)
        if (!amp_tokenizer_token(t, a.data[i], NULL)) abort();
    uint8_t *back = NULL;
    size_t back_len = 0;
    if (amp_tokenizer_decode(t, a.data, a.len, &back, &back_len) != AMP_OK) abort();
    if (back_len != n || (n && memcmp(back, x, n) != 0)) abort();
    amp_tokenizer_bytes_free(back);
    amp_tokens_free(&a), amp_tokens_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    init_tables();
    const int mode = data[0] % 3;
    if (mode < 2) {
        round_trip(tables[mode], data + 1, size - 1);
        return 0;
    }
    const char *path = fuzz_temp_path("ranks", ".tiktoken");
    if (fuzz_write_file(path, data + 1, size - 1) != 0) abort();
    char err[512];
    amp_tokenizer *t = (amp_tokenizer *)1;
    const int rc = amp_tokenizer_load(path, NULL, &t, err, sizeof err);
    if (rc != AMP_OK) {
        if (t != NULL || err[0] == '\0') abort();
        return 0;
    }
    round_trip(t, (const uint8_t *)TRAIN, sizeof TRAIN - 1);
    round_trip(t, data + 1, size - 1);
    amp_tokenizer_free(t);
    return 0;
}
