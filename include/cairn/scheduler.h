/*
 * cairn/scheduler.h — continuous batching of generation requests over one engine.
 *
 * Model. A scheduler owns an engine thread. Callers (HTTP threads, the CLI) submit
 * requests — already-tokenized prompts with sampling controls and a tenant salt — from
 * any thread; the engine thread admits them, restores cached prefixes, and runs steps that
 * mix the decode tokens of running requests with prefill chunks of new ones under a token
 * budget per step, so a long prefill never stalls the others' decoding for more than one
 * chunk. All sequences share one paged pool: admission happens when there are blocks;
 * when the pool runs out mid-flight the newest request is preempted (all its blocks
 * released, requeued for recompute, which its cached blocks make cheap). A request that
 * shares a prefix with a request being prefilled waits for those blocks instead of
 * computing them twice.
 *
 * Events. Each request reports through its callback, ON THE ENGINE THREAD, in order:
 * zero or more CAIRN_REQ_EVENT_DELTA events (text safe to emit, after stop-string
 * holding), then exactly one CAIRN_REQ_EVENT_DONE or CAIRN_REQ_EVENT_ERROR. With n > 1
 * choices every choice ends with its own DONE (its `index`, its finish reason), and only
 * the last event of the request has `final` set; an ERROR is always final and ends every
 * choice. With n == 1 the one DONE/ERROR is final. The callback must not block and must
 * not call back into the scheduler except cairn_sched_cancel. After the final event the
 * scheduler never touches the request's user pointer again.
 *
 * Determinism: the engine's logits do not depend on batch composition, chunking or
 * prefix reuse, and each choice has its own sampler (seeded seed + index), so with
 * temperature 0 or a fixed seed a request's tokens are the same alone or among many,
 * and across preemptions.
 *
 * Thread-safety: submit, cancel, stats and shutdown may be called from any thread.
 */
#ifndef CAIRN_SCHEDULER_H
#define CAIRN_SCHEDULER_H

#include "cairn/common.h"
#include "cairn/engine.h"
#include "cairn/sampler.h"
#include "cairn/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cairn_sched cairn_sched_t;

#define CAIRN_SCHED_MAX_N 16 /* most choices (n) of one request */

typedef struct {
    int step_tokens;      /* token budget per engine step (decode rows + prefill chunk rows); default 512 */
    int prefill_chunk;    /* max prompt tokens of one request per step; default 256 */
    int max_running;      /* requests decoding at once; default 16 */
    int max_queued;       /* waiting requests before submit returns CAIRN_EBUSY (HTTP 429); default 64 */
} cairn_sched_options_t;

/* Fills *o with the defaults above. */
CAIRN_API void cairn_sched_options_default(cairn_sched_options_t *o);

/*
 * Creates a scheduler over an engine (paged path) and the model's tokenizer, and starts its
 * engine thread. Both must outlive the scheduler; the scheduler is the only user of the
 * engine while it runs. Errors: CAIRN_EINVAL, CAIRN_ENOMEM, CAIRN_EIO (thread creation).
 */
CAIRN_API int cairn_sched_create(cairn_engine_t *engine, const cairn_tokenizer_t *tok,
                       const cairn_sched_options_t *opt, cairn_sched_t **out);

/*
 * Stops accepting requests, lets running ones finish until deadline_ms has passed, then
 * cancels the rest (their final event is ERROR with CAIRN_ECANCELED), joins the engine
 * thread and frees everything. NULL is a no-op.
 */
CAIRN_API void cairn_sched_destroy(cairn_sched_t *s, int deadline_ms);

typedef enum {
    CAIRN_REQ_EVENT_DELTA = 0, /* new text (and the tokens that produced it) */
    CAIRN_REQ_EVENT_DONE = 1,  /* finished; finish reason and usage are final */
    CAIRN_REQ_EVENT_ERROR = 2, /* failed or canceled; status and message set */
} cairn_req_event_kind_t;

