/*
 * models/family.h — the model-family interface: what one family of models (llama, gemma3,
 * lfm2, qwen3_5, ...) implements so that the checkpoint loader, the engine and the cold
 * tier can run it without naming it.
 *
 * Model. A family is a static vtable (cairn_family_t) listed in the registry
 * (models/families.def; tests add more with cairn_family_register()). Its code lives in
 * src/models/<family>/ and nowhere else: the engine, the scheduler, the cold-tier bridge
 * and the other families never name it. Adding a family is a new folder plus one line in
 * families.def (the build globs src/models/ recursively).
 *
 * Life of a model (who calls what):
 *
 *   1. cairn_checkpoint_open() reads config.json, picks the family whose model_types
 *      contain its model_type (cairn_family_find), and calls
 *        parse_config(hf, &cfg, &priv)  -> the common config (cairn_model_config_t: sizes,
 *                                          vocab, eos, ...) and the family's own state
 *                                          (its config; later its weights), owned by priv;
 *      generation_config.json's eos ids are then merged into cfg by the loader;
 *        bind(priv, cfg, tensors)       -> binds every tensor it needs by name and shape
 *                                          (fmt_tensors_bind); afterwards every tensor of
 *                                          the folder must be bound or ignore_tensor()
 *                                          must accept it, else the open fails;
 *      The result is a cairn_model_t (family + cfg + priv), owned by the checkpoint
 *      (cairn_checkpoint_model()); destroy(priv) runs at cairn_checkpoint_close().
 *      A GGUF file (docs/FORMAT.md 3) goes the same way with its metadata instead of
 *      config.json: the family whose gguf_architectures contain general.architecture
 *      (cairn_family_find_gguf) maps the metadata in parse_gguf and, through
 *      gguf_tensor_name, each name bind asks for to the file's tensor (and whether
 *      llama.cpp's converter permuted its rows), so bind is the same code for both.
 *   2. cairn_engine_create() asks
 *        cache_layout(model, layers[])  -> per layer: FULL / SLIDING(W) / RECURRENT(state
 *                                          bytes) / SHARED(anchor), heads and head_dim of
 *                                          its K/V rows. The engine builds the KV core's
 *                                          cache (paged path) or flat arrays from it, and
 *                                          allocates each sequence's state handle: the sum
 *                                          of the RECURRENT layers' state_bytes, zeroed,
 *                                          layer l at state + cairn_model_state_offset(l);
 *        fwd_create(model, env, &fwd)   -> the family's forward context (its scratch for
 *                                          env->max_rows rows); every op it runs goes
 *                                          through env->be (compute/backend.h), whose
 *                                          compute_supports it checks here.
 *      The cold-tier bridge asks describe(model, desc, extra) for the family's part of the
 *      model fingerprint (architecture, layer geometry, rope, and every config value that
 *      changes a K/V byte); the engine adds K/V dtype, block size, math mode and the
 *      weights digest.
 *   3. Every cairn_engine_step() calls fwd_step(fwd, batch) once per sub-batch of at most
 *      max_rows rows. A batch is rows (token, absolute position, which sequence, which
 *      logits row) and, per sequence of the step, a cairn_fwd_seq_t: its K/V row accessor
 *      (flat or paged), on the paged path its KV core sequence (so the family reads each
 *      layer's block table with cairn_kv_seq_block_table(); sliding layers have
 *      CAIRN_KV_NULL_BLOCK entries outside the window, which must be skipped, never read)
 *      and its state handle (NULL when the family declares no recurrent layer).
 *
 * Contract of fwd_step (what makes the engine bit-exact):
 *   - rows of one sequence appear in increasing position order, contiguous with what is
 *     already stored (row positions n_past, n_past+1, ...) and, for a stateful family,
 *     the state handle holds exactly the state after position n_past-1 on entry; after
 *     the call it must hold the state after the sequence's last row in the batch;
 *   - every row's K/V storage exists (the engine reserved it) and the row must store its
 *     K/V before any row attends to it; attention reads K/V back from storage only, so a
 *     token sees the same bytes whether its predecessors were computed in this call, an
 *     earlier one, or reused from the cache;
 *   - the bits of a row's logits must not depend on the other rows of the batch, on how
 *     a prompt was cut into steps, on the thread count, nor on the K/V path;
 *   - logits: rows with out_row >= 0 write [vocab] floats at logits + out_row * vocab;
 *     such rows have consecutive out_row values in row order.
 *
 * Recurrent checkpoints (issue 10, built on this by the lfm2 work): the KV core serves a
 * prefix P > 0 of a model with RECURRENT layers only when a checkpoint at exactly P is
 * registered (cairn_kv_seq_checkpoint). Saving and restoring the state handle at block
 * boundaries belongs to the engine's state module (src/engine/seq_state.{c,h}), not to
 * families: a family only reads and writes the handle it is given. Because the contract
 * makes bits independent of how rows are cut into calls, the engine obtains the state at
 * a boundary inside a long prefill by ending a sub-batch exactly there and copying the
 * handle after that call.
 *
 * Thread-safety: a family vtable is immutable. parse_config, bind, cache_layout and
 * describe are pure with respect to their arguments. A forward context is used by one
 * thread at a time (the engine thread), which may fan work out to env->tp.
 */
