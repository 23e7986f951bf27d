/* safetensors files and amp's training checkpoints.
 *
 * safetensors (https://huggingface.co/docs/safetensors): an 8-byte little-endian u64 N, N bytes of
 * JSON header, then the data region. The header is one object: an optional "__metadata__" object of
 * string values, and for every tensor {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
 * offsets relative to the data region, the tensors contiguous, non-overlapping and covering it,
 * row-major, little-endian.
 *
 * Writing is atomic: the file is written to `path.tmp.<pid>` in the same directory, flushed and
 * fsync'ed, renamed over `path`, and the directory is fsync'ed. A process killed at any moment leaves
 * either the previous file or the new one (and at worst a stray .tmp file); a failed write (a full
 * disk) removes the temp file and keeps the previous one.
 *
 * Reading trusts nothing in the file. amp_safetensors_open checks the whole header before allocating
 * anything in proportion to what the file claims: the header length against the file size and
 * AMP_ST_MAX_HEADER_BYTES, the JSON's value count against AMP_ST_MAX_HEADER_VALUES, every tensor's
 * dtype, shape (products checked for overflow) and offsets (inside the data region, sorted, no overlap,
 * no gap, covering it exactly), no duplicate names, metadata values strings. Every failure returns a
 * status and one line naming the file and the problem in err (which may be NULL).
 *
 * Checkpoints (amp_checkpoint_save / _load) are safetensors files with this layout:
 *   <param name>                         each parameter of the context, in its storage dtype, named as
 *                                        PyTorch's state_dict names it (e.g. "1.weight", "1.bias")
 *   <buffer name>                        each buffer (batch-norm running statistics), likewise
 *   master.<param>                       F32 master weights of F16/BF16 parameters (optimizer)
 *   optimizer.state.<param>.exp_avg      Adam/AdamW first moment (F32)
 *   optimizer.state.<param>.exp_avg_sq   Adam/AdamW second moment (F32)
 *   optimizer.state.<param>.momentum_buffer  SGD momentum (F32)
 * and metadata (all values strings):
 *   format "pt"; amp.version; amp.step, amp.epoch (decimal); amp.rng (comma-separated 0x hex u64s,
 *   the caller's generator states); amp.ctx_rng (the context's own random streams);
 *   amp.optimizer.step_count, amp.optimizer.lr; amp.scaler (the scaler's state as JSON text,
 *   amp_scaler_state_format: PyTorch's five GradScaler keys and amp's counters); and the caller's
 *   own key/value pairs.
 * So `model.load_state_dict(safetensors.torch.load_file(path), strict=False)` loads the model of the
 * same architecture in PyTorch (the other entries come back as unexpected keys). */
#ifndef AMP_CHECKPOINT_H
#define AMP_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "optim.h"
#include "scaler.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    AMP_ST_MAX_DIMS = 8,                     /* dimensions of one tensor in a file amp reads */
    AMP_ST_MAX_HEADER_BYTES = 100 << 20,     /* safetensors' own limit (100 MB, its MAX_HEADER_SIZE) */
    AMP_ST_MAX_HEADER_VALUES = 1 << 20,      /* JSON values in a header (about 100k tensors): bounds the
                                                parser's memory whatever the header holds */
    AMP_CHECKPOINT_MAX_RNG = 8               /* generator states a checkpoint carries for the caller */
};

/* A tensor to write: n = product of shape elements of dtype at data (row-major). */
typedef struct amp_st_tensor {
    const char *name;
    amp_dtype dtype;
    int ndim; /* 0 (a scalar) to AMP_ST_MAX_DIMS */
    const int64_t *shape;
    const void *data; /* may be NULL when the tensor has no elements */
} amp_st_tensor;

/* A metadata entry (both strings, NUL-terminated). */
typedef struct amp_st_meta {
    const char *key;
    const char *value;
} amp_st_meta;

/* Writes a safetensors file atomically (see above). Names must be unique, non-empty and not
 * "__metadata__"; dtypes F32, F16, BF16, F8_E4M3, F8_E5M2. The data region is 8-byte aligned (the
 * header is padded with spaces). Returns AMP_OK, AMP_ERR_NULL_POINTER, AMP_ERR_INVALID_ARGUMENT,
 * AMP_ERR_UNSUPPORTED_DTYPE, AMP_ERR_OUT_OF_MEMORY or AMP_ERR_IO (a message with the path and
 * strerror); on failure the previous file at path is untouched. */
int amp_safetensors_write(const char *path, const amp_st_tensor *tensors, size_t n, const amp_st_meta *meta,
                          size_t n_meta, char *err, size_t err_size);

typedef struct amp_st_file amp_st_file;

