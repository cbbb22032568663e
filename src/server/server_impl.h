/*
 * server/server_impl.h — private interfaces between the server's modules.
 *
 *   openai_request.c   request JSON -> validated oai_request_t (pure, fuzzed)
 *   openai_response.c  completions, chunks and errors -> JSON / SSE text
 *   tenancy.c          API keys -> cache domains
 *   metrics.c          Prometheus counters and histograms
 *   request_log.c      one JSON line per finished request
 *   http_server.c      the MHD daemon, routing, streaming (include/cairn/server.h)
 */
#ifndef CAIRN_SERVER_IMPL_H
#define CAIRN_SERVER_IMPL_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "cairn/common.h"
#include "cairn/sampler.h"
#include "cairn/scheduler.h"

/* ---- Errors in OpenAI's shape ------------------------------------------------------ */

typedef struct {
    int http_status;      /* 400, 401, 404, 405, 413, 429, 500, 503 */
    const char *type;     /* "invalid_request_error", "authentication_error", ... (static) */
    const char *code;     /* static or NULL: "context_length_exceeded", ... */
    char param[64];       /* offending field, "" when none */
    char message[512];
} oai_error_t;

/* Fills *e (message printf-style; param and code may be NULL). */
void oai_error_set(oai_error_t *e, int http_status, const char *type, const char *param,
                   const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* {"error": {"message", "type", "param", "code"}} as a cairn_malloc'd string, or NULL. */
char *oai_error_json(const oai_error_t *e);

/* True if s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code points > 0x10FFFF). */
bool oai_utf8_valid(const char *s, size_t n);

/* ---- Requests ---------------------------------------------------------------------- */

typedef enum { OAI_CHAT = 0, OAI_COMPLETION = 1 } oai_kind_t;

#define OAI_MAX_STOP 16
#define OAI_MAX_N 16
#define OAI_MAX_SALT 256

/*
 * A validated request. Everything is owned by the struct (freed by oai_request_fini);
 * sampling.stop, stop_token_ids and logit_bias point into it.
 */
typedef struct {
    oai_kind_t kind;
    char *model;              /* may be NULL */
    bool stream;
    bool include_usage;       /* stream_options.include_usage */
    cJSON *messages;          /* chat: array of message objects, content normalized to strings */
    cJSON *tools;             /* chat: the tools array or NULL */
    cJSON *template_kwargs;   /* chat: chat_template_kwargs object or NULL */
    char *prompt_text;        /* completion: prompt string, or NULL when given as ids */
    size_t prompt_len;
    int32_t *prompt_ids;      /* completion: prompt as token ids (not yet range-checked) */
    int n_prompt_ids;
    cairn_sampling_params_t sampling;
    char *stop_store[OAI_MAX_STOP];
    int32_t *stop_ids;
    cairn_logit_bias_t *bias;
    int n;                    /* choices, 1..OAI_MAX_N */
    char *cache_salt;         /* NULL when absent; <= OAI_MAX_SALT bytes */
    char *user;
} oai_request_t;

/*
 * Parses and validates a request body of `len` bytes for `kind`: UTF-8, JSON syntax,
 * field types and ranges that need no model, unknown fields. Returns 0 and fills *out, or
 * a negative code with the client-facing error in *err (nothing to free). Pure and
 * thread-safe; never trusts `body` (the fuzz target's entry point).
 */
int oai_request_parse(oai_kind_t kind, const char *body, size_t len, oai_request_t *out,
                      oai_error_t *err);
void oai_request_fini(oai_request_t *r);

/* ---- Responses --------------------------------------------------------------------- */

typedef struct {
    oai_kind_t kind;
    const char *id;           /* "chatcmpl-..." / "cmpl-..." */
    long long created;        /* unix seconds */
    const char *model;
} oai_meta_t;

typedef struct {
    int prompt_tokens, completion_tokens, cached_tokens;
    int cold_restored_tokens; /* prompt tokens restored from the cold tier (docs/API.md) */
} oai_usage_t;

/* Non-streaming body: n choices with texts[i][0..lens[i]) and finish reasons. */
char *oai_render_full(const oai_meta_t *m, int n, char *const *texts, const size_t *lens,
                      const cairn_finish_reason_t *finish, const oai_usage_t *u);

/*
 * One SSE event "data: {...}\n\n" for choice `index`: text (may be empty), the role
 * on the chat stream's first chunk, and finish (NONE: null). with_usage_null adds
 * "usage": null (stream_options.include_usage). Returns a cairn_malloc'd string.
 */
char *oai_render_chunk(const oai_meta_t *m, int index, const char *text, size_t len,
                       bool with_role, cairn_finish_reason_t finish, bool with_usage_null);
/* The final usage event (choices: []). */
char *oai_render_usage_chunk(const oai_meta_t *m, const oai_usage_t *u);
/* An error event inside a stream: "data: {\"error\": ...}\n\n". */
char *oai_render_error_event(const oai_error_t *e);

/* ---- Tenancy ----------------------------------------------------------------------- */

typedef struct tenancy tenancy_t;

/* Loads keys (one per line; blank lines and '#' comments skipped). NULL path: open mode. */
int tenancy_create(const char *keys_path, tenancy_t **out, char *err, size_t err_len);
void tenancy_destroy(tenancy_t *t);
bool tenancy_enabled(const tenancy_t *t);

/*
 * Resolves the engine's cache salt for a request. auth is the Authorization header (may
 * be NULL). Open mode: the client salt itself (NULL when absent). Keyed mode: the key
 * must be listed (else CAIRN_ENOENT -> 401) and the salt is hex(SHA-256(key)) "/"
 * hex(SHA-256(client_salt)) (or just the first part without a client salt), at most 129
 * bytes. *salt is cairn_malloc'd or NULL; domain_tag receives 16 hex chars of
 * SHA-256(salt) ("default" for the shared domain) for logs.
 */
int tenancy_resolve(const tenancy_t *t, const char *auth, const char *client_salt, char **salt,
                    char domain_tag[17]);

/* ---- Metrics ----------------------------------------------------------------------- */

typedef struct metrics metrics_t;

typedef enum {
    ROUTE_CHAT = 0, ROUTE_COMPLETIONS, ROUTE_MODELS, ROUTE_HEALTH, ROUTE_METRICS, ROUTE_OTHER,
    ROUTE_COUNT
} route_t;

int metrics_create(metrics_t **out);
void metrics_destroy(metrics_t *m);
/* Counts one HTTP response of route with status. Thread-safe. */
void metrics_http(metrics_t *m, route_t route, int status);
/* Counts a finished generation (usage may be NULL for failures). Thread-safe. */
void metrics_generation(metrics_t *m, const cairn_req_usage_t *u, bool ok, bool canceled);
/* Prometheus text exposition (cairn_malloc'd) with the scheduler's gauges. */
char *metrics_render(metrics_t *m, const cairn_sched_stats_t *st);

/* ---- Request log ------------------------------------------------------------------- */

typedef struct reqlog reqlog_t;

typedef struct {
    const char *id;
    const char *endpoint;
    const char *domain;          /* tenancy_resolve's tag */
    int http_status;
    const cairn_req_usage_t *usage; /* NULL if the request never ran */
    const char *finish;          /* "stop", "length", "canceled", "error", ... */
    const char *error;           /* message or NULL */
} reqlog_entry_t;

int reqlog_open(const char *path, reqlog_t **out, char *err, size_t err_len);
void reqlog_close(reqlog_t *l);
/* Appends one line; thread-safe; failures are logged through cairn_log, never fatal. */
void reqlog_write(reqlog_t *l, const reqlog_entry_t *e);

#endif
