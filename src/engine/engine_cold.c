/*
 * engine_cold.c — the engine's bridge to the cache tier (include/cairn/tier.h): restore a
 * returning prompt's prefix from a store instead of recomputing it, and capture full
 * blocks at the end of turns.
 *
 * Model. The KV core names a full block by its chained SHA-256 hash over (parent, domain,
 * tokens); the tier keys objects by the same hash (kind BLOCK, group 0, the sequence's
 * domain), so a prompt's stored chain is found from the hashes the core computes, and
 * domains (cache_salt) hold in the store too. The store is the filesystem store under the
 * cache root (cairn/cold_tier.h), or one the caller lends (cairn_engine_options_t
 * .cold_store). Restore runs before the KV core admits a prompt: the tier's restore walk
 * (cairn_tier_restore_chain) loads the blocks past the hot prefix into freshly allocated
 * pool blocks, taken and prefaulted in one pass before the walk (a block's K/V for every
 * layer is one contiguous byte range, identical in the pool and in the object payload),
 * each validated by the store; the bridge publishes the validated prefix as cached blocks
 * and the core's admission attaches hot and restored blocks alike. The walk stops at the
 * first missing, invalid or declined block, and the core never attaches past a hole, so a
 * prefix is always a contiguous chain of valid blocks. Capture is the tier's capture walk
 * (cairn_tier_capture_chain) over the sequence's full computed blocks.
 *
 * Invariants: only model_types of cairn_cold_eligible_families() (each family lists its
 * own, models/family.h) open a store; a restored payload is exactly one pool block's used
 * bytes (the filesystem store's layout is the pool's block layout; a payload of another
 * size is declined); corrupt objects are removed and counted by the store and never reach
 * the pool (a block whose read fails is discarded unpublished).
 *
 * Thread-safety: engine thread only.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine/engine_cold.h"
#include "models/family.h"
#include "util/util.h"

#define DEFAULT_DRAIN_MS 5000

_Static_assert(sizeof(cairn_kv_hash_t) == sizeof(cairn_tier_hash_t), "one 32-byte block hash");

struct engine_cold {
    cairn_tier_store_t *store;     /* what the tier logic walks */
    cairn_cold_store_t *fs;        /* the filesystem store, when the engine opened it (owned) */
    cairn_tier_trace_t *trace;     /* per-turn trace, or NULL */
    cairn_kv_cache_t *cache;
    uint32_t block_tokens;
    size_t payload_size;           /* sum of layer_bytes == the used bytes of one block */
    int drain_ms;
    cairn_tier_capture_budget_t budget; /* zeros: the knobs and the tier's defaults */
    cairn_kv_hash_t *hashes;       /* scratch: the prompt's block hashes */
    size_t hashes_cap;
    cairn_tier_key_t *keys;        /* scratch: the prompt's chain keys */
    size_t keys_cap;
    uint32_t *ids;                 /* scratch: pool block per restored chain index, 0: none */
    size_t ids_cap;
    cairn_engine_cold_counters_t n;
};

/* Fills the model description of the fingerprint: the family's part (architecture,
 * geometry, rope and the config values that shape K/V, models/family.h describe), then
 * what the engine decides: block size, K/V dtype, math mode (first in `extra`) and the
 * weights digest, which covers every tensor's name, shape and dtype. `numerics` stays
 * NULL: the CPU backend's numerics, which every fingerprint so far meant (a backend whose
 * K/V bits may differ sets its id there; docs/FORMAT.md 1.4). */
static void describe_model(const cairn_checkpoint_t *ck, const cairn_engine_options_t *o,
                           uint32_t block_tokens, char *extra, size_t extra_len,
                           cairn_tier_model_desc_t *d)
{
    const cairn_model_t *m = cairn_checkpoint_model(ck);
    char fam[224];
    memset(d, 0, sizeof(*d));
    fam[0] = '\0';
    m->family->describe(m, d, fam, sizeof(fam));
    d->block_tokens = block_tokens;
    d->kv_dtype = o->kv_dtype;
    snprintf(extra, extra_len, "math=%s;%s", o->math == CAIRN_ENGINE_MATH_BF16 ? "bf16" : "f32",
             fam);
    d->extra = extra;
    cairn_checkpoint_weights_digest(ck, d->weights_digest);
}

