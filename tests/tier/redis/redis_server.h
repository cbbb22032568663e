/*
 * redis_server.h — a private redis-server for a test: loopback only (127.0.0.1), a free
 * port chosen at start, a temporary directory, no persistence (--save "", no AOF), killed
 * and removed at the end. A missing redis-server fails the test (it is installed by
 * scripts/deps.sh); it never talks to any other address.
 */
#ifndef TEST_REDIS_SERVER_H
#define TEST_REDIS_SERVER_H

#include <stdbool.h>
#include <sys/types.h>
#include <hiredis/hiredis.h>

typedef struct {
    pid_t pid;
    int port;
    char dir[128];
    char url[64];              /* redis://127.0.0.1:PORT */
    char extra[256];           /* extra redis-server arguments, space-separated (e.g. "--maxmemory 1mb") */
} test_redis_t;

/* Starts a server on a free loopback port (extra may be NULL); waits until it answers PING.
 * Returns 0, or -1 with a message on stderr (redis-server missing, did not start). */
int test_redis_start(test_redis_t *r, const char *extra);
/* Starts the server again on the same port and directory (after a kill: empty). */
int test_redis_restart(test_redis_t *r);
/* SIGKILL and wait. */
void test_redis_kill(test_redis_t *r);
/* Kills the server and removes its directory. */
void test_redis_stop(test_redis_t *r);
/* A plain hiredis connection to it (the test's own view of the server; default reply
 * objects), or NULL. The caller frees with redisFree. */
redisContext *test_redis_client(const test_redis_t *r);
/* A port on 127.0.0.1 nothing listens on (chosen free, then left unbound). */
int test_redis_free_port(void);

/* Opens a Redis store on url for the tier tests' synthetic model `variant`
 * (tier_test_util.h: T_LAYERS layers of T_LAYER_BYTES, T_TOKENS tokens, bf16) with two
 * cache groups of that layout; cfg may be NULL (defaults: count_objects on). Returns the
 * store or NULL. Needs tier_test_util.c and the cairn tier layer. */
#include "cairn/shared_tier.h"
cairn_tier_store_t *test_redis_store(const char *url, int variant, const cairn_shared_tier_config_t *cfg);

#endif
