/*
 * bpe.c — the BPE model: the vocab and merge hash maps, the merge loop for one pre-token,
 * and the word cache.
 *
 * Merging follows the `tokenizers` crate exactly: the word starts as one symbol per
 * character; a min-heap holds candidate merges ordered by (rank, position); the lowest is
 * applied if it is still current (the pair at that position still maps to the same new
 * id), and the pairs it forms with its neighbours are pushed. This is O(n log n) per word,
 * so a hostile 1 MB pre-token with no spaces costs milliseconds, not hours.
 *
 * The cache maps short pre-tokens (<= TOK_CACHE_WORD bytes, <= TOK_CACHE_IDS ids) to their
 * ids in a direct-mapped table: a hit skips the merge loop, a colliding insert replaces
 * the slot. It is the only mutable state of a loaded tokenizer and is guarded by
 * bpe.cache_lock, so encoding is thread-safe.
 */
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL /* inline the short-input path: one hash per pre-token */
#include <xxhash.h>

#include "tokenizer/tok_internal.h"

uint64_t tok_hash(const void *p, size_t n)
{
    return XXH3_64bits(p, n);
}

/* Power of two with load factor <= 2/3: short probes, and a 150K vocab fits 256K slots
 * (page faults on fresh memory are a large part of load time). */
static uint32_t table_size(size_t count)
{
    uint32_t sz = 16;
    while (sz < count + count / 2 && sz < (1u << 30))
        sz <<= 1;
    return sz;
}

int tok_strmap_init(tok_strmap_t *m, size_t count)
{
    uint32_t sz = table_size(count);
    m->slots = cairn_calloc(sz, sizeof *m->slots);
    if (!m->slots) return CAIRN_ENOMEM;
    m->mask = sz - 1;
    return 0;
}

void tok_strmap_free(tok_strmap_t *m)
{
    cairn_free(m->slots);
    m->slots = NULL;
}

void tok_strmap_put(tok_strmap_t *m, const char *k, size_t n, int32_t val)
{
    tok_strmap_put_h(m, k, n, val, tok_hash(k, n));
}

void tok_strmap_put_h(tok_strmap_t *m, const char *k, size_t n, int32_t val, uint64_t h)
{
    uint32_t i = (uint32_t)h & m->mask, tag = (uint32_t)(h >> 32);
    for (;;) {
        tok_strslot_t *s = &m->slots[i];
        if (!s->k || (s->tag == tag && s->len == n && memcmp(s->k, k, n) == 0)) {
            s->k = k;
            s->len = (uint32_t)n;
            s->tag = tag;
            s->val = val;
            return;
        }
        i = (i + 1) & m->mask;
    }
}

int32_t tok_strmap_get_h(const tok_strmap_t *m, const char *k, size_t n, uint64_t h)
{
    if (!m->slots) return -1;
    uint32_t i = (uint32_t)h & m->mask, tag = (uint32_t)(h >> 32);
    for (;;) {
        const tok_strslot_t *s = &m->slots[i];
        if (!s->k) return -1;
        if (s->tag == tag && s->len == n && memcmp(s->k, k, n) == 0) return s->val;
        i = (i + 1) & m->mask;
    }
}

int32_t tok_strmap_get(const tok_strmap_t *m, const char *k, size_t n)
{
    return tok_strmap_get_h(m, k, n, tok_hash(k, n));
}

void tok_strmap_prefetch(const tok_strmap_t *m, uint64_t h)
{
    if (m->slots) __builtin_prefetch(&m->slots[(uint32_t)h & m->mask]);
}

static inline uint32_t pair_hash(uint64_t key)
{
    return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32);
}

int tok_mergemap_init(tok_mergemap_t *m, size_t count)
{
    uint32_t sz = table_size(count);
    m->slots = cairn_malloc((size_t)sz * sizeof *m->slots);
    if (!m->slots) return CAIRN_ENOMEM;
    for (uint32_t i = 0; i < sz; i++) m->slots[i].key = UINT64_MAX;
    m->mask = sz - 1;
    m->count = 0;
    return 0;
}

void tok_mergemap_free(tok_mergemap_t *m)
{
    cairn_free(m->slots);
    m->slots = NULL;
}

static void merge_insert(tok_mergemap_t *m, uint64_t key, uint32_t rank, uint32_t id)
{
    uint32_t i = pair_hash(key) & m->mask;
    while (m->slots[i].key != UINT64_MAX && m->slots[i].key != key)
        i = (i + 1) & m->mask;
    if (m->slots[i].key == UINT64_MAX) m->count++;
    m->slots[i].key = key;
    m->slots[i].rank = rank;
    m->slots[i].new_id = id;
}

