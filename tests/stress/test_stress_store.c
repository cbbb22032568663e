/*
 * test_stress_store.c — the cache tier's stores under concurrent use (the store contract says
 * every op but destroy is thread-safe: restore and capture move to I/O threads, and an
 * asynchronous remote store will call back from its own).
 *
 * The storm: writers put the blocks of a few chains front to back (capture-like), readers
 * walk the same chains with chain_length, prefetch and get until the first miss
 * (restore-like) and compare every payload they get with the one its hash was written with,
 * and a maintenance worker asks contains and stats, walks the index, verifies, prunes and
 * now and then clears — all at once, on blocks that a small quota keeps evicting.
 *   1. one filesystem store, every worker on it;
 *   2. two filesystem stores over one directory in one process (each with its own index,
 *      writer thread and quota view: what two `cairn serve` share), workers split between
 *      them;
 *   3. two processes over one directory (this test re-run as children), and a third
 *      killed with SIGKILL in the middle of its storm;
 *   4. the in-memory store (the test double engines share in tests).
 * What must hold afterwards: no worker saw a wrong payload or an error other than a miss;
 * no corruption and no write error was counted; after a flush every indexed object
 * verifies, the store holds at most its quota; reopening the directory finds no temp file
 * of a dead writer and nothing invalid.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cairn/tier_store.h"
#include "stress/stress.h"
#include "tier/mem/mem_store.h"
#include "tier/tier_test_util.h"

#define N_CHAINS 6
#define CHAIN_LEN 10
/* Header + tokens + layer sizes + checksum + payload: the size of one object on disk. */
#define OBJ_BYTES (152 + 4 * T_TOKENS + 8 * T_LAYERS + 16 + T_PAYLOAD)
#define QUOTA_OBJECTS 24 /* of N_CHAINS * CHAIN_LEN = 60: eviction never stops */
#define STORM_MS 3000

static stress_cfg_t g_cfg;

typedef struct {
    cairn_tier_store_t *store[2]; /* workers alternate when there are two */
    int n_stores;
    bool maintenance_clear;       /* the maintenance worker may clear (not with a mem store cap) */
    atomic_long puts, hits, misses, verified;
} storm_t;

static void *dest_buf(void *user, size_t size) { return size == T_PAYLOAD ? user : NULL; }

static long writer(storm_t *st, cairn_tier_store_t *s, uint64_t *rng)
{
    static _Thread_local uint8_t pay[T_PAYLOAD];
    int32_t tk[T_TOKENS];
    uint32_t chain = 1 + stress_below(rng, N_CHAINS);
    size_t n = 1 + stress_below(rng, CHAIN_LEN);
    long bad = 0;
    for (size_t i = 0; i < n; i++) {
        cairn_tier_object_t o;
        t_object(chain, i, &o, tk, pay);
        bool queued = false;
        int rc = cairn_tier_store_put(s, &o, stress_below(rng, 2) ? 20 : 0, &queued);
        if (rc == CAIRN_EEXHAUSTED)
            break; /* no room now: a capture stops at the first block it cannot put */
        if (rc) {
            fprintf(stderr, "put chain %u block %zu: %s\n", chain, i, cairn_strerror(rc));
            bad++;
            break;
        }
        atomic_fetch_add(&st->puts, queued);
    }
    if (stress_below(rng, 16) == 0)
        cairn_tier_store_flush(s);
    return bad;
}

