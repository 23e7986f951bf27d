/* safetensors: an atomic writer and a reader that validates the whole header before trusting it.
 * Format: https://huggingface.co/docs/safetensors (8-byte LE header length N, N bytes of JSON, data). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "amp/checkpoint.h"
#include "amp/formats.h"
#include "amp/status.h"
#include "io_internal.h"
#include "../core/alloc_internal.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; amp's reader and writer assume a little-endian host"
#endif

/* 2^53: the largest integer range a JSON number (a double in cJSON) represents exactly. */
#define ST_MAX_JSON_INT 9007199254740992.0

/* Every dtype the safetensors spec names with a whole-byte size; amp converts the float ones. */
static const struct {
    const char *name;
    int amp; /* amp_dtype or -1 */
    size_t size;
} st_dtypes[] = {
    {"F32", AMP_F32, 4},      {"F16", AMP_F16, 2},      {"BF16", AMP_BF16, 2}, {"F8_E4M3", AMP_F8E4M3, 1},
    {"F8_E5M2", AMP_F8E5M2, 1}, {"F64", -1, 8},         {"I64", -1, 8},        {"U64", -1, 8},
    {"I32", -1, 4},           {"U32", -1, 4},           {"I16", -1, 2},        {"U16", -1, 2},
    {"I8", -1, 1},            {"U8", -1, 1},            {"BOOL", -1, 1},       {"F8_E8M0", -1, 1},
};
enum { ST_N_DTYPES = sizeof st_dtypes / sizeof st_dtypes[0] };

static const char *st_name_of(amp_dtype dtype) {
    for (int i = 0; i < ST_N_DTYPES; i++)
        if (st_dtypes[i].amp == (int)dtype) return st_dtypes[i].name;
    return NULL;
}


/* ---- the writer ---- */

static amp_io_write_hook write_hook;
static void *write_hook_user;

void amp_io_set_write_hook(amp_io_write_hook hook, void *user) {
    write_hook = hook;
    write_hook_user = user;
}

/* Writes all n bytes; 0, or -1 with errno set. */
static int write_all(int fd, const void *buf, size_t n) {
    const unsigned char *p = buf;
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t w = write_hook ? write_hook(fd, p, chunk, write_hook_user) : write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (w == 0) {
            errno = ENOSPC;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A growable text buffer; `oom` is sticky. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1) cap *= 2;
        char *q = amp_realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}
static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_u64(sbuf *b, uint64_t v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%" PRIu64, v);
    sb_put(b, tmp, (size_t)n);
}
/* A JSON string literal: quotes, backslashes and control characters escaped (RFC 8259). */
static void sb_json_string(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char esc[2] = {'\\', (char)*c};
            sb_put(b, esc, 2);
        } else if (*c < 0x20) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", (unsigned)*c);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Checks the tensors and metadata and builds the header (padded so that 8 + its length is a multiple
 * of 8); fills sizes[i] with tensor i's bytes. */
