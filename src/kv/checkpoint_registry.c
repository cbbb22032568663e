/*
 * checkpoint_registry.c — which recurrent-state checkpoints exist.
 *
 * Recurrent layers (conv / linear-attention state) have no pages: their state lives with
 * the request, and the engine may save a copy at an exact block boundary. This registry
 * holds only the keys of those copies (the hash of the block ending at the boundary, so a
 * key covers domain, extras and every earlier token), at most `cap` of them, least
 * recently used dropped first with a callback so the engine can free the state. Lookup,
 * add, touch and drop are O(1) through a kv_index_t. Thread-safety: one cache, one thread.
 */
#include "kv/kv_internal.h"

#include <string.h>

static uint64_t ckpt_hash_of(const void *ctx, uint32_t id)
{
    const kv_ckpt_registry_t *r = ctx;
    return kv_hash_word(&r->e[id].key);
}

static bool ckpt_match(const void *ctx, uint32_t id, const void *key)
{
    const kv_ckpt_registry_t *r = ctx;
    return memcmp(r->e[id].key.bytes, key, sizeof r->e[id].key.bytes) == 0;
}

int kv_ckpt_init(kv_ckpt_registry_t *r, uint32_t cap, cairn_kv_checkpoint_evict_fn fn, void *user)
{
    memset(r, 0, sizeof *r);
    r->cap = cap;
    r->on_evict = fn;
    r->user = user;
    r->head = r->tail = r->free_head = KV_NONE;
    r->e = cairn_calloc((size_t)cap + 1, sizeof *r->e);
    if (!r->e)
        return CAIRN_ENOMEM;
    for (uint32_t id = cap; id >= 1; id--) {
        r->e[id].next = r->free_head;
        r->free_head = id;
    }
    int rc = kv_index_init(&r->ix, cap, ckpt_hash_of, ckpt_match, r);
    if (rc) {
        cairn_free(r->e);
        r->e = NULL;
        return rc;
    }
    return CAIRN_OK;
}

void kv_ckpt_fini(kv_ckpt_registry_t *r)
{
    kv_index_fini(&r->ix);
    cairn_free(r->e);
    memset(r, 0, sizeof *r);
}

static void lru_unlink(kv_ckpt_registry_t *r, uint32_t id)
{
    kv_ckpt_t *c = &r->e[id];
    if (c->prev != KV_NONE)
        r->e[c->prev].next = c->next;
    else
        r->head = c->next;
    if (c->next != KV_NONE)
        r->e[c->next].prev = c->prev;
    else
        r->tail = c->prev;
}

static void lru_push(kv_ckpt_registry_t *r, uint32_t id)
{
    kv_ckpt_t *c = &r->e[id];
    c->prev = r->tail;
    c->next = KV_NONE;
    if (r->tail != KV_NONE)
        r->e[r->tail].next = id;
    else
        r->head = id;
    r->tail = id;
}

static void remove_id(kv_ckpt_registry_t *r, uint32_t id)
{
    kv_index_remove(&r->ix, kv_hash_word(&r->e[id].key), id);
    lru_unlink(r, id);
    r->e[id].next = r->free_head;
    r->free_head = id;
    r->count--;
}

void kv_ckpt_add(kv_ckpt_registry_t *r, const cairn_kv_hash_t *key)
{
    if (r->cap == 0)
        return;
    uint32_t id = kv_index_find(&r->ix, kv_hash_word(key), key);
    if (id) {
        lru_unlink(r, id);
        lru_push(r, id);
        return;
    }
    if (r->count == r->cap) {
        uint32_t victim = r->head;
        cairn_kv_hash_t k = r->e[victim].key;
        remove_id(r, victim);
        if (r->on_evict)
            r->on_evict(r->user, &k);
    }
    id = r->free_head;
    r->free_head = r->e[id].next;
    r->e[id].key = *key;
    lru_push(r, id);
    kv_index_insert(&r->ix, kv_hash_word(key), id);
    r->count++;
}

bool kv_ckpt_has(const kv_ckpt_registry_t *r, const cairn_kv_hash_t *key)
{
    return r->cap && kv_index_find(&r->ix, kv_hash_word(key), key) != 0;
}

void kv_ckpt_touch(kv_ckpt_registry_t *r, const cairn_kv_hash_t *key)
{
    uint32_t id = r->cap ? kv_index_find(&r->ix, kv_hash_word(key), key) : 0;
    if (id) {
        lru_unlink(r, id);
        lru_push(r, id);
    }
}

int kv_ckpt_drop(kv_ckpt_registry_t *r, const cairn_kv_hash_t *key)
{
    uint32_t id = r->cap ? kv_index_find(&r->ix, kv_hash_word(key), key) : 0;
    if (!id)
        return CAIRN_ENOENT;
    remove_id(r, id);
    return CAIRN_OK;
}
