/*
 * llama_weights.c — binds the llama family's tensors (HF names, [out, in] shapes) from a
 * checkpoint's weights, and frees the family's state.
 *
 * Every tensor the config implies must be present with exactly that shape; the q/k norm
 * weights exist only for qwen3, rope_freqs only in a GGUF "llama" file that has it. lm_head.weight is bound unless tie_word_embeddings, and
 * then ignored if present, as are rotary inv_freq buffers (transformers ignores both).
 *
 * Thread-safety: called once at open; the result is immutable.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/llama/llama.h"

int llama_bind(void *priv, const cairn_model_config_t *c, fmt_tensors_t *ts, char *err,
               size_t err_len)
{
    llama_t *m = priv;
    llama_weights_t *w = &m->w;
    int rc;
    int64_t vh[2] = {c->vocab, c->hidden}, h[1] = {c->hidden}, hd[1] = {c->head_dim};
    int64_t q[2] = {(int64_t)c->n_heads * c->head_dim, c->hidden};
    int64_t kv[2] = {(int64_t)c->n_kv_heads * c->head_dim, c->hidden};
    int64_t o[2] = {c->hidden, (int64_t)c->n_heads * c->head_dim};
    int64_t up[2] = {c->ffn, c->hidden}, down[2] = {c->hidden, c->ffn};

    if ((rc = fmt_tensors_bind(ts, "model.embed_tokens.weight", 2, vh, &w->embed, err,
                               err_len)) ||
        (rc = fmt_tensors_bind(ts, "model.norm.weight", 1, h, &w->norm, err, err_len)))
        return rc;
    if (c->tie_embeddings) {
        w->lm_head = w->embed;
    } else if ((rc = fmt_tensors_bind(ts, "lm_head.weight", 2, vh, &w->lm_head, err, err_len))) {
        return rc;
    }
    if (m->gguf_rope_freqs) {
        int64_t half[1] = {c->head_dim / 2};
        if ((rc = fmt_tensors_bind(ts, LLAMA_ROPE_FREQS, 1, half, &w->rope_freqs, err, err_len)))
            return rc;
        if (w->rope_freqs.dtype != CAIRN_DTYPE_F32) {
            st_errf(err, err_len, "%s: tensor '%s' must be f32", fmt_tensors_dir(ts),
                    LLAMA_ROPE_FREQS);
            return CAIRN_EUNSUPPORTED;
        }
        const float *ff = w->rope_freqs.data;
        for (int i = 0; i < c->head_dim / 2; i++) {
            if (!(ff[i] > 0.0f) || ff[i] == INFINITY) {
                st_errf(err, err_len, "%s: tensor '%s' element %d is not a positive finite "
                        "number", fmt_tensors_dir(ts), LLAMA_ROPE_FREQS, i);
                return CAIRN_EFORMAT;
            }
        }
    }
    w->layers = cairn_calloc((size_t)c->n_layers, sizeof *w->layers);
    if (!w->layers) {
        st_errf(err, err_len, "%s: out of memory", fmt_tensors_dir(ts));
        return CAIRN_ENOMEM;
    }
    for (int l = 0; l < c->n_layers; l++) {
        llama_layer_weights_t *L = &w->layers[l];
        struct {
            const char *suffix;
            int ndim;
            const int64_t *dims;
            cairn_tensor_t *dst;
        } want[] = {
            {"input_layernorm.weight", 1, h, &L->attn_norm},
            {"self_attn.q_proj.weight", 2, q, &L->wq},
            {"self_attn.k_proj.weight", 2, kv, &L->wk},
            {"self_attn.v_proj.weight", 2, kv, &L->wv},
            {"self_attn.o_proj.weight", 2, o, &L->wo},
            {"post_attention_layernorm.weight", 1, h, &L->ffn_norm},
            {"mlp.gate_proj.weight", 2, up, &L->w_gate},
            {"mlp.up_proj.weight", 2, up, &L->w_up},
            {"mlp.down_proj.weight", 2, down, &L->w_down},
            {"self_attn.q_norm.weight", 1, hd, &L->q_norm},
            {"self_attn.k_norm.weight", 1, hd, &L->k_norm},
        };
        size_t n_want = CAIRN_ARRAY_LEN(want) - (m->qk_norm ? 0 : 2);
        for (size_t i = 0; i < n_want; i++) {
            char name[128];
            snprintf(name, sizeof name, "model.layers.%d.%s", l, want[i].suffix);
            if ((rc = fmt_tensors_bind(ts, name, want[i].ndim, want[i].dims, want[i].dst, err,
                                       err_len)))
                return rc;
        }
    }
    return 0;
}

bool llama_ignore_tensor(const void *priv, const cairn_model_config_t *c, const char *name)
{
    static const char inv_freq[] = "rotary_emb.inv_freq";
    size_t n = strlen(name);
    return (c->tie_embeddings && !strcmp(name, "lm_head.weight")) ||
           (n >= sizeof inv_freq - 1 && !strcmp(name + n - (sizeof inv_freq - 1), inv_freq));
}

void llama_destroy(void *priv)
{
    llama_t *m = priv;
    if (!m)
        return;
    cairn_free(m->w.layers);
    cairn_free(m);
}

const llama_weights_t *llama_model_weights(const cairn_model_t *m)
{
    return m && m->family == &cairn_family_llama ? &((const llama_t *)m->priv)->w : NULL;
}
