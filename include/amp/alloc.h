/* The process-wide heap amp allocates from: replace it to count, cap or fail amp's allocations.
 *
 * Every heap allocation amp makes itself goes through these hooks: the contexts' and loaders'
 * default amp_allocator (amp/tensor.h, amp/data.h), models, optimizers, scalers, the safetensors and
 * checkpoint layers, the training loop, the GEMM's per-thread packing buffers and the autocast cast
 * cache. Not routed: what the libraries amp calls allocate internally (zlib's gzip streams, cJSON's
 * parse tree, the C library's FILE buffers and thread stacks).
 *
 * Process-wide and not thread-safe: install it before amp allocates anything, never while another
 * thread runs amp code. A block is freed through whatever hooks are installed when it is freed, so
 * replace the hooks while amp memory is live only if the new free_fn can free the old blocks (as a
 * counting wrapper around malloc can). Two caches outlive the calls that fill them, until their
 * thread exits: the GEMM's packing buffers and the autocast cast cache.
 */
#ifndef AMP_ALLOC_H
#define AMP_ALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct amp_heap_allocator {
    /* malloc_fn: size > 0 bytes aligned for any object, or NULL. */
    void *(*malloc_fn)(size_t size, void *user);
    /* realloc_fn: ptr is NULL or a block from these hooks; size > 0; NULL leaves ptr untouched. */
    void *(*realloc_fn)(void *ptr, size_t size, void *user);
    /* aligned_fn: size > 0 bytes at a multiple of align (a power of two, at least sizeof(void *)),
     * freed with free_fn, never passed to realloc_fn. */
    void *(*aligned_fn)(size_t align, size_t size, void *user);
    /* free_fn: ptr is never NULL. */
    void (*free_fn)(void *ptr, void *user);
    void *user;
} amp_heap_allocator;

/* Installs `heap` (copied), or the C library's malloc/realloc/posix_memalign/free when heap is NULL.
 * The default's aligned blocks of 2 MiB or more (a model's parameters, gradients and optimizer state,
 * the arena) start on a 2 MiB boundary and, on Linux, are advised for transparent huge pages
 * (madvise MADV_HUGEPAGE); the environment variable AMP_HUGEPAGES=0, read once, turns that off.
 * Returns AMP_OK, or AMP_ERR_INVALID_ARGUMENT (nothing changed) if a hook is NULL. */
int amp_set_allocator(const amp_heap_allocator *heap);
/* The hooks in use (the defaults if none were installed). */
void amp_get_allocator(amp_heap_allocator *out);

#ifdef __cplusplus
}
#endif
#endif /* AMP_ALLOC_H */