typedef struct {
    int prompt_tokens;      /* tokens of the prompt */
    int cached_tokens;      /* prompt tokens served from the hot prefix cache (caller's domain) */
    int restored_tokens;    /* prompt tokens restored from the cold tier */
    int completion_tokens;  /* tokens generated */
    int preemptions;        /* times this request was preempted and recomputed */
    double queue_ms;        /* submit -> admission */
    double ttft_ms;         /* submit -> first generated token */
    double decode_tps;      /* generated tokens / decode wall time */
    /* How the prompt's full blocks (all but its last token) were served at admission:
     * "none" all from the hot cache, "cold" all, some restored from the cold tier,
     * "partial" only a prefix (hot and/or cold), "miss" nothing. */
    const char *miss_reason;
    /* Which rule reduced the cold-tier restore (cairn_seq_cold_reason: "sidecar_missing",
     * "corrupt", ...), NULL when the cold tier was not consulted. */
    const char *cold_reason;
    /* Persistence of this turn's full blocks (cold tier; cairn_engine_cold_last_turn at
     * the request's end): queued now (not on disk), already on disk or queued, still
     * waiting for the pin budget, blocks the capture thread wrote since the previous turn,
     * and the policy ("write-through", "write-back": held until eviction or exit, "off"). */
    int persist_queued, persist_already, persist_deferred, persist_written;
    const char *persist_policy;
} cairn_req_usage_t;

#define CAIRN_SCHED_MAX_TOP_LOGPROBS 20 /* most alternatives reported per token */

/* A generated token's log-probability under the model (log-softmax of the raw logits,
 * before logit_bias, penalties and temperature) and its most likely alternatives. */
typedef struct {
    int32_t token;
    float logprob;
    int n_top;                                    /* the request's top_logprobs */
    int32_t top_ids[CAIRN_SCHED_MAX_TOP_LOGPROBS];/* most likely first (ties: lower id) */
    float top_logprobs[CAIRN_SCHED_MAX_TOP_LOGPROBS];
} cairn_token_logprob_t;

typedef struct {
    cairn_req_event_kind_t kind;
    int index;                   /* choice index (0 unless n > 1) */
    const char *text;            /* DELTA: bytes safe to emit (not NUL-terminated) */
    size_t text_len;
    const int32_t *tokens;       /* DELTA: tokens accepted since the last delta */
    int n_tokens;
    const cairn_token_logprob_t *logprobs; /* DELTA: [n_tokens] when the request asked for
                                            * them (params.logprobs), else NULL */
    cairn_finish_reason_t finish;/* DONE: why it stopped */
    const cairn_req_usage_t *usage; /* usage so far (DELTA too: the prompt's figures are
                                     * final from admission on) */
    int status;                  /* ERROR: a CAIRN_E* code */
    const char *message;         /* ERROR: a one-line message */
    bool final;                  /* DONE/ERROR: the request's last event (see "Events") */
} cairn_req_event_t;

typedef void (*cairn_req_event_fn)(void *user, const cairn_req_event_t *ev);

/*
 * One request. The sampler, the stop matcher and the streaming detokenizer of each choice
 * are created at submit from `sampling` (so its pointers are borrowed only during the
 * call). n > 1: the prompt is computed once, then forked (cairn_seq_fork) into n
 * sequences; choice i samples with seed + i when sampling.has_seed.
 */
typedef struct {
    const int32_t *prompt;        /* [n_prompt] token ids, copied at submit */
    int n_prompt;
    const char *cache_salt;       /* tenant domain salt (NULL: shared default), copied */
    cairn_sampling_params_t sampling; /* copied (stop strings included) */
    int n;                        /* choices (forked sequences), 1..CAIRN_SCHED_MAX_N; 0 means 1 */
    bool logprobs;                /* report each generated token's log-probability... */
    int top_logprobs;             /* ...and this many alternatives, 0..20 */
    bool retain;                  /* retention hint (the API's prompt_cache_key): a choice
                                     that finishes marks its blocks (cairn_seq_retain), so
                                     they outlive unhinted ones under pool pressure */
    cairn_req_event_fn on_event;
    void *user;
} cairn_req_params_t;

/*
 * Queues a request. *id receives an id for cairn_sched_cancel. Errors: CAIRN_EINVAL (bad
 * params; message in err), CAIRN_ERANGE (prompt + max_tokens cannot fit the context, or the
 * prompt cannot fit the pool even alone), CAIRN_EBUSY (queue full), CAIRN_ESTATE (shutting
 * down), CAIRN_ENOMEM. On error no event is ever delivered.
 */
CAIRN_API int cairn_sched_submit(cairn_sched_t *s, const cairn_req_params_t *p, uint64_t *id,
                       char *err, size_t err_len);

/* Cancels a request (client disconnect): its blocks are freed and its final event is
 * ERROR/CAIRN_ECANCELED, delivered on the engine thread. Unknown or finished ids: no-op. */
CAIRN_API void cairn_sched_cancel(cairn_sched_t *s, uint64_t id);

