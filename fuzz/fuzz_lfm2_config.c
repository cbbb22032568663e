/*
 * fuzz_lfm2_config.c — libFuzzer target for the LFM2 family's config.json parser
 * (src/models/lfm2/lfm2_config.c).
 *
 * An accepted config must be internally consistent in everything the forward pass and
 * the state handle rely on: layer kinds and their slots, a positive feed-forward width,
 * conv taps in range, and a state layout whose parts are 64-byte aligned, in layer order,
 * and inside state_bytes.
 */
#include <stdint.h>
#include <stdlib.h>

#include "models/lfm2/lfm2.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static lfm2_config_t c;
    char err[256];
    if (lfm2_config_parse_text((const char *)data, size, &c, err, sizeof err) != 0)
        return 0;
    const cairn_model_config_t *b = &c.base;
    if (b->n_layers < 1 || b->n_layers > LFM2_MAX_LAYERS || b->hidden < 1 || b->ffn < 1 ||
        b->n_heads < 1 || b->n_kv_heads < 1 || b->n_heads % b->n_kv_heads || b->head_dim < 2 ||
        b->head_dim % 2 || c.conv_taps < 1 || c.conv_taps > LFM2_MAX_CONV_TAPS ||
        c.n_attn + c.n_conv != b->n_layers || !(b->rope_theta > 0) || !(b->rms_eps > 0) ||
        b->bos_id < -1 || b->bos_id >= b->vocab)
        abort();
    int attn = 0, conv = 0;
    size_t end = 0;
    for (int l = 0; l < b->n_layers; l++) {
        if (c.kind[l] == LFM2_LAYER_ATTN) {
            if (c.slot[l] != attn++)
                abort();
        } else if (c.kind[l] == LFM2_LAYER_CONV) {
            if (c.slot[l] != conv++)
                abort();
            if (c.state_layer_bytes && (c.state_off[l] % 64 || c.state_off[l] < end))
                abort();
            end = c.state_off[l] + c.state_layer_bytes;
        } else {
            abort();
        }
    }
    if (end > c.state_bytes || c.state_layer_bytes != (size_t)(c.conv_taps - 1) * b->hidden * 4)
        abort();
    for (int i = 0; i < b->n_eos; i++)
        if (b->eos_ids[i] < 0 || b->eos_ids[i] >= b->vocab)
            abort();
    return 0;
}
