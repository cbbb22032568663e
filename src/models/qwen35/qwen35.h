/*
 * models/qwen35/qwen35.h — the Qwen3.5 family (HF model_type "qwen3_5_text", and "qwen3_5"
 * whose "text_config" holds the text model): a hybrid decoder whose layers are either
 * Gated DeltaNet linear attention (a recurrent state per sequence) or gated full
 * attention (K/V rows per position), per config "layer_types".
 *
 * Model (HF Qwen3_5ForCausalLM, transformers 5.17, float32 compute):
 *
 *   x = embed[token]
 *   for each layer:
 *       h = rmsnorm(x) * (1 + attn_norm)                    all norms but one are (1 + w)
 *       linear_attention (Gated DeltaNet):
 *           qkv = h Wqkv^T   [q: Hk*dk | k: Hk*dk | v: Hv*dv]  (in_proj_qkv)
 *           z = h Wz^T [Hv*dv],  b = h Wb^T [Hv],  a = h Wa^T [Hv]
 *           qkv = silu(causal depthwise conv1d over time, K taps, no bias)(qkv)
 *           q, k = l2norm(q), l2norm(k) per key head (eps 1e-6);  q = q / sqrt(dk)
 *           beta = sigmoid(b);  g = -exp(A_log) * softplus(a + dt_bias)
 *           per value head vh (key head vh / (Hv / Hk)), state S [dk][dv]:
 *               S = exp(g) S;  d = beta (v - S^T k);  S = S + k d^T;  o = S^T q
 *           o = rmsnorm(o) * norm_w * silu(z)   per value head (plain w, not 1 + w)
 *           y = o Wout^T
 *       full_attention (gated):
 *           [q | gate] per head = h Wq^T  (2 * head_dim per head, q first)
 *           k, v = h Wk^T, h Wv^T
 *           q, k = rmsnorm per head * (1 + q_norm), (1 + k_norm)
 *           q, k = rope on the first rope_dim dims of each head (partial rotary)
 *           y = (softmax(q k^T / sqrt(head_dim)) v * sigmoid(gate)) Wo^T
 *       x = x + y
 *       x = x + silu(rmsnorm(x) (1 + ffn_norm) Wgate^T) * (... Wup^T)) Wdown^T
 *   logits = (rmsnorm(x) * (1 + norm)) Wlm^T
 *
 * Exactness: the delta rule is run as the sequential per-token recurrence (one state
 * update per token, in a fixed order), so a token's bits do not depend on how its
 * predecessors were chunked into calls, on the other sequences in a call, or on the thread
 * count. HF's prefill uses a chunked (64-token) form of the same recurrence, which is equal
 * in exact arithmetic but rounds differently: the reference fixtures are reproduced to
 * float32 rounding, not bit for bit.
 *
 * Internal to src/models/qwen35/ (and its tests); the engine sees only the vtable
 * cairn_family_qwen35 (qwen35_family.c).
 *
 * Thread-safety: config and weights are immutable after bind; a q35_fwd_t and each
 * sequence's state handle are used by one step at a time.
 */
#ifndef CAIRN_MODELS_QWEN35_H
#define CAIRN_MODELS_QWEN35_H

#include "compute/backend.h"
#include "models/family.h"

#define Q35_MAX_LAYERS 512

typedef enum { Q35_LAYER_LINEAR = 0, Q35_LAYER_FULL = 1 } q35_layer_kind_t;

typedef struct {
    /* A copy of the common config the family reports (cairn_model_t.cfg: n_layers,
     * hidden, n_heads, n_kv_heads, head_dim, ffn, vocab, rms_eps, tie_embeddings,
     * rope_theta ...), for the forward pass; eos ids are merged into cairn_model_t.cfg only. */
    cairn_model_config_t base;
    int rope_dim;             /* int(head_dim * partial_rotary_factor), even, >= 2 */
    /* Gated DeltaNet. */
    int lin_k_heads;          /* linear_num_key_heads (Hk) */
    int lin_v_heads;          /* linear_num_value_heads (Hv, a multiple of Hk) */
    int lin_k_dim;            /* linear_key_head_dim (dk) */
    int lin_v_dim;            /* linear_value_head_dim (dv) */
    int conv_kernel;          /* linear_conv_kernel_dim (K >= 1) */
    int n_linear, n_full;     /* layer counts by kind */
    uint8_t kind[Q35_MAX_LAYERS];   /* q35_layer_kind_t per layer */
    int16_t slot[Q35_MAX_LAYERS];   /* ordinal of the layer among layers of its kind */
    /* Tensor name prefix of the text model: "model." or "model.language_model.". */
    char prefix[32];
    /* GGUF files (qwen35_gguf.c), as llama.cpp's converter stores them; all false for HF
     * folders:
     *   norms_plus_one  the (1 + w) norms are stored as 1 + w: applied as plain w;
     *   a_neg_exp       linear_attn.A_log is stored as ssm_a = -exp(A_log);
     *   conv_squeezed   conv1d is [conv_dim, K], not [conv_dim, 1, K];
     *   v_tiled         with Hk < Hv, every tensor indexed by value head holds the heads in
     *                   llama.cpp's tiled order (tiled head j * Hk + kh is HF's head
     *                   kh * (Hv / Hk) + j): bind restores HF's order where it can (the
     *                   conv taps, -exp(A_log), dt_bias, a float out_proj's columns) and
     *                   the forward pass permutes the activations of the rest. */
    bool norms_plus_one, a_neg_exp, conv_squeezed, v_tiled;
} q35_config_t;

