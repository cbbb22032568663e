/*
 * formats/gguf.h — internal: the GGUF file format (llama.cpp's single-file models), read
 * and validated; docs/FORMAT.md section 3 describes the layout and every rule checked.
 *
 * A GGUF file (versions 2 and 3; all integers little-endian):
 *   1. magic "GGUF", u32 version, u64 tensor count, u64 metadata count;
 *   2. the metadata: key (string) -> typed value (integers, floats, bool, string, or an
 *      array of one of those);
 *   3. the tensor table: name, dimensions (ne[0] = elements of a row, the fastest axis),
 *      ggml type id, offset into the data section;
 *   4. padding to `general.alignment` (default 32), then the data section.
 * A string is a u64 byte length and that many bytes (no NUL).
 *
 * gguf_parse() validates everything that can be checked without knowing the model:
 * every length and count against the bytes that remain (so no read leaves the buffer and
 * no allocation exceeds what the file could describe), value and element type tags,
 * duplicate keys and tensor names, the alignment, each tensor's type (a known ggml type:
 * its block geometry gives the byte size), dimensions (1..4, non-negative, a row a whole
 * number of blocks, the product without overflow), offsets aligned and inside the file,
 * and no two tensors overlapping. A tensor of a known ggml type that Cairn does not
 * compute in still parses (binding it fails, naming the type), so a file is described
 * before it is refused.
 *
 * The parsed file borrows its buffer: strings and tensor data point into it. It reads
 * only the buffer it is given, so the fuzzer drives it without files.
 *
 * Thread-safety: parse/open/close on one thread; a parsed file is immutable and any
 * number of threads may read it.
 */
#ifndef CAIRN_FORMATS_GGUF_H
#define CAIRN_FORMATS_GGUF_H

#include "cairn/common.h"
#include "formats/weights_folder.h"

/* GGUF value type tags. */
typedef enum {
    GGUF_TYPE_U8 = 0,
    GGUF_TYPE_I8 = 1,
    GGUF_TYPE_U16 = 2,
    GGUF_TYPE_I16 = 3,
    GGUF_TYPE_U32 = 4,
    GGUF_TYPE_I32 = 5,
    GGUF_TYPE_F32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_U64 = 10,
    GGUF_TYPE_I64 = 11,
    GGUF_TYPE_F64 = 12,
} gguf_type_t;

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

/* A string inside the file: n bytes at p, not NUL-terminated, any bytes. */
typedef struct {
    const char *p;
    size_t n;
} gguf_str_t;

/* One metadata entry. */
typedef struct {
    gguf_str_t key;
    gguf_type_t type;
    gguf_type_t elem;      /* ARRAY: the element type (never ARRAY) */
    uint64_t n;            /* ARRAY: element count; 1 for a scalar */
    const uint8_t *data;   /* a scalar's bytes, or a fixed-size ARRAY's first element
                              (n elements back to back, little-endian, unaligned) */
    const gguf_str_t *strs;/* STRING: [1]; ARRAY of STRING: [n] (owned by the file) */
} gguf_kv_t;

/* A ggml tensor type: what the format says about its blocks. */
typedef struct {
    uint32_t id;           /* the ggml type id stored in the file */
    const char *name;      /* lowercase ggml name: "f32", "bf16", "q8_0", "q4_k", ... */
    uint32_t block_elems;  /* elements per block */
    uint32_t block_bytes;  /* bytes per block */
} gguf_tensor_type_t;

/* One tensor of the table. */
typedef struct {
    const char *name;      /* NUL-terminated copy (owned by the file) */
    uint32_t n_dims;       /* 1..GGUF_MAX_DIMS */
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] = elements per row; dimensions past n_dims are 1 */
    const gguf_tensor_type_t *type;
    uint64_t offset;       /* into the data section, a multiple of the alignment */
    uint64_t bytes;        /* ne[0] / block_elems * block_bytes * ne[1] * ne[2] * ne[3] */
    const uint8_t *data;   /* the bytes: file + data_offset + offset */
} gguf_tensor_t;

typedef struct gguf_file gguf_file_t;

/*
 * Parses and validates the GGUF file whose bytes are buf[0..len) (the whole file). buf is
 * borrowed: it must outlive *out. `what` (a file name) prefixes every message. Errors:
 * CAIRN_EFORMAT (truncated, malformed or lying: err names the byte offset, the key or the
 * tensor), CAIRN_EUNSUPPORTED (version 1 or a big-endian file, an unknown ggml type id,
 * arrays of arrays), CAIRN_ENOMEM. Cost: one pass over the header plus a sort of the keys
 * and of the tensors by offset; the data section is not read.
 */
int gguf_parse(const uint8_t *buf, size_t len, const char *what, gguf_file_t **out, char *err,
               size_t err_len);

/* How gguf_open maps a file. */
typedef enum {
    GGUF_OPEN_METADATA = 0, /* mapping only: pages are read when touched (tokenizers, tools) */
    GGUF_OPEN_WEIGHTS = 1,  /* the weights policy of formats/weights_folder.h
                               (fmt_map_file: anonymous huge pages when the file fits) */
} gguf_open_mode_t;

