/*
 * cairn/engine.h — the inference engine: batched, bit-exact forward passes of a model
 * family's decoder (whatever family the checkpoint's config.json names; src/models/) over
 * an opened checkpoint.
 * Families with recurrent layers keep a per-sequence state beside the K/V, checkpointed at
 * block boundaries so a cached prefix can resume it (docs/DESIGN.md, "Recurrent state and
 * checkpoints").
 *
 * Model. An engine owns a thread pool, the K/V storage of its sequences and the scratch
 * activations of one step. A sequence is a token list split in two: the first n_past
 * tokens have K/V stored (computed, or reused from the prefix cache), the rest are
 * pending. One call to cairn_engine_step() advances several sequences at once, each by its
 * own number of pending tokens (a prefill chunk, or one decode token), and returns logits
 * only for the rows the caller asked for. This is the shape continuous batching needs:
 * the scheduler decides per step how many tokens of each sequence to compute.
 *
 * K/V paths. CAIRN_KV_PAGED (default) stores K/V in fixed-size blocks of the KV cache core
 * (include/cairn/kv_cache.h); a sequence that begins with a prompt whose prefix is
 * already cached (same cache_salt, same tokens) attaches those blocks and computes only
 * the suffix. CAIRN_KV_FLAT keeps one contiguous array per sequence and layer, shares
 * nothing, and is the reference path.
 *
 * Determinism. Every reduction has a fixed order that depends only on its length, so for
 * one math mode and K/V dtype the logits of a token are bit-identical whatever the batch
 * composition, the chunking of the prompt, the thread count, the K/V path, and whether
 * the prefix was computed or reused (docs/DESIGN.md, "Engine / Determinism").
 *
 * Thread-safety: an engine and its sequences are used by one thread at a time (the
 * engine thread); the engine parallelises each step internally.
 */
#ifndef CAIRN_ENGINE_H
#define CAIRN_ENGINE_H

#include "cairn/checkpoint.h"
#include "cairn/cold_tier.h"
#include "cairn/common.h"
#include "cairn/kv_cache.h"
#include "cairn/shared_tier.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CAIRN_KV_PAGED = 0, /* blocks of the KV cache core, prefix reuse (default) */
    CAIRN_KV_FLAT = 1,  /* contiguous per-sequence arrays, no sharing (reference) */
} cairn_kv_path_t;

/* Activation precision of the matrix products (the values of kernels.h cairn_math_t). */
typedef enum {
    CAIRN_ENGINE_MATH_F32 = 0,  /* exact float32 (reference checks) */
    CAIRN_ENGINE_MATH_BF16 = 1, /* activations rounded to bf16 inside matmul (fast prefill) */
} cairn_engine_math_t;

/* When the cold tier persists full blocks. */
typedef enum {
    CAIRN_COLD_WRITE_THROUGH = 0, /* after each turn, in the background (default) */
    CAIRN_COLD_WRITE_BACK = 1,    /* only before the pool evicts a block, and at exit */
    CAIRN_COLD_CAPTURE_OFF = 2,   /* never (restore still reads what is on disk) */
} cairn_cold_policy_t;

/* Parses "write-through", "write-back" or "off". Errors: CAIRN_EINVAL. */
CAIRN_API int cairn_cold_policy_parse(const char *s, cairn_cold_policy_t *out);
CAIRN_API const char *cairn_cold_policy_name(cairn_cold_policy_t p);