/* HF's (grouped) value head of tiled position p, Hk key heads, Hv value heads. */
static inline int q35_v_grouped(int p, int Hk, int Hv)
{
    return (p % Hk) * (Hv / Hk) + p / Hk;
}

/* Derived sizes. */
static inline int q35_key_dim(const q35_config_t *c) { return c->lin_k_heads * c->lin_k_dim; }
static inline int q35_value_dim(const q35_config_t *c) { return c->lin_v_heads * c->lin_v_dim; }
/* Channels of the causal conv: q, k and v. */
static inline int q35_conv_dim(const q35_config_t *c) { return 2 * q35_key_dim(c) + q35_value_dim(c); }

/* ---- weights ---- */

typedef struct {
    q35_layer_kind_t kind;
    cairn_tensor_t attn_norm;   /* [hidden]        input_layernorm, applied as (1 + w) */
    cairn_tensor_t ffn_norm;    /* [hidden]        post_attention_layernorm, (1 + w) */
    cairn_tensor_t w_gate;      /* [ffn, hidden]   mlp.gate_proj */
    cairn_tensor_t w_up;        /* [ffn, hidden]   mlp.up_proj */
    cairn_tensor_t w_down;      /* [hidden, ffn]   mlp.down_proj */
    /* linear_attention */
    cairn_tensor_t in_qkv;      /* [conv_dim, hidden]  linear_attn.in_proj_qkv: q, k, v rows */
    cairn_tensor_t in_z;        /* [Hv*dv, hidden]     linear_attn.in_proj_z */
    cairn_tensor_t in_b;        /* [Hv, hidden]        linear_attn.in_proj_b */
    cairn_tensor_t in_a;        /* [Hv, hidden]        linear_attn.in_proj_a */
    cairn_tensor_t out_proj;    /* [hidden, Hv*dv]     linear_attn.out_proj */
    cairn_tensor_t gnorm;       /* [dv]  linear_attn.norm.weight, applied as plain w */
    cairn_tensor_t conv;        /* [conv_dim, 1, K]  linear_attn.conv1d.weight: q, k, v channels
                                   ([conv_dim, K] from GGUF) */
    bool out_proj_tiled;        /* GGUF v_tiled: out_proj's columns are in the tiled head
                                   order (a quantized tensor), so the forward pass feeds it
                                   the tiled activations */
    float *neg_a;               /* [Hv]  -exp(A_log) */
    float *dt_bias;             /* [Hv]  dt_bias */
    /* full_attention */
    cairn_tensor_t wq;          /* [n_heads*2*head_dim, hidden]  self_attn.q_proj (q|gate per head) */
    cairn_tensor_t wk;          /* [n_kv_heads*head_dim, hidden] self_attn.k_proj */
    cairn_tensor_t wv;          /* [n_kv_heads*head_dim, hidden] self_attn.v_proj */
    cairn_tensor_t wo;          /* [hidden, n_heads*head_dim]    self_attn.o_proj */
    cairn_tensor_t q_norm;      /* [head_dim]  (1 + w) */
    cairn_tensor_t k_norm;      /* [head_dim]  (1 + w) */
} q35_layer_t;

typedef struct {
    cairn_tensor_t embed;       /* [vocab, hidden] */
    cairn_tensor_t lm_head;     /* [vocab, hidden] (== embed when tied) */
    cairn_tensor_t norm;        /* [hidden]  (1 + w) */
    q35_layer_t *layers;        /* [n_layers] */
} q35_weights_t;

/* The family's state of one model (cairn_model_t.priv). */
typedef struct {
    q35_config_t cfg;
    q35_weights_t w;
    float *arena;               /* the derived float32 tables of w (neg_a, dt_bias; GGUF
                                   v_tiled: the conv taps in HF's order) */
    size_t arena_used, arena_len;
    unsigned char *copies;      /* GGUF v_tiled: float out_proj tensors, columns in HF order */
    size_t copies_used, copies_len;
} q35_t;

extern const cairn_family_t cairn_family_qwen35;

/* The family's config of a qwen35 model; NULL for a model of another family. */
const q35_config_t *q35_model_config(const cairn_model_t *m);
const q35_weights_t *q35_model_weights(const cairn_model_t *m);

