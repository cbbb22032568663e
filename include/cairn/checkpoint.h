/*
 * cairn/checkpoint.h — Hugging Face checkpoint folders: config and memory-mapped weights.
 *
 * A checkpoint folder holds config.json, generation_config.json and either
 * model.safetensors or sharded model-0000x-of-0000y.safetensors with
 * model.safetensors.index.json (format: docs/FORMAT.md, "safetensors and checkpoint
 * folders"; the single file wins when both exist, as in transformers). Weights stay in
 * their file dtype (bf16, f16 or f32) and are memory-mapped read-only; the forward pass
 * converts to float32 as it computes.
 *
 * Errors: every entry point that reads input takes `err`/`err_len` and, on failure, writes
 * a one-line message naming the file and the problem (a missing tensor, a shape mismatch,
 * header offsets that lie, an unknown architecture or rope type). Bad input never crashes.
 *
 * Thread-safety: a checkpoint is immutable after open; any number of threads may read it.
 */
#ifndef CAIRN_CHECKPOINT_H
#define CAIRN_CHECKPOINT_H

#include "cairn/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CAIRN_ARCH_LLAMA = 0,  /* model_type "llama" (also Mistral-style dense GQA) */
    CAIRN_ARCH_QWEN3 = 1,  /* model_type "qwen3": per-head q/k RMSNorm, no qkv bias */
} cairn_arch_t;

typedef enum {
    CAIRN_ROPE_DEFAULT = 0, /* inv_freq[i] = theta^(-2i/d) */
    CAIRN_ROPE_LLAMA3 = 1,  /* Llama 3.1 frequency-dependent scaling */
} cairn_rope_type_t;

#define CAIRN_MAX_EOS 8

typedef struct {
    cairn_arch_t arch;
    char model_type[32];
    int n_layers;        /* num_hidden_layers */
    int hidden;          /* hidden_size */
    int n_heads;         /* num_attention_heads */
    int n_kv_heads;      /* num_key_value_heads (defaults to n_heads) */
    int head_dim;        /* head_dim (defaults to hidden / n_heads) */
    int ffn;             /* intermediate_size */
    int vocab;           /* vocab_size */
    int max_pos;         /* max_position_embeddings */
    float rms_eps;       /* rms_norm_eps */
    bool tie_embeddings; /* tie_word_embeddings: lm_head is embed_tokens */
    /* RoPE: from rope_parameters (transformers >= 5) or rope_theta/rope_scaling (older). */
    cairn_rope_type_t rope_type;
    float rope_theta;
    float rope_factor;              /* llama3: factor */
    float rope_low_freq_factor;     /* llama3: low_freq_factor */
    float rope_high_freq_factor;    /* llama3: high_freq_factor */
    int rope_orig_max_pos;          /* llama3: original_max_position_embeddings */
    int bos_id;                     /* -1 when null/absent */
    int n_eos;                      /* eos ids from config.json and generation_config.json */
    int eos_ids[CAIRN_MAX_EOS];
} cairn_model_config_t;

/*
 * Parses a config.json text (len bytes, need not be NUL-terminated) into *out. Unknown
 * model_type or rope type, missing or non-positive sizes, head counts that do not divide
 * are CAIRN_EUNSUPPORTED / CAIRN_EFORMAT with a message in err. Pure: allocates nothing
 * that outlives the call.
 *
 * Defaults follow the transformers config classes: n_kv_heads = n_heads; head_dim =
 * hidden / n_heads (llama) or 128 (qwen3); rope_theta 10000; rms_eps 1e-6; max_pos 2048
 * (llama) or 32768 (qwen3); untied. Fields that change the math and are not implemented
 * (attention_bias/mlp_bias true, an active sliding window, hidden_act other than silu,
 * quantization_config, partial rotary) are CAIRN_EUNSUPPORTED naming the field; other
 * unknown fields are ignored. model_type "mistral" is accepted as llama only with
 * sliding_window null.
 */
int cairn_model_config_parse(const char *json, size_t len, cairn_model_config_t *out,
                             char *err, size_t err_len);

/*
 * Adds the eos ids of a generation_config.json text to cfg (deduplicated, at most
 * CAIRN_MAX_EOS). A missing eos field is not an error.
 */
int cairn_generation_config_parse(const char *json, size_t len, cairn_model_config_t *cfg,
                                  char *err, size_t err_len);

/* A view of one tensor inside a mapped file. Row-major; shape[0] is the slowest axis. */
typedef struct {
    const void *data;   /* NULL when absent (optional tensors) */
    cairn_dtype_t dtype;
    int ndim;
    int64_t shape[4];
} cairn_tensor_t;

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
} cairn_layer_weights_t;

typedef struct {
    cairn_tensor_t embed;     /* [vocab, hidden]  model.embed_tokens */
    cairn_tensor_t norm;      /* [hidden]         model.norm */
    cairn_tensor_t lm_head;   /* [vocab, hidden]  lm_head (== embed when tied) */
    cairn_layer_weights_t *layers; /* [n_layers] */
} cairn_model_weights_t;

typedef struct cairn_checkpoint cairn_checkpoint_t;

/*
 * Opens a checkpoint folder: parses config.json and generation_config.json (optional),
 * maps every safetensors file, checks every expected tensor's presence, dtype and shape
 * against the config. On success *out owns the mappings; free with
 * cairn_checkpoint_close(). Cost: O(header sizes); weight pages are faulted in lazily
 * (readahead is requested with MADV_WILLNEED).
 *
 * Errors (err names the file and tensor): CAIRN_ENOENT (no config.json, no weights, a
 * shard the index names is missing, an expected tensor is missing), CAIRN_EFORMAT (bad
 * JSON, a header that lies about lengths, offsets or sizes, overlapping tensors, a shape
 * that disagrees with config.json, an index that disagrees with the shards),
 * CAIRN_EUNSUPPORTED (unknown model_type or rope type, a dtype other than BF16/F16/F32, a
 * tensor the config gives no use to, e.g. a bias), CAIRN_EIO, CAIRN_ENOMEM. Tensor data
 * pointers are aligned to their element size (a misaligned tensor is copied).
 */
int cairn_checkpoint_open(const char *dir, cairn_checkpoint_t **out, char *err, size_t err_len);
void cairn_checkpoint_close(cairn_checkpoint_t *ck);
const cairn_model_config_t *cairn_checkpoint_config(const cairn_checkpoint_t *ck);
const cairn_model_weights_t *cairn_checkpoint_weights(const cairn_checkpoint_t *ck);
/* The folder path as given to open (owned by ck). */
const char *cairn_checkpoint_dir(const cairn_checkpoint_t *ck);
/*
 * The weights digest of docs/FORMAT.md 1.5 (identical to cairn_cold_weights_digest() over
 * the checkpoint's files): SHA-256 over each safetensors file's name, header JSON bytes and
 * size, files sorted by name. Part of the cold tier's model fingerprint. Computed at open
 * (headers only); this call just copies it.
 */
void cairn_checkpoint_weights_digest(const cairn_checkpoint_t *ck, uint8_t out[32]);
/*
 * Total bytes of the weight tensors the model uses (each counted once: a tied lm_head adds
 * nothing), for bytes-per-token accounting. Headers and ignored tensors are not counted.
 */
uint64_t cairn_checkpoint_weight_bytes(const cairn_checkpoint_t *ck);

#ifdef __cplusplus
}
#endif
#endif
