/*
 * cache_group.c — how a model's layers page: groups and the per-layer offset table.
 *
 * All FULL layers form one group, SLIDING layers one group per distinct window, and all
 * RECURRENT layers one group (their state is saved and restored together). SHARED layers
 * own nothing: they resolve to their source layer's group and offsets. A block belongs to
 * one paged group and holds, for each storage layer of that group in layer order, K then V
 * as [block_size][n_kv_heads][head_dim], each region 64-byte aligned. Blocks are the same
 * size for every group (the largest group's bytes), so one pool and one free queue serve
 * all groups. Pure functions; thread-safe.
 */
#include "kv/kv_internal.h"

#include <string.h>

static size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

int kv_groups_build(const cairn_kv_layer_spec_t *specs, uint32_t n_layers, cairn_dtype_t dtype,
                    uint32_t block_size, kv_group_t *groups, uint32_t *n_groups,
                    kv_layer_t *layers, size_t *block_bytes)
{
    if (!specs || n_layers == 0 || block_size == 0)
        return CAIRN_EINVAL;
    if (!cairn_dtype_block_elems(dtype)) /* any element type; rows must be whole blocks (below) */
        return CAIRN_EINVAL;
    uint32_t ng = 0;
    bool any_paged = false;
    /* Pass 1: groups and offsets of storage layers. */
    for (uint32_t l = 0; l < n_layers; l++) {
        const cairn_kv_layer_spec_t *s = &specs[l];
        kv_layer_t *L = &layers[l];
        memset(L, 0, sizeof *L);
        L->kind = s->kind;
        L->storage_layer = l;
        if (s->kind == CAIRN_KV_LAYER_SHARED)
            continue;
        if (s->kind != CAIRN_KV_LAYER_FULL && s->kind != CAIRN_KV_LAYER_SLIDING &&
            s->kind != CAIRN_KV_LAYER_RECURRENT)
            return CAIRN_EINVAL;
        if (s->kind == CAIRN_KV_LAYER_SLIDING && s->window == 0)
            return CAIRN_EINVAL;
        if (s->kind != CAIRN_KV_LAYER_RECURRENT && (s->n_kv_heads == 0 || s->head_dim == 0))
            return CAIRN_EINVAL;
        uint32_t g;
        for (g = 0; g < ng; g++) {
            if (groups[g].kind == s->kind &&
                (s->kind != CAIRN_KV_LAYER_SLIDING || groups[g].window == s->window))
                break;
        }
        if (g == ng) {
            if (ng == CAIRN_KV_MAX_GROUPS)
                return CAIRN_ERANGE;
            memset(&groups[ng], 0, sizeof groups[ng]);
            groups[ng].kind = s->kind;
            groups[ng].window = s->kind == CAIRN_KV_LAYER_SLIDING ? s->window : 0;
            ng++;
        }
        L->group = g;
        groups[g].n_layers++;
        if (s->kind == CAIRN_KV_LAYER_RECURRENT)
            continue;
        any_paged = true;
        L->n_kv_heads = s->n_kv_heads;
        L->head_dim = s->head_dim;
        L->slot_stride = cairn_dtype_row_bytes(dtype, (int64_t)s->n_kv_heads * s->head_dim);
        if (!L->slot_stride) /* an unknown type, or a row that is not whole blocks of it */
            return CAIRN_EINVAL;
        size_t plane = align64(L->slot_stride * block_size);
        L->k_offset = groups[g].bytes;
        L->v_offset = groups[g].bytes + plane;
        groups[g].bytes += 2 * plane;
    }
    if (!any_paged)
        return CAIRN_EINVAL;
    /* Pass 2: aliases resolve to a paged source. */
    for (uint32_t l = 0; l < n_layers; l++) {
        if (specs[l].kind != CAIRN_KV_LAYER_SHARED)
            continue;
        uint32_t src = specs[l].shared_from;
        if (src >= n_layers || (specs[src].kind != CAIRN_KV_LAYER_FULL &&
                                specs[src].kind != CAIRN_KV_LAYER_SLIDING))
            return CAIRN_EINVAL;
        layers[l] = layers[src];
        layers[l].kind = CAIRN_KV_LAYER_SHARED;
        layers[l].storage_layer = src;
    }
    size_t max_bytes = 0;
    for (uint32_t g = 0; g < ng; g++)
        if (groups[g].bytes > max_bytes)
            max_bytes = groups[g].bytes;
    *n_groups = ng;
    *block_bytes = align64(max_bytes);
    return CAIRN_OK;
}
