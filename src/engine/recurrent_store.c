/*
 * recurrent_store.c — checkpointed recurrent states by key, LRU under a byte budget
 * (contract in recurrent_store.h).
 *
 * Entries live in a growable array (id 0 is "none") threaded on a doubly linked LRU list
 * (head = least recently used); free ids form a singly linked list through `next`. Keys
 * are SHA-256 digests, so their first 8 bytes are a uniform hash: an open-addressing table
 * of entry ids (linear probing, backward-shift deletion, load <= 1/2) finds them.
 * Each entry's bytes are a reference-counted buffer (buf_t): the entry holds one
 * reference, each pin another, so a state a capture is copying on an I/O thread stays
 * valid and unchanged after its entry is evicted or dropped (a refresh of a pinned entry
 * copies nothing: the same key is the same state). A buffer is freed with its last
 * reference.
 *
 * Thread-safety: one engine thread for the store; the bytes of a pinned buffer may be read
 * by any thread until it is unpinned; rstore_buf_new/_free on any thread.
 */
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "engine/recurrent_store.h"

#define NONE 0u

typedef struct {
    cairn_kv_hash_t key;
    void *data;          /* [state_bytes]; NULL on the free list */
    uint32_t prev, next; /* LRU neighbours, or the next free id */
} entry_t;

struct rstore {
    size_t state_bytes;
    uint64_t budget;
    uint64_t max_entries;  /* budget / state_bytes */
    rstore_evict_fn on_evict;
    void *user;
    entry_t *e;            /* [cap_e], e[0] unused */
    uint32_t cap_e, used_e; /* ids [1, used_e) have been handed out */
    uint32_t free_head;
    uint32_t head, tail;   /* LRU: head is the least recently used */
    uint32_t *slots;       /* [n_slots] entry ids, NONE = empty */
    uint32_t n_slots;      /* power of two */
    rstore_stats_t st;
};

/* A state buffer: its reference count, then the bytes (64-byte aligned). */
typedef struct {
    uint32_t refs;
    uint8_t pad[60];
    uint8_t bytes[];
} buf_t;

static buf_t *buf_of(const void *bytes) { return (buf_t *)((uint8_t *)(uintptr_t)bytes - offsetof(buf_t, bytes)); }

void *rstore_buf_new(size_t state_bytes)
{
    buf_t *b = cairn_malloc(sizeof(buf_t) + state_bytes);
    if (!b)
        return NULL;
    b->refs = 1;
    return b->bytes;
}

void rstore_buf_free(void *bytes)
{
    if (bytes)
        cairn_free(buf_of(bytes));
}

/* Drops one reference; the last frees the buffer. */
static void buf_release(void *bytes)
{
    buf_t *b = buf_of(bytes);
    if (--b->refs == 0)
        cairn_free(b);
}

static uint64_t key_word(const cairn_kv_hash_t *k)
{
    uint64_t w;
    memcpy(&w, k->bytes, sizeof w);
    return w;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Slot holding key's id, or the empty slot where it would go. */
static uint32_t probe(const rstore_t *st, const cairn_kv_hash_t *key)
{
    const uint32_t mask = st->n_slots - 1;
    uint32_t i = (uint32_t)key_word(key) & mask;
    while (st->slots[i] != NONE && memcmp(st->e[st->slots[i]].key.bytes, key->bytes, 32) != 0)
        i = (i + 1) & mask;
    return i;
}

static int resize_index(rstore_t *st, uint32_t n_slots)
{
    uint32_t *old = st->slots, n_old = st->n_slots;
    st->slots = cairn_calloc(n_slots, sizeof *st->slots);
    if (!st->slots) {
        st->slots = old;
        return CAIRN_ENOMEM;
    }
    st->n_slots = n_slots;
    for (uint32_t i = 0; i < n_old; i++)
        if (old[i] != NONE)
            st->slots[probe(st, &st->e[old[i]].key)] = old[i];
    cairn_free(old);
    return CAIRN_OK;
}

/* Removes slot i's id and shifts later members of its probe run back (no tombstones). */
static void index_remove(rstore_t *st, uint32_t i)
{
    const uint32_t mask = st->n_slots - 1;
    st->slots[i] = NONE;
    for (uint32_t j = (i + 1) & mask; st->slots[j] != NONE; j = (j + 1) & mask) {
        uint32_t home = (uint32_t)key_word(&st->e[st->slots[j]].key) & mask;
        /* Move j back to the hole i unless its home lies cyclically in (i, j]. */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            st->slots[i] = st->slots[j];
            st->slots[j] = NONE;
            i = j;
        }
    }
}

