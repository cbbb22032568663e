/*
 * tier_capture.c — capture: persist a chain's blocks from the front.
 *
 * Two forms over any store:
 *  - cairn_tier_capture_chain, the synchronous per-turn walk within a budget of new objects
 *    and a deadline (the caller's thread copies every payload). The walk asks the store,
 *    block by block from block 0, whether it holds (or has accepted) the object; present
 *    ones cost that metadata probe and spend nothing, new ones are put, each waiting for
 *    room until the deadline. It stops at the first object it could not capture: restore
 *    stops at the first hole, so capturing past one buys nothing.
 *    Invariant: res->reached leading objects are held or accepted when the walk returns,
 *    and res->reached == res->already + res->enqueued.
 *  - the capturer (cairn_tier_capturer_t), a thread that puts objects whose payloads the
 *    owner keeps valid until the job is reaped, so the owner's thread (the engine's) never
 *    copies a payload nor waits for room in the store. Jobs are a FIFO `todo`, the one
 *    being put (`busy`), and a FIFO `done` the owner reaps.
 *    Invariants: every submitted job is in exactly one of todo, busy or done until reaped;
 *    in_flight counts them; a job's payload is read only while it is busy; after stop no
 *    job is busy and todo is empty.
 * Thread-safety: the walk is reentrant (the store's ops are thread-safe); the capturer's
 * lists and counters are guarded by its mutex, which is never held during a put.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "cairn/tier.h"
#include "util/util.h"

int cairn_tier_capture_chain(cairn_tier_store_t *s, size_t n, cairn_tier_object_fn fn, void *user,
                             const cairn_tier_capture_budget_t *budget, cairn_tier_capture_result_t *res)
{
    if (!s || !fn || !res)
        return CAIRN_EINVAL;
    memset(res, 0, sizeof *res);
    bool hb = budget && budget->blocks_per_turn, hm = budget && budget->budget_ms;
    uint64_t max_blocks = (uint64_t)cairn_knob_int("CAIRN_COLD_CAPTURE_BLOCKS_PER_TURN", hb,
                                                   hb ? budget->blocks_per_turn : 0,
                                                   CAIRN_TIER_DEFAULT_CAPTURE_BLOCKS, 0, 1 << 24);
    double budget_ms = (double)cairn_knob_int("CAIRN_COLD_CAPTURE_BUDGET_MS", hm, hm ? budget->budget_ms : 0,
                                              CAIRN_TIER_DEFAULT_CAPTURE_BUDGET_MS, 0, 3600 * 1000);
    double t0 = cairn_now_ms(), deadline = t0 + budget_ms;
    res->stop = CAIRN_TIER_STOP_END;
    for (size_t i = 0; i < n; i++) {
        cairn_tier_object_t obj;
        memset(&obj, 0, sizeof obj);
        if (fn(user, i, &obj) < 0) {
            res->stop = CAIRN_TIER_STOP_CALLBACK;
            break;
        }
        /* An object already held or accepted costs a metadata probe and spends no budget. */
        if (cairn_tier_store_contains(s, &obj.key)) {
            res->already++;
            res->reached++;
            continue;
        }
        if (res->enqueued >= max_blocks) {
            res->stop = CAIRN_TIER_STOP_BUDGET;
            break;
        }
        double now = cairn_now_ms();
        if (now >= deadline) {
            res->stop = CAIRN_TIER_STOP_DEADLINE;
            break;
        }
        bool queued = false;
        int rc = cairn_tier_store_put(s, &obj, (uint32_t)(deadline - now) + 1, &queued);
        if (rc) {
            res->stop = rc == CAIRN_EEXHAUSTED && cairn_now_ms() >= deadline ? CAIRN_TIER_STOP_DEADLINE
                                                                        : CAIRN_TIER_STOP_REFUSED;
            break;
        }
        if (queued)
            res->enqueued++;
        else
            res->already++;
        res->reached++;
    }
    res->elapsed_ms = cairn_now_ms() - t0;
    if (res->stop == CAIRN_TIER_STOP_DEADLINE)
        cairn_log(CAIRN_LOG_WARN, "cold tier: capture stopped at its %.0f ms deadline after %zu new blocks",
                  budget_ms, res->enqueued);
    return CAIRN_OK;
}

