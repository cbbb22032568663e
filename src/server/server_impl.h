/*
 * server/server_impl.h — private interfaces between the server's modules.
 *
 *   api/               API adapters: the neutral request and events, and one file per
 *                      API (api/api.h; OpenAI chat and completions first)
 *   prompt.c           neutral request -> prompt token ids (chat template, tokenizer)
 *   tenancy.c          API keys -> cache domains
 *   metrics.c          Prometheus counters and histograms
 *   request_log.c      one JSON line per finished request
 *   http_server.c      the MHD daemon, routing to adapters, streaming (cairn/server.h)
 */
#ifndef CAIRN_SERVER_IMPL_H
#define CAIRN_SERVER_IMPL_H

#include <stdio.h>

#include "cairn/chat_template.h"
#include "cairn/common.h"
#include "cairn/scheduler.h"
#include "cairn/tokenizer.h"
#include "server/api/api.h"

/* ---- Prompts ----------------------------------------------------------------------- */

typedef struct {
    const cairn_tokenizer_t *tok;
    const cairn_chat_template_t *tmpl; /* NULL: the model has no usable chat template */
    int vocab;
    /* The template prints tool-call arguments as a mapping (tojson, |items) and has no
     * branch for a string: arguments sent as JSON text (what OpenAI clients send) are
     * given to it parsed. Templates that test "arguments is string" get them as sent,
     * which renders exactly the bytes the model generated. */
    bool args_as_objects;
} prompt_ctx_t;

/*
 * The prompt token ids of a parsed request: MESSAGES through the chat template (with
 * add_generation_prompt, the tokenizer's bos/eos tokens, and no special tokens added by
 * the tokenizer, as transformers' apply_chat_template(tokenize=True)); TEXT through the
 * tokenizer; IDS checked against the vocabulary. Returns 0 with *ids (cairn_malloc'd,
 * caller frees) and *n_ids, or a negative code with the client-facing error in *e naming
 * r->prompt_param (400; 503 out of memory). *opens_reasoning (may be NULL) tells whether a
 * rendered chat prompt ends inside an open <think> block. Thread-safe. Cost: the template and the
 * tokenizer, linear in the prompt.
 */
int prompt_build(const prompt_ctx_t *pc, const gen_request_t *r, int32_t **ids, int *n_ids,
                 bool *opens_reasoning, api_error_t *e);

/* ---- Tenancy ----------------------------------------------------------------------- */

typedef struct tenancy tenancy_t;

/* Loads keys (one per line; blank lines and '#' comments skipped). NULL path: open mode. */
int tenancy_create(const char *keys_path, tenancy_t **out, char *err, size_t err_len);
void tenancy_destroy(tenancy_t *t);
bool tenancy_enabled(const tenancy_t *t);

/*
 * Resolves the engine's cache salt for a request. key[0..key_len) is the API key the
 * request presented (NULL: none), already taken out of its header by the API's rules
 * (api_auth_t). Open mode: the client salt itself (NULL when absent). Keyed mode: the key
 * must be listed (else CAIRN_ENOENT -> 401) and the salt is hex(SHA-256(key)) "/"
 * hex(SHA-256(client_salt)) (or just the first part without a client salt), at most 129
 * bytes. *salt is cairn_malloc'd or NULL; domain_tag receives 16 hex chars of
 * SHA-256(salt) ("default" for the shared domain) for logs.
 */
int tenancy_resolve(const tenancy_t *t, const char *key, size_t key_len,
                    const char *client_salt, char **salt, char domain_tag[17]);

/* ---- Metrics ----------------------------------------------------------------------- */

typedef struct metrics metrics_t;

/*
 * Counters for n_routes routes labelled routes[i] (borrowed: they must outlive the
 * metrics); the first n_always are listed with status 200 even before any request (the
 * generation routes, so dashboards see them from the start).
 */
int metrics_create(const char *const *routes, int n_routes, int n_always, metrics_t **out);
void metrics_destroy(metrics_t *m);
/* Counts one HTTP response of route (an index into routes) with status. Thread-safe. */
void metrics_http(metrics_t *m, int route, int status);
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