static int build_header(const char *path, const amp_st_tensor *tensors, size_t n, const amp_st_meta *meta,
                        size_t n_meta, uint64_t *sizes, sbuf *h, char *err, size_t err_size) {
    for (size_t i = 0; i < n; i++) {
        const amp_st_tensor *t = &tensors[i];
        if (!t->name || !t->name[0] || strcmp(t->name, "__metadata__") == 0)
            return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: tensor %zu has an invalid name", path, i);
        const char *dn = st_name_of(t->dtype);
        if (!dn) return amp_err_fmt(err, err_size, AMP_ERR_UNSUPPORTED_DTYPE, "%s: tensor %s: invalid dtype %d", path, t->name, (int)t->dtype);
        if (t->ndim < 0 || t->ndim > AMP_ST_MAX_DIMS || (t->ndim > 0 && !t->shape))
            return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: tensor %s: %d dimensions (at most %d)", path,
                        t->name, t->ndim, AMP_ST_MAX_DIMS);
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0 || (t->shape[d] > 0 && numel > (UINT64_MAX >> 4) / (uint64_t)t->shape[d]))
                return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: tensor %s: bad dimension %" PRId64, path,
                            t->name, t->shape[d]);
            numel *= (uint64_t)t->shape[d];
        }
        sizes[i] = numel * amp_dtype_size(t->dtype);
        if (sizes[i] > 0 && !t->data)
            return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "%s: tensor %s: NULL data", path, t->name);
    }
    for (size_t i = 0; i < n_meta; i++)
        if (!meta[i].key || !meta[i].value || strcmp(meta[i].key, "") == 0)
            return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: metadata entry %zu has no key or value", path, i);

    /* Unique names (tensors) and keys (metadata). */
    size_t m = n > n_meta ? n : n_meta;
    const char **names = amp_malloc((m ? m : 1) * sizeof *names);
    if (!names) return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    for (int pass = 0; pass < 2; pass++) {
        size_t k = pass == 0 ? n : n_meta;
        for (size_t i = 0; i < k; i++) names[i] = pass == 0 ? tensors[i].name : meta[i].key;
        qsort(names, k, sizeof *names, cmp_str_ptr);
        for (size_t i = 1; i < k; i++)
            if (strcmp(names[i - 1], names[i]) == 0) {
                int rc = amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: duplicate %s \"%s\"", path,
                              pass == 0 ? "tensor name" : "metadata key", names[i]);
                amp_free(names);
                return rc;
            }
    }
    amp_free(names);

    sb_puts(h, "{");
    bool first = true;
    if (n_meta > 0) {
        sb_puts(h, "\"__metadata__\":{");
        for (size_t i = 0; i < n_meta; i++) {
            if (i) sb_puts(h, ",");
            sb_json_string(h, meta[i].key);
            sb_puts(h, ":");
            sb_json_string(h, meta[i].value);
        }
        sb_puts(h, "}");
        first = false;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const amp_st_tensor *t = &tensors[i];
        if (!first) sb_puts(h, ",");
        first = false;
        sb_json_string(h, t->name);
        sb_puts(h, ":{\"dtype\":\"");
        sb_puts(h, st_name_of(t->dtype));
        sb_puts(h, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d) sb_puts(h, ",");
            sb_u64(h, (uint64_t)t->shape[d]);
        }
        sb_puts(h, "],\"data_offsets\":[");
        sb_u64(h, off);
        sb_puts(h, ",");
        if (sizes[i] > UINT64_MAX - off)
            return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: total size overflows", path);
        off += sizes[i];
        sb_u64(h, off);
        sb_puts(h, "]}");
    }
    sb_puts(h, "}");
    while (!h->oom && h->len % 8 != 0) sb_puts(h, " ");
    if (h->oom) return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory for the header", path);
    return AMP_OK;
}

/* fsync of the directory holding path, so that the rename itself is durable. buf (at least
 * strlen(path) + 2 bytes, the temp name's buffer) receives the directory's name: no allocation here,
 * after the rename, where running out of memory would turn a written file into a failure. */
static int sync_parent_dir(const char *path, char *buf) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        strcpy(buf, ".");
    } else if (slash == path) {
        strcpy(buf, "/");
    } else {
        memcpy(buf, path, (size_t)(slash - path));
        buf[slash - path] = '\0';
    }
    int fd = open(buf, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    /* Some file systems cannot fsync a directory; the rename is then as durable as they make it. */
    if (rc != 0 && (errno == EINVAL || errno == ENOTSUP)) rc = 0;
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

int amp_safetensors_write(const char *path, const amp_st_tensor *tensors, size_t n, const amp_st_meta *meta,
                          size_t n_meta, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!path || (n > 0 && !tensors) || (n_meta > 0 && !meta))
        return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_safetensors_write: NULL argument");
    uint64_t *sizes = amp_malloc((n ? n : 1) * sizeof *sizes);
    if (!sizes) return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    sbuf h = {0};
    int rc = build_header(path, tensors, n, meta, n_meta, sizes, &h, err, err_size);
    if (rc != AMP_OK) {
        amp_free(sizes);
        amp_free(h.p);
        return rc;
    }

    size_t tmp_len = strlen(path) + 32;
    char *tmp = amp_malloc(tmp_len);
    if (!tmp) {
        amp_free(sizes);
        amp_free(h.p);
        return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    snprintf(tmp, tmp_len, "%s.tmp.%ld", path, (long)getpid());

    const char *what = "cannot create temp file";
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0;
    if (ok) {
        unsigned char len8[8];
        uint64_t hl = h.len;
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hl >> (8 * i));
        what = "write failed";
        ok = write_all(fd, len8, 8) == 0 && write_all(fd, h.p, h.len) == 0;
        for (size_t i = 0; ok && i < n; i++)
            if (sizes[i] > 0) ok = write_all(fd, tensors[i].data, (size_t)sizes[i]) == 0;
        if (ok) {
            what = "fsync failed";
            ok = fsync(fd) == 0;
        }
        int saved = errno;
        if (close(fd) != 0 && ok) {
            what = "close failed";
            ok = false;
            saved = errno;
        }
        errno = saved;
    }
    if (ok) {
        what = "rename failed";
        ok = rename(tmp, path) == 0;
    }
    if (!ok) {
        int saved = errno;
        if (fd >= 0) unlink(tmp);
        rc = amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: %s (%s); the previous file, if any, is unchanged", path, what,
                  strerror(saved));
    } else if (sync_parent_dir(path, tmp) != 0) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: written, but fsync of its directory failed (%s)", path,
                  strerror(errno));
    }
    amp_free(tmp);
    amp_free(sizes);
    amp_free(h.p);
    return rc;
}