static long reader(storm_t *st, cairn_tier_store_t *s, uint64_t *rng)
{
    static _Thread_local uint8_t want[T_PAYLOAD], got[T_PAYLOAD];
    int32_t tk[T_TOKENS];
    cairn_tier_key_t keys[CHAIN_LEN];
    uint32_t chain = 1 + stress_below(rng, N_CHAINS);
    t_chain(chain, CHAIN_LEN, keys, NULL);
    size_t expect = cairn_tier_store_chain_length(s, keys, CHAIN_LEN);
    if (stress_below(rng, 2))
        cairn_tier_store_prefetch(s, keys, expect < CHAIN_LEN ? expect + 1 : expect);
    long bad = 0;
    /* Like the restore walk: past the expected length too (another writer may have added
     * more), stopping at the first miss. */
    for (size_t i = 0; i < CHAIN_LEN; i++) {
        cairn_tier_object_t o;
        t_object(chain, i, &o, tk, want);
        memset(got, 0, sizeof got);
        int rc = cairn_tier_store_get(s, &o, dest_buf, got);
        if (rc == CAIRN_ENOENT) {
            atomic_fetch_add(&st->misses, 1);
            break;
        }
        if (rc) {
            fprintf(stderr, "get chain %u block %zu: %s\n", chain, i, cairn_strerror(rc));
            bad++;
            break;
        }
        if (memcmp(got, want, T_PAYLOAD)) {
            fprintf(stderr, "get chain %u block %zu: payload differs from what was put\n", chain, i);
            bad++;
            break;
        }
        atomic_fetch_add(&st->hits, 1);
    }
    return bad;
}

static int count_entry(void *user, const cairn_tier_entry_t *e)
{
    (*(size_t *)user)++;
    return e->n_tokens != T_TOKENS; /* stop (and be noticed) on a wrong entry */
}

static long maintainer(storm_t *st, cairn_tier_store_t *s, uint64_t *rng)
{
    long bad = 0;
    cairn_tier_key_t keys[CHAIN_LEN];
    t_chain(1 + stress_below(rng, N_CHAINS), CHAIN_LEN, keys, NULL);
    (void)cairn_tier_store_contains(s, &keys[stress_below(rng, CHAIN_LEN)]);
    cairn_tier_stats_t ss;
    cairn_tier_store_stats(s, &ss);
    if (ss.corruptions || ss.write_errors) {
        fprintf(stderr, "maintenance: %llu corruptions, %llu write errors\n",
                (unsigned long long)ss.corruptions, (unsigned long long)ss.write_errors);
        bad++;
    }
    size_t n = 0;
    int rc = cairn_tier_store_foreach(s, count_entry, &n);
    if (rc && rc != CAIRN_EUNSUPPORTED)
        bad++;
    switch (stress_below(rng, 8)) {
    case 0: {
        size_t checked = 0, nbad = 0;
        rc = cairn_tier_store_verify(s, &checked, &nbad);
        if (rc == CAIRN_OK) {
            atomic_fetch_add(&st->verified, (long)checked);
            if (nbad) {
                fprintf(stderr, "maintenance: verify found %zu invalid of %zu\n", nbad, checked);
                bad++;
            }
        } else if (rc != CAIRN_EUNSUPPORTED) {
            bad++;
        }
        break;
    }
    case 1:
        rc = cairn_tier_store_prune(s, (uint64_t)stress_below(rng, QUOTA_OBJECTS) * OBJ_BYTES, NULL);
        bad += rc && rc != CAIRN_EUNSUPPORTED;
        break;
    case 2:
        if (st->maintenance_clear && stress_below(rng, 4) == 0) {
            rc = cairn_tier_store_clear(s, NULL);
            bad += rc && rc != CAIRN_EUNSUPPORTED;
        }
        break;
    default:
        break;
    }
    stress_sleep_ms(1);
    return bad;
}

/* Worker w: 0 maintains, odd ones write, even ones read; store by w / 2 alternation. */
static long storm_worker(void *ctx, int w, uint64_t *rng, double deadline_ms)
{
    storm_t *st = ctx;
    cairn_tier_store_t *s = st->store[(w / 2) % st->n_stores];
    long bad = 0;
    while (stress_now_ms() < deadline_ms && bad == 0) {
        if (w == 0)
            bad += maintainer(st, s, rng);
        else if (w % 2)
            bad += writer(st, s, rng);
        else
            bad += reader(st, s, rng);
    }
    return bad;
}

