/*
 * scheduler.c — continuous batching of generation requests over one engine
 * (include/cairn/scheduler.h).
 *
 * Model. A request (sched_req_t) has n choices; each choice is a run (sched_run_t): one
 * engine sequence plus its sampler, stop matcher and streaming detokenizer, and its token
 * history toks = prompt + generated. Runs live in exactly one of two lists owned by the
 * engine thread: `waiting` (no sequence: new, or preempted) and `running` (a sequence,
 * in admission order). A run's sequence always has >= 1 pending token while it is
 * running: the prompt (or prompt + generated after a preemption) being prefilled, or the
 * one sampled token fed for decode. So decode and prefill are the same thing — compute
 * pending tokens, and sample when a chunk ends the pending tokens — and one engine step
 * takes every decode row (one token each) plus prefill chunks (at most prefill_chunk
 * tokens of one run) up to step_tokens rows.
 *
 * Pool. All sequences share the engine's paged pool. Admission is cairn_seq_begin, which
 * reserves the whole prompt's blocks (minus the cached prefix); it fails with
 * CAIRN_EEXHAUSTED when the pool is full and the run waits. A decode feed that exhausts the
 * pool preempts the newest running run (released; requeued at the front of `waiting`
 * with its history, sampler and emitted text kept), repeatedly, down to the feeding run
 * itself; a run alone in the pool that still cannot grow fails with CAIRN_EEXHAUSTED (it
 * could not fit alone). Recompute after preemption begins over prompt + generated, so its
 * published full blocks (still cached unless evicted) are attached, not recomputed.
 *
 * Shared prefixes. A waiting run whose first full blocks are the same tokens (same salt)
 * as a running run that has not computed them yet is held back until it has: then its
 * begin attaches the published blocks instead of computing them a second time.
 *
 * n > 1. Only choice 0 is queued. When its prompt is computed (its first logits row),
 * choices 1..n-1 are forked from its sequence (shared blocks) and every choice samples
 * from a copy of that row with its own sampler (seed + index).
 *
 * Restoring. Admission is cairn_seq_begin_async: when the cold tier has blocks past the
 * hot prefix, their reads run on the tier's I/O thread and the run waits in `running`
 * flagged `restoring` (no pending token: no step includes it) while the batch keeps
 * decoding; each step first admits the runs whose reads finished (poll_restoring:
 * cairn_seq_begin_finish), so a restore never stalls the other sequences' steps.
 *
 * Invariants: a run is in at most one list; run->seq != NULL iff the run is in
 * `running`; a request is freed right after its final event; `n_queued` counts requests
 * submitted but not yet admitted once (the max_queued bound), under the lock.
 *
 * Thread-safety: one engine thread runs everything above and delivers every event.
 * submit/cancel/stats/destroy take `mu`; the inbox and the cancel list are the only state
 * they share with the engine thread, plus the stats snapshot.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cairn/scheduler.h"
#include "util/util.h"

typedef struct sched_req sched_req_t;

/* One choice of a request: a sequence and its sampling state. */
typedef struct {
    sched_req_t *req;
    int index;                      /* choice index */
    cairn_seq_t *seq;               /* non-NULL iff running */
    cairn_sampler_t *sampler;
    cairn_stop_matcher_t *stop;
    cairn_tokenizer_stream_t *stream;
    int32_t *toks;                  /* [cap] prompt then generated tokens */
    int n_toks, cap;
    int n_gen;                      /* generated tokens (the tail of toks) */
    int delta_from;                 /* first generated token not yet reported in a DELTA */
    cairn_token_logprob_t *lp;      /* [n_gen - delta_from] when the request wants logprobs */
    int cap_lp;
    bool has_tok;                   /* the last generated token is not fed yet */
    bool restoring;                 /* running, but its cold-tier restore is still reading
                                       (cairn_seq_begin_async): no pending token yet */
    bool sync_begin;                /* its restored admission found no room: the next
                                       admission is a plain cairn_seq_begin */
    bool done;
    uint64_t admit_seq;             /* admission order: the largest is the newest */
} sched_run_t;

struct sched_req {
    uint64_t id;
    char *salt;                     /* NULL: the default domain */
    int n;                          /* choices */
    int n_started;                  /* runs that exist (1 until the fork) */
    int n_done;
    bool logprobs;
    int top_logprobs;
    bool retain;                    /* retention hint: finished runs mark their blocks */
    bool admitted_once;
    bool ended;                     /* final event delivered; freed at the end of the step */
    sched_run_t *runs;              /* [n] */
    cairn_req_event_fn on_event;
    void *user;
    cairn_req_usage_t usage;
    double t_submit, t_first, t_last;
    sched_req_t *next;              /* inbox link, then the list of ended requests */
};

struct cairn_sched {
    cairn_engine_t *engine;
    const cairn_tokenizer_t *tok;
    cairn_sched_options_t opt;
    int vocab, block_tokens, max_context;
    uint64_t pool_blocks;           /* usable blocks at the budget (KV core, null block excluded) */

    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Shared with callers, under mu. */
    sched_req_t *inbox_head, *inbox_tail;
    uint64_t *cancels;
    int n_cancels, cap_cancels;
    bool stopping;
    double deadline;
    uint64_t next_id;
    int n_queued;
    cairn_sched_stats_t stats;

    /* Engine thread only. */
    sched_req_t **reqs;             /* live requests (for cancel by id) */
    int n_reqs, cap_reqs;
    sched_run_t **waiting;
    int n_waiting, cap_waiting;
    sched_run_t **running;
    int n_running, cap_running;
    sched_req_t *ended;             /* requests to free once no step refers to them */
    uint64_t admit_counter;
    cairn_batch_item_t *items;
    sched_run_t **item_runs;
    int cap_items, cap_item_runs;
    float *scratch;                 /* [vocab] a logits row the sampler may modify */
    cairn_sched_stats_t local;      /* counters, published into stats after each step */
};

void cairn_sched_options_default(cairn_sched_options_t *o)
{
    o->step_tokens = 512;
    o->prefill_chunk = 256;
    o->max_running = 16;
    o->max_queued = 64;
}

