/*
 * test_http.c — the HTTP server end to end over loopback: an in-process server on an
 * ephemeral port over the qwen3 fixture (ChatML template), every route, streaming and
 * not, and every error status the API promises (docs/API.md).
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "http_test_util.h"

static test_server_t g_srv;
static char g_log[256];

#define SYS_PROMPT                                                                         \
    "You are a careful assistant for the Cairn project. Answer briefly, cite the design "  \
    "document where you can, and never invent configuration options that do not exist."

static int setup(void **state)
{
    signal(SIGPIPE, SIG_IGN);
    snprintf(g_log, sizeof g_log, "%s/test_http_requests.%d.jsonl", CAIRN_BINARY_DIR, (int)getpid());
    unlink(g_log);
    cairn_server_options_t o;
    cairn_server_options_default(&o);
    o.port = 0;
    o.max_body_bytes = 65536;
    o.request_log_path = g_log;
    return test_server_start(&g_srv, "qwen3", &o, 64);
}

static int teardown(void **state)
{
    test_server_stop(&g_srv);
    unlink(g_log);
    return 0;
}

static http_resp_t post(const char *path, const char *body)
{
    http_resp_t r;
    assert_int_equal(http_request(g_srv.port, "POST", path, NULL, body, strlen(body), &r), 0);
    return r;
}

/* Asserts an OpenAI-shaped error with status and (if non-NULL) param/code. */
static void expect_error(http_resp_t *r, int status, const char *param, const char *code)
{
    if (r->status != status)
        fprintf(stderr, "unexpected %d: %s\n", r->status, r->body);
    assert_int_equal(r->status, status);
    cJSON *j = http_json(r);
    assert_non_null(j);
    cJSON *e = cJSON_GetObjectItem(j, "error");
    assert_true(cJSON_IsObject(e));
    assert_true(cJSON_IsString(cJSON_GetObjectItem(e, "message")));
    assert_true(cJSON_IsString(cJSON_GetObjectItem(e, "type")));
    assert_non_null(cJSON_GetObjectItem(e, "param"));
    assert_non_null(cJSON_GetObjectItem(e, "code"));
    if (param)
        assert_string_equal(cJSON_GetObjectItem(e, "param")->valuestring, param);
    if (code)
        assert_string_equal(cJSON_GetObjectItem(e, "code")->valuestring, code);
    cJSON_Delete(j);
    http_resp_free(r);
}

static char *chat_text(cJSON *j, int idx)
{
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), idx);
    return cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "content")->valuestring;
}

static int usage_field(cJSON *j, const char *f)
{
    cJSON *u = cJSON_GetObjectItem(j, "usage");
    if (!strcmp(f, "cached_tokens"))
        u = cJSON_GetObjectItem(u, "prompt_tokens_details");
    return (int)cJSON_GetNumberValue(cJSON_GetObjectItem(u, f));
}

static void test_health_models_metrics(void **state)
{
    http_resp_t r;
    assert_int_equal(http_request(g_srv.port, "GET", "/health", NULL, NULL, 0, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"ok\""));
    http_resp_free(&r);

    assert_int_equal(http_request(g_srv.port, "GET", "/v1/models", NULL, NULL, 0, &r), 0);
    assert_int_equal(r.status, 200);
    cJSON *j = http_json(&r);
    assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "list");
    cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 0);
    assert_string_equal(cJSON_GetObjectItem(m, "id")->valuestring, "qwen3");
    assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(m, "max_model_len")), 8192);
    cJSON_Delete(j);
    http_resp_free(&r);

    assert_int_equal(http_request(g_srv.port, "GET", "/v1/models/qwen3", NULL, NULL, 0, &r), 0);
    assert_int_equal(r.status, 200);
    http_resp_free(&r);
    assert_int_equal(http_request(g_srv.port, "GET", "/v1/models/gpt-9", NULL, NULL, 0, &r), 0);
    expect_error(&r, 404, "model", "model_not_found");

    assert_int_equal(http_request(g_srv.port, "GET", "/metrics", NULL, NULL, 0, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.headers, "text/plain"));
    assert_true(metrics_value(r.body, "cairn_pool_blocks_total") > 0);
    assert_true(metrics_value(r.body, "cairn_pool_block_bytes") > 0);
    assert_true(metrics_value(r.body, "cairn_pool_blocks_cached") + metrics_value(r.body, "cairn_pool_blocks_free") +
                    metrics_value(r.body, "cairn_pool_blocks_used") ==
                metrics_value(r.body, "cairn_pool_blocks_total"));
    assert_true(metrics_value(r.body, "cairn_cold_write_errors_total") >= 0);
    assert_true(metrics_value(r.body, "cairn_cold_queue_drops_total") >= 0);
    assert_true(metrics_value(r.body, "cairn_queue_depth") >= 0);
    assert_non_null(strstr(r.body, "cairn_ttft_seconds_bucket{le=\"+Inf\"}"));
    assert_non_null(strstr(r.body, "cairn_time_per_output_token_seconds_count"));
    assert_non_null(strstr(r.body, "cairn_cache_hit_tokens_total{tier=\"cold\"}"));
    http_resp_free(&r);
}

