/*
 * kv_internal.h — the KV cache core's private structures, shared by the src/kv sources and the
 * white-box tests. Nothing here is part of the public API.
 *
 * Module map (one noun per file):
 *   block_hash.c      chained SHA-256 block hashes (direct SHA256_* per block; EVP for the rest)
 *   prefix_index.c    open-addressing table of 32-bit ids keyed by a caller's hash/match
 *   block_pool.c      block metadata: refcounts, free queue, LRU of cached blocks
 *   phys_pool.c       reserved/committed byte range addressed by block id
 *   kv_storage.c      host backend of that range
 *   cache_group.c     layer specs -> groups and the per-layer offset table; window rules
 *   checkpoint_registry.c  recurrent-state checkpoint keys with LRU capacity
 *   kv_cache.c        the cache: allocation policy (grow, evict), lookup, create/destroy
 *   sequence.c        per-request block tables and token history
 *   kv_stats.c        counters snapshot and JSON
 */
#ifndef CAIRN_KV_INTERNAL_H
#define CAIRN_KV_INTERNAL_H

#include "cairn/kv_cache.h"

#include <openssl/evp.h>

#define KV_NONE UINT32_MAX

/* ---- block_hash.c ---- */

typedef struct {
    EVP_MD *md;        /* SHA-256, fetched once */
    EVP_MD_CTX *ctx;   /* reused for every digest */
    uint8_t *buf;      /* parent || domain || tokens || extras scratch, 96 + 4 * bs bytes */
    uint32_t block_size;
} kv_hasher_t;

int kv_hasher_init(kv_hasher_t *h, uint32_t block_size);
void kv_hasher_fini(kv_hasher_t *h);
int kv_hash_bytes(kv_hasher_t *h, const void *data, size_t n, cairn_kv_hash_t *out);
/* Digest of the extra keys (count and lengths prefixed); *has = false when n == 0. */
int kv_hash_extras(kv_hasher_t *h, const cairn_kv_extra_key_t *keys, size_t n,
                   cairn_kv_hash_t *out, bool *has);
/* Hashes blocks [first, first + count) of `tokens` into out[first..]; out[first-1] is the
 * parent when first > 0. */
int kv_hash_chain(kv_hasher_t *h, const cairn_kv_hash_t *domain, const cairn_kv_hash_t *extras,
                  const int32_t *tokens, size_t first, size_t count, cairn_kv_hash_t *out);

/* ---- prefix_index.c ---- */

typedef bool (*kv_index_match_fn)(const void *ctx, uint32_t id, const void *key);
typedef uint64_t (*kv_index_hash_fn)(const void *ctx, uint32_t id);

typedef struct {
    uint32_t *slots;   /* id or 0 (empty); ids are >= 1 */
    uint32_t mask;     /* capacity - 1, capacity a power of two */
    uint32_t count;
    kv_index_hash_fn hash_of;
    kv_index_match_fn match;
    const void *ctx;
} kv_index_t;

int kv_index_init(kv_index_t *ix, uint32_t max_entries, kv_index_hash_fn hash_of,
                  kv_index_match_fn match, const void *ctx);
void kv_index_fini(kv_index_t *ix);
/* Makes room for max_entries at load <= 1/2 (rehash). CAIRN_ENOMEM leaves it unchanged. */
int kv_index_reserve(kv_index_t *ix, uint32_t max_entries);
uint32_t kv_index_find(const kv_index_t *ix, uint64_t h, const void *key);
void kv_index_insert(kv_index_t *ix, uint64_t h, uint32_t id);
void kv_index_remove(kv_index_t *ix, uint64_t h, uint32_t id);

static inline uint64_t kv_hash_word(const cairn_kv_hash_t *k)
{
    uint64_t w;
    __builtin_memcpy(&w, k->bytes, sizeof w);
    return w;
}

/* ---- block_pool.c ---- */

enum { KV_BLOCK_FREE = 0, KV_BLOCK_CACHED = 1, KV_BLOCK_USED = 2, KV_BLOCK_NULL = 3 };

typedef struct {
    cairn_kv_hash_t hash;     /* valid while registered */
    cairn_kv_hash_t domain;   /* valid while registered */
    uint32_t ref;             /* table references + pins */
    uint32_t pins;            /* references held outside any table: an import in flight,
                                 or cairn_kv_cache_block_pin (a copy being taken) */
    uint32_t prev, next;      /* links in the free queue or the LRU, KV_NONE at the ends */
    uint8_t state;            /* KV_BLOCK_* */
    uint8_t registered;       /* published in the prefix index */
    uint8_t retained;         /* retention hint (cairn_kv_seq_retain): cached, it stays in
                                 the LRU's retained part; cleared when it leaves the cache */
    uint8_t importing;        /* taken by cairn_kv_cache_import_begin, not yet handed back */
    uint16_t group;           /* cache group that wrote it (valid while registered) */
} kv_block_t;