/* ---- Requests --------------------------------------------------------------------- */

static void req_free(sched_req_t *r)
{
    if (!r)
        return;
    for (int i = 0; r->runs && i < r->n; i++) {
        sched_run_t *u = &r->runs[i];
        cairn_seq_release(u->seq);
        cairn_sampler_destroy(u->sampler);
        cairn_stop_matcher_destroy(u->stop);
        cairn_tokenizer_stream_destroy(u->stream);
        cairn_free(u->toks);
        cairn_free(u->lp);
    }
    cairn_free(r->runs);
    cairn_free(r->salt);
    cairn_free(r);
}

static int run_push_token(sched_run_t *u, int32_t t)
{
    int rc = cairn_grow_array_int((void **)&u->toks, &u->cap, u->n_toks + 1, sizeof(int32_t), 16);
    if (rc)
        return rc;
    u->toks[u->n_toks++] = t;
    u->n_gen++;
    return CAIRN_OK;
}

/* Builds a request and its n runs on the caller's thread (all per-choice state). */
static int req_build(cairn_sched_t *s, const cairn_req_params_t *p, sched_req_t **out,
                     char *err, size_t err_len)
{
    *out = NULL;
    int n = p->n == 0 ? 1 : p->n;
    if (!p->on_event || !p->prompt || p->n_prompt < 1 || n < 1 || n > CAIRN_SCHED_MAX_N) {
        cairn_errf(err, err_len, "%s", p->n_prompt < 1 ? "the prompt is empty"
                              : (n < 1 || n > CAIRN_SCHED_MAX_N) ? "n must be in 1..16"
                                                                 : "missing prompt or callback");
        return CAIRN_EINVAL;
    }
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= s->vocab) {
            if (err && err_len)
                snprintf(err, err_len, "prompt token %d is outside the vocabulary [0, %d)",
                         (int)p->prompt[i], s->vocab);
            return CAIRN_EINVAL;
        }
    if (cairn_sampling_params_validate(&p->sampling, s->vocab, err, err_len))
        return CAIRN_EINVAL;
    if (p->logprobs && (p->top_logprobs < 0 || p->top_logprobs > CAIRN_SCHED_MAX_TOP_LOGPROBS)) {
        cairn_errf(err, err_len, "%s", "top_logprobs must be in 0..20");
        return CAIRN_EINVAL;
    }
    if (p->cache_salt && strlen(p->cache_salt) > 256) {
        cairn_errf(err, err_len, "%s", "cache_salt is longer than 256 bytes");
        return CAIRN_EINVAL;
    }
    int max_tokens = p->sampling.max_tokens > 0 ? p->sampling.max_tokens : 1;
    if ((int64_t)p->n_prompt + max_tokens > s->max_context) {
        if (err && err_len)
            snprintf(err, err_len, "prompt (%d tokens) + max_tokens (%d) exceeds the context of %d tokens",
                     p->n_prompt, max_tokens, s->max_context);
        return CAIRN_ERANGE;
    }
    if ((uint64_t)(p->n_prompt + s->block_tokens - 1) / (uint64_t)s->block_tokens > s->pool_blocks) {
        if (err && err_len)
            snprintf(err, err_len, "the prompt (%d tokens) cannot fit the KV pool (%llu blocks of %d)",
                     p->n_prompt, (unsigned long long)s->pool_blocks, s->block_tokens);
        return CAIRN_ERANGE;
    }

    const cairn_model_config_t *cfg = cairn_engine_config(s->engine);
    cairn_sampler_model_t model = {s->vocab, s->max_context, cfg->eos_ids, (size_t)cfg->n_eos};
    int rc = CAIRN_ENOMEM;
    sched_req_t *r = cairn_calloc(1, sizeof(*r));
    if (!r)
        goto fail;
    r->n = n;
    r->n_started = 1;
    r->logprobs = p->logprobs;
    r->top_logprobs = p->logprobs ? p->top_logprobs : 0;
    r->retain = p->retain;
    r->on_event = p->on_event;
    r->user = p->user;
    r->usage.miss_reason = "none";
    if (p->cache_salt && p->cache_salt[0] && !(r->salt = cairn_strdup(p->cache_salt)))
        goto fail;
    if (!(r->runs = cairn_calloc((size_t)n, sizeof(*r->runs))))
        goto fail;
    for (int i = 0; i < n; i++) {
        sched_run_t *u = &r->runs[i];
        u->req = r;
        u->index = i;
        cairn_sampling_params_t sp = p->sampling;
        if (sp.has_seed)
            sp.seed += (uint64_t)i;
        if ((rc = cairn_sampler_create(&sp, &model, &u->sampler)) ||
            (rc = cairn_sampler_set_prompt(u->sampler, p->prompt, (size_t)p->n_prompt)) ||
            (rc = cairn_stop_matcher_create(p->sampling.stop, p->sampling.n_stop, &u->stop)) ||
            (rc = cairn_tokenizer_stream_create(s->tok, true, &u->stream)))
            goto fail;
        rc = CAIRN_ENOMEM;
        u->cap = p->n_prompt + 16;
        if (!(u->toks = cairn_malloc((size_t)u->cap * sizeof(int32_t))))
            goto fail;
        memcpy(u->toks, p->prompt, (size_t)p->n_prompt * sizeof(int32_t));
        u->n_toks = p->n_prompt;
    }
    r->usage.prompt_tokens = p->n_prompt;
    *out = r;
    return CAIRN_OK;
fail:
    cairn_errf(err, err_len, "%s", rc == CAIRN_ENOMEM ? "out of memory" : "bad sampling parameters");
    req_free(r);
    return rc;
}

/* ---- Events ----------------------------------------------------------------------- */

static int n_prompt_of(const sched_run_t *u) { return u->n_toks - u->n_gen; }