static void test_chat_nonstream_and_stream_agree(void **state)
{
    const char *body = "{\"model\":\"qwen3\",\"messages\":[{\"role\":\"system\",\"content\":\"" SYS_PROMPT
                       "\"},{\"role\":\"user\",\"content\":\"Hello there\"}],"
                       "\"max_tokens\":12,\"temperature\":0}";
    http_resp_t r = post("/v1/chat/completions", body);
    assert_int_equal(r.status, 200);
    cJSON *j = http_json(&r);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "chat.completion");
    assert_non_null(strstr(cJSON_GetObjectItem(j, "id")->valuestring, "chatcmpl-"));
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    assert_string_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "message"), "role")->valuestring, "assistant");
    char *full = strdup(chat_text(j, 0));
    char fin[16];
    snprintf(fin, sizeof fin, "%s", cJSON_GetObjectItem(c0, "finish_reason")->valuestring);
    assert_true(!strcmp(fin, "length") || !strcmp(fin, "stop"));
    int prompt_tokens = usage_field(j, "prompt_tokens");
    assert_true(prompt_tokens > 40);
    assert_true(usage_field(j, "completion_tokens") >= 1 && usage_field(j, "completion_tokens") <= 12);
    assert_int_equal(usage_field(j, "total_tokens"),
                     prompt_tokens + usage_field(j, "completion_tokens"));
    cJSON_Delete(j);
    http_resp_free(&r);

    /* The same request again reuses the whole-block prefix of the prompt. */
    r = post("/v1/chat/completions", body);
    j = http_json(&r);
    assert_string_equal(chat_text(j, 0), full);
    int cached = usage_field(j, "cached_tokens");
    assert_true(cached >= 16);
    assert_true(cached < prompt_tokens);
    cJSON_Delete(j);
    http_resp_free(&r);

    /* Streaming produces the same text, a role chunk, usage and [DONE]. */
    const char *sbody = "{\"model\":\"qwen3\",\"messages\":[{\"role\":\"system\",\"content\":\"" SYS_PROMPT
                        "\"},{\"role\":\"user\",\"content\":\"Hello there\"}],"
                        "\"max_tokens\":12,\"temperature\":0,\"stream\":true,"
                        "\"stream_options\":{\"include_usage\":true}}";
    r = post("/v1/chat/completions", sbody);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.headers, "text/event-stream"));
    assert_non_null(strstr(r.body, "\"role\":\"assistant\""));
    assert_non_null(strstr(r.body, "chat.completion.chunk"));
    int n_ev, done;
    char finish[32];
    cJSON *usage;
    char *text = sse_collect(r.body, &n_ev, finish, sizeof finish, &usage, &done);
    assert_string_equal(text, full);
    assert_true(done);
    assert_string_equal(finish, fin);
    assert_non_null(usage);
    assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(usage, "prompt_tokens")),
                     prompt_tokens);
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(
                    cJSON_GetObjectItem(usage, "prompt_tokens_details"), "cached_tokens")) >= 16);
    /* Every chunk but the usage one carries "usage": null. */
    assert_non_null(strstr(r.body, "\"usage\":null"));
    assert_true(strstr(r.body, "data: [DONE]\n\n") == r.body + r.body_len - 14);
    cJSON_Delete(usage);
    free(text);
    http_resp_free(&r);
    free(full);
}

