/*
 * kv_paged.c — the engine's paged K/V path on the KV cache core (include/cairn/kv_cache.h).
 *
 * Model: the engine's token list and the core's history are kept equal: every token the
 * engine is fed is appended to the core (which reserves its slot), every step commits
 * what was computed (publishing full blocks), and truncate / end_turn / fork map 1:1.
 * The core sequence is begun lazily at the first append, so prefix lookup sees the whole
 * first batch of tokens (the prompt).
 *
 * Invariant: a row pointer handed out by kv_paged_rows stays valid for the step (the
 * pool never moves; no call changing the table is made during a step).
 * Thread-safety: engine thread only; kv_paged_rows is read-only and safe from the
 * attention tasks.
 */
#include <stdio.h>
#include <string.h>

#include "engine/kv_paged.h"

struct kv_paged {
    cairn_kv_cache_t *cache;
    const cairn_kv_storage_ops_t *storage;
    void *storage_ctx;
    uint32_t block_size;
    int n_layers;
    cairn_kv_layer_view_t *views; /* [n_layers] */
};

struct kv_paged_seq {
    kv_paged_t *kp;
    cairn_kv_hash_t domain;
    cairn_kv_seq_t *seq;          /* NULL until the first append */
};

int kv_paged_create(const cairn_layer_cache_t *layers, int n_layers, cairn_dtype_t dtype,
                    int block_tokens, size_t budget_mib, const cairn_kv_storage_ops_t *storage,
                    void *storage_ctx, kv_paged_t **out, char *err, size_t err_len)
{
    return kv_paged_create_ckpt(layers, n_layers, dtype, block_tokens, budget_mib, storage,
                                storage_ctx, 0, NULL, NULL, out, err, err_len);
}

int kv_paged_create_ckpt(const cairn_layer_cache_t *layers, int n_layers, cairn_dtype_t dtype,
                         int block_tokens, size_t budget_mib, const cairn_kv_storage_ops_t *storage,
                         void *storage_ctx, uint32_t max_checkpoints,
                         cairn_kv_checkpoint_evict_fn on_evict, void *evict_user,
                         kv_paged_t **out, char *err, size_t err_len)
{
    *out = NULL;
    int rc = CAIRN_ENOMEM;
    cairn_kv_layer_spec_t *specs = NULL;
    kv_paged_t *kp = cairn_calloc(1, sizeof(*kp));
    specs = cairn_calloc((size_t)n_layers, sizeof(*specs));
    if (!kp || !specs)
        goto fail;
    kp->n_layers = n_layers;
    kp->views = cairn_calloc((size_t)n_layers, sizeof(*kp->views));
    if (!kp->views)
        goto fail;
    for (int l = 0; l < n_layers; l++)
        specs[l] = layers[l].kv;
    cairn_kv_config_t kc = {0};
    kc.n_layers = (uint32_t)n_layers;
    kc.layers = specs;
    kc.dtype = dtype;
    kc.block_size = (uint32_t)block_tokens;
    kc.memory_mib = budget_mib;
    kc.initial_mib = budget_mib;
    kc.storage = storage;
    kc.storage_ctx = storage_ctx;
    kp->storage = storage ? storage : cairn_kv_storage_host();
    kp->storage_ctx = storage_ctx;
    kc.max_checkpoints = max_checkpoints;
    kc.on_checkpoint_evict = on_evict;
    kc.checkpoint_user = evict_user;
    rc = cairn_kv_cache_create(&kc, &kp->cache);
    if (rc) {
        if (err && err_len)
            snprintf(err, err_len, "engine: cannot create the KV cache (%s)", cairn_strerror(rc));
        goto fail_quiet;
    }
    kp->block_size = cairn_kv_cache_block_size(kp->cache);
    /* RECURRENT layers have no pages and no view (their state is the sequence's). */
    for (int l = 0; l < n_layers; l++) {
        if (specs[l].kind == CAIRN_KV_LAYER_RECURRENT)
            continue;
        rc = cairn_kv_layer_view(kp->cache, (uint32_t)l, &kp->views[l]);
        if (rc)
            goto fail;
    }
    cairn_free(specs);
    *out = kp;
    return CAIRN_OK;
fail:
    if (err && err_len)
        snprintf(err, err_len, "engine: cannot set up the paged K/V path (%s)", cairn_strerror(rc));
fail_quiet:
    cairn_free(specs);
    kv_paged_destroy(kp);
    return rc;
}

void kv_paged_destroy(kv_paged_t *kp)
{
    if (!kp)
        return;
    cairn_kv_cache_destroy(kp->cache);
    cairn_free(kp->views);
    cairn_free(kp);
}

const cairn_kv_cache_t *kv_paged_cache(const kv_paged_t *kp) { return kp->cache; }