/* ---- The capturer ---- */

typedef struct cap_job {
    cairn_tier_object_t obj;   /* tokens and layout point into the copies below; payload borrowed */
    int32_t *tokens;
    uint8_t *layout;
    uint64_t tag;
    int status;
    struct cap_job *next;
} cap_job_t;

typedef struct {
    cap_job_t *head, *tail;
} cap_list_t;

struct cairn_tier_capturer {
    cairn_tier_store_t *store;
    pthread_mutex_t mu;
    pthread_cond_t work;       /* todo got a job, or stop */
    pthread_cond_t finished;   /* done got a job */
    cap_list_t todo, done;
    cap_job_t *busy;
    bool stop, has_thread;
    pthread_t thread;
    cairn_tier_capturer_stats_t st;
};

static void list_push(cap_list_t *l, cap_job_t *j)
{
    j->next = NULL;
    if (l->tail)
        l->tail->next = j;
    else
        l->head = j;
    l->tail = j;
}

static cap_job_t *list_pop(cap_list_t *l)
{
    cap_job_t *j = l->head;
    if (j) {
        l->head = j->next;
        if (!l->head)
            l->tail = NULL;
        j->next = NULL;
    }
    return j;
}

static void job_free(cap_job_t *j)
{
    if (!j)
        return;
    cairn_free(j->tokens);
    cairn_free(j->layout);
    cairn_free(j);
}

/* Puts one job, waiting for room in slices so that stop is noticed; returns the status. */
static int put_job(cairn_tier_capturer_t *c, cap_job_t *j, bool *queued)
{
    for (;;) {
        double t0 = cairn_now_ms();
        int rc = cairn_tier_store_put(c->store, &j->obj, 50, queued);
        if (rc != CAIRN_EEXHAUSTED)
            return rc;
        if (cairn_now_ms() - t0 < 1.0) { /* a store that does not wait for room: back off */
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&c->mu);
        c->st.wait_ms += cairn_now_ms() - t0;
        bool stop = c->stop;
        pthread_mutex_unlock(&c->mu);
        if (stop)
            return CAIRN_ECANCELED;
    }
}

static void *capturer_main(void *arg)
{
    cairn_tier_capturer_t *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->todo.head && !c->stop)
            pthread_cond_wait(&c->work, &c->mu);
        if (c->stop)
            break;
        cap_job_t *j = list_pop(&c->todo);
        c->busy = j;
        pthread_mutex_unlock(&c->mu);
        bool queued = false;
        double t0 = cairn_now_ms();
        int rc = put_job(c, j, &queued);
        pthread_mutex_lock(&c->mu);
        c->st.busy_ms += cairn_now_ms() - t0;
        c->busy = NULL;
        j->status = rc;
        if (rc == CAIRN_OK) {
            c->st.put++;
            if (queued)
                c->st.bytes_put += j->obj.payload_size;
            else
                c->st.already++;
        } else if (rc == CAIRN_ECANCELED) {
            c->st.canceled++;
        } else {
            c->st.failed++;
        }
        list_push(&c->done, j);
        pthread_cond_broadcast(&c->finished);
    }
    /* Stopped: what was never put goes back to the owner. */
    for (cap_job_t *j; (j = list_pop(&c->todo));) {
        j->status = CAIRN_ECANCELED;
        c->st.canceled++;
        list_push(&c->done, j);
    }
    pthread_cond_broadcast(&c->finished);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int cairn_tier_capturer_create(cairn_tier_store_t *s, cairn_tier_capturer_t **out)
{
    if (!out)
        return CAIRN_EINVAL;
    *out = NULL;
    if (!s)
        return CAIRN_EINVAL;
    cairn_tier_capturer_t *c = cairn_calloc(1, sizeof *c);
    if (!c)
        return CAIRN_ENOMEM;
    c->store = s;
    if (pthread_mutex_init(&c->mu, NULL)) {
        cairn_free(c);
        return CAIRN_EIO;
    }
    if (pthread_cond_init(&c->work, NULL)) {
        pthread_mutex_destroy(&c->mu);
        cairn_free(c);
        return CAIRN_EIO;
    }
    if (pthread_cond_init(&c->finished, NULL)) {
        pthread_cond_destroy(&c->work);
        pthread_mutex_destroy(&c->mu);
        cairn_free(c);
        return CAIRN_EIO;
    }
    if (pthread_create(&c->thread, NULL, capturer_main, c)) {
        pthread_cond_destroy(&c->finished);
        pthread_cond_destroy(&c->work);
        pthread_mutex_destroy(&c->mu);
        cairn_free(c);
        return CAIRN_EIO;
    }
    c->has_thread = true;
    *out = c;
    return CAIRN_OK;
}