static void test_cache_salt_isolates(void **state)
{
    const char *a = "{\"messages\":[{\"role\":\"system\",\"content\":\"" SYS_PROMPT " Salted.\"},"
                    "{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,\"temperature\":0,"
                    "\"cache_salt\":\"tenant-a\"}";
    const char *b = "{\"messages\":[{\"role\":\"system\",\"content\":\"" SYS_PROMPT " Salted.\"},"
                    "{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,\"temperature\":0,"
                    "\"cache_salt\":\"tenant-b\"}";
    http_resp_t r = post("/v1/chat/completions", a);
    cJSON *j = http_json(&r);
    assert_int_equal(usage_field(j, "cached_tokens"), 0);
    cJSON_Delete(j);
    http_resp_free(&r);
    r = post("/v1/chat/completions", b);
    j = http_json(&r);
    assert_int_equal(usage_field(j, "cached_tokens"), 0); /* other domain: no hit */
    cJSON_Delete(j);
    http_resp_free(&r);
    r = post("/v1/chat/completions", a);
    j = http_json(&r);
    assert_true(usage_field(j, "cached_tokens") > 0);
    cJSON_Delete(j);
    http_resp_free(&r);
}

static void test_completions(void **state)
{
    http_resp_t r = post("/v1/completions",
                         "{\"prompt\":\"The cache is\",\"max_tokens\":6,\"temperature\":0}");
    assert_int_equal(r.status, 200);
    cJSON *j = http_json(&r);
    assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "text_completion");
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    char *text = strdup(cJSON_GetObjectItem(c0, "text")->valuestring);
    int pt = usage_field(j, "prompt_tokens");
    cJSON_Delete(j);
    http_resp_free(&r);

    /* The same prompt as token ids gives the same text. */
    int32_t *ids;
    size_t n;
    assert_int_equal(cairn_tokenizer_encode(g_srv.tok, "The cache is", 12, true, &ids, &n), 0);
    assert_int_equal((int)n, pt);
    char body[512];
    int o = snprintf(body, sizeof body, "{\"prompt\":[");
    for (size_t i = 0; i < n; i++)
        o += snprintf(body + o, sizeof body - (size_t)o, "%s%d", i ? "," : "", ids[i]);
    snprintf(body + o, sizeof body - (size_t)o, "],\"max_tokens\":6,\"temperature\":0}");
    cairn_free(ids);
    r = post("/v1/completions", body);
    j = http_json(&r);
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    assert_string_equal(cJSON_GetObjectItem(c0, "text")->valuestring, text);
    cJSON_Delete(j);
    http_resp_free(&r);

    /* Streaming. */
    r = post("/v1/completions",
             "{\"prompt\":\"The cache is\",\"max_tokens\":6,\"temperature\":0,\"stream\":true}");
    assert_int_equal(r.status, 200);
    int n_ev, done;
    char finish[32];
    char *st = sse_collect(r.body, &n_ev, finish, sizeof finish, NULL, &done);
    assert_string_equal(st, text);
    assert_true(done);
    assert_non_null(strstr(r.body, "\"object\":\"text_completion\""));
    assert_null(strstr(r.body, "\"usage\"")); /* not asked for */
    free(st);
    http_resp_free(&r);

    /* A stop string cuts the text before it and finishes with "stop". */
    if (strlen(text) >= 4) {
        char stop[8];
        memcpy(stop, text + 2, 2);
        stop[2] = '\0';
        cJSON *sj = cJSON_CreateString(stop);
        char *esc = cJSON_PrintUnformatted(sj);
        cJSON_Delete(sj);
        snprintf(body, sizeof body,
                 "{\"prompt\":\"The cache is\",\"max_tokens\":6,\"temperature\":0,\"stop\":[%s]}", esc);
        cJSON_free(esc);
        r = post("/v1/completions", body);
        j = http_json(&r);
        c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        const char *cut = cJSON_GetObjectItem(c0, "text")->valuestring;
        assert_string_equal(cJSON_GetObjectItem(c0, "finish_reason")->valuestring, "stop");
        assert_null(strstr(cut, stop));
        assert_int_equal(strncmp(text, cut, strlen(cut)), 0);
        cJSON_Delete(j);
        http_resp_free(&r);
    }
    free(text);
}

