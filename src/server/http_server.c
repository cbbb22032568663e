/*
 * http_server.c — the HTTP front end (include/cairn/server.h), API-agnostic: every API's
 * shapes live in its adapter (api/api.h); this file knows sockets, routes and lifetimes.
 *
 * Model. One MHD daemon with an internal polling thread pool serves every connection.
 * The route table is built at create: each adapter's paths (generation and token-count
 * routes first, then model lists), then the server's own /health and /metrics, then
 * "other". A request's life, on HTTP threads: the access handler routes it, accumulates
 * the body (413 over the limit), checks the API key where the route's adapter says it is
 * (tenancy.c), and once the body is complete has the adapter parse it into a neutral
 * gen_request_t, resolves the tenant's cache domain, builds the prompt (prompt.c), checks
 * the context, and submits to the scheduler. Errors of routes that belong to no adapter
 * are rendered by the first adapter.
 *
 * Engine thread -> HTTP thread. The scheduler reports on its engine thread through
 * on_event, which only appends the delta's bytes to the per-choice pending buffer (or
 * records the finish), under the request's mutex, and resumes the connection if it is
 * suspended. Nothing on the engine thread renders or touches a socket.
 *  - Streams: the content reader steals the pending text (and logprobs), calls the
 *    adapter's begin with the first of it (the request is admitted by then, so begin
 *    knows the cached prompt tokens), runs each choice's text through its output parser
 *    (src/server/output/: reasoning, tool calls) and hands the typed events to the
 *    adapter as deltas (deliver_text), and at the final event finishes the parsers and
 *    calls end or fail; when nothing is pending it suspends the connection from inside
 *    the reader and returns 0, so an idle stream costs no CPU.
 *  - Non-streaming: the access handler suspends the connection after submitting and is
 *    called again after the final event's resume; it then runs begin, the deltas and end
 *    at once and queues the adapter's body.
 *
 * Invariants.
 *  - c->suspended is set and MHD_suspend_connection called under c->mu, and on_event
 *    resumes only under c->mu and only when c->suspended, so every suspend has exactly
 *    one resume and no resume targets a running connection.
 *  - A request context is shared by the connection, the streaming response and the
 *    scheduler (until its final event). Its reference count changes only under c->mu
 *    (conn_ref / conn_unref), and the last to let go frees it. After MHD reports
 *    completion, c->mhd is NULL and nothing touches it.
 *  - The adapter's render context (c->render) is used by one HTTP thread at a time: the
 *    stream reader, or the access handler of a non-streaming request after the final
 *    event; never by the engine thread.
 *  - A client that disconnects mid-stream is noticed at the next write; the completion
 *    callback then cancels the request, and the scheduler frees its blocks. The
 *    watchdog thread (see "Robustness") cancels what MHD cannot notice: a non-streaming
 *    client gone while its connection is suspended, a stream nobody reads; and sends
 *    keepalive comments on silent streams.
 *  - Lock order: srv->live_mu (the watchdog's list), then a request's mu.
 *
 * Shutdown (cairn_server_destroy): close the listening socket, refuse new submissions
 * (503), destroy the scheduler with the deadline (every request gets its final event, so
 * every suspended connection is resumed), wait briefly for streams to drain, stop MHD.
 *
 * Thread-safety: see cairn/server.h. srv->mu (a rwlock) guards the scheduler pointer
 * against destruction while HTTP threads submit, cancel or read stats.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cairn/chat_template.h"
#include "cairn/server.h"
#include "server/output/output.h"
#include "util/util.h"
#include "server/server_impl.h"

typedef enum {
    ROUTE_API = 0,  /* an adapter's path */
    ROUTE_HEALTH,
    ROUTE_METRICS,
    ROUTE_OTHER,    /* anything else: 404 */
} route_kind_t;

typedef struct {
    const char *path;          /* also the request-log label (and the metrics one, with
                                * the required header when there is one) */
    route_kind_t kind;
    const api_adapter_t *api;  /* ROUTE_API: the adapter serving it */
    api_op_t op;               /* ROUTE_API: what it does */
    const char *when_header;   /* ROUTE_API: a header the request must carry, or NULL */
} route_t;

struct cairn_server {
    cairn_engine_t *engine;
    const cairn_tokenizer_t *tok;
    cairn_sched_t *sched;
    struct MHD_Daemon *d;
    pthread_rwlock_t mu;      /* guards sched against destroy; stopping */
    bool stopping;
    int port;
    size_t max_body;
    char *model_id;
    long long started;
    int vocab;
    int max_context;          /* tokens one sequence may hold: the engine's context, or less
                               * when the KV pool holds less (max_model_len) */
    int engine_context;       /* the engine's max_context */
    cairn_chat_template_t *tmpl;
    const tool_format_t *tool_format; /* the model's tool-call format, or NULL */
    bool reasons;               /* the template renders reasoning as <think> blocks */
    prompt_ctx_t prompt;
    tenancy_t *ten;
    metrics_t *met;
    reqlog_t *log;
    const api_adapter_t **apis; /* [n_apis]; apis[0] renders errors of non-API routes */
    size_t n_apis;
    route_t *routes;            /* [n_routes]; the last is ROUTE_OTHER */
    const char **route_labels;  /* [n_routes] for metrics */
    int n_routes;
    atomic_uint_fast64_t next_id;
    uint64_t id_mix;
    atomic_int live_generations; /* submitted requests whose connection is not complete */

    /* The watchdog (see "Robustness"): submitted requests whose connection is live. */
    pthread_mutex_t live_mu;
    struct conn *live;          /* list through conn.live_next/prev, under live_mu */
    pthread_t watchdog;
    bool watchdog_started, watchdog_stop; /* stop: under live_mu */
    pthread_cond_t watchdog_cv;
    int stall_ms;
    size_t max_pending;
    int keepalive_ms;
    int sndbuf;                 /* SO_SNDBUF of each connection; 0: the kernel's */
};

/* A growing list of token logprobs (the scheduler's records). */
typedef struct {
    cairn_token_logprob_t *v;
    int n, cap;
} lp_list_t;

static int lp_append(lp_list_t *l, const cairn_token_logprob_t *v, int n)
{
    if (l->n + n > l->cap) {
        int cap = l->cap ? l->cap : 16;
        while (cap < l->n + n)
            cap *= 2;
        cairn_token_logprob_t *nv = cairn_realloc(l->v, (size_t)cap * sizeof *nv);
        if (!nv)
            return CAIRN_ENOMEM;
        l->v = nv;
        l->cap = cap;
    }
    memcpy(l->v + l->n, v, (size_t)n * sizeof *v);
    l->n += n;
    return 0;
}

