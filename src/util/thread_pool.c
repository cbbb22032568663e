/*
 * thread_pool.c — persistent pthread workers running one static parallel-for at a time.
 *
 * Model. The pool owns n_threads - 1 workers; the calling thread is participant 0. A run
 * publishes (fn, ctx, n_tasks) and bumps the generation counter `gen`; participant p then
 * runs tasks p, p + n, p + 2n, ... (n = n_threads). The assignment is static, so which
 * thread runs a task is a pure function of (task, n_threads) — kernels that give each
 * task a fixed slice of the output therefore produce the same bits for any pool size.
 *
 * Waiting. Decode issues ~50 small runs per token, so a worker that finishes a run spins
 * on `gen` for a while (CAIRN_POOL_SPIN iterations of `pause`, default 4000, roughly tens
 * of microseconds) before sleeping on a futex on `gen`. The caller likewise spins, then
 * sleeps, on `remaining`. Sleepers announce themselves in `sleepers` / `caller_sleeping`
 * (sequentially consistent, Dekker style) so a publisher only pays for futex_wake when
 * somebody actually sleeps.
 *
 * Invariants: `remaining` is the number of workers that have not finished the current run;
 * it is 0 between runs. `busy` is set for the duration of a run and catches concurrent or
 * nested runs (a programming error: CAIRN_ASSERT).
 *
 * Thread-safety: one run at a time per pool; create/destroy/run from one owning thread.
 */
#include "util/thread_pool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

struct cairn_thread_pool {
    int n_threads;            /* participants, caller included */
    int spin;                 /* pause iterations before sleeping */
    pthread_t *workers;       /* [n_threads - 1] */
    struct worker_arg *args;  /* [n_threads - 1] */
    /* the current job, written before gen is published */
    cairn_task_fn fn;
    void *ctx;
    int n_tasks;
    bool stop;
    _Atomic uint32_t gen;             /* bumped once per run (and at shutdown) */
    _Atomic uint32_t remaining;       /* workers still inside the current run */
    _Atomic uint32_t sleepers;        /* workers blocked in futex_wait on gen */
    _Atomic uint32_t caller_sleeping; /* 1 while the caller blocks on remaining */
    atomic_bool busy;
};

struct worker_arg {
    cairn_thread_pool_t *tp;
    int index; /* participant index, 1..n_threads-1 */
};

static void futex_wait(_Atomic uint32_t *addr, uint32_t expected)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void run_share(cairn_thread_pool_t *tp, int participant)
{
    for (int t = participant; t < tp->n_tasks; t += tp->n_threads)
        tp->fn(tp->ctx, t, tp->n_tasks);
}

/* Waits until gen differs from seen; returns the new value. */
static uint32_t wait_for_gen(cairn_thread_pool_t *tp, uint32_t seen)
{
    uint32_t g;
    for (int i = 0; i < tp->spin; i++) {
        g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        if (g != seen)
            return g;
        cpu_relax();
    }
    atomic_fetch_add(&tp->sleepers, 1);
    while ((g = atomic_load(&tp->gen)) == seen)
        futex_wait(&tp->gen, seen);
    atomic_fetch_sub(&tp->sleepers, 1);
    return g;
}

static void *worker_main(void *p)
{
    struct worker_arg *a = p;
    cairn_thread_pool_t *tp = a->tp;
    uint32_t seen = 0;
    for (;;) {
        seen = wait_for_gen(tp, seen);
        if (tp->stop)
            break;
        run_share(tp, a->index);
        if (atomic_fetch_sub(&tp->remaining, 1) == 1 && atomic_load(&tp->caller_sleeping))
            futex_wake_all(&tp->remaining);
    }
    return NULL;
}

/* Wakes the workers for a new generation (the job fields must already be written). */
static void publish(cairn_thread_pool_t *tp)
{
    atomic_fetch_add(&tp->gen, 1); /* seq_cst: pairs with the sleepers increment */
    if (atomic_load(&tp->sleepers) > 0)
        futex_wake_all(&tp->gen);
}

static void join_workers(cairn_thread_pool_t *tp, int started)
{
    tp->stop = true;
    publish(tp);
    for (int i = 0; i < started; i++)
        pthread_join(tp->workers[i], NULL);
}

int cairn_thread_pool_create(int n_threads, cairn_thread_pool_t **out)
{
    if (out)
        *out = NULL;
    if (!out || n_threads < 1 || n_threads > 1024)
        return CAIRN_EINVAL;
    int rc = CAIRN_ENOMEM, started = 0;
    cairn_thread_pool_t *tp = cairn_calloc(1, sizeof(*tp));
    if (!tp)
        return CAIRN_ENOMEM;
    tp->n_threads = n_threads;
    tp->spin = (int)cairn_knob_int("CAIRN_POOL_SPIN", false, 0, 4000, 0, 100000000);
    if (n_threads > 1) {
        tp->workers = cairn_calloc((size_t)n_threads - 1, sizeof(*tp->workers));
        tp->args = cairn_calloc((size_t)n_threads - 1, sizeof(*tp->args));
        if (!tp->workers || !tp->args)
            goto fail;
        for (int i = 0; i < n_threads - 1; i++) {
            tp->args[i].tp = tp;
            tp->args[i].index = i + 1;
            if (pthread_create(&tp->workers[i], NULL, worker_main, &tp->args[i]) != 0) {
                rc = CAIRN_EEXHAUSTED;
                goto fail;
            }
            started++;
        }
    }
    *out = tp;
    return CAIRN_OK;
fail:
    join_workers(tp, started);
    cairn_free(tp->workers);
    cairn_free(tp->args);
    cairn_free(tp);
    return rc;
}

void cairn_thread_pool_destroy(cairn_thread_pool_t *tp)
{
    if (!tp)
        return;
    CAIRN_ASSERT(!atomic_load(&tp->busy));
    join_workers(tp, tp->n_threads - 1);
    cairn_free(tp->workers);
    cairn_free(tp->args);
    cairn_free(tp);
}

int cairn_thread_pool_size(const cairn_thread_pool_t *tp) { return tp ? tp->n_threads : 1; }

void cairn_thread_pool_run(cairn_thread_pool_t *tp, cairn_task_fn fn, void *ctx, int n_tasks)
{
    if (n_tasks <= 0)
        return;
    if (!tp || tp->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++)
            fn(ctx, t, n_tasks);
        return;
    }
    /* A second run while one is in flight (another thread, or fn calling back into the
     * pool) would corrupt the job fields: that is a bug in the caller. */
    bool was_busy = atomic_exchange(&tp->busy, true);
    CAIRN_ASSERT(!was_busy);
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n_tasks = n_tasks;
    atomic_store(&tp->remaining, (uint32_t)(tp->n_threads - 1));
    publish(tp);
    run_share(tp, 0);
    uint32_t r;
    for (int i = 0; i < tp->spin; i++) {
        if (atomic_load_explicit(&tp->remaining, memory_order_acquire) == 0)
            goto done;
        cpu_relax();
    }
    atomic_store(&tp->caller_sleeping, 1);
    while ((r = atomic_load(&tp->remaining)) != 0)
        futex_wait(&tp->remaining, r);
    atomic_store(&tp->caller_sleeping, 0);
done:
    atomic_store(&tp->busy, false);
}