/*
 * config.json -> common config + q35_t (qwen35_config.c). model_type "qwen3_5_text", or
 * "qwen3_5" with the text model in text_config (hf->text). Defaults follow
 * Qwen3_5TextConfig (layer_types from full_attention_interval 4, partial_rotary_factor
 * 0.25, rms_norm_eps 1e-6, conv kernel 4, head_dim 256, rope_theta 10000). Fields that
 * would change the math and are not implemented (attention_bias, hidden_act other than
 * silu, a rope type other than default, quantization_config, unknown layer types, MoE
 * fields) are CAIRN_EUNSUPPORTED naming the field; missing or inconsistent sizes
 * CAIRN_EFORMAT.
 */
int q35_parse_config(const hf_config_t *hf, cairn_model_config_t *cfg, void **priv, char *err,
                     size_t err_len);
/*
 * Binds every tensor the config implies (qwen35_weights.c), checking shapes, and derives
 * the float32 tables. The vision tower ("model.visual.*") and the MTP head ("mtp.*") are
 * left unbound on purpose (q35_ignore_tensor), as transformers does for text.
 */
int q35_bind(void *priv, const cairn_model_config_t *cfg, fmt_tensors_t *ts, char *err,
             size_t err_len);
bool q35_ignore_tensor(const void *priv, const cairn_model_config_t *cfg, const char *name);
void q35_destroy(void *priv);

/*
 * GGUF files of general.architecture "qwen35" (qwen35_gguf.c, docs/FORMAT.md 3.5): the
 * family's parse_gguf and gguf_tensor_name (models/family.h).
 */
int q35_parse_gguf(const gguf_file_t *g, const char *arch, cairn_model_config_t *cfg,
                   void **priv, char *err, size_t err_len);
bool q35_gguf_tensor_name(const void *priv, const cairn_model_config_t *cfg, const char *name,
                          char *buf, size_t cap, int *permute_heads);

/* ---- per-sequence recurrent state ---- */

/*
 * Each linear-attention layer keeps, per sequence, float32:
 *   conv_q [K-1][Hk*dk], conv_k [K-1][Hk*dk], conv_v [K-1][Hv*dv]
 *                          the last K-1 pre-conv rows of q, k and v (oldest first)
 *   rec  [Hv][dk][dv]      the delta-rule state S of each value head
 * in that order, q35_layer_state_bytes() bytes: the state_bytes of the layer's RECURRENT
 * cache entry. It lives in the sequence's state handle (models/family.h), layer l at
 * state + cairn_model_state_offset(l). A zeroed part is HF's initial state.
 */
size_t q35_layer_state_bytes(const q35_config_t *c);

/* ---- forward ---- */

typedef struct {
    const q35_config_t *cfg;
    const q35_weights_t *w;
    compute_backend_t *be;
    cairn_math_t math;
    cairn_dtype_t kv_dtype;
    int max_rows, max_positions;
    compute_attn_t *attn;  /* the backend's attention state of the full layers */
    float *inv_freq;       /* [rope_dim/2] */
    float *ones;           /* [max_rows * max(Hk*dk, Hv*dv, Hv)] 1.0f, the `up` of a plain
                              silu or sigmoid */
    size_t *state_off;     /* [n_layers] each layer's part of a state handle
                              (cairn_model_state_offset) */
    int *next_pos;         /* [max_rows] per sequence of a step: its next row position */
    int32_t *ids;          /* [max_rows] tokens */
    int *pos;              /* [max_rows] positions */
    /* Scratch of one call, row-major. */
    float *x;              /* [max_rows][hidden]  residual stream */
    float *xb;             /* [max_rows][hidden]  normed input of a sub-layer */
    float *xb2;            /* [max_rows][hidden]  sub-layer output */
    float *lq, *lk, *lv;   /* [max_rows][Hk*dk], [..][Hk*dk], [..][Hv*dv]  in_proj_qkv parts */
    float *cq, *ck, *cv;   /* the same after the causal conv and silu */
    float *z;              /* [max_rows][Hv*dv] */
    float *beta, *g;       /* [max_rows][Hv]  b then sigmoid(b); a then the log-decay g */
    float *core;           /* [max_rows][max(Hv*dv, n_heads*head_dim)]  mixer output */
    float *q2;             /* [max_rows][n_heads*2*head_dim]  q | gate per head */
    float *q;              /* [max_rows][n_heads*head_dim]  normed, rotated queries */
    float *gate;           /* [max_rows][n_heads*head_dim]  the attention output gate */
    float *k;              /* [max_rows][n_kv_heads*head_dim] */
    float *v;              /* [max_rows][n_kv_heads*head_dim] */
    float *hb;             /* [max_rows][ffn] */
    float *hb2;            /* [max_rows][ffn] */
    float *rope_cs;        /* [max_rows][rope_dim]  cos/sin pairs */
    attn_query_t *queries; /* [max_rows] */
    float *perm;           /* [Hv*dv]  one row of a head permutation (GGUF v_tiled) */
} q35_fwd_t;

/* The forward context (qwen35_forward.c): fwd_create / fwd_destroy / fwd_step. */
int q35_fwd_create(const cairn_model_t *m, const cairn_fwd_env_t *env, void **fwd);
void q35_fwd_destroy(void *fwd);
int q35_fwd_step(void *fwd, const cairn_fwd_batch_t *batch);

#endif
