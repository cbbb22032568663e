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
 * prefix is always a contiguous chain of valid blocks.
 * Capture runs in the background (issue 17): at the end of a turn the walk over the
 * sequence's full computed blocks only finds the ones the store lacks and records them
 * (hash, parent, tokens, depth) as dirty entries; the engine thread pins their pool blocks
 * within a byte budget and hands them to a capture thread (cairn_tier_capturer_t), which
 * copies them into the store (waiting for its queue as long as needed) and hands them
 * back to be unpinned at the next poll (every step and begin, or the owner's idle poll).
 * So a turn's tail costs a metadata probe per block, decode never waits for a copy, and
 * the whole chain is persisted at disk speed however long it is. Write-back: the KV
 * core's evict filter keeps a dirty cached block from eviction (and queues it first)
 * until it is copied; with the write-back policy that is when blocks are persisted,
 * besides exit.
 *
 * Invariants: only model_types of cairn_cold_eligible_families() (each family lists its
 * own, models/family.h) open a store; a restored payload is exactly one pool block's used
 * bytes (the filesystem store's layout is the pool's block layout; a payload of another
 * size is declined); corrupt objects are removed and counted by the store and never reach
 * the pool (a block whose read fails is discarded unpublished).
 *
 * Thread-safety: engine thread only; the capture thread reads only pinned pool blocks
 * (pinned bytes never change and the pool's storage never moves).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine/engine_cold.h"
#include "models/family.h"
#include "util/util.h"

/* Persisting at exit gets 5 s plus 1.5 x what awaits write at the measured rate (20 MiB/s
 * before anything was written). */
#define EXIT_BASE_MS 5000
#define EXIT_DEFAULT_RATE (20.0 * 1024 * 1024)

_Static_assert(sizeof(cairn_kv_hash_t) == sizeof(cairn_tier_hash_t), "one 32-byte block hash");

/* ---- Background capture: the state (the functions are below the restore) ----
 *
 * A dirty entry is a full block of this process that is not known to be on disk: found by
 * a capture walk at the end of a turn (or release) and absent from the store. States:
 *   HELD      write-back: waits for the pool to want to evict it, or for exit;
 *   READY     in the heap, waiting for a pin and the capture thread;
 *   INFLIGHT  its pool block is pinned and the capture thread copies it into the store.
 * An entry leaves the table when the capture thread is done with it (the store has it),
 * when its pool block is gone before the copy (lost), or when the store refuses it. The
 * heap orders READY entries by (eviction asked first, chain depth, arrival), so shared
 * prefixes (a system prompt: the low depths many chains reach) go before any
 * conversation's private tail and each chain is persisted from its first missing block.
 * Invariants: an entry is in the hash index iff its state is not FREE; in the heap iff
 * READY; pinned_bytes == INFLIGHT entries x payload_size. */
enum { D_FREE = 0, D_HELD, D_READY, D_INFLIGHT };

typedef struct {
    cairn_kv_hash_t hash, parent, domain;
    uint64_t seq;              /* arrival order among equals */
    uint32_t depth;            /* block index in its chain */
    uint32_t block;            /* INFLIGHT: the pinned pool block */
    uint32_t heap_pos;         /* READY: position in the heap; FREE: next free entry */
    uint8_t state;             /* D_* */
    uint8_t urgent;            /* the pool wanted to evict it */
} dirty_t;

typedef struct {
    cairn_tier_capturer_t *thread; /* the capture thread (NULL: capture off) */
    cairn_cold_policy_t policy;
    uint64_t pin_budget;       /* bytes pinned for copies at most (one block always may) */
    uint64_t pinned_bytes;
    dirty_t *d;                /* entries [0, d_used) of d_cap; FREE ones linked from free_head */
    int32_t *tok;              /* block_tokens token ids per entry */
    uint32_t d_used, d_cap, free_head, n_live, n_inflight;
    uint32_t *slots;           /* hash index: entry + 1, 0 empty; n_slots a power of two */
    uint32_t n_slots;
    uint32_t *heap;            /* READY entries */
    uint32_t heap_n, heap_cap;
    uint64_t next_seq;
    uint64_t written_mark;     /* captured_blocks at the previous turn's walk */
    cairn_engine_cold_turn_t last;
} engine_capture_t;

struct engine_cold {
    cairn_tier_store_t *store;     /* what the tier logic walks */
    cairn_cold_store_t *fs;        /* the filesystem store, when the engine opened it (owned) */
    cairn_tier_trace_t *trace;     /* per-turn trace, or NULL */
    cairn_kv_cache_t *cache;
    uint32_t block_tokens;
    size_t payload_size;           /* sum of layer_bytes == the used bytes of one block */
    int drain_ms;
    cairn_kv_hash_t *hashes;       /* scratch: the prompt's block hashes */
    size_t hashes_cap;
    cairn_tier_key_t *keys;        /* scratch: the prompt's chain keys */
    size_t keys_cap;
    uint32_t *ids;                 /* scratch: pool block per restored chain index, 0: none */
    size_t ids_cap;
    cairn_engine_cold_counters_t n;
    engine_capture_t cap;          /* the background capture (capture functions below) */
};

static int capture_open(engine_cold_t *c, const cairn_engine_options_t *o);
static void capture_close(engine_cold_t *c);
static void wait_store(engine_cold_t *c, double deadline);

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
    c->drain_ms = o->cold_drain_ms > 0 ? o->cold_drain_ms : 0; /* 0: engine_cold_exit_ms at close */
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
    if (capture_open(c, o) != CAIRN_OK) {
        cairn_log(CAIRN_LOG_WARN, "cold tier: capture off (no capture thread)");
        c->cap.policy = c->n.policy = CAIRN_COLD_CAPTURE_OFF;
    }
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
    /* Persist what is not on disk yet (write-back's held blocks too) within the drain
     * deadline, then stop the capture thread and give its pins back while the pool still
     * exists. Destroy then finishes at most the queue depth of blocks still queued. A lent
     * store is only drained: its owner destroys it. */
    cairn_cold_persist_report_t r;
    const int drain_ms = c->drain_ms > 0 ? c->drain_ms : engine_cold_exit_ms(c);
    double deadline = cairn_now_seconds() + drain_ms / 1e3;
    if (engine_cold_persist(c, drain_ms, true, &r) != CAIRN_OK)
        cairn_log(CAIRN_LOG_WARN, "cold tier: %llu of %llu blocks not persisted at exit (deadline %d ms)",
                  (unsigned long long)r.skipped, (unsigned long long)r.queued, drain_ms);
    capture_close(c);
    wait_store(c, deadline);
    cairn_cold_store_destroy(c->fs);
    cairn_tier_trace_destroy(c->trace);
    cairn_free(c->hashes);
    cairn_free(c->keys);
    cairn_free(c->ids);
    cairn_free(c);
}

int cairn_cold_policy_parse(const char *s, cairn_cold_policy_t *out)
{
    if (!s || !out)
        return CAIRN_EINVAL;
    if (!strcmp(s, "write-through"))
        *out = CAIRN_COLD_WRITE_THROUGH;
    else if (!strcmp(s, "write-back"))
        *out = CAIRN_COLD_WRITE_BACK;
    else if (!strcmp(s, "off"))
        *out = CAIRN_COLD_CAPTURE_OFF;
    else
        return CAIRN_EINVAL;
    return CAIRN_OK;
}

const char *cairn_cold_policy_name(cairn_cold_policy_t p)
{
    switch (p) {
    case CAIRN_COLD_WRITE_THROUGH: return "write-through";
    case CAIRN_COLD_WRITE_BACK: return "write-back";
    case CAIRN_COLD_CAPTURE_OFF: return "off";
    }
    return "unknown";
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

/* ---- Background capture ---- */

static uint64_t hash_word(const cairn_kv_hash_t *h)
{
    uint64_t w;
    memcpy(&w, h->bytes, sizeof w);
    return w;
}

/* The index slot of hash: where it is, or the empty slot where it would go. */
static uint32_t slot_of(const engine_capture_t *k, const cairn_kv_hash_t *h)
{
    uint32_t mask = k->n_slots - 1, i = (uint32_t)hash_word(h) & mask;
    while (k->slots[i] && memcmp(k->d[k->slots[i] - 1].hash.bytes, h->bytes, sizeof h->bytes))
        i = (i + 1) & mask;
    return i;
}

static int dirty_find(const engine_capture_t *k, const cairn_kv_hash_t *h)
{
    if (!k->n_slots)
        return -1;
    uint32_t e = k->slots[slot_of(k, h)];
    return e ? (int)(e - 1) : -1;
}

static int index_resize(engine_capture_t *k, uint32_t n_slots)
{
    uint32_t *slots = cairn_calloc(n_slots, sizeof *slots);
    if (!slots)
        return CAIRN_ENOMEM;
    cairn_free(k->slots);
    k->slots = slots;
    k->n_slots = n_slots;
    for (uint32_t i = 0; i < k->d_used; i++)
        if (k->d[i].state != D_FREE)
            k->slots[slot_of(k, &k->d[i].hash)] = i + 1;
    return CAIRN_OK;
}

/* Linear probing with backward-shift deletion: no tombstones. */
static void index_remove(engine_capture_t *k, const cairn_kv_hash_t *h)
{
    uint32_t mask = k->n_slots - 1, i = slot_of(k, h);
    if (!k->slots[i])
        return;
    k->slots[i] = 0;
    for (uint32_t j = (i + 1) & mask; k->slots[j]; j = (j + 1) & mask) {
        uint32_t home = (uint32_t)hash_word(&k->d[k->slots[j] - 1].hash) & mask;
        /* Move j back to i when its home does not lie cyclically in (i, j]. */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            k->slots[i] = k->slots[j];
            k->slots[j] = 0;
            i = j;
        }
    }
}

/* Heap order: eviction asked first, then shallower, then older. */
static bool heap_before(const engine_capture_t *k, uint32_t a, uint32_t b)
{
    const dirty_t *x = &k->d[a], *y = &k->d[b];
    if (x->urgent != y->urgent)
        return x->urgent > y->urgent;
    if (x->depth != y->depth)
        return x->depth < y->depth;
    return x->seq < y->seq;
}

static void heap_set(engine_capture_t *k, uint32_t pos, uint32_t e)
{
    k->heap[pos] = e;
    k->d[e].heap_pos = pos;
}

static void heap_up(engine_capture_t *k, uint32_t pos)
{
    uint32_t e = k->heap[pos];
    while (pos > 0 && heap_before(k, e, k->heap[(pos - 1) / 2])) {
        heap_set(k, pos, k->heap[(pos - 1) / 2]);
        pos = (pos - 1) / 2;
    }
    heap_set(k, pos, e);
}

static void heap_down(engine_capture_t *k, uint32_t pos)
{
    uint32_t e = k->heap[pos];
    for (;;) {
        uint32_t l = 2 * pos + 1, best = pos;
        uint32_t be = e;
        if (l < k->heap_n && heap_before(k, k->heap[l], be))
            best = l, be = k->heap[l];
        if (l + 1 < k->heap_n && heap_before(k, k->heap[l + 1], be))
            best = l + 1, be = k->heap[l + 1];
        if (best == pos)
            break;
        heap_set(k, pos, be);
        pos = best;
    }
    heap_set(k, pos, e);
}

static int heap_push(engine_capture_t *k, uint32_t e)
{
    if (k->heap_n == k->heap_cap) {
        size_t cap = k->heap_cap;
        if (cairn_grow_array((void **)&k->heap, &cap, (size_t)k->heap_n + 1, sizeof *k->heap, 64))
            return CAIRN_ENOMEM;
        k->heap_cap = (uint32_t)cap;
    }
    k->d[e].state = D_READY;
    k->heap_n++;
    heap_set(k, k->heap_n - 1, e);
    heap_up(k, k->heap_n - 1);
    return CAIRN_OK;
}

static uint32_t heap_pop(engine_capture_t *k)
{
    uint32_t e = k->heap[0];
    if (--k->heap_n > 0) {
        heap_set(k, 0, k->heap[k->heap_n]);
        heap_down(k, 0);
    }
    return e;
}

/* Adds an entry (state HELD or READY). CAIRN_ENOMEM leaves nothing added. */
static int dirty_add(engine_cold_t *c, const cairn_kv_hash_t *h, const cairn_kv_hash_t *parent,
                     const cairn_kv_hash_t *domain, const int32_t *tokens, uint32_t depth, bool ready)
{
    engine_capture_t *k = &c->cap;
    if ((size_t)(k->n_live + 1) * 2 > k->n_slots &&
        index_resize(k, k->n_slots ? k->n_slots * 2 : 256))
        return CAIRN_ENOMEM;
    uint32_t e;
    if (k->free_head != UINT32_MAX) {
        e = k->free_head;
        k->free_head = k->d[e].heap_pos;
    } else {
        if (k->d_used == k->d_cap) {
            uint32_t cap = k->d_cap ? k->d_cap * 2 : 256;
            dirty_t *d = cairn_realloc(k->d, (size_t)cap * sizeof *d);
            if (!d)
                return CAIRN_ENOMEM;
            k->d = d;
            int32_t *t = cairn_realloc(k->tok, (size_t)cap * c->block_tokens * sizeof *t);
            if (!t)
                return CAIRN_ENOMEM;
            k->tok = t;
            k->d_cap = cap;
        }
        e = k->d_used++;
    }
    dirty_t *d = &k->d[e];
    memset(d, 0, sizeof *d);
    d->hash = *h;
    d->parent = *parent;
    d->domain = *domain;
    d->depth = depth;
    d->seq = k->next_seq++;
    d->state = D_HELD;
    memcpy(k->tok + (size_t)e * c->block_tokens, tokens, c->block_tokens * sizeof *tokens);
    k->slots[slot_of(k, h)] = e + 1;
    k->n_live++;
    if (ready && heap_push(k, e)) {
        d->state = D_HELD; /* out of memory for the heap: persisted at eviction or exit */
        return CAIRN_OK;
    }
    return CAIRN_OK;
}

/* Forgets entry e (not READY: the heap no longer holds it). */
static void dirty_remove(engine_capture_t *k, uint32_t e)
{
    dirty_t *d = &k->d[e];
    index_remove(k, &d->hash);
    d->state = D_FREE;
    d->heap_pos = k->free_head;
    k->free_head = e;
    k->n_live--;
}

/* Reap callback: the capture thread is done with entry `tag`'s copy. */
static void on_copied(void *user, uint64_t tag, int status)
{
    engine_cold_t *c = user;
    engine_capture_t *k = &c->cap;
    uint32_t e = (uint32_t)tag;
    dirty_t *d = &k->d[e];
    (void)cairn_kv_cache_block_unpin(c->cache, d->block);
    k->pinned_bytes -= c->payload_size;
    k->n_inflight--;
    if (status == CAIRN_OK) {
        c->n.captured_blocks++;
    } else if (status == CAIRN_ECANCELED) {
        d->block = 0;
        d->state = D_HELD; /* stopped before its copy: still not on disk */
        return;
    } else {
        c->n.capture_failed++;
    }
    dirty_remove(k, e);
}

/* Takes back copied blocks, then pins and hands over READY blocks within the budget. */
static void pump(engine_cold_t *c)
{
    engine_capture_t *k = &c->cap;
    if (!k->thread)
        return;
    if (k->n_inflight)
        cairn_tier_capturer_reap(k->thread, on_copied, c);
    while (k->heap_n) {
        if (k->pinned_bytes && k->pinned_bytes + c->payload_size > k->pin_budget) {
            c->n.capture_deferrals++;
            break;
        }
        uint32_t e = heap_pop(k);
        dirty_t *d = &k->d[e];
        uint32_t id = cairn_kv_cache_find_block(c->cache, 0, &d->domain, &d->hash);
        if (!id || cairn_kv_cache_block_pin(c->cache, id) != CAIRN_OK) {
            c->n.capture_lost++; /* evicted (the tool's explicit eviction) before its copy */
            dirty_remove(k, e);
            continue;
        }
        cairn_tier_object_t obj;
        memset(&obj, 0, sizeof obj);
        obj.key.kind = CAIRN_TIER_BLOCK;
        memcpy(obj.key.hash.bytes, d->hash.bytes, sizeof obj.key.hash.bytes);
        memcpy(obj.key.domain.bytes, d->domain.bytes, sizeof obj.key.domain.bytes);
        memcpy(obj.parent.bytes, d->parent.bytes, sizeof obj.parent.bytes);
        obj.tokens = k->tok + (size_t)e * c->block_tokens;
        obj.n_tokens = c->block_tokens;
        obj.payload = cairn_kv_cache_block_data(c->cache, id);
        obj.payload_size = c->payload_size;
        if (!obj.payload || cairn_tier_capturer_submit(k->thread, &obj, e) != CAIRN_OK) {
            (void)cairn_kv_cache_block_unpin(c->cache, id);
            d->state = D_HELD; /* persisted at eviction or exit instead */
            break;
        }
        d->state = D_INFLIGHT;
        d->block = id;
        k->pinned_bytes += c->payload_size;
        k->n_inflight++;
    }
}

bool engine_cold_poll(engine_cold_t *c)
{
    if (!c || !c->cap.thread || (!c->cap.n_inflight && !c->cap.heap_n))
        return false;
    double t0 = cairn_now_seconds();
    pump(c);
    c->n.capture_seconds += cairn_now_seconds() - t0;
    return c->cap.n_inflight || c->cap.heap_n;
}

/* The KV core's evict filter: a cached block not on disk yet is kept (and queued first,
 * ahead of everything else) until the capture thread has copied it. */
static bool evict_filter(void *user, uint32_t block, uint32_t group, const cairn_kv_hash_t *hash,
                         const cairn_kv_hash_t *domain)
{
    (void)block;
    (void)domain;
    engine_cold_t *c = user;
    engine_capture_t *k = &c->cap;
    if (group != 0 || !k->thread)
        return true;
    int e = dirty_find(k, hash);
    if (e < 0)
        return true; /* on disk, or refused by the store: nothing to wait for */
    dirty_t *d = &k->d[e];
    if (d->urgent)
        return false;
    d->urgent = 1;
    c->n.writeback_holds++;
    if (d->state == D_HELD) {
        if (heap_push(k, (uint32_t)e)) {
            d->urgent = 0;
            return true; /* no memory to queue it: let it go rather than fill the pool */
        }
    } else if (d->state == D_READY) {
        heap_up(k, d->heap_pos);
    }
    return false;
}

/* Starts the capture side (policy, budget, thread, evict filter); off leaves it NULL. */
static int capture_open(engine_cold_t *c, const cairn_engine_options_t *o)
{
    engine_capture_t *k = &c->cap;
    k->free_head = UINT32_MAX;
    k->policy = o->cold_policy;
    const char *env = cairn_knob_str("CAIRN_COLD_POLICY", NULL, NULL);
    if (env && cairn_cold_policy_parse(env, &k->policy))
        cairn_log(CAIRN_LOG_WARN, "cold tier: CAIRN_COLD_POLICY=%s is not write-through, write-back or off", env);
    k->pin_budget = (uint64_t)cairn_knob_int("CAIRN_COLD_PIN_MIB", o->cold_pin_mib > 0, o->cold_pin_mib, 64, 1,
                                             1 << 20) << 20;
    c->n.policy = k->policy;
    c->n.pin_budget_bytes = k->pin_budget;
    if (k->policy == CAIRN_COLD_CAPTURE_OFF)
        return CAIRN_OK;
    int rc = cairn_tier_capturer_create(c->store, &k->thread);
    if (rc)
        return rc;
    cairn_kv_cache_set_evict_filter(c->cache, evict_filter, c);
    return CAIRN_OK;
}

/* Stops the capture thread and gives every pinned block back (engine thread, before the
 * pool goes). */
static void capture_close(engine_cold_t *c)
{
    engine_capture_t *k = &c->cap;
    if (k->thread) {
        cairn_tier_capturer_stop(k->thread);
        cairn_tier_capturer_reap(k->thread, on_copied, c);
        cairn_tier_capturer_destroy(k->thread);
        k->thread = NULL;
        cairn_kv_cache_set_evict_filter(c->cache, NULL, NULL);
    }
    cairn_free(k->d);
    cairn_free(k->tok);
    cairn_free(k->slots);
    cairn_free(k->heap);
    memset(k, 0, sizeof *k);
}

void engine_cold_capture(engine_cold_t *c, const kv_paged_seq_t *s, const char *label)
{
    if (!c || !s)
        return;
    engine_capture_t *k = &c->cap;
    cairn_engine_cold_turn_t t = {.reason = cairn_cold_policy_name(k->policy)};
    k->last = t; /* a walk that finds nothing still reports this turn, not the previous one */
    const cairn_kv_seq_t *seq = kv_paged_seq_core(s);
    if (!seq || cairn_kv_seq_preempted(seq))
        return;
    size_t n_full = cairn_kv_seq_n_computed(seq) / c->block_tokens, n_table = 0;
    (void)cairn_kv_seq_block_table(seq, 0, &n_table);
    if (n_full > n_table)
        n_full = n_table;
    if (n_full == 0)
        return;
    double t0 = cairn_now_seconds();
    t.blocks = (uint32_t)n_full;
    if (k->thread) {
        const bool ready = k->policy == CAIRN_COLD_WRITE_THROUGH;
        const cairn_kv_hash_t *domain = kv_paged_seq_domain(s);
        const int32_t *tokens = cairn_kv_seq_tokens(seq);
        cairn_kv_hash_t prev, h;
        memset(prev.bytes, 0, sizeof prev.bytes);
        for (size_t i = 0; i < n_full; i++, prev = h) {
            if (cairn_kv_seq_boundary_key(seq, (i + 1) * c->block_tokens, &h))
                break;
            int e = dirty_find(k, &h);
            if (e >= 0) {
                t.already++;
                if (ready && k->d[e].state == D_HELD)
                    (void)heap_push(k, (uint32_t)e);
                continue;
            }
            cairn_tier_key_t key = {.kind = CAIRN_TIER_BLOCK, .group = 0};
            memcpy(key.hash.bytes, h.bytes, sizeof key.hash.bytes);
            memcpy(key.domain.bytes, domain->bytes, sizeof key.domain.bytes);
            if (cairn_tier_store_contains(c->store, &key)) {
                t.already++;
                continue;
            }
            if (dirty_add(c, &h, &prev, domain, tokens + i * c->block_tokens, (uint32_t)i, ready))
                break; /* out of memory: the rest of the chain stays unpersisted */
            t.queued++;
        }
        pump(c);
        t.deferred = ready ? k->heap_n : 0;
        c->n.capture_walks++;
        c->n.capture_queued += t.queued;
        c->n.capture_already += t.already;
    }
    t.written = c->n.captured_blocks - k->written_mark;
    k->written_mark = c->n.captured_blocks;
    k->last = t;
    cairn_tier_trace_turn(c->trace, c->store, label);
    c->n.capture_seconds += cairn_now_seconds() - t0;
}

void engine_cold_last_turn(const engine_cold_t *c, cairn_engine_cold_turn_t *out)
{
    memset(out, 0, sizeof *out);
    if (c)
        *out = c->cap.last;
    if (!out->reason)
        out->reason = c ? cairn_cold_policy_name(c->cap.policy) : "off";
}

/* Waits for the store's queue to drain, until `deadline` (seconds, cairn_now_seconds). */
static void wait_store(engine_cold_t *c, double deadline)
{
    for (;;) {
        cairn_tier_stats_t st;
        cairn_tier_store_stats(c->store, &st);
        if (st.queue_len == 0 || cairn_now_seconds() >= deadline)
            break;
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int engine_cold_persist(engine_cold_t *c, int deadline_ms, bool held_too, cairn_cold_persist_report_t *out)
{
    cairn_cold_persist_report_t r;
    memset(&r, 0, sizeof r);
    if (!c || !c->cap.thread) {
        if (out)
            *out = r;
        return CAIRN_OK;
    }
    engine_capture_t *k = &c->cap;
    double t0 = cairn_now_seconds(), deadline = t0 + (deadline_ms > 0 ? deadline_ms : 0) / 1e3;
    if (held_too)
        for (uint32_t e = 0; e < k->d_used; e++)
            if (k->d[e].state == D_HELD)
                (void)heap_push(k, e);
    r.queued = k->heap_n + k->n_inflight;
    uint64_t put0 = c->n.captured_blocks;
    for (;;) {
        pump(c);
        if ((!k->n_inflight && !k->heap_n) || cairn_now_seconds() >= deadline)
            break;
        double left_ms = (deadline - cairn_now_seconds()) * 1e3;
        (void)cairn_tier_capturer_wait(k->thread, left_ms < 50 ? (uint32_t)left_ms + 1 : 50);
    }
    wait_store(c, deadline);
    r.written = c->n.captured_blocks - put0;
    r.skipped = r.queued > r.written ? r.queued - r.written : 0;
    r.bytes = r.written * c->payload_size;
    r.ms = (cairn_now_seconds() - t0) * 1e3;
    if (out)
        *out = r;
    return r.skipped ? CAIRN_ECANCELED : CAIRN_OK;
}

void engine_cold_counters(const engine_cold_t *c, cairn_engine_cold_counters_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!c)
        return;
    *out = c->n;
    const engine_capture_t *k = &c->cap;
    out->awaiting_blocks = k->n_live;
    out->awaiting_bytes = (uint64_t)k->n_live * c->payload_size;
    out->pinned_bytes = k->pinned_bytes;
    cairn_tier_capturer_stats_t cs;
    cairn_tier_capturer_stats(k->thread, &cs);
    out->capture_rate = cs.busy_ms > 0 ? (double)cs.bytes_put / (cs.busy_ms / 1e3) : 0;
    cairn_tier_store_stats(c->store, &out->store);
}

int engine_cold_exit_ms(const engine_cold_t *c)
{
    if (!c || !c->cap.thread)
        return 0;
    cairn_engine_cold_counters_t n;
    engine_cold_counters(c, &n);
    /* A rate measured over a few small copies is the memory's, not the disk's: trust it
     * from 64 MiB on. */
    double rate = n.capture_rate > 0 && c->n.captured_blocks * c->payload_size >= (64u << 20) ? n.capture_rate
                                                                                          : EXIT_DEFAULT_RATE;
    double ms = EXIT_BASE_MS + 1.5 * (double)(n.awaiting_bytes + n.store.queue_len * c->payload_size) / rate * 1e3;
    return ms > 24.0 * 3600 * 1000 ? 24 * 3600 * 1000 : (int)ms;
}

void engine_cold_flush(engine_cold_t *c)
{
    if (!c)
        return;
    while (engine_cold_poll(c))
        (void)cairn_tier_capturer_wait(c->cap.thread, 50);
    cairn_tier_store_flush(c->store);
}
