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
 * .cold_store), optionally with a shared store behind it (cairn/shared_tier.h: Redis,
 * cairn_engine_options_t.shared_tier), composed by a layered store so that the walks see
 * one store: hot pool -> local store -> shared store (every store use goes through it;
 * the counters' `store` is the local one's). Restore runs before the KV core admits a
 * prompt: the tier's restore walk
 * (cairn_tier_restore_chain) loads the blocks past the hot prefix into freshly allocated
 * pool blocks, taken before the walk and materialised one by one as it reaches them (a
 * block's K/V for every layer is one contiguous byte range, identical in the pool and in
 * the object payload),
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
 * Device pools (the CUDA backend): the pool's bytes are not host memory, so the store
 * reads into and copies from the storage's two pinned staging buffers instead, and the
 * bridge queues the device copies (restore_dest, capture_staged): double-buffered, a
 * block's copy overlaps the next block's disk read or store copy. Such a pool restores
 * inline (never on the I/O thread: the staging calls are the engine thread's), captures
 * synchronously at the end of a turn within the capture budget (no capture thread, no
 * write-back), and serves dense models only (hybrids keep the tier off). The fingerprint
 * carries the backend's numerics id, so GPU- and CPU-written K/V never mix on disk.
 *
 * Invariants: only model_types of cairn_cold_eligible_families() (each family lists its
 * own, models/family.h) open a store; a restored payload is exactly one pool block's used
 * bytes (the filesystem store's layout is the pool's block layout; a payload of another
 * size is declined); corrupt objects are removed and counted by the store and never reach
 * the pool (a block whose read fails is discarded unpublished).
 *
 * Hybrid families (state_sidecar.h): a prefix also needs every other group's state at its
 * boundary as a STATE sidecar; the restore is cairn_tier_restore_hybrid (the chain
 * proposes, the sidecar policy reduces, every group installs at one boundary or none),
 * the capture puts the sidecars of the anchors the persisted chain reaches.
 *
 * Thread-safety: engine thread only, except a restore job's run (job_run), which the
 * tier's I/O thread executes while the engine thread goes on: it touches only the job
 * (pool bytes of blocks the job took and pinned at its start, its own buffers) and the
 * store, whose ops are thread-safe; the queue and each job's `done` are under `mu`. The
 * capture thread reads only pinned pool blocks (pinned bytes never change and the pool's
 * storage never moves).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <sys/mman.h>
#include <unistd.h>

#include "engine/engine_cold.h"
#include "engine/recurrent_store.h"
#include "engine/state_sidecar.h"
#include "models/family.h"
#include "util/util.h"

/* Persisting at exit gets 5 s plus 1.5 x what awaits write at the measured rate (20 MiB/s
 * before anything was written). */
#define EXIT_BASE_MS 5000
#define EXIT_DEFAULT_RATE (20.0 * 1024 * 1024)

_Static_assert(sizeof(cairn_kv_hash_t) == sizeof(cairn_tier_hash_t), "one 32-byte block hash");

_Static_assert(CAIRN_TIER_MISS_INSTALL + 1 == CAIRN_ENGINE_COLD_MISS_REASONS, "a counter per miss reason");

/* How long a sidecar put may wait for a queue slot when it cannot go through the capture
 * thread (policy off, no memory for the job): the writer queue keeps two slots only
 * sidecars take, so this is rarely waited. */
#define SIDECAR_WAIT_MS 250

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
    uint32_t n_side_inflight;  /* sidecar jobs handed to the capture thread, not yet reaped */
    uint32_t *slots;           /* hash index: entry + 1, 0 empty; n_slots a power of two */
    uint32_t n_slots;
    uint32_t *heap;            /* READY entries */
    uint32_t heap_n, heap_cap;
    uint64_t next_seq;
    uint64_t written_mark;     /* captured_blocks at the previous turn's walk */
    cairn_engine_cold_turn_t last;
} engine_capture_t;

struct engine_cold {
    cairn_tier_store_t *store;     /* what the tier logic walks: local, shared or layered */
    cairn_tier_store_t *local;     /* the filesystem store's interface or the lent store, or NULL */
    cairn_cold_store_t *fs;        /* the filesystem store, when the engine opened it (owned) */
    cairn_tier_store_t *shared;    /* the shared store (owned), or NULL */
    cairn_tier_store_t *layered;   /* local in front of shared (owned), or NULL */
    cairn_tier_trace_t *trace;     /* per-turn trace, or NULL */
    cairn_kv_cache_t *cache;
    const cairn_kv_storage_ops_t *stor; /* the pool's storage: staging calls when device memory */
    void *stor_ctx;
    bool staged;                   /* the pool is not host memory: copy through stor's staging */
    cairn_tier_capture_budget_t budget; /* staged captures (no capture thread); zeros: defaults */
    uint32_t block_tokens;
    size_t payload_size;           /* sum of layer_bytes == the used bytes of one block */
    int drain_ms;
    /* Hybrid families: the sidecar plan and the engine's checkpoint bank (borrowed). */
    state_sidecars_t *plan;
    seq_ckpts_t *ckpts;
    uint32_t full_group;           /* the KV core group whose blocks are BLOCK objects */
    uint32_t full_layer;           /* a layer of it (its block table is the chain's) */
    bool host_pool;                /* the pool is host memory: the walk populates each block */
    size_t block_bytes;            /* bytes of one pool block */
    uint32_t n_side;
    /* Capture scratch (engine thread): the chain's hashes, per sidecar group the
     * descriptor and a gather buffer, the pool blocks of a sliding sidecar. */
    cairn_kv_hash_t *hashes;
    size_t hashes_cap;
    state_sidecar_desc_t *desc;    /* [n_side] */
    void **side_buf;               /* [n_side] */
    size_t *side_cap;              /* [n_side] */
    uint32_t *side_ids;
    size_t side_ids_cap;
    /* The I/O thread that runs queued restore jobs (started with the first one). */
    bool async;                    /* knob CAIRN_COLD_RESTORE_ASYNC (default on) */
    bool io_started, io_stop;
    pthread_t io;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    restore_job_t *q_head, *q_tail;
    cairn_engine_cold_counters_t n;
    engine_capture_t cap;          /* the background capture (capture functions below) */
};

static int capture_open(engine_cold_t *c, const cairn_engine_options_t *o);
static void capture_close(engine_cold_t *c);
static void wait_store(engine_cold_t *c, double deadline);

/* Fills the model description of the fingerprint: the family's part (architecture,
 * geometry, rope and the config values that shape K/V, models/family.h describe), then
 * what the engine decides: block size, K/V dtype, math mode (first in `extra`) and the
 * weights digest, which covers every tensor's name, shape and dtype. `numerics` is the
 * backend's numerics id with its revision (the CPU's "f32.2"/"bf16.2"; NULL, for callers
 * without a backend, means the CPU's revision 1) (docs/FORMAT.md 1.4). */
static void describe_model(const cairn_checkpoint_t *ck, const cairn_engine_options_t *o,
                           const char *numerics, uint32_t block_tokens, char *extra, size_t extra_len,
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
    d->numerics = numerics;
    cairn_checkpoint_weights_digest(ck, d->weights_digest);
}

int engine_cold_fingerprint(const cairn_checkpoint_t *ck, const cairn_engine_options_t *o, const char *numerics,
                            uint32_t block_tokens, cairn_tier_hash_t *fp)
{
    char extra[256];
    cairn_tier_model_desc_t desc;
    describe_model(ck, o, numerics, block_tokens, extra, sizeof(extra), &desc);
    return cairn_tier_fingerprint(&desc, fp);
}

