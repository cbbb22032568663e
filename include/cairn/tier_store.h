/*
 * cairn/tier_store.h — the cache tier's store interface: where persisted K/V objects live.
 *
 * Model. A store holds immutable objects for one model fingerprint (the store is opened
 * for it; see cairn/tier.h). An object is named by a key:
 *     kind    BLOCK: one full KV block of a cache group (K/V of every layer, block-major,
 *                    exactly as the pool holds it);
 *             STATE: a sidecar at an exact block boundary (a recurrent group's state, or a
 *                    sliding group's live window rows): what a hybrid family needs besides
 *                    the blocks to resume at that boundary;
 *     hash    BLOCK: the block hash; STATE: the chain hash at its boundary (the hash of the
 *             block ending there). Both already cover the parent chain, the tenant domain
 *             and the tokens, so equal keys mean equal content;
 *     group   the KV core's cache group (0 for a dense model's only group);
 *     domain  the tenant domain the hash was computed under. Redundant with the hash for
 *             lookups, it lets a store keep tenants apart in its own namespace (key
 *             prefixes, per-domain deletion).
 * Each object also carries what a reader must check before trusting it (the parent hash
 * and tokens of a block, the boundary and layout descriptor of a state) and a payload. A
 * store validates all of it on every read, so a damaged or foreign object is a counted
 * miss that the store removes, never bytes handed to inference.
 *
 * Implementations: src/tier/fs (the SSD store, cairn/cold_tier.h; BLOCKs of group 0 and
 * STATE objects), src/tier/mem (in memory: the test double), src/tier/redis (the shared
 * store on Redis, cairn/shared_tier.h; both kinds), src/tier/layered (a local store in
 * front of a shared one, as one store). A store is a struct whose first member is a
 * cairn_tier_store_t pointing at its ops table; adding a store is a new folder, with no edit
 * to the tier logic, the engine or another store. tests/tier/store_contract.c is the
 * behaviour every store must show.
 *
 * Thread-safety: every operation may be called from any thread, concurrently (restore and
 * capture may run on I/O threads); destroy excepted.
 */
#ifndef CAIRN_TIER_STORE_H
#define CAIRN_TIER_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cairn/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CAIRN_TIER_HASH_BYTES 32

/* A 32-byte digest (block hash, domain, fingerprint). Layout-compatible with cairn_kv_hash_t. */
typedef struct { uint8_t bytes[CAIRN_TIER_HASH_BYTES]; } cairn_tier_hash_t;

/* Writes 64 lowercase hex digits and a NUL into out (65 bytes). */
CAIRN_API void cairn_tier_hash_hex(const cairn_tier_hash_t *h, char out[65]);
/* Parses exactly 64 hex digits. Errors: CAIRN_EINVAL. */
CAIRN_API int cairn_tier_hash_parse(const char *hex, cairn_tier_hash_t *out);

/* ---- Objects -------------------------------------------------------------------- */

typedef enum {
    CAIRN_TIER_BLOCK = 0,      /* one full KV block of a cache group */
    CAIRN_TIER_STATE = 1,      /* a sidecar at a block boundary (recurrent state, window rows) */
} cairn_tier_kind_t;

typedef struct {
    cairn_tier_kind_t kind;
    uint32_t group;            /* cache group; 0 for a dense model */
    cairn_tier_hash_t hash;    /* BLOCK: block hash; STATE: chain hash at the boundary */
    cairn_tier_hash_t domain;  /* tenant domain (32 zero bytes: the default domain) */
} cairn_tier_key_t;

/*
 * One object: its key, what a reader must find again (checked on every read) and its
 * payload. All pointers are borrowed for the call. For a get (the object wanted), payload
 * and payload_size are ignored: the payload goes where the destination callback says.
 */
typedef struct {
    cairn_tier_key_t key;
    /* BLOCK: the previous block's hash (all zero for block 0) and the block's tokens. */
    cairn_tier_hash_t parent;
    const int32_t *tokens;
    uint32_t n_tokens;
    /* STATE: tokens before the boundary, and the family's layout descriptor (dtype,
     * tensor count, every dimension: opaque bytes a reader compares exactly). */
    uint64_t boundary;
    const void *layout;
    uint32_t layout_size;
    const void *payload;
    size_t payload_size;
} cairn_tier_object_t;

/* Where a get puts an object's payload: called at most once, after the object is found and
 * protected from the store's own eviction, before its payload is read; returns
 * payload_size writable bytes, or NULL to decline (the get then returns CAIRN_ECANCELED). */
