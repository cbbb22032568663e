/*
 * Recurrent checkpoints of the engine (src/engine/seq_state.c) over a real KV core with a
 * full and a recurrent layer:
 *   - where checkpoints are taken: the grid block_size * 4^k anchored at 0 and the end of
 *     the prompt's last full block, only at boundaries a run of rows passes;
 *   - a saved state is served by the core at exactly its length and restored bit for bit;
 *     lengths without one are never served;
 *   - the store's byte budget evicts the least recently used state and the core stops
 *     serving that length at once; the registry's own capacity evictions drop the bytes
 *     (the two always name the same checkpoints);
 *   - a budget below one state turns checkpoints off without an error.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine/seq_state.h"

#define BS 16
#define STATE 256

static void test_where(void **st)
{
    (void)st;
    /* A 700-token prompt computed in one run: 16, 64, 256, then its last full block 688. */
    int expect[] = {16, 64, 256, 688}, got[8], n = 0;
    for (int b = 0; (b = seq_ckpt_next(b, 700, 700, BS)) > 0;)
        got[n++] = b;
    assert_int_equal(n, 4);
    assert_memory_equal(got, expect, sizeof expect);
    /* A 320-token prompt ends on a boundary: 304 too (the same prompt again reuses at
     * most 319 tokens), and 320 for a continuation. */
    int expect2[] = {16, 64, 256, 304, 320};
    n = 0;
    for (int b = 0; (b = seq_ckpt_next(b, 320, 320, BS)) > 0;)
        got[n++] = b;
    assert_int_equal(n, 5);
    assert_memory_equal(got, expect2, sizeof expect2);
    /* Decode passing 1024 one token at a time: only the step that reaches it. */
    assert_int_equal(seq_ckpt_next(1022, 1023, 700, BS), 0);
    assert_int_equal(seq_ckpt_next(1023, 1024, 700, BS), 1024);
    assert_int_equal(seq_ckpt_next(1024, 4095, 700, BS), 0);
    assert_int_equal(seq_ckpt_next(1024, 4096, 700, BS), 4096);
    /* A 150-token prompt's last full block is 144; one the run does not pass takes none. */
    assert_int_equal(seq_ckpt_next(100, 200, 150, BS), 144);
    assert_int_equal(seq_ckpt_next(300, 400, 290, BS), 0);
    assert_int_equal(seq_ckpt_next(300, 400, 310, BS), 304);
    /* Another block size scales the grid: 32, 128, 512. */
    assert_int_equal(seq_ckpt_next(32, 600, 0, 32), 128);
}

typedef struct {
    cairn_kv_cache_t *cache;
    seq_ckpts_t *ck;
} bank_t;

static void bank_open(bank_t *b, uint64_t budget, uint32_t registry_cap)
{
    static const cairn_kv_layer_spec_t layers[2] = {{CAIRN_KV_LAYER_FULL, 1, 8, 0, 0},
                                                    {CAIRN_KV_LAYER_RECURRENT, 0, 0, 0, 0}};
    cairn_kv_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_layers = 2;
    cfg.layers = layers;
    cfg.dtype = CAIRN_DTYPE_F32;
    cfg.block_size = BS;
    cfg.memory_mib = 4;
    cfg.max_checkpoints = registry_cap;
    cfg.on_checkpoint_evict = seq_ckpts_registry_evicted;
    cfg.checkpoint_user = &b->ck;
    b->ck = NULL;
    assert_int_equal(cairn_kv_cache_create(&cfg, &b->cache), 0);
    assert_int_equal(seq_ckpts_create(b->cache, STATE, budget, &b->ck), 0);
}

static void bank_close(bank_t *b)
{
    seq_ckpts_t *ck = b->ck;
    b->ck = NULL;
    seq_ckpts_destroy(ck);
    cairn_kv_cache_destroy(b->cache);
}

/* Prompt `fam` of n tokens, computed, with its state after each block being the block
 * index repeated (so a restored state tells which boundary it came from). */
static cairn_kv_seq_t *prompt(bank_t *b, int fam, size_t n, seq_state_t *st, size_t *hit)
{
    int32_t t[256];
    for (size_t i = 0; i < n; i++)
        t[i] = fam * 1000 + (int32_t)i;
    cairn_kv_seq_t *s;
    assert_int_equal(cairn_kv_seq_begin(b->cache, NULL, NULL, 0, t, n, &s, hit), 0);
    return s;
}

static void save_all(bank_t *b, cairn_kv_seq_t *s, size_t n, seq_state_t *st, int fam)
{
    assert_int_equal(cairn_kv_seq_commit(s, n), 0);
    for (size_t p = BS; p <= n; p += BS) {
        memset(st->data, fam * 16 + (int)(p / BS), STATE);
        assert_int_equal(seq_ckpt_save(b->ck, s, p, st), 0);
    }
}

