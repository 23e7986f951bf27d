/* For the fuzz targets whose parsers read files: one per-process temp file (removed at exit) and a
 * writer. Header-only: each target is built from its own .c (see the Makefile's fuzz rules). */
#ifndef AMP_FUZZ_TEMP_H
#define AMP_FUZZ_TEMP_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char fuzz_temp_name[256];

static void fuzz_temp_remove(void) {
    if (fuzz_temp_name[0]) unlink(fuzz_temp_name);
}

/* /tmp/amp_fuzz_<tag>_<pid><ext>, the same path for the whole process. */
static const char *fuzz_temp_path(const char *tag, const char *ext) {
    if (!fuzz_temp_name[0]) {
        snprintf(fuzz_temp_name, sizeof fuzz_temp_name, "/tmp/amp_fuzz_%s_%ld%s", tag, (long)getpid(), ext);
        atexit(fuzz_temp_remove);
    }
    return fuzz_temp_name;
}

/* 0, or -1 when the file cannot be written whole. */
static int fuzz_write_file(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    const int ok = fwrite(data, 1, size, f) == size;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

#endif
