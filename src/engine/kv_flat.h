/*
 * kv_flat.h — the flat K/V path: one contiguous array per (sequence, layer, K or V).
 *
 * The reference path: nothing is shared, a position's rows live at a fixed offset, and
 * capacity grows by doubling. Its accessor (kv_flat_rows) plugs into attention.h.
 */
#ifndef CAIRN_ENGINE_KV_FLAT_H
#define CAIRN_ENGINE_KV_FLAT_H

#include "cairn/common.h"

typedef struct {
    int n_layers;
    int row_elems;          /* n_kv_heads * head_dim */
    cairn_dtype_t dtype;
    size_t row_bytes;       /* row_elems * dtype size */
    int cap;                /* positions allocated per layer */
    unsigned char **k;      /* [n_layers] -> [cap][row_elems] of dtype */
    unsigned char **v;      /* [n_layers] -> [cap][row_elems] of dtype */
} kv_flat_t;

/* Initialises an empty store (no rows yet). CAIRN_ENOMEM. */
int kv_flat_init(kv_flat_t *kv, int n_layers, int row_elems, cairn_dtype_t dtype);
void kv_flat_fini(kv_flat_t *kv);
/* Makes positions [0, n_positions) addressable; keeps stored rows. CAIRN_ENOMEM. */
int kv_flat_reserve(kv_flat_t *kv, int n_positions);
/* dst (initialised, same shape) receives src's first n_positions rows of every layer. */
int kv_flat_copy(kv_flat_t *dst, const kv_flat_t *src, int n_positions);
/* attn_rows_fn over a kv_flat_t: rows from pos to the end of capacity are contiguous. */
int kv_flat_rows(void *ctx, int layer, int pos, void **k, void **v);

#endif
