/*
 * lfm2_weights.c — binds an LFM2 checkpoint's tensors to the layers of its config.
 *
 * Every tensor the config implies must be present with exactly the shape config.json
 * gives (a wrong feed-forward width or conv length shows here, naming the tensor); the
 * loader then rejects any tensor left unbound (biases, another architecture's) unless
 * lfm2_weights_ignored() accepts it.
 *
 * Thread-safety: pure apart from the allocation of the layer table.
 */
#include <stdio.h>
#include <string.h>

#include "formats/safetensors.h"
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
    case 6: return cfg->conv_squeezed ? SHAPE(&lw->conv, 2, H, cfg->conv_taps, 0)
                                       : SHAPE(&lw->conv, 3, H, 1, cfg->conv_taps);
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

int lfm2_weights_bind(const lfm2_config_t *cfg, fmt_tensors_t *ts, lfm2_weights_t *out,
                      char *err, size_t err_len)
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
    if ((rc = fmt_tensors_bind(ts, "model.embed_tokens.weight", 2, embed, &out->embed, err, err_len)) ||
        (rc = fmt_tensors_bind(ts, "model.embedding_norm.weight", 1, norm, &out->norm, err, err_len)))
        goto fail;
    if (!b->tie_embeddings &&
        (rc = fmt_tensors_bind(ts, "lm_head.weight", 2, embed, &out->lm_head, err, err_len)))
        goto fail;
    for (int l = 0; l < b->n_layers; l++) {
        for (int i = 0; i < (int)CAIRN_ARRAY_LEN(layer_names); i++) {
            if (layer_names[i].kind != ANY && layer_names[i].kind != cfg->kind[l])
                continue;
            int ndim;
            int64_t dims[3];
            cairn_tensor_t *slot = layer_slot(cfg, &out->layers[l], i, &ndim, dims);
            snprintf(name, sizeof name, "model.layers.%d.%s", l, layer_names[i].suffix);
            if ((rc = fmt_tensors_bind(ts, name, ndim, dims, slot, err, err_len)))
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

/* ---- the family's bind / ignore_tensor / destroy ---- */

int lfm2_bind(void *priv, const cairn_model_config_t *cfg, fmt_tensors_t *ts, char *err,
              size_t err_len)
{
    lfm2_t *p = priv;
    p->cfg.base = *cfg; /* generation_config.json's eos ids were merged after parse_config */
    return lfm2_weights_bind(&p->cfg, ts, &p->w, err, err_len);
}

bool lfm2_ignore_tensor(const void *priv, const cairn_model_config_t *cfg, const char *name)
{
    (void)cfg;
    return lfm2_weights_ignored(&((const lfm2_t *)priv)->cfg, name);
}

void lfm2_destroy(void *priv)
{
    lfm2_t *p = priv;
    if (!p)
        return;
    lfm2_weights_fini(&p->w);
    cairn_free(p);
}
