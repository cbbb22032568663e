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
