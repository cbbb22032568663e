/*
 * layered_store.c — the tier order as a store: a local store (the SSD tier) in front of a
 * remote one (the shared tier), behind the same interface (include/cairn/shared_tier.h,
 * cairn_tier_layered_create; contract of each op there).
 *
 * Model. The hot pool is the engine's; this store makes "local SSD, then Redis" look like
 * one store to the tier's walks, so neither the walks nor the engine know there are two:
 *   - reads ask the local store first and the remote store only for what the local one
 *     lacks (absent, or found invalid and removed by it): a local hit never asks Redis;
 *   - a block read from the remote store is put into the local one (never waiting for
 *     room), so the next restart of this machine finds it on its own disk;
 *   - captures put each object into every tier that does not hold it yet, the remote one
 *     without waiting (a slow or unreachable shared tier only refuses, counted there).
 * A get calls the caller's destination at most once even when both tiers are read: the
 * destination the local read asked for (before its validation failed) is reused by the
 * remote read.
 * Invariants: the children are borrowed (never destroyed here) and outlive this store;
 * the counters only grow.
 * Thread-safety: the children's ops are thread-safe; the counters are under `mu`.
 */
#include <pthread.h>
#include <string.h>

#include "cairn/shared_tier.h"

typedef struct {
    cairn_tier_store_t base;   /* first: the interface */
    cairn_tier_store_t *local, *remote;
    pthread_mutex_t mu;
    cairn_tier_layered_counters_t n;
} layered_t;

static layered_t *ly_of(cairn_tier_store_t *t) { return (layered_t *)t; }

static bool ly_contains(cairn_tier_store_t *t, const cairn_tier_key_t *key)
{
    layered_t *l = ly_of(t);
    return cairn_tier_store_contains(l->local, key) && cairn_tier_store_contains(l->remote, key);
}

static size_t ly_chain_length(cairn_tier_store_t *t, const cairn_tier_key_t *keys, size_t n)
{
    layered_t *l = ly_of(t);
    size_t got = cairn_tier_store_chain_length(l->local, keys, n);
    if (got < n)
        got += cairn_tier_store_chain_length(l->remote, keys + got, n - got);
    return got;
}

static int ly_put(cairn_tier_store_t *t, const cairn_tier_object_t *obj, uint32_t wait_ms, bool *queued)
{
    layered_t *l = ly_of(t);
    bool lq = false, rq = false;
    int lrc = CAIRN_OK, rrc = CAIRN_OK;
    if (!cairn_tier_store_contains(l->local, &obj->key))
        lrc = cairn_tier_store_put(l->local, obj, wait_ms, &lq);
    if (!cairn_tier_store_contains(l->remote, &obj->key))
        rrc = cairn_tier_store_put(l->remote, obj, 0, &rq);
    if (queued)
        *queued = lq || rq;
    if (lrc == CAIRN_EUNSUPPORTED) /* a kind only the remote tier holds */
        return rrc;
    return lrc;
}

typedef struct {
    cairn_tier_dest_fn dest;
    void *user;
    void *ptr;
    size_t size;
    bool called;
} once_t;

/* The caller's destination, asked for once per get whichever tier reads into it. */
static void *dest_once(void *user, size_t size)
{
    once_t *d = user;
    if (d->called)
        return d->ptr && d->size == size ? d->ptr : NULL;
    d->called = true;
    d->size = size;
    d->ptr = d->dest(d->user, size);
    return d->ptr;
}

