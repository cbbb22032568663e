/*
 * state_sidecar.c — STATE sidecar payloads of a hybrid model (state_sidecar.h): the plan
 * of which groups need one, the layout descriptor of docs/FORMAT.md 1.10, and the export
 * and import of a sliding group's live blocks (a recurrent sidecar is the checkpoint's
 * bytes unchanged).
 *
 * Descriptor: u32 little-endian words, fixed by the plan and the boundary alone, so a
 * writer and a reader of the same model and boundary produce the same bytes and anything
 * else differs somewhere.
 *
 * Thread-safety: see state_sidecar.h.
 */
#include <stddef.h>
#include <string.h>

#include "engine/state_sidecar.h"

#define DESC_MAGIC 0x31445343u /* "CSD1" */
#define DESC_RECURRENT 1u
#define DESC_SLIDING 2u

typedef struct {
    uint32_t layer;
    uint32_t a, b, c, d; /* SLIDING: n_kv_heads, head_dim, k_offset, v_offset; RECURRENT: offset, bytes */
} tensor_t;

typedef struct {
    uint32_t group;
    cairn_kv_layer_kind_t kind;
    uint32_t window;
    size_t block_bytes;  /* SLIDING: the group's bytes per block */
    uint32_t n_tensors;
    tensor_t *tensors;
} side_group_t;

struct state_sidecars {
    uint32_t block_size;
    cairn_dtype_t dtype;
    uint32_t full_group;
    size_t state_bytes;
    uint32_t n;
    int recurrent;
    side_group_t g[STATE_SIDECAR_MAX];
};

void state_sidecars_destroy(state_sidecars_t *p)
{
    if (!p)
        return;
    for (uint32_t i = 0; i < p->n; i++)
        cairn_free(p->g[i].tensors);
    cairn_free(p);
}

int state_sidecars_create(const cairn_kv_cache_t *cache, const cairn_layer_cache_t *layers, uint32_t n_layers,
                          size_t state_bytes, state_sidecars_t **out)
{
    if (!out)
        return CAIRN_EINVAL;
    *out = NULL;
    if (!cache || !layers || n_layers != cairn_kv_cache_n_layers(cache))
        return CAIRN_EINVAL;
    state_sidecars_t *p = cairn_calloc(1, sizeof *p);
    if (!p)
        return CAIRN_ENOMEM;
    p->block_size = cairn_kv_cache_block_size(cache);
    p->state_bytes = state_bytes;
    p->recurrent = -1;
    int rc = CAIRN_EUNSUPPORTED;
    uint32_t n_full = 0, ng = cairn_kv_cache_n_groups(cache);
    for (uint32_t g = 0; g < ng; g++) {
        cairn_kv_group_info_t gi;
        if (cairn_kv_cache_group_info(cache, g, &gi)) {
            rc = CAIRN_EINVAL;
            goto fail;
        }
        if (gi.kind == CAIRN_KV_LAYER_FULL) {
            p->full_group = g;
            n_full++;
            continue;
        }
        if (p->n == STATE_SIDECAR_MAX)
            goto fail;
        side_group_t *s = &p->g[p->n];
        s->group = g;
        s->kind = gi.kind;
        s->window = gi.window;
        s->block_bytes = gi.bytes;
        s->tensors = cairn_calloc(gi.n_layers ? gi.n_layers : 1, sizeof *s->tensors);
        if (!s->tensors) {
            rc = CAIRN_ENOMEM;
            goto fail;
        }
        if (gi.kind == CAIRN_KV_LAYER_RECURRENT)
            p->recurrent = (int)p->n;
        p->n++;
    }
    if (n_full != 1)
        goto fail; /* no FULL layers, or split over groups: not the tier's BLOCK layout */
    /* Tensors of each sidecar group, in layer order (SHARED layers own nothing). */
    for (uint32_t l = 0; l < n_layers; l++) {
        if (layers[l].kv.kind == CAIRN_KV_LAYER_SHARED || layers[l].kv.kind == CAIRN_KV_LAYER_FULL)
            continue;
        uint32_t g = 0;
        if (cairn_kv_cache_layer_group(cache, l, &g)) {
            rc = CAIRN_EINVAL;
            goto fail;
        }
        side_group_t *s = NULL;
        for (uint32_t i = 0; i < p->n; i++)
            if (p->g[i].group == g)
                s = &p->g[i];
        if (!s) {
            rc = CAIRN_EINVAL;
            goto fail;
        }
        tensor_t *t = &s->tensors[s->n_tensors++];
        t->layer = l;
        if (s->kind == CAIRN_KV_LAYER_RECURRENT) {
            t->a = (uint32_t)cairn_model_state_offset(layers, (int)l);
            t->b = (uint32_t)layers[l].state_bytes;
        } else {
            cairn_kv_layer_view_t v;
            if (cairn_kv_layer_view(cache, l, &v)) {
                rc = CAIRN_EINVAL;
                goto fail;
            }
            p->dtype = v.dtype;
            t->a = v.n_kv_heads;
            t->b = v.head_dim;
            t->c = (uint32_t)v.k_offset;
            t->d = (uint32_t)v.v_offset;
        }
    }
    if (p->recurrent >= 0 && state_bytes == 0) {
        rc = CAIRN_EINVAL;
        goto fail;
    }
    *out = p;
    return CAIRN_OK;
fail:
    state_sidecars_destroy(p);
    return rc;
}

