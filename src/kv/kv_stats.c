/*
 * kv_stats.c — counters snapshot and its JSON rendering.
 *
 * The counters themselves live in the cache and are plain integers updated on the
 * engine thread; a snapshot is a copy taken on that thread. The JSON is written with
 * snprintf (only numbers, no escaping needed) into a cairn_malloc'd buffer, so it obeys
 * the allocation hooks. Thread-safety: engine thread only.
 */
#include "kv/kv_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void cairn_kv_cache_stats(const cairn_kv_cache_t *c, cairn_kv_stats_t *o)
{
    memset(o, 0, sizeof *o);
    o->hits = c->hits;
    o->misses = c->misses;
    o->hit_tokens = c->hit_tokens;
    o->query_tokens = c->query_tokens;
    o->evictions = c->evictions;
    o->grows = c->grows;
    o->cow_copies = c->cow_copies;
    o->checkpoints = c->ckpt.count;
    o->blocks_in_use = c->pool.n_used;
    o->blocks_pinned = c->pool.n_pinned;
    o->blocks_cached = c->pool.lru.count;
    o->blocks_free = c->pool.free.count;
    o->blocks_total = c->pool.n_blocks;
    o->blocks_max = c->phys.max_blocks;
    o->block_size = c->block_size;
    o->block_bytes = c->phys.block_bytes;
    o->bytes_committed = c->phys.committed_bytes;
    o->bytes_reserved = c->phys.reserved_bytes;
    o->sequences = c->n_seqs;
}

int cairn_kv_stats_to_json(const cairn_kv_stats_t *s, char **json)
{
    if (!s || !json)
        return CAIRN_EINVAL;
    *json = NULL;
    const char *fmt =
        "{\"hits\":%" PRIu64 ",\"misses\":%" PRIu64 ",\"hit_tokens\":%" PRIu64
        ",\"query_tokens\":%" PRIu64 ",\"evictions\":%" PRIu64 ",\"grows\":%" PRIu64
        ",\"cow_copies\":%" PRIu64 ",\"checkpoints\":%" PRIu64 ",\"blocks_in_use\":%" PRIu32
        ",\"blocks_pinned\":%" PRIu32 ",\"blocks_cached\":%" PRIu32 ",\"blocks_free\":%" PRIu32 ",\"blocks_total\":%" PRIu32
        ",\"blocks_max\":%" PRIu32 ",\"block_size\":%" PRIu32 ",\"block_bytes\":%" PRIu64
        ",\"bytes_committed\":%" PRIu64 ",\"bytes_reserved\":%" PRIu64 ",\"sequences\":%" PRIu32
        "}";
#define KV_STATS_ARGS                                                                       \
    s->hits, s->misses, s->hit_tokens, s->query_tokens, s->evictions, s->grows, s->cow_copies, \
        s->checkpoints, s->blocks_in_use, s->blocks_pinned, s->blocks_cached, s->blocks_free, s->blocks_total,   \
        s->blocks_max, s->block_size, s->block_bytes, s->bytes_committed, s->bytes_reserved,   \
        s->sequences
    int n = snprintf(NULL, 0, fmt, KV_STATS_ARGS);
    if (n < 0)
        return CAIRN_EINVAL;
    char *buf = cairn_malloc((size_t)n + 1);
    if (!buf)
        return CAIRN_ENOMEM;
    snprintf(buf, (size_t)n + 1, fmt, KV_STATS_ARGS);
#undef KV_STATS_ARGS
    *json = buf;
    return CAIRN_OK;
}
