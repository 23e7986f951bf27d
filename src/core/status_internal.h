/* Internal: the error strings of functions that report through a caller's buffer (err, err_size)
 * instead of a context: the data loaders, safetensors and checkpoints. */
#ifndef AMP_STATUS_INTERNAL_H
#define AMP_STATUS_INTERNAL_H

#include <stddef.h>

/* Writes the printf-formatted one-line message into err (when err && err_size) and returns status. */
int amp_err_fmt(char *err, size_t err_size, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

#endif
