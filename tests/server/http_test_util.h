/*
 * http_test_util.h — helpers for the HTTP server tests: an in-process server over a
 * fixture model on an ephemeral loopback port, and a minimal HTTP/1.1 client (Connection:
 * close, chunked decoding, SSE event extraction). Loopback only.
 */
#ifndef CAIRN_TESTS_HTTP_TEST_UTIL_H
#define CAIRN_TESTS_HTTP_TEST_UTIL_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "cairn/server.h"

typedef struct {
    cairn_checkpoint_t *ck;
    cairn_tokenizer_t *tok;
    cairn_engine_t *eng;
    cairn_server_t *srv;
    int port;
} test_server_t;

/* Starts a server over fixtures/models/<model>; opt may be NULL (defaults, port 0).
 * Returns 0 or a CAIRN_E* code. */
int test_server_start(test_server_t *ts, const char *model, const cairn_server_options_t *opt,
                      int pool_mib);
/* The same over any model folder; max_context 0: the engine's default. */
int test_server_start_dir(test_server_t *ts, const char *dir, const char *model,
                          const cairn_server_options_t *opt, int pool_mib, int max_context);
void test_server_stop(test_server_t *ts);

/* A `cairn serve` child process (the built binary) on an ephemeral loopback port. */
typedef struct {
    int pid; /* 0 when not running */
    int port;
} test_child_t;

/* Forks and execs argv (argv[0] the binary; it must print "listening on
 * http://127.0.0.1:PORT" on stdout) with the environment variables of env set in the child
 * (NAME, VALUE pairs, NULL-terminated; env may be NULL), and waits up to 30 s for that
 * line. Returns 0 with *c filled, or -1 (the child killed, what it printed on stderr). */
int test_child_serve(test_child_t *c, const char *const *argv, const char *const *env);
/* SIGTERM, then up to timeout_ms for the exit. Returns the exit status, or -1 when it had
 * to be killed (SIGKILL) or was not running. */
int test_child_stop(test_child_t *c, int timeout_ms);
/* SIGKILL and reap (no-op when not running). */
void test_child_kill(test_child_t *c);

typedef struct {
    int status;
    char *headers;   /* raw header block */
    char *body;      /* decoded body, NUL-terminated */
    size_t body_len;
} http_resp_t;

/* One request over a fresh connection; headers is extra "Name: value\r\n" lines or NULL.
 * Returns 0, or -1 on a socket error. */
int http_request(int port, const char *method, const char *path, const char *headers,
                 const char *body, size_t body_len, http_resp_t *out);
void http_resp_free(http_resp_t *r);

/* Parses the JSON body (NULL if not JSON). Caller deletes. */
cJSON *http_json(const http_resp_t *r);

/*
 * Concatenates an SSE stream's choice-0 text (delta.content or text), counts events, and
 * returns the finish reason and final usage object if present. *saw_done is set on
 * "data: [DONE]". Returns a malloc'd text (caller frees).
 */
char *sse_collect(const char *body, int *n_events, char *finish, size_t finish_cap,
                  cJSON **usage, int *saw_done);

/* Opens a connection and sends a request; returns the fd (caller reads and closes). */
int http_send(int port, const char *method, const char *path, const char *headers,
              const char *body, size_t body_len);

/* Reads from fd until `needle` appears in what was read or timeout_ms passes; returns
 * bytes read (>= 0) and whether it appeared in *found. */
size_t http_read_until(int fd, const char *needle, int timeout_ms, int *found);

/* A metric value from /metrics text ("name" or "name{labels}"), or -1. */
double metrics_value(const char *text, const char *name);

#endif
