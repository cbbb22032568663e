/*
 * store_contract.c — the store interface's contract as assertions (see store_contract.h).
 *
 * Each check starts from an empty store and speaks only through the dispatchers of
 * include/cairn/tier_store.h: absent objects, puts (copied, never rewritten), validated
 * gets into a destination callback, chain_length from metadata alone (no read counted),
 * requests that disagree with the object, damaged objects, declined destinations, holes,
 * kinds the store holds or refuses, and the maintenance walk.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "tier/store_contract.h"
#include "tier/tier_test_util.h"

#define SEED 41
#define N 6

typedef struct {
    uint8_t buf[T_PAYLOAD];
    size_t asked;         /* payload size the store offered */
    bool decline;
} dst_t;

static void *to_buf(void *user, size_t size)
{
    dst_t *d = user;
    d->asked = size;
    return d->decline || size > sizeof d->buf ? NULL : d->buf;
}

static void put_chain(cairn_tier_store_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        cairn_tier_object_t o;
        int32_t tk[T_TOKENS];
        uint8_t pay[T_PAYLOAD];
        t_object(SEED, i, &o, tk, pay);
        bool queued = false;
        assert_int_equal(cairn_tier_store_put(s, &o, 10000, &queued), CAIRN_OK);
        assert_true(queued);
        memset(pay, 0xee, sizeof pay); /* the store copied: recycling the source is safe */
    }
    cairn_tier_store_flush(s);
}

/* Reads block i as the chain names it; checks the bytes on success. */
static int get_block(cairn_tier_store_t *s, size_t i, dst_t *d)
{
    cairn_tier_object_t want;
    int32_t tk[T_TOKENS];
    uint8_t expect[T_PAYLOAD];
    t_object(SEED, i, &want, tk, expect);
    want.payload = NULL;
    want.payload_size = 0;
    int rc = cairn_tier_store_get(s, &want, to_buf, d);
    if (rc == CAIRN_OK) {
        assert_int_equal(d->asked, T_PAYLOAD);
        assert_memory_equal(d->buf, expect, T_PAYLOAD);
    }
    return rc;
}

static void check_empty(const store_factory_t *f)
{
    cairn_tier_store_t *s = f->create(f->ctx);
    assert_non_null(s);
    cairn_tier_key_t keys[N];
    t_chain(SEED, N, keys, NULL);
    assert_false(cairn_tier_store_contains(s, &keys[0]));
    assert_int_equal(cairn_tier_store_chain_length(s, keys, N), 0);
    dst_t d = {0};
    assert_int_equal(get_block(s, 0, &d), CAIRN_ENOENT);
    cairn_tier_stats_t st;
    cairn_tier_store_stats(s, &st);
    assert_true(st.enabled);
    assert_int_equal(st.misses, 1);
    assert_int_equal(st.objects, 0);
    f->destroy(f->ctx, s);
}

static void check_round_trip(const store_factory_t *f)
{
    cairn_tier_store_t *s = f->create(f->ctx);
    put_chain(s, N);
    cairn_tier_key_t keys[N + 2];
    t_chain(SEED, N + 2, keys, NULL);
    for (size_t i = 0; i < N; i++)
        assert_true(cairn_tier_store_contains(s, &keys[i]));
    assert_false(cairn_tier_store_contains(s, &keys[N]));
    /* The chain length comes from metadata: no read is counted. */
    assert_int_equal(cairn_tier_store_chain_length(s, keys, N + 2), N);
    assert_int_equal(cairn_tier_store_chain_length(s, keys + 2, 3), 3);
    cairn_tier_stats_t st;
    cairn_tier_store_stats(s, &st);
    assert_int_equal(st.reads, 0);
    assert_int_equal(st.enqueued, N);
    assert_int_equal(st.objects, N);
    /* A second put of a held object queues nothing and rewrites nothing. */
    cairn_tier_object_t o;
    int32_t tk[T_TOKENS];
    uint8_t pay[T_PAYLOAD];
    t_object(SEED, 1, &o, tk, pay);
    bool queued = true;
    assert_int_equal(cairn_tier_store_put(s, &o, 0, &queued), CAIRN_OK);
    assert_false(queued);
    for (size_t i = 0; i < N; i++) {
        dst_t d = {0};
        assert_int_equal(get_block(s, i, &d), CAIRN_OK);
    }
    cairn_tier_store_stats(s, &st);
    assert_int_equal(st.enqueued, N);
    assert_int_equal(st.hits, N);
    assert_int_equal(st.reads, N);
    assert_int_equal(st.bytes_restored, N * T_PAYLOAD);
    assert_int_equal(st.corruptions, 0);
    f->destroy(f->ctx, s);
}

