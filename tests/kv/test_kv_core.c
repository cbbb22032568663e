/* White-box tests of the KV core's building blocks: block pool, prefix index, block hash,
 * cache groups, physical pool and storage, checkpoint registry. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <openssl/evp.h>

#include "kv_test_util.h"

static void test_block_pool_states(void **state)
{
    (void)state;
    kv_block_pool_t bp;
    assert_int_equal(kv_block_pool_init(&bp, 5), 0);
    assert_int_equal(bp.free.count, 4); /* block 0 is the null block */
    uint32_t a = kv_block_pool_alloc(&bp), b = kv_block_pool_alloc(&bp);
    assert_int_equal(a, 1);
    assert_int_equal(b, 2);
    assert_int_equal(bp.n_used, 2);
    kv_block_pool_ref(&bp, a);
    assert_false(kv_block_pool_unref(&bp, a));
    bp.blocks[a].registered = 1; /* published: goes to the LRU at zero */
    assert_true(kv_block_pool_unref(&bp, a));
    assert_int_equal(bp.blocks[a].state, KV_BLOCK_CACHED);
    assert_int_equal(bp.lru.count, 1);
    assert_true(kv_block_pool_unref(&bp, b)); /* unregistered: back to the free tail */
    assert_int_equal(bp.blocks[b].state, KV_BLOCK_FREE);
    assert_int_equal(bp.free.tail, b);
    kv_block_pool_ref(&bp, a); /* a cached hit leaves the LRU */
    assert_int_equal(bp.lru.count, 0);
    assert_int_equal(bp.blocks[a].state, KV_BLOCK_USED);
    assert_true(kv_block_pool_unref(&bp, a));
    kv_block_pool_uncache(&bp, a);
    assert_int_equal(bp.blocks[a].state, KV_BLOCK_FREE);
    assert_false(bp.blocks[a].registered);
    /* refs on the null block are ignored */
    kv_block_pool_ref(&bp, 0);
    assert_false(kv_block_pool_unref(&bp, 0));
    assert_int_equal(bp.blocks[0].ref, 0);
    /* drain, then resize appends to the free queue */
    while (kv_block_pool_alloc(&bp))
        ;
    assert_int_equal(kv_block_pool_alloc(&bp), 0);
    assert_int_equal(kv_block_pool_resize(&bp, 7), 0);
    assert_int_equal(bp.free.count, 2);
    assert_int_equal(kv_block_pool_alloc(&bp), 5);
    cairn_alloc_fail_after(0, false);
    assert_int_equal(kv_block_pool_resize(&bp, 100), CAIRN_ENOMEM);
    assert_int_equal(bp.n_blocks, 7);
    kv_block_pool_fini(&bp);
    cairn_alloc_fail_after(0, false);
    assert_int_equal(kv_block_pool_init(&bp, 4), CAIRN_ENOMEM);
    cairn_alloc_fail_after(1, false);
    assert_int_equal(kv_block_pool_init(&bp, 4), CAIRN_ENOMEM);
    cairn_alloc_fail_after(-1, false);
}

/* Index over small integer keys whose hash is forced to collide, to exercise probing and
 * backward-shift deletion. */
static uint64_t keys[64];
static uint64_t coll_hash(const void *ctx, uint32_t id) { (void)ctx; return keys[id] % 3; }
static bool coll_match(const void *ctx, uint32_t id, const void *key)
{
    (void)ctx;
    return keys[id] == *(const uint64_t *)key;
}

static void test_prefix_index_collisions(void **state)
{
    (void)state;
    kv_index_t ix;
    assert_int_equal(kv_index_init(&ix, 4, coll_hash, coll_match, NULL), 0);
    for (uint32_t id = 1; id < 40; id++) {
        keys[id] = 1000 + id;
        if (ix.count * 2 + 2 > ix.mask + 1)
            assert_int_equal(kv_index_reserve(&ix, ix.count + 8), 0);
        kv_index_insert(&ix, coll_hash(NULL, id), id);
    }
    for (uint32_t id = 1; id < 40; id++)
        assert_int_equal(kv_index_find(&ix, keys[id] % 3, &keys[id]), id);
    uint64_t absent = 7;
    assert_int_equal(kv_index_find(&ix, absent % 3, &absent), 0);
    /* remove every other id; the rest stay findable */
    for (uint32_t id = 1; id < 40; id += 2)
        kv_index_remove(&ix, keys[id] % 3, id);
    for (uint32_t id = 1; id < 40; id++)
        assert_int_equal(kv_index_find(&ix, keys[id] % 3, &keys[id]), id % 2 ? 0u : id);
    assert_int_equal(ix.count, 19);
    cairn_alloc_fail_after(0, false);
    assert_int_equal(kv_index_reserve(&ix, 1000), CAIRN_ENOMEM);
    cairn_alloc_fail_after(-1, false);
    for (uint32_t id = 2; id < 40; id += 2)
        assert_int_equal(kv_index_find(&ix, keys[id] % 3, &keys[id]), id);
    kv_index_fini(&ix);
}

