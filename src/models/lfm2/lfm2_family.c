/*
 * lfm2_family.c — the LFM2 family's entry in the registry: its model_type, its cache
 * layout (attention layers FULL, conv layers RECURRENT with their conv state) and its
 * part of the cold tier's model fingerprint.
 *
 * Cold tier: the attention layers' blocks are BLOCK objects and the conv state at a
 * boundary a STATE sidecar (engine/state_sidecar.h); restart parity is proven by
 * tests/engine/test_cold_restart.c on the lfm2 fixture.
 *
 * Thread-safety: the vtable is constant; the functions are pure.
 */
#include <stdio.h>
#include <string.h>

#include "models/lfm2/lfm2.h"

static const char *const model_types[] = {"lfm2", NULL};
/* GGUF general.architecture values (lfm2_gguf.c). */
static const char *const gguf_architectures[] = {"lfm2", NULL};
static const char *const cold_model_types[] = {"lfm2", NULL};

const lfm2_t *lfm2_of(const cairn_model_t *m)
{
    return m && m->family == &cairn_family_lfm2 ? m->priv : NULL;
}

static int cache_layout(const cairn_model_t *m, cairn_dtype_t kv_dtype,
                        cairn_layer_cache_t *layers)
{
    (void)kv_dtype; /* the conv state is float32 whatever the K/V type */
    const lfm2_config_t *c = &lfm2_of(m)->cfg;
    for (int l = 0; l < c->base.n_layers; l++) {
        if (c->kind[l] == LFM2_LAYER_ATTN)
            layers[l] = (cairn_layer_cache_t){{CAIRN_KV_LAYER_FULL, (uint32_t)c->base.n_kv_heads,
                                               (uint32_t)c->base.head_dim, 0, 0}, 0};
        else
            layers[l] = (cairn_layer_cache_t){{CAIRN_KV_LAYER_RECURRENT, 0, 0, 0, 0},
                                              c->state_layer_bytes};
    }
    return 0;
}

/* Everything that changes a K/V row or the conv state: geometry, rope, and through
 * `extra` the widths, epsilon, conv taps and which layers attend. */
static void describe(const cairn_model_t *m, cairn_tier_model_desc_t *d, char *extra,
                     size_t extra_len)
{
    const lfm2_config_t *c = &lfm2_of(m)->cfg;
    const cairn_model_config_t *b = &c->base;
    d->architecture = "lfm2";
    d->n_layers = (uint32_t)c->n_attn;
    d->n_heads = (uint32_t)b->n_heads;
    d->n_kv_heads = (uint32_t)b->n_kv_heads;
    d->head_dim = (uint32_t)b->head_dim;
    d->rope_dim = (uint32_t)b->head_dim;
    d->rope_theta = b->rope_theta;
    d->rope_scaling = (uint32_t)b->rope_type;
    if (b->rope_type == CAIRN_ROPE_LLAMA3) {
        d->rope_scaling_factor = b->rope_factor;
        d->rope_original_ctx = (uint32_t)b->rope_orig_max_pos;
    }
    char kinds[LFM2_MAX_LAYERS + 1];
    for (int l = 0; l < b->n_layers; l++)
        kinds[l] = c->kind[l] == LFM2_LAYER_ATTN ? 'a' : 'c';
    kinds[b->n_layers] = 0;
    snprintf(extra, extra_len, "hidden=%d;ffn=%d;vocab=%d;norm_eps=%.9g;conv_taps=%d;layers=%s",
             b->hidden, b->ffn, b->vocab, (double)b->rms_eps, c->conv_taps, kinds);
}

const cairn_family_t cairn_family_lfm2 = {
    .name = "lfm2",
    .model_types = model_types,
    .cold_model_types = cold_model_types,
    .parse_config = lfm2_parse_config,
    .bind = lfm2_bind,
    .ignore_tensor = lfm2_ignore_tensor,
    .destroy = lfm2_destroy,
    .gguf_architectures = gguf_architectures,
    .parse_gguf = lfm2_parse_gguf,
    .gguf_tensor_name = lfm2_gguf_tensor_name,
    .cache_layout = cache_layout,
    .describe = describe,
    .fwd_create = lfm2_fwd_create,
    .fwd_destroy = lfm2_fwd_destroy,
    .fwd_step = lfm2_fwd_step,
};
