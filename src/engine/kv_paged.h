/*
 * kv_paged.h — the paged K/V path: the engine's adapter onto the KV cache core.
 *
 * A kv_paged_t owns one cairn_kv_cache_t laid out from the model family's cache layout
 * (models/family.h: per layer FULL, SLIDING(W), RECURRENT or SHARED, with its K/V
 * geometry), so the KV core builds one group per distinct paged layer kind and window.
 * A kv_paged_seq_t wraps one cairn_kv_seq_t plus the engine's cursor, and exposes the
 * attn_kv_t accessor kv_paged_rows: position p of layer l is slot p % block_size of block
 * table[p / bs] of that layer's group (0 for a null block outside a sliding window).
 */
#ifndef CAIRN_ENGINE_KV_PAGED_H
#define CAIRN_ENGINE_KV_PAGED_H

#include "cairn/kv_cache.h"
#include "models/family.h"

typedef struct kv_paged kv_paged_t;
typedef struct kv_paged_seq kv_paged_seq_t;

/*
 * Creates the cache for layers[n_layers]: block_tokens per block, a pool of budget_mib
 * MiB (the maximum, and also the initial size) in `storage` (the compute backend's: host
 * memory, or device memory for a device backend; storage_ctx its context). Errors: the KV core's (CAIRN_EINVAL for
 * a layout it cannot page, CAIRN_ERANGE for a budget below two blocks, CAIRN_ENOMEM),
 * with a message in err.
 */
int kv_paged_create(const cairn_layer_cache_t *layers, int n_layers, cairn_dtype_t dtype,
                    int block_tokens, size_t budget_mib, const cairn_kv_storage_ops_t *storage,
                    void *storage_ctx, kv_paged_t **out, char *err, size_t err_len);
/* The same with the KV core's recurrent checkpoint registry configured: capacity
 * max_checkpoints (0: the core's default) and its eviction callback (engine/seq_state.h). */
int kv_paged_create_ckpt(const cairn_layer_cache_t *layers, int n_layers, cairn_dtype_t dtype,
                         int block_tokens, size_t budget_mib, const cairn_kv_storage_ops_t *storage,
                         void *storage_ctx, uint32_t max_checkpoints,
                         cairn_kv_checkpoint_evict_fn on_evict, void *evict_user,
                         kv_paged_t **out, char *err, size_t err_len);
void kv_paged_destroy(kv_paged_t *kp);
/* The storage backend the pool lives in (and its context in *ctx). */
const cairn_kv_storage_ops_t *kv_paged_storage(const kv_paged_t *kp, void **ctx);
const cairn_kv_cache_t *kv_paged_cache(const kv_paged_t *kp);
/* The same cache, mutable (the cold-tier bridge imports restored blocks into it). */
cairn_kv_cache_t *kv_paged_cache_rw(kv_paged_t *kp);

/* A sequence with no tokens yet, in the domain of cache_salt (NULL: default domain). */
int kv_paged_seq_create(kv_paged_t *kp, const char *cache_salt, kv_paged_seq_t **out);
void kv_paged_seq_destroy(kv_paged_seq_t *s);
/* The sequence's domain (from its cache_salt) and its core sequence (NULL before the
 * first append), for the cold-tier bridge. */
const cairn_kv_hash_t *kv_paged_seq_domain(const kv_paged_seq_t *s);
const cairn_kv_seq_t *kv_paged_seq_core(const kv_paged_seq_t *s);
/* The core sequence, mutable (registering recurrent checkpoints). */
cairn_kv_seq_t *kv_paged_seq_core_rw(kv_paged_seq_t *s);
/*
 * Appends tokens and reserves their slots. The first append of a sequence begins it in the
 * core, attaching the longest cached prefix: *n_cached receives the tokens reused (0 on
 * later appends). CAIRN_EEXHAUSTED when the pool cannot hold them (nothing changes).
 */
int kv_paged_seq_append(kv_paged_seq_t *s, const int32_t *tokens, int n, int *n_cached);
/* Marks tokens [0, n_computed) computed; full blocks are published for reuse. */
int kv_paged_seq_commit(kv_paged_seq_t *s, int n_computed);
/* Drops the uncomputed tokens, keeping the computed blocks live. */
int kv_paged_seq_end_turn(kv_paged_seq_t *s);
/* Keeps the first n tokens. CAIRN_ERANGE when a sliding group already released a block
 * the window of the shorter sequence needs (nothing changes; see kv_paged_seq_restart). */
int kv_paged_seq_truncate(kv_paged_seq_t *s, int n);
/*
 * Begins the sequence again over tokens [n] in its domain, as a first append does: a new
 * core sequence attaches the longest cached prefix (*n_cached tokens, at most n - 1) and
 * reserves the rest, then the old one is released. For a truncation a sliding window
 * forbids: the shorter sequence's window blocks come back from the prefix cache where
 * they are still cached, the rest is recomputed. CAIRN_EEXHAUSTED (the old sequence stays
 * as it was) when the pool cannot hold both for the moment of the switch.
 */
int kv_paged_seq_restart(kv_paged_seq_t *s, const int32_t *tokens, int n, int *n_cached);
/* *out shares every block of s (all of s's tokens must be computed). */
int kv_paged_seq_fork(kv_paged_seq_t *s, kv_paged_seq_t **out);
/* attn_rows_fn over a kv_paged_seq_t: the rest of pos's block is contiguous; a null block
 * (a sliding window released it) gives NULL rows for the rest of the block. */
int kv_paged_rows(void *ctx, int layer, int pos, void **k, void **v);

#endif
