/*
 * qwen35_gguf.c — GGUF files of the Qwen3.5 family: general.architecture "qwen35"
 * (llama.cpp's LLM_ARCH_QWEN35; docs/FORMAT.md 3.5). The metadata -> config map and the
 * map from the HF tensor names q35_bind asks for to llama.cpp's, as llama.cpp's converter
 * (conversion Qwen3_5TextModel; bench/qwen35_hf2gguf.py here) writes them.
 *
 * llama.cpp's meaning:
 *   - layer kinds: layer i is full attention when (i + 1) % qwen35.full_attention_interval
 *     == 0 (default 4), else Gated DeltaNet; a stack without a full layer is refused;
 *   - Gated DeltaNet sizes: ssm.group_count = key heads Hk, ssm.time_step_rank = value
 *     heads Hv, ssm.state_size = key head dim dk, ssm.inner_size = Hv * dv,
 *     ssm.conv_kernel = K (dv = inner_size / Hv);
 *   - full attention: rope.dimension_count rotary dims of key_length (partial rotary),
 *     rope.dimension_sections are M-RoPE sections that, with text's equal positions, are
 *     the plain partial RoPE; attn_q holds q and gate rows per head, as HF;
 *   - the (1 + w) norms are stored as 1 + w, ssm_a as -exp(A_log), ssm_conv1d squeezed to
 *     [conv_dim, K], and with Hk < Hv every value-head tensor in llama.cpp's tiled order
 *     (q35_config_t.v_tiled says how bind and the forward pass undo it).
 *
 * Pure functions of their input; thread-safe.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/gguf_hparams.h"
#include "models/qwen35/qwen35.h"

#define MAX_DIM (1 << 20)

/* The ghp_parse_fn of the family: state is a q35_t, cfg its config's base. */
static int parse_into(const gguf_file_t *g, const char *arch, void *state,
                      cairn_model_config_t *cfg, char *err, size_t err_len)
{
    q35_config_t *c = &((q35_t *)state)->cfg;
    cairn_model_config_t *b = cfg; /* &c->base */
    const char *what = gguf_what(g);
    int rc, inner, interval;
    if ((rc = ghp_dim(g, arch, "block_count", true, 0, 1, Q35_MAX_LAYERS, &b->n_layers, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "embedding_length", true, 0, 1, MAX_DIM, &b->hidden, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "attention.head_count", true, 0, 1, 4096, &b->n_heads, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "attention.head_count_kv", false, b->n_heads, 1, 4096,
                      &b->n_kv_heads, err, err_len)) ||
        (rc = ghp_dim(g, arch, "attention.key_length", true, 0, 2, 4096, &b->head_dim, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "feed_forward_length", true, 0, 1, MAX_DIM, &b->ffn, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "context_length", true, 0, 1, 1 << 30, &b->max_pos, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "rope.dimension_count", true, 0, 2, 4096, &c->rope_dim, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "ssm.conv_kernel", true, 0, 1, 64, &c->conv_kernel, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "ssm.state_size", true, 0, 1, 4096, &c->lin_k_dim, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "ssm.group_count", true, 0, 1, 4096, &c->lin_k_heads, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "ssm.time_step_rank", true, 0, 1, 4096, &c->lin_v_heads, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "ssm.inner_size", true, 0, 1, MAX_DIM, &inner, err, err_len)) ||
        (rc = ghp_dim(g, arch, "full_attention_interval", false, 4, 1, 1 << 20, &interval, err,
                      err_len)))
        return rc;
    int v_dim;
    if ((rc = ghp_dim(g, arch, "attention.value_length", false, b->head_dim, 1, 4096, &v_dim,
                      err, err_len)))
        return rc;
    if (v_dim != b->head_dim) {
        st_errf(err, err_len, "%s: %s.attention.value_length %d differs from key_length %d "
                "(not supported)", what, arch, v_dim, b->head_dim);
        return CAIRN_EUNSUPPORTED;
    }
    if (b->n_heads % b->n_kv_heads) {
        st_errf(err, err_len, "%s: %s.attention.head_count %d is not a multiple of "
                "head_count_kv %d", what, arch, b->n_heads, b->n_kv_heads);
        return CAIRN_EFORMAT;
    }
    if (c->lin_v_heads % c->lin_k_heads || inner % c->lin_v_heads) {
        st_errf(err, err_len, "%s: %s", what,
                c->lin_v_heads % c->lin_k_heads
                    ? "ssm.time_step_rank (value heads) is not a multiple of ssm.group_count"
                    : "ssm.inner_size is not a multiple of ssm.time_step_rank");
        return CAIRN_EFORMAT;
    }
    c->lin_v_dim = inner / c->lin_v_heads;
    if (c->lin_v_dim > 1024 || (int64_t)b->n_heads * b->head_dim * 2 > MAX_DIM) {
        st_errf(err, err_len, "%s: layer widths are too large", what);
        return CAIRN_ERANGE;
    }
    if (c->rope_dim % 2 || c->rope_dim > b->head_dim) {
        st_errf(err, err_len, "%s: %s.rope.dimension_count %d must be even and at most "
                "key_length %d", what, arch, c->rope_dim, b->head_dim);
        return CAIRN_EFORMAT;
    }
    /* M-RoPE sections (llama.cpp's split of the rotary pairs among position axes): text
     * gives every axis the same position, so any split is the plain partial RoPE; only
     * their form is checked. */
    char k[128];
    const gguf_kv_t *sec;
    if ((rc = gguf_get_array(g, ghp_key(k, sizeof k, arch, "rope.dimension_sections"),
                             GGUF_TYPE_I32, false, &sec, err, err_len)))
        return rc;
    for (uint64_t i = 0; sec && i < sec->n; i++)
        if (gguf_array_int(sec, i) < 0) {
            st_errf(err, err_len, "%s: metadata %s[%llu] is negative", what, k,
                    (unsigned long long)i);
            return CAIRN_EFORMAT;
        }
    b->rope_type = CAIRN_ROPE_DEFAULT;
    b->rope_factor = 1.0f;
    if ((rc = ghp_pos_float(g, arch, "attention.layer_norm_rms_epsilon", true, 0, &b->rms_eps,
                            err, err_len)) ||
        (rc = ghp_pos_float(g, arch, "rope.freq_base", false, 10000.0f, &b->rope_theta, err,
                            err_len)) ||
        (rc = ghp_refuse(g, arch, "rope.scaling.type", err, err_len)) ||
        (rc = ghp_refuse(g, arch, "expert_count", err, err_len)) ||
        (rc = ghp_refuse(g, arch, "attention.sliding_window", err, err_len)) ||
        (rc = ghp_vocab_and_specials(g, arch, b, err, err_len)))
        return rc;

    c->n_linear = c->n_full = 0;
    for (int l = 0; l < b->n_layers; l++) {
        c->kind[l] = (l + 1) % interval ? Q35_LAYER_LINEAR : Q35_LAYER_FULL;
        c->slot[l] = (int16_t)(c->kind[l] == Q35_LAYER_LINEAR ? c->n_linear++ : c->n_full++);
    }
    if (c->n_full == 0) {
        st_errf(err, err_len, "%s: %s.full_attention_interval %d leaves no full-attention "
                "layer among the %d layers: not supported", what, arch, interval, b->n_layers);
        return CAIRN_EUNSUPPORTED;
    }
    snprintf(c->prefix, sizeof c->prefix, "model.");
    c->norms_plus_one = c->a_neg_exp = c->conv_squeezed = true;
    c->v_tiled = c->lin_k_heads != c->lin_v_heads;
    return 0;
}