typedef struct {
    uint64_t requests_submitted, requests_done, requests_failed, requests_canceled;
    uint64_t prompt_tokens, completion_tokens, cached_tokens, restored_tokens;
    uint64_t preemptions, steps;
    int queued, running;
    /* Pool figures from the KV cache core (cairn_engine_kv_stats), snapshotted on the
     * engine thread after each step. total: usable blocks at the budget (the null block
     * excluded); used: blocks referenced by live sequences (a shared block once; exactly
     * 0 when no sequence is alive); cached: blocks held only by the prefix cache
     * (evictable); free: total - used - cached (never allocated or returned). */
    uint64_t pool_blocks_total, pool_blocks_used, pool_blocks_cached, pool_blocks_free;
    uint64_t pool_block_bytes;      /* K and V of every layer for one block */
    uint64_t pool_bytes_committed;  /* pool storage committed now */
    uint64_t pool_grows, pool_evictions; /* pool grows; cached blocks evicted */
    uint64_t pool_hits, pool_misses;     /* sequence begins with / without a cached prefix */
    uint64_t pool_hit_tokens, pool_query_tokens; /* prefix tokens found / looked up */
    /* The engine's counters (cairn_engine_counters), same snapshot. */
    uint64_t engine_tokens_computed, engine_tokens_reused;
    /* Recurrent-state checkpoints (models with recurrent layers; 0 otherwise). */
    uint64_t ckpt_saves, ckpt_restores, ckpt_evictions, ckpt_count, ckpt_bytes;
    /* The cold tier (cairn_engine_cold_counters), same snapshot; all 0 when it is off. */
    bool cold_enabled;
    uint64_t cold_restored_blocks, cold_restored_tokens, cold_captured_blocks;
    uint64_t cold_hits, cold_misses;       /* store reads: valid blocks / absent objects */
    uint64_t cold_corruptions;             /* invalid objects found (and deleted) */
    uint64_t cold_write_errors;            /* writes that failed (ENOSPC, EIO...) */
    uint64_t cold_queue_drops;             /* blocks not queued (writer queue full) */
    uint64_t cold_bytes_written, cold_used_bytes, cold_objects;
    /* Hybrid families' STATE sidecars (cairn_engine_cold_counters), and restores by the
     * rule that reduced them (index: cairn_tier_miss_t). */
    uint64_t cold_sidecars_captured, cold_sidecars_installed, cold_sidecar_corruptions;
    uint64_t cold_sidecar_drops, cold_sidecar_objects, cold_sidecar_bytes;
    uint64_t cold_restores_reduced, cold_restores_suppressed;
    uint64_t cold_restore_miss[CAIRN_ENGINE_COLD_MISS_REASONS];
    /* The rest of the per-tier event counters of issue 11 (cairn_engine_cold_counters):
     * capture walks (chain empty, blocks already persisted, refused), sidecar anchors
     * (already persisted, boundary skips, chain empty), restores (lookups, sidecars read,
     * candidates refused, install failures). */
    uint64_t cold_capture_walks, cold_capture_chain_empty, cold_capture_already, cold_capture_failed;
    uint64_t cold_sidecars_already, cold_sidecar_skips, cold_sidecar_chain_empty;
    uint64_t cold_restore_lookups, cold_sidecar_reads, cold_candidates_refused, cold_install_failures;
    /* Background capture: blocks found not on disk and queued, copy walks stopped by the
     * pin budget, evictions held back for write-back; gauges: blocks and bytes awaiting
     * write (not yet accepted by the store, plus what its queue holds) and pinned bytes. */
    uint64_t cold_capture_queued, cold_capture_deferrals, cold_writeback_holds, cold_capture_lost;
    uint64_t cold_awaiting_blocks, cold_awaiting_bytes, cold_pinned_bytes;
    /* The shared tier (cairn_engine_cold_counters .shared...), same snapshot; all 0 when
     * none is configured. */
    bool shared_enabled, shared_connected;
    uint64_t shared_restored_blocks;       /* restored blocks read from the shared tier */
    uint64_t shared_promoted_blocks;       /* of those, written to the local tier too */
    uint64_t shared_hits, shared_misses, shared_corruptions;
    uint64_t shared_enqueued, shared_bytes_written, shared_bytes_restored;
    uint64_t shared_write_errors, shared_queue_drops, shared_unavailable;
    uint64_t shared_faults, shared_outages, shared_reconnects, shared_timeouts;
    uint32_t shared_queue_len;
} cairn_sched_stats_t;

/* A consistent snapshot of the counters, taken under the scheduler's lock (updated by the
 * engine thread after every step). Any thread. */
CAIRN_API void cairn_sched_stats(cairn_sched_t *s, cairn_sched_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif
