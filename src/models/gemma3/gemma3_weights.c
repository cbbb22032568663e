/*
 * gemma3_weights.c — binds a Gemma 3 text model's tensors and precomputes its norms.
 *
 * Tensors come from the checkpoint's tensor table (formats/weights_folder.h). Projections and the embedding stay as mapped, in their
 * file dtype. Every RMSNorm weight w is turned once into float32 (1 + w), the operation
 * HF runs on every call (`1.0 + self.weight.float()`), so the forward pass multiplies by
 * the same float32 values; all of them live in one allocation owned by the weights.
 *
 * Thread-safety: immutable after bind.
 */
#include <stdio.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/gemma3/gemma3.h"

/* The name prefixes of the text model, most common first. */
static const char *const prefixes[] = {"model.", "model.language_model.", "language_model.model."};

/* Binds a norm weight [n] and writes 1 + w (float32) into dst. */
static int bind_norm(fmt_tensors_t *ts, const char *name, int n, float *dst, char *err,
                     size_t err_len)
{
    cairn_tensor_t t;
    int64_t dims[1] = {n};
    int rc = fmt_tensors_bind(ts, name, 1, dims, &t, err, err_len);
    if (rc)
        return rc;
    kern_row_to_f32(dst, t.data, t.dtype, n);
    for (int i = 0; i < n; i++)
        dst[i] = 1.0f + dst[i];
    return 0;
}

int gemma3_weights_bind(gemma3_weights_t *w, const gemma3_config_t *c, fmt_tensors_t *ts,
                        char *err, size_t err_len)
{
    memset(w, 0, sizeof *w);
    const char *pre = NULL;
    char name[192];
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(prefixes) && !pre; i++) {
        snprintf(name, sizeof name, "%sembed_tokens.weight", prefixes[i]);
        if (fmt_tensors_has(ts, name))
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
    if ((rc = fmt_tensors_bind(ts, name, 2, vh, &w->embed, err, err_len)))
        goto fail;
    if (c->tie_embeddings)
        w->lm_head = w->embed;
    else if ((rc = fmt_tensors_bind(ts, "lm_head.weight", 2, vh, &w->lm_head, err, err_len)))
        goto fail;
    float *nb = w->norms;
    snprintf(name, sizeof name, "%snorm.weight", pre);
    if ((rc = bind_norm(ts, name, H, nb, err, err_len)))
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
            if ((rc = fmt_tensors_bind(ts, name, 2, mats[i].dims, mats[i].dst, err, err_len)))
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
            if ((rc = bind_norm(ts, name, norms[i].n, nb, err, err_len)))
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

bool gemma3_ignore_tensor(const void *priv, const cairn_model_config_t *cfg, const char *name)
{
    (void)priv;
    static const char *const vision[] = {"vision_tower.", "multi_modal_projector.",
                                         "model.vision_tower.", "model.multi_modal_projector."};
    static const char inv_freq[] = "rotary_emb.inv_freq";
    const size_t n = strlen(name), k = sizeof inv_freq - 1;
    if (!strcmp(cfg->model_type, "gemma3"))
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(vision); i++)
            if (!strncmp(name, vision[i], strlen(vision[i])))
                return true;
    return (cfg->tie_embeddings && !strcmp(name, "lm_head.weight")) ||
           (n >= k && !strcmp(name + n - k, inv_freq));
}

void gemma3_weights_fini(gemma3_weights_t *w)
{
    cairn_free(w->layers);
    cairn_free(w->norms);
    memset(w, 0, sizeof *w);
}