static void check_invalid(const store_factory_t *f)
{
    cairn_tier_store_t *s = f->create(f->ctx);
    put_chain(s, N);
    cairn_tier_key_t keys[N];
    t_chain(SEED, N, keys, NULL);
    /* A request whose tokens disagree with the object: corrupt, removed, never served. */
    cairn_tier_object_t want;
    int32_t tk[T_TOKENS];
    uint8_t pay[T_PAYLOAD];
    t_object(SEED, 4, &want, tk, pay);
    tk[3] ^= 1;
    dst_t d = {0};
    assert_int_equal(cairn_tier_store_get(s, &want, to_buf, &d), CAIRN_ECORRUPT);
    assert_false(cairn_tier_store_contains(s, &keys[4]));
    /* So is a wrong parent. */
    t_object(SEED, 5, &want, tk, pay);
    want.parent.bytes[0] ^= 1;
    assert_int_equal(cairn_tier_store_get(s, &want, to_buf, &d), CAIRN_ECORRUPT);
    /* Damaged bytes: the next read fails validation and removes the object. */
    f->damage(f->ctx, s, &keys[2]);
    assert_int_equal(get_block(s, 2, &d), CAIRN_ECORRUPT);
    assert_false(cairn_tier_store_contains(s, &keys[2]));
    assert_int_equal(get_block(s, 2, &d), CAIRN_ENOENT);
    /* The chain now ends at the first hole. */
    assert_int_equal(cairn_tier_store_chain_length(s, keys, N), 2);
    /* A declined destination: nothing read, counted, the object stays. */
    d.decline = true;
    assert_int_equal(get_block(s, 1, &d), CAIRN_ECANCELED);
    assert_true(cairn_tier_store_contains(s, &keys[1]));
    d.decline = false;
    assert_int_equal(get_block(s, 1, &d), CAIRN_OK);
    cairn_tier_stats_t st;
    cairn_tier_store_stats(s, &st);
    assert_int_equal(st.corruptions, 3);
    assert_int_equal(st.restore_declines, 1);
    assert_int_equal(st.misses, 1);
    assert_int_equal(st.hits, 1);
    assert_int_equal(st.objects, N - 3);
    f->destroy(f->ctx, s);
}

