/* IDX images stored as float32 (type 0x0D) or float64 (0x0E): loaded as fp32, batched as
 * (value - mean) / std, and a NaN, an infinity or a float64 beyond fp32's range refused with a message
 * that names the file, the image and the pixel. The files are written here, big-endian, from values
 * chosen to be exact in fp32, so the expected results need nothing from the loader. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp.h"
#include "harness.h"
#include "test_util.h"
#include "tests.h"

enum { N = 3, ROWS = 2, COLS = 2, PER = ROWS * COLS, ERR_SIZE = 512 };

/* Exact in fp32 (and in the double they are written from). */
static const double k_values[N * PER] = {0.0, 0.5, 1.0, -2.0, 3.25, 0.125, 0.0625, 7.0,
                                         -0.75, 100.0, 6.5, 1.0 / 64};
static const uint8_t k_labels[N] = {2, 0, 1};

static char g_dir[64];

static size_t put_be(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
    return (size_t)bytes;
}

static bool write_file(const char *name, const uint8_t *data, size_t n, bool gz) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    return test_write_file(path, data, n, gz);
}

/* The training pair with images of element size `elem` (4 or 8); vals[bad] replaced by bad_value
 * when bad >= 0. Removes the other compression's files so the loader sees these. */
static bool write_pair(int elem, bool gz, int bad, double bad_value) {
    uint8_t img[16 + N * PER * 8], lab[8 + N];
    size_t n = put_be(img, elem == 4 ? 0xD03u : 0xE03u, 4);
    n += put_be(img + n, N, 4), n += put_be(img + n, ROWS, 4), n += put_be(img + n, COLS, 4);
    for (int i = 0; i < N * PER; i++) {
        const double v = i == bad ? bad_value : k_values[i];
        if (elem == 4) {
            const float f = (float)v;
            uint32_t u;
            memcpy(&u, &f, sizeof u);
            n += put_be(img + n, u, 4);
        } else {
            uint64_t u;
            memcpy(&u, &v, sizeof u);
            n += put_be(img + n, u, 8);
        }
    }
    size_t m = put_be(lab, 0x801, 4);
    m += put_be(lab + m, N, 4);
    memcpy(lab + m, k_labels, N);
    m += N;
    char path[128];
    static const char *const names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                         "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"};
    for (int i = 0; i < 4; i++) unlink((snprintf(path, sizeof path, "%s/%s", g_dir, names[i]), path));
    return write_file(gz ? names[2] : names[0], img, n, gz) && write_file(gz ? names[3] : names[1], lab, m, gz);
}

void test_data_idx_float(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/amp_test_float_XXXXXX");
    if (!CHECK(mkdtemp(g_dir) != NULL)) return;
    char err[ERR_SIZE];
    for (int elem = 4; elem <= 8; elem += 4) {
        for (int gz = 0; gz < 2; gz++) {
            if (!CHECK(write_pair(elem, gz, -1, 0))) continue;
            amp_image_dataset d;
            const int st = amp_image_dataset_load(g_dir, true, NULL, &d, err, sizeof err);
            if (!CHECK_MSG(st == AMP_OK, "float%d gz=%d: status %d: %s", elem * 8, gz, st, err)) continue;
            CHECK(d.count == N && d.rows == ROWS && d.cols == COLS && d.classes == 3);
            CHECK(d.pixels == NULL && d.values != NULL);
            for (int i = 0; i < N * PER; i++)
                CHECK_MSG(d.values[i] == (float)k_values[i], "float%d value %d: %g, want %g", elem * 8, i,
                          (double)d.values[i], k_values[i]);
            /* The batch: (value - mean) / std, the same fp32 expression. */
            const int64_t idx[2] = {2, 0};
            float x[2 * PER];
            int32_t y[2];
            CHECK_EQ_INT(amp_image_dataset_batch(&d, idx, 2, 0.5f, 2.0f, x, y), AMP_OK);
            CHECK(y[0] == 1 && y[1] == 2);
            for (int p = 0; p < PER; p++) {
                CHECK(x[p] == ((float)k_values[2 * PER + p] - 0.5f) / 2.0f);
                CHECK(x[PER + p] == ((float)k_values[p] - 0.5f) / 2.0f);
            }
            amp_image_dataset_free(&d);
            CHECK(d.values == NULL && d.count == 0);
        }
    }
    /* Non-finite values: image 1, pixel 2 is element 6; the message names the file, image and pixel. */
    static const struct {
        int elem;
        double value;
        const char *text;
    } bad[] = {{4, NAN, "image 1, pixel 2: non-finite value (nan)"},
               {4, INFINITY, "image 1, pixel 2: non-finite value (inf)"},
               {8, -INFINITY, "image 1, pixel 2: non-finite value (-inf)"},
               {8, NAN, "image 1, pixel 2: non-finite value (nan)"},
               {8, 1e300, "image 1, pixel 2: 1e+300 is outside fp32's range"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int gz = 0; gz < 2; gz++) {
            if (!CHECK(write_pair(bad[i].elem, gz, 6, bad[i].value))) continue;
            amp_image_dataset d;
            memset(&d, 0xAB, sizeof d);
            const int st = amp_image_dataset_load(g_dir, true, NULL, &d, err, sizeof err);
            CHECK_MSG(st == AMP_ERR_FORMAT, "case %zu gz=%d: status %d (%s)", i, gz, st, err);
            CHECK_MSG(strstr(err, bad[i].text) != NULL && strstr(err, "train-images-idx3-ubyte") != NULL &&
                          strstr(err, g_dir) != NULL,
                      "case %zu gz=%d: message \"%s\" lacks the file or \"%s\"", i, gz, err, bad[i].text);
            CHECK(d.values == NULL && d.pixels == NULL && d.labels == NULL && d.count == 0);
            amp_image_dataset_free(&d);
        }
    }
    /* A float64 header claiming more than the limit: the element size counts (2^29 float64 pixels are
     * 2^32 bytes, over the 2^31-byte limit, where 2^29 ubyte pixels would pass it). */
    uint8_t hdr[16 + 8], lab[8];
    size_t n = put_be(hdr, 0xE03, 4);
    n += put_be(hdr + n, 1u << 13, 4), n += put_be(hdr + n, 1u << 8, 4), n += put_be(hdr + n, 1u << 8, 4);
    n += put_be(hdr + n, 0, 8);
    put_be(lab, 0x801, 4), put_be(lab + 4, 1u << 13, 4);
    if (CHECK(write_pair(8, false, -1, 0)) && CHECK(write_file("train-images-idx3-ubyte", hdr, n, false)) &&
        CHECK(write_file("train-labels-idx1-ubyte", lab, sizeof lab, false))) {
        amp_image_dataset d;
        const int st = amp_image_dataset_load(g_dir, true, NULL, &d, err, sizeof err);
        CHECK_MSG(st == AMP_ERR_FORMAT && strstr(err, "limit") != NULL, "status %d: %s", st, err);
    }
    char path[128];
    unlink((snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", g_dir), path));
    unlink((snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", g_dir), path));
    rmdir(g_dir);
}
