/*
 * cairn/checkpoint.h — Hugging Face checkpoint folders: config and weights, bound to the
 * model family that reads them.
 *
 * A checkpoint folder holds config.json, generation_config.json and either
 * model.safetensors or sharded model-0000x-of-0000y.safetensors with
 * model.safetensors.index.json (format: docs/FORMAT.md, "safetensors and checkpoint
 * folders"; the single file wins when both exist, as in transformers). config.json's
 * model_type picks the model family (src/models/, one folder per family); the family
 * parses the rest of the config and binds the tensors it uses. Weights stay in their file
 * dtype (bf16, f16 or f32); the forward pass converts to float32 as it computes.
 *
 * Errors: every entry point that reads input takes `err`/`err_len` and, on failure, writes
 * a one-line message naming the file and the problem (a missing tensor, a shape mismatch,
 * header offsets that lie, an unknown model_type or rope type). Bad input never crashes.
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
    CAIRN_ROPE_DEFAULT = 0, /* inv_freq[i] = theta^(-2i/d) */
    CAIRN_ROPE_LLAMA3 = 1,  /* Llama 3.1 frequency-dependent scaling */
} cairn_rope_type_t;

#define CAIRN_MAX_EOS 8

/*
 * The config every family reports: the decoder's sizes in HF's vocabulary, RoPE of its
 * (full-attention) layers and the special tokens. For families whose layers differ
 * (sliding and full attention, convolution and attention) these are the attention layers'
 * values; the family keeps everything else in its own config.
 */
typedef struct {
    char family[16];     /* the model family that reads it ("llama"): src/models/<family> */
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
 * Parses a config.json text (len bytes, need not be NUL-terminated) into *out through the
 * family its model_type names. An unknown model_type is CAIRN_EUNSUPPORTED naming it;
 * malformed JSON CAIRN_EFORMAT ("not valid JSON"); allocation failures CAIRN_ENOMEM; the
 * family's own checks (missing or non-positive sizes, head counts that do not divide,
 * fields that change the math and are not implemented) CAIRN_EFORMAT /
 * CAIRN_EUNSUPPORTED naming the field. Allocates nothing that outlives the call. Defaults
 * follow the transformers config class of the model_type (each family's parse_config,
 * src/models/<family>/, documents its own); unknown fields are ignored.
 */
CAIRN_API int cairn_model_config_parse(const char *json, size_t len, cairn_model_config_t *out,
                             char *err, size_t err_len);

/*
 * Adds the eos ids of a generation_config.json text to cfg (deduplicated, at most
 * CAIRN_MAX_EOS). A missing eos field is not an error.
 */
CAIRN_API int cairn_generation_config_parse(const char *json, size_t len, cairn_model_config_t *cfg,
                                  char *err, size_t err_len);

/* A view of one tensor of the checkpoint's weights. Row-major; shape[0] is the slowest axis. */
typedef struct {
    const void *data;   /* NULL when absent (optional tensors) */
    cairn_dtype_t dtype;
    int ndim;
    int64_t shape[4];
} cairn_tensor_t;

typedef struct cairn_checkpoint cairn_checkpoint_t;

/*
 * Opens a checkpoint: a folder, or a GGUF file (a regular file at `dir`: its metadata is
 * parsed by the family its general.architecture names and its tensors bound the same
 * way; format and refusals in docs/FORMAT.md section 3).
 *
 * A folder: parses config.json through its family and
 * generation_config.json (optional), opens every safetensors file, and lets the family
 * bind every tensor it needs, checking presence, dtype and shape against the config; a
 * tensor the family gives no use to is an error. On success *out owns the weights; free
 * with cairn_checkpoint_close().
 *
 * Cost: each safetensors file is mapped read-only; by default (knob CAIRN_WEIGHTS_ANON)
 * a file that takes at most half of MemAvailable is then read once into anonymous huge
 * pages and the mapping dropped (docs/DESIGN.md, "Mapped, then copied"): open costs one
 * sequential read of the weights and resident memory equal to their size.
 * CAIRN_WEIGHTS_ANON=0 keeps the mapping (O(header) open, pages faulted in lazily with
 * MADV_WILLNEED readahead); =1 always copies.
 *
 * Errors (err names the file and tensor): CAIRN_ENOENT (no config.json, no weights, a
 * shard the index names is missing, an expected tensor is missing), CAIRN_EFORMAT (bad
 * JSON, a header that lies about lengths, offsets or sizes, overlapping tensors, a shape
 * that disagrees with config.json, an index that disagrees with the shards),
 * CAIRN_EUNSUPPORTED (unknown model_type or rope type, a dtype other than BF16/F16/F32, a
 * tensor the config gives no use to, e.g. a bias), CAIRN_EIO, CAIRN_ENOMEM. Tensor data
 * pointers are aligned to their element size (a misaligned tensor is copied).
 */
CAIRN_API int cairn_checkpoint_open(const char *dir, cairn_checkpoint_t **out, char *err, size_t err_len);
/*
 * As cairn_checkpoint_open, with every float weight matrix (f32/f16/bf16, 2-D, rows whole
 * blocks of the type: the projections, the embedding and lm_head) converted at bind time
 * to `quantize` by the element-type table's reference rounding (`--quantize`); norms and
 * tensors the file already stores quantized stay. quantize must be q8_0, q4_0, q4_k, q5_k or
 * q6_k (else CAIRN_EINVAL). The weights digest becomes the source's mixed with the type, so
 * the cold tier never mixes the converted model's K/V with the original's. Cost: one pass
 * over the weights at open (q8_0: well under a second, q4_k: its least-squares scale fit,
 * ~10 s per 0.6B weights on one core of the development machine) and the converted bytes
 * resident beside the source.
 */
CAIRN_API int cairn_checkpoint_open_quantized(const char *path, cairn_dtype_t quantize, cairn_checkpoint_t **out,
                                              char *err, size_t err_len);
CAIRN_API void cairn_checkpoint_close(cairn_checkpoint_t *ck);
CAIRN_API const cairn_model_config_t *cairn_checkpoint_config(const cairn_checkpoint_t *ck);
/* The folder path as given to open (owned by ck). */
CAIRN_API const char *cairn_checkpoint_dir(const cairn_checkpoint_t *ck);
/*
 * The weights digest of docs/FORMAT.md 1.5 (identical to cairn_cold_weights_digest() over
 * the checkpoint's files): SHA-256 over each safetensors file's name, header JSON bytes and
 * size, files sorted by name; for a GGUF file, one file "model.gguf" whose header is its
 * bytes before the data section (FORMAT 3.4). Part of the cold tier's model fingerprint. Computed at open
 * (headers only); this call just copies it.
 */
CAIRN_API void cairn_checkpoint_weights_digest(const cairn_checkpoint_t *ck, uint8_t out[32]);
/*
 * Total bytes of the weight tensors the model uses (each counted once: a tied lm_head adds
 * nothing), for bytes-per-token accounting. Headers and ignored tensors are not counted.
 */
CAIRN_API uint64_t cairn_checkpoint_weight_bytes(const cairn_checkpoint_t *ck);

#ifdef __cplusplus
}
#endif
#endif
