/*
 * cairn/kv_cache.h — the engine-agnostic, block-paged KV cache core.
 *
 * Model. Token positions are paged into blocks of `block_size` slots. A block is one
 * contiguous byte range of the physical pool holding, for every layer of one cache group
 * that owns storage, K then V as [block_size][n_kv_heads][head_dim] of the K/V element
 * type. Blocks are refcounted and shared between sequences with a common prefix; a full
 * block is content-addressed by a chained SHA-256 hash
 *
 *     hash(block j) = SHA-256(hash(block j-1) || domain || tokens of block j as int32 LE
 *                             || extras)          (block -1's hash is 32 zero bytes;
 *                                                  extras only in block 0, so later blocks
 *                                                  inherit them through the chain)
 *
 * where `domain` is SHA-256 of the caller's cache_salt (32 zero bytes without one) and
 * `extras` is SHA-256 over the length-prefixed extra keys (an image digest, an adapter id).
 * Requests in different domains never share a block. Block id 0 is the null block: it
 * never holds data and marks sliding-window positions that are no longer attended.
 *
 * How an engine drives it (one engine thread per cache):
 *
 *   1. cairn_kv_cache_create() from the model geometry: block size, per-layer kind
 *      (full / sliding W / recurrent / KV-shared alias), n_kv_heads and head_dim, dtype,
 *      memory budget and initial size in MiB.
 *   2. cairn_kv_seq_begin(cache, domain, extras, prompt, n, &seq, &P): P is the usable
 *      cached prefix in tokens (whole blocks, served by every group, at most n-1 so at
 *      least one token is computed for logits). Slots for the whole prompt are reserved.
 *      If the model has recurrent layers and P > 0, restore their state from the checkpoint
 *      cairn_kv_seq_boundary_key(seq, P).
 *   3. Compute tokens [n_computed, n1): for each layer take cairn_kv_layer_view() once and
 *      cairn_kv_seq_block_table(seq, layer): position p lives in block table[p / bs], slot
 *      p % bs; cairn_kv_view_k()/cairn_kv_view_v() give the row pointers (a multiply-add).
 *      Table entries equal to CAIRN_KV_NULL_BLOCK (sliding layers only) are outside the
 *      window and must not be read.
 *   4. cairn_kv_seq_commit(seq, n1): full blocks are hashed and published for reuse;
 *      sliding blocks wholly outside the window are released.
 *   5. Decode: cairn_kv_seq_append(seq, &token, 1) reserves the slot (may grow the pool
 *      or evict cached blocks; CAIRN_EEXHAUSTED rolls every group back), compute, commit.
 *   6. cairn_kv_seq_end_turn() (keep for a continuation), _release(), _fork() (n > 1,
 *      branching; copy-on-write), _truncate() (stop strings, speculative rollback),
 *      _preempt() / _resume() (recompute preemption).
 *
 * Duplicate publication: when a full block's hash is already published in the same
 * domain and group by another block, the sequence keeps its own block (not registered;
 * it returns to the free queue when released). No table entry ever changes under the
 * engine except through the calls it makes.
 *
 * Thread-safety: a cache and all its sequences belong to one thread at a time (the
 * engine thread); no call locks. cairn_kv_cache_stats() must be called on that thread too.
 * Different caches are independent. Block-row pointers stay valid until the block is
 * released: the pool grows in place and never moves.
 */
#ifndef CAIRN_KV_CACHE_H
#define CAIRN_KV_CACHE_H

#include "cairn/common.h"
#include "cairn/kv_storage.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CAIRN_KV_NULL_BLOCK 0u          /* table entry of a position outside a sliding window */
#define CAIRN_KV_MAX_SALT 256           /* bytes */
#define CAIRN_KV_MAX_GROUPS 16          /* distinct paged + recurrent groups per model */

/* A 32-byte SHA-256 digest: block hashes, domains, checkpoint keys. */
typedef struct { uint8_t bytes[32]; } cairn_kv_hash_t;

