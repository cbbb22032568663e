/*
 * test_http_api_adapter.c — the API adapter interface (src/server/api/api.h) proven by a
 * second API that exists only here: "echo", a plain-text API. The test defines the whole
 * adapter in this file and serves it through the real HTTP server and scheduler by
 * passing an adapter list in cairn_server_options_t.apis, so adding an API touches no
 * existing source file.
 *
 * The echo API: POST /echo with the prompt as the raw body (tokenized with special
 * tokens, greedy), options in headers (X-Echo-Max-Tokens, X-Echo-N, X-Echo-Stream: 1,
 * X-Echo-Ignore-Eos: 1, X-Echo-Tag echoed back through gen_request_t.api_data), the key
 * in X-Echo-Key (no scheme); POST /echo/count answers the prompt's token count. Bodies
 * and errors are text/plain lines:
 *
 *   non-stream:  "id=<id> finish=<f> prompt=<P> completion=<C> cached=<K> tag=<t>\n"
 *                then per choice "<len>\n<bytes>\n"
 *   stream:      "begin <id>\n", "delta <choice> <len>\n<bytes>\n"..., "end <f> prompt=<P>\n"
 *                or "fail <status> <message>\n"
 *   error:       "error <status> <param>: <message>\n"
 *
 * Checks: echo generates exactly the text /v1/completions generates for the same prompt
 * (both served by one server), streamed or not, with n choices; /echo/count matches the
 * tokenizer; every error of an echo route, and of unknown routes (the first adapter's),
 * is in echo's shape while /v1/completions keeps OpenAI's; the key is read from
 * X-Echo-Key only; a stream canceled by shutdown ends with the adapter's fail; the
 * adapter list is validated at create.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "http_test_util.h"
#include "server/api/openai.h"

/* ---- The echo adapter ---------------------------------------------------------------- */

typedef struct {
    api_buf_t text[API_MAX_N];
} echo_state_t;

static const char *echo_header(const api_input_t *in, const char *name)
{
    return in->header ? in->header(in->header_ctx, name) : NULL;
}

static void echo_tag_free(void *p) { cairn_free(p); }

static int echo_parse(const api_input_t *in, gen_request_t *r, api_error_t *err)
{
    gen_request_init(r);
    r->prompt_kind = GEN_PROMPT_TEXT;
    r->add_special = true;
    r->prompt_param = "body";
    r->max_tokens_param = "X-Echo-Max-Tokens";
    r->sampling.temperature = 0;
    r->sampling.max_tokens = 8;
    if (!api_utf8_valid(in->body, in->len)) {
        api_error_set(err, 400, API_ERR_INVALID_REQUEST, "body", NULL, "the body is not UTF-8");
        return CAIRN_EINVAL;
    }
    const char *v;
    if ((v = echo_header(in, "X-Echo-Max-Tokens")))
        r->sampling.max_tokens = atoi(v);
    if ((v = echo_header(in, "X-Echo-N")))
        r->n = atoi(v);
    if (r->sampling.max_tokens < 1 || r->n < 1 || r->n > API_MAX_N) {
        api_error_set(err, 400, API_ERR_INVALID_REQUEST, "headers", NULL, "bad X-Echo option");
        return CAIRN_EINVAL;
    }
    r->stream = (v = echo_header(in, "X-Echo-Stream")) && !strcmp(v, "1");
    r->sampling.ignore_eos = (v = echo_header(in, "X-Echo-Ignore-Eos")) && !strcmp(v, "1");
    int rc = 0;
    if ((v = echo_header(in, "X-Echo-Tag"))) {
        r->api_data_free = echo_tag_free;
        if (!(r->api_data = cairn_strdup(v)))
            rc = CAIRN_ENOMEM;
    }
    r->prompt_len = in->len;
    if (!rc && !(r->prompt_text = cairn_strndup(in->body, in->len)))
        rc = CAIRN_ENOMEM;
    if (rc) {
        gen_request_fini(r);
        api_error_oom(err);
    }
    return rc;
}

static int echo_render_error(const api_error_t *e, api_buf_t *out)
{
    return api_buf_printf(out, "error %d %s: %s\n", e->http_status, e->param, e->message);
}

static int echo_begin(api_render_t *r)
{
    if (!(r->state = cairn_calloc(1, sizeof(echo_state_t))))
        return CAIRN_ENOMEM;
    return r->req->stream ? api_buf_printf(&r->out, "begin %s\n", r->id) : 0;
}

