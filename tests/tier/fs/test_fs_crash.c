/*
 * Crash test for the cold tier writer: a child process persists blocks and STATE sidecars
 * (of variable sizes) continuously (the queue stays full, so the writer commits groups of
 * up to 8 objects of both kinds) and is killed with SIGKILL at a random moment, over and
 * over (bounded: 120 kills or ~25 s; CAIRN_SANITIZED scales both down). After each kill
 * the store is reopened and must: serve only objects that validate and equal what was
 * written for their key, have removed every leftover temporary file, and keep counting no
 * corruption (a kill can never produce a torn object under a final name).
 */
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "tier/tier_test_util.h"

#define N_BLOCKS 96
#define MAX_KILLS 120
#define MIN_KILLS 100
#define TIME_LIMIT_S 25.0

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The child: writes random blocks of chain 77 forever (evicting under a small quota so
 * unlink and rename interleave too), until killed. */
static void child_main(const char *root, unsigned seed)
{
    size_t obj = 152 + 4 * T_TOKENS + 8 * T_LAYERS + 16 + T_PAYLOAD;
    cairn_cold_config_t c = t_config(root, 0, 48 * obj);
    cairn_cold_store_t *s = NULL;
    if (cairn_cold_store_create(&c, &s))
        _exit(3);
    srand(seed);
    static uint8_t pay[T_PAYLOAD];
    for (;;) {
        size_t i = (size_t)rand() % N_BLOCKS;
        if (rand() % 3 == 0) {
            cairn_tier_object_t o;
            uint8_t lay[T_STATE_LAYOUT];
            t_state(77, i, (uint32_t)(i % 2), &o, lay, pay);
            cairn_tier_store_put(cairn_cold_store_tier(s), &o, 1000, NULL);
            continue;
        }
        cairn_cold_block_t b;
        int32_t tk[T_TOKENS];
        t_block(77, i, &b.hash, &b.parent, tk, pay);
        b.tokens = tk;
        b.n_tokens = T_TOKENS;
        b.payload = pay;
        b.payload_size = T_PAYLOAD;
        cairn_cold_store_enqueue(s, &b, 1000, NULL);
        if (rand() % 8 == 0)
            cairn_cold_store_prune(s, (uint64_t)(rand() % 48) * obj, NULL);
    }
}

static void *to_got(void *user, size_t n)
{
    return n <= T_PAYLOAD ? user : NULL;
}

static void test_kill9_loop(void **state)
{
    (void)state;
    char *root = t_mkroot();
    assert_non_null(root);
    /* Expected content of every block, computed once. */
    static cairn_tier_hash_t hs[N_BLOCKS], ps[N_BLOCKS];
    static int32_t toks[N_BLOCKS][T_TOKENS];
    static uint8_t pays[N_BLOCKS][T_PAYLOAD];
    for (size_t i = 0; i < N_BLOCKS; i++)
        t_block(77, i, &hs[i], &ps[i], toks[i], pays[i]);

    srand(12345);
    double t0 = now_s();
    int kills = 0;
    size_t max_seen = 0, total_served = 0, states_served = 0;
    /* The sanitized build runs the same loop at a third of the kills. */
    const char *san = getenv("CAIRN_SANITIZED");
    const int min_kills = san && san[0] == '1' ? MIN_KILLS / 3 : MIN_KILLS;
    const int max_kills = san && san[0] == '1' ? MAX_KILLS / 3 : MAX_KILLS;
    while (kills < max_kills && (kills < min_kills || now_s() - t0 < TIME_LIMIT_S)) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            child_main(root, (unsigned)kills * 2654435761u);
        usleep((useconds_t)(rand() % 40000));
        kill(pid, SIGKILL);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0));
        kills++;

        cairn_cold_config_t c = t_config(root, 0, 0);
        c.no_writer = true;
        cairn_cold_store_t *s = NULL;
        assert_int_equal(cairn_cold_store_create(&c, &s), CAIRN_OK);
        assert_int_equal(t_count_files(cairn_cold_store_dir(s), ".tmp."), 0);
        cairn_tier_stats_t st;
        cairn_cold_store_stats(s, &st);
        assert_int_equal(st.corruptions, 0);
        size_t served = 0;
        for (size_t i = 0; i < N_BLOCKS; i++) {
            static uint8_t got[T_PAYLOAD];
            bool indexed = cairn_cold_store_contains(s, &hs[i]);
            int rc = cairn_cold_store_read(s, &hs[i], &ps[i], toks[i], T_TOKENS, got, sizeof got);
            assert_true(rc == CAIRN_OK || rc == CAIRN_ENOENT);
            if (rc == CAIRN_OK) {
                assert_memory_equal(got, pays[i], T_PAYLOAD);
                served++;
            } else {
                assert_false(indexed);
            }
        }
        /* Every sidecar present validates and holds what was written for its key. */
        for (size_t i = 0; i < N_BLOCKS; i++) {
            cairn_tier_object_t want;
            uint8_t lay[T_STATE_LAYOUT];
            static uint8_t expect[T_PAYLOAD], got[T_PAYLOAD];
            t_state(77, i, (uint32_t)(i % 2), &want, lay, expect);
            bool indexed = cairn_tier_store_contains(cairn_cold_store_tier(s), &want.key);
            int rc = cairn_tier_store_get(cairn_cold_store_tier(s), &want, to_got, got);
            assert_true(rc == CAIRN_OK || rc == CAIRN_ENOENT);
            if (rc == CAIRN_OK) {
                assert_memory_equal(got, expect, t_state_bytes(i));
                served++;
                states_served++;
            } else {
                assert_false(indexed);
            }
        }
        cairn_cold_store_stats(s, &st);
        assert_int_equal(st.corruptions, 0);
        assert_int_equal(st.hits, served);
        max_seen = served > max_seen ? served : max_seen;
        total_served += served;
        cairn_cold_store_destroy(s);
    }
    print_message("%d kills in %.1f s, up to %zu objects present, %zu reads validated (%zu sidecars)\n",
                  kills, now_s() - t0, max_seen, total_served, states_served);
    assert_true(kills >= min_kills);
    assert_true(max_seen > 0);
    assert_true(states_served > 0);
    t_rmrf(root);
    free(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_kill9_loop)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