/* Opens the filesystem store for the model under root (layout: the pool's blocks). */
static int open_fs_store(const cairn_tier_hash_t *fp, const cairn_engine_options_t *o, const char *root,
                         uint32_t block_tokens, uint32_t n_layers, const uint64_t *layer_bytes,
                         cairn_cold_store_t **out)
{
    cairn_cold_config_t cc;
    memset(&cc, 0, sizeof(cc));
    cc.root = root;
    cc.fingerprint = *fp;
    cc.dtype = o->kv_dtype;
    cc.block_tokens = block_tokens;
    cc.n_layers = n_layers;
    cc.layer_bytes = layer_bytes;
    return cairn_cold_store_create(&cc, out);
}

/* Frees what engine_cold_open and the walks allocated (not the store). NULL: no-op. */
static void free_cold(engine_cold_t *c)
{
    if (!c)
        return;
    if (c->io_started) {
        pthread_mutex_lock(&c->mu);
        c->io_stop = true;
        pthread_cond_broadcast(&c->work);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->io, NULL);
    }
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->work);
    pthread_cond_destroy(&c->done);
    for (uint32_t i = 0; c->side_buf && i < c->n_side; i++)
        cairn_free(c->side_buf[i]);
    cairn_free(c->desc);
    cairn_free(c->side_buf);
    cairn_free(c->side_cap);
    cairn_free(c->side_ids);
    state_sidecars_destroy(c->plan);
    cairn_tier_trace_destroy(c->trace);
    cairn_free(c->hashes);
    cairn_free(c);
}

int engine_cold_open(const cairn_checkpoint_t *ck, const cairn_engine_options_t *o,
                     const char *numerics, kv_paged_t *kp, const cairn_layer_cache_t *layers,
                     size_t state_bytes, seq_ckpts_t *ckpts, engine_cold_t **out)
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
    const bool want_shared = o->shared_tier && o->shared_tier->url;
    if (!o->cold_store && (!root || !root[0]) && !want_shared)
        return CAIRN_OK;

    cairn_kv_cache_t *cache = kv_paged_cache_rw(kp);
    const uint32_t n_all = cairn_kv_cache_n_layers(cache);
    uint64_t *layer_bytes = cairn_calloc(n_all, sizeof(*layer_bytes));
    engine_cold_t *c = cairn_calloc(1, sizeof(*c));
    if (c) {
        pthread_mutex_init(&c->mu, NULL);
        pthread_cond_init(&c->work, NULL);
        pthread_cond_init(&c->done, NULL);
    }
    if (!layer_bytes || !c)
        goto nomem;
    c->cache = cache;
    c->async = cairn_knob_bool("CAIRN_COLD_RESTORE_ASYNC", false, false, true);
    /* Which groups need a sidecar besides the FULL layers' blocks (none for a dense
     * model). A layout the tier cannot key (FULL layers split over groups) stays off. */
    int prc = state_sidecars_create(cache, layers, n_all, state_bytes, &c->plan);
    if (prc == CAIRN_ENOMEM)
        goto nomem;
    if (prc) {
        cairn_log(CAIRN_LOG_WARN, "cold tier: off (the full-attention layers are not one cache group)");
        goto off;
    }
    c->full_group = state_sidecars_full_group(c->plan);
    c->n_side = state_sidecars_count(c->plan);
    c->ckpts = ckpts;
    if (state_sidecars_recurrent(c->plan) >= 0 && !ckpts) {
        cairn_log(CAIRN_LOG_WARN, "cold tier: off (recurrent checkpoints are off: no state to restore into)");
        goto off;
    }
    if (c->n_side) {
        c->desc = cairn_calloc(c->n_side, sizeof(*c->desc));
        c->side_buf = cairn_calloc(c->n_side, sizeof(*c->side_buf));
        c->side_cap = cairn_calloc(c->n_side, sizeof(*c->side_cap));
        if (!c->desc || !c->side_buf || !c->side_cap)
            goto nomem;
    }
    c->stor = kv_paged_storage(kp, &c->stor_ctx);
    c->staged = c->stor->stage && c->stor->stage_upload && c->stor->stage_download && c->stor->stage_sync;
    if (c->staged && c->n_side) {
        cairn_log(CAIRN_LOG_WARN, "cold tier: off (hybrid families restore only into a host-memory pool)");
        goto off;
    }
    c->block_tokens = cairn_kv_cache_block_size(cache);
    c->host_pool = cairn_kv_cache_host_storage(cache);
    c->block_bytes = cairn_kv_cache_block_bytes(cache);
    c->drain_ms = o->cold_drain_ms > 0 ? o->cold_drain_ms : 0; /* 0: engine_cold_exit_ms at close */
    /* Each FULL layer owns [k_offset, v_offset + plane) of its group's block, planes back
     * to back from 0: the object payload is exactly the block's first payload_size bytes
     * (a dense model: every layer; a hybrid: its full-attention layers). */
    size_t expect = 0;
    bool contiguous = true;
    uint32_t n_layers = 0;
    for (uint32_t l = 0; l < n_all; l++) {
        uint32_t g = 0;
        if (layers[l].kv.kind != CAIRN_KV_LAYER_FULL || cairn_kv_cache_layer_group(cache, l, &g) ||
            g != c->full_group)
            continue;
        cairn_kv_layer_view_t v;
        if (cairn_kv_layer_view(cache, l, &v) != 0 || v.k_offset != expect) {
            contiguous = false;
            break;
        }
        if (n_layers == 0)
            c->full_layer = l;
        layer_bytes[n_layers] = 2 * (uint64_t)(v.v_offset - v.k_offset);
        expect += (size_t)layer_bytes[n_layers++];
    }
    c->payload_size = expect;
    if (!contiguous || n_layers == 0 || expect > cairn_kv_cache_block_bytes(cache)) {
        cairn_log(CAIRN_LOG_WARN, "cold tier: off (the pool's block layout is not block-major)");
        goto off;
    }
    if (cairn_tier_trace_create(o->cold_trace, &c->trace))
        goto nomem;
    cairn_tier_hash_t fp;
    int rc = engine_cold_fingerprint(ck, o, numerics, c->block_tokens, &fp);
    if (rc == CAIRN_ENOMEM)
        goto nomem;
    if (rc) {
        cairn_log(CAIRN_LOG_WARN, "cold tier: off (no model fingerprint: %s)", cairn_strerror(rc));
        goto off;
    }
    if (o->cold_store) {
        c->local = o->cold_store;
        cairn_log(CAIRN_LOG_INFO, "cold tier: the caller's %s store", cairn_tier_store_name(c->local));
    } else if (root && root[0]) {
        rc = open_fs_store(&fp, o, root, c->block_tokens, n_layers, layer_bytes, &c->fs);
        if (rc == CAIRN_ENOMEM)
            goto nomem;
        if (rc) {
            cairn_log(CAIRN_LOG_WARN, "cold tier: off (cannot open the store under %s: %s)", root,
                      cairn_strerror(rc));
        } else {
            c->local = cairn_cold_store_tier(c->fs);
            cairn_log(CAIRN_LOG_INFO, "cold tier: %s", cairn_cold_store_dir(c->fs));
        }
    }
    if (want_shared) {
        /* The shared store holds the pool's blocks of group 0 (the dense families'
         * only group), under the same fingerprint as the local store. */
        const cairn_tier_group_layout_t g0 = {n_layers, layer_bytes};
        const cairn_tier_layout_t layout = {fp, o->kv_dtype, c->block_tokens, 1, &g0};
        char err[512] = "";
        rc = cairn_shared_tier_open(o->shared_tier, &layout, &c->shared, err, sizeof(err));
        if (rc == CAIRN_ENOMEM)
            goto nomem;
        if (rc)
            cairn_log(CAIRN_LOG_WARN, "shared tier: off (%s)", err[0] ? err : cairn_strerror(rc));
    }
    if (c->local && c->shared) {
        if (cairn_tier_layered_create(c->local, c->shared, &c->layered))
            goto nomem;
        c->store = c->layered;
    } else {
        c->store = c->local ? c->local : c->shared;
    }
    if (!c->store)
        goto off;
    cairn_free(layer_bytes);
    /* A device pool captures on the engine thread through the staging buffers, within
     * the budget (no capture thread: it would read the pool's memory). */
    c->budget.blocks_per_turn = o->cold_capture_blocks > 0 ? (uint32_t)o->cold_capture_blocks : 0;
    c->budget.budget_ms = o->cold_capture_ms > 0 ? (uint32_t)o->cold_capture_ms : 0;
    if (c->staged) {
        c->cap.policy = c->n.policy = CAIRN_COLD_WRITE_THROUGH;
    } else if (capture_open(c, o) != CAIRN_OK) {
        cairn_log(CAIRN_LOG_WARN, "cold tier: capture off (no capture thread)");
        c->cap.policy = c->n.policy = CAIRN_COLD_CAPTURE_OFF;
    }
    c->n.enabled = true;
    *out = c;
    return CAIRN_OK;
