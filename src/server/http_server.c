/*
 * http_server.c — the OpenAI-compatible HTTP front end (include/cairn/server.h).
 *
 * Model. One MHD daemon with an internal polling thread pool serves every connection.
 * A request's life, on HTTP threads: the access handler routes it, accumulates the body
 * (413 over the limit), and once the body is complete parses it (openai_request.c),
 * resolves the tenant's cache domain (tenancy.c), renders the chat template, tokenizes,
 * checks the context, and submits to the scheduler.
 *
 * Engine thread -> HTTP thread. The scheduler reports on its engine thread through
 * on_event, which only appends the delta's bytes to the per-choice pending buffer (or
 * records the finish), under the request's mutex, and resumes the connection if it is
 * suspended. Nothing on the engine thread renders JSON or touches a socket.
 *  - Streams (SSE): the content reader steals the pending text, renders chunk events and
 *    hands them to MHD; when nothing is pending it suspends the connection from inside
 *    the reader and returns 0, so an idle stream costs no CPU.
 *  - Non-streaming: the access handler suspends the connection after submitting and is
 *    called again after the final event's resume; it then queues the whole body.
 *
 * Invariants.
 *  - c->suspended is set and MHD_suspend_connection called under c->mu, and on_event
 *    resumes only under c->mu and only when c->suspended, so every suspend has exactly
 *    one resume and no resume targets a running connection.
 *  - A request context is shared by the connection, the streaming response and the
 *    scheduler (until its final event); a reference count under c->mu frees it when the
 *    last lets go. After MHD reports completion, c->mhd is NULL and nothing touches it.
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
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cairn/chat_template.h"
#include "cairn/server.h"
#include "server/server_impl.h"

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
    tenancy_t *ten;
    metrics_t *met;
    reqlog_t *log;
    atomic_uint_fast64_t next_id;
    uint64_t id_mix;
    atomic_int live_generations; /* submitted requests whose connection is not complete */
};

typedef struct {
    char *p;
    size_t len, cap;
} buf_t;

static bool buf_append(buf_t *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n + 1)
            nc *= 2;
        char *np = cairn_realloc(b->p, nc);
        if (!np)
            return false;
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

/* Appends and frees a rendered string (NULL: out of memory). */
static bool buf_take(buf_t *b, char *s)
{
    if (!s)
        return false;
    bool ok = buf_append(b, s, strlen(s));
    cairn_free(s);
    return ok;
}

typedef struct conn {
    cairn_server_t *srv;
    struct MHD_Connection *mhd; /* NULL once MHD reported completion */
    route_t route;
    bool is_post;
    buf_t body;
    bool body_too_large;
    int http_status;            /* of the queued response */
    char domain[17];

    pthread_mutex_t mu;
    int refs;
    bool submitted;
    uint64_t sched_id;
    oai_request_t req;
    bool have_req;
    char id[48];
    oai_meta_t meta;

    /* Shared with the engine thread (under mu). */
    bool suspended;
    bool final;                 /* the final event arrived */
    bool ok, canceled, oom;
    int n_done;
    oai_error_t gen_err;
    buf_t pend[OAI_MAX_N];      /* stream: not yet sent; non-stream: the whole text */
    cairn_finish_reason_t finish[OAI_MAX_N];
    cairn_req_usage_t usage;
    bool have_usage;
    char miss_reason[32];

    /* Streaming reader's own state (one MHD thread at a time). */
    buf_t out;
    size_t out_off;
    bool role_sent[OAI_MAX_N];
    bool ended;
} conn_t;