/* ---- the reader ---- */

struct amp_st_file {
    char *path;
    int fd;
    uint64_t header_len, data_start, data_size;
    amp_st_info *tensors; /* by offset */
    size_t n_tensors;
    size_t *by_name;      /* indices into tensors, sorted by name */
    amp_st_meta *meta;
    size_t n_meta;
};

void amp_safetensors_close(amp_st_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (size_t i = 0; i < f->n_tensors; i++) amp_free((char *)f->tensors[i].name);
    for (size_t i = 0; i < f->n_meta; i++) {
        amp_free((char *)f->meta[i].key);
        amp_free((char *)f->meta[i].value);
    }
    amp_free(f->tensors);
    amp_free(f->by_name);
    amp_free(f->meta);
    amp_free(f->path);
    amp_free(f);
}

/* Reads exactly n bytes at offset; 0, or -1 (errno set; EIO-like 0 on a short file). */
static int pread_all(int fd, void *buf, size_t n, uint64_t offset) {
    unsigned char *p = buf;
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t r = pread(fd, p, chunk, (off_t)offset);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) {
            errno = 0;
            return -1;
        }
        p += r;
        n -= (size_t)r;
        offset += (uint64_t)r;
    }
    return 0;
}

/* An exact non-negative integer below 2^53 from a JSON number. */
static bool json_uint(const cJSON *item, uint64_t *out) {
    if (!cJSON_IsNumber(item)) return false;
    double v = item->valuedouble;
    if (!(v >= 0.0) || v > ST_MAX_JSON_INT || v != (double)(uint64_t)v) return false;
    *out = (uint64_t)v;
    return true;
}

/* Counts, outside strings, the characters that open a JSON value or separate two: an upper bound on
 * the values cJSON would allocate. Also rejects NUL bytes. */
static int prescan_header(const char *h, size_t n, size_t *values) {
    size_t count = 1;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        if (c == '\0') return -1;
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == ',' || c == '[' || c == '{') {
            count++;
        }
    }
    *values = count;
    return 0;
}

static int cmp_by_offset(const void *a, const void *b) {
    const amp_st_info *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? -1 : 1;
    return 0;
}

