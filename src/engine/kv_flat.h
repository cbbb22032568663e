/*
 * kv_flat.h — the flat K/V path: one contiguous array per (sequence, layer, K or V).
 *
 * The reference path: nothing is shared, a position's rows live at a fixed offset, and
 * capacity grows by doubling. Layers follow the model family's cache layout: FULL and
 * SLIDING layers store every position (the window is the attention's business), SHARED
 * layers read their anchor's arrays, RECURRENT layers store nothing. Its accessor
 * (kv_flat_rows) plugs into attention.h.
 */
#ifndef CAIRN_ENGINE_KV_FLAT_H
#define CAIRN_ENGINE_KV_FLAT_H

#include "models/family.h"

typedef struct {
    int n_layers;
    cairn_dtype_t dtype;
    size_t *row_bytes;      /* [n_layers] n_kv_heads * head_dim * dtype size; 0: no rows */
    int *src;               /* [n_layers] the layer whose arrays it reads (itself, or a
                               SHARED layer's anchor) */
    int cap;                /* positions allocated per layer */
    unsigned char **k;      /* [n_layers] -> [cap][row] of dtype (NULL without rows) */
    unsigned char **v;      /* [n_layers] -> [cap][row] of dtype */
} kv_flat_t;

/* Initialises an empty store for layers[n_layers] (no rows yet). CAIRN_ENOMEM. */
int kv_flat_init(kv_flat_t *kv, const cairn_layer_cache_t *layers, int n_layers,
                 cairn_dtype_t dtype);
void kv_flat_fini(kv_flat_t *kv);
/* Makes positions [0, n_positions) addressable; keeps stored rows. CAIRN_ENOMEM. */
int kv_flat_reserve(kv_flat_t *kv, int n_positions);
/* dst (initialised, same layout) receives src's first n_positions rows of every layer. */
int kv_flat_copy(kv_flat_t *dst, const kv_flat_t *src, int n_positions);
/* attn_rows_fn over a kv_flat_t: rows from pos to the end of capacity are contiguous. */
int kv_flat_rows(void *ctx, int layer, int pos, void **k, void **v);

#endif
