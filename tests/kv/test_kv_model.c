/*
 * Model-based randomized test of the KV cache core.
 *
 * Thousands of random operations (begin, append, commit/publish, fork, truncate, end turn,
 * preempt, resume, release, evict, grow, checkpoint, lookup) over three domains, two
 * extra-key sets and every group kind, checked after every step against a deliberately
 * simple reference model:
 *  - the reference keeps its own list of published blocks keyed by (group, domain, extras,
 *    the whole token prefix) and its own recurrent checkpoint list, updated only from what
 *    the API promises; lookups and begin/resume prefixes must equal its brute-force
 *    longest prefix;
 *  - refcounts equal the number of table references; every block is exactly one of free /
 *    cached / in use; the registered set equals the reference's;
 *  - every registered block in a table holds that sequence's own domain, extras and tokens
 *    (no cross-domain hit ever); sliding tables hold the null block exactly before the
 *    window; return codes, grows and eviction counts follow the allocation rule;
 *  - eviction takes the least recently released cached block, where the reference orders
 *    releases itself: blocks dropped from a table go last position first (so pressure
 *    trims a conversation from its end), blocks a commit slides out of a window go
 *    together, and a failed begin/resume hands its hits back the same way.
 *  - recurrent checkpoints: a prefix is served only with a checkpoint at exactly its
 *    length; when the registry is full, the least recently used checkpoint (registered
 *    or touched by a hit) is dropped and on_checkpoint_evict names exactly its key (the
 *    chain hash of its tokens in its domain); a checkpoint the engine drops (its state
 *    store's budget) stops serving at once.
 * Configurations: 0 full + two sliding windows + shared; 1 full + recurrent + shared;
 * 2 everything; 3 the LFM2 / Qwen3.5 mix (recurrent layers first, interleaved with two
 * full layers); 4 the Gemma 3 mix (five sliding layers of one window interleaved with a
 * full one, a shared alias last).
 * Seeded and reproducible: test_kv_model --steps N --seed S [--config 0..4]. CI runs a
 * bounded number of steps; without --config every configuration runs.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kv_test_util.h"

#define BS 4
#define DIM 2048
#define MAXSEQ 6
#define MAXG CAIRN_KV_MAX_GROUPS
#define CKPT_CAP 6
#define N_CONFIGS 5

static long opt_steps = 30000;
static uint64_t opt_seed = 1;
static int opt_config = -1;

/* ---- deterministic PRNG ---- */
static uint64_t rng;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static size_t rn(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* ---- reference model ---- */
typedef struct {
    uint32_t block, group;
    int dom, ext;
    int32_t *toks;
    size_t len;
} ref_entry_t;

typedef struct {
    int dom, ext;
    int32_t *toks;
    size_t len;
    uint64_t stamp;
} ref_ckpt_t;

typedef struct {
    cairn_kv_seq_t *s;
    int dom, ext, fam;
    int32_t toks[4096];
    size_t n, comp;
    size_t offered[MAXG];
    bool pre;
} ref_seq_t;

static cairn_kv_cache_t *C;
static cairn_kv_hash_t doms[3];
static const cairn_kv_extra_key_t extra_sets[2][1] = {{{"none", 0}}, {{"image:5f3a", 10}}};
static ref_entry_t ents[4096];
static size_t n_ents;
static ref_ckpt_t ckpts[64];
static size_t n_ckpts;
static uint64_t clock_;
static ref_seq_t seqs[MAXSEQ];
static size_t n_seqs;
static uint32_t n_groups;
static cairn_kv_layer_kind_t gkind[MAXG];
static uint32_t gwin[MAXG], grep[MAXG], n_paged;
static bool has_rec;
static long evicted_this_op;
/* LRU model: when each block last became cached (its table references reached zero).
 * Blocks released by one operation at one position share a stamp. */
#define MAX_BLOCKS 256
static uint64_t idle_at[MAX_BLOCKS];
static bool cached_before[MAX_BLOCKS];
static uint64_t release_clock;
typedef enum { RELEASE_TAIL_FIRST, RELEASE_TOGETHER } release_order_t;
static release_order_t release_order;

static bool same_key(const ref_entry_t *e, uint32_t g, int dom, int ext, const int32_t *t, size_t len)
{
    return e->group == g && e->dom == dom && e->ext == ext && e->len == len &&
           memcmp(e->toks, t, len * sizeof *t) == 0;
}

static long ref_find(uint32_t g, int dom, int ext, const int32_t *t, size_t len)
{
    for (size_t i = 0; i < n_ents; i++)
        if (same_key(&ents[i], g, dom, ext, t, len))
            return (long)i;
    return -1;
}

static long ref_find_block(uint32_t id)
{
    for (size_t i = 0; i < n_ents; i++)
        if (ents[i].block == id)
            return (long)i;
    return -1;
}

static void ref_remove(size_t i)
{
    free(ents[i].toks);
    ents[i] = ents[--n_ents];
}

static void ref_add(uint32_t id, uint32_t g, int dom, int ext, const int32_t *t, size_t len)
{
    assert_true(n_ents < CAIRN_ARRAY_LEN(ents));
    ref_entry_t *e = &ents[n_ents++];
    e->block = id;
    e->group = g;
    e->dom = dom;
    e->ext = ext;
    e->len = len;
    e->toks = malloc(len * sizeof *t);
    memcpy(e->toks, t, len * sizeof *t);
}

static long ckpt_find(int dom, int ext, const int32_t *t, size_t len)
{
    for (size_t i = 0; i < n_ckpts; i++)
        if (ckpts[i].dom == dom && ckpts[i].ext == ext && ckpts[i].len == len &&
            memcmp(ckpts[i].toks, t, len * sizeof *t) == 0)
            return (long)i;
    return -1;
}

/* The registry key of a checkpoint: the chain hash of the block ending at len. */
static cairn_kv_hash_t ckpt_key(int dom, int ext, const int32_t *t, size_t len)
{
    cairn_kv_hash_t h[4096 / BS];
    assert_true(len >= BS && len % BS == 0);
    assert_int_equal(cairn_kv_cache_hash_blocks(C, dom ? &doms[dom] : NULL, extra_sets[ext],
                                                (size_t)ext, t, len, h), 0);
    return h[len / BS - 1];
}

/* Checkpoint evictions the reference expects during the current operation, and the
 * keys the cache reported. */
static cairn_kv_hash_t ckpt_expected[4], ckpt_reported[4];
static int n_ckpt_expected, n_ckpt_reported;
static long ckpt_evictions, ckpt_drops; /* over a run */

static void on_ckpt_evict(void *user, const cairn_kv_hash_t *key)
{
    (void)user;
    assert_true(n_ckpt_reported < 4);
    ckpt_reported[n_ckpt_reported++] = *key;
}

static void ckpt_add(int dom, int ext, const int32_t *t, size_t len)
{
    long i = ckpt_find(dom, ext, t, len);
    if (i >= 0) {
        ckpts[i].stamp = ++clock_;
        return;
    }
    if (n_ckpts == CKPT_CAP) {
        size_t old = 0;
        for (size_t j = 1; j < n_ckpts; j++)
            if (ckpts[j].stamp < ckpts[old].stamp)
                old = j;
        assert_true(n_ckpt_expected < 4);
        ckpt_expected[n_ckpt_expected++] =
            ckpt_key(ckpts[old].dom, ckpts[old].ext, ckpts[old].toks, ckpts[old].len);
        free(ckpts[old].toks);
        ckpts[old] = ckpts[--n_ckpts];
    }
    ref_ckpt_t *c = &ckpts[n_ckpts++];
    c->dom = dom;
    c->ext = ext;
    c->len = len;
    c->stamp = ++clock_;
    c->toks = malloc(len * sizeof *t);
    memcpy(c->toks, t, len * sizeof *t);
}

static size_t first_live(uint32_t w, size_t n) { return kv_sliding_first_live(w, BS, n); }

/* Brute-force longest usable prefix in blocks. */
static size_t ref_prefix_blocks(int dom, int ext, const int32_t *t, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t k = (n - 1) / BS; k > 0; k--) {
        bool ok = true;
        for (uint32_t g = 0; g < n_groups && ok; g++) {
            if (gkind[g] == CAIRN_KV_LAYER_RECURRENT) {
                ok = ckpt_find(dom, ext, t, k * BS) >= 0;
                continue;
            }
            size_t lo = gkind[g] == CAIRN_KV_LAYER_SLIDING ? first_live(gwin[g], k * BS) : 0;
            for (size_t j = lo; j < k && ok; j++)
                ok = ref_find(g, dom, ext, t, (j + 1) * BS) >= 0;
        }
        if (ok)
            return k;
    }
    return 0;
}

