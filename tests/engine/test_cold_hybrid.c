/*
 * test_cold_hybrid.c — restore rules of the cold tier that one process shows, over the
 * in-memory store lent to the engine (tier/mem): the hot prefix a restore extends is
 * held for the whole restore, and the hot-hit latch (blocks a sidecar-backed restore
 * published, found again without their state, reconcile down instead of resuming state
 * the engine does not have). Each compares logits and tokens with the tier-off run.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cairn/engine.h"
#include "engine/engine_fixtures.h"
#include "tier/mem/mem_store.h"

#define N_GEN 4
#define MAX_VOCAB 4096
#define BS 16

typedef struct {
    float logits[MAX_VOCAB]; /* last prompt position */
    int32_t ids[N_GEN];
    int hot, restored, n_past;
} out_t;

static cairn_engine_t *engine(cairn_checkpoint_t *ck, cairn_tier_store_t *store, int pool_mib, int ckpt_mib)
{
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.n_threads = 2;
    o.pool_mib = pool_mib;
    o.cold = store ? 1 : -1;
    o.cold_store = store;
    o.cold_capture_blocks = 1 << 16;
    o.cold_capture_ms = 20000;
    o.state_ckpt_mib = ckpt_mib;
    cairn_engine_t *e = NULL;
    char err[256];
    assert_int_equal(cairn_engine_create(ck, &o, &e, err, sizeof err), CAIRN_OK);
    return e;
}

/* One prompt in salt, N_GEN greedy tokens, release (capture). */
static void run(cairn_engine_t *e, const char *salt, const int32_t *prompt, int n, out_t *r)
{
    memset(r, 0, sizeof *r);
    const int vocab = cairn_engine_config(e)->vocab;
    assert_true(vocab <= MAX_VOCAB);
    cairn_seq_t *s = NULL;
    assert_int_equal(cairn_seq_begin(e, salt, prompt, n, &s, &r->hot), CAIRN_OK);
    r->restored = cairn_seq_restored_tokens(s);
    r->n_past = cairn_seq_n_past(s);
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
}

/* The tier-off run of model's long_720, computed once per process (the salt and what ran
 * before do not change it): the reference each case compares with. */
static void off_output(cairn_checkpoint_t *ck, const char *model, const int32_t *prompt, int n, out_t *out)
{
    static struct {
        const char *model;
        out_t r;
    } cache[4];
    static int n_cache;
    for (int i = 0; i < n_cache; i++)
        if (!strcmp(cache[i].model, model)) {
            *out = cache[i].r;
            return;
        }
    assert_true(n_cache < (int)(sizeof cache / sizeof cache[0]));
    cairn_engine_t *e = engine(ck, NULL, 64, 0);
    run(e, NULL, prompt, n, out);
    cairn_engine_destroy(e);
    cache[n_cache].model = model;
    cache[n_cache++].r = *out;
}

static void assert_same_output(const out_t *a, const out_t *b)
{
    assert_memory_equal(a->logits, b->logits, sizeof a->logits);
    assert_memory_equal(a->ids, b->ids, sizeof a->ids);
}

/*
 * The held hot prefix. A small pool holds the prompt's first 256 tokens as cached blocks,
 * released before other tenants' blocks fill the rest, so they are the least recently
 * used. The prompt then returns: its blocks past 256 come from the store, and the blocks
 * the restore takes must be found by evicting the other tenants' blocks, never the hot
 * prefix the restore extends (which would leave a hole: the restored blocks unreachable,
 * the restore wasted). Dense and hybrid alike.
 */
