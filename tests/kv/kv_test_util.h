/* Shared helpers for the KV cache tests: small geometries and invariant checks. */
#ifndef CAIRN_KV_TEST_UTIL_H
#define CAIRN_KV_TEST_UTIL_H

#include "cairn/kv_cache.h"
#include "kv/kv_internal.h"

#include <string.h>

/* One FULL layer of one head; `dim` sets the block size in bytes (f32, bs tokens):
 * 2 * bs * dim * 4 bytes per block. */
static inline cairn_kv_config_t kvt_config(const cairn_kv_layer_spec_t *layers, uint32_t n,
                                           uint32_t bs, uint64_t mib, uint64_t init_mib)
{
    cairn_kv_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.layers = layers;
    cfg.n_layers = n;
    cfg.dtype = CAIRN_DTYPE_F32;
    cfg.block_size = bs;
    cfg.memory_mib = mib;
    cfg.initial_mib = init_mib;
    return cfg;
}

static inline cairn_kv_layer_spec_t kvt_full(uint32_t dim)
{
    cairn_kv_layer_spec_t s = {CAIRN_KV_LAYER_FULL, 1, dim, 0, 0};
    return s;
}

static inline cairn_kv_layer_spec_t kvt_sliding(uint32_t dim, uint32_t window)
{
    cairn_kv_layer_spec_t s = {CAIRN_KV_LAYER_SLIDING, 1, dim, window, 0};
    return s;
}

static inline cairn_kv_layer_spec_t kvt_recurrent(void)
{
    cairn_kv_layer_spec_t s = {CAIRN_KV_LAYER_RECURRENT, 0, 0, 0, 0};
    return s;
}

static inline cairn_kv_layer_spec_t kvt_shared(uint32_t from)
{
    cairn_kv_layer_spec_t s = {CAIRN_KV_LAYER_SHARED, 0, 0, 0, from};
    return s;
}

#endif
