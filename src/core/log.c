#include <stdarg.h>
#include <stdio.h>

#include "amp/log.h"
#include "log_internal.h"

static const char *level_word(amp_log_level level) {
    switch (level) {
    case AMP_LOG_DEBUG: return "debug";
    case AMP_LOG_INFO: return "info";
    case AMP_LOG_WARN: return "warning";
    default: return "error";
    }
}

void amp_log_default_hook(amp_log_level level, const char *message, void *user) {
    (void)user;
    if (level >= AMP_LOG_WARN) fprintf(stderr, "amp: %s: %s\n", level_word(level), message);
}

static amp_log_fn hook = amp_log_default_hook;
static void *hook_user = NULL;

void amp_log_set_hook(amp_log_fn fn, void *user) {
    hook = fn;
    hook_user = user;
}

void amp_logf(amp_log_level level, const char *fmt, ...) {
    if (!hook) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    hook(level, buf, hook_user);
}
