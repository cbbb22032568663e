/*
 * seq_state.c — per-sequence recurrent state handles and their checkpoints
 * (engine/seq_state.h).
 *
 * The bank couples a recurrent_store (the bytes, LRU under a byte budget) with the KV
 * core's checkpoint registry (the keys that let the core serve a prefix): every key is in
 * both or in neither, because each side's eviction drops the key from the other.
 *
 * Thread-safety: engine thread only.
 */
#include <string.h>

#include "engine/seq_state.h"

#define ALIGN 64

int seq_state_init(seq_state_t *st, size_t bytes)
{
    memset(st, 0, sizeof(*st));
    if (bytes == 0)
        return CAIRN_OK;
    st->raw = cairn_calloc(1, bytes + ALIGN - 1);
    if (!st->raw)
        return CAIRN_ENOMEM;
    st->data = (void *)(((uintptr_t)st->raw + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1));
    st->bytes = bytes;
    return CAIRN_OK;
}

void seq_state_fini(seq_state_t *st)
{
    cairn_free(st->raw);
    memset(st, 0, sizeof(*st));
}

void seq_state_copy(seq_state_t *dst, const seq_state_t *src)
{
    CAIRN_ASSERT(dst->bytes == src->bytes);
    if (src->bytes)
        memcpy(dst->data, src->data, src->bytes);
}

void seq_state_reset(seq_state_t *st)
{
    if (st->bytes)
        memset(st->data, 0, st->bytes);
}

/* ---- checkpoints ------------------------------------------------------------------ */

struct seq_ckpts {
    cairn_kv_cache_t *cache;
    rstore_t *store;
};

/* The store evicted a key for its budget: the registry must stop serving it. */
static void store_evicted(void *user, const cairn_kv_hash_t *key)
{
    seq_ckpts_t *ck = user;
    cairn_kv_cache_checkpoint_drop(ck->cache, key);
}

void seq_ckpts_registry_evicted(void *user, const cairn_kv_hash_t *key)
{
    seq_ckpts_t *ck = *(seq_ckpts_t **)user;
    if (ck)
        rstore_drop(ck->store, key);
}

uint32_t seq_ckpts_registry_capacity(size_t state_bytes, uint64_t budget_bytes)
{
    uint64_t n = state_bytes ? budget_bytes / state_bytes + 1 : 1;
    return n > (1u << 16) ? 1u << 16 : (uint32_t)n;
}

int seq_ckpts_create(cairn_kv_cache_t *cache, size_t state_bytes, uint64_t budget_bytes,
                     seq_ckpts_t **out)
{
    *out = NULL;
    if (!cache || state_bytes == 0)
        return CAIRN_EINVAL;
    seq_ckpts_t *ck = cairn_calloc(1, sizeof(*ck));
    if (!ck)
        return CAIRN_ENOMEM;
    ck->cache = cache;
    int rc = rstore_create(state_bytes, budget_bytes, store_evicted, ck, &ck->store);
    if (rc) {
        cairn_free(ck);
        return rc;
    }
    *out = ck;
    return CAIRN_OK;
}

void seq_ckpts_destroy(seq_ckpts_t *ck)
{
    if (!ck)
        return;
    rstore_destroy(ck->store);
    cairn_free(ck);
}

int seq_ckpt_next(int from, int to, int prompt_len, int block_size)
{
    int best = 0;
    /* The grid block_size * 4^k: the first point above from. */
    for (int64_t g = block_size; g <= to; g *= 4)
        if (g > from) {
            best = (int)g;
            break;
        }
    /* The prompt's last full block, and the one before it when the prompt ends on a
     * boundary (the same prompt again is served at most n - 1 tokens). */
    const int ends[2] = {prompt_len / block_size * block_size,
                         prompt_len > 0 ? (prompt_len - 1) / block_size * block_size : 0};
    for (int i = 0; i < 2; i++)
        if (ends[i] > from && ends[i] <= to && (best == 0 || ends[i] < best))
            best = ends[i];
    return best;
}

int seq_ckpt_save(seq_ckpts_t *ck, cairn_kv_seq_t *seq, size_t n, const seq_state_t *st)
{
    cairn_kv_hash_t key;
    int rc = cairn_kv_seq_boundary_key(seq, n, &key);
    if (rc)
        return rc;
    if (n > cairn_kv_seq_n_computed(seq))
        return CAIRN_ERANGE;
    /* Bytes first: the registry may name only stored states. */
    rc = rstore_put(ck->store, &key, st->data);
    if (rc == CAIRN_ERANGE)
        return CAIRN_OK; /* the budget holds no state: checkpoints are off */
    if (rc)
        return rc;
    rc = cairn_kv_seq_checkpoint(seq, n, NULL);
    if (rc)
        rstore_drop(ck->store, &key);
    return rc;
}

int seq_ckpt_restore(seq_ckpts_t *ck, const cairn_kv_seq_t *seq, size_t n, seq_state_t *st)
{
    cairn_kv_hash_t key;
    int rc = cairn_kv_seq_boundary_key(seq, n, &key);
    if (rc)
        return rc == CAIRN_ERANGE ? CAIRN_ENOENT : rc;
    return rstore_get(ck->store, &key, st->data);
}

size_t seq_ckpt_deepest(const seq_ckpts_t *ck, const cairn_kv_seq_t *seq, size_t n)
{
    const size_t bs = cairn_kv_cache_block_size(ck->cache);
    for (size_t b = n / bs * bs; b >= bs; b -= bs) {
        cairn_kv_hash_t key;
        if (cairn_kv_seq_boundary_key(seq, b, &key) == CAIRN_OK && rstore_has(ck->store, &key))
            return b;
    }
    return 0;
}

bool seq_ckpt_has(const seq_ckpts_t *ck, const cairn_kv_hash_t *key)
{
    return ck && rstore_has(ck->store, key);
}

const void *seq_ckpt_pin(seq_ckpts_t *ck, const cairn_kv_hash_t *key)
{
    return ck ? rstore_pin(ck->store, key) : NULL;
}

void seq_ckpt_unpin(seq_ckpts_t *ck, const void *bytes)
{
    if (ck)
        rstore_unpin(ck->store, bytes);
}

int seq_ckpt_import(seq_ckpts_t *ck, const cairn_kv_hash_t *key, void *bytes)
{
    if (!ck) {
        rstore_buf_free(bytes);
        return CAIRN_EINVAL;
    }
    /* Bytes first: the registry may name only stored states. */
    int rc = rstore_adopt(ck->store, key, bytes);
    if (rc)
        return rc;
    rc = cairn_kv_cache_checkpoint_add(ck->cache, key);
    if (rc)
        rstore_drop(ck->store, key);
    return rc;
}

void seq_ckpts_stats(const seq_ckpts_t *ck, rstore_stats_t *out)
{
    if (!ck) {
        memset(out, 0, sizeof(*out));
        return;
    }
    rstore_stats(ck->store, out);
}