nomem:
    if (c) {
        cairn_tier_store_destroy(c->layered);
        cairn_tier_store_destroy(c->shared);
        cairn_cold_store_destroy(c->fs);
    }
    free_cold(c);
    cairn_free(layer_bytes);
    return CAIRN_ENOMEM;
off:
    cairn_tier_store_destroy(c->shared);
    cairn_cold_store_destroy(c->fs);
    free_cold(c);
    cairn_free(layer_bytes);
    return CAIRN_OK;
}

/* This process's event counters under their events.json names (the /metrics names less
 * "cairn_cold_" and "_total"): what `cairn cache stats` sums per model directory. */
static void events_of(const cairn_engine_cold_counters_t *n, cairn_cold_events_t *e)
{
    const struct {
        const char *name;
        uint64_t value;
    } v[] = {
        {"restore_lookups", n->restore_lookups},
        {"restored_blocks", n->restored_blocks},
        {"restored_tokens", n->restored_tokens},
        {"shared_restored_blocks", n->shared_restored_blocks},
        {"capture_walks", n->capture_walks},
        {"capture_chain_empty", n->capture_chain_empty},
        {"capture_reached", n->capture_already + n->capture_queued},
        {"capture_already", n->capture_already},
        {"capture_queued", n->capture_queued},
        {"captured_blocks", n->captured_blocks},
        {"capture_deferrals", n->capture_deferrals},
        {"capture_failed", n->capture_failed},
        {"capture_lost", n->capture_lost},
        {"writeback_holds", n->writeback_holds},
        {"sidecars_reached", n->sidecars_already + n->sidecars_captured},
        {"sidecars_captured", n->sidecars_captured},
        {"sidecars_already", n->sidecars_already},
        {"sidecar_skips", n->sidecar_skips},
        {"sidecar_drops", n->sidecar_drops},
        {"sidecar_chain_empty", n->sidecar_chain_empty},
        {"sidecar_reads", n->sidecar_reads},
        {"sidecars_installed", n->sidecars_installed},
        {"sidecar_corruptions", n->sidecar_corruptions},
        {"candidates_refused", n->candidates_refused},
        {"restores_reduced", n->restores_reduced},
        {"restores_suppressed", n->restores_suppressed},
        {"install_failures", n->install_failures},
        {"store_hits", n->store.hits},
        {"store_misses", n->store.misses},
        {"corruptions", n->store.corruptions},
        {"write_errors", n->store.write_errors},
        {"queue_drops", n->store.queue_drops},
        {"written_bytes", n->store.bytes_written},
        {"restored_bytes", n->store.bytes_restored},
    };
    memset(e, 0, sizeof *e);
    e->processes = 1;
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        (void)cairn_cold_events_set(e, v[i].name, v[i].value);
    for (int r = 0; r < CAIRN_ENGINE_COLD_MISS_REASONS; r++) {
        char name[CAIRN_COLD_EVENT_NAME];
        snprintf(name, sizeof name, "restore_miss_%s", cairn_tier_miss_name((cairn_tier_miss_t)r));
        (void)cairn_cold_events_set(e, name, n->miss[r]);
    }
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
    /* The process's event counters join the model directory's (`cairn cache stats`). */
    cairn_cold_events_t *ev = c->fs ? cairn_malloc(sizeof *ev) : NULL;
    if (ev) {
        cairn_engine_cold_counters_t n;
        engine_cold_counters(c, &n);
        events_of(&n, ev);
        int erc = cairn_cold_events_add(cairn_cold_store_dir(c->fs), ev);
        if (erc)
            cairn_log(CAIRN_LOG_WARN, "cold tier: event counters not saved: %s", cairn_strerror(erc));
        cairn_free(ev);
    }
    cairn_tier_store_destroy(c->layered);
    cairn_tier_store_destroy(c->shared);
    cairn_cold_store_destroy(c->fs);
    free_cold(c);
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

/* ---- Restores: one job per prompt ------------------------------------------------ */

/*
 * A restore job holds everything one prompt's restore needs between its start and its
 * finish, both on the engine thread: the chain's hashes and keys, the hot prefix (pinned),
 * the pool blocks taken for the proposal, which boundaries have their recurrent state in
 * the bank already, and the sidecar buffers. Its run in between reads the store and
 * touches only the job (the bytes of the pool blocks it took, its own buffers), so it can
 * run on the tier's I/O thread while the engine steps other sequences; run inline (on
 * the engine thread), its walk may also take pool blocks past the proposal (another
 * process may have written more since the metadata was read).
 */
struct restore_job {
    engine_cold_t *c;
    cairn_kv_hash_t domain;
    bool inline_run;
    size_t kmax, hot, start;       /* blocks: usable, all-groups hot, first not in the pool */
    int32_t *tokens;               /* [kmax * bs], a copy */
    cairn_kv_hash_t *hashes;       /* [kmax] the chain's block hashes */
    cairn_tier_key_t *keys;        /* [kmax] its BLOCK keys */
    uint32_t *ids;                 /* [kmax] pool block taken per chain index, 0: none */
    void **bytes;                  /* [kmax] its bytes (taken on the engine thread: the I/O
                                      thread never reads the pool's metadata) */
    size_t taken;                  /* [start, taken) taken before the run */
    size_t backed;                 /* hybrid: the boundary the sidecars back by metadata */
    size_t first, last;            /* [first, last): indices the walk gave a block */
    uint32_t *pins;                /* hot blocks pinned for the job's life */
    size_t n_pins;
    uint8_t *ckpt_hot;             /* [kmax + 1]: the bank holds the state at boundary k */
    state_sidecar_desc_t *desc;    /* [n_side] described for the candidate boundary */
    void **side_buf;               /* [n_side] RECURRENT: rstore_buf_new; SLIDING: malloc */
    bool *side_full;               /* [n_side] side_buf holds the candidate's payload */
    uint32_t *side_ids;            /* sliding install scratch */
    bool *side_take;
    int rc;                        /* the walk's status */
    cairn_tier_hybrid_result_t hr;
    cairn_tier_restore_result_t res;
    /* Staged restores (device pool, inline only): the block whose payload sits in staging
     * slot staged_i & 1, read but not yet uploaded (valid when has_staged), its pool bytes. */
    bool has_staged;
    size_t staged_i;
    uint8_t *staged_dst;
    bool stage_failed;
    /* The shared tier's share of the walk (hits of the shared store, promotions). */
    uint64_t from_shared, promoted;
    double t0;
    bool done;                     /* the run finished (under the tier's lock when queued) */
    struct restore_job *next;      /* the I/O thread's queue */
};

/* Queues the upload of the staged block (its read was validated). */
static void upload_staged(restore_job_t *j)
{
    engine_cold_t *c = j->c;
    if (!j->has_staged)
        return;
    j->has_staged = false;
    if (c->stor->stage_upload(c->stor_ctx, (int)(j->staged_i & 1), j->staged_dst, c->payload_size))
        j->stage_failed = true;
}

static void job_free(restore_job_t *j)
{
    if (!j)
        return;
    engine_cold_t *c = j->c;
    const int rec = state_sidecars_recurrent(c->plan);
    for (uint32_t i = 0; j->side_buf && i < c->n_side; i++) {
        if ((int)i == rec)
            rstore_buf_free(j->side_buf[i]);
        else
            cairn_free(j->side_buf[i]);
    }
    cairn_free(j->tokens);
    cairn_free(j->hashes);
    cairn_free(j->keys);
    cairn_free(j->ids);
    cairn_free(j->bytes);
    cairn_free(j->pins);
    cairn_free(j->ckpt_hot);
    cairn_free(j->desc);
    cairn_free(j->side_buf);
    cairn_free(j->side_full);
    cairn_free(j->side_ids);
    cairn_free(j->side_take);
    cairn_free(j);
}

/* Takes chain blocks [j->taken, upto) from the pool. Their memory is materialised block by
 * block as the walk reaches them (populate_block). Engine thread. */
static void take_blocks(restore_job_t *j, size_t upto)
{
    engine_cold_t *c = j->c;
    while (j->taken < upto) {
        if (cairn_kv_cache_import_begin(c->cache, &j->ids[j->taken], &j->bytes[j->taken]) != CAIRN_OK)
            break;
        j->taken++;
    }
}

/* Materialises a host pool block's memory before the store copies into it, in one call
 * (MADV_POPULATE_WRITE; the pool mapping asks for transparent huge pages): filling fresh
 * pool memory page fault by page fault costs more than the disk read on a virtual
 * machine. Done block by block as the walk reaches it, not for the whole proposal before
 * the walk, so the store's reads of the next blocks are in flight meanwhile. Rounding out
 * to pages stays inside committed whole blocks and changes no byte. Any thread: only the
 * job's block is touched. */
static void populate_block(const engine_cold_t *c, void *bytes)
{
#ifdef MADV_POPULATE_WRITE
    if (!c->host_pool)
        return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)bytes & ~(page - 1);
    uintptr_t hi = ((uintptr_t)bytes + c->block_bytes + page - 1) & ~(page - 1);
    (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE); /* before 5.14: faults as filled */
#else
    (void)c;
    (void)bytes;
#endif
}

