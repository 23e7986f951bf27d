/* The thread pool (see parallel.h): a fixed set of pthreads that wait for a ticket to change, run
 * their slice of the current job, and report back through a pending counter.
 *
 * Hand-off protocol. The caller that holds `pool.busy` (the job's owner) fills `pool.job`, sets
 * `pool.pending` to the number of workers it needs, then, under `pool.lock`, publishes a new
 * `pool.ticket` (a generation number and the job's slice count in one word) and broadcasts
 * `pool.wake`. It runs slice 0 itself meanwhile, then polls briefly and sleeps on `pool.done`
 * until pending is zero. A worker sees the new ticket while polling (an acquire load) or after
 * waking (under the lock); if its slice is below the slice count it reads `pool.job`, runs the
 * slice and decrements `pool.pending`, and the worker that brings it to zero signals `pool.done`
 * under the lock. Every write of a task thus happens before the owner returns (release decrement,
 * acquire load).
 *
 * The slice count travels in the ticket, not in the job: a worker that sits a job out is not
 * waited for, so by the time it looks, the next owner may already be rewriting `pool.job`. */
#include "parallel.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "log_internal.h"

/* How long an idle thread polls before it sleeps: 2^17 atomic loads, tens of microseconds. That
 * bridges the gap between back-to-back kernel calls (a sleeping worker costs a futex wake-up, which
 * takes as long), and costs an idle process at most that much CPU per call. */
enum { SPIN_ITERATIONS = 1 << 17 };
enum { TICKET_SLICE_BITS = 10 }; /* holds n_slices <= AMP_MAX_THREADS */
_Static_assert(AMP_MAX_THREADS < (1 << TICKET_SLICE_BITS), "the ticket's slice field is too narrow");

typedef struct job {
    amp_task_fn fn;
    void *arg;
    int64_t n_tasks;
    int n_slices; /* T: slice s runs tasks [s*n/T, (s+1)*n/T) */
    bool dynamic; /* instead, each thread takes the next task not yet taken (pool.next_task) */
} job;

static struct {
    pthread_mutex_t lock;  /* guards the condition variables' predicates */
    pthread_cond_t wake;   /* workers wait here for a new ticket */
    pthread_cond_t done;   /* the caller waits here for pending == 0 */
    pthread_mutex_t busy;  /* held by the one caller that owns the pool during a job */
    atomic_uint_fast64_t ticket; /* (generation << TICKET_SLICE_BITS) | n_slices of the latest job */
    atomic_int pending;    /* workers still running the current job */
    job job;               /* written by the owner before it publishes the ticket, read-only after */
    atomic_int_fast64_t next_task; /* a dynamic job's next untaken task */
    int n_workers;         /* worker w runs slice w + 1; grown by owners (under `busy`) */
    pthread_t workers[AMP_MAX_THREADS - 1];
    uint_fast64_t start_ticket[AMP_MAX_THREADS - 1]; /* written before pthread_create */
} pool = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
    .busy = PTHREAD_MUTEX_INITIALIZER,
};

/* >= 0 while this thread runs tasks of a parallel call: its thread_id there. */
static _Thread_local int tls_thread_id = -1;

/* ---- the thread count ---- */

static atomic_int requested_threads; /* 0: not set, use the default */
static int default_threads = 1;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static int online_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) return 1;
    return n > AMP_MAX_THREADS ? AMP_MAX_THREADS : (int)n;
}

/* AMP_NUM_THREADS, read once. A malformed value is reported and ignored: a typo must not silently
 * turn a 32-core run into a 1-core one, nor be fatal. */
static void read_default(void) {
    default_threads = online_cores();
    const char *env = getenv("AMP_NUM_THREADS");
    if (!env || !*env) return;
    char *end;
    errno = 0;
    long v = strtol(env, &end, 10);
    if (errno || *end || v < 1) {
        amp_logf(AMP_LOG_WARN, "AMP_NUM_THREADS=%s is not a positive integer; using %d threads", env,
                 default_threads);
        return;
    }
    if (v > AMP_MAX_THREADS) {
        amp_logf(AMP_LOG_WARN, "AMP_NUM_THREADS=%s is above the maximum; using %d threads", env, AMP_MAX_THREADS);
        v = AMP_MAX_THREADS;
    }
    default_threads = (int)v;
}

