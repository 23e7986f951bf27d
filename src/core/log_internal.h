/* Internal: formatted logging through the user's hook (amp/log.h). */
#ifndef AMP_LOG_INTERNAL_H
#define AMP_LOG_INTERNAL_H

#include "amp/log.h"

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void amp_logf(amp_log_level level, const char *fmt, ...);

#endif
