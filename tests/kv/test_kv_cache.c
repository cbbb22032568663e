/* Tests of the public KV cache API: lifecycle, prefix reuse, domains, eviction, growth,
 * fork/COW, truncation, sliding windows, recurrent checkpoints, KV-shared layers,
 * counters, misuse and every error path (allocation failure injection, exhaustion,
 * storage failure, oversized salt). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <cjson/cJSON.h>

#include "kv_test_util.h"

#define BS 4
#define DIM 2048 /* 64 KiB per block (f32, bs 4): 16 blocks per MiB */

static cairn_kv_cache_t *make(const cairn_kv_layer_spec_t *layers, uint32_t n, uint64_t mib, uint64_t init)
{
    cairn_kv_config_t cfg = kvt_config(layers, n, BS, mib, init);
    cairn_kv_cache_t *c = NULL;
    assert_int_equal(cairn_kv_cache_create(&cfg, &c), 0);
    return c;
}

static void check(const cairn_kv_cache_t *c)
{
    assert_int_equal(kv_cache__check(c), 0);
}

static void seqn(int32_t *t, size_t n, int32_t start)
{
    for (size_t i = 0; i < n; i++)
        t[i] = start + (int32_t)i;
}

/* begin + compute everything + commit */
static cairn_kv_seq_t *run(cairn_kv_cache_t *c, const cairn_kv_hash_t *dom, const int32_t *t, size_t n,
                           size_t *P)
{
    cairn_kv_seq_t *s = NULL;
    assert_int_equal(cairn_kv_seq_begin(c, dom, NULL, 0, t, n, &s, P), 0);
    assert_int_equal(cairn_kv_seq_commit(s, n), 0);
    check(c);
    return s;
}

static void test_create_errors(void **state)
{
    (void)state;
    cairn_kv_cache_t *c = NULL;
    cairn_kv_layer_spec_t l = kvt_full(DIM);
    cairn_kv_config_t cfg = kvt_config(&l, 1, BS, 1, 0);
    assert_int_equal(cairn_kv_cache_create(NULL, &c), CAIRN_EINVAL);
    cfg.n_layers = 0;
    assert_int_equal(cairn_kv_cache_create(&cfg, &c), CAIRN_EINVAL);
    cfg.n_layers = 1;
    l.n_kv_heads = 0;
    assert_int_equal(cairn_kv_cache_create(&cfg, &c), CAIRN_EINVAL);
    l = kvt_full(1 << 20); /* 32 MiB blocks in a 1 MiB budget */
    assert_int_equal(cairn_kv_cache_create(&cfg, &c), CAIRN_ERANGE);
    assert_null(c);
    l = kvt_full(DIM);
    /* every allocation of create can fail, cleanly */
    int failures = 0;
    for (long i = 0; i < 40; i++) {
        cairn_alloc_fail_after(i, false);
        int rc = cairn_kv_cache_create(&cfg, &c);
        cairn_alloc_fail_after(-1, false);
        if (rc == 0) {
            cairn_kv_cache_destroy(c);
            break;
        }
        assert_int_equal(rc, CAIRN_ENOMEM);
        assert_null(c);
        failures++;
    }
    assert_true(failures >= 6);
    cairn_kv_cache_destroy(NULL);
}

static int warned;
static void log_count(cairn_log_level_t level, const char *msg, void *user)
{
    (void)user;
    if (level == CAIRN_LOG_WARN && strstr(msg, "CAIRN_KV_"))
        warned++;
}

static void test_knobs(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l = kvt_full(DIM);
    cairn_kv_cache_t *c;
    cairn_kv_stats_t st;
    cairn_log_set_handler(log_count, NULL);
    setenv("CAIRN_KV_MEMORY_MB", "2", 1);
    setenv("CAIRN_KV_INITIAL_MB", "1", 1);
    c = make(&l, 1, 4, 4);
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.blocks_max, 32);   /* env wins over config */
    assert_int_equal(st.blocks_total, 16);
    cairn_kv_cache_destroy(c);
    setenv("CAIRN_KV_MEMORY_MB", "lots", 1); /* unparseable: ignored with a warning */
    unsetenv("CAIRN_KV_INITIAL_MB");
    warned = 0;
    c = make(&l, 1, 3, 0);
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.blocks_max, 48);   /* config */
    assert_int_equal(st.blocks_total, 48); /* initial defaults to the max */
    assert_int_equal(warned, 1);
    cairn_kv_cache_destroy(c);
    unsetenv("CAIRN_KV_MEMORY_MB");
    setenv("CAIRN_KV_BLOCK_SIZE", "8", 1);
    c = make(&l, 1, 1, 0);
    assert_int_equal(cairn_kv_cache_block_size(c), 8);
    cairn_kv_cache_destroy(c);
    unsetenv("CAIRN_KV_BLOCK_SIZE");
    cairn_log_set_handler(NULL, NULL);
}

static void test_domain_salt(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l = kvt_full(DIM);
    cairn_kv_cache_t *c = make(&l, 1, 1, 0);
    cairn_kv_hash_t a, b, z, zero;
    memset(&zero, 0, sizeof zero);
    char big[CAIRN_KV_MAX_SALT + 1];
    memset(big, 'x', sizeof big);
    assert_int_equal(cairn_kv_domain_from_salt(c, big, sizeof big, &a), CAIRN_ERANGE);
    assert_int_equal(cairn_kv_domain_from_salt(c, big, CAIRN_KV_MAX_SALT, &a), 0);
    assert_int_equal(cairn_kv_domain_from_salt(c, "tenant-b", 8, &b), 0);
    assert_memory_not_equal(a.bytes, b.bytes, 32);
    assert_int_equal(cairn_kv_domain_from_salt(c, NULL, 0, &z), 0);
    assert_memory_equal(z.bytes, zero.bytes, 32);
    assert_int_equal(cairn_kv_domain_from_salt(c, "x", 1, NULL), CAIRN_EINVAL);
    cairn_kv_cache_destroy(c);
}

static void test_prefix_reuse_and_isolation(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l = kvt_full(DIM);
    cairn_kv_cache_t *c = make(&l, 1, 2, 0);
    int32_t t[20];
    seqn(t, 20, 100);
    size_t P = 99;
    cairn_kv_seq_t *s = run(c, NULL, t, 10, &P);
    assert_int_equal(P, 0);
    size_t nb;
    const uint32_t *tab = cairn_kv_seq_block_table(s, 0, &nb);
    assert_int_equal(nb, 3);
    uint32_t b0 = tab[0], b1 = tab[1];
    uint32_t freed;
    cairn_kv_seq_release(s, &freed);
    assert_int_equal(freed, 3);
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.blocks_cached, 2); /* two full blocks published, the partial freed */
    assert_int_equal(st.blocks_in_use, 0);
    /* same prompt extended: hits both blocks, same physical ids */
    s = run(c, NULL, t, 14, &P);
    assert_int_equal(P, 8);
    tab = cairn_kv_seq_block_table(s, 0, &nb);
    assert_int_equal(tab[0], b0);
    assert_int_equal(tab[1], b1);
    assert_int_equal(cairn_kv_seq_n_computed(s), 14);
    /* a prompt of exactly two full blocks can use only one: a token must be computed */
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t, 8, &P), 0);
    assert_int_equal(P, 4);
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t, 9, &P), 0);
    assert_int_equal(P, 8);
    /* another domain never sees it, nor do different extras */
    cairn_kv_hash_t dom;
    assert_int_equal(cairn_kv_domain_from_salt(c, "tenant", 6, &dom), 0);
    assert_int_equal(cairn_kv_cache_lookup(c, &dom, NULL, 0, t, 14, &P), 0);
    assert_int_equal(P, 0);
    cairn_kv_extra_key_t ek = {"adapter-7", 9};
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, &ek, 1, t, 14, &P), 0);
    assert_int_equal(P, 0);
    /* a divergent second block shares only the first */
    int32_t u[14];
    memcpy(u, t, sizeof u);
    u[5] = -5;
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, u, 14, &P), 0);
    assert_int_equal(P, 4);
    /* publish in the salted domain; the default domain still has its own */
    cairn_kv_seq_t *s2 = run(c, &dom, t, 14, &P);
    assert_int_equal(P, 0);
    tab = cairn_kv_seq_block_table(s2, 0, &nb);
    assert_int_not_equal(tab[0], b0);
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.hits, 1);
    assert_int_equal(st.misses, 2);
    assert_int_equal(st.hit_tokens, 8);
    assert_int_equal(st.query_tokens, 10 + 14 + 14);
    cairn_kv_seq_release(s, NULL);
    cairn_kv_seq_release(s2, NULL);
    check(c);
    cairn_kv_cache_destroy(c);
}

