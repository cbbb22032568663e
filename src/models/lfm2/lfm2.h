/*
 * models/lfm2/lfm2.h — the LFM2 family (Liquid AI LFM2, LFM2.5; HF model_type "lfm2"):
 * config, weights, per-sequence state and the batched forward pass.
 *
 * Model (HF Lfm2ForCausalLM, float32 compute). Every layer is either a gated short
 * convolution ("conv") or grouped-query attention with per-head q/k RMSNorm
 * ("full_attention"), chosen per layer by config.json `layer_types` (or `full_attn_idxs`);
 * both kinds are followed by the same SwiGLU feed-forward:
 *
 *   x = embed[token]
 *   for each layer:
 *       h = rmsnorm(x) * operator_norm
 *       conv:  B, C, u = split3(h Win^T)           in_proj rows: B, then C, then u
 *              s_t = B * u                          the gated input of the convolution
 *              c_t = sum_k w[k] s_{t-L+1+k}          causal depthwise, L = conv_L_cache taps
 *              a = (C * c_t) Wout^T                  conv.out_proj
 *       attn:  q, k, v = h Wq^T, h Wk^T, h Wv^T
 *              q, k = rmsnorm per head * q_layernorm, k_layernorm
 *              q, k = rope(q, pos), rope(k, pos)    rotate_half pairing, default rope
 *              a = softmax(q k^T / sqrt(head_dim)) v  Wout^T
 *       x = x + a
 *       h = rmsnorm(x) * ffn_norm
 *       x = x + (silu(h W1^T) * (h W3^T)) W2^T      feed_forward.w1 / w3 / w2
 *   logits = (rmsnorm(x) * embedding_norm) Wlm^T    lm_head, or embed when tied
 *
 * (HF calls the final norm `embedding_norm`; it is applied after the last layer.)
 *
 * Per-sequence state. Attention layers keep K/V per position (through attn_kv_t, flat
 * or paged); a conv layer keeps only the last L-1 gated inputs s_{t-L+2..t}: its
 * recurrent state, lfm2_state_floats() floats per sequence, never in the K/V pool. The
 * convolution runs one token at a time in position order with a fixed summation order
 * (compute_short_conv), so the state after n tokens, and every logit, is the same bits
 * however the tokens were chunked into calls.
 *
 * Thread-safety: config and weights are immutable after creation; one lfm2_fwd_run at a
 * time per lfm2_fwd_t (its scratch is shared).
 */
#ifndef CAIRN_MODELS_LFM2_H
#define CAIRN_MODELS_LFM2_H

#include "compute/backend.h"
#include "models/family.h"

#define LFM2_MAX_LAYERS 512
#define LFM2_MAX_CONV_TAPS 64

typedef enum { LFM2_LAYER_CONV = 0, LFM2_LAYER_ATTN = 1 } lfm2_layer_kind_t;

typedef struct {
    /* Geometry shared with the dense families: hidden, n_layers, n_heads, n_kv_heads,
     * head_dim, ffn (the *effective* feed-forward width, see lfm2_config_parse), vocab,
     * max_pos, rms_eps (= norm_eps), tie_embeddings, rope (default type only), bos/eos.
     * base.arch has no meaning for this family; base.model_type is "lfm2". */
    cairn_model_config_t base;
    int conv_taps;                         /* conv_L_cache: taps L of the depthwise conv */
    int n_attn, n_conv;                    /* layers of each kind */
    uint8_t kind[LFM2_MAX_LAYERS];         /* lfm2_layer_kind_t per layer */
    int slot[LFM2_MAX_LAYERS];             /* index of the layer among those of its kind */
    /* Per-sequence conv state (see "per-sequence recurrent state" below). */
    size_t state_layer_bytes;              /* (L-1) * hidden * 4: one conv layer's part */
    size_t state_off[LFM2_MAX_LAYERS];     /* byte offset of conv layer l's part */
    size_t state_bytes;                    /* the whole state of one sequence */
    /* GGUF: the conv weight is stored squeezed to [hidden, L] (llama.cpp's converter),
     * not HF's [hidden, 1, L]; the same bytes. */
    bool conv_squeezed;
    /* GGUF: the file's name of the final norm ("token_embd_norm.weight" as llama.cpp's
     * converter writes it, or "output_norm.weight"); empty for HF folders. */
    char gguf_final_norm[32];
} lfm2_config_t;

