/*
 * redis_conn.c — one blocking hiredis connection of the Redis store and the reply objects
 * built on it.
 *
 * Model: a connection is a hiredis blocking context with a connect timeout and a per-I/O
 * timeout (SO_RCVTIMEO/SO_SNDTIMEO: a stalled server ends an operation with a timeout
 * instead of hanging the caller), authenticated (AUTH [user] password), on its database
 * (SELECT) and checked (PING) before it is handed out. hiredis parses the protocol; its
 * reply objects are replaced by our own (rreply_t, allocated through cairn_malloc) so that
 * a GET's value is decoded where hiredis holds it: the connection's sink decides, per
 * top-level string reply, whether the bytes go through a decoder (validated and copied
 * straight into the caller's destination, pool memory for a restore: no reply-sized
 * allocation), are dropped (a prefetched reply no read wants any more) or are kept.
 * After any fault (timeout, reset, protocol error, out of memory) a hiredis context is
 * unusable; the store closes it and connects anew. Writing to a connection the server
 * closed raises SIGPIPE, whose default action ends the process; a library must not change
 * the process's dispositions, so every write runs with SIGPIPE blocked in the calling
 * thread and a SIGPIPE it raised is consumed before the mask is restored (EPIPE remains).
 * Thread-safety: a connection is used by one thread at a time (its owner's lock).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "tier/redis/redis_impl.h"

/* Unused reader buffer hiredis keeps between replies (a restore pipelines blocks of a few
 * MiB each; above this the buffer is freed when idle). */
#define READER_KEEP_BYTES (4u << 20)

/* ---- reply objects (hiredis object functions) ---- */

static rreply_t *new_reply(const redisReadTask *task)
{
    rreply_t *r = cairn_calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->type = task->type;
    if (task->parent) {
        rreply_t *parent = task->parent->obj;
        parent->element[task->idx] = r;
    }
    return r;
}

static void *create_string(const redisReadTask *task, char *str, size_t len)
{
    redis_conn_t *c = task->privdata;
    rreply_t *r = new_reply(task);
    if (!r)
        return NULL;
    r->len = len;
    bool top = !task->parent;
    if (task->type == REDIS_REPLY_STRING && top && c->sink.decode) {
        r->decoded = true;
        r->outcome = c->sink.decode(c->sink.user, str, len);
    } else if (task->type == REDIS_REPLY_STRING && top && c->sink.discard) {
        /* nothing kept */
    } else if (task->type == REDIS_REPLY_STRING) {
        if (!(r->str = cairn_malloc(len + 1))) {
            if (task->parent)
                ((rreply_t *)task->parent->obj)->element[task->idx] = NULL;
            cairn_free(r);
            return NULL;
        }
        memcpy(r->str, str, len);
        r->str[len] = '\0';
    } else {
        size_t n = len < sizeof r->text - 1 ? len : sizeof r->text - 1;
        memcpy(r->text, str, n);
        r->text[n] = '\0';
    }
    return r;
}

static void *create_array(const redisReadTask *task, int elements)
{
    rreply_t *r = new_reply(task);
    if (!r)
        return NULL;
    r->type = REDIS_REPLY_ARRAY;
    if (elements > 0) {
        r->element = cairn_calloc((size_t)elements, sizeof *r->element);
        if (!r->element) {
            if (task->parent)
                ((rreply_t *)task->parent->obj)->element[task->idx] = NULL;
            cairn_free(r);
            return NULL;
        }
        r->elements = (size_t)elements;
    }
    return r;
}

static void *create_integer(const redisReadTask *task, long long value)
{
    rreply_t *r = new_reply(task);
    if (r) {
        r->type = REDIS_REPLY_INTEGER;
        r->integer = value;
    }
    return r;
}

static void *create_nil(const redisReadTask *task)
{
    /* hiredis calls this with the task's type still that of the bulk or multi-bulk. */
    rreply_t *r = new_reply(task);
    if (r)
        r->type = REDIS_REPLY_NIL;
    return r;
}

void rreply_free(rreply_t *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->elements; i++)
        rreply_free(r->element[i]);
    cairn_free(r->element);
    cairn_free(r->str);
    cairn_free(r);
}

static void free_object(void *p) { rreply_free(p); }

static redisReplyObjectFunctions reply_fns = {create_string, create_array, create_integer, create_nil,
                                              free_object};

/* ---- faults ---- */

const char *redis_fault_name(redis_fault_t f)
{
    switch (f) {
    case REDIS_FAULT_NONE:
        return "no fault";
    case REDIS_FAULT_TIMEOUT:
        return "timeout";
    case REDIS_FAULT_IO:
        return "connection error";
    case REDIS_FAULT_NOMEM:
        return "out of memory";
    }
    return "unknown fault";
}

/* Classifies the context's error right after a failed call (errno still that of the I/O). */
static redis_fault_t fault_of(const redisContext *ctx, int saved_errno)
{
    if (ctx->err == REDIS_ERR_OOM)
        return REDIS_FAULT_NOMEM;
    if (ctx->err == REDIS_ERR_IO &&
        (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK || saved_errno == ETIMEDOUT || saved_errno == EINPROGRESS))
        return REDIS_FAULT_TIMEOUT;
    return REDIS_FAULT_IO;
}

/* ---- SIGPIPE ---- */

typedef struct {
    sigset_t old;
    bool was_pending;
} pipe_guard_t;

static void pipe_block(pipe_guard_t *g)
{
    sigset_t pipe_set, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigemptyset(&pending);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &g->old);
    g->was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
}