static void check_kinds(const store_factory_t *f)
{
    cairn_tier_store_t *s = f->create(f->ctx);
    int32_t tk[T_TOKENS];
    uint8_t pay[T_PAYLOAD];
    /* A STATE sidecar at the boundary after block 2, with its layout descriptor. */
    static const uint8_t layout[] = "bf16;2;[4,1024]";
    cairn_tier_object_t st_obj;
    t_object(SEED, 2, &st_obj, tk, pay);
    st_obj.key.kind = CAIRN_TIER_STATE;
    st_obj.key.group = 1;
    st_obj.parent = (cairn_tier_hash_t){{0}};
    st_obj.tokens = NULL;
    st_obj.n_tokens = 0;
    st_obj.boundary = 3 * T_TOKENS;
    st_obj.layout = layout;
    st_obj.layout_size = sizeof layout;
    /* A block of cache group 1. */
    cairn_tier_object_t g1;
    t_object(SEED, 0, &g1, tk, pay);
    g1.key.group = 1;
    bool queued = false;
    dst_t d = {0};
    /* The block whose hash the sidecar shares, in group 0: held, and no other kind or
     * group of the same hash is found through it. */
    cairn_tier_object_t b2;
    int32_t tk2[T_TOKENS];
    uint8_t pay2[T_PAYLOAD];
    t_object(SEED, 2, &b2, tk2, pay2);
    assert_int_equal(cairn_tier_store_put(s, &b2, 10000, NULL), CAIRN_OK);
    cairn_tier_store_flush(s);
    assert_true(cairn_tier_store_contains(s, &b2.key));
    assert_false(cairn_tier_store_contains(s, &st_obj.key));
    cairn_tier_key_t b2g1 = b2.key;
    b2g1.group = 1;
    assert_false(cairn_tier_store_contains(s, &b2g1));
    assert_int_equal(cairn_tier_store_chain_length(s, &b2g1, 1), 0);
    assert_int_equal(cairn_tier_store_chain_length(s, &st_obj.key, 1), 0);
    if (!f->holds_all_kinds) {
        /* A block of another group than 0 is refused. */
        assert_int_equal(cairn_tier_store_put(s, &g1, 0, &queued), CAIRN_EUNSUPPORTED);
        assert_false(queued);
        assert_false(cairn_tier_store_contains(s, &g1.key));
        assert_int_equal(cairn_tier_store_get(s, &g1, to_buf, &d), CAIRN_EUNSUPPORTED);
    }
    int prc = cairn_tier_store_put(s, &st_obj, 0, &queued);
    if (prc == CAIRN_EUNSUPPORTED && !f->holds_all_kinds) {
        assert_false(queued);
        assert_false(cairn_tier_store_contains(s, &st_obj.key));
        assert_int_equal(cairn_tier_store_get(s, &st_obj, to_buf, &d), CAIRN_EUNSUPPORTED);
        f->destroy(f->ctx, s);
        return;
    }
    print_message("store contract: %s holds STATE objects\n", f->name);
    assert_int_equal(prc, CAIRN_OK);
    assert_true(queued);
    if (f->holds_all_kinds)
        assert_int_equal(cairn_tier_store_put(s, &g1, 0, &queued), CAIRN_OK);
    cairn_tier_store_flush(s);
    assert_true(cairn_tier_store_contains(s, &st_obj.key));
    /* Readable now: a one-key chain of it has length 1 (metadata only). */
    assert_int_equal(cairn_tier_store_chain_length(s, &st_obj.key, 1), 1);
    /* A second put of the held sidecar queues nothing. */
    assert_int_equal(cairn_tier_store_put(s, &st_obj, 0, &queued), CAIRN_OK);
    assert_false(queued);
    /* Same hash, other kind or group: other objects. */
    cairn_tier_key_t k = st_obj.key;
    k.kind = CAIRN_TIER_BLOCK;
    k.group = 0;
    assert_true(cairn_tier_store_contains(s, &k)); /* b2, the block ending at the boundary */
    k = st_obj.key;
    k.group = 2;
    assert_false(cairn_tier_store_contains(s, &k));
    if (f->holds_all_kinds) {
        k = g1.key;
        k.group = 0;
        assert_false(cairn_tier_store_contains(s, &k));
    }
    cairn_tier_object_t want = st_obj;
    want.payload = NULL;
    want.payload_size = 0;
    d.asked = 0;
    assert_int_equal(cairn_tier_store_get(s, &want, to_buf, &d), CAIRN_OK);
    assert_int_equal(d.asked, T_PAYLOAD);
    assert_memory_equal(d.buf, pay, T_PAYLOAD);
    /* A declined destination: counted, the sidecar stays. */
    d.decline = true;
    assert_int_equal(cairn_tier_store_get(s, &want, to_buf, &d), CAIRN_ECANCELED);
    d.decline = false;
    assert_true(cairn_tier_store_contains(s, &st_obj.key));
    /* Another boundary than the one stored: refused as corrupt, removed. */
    want.boundary = 4 * T_TOKENS;
    assert_int_equal(cairn_tier_store_get(s, &want, to_buf, &d), CAIRN_ECORRUPT);
    assert_false(cairn_tier_store_contains(s, &st_obj.key));
    assert_int_equal(cairn_tier_store_get(s, &st_obj, to_buf, &d), CAIRN_ENOENT);
    /* Another layout descriptor (same size, one byte apart; then another size). */
    static const uint8_t other[] = "bf16;2;[4,1025]";
    static const uint8_t longer[] = "bf16;2;[4,10240]";
    assert_int_equal(cairn_tier_store_put(s, &st_obj, 0, &queued), CAIRN_OK);
    cairn_tier_store_flush(s);
    want = st_obj;
    want.layout = other;
    assert_int_equal(cairn_tier_store_get(s, &want, to_buf, &d), CAIRN_ECORRUPT);
    assert_false(cairn_tier_store_contains(s, &st_obj.key));
    assert_int_equal(cairn_tier_store_put(s, &st_obj, 0, &queued), CAIRN_OK);
    cairn_tier_store_flush(s);
    want.layout = longer;
    want.layout_size = sizeof longer;
    assert_int_equal(cairn_tier_store_get(s, &want, to_buf, &d), CAIRN_ECORRUPT);
    assert_false(cairn_tier_store_contains(s, &st_obj.key));
    /* Damaged payload bytes: a corruption that removes it. */
    assert_int_equal(cairn_tier_store_put(s, &st_obj, 0, &queued), CAIRN_OK);
    cairn_tier_store_flush(s);
    f->damage(f->ctx, s, &st_obj.key);
    assert_int_equal(cairn_tier_store_get(s, &st_obj, to_buf, &d), CAIRN_ECORRUPT);
    assert_false(cairn_tier_store_contains(s, &st_obj.key));
    /* The sidecar's own stats: hits 1 and corruptions 4 (the block b2 was never read). */
    cairn_tier_stats_t stt;
    cairn_tier_store_stats(s, &stt);
    assert_int_equal(stt.hits, 1);
    assert_int_equal(stt.corruptions, 4);
    assert_int_equal(stt.restore_declines, 1);
    f->destroy(f->ctx, s);
}