static uint32_t block_ref_from_tables(uint32_t id)
{
    uint32_t r = 0;
    for (size_t i = 0; i < n_seqs; i++)
        for (uint32_t g = 0; g < n_groups; g++) {
            if (gkind[g] == CAIRN_KV_LAYER_RECURRENT)
                continue;
            size_t nb;
            const uint32_t *tab = cairn_kv_seq_block_table(seqs[i].s, grep[g], &nb);
            for (size_t j = 0; j < nb; j++)
                r += tab[j] == id;
        }
    return r;
}

/* Cached hit blocks for the predicted prefix: those whose refcount is 0 now. */
static uint32_t cached_hits(int dom, int ext, const int32_t *t, size_t k)
{
    uint32_t n = 0;
    for (uint32_t g = 0; g < n_groups; g++) {
        if (gkind[g] == CAIRN_KV_LAYER_RECURRENT)
            continue;
        size_t lo = gkind[g] == CAIRN_KV_LAYER_SLIDING ? first_live(gwin[g], k * BS) : 0;
        for (size_t j = lo; j < k; j++) {
            long e = ref_find(g, dom, ext, t, (j + 1) * BS);
            assert_true(e >= 0);
            n += C->pool.blocks[ents[e].block].ref == 0;
        }
    }
    return n;
}

