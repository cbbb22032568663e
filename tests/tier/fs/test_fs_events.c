/*
 * Tests for a model directory's event counters (src/tier/fs/fs_events.c, events.json):
 * parsing (each malformed case refused with its reason), updates that sum by name and keep
 * names this build does not know, concurrent updates from several processes (none lost),
 * a failed write leaving the old file, an invalid file replaced.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "tier/tier_test_util.h"

static int parse(const char *text, cairn_cold_events_t *e, char *err)
{
    return cairn_cold_events_parse(text, strlen(text), e, err, 160);
}

static void test_parse(void **state)
{
    (void)state;
    static cairn_cold_events_t e;
    char err[160];
    assert_int_equal(parse("{\"format\":\"cairn-cold-events\",\"version\":1,\"processes\":2,\"updated\":7,"
                           "\"counters\":{\"restore_lookups\":3,\"future_counter\":9}}",
                           &e, err),
                     CAIRN_OK);
    assert_int_equal(e.processes, 2);
    assert_int_equal(e.updated_s, 7);
    assert_int_equal(e.n, 2);
    assert_int_equal(cairn_cold_events_get(&e, "restore_lookups"), 3);
    assert_int_equal(cairn_cold_events_get(&e, "future_counter"), 9);
    assert_int_equal(cairn_cold_events_get(&e, "absent"), 0);
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"not json", "not valid JSON"},
        {"[1]", "not a JSON object"},
        {"{\"format\":\"x\",\"version\":1,\"processes\":1,\"updated\":1,\"counters\":{}}", "format"},
        {"{\"format\":\"cairn-cold-events\",\"version\":2,\"processes\":1,\"updated\":1,\"counters\":{}}", "version"},
        {"{\"format\":\"cairn-cold-events\",\"version\":1,\"processes\":-1,\"updated\":1,\"counters\":{}}",
         "processes"},
        {"{\"format\":\"cairn-cold-events\",\"version\":1,\"processes\":1,\"updated\":1.5,\"counters\":{}}",
         "updated"},
        {"{\"format\":\"cairn-cold-events\",\"version\":1,\"processes\":1,\"updated\":1,\"counters\":[]}",
         "counters is not an object"},
        {"{\"format\":\"cairn-cold-events\",\"version\":1,\"processes\":1,\"updated\":1,\"counters\":{\"A\":1}}",
         "name"},
        {"{\"format\":\"cairn-cold-events\",\"version\":1,\"processes\":1,\"updated\":1,\"counters\":{\"a\":1,\"a\":2}}",
         "twice"},
        {"{\"format\":\"cairn-cold-events\",\"version\":1,\"processes\":1,\"updated\":1,\"counters\":{\"a\":1e300}}",
         "whole number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(parse(bad[i].text, &e, err), CAIRN_EFORMAT);
        if (!strstr(err, bad[i].why))
            fail_msg("case %zu: \"%s\" does not name \"%s\"", i, err, bad[i].why);
        assert_int_equal(e.n, 0);
    }
    /* 65 counters: one too many. */
    char big[8192];
    size_t n = (size_t)snprintf(big, sizeof big,
                                "{\"format\":\"cairn-cold-events\",\"version\":1,\"processes\":1,\"updated\":1,"
                                "\"counters\":{");
    for (int i = 0; i <= CAIRN_COLD_EVENTS_MAX; i++)
        n += (size_t)snprintf(big + n, sizeof big - n, "%s\"c%d\":%d", i ? "," : "", i, i);
    snprintf(big + n, sizeof big - n, "}}");
    assert_int_equal(parse(big, &e, err), CAIRN_EFORMAT);
    assert_non_null(strstr(err, "too many"));
    assert_int_equal(cairn_cold_events_set(&e, "Bad-Name", 1), CAIRN_EINVAL);
}

