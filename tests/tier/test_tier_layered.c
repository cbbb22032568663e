/*
 * test_tier_layered.c — the tier order (src/tier/layered): a local store in front of a
 * remote one, proven over in-memory stores that count every call (and the filesystem
 * store for a kind the local tier does not hold):
 *   - a local hit never asks the remote store (no get, no chain_length, no prefetch of it);
 *   - a block only the remote store holds is read from it and written to the local one,
 *     so the next walk is served locally;
 *   - a block the local store finds invalid is read from the remote store into the same
 *     destination (asked for once);
 *   - captures reach both tiers, a remote refusal never fails them;
 *   - over the filesystem store: a block of a group it does not hold lives in the remote
 *     tier alone; STATE sidecars, which it holds, follow the same order as blocks.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cairn/shared_tier.h"
#include "tier/mem/mem_store.h"
#include "tier/tier_test_util.h"

#define SEED 23
#define N 8

static void put_into(cairn_tier_store_t *s, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        cairn_tier_object_t o;
        int32_t tk[T_TOKENS];
        uint8_t pay[T_PAYLOAD];
        t_object(SEED, i, &o, tk, pay);
        assert_int_equal(cairn_tier_store_put(s, &o, 1000, NULL), CAIRN_OK);
    }
    cairn_tier_store_flush(s);
}

typedef struct {
    uint8_t bufs[N][T_PAYLOAD];
    int asked[N];
} sink_t;

static void *dest(void *user, size_t i, size_t size)
{
    sink_t *k = user;
    k->asked[i]++;
    return size == T_PAYLOAD ? k->bufs[i] : NULL;
}

static void check_payloads(const sink_t *k, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        cairn_tier_object_t o;
        int32_t tk[T_TOKENS];
        uint8_t pay[T_PAYLOAD];
        t_object(SEED, i, &o, tk, pay);
        assert_memory_equal(k->bufs[i], pay, T_PAYLOAD);
        assert_int_equal(k->asked[i], 1);
    }
}

static cairn_tier_restore_result_t walk(cairn_tier_store_t *s, sink_t *k)
{
    static cairn_tier_key_t keys[N];
    static int32_t tokens[N * T_TOKENS];
    t_chain(SEED, N, keys, tokens);
    memset(k, 0, sizeof *k);
    cairn_tier_chain_t chain = {keys, tokens, T_TOKENS, N};
    cairn_tier_restore_sink_t sink = {NULL, dest, k};
    cairn_tier_restore_result_t res;
    assert_int_equal(cairn_tier_restore_chain(s, &chain, 0, &sink, &res), CAIRN_OK);
    return res;
}

static void test_order_and_promotion(void **state)
{
    (void)state;
    cairn_tier_store_t *L, *R, *S;
    assert_int_equal(tier_mem_create(NULL, &L), CAIRN_OK);
    assert_int_equal(tier_mem_create(NULL, &R), CAIRN_OK);
    assert_int_equal(cairn_tier_layered_create(L, R, &S), CAIRN_OK);
    put_into(R, 0, N);  /* the shared tier has the whole chain */
    put_into(L, 0, 3);  /* this machine's disk its first 3 blocks */
    cairn_tier_key_t keys[N];
    t_chain(SEED, N, keys, NULL);
    tier_mem_calls_t r0;
    tier_mem_calls(R, &r0);
    assert_int_equal(cairn_tier_store_chain_length(S, keys, N), N);
    tier_mem_calls_t r1;
    tier_mem_calls(R, &r1);
    assert_int_equal(r1.chain_length, r0.chain_length + 1); /* asked for the keys past local's 3 */

    sink_t k;
    cairn_tier_restore_result_t res = walk(S, &k);
    assert_int_equal(res.loaded, N);
    check_payloads(&k, 0, N);
    tier_mem_calls_t r2;
    tier_mem_calls(R, &r2);
    assert_int_equal(r2.get, r1.get + (N - 3));          /* only what local lacked */
    assert_int_equal(r2.payload_reads, r1.payload_reads + (N - 3));
    assert_int_equal(r2.prefetched - r1.prefetched, N - 3); /* hinted only the run local lacks */
    cairn_tier_layered_counters_t c;
    assert_int_equal(cairn_tier_layered_counters(S, &c), CAIRN_OK);
    assert_int_equal(c.local_hits, 3);
    assert_int_equal(c.remote_hits, N - 3);
    assert_int_equal(c.promoted, N - 3);
    /* Promoted: the local tier now holds the whole chain, and the next walk never asks
     * the remote one anything. */
    assert_int_equal(cairn_tier_store_chain_length(L, keys, N), N);
    res = walk(S, &k);
    assert_int_equal(res.loaded, N);
    check_payloads(&k, 0, N);
    tier_mem_calls_t r3;
    tier_mem_calls(R, &r3);
    assert_int_equal(r3.get, r2.get);
    assert_int_equal(r3.chain_length, r2.chain_length);
    assert_int_equal(r3.prefetch, r2.prefetch);
    cairn_tier_store_destroy(S);
    cairn_tier_store_destroy(L);
    cairn_tier_store_destroy(R);
}