static void on_evict(void *user, uint32_t id)
{
    (void)user;
    long e = ref_find_block(id);
    if (e < 0)
        fail_msg("evicted block %u was not published in the reference", id);
    assert_int_equal(block_ref_from_tables(id), 0);
    /* the least recently released of the cached blocks (a beginning sequence's hits are
     * not in the tables yet, so "cached" reads the pool's refcount, which check_all ties
     * to the tables after every step) */
    for (size_t i = 0; i < n_ents; i++) {
        uint32_t b = ents[i].block;
        if (b != id && C->pool.blocks[b].ref == 0 && idle_at[b] < idle_at[id])
            fail_msg("evicted block %u (released at %llu, length %zu) before block %u (released "
                     "at %llu, length %zu)", id, (unsigned long long)idle_at[id], ents[e].len, b,
                     (unsigned long long)idle_at[b], ents[i].len);
    }
    ref_remove((size_t)e);
    evicted_this_op++;
}

/* Before an operation: which blocks are cached (published, no table reference). */
static void lru_before_op(void)
{
    memset(cached_before, 0, sizeof cached_before);
    for (size_t i = 0; i < n_ents; i++) {
        assert_true(ents[i].block < MAX_BLOCKS);
        cached_before[ents[i].block] = block_ref_from_tables(ents[i].block) == 0;
    }
    release_order = RELEASE_TAIL_FIRST;
}

/* After it: the blocks that became cached get their release stamps in the order the
 * operation promises (a published block's position is its length in blocks - 1). */
static void lru_after_op(void)
{
    const uint64_t span = 4096 / BS + 1;
    for (size_t i = 0; i < n_ents; i++) {
        uint32_t b = ents[i].block;
        if (cached_before[b] || block_ref_from_tables(b) != 0)
            continue;
        size_t pos = ents[i].len / BS - 1;
        idle_at[b] = release_clock + (release_order == RELEASE_TAIL_FIRST ? span - pos : 0);
    }
    release_clock += span + 1;
}

/* A failed begin/resume took its cached hits and handed them back: they are released
 * again by this operation. */
static void lru_rereleased_hits(int dom, int ext, const int32_t *t, size_t k)
{
    for (uint32_t g = 0; g < n_groups; g++) {
        if (gkind[g] == CAIRN_KV_LAYER_RECURRENT)
            continue;
        size_t lo = gkind[g] == CAIRN_KV_LAYER_SLIDING ? first_live(gwin[g], k * BS) : 0;
        for (size_t j = lo; j < k; j++)
            cached_before[ents[ref_find(g, dom, ext, t, (j + 1) * BS)].block] = false;
    }
}

/* Predicts an allocation of `need` blocks with `cached_avail` evictable: returns the
 * expected status and checks the grow rule and eviction count after the call. */
typedef struct { uint32_t free0, total0, max; uint32_t need, avail; } alloc_pred_t;

static alloc_pred_t pred_begin(uint32_t need, uint32_t avail)
{
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(C, &st);
    alloc_pred_t p = {st.blocks_free, st.blocks_total, st.blocks_max, need, avail};
    evicted_this_op = 0;
    return p;
}

static int pred_check(const alloc_pred_t *p, int rc)
{
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(C, &st);
    uint32_t total = p->total0, free1 = p->free0;
    if (p->need > p->free0 && p->total0 < p->max) {
        uint64_t want = (uint64_t)p->total0 + (p->need - p->free0);
        if (want < 2ull * p->total0)
            want = 2ull * p->total0;
        if (want > p->max)
            want = p->max;
        total = (uint32_t)want;
        free1 += total - p->total0;
    }
    assert_int_equal(st.blocks_total, total);
    int expect = p->need <= free1 + p->avail ? 0 : CAIRN_EEXHAUSTED;
    assert_int_equal(rc, expect);
    long ev = rc == 0 && p->need > free1 ? (long)(p->need - free1) : 0;
    assert_int_equal(evicted_this_op, ev);
    return rc;
}

