/*
 * gguf_hparams.c — llama.cpp hyperparameters, special tokens, the parse frame and the
 * tensor name map of the families' GGUF readers; the contract is models/gguf_hparams.h.
 *
 * Pure functions of their input; thread-safe.
 */
#include <stdio.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/gguf_hparams.h"

const char *ghp_key(char *buf, size_t cap, const char *arch, const char *suffix)
{
    snprintf(buf, cap, "%s.%s", arch, suffix);
    return buf;
}

int ghp_dim(const gguf_file_t *g, const char *arch, const char *suffix, bool required, int dflt,
            int lo, int hi, int *out, char *err, size_t err_len)
{
    char k[128];
    ghp_key(k, sizeof k, arch, suffix);
    const gguf_kv_t *kv = gguf_find(g, k);
    if (kv && kv->type == GGUF_TYPE_ARRAY) {
        st_errf(err, err_len, "%s: metadata %s is a per-layer array (not supported)",
                gguf_what(g), k);
        return CAIRN_EUNSUPPORTED;
    }
    uint64_t v;
    int rc = gguf_get_uint(g, k, required, (uint64_t)dflt, (uint64_t)hi, &v, err, err_len);
    if (rc)
        return rc;
    if (v < (uint64_t)lo) {
        st_errf(err, err_len, "%s: metadata %s = %llu is below %d", gguf_what(g), k,
                (unsigned long long)v, lo);
        return CAIRN_EFORMAT;
    }
    *out = (int)v;
    return 0;
}

int ghp_pos_float(const gguf_file_t *g, const char *arch, const char *suffix, bool required,
                  float dflt, float *out, char *err, size_t err_len)
{
    char k[128];
    int rc = gguf_get_float(g, ghp_key(k, sizeof k, arch, suffix), required, dflt, out, err,
                            err_len);
    if (rc)
        return rc;
    if (!(*out > 0.0f)) {
        st_errf(err, err_len, "%s: metadata %s = %g must be positive", gguf_what(g), k,
                (double)*out);
        return CAIRN_EFORMAT;
    }
    return 0;
}

int ghp_refuse(const gguf_file_t *g, const char *arch, const char *suffix, char *err,
               size_t err_len)
{
    char k[128];
    if (!gguf_find(g, ghp_key(k, sizeof k, arch, suffix)))
        return 0;
    st_errf(err, err_len, "%s: metadata %s is not supported", gguf_what(g), k);
    return CAIRN_EUNSUPPORTED;
}

/* Adds a special token id key (absent: nothing) to the eos list. */
static int add_eos(const gguf_file_t *g, const char *k, cairn_model_config_t *cfg, char *err,
                   size_t err_len)
{
    if (!gguf_find(g, k))
        return 0;
    uint64_t id;
    int rc = gguf_get_uint(g, k, true, 0, (uint64_t)cfg->vocab - 1, &id, err, err_len);
    if (rc)
        return rc;
    for (int i = 0; i < cfg->n_eos; i++)
        if (cfg->eos_ids[i] == (int)id)
            return 0;
    CAIRN_ASSERT(cfg->n_eos < CAIRN_MAX_EOS); /* at most three keys are read */
    cfg->eos_ids[cfg->n_eos++] = (int)id;
    return 0;
}

