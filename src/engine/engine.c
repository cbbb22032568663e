/*
 * engine.c — the engine object: options, sequences, and batched steps over two K/V paths.
 *
 * Model. A sequence holds its tokens [len]; the first n_past have K/V stored (and, for a
 * model with recurrent layers, its state handle holds the state after them). A step turns
 * each item's next n pending tokens into rows (sequence, position, token, logits row),
 * reserves their K/V storage, runs them through the model family's fwd_step in
 * sub-batches of at most max_step_tokens rows, and only then advances n_past. Because K/V
 * storage for a row is written by the row itself and every kernel's bits are independent
 * of the batch, how the rows are grouped into steps and sub-batches never changes a logit.
 *
 * Families. The engine knows models only through models/family.h: the cache layout the
 * family declares shapes the K/V storage and the state handles, and the family's forward
 * context computes the rows. Nothing here names a family.
 *
 * K/V paths. Flat: a kv_flat_t per sequence. Paged: see kv_paged.c, which maps a
 * sequence's positions to blocks of the KV cache core. Both expose attn_kv_t, so the
 * forward pass is path-agnostic; the paged path also hands the family the core sequence
 * (its block tables).
 *
 * Invariants: 0 <= n_past <= len <= max_context; live sequences form a doubly linked list
 * owned by the engine (destroyed with it).
 * Thread-safety: single-threaded API (the engine thread); steps use the pool internally.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cairn/engine.h"
#include "engine/engine_cold.h"
#include "compute/backend.h"
#include "engine/kv_flat.h"
#include "engine/kv_paged.h"
#include "engine/seq_state.h"
#include "models/family.h"
#include "util/util.h"

/* A checkpoint boundary inside a step: item `item` passes n = b tokens after row `end`-1. */
typedef struct {
    int end;   /* the sub-batch ends before this row index */
    int item;
    int b;
} step_cut_t;

struct cairn_seq {
    cairn_engine_t *e;
    cairn_seq_t *prev, *next; /* the engine's live list */
    int32_t *tokens;          /* [cap] ; [0, len) valid */
    int len, cap;
    int n_past;               /* tokens with K/V stored */
    int restored;             /* prompt tokens restored from the cold tier at begin */
    int cold_miss;            /* the restore's cairn_tier_miss_t, -1: no restore looked */
    restore_job_t *restore;   /* a restore whose reads run off the engine thread (begun
                                 by cairn_seq_begin_async, not finished yet) */
    int32_t *prompt;          /* its prompt, [n_prompt], until cairn_seq_begin_finish */
    int n_prompt, hot_begin;
    bool in_step;             /* duplicate detection inside one step */
    bool cold_skip;           /* released by a failed begin: no capture */
    kv_flat_t flat;           /* CAIRN_KV_FLAT */
    kv_paged_seq_t *paged;    /* CAIRN_KV_PAGED */
    seq_state_t state;        /* recurrent state after n_past tokens (empty: none) */
    int prompt_len;           /* tokens up to the end of the latest prompt (checkpoints) */
};

struct cairn_engine {
    const cairn_checkpoint_t *ck;
    const cairn_model_t *model;
    const cairn_model_config_t *cfg;
    cairn_engine_options_t opt;
    cairn_thread_pool_t *tp;
    compute_backend_t *be;    /* where the family's ops run (the CPU backend on tp) */
    cairn_layer_cache_t *layers; /* [n_layers] the family's cache layout */
    size_t state_bytes;       /* per-sequence recurrent state (0: none) */
    void *fwd;                /* the family's forward context */
    kv_paged_t *paged;        /* the paged store (NULL on the flat path) */
    seq_ckpts_t *ckpts;       /* recurrent checkpoints (paged path, stateful models only) */
    engine_cold_t *cold;      /* the SSD cold tier (NULL when off; see engine_cold.c) */
    cairn_seq_t *seqs;        /* live sequences */
    cairn_fwd_row_t *rows;    /* [rows_cap] rows of the current step */
    int rows_cap;
    cairn_fwd_seq_t *views;   /* [views_cap] one per item of the current step */
    int views_cap;
    step_cut_t *cuts;         /* [cuts_cap] checkpoint boundaries of the current step */
    int cuts_cap;
    float *logits;            /* [logits_cap][vocab] */
    int logits_cap;
    cairn_engine_counters_t counters;
};

