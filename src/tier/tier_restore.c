/*
 * tier_restore.c — the restore walk: load the longest restorable prefix of a chain past
 * its hot part from a store.
 *
 * Model: the store first says, from metadata alone, how many blocks from `start` it holds
 * (the length a restore proposes; nothing is read yet), and the sink prepares that many
 * destinations. Then blocks are read in chain order, each into the destination the sink
 * gives once the store has found (and pinned) the object, and validated by the store
 * against its key, its parent (the previous block's hash) and its tokens. The walk stops
 * at the first block that is missing, invalid or declined: the KV core never attaches past
 * a hole, so a restored prefix is always a contiguous chain of valid blocks. The walk does
 * not stop at the expected length: another process sharing the store may have written
 * more since the metadata was read.
 * I/O overlap: the store is hinted (prefetch) PREFETCH blocks ahead of the read, so a disk
 * works on several objects while one is validated.
 *
 * Hybrid families (cairn_tier_restore_hybrid): a prefix of such a model also needs, for
 * every group outside the FULL layers' blocks, a STATE sidecar at exactly its boundary.
 * The chain's metadata proposes a length; the sidecar policy reduces it, from metadata
 * again (contains), to the deepest boundary every group backs; that candidate is then
 * validated by reading its sidecars and the blocks up to it. A candidate that fails is
 * released before the next shallower one is tried, so nothing refused is held while the
 * walk goes on, and blocks already validated serve the next candidate without a re-read.
 * Only one boundary is ever installed for all groups: the restore reconciles down, never
 * resumes state at a length it was not captured at.
 * Thread-safety: reentrant; the store's ops are thread-safe.
 */
#include <string.h>

#include "cairn/tier.h"

#define PREFETCH 16

typedef struct {
    const cairn_tier_restore_sink_t *sink;
    size_t i;
} dest_ctx_t;

static void *dest_of(void *user, size_t payload_size)
{
    dest_ctx_t *d = user;
    return d->sink->dest(d->sink->user, d->i, payload_size);
}

int cairn_tier_restore_chain(cairn_tier_store_t *s, const cairn_tier_chain_t *c, size_t start,
                             const cairn_tier_restore_sink_t *sink, cairn_tier_restore_result_t *res)
{
    if (!res)
        return CAIRN_EINVAL;
    memset(res, 0, sizeof *res);
    res->start = start;
    if (!s || !c || !sink || !sink->dest || !c->block_tokens || (c->n && (!c->keys || !c->tokens)))
        return CAIRN_EINVAL;
    if (start >= c->n)
        return CAIRN_OK;
    res->expected = cairn_tier_store_chain_length(s, c->keys + start, c->n - start);
    if (sink->prepare)
        sink->prepare(sink->user, start, res->expected);
    static const cairn_tier_hash_t zero;
    size_t ahead = start; /* keys [start, ahead) were hinted */
    int rc = CAIRN_OK;
    for (size_t i = start; i < c->n; i++) {
        size_t until = i + PREFETCH < c->n ? i + PREFETCH : c->n;
        if (ahead < until) {
            cairn_tier_store_prefetch(s, c->keys + ahead, until - ahead);
            ahead = until;
        }
        cairn_tier_object_t want = {
            .key = c->keys[i],
            .parent = i ? c->keys[i - 1].hash : zero,
            .tokens = c->tokens + i * c->block_tokens,
            .n_tokens = c->block_tokens,
        };
        dest_ctx_t d = {sink, i};
        int r = cairn_tier_store_get(s, &want, dest_of, &d);
        if (r) {
            res->stop = r;
            if (r == CAIRN_ENOMEM)
                rc = r;
            break;
        }
        res->loaded++;
    }
    return rc;
}

const char *cairn_tier_miss_name(cairn_tier_miss_t m)
{
    switch (m) {
    case CAIRN_TIER_MISS_NONE: return "none";
    case CAIRN_TIER_MISS_CHAIN_EMPTY: return "chain_empty";
    case CAIRN_TIER_MISS_SIDECAR_MISSING: return "sidecar_missing";
    case CAIRN_TIER_MISS_SIDECAR_BELOW_FLOOR: return "sidecar_below_floor";
    case CAIRN_TIER_MISS_CORRUPT: return "corrupt";
    case CAIRN_TIER_MISS_BLOCKS: return "blocks";
    case CAIRN_TIER_MISS_INSTALL: return "install";
    }
    return "unknown";
}

/* Whether every group's state at boundary k is in memory or its sidecar can be read now
 * (metadata only). The store's chain_length of the one key, not contains(): contains may
 * answer from what this process wrote or saw (the shared tier's key cache, a queued
 * write), so a fresh process over a shared tier that holds the sidecar would not see it,
 * and a queued sidecar cannot be read yet. */
static bool backed(cairn_tier_store_t *s, const cairn_tier_sidecar_policy_t *p, size_t k)
{
    for (uint32_t i = 0; i < p->n_groups; i++) {
        if (p->hot && p->hot(p->user, i, k))
            continue;
        cairn_tier_object_t w;
        memset(&w, 0, sizeof w);
        if (p->want(p->user, i, k, &w) || cairn_tier_store_chain_length(s, &w.key, 1) != 1)
            return false;
    }
    return true;
}