/* How a layer pages its K/V. */
typedef enum {
    CAIRN_KV_LAYER_FULL = 0,      /* full attention: every position's block is kept */
    CAIRN_KV_LAYER_SLIDING = 1,   /* sliding window of `window` tokens */
    CAIRN_KV_LAYER_RECURRENT = 2, /* no pages: request-local state, checkpoints at block boundaries */
    CAIRN_KV_LAYER_SHARED = 3,    /* no storage: aliases layer `shared_from`'s K/V */
} cairn_kv_layer_kind_t;

typedef struct {
    cairn_kv_layer_kind_t kind;
    uint32_t n_kv_heads;   /* FULL/SLIDING: K/V heads */
    uint32_t head_dim;     /* FULL/SLIDING: elements per head */
    uint32_t window;       /* SLIDING: attention window W in tokens (position p sees (p-W, p]) */
    uint32_t shared_from;  /* SHARED: index of a FULL or SLIDING layer (not another alias) */
} cairn_kv_layer_spec_t;

/* Called when a recurrent checkpoint is dropped from the registry (LRU, capacity full), so
 * the engine can free the state it stored under `key`. Runs on the engine thread inside
 * the cairn_kv_* call that caused it; it must not call back into the cache. */
typedef void (*cairn_kv_checkpoint_evict_fn)(void *user, const cairn_kv_hash_t *key);

typedef struct {
    uint32_t n_layers;
    const cairn_kv_layer_spec_t *layers;  /* n_layers entries, copied at create */
    cairn_dtype_t dtype;                  /* K and V element type */
    /* Knobs (environment > config > default); 0 in a field means "not configured". */
    uint32_t block_size;        /* CAIRN_KV_BLOCK_SIZE, default 16, in [1, 1024] */
    uint64_t memory_mib;        /* CAIRN_KV_MEMORY_MB: maximum pool size, default 2048 */
    uint64_t initial_mib;       /* CAIRN_KV_INITIAL_MB: initial size, default = memory_mib
                                   (clamped to the maximum) */
    uint32_t max_checkpoints;   /* CAIRN_KV_MAX_CHECKPOINTS: recurrent registry, default 256 */
    /* Storage backend (NULL: host memory, cairn_kv_storage_host()). */
    const cairn_kv_storage_ops_t *storage;
    void *storage_ctx;
    cairn_kv_checkpoint_evict_fn on_checkpoint_evict; /* may be NULL */
    void *checkpoint_user;
} cairn_kv_config_t;

typedef struct cairn_kv_cache cairn_kv_cache_t;
typedef struct cairn_kv_seq cairn_kv_seq_t;

/* An opaque extra key mixed into block 0's hash (image digest, adapter id, ...). */
typedef struct { const void *data; size_t len; } cairn_kv_extra_key_t;

/* ---- Cache -------------------------------------------------------------------------- */

/*
 * Creates a cache. Reserves address space for the maximum pool once and commits the
 * initial size. Errors: CAIRN_EINVAL (no layers, a FULL/SLIDING layer with zero heads or
 * head_dim, a SLIDING layer with window 0, a SHARED layer whose source is not a paged
 * layer, no paged layer at all, bad dtype), CAIRN_ERANGE (the budget holds fewer than two
 * blocks, more than CAIRN_KV_MAX_GROUPS groups, or more than 2^31 blocks), CAIRN_ENOMEM,
 * or the storage backend's error. Cost: O(layers + initial blocks).
 */
CAIRN_API int cairn_kv_cache_create(const cairn_kv_config_t *cfg, cairn_kv_cache_t **out);

/* Destroys the cache and every sequence still open on it (their pointers become invalid),
 * and releases the storage. NULL is a no-op. */
CAIRN_API void cairn_kv_cache_destroy(cairn_kv_cache_t *cache);