void cairn_engine_options_default(cairn_engine_options_t *o)
{
    memset(o, 0, sizeof(*o));
    o->n_threads = 1;
    o->kv_path = CAIRN_KV_PAGED;
    o->kv_dtype = CAIRN_DTYPE_BF16;
    o->math = CAIRN_ENGINE_MATH_F32;
    o->pool_mib = 256;
    o->block_tokens = 16;
    o->max_context = 0;
    o->max_step_tokens = 512;
    o->state_ckpt_mib = 0;
}

int cairn_engine_create(const cairn_checkpoint_t *ck, const cairn_engine_options_t *opt,
                        cairn_engine_t **out, char *err, size_t err_len)
{
    cairn_engine_options_t o;
    if (opt)
        o = *opt;
    else
        cairn_engine_options_default(&o);
    *out = NULL;
    const cairn_model_t *model = cairn_checkpoint_model(ck);
    const cairn_model_config_t *cfg = &model->cfg;
    if (o.max_context <= 0)
        o.max_context = cfg->max_pos < 32768 ? cfg->max_pos : 32768;
    if (o.n_threads < 1 || o.max_step_tokens < 1 || o.max_context < 1 ||
        (o.kv_path != CAIRN_KV_PAGED && o.kv_path != CAIRN_KV_FLAT) ||
        (o.math != CAIRN_ENGINE_MATH_F32 && o.math != CAIRN_ENGINE_MATH_BF16) ||
        !cairn_dtype_block_elems(o.kv_dtype) || /* the backend says below which types it stores */
        (o.kv_path == CAIRN_KV_PAGED && (o.pool_mib < 1 || o.block_tokens < 1))) {
        cairn_errf(err, err_len, "%s", "engine: invalid options");
        return CAIRN_EINVAL;
    }

    cairn_engine_t *e = cairn_calloc(1, sizeof(*e));
    if (!e) {
        cairn_errf(err, err_len, "%s", "engine: out of memory");
        return CAIRN_ENOMEM;
    }
    e->ck = ck;
    e->model = model;
    e->cfg = cfg;
    e->opt = o;
    int rc = cairn_thread_pool_create(o.n_threads, &e->tp);
    if (rc) {
        cairn_errf(err, err_len, "%s", "engine: cannot create the thread pool");
        goto fail;
    }
    /* The family's cache needs shape the K/V storage and the state handles. */
    e->layers = cairn_calloc((size_t)cfg->n_layers, sizeof(*e->layers));
    if (!e->layers) {
        rc = CAIRN_ENOMEM;
        cairn_errf(err, err_len, "%s", "engine: out of memory");
        goto fail;
    }
    rc = cairn_model_cache_layout(model, o.kv_dtype, e->layers, &e->state_bytes);
    if (rc) {
        if (err && err_len)
            snprintf(err, err_len, "engine: the %s family declares no usable cache layout (%s)",
                     cfg->family, cairn_strerror(rc));
        goto fail;
    }
    compute_backend_options_t bo = {0, e->tp, NULL};
    const char *backend = o.backend ? o.backend : "cpu";
    if ((rc = compute_backend_create(backend, &bo, &e->be, err, err_len)))
        goto fail;
    if (!e->be->ops->host_memory && o.kv_path != CAIRN_KV_PAGED) {
        rc = CAIRN_EUNSUPPORTED;
        if (err && err_len)
            snprintf(err, err_len, "engine: the %s backend runs the paged K/V path only", backend);
        goto fail;
    }
    if (!compute_supports(e->be, COMPUTE_OP_KV, o.kv_dtype)) {
        rc = CAIRN_EUNSUPPORTED;
        compute_backend_require(e->be, COMPUTE_OP_KV, o.kv_dtype, err, err_len);
        goto fail;
    }
    cairn_fwd_env_t env = {e->be, e->tp, o.math, o.kv_dtype, o.max_step_tokens, o.max_context};
    rc = model->family->fwd_create(model, &env, &e->fwd);
    if (rc) {
        cairn_errf(err, err_len,
                   rc == CAIRN_ENOMEM ? "engine: out of memory for activations"
                                      : "engine: the %s family cannot run this model on the %s backend (%s; "
                                        "the log names the operation)",
                   cfg->family, backend, cairn_strerror(rc));
        goto fail;
    }
    if (o.kv_path == CAIRN_KV_PAGED) {
        /* Recurrent checkpoints: a byte budget, the registry sized to let it bind. */
        uint64_t ckpt_bytes = (uint64_t)cairn_knob_int("CAIRN_STATE_CKPT_MIB", o.state_ckpt_mib != 0,
                                                       o.state_ckpt_mib > 0 ? o.state_ckpt_mib : 0,
                                                       256, 0, 1 << 20) << 20;
        void *sctx = NULL;
        const cairn_kv_storage_ops_t *stor = compute_kv_storage(e->be, &sctx);
        rc = kv_paged_create_ckpt(e->layers, cfg->n_layers, o.kv_dtype, o.block_tokens,
                                  (size_t)o.pool_mib, stor, sctx,
                                  seq_ckpts_registry_capacity(e->state_bytes, ckpt_bytes),
                                  seq_ckpts_registry_evicted, &e->ckpts, &e->paged, err, err_len);
        if (rc)
            goto fail;
        if (e->state_bytes &&
            (rc = seq_ckpts_create(kv_paged_cache_rw(e->paged), e->state_bytes, ckpt_bytes,
                                   &e->ckpts))) {
            cairn_errf(err, err_len, "%s", "engine: out of memory");
            goto fail;
        }
        /* The backend's numerics id (with its revision) enters the model fingerprint. */
        const char *numerics = compute_numerics_id(e->be, (cairn_math_t)o.math, o.kv_dtype);
        if ((rc = engine_cold_open(ck, &o, numerics, e->paged, e->layers, e->state_bytes,
                                   e->ckpts, &e->cold))) {
            cairn_errf(err, err_len, "%s", "engine: out of memory");
            goto fail;
        }
    }
    *out = e;
    return CAIRN_OK;
fail:
    cairn_engine_destroy(e);
    return rc;
}

