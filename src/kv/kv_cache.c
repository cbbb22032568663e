/*
 * kv_cache.c — the cache object: creation from a model geometry, the allocation policy
 * (grow, then evict), publication in the prefix index and the usable-prefix search.
 *
 * Invariants (checked by kv_cache__check, which the model-based test calls every step):
 *  - every block id in [1, n_blocks) is exactly one of FREE / CACHED / USED (block_pool.c);
 *  - a block's refcount equals the number of sequence-table entries naming it plus its
 *    pins (imports in flight and cairn_kv_cache_block_pin);
 *  - the prefix index holds exactly the registered blocks, keyed by (hash, domain, group);
 *    a block registered in one domain is never returned for another (the domain is part
 *    of both the hash and the match);
 *  - pool metadata, prefix index and committed storage cover the same n_blocks, all
 *    <= max_blocks; storage never moves.
 * Allocation policy for a request of `needed` blocks: if the free queue is short, grow once
 * to min(max, max(2 x current, current + deficit)); if still short and free + cached
 * covers it, evict least recently used cached blocks (unretained ones first: block_pool.c;
 * only those a write-back filter lets go: the cold tier keeps a block cached until it is
 * persisted); otherwise CAIRN_EEXHAUSTED with nothing evicted. Because callers ask for
 * their whole need up front, an allocation loop
 * can never run dry midway, so no mid-loop retry is needed.
 * Thread-safety: one engine thread per cache; nothing here locks.
 */
#include "kv/kv_internal.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
    const cairn_kv_hash_t *hash;
    const cairn_kv_hash_t *domain;
    uint32_t group;
} block_key_t;

static uint64_t block_index_hash(const cairn_kv_hash_t *hash, uint32_t group)
{
    return kv_hash_word(hash) ^ ((uint64_t)group * 0x9E3779B97F4A7C15ull);
}

static uint64_t block_hash_of(const void *ctx, uint32_t id)
{
    const kv_block_pool_t *bp = ctx;
    return block_index_hash(&bp->blocks[id].hash, bp->blocks[id].group);
}

static bool block_match(const void *ctx, uint32_t id, const void *key)
{
    const kv_block_pool_t *bp = ctx;
    const block_key_t *k = key;
    const kv_block_t *b = &bp->blocks[id];
    return b->group == k->group && memcmp(b->hash.bytes, k->hash->bytes, 32) == 0 &&
           memcmp(b->domain.bytes, k->domain->bytes, 32) == 0;
}

static const cairn_kv_hash_t default_domain;

