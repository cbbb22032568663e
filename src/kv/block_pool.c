/*
 * block_pool.c — block metadata and the three block states.
 *
 * Every block id in [1, n_blocks) is in exactly one state: FREE (in the free queue),
 * CACHED (refcount 0 but registered in the prefix index; in the LRU, least recently
 * released at the head) or USED (refcount > 0, in no list). Block 0 is the null block:
 * state NULL, in no list, never allocated, refcounts on it are ignored. Both lists are
 * intrusive doubly linked lists through prev/next, so allocate, reference, release and
 * uncache are O(1). The pool knows nothing of hashes; registering and eviction policy are
 * the cache's (kv_cache.c), which evicts from the LRU's head.
 *
 * Retention hint: a block marked `retained` (kv_block_pool_retain, from
 * cairn_kv_seq_retain) is released to the LRU's tail; an unmarked one just before the
 * first retained block (lru_kept). So the LRU is always [unretained | retained], each part
 * in release order, and eviction from the head takes every unretained block before any
 * retained one; with no retained block it is the plain LRU. The mark is cleared when the
 * block leaves the cache (evicted, or allocated again). Thread-safety: one cache, one
 * thread.
 */
#include "kv/kv_internal.h"

#include <string.h>

static void list_push_tail(kv_block_pool_t *bp, kv_list_t *l, uint32_t id)
{
    kv_block_t *b = &bp->blocks[id];
    b->prev = l->tail;
    b->next = KV_NONE;
    if (l->tail != KV_NONE)
        bp->blocks[l->tail].next = id;
    else
        l->head = id;
    l->tail = id;
    l->count++;
}

/* Links id into l just before `at` (a member of l). */
static void list_insert_before(kv_block_pool_t *bp, kv_list_t *l, uint32_t at, uint32_t id)
{
    kv_block_t *b = &bp->blocks[id], *a = &bp->blocks[at];
    b->prev = a->prev;
    b->next = at;
    if (a->prev != KV_NONE)
        bp->blocks[a->prev].next = id;
    else
        l->head = id;
    a->prev = id;
    l->count++;
}

static void list_remove(kv_block_pool_t *bp, kv_list_t *l, uint32_t id)
{
    kv_block_t *b = &bp->blocks[id];
    if (b->prev != KV_NONE)
        bp->blocks[b->prev].next = b->next;
    else
        l->head = b->next;
    if (b->next != KV_NONE)
        bp->blocks[b->next].prev = b->prev;
    else
        l->tail = b->prev;
    b->prev = b->next = KV_NONE;
    l->count--;
}

/* A block becomes cached: retained ones to the tail, others before the retained part. */
static void lru_insert(kv_block_pool_t *bp, uint32_t id)
{
    if (bp->blocks[id].retained) {
        list_push_tail(bp, &bp->lru, id);
        if (bp->lru_kept == KV_NONE)
            bp->lru_kept = id;
    } else if (bp->lru_kept != KV_NONE) {
        list_insert_before(bp, &bp->lru, bp->lru_kept, id);
    } else {
        list_push_tail(bp, &bp->lru, id);
    }
}

static void lru_remove(kv_block_pool_t *bp, uint32_t id)
{
    if (bp->lru_kept == id)
        bp->lru_kept = bp->blocks[id].next; /* retained too, or KV_NONE */
    list_remove(bp, &bp->lru, id);
}

int kv_block_pool_init(kv_block_pool_t *bp, uint32_t n_blocks)
{
    memset(bp, 0, sizeof *bp);
    bp->free.head = bp->free.tail = KV_NONE;
    bp->lru.head = bp->lru.tail = KV_NONE;
    bp->lru_kept = KV_NONE;
    bp->blocks = cairn_calloc(1, sizeof *bp->blocks);
    if (!bp->blocks)
        return CAIRN_ENOMEM;
    bp->blocks[0].state = KV_BLOCK_NULL;
    bp->blocks[0].prev = bp->blocks[0].next = KV_NONE;
    bp->n_blocks = 1;
    int rc = kv_block_pool_resize(bp, n_blocks);
    if (rc) {
        kv_block_pool_fini(bp);
        return rc;
    }
    return CAIRN_OK;
}

void kv_block_pool_fini(kv_block_pool_t *bp)
{
    cairn_free(bp->blocks);
    memset(bp, 0, sizeof *bp);
}

int kv_block_pool_resize(kv_block_pool_t *bp, uint32_t new_n)
{
    if (new_n <= bp->n_blocks)
        return CAIRN_OK;
    kv_block_t *nb = cairn_realloc(bp->blocks, (size_t)new_n * sizeof *nb);
    if (!nb)
        return CAIRN_ENOMEM;
    bp->blocks = nb;
    for (uint32_t id = bp->n_blocks; id < new_n; id++) {
        memset(&nb[id], 0, sizeof nb[id]);
        nb[id].state = KV_BLOCK_FREE;
        list_push_tail(bp, &bp->free, id);
    }
    bp->n_blocks = new_n;
    return CAIRN_OK;
}

uint32_t kv_block_pool_alloc(kv_block_pool_t *bp)
{
    uint32_t id = bp->free.head;
    if (id == KV_NONE)
        return 0;
    list_remove(bp, &bp->free, id);
    kv_block_t *b = &bp->blocks[id];
    b->state = KV_BLOCK_USED;
    b->ref = 1;
    b->pins = 0;
    b->importing = 0;
    b->registered = 0;
    b->retained = 0;
    bp->n_used++;
    return id;
}

void kv_block_pool_ref(kv_block_pool_t *bp, uint32_t id)
{
    if (id == 0)
        return;
    kv_block_t *b = &bp->blocks[id];
    CAIRN_ASSERT(b->state == KV_BLOCK_USED || b->state == KV_BLOCK_CACHED);
    if (b->state == KV_BLOCK_CACHED) {
        lru_remove(bp, id);
        b->state = KV_BLOCK_USED;
        bp->n_used++;
    }
    b->ref++;
}

bool kv_block_pool_unref(kv_block_pool_t *bp, uint32_t id)
{
    if (id == 0)
        return false;
    kv_block_t *b = &bp->blocks[id];
    CAIRN_ASSERT(b->state == KV_BLOCK_USED && b->ref > 0);
    if (--b->ref > 0)
        return false;
    bp->n_used--;
    if (b->registered) {
        b->state = KV_BLOCK_CACHED;
        lru_insert(bp, id);
    } else {
        b->state = KV_BLOCK_FREE;
        list_push_tail(bp, &bp->free, id);
    }
    return true;
}

void kv_block_pool_uncache(kv_block_pool_t *bp, uint32_t id)
{
    kv_block_t *b = &bp->blocks[id];
    CAIRN_ASSERT(b->state == KV_BLOCK_CACHED);
    lru_remove(bp, id);
    b->registered = 0;
    b->retained = 0;
    b->state = KV_BLOCK_FREE;
    list_push_tail(bp, &bp->free, id);
}

void kv_block_pool_retain(kv_block_pool_t *bp, uint32_t id)
{
    if (id == 0)
        return;
    CAIRN_ASSERT(bp->blocks[id].state == KV_BLOCK_USED);
    bp->blocks[id].retained = 1;
}
