/*
 * llama_gguf.c — GGUF files of the llama family: general.architecture "llama" and
 * "qwen3" (docs/FORMAT.md 3.5). The metadata -> common config map, and the map from the
 * HF tensor names llama_bind asks for to llama.cpp's tensor names.
 *
 * The file is read with llama.cpp's meaning, which is where it differs from config.json:
 * head_dim defaults to hidden / heads for both architectures (attention.key_length when
 * present), embeddings are tied exactly when output.weight is absent, the vocabulary is
 * token_embd's row count, and eos ids are tokenizer.ggml.eos/eot/eom_token_id. What the
 * forward pass does not implement is refused naming the key: per-layer head counts,
 * mixture-of-experts (llama.expert_count, Mixtral's GGUFs), a sliding window, partial
 * rotary, RoPE scaling other than none (llama3 scaling arrives as the rope_freqs.weight
 * tensor, whose divisors the forward pass applies the way llama.cpp does).
 *
 * llama.cpp runs "llama" with RoPE on adjacent pairs, so its converter permutes the rows
 * of attn_q and attn_k within each head; the name map reports that permutation and the
 * weight table restores HF's row order at bind (formats/weights_folder.c). "qwen3" runs
 * with NEOX RoPE (HF's rotate_half): its rows are stored as HF stores them.
 *
 * Pure functions of their input; thread-safe.
 */
#include <stdio.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/gguf_hparams.h"
#include "models/llama/llama.h"

#define MAX_DIM (1 << 20)
#define MAX_LAYERS 4096

/* Keys whose presence (with a value that changes the math) we do not implement. */
static int check_unsupported(const gguf_file_t *g, const char *arch, char *err, size_t err_len)
{
    char k[96];
    uint64_t v;
    int rc;
    static const char *const counts[] = {"expert_count", "attention.sliding_window"};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(counts); i++) {
        ghp_key(k, sizeof k, arch, counts[i]);
        if ((rc = gguf_get_uint(g, k, false, 0, UINT64_MAX, &v, err, err_len)))
            return rc;
        if (v) {
            st_errf(err, err_len, "%s: metadata %s = %llu is not supported", gguf_what(g), k,
                    (unsigned long long)v);
            return CAIRN_EUNSUPPORTED;
        }
    }
    gguf_str_t st;
    if ((rc = gguf_get_str(g, ghp_key(k, sizeof k, arch, "rope.scaling.type"), false, &st, err,
                           err_len)))
        return rc;
    bool linear = gguf_str_eq(st, "linear");
    if (st.p && !gguf_str_eq(st, "none") && !linear) {
        st_errf(err, err_len, "%s: metadata %s \"%.*s\" is not supported (only none)",
                gguf_what(g), k, (int)(st.n < 32 ? st.n : 32), st.p);
        return CAIRN_EUNSUPPORTED;
    }
    /* llama.cpp reads a scaling factor without a type as linear scaling. */
    static const char *const factors[] = {"rope.scaling.factor", "rope.scale_linear"};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(factors); i++) {
        float f;
        if ((rc = gguf_get_float(g, ghp_key(k, sizeof k, arch, factors[i]), false, 0.0f, &f, err,
                                 err_len)))
            return rc;
        if (f != 0.0f && f != 1.0f) {
            st_errf(err, err_len, "%s: metadata %s = %g (RoPE scaling) is not supported",
                    gguf_what(g), k, (double)f);
            return CAIRN_EUNSUPPORTED;
        }
    }
    return 0;
}