static int ly_get(cairn_tier_store_t *t, const cairn_tier_object_t *want, cairn_tier_dest_fn dest, void *user)
{
    layered_t *l = ly_of(t);
    once_t d = {dest, user, NULL, 0, false};
    int rc = cairn_tier_store_get(l->local, want, dest_once, &d);
    if (rc == CAIRN_OK) {
        pthread_mutex_lock(&l->mu);
        l->n.local_hits++;
        pthread_mutex_unlock(&l->mu);
        return rc;
    }
    /* Only a local miss goes on: absent, invalid (removed by the local store), a kind it
     * does not hold, or an I/O error. A declined destination or no memory end here. */
    if (rc == CAIRN_ECANCELED || rc == CAIRN_ENOMEM || rc == CAIRN_EINVAL)
        return rc;
    if (d.called && !d.ptr)
        return CAIRN_ECANCELED;
    rc = cairn_tier_store_get(l->remote, want, dest_once, &d);
    if (rc != CAIRN_OK)
        return rc;
    /* Promote: the local tier copies the payload before put returns. */
    cairn_tier_object_t obj = *want;
    obj.payload = d.ptr;
    obj.payload_size = d.size;
    bool q = false;
    int prc = cairn_tier_store_put(l->local, &obj, 0, &q);
    pthread_mutex_lock(&l->mu);
    l->n.remote_hits++;
    if (prc == CAIRN_OK && q)
        l->n.promoted++;
    else if (prc != CAIRN_OK && prc != CAIRN_EUNSUPPORTED)
        l->n.promote_drops++;
    pthread_mutex_unlock(&l->mu);
    return CAIRN_OK;
}

static void ly_prefetch(cairn_tier_store_t *t, const cairn_tier_key_t *keys, size_t n)
{
    layered_t *l = ly_of(t);
    cairn_tier_store_prefetch(l->local, keys, n);
    /* The remote tier is hinted only the run of keys the local one lacks. */
    size_t i = 0;
    while (i < n && cairn_tier_store_contains(l->local, &keys[i]))
        i++;
    size_t j = i;
    while (j < n && !cairn_tier_store_contains(l->local, &keys[j]))
        j++;
    if (j > i)
        cairn_tier_store_prefetch(l->remote, keys + i, j - i);
}

static void ly_flush(cairn_tier_store_t *t)
{
    layered_t *l = ly_of(t);
    cairn_tier_store_flush(l->local);
    cairn_tier_store_flush(l->remote);
}

static void ly_stats(cairn_tier_store_t *t, cairn_tier_stats_t *out)
{
    layered_t *l = ly_of(t);
    cairn_tier_stats_t a, b;
    cairn_tier_store_stats(l->local, &a);
    cairn_tier_store_stats(l->remote, &b);
    *out = a;
#define SUM(f) out->f = a.f + b.f
    SUM(hits);
    SUM(misses);
    SUM(enqueued);
    SUM(queue_drops);
    SUM(bytes_written);
    SUM(reads);
    SUM(bytes_restored);
    SUM(evictions);
    SUM(corruptions);
    SUM(write_errors);
    SUM(restore_declines);
    SUM(quota_bytes);
    SUM(used_bytes);
    SUM(objects);
    SUM(queue_len);
#undef SUM
    out->enabled = true;
}

static void ly_destroy(cairn_tier_store_t *t)
{
    layered_t *l = ly_of(t);
    pthread_mutex_destroy(&l->mu);
    cairn_free(l);
}

static const cairn_tier_store_ops_t layered_ops = {
    .name = "layered",
    .contains = ly_contains,
    .chain_length = ly_chain_length,
    .put = ly_put,
    .get = ly_get,
    .prefetch = ly_prefetch,
    .flush = ly_flush,
    .stats = ly_stats,
    .destroy = ly_destroy,
};

int cairn_tier_layered_create(cairn_tier_store_t *local, cairn_tier_store_t *remote, cairn_tier_store_t **out)
{
    if (!out)
        return CAIRN_EINVAL;
    *out = NULL;
    if (!local || !remote || local == remote)
        return CAIRN_EINVAL;
    layered_t *l = cairn_calloc(1, sizeof *l);
    if (!l)
        return CAIRN_ENOMEM;
    l->base.ops = &layered_ops;
    l->local = local;
    l->remote = remote;
    pthread_mutex_init(&l->mu, NULL);
    *out = &l->base;
    return CAIRN_OK;
}

int cairn_tier_layered_counters(cairn_tier_store_t *t, cairn_tier_layered_counters_t *out)
{
    memset(out, 0, sizeof *out);
    if (!t || t->ops != &layered_ops)
        return CAIRN_EINVAL;
    layered_t *l = ly_of(t);
    pthread_mutex_lock(&l->mu);
    *out = l->n;
    pthread_mutex_unlock(&l->mu);
    return CAIRN_OK;
}
