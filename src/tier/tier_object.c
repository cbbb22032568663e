/*
 * tier_object.c — encodes and validates BLOCK objects (docs/FORMAT.md 1.2, "Cold tier
 * objects") and STATE objects (FORMAT.md 1.8) in their byte form.
 *
 * Model: an object is a self-describing header (identity, tokens, per-layer sizes, payload
 * checksum, then a checksum of the header itself) followed by the payload. Every integer is
 * little-endian and explicitly encoded, so the format does not depend on the host.
 * Invariants checked by the parser: header_bytes == 152 + 4*n_tokens + 8*n_layers + 16,
 * the layer sizes sum to payload_bytes, every count within the TIER_OBJECT_MAX_* limits,
 * and the header checksum matches. A STATE header is the same idea with a layout
 * descriptor in place of tokens and layers: header_bytes == 128 + layout_size + 16,
 * boundary >= 1, flags and reserved zero. The parsers never read outside [buf, buf+len).
 * Thread-safety: pure functions, no state.
 */
#include <string.h>
#include <xxhash.h>

#include "tier/tier_object.h"

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

size_t tier_object_header_size(uint32_t n_tokens, uint32_t n_layers)
{
    return TIER_OBJECT_FIXED_BYTES + 4u * (size_t)n_tokens + 8u * (size_t)n_layers + TIER_OBJECT_SUM_BYTES;
}

void tier_object_checksum(const void *data, size_t len, uint8_t out[TIER_OBJECT_SUM_BYTES])
{
    XXH128_hash_t h = XXH3_128bits(data, len);
    put64(out, h.low64);
    put64(out + 8, h.high64);
}

int tier_object_encode_header(uint8_t *buf, size_t cap, const cairn_tier_hash_t *fingerprint,
                              cairn_dtype_t dtype, uint32_t n_layers, const uint64_t *layer_bytes,
                              const cairn_tier_object_t *blk, size_t *header_bytes)
{
    if (blk->key.kind != CAIRN_TIER_BLOCK || !blk->n_tokens || blk->n_tokens > TIER_OBJECT_MAX_BLOCK_TOKENS ||
        !n_layers || n_layers > TIER_OBJECT_MAX_LAYERS || !blk->tokens || !blk->payload)
        return CAIRN_EINVAL;
    uint64_t total = 0;
    for (uint32_t l = 0; l < n_layers; l++)
        total += layer_bytes[l];
    if (total != blk->payload_size || total > TIER_OBJECT_MAX_PAYLOAD)
        return CAIRN_EINVAL;
    size_t hb = tier_object_header_size(blk->n_tokens, n_layers);
    if (cap < hb)
        return CAIRN_ERANGE;
    memset(buf, 0, hb);
    memcpy(buf, TIER_OBJECT_MAGIC, 8);
    put32(buf + 8, TIER_OBJECT_VERSION);
    put32(buf + 12, (uint32_t)hb);
    memcpy(buf + 16, fingerprint->bytes, 32);
    memcpy(buf + 48, blk->key.hash.bytes, 32);
    memcpy(buf + 80, blk->parent.bytes, 32);
    put32(buf + 112, (uint32_t)dtype);
    put32(buf + 116, blk->n_tokens);
    put32(buf + 120, n_layers);
    put32(buf + 124, 0);
    put64(buf + 128, total);
    tier_object_checksum(blk->payload, blk->payload_size, buf + 136);
    uint8_t *p = buf + TIER_OBJECT_FIXED_BYTES;
    for (uint32_t i = 0; i < blk->n_tokens; i++, p += 4)
        put32(p, (uint32_t)blk->tokens[i]);
    for (uint32_t l = 0; l < n_layers; l++, p += 8)
        put64(p, layer_bytes[l]);
    tier_object_checksum(buf, hb - TIER_OBJECT_SUM_BYTES, p);
    *header_bytes = hb;
    return CAIRN_OK;
}