void cairn_engine_destroy(cairn_engine_t *e)
{
    if (!e)
        return;
    while (e->seqs)
        cairn_seq_release(e->seqs);
    engine_cold_close(e->cold); /* after the releases above queued their blocks */
    seq_ckpts_t *ck = e->ckpts;
    e->ckpts = NULL; /* the cache's teardown must not reach a freed bank */
    seq_ckpts_destroy(ck);
    kv_paged_destroy(e->paged);
    if (e->fwd)
        e->model->family->fwd_destroy(e->fwd);
    compute_backend_destroy(e->be);
    cairn_free(e->layers);
    cairn_thread_pool_destroy(e->tp);
    cairn_free(e->rows);
    cairn_free(e->views);
    cairn_free(e->cuts);
    cairn_free(e->logits);
    cairn_free(e);
}

const cairn_engine_options_t *cairn_engine_options(const cairn_engine_t *e) { return &e->opt; }
const cairn_model_config_t *cairn_engine_config(const cairn_engine_t *e) { return e->cfg; }

void cairn_engine_counters(const cairn_engine_t *e, cairn_engine_counters_t *out)
{
    *out = e->counters;
    rstore_stats_t st;
    seq_ckpts_stats(e->ckpts, &st);
    out->ckpt_saves = st.saves;
    out->ckpt_restores = st.restores;
    out->ckpt_evictions = st.evictions + st.drops;
    out->ckpt_count = st.count;
    out->ckpt_bytes = st.bytes;
    out->ckpt_budget = st.budget;
    out->ckpt_save_seconds = (double)st.save_ns * 1e-9;
    out->ckpt_restore_seconds = (double)st.restore_ns * 1e-9;
}

int cairn_engine_kv_stats(const cairn_engine_t *e, cairn_kv_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!e->paged)
        return CAIRN_EUNSUPPORTED;
    cairn_kv_cache_stats(kv_paged_cache(e->paged), out);
    return CAIRN_OK;
}

int cairn_engine_device_memory(cairn_engine_t *e, uint64_t *free_bytes, uint64_t *total_bytes)
{
    return compute_memory_info(e->be, free_bytes, total_bytes);
}

void cairn_engine_cold_counters(const cairn_engine_t *e, cairn_engine_cold_counters_t *out)
{
    engine_cold_counters(e->cold, out);
}

void cairn_engine_cold_flush(cairn_engine_t *e) { engine_cold_flush(e->cold); }

bool cairn_engine_cold_poll(cairn_engine_t *e) { return e && engine_cold_poll(e->cold); }

