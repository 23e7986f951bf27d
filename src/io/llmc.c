/* llm.c's GPT-2 model files (amp/llmc.h): the header, and the parameters streamed between the file
 * and the context's parameters one tensor (one layer's slice) at a time through a buffer. */
#include "amp/llmc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amp/formats.h"
#include "amp/status.h"
#include "../core/alloc_internal.h"
#include "../core/status_internal.h"

enum { LLMC_SIZE_CAP = 1 << 24 };
#define LLMC_PARAMS_CAP ((int64_t)1 << 40)
#define LLMC_HEADER_BYTES ((int64_t)AMP_LLMC_HEADER_INTS * 4)

/* The 16 tensors in file order: amp's name (a "%d" for the layer in per-layer ones) and the shape of
 * one layer's slice, each dimension a size of the header (below). */
typedef enum { D_ONE, D_C, D_3C, D_4C, D_VP, D_MAXT } llmc_dim;
static const struct {
    const char *name;
    bool per_layer;
    llmc_dim rows, cols; /* D_ONE rows: a vector [cols] */
} llmc_tensors[] = {
    {"wte.weight", false, D_VP, D_C},
    {"wpe.weight", false, D_MAXT, D_C},
    {"h.%d.ln_1.weight", true, D_ONE, D_C},
    {"h.%d.ln_1.bias", true, D_ONE, D_C},
    {"h.%d.attn.c_attn.weight", true, D_3C, D_C},
    {"h.%d.attn.c_attn.bias", true, D_ONE, D_3C},
    {"h.%d.attn.c_proj.weight", true, D_C, D_C},
    {"h.%d.attn.c_proj.bias", true, D_ONE, D_C},
    {"h.%d.ln_2.weight", true, D_ONE, D_C},
    {"h.%d.ln_2.bias", true, D_ONE, D_C},
    {"h.%d.mlp.c_fc.weight", true, D_4C, D_C},
    {"h.%d.mlp.c_fc.bias", true, D_ONE, D_4C},
    {"h.%d.mlp.c_proj.weight", true, D_C, D_4C},
    {"h.%d.mlp.c_proj.bias", true, D_ONE, D_C},
    {"ln_f.weight", false, D_ONE, D_C},
    {"ln_f.bias", false, D_ONE, D_C},
};
enum { LLMC_TENSORS = sizeof llmc_tensors / sizeof llmc_tensors[0] };

static int64_t dim_of(const amp_llmc_header *h, llmc_dim d) {
    switch (d) {
    case D_C: return h->channels;
    case D_3C: return 3 * h->channels;
    case D_4C: return 4 * h->channels;
    case D_VP: return h->padded_vocab;
    case D_MAXT: return h->max_seq_len;
    default: return 1;
    }
}

static int64_t slice_numel(const amp_llmc_header *h, int k) {
    return dim_of(h, llmc_tensors[k].rows) * dim_of(h, llmc_tensors[k].cols);
}

int64_t amp_llmc_num_params(const amp_llmc_header *h) {
    if (!h) return 0;
    int64_t n = 0;
    for (int k = 0; k < LLMC_TENSORS; k++) n += slice_numel(h, k) * (llmc_tensors[k].per_layer ? h->layers : 1);
    return n;
}

static size_t elem_bytes(const amp_llmc_header *h) { return h->version == 5 ? 2 : 4; }

