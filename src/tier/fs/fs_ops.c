/*
 * fs_ops.c — the filesystem store behind the tier's store interface
 * (include/cairn/tier_store.h): keys to block hashes, the interface's contract onto the
 * store's own calls.
 *
 * Model: the store holds BLOCK objects of cache group 0, named by the block hash alone,
 * and STATE objects of any group, named by the hash and the group (docs/FORMAT.md 1.1; the
 * hash covers the domain, so the key's domain is not stored). A BLOCK of another group is
 * CAIRN_EUNSUPPORTED (its layout is not the store's). contains() counts queued objects
 * too (a put of them would queue nothing); chain_length() only what the index holds (what
 * a read can find now). prefetch() starts each object's read ahead of the walk
 * (fs_ahead.c: a direct read through io_uring, or a kept descriptor hinted with
 * POSIX_FADV_WILLNEED), so a restore opens each object once while the device works on the
 * next ones. A read whose object left the index since its prefetch drops what was kept
 * and opens the name again: only the name counts, never an old inode.
 * Thread-safety: that of the store's calls (all thread-safe).
 */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "tier/fs/fs_store_impl.h"

static cairn_cold_store_t *fs_of(cairn_tier_store_t *t) { return (cairn_cold_store_t *)t; }

static bool held_kind(const cairn_tier_key_t *k)
{
    return (k->kind == CAIRN_TIER_BLOCK && k->group == 0) || k->kind == CAIRN_TIER_STATE;
}

static bool fs_contains(cairn_tier_store_t *t, const cairn_tier_key_t *key)
{
    cairn_cold_store_t *s = fs_of(t);
    if (!held_kind(key))
        return false;
    pthread_mutex_lock(&s->mu);
    bool held = fs__find_locked(s, key) != NULL;
    pthread_mutex_unlock(&s->mu);
    return held || fs__pending(s, key);
}

static size_t fs_chain_length(cairn_tier_store_t *t, const cairn_tier_key_t *keys, size_t n)
{
    cairn_cold_store_t *s = fs_of(t);
    size_t i = 0;
    pthread_mutex_lock(&s->mu);
    while (i < n && held_kind(&keys[i]) && fs__find_locked(s, &keys[i]))
        i++;
    pthread_mutex_unlock(&s->mu);
    return i;
}

static int fs_put(cairn_tier_store_t *t, const cairn_tier_object_t *obj, uint32_t wait_ms, bool *queued)
{
    if (!held_kind(&obj->key))
        return CAIRN_EUNSUPPORTED;
    return fs__enqueue(fs_of(t), obj, wait_ms, queued);
}

static int fs_get(cairn_tier_store_t *t, const cairn_tier_object_t *want, cairn_tier_dest_fn dest, void *user)
{
    cairn_cold_store_t *s = fs_of(t);
    if (!held_kind(&want->key))
        return CAIRN_EUNSUPPORTED;
    if (want->key.kind == CAIRN_TIER_STATE)
        return fs__read_state(s, want, dest, user);
    if (!s->n_layers)
        return CAIRN_EINVAL; /* layout "any": the payload size is not known before the read */
    return fs__read(s, &want->key.hash, &want->parent, want->tokens, want->n_tokens, NULL, 0, dest, user);
}

static void fs_prefetch(cairn_tier_store_t *t, const cairn_tier_key_t *keys, size_t n)
{
    cairn_cold_store_t *s = fs_of(t);
    for (size_t i = 0; i < n; i++)
        if (keys[i].kind == CAIRN_TIER_BLOCK && keys[i].group == 0)
            fs__prefetch(s, &keys[i].hash);
}

static void fs_flush(cairn_tier_store_t *t) { cairn_cold_store_flush(fs_of(t)); }

static void fs_stats(cairn_tier_store_t *t, cairn_tier_stats_t *out) { cairn_cold_store_stats(fs_of(t), out); }

static void fs_destroy(cairn_tier_store_t *t) { cairn_cold_store_destroy(fs_of(t)); }

static int fs_foreach(cairn_tier_store_t *t, int (*fn)(void *user, const cairn_tier_entry_t *e), void *user)
{
    cairn_cold_store_foreach(fs_of(t), fn, user);
    return CAIRN_OK;
}

static int fs_verify(cairn_tier_store_t *t, size_t *checked, size_t *bad)
{
    return cairn_cold_store_verify(fs_of(t), checked, bad);
}

static int fs_prune(cairn_tier_store_t *t, uint64_t quota_bytes, size_t *evicted)
{
    cairn_cold_store_prune(fs_of(t), quota_bytes, evicted);
    return CAIRN_OK;
}

static int fs_clear(cairn_tier_store_t *t, size_t *removed)
{
    cairn_cold_store_clear(fs_of(t), removed);
    return CAIRN_OK;
}

const cairn_tier_store_ops_t fs__ops = {
    .name = "fs",
    .contains = fs_contains,
    .chain_length = fs_chain_length,
    .put = fs_put,
    .get = fs_get,
    .prefetch = fs_prefetch,
    .flush = fs_flush,
    .stats = fs_stats,
    .destroy = fs_destroy,
    .foreach = fs_foreach,
    .verify = fs_verify,
    .prune = fs_prune,
    .clear = fs_clear,
};

cairn_tier_store_t *cairn_cold_store_tier(cairn_cold_store_t *s) { return s ? &s->base : NULL; }