static void test_duplicate_publish_keeps_own(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l = kvt_full(DIM);
    cairn_kv_cache_t *c = make(&l, 1, 2, 0);
    int32_t t[9];
    seqn(t, 9, 1);
    cairn_kv_seq_t *a = NULL, *b = NULL;
    size_t P;
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, t, 9, &a, &P), 0);
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, t, 9, &b, &P), 0);
    assert_int_equal(P, 0); /* nothing published yet */
    assert_int_equal(cairn_kv_seq_commit(a, 9), 0);
    assert_int_equal(cairn_kv_seq_commit(b, 9), 0);
    check(c);
    size_t nb;
    uint32_t bb0 = cairn_kv_seq_block_table(b, 0, &nb)[0];
    assert_true(c->pool.blocks[cairn_kv_seq_block_table(a, 0, &nb)[0]].registered);
    assert_false(c->pool.blocks[bb0].registered);
    uint32_t freed;
    cairn_kv_seq_release(b, &freed);
    assert_int_equal(freed, 3);
    assert_int_equal(c->pool.blocks[bb0].state, KV_BLOCK_FREE);
    cairn_kv_seq_release(a, NULL);
    check(c);
    cairn_kv_cache_destroy(c);
}

/* Cold-tier restore path: an imported block is published under its chained hash in its
 * domain, attached by a later begin with the bytes the importer wrote, invisible to other
 * domains; misuse and duplicates are errors that change nothing. */
static void test_import_blocks(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l = kvt_full(DIM);
    cairn_kv_cache_t *c = make(&l, 1, 2, 0);
    int32_t t[9];
    seqn(t, 9, 300);
    cairn_kv_hash_t dom, other, h[2];
    assert_int_equal(cairn_kv_domain_from_salt(c, "tenant-a", 8, &dom), 0);
    assert_int_equal(cairn_kv_domain_from_salt(c, "tenant-b", 8, &other), 0);
    assert_int_equal(cairn_kv_cache_hash_blocks(c, &dom, NULL, 0, t, 8, h), 0);
    uint32_t ids[2];
    for (int i = 0; i < 2; i++) {
        void *bytes = NULL;
        assert_int_equal(cairn_kv_cache_import_begin(c, &ids[i], &bytes), 0);
        assert_ptr_equal(bytes, cairn_kv_cache_block_data(c, ids[i]));
        memset(bytes, 0x40 + i, cairn_kv_cache_block_bytes(c));
        assert_int_equal(cairn_kv_cache_import_publish(c, ids[i], &dom, &h[i]), 0);
        check(c);
    }
    /* handing the same block back again is refused */
    assert_int_equal(cairn_kv_cache_import_publish(c, ids[0], &dom, &h[0]), CAIRN_EINVAL);
    assert_int_equal(cairn_kv_cache_import_discard(c, ids[0]), CAIRN_EINVAL);
    assert_int_equal(cairn_kv_cache_import_discard(c, 0), CAIRN_EINVAL);
    assert_int_equal(cairn_kv_cache_import_publish(NULL, ids[0], &dom, &h[0]), CAIRN_EINVAL);
    check(c);
    size_t P = 0;
    assert_int_equal(cairn_kv_cache_lookup(c, &other, NULL, 0, t, 9, &P), 0);
    assert_int_equal(P, 0);
    cairn_kv_seq_t *s = NULL;
    assert_int_equal(cairn_kv_seq_begin(c, &dom, NULL, 0, t, 9, &s, &P), 0);
    assert_int_equal(P, 8);
    size_t nb;
    const uint32_t *tab = cairn_kv_seq_block_table(s, 0, &nb);
    assert_int_equal(tab[0], ids[0]);
    assert_int_equal(tab[1], ids[1]);
    assert_int_equal(((const uint8_t *)cairn_kv_cache_block_data(c, tab[1]))[7], 0x41);
    /* a second import of an already published block is a duplicate: freed, EBUSY */
    uint32_t dup;
    void *bytes = NULL;
    assert_int_equal(cairn_kv_cache_import_begin(c, &dup, &bytes), 0);
    assert_int_equal(cairn_kv_cache_import_publish(c, dup, &dom, &h[0]), CAIRN_EBUSY);
    check(c);
    /* a discarded block goes back to the free queue */
    assert_int_equal(cairn_kv_cache_import_begin(c, &dup, &bytes), 0);
    assert_int_equal(cairn_kv_cache_import_discard(c, dup), 0);
    assert_int_equal(c->pool.blocks[dup].state, KV_BLOCK_FREE);
    /* prefaulting imported blocks keeps their bytes; published or foreign ids are refused */
    uint32_t pf[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(cairn_kv_cache_import_begin(c, &pf[i], &bytes), 0);
        memset(bytes, 0x50 + i, cairn_kv_cache_block_bytes(c));
    }
    assert_int_equal(cairn_kv_cache_import_prefault(c, pf, 3), 0);
    assert_int_equal(cairn_kv_cache_import_prefault(c, NULL, 0), 0);
    for (int i = 0; i < 3; i++) {
        const uint8_t *b = cairn_kv_cache_block_data(c, pf[i]);
        assert_int_equal(b[0], 0x50 + i);
        assert_int_equal(b[cairn_kv_cache_block_bytes(c) - 1], 0x50 + i);
    }
    uint32_t bad[2] = {pf[0], ids[0]};
    assert_int_equal(cairn_kv_cache_import_prefault(c, bad, 2), CAIRN_EINVAL);
    bad[1] = 0;
    assert_int_equal(cairn_kv_cache_import_prefault(c, bad, 2), CAIRN_EINVAL);
    assert_int_equal(cairn_kv_cache_import_prefault(NULL, pf, 1), CAIRN_EINVAL);
    for (int i = 0; i < 3; i++)
        assert_int_equal(cairn_kv_cache_import_discard(c, pf[i]), 0);
    check(c);
    cairn_kv_seq_release(s, NULL);
    check(c);
    cairn_kv_cache_destroy(c);
}