static void emit_delta(sched_run_t *u, const char *text, size_t len)
{
    if (len == 0 && u->delta_from == u->n_gen)
        return;
    sched_req_t *r = u->req;
    cairn_req_event_t ev = {0};
    ev.kind = CAIRN_REQ_EVENT_DELTA;
    ev.index = u->index;
    ev.text = len ? text : "";
    ev.text_len = len;
    ev.tokens = u->toks + n_prompt_of(u) + u->delta_from;
    ev.n_tokens = u->n_gen - u->delta_from;
    ev.usage = &r->usage; /* prompt, cached and restored tokens are known from admission */
    ev.logprobs = r->logprobs && ev.n_tokens > 0 ? u->lp : NULL;
    u->delta_from = u->n_gen;
    r->on_event(r->user, &ev);
}

/* Usage at the end: completion tokens over every choice and the decode rate. */
static void finish_usage(sched_req_t *r)
{
    int gen = 0;
    for (int i = 0; i < r->n_started; i++)
        gen += r->runs[i].n_gen;
    r->usage.completion_tokens = gen;
    double span = r->t_last - r->t_first;
    int per_choice = r->n_started ? gen / r->n_started : 0;
    r->usage.decode_tps = per_choice > 1 && span > 0 ? (per_choice - 1) * r->n_started / (span / 1e3) : 0;
}

static void remove_ptr(sched_run_t **arr, int *n, const sched_run_t *u)
{
    for (int i = 0; i < *n; i++)
        if (arr[i] == u) {
            memmove(arr + i, arr + i + 1, (size_t)(*n - i - 1) * sizeof(*arr));
            (*n)--;
            return;
        }
}

/* Forgets a request after its final event. */
static void req_retire(cairn_sched_t *s, sched_req_t *r)
{
    for (int i = 0; i < r->n; i++) {
        sched_run_t *u = &r->runs[i];
        remove_ptr(s->waiting, &s->n_waiting, u);
        remove_ptr(s->running, &s->n_running, u);
        cairn_seq_release(u->seq);
        u->seq = NULL;
    }
    for (int i = 0; i < s->n_reqs; i++)
        if (s->reqs[i] == r) {
            s->reqs[i] = s->reqs[--s->n_reqs];
            break;
        }
    if (!r->admitted_once) {
        pthread_mutex_lock(&s->mu);
        s->n_queued--;
        pthread_mutex_unlock(&s->mu);
    }
    s->local.prompt_tokens += (uint64_t)r->usage.prompt_tokens;
    s->local.completion_tokens += (uint64_t)r->usage.completion_tokens;
    s->local.cached_tokens += (uint64_t)r->usage.cached_tokens;
    s->local.restored_tokens += (uint64_t)r->usage.restored_tokens;
    r->ended = true;
    r->next = s->ended;
    s->ended = r;
}

static void free_ended(cairn_sched_t *s)
{
    while (s->ended) {
        sched_req_t *r = s->ended;
        s->ended = r->next;
        req_free(r);
    }
}

/* Ends a whole request with an ERROR event (canceled, failed). */
static void req_fail(cairn_sched_t *s, sched_req_t *r, int status, const char *msg)
{
    for (int i = 0; i < r->n; i++) {
        cairn_seq_release(r->runs[i].seq);
        r->runs[i].seq = NULL;
    }
    finish_usage(r);
    cairn_req_event_t ev = {0};
    ev.kind = CAIRN_REQ_EVENT_ERROR;
    ev.usage = &r->usage;
    ev.status = status;
    ev.message = msg;
    ev.final = true;
    if (status == CAIRN_ECANCELED)
        s->local.requests_canceled++;
    else
        s->local.requests_failed++;
    r->on_event(r->user, &ev);
    req_retire(s, r);
}

/* A choice finished: flush its text, release its sequence, report DONE. */
static void run_finish(cairn_sched_t *s, sched_run_t *u, cairn_finish_reason_t why, bool stopped)
{
    sched_req_t *r = u->req;
    const char *text;
    size_t len;
    if (!stopped) {
        /* Bytes held by the detokenizer go through the matcher, then whatever it held. */
        bool st = false;
        if (cairn_tokenizer_stream_flush(u->stream, &text, &len) == 0 && len) {
            const char *e;
            size_t el;
            if (cairn_stop_matcher_feed(u->stop, text, len, &e, &el, &st) == 0)
                emit_delta(u, e, el);
        }
        if (st)
            why = CAIRN_FINISH_STOP;
        else if (cairn_stop_matcher_flush(u->stop, &text, &len) == 0)
            emit_delta(u, text, len);
    }
    emit_delta(u, NULL, 0);
    u->done = true;
    if (r->retain && cairn_seq_retain(u->seq) != CAIRN_OK)
        cairn_log(CAIRN_LOG_WARN, "scheduler: the retention hint was not applied");
    cairn_seq_release(u->seq);
    u->seq = NULL;
    /* What the release's capture walk queued for the disk (the request log's fields). */
    cairn_engine_cold_turn_t ct;
    cairn_engine_cold_last_turn(s->engine, &ct);
    r->usage.persist_queued = (int)ct.queued;
    r->usage.persist_already = (int)ct.already;
    r->usage.persist_deferred = (int)ct.deferred;
    r->usage.persist_written = (int)ct.written;
    r->usage.persist_policy = ct.reason;
    remove_ptr(s->running, &s->n_running, u);
    r->n_done++;
    bool final = r->n_done == r->n;
    if (final)
        finish_usage(r);
    cairn_req_event_t ev = {0};
    ev.kind = CAIRN_REQ_EVENT_DONE;
    ev.index = u->index;
    ev.finish = why;
    ev.usage = &r->usage;
    ev.final = final;
    r->on_event(r->user, &ev);
    if (final) {
        s->local.requests_done++;
        req_retire(s, r);
    }
}

/* ---- Pool: admission and preemption ---------------------------------------------- */