/*
 * Computes the domain for a cache_salt: SHA-256 of its bytes. salt == NULL or len == 0
 * gives the shared default domain (32 zero bytes). Errors: CAIRN_ERANGE when len >
 * CAIRN_KV_MAX_SALT, CAIRN_EINVAL for a NULL out.
 */
CAIRN_API int cairn_kv_domain_from_salt(cairn_kv_cache_t *cache, const void *salt, size_t len,
                              cairn_kv_hash_t *out);

/*
 * The usable cached prefix of a prompt without starting a sequence: the longest P (a
 * multiple of block_size, at most n-1) that every group can serve. Takes no references and
 * changes no counter or LRU order. Errors: CAIRN_EINVAL (n == 0, NULL tokens),
 * CAIRN_ENOMEM. Cost: one SHA-256 per full block plus O(1) per block per group.
 */
CAIRN_API int cairn_kv_cache_lookup(cairn_kv_cache_t *cache, const cairn_kv_hash_t *domain,
                          const cairn_kv_extra_key_t *extras, size_t n_extras,
                          const int32_t *tokens, size_t n, size_t *prefix_len);

/*
 * The two halves of _lookup, for callers that hash once and look up often: hashes the
 * n / block_size full blocks of tokens[0..n) into out[] (the caller provides that many
 * entries), then finds the usable prefix of an n_tokens prompt from those hashes (only the
 * first (n_tokens - 1) / block_size are consulted). Errors: CAIRN_EINVAL, CAIRN_ENOMEM.
 * Cost: hashing ~ one SHA-256 compression per 16 tokens' worth of bytes; the lookup is
 * O(blocks x paged groups) hash-table probes.
 */
CAIRN_API int cairn_kv_cache_hash_blocks(cairn_kv_cache_t *cache, const cairn_kv_hash_t *domain,
                               const cairn_kv_extra_key_t *extras, size_t n_extras,
                               const int32_t *tokens, size_t n, cairn_kv_hash_t *out);
CAIRN_API int cairn_kv_cache_lookup_hashes(cairn_kv_cache_t *cache, const cairn_kv_hash_t *domain,
                                 const cairn_kv_hash_t *hashes, size_t n_tokens,
                                 size_t *prefix_len);

/* Evicts up to `n` least recently used cached blocks (unregistering them) into the free
 * queue; *evicted (may be NULL) receives how many. The evict filter is not asked (a
 * tool's explicit eviction). Cost: O(n). */
CAIRN_API void cairn_kv_cache_evict(cairn_kv_cache_t *cache, uint32_t n, uint32_t *evicted);

/*
 * Write-back (the cold tier): asked before the allocator evicts a cached block of paged
 * group `group` published under (hash, domain). true lets it go; false keeps it cached
 * for now (its owner persists it first and pins it for the copy later), and the
 * allocator tries the next least recently used block. The filter may be asked several
 * times about one block in one allocation and must give the same answer each time; it
 * runs on the engine thread inside the cairn_kv_* call that needs room and must not call
 * back into the cache. When the blocks it lets go cannot cover a request, the request
 * fails with CAIRN_EEXHAUSTED and nothing is evicted. NULL fn: no filter. O(1).
 */
typedef bool (*cairn_kv_evict_filter_fn)(void *user, uint32_t block, uint32_t group, const cairn_kv_hash_t *hash,
                                         const cairn_kv_hash_t *domain);
CAIRN_API void cairn_kv_cache_set_evict_filter(cairn_kv_cache_t *cache, cairn_kv_evict_filter_fn fn, void *user);

/*
 * Grows the pool so that at least `free_needed` blocks are free, following the growth rule
 * new = min(max, max(2 x current, current + deficit)). Commits memory only: no block moves
 * and no data is copied. Returns 0 when enough blocks are free (also without growing),
 * CAIRN_EEXHAUSTED when the maximum cannot provide them (the pool still grows as far as
 * it can), CAIRN_ENOMEM or the storage backend's error (nothing changes).
 */