typedef struct conn {
    cairn_server_t *srv;
    struct MHD_Connection *mhd; /* NULL once MHD reported completion */
    int route;                  /* index into srv->routes */
    const route_t *rt;
    const api_adapter_t *api;   /* the route's adapter, else srv->apis[0] (errors) */
    bool is_post;
    api_buf_t body;
    bool body_too_large;
    int http_status;            /* of the queued response */
    char domain[17];
    const char *key;            /* the API key presented (a header value), or NULL */
    size_t key_len;

    pthread_mutex_t mu;
    int refs;                   /* under mu */
    bool submitted;
    uint64_t sched_id;
    gen_request_t req;          /* immutable once submitted */
    bool have_req;
    char id[48];
    api_render_t render;        /* the adapter's; one HTTP thread at a time */
    bool began;                 /* the adapter's begin was called (release is due) */
    output_parser_t *parser[API_MAX_N]; /* per choice, or NULL: text passes as is */
    bool opens_reasoning;       /* the prompt ends inside a <think> block */

    /* Shared with the engine thread (under mu). */
    bool suspended;
    bool final;                 /* the final event arrived */
    bool ok, canceled, oom;
    int n_done;
    api_error_t gen_err;
    api_buf_t pend[API_MAX_N];  /* stream: not yet sent; non-stream: the whole text */
    lp_list_t pend_lp[API_MAX_N]; /* logprobs of those tokens (when asked for) */
    cairn_finish_reason_t finish[API_MAX_N];
    cairn_req_usage_t usage;
    bool have_usage;
    char miss_reason[32];

    /* Streaming reader's own state (one MHD thread at a time). */
    size_t out_off;             /* bytes of render.out already handed to MHD */
    bool ended;

    /* The watchdog's (live list under srv->live_mu; the rest under mu). */
    struct conn *live_next, *live_prev;
    bool listed;                /* in the live list */
    bool abandoned;             /* the watchdog canceled it (client gone or not reading) */
    double last_read_ms;        /* streams: when MHD last asked the reader for bytes */
    double last_sent_ms;        /* streams: when the reader last handed MHD bytes */
    bool keepalive_due;         /* streams: the watchdog asks for a keepalive comment */
} conn_t;


static void conn_ref(conn_t *c)
{
    pthread_mutex_lock(&c->mu);
    c->refs++;
    pthread_mutex_unlock(&c->mu);
}

static void conn_unref(conn_t *c)
{
    pthread_mutex_lock(&c->mu);
    int left = --c->refs;
    pthread_mutex_unlock(&c->mu);
    if (left > 0)
        return;
    pthread_mutex_destroy(&c->mu);
    if (c->began)
        c->api->release(&c->render);
    for (int i = 0; i < API_MAX_N; i++)
        output_parser_destroy(c->parser[i]);
    api_buf_free(&c->render.out);
    api_buf_free(&c->body);
    for (int i = 0; i < API_MAX_N; i++) {
        api_buf_free(&c->pend[i]);
        cairn_free(c->pend_lp[i].v);
    }
    if (c->have_req)
        gen_request_fini(&c->req);
    cairn_free(c);
}

/* ---- Engine-thread events ------------------------------------------------------------ */

static void on_event(void *user, const cairn_req_event_t *ev)
{
    conn_t *c = user;
    pthread_mutex_lock(&c->mu);
    int idx = ev->index >= 0 && ev->index < c->req.n ? ev->index : 0;
    switch (ev->kind) {
    case CAIRN_REQ_EVENT_DELTA:
        if (ev->text_len && api_buf_append(&c->pend[idx], ev->text, ev->text_len) != 0)
            c->oom = true;
        if (ev->logprobs && lp_append(&c->pend_lp[idx], ev->logprobs, ev->n_tokens) != 0)
            c->oom = true;
        break;
    case CAIRN_REQ_EVENT_DONE:
        c->finish[idx] = ev->finish;
        c->n_done++;
        if (c->n_done >= c->req.n) {
            c->final = true;
            c->ok = !c->oom;
        }
        break;
    case CAIRN_REQ_EVENT_ERROR:
        c->final = true;
        c->ok = false;
        c->canceled = ev->status == CAIRN_ECANCELED;
        if (c->canceled)
            api_error_set(&c->gen_err, 503, API_ERR_UNAVAILABLE, NULL, "canceled",
                          "The request was canceled (%s)",
                          ev->message ? ev->message : "server shutting down");
        else
            api_error_set(&c->gen_err, 500, API_ERR_SERVER, NULL, NULL, "Generation failed: %s",
                          ev->message ? ev->message : cairn_strerror(ev->status));
        break;
    }
    if (ev->usage) {
        c->usage = *ev->usage;
        snprintf(c->miss_reason, sizeof c->miss_reason, "%s",
                 ev->usage->miss_reason ? ev->usage->miss_reason : "");
        c->usage.miss_reason = c->miss_reason[0] ? c->miss_reason : NULL;
        c->have_usage = true;
    }
    if (c->final && c->oom && c->ok == false && ev->kind == CAIRN_REQ_EVENT_DONE)
        api_error_oom(&c->gen_err);
    bool last = c->final;
    if (c->suspended && c->mhd) {
        c->suspended = false;
        MHD_resume_connection(c->mhd);
    }
    pthread_mutex_unlock(&c->mu);
    if (last)
        conn_unref(c); /* the scheduler's reference */
}

/* ---- Responses ----------------------------------------------------------------------- */

static enum MHD_Result queue(conn_t *c, int status, const char *ctype, const char *body,
                             size_t len, const char *allow)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    if (status == 401 && c->api->auth[0].scheme)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, c->api->auth[0].scheme);
    enum MHD_Result rc = MHD_queue_response(c->mhd, (unsigned)status, r);
    MHD_destroy_response(r);
    c->http_status = status;
    metrics_http(c->srv->met, c->route, status);
    return rc;
}

/* The adapter's static out-of-memory body: when even rendering an error failed. */
static enum MHD_Result queue_oom(conn_t *c)
{
    return queue(c, 503, c->api->content_type, c->api->oom_body, strlen(c->api->oom_body),
                 NULL);
}

static enum MHD_Result queue_error(conn_t *c, const api_error_t *e, const char *allow)
{
    api_buf_t b = {0};
    if (c->api->render_error(e, &b) != 0) {
        api_buf_free(&b);
        return queue_oom(c);
    }
    enum MHD_Result rc = queue(c, e->http_status, c->api->content_type, b.p ? b.p : "", b.len,
                               allow);
    api_buf_free(&b);
    return rc;
}

/* A whole 200 body the adapter rendered into b (freed here). */
static enum MHD_Result queue_body(conn_t *c, api_buf_t *b)
{
    enum MHD_Result rc = queue(c, 200, c->api->content_type, b->p ? b->p : "", b->len, NULL);
    api_buf_free(b);
    return rc;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *out, size_t max);
static void stream_free(void *cls) { conn_unref(cls); }

/* Usage as clients read it: cached = every prompt token not computed (hot + cold). */
static api_usage_t usage_of(const conn_t *c)
{
    api_usage_t u = {0, 0, 0, 0, 0};
    if (c->have_usage) {
        u.prompt_tokens = c->usage.prompt_tokens;
        u.completion_tokens = c->usage.completion_tokens;
        u.hot_tokens = c->usage.cached_tokens;
        u.restored_tokens = c->usage.restored_tokens;
        u.cached_tokens = u.hot_tokens + u.restored_tokens;
    }
    return u;
}

/* Called with the usage known so far (c->mu held by the caller or the request final). */
static int begin_render(conn_t *c, const api_usage_t *u)
{
    c->began = true;
    c->render.usage = *u;
    c->render.usage.completion_tokens = 0;
    return c->api->begin(&c->render);
}

typedef struct {
    conn_t *c;
    int choice;
} emit_ctx_t;

