/* Internal: the per-step arena. A list of chunks with a bump pointer; mark/release give op scratch a
 * stack discipline; reset rewinds everything and, if the last step needed more than one chunk,
 * replaces them by one chunk of the total size, so the next step fits without a heap allocation. */
#ifndef AMP_ARENA_H
#define AMP_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "amp/tensor.h"

enum { AMP_ARENA_ALIGN = 64, AMP_ARENA_MAX_CHUNKS = 32 };

typedef struct amp_arena_chunk {
    unsigned char *base;
    size_t size, used;
} amp_arena_chunk;

typedef struct amp_arena {
    amp_arena_chunk chunks[AMP_ARENA_MAX_CHUNKS];
    int n_chunks, current;
    size_t peak;
    uint64_t heap_allocations;
    const amp_allocator *allocator;
} amp_arena;

typedef struct amp_arena_mark {
    int chunk;
    size_t used;
} amp_arena_mark;

int amp_arena_init(amp_arena *a, const amp_allocator *allocator, size_t initial_bytes);
void amp_arena_destroy(amp_arena *a);
/* 64-byte aligned memory, or NULL when the allocator fails. */
void *amp_arena_alloc(amp_arena *a, size_t bytes);
void amp_arena_reset(amp_arena *a);
/* Rewinds every chunk without coalescing: the memory stays where it was until amp_arena_destroy
 * (the tensor headers' arenas, whose old pointers must stay readable). */
void amp_arena_rewind(amp_arena *a);
size_t amp_arena_used(const amp_arena *a);
amp_arena_mark amp_arena_get_mark(const amp_arena *a);
/* Frees everything allocated after the mark (their memory is reused by later allocations). */
void amp_arena_release(amp_arena *a, amp_arena_mark mark);

#endif