typedef struct {
    int n_threads;             /* threads of the pool, caller included (>= 1) */
    cairn_kv_path_t kv_path;   /* default CAIRN_KV_PAGED */
    cairn_dtype_t kv_dtype;    /* K/V element type; default bf16 */
    cairn_engine_math_t math;  /* default CAIRN_ENGINE_MATH_F32 */
    int pool_mib;              /* paged: K/V pool budget in MiB (default 256) */
    int block_tokens;          /* paged: tokens per block (default 16) */
    int max_context;           /* tokens per sequence; 0: the model's max positions, capped at 32768 */
    int max_step_tokens;       /* rows per forward sub-batch (default 512); larger steps are split */
    /* Recurrent checkpoints (paged path, models with recurrent layers): the byte budget
     * of saved states, least recently saved or restored evicted first. Knob
     * CAIRN_STATE_CKPT_MIB > this (0: not set; -1: off) > 256 MiB. Off (0 MiB), no
     * prefix of such a model is reused. */
    int state_ckpt_mib;
    /* Cold tier (the SSD prefix store of include/cairn/cold_tier.h; paged path, families
     * of cairn_cold_family_eligible() only). Full blocks are captured at the end of each
     * turn and when a sequence is released; cairn_seq_begin restores a prompt's blocks
     * that are not in the pool. Failing to open the store only disables the tier. */
    int cold;                  /* knob CAIRN_COLD > this (1 on, -1 off) > default on (0) */
    const char *cold_root;     /* cache root; NULL: CAIRN_CACHE_DIR; neither: tier off */
    const char *cold_trace;    /* per-turn JSONL trace; knob CAIRN_COLD_TRACE > this > none */
    /* Destroy persists what is not on disk yet (every queued block, and with write-back
     * every cached one) for at most this long, then waits for the writes. 0: 5 s plus
     * 1.5 x what awaits write at the rate the store took copies at so far (20 MiB/s before
     * anything was written): cairn_engine_cold_exit_ms. */
    int cold_drain_ms;
    /* When full blocks are persisted (docs/DESIGN.md, "Background capture"): knob
     * CAIRN_COLD_POLICY (write-through, write-back, off) > this > write-through. Either
     * way a cached block not on disk yet is persisted before the pool evicts it. */
    cairn_cold_policy_t cold_policy;
    /* Bytes of pool blocks held (pinned) while the capture thread copies them: knob
     * CAIRN_COLD_PIN_MIB > this (MiB; 0: not set) > 64. */
    int cold_pin_mib;
    int cold_capture_blocks;   /* no effect since capture runs in the background (kept for callers) */
    int cold_capture_ms;       /* no effect since capture runs in the background (kept for callers) */
    /* A store of include/cairn/tier_store.h to use instead of the filesystem store under
     * cold_root (tests, other stores). Lent: the engine never destroys it, and it must
     * outlive the engine. NULL: the filesystem store. */
    cairn_tier_store_t *cold_store;
    /* A shared tier behind the local one (include/cairn/shared_tier.h: Redis), opened by
     * the engine for its model fingerprint and block layout: the tier order becomes hot
     * pool -> local store (cold_root or cold_store) -> shared store, or hot pool -> shared
     * store without a local one. NULL (or a NULL url): none. Read during
     * cairn_engine_create only. Failing to open it (a bad URL) logs a warning and runs
     * without it; an unreachable server is not a failure (the store reconnects). */
    const cairn_shared_tier_config_t *shared_tier;
    /* The compute backend the forward pass runs on: "cpu" (NULL: the default) or "cuda"
     * (a build with -DCAIRN_CUDA=ON and a GPU; paged K/V only, the pool in device memory,
     * bf16 K/V; docs/DESIGN.md, "CUDA backend"). */
    const char *backend;
} cairn_engine_options_t;

/* Fills *o with the defaults above (1 thread, paged, bf16 K/V, f32 math, the cpu backend). */
CAIRN_API void cairn_engine_options_default(cairn_engine_options_t *o);

typedef struct cairn_engine cairn_engine_t;
typedef struct cairn_seq cairn_seq_t;

/*
 * Creates an engine over an opened checkpoint (which must outlive the engine). The K/V
 * storage follows the cache layout the model's family declares (full, sliding-window,
 * recurrent and shared layers); the forward pass is the family's. Errors: CAIRN_EINVAL
 * for bad options, CAIRN_EUNSUPPORTED for what the family cannot run (a rope type, a K/V
 * dtype), CAIRN_EFORMAT for a cache layout the KV core cannot page, CAIRN_ENOMEM; a
 * one-line message goes to err. Cost: allocates the scratch of one sub-batch
 * (max_step_tokens rows) and, for the paged path, maps the K/V pool.
 */
CAIRN_API int cairn_engine_create(const cairn_checkpoint_t *ck, const cairn_engine_options_t *opt,
                        cairn_engine_t **out, char *err, size_t err_len);
/* Destroys the engine and every sequence still alive. NULL is a no-op. */
CAIRN_API void cairn_engine_destroy(cairn_engine_t *e);
/* The options in effect (defaults resolved). */
CAIRN_API const cairn_engine_options_t *cairn_engine_options(const cairn_engine_t *e);
CAIRN_API const cairn_model_config_t *cairn_engine_config(const cairn_engine_t *e);

/* ---- Sequences --------------------------------------------------------------------- */

