/*
 * gemma3_weights.c — binds a Gemma 3 text model's tensors from the checkpoint's tensor
 * table (formats/weights_folder.h), under whichever name prefix the checkpoint uses.
 *
 * Every tensor stays as mapped, in its file dtype; the forward pass hands them to the
 * compute backend (norm weights with unit_offset: the backend computes 1 + w in float32).
 *
 * Thread-safety: immutable after bind.
 */
#include <stdio.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/gemma3/gemma3.h"

/* The name prefixes of the text model, most common first. */
static const char *const prefixes[] = {"model.", "model.language_model.", "language_model.model."};

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
    w->layers = cairn_calloc((size_t)c->n_layers, sizeof *w->layers);
    if (!w->layers) {
        st_errf(err, err_len, "out of memory");
        return CAIRN_ENOMEM;
    }
    int rc;
    const int64_t H = c->hidden, hd = c->head_dim;
    int64_t vh[2] = {c->vocab, H}, h[1] = {H}, d[1] = {hd};
    int64_t q[2] = {c->n_heads * hd, H}, kv[2] = {c->n_kv_heads * hd, H};
    int64_t o[2] = {H, c->n_heads * hd}, up[2] = {c->ffn, H}, down[2] = {H, c->ffn};

    snprintf(name, sizeof name, "%sembed_tokens.weight", pre);
    if ((rc = fmt_tensors_bind(ts, name, 2, vh, &w->embed, err, err_len)))
        goto fail;
    snprintf(name, sizeof name, "%snorm.weight", pre);
    if ((rc = fmt_tensors_bind(ts, name, 1, h, &w->norm, err, err_len)))
        goto fail;
    if (c->tie_embeddings)
        w->lm_head = w->embed;
    else if ((rc = fmt_tensors_bind(ts, "lm_head.weight", 2, vh, &w->lm_head, err, err_len)))
        goto fail;

    for (int l = 0; l < c->n_layers; l++) {
        gemma3_layer_t *L = &w->layers[l];
        const struct {
            const char *suffix;
            int ndim;
            const int64_t *dims;
            cairn_tensor_t *dst;
        } want[] = {
            {"input_layernorm.weight", 1, h, &L->attn_norm},
            {"self_attn.q_proj.weight", 2, q, &L->wq},
            {"self_attn.k_proj.weight", 2, kv, &L->wk},
            {"self_attn.v_proj.weight", 2, kv, &L->wv},
            {"self_attn.q_norm.weight", 1, d, &L->q_norm},
            {"self_attn.k_norm.weight", 1, d, &L->k_norm},
            {"self_attn.o_proj.weight", 2, o, &L->wo},
            {"post_attention_layernorm.weight", 1, h, &L->post_attn_norm},
            {"pre_feedforward_layernorm.weight", 1, h, &L->pre_ffn_norm},
            {"mlp.gate_proj.weight", 2, up, &L->w_gate},
            {"mlp.up_proj.weight", 2, up, &L->w_up},
            {"mlp.down_proj.weight", 2, down, &L->w_down},
            {"post_feedforward_layernorm.weight", 1, h, &L->post_ffn_norm},
        };
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(want); i++) {
            snprintf(name, sizeof name, "%slayers.%d.%s", pre, l, want[i].suffix);
            if ((rc = fmt_tensors_bind(ts, name, want[i].ndim, want[i].dims, want[i].dst, err,
                                       err_len)))
                goto fail;
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
    memset(w, 0, sizeof *w);
}