uint32_t state_sidecars_full_group(const state_sidecars_t *p) { return p->full_group; }
uint32_t state_sidecars_count(const state_sidecars_t *p) { return p ? p->n : 0; }
uint32_t state_sidecars_group(const state_sidecars_t *p, uint32_t i) { return p->g[i].group; }
int state_sidecars_recurrent(const state_sidecars_t *p) { return p ? p->recurrent : -1; }

typedef struct {
    uint8_t *buf;
    uint32_t n, cap;
    bool over;
} words_t;

static void put32(words_t *w, uint32_t v)
{
    if (w->n + 4 > w->cap) {
        w->over = true;
        return;
    }
    for (int i = 0; i < 4; i++)
        w->buf[w->n++] = (uint8_t)(v >> (8 * i));
}

int state_sidecar_describe(const state_sidecars_t *p, uint32_t i, size_t boundary, state_sidecar_desc_t *d)
{
    if (!p || !d || i >= p->n || boundary == 0 || boundary % p->block_size || boundary > UINT32_MAX)
        return CAIRN_EINVAL;
    const side_group_t *s = &p->g[i];
    memset(d, 0, offsetof(state_sidecar_desc_t, layout));
    d->group = s->group;
    d->kind = s->kind;
    d->boundary = boundary;
    words_t w = {d->layout, 0, STATE_SIDECAR_MAX_LAYOUT, false};
    put32(&w, DESC_MAGIC);
    if (s->kind == CAIRN_KV_LAYER_RECURRENT) {
        d->payload_size = p->state_bytes;
        put32(&w, DESC_RECURRENT);
        put32(&w, CAIRN_DTYPE_F32);
        put32(&w, s->group);
        put32(&w, s->n_tensors);
        put32(&w, (uint32_t)p->state_bytes);
        put32(&w, (uint32_t)((uint64_t)p->state_bytes >> 32));
        for (uint32_t t = 0; t < s->n_tensors; t++) {
            put32(&w, s->tensors[t].layer);
            put32(&w, s->tensors[t].a);
            put32(&w, s->tensors[t].b);
        }
    } else {
        const size_t k = boundary / p->block_size;
        d->first_block = cairn_kv_sliding_first_live(s->window, p->block_size, boundary);
        d->n_blocks = k - d->first_block;
        d->block_bytes = s->block_bytes;
        d->payload_size = d->n_blocks * s->block_bytes;
        put32(&w, DESC_SLIDING);
        put32(&w, (uint32_t)p->dtype);
        put32(&w, s->group);
        put32(&w, s->n_tensors);
        put32(&w, p->block_size);
        put32(&w, s->window);
        put32(&w, (uint32_t)d->first_block);
        put32(&w, (uint32_t)d->n_blocks);
        put32(&w, (uint32_t)s->block_bytes);
        for (uint32_t t = 0; t < s->n_tensors; t++) {
            put32(&w, s->tensors[t].layer);
            put32(&w, s->tensors[t].a);
            put32(&w, s->tensors[t].b);
            put32(&w, s->tensors[t].c);
            put32(&w, s->tensors[t].d);
        }
    }
    if (w.over || d->payload_size == 0)
        return CAIRN_EINVAL;
    d->layout_size = w.n;
    return CAIRN_OK;
}