int cairn_tier_capturer_submit(cairn_tier_capturer_t *c, const cairn_tier_object_t *obj, uint64_t tag)
{
    if (!c || !obj || (obj->n_tokens && !obj->tokens) || (obj->layout_size && !obj->layout) ||
        (obj->payload_size && !obj->payload))
        return CAIRN_EINVAL;
    cap_job_t *j = cairn_calloc(1, sizeof *j);
    if (!j)
        return CAIRN_ENOMEM;
    j->obj = *obj;
    j->tag = tag;
    if (obj->n_tokens) {
        if (!(j->tokens = cairn_malloc(obj->n_tokens * sizeof *j->tokens)))
            goto nomem;
        memcpy(j->tokens, obj->tokens, obj->n_tokens * sizeof *j->tokens);
        j->obj.tokens = j->tokens;
    }
    if (obj->layout_size) {
        if (!(j->layout = cairn_malloc(obj->layout_size)))
            goto nomem;
        memcpy(j->layout, obj->layout, obj->layout_size);
        j->obj.layout = j->layout;
    }
    pthread_mutex_lock(&c->mu);
    if (c->stop) {
        pthread_mutex_unlock(&c->mu);
        job_free(j);
        return CAIRN_ESTATE;
    }
    list_push(&c->todo, j);
    c->st.submitted++;
    c->st.in_flight++;
    pthread_cond_signal(&c->work);
    pthread_mutex_unlock(&c->mu);
    return CAIRN_OK;
nomem:
    job_free(j);
    return CAIRN_ENOMEM;
}

size_t cairn_tier_capturer_reap(cairn_tier_capturer_t *c, void (*fn)(void *user, uint64_t tag, int status),
                                void *user)
{
    if (!c)
        return 0;
    pthread_mutex_lock(&c->mu);
    cap_job_t *list = c->done.head;
    c->done.head = c->done.tail = NULL;
    pthread_mutex_unlock(&c->mu);
    size_t n = 0;
    while (list) {
        cap_job_t *j = list;
        list = j->next;
        if (fn)
            fn(user, j->tag, j->status);
        job_free(j);
        n++;
    }
    if (n) {
        pthread_mutex_lock(&c->mu);
        c->st.in_flight -= (uint32_t)n;
        pthread_mutex_unlock(&c->mu);
    }
    return n;
}

bool cairn_tier_capturer_wait(cairn_tier_capturer_t *c, uint32_t wait_ms)
{
    if (!c)
        return false;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += wait_ms / 1000;
    dl.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&c->mu);
    while (!c->done.head && wait_ms && (c->todo.head || c->busy))
        if (pthread_cond_timedwait(&c->finished, &c->mu, &dl) == ETIMEDOUT)
            break;
    bool any = c->done.head != NULL;
    pthread_mutex_unlock(&c->mu);
    return any;
}

void cairn_tier_capturer_stop(cairn_tier_capturer_t *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_broadcast(&c->work);
    bool join = c->has_thread;
    c->has_thread = false;
    pthread_mutex_unlock(&c->mu);
    if (join)
        pthread_join(c->thread, NULL);
}

void cairn_tier_capturer_stats(cairn_tier_capturer_t *c, cairn_tier_capturer_stats_t *out)
{
    memset(out, 0, sizeof *out);
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    pthread_mutex_unlock(&c->mu);
}

void cairn_tier_capturer_destroy(cairn_tier_capturer_t *c)
{
    if (!c)
        return;
    cairn_tier_capturer_stop(c);
    cairn_tier_capturer_reap(c, NULL, NULL);
    pthread_cond_destroy(&c->finished);
    pthread_cond_destroy(&c->work);
    pthread_mutex_destroy(&c->mu);
    cairn_free(c);
}