static int cmp_by_name(const void *a, const void *b, const amp_st_info *t) {
    return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

/* Merge sort of indices by name (qsort has no user pointer, and qsort_r is not POSIX). */
static void sort_indices_by_name(size_t *idx, size_t *tmp, size_t n, const amp_st_info *t) {
    if (n < 2) return;
    size_t h = n / 2;
    sort_indices_by_name(idx, tmp, h, t);
    sort_indices_by_name(idx + h, tmp, n - h, t);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = cmp_by_name(&idx[j], &idx[i], t) < 0 ? idx[j++] : idx[i++];
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = amp_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* Parses one tensor entry into t (name not set). */
static int parse_entry(const char *path, const cJSON *e, amp_st_info *t, uint64_t data_size, char *err,
                       size_t err_size) {
    const char *name = e->string;
    if (!cJSON_IsObject(e)) return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: tensor \"%s\" is not a JSON object", path, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt)) return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: tensor \"%s\" has no dtype string", path, name);
    if (!cJSON_IsArray(shape)) return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: tensor \"%s\" has no shape array", path, name);
    if (!cJSON_IsArray(offs)) return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: tensor \"%s\" has no data_offsets array", path, name);
    int k = -1;
    for (int i = 0; i < ST_N_DTYPES; i++)
        if (strcmp(dt->valuestring, st_dtypes[i].name) == 0) k = i;
    if (k < 0) return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: tensor \"%s\": unknown dtype \"%.32s\"", path, name, dt->valuestring);
    t->dtype_name = st_dtypes[k].name;
    t->dtype = st_dtypes[k].amp;
    t->elem_size = st_dtypes[k].size;

    int nd = cJSON_GetArraySize(shape);
    if (nd > AMP_ST_MAX_DIMS)
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: tensor \"%s\": %d dimensions (amp reads at most %d)", path, name, nd,
                    AMP_ST_MAX_DIMS);
    t->ndim = nd;
    uint64_t numel = 1;
    bool overflow = false;
    int d = 0;
    for (const cJSON *s = shape->child; s; s = s->next, d++) {
        uint64_t v;
        if (!json_uint(s, &v))
            return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: tensor \"%s\": dimension %d is not a non-negative integer below 2^53",
                        path, name, d);
        t->shape[d] = (int64_t)v;
        if (v != 0 && numel > UINT64_MAX / v) overflow = true;
        else numel *= v;
    }
    if (!overflow && numel > UINT64_MAX / t->elem_size) overflow = true;
    if (overflow) return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: tensor \"%s\": the shape's byte size overflows 64 bits", path, name);
    uint64_t begin, end;
    if (cJSON_GetArraySize(offs) != 2 || !json_uint(offs->child, &begin) || !json_uint(offs->child->next, &end))
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: tensor \"%s\": data_offsets is not two non-negative integers", path, name);
    if (end < begin)
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] end before begin",
                    path, name, begin, end);
    if (end - begin != numel * t->elem_size)
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT,
                    "%s: tensor \"%s\": data_offsets span %" PRIu64 " bytes but shape and dtype %s need %" PRIu64, path, name,
                    end - begin, t->dtype_name, numel * t->elem_size);
    if (end > data_size)
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT,
                    "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] beyond the %" PRIu64
                    "-byte data region (truncated file?)",
                    path, name, begin, end, data_size);
    t->offset = begin;
    t->bytes = end - begin;
    return AMP_OK;
}

