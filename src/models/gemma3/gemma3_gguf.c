/*
 * gemma3_gguf.c — GGUF files of the gemma3 family: general.architecture "gemma3"
 * (docs/FORMAT.md 3.5). The metadata -> config map and the map from the HF tensor names
 * gemma3_weights_bind asks for to llama.cpp's, as llama.cpp's converter
 * (convert_hf_to_gguf.py Gemma3Model; bench/gemma3_hf2gguf.py here) writes them.
 *
 * The file is read with llama.cpp's meaning, which fixes what config.json spells out:
 *   - layer kinds: every 6th layer is full attention, unless
 *     gemma3.attention.sliding_window_pattern says otherwise (a period P: layer i full
 *     when (i + 1) % P == 0; or a bool per layer, true = sliding); any other value is an
 *     error naming the key;
 *   - RoPE: gemma3.rope.freq_base for the full layers (linear scaling from
 *     rope.scaling.type/factor), gemma3.rope.freq_base_swa (default 10000) for the
 *     sliding ones;
 *   - attention scale 1/sqrt(key_length) (the 62-layer 27B: 1/sqrt(hidden / heads)),
 *     computed as HF computes query_pre_attn_scalar ** -0.5 so that a bf16 file gives the
 *     HF folder's bits; embedding scale sqrt(hidden); no attention soft-cap;
 *     gemma3.final_logit_softcapping when present;
 *   - norm weights are stored as float32 1 + w (the converter adds the 1 as HF does in
 *     float32): the forward pass multiplies by them as stored (norm_weights_plus_one);
 *   - untied files carry output.weight; token_embd.weight's rows are the vocabulary.
 * Rows are stored as HF stores them (llama.cpp runs Gemma 3 with NEOX RoPE).
 *
 * Pure functions of their input; thread-safe.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/gemma3/gemma3.h"
#include "models/gguf_hparams.h"

#define MAX_DIM (1 << 20)

/* Layer kinds from the pattern key (absent: period 6). */
static int parse_pattern(const gguf_file_t *g, const char *arch, gemma3_config_t *c, char *err,
                         size_t err_len)
{
    char k[128];
    ghp_key(k, sizeof k, arch, "attention.sliding_window_pattern");
    const gguf_kv_t *kv = gguf_find(g, k);
    if (kv && kv->type == GGUF_TYPE_ARRAY) {
        if (kv->elem != GGUF_TYPE_BOOL || kv->n != (uint64_t)c->n_layers) {
            st_errf(err, err_len, "%s: metadata %s must be %d bools (one per layer, true = "
                    "sliding), not %llu elements of type %s: unknown layer pattern",
                    gguf_what(g), k, c->n_layers, (unsigned long long)kv->n,
                    gguf_type_name(kv->elem));
            return CAIRN_EFORMAT;
        }
        for (int l = 0; l < c->n_layers; l++)
            c->kind[l] = kv->data[l] ? GEMMA3_SLIDING : GEMMA3_FULL;
        return 0;
    }
    int period, rc;
    if ((rc = ghp_dim(g, arch, "attention.sliding_window_pattern", false, 6, 1, GEMMA3_MAX_LAYERS,
                      &period, err, err_len)))
        return rc;
    for (int l = 0; l < c->n_layers; l++)
        c->kind[l] = (l + 1) % period ? GEMMA3_SLIDING : GEMMA3_FULL;
    return 0;
}

/* The full layers' RoPE scaling: none or linear. */
static int parse_rope_scaling(const gguf_file_t *g, const char *arch, gemma3_config_t *c,
                              char *err, size_t err_len)
{
    char k[128];
    gguf_str_t st;
    int rc = gguf_get_str(g, ghp_key(k, sizeof k, arch, "rope.scaling.type"), false, &st, err,
                          err_len);
    if (rc)
        return rc;
    if (st.p && !gguf_str_eq(st, "none") && !gguf_str_eq(st, "linear")) {
        st_errf(err, err_len, "%s: metadata %s \"%.*s\" is not supported (none or linear)",
                gguf_what(g), k, (int)(st.n < 32 ? st.n : 32), st.p);
        return CAIRN_EUNSUPPORTED;
    }
    float f;
    if ((rc = gguf_get_float(g, ghp_key(k, sizeof k, arch, "rope.scaling.factor"), false, 1.0f, &f,
                             err, err_len)))
        return rc;
    if (gguf_str_eq(st, "none"))
        f = 1.0f;
    if (!(f > 0.0f)) {
        st_errf(err, err_len, "%s: metadata %s = %g must be positive", gguf_what(g), k, (double)f);
        return CAIRN_EFORMAT;
    }
    c->rope[GEMMA3_FULL].linear_factor = f;
    c->rope[GEMMA3_SLIDING].linear_factor = 1.0f;
    return 0;
}

