/*
 * prefix_index.c — an open-addressing hash table of 32-bit ids (block ids, checkpoint
 * ids) keyed by whatever the owner stores under those ids.
 *
 * The table holds only ids; the key (a 32-byte SHA-256 plus group and domain for blocks)
 * lives in the owner's metadata, reached through the hash_of/match callbacks, so an entry
 * is 4 bytes and a probe touches one cache line of the table. Keys are SHA-256 outputs,
 * so their first 8 bytes are already uniform and serve as the table hash. Linear probing
 * with backward-shift deletion (no tombstones): every operation is O(1) expected at load
 * <= 1/2, which kv_index_reserve() keeps. Slot value 0 means empty, so id 0 (the null
 * block) can never be indexed. Thread-safety: owned by one cache, one thread.
 */
#include "kv/kv_internal.h"

#include <string.h>

static uint32_t cap_for(uint32_t max_entries)
{
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)max_entries)
        cap *= 2;
    return (uint32_t)(cap > (1u << 31) ? (1u << 31) : cap);
}

int kv_index_init(kv_index_t *ix, uint32_t max_entries, kv_index_hash_fn hash_of,
                  kv_index_match_fn match, const void *ctx)
{
    memset(ix, 0, sizeof *ix);
    ix->hash_of = hash_of;
    ix->match = match;
    ix->ctx = ctx;
    uint32_t cap = cap_for(max_entries);
    ix->slots = cairn_calloc(cap, sizeof *ix->slots);
    if (!ix->slots)
        return CAIRN_ENOMEM;
    ix->mask = cap - 1;
    return CAIRN_OK;
}

void kv_index_fini(kv_index_t *ix)
{
    cairn_free(ix->slots);
    memset(ix, 0, sizeof *ix);
}

int kv_index_reserve(kv_index_t *ix, uint32_t max_entries)
{
    uint32_t cap = cap_for(max_entries);
    if (cap <= ix->mask + 1)
        return CAIRN_OK;
    uint32_t *slots = cairn_calloc(cap, sizeof *slots);
    if (!slots)
        return CAIRN_ENOMEM;
    uint32_t *old = ix->slots, old_cap = ix->mask + 1;
    ix->slots = slots;
    ix->mask = cap - 1;
    for (uint32_t i = 0; i < old_cap; i++) {
        uint32_t id = old[i];
        if (id) {
            uint32_t s = (uint32_t)ix->hash_of(ix->ctx, id) & ix->mask;
            while (ix->slots[s])
                s = (s + 1) & ix->mask;
            ix->slots[s] = id;
        }
    }
    cairn_free(old);
    return CAIRN_OK;
}

uint32_t kv_index_find(const kv_index_t *ix, uint64_t h, const void *key)
{
    for (uint32_t s = (uint32_t)h & ix->mask;; s = (s + 1) & ix->mask) {
        uint32_t id = ix->slots[s];
        if (!id)
            return 0;
        if (ix->match(ix->ctx, id, key))
            return id;
    }
}

void kv_index_insert(kv_index_t *ix, uint64_t h, uint32_t id)
{
    CAIRN_ASSERT(id != 0 && ix->count < ix->mask); /* reserve() keeps load <= 1/2 */
    uint32_t s = (uint32_t)h & ix->mask;
    while (ix->slots[s])
        s = (s + 1) & ix->mask;
    ix->slots[s] = id;
    ix->count++;
}

void kv_index_remove(kv_index_t *ix, uint64_t h, uint32_t id)
{
    uint32_t s = (uint32_t)h & ix->mask;
    while (ix->slots[s] != id) {
        CAIRN_ASSERT(ix->slots[s] != 0); /* removing an id that is not indexed */
        s = (s + 1) & ix->mask;
    }
    /* Backward shift: pull later members of the run into the hole when their home slot
     * does not lie cyclically in (hole, j]. */
    uint32_t hole = s;
    for (uint32_t j = (hole + 1) & ix->mask; ix->slots[j]; j = (j + 1) & ix->mask) {
        uint32_t home = (uint32_t)ix->hash_of(ix->ctx, ix->slots[j]) & ix->mask;
        bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!stays) {
            ix->slots[hole] = ix->slots[j];
            hole = j;
        }
    }
    ix->slots[hole] = 0;
    ix->count--;
}
