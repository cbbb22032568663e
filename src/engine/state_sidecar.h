/*
 * state_sidecar.h — a hybrid model's state outside its FULL layers' blocks, at one block
 * boundary, as cold-tier STATE payloads (docs/FORMAT.md 1.10): which KV core groups need
 * one, each one's layout descriptor, and its export (capture) and import (restore).
 *
 * Model. A prefix of P tokens (P = k * block_size) of a model is resumable from the tier
 * when the FULL layers' K/V of blocks 0..k-1 (BLOCK objects, tier group 0) and, for every
 * other group g of the KV core, one STATE object of group g at P are valid:
 *   RECURRENT group (one per model: every recurrent layer): the whole state handle after
 *       exactly P tokens, the bytes of the engine's checkpoint under the boundary key
 *       (engine/seq_state.h): the payload is the handle as the recurrent_store holds it;
 *   SLIDING group of window W: the pool blocks the window of position P needs,
 *       first_live(P) .. k-1 (cairn_kv_sliding_first_live), whole and block-major as the
 *       pool holds the group's layers: the min(P, W - 1) rows before P, widened to whole
 *       blocks, so a boundary below the window (P < W) is a sidecar of all P rows and
 *       every restored block is wholly valid (a later, shorter prefix may attach it).
 * The layout descriptor names the group kind, dtype, every tensor and every dimension the
 * engine knows (per layer: heads, head_dim and offsets, or state bytes and offset), the
 * block range and the payload size, so a reader refuses a sidecar of any other geometry,
 * boundary or dtype byte for byte (the model fingerprint covers the rest).
 *
 * Invariants: the FULL layers form exactly one paged group (every family so far; the
 * plan refuses other layouts), whose blocks are the tier's BLOCK objects; a plan never
 * changes after creation.
 *
 * Thread-safety: a plan is immutable (any thread). state_sidecar_gather reads pool bytes
 * only and may run on any thread while its blocks stay pinned
 * (cairn_kv_cache_block_pin); the install functions are engine-thread calls.
 */
#ifndef CAIRN_ENGINE_STATE_SIDECAR_H
#define CAIRN_ENGINE_STATE_SIDECAR_H

#include "cairn/kv_cache.h"
#include "models/family.h"

#define STATE_SIDECAR_MAX_LAYOUT 4096u  /* descriptor bytes (the tier's limit) */
#define STATE_SIDECAR_MAX 16u           /* sidecar groups per model (CAIRN_KV_MAX_GROUPS) */

typedef struct state_sidecars state_sidecars_t;

/* One group's sidecar at one boundary: what a writer puts and a reader must find again. */
typedef struct {
    uint32_t group;                /* KV core group: the STATE key's group */
    cairn_kv_layer_kind_t kind;    /* SLIDING or RECURRENT */
    size_t boundary;               /* tokens before it, a positive multiple of block_size */
    size_t first_block, n_blocks;  /* SLIDING: the chain blocks it holds; RECURRENT: 0, 0 */
    size_t block_bytes;            /* SLIDING: payload bytes per block (the group's) */
    size_t payload_size;
    uint32_t layout_size;
    uint8_t layout[STATE_SIDECAR_MAX_LAYOUT];
} state_sidecar_desc_t;

/*
 * The sidecar plan of a cache: layers[n_layers] as cairn_model_cache_layout filled them,
 * state_bytes the handle size it reported (0: no recurrent layer). Errors:
 * CAIRN_EUNSUPPORTED (the FULL layers are not exactly one paged group), CAIRN_ENOMEM,
 * CAIRN_EINVAL. A dense model's plan has no sidecar groups.
 */
int state_sidecars_create(const cairn_kv_cache_t *cache, const cairn_layer_cache_t *layers, uint32_t n_layers,
                          size_t state_bytes, state_sidecars_t **out);
void state_sidecars_destroy(state_sidecars_t *p);

/* The KV core group of the FULL layers (the tier's BLOCK objects). */
uint32_t state_sidecars_full_group(const state_sidecars_t *p);
/* Sidecar groups, and the KV core group of sidecar i (i < count), in group order. */
uint32_t state_sidecars_count(const state_sidecars_t *p);
uint32_t state_sidecars_group(const state_sidecars_t *p, uint32_t i);
/* The recurrent sidecar's index, or -1 when the model has no recurrent layer. */
int state_sidecars_recurrent(const state_sidecars_t *p);

/*
 * Describes sidecar i at `boundary` tokens (a positive multiple of the block size): block
 * range, payload size and the layout descriptor bytes (FORMAT.md 1.10). Pure; O(layers).
 * Errors: CAIRN_EINVAL.
 */
int state_sidecar_describe(const state_sidecars_t *p, uint32_t i, size_t boundary, state_sidecar_desc_t *out);

/*
 * Export of a SLIDING sidecar: copies the group's bytes of pool blocks blocks[0..
 * d->n_blocks) (the chain blocks d->first_block.., each pinned or otherwise unchanging)
 * into dst (d->payload_size bytes). Any thread. O(payload).
 * A RECURRENT sidecar's payload is the checkpoint's bytes as they are (seq_ckpt_pin):
 * nothing to convert.
 */
void state_sidecar_gather(const cairn_kv_cache_t *cache, const state_sidecar_desc_t *d, const uint32_t *blocks,
                          void *dst);

/*
 * Import of a SLIDING sidecar, in two steps so that a restore installs every group or
 * none: _take takes a pool block (cairn_kv_cache_import_begin, pinned) for each chain
 * block of d that the pool does not hold published in d->group under (domain, hashes[j]),
 * and pins the ones it holds, writing ids[0..n_blocks) (taken or pinned) and take[]
 * (true: taken); CAIRN_EEXHAUSTED or the pool's error gives everything back. Then either
 * _commit copies payload into the taken blocks and publishes them (the pinned ones are
 * unpinned), or _abandon gives them all back. *published (may be NULL) counts blocks
 * published. Engine thread. hashes: the chain's block hashes (index j: chain block j).
 */
int state_sidecar_sliding_take(cairn_kv_cache_t *cache, const state_sidecar_desc_t *d,
                               const cairn_kv_hash_t *domain, const cairn_kv_hash_t *hashes, uint32_t *ids,
                               bool *take);
void state_sidecar_sliding_commit(cairn_kv_cache_t *cache, const state_sidecar_desc_t *d,
                                  const cairn_kv_hash_t *domain, const cairn_kv_hash_t *hashes,
                                  const uint32_t *ids, const bool *take, const void *payload, int *published);
void state_sidecar_sliding_abandon(cairn_kv_cache_t *cache, const state_sidecar_desc_t *d, const uint32_t *ids,
                                   const bool *take);

/* Whether the pool holds every chain block of SLIDING sidecar d published (so the group
 * needs nothing from the store at d's boundary). Engine thread. */
bool state_sidecar_sliding_hot(const cairn_kv_cache_t *cache, const state_sidecar_desc_t *d,
                               const cairn_kv_hash_t *domain, const cairn_kv_hash_t *hashes);

#endif