static void test_block_hash_format(void **state)
{
    (void)state;
    kv_hasher_t h;
    assert_int_equal(kv_hasher_init(&h, 4), 0);
    cairn_kv_hash_t dom, out[2], expect;
    memset(&dom, 0xab, sizeof dom);
    int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, -1};
    assert_int_equal(kv_hash_chain(&h, &dom, NULL, toks, 0, 2, out), 0);
    /* block 0: zeros || domain || 4 int32 LE */
    uint8_t msg[64 + 16 + 32];
    memset(msg, 0, 32);
    memcpy(msg + 32, dom.bytes, 32);
    for (int i = 0; i < 4; i++) {
        uint32_t v = (uint32_t)toks[i];
        for (int b = 0; b < 4; b++)
            msg[64 + 4 * i + b] = (uint8_t)(v >> (8 * b));
    }
    unsigned int len;
    assert_int_equal(EVP_Digest(msg, 80, expect.bytes, &len, EVP_sha256(), NULL), 1);
    assert_memory_equal(out[0].bytes, expect.bytes, 32);
    /* block 1 chains on block 0 */
    memcpy(msg, out[0].bytes, 32);
    for (int i = 0; i < 4; i++) {
        uint32_t v = (uint32_t)toks[4 + i];
        for (int b = 0; b < 4; b++)
            msg[64 + 4 * i + b] = (uint8_t)(v >> (8 * b));
    }
    assert_int_equal(EVP_Digest(msg, 80, expect.bytes, &len, EVP_sha256(), NULL), 1);
    assert_memory_equal(out[1].bytes, expect.bytes, 32);
    /* extras enter block 0 only; block 1 differs through the chain */
    cairn_kv_extra_key_t ek = {"img", 3};
    cairn_kv_hash_t ex, out2[2];
    bool has;
    assert_int_equal(kv_hash_extras(&h, &ek, 1, &ex, &has), 0);
    assert_true(has);
    assert_int_equal(kv_hash_chain(&h, &dom, &ex, toks, 0, 2, out2), 0);
    assert_memory_not_equal(out2[0].bytes, out[0].bytes, 32);
    assert_memory_not_equal(out2[1].bytes, out[1].bytes, 32);
    /* hashing from the middle uses the stored parent */
    cairn_kv_hash_t out3[2];
    out3[0] = out[0];
    assert_int_equal(kv_hash_chain(&h, &dom, NULL, toks, 1, 1, out3), 0);
    assert_memory_equal(out3[1].bytes, out[1].bytes, 32);
    assert_int_equal(kv_hash_extras(&h, NULL, 0, &ex, &has), 0);
    assert_false(has);
    kv_hasher_fini(&h);
    cairn_alloc_fail_after(0, false);
    assert_int_equal(kv_hasher_init(&h, 4), CAIRN_ENOMEM);
    cairn_alloc_fail_after(-1, false);
}

