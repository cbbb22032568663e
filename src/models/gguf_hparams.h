/*
 * models/gguf_hparams.h — what the hybrid families' GGUF readers (gemma3_gguf.c,
 * lfm2_gguf.c, qwen35_gguf.c) share: llama.cpp's "<arch>.<key>" hyperparameters read with
 * range checks, and the parts of the common config every llama.cpp architecture stores
 * the same way (vocabulary = token_embd's rows, tied embeddings = no output.weight,
 * bos/eos/eot/eom ids). The llama family keeps its own copy (llama_gguf.c) so that no
 * family's file changes for another.
 *
 * Every error names the file (gguf_what) and the key. Pure functions; thread-safe.
 */
#ifndef CAIRN_MODELS_GGUF_HPARAMS_H
#define CAIRN_MODELS_GGUF_HPARAMS_H

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

#endif
