/*
 * kv_flat.c — contiguous per-sequence K/V arrays (the reference K/V path).
 *
 * Invariant: for every layer with rows, k[layer] and v[layer] hold cap rows of
 * row_bytes[layer]; position p lives at byte p * row_bytes[layer]. A SHARED layer has no
 * arrays of its own and resolves to src[layer]. Rows past the sequence length are
 * unspecified.
 * Thread-safety: one writer (the engine thread); attention tasks only read.
 */
#include <string.h>

#include "engine/kv_flat.h"

int kv_flat_init(kv_flat_t *kv, const cairn_layer_cache_t *layers, int n_layers,
                 cairn_dtype_t dtype)
{
    memset(kv, 0, sizeof(*kv));
    kv->n_layers = n_layers;
    kv->dtype = dtype;
    kv->row_bytes = cairn_calloc((size_t)n_layers, sizeof(*kv->row_bytes));
    kv->src = cairn_calloc((size_t)n_layers, sizeof(*kv->src));
    kv->k = cairn_calloc((size_t)n_layers, sizeof(*kv->k));
    kv->v = cairn_calloc((size_t)n_layers, sizeof(*kv->v));
    if (!kv->row_bytes || !kv->src || !kv->k || !kv->v) {
        kv_flat_fini(kv);
        return CAIRN_ENOMEM;
    }
    for (int l = 0; l < n_layers; l++) {
        const cairn_kv_layer_spec_t *s = &layers[l].kv;
        kv->src[l] = s->kind == CAIRN_KV_LAYER_SHARED ? (int)s->shared_from : l;
        if (s->kind == CAIRN_KV_LAYER_FULL || s->kind == CAIRN_KV_LAYER_SLIDING)
            kv->row_bytes[l] = cairn_dtype_row_bytes(dtype, (int64_t)s->n_kv_heads * s->head_dim);
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
    cairn_free(kv->row_bytes);
    cairn_free(kv->src);
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
        if (!kv->row_bytes[l])
            continue;
        for (int which = 0; which < 2; which++) {
            unsigned char **slot = which ? &kv->v[l] : &kv->k[l];
            unsigned char *p = cairn_realloc(*slot, (size_t)cap * kv->row_bytes[l]);
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
    CAIRN_ASSERT(dst->n_layers == src->n_layers && dst->dtype == src->dtype);
    int rc = kv_flat_reserve(dst, n_positions);
    if (rc)
        return rc;
    for (int l = 0; l < src->n_layers && n_positions > 0; l++) {
        if (!src->row_bytes[l])
            continue;
        memcpy(dst->k[l], src->k[l], (size_t)n_positions * src->row_bytes[l]);
        memcpy(dst->v[l], src->v[l], (size_t)n_positions * src->row_bytes[l]);
    }
    return CAIRN_OK;
}

int kv_flat_rows(void *ctx, int layer, int pos, void **k, void **v)
{
    kv_flat_t *kv = ctx;
    int l = kv->src[layer];
    if (pos < 0 || pos >= kv->cap || !kv->row_bytes[l])
        return 0;
    *k = kv->k[l] + (size_t)pos * kv->row_bytes[l];
    *v = kv->v[l] + (size_t)pos * kv->row_bytes[l];
    return kv->cap - pos;
}