static int parse_header(amp_st_file *f, const char *text, size_t len, char *err, size_t err_size) {
    const char *path = f->path;
    size_t first = 0;
    while (first < len && (text[first] == ' ' || text[first] == '\t' || text[first] == '\n' || text[first] == '\r')) first++;
    if (first >= len || text[first] != '{') return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: header is not a JSON object", path);
    size_t values;
    if (prescan_header(text, len, &values) != 0)
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: header contains a NUL byte", path);
    if (values > AMP_ST_MAX_HEADER_VALUES)
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: header has %zu JSON values (at most %d)", path, values,
                    AMP_ST_MAX_HEADER_VALUES);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: header is not valid JSON (near byte %zu of %zu)", path, at, len);
    }
    for (const char *p = end; p < text + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: header has bytes after its JSON object (at byte %zu)", path,
                        (size_t)(p - text));
        }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: header is not a JSON object", path);
    }
    int rc = AMP_OK;
    size_t n_entries = 0, n_meta = 0, n_meta_objs = 0;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            n_meta_objs++;
            if (!cJSON_IsObject(e)) {
                rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: __metadata__ is not a JSON object", path);
                goto done;
            }
            n_meta += (size_t)cJSON_GetArraySize(e);
        } else {
            n_entries++;
        }
    }
    if (n_meta_objs > 1) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: __metadata__ appears twice", path);
        goto done;
    }
    f->tensors = amp_calloc(n_entries ? n_entries : 1, sizeof *f->tensors);
    f->by_name = amp_calloc(n_entries ? n_entries : 1, sizeof *f->by_name);
    f->meta = amp_calloc(n_meta ? n_meta : 1, sizeof *f->meta);
    size_t *tmp = amp_calloc(n_entries ? n_entries : 1, sizeof *tmp);
    if (!f->tensors || !f->by_name || !f->meta || !tmp) {
        amp_free(tmp);
        rc = amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu tensors", path, n_entries);
        goto done;
    }
    for (const cJSON *e = root->child; e && rc == AMP_OK; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            for (const cJSON *m = e->child; m; m = m->next) {
                if (!cJSON_IsString(m)) {
                    rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: metadata \"%.64s\" is not a string", path, m->string);
                    break;
                }
                amp_st_meta *out = &f->meta[f->n_meta];
                out->key = dup_str(m->string);
                out->value = dup_str(m->valuestring);
                f->n_meta++;
                if (!out->key || !out->value) {
                    rc = amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
                    break;
                }
            }
            continue;
        }
        amp_st_info t = {0};
        rc = parse_entry(path, e, &t, f->data_size, err, err_size);
        if (rc != AMP_OK) break;
        t.name = dup_str(e->string);
        f->tensors[f->n_tensors++] = t;
        if (!t.name) rc = amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    if (rc == AMP_OK) {
        /* Contiguous, non-overlapping, covering the data region exactly (the spec's rule). */
        qsort(f->tensors, f->n_tensors, sizeof *f->tensors, cmp_by_offset);
        uint64_t pos = 0;
        for (size_t i = 0; i < f->n_tensors && rc == AMP_OK; i++) {
            const amp_st_info *t = &f->tensors[i];
            if (t->offset < pos)
                rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: tensor \"%s\" at bytes [%" PRIu64 ", %" PRIu64 ") overlaps the one before it", path,
                          t->name, t->offset, t->offset + t->bytes);
            else if (t->offset > pos)
                rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: a gap of %" PRIu64 " bytes before tensor \"%s\" in the data region", path,
                          t->offset - pos, t->name);
            pos = t->offset + t->bytes;
        }
        if (rc == AMP_OK && pos != f->data_size)
            rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: the data region has %" PRIu64 " bytes but the tensors cover %" PRIu64, path,
                      f->data_size, pos);
    }
    if (rc == AMP_OK) {
        for (size_t i = 0; i < f->n_tensors; i++) f->by_name[i] = i;
        sort_indices_by_name(f->by_name, tmp, f->n_tensors, f->tensors);
        for (size_t i = 1; i < f->n_tensors && rc == AMP_OK; i++)
            if (strcmp(f->tensors[f->by_name[i - 1]].name, f->tensors[f->by_name[i]].name) == 0)
                rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: duplicate tensor name \"%.64s\"", path, f->tensors[f->by_name[i]].name);
    }
    amp_free(tmp);
done:
    cJSON_Delete(root);
    return rc;
}

int amp_safetensors_open(const char *path, amp_st_file **out, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (out) *out = NULL;
    if (!path || !out) return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_safetensors_open: NULL argument");
    amp_st_file *f = amp_calloc(1, sizeof *f);
    if (!f) return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    f->fd = -1;
    f->path = dup_str(path);
    if (!f->path) {
        amp_free(f);
        return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    char *header = NULL;
    int rc;
    struct stat st;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
        goto out;
    }
    if (fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: not a regular file", path);
        goto out;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: %" PRIu64 " bytes, too short for a safetensors file (8-byte header length)",
                  path, size);
        goto out;
    }
    unsigned char len8[8];
    if (pread_all(f->fd, len8, 8, 0) != 0) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: read failed (%s)", path, errno ? strerror(errno) : "short read");
        goto out;
    }
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)len8[i] << (8 * i);
    if (n > size - 8) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: header length %" PRIu64 " exceeds the file's %" PRIu64 " bytes", path, n, size);
        goto out;
    }
    if (n > (uint64_t)AMP_ST_MAX_HEADER_BYTES) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: header length %" PRIu64 " exceeds the limit of %d bytes", path, n,
                  AMP_ST_MAX_HEADER_BYTES);
        goto out;
    }
    if (n < 2) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: header length %" PRIu64 " is too short for a JSON object", path, n);
        goto out;
    }
    f->header_len = n;
    f->data_start = 8 + n;
    f->data_size = size - 8 - n;
    header = amp_malloc((size_t)n + 1);
    if (!header) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory for a %" PRIu64 "-byte header", path, n);
        goto out;
    }
    if (pread_all(f->fd, header, (size_t)n, 8) != 0) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: read failed (%s)", path, errno ? strerror(errno) : "short read");
        goto out;
    }
    header[n] = '\0';
    rc = parse_header(f, header, (size_t)n, err, err_size);
out:
    amp_free(header);
    if (rc != AMP_OK) {
        amp_safetensors_close(f);
        return rc;
    }
    *out = f;
    return AMP_OK;
}