/* A tool call's id: the response id's random part, the choice and the call index. */
static void tool_id(const conn_t *c, int choice, int tool, char out[64])
{
    size_t n = strlen(c->id);
    const char *hex = n > 24 ? c->id + n - 24 : c->id; /* make_id's 24 hex digits */
    snprintf(out, 64, "call_%s%02x%02x", hex, choice & 0xff, tool & 0xff);
}

/* One parser event as the adapter's delta. */
static int emit_delta(void *ctx, const out_event_t *ev)
{
    emit_ctx_t *x = ctx;
    char id[64] = "";
    api_delta_t d = {.choice = x->choice, .text = ev->text, .len = ev->len, .tool = ev->tool,
                     .tool_id = id};
    switch (ev->kind) {
    case OUT_TEXT:
        d.kind = API_DELTA_TEXT;
        break;
    case OUT_REASONING:
        d.kind = API_DELTA_REASONING;
        break;
    case OUT_TOOL_BEGIN:
        d.kind = API_DELTA_TOOL_CALL_BEGIN;
        break;
    case OUT_TOOL_ARGS:
        d.kind = API_DELTA_TOOL_CALL_ARGS;
        break;
    case OUT_TOOL_END:
        d.kind = API_DELTA_TOOL_CALL_END;
        break;
    }
    if (d.kind >= API_DELTA_TOOL_CALL_BEGIN)
        tool_id(x->c, x->choice, ev->tool, id);
    return x->c->api->delta(&x->c->render, &d);
}

/* One choice's new text, to the adapter: through the choice's output parser (reasoning,
 * tool calls) when it has one, else as answer text. */
static int deliver_text(conn_t *c, int choice, const char *text, size_t len)
{
    emit_ctx_t x = {c, choice};
    if (c->parser[choice])
        return output_parser_feed(c->parser[choice], text, len, emit_delta, &x);
    out_event_t ev = {.kind = OUT_TEXT, .tool = 0, .text = text, .len = len};
    return emit_delta(&x, &ev);
}

/* One choice's token logprobs, with each candidate's bytes, to the adapter. */
static int deliver_logprobs(conn_t *c, int choice, const lp_list_t *l)
{
    if (l->n == 0)
        return 0;
    const cairn_tokenizer_t *tok = c->srv->tok;
    api_logprob_t *v = cairn_calloc((size_t)l->n, sizeof *v);
    api_buf_t arena = {0};
    int rc = v ? 0 : CAIRN_ENOMEM;
    /* Pieces go into one arena; their offsets become pointers once it stops growing. */
    for (int i = 0; !rc && i < l->n; i++) {
        const cairn_token_logprob_t *t = &l->v[i];
        v[i].n_top = t->n_top;
        for (int k = -1; !rc && k < t->n_top; k++) {
            api_token_lp_t *d = k < 0 ? &v[i].token : &v[i].top[k];
            int32_t id = k < 0 ? t->token : t->top_ids[k];
            char piece[256];
            size_t len = 0;
            if (cairn_tokenizer_token_to_piece(tok, id, piece, sizeof piece, &len) != 0)
                len = 0;
            if (len > sizeof piece)
                len = sizeof piece; /* a 256-byte token: its bytes are cut there */
            d->bytes = (const char *)(uintptr_t)arena.len;
            d->len = len;
            d->logprob = k < 0 ? t->logprob : t->top_logprobs[k];
            rc = api_buf_append(&arena, piece, len);
        }
    }
    for (int i = 0; !rc && i < l->n; i++)
        for (int k = -1; k < v[i].n_top; k++) {
            api_token_lp_t *d = k < 0 ? &v[i].token : &v[i].top[k];
            d->bytes = arena.p + (uintptr_t)d->bytes;
        }
    if (!rc) {
        api_delta_t d = {.kind = API_DELTA_LOGPROBS, .choice = choice, .text = "", .len = 0,
                         .tool_id = "", .logprobs = v, .n_logprobs = l->n};
        rc = c->api->delta(&c->render, &d);
    }
    api_buf_free(&arena);
    cairn_free(v);
    return rc;
}

/* Every choice's output is complete: parsers release what they held. Fills calls[n]. */
static int finish_parsers(conn_t *c, int calls[API_MAX_N])
{
    int rc = 0;
    for (int i = 0; i < c->req.n; i++) {
        calls[i] = 0;
        if (!c->parser[i])
            continue;
        emit_ctx_t x = {c, i};
        if (!rc)
            rc = output_parser_finish(c->parser[i], emit_delta, &x);
        calls[i] = output_parser_tool_calls(c->parser[i]);
    }
    return rc;
}

/* Non-streaming: called with c->mu held after the final event (the engine thread is done
 * with the request, so nothing else writes pend/finish/usage now). */
static enum MHD_Result finish_full(conn_t *c)
{
    if (!c->ok)
        return queue_error(c, &c->gen_err, NULL);
    api_usage_t usage = usage_of(c);
    int rc = begin_render(c, &usage);
    for (int i = 0; !rc && i < c->req.n; i++) {
        rc = deliver_logprobs(c, i, &c->pend_lp[i]);
        if (!rc && c->pend[i].len)
            rc = deliver_text(c, i, c->pend[i].p, c->pend[i].len);
    }
    int calls[API_MAX_N];
    if (!rc)
        rc = finish_parsers(c, calls);
    api_end_t end = {.finish = c->finish, .tool_calls = calls, .usage = usage};
    if (!rc)
        rc = c->api->end(&c->render, &end);
    if (rc)
        return queue_oom(c);
    return queue_body(c, &c->render.out);
}

/*
 * Stream content reader. Steals pending text under the lock, renders outside it, and
 * suspends the connection when there is nothing to send and the request is still live.
 * The adapter's begin runs with the first text (or the end), once the request was
 * admitted, so a stream's opening event can report the cached prompt tokens.
 */