/* The sink's prepare: a dense restore run inline takes the blocks the store's metadata
 * expects here (one metadata call for the whole restore); otherwise the start took them. */
static void restore_prepare(void *user, size_t start, size_t expected)
{
    restore_job_t *j = user;
    if (j->inline_run && !j->c->n_side)
        take_blocks(j, start + expected);
}

/* The sink's destination: the pool block taken for chain block i at the start; past
 * them, inline only, a fresh one; else NULL (a decline), as for a payload that is not one
 * block. Called with the object pinned. */
static void *restore_dest(void *user, size_t i, size_t payload_size)
{
    restore_job_t *j = user;
    engine_cold_t *c = j->c;
    if (payload_size != c->payload_size)
        return NULL;
    uint32_t id = 0;
    void *bytes = NULL;
    if (i < j->taken) {
        id = j->ids[i];
        bytes = j->bytes[i];
    } else if (!j->inline_run || cairn_kv_cache_import_begin(c->cache, &id, &bytes) != CAIRN_OK) {
        return NULL;
    }
    j->ids[i] = id;
    if (j->last == j->first)
        j->first = i;
    j->last = i + 1;
    if (!c->staged) {
        populate_block(c, bytes);
        return bytes;
    }
    /* Device pool: the store reads into staging slot i & 1. The walk asks for block i only
     * after block i - 1 validated, so that one's upload is queued now and runs while the
     * store reads this one; the slot reused here waits for the upload of block i - 2. */
    upload_staged(j);
    void *stage = j->stage_failed ? NULL : c->stor->stage(c->stor_ctx, (int)(i & 1), payload_size);
    if (!stage) {
        j->stage_failed = true;
        return NULL;
    }
    j->has_staged = true;
    j->staged_i = i;
    j->staged_dst = bytes;
    return stage;
}

/* Pins the full group's blocks of chain [0, n) the pool holds, so nothing the restore
 * takes (nor, for a queued job, the steps meanwhile) can evict the hot prefix it extends. */
static void pin_prefix(restore_job_t *j, size_t n)
{
    engine_cold_t *c = j->c;
    j->n_pins = 0;
    for (size_t b = 0; b < n; b++) {
        uint32_t id = cairn_kv_cache_find_block(c->cache, c->full_group, &j->domain, &j->hashes[b]);
        if (id && cairn_kv_cache_block_pin(c->cache, id) == CAIRN_OK)
            j->pins[j->n_pins++] = id;
    }
}

/* Last block first, so a chain the admission does not take back is cached with its head
 * the most recently used (pressure trims it from its end). */
static void unpin_prefix(restore_job_t *j)
{
    for (size_t i = j->n_pins; i-- > 0;)
        (void)cairn_kv_cache_block_unpin(j->c->cache, j->pins[i]);
    j->n_pins = 0;
}

/* Publishes the validated blocks [start, upto) and gives back every other block taken.
 * Returns how many were published. */
static int publish_walk(restore_job_t *j, size_t upto)
{
    engine_cold_t *c = j->c;
    int published = 0;
    size_t end = j->last > j->taken ? j->last : j->taken;
    for (size_t i = j->start; i < end; i++) {
        uint32_t id = j->ids[i];
        if (!id)
            continue;
        j->ids[i] = 0;
        if (i < upto) {
            if (cairn_kv_cache_import_publish_group(c->cache, id, c->full_group, &j->domain, &j->hashes[i]) ==
                CAIRN_OK)
                published++;
        } else {
            (void)cairn_kv_cache_import_discard(c->cache, id);
        }
    }
    return published;
}

/* ---- the sidecar policy over the engine's groups (cairn_tier_sidecar_policy_t) ---- */

/* A recurrent group is hot at k when the bank held the checkpoint at that boundary at
 * the start. A sliding group is always read from its sidecar: its cached blocks could be
 * evicted (by the blocks the restore takes, by the steps meanwhile) before the install. */
static bool policy_hot(void *user, uint32_t i, size_t k)
{
    restore_job_t *j = user;
    return (int)i == state_sidecars_recurrent(j->c->plan) && k <= j->kmax && j->ckpt_hot[k];
}

static int policy_want(void *user, uint32_t i, size_t k, cairn_tier_object_t *w)
{
    restore_job_t *j = user;
    engine_cold_t *c = j->c;
    state_sidecar_desc_t *d = &j->desc[i];
    int rc = state_sidecar_describe(c->plan, i, k * c->block_tokens, d);
    if (rc)
        return rc;
    w->key.kind = CAIRN_TIER_STATE;
    w->key.group = d->group;
    memcpy(w->key.hash.bytes, j->hashes[k - 1].bytes, sizeof(w->key.hash.bytes));
    memcpy(w->key.domain.bytes, j->domain.bytes, sizeof(w->key.domain.bytes));
    w->boundary = d->boundary;
    w->layout = d->layout;
    w->layout_size = d->layout_size;
    return CAIRN_OK;
}