static void test_n_choices_and_seed(void **state)
{
    http_resp_t r = post("/v1/chat/completions",
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"pick\"}],\"n\":3,"
                         "\"max_tokens\":5,\"temperature\":0.9,\"seed\":7}");
    if (r.status == 400) { /* a scheduler that refuses n > 1 must say so on "n" */
        expect_error(&r, 400, "n", NULL);
        return;
    }
    assert_int_equal(r.status, 200);
    cJSON *j = http_json(&r);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")), 3);
    for (int i = 0; i < 3; i++) {
        cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), i);
        assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(c, "index")), i);
    }
    char *first = strdup(r.body);
    cJSON_Delete(j);
    http_resp_free(&r);
    /* Same seed, same choices (the id and created differ). */
    r = post("/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"pick\"}],\"n\":3,"
             "\"max_tokens\":5,\"temperature\":0.9,\"seed\":7}");
    cJSON *fj = cJSON_Parse(first);
    j = http_json(&r);
    char *pa = cJSON_PrintUnformatted(cJSON_GetObjectItem(fj, "choices"));
    char *pb = cJSON_PrintUnformatted(cJSON_GetObjectItem(j, "choices"));
    assert_string_equal(pa, pb);
    free(pa);
    free(pb);
    cJSON_Delete(j);
    cJSON_Delete(fj);
    free(first);
    http_resp_free(&r);
}

static void test_request_errors(void **state)
{
    http_resp_t r;
    r = post("/v1/chat/completions", "{\"messages\": [");
    expect_error(&r, 400, NULL, NULL);
    r = post("/v1/chat/completions", "[1,2]");
    expect_error(&r, 400, NULL, NULL);
    r = post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]} x");
    expect_error(&r, 400, NULL, NULL);
    r = post("/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"hot\"}");
    expect_error(&r, 400, "temperature", NULL);
    r = post("/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1.5}");
    expect_error(&r, 400, "max_tokens", NULL);
    r = post("/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":1.5}");
    expect_error(&r, 400, NULL, NULL);
    r = post("/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"frobnicate\":true}");
    expect_error(&r, 400, "frobnicate", "unknown_parameter");
    r = post("/v1/completions", "{\"prompt\":\"x\",\"messages\":[]}");
    expect_error(&r, 400, "messages", "unknown_parameter");
    r = post("/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}");
    expect_error(&r, 400, "response_format", "unsupported_parameter");
    r = post("/v1/chat/completions", "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}");
    expect_error(&r, 400, "messages[0]", NULL);
    r = post("/v1/chat/completions", "{\"max_tokens\":3}");
    expect_error(&r, 400, "messages", NULL);
    r = post("/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"\"]}");
    expect_error(&r, 400, "stop", NULL);
    r = post("/v1/chat/completions",
             "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}");
    expect_error(&r, 404, "model", "model_not_found");
    r = post("/v1/completions", "{\"prompt\":[1,2,999999]}");
    expect_error(&r, 400, "prompt", NULL);
    r = post("/v1/completions", "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}");
    expect_error(&r, 400, "stream_options", NULL);

    /* Invalid UTF-8 inside a JSON string. */
    const char bad[] = "{\"prompt\":\"caf\xc3\x28\"}";
    assert_int_equal(http_request(g_srv.port, "POST", "/v1/completions", NULL, bad, sizeof bad - 1, &r), 0);
    expect_error(&r, 400, NULL, NULL);

    /* cache_salt over 256 bytes. */
    char body[1024];
    char salt[301];
    memset(salt, 's', 300);
    salt[300] = '\0';
    snprintf(body, sizeof body, "{\"prompt\":\"x\",\"cache_salt\":\"%s\"}", salt);
    r = post("/v1/completions", body);
    expect_error(&r, 400, "cache_salt", NULL);

    /* A prompt longer than the context (8192 tokens). */
    size_t cap = 9000 * 4 + 64;
    char *big = malloc(cap);
    int o = snprintf(big, cap, "{\"prompt\":[");
    for (int i = 0; i < 8300; i++)
        o += snprintf(big + o, cap - (size_t)o, "%s5", i ? "," : "");
    snprintf(big + o, cap - (size_t)o, "],\"max_tokens\":4}");
    r = post("/v1/completions", big);
    expect_error(&r, 400, NULL, "context_length_exceeded");
    free(big);

    /* A body over --max-body-bytes (65536 here). */
    size_t n = 70000;
    char *huge = malloc(n + 1);
    memset(huge, ' ', n);
    memcpy(huge, "{\"prompt\":\"", 11);
    huge[n - 2] = '"';
    huge[n - 1] = '}';
    huge[n] = '\0';
    assert_int_equal(http_request(g_srv.port, "POST", "/v1/completions", NULL, huge, n, &r), 0);
    expect_error(&r, 413, NULL, "request_too_large");
    free(huge);
}