static void lru_unlink(rstore_t *st, uint32_t id)
{
    entry_t *x = &st->e[id];
    if (x->prev != NONE)
        st->e[x->prev].next = x->next;
    else
        st->head = x->next;
    if (x->next != NONE)
        st->e[x->next].prev = x->prev;
    else
        st->tail = x->prev;
}

static void lru_push(rstore_t *st, uint32_t id)
{
    entry_t *x = &st->e[id];
    x->prev = st->tail;
    x->next = NONE;
    if (st->tail != NONE)
        st->e[st->tail].next = id;
    else
        st->head = id;
    st->tail = id;
}

/* Unlinks and frees entry id held in slot `slot`. */
static void remove_entry(rstore_t *st, uint32_t slot, uint32_t id)
{
    index_remove(st, slot);
    lru_unlink(st, id);
    buf_release(st->e[id].data);
    st->e[id].data = NULL;
    st->e[id].next = st->free_head;
    st->free_head = id;
    st->st.count--;
    st->st.bytes -= st->state_bytes;
}

int rstore_create(size_t state_bytes, uint64_t budget_bytes, rstore_evict_fn on_evict,
                  void *user, rstore_t **out)
{
    if (!out || state_bytes == 0)
        return CAIRN_EINVAL;
    *out = NULL;
    rstore_t *st = cairn_calloc(1, sizeof *st);
    if (!st)
        return CAIRN_ENOMEM;
    st->state_bytes = state_bytes;
    st->budget = budget_bytes;
    st->max_entries = budget_bytes / state_bytes;
    st->on_evict = on_evict;
    st->user = user;
    st->cap_e = 16;
    st->used_e = 1;
    st->e = cairn_calloc(st->cap_e, sizeof *st->e);
    st->n_slots = 32;
    st->slots = cairn_calloc(st->n_slots, sizeof *st->slots);
    if (!st->e || !st->slots) {
        rstore_destroy(st);
        return CAIRN_ENOMEM;
    }
    st->st.budget = budget_bytes;
    st->st.state_bytes = state_bytes;
    *out = st;
    return CAIRN_OK;
}

void rstore_destroy(rstore_t *st)
{
    if (!st)
        return;
    for (uint32_t id = 1; st->e && id < st->used_e; id++)
        if (st->e[id].data)
            buf_release(st->e[id].data);
    cairn_free(st->e);
    cairn_free(st->slots);
    cairn_free(st);
}

/* A free entry id, growing the array when none is left. NONE on allocation failure. */
static uint32_t take_id(rstore_t *st)
{
    if (st->free_head != NONE) {
        uint32_t id = st->free_head;
        st->free_head = st->e[id].next;
        return id;
    }
    if (st->used_e == st->cap_e) {
        if (st->cap_e > UINT32_MAX / 2)
            return NONE;
        entry_t *e = cairn_realloc(st->e, (size_t)st->cap_e * 2 * sizeof *e);
        if (!e)
            return NONE;
        memset(e + st->cap_e, 0, (size_t)st->cap_e * sizeof *e);
        st->e = e;
        st->cap_e *= 2;
    }
    return st->used_e++;
}

/* Stores `data` (a buffer of rstore_buf_new, one reference handed over; NULL: copy
 * `state` into a new one) under key; the rules of rstore_put. */