static void *policy_dest(void *user, uint32_t i, size_t k, size_t payload_size)
{
    restore_job_t *j = user;
    (void)k;
    const state_sidecar_desc_t *d = &j->desc[i]; /* want() described it for this k just before */
    if (payload_size != d->payload_size)
        return NULL;
    if ((int)i == state_sidecars_recurrent(j->c->plan)) {
        rstore_buf_free(j->side_buf[i]);
        j->side_buf[i] = rstore_buf_new(payload_size);
    } else {
        cairn_free(j->side_buf[i]);
        j->side_buf[i] = cairn_malloc(payload_size);
    }
    j->side_full[i] = j->side_buf[i] != NULL;
    return j->side_buf[i];
}

/* A refused candidate's payloads go at once: nothing refused is held during the walk or
 * the suffix prefill. */
static void policy_release(void *user, size_t k)
{
    restore_job_t *j = user;
    (void)k;
    const int rec = state_sidecars_recurrent(j->c->plan);
    for (uint32_t i = 0; i < j->c->n_side; i++) {
        if ((int)i == rec)
            rstore_buf_free(j->side_buf[i]);
        else
            cairn_free(j->side_buf[i]);
        j->side_buf[i] = NULL;
        j->side_full[i] = false;
    }
}

static cairn_tier_sidecar_policy_t job_policy(restore_job_t *j)
{
    return (cairn_tier_sidecar_policy_t){j->c->n_side, policy_hot, policy_want, policy_dest, policy_release, j};
}

static cairn_tier_chain_t job_chain(const restore_job_t *j)
{
    return (cairn_tier_chain_t){j->keys, j->tokens, j->c->block_tokens, j->kmax};
}

/*
 * Installs every group at boundary k (blocks [start, k) validated, the sidecars at k
 * read): takes the sliding groups' pool blocks first (the step that can fail), then
 * publishes blocks and sliding rows and hands the recurrent state to the bank. A failure
 * before publication gives everything back (no group installed); the bank refusing the
 * state afterwards leaves published blocks that no prefix reaches without it (the KV core
 * serves a hybrid prefix only with its checkpoint), so the admission still reconciles
 * down. Returns the objects installed, or -1.
 */
static int install(restore_job_t *j, size_t k)
{
    engine_cold_t *c = j->c;
    const int rec = state_sidecars_recurrent(c->plan);
    size_t need = 0;
    for (uint32_t i = 0; i < c->n_side; i++)
        if ((int)i != rec)
            need += j->desc[i].n_blocks;
    j->side_ids = cairn_malloc((need ? need : 1) * sizeof(*j->side_ids));
    j->side_take = cairn_malloc((need ? need : 1) * sizeof(*j->side_take));
    if (!j->side_ids || !j->side_take)
        goto fail;
    size_t at = 0;
    uint32_t taken = 0;
    for (uint32_t i = 0; i < c->n_side; i++, taken++) {
        if ((int)i == rec)
            continue;
        if (!j->side_full[i] || state_sidecar_sliding_take(c->cache, &j->desc[i], &j->domain, j->hashes,
                                                           j->side_ids + at, j->side_take + at))
            break;
        at += j->desc[i].n_blocks;
    }
    if (taken < c->n_side) {
        at = 0;
        for (uint32_t i = 0; i < taken; i++) {
            if ((int)i == rec)
                continue;
            state_sidecar_sliding_abandon(c->cache, &j->desc[i], j->side_ids + at, j->side_take + at);
            at += j->desc[i].n_blocks;
        }
        goto fail;
    }
    int objects = publish_walk(j, k);
    at = 0;
    for (uint32_t i = 0; i < c->n_side; i++) {
        if ((int)i == rec)
            continue;
        int pub = 0;
        state_sidecar_sliding_commit(c->cache, &j->desc[i], &j->domain, j->hashes, j->side_ids + at,
                                     j->side_take + at, j->side_buf[i], &pub);
        at += j->desc[i].n_blocks;
        objects += pub;
        c->n.sidecars_installed++;
        j->side_full[i] = false;
    }
    if (rec >= 0 && j->side_full[rec]) {
        void *bytes = j->side_buf[rec];
        j->side_buf[rec] = NULL;
        j->side_full[rec] = false;
        if (seq_ckpt_import(c->ckpts, &j->hashes[k - 1], bytes) != CAIRN_OK) { /* bytes freed */
            c->n.install_failures++;
            return objects;
        }
        c->n.sidecars_installed++;
        objects++;
    }
    return objects;
fail:
    c->n.install_failures++;
    (void)publish_walk(j, j->start); /* gives back every block taken */
    policy_release(j, k);
    return -1;
}

static void *job_alloc(size_t n, size_t elem, bool *ok)
{
    void *p = cairn_calloc(n ? n : 1, elem);
    *ok = *ok && p;
    return p;
}

/*
 * The engine-thread half before the reads: hashes the prompt's usable blocks, finds the
 * hot prefix, pins it, and takes the pool blocks of the proposal (a hybrid's: up to the
 * deepest boundary the sidecars back by metadata). *out is NULL when there is nothing to
 * restore (tier off, everything hot, no memory). *hot_tokens: the hot prefix.
 */
