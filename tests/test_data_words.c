/* The word vocabulary of amp_text_corpus_load_words: which words become tokens (counted by hand on a
 * small text), that the tokens spell the text back exactly (that one, and random texts with a printed
 * seed), that the held-out part never chooses words, the byte fallbacks, and the errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp.h"
#include "harness.h"
#include "test_util.h"
#include "tests.h"

enum { ERR_SIZE = 256 };

/* Spells tokens[0..n) into out (NUL-terminated); returns its length, or -1 past cap or on a bad id. */
static long spell(const amp_text_corpus *c, const int32_t *tokens, int64_t n, char *out, size_t cap) {
    size_t len = 0;
    for (int64_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size) return -1;
        const uint32_t a = c->token_offset[tokens[i]], b = c->token_offset[tokens[i] + 1];
        if (len + (b - a) + 1 > cap) return -1;
        memcpy(out + len, c->token_text + a, b - a);
        len += b - a;
    }
    out[len] = '\0';
    return (long)len;
}

static bool token_is(const amp_text_corpus *c, int id, const char *s) {
    if (id < 0 || id >= c->vocab_size) return false;
    const uint32_t a = c->token_offset[id], b = c->token_offset[id + 1];
    return b - a == strlen(s) && memcmp(c->token_text + a, s, b - a) == 0;
}

static int find_token(const amp_text_corpus *c, const char *s) {
    for (int id = 0; id < c->vocab_size; id++)
        if (token_is(c, id, s)) return id;
    return -1;
}

