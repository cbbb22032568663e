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
 *  - Streams: the content reader calls the adapter's begin once, then steals the pending
 *    text and hands it to the adapter as deltas (deliver_text), and at the final event
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
 *    callback then cancels the request, and the scheduler frees its blocks.
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
#include <pthread.h>
#include <stdatomic.h>
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
#include "server/server_impl.h"

typedef enum {
    ROUTE_API = 0,  /* an adapter's path */
    ROUTE_HEALTH,
    ROUTE_METRICS,
    ROUTE_OTHER,    /* anything else: 404 */
} route_kind_t;

typedef struct {
    const char *path;          /* also the metrics and request-log label */
    route_kind_t kind;
    const api_adapter_t *api;  /* ROUTE_API: the adapter serving it */
    api_op_t op;               /* ROUTE_API: what it does */
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
    int vocab, max_context;
    cairn_chat_template_t *tmpl;
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
};

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

    /* Shared with the engine thread (under mu). */
    bool suspended;
    bool final;                 /* the final event arrived */
    bool ok, canceled, oom;
    int n_done;
    api_error_t gen_err;
    api_buf_t pend[API_MAX_N];  /* stream: not yet sent; non-stream: the whole text */
    cairn_finish_reason_t finish[API_MAX_N];
    cairn_req_usage_t usage;
    bool have_usage;
    char miss_reason[32];

    /* Streaming reader's own state (one MHD thread at a time). */
    size_t out_off;             /* bytes of render.out already handed to MHD */
    bool ended;
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
    api_buf_free(&c->render.out);
    api_buf_free(&c->body);
    for (int i = 0; i < API_MAX_N; i++)
        api_buf_free(&c->pend[i]);
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

static api_usage_t usage_of(const conn_t *c)
{
    api_usage_t u = {0, 0, 0, 0};
    if (c->have_usage) {
        u.prompt_tokens = c->usage.prompt_tokens;
        u.completion_tokens = c->usage.completion_tokens;
        u.cached_tokens = c->usage.cached_tokens;
        u.restored_tokens = c->usage.restored_tokens;
    }
    return u;
}

static int begin_render(conn_t *c)
{
    c->began = true;
    return c->api->begin(&c->render);
}

/*
 * One choice's new text, to the adapter. This is where output parsing goes (issue 13:
 * reasoning split from <think>, tool calls), turning text into typed deltas.
 */
static int deliver_text(conn_t *c, int choice, const char *text, size_t len)
{
    api_delta_t d = {.kind = API_DELTA_TEXT, .choice = choice, .text = text, .len = len};
    return c->api->delta(&c->render, &d);
}

/* Non-streaming: called with c->mu held after the final event (the engine thread is done
 * with the request, so nothing else writes pend/finish/usage now). */
static enum MHD_Result finish_full(conn_t *c)
{
    if (!c->ok)
        return queue_error(c, &c->gen_err, NULL);
    int rc = begin_render(c);
    for (int i = 0; !rc && i < c->req.n; i++)
        if (c->pend[i].len)
            rc = deliver_text(c, i, c->pend[i].p, c->pend[i].len);
    api_end_t end = {.finish = c->finish, .usage = usage_of(c)};
    if (!rc)
        rc = c->api->end(&c->render, &end);
    if (rc)
        return queue_oom(c);
    return queue_body(c, &c->render.out);
}

/*
 * Stream content reader. Runs the adapter's begin on its first call, then steals pending
 * text under the lock, renders outside it, and suspends the connection when there is
 * nothing to send and the request is still live.
 */