int cairn_kv_cache_create(const cairn_kv_config_t *cfg, cairn_kv_cache_t **out)
{
    if (!cfg || !out)
        return CAIRN_EINVAL;
    *out = NULL;
    int rc = CAIRN_ENOMEM;
    cairn_kv_cache_t *c = cairn_calloc(1, sizeof *c);
    if (!c)
        return CAIRN_ENOMEM;
    c->recurrent_group = -1;
    c->block_size = (uint32_t)cairn_knob_int("CAIRN_KV_BLOCK_SIZE", cfg->block_size != 0,
                                             cfg->block_size, 16, 1, 1024);
    c->dtype = cfg->dtype;
    c->n_layers = cfg->n_layers;
    if (cfg->n_layers == 0 || !cfg->layers) {
        rc = CAIRN_EINVAL;
        goto fail;
    }
    c->layers = cairn_calloc(cfg->n_layers, sizeof *c->layers);
    if (!c->layers)
        goto fail;
    size_t block_bytes = 0;
    rc = kv_groups_build(cfg->layers, cfg->n_layers, cfg->dtype, c->block_size, c->groups,
                         &c->n_groups, c->layers, &block_bytes);
    if (rc)
        goto fail;
    for (uint32_t g = 0; g < c->n_groups; g++)
        if (c->groups[g].kind == CAIRN_KV_LAYER_RECURRENT)
            c->recurrent_group = (int)g;

    int64_t max_mib = cairn_knob_int("CAIRN_KV_MEMORY_MB", cfg->memory_mib != 0,
                                     (int64_t)cfg->memory_mib, 2048, 1, INT64_C(1) << 30);
    int64_t init_mib = cairn_knob_int("CAIRN_KV_INITIAL_MB", cfg->initial_mib != 0,
                                      (int64_t)cfg->initial_mib, max_mib, 1, INT64_C(1) << 30);
    if (init_mib > max_mib)
        init_mib = max_mib;
    uint64_t max_blocks = ((uint64_t)max_mib << 20) / block_bytes;
    uint64_t init_blocks = ((uint64_t)init_mib << 20) / block_bytes;
    if (max_blocks < 2 || max_blocks > (UINT64_C(1) << 31)) {
        cairn_log(CAIRN_LOG_ERROR, "kv cache: a %lld MiB budget holds %llu blocks of %zu bytes",
                  (long long)max_mib, (unsigned long long)max_blocks, block_bytes);
        rc = CAIRN_ERANGE;
        goto fail;
    }
    if (init_blocks < 2)
        init_blocks = 2;
    uint32_t max_ckpt = (uint32_t)cairn_knob_int("CAIRN_KV_MAX_CHECKPOINTS",
                                                 cfg->max_checkpoints != 0, cfg->max_checkpoints,
                                                 256, 0, 1 << 24);

    rc = kv_hasher_init(&c->hasher, c->block_size);
    if (rc)
        goto fail;
    rc = kv_block_pool_init(&c->pool, (uint32_t)init_blocks);
    if (rc)
        goto fail;
    rc = kv_index_init(&c->index, (uint32_t)init_blocks, block_hash_of, block_match, &c->pool);
    if (rc)
        goto fail;
    rc = kv_ckpt_init(&c->ckpt, c->recurrent_group >= 0 ? max_ckpt : 0, cfg->on_checkpoint_evict,
                      cfg->checkpoint_user);
    if (rc)
        goto fail;
    rc = kv_phys_pool_init(&c->phys, cfg->storage ? cfg->storage : cairn_kv_storage_host(),
                           cfg->storage ? cfg->storage_ctx : NULL, block_bytes,
                           (uint32_t)max_blocks, (uint32_t)init_blocks);
    if (rc)
        goto fail;
    cairn_log(CAIRN_LOG_INFO,
              "kv cache: %u layers in %u groups, block %u tokens x %zu bytes, %u initial / %u max "
              "blocks%s",
              c->n_layers, c->n_groups, c->block_size, block_bytes, (unsigned)init_blocks,
              (unsigned)max_blocks, init_blocks < max_blocks ? " (grow on demand)" : "");
    *out = c;
    return CAIRN_OK;
fail:
    cairn_kv_cache_destroy(c);
    return rc;
}

void cairn_kv_cache_destroy(cairn_kv_cache_t *c)
{
    if (!c)
        return;
    kv_seq__destroy_all(c);
    kv_phys_pool_fini(&c->phys);
    kv_ckpt_fini(&c->ckpt);
    kv_index_fini(&c->index);
    kv_block_pool_fini(&c->pool);
    kv_hasher_fini(&c->hasher);
    cairn_free(c->scratch);
    cairn_free(c->layers);
    cairn_free(c);
}

int cairn_kv_domain_from_salt(cairn_kv_cache_t *c, const void *salt, size_t len, cairn_kv_hash_t *out)
{
    if (!c || !out)
        return CAIRN_EINVAL;
    if (len > CAIRN_KV_MAX_SALT)
        return CAIRN_ERANGE;
    if (!salt || len == 0) {
        memset(out, 0, sizeof *out);
        return CAIRN_OK;
    }
    return kv_hash_bytes(&c->hasher, salt, len, out);
}

/* ---- Importing full blocks (cold-tier restore) ---- */

/* A dense cache (one FULL group) may publish an import with the group-less call: its
 * bytes are the whole block, and nothing else (a window, a recurrent state) has to agree
 * with them. Other caches name the group (cairn_kv_cache_import_publish_group), and the
 * caller answers for the agreement. */
static bool import_ok(const cairn_kv_cache_t *c)
{
    return c->n_groups == 1 && c->groups[0].kind == CAIRN_KV_LAYER_FULL;
}

