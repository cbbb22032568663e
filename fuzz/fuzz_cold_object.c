/*
 * fuzz_cold_object.c — libFuzzer target for the cold tier object parser.
 *
 * Feeds arbitrary bytes to tier_object_parse_header and tier_object_validate (the exact
 * code every read and the open-time scan use). Invariants checked: no out-of-bounds access
 * (ASan), and whenever an input validates, its parsed sizes are self-consistent and
 * re-encoding its header from the parsed fields reproduces the input byte for byte.
 * Seed corpus: fuzz/corpus/cold_object/ (valid objects written by the store).
 */
#include <stdlib.h>
#include <string.h>

#include "tier/tier_object.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tier_object_header_t h;
    int rc = tier_object_parse_header(data, size, &h);
    if (rc == CAIRN_OK && (h.header_bytes > size || h.header_bytes != tier_object_header_size(h.n_tokens, h.n_layers)))
        abort();
    if (tier_object_validate(data, size, NULL, NULL, &h) != CAIRN_OK)
        return 0;
    if ((uint64_t)size != h.header_bytes + h.payload_bytes)
        abort();
    int32_t *tokens = malloc(h.n_tokens * sizeof *tokens);
    uint64_t *layers = malloc(h.n_layers * sizeof *layers);
    uint8_t *hdr = malloc(h.header_bytes);
    if (!tokens || !layers || !hdr)
        abort();
    for (uint32_t i = 0; i < h.n_tokens; i++) {
        const uint8_t *p = h.tokens_le + 4u * i;
        tokens[i] = (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    }
    for (uint32_t l = 0; l < h.n_layers; l++)
        layers[l] = tier_object_layer_bytes(&h, l);
    cairn_tier_object_t b = {.key = {.kind = CAIRN_TIER_BLOCK, .hash = h.hash}, .parent = h.parent, .tokens = tokens,
                             .n_tokens = h.n_tokens, .payload = data + h.header_bytes,
                             .payload_size = (size_t)h.payload_bytes};
    size_t hb = 0;
    if (tier_object_encode_header(hdr, h.header_bytes, &h.fingerprint, (cairn_dtype_t)h.dtype, h.n_layers, layers, &b,
                                  &hb) != CAIRN_OK ||
        hb != h.header_bytes || memcmp(hdr, data, hb))
        abort();
    free(tokens);
    free(layers);
    free(hdr);
    return 0;
}