static ssize_t stream_reader(void *cls, uint64_t pos, char *dst, size_t max)
{
    conn_t *c = cls;
    api_buf_t *out = &c->render.out;
    (void)pos;
    for (;;) {
        if (c->out_off < out->len) {
            size_t n = out->len - c->out_off;
            if (n > max)
                n = max;
            memcpy(dst, out->p + c->out_off, n);
            c->out_off += n;
            return (ssize_t)n;
        }
        out->len = c->out_off = 0;
        if (c->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (!c->began) {
            if (begin_render(c) != 0)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }

        api_buf_t taken[API_MAX_N];
        pthread_mutex_lock(&c->mu);
        bool final = c->final, ok = c->ok;
        int n = c->req.n;
        bool any = false;
        for (int i = 0; i < n; i++) {
            taken[i] = c->pend[i];
            memset(&c->pend[i], 0, sizeof c->pend[i]);
            any |= taken[i].len > 0;
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
        api_end_t end = {.finish = finish, .usage = usage_of(c)};
        pthread_mutex_unlock(&c->mu);

        int rc = 0;
        for (int i = 0; i < n; i++) {
            if (!rc && taken[i].len > 0)
                rc = deliver_text(c, i, taken[i].p, taken[i].len);
            api_buf_free(&taken[i]);
        }
        if (!rc && final) {
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
    snprintf(c->id, sizeof c->id, "%s-%016llx%08llx", c->api->id_prefix, (unsigned long long)x,
             (unsigned long long)k & 0xffffffffull);
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
               || (max_tokens > 0 && (int64_t)n_ids + max_tokens > s->max_context)) {
        api_error_set(e, 400, API_ERR_INVALID_REQUEST,
                      max_tokens > 0 && n_ids < s->max_context ? r->max_tokens_param
                                                               : r->prompt_param,
                      "context_length_exceeded",
                      "This model's maximum context length is %d tokens; the request has %d "
                      "prompt tokens and asks for %d more",
                      s->max_context, n_ids, max_tokens > 0 ? max_tokens : 1);
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
    if (prompt_build(&s->prompt, r, &ids, &n_ids, &e) != 0) {
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
    p.n = r->n;
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

static int route_of(const cairn_server_t *s, const char *url)
{
    for (int i = 0; i < s->n_routes - 1; i++) {
        const route_t *r = &s->routes[i];
        size_t n = strlen(r->path);
        if (!strncmp(url, r->path, n)
            && (url[n] == '\0'
                || (url[n] == '/' && r->kind == ROUTE_API && r->op == API_OP_LIST_MODELS)))
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
        c->route = route_of(s, url);
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
                 live ? "client disconnected" : c->gen_err.message);
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
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < s->n_apis; i++)
            for (size_t j = 0; j < s->apis[i]->n_routes; j++) {
                const api_route_t *ar = &s->apis[i]->routes[j];
                if ((ar->op == API_OP_LIST_MODELS) != (pass == 1))
                    continue;
                s->routes[k] = (route_t){ar->path, ROUTE_API, s->apis[i], ar->op};
                k++;
                n_gen += pass == 0;
            }
    s->routes[k++] = (route_t){"/health", ROUTE_HEALTH, NULL, API_OP_GENERATE};
    s->routes[k++] = (route_t){"/metrics", ROUTE_METRICS, NULL, API_OP_GENERATE};
    s->routes[k++] = (route_t){"other", ROUTE_OTHER, NULL, API_OP_GENERATE};
    s->n_routes = k;
    for (int i = 0; i < k; i++)
        s->route_labels[i] = s->routes[i].path;
    return n_gen;
}

static void server_free(cairn_server_t *s)
{
    cairn_chat_template_destroy(s->tmpl);
    reqlog_close(s->log);
    tenancy_destroy(s->ten);
    metrics_destroy(s->met);
    cairn_free(s->routes);
    cairn_free(s->route_labels);
    cairn_free(s->apis);
    cairn_free(s->model_id);
    pthread_rwlock_destroy(&s->mu);
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
    s->engine = engine;
    s->tok = tok;
    s->max_body = opt->max_body_bytes;
    s->started = (long long)time(NULL);
    s->vocab = cairn_engine_config(engine)->vocab;
    s->max_context = cairn_engine_options(engine)->max_context;
    if (s->max_context <= 0)
        s->max_context = cairn_engine_config(engine)->max_pos;
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
    s->prompt = (prompt_ctx_t){.tok = tok, .tmpl = s->tmpl, .vocab = s->vocab};
    if ((rc = cairn_sched_create(engine, tok, &opt->sched, &s->sched))) {
        snprintf(err, err_len, "cannot start the scheduler: %s", cairn_strerror(rc));
        goto fail;
    }
    s->d = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME
                                | MHD_USE_ERROR_LOG,
                            0, NULL, NULL, handle, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)opt->http_threads,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, s,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)120,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned int)512,
                            MHD_OPTION_END);
    if (!s->d) {
        snprintf(err, err_len, "cannot listen on %s:%d (in use, or not permitted)", host,
                 opt->port);
        rc = CAIRN_EIO;
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : opt->port;
    *out = s;
    return 0;
fail:
    cairn_sched_destroy(s->sched, 0);
    server_free(s);
    return rc;
}

int cairn_server_port(const cairn_server_t *s) { return s->port; }

cairn_sched_t *cairn_server_sched(cairn_server_t *s) { return s->sched; }

void cairn_server_destroy(cairn_server_t *s, int deadline_ms)
{
    if (!s)
        return;
    MHD_socket fd = MHD_quiesce_daemon(s->d);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
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
    MHD_stop_daemon(s->d);
    server_free(s);
}