/* A block import_begin handed out and nobody published or discarded since. */
static bool is_import(const cairn_kv_cache_t *c, uint32_t block)
{
    if (block == 0 || block >= c->pool.n_blocks)
        return false;
    const kv_block_t *b = &c->pool.blocks[block];
    return b->state == KV_BLOCK_USED && b->importing && b->ref == 1 && b->pins == 1 && !b->registered;
}

int cairn_kv_cache_import_begin(cairn_kv_cache_t *c, uint32_t *block, void **bytes)
{
    if (!c || !block || !bytes)
        return CAIRN_EINVAL;
    int rc = kv_cache__ensure_free(c, 1);
    if (rc)
        return rc;
    *block = kv_cache__alloc(c);
    c->pool.blocks[*block].pins = 1; /* held by the importer until publish or discard */
    c->pool.blocks[*block].importing = 1;
    c->pool.n_pinned++;
    *bytes = c->phys.base + (size_t)*block * c->phys.block_bytes;
    return CAIRN_OK;
}

int cairn_kv_cache_import_publish_group(cairn_kv_cache_t *c, uint32_t block, uint32_t group,
                                        const cairn_kv_hash_t *domain, const cairn_kv_hash_t *hash)
{
    /* Misuse (a block not taken by import_begin, or already handed back) is an error, not
     * an abort: the caller is the engine's cold-tier bridge and must be able to recover. */
    if (!c || !domain || !hash || !is_import(c, block) || group >= c->n_groups ||
        !kv_group_paged(&c->groups[group]))
        return CAIRN_EINVAL;
    bool ok = kv_cache__publish(c, block, group, hash, domain);
    c->pool.blocks[block].pins = 0;
    c->pool.blocks[block].importing = 0;
    c->pool.n_pinned--;
    kv_block_pool_unref(&c->pool, block); /* registered: joins the LRU; else the free queue */
    return ok ? CAIRN_OK : CAIRN_EBUSY;
}

int cairn_kv_cache_import_publish(cairn_kv_cache_t *c, uint32_t block, const cairn_kv_hash_t *domain,
                                  const cairn_kv_hash_t *hash)
{
    if (c && !import_ok(c))
        return CAIRN_EUNSUPPORTED;
    return cairn_kv_cache_import_publish_group(c, block, 0, domain, hash);
}

int cairn_kv_cache_import_discard(cairn_kv_cache_t *c, uint32_t block)
{
    if (!c || !is_import(c, block))
        return CAIRN_EINVAL;
    c->pool.blocks[block].pins = 0;
    c->pool.blocks[block].importing = 0;
    c->pool.n_pinned--;
    kv_block_pool_unref(&c->pool, block);
    return CAIRN_OK;
}

int cairn_kv_cache_import_prefault(cairn_kv_cache_t *c, const uint32_t *blocks, size_t n)
{
    if (!c || (!blocks && n))
        return CAIRN_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!is_import(c, blocks[i]))
            return CAIRN_EINVAL;
#ifdef MADV_POPULATE_WRITE
    if (c->phys.ops != cairn_kv_storage_host())
        return CAIRN_OK;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && blocks[j] == blocks[j - 1] + 1)
            j++;
        /* Rounding out to pages stays inside the committed range (whole blocks, committed
         * in page multiples) and never changes a byte. */
        uintptr_t lo = (uintptr_t)(c->phys.base + (size_t)blocks[i] * c->phys.block_bytes);
        uintptr_t hi = (uintptr_t)(c->phys.base + ((size_t)blocks[j - 1] + 1) * c->phys.block_bytes);
        lo &= ~(page - 1);
        hi = (hi + page - 1) & ~(page - 1);
        if (madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) != 0 && errno == EINVAL)
            break; /* a kernel before 5.14: the pages fault in as they are filled */
        i = j;
    }
#endif
    return CAIRN_OK;
}

/* ---- Pins and per-group lookups (cold-tier capture and restore) ---- */