/* Opens the filesystem store for the model under root (layout: the pool's blocks). */
static int open_fs_store(const cairn_checkpoint_t *ck, const cairn_engine_options_t *o, const char *root,
                         uint32_t block_tokens, uint32_t n_layers, const uint64_t *layer_bytes,
                         cairn_cold_store_t **out)
{
    char extra[256];
    cairn_tier_model_desc_t desc;
    describe_model(ck, o, block_tokens, extra, sizeof(extra), &desc);
    cairn_cold_config_t cc;
    memset(&cc, 0, sizeof(cc));
    cc.root = root;
    int rc = cairn_tier_fingerprint(&desc, &cc.fingerprint);
    if (rc)
        return rc;
    cc.dtype = o->kv_dtype;
    cc.block_tokens = block_tokens;
    cc.n_layers = n_layers;
    cc.layer_bytes = layer_bytes;
    return cairn_cold_store_create(&cc, out);
}

int engine_cold_open(const cairn_checkpoint_t *ck, const cairn_engine_options_t *o,
                     kv_paged_t *kp, engine_cold_t **out)
{
    *out = NULL;
    const cairn_model_config_t *cfg = cairn_checkpoint_config(ck);
    bool on = cairn_knob_bool("CAIRN_COLD", o->cold != 0, o->cold > 0, true);
    if (!on || !kp)
        return CAIRN_OK;
    if (!cairn_cold_family_eligible(cfg->model_type)) {
        cairn_log(CAIRN_LOG_INFO, "cold tier: off for model_type %s (restart parity not proven)",
                  cfg->model_type);
        return CAIRN_OK;
    }
    /* A lent store, else an explicit root (--cache-dir), else the environment's. */
    const char *root = o->cold_root ? o->cold_root : cairn_knob_str("CAIRN_CACHE_DIR", NULL, NULL);
    if (!o->cold_store && (!root || !root[0]))
        return CAIRN_OK;

    cairn_kv_cache_t *cache = kv_paged_cache_rw(kp);
    const uint32_t n_layers = cairn_kv_cache_n_layers(cache);
    uint64_t *layer_bytes = cairn_calloc(n_layers, sizeof(*layer_bytes));
    engine_cold_t *c = cairn_calloc(1, sizeof(*c));
    if (!layer_bytes || !c)
        goto nomem;
    c->cache = cache;
    c->block_tokens = cairn_kv_cache_block_size(cache);
    c->drain_ms = o->cold_drain_ms > 0 ? o->cold_drain_ms : DEFAULT_DRAIN_MS;
    c->budget.blocks_per_turn = o->cold_capture_blocks > 0 ? (uint32_t)o->cold_capture_blocks : 0;
    c->budget.budget_ms = o->cold_capture_ms > 0 ? (uint32_t)o->cold_capture_ms : 0;
    /* Layer l owns [k_offset, v_offset + plane) of a block, planes back to back from 0:
     * the object payload is exactly the block's first payload_size bytes. */
    size_t expect = 0;
    bool contiguous = true;
    for (uint32_t l = 0; l < n_layers; l++) {
        cairn_kv_layer_view_t v;
        if (cairn_kv_layer_view(cache, l, &v) != 0 || v.k_offset != expect) {
            contiguous = false;
            break;
        }
        layer_bytes[l] = 2 * (uint64_t)(v.v_offset - v.k_offset);
        expect += (size_t)layer_bytes[l];
    }
    c->payload_size = expect;
    if (!contiguous || expect > cairn_kv_cache_block_bytes(cache)) {
        cairn_log(CAIRN_LOG_WARN, "cold tier: off (the pool's block layout is not block-major)");
        goto off;
    }
    if (cairn_tier_trace_create(o->cold_trace, &c->trace))
        goto nomem;
    if (o->cold_store) {
        c->store = o->cold_store;
        cairn_log(CAIRN_LOG_INFO, "cold tier: the caller's %s store", cairn_tier_store_name(c->store));
    } else {
        int rc = open_fs_store(ck, o, root, c->block_tokens, n_layers, layer_bytes, &c->fs);
        if (rc == CAIRN_ENOMEM)
            goto nomem;
        if (rc) {
            cairn_log(CAIRN_LOG_WARN, "cold tier: off (cannot open the store under %s: %s)", root,
                      cairn_strerror(rc));
            goto off;
        }
        c->store = cairn_cold_store_tier(c->fs);
        cairn_log(CAIRN_LOG_INFO, "cold tier: %s", cairn_cold_store_dir(c->fs));
    }
    cairn_free(layer_bytes);
    c->n.enabled = true;
    *out = c;
    return CAIRN_OK;
nomem:
    if (c)
        cairn_tier_trace_destroy(c->trace);
    cairn_free(layer_bytes);
    cairn_free(c);
    return CAIRN_ENOMEM;
off:
    cairn_tier_trace_destroy(c->trace);
    cairn_free(layer_bytes);
    cairn_free(c);
    return CAIRN_OK;
}

