/* safetensors files and checkpoints (amp/checkpoint.h): the writer and reader on their own, hostile
 * files (each a clear status and a one-line message naming the file, never a crash or a huge
 * allocation), atomic writes (a failed or killed save keeps the previous file), checkpoint round trips
 * and bit-exact resumption, mismatches refused before anything changes, and the committed fixture
 * tests/fixtures/checkpoint_mlp_tiny.safetensors (read by tests/cli/inspect.sh and
 * tests/fixtures/check_checkpoint_torch.py).
 *
 * AMP_WRITE_CHECKPOINT_FIXTURE=PATH rewrites the fixture at PATH (run from the repository root). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/io/io_internal.h"
#include "amp.h"
#include "harness.h"
#include "test_util.h"
#include "tests.h"

/* ---- temp files ---- */

static char tmp_dir[64];

static const char *tmp_path(char *buf, size_t size, const char *name) {
    if (!tmp_dir[0]) {
        snprintf(tmp_dir, sizeof tmp_dir, "/tmp/amp_ckpt_XXXXXX");
        if (!mkdtemp(tmp_dir)) snprintf(tmp_dir, sizeof tmp_dir, "/tmp");
    }
    snprintf(buf, size, "%s/%s", tmp_dir, name);
    return buf;
}

static bool write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* The whole file (malloc'ed) and its length, or NULL. */
static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            unsigned char *q = realloc(buf, cap);
            if (!q) break;
            buf = q;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    *len = n;
    return buf;
}

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* A raw safetensors file: the given header length (not necessarily the header's), header text, then
 * data_len bytes of 0xAB. */
static bool write_raw(const char *path, uint64_t header_len, const char *header, size_t data_len) {
    size_t hl = strlen(header);
    size_t n = 8 + hl + data_len;
    unsigned char *buf = malloc(n);
    if (!buf) return false;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(header_len >> (8 * i));
    memcpy(buf + 8, header, hl);
    memset(buf + 8 + hl, 0xAB, data_len);
    bool ok = write_file(path, buf, n);
    free(buf);
    return ok;
}

static bool one_line_naming(const char *err, const char *path) {
    return err[0] != '\0' && strchr(err, '\n') == NULL && strstr(err, path) != NULL;
}

/* ---- the generic writer and reader ---- */

void test_safetensors_write_read(void) {
    char path[256];
    tmp_path(path, sizeof path, "generic.safetensors");
    const float a[6] = {1.0f, -2.5f, 3.25f, 1e-8f, 65504.0f, -0.0f};
    uint16_t h[3], b[3];
    uint8_t e4[2] = {0x38, 0xC0}, e5[1] = {0x3C};
    const float h32[3] = {0.5f, 1.0f / 3.0f, -7.0f};
    amp_convert(h, AMP_F16, h32, AMP_F32, 3);
    amp_convert(b, AMP_BF16, h32, AMP_F32, 3);
    const int64_t s23[2] = {2, 3}, s3[1] = {3}, s2[1] = {2}, s1[1] = {1}, s0[1] = {0};
    const amp_st_tensor ts[] = {
        {.name = "a", .dtype = AMP_F32, .ndim = 2, .shape = s23, .data = a},
        {.name = "h \"quoted\"\n", .dtype = AMP_F16, .ndim = 1, .shape = s3, .data = h},
        {.name = "b.weight", .dtype = AMP_BF16, .ndim = 1, .shape = s3, .data = b},
        {.name = "e4", .dtype = AMP_F8E4M3, .ndim = 1, .shape = s2, .data = e4},
        {.name = "e5", .dtype = AMP_F8E5M2, .ndim = 1, .shape = s1, .data = e5},
        {.name = "empty", .dtype = AMP_F32, .ndim = 1, .shape = s0, .data = NULL},
        {.name = "scalar", .dtype = AMP_F32, .ndim = 0, .shape = NULL, .data = a + 2},
    };
    const amp_st_meta meta[] = {{"k\\ey", "va\"lue\t\xc3\xa9"}, {"format", "pt"}};
    char err[512];
    CHECK_EQ_INT(amp_safetensors_write(path, ts, 7, meta, 2, err, sizeof err), AMP_OK);
    size_t len = 0;
    unsigned char *raw = read_file(path, &len);
    if (CHECK(raw && len >= 8)) {
        uint64_t hl = 0;
        for (int i = 0; i < 8; i++) hl |= (uint64_t)raw[i] << (8 * i);
        CHECK_MSG((8 + hl) % 8 == 0, "data region starts at %llu, not 8-byte aligned", (unsigned long long)(8 + hl));
        CHECK_EQ_INT(len, 8 + hl + 24 + 6 + 6 + 2 + 1 + 0 + 4);
    }
    free(raw);

    amp_st_file *f = NULL;
    CHECK_EQ_INT(amp_safetensors_open(path, &f, err, sizeof err), AMP_OK);
    if (!CHECK(f)) return;
    CHECK_EQ_INT(amp_safetensors_num_tensors(f), 7);
    CHECK_EQ_INT(amp_safetensors_num_meta(f), 2);
    const char *v = amp_safetensors_meta_get(f, "k\\ey");
    CHECK(v && strcmp(v, "va\"lue\t\xc3\xa9") == 0);
    const amp_st_info *t = amp_safetensors_find(f, "h \"quoted\"\n");
    CHECK(t && t->dtype == AMP_F16 && t->ndim == 1 && t->shape[0] == 3 && t->bytes == 6 && strcmp(t->dtype_name, "F16") == 0);
    t = amp_safetensors_find(f, "scalar");
    CHECK(t && t->ndim == 0 && t->bytes == 4);
    CHECK(amp_safetensors_find(f, "nope") == NULL);
    /* In data order. */
    uint64_t pos = 0;
    for (size_t i = 0; i < 7; i++) {
        t = amp_safetensors_tensor(f, i);
        CHECK(t && t->offset == pos);
        if (t) pos += t->bytes;
    }

    float a2[6];
    CHECK_EQ_INT(amp_safetensors_read(f, "a", a2, AMP_F32, 2, s23, err, sizeof err), AMP_OK);
    CHECK(memcmp(a, a2, sizeof a) == 0);
    uint16_t b2[3], want_b[3];
    CHECK_EQ_INT(amp_safetensors_read(f, "b.weight", b2, AMP_BF16, 1, s3, err, sizeof err), AMP_OK);
    CHECK(memcmp(b, b2, sizeof b) == 0);
    /* Conversion on read: F32 -> BF16 rounds as amp_convert does; F16 -> F32 is exact. */
    uint16_t a_bf[6], want_a_bf[6];
    amp_convert(want_a_bf, AMP_BF16, a, AMP_F32, 6);
    CHECK_EQ_INT(amp_safetensors_read(f, "a", a_bf, AMP_BF16, 2, s23, err, sizeof err), AMP_OK);
    CHECK(memcmp(a_bf, want_a_bf, sizeof a_bf) == 0);
    float h2[3];
    CHECK_EQ_INT(amp_safetensors_read(f, "h \"quoted\"\n", h2, AMP_F32, 1, s3, err, sizeof err), AMP_OK);
    amp_convert(want_b, AMP_F16, h2, AMP_F32, 3);
    CHECK(memcmp(want_b, h, sizeof h) == 0);
    uint8_t e42[2];
    CHECK_EQ_INT(amp_safetensors_read(f, "e4", e42, AMP_F8E4M3, 1, s2, err, sizeof err), AMP_OK);
    CHECK(memcmp(e4, e42, 2) == 0);
    float sc = 0.0f;
    CHECK_EQ_INT(amp_safetensors_read(f, "scalar", &sc, AMP_F32, 0, NULL, err, sizeof err), AMP_OK);
    CHECK(sc == a[2]);
    CHECK_EQ_INT(amp_safetensors_read(f, "empty", NULL, AMP_F32, 1, s0, err, sizeof err), AMP_OK);
    /* Errors: wrong shape, missing name. */
    CHECK_EQ_INT(amp_safetensors_read(f, "a", a2, AMP_F32, 1, s3, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
    CHECK(one_line_naming(err, path) && strstr(err, "[2, 3]"));
    CHECK_EQ_INT(amp_safetensors_read(f, "nope", a2, AMP_F32, 1, s3, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
    CHECK(one_line_naming(err, path) && strstr(err, "nope"));
    amp_safetensors_close(f);
    amp_safetensors_close(NULL);

    /* Writer argument checks: duplicates, reserved names, bad dtypes, negative dimensions. */
    amp_st_tensor dup[2] = {ts[0], ts[0]};
    CHECK_EQ_INT(amp_safetensors_write(path, dup, 2, NULL, 0, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
    CHECK(strstr(err, "duplicate") != NULL);
    amp_st_tensor bad = ts[0];
    bad.name = "__metadata__";
    CHECK_EQ_INT(amp_safetensors_write(path, &bad, 1, NULL, 0, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
    bad = ts[0];
    bad.dtype = (amp_dtype)99;
    CHECK_EQ_INT(amp_safetensors_write(path, &bad, 1, NULL, 0, err, sizeof err), AMP_ERR_UNSUPPORTED_DTYPE);
    const int64_t neg[1] = {-1};
    bad = ts[0];
    bad.ndim = 1;
    bad.shape = neg;
    CHECK_EQ_INT(amp_safetensors_write(path, &bad, 1, NULL, 0, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
    const amp_st_meta dupm[2] = {{"x", "1"}, {"x", "2"}};
    CHECK_EQ_INT(amp_safetensors_write(path, ts, 1, dupm, 2, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
    /* A failed argument check leaves the earlier file in place. */
    CHECK_EQ_INT(amp_safetensors_open(path, &f, err, sizeof err), AMP_OK);
    CHECK_EQ_INT(amp_safetensors_num_tensors(f), 7);
    amp_safetensors_close(f);

    /* No tensors, no metadata: "{}" padded, and it reads back. */
    CHECK_EQ_INT(amp_safetensors_write(path, NULL, 0, NULL, 0, err, sizeof err), AMP_OK);
    CHECK_EQ_INT(amp_safetensors_open(path, &f, err, sizeof err), AMP_OK);
    CHECK_EQ_INT(amp_safetensors_num_tensors(f), 0);
    amp_safetensors_close(f);
    unlink(path);
}

/* ---- hostile files ---- */

typedef struct hostile_case {
    const char *label;
    uint64_t header_len; /* 0: the header's own length */
    const char *header;
    size_t data_len;
    int want;
    const char *want_text; /* a fragment of the message */
} hostile_case;

void test_safetensors_hostile(void) {
    char path[256], err[512];
    tmp_path(path, sizeof path, "hostile.safetensors");
    const hostile_case cases[] = {
        {"header length past the file", 1000, "{}      ", 0, AMP_ERR_FORMAT, "exceeds the file"},
        {"header length 2^63", (uint64_t)1 << 63, "{}      ", 0, AMP_ERR_FORMAT, "exceeds the file"},
        {"header length 2^64-1", UINT64_MAX, "{}      ", 0, AMP_ERR_FORMAT, "exceeds the file"},
        {"header length 1", 1, "{}      ", 0, AMP_ERR_FORMAT, "too short"},
        {"invalid JSON", 0, "{\"a\": {\"dtype\": ", 0, AMP_ERR_FORMAT, "not valid JSON"},
        {"a JSON array", 0, "[1, 2, 3]", 0, AMP_ERR_FORMAT, "not a JSON object"},
        {"JSON null", 0, "null", 0, AMP_ERR_FORMAT, "not a JSON object"},
        {"bytes after the object", 0, "{} x", 0, AMP_ERR_FORMAT, "after its JSON object"},
        {"entry not an object", 0, "{\"a\": 5}", 0, AMP_ERR_FORMAT, "not a JSON object"},
        {"missing data_offsets", 0, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, AMP_ERR_FORMAT, "data_offsets"},
        {"missing dtype", 0, "{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, AMP_ERR_FORMAT, "dtype"},
        {"missing shape", 0, "{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4, AMP_ERR_FORMAT, "shape"},
        {"unknown dtype", 0, "{\"a\": {\"dtype\": \"F12\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, AMP_ERR_FORMAT,
         "unknown dtype"},
        {"dtype not a string", 0, "{\"a\": {\"dtype\": 4, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, AMP_ERR_FORMAT, "dtype"},
        {"negative dimension", 0, "{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4, AMP_ERR_FORMAT,
         "dimension 0"},
        {"fractional dimension", 0, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 4, AMP_ERR_FORMAT,
         "dimension 0"},
        {"dimension 1e300", 0, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1e300], \"data_offsets\": [0, 4]}}", 4, AMP_ERR_FORMAT,
         "dimension 0"},
        {"shape product overflows", 0,
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 16], \"data_offsets\": [0, 0]}}", 0, AMP_ERR_FORMAT,
         "overflows"},
        {"byte size overflows", 0,
         "{\"a\": {\"dtype\": \"F64\", \"shape\": [4294967296, 1073741824], \"data_offsets\": [0, 0]}}", 0, AMP_ERR_FORMAT,
         "overflows"},
        {"product wraps to zero", 0,
         "{\"a\": {\"dtype\": \"U8\", \"shape\": [4294967296, 4294967296], \"data_offsets\": [0, 0]}}", 0, AMP_ERR_FORMAT,
         "overflows"},
        {"nine dimensions", 0,
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}", 4, AMP_ERR_FORMAT,
         "dimensions"},
        {"shape/dtype product mismatch", 0, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 4,
         AMP_ERR_FORMAT, "need 8"},
        {"offsets out of range", 0, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 4, AMP_ERR_FORMAT,
         "beyond"},
        {"huge offsets", 0,
         "{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [9007199254740000, 9007199254740004]}}", 4,
         AMP_ERR_FORMAT, "beyond"},
        {"offsets past 2^53", 0, "{\"a\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [1e19, 1e19]}}", 0,
         AMP_ERR_FORMAT, "data_offsets"},
        {"end before begin", 0, "{\"a\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [4, 0]}}", 4, AMP_ERR_FORMAT,
         "end before begin"},
        {"three offsets", 0, "{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4, 8]}}", 4, AMP_ERR_FORMAT,
         "data_offsets"},
        {"negative offset", 0, "{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [-4, 0]}}", 4, AMP_ERR_FORMAT,
         "data_offsets"},
        {"overlapping tensors", 0,
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
         " \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [2, 6]}}",
         8, AMP_ERR_FORMAT, "overlaps"},
        {"same offsets twice", 0,
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
         " \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
         4, AMP_ERR_FORMAT, "overlaps"},
        {"a gap", 0,
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
         " \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}}",
         12, AMP_ERR_FORMAT, "gap"},
        {"uncovered trailing data", 0, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 8,
         AMP_ERR_FORMAT, "cover 4"},
        {"truncated data", 0, "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 9, AMP_ERR_FORMAT,
         "truncated"},
        {"duplicate names", 0,
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
         " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
         8, AMP_ERR_FORMAT, "duplicate"},
        {"metadata value not a string", 0, "{\"__metadata__\": {\"step\": 5}}", 0, AMP_ERR_FORMAT, "not a string"},
        {"metadata not an object", 0, "{\"__metadata__\": [\"a\"]}", 0, AMP_ERR_FORMAT, "__metadata__"},
        {"metadata twice", 0, "{\"__metadata__\": {}, \"__metadata__\": {}}", 0, AMP_ERR_FORMAT, "twice"},
        {"deep nesting", 0, NULL, 0, AMP_ERR_FORMAT, "not valid JSON"}, /* built below */
        {"too many values", 0, NULL, 0, AMP_ERR_FORMAT, "JSON values"}, /* built below */
    };
    const size_t n_cases = sizeof cases / sizeof cases[0];
    for (size_t i = 0; i < n_cases; i++) {
        const hostile_case *c = &cases[i];
        char *built = NULL;
        const char *header = c->header;
        if (!header && strcmp(c->label, "deep nesting") == 0) {
            /* 100k nested arrays: the parser's depth limit, not the stack, must stop it. */
            const size_t depth = 100000;
            built = malloc(2 * depth + 16);
            if (!built) continue;
            size_t k = 0;
            k += (size_t)sprintf(built, "{\"a\":");
            for (size_t d = 0; d < depth; d++) built[k++] = '[';
            for (size_t d = 0; d < depth; d++) built[k++] = ']';
            built[k++] = '}';
            built[k] = '\0';
            header = built;
        } else if (!header) {
            /* 1.5M tiny values (3 MB of header): refused before cJSON would build 100 MB of nodes. */
            const size_t count = 3 * (size_t)AMP_ST_MAX_HEADER_VALUES / 2;
            built = malloc(2 * count + 32);
            if (!built) continue;
            size_t k = (size_t)sprintf(built, "{\"a\":[");
            for (size_t d = 0; d < count; d++) {
                built[k++] = '0';
                built[k++] = ',';
            }
            k += (size_t)sprintf(built + k, "0]}");
            header = built;
        }
        uint64_t hl = c->header_len ? c->header_len : strlen(header);
        if (!CHECK(write_raw(path, hl, header, c->data_len))) {
            free(built);
            continue;
        }
        free(built);
        amp_st_file *f = (amp_st_file *)&err; /* must become NULL */
        int rc = amp_safetensors_open(path, &f, err, sizeof err);
        CHECK_MSG(rc == c->want, "%s: status %d (%s), expected %d", c->label, rc, err, c->want);
        CHECK_MSG(f == NULL, "%s: *out not NULL on failure", c->label);
        CHECK_MSG(one_line_naming(err, path), "%s: message '%s' is not one line naming the file", c->label, err);
        CHECK_MSG(strstr(err, c->want_text) != NULL, "%s: message '%s' lacks '%s'", c->label, err, c->want_text);
        if (rc == AMP_OK) amp_safetensors_close(f);
    }

    /* Empty and 7-byte files; a missing file; a directory. */
    CHECK(write_file(path, "", 0));
    amp_st_file *f = NULL;
    CHECK_EQ_INT(amp_safetensors_open(path, &f, err, sizeof err), AMP_ERR_FORMAT);
    CHECK(one_line_naming(err, path) && strstr(err, "too short"));
    CHECK(write_file(path, "\x02\0\0\0\0\0\0", 7));
    CHECK_EQ_INT(amp_safetensors_open(path, &f, err, sizeof err), AMP_ERR_FORMAT);
    CHECK(one_line_naming(err, path) && strstr(err, "7 bytes"));
    char missing[256];
    tmp_path(missing, sizeof missing, "does-not-exist.safetensors");
    CHECK_EQ_INT(amp_safetensors_open(missing, &f, err, sizeof err), AMP_ERR_IO);
    CHECK(one_line_naming(err, missing) && strstr(err, strerror(ENOENT)));
    CHECK_EQ_INT(amp_safetensors_open(tmp_dir, &f, err, sizeof err), AMP_ERR_IO);
    CHECK(one_line_naming(err, tmp_dir));
    /* A NUL byte inside the header. */
    {
        unsigned char buf[8 + 8] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '"', 'a', '\0', '"', ':', '1', '}'};
        CHECK(write_file(path, buf, sizeof buf));
        CHECK_EQ_INT(amp_safetensors_open(path, &f, err, sizeof err), AMP_ERR_FORMAT);
        CHECK(strstr(err, "NUL") != NULL);
    }
    /* A header longer than the limit (a sparse file, so the test writes almost nothing). */
    {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const uint64_t hl = (uint64_t)AMP_ST_MAX_HEADER_BYTES + 8;
        unsigned char len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hl >> (8 * i));
        bool ok = fd >= 0 && write(fd, len8, 8) == 8 && write(fd, "{", 1) == 1 && ftruncate(fd, (off_t)(8 + hl)) == 0;
        if (fd >= 0) close(fd);
        if (CHECK(ok)) {
            CHECK_EQ_INT(amp_safetensors_open(path, &f, err, sizeof err), AMP_ERR_FORMAT);
            CHECK(one_line_naming(err, path) && strstr(err, "limit"));
        }
    }
    /* Valid oddities: padding spaces, a dtype amp does not convert (readable metadata, refused read). */
    {
        const char *hdr = "{\"i\": {\"dtype\": \"I64\", \"shape\": [1], \"data_offsets\": [0, 8]}}      ";
        CHECK(write_raw(path, strlen(hdr), hdr, 8));
        CHECK_EQ_INT(amp_safetensors_open(path, &f, err, sizeof err), AMP_OK);
        if (CHECK(f)) {
            int64_t v, one = 1;
            CHECK_EQ_INT(amp_safetensors_read(f, "i", &v, AMP_F32, 1, &one, err, sizeof err), AMP_ERR_UNSUPPORTED_DTYPE);
            CHECK(strstr(err, "I64") != NULL);
            amp_safetensors_close(f);
        }
    }
    /* The file shrinking after open: the read reports I/O, it does not read garbage. */
    {
        const char *hdr = "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}";
        CHECK(write_raw(path, strlen(hdr), hdr, 8));
        CHECK_EQ_INT(amp_safetensors_open(path, &f, err, sizeof err), AMP_OK);
        if (CHECK(f)) {
            CHECK(truncate(path, 8 + (off_t)strlen(hdr) + 4) == 0);
            float v[2];
            const int64_t two = 2;
            CHECK_EQ_INT(amp_safetensors_read(f, "a", v, AMP_F32, 1, &two, err, sizeof err), AMP_ERR_IO);
            CHECK(one_line_naming(err, path));
            CHECK_EQ_INT(amp_safetensors_read(f, "a", v, AMP_F16, 1, &two, err, sizeof err), AMP_ERR_IO);
            amp_safetensors_close(f);
        }
    }
    unlink(path);
}

/* ---- checkpoints ---- */

/* A tiny training setup: the mlp at 4x4 inputs, hidden 8, 3 classes; AdamW with stochastic rounding;
 * a scaler that grows every 2 clean steps. */
typedef struct world {
    amp_ctx *ctx;
    amp_model *m;
    amp_optimizer *opt;
    amp_scaler *s;
} world;

static amp_model_config tiny_mlp_config(amp_dtype dtype) {
    amp_model_config cfg = amp_model_default_config(AMP_MODEL_MLP);
    cfg.in_channels = 1;
    cfg.image_rows = 4;
    cfg.image_cols = 4;
    cfg.classes = 3;
    cfg.hidden = 8;
    cfg.param_dtype = dtype;
    return cfg;
}

static void world_free(world *w) {
    amp_optimizer_free(w->opt);
    amp_scaler_free(w->s);
    amp_ctx_free(w->ctx);
    amp_model_free(w->m);
    memset(w, 0, sizeof *w);
}

static bool world_create(world *w, amp_dtype dtype, uint64_t init_seed) {
    memset(w, 0, sizeof *w);
    amp_ctx_config cc = amp_ctx_default_config();
    cc.arena_bytes = 1 << 20;
    cc.seed = 11;
    amp_model_config cfg = tiny_mlp_config(dtype);
    amp_optim_config oc = amp_optim_default_config(AMP_OPTIM_ADAMW);
    oc.lr = 1e-2f;
    oc.stochastic_rounding = true;
    oc.seed = 7;
    amp_scaler_config sc = amp_scaler_default_config();
    sc.init_scale = 1024.0f;
    sc.growth_interval = 2;
    bool ok = amp_ctx_create(&cc, &w->ctx) == AMP_OK && amp_model_create(w->ctx, &cfg, &w->m) == AMP_OK &&
              amp_ctx_alloc_params(w->ctx) == AMP_OK && amp_model_init(w->m, init_seed) == AMP_OK &&
              amp_optimizer_create(w->ctx, &oc, &w->opt) == AMP_OK && amp_scaler_create(&sc, &w->s) == AMP_OK;
    if (!ok) {
        CHECK_MSG(false, "world_create: %s", w->ctx ? amp_ctx_error(w->ctx) : "no context");
        world_free(w);
    }
    return ok;
}

enum { TINY_BATCH = 4, TINY_IN = 16 };

/* The input for step `step`: a fixed function of the step index. */
static void tiny_batch(int64_t step, float *x, int32_t *y) {
    test_rng r = {.state = 0x1234u + (uint64_t)step * 7919u};
    for (int i = 0; i < TINY_BATCH * TINY_IN; i++) x[i] = (float)test_rng_below(&r, 2001) / 1000.0f - 1.0f;
    for (int b = 0; b < TINY_BATCH; b++) y[b] = (int32_t)test_rng_below(&r, 3);
}

/* One training iteration: forward, scaled backward, fused step with clipping, scaler update. */
static bool train_step(world *w, int64_t step) {
    float x[TINY_BATCH * TINY_IN];
    int32_t y[TINY_BATCH];
    tiny_batch(step, x, y);
    amp_ctx_reset(w->ctx);
    const int64_t shape[2] = {TINY_BATCH, TINY_IN};
    amp_tensor *xt = amp_tensor_from(w->ctx, amp_ctx_param(w->ctx, 0)->dtype, 2, shape, x, AMP_F32);
    amp_tensor *logits = amp_model_forward(w->m, w->ctx, xt, NULL, TINY_BATCH, true);
    amp_tensor *loss = amp_cross_entropy(w->ctx, logits, y);
    if (!loss) return CHECK_MSG(false, "train_step: %s", amp_ctx_error(w->ctx));
    amp_zero_grad(w->ctx);
    bool ok = amp_scaler_backward(w->s, w->ctx, loss) == AMP_OK &&
              amp_scaler_step_fused(w->s, w->opt, 1.0f, NULL) == AMP_OK && amp_scaler_update(w->s) == AMP_OK;
    return CHECK_MSG(ok, "train_step %lld: %s / %s", (long long)step, amp_ctx_error(w->ctx), amp_scaler_error(w->s));
}

static void scaler_text(const amp_scaler *s, char *buf, size_t size) {
    amp_scaler_state st;
    amp_scaler_state_dict(s, &st);
    amp_scaler_state_format(&st, buf, size);
}

/* True when the two worlds hold the same bits everywhere that matters for the next step. */
static bool worlds_equal(const world *a, const world *b, const char *what) {
    size_t na, nb, sa, sb;
    const void *pa = amp_ctx_param_memory(a->ctx, &na), *pb = amp_ctx_param_memory(b->ctx, &nb);
    const void *oa = amp_optimizer_state_memory(a->opt, &sa), *ob = amp_optimizer_state_memory(b->opt, &sb);
    char ta[512], tb[512];
    scaler_text(a->s, ta, sizeof ta);
    scaler_text(b->s, tb, sizeof tb);
    bool ok = true;
    ok &= CHECK_MSG(na == nb && memcmp(pa, pb, na) == 0, "%s: parameters differ", what);
    ok &= CHECK_MSG(sa == sb && memcmp(oa, ob, sa) == 0, "%s: optimizer state differs", what);
    ok &= CHECK_MSG(amp_optimizer_step_count(a->opt) == amp_optimizer_step_count(b->opt), "%s: step counts %lld vs %lld",
                    what, (long long)amp_optimizer_step_count(a->opt), (long long)amp_optimizer_step_count(b->opt));
    ok &= CHECK_MSG(f32_bits(amp_optimizer_get_lr(a->opt)) == f32_bits(amp_optimizer_get_lr(b->opt)), "%s: lr differs", what);
    ok &= CHECK_MSG(strcmp(ta, tb) == 0, "%s: scaler %s vs %s", what, ta, tb);
    return ok;
}

void test_checkpoint_round_trip(void) {
    char path[256], err[512];
    tmp_path(path, sizeof path, "round_trip.safetensors");
    /* A context with parameters of all three dtypes and a buffer. */
    amp_ctx *ctx = NULL;
    amp_ctx_config cc = amp_ctx_default_config();
    cc.arena_bytes = 1 << 16;
    if (!CHECK(amp_ctx_create(&cc, &ctx) == AMP_OK)) return;
    const int64_t s34[2] = {3, 4}, s5[1] = {5}, s23[2] = {2, 3}, s4[1] = {4};
    amp_param_new(ctx, "0.weight", AMP_F32, 2, s34);
    amp_param_new(ctx, "0.bias", AMP_F16, 1, s5);
    amp_param_new(ctx, "2.weight", AMP_BF16, 2, s23);
    amp_tensor *buf = amp_buffer_new(ctx, "1.running_mean", AMP_F32, 1, s4);
    amp_optim_config oc = amp_optim_default_config(AMP_OPTIM_ADAMW);
    oc.lr = 0.05f;
    amp_optimizer *opt = NULL;
    amp_scaler *s = NULL, *s2 = NULL;
    if (!CHECK(amp_ctx_alloc_params(ctx) == AMP_OK && amp_optimizer_create(ctx, &oc, &opt) == AMP_OK &&
               amp_scaler_create(NULL, &s) == AMP_OK && amp_scaler_create(NULL, &s2) == AMP_OK))
        goto out;
    test_rng r = {.state = harness_seed()};
    harness_note("seed 0x%llx", (unsigned long long)harness_seed());
    for (size_t i = 0; i < amp_ctx_num_params(ctx); i++) {
        amp_tensor *p = amp_ctx_param(ctx, i);
        float v[12];
        for (int64_t k = 0; k < amp_tensor_numel(p); k++) v[k] = (float)test_rng_below(&r, 1000) / 250.0f - 2.0f;
        amp_tensor_write(p, v, AMP_F32);
    }
    const float bv[4] = {0.25f, -1.0f, 3.0f, 1e-3f};
    amp_tensor_write(buf, bv, AMP_F32);
    /* Rebuild the masters from the written parameters: a fresh optimizer. */
    amp_optimizer_free(opt);
    opt = NULL;
    if (!CHECK(amp_optimizer_create(ctx, &oc, &opt) == AMP_OK)) goto out;
    for (int step = 0; step < 3; step++) {
        for (size_t i = 0; i < amp_ctx_num_params(ctx); i++) {
            amp_tensor *g = amp_ctx_param(ctx, i)->grad;
            float v[12];
            for (int64_t k = 0; k < amp_tensor_numel(g); k++)
                v[k] = ((float)test_rng_below(&r, 1000) / 500.0f - 1.0f) * amp_scaler_scale(s);
            amp_tensor_write(g, v, AMP_F32);
        }
        amp_scaler_step(s, opt, NULL);
        amp_scaler_update(s);
    }
    const uint64_t info_rng[3] = {1, 0xFFFFFFFFFFFFFFFFull, 0x0123456789ABCDEFull};
    const amp_st_meta user[1] = {{"run", "round trip \"test\""}};
    amp_checkpoint_info info = {.step = 3, .epoch = -1, .n_rng = 3, .user = user, .n_user = 1};
    memcpy(info.rng, info_rng, sizeof info_rng);
    CHECK_EQ_INT(amp_checkpoint_save(path, ctx, opt, s, &info, err, sizeof err), AMP_OK);
    CHECK_MSG(err[0] == '\0', "err: %s", err);

    /* Snapshot, then perturb everything. */
    size_t pn, on, bn = sizeof bv;
    void *pm = amp_ctx_param_memory(ctx, &pn), *om = amp_optimizer_state_memory(opt, &on);
    unsigned char *psnap = malloc(pn), *osnap = malloc(on), bsnap[sizeof bv];
    if (!CHECK(psnap && osnap)) {
        free(psnap);
        free(osnap);
        goto out;
    }
    memcpy(psnap, pm, pn);
    memcpy(osnap, om, on);
    memcpy(bsnap, buf->data, bn);
    const int64_t steps = amp_optimizer_step_count(opt);
    const float lr = amp_optimizer_get_lr(opt);
    char st_before[512], st_after[512];
    scaler_text(s, st_before, sizeof st_before);
    const uint64_t next_random = amp_ctx_random(ctx, 0);
    amp_ctx_random(ctx, 0);
    /* Every tensor's bytes (the padding between them is not saved and stays as it is). */
    for (size_t i = 0; i < amp_ctx_num_params(ctx); i++) {
        amp_tensor *p = amp_ctx_param(ctx, i);
        const size_t numel = (size_t)amp_tensor_numel(p);
        memset(p->data, 0x55, numel * amp_dtype_size(p->dtype));
        const amp_optim_state roles[4] = {AMP_OPTIM_STATE_MASTER, AMP_OPTIM_STATE_MOMENTUM, AMP_OPTIM_STATE_EXP_AVG,
                                          AMP_OPTIM_STATE_EXP_AVG_SQ};
        for (int k = 0; k < 4; k++) {
            float *st = amp_optimizer_state(opt, roles[k], i);
            if (st) memset(st, 0x33, numel * sizeof *st);
        }
    }
    CHECK(memcmp(psnap, pm, pn) != 0 && memcmp(osnap, om, on) != 0);
    memset(buf->data, 0x77, bn);
    amp_optimizer_set_step_count(opt, 1234);
    amp_optimizer_set_lr(opt, 0.5f);

    amp_checkpoint_info got;
    CHECK_EQ_INT(amp_checkpoint_load(path, ctx, opt, s2, &got, err, sizeof err), AMP_OK);
    CHECK_MSG(err[0] == '\0', "err: %s", err);
    CHECK(memcmp(psnap, pm, pn) == 0);
    CHECK(memcmp(osnap, om, on) == 0);
    CHECK(memcmp(bsnap, buf->data, bn) == 0);
    CHECK_EQ_INT(amp_optimizer_step_count(opt), steps);
    CHECK_EQ_BITS(f32_bits(amp_optimizer_get_lr(opt)), f32_bits(lr), "lr");
    scaler_text(s2, st_after, sizeof st_after);
    CHECK_STR_EQ(st_after, st_before);
    CHECK_EQ_BITS(amp_ctx_random(ctx, 0), next_random, "the context's random stream resumes");
    CHECK_EQ_INT(got.step, 3);
    CHECK_EQ_INT(got.epoch, -1);
    CHECK_EQ_INT(got.n_rng, 3);
    CHECK(memcmp(got.rng, info_rng, sizeof info_rng) == 0);
    CHECK(got.user == NULL && got.n_user == 0);

    /* The file's layout: names, dtypes, prefixes, metadata. */
    amp_st_file *f = NULL;
    if (CHECK(amp_safetensors_open(path, &f, err, sizeof err) == AMP_OK)) {
        const struct {
            const char *name;
            const char *dtype;
        } want[] = {
            {"0.weight", "F32"}, {"0.bias", "F16"}, {"2.weight", "BF16"}, {"1.running_mean", "F32"},
            {"master.0.bias", "F32"}, {"master.2.weight", "F32"}, {"optimizer.state.0.weight.exp_avg", "F32"},
            {"optimizer.state.0.weight.exp_avg_sq", "F32"}, {"optimizer.state.0.bias.exp_avg", "F32"},
            {"optimizer.state.2.weight.exp_avg_sq", "F32"},
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            const amp_st_info *t = amp_safetensors_find(f, want[i].name);
            CHECK_MSG(t && strcmp(t->dtype_name, want[i].dtype) == 0, "tensor %s (%s)", want[i].name, want[i].dtype);
        }
        CHECK(amp_safetensors_find(f, "master.0.weight") == NULL); /* F32 parameters are their own master */
        CHECK(amp_safetensors_find(f, "optimizer.state.0.weight.momentum_buffer") == NULL);
        CHECK_EQ_INT(amp_safetensors_num_tensors(f), 4 + 2 + 3 * 2);
        const char *v = amp_safetensors_meta_get(f, "amp.step");
        CHECK(v && strcmp(v, "3") == 0);
        v = amp_safetensors_meta_get(f, "amp.rng");
        CHECK(v && strcmp(v, "0x0000000000000001,0xffffffffffffffff,0x0123456789abcdef") == 0);
        v = amp_safetensors_meta_get(f, "amp.scaler");
        CHECK(v && strncmp(v, "{\"scale\": ", 10) == 0);
        v = amp_safetensors_meta_get(f, "run");
        CHECK(v && strcmp(v, "round trip \"test\"") == 0);
        v = amp_safetensors_meta_get(f, "format");
        CHECK(v && strcmp(v, "pt") == 0);
        amp_safetensors_close(f);
    }

    /* Reserved user keys are refused. */
    const amp_st_meta reserved[1] = {{"amp.step", "9"}};
    info.user = reserved;
    CHECK_EQ_INT(amp_checkpoint_save(path, ctx, opt, s, &info, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
    free(psnap);
    free(osnap);
out:
    amp_optimizer_free(opt);
    amp_scaler_free(s);
    amp_scaler_free(s2);
    amp_ctx_free(ctx);
    unlink(path);
}

void test_checkpoint_resume(void) {
    enum { K = 4 };
    char path[256], err[512];
    tmp_path(path, sizeof path, "resume.safetensors");
    const amp_dtype dtypes[3] = {AMP_F16, AMP_BF16, AMP_F32};
    for (int d = 0; d < 3; d++) {
        world a, b;
        if (!world_create(&a, dtypes[d], 42)) return;
        for (int64_t step = 0; step < K; step++) train_step(&a, step);
        amp_checkpoint_info info = {.step = K, .epoch = 1, .n_rng = 1, .rng = {0xDEADBEEFull}};
        CHECK_EQ_INT(amp_checkpoint_save(path, a.ctx, a.opt, a.s, &info, err, sizeof err), AMP_OK);
        for (int64_t step = K; step < 2 * K; step++) train_step(&a, step);

        /* B: a fresh world from another init seed, loaded from the checkpoint, continues. */
        if (!world_create(&b, dtypes[d], 999)) {
            world_free(&a);
            return;
        }
        amp_checkpoint_info got;
        CHECK_EQ_INT(amp_checkpoint_load(path, b.ctx, b.opt, b.s, &got, err, sizeof err), AMP_OK);
        CHECK_MSG(err[0] == '\0', "%s", err);
        CHECK_EQ_INT(got.step, K);
        CHECK_EQ_INT(got.epoch, 1);
        CHECK(got.n_rng == 1 && got.rng[0] == 0xDEADBEEFull);
        for (int64_t step = got.step; step < 2 * K; step++) train_step(&b, step);
        char what[64];
        snprintf(what, sizeof what, "%s: 2K steps vs K + resume + K", amp_dtype_name(dtypes[d]));
        worlds_equal(&a, &b, what);
        CHECK_MSG(amp_optimizer_step_count(a.opt) > 0, "some steps were taken");
        world_free(&a);
        world_free(&b);
    }
    unlink(path);
}

void test_checkpoint_mismatch(void) {
    char path[256], err[512];
    tmp_path(path, sizeof path, "mismatch.safetensors");
    world a, b;
    if (!world_create(&a, AMP_F16, 1)) return;
    train_step(&a, 0);
    CHECK_EQ_INT(amp_checkpoint_save(path, a.ctx, a.opt, a.s, NULL, err, sizeof err), AMP_OK);

    /* A wider model: shape mismatch, refused before anything changes. */
    amp_ctx_config cc = amp_ctx_default_config();
    cc.arena_bytes = 1 << 16;
    amp_model_config cfg = tiny_mlp_config(AMP_F16);
    cfg.hidden = 9;
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    if (CHECK(amp_ctx_create(&cc, &ctx) == AMP_OK && amp_model_create(ctx, &cfg, &m) == AMP_OK &&
              amp_ctx_alloc_params(ctx) == AMP_OK && amp_model_init(m, 3) == AMP_OK)) {
        size_t pn;
        const void *pm = amp_ctx_param_memory(ctx, &pn);
        unsigned char *snap = malloc(pn);
        if (snap) memcpy(snap, pm, pn);
        CHECK_EQ_INT(amp_checkpoint_load(path, ctx, NULL, NULL, NULL, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
        CHECK(one_line_naming(err, path) && strstr(err, "1.weight") && strstr(err, "shape"));
        CHECK(snap && memcmp(snap, pm, pn) == 0);
        free(snap);
    }
    amp_ctx_free(ctx);
    amp_model_free(m);

    /* A model with a tensor the file lacks. */
    ctx = NULL;
    if (CHECK(amp_ctx_create(&cc, &ctx) == AMP_OK)) {
        const int64_t s2[1] = {2};
        amp_param_new(ctx, "1.bias", AMP_F16, 1, (const int64_t[1]){8});
        amp_param_new(ctx, "7.weight", AMP_F32, 1, s2);
        CHECK(amp_ctx_alloc_params(ctx) == AMP_OK);
        CHECK_EQ_INT(amp_checkpoint_load(path, ctx, NULL, NULL, NULL, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
        CHECK(one_line_naming(err, path) && strstr(err, "missing tensor \"7.weight\""));
    }
    amp_ctx_free(ctx);

    /* Resuming in another dtype is refused; loading weights alone converts them. */
    if (world_create(&b, AMP_BF16, 1)) {
        CHECK_EQ_INT(amp_checkpoint_load(path, b.ctx, b.opt, b.s, NULL, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
        CHECK(one_line_naming(err, path) && strstr(err, "F16") && strstr(err, "bf16"));
        CHECK_EQ_INT(amp_checkpoint_load(path, b.ctx, NULL, NULL, NULL, err, sizeof err), AMP_OK);
        amp_tensor *pa = amp_ctx_param(a.ctx, 0), *pb = amp_ctx_param(b.ctx, 0);
        uint16_t want[16];
        float tmp[16];
        amp_convert(tmp, AMP_F32, pa->data, AMP_F16, 16);
        amp_convert(want, AMP_BF16, tmp, AMP_F32, 16);
        CHECK(memcmp(want, pb->data, sizeof want) == 0);
        world_free(&b);
    }

    /* Optimizer or scaler state the file does not have. */
    CHECK_EQ_INT(amp_checkpoint_save(path, a.ctx, NULL, NULL, NULL, err, sizeof err), AMP_OK);
    if (world_create(&b, AMP_F16, 1)) {
        CHECK_EQ_INT(amp_checkpoint_load(path, b.ctx, b.opt, NULL, NULL, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
        CHECK(one_line_naming(err, path) && strstr(err, "master.1.weight"));
        CHECK_EQ_INT(amp_checkpoint_load(path, b.ctx, NULL, b.s, NULL, err, sizeof err), AMP_ERR_INVALID_ARGUMENT);
        CHECK(one_line_naming(err, path) && strstr(err, "scaler"));
        CHECK_EQ_INT(amp_checkpoint_load(path, b.ctx, NULL, NULL, NULL, err, sizeof err), AMP_OK);
        world_free(&b);
    }
    /* A malformed checkpoint: the reader's message comes through. */
    CHECK(write_raw(path, 4, "{}", 0));
    if (world_create(&b, AMP_F16, 1)) {
        CHECK_EQ_INT(amp_checkpoint_load(path, b.ctx, b.opt, b.s, NULL, err, sizeof err), AMP_ERR_FORMAT);
        CHECK(one_line_naming(err, path));
        world_free(&b);
    }
    CHECK_EQ_INT(amp_checkpoint_save(NULL, a.ctx, NULL, NULL, NULL, err, sizeof err), AMP_ERR_NULL_POINTER);
    CHECK_EQ_INT(amp_checkpoint_load(path, NULL, NULL, NULL, NULL, err, sizeof err), AMP_ERR_NULL_POINTER);
    world_free(&a);
    unlink(path);
}

/* ---- atomic writes ---- */

typedef struct fault {
    size_t budget; /* bytes the hook lets through before failing */
    int err;       /* errno to fail with; 0: SIGKILL the process instead */
} fault;

static ssize_t faulty_write(int fd, const void *buf, size_t n, void *user) {
    fault *f = user;
    if (f->budget == 0) {
        if (f->err == 0) raise(SIGKILL);
        errno = f->err;
        return -1;
    }
    size_t k = n < f->budget ? n : f->budget;
    ssize_t w = write(fd, buf, k);
    if (w > 0) f->budget -= (size_t)w;
    return w;
}

void test_checkpoint_atomic(void) {
    char path[256], tmp[300], err[512];
    tmp_path(path, sizeof path, "atomic.safetensors");
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    world a;
    if (!world_create(&a, AMP_F16, 5)) return;
    CHECK_EQ_INT(amp_checkpoint_save(path, a.ctx, a.opt, a.s, NULL, err, sizeof err), AMP_OK);
    size_t good_len = 0;
    unsigned char *good = read_file(path, &good_len);
    CHECK(good && good_len > 100);
    CHECK(!file_exists(tmp));
    train_step(&a, 0); /* the next save would differ */

    /* A full disk half-way through: AMP_ERR_IO naming the path and the reason; the old file stays. */
    const size_t budgets[3] = {0, 5, 300};
    for (int i = 0; i < 3; i++) {
        fault fl = {.budget = budgets[i], .err = ENOSPC};
        amp_io_set_write_hook(faulty_write, &fl);
        int rc = amp_checkpoint_save(path, a.ctx, a.opt, a.s, NULL, err, sizeof err);
        amp_io_set_write_hook(NULL, NULL);
        CHECK_EQ_INT(rc, AMP_ERR_IO);
        CHECK_MSG(one_line_naming(err, path) && strstr(err, strerror(ENOSPC)), "message: %s", err);
        size_t len = 0;
        unsigned char *now = read_file(path, &len);
        CHECK_MSG(now && len == good_len && memcmp(now, good, len) == 0, "budget %zu: the previous file changed", budgets[i]);
        free(now);
        CHECK_MSG(!file_exists(tmp), "the temp file %s was left behind", tmp);
    }
    /* EIO and a short-writing disk (a write of 0 bytes counts as a full disk). */
    {
        fault fl = {.budget = 64, .err = EIO};
        amp_io_set_write_hook(faulty_write, &fl);
        CHECK_EQ_INT(amp_checkpoint_save(path, a.ctx, a.opt, a.s, NULL, err, sizeof err), AMP_ERR_IO);
        amp_io_set_write_hook(NULL, NULL);
        CHECK(strstr(err, strerror(EIO)) != NULL);
    }
    /* A directory that does not exist: nothing is created. */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/no/such/dir/ckpt.safetensors", tmp_dir);
    CHECK_EQ_INT(amp_checkpoint_save(bad, a.ctx, a.opt, a.s, NULL, err, sizeof err), AMP_ERR_IO);
    CHECK(one_line_naming(err, bad));
    /* A path that is a directory: the rename fails, the temp file is removed. */
    char dir_path[300], dir_tmp[340];
    snprintf(dir_path, sizeof dir_path, "%s/a_directory", tmp_dir);
    snprintf(dir_tmp, sizeof dir_tmp, "%s.tmp.%ld", dir_path, (long)getpid());
    mkdir(dir_path, 0755);
    CHECK_EQ_INT(amp_checkpoint_save(dir_path, a.ctx, a.opt, a.s, NULL, err, sizeof err), AMP_ERR_IO);
    CHECK(one_line_naming(err, dir_path) && strstr(err, "rename"));
    CHECK(!file_exists(dir_tmp));
    rmdir(dir_path);

    /* SIGKILL mid-write (a child process killed after 200 bytes): the previous file is intact and
     * loads; the killed writer's temp file is all that is left over. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        fault fl = {.budget = 200, .err = 0};
        amp_io_set_write_hook(faulty_write, &fl);
        char e[256];
        amp_checkpoint_save(path, a.ctx, a.opt, a.s, NULL, e, sizeof e);
        _exit(3); /* not reached */
    }
    int status = 0;
    if (CHECK(pid > 0) && CHECK(waitpid(pid, &status, 0) == pid)) {
        CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child status 0x%x", (unsigned)status);
        size_t len = 0;
        unsigned char *now = read_file(path, &len);
        CHECK(now && len == good_len && memcmp(now, good, len) == 0);
        free(now);
        char child_tmp[300];
        snprintf(child_tmp, sizeof child_tmp, "%s.tmp.%ld", path, (long)pid);
        size_t tlen = 0;
        unsigned char *partial = read_file(child_tmp, &tlen);
        CHECK_MSG(partial && tlen == 200, "the killed writer's temp file has %zu bytes", tlen);
        free(partial);
        unlink(child_tmp);
        world b;
        if (world_create(&b, AMP_F16, 6)) {
            CHECK_EQ_INT(amp_checkpoint_load(path, b.ctx, b.opt, b.s, NULL, err, sizeof err), AMP_OK);
            world_free(&b);
        }
    }
    /* After all that, a normal save succeeds and replaces the file. */
    CHECK_EQ_INT(amp_checkpoint_save(path, a.ctx, a.opt, a.s, NULL, err, sizeof err), AMP_OK);
    size_t len = 0;
    unsigned char *now = read_file(path, &len);
    CHECK(now && (len != good_len || memcmp(now, good, len) != 0));
    free(now);
    free(good);
    world_free(&a);
    unlink(path);
}

/* ---- the committed fixture ---- */

/* The fixed input the fixture's logits are computed on (the PyTorch script rebuilds it). */
static void fixture_input(float *x) {
    for (int i = 0; i < 2 * TINY_IN; i++) x[i] = (float)(i % 11) / 10.0f - 0.5f;
}

static bool fixture_logits(world *w, float *out) {
    float x[2 * TINY_IN];
    fixture_input(x);
    amp_ctx_reset(w->ctx);
    const int64_t shape[2] = {2, TINY_IN};
    amp_tensor *xt = amp_tensor_from(w->ctx, amp_ctx_param(w->ctx, 0)->dtype, 2, shape, x, AMP_F32);
    amp_tensor *logits = amp_model_forward(w->m, w->ctx, xt, NULL, 2, false);
    return logits && amp_tensor_read(logits, out, AMP_F32) == AMP_OK;
}

static void write_fixture(const char *path) {
    world w;
    if (!world_create(&w, AMP_F16, 2024)) return;
    for (int64_t step = 0; step < 3; step++) train_step(&w, step);
    float logits[6];
    char text[200] = "";
    if (!CHECK(fixture_logits(&w, logits))) {
        world_free(&w);
        return;
    }
    for (int i = 0; i < 6; i++) snprintf(text + strlen(text), sizeof text - strlen(text), "%s%.9g", i ? "," : "", (double)logits[i]);
    const amp_st_meta user[2] = {{"fixture.input", "x[i] = (i % 11) / 10 - 0.5 for i in 0..31, shape [2, 16]"},
                                 {"fixture.logits", text}};
    amp_checkpoint_info info = {.step = 3, .epoch = 0, .user = user, .n_user = 2};
    char err[512];
    CHECK_EQ_INT(amp_checkpoint_save(path, w.ctx, w.opt, w.s, &info, err, sizeof err), AMP_OK);
    harness_note("wrote %s (%s)", path, err[0] ? err : "ok");
    world_free(&w);
}

void test_checkpoint_fixture(void) {
    const char *regen = getenv("AMP_WRITE_CHECKPOINT_FIXTURE");
    if (regen && *regen) write_fixture(regen);
    char path[512], err[512];
    const char *env = getenv("AMP_FIXTURE_DIR");
    snprintf(path, sizeof path, "%s/checkpoint_mlp_tiny.safetensors", env && *env ? env : "tests/fixtures");
    world w;
    if (!world_create(&w, AMP_F16, 1)) return;
    amp_checkpoint_info info;
    if (CHECK_MSG(amp_checkpoint_load(path, w.ctx, w.opt, w.s, &info, err, sizeof err) == AMP_OK, "%s", err)) {
        CHECK_EQ_INT(info.step, 3);
        CHECK_EQ_INT(amp_optimizer_step_count(w.opt) > 0, 1);
        amp_st_file *f = NULL;
        if (CHECK(amp_safetensors_open(path, &f, err, sizeof err) == AMP_OK)) {
            const char *text = amp_safetensors_meta_get(f, "fixture.logits");
            float logits[6];
            if (CHECK(text) && CHECK(fixture_logits(&w, logits))) {
                /* The forward pass may be refined later; the weights must still give these logits. */
                for (int i = 0; i < 6; i++) {
                    char *end;
                    float want = strtof(text, &end);
                    CHECK_MSG(fabsf(logits[i] - want) <= 1e-2f + 1e-2f * fabsf(want), "logit %d: %g vs %g", i,
                              (double)logits[i], (double)want);
                    text = *end == ',' ? end + 1 : end;
                }
            }
            amp_safetensors_close(f);
        }
    }
    world_free(&w);
    if (tmp_dir[0] && strcmp(tmp_dir, "/tmp") != 0) rmdir(tmp_dir);
}
