/*
 * mem_store.c — the in-memory store (model, contract and thread-safety: mem_store.h).
 *
 * Invariants: `recs[0..n)` are the live records in least-recently-used-first order (a hit
 * moves its record to the end); used == the sum of their payload sizes; a record taken
 * out while pinned by a get is freed by that get's unpin.
 */
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "tier/mem/mem_store.h"

typedef struct {
    cairn_tier_key_t key;
    cairn_tier_hash_t parent;
    int32_t *tokens;
    uint32_t n_tokens;
    uint64_t boundary;
    uint8_t *layout;
    uint32_t layout_size;
    uint8_t *payload;
    size_t payload_size;
    uint64_t sum;              /* XXH3-64 of the payload at put time */
    uint32_t pins;
    bool removed;
} rec_t;

typedef struct {
    cairn_tier_store_t base;   /* first: the interface */
    tier_mem_config_t cfg;
    pthread_mutex_t mu;
    rec_t **recs;
    size_t n, cap;
    uint64_t used;
    cairn_tier_stats_t c;
    tier_mem_calls_t calls;
} mem_store_t;

static mem_store_t *mem_of(cairn_tier_store_t *t) { return (mem_store_t *)t; }

static bool same_key(const cairn_tier_key_t *a, const cairn_tier_key_t *b)
{
    return a->kind == b->kind && a->group == b->group && !memcmp(a->hash.bytes, b->hash.bytes, 32) &&
           !memcmp(a->domain.bytes, b->domain.bytes, 32);
}

static void rec_free(rec_t *r)
{
    if (!r)
        return;
    cairn_free(r->tokens);
    cairn_free(r->layout);
    cairn_free(r->payload);
    cairn_free(r);
}

/* Index of the record of key, or n. Caller holds mu. */
static size_t find_locked(mem_store_t *m, const cairn_tier_key_t *key)
{
    size_t i = 0;
    while (i < m->n && !same_key(&m->recs[i]->key, key))
        i++;
    return i;
}

/* Takes record i out; frees it unless a get has it pinned. Caller holds mu. */
static void take_out_locked(mem_store_t *m, size_t i)
{
    rec_t *r = m->recs[i];
    memmove(m->recs + i, m->recs + i + 1, (m->n - i - 1) * sizeof *m->recs);
    m->n--;
    m->used -= r->payload_size;
    r->removed = true;
    if (!r->pins)
        rec_free(r);
}

static bool mem_contains(cairn_tier_store_t *t, const cairn_tier_key_t *key)
{
    mem_store_t *m = mem_of(t);
    pthread_mutex_lock(&m->mu);
    m->calls.contains++;
    bool r = find_locked(m, key) < m->n;
    pthread_mutex_unlock(&m->mu);
    return r;
}

static size_t mem_chain_length(cairn_tier_store_t *t, const cairn_tier_key_t *keys, size_t n)
{
    mem_store_t *m = mem_of(t);
    pthread_mutex_lock(&m->mu);
    m->calls.chain_length++;
    size_t i = 0;
    while (i < n && find_locked(m, &keys[i]) < m->n)
        i++;
    pthread_mutex_unlock(&m->mu);
    return i;
}

static void *dup_bytes(const void *p, size_t n)
{
    void *q = cairn_malloc(n ? n : 1);
    if (q && n)
        memcpy(q, p, n);
    return q;
}

