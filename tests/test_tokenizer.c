/* The BPE tokenizer against tiktoken (tests/fixtures/tokenizer/, written by
 * tests/fixtures/gen_tokenizer_fixtures.py): token for token under both patterns, decode(encode(x)) == x,
 * rank files (round trip, malformed lines with their numbers), training, token shards. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp.h"
#include "harness.h"
#include "tests.h"

static void fixture_path(char *path, size_t size, const char *name) {
    const char *dir = getenv("AMP_FIXTURE_DIR");
    snprintf(path, size, "%s/tokenizer/%s", dir && *dir ? dir : "tests/fixtures", name);
}

static amp_tokenizer *load_fixture_ranks(const char *pattern) {
    char path[512], err[256];
    fixture_path(path, sizeof path, "ranks.tiktoken");
    amp_tokenizer *t = NULL;
    const int rc = amp_tokenizer_load(path, pattern, &t, err, sizeof err);
    CHECK_MSG(rc == AMP_OK, "%s", err);
    return t;
}

static size_t parse_hex(const char *s, uint8_t *out) {
    if (strcmp(s, "-") == 0) return 0;
    size_t n = 0;
    for (; s[0] && s[1]; s += 2) {
        unsigned v;
        sscanf(s, "%2x", &v);
        out[n++] = (uint8_t)v;
    }
    return n;
}

static size_t parse_tokens(const char *s, uint32_t *out, size_t cap) {
    size_t n = 0;
    for (char *end; n < cap; s = end) {
        const unsigned long v = strtoul(s, &end, 10);
        if (end == s) break;
        out[n++] = (uint32_t)v;
    }
    return n;
}

/* encode == want token for token, and decode gives the text back */
static bool check_case(const amp_tokenizer *t, const char *name, const uint8_t *text, size_t len, const uint32_t *want,
                       size_t n_want, int line) {
    amp_tokens got = {0};
    bool ok = CHECK_MSG(amp_tokenizer_encode(t, text, len, &got) == AMP_OK, "line %d: encode failed", line);
    size_t first = 0;
    while (first < got.len && first < n_want && got.data[first] == want[first]) first++;
    ok = ok && CHECK_MSG(got.len == n_want && first == n_want,
                         "cases.txt line %d (%s): %zu tokens, tiktoken %zu; first difference at %zu (%u vs %u)", line,
                         name, got.len, n_want, first, first < got.len ? got.data[first] : 0,
                         first < n_want ? want[first] : 0);
    uint8_t *back = NULL;
    size_t back_len = 0;
    ok = ok && CHECK(amp_tokenizer_decode(t, got.data, got.len, &back, &back_len) == AMP_OK);
    ok = ok && CHECK_MSG(back_len == len && memcmp(back, text, len) == 0, "line %d: decode(encode(x)) != x", line);
    amp_tokenizer_bytes_free(back);
    amp_tokens_free(&got);
    return ok;
}

void test_tokenizer_vs_tiktoken(void) {
    amp_tokenizer *gpt2 = load_fixture_ranks(amp_tokenizer_pattern_named("gpt2"));
    amp_tokenizer *cl100k = load_fixture_ranks(amp_tokenizer_pattern_named("cl100k"));
    char path[512];
    fixture_path(path, sizeof path, "cases.txt");
    FILE *f = fopen(path, "r");
    if (!CHECK_MSG(f && gpt2 && cl100k, "cannot open %s", path)) {
        if (f) fclose(f);
        amp_tokenizer_free(gpt2), amp_tokenizer_free(cl100k);
        return;
    }
    enum { MAX = 1 << 16 };
    char *line = malloc(4 * MAX);
    uint8_t *text = malloc(MAX);
    uint32_t *want = malloc(MAX * sizeof *want);
    size_t len = 0;
    int lineno = 0, cases = 0, failed = 0;
    while (fgets(line, 4 * MAX, f)) {
        lineno++;
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "text ", 5) == 0) {
            len = parse_hex(line + 5, text);
            cases++;
        } else if (strncmp(line, "gpt2", 4) == 0 || strncmp(line, "cl100k", 6) == 0) {
            const bool is_gpt2 = line[0] == 'g';
            const size_t n = parse_tokens(line + (is_gpt2 ? 4 : 6), want, MAX);
            if (!check_case(is_gpt2 ? gpt2 : cl100k, is_gpt2 ? "gpt2" : "cl100k", text, len, want, n, lineno) &&
                ++failed > 5)
                break;
        }
    }
    fclose(f);
    CHECK_MSG(cases >= 100, "%d cases in %s", cases, path);
    harness_note("%d texts, each under both patterns", cases);
    free(line), free(text), free(want);
    amp_tokenizer_free(gpt2), amp_tokenizer_free(cl100k);
}

