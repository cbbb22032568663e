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
 * A later GGUF reader (issue 12) offers the same bind calls over one file.
 *
 * Thread-safety: open/bind/close on one thread; bound tensors are immutable and may be
 * read by any number of threads until close.
 */
#ifndef CAIRN_FORMATS_WEIGHTS_FOLDER_H
#define CAIRN_FORMATS_WEIGHTS_FOLDER_H

#include "cairn/checkpoint.h"

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
 * aligned to its element size: a misaligned tensor is copied into a buffer ts owns).
 * Errors: CAIRN_ENOENT ("checkpoint lacks tensor 'NAME'"), CAIRN_EFORMAT ("tensor 'NAME'
 * has shape [...] but config.json implies [...]"), CAIRN_ENOMEM.
 */
int fmt_tensors_bind(fmt_tensors_t *ts, const char *name, int ndim, const int64_t *dims,
                     cairn_tensor_t *out, char *err, size_t err_len);
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

#endif