static void test_route_errors(void **state)
{
    http_resp_t r;
    assert_int_equal(http_request(g_srv.port, "GET", "/v2/everything", NULL, NULL, 0, &r), 0);
    expect_error(&r, 404, NULL, "not_found");
    assert_int_equal(http_request(g_srv.port, "GET", "/v1/chat/completions", NULL, NULL, 0, &r), 0);
    assert_non_null(strstr(r.headers, "Allow: POST"));
    expect_error(&r, 405, NULL, "method_not_allowed");
    assert_int_equal(http_request(g_srv.port, "DELETE", "/v1/models", NULL, NULL, 0, &r), 0);
    expect_error(&r, 405, NULL, "method_not_allowed");
}

static void test_request_log(void **state)
{
    http_resp_t r = post("/v1/completions", "{\"prompt\":\"log me\",\"max_tokens\":3}");
    assert_int_equal(r.status, 200);
    cJSON *j = http_json(&r);
    char id[64];
    snprintf(id, sizeof id, "%s", cJSON_GetObjectItem(j, "id")->valuestring);
    cJSON_Delete(j);
    http_resp_free(&r);
    /* The line is written when MHD reports completion, just after the response. */
    cJSON *line = NULL;
    for (int tries = 0; tries < 100 && !line; tries++) {
        FILE *f = fopen(g_log, "r");
        assert_non_null(f);
        char buf[4096];
        while (fgets(buf, sizeof buf, f))
            if (strstr(buf, id)) {
                line = cJSON_Parse(buf);
                break;
            }
        fclose(f);
        if (!line)
            usleep(10000);
    }
    assert_non_null(line);
    assert_string_equal(cJSON_GetObjectItem(line, "domain")->valuestring, "default");
    assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(line, "status")), 200);
    assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(line, "completion_tokens")), 3);
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(line, "prompt_tokens")) >= 1);
    assert_non_null(cJSON_GetObjectItem(line, "cached_tokens"));
    assert_non_null(cJSON_GetObjectItem(line, "restored_tokens"));
    assert_non_null(cJSON_GetObjectItem(line, "miss_reason"));
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(line, "ttft_ms")) > 0);
    assert_non_null(cJSON_GetObjectItem(line, "decode_tps"));
    assert_string_equal(cJSON_GetObjectItem(line, "finish_reason")->valuestring, "length");
    cJSON_Delete(line);
}