CAIRN_API int cairn_kv_cache_grow(cairn_kv_cache_t *cache, uint32_t free_needed);

/* Geometry queries, O(1). */
CAIRN_API uint32_t cairn_kv_cache_block_size(const cairn_kv_cache_t *cache);
CAIRN_API uint32_t cairn_kv_cache_n_layers(const cairn_kv_cache_t *cache);
/* Bytes of one block (all layers of the largest group, K and V). */
CAIRN_API size_t cairn_kv_cache_block_bytes(const cairn_kv_cache_t *cache);

/* ---- Physical access (hot path) --------------------------------------------------- */

/*
 * Where a layer's K/V rows live. For block b and slot s:
 *   K row = base + b * block_stride + k_offset + s * slot_stride   ([n_kv_heads][head_dim])
 *   V row = base + b * block_stride + v_offset + s * slot_stride
 * A SHARED layer's view is its source layer's. The base never moves (growth commits more
 * of one reserved range), so a view stays valid for the cache's lifetime. For a host
 * backend `base` is a CPU pointer; for a device backend it is a device address.
 */
typedef struct {
    uint8_t *base;
    size_t block_stride;   /* bytes per block */
    size_t k_offset, v_offset;
    size_t slot_stride;    /* bytes of n_kv_heads * head_dim elements of dtype (whole blocks) */
    uint32_t n_kv_heads, head_dim;
    cairn_dtype_t dtype;
} cairn_kv_layer_view_t;

/* Fills *view for `layer`. Errors: CAIRN_EINVAL for a RECURRENT layer or layer out of
 * range. O(1). */
CAIRN_API int cairn_kv_layer_view(const cairn_kv_cache_t *cache, uint32_t layer, cairn_kv_layer_view_t *view);

static inline void *cairn_kv_view_k(const cairn_kv_layer_view_t *v, uint32_t block, uint32_t slot)
{
    return v->base + (size_t)block * v->block_stride + v->k_offset + (size_t)slot * v->slot_stride;
}
static inline void *cairn_kv_view_v(const cairn_kv_layer_view_t *v, uint32_t block, uint32_t slot)
{
    return v->base + (size_t)block * v->block_stride + v->v_offset + (size_t)slot * v->slot_stride;
}

/* ---- Groups ------------------------------------------------------------------------- */

/* What the core made of the layer specs: one group per class of layers (FULL, SLIDING of
 * one window, RECURRENT), paged classes larger than the smallest split into groups. */
typedef struct {
    cairn_kv_layer_kind_t kind;    /* FULL, SLIDING or RECURRENT */
    uint32_t window;               /* SLIDING: the window W */
    uint32_t n_layers;             /* storage layers of the group (no SHARED aliases) */
    size_t bytes;                  /* paged: bytes of its layers' K/V in one block */
} cairn_kv_group_info_t;

/* Groups of the cache, their info, and the group of a layer (a SHARED layer: its
 * source's). Errors: CAIRN_EINVAL (out of range). O(1). */
CAIRN_API uint32_t cairn_kv_cache_n_groups(const cairn_kv_cache_t *cache);
CAIRN_API int cairn_kv_cache_group_info(const cairn_kv_cache_t *cache, uint32_t group, cairn_kv_group_info_t *out);
CAIRN_API int cairn_kv_cache_layer_group(const cairn_kv_cache_t *cache, uint32_t layer, uint32_t *group);

/* The first block a sliding group of window W still needs once n_computed tokens are
 * computed (the next position attends to (n_computed - W, n_computed]); the usable-prefix
 * rule for a boundary P asks for blocks [first_live(P), P / block_size). Pure. */
CAIRN_API size_t cairn_kv_sliding_first_live(uint32_t window, uint32_t block_size, size_t n_computed);

/* The block published in paged group `group` under (hash, domain), or 0. Takes no
 * reference and changes no LRU order or counter. O(1). */
