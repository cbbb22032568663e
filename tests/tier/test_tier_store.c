/*
 * test_tier_store.c — the store interface's contract (store_contract.c) run against every
 * store: the filesystem store (src/tier/fs), the in-memory store (src/tier/mem) and the
 * Redis store (src/tier/redis, against a private loopback redis-server started here). A
 * new store adds a factory and one line here.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "tier/mem/mem_store.h"
#include "tier/redis/redis_server.h"
#include "tier/store_contract.h"
#include "tier/tier_test_util.h"

/* ---- filesystem store ---- */

typedef struct {
    char *root;
    cairn_cold_store_t *fs;
} fs_ctx_t;

static cairn_tier_store_t *fs_create(void *ctx)
{
    fs_ctx_t *c = ctx;
    c->root = t_mkroot();
    assert_non_null(c->root);
    cairn_cold_config_t cfg = t_config(c->root, 0, 0);
    assert_int_equal(cairn_cold_store_create(&cfg, &c->fs), CAIRN_OK);
    return cairn_cold_store_tier(c->fs);
}

/* Flips a payload bit of the object's file. */
static void fs_damage(void *ctx, cairn_tier_store_t *s, const cairn_tier_key_t *key)
{
    fs_ctx_t *c = ctx;
    (void)s;
    char hex[65], path[4096];
    cairn_tier_hash_hex(&key->hash, hex);
    if (key->kind == CAIRN_TIER_STATE)
        snprintf(path, sizeof path, "%s/%.2s/%s.%u.st", cairn_cold_store_dir(c->fs), hex, hex, key->group);
    else
        snprintf(path, sizeof path, "%s/%.2s/%s.kv", cairn_cold_store_dir(c->fs), hex, hex);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    uint8_t b;
    assert_int_equal(pread(fd, &b, 1, st.st_size - 7), 1);
    b ^= 0x08;
    assert_int_equal(pwrite(fd, &b, 1, st.st_size - 7), 1);
    close(fd);
}

static void fs_destroy(void *ctx, cairn_tier_store_t *s)
{
    fs_ctx_t *c = ctx;
    cairn_tier_store_destroy(s);
    t_rmrf(c->root);
    free(c->root);
    c->root = NULL;
    c->fs = NULL;
}

static void test_fs_contract(void **state)
{
    (void)state;
    fs_ctx_t ctx = {0};
    store_factory_t f = {"fs", fs_create, fs_damage, fs_destroy, false, &ctx};
    store_contract_run(&f);
}

/* ---- in-memory store ---- */

static cairn_tier_store_t *mem_create(void *ctx)
{
    (void)ctx;
    cairn_tier_store_t *s = NULL;
    assert_int_equal(tier_mem_create(NULL, &s), CAIRN_OK);
    return s;
}

static void mem_damage(void *ctx, cairn_tier_store_t *s, const cairn_tier_key_t *key)
{
    (void)ctx;
    assert_int_equal(tier_mem_damage(s, key, 100), CAIRN_OK);
}

static void mem_destroy(void *ctx, cairn_tier_store_t *s)
{
    (void)ctx;
    cairn_tier_store_destroy(s);
}

static void test_mem_contract(void **state)
{
    (void)state;
    store_factory_t f = {"mem", mem_create, mem_damage, mem_destroy, true, NULL};
    store_contract_run(&f);
}

/* ---- Redis store ---- */

typedef struct {
    test_redis_t srv;
} redis_ctx_t;

static cairn_tier_store_t *redis_create(void *ctx)
{
    redis_ctx_t *c = ctx;
    redisContext *cl = test_redis_client(&c->srv);
    assert_non_null(cl);
    redisReply *r = redisCommand(cl, "FLUSHALL");
    assert_non_null(r);
    freeReplyObject(r);
    redisFree(cl);
    cairn_tier_store_t *s = test_redis_store(c->srv.url, 0, NULL);
    assert_non_null(s);
    return s;
}

/* Flips a payload bit of the key's value on the server (the TTL is kept). */
static void redis_damage(void *ctx, cairn_tier_store_t *s, const cairn_tier_key_t *key)
{
    redis_ctx_t *c = ctx;
    (void)s;
    char fp[65], dom[65], h[65], name[256];
    cairn_tier_hash_t f = t_fingerprint(0);
    cairn_tier_hash_hex(&f, fp);
    cairn_tier_hash_hex(&key->domain, dom);
    cairn_tier_hash_hex(&key->hash, h);
    snprintf(name, sizeof name, "cairn:%s:%s:%s:%u%s", fp, dom, h, key->group,
             key->kind == CAIRN_TIER_STATE ? ":state" : "");
    redisContext *cl = test_redis_client(&c->srv);
    assert_non_null(cl);
    redisReply *r = redisCommand(cl, "GET %s", name);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    r->str[r->len - 7] ^= 0x08;
    redisReply *w = redisCommand(cl, "SET %s %b KEEPTTL", name, r->str, r->len);
    assert_non_null(w);
    assert_int_equal(w->type, REDIS_REPLY_STATUS);
    freeReplyObject(w);
    freeReplyObject(r);
    redisFree(cl);
}

static void redis_destroy(void *ctx, cairn_tier_store_t *s)
{
    (void)ctx;
    cairn_tier_store_destroy(s);
}

static void test_redis_contract(void **state)
{
    (void)state;
    redis_ctx_t ctx;
    assert_int_equal(test_redis_start(&ctx.srv, NULL), 0);
    store_factory_t f = {"redis", redis_create, redis_damage, redis_destroy, true, &ctx};
    store_contract_run(&f);
    test_redis_stop(&ctx.srv);
}

/* ---- the dispatchers ---- */

static void *never(void *user, size_t size)
{
    (void)user;
    (void)size;
    fail_msg("a NULL store must not ask for a destination");
    return NULL;
}

/* A NULL store holds nothing; a store without maintenance ops says so. */
static void test_null_and_optional(void **state)
{
    (void)state;
    cairn_tier_key_t k = {.kind = CAIRN_TIER_BLOCK};
    cairn_tier_object_t o = {.key = k};
    assert_false(cairn_tier_store_contains(NULL, &k));
    assert_int_equal(cairn_tier_store_chain_length(NULL, &k, 1), 0);
    assert_int_equal(cairn_tier_store_get(NULL, &o, never, NULL), CAIRN_ENOENT);
    bool queued = true;
    assert_int_equal(cairn_tier_store_put(NULL, &o, 0, &queued), CAIRN_EINVAL);
    assert_false(queued);
    cairn_tier_stats_t st;
    memset(&st, 0xff, sizeof st);
    cairn_tier_store_stats(NULL, &st);
    assert_false(st.enabled);
    assert_int_equal(st.objects, 0);
    cairn_tier_store_flush(NULL);
    cairn_tier_store_destroy(NULL);
    assert_string_equal(cairn_tier_store_name(NULL), "none");

    cairn_tier_store_t *m = NULL;
    assert_int_equal(tier_mem_create(NULL, &m), CAIRN_OK);
    assert_string_equal(cairn_tier_store_name(m), "mem");
    size_t checked = 7, bad = 7;
    assert_int_equal(cairn_tier_store_verify(m, &checked, &bad), CAIRN_EUNSUPPORTED);
    assert_int_equal(checked, 0);
    assert_int_equal(bad, 0);
    cairn_tier_store_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fs_contract),
        cmocka_unit_test(test_mem_contract),
        cmocka_unit_test(test_redis_contract),
        cmocka_unit_test(test_null_and_optional),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