/* Random bytes, random lengths: decode(encode(x)) == x, and encoding a piece is deterministic. */
void test_tokenizer_round_trip(void) {
    amp_tokenizer *t = load_fixture_ranks(NULL);
    if (!t) return;
    uint64_t s = harness_seed() | 1;
    harness_note("seed %llu", (unsigned long long)harness_seed());
    uint8_t buf[600];
    const int rounds = harness_quick() ? 300 : 3000;
    for (int r = 0; r < rounds; r++) {
        const size_t n = (size_t)(s >> 33) % sizeof buf;
        for (size_t i = 0; i < n; i++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            const uint8_t pick = (uint8_t)(s >> 56);
            /* mostly ASCII text and spaces, some high bytes */
            buf[i] = pick < 160 ? (uint8_t)"the cat's 12 ran  \n\t!ABC"[pick % 25] : (uint8_t)(s >> 40);
        }
        s = s * 6364136223846793005u + 1442695040888963407u;
        amp_tokens v = {0};
        uint8_t *back = NULL;
        size_t back_len = 0;
        const bool ok = amp_tokenizer_encode(t, buf, n, &v) == AMP_OK &&
                        amp_tokenizer_decode(t, v.data, v.len, &back, &back_len) == AMP_OK && back_len == n &&
                        memcmp(back, buf, n) == 0;
        amp_tokenizer_bytes_free(back);
        amp_tokens_free(&v);
        if (!CHECK_MSG(ok, "round %d (%zu bytes): decode(encode(x)) != x", r, n)) break;
    }
    amp_tokenizer_free(t);
}

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

void test_tokenizer_rank_files(void) {
    char path[256], err[256];
    snprintf(path, sizeof path, "/tmp/amp_test_ranks_%ld.tiktoken", (long)getpid());
    amp_tokenizer *t = load_fixture_ranks(NULL);
    if (!t) return;
    CHECK(amp_tokenizer_save(t, path, err, sizeof err) == AMP_OK);
    amp_tokenizer *u = NULL;
    CHECK(amp_tokenizer_load(path, NULL, &u, err, sizeof err) == AMP_OK);
    if (u) {
        CHECK_EQ_INT(amp_tokenizer_vocab_size(u), amp_tokenizer_vocab_size(t));
        for (uint32_t r = 0; r < amp_tokenizer_vocab_size(t); r++) {
            size_t a, b;
            const uint8_t *x = amp_tokenizer_token(t, r, &a), *y = amp_tokenizer_token(u, r, &b);
            if (!CHECK_MSG(a == b && (!a || memcmp(x, y, a) == 0), "rank %u differs after a save and load", r)) break;
        }
    }
    amp_tokenizer_free(u);
    /* malformed files: the error names the line */
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"IQ== 0\nIg== x\n", ":2: the rank is not a decimal number"},
        {"IQ== 0\n\nIQ== 1\n", ":3: repeats a token's bytes"},
        {"IQ== 0\nIg== 0\n", ":2: repeats a rank"},
        {"IQ==0\n", ":1: expected base64, a space and a rank"},
        {"I*== 0\n", ":1: the token is not base64"},
        {"IR== 0\n", ":1: the token is not base64"},
        {"IQ== 0\n", "no token is the byte 0x00"},
        {"IQ== \n", ":1: no rank after the space"},
        {"", "no tokens"},
        {"IQ== 100000\n", "ranks too sparse (the largest is 100000 for 1 tokens)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(write_text(path, bad[i].text) == 0);
        u = NULL;
        const int rc = amp_tokenizer_load(path, NULL, &u, err, sizeof err);
        CHECK_MSG(rc == AMP_ERR_FORMAT && u == NULL && strstr(err, bad[i].want),
                  "case %zu: status %d, error '%s', want '%s'", i, rc, err, bad[i].want);
    }
    unlink(path);
    amp_tokenizer_free(t);
}

