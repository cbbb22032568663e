/*
 * cairn/cold_tier.h — the filesystem store (src/tier/fs): the cache tier's SSD store of
 * cairn/tier_store.h, crash-safe, content-addressed, one directory per model. Its public
 * names keep the cold tier's cairn_cold_ prefix; the tier logic that walks it (capture,
 * restore, trace) is cairn/tier.h and works on cairn_cold_store_tier(s).
 *
 * Model. A store is one directory per model fingerprint under a cache root:
 *     <root>/<fingerprint hex>/<2 hex of hash>/<block hash hex>.kv
 *     <root>/<fingerprint hex>/<2 hex of hash>/<chain hash hex>.<group>.st
 * A .kv file is one full block (K/V of every layer, block-major, exactly as the KV pool
 * holds it), named by its block hash; a .st file is one STATE sidecar (a hybrid model's
 * out-of-pool state at one block boundary), named by the chain hash at that boundary and
 * its group. The hash already covers the parent chain, the tenant domain and the tokens,
 * so equal names mean equal content and a request can only name objects of its own
 * domain. The on-disk format is docs/FORMAT.md, "Cold tier objects" (1.2 and 1.8).
 * Objects: BLOCK of cache group 0 and STATE of any group; a BLOCK of another group is
 * refused with CAIRN_EUNSUPPORTED (its layout is not the store's).
 *
 * Durability. One writer thread commits each object as create-exclusive temp file ->
 * write -> fsync -> rename -> directory fsync. A crash leaves either the complete object
 * or a temporary file that the next open removes. Every read re-validates header, tokens,
 * parent and the XXH3-128 payload checksum; anything invalid is a miss that deletes the
 * file and counts a corruption, never wrong K/V handed to inference.
 *
 * Index. Open builds an in-memory index from names and headers (never payloads); chain
 * queries are answered from it. Reads pin their object so quota eviction (LRU) skips it.
 *
 * Thread-safety: every function on a cairn_cold_store_t is thread-safe unless noted
 * (create/destroy excepted). Several processes may share one directory: objects are
 * immutable and renamed atomically; each process keeps its own index and quota view.
 */
#ifndef CAIRN_COLD_TIER_H
#define CAIRN_COLD_TIER_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "cairn/common.h"
#include "cairn/tier.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CAIRN_COLD_DEFAULT_QUEUE_DEPTH 8
#define CAIRN_COLD_DEFAULT_QUOTA_MIB 16384

/* The store's counters are the tier's (the name engine.h's counters use). */
typedef cairn_tier_stats_t cairn_cold_stats_t;

/* ---- Store ------------------------------------------------------------------------- */

typedef struct cairn_cold_store cairn_cold_store_t;

typedef struct {
    const char *root;          /* cache root; NULL: CAIRN_CACHE_DIR > $XDG_CACHE_HOME/cairn > ~/.cache/cairn */
    cairn_tier_hash_t fingerprint;
    /* Block layout. n_layers == 0 means "any": each object's own (self-consistent) layout
     * is accepted — used by tools such as `cairn cache`; writing then needs layer_bytes. */
    cairn_dtype_t dtype;
    uint32_t block_tokens;
    uint32_t n_layers;
    const uint64_t *layer_bytes; /* n_layers entries: K+V bytes of one block in layer l (copied) */
    bool has_quota;
    uint64_t quota_bytes;      /* knob CAIRN_COLD_QUOTA_MIB (MiB) > this > 16 GiB */
    uint32_t queue_depth;      /* 0: knob CAIRN_COLD_QUEUE_DEPTH > default 8 */
    /* Most objects the writer commits together (one group commit: every payload synced,
     * then every rename, then one fsync per directory). 0: knob CAIRN_COLD_WRITE_BATCH >
     * the queue depth; 1: the object-at-a-time commit. Host memory in flight is at most
     * (queue_depth + write_batch) objects. The batch's syncs are issued together through
     * io_uring when built with liburing (knob CAIRN_COLD_URING=0: one after another). */
    uint32_t write_batch;
    bool no_writer;            /* true: no writer thread (inspection tools); enqueue fails EINVAL */
} cairn_cold_config_t;

/*
 * Opens (creating, mode 0700) <root>/<fingerprint hex>, removes leftover temporary files of
 * dead writers, and builds the index from every object's name and header. Objects whose
 * header is invalid, belongs to another model or block, or whose size disagrees with it
 * are deleted and counted as corruptions. Applies the quota. Starts the writer thread
 * unless no_writer. Cost: one directory walk plus one small header read per object.
 * Errors: CAIRN_EINVAL (bad layout), CAIRN_EIO (root unusable), CAIRN_ENOMEM.
 */
CAIRN_API int cairn_cold_store_create(const cairn_cold_config_t *cfg, cairn_cold_store_t **out);