void engine_cold_close(engine_cold_t *c)
{
    if (!c)
        return;
    /* A bounded drain: poll until the queue is empty or the deadline passes. Destroy then
     * finishes at most the queue depth of blocks still queued. A lent store is only
     * drained: its owner destroys it. */
    double deadline = cairn_now_seconds() + c->drain_ms / 1e3;
    for (;;) {
        cairn_tier_stats_t st;
        cairn_tier_store_stats(c->store, &st);
        if (st.queue_len == 0 || cairn_now_seconds() >= deadline)
            break;
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    cairn_cold_store_destroy(c->fs);
    cairn_tier_trace_destroy(c->trace);
    cairn_free(c->hashes);
    cairn_free(c->keys);
    cairn_free(c->ids);
    cairn_free(c);
}

static int reserve(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return CAIRN_OK;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *q = cairn_realloc(*p, n * elem);
    if (!q)
        return CAIRN_ENOMEM;
    *p = q;
    *cap = n;
    return CAIRN_OK;
}

typedef struct {
    engine_cold_t *c;
    size_t taken;         /* chain indices [start, taken) got a pool block before the walk */
    size_t first, last;   /* chain indices [first, last) that got a pool block in the walk */
} restore_ctx_t;

/* The sink's prepare: takes the pool blocks for the chain the store's metadata expects and
 * materialises their memory in one pass (filling fresh pool memory page fault by page
 * fault costs more than the disk read on a virtual machine). Blocks past it (written by
 * another process since open) are taken one by one in the walk. */
static void restore_prepare(void *user, size_t start, size_t expected)
{
    restore_ctx_t *r = user;
    engine_cold_t *c = r->c;
    while (r->taken < start + expected) {
        void *bytes = NULL;
        if (cairn_kv_cache_import_begin(c->cache, &c->ids[r->taken], &bytes) != CAIRN_OK)
            break;
        r->taken++;
    }
    (void)cairn_kv_cache_import_prefault(c->cache, c->ids + start, r->taken - start);
}

/* The sink's destination: the pool block taken for chain block i before the walk, else a
 * fresh one, or NULL (a decline) when the pool cannot give one or the payload is not one
 * block. Called with the object pinned. */
static void *restore_dest(void *user, size_t i, size_t payload_size)
{
    restore_ctx_t *r = user;
    engine_cold_t *c = r->c;
    if (payload_size != c->payload_size)
        return NULL;
    uint32_t id = 0;
    void *bytes = NULL;
    if (i < r->taken) {
        id = c->ids[i];
        bytes = cairn_kv_cache_block_data(c->cache, id);
    } else if (cairn_kv_cache_import_begin(c->cache, &id, &bytes) != CAIRN_OK) {
        return NULL;
    }
    c->ids[i] = id;
    if (r->last == r->first)
        r->first = i;
    r->last = i + 1;
    return bytes;
}

void engine_cold_restore(engine_cold_t *c, kv_paged_seq_t *s, const int32_t *tokens, int n,
                         int *hot_tokens, int *restored_blocks)
{
    *hot_tokens = 0;
    *restored_blocks = 0;
    if (!c || n < 2)
        return;
    const size_t bs = c->block_tokens;
    const size_t kmax = ((size_t)n - 1) / bs; /* blocks that may serve: >= 1 token computed */
    if (kmax == 0)
        return;
    double t0 = cairn_now_seconds();
    const cairn_kv_hash_t *domain = kv_paged_seq_domain(s);
    size_t hot = 0;
    if (reserve((void **)&c->hashes, &c->hashes_cap, kmax, sizeof(*c->hashes)) ||
        reserve((void **)&c->keys, &c->keys_cap, kmax, sizeof(*c->keys)) ||
        reserve((void **)&c->ids, &c->ids_cap, kmax, sizeof(*c->ids)) ||
        cairn_kv_cache_hash_blocks(c->cache, domain, NULL, 0, tokens, kmax * bs, c->hashes) ||
        cairn_kv_cache_lookup_hashes(c->cache, domain, c->hashes, (size_t)n, &hot))
        goto done; /* out of memory: just no restore */
    *hot_tokens = (int)hot;
    size_t start = hot / bs;
    if (start >= kmax)
        goto done;
    /* The walk reads the store, not only this process's index: another process sharing
     * it may have written the blocks since open. cairn_kv_hash_t and cairn_tier_hash_t
     * are the same 32 bytes. */
    for (size_t i = 0; i < kmax; i++) {
        c->keys[i] = (cairn_tier_key_t){.kind = CAIRN_TIER_BLOCK, .group = 0};
        memcpy(c->keys[i].hash.bytes, c->hashes[i].bytes, sizeof(c->keys[i].hash.bytes));
        memcpy(c->keys[i].domain.bytes, domain->bytes, sizeof(c->keys[i].domain.bytes));
    }
    c->n.restore_lookups++;
    memset(c->ids + start, 0, (kmax - start) * sizeof(*c->ids));
    restore_ctx_t r = {c, start, start, start};
    const cairn_tier_chain_t chain = {c->keys, tokens, (uint32_t)bs, kmax};
    const cairn_tier_restore_sink_t sink = {restore_prepare, restore_dest, &r};
    cairn_tier_restore_result_t res;
    size_t loaded = 0;
    if (cairn_tier_restore_chain(c->store, &chain, start, &sink, &res) == CAIRN_OK)
        loaded = res.loaded;
    /* Publish the validated prefix of the walk; give back the block it stopped on and
     * any taken block the walk did not reach. */
    int published = 0;
    size_t end = r.last > r.taken ? r.last : r.taken;
    for (size_t i = start; i < end; i++) {
        uint32_t id = c->ids[i];
        if (!id)
            continue;
        if (i < start + loaded) {
            if (cairn_kv_cache_import_publish(c->cache, id, domain, &c->hashes[i]) == CAIRN_OK)
                published++;
        } else {
            (void)cairn_kv_cache_import_discard(c->cache, id);
        }
    }
    *restored_blocks = published;
    c->n.restored_blocks += (uint64_t)published;
done:
    c->n.restore_seconds += cairn_now_seconds() - t0;
}

void engine_cold_note_restored(engine_cold_t *c, int tokens)
{
    if (c && tokens > 0)
        c->n.restored_tokens += (uint64_t)tokens;
}

typedef struct {
    engine_cold_t *c;
    const cairn_kv_seq_t *seq;
    const cairn_kv_hash_t *domain;
    const uint32_t *table;
    const int32_t *tokens;
} capture_ctx_t;

/* Yields full block i of the sequence: its hash and parent from the core, its tokens and
 * its pool bytes (copied by the store before this returns to the walk). */
static int capture_block(void *user, size_t i, cairn_tier_object_t *out)
{
    capture_ctx_t *k = user;
    const size_t bs = k->c->block_tokens;
    cairn_kv_hash_t h;
    int rc = cairn_kv_seq_boundary_key(k->seq, (i + 1) * bs, &h);
    if (rc)
        return rc;
    out->key.kind = CAIRN_TIER_BLOCK;
    out->key.group = 0;
    memcpy(out->key.hash.bytes, h.bytes, sizeof(h.bytes));
    memcpy(out->key.domain.bytes, k->domain->bytes, sizeof(k->domain->bytes));
    memset(out->parent.bytes, 0, sizeof(out->parent.bytes));
    if (i > 0) {
        if ((rc = cairn_kv_seq_boundary_key(k->seq, i * bs, &h)))
            return rc;
        memcpy(out->parent.bytes, h.bytes, sizeof(h.bytes));
    }
    out->tokens = k->tokens + i * bs;
    out->n_tokens = (uint32_t)bs;
    out->payload = cairn_kv_cache_block_data(k->c->cache, k->table[i]);
    out->payload_size = k->c->payload_size;
    return out->payload ? CAIRN_OK : CAIRN_EINVAL;
}

void engine_cold_capture(engine_cold_t *c, const kv_paged_seq_t *s, const char *label)
{
    if (!c || !s)
        return;
    const cairn_kv_seq_t *seq = kv_paged_seq_core(s);
    if (!seq || cairn_kv_seq_preempted(seq))
        return;
    size_t n_full = cairn_kv_seq_n_computed(seq) / c->block_tokens, n_table = 0;
    const uint32_t *table = cairn_kv_seq_block_table(seq, 0, &n_table);
    if (n_full > n_table)
        n_full = n_table;
    if (n_full == 0)
        return;
    double t0 = cairn_now_seconds();
    capture_ctx_t k = {c, seq, kv_paged_seq_domain(s), table, cairn_kv_seq_tokens(seq)};
    cairn_tier_capture_result_t res;
    memset(&res, 0, sizeof(res));
    if (cairn_tier_capture_chain(c->store, n_full, capture_block, &k, &c->budget, &res) == CAIRN_OK) {
        c->n.capture_walks++;
        c->n.captured_blocks += res.enqueued; /* a deadline stop is logged by the walk */
    }
    cairn_tier_trace_turn(c->trace, c->store, label);
    c->n.capture_seconds += cairn_now_seconds() - t0;
}

void engine_cold_counters(const engine_cold_t *c, cairn_engine_cold_counters_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!c)
        return;
    *out = c->n;
    cairn_tier_store_stats(c->store, &out->store);
}

void engine_cold_flush(engine_cold_t *c)
{
    if (c)
        cairn_tier_store_flush(c->store);
}