/* The header's own rules (sizes in range), before any product of them is formed. */
static int check_header(const char *path, const amp_llmc_header *h, char *err, size_t err_size) {
    if (h->version != 3 && h->version != 5)
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: llm.c model version %d (3: fp32 or 5: bf16)", path,
                           h->version);
    const int64_t sizes[] = {h->max_seq_len, h->vocab, h->layers, h->heads, h->channels, h->padded_vocab};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] < 1 || sizes[i] > LLMC_SIZE_CAP)
            return amp_err_fmt(err, err_size, AMP_ERR_FORMAT,
                               "%s: llm.c header sizes out of range (maxT %lld, V %lld, L %lld, NH %lld, C %lld, Vp %lld)",
                               path, (long long)h->max_seq_len, (long long)h->vocab, (long long)h->layers,
                               (long long)h->heads, (long long)h->channels, (long long)h->padded_vocab);
    if (h->channels % h->heads != 0 || h->padded_vocab < h->vocab || h->layers > 4096)
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: llm.c header: C %lld, NH %lld, V %lld, Vp %lld, L %lld "
                           "(C must divide by NH, Vp >= V, L <= 4096)", path, (long long)h->channels,
                           (long long)h->heads, (long long)h->vocab, (long long)h->padded_vocab, (long long)h->layers);
    /* each size <= 2^24 and L <= 2^12: every product below stays far from int64's range */
    if (amp_llmc_num_params(h) > LLMC_PARAMS_CAP)
        return amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: llm.c header describes %lld parameters (at most 2^40)",
                           path, (long long)amp_llmc_num_params(h));
    return AMP_OK;
}

static int32_t le32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* Opens path and reads its header; *f is the open file, positioned at the parameters. */
static int open_model(const char *path, FILE **f, amp_llmc_header *h, char *err, size_t err_size) {
    *f = fopen(path, "rb");
    if (!*f) return amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
    unsigned char raw[LLMC_HEADER_BYTES];
    struct stat sb;
    int st = AMP_OK;
    if (fstat(fileno(*f), &sb) != 0) st = amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: cannot stat (%s)", path, strerror(errno));
    else if (fread(raw, 1, sizeof raw, *f) != sizeof raw)
        st = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: shorter than llm.c's header (%lld bytes)", path,
                         (long long)LLMC_HEADER_BYTES);
    else if (le32(raw) != AMP_LLMC_MODEL_MAGIC)
        st = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: not an llm.c model file (magic %ld, want %d)", path,
                         (long)le32(raw), AMP_LLMC_MODEL_MAGIC);
    if (st == AMP_OK) {
        *h = (amp_llmc_header){le32(raw + 4), le32(raw + 8), le32(raw + 12), le32(raw + 16), le32(raw + 20),
                               le32(raw + 24), le32(raw + 28)};
        st = check_header(path, h, err, err_size);
    }
    if (st == AMP_OK) {
        const int64_t want = LLMC_HEADER_BYTES + amp_llmc_num_params(h) * (int64_t)elem_bytes(h);
        if ((int64_t)sb.st_size != want)
            st = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: %lld bytes, but its header describes %lld (%s)", path,
                             (long long)sb.st_size, (long long)want, (int64_t)sb.st_size < want ? "truncated" : "trailing data");
    }
    if (st != AMP_OK) {
        fclose(*f);
        *f = NULL;
    }
    return st;
}

int amp_llmc_read_header(const char *path, amp_llmc_header *h, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!path || !h) return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_llmc_read_header: NULL argument");
    FILE *f;
    const int st = open_model(path, &f, h, err, err_size);
    if (f) fclose(f);
    return st;
}

void amp_llmc_model_config(const amp_llmc_header *h, amp_model_config *cfg) {
    if (!h || !cfg) return;
    cfg->kind = AMP_MODEL_GPT2;
    cfg->layers = h->layers, cfg->heads = h->heads, cfg->hidden = h->channels;
    cfg->vocab = h->vocab, cfg->vocab_padded = h->padded_vocab, cfg->positions = h->max_seq_len;
}

/* ctx's parameter named `name`, or NULL */
static amp_tensor *param_named(amp_ctx *ctx, const char *name) {
    for (size_t i = 0; i < amp_ctx_num_params(ctx); i++) {
        amp_tensor *t = amp_ctx_param(ctx, i);
        if (t && t->name && !strcmp(t->name, name)) return t;
    }
    return NULL;
}