static bool same_salt(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/*
 * True while a running run of another request (same salt) has not yet computed full
 * blocks that `u` would reuse: then u waits and attaches them instead of computing them.
 */
static bool held_by_prefix(const cairn_sched_t *s, const sched_run_t *u)
{
    int bs = s->block_tokens;
    for (int i = 0; i < s->n_running; i++) {
        const sched_run_t *r = s->running[i];
        if (r->req == u->req || !same_salt(r->req->salt, u->req->salt))
            continue;
        int past = cairn_seq_n_past(r->seq);
        int lim = u->n_toks - 1 < r->n_toks ? u->n_toks - 1 : r->n_toks;
        int l = 0;
        while (l < lim && r->toks[l] == u->toks[l])
            l++;
        int need = l / bs * bs;
        if (need > 0 && past < need)
            return true;
    }
    return false;
}

/* Releases a running run's blocks and puts it back at the front of the waiting list. */
static int preempt(cairn_sched_t *s, sched_run_t *u)
{
    int rc = cairn_grow_array_int((void **)&s->waiting, &s->cap_waiting, s->n_waiting + 1, sizeof(*s->waiting), 16);
    if (rc)
        return rc;
    cairn_seq_release(u->seq); /* a restoring run's reads are waited for */
    u->seq = NULL;
    u->restoring = false;
    u->has_tok = false; /* it is in toks: the recompute begins over all of them */
    remove_ptr(s->running, &s->n_running, u);
    memmove(s->waiting + 1, s->waiting, (size_t)s->n_waiting * sizeof(*s->waiting));
    s->waiting[0] = u;
    s->n_waiting++;
    u->req->usage.preemptions++;
    s->local.preemptions++;
    return CAIRN_OK;
}

static sched_run_t *newest_running(const cairn_sched_t *s)
{
    sched_run_t *best = NULL;
    for (int i = 0; i < s->n_running; i++)
        if (!best || s->running[i]->admit_seq > best->admit_seq)
            best = s->running[i];
    return best;
}

/*
 * Feeds every sampled, not yet fed token. On CAIRN_EEXHAUSTED the newest run is
 * preempted (possibly the feeding one) and the feed retried; a run alone that cannot
 * grow fails. Each pass either clears a has_tok or removes a run from `running`, so the
 * loop ends.
 */
static void feed_decodes(cairn_sched_t *s)
{
    for (;;) {
        sched_run_t *u = NULL;
        for (int i = 0; i < s->n_running && !u; i++)
            if (s->running[i]->has_tok)
                u = s->running[i];
        if (!u)
            return;
        int rc = cairn_seq_feed(u->seq, &u->toks[u->n_toks - 1], 1);
        if (rc == CAIRN_OK) {
            u->has_tok = false;
            continue;
        }
        /* Cached blocks the cold tier is persisting before they may be evicted: the
         * feeds wait a step (or a few) for the copies instead of preempting or failing. */
        if (rc == CAIRN_EEXHAUSTED && cairn_engine_cold_poll(s->engine))
            return;
        if (rc == CAIRN_EEXHAUSTED && s->n_running > 1 &&
            (rc = preempt(s, newest_running(s))) == CAIRN_OK)
            continue;
        /* Alone and still no room, the context is full, or no memory: the request ends. */
        req_fail(s, u->req, rc, rc == CAIRN_EEXHAUSTED
                                    ? "the KV pool cannot hold this request's context"
                                    : "the sequence could not grow");
    }
}

/* The usage of a run's first admission: how its prompt was served. */
static void note_admitted(cairn_sched_t *s, sched_run_t *u, int cached)
{
    sched_req_t *r = u->req;
    if (r->admitted_once)
        return;
    r->admitted_once = true;
    r->usage.cached_tokens = cached;
    r->usage.queue_ms = cairn_now_ms() - r->t_submit;
    /* Blocks past the hot prefix may come from the cold tier (restored in begin). */
    int restored = cairn_seq_restored_tokens(u->seq);
    r->usage.restored_tokens = restored;
    r->usage.cold_reason = cairn_seq_cold_reason(u->seq);
    int full = (u->n_toks - 1) / s->block_tokens * s->block_tokens;
    r->usage.miss_reason = cached + restored < full ? (cached + restored ? "partial" : "miss")
                           : restored ? "cold" : "none";
    pthread_mutex_lock(&s->mu);
    s->n_queued--;
    pthread_mutex_unlock(&s->mu);
}

/* Admits waiting runs while there are running slots, prefill budget and blocks. */
static void admit(cairn_sched_t *s)
{
    int budget = 0;
    for (int i = 0; i < s->n_running; i++)
        budget += cairn_seq_n_pending(s->running[i]->seq);
    for (int i = 0; i < s->n_waiting && s->n_running < s->opt.max_running &&
                    budget < s->opt.step_tokens;) {
        sched_run_t *u = s->waiting[i];
        if (held_by_prefix(s, u)) {
            i++;
            continue;
        }
        int rc = cairn_grow_array_int((void **)&s->running, &s->cap_running, s->n_running + 1,
                            sizeof(*s->running), 16);
        cairn_seq_t *seq = NULL;
        int cached = 0;
        /* The cold tier's reads run off the engine thread: a run whose restore is still
         * reading waits in `running` as restoring while the batch keeps stepping. */
        if (rc == CAIRN_OK && u->sync_begin)
            rc = cairn_seq_begin(s->engine, u->req->salt, u->toks, u->n_toks, &seq, &cached);
        else if (rc == CAIRN_OK)
            rc = cairn_seq_begin_async(s->engine, u->req->salt, u->toks, u->n_toks, &seq);
        /* Whether it restores is read once: the I/O thread may finish its reads at any
         * moment, and a run taken as restoring here must be finished by poll_restoring
         * (reading it again below left a run whose reads ended in between admitted with
         * nothing to compute, stepping forever: test_stress_sigterm, release build). */
        const bool restoring = rc == CAIRN_OK && cairn_seq_restoring(seq);
        if (rc == CAIRN_OK && !restoring && (rc = cairn_seq_begin_finish(seq, &cached)))
            seq = NULL; /* released by the failed admission */
        if (rc == CAIRN_EEXHAUSTED && s->n_running > 0)
            return; /* the pool frees up as others finish; keep the order */
        if (rc == CAIRN_EEXHAUSTED) {
            /* Alone: cached blocks the cold tier holds back from eviction until they are
             * persisted free up as the copies finish; wait while any is pending, and try
             * once more when the last one just finished. */
            if (cairn_engine_cold_poll(s->engine))
                return;
            rc = cairn_seq_begin(s->engine, u->req->salt, u->toks, u->n_toks, &seq, &cached);
            if (rc == CAIRN_EEXHAUSTED && cairn_engine_cold_poll(s->engine))
                return;
        }
        if (rc) {
            req_fail(s, u->req, rc, rc == CAIRN_EEXHAUSTED
                                        ? "the KV pool cannot hold this prompt"
                                        : "the sequence could not begin");
            continue; /* the run left `waiting`; slot i holds the next one */
        }
        memmove(s->waiting + i, s->waiting + i + 1, (size_t)(s->n_waiting - i - 1) * sizeof(*s->waiting));
        s->n_waiting--;
        u->seq = seq;
        u->admit_seq = ++s->admit_counter;
        s->running[s->n_running++] = u;
        u->restoring = restoring;
        if (u->restoring)
            continue;
        budget += cairn_seq_n_pending(seq);
        note_admitted(s, u, cached);
    }
}

/* Admits the runs whose restore finished reading (installs what it read); a run the pool
 * cannot take now goes back to the front of `waiting`, as a preempted one does. */
static void poll_restoring(cairn_sched_t *s)
{
    for (int i = 0; i < s->n_running;) {
        sched_run_t *u = s->running[i];
        if (!u->restoring || cairn_seq_restoring(u->seq)) {
            i++;
            continue;
        }
        int cached = 0;
        int rc = cairn_seq_begin_finish(u->seq, &cached);
        u->restoring = false;
        if (rc == CAIRN_OK) {
            note_admitted(s, u, cached);
            i++;
            continue;
        }
        u->seq = NULL; /* released by the failed admission */
        remove_ptr(s->running, &s->n_running, u);
        /* No room: back to the front of `waiting`, where admission's rules (wait while
         * others run or the cold tier's write-back copies are pending) apply to a plain
         * begin, so a run that cannot fit ends the way any other does. */
        if (rc == CAIRN_EEXHAUSTED &&
            cairn_grow_array_int((void **)&s->waiting, &s->cap_waiting, s->n_waiting + 1, sizeof(*s->waiting),
                                 16) == CAIRN_OK) {
            u->sync_begin = true;
            memmove(s->waiting + 1, s->waiting, (size_t)s->n_waiting * sizeof(*s->waiting));
            s->waiting[0] = u;
            s->n_waiting++;
            continue;
        }
        req_fail(s, u->req, rc, rc == CAIRN_EEXHAUSTED ? "the KV pool cannot hold this prompt"
                                                       : "the sequence could not begin");
    }
}

/* ---- Steps ------------------------------------------------------------------------ */

/* Forks choices 1..n-1 of a request from choice 0, whose prompt is now computed. */
static int fork_choices(cairn_sched_t *s, sched_run_t *u0)
{
    sched_req_t *r = u0->req;
    int rc = cairn_grow_array_int((void **)&s->running, &s->cap_running, s->n_running + r->n,
                        sizeof(*s->running), 16);
    for (int i = 1; rc == CAIRN_OK && i < r->n; i++) {
        sched_run_t *u = &r->runs[i];
        if ((rc = cairn_seq_fork(u0->seq, &u->seq)))
            break;
        u->admit_seq = ++s->admit_counter;
        s->running[s->n_running++] = u;
        r->n_started++;
    }
    return rc;
}

/*
 * The log-probability of token t under row (log-softmax of the raw logits) and the k
 * most likely tokens, into *out. One pass for the maximum and the top k (insertion into
 * a k-array: ties keep the lower id), one for the normalizer (double, in id order, so the
 * value does not depend on anything but the row). Cost O(V * (1 + k/V-ish)).
 */
static void token_logprob(const float *row, int vocab, int32_t t, int k, cairn_token_logprob_t *out)
{
    float mx = -INFINITY;
    int n_top = 0;
    for (int i = 0; i < vocab; i++) {
        float v = row[i];
        if (v > mx)
            mx = v;
        if (k == 0 || (n_top == k && !(v > out->top_logprobs[k - 1])))
            continue;
        int j = n_top < k ? n_top++ : k - 1;
        while (j > 0 && v > out->top_logprobs[j - 1]) {
            out->top_logprobs[j] = out->top_logprobs[j - 1];
            out->top_ids[j] = out->top_ids[j - 1];
            j--;
        }
        out->top_logprobs[j] = v;
        out->top_ids[j] = i;
    }
    double sum = 0;
    for (int i = 0; i < vocab; i++)
        sum += exp((double)row[i] - (double)mx);
    double lse = (double)mx + log(sum);
    out->token = t;
    out->logprob = (float)((double)row[t] - lse);
    out->n_top = n_top;
    for (int j = 0; j < n_top; j++)
        out->top_logprobs[j] = (float)((double)out->top_logprobs[j] - lse);
}

/* Samples, accepts and reports one token of run u from a logits row; may finish the run
 * or (on failure) end its request. */
static void sample_one(cairn_sched_t *s, sched_run_t *u, const float *row)
{
    sched_req_t *r = u->req;
    memcpy(s->scratch, row, (size_t)s->vocab * sizeof(float));
    int32_t t = 0;
    cairn_finish_reason_t why = CAIRN_FINISH_NONE;
    int rc = cairn_sampler_sample(u->sampler, s->scratch, &t);
    if (rc == CAIRN_OK && r->logprobs)
        rc = cairn_grow_array_int((void **)&u->lp, &u->cap_lp, u->n_gen - u->delta_from + 1,
                                  sizeof(*u->lp), 16);
    if (rc == CAIRN_OK)
        rc = run_push_token(u, t);
    if (rc == CAIRN_OK && (rc = cairn_sampler_accept(u->sampler, t, &why)))
        u->n_toks--, u->n_gen--;
    if (rc) {
        req_fail(s, r, rc, rc == CAIRN_ERANGE ? "no token can be sampled (every logit is -inf)"
                                              : "sampling failed");
        return;
    }
    if (r->logprobs)
        token_logprob(row, s->vocab, t, r->top_logprobs, &u->lp[u->n_gen - 1 - u->delta_from]);
    double now = cairn_now_ms();
    if (r->t_first == 0) {
        r->t_first = now;
        r->usage.ttft_ms = now - r->t_submit;
    }
    r->t_last = now;
    const char *text;
    size_t len;
    bool stopped = false;
    if (cairn_tokenizer_stream_push(u->stream, t, &text, &len) == 0 && len) {
        const char *e;
        size_t el;
        if (cairn_stop_matcher_feed(u->stop, text, len, &e, &el, &stopped) == 0 && el)
            emit_delta(u, e, el);
    }
    if (stopped)
        run_finish(s, u, CAIRN_FINISH_STOP, true);
    else if (why != CAIRN_FINISH_NONE)
        run_finish(s, u, why, false);
    else
        u->has_tok = true;
}

/* One engine step over the running runs. Returns false when there was nothing to run. */
static bool step(cairn_sched_t *s)
{
    feed_decodes(s);
    poll_restoring(s);
    admit(s);
    if (s->n_running == 0)
        return false;
    if (cairn_grow_array_int((void **)&s->items, &s->cap_items, s->n_running, sizeof(*s->items), 16) ||
        cairn_grow_array_int((void **)&s->item_runs, &s->cap_item_runs, s->n_running, sizeof(*s->item_runs), 16)) {
        while (s->n_running)
            req_fail(s, s->running[0]->req, CAIRN_ENOMEM, "out of memory");
        return true;
    }
    /* Decode rows first (one token each), then prefill chunks in admission order. */
    int n = 0, rows = 0;
    for (int i = 0; i < s->n_running; i++) {
        sched_run_t *u = s->running[i];
        if (cairn_seq_n_pending(u->seq) == 1) {
            s->items[n] = (cairn_batch_item_t){u->seq, 1, CAIRN_LOGITS_LAST};
            s->item_runs[n++] = u;
            rows++;
        }
    }
    for (int i = 0; i < s->n_running; i++) {
        sched_run_t *u = s->running[i];
        int pending = cairn_seq_n_pending(u->seq);
        int left = s->opt.step_tokens - rows;
        if (pending <= 1)
            continue;
        if (left <= 0)
            break;
        int chunk = pending < s->opt.prefill_chunk ? pending : s->opt.prefill_chunk;
        if (chunk > left)
            chunk = left;
        s->items[n] = (cairn_batch_item_t){u->seq, chunk,
                                           chunk == pending ? CAIRN_LOGITS_LAST : CAIRN_LOGITS_NONE};
        s->item_runs[n++] = u;
        rows += chunk;
    }
    if (n == 0) { /* every run waits: for its restore's reads, or for a feed (the cold
                   * tier's write-back): briefly */
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
        return false;
    }
    const float *logits = NULL;
    int n_rows = 0;
    int rc = cairn_engine_step(s->engine, s->items, n, &logits, &n_rows);
    if (rc) {
        /* No sequence advanced; nothing can be retried safely. */
        while (s->n_running)
            req_fail(s, s->running[0]->req, rc, "the engine step failed");
        return true;
    }
    s->local.steps++;
    /* Runs may finish (and their requests be freed) while rows are processed, so map
     * rows to runs first. */
    int row = 0;
    for (int i = 0; i < n; i++) {
        if (s->items[i].logits != CAIRN_LOGITS_LAST) {
            s->item_runs[i] = NULL;
            continue;
        }
        s->items[i].n_tokens = row++;
    }
    for (int i = 0; i < n; i++) {
        sched_run_t *u = s->item_runs[i];
        if (!u || u->req->ended || u->done || !u->seq)
            continue;
        const float *lrow = logits + (size_t)s->items[i].n_tokens * (size_t)s->vocab;
        sched_req_t *r = u->req;
        if (u->index == 0 && r->n_started < r->n && u->n_gen == 0) {
            if ((rc = fork_choices(s, u))) {
                req_fail(s, r, rc, "forking the choices failed");
                continue;
            }
            for (int c = 1; c < r->n && !r->ended; c++)
                sample_one(s, &r->runs[c], lrow);
            if (r->ended) /* a choice failed, which ends the request */
                continue;
        }
        sample_one(s, u, lrow);
    }
    return true;
}

/* ---- Engine thread ---------------------------------------------------------------- */

static void publish_stats(cairn_sched_t *s)
{
    cairn_engine_counters_t ec;
    cairn_engine_counters(s->engine, &ec);
    cairn_kv_stats_t kv;
    cairn_engine_kv_stats(s->engine, &kv); /* the paged path: checked at create */
    cairn_engine_cold_counters_t cc;
    cairn_engine_cold_counters(s->engine, &cc);
    int running = 0;
    for (int i = 0; i < s->n_reqs; i++)
        running += s->reqs[i]->admitted_once;
    pthread_mutex_lock(&s->mu);
    uint64_t submitted = s->stats.requests_submitted;
    s->stats = s->local;
    s->stats.requests_submitted = submitted;
    s->stats.queued = s->n_queued;
    s->stats.running = running;
    s->stats.pool_blocks_total = s->pool_blocks;
    s->stats.pool_blocks_used = kv.blocks_in_use;
    s->stats.pool_blocks_cached = kv.blocks_cached;
    uint64_t held = (uint64_t)kv.blocks_in_use + kv.blocks_cached;
    s->stats.pool_blocks_free = s->pool_blocks > held ? s->pool_blocks - held : 0;
    s->stats.pool_block_bytes = kv.block_bytes;
    s->stats.pool_bytes_committed = kv.bytes_committed;
    s->stats.pool_grows = kv.grows;
    s->stats.pool_evictions = kv.evictions;
    s->stats.pool_hits = kv.hits;
    s->stats.pool_misses = kv.misses;
    s->stats.pool_hit_tokens = kv.hit_tokens;
    s->stats.pool_query_tokens = kv.query_tokens;
    s->stats.engine_tokens_computed = ec.tokens_computed;
    s->stats.engine_tokens_reused = ec.tokens_reused;
    s->stats.ckpt_saves = ec.ckpt_saves;
    s->stats.ckpt_restores = ec.ckpt_restores;
    s->stats.ckpt_evictions = ec.ckpt_evictions;
    s->stats.ckpt_count = ec.ckpt_count;
    s->stats.ckpt_bytes = ec.ckpt_bytes;
    s->stats.cold_enabled = cc.enabled;
    s->stats.cold_restored_blocks = cc.restored_blocks;
    s->stats.cold_restored_tokens = cc.restored_tokens;
    s->stats.cold_captured_blocks = cc.captured_blocks;
    s->stats.cold_hits = cc.store.hits;
    s->stats.cold_misses = cc.store.misses;
    s->stats.cold_corruptions = cc.store.corruptions;
    s->stats.cold_write_errors = cc.store.write_errors;
    s->stats.cold_queue_drops = cc.store.queue_drops;
    s->stats.cold_bytes_written = cc.store.bytes_written;
    s->stats.cold_used_bytes = cc.store.used_bytes;
    s->stats.cold_objects = cc.store.objects;
    s->stats.cold_sidecars_captured = cc.sidecars_captured;
    s->stats.cold_sidecars_installed = cc.sidecars_installed;
    s->stats.cold_sidecar_corruptions = cc.sidecar_corruptions;
    s->stats.cold_sidecar_drops = cc.sidecar_drops;
    s->stats.cold_sidecar_objects = cc.store.state_objects;
    s->stats.cold_sidecar_bytes = cc.store.state_bytes;
    s->stats.cold_restores_reduced = cc.restores_reduced;
    s->stats.cold_restores_suppressed = cc.restores_suppressed;
    memcpy(s->stats.cold_restore_miss, cc.miss, sizeof(cc.miss));
    s->stats.cold_capture_walks = cc.capture_walks;
    s->stats.cold_capture_chain_empty = cc.capture_chain_empty;
    s->stats.cold_capture_already = cc.capture_already;
    s->stats.cold_capture_failed = cc.capture_failed;
    s->stats.cold_sidecars_already = cc.sidecars_already;
    s->stats.cold_sidecar_skips = cc.sidecar_skips;
    s->stats.cold_sidecar_chain_empty = cc.sidecar_chain_empty;
    s->stats.cold_restore_lookups = cc.restore_lookups;
    s->stats.cold_sidecar_reads = cc.sidecar_reads;
    s->stats.cold_candidates_refused = cc.candidates_refused;
    s->stats.cold_install_failures = cc.install_failures;
    s->stats.cold_capture_queued = cc.capture_queued;
    s->stats.cold_capture_deferrals = cc.capture_deferrals;
    s->stats.cold_writeback_holds = cc.writeback_holds;
    s->stats.cold_capture_lost = cc.capture_lost;
    s->stats.cold_awaiting_blocks = cc.awaiting_blocks;
    s->stats.cold_awaiting_bytes = cc.awaiting_bytes;
    s->stats.cold_pinned_bytes = cc.pinned_bytes;
    s->stats.shared_enabled = cc.shared_enabled;
    s->stats.shared_connected = cc.shared.connected;
    s->stats.shared_restored_blocks = cc.shared_restored_blocks;
    s->stats.shared_promoted_blocks = cc.shared_promoted_blocks;
    s->stats.shared_hits = cc.shared.tier.hits;
    s->stats.shared_misses = cc.shared.tier.misses;
    s->stats.shared_corruptions = cc.shared.tier.corruptions;
    s->stats.shared_enqueued = cc.shared.tier.enqueued;
    s->stats.shared_bytes_written = cc.shared.tier.bytes_written;
    s->stats.shared_bytes_restored = cc.shared.tier.bytes_restored;
    s->stats.shared_write_errors = cc.shared.tier.write_errors;
    s->stats.shared_queue_drops = cc.shared.tier.queue_drops;
    s->stats.shared_unavailable = cc.shared.unavailable;
    s->stats.shared_faults = cc.shared.faults;
    s->stats.shared_outages = cc.shared.outages;
    s->stats.shared_reconnects = cc.shared.reconnects;
    s->stats.shared_timeouts = cc.shared.timeouts;
    s->stats.shared_queue_len = cc.shared.tier.queue_len;
    pthread_mutex_unlock(&s->mu);
}

/* Takes the inbox and the cancel list; returns false when the thread should exit. */
static bool collect(cairn_sched_t *s, bool idle)
{
    /* An idle engine thread still drives the cold tier's background capture (it alone
     * may pin and unpin pool blocks): while copies are pending it wakes every 2 ms. */
    bool capturing = idle && cairn_engine_cold_poll(s->engine);
    /* That poll may have taken back the last copies (their blocks unpinned) after the
     * last snapshot: publish before sleeping (once per wake-up), or the stats would show
     * them pinned until the next request (seen under ASan: test_stress_sched's idle pool
     * "in use"). */
    if (idle && !capturing)
        publish_stats(s);
    pthread_mutex_lock(&s->mu);
    if (capturing && !s->inbox_head && !s->n_cancels && !s->stopping) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += 2 * 1000 * 1000;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &dl);
    }
    while (idle && !capturing && !s->inbox_head && !s->n_cancels && !s->stopping && s->n_reqs == 0)
        pthread_cond_wait(&s->cv, &s->mu);
    sched_req_t *in = s->inbox_head;
    s->inbox_head = s->inbox_tail = NULL;
    uint64_t cancels[64];
    int nc = s->n_cancels < 64 ? s->n_cancels : 64;
    if (nc) {
        memcpy(cancels, s->cancels, (size_t)nc * sizeof(uint64_t));
        memmove(s->cancels, s->cancels + nc, (size_t)(s->n_cancels - nc) * sizeof(uint64_t));
        s->n_cancels -= nc;
    }
    bool stopping = s->stopping;
    bool expired = stopping && cairn_now_ms() >= s->deadline;
    pthread_mutex_unlock(&s->mu);

    while (in) {
        sched_req_t *r = in;
        in = in->next;
        r->next = NULL;
        if (cairn_grow_array_int((void **)&s->reqs, &s->cap_reqs, s->n_reqs + 1, sizeof(*s->reqs), 16) ||
            cairn_grow_array_int((void **)&s->waiting, &s->cap_waiting, s->n_waiting + 1, sizeof(*s->waiting), 16)) {
            /* Not linked yet: fail it directly. */
            cairn_req_event_t ev = {0};
            ev.kind = CAIRN_REQ_EVENT_ERROR;
            ev.usage = &r->usage;
            ev.status = CAIRN_ENOMEM;
            ev.message = "out of memory";
            ev.final = true;
            r->on_event(r->user, &ev);
            pthread_mutex_lock(&s->mu);
            s->n_queued--;
            pthread_mutex_unlock(&s->mu);
            s->local.requests_failed++;
            req_free(r);
            continue;
        }
        s->reqs[s->n_reqs++] = r;
        s->waiting[s->n_waiting++] = &r->runs[0];
    }
    for (int c = 0; c < nc; c++)
        for (int i = 0; i < s->n_reqs; i++)
            if (s->reqs[i]->id == cancels[c]) {
                req_fail(s, s->reqs[i], CAIRN_ECANCELED, "canceled");
                break;
            }
    if (expired)
        while (s->n_reqs)
            req_fail(s, s->reqs[0], CAIRN_ECANCELED, "canceled: the scheduler is shutting down");
    free_ended(s);
    return !(stopping && s->n_reqs == 0);
}