/* The ghp_parse_fn of the family: state is a gemma3_t. */
static int parse(const gguf_file_t *g, const char *arch, void *state, cairn_model_config_t *cfg,
                 char *err, size_t err_len)
{
    gemma3_config_t *c = &((gemma3_t *)state)->cfg;
    const char *what = gguf_what(g);
    int rc;
    snprintf(c->model_type, sizeof c->model_type, "%s", arch);
    if ((rc = ghp_dim(g, arch, "block_count", true, 0, 1, GEMMA3_MAX_LAYERS, &c->n_layers, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "embedding_length", true, 0, 1, MAX_DIM, &c->hidden, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "attention.head_count", true, 0, 1, MAX_DIM, &c->n_heads, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "attention.head_count_kv", false, c->n_heads, 1, MAX_DIM,
                      &c->n_kv_heads, err, err_len)) ||
        (rc = ghp_dim(g, arch, "feed_forward_length", true, 0, 1, MAX_DIM, &c->ffn, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "context_length", true, 0, 1, 1 << 30, &c->max_pos, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "attention.sliding_window", true, 0, 1, 1 << 30,
                      &c->sliding_window, err, err_len)))
        return rc;
    if (c->hidden % c->n_heads) {
        st_errf(err, err_len, "%s: %s.embedding_length %d is not divisible by "
                "attention.head_count %d", what, arch, c->hidden, c->n_heads);
        return CAIRN_EFORMAT;
    }
    int v_dim;
    if ((rc = ghp_dim(g, arch, "attention.key_length", false, c->hidden / c->n_heads, 2, 65536,
                      &c->head_dim, err, err_len)) ||
        (rc = ghp_dim(g, arch, "attention.value_length", false, c->head_dim, 1, 65536, &v_dim,
                      err, err_len)))
        return rc;
    if (v_dim != c->head_dim) {
        st_errf(err, err_len, "%s: %s.attention.value_length %d differs from key_length %d "
                "(not supported)", what, arch, v_dim, c->head_dim);
        return CAIRN_EUNSUPPORTED;
    }
    if (c->n_heads % c->n_kv_heads || c->head_dim % 2) {
        st_errf(err, err_len, "%s: %s", what,
                c->head_dim % 2 ? "attention.key_length must be even for rotary embeddings"
                                : "attention.head_count is not a multiple of head_count_kv");
        return CAIRN_EFORMAT;
    }
    if ((int64_t)c->n_heads * c->head_dim > MAX_DIM) {
        st_errf(err, err_len, "%s: attention.head_count x key_length is too large", what);
        return CAIRN_ERANGE;
    }
    c->rope[GEMMA3_FULL] = (gemma3_rope_t){10000.0f, 1.0f};
    c->rope[GEMMA3_SLIDING] = (gemma3_rope_t){10000.0f, 1.0f};
    if ((rc = ghp_pos_float(g, arch, "attention.layer_norm_rms_epsilon", true, 0, &c->rms_eps,
                            err, err_len)) ||
        (rc = ghp_pos_float(g, arch, "rope.freq_base", false, 10000.0f,
                            &c->rope[GEMMA3_FULL].theta, err, err_len)) ||
        (rc = ghp_pos_float(g, arch, "rope.freq_base_swa", false, 10000.0f,
                            &c->rope[GEMMA3_SLIDING].theta, err, err_len)) ||
        (rc = parse_rope_scaling(g, arch, c, err, err_len)) ||
        (rc = parse_pattern(g, arch, c, err, err_len)))
        return rc;
    char k[128];
    c->final_softcap = 0.0f;
    if (gguf_find(g, ghp_key(k, sizeof k, arch, "final_logit_softcapping")) &&
        (rc = ghp_pos_float(g, arch, "final_logit_softcapping", true, 0, &c->final_softcap, err,
                            err_len)))
        return rc;
    c->attn_softcap = 0.0f;
    /* llama.cpp: 1/sqrt(n_embd_head_k), or 1/sqrt(n_embd / n_head) for Gemma 3 27B (62
     * layers); HF's query_pre_attn_scalar is the same number, raised to -0.5 in double. */
    const int qpas = c->n_layers == 62 ? c->hidden / c->n_heads : c->head_dim;
    c->attn_scale = (float)pow((double)qpas, -0.5);
    c->embed_scale = (float)sqrt((double)c->hidden);
    c->norm_weights_plus_one = true;

    gemma3_config_common(c, cfg);
    if ((rc = ghp_vocab_and_specials(g, arch, cfg, err, err_len)))
        return rc;
    c->vocab = cfg->vocab;
    c->tie_embeddings = cfg->tie_embeddings;
    return 0;
}

int gemma3_parse_gguf(const gguf_file_t *g, const char *arch, cairn_model_config_t *cfg,
                      void **priv, char *err, size_t err_len)
{
    return ghp_parse_priv(g, arch, sizeof(gemma3_t), GHP_NO_BASE, parse, cfg, priv, err, err_len);
}

/* Gemma's own layer names: its four norms. */
static const ghp_name_t norms[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {NULL, NULL},
};

bool gemma3_gguf_tensor_name(const void *priv, const cairn_model_config_t *cfg, const char *name,
                             char *buf, size_t cap, int *permute_heads)
{
    (void)priv;
    static const ghp_name_t *const globals[] = {ghp_common_globals, NULL},
                                   *const layer[] = {norms, ghp_attn_names, ghp_mlp_names, NULL};
    *permute_heads = 0;
    return ghp_tensor_name(name, cfg->n_layers, globals, layer, buf, cap) != NULL;
}