/* ---- invariants ---- */

static void check_all(void)
{
    assert_int_equal(kv_cache__check(C), 0);
    const kv_block_pool_t *bp = &C->pool;
    uint32_t used = 0, cached = 0, fr = 0;
    for (uint32_t id = 1; id < bp->n_blocks; id++) {
        const kv_block_t *b = &bp->blocks[id];
        uint32_t r = block_ref_from_tables(id);
        assert_int_equal(b->ref, r);
        long e = ref_find_block(id);
        if ((b->registered != 0) != (e >= 0))
            fail_msg("block %u: registered %d in the cache, %s in the reference (state %d ref %u)", id,
                     b->registered, e >= 0 ? "published" : "absent", b->state, b->ref);
        if (e >= 0)
            assert_int_equal(b->group, ents[e].group);
        if (r > 0) {
            assert_int_equal(b->state, KV_BLOCK_USED);
            used++;
        } else if (b->registered) {
            assert_int_equal(b->state, KV_BLOCK_CACHED);
            cached++;
        } else {
            assert_int_equal(b->state, KV_BLOCK_FREE);
            fr++;
        }
    }
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(C, &st);
    assert_int_equal(st.blocks_in_use, used);
    assert_int_equal(st.blocks_cached, cached);
    assert_int_equal(st.blocks_free, fr);
    assert_int_equal(st.sequences, n_seqs);
    for (size_t i = 0; i < n_seqs; i++) {
        ref_seq_t *q = &seqs[i];
        assert_int_equal(cairn_kv_seq_n_tokens(q->s), q->n);
        assert_int_equal(cairn_kv_seq_n_computed(q->s), q->comp);
        assert_int_equal(cairn_kv_seq_preempted(q->s), q->pre);
        if (q->n)
            assert_memory_equal(cairn_kv_seq_tokens(q->s), q->toks, q->n * sizeof *q->toks);
        for (uint32_t g = 0; g < n_groups; g++) {
            if (gkind[g] == CAIRN_KV_LAYER_RECURRENT)
                continue;
            size_t nb;
            const uint32_t *tab = cairn_kv_seq_block_table(q->s, grep[g], &nb);
            assert_int_equal(nb, q->pre ? 0 : (q->n + BS - 1) / BS);
            size_t lo = gkind[g] == CAIRN_KV_LAYER_SLIDING ? first_live(gwin[g], q->comp) : 0;
            for (size_t j = 0; j < nb; j++) {
                if (j < lo) {
                    assert_int_equal(tab[j], CAIRN_KV_NULL_BLOCK);
                    continue;
                }
                assert_int_not_equal(tab[j], CAIRN_KV_NULL_BLOCK);
                long e = ref_find_block(tab[j]);
                if (e < 0)
                    continue;
                /* a published block in this table is this sequence's own content */
                const ref_entry_t *en = &ents[e];
                assert_int_equal(en->group, g);
                assert_int_equal(en->dom, q->dom);
                assert_int_equal(en->ext, q->ext);
                assert_int_equal(en->len, (j + 1) * BS);
                size_t cmp = en->len < q->n ? en->len : q->n;
                assert_memory_equal(en->toks, q->toks, cmp * sizeof *q->toks);
            }
        }
    }
}

/* ---- token generation: a few families so prompts share prefixes ---- */

static int32_t gen_token(int fam, size_t pos)
{
    if (rn(16) == 0)
        return 7 + (int32_t)rn(2); /* a mutation, drawn from a tiny set so it repeats */
    return fam * 1000 + (int32_t)pos;
}

static void gen_prompt(int fam, int32_t *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        t[i] = gen_token(fam, i);
}

/* ---- operations ---- */

static void op_begin(void)
{
    if (n_seqs == MAXSEQ)
        return;
    ref_seq_t *q = &seqs[n_seqs];
    memset(q, 0, sizeof *q);
    q->dom = (int)rn(3);
    q->ext = (int)rn(4) == 0;
    q->fam = (int)rn(3);
    q->n = 1 + rn(40);
    gen_prompt(q->fam, q->toks, q->n);
    size_t k = ref_prefix_blocks(q->dom, q->ext, q->toks, q->n);
    uint32_t need = (uint32_t)(((q->n + BS - 1) / BS - k) * n_paged);
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(C, &st);
    alloc_pred_t p = pred_begin(need, st.blocks_cached - cached_hits(q->dom, q->ext, q->toks, k));
    size_t P = 12345;
    int rc = cairn_kv_seq_begin(C, q->dom ? &doms[q->dom] : NULL, extra_sets[q->ext], (size_t)q->ext,
                                q->toks, q->n, &q->s, &P);
    if (pred_check(&p, rc)) {
        lru_rereleased_hits(q->dom, q->ext, q->toks, k);
        return;
    }
    assert_int_equal(P, k * BS);
    q->comp = P;
    for (uint32_t g = 0; g < MAXG; g++)
        q->offered[g] = k;
    if (has_rec && k > 0)
        ckpt_add(q->dom, q->ext, q->toks, k * BS); /* a hit touches its checkpoint */
    n_seqs++;
}