static void *engine_main(void *arg)
{
    cairn_sched_t *s = arg;
    bool idle = true;
    for (;;) {
        if (!collect(s, idle))
            break;
        idle = !step(s);
        free_ended(s);
        publish_stats(s);
    }
    publish_stats(s);
    return NULL;
}

/* ---- Public API ------------------------------------------------------------------- */

int cairn_sched_create(cairn_engine_t *engine, const cairn_tokenizer_t *tok,
                       const cairn_sched_options_t *opt, cairn_sched_t **out)
{
    if (!out)
        return CAIRN_EINVAL;
    *out = NULL;
    if (!engine || !tok)
        return CAIRN_EINVAL;
    const cairn_engine_options_t *eo = cairn_engine_options(engine);
    if (eo->kv_path != CAIRN_KV_PAGED)
        return CAIRN_EINVAL;
    cairn_sched_options_t o;
    cairn_sched_options_default(&o);
    if (opt)
        o = *opt;
    if (o.step_tokens < 1 || o.prefill_chunk < 1 || o.max_running < 1 || o.max_queued < 0)
        return CAIRN_EINVAL;
    cairn_sched_t *s = cairn_calloc(1, sizeof(*s));
    if (!s)
        return CAIRN_ENOMEM;
    const cairn_model_config_t *cfg = cairn_engine_config(engine);
    s->engine = engine;
    s->tok = tok;
    s->opt = o;
    s->vocab = cfg->vocab;
    s->block_tokens = eo->block_tokens;
    s->max_context = eo->max_context;
    /* The usable blocks at the budget, from the KV core (the null block excluded). The
     * engine thread does not run yet, so reading the core here is safe. */
    cairn_kv_stats_t kv;
    cairn_engine_kv_stats(engine, &kv);
    s->pool_blocks = kv.blocks_max > 1 ? kv.blocks_max - 1u : 0;
    s->next_id = 1;
    s->scratch = cairn_malloc((size_t)s->vocab * sizeof(float));
    if (!s->scratch) {
        cairn_free(s);
        return CAIRN_ENOMEM;
    }
    if (pthread_mutex_init(&s->mu, NULL)) {
        cairn_free(s->scratch);
        cairn_free(s);
        return CAIRN_EIO;
    }
    if (pthread_cond_init(&s->cv, NULL)) {
        pthread_mutex_destroy(&s->mu);
        cairn_free(s->scratch);
        cairn_free(s);
        return CAIRN_EIO;
    }
    publish_stats(s); /* the pool's figures are there before the first step */
    if (pthread_create(&s->thread, NULL, engine_main, s)) {
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        cairn_free(s->scratch);
        cairn_free(s);
        return CAIRN_EIO;
    }
    *out = s;
    return CAIRN_OK;
}