#ifndef CAIRN_MODELS_FAMILY_H
#define CAIRN_MODELS_FAMILY_H

#include "cairn/checkpoint.h"
#include "cairn/cold_tier.h"
#include "cairn/engine.h"
#include "cairn/kv_cache.h"
#include "compute/backend.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "formats/weights_folder.h"
#include "util/thread_pool.h"

typedef struct cairn_family cairn_family_t;

/* A parsed, bound model: what a checkpoint holds once open. */
typedef struct {
    const cairn_family_t *family;
    cairn_model_config_t cfg;   /* the common config (cfg.family is family->name) */
    void *priv;                 /* the family's own config and weights (parse_config) */
} cairn_model_t;

/* What one layer needs from the cache. */
typedef struct {
    /* How the KV core pages this layer: kind FULL, SLIDING (window W), RECURRENT (no
     * pages) or SHARED (aliases layer shared_from's K/V); n_kv_heads and head_dim of its
     * K/V rows for FULL and SLIDING. */
    cairn_kv_layer_spec_t kv;
    /* RECURRENT only: bytes of this layer's per-sequence state (conv taps, the delta-rule
     * matrix, ...); 0 for every other kind. The engine aligns each layer's part to 64
     * bytes. */
    size_t state_bytes;
} cairn_layer_cache_t;

/* Resources the engine gives a forward context. */
typedef struct {
    compute_backend_t *be;       /* every op of the forward pass runs here (compute/backend.h);
                                    check what the model needs with compute_supports at
                                    fwd_create */
    cairn_thread_pool_t *tp;     /* the engine's pool (the backend's pool on the CPU) */
    cairn_engine_math_t math;    /* activation precision of the matrix products */
    cairn_dtype_t kv_dtype;      /* element type of stored K/V rows */
    int max_rows;                /* most rows one fwd_step receives */
    int max_positions;           /* longest sequence: a position is < max_positions */
} cairn_fwd_env_t;

/* One row of a step: one new token of one sequence. */
typedef struct {
    int seq;        /* index into cairn_fwd_batch_t.seqs */
    int pos;        /* absolute position in the sequence */
    int32_t token;
    int out_row;    /* logits row to write, or -1 */
} cairn_fwd_row_t;

/* What a step knows about one of its sequences. */
typedef struct {
    attn_kv_t kv;                  /* K/V rows of (layer, position): flat or paged */
    const cairn_kv_seq_t *blocks;  /* paged path: the KV core sequence (block tables per
                                      layer via cairn_kv_seq_block_table); NULL when flat */
    void *state;                   /* the sequence's state handle (bytes: the sum that
                                      cairn_model_cache_layout reports),
                                      64-byte aligned; NULL when state_bytes is 0 */
    int n_past;                    /* positions stored before this step's rows */
} cairn_fwd_seq_t;

typedef struct {
    const cairn_fwd_row_t *rows;   /* [n_rows], 1 <= n_rows <= env.max_rows */
    int n_rows;
    const cairn_fwd_seq_t *seqs;   /* [n_seqs], indexed by row.seq */
    int n_seqs;
    float *logits;                 /* [rows with out_row >= 0][vocab] */
} cairn_fwd_batch_t;

