/* Fuzz target for the safetensors reader: arbitrary bytes, written to a per-process temp file, must
 * either be refused by amp_safetensors_open with a status or open, enumerate and read back (every
 * tensor as F32 into a buffer of its exact size) without touching memory outside it, leaking, or
 * allocating in proportion to what the header claims rather than what the file holds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp.h"
#include "fuzz_temp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Tensors with more elements than this are enumerated but not read (the file bounds the data anyway;
 * this only keeps each run fast). */
#define MAX_READ_ELEMS ((int64_t)1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_temp_path("safetensors", ".safetensors");
    if (fuzz_write_file(path, data, size) != 0) abort();
    char err[512];
    amp_st_file *f = NULL;
    const int rc = amp_safetensors_open(path, &f, err, sizeof err);
    if (rc != AMP_OK) {
        if (f != NULL) abort();
        return 0;
    }
    if (f == NULL) abort();
    (void)amp_safetensors_path(f);
    (void)amp_safetensors_header_bytes(f);
    const size_t n_meta = amp_safetensors_num_meta(f);
    for (size_t i = 0; i < n_meta; i++) {
        const amp_st_meta *m = amp_safetensors_meta(f, i);
        if (!m || !m->key || !m->value) abort();
        if (amp_safetensors_meta_get(f, m->key) == NULL) abort();
    }
    if (amp_safetensors_meta(f, n_meta) != NULL) abort();
    const size_t n = amp_safetensors_num_tensors(f);
    for (size_t i = 0; i < n; i++) {
        const amp_st_info *t = amp_safetensors_tensor(f, i);
        if (!t || !t->name || !t->dtype_name) abort();
        if (amp_safetensors_find(f, t->name) != t) abort();
        if (t->ndim < 0 || t->ndim > AMP_ST_MAX_DIMS) abort();
        int64_t elems = 1;
        int skip = 0;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0) abort();
            if (t->shape[d] != 0 && elems > MAX_READ_ELEMS / t->shape[d]) skip = 1;
            if (!skip) elems *= t->shape[d];
        }
        if (skip || elems > MAX_READ_ELEMS) continue;
        /* The open call promised the offsets cover exactly elems elements. */
        if ((uint64_t)elems * t->elem_size != t->bytes) abort();
        float *buf = malloc((size_t)elems * sizeof(float) + 1);
        if (!buf) abort();
        /* Exact size for ASan: elems floats (the +1 byte only avoids malloc(0)). */
        const int r = amp_safetensors_read(f, t->name, buf, AMP_F32, t->ndim, t->shape, err, sizeof err);
        if (r != AMP_OK && r != AMP_ERR_UNSUPPORTED_DTYPE) abort();
        if (t->dtype < 0 && r != AMP_ERR_UNSUPPORTED_DTYPE) abort();
        free(buf);
    }
    if (amp_safetensors_tensor(f, n) != NULL) abort();
    amp_safetensors_close(f);
    return 0;
}