static void test_groups_build(void **state)
{
    (void)state;
    cairn_kv_layer_spec_t specs[6] = {
        {CAIRN_KV_LAYER_FULL, 2, 8, 0, 0},    {CAIRN_KV_LAYER_SLIDING, 1, 16, 32, 0},
        {CAIRN_KV_LAYER_RECURRENT, 0, 0, 0, 0}, {CAIRN_KV_LAYER_FULL, 4, 4, 0, 0},
        {CAIRN_KV_LAYER_SHARED, 0, 0, 0, 1},  {CAIRN_KV_LAYER_SLIDING, 1, 4, 64, 0},
    };
    kv_group_t groups[CAIRN_KV_MAX_GROUPS];
    kv_layer_t layers[6];
    uint32_t ng;
    size_t bb;
    assert_int_equal(kv_groups_build(specs, 6, CAIRN_DTYPE_F16, 16, groups, &ng, layers, &bb), 0);
    /* The smallest paged class (each sliding window) has 1 layer, so the 2 full layers
     * are split: full(0), sliding 32, recurrent, full(3), sliding 64. */
    assert_int_equal(ng, 5);
    assert_int_not_equal(layers[0].group, layers[3].group);
    assert_int_equal(groups[layers[0].group].kind, CAIRN_KV_LAYER_FULL);
    assert_int_equal(groups[layers[3].group].kind, CAIRN_KV_LAYER_FULL);
    assert_int_equal(groups[layers[0].group].n_layers, 1);
    /* full(0): K at 0, V at 16*2*8*2 = 512; full(3): K at 0, V at 16*4*4*2 = 512 */
    assert_int_equal(layers[0].v_offset, 512);
    assert_int_equal(layers[3].k_offset, 0);
    assert_int_equal(layers[3].v_offset, 512);
    assert_int_equal(layers[3].slot_stride, 32);
    assert_int_equal(groups[layers[3].group].bytes, 1024);
    assert_int_equal(bb, 1024);
    /* alias resolves to its source */
    assert_int_equal(layers[4].group, layers[1].group);
    assert_int_equal(layers[4].k_offset, layers[1].k_offset);
    assert_int_equal(layers[4].storage_layer, 1);
    assert_int_not_equal(layers[1].group, layers[5].group);

    /* Classes of equal size stay whole: two full and two sliding layers, two groups, and
     * a group's layers lie one after another in its block. */
    cairn_kv_layer_spec_t even[4] = {
        {CAIRN_KV_LAYER_FULL, 2, 8, 0, 0}, {CAIRN_KV_LAYER_SLIDING, 1, 16, 32, 0},
        {CAIRN_KV_LAYER_FULL, 4, 4, 0, 0}, {CAIRN_KV_LAYER_SLIDING, 1, 16, 32, 0},
    };
    kv_layer_t el[4];
    assert_int_equal(kv_groups_build(even, 4, CAIRN_DTYPE_F16, 16, groups, &ng, el, &bb), 0);
    assert_int_equal(ng, 2);
    assert_int_equal(el[0].group, el[2].group);
    assert_int_equal(el[1].group, el[3].group);
    assert_int_equal(groups[el[0].group].n_layers, 2);
    assert_int_equal(el[0].k_offset, 0);
    assert_int_equal(el[0].v_offset, 512);
    assert_int_equal(el[2].k_offset, 1024);
    assert_int_equal(el[2].v_offset, 1536);
    assert_int_equal(groups[el[0].group].bytes, 2048);
    assert_int_equal(bb, 2048);

    /* Gemma 3 1B: 22 sliding layers and 4 full (every 6th): the full group keeps its 4,
     * the sliding class becomes groups of 4, 4, 4, 4, 4, 2, so a block is 4 layers. */
    cairn_kv_layer_spec_t g3[26];
    kv_layer_t gl[26];
    for (uint32_t l = 0; l < 26; l++)
        g3[l] = (l + 1) % 6 ? kvt_sliding(256, 512) : kvt_full(256);
    assert_int_equal(kv_groups_build(g3, 26, CAIRN_DTYPE_BF16, 16, groups, &ng, gl, &bb), 0);
    assert_int_equal(ng, 7);
    uint32_t sizes[CAIRN_KV_MAX_GROUPS] = {0};
    for (uint32_t l = 0; l < 26; l++)
        sizes[gl[l].group]++;
    assert_int_equal(sizes[gl[5].group], 4);
    assert_int_equal(groups[gl[5].group].kind, CAIRN_KV_LAYER_FULL);
    assert_int_equal(sizes[gl[0].group], 4);
    assert_int_equal(sizes[gl[25].group], 2);
    assert_int_equal(bb, 4 * 2 * 16 * 256 * 2);

    /* 1 full layer and 40 sliding: groups of 1 would be 41; 3 layers per group fit 16. */
    cairn_kv_layer_spec_t lop[41];
    kv_layer_t ll[41];
    lop[0] = kvt_full(8);
    for (uint32_t l = 1; l < 41; l++)
        lop[l] = kvt_sliding(8, 64);
    assert_int_equal(kv_groups_build(lop, 41, CAIRN_DTYPE_F16, 16, groups, &ng, ll, &bb), 0);
    assert_int_equal(ng, 1 + 14);
    assert_true(ng <= CAIRN_KV_MAX_GROUPS);
    /* errors */
    specs[4].shared_from = 2; /* recurrent source */
    assert_int_equal(kv_groups_build(specs, 6, CAIRN_DTYPE_F16, 16, groups, &ng, layers, &bb), CAIRN_EINVAL);
    specs[4].shared_from = 4; /* itself */
    assert_int_equal(kv_groups_build(specs, 6, CAIRN_DTYPE_F16, 16, groups, &ng, layers, &bb), CAIRN_EINVAL);
    specs[4].shared_from = 1;
    specs[1].window = 0;
    assert_int_equal(kv_groups_build(specs, 6, CAIRN_DTYPE_F16, 16, groups, &ng, layers, &bb), CAIRN_EINVAL);
    specs[1].window = 32;
    assert_int_equal(kv_groups_build(specs, 6, (cairn_dtype_t)9, 16, groups, &ng, layers, &bb), CAIRN_EINVAL);
    cairn_kv_layer_spec_t only_rec = kvt_recurrent();
    assert_int_equal(kv_groups_build(&only_rec, 1, CAIRN_DTYPE_F16, 16, groups, &ng, layers, &bb), CAIRN_EINVAL);
    cairn_kv_layer_spec_t many[CAIRN_KV_MAX_GROUPS + 1];
    kv_layer_t ml[CAIRN_KV_MAX_GROUPS + 1];
    for (uint32_t i = 0; i <= CAIRN_KV_MAX_GROUPS; i++)
        many[i] = kvt_sliding(4, i + 1);
    assert_int_equal(kv_groups_build(many, CAIRN_KV_MAX_GROUPS + 1, CAIRN_DTYPE_F16, 16, groups, &ng, ml, &bb),
                     CAIRN_ERANGE);
    /* window rule: position p sees (p - W, p] */
    assert_int_equal(kv_sliding_first_live(8, 4, 0), 0);
    assert_int_equal(kv_sliding_first_live(8, 4, 8), 0);  /* next p = 8 needs 1..8 */
    assert_int_equal(kv_sliding_first_live(8, 4, 11), 1); /* needs 4..11 */
    assert_int_equal(kv_sliding_first_live(8, 4, 12), 1); /* needs 5..12 */
}