/*
 * Begins a sequence whose first tokens are `tokens` [n_tokens] (n_tokens may be 0; then
 * the first feed plays this role). With the paged path the longest cached prefix of those
 * tokens under `cache_salt` (NULL: the shared default domain; at most CAIRN_KV_MAX_SALT
 * bytes) is attached without computation, in whole blocks; at least the last token stays
 * pending, so a step always has a row to produce logits from. *n_cached (may be NULL)
 * receives the number of tokens reused from the hot prefix cache. With the cold tier on,
 * full blocks past the hot prefix that the store holds are then restored from disk (each
 * validated; the first missing or invalid one ends the walk) and attached too, still
 * leaving the last token pending; cairn_seq_restored_tokens() reports them. Errors:
 * CAIRN_EINVAL (token ids outside [0, vocab)), CAIRN_ERANGE (longer than max_context, salt too long), CAIRN_EEXHAUSTED
 * (paged: the pool cannot hold the prompt even after eviction), CAIRN_ENOMEM. The sequence
 * belongs to the engine; release it with cairn_seq_release().
 */
CAIRN_API int cairn_seq_begin(cairn_engine_t *e, const char *cache_salt, const int32_t *tokens,
                    int n_tokens, cairn_seq_t **out, int *n_cached);
/* Appends n pending tokens (a sampled token, the next user turn); with the paged path
 * their K/V slots are reserved here. CAIRN_ERANGE past max_context, CAIRN_EEXHAUSTED when
 * the pool is full; on error nothing changes. */
CAIRN_API int cairn_seq_feed(cairn_seq_t *s, const int32_t *tokens, int n);
/* Tokens with K/V stored. */
CAIRN_API int cairn_seq_n_past(const cairn_seq_t *s);
/* Tokens appended but not yet computed. */
CAIRN_API int cairn_seq_n_pending(const cairn_seq_t *s);
/* All tokens of the sequence, [n_past + n_pending] (owned by the sequence). */
CAIRN_API const int32_t *cairn_seq_tokens(const cairn_seq_t *s);
/*
 * Keeps the first n tokens (stored or pending) and forgets the rest; n <= length. For a
 * model with recurrent layers whose state stands past n, the state can only be had at a
 * checkpoint: the sequence restarts from the deepest one at or below n (the empty state
 * when none; always on the flat path) and the tokens after it up to n become pending
 * again, so cairn_seq_n_past() may drop below n (docs/DESIGN.md, "Recurrent state and
 * checkpoints"). On the paged path, when a sliding window already released blocks the
 * shorter sequence needs, the sequence begins again over its first n tokens (what the
 * prefix cache still holds is attached, the rest becomes pending and is recomputed with
 * the same bits). Errors: CAIRN_EINVAL (n out of range); CAIRN_EEXHAUSTED when the pool
 * cannot hold the re-appended tokens (a recurrent rewind then keeps the tokens up to the
 * checkpoint).
 */
CAIRN_API int cairn_seq_truncate(cairn_seq_t *s, int n);
/*
 * Ends a turn: pending tokens are dropped and the stored K/V stays live for a
 * continuation (feed the next turn). With the paged path, full blocks are published to
 * the prefix cache as each step computes them, so other sequences with the same salt and
 * prefix can reuse them while this one lives and after it is released.
 */
CAIRN_API int cairn_seq_end_turn(cairn_seq_t *s);
/* A new sequence with the same tokens and K/V (paged: shared blocks, copy-on-write;
 * flat: a copy) and a copy of its recurrent state. CAIRN_ESTATE while s has pending
 * tokens. */
CAIRN_API int cairn_seq_fork(cairn_seq_t *s, cairn_seq_t **out);
/* Frees the sequence and its K/V references. NULL is a no-op. */
CAIRN_API void cairn_seq_release(cairn_seq_t *s);
/* Retention hint for the sequence's prefix (cairn_kv_seq_retain): its blocks, once
 * released, are evicted only after every unhinted cached block. Call it before
 * cairn_seq_release. The flat path (no paged pool) ignores it. Errors: none beyond
 * CAIRN_EINVAL from the core. Thread-safety: the engine's thread. */
CAIRN_API int cairn_seq_retain(cairn_seq_t *s);

/* ---- Steps ------------------------------------------------------------------------- */

