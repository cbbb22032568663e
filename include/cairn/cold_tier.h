/*
 * cairn/cold_tier.h — the SSD cold tier: a crash-safe, content-addressed, per-model store of
 * full KV blocks.
 *
 * Model. A store is one directory per model fingerprint under a cache root:
 *     <root>/<fingerprint hex>/<2 hex of block hash>/<block hash hex>.kv
 * Each file is one full block (K/V of every layer, block-major, exactly as the KV pool
 * holds it), named by its block hash. The hash already covers the parent chain, the tenant
 * domain and the tokens, so equal names mean equal content and a request can only name
 * blocks of its own domain. The on-disk format is docs/FORMAT.md, "Cold tier objects".
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

#ifdef __cplusplus
extern "C" {
#endif

#define CAIRN_COLD_HASH_BYTES 32
#define CAIRN_COLD_DEFAULT_QUEUE_DEPTH 8
#define CAIRN_COLD_DEFAULT_QUOTA_MIB 16384
#define CAIRN_COLD_DEFAULT_CAPTURE_BLOCKS 128
#define CAIRN_COLD_DEFAULT_CAPTURE_BUDGET_MS 250
/* Limits enforced on every object header (a header outside them is corrupt). */
#define CAIRN_COLD_MAX_BLOCK_TOKENS 4096
#define CAIRN_COLD_MAX_LAYERS 1024
#define CAIRN_COLD_MAX_PAYLOAD (1ull << 32)

/* A 32-byte digest (block hash, fingerprint). Layout-compatible with cairn_kv_hash_t. */
typedef struct { uint8_t bytes[CAIRN_COLD_HASH_BYTES]; } cairn_cold_hash_t;

/* ---- Model fingerprint ------------------------------------------------------------ */

/*
 * Everything that makes K/V bytes meaningful. The engine fills it from its config; the
 * canonical serialization hashed by cairn_cold_fingerprint() is docs/FORMAT.md, section
 * "Cold tier objects" (fingerprint). Any field that differs gives a different directory,
 * so a block written for one model is never read by another.
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
    const char *extra;         /* any other K/V-relevant settings ("sliding=4096"), or NULL */
    uint8_t weights_digest[32];/* cairn_cold_weights_digest() of the checkpoint */
} cairn_cold_model_desc_t;

/* One safetensors file of a checkpoint, as fed to the weights digest. */
typedef struct {
    const char *name;          /* file name (no directory), e.g. "model-00001-of-00002.safetensors" */
    const void *header;        /* the file's JSON header bytes */
    size_t header_len;
    uint64_t file_size;        /* total file size in bytes */
} cairn_cold_weights_file_t;

/*
 * SHA-256 over the files' names, headers and sizes, in the order given (the caller sorts
 * by name). Cheap: no tensor data is read. Errors: CAIRN_EINVAL (NULL arguments).
 */
int cairn_cold_weights_digest(const cairn_cold_weights_file_t *files, size_t n, uint8_t out[32]);

/* SHA-256 of the canonical serialization of *desc. Errors: CAIRN_EINVAL, CAIRN_ENOMEM. */
int cairn_cold_fingerprint(const cairn_cold_model_desc_t *desc, cairn_cold_hash_t *out);

/* Writes 64 lowercase hex digits and a NUL into out (65 bytes). */
void cairn_cold_hash_hex(const cairn_cold_hash_t *h, char out[65]);
/* Parses 64 hex digits. Errors: CAIRN_EINVAL. */
int cairn_cold_hash_parse(const char *hex, cairn_cold_hash_t *out);

/* ---- Store ------------------------------------------------------------------------- */

typedef struct cairn_cold_store cairn_cold_store_t;

typedef struct {
    const char *root;          /* cache root; NULL: CAIRN_CACHE_DIR > $XDG_CACHE_HOME/cairn > ~/.cache/cairn */
    cairn_cold_hash_t fingerprint;
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
    const char *trace_path;    /* per-turn JSONL deltas; knob CAIRN_COLD_TRACE > this > none */
} cairn_cold_config_t;

/*
 * Opens (creating, mode 0700) <root>/<fingerprint hex>, removes leftover temporary files of
 * dead writers, and builds the index from every object's name and header. Objects whose
 * header is invalid, belongs to another model or block, or whose size disagrees with it
 * are deleted and counted as corruptions. Applies the quota. Starts the writer thread
 * unless no_writer. Cost: one directory walk plus one small header read per object.
 * Errors: CAIRN_EINVAL (bad layout), CAIRN_EIO (root unusable), CAIRN_ENOMEM.
 */
