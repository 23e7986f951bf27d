/* The process-wide heap hooks (amp/alloc.h) and the internal wrappers that use them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_internal.h"
#include "amp/alloc.h"
#include "amp/status.h"

static void *libc_malloc(size_t size, void *user) {
    (void)user;
    return malloc(size);
}

static void *libc_realloc(void *ptr, size_t size, void *user) {
    (void)user;
    return realloc(ptr, size);
}

static void *libc_aligned(size_t align, size_t size, void *user) {
    (void)user;
    void *p = NULL;
    return posix_memalign(&p, align, size) == 0 ? p : NULL;
}

static void libc_free(void *ptr, void *user) {
    (void)user;
    free(ptr);
}

static const amp_heap_allocator libc_heap = {libc_malloc, libc_realloc, libc_aligned, libc_free, NULL};
static amp_heap_allocator heap = {libc_malloc, libc_realloc, libc_aligned, libc_free, NULL};

int amp_set_allocator(const amp_heap_allocator *h) {
    if (!h) {
        heap = libc_heap;
        return AMP_OK;
    }
    if (!h->malloc_fn || !h->realloc_fn || !h->aligned_fn || !h->free_fn) return AMP_ERR_INVALID_ARGUMENT;
    heap = *h;
    return AMP_OK;
}

void amp_get_allocator(amp_heap_allocator *out) {
    if (out) *out = heap;
}

void *amp_malloc(size_t size) { return heap.malloc_fn(size ? size : 1, heap.user); }

void *amp_calloc(size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) return NULL;
    const size_t n = count * size;
    void *p = amp_malloc(n);
    if (p) memset(p, 0, n);
    return p;
}

void *amp_realloc(void *ptr, size_t size) { return heap.realloc_fn(ptr, size ? size : 1, heap.user); }

void *amp_aligned_alloc(size_t align, size_t size) {
    if (align < sizeof(void *)) align = sizeof(void *);
    if (align & (align - 1)) return NULL;
    return heap.aligned_fn(align, size ? size : 1, heap.user);
}

void amp_free(void *ptr) {
    if (ptr) heap.free_fn(ptr, heap.user);
}

char *amp_strdup(const char *s) {
    const size_t n = strlen(s) + 1;
    char *p = amp_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}
