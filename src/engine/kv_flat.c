/*
 * kv_flat.c — contiguous per-sequence K/V arrays (the reference K/V path).
 *
 * Invariant: for every layer, k[layer] and v[layer] hold cap rows of row_bytes; position
 * p lives at byte p * row_bytes. Rows past the sequence length are unspecified.
 * Thread-safety: one writer (the engine thread); attention tasks only read.
 */
#include <string.h>

#include "engine/kv_flat.h"

int kv_flat_init(kv_flat_t *kv, int n_layers, int row_elems, cairn_dtype_t dtype)
{
    memset(kv, 0, sizeof(*kv));
    kv->n_layers = n_layers;
    kv->row_elems = row_elems;
    kv->dtype = dtype;
    kv->row_bytes = (size_t)row_elems * cairn_dtype_size(dtype);
    kv->k = cairn_calloc((size_t)n_layers, sizeof(*kv->k));
    kv->v = cairn_calloc((size_t)n_layers, sizeof(*kv->v));
    if (!kv->k || !kv->v) {
        kv_flat_fini(kv);
        return CAIRN_ENOMEM;
    }
    return CAIRN_OK;
}

void kv_flat_fini(kv_flat_t *kv)
{
    for (int l = 0; l < kv->n_layers; l++) {
        if (kv->k)
            cairn_free(kv->k[l]);
        if (kv->v)
            cairn_free(kv->v[l]);
    }
    cairn_free(kv->k);
    cairn_free(kv->v);
    memset(kv, 0, sizeof(*kv));
}

int kv_flat_reserve(kv_flat_t *kv, int n_positions)
{
    if (n_positions <= kv->cap)
        return CAIRN_OK;
    int cap = kv->cap ? kv->cap : 64;
    while (cap < n_positions)
        cap *= 2;
    /* Grow layer by layer; a failure leaves the old (smaller) arrays consistent. */
    for (int l = 0; l < kv->n_layers; l++) {
        for (int which = 0; which < 2; which++) {
            unsigned char **slot = which ? &kv->v[l] : &kv->k[l];
            unsigned char *p = cairn_realloc(*slot, (size_t)cap * kv->row_bytes);
            if (!p)
                return CAIRN_ENOMEM;
            *slot = p;
        }
    }
    kv->cap = cap;
    return CAIRN_OK;
}

int kv_flat_copy(kv_flat_t *dst, const kv_flat_t *src, int n_positions)
{
    CAIRN_ASSERT(dst->n_layers == src->n_layers && dst->row_bytes == src->row_bytes);
    int rc = kv_flat_reserve(dst, n_positions);
    if (rc)
        return rc;
    for (int l = 0; l < src->n_layers && n_positions > 0; l++) {
        memcpy(dst->k[l], src->k[l], (size_t)n_positions * src->row_bytes);
        memcpy(dst->v[l], src->v[l], (size_t)n_positions * src->row_bytes);
    }
    return CAIRN_OK;
}

int kv_flat_rows(void *ctx, int layer, int pos, void **k, void **v)
{
    kv_flat_t *kv = ctx;
    if (pos < 0 || pos >= kv->cap)
        return 0;
    *k = kv->k[layer] + (size_t)pos * kv->row_bytes;
    *v = kv->v[layer] + (size_t)pos * kv->row_bytes;
    return kv->cap - pos;
}
