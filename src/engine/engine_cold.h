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
 * turn. Everything it does is best-effort: a failure is counted and logged, never
 * returned to inference, and invalid objects are never used.
 *
 * Thread-safety: engine thread only (a store's own threads are internal to the store).
 */
#ifndef CAIRN_ENGINE_COLD_H
#define CAIRN_ENGINE_COLD_H

#include "cairn/engine.h"
#include "engine/kv_paged.h"

typedef struct engine_cold engine_cold_t;

/*
 * Opens the cold tier for an engine when the options and knobs enable it and the family
 * is eligible; *out is NULL when the tier is off (disabled, neither a lent store nor a
 * root, not eligible, or the store failed to open — the last with a CAIRN_LOG_WARN).
 * Returns CAIRN_OK or CAIRN_ENOMEM (the only error that fails engine creation).
 * `numerics` is the compute backend's numerics id when it differs from the CPU numerics
 * (NULL otherwise): it enters the fingerprint, so K/V of other numerics never mix. When
 * the pool lives in device memory (its storage has staging calls), block bytes move
 * through the storage's two pinned buffers, the copy of one block overlapping the disk
 * read (restore) or the store's copy (capture) of the other.
 */
int engine_cold_open(const cairn_checkpoint_t *ck, const cairn_engine_options_t *opt,
                     const char *numerics, kv_paged_t *kp, engine_cold_t **out);

/* Waits up to the drain deadline for queued writes, then closes the store it opened (a
 * lent store is left to its owner). NULL: no-op. */
void engine_cold_close(engine_cold_t *c);

/*
 * Before the first append of s (the prompt tokens[0..n)): finds the hot prefix and loads
 * the blocks past it that the store holds into the pool, published under s's domain.
 * *hot_tokens receives the hot prefix in tokens; *restored_blocks the blocks published.
 */
void engine_cold_restore(engine_cold_t *c, kv_paged_seq_t *s, const int32_t *tokens, int n,
                         int *hot_tokens, int *restored_blocks);

/* Records the tokens a begin actually attached from restored blocks (counters). */
void engine_cold_note_restored(engine_cold_t *c, int tokens);

/* Queues the full computed blocks of s that are not on disk yet (per-turn budget and
 * deadline), then appends the per-turn trace line labelled `label`. */
void engine_cold_capture(engine_cold_t *c, const kv_paged_seq_t *s, const char *label);

void engine_cold_counters(const engine_cold_t *c, cairn_engine_cold_counters_t *out);
void engine_cold_flush(engine_cold_t *c);

#endif