static void test_add_sums_and_keeps(void **state)
{
    (void)state;
    char *root = t_mkroot();
    static cairn_cold_events_t d, got;
    char err[160];
    assert_int_equal(cairn_cold_events_read(root, &got, err, sizeof err), CAIRN_ENOENT);
    memset(&d, 0, sizeof d);
    d.processes = 1;
    d.updated_s = 100;
    assert_int_equal(cairn_cold_events_set(&d, "restored_blocks", 44), CAIRN_OK);
    assert_int_equal(cairn_cold_events_set(&d, "only_old", 5), CAIRN_OK);
    assert_int_equal(cairn_cold_events_add(root, &d), CAIRN_OK);
    memset(&d, 0, sizeof d);
    d.processes = 1;
    d.updated_s = 200;
    assert_int_equal(cairn_cold_events_set(&d, "restored_blocks", 6), CAIRN_OK);
    assert_int_equal(cairn_cold_events_set(&d, "only_new", 1), CAIRN_OK);
    assert_int_equal(cairn_cold_events_add(root, &d), CAIRN_OK);
    assert_int_equal(cairn_cold_events_read(root, &got, err, sizeof err), CAIRN_OK);
    assert_int_equal(got.processes, 2);
    assert_int_equal(got.updated_s, 200);
    assert_int_equal(cairn_cold_events_get(&got, "restored_blocks"), 50);
    assert_int_equal(cairn_cold_events_get(&got, "only_old"), 5); /* a name the update lacks is kept */
    assert_int_equal(cairn_cold_events_get(&got, "only_new"), 1);
    t_rmrf(root);
    free(root);
}

/* Four processes adding 25 times each at once: every update counted. */
static void test_concurrent_processes(void **state)
{
    (void)state;
    char *root = t_mkroot();
    const int procs = 4, adds = 25;
    for (int p = 0; p < procs; p++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            cairn_cold_events_t *d = calloc(1, sizeof *d);
            d->processes = 1;
            int bad = !d || cairn_cold_events_set(d, "capture_walks", 3);
            for (int i = 0; i < adds && !bad; i++)
                bad = cairn_cold_events_add(root, d) != CAIRN_OK;
            _exit(bad);
        }
    }
    for (int p = 0; p < procs; p++) {
        int st = 0;
        assert_true(wait(&st) > 0);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    static cairn_cold_events_t got;
    char err[160];
    assert_int_equal(cairn_cold_events_read(root, &got, err, sizeof err), CAIRN_OK);
    assert_int_equal(got.processes, (uint64_t)(procs * adds));
    assert_int_equal(cairn_cold_events_get(&got, "capture_walks"), (uint64_t)(3 * procs * adds));
    t_rmrf(root);
    free(root);
}

static int g_fail_rename;

static int io_hook(const char *op, const char *path, void *user)
{
    (void)user;
    return g_fail_rename && !strcmp(op, "rename") && strstr(path, "events.json") ? -EIO : 0;
}

/* A failed write leaves the previous file; an invalid file is replaced by the next update. */
static void test_failure_and_invalid_file(void **state)
{
    (void)state;
    char *root = t_mkroot();
    static cairn_cold_events_t d, got;
    char err[160], path[600];
    memset(&d, 0, sizeof d);
    d.processes = 1;
    assert_int_equal(cairn_cold_events_set(&d, "corruptions", 1), CAIRN_OK);
    assert_int_equal(cairn_cold_events_add(root, &d), CAIRN_OK);
    cairn_io_set_hook(io_hook, NULL);
    g_fail_rename = 1;
    assert_int_equal(cairn_cold_events_add(root, &d), CAIRN_EIO);
    g_fail_rename = 0;
    cairn_io_set_hook(NULL, NULL);
    assert_int_equal(cairn_cold_events_read(root, &got, err, sizeof err), CAIRN_OK);
    assert_int_equal(got.processes, 1);
    snprintf(path, sizeof path, "%s/.events.tmp", root);
    assert_int_equal(access(path, F_OK), -1); /* no temporary file left */
    snprintf(path, sizeof path, "%s/events.json", root);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"format\":\"cairn-cold-events\",\"version\":1,\"processes\":", f); /* cut short */
    fclose(f);
    assert_int_equal(cairn_cold_events_read(root, &got, err, sizeof err), CAIRN_EFORMAT);
    assert_int_equal(cairn_cold_events_add(root, &d), CAIRN_OK);
    assert_int_equal(cairn_cold_events_read(root, &got, err, sizeof err), CAIRN_OK);
    assert_int_equal(got.processes, 1);
    assert_int_equal(cairn_cold_events_get(&got, "corruptions"), 1);
    t_rmrf(root);
    free(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_add_sums_and_keeps),
        cmocka_unit_test(test_concurrent_processes),
        cmocka_unit_test(test_failure_and_invalid_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
