/*
 * test_util.c — the shared helpers of src/util/util.h: checked array growth (doubling,
 * minimum capacity, overflow and allocation failure leave the array unchanged), the
 * message formatter, path joining, hex digits and the monotonic clock.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "util/util.h"

static void test_grow_array(void **state)
{
    (void)state;
    int *a = NULL;
    size_t cap = 0;
    assert_int_equal(cairn_grow_array((void **)&a, &cap, 3, sizeof(int), 16), CAIRN_OK);
    assert_int_equal(cap, 16);
    for (int i = 0; i < 16; i++)
        a[i] = i;
    assert_int_equal(cairn_grow_array((void **)&a, &cap, 16, sizeof(int), 16), CAIRN_OK);
    assert_int_equal(cap, 16); /* no growth needed */
    assert_int_equal(cairn_grow_array((void **)&a, &cap, 40, sizeof(int), 16), CAIRN_OK);
    assert_int_equal(cap, 64); /* doubled until it holds 40 */
    for (int i = 0; i < 16; i++)
        assert_int_equal(a[i], i); /* contents kept */
    /* need * elem overflows: refused, nothing changes */
    int *before = a;
    assert_int_equal(cairn_grow_array((void **)&a, &cap, SIZE_MAX / 2, sizeof(int), 16), CAIRN_ENOMEM);
    assert_ptr_equal(a, before);
    assert_int_equal(cap, 64);
    /* an allocation failure: nothing changes */
    cairn_alloc_fail_after(0, false);
    assert_int_equal(cairn_grow_array((void **)&a, &cap, 100, sizeof(int), 16), CAIRN_ENOMEM);
    cairn_alloc_fail_after(-1, false);
    assert_ptr_equal(a, before);
    assert_int_equal(cap, 64);
    cairn_free(a);
}

static void test_grow_array_int(void **state)
{
    (void)state;
    char *a = NULL;
    int cap = 0;
    assert_int_equal(cairn_grow_array_int((void **)&a, &cap, 65, 1, 64), CAIRN_OK);
    assert_int_equal(cap, 128);
    assert_int_equal(cairn_grow_array_int((void **)&a, &cap, -1, 1, 64), CAIRN_EINVAL);
    assert_int_equal(cap, 128);
    cairn_free(a);
}

static void test_errf_path_hex(void **state)
{
    (void)state;
    char buf[8];
    cairn_errf(buf, sizeof buf, "%s=%d", "abc", 12345);
    assert_string_equal(buf, "abc=123"); /* truncated, terminated */
    cairn_errf(NULL, 0, "ignored %d", 1);  /* no-op */
    char *p = cairn_path_join("/a/b", "c.json");
    assert_string_equal(p, "/a/b/c.json");
    cairn_free(p);
    const char *digits = "0123456789abcdefABCDEF";
    for (size_t i = 0; digits[i]; i++)
        assert_int_equal(cairn_hexval(digits[i]), i < 16 ? (int)i : (int)i - 6);
    assert_int_equal(cairn_hexval('g'), -1);
    assert_int_equal(cairn_hexval('/'), -1);
    assert_int_equal(cairn_hexval(0), -1);
    double t0 = cairn_now_seconds(), m0 = cairn_now_ms();
    assert_true(cairn_now_seconds() >= t0);
    assert_true(cairn_now_ms() >= m0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grow_array),
        cmocka_unit_test(test_grow_array_int),
        cmocka_unit_test(test_errf_path_hex),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
