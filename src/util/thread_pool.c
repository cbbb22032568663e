/*
 * thread_pool.c — persistent pthread workers running one parallel-for at a time, tasks
 * claimed from a shared counter.
 *
 * Model. The pool owns n_threads - 1 workers; the calling thread takes part too. A run
 * writes the job (fn, ctx, n_tasks), resets the claim word `ticket` to (generation, 0) and
 * bumps the generation counter `gen`. Every participant then claims tasks one at a time by
 * a compare-and-swap on `ticket` (its high 32 bits the generation, its low 32 bits the next
 * task) and runs them; the run is over when `done` reaches n_tasks. So a worker that has
 * not woken up yet, or whose CPU was taken away (a VM's vCPU, an oversubscribed machine),
 * holds up nothing it has not claimed: the others take its share. Which thread runs a task
 * therefore varies from run to run, but what a task computes does not: kernels give each
 * task a fixed slice of the output and reduce every element inside one task, so the bits
 * never depend on the pool size or on who ran what.
 *
 * Why the generation is in the claim word: a worker that saw run g and is slow to claim
 * must not take a task of run g + 1 with run g's job. The caller resets `ticket` to
 * (g + 1, 0) before it writes run g + 1's job, and a claim succeeds only while the word
 * still carries the generation the worker read the job under; every access is sequentially
 * consistent, so a claim that succeeds was made against its own run's job fields.
 *
 * Waiting. Decode issues ~150 small runs per token, so a worker that finishes a run spins
 * on `gen` (pause, the clock read every 64 iterations) for CAIRN_POOL_SPIN_US microseconds
 * (default 200) before it sleeps on a futex on `gen`; the caller likewise spins, then
 * sleeps, on `done`. Sleepers announce themselves in `sleepers` / `caller_sleeping`
 * (sequentially consistent, Dekker style) so a publisher pays for futex_wake only when
 * somebody sleeps. The fields that different threads write sit on separate cache lines.
 * A run allocates nothing.
 *
 * Invariants: between runs `ticket` is (gen, n_tasks of the last run) and `done` equals
 * that n_tasks; `busy` is set for the duration of a run and catches concurrent or nested
 * runs (a programming error: CAIRN_ASSERT).
 *
 * Thread-safety: one run at a time per pool; create/destroy/run from one owning thread.
 */
#include "util/thread_pool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { POOL_LINE = 64 };

struct cairn_thread_pool {
    int n_threads;            /* participants, caller included */
    int64_t spin_ns;          /* how long a waiter spins before it sleeps */
    pthread_t *workers;       /* [n_threads - 1] */
    struct worker_arg *args;  /* [n_threads - 1] */
    char pad0[POOL_LINE];
    /* Written by the caller once per run, read by every worker: one line. */
    _Atomic uint32_t gen;     /* bumped once per run (and at shutdown) */
    _Atomic(cairn_task_fn) fn;
    _Atomic(void *) ctx;
    _Atomic int n_tasks;
    atomic_bool stop;
    char pad1[POOL_LINE];
    _Atomic uint64_t ticket;  /* (generation << 32) | next task to claim */
    char pad2[POOL_LINE];
    _Atomic uint32_t done;    /* tasks of the current run finished */
    _Atomic uint32_t caller_sleeping; /* 1 while the caller blocks on done */
    char pad3[POOL_LINE];
    _Atomic uint32_t sleepers; /* workers blocked in futex_wait on gen */
    atomic_bool busy;
};