typedef enum {
    CAIRN_LOGITS_NONE = 0, /* no logits (a prefill chunk that does not end the prompt) */
    CAIRN_LOGITS_LAST = 1, /* one row: the last token computed in this step */
    CAIRN_LOGITS_ALL = 2,  /* one row per token computed (teacher-forced checks) */
} cairn_logits_mode_t;

typedef struct {
    cairn_seq_t *seq;
    int n_tokens;                /* pending tokens to compute; 0: all of them */
    cairn_logits_mode_t logits;
} cairn_batch_item_t;

/*
 * Computes the requested pending tokens of every item in one forward pass (all new
 * tokens of the batch form one activation matrix; steps longer than max_step_tokens are
 * split into sub-batches in order, which changes no bits). A sequence may appear at
 * most once. *logits receives [n_rows][vocab] float32, rows in item order (LAST: 1 row,
 * ALL: n_tokens rows), owned by the engine and valid until the next step. Errors:
 * CAIRN_EINVAL (bad item), CAIRN_ENOMEM (flat K/V growth); on error no sequence has
 * advanced.
 */
CAIRN_API int cairn_engine_step(cairn_engine_t *e, const cairn_batch_item_t *items, int n_items,
                      const float **logits, int *n_rows);

typedef struct {
    uint64_t steps;            /* cairn_engine_step calls that succeeded */
    uint64_t tokens_computed;  /* rows pushed through the layers */
    uint64_t tokens_reused;    /* prompt tokens attached from the prefix cache */
    uint64_t logits_rows;      /* rows pushed through lm_head */
    uint64_t seqs_begun;
    double forward_seconds;    /* wall time inside steps */
    /* Recurrent checkpoints (docs/DESIGN.md, "Recurrent state"; zero for other models). */
    uint64_t ckpt_saves;       /* states saved at a block boundary */
    uint64_t ckpt_restores;    /* states restored: prefix hits and truncations */
    uint64_t ckpt_evictions;   /* checkpoints dropped (byte budget or registry capacity) */
    uint64_t ckpt_count;       /* checkpoints held now */
    uint64_t ckpt_bytes;       /* bytes they take */
    uint64_t ckpt_budget;      /* their byte budget */
    double ckpt_save_seconds;  /* CPU time copying states into checkpoints */
    double ckpt_restore_seconds; /* CPU time copying them back */
} cairn_engine_counters_t;

CAIRN_API void cairn_engine_counters(const cairn_engine_t *e, cairn_engine_counters_t *out);

/* Snapshot of the paged pool's KV cache core counters (cairn_kv_cache_stats: blocks in
 * use, cached, free, total, bytes, grows, evictions, hits and misses). Engine thread
 * only, O(1). Errors: CAIRN_EUNSUPPORTED on the flat path (*out zeroed). */
CAIRN_API int cairn_engine_kv_stats(const cairn_engine_t *e, cairn_kv_stats_t *out);

/* The engine's compute backend's device memory now: free and total bytes (after this
 * engine's weights, scratch and pool). For sizing a K/V pool on a device backend (cairn
 * serve --backend cuda). CAIRN_EUNSUPPORTED (both 0) when the backend's memory is host
 * memory (the cpu backend); CAIRN_EIO when the device cannot say. Engine thread only. */
CAIRN_API int cairn_engine_device_memory(cairn_engine_t *e, uint64_t *free_bytes, uint64_t *total_bytes);

/* ---- Cold tier ---------------------------------------------------------------------- */

/*
 * Whether a model_type may restore K/V from the cold tier: only families whose restart
 * parity (persist, restore in a fresh process, persistence off: bit-identical logits) is
 * proven by tests/engine/test_cold_restart.c, which iterates this same list. A family off
 * the list never persists nor restores. Pure function.
 */
CAIRN_API bool cairn_cold_family_eligible(const char *model_type);
/* The eligible model_types, NULL-terminated (static). */
CAIRN_API const char *const *cairn_cold_eligible_families(void);

/* Tokens of the sequence's prompt restored from the cold tier by cairn_seq_begin (they
 * count in cairn_seq_n_past, not in *n_cached, which is the hot prefix only). */
