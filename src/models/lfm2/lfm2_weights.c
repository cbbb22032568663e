/*
 * lfm2_weights.c — binds an LFM2 checkpoint's tensors to the layers of its config.
 *
 * The tensor source is abstract (a bind callback with fmt_tensors_bind's contract), so
 * the same binding serves any loader. Every tensor the config implies must be present
 * with exactly the shape config.json gives (a wrong feed-forward width or conv length
 * shows here, naming the tensor). lfm2_weights_uses() tells the loader which names are
 * expected so it can reject tensors nobody would read (biases, another architecture).
 *
 * Thread-safety: pure apart from the allocation of the layer table.
 */
#include <stdio.h>
#include <string.h>

#include "engine/safetensors.h"
#include "models/lfm2/lfm2.h"

enum { ANY = -1 };

/* Per-layer tensors: the name after "model.layers.N." and the layer kind that has it. */
static const struct {
    const char *suffix;
    int kind; /* lfm2_layer_kind_t, or ANY */
} layer_names[] = {
    {"operator_norm.weight", ANY},
    {"ffn_norm.weight", ANY},
    {"feed_forward.w1.weight", ANY},
    {"feed_forward.w3.weight", ANY},
    {"feed_forward.w2.weight", ANY},
    {"conv.in_proj.weight", LFM2_LAYER_CONV},
    {"conv.conv.weight", LFM2_LAYER_CONV},
    {"conv.out_proj.weight", LFM2_LAYER_CONV},
    {"self_attn.q_proj.weight", LFM2_LAYER_ATTN},
    {"self_attn.k_proj.weight", LFM2_LAYER_ATTN},
    {"self_attn.v_proj.weight", LFM2_LAYER_ATTN},
    {"self_attn.out_proj.weight", LFM2_LAYER_ATTN},
    {"self_attn.q_layernorm.weight", LFM2_LAYER_ATTN},
    {"self_attn.k_layernorm.weight", LFM2_LAYER_ATTN},
};

/* The slot of layer_names[i] in a layer's weights, and the shape it must have. */
static cairn_tensor_t *layer_slot(const lfm2_config_t *cfg, lfm2_layer_weights_t *lw, int i,
                                  int *ndim, int64_t dims[3])
{
    const cairn_model_config_t *b = &cfg->base;
    const int64_t H = b->hidden, F = b->ffn, q = (int64_t)b->n_heads * b->head_dim,
                  kv = (int64_t)b->n_kv_heads * b->head_dim;
#define SHAPE(p, n, d0, d1, d2) (*ndim = (n), dims[0] = (d0), dims[1] = (d1), dims[2] = (d2), (p))
    switch (i) {
    case 0: return SHAPE(&lw->operator_norm, 1, H, 0, 0);
    case 1: return SHAPE(&lw->ffn_norm, 1, H, 0, 0);
    case 2: return SHAPE(&lw->w1, 2, F, H, 0);
    case 3: return SHAPE(&lw->w3, 2, F, H, 0);
    case 4: return SHAPE(&lw->w2, 2, H, F, 0);
    case 5: return SHAPE(&lw->in_proj, 2, 3 * H, H, 0);
    case 6: return SHAPE(&lw->conv, 3, H, 1, cfg->conv_taps);
    case 7: return SHAPE(&lw->conv_out, 2, H, H, 0);
    case 8: return SHAPE(&lw->wq, 2, q, H, 0);
    case 9: return SHAPE(&lw->wk, 2, kv, H, 0);
    case 10: return SHAPE(&lw->wv, 2, kv, H, 0);
    case 11: return SHAPE(&lw->wo, 2, H, q, 0);
    case 12: return SHAPE(&lw->q_norm, 1, b->head_dim, 0, 0);
    case 13: return SHAPE(&lw->k_norm, 1, b->head_dim, 0, 0);
    }
#undef SHAPE
    CAIRN_ASSERT(!"layer tensor index out of range");
    return NULL;
}

int lfm2_weights_bind(const lfm2_config_t *cfg, lfm2_bind_fn bind, void *ctx,
                      lfm2_weights_t *out, char *err, size_t err_len)
{
    const cairn_model_config_t *b = &cfg->base;
    int rc;
    char name[128];
    memset(out, 0, sizeof(*out));
    out->layers = cairn_calloc((size_t)b->n_layers, sizeof(*out->layers));
    if (!out->layers) {
        st_errf(err, err_len, "out of memory");
        return CAIRN_ENOMEM;
    }
    const int64_t embed[2] = {b->vocab, b->hidden}, norm[1] = {b->hidden};
    if ((rc = bind(ctx, "model.embed_tokens.weight", 2, embed, &out->embed, err, err_len)) ||
        (rc = bind(ctx, "model.embedding_norm.weight", 1, norm, &out->norm, err, err_len)))
        goto fail;
    if (!b->tie_embeddings &&
        (rc = bind(ctx, "lm_head.weight", 2, embed, &out->lm_head, err, err_len)))
        goto fail;
    for (int l = 0; l < b->n_layers; l++) {
        for (int i = 0; i < (int)CAIRN_ARRAY_LEN(layer_names); i++) {
            if (layer_names[i].kind != ANY && layer_names[i].kind != cfg->kind[l])
                continue;
            int ndim;
            int64_t dims[3];
            cairn_tensor_t *slot = layer_slot(cfg, &out->layers[l], i, &ndim, dims);
            snprintf(name, sizeof name, "model.layers.%d.%s", l, layer_names[i].suffix);
            if ((rc = bind(ctx, name, ndim, dims, slot, err, err_len)))
                goto fail;
        }
    }
    return 0;
fail:
    lfm2_weights_fini(out);
    return rc;
}

void lfm2_weights_fini(lfm2_weights_t *w)
{
    cairn_free(w->layers);
    memset(w, 0, sizeof(*w));
}

bool lfm2_weights_ignored(const lfm2_config_t *cfg, const char *name)
{
    return cfg->base.tie_embeddings && !strcmp(name, "lm_head.weight");
}

bool lfm2_weights_uses(const lfm2_config_t *cfg, const char *name)
{
    if (!strcmp(name, "model.embed_tokens.weight") || !strcmp(name, "model.embedding_norm.weight") ||
        !strcmp(name, "lm_head.weight"))
        return true; /* a tied checkpoint's lm_head copy is tolerated, as HF does */
    int l, at = 0;
    if (sscanf(name, "model.layers.%d.%n", &l, &at) != 1 || at == 0 || l < 0 ||
        l >= cfg->base.n_layers)
        return false;
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(layer_names); i++)
        if (!strcmp(name + at, layer_names[i].suffix))
            return layer_names[i].kind == ANY || layer_names[i].kind == cfg->kind[l];
    return false;
}