static void conn_unref(conn_t *c)
{
    pthread_mutex_lock(&c->mu);
    int left = --c->refs;
    pthread_mutex_unlock(&c->mu);
    if (left > 0)
        return;
    pthread_mutex_destroy(&c->mu);
    cairn_free(c->body.p);
    cairn_free(c->out.p);
    for (int i = 0; i < OAI_MAX_N; i++)
        cairn_free(c->pend[i].p);
    if (c->have_req)
        oai_request_fini(&c->req);
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
        if (ev->text_len && !buf_append(&c->pend[idx], ev->text, ev->text_len))
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
            oai_error_set(&c->gen_err, 503, "server_error", NULL, "canceled",
                          "The request was canceled (%s)",
                          ev->message ? ev->message : "server shutting down");
        else
            oai_error_set(&c->gen_err, 500, "server_error", NULL, NULL, "Generation failed: %s",
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
        oai_error_set(&c->gen_err, 500, "server_error", NULL, NULL, "out of memory");
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
    if (status == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result rc = MHD_queue_response(c->mhd, (unsigned)status, r);
    MHD_destroy_response(r);
    c->http_status = status;
    metrics_http(c->srv->met, c->route, status);
    return rc;
}

static enum MHD_Result queue_json(conn_t *c, int status, char *json /* owned */)
{
    if (!json)
        return queue(c, 500, "application/json", "{\"error\":{\"message\":\"out of memory\"}}",
                     38, NULL);
    enum MHD_Result rc = queue(c, status, "application/json", json, strlen(json), NULL);
    cairn_free(json);
    return rc;
}

static enum MHD_Result queue_error(conn_t *c, const oai_error_t *e, const char *allow)
{
    char *j = oai_error_json(e);
    if (!j)
        return queue_json(c, 500, NULL);
    enum MHD_Result rc = queue(c, e->http_status, "application/json", j, strlen(j), allow);
    cairn_free(j);
    return rc;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *out, size_t max);
static void stream_free(void *cls) { conn_unref(cls); }

/* ---- Simple routes --------------------------------------------------------------------- */

static enum MHD_Result serve_models(conn_t *c, const char *url)
{
    cairn_server_t *s = c->srv;
    const char *want = url[strlen("/v1/models")] == '/' ? url + strlen("/v1/models/") : NULL;
    if (want && strcmp(want, s->model_id) != 0) {
        oai_error_t e;
        oai_error_set(&e, 404, "invalid_request_error", "model", "model_not_found",
                      "The model '%s' does not exist", want);
        return queue_error(c, &e, NULL);
    }
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->started);
    cJSON_AddStringToObject(m, "owned_by", "cairn");
    cJSON_AddNumberToObject(m, "max_model_len", s->max_context);
    cJSON *root = m;
    if (!want) {
        root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "object", "list");
        cJSON *arr = cJSON_AddArrayToObject(root, "data");
        cJSON_AddItemToArray(arr, m);
    }
    char *txt = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    char *owned = txt ? cairn_strdup(txt) : NULL;
    cJSON_free(txt);
    return queue_json(c, 200, owned);
}

static void sched_stats(cairn_server_t *s, cairn_sched_stats_t *st)
{
    memset(st, 0, sizeof *st);
    pthread_rwlock_rdlock(&s->mu);
    if (!s->stopping)
        cairn_sched_stats(s->sched, st);
    pthread_rwlock_unlock(&s->mu);
}

/* ---- Generation ------------------------------------------------------------------------ */

