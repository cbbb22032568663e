/*
 * qwen35_family.c — the Qwen3.5 family's entry in the registry: its model_types, its cache
 * layout (linear-attention layers RECURRENT with their conv + delta-rule state, the gated
 * attention layers FULL) and its part of the cold tier's model fingerprint.
 *
 * Cold tier: the gated attention layers' blocks are BLOCK objects and the conv +
 * delta-rule state at a boundary a STATE sidecar (engine/state_sidecar.h); restart parity
 * is proven by tests/engine/test_cold_restart.c on the qwen3_5 fixture.
 *
 * Thread-safety: the vtable is constant; the functions are pure.
 */
#include <stdio.h>
#include <string.h>

#include "models/qwen35/qwen35.h"

static const char *const model_types[] = {"qwen3_5_text", "qwen3_5", NULL};
/* GGUF general.architecture values (qwen35_gguf.c): llama.cpp's LLM_ARCH_QWEN35. */
static const char *const gguf_architectures[] = {"qwen35", NULL};
static const char *const cold_model_types[] = {"qwen3_5_text", "qwen3_5", NULL};

static int cache_layout(const cairn_model_t *m, cairn_dtype_t kv_dtype,
                        cairn_layer_cache_t *layers)
{
    (void)kv_dtype; /* the recurrent state is float32 whatever the K/V dtype */
    const q35_config_t *c = q35_model_config(m);
    for (int l = 0; l < c->base.n_layers; l++) {
        if (c->kind[l] == Q35_LAYER_LINEAR)
            layers[l] = (cairn_layer_cache_t){{CAIRN_KV_LAYER_RECURRENT, 0, 0, 0, 0},
                                              q35_layer_state_bytes(c)};
        else
            layers[l] = (cairn_layer_cache_t){
                {CAIRN_KV_LAYER_FULL, (uint32_t)c->base.n_kv_heads, (uint32_t)c->base.head_dim, 0, 0},
                0};
    }
    return 0;
}

/* Everything that changes a K/V row or a recurrent state beyond the geometry: widths, the
 * norm epsilon, the GDN sizes and the layer pattern. The weights digest (added by the
 * caller) covers every tensor's name, shape and dtype. */
static void describe(const cairn_model_t *m, cairn_tier_model_desc_t *d, char *extra,
                     size_t extra_len)
{
    const q35_config_t *c = q35_model_config(m);
    const cairn_model_config_t *b = &m->cfg;
    d->architecture = b->model_type;
    d->n_layers = (uint32_t)b->n_layers;
    d->n_heads = (uint32_t)b->n_heads;
    d->n_kv_heads = (uint32_t)b->n_kv_heads;
    d->head_dim = (uint32_t)b->head_dim;
    d->rope_dim = (uint32_t)c->rope_dim;
    d->rope_theta = b->rope_theta;
    d->rope_scaling = (uint32_t)b->rope_type;
    char pattern[Q35_MAX_LAYERS + 1];
    for (int l = 0; l < b->n_layers; l++)
        pattern[l] = c->kind[l] == Q35_LAYER_LINEAR ? 'L' : 'F';
    pattern[b->n_layers] = 0;
    snprintf(extra, extra_len,
             "hidden=%d;ffn=%d;vocab=%d;rms_eps=%.9g;lin=%dx%d/%dx%d;conv=%d;layers=%s",
             b->hidden, b->ffn, b->vocab, (double)b->rms_eps, c->lin_k_heads, c->lin_k_dim,
             c->lin_v_heads, c->lin_v_dim, c->conv_kernel, pattern);
}

const cairn_family_t cairn_family_qwen35 = {
    .name = "qwen35",
    .model_types = model_types,
    .cold_model_types = cold_model_types,
    .parse_config = q35_parse_config,
    .bind = q35_bind,
    .ignore_tensor = q35_ignore_tensor,
    .destroy = q35_destroy,
    .gguf_architectures = gguf_architectures,
    .parse_gguf = q35_parse_gguf,
    .gguf_tensor_name = q35_gguf_tensor_name,
    .cache_layout = cache_layout,
    .describe = describe,
    .fwd_create = q35_fwd_create,
    .fwd_destroy = q35_fwd_destroy,
    .fwd_step = q35_fwd_step,
};