/* cairn_kv_seq_retain: the blocks of a hinted prefix survive pressure that evicts
 * unhinted ones, even those released after it (plain LRU would take it before them:
 * test_lru_eviction_and_exhaustion); within each class the order stays LRU, and the
 * hinted blocks go last, the chain's tail first. */
static void test_retention_hint_eviction_order(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l = kvt_full(DIM);
    cairn_kv_cache_t *c = make(&l, 1, 1, 0); /* 16 blocks, 15 usable; 9 tokens = 3 blocks */
    int32_t t[4][9];
    for (int i = 0; i < 3; i++) {
        seqn(t[i], 9, 1000 * (i + 1));
        cairn_kv_seq_t *s = run(c, NULL, t[i], 9, NULL);
        if (i == 0)
            assert_int_equal(cairn_kv_seq_retain(s), 0); /* released first: the LRU's head */
        cairn_kv_seq_release(s, NULL);
        check(c);
    }
    assert_int_equal(cairn_kv_seq_retain(NULL), CAIRN_EINVAL);
    /* Prompt 0 reused by an unhinted sequence and released again keeps its mark; prompt 3,
     * released after it, is placed ahead of it. */
    cairn_kv_seq_release(run(c, NULL, t[0], 9, NULL), NULL);
    seqn(t[3], 9, 4000);
    cairn_kv_seq_release(run(c, NULL, t[3], 9, NULL), NULL);
    check(c);
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.blocks_cached, 8);
    assert_int_equal(st.blocks_free, 7);
    /* 13 blocks: 7 free + 6 evicted, prompts 1, 2 and 3's; plain LRU would take 0's */
    int32_t big[52];
    seqn(big, 52, 5000);
    cairn_kv_seq_t *s = NULL;
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, big, 52, &s, NULL), 0);
    check(c);
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.evictions, 6);
    size_t P;
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t[0], 9, &P), 0);
    assert_int_equal(P, 8);
    for (int i = 1; i < 4; i++) {
        assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t[i], 9, &P), 0);
        assert_int_equal(P, 0);
    }
    /* Only hinted blocks are left cached: they go too, the chain's tail first. */
    uint32_t ev;
    cairn_kv_cache_evict(c, 1, &ev);
    assert_int_equal(ev, 1);
    check(c);
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t[0], 9, &P), 0);
    assert_int_equal(P, 4);
    cairn_kv_cache_evict(c, 100, &ev);
    assert_int_equal(ev, 1);
    check(c);
    /* An evicted block loses its mark: computed again unhinted, it is plain LRU. */
    cairn_kv_seq_release(s, NULL);
    cairn_kv_seq_t *r = run(c, NULL, t[0], 9, NULL);
    size_t nb;
    uint32_t b0 = cairn_kv_seq_block_table(r, 0, &nb)[0];
    cairn_kv_seq_release(r, NULL);
    check(c);
    assert_false(c->pool.blocks[b0].retained);
    assert_int_equal(c->pool.lru_kept, KV_NONE);
    cairn_kv_cache_destroy(c);
}

/* Pins: a pinned cached block survives eviction and keeps its bytes; a pinned partial
 * block in a table is copied before an append writes into it; unpinning returns a block
 * to the LRU; misuse is refused. The invariant check counts pins as references. */
static void test_block_pins(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l = kvt_full(DIM);
    cairn_kv_cache_t *c = make(&l, 1, 1, 0); /* 16 blocks, 15 usable */
    int32_t t[9];
    seqn(t, 9, 700);
    cairn_kv_seq_t *s = run(c, NULL, t, 9, NULL); /* blocks 0, 1 full, block 2 partial */
    size_t nb;
    const uint32_t *tab = cairn_kv_seq_block_table(s, 0, &nb);
    uint32_t b0 = tab[0], b2 = tab[2];
    memset(cairn_kv_cache_block_data(c, b2), 0x33, cairn_kv_cache_block_bytes(c));
    assert_int_equal(cairn_kv_cache_block_pin(c, b2), 0);
    check(c);
    int32_t more = 5;
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(c, &st);
    uint64_t cow = st.cow_copies;
    assert_int_equal(cairn_kv_seq_append(s, &more, 1), 0); /* into the pinned partial block: a copy */
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.cow_copies, cow + 1);
    assert_int_equal(st.blocks_pinned, 1);
    tab = cairn_kv_seq_block_table(s, 0, &nb);
    assert_int_not_equal(tab[2], b2);
    check(c);
    cairn_kv_seq_release(s, NULL);
    /* Block 0 is cached now; pinned, it survives evicting everything. */
    assert_int_equal(cairn_kv_cache_block_pin(c, b0), 0);
    assert_int_equal(cairn_kv_cache_block_pin(c, b0), 0);
    check(c);
    uint32_t ev = 0;
    cairn_kv_cache_evict(c, 100, &ev);
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.blocks_cached, 0);
    assert_int_equal(st.blocks_pinned, 2);
    cairn_kv_hash_t h[2];
    assert_int_equal(cairn_kv_cache_hash_blocks(c, NULL, NULL, 0, t, 8, h), 0);
    assert_int_equal(cairn_kv_cache_find_block(c, 0, NULL, &h[0]), b0);
    assert_int_equal(cairn_kv_cache_find_block(c, 0, NULL, &h[1]), 0); /* evicted */
    assert_int_equal(cairn_kv_cache_find_block(c, 1, NULL, &h[0]), 0);  /* no such group */
    assert_int_equal(cairn_kv_cache_block_unpin(c, b0), 0);
    assert_int_equal(cairn_kv_cache_block_unpin(c, b0), 0);
    assert_int_equal(cairn_kv_cache_block_unpin(c, b0), CAIRN_EINVAL);
    assert_int_equal(cairn_kv_cache_block_unpin(c, b2), 0); /* unpublished: back to the free queue */
    assert_int_equal(cairn_kv_cache_block_pin(c, b2), CAIRN_EINVAL); /* free */
    assert_int_equal(cairn_kv_cache_block_pin(c, 0), CAIRN_EINVAL);
    assert_int_equal(cairn_kv_cache_block_pin(c, 1u << 20), CAIRN_EINVAL);
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.blocks_cached, 1);
    assert_int_equal(st.blocks_pinned, 0);
    assert_int_equal(st.blocks_in_use, 0);
    check(c);
    /* An import is pinned until published; unpin cannot take an import's pin. */
    uint32_t id;
    void *bytes;
    assert_int_equal(cairn_kv_cache_import_begin(c, &id, &bytes), 0);
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.blocks_pinned, 1);
    check(c);
    assert_int_equal(cairn_kv_cache_block_unpin(c, id), CAIRN_EINVAL);
    assert_int_equal(cairn_kv_cache_import_discard(c, id), 0);
    check(c);
    cairn_kv_cache_destroy(c);
}

/* A cache of several groups imports per group: the group-less publish is refused, the
 * group's publish makes the block attachable in that group only; group introspection. */