/* Prompt tokens for a parsed request. Returns 0 or fills *e. */
static int build_prompt(conn_t *c, int32_t **ids, int *n_ids, oai_error_t *e)
{
    cairn_server_t *s = c->srv;
    oai_request_t *r = &c->req;
    *ids = NULL;
    *n_ids = 0;
    if (r->kind == OAI_COMPLETION && r->prompt_ids) {
        for (int i = 0; i < r->n_prompt_ids; i++)
            if (r->prompt_ids[i] >= s->vocab) {
                oai_error_set(e, 400, "invalid_request_error", "prompt", NULL,
                              "prompt[%d] = %d is outside the vocabulary [0, %d)", i,
                              r->prompt_ids[i], s->vocab);
                return CAIRN_EINVAL;
            }
        *ids = cairn_malloc((size_t)r->n_prompt_ids * sizeof **ids);
        if (!*ids)
            goto oom;
        memcpy(*ids, r->prompt_ids, (size_t)r->n_prompt_ids * sizeof **ids);
        *n_ids = r->n_prompt_ids;
        return 0;
    }
    char *text = NULL;
    size_t len = 0;
    bool add_special = true;
    if (r->kind == OAI_CHAT) {
        if (!s->tmpl) {
            oai_error_set(e, 400, "invalid_request_error", "messages", NULL,
                          "This model has no chat template; use /v1/completions");
            return CAIRN_EINVAL;
        }
        cJSON *ctx = r->template_kwargs ? cJSON_Duplicate(r->template_kwargs, true)
                                        : cJSON_CreateObject();
        if (!ctx)
            goto oom;
        cJSON_DeleteItemFromObjectCaseSensitive(ctx, "messages");
        cJSON_DeleteItemFromObjectCaseSensitive(ctx, "tools");
        cJSON_DeleteItemFromObjectCaseSensitive(ctx, "add_generation_prompt");
        cJSON_AddItemReferenceToObject(ctx, "messages", r->messages);
        if (r->tools)
            cJSON_AddItemReferenceToObject(ctx, "tools", r->tools);
        cJSON_AddBoolToObject(ctx, "add_generation_prompt", true);
        const char *bos = cairn_tokenizer_bos_token(s->tok), *eos = cairn_tokenizer_eos_token(s->tok);
        if (bos && !cJSON_GetObjectItemCaseSensitive(ctx, "bos_token"))
            cJSON_AddStringToObject(ctx, "bos_token", bos);
        if (eos && !cJSON_GetObjectItemCaseSensitive(ctx, "eos_token"))
            cJSON_AddStringToObject(ctx, "eos_token", eos);
        char terr[256] = "";
        int rc = cairn_chat_template_render(s->tmpl, ctx, &text, &len, terr, sizeof terr);
        cJSON_Delete(ctx);
        if (rc == CAIRN_ENOMEM)
            goto oom;
        if (rc) {
            oai_error_set(e, 400, "invalid_request_error", "messages", NULL,
                          "The chat template failed: %s", terr[0] ? terr : cairn_strerror(rc));
            return rc;
        }
        add_special = false; /* transformers' apply_chat_template(tokenize=True) */
    } else {
        text = r->prompt_text;
        len = r->prompt_len;
    }
    size_t n = 0;
    int rc = cairn_tokenizer_encode(s->tok, text, len, add_special, ids, &n);
    if (text != r->prompt_text)
        cairn_free(text);
    if (rc == CAIRN_ENOMEM)
        goto oom;
    if (rc) {
        oai_error_set(e, 400, "invalid_request_error", r->kind == OAI_CHAT ? "messages" : "prompt",
                      NULL, "The prompt could not be tokenized: %s", cairn_strerror(rc));
        return rc;
    }
    *n_ids = (int)n;
    return 0;
oom:
    oai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return CAIRN_ENOMEM;
}

static void make_id(conn_t *c)
{
    cairn_server_t *s = c->srv;
    uint64_t k = atomic_fetch_add(&s->next_id, 1) + 1;
    uint64_t x = (k ^ s->id_mix) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 31;
    snprintf(c->id, sizeof c->id, "%s-%016llx%08llx",
             c->req.kind == OAI_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)x,
             (unsigned long long)k & 0xffffffffull);
}

static enum MHD_Result start_generation(conn_t *c)
{
    cairn_server_t *s = c->srv;
    oai_error_t e;
    memset(&e, 0, sizeof e);
    oai_kind_t kind = c->route == ROUTE_CHAT ? OAI_CHAT : OAI_COMPLETION;
    if (oai_request_parse(kind, c->body.p ? c->body.p : "", c->body.len, &c->req, &e) != 0)
        return queue_error(c, &e, NULL);
    c->have_req = true;
    oai_request_t *r = &c->req;
    if (r->model && strcmp(r->model, s->model_id) != 0) {
        oai_error_set(&e, 404, "invalid_request_error", "model", "model_not_found",
                      "The model '%s' does not exist; this server serves '%s'", r->model,
                      s->model_id);
        return queue_error(c, &e, NULL);
    }
    char *salt = NULL;
    const char *auth = MHD_lookup_connection_value(c->mhd, MHD_HEADER_KIND,
                                                   MHD_HTTP_HEADER_AUTHORIZATION);
    int rc = tenancy_resolve(s->ten, auth, r->cache_salt, &salt, c->domain);
    if (rc) {
        if (rc == CAIRN_ENOMEM)
            oai_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
        else
            oai_error_set(&e, 401, "authentication_error", NULL, "invalid_api_key",
                          "Incorrect or missing API key");
        return queue_error(c, &e, NULL);
    }
    int32_t *ids = NULL;
    int n_ids = 0;
    if (build_prompt(c, &ids, &n_ids, &e) != 0) {
        cairn_free(salt);
        return queue_error(c, &e, NULL);
    }
    char verr[256] = "";
    if (n_ids == 0) {
        oai_error_set(&e, 400, "invalid_request_error", kind == OAI_CHAT ? "messages" : "prompt",
                      NULL, "The prompt is empty");
    } else if (n_ids >= s->max_context
               || (r->sampling.max_tokens > 0
                   && (int64_t)n_ids + r->sampling.max_tokens > s->max_context)) {
        oai_error_set(&e, 400, "invalid_request_error",
                      r->sampling.max_tokens > 0 && n_ids < s->max_context ? "max_tokens"
                                                                            : "messages",
                      "context_length_exceeded",
                      "This model's maximum context length is %d tokens; the request has %d "
                      "prompt tokens and asks for %d more",
                      s->max_context, n_ids, r->sampling.max_tokens > 0 ? r->sampling.max_tokens : 1);
    } else if (cairn_sampling_params_validate(&r->sampling, s->vocab, verr, sizeof verr) != 0) {
        oai_error_set(&e, 400, "invalid_request_error", NULL, NULL, "%s", verr);
    }
    if (e.http_status) {
        cairn_free(ids);
        cairn_free(salt);
        return queue_error(c, &e, NULL);
    }