void cairn_engine_cold_last_turn(const cairn_engine_t *e, cairn_engine_cold_turn_t *out)
{
    engine_cold_last_turn(e ? e->cold : NULL, out);
}

int cairn_engine_cold_exit_ms(const cairn_engine_t *e) { return e ? engine_cold_exit_ms(e->cold) : 0; }

int cairn_engine_cold_persist(cairn_engine_t *e, int deadline_ms, cairn_cold_persist_report_t *out)
{
    return engine_cold_persist(e ? e->cold : NULL, deadline_ms, true, out);
}

/* ---- Sequences ---------------------------------------------------------------------- */

static int check_tokens(const cairn_engine_t *e, const int32_t *tokens, int n)
{
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= e->cfg->vocab)
            return CAIRN_EINVAL;
    return CAIRN_OK;
}

static int seq_grow_tokens(cairn_seq_t *s, int need)
{
    return cairn_grow_array_int((void **)&s->tokens, &s->cap, need, sizeof(int32_t), 64);
}

/* An empty sequence linked into the engine. */
static int seq_new(cairn_engine_t *e, const char *cache_salt, cairn_seq_t **out)
{
    cairn_seq_t *s = cairn_calloc(1, sizeof(*s));
    if (!s)
        return CAIRN_ENOMEM;
    s->e = e;
    int rc = seq_state_init(&s->state, e->state_bytes);
    if (rc == CAIRN_OK) {
        if (e->opt.kv_path == CAIRN_KV_FLAT)
            rc = kv_flat_init(&s->flat, e->layers, e->cfg->n_layers, e->opt.kv_dtype);
        else
            rc = kv_paged_seq_create(e->paged, cache_salt, &s->paged);
    }
    if (rc) {
        seq_state_fini(&s->state);
        cairn_free(s);
        return rc;
    }
    s->next = e->seqs;
    if (e->seqs)
        e->seqs->prev = s;
    e->seqs = s;
    *out = s;
    return CAIRN_OK;
}

/*
 * Appends tokens [n] to s: grows the token list, then (paged) appends to the core, which
 * reserves the slots and, on the first append, attaches the cached prefix.
 */
static int seq_append(cairn_seq_t *s, const int32_t *tokens, int n)
{
    cairn_engine_t *e = s->e;
    if (n < 0 || (n > 0 && !tokens) || check_tokens(e, tokens, n))
        return CAIRN_EINVAL;
    if (s->len + n > e->opt.max_context)
        return CAIRN_ERANGE;
    int rc = seq_grow_tokens(s, s->len + n);
    if (rc || n == 0)
        return rc;
    if (s->paged) {
        int hit = 0;
        rc = kv_paged_seq_append(s->paged, tokens, n, &hit);
        if (rc)
            return rc;
        /* A prefix of a stateful model is served only with a checkpoint at exactly its
         * length (the KV core checks the registry, whose keys the bank always holds). */
        if (hit > 0 && e->ckpts) {
            rc = seq_ckpt_restore(e->ckpts, kv_paged_seq_core(s->paged), (size_t)hit, &s->state);
            CAIRN_ASSERT(rc == CAIRN_OK);
        }
        s->n_past += hit;
        e->counters.tokens_reused += (uint64_t)hit;
    }
    /* A prompt (the first tokens, or a new turn of more than one token) checkpoints the
     * end of its last full block. */
    if (s->len == 0 || n > 1)
        s->prompt_len = s->len + n;
    memcpy(s->tokens + s->len, tokens, (size_t)n * sizeof(int32_t));
    s->len += n;
    return CAIRN_OK;
}

/* Whether a begin of these tokens consults the cold tier. */
static bool cold_applies(const cairn_engine_t *e, const cairn_seq_t *s, const int32_t *tokens, int n)
{
    return e->cold && s->paged && n > 0 && check_tokens(e, tokens, n) == CAIRN_OK && n <= e->opt.max_context;
}

/* The rest of a begin once the cold tier restored what it could: the KV core's admission
 * (hot and restored blocks alike), the restored-token accounting. On error s is released. */
