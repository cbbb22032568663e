/*
 * thread_pool.h — a fixed pool of worker threads that runs one parallel-for at a time.
 *
 * cairn_thread_pool_run(tp, fn, ctx, n_tasks) calls fn(ctx, task, n_tasks) for every task
 * in [0, n_tasks) across the workers and the calling thread, and returns when all are done.
 * Tasks are handed out statically (task i always covers the same work), so a kernel that
 * splits its output by task produces the same bits for any thread count: each output
 * element is reduced by exactly one task in a fixed order.
 *
 * Thread-safety: one run at a time per pool (the engine thread owns the pool).
 */
#ifndef CAIRN_THREAD_POOL_H
#define CAIRN_THREAD_POOL_H

#include "cairn/common.h"

typedef struct cairn_thread_pool cairn_thread_pool_t;
typedef void (*cairn_task_fn)(void *ctx, int task, int n_tasks);

/* n_threads >= 1 counts the caller; 1 means no worker threads. */
int cairn_thread_pool_create(int n_threads, cairn_thread_pool_t **out);
void cairn_thread_pool_destroy(cairn_thread_pool_t *tp);
int cairn_thread_pool_size(const cairn_thread_pool_t *tp);
/* Runs fn over n_tasks tasks; tp may be NULL (runs inline). */
void cairn_thread_pool_run(cairn_thread_pool_t *tp, cairn_task_fn fn, void *ctx, int n_tasks);

#endif