struct cairn_family {
    /* Short name, the folder under src/models/ ("llama"); cairn_model_config_t.family. */
    const char *name;
    /* config.json model_type values this family reads, NULL-terminated. */
    const char *const *model_types;
    /* The model_types whose cold-tier restart parity is proven (tests/engine/
     * test_cold_restart.c runs each on a fixture); NULL or empty: the tier stays off. */
    const char *const *cold_model_types;

    /*
     * Parses config.json (hf: the text model's object, text_config unwrapped, plus the
     * file's top level) into the common *cfg (zeroed by the caller; model_type and family
     * are set by the caller) and *priv (the family's own config; may stay NULL). Fields
     * that change the math in a way the family does not implement are CAIRN_EUNSUPPORTED
     * naming the field; malformed values CAIRN_EFORMAT naming the field; CAIRN_ENOMEM.
     * On failure nothing is left allocated.
     */
    int (*parse_config)(const hf_config_t *hf, cairn_model_config_t *cfg, void **priv,
                        char *err, size_t err_len);
    /*
     * Binds the family's tensors from the checkpoint folder (fmt_tensors_bind: name,
     * expected shape; the error names file and tensor) into priv. Called once, after
     * parse_config and the generation_config merge.
     */
    int (*bind)(void *priv, const cairn_model_config_t *cfg, fmt_tensors_t *tensors,
                char *err, size_t err_len);
    /* True for a tensor the folder may hold that the family leaves unbound on purpose
     * (e.g. rotary inv_freq buffers). May be NULL: every tensor must be bound. */
    bool (*ignore_tensor)(const void *priv, const cairn_model_config_t *cfg, const char *name);
    /* Frees priv (NULL allowed). */
    void (*destroy)(void *priv);

    /* ---- GGUF files (docs/FORMAT.md 3.4); all three NULL: the family reads none ---- */
    /* general.architecture values this family reads, NULL-terminated. */
    const char *const *gguf_architectures;
    /*
     * Reads the metadata of g (parsed and validated; its tensor table may be consulted,
     * e.g. whether output.weight exists) into the common *cfg (zeroed by the caller;
     * model_type and family set by the caller, model_type to arch) and *priv, as
     * parse_config does for config.json: missing or malformed keys CAIRN_ENOENT /
     * CAIRN_EFORMAT, values whose math the family does not implement CAIRN_EUNSUPPORTED,
     * each naming the key. priv must not keep pointers into g. On failure nothing is left
     * allocated.
     */
    int (*parse_gguf)(const gguf_file_t *g, const char *arch, cairn_model_config_t *cfg,
                      void **priv, char *err, size_t err_len);
    /*
     * The file's name of the tensor bind asks for as `name` (into buf[0..cap)), and in
     * *permute_heads the heads over which llama.cpp's converter permuted its rows (0: as
     * HF stores them): fmt_tensor_name_fn of formats/weights_folder.h. False: a name the
     * GGUF layout has no tensor for (bind then reports it missing).
     */
    bool (*gguf_tensor_name)(const void *priv, const cairn_model_config_t *cfg,
                             const char *name, char *buf, size_t cap, int *permute_heads);

    /* Fills layers[cfg.n_layers]: each layer's cache need (see cairn_layer_cache_t) for
     * K/V rows of kv_dtype. Errors: CAIRN_EUNSUPPORTED (e.g. a dtype the family cannot
     * store its state in). */
    int (*cache_layout)(const cairn_model_t *m, cairn_dtype_t kv_dtype,
                        cairn_layer_cache_t *layers);

    /*
     * The family's part of the cold tier's model fingerprint: architecture, n_layers,
     * n_heads, n_kv_heads, head_dim, rope_dim/theta/scaling fields of *desc (the caller
     * zeroed it and fills block_tokens, kv_dtype and the weights digest), and into
     * extra[extra_len] (NUL-terminated, ';'-separated key=value) every other config value
     * that changes the bytes of a K/V row or a recurrent state. Must be a pure function
     * of the config: the same model always maps to the same cold directory.
     */
    void (*describe)(const cairn_model_t *m, cairn_tier_model_desc_t *desc, char *extra,
                     size_t extra_len);