void state_sidecar_gather(const cairn_kv_cache_t *cache, const state_sidecar_desc_t *d, const uint32_t *blocks,
                          void *dst)
{
    uint8_t *o = dst;
    for (size_t j = 0; j < d->n_blocks; j++)
        memcpy(o + j * d->block_bytes, cairn_kv_cache_block_data(cache, blocks[j]), d->block_bytes);
}

bool state_sidecar_sliding_hot(const cairn_kv_cache_t *cache, const state_sidecar_desc_t *d,
                               const cairn_kv_hash_t *domain, const cairn_kv_hash_t *hashes)
{
    for (size_t j = 0; j < d->n_blocks; j++)
        if (!cairn_kv_cache_find_block(cache, d->group, domain, &hashes[d->first_block + j]))
            return false;
    return true;
}

void state_sidecar_sliding_abandon(cairn_kv_cache_t *cache, const state_sidecar_desc_t *d, const uint32_t *ids,
                                   const bool *take)
{
    for (size_t j = 0; j < d->n_blocks; j++) {
        if (!ids[j])
            continue;
        if (take[j])
            (void)cairn_kv_cache_import_discard(cache, ids[j]);
        else
            (void)cairn_kv_cache_block_unpin(cache, ids[j]);
    }
}

int state_sidecar_sliding_take(cairn_kv_cache_t *cache, const state_sidecar_desc_t *d,
                               const cairn_kv_hash_t *domain, const cairn_kv_hash_t *hashes, uint32_t *ids,
                               bool *take)
{
    memset(ids, 0, d->n_blocks * sizeof *ids);
    memset(take, 0, d->n_blocks * sizeof *take);
    for (size_t j = 0; j < d->n_blocks; j++) {
        uint32_t id = cairn_kv_cache_find_block(cache, d->group, domain, &hashes[d->first_block + j]);
        int rc;
        if (id) {
            rc = cairn_kv_cache_block_pin(cache, id);
        } else {
            void *bytes = NULL;
            rc = cairn_kv_cache_import_begin(cache, &id, &bytes);
            take[j] = rc == CAIRN_OK;
        }
        if (rc) {
            state_sidecar_sliding_abandon(cache, d, ids, take);
            return rc;
        }
        ids[j] = id;
    }
    return CAIRN_OK;
}

void state_sidecar_sliding_commit(cairn_kv_cache_t *cache, const state_sidecar_desc_t *d,
                                  const cairn_kv_hash_t *domain, const cairn_kv_hash_t *hashes,
                                  const uint32_t *ids, const bool *take, const void *payload, int *published)
{
    const uint8_t *src = payload;
    int n = 0;
    for (size_t j = 0; j < d->n_blocks; j++) {
        if (!take[j]) {
            (void)cairn_kv_cache_block_unpin(cache, ids[j]);
            continue;
        }
        memcpy(cairn_kv_cache_block_data(cache, ids[j]), src + j * d->block_bytes, d->block_bytes);
        if (cairn_kv_cache_import_publish_group(cache, ids[j], d->group, domain, &hashes[d->first_block + j]) ==
            CAIRN_OK)
            n++;
    }
    if (published)
        *published = n;
}
