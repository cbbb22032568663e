/*
 * llama_family.c — the llama family's entry in the registry: its model_types, its cache
 * layout (every layer FULL) and its part of the cold tier's model fingerprint.
 *
 * Thread-safety: the vtable is constant; the functions are pure.
 */
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "models/llama/llama.h"

static const char *const model_types[] = {"llama", "mistral", "qwen3", NULL};
/* GGUF general.architecture values (llama_gguf.c). */
static const char *const gguf_architectures[] = {"llama", "qwen3", NULL};
/* Restart parity proven by tests/engine/test_cold_restart.c (fixtures llama and qwen3). */
static const char *const cold_model_types[] = {"llama", "qwen3", NULL};

static int cache_layout(const cairn_model_t *m, cairn_dtype_t kv_dtype,
                        cairn_layer_cache_t *layers)
{
    const cairn_model_config_t *cfg = &m->cfg;
    for (int l = 0; l < cfg->n_layers; l++)
        layers[l] = (cairn_layer_cache_t){
            {CAIRN_KV_LAYER_FULL, (uint32_t)cfg->n_kv_heads, (uint32_t)cfg->head_dim, 0, 0}, 0};
    return 0;
}

/* Everything that changes the bytes of a K/V row: the geometry the store checks anyway,
 * rope, and through `extra` the config values that shape the layers below (widths, norm
 * epsilon). The weights digest (added by the caller) covers every tensor's name, shape
 * and dtype. */
static void describe(const cairn_model_t *m, cairn_tier_model_desc_t *d, char *extra,
                     size_t extra_len)
{
    const cairn_model_config_t *cfg = &m->cfg;
    d->architecture = cfg->model_type;
    d->n_layers = (uint32_t)cfg->n_layers;
    d->n_heads = (uint32_t)cfg->n_heads;
    d->n_kv_heads = (uint32_t)cfg->n_kv_heads;
    d->head_dim = (uint32_t)cfg->head_dim;
    d->rope_dim = (uint32_t)cfg->head_dim;
    d->rope_theta = cfg->rope_theta;
    d->rope_scaling = (uint32_t)cfg->rope_type;
    if (cfg->rope_type == CAIRN_ROPE_LLAMA3) {
        d->rope_scaling_factor = cfg->rope_factor;
        d->rope_original_ctx = (uint32_t)cfg->rope_orig_max_pos;
    }
    int n = snprintf(extra, extra_len,
                     "hidden=%d;ffn=%d;vocab=%d;rms_eps=%.9g;rope_low=%.9g;rope_high=%.9g",
                     cfg->hidden, cfg->ffn, cfg->vocab, (double)cfg->rms_eps,
                     cfg->rope_type == CAIRN_ROPE_LLAMA3 ? (double)cfg->rope_low_freq_factor : 0.0,
                     cfg->rope_type == CAIRN_ROPE_LLAMA3 ? (double)cfg->rope_high_freq_factor : 0.0);
    /* A GGUF file's RoPE divisors change every K row. */
    const cairn_tensor_t *ff = &((const llama_t *)m->priv)->w.rope_freqs;
    if (ff->data && n >= 0 && (size_t)n < extra_len)
        snprintf(extra + n, extra_len - (size_t)n, ";rope_freqs=%016llx",
                 (unsigned long long)XXH3_64bits(ff->data, (size_t)cfg->head_dim / 2 * sizeof(float)));
}

const cairn_family_t cairn_family_llama = {
    .name = "llama",
    .model_types = model_types,
    .cold_model_types = cold_model_types,
    .parse_config = llama_parse_config,
    .bind = llama_bind,
    .ignore_tensor = llama_ignore_tensor,
    .destroy = llama_destroy,
    .gguf_architectures = gguf_architectures,
    .parse_gguf = llama_parse_gguf,
    .gguf_tensor_name = llama_gguf_tensor_name,
    .cache_layout = cache_layout,
    .describe = describe,
    .fwd_create = llama_fwd_create,
    .fwd_destroy = llama_fwd_destroy,
    .fwd_step = llama_fwd_step,
};
