/*
 * cache_group.c — how a model's layers page: groups and the per-layer offset table.
 *
 * Layers fall into classes: all FULL layers, the SLIDING layers of each distinct window,
 * all RECURRENT layers (their state is saved and restored together). SHARED layers own
 * nothing: they resolve to their source layer's group and offsets. A block belongs to one
 * paged group and holds, for each storage layer of that group in layer order, K then V
 * as [block_size][n_kv_heads][head_dim], each region 64-byte aligned. Blocks are the same
 * size for every group (the largest group's bytes), so one pool and one free queue serve
 * all groups.
 *
 * Equal blocks for unequal classes would waste most of a hybrid model's pool: with
 * Gemma 3's 5 sliding layers per full layer, every block of the full class (the one that
 * grows with the conversation) would be sized for the sliding class. So, as vLLM does,
 * a paged class larger than the smallest one is split into groups of at most t layers
 * (consecutive layers of the class), t = the smallest paged class's layer count, raised
 * only as far as needed to stay within CAIRN_KV_MAX_GROUPS. A model whose paged layers
 * form one class (every dense model) keeps one group, unchanged. Each group has its own
 * block table, publishes its own blocks and takes part in the usable prefix like any
 * other group. Pure functions; thread-safe.
 */
#include "kv/kv_internal.h"

#include <string.h>

static size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* The class of a storage layer: same kind and, for SLIDING, same window. */
static bool same_class(const cairn_kv_layer_spec_t *a, const cairn_kv_layer_spec_t *b)
{
    return a->kind == b->kind && (a->kind != CAIRN_KV_LAYER_SLIDING || a->window == b->window);
}

/*
 * Layers per group: the smallest paged class's size t, raised until the groups (each
 * paged class of n layers becomes ceil(n / t) groups, the recurrent class one) fit in
 * CAIRN_KV_MAX_GROUPS; CAIRN_ERANGE when even one group per class does not fit.
 */
static int layers_per_group(const cairn_kv_layer_spec_t *specs, uint32_t n_layers, uint32_t *out)
{
    uint32_t cls_size[CAIRN_KV_MAX_GROUPS + 1], cls_first[CAIRN_KV_MAX_GROUPS + 1], nc = 0;
    bool recurrent = false;
    for (uint32_t l = 0; l < n_layers; l++) {
        const cairn_kv_layer_spec_t *s = &specs[l];
        if (s->kind == CAIRN_KV_LAYER_SHARED)
            continue;
        if (s->kind == CAIRN_KV_LAYER_RECURRENT) {
            recurrent = true;
            continue;
        }
        uint32_t c;
        for (c = 0; c < nc && !same_class(&specs[cls_first[c]], s); c++)
            ;
        if (c == nc) {
            if (nc + recurrent == CAIRN_KV_MAX_GROUPS)
                return CAIRN_ERANGE;
            cls_first[nc] = l;
            cls_size[nc++] = 0;
        }
        cls_size[c]++;
    }
    uint32_t t = UINT32_MAX, largest = 0;
    for (uint32_t c = 0; c < nc; c++) {
        t = cls_size[c] < t ? cls_size[c] : t;
        largest = cls_size[c] > largest ? cls_size[c] : largest;
    }
    for (; t < largest; t++) {
        uint32_t groups = recurrent;
        for (uint32_t c = 0; c < nc; c++)
            groups += (cls_size[c] + t - 1) / t;
        if (groups <= CAIRN_KV_MAX_GROUPS)
            break;
    }
    *out = nc ? t : 1;
    return CAIRN_OK;
}

int kv_groups_build(const cairn_kv_layer_spec_t *specs, uint32_t n_layers, cairn_dtype_t dtype,
                    uint32_t block_size, kv_group_t *groups, uint32_t *n_groups,
                    kv_layer_t *layers, size_t *block_bytes)
{
    if (!specs || n_layers == 0 || block_size == 0)
        return CAIRN_EINVAL;
    if (!cairn_dtype_block_elems(dtype)) /* any element type; rows must be whole blocks (below) */
        return CAIRN_EINVAL;
    for (uint32_t l = 0; l < n_layers; l++) {
        const cairn_kv_layer_spec_t *s = &specs[l];
        if (s->kind == CAIRN_KV_LAYER_SHARED)
            continue;
        if (s->kind != CAIRN_KV_LAYER_FULL && s->kind != CAIRN_KV_LAYER_SLIDING &&
            s->kind != CAIRN_KV_LAYER_RECURRENT)
            return CAIRN_EINVAL;
        if (s->kind == CAIRN_KV_LAYER_SLIDING && s->window == 0)
            return CAIRN_EINVAL;
        if (s->kind != CAIRN_KV_LAYER_RECURRENT && (s->n_kv_heads == 0 || s->head_dim == 0))
            return CAIRN_EINVAL;
    }
    uint32_t per_group;
    int rc = layers_per_group(specs, n_layers, &per_group);
    if (rc)
        return rc;
    uint32_t ng = 0;
    bool any_paged = false;
    /* Pass 1: groups and offsets of storage layers. A layer joins the newest group of its
     * class unless that one is full (paged groups hold at most per_group layers). */
    uint32_t first_of[CAIRN_KV_MAX_GROUPS]; /* a storage layer of each group */
    for (uint32_t l = 0; l < n_layers; l++) {
        const cairn_kv_layer_spec_t *s = &specs[l];
        kv_layer_t *L = &layers[l];
        memset(L, 0, sizeof *L);
        L->kind = s->kind;
        L->storage_layer = l;
        if (s->kind == CAIRN_KV_LAYER_SHARED)
            continue;
        uint32_t g = ng;
        for (uint32_t i = ng; i-- > 0;) {
            if (same_class(&specs[first_of[i]], s)) {
                if (s->kind == CAIRN_KV_LAYER_RECURRENT || groups[i].n_layers < per_group)
                    g = i;
                break;
            }
        }
        if (g == ng) {
            if (ng == CAIRN_KV_MAX_GROUPS)
                return CAIRN_ERANGE;
            memset(&groups[ng], 0, sizeof groups[ng]);
            groups[ng].kind = s->kind;
            groups[ng].window = s->kind == CAIRN_KV_LAYER_SLIDING ? s->window : 0;
            first_of[ng] = l;
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