/*
 * Maps the file at path read-only and parses it; *out owns the mapping. Errors: those of
 * gguf_parse, CAIRN_ENOENT, CAIRN_EIO ("not a GGUF file" is CAIRN_EFORMAT), each naming
 * the path.
 */
int gguf_open(const char *path, gguf_open_mode_t mode, gguf_file_t **out, char *err,
              size_t err_len);
/* Frees the parsed file (and unmaps it when gguf_open mapped it). NULL is a no-op. */
void gguf_close(gguf_file_t *g);

/* Whether the file at path starts with the GGUF magic (false when it cannot be read). */
bool gguf_file_is_gguf(const char *path);

/* The name given to parse/open (for messages). */
const char *gguf_what(const gguf_file_t *g);
uint32_t gguf_version(const gguf_file_t *g);
/* general.alignment (default 32). */
uint32_t gguf_alignment(const gguf_file_t *g);
/* Start of the data section: the header (metadata and tensor table) is [0, data_offset). */
uint64_t gguf_data_offset(const gguf_file_t *g);
/* The whole file. */
const uint8_t *gguf_bytes(const gguf_file_t *g, size_t *len);

/* Metadata entries in file order. */
size_t gguf_n_kvs(const gguf_file_t *g);
const gguf_kv_t *gguf_kv(const gguf_file_t *g, size_t i);
/* The entry with that key, or NULL (binary search). */
const gguf_kv_t *gguf_find(const gguf_file_t *g, const char *key);

/* Tensors in file order. */
size_t gguf_n_tensors(const gguf_file_t *g);
const gguf_tensor_t *gguf_tensor(const gguf_file_t *g, size_t i);
/* The tensor with that name, or NULL (binary search). */
const gguf_tensor_t *gguf_find_tensor(const gguf_file_t *g, const char *name);

/*
 * Typed metadata readers. Each takes the full key; absent: *out = dflt, or CAIRN_ENOENT
 * ("WHAT: missing metadata KEY") when required. A present value of another type, or one
 * out of range, is CAIRN_EFORMAT naming the key.
 */
/* Any integer type; the value must be in [0, max]. */
int gguf_get_uint(const gguf_file_t *g, const char *key, bool required, uint64_t dflt,
                  uint64_t max, uint64_t *out, char *err, size_t err_len);
/* F32 or F64 (rounded to float), finite. */
int gguf_get_float(const gguf_file_t *g, const char *key, bool required, float dflt, float *out,
                   char *err, size_t err_len);
int gguf_get_bool(const gguf_file_t *g, const char *key, bool dflt, bool *out, char *err,
                  size_t err_len);
/* A STRING; absent and not required: out->p = NULL, out->n = 0. */
int gguf_get_str(const gguf_file_t *g, const char *key, bool required, gguf_str_t *out,
                 char *err, size_t err_len);
/* An ARRAY whose elements are of type elem; absent and not required: *out = NULL. */
int gguf_get_array(const gguf_file_t *g, const char *key, gguf_type_t elem, bool required,
                   const gguf_kv_t **out, char *err, size_t err_len);
/* Element i of an integer ARRAY as int64 (any integer element type). */
int64_t gguf_array_int(const gguf_kv_t *kv, uint64_t i);

/* gguf_str_t equals the NUL-terminated s. */
bool gguf_str_eq(gguf_str_t a, const char *s);
/* The name of a value type tag ("u32", "string", ...); "?" for an unknown tag. */
const char *gguf_type_name(uint32_t type);

/* The ggml tensor type with that id, or NULL for an id the format does not define. */
const gguf_tensor_type_t *gguf_tensor_type(uint32_t id);
/*
 * The Cairn element type of a ggml type: the cairn_dtype_t of the same name whose block
 * geometry is the same (so a type row added to src/compute/type_traits.c is read from
 * GGUF files without a change here). CAIRN_EUNSUPPORTED when Cairn has no such type.
 */
int gguf_tensor_dtype(const gguf_tensor_type_t *t, cairn_dtype_t *out);

/*
 * The weights digest of docs/FORMAT.md 1.5 over one file named "model.gguf" whose header
 * is the bytes [0, data_offset): the same model file always gives the same digest,
 * whatever its name on disk. Computed at parse.
 */
void gguf_weights_digest(const gguf_file_t *g, uint8_t out[32]);

/*
 * The tensors of g as a checkpoint's weight table (gguf_weights.c): each tensor's shape
 * in HF order (ne reversed), its element type through gguf_tensor_dtype (a type Cairn
 * does not compute in stays in the table and is refused when bound), its data in place;
 * rename maps the names a family binds (formats/weights_folder.h). On success the table
 * owns g (closed with it); on failure the caller keeps g. Errors: CAIRN_ENOMEM.
 */
int gguf_tensors_open(gguf_file_t *g, fmt_tensor_name_fn rename, void *rename_user,
                      fmt_tensors_t **out, char *err, size_t err_len);

#endif
