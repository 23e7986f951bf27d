/* Token corpora (amp/data.h, "Token shards and BPE"): llm.c shards one by one and by glob, their
 * vocabulary size, bad shards; text encoded with a BPE, split by bytes, and its cache (written,
 * reused, corrupt, off); and amp_tokenizer_encode_parallel against amp_tokenizer_encode on random
 * texts built to cut pieces across the thread boundaries. Files are written here, in a mkdtemp
 * directory; the ranks are the tokenizer fixture's (tests/fixtures/tokenizer/ranks.tiktoken). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp.h"
#include "harness.h"
#include "test_util.h"
#include "tests.h"

static bool make_tmpdir(char *dir, size_t size) {
    snprintf(dir, size, "/tmp/amp_test_shards_XXXXXX");
    return CHECK_MSG(mkdtemp(dir) != NULL, "mkdtemp failed");
}

static void ranks_path(char *path, size_t size) {
    const char *dir = getenv("AMP_FIXTURE_DIR");
    snprintf(path, size, "%s/tokenizer/ranks.tiktoken", dir && *dir ? dir : "tests/fixtures");
}

static void remove_tree(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) harness_note("could not remove %s", dir);
}

/* A shard as llm.c writes it: version 1, nothing in header int 3. */
static void write_llmc_shard(const char *path, const uint16_t *tok, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!CHECK(f != NULL)) return;
    int32_t header[256] = {20240520, 1, (int32_t)n};
    fwrite(header, 4, 256, f);
    fwrite(tok, 2, n, f);
    fclose(f);
}

