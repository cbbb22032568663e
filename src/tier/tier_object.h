/*
 * cold_object.h — private: encoding and validation of one cold tier object (docs/FORMAT.md,
 * "Cold tier objects"). Pure functions on byte buffers, no I/O, so the fuzzer and the
 * store share exactly one parser.
 */
#ifndef CAIRN_COLD_OBJECT_H
#define CAIRN_COLD_OBJECT_H

#include "cairn/cold_tier.h"

#define COLD_MAGIC "CAIRNKV\x1a"
#define COLD_VERSION 1u
#define COLD_FIXED_BYTES 152u   /* header bytes before the token ids */
#define COLD_SUM_BYTES 16u      /* XXH3-128, low 64 bits then high 64 bits, little-endian */

/* A parsed header. tokens_le / layers_le point into the parsed buffer. */
typedef struct {
    uint32_t version;
    uint32_t header_bytes;
    cairn_cold_hash_t fingerprint, hash, parent;
    uint32_t dtype, n_tokens, n_layers, flags;
    uint64_t payload_bytes;
    uint8_t payload_sum[COLD_SUM_BYTES];
    const uint8_t *tokens_le;   /* n_tokens int32 LE */
    const uint8_t *layers_le;   /* n_layers uint64 LE */
} cold_header_t;

/* Header size for a block of n_tokens tokens and n_layers layers. */
size_t cold_object_header_size(uint32_t n_tokens, uint32_t n_layers);

/* XXH3-128 of data as 16 bytes (low then high, LE). */
void cold_object_checksum(const void *data, size_t len, uint8_t out[COLD_SUM_BYTES]);

/*
 * Writes the header of blk into buf (cap >= cold_object_header_size()), computing the
 * payload checksum. Errors: CAIRN_EINVAL (sizes disagree, limits), CAIRN_ERANGE (cap).
 */
int cold_object_encode_header(uint8_t *buf, size_t cap, const cairn_cold_hash_t *fingerprint,
                              cairn_dtype_t dtype, uint32_t n_layers, const uint64_t *layer_bytes,
                              const cairn_cold_block_t *blk, size_t *header_bytes);

/*
 * Parses and checks a header from buf[0..len): magic, version, limits, the size identities
 * and the header checksum. CAIRN_ECORRUPT when invalid; CAIRN_ERANGE when len is shorter
 * than the header (h->header_bytes then says how many bytes are needed, if known).
 */
int cold_object_parse_header(const uint8_t *buf, size_t len, cold_header_t *h);

/* Layer l's byte count from a parsed header. */
uint64_t cold_header_layer_bytes(const cold_header_t *h, uint32_t l);

/*
 * Validates a whole object held in buf[0..len): header, exact length, payload checksum,
 * and (each when non-NULL) the expected fingerprint and block hash. CAIRN_ECORRUPT if not.
 */
int cold_object_validate(const uint8_t *buf, size_t len, const cairn_cold_hash_t *fingerprint,
                         const cairn_cold_hash_t *hash, cold_header_t *h);

#endif
