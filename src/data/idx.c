/* IDX image/label files (MNIST's layout), plain or gzipped, read through zlib's gz* functions (they
 * read a plain file as is). Headers are read and checked, both of them, before anything is allocated.
 *
 * IDX: a big-endian magic 0x0000TTNN (TT the element type: 0x08 unsigned byte, 0x0D float32, 0x0E
 * float64; NN the number of dimensions), NN big-endian uint32 dimensions, then the elements, row-major
 * (multi-byte elements big-endian). Images may be ubyte or float; labels are ubyte. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "data_internal.h"

enum {
    IDX_PATH_MAX = 4096,
    IDX_MAX_DIMS = 3,
    IDX_CHUNK = 1 << 20, /* gzread takes an unsigned length: read in chunks */
};

#define IDX_MAGIC_IMAGES 0x00000803u /* ubyte, 3 dimensions: count, rows, cols */
#define IDX_MAGIC_LABELS 0x00000801u /* ubyte, 1 dimension: count */
#define IDX_TYPE_UBYTE 0x08u
#define IDX_TYPE_F32 0x0Du
#define IDX_TYPE_F64 0x0Eu

typedef struct idx_file {
    char path[IDX_PATH_MAX];
    gzFile f;
    uint32_t dims[IDX_MAX_DIMS];
    unsigned elem;     /* bytes per element: 1 (ubyte), 4 (float32) or 8 (float64) */
    bool direct;       /* plain (not gzip) data */
    uint64_t max_data; /* the most data bytes the file can hold: its size less the header (plain), or
                          deflate's 1032:1 ratio bound (gzip); checked before allocating */
} idx_file;

static void idx_close(idx_file *x) {
    if (x->f) gzclose(x->f);
    x->f = NULL;
}

/* Reads up to n bytes; returns how many it got. *zerr: 0, or zlib's error (with its message in *zmsg)
 * when the stream is corrupt rather than merely short. */
static int64_t idx_read(gzFile f, void *buf, int64_t n, int *zerr, const char **zmsg) {
    int64_t got = 0;
    *zerr = 0;
    while (got < n) {
        const int64_t want = n - got < IDX_CHUNK ? n - got : IDX_CHUNK;
        const int r = gzread(f, (unsigned char *)buf + got, (unsigned)want);
        if (r > 0) got += r;
        if (r < (int)want) {
            int code = Z_OK;
            const char *msg = gzerror(f, &code);
            /* Z_BUF_ERROR: the gzip stream ended early, which is truncation, not corruption. */
            if (code != Z_OK && code != Z_BUF_ERROR) {
                *zerr = code;
                *zmsg = msg ? msg : "";
            }
            break;
        }
    }
    return got;
}

/* The error for a read that zlib failed: gzerror's message (zmsg), less the path it starts with,
 * which amp's message already names. */