static ssize_t stream_reader(void *cls, uint64_t pos, char *dst, size_t max)
{
    conn_t *c = cls;
    api_buf_t *out = &c->render.out;
    (void)pos;
    pthread_mutex_lock(&c->mu);
    c->last_read_ms = cairn_now_ms();
    pthread_mutex_unlock(&c->mu);
    for (;;) {
        if (c->out_off < out->len) {
            size_t n = out->len - c->out_off;
            if (n > max)
                n = max;
            memcpy(dst, out->p + c->out_off, n);
            c->out_off += n;
            pthread_mutex_lock(&c->mu);
            c->last_sent_ms = cairn_now_ms();
            pthread_mutex_unlock(&c->mu);
            return (ssize_t)n;
        }
        out->len = c->out_off = 0;
        if (c->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;

        api_buf_t taken[API_MAX_N];
        lp_list_t taken_lp[API_MAX_N];
        pthread_mutex_lock(&c->mu);
        bool final = c->final, ok = c->ok;
        int n = c->req.n;
        bool any = false;
        for (int i = 0; i < n; i++) {
            taken[i] = c->pend[i];
            memset(&c->pend[i], 0, sizeof c->pend[i]);
            taken_lp[i] = c->pend_lp[i];
            memset(&c->pend_lp[i], 0, sizeof c->pend_lp[i]);
            any |= taken[i].len > 0 || taken_lp[i].n > 0;
        }
        if (!any && !final && c->keepalive_due) {
            /* Nothing to say for a while (a long prefill, a queue): the API's keepalive
             * frame (Anthropic's ping event) or an SSE comment, which every client's
             * parser skips, keeps the connection and its proxies alive. */
            c->keepalive_due = false;
            pthread_mutex_unlock(&c->mu);
            const char *ka = c->api->keepalive ? c->api->keepalive : ": keepalive\n\n";
            if (api_buf_append(out, ka, strlen(ka)) != 0)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        if (!any && !final) {
            c->suspended = true;
            MHD_suspend_connection(c->mhd);
            pthread_mutex_unlock(&c->mu);
            return 0;
        }
        api_error_t gen_err = c->gen_err;
        cairn_finish_reason_t finish[API_MAX_N];
        memcpy(finish, c->finish, sizeof finish);
        api_usage_t usage = usage_of(c);
        pthread_mutex_unlock(&c->mu);

        int rc = c->began ? 0 : begin_render(c, &usage);
        for (int i = 0; i < n; i++) {
            if (!rc)
                rc = deliver_logprobs(c, i, &taken_lp[i]);
            if (!rc && taken[i].len > 0)
                rc = deliver_text(c, i, taken[i].p, taken[i].len);
            api_buf_free(&taken[i]);
            cairn_free(taken_lp[i].v);
        }
        if (!rc && final) {
            int calls[API_MAX_N];
            if (ok)
                rc = finish_parsers(c, calls);
            api_end_t end = {.finish = finish, .tool_calls = calls, .usage = usage};
            if (!rc)
                rc = ok ? c->api->end(&c->render, &end) : c->api->fail(&c->render, &gen_err);
            c->ended = true;
        }
        if (rc)
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

/* ---- Generation ------------------------------------------------------------------------ */

static void make_id(conn_t *c)
{
    cairn_server_t *s = c->srv;
    uint64_t k = atomic_fetch_add(&s->next_id, 1) + 1;
    uint64_t x = (k ^ s->id_mix) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 31;
    size_t pl = strlen(c->api->id_prefix);
    bool sep = pl && c->api->id_prefix[pl - 1] == '_'; /* "msg_": the prefix has its own */
    snprintf(c->id, sizeof c->id, "%s%s%016llx%08llx", c->api->id_prefix, sep ? "" : "-",
             (unsigned long long)x, (unsigned long long)k & 0xffffffffull);
}

static const char *header_of(void *ctx, const char *name)
{
    return MHD_lookup_connection_value(ctx, MHD_HEADER_KIND, name);
}

/* Model-dependent checks of a generation request with n_ids prompt tokens (0: fine). */
static void check_fit(const cairn_server_t *s, const gen_request_t *r, int n_ids,
                      api_error_t *e)
{
    char verr[256] = "";
    int32_t max_tokens = r->sampling.max_tokens;
    if (n_ids == 0) {
        api_error_set(e, 400, API_ERR_INVALID_REQUEST, r->prompt_param, NULL,
                      "The prompt is empty");
    } else if (n_ids >= s->max_context
               || (max_tokens > 0 && !r->max_tokens_is_bound
                   && (int64_t)n_ids + max_tokens > s->max_context)) {
        bool pool = s->max_context < s->engine_context;
        api_error_set(e, 400, API_ERR_INVALID_REQUEST,
                      max_tokens > 0 && n_ids < s->max_context ? r->max_tokens_param
                                                               : r->prompt_param,
                      "context_length_exceeded",
                      "This model's maximum context length is %d tokens%s; the request has %d "
                      "prompt tokens and asks for %d more",
                      s->max_context,
                      pool ? " (what the KV pool holds: raise --pool-mib or --memory-mib)" : "",
                      n_ids, max_tokens > 0 ? max_tokens : 1);
    } else if (cairn_sampling_params_validate(&r->sampling, s->vocab, verr, sizeof verr) != 0) {
        api_error_set(e, 400, API_ERR_INVALID_REQUEST, NULL, NULL, "%s", verr);
    }
}

static void submit_error(const gen_request_t *r, int rc, const char *serr, api_error_t *e)
{
    switch (rc) {
    case CAIRN_EBUSY:
        api_error_set(e, 429, API_ERR_RATE_LIMIT, NULL, "queue_full",
                      "The server is busy: the request queue is full; retry later");
        return;
    case CAIRN_ERANGE:
        api_error_set(e, 400, API_ERR_INVALID_REQUEST, r->prompt_param, "context_length_exceeded",
                      "The request does not fit the context or the KV pool: %s",
                      serr[0] ? serr : "too long");
        return;
    case CAIRN_EINVAL:
    case CAIRN_EUNSUPPORTED:
        api_error_set(e, 400, API_ERR_INVALID_REQUEST, r->n > 1 ? "n" : NULL, NULL, "%s",
                      serr[0] ? serr : "invalid request");
        return;
    case CAIRN_ESTATE:
        api_error_set(e, 503, API_ERR_UNAVAILABLE, NULL, "shutting_down",
                      "The server is shutting down");
        return;
    case CAIRN_ENOMEM:
        api_error_oom(e);
        return;
    }
    api_error_set(e, 500, API_ERR_SERVER, NULL, NULL, "submit failed: %s", cairn_strerror(rc));
}

/* A POST to an adapter's generation or token-count route, body complete. */
static enum MHD_Result start_request(conn_t *c)
{
    cairn_server_t *s = c->srv;
    const api_adapter_t *a = c->api;
    api_error_t e;
    memset(&e, 0, sizeof e);
    api_input_t in = {.op = c->rt->op, .body = c->body.p ? c->body.p : "", .len = c->body.len,
                      .header = header_of, .header_ctx = c->mhd};
    if (a->parse(&in, &c->req, &e) != 0)
        return queue_error(c, &e, NULL);
    c->have_req = true;
    gen_request_t *r = &c->req;
    if (r->n < 1 || r->n > API_MAX_N) {
        api_error_set(&e, 500, API_ERR_SERVER, NULL, NULL, "API %s produced n = %d", a->name,
                      r->n);
        return queue_error(c, &e, NULL);
    }
    if (r->model && strcmp(r->model, s->model_id) != 0) {
        api_error_set(&e, 404, API_ERR_INVALID_REQUEST, "model", "model_not_found",
                      "The model '%s' does not exist; this server serves '%s'", r->model,
                      s->model_id);
        return queue_error(c, &e, NULL);
    }
    char *salt = NULL;
    int rc = tenancy_resolve(s->ten, c->key, c->key_len, r->cache_salt, &salt, c->domain);
    if (rc) {
        if (rc == CAIRN_ENOMEM)
            api_error_oom(&e);
        else
            api_error_set(&e, 401, API_ERR_AUTHENTICATION, NULL, "invalid_api_key",
                          "Incorrect or missing API key");
        return queue_error(c, &e, NULL);
    }
    int32_t *ids = NULL;
    int n_ids = 0;
    if (prompt_build(&s->prompt, r, &ids, &n_ids, &c->opens_reasoning, &e) != 0) {
        cairn_free(salt);
        return queue_error(c, &e, NULL);
    }
    if (c->rt->op == API_OP_COUNT_TOKENS) {
        cairn_free(ids);
        cairn_free(salt);
        api_buf_t b = {0};
        if (a->render_count(r, n_ids, &b) != 0) {
            api_buf_free(&b);
            return queue_oom(c);
        }
        return queue_body(c, &b);
    }
    check_fit(s, r, n_ids, &e);
    if (e.http_status) {
        cairn_free(ids);
        cairn_free(salt);
        return queue_error(c, &e, NULL);
    }

    /* Output parsing: reasoning where the template reasons, calls where tools were given. */
    bool calls = s->tool_format && !r->no_tool_calls && cJSON_GetArraySize(r->tools) > 0;
    if (r->prompt_kind == GEN_PROMPT_MESSAGES && (s->reasons || calls)) {
        output_options_t oo = {.reasoning = s->reasons, .in_reasoning = c->opens_reasoning,
                               .tools = calls ? s->tool_format : NULL,
                               .tool_schemas = r->tools};
        for (int i = 0; i < r->n; i++)
            if (output_parser_create(&oo, &c->parser[i]) != 0) {
                cairn_free(ids);
                cairn_free(salt);
                return queue_oom(c);
            }
    }

    make_id(c);
    c->render.req = r;
    c->render.id = c->id;
    c->render.created = (long long)time(NULL);
    c->render.model = s->model_id;

    cairn_req_params_t p;
    memset(&p, 0, sizeof p);
    p.prompt = ids;
    p.n_prompt = n_ids;
    p.cache_salt = salt;
    p.sampling = r->sampling;
    /* "Until the context limit" means the limit the pool can hold, so a lone request
     * never outgrows the pool. */
    if (p.sampling.max_tokens < 0 && s->max_context < s->engine_context)
        p.sampling.max_tokens = s->max_context - n_ids;
    /* A bound past the context (max_tokens_is_bound) is what the context leaves. */
    if (r->max_tokens_is_bound && (int64_t)n_ids + p.sampling.max_tokens > s->max_context)
        p.sampling.max_tokens = s->max_context - n_ids;
    p.n = r->n;
    p.logprobs = r->logprobs;
    p.retain = r->retain;
    p.top_logprobs = r->top_logprobs;
    p.on_event = on_event;
    p.user = c;
    char serr[256] = "";
    /* The scheduler's reference, taken before submit: events may arrive at once. */
    conn_ref(c);
    pthread_rwlock_rdlock(&s->mu);
    rc = s->stopping ? CAIRN_ESTATE
                     : cairn_sched_submit(s->sched, &p, &c->sched_id, serr, sizeof serr);
    pthread_rwlock_unlock(&s->mu);
    cairn_free(ids);
    cairn_free(salt);
    if (rc) {
        conn_unref(c); /* no event will come; the connection's reference remains */
        submit_error(r, rc, serr, &e);
        return queue_error(c, &e, NULL);
    }
    c->submitted = true;
    atomic_fetch_add(&s->live_generations, 1);
    pthread_mutex_lock(&c->mu);
    c->last_read_ms = c->last_sent_ms = cairn_now_ms();
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_lock(&s->live_mu);
    c->live_next = s->live;
    c->live_prev = NULL;
    if (s->live)
        s->live->live_prev = c;
    s->live = c;
    c->listed = true;
    pthread_mutex_unlock(&s->live_mu);
    if (!r->stream)
        return MHD_YES; /* the caller suspends until the final event */

    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384,
                                                                  stream_reader, c, stream_free);
    if (!resp)
        return MHD_NO;
    conn_ref(c); /* the response's, dropped by stream_free */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, a->stream_content_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result qr = MHD_queue_response(c->mhd, 200, resp);
    MHD_destroy_response(resp);
    c->http_status = 200;
    metrics_http(s->met, c->route, 200);
    return qr;
}

static enum MHD_Result serve_models(conn_t *c, const char *url)
{
    cairn_server_t *s = c->srv;
    size_t pl = strlen(c->rt->path);
    const char *want = url[pl] == '/' ? url + pl + 1 : NULL;
    api_model_t m = {.id = s->model_id, .created = s->started, .max_model_len = s->max_context};
    api_buf_t b = {0};
    api_error_t e;
    memset(&e, 0, sizeof e);
    int rc = c->api->render_models(&m, want, &b, &e);
    if (rc == CAIRN_ENOMEM || (rc && !e.http_status)) {
        api_buf_free(&b);
        return queue_oom(c);
    }
    if (rc) {
        api_buf_free(&b);
        return queue_error(c, &e, NULL);
    }
    return queue_body(c, &b);
}

static void sched_stats(cairn_server_t *s, cairn_sched_stats_t *st)
{
    memset(st, 0, sizeof *st);
    pthread_rwlock_rdlock(&s->mu);
    if (!s->stopping)
        cairn_sched_stats(s->sched, st);
    pthread_rwlock_unlock(&s->mu);
}

/* ---- MHD callbacks ----------------------------------------------------------------------- */

static int route_of(const cairn_server_t *s, const char *url, struct MHD_Connection *mhd)
{
    for (int i = 0; i < s->n_routes - 1; i++) {
        const route_t *r = &s->routes[i];
        size_t n = strlen(r->path);
        if (!strncmp(url, r->path, n)
            && (url[n] == '\0'
                || (url[n] == '/' && r->kind == ROUTE_API && r->op == API_OP_LIST_MODELS))
            && (!r->when_header || MHD_lookup_connection_value(mhd, MHD_HEADER_KIND, r->when_header)))
            return i;
    }
    return s->n_routes - 1;
}

/* The API key per the adapter's rules (api_auth_t), or NULL. */
static const char *find_key(const api_adapter_t *a, struct MHD_Connection *mhd, size_t *len)
{
    for (size_t i = 0; i < a->n_auth; i++) {
        const char *v = MHD_lookup_connection_value(mhd, MHD_HEADER_KIND, a->auth[i].header);
        const char *scheme = a->auth[i].scheme;
        if (!v)
            continue;
        if (scheme) {
            size_t sl = strlen(scheme);
            if (strncasecmp(v, scheme, sl) != 0 || v[sl] != ' ')
                continue;
            v += sl + 1;
        }
        while (*v == ' ')
            v++;
        size_t n = strlen(v);
        while (n && v[n - 1] == ' ')
            n--;
        *len = n;
        return v;
    }
    *len = 0;
    return NULL;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *mhd, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    cairn_server_t *s = cls;
    conn_t *c = *con_cls;
    (void)version;
    if (!c) {
        c = cairn_calloc(1, sizeof *c);
        if (!c)
            return MHD_NO;
        pthread_mutex_init(&c->mu, NULL);
        c->refs = 1; /* the connection's */
        c->srv = s;
        c->mhd = mhd;
        c->route = route_of(s, url, mhd);
        c->rt = &s->routes[c->route];
        c->api = c->rt->api ? c->rt->api : s->apis[0];
        c->is_post = !strcmp(method, MHD_HTTP_METHOD_POST);
        snprintf(c->domain, sizeof c->domain, "default");
        *con_cls = c;
        /* A declared body far over the limit is refused before reading it. */
        const char *cl = MHD_lookup_connection_value(mhd, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->max_body)
            c->body_too_large = true;
        if (c->body_too_large && strtoull(cl, NULL, 10) > 16 * (unsigned long long)s->max_body) {
            api_error_t e;
            api_error_set(&e, 413, API_ERR_INVALID_REQUEST, NULL, "request_too_large",
                          "The request body exceeds %zu bytes", s->max_body);
            return queue_error(c, &e, NULL);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!c->body_too_large && c->body.len + *upload_size > s->max_body)
            c->body_too_large = true;
        if (!c->body_too_large && api_buf_append(&c->body, upload, *upload_size) != 0)
            return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }

    if (c->submitted) { /* non-streaming, resumed (or re-polled) */
        pthread_mutex_lock(&c->mu);
        enum MHD_Result rc;
        if (c->final) {
            rc = finish_full(c);
        } else {
            c->suspended = true;
            MHD_suspend_connection(mhd);
            rc = MHD_YES;
        }
        pthread_mutex_unlock(&c->mu);
        return rc;
    }

    api_error_t e;
    memset(&e, 0, sizeof e);
    const route_t *rt = c->rt;
    bool want_post = rt->kind == ROUTE_API && rt->op != API_OP_LIST_MODELS;
    bool is_get = !strcmp(method, MHD_HTTP_METHOD_GET);
    if (rt->kind == ROUTE_OTHER) {
        api_error_set(&e, 404, API_ERR_NOT_FOUND, NULL, "not_found", "Unknown route: %s %s",
                      method, url);
        return queue_error(c, &e, NULL);
    }
    if (want_post ? !c->is_post : !is_get) {
        api_error_set(&e, 405, API_ERR_INVALID_REQUEST, NULL, "method_not_allowed",
                      "Method %s is not allowed on %s", method, url);
        return queue_error(c, &e, want_post ? "POST" : "GET");
    }
    if (c->body_too_large) {
        api_error_set(&e, 413, API_ERR_INVALID_REQUEST, NULL, "request_too_large",
                      "The request body exceeds %zu bytes", s->max_body);
        return queue_error(c, &e, NULL);
    }
    if (rt->kind == ROUTE_HEALTH) {
        pthread_rwlock_rdlock(&s->mu);
        bool stopping = s->stopping;
        pthread_rwlock_unlock(&s->mu);
        const char *b = stopping ? "{\"status\":\"stopping\"}" : "{\"status\":\"ok\"}";
        return queue(c, stopping ? 503 : 200, "application/json", b, strlen(b), NULL);
    }
    if (rt->kind == ROUTE_METRICS) {
        cairn_sched_stats_t st;
        sched_stats(s, &st);
        char *txt = metrics_render(s->met, &st);
        if (!txt)
            return queue_oom(c);
        enum MHD_Result rc = queue(c, 200, "text/plain; version=0.0.4; charset=utf-8", txt,
                                   strlen(txt), NULL);
        cairn_free(txt);
        return rc;
    }
    /* Every API route needs a key in keyed mode, read where its adapter says. */
    c->key = find_key(c->api, mhd, &c->key_len);
    if (tenancy_enabled(s->ten)) {
        char *salt = NULL;
        char tag[17];
        int rc = tenancy_resolve(s->ten, c->key, c->key_len, NULL, &salt, tag);
        cairn_free(salt);
        if (rc == CAIRN_ENOMEM)
            api_error_oom(&e);
        else if (rc)
            api_error_set(&e, 401, API_ERR_AUTHENTICATION, NULL, "invalid_api_key",
                          "Incorrect or missing API key (send %s: %s%sKEY)",
                          c->api->auth[0].header,
                          c->api->auth[0].scheme ? c->api->auth[0].scheme : "",
                          c->api->auth[0].scheme ? " " : "");
        if (rc)
            return queue_error(c, &e, NULL);
    }
    if (rt->op == API_OP_LIST_MODELS)
        return serve_models(c, url);

    enum MHD_Result rc = start_request(c);
    if (c->submitted && !c->req.stream) {
        pthread_mutex_lock(&c->mu);
        if (c->final) {
            rc = finish_full(c);
        } else {
            c->suspended = true;
            MHD_suspend_connection(mhd);
        }
        pthread_mutex_unlock(&c->mu);
    }
    return rc;
}

static void completed(void *cls, struct MHD_Connection *mhd, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    cairn_server_t *s = cls;
    conn_t *c = *con_cls;
    if (!c)
        return;
    *con_cls = NULL;
    /* Off the watchdog's list first: it never sees a completed connection. */
    pthread_mutex_lock(&s->live_mu);
    if (c->listed) {
        if (c->live_prev)
            c->live_prev->live_next = c->live_next;
        else
            s->live = c->live_next;
        if (c->live_next)
            c->live_next->live_prev = c->live_prev;
        c->listed = false;
    }
    pthread_mutex_unlock(&s->live_mu);
    pthread_mutex_lock(&c->mu);
    c->mhd = NULL;
    bool live = c->submitted && !c->final;
    bool ok = c->final && c->ok;
    bool canceled = live || c->canceled;
    cairn_req_usage_t usage = c->usage;
    bool have_usage = c->have_usage;
    const char *finish = NULL;
    if (ok) {
        finish = cairn_finish_reason_name(c->finish[0]);
    } else if (c->submitted) {
        finish = canceled ? "canceled" : "error";
    }
    char errmsg[512] = "";
    if (c->submitted && !ok)
        snprintf(errmsg, sizeof errmsg, "%s",
                 live ? "client disconnected"
                 : c->abandoned ? "abandoned: the client went away or stopped reading"
                                : c->gen_err.message);
    pthread_mutex_unlock(&c->mu);

    if (live) {
        pthread_rwlock_rdlock(&s->mu);
        if (!s->stopping)
            cairn_sched_cancel(s->sched, c->sched_id);
        pthread_rwlock_unlock(&s->mu);
    }
    if (c->submitted) {
        metrics_generation(s->met, have_usage ? &usage : NULL, ok, canceled);
        atomic_fetch_sub(&s->live_generations, 1);
    }
    if (c->rt->kind == ROUTE_API && c->rt->op == API_OP_GENERATE) {
        reqlog_entry_t le = {
            .id = c->id[0] ? c->id : NULL,
            .endpoint = c->rt->path,
            .domain = c->domain,
            .http_status = c->http_status,
            .usage = have_usage ? &usage : NULL,
            .finish = finish ? finish : "rejected",
            .error = errmsg[0] ? errmsg : NULL,
        };
        reqlog_write(s->log, &le);
    }
    (void)mhd;
    (void)toe;
    conn_unref(c);
}

/* A new connection: its kernel send buffer is bounded when the operator asked, so a
 * client that stops reading is felt (pending output grows, the watchdog acts) after that
 * many bytes rather than after the kernel's autotuned megabytes. */
static void connection_started(void *cls, struct MHD_Connection *mhd, void **socket_ctx,
                               enum MHD_ConnectionNotificationCode toe)
{
    const cairn_server_t *s = cls;
    (void)socket_ctx;
    if (toe != MHD_CONNECTION_NOTIFY_STARTED || s->sndbuf <= 0)
        return;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mhd, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci)
        (void)setsockopt(ci->connect_fd, SOL_SOCKET, SO_SNDBUF, &s->sndbuf, sizeof s->sndbuf);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    (void)cls;
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    cairn_log(CAIRN_LOG_WARN, "http: %s", msg);
}

/* ---- Robustness: the watchdog -------------------------------------------------------- */

/* Whether the peer of a suspended connection has closed (or reset) its socket. */
static bool peer_gone(struct MHD_Connection *mhd)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mhd, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP, .revents = 0};
    if (poll(&p, 1, 0) != 1)
        return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR))
        return true;
    char b;
    return (p.revents & POLLIN) && recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/*
 * Every 200 ms: a non-streaming request whose client closed its socket (MHD does not
 * watch suspended connections), and a stream whose client stopped reading (more than
 * max_pending bytes waiting, or bytes waiting and no read for stall_ms), are canceled,
 * so neither holds pool blocks to the end of its generation. Cancellation is the
 * scheduler's (its final event then resumes and ends the connection). A stream that has
 * sent nothing for keepalive_ms (waiting in the queue, a long prefill) is resumed with a
 * keepalive due: its reader sends an SSE comment.
 */
