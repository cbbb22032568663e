/*
 * store_contract.h — the behaviour every store of include/cairn/tier_store.h must show,
 * as one cmocka-asserting routine run against each store (test_tier_store.c runs it on the
 * filesystem, the in-memory and the Redis store; a new store adds one factory there).
 */
#ifndef TIER_STORE_CONTRACT_H
#define TIER_STORE_CONTRACT_H

#include <stdbool.h>

#include "cairn/tier_store.h"

typedef struct {
    const char *name;
    /* A fresh, empty store for the tests' block layout (T_TOKENS tokens, T_PAYLOAD bytes). */
    cairn_tier_store_t *(*create)(void *ctx);
    /* Changes the stored bytes of key's object so that its next read must fail validation. */
    void (*damage)(void *ctx, cairn_tier_store_t *s, const cairn_tier_key_t *key);
    /* Destroys the store and whatever it left (directories). */
    void (*destroy)(void *ctx, cairn_tier_store_t *s);
    /* Whether the store holds STATE objects and BLOCKs of groups other than 0. When false
     * it must refuse BLOCKs of other groups with CAIRN_EUNSUPPORTED, and either refuse
     * STATE objects the same way or hold them by the whole STATE contract (the filesystem
     * store does; its own tests assert that it holds them). */
    bool holds_all_kinds;
    void *ctx;
} store_factory_t;

/* Runs every contract check against stores made by f. */
void store_contract_run(const store_factory_t *f);

#endif