void cairn_sched_destroy(cairn_sched_t *s, int deadline_ms)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    s->deadline = cairn_now_ms() + (deadline_ms > 0 ? deadline_ms : 0);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    /* The thread ended every request; free what is left of the lists. */
    cairn_free(s->reqs);
    cairn_free(s->waiting);
    cairn_free(s->running);
    cairn_free(s->items);
    cairn_free(s->item_runs);
    cairn_free(s->cancels);
    cairn_free(s->scratch);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    cairn_free(s);
}

int cairn_sched_submit(cairn_sched_t *s, const cairn_req_params_t *p, uint64_t *id,
                       char *err, size_t err_len)
{
    if (id)
        *id = 0;
    if (!s || !p) {
        cairn_errf(err, err_len, "%s", "missing scheduler or parameters");
        return CAIRN_EINVAL;
    }
    sched_req_t *r = NULL;
    int rc = req_build(s, p, &r, err, err_len);
    if (rc)
        return rc;
    r->t_submit = cairn_now_ms();
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        rc = CAIRN_ESTATE;
        cairn_errf(err, err_len, "%s", "the scheduler is shutting down");
    } else if (s->n_queued >= s->opt.max_queued) {
        rc = CAIRN_EBUSY;
        cairn_errf(err, err_len, "%s", "too many queued requests");
    } else {
        r->id = s->next_id++;
        s->n_queued++;
        s->stats.requests_submitted++;
        if (s->inbox_tail)
            s->inbox_tail->next = r;
        else
            s->inbox_head = r;
        s->inbox_tail = r;
        if (id)
            *id = r->id;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (rc)
        req_free(r);
    return rc;
}

void cairn_sched_cancel(cairn_sched_t *s, uint64_t id)
{
    if (!s || id == 0)
        return;
    pthread_mutex_lock(&s->mu);
    if (cairn_grow_array_int((void **)&s->cancels, &s->cap_cancels, s->n_cancels + 1, sizeof(uint64_t), 16) == 0) {
        s->cancels[s->n_cancels++] = id;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

void cairn_sched_stats(cairn_sched_t *s, cairn_sched_stats_t *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    out->queued = s->n_queued;
    pthread_mutex_unlock(&s->mu);
}