static int echo_delta(api_render_t *r, const api_delta_t *d)
{
    echo_state_t *st = r->state;
    switch (d->kind) {
    case API_DELTA_TEXT:
        if (!r->req->stream)
            return api_buf_append(&st->text[d->choice], d->text, d->len);
        int rc = api_buf_printf(&r->out, "delta %d %zu\n", d->choice, d->len);
        rc = rc ? rc : api_buf_append(&r->out, d->text, d->len);
        return rc ? rc : api_buf_append(&r->out, "\n", 1);
    case API_DELTA_REASONING:
    case API_DELTA_TOOL_CALL_BEGIN:
    case API_DELTA_TOOL_CALL_ARGS:
    case API_DELTA_TOOL_CALL_END:
    case API_DELTA_LOGPROBS:
        return CAIRN_EINVAL; /* the echo API's requests never give tools nor ask logprobs */
    }
    return CAIRN_EINVAL;
}

static int echo_end(api_render_t *r, const api_end_t *e)
{
    echo_state_t *st = r->state;
    const char *fin = cairn_finish_reason_name(e->finish[0]);
    if (r->req->stream)
        return api_buf_printf(&r->out, "end %s prompt=%d\n", fin, e->usage.prompt_tokens);
    int rc = api_buf_printf(&r->out, "id=%s finish=%s prompt=%d completion=%d cached=%d tag=%s\n",
                            r->id, fin, e->usage.prompt_tokens, e->usage.completion_tokens,
                            e->usage.cached_tokens,
                            r->req->api_data ? (const char *)r->req->api_data : "-");
    for (int i = 0; !rc && i < r->req->n; i++) {
        rc = api_buf_printf(&r->out, "%zu\n", st->text[i].len);
        rc = rc ? rc : api_buf_append(&r->out, st->text[i].p, st->text[i].len);
        rc = rc ? rc : api_buf_append(&r->out, "\n", 1);
    }
    return rc;
}

static int echo_fail(api_render_t *r, const api_error_t *e)
{
    return api_buf_printf(&r->out, "fail %d %s\n", e->http_status, e->message);
}

static void echo_release(api_render_t *r)
{
    echo_state_t *st = r->state;
    if (!st)
        return;
    for (int i = 0; i < API_MAX_N; i++)
        api_buf_free(&st->text[i]);
    cairn_free(st);
    r->state = NULL;
}

static int echo_render_count(const gen_request_t *req, int n_tokens, api_buf_t *out)
{
    (void)req;
    return api_buf_printf(out, "%d\n", n_tokens);
}

static const api_route_t echo_routes[] = {{"/echo", API_OP_GENERATE, NULL},
                                          {"/echo/count", API_OP_COUNT_TOKENS, NULL}};
static const api_auth_t echo_auth[] = {{"X-Echo-Key", NULL}};

static const api_adapter_t echo_api = {
    .name = "test.echo",
    .routes = echo_routes,
    .n_routes = 2,
    .auth = echo_auth,
    .n_auth = 1,
    .id_prefix = "echo",
    .content_type = "text/plain; charset=utf-8",
    .stream_content_type = "text/plain; charset=utf-8",
    .oom_body = "error 503 : out of memory\n",
    .parse = echo_parse,
    .render_error = echo_render_error,
    .begin = echo_begin,
    .delta = echo_delta,
    .end = echo_end,
    .fail = echo_fail,
    .release = echo_release,
    .render_count = echo_render_count,
};

/* ---- Helpers ------------------------------------------------------------------------- */

static test_server_t g_srv;
static const cairn_api_adapter_t *const g_apis[] = {&echo_api, &api_openai_completions};

static int start(test_server_t *ts, const cairn_api_adapter_t *const *apis, size_t n,
                 const char *keys)
{
    cairn_server_options_t o;
    cairn_server_options_default(&o);
    o.port = 0;
    o.apis = apis;
    o.n_apis = n;
    o.api_keys_file = keys;
    return test_server_start(ts, "qwen3", &o, 32);
}

static int setup(void **state)
{
    signal(SIGPIPE, SIG_IGN);
    return start(&g_srv, g_apis, 2, NULL);
}

static int teardown(void **state)
{
    test_server_stop(&g_srv);
    return 0;
}