static int store(rstore_t *st, const cairn_kv_hash_t *key, const void *state, void *data)
{
    if (st->max_entries == 0) {
        st->st.refused++;
        if (data)
            buf_release(data);
        return CAIRN_ERANGE;
    }
    const uint64_t t0 = now_ns();
    uint32_t slot = probe(st, key), id = st->slots[slot];
    if (id != NONE) { /* refresh: the same chain hash, the same state */
        if (data)
            buf_release(data);
        else if (buf_of(st->e[id].data)->refs == 1)
            memcpy(st->e[id].data, state, st->state_bytes); /* pinned bytes are never written */
        lru_unlink(st, id);
        lru_push(st, id);
        st->st.saves++;
        st->st.save_ns += now_ns() - t0;
        return CAIRN_OK;
    }
    while (st->st.count >= st->max_entries) {
        uint32_t victim = st->head;
        cairn_kv_hash_t k = st->e[victim].key;
        remove_entry(st, probe(st, &k), victim);
        st->st.evictions++;
        if (st->on_evict)
            st->on_evict(st->user, &k);
    }
    if ((st->st.count + 1) * 2 > st->n_slots) {
        if (st->n_slots > UINT32_MAX / 2 || resize_index(st, st->n_slots * 2)) {
            if (data)
                buf_release(data);
            return CAIRN_ENOMEM;
        }
    }
    if (!data && (data = rstore_buf_new(st->state_bytes)))
        memcpy(data, state, st->state_bytes);
    id = data ? take_id(st) : NONE;
    if (id == NONE) {
        if (data)
            buf_release(data);
        return CAIRN_ENOMEM;
    }
    st->e[id].key = *key;
    st->e[id].data = data;
    lru_push(st, id);
    st->slots[probe(st, key)] = id;
    st->st.count++;
    st->st.bytes += st->state_bytes;
    st->st.saves++;
    st->st.save_ns += now_ns() - t0;
    return CAIRN_OK;
}

int rstore_put(rstore_t *st, const cairn_kv_hash_t *key, const void *state)
{
    if (!st || !key || !state)
        return CAIRN_EINVAL;
    return store(st, key, state, NULL);
}

int rstore_adopt(rstore_t *st, const cairn_kv_hash_t *key, void *bytes)
{
    if (!st || !key || !bytes) {
        rstore_buf_free(bytes);
        return CAIRN_EINVAL;
    }
    return store(st, key, NULL, bytes);
}

const void *rstore_pin(rstore_t *st, const cairn_kv_hash_t *key)
{
    if (!st || !key)
        return NULL;
    uint32_t id = st->slots[probe(st, key)];
    if (id == NONE)
        return NULL;
    buf_of(st->e[id].data)->refs++;
    return st->e[id].data;
}

void rstore_unpin(rstore_t *st, const void *bytes)
{
    (void)st;
    if (bytes)
        buf_release((void *)(uintptr_t)bytes);
}

int rstore_get(rstore_t *st, const cairn_kv_hash_t *key, void *dst)
{
    if (!st || !key || !dst)
        return CAIRN_EINVAL;
    const uint64_t t0 = now_ns();
    uint32_t id = st->slots[probe(st, key)];
    if (id == NONE) {
        st->st.misses++;
        return CAIRN_ENOENT;
    }
    memcpy(dst, st->e[id].data, st->state_bytes);
    lru_unlink(st, id);
    lru_push(st, id);
    st->st.restores++;
    st->st.restore_ns += now_ns() - t0;
    return CAIRN_OK;
}

bool rstore_has(const rstore_t *st, const cairn_kv_hash_t *key)
{
    return st && key && st->slots[probe(st, key)] != NONE;
}

int rstore_drop(rstore_t *st, const cairn_kv_hash_t *key)
{
    if (!st || !key)
        return CAIRN_EINVAL;
    uint32_t slot = probe(st, key), id = st->slots[slot];
    if (id == NONE)
        return CAIRN_ENOENT;
    remove_entry(st, slot, id);
    st->st.drops++;
    return CAIRN_OK;
}

void rstore_stats(const rstore_t *st, rstore_stats_t *out)
{
    *out = st->st;
}