    /* Creates the forward context: scratch for env->max_rows rows, tables (RoPE, ...).
     * Errors: CAIRN_ENOMEM, CAIRN_EUNSUPPORTED. */
    int (*fwd_create)(const cairn_model_t *m, const cairn_fwd_env_t *env, void **fwd);
    void (*fwd_destroy)(void *fwd);
    /* One batched forward step; see the contract above. Returns CAIRN_OK or an error
     * (a device error, say; nothing the CPU families compute fails). The engine then fails
     * the step without advancing any sequence: K/V already written is harmless (it is
     * rewritten), but a state handle the failed call advanced is not, so a stateful
     * family must fail before it changes any handle. */
    int (*fwd_step)(void *fwd, const cairn_fwd_batch_t *batch);
};

/* ---- Registry (models/registry.c) ------------------------------------------------- */

/*
 * The family that reads model_type: registered families first (newest first), then the
 * built-in ones of families.def. NULL when none does. Thread-safe.
 */
const cairn_family_t *cairn_family_find(const char *model_type);

/*
 * The family that reads GGUF files of general.architecture `arch`, in the same order as
 * cairn_family_find. NULL when none does. Thread-safe.
 */
const cairn_family_t *cairn_family_find_gguf(const char *arch);

/*
 * Adds a family (tests: a do-nothing family; embedders: their own). The vtable must
 * outlive every checkpoint opened with it. A registered family shadows a built-in one
 * with the same model_type. Errors: CAIRN_EINVAL (NULL, no name, no model_types, a
 * missing required entry), CAIRN_ERANGE (more than 16 registered). Thread-safe.
 */
int cairn_family_register(const cairn_family_t *family);
/* Removes a registered family (tests). CAIRN_ENOENT when it was not registered. */
int cairn_family_unregister(const cairn_family_t *family);

/* Built-in families in registry order, NULL-terminated (static). */
const cairn_family_t *const *cairn_family_builtins(void);

/* ---- Helpers over a model (models/model.c) ---------------------------------------- */

/*
 * Parses a config.json text into *m: finds the family of its model_type (CAIRN_EUNSUPPORTED
 * "config.json: unsupported model_type ..." when none reads it), sets m->cfg.model_type
 * and m->cfg.family, and runs the family's parse_config. On failure *m is zeroed and owns
 * nothing. Free with cairn_model_fini().
 */
int cairn_model_parse_config(const char *json, size_t len, cairn_model_t *m, char *err,
                             size_t err_len);
/*
 * The same from a parsed GGUF file: general.architecture picks the family
 * (CAIRN_EUNSUPPORTED "unsupported GGUF architecture ..." when none reads it), which runs
 * parse_gguf with model_type = the architecture. On failure *m is zeroed.
 */
int cairn_model_parse_gguf(const gguf_file_t *g, cairn_model_t *m, char *err, size_t err_len);
/* Frees the family's state of m (destroy(priv)) and zeroes *m. */
void cairn_model_fini(cairn_model_t *m);

/* The bound model of an open checkpoint (owned by it). */
const cairn_model_t *cairn_checkpoint_model(const cairn_checkpoint_t *ck);

/*
 * Fills layers[m->cfg.n_layers] through the family and checks the result: kinds known,
 * FULL/SLIDING layers with heads and head_dim, a SLIDING window > 0, a SHARED anchor
 * that is an earlier paged layer, state_bytes only on RECURRENT layers, at least one
 * paged layer. *state_bytes (may be NULL) receives the per-sequence state size with
 * each layer's part aligned to 64 bytes. Errors: the family's, CAIRN_EFORMAT (a bad
 * layout, logged naming the layer), CAIRN_ENOMEM.
 */
int cairn_model_cache_layout(const cairn_model_t *m, cairn_dtype_t kv_dtype,
                             cairn_layer_cache_t *layers, size_t *state_bytes);
/* Byte offset of layer l's state inside a state handle (64-byte aligned parts in layer
 * order; 0 for a layer without state). layers as filled by cairn_model_cache_layout. */
size_t cairn_model_state_offset(const cairn_layer_cache_t *layers, int layer);

#endif
