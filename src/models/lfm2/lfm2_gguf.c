/*
 * lfm2_gguf.c — GGUF files of the LFM2 family: general.architecture "lfm2"
 * (docs/FORMAT.md 3.5). The metadata -> config map and the map from the HF tensor names
 * lfm2_weights_bind asks for to llama.cpp's, as llama.cpp's converter
 * (convert_hf_to_gguf.py LFM2Model; bench/lfm2_hf2gguf.py here) writes them.
 *
 * llama.cpp's meaning:
 *   - lfm2.attention.head_count_kv is a per-layer array: 0 marks a conv layer, any other
 *     value an attention layer with that many K/V heads (all equal here, else refused).
 *     A scalar means every layer attends;
 *   - lfm2.feed_forward_length is the effective SwiGLU width (the converter already
 *     applied block_auto_adjust_ff_dim); lfm2.shortconv.l_cache the conv taps L;
 *     rope.dimension_count must be key_length (no partial rotary); NEOX RoPE, so rows are
 *     as HF stores them;
 *   - the final norm (HF model.embedding_norm) is token_embd_norm.weight (output_norm.weight
 *     is read too); the conv weight is squeezed to ggml [L, hidden] and kept float32; untied
 *     files carry output.weight.
 *
 * Pure functions of their input; thread-safe.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/gguf_hparams.h"
#include "models/lfm2/lfm2.h"

#define MAX_DIM (1 << 20)

/* Layer kinds and the K/V head count from attention.head_count_kv. */
static int parse_kinds(const gguf_file_t *g, const char *arch, lfm2_config_t *c, char *err,
                       size_t err_len)
{
    cairn_model_config_t *b = &c->base;
    char k[128];
    ghp_key(k, sizeof k, arch, "attention.head_count_kv");
    const gguf_kv_t *kv = gguf_find(g, k);
    int rc;
    if (!kv || kv->type != GGUF_TYPE_ARRAY) {
        memset(c->kind, LFM2_LAYER_ATTN, sizeof c->kind);
        if ((rc = ghp_dim(g, arch, "attention.head_count_kv", false, b->n_heads, 1, MAX_DIM,
                          &b->n_kv_heads, err, err_len)))
            return rc;
    } else {
        if (kv->n != (uint64_t)b->n_layers ||
            (kv->elem != GGUF_TYPE_I32 && kv->elem != GGUF_TYPE_U32 && kv->elem != GGUF_TYPE_I64 &&
             kv->elem != GGUF_TYPE_U64 && kv->elem != GGUF_TYPE_I16 && kv->elem != GGUF_TYPE_U16 &&
             kv->elem != GGUF_TYPE_I8 && kv->elem != GGUF_TYPE_U8)) {
            st_errf(err, err_len, "%s: metadata %s must be %d integers (one per layer, 0 = conv), "
                    "not %llu elements of type %s: unknown layer pattern", gguf_what(g), k,
                    b->n_layers, (unsigned long long)kv->n, gguf_type_name(kv->elem));
            return CAIRN_EFORMAT;
        }
        b->n_kv_heads = 0;
        for (int l = 0; l < b->n_layers; l++) {
            int64_t v = gguf_array_int(kv, (uint64_t)l);
            if (v < 0 || v > MAX_DIM || (v && b->n_kv_heads && v != b->n_kv_heads)) {
                st_errf(err, err_len, "%s: metadata %s[%d] = %lld: %s", gguf_what(g), k, l,
                        (long long)v, v < 0 || v > MAX_DIM ? "out of range"
                        : "attention layers with different K/V head counts are not supported");
                return v < 0 || v > MAX_DIM ? CAIRN_EFORMAT : CAIRN_EUNSUPPORTED;
            }
            c->kind[l] = v ? LFM2_LAYER_ATTN : LFM2_LAYER_CONV;
            if (v)
                b->n_kv_heads = (int)v;
        }
        if (!b->n_kv_heads) /* no attention layer: the K/V geometry is unused but valid */
            b->n_kv_heads = b->n_heads;
    }
    c->n_attn = c->n_conv = 0;
    for (int l = 0; l < b->n_layers; l++)
        c->slot[l] = c->kind[l] == LFM2_LAYER_ATTN ? c->n_attn++ : c->n_conv++;
    return 0;
}