/*
 * Parses the text model's fields `o` (config.json, model_type "lfm2") into *out
 * (transformers Lfm2Config semantics):
 *   - layer kinds from `layer_types` ("conv" / "full_attention"), else `full_attn_idxs`,
 *     else every layer is attention;
 *   - intermediate_size (alias `block_ff_dim`); when block_auto_adjust_ff_dim (default
 *     true) the feed-forward width is int(2 * size / 3), and when
 *     block_ffn_dim_multiplier (default 1.0) is not null, int(multiplier * that) rounded
 *     up to a multiple of block_multiple_of (default 256);
 *   - head_dim = hidden_size / num_attention_heads unless given; norm_eps 1e-5;
 *     tie_word_embeddings (alias `tie_embedding`) default true; RoPE from
 *     rope_parameters, or rope_theta / theta (default 1e6) and rope_scaling, as
 *     formats/hf_config.h reads them; conv_L_cache default 3.
 * Fields that change the math and are not implemented are CAIRN_EUNSUPPORTED naming the
 * field (conv_bias true, an unsupported rope type, partial rotary,
 * quantization_config); missing or inconsistent sizes are CAIRN_EFORMAT. base.family and
 * base.model_type are left to the caller. Pure.
 */
int lfm2_config_parse(const cJSON *o, lfm2_config_t *out, char *err, size_t err_len);
/* Fills state_layer_bytes, state_off[] and state_bytes from conv_taps, hidden and kind[]
 * (the parsers call it once the layer kinds are known). */
void lfm2_config_layout_state(lfm2_config_t *cfg);

/*
 * GGUF files of general.architecture "lfm2" (lfm2_gguf.c, docs/FORMAT.md 3.5): the
 * family's parse_gguf and gguf_tensor_name (models/family.h). Layer kinds come from
 * lfm2.attention.head_count_kv, a per-layer array (0: a conv layer), as llama.cpp reads
 * them; feed_forward_length is the effective width.
 */
int lfm2_parse_gguf(const gguf_file_t *g, const char *arch, cairn_model_config_t *cfg,
                    void **priv, char *err, size_t err_len);
bool lfm2_gguf_tensor_name(const void *priv, const cairn_model_config_t *cfg, const char *name,
                           char *buf, size_t cap, int *permute_heads);

/* The same from config.json text (len bytes), for tests and tools. Also CAIRN_ENOMEM. */
int lfm2_config_parse_text(const char *json, size_t len, lfm2_config_t *out, char *err,
                           size_t err_len);

/* Per-layer weights (HF [out, in] order). Conv layers bind only the conv fields,
 * attention layers only the attention fields; the rest are absent (data NULL). */
typedef struct {
    cairn_tensor_t operator_norm; /* [hidden]                  operator_norm */
    cairn_tensor_t ffn_norm;      /* [hidden]                  ffn_norm */
    cairn_tensor_t w1;            /* [ffn, hidden]             feed_forward.w1 (gate) */
    cairn_tensor_t w3;            /* [ffn, hidden]             feed_forward.w3 (up) */
    cairn_tensor_t w2;            /* [hidden, ffn]             feed_forward.w2 (down) */
    /* conv */
    cairn_tensor_t in_proj;       /* [3*hidden, hidden]        conv.in_proj: B, C, u rows */
    cairn_tensor_t conv;          /* [hidden, 1, L]            conv.conv (depthwise taps) */
    cairn_tensor_t conv_out;      /* [hidden, hidden]          conv.out_proj */
    /* attention */
    cairn_tensor_t wq;            /* [n_heads*head_dim, hidden]    self_attn.q_proj */
    cairn_tensor_t wk;            /* [n_kv_heads*head_dim, hidden] self_attn.k_proj */
    cairn_tensor_t wv;            /* [n_kv_heads*head_dim, hidden] self_attn.v_proj */
    cairn_tensor_t wo;            /* [hidden, n_heads*head_dim]    self_attn.out_proj */
    cairn_tensor_t q_norm;        /* [head_dim]                    self_attn.q_layernorm */
    cairn_tensor_t k_norm;        /* [head_dim]                    self_attn.k_layernorm */
} lfm2_layer_weights_t;

typedef struct {
    cairn_tensor_t embed;         /* [vocab, hidden]  model.embed_tokens */
    cairn_tensor_t norm;          /* [hidden]         model.embedding_norm (final norm) */
    cairn_tensor_t lm_head;       /* [vocab, hidden]  lm_head; data NULL when tied */
    lfm2_layer_weights_t *layers; /* [n_layers], owned (lfm2_weights_fini) */
} lfm2_weights_t;

/*
 * Binds every tensor the config needs (fmt_tensors_bind: name and the shape config.json
 * implies). Names are the HF ones ("model.layers.3.conv.in_proj.weight", ...). Errors:
 * the binder's (CAIRN_ENOENT missing, CAIRN_EFORMAT another shape), CAIRN_ENOMEM. A tied
 * checkpoint may also carry lm_head.weight, which stays unbound (lfm2_weights_ignored
 * accepts it), as HF ignores it.
 */
int lfm2_weights_bind(const lfm2_config_t *cfg, fmt_tensors_t *ts, lfm2_weights_t *out,
                      char *err, size_t err_len);
