/*
 * cairn/tier.h — the cache tier's logic, once, over any store (cairn/tier_store.h): the
 * model fingerprint that names a store, the per-turn capture walk with its budget and
 * deadline, the restore walk that finds and loads the longest restorable prefix of a
 * chain, and the per-turn telemetry trace.
 *
 * Model. A chain is a prompt's full blocks in order; block i is usable only if blocks
 * 0..i-1 are (attention needs the whole prefix), so both walks go from the front and stop
 * at the first block they cannot handle: capture never leaves a hole that would make the
 * blocks after it unreachable, restore never loads past one. A restore asks the store how
 * long a chain it holds from metadata alone (no payload read) before it reads anything,
 * so the caller can prepare destinations (and, for hybrid families, reduce the length to
 * a boundary its sidecars back) first.
 *
 * What stays with the caller: which blocks are hot already, where restored payloads go
 * (pool blocks), and publishing them. The engine's bridge is src/engine/engine_cold.c.
 *
 * Thread-safety: the walks and the fingerprint are reentrant (the store's ops are
 * thread-safe); a trace object serializes its own lines.
 */
#ifndef CAIRN_TIER_H
#define CAIRN_TIER_H

#include "cairn/tier_store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Model fingerprint ------------------------------------------------------------ */

/*
 * Everything that makes K/V bytes meaningful. The engine fills it from its config; the
 * canonical serialization hashed by cairn_tier_fingerprint() is docs/FORMAT.md 1.4. Any
 * field that differs gives another fingerprint (another store directory, another key
 * prefix), so K/V written for one model is never read by another.
 */
typedef struct {
    const char *architecture;  /* e.g. "llama", "qwen3"; non-NULL */
    uint32_t n_layers;         /* layers whose K/V the pool holds */
    uint32_t n_heads;          /* query heads */
    uint32_t n_kv_heads;       /* K/V heads per layer */
    uint32_t head_dim;         /* dims per head */
    uint32_t block_tokens;     /* tokens per block (block size) */
    cairn_dtype_t kv_dtype;    /* element type of stored K/V */
    uint32_t rope_dim;         /* rotary dims per head (0: head_dim) */
    double rope_theta;         /* rope base frequency */
    uint32_t rope_scaling;     /* engine-defined scaling kind id (0: none) */
    double rope_scaling_factor;
    uint32_t rope_original_ctx;/* original context of the scaling (0: none) */
    const char *extra;         /* any other K/V-relevant settings ("math=bf16;..."), or NULL */
    uint8_t weights_digest[32];/* cairn_tier_weights_digest() of the checkpoint */
    /* The compute backend's numerics id when its K/V bits may differ from the CPU
     * backend's (another backend, another kernel family). NULL or "": the CPU numerics,
     * which every fingerprint before this field meant; nothing is serialized for them,
     * so their fingerprints (and stores) are unchanged. */
    const char *numerics;
} cairn_tier_model_desc_t;

/* One safetensors file of a checkpoint, as fed to the weights digest. */
typedef struct {
    const char *name;          /* file name (no directory), e.g. "model-00001-of-00002.safetensors" */
    const void *header;        /* the file's JSON header bytes */
    size_t header_len;
    uint64_t file_size;        /* total file size in bytes */
} cairn_tier_weights_file_t;

/* SHA-256 over the files' names, headers and sizes, in the order given (the caller sorts
 * by name; docs/FORMAT.md 1.5). Cheap: no tensor data is read. Errors: CAIRN_EINVAL. */
CAIRN_API int cairn_tier_weights_digest(const cairn_tier_weights_file_t *files, size_t n, uint8_t out[32]);

/* SHA-256 of the canonical serialization of *desc. Errors: CAIRN_EINVAL, CAIRN_ENOMEM. */
CAIRN_API int cairn_tier_fingerprint(const cairn_tier_model_desc_t *desc, cairn_tier_hash_t *out);

/* ---- Chains --------------------------------------------------------------------------- */

/* A chain of n full blocks: keys[i] names block i (kind BLOCK), so block i's parent is
 * keys[i-1].hash (zero for block 0) and its tokens tokens[i*block_tokens ..]. */
typedef struct {
    const cairn_tier_key_t *keys;
    const int32_t *tokens;     /* n * block_tokens token ids */
    uint32_t block_tokens;
    size_t n;
} cairn_tier_chain_t;

/* ---- Capture --------------------------------------------------------------------------- */

#define CAIRN_TIER_DEFAULT_CAPTURE_BLOCKS 128
#define CAIRN_TIER_DEFAULT_CAPTURE_BUDGET_MS 250

/* Yields object i of a chain (key, parent, tokens, payload pointer); returns 0, or a
 * negative code to stop the walk. */
typedef int (*cairn_tier_object_fn)(void *user, size_t i, cairn_tier_object_t *out);

