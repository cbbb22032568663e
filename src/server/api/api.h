/*
 * server/api/api.h — the API adapter interface: one neutral generation request in, one
 * neutral event stream out, and a vtable per HTTP API that converts between them.
 *
 * Model. The HTTP server (http_server.c) knows nothing about any API's JSON. It routes a
 * request by path to an adapter (a route table built from api_registry or from the
 * adapters a caller passes in cairn_server_options_t.apis), reads the API key from the
 * headers the adapter names, and asks the adapter to parse the body into a gen_request_t.
 * It then builds the prompt (prompt.c: chat template or tokenizer), checks what needs the
 * model (vocabulary, context), submits to the scheduler, and hands what the scheduler
 * reports back to the adapter as events:
 *
 *      body ──parse──> gen_request_t ──prompt.c──> token ids ──> scheduler
 *                                                                   │ text per choice
 *      wire bytes <──begin / delta* / (end | fail)── api_delta_t <──┘
 *
 * Streaming and non-streaming requests get the same calls: begin, then deltas as text
 * arrives, then exactly one end (success) or, for a stream that already sent its headers,
 * fail. A streaming adapter writes each event's bytes at once; a non-streaming one
 * accumulates and writes the whole body at end. Errors before a response began (a bad
 * body, 401, 429, ...) are rendered by render_error with the error's HTTP status.
 *
 * Adding an API is one new file defining a const api_adapter_t and one line in
 * registry.c. What an adapter owns: its paths, where its API key comes from (header and
 * scheme), its field names, defaults and error shape, its ids, its content types, and how
 * a stream begins and ends (role chunks, message_start, pings, "[DONE]"). What it never
 * does: templating, tokenizing, tenancy, scheduling, sockets.
 *
 * Typed output. The server runs each choice's text through the output parser
 * (src/server/output/output.h) before the adapter sees it, so deltas are typed: answer
 * text, reasoning text, and tool calls (begin with a name and a stable id, argument
 * fragments, end). Every adapter's delta switch handles every kind (no default: branch,
 * so the compiler names each adapter that does not). A route that only tokenizes
 * (Anthropic's count_tokens) is an API_OP_COUNT_TOKENS route rendered by render_count; a
 * model list (GET /v1/models) an API_OP_LIST_MODELS route rendered by render_models.
 *
 * Thread-safety: adapters are immutable tables; every function is called on an HTTP
 * thread, and the calls for one request are serialized (one api_render_t is used by one
 * thread at a time). Parsers are pure and must never trust the body (they are fuzzed:
 * fuzz/fuzz_openai_request.c drives every registered parser).
 */
#ifndef CAIRN_SERVER_API_H
#define CAIRN_SERVER_API_H

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cairn/common.h"
#include "cairn/sampler.h"
#include "cairn/scheduler.h"
#include "cairn/server.h"

/* ---- Byte buffers -------------------------------------------------------------------- */

/* A growing byte buffer, always NUL-terminated when p is not NULL. Zero-initialize. */
typedef struct api_buf_s {
    char *p;
    size_t len, cap;
} api_buf_t;