static ref_seq_t *pick(void) { return n_seqs ? &seqs[rn(n_seqs)] : NULL; }

static void op_append(void)
{
    ref_seq_t *q = pick();
    if (!q)
        return;
    size_t a = 1 + rn(2 * BS);
    if (q->n + a > 200)
        a = 1;
    int32_t t[2 * BS];
    for (size_t i = 0; i < a; i++)
        t[i] = gen_token(q->fam, q->n + i);
    if (q->pre) {
        assert_int_equal(cairn_kv_seq_append(q->s, t, a), CAIRN_ESTATE);
        return;
    }
    size_t pj = q->n / BS, nb = (q->n + BS - 1) / BS;
    bool partial = q->n % BS != 0;
    uint32_t before[MAXG] = {0}, cow = 0;
    for (uint32_t g = 0; g < n_groups; g++) {
        if (gkind[g] == CAIRN_KV_LAYER_RECURRENT || !partial)
            continue;
        before[g] = cairn_kv_seq_block_table(q->s, grep[g], NULL)[pj];
        cow += C->pool.blocks[before[g]].ref > 1;
    }
    uint32_t need = (uint32_t)(((q->n + a + BS - 1) / BS - nb) * n_paged + cow);
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(C, &st);
    alloc_pred_t p = pred_begin(need, st.blocks_cached);
    uint32_t before_ref[MAXG];
    for (uint32_t g = 0; g < n_groups; g++)
        before_ref[g] = partial && gkind[g] != CAIRN_KV_LAYER_RECURRENT ? C->pool.blocks[before[g]].ref : 0;
    int rc = cairn_kv_seq_append(q->s, t, a);
    if (pred_check(&p, rc))
        return;
    for (uint32_t g = 0; g < n_groups && partial; g++) {
        if (gkind[g] == CAIRN_KV_LAYER_RECURRENT)
            continue;
        uint32_t now = cairn_kv_seq_block_table(q->s, grep[g], NULL)[pj];
        if (before_ref[g] > 1) {
            assert_int_not_equal(now, before[g]); /* copied */
        } else {
            assert_int_equal(now, before[g]);
            long e = ref_find_block(now);
            if (e >= 0)
                ref_remove((size_t)e); /* sole owner: unpublished before the write */
        }
    }
    memcpy(q->toks + q->n, t, a * sizeof *t);
    q->n += a;
}

static void op_commit(void)
{
    ref_seq_t *q = pick();
    if (!q)
        return;
    if (q->pre) {
        assert_int_equal(cairn_kv_seq_commit(q->s, q->n), CAIRN_ESTATE);
        return;
    }
    size_t to = q->comp + rn(q->n - q->comp + 1);
    if (rn(20) == 0) {
        assert_int_equal(cairn_kv_seq_commit(q->s, q->n + 1), CAIRN_ERANGE);
        return;
    }
    /* read the tables first: the window may release blocks this commit publishes */
    static uint32_t snap[MAXG][64];
    size_t full = to / BS;
    for (uint32_t g = 0; g < n_groups; g++)
        if (gkind[g] != CAIRN_KV_LAYER_RECURRENT)
            memcpy(snap[g], cairn_kv_seq_block_table(q->s, grep[g], NULL), full * sizeof(uint32_t));
    assert_int_equal(cairn_kv_seq_commit(q->s, to), 0);
    release_order = RELEASE_TOGETHER; /* the blocks the window slid past */
    for (uint32_t g = 0; g < n_groups; g++) {
        if (gkind[g] == CAIRN_KV_LAYER_RECURRENT)
            continue;
        for (size_t j = q->offered[g]; j < full; j++) {
            uint32_t id = snap[g][j];
            if (id == 0)
                continue; /* outside the window already */
            if (ref_find_block(id) >= 0)
                continue; /* already published */
            if (ref_find(g, q->dom, q->ext, q->toks, (j + 1) * BS) < 0)
                ref_add(id, g, q->dom, q->ext, q->toks, (j + 1) * BS);
        }
        if (full > q->offered[g])
            q->offered[g] = full;
    }
    q->comp = to;
}