void test_data_words(void) {
    char dir[64], path[160], err[ERR_SIZE];
    snprintf(dir, sizeof dir, "/tmp/amp_words_XXXXXX");
    if (!CHECK(mkdtemp(dir) != NULL)) return;
    snprintf(path, sizeof path, "%s/t.txt", dir);

    /* Counted by hand over the training part (the first 60 bytes):
     *   " cat" 3, " the" 2, "The" 2, " dog" 2 (more held out), " sat" 1, " on" 1, " mat" 1, "xxxxxx" 1;
     *   "a" twice as a bare word (after a newline and after a comma: no space before it).
     * Ranked by count, then bytes: " cat" (3); " dog", " the", "The", "a" (2 each, byte order). */
    const char *text = "The cat sat on the cat.\nThe cat, the dog mat.\na,a dog\n" /* 54 */
                       "xxxxxx"                                                 /* to 60 */
                       " dog dog zebra zebra";                                  /* 20 held out */
    const size_t n = strlen(text);
    CHECK_EQ_INT((int)n, 80);
    if (!CHECK(test_write_file(path, text, n, false))) return;
    amp_text_corpus c;
    int st = amp_text_corpus_load_words(path, 0.25, 100, NULL, &c, err, sizeof err);
    if (CHECK_MSG(st == AMP_OK, "%d %s", st, err)) {
        CHECK_EQ_INT(c.vocab_size, c.byte_count + 5);
        const char *order[5] = {" cat", " dog", " the", "The", "a"};
        for (int k = 0; k < 5; k++) CHECK_MSG(token_is(&c, c.byte_count + k, order[k]), "word %d", k);
        CHECK_EQ_INT(find_token(&c, " sat"), -1);   /* once */
        CHECK_EQ_INT(find_token(&c, " zebra"), -1); /* held out only */
        /* The byte tokens come first and are the bytes present, ascending. */
        for (int i = 0; i < c.byte_count; i++) CHECK(token_is(&c, i, (char[]){(char)c.id_to_byte[i], 0}));
        CHECK_EQ_INT(c.byte_to_id['z'] >= 0, 1); /* held-out bytes are still representable */
        /* The parts spell the text back. */
        char got[128];
        CHECK_EQ_INT((int)spell(&c, c.train, c.train_len, got, sizeof got), 60);
        CHECK(memcmp(got, text, 60) == 0);
        CHECK_EQ_INT((int)spell(&c, c.heldout, c.heldout_len, got, sizeof got), 20);
        CHECK_STR_EQ(got, text + 60);
        /* "The cat sat on the cat." = The | cat | ' ' s a t | ' ' o n | the | cat | '.' */
        CHECK_EQ_INT(c.train[0], c.byte_count + 3);
        CHECK_EQ_INT(c.train[1], c.byte_count + 0);
        CHECK_EQ_INT(c.train[2], c.byte_to_id[' ']);
        CHECK_EQ_INT(c.train[3], c.byte_to_id['s']);
        CHECK_EQ_INT(c.heldout[0], c.byte_count + 1); /* " dog" */
        CHECK_EQ_INT(amp_text_corpus_bytes(&c, c.train, c.train_len), 60);
        CHECK_EQ_INT(amp_text_corpus_bytes(&c, (const int32_t[]){c.byte_count, 0, -1, c.vocab_size}, 4), 5);
        /* Batches are token windows, as for bytes. */
        int32_t x[4], y[4];
        CHECK_EQ_INT(amp_text_corpus_batch(&c, false, (const int64_t[]){0}, 1, 4, x, y), AMP_OK);
        CHECK_EQ_INT(x[1], y[0]);
        amp_text_corpus_free(&c);
        CHECK(c.train == NULL && c.token_offset == NULL);
    }

    /* max_words keeps the most frequent: 1 word -> " cat" only. */
    st = amp_text_corpus_load_words(path, 0.25, 1, NULL, &c, err, sizeof err);
    if (CHECK_MSG(st == AMP_OK, "%d %s", st, err)) {
        CHECK_EQ_INT(c.vocab_size, c.byte_count + 1);
        CHECK(token_is(&c, c.byte_count, " cat"));
        amp_text_corpus_free(&c);
    }

    /* The space fallback: " Fox" is out of the vocabulary but "Fox" is in it -> ' ' + "Fox". A word
     * longer than AMP_TEXT_MAX_WORD_BYTES is never a token, however often it occurs. */
    char text2[400];
    char longw[AMP_TEXT_MAX_WORD_BYTES + 2];
    memset(longw, 'q', sizeof longw - 1);
    longw[sizeof longw - 1] = '\0';
    snprintf(text2, sizeof text2, "Fox\nFox\n%s %s %s. Fox", longw, longw, longw);
    if (CHECK(test_write_file(path, text2, strlen(text2), false))) {
        st = amp_text_corpus_load_words(path, 0.0, 10, NULL, &c, err, sizeof err);
        if (CHECK_MSG(st == AMP_OK, "%d %s", st, err)) {
            const int fox = find_token(&c, "Fox");
            CHECK(fox >= 0);
            CHECK_EQ_INT(c.vocab_size, c.byte_count + 1);
            CHECK_EQ_INT((int)c.train[c.train_len - 1], fox);
            CHECK_EQ_INT((int)c.train[c.train_len - 2], c.byte_to_id[' ']);
            char got[400];
            CHECK_EQ_INT((int)spell(&c, c.train, c.train_len, got, sizeof got), (int)strlen(text2));
            CHECK_STR_EQ(got, text2);
            amp_text_corpus_free(&c);
        }
    }

    /* Random texts from a small alphabet (words repeat) spell back exactly, at several vocabularies. */
    uint64_t s = harness_seed();
    harness_note("seed 0x%llx", (unsigned long long)s);
    static const char alphabet[] = "aab cdE e  .\n,'X";
    enum { LEN = 20000 };
    char *rnd = malloc(LEN + 1), *back = malloc(LEN + 1);
    if (CHECK(rnd && back)) {
        for (int i = 0; i < LEN; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            rnd[i] = alphabet[s % (sizeof alphabet - 1)];
        }
        rnd[LEN] = '\0';
        if (CHECK(test_write_file(path, rnd, LEN, false))) {
            const int sizes[3] = {1, 50, AMP_TEXT_MAX_WORDS};
            for (int k = 0; k < 3; k++) {
                st = amp_text_corpus_load_words(path, 0.1, sizes[k], NULL, &c, err, sizeof err);
                if (!CHECK_MSG(st == AMP_OK, "%d %s", st, err)) continue;
                CHECK(c.vocab_size <= c.byte_count + sizes[k]);
                CHECK(c.vocab_size > c.byte_count);
                /* Words make it shorter (k = 0's one word may be a single letter). */
                if (k > 0) CHECK(c.train_len + c.heldout_len < LEN);
                const long a = spell(&c, c.train, c.train_len, back, LEN + 1);
                CHECK_EQ_INT((int)a, LEN - LEN / 10);
                const long b = spell(&c, c.heldout, c.heldout_len, back + (a > 0 ? a : 0), LEN + 1 - (a > 0 ? a : 0));
                CHECK_EQ_INT((int)b, LEN / 10);
                CHECK_MSG(a > 0 && b > 0 && memcmp(back, rnd, LEN) == 0, "vocabulary %d", sizes[k]);
                amp_text_corpus_free(&c);
            }
        }
    }
    free(rnd);
    free(back);

    /* Errors. */
    CHECK_EQ_INT(amp_text_corpus_load_words(path, 0.1, 0, NULL, &c, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "words") != NULL, "%s", err);
    CHECK_EQ_INT(amp_text_corpus_load_words(path, 0.1, AMP_TEXT_MAX_WORDS + 1, NULL, &c, err, sizeof err),
                 AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_text_corpus_load_words(path, 1.0, 10, NULL, &c, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_text_corpus_load_words(NULL, 0.1, 10, NULL, &c, err, sizeof err), AMP_ERR_NULL_POINTER);
    char missing[200];
    snprintf(missing, sizeof missing, "%s/missing.txt", dir);
    CHECK_EQ_INT(amp_text_corpus_load_words(missing, 0.1, 10, NULL, &c, err, sizeof err), AMP_ERR_IO);
    CHECK_MSG(strstr(err, "missing.txt: not found") != NULL, "%s", err);
    CHECK(c.train == NULL);
    /* One byte left for training is one token: too small. */
    if (CHECK(test_write_file(path, "ab ab ab", 8, false))) {
        CHECK_EQ_INT(amp_text_corpus_load_words(path, 0.0, 10, NULL, &c, err, sizeof err), AMP_OK);
        CHECK_EQ_INT((int)c.train_len, 4); /* "ab" once (bytes) and " ab" twice (a word) */
        amp_text_corpus_free(&c);
        CHECK_EQ_INT(amp_text_corpus_load_words(path, 0.875, 10, NULL, &c, err, sizeof err), AMP_ERR_FORMAT);
        CHECK_MSG(strstr(err, "too small") != NULL, "%s", err);
    }
    test_remove_tree(dir);
}
