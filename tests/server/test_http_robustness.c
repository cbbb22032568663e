/*
 * test_http_robustness.c — clients that go away or stop reading do not hold the pool:
 * a non-streaming request whose client closes its socket mid-generation is canceled
 * (MHD does not watch suspended connections; the server's watchdog does), and a stream
 * whose client never reads is canceled once its pending output passes the bound. Both
 * end with no pool block in use; a stream with nothing to say yet gets keepalive
 * comments. Loopback only, bounded waits.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "http_test_util.h"

static cairn_sched_stats_t stats(test_server_t *ts)
{
    cairn_sched_stats_t st;
    cairn_sched_stats(cairn_server_sched(ts->srv), &st);
    return st;
}

/* The states the tests wait for. */
typedef enum {
    WANT_RUNNING,  /* one request running */
    WANT_CANCELED, /* a cancel seen, nothing running, the pool empty again */
    WANT_IDLE,     /* nothing running or queued (an earlier part's requests are over, so a
                    * later WANT_RUNNING is the new request's) */
} want_t;

/* Polls the scheduler's stats every 10 ms for up to ms; returns whether want was seen. */
static bool wait_for(test_server_t *ts, want_t want, int ms)
{
    for (int i = 0; i < ms / 10; i++) {
        cairn_sched_stats_t st = stats(ts);
        bool ok = want == WANT_RUNNING  ? st.running == 1
                : want == WANT_CANCELED ? st.requests_canceled >= 1 && st.running == 0 &&
                                              st.pool_blocks_used == 0
                                        : st.running == 0 && st.queued == 0;
        if (ok)
            return true;
        usleep(10000);
    }
    return false;
}

static void test_nonstream_disconnect_cancels(void **state)
{
    test_server_t ts;
    assert_int_equal(test_server_start(&ts, "qwen3", NULL, 64), 0);
    const char *body = "{\"prompt\":\"go\",\"max_tokens\":8000,\"ignore_eos\":true,\"temperature\":0}";
    int fd = http_send(ts.port, "POST", "/v1/completions", NULL, body, strlen(body));
    assert_true(fd >= 0);
    assert_true(wait_for(&ts, WANT_RUNNING, 5000));
    usleep(100000);
    close(fd);
    assert_true(wait_for(&ts, WANT_CANCELED, 5000));
    cairn_sched_stats_t st = stats(&ts);
    assert_true(st.completion_tokens < 8000); /* stopped early, not run to the end */
    test_server_stop(&ts);
}

static void test_stalled_stream_cancels(void **state)
{
    cairn_server_options_t o;
    cairn_server_options_default(&o);
    o.port = 0;
    o.max_pending_bytes = 256 * 1024;
    o.stall_ms = 1000;
    o.socket_send_buffer = 16 * 1024; /* backpressure after KBs, not the kernel's MBs */
    test_server_t ts;
    assert_int_equal(test_server_start(&ts, "qwen3", &o, 64), 0);
    /* A client with a tiny receive window that never reads. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)ts.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    const char *body = "{\"prompt\":\"go\",\"max_tokens\":4000,\"ignore_eos\":true,\"n\":16,"
                       "\"temperature\":0,\"stream\":true}";
    char req[1024];
    int n = snprintf(req, sizeof req,
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
    assert_int_equal(write(fd, req, (size_t)n), n);
    assert_true(wait_for(&ts, WANT_RUNNING, 5000));
    assert_true(wait_for(&ts, WANT_CANCELED, 60000));
    cairn_sched_stats_t st = stats(&ts);
    assert_true(st.completion_tokens < 16 * 4000);
    close(fd);
    test_server_stop(&ts);
}

/* A stream waiting behind another request gets keepalive comments (Anthropic's: ping
 * events), then its answer. */
static void test_keepalive_while_waiting(void **state)
{
    cairn_server_options_t o;
    cairn_server_options_default(&o);
    o.port = 0;
    o.keepalive_ms = 300;
    o.sched.max_running = 1;
    test_server_t ts;
    assert_int_equal(test_server_start(&ts, "qwen3", &o, 64), 0);
    const char *longreq = "{\"prompt\":\"go\",\"max_tokens\":3000,\"ignore_eos\":true,\"temperature\":0}";
    int busy = http_send(ts.port, "POST", "/v1/completions", NULL, longreq, strlen(longreq));
    assert_true(busy >= 0);
    assert_true(wait_for(&ts, WANT_RUNNING, 5000));
    const char *body = "{\"prompt\":\"hi\",\"max_tokens\":2,\"stream\":true}";
    int fd = http_send(ts.port, "POST", "/v1/completions", NULL, body, strlen(body));
    assert_true(fd >= 0);
    int found = 0;
    http_read_until(fd, ": keepalive", 5000, &found);
    assert_true(found);
    close(busy); /* the watchdog cancels it; the stream then runs */
    http_read_until(fd, "data: [DONE]", 10000, &found);
    assert_true(found);
    close(fd);

    /* Anthropic Messages: the keepalive is the API's ping event, then the stream as usual.
     * The first part's stream has sent [DONE] but may still count as running for a moment;
     * without this wait, running == 1 below could be that stream and the message would run
     * before the busy request (seen once in CI under ASan). */
    assert_true(wait_for(&ts, WANT_IDLE, 10000));
    busy = http_send(ts.port, "POST", "/v1/completions", NULL, longreq, strlen(longreq));
    assert_true(busy >= 0);
    assert_true(wait_for(&ts, WANT_RUNNING, 5000));
    const char *msg = "{\"model\":\"qwen3\",\"max_tokens\":2,\"stream\":true,"
                      "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    fd = http_send(ts.port, "POST", "/v1/messages", NULL, msg, strlen(msg));
    assert_true(fd >= 0);
    char got[16384] = "";
    size_t n = 0;
    for (int waited = 0; waited < 5000 && !strstr(got, "event: ping"); waited += 50) {
        struct pollfd pf = {fd, POLLIN, 0};
        ssize_t r = poll(&pf, 1, 50) > 0 ? recv(fd, got + n, sizeof got - 1 - n, 0) : 0;
        n += r > 0 ? (size_t)r : 0;
        got[n] = '\0';
    }
    /* the keepalive, not the ping that follows message_start */
    assert_non_null(strstr(got, "event: ping\ndata: {\"type\":\"ping\"}\n\n"));
    assert_null(strstr(got, "message_start"));
    close(busy);
    http_read_until(fd, "event: message_stop", 10000, &found);
    assert_true(found);
    close(fd);
    test_server_stop(&ts);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nonstream_disconnect_cancels),
        cmocka_unit_test(test_stalled_stream_cancels),
        cmocka_unit_test(test_keepalive_while_waiting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