int tier_object_parse_header(const uint8_t *buf, size_t len, tier_object_header_t *h)
{
    memset(h, 0, sizeof *h);
    if (len < 16)
        return len >= 8 && memcmp(buf, TIER_OBJECT_MAGIC, 8) ? CAIRN_ECORRUPT : CAIRN_ERANGE;
    if (memcmp(buf, TIER_OBJECT_MAGIC, 8) || get32(buf + 8) != TIER_OBJECT_VERSION)
        return CAIRN_ECORRUPT;
    h->version = TIER_OBJECT_VERSION;
    h->header_bytes = get32(buf + 12);
    if (h->header_bytes < TIER_OBJECT_FIXED_BYTES + TIER_OBJECT_SUM_BYTES ||
        h->header_bytes > tier_object_header_size(TIER_OBJECT_MAX_BLOCK_TOKENS, TIER_OBJECT_MAX_LAYERS))
        return CAIRN_ECORRUPT;
    if (len < h->header_bytes)
        return CAIRN_ERANGE;
    memcpy(h->fingerprint.bytes, buf + 16, 32);
    memcpy(h->hash.bytes, buf + 48, 32);
    memcpy(h->parent.bytes, buf + 80, 32);
    h->dtype = get32(buf + 112);
    h->n_tokens = get32(buf + 116);
    h->n_layers = get32(buf + 120);
    h->flags = get32(buf + 124);
    h->payload_bytes = get64(buf + 128);
    memcpy(h->payload_sum, buf + 136, TIER_OBJECT_SUM_BYTES);
    if (!cairn_dtype_block_elems((cairn_dtype_t)h->dtype) || h->flags || !h->n_tokens ||
        h->n_tokens > TIER_OBJECT_MAX_BLOCK_TOKENS || !h->n_layers || h->n_layers > TIER_OBJECT_MAX_LAYERS ||
        h->payload_bytes > TIER_OBJECT_MAX_PAYLOAD ||
        tier_object_header_size(h->n_tokens, h->n_layers) != h->header_bytes)
        return CAIRN_ECORRUPT;
    uint8_t sum[TIER_OBJECT_SUM_BYTES];
    tier_object_checksum(buf, h->header_bytes - TIER_OBJECT_SUM_BYTES, sum);
    if (memcmp(sum, buf + h->header_bytes - TIER_OBJECT_SUM_BYTES, TIER_OBJECT_SUM_BYTES))
        return CAIRN_ECORRUPT;
    h->tokens_le = buf + TIER_OBJECT_FIXED_BYTES;
    h->layers_le = h->tokens_le + 4u * (size_t)h->n_tokens;
    uint64_t total = 0;
    for (uint32_t l = 0; l < h->n_layers; l++) {
        uint64_t b = get64(h->layers_le + 8u * l);
        if (b > TIER_OBJECT_MAX_PAYLOAD)
            return CAIRN_ECORRUPT;
        total += b;
    }
    return total == h->payload_bytes ? CAIRN_OK : CAIRN_ECORRUPT;
}

uint64_t tier_object_layer_bytes(const tier_object_header_t *h, uint32_t l)
{
    return get64(h->layers_le + 8u * l);
}

int tier_object_validate(const uint8_t *buf, size_t len, const cairn_tier_hash_t *fingerprint,
                         const cairn_tier_hash_t *hash, tier_object_header_t *h)
{
    int rc = tier_object_parse_header(buf, len, h);
    if (rc)
        return CAIRN_ECORRUPT;
    if ((uint64_t)len - h->header_bytes != h->payload_bytes)
        return CAIRN_ECORRUPT;
    if (fingerprint && memcmp(fingerprint->bytes, h->fingerprint.bytes, 32))
        return CAIRN_ECORRUPT;
    if (hash && memcmp(hash->bytes, h->hash.bytes, 32))
        return CAIRN_ECORRUPT;
    uint8_t sum[TIER_OBJECT_SUM_BYTES];
    tier_object_checksum(buf + h->header_bytes, (size_t)h->payload_bytes, sum);
    return memcmp(sum, h->payload_sum, TIER_OBJECT_SUM_BYTES) ? CAIRN_ECORRUPT : CAIRN_OK;
}

/* ---- STATE objects ---- */

size_t tier_state_header_size(uint32_t layout_size)
{
    return TIER_STATE_FIXED_BYTES + (size_t)layout_size + TIER_OBJECT_SUM_BYTES;
}