static void test_served_exactly_and_restored(void **st_)
{
    (void)st_;
    bank_t b;
    bank_open(&b, 64 * STATE, 0);
    seq_state_t st;
    assert_int_equal(seq_state_init(&st, STATE), 0);
    size_t hit = 99;
    cairn_kv_seq_t *s = prompt(&b, 1, 100, &st, &hit);
    assert_int_equal(hit, 0);
    /* Checkpoints only at 16 and 48 (not 32, 64, 80, 96). */
    assert_int_equal(cairn_kv_seq_commit(s, 100), 0);
    memset(st.data, 0x16, STATE);
    assert_int_equal(seq_ckpt_save(b.ck, s, 16, &st), 0);
    memset(st.data, 0x48, STATE);
    assert_int_equal(seq_ckpt_save(b.ck, s, 48, &st), 0);
    assert_int_equal(seq_ckpt_save(b.ck, s, 40, &st), CAIRN_ERANGE); /* not a boundary */
    assert_int_equal(seq_ckpt_deepest(b.ck, s, 100), 48);
    assert_int_equal(seq_ckpt_deepest(b.ck, s, 47), 16);
    assert_int_equal(seq_ckpt_deepest(b.ck, s, 15), 0);
    cairn_kv_seq_release(s, NULL);
    /* The same prompt: served at 48 exactly, and the state restored is that one. */
    s = prompt(&b, 1, 100, &st, &hit);
    assert_int_equal(hit, 48);
    memset(st.data, 0, STATE);
    assert_int_equal(seq_ckpt_restore(b.ck, s, 48, &st), 0);
    for (int i = 0; i < STATE; i++)
        assert_int_equal(((uint8_t *)st.data)[i], 0x48);
    assert_int_equal(seq_ckpt_restore(b.ck, s, 32, &st), CAIRN_ENOENT);
    cairn_kv_seq_release(s, NULL);
    /* A prompt diverging at 40 is served at 16 (its deepest checkpoint), never 32. */
    int32_t t[100];
    for (int i = 0; i < 100; i++)
        t[i] = 1000 + i;
    t[40] = 7;
    assert_int_equal(cairn_kv_seq_begin(b.cache, NULL, NULL, 0, t, 100, &s, &hit), 0);
    assert_int_equal(hit, 16);
    cairn_kv_seq_release(s, NULL);
    rstore_stats_t rs;
    seq_ckpts_stats(b.ck, &rs);
    assert_int_equal(rs.count, 2);
    assert_int_equal(rs.restores, 1);
    seq_state_fini(&st);
    bank_close(&b);
}

/* Budget of 3 states: the least recently used goes, and the core stops serving it. */
static void test_budget_and_registry_in_sync(void **st_)
{
    (void)st_;
    for (int registry_side = 0; registry_side < 2; registry_side++) {
        bank_t b;
        /* Either the byte budget (3 states) or the registry capacity (3 keys) binds. */
        bank_open(&b, registry_side ? 100 * STATE : 3 * STATE, registry_side ? 3 : 0);
        seq_state_t st;
        assert_int_equal(seq_state_init(&st, STATE), 0);
        size_t hit;
        for (int fam = 1; fam <= 4; fam++) { /* one checkpoint (at 16) per prompt */
            cairn_kv_seq_t *s = prompt(&b, fam, 20, &st, &hit);
            assert_int_equal(hit, 0);
            save_all(&b, s, 16, &st, fam);
            cairn_kv_seq_release(s, NULL);
            if (fam == 2) { /* touch prompt 1: it becomes the most recent */
                s = prompt(&b, 1, 20, &st, &hit);
                assert_int_equal(hit, 16);
                assert_int_equal(seq_ckpt_restore(b.ck, s, 16, &st), 0);
                cairn_kv_seq_release(s, NULL);
            }
        }
        /* Prompt 2 was the least recently used when prompt 4 came. */
        static const size_t expect_hit[5] = {0, 16, 0, 16, 16};
        for (int fam = 1; fam <= 4; fam++) {
            size_t P = 99;
            int32_t t[20];
            for (int i = 0; i < 20; i++)
                t[i] = fam * 1000 + i;
            assert_int_equal(cairn_kv_cache_lookup(b.cache, NULL, NULL, 0, t, 20, &P), 0);
            assert_int_equal(P, expect_hit[fam]);
        }
        rstore_stats_t rs;
        seq_ckpts_stats(b.ck, &rs);
        assert_int_equal(rs.count, 3);
        assert_int_equal(registry_side ? rs.drops : rs.evictions, 1);
        cairn_kv_stats_t ks;
        cairn_kv_cache_stats(b.cache, &ks);
        assert_int_equal(ks.checkpoints, 3);
        seq_state_fini(&st);
        bank_close(&b);
    }
}

static void test_budget_below_one_state(void **st_)
{
    (void)st_;
    bank_t b;
    bank_open(&b, STATE - 1, 0);
    seq_state_t st;
    assert_int_equal(seq_state_init(&st, STATE), 0);
    size_t hit;
    cairn_kv_seq_t *s = prompt(&b, 1, 40, &st, &hit);
    save_all(&b, s, 32, &st, 1); /* returns 0: checkpoints are off */
    cairn_kv_seq_release(s, NULL);
    s = prompt(&b, 1, 40, &st, &hit);
    assert_int_equal(hit, 0);
    cairn_kv_seq_release(s, NULL);
    seq_state_fini(&st);
    bank_close(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_where),
        cmocka_unit_test(test_served_exactly_and_restored),
        cmocka_unit_test(test_budget_and_registry_in_sync),
        cmocka_unit_test(test_budget_below_one_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