/* Every tensor's parameter, in file order (tensor k, layer l at k * L + l; one-off tensors at l = 0),
 * checked for its shape and dtype and allocation; and no layer L in ctx. */
static int map_params(const char *path, amp_ctx *ctx, const amp_llmc_header *h, amp_tensor **map, char *err,
                      size_t err_size) {
    for (int k = 0; k < LLMC_TENSORS; k++)
        for (int64_t l = 0; l < (llmc_tensors[k].per_layer ? h->layers : 1); l++) {
            char name[64];
            snprintf(name, sizeof name, llmc_tensors[k].name, (int)l);
            amp_tensor *t = param_named(ctx, name);
            const int64_t rows = dim_of(h, llmc_tensors[k].rows), cols = dim_of(h, llmc_tensors[k].cols);
            const bool vec = llmc_tensors[k].rows == D_ONE;
            if (!t || t->ndim != (vec ? 1 : 2) || (vec ? t->shape[0] != cols : t->shape[0] != rows || t->shape[1] != cols))
                return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT,
                                   "%s: the model has no parameter %s of shape [%lld%s%lld] (llm.c's L %lld, NH %lld, "
                                   "C %lld, V %lld, Vp %lld, maxT %lld)", path, name, (long long)(vec ? cols : rows),
                                   vec ? "" : ", ", vec ? 0LL : (long long)cols, (long long)h->layers,
                                   (long long)h->heads, (long long)h->channels, (long long)h->vocab,
                                   (long long)h->padded_vocab, (long long)h->max_seq_len);
            if (t->dtype != AMP_F32 && t->dtype != AMP_F16 && t->dtype != AMP_BF16)
                return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: parameter %s is not f32, f16 or bf16",
                                   path, name);
            if (!t->data)
                return amp_err_fmt(err, err_size, AMP_ERR_STATE, "%s: parameters not allocated (amp_ctx_alloc_params)",
                                   path);
            map[k * h->layers + l] = t;
        }
    char next[64]; /* a model with more layers than the file would keep some of its own: refused */
    snprintf(next, sizeof next, "h.%lld.ln_1.weight", (long long)h->layers);
    if (param_named(ctx, next))
        return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: the model has more layers than the file's %lld",
                           path, (long long)h->layers);
    return AMP_OK;
}

/* The largest slice, in bytes of the wider of the file's dtype and fp32. */
static size_t max_slice_bytes(const amp_llmc_header *h) {
    int64_t most = 1;
    for (int k = 0; k < LLMC_TENSORS; k++) most = slice_numel(h, k) > most ? slice_numel(h, k) : most;
    return (size_t)most * 4;
}

/* map and buf for h: NULL (AMP_ERR_OUT_OF_MEMORY recorded) when either cannot be had */
static int alloc_work(const char *path, const amp_llmc_header *h, amp_tensor ***map, void **buf, char *err,
                      size_t err_size) {
    *map = amp_calloc((size_t)(LLMC_TENSORS * h->layers), sizeof **map);
    *buf = *map ? amp_malloc(max_slice_bytes(h)) : NULL;
    if (*buf) return AMP_OK;
    amp_free(*map);
    *map = NULL;
    return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
}

int amp_llmc_load(const char *path, amp_ctx *ctx, amp_llmc_header *h_out, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!path || !ctx) return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_llmc_load: NULL argument");
    amp_llmc_header h;
    FILE *f;
    int st = open_model(path, &f, &h, err, err_size);
    if (st != AMP_OK) return st;
    amp_tensor **map = NULL;
    void *buf = NULL;
    st = alloc_work(path, &h, &map, &buf, err, err_size);
    if (st == AMP_OK) st = map_params(path, ctx, &h, map, err, err_size);
    const amp_dtype fd = h.version == 5 ? AMP_BF16 : AMP_F32;
    for (int k = 0; k < LLMC_TENSORS && st == AMP_OK; k++)
        for (int64_t l = 0; l < (llmc_tensors[k].per_layer ? h.layers : 1) && st == AMP_OK; l++) {
            const size_t n = (size_t)slice_numel(&h, k);
            if (fread(buf, elem_bytes(&h), n, f) != n)
                st = amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: read failed at tensor %d (%s)", path, k,
                                 ferror(f) ? strerror(errno) : "end of file");
            else st = amp_tensor_write(map[k * h.layers + l], buf, fd);
        }
    fclose(f);
    amp_free(map);
    amp_free(buf);
    if (st == AMP_OK && h_out) *h_out = h;
    return st;
}