typedef enum {
    CAIRN_TIER_STOP_END = 0,   /* the whole chain is held or accepted */
    CAIRN_TIER_STOP_BUDGET,    /* blocks_per_turn new objects were accepted */
    CAIRN_TIER_STOP_DEADLINE,  /* budget_ms elapsed */
    CAIRN_TIER_STOP_REFUSED,   /* an object could not be put (no room, no memory, bad size) */
    CAIRN_TIER_STOP_CALLBACK,  /* the callback returned an error */
} cairn_tier_stop_t;

typedef struct {
    uint32_t blocks_per_turn;  /* 0: knob CAIRN_COLD_CAPTURE_BLOCKS_PER_TURN > 128 */
    uint32_t budget_ms;        /* 0: knob CAIRN_COLD_CAPTURE_BUDGET_MS > 250 */
} cairn_tier_capture_budget_t;

typedef struct {
    size_t reached;            /* leading objects now held or accepted */
    size_t already;            /* of those, held or accepted before (a metadata probe only) */
    size_t enqueued;           /* of those, newly accepted this call */
    cairn_tier_stop_t stop;
    double elapsed_ms;
} cairn_tier_capture_result_t;

/*
 * Capture: walks objects 0..n of a chain through fn. An object the store already holds or
 * has accepted (contains) costs a metadata probe and spends no budget; a new one is put
 * (copied), waiting for room until the deadline rather than giving up. The walk stops at
 * the first object it could not capture, because restore stops at the first hole. budget
 * may be NULL (knobs; the environment wins over a given budget). A deadline stop is
 * logged. Returns 0 (the result says why it stopped) or CAIRN_EINVAL.
 */
CAIRN_API int cairn_tier_capture_chain(cairn_tier_store_t *s, size_t n, cairn_tier_object_fn fn, void *user,
                             const cairn_tier_capture_budget_t *budget, cairn_tier_capture_result_t *res);

/* ---- Background capture ------------------------------------------------------------------ */

/*
 * A capturer copies objects into a store on a thread of its own, so the thread that owns
 * the payloads (the engine thread, whose pool blocks they are) never waits for the copy or
 * for room in the store's queue. The owner keeps each payload valid and unchanged from
 * submit until the job comes back through reap (the engine pins the pool block), and
 * bounds what it holds that way itself (a byte budget). Jobs are put in submission
 * order; each waits as long as it takes for room in the store (the owner's thread is not
 * the one waiting), until stop.
 *
 * Thread-safety: submit, reap, pending and stats from one owner thread or several
 * (internally locked); the put runs on the capturer's thread; create/destroy not
 * concurrent with anything.
 */
typedef struct cairn_tier_capturer cairn_tier_capturer_t;

typedef struct {
    uint64_t submitted;        /* jobs accepted by submit */
    uint64_t put;              /* jobs the store accepted (queued for writing, or held already) */
    uint64_t already;          /* of put, objects the store held or had accepted before */
    uint64_t failed;           /* jobs the store refused (layout, kind, memory) */
    uint64_t canceled;         /* jobs stop() gave back unput */
    uint64_t bytes_put;        /* payload bytes of put jobs that were queued */
    double wait_ms;            /* time the capturer's thread waited for room in the store */
    double busy_ms;            /* time it spent in puts (waits included): bytes_put / busy_ms is
                                  the rate the store takes objects at, i.e. the disk's when
                                  its queue is full */
    uint32_t in_flight;        /* submitted, not yet reaped */
} cairn_tier_capturer_stats_t;

/* Starts a capturer over s (borrowed: it must outlive the capturer). Errors: CAIRN_EINVAL,
 * CAIRN_ENOMEM, CAIRN_EIO (thread creation). */
CAIRN_API int cairn_tier_capturer_create(cairn_tier_store_t *s, cairn_tier_capturer_t **out);

/*
 * Hands an object to the capturer: key, parent, tokens and layout are copied now, the
 * payload is BORROWED until the job is reaped. `tag` comes back with it. Never waits for
 * the store. Errors: CAIRN_EINVAL, CAIRN_ENOMEM, CAIRN_ESTATE (stopped).
 */
CAIRN_API int cairn_tier_capturer_submit(cairn_tier_capturer_t *c, const cairn_tier_object_t *obj, uint64_t tag);

/*
 * Calls fn(user, tag, status) for every finished job, in the order they finished, and
 * forgets them: status 0 (the store has it or accepted it), the put's error
 * (CAIRN_EINVAL, CAIRN_EUNSUPPORTED, CAIRN_ENOMEM) or CAIRN_ECANCELED (given back by
 * stop). After fn returns the payload is the owner's again. fn must not call into the
 * capturer. Returns how many jobs were reaped.
 */