typedef struct {
    const cairn_tier_sidecar_policy_t *p;
    uint32_t i;
    size_t k;
} side_ctx_t;

static void *side_dest(void *user, size_t payload_size)
{
    side_ctx_t *d = user;
    return d->p->dest(d->p->user, d->i, d->k, payload_size);
}

/* Reads and validates every non-hot sidecar at k. 0, or the first failing get's code;
 * *n_read counts the sidecars read. */
static int read_sidecars(cairn_tier_store_t *s, const cairn_tier_sidecar_policy_t *p, size_t k,
                         uint32_t *n_read)
{
    *n_read = 0;
    for (uint32_t i = 0; i < p->n_groups; i++) {
        if (p->hot && p->hot(p->user, i, k))
            continue;
        cairn_tier_object_t w;
        memset(&w, 0, sizeof w);
        int rc = p->want(p->user, i, k, &w);
        side_ctx_t d = {p, i, k};
        if (!rc)
            rc = cairn_tier_store_get(s, &w, side_dest, &d);
        if (rc)
            return rc;
        (*n_read)++;
    }
    return CAIRN_OK;
}

size_t cairn_tier_hybrid_propose(cairn_tier_store_t *s, const cairn_tier_chain_t *c, size_t start, size_t floor,
                                 const cairn_tier_sidecar_policy_t *p, size_t *proposed)
{
    if (proposed)
        *proposed = 0;
    if (!s || !c || !p || !p->want || (c->n && !c->keys) || start > c->n || floor > start)
        return 0;
    const size_t top = start + (start < c->n ? cairn_tier_store_chain_length(s, c->keys + start, c->n - start) : 0);
    if (proposed)
        *proposed = top;
    for (size_t k = top; k > floor; k--)
        if (backed(s, p, k))
            return k;
    return 0;
}

int cairn_tier_restore_hybrid(cairn_tier_store_t *s, const cairn_tier_chain_t *c, size_t start, size_t floor,
                              const cairn_tier_restore_sink_t *sink, const cairn_tier_sidecar_policy_t *p,
                              cairn_tier_hybrid_result_t *res)
{
    if (!res)
        return CAIRN_EINVAL;
    memset(res, 0, sizeof *res);
    res->start = start;
    if (!s || !c || !sink || !sink->dest || !p || !p->want || !p->dest || !p->release || !c->block_tokens ||
        (c->n && (!c->keys || !c->tokens)) || start > c->n || floor > start)
        return CAIRN_EINVAL;
    /* The proposal: metadata only, nothing read. */
    const size_t top = start + (start < c->n ? cairn_tier_store_chain_length(s, c->keys + start, c->n - start) : 0);
    res->proposed = top;
    size_t have = start; /* blocks [0, have) in memory or read and validated */
    cairn_tier_miss_t why = CAIRN_TIER_MISS_SIDECAR_MISSING;
    for (size_t k = top; k > floor; k--) {
        if (!backed(s, p, k))
            continue;
        uint32_t n_read = 0;
        int rc = read_sidecars(s, p, k, &n_read);
        if (rc) {
            p->release(p->user, k);
            if (rc == CAIRN_ENOMEM)
                return rc;
            res->candidates_refused++;
            if (rc == CAIRN_ECORRUPT) {
                res->sidecar_corruptions++;
                why = CAIRN_TIER_MISS_CORRUPT;
            }
            continue;
        }
        if (k > have) {
            cairn_tier_chain_t sub = *c;
            sub.n = k;
            cairn_tier_restore_result_t rr;
            rc = cairn_tier_restore_chain(s, &sub, have, sink, &rr);
            res->loaded += rr.loaded;
            have += rr.loaded;
            if (rc == CAIRN_OK && have < k) {
                why = rr.stop == CAIRN_ECORRUPT ? CAIRN_TIER_MISS_CORRUPT : CAIRN_TIER_MISS_BLOCKS;
                rc = CAIRN_ENOENT;
            }
            if (rc) {
                p->release(p->user, k);
                if (rc == CAIRN_ENOMEM)
                    return rc;
                res->candidates_refused++;
                k = have + 1; /* the loop goes on at the deepest validated block */
                continue;
            }
        }
        res->boundary = k;
        res->sidecars_read = n_read;
        res->miss = k < top ? why : CAIRN_TIER_MISS_NONE;
        return CAIRN_OK;
    }
    if (top == start && why == CAIRN_TIER_MISS_SIDECAR_MISSING) {
        why = CAIRN_TIER_MISS_CHAIN_EMPTY;
    } else if (why == CAIRN_TIER_MISS_SIDECAR_MISSING) {
        for (size_t k = floor; k > 0; k--)
            if (backed(s, p, k)) {
                why = CAIRN_TIER_MISS_SIDECAR_BELOW_FLOOR;
                break;
            }
    }
    res->miss = why;
    return CAIRN_OK;
}
