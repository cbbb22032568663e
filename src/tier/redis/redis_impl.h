/*
 * redis_impl.h — private: the Redis store's parts, shared by redis_url.c (the URL),
 * redis_conn.c (one connection and its reply objects), redis_store.c (keys, the key
 * cache, reads, the interface) and redis_writer.c (the write queue and the I/O thread).
 *
 * Threads and what each owns (the ThreadSanitizer stage checks these):
 *   - `rd_mu` guards the read connection `rd` and the FIFO `ahead` of GETs sent on it
 *     whose replies are not read yet. Readers (contains excepted) run on the caller's
 *     thread (the engine thread) holding rd_mu for the whole operation, so pipelined
 *     replies are consumed in the order they were asked for.
 *   - `mu` guards everything else that changes: `up`, `stop`, the write queue and its
 *     byte count, the key cache, the counters and the log-once flags; with cv_work (the
 *     I/O thread's wake-up), cv_room (a put waiting for queue room) and cv_idle (flush).
 *   - The I/O thread alone owns the write connection `wr` and the backoff state.
 *   - Immutable after create: the URL, credentials, TTL, timeouts, fingerprint, layout.
 * Lock order: rd_mu before mu; mu is never held across network I/O (rd_mu is: it is the
 * read connection's lock).
 */
#ifndef CAIRN_REDIS_IMPL_H
#define CAIRN_REDIS_IMPL_H

#include <pthread.h>
#include <hiredis/hiredis.h>

#include "cairn/shared_tier.h"
#include "tier/tier_object.h"
#include "util/util.h"

/* ---- URL (redis_url.c) ------------------------------------------------------------ */

typedef struct {
    char host[256];            /* without brackets for IPv6 */
    int port;
    int db;
    bool tls;                  /* rediss:// */
    char text[300];            /* normalized, no credentials: redis://host:port/db */
} redis_url_t;

/* Parses redis://HOST[:PORT][/DB] (and rediss://). CAIRN_EINVAL with a message naming the
 * problem; the TLS check is the caller's (redis_url_supported). */
int redis_url_parse(const char *url, redis_url_t *out, char *err, size_t err_len);
/* CAIRN_OK, or CAIRN_EUNSUPPORTED with a message when this build cannot reach u (TLS). */
int redis_url_supported(const redis_url_t *u, char *err, size_t err_len);

/* ---- Connection and replies (redis_conn.c) ---------------------------------------- */

/* A reply, built by the connection's own hiredis object functions (through cairn_malloc). */
typedef struct rreply {
    int type;                  /* REDIS_REPLY_* */
    long long integer;
    size_t len;                /* string length */
    char *str;                 /* a copy of a string kept (KEEP mode, nested strings), else NULL */
    char text[112];            /* STATUS / ERROR text, truncated (logs) */
    bool decoded;              /* a top-level string went through the decoder */
    int outcome;               /* the decoder's result */
    struct rreply **element;   /* ARRAY */
    size_t elements;
} rreply_t;

/* How a connection takes the next top-level string reply. */
typedef struct {
    /* DECODE: called with the whole value while hiredis still holds it (no copy made);
     * returns the outcome stored in the reply. */
    int (*decode)(void *user, const char *str, size_t len);
    void *user;
    bool discard;              /* true: keep nothing of the string (a prefetched reply dropped) */
} redis_sink_t;

typedef struct redis_conn {
    redisContext *ctx;
    redis_sink_t sink;         /* the reader's privdata points at the connection */
} redis_conn_t;

/* Why an operation failed without a reply. */
typedef enum {
    REDIS_FAULT_NONE = 0,
    REDIS_FAULT_TIMEOUT,       /* past the per-I/O timeout */
    REDIS_FAULT_IO,            /* reset, closed, protocol error */
    REDIS_FAULT_NOMEM,
} redis_fault_t;

/* Connects (timeout_ms for the connection and every later I/O), authenticates, selects
 * the DB and pings. CAIRN_EIO with a message (never the password) or CAIRN_ENOMEM. */
int redis_conn_open(const redis_url_t *u, const char *username, const char *password, uint32_t timeout_ms,
                    redis_conn_t **out, char *err, size_t err_len);
void redis_conn_close(redis_conn_t *c);
/* Appends a command to the output buffer (a pipeline). CAIRN_ENOMEM on failure. */
int redis_conn_append(redis_conn_t *c, int argc, const char **argv, const size_t *lens);
/* Writes the whole output buffer without reading. 0 or the fault. */
redis_fault_t redis_conn_send(redis_conn_t *c);
/* The next reply (flushing the output first); NULL with *fault set on failure, after
 * which the connection is unusable. */
rreply_t *redis_conn_reply(redis_conn_t *c, redis_fault_t *fault);
/* One command and its reply (argv form). */
rreply_t *redis_conn_call(redis_conn_t *c, redis_fault_t *fault, int argc, const char **argv, const size_t *lens);
void rreply_free(rreply_t *r);
/* The fault's name for logs ("timeout", ...). */
const char *redis_fault_name(redis_fault_t f);

/* ---- The store (redis_store.c, redis_writer.c) ------------------------------------ */