static void test_group_import(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t ls[3] = {kvt_sliding(DIM, 2 * BS), kvt_full(DIM), kvt_recurrent()};
    cairn_kv_config_t cfg = kvt_config(ls, 3, BS, 2, 0);
    cairn_kv_cache_t *c = NULL;
    assert_int_equal(cairn_kv_cache_create(&cfg, &c), 0);
    assert_int_equal(cairn_kv_cache_n_groups(c), 3);
    uint32_t gs, gf, gr;
    assert_int_equal(cairn_kv_cache_layer_group(c, 0, &gs), 0);
    assert_int_equal(cairn_kv_cache_layer_group(c, 1, &gf), 0);
    assert_int_equal(cairn_kv_cache_layer_group(c, 2, &gr), 0);
    assert_int_equal(cairn_kv_cache_layer_group(c, 3, &gr), CAIRN_EINVAL);
    cairn_kv_group_info_t gi;
    assert_int_equal(cairn_kv_cache_group_info(c, gs, &gi), 0);
    assert_int_equal(gi.kind, CAIRN_KV_LAYER_SLIDING);
    assert_int_equal(gi.window, 2 * BS);
    assert_int_equal(gi.n_layers, 1);
    assert_int_equal(cairn_kv_cache_group_info(c, gr, &gi), 0);
    assert_int_equal(gi.kind, CAIRN_KV_LAYER_RECURRENT);
    assert_int_equal(cairn_kv_cache_group_info(c, 3, &gi), CAIRN_EINVAL);
    assert_int_equal(cairn_kv_sliding_first_live(2 * BS, BS, 4 * BS), 2);
    assert_int_equal(cairn_kv_sliding_first_live(2 * BS, BS, BS), 0);
    int32_t t[9];
    seqn(t, 9, 900);
    cairn_kv_hash_t h[2];
    assert_int_equal(cairn_kv_cache_hash_blocks(c, NULL, NULL, 0, t, 8, h), 0);
    uint32_t id;
    void *bytes;
    assert_int_equal(cairn_kv_cache_import_begin(c, &id, &bytes), 0);
    assert_int_equal(cairn_kv_cache_import_publish(c, id, &(cairn_kv_hash_t){{0}}, &h[0]), CAIRN_EUNSUPPORTED);
    assert_int_equal(cairn_kv_cache_import_publish_group(c, id, gr, &(cairn_kv_hash_t){{0}}, &h[0]), CAIRN_EINVAL);
    assert_int_equal(cairn_kv_cache_import_publish_group(c, id, gf, &(cairn_kv_hash_t){{0}}, &h[0]), 0);
    check(c);
    assert_int_equal(cairn_kv_cache_find_block(c, gf, NULL, &h[0]), id);
    assert_int_equal(cairn_kv_cache_find_block(c, gs, NULL, &h[0]), 0);
    /* A checkpoint registered by key alone. */
    assert_false(cairn_kv_cache_checkpoint_has(c, &h[1]));
    assert_int_equal(cairn_kv_cache_checkpoint_add(c, &h[1]), 0);
    assert_true(cairn_kv_cache_checkpoint_has(c, &h[1]));
    cairn_kv_cache_destroy(c);
    cairn_kv_layer_spec_t dense = kvt_full(DIM);
    assert_int_equal(cairn_kv_cache_create(&(cairn_kv_config_t){0}, &c), CAIRN_EINVAL);
    cfg = kvt_config(&dense, 1, BS, 1, 0);
    assert_int_equal(cairn_kv_cache_create(&cfg, &c), 0);
    assert_int_equal(cairn_kv_cache_checkpoint_add(c, &h[1]), CAIRN_EUNSUPPORTED);
    cairn_kv_cache_destroy(c);
}

static void test_lru_eviction_and_exhaustion(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l = kvt_full(DIM);
    cairn_kv_cache_t *c = make(&l, 1, 1, 0); /* 16 blocks, 15 usable */
    int32_t t[3][9];
    uint32_t first[3];
    for (int i = 0; i < 3; i++) {
        seqn(t[i], 9, 1000 * (i + 1));
        cairn_kv_seq_t *s = run(c, NULL, t[i], 9, NULL);
        size_t nb;
        first[i] = cairn_kv_seq_block_table(s, 0, &nb)[0];
        cairn_kv_seq_release(s, NULL);
    }
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.blocks_cached, 6);
    assert_int_equal(st.blocks_free, 9);
    /* 11 blocks: 9 free + the 2 least recently released (prompt 0) */
    int32_t big[44];
    seqn(big, 44, 5000);
    cairn_kv_seq_t *s = NULL;
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, big, 44, &s, NULL), 0);
    check(c);
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.evictions, 2);
    assert_false(c->pool.blocks[first[0]].registered);
    assert_true(c->pool.blocks[first[1]].registered);
    size_t P;
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t[0], 9, &P), 0);
    assert_int_equal(P, 0);
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t[1], 9, &P), 0);
    assert_int_equal(P, 8);
    /* 4 cached remain; asking 5 more fails without evicting anything */
    int32_t more[20];
    seqn(more, 20, 9000);
    assert_int_equal(cairn_kv_seq_append(s, more, 20), CAIRN_EEXHAUSTED);
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.evictions, 2);
    assert_int_equal(st.blocks_cached, 4);
    assert_int_equal(cairn_kv_seq_n_tokens(s), 44);
    size_t nb;
    cairn_kv_seq_block_table(s, 0, &nb);
    assert_int_equal(nb, 11);
    cairn_kv_seq_t *s2 = NULL;
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, more, 20, &s2, NULL), CAIRN_EEXHAUSTED);
    assert_null(s2);
    check(c);
    /* explicit eviction */
    uint32_t ev;
    cairn_kv_cache_evict(c, 100, &ev);
    assert_int_equal(ev, 4);
    cairn_kv_seq_release(s, NULL);
    check(c);
    cairn_kv_cache_destroy(c);
}

/* The write-back filter: blocks it keeps are never evicted, the allocator takes the next
 * least recently used ones instead, and a request the blocks it lets go cannot cover
 * fails with nothing evicted. Fails if ensure_free ignores the filter (prompt 0's blocks,
 * the LRU head, would go) or evicts part of a request it cannot finish. */
typedef struct {
    cairn_kv_hash_t keep[4];
    int n_keep;
    bool keep_all;
    int asked;
} filter_t;

static bool keep_filter(void *user, uint32_t block, uint32_t group, const cairn_kv_hash_t *hash,
                        const cairn_kv_hash_t *domain)
{
    (void)block;
    (void)domain;
    filter_t *f = user;
    f->asked++;
    assert_int_equal(group, 0);
    if (f->keep_all)
        return false;
    for (int i = 0; i < f->n_keep; i++)
        if (!memcmp(f->keep[i].bytes, hash->bytes, sizeof hash->bytes))
            return false;
    return true;
}

static void test_evict_filter(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l = kvt_full(DIM);
    cairn_kv_cache_t *c = make(&l, 1, 1, 0); /* 16 blocks, 15 usable */
    int32_t t[3][9];
    for (int i = 0; i < 3; i++) {
        seqn(t[i], 9, 1000 * (i + 1));
        cairn_kv_seq_release(run(c, NULL, t[i], 9, NULL), NULL);
    }
    filter_t f = {.n_keep = 2};
    assert_int_equal(cairn_kv_cache_hash_blocks(c, NULL, NULL, 0, t[0], 8, f.keep), 0);
    cairn_kv_cache_set_evict_filter(c, keep_filter, &f);
    /* 11 blocks: 9 free + 2 cached; prompt 0's (the LRU head) are kept, prompt 1's go. */
    int32_t big[44];
    seqn(big, 44, 5000);
    cairn_kv_seq_t *s = NULL;
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, big, 44, &s, NULL), 0);
    check(c);
    size_t P;
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t[0], 9, &P), 0);
    assert_int_equal(P, 8);
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t[1], 9, &P), 0);
    assert_int_equal(P, 0);
    assert_true(f.asked >= 2);
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.evictions, 2);
    /* Keeping everything: a request that needs an eviction fails and evicts nothing. */
    f.keep_all = true;
    int32_t more[8];
    seqn(more, 8, 9000);
    assert_int_equal(cairn_kv_seq_append(s, more, 8), CAIRN_EEXHAUSTED);
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.evictions, 2);
    assert_int_equal(st.blocks_cached, 4);
    /* Letting prompt 2's blocks go (only prompt 0's kept): the append fits. */
    f.keep_all = false;
    assert_int_equal(cairn_kv_seq_append(s, more, 8), 0);
    check(c);
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t[0], 9, &P), 0);
    assert_int_equal(P, 8);
    cairn_kv_cache_set_evict_filter(c, NULL, NULL);
    cairn_kv_seq_release(s, NULL);
    check(c);
    cairn_kv_cache_destroy(c);
}