static http_resp_t echo(int port, const char *path, const char *headers, const char *body)
{
    http_resp_t r;
    assert_int_equal(http_request(port, "POST", path, headers, body, strlen(body), &r), 0);
    return r;
}

/* The text of choice `idx` of a non-streaming echo body (malloc'd). */
static char *echo_choice(const char *body, int idx)
{
    const char *p = strchr(body, '\n');
    assert_non_null(p);
    p++;
    for (int i = 0;; i++) {
        char *end;
        size_t len = strtoul(p, &end, 10);
        assert_true(end != p && *end == '\n');
        p = end + 1;
        if (i == idx)
            return strndup(p, len);
        p += len + 1;
    }
}

/* The concatenated deltas of choice 0 of an echo stream (malloc'd), read in order: the
 * begin line, then "delta <choice> <len>\n<bytes>\n" records up to the end line. */
static char *echo_stream_text(const char *body)
{
    char *text = calloc(1, strlen(body) + 1);
    size_t n = 0;
    const char *p = strchr(body, '\n');
    assert_non_null(p);
    for (p++; !strncmp(p, "delta ", 6);) {
        int choice, used;
        size_t len;
        assert_int_equal(sscanf(p, "delta %d %zu%n", &choice, &len, &used), 2);
        p += used;
        assert_int_equal(*p, '\n');
        p++;
        if (choice == 0) {
            memcpy(text + n, p, len);
            n += len;
        }
        p += len;
        assert_int_equal(*p, '\n');
        p++;
    }
    assert_int_equal(strncmp(p, "end ", 4), 0);
    return text;
}

static void expect_echo_error(http_resp_t *r, int status, const char *starts)
{
    if (r->status != status)
        fprintf(stderr, "unexpected %d: %s\n", r->status, r->body);
    assert_int_equal(r->status, status);
    assert_non_null(strstr(r->headers, "text/plain"));
    char want[64];
    snprintf(want, sizeof want, "error %d ", status);
    assert_int_equal(strncmp(r->body, want, strlen(want)), 0);
    if (starts)
        assert_int_equal(strncmp(r->body + strlen(want), starts, strlen(starts)), 0);
    http_resp_free(r);
}

/* ---- Tests --------------------------------------------------------------------------- */

static void test_echo_generates_what_completions_generates(void **state)
{
    http_resp_t c;
    const char *oai = "{\"prompt\":\"The cache is\",\"max_tokens\":6,\"temperature\":0}";
    assert_int_equal(http_request(g_srv.port, "POST", "/v1/completions", NULL, oai, strlen(oai), &c), 0);
    assert_int_equal(c.status, 200);
    cJSON *j = http_json(&c);
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    char *want = strdup(cJSON_GetObjectItem(c0, "text")->valuestring);
    int prompt = (int)cJSON_GetNumberValue(
        cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens"));
    cJSON_Delete(j);
    http_resp_free(&c);
    assert_true(strlen(want) > 0);

    http_resp_t r = echo(g_srv.port, "/echo", "X-Echo-Max-Tokens: 6\r\nX-Echo-Tag: t-42\r\n",
                         "The cache is");
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.headers, "text/plain"));
    assert_int_equal(strncmp(r.body, "id=echo-", 8), 0);
    char head[128];
    snprintf(head, sizeof head, "prompt=%d completion=", prompt);
    assert_non_null(strstr(r.body, head));
    assert_non_null(strstr(r.body, " tag=t-42\n")); /* gen_request_t.api_data round trip */
    char *got = echo_choice(r.body, 0);
    assert_string_equal(got, want);
    free(got);
    http_resp_free(&r);

    /* Streamed: begin, deltas that concatenate to the same text, end. */
    r = echo(g_srv.port, "/echo", "X-Echo-Max-Tokens: 6\r\nX-Echo-Stream: 1\r\n", "The cache is");
    assert_int_equal(r.status, 200);
    assert_int_equal(strncmp(r.body, "begin echo-", 11), 0);
    assert_non_null(strstr(r.body, "delta 0 "));
    char tail[64];
    snprintf(tail, sizeof tail, " prompt=%d\n", prompt);
    assert_non_null(strstr(r.body, "\nend "));
    assert_string_equal(r.body + r.body_len - strlen(tail), tail);
    got = echo_stream_text(r.body);
    assert_string_equal(got, want);
    free(got);
    http_resp_free(&r);

    /* Two choices (forked from one prefill), both greedy: the same text each. */
    r = echo(g_srv.port, "/echo", "X-Echo-Max-Tokens: 6\r\nX-Echo-N: 2\r\n", "The cache is");
    assert_int_equal(r.status, 200);
    for (int i = 0; i < 2; i++) {
        got = echo_choice(r.body, i);
        assert_string_equal(got, want);
        free(got);
    }
    http_resp_free(&r);

    /* The count route: the tokenizer's count, no generation. */
    int32_t *ids;
    size_t n;
    assert_int_equal(cairn_tokenizer_encode(g_srv.tok, "The cache is", 12, true, &ids, &n), 0);
    cairn_free(ids);
    assert_int_equal((int)n, prompt);
    r = echo(g_srv.port, "/echo/count", NULL, "The cache is");
    assert_int_equal(r.status, 200);
    assert_int_equal(atoi(r.body), prompt);
    http_resp_free(&r);
    free(want);
}

