/* Internal: the heap functions every amp source file allocates through (amp/alloc.h installs the
 * hooks behind them). Same contracts as the C library's, except that a size of 0 is allocated as 1
 * so NULL always means out of memory, and amp_free(NULL) is a no-op. */
#ifndef AMP_ALLOC_INTERNAL_H
#define AMP_ALLOC_INTERNAL_H

#include <stddef.h>

void *amp_malloc(size_t size);
void *amp_calloc(size_t count, size_t size); /* NULL on overflow of count * size too */
void *amp_realloc(void *ptr, size_t size);
void *amp_aligned_alloc(size_t align, size_t size); /* align: a power of two; free with amp_free */
void amp_free(void *ptr);
char *amp_strdup(const char *s);

/* From this size, the default heap's aligned blocks start on a boundary of this size and are advised
 * for transparent huge pages on Linux, unless AMP_HUGEPAGES=0 (alloc.c). */
#define AMP_HUGE_PAGE_BYTES ((size_t)2 << 20)

#endif