static int idx_corrupt(const idx_file *x, const char *zmsg, char *err, size_t err_size) {
    const size_t n = strlen(x->path);
    if (strncmp(zmsg, x->path, n) == 0 && zmsg[n] == ':' && zmsg[n + 1] == ' ') zmsg += n + 2;
    return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: corrupt gzip data: %s", x->path, zmsg);
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Finds DIR/NAME.gz or else DIR/NAME, opens it and reads and checks its header. */
static int idx_open(idx_file *x, const char *dir, const char *name, uint32_t magic, bool float_ok, int ndim,
                    const char *what, char *err, size_t err_size) {
    struct stat st;
    const size_t dl = strlen(dir);
    const char *sep = dl && dir[dl - 1] == '/' ? "" : "/";
    int n = snprintf(x->path, sizeof x->path, "%s%s%s.gz", dir, sep, name);
    if (n < 0 || (size_t)n >= sizeof x->path)
        return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: directory path too long", dir);
    if (stat(x->path, &st) != 0) {
        x->path[n - 3] = '\0'; /* drop ".gz" */
        if (stat(x->path, &st) != 0)
            return amp_err_fmt(err, err_size, AMP_ERR_IO, "%s%s%s[.gz]: not found (%s)", dir, sep, name,
                              strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) return amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: is a directory", x->path);
    errno = 0;
    x->f = gzopen(x->path, "rb");
    if (!x->f) {
        if (errno == ENOMEM || errno == 0)
            return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: cannot open: out of memory", x->path);
        return amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: cannot open: %s", x->path, strerror(errno));
    }

    unsigned char h[4 + 4 * IDX_MAX_DIMS];
    const int64_t header = 4 + 4 * (int64_t)ndim;
    int zerr;
    const char *zmsg = "";
    const int64_t got = idx_read(x->f, h, 4, &zerr, &zmsg);
    if (zerr)
        return idx_corrupt(x, zmsg, err, err_size);
    if (got < 4)
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: truncated header: %lld of %lld bytes", x->path,
                          (long long)got, (long long)header);
    const uint32_t m = be32(h), low = magic & 0xFFu;
    x->elem = m == magic ? 1 : 0;
    if (float_ok && m == (IDX_TYPE_F32 << 8 | low)) x->elem = 4;
    if (float_ok && m == (IDX_TYPE_F64 << 8 | low)) x->elem = 8;
    if (!x->elem)
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: bad magic 0x%08x (expected 0x%08x for %s%s)", x->path,
                          (unsigned)m, (unsigned)magic, what,
                          float_ok ? ", or 0x00000d03 / 0x00000e03 for float32 / float64 ones" : "");
    const int64_t got_dims = idx_read(x->f, h + 4, header - 4, &zerr, &zmsg);
    if (zerr)
        return idx_corrupt(x, zmsg, err, err_size);
    if (got_dims < header - 4)
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: truncated header: %lld of %lld bytes", x->path,
                          (long long)(4 + got_dims), (long long)header);
    for (int i = 0; i < ndim; i++) x->dims[i] = be32(h + 4 + 4 * i);
    const uint64_t fsize = st.st_size > 0 ? (uint64_t)st.st_size : 0;
    x->direct = gzdirect(x->f) != 0;
    x->max_data = x->direct ? (fsize > (uint64_t)header ? fsize - (uint64_t)header : 0) : fsize * 1032 + 1024;
    if (x->dims[0] == 0) return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: header says 0 %s", x->path, what);
    for (int i = 1; i < ndim; i++)
        if (x->dims[i] == 0)
            return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: header says %s of %ux%u", x->path, what,
                              (unsigned)x->dims[1], (unsigned)x->dims[2]);
    return AMP_OK;
}

/* Refuses n data bytes (the header's claim) that the file cannot hold, before anything is allocated
 * for them; the message is idx_read_data's for a plain file. */
static int idx_check_size(const idx_file *x, int64_t n, int64_t unit, const char *describe, const char *kind,
                          char *err, size_t err_size) {
    if ((uint64_t)n <= x->max_data) return AMP_OK;
    if (x->direct)
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT,
                          "%s: truncated: header says %s, file holds %lld (%lld of %lld %s bytes)", x->path,
                          describe, (long long)((int64_t)x->max_data / unit), (long long)x->max_data, (long long)n,
                          kind);
    return amp_err_fmt(err, err_size, AMP_ERR_FORMAT,
                      "%s: truncated: header says %s, more than a gzip file of this size can hold", x->path, describe);
}

/* Reads exactly n data bytes and checks that nothing follows them. `describe` is what the header
 * promised ("60000 images of 28x28"), `unit` the size of one record (for "file holds N"). */
static int idx_read_data(idx_file *x, uint8_t *buf, int64_t n, int64_t unit, const char *describe, const char *kind,
                         char *err, size_t err_size) {
    int zerr;
    const char *zmsg = "";
    const int64_t got = idx_read(x->f, buf, n, &zerr, &zmsg);
    if (zerr)
        return idx_corrupt(x, zmsg, err, err_size);
    if (got < n)
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT,
                          "%s: truncated: header says %s, file holds %lld (%lld of %lld %s bytes)", x->path,
                          describe, (long long)(got / unit), (long long)got, (long long)n, kind);
    unsigned char extra;
    const int64_t more = idx_read(x->f, &extra, 1, &zerr, &zmsg);
    if (zerr)
        return idx_corrupt(x, zmsg, err, err_size);
    if (more)
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: trailing data after the %s its header declares",
                          x->path, describe);
    return AMP_OK;
}

