#include <stdarg.h>
#include <stdio.h>

#include "amp/status.h"
#include "status_internal.h"

int amp_err_fmt(char *err, size_t err_size, int status, const char *fmt, ...) {
    if (err && err_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return status;
}

const char *amp_status_str(int status) {
    switch (status) {
#define AMP_STATUS_CASE_(name, value, text) case value: return text;
        AMP_STATUS_LIST(AMP_STATUS_CASE_)
#undef AMP_STATUS_CASE_
    default: return "unknown status";
    }
}