CAIRN_API int cairn_seq_restored_tokens(const cairn_seq_t *s);
/*
 * cairn_seq_begin with the cold-tier restore's reads off the engine thread: when the
 * store holds blocks past the hot prefix, *out is a sequence in the "restoring" state
 * (its reads run on the tier's I/O thread; the engine keeps stepping other sequences)
 * and cairn_seq_begin_finish admits it once cairn_seq_restoring() is false (or waits
 * for the reads). Otherwise, and when the knob CAIRN_COLD_RESTORE_ASYNC=0 or the tier is
 * off, this is cairn_seq_begin: *out is admitted already and _begin_finish does nothing.
 * A restoring sequence must not be stepped, fed or forked; cairn_seq_release waits for
 * its reads. Errors as cairn_seq_begin's. Engine thread.
 */
CAIRN_API int cairn_seq_begin_async(cairn_engine_t *e, const char *cache_salt, const int32_t *tokens,
                                    int n_tokens, cairn_seq_t **out);
/* Whether s is still waiting for its restore's reads. O(1). */
CAIRN_API bool cairn_seq_restoring(const cairn_seq_t *s);
/* Installs what the restore read and admits the prompt, as cairn_seq_begin does after its
 * restore (*n_cached: the hot prefix). On error s has been released (and must not be
 * used). A sequence admitted already: CAIRN_OK, nothing done. */
CAIRN_API int cairn_seq_begin_finish(cairn_seq_t *s, int *n_cached);

/* Why the cold-tier restore of the sequence's prompt installed no more than it did: a
 * cairn_tier_miss_name ("none", "chain_empty", "sidecar_missing", "sidecar_below_floor",
 * "corrupt", "blocks", "install"); NULL when the store was not consulted (tier off, or
 * every usable block hot). Static string. */
CAIRN_API const char *cairn_seq_cold_reason(const cairn_seq_t *s);

#define CAIRN_ENGINE_COLD_MISS_REASONS 7 /* values of cairn_tier_miss_t (cairn/tier.h) */

typedef struct {
    bool enabled;              /* a store is open */
    uint64_t restore_lookups;  /* begins that consulted the store (a block past the hot prefix) */
    uint64_t restored_blocks;  /* blocks loaded from disk and published in the pool */
    uint64_t restored_tokens;  /* prompt tokens attached from restored blocks */
    uint64_t capture_walks;    /* capture walks (end of turn, release) over a chain with a full block */
    uint64_t capture_chain_empty; /* capture walks that found no full block (nothing to persist) */
    uint64_t captured_blocks;  /* blocks the capture thread handed to the store (queued for writing) */
    double restore_seconds;    /* wall time in restores (hashing, reads, publication) */
    double restore_engine_seconds; /* of it, on the engine thread (all of it when the reads
                                      run inline; start + install when they run on the
                                      I/O thread): what a restore stalls the batch by */
    double capture_seconds;    /* engine-thread wall time of capture walks and pin/unpin */
    /* Hybrid families: STATE sidecars (docs/DESIGN.md, "Cold tier in the engine"). */
    uint64_t sidecar_reads;       /* sidecars read and validated at a boundary chosen */
    uint64_t sidecars_installed;  /* sidecars installed (a recurrent state, a sliding window) */
    uint64_t sidecar_corruptions; /* sidecar reads the store found invalid (removed) */
    uint64_t candidates_refused;  /* boundaries a restore tried and refused */
    uint64_t restores_reduced;    /* restores installed below the length the chain proposed */
    uint64_t restores_suppressed; /* restores the sidecar policy reduced to nothing */
    uint64_t install_failures;    /* boundaries chosen that the pool or bank could not take */
    uint64_t miss[CAIRN_ENGINE_COLD_MISS_REASONS]; /* restores by reason (cairn_tier_miss_t;
                                                     [0]: none, the whole proposal) */
    int last_miss;                /* the reason of the latest restore (cairn_tier_miss_t) */
    uint64_t sidecars_captured;   /* sidecars newly queued for writing */
    uint64_t sidecars_already;    /* anchors whose sidecar the store held or had accepted
                                     (reached = sidecars_already + sidecars_captured) */
    uint64_t sidecar_skips;       /* anchors skipped: the state was no longer in memory */
    uint64_t sidecar_drops;       /* sidecars the store refused (no room before the deadline) */
    uint64_t sidecar_chain_empty; /* capture walks of a model with sidecars whose persisted
                                     chain reached no block (so no anchor) */
    /* Background capture (docs/DESIGN.md, "Background capture"). */
    cairn_cold_policy_t policy;
    uint64_t capture_queued;   /* blocks found not on disk at the end of a turn and queued */
    uint64_t capture_already;  /* blocks the walks found on disk or queued already
                                  (reached = capture_already + capture_queued) */
    uint64_t capture_deferrals;/* times the copy walk stopped with work left: pin budget full */
    uint64_t capture_failed;   /* blocks the store refused (layout, memory) */
    uint64_t capture_lost;     /* queued blocks gone from the pool before their copy */
    uint64_t writeback_holds;  /* evictions held back until the block is persisted */
    uint64_t awaiting_blocks;  /* gauge: queued blocks the store has not accepted yet */
    uint64_t awaiting_bytes;   /* gauge: their payload bytes */
    uint64_t pinned_bytes;     /* gauge: of those, pinned for a copy in flight */
    uint64_t pin_budget_bytes; /* the budget of pinned_bytes */
    double capture_rate;       /* bytes/s the store took copies at (its disk's rate when busy); 0 unknown */
    cairn_cold_stats_t store;  /* the local store's counters (hits, corruptions, write errors, ...) */
    /* The shared tier, when one is configured (cairn_engine_options_t.shared_tier). */
    bool shared_enabled;
    uint64_t shared_restored_blocks; /* restored blocks that were read from the shared tier */
    uint64_t shared_promoted_blocks; /* of those, written to the local store too */
    cairn_shared_tier_stats_t shared;/* the shared store's counters (faults, outages, hits ...) */
} cairn_engine_cold_counters_t;

