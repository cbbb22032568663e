/*
 * tier_object.h — private: encoding and validation of the tier's objects in their byte
 * form: a BLOCK (docs/FORMAT.md 1.2, "Cold tier objects") and a STATE sidecar (FORMAT.md
 * 1.8). Pure functions on byte buffers, no I/O, so the fuzzers and every store that keeps
 * objects as bytes (the filesystem store, the Redis store) share exactly one parser per
 * kind.
 */
#ifndef CAIRN_TIER_OBJECT_H
#define CAIRN_TIER_OBJECT_H

#include "cairn/tier.h"

/* Limits enforced on every object header (a header outside them is corrupt). */
#define TIER_OBJECT_MAX_BLOCK_TOKENS 4096
#define TIER_OBJECT_MAX_LAYERS 1024
#define TIER_OBJECT_MAX_PAYLOAD (1ull << 32)

#define TIER_OBJECT_MAGIC "CAIRNKV\x1a"
#define TIER_OBJECT_VERSION 1u
#define TIER_OBJECT_FIXED_BYTES 152u   /* header bytes before the token ids */
#define TIER_OBJECT_SUM_BYTES 16u      /* XXH3-128, low 64 bits then high 64 bits, little-endian */

/* A parsed header. tokens_le / layers_le point into the parsed buffer. */
typedef struct {
    uint32_t version;
    uint32_t header_bytes;
    cairn_tier_hash_t fingerprint, hash, parent;
    uint32_t dtype, n_tokens, n_layers, flags;
    uint64_t payload_bytes;
    uint8_t payload_sum[TIER_OBJECT_SUM_BYTES];
    const uint8_t *tokens_le;   /* n_tokens int32 LE */
    const uint8_t *layers_le;   /* n_layers uint64 LE */
} tier_object_header_t;

/* Header size for a block of n_tokens tokens and n_layers layers. */
size_t tier_object_header_size(uint32_t n_tokens, uint32_t n_layers);

/* XXH3-128 of data as 16 bytes (low then high, LE). */
void tier_object_checksum(const void *data, size_t len, uint8_t out[TIER_OBJECT_SUM_BYTES]);

/*
 * Writes the header of blk (a BLOCK: key.hash, parent, tokens, payload) into buf
 * (cap >= tier_object_header_size()), computing the payload checksum.
 * Errors: CAIRN_EINVAL (not a BLOCK, sizes disagree, limits), CAIRN_ERANGE (cap).
 */
int tier_object_encode_header(uint8_t *buf, size_t cap, const cairn_tier_hash_t *fingerprint,
                              cairn_dtype_t dtype, uint32_t n_layers, const uint64_t *layer_bytes,
                              const cairn_tier_object_t *blk, size_t *header_bytes);

/*
 * Parses and checks a header from buf[0..len): magic, version, limits, the size identities
 * and the header checksum. CAIRN_ECORRUPT when invalid; CAIRN_ERANGE when len is shorter
 * than the header (h->header_bytes then says how many bytes are needed, if known).
 */
int tier_object_parse_header(const uint8_t *buf, size_t len, tier_object_header_t *h);

/* Layer l's byte count from a parsed header. */
uint64_t tier_object_layer_bytes(const tier_object_header_t *h, uint32_t l);

/*
 * Validates a whole object held in buf[0..len): header, exact length, payload checksum,
 * and (each when non-NULL) the expected fingerprint and block hash. CAIRN_ECORRUPT if not.
 */
int tier_object_validate(const uint8_t *buf, size_t len, const cairn_tier_hash_t *fingerprint,
                         const cairn_tier_hash_t *hash, tier_object_header_t *h);

/* ---- STATE objects (FORMAT.md 1.8) ------------------------------------------------ */

#define TIER_STATE_MAGIC "CAIRNST\x1a"
#define TIER_STATE_VERSION 1u
#define TIER_STATE_FIXED_BYTES 128u    /* header bytes before the layout descriptor */
#define TIER_STATE_MAX_LAYOUT 4096u    /* layout descriptor bytes */

/* A parsed STATE header. layout points into the parsed buffer. */
typedef struct {
    uint32_t version;
    uint32_t header_bytes;
    cairn_tier_hash_t fingerprint, hash;   /* hash: the chain hash at the boundary */
    uint32_t group, layout_size;
    uint64_t boundary;                     /* tokens before the boundary, >= 1 */
    uint64_t payload_bytes;
    uint8_t payload_sum[TIER_OBJECT_SUM_BYTES];
    const uint8_t *layout;                 /* layout_size bytes */
} tier_state_header_t;

/* Header size of a STATE object whose layout descriptor has layout_size bytes. */
size_t tier_state_header_size(uint32_t layout_size);

/*
 * Writes the header of st (a STATE: key.hash, key.group, boundary, layout, payload) into
 * buf (cap >= tier_state_header_size()), computing the payload checksum.
 * Errors: CAIRN_EINVAL (not a STATE, boundary 0, limits), CAIRN_ERANGE (cap).
 */
int tier_state_encode_header(uint8_t *buf, size_t cap, const cairn_tier_hash_t *fingerprint,
                             const cairn_tier_object_t *st, size_t *header_bytes);

/* Parses and checks a STATE header from buf[0..len): magic, version, limits, sizes and the
 * header checksum. CAIRN_ECORRUPT when invalid; CAIRN_ERANGE when len is shorter than the
 * header (h->header_bytes then says how many bytes are needed, if known). */
int tier_state_parse_header(const uint8_t *buf, size_t len, tier_state_header_t *h);

/* Validates a whole STATE object in buf[0..len): header, exact length, payload checksum,
 * and (when non-NULL) the expected fingerprint. CAIRN_ECORRUPT if not. */
int tier_state_validate(const uint8_t *buf, size_t len, const cairn_tier_hash_t *fingerprint,
                        tier_state_header_t *h);

#endif