/* A finished conversation releases its blocks last-first, so pressure trims it from its end:
 * after every eviction the next turn still finds the longest prefix left in the pool. With
 * a first-to-last release the first eviction would take block 0 and the next turn would
 * find nothing although 9 of its 10 blocks are still cached. */
static void test_pressure_trims_conversation_from_its_end(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l = kvt_full(DIM);
    cairn_kv_cache_t *c = make(&l, 1, 1, 0); /* 16 blocks, 15 usable, no growth */
    int32_t conv[44];                        /* 40 tokens (10 blocks) + the next turn */
    seqn(conv, 44, 100);
    cairn_kv_seq_t *s = run(c, NULL, conv, 40, NULL);
    size_t nb;
    uint32_t ids[10];
    memcpy(ids, cairn_kv_seq_block_table(s, 0, &nb), sizeof ids);
    assert_int_equal(nb, 10);
    cairn_kv_seq_release(s, NULL);
    check(c);
    size_t P;
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, conv, 44, &P), 0);
    assert_int_equal(P, 40);
    /* 7 blocks for another request: 5 free, then 2 evicted from the conversation's end */
    int32_t other[28];
    seqn(other, 28, 5000);
    cairn_kv_seq_t *o = NULL;
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, other, 28, &o, NULL), 0);
    check(c);
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.evictions, 2);
    for (int j = 0; j < 10; j++)
        assert_int_equal(c->pool.blocks[ids[j]].registered, j < 8);
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, conv, 44, &P), 0);
    assert_int_equal(P, 32);
    /* 3 more: the prefix shrinks by exactly 3 blocks */
    int32_t more[12];
    seqn(more, 12, 9000);
    assert_int_equal(cairn_kv_seq_append(o, more, 12), 0);
    check(c);
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.evictions, 5);
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, conv, 44, &P), 0);
    assert_int_equal(P, 20);
    /* the next turn reuses those 5 blocks and computes only the rest */
    cairn_kv_seq_release(o, NULL);
    cairn_kv_seq_t *next = NULL;
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, conv, 44, &next, &P), 0);
    assert_int_equal(P, 20);
    assert_memory_equal(cairn_kv_seq_block_table(next, 0, &nb), ids, 5 * sizeof *ids);
    check(c);
    cairn_kv_seq_release(next, NULL);
    check(c);
    cairn_kv_cache_destroy(c);
}

static void test_grow_on_demand(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l = kvt_full(DIM);
    cairn_kv_cache_t *c = make(&l, 1, 8, 1); /* 16 initial, 128 max */
    cairn_kv_layer_view_t v;
    assert_int_equal(cairn_kv_layer_view(c, 0, &v), 0);
    int32_t t[60];
    seqn(t, 60, 1);
    cairn_kv_seq_t *s = run(c, NULL, t, 60, NULL); /* 15 blocks, fits */
    size_t nb;
    const uint32_t *tab = cairn_kv_seq_block_table(s, 0, &nb);
    uint32_t ids[15];
    memcpy(ids, tab, sizeof ids);
    for (int j = 0; j < 15; j++)
        for (uint32_t slot = 0; slot < BS; slot++) {
            float *k = cairn_kv_view_k(&v, ids[j], slot), *vv = cairn_kv_view_v(&v, ids[j], slot);
            k[0] = (float)(j * 10 + slot);
            vv[DIM - 1] = -(float)(j * 10 + slot);
        }
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.grows, 0);
    uint8_t *base = v.base;
    /* 1 more block: grow to max(2*16, 16+1) = 32 */
    int32_t x = 7;
    assert_int_equal(cairn_kv_seq_commit(s, 60), 0);
    assert_int_equal(cairn_kv_seq_append(s, &x, 1), 0);
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.grows, 1);
    assert_int_equal(st.blocks_total, 32);
    assert_int_equal(st.bytes_committed, 32 * 65536);
    /* a big request jumps straight to what it needs: 32 + (need - free) */
    int32_t big[4 * 70];
    seqn(big, 4 * 70, 7000);
    cairn_kv_seq_t *s2 = NULL;
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, big, 4 * 70, &s2, NULL), 0);
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.grows, 2);
    assert_int_equal(st.blocks_total, 32 + (70 - 15));
    /* ids and data survive every grow; the base never moves */
    assert_int_equal(cairn_kv_layer_view(c, 0, &v), 0);
    assert_ptr_equal(v.base, base);
    tab = cairn_kv_seq_block_table(s, 0, &nb);
    for (int j = 0; j < 15; j++) {
        assert_int_equal(tab[j], ids[j]);
        for (uint32_t slot = 0; slot < BS; slot++) {
            float *k = cairn_kv_view_k(&v, ids[j], slot), *vv = cairn_kv_view_v(&v, ids[j], slot);
            assert_true(k[0] == (float)(j * 10 + slot));
            assert_true(vv[DIM - 1] == -(float)(j * 10 + slot));
        }
    }
    /* larger than the whole pool: refused at once, without growing */
    int32_t huge[4 * 200];
    seqn(huge, 4 * 200, 20000);
    cairn_kv_seq_t *s3 = NULL;
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, huge, 4 * 200, &s3, NULL), CAIRN_EEXHAUSTED);
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.blocks_total, 32 + (70 - 15));
    /* fits the pool but not what is left: grows to the max, then a clear exhaustion */
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, huge, 4 * 120, &s3, NULL), CAIRN_EEXHAUSTED);
    assert_null(s3);
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.blocks_total, 128);
    assert_int_equal(cairn_kv_cache_grow(c, 1000), CAIRN_EEXHAUSTED);
    assert_int_equal(cairn_kv_cache_grow(c, 1), 0);
    check(c);
    cairn_kv_cache_destroy(c); /* releases the open sequences too */
}