static void test_errors_take_each_api_shape(void **state)
{
    http_resp_t r;
    /* Found by the server (empty prompt, context), rendered by echo, naming echo's fields. */
    r = echo(g_srv.port, "/echo", NULL, "");
    expect_echo_error(&r, 400, "body: The prompt is empty");
    r = echo(g_srv.port, "/echo", "X-Echo-Max-Tokens: 99999\r\n", "hi");
    expect_echo_error(&r, 400, "X-Echo-Max-Tokens: This model's maximum context length");
    /* Found by echo's parser. */
    assert_int_equal(http_request(g_srv.port, "POST", "/echo", NULL, "\xff", 1, &r), 0);
    expect_echo_error(&r, 400, "body: the body is not UTF-8");
    /* Method and unknown routes: the first adapter of the list renders them. */
    assert_int_equal(http_request(g_srv.port, "GET", "/echo", NULL, NULL, 0, &r), 0);
    assert_non_null(strstr(r.headers, "Allow: POST"));
    expect_echo_error(&r, 405, NULL);
    assert_int_equal(http_request(g_srv.port, "GET", "/nowhere", NULL, NULL, 0, &r), 0);
    expect_echo_error(&r, 404, NULL);
    /* Routes of APIs not in the list do not exist... */
    r = echo(g_srv.port, "/v1/chat/completions", NULL, "{}");
    expect_echo_error(&r, 404, NULL);
    assert_int_equal(http_request(g_srv.port, "GET", "/v1/models", NULL, NULL, 0, &r), 0);
    expect_echo_error(&r, 404, NULL);
    /* ...and the OpenAI adapter beside echo keeps OpenAI's shape. */
    r = echo(g_srv.port, "/v1/completions", NULL, "{\"prompt\":\"x\",\"frobnicate\":1}");
    assert_int_equal(r.status, 400);
    cJSON *j = http_json(&r);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "code")->valuestring,
                        "unknown_parameter");
    cJSON_Delete(j);
    http_resp_free(&r);
}

static void test_key_header_is_the_adapters(void **state)
{
    char keys[256];
    snprintf(keys, sizeof keys, "%s/test_http_api_adapter_keys.%d", CAIRN_BINARY_DIR, (int)getpid());
    FILE *f = fopen(keys, "w");
    assert_non_null(f);
    fputs("key-alpha\n", f);
    fclose(f);
    test_server_t ts;
    const cairn_api_adapter_t *const apis[] = {&echo_api};
    assert_int_equal(start(&ts, apis, 1, keys), 0);
    http_resp_t r = echo(ts.port, "/echo", "X-Echo-Key: key-alpha\r\nX-Echo-Max-Tokens: 2\r\n", "hi");
    assert_int_equal(r.status, 200);
    http_resp_free(&r);
    r = echo(ts.port, "/echo", "Authorization: Bearer key-alpha\r\n", "hi");
    assert_null(strstr(r.headers, "WWW-Authenticate")); /* echo's key has no scheme */
    expect_echo_error(&r, 401, ": Incorrect or missing API key (send X-Echo-Key: KEY)");
    r = echo(ts.port, "/echo/count", "X-Echo-Key: key-beta\r\n", "hi");
    expect_echo_error(&r, 401, NULL);
    r = echo(ts.port, "/echo/count", "X-Echo-Key:   key-alpha  \r\n", "hi");
    assert_int_equal(r.status, 200);
    http_resp_free(&r);
    test_server_stop(&ts);
    unlink(keys);
}