int cairn_kv_cache_block_pin(cairn_kv_cache_t *c, uint32_t block)
{
    if (!c || block == 0 || block >= c->pool.n_blocks)
        return CAIRN_EINVAL;
    kv_block_t *b = &c->pool.blocks[block];
    if ((b->state != KV_BLOCK_USED && b->state != KV_BLOCK_CACHED) || b->pins == UINT32_MAX || b->importing)
        return CAIRN_EINVAL;
    kv_block_pool_ref(&c->pool, block); /* a cached block leaves the LRU: never evicted */
    if (b->pins++ == 0)
        c->pool.n_pinned++;
    return CAIRN_OK;
}

int cairn_kv_cache_block_unpin(cairn_kv_cache_t *c, uint32_t block)
{
    if (!c || block == 0 || block >= c->pool.n_blocks)
        return CAIRN_EINVAL;
    kv_block_t *b = &c->pool.blocks[block];
    /* An import's own pin goes with publish or discard. */
    if (b->state != KV_BLOCK_USED || b->pins == 0 || b->importing)
        return CAIRN_EINVAL;
    if (--b->pins == 0)
        c->pool.n_pinned--;
    kv_block_pool_unref(&c->pool, block); /* the last reference: cached (published) or free */
    return CAIRN_OK;
}

uint32_t cairn_kv_cache_find_block(const cairn_kv_cache_t *c, uint32_t group, const cairn_kv_hash_t *domain,
                                   const cairn_kv_hash_t *hash)
{
    if (!c || !hash || group >= c->n_groups || !kv_group_paged(&c->groups[group]))
        return 0;
    block_key_t key = {hash, domain ? domain : &default_domain, group};
    return kv_index_find(&c->index, block_index_hash(hash, group), &key);
}

uint32_t cairn_kv_cache_n_groups(const cairn_kv_cache_t *c) { return c->n_groups; }

bool cairn_kv_cache_host_storage(const cairn_kv_cache_t *c) { return c && c->phys.ops == cairn_kv_storage_host(); }

int cairn_kv_cache_group_info(const cairn_kv_cache_t *c, uint32_t group, cairn_kv_group_info_t *out)
{
    if (!c || !out || group >= c->n_groups)
        return CAIRN_EINVAL;
    out->kind = c->groups[group].kind;
    out->window = c->groups[group].window;
    out->n_layers = c->groups[group].n_layers;
    out->bytes = c->groups[group].bytes;
    return CAIRN_OK;
}

int cairn_kv_cache_layer_group(const cairn_kv_cache_t *c, uint32_t layer, uint32_t *group)
{
    if (!c || !group || layer >= c->n_layers)
        return CAIRN_EINVAL;
    *group = c->layers[layer].group;
    return CAIRN_OK;
}

size_t cairn_kv_sliding_first_live(uint32_t window, uint32_t block_size, size_t n_computed)
{
    return block_size ? kv_sliding_first_live(window, block_size, n_computed) : 0;
}

int cairn_kv_cache_checkpoint_add(cairn_kv_cache_t *c, const cairn_kv_hash_t *key)
{
    if (!c || !key)
        return CAIRN_EINVAL;
    if (c->recurrent_group < 0)
        return CAIRN_EUNSUPPORTED;
    kv_ckpt_add(&c->ckpt, key);
    return CAIRN_OK;
}

bool cairn_kv_cache_checkpoint_has(const cairn_kv_cache_t *c, const cairn_kv_hash_t *key)
{
    return c && key && c->recurrent_group >= 0 && kv_ckpt_has(&c->ckpt, key);
}

void *cairn_kv_cache_block_data(const cairn_kv_cache_t *c, uint32_t block)
{
    if (block == 0 || block >= c->pool.n_blocks)
        return NULL;
    return c->phys.base + (size_t)block * c->phys.block_bytes;
}

uint32_t cairn_kv_cache_block_size(const cairn_kv_cache_t *c) { return c->block_size; }
uint32_t cairn_kv_cache_n_layers(const cairn_kv_cache_t *c) { return c->n_layers; }
size_t cairn_kv_cache_block_bytes(const cairn_kv_cache_t *c) { return c->phys.block_bytes; }