int cairn_cold_store_create(const cairn_cold_config_t *cfg, cairn_cold_store_t **out);

/* Writes every queued block, stops the writer thread and frees the store. NULL is a no-op. */
void cairn_cold_store_destroy(cairn_cold_store_t *s);

/* Blocks until the queue is empty and the writer idle (tests, shutdown, tools). */
void cairn_cold_store_flush(cairn_cold_store_t *s);

/* The model directory (<root>/<fingerprint hex>); owned by the store. */
const char *cairn_cold_store_dir(const cairn_cold_store_t *s);

/* Whether the index holds the object. No I/O, no counter. */
bool cairn_cold_store_contains(cairn_cold_store_t *s, const cairn_cold_hash_t *hash);

/*
 * How many leading blocks of hashes[0..n) the index holds: the first i with hashes[i]
 * absent. Answered from the index alone, never reading a payload; no counter changes.
 */
size_t cairn_cold_store_chain_length(cairn_cold_store_t *s, const cairn_cold_hash_t *hashes, size_t n);

/* ---- Writing ----------------------------------------------------------------------- */

/* One full block as the engine describes it (all pointers borrowed for the call). */
typedef struct {
    cairn_cold_hash_t hash;    /* the block hash */
    cairn_cold_hash_t parent;  /* previous block's hash; all zero for block 0 */
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
int cairn_cold_store_enqueue(cairn_cold_store_t *s, const cairn_cold_block_t *blk, uint32_t wait_ms,
                             bool *queued);

/* Yields block i of a chain; returns 0, or a negative code to stop the walk. */
typedef int (*cairn_cold_block_fn)(void *user, size_t i, cairn_cold_block_t *out);

typedef enum {
    CAIRN_COLD_STOP_END = 0,   /* the whole chain is persisted or queued */
    CAIRN_COLD_STOP_BUDGET,    /* blocks_per_turn new blocks were queued */
    CAIRN_COLD_STOP_DEADLINE,  /* budget_ms elapsed */
    CAIRN_COLD_STOP_REFUSED,   /* a block could not be queued (no slot, no memory, bad size) */
    CAIRN_COLD_STOP_CALLBACK,  /* the callback returned an error */
} cairn_cold_stop_t;

typedef struct {
    uint32_t blocks_per_turn;  /* 0: knob CAIRN_COLD_CAPTURE_BLOCKS_PER_TURN > 128 */
    uint32_t budget_ms;        /* 0: knob CAIRN_COLD_CAPTURE_BUDGET_MS > 250 */
} cairn_cold_capture_budget_t;

typedef struct {
    size_t reached;            /* leading blocks now persisted or queued */
    size_t already;            /* of those, already on disk or queued (index probe only) */
    size_t enqueued;           /* of those, newly queued this call */
    cairn_cold_stop_t stop;
    double elapsed_ms;
} cairn_cold_capture_result_t;

/*
 * Capture: walks blocks 0..n of a chain through fn. A block already persisted or queued
 * costs an index probe and spends no budget; a new one is enqueued (copied), waiting for a
 * queue slot until the deadline rather than giving up. The walk stops at the first block
 * it could not capture, because restore stops at the first hole. budget may be NULL
 * (knobs). Returns 0 (the result says why it stopped) or CAIRN_EINVAL.
 */
int cairn_cold_capture_chain(cairn_cold_store_t *s, size_t n, cairn_cold_block_fn fn, void *user,
                             const cairn_cold_capture_budget_t *budget,
                             cairn_cold_capture_result_t *res);

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
int cairn_cold_store_read(cairn_cold_store_t *s, const cairn_cold_hash_t *hash,
                          const cairn_cold_hash_t *parent, const int32_t *tokens, uint32_t n_tokens,
                          void *dst, size_t dst_size);

/* Returns where block i's payload goes (payload_size bytes), or NULL to decline it. */
typedef void *(*cairn_cold_dest_fn)(void *user, size_t i, size_t payload_size);

/*
 * Chain restore: for i = start.. n-1 reads block i (tokens[i*block_tokens ..], parent
 * hashes[i-1] or zero for i == 0) into dest(user, i, size), and stops at the first
 * missing, invalid or declined block (a NULL destination counts a restore_decline).
 * dest is called after block i's object is pinned, so nothing it does can evict it.
 * Prefetches the next objects with readahead hints. *restored receives the number of
 * blocks loaded after start. Errors: CAIRN_EINVAL (layout "any" or bad arguments).
 */
int cairn_cold_restore_chain(cairn_cold_store_t *s, const cairn_cold_hash_t *hashes, size_t n,
                             const int32_t *tokens, size_t start, cairn_cold_dest_fn dest, void *user,
                             size_t *restored);

/* Counts a restore the engine refused for its own reasons (restore_declines). */
void cairn_cold_store_note_decline(cairn_cold_store_t *s);

/* ---- Maintenance (tools) ----------------------------------------------------------- */

typedef struct {
    cairn_cold_hash_t hash;
    cairn_cold_hash_t parent;
    uint64_t file_bytes;
    uint32_t n_tokens;
    bool pinned;
} cairn_cold_entry_info_t;

/* Calls fn for each indexed object in LRU order (least recent first); fn returns non-zero
 * to stop. The store lock is held during the calls: fn must not call into the store. */
void cairn_cold_store_foreach(cairn_cold_store_t *s,
                              int (*fn)(void *user, const cairn_cold_entry_info_t *e), void *user);

/*
 * Reads every indexed object fully and validates it against its own header (and the
 * store's layout when it has one); invalid ones are deleted and counted. *checked and
 * *bad (may be NULL) receive the counts. Errors: CAIRN_ENOMEM.
 */
int cairn_cold_store_verify(cairn_cold_store_t *s, size_t *checked, size_t *bad);

/* Evicts least-recently-used unpinned objects until the total is <= quota_bytes.
 * *evicted (may be NULL) receives the count. */
void cairn_cold_store_prune(cairn_cold_store_t *s, uint64_t quota_bytes, size_t *evicted);

/* Deletes every unpinned object of this model. *removed (may be NULL) receives the count. */
void cairn_cold_store_clear(cairn_cold_store_t *s, size_t *removed);

/*
 * Resolves the cache root: config_root, else CAIRN_CACHE_DIR, else $XDG_CACHE_HOME/cairn,
 * else $HOME/.cache/cairn. Returns a string the caller frees with cairn_free, or NULL
 * (ENOMEM, or no HOME).
 */
char *cairn_cold_default_root(const char *config_root);

/* Calls fn for each model fingerprint directory under root. Errors: CAIRN_ENOENT (no root). */
int cairn_cold_list_models(const char *root, int (*fn)(void *user, const cairn_cold_hash_t *fp),
                           void *user);

/* ---- Telemetry --------------------------------------------------------------------- */

typedef struct {
    uint64_t hits;             /* blocks read and validated */
    uint64_t misses;           /* reads of absent objects */
    uint64_t enqueued;         /* blocks queued for writing */
    uint64_t queue_drops;      /* enqueues refused (queue full past the wait) */
    uint64_t bytes_written;    /* object bytes committed (header + payload) */
    uint64_t reads;            /* object reads attempted (valid or not) */
    uint64_t bytes_restored;   /* payload bytes delivered to callers */
    uint64_t evictions;        /* objects removed by quota */
    uint64_t corruptions;      /* invalid objects found and deleted */
    uint64_t write_errors;     /* writes that failed (ENOSPC, EIO...) */
    uint64_t restore_declines; /* restores refused by the caller */
    /* Identity and gauges (not deltas). */
    bool enabled;
    const char *root;          /* the model directory; valid while the store lives */
    uint64_t quota_bytes;
    uint64_t used_bytes;
    uint64_t objects;
    uint32_t queue_len;
} cairn_cold_stats_t;

/* Copies the counters. s may be NULL (enabled false, all zero). */
void cairn_cold_store_stats(cairn_cold_store_t *s, cairn_cold_stats_t *out);

/* Renders stats as one JSON object (no newline); caller frees with cairn_free.
 * With `delta` non-NULL the counters are cur - delta. Errors: NULL on ENOMEM. */
char *cairn_cold_stats_json(const cairn_cold_stats_t *cur, const cairn_cold_stats_t *delta);

/*
 * Appends one JSON line {"turn": label, "cold": {counter deltas since the previous call}}
 * to the trace file when one is configured; otherwise only advances the baseline.
 * Trace write errors are logged, never returned. Returns 0.
 */
int cairn_cold_store_trace_turn(cairn_cold_store_t *s, const char *label);

#ifdef __cplusplus
}
#endif
#endif /* CAIRN_COLD_TIER_H */