/* A second server: API keys, 401, and per-key domains. */
static void test_api_keys(void **state)
{
    char keys[256];
    snprintf(keys, sizeof keys, "%s/test_http_keys.%d", CAIRN_BINARY_DIR, (int)getpid());
    FILE *f = fopen(keys, "w");
    assert_non_null(f);
    fputs("# tenants\nkey-alpha\n  key-beta  \n\n", f);
    fclose(f);
    cairn_server_options_t o;
    cairn_server_options_default(&o);
    o.port = 0;
    o.api_keys_file = keys;
    test_server_t ts;
    assert_int_equal(test_server_start(&ts, "qwen3", &o, 32), 0);
    const char *body = "{\"messages\":[{\"role\":\"system\",\"content\":\"" SYS_PROMPT
                       " Keys.\"},{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,"
                       "\"temperature\":0}";
    http_resp_t r;
    assert_int_equal(http_request(ts.port, "POST", "/v1/chat/completions", NULL, body, strlen(body), &r), 0);
    assert_non_null(strstr(r.headers, "WWW-Authenticate"));
    expect_error(&r, 401, NULL, "invalid_api_key");
    assert_int_equal(http_request(ts.port, "POST", "/v1/chat/completions",
                                  "Authorization: Bearer key-gamma\r\n", body, strlen(body), &r), 0);
    expect_error(&r, 401, NULL, "invalid_api_key");
    assert_int_equal(http_request(ts.port, "GET", "/v1/models", NULL, NULL, 0, &r), 0);
    expect_error(&r, 401, NULL, NULL);
    assert_int_equal(http_request(ts.port, "GET", "/health", NULL, NULL, 0, &r), 0);
    assert_int_equal(r.status, 200);
    http_resp_free(&r);

    const char *ha = "Authorization: Bearer key-alpha\r\n", *hb = "Authorization: Bearer key-beta\r\n";
    int cached[4];
    const char *order[4] = {ha, hb, ha, hb};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(http_request(ts.port, "POST", "/v1/chat/completions", order[i], body,
                                      strlen(body), &r), 0);
        assert_int_equal(r.status, 200);
        cJSON *j = http_json(&r);
        cached[i] = usage_field(j, "cached_tokens");
        cJSON_Delete(j);
        http_resp_free(&r);
    }
    assert_int_equal(cached[0], 0);
    assert_int_equal(cached[1], 0); /* beta never sees alpha's blocks */
    assert_true(cached[2] > 0);
    assert_true(cached[3] > 0);

    /* The same tenancy on the Anthropic route: x-api-key names the tenant, and alpha's
     * prompt (the same rendering) is cached there too; an unknown key is a 401 in
     * Anthropic's shape. */
    const char *ant = "{\"model\":\"qwen3\",\"system\":\"" SYS_PROMPT " Keys.\",\"messages\":"
                      "[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,\"temperature\":0}";
    assert_int_equal(http_request(ts.port, "POST", "/v1/messages", "x-api-key: key-alpha\r\n", ant,
                                  strlen(ant), &r), 0);
    assert_int_equal(r.status, 200);
    cJSON *aj = http_json(&r);
    assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(aj, "usage"),
                                                                   "cache_read_input_tokens")),
                     cached[2]);
    cJSON_Delete(aj);
    http_resp_free(&r);
    assert_int_equal(http_request(ts.port, "POST", "/v1/messages", "x-api-key: key-gamma\r\n", ant,
                                  strlen(ant), &r), 0);
    assert_int_equal(r.status, 401);
    assert_non_null(strstr(r.body, "\"authentication_error\""));
    http_resp_free(&r);

    /* A client salt cannot reach another tenant: beta naming alpha's digest as salt misses. */
    const char *salted = "{\"messages\":[{\"role\":\"system\",\"content\":\"" SYS_PROMPT
                         " Keys.\"},{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,"
                         "\"temperature\":0,\"cache_salt\":\"\"}";
    assert_int_equal(http_request(ts.port, "POST", "/v1/chat/completions", hb, salted,
                                  strlen(salted), &r), 0);
    cJSON *j = http_json(&r);
    assert_int_equal(usage_field(j, "cached_tokens"), 0);
    cJSON_Delete(j);
    http_resp_free(&r);
    test_server_stop(&ts);
    unlink(keys);
}