int amp_get_num_threads(void) {
    int n = atomic_load_explicit(&requested_threads, memory_order_relaxed);
    if (n > 0) return n;
    pthread_once(&default_once, read_default);
    return default_threads;
}

void amp_set_num_threads(int n) {
    if (n > AMP_MAX_THREADS) n = AMP_MAX_THREADS;
    atomic_store_explicit(&requested_threads, n < 1 ? 0 : n, memory_order_relaxed);
}

int amp_parallel_max_threads(void) { return tls_thread_id >= 0 ? 1 : amp_get_num_threads(); }

bool amp_parallel_in_region(void) { return tls_thread_id >= 0; }

/* ---- running a job ---- */

static void run_slice(const job *j, int slice) {
    if (j->dynamic) {
        for (int64_t t; (t = atomic_fetch_add_explicit(&pool.next_task, 1, memory_order_relaxed)) < j->n_tasks;)
            j->fn(j->arg, t, slice);
        return;
    }
    const int64_t begin = j->n_tasks * slice / j->n_slices;
    const int64_t end = j->n_tasks * (slice + 1) / j->n_slices;
    for (int64_t t = begin; t < end; t++) j->fn(j->arg, t, slice);
}

static void *worker_main(void *p) {
    const int slice = (int)(intptr_t)p + 1;
    tls_thread_id = slice;
    /* The ticket current when the owner created this worker, before it published its own job: the
     * worker must run the next one, even if it starts after that was published. */
    uint_fast64_t seen = pool.start_ticket[slice - 1];
    for (;;) {
        uint_fast64_t t = atomic_load_explicit(&pool.ticket, memory_order_acquire);
        for (int i = 0; i < SPIN_ITERATIONS && t == seen; i++)
            t = atomic_load_explicit(&pool.ticket, memory_order_acquire);
        if (t == seen) {
            pthread_mutex_lock(&pool.lock);
            while ((t = atomic_load_explicit(&pool.ticket, memory_order_acquire)) == seen)
                pthread_cond_wait(&pool.wake, &pool.lock);
            pthread_mutex_unlock(&pool.lock);
        }
        seen = t;
        const int n_slices = (int)(t & ((1u << TICKET_SLICE_BITS) - 1));
        if (slice >= n_slices) continue; /* not needed this time, and not waited for */
        run_slice(&pool.job, slice);
        if (atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool.lock);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.lock);
        }
    }
    return NULL;
}

/* A forked child has none of the parent's threads: it starts over with an empty pool (as if no
 * parallel call had run), or its first parallel call would wait forever for workers that do not
 * exist. The locks are re-initialized because the fork may have caught another thread holding them. */
static void reset_pool_in_child(void) {
    pthread_mutex_init(&pool.lock, NULL);
    pthread_mutex_init(&pool.busy, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.done, NULL);
    atomic_store(&pool.pending, 0);
    pool.n_workers = 0;
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void) { pthread_atfork(NULL, NULL, reset_pool_in_child); }

/* Starts workers until there are `want` (called with pool.busy held). Returns how many exist: fewer
 * when the OS refuses a thread, which costs speed, not correctness (the caller runs their slices). */
static int ensure_workers(int want) {
    if (pool.n_workers < want) pthread_once(&atfork_once, register_atfork);
    while (pool.n_workers < want) {
        pthread_t t;
        pool.start_ticket[pool.n_workers] = atomic_load_explicit(&pool.ticket, memory_order_relaxed);
        if (pthread_create(&t, NULL, worker_main, (void *)(intptr_t)pool.n_workers) != 0) {
            amp_logf(AMP_LOG_WARN, "could not start a worker thread; running with %d threads", pool.n_workers + 1);
            break;
        }
        pool.workers[pool.n_workers++] = t;
    }
    return pool.n_workers;
}

/* All tasks on this thread, as thread 0 of the call (fn's thread_id indexes what the caller sized for
 * this call's threads); tls_thread_id marks the thread as in a region meanwhile (region: its own
 * marker, kept) */
static void run_serial(int64_t n_tasks, amp_task_fn fn, void *arg, int region) {
    const int saved = tls_thread_id;
    tls_thread_id = region;
    for (int64_t t = 0; t < n_tasks; t++) fn(arg, t, 0);
    tls_thread_id = saved;
}

