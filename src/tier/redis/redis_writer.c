/*
 * redis_writer.c — the Redis store's asynchronous writes and its I/O thread (connection,
 * reconnection with backoff).
 *
 * Model. A put copies the object into its byte form (header + payload, FORMAT.md 1.2 or
 * 1.8) in a job and queues it; the caller's pool block may be recycled at once, and the
 * caller never waits for the network: only for queue room, and only as long as it asked
 * (the layered store asks for none). The queue is bounded in bytes (queue_cap). One I/O
 * thread takes up to BATCH_JOBS jobs (BATCH_BYTES) at a time and pipelines them as
 * `SET key value [PX ttl] NX` on its own connection, then reads the replies: OK (written),
 * nil (the key exists: another process wrote it; never rewritten, so no request of any
 * domain can overwrite a key), or an error reply (OOM under maxmemory with noeviction,
 * READONLY on a replica ...: counted as write errors, the first of a run logged).
 * While the server is unreachable puts are refused at once (counted as unavailable), and
 * jobs already queued wait for the reconnect: a server that restarted empty is filled
 * again by them. A job whose batch failed before its reply is sent again once; a second
 * failure counts it as a write error.
 * Reconnection: the thread retries at once after an outage, then after 100 ms, doubling to
 * 5 s, until both connections open (AUTH, SELECT, PING); the outage was logged when it
 * began and the reconnect is logged once.
 * Thread-safety: see redis_impl.h (wr and the backoff are the thread's own; the queue is
 * under mu).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tier/redis/redis_impl.h"

#define BATCH_JOBS 32
#define BATCH_BYTES (16u << 20)
#define BACKOFF_FIRST_MS 100u
#define BACKOFF_MAX_MS 5000u

/* Waits on cv until the monotonic deadline (ms); returns false once it passed. */
static bool wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t deadline_ms)
{
    uint64_t now = redis__now_ms();
    if (now >= deadline_ms)
        return false;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (deadline_ms - now) * 1000000u;
    ts.tv_sec += (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    pthread_cond_timedwait(cv, mu, &ts);
    return true;
}

int redis__connect(redis_store_t *s, char *err, size_t err_len)
{
    redis_conn_t *w = NULL, *r = NULL;
    int rc = redis_conn_open(&s->url, s->username, s->password, s->timeout_ms, &w, err, err_len);
    if (rc)
        return rc;
    if ((rc = redis_conn_open(&s->url, s->username, s->password, s->timeout_ms, &r, err, err_len))) {
        redis_conn_close(w);
        return rc;
    }
    redis_conn_close(s->wr);
    s->wr = w;
    pthread_mutex_lock(&s->rd_mu);
    redis_conn_close(s->rd);
    s->rd = r;
    s->ahead_n = 0;
    pthread_mutex_unlock(&s->rd_mu);
    pthread_mutex_lock(&s->mu);
    bool was_down = s->c.outages > 0;
    double down_s = was_down ? (double)(redis__now_ms() - s->down_since_ms) / 1e3 : 0;
    s->up = true;
    memset(s->logged_errors, 0, sizeof s->logged_errors);
    /* The server may have restarted empty or evicted while we could not see it. */
    redis__known_clear_locked(s);
    /* Logged under mu, as the outage is: whoever sees the store reachable again also
     * finds the reconnect logged. */
    if (was_down) {
        s->c.reconnects++;
        cairn_log(CAIRN_LOG_WARN, "shared tier: reconnected to %s after %.1f s", s->url.text, down_s);
    }
    pthread_cond_broadcast(&s->cv_room);
    pthread_mutex_unlock(&s->mu);
    return CAIRN_OK;
}

/* ---- puts ---- */

/* Checks obj against the layout and builds its job (byte form + key). */
static int make_job(redis_store_t *s, const cairn_tier_object_t *obj, redis_job_t **out)
{
    *out = NULL;
    size_t hb = 0;
    if (obj->key.kind == CAIRN_TIER_BLOCK) {
        if (!s->n_groups)
            return CAIRN_EINVAL; /* layout "any": no layer sizes to write */
        const redis_group_t *g = &s->groups[obj->key.group];
        if (obj->n_tokens != s->block_tokens || !obj->tokens || obj->payload_size != g->payload_bytes ||
            !obj->payload)
            return CAIRN_EINVAL;
        hb = tier_object_header_size(obj->n_tokens, g->n_layers);
    } else {
        if (!obj->boundary || obj->layout_size > TIER_STATE_MAX_LAYOUT ||
            (uint64_t)obj->payload_size > TIER_OBJECT_MAX_PAYLOAD)
            return CAIRN_EINVAL;
        hb = tier_state_header_size(obj->layout_size);
    }
    redis_job_t *j = cairn_calloc(1, sizeof *j);
    if (!j)
        return CAIRN_ENOMEM;
    j->len = hb + obj->payload_size;
    if (!(j->value = cairn_malloc(j->len))) {
        cairn_free(j);
        return CAIRN_ENOMEM;
    }
    size_t got = 0;
    int rc = obj->key.kind == CAIRN_TIER_BLOCK
                 ? tier_object_encode_header(j->value, hb, &s->fp, s->dtype, s->groups[obj->key.group].n_layers,
                                             s->groups[obj->key.group].layer_bytes, obj, &got)
                 : tier_state_encode_header(j->value, hb, &s->fp, obj, &got);
    if (rc || got != hb) {
        cairn_free(j->value);
        cairn_free(j);
        return rc ? rc : CAIRN_EINVAL;
    }
    if (obj->payload_size)
        memcpy(j->value + hb, obj->payload, obj->payload_size);
    j->key = obj->key;
    j->keylen = redis__key_text(s, &obj->key, j->keytxt);
    *out = j;
    return CAIRN_OK;
}

static void job_free(redis_job_t *j)
{
    cairn_free(j->value);
    cairn_free(j);
}

int redis__enqueue(redis_store_t *s, const cairn_tier_object_t *obj, uint32_t wait_ms, bool *queued)
{
    if (queued)
        *queued = false;
    pthread_mutex_lock(&s->mu);
    bool have = redis__known_get_locked(s, &obj->key) != KNOWN_NONE, up = s->up && !s->stop;
    if (!have && !up)
        s->c.unavailable++;
    pthread_mutex_unlock(&s->mu);
    if (have)
        return CAIRN_OK;
    if (!up)
        return CAIRN_EEXHAUSTED;
    redis_job_t *j;
    int rc = make_job(s, obj, &j);
    if (rc)
        return rc;
    uint64_t deadline = redis__now_ms() + wait_ms;
    pthread_mutex_lock(&s->mu);
    if (redis__known_get_locked(s, &obj->key) != KNOWN_NONE) { /* a concurrent put won */
        pthread_mutex_unlock(&s->mu);
        job_free(j);
        return CAIRN_OK;
    }
    while (s->up && !s->stop && s->queued_bytes + j->len > s->queue_cap) {
        if (!wait_ms || !wait_until(&s->cv_room, &s->mu, deadline)) {
            s->c.tier.queue_drops++;
            pthread_mutex_unlock(&s->mu);
            job_free(j);
            return CAIRN_EEXHAUSTED;
        }
    }
    if (!s->up || s->stop) {
        s->c.unavailable++;
        pthread_mutex_unlock(&s->mu);
        job_free(j);
        return CAIRN_EEXHAUSTED;
    }
    if (s->tail)
        s->tail->next = j;
    else
        s->head = j;
    s->tail = j;
    s->queued_n++;
    s->queued_bytes += j->len;
    s->c.tier.enqueued++;
    redis__known_set_locked(s, &obj->key, KNOWN_PENDING);
    pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&s->mu);
    if (queued)
        *queued = true;
    return CAIRN_OK;
}

