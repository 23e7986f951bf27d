/* Internal: the persistent thread pool behind every parallel kernel.
 *
 * One pool per process, created lazily by the first parallel call with more than one thread, grown
 * when amp_set_num_threads asks for more. A parallel call splits [0, n_tasks) into T contiguous
 * slices, T = min(amp_get_num_threads(), n_tasks): slice s is tasks [s*n/T, (s+1)*n/T), run in
 * increasing order by one thread. The calling thread runs slice 0 and pool workers run the others.
 * The partition depends only on n_tasks and T, never on timing, so an fn whose output depends only
 * on the task index gives the same bits on every run (the determinism rule of STYLE.md).
 *
 * Rules for fn:
 *   - tasks must write disjoint outputs; fn must not depend on thread_id for its arithmetic;
 *   - thread_id (in [0, T), T <= the amp_parallel_max_threads() of the calling thread) names the
 *     thread within this call only. Two calls from two different user threads can be at work at
 *     the same time (one holds the pool, the other runs serially), so per-thread scratch is either
 *     thread-local storage or allocated by the caller for this one call, amp_parallel_max_threads()
 *     slots indexed by thread_id, never a shared array indexed by thread_id;
 *   - fn may call amp_parallel_for again: a call from inside a parallel region runs its tasks
 *     serially on the calling thread as thread 0 of that call (same partition order, so the same
 *     bits) instead of deadlocking.
 *
 * Idle workers spin for a few tens of microseconds (so back-to-back calls, as in a training step,
 * do not pay a wake-up each), then sleep on a condition variable. */
#ifndef AMP_CORE_PARALLEL_H
#define AMP_CORE_PARALLEL_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/threads.h"

typedef void (*amp_task_fn)(void *arg, int64_t task, int thread_id);

/* Runs fn(arg, task, thread_id) once for every task in [0, n_tasks) and returns when all are done.
 * n_tasks <= 0 does nothing. */
void amp_parallel_for(int64_t n_tasks, amp_task_fn fn, void *arg);

/* amp_parallel_for with the tasks handed out one at a time to whichever thread is free, for many
 * tasks of uneven cost or threads of uneven speed (a VM's vCPU shared with neighbours). Which
 * thread runs a task, and in what order, depends on timing: only for fn whose tasks write disjoint
 * outputs from inputs nothing else writes, and whose result never depends on thread_id (per-thread
 * scratch is fine; per-thread partial sums are not). */
void amp_parallel_for_dynamic(int64_t n_tasks, amp_task_fn fn, void *arg);

/* amp_parallel_for with task i on thread i, every task running at the same time as the others, so
 * tasks may wait for each other's progress (a task waiting on one that has not started would
 * otherwise wait forever). False, and nothing run, where that cannot be had: n_tasks above the
 * thread count, a call from inside a parallel region, the pool owned by another user thread, or a
 * worker the OS refused. The caller then does the work another way. */
bool amp_parallel_gang(int64_t n_tasks, amp_task_fn fn, void *arg);

/* fn(arg, i0, i1, thread_id) for contiguous ranges covering [0, n): one range per thread, T =
 * min(amp_parallel_max_threads(), n / min_per_thread) ranges (one call over all of [0, n) when T is
 * 1), each bound a multiple of `align` (but the last end, n). The ranges depend only on n, T and
 * align. For elementwise work whose result per element does not depend on where the element falls
 * (every vecmath and elementwise kernel here): splitting it leaves the bits as they are. */
typedef void (*amp_range_fn)(void *arg, int64_t i0, int64_t i1, int thread_id);
/* Range i of `ranges` as amp_parallel_range cuts [0, n) (bounds multiples of align, the last end n;
 * empty where i0 >= n): for callers that hand out the same ranges themselves (amp_parallel_gang). */
static inline void amp_parallel_range_bounds(int64_t n, int64_t align, int64_t ranges, int64_t i, int64_t *i0,
                                             int64_t *i1) {
    const int64_t units = (n + align - 1) / align;
    *i0 = units * i / ranges * align;
    *i1 = units * (i + 1) / ranges * align;
    if (*i1 > n) *i1 = n;
}
void amp_parallel_range(int64_t n, int64_t min_per_thread, int64_t align, amp_range_fn fn, void *arg);

/* The number of threads a parallel call started from this thread would use now (before the min
 * with n_tasks): 1 inside a parallel region, amp_get_num_threads() elsewhere. Callers size their
 * partitions with it. */
int amp_parallel_max_threads(void);

/* True while this thread runs tasks of a parallel call (the caller's own slice included). */
bool amp_parallel_in_region(void);

#endif /* AMP_CORE_PARALLEL_H */
