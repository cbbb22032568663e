/*
 * tools/synth.h — writes seeded random checkpoints in the Hugging Face layout.
 *
 * cairn_synth_write() produces a folder that cairn_checkpoint_open() (and transformers)
 * loads: config.json, generation_config.json, model.safetensors (or N shards with
 * model.safetensors.index.json), tokenizer.json (byte-level BPE), tokenizer_config.json
 * and chat_template.jinja (ChatML). Benchmarks and tests use it for models of any shape
 * without shipping weights; `cairn synth` is its command-line front end.
 *
 * Determinism: the bytes written are a pure function of the options. Each tensor draws
 * from its own stream seeded by (seed, tensor name), using integer arithmetic and exact
 * float operations only, so values do not depend on the shard count, the platform's libm
 * or the order tensors are written in.
 *
 * Thread-safety: reentrant; concurrent calls must use different folders.
 */
#ifndef CAIRN_TOOLS_SYNTH_H
#define CAIRN_TOOLS_SYNTH_H

#include "cairn/checkpoint.h"

/* Which checkpoint layout to write. */
typedef enum {
    CAIRN_SYNTH_LLAMA = 0,  /* model_type "llama" */
    CAIRN_SYNTH_QWEN3 = 1,  /* model_type "qwen3": adds per-head q/k norms */
    CAIRN_SYNTH_LFM2 = 2,   /* model_type "lfm2": short-convolution layers + attention layers */
    CAIRN_SYNTH_QWEN35 = 3, /* model_type "qwen3_5_text": Gated DeltaNet layers, every
                               full_interval-th layer gated full attention */
    CAIRN_SYNTH_GEMMA3 = 4, /* model_type "gemma3_text": sliding and full attention layers,
                               (1 + w) norms around attention and MLP, q/k norms */
} cairn_synth_arch_t;

typedef struct {
    cairn_synth_arch_t arch;   /* llama or qwen3 (qwen3 adds per-head q/k norms) */
    int n_layers;
    int hidden;
    int n_heads;
    int n_kv_heads;      /* divides n_heads */
    int head_dim;        /* even */
    int ffn;
    int vocab;           /* >= 259: 256 byte tokens + 3 ChatML specials at the top */
    int max_pos;
    bool tied;           /* tie_word_embeddings: no lm_head.weight tensor */
    cairn_dtype_t dtype; /* storage dtype of every tensor */
    uint64_t seed;
    double rope_theta;
    double rms_eps;
    int n_shards;        /* 1: model.safetensors; more: sharded with an index */
    /* gemma3 only: the sliding layers' window (0: 512) and the pattern P, layer l full
     * when (l + 1) % P == 0 (0: 6). The sliding layers' RoPE base is 10000. */
    int sliding_window, sliding_pattern;
    /* lfm2 only: bit l set = layer l attends (layers < 64; 0: every third layer from
     * layer 2, or the last layer of a shorter model); taps of the short convolution
     * (conv_L_cache; 0: 3). The other layers are conv layers. */
    uint64_t attn_layers;
    int conv_taps;
    /* qwen3_5 only (ignored otherwise): Gated DeltaNet sizes and the layer pattern. */
    int lin_k_heads, lin_v_heads; /* linear_num_key_heads, _value_heads (a multiple) */
    int lin_k_dim, lin_v_dim;     /* linear_key_head_dim, linear_value_head_dim */
    int conv_kernel;              /* linear_conv_kernel_dim */
    int full_interval;            /* layer l is full attention when (l + 1) % this == 0 */
    double partial_rotary;        /* partial_rotary_factor */
} cairn_synth_options_t;

/* Fills *o with the "tiny" preset (a 2-layer llama, hidden 64, vocab 512, bf16, seed 0). */
void cairn_synth_options_default(cairn_synth_options_t *o);

/*
 * Overwrites the shape fields of *o (arch, sizes, tied, rope_theta, rms_eps, max_pos,
 * sliding_window, sliding_pattern, attn_layers, conv_taps, the qwen3_5 GDN fields) with a
 * named preset: "tiny", "llama-8l", "qwen3-8l", "qwen3-0.6b", "gemma3-1b" (the
 * google/gemma-3-1b-it text shape: 26 layers, every 6th full attention, the others sliding
 * over 512 tokens, hidden 1152, 4/1 heads of 256, ffn 6912, vocab 262144, tied,
 * rope_theta 1e6 / 1e4; about 2 GB in bf16), "lfm2-1.2b" (the LiquidAI/LFM2-1.2B shape: 16
 * layers of which 2, 5, 8, 10, 12, 14 attend, hidden 2048, 32/8 heads of 64, feed-forward
 * 8192, vocab 65536, 3 conv taps, tied), "qwen3.5-0.8b" (the text model of Qwen3.5-0.8B:
 * 24 layers, 3 Gated DeltaNet : 1 gated attention). dtype, seed and n_shards are left
 * alone. CAIRN_EINVAL for an unknown name.
 */
int cairn_synth_options_preset(const char *name, cairn_synth_options_t *o);

/* Names of the presets, NULL-terminated (for --help). */
extern const char *const cairn_synth_preset_names[];

/*
 * Writes the checkpoint into dir (created if missing; existing files of the same names
 * are replaced, each atomically: temp file, fsync, rename). Files of the other weight
 * layout (a stale index or single file) are removed so the folder loads unambiguously.
 * Errors: CAIRN_EINVAL for inconsistent options (err says which), CAIRN_EIO/CAIRN_ENOSPC
 * for write failures (through cairn_io_check, so tests can inject them), CAIRN_ENOMEM.
 * On failure no temp file is left; files already renamed into place stay. Cost: writes
 * every weight once, streaming (memory use is O(vocab) for the tokenizer, not O(model)).
 */
int cairn_synth_write(const char *dir, const cairn_synth_options_t *o, char *err,
                      size_t err_len);

#endif