static int begin_admit(cairn_seq_t *s, const int32_t *tokens, int n_tokens, int hot, int restored_objects,
                       int *n_cached)
{
    cairn_engine_t *e = s->e;
    int rc = seq_append(s, tokens, n_tokens);
    if (rc) {
        s->cold_skip = true; /* nothing was computed: nothing to capture */
        cairn_seq_release(s);
        return rc;
    }
    if (restored_objects > 0 && s->n_past > hot) {
        s->restored = s->n_past - hot;
        e->counters.tokens_reused -= (uint64_t)s->restored; /* tokens_reused is the hot tier */
        engine_cold_note_restored(e->cold, s->restored);
    }
    e->counters.seqs_begun++;
    if (n_cached)
        *n_cached = s->n_past - s->restored;
    return CAIRN_OK;
}

int cairn_seq_begin(cairn_engine_t *e, const char *cache_salt, const int32_t *tokens,
                    int n_tokens, cairn_seq_t **out, int *n_cached)
{
    *out = NULL;
    if (n_cached)
        *n_cached = 0;
    cairn_seq_t *s = NULL;
    int rc = seq_new(e, cache_salt, &s);
    if (rc)
        return rc;
    (void)engine_cold_poll(e->cold); /* unpinned copies may be evicted for this prompt */
    /* Cold tier: blocks past the hot prefix are loaded into the pool as cached blocks, so
     * the core's admission below attaches them like hot ones. */
    int hot = 0, restored_blocks = 0;
    s->cold_miss = -1;
    if (cold_applies(e, s, tokens, n_tokens))
        engine_cold_restore(e->cold, s->paged, tokens, n_tokens, &hot, &restored_blocks, &s->cold_miss);
    rc = begin_admit(s, tokens, n_tokens, hot, restored_blocks, n_cached);
    if (rc == CAIRN_OK)
        *out = s;
    return rc;
}

int cairn_seq_begin_async(cairn_engine_t *e, const char *cache_salt, const int32_t *tokens, int n_tokens,
                          cairn_seq_t **out)
{
    *out = NULL;
    if (!e->cold || !engine_cold_async(e->cold))
        return cairn_seq_begin(e, cache_salt, tokens, n_tokens, out, NULL);
    cairn_seq_t *s = NULL;
    int rc = seq_new(e, cache_salt, &s);
    if (rc)
        return rc;
    (void)engine_cold_poll(e->cold); /* unpinned copies may be evicted for this prompt */
    int hot = 0;
    s->cold_miss = -1;
    if (cold_applies(e, s, tokens, n_tokens)) {
        s->prompt = cairn_malloc((size_t)n_tokens * sizeof(*s->prompt));
        if (!s->prompt) {
            s->cold_skip = true;
            cairn_seq_release(s);
            return CAIRN_ENOMEM;
        }
        memcpy(s->prompt, tokens, (size_t)n_tokens * sizeof(*tokens));
        s->n_prompt = n_tokens;
        engine_cold_restore_async(e->cold, s->paged, tokens, n_tokens, &hot, &s->restore);
        s->hot_begin = hot;
        if (s->restore) {
            *out = s; /* restoring: cairn_seq_begin_finish admits it */
            return CAIRN_OK;
        }
        cairn_free(s->prompt);
        s->prompt = NULL;
    }
    rc = begin_admit(s, tokens, n_tokens, hot, 0, NULL);
    if (rc == CAIRN_OK)
        *out = s;
    return rc;
}

bool cairn_seq_restoring(const cairn_seq_t *s)
{
    return s->restore && !engine_cold_restore_ready(s->e->cold, s->restore);
}

int cairn_seq_begin_finish(cairn_seq_t *s, int *n_cached)
{
    if (!s->restore) { /* admitted already */
        if (n_cached)
            *n_cached = s->n_past - s->restored;
        return CAIRN_OK;
    }
    if (n_cached)
        *n_cached = 0;
    int restored_objects = 0;
    engine_cold_restore_finish(s->e->cold, s->restore, &restored_objects, &s->cold_miss);
    s->restore = NULL;
    int32_t *prompt = s->prompt;
    s->prompt = NULL;
    int rc = begin_admit(s, prompt, s->n_prompt, s->hot_begin, restored_objects, n_cached);
    cairn_free(prompt);
    return rc;
}

int cairn_seq_feed(cairn_seq_t *s, const int32_t *tokens, int n) { return seq_append(s, tokens, n); }

