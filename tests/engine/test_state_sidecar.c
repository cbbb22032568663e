/*
 * test_state_sidecar.c — the engine's STATE sidecar payloads (engine/state_sidecar.h,
 * docs/FORMAT.md 1.10) over a KV cache with a sliding, a full and a recurrent layer: which
 * groups need a sidecar, the sliding window's block range at boundaries below, at and past
 * the window, descriptors that differ whenever a reader must refuse, and the export
 * (gather from pool blocks) / import (take, commit) round trip of a sliding window into
 * another cache, byte for byte.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine/state_sidecar.h"

#define BS 16
#define W 40 /* window: first_live(P) = (P + 1 - 40) / 16 */

static const cairn_layer_cache_t g_layers[3] = {
    {{CAIRN_KV_LAYER_SLIDING, 2, 8, W, 0}, 0},
    {{CAIRN_KV_LAYER_FULL, 2, 8, 0, 0}, 0},
    {{CAIRN_KV_LAYER_RECURRENT, 0, 0, 0, 0}, 96},
};

static cairn_kv_cache_t *make_cache(const cairn_layer_cache_t *layers, uint32_t n)
{
    cairn_kv_layer_spec_t specs[8];
    for (uint32_t l = 0; l < n; l++)
        specs[l] = layers[l].kv;
    cairn_kv_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.layers = specs;
    cfg.n_layers = n;
    cfg.dtype = CAIRN_DTYPE_BF16;
    cfg.block_size = BS;
    cfg.memory_mib = 2;
    cairn_kv_cache_t *c = NULL;
    assert_int_equal(cairn_kv_cache_create(&cfg, &c), CAIRN_OK);
    return c;
}

static void test_plan_and_ranges(void **state)
{
    (void)state;
    cairn_kv_cache_t *c = make_cache(g_layers, 3);
    state_sidecars_t *p = NULL;
    assert_int_equal(state_sidecars_create(c, g_layers, 3, 128, &p), CAIRN_OK);
    assert_int_equal(state_sidecars_count(p), 2);
    uint32_t gfull = 0, gs = 0, gr = 0;
    assert_int_equal(cairn_kv_cache_layer_group(c, 1, &gfull), CAIRN_OK);
    assert_int_equal(cairn_kv_cache_layer_group(c, 0, &gs), CAIRN_OK);
    assert_int_equal(cairn_kv_cache_layer_group(c, 2, &gr), CAIRN_OK);
    assert_int_equal(state_sidecars_full_group(p), gfull);
    const int rec = state_sidecars_recurrent(p);
    assert_true(rec == 0 || rec == 1);
    assert_int_equal(state_sidecars_group(p, (uint32_t)rec), gr);
    const uint32_t sl = (uint32_t)(1 - rec);
    assert_int_equal(state_sidecars_group(p, sl), gs);

    static state_sidecar_desc_t a, b;
    /* Below the window: every row since 0 (one block at 16 tokens, two at 32). */
    assert_int_equal(state_sidecar_describe(p, sl, 16, &a), CAIRN_OK);
    assert_int_equal(a.first_block, 0);
    assert_int_equal(a.n_blocks, 1);
    assert_true(a.block_bytes > 0);
    assert_int_equal(a.payload_size, a.block_bytes);
    assert_int_equal(state_sidecar_describe(p, sl, 32, &b), CAIRN_OK);
    assert_int_equal(b.n_blocks, 2);
    assert_true(a.layout_size != b.layout_size || memcmp(a.layout, b.layout, a.layout_size));
    /* Past the window: the blocks covering (P - W, P), whole. */
    assert_int_equal(state_sidecar_describe(p, sl, 256, &a), CAIRN_OK);
    assert_int_equal(a.first_block, (256 + 1 - W) / BS);
    assert_int_equal(a.n_blocks, 256 / BS - (256 + 1 - W) / BS);
    assert_int_equal(a.n_blocks * BS >= W - 1, 1);
    assert_int_equal(state_sidecar_describe(p, sl, 272, &b), CAIRN_OK);
    assert_true(memcmp(a.layout, b.layout, a.layout_size) != 0); /* another window position */
    /* The recurrent sidecar is the handle; its descriptor does not depend on the boundary
     * (the header carries the boundary). */
    assert_int_equal(state_sidecar_describe(p, (uint32_t)rec, 16, &a), CAIRN_OK);
    assert_int_equal(state_sidecar_describe(p, (uint32_t)rec, 256, &b), CAIRN_OK);
    assert_int_equal(a.payload_size, 128);
    assert_int_equal(a.layout_size, b.layout_size);
    assert_memory_equal(a.layout, b.layout, a.layout_size);
    /* Misuse. */
    assert_int_equal(state_sidecar_describe(p, sl, 0, &a), CAIRN_EINVAL);
    assert_int_equal(state_sidecar_describe(p, sl, 17, &a), CAIRN_EINVAL);
    assert_int_equal(state_sidecar_describe(p, 2, 16, &a), CAIRN_EINVAL);
    state_sidecars_destroy(p);

    /* Another geometry (a head more in the sliding layer): another descriptor. */
    cairn_layer_cache_t other[3];
    memcpy(other, g_layers, sizeof other);
    other[0].kv.n_kv_heads = 1;
    cairn_kv_cache_t *c2 = make_cache(other, 3);
    state_sidecars_t *p2 = NULL;
    assert_int_equal(state_sidecars_create(c2, other, 3, 128, &p2), CAIRN_OK);
    assert_int_equal(state_sidecars_create(c, g_layers, 3, 128, &p), CAIRN_OK);
    assert_int_equal(state_sidecar_describe(p, sl, 64, &a), CAIRN_OK);
    assert_int_equal(state_sidecar_describe(p2, sl, 64, &b), CAIRN_OK);
    assert_true(a.layout_size != b.layout_size || memcmp(a.layout, b.layout, a.layout_size));
    state_sidecars_destroy(p);
    state_sidecars_destroy(p2);
    cairn_kv_cache_destroy(c2);
    cairn_kv_cache_destroy(c);

    /* FULL layers split over two groups: not the tier's BLOCK layout. */
    const cairn_layer_cache_t split[3] = {
        {{CAIRN_KV_LAYER_SLIDING, 2, 8, W, 0}, 0},
        {{CAIRN_KV_LAYER_FULL, 2, 8, 0, 0}, 0},
        {{CAIRN_KV_LAYER_FULL, 2, 8, 0, 0}, 0},
    };
    c = make_cache(split, 3);
    assert_int_equal(state_sidecars_create(c, split, 3, 0, &p), CAIRN_EUNSUPPORTED);
    assert_null(p);
    cairn_kv_cache_destroy(c);
}