int q35_parse_gguf(const gguf_file_t *g, const char *arch, cairn_model_config_t *cfg,
                   void **priv, char *err, size_t err_len)
{
    return ghp_parse_priv(g, arch, sizeof(q35_t), offsetof(q35_t, cfg.base), parse_into,
                          cfg, priv, err, err_len);
}

/* Qwen3.5's own layer names: its norms and the Gated DeltaNet's tensors. */
static const ghp_name_t own[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight"},
    {"linear_attn.in_proj_z.weight", "attn_gate.weight"},
    {"linear_attn.in_proj_b.weight", "ssm_beta.weight"},
    {"linear_attn.in_proj_a.weight", "ssm_alpha.weight"},
    {"linear_attn.out_proj.weight", "ssm_out.weight"},
    {"linear_attn.conv1d.weight", "ssm_conv1d.weight"},
    {"linear_attn.dt_bias", "ssm_dt.bias"},
    {"linear_attn.A_log", "ssm_a"},
    {"linear_attn.norm.weight", "ssm_norm.weight"},
    {NULL, NULL},
};

bool q35_gguf_tensor_name(const void *priv, const cairn_model_config_t *cfg, const char *name,
                          char *buf, size_t cap, int *permute_heads)
{
    (void)priv;
    static const ghp_name_t *const globals[] = {ghp_common_globals, NULL},
                                   *const layer[] = {own, ghp_attn_names, ghp_mlp_names, NULL};
    *permute_heads = 0;
    return ghp_tensor_name(name, cfg->n_layers, globals, layer, buf, cap) != NULL;
}
