/* The library's only output channel.
 *
 * amp never prints on its own, with one exception a user asks for by setting an environment
 * variable: when AMP_ISA names a path this CPU cannot run, the default hook writes one warning line
 * to stderr. Install a hook to route messages elsewhere, or amp_log_set_hook(NULL, NULL) for silence. */
#ifndef AMP_LOG_H
#define AMP_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum amp_log_level { AMP_LOG_DEBUG = 0, AMP_LOG_INFO = 1, AMP_LOG_WARN = 2, AMP_LOG_ERROR = 3 } amp_log_level;

/* Receives one message without a trailing newline. May be called from any thread. */
typedef void (*amp_log_fn)(amp_log_level level, const char *message, void *user);

/* Replaces the hook (NULL silences the library). Not thread-safe against concurrent logging:
 * set it at start-up. */
void amp_log_set_hook(amp_log_fn fn, void *user);
/* The hook installed before any call to amp_log_set_hook: writes "amp: warning: ..." to stderr. */
void amp_log_default_hook(amp_log_level level, const char *message, void *user);

#ifdef __cplusplus
}
#endif
#endif /* AMP_LOG_H */