typedef struct { uint32_t head, tail, count; } kv_list_t;

typedef struct {
    kv_block_t *blocks;  /* n_blocks entries; block 0 is the null block */
    uint32_t n_blocks;
    kv_list_t free;      /* FIFO: allocate from head, release to tail */
    kv_list_t lru;       /* cached blocks, least recently used at head; the unretained
                            ones all come before the retained ones, so eviction from the
                            head takes every unretained block before any retained one */
    uint32_t lru_kept;   /* first retained block of the LRU, KV_NONE when none */
    uint32_t n_used;
    uint32_t n_pinned;   /* blocks with pins > 0 */
} kv_block_pool_t;

int kv_block_pool_init(kv_block_pool_t *bp, uint32_t n_blocks);
void kv_block_pool_fini(kv_block_pool_t *bp);
/* Adds blocks [n_blocks, new_n) to the free queue. CAIRN_ENOMEM leaves it unchanged. */
int kv_block_pool_resize(kv_block_pool_t *bp, uint32_t new_n);
/* Pops the head of the free queue as a used block with ref 1; 0 when empty. */
uint32_t kv_block_pool_alloc(kv_block_pool_t *bp);
/* Takes a reference on a used or cached block (a cached one leaves the LRU). */
void kv_block_pool_ref(kv_block_pool_t *bp, uint32_t id);
/* Drops a reference; at zero the block joins the LRU tail (registered) or the free tail.
 * Returns true when the count reached zero. The null block is ignored. */
bool kv_block_pool_unref(kv_block_pool_t *bp, uint32_t id);
/* Moves a cached block to the free tail and clears `registered` and `retained` (index
 * removal is the caller's). */
void kv_block_pool_uncache(kv_block_pool_t *bp, uint32_t id);
/* Retention hint on a used block: when its last reference goes it joins the LRU's
 * retained part (tail) instead of the end of the unretained part. The null block is
 * ignored. O(1). */
void kv_block_pool_retain(kv_block_pool_t *bp, uint32_t id);

/* ---- phys_pool.c ---- */

typedef struct {
    const cairn_kv_storage_ops_t *ops;
    void *ctx;
    uint8_t *base;
    size_t block_bytes;
    size_t gran;
    size_t reserved_bytes, committed_bytes;
    uint32_t max_blocks, n_blocks;
} kv_phys_pool_t;

int kv_phys_pool_init(kv_phys_pool_t *pp, const cairn_kv_storage_ops_t *ops, void *ctx,
                      size_t block_bytes, uint32_t max_blocks, uint32_t initial_blocks);
void kv_phys_pool_fini(kv_phys_pool_t *pp);
int kv_phys_pool_grow(kv_phys_pool_t *pp, uint32_t new_blocks);
void kv_phys_pool_copy_block(kv_phys_pool_t *pp, uint32_t dst, uint32_t src);

/* ---- cache_group.c ---- */

typedef struct {
    cairn_kv_layer_kind_t kind;  /* FULL, SLIDING or RECURRENT */
    uint32_t window;             /* SLIDING */
    uint32_t n_layers;
    size_t bytes;                /* per block, all of this group's storage layers */
} kv_group_t;

typedef struct {
    cairn_kv_layer_kind_t kind;
    uint32_t group;              /* index into the group array */
    uint32_t storage_layer;      /* itself, or the source of a SHARED layer */
    uint32_t n_kv_heads, head_dim;
    size_t k_offset, v_offset, slot_stride;
} kv_layer_t;

/* Builds groups (the FULL layers, the SLIDING layers of each window and the RECURRENT
 * layers each form a class; a paged class larger than the smallest is split into groups
 * of that many layers, see cache_group.c) and the per-layer offsets inside a block;
 * *block_bytes is the largest group's bytes per block rounded to 64. */
int kv_groups_build(const cairn_kv_layer_spec_t *specs, uint32_t n_layers, cairn_dtype_t dtype,
                    uint32_t block_size, kv_group_t *groups, uint32_t *n_groups,
                    kv_layer_t *layers, size_t *block_bytes);

/* First block a sliding group still needs once n_computed tokens are computed: the next
 * position n_computed attends to (n_computed - W, n_computed]. */
static inline size_t kv_sliding_first_live(uint32_t window, uint32_t block_size, size_t n_computed)
{
    return n_computed + 1 > window ? (n_computed + 1 - window) / block_size : 0;
}

/* ---- checkpoint_registry.c ---- */

typedef struct {
    cairn_kv_hash_t key;
    uint32_t prev, next;  /* LRU links (live) or free-list link in next */
} kv_ckpt_t;