static void *watchdog_main(void *arg)
{
    cairn_server_t *s = arg;
    pthread_mutex_lock(&s->live_mu);
    while (!s->watchdog_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&s->watchdog_cv, &s->live_mu, &ts);
        double now = cairn_now_ms();
        for (conn_t *c = s->live; c && !s->watchdog_stop; c = c->live_next) {
            bool cancel = false;
            pthread_mutex_lock(&c->mu);
            if (!c->final && !c->abandoned && c->mhd) {
                if (!c->req.stream) {
                    cancel = c->suspended && peer_gone(c->mhd);
                } else {
                    size_t pending = 0;
                    for (int i = 0; i < c->req.n; i++)
                        pending += c->pend[i].len;
                    cancel = pending > s->max_pending
                             || (pending > 0 && !c->suspended && now - c->last_read_ms > s->stall_ms);
                    if (!cancel && c->suspended && now - c->last_sent_ms > s->keepalive_ms) {
                        c->keepalive_due = true;
                        c->last_sent_ms = now;
                        c->suspended = false;
                        MHD_resume_connection(c->mhd);
                    }
                }
                c->abandoned = cancel;
            }
            uint64_t id = c->sched_id;
            pthread_mutex_unlock(&c->mu);
            if (!cancel)
                continue;
            cairn_log(CAIRN_LOG_INFO, "http: canceling %s: the client %s", c->id,
                      c->req.stream ? "stopped reading" : "disconnected");
            pthread_rwlock_rdlock(&s->mu);
            if (!s->stopping)
                cairn_sched_cancel(s->sched, id);
            pthread_rwlock_unlock(&s->mu);
        }
    }
    pthread_mutex_unlock(&s->live_mu);
    return NULL;
}

