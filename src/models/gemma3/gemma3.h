/*
 * models/gemma3/gemma3.h — the Gemma 3 text family: config, weights and forward pass.
 *
 * Model (HF Gemma3ForCausalLM / the text model inside Gemma3ForConditionalGeneration,
 * transformers 5.x, float32 compute):
 *
 *   x = embed[token] * sqrt(hidden)                      scale rounded to float32 once
 *   for each layer l (kind sliding or full, per layer_types):
 *       h = rmsnorm1p(x, input_layernorm)                 rmsnorm1p: x/rms(x) * (1 + w)
 *       q, k, v = h Wq^T, h Wk^T, h Wv^T
 *       q, k = rmsnorm1p per head (q_norm, k_norm)
 *       q, k = rope(q, pos), rope(k, pos)                 inv_freq of the layer's kind
 *       store k, v at (l, pos)
 *       a = softmax(cap(q k^T * query_pre_attn_scalar^-1/2)) v   over the window of l
 *       x = x + rmsnorm1p(a Wo^T, post_attention_layernorm)
 *       h = rmsnorm1p(x, pre_feedforward_layernorm)
 *       x = x + rmsnorm1p((gelu_tanh(h Wgate^T) * h Wup^T) Wdown^T, post_feedforward_layernorm)
 *   logits = cap(rmsnorm1p(x, norm) Wlm^T)                lm_head = embed when tied
 *
 * A sliding layer at position p attends to keys (p - W, p]; a full layer to [0, p].
 * cap(s) = tanh(s / c) * c where the config sets the soft cap c, else s.
 *
 * Every operation runs on the compute backend (compute/backend.h): matmul, (1 + w)
 * RMSNorm, RoPE, the GELU-tanh gate and attention with a window, a scale and a soft cap.
 *
 * Thread-safety: a config and a weights object are immutable after creation; a forward
 * context runs one call at a time.
 */
#ifndef CAIRN_MODELS_GEMMA3_H
#define CAIRN_MODELS_GEMMA3_H

#include "models/family.h"

#define GEMMA3_MAX_LAYERS 1024

/* The two attention kinds; a layer's kind picks its window and its RoPE frequencies. */
typedef enum { GEMMA3_SLIDING = 0, GEMMA3_FULL = 1 } gemma3_kind_t;

/* RoPE of one attention kind: "default", or "linear" (inv_freq / factor). */
typedef struct {
    float theta;
    float linear_factor;  /* 1 for "default" */
} gemma3_rope_t;

typedef struct {
    char model_type[32];       /* "gemma3_text" or "gemma3" (text_config) */
    int n_layers, hidden, n_heads, n_kv_heads, head_dim, ffn, vocab, max_pos;
    float rms_eps;
    bool tie_embeddings;
    int sliding_window;        /* W of the sliding layers */
    float attn_scale;          /* query_pre_attn_scalar ** -0.5, rounded to float32 */
    float embed_scale;         /* sqrt(hidden), rounded to float32 */
    float attn_softcap;        /* attn_logit_softcapping; 0 = off */
    float final_softcap;       /* final_logit_softcapping; 0 = off */
    gemma3_rope_t rope[2];     /* [GEMMA3_SLIDING], [GEMMA3_FULL] */
    uint8_t kind[GEMMA3_MAX_LAYERS]; /* [n_layers] gemma3_kind_t */
    /* The norm weights are stored as 1 + w (llama.cpp's converter adds the 1, in float32,
     * as HF computes it): the norms multiply by the stored weight. False for HF folders. */
    bool norm_weights_plus_one;
} gemma3_config_t;

/* The common config's geometry from the family's (layers, widths, heads, norm epsilon and
 * the full layers' RoPE, as cairn_model_config_t describes one kind); vocab, tied
 * embeddings and special tokens are the caller's. */
void gemma3_config_common(const gemma3_config_t *c, cairn_model_config_t *cfg);

/*
 * Parses a Gemma 3 config.json (hf: model_type "gemma3_text", or "gemma3" whose
 * "text_config" holds the text model) into the family's config *g and the common *cfg
 * (sizes, the full layers' RoPE theta, special tokens: eos/bos and tie_word_embeddings
 * may sit at either level of a gemma3 file; the text config wins). Defaults are
 * Gemma3TextConfig's.
 *
 * Layer kinds come from "layer_types" (each "sliding_attention" or "full_attention", one
 * per layer), else from "sliding_window_pattern" / "_sliding_window_pattern" P (layer i is
 * full when (i + 1) % P == 0; default 6). RoPE comes from "rope_parameters" keyed by
 * layer kind (transformers >= 5), or from "rope_local_base_freq" (sliding) and
 * "rope_theta" + "rope_scaling" (full); rope types "default" and "linear".
 *
 * Errors (message in err naming the field): CAIRN_EFORMAT for malformed or inconsistent
 * values; CAIRN_EUNSUPPORTED for a field that changes the math in a way not implemented
 * (attention_bias, use_bidirectional_attention, another hidden_activation, another rope
 * type, quantization_config) or another model_type. Pure; thread-safe.
 */