static void test_phys_pool_grow_in_place(void **state)
{
    (void)state;
    kv_phys_pool_t pp;
    assert_int_equal(kv_phys_pool_init(&pp, cairn_kv_storage_host(), NULL, 8192, 64, 4), 0);
    uint8_t *base = pp.base;
    memset(base, 0x5a, 4 * 8192);
    assert_int_equal(kv_phys_pool_grow(&pp, 40), 0);
    assert_ptr_equal(pp.base, base);
    assert_int_equal(pp.committed_bytes, 40 * 8192);
    for (size_t i = 0; i < 4 * 8192; i++)
        if (base[i] != 0x5a)
            fail_msg("byte %zu changed by grow", i);
    memset(base + 39 * 8192, 1, 8192); /* newly committed memory is writable */
    kv_phys_pool_copy_block(&pp, 5, 0);
    assert_int_equal(base[5 * 8192 + 100], 0x5a);
    assert_int_equal(kv_phys_pool_grow(&pp, 65), CAIRN_ERANGE);
    assert_int_equal(kv_phys_pool_grow(&pp, 10), 0); /* shrinking is a no-op */
    assert_int_equal(pp.n_blocks, 40);
    kv_phys_pool_fini(&pp);
    assert_int_equal(kv_phys_pool_init(&pp, cairn_kv_storage_host(), NULL, 8192, 4, 5), CAIRN_EINVAL);
}

static void test_checkpoint_registry_lru(void **state);
static int evicted_count;
static cairn_kv_hash_t last_evicted;
static void on_evict(void *user, const cairn_kv_hash_t *key)
{
    (void)user;
    evicted_count++;
    last_evicted = *key;
}

static void test_checkpoint_registry_lru(void **state)
{
    (void)state;
    kv_ckpt_registry_t r;
    assert_int_equal(kv_ckpt_init(&r, 3, on_evict, NULL), 0);
    cairn_kv_hash_t k[5];
    for (int i = 0; i < 5; i++) {
        memset(&k[i], 0, sizeof k[i]);
        k[i].bytes[0] = (uint8_t)i;
        k[i].bytes[31] = (uint8_t)(i * 7);
    }
    kv_ckpt_add(&r, &k[0]);
    kv_ckpt_add(&r, &k[1]);
    kv_ckpt_add(&r, &k[2]);
    kv_ckpt_touch(&r, &k[0]);    /* k1 is now least recent */
    kv_ckpt_add(&r, &k[3]);
    assert_int_equal(evicted_count, 1);
    assert_memory_equal(last_evicted.bytes, k[1].bytes, 32);
    assert_false(kv_ckpt_has(&r, &k[1]));
    assert_true(kv_ckpt_has(&r, &k[0]));
    kv_ckpt_add(&r, &k[3]);      /* re-adding touches, no eviction */
    assert_int_equal(evicted_count, 1);
    assert_int_equal(kv_ckpt_drop(&r, &k[2]), 0);
    assert_int_equal(kv_ckpt_drop(&r, &k[2]), CAIRN_ENOENT);
    kv_ckpt_add(&r, &k[4]);
    assert_int_equal(evicted_count, 1);
    assert_int_equal(r.count, 3);
    kv_ckpt_fini(&r);
    cairn_alloc_fail_after(1, false);
    assert_int_equal(kv_ckpt_init(&r, 3, NULL, NULL), CAIRN_ENOMEM);
    cairn_alloc_fail_after(-1, false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_pool_states),
        cmocka_unit_test(test_prefix_index_collisions),
        cmocka_unit_test(test_block_hash_format),
        cmocka_unit_test(test_groups_build),
        cmocka_unit_test(test_phys_pool_grow_in_place),
        cmocka_unit_test(test_checkpoint_registry_lru),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
