/* The data loaders: IDX image sets (plain and gzipped, every error path), text corpora, batches, the
 * shuffler, and allocation failure. Every file is generated here, in a mkdtemp directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "amp.h"
#include "harness.h"
#include "test_util.h"
#include "tests.h"

enum { ERR_SIZE = 512 };

/* ---- helpers ----------------------------------------------------------------------------------- */

static bool make_tmpdir(char *dir, size_t size) {
    snprintf(dir, size, "/tmp/amp_test_data_XXXXXX");
    return CHECK_MSG(mkdtemp(dir) != NULL, "mkdtemp failed");
}

static void write_bytes(const char *dir, const char *name, const void *data, size_t n, bool gz) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!CHECK_MSG(f != NULL, "gzopen %s", path)) return;
        CHECK(n == 0 || gzwrite(f, data, (unsigned)n) == (int)n);
        CHECK(gzclose(f) == Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        if (!CHECK_MSG(f != NULL, "fopen %s", path)) return;
        CHECK(fwrite(data, 1, n, f) == n);
        fclose(f);
    }
}

static size_t put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
    return 4;
}

/* An IDX file: magic, dims, then `data_len` data bytes (which may disagree with the dims). */
static void write_idx(const char *dir, const char *name, uint32_t magic, int ndim, const uint32_t *dims,
                      const uint8_t *data, size_t data_len, bool gz) {
    uint8_t buf[256];
    size_t n = put_be32(buf, magic);
    for (int i = 0; i < ndim; i++) n += put_be32(buf + n, dims[i]);
    if (!CHECK(n + data_len <= sizeof buf)) return;
    if (data_len) memcpy(buf + n, data, data_len);
    write_bytes(dir, name, buf, n + data_len, gz);
}

/* Four 2x3 images with pixel value 10 * image + position, labels {0, 2, 1, 2}. */
enum { N_IMG = 4, ROWS = 2, COLS = 3 };
static const uint8_t labels4[N_IMG] = {0, 2, 1, 2};

static void pixels4(uint8_t *p) {
    for (int i = 0; i < N_IMG * ROWS * COLS; i++) p[i] = (uint8_t)(10 * (i / (ROWS * COLS)) + i % (ROWS * COLS));
}

/* A valid pair under the given prefix ("train" or "t10k"); ".gz" names when gz. */
static void write_pair(const char *dir, const char *prefix, bool gz) {
    uint8_t px[N_IMG * ROWS * COLS];
    pixels4(px);
    char name[128];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte%s", prefix, gz ? ".gz" : "");
    write_idx(dir, name, 0x803, 3, (const uint32_t[]){N_IMG, ROWS, COLS}, px, sizeof px, gz);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte%s", prefix, gz ? ".gz" : "");
    write_idx(dir, name, 0x801, 1, (const uint32_t[]){N_IMG}, labels4, N_IMG, gz);
}

/* ---- images ------------------------------------------------------------------------------------ */