/* Snapshot of the cold-tier counters (all zero, enabled false, when the tier is off). */
CAIRN_API void cairn_engine_cold_counters(const cairn_engine_t *e, cairn_engine_cold_counters_t *out);
/* Waits until every queued block is handed to the store and written (tests, tools): the
 * calling thread drives the capture (it must be the engine's thread). With write-back,
 * held blocks are not queued by this: see cairn_engine_cold_persist. No-op when off. */
CAIRN_API void cairn_engine_cold_flush(cairn_engine_t *e);

/*
 * Drives the background capture from the engine thread: takes back the blocks the
 * capture thread has copied (unpins them) and pins and hands over the next ones within
 * the pin budget. cairn_engine_step and cairn_seq_begin call it; an idle owner calls it
 * while it returns true (work is pending: blocks queued or being copied), e.g. every few
 * milliseconds. O(blocks handed over) plus one lock. Engine thread.
 */
CAIRN_API bool cairn_engine_cold_poll(cairn_engine_t *e);

/* What the last capture walk of a turn (end of turn or release) did, for the request log. */
typedef struct {
    uint32_t blocks;           /* full blocks of the sequence walked */
    uint32_t queued;           /* of those, not on disk: queued now */
    uint32_t already;          /* on disk, or queued by an earlier turn */
    uint32_t deferred;         /* queued blocks left waiting for the pin budget after the walk */
    uint64_t written;          /* blocks the capture thread handed to the store since the previous walk */
    const char *reason;        /* "write-through", "write-back" (held until eviction or exit), "off" */
} cairn_engine_cold_turn_t;

CAIRN_API void cairn_engine_cold_last_turn(const cairn_engine_t *e, cairn_engine_cold_turn_t *out);

typedef struct {
    uint64_t queued;           /* blocks not on disk when the call began (all of them with write-back) */
    uint64_t written;          /* of those, handed to the store (committed by the writer) */
    uint64_t skipped;          /* not written: the deadline passed, the block was gone or refused */
    uint64_t bytes;            /* payload bytes written */
    double ms;                 /* how long it took */
} cairn_cold_persist_report_t;

/*
 * Persists every full cached block that is not on disk yet (write-through's queue and
 * write-back's held blocks alike) within deadline_ms, then waits (within the same
 * deadline) for the store to commit them; fills *out (may be NULL). Sequences still alive
 * keep running. For shutdown (`cairn serve` on SIGTERM, engine destroy). Engine thread.
 * Returns CAIRN_OK (everything written), CAIRN_ECANCELED (some skipped).
 */
CAIRN_API int cairn_engine_cold_persist(cairn_engine_t *e, int deadline_ms, cairn_cold_persist_report_t *out);

/* A deadline long enough to persist what awaits write now at the measured disk speed: 5 s
 * plus 1.5 x awaiting_bytes / capture_rate (20 MiB/s while nothing was written yet), in
 * ms. With write-back, the cached blocks not on disk count too. 0 when the tier is off. */
CAIRN_API int cairn_engine_cold_exit_ms(const cairn_engine_t *e);

#ifdef __cplusplus
}
#endif
#endif