int cairn_kv_layer_view(const cairn_kv_cache_t *c, uint32_t layer, cairn_kv_layer_view_t *v)
{
    if (!c || !v || layer >= c->n_layers || c->layers[layer].kind == CAIRN_KV_LAYER_RECURRENT)
        return CAIRN_EINVAL;
    const kv_layer_t *L = &c->layers[layer];
    v->base = c->phys.base;
    v->block_stride = c->phys.block_bytes;
    v->k_offset = L->k_offset;
    v->v_offset = L->v_offset;
    v->slot_stride = L->slot_stride;
    v->n_kv_heads = L->n_kv_heads;
    v->head_dim = L->head_dim;
    v->dtype = c->dtype;
    return CAIRN_OK;
}

/* ---- allocation policy ---- */

static int grow_to(cairn_kv_cache_t *c, uint32_t new_n)
{
    int rc = kv_index_reserve(&c->index, new_n);
    if (rc)
        return rc;
    rc = kv_phys_pool_grow(&c->phys, new_n);
    if (rc)
        return rc;
    rc = kv_block_pool_resize(&c->pool, new_n); /* storage first: a free block has bytes */
    if (rc)
        return rc;
    c->grows++;
    cairn_log(CAIRN_LOG_DEBUG, "kv cache: pool grew to %u blocks", new_n);
    return CAIRN_OK;
}

static void evict_block(cairn_kv_cache_t *c, uint32_t id)
{
    kv_block_t *b = &c->pool.blocks[id];
    kv_index_remove(&c->index, block_index_hash(&b->hash, b->group), id);
    kv_block_pool_uncache(&c->pool, id);
    c->evictions++;
    if (c->evict_observer)
        c->evict_observer(c->evict_observer_user, id);
}

/* Whether the write-back filter lets cached block id go (no filter: always). */
static bool may_evict(cairn_kv_cache_t *c, uint32_t id)
{
    const kv_block_t *b = &c->pool.blocks[id];
    return !c->evict_filter || c->evict_filter(c->evict_filter_user, id, b->group, &b->hash, &b->domain);
}

int kv_cache__ensure_free(cairn_kv_cache_t *c, size_t needed)
{
    if (c->pool.free.count >= needed)
        return CAIRN_OK;
    if (needed >= c->phys.max_blocks)
        return CAIRN_EEXHAUSTED; /* more than the whole pool: nothing to try */
    int grow_rc = 0;
    uint32_t cur = c->pool.n_blocks, max = c->phys.max_blocks;
    if (cur < max) {
        uint64_t want = (uint64_t)cur + (needed - c->pool.free.count);
        if (want < 2 * (uint64_t)cur)
            want = 2 * (uint64_t)cur;
        if (want > max)
            want = max;
        grow_rc = grow_to(c, (uint32_t)want);
        if (grow_rc)
            cairn_log(CAIRN_LOG_WARN, "kv cache: growing to %llu blocks failed: %s",
                      (unsigned long long)want, cairn_strerror(grow_rc));
    }
    if (c->pool.free.count >= needed)
        return CAIRN_OK;
    if ((size_t)c->pool.free.count + c->pool.lru.count < needed)
        return grow_rc ? grow_rc : CAIRN_EEXHAUSTED;
    if (!c->evict_filter) {
        while (c->pool.free.count < needed)
            evict_block(c, c->pool.lru.head);
        return CAIRN_OK;
    }
    /* With a write-back filter: count the blocks it lets go first, so a request they
     * cannot cover evicts nothing; then evict those, least recently used first. */
    size_t want = needed - c->pool.free.count, n = 0;
    for (uint32_t id = c->pool.lru.head; id != KV_NONE && n < want; id = c->pool.blocks[id].next)
        n += may_evict(c, id);
    if (n < want)
        return grow_rc ? grow_rc : CAIRN_EEXHAUSTED;
    for (uint32_t id = c->pool.lru.head; id != KV_NONE && c->pool.free.count < needed;) {
        uint32_t next = c->pool.blocks[id].next;
        if (may_evict(c, id))
            evict_block(c, id);
        id = next;
    }
    return CAIRN_OK;
}

