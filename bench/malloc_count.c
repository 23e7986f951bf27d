/* LD_PRELOAD shim that counts heap allocations (malloc, calloc, realloc, posix_memalign, aligned_alloc,
 * memalign) of a whole process and writes the count to the file named by $MALLOC_COUNT_OUT at exit.
 * bench/train_vs_pytorch.py runs `amp bench train` with N and 2N timed steps under it: the difference
 * divided by N (times repeats) is the heap allocations per steady-state step.
 *
 *     cc -O2 -shared -fPIC -o build/malloc_count.so bench/malloc_count.c
 *     MALLOC_COUNT_OUT=/tmp/n LD_PRELOAD=build/malloc_count.so build/amp bench train ...
 *
 * It forwards to glibc's __libc_* entry points (no dlsym, which itself allocates). glibc only. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static atomic_ullong count;

void *malloc(size_t n) {
    atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
    return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
    atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
    return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
    atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
    return __libc_realloc(p, n);
}
void *memalign(size_t al, size_t n) {
    atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
    return __libc_memalign(al, n);
}
void *aligned_alloc(size_t al, size_t n) { return memalign(al, n); }
int posix_memalign(void **out, size_t al, size_t n) {
    void *p = memalign(al, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

__attribute__((destructor)) static void report(void) {
    const char *path = getenv("MALLOC_COUNT_OUT");
    if (!path) return;
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "%llu\n", (unsigned long long)atomic_load(&count));
    fclose(f);
}
