/*
 * gemma3_weights.c — binds a Gemma 3 text model's tensors and precomputes its norms.
 *
 * Tensors come from a caller-supplied source (gemma3_tensor_fn), so the same binding
 * serves every checkpoint reader. Projections and the embedding stay as mapped, in their
 * file dtype. Every RMSNorm weight w is turned once into float32 (1 + w), the operation
 * HF runs on every call (`1.0 + self.weight.float()`), so the forward pass multiplies by
 * the same float32 values; all of them live in one allocation owned by the weights.
 *
 * Thread-safety: immutable after bind.
 */
#include <stdio.h>
#include <string.h>

#include "engine/safetensors.h"
#include "models/gemma3/gemma3.h"

/* The name prefixes of the text model, most common first. */
static const char *const prefixes[] = {"model.", "model.language_model.", "language_model.model."};

/* Binds a norm weight [n] and writes 1 + w (float32) into dst. */
static int bind_norm(gemma3_tensor_fn get, void *ctx, const char *name, int n, float *dst,
                     char *err, size_t err_len)
{
    cairn_tensor_t t;
    int64_t dims[1] = {n};
    int rc = get(ctx, name, 1, dims, &t, err, err_len);
    if (rc)
        return rc;
    kern_row_to_f32(dst, t.data, t.dtype, n);
    for (int i = 0; i < n; i++)
        dst[i] = 1.0f + dst[i];
    return 0;
}

int gemma3_weights_bind(gemma3_weights_t *w, const gemma3_config_t *c, gemma3_tensor_fn get,
                        gemma3_has_tensor_fn has, void *ctx, char *err, size_t err_len)
{
    memset(w, 0, sizeof *w);
    const char *pre = NULL;
    char name[192];
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(prefixes) && !pre; i++) {
        snprintf(name, sizeof name, "%sembed_tokens.weight", prefixes[i]);
        if (has(ctx, name))
            pre = prefixes[i];
    }
    if (!pre) {
        st_errf(err, err_len, "checkpoint lacks tensor 'model.embed_tokens.weight'");
        return CAIRN_ENOENT;
    }

    const int H = c->hidden, hd = c->head_dim;
    const size_t per_layer = 4 * (size_t)H + 2 * (size_t)hd;
    w->layers = cairn_calloc((size_t)c->n_layers, sizeof *w->layers);
    w->norms = cairn_malloc((per_layer * (size_t)c->n_layers + (size_t)H) * sizeof(float));
    if (!w->layers || !w->norms) {
        gemma3_weights_fini(w);
        st_errf(err, err_len, "out of memory");
        return CAIRN_ENOMEM;
    }
    int rc;
    int64_t vh[2] = {c->vocab, H};
    int64_t q[2] = {(int64_t)c->n_heads * hd, H}, kv[2] = {(int64_t)c->n_kv_heads * hd, H};
    int64_t o[2] = {H, (int64_t)c->n_heads * hd}, up[2] = {c->ffn, H}, down[2] = {H, c->ffn};

    snprintf(name, sizeof name, "%sembed_tokens.weight", pre);
    if ((rc = get(ctx, name, 2, vh, &w->embed, err, err_len)))
        goto fail;
    if (c->tie_embeddings)
        w->lm_head = w->embed;
    else if ((rc = get(ctx, "lm_head.weight", 2, vh, &w->lm_head, err, err_len)))
        goto fail;
    float *nb = w->norms;
    snprintf(name, sizeof name, "%snorm.weight", pre);
    if ((rc = bind_norm(get, ctx, name, H, nb, err, err_len)))
        goto fail;
    w->norm = nb;
    nb += H;

    for (int l = 0; l < c->n_layers; l++) {
        gemma3_layer_t *L = &w->layers[l];
        struct {
            const char *suffix;
            const int64_t *dims;
            cairn_tensor_t *dst;
        } mats[] = {
            {"self_attn.q_proj.weight", q, &L->wq},   {"self_attn.k_proj.weight", kv, &L->wk},
            {"self_attn.v_proj.weight", kv, &L->wv},  {"self_attn.o_proj.weight", o, &L->wo},
            {"mlp.gate_proj.weight", up, &L->w_gate}, {"mlp.up_proj.weight", up, &L->w_up},
            {"mlp.down_proj.weight", down, &L->w_down},
        };
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(mats); i++) {
            snprintf(name, sizeof name, "%slayers.%d.%s", pre, l, mats[i].suffix);
            if ((rc = get(ctx, name, 2, mats[i].dims, mats[i].dst, err, err_len)))
                goto fail;
        }
        struct {
            const char *suffix;
            int n;
            const float **dst;
        } norms[] = {
            {"input_layernorm.weight", H, &L->attn_norm},
            {"post_attention_layernorm.weight", H, &L->post_attn_norm},
            {"pre_feedforward_layernorm.weight", H, &L->pre_ffn_norm},
            {"post_feedforward_layernorm.weight", H, &L->post_ffn_norm},
            {"self_attn.q_norm.weight", hd, &L->q_norm},
            {"self_attn.k_norm.weight", hd, &L->k_norm},
        };
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(norms); i++) {
            snprintf(name, sizeof name, "%slayers.%d.%s", pre, l, norms[i].suffix);
            if ((rc = bind_norm(get, ctx, name, norms[i].n, nb, err, err_len)))
                goto fail;
            *norms[i].dst = nb;
            nb += norms[i].n;
        }
    }
    return 0;
fail:
    gemma3_weights_fini(w);
    return rc;
}

void gemma3_weights_fini(gemma3_weights_t *w)
{
    cairn_free(w->layers);
    cairn_free(w->norms);
    memset(w, 0, sizeof *w);
}