/* Writes every queued block, stops the writer thread and frees the store. NULL is a no-op. */
CAIRN_API void cairn_cold_store_destroy(cairn_cold_store_t *s);

/*
 * The store behind the tier interface (cairn/tier_store.h): what the tier logic, the
 * engine and the tools use. Owned by s (its destroy op is cairn_cold_store_destroy).
 * Keys: BLOCK of group 0, named by the block hash, and STATE of any group, named by hash
 * and group (the key's domain is not stored: the hash covers it); a BLOCK of another group
 * is CAIRN_EUNSUPPORTED. contains() also counts objects queued for writing; a BLOCK get()
 * needs a store with a layout (not "any": CAIRN_EINVAL), a STATE get() does not;
 * prefetch() opens the objects and hints the kernel to read them ahead
 * (POSIX_FADV_WILLNEED), keeping at most 32 descriptors for the reads that follow.
 */
CAIRN_API cairn_tier_store_t *cairn_cold_store_tier(cairn_cold_store_t *s);

/* Blocks until the queue is empty and the writer idle (tests, shutdown, tools). */
CAIRN_API void cairn_cold_store_flush(cairn_cold_store_t *s);

/* The model directory (<root>/<fingerprint hex>); owned by the store. */
CAIRN_API const char *cairn_cold_store_dir(const cairn_cold_store_t *s);

/* Whether the index holds the object (queued blocks excluded). No I/O, no counter. */
CAIRN_API bool cairn_cold_store_contains(cairn_cold_store_t *s, const cairn_tier_hash_t *hash);

/*
 * How many leading blocks of hashes[0..n) the index holds: the first i with hashes[i]
 * absent. Answered from the index alone, never reading a payload; no counter changes.
 */
CAIRN_API size_t cairn_cold_store_chain_length(cairn_cold_store_t *s, const cairn_tier_hash_t *hashes, size_t n);

/* ---- Writing ----------------------------------------------------------------------- */

/* One full block as the engine describes it (all pointers borrowed for the call). */
typedef struct {
    cairn_tier_hash_t hash;    /* the block hash */
    cairn_tier_hash_t parent;  /* previous block's hash; all zero for block 0 */
    const int32_t *tokens;     /* block_tokens token ids */
    uint32_t n_tokens;
    const void *payload;       /* block-major K/V of every layer, layer 0 first */
    size_t payload_size;       /* must equal the sum of the layout's layer_bytes */
} cairn_cold_block_t;

/*
 * Queues a block for writing. The tokens and payload are COPIED into the queue entry before
 * returning, so the caller may recycle its pool block at once (eviction can never change
 * bytes being written). Sets *queued (may be NULL) to false when the object is already on
 * disk or already queued (nothing is rewritten). When the queue is full, waits up to
 * wait_ms for a slot (0: do not wait). I/O errors never surface here: they are counted
 * (write_errors) and logged by the writer.
 * Errors: CAIRN_EEXHAUSTED (no slot before the deadline; queue_drops counted),
 * CAIRN_EINVAL (size or token count disagrees with the layout, or no writer), CAIRN_ENOMEM.
 */
CAIRN_API int cairn_cold_store_enqueue(cairn_cold_store_t *s, const cairn_cold_block_t *blk, uint32_t wait_ms,
                             bool *queued);

/* ---- Reading ----------------------------------------------------------------------- */

/*
 * Reads the object of `hash` into dst (dst_size >= payload size) with full validation:
 * magic, version, fingerprint, block hash, parent, tokens, element type, layer sizes,
 * header and payload checksums, exact file size. Objects another process wrote since open
 * are found on disk too. The object is pinned during the read (quota eviction skips it).
 * Returns 0 (hits, reads, bytes_restored counted); CAIRN_ENOENT when absent (a miss);
 * CAIRN_ECORRUPT when invalid: the file is deleted and a corruption counted, and dst's
 * contents are unspecified. CAIRN_ERANGE when dst is too small, CAIRN_EIO on a read error.
 */
CAIRN_API int cairn_cold_store_read(cairn_cold_store_t *s, const cairn_tier_hash_t *hash,
                          const cairn_tier_hash_t *parent, const int32_t *tokens, uint32_t n_tokens,
                          void *dst, size_t dst_size);

/* Counts a restore the engine refused for its own reasons (restore_declines). */
CAIRN_API void cairn_cold_store_note_decline(cairn_cold_store_t *s);

/* ---- Maintenance (tools) ----------------------------------------------------------- */

/* Calls fn for each indexed object in LRU order (least recent first); fn returns non-zero
 * to stop. The store lock is held during the calls: fn must not call into the store.
 * Entries have kind BLOCK, group 0 and an all-zero domain (not stored). */
