/*
 * cairn/shared_tier.h — a cache tier shared by several machines (Redis), and the tier
 * order that puts it behind the local one: hot pool -> local SSD store -> shared store.
 *
 * Model. A shared store is one more store of cairn/tier_store.h (src/tier/redis): the same
 * objects (BLOCK and STATE, the same bytes as on disk, header and XXH3-128 checksums
 * verified on every read) under keys that begin with the model fingerprint and the tenant
 * domain, so several `cairn serve` processes of the same model share each other's blocks
 * and no tenant can name another's. A layered store composes a local and a shared store
 * behind the same interface (src/tier/layered): a local hit never asks the shared store;
 * a block only the shared store holds is read from it and then written to the local one;
 * captures go to both. Nothing here changes the store interface: the engine walks the
 * layered store like any other.
 *
 * Faults. A shared store never fails what it serves: Redis down at start, killed, restarted
 * empty, slow, or a value truncated or replaced is a counted and logged miss (the request
 * computes instead); writes are asynchronous (a slow or down Redis never stalls decoding)
 * and the store reconnects in the background with exponential backoff.
 *
 * Thread-safety: the stores are thread-safe like every store (tier_store.h); the
 * configuration helpers are reentrant.
 */
#ifndef CAIRN_SHARED_TIER_H
#define CAIRN_SHARED_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cairn/tier_store.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CAIRN_SHARED_TIER_DEFAULT_TTL_S 86400u
#define CAIRN_SHARED_TIER_DEFAULT_TIMEOUT_MS 250u
#define CAIRN_SHARED_TIER_DEFAULT_QUEUE_MIB 256u

/* How to reach a shared tier. Strings are borrowed for the open call (copied). */
typedef struct {
    /* redis://HOST[:PORT][/DB] (port 6379, DB 0 by default; HOST a name, an IPv4 address
     * or [IPv6]). rediss:// (TLS) needs a hiredis built with SSL: this build reports a
     * clear error when it has none. Credentials in the URL are refused: they would show
     * in `ps`; use username/password, which the CLI reads from a file or the environment. */
    const char *url;
    const char *username;      /* Redis 6 ACL user, or NULL (AUTH password only) */
    const char *password;      /* AUTH, or NULL */
    /* Lifetime of each key written (SET ... PX): knob CAIRN_SHARED_TIER_TTL_S > this (when
     * has_ttl) > 1 day; 0: no expiry (Redis maxmemory + allkeys-lru then bounds it). */
    bool has_ttl;
    uint32_t ttl_s;
    uint32_t timeout_ms;       /* connect and per-I/O timeout; 0: knob CAIRN_SHARED_TIER_TIMEOUT_MS > 250 */
    uint64_t queue_bytes;      /* bytes of objects awaiting their write; 0: knob CAIRN_SHARED_TIER_QUEUE_MIB (MiB) > 256 MiB */
    /* The store's stats report `objects` and `used_bytes` by counting this model's keys on
     * the server (a SCAN per stats call: tools and tests only). false: both stay 0 (the
     * server's memory is shared; `cairn cache stats --shared-tier` counts them). */
    bool count_objects;
} cairn_shared_tier_config_t;

/* One cache group's block layout: the K+V bytes of one block in each of its layers. */
typedef struct {
    uint32_t n_layers;
    const uint64_t *layer_bytes;   /* [n_layers] (copied) */
} cairn_tier_group_layout_t;

/* What a shared store holds: one model's objects, each BLOCK of group g checked against
 * groups[g] (element type, tokens per block, every layer's size). */
typedef struct {
    cairn_tier_hash_t fingerprint;
    cairn_dtype_t dtype;
    uint32_t block_tokens;
    /* 0: layout "any" (tools such as `cairn cache`: every self-consistent object of the
     * fingerprint is accepted; reads into a destination need a layout). */
    uint32_t n_groups;
    const cairn_tier_group_layout_t *groups;  /* [n_groups] (copied) */
} cairn_tier_layout_t;

/*
 * Parses the URL alone (no connection): CAIRN_OK for a usable redis:// URL;
 * CAIRN_EUNSUPPORTED for rediss:// without TLS support or another scheme; CAIRN_EINVAL
 * for anything malformed (credentials in it included). err (may be NULL) receives a
 * one-line message naming the problem. Reentrant.
 */
int cairn_shared_tier_check_url(const char *url, char *err, size_t err_len);

/*
 * Reads AUTH credentials: from `file` when non-NULL (its first line: "PASSWORD" or
 * "USERNAME PASSWORD"; the file should be mode 0600), else from the environment variable
 * CAIRN_SHARED_TIER_AUTH (same format), else none (*username and *password NULL). The
 * caller frees both with cairn_free. Errors: CAIRN_EIO (the file cannot be read),
 * CAIRN_EINVAL (empty or more than two words), CAIRN_ENOMEM; err receives a message that
 * never contains the secret.
 */
int cairn_shared_tier_read_auth(const char *file, char **username, char **password, char *err, size_t err_len);

