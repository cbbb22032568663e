/*
 * fuzz_gemma3_config.c — libFuzzer target for Gemma 3 config.json (src/models/gemma3/
 * gemma3_config.c) through the family dispatch the loader uses (cairn_model_parse_config).
 *
 * An accepted gemma3 / gemma3_text config must hold what the forward pass and the cache
 * layout rely on: sizes in range, heads dividing, an even head_dim, every layer a known
 * kind, a positive window, positive finite RoPE bases and factors, a positive score and
 * embedding scale, non-negative soft caps; and its cache layout must be accepted.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "models/gemma3/gemma3.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cairn_model_t m;
    char err[256];
    if (cairn_model_parse_config((const char *)data, size, &m, err, sizeof err) != 0)
        return 0;
    if (strcmp(m.cfg.family, "gemma3") != 0) {
        cairn_model_fini(&m);
        return 0;
    }
    const gemma3_config_t *c = &((const gemma3_t *)m.priv)->cfg;
    if (c->n_layers < 1 || c->n_layers > GEMMA3_MAX_LAYERS || c->hidden < 1 || c->n_heads < 1 ||
        c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads != 0 || c->head_dim < 2 ||
        c->head_dim % 2 != 0 || c->ffn < 1 || c->vocab < 1 || c->sliding_window < 1 ||
        !(c->rms_eps > 0) || !(c->attn_scale > 0) || !isfinite(c->attn_scale) ||
        !(c->embed_scale > 0) || !(c->attn_softcap >= 0) || !(c->final_softcap >= 0))
        abort();
    for (int k = 0; k < 2; k++)
        if (!(c->rope[k].theta > 0) || !isfinite(c->rope[k].theta) || !(c->rope[k].linear_factor > 0))
            abort();
    for (int l = 0; l < c->n_layers; l++)
        if (c->kind[l] != GEMMA3_SLIDING && c->kind[l] != GEMMA3_FULL)
            abort();
    cairn_layer_cache_t *layers = calloc((size_t)c->n_layers, sizeof *layers);
    if (layers && cairn_model_cache_layout(&m, CAIRN_DTYPE_BF16, layers, NULL) != 0)
        abort();
    free(layers);
    cairn_model_fini(&m);
    return 0;
}