const cairn_kv_storage_ops_t *kv_paged_storage(const kv_paged_t *kp, void **ctx)
{
    *ctx = kp->storage_ctx;
    return kp->storage;
}
cairn_kv_cache_t *kv_paged_cache_rw(kv_paged_t *kp) { return kp->cache; }

int kv_paged_seq_create(kv_paged_t *kp, const char *cache_salt, kv_paged_seq_t **out)
{
    *out = NULL;
    kv_paged_seq_t *s = cairn_calloc(1, sizeof(*s));
    if (!s)
        return CAIRN_ENOMEM;
    s->kp = kp;
    int rc = cairn_kv_domain_from_salt(kp->cache, cache_salt, cache_salt ? strlen(cache_salt) : 0,
                                       &s->domain);
    if (rc) {
        cairn_free(s);
        return rc;
    }
    *out = s;
    return CAIRN_OK;
}

void kv_paged_seq_destroy(kv_paged_seq_t *s)
{
    if (!s)
        return;
    cairn_kv_seq_release(s->seq, NULL);
    cairn_free(s);
}

const cairn_kv_hash_t *kv_paged_seq_domain(const kv_paged_seq_t *s) { return &s->domain; }
const cairn_kv_seq_t *kv_paged_seq_core(const kv_paged_seq_t *s) { return s->seq; }
cairn_kv_seq_t *kv_paged_seq_core_rw(kv_paged_seq_t *s) { return s->seq; }

int kv_paged_seq_append(kv_paged_seq_t *s, const int32_t *tokens, int n, int *n_cached)
{
    if (n_cached)
        *n_cached = 0;
    if (n <= 0)
        return CAIRN_OK;
    if (!s->seq) {
        size_t hit = 0;
        int rc = cairn_kv_seq_begin(s->kp->cache, &s->domain, NULL, 0, tokens, (size_t)n,
                                    &s->seq, &hit);
        if (rc)
            return rc;
        if (n_cached)
            *n_cached = (int)hit;
        return CAIRN_OK;
    }
    return cairn_kv_seq_append(s->seq, tokens, (size_t)n);
}

int kv_paged_seq_commit(kv_paged_seq_t *s, int n_computed)
{
    return cairn_kv_seq_commit(s->seq, (size_t)n_computed);
}

int kv_paged_seq_end_turn(kv_paged_seq_t *s)
{
    return s->seq ? cairn_kv_seq_end_turn(s->seq, NULL) : CAIRN_OK;
}

int kv_paged_seq_truncate(kv_paged_seq_t *s, int n)
{
    if (!s->seq)
        return n == 0 ? CAIRN_OK : CAIRN_EINVAL;
    size_t have = cairn_kv_seq_n_tokens(s->seq);
    if ((size_t)n > have)
        return CAIRN_EINVAL;
    return cairn_kv_seq_truncate(s->seq, have - (size_t)n);
}

int kv_paged_seq_restart(kv_paged_seq_t *s, const int32_t *tokens, int n, int *n_cached)
{
    *n_cached = 0;
    cairn_kv_seq_t *fresh = NULL;
    size_t hit = 0;
    if (n > 0) {
        int rc = cairn_kv_seq_begin(s->kp->cache, &s->domain, NULL, 0, tokens, (size_t)n, &fresh,
                                    &hit);
        if (rc)
            return rc;
    }
    cairn_kv_seq_release(s->seq, NULL);
    s->seq = fresh;
    *n_cached = (int)hit;
    return CAIRN_OK;
}

int kv_paged_seq_fork(kv_paged_seq_t *s, kv_paged_seq_t **out)
{
    *out = NULL;
    kv_paged_seq_t *c = cairn_calloc(1, sizeof(*c));
    if (!c)
        return CAIRN_ENOMEM;
    c->kp = s->kp;
    c->domain = s->domain;
    if (s->seq) {
        int rc = cairn_kv_seq_fork(s->seq, &c->seq);
        if (rc) {
            cairn_free(c);
            return rc;
        }
    }
    *out = c;
    return CAIRN_OK;
}

int kv_paged_rows(void *ctx, int layer, int pos, void **k, void **v)
{
    const kv_paged_seq_t *s = ctx;
    const kv_paged_t *kp = s->kp;
    size_t n_blocks = 0;
    const uint32_t *table = cairn_kv_seq_block_table(s->seq, (uint32_t)layer, &n_blocks);
    uint32_t bi = (uint32_t)pos / kp->block_size, slot = (uint32_t)pos % kp->block_size;
    if (pos < 0 || bi >= n_blocks)
        return 0;
    if (table[bi] == CAIRN_KV_NULL_BLOCK) { /* released by a sliding window: attention skips it */
        *k = *v = NULL;
        return (int)(kp->block_size - slot);
    }
    const cairn_kv_layer_view_t *view = &kp->views[layer];
    *k = cairn_kv_view_k(view, table[bi], slot);
    *v = cairn_kv_view_v(view, table[bi], slot);
    return (int)(kp->block_size - slot);
}