static void op_fork(void)
{
    ref_seq_t *q = pick();
    if (!q || n_seqs == MAXSEQ)
        return;
    cairn_kv_seq_t *d = NULL;
    int rc = cairn_kv_seq_fork(q->s, &d);
    if (q->pre || q->comp != q->n) {
        assert_int_equal(rc, CAIRN_ESTATE);
        return;
    }
    assert_int_equal(rc, 0);
    ref_seq_t *r = &seqs[n_seqs++];
    *r = *q;
    r->s = d;
}

static void op_truncate(void)
{
    ref_seq_t *q = pick();
    if (!q)
        return;
    size_t k = rn((q->n < 2 * BS + 1 ? q->n : 2 * BS + 1) + 1);
    int rc = cairn_kv_seq_truncate(q->s, k);
    if (q->pre) {
        assert_int_equal(rc, CAIRN_ESTATE);
        return;
    }
    size_t n = q->n - k, comp = q->comp < n ? q->comp : n;
    int expect = 0;
    for (uint32_t g = 0; g < n_groups; g++)
        if (gkind[g] == CAIRN_KV_LAYER_SLIDING && first_live(gwin[g], comp) < first_live(gwin[g], q->comp))
            expect = CAIRN_ERANGE;
    assert_int_equal(rc, expect);
    if (rc)
        return;
    q->n = n;
    q->comp = comp;
    for (uint32_t g = 0; g < MAXG; g++)
        if (q->offered[g] > comp / BS)
            q->offered[g] = comp / BS;
}