typedef struct {
    size_t n;
    uint64_t bytes;
} walk_t;

static int count_entry(void *user, const cairn_tier_entry_t *e)
{
    walk_t *w = user;
    w->n++;
    w->bytes += e->bytes;
    assert_int_equal(e->key.kind, CAIRN_TIER_BLOCK);
    assert_int_equal(e->n_tokens, T_TOKENS);
    assert_int_equal(e->boundary, 0);
    return 0;
}

static void check_maintenance(const store_factory_t *f)
{
    cairn_tier_store_t *s = f->create(f->ctx);
    put_chain(s, N);
    walk_t w = {0};
    assert_int_equal(cairn_tier_store_foreach(s, count_entry, &w), CAIRN_OK);
    assert_int_equal(w.n, N);
    cairn_tier_stats_t st;
    cairn_tier_store_stats(s, &st);
    assert_int_equal(w.bytes, st.used_bytes);
    size_t ev = 0;
    assert_int_equal(cairn_tier_store_prune(s, st.used_bytes / 2, &ev), CAIRN_OK);
    assert_true(ev >= N / 2 && ev < N);
    cairn_tier_store_stats(s, &st);
    assert_int_equal(st.evictions, ev);
    size_t removed = 0;
    assert_int_equal(cairn_tier_store_clear(s, &removed), CAIRN_OK);
    assert_int_equal(removed, N - ev);
    cairn_tier_store_stats(s, &st);
    assert_int_equal(st.objects, 0);
    f->destroy(f->ctx, s);
}

void store_contract_run(const store_factory_t *f)
{
    print_message("store contract: %s\n", f->name);
    check_empty(f);
    check_round_trip(f);
    check_invalid(f);
    check_kinds(f);
    check_maintenance(f);
}