/* A local object found invalid: removed by the local store, read from the remote one into
 * the destination the local read already asked for (the caller is asked once). */
static void test_local_corrupt_falls_back(void **state)
{
    (void)state;
    cairn_tier_store_t *L, *R, *S;
    assert_int_equal(tier_mem_create(NULL, &L), CAIRN_OK);
    assert_int_equal(tier_mem_create(NULL, &R), CAIRN_OK);
    assert_int_equal(cairn_tier_layered_create(L, R, &S), CAIRN_OK);
    put_into(L, 0, N);
    put_into(R, 0, N);
    cairn_tier_key_t keys[N];
    t_chain(SEED, N, keys, NULL);
    assert_int_equal(tier_mem_damage(L, &keys[2], 9), CAIRN_OK);
    sink_t k;
    cairn_tier_restore_result_t res = walk(S, &k);
    assert_int_equal(res.loaded, N);
    check_payloads(&k, 0, N); /* block 2 right, its destination asked for once */
    cairn_tier_stats_t ls;
    cairn_tier_store_stats(L, &ls);
    assert_int_equal(ls.corruptions, 1);
    cairn_tier_layered_counters_t c;
    cairn_tier_layered_counters(S, &c);
    assert_int_equal(c.remote_hits, 1);
    assert_int_equal(c.promoted, 1); /* and the local copy is repaired */
    assert_int_equal(cairn_tier_store_chain_length(L, keys, N), N);
    /* Both invalid: the walk stops there, nothing wrong is delivered. */
    assert_int_equal(tier_mem_damage(L, &keys[4], 3), CAIRN_OK);
    assert_int_equal(tier_mem_damage(R, &keys[4], 3), CAIRN_OK);
    res = walk(S, &k);
    assert_int_equal(res.loaded, 4);
    assert_int_equal(res.stop, CAIRN_ECORRUPT);
    check_payloads(&k, 0, 4);
    cairn_tier_store_destroy(S);
    cairn_tier_store_destroy(L);
    cairn_tier_store_destroy(R);
}

/* Captures go to every tier that lacks the object; a full remote tier never fails them. */
static void test_put_both(void **state)
{
    (void)state;
    tier_mem_config_t small = {.max_objects = 2};
    cairn_tier_store_t *L, *R, *S;
    assert_int_equal(tier_mem_create(NULL, &L), CAIRN_OK);
    assert_int_equal(tier_mem_create(&small, &R), CAIRN_OK);
    assert_int_equal(cairn_tier_layered_create(L, R, &S), CAIRN_OK);
    cairn_tier_key_t keys[N];
    t_chain(SEED, N, keys, NULL);
    for (size_t i = 0; i < N; i++) {
        cairn_tier_object_t o;
        int32_t tk[T_TOKENS];
        uint8_t pay[T_PAYLOAD];
        t_object(SEED, i, &o, tk, pay);
        bool q = false;
        assert_int_equal(cairn_tier_store_put(S, &o, 0, &q), CAIRN_OK);
        assert_true(q);
        assert_int_equal(cairn_tier_store_put(S, &o, 0, &q), CAIRN_OK);
        assert_false(q); /* held by both, or the remote refuses again: nothing new queued */
    }
    assert_int_equal(cairn_tier_store_chain_length(L, keys, N), N);
    assert_int_equal(cairn_tier_store_chain_length(R, keys, N), 2);
    assert_true(cairn_tier_store_contains(S, &keys[1]));
    assert_false(cairn_tier_store_contains(S, &keys[5])); /* the remote lacks it: a capture retries */
    cairn_tier_stats_t rs;
    cairn_tier_store_stats(R, &rs);
    assert_true(rs.queue_drops >= N - 2);
    /* The layered store's stats are both tiers'. */
    cairn_tier_stats_t st;
    cairn_tier_store_stats(S, &st);
    assert_int_equal(st.objects, N + 2);
    cairn_tier_store_destroy(S);
    cairn_tier_store_destroy(L);
    cairn_tier_store_destroy(R);
}

static void *one_buf(void *user, size_t size) { return size <= T_PAYLOAD ? user : NULL; }

/* Over the filesystem store as the local tier: a BLOCK of a group it does not hold (it
 * keeps group 0 only) lives in the remote tier alone, read from there and never counted as
 * a failed promotion; STATE sidecars, which it holds, follow the tier order like blocks
 * (captured to both, a local hit never asks the remote tier, a remote-only one promoted). */
