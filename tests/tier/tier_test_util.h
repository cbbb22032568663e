/* Shared helpers for the cold tier tests: a deterministic synthetic model and its blocks. */
#ifndef COLD_TEST_UTIL_H
#define COLD_TEST_UTIL_H

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

/* Counts files under dir whose name starts with prefix (recursively). */
size_t t_count_files(const char *dir, const char *prefix);

#endif