typedef void *(*cairn_tier_dest_fn)(void *user, size_t payload_size);

/* ---- Telemetry ---------------------------------------------------------------------- */

typedef struct {
    uint64_t hits;             /* objects read and validated */
    uint64_t misses;           /* reads of absent objects */
    uint64_t enqueued;         /* objects accepted for writing */
    uint64_t queue_drops;      /* puts refused (no room before their deadline) */
    uint64_t bytes_written;    /* object bytes committed */
    uint64_t reads;            /* object reads attempted (valid or not) */
    uint64_t bytes_restored;   /* payload bytes delivered to callers */
    uint64_t evictions;        /* objects removed by the store's quota */
    uint64_t corruptions;      /* invalid objects found and removed */
    uint64_t write_errors;     /* accepted writes that failed (ENOSPC, EIO...) */
    uint64_t restore_declines; /* gets whose destination was declined */
    /* Identity and gauges (not deltas). */
    bool enabled;
    const char *root;          /* where the objects are (a directory, ...); valid while the store lives */
    uint64_t quota_bytes;
    uint64_t used_bytes;
    uint64_t objects;
    uint32_t queue_len;        /* accepted objects not yet written */
    uint64_t state_objects;    /* of objects, STATE sidecars (0 for a store that keeps no count) */
    uint64_t state_bytes;      /* of used_bytes, theirs */
} cairn_tier_stats_t;

/* Renders stats as one JSON object (no newline); the caller frees with cairn_free. With
 * `delta` non-NULL the counters are cur - delta and the gauges used_bytes, objects and
 * queue_len are left out. Errors: NULL on ENOMEM. Format: docs/FORMAT.md 1.6. */
CAIRN_API char *cairn_tier_stats_json(const cairn_tier_stats_t *cur, const cairn_tier_stats_t *delta);

/* One object as a store's maintenance walk reports it. */
typedef struct {
    cairn_tier_key_t key;      /* domain all zero when the store does not record it */
    cairn_tier_hash_t parent;
    uint64_t bytes;            /* stored bytes (header + payload) */
    uint32_t n_tokens;         /* BLOCK: tokens of the block */
    bool pinned;               /* being read right now (eviction skips it) */
    uint64_t boundary;         /* STATE: tokens before its boundary (0 for a BLOCK) */
} cairn_tier_entry_t;

/* ---- The interface ------------------------------------------------------------------ */

typedef struct cairn_tier_store cairn_tier_store_t;