/*
 * Opens the shared store named by cfg->url for one model (layout). A store whose server is
 * unreachable still opens (logged once, counted as an outage) and connects in the
 * background with backoff; until then it holds nothing. Owned by the caller
 * (cairn_tier_store_destroy). Errors: CAIRN_EINVAL / CAIRN_EUNSUPPORTED (the URL, as
 * cairn_shared_tier_check_url), CAIRN_EINVAL (bad layout), CAIRN_ENOMEM; err receives a
 * message. Cost: one connection attempt of at most the timeout.
 */
int cairn_shared_tier_open(const cairn_shared_tier_config_t *cfg, const cairn_tier_layout_t *layout,
                           cairn_tier_store_t **out, char *err, size_t err_len);

/* A shared store's own counters, besides the interface's. Every fault is counted here
 * and logged once (an outage when it begins and when it ends, each bad value, the first
 * error reply of a run). */
typedef struct {
    cairn_tier_stats_t tier;   /* the interface's counters (hits, corruptions, write_errors ...) */
    bool connected;            /* the store believes the server reachable */
    const char *url;           /* the URL, without credentials; valid while the store lives */
    uint32_t ttl_s;
    uint64_t outages;          /* reachable -> unreachable transitions */
    uint64_t reconnects;       /* unreachable -> reachable transitions */
    uint64_t connect_failures; /* connection attempts that failed (retried with backoff) */
    uint64_t timeouts;         /* operations that ran past the timeout (the connection is dropped) */
    uint64_t io_errors;        /* other connection errors (reset, closed) */
    uint64_t server_errors;    /* error replies (OOM, NOAUTH, LOADING, READONLY ...) */
    uint64_t unavailable;      /* operations answered without the server while unreachable */
    uint64_t faults;           /* timeouts + io_errors + server_errors + connect failures + corruptions */
} cairn_shared_tier_stats_t;

/* Copies a shared store's counters. Errors: CAIRN_EINVAL when s is not a shared store
 * (*out zeroed). Thread-safe, O(1). */
int cairn_shared_tier_stats(cairn_tier_store_t *s, cairn_shared_tier_stats_t *out);

/* Calls fn with the fingerprint of every model that has keys on the shared tier (a SCAN of
 * cairn:*; tools). Errors: CAIRN_EIO (unreachable), CAIRN_ENOMEM; err receives a message. */
int cairn_shared_tier_list_models(const cairn_shared_tier_config_t *cfg,
                                  int (*fn)(void *user, const cairn_tier_hash_t *fingerprint), void *user,
                                  char *err, size_t err_len);

/* The server's memory figures, for `cairn cache stats` (from INFO memory / CONFIG). */
typedef struct {
    uint64_t used_memory, maxmemory, evicted_keys, expired_keys;
    char policy[32];           /* maxmemory-policy, e.g. "allkeys-lru" */
    char version[32];          /* redis_version */
} cairn_shared_tier_server_t;

/* Asks the server of a shared store for its memory figures. Errors: CAIRN_EINVAL (not a
 * shared store), CAIRN_EIO (unreachable or refused). */
int cairn_shared_tier_server_info(cairn_tier_store_t *s, cairn_shared_tier_server_t *out);

/* ---- Tier order ------------------------------------------------------------------- */

/*
 * A store that puts `local` in front of `remote` (both borrowed: they must outlive it and
 * are not destroyed by it):
 *     contains      both hold it (so a capture writes whichever tier lacks it);
 *     chain_length  local's chain, then remote's from where local's ends (a key local
 *                   holds is never asked of remote);
 *     get           local first; only when local misses (absent or invalid) remote, and a
 *                   remote hit is put into local (wait 0: a full local queue drops it,
 *                   counted; the turn's capture walk writes it later);
 *     put           to each tier that lacks it: local with wait_ms, remote never waiting;
 *                   the result is local's (remote's refusals are its own counters), or
 *                   remote's for a kind local does not hold;
 *     prefetch      local all, remote the run of keys local lacks; flush both;
 *     stats         the sum of both (root: local's). No maintenance ops.
 * Errors: CAIRN_EINVAL (NULL tiers), CAIRN_ENOMEM.
 */
int cairn_tier_layered_create(cairn_tier_store_t *local, cairn_tier_store_t *remote, cairn_tier_store_t **out);

typedef struct {
    uint64_t local_hits;       /* gets served by the local tier */
    uint64_t remote_hits;      /* gets served by the remote tier (local had no valid object) */
    uint64_t promoted;         /* remote hits written to the local tier */
    uint64_t promote_drops;    /* remote hits the local tier did not take (queue full ...) */
} cairn_tier_layered_counters_t;

/* Copies a layered store's counters. Errors: CAIRN_EINVAL when s is not one (zeroed). */
int cairn_tier_layered_counters(cairn_tier_store_t *s, cairn_tier_layered_counters_t *out);

#ifdef __cplusplus
}
#endif
#endif /* CAIRN_SHARED_TIER_H */