CAIRN_API uint32_t cairn_kv_cache_find_block(const cairn_kv_cache_t *cache, uint32_t group,
                                             const cairn_kv_hash_t *domain, const cairn_kv_hash_t *hash);

/*
 * Pins a used or cached block: a reference held outside any table, so the block is never
 * evicted or recycled while pinned and its bytes never change (an append into a pinned
 * partial block copies it first, as for any shared block). A cached block leaves the LRU
 * until its last pin goes; then it is cached again (most recently used). This is what lets
 * another thread copy a block's bytes (capture) or a restore rely on a hot prefix while
 * the engine thread goes on. Errors: CAIRN_EINVAL (the null block, a free block, an id
 * outside the pool; for unpin also a block without pins). Engine thread; O(1).
 */
CAIRN_API int cairn_kv_cache_block_pin(cairn_kv_cache_t *cache, uint32_t block);
/* Whether the pool lives in host memory (cairn_kv_storage_host): then a block's bytes,
 * while it is pinned or imported, may be touched (filled, prefaulted with madvise) by any
 * thread. Pure; O(1). */
CAIRN_API bool cairn_kv_cache_host_storage(const cairn_kv_cache_t *cache);
CAIRN_API int cairn_kv_cache_block_unpin(cairn_kv_cache_t *cache, uint32_t block);

/* ---- Importing full blocks (cold-tier restore) ------------------------------------ */

/*
 * Restoring a prefix from outside the pool (the SSD cold tier) in three steps:
 *   1. cairn_kv_cache_import_begin() takes a free block (growing the pool or evicting the
 *      least recently used cached block) and returns its bytes: block_bytes, laid out as
 *      the block-major K/V of every layer of the group it will be published in (the layer
 *      views' offsets); the block is pinned (neither evicted nor handed out) meanwhile;
 *   2. the caller fills those bytes (any thread, while the block stays taken);
 *   3. cairn_kv_cache_import_publish_group() registers it in the prefix index of a paged
 *      group under its chained hash and domain as a cached block (refcount 0, LRU tail),
 *      so the next cairn_kv_seq_begin() attaches it like any cached block; or
 *      cairn_kv_cache_import_discard() returns it to the free queue untouched.
 *      cairn_kv_cache_import_publish() is the group-less form for a cache of exactly one
 *      FULL group (dense models; CAIRN_EUNSUPPORTED otherwise). Whatever else must agree
 *      with an imported block (a sliding group's window, a recurrent checkpoint at the
 *      same boundary) is the caller's to install with it.
 * Errors of _begin: CAIRN_EEXHAUSTED (no block can be freed), growth errors. _publish
 * returns CAIRN_EBUSY when an equal block is already published in that group (the
 * imported one is then freed). _publish and _discard return CAIRN_EINVAL, changing
 * nothing, for a block that _begin did not hand out or that was already published or
 * discarded, or for a group that is not paged. Engine thread.
 */
CAIRN_API int cairn_kv_cache_import_begin(cairn_kv_cache_t *cache, uint32_t *block, void **bytes);
CAIRN_API int cairn_kv_cache_import_publish_group(cairn_kv_cache_t *cache, uint32_t block, uint32_t group,
                                                  const cairn_kv_hash_t *domain, const cairn_kv_hash_t *hash);
CAIRN_API int cairn_kv_cache_import_publish(cairn_kv_cache_t *cache, uint32_t block,
                                  const cairn_kv_hash_t *domain, const cairn_kv_hash_t *hash);
CAIRN_API int cairn_kv_cache_import_discard(cairn_kv_cache_t *cache, uint32_t block);

/*
 * Materialises the memory of n blocks taken by cairn_kv_cache_import_begin() and not yet
 * published or discarded, in one pass (MADV_POPULATE_WRITE over each run of consecutive
 * ids), so that filling them does not fault page by page. Contents are unchanged. Only a
 * hint: on a device backend or a kernel without the call it does nothing. Errors:
 * CAIRN_EINVAL (changing nothing) for a block _begin did not hand out. Engine thread;
 * cost: the page-table work for n x block_bytes.
 */