static void watchdog_stop(cairn_server_t *s)
{
    if (!s->watchdog_started)
        return;
    pthread_mutex_lock(&s->live_mu);
    s->watchdog_stop = true;
    pthread_cond_signal(&s->watchdog_cv);
    pthread_mutex_unlock(&s->live_mu);
    pthread_join(s->watchdog, NULL);
    s->watchdog_started = false;
}

/* ---- Public API ---------------------------------------------------------------------- */

void cairn_server_options_default(cairn_server_options_t *o)
{
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->http_threads = 4;
    o->max_body_bytes = (size_t)4 << 20;
    o->model_id = "cairn";
    o->apis = NULL;
    o->n_apis = 0;
    o->stall_ms = 30000;
    o->keepalive_ms = 15000;
    o->max_pending_bytes = (size_t)4 << 20;
    o->connection_timeout_s = 120;
    o->max_connections = 512;
    cairn_sched_options_default(&o->sched);
}

/* The route table: the adapters' generation and token-count routes (in adapter order),
 * their model lists, then /health, /metrics and "other". Returns how many routes generate
 * or count (listed in /metrics from the start) or a negative code. */
static int build_routes(cairn_server_t *s)
{
    int n = 3;
    for (size_t i = 0; i < s->n_apis; i++)
        n += (int)s->apis[i]->n_routes;
    s->routes = cairn_calloc((size_t)n, sizeof *s->routes);
    s->route_labels = cairn_calloc((size_t)n, sizeof *s->route_labels);
    if (!s->routes || !s->route_labels)
        return CAIRN_ENOMEM;
    int k = 0, n_gen = 0;
    /* Generation and count routes, then model lists: those that need a header before the
     * one that does not (routing takes the first match). */
    for (int pass = 0; pass < 3; pass++)
        for (size_t i = 0; i < s->n_apis; i++)
            for (size_t j = 0; j < s->apis[i]->n_routes; j++) {
                const api_route_t *ar = &s->apis[i]->routes[j];
                int want = ar->op != API_OP_LIST_MODELS ? 0 : ar->when_header ? 1 : 2;
                if (want != pass)
                    continue;
                s->routes[k] = (route_t){ar->path, ROUTE_API, s->apis[i], ar->op, ar->when_header};
                k++;
                n_gen += pass == 0;
            }
    s->routes[k++] = (route_t){"/health", ROUTE_HEALTH, NULL, API_OP_GENERATE, NULL};
    s->routes[k++] = (route_t){"/metrics", ROUTE_METRICS, NULL, API_OP_GENERATE, NULL};
    s->routes[k++] = (route_t){"other", ROUTE_OTHER, NULL, API_OP_GENERATE, NULL};
    s->n_routes = k;
    for (int i = 0; i < k; i++) {
        const char *h = s->routes[i].when_header;
        if (!h) {
            s->route_labels[i] = s->routes[i].path;
            continue;
        }
        size_t len = strlen(s->routes[i].path) + strlen(h) + 4;
        char *l = cairn_malloc(len);
        if (!l)
            return CAIRN_ENOMEM;
        snprintf(l, len, "%s [%s]", s->routes[i].path, h);
        s->route_labels[i] = l;
    }
    return n_gen;
}