typedef struct {
    kv_ckpt_t *e;         /* cap + 1 entries, id 0 unused */
    uint32_t cap, count;
    uint32_t head, tail;  /* LRU: least recent at head */
    uint32_t free_head;
    kv_index_t ix;
    cairn_kv_checkpoint_evict_fn on_evict;
    void *user;
} kv_ckpt_registry_t;

int kv_ckpt_init(kv_ckpt_registry_t *r, uint32_t cap, cairn_kv_checkpoint_evict_fn fn, void *user);
void kv_ckpt_fini(kv_ckpt_registry_t *r);
void kv_ckpt_add(kv_ckpt_registry_t *r, const cairn_kv_hash_t *key);
bool kv_ckpt_has(const kv_ckpt_registry_t *r, const cairn_kv_hash_t *key);
void kv_ckpt_touch(kv_ckpt_registry_t *r, const cairn_kv_hash_t *key);
int kv_ckpt_drop(kv_ckpt_registry_t *r, const cairn_kv_hash_t *key);

/* ---- kv_cache.c / sequence.c ---- */

struct cairn_kv_seq {
    cairn_kv_cache_t *cache;
    cairn_kv_seq_t *prev, *next;     /* the cache's list of open sequences */
    cairn_kv_hash_t domain, extras;
    bool has_extras;
    bool preempted;
    int32_t *tokens;                 /* history, n_tokens of cap_tokens */
    size_t n_tokens, cap_tokens;
    size_t n_computed;
    cairn_kv_hash_t *hashes;         /* hashes of the full blocks [0, n_hashed) */
    size_t n_hashed, cap_hashes;
    uint32_t *tables[CAIRN_KV_MAX_GROUPS]; /* paged groups: n_table of cap_table ids */
    size_t n_table, cap_table;
    size_t n_published[CAIRN_KV_MAX_GROUPS]; /* leading blocks already offered to the index */
    size_t n_dead[CAIRN_KV_MAX_GROUPS];      /* sliding: leading null entries, always
                                                kv_sliding_first_live(n_computed) */
};

/* Test-only observer of evictions (white-box model test). */
typedef void (*kv_evict_observer_fn)(void *user, uint32_t block);

struct cairn_kv_cache {
    uint32_t block_size;
    cairn_dtype_t dtype;
    uint32_t n_layers;
    kv_layer_t *layers;
    kv_group_t groups[CAIRN_KV_MAX_GROUPS];
    uint32_t n_groups;
    int recurrent_group;             /* index or -1 */
    kv_hasher_t hasher;
    kv_block_pool_t pool;
    kv_index_t index;
    kv_phys_pool_t phys;
    kv_ckpt_registry_t ckpt;
    cairn_kv_seq_t *seqs;
    uint32_t n_seqs;
    uint32_t *scratch;               /* lookup scratch: per group found ids + counts */
    size_t scratch_cap;
    uint64_t hits, misses, hit_tokens, query_tokens, evictions, grows, cow_copies;
    kv_evict_observer_fn evict_observer;
    void *evict_observer_user;
    cairn_kv_evict_filter_fn evict_filter; /* write-back: may keep a cached block (NULL: none) */
    void *evict_filter_user;
};

/* Makes `needed` blocks free: one grow if short, then eviction of LRU cached blocks.
 * CAIRN_EEXHAUSTED (nothing evicted) when free + cached cannot cover it after growing. */
int kv_cache__ensure_free(cairn_kv_cache_t *c, size_t needed);
/* Allocates one block (after ensure_free) for group g. */
uint32_t kv_cache__alloc(cairn_kv_cache_t *c);
/* Publishes block `id` of group g under hash; false when an equal block is already
 * registered (the caller keeps its own, unregistered). */
bool kv_cache__publish(cairn_kv_cache_t *c, uint32_t id, uint32_t g, const cairn_kv_hash_t *hash,
                       const cairn_kv_hash_t *domain);
/* Removes a registered block from the index (it stays allocated). */
void kv_cache__unpublish(cairn_kv_cache_t *c, uint32_t id);
/* Finds the usable prefix in whole blocks over hashes[0..kmax) and, when ids != NULL,
 * stores per paged group g the found ids in ids[g * kmax + j]. */
int kv_cache__find_prefix(cairn_kv_cache_t *c, const cairn_kv_hash_t *domain,
                          const cairn_kv_hash_t *hashes, size_t kmax, size_t *k_out, uint32_t **ids);
/* Debug/test: checks every pool and index invariant; returns 0 or CAIRN_ECORRUPT. */
int kv_cache__check(const cairn_kv_cache_t *c);
/* Sequences release their blocks before the cache is destroyed. */
void kv_seq__destroy_all(cairn_kv_cache_t *c);

static inline bool kv_group_paged(const kv_group_t *g)
{
    return g->kind != CAIRN_KV_LAYER_RECURRENT;
}

#endif /* CAIRN_KV_INTERNAL_H */