CAIRN_API size_t cairn_tier_capturer_reap(cairn_tier_capturer_t *c, void (*fn)(void *user, uint64_t tag, int status),
                                          void *user);

/* Waits up to wait_ms for at least one job to finish (0: do not wait); true when some
 * finished job awaits reap. */
CAIRN_API bool cairn_tier_capturer_wait(cairn_tier_capturer_t *c, uint32_t wait_ms);

/* Stops taking jobs: the put in progress completes, every job not yet put finishes with
 * CAIRN_ECANCELED (reap them to get their payloads back), and the thread exits. Idempotent. */
CAIRN_API void cairn_tier_capturer_stop(cairn_tier_capturer_t *c);

CAIRN_API void cairn_tier_capturer_stats(cairn_tier_capturer_t *c, cairn_tier_capturer_stats_t *out);

/* Stops, then frees the capturer; jobs not reaped are forgotten (their payloads are the
 * owner's at once: the thread no longer reads them). NULL is a no-op. */
CAIRN_API void cairn_tier_capturer_destroy(cairn_tier_capturer_t *c);

/* ---- Restore --------------------------------------------------------------------------- */

/* Where a restore puts a chain's payloads. */
typedef struct {
    /* Optional. Called once before any read: the store's metadata holds `expected`
     * blocks from `start` (chain_length), so the sink may prepare that many destinations
     * at once. The walk may still read past them (another process may have written more). */
    void (*prepare)(void *user, size_t start, size_t expected);
    /* Destination of block i's payload (payload_size bytes), or NULL to decline it (the
     * walk stops there). Called with the object protected from the store's eviction. */
    void *(*dest)(void *user, size_t i, size_t payload_size);
    void *user;
} cairn_tier_restore_sink_t;

typedef struct {
    size_t start;              /* the first block the walk tried */
    size_t expected;           /* blocks from start the store's metadata held */
    size_t loaded;             /* blocks read and validated, from start, contiguous */
    int stop;                  /* why the walk ended: 0 the chain's end, else the get's status
                                  (CAIRN_ENOENT hole, CAIRN_ECORRUPT, CAIRN_ECANCELED decline ...) */
} cairn_tier_restore_result_t;

/*
 * Restore: the longest restorable prefix of a chain past `start` (the blocks before it
 * are hot already). Asks chain_length for the expected length (metadata only), lets the
 * sink prepare, hints the store to prefetch ahead, then reads blocks start.. n-1 in order
 * into the sink's destinations, validating each, and stops at the first missing, invalid
 * or declined block. Blocks [start, start + res->loaded) hold validated payloads.
 * Errors: CAIRN_EINVAL (bad arguments); CAIRN_ENOMEM (a read ran out of memory: res says
 * what was loaded before, and callers discard it). Otherwise 0, whatever the walk found.
 */
CAIRN_API int cairn_tier_restore_chain(cairn_tier_store_t *s, const cairn_tier_chain_t *chain, size_t start,
                             const cairn_tier_restore_sink_t *sink, cairn_tier_restore_result_t *res);

/* ---- Restore of a hybrid model: the sidecar policy ---------------------------------------- */

/*
 * Why a hybrid restore installed less than the chain the store's metadata proposed (the
 * request log's miss reason): the rule that reduced it, the deepest one when several did.
 */
typedef enum {
    CAIRN_TIER_MISS_NONE = 0,          /* installed at the proposed depth */
    CAIRN_TIER_MISS_CHAIN_EMPTY,       /* no block past the hot prefix on disk */
    CAIRN_TIER_MISS_SIDECAR_MISSING,   /* no boundary above the hot prefix has every sidecar */
    CAIRN_TIER_MISS_SIDECAR_BELOW_FLOOR, /* sidecar-backed boundaries exist, none above the hot prefix */
    CAIRN_TIER_MISS_CORRUPT,           /* a sidecar or block failed validation (removed, counted) */
    CAIRN_TIER_MISS_BLOCKS,            /* the block walk stopped below the boundary (hole, decline) */
    CAIRN_TIER_MISS_INSTALL,           /* the pool or the state bank could not take it */
} cairn_tier_miss_t;

/* The reason's name in logs and JSON ("sidecar_missing", ...). */
CAIRN_API const char *cairn_tier_miss_name(cairn_tier_miss_t m);

/*
 * The sidecars a hybrid family needs at a boundary besides the blocks: n_groups groups
 * (the STATE objects' groups), each asked through the callbacks by its index i < n_groups
 * and the boundary k in blocks (tokens k * block_tokens).
 */