/* A third server with one running slot and one queue slot: the third request gets 429. */
static void test_queue_full(void **state)
{
    cairn_server_options_t o;
    cairn_server_options_default(&o);
    o.port = 0;
    o.sched.max_running = 1;
    o.sched.max_queued = 1;
    test_server_t ts;
    assert_int_equal(test_server_start(&ts, "qwen3", &o, 32), 0);
    const char *longreq = "{\"prompt\":\"go\",\"max_tokens\":8000,\"ignore_eos\":true,"
                          "\"temperature\":0,\"stream\":true}";
    /* One request runs, then a second waits in the queue (it has no response headers yet:
     * they go out when it runs); each is sent only once the previous one is where it
     * should be: two arriving before the first is admitted would make the second the 429. */
    int fds[2];
    cairn_sched_stats_t st;
    memset(&st, 0, sizeof st);
    for (int i = 0; i < 2; i++) {
        fds[i] = http_send(ts.port, "POST", "/v1/completions", NULL, longreq, strlen(longreq));
        assert_true(fds[i] >= 0);
        for (int k = 0; k < 2500; k++) {
            cairn_sched_stats(cairn_server_sched(ts.srv), &st);
            if (i == 0 ? st.running == 1 : st.queued == 1)
                break;
            usleep(2000);
        }
        if (i == 0)
            assert_int_equal(st.running, 1);
        else
            assert_int_equal(st.queued, 1);
    }
    http_resp_t r;
    assert_int_equal(http_request(ts.port, "POST", "/v1/completions", NULL,
                                  "{\"prompt\":\"x\",\"max_tokens\":1}", 30, &r), 0);
    expect_error(&r, 429, NULL, "queue_full");
    close(fds[0]);
    close(fds[1]);
    test_server_stop(&ts);
}

/* An assistant prefill is continued: Anthropic's final assistant turn and chat's
 * continue_final_message give exactly what the raw ChatML prompt ending in the prefill
 * gives through /v1/completions (greedy). */
static void test_prefill_continues(void **state)
{
    http_resp_t r = post("/v1/completions",
                         "{\"prompt\":\"<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\nSure\","
                         "\"max_tokens\":6,\"temperature\":0,\"ignore_eos\":true}");
    assert_int_equal(r.status, 200);
    cJSON *j = http_json(&r);
    char *want = strdup(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0),
                                            "text")->valuestring);
    int want_prompt = usage_field(j, "prompt_tokens");
    cJSON_Delete(j);
    http_resp_free(&r);

    r = post("/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\","
             "\"content\":\"Sure\"}],\"continue_final_message\":true,\"add_generation_prompt\":false,"
             "\"max_tokens\":6,\"temperature\":0,\"ignore_eos\":true}");
    assert_int_equal(r.status, 200);
    j = http_json(&r);
    assert_string_equal(chat_text(j, 0), want);
    assert_int_equal(usage_field(j, "prompt_tokens"), want_prompt);
    cJSON_Delete(j);
    http_resp_free(&r);

    r = post("/v1/messages",
             "{\"model\":\"qwen3\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},"
             "{\"role\":\"assistant\",\"content\":\"Sure\"}],\"max_tokens\":6,\"temperature\":0,"
             "\"ignore_eos\":true}");
    assert_int_equal(r.status, 200);
    j = http_json(&r);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "content"), 0),
                                            "text")->valuestring, want);
    cJSON_Delete(j);
    http_resp_free(&r);
    free(want);
}

/* A pool smaller than one context: /v1/models reports what it holds, a request past it
 * is a 400 naming the pool, and a request without max_tokens stops at that limit instead
 * of outgrowing the pool. */