void redis__flush(redis_store_t *s)
{
    pthread_mutex_lock(&s->mu);
    while ((s->head || s->inflight_n) && s->up && !s->stop)
        pthread_cond_wait(&s->cv_idle, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* ---- the I/O thread ---- */

/* Sends one batch; returns the fault that ended it (NONE: every reply read). replies[i]
 * receives job i's reply, NULL when none came. */
static redis_fault_t send_batch(redis_store_t *s, redis_job_t **jobs, size_t n, rreply_t **replies)
{
    char px[24];
    int pxl = snprintf(px, sizeof px, "%llu", (unsigned long long)s->ttl_s * 1000ull);
    for (size_t i = 0; i < n; i++) {
        const char *argv[6] = {"SET", jobs[i]->keytxt, (const char *)jobs[i]->value, "PX", px, "NX"};
        size_t lens[6] = {3, jobs[i]->keylen, jobs[i]->len, 2, (size_t)pxl, 2};
        if (!s->ttl_s) {
            argv[3] = "NX";
            lens[3] = 2;
        }
        if (redis_conn_append(s->wr, s->ttl_s ? 6 : 4, argv, lens))
            return REDIS_FAULT_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        redis_fault_t f;
        if (!(replies[i] = redis_conn_reply(s->wr, &f)))
            return f;
    }
    return REDIS_FAULT_NONE;
}

/* Takes a batch off the queue, writes it, accounts the replies. Called with mu held;
 * returns with it held. */
static void write_batch(redis_store_t *s)
{
    redis_job_t *jobs[BATCH_JOBS];
    rreply_t *replies[BATCH_JOBS] = {0};
    size_t n = 0;
    uint64_t bytes = 0;
    while (s->head && n < BATCH_JOBS && (n == 0 || bytes + s->head->len <= BATCH_BYTES)) {
        redis_job_t *j = s->head;
        s->head = j->next;
        if (!s->head)
            s->tail = NULL;
        j->next = NULL;
        jobs[n++] = j;
        bytes += j->len;
    }
    s->queued_n -= (uint32_t)n;
    s->inflight_n += (uint32_t)n;
    pthread_mutex_unlock(&s->mu);

    redis_fault_t f = send_batch(s, jobs, n, replies);
    if (f) {
        redis_conn_close(s->wr);
        s->wr = NULL;
    }
    char first_error[sizeof replies[0]->text] = "";

    pthread_mutex_lock(&s->mu);
    redis_job_t *retry[BATCH_JOBS];
    size_t n_retry = 0;
    for (size_t i = 0; i < n; i++) {
        redis_job_t *j = jobs[i];
        rreply_t *r = replies[i];
        bool done = true;
        if (r && r->type == REDIS_REPLY_STATUS) {
            s->c.tier.bytes_written += j->len;
            redis__known_set_locked(s, &j->key, KNOWN_PRESENT);
        } else if (r && r->type == REDIS_REPLY_NIL) {
            redis__known_set_locked(s, &j->key, KNOWN_PRESENT); /* held already: not rewritten */
        } else if (r) {
            s->c.tier.write_errors++;
            s->c.server_errors++;
            s->c.faults++;
            const char *text = r->type == REDIS_REPLY_ERROR ? r->text : "unexpected reply";
            if (!first_error[0] && redis__first_error_locked(s, text))
                snprintf(first_error, sizeof first_error, "%s", text);
            redis__known_set_locked(s, &j->key, KNOWN_NONE);
        } else if (++j->tries < 2) {
            done = false; /* no reply: sent again after the reconnect */
            retry[n_retry++] = j;
        } else {
            s->c.tier.write_errors++;
            redis__known_set_locked(s, &j->key, KNOWN_NONE);
        }
        rreply_free(r);
        s->inflight_n--;
        if (done) {
            s->queued_bytes -= j->len;
            job_free(j);
        } else {
            s->queued_n++;
        }
    }
    while (n_retry) { /* back to the front, in their order */
        redis_job_t *j = retry[--n_retry];
        j->next = s->head;
        s->head = j;
        if (!s->tail)
            s->tail = j;
    }
    if (f)
        redis__fault_locked(s, f, "SET");
    pthread_cond_broadcast(&s->cv_room);
    if (!s->head && !s->inflight_n)
        pthread_cond_broadcast(&s->cv_idle);
    if (first_error[0]) {
        pthread_mutex_unlock(&s->mu);
        cairn_log(CAIRN_LOG_WARN, "shared tier: write refused by %s: %s (further %.*s refusals are counted, not logged)",
                  s->url.text, first_error, (int)strcspn(first_error, " "), first_error);
        pthread_mutex_lock(&s->mu);
    }
}

static void *io_main(void *arg)
{
    redis_store_t *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (!s->up || !s->wr) {
            if (s->stop)
                break;
            if (s->backoff_ms) {
                uint64_t until = redis__now_ms() + s->backoff_ms;
                while (!s->stop && wait_until(&s->cv_work, &s->mu, until)) {
                }
                if (s->stop)
                    break;
            }
            pthread_mutex_unlock(&s->mu);
            char why[256] = "";
            int rc = redis__connect(s, why, sizeof why);
            pthread_mutex_lock(&s->mu);
            if (rc) {
                s->c.connect_failures++;
                s->c.faults++;
                s->backoff_ms = !s->backoff_ms ? BACKOFF_FIRST_MS
                                : 2 * s->backoff_ms > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : 2 * s->backoff_ms;
            } else {
                s->backoff_ms = 0;
            }
            continue;
        }
        if (!s->head) {
            pthread_cond_broadcast(&s->cv_idle);
            if (s->stop)
                break;
            pthread_cond_wait(&s->cv_work, &s->mu);
            continue;
        }
        write_batch(s);
    }
    pthread_cond_broadcast(&s->cv_idle);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int redis__writer_start(redis_store_t *s)
{
    pthread_mutex_lock(&s->mu);
    if (!s->up)
        s->backoff_ms = BACKOFF_FIRST_MS; /* create's attempt just failed */
    pthread_mutex_unlock(&s->mu);
    if (pthread_create(&s->io, NULL, io_main, s))
        return CAIRN_ENOMEM;
    s->io_started = true;
    return CAIRN_OK;
}

void redis__writer_stop(redis_store_t *s)
{
    if (!s->io_started)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv_work);
    pthread_cond_broadcast(&s->cv_room);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->io, NULL);
    s->io_started = false;
    pthread_mutex_lock(&s->mu);
    if (s->queued_n) {
        s->c.tier.write_errors += s->queued_n;
        cairn_log(CAIRN_LOG_WARN, "shared tier: %u queued writes dropped at close (%s unreachable)", s->queued_n,
                  s->url.text);
    }
    pthread_mutex_unlock(&s->mu);
}
