/* Tests for the shared helpers: allocation failure injection and knob precedence. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "cairn/common.h"

static void test_alloc_fail_after(void **state)
{
    (void)state;
    cairn_alloc_fail_after(2, false);
    void *a = cairn_malloc(8), *b = cairn_malloc(8), *c = cairn_malloc(8), *d = cairn_malloc(8);
    assert_non_null(a);
    assert_non_null(b);
    assert_null(c);      /* the third call fails */
    assert_non_null(d);  /* not sticky: later calls succeed */
    cairn_free(a); cairn_free(b); cairn_free(d);
    cairn_alloc_fail_after(0, true);
    assert_null(cairn_calloc(1, 1));
    assert_null(cairn_strdup("x"));
    cairn_alloc_fail_after(-1, false);
    char *s = cairn_strdup("abc");
    assert_string_equal(s, "abc");
    cairn_free(s);
}

static int warnings;
static void count_warn(cairn_log_level_t level, const char *msg, void *user)
{
    (void)user;
    if (level == CAIRN_LOG_WARN && strstr(msg, "CAIRN_TEST_KNOB"))
        warnings++;
}

/* Allocating threads racing one injection: exactly the chosen allocation fails, once. A
 * countdown read and decremented in two steps lets two threads pass the same count (then
 * none or two allocations fail). Two threads (the machine has two cores) spin until a
 * round starts and then allocate as fast as they can, so both are running when the
 * countdown, set to the middle of the round, reaches zero. */
#define RACE_THREADS 2
#define RACE_ROUNDS 150
#define RACE_ALLOCS 500

static atomic_int race_round, race_done, race_nulls;

static void *alloc_racer(void *arg)
{
    (void)arg;
    for (int r = 1; r <= RACE_ROUNDS; r++) {
        while (atomic_load(&race_round) < r)
            ; /* spinning, not yielding: both must be running when the round starts */
        for (int i = 0; i < RACE_ALLOCS; i++) {
            void *p = cairn_malloc(8);
            if (!p)
                atomic_fetch_add(&race_nulls, 1);
            cairn_free(p);
        }
        atomic_fetch_add(&race_done, 1);
    }
    return NULL;
}

static void test_alloc_fail_after_concurrent(void **state)
{
    (void)state;
    atomic_store(&race_round, 0);
    pthread_t th[RACE_THREADS];
    for (int t = 0; t < RACE_THREADS; t++)
        assert_int_equal(pthread_create(&th[t], NULL, alloc_racer, NULL), 0);
    int wrong = 0, first_wrong = -1, first_nulls = 0;
    for (int r = 1; r <= RACE_ROUNDS; r++) {
        atomic_store(&race_nulls, 0);
        atomic_store(&race_done, 0);
        cairn_alloc_fail_after(RACE_ALLOCS / 2 + r % 64, false);
        atomic_store(&race_round, r);
        while (atomic_load(&race_done) < RACE_THREADS)
            sched_yield();
        cairn_alloc_fail_after(-1, false);
        int n = atomic_load(&race_nulls);
        if (n != 1 && wrong++ == 0) {
            first_wrong = r;
            first_nulls = n;
        }
    }
    for (int t = 0; t < RACE_THREADS; t++)
        pthread_join(th[t], NULL);
    if (wrong)
        fprintf(stderr, "%d of %d rounds failed a wrong number of allocations (round %d: %d)\n",
                wrong, RACE_ROUNDS, first_wrong, first_nulls);
    assert_int_equal(wrong, 0);
}

static void test_knob_precedence(void **state)
{
    (void)state;
    cairn_log_set_handler(count_warn, NULL);
    unsetenv("CAIRN_TEST_KNOB");
    assert_int_equal(cairn_knob_int("CAIRN_TEST_KNOB", false, 5, 7, 0, 100), 7);
    assert_int_equal(cairn_knob_int("CAIRN_TEST_KNOB", true, 5, 7, 0, 100), 5);
    setenv("CAIRN_TEST_KNOB", "42", 1);
    assert_int_equal(cairn_knob_int("CAIRN_TEST_KNOB", true, 5, 7, 0, 100), 42);
    setenv("CAIRN_TEST_KNOB", "4x2", 1);
    assert_int_equal(cairn_knob_int("CAIRN_TEST_KNOB", true, 5, 7, 0, 100), 5);
    assert_int_equal(warnings, 1);
    setenv("CAIRN_TEST_KNOB", "1000", 1); /* out of range */
    assert_int_equal(cairn_knob_int("CAIRN_TEST_KNOB", false, 5, 7, 0, 100), 7);
    assert_int_equal(warnings, 2);
    setenv("CAIRN_TEST_KNOB", "off", 1);
    assert_false(cairn_knob_bool("CAIRN_TEST_KNOB", true, true, true));
    setenv("CAIRN_TEST_KNOB", "maybe", 1);
    assert_true(cairn_knob_bool("CAIRN_TEST_KNOB", false, false, true));
    assert_int_equal(warnings, 3);
    unsetenv("CAIRN_TEST_KNOB");
    cairn_log_set_handler(NULL, NULL);
}

static void test_strerror(void **state)
{
    (void)state;
    assert_string_equal(cairn_strerror(CAIRN_EEXHAUSTED), "pool exhausted");
    assert_string_equal(cairn_strerror(12345), "unknown error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_fail_after),
        cmocka_unit_test(test_alloc_fail_after_concurrent),
        cmocka_unit_test(test_knob_precedence),
        cmocka_unit_test(test_strerror),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