/* Appends s[0..n). Returns 0 or CAIRN_ENOMEM (the buffer is unchanged). */
int api_buf_append(api_buf_t *b, const char *s, size_t n);
/* Appends and frees s, a cairn_malloc'd string; s == NULL counts as CAIRN_ENOMEM. */
int api_buf_take(api_buf_t *b, char *s);
/* Appends printf-style text. Returns 0 or CAIRN_ENOMEM. */
int api_buf_printf(api_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void api_buf_free(api_buf_t *b);

/* ---- Errors -------------------------------------------------------------------------- */

/* What went wrong, independent of any API's names; each adapter maps it to its own type
 * strings (OpenAI: invalid_request_error, ...; Anthropic: not_found_error, ...). */
typedef enum {
    API_ERR_INVALID_REQUEST = 0, /* 400, 404 model, 405, 413 */
    API_ERR_AUTHENTICATION = 1,  /* 401 */
    API_ERR_NOT_FOUND = 2,       /* 404 route */
    API_ERR_RATE_LIMIT = 3,      /* 429 */
    API_ERR_SERVER = 4,          /* 500: generation failed */
    API_ERR_UNAVAILABLE = 5,     /* 503: shutting down, canceled, out of memory (retry) */
} api_error_kind_t;

typedef struct {
    int http_status;      /* 400, 401, 404, 405, 413, 429, 500, 503 */
    api_error_kind_t kind;
    const char *code;     /* static or NULL: "context_length_exceeded", "model_not_found", ... */
    char param[64];       /* the offending request field, "" when none */
    char message[512];    /* one line for the client */
} api_error_t;

/* Fills *e (message printf-style; param and code may be NULL). */
void api_error_set(api_error_t *e, int http_status, api_error_kind_t kind, const char *param,
                   const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The one out-of-memory answer: 503, API_ERR_UNAVAILABLE, code "out_of_memory". A valid
 * request that meets memory pressure is told to retry, never that it was malformed. */
void api_error_oom(api_error_t *e);

/* ---- The neutral generation request -------------------------------------------------- */

#define API_MAX_N CAIRN_SCHED_MAX_N /* choices per request */
#define API_MAX_STOP 16             /* stop strings per request */
#define API_MAX_SALT 256            /* bytes of a client cache_salt */

typedef enum {
    GEN_PROMPT_MESSAGES = 0, /* messages (+ tools, template_kwargs) through the chat template */
    GEN_PROMPT_TEXT = 1,     /* prompt_text through the tokenizer */
    GEN_PROMPT_IDS = 2,      /* prompt_ids as given (range-checked against the vocabulary) */
} gen_prompt_kind_t;

/*
 * What the server needs to run one request, whichever API it came in. Everything is owned
 * by the struct (gen_request_fini frees it); sampling.stop, sampling.stop_token_ids and
 * sampling.logit_bias point into it. A parser fills it from zero: gen_request_init first.
 */
typedef struct {
    /* The prompt. */
    gen_prompt_kind_t prompt_kind;
    cJSON *messages;          /* MESSAGES: array of {role, content, ...} in the shape chat
                               * templates consume (Hugging Face's convention: content a
                               * string or null; tool_calls, tool_call_id, name as given) */
    cJSON *tools;             /* MESSAGES: the template's `tools` (function schemas) or NULL */
    cJSON *template_kwargs;   /* MESSAGES: extra template variables (enable_thinking) or NULL */
    bool no_tool_calls;       /* tool_choice "none": the output is not parsed for calls
                               * (calls are parsed when tools is a non-empty array) */
    bool continue_final;      /* MESSAGES: the last message is an assistant turn to continue
                               * (prefill): no generation prompt, the prompt ends right
                               * after its content */
    bool no_generation_prompt;/* MESSAGES: render with add_generation_prompt false */
    bool max_tokens_is_bound; /* max_tokens is a bound the client sends whatever the model
                               * (Claude Code always asks 32000): past the context the
                               * server lowers it to what the context leaves, no 400 */
    bool logprobs;            /* report the generated tokens' log-probabilities */
    bool retain;              /* prompt_cache_key sent (non-empty): a retention hint for the
                               * prompt's blocks (cairn_req_params_t.retain); never a domain */
    int top_logprobs;         /* and this many alternatives each (0..20) */
    int enable_thinking;      /* MESSAGES: -1 the template's default, else the value of its
                               * enable_thinking switch (0/1) unless template_kwargs set it
                               * (reasoning_effort, Anthropic's thinking, ...) */
    char *prompt_text;        /* TEXT: the prompt, prompt_len bytes (NUL-terminated) */
    size_t prompt_len;
    bool add_special;         /* TEXT: let the tokenizer add BOS etc. */
    int32_t *prompt_ids;      /* IDS: [n_prompt_ids] token ids, each >= 0 */
    int n_prompt_ids;
    /* Names of the API's fields, for errors the server finds (static strings). */
    const char *prompt_param;     /* "messages", "prompt", ... */
    const char *max_tokens_param; /* "max_tokens", ... */

    /* Generation. */
    char *model;              /* the model the client asked for, NULL for "whatever is served" */
    cairn_sampling_params_t sampling; /* ranges checked by the server against the model */
    char *stop_store[API_MAX_STOP];   /* storage of sampling.stop */
    int32_t *stop_ids;        /* storage of sampling.stop_token_ids */
    cairn_logit_bias_t *bias; /* storage of sampling.logit_bias */
    int n;                    /* choices, 1..API_MAX_N */

    /* Tenancy. */
    char *cache_salt;         /* the client's salt (<= API_MAX_SALT bytes) or NULL */
    char *user;               /* end-user id the client sent, or NULL (recorded nowhere) */

    /* Response options. */
    bool stream;
    bool include_usage;       /* a stream reports usage at its end */

    /* The adapter's own per-request data (fields it echoes back, its stream options), or
     * NULL; freed with api_data_free by gen_request_fini. */
    void *api_data;
    void (*api_data_free)(void *api_data);
} gen_request_t;

/* Zeroes *r and sets the defaults: one choice, the sampler's defaults, prompt_param
 * "prompt", max_tokens_param "max_tokens", enable_thinking -1 (the template decides). */
void gen_request_init(gen_request_t *r);
/* Frees everything *r owns and zeroes it. NULL and a zeroed struct are no-ops. */
void gen_request_fini(gen_request_t *r);
/*
 * The stop strings of an API's array field `param` (OpenAI's stop, Anthropic's
 * stop_sequences): each element of arr, a JSON array the caller has checked to hold at
 * most API_MAX_STOP items, becomes one of r's stop strings (copied into r->stop_store,
 * counted in r->sampling.n_stop). An element that is not a non-empty string is a 400
 * naming param ("<param>[k] must be a non-empty string"): CAIRN_EINVAL; CAIRN_ENOMEM when
 * a copy cannot be allocated. What was copied before a failure is freed by
 * gen_request_fini.
 */
int gen_request_stop_strings(gen_request_t *r, const cJSON *arr, const char *param, api_error_t *err);

/* ---- Events back to the client ------------------------------------------------------- */

typedef enum {
    API_DELTA_TEXT = 0,            /* assistant text of one choice */
    API_DELTA_REASONING = 1,       /* reasoning text (the model's <think> block) */
    API_DELTA_TOOL_CALL_BEGIN = 2, /* a tool call starts: tool, tool_id, text = its name */
    API_DELTA_TOOL_CALL_ARGS = 3,  /* a fragment of its arguments' JSON text */
    API_DELTA_TOOL_CALL_END = 4,   /* the call is complete (its arguments are valid JSON) */
    API_DELTA_LOGPROBS = 5,        /* log-probabilities of the tokens generated since the
                                    * last one (only when the request asked: req->logprobs) */
} api_delta_kind_t;

/* One candidate token: the bytes it decodes to (possibly part of a UTF-8 character; not
 * NUL-terminated) and its log-probability. */
typedef struct {
    const char *bytes;
    size_t len;
    float logprob;
} api_token_lp_t;

/* A generated token and its most likely alternatives (n_top = req->top_logprobs). */
typedef struct {
    api_token_lp_t token;
    api_token_lp_t top[CAIRN_SCHED_MAX_TOP_LOGPROBS];
    int n_top;
} api_logprob_t;

/* One piece of output for one choice. Deltas of different choices may interleave; those
 * of one choice come in order, and a call's BEGIN, ARGS* and END are never interleaved
 * with other deltas of its choice. */
typedef struct {
    api_delta_kind_t kind;
    int choice;               /* 0..req->n-1 */
    const char *text;         /* valid UTF-8, whole characters, not NUL-terminated */
    size_t len;
    int tool;                 /* TOOL_CALL_*: the call's index within the choice, from 0 */
    const char *tool_id;      /* TOOL_CALL_*: a stable id, unique per server run
                               * ("call_<hex>"); NUL-terminated */
    const api_logprob_t *logprobs; /* LOGPROBS: [n_logprobs], in generation order */
    int n_logprobs;
} api_delta_t;

typedef struct {
    int prompt_tokens, completion_tokens;
    int cached_tokens;        /* every prompt token not computed: hot + restored (what
                               * clients read as cached_tokens / cache_read_input_tokens) */
    int hot_tokens;           /* of which attached from the hot prefix cache */
    int restored_tokens;      /* of which restored from the cold tier (never overlaps hot) */
} api_usage_t;

/* A successful end: every choice finished. */
typedef struct {
    const cairn_finish_reason_t *finish; /* [req->n] */
    const int *tool_calls;               /* [req->n] tool calls parsed per choice */
    api_usage_t usage;
} api_end_t;

/*
 * The rendering context of one request, owned by the server. The adapter appends its
 * wire bytes to `out` (the server sends and empties it) and keeps whatever it needs
 * between calls in `state` (allocated in begin, freed in release).
 */
typedef struct {
    const gen_request_t *req; /* n, stream, include_usage, api_data */
    const char *id;           /* this response's id: "<id_prefix>-<24 hex>" */
    long long created;        /* unix seconds */
    const char *model;        /* the served model id */
    api_usage_t usage;        /* at begin: prompt tokens, and the cached ones once the
                               * request was admitted (completion_tokens 0) */
    api_buf_t out;
    void *state;
} api_render_t;

/* ---- The adapter --------------------------------------------------------------------- */

typedef enum {
    API_OP_GENERATE = 0,      /* POST: parse, build the prompt, generate, render events */
    API_OP_COUNT_TOKENS = 1,  /* POST: parse, build the prompt, render_count (no generation) */
    API_OP_LIST_MODELS = 2,   /* GET path or path/{id}: render_models */
} api_op_t;

typedef struct {
    const char *path;         /* exact path, e.g. "/v1/chat/completions" */
    api_op_t op;              /* which also fixes the method */
    /* NULL, or a request header (case-insensitive name) this route requires: a path may
     * then also be served by one route without it, which answers requests lacking it
     * (Anthropic's GET /v1/models carries anthropic-version; OpenAI's does not). */
    const char *when_header;
} api_route_t;

/* The served model, for API_OP_LIST_MODELS. */
typedef struct {
    const char *id;           /* what /v1/models reports and responses echo */
    long long created;        /* unix seconds: when the server started */
    int max_model_len;        /* tokens of one sequence */
} api_model_t;

/* Where the API key is read from: `header`'s value, after "<scheme> " when scheme is not
 * NULL (case-insensitive), surrounding spaces trimmed. Entries are tried in order. */
typedef struct {
    const char *header;       /* "Authorization", "x-api-key" (case-insensitive) */
    const char *scheme;       /* "Bearer", or NULL for the whole value */
} api_auth_t;

/* What a parser sees of the HTTP request. */
typedef struct {
    api_op_t op;              /* the route's */
    const char *body;         /* len bytes, untrusted, not NUL-terminated */
    size_t len;
    /* A request header's value (case-insensitive name) or NULL; may be NULL itself (no
     * headers, as in the fuzz target). */
    const char *(*header)(void *ctx, const char *name);
    void *header_ctx;
} api_input_t;

typedef struct cairn_api_adapter api_adapter_t;

struct cairn_api_adapter {
    const char *name;                /* "openai.chat": logs, tests */
    const api_route_t *routes;       /* [n_routes] paths this API serves */
    size_t n_routes;
    const api_auth_t *auth;          /* [n_auth], tried in order; n_auth >= 1 */
    size_t n_auth;
    const char *id_prefix;           /* response ids: "chatcmpl" -> "chatcmpl-<24 hex>"; a
                                      * prefix ending in '_' ("msg_") takes no '-' */
    const char *content_type;        /* non-streaming bodies and errors */
    const char *stream_content_type; /* streams: "text/event-stream" */
    const char *oom_body;            /* static error body (503) for when rendering itself
                                      * runs out of memory */
    const char *keepalive;           /* streams: what a stream silent for keepalive_ms
                                      * sends (a long prefill, a queue), a whole SSE
                                      * frame; NULL: the comment ": keepalive" */

    /*
     * Parses and validates a body into *out (which it initializes). Returns 0, or a
     * negative code with the client-facing error in *err and nothing left to free in
     * *out. Out of memory: api_error_oom. Must be pure and total over any input.
     */
    int (*parse)(const api_input_t *in, gen_request_t *out, api_error_t *err);

    /* An error response body for e (status e->http_status), appended to out. */
    int (*render_error)(const api_error_t *e, api_buf_t *out);

    /*
     * The response, in order: begin once; delta for each piece of output; then exactly
     * one of end (every choice finished) or fail (the request failed after a stream's
     * headers went out; never called for non-streaming requests, which get render_error).
     * Each returns 0 or CAIRN_ENOMEM (the server then aborts the response). release is
     * called once after begin was called, whatever happened since, and must accept a
     * state that begin could not finish allocating.
     */
    int (*begin)(api_render_t *r);
    int (*delta)(api_render_t *r, const api_delta_t *d);
    int (*end)(api_render_t *r, const api_end_t *e);
    int (*fail)(api_render_t *r, const api_error_t *e);
    void (*release)(api_render_t *r);

    /* API_OP_COUNT_TOKENS routes: the response body for a prompt of n_tokens tokens.
     * NULL when the adapter has no such route. */
    int (*render_count)(const gen_request_t *req, int n_tokens, api_buf_t *out);

    /* API_OP_LIST_MODELS routes: the list (want NULL) or one model (want: the path's
     * {id}). An unknown id is CAIRN_ENOENT with a 404 in *err. NULL when the adapter has
     * no such route. */
    int (*render_models)(const api_model_t *m, const char *want, api_buf_t *out,
                         api_error_t *err);
};

/* The built-in APIs, in routing and precedence order (registry.c); the first renders the
 * errors of routes that belong to no API (unknown paths). */
extern const api_adapter_t *const api_registry[];
extern const size_t api_registry_count;

/*
 * Checks that an adapter list can be served: every adapter complete (all functions and
 * strings set, render_count / render_models where such a route exists), paths distinct
 * from the server's own (/health, /metrics) and unique, except that one path may have at
 * most one route without when_header and any number with distinct when_headers. Returns
 * 0 or CAIRN_EINVAL with a message in err.
 */
int api_list_check(const api_adapter_t *const *apis, size_t n, char *err, size_t err_len);

/* ---- Helpers for JSON APIs ----------------------------------------------------------- */

/* True if s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code points > 0x10FFFF). */
bool api_utf8_valid(const char *s, size_t n);

/* Appends s[0..n) with every byte that is not part of a well-formed UTF-8 character
 * replaced by U+FFFD (a token's bytes may be a fragment of one). 0 or CAIRN_ENOMEM. */
int api_utf8_lossy(api_buf_t *out, const char *s, size_t n);

/*
 * Parses an untrusted body as one JSON object: UTF-8 (bytes and every decoded string),
 * JSON syntax, no trailing data, at most max_fields keys, no duplicate keys. Returns 0
 * with *root (caller deletes), or a negative code with a 400 in *err, or CAIRN_ENOMEM
 * with api_error_oom's 503 when the JSON parser ran out of memory.
 */
int api_json_object(const char *body, size_t len, int max_fields, cJSON **root,
                    api_error_t *err);

#endif
