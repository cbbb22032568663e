/*
 * formats/safetensors.h — internal: the safetensors header parser and the small helpers
 * shared by the format readers (weights_folder.c, hf_config.c), the families' config
 * parsers and the tools (synth). Not a public header.
 *
 * A safetensors file is (docs/FORMAT.md, "safetensors and checkpoint folders"):
 *   1. 8 bytes: N, the header length, unsigned little-endian;
 *   2. N bytes: a JSON object {name: {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 *      optionally "__metadata__": {string: string}}, possibly padded with spaces;
 *   3. the data section; offsets are relative to its start (byte 8 + N).
 *
 * st_parse_header() validates everything that can be checked without knowing the model:
 * header length within the file, valid JSON, known dtype (BF16/F16/F32 accepted; other
 * safetensors dtypes are CAIRN_EUNSUPPORTED naming the tensor), shape entries, byte size ==
 * product(shape) * dtype size (overflow-safe), offsets within the data section, no two
 * tensors overlapping, no duplicate names. It reads only the buffer it is given, so the
 * fuzzer drives it without files.
 *
 * Thread-safety: the functions are reentrant.
 */
#ifndef CAIRN_FORMATS_SAFETENSORS_H
#define CAIRN_FORMATS_SAFETENSORS_H

#include "cairn/checkpoint.h"

#include <stdarg.h>

/* safetensors allows any rank; the models we load use 1 and 2, a few extras use more. */
#define ST_MAX_DIMS 8
/* Headers larger than this are rejected (the reference implementation's limit). */
#define ST_MAX_HEADER_LEN ((uint64_t)100 << 20)

typedef struct {
    char *name;              /* owned, NUL-terminated */
    cairn_dtype_t dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;     /* byte offsets into the data section, begin <= end */
} st_tensor_t;

typedef struct {
    st_tensor_t *tensors;    /* [n_tensors], sorted by name (strcmp), names unique */
    size_t n_tensors;
    uint64_t header_len;     /* N */
    uint64_t data_offset;    /* 8 + N: where the data section starts in the file */
    uint64_t data_len;       /* file size - data_offset */
} st_header_t;

/*
 * Parses and validates the header of a safetensors file whose first buf_len bytes are buf
 * (buf_len is the whole file size). On success *out owns its tensor table; free it with
 * st_header_free(). Errors: CAIRN_EFORMAT (malformed or lying header), CAIRN_EUNSUPPORTED
 * (a dtype we do not compute in), CAIRN_ENOMEM; err names the tensor and the problem.
 * `what` (a file name) prefixes the message.
 */
int st_parse_header(const uint8_t *buf, size_t buf_len, const char *what, st_header_t *out,
                    char *err, size_t err_len);
void st_header_free(st_header_t *h);
/* Binary search by name; NULL when absent. */
const st_tensor_t *st_header_find(const st_header_t *h, const char *name);

/* "BF16" / "F16" / "F32": the safetensors spelling of a dtype. */
const char *st_dtype_name(cairn_dtype_t t);

/* snprintf into err (when err_len > 0); a no-op when err is NULL. */
void st_errf(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * Reads a whole (small) file into a NUL-terminated cairn_malloc buffer. Files larger than
 * max_len are CAIRN_ERANGE; a missing file is CAIRN_ENOENT; read errors CAIRN_EIO.
 */
int st_read_file(const char *path, size_t max_len, char **out, size_t *out_len, char *err,
                 size_t err_len);

#endif