static void job_start(engine_cold_t *c, kv_paged_seq_t *s, const int32_t *tokens, int n, bool inline_run,
                      restore_job_t **out, int *hot_tokens)
{
    *out = NULL;
    *hot_tokens = 0;
    if (!c || n < 2)
        return;
    const size_t bs = c->block_tokens;
    const size_t kmax = ((size_t)n - 1) / bs; /* blocks that may serve: >= 1 token computed */
    if (kmax == 0)
        return;
    double t0 = cairn_now_seconds();
    restore_job_t *j = cairn_calloc(1, sizeof(*j));
    bool ok = j != NULL;
    if (!ok)
        return;
    j->c = c;
    j->t0 = t0;
    j->inline_run = inline_run;
    j->kmax = kmax;
    memcpy(j->domain.bytes, kv_paged_seq_domain(s)->bytes, sizeof(j->domain.bytes));
    j->tokens = job_alloc(kmax * bs, sizeof(*j->tokens), &ok);
    j->hashes = job_alloc(kmax, sizeof(*j->hashes), &ok);
    j->keys = job_alloc(kmax, sizeof(*j->keys), &ok);
    j->ids = job_alloc(kmax, sizeof(*j->ids), &ok);
    j->bytes = job_alloc(kmax, sizeof(*j->bytes), &ok);
    j->pins = job_alloc(kmax, sizeof(*j->pins), &ok);
    j->ckpt_hot = job_alloc(kmax + 1, sizeof(*j->ckpt_hot), &ok);
    j->desc = job_alloc(c->n_side, sizeof(*j->desc), &ok);
    j->side_buf = job_alloc(c->n_side, sizeof(*j->side_buf), &ok);
    j->side_full = job_alloc(c->n_side, sizeof(*j->side_full), &ok);
    size_t hot = 0;
    if (!ok || cairn_kv_cache_hash_blocks(c->cache, &j->domain, NULL, 0, tokens, kmax * bs, j->hashes) ||
        cairn_kv_cache_lookup_hashes(c->cache, &j->domain, j->hashes, (size_t)n, &hot))
        goto none; /* out of memory: just no restore */
    *hot_tokens = (int)hot;
    j->hot = hot / bs;
    if (j->hot >= kmax)
        goto none;
    memcpy(j->tokens, tokens, kmax * bs * sizeof(*tokens));
    /* The walk reads the store, not only this process's index: another process sharing
     * it may have written the blocks since open. cairn_kv_hash_t and cairn_tier_hash_t
     * are the same 32 bytes. */
    for (size_t i = 0; i < kmax; i++) {
        j->keys[i] = (cairn_tier_key_t){.kind = CAIRN_TIER_BLOCK, .group = 0};
        memcpy(j->keys[i].hash.bytes, j->hashes[i].bytes, sizeof(j->keys[i].hash.bytes));
        memcpy(j->keys[i].domain.bytes, j->domain.bytes, sizeof(j->keys[i].domain.bytes));
    }
    c->n.restore_lookups++;
    /* A hybrid's full group may hold blocks past the all-groups hot prefix (their state
     * is what is missing): the walk need not read them. */
    j->start = j->hot;
    if (c->n_side) {
        while (j->start < kmax && cairn_kv_cache_find_block(c->cache, c->full_group, &j->domain, &j->hashes[j->start]))
            j->start++;
        for (size_t k = 1; k <= kmax; k++)
            j->ckpt_hot[k] = cairn_kv_cache_checkpoint_has(c->cache, &j->hashes[k - 1]);
    }
    pin_prefix(j, j->start);
    j->taken = j->first = j->last = j->start;
    /* The proposal's pool blocks, taken here unless a dense walk runs inline (its prepare
     * takes them). A hybrid's proposal is already reduced to the deepest boundary the
     * sidecars back by metadata, so no block is taken for a tail no state backs. */
    const cairn_tier_chain_t chain = job_chain(j);
    if (c->n_side) {
        const cairn_tier_sidecar_policy_t pol = job_policy(j);
        j->backed = cairn_tier_hybrid_propose(c->store, &chain, j->start, j->hot, &pol, NULL);
        take_blocks(j, j->backed);
    } else if (!inline_run) {
        take_blocks(j, j->start + cairn_tier_store_chain_length(c->store, j->keys + j->start, kmax - j->start));
    }
    *out = j;
    c->n.restore_engine_seconds += cairn_now_seconds() - t0;
    return;
none:
    c->n.restore_seconds += cairn_now_seconds() - t0;
    c->n.restore_engine_seconds += cairn_now_seconds() - t0;
    job_free(j);
}

/* The reads: the walk (dense) or the hybrid walk with the sidecar policy. Touches only the
 * job and the store. */
static void job_run(restore_job_t *j)
{
    engine_cold_t *c = j->c;
    const cairn_tier_chain_t chain = job_chain(j);
    const cairn_tier_restore_sink_t sink = {restore_prepare, restore_dest, j};
    /* The shared store's hits during the walk are this restore's blocks from the shared
     * tier (the I/O thread and the engine thread never walk at once: approximate only
     * while a capture's contains() runs beside an I/O-thread restore). */
    cairn_tier_layered_counters_t ly0, ly1;
    cairn_shared_tier_stats_t sh0, sh1;
    memset(&ly0, 0, sizeof ly0);
    memset(&ly1, 0, sizeof ly1);
    memset(&sh0, 0, sizeof sh0);
    memset(&sh1, 0, sizeof sh1);
    (void)cairn_tier_layered_counters(c->layered, &ly0);
    (void)cairn_shared_tier_stats(c->shared, &sh0);
    if (c->n_side) {
        const cairn_tier_sidecar_policy_t pol = job_policy(j);
        j->rc = cairn_tier_restore_hybrid(c->store, &chain, j->start, j->hot, &sink, &pol, &j->hr);
    } else {
        j->rc = cairn_tier_restore_chain(c->store, &chain, j->start, &sink, &j->res);
    }
    (void)cairn_tier_layered_counters(c->layered, &ly1);
    (void)cairn_shared_tier_stats(c->shared, &sh1);
    j->from_shared = sh1.tier.hits - sh0.tier.hits;
    j->promoted = ly1.promoted - ly0.promoted;
    if (c->staged) {
        /* Dense and inline only. The last staged block counts only if its read validated. */
        const size_t loaded = j->rc == CAIRN_OK ? j->res.loaded : 0;
        if (j->has_staged && j->staged_i < j->start + loaded)
            upload_staged(j);
        j->has_staged = false;
        if (c->stor->stage_sync(c->stor_ctx) || j->stage_failed) {
            cairn_log(CAIRN_LOG_WARN, "cold tier: copying restored blocks to the device failed");
            j->res.loaded = 0; /* nothing is published: every block goes back to the free queue */
        }
    }
}

/* The engine-thread half after the reads: installs (or gives back), unpins, counts and
 * traces, frees the job. */
static void job_finish(restore_job_t *j, int *restored_objects, int *miss)
{
    engine_cold_t *c = j->c;
    const double t_finish = cairn_now_seconds();
    int objects = 0;
    const uint64_t restored0 = c->n.restored_blocks;
    if (c->n_side) {
        cairn_tier_hybrid_result_t *hr = &j->hr;
        if (j->rc == CAIRN_OK && hr->boundary > j->hot) {
            objects = install(j, hr->boundary);
            if (objects < 0) {
                hr->miss = CAIRN_TIER_MISS_INSTALL;
                hr->boundary = 0;
                objects = 0;
            }
        } else {
            (void)publish_walk(j, j->start);
            policy_release(j, 0);
        }
        c->n.restored_blocks += hr->boundary > j->start ? hr->boundary - j->start : 0;
        c->n.sidecar_corruptions += hr->sidecar_corruptions;
        c->n.sidecar_reads += hr->sidecars_read;
        c->n.candidates_refused += hr->candidates_refused;
        if (hr->proposed > j->hot && hr->boundary <= j->hot)
            c->n.restores_suppressed++;
        else if (hr->boundary > j->hot && hr->boundary < hr->proposed)
            c->n.restores_reduced++;
        c->n.last_miss = hr->miss < CAIRN_ENGINE_COLD_MISS_REASONS ? (int)hr->miss : 0;
        cairn_tier_trace_restore(c->trace, j->hot, hr);
    } else {
        /* Publish the validated prefix of the walk; give back the block it stopped on and
         * any taken block the walk did not reach. */
        const size_t loaded = j->rc == CAIRN_OK ? j->res.loaded : 0;
        objects = publish_walk(j, j->start + loaded);
        c->n.restored_blocks += (uint64_t)objects;
        c->n.last_miss = objects ? CAIRN_TIER_MISS_NONE
                         : j->res.stop == CAIRN_ECORRUPT ? CAIRN_TIER_MISS_CORRUPT
                                                         : CAIRN_TIER_MISS_CHAIN_EMPTY;
    }
    const uint64_t restored = c->n.restored_blocks - restored0;
    c->n.shared_restored_blocks += j->from_shared < restored ? j->from_shared : restored;
    c->n.shared_promoted_blocks += j->promoted;
    unpin_prefix(j);
    c->n.miss[c->n.last_miss]++;
    *restored_objects = objects;
    *miss = c->n.last_miss;
    c->n.restore_seconds += cairn_now_seconds() - j->t0;
    c->n.restore_engine_seconds += cairn_now_seconds() - t_finish;
    job_free(j);
}

void engine_cold_restore(engine_cold_t *c, kv_paged_seq_t *s, const int32_t *tokens, int n,
                         int *hot_tokens, int *restored_blocks, int *miss)
{
    *restored_blocks = 0;
    *miss = -1;
    restore_job_t *j = NULL;
    job_start(c, s, tokens, n, true, &j, hot_tokens);
    if (!j)
        return;
    const double t_run = cairn_now_seconds();
    job_run(j); /* inline: the reads stall the engine thread too */
    c->n.restore_engine_seconds += cairn_now_seconds() - t_run;
    job_finish(j, restored_blocks, miss);
}