typedef struct {
    int fd;
    char *data;
    size_t len;
} reader_t;

static void *read_to_eof(void *arg)
{
    reader_t *rd = arg;
    size_t cap = 1 << 16;
    rd->data = malloc(cap);
    for (;;) {
        if (rd->len + 4096 > cap)
            rd->data = realloc(rd->data, cap *= 2);
        ssize_t n = recv(rd->fd, rd->data + rd->len, cap - rd->len - 1, 0);
        if (n <= 0)
            break;
        rd->len += (size_t)n;
    }
    rd->data[rd->len] = '\0';
    return NULL;
}

static void test_canceled_stream_ends_with_fail(void **state)
{
    test_server_t ts;
    const cairn_api_adapter_t *const apis[] = {&echo_api};
    assert_int_equal(start(&ts, apis, 1, NULL), 0);
    const char *body = "go";
    int fd = http_send(ts.port, "POST", "/echo",
                       "X-Echo-Stream: 1\r\nX-Echo-Ignore-Eos: 1\r\nX-Echo-Max-Tokens: 8000\r\n",
                       body, strlen(body));
    assert_true(fd >= 0);
    int found = 0;
    http_read_until(fd, "delta 0 ", 10000, &found);
    assert_true(found);
    reader_t rd = {fd, NULL, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, read_to_eof, &rd), 0);
    cairn_server_destroy(ts.srv, 0); /* cancels the stream: its final event is an error */
    ts.srv = NULL;
    pthread_join(th, NULL);
    close(fd);
    assert_non_null(strstr(rd.data, "fail 503 The request was canceled"));
    assert_null(strstr(rd.data, "\nend "));
    free(rd.data);
    test_server_stop(&ts);
}

static int incomplete_parse(const api_input_t *in, gen_request_t *r, api_error_t *err)
{
    return echo_parse(in, r, err);
}

static void test_adapter_list_is_checked(void **state)
{
    test_server_t ts;
    const cairn_api_adapter_t *const twice[] = {&echo_api, &echo_api};
    assert_int_equal(start(&ts, twice, 2, NULL), CAIRN_EINVAL);

    api_adapter_t broken = echo_api;
    broken.parse = incomplete_parse;
    broken.render_count = NULL; /* /echo/count could not be answered */
    const cairn_api_adapter_t *const one[] = {&broken};
    assert_int_equal(start(&ts, one, 1, NULL), CAIRN_EINVAL);

    static const api_route_t health[] = {{"/health", API_OP_GENERATE, NULL}};
    api_adapter_t squatter = echo_api;
    squatter.routes = health;
    squatter.n_routes = 1;
    const cairn_api_adapter_t *const sq[] = {&squatter};
    assert_int_equal(start(&ts, sq, 1, NULL), CAIRN_EINVAL);

    /* A path shared by two routes needs a header to tell them apart, distinct ones. */
    static const api_route_t when_a[] = {{"/echo", API_OP_GENERATE, "x-a"}};
    static const api_route_t when_a2[] = {{"/echo", API_OP_GENERATE, "X-A"}};
    api_adapter_t cond = echo_api, cond2 = echo_api;
    cond.routes = when_a;
    cond.n_routes = 1;
    cond2.routes = when_a2;
    cond2.n_routes = 1;
    const cairn_api_adapter_t *const shared_ok[] = {&echo_api, &cond};
    assert_int_equal(start(&ts, shared_ok, 2, NULL), 0);
    test_server_stop(&ts);
    const cairn_api_adapter_t *const shared_bad[] = {&echo_api, &cond, &cond2};
    assert_int_equal(start(&ts, shared_bad, 3, NULL), CAIRN_EINVAL);

    cairn_server_options_t o;
    cairn_server_options_default(&o);
    o.port = 0;
    o.n_apis = 1; /* and no list */
    assert_int_equal(test_server_start(&ts, "qwen3", &o, 32), CAIRN_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_echo_generates_what_completions_generates),
        cmocka_unit_test(test_errors_take_each_api_shape),
        cmocka_unit_test(test_key_header_is_the_adapters),
        cmocka_unit_test(test_canceled_stream_ends_with_fail),
        cmocka_unit_test(test_adapter_list_is_checked),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
