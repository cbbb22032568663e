/*
 * test_cold_capture.c — the cold tier's background capture in the engine (issue 17), in
 * one process over the in-memory store (a lent store: it survives the engines, so a fresh
 * engine over it is a restart):
 *  - write-through with a pin budget smaller than the chain: the release returns with the
 *    chain still being copied (the copy walk deferred, counted), the engine keeps
 *    computing meanwhile, and a flush ends with the whole chain in the store; a fresh
 *    engine restores every usable block with logits and tokens bit-identical to the tier
 *    off;
 *  - write-back with a pool too small for two prompts: nothing is written at the end of the
 *    turn, the second prompt's admission is held back (EEXHAUSTED while the cached blocks
 *    are persisted, never their loss), then admitted; the first prompt restores whole in a
 *    fresh engine, bit-identical;
 *  - policy off: nothing is queued or written.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "cairn/engine.h"
#include "engine/engine_fixtures.h"
#include "tier/mem/mem_store.h"

#define MODEL "qwen3"
#define N_GEN 3
#define MAX_VOCAB 4096
#define BS 16

typedef struct {
    float logits[MAX_VOCAB]; /* last prompt position */
    int32_t ids[N_GEN];
    int hot, restored;
} out_t;

static cairn_engine_t *engine(cairn_checkpoint_t *ck, cairn_tier_store_t *store, int pool_mib,
                              cairn_cold_policy_t policy, int pin_mib)
{
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.n_threads = 2;
    o.pool_mib = pool_mib;
    o.cold = store ? 1 : -1;
    o.cold_store = store;
    o.cold_policy = policy;
    o.cold_pin_mib = pin_mib;
    o.cold_drain_ms = 20000;
    cairn_engine_t *e = NULL;
    char err[256];
    assert_int_equal(cairn_engine_create(ck, &o, &e, err, sizeof err), CAIRN_OK);
    assert_true(cairn_engine_config(e)->vocab <= MAX_VOCAB);
    return e;
}

/* Prefill + N_GEN greedy tokens on an admitted sequence. */
static void decode(cairn_engine_t *e, cairn_seq_t *s, out_t *r)
{
    const int vocab = cairn_engine_config(e)->vocab;
    for (int g = 0; g < N_GEN; g++) {
        cairn_batch_item_t it = {s, 0, CAIRN_LOGITS_LAST};
        const float *lg = NULL;
        int rows = 0;
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), CAIRN_OK);
        if (g == 0)
            memcpy(r->logits, lg, (size_t)vocab * sizeof(float));
        int best = 0;
        for (int v = 1; v < vocab; v++)
            if (lg[v] > lg[best])
                best = v;
        r->ids[g] = best;
        assert_int_equal(cairn_seq_feed(s, &r->ids[g], 1), CAIRN_OK);
    }
}

/* One prompt on a fresh engine (store NULL: tier off), then destroy. */
static void run_once(cairn_checkpoint_t *ck, cairn_tier_store_t *store, const int32_t *p, int n, out_t *r)
{
    memset(r, 0, sizeof *r);
    cairn_engine_t *e = engine(ck, store, 64, CAIRN_COLD_WRITE_THROUGH, 0);
    cairn_seq_t *s = NULL;
    assert_int_equal(cairn_seq_begin(e, NULL, p, n, &s, &r->hot), CAIRN_OK);
    r->restored = cairn_seq_restored_tokens(s);
    decode(e, s, r);
    cairn_seq_release(s);
    cairn_engine_destroy(e);
}

static void assert_same(const out_t *a, const out_t *b)
{
    assert_memory_equal(a->logits, b->logits, sizeof a->logits);
    assert_memory_equal(a->ids, b->ids, sizeof a->ids);
}

/* A prompt of n tokens built from the fixture's long_720 ids (repeated, each repetition
 * shifted), whose first token is `first`: another `first`, another chain. */