static void server_free(cairn_server_t *s)
{
    cairn_chat_template_destroy(s->tmpl);
    reqlog_close(s->log);
    tenancy_destroy(s->ten);
    metrics_destroy(s->met);
    for (int i = 0; s->route_labels && i < s->n_routes; i++)
        if (s->routes[i].when_header)
            cairn_free((char *)s->route_labels[i]);
    cairn_free(s->routes);
    cairn_free(s->route_labels);
    cairn_free(s->apis);
    cairn_free(s->model_id);
    pthread_rwlock_destroy(&s->mu);
    pthread_mutex_destroy(&s->live_mu);
    pthread_cond_destroy(&s->watchdog_cv);
    cairn_free(s);
}

int cairn_server_create(cairn_engine_t *engine, const cairn_tokenizer_t *tok,
                        const cairn_server_options_t *opt, cairn_server_t **out, char *err,
                        size_t err_len)
{
    *out = NULL;
    cairn_init(); /* cJSON's allocations through cairn_malloc before any request */
    if (!engine || !tok || !opt || opt->port < 0 || opt->port > 65535 || opt->http_threads < 1
        || opt->max_body_bytes < 64 || !opt->model_id || !opt->model_id[0]
        || (opt->apis == NULL) != (opt->n_apis == 0)) {
        snprintf(err, err_len, "invalid server options");
        return CAIRN_EINVAL;
    }
    const api_adapter_t *const *apis = opt->apis ? opt->apis : api_registry;
    size_t n_apis = opt->apis ? opt->n_apis : api_registry_count;
    int rc = api_list_check(apis, n_apis, err, err_len);
    if (rc)
        return rc;
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)opt->port);
    const char *host = opt->host ? opt->host : "127.0.0.1";
    if (!strcmp(host, "localhost"))
        host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        snprintf(err, err_len, "--host must be an IPv4 address, got '%s'", host);
        return CAIRN_EINVAL;
    }
    cairn_server_t *s = cairn_calloc(1, sizeof *s);
    if (!s)
        return CAIRN_ENOMEM;
    pthread_rwlock_init(&s->mu, NULL);
    pthread_mutex_init(&s->live_mu, NULL);
    pthread_cond_init(&s->watchdog_cv, NULL);
    s->stall_ms = opt->stall_ms > 0 ? opt->stall_ms : 30000;
    s->max_pending = opt->max_pending_bytes > 0 ? opt->max_pending_bytes : (size_t)4 << 20;
    s->keepalive_ms = opt->keepalive_ms > 0 ? opt->keepalive_ms : 15000;
    s->sndbuf = opt->socket_send_buffer > 0 && opt->socket_send_buffer <= (1 << 30)
                    ? (int)opt->socket_send_buffer : 0;
    s->engine = engine;
    s->tok = tok;
    s->max_body = opt->max_body_bytes;
    s->started = (long long)time(NULL);
    s->vocab = cairn_engine_config(engine)->vocab;
    s->max_context = cairn_engine_options(engine)->max_context;
    if (s->max_context <= 0)
        s->max_context = cairn_engine_config(engine)->max_pos;
    s->engine_context = s->max_context;
    if (getrandom(&s->id_mix, sizeof s->id_mix, 0) != (ssize_t)sizeof s->id_mix)
        s->id_mix = (uint64_t)s->started * 0x2545F4914F6CDD1Dull;
    rc = CAIRN_ENOMEM;
    if (!(s->model_id = cairn_strdup(opt->model_id)))
        goto fail;
    if (!(s->apis = cairn_calloc(n_apis, sizeof *s->apis)))
        goto fail;
    memcpy(s->apis, apis, n_apis * sizeof *s->apis);
    s->n_apis = n_apis;
    int n_gen = build_routes(s);
    if (n_gen < 0) {
        rc = n_gen;
        goto fail;
    }
    if ((rc = metrics_create(s->route_labels, s->n_routes, n_gen, &s->met)))
        goto fail;
    if ((rc = tenancy_create(opt->api_keys_file, &s->ten, err, err_len)))
        goto fail;
    if (opt->request_log_path && (rc = reqlog_open(opt->request_log_path, &s->log, err, err_len)))
        goto fail;
    const char *src = cairn_tokenizer_chat_template(tok, NULL);
    if (src) {
        char terr[256] = "";
        rc = cairn_chat_template_compile(src, strlen(src), &s->tmpl, terr, sizeof terr);
        if (rc) {
            /* Text prompts still work; chat answers 400 naming the problem. */
            cairn_log(CAIRN_LOG_WARN, "chat template does not compile (%s); chat disabled", terr);
            s->tmpl = NULL;
        }
    }
    /* Output parsing follows the template unless the operator named a format. */
    s->reasons = output_template_reasons(src);
    if (opt->tool_parser && !strcmp(opt->tool_parser, "none")) {
        s->tool_format = NULL;
    } else if (opt->tool_parser) {
        if (!(s->tool_format = tool_format_find(opt->tool_parser))) {
            char names[256] = "";
            for (const tool_format_t *const *f = tool_formats; *f; f++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s, ", (*f)->name);
            snprintf(err, err_len, "unknown tool parser '%s' (%snone)", opt->tool_parser, names);
            rc = CAIRN_EINVAL;
            goto fail;
        }
    } else {
        s->tool_format = tool_format_detect(src);
    }
    if (s->tool_format || s->reasons)
        cairn_log(CAIRN_LOG_INFO, "output parsing: tool calls %s, reasoning %s",
                  s->tool_format ? s->tool_format->name : "off", s->reasons ? "<think>" : "off");
    s->prompt = (prompt_ctx_t){.tok = tok, .tmpl = s->tmpl, .vocab = s->vocab,
                               .args_as_objects = src && !strstr(src, "arguments is string")};
    if ((rc = cairn_sched_create(engine, tok, &opt->sched, &s->sched))) {
        snprintf(err, err_len, "cannot start the scheduler: %s", cairn_strerror(rc));
        goto fail;
    }
    /* max_model_len: what one sequence can hold in the pool (whole blocks). */
    cairn_sched_stats_t st;
    cairn_sched_stats(s->sched, &st);
    uint64_t pool_tokens = st.pool_blocks_total * (uint64_t)cairn_engine_options(engine)->block_tokens;
    if (pool_tokens < (uint64_t)s->max_context)
        s->max_context = (int)pool_tokens;
    s->d = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME
                                | MHD_USE_ERROR_LOG,
                            0, NULL, NULL, handle, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)opt->http_threads,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, connection_started, s,
                            MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned int)(opt->connection_timeout_s > 0 ? opt->connection_timeout_s : 120),
                            MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned int)(opt->max_connections > 0 ? opt->max_connections : 512),
                            MHD_OPTION_END);
    if (!s->d) {
        snprintf(err, err_len, "cannot listen on %s:%d (in use, or not permitted)", host,
                 opt->port);
        rc = CAIRN_EIO;
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : opt->port;
    if (pthread_create(&s->watchdog, NULL, watchdog_main, s) != 0) {
        snprintf(err, err_len, "cannot start the watchdog thread");
        rc = CAIRN_EIO;
        MHD_stop_daemon(s->d);
        s->d = NULL;
        goto fail;
    }
    s->watchdog_started = true;
    *out = s;
    return 0;
fail:
    cairn_sched_destroy(s->sched, 0);
    server_free(s);
    return rc;
}