static int mem_put(cairn_tier_store_t *t, const cairn_tier_object_t *obj, uint32_t wait_ms, bool *queued)
{
    mem_store_t *m = mem_of(t);
    (void)wait_ms; /* synchronous: room never appears by waiting */
    if (obj->key.kind != CAIRN_TIER_BLOCK && obj->key.kind != CAIRN_TIER_STATE)
        return CAIRN_EINVAL;
    pthread_mutex_lock(&m->mu);
    m->calls.put++;
    bool have = find_locked(m, &obj->key) < m->n;
    bool full = !have && m->cfg.max_objects && m->n >= m->cfg.max_objects;
    if (full)
        m->c.queue_drops++;
    pthread_mutex_unlock(&m->mu);
    if (have)
        return CAIRN_OK;
    if (full)
        return CAIRN_EEXHAUSTED;
    if (m->cfg.put_delay_us) {
        struct timespec ts = {m->cfg.put_delay_us / 1000000u, (long)(m->cfg.put_delay_us % 1000000u) * 1000L};
        nanosleep(&ts, NULL);
    }
    rec_t *r = cairn_calloc(1, sizeof *r);
    if (!r)
        return CAIRN_ENOMEM;
    r->key = obj->key;
    r->parent = obj->parent;
    r->n_tokens = obj->n_tokens;
    r->boundary = obj->boundary;
    r->layout_size = obj->layout_size;
    r->payload_size = obj->payload_size;
    r->tokens = dup_bytes(obj->tokens, obj->n_tokens * sizeof *obj->tokens);
    r->layout = dup_bytes(obj->layout, obj->layout_size);
    r->payload = dup_bytes(obj->payload, obj->payload_size);
    if (!r->tokens || !r->layout || !r->payload) {
        rec_free(r);
        return CAIRN_ENOMEM;
    }
    r->sum = XXH3_64bits(r->payload, r->payload_size);
    int rc = CAIRN_OK;
    pthread_mutex_lock(&m->mu);
    if (find_locked(m, &obj->key) < m->n) { /* a concurrent put won: nothing is rewritten */
        rec_free(r);
        r = NULL;
    } else if (m->cfg.max_objects && m->n >= m->cfg.max_objects) {
        /* Concurrent puts filled the store while this one copied outside the lock: the
         * quota is checked again where the record would be inserted. */
        m->c.queue_drops++;
        rec_free(r);
        r = NULL;
        rc = CAIRN_EEXHAUSTED;
    } else if (m->n == m->cap) {
        size_t nc = m->cap ? 2 * m->cap : 64;
        rec_t **nr = cairn_realloc(m->recs, nc * sizeof *nr);
        if (!nr) {
            rec_free(r);
            r = NULL;
            rc = CAIRN_ENOMEM;
        } else {
            m->recs = nr;
            m->cap = nc;
        }
    }
    if (r) {
        m->recs[m->n++] = r;
        m->used += r->payload_size;
        m->c.enqueued++;
        m->c.bytes_written += r->payload_size;
        if (queued)
            *queued = true;
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Whether record r is what `want` asks for (everything but the payload checksum). */
static bool matches(const rec_t *r, const cairn_tier_object_t *want)
{
    if (memcmp(r->parent.bytes, want->parent.bytes, 32) || r->n_tokens != want->n_tokens ||
        r->boundary != want->boundary || r->layout_size != want->layout_size)
        return false;
    if (r->n_tokens && memcmp(r->tokens, want->tokens, r->n_tokens * sizeof *r->tokens))
        return false;
    return !r->layout_size || !memcmp(r->layout, want->layout, r->layout_size);
}

static int mem_get(cairn_tier_store_t *t, const cairn_tier_object_t *want, cairn_tier_dest_fn dest, void *user)
{
    mem_store_t *m = mem_of(t);
    pthread_mutex_lock(&m->mu);
    m->calls.get++;
    size_t i = find_locked(m, &want->key);
    if (i == m->n) {
        m->c.misses++;
        pthread_mutex_unlock(&m->mu);
        return CAIRN_ENOENT;
    }
    rec_t *r = m->recs[i];
    r->pins++;
    pthread_mutex_unlock(&m->mu);

    /* The record is immutable once stored (tier_mem_damage aside, a test's deliberate
     * race), so it is read without the mutex while pinned. */
    int rc = CAIRN_ECORRUPT;
    void *dst = NULL;
    if (matches(r, want)) {
        dst = dest(user, r->payload_size);
        if (!dst) {
            rc = CAIRN_ECANCELED;
        } else {
            memcpy(dst, r->payload, r->payload_size);
            rc = XXH3_64bits(dst, r->payload_size) == r->sum ? CAIRN_OK : CAIRN_ECORRUPT;
        }
    }

    pthread_mutex_lock(&m->mu);
    if (dst)
        m->calls.payload_reads++;
    if (rc != CAIRN_ECANCELED)
        m->c.reads++;
    if (rc == CAIRN_OK) {
        m->c.hits++;
        m->c.bytes_restored += r->payload_size;
        size_t k = r->removed ? m->n : find_locked(m, &want->key);
        if (k < m->n) { /* most recently used last */
            memmove(m->recs + k, m->recs + k + 1, (m->n - k - 1) * sizeof *m->recs);
            m->recs[m->n - 1] = r;
        }
    } else if (rc == CAIRN_ECANCELED) {
        m->c.restore_declines++;
    } else {
        m->c.corruptions++;
        if (!r->removed)
            take_out_locked(m, find_locked(m, &want->key));
    }
    if (--r->pins == 0 && r->removed)
        rec_free(r);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static void mem_prefetch(cairn_tier_store_t *t, const cairn_tier_key_t *keys, size_t n)
{
    mem_store_t *m = mem_of(t);
    (void)keys;
    pthread_mutex_lock(&m->mu);
    m->calls.prefetch++;
    m->calls.prefetched += n;
    pthread_mutex_unlock(&m->mu);
}

static void mem_flush(cairn_tier_store_t *t)
{
    mem_store_t *m = mem_of(t);
    pthread_mutex_lock(&m->mu);
    m->calls.flush++;
    pthread_mutex_unlock(&m->mu);
}

static void mem_stats(cairn_tier_store_t *t, cairn_tier_stats_t *out)
{
    mem_store_t *m = mem_of(t);
    pthread_mutex_lock(&m->mu);
    m->calls.stats++;
    *out = m->c;
    out->enabled = true;
    out->root = "memory";
    out->used_bytes = m->used;
    out->objects = m->n;
    for (size_t i = 0; i < m->n; i++)
        if (m->recs[i]->key.kind == CAIRN_TIER_STATE) {
            out->state_objects++;
            out->state_bytes += m->recs[i]->payload_size;
        }
    pthread_mutex_unlock(&m->mu);
}

static void mem_destroy(cairn_tier_store_t *t)
{
    mem_store_t *m = mem_of(t);
    for (size_t i = 0; i < m->n; i++)
        rec_free(m->recs[i]);
    cairn_free(m->recs);
    pthread_mutex_destroy(&m->mu);
    cairn_free(m);
}

static int mem_foreach(cairn_tier_store_t *t, int (*fn)(void *user, const cairn_tier_entry_t *e), void *user)
{
    mem_store_t *m = mem_of(t);
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n; i++) {
        const rec_t *r = m->recs[i];
        cairn_tier_entry_t e = {r->key, r->parent, r->payload_size, r->n_tokens, r->pins > 0, r->boundary};
        if (fn(user, &e))
            break;
    }
    pthread_mutex_unlock(&m->mu);
    return CAIRN_OK;
}

/* Takes out unpinned records, least recently used first, until used <= quota. */
static size_t drop_locked(mem_store_t *m, uint64_t quota)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n && m->used > quota;) {
        if (m->recs[i]->pins) {
            i++;
            continue;
        }
        take_out_locked(m, i);
        n++;
    }
    return n;
}

