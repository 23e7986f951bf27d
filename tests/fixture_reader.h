/* A strict reader for the golden fixture files tests/fixtures/gen_pytorch_fixtures.py writes (the
 * format is described at the top of that script). Used only by the tests.
 *
 *   amp-fixture 1 <model> <dtype>                 first line; dtype f32, bf16 or f16
 *   # comment                                     anywhere after it; blank lines are ignored
 *   tensor <name> <dtype> <ndim> <dims...>        then numel C99 hex floats (0x1.8p+1), any number
 *                                                 to a line, the next header on a new line
 *   itensor <name> <ndim> <dims...>               then numel decimal int32 values
 *
 * Strict means: a value must be a hex float (no decimal, inf or NaN), finite and exactly
 * representable in the tensor's dtype; integers are plain decimal in int32 range; names are
 * [A-Za-z0-9_.:-], unique; a tensor has exactly numel values. Sizes are bounded (the limits below),
 * and a declared size is checked against the bytes left in the file before anything is allocated,
 * so garbage input gives an error, never a crash or a huge allocation. Every error message starts
 * with "line N: ". */
#ifndef AMP_TESTS_FIXTURE_READER_H
#define AMP_TESTS_FIXTURE_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp.h"

enum {
    FIXTURE_MAX_TENSORS = 256,     /* GPT-2 124M lists 148 parameters */
    FIXTURE_MAX_NAME = 64,         /* bytes, with the terminating NUL */
    FIXTURE_MAX_NUMEL = 1 << 16,   /* elements per tensor */
    FIXTURE_MAX_BYTES = 1 << 20,   /* file size */
    FIXTURE_MAX_LINE = 4096,       /* bytes per line, without the newline */
    FIXTURE_ERR_SIZE = 160         /* a message buffer that is always large enough */
};

typedef struct fixture_tensor {
    char name[FIXTURE_MAX_NAME];
    bool is_int;                  /* itensor */
    amp_dtype dtype;              /* float tensors: AMP_F32, AMP_BF16 or AMP_F16 */
    int ndim;                     /* 0 (one value) .. AMP_MAX_DIMS */
    int64_t shape[AMP_MAX_DIMS];
    int64_t numel;
    float *values;                /* float tensors: numel exact values, row-major */
    int32_t *ints;                /* integer tensors: numel values */
} fixture_tensor;

typedef struct fixture {
    char model[FIXTURE_MAX_NAME];
    amp_dtype dtype;
    int n_tensors;
    fixture_tensor tensors[FIXTURE_MAX_TENSORS]; /* in file order */
} fixture;

/* Parses len bytes of text (no NUL needed at the end). Returns AMP_OK, AMP_ERR_FORMAT (err holds
 * "line N: what"), or AMP_ERR_OUT_OF_MEMORY. On error *out holds nothing that needs freeing;
 * fixture_free is still fine to call. err may be NULL. */
int fixture_parse(const char *text, size_t len, fixture *out, char *err, size_t err_size);
/* Reads and parses a file; AMP_ERR_IO when it cannot be read or is over FIXTURE_MAX_BYTES. */
int fixture_load(const char *path, fixture *out, char *err, size_t err_size);
/* For the tests: loads $AMP_FIXTURE_DIR/<file> (default tests/fixtures/<file>) into *out; a failure
 * is a failed check naming the path and the reader's message (defined in test_util.c). */
bool test_fixture_load(const char *file, fixture *out);
/* Frees the values; leaves an empty fixture. NULL is fine. */
void fixture_free(fixture *f);
/* The tensor with this name, or NULL. */
const fixture_tensor *fixture_find(const fixture *f, const char *name);

#endif /* AMP_TESTS_FIXTURE_READER_H */
