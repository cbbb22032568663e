/* Tests for the thread pool: every task runs exactly once, a participant stuck in a task
 * does not hold up the tasks it has not claimed (they are claimed from a shared counter),
 * runs are repeatable back to back (spinning and sleeping workers), and create fails
 * cleanly under allocation failure injection (ASan's leak checker watches for leaks). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include <cmocka.h>

#include "util/thread_pool.h"

#define MAX_TASKS 257

struct count_ctx {
    atomic_int hits[MAX_TASKS];
    atomic_int seen_n_tasks_bad;
};

static void count_task(void *p, int task, int n_tasks)
{
    struct count_ctx *c = p;
    if (task < 0 || task >= n_tasks || n_tasks > MAX_TASKS)
        atomic_fetch_add(&c->seen_n_tasks_bad, 1);
    else
        atomic_fetch_add(&c->hits[task], 1);
}

static void check_run(cairn_thread_pool_t *tp, int n_tasks)
{
    struct count_ctx *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    cairn_thread_pool_run(tp, count_task, c, n_tasks);
    assert_int_equal(atomic_load(&c->seen_n_tasks_bad), 0);
    for (int t = 0; t < MAX_TASKS; t++)
        assert_int_equal(atomic_load(&c->hits[t]), t < n_tasks ? 1 : 0);
    free(c);
}

static void test_every_task_once(void **state)
{
    (void)state;
    static const int sizes[] = {1, 2, 3, 4, 8};
    for (size_t k = 0; k < CAIRN_ARRAY_LEN(sizes); k++) {
        const int n = sizes[k];
        cairn_thread_pool_t *tp = NULL;
        assert_int_equal(cairn_thread_pool_create(n, &tp), CAIRN_OK);
        assert_int_equal(cairn_thread_pool_size(tp), n);
        int counts[] = {0, 1, 2, 3, 5, 7, 64, MAX_TASKS};
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(counts); i++)
            check_run(tp, counts[i]);
        cairn_thread_pool_destroy(tp);
    }
    check_run(NULL, 9); /* NULL pool runs inline */
    assert_int_equal(cairn_thread_pool_size(NULL), 1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The first task claimed waits (up to 5 s) until every other task of the run is done: with a
 * static assignment (participant p runs tasks p, p + size, ...) the tasks it owns could not
 * start and it would time out; with claiming, the other participants take them. */
struct stall_ctx {
    atomic_int first;        /* set by the first task to start */
    atomic_int done_others;  /* tasks other than the stalled one, finished */
    atomic_int timed_out;
};

static void stall_task(void *p, int task, int n_tasks)
{
    (void)task;
    struct stall_ctx *c = p;
    int expected = 0;
    if (atomic_compare_exchange_strong(&c->first, &expected, 1)) {
        const double end = now_s() + 5.0;
        while (atomic_load(&c->done_others) < n_tasks - 1)
            if (now_s() > end) {
                atomic_store(&c->timed_out, 1);
                return;
            }
        return;
    }
    atomic_fetch_add(&c->done_others, 1);
}

static void test_stalled_participant(void **state)
{
    (void)state;
    for (int n = 2; n <= 4; n++) {
        cairn_thread_pool_t *tp = NULL;
        assert_int_equal(cairn_thread_pool_create(n, &tp), CAIRN_OK);
        for (int rep = 0; rep < 20; rep++) {
            struct stall_ctx c = {0};
            cairn_thread_pool_run(tp, stall_task, &c, 4 * n);
            assert_int_equal(atomic_load(&c.timed_out), 0);
            assert_int_equal(atomic_load(&c.done_others), 4 * n - 1);
        }
        cairn_thread_pool_destroy(tp);
    }
}

struct sum_ctx {
    const int *v;
    int n;
    long partial[8];
};

static void sum_task(void *p, int task, int n_tasks)
{
    struct sum_ctx *c = p;
    int lo = (int)((long)c->n * task / n_tasks), hi = (int)((long)c->n * (task + 1) / n_tasks);
    long s = 0;
    for (int i = lo; i < hi; i++)
        s += c->v[i];
    c->partial[task] = s;
}

/* Many back-to-back runs, with and without sleeping between them, see the tasks' writes. */
static void test_repeated_runs_and_sleep(void **state)
{
    (void)state;
    enum { N = 10000 };
    static int v[N];
    for (int i = 0; i < N; i++)
        v[i] = i;
    cairn_thread_pool_t *tp = NULL;
    assert_int_equal(cairn_thread_pool_create(3, &tp), CAIRN_OK);
    for (int rep = 0; rep < 2000; rep++) {
        struct sum_ctx c = {.v = v, .n = N};
        cairn_thread_pool_run(tp, sum_task, &c, 8);
        long s = 0;
        for (int t = 0; t < 8; t++)
            s += c.partial[t];
        assert_int_equal(s, (long)N * (N - 1) / 2);
        if (rep % 500 == 0)
            usleep(20000); /* long enough for the workers to go to sleep on the futex */
    }
    cairn_thread_pool_destroy(tp);
}

static void test_spin_zero_knob(void **state)
{
    (void)state;
    setenv("CAIRN_POOL_SPIN_US", "0", 1); /* always sleep: exercises the futex paths */
    cairn_thread_pool_t *tp = NULL;
    assert_int_equal(cairn_thread_pool_create(2, &tp), CAIRN_OK);
    unsetenv("CAIRN_POOL_SPIN_US");
    for (int rep = 0; rep < 300; rep++)
        check_run(tp, 5);
    for (int rep = 0; rep < 20; rep++) {
        struct stall_ctx c = {0};
        cairn_thread_pool_run(tp, stall_task, &c, 6);
        assert_int_equal(atomic_load(&c.timed_out), 0);
    }
    cairn_thread_pool_destroy(tp);
}

static void test_create_errors(void **state)
{
    (void)state;
    cairn_thread_pool_t *tp = (cairn_thread_pool_t *)&tp;
    assert_int_equal(cairn_thread_pool_create(0, &tp), CAIRN_EINVAL);
    assert_null(tp);
    assert_int_equal(cairn_thread_pool_create(2, NULL), CAIRN_EINVAL);
    /* Fail each allocation of create in turn: an error, no pool, nothing leaked. */
    int failures = 0;
    for (long k = 0; k < 10; k++) {
        cairn_alloc_fail_after(k, false);
        tp = NULL;
        int rc = cairn_thread_pool_create(3, &tp);
        cairn_alloc_fail_after(-1, false);
        if (rc == CAIRN_OK) {
            check_run(tp, 6);
            cairn_thread_pool_destroy(tp);
            break;
        }
        assert_int_equal(rc, CAIRN_ENOMEM);
        assert_null(tp);
        failures++;
    }
    assert_int_equal(failures, 3); /* pool, workers, args */
    cairn_thread_pool_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_task_once),
        cmocka_unit_test(test_stalled_participant),
        cmocka_unit_test(test_repeated_runs_and_sleep),
        cmocka_unit_test(test_spin_zero_knob),
        cmocka_unit_test(test_create_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