typedef struct {
    uint32_t n_groups;
    /* Whether group i needs nothing from the store at boundary k (its state is in memory
     * already); NULL: never. Metadata only. */
    bool (*hot)(void *user, uint32_t i, size_t k);
    /* Fills what a reader must find again in group i's STATE object at k (key, boundary,
     * layout descriptor; pointers must stay valid until the next call). 0 or an error
     * (the boundary is then not a candidate). */
    int (*want)(void *user, uint32_t i, size_t k, cairn_tier_object_t *want);
    /* Destination of group i's sidecar payload at k, or NULL to decline. */
    void *(*dest)(void *user, uint32_t i, size_t k, size_t payload_size);
    /* Releases every destination handed out for boundary k (a refused candidate), before
     * the next candidate is read. */
    void (*release)(void *user, size_t k);
    void *user;
} cairn_tier_sidecar_policy_t;

typedef struct {
    size_t boundary;           /* blocks of the installed boundary (0: nothing to install) */
    size_t proposed;           /* blocks the store's metadata held from 0 (hot + expected) */
    size_t start, loaded;      /* blocks [start, start + loaded) read into the sink */
    uint32_t sidecars_read;    /* sidecars read and validated at the chosen boundary */
    uint32_t candidates_refused; /* boundaries tried and refused (invalid sidecar, short walk) */
    uint32_t sidecar_corruptions; /* sidecar reads the store found invalid */
    cairn_tier_miss_t miss;
} cairn_tier_hybrid_result_t;

/*
 * Restore for a family with state outside the pool (docs/DESIGN.md, "Cache tier"): the
 * K/V chain proposes a length from metadata only (chain_length from `start`, the first
 * block not in memory); the sidecar policy reduces it to the deepest boundary k with
 * floor < k <= proposed, k <= chain->n, at which every group's sidecar is hot or held
 * (metadata: contains), then validates by reading: every non-hot sidecar at k into the
 * policy's destinations, then blocks [start, k) through the sink (the walk of
 * cairn_tier_restore_chain). A refused candidate (an invalid or missing sidecar, a walk
 * that stops below k) is released before the next, shallower one is tried; blocks the
 * walk validated are kept for it. So all groups end at one boundary or none do
 * (res->boundary 0). Blocks [start, start + res->loaded) hold validated payloads; those
 * at or past res->boundary are the caller's to discard. Errors: CAIRN_EINVAL;
 * CAIRN_ENOMEM (res says what was loaded; the caller discards it). Thread-safety: as
 * the store's ops.
 */
/*
 * The metadata half of cairn_tier_restore_hybrid: the deepest boundary k, floor < k <=
 * the proposal, that every group backs (hot or held: contains), or 0; *proposed (may be
 * NULL) receives the proposal (start + chain_length). No payload is read, no callback
 * but hot and want is called. Lets a caller size what it prepares (pool blocks) before the
 * reads, possibly on another thread. Errors: none (bad arguments give 0).
 */
CAIRN_API size_t cairn_tier_hybrid_propose(cairn_tier_store_t *s, const cairn_tier_chain_t *chain, size_t start,
                                           size_t floor, const cairn_tier_sidecar_policy_t *policy,
                                           size_t *proposed);

CAIRN_API int cairn_tier_restore_hybrid(cairn_tier_store_t *s, const cairn_tier_chain_t *chain, size_t start,
                                        size_t floor, const cairn_tier_restore_sink_t *sink,
                                        const cairn_tier_sidecar_policy_t *policy,
                                        cairn_tier_hybrid_result_t *res);

/* ---- Trace ------------------------------------------------------------------------------ */

typedef struct cairn_tier_trace cairn_tier_trace_t;

/*
 * Opens a per-turn trace: knob CAIRN_COLD_TRACE > path > none. *out is NULL when there is
 * no trace (every trace call then does nothing). Errors: CAIRN_ENOMEM.
 */
CAIRN_API int cairn_tier_trace_create(const char *path, cairn_tier_trace_t **out);
CAIRN_API void cairn_tier_trace_destroy(cairn_tier_trace_t *t);

/*
 * Appends one JSON line {"turn": label, "cold": {store counter deltas since the previous
 * line}} (docs/FORMAT.md 1.6); the first line's deltas count from the store's opening.
 * Write errors are logged, never returned. Thread-safe.
 */
CAIRN_API void cairn_tier_trace_turn(cairn_tier_trace_t *t, cairn_tier_store_t *s, const char *label);

/*
 * Appends one JSON line {"turn":"restore","restore":{"hot":H,"proposed":P,"boundary":B,
 * "loaded":L,"sidecars":S,"refused":R,"corrupt":C,"miss":"<cairn_tier_miss_name>"}}
 * (blocks; docs/FORMAT.md 1.6) for a hybrid restore, so a run that reuses nothing can be
 * explained from the trace alone. Write errors are logged. Thread-safe. NULL t: no-op.
 */
CAIRN_API void cairn_tier_trace_restore(cairn_tier_trace_t *t, size_t hot_blocks, const cairn_tier_hybrid_result_t *r);

#ifdef __cplusplus
}
#endif
#endif /* CAIRN_TIER_H */