void test_data_shards_load(void) {
    char dir[64], a[128], b[128], all[128], pat[128], err[256];
    if (!make_tmpdir(dir, sizeof dir)) return;
    enum { N = 1000 };
    uint32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)((i * 7919) % 300);
    snprintf(a, sizeof a, "%s/s_000.bin", dir);
    snprintf(b, sizeof b, "%s/s_001.bin", dir);
    snprintf(all, sizeof all, "%s/all.bin", dir);
    snprintf(pat, sizeof pat, "%s/s_*.bin", dir);
    /* written in the other order: the glob's files are read by name */
    CHECK(amp_token_shard_write(b, tok + 600, N - 600, 300, err, sizeof err) == AMP_OK);
    CHECK(amp_token_shard_write(a, tok, 600, 300, err, sizeof err) == AMP_OK);
    CHECK(amp_token_shard_write(all, tok, N, 300, err, sizeof err) == AMP_OK);
    CHECK(amp_text_is_token_shards(a) && amp_text_is_token_shards(pat) && !amp_text_is_token_shards(dir));

    amp_text_corpus g, one;
    CHECK_MSG(amp_text_corpus_load_shards(pat, NULL, 0.1, 0, NULL, NULL, &g, err, sizeof err) == AMP_OK, "%s", err);
    CHECK_MSG(amp_text_corpus_load_shards(all, NULL, 0.1, 0, NULL, NULL, &one, err, sizeof err) == AMP_OK, "%s", err);
    CHECK_EQ_INT(g.train_len, N - N / 10);
    CHECK_EQ_INT(g.heldout_len, N / 10);
    CHECK_EQ_INT(g.vocab_size, 300); /* amp's writer stored it */
    bool same = g.train_len == one.train_len && g.heldout_len == one.heldout_len;
    for (int i = 0; same && i < N; i++) same = g.train[i] == (int32_t)tok[i] && one.train[i] == (int32_t)tok[i];
    CHECK_MSG(same, "the glob's tokens are the single shard's, in name order");
    CHECK(g.heldout == g.train + g.train_len && g.heldout[0] == (int32_t)tok[N - N / 10]);
    /* without a rank file the tokens spell nothing: no bytes, no bits per character */
    CHECK(amp_text_corpus_bytes(&g, g.heldout, g.heldout_len) == 0 && g.byte_count == 0 && g.byte_to_id['a'] == -1);
    amp_text_corpus_free(&one);

    /* held-out shards: every training token trains */
    CHECK_MSG(amp_text_corpus_load_shards(a, b, 0.1, 0, NULL, NULL, &one, err, sizeof err) == AMP_OK, "%s", err);
    CHECK(one.train_len == 600 && one.heldout_len == N - 600 && one.heldout[0] == (int32_t)tok[600]);
    amp_text_corpus_free(&one);

    /* llm.c's shards store no vocabulary: the largest id + 1, or the caller's */
    uint16_t small[5] = {3, 9, 4, 1, 0};
    write_llmc_shard(a, small, 5);
    CHECK(amp_text_corpus_load_shards(a, NULL, 0.0, 0, NULL, NULL, &one, err, sizeof err) == AMP_OK);
    CHECK_EQ_INT(one.vocab_size, 10);
    amp_text_corpus_free(&one);
    CHECK(amp_text_corpus_load_shards(a, NULL, 0.0, 50257, NULL, NULL, &one, err, sizeof err) == AMP_OK);
    CHECK_EQ_INT(one.vocab_size, 50257);
    amp_text_corpus_free(&one);
    /* an id at or past the vocabulary: named by file and position */
    CHECK(amp_text_corpus_load_shards(pat, NULL, 0.0, 8, NULL, NULL, &one, err, sizeof err) == AMP_ERR_FORMAT);
    CHECK_MSG(strstr(err, "s_000.bin: token at position 1 is 9, not below the vocabulary size 8") != NULL, "%s", err);
    CHECK(amp_text_corpus_load_shards(pat, NULL, 0.0, 250, NULL, NULL, &one, err, sizeof err) == AMP_ERR_FORMAT);
    size_t first_bad = 0; /* in s_001.bin: tokens 600.. of tok */
    while (tok[600 + first_bad] < 250) first_bad++;
    char want[160];
    snprintf(want, sizeof want, "s_001.bin: token at position %zu is %u", first_bad, tok[600 + first_bad]);
    CHECK_MSG(strstr(err, want) != NULL, "%s (want %s)", err, want);
    CHECK(one.train == NULL && one.vocab_size == 0);

    /* a header that lies about the length: refused, naming the file */
    FILE *f = fopen(b, "r+b");
    if (f) {
        const int32_t lie = 401;
        fseek(f, 8, SEEK_SET);
        fwrite(&lie, 4, 1, f);
        fclose(f);
    }
    CHECK(amp_text_corpus_load_shards(pat, NULL, 0.1, 0, NULL, NULL, &one, err, sizeof err) == AMP_ERR_FORMAT);
    CHECK_MSG(strstr(err, "s_001.bin: the header says 401 tokens") != NULL, "%s", err);
    char none[160];
    snprintf(none, sizeof none, "%s/nothing_*.bin", dir);
    CHECK(amp_text_corpus_load_shards(none, NULL, 0.1, 0, NULL, NULL, &one, err, sizeof err) == AMP_ERR_IO);
    CHECK_MSG(strstr(err, "no training shard matches") != NULL, "%s", err);

    /* with the fixture's ranks the ids spell their tokens */
    char ranks[512];
    ranks_path(ranks, sizeof ranks);
    CHECK_MSG(amp_text_corpus_load_shards(all, NULL, 0.1, 0, ranks, NULL, &one, err, sizeof err) == AMP_OK, "%s", err);
    amp_tokenizer *t = NULL;
    CHECK(amp_tokenizer_load(ranks, NULL, &t, err, sizeof err) == AMP_OK);
    if (t && one.token_offset) {
        CHECK_EQ_INT(one.vocab_size, (int)amp_tokenizer_vocab_size(t));
        int64_t want_bytes = 0;
        for (int64_t i = 0; i < one.heldout_len; i++) {
            size_t len;
            amp_tokenizer_token(t, (uint32_t)one.heldout[i], &len);
            want_bytes += (int64_t)len;
        }
        CHECK_EQ_INT(amp_text_corpus_bytes(&one, one.heldout, one.heldout_len), want_bytes);
        bool spelled = true;
        for (uint32_t r = 0; r < amp_tokenizer_vocab_size(t) && spelled; r++) {
            size_t len;
            const uint8_t *s = amp_tokenizer_token(t, r, &len);
            spelled = one.token_offset[r + 1] - one.token_offset[r] == len &&
                      (!len || memcmp(one.token_text + one.token_offset[r], s, len) == 0);
        }
        CHECK_MSG(spelled, "token_text spells every rank's bytes");
        CHECK_EQ_INT(one.byte_to_id['a'], amp_tokenizer_encode(t, "a", 1, &(amp_tokens){0}) == AMP_OK ? 'a' : -2);
    }
    amp_tokenizer_free(t);
    amp_text_corpus_free(&one);
    amp_text_corpus_free(&g);
    remove_tree(dir);
}

/* The tokens' bytes, concatenated (decode through the corpus's own tables). */
static size_t spell(const amp_text_corpus *c, const int32_t *ids, int64_t n, char *out) {
    size_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint32_t o = c->token_offset[ids[i]], e = c->token_offset[ids[i] + 1];
        memcpy(out + at, c->token_text + o, e - o);
        at += e - o;
    }
    return at;
}