static void test_fork_copy_on_write(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l = kvt_full(DIM);
    cairn_kv_cache_t *c = make(&l, 1, 2, 0);
    cairn_kv_layer_view_t v;
    assert_int_equal(cairn_kv_layer_view(c, 0, &v), 0);
    int32_t t[6];
    seqn(t, 6, 1);
    cairn_kv_seq_t *p = NULL, *ch = NULL;
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, t, 6, &p, NULL), 0);
    assert_int_equal(cairn_kv_seq_fork(p, &ch), CAIRN_ESTATE); /* uncomputed tokens */
    size_t nb;
    const uint32_t *tab = cairn_kv_seq_block_table(p, 0, &nb);
    uint32_t last = tab[1];
    ((float *)cairn_kv_view_k(&v, last, 1))[3] = 42.0f;
    assert_int_equal(cairn_kv_seq_commit(p, 6), 0);
    assert_int_equal(cairn_kv_seq_fork(p, &ch), 0);
    check(c);
    assert_int_equal(c->pool.blocks[last].ref, 2);
    assert_int_equal(cairn_kv_seq_n_tokens(ch), 6);
    assert_memory_equal(cairn_kv_seq_tokens(ch), t, sizeof t);
    int32_t a = 77, b = 88;
    assert_int_equal(cairn_kv_seq_append(ch, &b, 1), 0);
    const uint32_t *ctab = cairn_kv_seq_block_table(ch, 0, &nb);
    assert_int_not_equal(ctab[1], last); /* the child copied the shared partial block */
    assert_int_equal(ctab[0], cairn_kv_seq_block_table(p, 0, &nb)[0]);
    assert_true(((float *)cairn_kv_view_k(&v, ctab[1], 1))[3] == 42.0f);
    assert_int_equal(c->pool.blocks[last].ref, 1);
    assert_int_equal(cairn_kv_seq_append(p, &a, 1), 0); /* now sole owner: no copy */
    assert_int_equal(cairn_kv_seq_block_table(p, 0, &nb)[1], last);
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.cow_copies, 1);
    assert_int_equal(st.sequences, 2);
    check(c);
    cairn_kv_seq_release(p, NULL);
    cairn_kv_seq_release(ch, NULL);
    check(c);
    cairn_kv_cache_destroy(c);
}

static void test_truncate_end_turn_preempt(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l = kvt_full(DIM);
    cairn_kv_cache_t *c = make(&l, 1, 2, 0);
    int32_t t[12];
    seqn(t, 12, 1);
    cairn_kv_seq_t *s = run(c, NULL, t, 12, NULL);
    assert_int_equal(cairn_kv_seq_truncate(s, 13), CAIRN_ERANGE);
    assert_int_equal(cairn_kv_seq_truncate(s, 2), 0); /* published block 2 is now partial */
    size_t nb;
    const uint32_t *tab = cairn_kv_seq_block_table(s, 0, &nb);
    assert_int_equal(nb, 3);
    uint32_t b2 = tab[2];
    assert_int_equal(cairn_kv_seq_n_computed(s), 10);
    assert_true(c->pool.blocks[b2].registered);
    int32_t x = -1;
    assert_int_equal(cairn_kv_seq_append(s, &x, 1), 0); /* sole owner: unpublished in place */
    assert_false(c->pool.blocks[b2].registered);
    assert_int_equal(cairn_kv_seq_block_table(s, 0, &nb)[2], b2);
    size_t P;
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t, 12, &P), 0);
    assert_int_equal(P, 8);
    check(c);
    /* end turn drops the uncomputed token and nothing else */
    size_t dropped;
    assert_int_equal(cairn_kv_seq_end_turn(s, &dropped), 0);
    assert_int_equal(dropped, 1);
    assert_int_equal(cairn_kv_seq_n_tokens(s), 10);
    check(c);
    /* preempt: all blocks released, history kept */
    uint32_t freed;
    assert_int_equal(cairn_kv_seq_preempt(s, &freed), 0);
    assert_int_equal(freed, 3);
    assert_true(cairn_kv_seq_preempted(s));
    assert_int_equal(cairn_kv_seq_preempt(s, &freed), CAIRN_ESTATE);
    assert_int_equal(cairn_kv_seq_append(s, &x, 1), CAIRN_ESTATE);
    assert_int_equal(cairn_kv_seq_commit(s, 1), CAIRN_ESTATE);
    assert_int_equal(cairn_kv_seq_truncate(s, 1), CAIRN_ESTATE);
    assert_int_equal(cairn_kv_seq_end_turn(s, NULL), CAIRN_ESTATE);
    cairn_kv_seq_block_table(s, 0, &nb);
    assert_int_equal(nb, 0);
    check(c);
    assert_int_equal(cairn_kv_seq_resume(s, &P), 0);
    assert_int_equal(P, 8); /* its own published blocks come back */
    assert_int_equal(cairn_kv_seq_resume(s, &P), CAIRN_ESTATE);
    assert_int_equal(cairn_kv_seq_commit(s, 7), CAIRN_ERANGE);
    assert_int_equal(cairn_kv_seq_commit(s, 11), CAIRN_ERANGE);
    assert_int_equal(cairn_kv_seq_truncate(s, 10), 0);
    assert_int_equal(cairn_kv_seq_n_tokens(s), 0);
    check(c);
    cairn_kv_seq_release(s, NULL);
    check(c);
    cairn_kv_cache_destroy(c);
}

static void test_sliding_window(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l[2] = {kvt_full(DIM / 2), kvt_sliding(DIM / 2, 8)};
    cairn_kv_cache_t *c = make(l, 2, 4, 0);
    int32_t t[26];
    seqn(t, 26, 1);
    cairn_kv_seq_t *s = NULL;
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, t, 26, &s, NULL), 0);
    for (size_t n = 1; n <= 26; n++) {
        assert_int_equal(cairn_kv_seq_commit(s, n), 0);
        size_t nb;
        const uint32_t *sl = cairn_kv_seq_block_table(s, 1, &nb);
        const uint32_t *fu = cairn_kv_seq_block_table(s, 0, &nb);
        size_t lo = n + 1 > 8 ? (n + 1 - 8) / BS : 0;
        for (size_t j = 0; j < nb; j++) {
            assert_int_not_equal(fu[j], 0);
            if (j < lo)
                assert_int_equal(sl[j], CAIRN_KV_NULL_BLOCK);
            else
                assert_int_not_equal(sl[j], CAIRN_KV_NULL_BLOCK);
        }
        check(c);
    }
    /* n = 26: lo = 4; truncating 3 keeps lo(23) = 4; truncating 6 needs block 3 again */
    assert_int_equal(cairn_kv_seq_truncate(s, 6), CAIRN_ERANGE);
    assert_int_equal(cairn_kv_seq_truncate(s, 3), 0);
    check(c);
    /* the published sliding blocks outside the window went to the cache */
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.blocks_cached, 4);
    cairn_kv_seq_release(s, NULL);
    check(c);
    cairn_kv_cache_destroy(c);
}

static void test_sliding_prefix_needs_only_window(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l = kvt_sliding(DIM, 8);
    cairn_kv_cache_t *c = make(&l, 1, 2, 0);
    int32_t t[25];
    seqn(t, 25, 1);
    cairn_kv_seq_t *s = run(c, NULL, t, 24, NULL);
    cairn_kv_seq_release(s, NULL);
    /* LRU order is 0,1,2,3 (released by the window at commit), then 4,5 (release) */
    uint32_t ev;
    size_t P;
    cairn_kv_cache_evict(c, 2, &ev);
    assert_int_equal(ev, 2);
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t, 17, &P), 0);
    assert_int_equal(P, 16); /* lo(16) = 9 / 4 = 2: needs blocks 2 and 3 only */
    cairn_kv_cache_evict(c, 1, &ev);
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t, 17, &P), 0);
    assert_int_equal(P, 0); /* every shorter boundary needs an evicted block */
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t, 25, &P), 0);
    assert_int_equal(P, 24); /* lo(24) = 17 / 4 = 4: needs blocks 4 and 5 only */
    s = NULL;
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, t, 25, &s, &P), 0);
    assert_int_equal(P, 24);
    size_t nb;
    const uint32_t *tab = cairn_kv_seq_block_table(s, 0, &nb);
    assert_int_equal(nb, 7);
    for (int j = 0; j < 4; j++)
        assert_int_equal(tab[j], 0);
    for (int j = 4; j < 7; j++)
        assert_int_not_equal(tab[j], 0);
    check(c);
    cairn_kv_cache_destroy(c);
}