/* ---- Restores off the engine thread ---- */

/* The I/O thread: runs queued jobs in order; a job's `done` is set under the lock. */
static void *io_main(void *arg)
{
    engine_cold_t *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->q_head && !c->io_stop)
            pthread_cond_wait(&c->work, &c->mu);
        if (!c->q_head)
            break; /* stopping, nothing queued */
        restore_job_t *j = c->q_head;
        c->q_head = j->next;
        if (!c->q_head)
            c->q_tail = NULL;
        pthread_mutex_unlock(&c->mu);
        job_run(j);
        pthread_mutex_lock(&c->mu);
        j->done = true;
        pthread_cond_broadcast(&c->done);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

void engine_cold_restore_async(engine_cold_t *c, kv_paged_seq_t *s, const int32_t *tokens, int n,
                               int *hot_tokens, restore_job_t **job)
{
    *job = NULL;
    restore_job_t *j = NULL;
    job_start(c, s, tokens, n, false, &j, hot_tokens);
    if (!j)
        return;
    if (j->taken == j->start && (!c->n_side || j->backed <= j->hot)) {
        /* Nothing to read (the store's metadata holds no block, no sidecar-backed
         * boundary past the hot prefix): the rest is metadata, done here. */
        const double t_run = cairn_now_seconds();
        job_run(j);
        c->n.restore_engine_seconds += cairn_now_seconds() - t_run;
        j->done = true;
        *job = j;
        return;
    }
    pthread_mutex_lock(&c->mu);
    if (!c->io_started) {
        if (pthread_create(&c->io, NULL, io_main, c) == 0) {
            c->io_started = true;
        } else {
            pthread_mutex_unlock(&c->mu);
            job_run(j); /* no thread: read here; the job is finished by the caller */
            j->done = true;
            *job = j;
            return;
        }
    }
    j->next = NULL;
    if (c->q_tail)
        c->q_tail->next = j;
    else
        c->q_head = j;
    c->q_tail = j;
    pthread_cond_signal(&c->work);
    pthread_mutex_unlock(&c->mu);
    *job = j;
}

bool engine_cold_restore_ready(engine_cold_t *c, const restore_job_t *j)
{
    pthread_mutex_lock(&c->mu);
    bool d = j->done;
    pthread_mutex_unlock(&c->mu);
    return d;
}

void engine_cold_restore_finish(engine_cold_t *c, restore_job_t *j, int *restored_objects, int *miss)
{
    pthread_mutex_lock(&c->mu);
    while (!j->done)
        pthread_cond_wait(&c->done, &c->mu);
    pthread_mutex_unlock(&c->mu);
    job_finish(j, restored_objects, miss);
}

bool engine_cold_async(const engine_cold_t *c) { return c && c->async && !c->staged; }

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

typedef struct {
    engine_cold_t *c;
    const cairn_kv_seq_t *seq;
    const cairn_kv_hash_t *domain;
    const uint32_t *table;
    const int32_t *tokens;
    size_t n;             /* blocks of the walk */
    size_t in_slot[2];    /* staged captures: 1 + the block queued into each slot, 0: none */
} capture_ctx_t;

/* Device pool: block i's bytes in host memory, through staging slot i & 1; block i + 1 is
 * queued into the other slot first, so its copy runs while the store copies block i (the
 * store copied block i - 1, the slot's last occupant, before the walk asked for i). */
static const void *capture_staged(capture_ctx_t *k, size_t i)
{
    engine_cold_t *c = k->c;
    for (size_t j = i; j <= i + 1 && j < k->n; j++) {
        if (k->in_slot[j & 1] == j + 1)
            continue;
        if (c->stor->stage_download(c->stor_ctx, (int)(j & 1), cairn_kv_cache_block_data(c->cache, k->table[j]),
                                    c->payload_size))
            return NULL;
        k->in_slot[j & 1] = j + 1;
    }
    return c->stor->stage(c->stor_ctx, (int)(i & 1), c->payload_size);
}

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
    out->payload = k->c->staged ? capture_staged(k, i) : cairn_kv_cache_block_data(k->c->cache, k->table[i]);
    out->payload_size = k->c->payload_size;
    return out->payload ? CAIRN_OK : CAIRN_EINVAL;
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

/* A sidecar job: its payload, pinned in the state bank (a recurrent state) or a private
 * copy (a sliding window's rows), held until the capture thread is done with it. Tagged
 * SIDE_TAG | address, block jobs by their entry index. */
#define SIDE_TAG (1ull << 63)

typedef struct {
    const void *pinned;        /* seq_ckpt_pin's bytes, or NULL */
    void *buf;                 /* the gathered copy, or NULL */
} side_job_t;

static void side_done(engine_cold_t *c, side_job_t *j, int status)
{
    if (j->pinned)
        seq_ckpt_unpin(c->ckpts, j->pinned);
    cairn_free(j->buf);
    cairn_free(j);
    c->cap.n_side_inflight--;
    if (status == CAIRN_OK)
        c->n.sidecars_captured++;
    else if (status == CAIRN_ECANCELED)
        c->n.sidecar_skips++; /* stopped at close before its put */
    else
        c->n.sidecar_drops++; /* refused by the store (layout, memory) */
}