/* One tensor of an open file. */
typedef struct amp_st_info {
    const char *name;
    const char *dtype_name; /* the file's dtype string: "F32", "BF16", "I64", ... */
    int dtype;              /* the amp_dtype, or -1 for a dtype amp stores but does not convert (ints, F64, BOOL) */
    size_t elem_size;       /* bytes per element */
    int ndim;
    int64_t shape[AMP_ST_MAX_DIMS];
    uint64_t offset; /* data_offsets[0], relative to the data region */
    uint64_t bytes;  /* data_offsets[1] - data_offsets[0] */
} amp_st_info;

/* Opens and validates a safetensors file (everything but the data bytes). Returns AMP_OK,
 * AMP_ERR_NULL_POINTER, AMP_ERR_IO (cannot open or read), AMP_ERR_FORMAT (malformed; the message
 * says what) or AMP_ERR_OUT_OF_MEMORY. On failure *out is NULL. */
int amp_safetensors_open(const char *path, amp_st_file **out, char *err, size_t err_size);
/* NULL is fine. */
void amp_safetensors_close(amp_st_file *f);

const char *amp_safetensors_path(const amp_st_file *f);
/* The JSON header's length N (the data region starts at 8 + N). */
uint64_t amp_safetensors_header_bytes(const amp_st_file *f);
/* Tensors in data order (by offset); NULL when index is out of range. */
size_t amp_safetensors_num_tensors(const amp_st_file *f);
const amp_st_info *amp_safetensors_tensor(const amp_st_file *f, size_t index);
/* The tensor called `name`, or NULL. */
const amp_st_info *amp_safetensors_find(const amp_st_file *f, const char *name);
/* Metadata in the header's order; amp_safetensors_meta_get gives the value of `key` or NULL. */
size_t amp_safetensors_num_meta(const amp_st_file *f);
const amp_st_meta *amp_safetensors_meta(const amp_st_file *f, size_t index);
const char *amp_safetensors_meta_get(const amp_st_file *f, const char *key);

/* Reads tensor `name` into dst as dst_dtype (amp_convert: exact when the dtypes are equal, rounding
 * to nearest even when narrowing). ndim/shape must equal the file's shape. Returns AMP_OK,
 * AMP_ERR_NULL_POINTER, AMP_ERR_INVALID_ARGUMENT (no such tensor, shape mismatch),
 * AMP_ERR_UNSUPPORTED_DTYPE (an integer file dtype, or a bad dst_dtype), AMP_ERR_IO (the read failed:
 * the file changed since it was opened). */
int amp_safetensors_read(amp_st_file *f, const char *name, void *dst, amp_dtype dst_dtype, int ndim,
                         const int64_t *shape, char *err, size_t err_size);

/* ---- checkpoints ---- */

/* What a checkpoint carries besides tensors. */
typedef struct amp_checkpoint_info {
    int64_t step;  /* the training loop's step (iterations done) */
    int64_t epoch;
    size_t n_rng;  /* <= AMP_CHECKPOINT_MAX_RNG: the caller's generator states (data order, ...) */
    uint64_t rng[AMP_CHECKPOINT_MAX_RNG];
    /* save: extra metadata (keys must not be "format" or start with "amp."); load: left NULL, read
     * them with amp_safetensors_open + amp_safetensors_meta_get */
    const amp_st_meta *user;
    size_t n_user;
} amp_checkpoint_info;

/* Saves the context's parameters and buffers, the optimizer's state (master weights, moments,
 * momentum, step count, lr) when opt is not NULL, the scaler's state when scaler is not NULL, the
 * context's random streams, and info (NULL: step 0, epoch 0, no rng) as one safetensors file, written
 * atomically. Every parameter and buffer needs a name. Returns AMP_OK or amp_safetensors_write's
 * statuses (AMP_ERR_STATE when the parameters are not allocated). */
int amp_checkpoint_save(const char *path, const amp_ctx *ctx, const amp_optimizer *opt, const amp_scaler *scaler,
                        const amp_checkpoint_info *info, char *err, size_t err_size);

/* Restores what amp_checkpoint_save wrote into a context (and optimizer, scaler) built the same way,
 * bit for bit, so that a resumed run continues exactly as the uninterrupted one. Tensors in the file
 * that the context does not have are ignored (like PyTorch's strict=False); a missing tensor, a shape
 * mismatch, or state the optimizer/scaler needs that the file lacks is an error (AMP_ERR_FORMAT for a
 * malformed file, AMP_ERR_INVALID_ARGUMENT for a mismatch), reported before anything is modified.
 * Dtypes: with an optimizer (resuming) every tensor must have the dtype it was saved with; without
 * one, parameters are converted to their dtype in the context (e.g. an F32 checkpoint loaded into a
 * BF16 model for inference). out (may be NULL) receives step, epoch and rng. */
int amp_checkpoint_load(const char *path, amp_ctx *ctx, amp_optimizer *opt, amp_scaler *scaler,
                        amp_checkpoint_info *out, char *err, size_t err_size);

#ifdef __cplusplus
}
#endif
#endif /* AMP_CHECKPOINT_H */