static void test_kinds_over_fs(void **state)
{
    (void)state;
    char *root = t_mkroot();
    cairn_cold_config_t cfg = t_config(root, 0, 0);
    cairn_cold_store_t *fs;
    assert_int_equal(cairn_cold_store_create(&cfg, &fs), CAIRN_OK);
    cairn_tier_store_t *L = cairn_cold_store_tier(fs), *R, *S;
    assert_int_equal(tier_mem_create(NULL, &R), CAIRN_OK);
    assert_int_equal(cairn_tier_layered_create(L, R, &S), CAIRN_OK);
    /* A group-1 block: the remote tier's alone. */
    cairn_tier_object_t o;
    int32_t tk[T_TOKENS];
    uint8_t pay[T_PAYLOAD];
    t_object(SEED, 1, &o, tk, pay);
    o.key.group = 1;
    bool q = false;
    assert_int_equal(cairn_tier_store_put(S, &o, 0, &q), CAIRN_OK);
    assert_true(q);
    cairn_tier_store_flush(S);
    assert_true(cairn_tier_store_contains(R, &o.key));
    assert_false(cairn_tier_store_contains(L, &o.key));
    assert_int_equal(cairn_tier_store_chain_length(S, &o.key, 1), 1);
    uint8_t got[T_PAYLOAD];
    cairn_tier_object_t want = o;
    want.payload = NULL;
    want.payload_size = 0;
    assert_int_equal(cairn_tier_store_get(S, &want, one_buf, got), CAIRN_OK);
    assert_memory_equal(got, pay, T_PAYLOAD);
    cairn_tier_layered_counters_t c;
    cairn_tier_layered_counters(S, &c);
    assert_int_equal(c.remote_hits, 1);
    assert_int_equal(c.promoted, 0);
    assert_int_equal(c.promote_drops, 0); /* a kind the local tier does not hold: no drop */
    /* A sidecar captured through the layered store: both tiers; read locally. */
    cairn_tier_object_t st;
    uint8_t lay[T_STATE_LAYOUT], spay[T_PAYLOAD];
    t_state(SEED, 2, 1, &st, lay, spay);
    assert_int_equal(cairn_tier_store_put(S, &st, 1000, &q), CAIRN_OK);
    assert_true(q);
    cairn_tier_store_flush(S);
    assert_true(cairn_tier_store_contains(L, &st.key));
    assert_true(cairn_tier_store_contains(R, &st.key));
    tier_mem_calls_t r0, r1;
    tier_mem_calls(R, &r0);
    want = st;
    want.payload = NULL;
    want.payload_size = 0;
    assert_int_equal(cairn_tier_store_get(S, &want, one_buf, got), CAIRN_OK);
    assert_memory_equal(got, spay, st.payload_size);
    tier_mem_calls(R, &r1);
    assert_int_equal(r1.get, r0.get);
    /* A sidecar only the remote tier holds: read from it, then promoted to the disk. */
    t_state(SEED, 3, 1, &st, lay, spay);
    assert_int_equal(cairn_tier_store_put(R, &st, 1000, &q), CAIRN_OK);
    cairn_tier_store_flush(R);
    assert_false(cairn_tier_store_contains(L, &st.key));
    want = st;
    want.payload = NULL;
    want.payload_size = 0;
    memset(got, 0, sizeof got);
    assert_int_equal(cairn_tier_store_get(S, &want, one_buf, got), CAIRN_OK);
    assert_memory_equal(got, spay, st.payload_size);
    cairn_tier_layered_counters(S, &c);
    assert_int_equal(c.remote_hits, 2);
    assert_int_equal(c.promoted, 1);
    cairn_tier_store_flush(S);
    assert_true(cairn_tier_store_contains(L, &st.key));
    cairn_tier_store_destroy(S);
    cairn_tier_store_destroy(R);
    cairn_cold_store_destroy(fs);
    t_rmrf(root);
    free(root);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    cairn_tier_store_t *L, *S = (cairn_tier_store_t *)1;
    assert_int_equal(tier_mem_create(NULL, &L), CAIRN_OK);
    assert_int_equal(cairn_tier_layered_create(L, NULL, &S), CAIRN_EINVAL);
    assert_null(S);
    assert_int_equal(cairn_tier_layered_create(L, L, &S), CAIRN_EINVAL);
    cairn_tier_layered_counters_t c;
    assert_int_equal(cairn_tier_layered_counters(L, &c), CAIRN_EINVAL);
    cairn_tier_store_destroy(L);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_promotion),
        cmocka_unit_test(test_local_corrupt_falls_back),
        cmocka_unit_test(test_put_both),
        cmocka_unit_test(test_kinds_over_fs),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