/* Reap callback: the capture thread is done with entry `tag`'s copy. */
static void on_copied(void *user, uint64_t tag, int status)
{
    engine_cold_t *c = user;
    engine_capture_t *k = &c->cap;
    if (tag & SIDE_TAG) {
        side_done(c, (side_job_t *)(uintptr_t)(tag & ~SIDE_TAG), status);
        return;
    }
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
    if (k->n_inflight || k->n_side_inflight)
        cairn_tier_capturer_reap(k->thread, on_copied, c);
    while (k->heap_n) {
        if (k->pinned_bytes && k->pinned_bytes + c->payload_size > k->pin_budget) {
            c->n.capture_deferrals++;
            break;
        }
        uint32_t e = heap_pop(k);
        dirty_t *d = &k->d[e];
        uint32_t id = cairn_kv_cache_find_block(c->cache, c->full_group, &d->domain, &d->hash);
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
    if (!c || !c->cap.thread || (!c->cap.n_inflight && !c->cap.heap_n && !c->cap.n_side_inflight))
        return false;
    double t0 = cairn_now_seconds();
    pump(c);
    c->n.capture_seconds += cairn_now_seconds() - t0;
    return c->cap.n_inflight || c->cap.heap_n || c->cap.n_side_inflight;
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
    if (group != c->full_group || !k->thread)
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

/* Whether boundary j (blocks) is an anchor a sliding-only model captures, the places
 * seq_ckpt_next puts a recurrent model's checkpoints and the end of what was computed:
 * the grid (bs * 4^m), the latest prompt's last full block and the one before it (the
 * same prompt again is served at most n - 1 tokens), and the two deepest boundaries the
 * walk reached. */
static bool sliding_anchor(size_t j, size_t reached, size_t prompt_blocks)
{
    if (j + 1 >= reached || j == prompt_blocks || j + 1 == prompt_blocks)
        return true;
    size_t g = 1;
    while (g < j)
        g *= 4;
    return g == j;
}

/*
 * The sidecars of the anchors the persisted chain reaches (boundaries j <= reached):
 * for each anchor whose every group's state is still in memory (the bank's checkpoint
 * at j; a sliding group's blocks first_live..j-1 in the pool), each sidecar the store
 * does not hold goes to the capture thread (a recurrent state pinned in the bank, a
 * sliding window's rows gathered into a private copy, released when the job is reaped),
 * which waits for room as long as it takes: never dropped for a full queue. Without a
 * capture thread, or without memory for the job, it is put here with up to wait_ms.
 */
static void capture_sidecars(engine_cold_t *c, const cairn_kv_seq_t *seq, const cairn_kv_hash_t *domain,
                             size_t reached, size_t prompt_len, uint32_t wait_ms)
{
    const int rec = state_sidecars_recurrent(c->plan);
    if (reserve((void **)&c->hashes, &c->hashes_cap, reached ? reached : 1, sizeof(*c->hashes)))
        return;
    for (size_t j = 0; j < reached; j++)
        if (cairn_kv_seq_boundary_key(seq, (j + 1) * c->block_tokens, &c->hashes[j]))
            return;
    for (size_t j = reached; j > 0; j--) {
        const cairn_kv_hash_t *key = &c->hashes[j - 1];
        if (rec >= 0 ? !seq_ckpt_has(c->ckpts, key) : !sliding_anchor(j, reached, prompt_len / c->block_tokens))
            continue;
        for (uint32_t i = 0; i < c->n_side; i++) {
            state_sidecar_desc_t *d = &c->desc[i];
            if (state_sidecar_describe(c->plan, i, j * c->block_tokens, d))
                break;
            cairn_tier_object_t obj;
            memset(&obj, 0, sizeof obj);
            obj.key.kind = CAIRN_TIER_STATE;
            obj.key.group = d->group;
            memcpy(obj.key.hash.bytes, key->bytes, sizeof(obj.key.hash.bytes));
            memcpy(obj.key.domain.bytes, domain->bytes, sizeof(obj.key.domain.bytes));
            obj.boundary = d->boundary;
            obj.layout = d->layout;
            obj.layout_size = d->layout_size;
            obj.payload_size = d->payload_size;
            if (cairn_tier_store_contains(c->store, &obj.key)) {
                c->n.sidecars_already++;
                continue;
            }
            const void *pinned = NULL;
            if ((int)i == rec) {
                obj.payload = pinned = seq_ckpt_pin(c->ckpts, key);
            } else {
                if (reserve((void **)&c->side_ids, &c->side_ids_cap, d->n_blocks ? d->n_blocks : 1,
                            sizeof(*c->side_ids)))
                    break;
                bool ok = true;
                for (size_t b = 0; b < d->n_blocks && ok; b++)
                    ok = (c->side_ids[b] = cairn_kv_cache_find_block(c->cache, d->group, domain,
                                                                     &c->hashes[d->first_block + b])) != 0;
                if (ok && c->side_cap[i] < d->payload_size) {
                    cairn_free(c->side_buf[i]);
                    c->side_buf[i] = cairn_malloc(d->payload_size);
                    c->side_cap[i] = c->side_buf[i] ? d->payload_size : 0;
                }
                if (ok && c->side_buf[i]) {
                    state_sidecar_gather(c->cache, d, c->side_ids, c->side_buf[i]);
                    obj.payload = c->side_buf[i];
                }
            }
            if (!obj.payload) {
                c->n.sidecar_skips++;
                continue;
            }
            /* The capture thread puts it, waiting for room as long as it takes: never
             * dropped for a full queue. The payload stays valid until the job is reaped:
             * the bank's pin, or a private copy of the gathered rows. */
            side_job_t *job = cairn_calloc(1, sizeof *job);
            if (job && !pinned && (job->buf = cairn_malloc(d->payload_size ? d->payload_size : 1)))
                memcpy(job->buf, obj.payload, d->payload_size);
            if (job && (pinned || job->buf)) {
                job->pinned = pinned;
                obj.payload = pinned ? pinned : job->buf;
                if (c->cap.thread &&
                    cairn_tier_capturer_submit(c->cap.thread, &obj, SIDE_TAG | (uint64_t)(uintptr_t)job) == CAIRN_OK) {
                    c->cap.n_side_inflight++;
                    continue;
                }
                obj.payload = pinned ? pinned : c->side_buf[i];
                cairn_free(job->buf);
            }
            cairn_free(job);
            /* No capture thread (policy off) or no memory: the synchronous put. */
            bool queued = false;
            int rc = cairn_tier_store_put(c->store, &obj, wait_ms, &queued);
            if (pinned)
                seq_ckpt_unpin(c->ckpts, pinned);
            if (rc == CAIRN_OK && queued)
                c->n.sidecars_captured++;
            else if (rc == CAIRN_OK)
                c->n.sidecars_already++;
            else
                c->n.sidecar_drops++;
        }
    }
}

void engine_cold_capture(engine_cold_t *c, const kv_paged_seq_t *s, int prompt_len, const char *label)
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
    const uint32_t *table = cairn_kv_seq_block_table(seq, c->full_layer, &n_table);
    if (n_full > n_table)
        n_full = n_table;
    if (n_full == 0) {
        c->n.capture_chain_empty++;
        if (c->n_side)
            c->n.sidecar_chain_empty++;
        return;
    }
    double t0 = cairn_now_seconds();
    t.blocks = (uint32_t)n_full;
    if (k->thread) {
        const bool ready = k->policy == CAIRN_COLD_WRITE_THROUGH;
        const cairn_kv_hash_t *domain = kv_paged_seq_domain(s);
        const int32_t *tokens = cairn_kv_seq_tokens(seq);
        cairn_kv_hash_t prev, h;
        memset(prev.bytes, 0, sizeof prev.bytes);
        size_t reached = 0; /* leading blocks on disk or queued */
        for (size_t i = 0; i < n_full; i++, prev = h, reached = i) {
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
        /* Sidecars of the anchors this chain reaches (on disk or queued, from block 0). */
        if (c->n_side && reached)
            capture_sidecars(c, seq, domain, reached, prompt_len > 0 ? (size_t)prompt_len : 0, SIDECAR_WAIT_MS);
        else if (c->n_side)
            c->n.sidecar_chain_empty++;
    } else if (c->staged) {
        /* A device pool: no capture thread (it would read the pool's memory); the walk
         * copies each block through the staging buffers here, within the tier's budget. */
        capture_ctx_t kc = {c, seq, kv_paged_seq_domain(s), table, cairn_kv_seq_tokens(seq), n_full, {0, 0}};
        cairn_tier_capture_result_t res;
        memset(&res, 0, sizeof(res));
        if (cairn_tier_capture_chain(c->store, n_full, capture_block, &kc, &c->budget, &res) == CAIRN_OK) {
            c->n.capture_walks++;
            c->n.captured_blocks += res.enqueued;
            c->n.capture_already += res.already;
            t.queued += (uint32_t)res.enqueued;
        }
        if (c->stor->stage_sync(c->stor_ctx))
            cairn_log(CAIRN_LOG_WARN, "cold tier: copying captured blocks from the device failed");
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
        cairn_tier_store_stats(c->local, &st);
        /* An unreachable shared tier keeps its queue: waiting for it would only delay
         * the exit by the whole deadline. */
        cairn_shared_tier_stats_t sh;
        bool shared_busy = cairn_shared_tier_stats(c->shared, &sh) == CAIRN_OK && sh.connected && sh.tier.queue_len;
        if ((st.queue_len == 0 && !shared_busy) || cairn_now_seconds() >= deadline)
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
        if ((!k->n_inflight && !k->heap_n && !k->n_side_inflight) || cairn_now_seconds() >= deadline)
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
    cairn_tier_store_stats(c->local, &out->store);
    out->shared_enabled = c->shared != NULL;
    (void)cairn_shared_tier_stats(c->shared, &out->shared);
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
