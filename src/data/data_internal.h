/* Shared by the data loaders: the allocator default and the one-line error message. */
#ifndef AMP_DATA_INTERNAL_H
#define AMP_DATA_INTERNAL_H

#include <stddef.h>

#include "amp/data.h"

/* The allocator to use: *alloc, or aligned malloc when alloc is NULL. Returns false when alloc is
 * given without both functions. */
bool data_allocator(const amp_allocator *alloc, amp_allocator *out);

/* Writes the printf-formatted message into err (when err && err_size) and returns status. */
int data_error(char *err, size_t err_size, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

#endif /* AMP_DATA_INTERNAL_H */