void cairn_kv_cache_set_evict_filter(cairn_kv_cache_t *c, cairn_kv_evict_filter_fn fn, void *user)
{
    if (!c)
        return;
    c->evict_filter = fn;
    c->evict_filter_user = user;
}

uint32_t kv_cache__alloc(cairn_kv_cache_t *c)
{
    uint32_t id = kv_block_pool_alloc(&c->pool);
    CAIRN_ASSERT(id != 0); /* callers ensure_free() first */
    return id;
}

int cairn_kv_cache_grow(cairn_kv_cache_t *c, uint32_t free_needed)
{
    if (!c)
        return CAIRN_EINVAL;
    if (c->pool.free.count >= free_needed)
        return CAIRN_OK;
    uint32_t cur = c->pool.n_blocks, max = c->phys.max_blocks;
    uint64_t want = (uint64_t)cur + (free_needed - c->pool.free.count);
    if (want < 2 * (uint64_t)cur)
        want = 2 * (uint64_t)cur;
    if (want > max)
        want = max;
    if (want > cur) {
        int rc = grow_to(c, (uint32_t)want);
        if (rc)
            return rc;
    }
    return c->pool.free.count >= free_needed ? CAIRN_OK : CAIRN_EEXHAUSTED;
}

void cairn_kv_cache_evict(cairn_kv_cache_t *c, uint32_t n, uint32_t *evicted)
{
    uint32_t done = 0;
    while (done < n && c->pool.lru.count > 0) {
        evict_block(c, c->pool.lru.head);
        done++;
    }
    if (evicted)
        *evicted = done;
}

/* ---- prefix index ---- */

bool kv_cache__publish(cairn_kv_cache_t *c, uint32_t id, uint32_t g, const cairn_kv_hash_t *hash,
                       const cairn_kv_hash_t *domain)
{
    block_key_t key = {hash, domain, g};
    uint64_t h = block_index_hash(hash, g);
    if (kv_index_find(&c->index, h, &key))
        return false;
    kv_block_t *b = &c->pool.blocks[id];
    CAIRN_ASSERT(b->state == KV_BLOCK_USED && !b->registered);
    b->hash = *hash;
    b->domain = *domain;
    b->group = (uint16_t)g;
    b->registered = 1;
    kv_index_insert(&c->index, h, id);
    return true;
}

void kv_cache__unpublish(cairn_kv_cache_t *c, uint32_t id)
{
    kv_block_t *b = &c->pool.blocks[id];
    CAIRN_ASSERT(b->registered && b->state == KV_BLOCK_USED);
    kv_index_remove(&c->index, block_index_hash(&b->hash, b->group), id);
    b->registered = 0;
}

static int scratch_reserve(cairn_kv_cache_t *c, size_t n)
{
    if (n <= c->scratch_cap)
        return CAIRN_OK;
    size_t cap = c->scratch_cap ? c->scratch_cap : 256;
    while (cap < n)
        cap *= 2;
    uint32_t *s = cairn_realloc(c->scratch, cap * sizeof *s);
    if (!s)
        return CAIRN_ENOMEM;
    c->scratch = s;
    c->scratch_cap = cap;
    return CAIRN_OK;
}

