/*
 * gemma3_family.c — the gemma3 family's entry in the registry (models/family.h): its
 * model_types, config and weights lifecycle, its cache layout (sliding layers SLIDING(W),
 * full layers FULL) and its part of the cold tier's model fingerprint.
 *
 * Cold tier: the full layers' blocks are BLOCK objects and each sliding group's live
 * window at a boundary a STATE sidecar (engine/state_sidecar.h); restart parity is proven
 * by tests/engine/test_cold_restart.c on the gemma3 fixture.
 *
 * Thread-safety: the vtable is constant; the functions are pure with respect to their
 * arguments.
 */
#include <stdio.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/gemma3/gemma3.h"

static const char *const model_types[] = {"gemma3_text", "gemma3", NULL};
/* GGUF general.architecture values (gemma3_gguf.c). */
static const char *const gguf_architectures[] = {"gemma3", NULL};
static const char *const cold_model_types[] = {"gemma3_text", "gemma3", NULL};

static int parse_config(const hf_config_t *hf, cairn_model_config_t *cfg, void **priv, char *err,
                        size_t err_len)
{
    *priv = NULL;
    gemma3_t *g = cairn_calloc(1, sizeof *g);
    if (!g) {
        st_errf(err, err_len, "config.json: out of memory");
        return CAIRN_ENOMEM;
    }
    int rc = gemma3_config_from_hf(hf, cfg, &g->cfg, err, err_len);
    if (rc) {
        cairn_free(g);
        return rc;
    }
    *priv = g;
    return CAIRN_OK;
}

static int bind(void *priv, const cairn_model_config_t *cfg, fmt_tensors_t *ts, char *err,
                size_t err_len)
{
    (void)cfg;
    gemma3_t *g = priv;
    return gemma3_weights_bind(&g->w, &g->cfg, ts, err, err_len);
}

static void destroy(void *priv)
{
    gemma3_t *g = priv;
    if (!g)
        return;
    gemma3_weights_fini(&g->w);
    cairn_free(g);
}

/* Sliding layers page as SLIDING(W): the KV core releases their blocks wholly outside the
 * window (the table entries become the null block), so only the full layers grow with the
 * conversation. */
static int cache_layout(const cairn_model_t *m, cairn_dtype_t kv_dtype, cairn_layer_cache_t *layers)
{
    (void)kv_dtype;
    const gemma3_config_t *c = &((const gemma3_t *)m->priv)->cfg;
    for (int l = 0; l < c->n_layers; l++) {
        const bool sliding = c->kind[l] == GEMMA3_SLIDING;
        layers[l] = (cairn_layer_cache_t){
            {sliding ? CAIRN_KV_LAYER_SLIDING : CAIRN_KV_LAYER_FULL, (uint32_t)c->n_kv_heads,
             (uint32_t)c->head_dim, sliding ? (uint32_t)c->sliding_window : 0, 0},
            0};
    }
    return CAIRN_OK;
}

/* Everything that changes the bytes of a K/V row beyond the weights digest: geometry, both
 * RoPE kinds, the layer kinds and window, the scales, caps and norm epsilon. */
static void describe(const cairn_model_t *m, cairn_tier_model_desc_t *d, char *extra, size_t extra_len)
{
    const gemma3_config_t *c = &((const gemma3_t *)m->priv)->cfg;
    d->architecture = "gemma3";
    d->n_layers = (uint32_t)c->n_layers;
    d->n_heads = (uint32_t)c->n_heads;
    d->n_kv_heads = (uint32_t)c->n_kv_heads;
    d->head_dim = (uint32_t)c->head_dim;
    d->rope_dim = (uint32_t)c->head_dim;
    d->rope_theta = c->rope[GEMMA3_FULL].theta;
    d->rope_scaling = c->rope[GEMMA3_FULL].linear_factor != 1.0f ? 2 : 0; /* 2: linear */
    d->rope_scaling_factor = c->rope[GEMMA3_FULL].linear_factor;
    /* Layer kinds as hex digits, 4 layers each (bit l % 4 set: layer l is full). */
    char kinds[GEMMA3_MAX_LAYERS / 4 + 1];
    int nd = (c->n_layers + 3) / 4;
    for (int i = 0; i < nd; i++) {
        int v = 0;
        for (int b = 0; b < 4 && 4 * i + b < c->n_layers; b++)
            v |= (c->kind[4 * i + b] == GEMMA3_FULL) << b;
        kinds[i] = "0123456789abcdef"[v];
    }
    kinds[nd] = 0;
    snprintf(extra, extra_len,
             "hidden=%d;ffn=%d;vocab=%d;rms_eps=%.9g;window=%d;rope_local=%.9g;rope_local_factor=%.9g;"
             "attn_scale=%.9g;attn_softcap=%.9g;embed_scale=%.9g;full=%s",
             c->hidden, c->ffn, c->vocab, (double)c->rms_eps, c->sliding_window,
             (double)c->rope[GEMMA3_SLIDING].theta, (double)c->rope[GEMMA3_SLIDING].linear_factor,
             (double)c->attn_scale, (double)c->attn_softcap, (double)c->embed_scale, kinds);
}

const cairn_family_t cairn_family_gemma3 = {
    .name = "gemma3",
    .model_types = model_types,
    .cold_model_types = cold_model_types,
    .parse_config = parse_config,
    .bind = bind,
    .ignore_tensor = gemma3_ignore_tensor,
    .destroy = destroy,
    .gguf_architectures = gguf_architectures,
    .parse_gguf = gemma3_parse_gguf,
    .gguf_tensor_name = gemma3_gguf_tensor_name,
    .cache_layout = cache_layout,
    .describe = describe,
    .fwd_create = gemma3_fwd_create,
    .fwd_destroy = gemma3_fwd_destroy,
    .fwd_step = gemma3_fwd_step,
};