static int ckpt_evictions;
static void on_ckpt_evict(void *user, const cairn_kv_hash_t *key)
{
    (void)key;
    (*(int *)user)++;
}

static void test_recurrent_checkpoints(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l[3] = {kvt_full(DIM), kvt_recurrent(), kvt_shared(0)};
    cairn_kv_config_t cfg = kvt_config(l, 3, BS, 2, 0);
    cfg.max_checkpoints = 2;
    cfg.on_checkpoint_evict = on_ckpt_evict;
    cfg.checkpoint_user = &ckpt_evictions;
    cairn_kv_cache_t *c = NULL;
    assert_int_equal(cairn_kv_cache_create(&cfg, &c), 0);
    int32_t t[17];
    seqn(t, 17, 1);
    cairn_kv_seq_t *s = run(c, NULL, t, 16, NULL);
    size_t P;
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t, 17, &P), 0);
    assert_int_equal(P, 0); /* blocks are cached but no recurrent checkpoint exists */
    cairn_kv_hash_t k8, kb;
    assert_int_equal(cairn_kv_seq_checkpoint(s, 6, &k8), CAIRN_ERANGE);
    assert_int_equal(cairn_kv_seq_checkpoint(s, 20, &k8), CAIRN_ERANGE);
    assert_int_equal(cairn_kv_seq_checkpoint(s, 8, &k8), 0);
    assert_int_equal(cairn_kv_seq_boundary_key(s, 8, &kb), 0);
    assert_memory_equal(k8.bytes, kb.bytes, 32);
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t, 17, &P), 0);
    assert_int_equal(P, 8);
    assert_int_equal(cairn_kv_seq_checkpoint(s, 16, NULL), 0);
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t, 17, &P), 0);
    assert_int_equal(P, 16);
    assert_int_equal(cairn_kv_seq_checkpoint(s, 4, NULL), 0); /* capacity 2: 8 is dropped */
    assert_int_equal(ckpt_evictions, 1);
    assert_int_equal(cairn_kv_cache_checkpoint_drop(c, &k8), CAIRN_ENOENT);
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t, 15, &P), 0);
    assert_int_equal(P, 4);
    /* shared layer walks its source's table and storage */
    cairn_kv_layer_view_t v0, v2;
    assert_int_equal(cairn_kv_layer_view(c, 0, &v0), 0);
    assert_int_equal(cairn_kv_layer_view(c, 2, &v2), 0);
    assert_ptr_equal(v0.base, v2.base);
    assert_int_equal(v0.k_offset, v2.k_offset);
    assert_int_equal(v0.v_offset, v2.v_offset);
    assert_int_equal(v0.slot_stride, v2.slot_stride);
    assert_int_equal(v0.block_stride, v2.block_stride);
    assert_int_equal(cairn_kv_layer_view(c, 1, &v0), CAIRN_EINVAL);
    assert_int_equal(cairn_kv_layer_view(c, 3, &v0), CAIRN_EINVAL);
    size_t n0, n1, n2;
    assert_ptr_equal(cairn_kv_seq_block_table(s, 0, &n0), cairn_kv_seq_block_table(s, 2, &n2));
    assert_null(cairn_kv_seq_block_table(s, 1, &n1));
    assert_int_equal(n1, 0);
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.checkpoints, 2);
    cairn_kv_cache_destroy(c);
    /* no recurrent layer: checkpoints unsupported */
    cairn_kv_layer_spec_t f = kvt_full(DIM);
    c = make(&f, 1, 1, 0);
    s = run(c, NULL, t, 8, NULL);
    assert_int_equal(cairn_kv_seq_checkpoint(s, 4, NULL), CAIRN_EUNSUPPORTED);
    cairn_kv_cache_destroy(c);
}

static void test_all_or_nothing_across_groups(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l[2] = {kvt_full(DIM), kvt_sliding(DIM, 4)};
    cairn_kv_cache_t *c = make(l, 2, 1, 0); /* 15 usable blocks */
    int32_t t[28];
    seqn(t, 28, 1);
    cairn_kv_seq_t *s = NULL;
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, t, 28, &s, NULL), 0); /* 7 + 7 */
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.blocks_free, 1);
    int32_t x[4] = {1, 2, 3, 4};
    /* the full group could take the last free block but the sliding one cannot */
    assert_int_equal(cairn_kv_seq_append(s, x, 4), CAIRN_EEXHAUSTED);
    size_t n0, n1;
    cairn_kv_seq_block_table(s, 0, &n0);
    cairn_kv_seq_block_table(s, 1, &n1);
    assert_int_equal(n0, 7);
    assert_int_equal(n1, 7);
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.blocks_free, 1);
    /* once the window releases blocks, it fits */
    assert_int_equal(cairn_kv_seq_commit(s, 28), 0);
    assert_int_equal(cairn_kv_seq_append(s, x, 4), 0);
    check(c);
    cairn_kv_cache_destroy(c);
}

/* Every allocation inside each operation can fail; the cache stays consistent. */
static void test_alloc_failure_injection(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l[3] = {kvt_full(DIM / 4), kvt_sliding(DIM / 4, 8), kvt_recurrent()};
    int32_t t[40];
    seqn(t, 40, 3);
    int failed_ops = 0;
    for (long i = 0; i < 60; i++) {
        cairn_kv_cache_t *c = make(l, 3, 4, 1);
        cairn_kv_seq_t *a = run(c, NULL, t, 9, NULL);
        cairn_alloc_fail_after(i, true);
        cairn_kv_seq_t *b = NULL, *f = NULL;
        int rc = cairn_kv_seq_begin(c, NULL, NULL, 0, t, 40, &b, NULL);
        if (!rc)
            rc = cairn_kv_seq_commit(b, 40);
        if (!rc)
            rc = cairn_kv_seq_fork(b, &f);
        int32_t more[100];
        seqn(more, 100, 77);
        if (!rc)
            rc = cairn_kv_seq_append(f, more, 100); /* grows the pool */
        if (!rc)
            rc = cairn_kv_seq_commit(f, 140);
        size_t P;
        if (!rc)
            rc = cairn_kv_cache_lookup(c, NULL, NULL, 0, more, 100, &P);
        char *js = NULL;
        cairn_kv_stats_t st;
        cairn_kv_cache_stats(c, &st);
        if (!rc)
            rc = cairn_kv_stats_to_json(&st, &js);
        cairn_alloc_fail_after(-1, false);
        if (rc) {
            assert_int_equal(rc, CAIRN_ENOMEM);
            failed_ops++;
        } else {
            assert_non_null(js);
        }
        cairn_free(js);
        check(c);
        cairn_kv_seq_release(a, NULL);
        cairn_kv_seq_release(f, NULL);
        check(c);
        cairn_kv_cache_destroy(c);
    }
    assert_true(failed_ops >= 10);
}