static void held_prefix_case(const char *model)
{
    int n = 0, nj = 0;
    int32_t *prompt = fixture_prompt(model, "long_720", &n);
    int32_t *junk = fixture_prompt(model, "shared_prefix_672", &nj);
    cairn_checkpoint_t *ck = fixture_open(model);
    out_t off, first, head, fill, back;
    off_output(ck, model, prompt, n, &off);
    cairn_tier_store_t *m = NULL;
    assert_int_equal(tier_mem_create(NULL, &m), CAIRN_OK);
    cairn_engine_t *e = engine(ck, m, 64, 0); /* persists the whole prompt */
    run(e, "tenant", prompt, n, &first);
    cairn_engine_destroy(e);
    assert_same_output(&off, &first);

    e = engine(ck, m, 1, 0);
    cairn_kv_stats_t ks;
    assert_int_equal(cairn_engine_kv_stats(e, &ks), CAIRN_OK);
    const uint32_t pool = ks.blocks_max - 1;
    assert_true(pool >= 60 && pool <= 200); /* the fixture's blocks in 1 MiB */
    /* The head: 256 tokens + 1, restored or computed, then cached. */
    run(e, "tenant", prompt, 257, &head);
    /* Other tenants fill every other block (most recently used), never evicting: a run
     * of m full blocks peaks at m + 1 blocks and leaves m cached. */
    for (int t = 0; t < 16; t++) {
        assert_int_equal(cairn_engine_kv_stats(e, &ks), CAIRN_OK);
        const int avail = (int)(ks.blocks_free + (ks.blocks_max - ks.blocks_total));
        if (avail < 4)
            break;
        int nb = avail - 2 < nj / BS ? avail - 2 : nj / BS;
        char salt[32];
        snprintf(salt, sizeof salt, "other-%d", t);
        run(e, salt, junk, nb * BS, &fill);
    }
    assert_int_equal(cairn_engine_kv_stats(e, &ks), CAIRN_OK);
    assert_int_equal(ks.evictions, 0); /* the head is still cached, the least recently used */
    assert_int_equal(cairn_engine_kv_stats(e, &ks), CAIRN_OK);
    assert_true(ks.blocks_free + (ks.blocks_max - ks.blocks_total) < 4);
    run(e, "tenant", prompt, n, &back);
    assert_same_output(&off, &back);
    assert_int_equal(back.hot, 256);
    assert_int_equal(back.n_past, (n - 1) / BS * BS); /* the restore reached past the hot head */
    assert_int_equal(back.restored, (n - 1) / BS * BS - 256);
    fprintf(stderr, "  %s: pool of %u blocks, hot 256 + restored %d tokens\n", model, pool, back.restored);
    cairn_engine_destroy(e);
    cairn_tier_store_destroy(m);
    cairn_checkpoint_close(ck);
    free(prompt);
    free(junk);
}

static void test_hot_prefix_held(void **state)
{
    (void)state;
    held_prefix_case("qwen3");
    held_prefix_case("lfm2");
}

/*
 * The hot-hit latch. The store holds a hybrid's blocks and its sidecars; an engine whose
 * checkpoint bank holds no state (budget 0) restores the blocks, but the bank refuses the
 * state, so the pool then holds published blocks of a sidecar-backed boundary with no
 * state at it. Neither that begin nor a later one of the same prompt (now a pure hot hit
 * of those blocks) may resume there: both reconcile down to a prefix whose state exists
 * (here none: everything is computed), with the output of the tier-off run.
 */
static void test_hot_hit_latch(void **state)
{
    (void)state;
    const char *model = "lfm2";
    int n = 0;
    int32_t *prompt = fixture_prompt(model, "long_720", &n);
    cairn_checkpoint_t *ck = fixture_open(model);
    out_t off, first, a, b;
    off_output(ck, model, prompt, n, &off);
    cairn_tier_store_t *m = NULL;
    assert_int_equal(tier_mem_create(NULL, &m), CAIRN_OK);
    cairn_engine_t *e = engine(ck, m, 64, 0);
    run(e, NULL, prompt, n, &first);
    cairn_engine_cold_counters_t cc;
    cairn_engine_cold_counters(e, &cc);
    assert_true(cc.sidecars_captured >= 2);
    cairn_engine_destroy(e);

    e = engine(ck, m, 64, -1); /* no checkpoint budget */
    run(e, NULL, prompt, n, &a);
    cairn_engine_cold_counters(e, &cc);
    assert_same_output(&off, &a);
    assert_int_equal(a.n_past, 0);
    assert_int_equal(a.restored, 0);
    assert_true(cc.install_failures >= 1);
    run(e, NULL, prompt, n, &b); /* the blocks are hot now, their state is not */
    assert_same_output(&off, &b);
    assert_int_equal(b.n_past, 0);
    assert_int_equal(b.hot, 0);
    cairn_engine_destroy(e);
    cairn_tier_store_destroy(m);
    cairn_checkpoint_close(ck);
    free(prompt);
}