/* The ghp_parse_fn of the family: state is a lfm2_t, cfg its config's base. */
static int parse_into(const gguf_file_t *g, const char *arch, void *state,
                      cairn_model_config_t *cfg, char *err, size_t err_len)
{
    lfm2_config_t *c = &((lfm2_t *)state)->cfg;
    cairn_model_config_t *b = cfg; /* &c->base */
    const char *what = gguf_what(g);
    int rc;
    if ((rc = ghp_dim(g, arch, "block_count", true, 0, 1, LFM2_MAX_LAYERS, &b->n_layers, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "embedding_length", true, 0, 1, MAX_DIM, &b->hidden, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "attention.head_count", true, 0, 1, MAX_DIM, &b->n_heads, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "feed_forward_length", true, 0, 1, MAX_DIM, &b->ffn, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "context_length", true, 0, 1, 1 << 30, &b->max_pos, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "shortconv.l_cache", true, 0, 1, LFM2_MAX_CONV_TAPS,
                      &c->conv_taps, err, err_len)) ||
        (rc = parse_kinds(g, arch, c, err, err_len)))
        return rc;
    if (b->hidden % b->n_heads) {
        st_errf(err, err_len, "%s: %s.embedding_length %d is not divisible by "
                "attention.head_count %d", what, arch, b->hidden, b->n_heads);
        return CAIRN_EFORMAT;
    }
    int v_dim, rope_dim;
    if ((rc = ghp_dim(g, arch, "attention.key_length", false, b->hidden / b->n_heads, 2, 65536,
                      &b->head_dim, err, err_len)) ||
        (rc = ghp_dim(g, arch, "attention.value_length", false, b->head_dim, 1, 65536, &v_dim,
                      err, err_len)) ||
        (rc = ghp_dim(g, arch, "rope.dimension_count", false, b->head_dim, 1, 65536, &rope_dim,
                      err, err_len)))
        return rc;
    if (v_dim != b->head_dim || rope_dim != b->head_dim) {
        st_errf(err, err_len, "%s: %s.%s %d differs from attention.key_length %d (not supported)",
                what, arch, v_dim != b->head_dim ? "attention.value_length" : "rope.dimension_count",
                v_dim != b->head_dim ? v_dim : rope_dim, b->head_dim);
        return CAIRN_EUNSUPPORTED;
    }
    if (b->n_heads % b->n_kv_heads || b->head_dim % 2) {
        st_errf(err, err_len, "%s: %s", what,
                b->head_dim % 2 ? "attention.key_length must be even for rotary embeddings"
                                : "attention.head_count is not a multiple of head_count_kv");
        return CAIRN_EFORMAT;
    }
    if ((int64_t)b->n_heads * b->head_dim > MAX_DIM || (int64_t)3 * b->hidden > MAX_DIM) {
        st_errf(err, err_len, "%s: layer widths are too large", what);
        return CAIRN_ERANGE;
    }
    b->rope_type = CAIRN_ROPE_DEFAULT;
    b->rope_factor = 1.0f;
    if ((rc = ghp_pos_float(g, arch, "attention.layer_norm_rms_epsilon", true, 0, &b->rms_eps,
                            err, err_len)) ||
        (rc = ghp_pos_float(g, arch, "rope.freq_base", false, 10000.0f, &b->rope_theta, err,
                            err_len)) ||
        (rc = ghp_refuse(g, arch, "rope.scaling.type", err, err_len)) ||
        (rc = ghp_refuse(g, arch, "expert_count", err, err_len)) ||
        (rc = ghp_vocab_and_specials(g, arch, b, err, err_len)))
        return rc;
    const char *norm = gguf_find_tensor(g, "output_norm.weight") ? "output_norm.weight"
                                                                 : "token_embd_norm.weight";
    snprintf(c->gguf_final_norm, sizeof c->gguf_final_norm, "%s", norm);
    c->conv_squeezed = true;
    lfm2_config_layout_state(c);
    return 0;
}

int lfm2_parse_gguf(const gguf_file_t *g, const char *arch, cairn_model_config_t *cfg,
                    void **priv, char *err, size_t err_len)
{
    return ghp_parse_priv(g, arch, sizeof(lfm2_t), offsetof(lfm2_t, cfg.base), parse_into,
                          cfg, priv, err, err_len);
}

/* LFM2's layer names (its own for every tensor). */
static const ghp_name_t own[] = {
    {"operator_norm.weight", "attn_norm.weight"},
    {"ffn_norm.weight", "ffn_norm.weight"},
    {"feed_forward.w1.weight", "ffn_gate.weight"},
    {"feed_forward.w3.weight", "ffn_up.weight"},
    {"feed_forward.w2.weight", "ffn_down.weight"},
    {"conv.in_proj.weight", "shortconv.in_proj.weight"},
    {"conv.conv.weight", "shortconv.conv.weight"},
    {"conv.out_proj.weight", "shortconv.out_proj.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.out_proj.weight", "attn_output.weight"},
    {"self_attn.q_layernorm.weight", "attn_q_norm.weight"},
    {"self_attn.k_layernorm.weight", "attn_k_norm.weight"},
    {NULL, NULL},
};

bool lfm2_gguf_tensor_name(const void *priv, const cairn_model_config_t *cfg, const char *name,
                           char *buf, size_t cap, int *permute_heads)
{
    const lfm2_t *p = priv;
    /* The final norm's name is the one the file has (parse_into chose it). */
    const ghp_name_t g[] = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.embedding_norm.weight", p->cfg.gguf_final_norm},
        {"lm_head.weight", "output.weight"},
        {NULL, NULL},
    };
    const ghp_name_t *const globals[] = {g, NULL};
    static const ghp_name_t *const layer[] = {own, NULL};
    *permute_heads = 0;
    return ghp_tensor_name(name, cfg->n_layers, globals, layer, buf, cap) != NULL;
}