int ghp_vocab_and_specials(const gguf_file_t *g, const char *arch, cairn_model_config_t *cfg,
                           char *err, size_t err_len)
{
    const char *what = gguf_what(g);
    const gguf_tensor_t *emb = gguf_find_tensor(g, "token_embd.weight");
    if (!emb) {
        st_errf(err, err_len, "%s: checkpoint lacks tensor 'token_embd.weight'", what);
        return CAIRN_ENOENT;
    }
    if (emb->n_dims != 2 || emb->ne[0] != cfg->hidden || emb->ne[1] < 1 || emb->ne[1] > (1 << 24)) {
        st_errf(err, err_len, "%s: tensor 'token_embd.weight' is not a [%d, vocab] matrix "
                "(%s.embedding_length %d)", what, cfg->hidden, arch, cfg->hidden);
        return CAIRN_EFORMAT;
    }
    cfg->vocab = (int)emb->ne[1];
    char k[128];
    uint64_t v;
    int rc = gguf_get_uint(g, ghp_key(k, sizeof k, arch, "vocab_size"), false,
                           (uint64_t)cfg->vocab, 1 << 24, &v, err, err_len);
    if (rc)
        return rc;
    if (v != (uint64_t)cfg->vocab) {
        st_errf(err, err_len, "%s: %s = %llu but token_embd.weight has %d rows", what, k,
                (unsigned long long)v, cfg->vocab);
        return CAIRN_EFORMAT;
    }
    cfg->tie_embeddings = gguf_find_tensor(g, "output.weight") == NULL;
    cfg->bos_id = -1;
    if (gguf_find(g, "tokenizer.ggml.bos_token_id")) {
        if ((rc = gguf_get_uint(g, "tokenizer.ggml.bos_token_id", true, 0,
                                (uint64_t)cfg->vocab - 1, &v, err, err_len)))
            return rc;
        cfg->bos_id = (int)v;
    }
    cfg->n_eos = 0;
    if ((rc = add_eos(g, "tokenizer.ggml.eos_token_id", cfg, err, err_len)) ||
        (rc = add_eos(g, "tokenizer.ggml.eot_token_id", cfg, err, err_len)) ||
        (rc = add_eos(g, "tokenizer.ggml.eom_token_id", cfg, err, err_len)))
        return rc;
    return 0;
}

int ghp_parse_priv(const gguf_file_t *g, const char *arch, size_t priv_size, size_t base_offset,
                   ghp_parse_fn parse, cairn_model_config_t *cfg, void **priv, char *err,
                   size_t err_len)
{
    *priv = NULL;
    CAIRN_ASSERT(base_offset == GHP_NO_BASE || base_offset + sizeof *cfg <= priv_size);
    void *state = cairn_calloc(1, priv_size);
    if (!state) {
        st_errf(err, err_len, "%s: out of memory", gguf_what(g));
        return CAIRN_ENOMEM;
    }
    cairn_model_config_t local, *c = &local;
    if (base_offset != GHP_NO_BASE)
        c = (cairn_model_config_t *)((char *)state + base_offset);
    *c = *cfg;
    int rc = parse(g, arch, state, c, err, err_len);
    if (rc) {
        cairn_free(state);
        return rc;
    }
    *cfg = *c;
    *priv = state;
    return 0;
}

const ghp_name_t ghp_common_globals[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
    {NULL, NULL},
};
const ghp_name_t ghp_attn_names[] = {
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {NULL, NULL},
};
const ghp_name_t ghp_mlp_names[] = {
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {NULL, NULL},
};

/* The entry of the tables whose hf is s, or NULL. */
static const ghp_name_t *lookup(const ghp_name_t *const *tables, const char *s)
{
    for (; *tables; tables++)
        for (const ghp_name_t *e = *tables; e->hf; e++)
            if (!strcmp(s, e->hf))
                return e;
    return NULL;
}

const ghp_name_t *ghp_tensor_name(const char *name, int n_layers,
                                  const ghp_name_t *const *globals,
                                  const ghp_name_t *const *layer, char *buf, size_t cap)
{
    const ghp_name_t *e = lookup(globals, name);
    if (e) {
        snprintf(buf, cap, "%s", e->gguf);
        return e;
    }
    int l, used = 0;
    if (sscanf(name, "model.layers.%d.%n", &l, &used) != 1 || used == 0 || l < 0 ||
        l >= n_layers || !(e = lookup(layer, name + used)))
        return NULL;
    snprintf(buf, cap, "blk.%d.%s", l, e->gguf);
    return e;
}
