/*
 * fuzz_state_object.c — libFuzzer target for the STATE object parser (docs/FORMAT.md 1.8),
 * the code every shared-tier read of a sidecar runs.
 *
 * Feeds arbitrary bytes to tier_state_parse_header and tier_state_validate. Invariants: no
 * out-of-bounds access (ASan); a parsed header's size matches its layout descriptor; and
 * whenever an input validates, it is exactly header + payload, and re-encoding its header
 * from the parsed fields reproduces the input byte for byte.
 * Seed corpus: fuzz/corpus/state_object/ (valid objects and near misses).
 */
#include <stdlib.h>
#include <string.h>

#include "tier/tier_object.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tier_state_header_t h;
    int rc = tier_state_parse_header(data, size, &h);
    if (rc == CAIRN_OK && (h.header_bytes > size || h.header_bytes != tier_state_header_size(h.layout_size)))
        abort();
    if (tier_state_validate(data, size, NULL, &h) != CAIRN_OK)
        return 0;
    if ((uint64_t)size != h.header_bytes + h.payload_bytes || !h.boundary)
        abort();
    uint8_t *hdr = malloc(h.header_bytes);
    if (!hdr)
        abort();
    cairn_tier_object_t st = {.key = {.kind = CAIRN_TIER_STATE, .group = h.group, .hash = h.hash},
                              .boundary = h.boundary, .layout = h.layout, .layout_size = h.layout_size,
                              .payload = data + h.header_bytes, .payload_size = (size_t)h.payload_bytes};
    size_t hb = 0;
    if (tier_state_encode_header(hdr, h.header_bytes, &h.fingerprint, &st, &hb) != CAIRN_OK ||
        hb != h.header_bytes || memcmp(hdr, data, hb))
        abort();
    free(hdr);
    return 0;
}
