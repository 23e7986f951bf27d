#include "arena.h"

#include <string.h>

static int add_chunk(amp_arena *a, size_t bytes) {
    if (a->n_chunks == AMP_ARENA_MAX_CHUNKS) return -1;
    unsigned char *base = a->allocator->alloc(bytes, AMP_ARENA_ALIGN, a->allocator->user);
    if (!base) return -1;
    a->heap_allocations++;
    a->chunks[a->n_chunks++] = (amp_arena_chunk){base, bytes, 0};
    return 0;
}

int amp_arena_init(amp_arena *a, const amp_allocator *allocator, size_t initial_bytes) {
    memset(a, 0, sizeof *a);
    a->allocator = allocator;
    if (initial_bytes < 4096) initial_bytes = 4096;
    return add_chunk(a, initial_bytes);
}

void amp_arena_destroy(amp_arena *a) {
    for (int i = 0; i < a->n_chunks; i++) a->allocator->free(a->chunks[i].base, a->allocator->user);
    a->n_chunks = 0;
}

size_t amp_arena_used(const amp_arena *a) {
    size_t used = 0;
    for (int i = 0; i <= a->current && i < a->n_chunks; i++) used += a->chunks[i].used;
    return used;
}

void *amp_arena_alloc(amp_arena *a, size_t bytes) {
    const size_t need = (bytes + AMP_ARENA_ALIGN - 1) & ~(size_t)(AMP_ARENA_ALIGN - 1);
    if (need < bytes) return NULL; /* overflow */
    for (;;) {
        amp_arena_chunk *c = &a->chunks[a->current];
        if (c->size - c->used >= need) {
            void *p = c->base + c->used;
            c->used += need;
            size_t used = amp_arena_used(a);
            if (used > a->peak) a->peak = used;
            return p;
        }
        if (a->current + 1 < a->n_chunks) { /* a later chunk kept from an earlier scratch release */
            a->current++;
            a->chunks[a->current].used = 0;
            continue;
        }
        size_t grow = c->size * 2 > need ? c->size * 2 : need;
        if (add_chunk(a, grow) != 0) return NULL;
        a->current = a->n_chunks - 1;
    }
}

amp_arena_mark amp_arena_get_mark(const amp_arena *a) {
    return (amp_arena_mark){a->current, a->chunks[a->current].used};
}

void amp_arena_release(amp_arena *a, amp_arena_mark mark) {
    for (int i = mark.chunk + 1; i < a->n_chunks; i++) a->chunks[i].used = 0;
    a->current = mark.chunk;
    a->chunks[mark.chunk].used = mark.used;
}

void amp_arena_reset(amp_arena *a) {
    if (a->n_chunks > 1) {
        /* Coalesce: one chunk as large as everything the last step used, for the next step. */
        size_t total = 0;
        for (int i = 0; i < a->n_chunks; i++) total += a->chunks[i].size;
        amp_arena_chunk old[AMP_ARENA_MAX_CHUNKS];
        int n_old = a->n_chunks;
        memcpy(old, a->chunks, sizeof old);
        a->n_chunks = 0;
        if (add_chunk(a, total) == 0) {
            for (int i = 0; i < n_old; i++) a->allocator->free(old[i].base, a->allocator->user);
        } else { /* keep the old chunks: still correct, just not coalesced */
            memcpy(a->chunks, old, sizeof old);
            a->n_chunks = n_old;
        }
    }
    amp_arena_rewind(a);
}

void amp_arena_rewind(amp_arena *a) {
    for (int i = 0; i < a->n_chunks; i++) a->chunks[i].used = 0;
    a->current = 0;
}
