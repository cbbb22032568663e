/*
 * gguf_writer.h — a GGUF writer for the tests (docs/FORMAT.md 3): valid files of any
 * content, and broken ones (lying offsets and counts, unknown tags) built by patching
 * the bytes it produces. Not part of the library; aborts on out of memory.
 *
 * Layout written: magic, version, counts, the metadata in insertion order, the tensor
 * table in insertion order, padding to the alignment, then each tensor at its offset
 * (by default the next multiple of the alignment after the previous one). Nothing
 * follows the last tensor's bytes, so every shorter prefix of the file is truncated.
 */
#ifndef CAIRN_TEST_GGUF_WRITER_H
#define CAIRN_TEST_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "formats/gguf.h"

typedef struct gw gw_t;

gw_t *gw_new(void);
void gw_free(gw_t *w);
/* Version written (default 3) and the alignment the data section uses (default 32; a
 * general.alignment key is only written by gw_kv_*). */
void gw_set_version(gw_t *w, uint32_t version);
void gw_set_alignment(gw_t *w, uint32_t alignment);

/* A metadata entry: value type tag `type` and its encoded bytes as they follow the tag. */
void gw_kv_raw(gw_t *w, const char *key, uint32_t type, const void *bytes, size_t n);
void gw_kv_u32(gw_t *w, const char *key, uint32_t v);
void gw_kv_i32(gw_t *w, const char *key, int32_t v);
void gw_kv_u64(gw_t *w, const char *key, uint64_t v);
void gw_kv_f32(gw_t *w, const char *key, float v);
void gw_kv_bool(gw_t *w, const char *key, int v);
void gw_kv_str(gw_t *w, const char *key, const char *v);
void gw_kv_strn(gw_t *w, const char *key, const char *v, size_t n);
/* An array of fixed-size elements (elem one of the scalar tags), n elements at data. */
void gw_kv_arr(gw_t *w, const char *key, uint32_t elem, const void *data, size_t n);
/* An array of strings (lens NULL: NUL-terminated). */
void gw_kv_arr_str(gw_t *w, const char *key, const char *const *v, const size_t *lens, size_t n);
/* Copies every entry of g except `skip` (NULL: none) in file order. */
void gw_copy_kvs(gw_t *w, const gguf_file_t *g, const char *skip);

/* A tensor: ne[0..n_dims) (ne[0] = row elements), ggml type id, its bytes (copied; NULL:
 * zeros). offset UINT64_MAX: the next aligned offset. */
void gw_tensor(gw_t *w, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
               const void *data, size_t bytes, uint64_t offset);
/* Makes tensor i's table entry claim `offset` while its bytes stay where they are. */
void gw_tensor_declare(gw_t *w, size_t i, uint64_t offset);
/* Copies every tensor of g except `skip` (NULL: none), offsets recomputed. */
void gw_copy_tensors(gw_t *w, const gguf_file_t *g, const char *skip);

/* The file; *len its size. malloc'd, the caller frees. */
uint8_t *gw_finish(gw_t *w, size_t *len);
/* Writes the file to path (0 or -1). */
int gw_write(gw_t *w, const char *path);

#endif