    make_id(c);
    c->meta.kind = kind;
    c->meta.id = c->id;
    c->meta.created = (long long)time(NULL);
    c->meta.model = s->model_id;

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
    c->refs++; /* the scheduler's; taken before submit: events may arrive at once */
    pthread_rwlock_rdlock(&s->mu);
    rc = s->stopping ? CAIRN_ESTATE
                     : cairn_sched_submit(s->sched, &p, &c->sched_id, serr, sizeof serr);
    pthread_rwlock_unlock(&s->mu);
    cairn_free(ids);
    cairn_free(salt);
    if (rc) {
        c->refs--;
        switch (rc) {
        case CAIRN_EBUSY:
            oai_error_set(&e, 429, "rate_limit_error", NULL, "queue_full",
                          "The server is busy: the request queue is full; retry later");
            break;
        case CAIRN_ERANGE:
            oai_error_set(&e, 400, "invalid_request_error", "messages", "context_length_exceeded",
                          "The request does not fit the context or the KV pool: %s",
                          serr[0] ? serr : "too long");
            break;
        case CAIRN_EINVAL:
        case CAIRN_EUNSUPPORTED:
            oai_error_set(&e, 400, "invalid_request_error", r->n > 1 ? "n" : NULL, NULL, "%s",
                          serr[0] ? serr : "invalid request");
            break;
        case CAIRN_ESTATE:
            oai_error_set(&e, 503, "server_error", NULL, "shutting_down",
                          "The server is shutting down");
            break;
        default:
            oai_error_set(&e, 500, "server_error", NULL, NULL, "submit failed: %s",
                          cairn_strerror(rc));
        }
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
    pthread_mutex_lock(&c->mu);
    c->refs++; /* the response's */
    pthread_mutex_unlock(&c->mu);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result qr = MHD_queue_response(c->mhd, 200, resp);
    MHD_destroy_response(resp);
    c->http_status = 200;
    metrics_http(s->met, c->route, 200);
    return qr;
}

static oai_usage_t usage_of(const conn_t *c)
{
    oai_usage_t u = {0, 0, 0, 0};
    if (c->have_usage) {
        u.prompt_tokens = c->usage.prompt_tokens;
        u.completion_tokens = c->usage.completion_tokens;
        u.cached_tokens = c->usage.cached_tokens;
        u.cold_restored_tokens = c->usage.restored_tokens;
    }
    return u;
}

/* Non-streaming: called with c->mu held after the final event. */
static enum MHD_Result finish_full(conn_t *c)
{
    if (!c->ok)
        return queue_error(c, &c->gen_err, NULL);
    char *texts[OAI_MAX_N];
    size_t lens[OAI_MAX_N];
    for (int i = 0; i < c->req.n; i++) {
        texts[i] = c->pend[i].p;
        lens[i] = c->pend[i].len;
    }
    oai_usage_t u = usage_of(c);
    return queue_json(c, 200, oai_render_full(&c->meta, c->req.n, texts, lens, c->finish, &u));
}

/*
 * SSE content reader. Steals pending text under the lock, renders outside it, and
 * suspends the connection when there is nothing to send and the request is still live.
 */
static ssize_t stream_reader(void *cls, uint64_t pos, char *dst, size_t max)
{
    conn_t *c = cls;
    (void)pos;
    for (;;) {
        if (c->out_off < c->out.len) {
            size_t n = c->out.len - c->out_off;
            if (n > max)
                n = max;
            memcpy(dst, c->out.p + c->out_off, n);
            c->out_off += n;
            return (ssize_t)n;
        }
        c->out.len = c->out_off = 0;
        if (c->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;

        buf_t taken[OAI_MAX_N];
        pthread_mutex_lock(&c->mu);
        bool final = c->final, ok = c->ok;
        int n = c->req.n;
        bool any = false;
        for (int i = 0; i < n; i++) {
            taken[i] = c->pend[i];
            memset(&c->pend[i], 0, sizeof c->pend[i]);
            any |= taken[i].len > 0 || (c->meta.kind == OAI_CHAT && !c->role_sent[i]);
        }
        if (!any && !final) {
            c->suspended = true;
            MHD_suspend_connection(c->mhd);
            pthread_mutex_unlock(&c->mu);
            for (int i = 0; i < n; i++)
                cairn_free(taken[i].p);
            return 0;
        }
        oai_error_t gen_err = c->gen_err;
        cairn_finish_reason_t finish[OAI_MAX_N];
        memcpy(finish, c->finish, sizeof finish);
        oai_usage_t u = usage_of(c);
        pthread_mutex_unlock(&c->mu);

        bool ok_render = true;
        bool usage_null = c->req.include_usage;
        for (int i = 0; i < n; i++) {
            bool role = c->meta.kind == OAI_CHAT && !c->role_sent[i];
            if (taken[i].len > 0 || role) {
                ok_render &= buf_take(&c->out, oai_render_chunk(&c->meta, i, taken[i].p,
                                                                taken[i].len, role,
                                                                CAIRN_FINISH_NONE, usage_null));
                c->role_sent[i] = true;
            }
            cairn_free(taken[i].p);
        }
        if (final) {
            if (ok) {
                for (int i = 0; i < n; i++)
                    ok_render &= buf_take(&c->out, oai_render_chunk(&c->meta, i, "", 0, false,
                                                                    finish[i], usage_null));
                if (c->req.include_usage)
                    ok_render &= buf_take(&c->out, oai_render_usage_chunk(&c->meta, &u));
            } else {
                ok_render &= buf_take(&c->out, oai_render_error_event(&gen_err));
            }
            ok_render &= buf_append(&c->out, "data: [DONE]\n\n", 14);
            c->ended = true;
        }
        if (!ok_render)
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

/* ---- MHD callbacks ----------------------------------------------------------------------- */

static route_t route_of(const char *url)
{
    if (!strcmp(url, "/v1/chat/completions"))
        return ROUTE_CHAT;
    if (!strcmp(url, "/v1/completions"))
        return ROUTE_COMPLETIONS;
    if (!strcmp(url, "/v1/models") || !strncmp(url, "/v1/models/", 11))
        return ROUTE_MODELS;
    if (!strcmp(url, "/health"))
        return ROUTE_HEALTH;
    if (!strcmp(url, "/metrics"))
        return ROUTE_METRICS;
    return ROUTE_OTHER;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *mhd, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    cairn_server_t *s = cls;
    conn_t *c = *con_cls;
    if (!c) {
        c = cairn_calloc(1, sizeof *c);
        if (!c)
            return MHD_NO;
        pthread_mutex_init(&c->mu, NULL);
        c->refs = 1; /* the connection's */
        c->srv = s;
        c->mhd = mhd;
        c->route = route_of(url);
        c->is_post = !strcmp(method, MHD_HTTP_METHOD_POST);
        snprintf(c->domain, sizeof c->domain, "default");
        *con_cls = c;
        /* A declared body far over the limit is refused before reading it. */
        const char *cl = MHD_lookup_connection_value(mhd, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->max_body)
            c->body_too_large = true;
        if (c->body_too_large && strtoull(cl, NULL, 10) > 16 * (unsigned long long)s->max_body) {
            oai_error_t e;
            oai_error_set(&e, 413, "invalid_request_error", NULL, "request_too_large",
                          "The request body exceeds %zu bytes", s->max_body);
            return queue_error(c, &e, NULL);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!c->body_too_large && c->body.len + *upload_size > s->max_body)
            c->body_too_large = true;
        if (!c->body_too_large && !buf_append(&c->body, upload, *upload_size))
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

    oai_error_t e;
    memset(&e, 0, sizeof e);
    bool want_post = c->route == ROUTE_CHAT || c->route == ROUTE_COMPLETIONS;
    bool is_get = !strcmp(method, MHD_HTTP_METHOD_GET);
    if (c->route == ROUTE_OTHER) {
        oai_error_set(&e, 404, "invalid_request_error", NULL, "not_found",
                      "Unknown route: %s %s", method, url);
        return queue_error(c, &e, NULL);
    }
    if (want_post ? !c->is_post : !is_get) {
        oai_error_set(&e, 405, "invalid_request_error", NULL, "method_not_allowed",
                      "Method %s is not allowed on %s", method, url);
        return queue_error(c, &e, want_post ? "POST" : "GET");
    }
    if (c->body_too_large) {
        oai_error_set(&e, 413, "invalid_request_error", NULL, "request_too_large",
                      "The request body exceeds %zu bytes", s->max_body);
        return queue_error(c, &e, NULL);
    }
    if (c->route == ROUTE_HEALTH) {
        pthread_rwlock_rdlock(&s->mu);
        bool stopping = s->stopping;
        pthread_rwlock_unlock(&s->mu);
        const char *b = stopping ? "{\"status\":\"stopping\"}" : "{\"status\":\"ok\"}";
        return queue(c, stopping ? 503 : 200, "application/json", b, strlen(b), NULL);
    }
    if (c->route == ROUTE_METRICS) {
        cairn_sched_stats_t st;
        sched_stats(s, &st);
        char *txt = metrics_render(s->met, &st);
        if (!txt)
            return queue_json(c, 500, NULL);
        enum MHD_Result rc = queue(c, 200, "text/plain; version=0.0.4; charset=utf-8", txt,
                                   strlen(txt), NULL);
        cairn_free(txt);
        return rc;
    }
    /* /v1 routes need a key in keyed mode. */
    if (tenancy_enabled(s->ten)) {
        char *salt = NULL;
        char tag[17];
        const char *auth = MHD_lookup_connection_value(mhd, MHD_HEADER_KIND,
                                                       MHD_HTTP_HEADER_AUTHORIZATION);
        int rc = tenancy_resolve(s->ten, auth, NULL, &salt, tag);
        cairn_free(salt);
        if (rc) {
            oai_error_set(&e, 401, "authentication_error", NULL, "invalid_api_key",
                          "Incorrect or missing API key (send Authorization: Bearer KEY)");
            return queue_error(c, &e, NULL);
        }
    }
    if (c->route == ROUTE_MODELS)
        return serve_models(c, url);

    enum MHD_Result rc = start_generation(c);
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
    if (c->route == ROUTE_CHAT || c->route == ROUTE_COMPLETIONS) {
        reqlog_entry_t le = {
            .id = c->id[0] ? c->id : NULL,
            .endpoint = c->route == ROUTE_CHAT ? "/v1/chat/completions" : "/v1/completions",
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
    cairn_sched_options_default(&o->sched);
}

int cairn_server_create(cairn_engine_t *engine, const cairn_tokenizer_t *tok,
                        const cairn_server_options_t *opt, cairn_server_t **out, char *err,
                        size_t err_len)
{
    *out = NULL;
    if (!engine || !tok || !opt || opt->port < 0 || opt->port > 65535 || opt->http_threads < 1
        || opt->max_body_bytes < 64 || !opt->model_id || !opt->model_id[0]) {
        snprintf(err, err_len, "invalid server options");
        return CAIRN_EINVAL;
    }
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
    int rc = CAIRN_ENOMEM;
    if (!(s->model_id = cairn_strdup(opt->model_id)))
        goto fail;
    if ((rc = metrics_create(&s->met)))
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
            /* Completions still work; chat answers 400 naming the problem. */
            cairn_log(CAIRN_LOG_WARN, "chat template does not compile (%s); chat disabled", terr);
            s->tmpl = NULL;
        }
    }
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
    cairn_chat_template_destroy(s->tmpl);
    reqlog_close(s->log);
    tenancy_destroy(s->ten);
    metrics_destroy(s->met);
    cairn_free(s->model_id);
    pthread_rwlock_destroy(&s->mu);
    cairn_free(s);
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
    cairn_chat_template_destroy(s->tmpl);
    reqlog_close(s->log);
    tenancy_destroy(s->ten);
    metrics_destroy(s->met);
    cairn_free(s->model_id);
    pthread_rwlock_destroy(&s->mu);
    cairn_free(s);
}