static int32_t *prompt(int n, int32_t first)
{
    int n_all = 0;
    int32_t *all = fixture_prompt(MODEL, "long_720", &n_all);
    int32_t *p = malloc((size_t)n * sizeof *p);
    assert_non_null(p);
    for (int i = 0; i < n; i++)
        p[i] = (all[i % n_all] + i / n_all) % 4093;
    p[0] = first;
    free(all);
    return p;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void test_write_through_in_background(void **state)
{
    (void)state;
    cairn_checkpoint_t *ck = fixture_open(MODEL);
    const int n = 1281; /* 80 full blocks of 16 KiB: 16 more than the 1 MiB pin budget holds */
    int32_t *p = prompt(n, 11), *q = prompt(40, 12);
    static out_t off, on, again;
    run_once(ck, NULL, p, n, &off);

    tier_mem_config_t mc = {0, 3000}; /* 3 ms per put: a slow disk */
    cairn_tier_store_t *m = NULL;
    assert_int_equal(tier_mem_create(&mc, &m), CAIRN_OK);
    cairn_engine_t *e = engine(ck, m, 64, CAIRN_COLD_WRITE_THROUGH, 1);
    cairn_seq_t *s = NULL;
    assert_int_equal(cairn_seq_begin(e, NULL, p, n, &s, &on.hot), CAIRN_OK);
    decode(e, s, &on);
    cairn_seq_release(s);
    cairn_engine_cold_turn_t t;
    cairn_engine_cold_last_turn(e, &t);
    assert_string_equal(t.reason, "write-through");
    assert_int_equal(t.blocks, 80);
    assert_int_equal(t.queued, 80);
    assert_int_equal(t.already, 0);
    assert_int_equal(t.deferred, 16); /* 64 pinned, 16 wait for the budget */
    cairn_engine_cold_counters_t cc;
    cairn_engine_cold_counters(e, &cc);
    assert_true(cc.capture_deferrals >= 1);
    assert_int_equal(cc.awaiting_blocks, 80);
    assert_true(cc.pinned_bytes <= cc.pin_budget_bytes);
    assert_true(cc.store.objects < 80); /* 240 ms of puts: the release did not wait */
    /* The engine computes while the chain is copied. */
    double t0 = now_ms();
    out_t other;
    assert_int_equal(cairn_seq_begin(e, NULL, q, 40, &s, NULL), CAIRN_OK);
    decode(e, s, &other);
    cairn_seq_release(s);
    (void)t0;
    cairn_engine_cold_flush(e);
    cairn_engine_cold_counters(e, &cc);
    assert_int_equal(cc.awaiting_blocks, 0);
    assert_int_equal(cc.pinned_bytes, 0);
    assert_int_equal(cc.captured_blocks, 80 + 2);
    assert_int_equal(cc.capture_lost, 0);
    cairn_kv_stats_t kv;
    assert_int_equal(cairn_engine_kv_stats(e, &kv), CAIRN_OK);
    assert_int_equal(kv.blocks_pinned, 0);
    /* A second walk over the same chain finds it on disk: nothing queued. */
    assert_int_equal(cairn_seq_begin(e, NULL, p, n, &s, NULL), CAIRN_OK);
    decode(e, s, &other);
    cairn_seq_release(s);
    cairn_engine_cold_last_turn(e, &t);
    assert_int_equal(t.queued, 0);
    assert_int_equal(t.already, 80);
    cairn_engine_destroy(e);

    run_once(ck, m, p, n, &again);
    assert_int_equal(again.restored, 80 * BS);
    assert_same(&again, &off);
    cairn_tier_store_destroy(m);
    cairn_checkpoint_close(ck);
    free(p);
    free(q);
}

static void test_write_back_on_eviction(void **state)
{
    (void)state;
    cairn_checkpoint_t *ck = fixture_open(MODEL);
    /* 1 MiB holds 63 usable blocks of 16 KiB: A (21 blocks) and B (52) do not fit both. */
    const int na = 321, nb = 820;
    int32_t *a = prompt(na, 21), *b = prompt(nb, 22);
    static out_t off, first, restored;
    run_once(ck, NULL, a, na, &off);

    cairn_tier_store_t *m = NULL;
    assert_int_equal(tier_mem_create(NULL, &m), CAIRN_OK);
    cairn_engine_t *e = engine(ck, m, 1, CAIRN_COLD_WRITE_BACK, 0);
    cairn_seq_t *s = NULL;
    assert_int_equal(cairn_seq_begin(e, NULL, a, na, &s, NULL), CAIRN_OK);
    decode(e, s, &first);
    cairn_seq_release(s);
    cairn_engine_cold_turn_t t;
    cairn_engine_cold_last_turn(e, &t);
    assert_string_equal(t.reason, "write-back");
    assert_int_equal(t.queued, 20);
    cairn_engine_cold_counters_t cc;
    cairn_engine_cold_counters(e, &cc);
    assert_int_equal(cc.captured_blocks, 0); /* held: written only when evicted or at exit */
    assert_int_equal(cc.awaiting_blocks, 20);
    assert_false(cairn_engine_cold_poll(e));

    /* B needs A's cached blocks: they are persisted first, then evicted. */
    int rc = cairn_seq_begin(e, NULL, b, nb, &s, NULL);
    int waits = 0;
    while (rc == CAIRN_EEXHAUSTED && waits < 5000) {
        assert_true(cairn_engine_cold_poll(e) || waits > 0);
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
        (void)cairn_engine_cold_poll(e);
        rc = cairn_seq_begin(e, NULL, b, nb, &s, NULL);
        waits++;
    }
    assert_int_equal(rc, CAIRN_OK);
    cairn_engine_cold_counters(e, &cc);
    assert_true(cc.writeback_holds >= 1);
    assert_int_equal(cc.capture_lost, 0);
    /* An evicted block was copied out before its eviction; the store's write of that copy
     * may still be on its way (TSan's pace showed it): wait for the queued writes. This
     * cannot make up a block that was evicted without being queued. */
    cairn_engine_cold_flush(e);
    cairn_tier_stats_t st;
    cairn_tier_store_stats(m, &st);
    assert_true(st.objects >= 20); /* every block of A that was evicted went to the store first */
    out_t ob;
    decode(e, s, &ob);
    cairn_seq_release(s);
    cairn_engine_destroy(e); /* write-back at exit: B's held blocks */
    cairn_tier_store_stats(m, &st);
    assert_int_equal(st.objects, 20 + 51);

    run_once(ck, m, a, na, &restored);
    assert_int_equal(restored.restored, 20 * BS);
    assert_same(&restored, &off);
    assert_same(&first, &off);
    cairn_tier_store_destroy(m);
    cairn_checkpoint_close(ck);
    free(a);
    free(b);
}

static void test_policy_off(void **state)
{
    (void)state;
    cairn_checkpoint_t *ck = fixture_open(MODEL);
    int32_t *p = prompt(200, 31);
    cairn_tier_store_t *m = NULL;
    assert_int_equal(tier_mem_create(NULL, &m), CAIRN_OK);
    cairn_engine_t *e = engine(ck, m, 64, CAIRN_COLD_CAPTURE_OFF, 0);
    cairn_seq_t *s = NULL;
    out_t o;
    assert_int_equal(cairn_seq_begin(e, NULL, p, 200, &s, NULL), CAIRN_OK);
    decode(e, s, &o);
    cairn_seq_release(s);
    cairn_engine_cold_turn_t t;
    cairn_engine_cold_last_turn(e, &t);
    assert_string_equal(t.reason, "off");
    assert_int_equal(t.queued, 0);
    cairn_cold_persist_report_t r;
    assert_int_equal(cairn_engine_cold_persist(e, 1000, &r), CAIRN_OK);
    assert_int_equal(r.queued, 0);
    cairn_engine_destroy(e);
    cairn_tier_stats_t st;
    cairn_tier_store_stats(m, &st);
    assert_int_equal(st.objects, 0);
    cairn_tier_store_destroy(m);
    cairn_checkpoint_close(ck);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_through_in_background),
        cmocka_unit_test(test_write_back_on_eviction),
        cmocka_unit_test(test_policy_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