int tok_mergemap_put(tok_mergemap_t *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t id)
{
    if ((m->count + 1) * 3 > ((size_t)m->mask + 1) * 2) {
        tok_mergemap_t g;
        if (tok_mergemap_init(&g, ((size_t)m->mask + 1)) != 0) return CAIRN_ENOMEM;
        for (uint32_t i = 0; i <= m->mask; i++)
            if (m->slots[i].key != UINT64_MAX)
                merge_insert(&g, m->slots[i].key, m->slots[i].rank, m->slots[i].new_id);
        cairn_free(m->slots);
        *m = g;
    }
    /* A pair listed twice keeps the later rank, as the `tokenizers` HashMap does. */
    merge_insert(m, (uint64_t)a << 32 | b, rank, id);
    return 0;
}

void tok_mergemap_prefetch(const tok_mergemap_t *m, uint32_t a, uint32_t b)
{
    __builtin_prefetch(&m->slots[pair_hash((uint64_t)a << 32 | b) & m->mask]);
}

static inline const tok_mergeslot_t *merge_get(const tok_mergemap_t *m, uint32_t a, uint32_t b)
{
    if (!m->slots) return NULL;
    uint64_t key = (uint64_t)a << 32 | b;
    uint32_t i = pair_hash(key) & m->mask;
    for (;;) {
        const tok_mergeslot_t *s = &m->slots[i];
        if (s->key == key) return s;
        if (s->key == UINT64_MAX) return NULL;
        i = (i + 1) & m->mask;
    }
}

int tok_bpe_init_tables(cairn_tokenizer_t *t)
{
    tok_bpe_t *b = &t->bpe;
    for (uint32_t cp = 0; cp < 2048; cp++) {
        char enc[4];
        size_t k = tok_utf8_encode(cp, enc);
        b->char_id[cp] = (cp >= 0xD800 && cp <= 0xDFFF) ? -1 : tok_strmap_get(&b->vocab, enc, k);
    }
    _Static_assert(sizeof(tok_cache_slot_t) == 64, "a cache slot is one cache line");
    b->cache_mem = cairn_calloc(TOK_CACHE_SLOTS + 1, sizeof *b->cache);
    if (!b->cache_mem) return CAIRN_ENOMEM;
    b->cache = (tok_cache_slot_t *)(((uintptr_t)b->cache_mem + 63) & ~(uintptr_t)63);
    if (pthread_mutex_init(&b->cache_lock, NULL) != 0) {
        cairn_free(b->cache_mem);
        b->cache_mem = NULL;
        b->cache = NULL;
        return CAIRN_ENOMEM;
    }
    return 0;
}

void tok_bpe_fini(tok_bpe_t *b)
{
    tok_strmap_free(&b->vocab);
    tok_mergemap_free(&b->merges);
    if (b->cache_mem) {
        pthread_mutex_destroy(&b->cache_lock);
        cairn_free(b->cache_mem);
        b->cache_mem = NULL;
        b->cache = NULL;
    }
}

/* One heap entry: a candidate merge of symbol `pos` with its successor. */
typedef struct {
    uint32_t rank, pos, new_id;
} cand_t;

static inline bool cand_less(const cand_t *x, const cand_t *y)
{
    return x->rank != y->rank ? x->rank < y->rank : x->pos < y->pos;
}

static void heap_push(cand_t *h, size_t *n, cand_t c)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static cand_t heap_pop(cand_t *h, size_t *n)
{
    cand_t top = h[0], last = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= m) break;
        size_t c = (l + 1 < m && cand_less(&h[l + 1], &h[l])) ? l + 1 : l;
        if (!cand_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = last;
    return top;
}

#define SMALL_SYMS 64

/* The merge loop over symbols (ids) with prev/next links; writes the result to out. */
static int merge_word(const tok_bpe_t *b, int32_t *sym, int32_t *prev, int32_t *next,
                      size_t ns, cand_t *heap, tok_ids_t *out)
{
    size_t hn = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
        const tok_mergeslot_t *m = merge_get(&b->merges, (uint32_t)sym[i], (uint32_t)sym[i + 1]);
        if (m) heap_push(heap, &hn, (cand_t){m->rank, (uint32_t)i, m->new_id});
    }
    while (hn) {
        cand_t top = heap_pop(heap, &hn);
        uint32_t p = top.pos;
        if (sym[p] < 0 || next[p] < 0) continue;
        int32_t r = next[p];
        const tok_mergeslot_t *m = merge_get(&b->merges, (uint32_t)sym[p], (uint32_t)sym[r]);
        if (!m || m->new_id != top.new_id) continue;
        sym[p] = (int32_t)top.new_id;
        sym[r] = -1;
        next[p] = next[r];
        if (next[r] >= 0) prev[next[r]] = (int32_t)p;
        if (prev[p] >= 0) {
            int32_t q = prev[p];
            m = merge_get(&b->merges, (uint32_t)sym[q], (uint32_t)sym[p]);
            if (m) heap_push(heap, &hn, (cand_t){m->rank, (uint32_t)q, m->new_id});
        }
        if (next[p] >= 0) {
            m = merge_get(&b->merges, (uint32_t)sym[p], (uint32_t)sym[next[p]]);
            if (m) heap_push(heap, &hn, (cand_t){m->rank, p, m->new_id});
        }
    }
    for (int32_t i = ns ? 0 : -1; i >= 0; i = next[i])
        if (tok_ids_push(out, sym[i])) return CAIRN_ENOMEM;
    return 0;
}