CAIRN_API void cairn_cold_store_foreach(cairn_cold_store_t *s, int (*fn)(void *user, const cairn_tier_entry_t *e),
                              void *user);

/*
 * Reads every indexed object fully and validates it against its own header (and the
 * store's layout when it has one); invalid ones are deleted and counted. *checked and
 * *bad (may be NULL) receive the counts. Errors: CAIRN_ENOMEM.
 */
CAIRN_API int cairn_cold_store_verify(cairn_cold_store_t *s, size_t *checked, size_t *bad);

/* Evicts least-recently-used unpinned objects until the total is <= quota_bytes.
 * *evicted (may be NULL) receives the count. */
CAIRN_API void cairn_cold_store_prune(cairn_cold_store_t *s, uint64_t quota_bytes, size_t *evicted);

/* Deletes every unpinned object of this model. *removed (may be NULL) receives the count. */
CAIRN_API void cairn_cold_store_clear(cairn_cold_store_t *s, size_t *removed);

/*
 * Resolves the cache root: config_root, else CAIRN_CACHE_DIR, else $XDG_CACHE_HOME/cairn,
 * else $HOME/.cache/cairn. Returns a string the caller frees with cairn_free, or NULL
 * (ENOMEM, or no HOME).
 */
CAIRN_API char *cairn_cold_default_root(const char *config_root);

/* Calls fn for each model fingerprint directory under root. Errors: CAIRN_ENOENT (no root). */
CAIRN_API int cairn_cold_list_models(const char *root, int (*fn)(void *user, const cairn_tier_hash_t *fp),
                           void *user);

/* ---- Telemetry --------------------------------------------------------------------- */

/* Copies the counters. s may be NULL (enabled false, all zero). */
CAIRN_API void cairn_cold_store_stats(cairn_cold_store_t *s, cairn_tier_stats_t *out);

/*
 * Event counters of the processes that used a model directory (src/tier/fs/fs_events.c,
 * docs/FORMAT.md 1.11): <model dir>/events.json, one JSON object of named counters that
 * every engine with a local store adds its cold-tier counters to when it closes (captures,
 * restores, sidecars, misses by reason), and that `cairn cache stats` prints. Names are
 * [a-z0-9_]{1,47}; a file holds at most CAIRN_COLD_EVENTS_MAX of them.
 */
#define CAIRN_COLD_EVENTS_MAX 64
#define CAIRN_COLD_EVENT_NAME 48
typedef struct {
    uint64_t processes;        /* engines whose counters were added */
    uint64_t updated_s;        /* when the last one was (Unix seconds) */
    uint32_t n;                /* counters, in the file's order */
    char names[CAIRN_COLD_EVENTS_MAX][CAIRN_COLD_EVENT_NAME];
    uint64_t values[CAIRN_COLD_EVENTS_MAX];
} cairn_cold_events_t;

/* Sets counter `name` (adding it). Errors: CAIRN_EINVAL (a name outside [a-z0-9_]{1,47}),
 * CAIRN_ERANGE (already CAIRN_COLD_EVENTS_MAX names). O(n). */
CAIRN_API int cairn_cold_events_set(cairn_cold_events_t *e, const char *name, uint64_t value);
/* Counter `name`, 0 when absent. O(n). */
CAIRN_API uint64_t cairn_cold_events_get(const cairn_cold_events_t *e, const char *name);
/* Parses an events file's text[0..len) (need not be NUL-terminated; at most 64 KiB) into
 * *out. Errors: CAIRN_EFORMAT (err, may be NULL, names the problem), CAIRN_ENOMEM. */
CAIRN_API int cairn_cold_events_parse(const char *text, size_t len, cairn_cold_events_t *out, char *err,
                                      size_t err_len);
/* Reads <model_dir>/events.json. Errors: CAIRN_ENOENT (no file: no process closed there
 * yet), CAIRN_EIO, CAIRN_EFORMAT (as _parse), CAIRN_ENOMEM. */
CAIRN_API int cairn_cold_events_read(const char *model_dir, cairn_cold_events_t *out, char *err, size_t err_len);
/* Adds delta to <model_dir>/events.json (processes and every counter summed by name;
 * updated = delta's, or now when 0) under an exclusive flock, crash-safely (temp file,
 * fdatasync, rename, directory fsync); an invalid file is replaced. Errors: CAIRN_EIO,
 * CAIRN_ENOSPC, CAIRN_ENOMEM (the file is then unchanged). Cost: one small file
 * rewritten and two syncs. Thread- and process-safe. */
CAIRN_API int cairn_cold_events_add(const char *model_dir, const cairn_cold_events_t *delta);

#ifdef __cplusplus
}
#endif
#endif /* CAIRN_COLD_TIER_H */