int kv_cache__find_prefix(cairn_kv_cache_t *c, const cairn_kv_hash_t *domain,
                          const cairn_kv_hash_t *hashes, size_t kmax, size_t *k_out, uint32_t **ids_out)
{
    const uint32_t ng = c->n_groups, bs = c->block_size;
    int rc = scratch_reserve(c, (size_t)ng * (2 * kmax + 1) + 1);
    if (rc)
        return rc;
    uint32_t *ids = c->scratch, *miss = c->scratch + (size_t)ng * kmax;
    size_t limit = kmax;
    /* Full groups need every block from 0: the first miss bounds the prefix. */
    for (uint32_t g = 0; g < ng; g++) {
        if (c->groups[g].kind != CAIRN_KV_LAYER_FULL)
            continue;
        for (size_t j = 0; j < limit; j++) {
            block_key_t key = {&hashes[j], domain, g};
            uint32_t id = kv_index_find(&c->index, block_index_hash(&hashes[j], g), &key);
            if (!id) {
                limit = j;
                break;
            }
            ids[(size_t)g * kmax + j] = id;
        }
    }
    /* Sliding groups need only the window before the boundary: count misses so any
     * window is checked in O(1). */
    for (uint32_t g = 0; g < ng; g++) {
        if (c->groups[g].kind != CAIRN_KV_LAYER_SLIDING)
            continue;
        uint32_t *m = miss + (size_t)g * (kmax + 1);
        m[0] = 0;
        for (size_t j = 0; j < limit; j++) {
            block_key_t key = {&hashes[j], domain, g};
            uint32_t id = kv_index_find(&c->index, block_index_hash(&hashes[j], g), &key);
            ids[(size_t)g * kmax + j] = id;
            m[j + 1] = m[j] + (id == 0);
        }
    }
    size_t k = limit;
    for (;; k--) {
        bool ok = true;
        for (uint32_t g = 0; g < ng && ok && k > 0; g++) {
            const kv_group_t *G = &c->groups[g];
            if (G->kind == CAIRN_KV_LAYER_SLIDING) {
                const uint32_t *m = miss + (size_t)g * (kmax + 1);
                size_t lo = kv_sliding_first_live(G->window, bs, k * bs);
                ok = m[k] == m[lo];
            } else if (G->kind == CAIRN_KV_LAYER_RECURRENT) {
                ok = kv_ckpt_has(&c->ckpt, &hashes[k - 1]);
            }
        }
        if (ok || k == 0)
            break;
    }
    *k_out = k;
    if (ids_out)
        *ids_out = ids;
    return CAIRN_OK;
}

int cairn_kv_cache_hash_blocks(cairn_kv_cache_t *c, const cairn_kv_hash_t *domain,
                               const cairn_kv_extra_key_t *extras, size_t n_extras,
                               const int32_t *tokens, size_t n, cairn_kv_hash_t *out)
{
    if (!c || (!tokens && n) || (!out && n >= c->block_size) || (n_extras && !extras))
        return CAIRN_EINVAL;
    cairn_kv_hash_t ex;
    bool has = false;
    int rc = kv_hash_extras(&c->hasher, extras, n_extras, &ex, &has);
    if (rc)
        return rc;
    return kv_hash_chain(&c->hasher, domain ? domain : &default_domain, has ? &ex : NULL,
                         tokens, 0, n / c->block_size, out);
}

int cairn_kv_cache_lookup_hashes(cairn_kv_cache_t *c, const cairn_kv_hash_t *domain,
                                 const cairn_kv_hash_t *hashes, size_t n_tokens, size_t *prefix_len)
{
    if (!c || !prefix_len || n_tokens == 0 || (!hashes && n_tokens > c->block_size))
        return CAIRN_EINVAL;
    size_t k = 0;
    int rc = kv_cache__find_prefix(c, domain ? domain : &default_domain, hashes,
                                   (n_tokens - 1) / c->block_size, &k, NULL);
    if (rc)
        return rc;
    *prefix_len = k * c->block_size;
    return CAIRN_OK;
}

int cairn_kv_cache_lookup(cairn_kv_cache_t *c, const cairn_kv_hash_t *domain,
                          const cairn_kv_extra_key_t *extras, size_t n_extras,
                          const int32_t *tokens, size_t n, size_t *prefix_len)
{
    if (!c || !tokens || n == 0 || !prefix_len)
        return CAIRN_EINVAL;
    size_t nb = n / c->block_size;
    cairn_kv_hash_t *h = cairn_malloc((nb ? nb : 1) * sizeof *h);
    if (!h)
        return CAIRN_ENOMEM;
    int rc = cairn_kv_cache_hash_blocks(c, domain, extras, n_extras, tokens, n, h);
    if (!rc)
        rc = cairn_kv_cache_lookup_hashes(c, domain, h, n, prefix_len);
    cairn_free(h);
    return rc;
}