CAIRN_API int cairn_kv_cache_import_prefault(cairn_kv_cache_t *cache, const uint32_t *blocks, size_t n);

/* The first byte of block `block` (block_bytes, every layer's K then V); NULL for the null
 * block or an id outside the pool. For a device backend, a device address. O(1). */
CAIRN_API void *cairn_kv_cache_block_data(const cairn_kv_cache_t *cache, uint32_t block);

/* ---- Sequences -------------------------------------------------------------------- */

/*
 * Starts a sequence (one request) in `domain` (NULL: the default domain) with optional
 * extra keys and the prompt tokens[0..n). Finds the usable cached prefix P (see
 * cairn_kv_cache_lookup; reported in *prefix_len, which may be NULL), takes references on
 * those blocks and reserves slots for the rest of the prompt. Tokens [0, P) count as
 * computed. Errors: CAIRN_EINVAL (n == 0, NULL pointers), CAIRN_EEXHAUSTED (the prompt's
 * blocks do not fit even after growing and evicting; nothing is kept), CAIRN_ENOMEM or a
 * storage error. The sequence is owned by the caller until _release() (or cache destroy).
 * Counters: a hit when P > 0, otherwise a miss; hit_tokens += P.
 */
CAIRN_API int cairn_kv_seq_begin(cairn_kv_cache_t *cache, const cairn_kv_hash_t *domain,
                       const cairn_kv_extra_key_t *extras, size_t n_extras,
                       const int32_t *tokens, size_t n, cairn_kv_seq_t **out, size_t *prefix_len);

/*
 * Appends n tokens to the history and reserves their slots in every group. All or
 * nothing: when any group cannot get its blocks after one grow and eviction of cached
 * blocks, returns CAIRN_EEXHAUSTED and no group, counter of tokens or block changes.
 * If the first new slot falls in a block that is shared (forked, or published and hit
 * by others) that block is copied first (copy-on-write, one block memcpy); a published
 * block owned by this sequence alone is unpublished instead. Also continues a sequence
 * after _end_turn. Errors: CAIRN_EINVAL (NULL tokens with n > 0), CAIRN_ESTATE
 * (preempted), CAIRN_EEXHAUSTED, CAIRN_ENOMEM, storage errors. Cost: O(n + new blocks).
 */
CAIRN_API int cairn_kv_seq_append(cairn_kv_seq_t *seq, const int32_t *tokens, size_t n);

/*
 * Marks tokens [n_computed, n_computed_new) as computed (their K/V written). Full blocks
 * are hashed and published in the prefix index; in sliding groups, blocks wholly outside
 * the window of the next position are released and their entries become the null block.
 * Errors: CAIRN_ERANGE (n_computed_new below the current count or beyond the tokens
 * known), CAIRN_ESTATE (preempted), CAIRN_ENOMEM (nothing changes). Cost: one SHA-256
 * per newly full block.
 */
CAIRN_API int cairn_kv_seq_commit(cairn_kv_seq_t *seq, size_t n_computed_new);

/*
 * Ends a turn keeping the computed blocks live for a continuation: tokens known but not
 * computed are dropped from the history (their reserved slots are released), so the
 * cache holds exactly what was computed. *dropped (may be NULL) receives how many tokens.
 * The next turn continues with _append(). Errors: CAIRN_ESTATE (preempted).
 */
CAIRN_API int cairn_kv_seq_end_turn(cairn_kv_seq_t *seq, size_t *dropped);

/*
 * Forks a sequence: the child shares every block (refcounts + 1) and copies the history.
 * Either side's next append into a shared partial block copies it first. Requires every
 * known token to be computed. Errors: CAIRN_ESTATE (uncomputed tokens or preempted),
 * CAIRN_ENOMEM. Cost: O(tokens + blocks).
 */