/*
 * The restore's reads off the engine thread (cairn_seq_begin_async): another sequence
 * keeps decoding while the restoring one waits, and once admitted the restored sequence
 * computes exactly what the tier-off run computes (dense and hybrid).
 */
static void async_case(const char *model)
{
    int n = 0, ns = 0;
    int32_t *prompt = fixture_prompt(model, "long_720", &n);
    int32_t *other = fixture_prompt(model, "chat_short", &ns);
    cairn_checkpoint_t *ck = fixture_open(model);
    out_t off, first;
    off_output(ck, model, prompt, n, &off);
    cairn_tier_store_t *m = NULL;
    assert_int_equal(tier_mem_create(NULL, &m), CAIRN_OK);
    cairn_engine_t *e = engine(ck, m, 64, 0);
    run(e, NULL, prompt, n, &first);
    cairn_engine_destroy(e);

    e = engine(ck, m, 64, 0);
    const int vocab = cairn_engine_config(e)->vocab;
    cairn_seq_t *a = NULL, *b = NULL;
    int hot = -1;
    assert_int_equal(cairn_seq_begin(e, "other", other, ns, &a, &hot), CAIRN_OK);
    assert_int_equal(cairn_seq_begin_async(e, NULL, prompt, n, &b), CAIRN_OK);
    int steps = 0;
    for (;;) { /* the other sequence decodes while b's reads run */
        bool waiting = cairn_seq_restoring(b);
        cairn_batch_item_t it = {a, 0, CAIRN_LOGITS_LAST};
        const float *lg = NULL;
        int rows = 0;
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), CAIRN_OK);
        int32_t t = 0;
        for (int v = 1; v < vocab; v++)
            if (lg[v] > lg[t])
                t = v;
        assert_int_equal(cairn_seq_feed(a, &t, 1), CAIRN_OK);
        steps++;
        if (!waiting || steps > 2000)
            break;
    }
    int cached = -1;
    assert_int_equal(cairn_seq_begin_finish(b, &cached), CAIRN_OK);
    assert_int_equal(cached, 0);
    assert_int_equal(cairn_seq_restored_tokens(b), (n - 1) / BS * BS);
    assert_int_equal(cairn_seq_n_past(b), (n - 1) / BS * BS);
    assert_string_equal(cairn_seq_cold_reason(b), "none");
    out_t r;
    memset(&r, 0, sizeof r);
    for (int g = 0; g < N_GEN; g++) {
        cairn_batch_item_t it = {b, 0, CAIRN_LOGITS_LAST};
        const float *lg = NULL;
        int rows = 0;
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), CAIRN_OK);
        if (g == 0)
            memcpy(r.logits, lg, (size_t)vocab * sizeof(float));
        int best = 0;
        for (int v = 1; v < vocab; v++)
            if (lg[v] > lg[best])
                best = v;
        r.ids[g] = best;
        assert_int_equal(cairn_seq_feed(b, &r.ids[g], 1), CAIRN_OK);
    }
    assert_same_output(&off, &r);
    cairn_seq_release(a);
    cairn_seq_release(b);
    fprintf(stderr, "  %s: restored %d tokens off the engine thread, %d steps of another sequence meanwhile\n",
            model, (n - 1) / BS * BS, steps);
    cairn_engine_destroy(e);
    /* A sequence released (or left to the engine's destroy) while restoring: its reads are
     * waited for, what they read is installed as cached blocks, the pool stays sound. */
    e = engine(ck, m, 64, 0);
    cairn_seq_t *c = NULL, *d = NULL;
    assert_int_equal(cairn_seq_begin_async(e, NULL, prompt, n, &c), CAIRN_OK);
    cairn_seq_release(c);
    assert_int_equal(cairn_seq_begin_async(e, "tenant-d", prompt, n, &d), CAIRN_OK);
    cairn_engine_destroy(e);
    cairn_tier_store_destroy(m);
    cairn_checkpoint_close(ck);
    free(prompt);
    free(other);
}

static void test_restore_off_engine_thread(void **state)
{
    (void)state;
    async_case("qwen3");
    async_case("lfm2");
    async_case("gemma3");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hot_prefix_held),
        cmocka_unit_test(test_hot_hit_latch),
        cmocka_unit_test(test_restore_off_engine_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