void test_data_idx_load(void) {
    char dir[64];
    if (!make_tmpdir(dir, sizeof dir)) return;
    write_pair(dir, "train", false); /* plain */
    write_pair(dir, "t10k", true);   /* gzipped */
    uint8_t px[N_IMG * ROWS * COLS];
    pixels4(px);
    char err[ERR_SIZE];
    for (int train = 1; train >= 0; train--) {
        amp_image_dataset d;
        const int st = amp_image_dataset_load(dir, train, NULL, &d, err, sizeof err);
        if (!CHECK_MSG(st == AMP_OK, "train=%d: %d %s", train, st, err)) continue;
        CHECK_STR_EQ(err, "");
        CHECK_EQ_INT(d.count, N_IMG);
        CHECK_EQ_INT(d.rows, ROWS);
        CHECK_EQ_INT(d.cols, COLS);
        CHECK_EQ_INT(d.classes, 3);
        CHECK(memcmp(d.pixels, px, sizeof px) == 0);
        CHECK(memcmp(d.labels, labels4, N_IMG) == 0);
        amp_image_dataset_free(&d);
        CHECK(d.pixels == NULL && d.count == 0);
        amp_image_dataset_free(&d); /* a zeroed dataset is fine */
    }
    amp_image_dataset_free(NULL);

    /* NAME.gz is preferred to NAME when both exist: a plain pair with other labels is ignored. */
    write_idx(dir, "t10k-labels-idx1-ubyte", 0x801, 1, (const uint32_t[]){N_IMG}, (const uint8_t[]){9, 9, 9, 9},
              N_IMG, false);
    amp_image_dataset d;
    if (CHECK(amp_image_dataset_load(dir, false, NULL, &d, err, sizeof err) == AMP_OK))
        CHECK(memcmp(d.labels, labels4, N_IMG) == 0 && d.classes == 3);
    amp_image_dataset_free(&d);
    /* A plain file named .gz is read too (zlib reads both), and a trailing '/' on the directory works. */
    test_remove_tree(dir);
    if (!make_tmpdir(dir, sizeof dir)) return;
    write_idx(dir, "train-images-idx3-ubyte.gz", 0x803, 3, (const uint32_t[]){N_IMG, ROWS, COLS}, px, sizeof px,
              false);
    write_idx(dir, "train-labels-idx1-ubyte", 0x801, 1, (const uint32_t[]){N_IMG}, labels4, N_IMG, true);
    char slash[80];
    snprintf(slash, sizeof slash, "%s/", dir);
    if (CHECK(amp_image_dataset_load(slash, true, NULL, &d, err, sizeof err) == AMP_OK))
        CHECK(memcmp(d.pixels, px, sizeof px) == 0);
    amp_image_dataset_free(&d);
    test_remove_tree(dir);
}

/* Loads the train pair of dir and checks the status and that the message holds each given part. */
static void expect_error(const char *dir, int want, const char *part1, const char *part2, int line) {
    char err[ERR_SIZE];
    amp_image_dataset d;
    memset(&d, 0xAB, sizeof d);
    const int st = amp_image_dataset_load(dir, true, NULL, &d, err, sizeof err);
    harness_check(st == want, __FILE__, line, "status %d (want %d): %s", st, want, err);
    harness_check(strstr(err, part1) != NULL, __FILE__, line, "message \"%s\" lacks \"%s\"", err, part1);
    if (part2) harness_check(strstr(err, part2) != NULL, __FILE__, line, "message \"%s\" lacks \"%s\"", err, part2);
    harness_check(d.pixels == NULL && d.labels == NULL && d.count == 0, __FILE__, line, "output not zeroed");
    harness_check(strchr(err, '\n') == NULL, __FILE__, line, "message is not one line: %s", err);
    int paths = 0; /* the directory appears once per file named (the count mismatch names two) */
    for (const char *p = strstr(err, dir); p; p = strstr(p + 1, dir)) paths++;
    harness_check(paths >= 1 && paths <= (strstr(err, " but ") ? 2 : 1), __FILE__, line, "path count %d: %s", paths, err);
    amp_image_dataset_free(&d);
}
#define EXPECT_ERROR(dir, want, p1, p2) expect_error(dir, want, p1, p2, __LINE__)