/* A storage backend that fails commits after a budget, to test grow failure handling. */
static int commits_left;
static size_t fail_gran(void *ctx) { return cairn_kv_storage_host()->granularity(ctx); }
static int fail_reserve(void *ctx, size_t n, uint8_t **base)
{
    return commits_left < 0 ? CAIRN_ENOMEM : cairn_kv_storage_host()->reserve(ctx, n, base);
}
static int fail_commit(void *ctx, uint8_t *base, size_t a, size_t b)
{
    if (commits_left-- <= 0)
        return CAIRN_ENOMEM;
    return cairn_kv_storage_host()->commit(ctx, base, a, b);
}
static void fail_copy(void *ctx, uint8_t *d, const uint8_t *s, size_t n) { cairn_kv_storage_host()->copy(ctx, d, s, n); }
static void fail_release(void *ctx, uint8_t *b, size_t n) { cairn_kv_storage_host()->release(ctx, b, n); }
static const cairn_kv_storage_ops_t failing = {.name = "failing", .granularity = fail_gran, .reserve = fail_reserve,
                                               .commit = fail_commit, .copy = fail_copy, .release = fail_release};

static void test_storage_failure(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l = kvt_full(DIM);
    cairn_kv_config_t cfg = kvt_config(&l, 1, BS, 4, 1);
    cfg.storage = &failing;
    cairn_kv_cache_t *c = NULL;
    commits_left = -1;
    assert_int_equal(cairn_kv_cache_create(&cfg, &c), CAIRN_ENOMEM);
    commits_left = 0;
    assert_int_equal(cairn_kv_cache_create(&cfg, &c), CAIRN_ENOMEM);
    commits_left = 1; /* initial commit only */
    assert_int_equal(cairn_kv_cache_create(&cfg, &c), 0);
    int32_t t[9];
    seqn(t, 9, 1);
    cairn_kv_seq_t *s = run(c, NULL, t, 9, NULL);
    cairn_kv_seq_release(s, NULL); /* 2 cached, 13 free */
    int32_t big[4 * 14];
    seqn(big, 4 * 14, 100);
    /* the grow fails; evicting one of the 2 cached blocks still serves 14 */
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, big, 4 * 14, &s, NULL), 0);
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(c, &st);
    assert_int_equal(st.grows, 0);
    assert_int_equal(st.evictions, 1);
    int32_t x[8] = {0};
    /* and when nothing is left, the backend's error is reported */
    assert_int_equal(cairn_kv_seq_append(s, x, 8), CAIRN_ENOMEM);
    assert_int_equal(cairn_kv_cache_grow(c, 10), CAIRN_ENOMEM);
    check(c);
    cairn_kv_cache_destroy(c);
}

static void test_stats_json(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l = kvt_full(DIM);
    cairn_kv_cache_t *c = make(&l, 1, 2, 1);
    int32_t t[9];
    seqn(t, 9, 1);
    cairn_kv_seq_t *s = run(c, NULL, t, 9, NULL);
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(c, &st);
    char *js = NULL;
    assert_int_equal(cairn_kv_stats_to_json(&st, &js), 0);
    cJSON *o = cJSON_Parse(js);
    assert_non_null(o);
    assert_int_equal(cJSON_GetObjectItem(o, "blocks_in_use")->valuedouble, 3);
    assert_int_equal(cJSON_GetObjectItem(o, "misses")->valuedouble, 1);
    assert_int_equal(cJSON_GetObjectItem(o, "blocks_total")->valuedouble, 16);
    assert_int_equal(cJSON_GetObjectItem(o, "blocks_max")->valuedouble, 32);
    assert_int_equal(cJSON_GetObjectItem(o, "block_bytes")->valuedouble, 65536);
    assert_int_equal(cJSON_GetObjectItem(o, "sequences")->valuedouble, 1);
    assert_int_equal(cJSON_GetObjectItem(o, "blocks_pinned")->valuedouble, 0);
    assert_int_equal(cJSON_GetArraySize(o), 19);
    cJSON_Delete(o);
    cairn_free(js);
    assert_int_equal(cairn_kv_stats_to_json(NULL, &js), CAIRN_EINVAL);
    cairn_alloc_fail_after(0, false);
    assert_int_equal(cairn_kv_stats_to_json(&st, &js), CAIRN_ENOMEM);
    cairn_alloc_fail_after(-1, false);
    cairn_kv_seq_release(s, NULL);
    cairn_kv_cache_destroy(c);
}

static void test_api_misuse(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t l = kvt_full(DIM);
    cairn_kv_cache_t *c = make(&l, 1, 1, 0);
    int32_t t[4] = {1, 2, 3, 4};
    cairn_kv_seq_t *s = NULL;
    size_t P;
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, t, 0, &s, NULL), CAIRN_EINVAL);
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, NULL, 4, &s, NULL), CAIRN_EINVAL);
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 1, t, 4, &s, NULL), CAIRN_EINVAL);
    assert_int_equal(cairn_kv_seq_begin(NULL, NULL, NULL, 0, t, 4, &s, NULL), CAIRN_EINVAL);
    assert_int_equal(cairn_kv_cache_lookup(c, NULL, NULL, 0, t, 0, &P), CAIRN_EINVAL);
    assert_int_equal(cairn_kv_seq_append(NULL, t, 1), CAIRN_EINVAL);
    assert_int_equal(cairn_kv_seq_begin(c, NULL, NULL, 0, t, 4, &s, NULL), 0);
    assert_int_equal(cairn_kv_seq_append(s, NULL, 1), CAIRN_EINVAL);
    assert_int_equal(cairn_kv_seq_append(s, t, 0), 0);
    assert_int_equal(cairn_kv_seq_commit(s, 5), CAIRN_ERANGE);
    assert_int_equal(cairn_kv_seq_resume(s, NULL), CAIRN_ESTATE);
    cairn_kv_hash_t k;
    assert_int_equal(cairn_kv_seq_boundary_key(s, 0, &k), CAIRN_ERANGE);
    assert_int_equal(cairn_kv_seq_boundary_key(s, 4, &k), 0);
    assert_int_equal(cairn_kv_seq_boundary_key(s, 8, &k), CAIRN_ERANGE);
    assert_int_equal(cairn_kv_cache_checkpoint_drop(c, &k), CAIRN_ENOENT);
    cairn_kv_seq_release(NULL, NULL);
    cairn_kv_cache_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_knobs),
        cmocka_unit_test(test_domain_salt),
        cmocka_unit_test(test_prefix_reuse_and_isolation),
        cmocka_unit_test(test_duplicate_publish_keeps_own),
        cmocka_unit_test(test_import_blocks),
        cmocka_unit_test(test_block_pins),
        cmocka_unit_test(test_group_import),
        cmocka_unit_test(test_lru_eviction_and_exhaustion),
        cmocka_unit_test(test_retention_hint_eviction_order),
        cmocka_unit_test(test_evict_filter),
        cmocka_unit_test(test_pressure_trims_conversation_from_its_end),
        cmocka_unit_test(test_grow_on_demand),
        cmocka_unit_test(test_fork_copy_on_write),
        cmocka_unit_test(test_truncate_end_turn_preempt),
        cmocka_unit_test(test_sliding_window),
        cmocka_unit_test(test_sliding_prefix_needs_only_window),
        cmocka_unit_test(test_recurrent_checkpoints),
        cmocka_unit_test(test_all_or_nothing_across_groups),
        cmocka_unit_test(test_alloc_failure_injection),
        cmocka_unit_test(test_storage_failure),
        cmocka_unit_test(test_stats_json),
        cmocka_unit_test(test_api_misuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
