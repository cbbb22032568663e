/*
 * stress_http.h — an HTTP/1.1 client for the stress tests: loopback only, one request per
 * connection (Connection: close), every read bounded by a deadline, and the ways a client
 * misbehaves on purpose (hang up right after sending, or after the first bytes of a
 * stream). It tells a complete response (Content-Length reached, or the chunked body's
 * last chunk seen) from one the server cut, which is what the stress tests assert on.
 */
#ifndef CAIRN_TESTS_STRESS_HTTP_H
#define CAIRN_TESTS_STRESS_HTTP_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    SH_COMPLETE = 0,   /* a whole response arrived (status, headers, the whole body) */
    SH_HUNG_UP,        /* we closed on purpose (hang_up_after reached) */
    SH_TRUNCATED,      /* the server closed before the response was whole (or sent nothing) */
    SH_REFUSED,        /* connect failed, or the connection was reset before any byte */
    SH_TIMEOUT,        /* nothing ended it before the deadline: a hang */
} sh_outcome_t;

typedef struct {
    sh_outcome_t outcome;
    int status;          /* 0 if no status line arrived */
    char *body;          /* decoded body (chunks joined), NUL-terminated; never NULL */
    size_t body_len;
} sh_resp_t;

/*
 * POST (body != NULL) or GET `path` to 127.0.0.1:port and read the answer.
 * hang_up_after: NULL, or a needle; "" hangs up right after sending, otherwise at the
 * first occurrence of the needle in what was read. timeout_ms bounds the whole exchange.
 * Fills *out (free with sh_free) and returns its outcome.
 */
sh_outcome_t sh_exchange(int port, const char *path, const char *body, const char *hang_up_after,
                         int timeout_ms, sh_resp_t *out);
void sh_free(sh_resp_t *r);

/*
 * An SSE body's events: the concatenated choice-0 text (delta.content or text), the last
 * finish reason, whether an error event came, and whether "data: [DONE]" ended it.
 * Returns the text (malloc'd; caller frees).
 */
char *sh_sse_text(const char *body, char *finish, size_t finish_cap, bool *saw_error, bool *saw_done);

#endif
