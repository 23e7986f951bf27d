/* Internal to src/io (and tests): the writer's fault-injection hook (both files' error messages:
 * amp_err_fmt). */
#ifndef AMP_IO_INTERNAL_H
#define AMP_IO_INTERNAL_H

#include <stddef.h>
#include <sys/types.h>

#include "../core/status_internal.h"

/* TEST-ONLY. When set, amp_safetensors_write calls hook instead of write(2) for every chunk it writes
 * to the temp file; the hook returns bytes written or -1 with errno set (e.g. ENOSPC to simulate a full
 * disk). NULL restores write(2). A process-wide setting, not thread-safe: only tests use it. */
typedef ssize_t (*amp_io_write_hook)(int fd, const void *buf, size_t n, void *user);
void amp_io_set_write_hook(amp_io_write_hook hook, void *user);

#endif