CAIRN_API int cairn_kv_seq_fork(cairn_kv_seq_t *seq, cairn_kv_seq_t **child);

/*
 * Removes the last k tokens (stop strings, speculative rollback): n_tokens -= k,
 * n_computed = min(n_computed, n_tokens); blocks no longer covering any token are
 * released. Errors: CAIRN_ERANGE (k > n_tokens, or a sliding group already released a
 * block the shorter sequence would need again — nothing changes), CAIRN_ESTATE
 * (preempted). Recurrent state rollback is the engine's (restore a checkpoint).
 */
CAIRN_API int cairn_kv_seq_truncate(cairn_kv_seq_t *seq, size_t k);

/*
 * Preemption: releases every block of the sequence (published ones stay cached and may be
 * hit again), keeping the token history. *freed (may be NULL) receives the number of
 * blocks whose refcount dropped to zero. n_computed becomes 0. Errors: CAIRN_ESTATE when
 * already preempted.
 */
CAIRN_API int cairn_kv_seq_preempt(cairn_kv_seq_t *seq, uint32_t *freed);

/*
 * Resumes a preempted sequence like _begin over its whole history: finds the usable cached
 * prefix (*prefix_len) and reserves slots for every known token. Errors: CAIRN_ESTATE (not
 * preempted), CAIRN_EEXHAUSTED (still preempted, nothing kept), CAIRN_ENOMEM.
 */
CAIRN_API int cairn_kv_seq_resume(cairn_kv_seq_t *seq, size_t *prefix_len);

/*
 * Retention hint (eviction priority): marks every block now in the sequence's tables, so
 * that once no sequence references one it is evicted only after every unmarked cached
 * block (the LRU becomes [unmarked | marked], each part least recently released first;
 * with no marked block it is the plain LRU). Call it before releasing (or ending the turn
 * of) a sequence whose prefix its client will send again, e.g. an agent's conversation
 * (the server's prompt_cache_key). It changes eviction order only: hashes, domains and
 * lookups are untouched, so a hint never makes a block visible across domains. The mark
 * lasts until the block leaves the cache (evicted, or freed unregistered and allocated
 * again); blocks the sequence drops later (sliding windows, truncation) keep theirs.
 * Errors: CAIRN_EINVAL (NULL). Cost: O(table entries). Thread-safety: the cache's thread.
 */
CAIRN_API int cairn_kv_seq_retain(cairn_kv_seq_t *seq);

/* Releases the sequence and all its blocks; *freed (may be NULL) as for _preempt. The
 * pointer is invalid afterwards. NULL is a no-op. */
CAIRN_API void cairn_kv_seq_release(cairn_kv_seq_t *seq, uint32_t *freed);

/* History and progress, O(1). The token pointer is valid until the next call that
 * changes the sequence. */
CAIRN_API size_t cairn_kv_seq_n_tokens(const cairn_kv_seq_t *seq);
CAIRN_API size_t cairn_kv_seq_n_computed(const cairn_kv_seq_t *seq);
CAIRN_API const int32_t *cairn_kv_seq_tokens(const cairn_kv_seq_t *seq);
CAIRN_API bool cairn_kv_seq_preempted(const cairn_kv_seq_t *seq);

/*
 * The block table that `layer` walks: ceil(n_tokens / block_size) entries (*n_blocks),
 * valid until the next call that changes the sequence. Sliding layers have
 * CAIRN_KV_NULL_BLOCK before the window; a SHARED layer returns its source's table; a
 * RECURRENT layer returns NULL with *n_blocks = 0. O(1).
 */
CAIRN_API const uint32_t *cairn_kv_seq_block_table(const cairn_kv_seq_t *seq, uint32_t layer, size_t *n_blocks);

/* ---- Recurrent checkpoints (bookkeeping only; the engine stores the state) ---------- */

