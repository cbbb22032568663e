/*
 * models/gguf_hparams.h — what the families' GGUF readers (llama_gguf.c, gemma3_gguf.c,
 * lfm2_gguf.c, qwen35_gguf.c) share: llama.cpp's "<arch>.<key>" hyperparameters read with
 * range checks, the parts of the common config every llama.cpp architecture stores the
 * same way (vocabulary = token_embd's rows, tied embeddings = no output.weight,
 * bos/eos/eot/eom ids), the parse_gguf frame (a private state allocated, filled, freed on
 * error) and the HF -> llama.cpp tensor name map by table ("model.layers.N.x" ->
 * "blk.N.y"). What a family reads differently stays in its own file.
 *
 * Every error names the file (gguf_what) and the key. Pure functions; thread-safe.
 */
#ifndef CAIRN_MODELS_GGUF_HPARAMS_H
#define CAIRN_MODELS_GGUF_HPARAMS_H

#include <stdint.h>

#include "cairn/checkpoint.h"
#include "formats/gguf.h"

/* "<arch>.<suffix>" into buf[cap]; returns buf. */
const char *ghp_key(char *buf, size_t cap, const char *arch, const char *suffix);

/*
 * The integer <arch>.<suffix> into *out, in [lo, hi]; absent: dflt, or CAIRN_ENOENT when
 * required. A per-layer array is CAIRN_EUNSUPPORTED, another type or a value out of range
 * CAIRN_EFORMAT.
 */
int ghp_dim(const gguf_file_t *g, const char *arch, const char *suffix, bool required, int dflt,
            int lo, int hi, int *out, char *err, size_t err_len);

/* The float <arch>.<suffix>, > 0 (absent: dflt, or CAIRN_ENOENT when required). */
int ghp_pos_float(const gguf_file_t *g, const char *arch, const char *suffix, bool required,
                  float dflt, float *out, char *err, size_t err_len);

/* CAIRN_EUNSUPPORTED naming the key when <arch>.<suffix> is present (a value the family's
 * forward pass does not implement, whatever it is). */
int ghp_refuse(const gguf_file_t *g, const char *arch, const char *suffix, char *err,
               size_t err_len);

/*
 * cfg->vocab (token_embd.weight's rows, [hidden, vocab] in ggml order, its row length
 * checked against cfg->hidden; <arch>.vocab_size must agree when present),
 * cfg->tie_embeddings (no output.weight), cfg->bos_id (-1 when absent) and cfg->eos_ids
 * (tokenizer.ggml.eos / eot / eom_token_id, deduplicated). Errors: CAIRN_ENOENT (no
 * token_embd.weight), CAIRN_EFORMAT.
 */
int ghp_vocab_and_specials(const gguf_file_t *g, const char *arch, cairn_model_config_t *cfg,
                           char *err, size_t err_len);

/*
 * The frame of a family's parse_gguf: allocates a zeroed private state of priv_size bytes,
 * runs parse(g, arch, state, c) where c is a copy of *cfg (which the caller has set the
 * family and model_type of) kept at state + base_offset (a family whose state embeds the
 * common config) or, with GHP_NO_BASE, on the stack; on success stores c in *cfg and the
 * state in *priv; on error frees the state and leaves *cfg as it was (*priv NULL). parse
 * must not allocate inside the state. Errors: parse's, CAIRN_ENOMEM naming the file.
 */
#define GHP_NO_BASE SIZE_MAX
typedef int (*ghp_parse_fn)(const gguf_file_t *g, const char *arch, void *state,
                            cairn_model_config_t *cfg, char *err, size_t err_len);
int ghp_parse_priv(const gguf_file_t *g, const char *arch, size_t priv_size, size_t base_offset,
                   ghp_parse_fn parse, cairn_model_config_t *cfg, void **priv, char *err,
                   size_t err_len);

/* One entry of a tensor name table: the HF name (a layer's suffix after
 * "model.layers.N.", or a whole global name) and llama.cpp's. Tables end with {NULL}. */
typedef struct {
    const char *hf, *gguf;
} ghp_name_t;

/* The rows every llama.cpp architecture names the same way: the embedding, final norm and
 * lm_head (globals); q/k/v/o projections and q/k norms of self-attention, and the gated
 * MLP's gate/up/down (layer suffixes). */
extern const ghp_name_t ghp_common_globals[], ghp_attn_names[], ghp_mlp_names[];

/*
 * The file's name of HF tensor `name` into buf[cap]: an entry of the globals tables
 * matched whole, or "model.layers.N.<suffix>" with N < n_layers and <suffix> in one of
 * the layer tables, as "blk.N.<gguf>". Both lists of tables end with NULL. Returns the
 * entry matched, NULL when the name is none of them.
 */
const ghp_name_t *ghp_tensor_name(const char *name, int n_layers,
                                  const ghp_name_t *const *globals,
                                  const ghp_name_t *const *layer, char *buf, size_t cap);

#endif
