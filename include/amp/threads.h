/* How many threads amp's parallel kernels (amp_gemm, and the ops built on the same pool) use.
 *
 * The setting is process-wide. It starts from the environment variable AMP_NUM_THREADS (a positive
 * integer, read once, at first use; anything else is ignored with a warning through the log hook),
 * and without it from the number of online cores. The threads themselves are created at the first
 * parallel call that needs them, are reused by every later call, and sleep while idle.
 *
 * Results never depend on timing: with the same thread count, every call gives the same bits. (GEMM
 * goes further: its bits do not depend on the thread count either; see amp/gemm.h.) */
#ifndef AMP_THREADS_H
#define AMP_THREADS_H

#ifdef __cplusplus
extern "C" {
#endif

/* The largest thread count amp uses; amp_set_num_threads clamps to it. */
#define AMP_MAX_THREADS 256

/* The thread count parallel calls use now: at least 1. */
int amp_get_num_threads(void);
/* Sets the thread count for later calls; n < 1 restores the default (AMP_NUM_THREADS, else the
 * online cores), n > AMP_MAX_THREADS is clamped. Thread-safe, but a call already running keeps the
 * count it started with. */
void amp_set_num_threads(int n);

#ifdef __cplusplus
}
#endif
#endif /* AMP_THREADS_H */