int cairn_server_port(const cairn_server_t *s) { return s->port; }

int cairn_server_max_model_len(const cairn_server_t *s) { return s->max_context; }

cairn_sched_t *cairn_server_sched(cairn_server_t *s) { return s->sched; }

void cairn_server_destroy(cairn_server_t *s, int deadline_ms)
{
    if (!s)
        return;
    /* New connections are refused from here on: the quiesced listening socket is shut
     * down (Linux stops listening: a connect gets RST), but closed only after
     * MHD_stop_daemon, since MHD's threads may still hold it in their poll sets
     * (libmicrohttpd's documented rule for MHD_quiesce_daemon; TSan saw the early close
     * race with a worker thread once). */
    MHD_socket fd = MHD_quiesce_daemon(s->d);
    if (fd != MHD_INVALID_SOCKET)
        shutdown(fd, SHUT_RDWR);
    pthread_rwlock_wrlock(&s->mu);
    s->stopping = true;
    pthread_rwlock_unlock(&s->mu);
    /* Every request gets its final event here, which resumes its connection. */
    cairn_sched_destroy(s->sched, deadline_ms);
    s->sched = NULL;
    /* Let resumed streams write their last events (bounded: 2 s). */
    for (int i = 0; i < 200 && atomic_load(&s->live_generations) > 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    watchdog_stop(s);
    MHD_stop_daemon(s->d);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
    server_free(s);
}
