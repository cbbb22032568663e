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
#include "models/llama/llama.h"

#define MAX_DIM (1 << 20)
#define MAX_LAYERS 4096

/* "<arch>.<suffix>" into buf. */
static const char *key(char *buf, size_t cap, const char *arch, const char *suffix)
{
    snprintf(buf, cap, "%s.%s", arch, suffix);
    return buf;
}

/* An integer hparam; a per-layer array (OpenELM-style) is refused naming the key. */
static int get_dim(const gguf_file_t *g, const char *arch, const char *suffix, bool required,
                   int dflt, int lo, int hi, int *out, char *err, size_t err_len)
{
    char k[96];
    key(k, sizeof k, arch, suffix);
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

/* Keys whose presence (with a value that changes the math) we do not implement. */
static int check_unsupported(const gguf_file_t *g, const char *arch, char *err, size_t err_len)
{
    char k[96];
    uint64_t v;
    int rc;
    static const char *const counts[] = {"expert_count", "attention.sliding_window"};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(counts); i++) {
        key(k, sizeof k, arch, counts[i]);
        if ((rc = gguf_get_uint(g, k, false, 0, UINT64_MAX, &v, err, err_len)))
            return rc;
        if (v) {
            st_errf(err, err_len, "%s: metadata %s = %llu is not supported", gguf_what(g), k,
                    (unsigned long long)v);
            return CAIRN_EUNSUPPORTED;
        }
    }
    gguf_str_t st;
    if ((rc = gguf_get_str(g, key(k, sizeof k, arch, "rope.scaling.type"), false, &st, err,
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
        if ((rc = gguf_get_float(g, key(k, sizeof k, arch, factors[i]), false, 0.0f, &f, err,
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

int llama_parse_gguf(const gguf_file_t *g, const char *arch, cairn_model_config_t *out,
                     void **priv, char *err, size_t err_len)
{
    int rc;
    cairn_model_config_t cfg = *out; /* model_type and family set by the caller */
    const char *what = gguf_what(g);
    bool qwen = !strcmp(arch, "qwen3");
    char k[96];
    *priv = NULL;

    if ((rc = get_dim(g, arch, "block_count", true, 0, 1, MAX_LAYERS, &cfg.n_layers, err,
                      err_len)) ||
        (rc = get_dim(g, arch, "embedding_length", true, 0, 1, MAX_DIM, &cfg.hidden, err,
                      err_len)) ||
        (rc = get_dim(g, arch, "attention.head_count", true, 0, 1, MAX_DIM, &cfg.n_heads, err,
                      err_len)) ||
        (rc = get_dim(g, arch, "attention.head_count_kv", false, cfg.n_heads, 1, MAX_DIM,
                      &cfg.n_kv_heads, err, err_len)) ||
        (rc = get_dim(g, arch, "feed_forward_length", true, 0, 1, MAX_DIM, &cfg.ffn, err,
                      err_len)) ||
        (rc = get_dim(g, arch, "context_length", true, 0, 1, 1 << 30, &cfg.max_pos, err,
                      err_len)))
        return rc;
    if (!gguf_find(g, key(k, sizeof k, arch, "attention.key_length")) &&
        cfg.hidden % cfg.n_heads != 0) {
        st_errf(err, err_len, "%s: %s.embedding_length %d is not divisible by "
                "%s.attention.head_count %d", what, arch, cfg.hidden, arch, cfg.n_heads);
        return CAIRN_EFORMAT;
    }
    int v_dim, rope_dim;
    if ((rc = get_dim(g, arch, "attention.key_length", false, cfg.hidden / cfg.n_heads, 2,
                      65536, &cfg.head_dim, err, err_len)) ||
        (rc = get_dim(g, arch, "attention.value_length", false, cfg.head_dim, 1, 65536, &v_dim,
                      err, err_len)) ||
        (rc = get_dim(g, arch, "rope.dimension_count", false, cfg.head_dim, 1, 65536,
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
    if ((rc = gguf_get_float(g, key(k, sizeof k, arch, "attention.layer_norm_rms_epsilon"), true,
                             0.0f, &cfg.rms_eps, err, err_len)) ||
        (rc = gguf_get_float(g, key(k, sizeof k, arch, "rope.freq_base"), false, 10000.0f,
                             &cfg.rope_theta, err, err_len)) ||
        (rc = check_unsupported(g, arch, err, err_len)))
        return rc;
    if (!(cfg.rms_eps > 0.0f) || !(cfg.rope_theta > 0.0f)) {
        st_errf(err, err_len, "%s: %s must be positive", what,
                cfg.rms_eps > 0.0f ? "rope.freq_base" : "attention.layer_norm_rms_epsilon");
        return CAIRN_EFORMAT;
    }

    /* The vocabulary is the embedding's rows; no output.weight means tied embeddings. */
    const gguf_tensor_t *emb = gguf_find_tensor(g, "token_embd.weight");
    if (!emb || emb->n_dims != 2 || emb->ne[1] < 1 || emb->ne[1] > (1 << 24)) {
        st_errf(err, err_len, "%s: %s", what,
                emb ? "tensor 'token_embd.weight' is not a [hidden, vocab] matrix"
                    : "checkpoint lacks tensor 'token_embd.weight'");
        return emb ? CAIRN_EFORMAT : CAIRN_ENOENT;
    }
    cfg.vocab = (int)emb->ne[1];
    uint64_t vs;
    if ((rc = gguf_get_uint(g, key(k, sizeof k, arch, "vocab_size"), false, (uint64_t)cfg.vocab,
                            1 << 24, &vs, err, err_len)))
        return rc;
    if (vs != (uint64_t)cfg.vocab) {
        st_errf(err, err_len, "%s: %s = %llu but token_embd.weight has %d rows", what, k,
                (unsigned long long)vs, cfg.vocab);
        return CAIRN_EFORMAT;
    }
    cfg.tie_embeddings = gguf_find_tensor(g, "output.weight") == NULL;

    uint64_t bos;
    cfg.bos_id = -1;
    if (gguf_find(g, "tokenizer.ggml.bos_token_id")) {
        if ((rc = gguf_get_uint(g, "tokenizer.ggml.bos_token_id", true, 0,
                                (uint64_t)cfg.vocab - 1, &bos, err, err_len)))
            return rc;
        cfg.bos_id = (int)bos;
    }
    cfg.n_eos = 0;
    if ((rc = add_eos(g, "tokenizer.ggml.eos_token_id", &cfg, err, err_len)) ||
        (rc = add_eos(g, "tokenizer.ggml.eot_token_id", &cfg, err, err_len)) ||
        (rc = add_eos(g, "tokenizer.ggml.eom_token_id", &cfg, err, err_len)))
        return rc;

    llama_t *l = cairn_calloc(1, sizeof *l);
    if (!l) {
        st_errf(err, err_len, "%s: out of memory", what);
        return CAIRN_ENOMEM;
    }
    l->qk_norm = qwen;
    l->gguf = true;
    l->gguf_permuted_qk = !qwen;
    l->gguf_rope_freqs = !qwen && gguf_find_tensor(g, "rope_freqs.weight") != NULL;
    *out = cfg;
    *priv = l;
    return 0;
}

/* HF layer tensor suffix -> llama.cpp's; `rows` says which head count llama.cpp's
 * converter permutes the rows over ('q': heads, 'k': K/V heads). */
static const struct {
    const char *hf, *gguf;
    char rows;
} layer_names[] = {
    {"input_layernorm.weight", "attn_norm.weight", 0},
    {"self_attn.q_proj.weight", "attn_q.weight", 'q'},
    {"self_attn.k_proj.weight", "attn_k.weight", 'k'},
    {"self_attn.v_proj.weight", "attn_v.weight", 0},
    {"self_attn.o_proj.weight", "attn_output.weight", 0},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", 0},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", 0},
    {"post_attention_layernorm.weight", "ffn_norm.weight", 0},
    {"mlp.gate_proj.weight", "ffn_gate.weight", 0},
    {"mlp.up_proj.weight", "ffn_up.weight", 0},
    {"mlp.down_proj.weight", "ffn_down.weight", 0},
};

bool llama_gguf_tensor_name(const void *priv, const cairn_model_config_t *c, const char *name,
                            char *buf, size_t cap, int *permute_heads)
{
    const llama_t *l = priv;
    static const struct {
        const char *hf, *gguf;
    } globals[] = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"},
        {LLAMA_ROPE_FREQS, LLAMA_ROPE_FREQS},
    };
    *permute_heads = 0;
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(globals); i++) {
        if (!strcmp(name, globals[i].hf)) {
            snprintf(buf, cap, "%s", globals[i].gguf);
            return true;
        }
    }
    int layer, used = 0;
    if (sscanf(name, "model.layers.%d.%n", &layer, &used) != 1 || used == 0 || layer < 0 ||
        layer >= c->n_layers)
        return false;
    const char *suffix = name + used;
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(layer_names); i++) {
        if (strcmp(suffix, layer_names[i].hf) != 0)
            continue;
        snprintf(buf, cap, "blk.%d.%s", layer, layer_names[i].gguf);
        if (l->gguf_permuted_qk && layer_names[i].rows)
            *permute_heads = layer_names[i].rows == 'q' ? c->n_heads : c->n_kv_heads;
        return true;
    }
    return false;
}
