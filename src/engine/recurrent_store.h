/*
 * engine/recurrent_store.h — the bytes of recurrent-state checkpoints, under a byte budget.
 *
 * Recurrent layers (short convolutions, Gated DeltaNet linear attention) keep a fixed-size
 * state per sequence instead of K/V pages. The engine may save a copy of a sequence's
 * whole state at an exact block boundary P; the KV core's checkpoint registry holds the
 * key (cairn_kv_seq_checkpoint: the chain hash of the block ending at P, which covers the
 * domain, the extras and every token before P) and decides whether a later prompt can
 * resume at P; this store holds the bytes under the same key.
 *
 * Invariants. Every entry holds exactly state_bytes. count * state_bytes <= budget. When
 * a put would exceed the budget, least recently used entries (a put or a get uses an
 * entry) are evicted first, each reported through on_evict so the engine drops the key
 * from the KV registry as well: the registry and the store name the same checkpoints.
 * A key's bytes are never changed in place except by a put of the same key (the state at
 * one chain hash is the same bits by determinism, so it is a refresh, not a change).
 *
 * Pins. A capture copies a checkpoint on an I/O thread while the engine goes on: a pinned
 * entry's bytes stay valid and unchanged until unpinned, even if the entry is evicted or
 * dropped meanwhile (its buffer then lives on outside the budget until the last unpin).
 * A restore decodes a state on an I/O thread into a buffer of rstore_buf_new and hands it
 * over with rstore_adopt, which copies nothing.
 *
 * Thread-safety: one store, one thread (the engine thread), like the KV cache it mirrors;
 * pinned bytes may be read by any thread; rstore_buf_new/_free on any thread.
 */
#ifndef CAIRN_ENGINE_RECURRENT_STORE_H
#define CAIRN_ENGINE_RECURRENT_STORE_H

#include "cairn/kv_cache.h"

typedef struct rstore rstore_t;

/* Called for every entry evicted to make room (not for rstore_drop). Must not call back
 * into the store. */
typedef void (*rstore_evict_fn)(void *user, const cairn_kv_hash_t *key);

typedef struct {
    uint64_t saves;        /* puts that stored an entry */
    uint64_t restores;     /* gets that found their key */
    uint64_t misses;       /* gets that did not */
    uint64_t evictions;    /* entries evicted for the budget */
    uint64_t drops;        /* entries removed by rstore_drop (the registry evicted them) */
    uint64_t refused;      /* puts refused: one state larger than the whole budget */
    uint64_t save_ns;      /* CPU time copying states in (thread CPU clock) */
    uint64_t restore_ns;   /* CPU time copying states out */
    uint64_t count;        /* entries now */
    uint64_t bytes;        /* count * state_bytes */
    uint64_t budget;       /* bytes */
    uint64_t state_bytes;
} rstore_stats_t;

/*
 * Creates an empty store for states of state_bytes (> 0) under budget_bytes. A budget
 * below one state makes every put a refusal (checkpoints off). Errors: CAIRN_EINVAL,
 * CAIRN_ENOMEM.
 */
int rstore_create(size_t state_bytes, uint64_t budget_bytes, rstore_evict_fn on_evict,
                  void *user, rstore_t **out);
/* Frees every entry. NULL is a no-op. */
void rstore_destroy(rstore_t *st);

/*
 * Saves a copy of state (state_bytes) under key, evicting least recently used entries to
 * stay within the budget. An existing entry under key is refreshed and becomes most
 * recent. Errors: CAIRN_ERANGE (state_bytes > budget: nothing stored, nothing evicted),
 * CAIRN_ENOMEM (nothing stored; entries evicted before the failure stay evicted). Cost:
 * one memcpy of state_bytes plus O(1) expected.
 */
int rstore_put(rstore_t *st, const cairn_kv_hash_t *key, const void *state);

/* A buffer for one state (state_bytes, 64-byte aligned), to fill and hand to rstore_adopt,
 * or free with rstore_buf_free. NULL on ENOMEM. Any thread. */
void *rstore_buf_new(size_t state_bytes);
void rstore_buf_free(void *bytes);

/* rstore_put without the copy: the store takes `bytes` (from rstore_buf_new; freed on
 * every error, and when key is already stored). Errors as rstore_put's. */
int rstore_adopt(rstore_t *st, const cairn_kv_hash_t *key, void *bytes);

/* The bytes stored under key, pinned (valid and unchanged until rstore_unpin, whatever
 * happens to the entry), or NULL when absent. No LRU or counter change. O(1). */
const void *rstore_pin(rstore_t *st, const cairn_kv_hash_t *key);
void rstore_unpin(rstore_t *st, const void *bytes);

/* Copies the state saved under key into dst and makes it most recent. CAIRN_ENOENT when
 * absent (counted as a miss). Cost: one memcpy. */
int rstore_get(rstore_t *st, const cairn_kv_hash_t *key, void *dst);

/* Whether key is stored (no LRU or counter change). */
bool rstore_has(const rstore_t *st, const cairn_kv_hash_t *key);

/* Removes key's entry without calling on_evict (the registry dropped it). CAIRN_ENOENT
 * when absent. */
int rstore_drop(rstore_t *st, const cairn_kv_hash_t *key);

void rstore_stats(const rstore_t *st, rstore_stats_t *out);

#endif