static void op_end_turn(void)
{
    ref_seq_t *q = pick();
    if (!q)
        return;
    size_t dropped = 99;
    int rc = cairn_kv_seq_end_turn(q->s, &dropped);
    if (q->pre) {
        assert_int_equal(rc, CAIRN_ESTATE);
        return;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(dropped, q->n - q->comp);
    q->n = q->comp;
}

static void op_release(void)
{
    if (!n_seqs)
        return;
    size_t i = rn(n_seqs);
    /* freed = blocks referenced only by this sequence */
    uint32_t expect = 0;
    if (!seqs[i].pre)
        for (uint32_t g = 0; g < n_groups; g++) {
            if (gkind[g] == CAIRN_KV_LAYER_RECURRENT)
                continue;
            size_t nb;
            const uint32_t *tab = cairn_kv_seq_block_table(seqs[i].s, grep[g], &nb);
            for (size_t j = 0; j < nb; j++)
                expect += tab[j] && C->pool.blocks[tab[j]].ref == 1;
        }
    uint32_t freed = 0;
    if (rn(2) && !seqs[i].pre) {
        assert_int_equal(cairn_kv_seq_preempt(seqs[i].s, &freed), 0);
        seqs[i].pre = true;
        seqs[i].comp = 0;
        memset(seqs[i].offered, 0, sizeof seqs[i].offered);
        assert_int_equal(freed, expect);
        return;
    }
    cairn_kv_seq_release(seqs[i].s, &freed);
    assert_int_equal(freed, expect);
    seqs[i] = seqs[--n_seqs];
}

static void op_resume(void)
{
    ref_seq_t *q = pick();
    if (!q)
        return;
    if (!q->pre) {
        assert_int_equal(cairn_kv_seq_resume(q->s, NULL), CAIRN_ESTATE);
        return;
    }
    size_t k = ref_prefix_blocks(q->dom, q->ext, q->toks, q->n);
    uint32_t need = (uint32_t)(((q->n + BS - 1) / BS - k) * n_paged);
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(C, &st);
    alloc_pred_t p = pred_begin(need, st.blocks_cached - cached_hits(q->dom, q->ext, q->toks, k));
    size_t P = 999;
    int rc = cairn_kv_seq_resume(q->s, &P);
    if (pred_check(&p, rc)) {
        lru_rereleased_hits(q->dom, q->ext, q->toks, k);
        return;
    }
    assert_int_equal(P, k * BS);
    q->pre = false;
    q->comp = P;
    for (uint32_t g = 0; g < MAXG; g++)
        q->offered[g] = k;
    if (has_rec && k > 0)
        ckpt_add(q->dom, q->ext, q->toks, k * BS);
}

static void op_evict(void)
{
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(C, &st);
    uint32_t n = (uint32_t)rn(5), ev = 0;
    evicted_this_op = 0;
    cairn_kv_cache_evict(C, n, &ev);
    assert_int_equal(ev, n < st.blocks_cached ? n : st.blocks_cached);
    assert_int_equal(evicted_this_op, ev);
}

static void op_grow(void)
{
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(C, &st);
    uint32_t want = (uint32_t)rn(st.blocks_free + 8);
    alloc_pred_t p = pred_begin(want, 0);
    int rc = cairn_kv_cache_grow(C, want);
    pred_check(&p, rc);
}

static void op_checkpoint(void)
{
    ref_seq_t *q = pick();
    if (!q)
        return;
    size_t b = rn(q->comp / BS + 2) * BS;
    int rc = cairn_kv_seq_checkpoint(q->s, b, NULL);
    if (!has_rec) {
        assert_int_equal(rc, CAIRN_EUNSUPPORTED);
        return;
    }
    if (b == 0 || b > q->comp) {
        assert_int_equal(rc, CAIRN_ERANGE);
        return;
    }
    assert_int_equal(rc, 0);
    ckpt_add(q->dom, q->ext, q->toks, b);
}

/* The engine dropped a checkpoint (its state store evicted it for its byte budget):
 * that length stops serving at once; an unknown key is CAIRN_ENOENT. */
static void op_checkpoint_drop(void)
{
    if (!has_rec)
        return;
    if (n_ckpts == 0 || rn(4) == 0) {
        int32_t t[BS];
        gen_prompt((int)rn(3), t, BS);
        t[0] = 99991; /* no generated prompt starts with it: never registered */
        cairn_kv_hash_t k = ckpt_key(0, 0, t, BS);
        assert_int_equal(cairn_kv_cache_checkpoint_drop(C, &k), CAIRN_ENOENT);
        return;
    }
    size_t i = rn(n_ckpts);
    cairn_kv_hash_t k = ckpt_key(ckpts[i].dom, ckpts[i].ext, ckpts[i].toks, ckpts[i].len);
    assert_int_equal(cairn_kv_cache_checkpoint_drop(C, &k), 0);
    ckpt_drops++;
    free(ckpts[i].toks);
    ckpts[i] = ckpts[--n_ckpts];
    assert_int_equal(cairn_kv_cache_checkpoint_drop(C, &k), CAIRN_ENOENT);
}

static void op_lookup(void)
{
    int dom = (int)rn(3), ext = (int)rn(4) == 0, fam = (int)rn(3);
    int32_t t[64];
    size_t n = 1 + rn(48);
    const ref_seq_t *q = pick();
    if (q && q->n && rn(2)) { /* probe a live history, maybe from another domain */
        n = q->n < 64 ? q->n : 64;
        memcpy(t, q->toks, n * sizeof *t);
        if (rn(2)) {
            dom = q->dom;
            ext = q->ext;
        }
    } else {
        gen_prompt(fam, t, n);
    }
    size_t P = 777;
    assert_int_equal(cairn_kv_cache_lookup(C, dom ? &doms[dom] : NULL, extra_sets[ext], (size_t)ext, t, n, &P), 0);
    assert_int_equal(P, ref_prefix_blocks(dom, ext, t, n) * BS);
}

static void run_model(int config, long steps, uint64_t seed)
{
    rng = seed * 0x9E3779B97F4A7C15ull + (uint64_t)config + 1;
    cairn_kv_layer_spec_t l[8];
    uint32_t nl = 0;
    if (config <= 2) {
        l[nl++] = kvt_full(DIM);
        if (config != 1) {
            l[nl++] = kvt_sliding(DIM, 6);
            l[nl++] = kvt_sliding(DIM / 2, 13);
        }
        if (config != 0)
            l[nl++] = kvt_recurrent();
        l[nl++] = kvt_shared(0);
    } else if (config == 3) { /* LFM2: conv, conv, attn, conv, conv, attn */
        for (uint32_t i = 0; i < 6; i++)
            l[nl++] = i % 3 == 2 ? kvt_full(DIM / 2) : kvt_recurrent();
    } else { /* Gemma 3: five sliding layers, one full, then an alias of a sliding one */
        for (uint32_t i = 0; i < 6; i++)
            l[nl++] = i == 5 ? kvt_full(DIM) : kvt_sliding(DIM, 9);
        l[nl++] = kvt_shared(1);
    }
    cairn_kv_config_t cfg = kvt_config(l, nl, BS, 6, 1); /* 16 blocks growing to 96 */
    cfg.max_checkpoints = CKPT_CAP;
    cfg.on_checkpoint_evict = on_ckpt_evict;
    assert_int_equal(cairn_kv_cache_create(&cfg, &C), 0);
    {
        /* The reference's per-block arrays hold MAX_BLOCKS: a configuration whose pool can
         * grow past that must fail here, not write past them. */
        cairn_kv_stats_t st0;
        cairn_kv_cache_stats(C, &st0);
        assert_true(st0.blocks_max <= MAX_BLOCKS);
    }
    C->evict_observer = on_evict;
    n_groups = C->n_groups;
    n_paged = 0;
    has_rec = false;
    for (uint32_t g = 0; g < n_groups; g++) {
        gkind[g] = C->groups[g].kind;
        gwin[g] = C->groups[g].window;
        n_paged += gkind[g] != CAIRN_KV_LAYER_RECURRENT;
        has_rec |= gkind[g] == CAIRN_KV_LAYER_RECURRENT;
        for (uint32_t layer = 0; layer < nl; layer++)
            if (C->layers[layer].group == g && l[layer].kind != CAIRN_KV_LAYER_SHARED) {
                grep[g] = layer;
                break;
            }
    }
    assert_int_equal(cairn_kv_domain_from_salt(C, "tenant-1", 8, &doms[1]), 0);
    assert_int_equal(cairn_kv_domain_from_salt(C, "tenant-2", 8, &doms[2]), 0);
    n_ents = n_ckpts = n_seqs = 0;
    ckpt_evictions = ckpt_drops = 0;
    release_clock = 1;
    memset(idle_at, 0, sizeof idle_at);
    long counts[13] = {0};
    for (long step = 0; step < steps; step++) {
        size_t op = rn(100);
        int kind;
        if (op < 14) kind = 0;
        else if (op < 34) kind = 1;
        else if (op < 54) kind = 2;
        else if (op < 59) kind = 3;
        else if (op < 65) kind = 4;
        else if (op < 68) kind = 5;
        else if (op < 78) kind = 6;
        else if (op < 82) kind = 7;
        else if (op < 85) kind = 8;
        else if (op < 87) kind = 9;
        else if (op < 92) kind = 10;
        else if (op < 93) kind = 12;
        else kind = 11;
        counts[kind]++;
        if (getenv("KV_MODEL_TRACE"))
            fprintf(stderr, "step %ld op %d\n", step, kind);
        lru_before_op();
        n_ckpt_expected = n_ckpt_reported = 0;
        switch (kind) {
        case 0: op_begin(); break;
        case 1: op_append(); break;
        case 2: op_commit(); break;
        case 3: op_fork(); break;
        case 4: op_truncate(); break;
        case 5: op_end_turn(); break;
        case 6: op_release(); break;
        case 7: op_resume(); break;
        case 8: op_evict(); break;
        case 9: op_grow(); break;
        case 10: op_checkpoint(); break;
        case 12: op_checkpoint_drop(); break;
        default: op_lookup(); break;
        }
        lru_after_op();
        assert_int_equal(n_ckpt_reported, n_ckpt_expected);
        ckpt_evictions += n_ckpt_reported;
        for (int i = 0; i < n_ckpt_expected; i++)
            assert_memory_equal(ckpt_reported[i].bytes, ckpt_expected[i].bytes, 32);
        check_all();
    }
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(C, &st);
    printf("model config %d seed %llu: %ld steps; hits %llu misses %llu evictions %llu grows %llu "
           "cow %llu, %zu published at end; checkpoints %llu, %ld evicted, %ld dropped\n",
           config, (unsigned long long)seed, steps, (unsigned long long)st.hits,
           (unsigned long long)st.misses, (unsigned long long)st.evictions,
           (unsigned long long)st.grows, (unsigned long long)st.cow_copies, n_ents,
           (unsigned long long)st.checkpoints, ckpt_evictions, ckpt_drops);
    /* the run must have exercised the interesting paths */
    if (steps >= 5000) {
        assert_true(st.hits > 0 && st.evictions > 0 && st.grows > 0 && st.cow_copies > 0);
        if (has_rec)
            assert_true(ckpt_evictions > 0 && ckpt_drops > 0);
    }
    cairn_kv_cache_destroy(C);
    C = NULL;
    for (size_t i = 0; i < n_ents; i++)
        free(ents[i].toks);
    for (size_t i = 0; i < n_ckpts; i++)
        free(ckpts[i].toks);
    n_ents = n_ckpts = n_seqs = 0;
}

static void test_model(void **state)
{
    (void)state;
    if (opt_config >= 0) {
        run_model(opt_config, opt_steps, opt_seed);
        return;
    }
    for (int cfg = 0; cfg < N_CONFIGS; cfg++)
        run_model(cfg, opt_steps / N_CONFIGS, opt_seed);
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--steps"))
            opt_steps = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed"))
            opt_seed = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--config"))
            opt_config = atoi(argv[i + 1]);
    }
    const char *e = getenv("CAIRN_KV_MODEL_STEPS");
    if (e && atol(e) > 0)
        opt_steps = atol(e);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_model)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
