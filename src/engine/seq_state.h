/*
 * seq_state.h — the per-sequence state handle of a model with recurrent layers, and the
 * checkpoints that let a later request resume it.
 *
 * Handle. A model family declares, per RECURRENT layer, how many bytes of state one
 * sequence carries (models/family.h, cairn_layer_cache_t.state_bytes: conv taps, the
 * delta-rule matrix). The engine owns one handle per sequence: that many bytes in one
 * 64-byte-aligned buffer, zeroed at creation (the state before position 0), layer l's
 * part at cairn_model_state_offset(l). The forward step reads and advances it; the KV
 * pool never holds it. A model without recurrent layers has no handle (size 0, data NULL).
 *
 * Checkpoints (paged path). A checkpoint is a copy of a whole handle after exactly P
 * tokens, P a multiple of the block size, stored in a recurrent_store under the key
 * cairn_kv_seq_boundary_key(P) (the chain hash of the block ending at P: it covers the
 * domain, the extra keys and every token before P) and registered in the KV core with
 * cairn_kv_seq_checkpoint, which is what lets the core serve a prefix of exactly P
 * (never another length) to a later sequence. The store and the registry always name the
 * same keys: a key enters the registry only after its bytes are stored, the store's
 * budget evictions drop the key from the registry, and the registry's evictions
 * (capacity) drop the bytes.
 *
 * Where checkpoints are taken (seq_ckpt_next): at block boundaries a step actually
 * passes, never in between:
 *   - the grid anchored at position 0: block_size * 4^k (16, 64, 256, 1024, 4096, ... for
 *     16-token blocks), so a later prompt that shares only a prefix (a system prompt)
 *     still finds one;
 *   - the end of the last full block of every prompt (the tokens a sequence begins with,
 *     and every later feed of more than one token: a new turn), so a returning
 *     conversation resumes where its previous prompt's blocks end; when a prompt of n
 *     tokens ends exactly on a boundary, also the boundary before it, since the same
 *     prompt again can be served at most n - 1 tokens.
 * The budget (bytes) evicts the least recently saved or restored checkpoint first.
 *
 * Thread-safety: engine thread only.
 */
#ifndef CAIRN_ENGINE_SEQ_STATE_H
#define CAIRN_ENGINE_SEQ_STATE_H

#include "cairn/kv_cache.h"
#include "engine/recurrent_store.h"

typedef struct {
    void *data;   /* [bytes], 64-byte aligned; NULL when bytes == 0 */
    size_t bytes;
    void *raw;    /* the allocation data lies in */
} seq_state_t;

/* A zeroed handle of `bytes` (0: an empty handle, no allocation). CAIRN_ENOMEM. */
int seq_state_init(seq_state_t *st, size_t bytes);
/* Frees the handle; an empty or zeroed one is a no-op. */
void seq_state_fini(seq_state_t *st);
/* dst (initialised with the same size) receives a copy of src's state (fork). */
void seq_state_copy(seq_state_t *dst, const seq_state_t *src);
/* Back to the state before position 0 (all zeros). */
void seq_state_reset(seq_state_t *st);

/* ---- checkpoints ------------------------------------------------------------------ */

typedef struct seq_ckpts seq_ckpts_t;

/*
 * Checkpoints of states of state_bytes (> 0) for the sequences of `cache`, within
 * budget_bytes. The cache must have been created with seq_ckpts_registry_evicted as
 * its on_checkpoint_evict and, as checkpoint_user, the address of the seq_ckpts_t *
 * that will hold this bank (the cache exists before the bank does). Errors:
 * CAIRN_EINVAL, CAIRN_ENOMEM.
 */
int seq_ckpts_create(cairn_kv_cache_t *cache, size_t state_bytes, uint64_t budget_bytes,
                     seq_ckpts_t **out);
void seq_ckpts_destroy(seq_ckpts_t *ck);
/* The cache's on_checkpoint_evict: *(seq_ckpts_t **)user is the bank (NULL: none yet). */
void seq_ckpts_registry_evicted(void *user, const cairn_kv_hash_t *key);
/* Registry capacity that leaves the byte budget as the binding limit. */
uint32_t seq_ckpts_registry_capacity(size_t state_bytes, uint64_t budget_bytes);

/*
 * The first boundary b with from < b <= to where a sequence whose latest prompt ends at
 * prompt_len tokens takes a checkpoint (the grid, or that prompt's last full block(s));
 * 0 when none. from, to: tokens computed before and after a run of rows. O(log to).
 */
int seq_ckpt_next(int from, int to, int prompt_len, int block_size);

/*
 * Saves st (the state after exactly n computed tokens of seq, n a positive multiple of
 * the block size, n <= computed) and registers it. A budget too small for one state
 * saves nothing and returns 0 (checkpoints are an optimisation). Errors: the KV core's
 * (CAIRN_ERANGE), CAIRN_ENOMEM; nothing registered on error. Cost: one memcpy of the
 * state (the "recurrent checkpoint" figure of docs/PERFORMANCE.md).
 */
int seq_ckpt_save(seq_ckpts_t *ck, cairn_kv_seq_t *seq, size_t n, const seq_state_t *st);

/*
 * Restores into st the checkpoint of seq at exactly n tokens. CAIRN_ENOENT when none is
 * stored (st untouched).
 */
int seq_ckpt_restore(seq_ckpts_t *ck, const cairn_kv_seq_t *seq, size_t n, seq_state_t *st);

/* The deepest n' <= n (a multiple of the block size, > 0) at which seq's chain has a
 * stored checkpoint; 0 when none. Looks at hashed blocks only. O(n / block_size). */
size_t seq_ckpt_deepest(const seq_ckpts_t *ck, const cairn_kv_seq_t *seq, size_t n);

/* ---- the cold tier's use of the bank (engine_cold.c) ---- */

/* Whether a checkpoint is stored under key (the key of a boundary of some chain). */
bool seq_ckpt_has(const seq_ckpts_t *ck, const cairn_kv_hash_t *key);

/* The checkpoint under key, pinned for a copy on another thread (valid and unchanged until
 * seq_ckpt_unpin, on the engine thread), or NULL. */
const void *seq_ckpt_pin(seq_ckpts_t *ck, const cairn_kv_hash_t *key);
void seq_ckpt_unpin(seq_ckpts_t *ck, const void *bytes);

/*
 * Installs a state restored from outside (a cold-tier sidecar) as the checkpoint under
 * key: `bytes` is a buffer of rstore_buf_new holding a whole state handle, taken over
 * (freed on error). Stored first, then registered with the KV core, so the core serves
 * the boundary only once its state is there. Errors: CAIRN_ERANGE (the budget holds no
 * state), CAIRN_ENOMEM, the core's.
 */
int seq_ckpt_import(seq_ckpts_t *ck, const cairn_kv_hash_t *key, void *bytes);

/* Counters of the bank (the recurrent_store's: saves, restores, evictions, bytes, ...). */
void seq_ckpts_stats(const seq_ckpts_t *ck, rstore_stats_t *out);

#endif