/* gang: every task on its own thread, all at once, or none run and false is returned */
static bool parallel_for(int64_t n_tasks, amp_task_fn fn, void *arg, bool dynamic, bool gang) {
    if (n_tasks <= 0) return true;
    if (gang && (tls_thread_id >= 0 || n_tasks > amp_get_num_threads())) return false;
    if (tls_thread_id >= 0) { /* nested: serial on this thread (thread 0 of this call), still in its region */
        run_serial(n_tasks, fn, arg, tls_thread_id);
        return true;
    }
    int64_t t64 = amp_get_num_threads();
    if (t64 > n_tasks) t64 = n_tasks;
    const int n_slices = (int)t64;
    /* One thread, or another user thread owns the pool: serial. The bits are the same either way,
     * because fn's output depends only on the task index. */
    if (n_slices == 1 || pthread_mutex_trylock(&pool.busy) != 0) {
        if (gang && n_slices > 1) return false; /* a gang of one runs here */
        run_serial(n_tasks, fn, arg, 0);
        return true;
    }
    const int n_workers = ensure_workers(n_slices - 1);
    const int by_workers = n_workers < n_slices - 1 ? n_workers : n_slices - 1;
    if (gang && by_workers < n_slices - 1) {
        pthread_mutex_unlock(&pool.busy);
        return false;
    }
    pool.job = (job){.fn = fn, .arg = arg, .n_tasks = n_tasks, .n_slices = n_slices, .dynamic = dynamic};
    atomic_store_explicit(&pool.next_task, 0, memory_order_relaxed); /* published with the ticket */
    atomic_store_explicit(&pool.pending, by_workers, memory_order_relaxed);
    pthread_mutex_lock(&pool.lock);
    const uint_fast64_t generation =
        (atomic_load_explicit(&pool.ticket, memory_order_relaxed) >> TICKET_SLICE_BITS) + 1;
    atomic_store_explicit(&pool.ticket, (generation << TICKET_SLICE_BITS) | (uint_fast64_t)n_slices,
                          memory_order_release);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);

    tls_thread_id = 0;
    run_slice(&pool.job, 0);
    for (int s = by_workers + 1; s < n_slices; s++) run_slice(&pool.job, s); /* slices of missing workers */
    tls_thread_id = -1;

    for (int i = 0; i < SPIN_ITERATIONS && atomic_load_explicit(&pool.pending, memory_order_acquire) != 0; i++) {
    }
    if (atomic_load_explicit(&pool.pending, memory_order_acquire) != 0) {
        pthread_mutex_lock(&pool.lock);
        while (atomic_load_explicit(&pool.pending, memory_order_acquire) != 0)
            pthread_cond_wait(&pool.done, &pool.lock);
        pthread_mutex_unlock(&pool.lock);
    }
    pthread_mutex_unlock(&pool.busy);
    return true;
}

void amp_parallel_for(int64_t n_tasks, amp_task_fn fn, void *arg) { (void)parallel_for(n_tasks, fn, arg, false, false); }

void amp_parallel_for_dynamic(int64_t n_tasks, amp_task_fn fn, void *arg) {
    (void)parallel_for(n_tasks, fn, arg, true, false);
}

bool amp_parallel_gang(int64_t n_tasks, amp_task_fn fn, void *arg) { return parallel_for(n_tasks, fn, arg, false, true); }

typedef struct range_job {
    amp_range_fn fn;
    void *arg;
    int64_t n, align, ranges;
} range_job;

static void range_task(void *arg, int64_t task, int thread_id) {
    const range_job *r = arg;
    int64_t i0, i1;
    amp_parallel_range_bounds(r->n, r->align, r->ranges, task, &i0, &i1);
    if (i0 < r->n) r->fn(r->arg, i0, i1, thread_id);
}

void amp_parallel_range(int64_t n, int64_t min_per_thread, int64_t align, amp_range_fn fn, void *arg) {
    if (n <= 0) return;
    if (align < 1) align = 1;
    int64_t t = amp_parallel_max_threads();
    if (min_per_thread > 0 && n / min_per_thread < t) t = n / min_per_thread;
    const int64_t units = (n + align - 1) / align;
    if (t > units) t = units;
    if (t <= 1) {
        fn(arg, 0, n, 0);
        return;
    }
    range_job r = {fn, arg, n, align, t};
    amp_parallel_for(t, range_task, &r);
}
