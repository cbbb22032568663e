/*
 * test_tier_custom.c — a store the library does not know, registered by a test alone.
 *
 * This file defines its own store (a do-nothing store that counts its calls, accepts and
 * drops every put and misses every read) through include/cairn/tier_store.h and nothing
 * else, and runs the tier logic and the engine over it: adding a store edits no existing
 * source file. Then the engine over the in-memory store: one engine persists a prompt, a
 * fresh engine restores it (bit-identical logits and tokens to the tier-off run), and a
 * damaged object stops the restore there with the output still identical.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cairn/engine.h"
#include "engine/engine_fixtures.h"
#include "tier/mem/mem_store.h"

/* ---- the do-nothing store ---- */

typedef struct {
    cairn_tier_store_t base; /* first: the interface */
    int contains, chain_length, put, get, flush, stats, destroy;
} null_store_t;

static null_store_t *null_of(cairn_tier_store_t *s) { return (null_store_t *)s; }

static bool null_contains(cairn_tier_store_t *s, const cairn_tier_key_t *key)
{
    (void)key;
    null_of(s)->contains++;
    return false;
}

static size_t null_chain_length(cairn_tier_store_t *s, const cairn_tier_key_t *keys, size_t n)
{
    (void)keys;
    (void)n;
    null_of(s)->chain_length++;
    return 0;
}

static int null_put(cairn_tier_store_t *s, const cairn_tier_object_t *obj, uint32_t wait_ms, bool *queued)
{
    (void)obj;
    (void)wait_ms;
    null_of(s)->put++;
    if (queued)
        *queued = true; /* accepted, and dropped */
    return CAIRN_OK;
}

static int null_get(cairn_tier_store_t *s, const cairn_tier_object_t *want, cairn_tier_dest_fn dest, void *user)
{
    (void)want;
    (void)dest;
    (void)user;
    null_of(s)->get++;
    return CAIRN_ENOENT;
}

static void null_flush(cairn_tier_store_t *s) { null_of(s)->flush++; }

static void null_stats(cairn_tier_store_t *s, cairn_tier_stats_t *out)
{
    null_of(s)->stats++;
    out->enabled = true;
    out->root = "null";
}

static void null_destroy(cairn_tier_store_t *s) { null_of(s)->destroy++; }

static const cairn_tier_store_ops_t null_ops = {
    .name = "null",
    .contains = null_contains,
    .chain_length = null_chain_length,
    .put = null_put,
    .get = null_get,
    .flush = null_flush,
    .stats = null_stats,
    .destroy = null_destroy,
    /* no prefetch, no maintenance: optional */
};

/* ---- the tier logic over it ---- */

static int yield(void *user, size_t i, cairn_tier_object_t *o)
{
    static int32_t tk[4];
    static uint8_t pay[8];
    memset(o, 0, sizeof *o);
    o->key.kind = CAIRN_TIER_BLOCK;
    o->key.hash.bytes[0] = (uint8_t)i;
    o->tokens = tk;
    o->n_tokens = 4;
    o->payload = pay;
    o->payload_size = sizeof pay;
    (void)user;
    return 0;
}

static void *no_dest(void *user, size_t i, size_t size)
{
    (void)user;
    (void)i;
    (void)size;
    fail_msg("the null store never finds an object");
    return NULL;
}

static void test_tier_logic_over_null_store(void **state)
{
    (void)state;
    null_store_t ns = {{&null_ops}, 0, 0, 0, 0, 0, 0, 0};
    cairn_tier_store_t *s = &ns.base;
    cairn_tier_capture_result_t cr;
    cairn_tier_capture_budget_t bud = {100, 10000};
    assert_int_equal(cairn_tier_capture_chain(s, 5, yield, NULL, &bud, &cr), CAIRN_OK);
    assert_int_equal(cr.stop, CAIRN_TIER_STOP_END);
    assert_int_equal(cr.enqueued, 5);
    assert_int_equal(ns.contains, 5);
    assert_int_equal(ns.put, 5);
    cairn_tier_key_t keys[3] = {{.kind = CAIRN_TIER_BLOCK}, {.kind = CAIRN_TIER_BLOCK}, {.kind = CAIRN_TIER_BLOCK}};
    int32_t tokens[12] = {0};
    cairn_tier_chain_t c = {keys, tokens, 4, 3};
    cairn_tier_restore_sink_t sink = {NULL, no_dest, NULL};
    cairn_tier_restore_result_t rr;
    assert_int_equal(cairn_tier_restore_chain(s, &c, 0, &sink, &rr), CAIRN_OK);
    assert_int_equal(rr.expected, 0);
    assert_int_equal(rr.loaded, 0);
    assert_int_equal(rr.stop, CAIRN_ENOENT);
    assert_int_equal(ns.chain_length, 1);
    assert_int_equal(ns.get, 1); /* the walk still asks: another process may have written it */
    assert_int_equal(cairn_tier_store_verify(s, NULL, NULL), CAIRN_EUNSUPPORTED);
    cairn_tier_store_destroy(s);
    assert_int_equal(ns.destroy, 1);
}

/* ---- the engine over a store it does not know ---- */

#define N_GEN 4
#define MAX_VOCAB 4096

typedef struct {
    float logits[MAX_VOCAB]; /* last prompt position */
    int32_t ids[N_GEN];
    int hot, restored;
    cairn_engine_cold_counters_t cc;
} run_t;