#define REDIS_KEY_MAX 240          /* cairn:<64>:<64>:<64>:<group>[:state] */
#define REDIS_AHEAD_MAX 32         /* GETs sent ahead of their read, at most */
#define REDIS_KNOWN_SETS (1u << 14)/* key cache: sets of REDIS_KNOWN_WAYS entries */
#define REDIS_KNOWN_WAYS 4

/* One key the store knows about: written by it, or seen on the server. */
typedef struct {
    uint64_t lo, hi;           /* XXH3-128 of the key (0, 0: an empty slot) */
    uint64_t stamp_ms;         /* when it was last confirmed (PRESENT) or queued (PENDING) */
    uint8_t state;             /* KNOWN_PENDING, KNOWN_PRESENT */
} redis_known_t;

enum { KNOWN_NONE = 0, KNOWN_PENDING = 1, KNOWN_PRESENT = 2 };

/* One accepted write: the key text and the object's bytes (header + payload). */
typedef struct redis_job {
    struct redis_job *next;
    cairn_tier_key_t key;
    char keytxt[REDIS_KEY_MAX];
    size_t keylen;
    uint8_t *value;
    size_t len;
    uint8_t tries;             /* batches it was sent in without a reply */
} redis_job_t;

typedef struct {
    uint32_t n_layers;
    uint64_t *layer_bytes;
    uint64_t payload_bytes;
} redis_group_t;

typedef struct redis_store {
    cairn_tier_store_t base;   /* first: the tier interface */

    /* Immutable after create. */
    redis_url_t url;
    char *username, *password;
    uint32_t ttl_s, timeout_ms, confirm_ms;
    uint64_t queue_cap;
    cairn_tier_hash_t fp;
    char fp_hex[65];
    cairn_dtype_t dtype;
    uint32_t block_tokens, n_groups;   /* n_groups 0: layout "any" */
    redis_group_t *groups;
    bool count_objects;        /* stats counts the keys on the server (tools, tests) */

    /* Read side (rd_mu). */
    pthread_mutex_t rd_mu;
    redis_conn_t *rd;          /* NULL while unreachable */
    cairn_tier_key_t ahead[REDIS_AHEAD_MAX]; /* GETs sent, replies unread, oldest first */
    size_t ahead_n;

    /* Shared state (mu). */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_room, cv_idle;
    bool up, stop;
    redis_job_t *head, *tail;  /* accepted, not yet sent */
    uint32_t queued_n, inflight_n;
    uint64_t queued_bytes;     /* of queued and in-flight jobs */
    redis_known_t *known;      /* [REDIS_KNOWN_SETS * REDIS_KNOWN_WAYS] */
    cairn_shared_tier_stats_t c;
    char logged_errors[8][16]; /* error reply codes ("OOM", "READONLY") logged since the last connect */
    uint64_t down_since_ms;

    /* I/O thread (its own). */
    pthread_t io;
    bool io_started;
    redis_conn_t *wr;
    uint32_t backoff_ms;
} redis_store_t;

/* Milliseconds on the monotonic clock (util's), as the store's integer stamps. */
static inline uint64_t redis__now_ms(void) { return (uint64_t)cairn_now_ms(); }
/* Writes the key text of k into out (REDIS_KEY_MAX); returns its length. */
size_t redis__key_text(const redis_store_t *s, const cairn_tier_key_t *k, char *out);
/* Key cache. Caller holds mu. */
int redis__known_get_locked(redis_store_t *s, const cairn_tier_key_t *k);   /* KNOWN_* (stale PRESENT: NONE) */
void redis__known_set_locked(redis_store_t *s, const cairn_tier_key_t *k, int state);
void redis__known_clear_locked(redis_store_t *s);
/* The server became unreachable (an op failed with `f`, or a connection attempt): counts
 * the fault and, on the transition, the outage (logged once). Caller holds mu. */
void redis__fault_locked(redis_store_t *s, redis_fault_t f, const char *what);
/* Whether an error reply with this text is the first of its code since the last connect
 * (then it is remembered and should be logged). Caller holds mu. */
bool redis__first_error_locked(redis_store_t *s, const char *text);
/* Read side: drops the read connection after a fault (caller holds rd_mu, not mu). */
void redis__drop_reader(redis_store_t *s, redis_fault_t f, const char *what);

/* Writer (redis_writer.c). */
int redis__writer_start(redis_store_t *s);
/* Stops the I/O thread after it wrote what is queued (when reachable). */
void redis__writer_stop(redis_store_t *s);
int redis__enqueue(redis_store_t *s, const cairn_tier_object_t *obj, uint32_t wait_ms, bool *queued);
void redis__flush(redis_store_t *s);
/* Connects both connections (the write one to s->wr, the read one installed under
 * rd_mu) and marks the store reachable, forgetting the key cache. Called by create before
 * the I/O thread starts, then by the I/O thread alone (wr is its own). Returns 0, or
 * CAIRN_EIO / CAIRN_ENOMEM with the reason in err. */
int redis__connect(redis_store_t *s, char *err, size_t err_len);

#endif