/* A sliding window gathered from one cache's pool blocks installs in another cache as the
 * same bytes, published in its group under the chain's hashes; the blocks it finds
 * published already are pinned, not copied. */
static void test_sliding_round_trip(void **state)
{
    (void)state;
    const cairn_layer_cache_t sw[2] = {
        {{CAIRN_KV_LAYER_SLIDING, 2, 8, W, 0}, 0},
        {{CAIRN_KV_LAYER_FULL, 2, 8, 0, 0}, 0},
    };
    cairn_kv_cache_t *src = make_cache(sw, 2), *dst = make_cache(sw, 2);
    state_sidecars_t *p = NULL;
    assert_int_equal(state_sidecars_create(src, sw, 2, 0, &p), CAIRN_OK);
    assert_int_equal(state_sidecars_count(p), 1);
    assert_int_equal(state_sidecars_recurrent(p), -1);
    const size_t P = 96;
    int32_t tok[P + 1];
    for (size_t i = 0; i <= P; i++)
        tok[i] = (int32_t)(7 * i + 3);
    cairn_kv_seq_t *s = NULL;
    size_t hit = 0;
    assert_int_equal(cairn_kv_seq_begin(src, NULL, NULL, 0, tok, P + 1, &s, &hit), CAIRN_OK);
    uint32_t g = state_sidecars_group(p, 0);
    size_t nt = 0;
    const uint32_t *table = cairn_kv_seq_block_table(s, 0, &nt);
    static state_sidecar_desc_t d;
    assert_int_equal(state_sidecar_describe(p, 0, P, &d), CAIRN_OK);
    assert_int_equal(d.group, g);
    for (size_t j = d.first_block; j < d.first_block + d.n_blocks; j++)
        memset(cairn_kv_cache_block_data(src, table[j]), (int)(0x40 + j), d.block_bytes);
    assert_int_equal(cairn_kv_seq_commit(s, P), CAIRN_OK);
    table = cairn_kv_seq_block_table(s, 0, &nt);
    uint32_t ids[8];
    for (size_t j = 0; j < d.n_blocks; j++)
        ids[j] = table[d.first_block + j];
    uint8_t *payload = malloc(d.payload_size);
    assert_non_null(payload);
    state_sidecar_gather(src, &d, ids, payload);
    cairn_kv_hash_t h[8];
    assert_int_equal(cairn_kv_cache_hash_blocks(src, NULL, NULL, 0, tok, P, h), CAIRN_OK);

    uint32_t got[8];
    bool take[8];
    const cairn_kv_hash_t zero = {{0}}; /* the default domain */
    const cairn_kv_hash_t *dom = &zero;
    assert_false(state_sidecar_sliding_hot(dst, &d, dom, h));
    assert_int_equal(state_sidecar_sliding_take(dst, &d, dom, h, got, take), CAIRN_OK);
    for (size_t j = 0; j < d.n_blocks; j++)
        assert_true(take[j]);
    int pub = 0;
    state_sidecar_sliding_commit(dst, &d, dom, h, got, take, payload, &pub);
    assert_int_equal(pub, (int)d.n_blocks);
    assert_true(state_sidecar_sliding_hot(dst, &d, dom, h));
    for (size_t j = 0; j < d.n_blocks; j++) {
        uint32_t id = cairn_kv_cache_find_block(dst, g, dom, &h[d.first_block + j]);
        assert_int_equal(id, got[j]);
        assert_memory_equal(cairn_kv_cache_block_data(dst, id), payload + j * d.block_bytes, d.block_bytes);
    }
    /* Again: everything is published, so the take pins and the commit copies nothing. */
    assert_int_equal(state_sidecar_sliding_take(dst, &d, dom, h, got, take), CAIRN_OK);
    for (size_t j = 0; j < d.n_blocks; j++)
        assert_false(take[j]);
    cairn_kv_stats_t st;
    cairn_kv_cache_stats(dst, &st);
    assert_int_equal(st.blocks_pinned, d.n_blocks);
    state_sidecar_sliding_commit(dst, &d, dom, h, got, take, payload, &pub);
    assert_int_equal(pub, 0);
    cairn_kv_cache_stats(dst, &st);
    assert_int_equal(st.blocks_pinned, 0);
    assert_int_equal(st.blocks_cached, d.n_blocks);
    free(payload);
    cairn_kv_seq_release(s, NULL);
    state_sidecars_destroy(p);
    cairn_kv_cache_destroy(src);
    cairn_kv_cache_destroy(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_and_ranges),
        cmocka_unit_test(test_sliding_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
