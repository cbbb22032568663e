/* Tests for the thread pool: every task runs exactly once with the static assignment,
 * runs are repeatable back to back (spinning and sleeping workers), and create fails
 * cleanly under allocation failure injection (ASan's leak checker watches for leaks). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include <cmocka.h>

#include "util/thread_pool.h"

#define MAX_TASKS 257

struct count_ctx {
    atomic_int hits[MAX_TASKS];
    atomic_int seen_n_tasks_bad;
    pthread_t who[MAX_TASKS];
};

static void count_task(void *p, int task, int n_tasks)
{
    struct count_ctx *c = p;
    if (task < 0 || task >= n_tasks || n_tasks > MAX_TASKS)
        atomic_fetch_add(&c->seen_n_tasks_bad, 1);
    else {
        atomic_fetch_add(&c->hits[task], 1);
        c->who[task] = pthread_self();
    }
}

static void check_run(cairn_thread_pool_t *tp, int n_tasks)
{
    struct count_ctx *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    cairn_thread_pool_run(tp, count_task, c, n_tasks);
    assert_int_equal(atomic_load(&c->seen_n_tasks_bad), 0);
    for (int t = 0; t < MAX_TASKS; t++)
        assert_int_equal(atomic_load(&c->hits[t]), t < n_tasks ? 1 : 0);
    /* Static assignment: tasks t and t + size run on the same thread; task 0 on the
     * caller. */
    int size = cairn_thread_pool_size(tp);
    if (n_tasks > 0)
        assert_true(pthread_equal(c->who[0], pthread_self()));
    for (int t = size; t < n_tasks; t++)
        assert_true(pthread_equal(c->who[t], c->who[t - size]));
    free(c);
}

static void test_every_task_once(void **state)
{
    (void)state;
    for (int n = 1; n <= 4; n++) {
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
    setenv("CAIRN_POOL_SPIN", "0", 1); /* always sleep: exercises the futex paths */
    cairn_thread_pool_t *tp = NULL;
    assert_int_equal(cairn_thread_pool_create(2, &tp), CAIRN_OK);
    unsetenv("CAIRN_POOL_SPIN");
    for (int rep = 0; rep < 300; rep++)
        check_run(tp, 5);
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
        cmocka_unit_test(test_repeated_runs_and_sleep),
        cmocka_unit_test(test_spin_zero_knob),
        cmocka_unit_test(test_create_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
