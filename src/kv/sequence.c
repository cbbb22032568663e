/*
 * sequence.c — one request: its token history and one block table per paged group.
 *
 * State of a sequence s (bs = block size):
 *  - tokens[0, n_tokens) are known; [0, n_computed) have K/V written;
 *  - every paged group has n_table = ceil(n_tokens / bs) table entries (slots are reserved
 *    for every known token), except while preempted, when n_table = 0 and n_computed = 0;
 *  - a sliding group's entries [0, n_dead) are the null block and n_dead equals
 *    kv_sliding_first_live(W, bs, n_computed); every other entry is a real block;
 *  - hashes[0, n_hashed) are the chained hashes of the first n_hashed full blocks of known
 *    tokens; n_published[g] <= n_computed / bs blocks have been offered to the index.
 * Every mutating call first acquires all it may need (memory, then blocks through one
 * kv_cache__ensure_free) and only then changes state, so a failure leaves the sequence
 * and every group exactly as they were (all-or-nothing across groups).
 * Thread-safety: a sequence belongs to its cache's engine thread.
 */
#include "kv/kv_internal.h"
#include "util/util.h"

#include <stdint.h>
#include <string.h>

static const cairn_kv_hash_t zero_hash;

static size_t div_up(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

static int reserve_tables(cairn_kv_seq_t *s, size_t need)
{
    if (need <= s->cap_table)
        return CAIRN_OK;
    if (need > SIZE_MAX / 2 / sizeof(uint32_t))
        return CAIRN_ENOMEM;
    const cairn_kv_cache_t *c = s->cache;
    size_t n = s->cap_table ? s->cap_table : 16;
    while (n < need)
        n *= 2;
    for (uint32_t g = 0; g < c->n_groups; g++) {
        if (!kv_group_paged(&c->groups[g]))
            continue;
        uint32_t *t = cairn_realloc(s->tables[g], n * sizeof *t);
        if (!t)
            return CAIRN_ENOMEM; /* tables already grown keep their contents: harmless */
        s->tables[g] = t;
    }
    s->cap_table = n;
    return CAIRN_OK;
}

static uint32_t n_paged(const cairn_kv_cache_t *c)
{
    uint32_t n = 0;
    for (uint32_t g = 0; g < c->n_groups; g++)
        n += kv_group_paged(&c->groups[g]);
    return n;
}

/* Drops every table entry at index >= keep, from the last position down (all groups'
 * blocks of one position together). A released cached block joins the LRU tail, so the
 * chain's last block becomes the first evicted and pressure trims a conversation from its
 * end, keeping the longest prefix that can still be reused; released head-first, the
 * first eviction would make the whole chain unreachable while its tail still held the
 * pool. Returns how many blocks reached refcount 0. */
static uint32_t drop_tail(cairn_kv_seq_t *s, size_t keep)
{
    cairn_kv_cache_t *c = s->cache;
    uint32_t freed = 0;
    for (size_t j = s->n_table; j-- > keep;)
        for (uint32_t g = 0; g < c->n_groups; g++)
            if (kv_group_paged(&c->groups[g]))
                freed += kv_block_pool_unref(&c->pool, s->tables[g][j]);
    if (s->n_table > keep)
        s->n_table = keep;
    return freed;
}

/* Hashes full blocks up to `full` (exclusive). */
static int hash_upto(cairn_kv_seq_t *s, size_t full)
{
    if (s->n_hashed >= full)
        return CAIRN_OK;
    int rc = cairn_grow_array((void **)&s->hashes, &s->cap_hashes, full, sizeof *s->hashes, 16);
    if (rc)
        return rc;
    rc = kv_hash_chain(&s->cache->hasher, &s->domain, s->has_extras ? &s->extras : NULL, s->tokens,
                       s->n_hashed, full - s->n_hashed, s->hashes);
    if (rc)
        return rc;
    s->n_hashed = full;
    return CAIRN_OK;
}

/* Finds the usable prefix of the whole history, references it and reserves slots for the
 * rest. Requires an empty table. All or nothing. */
static int admit(cairn_kv_seq_t *s, size_t *prefix_len)
{
    cairn_kv_cache_t *c = s->cache;
    const uint32_t bs = c->block_size;
    size_t need = div_up(s->n_tokens, bs);
    int rc = reserve_tables(s, need);
    if (rc)
        return rc;
    rc = hash_upto(s, s->n_tokens / bs);
    if (rc)
        return rc;
    size_t k = 0;
    uint32_t *ids = NULL;
    size_t kmax = s->n_tokens ? (s->n_tokens - 1) / bs : 0;
    rc = kv_cache__find_prefix(c, &s->domain, s->hashes, kmax, &k, &ids);
    if (rc)
        return rc;
    const size_t P = k * bs;
    for (uint32_t g = 0; g < c->n_groups; g++) {
        const kv_group_t *G = &c->groups[g];
        if (!kv_group_paged(G))
            continue;
        size_t lo = G->kind == CAIRN_KV_LAYER_SLIDING ? kv_sliding_first_live(G->window, bs, P) : 0;
        for (size_t j = 0; j < k; j++) {
            uint32_t id = j < lo ? 0 : ids[(size_t)g * kmax + j];
            s->tables[g][j] = id;
            kv_block_pool_ref(&c->pool, id);
        }
        s->n_dead[g] = lo;
        s->n_published[g] = k;
    }
    s->n_table = k;
    s->n_computed = P;
    /* The hits are referenced, so eviction below cannot take them. */
    rc = kv_cache__ensure_free(c, (need - k) * n_paged(c));
    if (rc) {
        drop_tail(s, 0);
        s->n_computed = 0;
        memset(s->n_dead, 0, sizeof s->n_dead);
        memset(s->n_published, 0, sizeof s->n_published);
        return rc;
    }
    for (uint32_t g = 0; g < c->n_groups; g++)
        if (kv_group_paged(&c->groups[g]))
            for (size_t j = k; j < need; j++)
                s->tables[g][j] = kv_cache__alloc(c);
    s->n_table = need;
    if (c->recurrent_group >= 0 && k > 0)
        kv_ckpt_touch(&c->ckpt, &s->hashes[k - 1]);
    if (P > 0) {
        c->hits++;
        c->hit_tokens += P;
    } else {
        c->misses++;
    }
    c->query_tokens += s->n_tokens;
    if (prefix_len)
        *prefix_len = P;
    return CAIRN_OK;
}

static void seq_link(cairn_kv_seq_t *s)
{
    cairn_kv_cache_t *c = s->cache;
    s->prev = NULL;
    s->next = c->seqs;
    if (c->seqs)
        c->seqs->prev = s;
    c->seqs = s;
    c->n_seqs++;
}

static void seq_free(cairn_kv_seq_t *s)
{
    for (uint32_t g = 0; g < CAIRN_KV_MAX_GROUPS; g++)
        cairn_free(s->tables[g]);
    cairn_free(s->hashes);
    cairn_free(s->tokens);
    cairn_free(s);
}

int cairn_kv_seq_begin(cairn_kv_cache_t *c, const cairn_kv_hash_t *domain,
                       const cairn_kv_extra_key_t *extras, size_t n_extras,
                       const int32_t *tokens, size_t n, cairn_kv_seq_t **out, size_t *prefix_len)
{
    if (!c || !tokens || n == 0 || !out || (n_extras && !extras))
        return CAIRN_EINVAL;
    *out = NULL;
    int rc = CAIRN_ENOMEM;
    cairn_kv_seq_t *s = cairn_calloc(1, sizeof *s);
    if (!s)
        return CAIRN_ENOMEM;
    s->cache = c;
    s->domain = domain ? *domain : zero_hash;
    rc = kv_hash_extras(&c->hasher, extras, n_extras, &s->extras, &s->has_extras);
    if (rc)
        goto fail;
    rc = cairn_grow_array((void **)&s->tokens, &s->cap_tokens, n, sizeof *s->tokens, 16);
    if (rc)
        goto fail;
    memcpy(s->tokens, tokens, n * sizeof *tokens);
    s->n_tokens = n;
    rc = admit(s, prefix_len);
    if (rc)
        goto fail;
    seq_link(s);
    *out = s;
    return CAIRN_OK;
fail:
    seq_free(s);
    return rc;
}

int cairn_kv_seq_append(cairn_kv_seq_t *s, const int32_t *tokens, size_t n)
{
    if (!s || (!tokens && n))
        return CAIRN_EINVAL;
    if (s->preempted)
        return CAIRN_ESTATE;
    if (n == 0)
        return CAIRN_OK;
    cairn_kv_cache_t *c = s->cache;
    const uint32_t bs = c->block_size;
    size_t total = s->n_tokens + n, need = div_up(total, bs);
    int rc = cairn_grow_array((void **)&s->tokens, &s->cap_tokens, total, sizeof *s->tokens, 16);
    if (rc)
        return rc;
    rc = reserve_tables(s, need);
    if (rc)
        return rc;
    /* Copy-on-write: the first new slot lands in a partial block that others may read. */
    size_t pj = s->n_tokens / bs;
    bool partial = s->n_tokens % bs != 0;
    uint32_t cow = 0;
    if (partial)
        for (uint32_t g = 0; g < c->n_groups; g++)
            if (kv_group_paged(&c->groups[g]) && c->pool.blocks[s->tables[g][pj]].ref > 1)
                cow++;
    rc = kv_cache__ensure_free(c, (need - s->n_table) * n_paged(c) + cow);
    if (rc)
        return rc;
    for (uint32_t g = 0; g < c->n_groups; g++) {
        if (!kv_group_paged(&c->groups[g]))
            continue;
        if (partial) {
            uint32_t id = s->tables[g][pj];
            CAIRN_ASSERT(id != 0);
            if (c->pool.blocks[id].ref > 1) {
                uint32_t copy = kv_cache__alloc(c);
                kv_phys_pool_copy_block(&c->phys, copy, id);
                kv_block_pool_unref(&c->pool, id);
                s->tables[g][pj] = copy;
                c->cow_copies++;
            } else if (c->pool.blocks[id].registered) {
                kv_cache__unpublish(c, id); /* ours alone: its content is about to change */
            }
        }
        for (size_t j = s->n_table; j < need; j++)
            s->tables[g][j] = kv_cache__alloc(c);
    }
    s->n_table = need;
    memcpy(s->tokens + s->n_tokens, tokens, n * sizeof *tokens);
    s->n_tokens = total;
    return CAIRN_OK;
}

int cairn_kv_seq_commit(cairn_kv_seq_t *s, size_t n_new)
{
    if (!s)
        return CAIRN_EINVAL;
    if (s->preempted)
        return CAIRN_ESTATE;
    if (n_new < s->n_computed || n_new > s->n_tokens)
        return CAIRN_ERANGE;
    cairn_kv_cache_t *c = s->cache;
    const uint32_t bs = c->block_size;
    size_t full = n_new / bs;
    int rc = hash_upto(s, full);
    if (rc)
        return rc;
    for (uint32_t g = 0; g < c->n_groups; g++) {
        const kv_group_t *G = &c->groups[g];
        if (!kv_group_paged(G))
            continue;
        for (size_t j = s->n_published[g]; j < full; j++) {
            uint32_t id = s->tables[g][j];
            if (id && !c->pool.blocks[id].registered)
                kv_cache__publish(c, id, g, &s->hashes[j], &s->domain);
        }
        if (full > s->n_published[g])
            s->n_published[g] = full;
        if (G->kind == CAIRN_KV_LAYER_SLIDING) {
            size_t lo = kv_sliding_first_live(G->window, bs, n_new);
            for (size_t j = s->n_dead[g]; j < lo; j++) {
                kv_block_pool_unref(&c->pool, s->tables[g][j]);
                s->tables[g][j] = CAIRN_KV_NULL_BLOCK;
            }
            if (lo > s->n_dead[g])
                s->n_dead[g] = lo;
        }
    }
    s->n_computed = n_new;
    return CAIRN_OK;
}

/* Shrinks the history to n tokens (n <= n_tokens); the caller checked sliding windows. */
static void shrink_to(cairn_kv_seq_t *s, size_t n)
{
    const uint32_t bs = s->cache->block_size;
    drop_tail(s, div_up(n, bs));
    s->n_tokens = n;
    if (s->n_computed > n)
        s->n_computed = n;
    if (s->n_hashed > n / bs)
        s->n_hashed = n / bs;
    for (uint32_t g = 0; g < CAIRN_KV_MAX_GROUPS; g++)
        if (s->n_published[g] > s->n_computed / bs)
            s->n_published[g] = s->n_computed / bs;
}

int cairn_kv_seq_end_turn(cairn_kv_seq_t *s, size_t *dropped)
{
    if (!s)
        return CAIRN_EINVAL;
    if (s->preempted)
        return CAIRN_ESTATE;
    if (dropped)
        *dropped = s->n_tokens - s->n_computed;
    shrink_to(s, s->n_computed);
    return CAIRN_OK;
}

int cairn_kv_seq_truncate(cairn_kv_seq_t *s, size_t k)
{
    if (!s)
        return CAIRN_EINVAL;
    if (s->preempted)
        return CAIRN_ESTATE;
    if (k > s->n_tokens)
        return CAIRN_ERANGE;
    const cairn_kv_cache_t *c = s->cache;
    size_t n = s->n_tokens - k, comp = s->n_computed < n ? s->n_computed : n;
    for (uint32_t g = 0; g < c->n_groups; g++) {
        const kv_group_t *G = &c->groups[g];
        if (G->kind == CAIRN_KV_LAYER_SLIDING &&
            kv_sliding_first_live(G->window, c->block_size, comp) < s->n_dead[g])
            return CAIRN_ERANGE; /* the window would reach back into released blocks */
    }
    shrink_to(s, n);
    return CAIRN_OK;
}

int cairn_kv_seq_fork(cairn_kv_seq_t *s, cairn_kv_seq_t **child)
{
    if (!s || !child)
        return CAIRN_EINVAL;
    *child = NULL;
    if (s->preempted || s->n_computed != s->n_tokens)
        return CAIRN_ESTATE;
    cairn_kv_cache_t *c = s->cache;
    int rc = CAIRN_ENOMEM;
    cairn_kv_seq_t *d = cairn_calloc(1, sizeof *d);
    if (!d)
        return CAIRN_ENOMEM;
    d->cache = c;
    d->domain = s->domain;
    d->extras = s->extras;
    d->has_extras = s->has_extras;
    if (cairn_grow_array((void **)&d->tokens, &d->cap_tokens, s->n_tokens ? s->n_tokens : 1,
                   sizeof *d->tokens, 16) ||
        cairn_grow_array((void **)&d->hashes, &d->cap_hashes, s->n_hashed ? s->n_hashed : 1,
                   sizeof *d->hashes, 16) ||
        reserve_tables(d, s->n_table ? s->n_table : 1))
        goto fail;
    if (s->n_tokens)
        memcpy(d->tokens, s->tokens, s->n_tokens * sizeof *s->tokens);
    if (s->n_hashed)
        memcpy(d->hashes, s->hashes, s->n_hashed * sizeof *s->hashes);
    d->n_tokens = s->n_tokens;
    d->n_computed = s->n_computed;
    d->n_hashed = s->n_hashed;
    memcpy(d->n_published, s->n_published, sizeof d->n_published);
    memcpy(d->n_dead, s->n_dead, sizeof d->n_dead);
    for (uint32_t g = 0; g < c->n_groups; g++) {
        if (!kv_group_paged(&c->groups[g]))
            continue;
        for (size_t j = 0; j < s->n_table; j++) {
            d->tables[g][j] = s->tables[g][j];
            kv_block_pool_ref(&c->pool, s->tables[g][j]);
        }
    }
    d->n_table = s->n_table;
    seq_link(d);
    *child = d;
    return CAIRN_OK;
fail:
    seq_free(d);
    return rc;
}

int cairn_kv_seq_preempt(cairn_kv_seq_t *s, uint32_t *freed)
{
    if (!s)
        return CAIRN_EINVAL;
    if (s->preempted)
        return CAIRN_ESTATE;
    uint32_t f = drop_tail(s, 0);
    s->n_computed = 0;
    memset(s->n_published, 0, sizeof s->n_published);
    memset(s->n_dead, 0, sizeof s->n_dead);
    s->preempted = true;
    if (freed)
        *freed = f;
    return CAIRN_OK;
}

int cairn_kv_seq_resume(cairn_kv_seq_t *s, size_t *prefix_len)
{
    if (!s)
        return CAIRN_EINVAL;
    if (!s->preempted)
        return CAIRN_ESTATE;
    int rc = admit(s, prefix_len);
    if (rc)
        return rc;
    s->preempted = false;
    return CAIRN_OK;
}

static void unlink_and_free(cairn_kv_seq_t *s, uint32_t *freed)
{
    cairn_kv_cache_t *c = s->cache;
    uint32_t f = drop_tail(s, 0);
    if (s->prev)
        s->prev->next = s->next;
    else
        c->seqs = s->next;
    if (s->next)
        s->next->prev = s->prev;
    c->n_seqs--;
    seq_free(s);
    if (freed)
        *freed = f;
}

void cairn_kv_seq_release(cairn_kv_seq_t *s, uint32_t *freed)
{
    if (freed)
        *freed = 0;
    if (s)
        unlink_and_free(s, freed);
}

void kv_seq__destroy_all(cairn_kv_cache_t *c)
{
    while (c->seqs)
        unlink_and_free(c->seqs, NULL);
}

size_t cairn_kv_seq_n_tokens(const cairn_kv_seq_t *s) { return s->n_tokens; }
size_t cairn_kv_seq_n_computed(const cairn_kv_seq_t *s) { return s->n_computed; }
const int32_t *cairn_kv_seq_tokens(const cairn_kv_seq_t *s) { return s->tokens; }
bool cairn_kv_seq_preempted(const cairn_kv_seq_t *s) { return s->preempted; }

const uint32_t *cairn_kv_seq_block_table(const cairn_kv_seq_t *s, uint32_t layer, size_t *n_blocks)
{
    const cairn_kv_cache_t *c = s->cache;
    if (layer >= c->n_layers || c->layers[layer].kind == CAIRN_KV_LAYER_RECURRENT) {
        if (n_blocks)
            *n_blocks = 0;
        return NULL;
    }
    if (n_blocks)
        *n_blocks = s->n_table;
    return s->tables[c->layers[layer].group];
}

int cairn_kv_seq_boundary_key(const cairn_kv_seq_t *s, size_t n, cairn_kv_hash_t *key)
{
    if (!s || !key)
        return CAIRN_EINVAL;
    const uint32_t bs = s->cache->block_size;
    if (n == 0 || n % bs || n / bs > s->n_hashed)
        return CAIRN_ERANGE;
    *key = s->hashes[n / bs - 1];
    return CAIRN_OK;
}

int cairn_kv_seq_checkpoint(cairn_kv_seq_t *s, size_t n, cairn_kv_hash_t *key)
{
    if (!s)
        return CAIRN_EINVAL;
    cairn_kv_cache_t *c = s->cache;
    if (c->recurrent_group < 0)
        return CAIRN_EUNSUPPORTED;
    if (n > s->n_computed)
        return CAIRN_ERANGE;
    cairn_kv_hash_t k;
    int rc = cairn_kv_seq_boundary_key(s, n, &k);
    if (rc)
        return rc;
    kv_ckpt_add(&c->ckpt, &k);
    if (key)
        *key = k;
    return CAIRN_OK;
}
