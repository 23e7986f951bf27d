/* Fuzz target for the IDX (MNIST layout) loader, plain and gzipped. Input layout: byte 0 = flags (odd:
 * write both files gzip-compressed under the .gz names), bytes 1-2 = little-endian u16 giving the
 * images file's length modulo (rest + 1), then the images file's bytes followed by the labels file's.
 * Both files go into a per-process temp directory (reused); on success a few images are batched and
 * an out-of-range index must be refused. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "amp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const k_names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                       "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"};
static char g_dir[256];

static void file_path(char *buf, size_t cap, int which) {
    snprintf(buf, cap, "%s/%s", g_dir, k_names[which]);
}

static void clear_files(void) {
    char p[512];
    for (int i = 0; i < 4; i++) {
        file_path(p, sizeof p, i);
        unlink(p);
    }
}

static void remove_temp(void) {
    if (!g_dir[0]) return;
    clear_files();
    rmdir(g_dir);
}

static const char *temp_dir(void) {
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "/tmp/amp_fuzz_idx_%ld", (long)getpid());
        if (mkdir(g_dir, 0700) != 0) {
            struct stat st;
            if (stat(g_dir, &st) != 0 || !S_ISDIR(st.st_mode)) abort();
        }
        atexit(remove_temp);
    }
    return g_dir;
}

static int write_plain(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    const int ok = fwrite(data, 1, size, f) == size;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

static int write_gz(const char *path, const uint8_t *data, size_t size) {
    gzFile g = gzopen(path, "wb");
    if (!g) return -1;
    const int ok = size == 0 || gzwrite(g, data, (unsigned)size) == (int)size;
    return (gzclose(g) == Z_OK && ok) ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    const int gz = data[0] & 1;
    const uint8_t *rest = data + 3;
    const size_t rest_len = size - 3;
    const size_t img_len = (size_t)(data[1] | (data[2] << 8)) % (rest_len + 1);
    temp_dir();
    clear_files();
    char img_path[512], lbl_path[512];
    file_path(img_path, sizeof img_path, gz ? 2 : 0);
    file_path(lbl_path, sizeof lbl_path, gz ? 3 : 1);
    int (*write_file)(const char *, const uint8_t *, size_t) = gz ? write_gz : write_plain;
    if (write_file(img_path, rest, img_len) != 0) abort();
    if (write_file(lbl_path, rest + img_len, rest_len - img_len) != 0) abort();

    char err[512];
    amp_image_dataset d;
    const int rc = amp_image_dataset_load(g_dir, true, NULL, &d, err, sizeof err);
    if (rc != AMP_OK) {
        if (d.pixels != NULL || d.values != NULL || d.labels != NULL || d.count != 0) abort();
        amp_image_dataset_free(&d);
        return 0;
    }
    if (d.count <= 0 || d.rows <= 0 || d.cols <= 0 || d.classes < 1 || d.classes > 256) abort();
    for (int64_t i = 0; i < d.count; i++)
        if (d.labels[i] >= d.classes) abort();
    /* Exactly one of the two pixel arrays; float images are all finite (the loader's promise). */
    if ((d.pixels == NULL) == (d.values == NULL)) abort();
    for (int64_t i = 0; d.values && i < d.count * d.rows * d.cols; i++)
        if (!isfinite(d.values[i])) abort();
    const int64_t idx[3] = {0, d.count / 2, d.count - 1};
    const size_t per = (size_t)(d.rows * d.cols);
    float *x = malloc(sizeof(float) * per * 3);
    int32_t *y = malloc(sizeof(int32_t) * 3);
    if (!x || !y) abort();
    if (amp_image_dataset_batch(&d, idx, 3, 0.5f, 0.25f, x, y) != AMP_OK) abort();
    for (int i = 0; i < 3; i++)
        if (y[i] != d.labels[idx[i]]) abort();
    const int64_t bad[2] = {d.count, -1};
    if (amp_image_dataset_batch(&d, &bad[0], 1, 0.5f, 0.25f, x, y) != AMP_ERR_INVALID_ARGUMENT) abort();
    if (amp_image_dataset_batch(&d, &bad[1], 1, 0.5f, 0.25f, x, y) != AMP_ERR_INVALID_ARGUMENT) abort();
    free(x), free(y);
    amp_image_dataset_free(&d);
    return 0;
}