static cairn_cold_store_t *open_store(const char *root)
{
    cairn_cold_config_t c = t_config(root, 0, (uint64_t)QUOTA_OBJECTS * OBJ_BYTES);
    c.queue_depth = 4;
    cairn_cold_store_t *s = NULL;
    return cairn_cold_store_create(&c, &s) == CAIRN_OK ? s : NULL;
}

/* After a storm over fs stores: quiet, flushed, every object valid, within quota. */
static void check_quiet_fs(cairn_cold_store_t *s)
{
    cairn_cold_store_flush(s);
    cairn_tier_stats_t ss;
    cairn_cold_store_stats(s, &ss);
    assert_int_equal(ss.corruptions, 0);
    assert_int_equal(ss.write_errors, 0);
    assert_int_equal(ss.queue_len, 0);
    assert_true(ss.used_bytes <= ss.quota_bytes);
    size_t checked = 99, bad = 99;
    assert_int_equal(cairn_cold_store_verify(s, &checked, &bad), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(checked, ss.objects);
}

/* Reopens root: nothing invalid was left, no temp file of a dead writer remains. */
static void check_reopen(const char *root)
{
    cairn_cold_store_t *s = open_store(root);
    assert_non_null(s);
    cairn_tier_stats_t ss;
    cairn_cold_store_stats(s, &ss);
    assert_int_equal(ss.corruptions, 0); /* open deletes and counts invalid objects */
    assert_int_equal(t_count_files(root, ".tmp."), 0);
    size_t checked = 0, bad = 99;
    assert_int_equal(cairn_cold_store_verify(s, &checked, &bad), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(checked, t_count_files(root, "") - 0);
    cairn_cold_store_destroy(s);
}

static void report(const char *what, const storm_t *st)
{
    fprintf(stderr, "%s: %ld objects queued, %ld blocks read back, %ld misses, %ld verified\n",
            what, atomic_load(&st->puts), atomic_load(&st->hits), atomic_load(&st->misses),
            atomic_load(&st->verified));
}

static void test_one_fs_store(void **state)
{
    char *root = t_mkroot();
    cairn_cold_store_t *s = open_store(root);
    assert_non_null(s);
    storm_t st = {.store = {cairn_cold_store_tier(s)}, .n_stores = 1, .maintenance_clear = true};
    assert_int_equal(stress_run(&g_cfg, 7, storm_worker, &st), 0);
    report("one fs store", &st);
    assert_true(atomic_load(&st.puts) > 0);
    assert_true(atomic_load(&st.hits) > 0);
    cairn_tier_stats_t ss;
    cairn_cold_store_stats(s, &ss);
    assert_true(ss.evictions > 0); /* the quota really was in play */
    check_quiet_fs(s);
    cairn_cold_store_destroy(s);
    check_reopen(root);
    t_rmrf(root);
    free(root);
}

static void test_two_fs_stores_one_dir(void **state)
{
    char *root = t_mkroot();
    cairn_cold_store_t *a = open_store(root), *b = open_store(root);
    assert_non_null(a);
    assert_non_null(b);
    storm_t st = {.store = {cairn_cold_store_tier(a), cairn_cold_store_tier(b)}, .n_stores = 2,
                  .maintenance_clear = true};
    assert_int_equal(stress_run(&g_cfg, 9, storm_worker, &st), 0);
    report("two fs stores", &st);
    assert_true(atomic_load(&st.hits) > 0);
    /* Each store's counters and objects; the other one may have removed files under it,
     * which its own verify then counts as gone (ENOENT), never as invalid. */
    check_quiet_fs(a);
    check_quiet_fs(b);
    cairn_cold_store_destroy(a);
    cairn_cold_store_destroy(b);
    check_reopen(root);
    t_rmrf(root);
    free(root);
}

/* The child mode: one store over root, the storm for ms, exit 0 when nothing went wrong. */
static int child_main(const char *root, int ms, uint64_t seed)
{
    stress_cfg_t c = {.seed = seed, .duration_ms = ms};
    cairn_cold_store_t *s = open_store(root);
    if (!s)
        return 3;
    storm_t st = {.store = {cairn_cold_store_tier(s)}, .n_stores = 1, .maintenance_clear = true};
    long bad = stress_run(&c, 5, storm_worker, &st);
    cairn_cold_store_flush(s);
    cairn_tier_stats_t ss;
    cairn_cold_store_stats(s, &ss);
    cairn_cold_store_destroy(s);
    if (bad || ss.corruptions || ss.write_errors) {
        fprintf(stderr, "child %d: %ld failures, %llu corruptions, %llu write errors\n", (int)getpid(),
                bad, (unsigned long long)ss.corruptions, (unsigned long long)ss.write_errors);
        return 1;
    }
    return 0;
}

static void test_two_processes_one_dir(void **state)
{
    char *root = t_mkroot();
    char ms[32], ms_long[32], seed[3][32];
    snprintf(ms, sizeof ms, "%d", g_cfg.duration_ms);
    snprintf(ms_long, sizeof ms_long, "%d", g_cfg.duration_ms * 10);
    pid_t pids[3];
    for (int i = 0; i < 3; i++) {
        snprintf(seed[i], sizeof seed[i], "%llu", (unsigned long long)(g_cfg.seed + 101u * (unsigned)i));
        char *argv[] = {"/proc/self/exe", "--child", root, i == 2 ? ms_long : ms, seed[i], NULL};
        pids[i] = stress_spawn(argv, -1);
        assert_true(pids[i] > 0);
    }
    /* The third is killed in the middle of its storm, whatever it is doing. */
    stress_sleep_ms(g_cfg.duration_ms / 3 + (int)(g_cfg.seed % (uint64_t)(g_cfg.duration_ms / 3 + 1)));
    kill(pids[2], SIGKILL);
    for (int i = 0; i < 3; i++) {
        bool timed_out;
        int st = stress_reap(pids[i], 120000, &timed_out);
        assert_false(timed_out);
        if (i < 2) {
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                fprintf(stderr, "child %d: wait status 0x%x\n", i, st);
            assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        } else {
            assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        }
    }
    /* The killed writer's temp files are removed by the next open; nothing invalid. */
    check_reopen(root);
    t_rmrf(root);
    free(root);
}

static void test_mem_store(void **state)
{
    tier_mem_config_t mc = {.max_objects = QUOTA_OBJECTS};
    cairn_tier_store_t *m = NULL;
    assert_int_equal(tier_mem_create(&mc, &m), 0);
    storm_t st = {.store = {m}, .n_stores = 1, .maintenance_clear = true};
    assert_int_equal(stress_run(&g_cfg, 7, storm_worker, &st), 0);
    report("mem store", &st);
    assert_true(atomic_load(&st.hits) > 0);
    cairn_tier_stats_t ss;
    cairn_tier_store_stats(m, &ss);
    assert_int_equal(ss.corruptions, 0);
    assert_true(ss.objects <= QUOTA_OBJECTS);
    cairn_tier_store_destroy(m);
}

/* Warnings and errors of the stores (a removed invalid object, a failed write) name the
 * file and the reason: they go to stderr so a failing storm says what happened. */
static void log_stderr(cairn_log_level_t level, const char *msg, void *user)
{
    (void)user;
    if (level >= CAIRN_LOG_WARN)
        fprintf(stderr, "[pid %d] %s\n", (int)getpid(), msg);
}

int main(int argc, char **argv)
{
    cairn_log_set_handler(log_stderr, NULL);
    if (argc == 5 && !strcmp(argv[1], "--child"))
        return child_main(argv[2], atoi(argv[3]), strtoull(argv[4], NULL, 10));
    stress_config(&g_cfg, "store", STORM_MS);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_fs_store),
        cmocka_unit_test(test_two_fs_stores_one_dir),
        cmocka_unit_test(test_two_processes_one_dir),
        cmocka_unit_test(test_mem_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