void test_data_idx_errors(void) {
    char dir[64], err[ERR_SIZE];
    if (!make_tmpdir(dir, sizeof dir)) return;
    uint8_t px[N_IMG * ROWS * COLS];
    pixels4(px);
    const uint32_t dims[3] = {N_IMG, ROWS, COLS};
    const char *img = "train-images-idx3-ubyte", *lab = "train-labels-idx1-ubyte";

    EXPECT_ERROR(dir, AMP_ERR_IO, "train-images-idx3-ubyte[.gz]: not found", NULL); /* empty directory */
    write_idx(dir, img, 0x803, 3, dims, px, sizeof px, false);
    EXPECT_ERROR(dir, AMP_ERR_IO, "train-labels-idx1-ubyte[.gz]: not found", NULL);
    /* Bad magic: the labels file is an images file. */
    write_idx(dir, lab, 0x803, 3, dims, px, sizeof px, false);
    EXPECT_ERROR(dir, AMP_ERR_FORMAT, "train-labels-idx1-ubyte: bad magic 0x00000803 (expected 0x00000801 for labels)",
                 NULL);
    /* ... and the images file a labels file; a 2-dimensional float IDX file too. */
    write_idx(dir, lab, 0x801, 1, dims, labels4, N_IMG, false);
    write_idx(dir, img, 0x801, 1, dims, labels4, N_IMG, false);
    EXPECT_ERROR(dir, AMP_ERR_FORMAT, "train-images-idx3-ubyte: bad magic 0x00000801 (expected 0x00000803 for images, "
                 "or 0x00000d03 / 0x00000e03 for float32 / float64 ones)", NULL);
    write_idx(dir, img, 0xD02, 2, dims, px, sizeof px, false);
    EXPECT_ERROR(dir, AMP_ERR_FORMAT, "bad magic 0x00000d02", NULL);
    /* Truncated headers: inside the magic, inside the dimensions. */
    write_bytes(dir, img, (const uint8_t[]){0, 0}, 2, false);
    EXPECT_ERROR(dir, AMP_ERR_FORMAT, "train-images-idx3-ubyte: truncated header: 2 of 16 bytes", NULL);
    write_bytes(dir, "train-images-idx3-ubyte.gz", (const uint8_t[]){0, 0, 8, 3, 0, 0, 0, 4, 0, 0}, 10, true);
    EXPECT_ERROR(dir, AMP_ERR_FORMAT, "train-images-idx3-ubyte.gz: truncated header: 10 of 16 bytes", NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/%s.gz", dir, img);
    unlink(path);
    /* Truncated data: 3 of 4 images and a half. */
    write_idx(dir, img, 0x803, 3, dims, px, 21, false);
    EXPECT_ERROR(dir, AMP_ERR_FORMAT,
                 "train-images-idx3-ubyte: truncated: header says 4 images of 2x3, file holds 3 (21 of 24 pixel bytes)",
                 NULL);
    write_idx(dir, img, 0x803, 3, dims, px, sizeof px, false);
    write_idx(dir, lab, 0x801, 1, dims, labels4, 2, false);
    EXPECT_ERROR(dir, AMP_ERR_FORMAT, "train-labels-idx1-ubyte: truncated: header says 4 labels, file holds 2", NULL);
    /* Trailing data. */
    write_idx(dir, lab, 0x801, 1, dims, (const uint8_t[]){0, 1, 2, 3, 4}, 5, false);
    EXPECT_ERROR(dir, AMP_ERR_FORMAT, "train-labels-idx1-ubyte: trailing data after the 4 labels", NULL);
    /* Count mismatch: both files named. */
    write_idx(dir, lab, 0x801, 1, (const uint32_t[]){3}, labels4, 3, false);
    EXPECT_ERROR(dir, AMP_ERR_FORMAT, "train-images-idx3-ubyte holds 4 images but ", "train-labels-idx1-ubyte holds 3 labels");
    /* Zero images, zero rows. */
    write_idx(dir, lab, 0x801, 1, (const uint32_t[]){0}, NULL, 0, false);
    write_idx(dir, img, 0x803, 3, (const uint32_t[]){0, ROWS, COLS}, NULL, 0, false);
    EXPECT_ERROR(dir, AMP_ERR_FORMAT, "train-images-idx3-ubyte: header says 0 images", NULL);
    write_idx(dir, lab, 0x801, 1, dims, labels4, N_IMG, false);
    write_idx(dir, img, 0x803, 3, (const uint32_t[]){N_IMG, 0, COLS}, NULL, 0, false);
    EXPECT_ERROR(dir, AMP_ERR_FORMAT, "train-images-idx3-ubyte: header says images of 0x3", NULL);
    /* Dimensions whose product overflows 64 bits, or that claim more than the limit: refused before
     * allocating (an allocation of that size would fail or be huge; the test would notice either). */
    write_idx(dir, lab, 0x801, 1, (const uint32_t[]){0xFFFFFFFFu}, NULL, 0, false);
    write_idx(dir, img, 0x803, 3, (const uint32_t[]){0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, NULL, 0, false);
    EXPECT_ERROR(dir, AMP_ERR_FORMAT, "train-images-idx3-ubyte: header says 4294967295 images of 4294967295x4294967295",
                 "limit");
    write_idx(dir, lab, 0x801, 1, (const uint32_t[]){100000}, NULL, 0, false);
    write_idx(dir, img, 0x803, 3, (const uint32_t[]){100000, 200, 200}, NULL, 0, false);
    EXPECT_ERROR(dir, AMP_ERR_FORMAT, "header says 100000 images of 200x200: more than the 2147483648-byte limit", NULL);
    /* Corrupt and truncated gzip streams. */
    write_idx(dir, lab, 0x801, 1, (const uint32_t[]){1}, labels4, 1, false);
    unlink((snprintf(path, sizeof path, "%s/%s", dir, img), path));
    uint8_t big[4096 + 16];
    size_t n = put_be32(big, 0x803);
    n += put_be32(big + n, 1), n += put_be32(big + n, 64), n += put_be32(big + n, 64);
    for (size_t i = n; i < sizeof big; i++) big[i] = (uint8_t)(i * 2654435761u >> 13); /* barely compressible */
    write_bytes(dir, "train-images-idx3-ubyte.gz", big, sizeof big, true);
    snprintf(path, sizeof path, "%s/%s.gz", dir, img);
    FILE *f = fopen(path, "r+b");
    if (CHECK(f != NULL)) {
        fseek(f, 0, SEEK_END);
        const long size = ftell(f);
        CHECK(truncate(path, size / 2) == 0);
        fclose(f);
    }
    EXPECT_ERROR(dir, AMP_ERR_FORMAT, "train-images-idx3-ubyte.gz: truncated", NULL);
    write_bytes(dir, "train-images-idx3-ubyte.gz", big, sizeof big, true);
    f = fopen(path, "r+b");
    if (CHECK(f != NULL)) {
        uint8_t junk[64];
        memset(junk, 0xFF, sizeof junk);
        fseek(f, 20, SEEK_SET);
        CHECK(fwrite(junk, 1, sizeof junk, f) == sizeof junk);
        fclose(f);
    }
    EXPECT_ERROR(dir, AMP_ERR_FORMAT, "train-images-idx3-ubyte.gz: corrupt gzip data: ", NULL);
    /* Arguments. */
    amp_image_dataset d;
    CHECK_EQ_INT(amp_image_dataset_load(NULL, true, NULL, &d, err, sizeof err), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_image_dataset_load(dir, true, NULL, NULL, NULL, 0), AMP_ERR_NULL_POINTER);
    const amp_allocator half = {.alloc = NULL, .free = NULL, .user = NULL};
    CHECK_EQ_INT(amp_image_dataset_load(dir, true, &half, &d, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
    test_remove_tree(dir);
    CHECK_EQ_INT(amp_image_dataset_load(dir, true, NULL, &d, NULL, 0), AMP_ERR_IO); /* no err buffer: fine */
}

void test_data_idx_batch(void) {
    char dir[64], err[ERR_SIZE];
    if (!make_tmpdir(dir, sizeof dir)) return;
    write_pair(dir, "train", true);
    amp_image_dataset d;
    const int st = amp_image_dataset_load(dir, true, NULL, &d, err, sizeof err);
    test_remove_tree(dir);
    if (!CHECK_MSG(st == AMP_OK, "%s", err)) return;
    const int64_t idx[3] = {3, 0, 3};
    float x[3 * ROWS * COLS];
    int32_t y[3];
    const float mean = 0.2860f, std = 0.3530f; /* Fashion-MNIST's */
    CHECK_EQ_INT(amp_image_dataset_batch(&d, idx, 3, mean, std, x, y), AMP_OK);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(y[i], labels4[idx[i]]);
        for (int p = 0; p < ROWS * COLS; p++) {
            const float v = (float)(10 * idx[i] + p);
            const float want = (v / 255.0f - mean) / std;
            uint32_t got_bits, want_bits;
            memcpy(&got_bits, &x[i * ROWS * COLS + p], 4);
            memcpy(&want_bits, &want, 4);
            CHECK_EQ_BITS(got_bits, want_bits, "image %d pixel %d", i, p);
        }
    }
    /* mean 0, std 1: x / 255 exactly. */
    CHECK_EQ_INT(amp_image_dataset_batch(&d, idx, 1, 0.0f, 1.0f, x, y), AMP_OK);
    CHECK(x[5] == 35.0f / 255.0f && x[0] == 30.0f / 255.0f);
    /* Bad arguments write nothing. */
    x[0] = -7.0f;
    CHECK_EQ_INT(amp_image_dataset_batch(&d, (const int64_t[]){0, 4}, 2, 0.0f, 1.0f, x, y), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_image_dataset_batch(&d, (const int64_t[]){-1}, 1, 0.0f, 1.0f, x, y), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_image_dataset_batch(&d, idx, 1, 0.0f, 0.0f, x, y), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_image_dataset_batch(&d, idx, 1, 0.0f, 1.0f, NULL, y), AMP_ERR_NULL_POINTER);
    CHECK(x[0] == -7.0f);
    CHECK_EQ_INT(amp_image_dataset_batch(&d, NULL, 0, 0.0f, 1.0f, NULL, NULL), AMP_OK);
    amp_image_dataset_free(&d);
}

/* ---- text -------------------------------------------------------------------------------------- */

void test_data_text(void) {
    char dir[64], sub[96], path[160], err[ERR_SIZE];
    if (!make_tmpdir(dir, sizeof dir)) return;
    const char *text = "hello world, hello amp!\n"; /* 24 bytes */
    write_bytes(dir, "one.txt", text, strlen(text), false);
    snprintf(path, sizeof path, "%s/one.txt", dir);
    amp_text_corpus c;
    int st = amp_text_corpus_load(path, 0.25, NULL, &c, err, sizeof err);
    if (CHECK_MSG(st == AMP_OK, "%d %s", st, err)) {
        /* vocab: "\n !,adehlmoprw" */
        const char *vocab = "\n !,adehlmoprw";
        CHECK_EQ_INT(c.vocab_size, (int)strlen(vocab));
        for (int i = 0; i < c.vocab_size; i++) CHECK_EQ_INT(c.id_to_byte[i], (unsigned char)vocab[i]);
        CHECK_EQ_INT(c.byte_to_id['h'], 7);
        CHECK_EQ_INT(c.byte_to_id['z'], -1);
        CHECK_EQ_INT(c.train_len, 18);
        CHECK_EQ_INT(c.heldout_len, 6);
        for (int i = 0; i < 24; i++) {
            const int id = i < 18 ? c.train[i] : c.heldout[i - 18];
            CHECK_EQ_INT(c.id_to_byte[id], (unsigned char)text[i]);
        }
        /* Targets are the inputs shifted by one. */
        int32_t x[2 * 5], y[2 * 5];
        CHECK_EQ_INT(amp_text_corpus_batch(&c, false, (const int64_t[]){0, 12}, 2, 5, x, y), AMP_OK);
        for (int b = 0; b < 2; b++)
            for (int t = 0; t < 5; t++) {
                const int s = b ? 12 : 0;
                CHECK_EQ_INT(c.id_to_byte[x[b * 5 + t]], (unsigned char)text[s + t]);
                CHECK_EQ_INT(c.id_to_byte[y[b * 5 + t]], (unsigned char)text[s + t + 1]);
                if (t < 4) CHECK_EQ_INT(y[b * 5 + t], x[b * 5 + t + 1]);
            }
        CHECK_EQ_INT(amp_text_corpus_batch(&c, true, (const int64_t[]){0}, 1, 5, x, y), AMP_OK);
        CHECK_EQ_INT(c.id_to_byte[y[4]], '\n');
        CHECK_EQ_INT(amp_text_corpus_batch(&c, true, (const int64_t[]){1}, 1, 5, x, y), AMP_ERR_INVALID_ARGUMENT);
        CHECK_EQ_INT(amp_text_corpus_batch(&c, false, (const int64_t[]){13}, 1, 5, x, y), AMP_ERR_INVALID_ARGUMENT);
        CHECK_EQ_INT(amp_text_corpus_batch(&c, false, (const int64_t[]){-1}, 1, 5, x, y), AMP_ERR_INVALID_ARGUMENT);
        CHECK_EQ_INT(amp_text_corpus_batch(&c, false, (const int64_t[]){0}, 1, 0, x, y), AMP_ERR_INVALID_ARGUMENT);
        amp_text_corpus_free(&c);
        CHECK(c.train == NULL && c.vocab_size == 0);
    }
    amp_text_corpus_free(NULL);

    /* A directory: regular files in name order; hidden, .dat and .u8 files and subdirectories skipped. */
    snprintf(sub, sizeof sub, "%s/corpusXXXXXX", dir);
    if (!CHECK(mkdtemp(sub) != NULL)) return;
    write_bytes(sub, "b", "BB", 2, false);
    write_bytes(sub, "a", "AA%\n", 4, false);
    write_bytes(sub, "a.dat", "\x01\x02", 2, false);
    write_bytes(sub, "a.u8", "zz", 2, false);
    write_bytes(sub, ".hidden", "yy", 2, false);
    write_bytes(sub, "c", "", 0, false);
    st = amp_text_corpus_load(sub, 0.0, NULL, &c, err, sizeof err);
    if (CHECK_MSG(st == AMP_OK, "%d %s", st, err)) {
        CHECK_EQ_INT(c.train_len, 6);
        CHECK_EQ_INT(c.heldout_len, 0);
        CHECK_EQ_INT(c.vocab_size, 4); /* "\n%AB" */
        char got[7] = {0};
        for (int i = 0; i < 6; i++) got[i] = (char)c.id_to_byte[c.train[i]];
        CHECK_STR_EQ(got, "AA%\nBB");
        amp_text_corpus_free(&c);
    }
    /* The default 10%. */
    char long_text[200];
    for (int i = 0; i < 199; i++) long_text[i] = (char)('a' + i % 26);
    write_bytes(dir, "long.txt", long_text, 199, false);
    snprintf(path, sizeof path, "%s/long.txt", dir);
    if (CHECK(amp_text_corpus_load(path, AMP_TEXT_CORPUS_DEFAULT_HOLDOUT, NULL, &c, err, sizeof err) == AMP_OK)) {
        CHECK_EQ_INT(c.heldout_len, 19);
        CHECK_EQ_INT(c.train_len, 180);
        CHECK_EQ_INT(c.vocab_size, 26);
        amp_text_corpus_free(&c);
    }

    /* Errors: an empty file, a directory of empty or skipped files, a missing path, too little text,
     * a bad fraction. */
    write_bytes(dir, "empty.txt", "", 0, false);
    snprintf(path, sizeof path, "%s/empty.txt", dir);
    CHECK_EQ_INT(amp_text_corpus_load(path, 0.1, NULL, &c, err, sizeof err), AMP_ERR_FORMAT);
    CHECK_MSG(strstr(err, "empty.txt: empty") != NULL, "%s", err);
    CHECK(c.train == NULL);
    char sub2[128];
    snprintf(sub2, sizeof sub2, "%s/emptydirXXXXXX", dir);
    if (CHECK(mkdtemp(sub2) != NULL)) {
        write_bytes(sub2, "x.dat", "abc", 3, false);
        CHECK_EQ_INT(amp_text_corpus_load(sub2, 0.1, NULL, &c, err, sizeof err), AMP_ERR_FORMAT);
        CHECK_MSG(strstr(err, "emptydir") != NULL && strstr(err, "empty") != NULL, "%s", err);
        test_remove_tree(sub2);
    }
    snprintf(path, sizeof path, "%s/missing.txt", dir);
    CHECK_EQ_INT(amp_text_corpus_load(path, 0.1, NULL, &c, err, sizeof err), AMP_ERR_IO);
    CHECK_MSG(strstr(err, "missing.txt: not found") != NULL, "%s", err);
    write_bytes(dir, "tiny.txt", "abc", 3, false);
    snprintf(path, sizeof path, "%s/tiny.txt", dir);
    CHECK_EQ_INT(amp_text_corpus_load(path, 0.7, NULL, &c, err, sizeof err), AMP_ERR_FORMAT); /* 2 held out */
    CHECK_MSG(strstr(err, "tiny.txt: too small") != NULL, "%s", err);
    CHECK_EQ_INT(amp_text_corpus_load(path, 1.0, NULL, &c, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_text_corpus_load(path, -0.1, NULL, &c, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(amp_text_corpus_load(NULL, 0.1, NULL, &c, err, sizeof err), AMP_ERR_NULL_POINTER);
    test_remove_tree(sub);
    test_remove_tree(dir);
}

/* ---- allocation failure ------------------------------------------------------------------------ */

typedef struct {
    int budget, live;
} failing;

static void *failing_alloc(size_t size, size_t align, void *user) {
    failing *f = user;
    if (f->budget-- <= 0) return NULL;
    void *p = NULL;
    if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size ? size : 1) != 0) return NULL;
    f->live++;
    return p;
}

static void failing_free(void *ptr, void *user) {
    failing *f = user;
    if (ptr) f->live--;
    free(ptr);
}

void test_data_allocation_failure(void) {
    char dir[64], sub[96], err[ERR_SIZE];
    if (!make_tmpdir(dir, sizeof dir)) return;
    write_pair(dir, "train", true);
    snprintf(sub, sizeof sub, "%s/textXXXXXX", dir);
    if (!CHECK(mkdtemp(sub) != NULL)) return;
    /* Enough names that the directory listing grows its buffer more than once. */
    for (int i = 0; i < 40; i++) {
        char name[64], body[64];
        snprintf(name, sizeof name, "file_with_a_longish_name_%02d", i);
        snprintf(body, sizeof body, "text %d\n", i);
        write_bytes(sub, name, body, strlen(body), false);
    }
    for (int which = 0; which < 2; which++) {
        int completed = 0;
        for (int budget = 0; budget < 64 && !completed; budget++) {
            failing f = {budget, 0};
            const amp_allocator a = {.alloc = failing_alloc, .free = failing_free, .user = &f};
            int st;
            if (which == 0) {
                amp_image_dataset d;
                st = amp_image_dataset_load(dir, true, &a, &d, err, sizeof err);
                if (st == AMP_OK) CHECK(d.count == N_IMG && d.labels[1] == 2);
                amp_image_dataset_free(&d);
            } else {
                amp_text_corpus c;
                st = amp_text_corpus_load(sub, 0.1, &a, &c, err, sizeof err);
                if (st == AMP_OK) CHECK(c.train_len + c.heldout_len > 200);
                amp_text_corpus_free(&c);
            }
            if (st == AMP_OK) completed = 1;
            CHECK_MSG(st == AMP_OK || (st == AMP_ERR_OUT_OF_MEMORY && strstr(err, "out of memory") != NULL),
                      "%s budget %d: status %d (%s)", which ? "text" : "images", budget, st, err);
            CHECK_MSG(f.live == 0, "%s budget %d: %d allocations leaked", which ? "text" : "images", budget, f.live);
        }
        CHECK_MSG(completed, "%s: no budget below 64 allocations was enough", which ? "text" : "images");
    }
    test_remove_tree(sub);
    test_remove_tree(dir);
}

/* ---- shuffle ----------------------------------------------------------------------------------- */

void test_data_shuffle(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    enum { N = 1000 };
    static int64_t a[N], b[N], c[N];
    static bool seen[N];
    amp_shuffle_indices(a, N, seed, 3);
    memset(seen, 0, sizeof seen);
    bool perm = true;
    for (int i = 0; i < N; i++) {
        if (a[i] < 0 || a[i] >= N || seen[a[i]]) perm = false;
        else seen[a[i]] = true;
    }
    CHECK_MSG(perm, "not a permutation of 0..%d", N - 1);
    amp_shuffle_indices(b, N, seed, 3);
    CHECK(memcmp(a, b, sizeof a) == 0); /* deterministic per (seed, epoch) */
    amp_shuffle_indices(c, N, seed, 4);
    CHECK(memcmp(a, c, sizeof a) != 0); /* another epoch, another order */
    amp_shuffle_indices(c, N, seed + 1, 3);
    CHECK(memcmp(a, c, sizeof a) != 0); /* another seed, another order */
    int fixed = 0;
    for (int i = 0; i < N; i++) fixed += a[i] == i;
    CHECK_MSG(fixed < 20, "%d fixed points: not shuffled", fixed); /* expected 1 */
    /* Fixed values: the order is part of the resume contract, so it must not change by accident. */
    int64_t s[8];
    amp_shuffle_indices(s, 8, 42, 0);
    const int64_t pinned[8] = {2, 7, 1, 4, 6, 5, 0, 3};
    CHECK(memcmp(s, pinned, sizeof s) == 0);
    /* Uniformity over 3! orders: each of the 6 appears about 1/6 of the time over 6000 (seed, epoch). */
    int counts[6] = {0};
    for (uint64_t e = 0; e < 6000; e++) {
        int64_t p[3];
        amp_shuffle_indices(p, 3, seed, e);
        counts[p[0] * 2 + (p[1] > p[2])]++;
    }
    for (int k = 0; k < 6; k++) CHECK_MSG(counts[k] > 850 && counts[k] < 1150, "order %d: %d of 6000", k, counts[k]);
    amp_shuffle_indices(NULL, 5, 0, 0);
    amp_shuffle_indices(s, 0, 0, 0);
    amp_shuffle_indices(s, 1, 0, 0);
    CHECK_EQ_INT(s[0], 0);
}
