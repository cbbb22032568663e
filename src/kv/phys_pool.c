/*
 * phys_pool.c — the physical K/V bytes, block-major.
 *
 * Block b occupies bytes [b * block_bytes, (b + 1) * block_bytes) of one range reserved
 * once for max_blocks; the first n_blocks blocks are committed (rounded up to the
 * backend's granularity). Growing commits more of the same range: no block moves, no byte
 * is copied, and every pointer handed out stays valid. Layout inside a block is the
 * cache group's business (cache_group.c). Thread-safety: one cache, one thread.
 */
#include "kv/kv_internal.h"

#include <string.h>

static size_t round_up(size_t n, size_t g)
{
    return (n + g - 1) / g * g;
}

int kv_phys_pool_init(kv_phys_pool_t *pp, const cairn_kv_storage_ops_t *ops, void *ctx,
                      size_t block_bytes, uint32_t max_blocks, uint32_t initial_blocks)
{
    memset(pp, 0, sizeof *pp);
    if (!ops || !ops->reserve || !ops->commit || !ops->copy || !ops->release || !ops->granularity)
        return CAIRN_EINVAL;
    if (initial_blocks > max_blocks || block_bytes == 0)
        return CAIRN_EINVAL;
    pp->ops = ops;
    pp->ctx = ctx;
    pp->block_bytes = block_bytes;
    pp->gran = ops->granularity(ctx);
    if (pp->gran == 0 || (pp->gran & (pp->gran - 1)))
        return CAIRN_EINVAL;
    pp->max_blocks = max_blocks;
    pp->reserved_bytes = round_up((size_t)max_blocks * block_bytes, pp->gran);
    int rc = ops->reserve(ctx, pp->reserved_bytes, &pp->base);
    if (rc) {
        pp->base = NULL;
        return rc;
    }
    rc = kv_phys_pool_grow(pp, initial_blocks);
    if (rc) {
        kv_phys_pool_fini(pp);
        return rc;
    }
    return CAIRN_OK;
}

void kv_phys_pool_fini(kv_phys_pool_t *pp)
{
    if (pp->base)
        pp->ops->release(pp->ctx, pp->base, pp->reserved_bytes);
    memset(pp, 0, sizeof *pp);
}

int kv_phys_pool_grow(kv_phys_pool_t *pp, uint32_t new_blocks)
{
    if (new_blocks > pp->max_blocks)
        return CAIRN_ERANGE;
    if (new_blocks <= pp->n_blocks)
        return CAIRN_OK;
    size_t want = round_up((size_t)new_blocks * pp->block_bytes, pp->gran);
    if (want > pp->reserved_bytes)
        want = pp->reserved_bytes;
    if (want > pp->committed_bytes) {
        int rc = pp->ops->commit(pp->ctx, pp->base, pp->committed_bytes, want);
        if (rc)
            return rc;
        pp->committed_bytes = want;
    }
    pp->n_blocks = new_blocks;
    return CAIRN_OK;
}

void kv_phys_pool_copy_block(kv_phys_pool_t *pp, uint32_t dst, uint32_t src)
{
    pp->ops->copy(pp->ctx, pp->base + (size_t)dst * pp->block_bytes,
                  pp->base + (size_t)src * pp->block_bytes, pp->block_bytes);
}