const char *amp_safetensors_path(const amp_st_file *f) { return f ? f->path : NULL; }
uint64_t amp_safetensors_header_bytes(const amp_st_file *f) { return f ? f->header_len : 0; }
size_t amp_safetensors_num_tensors(const amp_st_file *f) { return f ? f->n_tensors : 0; }
const amp_st_info *amp_safetensors_tensor(const amp_st_file *f, size_t index) {
    return f && index < f->n_tensors ? &f->tensors[index] : NULL;
}
size_t amp_safetensors_num_meta(const amp_st_file *f) { return f ? f->n_meta : 0; }
const amp_st_meta *amp_safetensors_meta(const amp_st_file *f, size_t index) {
    return f && index < f->n_meta ? &f->meta[index] : NULL;
}
const char *amp_safetensors_meta_get(const amp_st_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
    return NULL;
}

const amp_st_info *amp_safetensors_find(const amp_st_file *f, const char *name) {
    if (!f || !name) return NULL;
    size_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const amp_st_info *t = &f->tensors[f->by_name[mid]];
        int c = strcmp(t->name, name);
        if (c == 0) return t;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

static void shape_str(char *buf, size_t size, int ndim, const int64_t *shape) {
    size_t len = 0;
    buf[0] = '\0';
    len += (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (len < size) snprintf(buf + len, size - len, "]");
}

int amp_safetensors_read(amp_st_file *f, const char *name, void *dst, amp_dtype dst_dtype, int ndim,
                         const int64_t *shape, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!f || !name || (ndim > 0 && !shape))
        return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_safetensors_read: NULL argument");
    const amp_st_info *t = amp_safetensors_find(f, name);
    if (!t) return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: no tensor \"%s\"", f->path, name);
    bool same = ndim == t->ndim;
    for (int i = 0; same && i < ndim; i++) same = shape[i] == t->shape[i];
    if (!same) {
        char a[160], b[160];
        shape_str(a, sizeof a, t->ndim, t->shape);
        shape_str(b, sizeof b, ndim < 0 ? 0 : ndim > AMP_ST_MAX_DIMS ? AMP_ST_MAX_DIMS : ndim, shape);
        return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: tensor \"%s\" has shape %s, expected %s", f->path, name, a, b);
    }
    if (t->dtype < 0)
        return amp_err_fmt(err, err_size, AMP_ERR_UNSUPPORTED_DTYPE, "%s: tensor \"%s\" has dtype %s, which amp does not convert",
                    f->path, name, t->dtype_name);
    size_t dsize = amp_dtype_size(dst_dtype);
    if (dsize == 0) return amp_err_fmt(err, err_size, AMP_ERR_UNSUPPORTED_DTYPE, "%s: invalid destination dtype %d", f->path, (int)dst_dtype);
    if (t->bytes == 0) return AMP_OK;
    if (!dst) return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_safetensors_read: NULL destination");
    const uint64_t numel = t->bytes / t->elem_size;
    if (numel > SIZE_MAX / dsize) return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: tensor \"%s\" is too large", f->path, name);
    if ((amp_dtype)t->dtype == dst_dtype) {
        if (pread_all(f->fd, dst, (size_t)t->bytes, f->data_start + t->offset) != 0)
            return amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: reading tensor \"%s\" failed (%s)", f->path, name,
                        errno ? strerror(errno) : "the file is shorter than when it was opened");
        return AMP_OK;
    }
    enum { CHUNK = 4096 };
    uint64_t chunk_buf[CHUNK]; /* CHUNK elements of up to 8 bytes, 8-byte aligned */
    for (uint64_t done = 0; done < numel;) {
        size_t k = numel - done < CHUNK ? (size_t)(numel - done) : CHUNK;
        if (pread_all(f->fd, chunk_buf, k * t->elem_size, f->data_start + t->offset + done * t->elem_size) != 0)
            return amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: reading tensor \"%s\" failed (%s)", f->path, name,
                        errno ? strerror(errno) : "the file is shorter than when it was opened");
        int rc = amp_convert((unsigned char *)dst + done * dsize, dst_dtype, chunk_buf, (amp_dtype)t->dtype, k);
        if (rc != AMP_OK) return amp_err_fmt(err, err_size, rc, "%s: converting tensor \"%s\" failed", f->path, name);
        done += k;
    }
    return AMP_OK;
}
