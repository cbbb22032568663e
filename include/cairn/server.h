/*
 * cairn/server.h — an HTTP server over one engine (libmicrohttpd) speaking one or more
 * APIs; by default the OpenAI chat completions and completions APIs.
 *
 * Model. A server owns a scheduler (include/cairn/scheduler.h) over a caller-provided
 * engine and tokenizer, and an MHD daemon with a pool of HTTP threads. Each API is an
 * adapter (src/server/api/api.h) that parses its request bodies into one neutral
 * generation request and renders the generation's events back in its own shapes; the
 * HTTP threads route by path to an adapter, render the chat template, tokenize and
 * submit; the scheduler's engine thread reports deltas by appending to the connection's
 * buffer and resuming the suspended connection; the HTTP thread has the adapter render
 * them. Routes and error shapes: docs/API.md.
 *
 * Tenancy. With an API key file, every API request needs a listed key (for the OpenAI
 * APIs `Authorization: Bearer KEY`; each adapter names its header) and the cache domain
 * passed to the engine is hex(SHA-256(KEY)) "/" cache_salt, so a client's own salt can
 * only split its tenant's domain further (src/server/tenancy.c).
 *
 * Thread-safety: create and destroy from one thread; cairn_server_port and
 * cairn_server_sched may be called from any thread while the server lives.
 */
#ifndef CAIRN_SERVER_H
#define CAIRN_SERVER_H

#include "cairn/common.h"
#include "cairn/engine.h"
#include "cairn/scheduler.h"
#include "cairn/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cairn_server cairn_server_t;

/* One HTTP API (its paths, request parser and renderers). The interface is internal to
 * the library (src/server/api/api.h): in-tree APIs and tests implement it. */
typedef struct cairn_api_adapter cairn_api_adapter_t;

typedef struct {
    const char *host;             /* IPv4 address to bind; default "127.0.0.1" */
    int port;                     /* 0: an ephemeral port (see cairn_server_port); default 8080 */
    int http_threads;             /* MHD worker threads; default 4 */
    size_t max_body_bytes;        /* larger request bodies get 413; default 4 MiB */
    const char *model_id;         /* the id /v1/models reports and responses echo; default "cairn" */
    const char *api_keys_file;    /* NULL: no authentication; else one key per line */
    const char *request_log_path; /* NULL: no request log; else JSON lines appended */
    /* Tool-call format of the model's output: NULL detects it from the chat template;
     * "none" never parses calls; else "hermes", "llama3_json" or "pythonic". */
    const char *tool_parser;
    /* Robustness. A stream whose client stops reading is canceled once more than
     * max_pending_bytes wait for it (default 4 MiB) or bytes have waited stall_ms
     * (default 30000) without a read; a non-streaming request whose client disconnects is
     * canceled within 200 ms. Idle connections close after connection_timeout_s (default
     * 120); at most max_connections (default 512) are open at once. */
    int stall_ms;
    size_t max_pending_bytes;
    int keepalive_ms;             /* a stream silent this long gets ": keepalive" (15000) */
    size_t socket_send_buffer;    /* each connection's SO_SNDBUF; 0: the kernel's (default) */
    int connection_timeout_s;
    int max_connections;
    cairn_sched_options_t sched;  /* scheduler options (cairn_sched_options_default) */
    /* The APIs to serve, in routing order (the first renders errors of unknown routes);
     * borrowed, they must outlive the server. NULL (and n_apis 0): the built-in registry,
     * OpenAI chat completions (with /v1/models) and completions. */
    const cairn_api_adapter_t *const *apis;
    size_t n_apis;
} cairn_server_options_t;

/* Fills *o with the defaults above. */
CAIRN_API void cairn_server_options_default(cairn_server_options_t *o);

/*
 * Creates the scheduler over engine and tok (both must outlive the server; the server is
 * their only user until destroyed), compiles the tokenizer's chat template (a model
 * without one serves /v1/completions only), loads the API keys, opens the request log and
 * starts listening. Errors: CAIRN_EINVAL (bad options, or an API list with an incomplete
 * adapter or two adapters on one path), CAIRN_ENOENT/CAIRN_EIO (key file,
 * log file), CAIRN_EFORMAT (an empty key file), CAIRN_EIO (bind/listen failed: port in
 * use), CAIRN_ENOMEM; a one-line message goes to err.
 */
CAIRN_API int cairn_server_create(cairn_engine_t *engine, const cairn_tokenizer_t *tok,
                        const cairn_server_options_t *opt, cairn_server_t **out, char *err,
                        size_t err_len);

/* The TCP port the server listens on (the chosen one when options.port was 0). */
CAIRN_API int cairn_server_port(const cairn_server_t *s);

/* Tokens one sequence may hold (/v1/models' max_model_len): the engine's max_context, or
 * what the KV pool holds when that is less. Requests past it get a 400. */
CAIRN_API int cairn_server_max_model_len(const cairn_server_t *s);

/* The server's scheduler (for statistics; do not destroy it). */
CAIRN_API cairn_sched_t *cairn_server_sched(cairn_server_t *s);

/*
 * Graceful stop: closes the listening socket (no new connections), lets in-flight
 * requests finish until deadline_ms has passed, cancels the rest (streams end with an
 * error event), then stops the HTTP threads and frees everything. NULL is a no-op.
 */
CAIRN_API void cairn_server_destroy(cairn_server_t *s, int deadline_ms);

#ifdef __cplusplus
}
#endif
#endif /* CAIRN_SERVER_H */