int tok_bpe_encode_word(const cairn_tokenizer_t *t, const char *w, size_t n, tok_ids_t *out)
{
    tok_bpe_t *b = (tok_bpe_t *)&t->bpe; /* only the locked cache is written */
    if (n == 0) return 0;
    if (b->ignore_merges) {
        int32_t id = tok_strmap_get(&b->vocab, w, n);
        if (id >= 0) return tok_ids_push(out, id);
    }
    uint64_t h = 0;
    tok_cache_slot_t *slot = NULL;
    if (n <= TOK_CACHE_WORD) {
        h = tok_hash(w, n);
        slot = &b->cache[(h >> 32) & (TOK_CACHE_SLOTS - 1)];
        int32_t ids[TOK_CACHE_IDS];
        size_t nids = 0;
        pthread_mutex_lock(&b->cache_lock);
        bool hit = slot->wlen == n && slot->hash == (uint32_t)h && memcmp(slot->word, w, n) == 0;
        if (hit) {
            nids = slot->nids;
            memcpy(ids, slot->ids, nids * sizeof ids[0]);
        }
        pthread_mutex_unlock(&b->cache_lock);
        if (hit) {
            for (size_t i = 0; i < nids; i++)
                if (tok_ids_push(out, ids[i])) return CAIRN_ENOMEM;
            return 0;
        }
    }

    int32_t s_sym[SMALL_SYMS], s_prev[SMALL_SYMS], s_next[SMALL_SYMS];
    cand_t s_heap[3 * SMALL_SYMS];
    int32_t *sym = s_sym, *prev = s_prev, *next = s_next;
    cand_t *heap = s_heap;
    int rc = 0;
    if (n > SMALL_SYMS) {
        sym = cairn_malloc(n * sizeof *sym);
        prev = cairn_malloc(n * sizeof *prev);
        next = cairn_malloc(n * sizeof *next);
        heap = cairn_malloc(3 * n * sizeof *heap);
        if (!sym || !prev || !next || !heap) { rc = CAIRN_ENOMEM; goto fail; }
    }

    /* One symbol per character; unknown characters become unk (fused if fuse_unk) or are
     * dropped when the model has no unk token, as in `tokenizers`. */
    size_t ns = 0;
    bool last_unk = false;
    for (size_t i = 0; i < n;) {
        size_t adv;
        uint32_t cp = tok_utf8_decode((const unsigned char *)w + i, &adv);
        int32_t id = cp < 2048 ? b->char_id[cp] : tok_strmap_get(&b->vocab, w + i, adv);
        i += adv;
        if (id < 0) {
            if (b->unk_id < 0 || (b->fuse_unk && last_unk)) continue;
            id = b->unk_id;
            last_unk = true;
        } else {
            last_unk = false;
        }
        sym[ns] = id;
        prev[ns] = (int32_t)ns - 1;
        next[ns] = (int32_t)ns + 1;
        ns++;
    }
    if (ns) next[ns - 1] = -1;

    size_t first = out->len;
    if ((rc = merge_word(b, sym, prev, next, ns, heap, out))) goto fail;
    size_t nids = out->len - first;
    if (slot && nids <= TOK_CACHE_IDS) {
        pthread_mutex_lock(&b->cache_lock);
        slot->hash = (uint32_t)h;
        slot->wlen = (uint8_t)n;
        slot->nids = (uint8_t)nids;
        memcpy(slot->word, w, n);
        memcpy(slot->ids, out->p + first, nids * sizeof(int32_t));
        pthread_mutex_unlock(&b->cache_lock);
    }
fail:
    if (sym != s_sym) {
        cairn_free(sym);
        cairn_free(prev);
        cairn_free(next);
        cairn_free(heap);
    }
    return rc;
}