void test_tokenizer_train(void) {
    static const char text[] = "the cat sat on the mat; the cat ate the rat. aaaa aaaa aaaa\n";
    const uint8_t *texts[1] = {(const uint8_t *)text};
    const size_t lens[1] = {sizeof text - 1};
    amp_tokenizer *t = NULL;
    char err[256];
    if (!CHECK(amp_tokenizer_train(texts, lens, 1, 270, amp_tokenizer_pattern_named("gpt2"), &t, err, sizeof err) == AMP_OK))
        return;
    CHECK_EQ_INT(amp_tokenizer_vocab_size(t), 270);
    for (uint32_t b = 0; b < 256; b++) {
        size_t n;
        const uint8_t *s = amp_tokenizer_token(t, b, &n);
        if (!CHECK(n == 1 && s[0] == b)) break;
    }
    /* GPT-2's pieces: "the", " the" x3, " cat" x2, " sat", " mat", " ate", " rat", " aaaa" x3, ...:
     * "aa" 9 times (overlapping pairs count), then "at" 6, then "th" and "he" 4 each: the tie goes to
     * the smaller ids, ('h', 'e') */
    static const char *const want[3] = {"aa", "at", "he"};
    for (uint32_t i = 0; i < 3; i++) {
        size_t n;
        const uint8_t *s = amp_tokenizer_token(t, 256 + i, &n);
        CHECK_MSG(n == 2 && memcmp(s, want[i], 2) == 0, "merge %u: '%.*s', want '%s'", i, (int)n, (const char *)s, want[i]);
    }
    /* training text encodes and decodes back */
    amp_tokens v = {0};
    CHECK(amp_tokenizer_encode(t, text, sizeof text - 1, &v) == AMP_OK);
    CHECK(v.len < sizeof text - 1);
    uint8_t *back = NULL;
    size_t back_len = 0;
    CHECK(amp_tokenizer_decode(t, v.data, v.len, &back, &back_len) == AMP_OK);
    CHECK(back_len == sizeof text - 1 && memcmp(back, text, back_len) == 0);
    amp_tokenizer_bytes_free(back);
    amp_tokens_free(&v);
    amp_tokenizer_free(t);
    CHECK(amp_tokenizer_train(texts, lens, 1, 100, NULL, &t, err, sizeof err) == AMP_ERR_INVALID_ARGUMENT);
}

void test_tokenizer_shards(void) {
    char path[256], err[256];
    snprintf(path, sizeof path, "/tmp/amp_test_shard_%ld.bin", (long)getpid());
    const uint32_t small[5] = {0, 1, 65535, 300, 7}, big[3] = {70000, 1, 0};
    amp_tokens v = {0};
    CHECK(amp_token_shard_write(path, small, 5, 65536, err, sizeof err) == AMP_OK);
    CHECK(amp_token_shard_read(path, &v, err, sizeof err) == AMP_OK);
    CHECK(v.len == 5 && memcmp(v.data, small, sizeof small) == 0);
    FILE *f = fopen(path, "rb");
    int32_t header[3] = {0};
    if (f) {
        CHECK(fread(header, 4, 3, f) == 3);
        fseek(f, 0, SEEK_END);
        CHECK_EQ_INT(ftell(f), 1024 + 5 * 2);
        fclose(f);
    }
    CHECK(header[0] == 20240520 && header[1] == 1 && header[2] == 5);
    v.len = 0;
    CHECK(amp_token_shard_write(path, big, 3, 70001, err, sizeof err) == AMP_OK);
    CHECK(amp_token_shard_read(path, &v, err, sizeof err) == AMP_OK);
    CHECK(v.len == 3 && memcmp(v.data, big, sizeof big) == 0);
    /* a header that claims one token more than the file holds */
    f = fopen(path, "r+b");
    if (f) {
        const int32_t lie = 4;
        fseek(f, 8, SEEK_SET);
        fwrite(&lie, 4, 1, f);
        fclose(f);
    }
    v.len = 0;
    CHECK(amp_token_shard_read(path, &v, err, sizeof err) == AMP_ERR_FORMAT && v.len == 0);
    CHECK_MSG(strstr(err, "header says 4 tokens") != NULL, "%s", err);
    unlink(path);
    amp_tokens_free(&v);
}
