/*
 * engine_cold.h — the bridge between the engine's paged K/V path and the cache tier
 * (include/cairn/tier.h over a store of include/cairn/tier_store.h).
 *
 * An engine_cold_t walks one store: the filesystem store (include/cairn/cold_tier.h) it
 * opens for the engine's model fingerprint (architecture, layer geometry, K/V dtype, block
 * size, rope, math mode, weights digest) under the cache root, or a store the caller lends
 * through cairn_engine_options_t.cold_store, with the shared store of
 * cairn_engine_options_t.shared_tier behind it when one is configured (a layered store:
 * local first, shared for what local lacks). It restores a prompt's full blocks past the
 * hot prefix into the pool before the KV core admits the prompt (so the core attaches them
 * like any cached block) and captures a sequence's full computed blocks at the end of a
 * turn through a capture thread that copies pinned pool blocks into the store (write-back
 * keeps an unpersisted block from eviction until it is copied). Everything it does is
 * best-effort: a failure is counted and logged, never
 * returned to inference, and invalid objects are never used.
 *
 * Thread-safety: engine thread only (the capture thread, the I/O thread that runs
 * restore reads for engine_cold_restore_async, and a store's own threads are internal:
 * they touch only pinned blocks and their own buffers).
 */
#ifndef CAIRN_ENGINE_COLD_H
#define CAIRN_ENGINE_COLD_H

#include "cairn/engine.h"
#include "engine/kv_paged.h"
#include "engine/seq_state.h"
#include "models/family.h"

typedef struct engine_cold engine_cold_t;

/*
 * Opens the cold tier for an engine when the options and knobs enable it and the family
 * is eligible. layers / state_bytes: the model's cache layout (cairn_model_cache_layout);
 * ckpts: the engine's checkpoint bank (NULL for a model without recurrent layers; a
 * recurrent model without one keeps the tier off), borrowed for the tier's lifetime; *out is NULL when the tier is off (disabled, neither a lent store nor a
 * root, not eligible, or the store failed to open — the last with a CAIRN_LOG_WARN).
 * Returns CAIRN_OK or CAIRN_ENOMEM (the only error that fails engine creation).
 * `numerics` is the compute backend's numerics id for the options' math and K/V type
 * (compute_numerics_id; the CPU's "f32.2", "bf16.2", "f32.2+qk8.3" for q8_0 K/V, ...): it
 * enters the fingerprint, so K/V of other numerics never mix. When
 * the pool lives in device memory (its storage has staging calls), block bytes move
 * through the storage's two pinned buffers, the copy of one block overlapping the disk
 * read (restore) or the store's copy (capture) of the other; such a pool restores inline
 * on the engine thread (no I/O thread), captures on the engine thread within the capture
 * budget (no capture thread, no write-back), and serves dense models only (a hybrid's
 * tier stays off).
 */
int engine_cold_open(const cairn_checkpoint_t *ck, const cairn_engine_options_t *opt,
                     const char *numerics,
                     kv_paged_t *kp, const cairn_layer_cache_t *layers, size_t state_bytes,
                     seq_ckpts_t *ckpts, engine_cold_t **out);

/*
 * The model fingerprint that names the engine's store directory (docs/FORMAT.md 1.4) for
 * the checkpoint, options, numerics id (compute_numerics_id for the options' math and K/V
 * type) and block size. Returns CAIRN_OK or the hash's error. Thread-safe.
 */
int engine_cold_fingerprint(const cairn_checkpoint_t *ck, const cairn_engine_options_t *o, const char *numerics,
                            uint32_t block_tokens, cairn_tier_hash_t *fp);

/* Waits up to the drain deadline for queued writes, then closes the store it opened (a
 * lent store is left to its owner). NULL: no-op. */
void engine_cold_close(engine_cold_t *c);

/*
 * Before the first append of s (the prompt tokens[0..n)): finds the hot prefix and loads
 * the blocks past it that the store holds into the pool, published under s's domain; for
 * a hybrid family only up to the deepest boundary its sidecars back, every group at that
 * one boundary (the sidecar policy, cairn_tier_restore_hybrid). *hot_tokens receives the
 * hot prefix in tokens; *restored_objects the blocks, sliding rows and states installed;
 * *miss the cairn_tier_miss_t of the restore, -1 when the store was not consulted.
 */
void engine_cold_restore(engine_cold_t *c, kv_paged_seq_t *s, const int32_t *tokens, int n,
                         int *hot_tokens, int *restored_objects, int *miss);

/*
 * The same restore with its reads off the engine thread: the hashing, the hot prefix
 * (pinned), the pool blocks of the proposal are taken here; the store's reads run on the
 * tier's I/O thread; engine_cold_restore_finish (engine thread) installs what they
 * validated. *job is NULL when there is nothing to restore (*hot_tokens set); else the
 * caller must finish it exactly once. Between the two the engine may step other
 * sequences: everything the job holds is pinned.
 */
typedef struct restore_job restore_job_t;
void engine_cold_restore_async(engine_cold_t *c, kv_paged_seq_t *s, const int32_t *tokens, int n,
                               int *hot_tokens, restore_job_t **job);
/* Whether the job's reads are done (finish will not wait). Engine thread. */
bool engine_cold_restore_ready(engine_cold_t *c, const restore_job_t *j);
/* Waits for the reads if needed, installs, frees the job. Outputs as engine_cold_restore's. */
void engine_cold_restore_finish(engine_cold_t *c, restore_job_t *j, int *restored_objects, int *miss);
/* Whether restores should run off the engine thread (knob CAIRN_COLD_RESTORE_ASYNC, on). */
bool engine_cold_async(const engine_cold_t *c);

/* Records the tokens a begin actually attached from restored blocks (counters). */
void engine_cold_note_restored(engine_cold_t *c, int tokens);

/* Queues the full computed blocks of s that are not on disk yet for the capture thread
 * (write-through: now; write-back: held until the pool would evict them, or exit), pins
 * and hands over what the pin budget allows, then (hybrids) puts the sidecars of the
 * anchors the persisted chain reaches, then appends the per-turn trace line labelled
 * `label`. prompt_len: tokens up to the end of s's latest prompt (a sliding-only family
 * anchors there, as checkpoints do). Never waits for the disk or the block copies. */
void engine_cold_capture(engine_cold_t *c, const kv_paged_seq_t *s, int prompt_len, const char *label);

/* cairn_engine_cold_poll: takes back copied blocks, hands over the next; true while
 * blocks are queued or being copied. NULL: false. */
bool engine_cold_poll(engine_cold_t *c);

/* cairn_engine_cold_persist; held_too also queues write-back's held blocks (always true
 * from the public call and at close). */
int engine_cold_persist(engine_cold_t *c, int deadline_ms, bool held_too, cairn_cold_persist_report_t *out);

/* cairn_engine_cold_exit_ms. */
int engine_cold_exit_ms(const engine_cold_t *c);

/* cairn_engine_cold_last_turn. */
void engine_cold_last_turn(const engine_cold_t *c, cairn_engine_cold_turn_t *out);

void engine_cold_counters(const engine_cold_t *c, cairn_engine_cold_counters_t *out);
/* Drives the capture until nothing is queued or in flight, then waits for the store. */
void engine_cold_flush(engine_cold_t *c);

#endif