int cairn_seq_n_past(const cairn_seq_t *s) { return s->n_past; }
int cairn_seq_restored_tokens(const cairn_seq_t *s) { return s->restored; }
const char *cairn_seq_cold_reason(const cairn_seq_t *s)
{
    return s->cold_miss < 0 ? NULL : cairn_tier_miss_name((cairn_tier_miss_t)s->cold_miss);
}
int cairn_seq_n_pending(const cairn_seq_t *s) { return s->len - s->n_past; }
const int32_t *cairn_seq_tokens(const cairn_seq_t *s) { return s->tokens; }

/*
 * A truncation the paged path's sliding groups cannot do in place (CAIRN_ERANGE from the
 * core: blocks the window of position n needs were already released): the sequence begins
 * again over its first n tokens, attaching what the prefix cache still holds, and the rest
 * becomes pending, recomputed by the next steps with the same bits as before. The flat
 * path keeps every position and truncates in place.
 */
static int truncate_restart(cairn_seq_t *s, int n)
{
    int hit = 0, rc = kv_paged_seq_restart(s->paged, s->tokens, n, &hit);
    if (rc)
        return rc;
    s->n_past = hit;
    s->len = n;
    s->e->counters.tokens_reused += (uint64_t)hit;
    return CAIRN_OK;
}

/*
 * Rewinds a stateful sequence to n < n_past tokens: its state can only be had at a
 * checkpoint, so it restarts from the deepest checkpoint b <= n of its chain (or from
 * the empty state) and tokens [b, n) become pending again. On the paged path the core
 * sequence is cut to b and [b, n) re-appended, so the recomputation writes fresh blocks
 * instead of blocks other sequences may share.
 */
static int truncate_stateful(cairn_seq_t *s, int n)
{
    cairn_engine_t *e = s->e;
    int b = 0, rc = CAIRN_OK;
    if (s->paged && e->ckpts)
        b = (int)seq_ckpt_deepest(e->ckpts, kv_paged_seq_core(s->paged), (size_t)n);
    if (s->paged && (rc = kv_paged_seq_truncate(s->paged, b)))
        return rc; /* nothing changed */
    if (b > 0) {
        rc = seq_ckpt_restore(e->ckpts, kv_paged_seq_core(s->paged), (size_t)b, &s->state);
        CAIRN_ASSERT(rc == CAIRN_OK); /* seq_ckpt_deepest found it */
    } else {
        seq_state_reset(&s->state);
    }
    s->n_past = b;
    s->len = b;
    if (s->paged && n > b) {
        int hit = 0;
        rc = kv_paged_seq_append(s->paged, s->tokens + b, n - b, &hit);
        CAIRN_ASSERT(hit == 0); /* the core sequence exists: no lookup */
        if (rc)
            return rc; /* the pool cannot hold them again: the sequence keeps b tokens */
    }
    s->len = n;
    return CAIRN_OK;
}

int cairn_seq_truncate(cairn_seq_t *s, int n)
{
    if (n < 0 || n > s->len)
        return CAIRN_EINVAL;
    if (n < s->n_past && s->state.bytes)
        return truncate_stateful(s, n);
    if (s->paged) {
        int rc = kv_paged_seq_truncate(s->paged, n);
        if (rc == CAIRN_ERANGE)
            return truncate_restart(s, n);
        if (rc)
            return rc;
    }
    if (n < s->n_past)
        s->n_past = n;
    s->len = n;
    return CAIRN_OK;
}

int cairn_seq_end_turn(cairn_seq_t *s)
{
    if (s->paged) {
        int rc = kv_paged_seq_end_turn(s->paged);
        if (rc)
            return rc;
        engine_cold_capture(s->e->cold, s->paged, s->prompt_len, "end_turn");
    }
    s->len = s->n_past;
    return CAIRN_OK;
}

int cairn_seq_retain(cairn_seq_t *s)
{
    return s->paged ? kv_paged_seq_retain(s->paged) : CAIRN_OK;
}

