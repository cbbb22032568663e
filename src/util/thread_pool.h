/*
 * thread_pool.h — a fixed pool of worker threads that runs one parallel-for at a time.
 *
 * cairn_thread_pool_run(tp, fn, ctx, n_tasks) calls fn(ctx, task, n_tasks) for every task
 * in [0, n_tasks) exactly once, across the workers and the calling thread, and returns when
 * all are done. Participants claim tasks one at a time from a shared counter, so a thread
 * that is slow to wake (or whose CPU is taken away) does not hold up work it has not
 * claimed; which thread runs a task is therefore not fixed. A kernel that gives each task a
 * fixed slice of the output, and reduces each output element inside one task in a fixed
 * order, produces the same bits for any thread count and any assignment.
 *
 * Waiting: after a run, workers spin for CAIRN_POOL_SPIN_US microseconds (default 200; 0
 * sleeps at once) and then sleep on a futex, so back-to-back runs (decode) cost a few
 * microseconds and an idle pool costs no CPU. A run allocates nothing.
 *
 * Thread-safety: one run at a time per pool (the engine thread owns the pool). Starting a
 * run while another is in flight — from a second thread, or from inside a task (nested
 * run) — is a programming error and aborts via CAIRN_ASSERT. Different pools are
 * independent.
 */
#ifndef CAIRN_THREAD_POOL_H
#define CAIRN_THREAD_POOL_H

#include "cairn/common.h"

typedef struct cairn_thread_pool cairn_thread_pool_t;
typedef void (*cairn_task_fn)(void *ctx, int task, int n_tasks);

/* n_threads >= 1 counts the caller; 1 means no worker threads. Returns CAIRN_EINVAL for
 * n_threads outside [1, 1024], CAIRN_ENOMEM if an allocation fails, CAIRN_EEXHAUSTED if a
 * thread cannot be started; on error nothing is leaked and *out is NULL. */
int cairn_thread_pool_create(int n_threads, cairn_thread_pool_t **out);
/* Stops and joins the workers and frees the pool. NULL is a no-op. Not during a run. */
void cairn_thread_pool_destroy(cairn_thread_pool_t *tp);
/* Number of participants (caller included); 1 for a NULL pool. */
int cairn_thread_pool_size(const cairn_thread_pool_t *tp);
/* Runs fn over n_tasks tasks and returns when all are done; tp may be NULL (runs inline).
 * Any participant may run any task (the caller always takes part); n_tasks <= 0 is a
 * no-op. Memory written by the tasks is visible to the caller on return. Cost: a few
 * cache-line transfers per task plus, when workers sleep, one futex wake. */
void cairn_thread_pool_run(cairn_thread_pool_t *tp, cairn_task_fn fn, void *ctx, int n_tasks);

#endif
