/*
 * sched_collector.h — what the scheduler tests (test_scheduler, tests/models/
 * family_scheduler.c) collect of one request's events: each choice's token ids and text,
 * finish reasons, the DONE count, status and usage, the first logprobs, and on request a
 * cancel from inside the callback after a number of tokens.
 *
 * Model. sched_on_event is the request's on_event with the collector as user; it runs on
 * the scheduler's engine thread and records under the collector's mutex; sched_col_wait
 * blocks the test until the final event. A test initializes a collector before its submit
 * (sched_col_init) and destroys it after the wait (sched_col_fini).
 *
 * Buffers: ids [CAIRN_SCHED_MAX_N][SCHED_MAX_OUT] (tokens past that are not kept), text
 * [CAIRN_SCHED_MAX_N][SCHED_MAX_OUT * 8] bytes.
 *
 * Thread-safety: fields are written under mu by the engine thread; read them after
 * sched_col_wait returns (final is then set and nothing more arrives).
 */
#ifndef CAIRN_TEST_SCHED_COLLECTOR_H
#define CAIRN_TEST_SCHED_COLLECTOR_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cairn/scheduler.h"

#define SCHED_MAX_OUT 4096

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t ids[CAIRN_SCHED_MAX_N][SCHED_MAX_OUT];
    int n_ids[CAIRN_SCHED_MAX_N];
    char text[CAIRN_SCHED_MAX_N][SCHED_MAX_OUT * 8];
    size_t text_len[CAIRN_SCHED_MAX_N];
    cairn_finish_reason_t finish[CAIRN_SCHED_MAX_N];
    int n_done_events;
    bool final;
    int status;
    int n_deltas;
    cairn_req_usage_t usage;
    /* cancel_at: when > 0, cancel the request from the callback after that many tokens
     * (the submit stores sched and id, under mu) */
    cairn_sched_t *sched;
    uint64_t id;
    int cancel_at;
    cairn_token_logprob_t lp[8];   /* the first tokens' logprobs, when asked for */
    int n_lp;
    int delta_prompt_tokens;       /* usage.prompt_tokens seen on a DELTA event, else -1 */
} sched_collector_t;

static inline void sched_col_init(sched_collector_t *c)
{
    memset(c, 0, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
}

static inline void sched_col_fini(sched_collector_t *c)
{
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

/* The request's on_event (user: its sched_collector_t). */
static inline void sched_on_event(void *user, const cairn_req_event_t *ev)
{
    sched_collector_t *c = user;
    pthread_mutex_lock(&c->mu);
    int i = ev->index;
    if (ev->kind == CAIRN_REQ_EVENT_DELTA) {
        c->n_deltas++;
        for (int k = 0; k < ev->n_tokens && c->n_ids[i] < SCHED_MAX_OUT; k++)
            c->ids[i][c->n_ids[i]++] = ev->tokens[k];
        memcpy(c->text[i] + c->text_len[i], ev->text, ev->text_len);
        c->text_len[i] += ev->text_len;
        for (int k = 0; ev->logprobs && k < ev->n_tokens && c->n_lp < 8; k++)
            c->lp[c->n_lp++] = ev->logprobs[k];
        if (ev->usage && ev->n_tokens > 0)
            c->delta_prompt_tokens = ev->usage->prompt_tokens;
    } else if (ev->kind == CAIRN_REQ_EVENT_DONE) {
        c->finish[i] = ev->finish;
        c->n_done_events++;
    } else {
        c->status = ev->status;
    }
    if (ev->usage)
        c->usage = *ev->usage;
    bool cancel = c->cancel_at > 0 && ev->kind == CAIRN_REQ_EVENT_DELTA && c->n_ids[0] >= c->cancel_at;
    uint64_t cancel_id = c->id;
    if (cancel)
        c->cancel_at = 0;
    if (ev->final) {
        c->final = true;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    if (cancel)
        cairn_sched_cancel(c->sched, cancel_id);
}

/* Blocks until the request's final event. */
static inline void sched_col_wait(sched_collector_t *c)
{
    pthread_mutex_lock(&c->mu);
    while (!c->final)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

#endif