void lfm2_weights_fini(lfm2_weights_t *w);
/* Whether an unbound tensor is expected anyway: lm_head.weight of a tied checkpoint. */
bool lfm2_weights_ignored(const lfm2_config_t *cfg, const char *name);

/* The family's state of one model (cairn_model_t.priv). */
typedef struct {
    lfm2_config_t cfg;
    lfm2_weights_t w;
} lfm2_t;

extern const cairn_family_t cairn_family_lfm2;

/* The family's model of a checkpoint of this family; NULL for another family. */
const lfm2_t *lfm2_of(const cairn_model_t *m);

/* The vtable's entries (lfm2_config.c, lfm2_weights.c, lfm2_forward.c). */
int lfm2_parse_config(const hf_config_t *hf, cairn_model_config_t *cfg, void **priv, char *err,
                      size_t err_len);
int lfm2_bind(void *priv, const cairn_model_config_t *cfg, fmt_tensors_t *ts, char *err,
              size_t err_len);
bool lfm2_ignore_tensor(const void *priv, const cairn_model_config_t *cfg, const char *name);
void lfm2_destroy(void *priv);
int lfm2_fwd_create(const cairn_model_t *m, const cairn_fwd_env_t *env, void **fwd);
void lfm2_fwd_destroy(void *fwd);
int lfm2_fwd_step(void *fwd, const cairn_fwd_batch_t *batch);

/* ---- per-sequence recurrent state ------------------------------------------------- */

/*
 * One sequence's state is cfg->state_bytes: for every conv layer, in layer order, a part
 * of state_layer_bytes = [L-1][hidden] float32, the gated inputs s_{t-L+2..t} oldest
 * first, at byte offset state_off[l] (each part 64-byte aligned: the rule of
 * models/family.h's state handle). A fresh sequence is all zeros (HF pads the
 * convolution's input with zeros).
 */
static inline float *lfm2_state_layer(const lfm2_config_t *cfg, void *state, int layer)
{
    return (float *)((unsigned char *)state + cfg->state_off[layer]);
}

/* ---- forward ---------------------------------------------------------------------- */

typedef struct {
    const lfm2_config_t *cfg;
    const lfm2_weights_t *w;
    compute_backend_t *be; /* every op runs here */
    cairn_math_t math;
    cairn_dtype_t kv_dtype;
    int max_rows;
    float *inv_freq;       /* [head_dim/2] */
    /* Scratch of one call, row-major (backend memory: host memory on the CPU backend). */
    float *x;              /* [max_rows][hidden]   residual stream */
    float *xb;             /* [max_rows][hidden]   normed input of a sub-layer */
    float *xb2;            /* [max_rows][hidden]   sub-layer output */
    float *cb, *cc, *cu;   /* [max_rows][hidden]   conv in_proj thirds: B, C, u (then B*u) */
    float *cy;             /* [max_rows][hidden]   conv(B*u), then C * that */
    float *q;              /* [max_rows][n_heads*head_dim] */
    float *k;              /* [max_rows][n_kv_heads*head_dim] */
    float *v;              /* [max_rows][n_kv_heads*head_dim] */
    float *att;            /* [max_rows][n_heads*head_dim] */
    float *hb;             /* [max_rows][ffn] gate, then silu(gate)*up */
    float *hb2;            /* [max_rows][ffn] up */
    float *rope_cs;        /* [max_rows][head_dim] cos/sin pairs per row */
    int32_t *ids;          /* [max_rows] token of each row */
    int *pos;              /* [max_rows] position of each row */
    attn_query_t *queries; /* [max_rows] */
    compute_attn_t *attn;  /* the backend's attention state (NULL without attention layers) */
} lfm2_fwd_t;

/* Checks that the backend runs every op and type the model needs, allocates the scratch
 * of max_rows rows and the attention state, computes the RoPE table. CAIRN_EUNSUPPORTED
 * (an op or type the backend lacks, a rope type), CAIRN_ENOMEM. (The family's fwd_create
 * wraps it.) */
int lfm2_fwd_init(lfm2_fwd_t *f, const lfm2_config_t *cfg, const lfm2_weights_t *w,
                  compute_backend_t *be, cairn_math_t math, cairn_dtype_t kv_dtype, int max_rows,
                  int max_positions);
void lfm2_fwd_fini(lfm2_fwd_t *f);

/*
 * One batched step (the contract of models/family.h fwd_step): every row of b through
 * every layer. b->seqs[row.seq].kv stores and reads the attention layers' K/V (called
 * with the model layer index); b->seqs[row.seq].state is that sequence's conv state
 * (cfg->state_bytes), advanced in place by every row in row order. A sequence's rows are
 * in increasing, consecutive positions continuing what its K/V and state already hold.
 * Logits [vocab] go to b->logits + out_row * vocab for rows with out_row >= 0.
 */
void lfm2_fwd_run(lfm2_fwd_t *f, const cairn_fwd_batch_t *b);

#endif