static int mem_prune(cairn_tier_store_t *t, uint64_t quota_bytes, size_t *evicted)
{
    mem_store_t *m = mem_of(t);
    pthread_mutex_lock(&m->mu);
    *evicted = drop_locked(m, quota_bytes);
    m->c.evictions += *evicted;
    pthread_mutex_unlock(&m->mu);
    return CAIRN_OK;
}

static int mem_clear(cairn_tier_store_t *t, size_t *removed)
{
    mem_store_t *m = mem_of(t);
    pthread_mutex_lock(&m->mu);
    size_t n = 0;
    for (size_t i = 0; i < m->n;) {
        if (m->recs[i]->pins) {
            i++;
            continue;
        }
        take_out_locked(m, i);
        n++;
    }
    pthread_mutex_unlock(&m->mu);
    *removed = n;
    return CAIRN_OK;
}

static const cairn_tier_store_ops_t mem_ops = {
    .name = "mem",
    .contains = mem_contains,
    .chain_length = mem_chain_length,
    .put = mem_put,
    .get = mem_get,
    .prefetch = mem_prefetch,
    .flush = mem_flush,
    .stats = mem_stats,
    .destroy = mem_destroy,
    .foreach = mem_foreach,
    .prune = mem_prune,
    .clear = mem_clear,
};

int tier_mem_create(const tier_mem_config_t *cfg, cairn_tier_store_t **out)
{
    *out = NULL;
    mem_store_t *m = cairn_calloc(1, sizeof *m);
    if (!m)
        return CAIRN_ENOMEM;
    m->base.ops = &mem_ops;
    if (cfg)
        m->cfg = *cfg;
    pthread_mutex_init(&m->mu, NULL);
    *out = &m->base;
    return CAIRN_OK;
}

void tier_mem_calls(cairn_tier_store_t *t, tier_mem_calls_t *out)
{
    mem_store_t *m = mem_of(t);
    pthread_mutex_lock(&m->mu);
    *out = m->calls;
    pthread_mutex_unlock(&m->mu);
}

int tier_mem_damage(cairn_tier_store_t *t, const cairn_tier_key_t *key, size_t offset)
{
    mem_store_t *m = mem_of(t);
    pthread_mutex_lock(&m->mu);
    size_t i = find_locked(m, key);
    int rc = CAIRN_ENOENT;
    if (i < m->n && m->recs[i]->payload_size) {
        m->recs[i]->payload[offset % m->recs[i]->payload_size] ^= 0x20;
        rc = CAIRN_OK;
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

int tier_mem_remove(cairn_tier_store_t *t, const cairn_tier_key_t *key)
{
    mem_store_t *m = mem_of(t);
    pthread_mutex_lock(&m->mu);
    size_t i = find_locked(m, key);
    int rc = CAIRN_ENOENT;
    if (i < m->n) {
        take_out_locked(m, i);
        rc = CAIRN_OK;
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}
