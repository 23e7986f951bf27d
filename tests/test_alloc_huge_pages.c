/* The default heap's large aligned blocks (src/core/alloc.c): from AMP_HUGE_PAGE_BYTES on, they start
 * on a 2 MiB boundary and, on Linux, carry the transparent-huge-page advice. The advice is read back
 * from the kernel: /proc/self/smaps lists the flag "hg" (VM_HUGEPAGE, set by madvise MADV_HUGEPAGE)
 * for the mapping that holds the block, whether or not the kernel then backs it with huge pages (that
 * depends on the machine's free memory, so it is only reported). */
#define _DEFAULT_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "../src/core/alloc_internal.h"
#include "harness.h"
#include "tests.h"

/* The VmFlags line and AnonHugePages (KiB) of the mapping holding p; false when smaps cannot be read
 * or no mapping holds p. */
static bool mapping_of(const void *p, char *flags, size_t flags_size, long *anon_huge_kib) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return false;
    char line[512];
    bool inside = false, found = false;
    *anon_huge_kib = -1;
    flags[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            if (found) break; /* the next mapping */
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (!inside) continue;
        found = true;
        if (strncmp(line, "AnonHugePages:", 14) == 0) *anon_huge_kib = strtol(line + 14, NULL, 10);
        if (strncmp(line, "VmFlags:", 8) == 0) {
            snprintf(flags, flags_size, " %s", line + 8);
            char *nl = strchr(flags, '\n');
            if (nl) *nl = ' ';
        }
    }
    fclose(f);
    return found && flags[0];
}

void test_alloc_huge_pages(void) {
#if !defined(__linux__)
    harness_note("not Linux: no transparent huge pages to ask for");
    return;
#endif
    const char *env = getenv("AMP_HUGEPAGES");
    if (env && strcmp(env, "0") == 0) {
        harness_note("AMP_HUGEPAGES=0: the advice is off in this process");
        return;
    }
    amp_heap_allocator saved;
    amp_get_allocator(&saved);
    amp_set_allocator(NULL); /* the default heap: what this test is about */
    FILE *thp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    const bool kernel_thp = thp != NULL;
    if (thp) fclose(thp);
    const size_t sizes[] = {AMP_HUGE_PAGE_BYTES, 3 * AMP_HUGE_PAGE_BYTES + 4096, (size_t)7 << 20};
    const size_t aligns[] = {64, 4096, 64};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = amp_aligned_alloc(aligns[i], sizes[i]);
        if (!CHECK(p != NULL)) continue;
        CHECK_MSG((uintptr_t)p % AMP_HUGE_PAGE_BYTES == 0, "a block of %zu bytes at %p: not on a 2 MiB boundary",
                  sizes[i], (void *)p);
        memset(p, 1, sizes[i]); /* touched, so the kernel may back it */
        char flags[600];
        long huge_kib = -1;
        if (!kernel_thp) {
            harness_note("no /sys/kernel/mm/transparent_hugepage: the advice is not checked");
        } else if (!mapping_of(p, flags, sizeof flags, &huge_kib)) {
            harness_note("/proc/self/smaps unreadable: the advice is not checked");
        } else {
            CHECK_MSG(strstr(flags, " hg ") != NULL, "a block of %zu bytes: its mapping lacks the huge-page advice (VmFlags:%s)",
                      sizes[i], flags);
            harness_note("%zu bytes: mapping flags%s, %ld KiB in huge pages now", sizes[i], flags, huge_kib);
        }
        amp_free(p);
    }
    amp_set_allocator(&saved);
}