struct worker_arg {
    cairn_thread_pool_t *tp;
    int index; /* 1..n_threads-1 */
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

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spins until *addr differs from seen or spin_ns have passed; returns the last value read. */
static uint32_t spin_while_equal(const cairn_thread_pool_t *tp, _Atomic uint32_t *addr, uint32_t seen)
{
    uint32_t v = atomic_load(addr);
    if (v != seen || tp->spin_ns <= 0)
        return v;
    const int64_t end = now_ns() + tp->spin_ns;
    for (unsigned i = 1;; i++) {
        cpu_relax();
        if ((v = atomic_load(addr)) != seen)
            return v;
        if (i % 64 == 0 && now_ns() >= end)
            return v;
    }
}

/* Claims and runs tasks of generation g (job fn, ctx, n) until none is left. */
static void claim_and_run(cairn_thread_pool_t *tp, uint32_t g, cairn_task_fn fn, void *ctx, int n)
{
    uint64_t t = atomic_load(&tp->ticket);
    for (;;) {
        if ((uint32_t)(t >> 32) != g || (uint32_t)t >= (uint32_t)n)
            return;
        if (!atomic_compare_exchange_weak(&tp->ticket, &t, t + 1))
            continue; /* t now holds the current word */
        const int task = (int)(uint32_t)t;
        fn(ctx, task, n);
        if (atomic_fetch_add(&tp->done, 1) + 1 == (uint32_t)n && atomic_load(&tp->caller_sleeping))
            futex_wake_all(&tp->done);
        t = atomic_load(&tp->ticket);
    }
}

static void *worker_main(void *p)
{
    struct worker_arg *a = p;
    cairn_thread_pool_t *tp = a->tp;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g = spin_while_equal(tp, &tp->gen, seen);
        if (g == seen) {
            atomic_fetch_add(&tp->sleepers, 1);
            while ((g = atomic_load(&tp->gen)) == seen)
                futex_wait(&tp->gen, seen);
            atomic_fetch_sub(&tp->sleepers, 1);
        }
        seen = g;
        if (atomic_load(&tp->stop))
            break;
        claim_and_run(tp, g, atomic_load(&tp->fn), atomic_load(&tp->ctx), atomic_load(&tp->n_tasks));
    }
    return NULL;
}

/* Wakes the workers for a new generation (the job fields and ticket already written). */
static void publish(cairn_thread_pool_t *tp, uint32_t g)
{
    atomic_store(&tp->gen, g); /* seq_cst: pairs with the sleepers increment */
    if (atomic_load(&tp->sleepers) > 0)
        futex_wake_all(&tp->gen);
}

static void join_workers(cairn_thread_pool_t *tp, int started)
{
    const uint32_t g = atomic_load(&tp->gen) + 1;
    atomic_store(&tp->ticket, (uint64_t)g << 32);
    atomic_store(&tp->n_tasks, 0);
    atomic_store(&tp->stop, true);
    publish(tp, g);
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
    tp->spin_ns = cairn_knob_int("CAIRN_POOL_SPIN_US", false, 0, 200, 0, 10000000) * 1000;
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
    const uint32_t g = atomic_load(&tp->gen) + 1;
    /* The claim word first: a worker still claiming under the last run's job stops. */
    atomic_store(&tp->ticket, (uint64_t)g << 32);
    atomic_store(&tp->done, 0);
    atomic_store(&tp->fn, fn);
    atomic_store(&tp->ctx, ctx);
    atomic_store(&tp->n_tasks, n_tasks);
    publish(tp, g);
    claim_and_run(tp, g, fn, ctx, n_tasks);
    /* Every task is claimed; wait for the ones still running elsewhere. */
    const uint32_t n = (uint32_t)n_tasks;
    uint32_t d = atomic_load(&tp->done);
    if (d != n && tp->spin_ns > 0) {
        const int64_t end = now_ns() + tp->spin_ns;
        for (unsigned i = 1; (d = atomic_load(&tp->done)) != n; i++) {
            cpu_relax();
            if (i % 64 == 0 && now_ns() >= end)
                break;
        }
    }
    if (d != n) {
        atomic_store(&tp->caller_sleeping, 1);
        while ((d = atomic_load(&tp->done)) != n)
            futex_wait(&tp->done, d);
        atomic_store(&tp->caller_sleeping, 0);
    }
    atomic_store(&tp->busy, false);
}