void test_data_bpe_corpus(void) {
    char dir[64], text_path[128], cache[128], ranks[512], err[256];
    if (!make_tmpdir(dir, sizeof dir)) return;
    ranks_path(ranks, sizeof ranks);
    snprintf(text_path, sizeof text_path, "%s/text.txt", dir);
    snprintf(cache, sizeof cache, "%s/cache/sub", dir); /* created by the loader */
    static char text[20000];
    size_t n = 0;
    test_rng rng = {harness_seed()};
    harness_note("seed %llu", (unsigned long long)rng.state);
    static const char *const words[] = {"the ", "cat ", "sat", " on", "\n", "mat. ", "It's ", "1234", "  ", "caf\xc3\xa9 "};
    while (n < sizeof text - 16) {
        const char *w = words[test_rng_below(&rng, 10)];
        memcpy(text + n, w, strlen(w));
        n += strlen(w);
    }
    FILE *f = fopen(text_path, "wb");
    if (!CHECK(f != NULL)) return;
    fwrite(text, 1, n, f);
    fclose(f);

    amp_text_corpus c, d;
    amp_token_cache_info info;
    CHECK_MSG(amp_text_corpus_load_bpe(text_path, 0.1, ranks, "gpt2", cache, &info, NULL, &c, err, sizeof err) == AMP_OK,
              "%s", err);
    CHECK_EQ_INT(info.status, AMP_TOKEN_CACHE_WRITTEN);
    CHECK(strncmp(info.path, cache, strlen(cache)) == 0);
    /* split by bytes first: the held-out tokens spell exactly the last 10% of the bytes */
    const size_t held = (size_t)((double)n * 0.1);
    static char back[20000];
    CHECK(spell(&c, c.train, c.train_len, back) == n - held && memcmp(back, text, n - held) == 0);
    CHECK(spell(&c, c.heldout, c.heldout_len, back) == held && memcmp(back, text + n - held, held) == 0);
    CHECK_EQ_INT(amp_text_corpus_bytes(&c, c.heldout, c.heldout_len), (int64_t)held);

    /* the second load reads the cache: the same tokens */
    CHECK(amp_text_corpus_load_bpe(text_path, 0.1, ranks, "gpt2", cache, &info, NULL, &d, err, sizeof err) == AMP_OK);
    CHECK_EQ_INT(info.status, AMP_TOKEN_CACHE_REUSED);
    CHECK(d.train_len == c.train_len && d.heldout_len == c.heldout_len &&
          memcmp(d.train, c.train, (size_t)(c.train_len + c.heldout_len) * sizeof *c.train) == 0);
    amp_text_corpus_free(&d);
    /* another pattern is another key */
    CHECK(amp_text_corpus_load_bpe(text_path, 0.1, ranks, "cl100k", cache, &info, NULL, &d, err, sizeof err) == AMP_OK);
    CHECK_EQ_INT(info.status, AMP_TOKEN_CACHE_WRITTEN);
    amp_text_corpus_free(&d);
    /* a corrupt cache (one token changed) is ignored and rewritten */
    char path[1100];
    snprintf(path, sizeof path, "%s", info.path);
    CHECK(amp_text_corpus_load_bpe(text_path, 0.1, ranks, "gpt2", cache, &info, NULL, &d, err, sizeof err) == AMP_OK);
    amp_text_corpus_free(&d);
    snprintf(path, sizeof path, "%s", info.path);
    f = fopen(path, "r+b");
    if (f) {
        fseek(f, 48 + 4 * 3, SEEK_SET);
        fputc(0x7f, f);
        fclose(f);
    }
    CHECK(amp_text_corpus_load_bpe(text_path, 0.1, ranks, "gpt2", cache, &info, NULL, &d, err, sizeof err) == AMP_OK);
    CHECK_EQ_INT(info.status, AMP_TOKEN_CACHE_WRITTEN);
    CHECK(d.train_len == c.train_len && memcmp(d.train, c.train, (size_t)c.train_len * sizeof *c.train) == 0);
    amp_text_corpus_free(&d);
    /* a truncated one too */
    CHECK(truncate(path, 100) == 0);
    CHECK(amp_text_corpus_load_bpe(text_path, 0.1, ranks, "gpt2", cache, &info, NULL, &d, err, sizeof err) == AMP_OK);
    CHECK_EQ_INT(info.status, AMP_TOKEN_CACHE_WRITTEN);
    CHECK(d.heldout_len == c.heldout_len && memcmp(d.heldout, c.heldout, (size_t)c.heldout_len * sizeof *c.heldout) == 0);
    amp_text_corpus_free(&d);
    /* no cache */
    CHECK(amp_text_corpus_load_bpe(text_path, 0.1, ranks, "gpt2", "", &info, NULL, &d, err, sizeof err) == AMP_OK);
    CHECK(info.status == AMP_TOKEN_CACHE_OFF && info.path[0] == '\0');
    amp_text_corpus_free(&d);
    /* errors: a bad pattern name, a missing rank file */
    CHECK(amp_text_corpus_load_bpe(text_path, 0.1, ranks, "o200k", "", NULL, NULL, &d, err, sizeof err) ==
          AMP_ERR_INVALID_ARGUMENT);
    CHECK(amp_text_corpus_load_bpe(text_path, 0.1, "/nonexistent/ranks", NULL, "", NULL, NULL, &d, err, sizeof err) ==
          AMP_ERR_IO);
    amp_text_corpus_free(&c);
    remove_tree(dir);
}

