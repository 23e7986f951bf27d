/* The loaders' allocator default. */
#include <stdlib.h>

#include "data_internal.h"
#include "../core/alloc_internal.h"

static void *data_default_alloc(size_t size, size_t align, void *user) {
    (void)user;
    return amp_aligned_alloc(align, size); /* through the process-wide hooks (amp/alloc.h) */
}

static void data_default_free(void *ptr, void *user) {
    (void)user;
    amp_free(ptr);
}

bool data_allocator(const amp_allocator *alloc, amp_allocator *out) {
    if (!alloc) {
        *out = (amp_allocator){.alloc = data_default_alloc, .free = data_default_free, .user = NULL};
        return true;
    }
    if (!alloc->alloc || !alloc->free) return false;
    *out = *alloc;
    return true;
}