/* Converts n big-endian float32/float64 elements (x->elem bytes each) to fp32 values. A NaN or an
 * infinity, or a float64 outside fp32's range, is refused with the image (record) index: training on
 * it would turn every loss into NaN, far from the file that caused it. */
static int idx_to_fp32(const idx_file *x, const uint8_t *raw, float *values, int64_t n, uint64_t per_image,
                       char *err, size_t err_size) {
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *p = raw + i * (int64_t)x->elem;
        double v;
        if (x->elem == 4) {
            const uint32_t u = be32(p);
            float f;
            memcpy(&f, &u, sizeof f);
            v = f;
        } else {
            const uint64_t u = (uint64_t)be32(p) << 32 | be32(p + 4);
            memcpy(&v, &u, sizeof v);
        }
        const float f = (float)v;
        if (!isfinite(f)) {
            const long long image = (long long)((uint64_t)i / per_image), pixel = (long long)((uint64_t)i % per_image);
            if (isfinite(v))
                return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: image %lld, pixel %lld: %g is outside fp32's range",
                                  x->path, image, pixel, v);
            return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: image %lld, pixel %lld: non-finite value (%s)",
                              x->path, image, pixel, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
        }
        values[i] = f;
    }
    return AMP_OK;
}

int amp_image_dataset_load(const char *dir, bool train, const amp_allocator *alloc, amp_image_dataset *out,
                           char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (out) memset(out, 0, sizeof *out);
    if (!dir || !out) return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_image_dataset_load: NULL argument");
    amp_allocator a;
    if (!data_allocator(alloc, &a))
        return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "amp_image_dataset_load: allocator without alloc/free");

    idx_file im = {.f = NULL}, lb = {.f = NULL};
    uint8_t *pixels = NULL, *labels = NULL;
    float *values = NULL;
    int st = idx_open(&im, dir, train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte", IDX_MAGIC_IMAGES, true,
                      3, "images", err, err_size);
    if (st == AMP_OK)
        st = idx_open(&lb, dir, train ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte", IDX_MAGIC_LABELS, false,
                      1, "labels", err, err_size);
    const int64_t elem = st == AMP_OK ? im.elem : 1;
    const int64_t count = im.dims[0], rows = im.dims[1], cols = im.dims[2];
    char describe[96];
    snprintf(describe, sizeof describe, "%lld images of %lldx%lld", (long long)count, (long long)rows,
             (long long)cols);
    if (st == AMP_OK && (int64_t)lb.dims[0] != count)
        st = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s holds %lld images but %s holds %lld labels", im.path,
                        (long long)count, lb.path, (long long)lb.dims[0]);
    /* rows * cols < 2^64 (two uint32); if it is within the bound, count * (rows * cols) < 2^63. */
    const uint64_t image_elems = (uint64_t)rows * (uint64_t)cols, max_elems = AMP_DATA_MAX_BYTES / (uint64_t)elem;
    if (st == AMP_OK && (image_elems > max_elems || (uint64_t)count * image_elems > max_elems))
        st = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: header says %s: more than the %llu-byte limit", im.path,
                        describe, (unsigned long long)AMP_DATA_MAX_BYTES);
    /* Only multiplied once the bound above holds: for a refused header the product can overflow. */
    const int64_t npix = st == AMP_OK ? count * (int64_t)image_elems : 0;
    const int64_t image_bytes = st == AMP_OK ? (int64_t)image_elems * elem : 0; /* the same */
    const char *kind = elem == 1 ? "pixel" : elem == 4 ? "float32 pixel" : "float64 pixel";
    /* A header claiming more than the file can hold is truncation: refused before allocating for it. */
    if (st == AMP_OK) st = idx_check_size(&im, npix * elem, image_bytes, describe, kind, err, err_size);
    if (st == AMP_OK) {
        char ldescribe[48];
        snprintf(ldescribe, sizeof ldescribe, "%lld labels", (long long)count);
        st = idx_check_size(&lb, count, 1, ldescribe, "label", err, err_size);
    }
    if (st == AMP_OK) {
        /* Float images are read into `pixels` as raw bytes, then converted into `values`. */
        pixels = a.alloc((size_t)(npix * elem), 64, a.user);
        values = pixels && elem > 1 ? a.alloc((size_t)npix * sizeof *values, 64, a.user) : NULL;
        labels = pixels && (elem == 1 || values) ? a.alloc((size_t)count, 64, a.user) : NULL;
        if (!labels)
            st = amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory for %s", im.path, describe);
    }
    if (st == AMP_OK) st = idx_read_data(&im, pixels, npix * elem, image_bytes, describe, kind, err, err_size);
    if (st == AMP_OK && elem > 1) {
        st = idx_to_fp32(&im, pixels, values, npix, image_elems, err, err_size);
        a.free(pixels, a.user);
        pixels = NULL;
    }
    if (st == AMP_OK) {
        char ldescribe[48];
        snprintf(ldescribe, sizeof ldescribe, "%lld labels", (long long)count);
        st = idx_read_data(&lb, labels, count, 1, ldescribe, "label", err, err_size);
    }
    idx_close(&im);
    idx_close(&lb);
    if (st != AMP_OK) {
        if (pixels) a.free(pixels, a.user);
        if (values) a.free(values, a.user);
        if (labels) a.free(labels, a.user);
        return st;
    }
    int max_label = 0;
    for (int64_t i = 0; i < count; i++)
        if (labels[i] > max_label) max_label = labels[i];
    *out = (amp_image_dataset){.count = count, .rows = rows, .cols = cols, .classes = max_label + 1,
                               .pixels = pixels, .values = values, .labels = labels, .allocator = a};
    return AMP_OK;
}

