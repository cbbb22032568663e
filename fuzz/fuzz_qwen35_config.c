/*
 * fuzz_qwen35_config.c — libFuzzer target for Qwen3.5 config.json (src/models/qwen35/
 * qwen35_config.c) through the family dispatch the loader uses (cairn_model_parse_config).
 *
 * An accepted qwen3_5 / qwen3_5_text config must hold what the forward pass and the state
 * handle rely on: sizes in range, attention and value heads dividing, every layer a known
 * kind with its slot, an even rotary width within head_dim, a positive conv kernel, a
 * positive finite norm epsilon and RoPE base in float32 (what the forward pass computes
 * with), a known tensor prefix, eos ids inside the vocab; and its cache layout must be
 * accepted with a state of the size the layout formula gives.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "models/qwen35/qwen35.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cairn_model_t m;
    char err[256];
    if (cairn_model_parse_config((const char *)data, size, &m, err, sizeof err) != 0)
        return 0;
    if (strcmp(m.cfg.family, "qwen35") != 0) {
        cairn_model_fini(&m);
        return 0;
    }
    const q35_config_t *c = q35_model_config(&m);
    if (!c)
        abort();
    const cairn_model_config_t *b = &c->base;
    if (b->n_layers < 1 || b->n_layers > Q35_MAX_LAYERS || b->hidden < 1 || b->ffn < 1 ||
        b->vocab < 1 || b->n_heads < 1 || b->n_kv_heads < 1 || b->n_heads % b->n_kv_heads ||
        b->head_dim < 2 || c->rope_dim < 2 || c->rope_dim % 2 || c->rope_dim > b->head_dim ||
        c->lin_k_heads < 1 || c->lin_v_heads % c->lin_k_heads || c->lin_k_dim < 1 ||
        c->lin_v_dim < 1 || c->conv_kernel < 1 || !(b->rms_eps > 0) || !isfinite(b->rms_eps) ||
        !(b->rope_theta > 0) || !isfinite(b->rope_theta) || c->n_linear + c->n_full != b->n_layers ||
        (strcmp(c->prefix, "model.") && strcmp(c->prefix, "model.language_model.")) ||
        b->bos_id < -1 || b->bos_id >= b->vocab)
        abort();
    int lin = 0, full = 0;
    for (int l = 0; l < b->n_layers; l++) {
        if (c->kind[l] == Q35_LAYER_LINEAR) {
            if (c->slot[l] != lin++)
                abort();
        } else if (c->kind[l] == Q35_LAYER_FULL) {
            if (c->slot[l] != full++)
                abort();
        } else {
            abort();
        }
    }
    for (int i = 0; i < m.cfg.n_eos; i++)
        if (m.cfg.eos_ids[i] < 0 || m.cfg.eos_ids[i] >= b->vocab)
            abort();
    cairn_layer_cache_t *layers = calloc((size_t)b->n_layers, sizeof *layers);
    size_t state = 0;
    if (layers) {
        if (cairn_model_cache_layout(&m, CAIRN_DTYPE_BF16, layers, &state) != 0)
            abort();
        if (c->n_linear > 0 && state < (size_t)c->n_linear * q35_layer_state_bytes(c))
            abort();
    }
    free(layers);
    cairn_model_fini(&m);
    return 0;
}