int cairn_seq_fork(cairn_seq_t *s, cairn_seq_t **out)
{
    *out = NULL;
    cairn_engine_t *e = s->e;
    if (s->len != s->n_past)
        return CAIRN_ESTATE;
    cairn_seq_t *c = NULL;
    int rc = seq_new(e, NULL, &c);
    if (rc)
        return rc;
    rc = seq_grow_tokens(c, s->len);
    if (rc)
        goto fail;
    if (s->len)
        memcpy(c->tokens, s->tokens, (size_t)s->len * sizeof(int32_t));
    c->len = s->len;
    if (s->paged) {
        kv_paged_seq_destroy(c->paged);
        c->paged = NULL;
        rc = kv_paged_seq_fork(s->paged, &c->paged);
    } else
        rc = kv_flat_copy(&c->flat, &s->flat, s->n_past);
    if (rc)
        goto fail;
    seq_state_copy(&c->state, &s->state);
    c->n_past = s->n_past;
    c->prompt_len = s->prompt_len;
    *out = c;
    return CAIRN_OK;
fail:
    cairn_seq_release(c);
    return rc;
}

void cairn_seq_release(cairn_seq_t *s)
{
    if (!s)
        return;
    cairn_engine_t *e = s->e;
    if (s->restore) { /* a restore in flight: wait for its reads, install, then release */
        int objects = 0, miss = -1;
        engine_cold_restore_finish(e->cold, s->restore, &objects, &miss);
        s->restore = NULL;
        s->cold_skip = true; /* nothing was computed */
    }
    cairn_free(s->prompt);
    if (s->prev)
        s->prev->next = s->next;
    else
        e->seqs = s->next;
    if (s->next)
        s->next->prev = s->prev;
    if (s->paged) {
        if (!s->cold_skip)
            engine_cold_capture(e->cold, s->paged, s->prompt_len, "release");
        kv_paged_seq_destroy(s->paged);
    } else
        kv_flat_fini(&s->flat);
    seq_state_fini(&s->state);
    cairn_free(s->tokens);
    cairn_free(s);
}

/* ---- Steps -------------------------------------------------------------------------- */

/*
 * Saves s's state, which stands exactly at b computed tokens, as a checkpoint. The core
 * sequence is committed to b first (a checkpoint needs the boundary's block hashed and
 * computed). A failure costs only the checkpoint.
 */
static void step_checkpoint(cairn_engine_t *e, cairn_seq_t *s, int b)
{
    int rc = kv_paged_seq_commit(s->paged, b);
    if (rc == CAIRN_OK)
        rc = seq_ckpt_save(e->ckpts, kv_paged_seq_core_rw(s->paged), (size_t)b, &s->state);
    if (rc)
        cairn_log(CAIRN_LOG_WARN, "engine: recurrent checkpoint at %d tokens failed (%s)", b,
                  cairn_strerror(rc));
}

