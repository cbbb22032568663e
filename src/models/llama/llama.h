/*
 * models/llama/llama.h — the llama family: dense decoder-only transformers with grouped-
 * query attention, RMSNorm and a SwiGLU MLP. model_type "llama" (Llama 2/3/3.1),
 * "mistral" (with sliding_window null: the same math) and "qwen3" (adds per-head q/k
 * RMSNorm; no qkv bias). Internal to src/models/llama/ (and the tests of its loader).
 *
 * Config (llama_config.c) follows the transformers config classes (LlamaConfig,
 * MistralConfig, Qwen3Config): n_kv_heads = n_heads; head_dim = hidden / n_heads for
 * llama and 128 for qwen3; rope_theta 10000; rms_norm_eps 1e-6; max_position_embeddings
 * 2048 (llama) / 32768 (qwen3); tie_word_embeddings false. Sizes the math cannot default
 * must be present. Fields that would change the math in a way not implemented (biases,
 * an active sliding window, another activation, unknown rope types, quantization,
 * pretraining_tp, layer_types other than full_attention) are CAIRN_EUNSUPPORTED with the
 * field named.
 *
 * GGUF files of architecture "llama" and "qwen3" (llama_gguf.c) map to the same config
 * and weights; llama's q/k rows are restored to HF's order at bind.
 *
 * Every layer is FULL attention with n_kv_heads x head_dim K/V rows; there is no
 * recurrent state.
 */
#ifndef CAIRN_MODELS_LLAMA_H
#define CAIRN_MODELS_LLAMA_H

#include "models/family.h"

/* Per-layer weights. Shapes in HF [out, in] order. */
typedef struct {
    cairn_tensor_t attn_norm; /* [hidden]                      input_layernorm */
    cairn_tensor_t wq;        /* [n_heads*head_dim, hidden]     self_attn.q_proj */
    cairn_tensor_t wk;        /* [n_kv_heads*head_dim, hidden]  self_attn.k_proj */
    cairn_tensor_t wv;        /* [n_kv_heads*head_dim, hidden]  self_attn.v_proj */
    cairn_tensor_t wo;        /* [hidden, n_heads*head_dim]     self_attn.o_proj */
    cairn_tensor_t q_norm;    /* [head_dim] qwen3 only          self_attn.q_norm */
    cairn_tensor_t k_norm;    /* [head_dim] qwen3 only          self_attn.k_norm */
    cairn_tensor_t ffn_norm;  /* [hidden]                      post_attention_layernorm */
    cairn_tensor_t w_gate;    /* [ffn, hidden]                  mlp.gate_proj */
    cairn_tensor_t w_up;      /* [ffn, hidden]                  mlp.up_proj */
    cairn_tensor_t w_down;    /* [hidden, ffn]                  mlp.down_proj */
} llama_layer_weights_t;

typedef struct {
    cairn_tensor_t embed;     /* [vocab, hidden]  model.embed_tokens */
    cairn_tensor_t norm;      /* [hidden]         model.norm */
    cairn_tensor_t lm_head;   /* [vocab, hidden]  lm_head (== embed when tied) */
    /* [head_dim/2] f32, GGUF "llama" only (data NULL otherwise): llama.cpp's per-frequency
     * RoPE divisors (how its converter stores llama3 scaling): inv_freq[i] / rope_freqs[i]. */
    cairn_tensor_t rope_freqs;
    llama_layer_weights_t *layers; /* [n_layers] */
} llama_weights_t;

/* The name llama_bind asks for the RoPE divisors by (the GGUF name; no HF tensor has it). */
#define LLAMA_ROPE_FREQS "rope_freqs.weight"

/* The family's state of one model (cairn_model_t.priv). */
typedef struct {
    bool qk_norm;             /* qwen3: RMSNorm of each q and k head before RoPE */
    bool gguf;                /* read from a GGUF file (llama_gguf.c) */
    bool gguf_permuted_qk;    /* GGUF "llama": attn_q/attn_k rows in llama.cpp's order */
    bool gguf_rope_freqs;     /* GGUF "llama" with rope_freqs.weight: bind it */
    llama_weights_t w;
} llama_t;

extern const cairn_family_t cairn_family_llama;

/* The bound weights of a llama-family model; NULL for a model of another family. */
const llama_weights_t *llama_model_weights(const cairn_model_t *m);

/* config.json -> common config + llama_t (llama_config.c). */
int llama_parse_config(const hf_config_t *hf, cairn_model_config_t *cfg, void **priv,
                       char *err, size_t err_len);
/* Binds every tensor of llama_t's weights (llama_weights.c). */
int llama_bind(void *priv, const cairn_model_config_t *cfg, fmt_tensors_t *ts, char *err,
               size_t err_len);
bool llama_ignore_tensor(const void *priv, const cairn_model_config_t *cfg, const char *name);
void llama_destroy(void *priv);

/* GGUF metadata -> common config + llama_t, and the tensor name map (llama_gguf.c). */
int llama_parse_gguf(const gguf_file_t *g, const char *arch, cairn_model_config_t *cfg,
                     void **priv, char *err, size_t err_len);
bool llama_gguf_tensor_name(const void *priv, const cairn_model_config_t *cfg, const char *name,
                            char *buf, size_t cap, int *permute_heads);

/* The forward context (llama_forward.c): fwd_create / fwd_destroy / fwd_step. */
int llama_fwd_create(const cairn_model_t *m, const cairn_fwd_env_t *env, void **fwd);
void llama_fwd_destroy(void *fwd);
int llama_fwd_step(void *fwd, const cairn_fwd_batch_t *batch);

#endif
