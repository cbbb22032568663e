/*
 * formats/weights_folder.h — the weight tensors of a Hugging Face checkpoint folder, by
 * name: what a family binds (format: docs/FORMAT.md, "safetensors and checkpoint
 * folders").
 *
 * A folder holds model.safetensors or, when that is absent, model.safetensors.index.json
 * naming shards (the single file wins when both exist, as in transformers). Opening maps
 * every file, validates every header (safetensors.h), builds one table of all tensors
 * sorted by name, checks the index against the shards, and computes the weights digest.
 * By default (knob CAIRN_WEIGHTS_ANON) each file that takes at most half of MemAvailable
 * is then copied into anonymous huge pages (docs/DESIGN.md, "Mapped, then copied"), so
 * open costs one read of the weights; otherwise the read-only private mapping stays.
 *
 * A family binds each tensor it uses with fmt_tensors_bind (name + expected shape); the
 * loader then requires every tensor of the folder to be bound or ignored by the family.
 * A single-file source (the GGUF reader, formats/gguf_weights.c) builds the same table
 * with fmt_tensors_create and a name map: the family still binds by its HF names, the map
 * gives the file's name of each (and whether its rows are stored in llama.cpp's q/k
 * order, which bind undoes), and messages name the file's tensors.
 *
 * Thread-safety: open/bind/close on one thread; bound tensors are immutable and may be
 * read by any number of threads until close.
 */
#ifndef CAIRN_FORMATS_WEIGHTS_FOLDER_H
#define CAIRN_FORMATS_WEIGHTS_FOLDER_H

#include "cairn/checkpoint.h"
#include "formats/safetensors.h"

typedef struct fmt_tensors fmt_tensors_t;

/*
 * Opens the weights of folder dir. Errors (err names the file or tensor): CAIRN_ENOENT (no
 * weights, a shard the index names is missing), CAIRN_EFORMAT (a header that lies, a
 * tensor in two files, an index that disagrees with the shards), CAIRN_EUNSUPPORTED (a
 * dtype other than BF16/F16/F32), CAIRN_EIO, CAIRN_ENOMEM.
 */
int fmt_tensors_open(const char *dir, fmt_tensors_t **out, char *err, size_t err_len);
/* Unmaps everything; every bound tensor becomes invalid. NULL is a no-op. */
void fmt_tensors_close(fmt_tensors_t *ts);

/*
 * Binds tensor `name`: checks its shape against dims[0..ndim) and fills *out (data
 * aligned to its element size: a misaligned tensor is copied into a buffer ts owns; rows
 * a single-file source stores permuted are restored into one). Errors: CAIRN_ENOENT
 * ("checkpoint lacks tensor 'NAME'"), CAIRN_EFORMAT ("tensor 'NAME' has shape [...] but
 * config.json implies [...]"), CAIRN_EUNSUPPORTED (a GGUF element type Cairn does not
 * compute in, named), CAIRN_ENOMEM.
 */
int fmt_tensors_bind(fmt_tensors_t *ts, const char *name, int ndim, const int64_t *dims,
                     cairn_tensor_t *out, char *err, size_t err_len);
/*
 * --quantize: from now on, bind converts every float (f32, f16, bf16) 2-D tensor whose rows
 * are whole blocks of t into t by the traits table's reference rounding (once per tensor;
 * the buffer is ts's), and the weights digest becomes SHA-256(digest || "quantize:" || the
 * type's name). 1-D tensors (norms) and already quantized tensors stay as they are. t must
 * be a weight type (q8_0, q4_0, q4_k, q5_k, q6_k): else CAIRN_EINVAL. Call before binding.
 */
int fmt_tensors_set_quantize(fmt_tensors_t *ts, cairn_dtype_t t, char *err, size_t err_len);
/* Whether the folder holds tensor `name` (bound or not). */
bool fmt_tensors_has(const fmt_tensors_t *ts, const char *name);

/* Called for each unbound tensor; true accepts it. */
typedef bool (*fmt_tensor_ignore_fn)(void *user, const char *name);
/* CAIRN_EUNSUPPORTED ("unexpected tensor 'NAME' (config.json gives it no use)") for the
 * first tensor, in name order, that is neither bound nor accepted by ignore (may be NULL). */
int fmt_tensors_check_used(const fmt_tensors_t *ts, fmt_tensor_ignore_fn ignore, void *user,
                           char *err, size_t err_len);

/* The folder path as given to open (for messages). */
const char *fmt_tensors_dir(const fmt_tensors_t *ts);
/* The weights digest of docs/FORMAT.md 1.5 (computed at open). */
void fmt_tensors_digest(const fmt_tensors_t *ts, uint8_t out[32]);
/* Bytes of the distinct tensors bound so far. */
uint64_t fmt_tensors_bound_bytes(const fmt_tensors_t *ts);

/* ---- What other sources share (the GGUF reader) ------------------------------------ */

/*
 * Maps the file at path read-only and private; *size its length. With `weights`, the
 * CAIRN_WEIGHTS_ANON policy above applies (the file may be copied into anonymous huge
 * pages) and readahead starts. Unmap with munmap(*map, *size). Errors: CAIRN_ENOENT,
 * CAIRN_EIO (not a regular file, a failed mapping), CAIRN_EFORMAT (an empty file),
 * CAIRN_ENOMEM; err names the path.
 */
int fmt_map_file(const char *path, bool weights, void **map, size_t *size, char *err,
                 size_t err_len);

/* One tensor of a single-file source, as fmt_tensors_create takes it. */
typedef struct {
    const char *name;        /* the file's name (copied) */
    bool has_dtype;          /* false: a type Cairn does not compute in (bind refuses it) */
    cairn_dtype_t dtype;
    const char *type_name;   /* the file's spelling of the type, for messages (static) */
    int ndim;                /* 0..ST_MAX_DIMS */
    int64_t shape[ST_MAX_DIMS]; /* row-major, shape[0] slowest (HF order) */
    const void *data;        /* bytes inside the owner */
    uint64_t bytes;
} fmt_tensor_desc_t;

/*
 * The file's name of the tensor a family binds as `name`, written into buf[0..cap), and in
 * *permute_heads the number of heads over which its rows are stored in llama.cpp's q/k
 * order (0: rows as HF stores them). False: the file has no such tensor.
 */
typedef bool (*fmt_tensor_name_fn)(void *user, const char *name, char *buf, size_t cap,
                                   int *permute_heads);

/*
 * A table over tensors that live in `owner` (a parsed GGUF file): names copied, data
 * borrowed. path names the file in messages; meta_name what implies the shapes ("the
 * GGUF metadata"); digest is fmt_tensors_digest's answer; rename maps bound names (its
 * user must outlive the table). On success the table owns owner and frees it with
 * owner_free at close; on failure the caller keeps it. Errors: CAIRN_EFORMAT (a name
 * twice), CAIRN_ENOMEM.
 */
int fmt_tensors_create(const char *path, const char *meta_name, const fmt_tensor_desc_t *descs,
                       size_t n, const uint8_t digest[32], fmt_tensor_name_fn rename,
                       void *rename_user, void *owner, void (*owner_free)(void *),
                       fmt_tensors_t **out, char *err, size_t err_len);

#endif
