/* Shared helpers for the cache tier tests: a deterministic synthetic model and its blocks. */
#ifndef TIER_TEST_UTIL_H
#define TIER_TEST_UTIL_H

#include "cairn/cold_tier.h"

#define T_LAYERS 4
#define T_TOKENS 16
#define T_LAYER_BYTES 1024  /* small blocks keep the crash loop fast */
#define T_PAYLOAD (T_LAYERS * T_LAYER_BYTES)

extern const uint64_t t_layer_bytes[T_LAYERS];

/* A fresh, empty temporary cache root (caller frees with free()); removed by t_rmrf. */
char *t_mkroot(void);
void t_rmrf(const char *path);

/* Fingerprint of the synthetic model `variant`. */
cairn_tier_hash_t t_fingerprint(int variant);
/* Config for root/variant with the given quota (0: none given). */
cairn_cold_config_t t_config(const char *root, int variant, uint64_t quota);

/* The chain of block i: hash (SHA-256 of parent || tokens), parent, tokens, payload
 * derived from `seed` and i. The payload buffer must hold T_PAYLOAD bytes. */
void t_block(uint32_t seed, size_t i, cairn_tier_hash_t *hash, cairn_tier_hash_t *parent, int32_t *tokens,
             uint8_t *payload);

/* Block i of chain `seed` as a tier object (kind BLOCK, group 0, default domain): key,
 * parent, tokens (into `tokens`, T_TOKENS ids) and payload (into `payload`, T_PAYLOAD). */
void t_object(uint32_t seed, size_t i, cairn_tier_object_t *obj, int32_t *tokens, uint8_t *payload);

/* The sidecar at the boundary after block i of chain `seed` as a STATE object of `group`:
 * key hash = block i's hash, boundary (i + 1) * T_TOKENS, a layout descriptor naming its
 * rows (into `layout`, T_STATE_LAYOUT bytes) and t_state_bytes(i) payload bytes derived
 * from seed, i and group (into `payload`, T_PAYLOAD bytes). Sizes vary with i, as a
 * sliding window's rows do below the window. */
#define T_STATE_LAYOUT 24
size_t t_state_bytes(size_t i);
void t_state(uint32_t seed, size_t i, uint32_t group, cairn_tier_object_t *obj, uint8_t *layout, uint8_t *payload);

/* The keys of blocks [0, n) of chain `seed` and their tokens (n * T_TOKENS, may be NULL). */
void t_chain(uint32_t seed, size_t n, cairn_tier_key_t *keys, int32_t *tokens);

/* Counts files under dir whose name starts with prefix (recursively). */
size_t t_count_files(const char *dir, const char *prefix);

#endif