typedef struct {
    const char *name;          /* "fs", "mem", ... (logs, stats) */

    /* Whether the store holds the object or has accepted it for writing (so a put of it
     * would queue nothing). Metadata only: never reads a payload; no counter changes. */
    bool (*contains)(cairn_tier_store_t *s, const cairn_tier_key_t *key);

    /* How many leading objects of keys[0..n) can be read now: the first i whose keys[i] is
     * absent (accepted-but-unwritten objects count as absent). Metadata only (an index, a
     * pipelined EXISTS): never reads a payload; no counter changes. This is the length a
     * restore proposes before it reads anything. */
    size_t (*chain_length)(cairn_tier_store_t *s, const cairn_tier_key_t *keys, size_t n);

    /* Accepts an object for writing. Tokens, layout and payload are COPIED before it
     * returns, so the caller may recycle its pool block at once. *queued (may be NULL) is
     * false when the object is already held or accepted (nothing is rewritten). Waits up
     * to wait_ms for room (0: do not wait). Write failures after acceptance are counted
     * (write_errors) and logged, never returned. Errors: CAIRN_EEXHAUSTED (no room before
     * the deadline; queue_drops counted), CAIRN_EINVAL (the object disagrees with the
     * store's layout), CAIRN_EUNSUPPORTED (a kind or group the store does not hold),
     * CAIRN_ENOMEM. */
    int (*put)(cairn_tier_store_t *s, const cairn_tier_object_t *obj, uint32_t wait_ms, bool *queued);

    /* Reads the object `want` names into dest(user, size) and validates it completely:
     * its identity, everything `want` says a reader must find again, and its checksums.
     * Returns 0 (hits, reads, bytes_restored counted); CAIRN_ENOENT when absent (a miss);
     * CAIRN_ECORRUPT when invalid: the store removed it and counted a corruption, and the
     * destination's bytes are unspecified; CAIRN_ECANCELED when dest declined
     * (restore_declines); CAIRN_EUNSUPPORTED (kind or group not held); CAIRN_EINVAL,
     * CAIRN_EIO, CAIRN_ENOMEM. */
    int (*get)(cairn_tier_store_t *s, const cairn_tier_object_t *want, cairn_tier_dest_fn dest, void *user);

    /* Optional (NULL: none). A hint that the objects of keys[0..n) will be read soon, in
     * this order: the store may start reading them and keep what it started (open files,
     * replies of pipelined requests) for those reads, within a bound of its own; a read
     * must still find the object as it is then. Never fails, leaves nothing the caller
     * must release, changes no counter. */
    void (*prefetch)(cairn_tier_store_t *s, const cairn_tier_key_t *keys, size_t n);

    /* Blocks until every accepted object is written (or failed). */
    void (*flush)(cairn_tier_store_t *s);

    /* Copies the counters and gauges (enabled true). */
    void (*stats)(cairn_tier_store_t *s, cairn_tier_stats_t *out);

    /* Writes what is accepted, then frees the store. Not concurrent with anything. */
    void (*destroy)(cairn_tier_store_t *s);

    /* Maintenance (tools such as `cairn cache`), each optional: NULL when the store has
     * none (the dispatchers then return CAIRN_EUNSUPPORTED). */
    /* Calls fn per object, least recently used first, until fn returns non-zero. fn must
     * not call into the store. */
    int (*foreach)(cairn_tier_store_t *s, int (*fn)(void *user, const cairn_tier_entry_t *e), void *user);
    /* Reads every object fully and validates it; invalid ones are removed and counted.
     * *checked and *bad receive the counts. */
    int (*verify)(cairn_tier_store_t *s, size_t *checked, size_t *bad);
    /* Evicts least-recently-used unpinned objects until at most quota_bytes are held. */
    int (*prune)(cairn_tier_store_t *s, uint64_t quota_bytes, size_t *evicted);
    /* Removes every unpinned object. */
    int (*clear)(cairn_tier_store_t *s, size_t *removed);
} cairn_tier_store_ops_t;

/* The first member of every store: the interface pointer is the store's address. */
struct cairn_tier_store {
    const cairn_tier_store_ops_t *ops;
};

/*
 * Dispatchers: check their arguments, then call the store's op with the contract above.
 * A NULL store is a store that holds nothing: contains false, chain_length 0, get
 * CAIRN_ENOENT, put CAIRN_EINVAL, flush/destroy no-ops, stats all zero (enabled false).
 * Thread-safety and cost: those of the op.
 */
CAIRN_API bool cairn_tier_store_contains(cairn_tier_store_t *s, const cairn_tier_key_t *key);
CAIRN_API size_t cairn_tier_store_chain_length(cairn_tier_store_t *s, const cairn_tier_key_t *keys, size_t n);
CAIRN_API int cairn_tier_store_put(cairn_tier_store_t *s, const cairn_tier_object_t *obj, uint32_t wait_ms, bool *queued);
CAIRN_API int cairn_tier_store_get(cairn_tier_store_t *s, const cairn_tier_object_t *want, cairn_tier_dest_fn dest,
                         void *user);
CAIRN_API void cairn_tier_store_prefetch(cairn_tier_store_t *s, const cairn_tier_key_t *keys, size_t n);
CAIRN_API void cairn_tier_store_flush(cairn_tier_store_t *s);
CAIRN_API void cairn_tier_store_stats(cairn_tier_store_t *s, cairn_tier_stats_t *out);
CAIRN_API void cairn_tier_store_destroy(cairn_tier_store_t *s);
/* The store's name ("fs", "mem"), or "none" for NULL. */
CAIRN_API const char *cairn_tier_store_name(const cairn_tier_store_t *s);

/* Maintenance dispatchers (CAIRN_EUNSUPPORTED when the store has not the op). The count
 * outputs may be NULL. */
CAIRN_API int cairn_tier_store_foreach(cairn_tier_store_t *s, int (*fn)(void *user, const cairn_tier_entry_t *e),
                             void *user);
CAIRN_API int cairn_tier_store_verify(cairn_tier_store_t *s, size_t *checked, size_t *bad);
CAIRN_API int cairn_tier_store_prune(cairn_tier_store_t *s, uint64_t quota_bytes, size_t *evicted);
CAIRN_API int cairn_tier_store_clear(cairn_tier_store_t *s, size_t *removed);

#ifdef __cplusplus
}
#endif
#endif /* CAIRN_TIER_STORE_H */