/* One prompt, N_GEN greedy tokens, release (capture), destroy. store NULL: tier off. */
static void run(const char *model, const int32_t *prompt, int n, cairn_tier_store_t *store, run_t *r)
{
    memset(r, 0, sizeof *r);
    cairn_checkpoint_t *ck = fixture_open(model);
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.n_threads = 2;
    o.pool_mib = 64;
    o.cold = store ? 1 : -1;
    o.cold_store = store;
    o.cold_capture_blocks = 1 << 16;
    o.cold_capture_ms = 20000;
    cairn_engine_t *e = NULL;
    char err[256];
    assert_int_equal(cairn_engine_create(ck, &o, &e, err, sizeof err), CAIRN_OK);
    const int vocab = cairn_engine_config(e)->vocab;
    assert_true(vocab <= MAX_VOCAB);
    cairn_seq_t *s = NULL;
    assert_int_equal(cairn_seq_begin(e, "tenant-a", prompt, n, &s, &r->hot), CAIRN_OK);
    r->restored = cairn_seq_restored_tokens(s);
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
    cairn_seq_release(s);
    cairn_engine_cold_flush(e);
    cairn_engine_cold_counters(e, &r->cc);
    cairn_engine_destroy(e);
    cairn_checkpoint_close(ck);
}

static void assert_same_output(const run_t *a, const run_t *b)
{
    assert_memory_equal(a->logits, b->logits, sizeof a->logits);
    assert_memory_equal(a->ids, b->ids, sizeof a->ids);
}

static void test_engine_over_null_store(void **state)
{
    (void)state;
    int n = 0;
    int32_t *prompt = fixture_prompt("qwen3", "long_720", &n);
    static run_t off, on;
    run("qwen3", prompt, n, NULL, &off);
    null_store_t ns = {{&null_ops}, 0, 0, 0, 0, 0, 0, 0};
    run("qwen3", prompt, n, &ns.base, &on);
    assert_same_output(&off, &on);
    assert_true(on.cc.enabled);
    assert_int_equal(on.cc.restore_lookups, 1);
    assert_int_equal(on.cc.restored_blocks, 0);
    assert_int_equal(on.restored, 0);
    assert_int_equal(ns.chain_length, 1);
    assert_int_equal(ns.get, 1);
    assert_true(ns.contains >= n / 16 && ns.put >= n / 16); /* the release captured the blocks */
    assert_int_equal(on.cc.captured_blocks, (uint64_t)ns.put);
    assert_true(ns.flush >= 1);
    assert_int_equal(ns.destroy, 0); /* lent: the engine never destroys it */
    assert_string_equal(on.cc.store.root, "null");
    free(prompt);
}

typedef struct {
    cairn_tier_entry_t e[128];
    size_t n;
} entries_t;

static int collect(void *user, const cairn_tier_entry_t *e)
{
    entries_t *l = user;
    if (l->n < 128)
        l->e[l->n++] = *e;
    return 0;
}

/* The key of block i of the stored chain, found by following parent links from block 0. */
static cairn_tier_key_t chain_key(cairn_tier_store_t *s, size_t i)
{
    static entries_t l;
    l.n = 0;
    assert_int_equal(cairn_tier_store_foreach(s, collect, &l), CAIRN_OK);
    cairn_tier_hash_t prev = {{0}};
    for (size_t b = 0; b <= i; b++) {
        size_t k = 0;
        while (k < l.n && memcmp(l.e[k].parent.bytes, prev.bytes, 32))
            k++;
        assert_true(k < l.n);
        if (b == i)
            return l.e[k].key;
        prev = l.e[k].key.hash;
    }
    return l.e[0].key;
}

static void test_engine_restart_over_mem_store(void **state)
{
    (void)state;
    int n = 0;
    int32_t *prompt = fixture_prompt("qwen3", "long_720", &n);
    const size_t usable = (size_t)(n - 1) / 16;
    static run_t off, first, second, third;
    run("qwen3", prompt, n, NULL, &off);
    cairn_tier_store_t *m = NULL;
    assert_int_equal(tier_mem_create(NULL, &m), CAIRN_OK);
    /* A first engine persists the prompt into the store. */
    run("qwen3", prompt, n, m, &first);
    assert_same_output(&off, &first);
    assert_int_equal(first.restored, 0);
    assert_true(first.cc.store.objects >= usable);
    /* A fresh engine restores every usable block from it: the same bits. */
    run("qwen3", prompt, n, m, &second);
    assert_same_output(&off, &second);
    assert_int_equal(second.hot, 0);
    assert_int_equal(second.cc.restored_blocks, usable);
    assert_int_equal(second.restored, (int)(usable * 16));
    assert_int_equal(second.cc.store.corruptions, 0);
    /* Damage block 10: the restore stops there, the object is removed, the output holds. */
    cairn_tier_key_t k10 = chain_key(m, 10);
    bool domain = false; /* the tenant's domain reaches the store with the key */
    for (int b = 0; b < 32; b++)
        domain |= k10.domain.bytes[b] != 0;
    assert_true(domain);
    assert_int_equal(tier_mem_damage(m, &k10, 12345), CAIRN_OK);
    run("qwen3", prompt, n, m, &third);
    assert_same_output(&off, &third);
    assert_int_equal(third.cc.restored_blocks, 10);
    assert_int_equal(third.cc.store.corruptions, 1);
    cairn_tier_store_destroy(m);
    free(prompt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tier_logic_over_null_store),
        cmocka_unit_test(test_engine_over_null_store),
        cmocka_unit_test(test_engine_restart_over_mem_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