static void put_le32(unsigned char *p, int64_t v) {
    const uint32_t u = (uint32_t)(int32_t)v;
    p[0] = (unsigned char)u, p[1] = (unsigned char)(u >> 8), p[2] = (unsigned char)(u >> 16), p[3] = (unsigned char)(u >> 24);
}

/* The header and every slice into f. */
static int write_body(const char *path, FILE *f, const amp_llmc_header *h, amp_tensor **map, void *buf, char *err,
                      size_t err_size) {
    unsigned char raw[LLMC_HEADER_BYTES] = {0};
    const int64_t fields[] = {AMP_LLMC_MODEL_MAGIC, h->version, h->max_seq_len, h->vocab, h->layers,
                              h->heads, h->channels, h->padded_vocab};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) put_le32(raw + 4 * i, fields[i]);
    if (fwrite(raw, 1, sizeof raw, f) != sizeof raw)
        return amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: write failed (%s)", path, strerror(errno));
    const amp_dtype fd = h->version == 5 ? AMP_BF16 : AMP_F32;
    for (int k = 0; k < LLMC_TENSORS; k++)
        for (int64_t l = 0; l < (llmc_tensors[k].per_layer ? h->layers : 1); l++) {
            const size_t n = (size_t)slice_numel(h, k);
            int st = amp_tensor_read(map[k * h->layers + l], buf, fd);
            if (st != AMP_OK) return amp_err_fmt(err, err_size, st, "%s: cannot read parameter %d", path, k);
            if (fwrite(buf, elem_bytes(h), n, f) != n)
                return amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: write failed (%s)", path, strerror(errno));
        }
    return AMP_OK;
}

int amp_llmc_save(const char *path, amp_ctx *ctx, const amp_llmc_header *h, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!path || !ctx || !h) return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_llmc_save: NULL argument");
    int st = check_header(path, h, err, err_size);
    if (st != AMP_OK) return AMP_ERR_INVALID_ARGUMENT; /* the message is check_header's */
    amp_tensor **map = NULL;
    void *buf = NULL;
    st = alloc_work(path, h, &map, &buf, err, err_size);
    if (st == AMP_OK) st = map_params(path, ctx, h, map, err, err_size);
    char *tmp = st == AMP_OK ? amp_malloc(strlen(path) + 32) : NULL;
    if (st == AMP_OK && !tmp) st = amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    FILE *f = NULL;
    if (st == AMP_OK) {
        snprintf(tmp, strlen(path) + 32, "%s.tmp.%ld", path, (long)getpid());
        f = fopen(tmp, "wb");
        if (!f) st = amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: cannot create a temporary file beside it (%s)", path,
                                 strerror(errno));
    }
    if (f) {
        st = write_body(path, f, h, map, buf, err, err_size);
        if (st == AMP_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
            st = amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: flush failed (%s)", path, strerror(errno));
        if (fclose(f) != 0 && st == AMP_OK)
            st = amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: close failed (%s)", path, strerror(errno));
        if (st == AMP_OK && rename(tmp, path) != 0)
            st = amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: rename failed (%s)", path, strerror(errno));
        if (st != AMP_OK) unlink(tmp);
    }
    amp_free(tmp);
    amp_free(map);
    amp_free(buf);
    return st;
}