/* The ghp_parse_fn of the family: state is a llama_t. */
static int parse(const gguf_file_t *g, const char *arch, void *state, cairn_model_config_t *out,
                 char *err, size_t err_len)
{
    int rc;
    cairn_model_config_t cfg = *out;
    const char *what = gguf_what(g);
    bool qwen = !strcmp(arch, "qwen3");
    char k[128];

    if ((rc = ghp_dim(g, arch, "block_count", true, 0, 1, MAX_LAYERS, &cfg.n_layers, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "embedding_length", true, 0, 1, MAX_DIM, &cfg.hidden, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "attention.head_count", true, 0, 1, MAX_DIM, &cfg.n_heads, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "attention.head_count_kv", false, cfg.n_heads, 1, MAX_DIM,
                      &cfg.n_kv_heads, err, err_len)) ||
        (rc = ghp_dim(g, arch, "feed_forward_length", true, 0, 1, MAX_DIM, &cfg.ffn, err,
                      err_len)) ||
        (rc = ghp_dim(g, arch, "context_length", true, 0, 1, 1 << 30, &cfg.max_pos, err,
                      err_len)))
        return rc;
    if (!gguf_find(g, ghp_key(k, sizeof k, arch, "attention.key_length")) &&
        cfg.hidden % cfg.n_heads != 0) {
        st_errf(err, err_len, "%s: %s.embedding_length %d is not divisible by "
                "%s.attention.head_count %d", what, arch, cfg.hidden, arch, cfg.n_heads);
        return CAIRN_EFORMAT;
    }
    int v_dim, rope_dim;
    if ((rc = ghp_dim(g, arch, "attention.key_length", false, cfg.hidden / cfg.n_heads, 2,
                      65536, &cfg.head_dim, err, err_len)) ||
        (rc = ghp_dim(g, arch, "attention.value_length", false, cfg.head_dim, 1, 65536, &v_dim,
                      err, err_len)) ||
        (rc = ghp_dim(g, arch, "rope.dimension_count", false, cfg.head_dim, 1, 65536,
                      &rope_dim, err, err_len)))
        return rc;
    if (v_dim != cfg.head_dim || rope_dim != cfg.head_dim) {
        st_errf(err, err_len, "%s: %s %d differs from attention.key_length %d (not supported)",
                what, v_dim != cfg.head_dim ? "attention.value_length" : "rope.dimension_count",
                v_dim != cfg.head_dim ? v_dim : rope_dim, cfg.head_dim);
        return CAIRN_EUNSUPPORTED;
    }
    if (cfg.n_heads % cfg.n_kv_heads != 0 || cfg.head_dim % 2 != 0) {
        st_errf(err, err_len, "%s: %s", what,
                cfg.head_dim % 2 ? "attention.key_length must be even for rotary embeddings"
                                 : "attention.head_count is not a multiple of head_count_kv");
        return CAIRN_EFORMAT;
    }
    if ((int64_t)cfg.n_heads * cfg.head_dim > MAX_DIM) {
        st_errf(err, err_len, "%s: attention.head_count x key_length is too large", what);
        return CAIRN_ERANGE;
    }
    cfg.rope_type = CAIRN_ROPE_DEFAULT;
    if ((rc = ghp_pos_float(g, arch, "attention.layer_norm_rms_epsilon", true, 0.0f, &cfg.rms_eps,
                            err, err_len)) ||
        (rc = ghp_pos_float(g, arch, "rope.freq_base", false, 10000.0f, &cfg.rope_theta, err,
                            err_len)) ||
        (rc = check_unsupported(g, arch, err, err_len)) ||
        (rc = ghp_vocab_and_specials(g, arch, &cfg, err, err_len)))
        return rc;

    llama_t *l = state;
    l->qk_norm = qwen;
    l->gguf = true;
    l->gguf_permuted_qk = !qwen;
    l->gguf_rope_freqs = !qwen && gguf_find_tensor(g, "rope_freqs.weight") != NULL;
    *out = cfg;
    return 0;
}

int llama_parse_gguf(const gguf_file_t *g, const char *arch, cairn_model_config_t *cfg,
                     void **priv, char *err, size_t err_len)
{
    return ghp_parse_priv(g, arch, sizeof(llama_t), GHP_NO_BASE, parse, cfg, priv, err, err_len);
}

/* The llama family's own names: its two norms and llama3's RoPE divisors. */
static const ghp_name_t rope_freqs[] = {{LLAMA_ROPE_FREQS, LLAMA_ROPE_FREQS}, {NULL, NULL}},
                        norms[] = {
                            {"input_layernorm.weight", "attn_norm.weight"},
                            {"post_attention_layernorm.weight", "ffn_norm.weight"},
                            {NULL, NULL},
                        };

bool llama_gguf_tensor_name(const void *priv, const cairn_model_config_t *c, const char *name,
                            char *buf, size_t cap, int *permute_heads)
{
    const llama_t *l = priv;
    static const ghp_name_t *const globals[] = {ghp_common_globals, rope_freqs, NULL},
                                   *const layer[] = {norms, ghp_attn_names, ghp_mlp_names, NULL};
    *permute_heads = 0;
    const ghp_name_t *e = ghp_tensor_name(name, c->n_layers, globals, layer, buf, cap);
    /* llama.cpp's converter permutes q's rows over the heads, k's over the K/V heads. */
    if (e && l->gguf_permuted_qk && !strcmp(e->gguf, "attn_q.weight"))
        *permute_heads = c->n_heads;
    else if (e && l->gguf_permuted_qk && !strcmp(e->gguf, "attn_k.weight"))
        *permute_heads = c->n_kv_heads;
    return e != NULL;
}
