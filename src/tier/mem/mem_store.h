/*
 * mem_store.h — private: the in-memory store, the tier interface's test double
 * (include/cairn/tier_store.h).
 *
 * Model: objects of every kind (BLOCK and STATE, any group) live in process memory, keyed
 * by the whole key (domain included, as a shared store would key them), with a copy of
 * what a reader must find again and an XXH3-64 checksum of the payload. Puts are
 * synchronous (nothing is ever queued; flush returns at once). A get validates like a
 * real store: a record whose parent, tokens, boundary or layout disagree with the request,
 * or whose payload no longer matches its checksum, is a corruption that removes it.
 * For tests it counts every call and every payload read, and can damage or remove an
 * object, so the tier logic can be tested against holes and corruption without a disk.
 * Cost: lookups scan the objects (O(objects)); meant for tests, not for volume.
 * Thread-safety: every op takes the store's mutex; a get pins its record while the
 * destination callback runs (outside the mutex), so the callback may call into the store.
 */
#ifndef CAIRN_TIER_MEM_STORE_H
#define CAIRN_TIER_MEM_STORE_H

#include "cairn/tier_store.h"

typedef struct {
    size_t max_objects;        /* 0: unlimited; a put past it is CAIRN_EEXHAUSTED (queue_drops) */
    uint32_t put_delay_us;     /* each put that stores an object first sleeps this long (a slow store) */
} tier_mem_config_t;

/* Calls of each op, and what the gets really read. */
typedef struct {
    uint64_t contains, chain_length, put, get, prefetch, flush, stats;
    uint64_t payload_reads;    /* gets that copied a payload to a destination */
    uint64_t prefetched;       /* keys hinted by prefetch */
} tier_mem_calls_t;

/* Creates an empty store (cfg may be NULL: the defaults). Errors: CAIRN_ENOMEM. */
int tier_mem_create(const tier_mem_config_t *cfg, cairn_tier_store_t **out);

/* Copies the call counts. */
void tier_mem_calls(cairn_tier_store_t *s, tier_mem_calls_t *out);

/* Flips one payload bit of the object at byte `offset` (modulo its payload size), so the
 * next get finds it corrupt. Errors: CAIRN_ENOENT (no such object). */
int tier_mem_damage(cairn_tier_store_t *s, const cairn_tier_key_t *key, size_t offset);

/* Removes the object (a hole), counted nowhere. Errors: CAIRN_ENOENT. */
int tier_mem_remove(cairn_tier_store_t *s, const cairn_tier_key_t *key);

#endif