void amp_image_dataset_free(amp_image_dataset *d) {
    if (!d) return;
    if (d->allocator.free) {
        if (d->pixels) d->allocator.free(d->pixels, d->allocator.user);
        if (d->values) d->allocator.free(d->values, d->allocator.user);
        if (d->labels) d->allocator.free(d->labels, d->allocator.user);
    }
    memset(d, 0, sizeof *d);
}

int amp_image_dataset_batch(const amp_image_dataset *d, const int64_t *indices, int64_t n, float mean, float std,
                            float *x, int32_t *y) {
    if (!d || (n > 0 && (!indices || !x || !y))) return AMP_ERR_NULL_POINTER;
    if (n < 0 || !(std > 0.0f) || !isfinite(std) || !isfinite(mean)) return AMP_ERR_INVALID_ARGUMENT;
    for (int64_t i = 0; i < n; i++)
        if (indices[i] < 0 || indices[i] >= d->count) return AMP_ERR_INVALID_ARGUMENT;
    /* One table of the 256 possible values: every pixel goes through the same fp32 operations. */
    float lut[256];
    for (int v = 0; v < 256; v++) lut[v] = ((float)v / 255.0f - mean) / std;
    const int64_t size = d->rows * d->cols;
    if (d->values) {
        for (int64_t i = 0; i < n; i++) {
            const float *src = d->values + indices[i] * size;
            float *dst = x + i * size;
            for (int64_t p = 0; p < size; p++) dst[p] = (src[p] - mean) / std;
            y[i] = d->labels[indices[i]];
        }
        return AMP_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *src = d->pixels + indices[i] * size;
        float *dst = x + i * size;
        for (int64_t p = 0; p < size; p++) dst[p] = lut[src[p]];
        y[i] = d->labels[indices[i]];
    }
    return AMP_OK;
}