int cairn_kv_cache_checkpoint_drop(cairn_kv_cache_t *c, const cairn_kv_hash_t *key)
{
    if (!c || !key)
        return CAIRN_EINVAL;
    return kv_ckpt_drop(&c->ckpt, key);
}

/* ---- invariant check ---- */

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            cairn_log(CAIRN_LOG_ERROR, "kv check failed: %s (line %d)", #cond, __LINE__); \
            goto fail;                                                                     \
        }                                                                                  \
    } while (0)

int kv_cache__check(const cairn_kv_cache_t *c)
{
    const kv_block_pool_t *bp = &c->pool;
    uint32_t *refs = NULL;
    CHECK(bp->n_blocks <= c->phys.n_blocks && c->phys.n_blocks <= c->phys.max_blocks);
    CHECK(bp->blocks[0].state == KV_BLOCK_NULL && !bp->blocks[0].registered);
    uint32_t n_free = 0, n_cached = 0, n_used = 0, n_reg = 0;
    for (uint32_t id = bp->free.head, prev = KV_NONE; id != KV_NONE; prev = id, id = bp->blocks[id].next) {
        CHECK(id > 0 && id < bp->n_blocks && bp->blocks[id].state == KV_BLOCK_FREE);
        CHECK(bp->blocks[id].prev == prev && n_free < bp->n_blocks);
        n_free++;
    }
    bool in_kept = false; /* the LRU is [unretained | retained], lru_kept the first retained */
    for (uint32_t id = bp->lru.head, prev = KV_NONE; id != KV_NONE; prev = id, id = bp->blocks[id].next) {
        CHECK(id > 0 && id < bp->n_blocks && bp->blocks[id].state == KV_BLOCK_CACHED);
        CHECK(bp->blocks[id].prev == prev && n_cached < bp->n_blocks);
        if (!in_kept && bp->blocks[id].retained) {
            CHECK(bp->lru_kept == id);
            in_kept = true;
        }
        CHECK(in_kept == (bool)bp->blocks[id].retained);
        n_cached++;
    }
    CHECK(in_kept || bp->lru_kept == KV_NONE);
    CHECK(n_free == bp->free.count && n_cached == bp->lru.count);
    refs = cairn_calloc(bp->n_blocks, sizeof *refs);
    if (!refs)
        return CAIRN_ENOMEM;
    for (const cairn_kv_seq_t *s = c->seqs; s; s = s->next)
        for (uint32_t g = 0; g < c->n_groups; g++)
            if (kv_group_paged(&c->groups[g]))
                for (size_t j = 0; j < s->n_table; j++) {
                    uint32_t id = s->tables[g][j];
                    CHECK(id < bp->n_blocks);
                    if (id)
                        refs[id]++;
                }
    for (uint32_t id = 1; id < bp->n_blocks; id++) {
        const kv_block_t *b = &bp->blocks[id];
        CHECK(b->ref == refs[id] + b->pins);
        CHECK(b->pins == 0 || b->state == KV_BLOCK_USED);
        switch (b->state) {
        case KV_BLOCK_FREE: CHECK(b->ref == 0 && !b->registered); break;
        case KV_BLOCK_CACHED: CHECK(b->ref == 0 && b->registered); break;
        case KV_BLOCK_USED: CHECK(b->ref > 0); n_used++; break;
        default: CHECK(!"bad state");
        }
        if (b->registered) {
            n_reg++;
            block_key_t key = {&b->hash, &b->domain, b->group};
            CHECK(kv_index_find(&c->index, block_index_hash(&b->hash, b->group), &key) == id);
        }
    }
    uint32_t n_pinned = 0;
    for (uint32_t id = 1; id < bp->n_blocks; id++)
        n_pinned += bp->blocks[id].pins > 0;
    CHECK(n_pinned == bp->n_pinned);
    CHECK(n_used == bp->n_used && n_free + n_cached + n_used + 1 == bp->n_blocks);
    CHECK(n_reg == c->index.count);
    cairn_free(refs);
    return CAIRN_OK;
fail:
    cairn_free(refs);
    return CAIRN_ECORRUPT;
}