static void test_pool_limits_model_len(void **state)
{
    test_server_t ts;
    assert_int_equal(test_server_start(&ts, "qwen3", NULL, 1), 0);
    int len = cairn_server_max_model_len(ts.srv);
    cairn_sched_stats_t st;
    cairn_sched_stats(cairn_server_sched(ts.srv), &st);
    assert_int_equal(len, (int)st.pool_blocks_total * 16);
    assert_true(len < 8192);
    http_resp_t r;
    assert_int_equal(http_request(ts.port, "GET", "/v1/models", NULL, NULL, 0, &r), 0);
    cJSON *j = http_json(&r);
    cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 0);
    assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(m, "max_model_len")), len);
    cJSON_Delete(j);
    http_resp_free(&r);

    char body[512];
    snprintf(body, sizeof body, "{\"prompt\":\"go\",\"max_tokens\":%d}", len);
    assert_int_equal(http_request(ts.port, "POST", "/v1/completions", NULL, body, strlen(body), &r), 0);
    assert_non_null(strstr(r.body, "KV pool"));
    expect_error(&r, 400, "max_tokens", "context_length_exceeded");

    const char *open = "{\"messages\":[{\"role\":\"user\",\"content\":\"go\"}],"
                       "\"ignore_eos\":true,\"temperature\":0}";
    assert_int_equal(http_request(ts.port, "POST", "/v1/chat/completions", NULL, open, strlen(open), &r), 0);
    assert_int_equal(r.status, 200);
    j = http_json(&r);
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    assert_string_equal(cJSON_GetObjectItem(c0, "finish_reason")->valuestring, "length");
    assert_int_equal(usage_field(j, "prompt_tokens") + usage_field(j, "completion_tokens"), len);
    cJSON_Delete(j);
    http_resp_free(&r);

    /* Anthropic's max_tokens is a bound its clients send whatever the model (Claude Code:
     * 32000): past the limit, the output stops there instead of a 400. */
    snprintf(body, sizeof body, "{\"model\":\"qwen3\",\"max_tokens\":32000,\"ignore_eos\":true,"
             "\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":\"go\"}]}");
    assert_int_equal(http_request(ts.port, "POST", "/v1/messages", NULL, body, strlen(body), &r), 0);
    assert_int_equal(r.status, 200);
    j = http_json(&r);
    assert_string_equal(cJSON_GetObjectItem(j, "stop_reason")->valuestring, "max_tokens");
    cJSON *u = cJSON_GetObjectItem(j, "usage");
    assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(u, "input_tokens"))
                         + (int)cJSON_GetNumberValue(cJSON_GetObjectItem(u, "cache_read_input_tokens"))
                         + (int)cJSON_GetNumberValue(cJSON_GetObjectItem(u, "output_tokens")),
                     len);
    cJSON_Delete(j);
    http_resp_free(&r);
    /* A prompt past the limit is still a 400 naming it. */
    const char *head = "{\"model\":\"qwen3\",\"max_tokens\":1,\"messages\":"
                       "[{\"role\":\"user\",\"content\":\"";
    size_t hl = strlen(head), bl = hl + 3 * (size_t)len + 4;
    char *big = malloc(bl + 1);
    assert_non_null(big);
    memcpy(big, head, hl);
    for (int i = 0; i < len; i++)
        memcpy(big + hl + 3 * (size_t)i, " go", 3);
    memcpy(big + bl - 4, "\"}]}", 5);
    assert_int_equal(http_request(ts.port, "POST", "/v1/messages", NULL, big, bl, &r), 0);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "invalid_request_error"));
    assert_non_null(strstr(r.body, "maximum context length"));
    http_resp_free(&r);
    free(big);
    test_server_stop(&ts);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_health_models_metrics),
        cmocka_unit_test(test_chat_nonstream_and_stream_agree),
        cmocka_unit_test(test_cache_salt_isolates),
        cmocka_unit_test(test_completions),
        cmocka_unit_test(test_n_choices_and_seed),
        cmocka_unit_test(test_request_errors),
        cmocka_unit_test(test_route_errors),
        cmocka_unit_test(test_request_log),
        cmocka_unit_test(test_api_keys),
        cmocka_unit_test(test_queue_full),
        cmocka_unit_test(test_pool_limits_model_len),
        cmocka_unit_test(test_prefill_continues),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