static void pipe_restore(pipe_guard_t *g)
{
    sigset_t pipe_set, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigemptyset(&pending);
    if (!g->was_pending && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
        const struct timespec zero = {0, 0};
        int saved = errno;
        (void)sigtimedwait(&pipe_set, NULL, &zero);
        errno = saved;
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/* ---- connection ---- */

static struct timeval tv_of(uint32_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000u), (suseconds_t)(ms % 1000u) * 1000};
    return tv;
}

/* Runs one setup command; 0 when its reply is not an error. */
static int setup_call(redis_conn_t *c, const char *what, int argc, const char **argv, const size_t *lens, char *err,
                      size_t err_len)
{
    redis_fault_t f = REDIS_FAULT_NONE;
    rreply_t *r = redis_conn_call(c, &f, argc, argv, lens);
    if (!r) {
        cairn_errf(err, err_len, "%s: %s (%s)", what, redis_fault_name(f), c->ctx->errstr);
        return f == REDIS_FAULT_NOMEM ? CAIRN_ENOMEM : CAIRN_EIO;
    }
    int rc = CAIRN_OK;
    if (r->type == REDIS_REPLY_ERROR) {
        cairn_errf(err, err_len, "%s refused: %s", what, r->text);
        rc = CAIRN_EIO;
    }
    rreply_free(r);
    return rc;
}

int redis_conn_open(const redis_url_t *u, const char *username, const char *password, uint32_t timeout_ms,
                    redis_conn_t **out, char *err, size_t err_len)
{
    *out = NULL;
    redis_conn_t *c = cairn_calloc(1, sizeof *c);
    if (!c) {
        cairn_errf(err, err_len, "out of memory");
        return CAIRN_ENOMEM;
    }
    int rc = CAIRN_EIO;
    c->ctx = redisConnectWithTimeout(u->host, u->port, tv_of(timeout_ms));
    if (!c->ctx) {
        cairn_errf(err, err_len, "cannot allocate a connection");
        rc = CAIRN_ENOMEM;
        goto fail;
    }
    if (c->ctx->err) {
        cairn_errf(err, err_len, "cannot connect to %s:%d: %s", u->host, u->port, c->ctx->errstr);
        goto fail;
    }
    if (redisSetTimeout(c->ctx, tv_of(timeout_ms)) != REDIS_OK) {
        cairn_errf(err, err_len, "cannot set the I/O timeout: %s", c->ctx->errstr);
        goto fail;
    }
    (void)redisEnableKeepAlive(c->ctx);
    c->ctx->reader->fn = &reply_fns;
    c->ctx->reader->privdata = c;
    c->ctx->reader->maxbuf = READER_KEEP_BYTES;
    if (password) {
        const char *argv[3] = {"AUTH", username ? username : password, password};
        size_t lens[3] = {4, strlen(argv[1]), strlen(password)};
        if ((rc = setup_call(c, "AUTH", username ? 3 : 2, argv, lens, err, err_len)))
            goto fail;
    }
    if (u->db) {
        char db[16];
        int n = snprintf(db, sizeof db, "%d", u->db);
        const char *argv[2] = {"SELECT", db};
        size_t lens[2] = {6, (size_t)n};
        if ((rc = setup_call(c, "SELECT", 2, argv, lens, err, err_len)))
            goto fail;
    }
    const char *ping[1] = {"PING"};
    size_t ping_len[1] = {4};
    if ((rc = setup_call(c, "PING", 1, ping, ping_len, err, err_len)))
        goto fail;
    *out = c;
    return CAIRN_OK;
fail:
    redis_conn_close(c);
    return rc;
}

void redis_conn_close(redis_conn_t *c)
{
    if (!c)
        return;
    if (c->ctx)
        redisFree(c->ctx);
    cairn_free(c);
}

int redis_conn_append(redis_conn_t *c, int argc, const char **argv, const size_t *lens)
{
    return redisAppendCommandArgv(c->ctx, argc, argv, lens) == REDIS_OK ? CAIRN_OK : CAIRN_ENOMEM;
}

redis_fault_t redis_conn_send(redis_conn_t *c)
{
    int done = 0;
    redis_fault_t f = REDIS_FAULT_NONE;
    pipe_guard_t g;
    pipe_block(&g);
    do {
        errno = 0;
        if (redisBufferWrite(c->ctx, &done) != REDIS_OK) {
            f = fault_of(c->ctx, errno);
            break;
        }
    } while (!done);
    pipe_restore(&g);
    return f;
}

rreply_t *redis_conn_reply(redis_conn_t *c, redis_fault_t *fault)
{
    void *r = NULL;
    /* Only a pending output buffer is written (its commands start with '*'); a read
     * needs no guard, and a restore reads far more replies than it sends commands. */
    bool writes = c->ctx->obuf && c->ctx->obuf[0];
    pipe_guard_t g;
    if (writes)
        pipe_block(&g);
    errno = 0;
    int rc = redisGetReply(c->ctx, &r);
    int saved = errno;
    if (writes)
        pipe_restore(&g);
    if (rc != REDIS_OK || !r) {
        *fault = fault_of(c->ctx, saved);
        return NULL;
    }
    *fault = REDIS_FAULT_NONE;
    return r;
}

rreply_t *redis_conn_call(redis_conn_t *c, redis_fault_t *fault, int argc, const char **argv, const size_t *lens)
{
    if (redis_conn_append(c, argc, argv, lens)) {
        *fault = REDIS_FAULT_NOMEM;
        return NULL;
    }
    return redis_conn_reply(c, fault);
}