/* Random text from fragments chosen to straddle cuts: runs of spaces and newlines long enough to
 * cross a 64 KiB boundary, contractions, digits, multi-byte letters, CRLF. */
static size_t random_text(test_rng *rng, char *out, size_t cap) {
    static const char *const frag[] = {"In ", "the", " beginning", "\n", "\n\n", "\r\n", "  ", "\t", "'s", "'LL ",
                                       "123456", " 7", "\xc3\xa9t\xc3\xa9", " \xe4\xb8\xad\xe6\x96\x87", "!!", " ?",
                                       "\xf0\x9f\x98\x80", "x", "God", ".\n"};
    size_t n = 0;
    while (n + 70000 < cap) {
        if (test_rng_below(rng, 20000) == 0) { /* a long run of one space or newline kind */
            const char c = " \n"[test_rng_below(rng, 2)];
            const size_t k = 1000 + test_rng_below(rng, 69000);
            memset(out + n, c, k);
            n += k;
            continue;
        }
        const char *f = frag[test_rng_below(rng, 20)];
        memcpy(out + n, f, strlen(f));
        n += strlen(f);
    }
    return n;
}

void test_tokenizer_encode_parallel(void) {
    char ranks[512], err[256];
    ranks_path(ranks, sizeof ranks);
    test_rng rng = {harness_seed()};
    harness_note("seed %llu", (unsigned long long)rng.state);
    const size_t cap = harness_quick() ? 600000 : 1500000;
    char *text = malloc(cap);
    if (!CHECK(text != NULL)) return;
    for (int pat = 0; pat < 2; pat++) {
        amp_tokenizer *t = NULL;
        CHECK_MSG(amp_tokenizer_load(ranks, amp_tokenizer_pattern_named(pat ? "cl100k" : "gpt2"), &t, err, sizeof err) ==
                      AMP_OK, "%s", err);
        if (!t) break;
        for (int round = 0; round < 4; round++) {
            size_t n = random_text(&rng, text, cap);
            if (round == 1) memset(text + n / 4, ' ', n / 2); /* every middle cut falls inside one piece */
            /* digits over the middle: cl100k's pieces are 3 digits, so a cut usually falls inside one and
               the thread after it starts out of step (the serial stretch of the stitching) */
            for (size_t i = n / 4; round == 3 && i < 3 * n / 4; i++) text[i] = (char)('0' + i % 10);
            if (round == 2) text[n++] = (char)0xff, text[n++] = 'a'; /* an invalid tail */
            amp_tokens one = {0};
            CHECK(amp_tokenizer_encode(t, text, n, &one) == AMP_OK);
            for (int threads = 2; threads <= 9; threads += 3) {
                amp_tokens par = {0};
                CHECK(amp_tokenizer_encode_parallel(t, text, n, threads, &par) == AMP_OK);
                size_t first = 0;
                while (first < one.len && first < par.len && one.data[first] == par.data[first]) first++;
                CHECK_MSG(par.len == one.len && first == one.len,
                          "%s, round %d, %d threads: %zu tokens vs %zu, first difference at %zu", pat ? "cl100k" : "gpt2",
                          round, threads, par.len, one.len, first);
                amp_tokens_free(&par);
            }
            amp_tokens_free(&one);
        }
        amp_tokenizer_free(t);
    }
    free(text);
}