int gemma3_config_from_hf(const hf_config_t *hf, cairn_model_config_t *cfg, gemma3_config_t *g,
                          char *err, size_t err_len);

/* Per-layer weights, as mapped in their file dtype, [out][in] (HF layout). Norm weights
 * are Gemma's zero-centred w: the norms multiply by (1 + w) computed in float32, as HF's
 * `1.0 + self.weight.float()` (compute_rmsnorm with unit_offset). */
typedef struct {
    cairn_tensor_t wq;             /* [n_heads*head_dim, hidden]    self_attn.q_proj */
    cairn_tensor_t wk;             /* [n_kv_heads*head_dim, hidden] self_attn.k_proj */
    cairn_tensor_t wv;             /* [n_kv_heads*head_dim, hidden] self_attn.v_proj */
    cairn_tensor_t wo;             /* [hidden, n_heads*head_dim]    self_attn.o_proj */
    cairn_tensor_t w_gate;         /* [ffn, hidden]                 mlp.gate_proj */
    cairn_tensor_t w_up;           /* [ffn, hidden]                 mlp.up_proj */
    cairn_tensor_t w_down;         /* [hidden, ffn]                 mlp.down_proj */
    cairn_tensor_t attn_norm;      /* [hidden]   input_layernorm */
    cairn_tensor_t post_attn_norm; /* [hidden]   post_attention_layernorm */
    cairn_tensor_t pre_ffn_norm;   /* [hidden]   pre_feedforward_layernorm */
    cairn_tensor_t post_ffn_norm;  /* [hidden]   post_feedforward_layernorm */
    cairn_tensor_t q_norm;         /* [head_dim] self_attn.q_norm */
    cairn_tensor_t k_norm;         /* [head_dim] self_attn.k_norm */
} gemma3_layer_t;

typedef struct {
    cairn_tensor_t embed;       /* [vocab, hidden] embed_tokens */
    cairn_tensor_t lm_head;     /* [vocab, hidden] lm_head, or embed when tied */
    cairn_tensor_t norm;        /* [hidden] final norm */
    gemma3_layer_t *layers;     /* [n_layers] */
} gemma3_weights_t;

/*
 * Binds every tensor of the text model from ts (fmt_tensors_bind: name and shape), under
 * the first prefix that holds "embed_tokens.weight": "model." (Gemma3ForCausalLM),
 * "model.language_model." (transformers 5 Gemma3ForConditionalGeneration) or
 * "language_model.model." (older multimodal checkpoints). lm_head.weight is bound when
 * untied. On success w owns its layer array: free with gemma3_weights_fini. Errors from
 * fmt_tensors_bind pass through (err names the tensor); CAIRN_ENOMEM.
 */
int gemma3_weights_bind(gemma3_weights_t *w, const gemma3_config_t *c, fmt_tensors_t *ts,
                        char *err, size_t err_len);
/* Whether a tensor the text model leaves unbound may sit in the folder: the vision tower
 * and projector of a gemma3 (multimodal) checkpoint, rotary inv_freq buffers, and
 * lm_head.weight of a tied model (transformers ignores all of them). */
bool gemma3_ignore_tensor(const void *priv, const cairn_model_config_t *cfg, const char *name);
void gemma3_weights_fini(gemma3_weights_t *w);

/* The family's state of one model (cairn_model_t.priv). */
typedef struct {
    gemma3_config_t cfg;
    gemma3_weights_t w;
} gemma3_t;

extern const cairn_family_t cairn_family_gemma3;

/*
 * GGUF files of general.architecture "gemma3" (gemma3_gguf.c, docs/FORMAT.md 3.5): the
 * family's parse_gguf and gguf_tensor_name (models/family.h). llama.cpp's meaning: every
 * 6th layer full (gemma3.attention.sliding_window_pattern may say otherwise: a period, or
 * a per-layer bool array, true = sliding), sliding layers' RoPE base 10000
 * (gemma3.rope.freq_base_swa), attention scale 1/sqrt(key_length) (1/sqrt(hidden/heads)
 * for the 62-layer 27B), embedding scale sqrt(hidden), norm weights stored as 1 + w.
 */
int gemma3_parse_gguf(const gguf_file_t *g, const char *arch, cairn_model_config_t *cfg,
                      void **priv, char *err, size_t err_len);
bool gemma3_gguf_tensor_name(const void *priv, const cairn_model_config_t *cfg, const char *name,
                             char *buf, size_t cap, int *permute_heads);

/* ---- forward pass ---- */

/* The forward context: scratch of one step, RoPE tables, the backend's attention states. */
typedef struct gemma3_fwd gemma3_fwd_t;

/* The family's fwd_create / fwd_destroy / fwd_step (gemma3_forward.c): one batched step
 * under the contract of models/family.h, every op on env->be. */
int gemma3_fwd_create(const cairn_model_t *m, const cairn_fwd_env_t *env, void **fwd);
void gemma3_fwd_destroy(void *fwd);
int gemma3_fwd_step(void *fwd, const cairn_fwd_batch_t *batch);

#endif
