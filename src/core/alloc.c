/* The process-wide heap hooks (amp/alloc.h) and the internal wrappers that use them. */
#define _DEFAULT_SOURCE /* madvise and MADV_HUGEPAGE, beside the build's POSIX level */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

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

/* Large aligned blocks (from AMP_HUGE_PAGE_BYTES: the parameters, gradients and optimizer state of a
 * model, the arena's blocks) start on a 2 MiB boundary and are advised for transparent huge pages,
 * where Linux offers them on request (Debian's default THP mode is madvise: nothing else asks). The
 * optimizer's pass streams three or more parameter-sized buffers, and the GEMM's packs and the
 * forward's weight copies read them: with 4 KiB pages each 2 MiB is 512 TLB entries, with a huge page
 * one. Only the whole 2 MiB pages inside a block are advised (a block's
 * tail keeps small pages), so resident memory grows by at most one huge page per partly used block.
 * AMP_HUGEPAGES=0 turns it off (read once); a replaced heap (amp_set_allocator) gets none of this. */
#if defined(__linux__) && defined(MADV_HUGEPAGE)
static bool huge_pages_on;
static pthread_once_t huge_pages_once = PTHREAD_ONCE_INIT;

static void huge_pages_init(void) {
    const char *env = getenv("AMP_HUGEPAGES");
    huge_pages_on = !(env && strcmp(env, "0") == 0);
}
#endif

static void *libc_aligned(size_t align, size_t size, void *user) {
    (void)user;
    void *p = NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (size >= AMP_HUGE_PAGE_BYTES) {
        pthread_once(&huge_pages_once, huge_pages_init);
        if (huge_pages_on) {
            if (posix_memalign(&p, align > AMP_HUGE_PAGE_BYTES ? align : AMP_HUGE_PAGE_BYTES, size) != 0) return NULL;
            (void)madvise(p, size / AMP_HUGE_PAGE_BYTES * AMP_HUGE_PAGE_BYTES, MADV_HUGEPAGE); /* advice only */
            return p;
        }
    }
#endif
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