int cairn_engine_step(cairn_engine_t *e, const cairn_batch_item_t *items, int n_items,
                      const float **logits, int *n_rows)
{
    double t0 = cairn_now_seconds();
    int rc = CAIRN_OK, n_tok = 0, n_out = 0, i = 0;
    *logits = NULL;
    *n_rows = 0;
    if (n_items < 1 || !items)
        return CAIRN_EINVAL;
    (void)engine_cold_poll(e->cold); /* copied blocks back, the next ones out: never waits */

    /* Validate: each sequence of this engine at most once, with enough pending tokens. */
    for (i = 0; i < n_items; i++) {
        cairn_seq_t *s = items[i].seq;
        int pending = s ? s->len - s->n_past : 0;
        int n = s && items[i].n_tokens == 0 ? pending : items[i].n_tokens;
        if (!s || s->e != e || s->in_step || n < 1 || n > pending ||
            (unsigned)items[i].logits > CAIRN_LOGITS_ALL) {
            rc = CAIRN_EINVAL;
            goto done;
        }
        s->in_step = true;
        n_tok += n;
        n_out += items[i].logits == CAIRN_LOGITS_ALL ? n : items[i].logits == CAIRN_LOGITS_LAST;
    }
    if ((rc = cairn_grow_array_int((void **)&e->rows, &e->rows_cap, n_tok, sizeof(cairn_fwd_row_t), 16)) ||
        (rc = cairn_grow_array_int((void **)&e->views, &e->views_cap, n_items, sizeof(cairn_fwd_seq_t), 16)) ||
        (rc = cairn_grow_array_int((void **)&e->logits, &e->logits_cap, n_out, (size_t)e->cfg->vocab * sizeof(float), 16)))
        goto done;

    /* Storage for the new positions, then the row list in item order. */
    int r = 0, o = 0;
    for (i = 0; i < n_items; i++) {
        cairn_seq_t *s = items[i].seq;
        int n = items[i].n_tokens ? items[i].n_tokens : s->len - s->n_past;
        if (s->paged) {
            /* Slots were reserved when the tokens were fed. */
            e->views[i] = (cairn_fwd_seq_t){{kv_paged_rows, s->paged}, kv_paged_seq_core(s->paged),
                                            s->state.data, s->n_past};
        } else {
            rc = kv_flat_reserve(&s->flat, s->n_past + n);
            e->views[i] = (cairn_fwd_seq_t){{kv_flat_rows, &s->flat}, NULL, s->state.data,
                                            s->n_past};
        }
        if (rc)
            goto done;
        for (int t = 0; t < n; t++, r++) {
            bool want = items[i].logits == CAIRN_LOGITS_ALL ||
                        (items[i].logits == CAIRN_LOGITS_LAST && t == n - 1);
            e->rows[r] = (cairn_fwd_row_t){i, s->n_past + t, s->tokens[s->n_past + t],
                                           want ? o++ : -1};
        }
    }

    /* Recurrent checkpoints: the block boundaries each sequence passes in this step
     * where it takes one (seq_state.h). A sub-batch ends at each, so the state handle
     * holds exactly the state at the boundary when it is saved; how rows are cut into
     * sub-batches changes no bit. */
    int n_cuts = 0;
    if (e->ckpts) {
        for (i = 0, r = 0; i < n_items; i++) {
            cairn_seq_t *s = items[i].seq;
            int n = items[i].n_tokens ? items[i].n_tokens : s->len - s->n_past;
            for (int b = s->n_past; (b = seq_ckpt_next(b, s->n_past + n, s->prompt_len,
                                                        e->opt.block_tokens)) > 0;) {
                if ((rc = cairn_grow_array_int((void **)&e->cuts, &e->cuts_cap, n_cuts + 1, sizeof(step_cut_t), 16)))
                    goto done;
                e->cuts[n_cuts++] = (step_cut_t){r + (b - s->n_past), i, b};
            }
            r += n;
        }
    }

    /* The forward pass, in sub-batches of at most max_step_tokens rows, also ending at
     * every checkpoint cut. A sequence's rows may straddle sub-batches: its view's n_past
     * is where its first row of the sub-batch stands (rows of one sequence are contiguous
     * and in order). */
    for (int start = 0, c = 0; start < n_tok;) {
        int end = n_tok - start < e->opt.max_step_tokens ? n_tok : start + e->opt.max_step_tokens;
        if (c < n_cuts && e->cuts[c].end < end)
            end = e->cuts[c].end;
        int len = end - start;
        for (int j = start; j < end; j++)
            if (j == start || e->rows[j].seq != e->rows[j - 1].seq)
                e->views[e->rows[j].seq].n_past = e->rows[j].pos;
        cairn_fwd_batch_t b = {e->rows + start, len, e->views, n_items, e->logits};
        if ((rc = e->model->family->fwd_step(e->fwd, &b)) || (rc = compute_sync(e->be))) {
            cairn_log(CAIRN_LOG_ERROR, "engine: the %s forward step failed (%s)", e->cfg->family,
                      cairn_strerror(rc));
            goto done;
        }
        for (; c < n_cuts && e->cuts[c].end == end; c++)
            step_checkpoint(e, items[e->cuts[c].item].seq, e->cuts[c].b);
        start = end;
    }

    for (i = 0; i < n_items; i++) {
        cairn_seq_t *s = items[i].seq;
        s->n_past += items[i].n_tokens ? items[i].n_tokens : s->len - s->n_past;
        /* Publication is absolute (tokens [0, n_past)), so a failure here is retried
         * by the next commit; the K/V are stored either way. */
        if (s->paged && (rc = kv_paged_seq_commit(s->paged, s->n_past)))
            cairn_log(CAIRN_LOG_WARN, "engine: publishing K/V blocks failed (%s)",
                      cairn_strerror(rc));
    }
    *logits = e->logits;
    *n_rows = n_out;
    e->counters.steps++;
    e->counters.tokens_computed += (uint64_t)n_tok;
    e->counters.logits_rows += (uint64_t)n_out;
    e->counters.forward_seconds += cairn_now_seconds() - t0;
    rc = CAIRN_OK;
done:
    for (int j = 0; j < n_items; j++)
        if (items[j].seq)
            items[j].seq->in_step = false;
    return rc;
}