/*
 * The key of the block boundary at n_tokens (a positive multiple of block_size, at most
 * the tokens known): the hash of the block ending there, which covers domain, extras and
 * every token before it. Errors: CAIRN_ERANGE. O(1) once the block is hashed.
 */
CAIRN_API int cairn_kv_seq_boundary_key(const cairn_kv_seq_t *seq, size_t n_tokens, cairn_kv_hash_t *key);

/*
 * Records that the engine saved the recurrent state of this sequence after exactly
 * n_tokens computed tokens (a positive multiple of block_size, at most n_computed);
 * *key (may be NULL) receives the key to store it under. When the registry is full the
 * least recently used checkpoint is dropped and on_checkpoint_evict is called. A recurrent
 * group can serve a prefix P > 0 only when a checkpoint at exactly P is registered.
 * Errors: CAIRN_ERANGE, CAIRN_EUNSUPPORTED (the model has no recurrent layer).
 */
CAIRN_API int cairn_kv_seq_checkpoint(cairn_kv_seq_t *seq, size_t n_tokens, cairn_kv_hash_t *key);

/* Forgets a checkpoint (the engine dropped the state). Returns CAIRN_ENOENT when absent. */
CAIRN_API int cairn_kv_cache_checkpoint_drop(cairn_kv_cache_t *cache, const cairn_kv_hash_t *key);

/* Registers a checkpoint by its key without a sequence: a state restored from outside
 * (the cold tier's sidecar at that boundary), which the engine stored under `key` first.
 * As for cairn_kv_seq_checkpoint, a full registry drops its least recently used entry
 * through on_checkpoint_evict. Errors: CAIRN_EINVAL, CAIRN_EUNSUPPORTED (no recurrent
 * layer). _has: whether key is registered (no LRU change). */
CAIRN_API int cairn_kv_cache_checkpoint_add(cairn_kv_cache_t *cache, const cairn_kv_hash_t *key);
CAIRN_API bool cairn_kv_cache_checkpoint_has(const cairn_kv_cache_t *cache, const cairn_kv_hash_t *key);

/* ---- Counters --------------------------------------------------------------------- */

typedef struct {
    uint64_t hits;            /* begins/resumes with a usable cached prefix > 0 */
    uint64_t misses;          /* begins/resumes without one */
    uint64_t hit_tokens;      /* tokens served from cache */
    uint64_t query_tokens;    /* prompt tokens looked up by begins/resumes */
    uint64_t evictions;       /* cached blocks evicted */
    uint64_t grows;           /* pool grows */
    uint64_t cow_copies;      /* copy-on-write block copies */
    uint64_t checkpoints;     /* recurrent checkpoints registered now */
    uint32_t blocks_pinned;   /* of blocks_in_use, held by pins (imports, copies) */
    uint32_t blocks_in_use;   /* refcount > 0 (excluding the null block) */
    uint32_t blocks_cached;   /* refcount 0, still published */
    uint32_t blocks_free;
    uint32_t blocks_total;    /* current pool size including the null block */
    uint32_t blocks_max;      /* pool size at the budget */
    uint32_t block_size;
    uint64_t block_bytes;
    uint64_t bytes_committed; /* storage committed now */
    uint64_t bytes_reserved;  /* address range reserved for the maximum */
    uint32_t sequences;       /* open sequences */
} cairn_kv_stats_t;

/* Snapshot of the counters. O(1). Engine thread only. */
CAIRN_API void cairn_kv_cache_stats(const cairn_kv_cache_t *cache, cairn_kv_stats_t *out);

/* Renders a snapshot as one JSON object whose keys are the field names above. *json is
 * allocated with cairn_malloc (free with cairn_free). Errors: CAIRN_ENOMEM, CAIRN_EINVAL. */
CAIRN_API int cairn_kv_stats_to_json(const cairn_kv_stats_t *stats, char **json);

#ifdef __cplusplus
}
#endif
#endif /* CAIRN_KV_CACHE_H */
