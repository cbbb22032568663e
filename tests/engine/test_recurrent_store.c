/*
 * The recurrent checkpoint store (src/engine/recurrent_store.c): a seeded random sequence
 * of puts, gets, drops and re-puts against a plain reference model (an array in LRU
 * order), checking after every operation that the same keys are present, every get
 * returns the bytes last put under its key, the budget holds, and exactly the least
 * recently used entries are evicted, each reported once through the callback. Also the
 * edge cases: a budget below one state, allocation failures.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine/recurrent_store.h"

#define STATE 48
#define MAX_REF 4096

typedef struct {
    cairn_kv_hash_t key;
    uint8_t data[STATE];
} ref_entry_t;

static ref_entry_t ref[MAX_REF]; /* LRU order: ref[0] least recent */
static int n_ref;
static cairn_kv_hash_t evicted[MAX_REF];
static int n_evicted;

static void on_evict(void *user, const cairn_kv_hash_t *key)
{
    (void)user;
    evicted[n_evicted++] = *key;
}

static uint64_t rng;
static uint32_t rnd(uint32_t n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33) % n;
}

/* Keys from a small universe, so puts often hit existing entries; some share their
 * first 8 bytes (the table's hash) to exercise probing and backward-shift deletion. */
static cairn_kv_hash_t key_of(uint32_t k)
{
    cairn_kv_hash_t h;
    memset(&h, 0, sizeof h);
    h.bytes[0] = (uint8_t)(k % 7); /* heavy collisions in the low bits */
    memcpy(h.bytes + 8, &k, sizeof k);
    return h;
}

static int ref_find(const cairn_kv_hash_t *k)
{
    for (int i = 0; i < n_ref; i++)
        if (!memcmp(ref[i].key.bytes, k->bytes, 32))
            return i;
    return -1;
}

static void ref_remove(int i)
{
    memmove(ref + i, ref + i + 1, (size_t)(n_ref - i - 1) * sizeof *ref);
    n_ref--;
}

static void ref_touch(int i)
{
    ref_entry_t e = ref[i];
    ref_remove(i);
    ref[n_ref++] = e;
}

static void run_model(uint64_t seed, int max_entries, int steps)
{
    rng = seed;
    n_ref = 0;
    rstore_t *st;
    assert_int_equal(rstore_create(STATE, (uint64_t)max_entries * STATE + STATE - 1, on_evict,
                                   NULL, &st), 0);
    for (int step = 0; step < steps; step++) {
        uint32_t op = rnd(10), k = rnd((uint32_t)max_entries * 3 + 1);
        cairn_kv_hash_t key = key_of(k);
        int i = ref_find(&key);
        n_evicted = 0;
        if (op < 5) { /* put */
            uint8_t data[STATE];
            for (int b = 0; b < STATE; b++)
                data[b] = (uint8_t)rnd(256);
            assert_int_equal(rstore_put(st, &key, data), 0);
            int expect_evicted = 0;
            if (i >= 0) {
                ref_touch(i);
            } else {
                while (n_ref >= max_entries) {
                    assert_true(expect_evicted < n_evicted);
                    assert_memory_equal(evicted[expect_evicted++].bytes, ref[0].key.bytes, 32);
                    ref_remove(0);
                }
                ref[n_ref].key = key;
                n_ref++;
            }
            memcpy(ref[n_ref - 1].data, data, STATE);
            assert_int_equal(n_evicted, expect_evicted);
        } else if (op < 8) { /* get */
            uint8_t got[STATE];
            int rc = rstore_get(st, &key, got);
            if (i < 0) {
                assert_int_equal(rc, CAIRN_ENOENT);
            } else {
                assert_int_equal(rc, 0);
                assert_memory_equal(got, ref[i].data, STATE);
                ref_touch(i);
            }
        } else { /* drop */
            int rc = rstore_drop(st, &key);
            assert_int_equal(rc, i < 0 ? CAIRN_ENOENT : 0);
            if (i >= 0)
                ref_remove(i);
            assert_int_equal(n_evicted, 0);
        }
        rstore_stats_t s;
        rstore_stats(st, &s);
        assert_int_equal(s.count, n_ref);
        assert_true(s.bytes <= s.budget);
        for (int j = 0; j < n_ref; j++)
            assert_true(rstore_has(st, &ref[j].key));
    }
    /* Every key of the universe: present exactly when the model has it. */
    for (uint32_t k = 0; k <= (uint32_t)max_entries * 3; k++) {
        cairn_kv_hash_t key = key_of(k);
        assert_int_equal(rstore_has(st, &key), ref_find(&key) >= 0);
    }
    rstore_destroy(st);
}

static void test_model(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 6; seed++) {
        run_model(seed, 1, 2000);
        run_model(seed, 5, 4000);
        run_model(seed, 60, 20000);
    }
}

static void test_budget_below_one_state(void **state)
{
    (void)state;
    rstore_t *st;
    uint8_t data[STATE] = {1};
    cairn_kv_hash_t key = key_of(3);
    assert_int_equal(rstore_create(STATE, STATE - 1, on_evict, NULL, &st), 0);
    assert_int_equal(rstore_put(st, &key, data), CAIRN_ERANGE);
    assert_false(rstore_has(st, &key));
    rstore_stats_t s;
    rstore_stats(st, &s);
    assert_int_equal(s.refused, 1);
    assert_int_equal(s.count, 0);
    rstore_destroy(st);
    assert_int_equal(rstore_create(0, 100, NULL, NULL, &st), CAIRN_EINVAL);
}

static void test_allocation_failures(void **state)
{
    (void)state;
    uint8_t data[STATE] = {7};
    for (long n = 0; n < 40; n++) {
        rstore_t *st = NULL;
        cairn_alloc_fail_after(n, false);
        int rc = rstore_create(STATE, 1000 * STATE, NULL, NULL, &st);
        int stored = 0;
        for (uint32_t k = 0; rc == 0 && k < 40; k++) {
            cairn_kv_hash_t key = key_of(k);
            rc = rstore_put(st, &key, data);
            if (rc == 0)
                stored++;
            else
                assert_int_equal(rc, CAIRN_ENOMEM);
        }
        cairn_alloc_fail_after(-1, false);
        if (st) {
            rstore_stats_t s;
            rstore_stats(st, &s);
            assert_int_equal(s.count, stored); /* a failed put stores nothing */
        }
        rstore_destroy(st);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model),
        cmocka_unit_test(test_budget_below_one_state),
        cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