int tier_state_encode_header(uint8_t *buf, size_t cap, const cairn_tier_hash_t *fingerprint,
                             const cairn_tier_object_t *st, size_t *header_bytes)
{
    if (st->key.kind != CAIRN_TIER_STATE || !st->boundary || st->layout_size > TIER_STATE_MAX_LAYOUT ||
        (st->layout_size && !st->layout) || (st->payload_size && !st->payload) ||
        (uint64_t)st->payload_size > TIER_OBJECT_MAX_PAYLOAD)
        return CAIRN_EINVAL;
    size_t hb = tier_state_header_size(st->layout_size);
    if (cap < hb)
        return CAIRN_ERANGE;
    memset(buf, 0, hb);
    memcpy(buf, TIER_STATE_MAGIC, 8);
    put32(buf + 8, TIER_STATE_VERSION);
    put32(buf + 12, (uint32_t)hb);
    memcpy(buf + 16, fingerprint->bytes, 32);
    memcpy(buf + 48, st->key.hash.bytes, 32);
    put32(buf + 80, st->key.group);
    put32(buf + 84, st->layout_size);
    put64(buf + 88, st->boundary);
    put64(buf + 96, (uint64_t)st->payload_size);
    tier_object_checksum(st->payload_size ? st->payload : "", st->payload_size, buf + 104);
    /* 120: flags, 124: reserved, both zero. */
    if (st->layout_size)
        memcpy(buf + TIER_STATE_FIXED_BYTES, st->layout, st->layout_size);
    tier_object_checksum(buf, hb - TIER_OBJECT_SUM_BYTES, buf + hb - TIER_OBJECT_SUM_BYTES);
    *header_bytes = hb;
    return CAIRN_OK;
}

int tier_state_parse_header(const uint8_t *buf, size_t len, tier_state_header_t *h)
{
    memset(h, 0, sizeof *h);
    if (len < 16)
        return len >= 8 && memcmp(buf, TIER_STATE_MAGIC, 8) ? CAIRN_ECORRUPT : CAIRN_ERANGE;
    if (memcmp(buf, TIER_STATE_MAGIC, 8) || get32(buf + 8) != TIER_STATE_VERSION)
        return CAIRN_ECORRUPT;
    h->version = TIER_STATE_VERSION;
    h->header_bytes = get32(buf + 12);
    if (h->header_bytes < tier_state_header_size(0) ||
        h->header_bytes > tier_state_header_size(TIER_STATE_MAX_LAYOUT))
        return CAIRN_ECORRUPT;
    if (len < h->header_bytes)
        return CAIRN_ERANGE;
    memcpy(h->fingerprint.bytes, buf + 16, 32);
    memcpy(h->hash.bytes, buf + 48, 32);
    h->group = get32(buf + 80);
    h->layout_size = get32(buf + 84);
    h->boundary = get64(buf + 88);
    h->payload_bytes = get64(buf + 96);
    memcpy(h->payload_sum, buf + 104, TIER_OBJECT_SUM_BYTES);
    if (get32(buf + 120) || get32(buf + 124) || !h->boundary || h->layout_size > TIER_STATE_MAX_LAYOUT ||
        h->payload_bytes > TIER_OBJECT_MAX_PAYLOAD || tier_state_header_size(h->layout_size) != h->header_bytes)
        return CAIRN_ECORRUPT;
    uint8_t sum[TIER_OBJECT_SUM_BYTES];
    tier_object_checksum(buf, h->header_bytes - TIER_OBJECT_SUM_BYTES, sum);
    if (memcmp(sum, buf + h->header_bytes - TIER_OBJECT_SUM_BYTES, TIER_OBJECT_SUM_BYTES))
        return CAIRN_ECORRUPT;
    h->layout = buf + TIER_STATE_FIXED_BYTES;
    return CAIRN_OK;
}

int tier_state_validate(const uint8_t *buf, size_t len, const cairn_tier_hash_t *fingerprint,
                        tier_state_header_t *h)
{
    if (tier_state_parse_header(buf, len, h))
        return CAIRN_ECORRUPT;
    if ((uint64_t)len - h->header_bytes != h->payload_bytes)
        return CAIRN_ECORRUPT;
    if (fingerprint && memcmp(fingerprint->bytes, h->fingerprint.bytes, 32))
        return CAIRN_ECORRUPT;
    uint8_t sum[TIER_OBJECT_SUM_BYTES];
    tier_object_checksum(buf + h->header_bytes, (size_t)h->payload_bytes, sum);
    return memcmp(sum, h->payload_sum, TIER_OBJECT_SUM_BYTES) ? CAIRN_ECORRUPT : CAIRN_OK;
}
