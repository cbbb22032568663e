/*
 * gguf_weights.c — a parsed GGUF file as a checkpoint's weight table (formats/gguf.h,
 * gguf_tensors_open): the bridge between the file's tensor table and the bind calls of
 * formats/weights_folder.h that every family uses.
 *
 * Shapes: ggml lists ne[0] (the elements of a row) first, HF lists the slowest axis
 * first, so a GGUF [ne0, ne1] tensor is bound as [ne1, ne0]. Data stays in the file's
 * mapping (no copy) except rows the family's name map says are stored permuted.
 *
 * Thread-safety: called once at open; the table is then immutable.
 */
#include <string.h>

#include "formats/gguf.h"

static void close_owner(void *g) { gguf_close(g); }

int gguf_tensors_open(gguf_file_t *g, fmt_tensor_name_fn rename, void *rename_user,
                      fmt_tensors_t **out, char *err, size_t err_len)
{
    size_t n = gguf_n_tensors(g);
    fmt_tensor_desc_t *d = cairn_calloc(n ? n : 1, sizeof *d);
    if (!d) {
        st_errf(err, err_len, "%s: out of memory", gguf_what(g));
        return CAIRN_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor_t *t = gguf_tensor(g, i);
        d[i].name = t->name;
        d[i].type_name = t->type->name;
        d[i].has_dtype = gguf_tensor_dtype(t->type, &d[i].dtype) == CAIRN_OK;
        d[i].ndim = (int)t->n_dims;
        for (uint32_t k = 0; k < t->n_dims; k++)
            d[i].shape[k] = t->ne[t->n_dims - 1 - k];
        d[i].data = t->data;
        d[i].bytes = t->bytes;
    }
    uint8_t digest[32];
    gguf_weights_digest(g, digest);
    int rc = fmt_tensors_create(gguf_what(g), "the GGUF metadata", d, n, digest, rename,
                                rename_user, g, close_owner, out, err, err_len);
    cairn_free(d);
    return rc;
}
