/*
 * Gemma 3 through `cairn serve`'s server (in process, loopback): chat completions that
 * share a system prompt reuse its K/V (usage.prompt_tokens_details.cached_tokens > 0 on
 * the second; the sliding layers serve it from the blocks of their window), and greedy
 * answers are the same whether the prefix came from the cache or was computed, streamed
 * or not.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "server/http_test_util.h"

static test_server_t g_srv;

#define SYSTEM "You are a careful assistant for a mountain hut. Answer briefly, cite the hut " \
               "rules when they apply, never invent facts, and say when you do not know."

/* POSTs a chat completion; returns the parsed body (caller deletes). */
static cJSON *chat(const char *user, const char *salt, bool stream, char **text)
{
    char body[2048];
    snprintf(body, sizeof body,
             "{\"model\":\"gemma3\",\"max_tokens\":12,\"temperature\":0,\"stream\":%s,%s%s%s"
             "\"messages\":[{\"role\":\"system\",\"content\":\"" SYSTEM "\"},"
             "{\"role\":\"user\",\"content\":\"%s\"}]%s}",
             stream ? "true" : "false", salt ? "\"cache_salt\":\"" : "", salt ? salt : "",
             salt ? "\"," : "", user, stream ? ",\"stream_options\":{\"include_usage\":true}" : "");
    http_resp_t r;
    assert_int_equal(http_request(g_srv.port, "POST", "/v1/chat/completions", NULL, body,
                                  strlen(body), &r),
                     0);
    assert_int_equal(r.status, 200);
    cJSON *out = NULL;
    if (stream) {
        int n_events = 0, done = 0;
        char finish[32] = "";
        cJSON *usage = NULL;
        *text = sse_collect(r.body, &n_events, finish, sizeof finish, &usage, &done);
        assert_true(done);
        out = cJSON_CreateObject();
        if (usage)
            cJSON_AddItemToObject(out, "usage", usage);
    } else {
        out = http_json(&r);
        assert_non_null(out);
        const cJSON *msg = cJSON_GetObjectItem(
            cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(out, "choices"), 0), "message"),
            "content");
        *text = strdup(cJSON_GetStringValue(msg));
    }
    http_resp_free(&r);
    return out;
}

static int cached_tokens(const cJSON *resp)
{
    const cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(resp, "usage"), "prompt_tokens_details");
    return (int)cJSON_GetNumberValue(cJSON_GetObjectItem(d, "cached_tokens"));
}

static void test_shared_system_prompt_is_reused(void **state)
{
    (void)state;
    char *t1, *t2, *t3, *t4;
    cJSON *a = chat("Where is the water tap?", "tenant-a", false, &t1);
    assert_int_equal(cached_tokens(a), 0);
    cJSON *b = chat("When does the hut close?", "tenant-a", false, &t2);
    const int hit = cached_tokens(b);
    fprintf(stderr, "second request: %d prompt tokens served from the cache\n", hit);
    assert_true(hit >= 32);

    /* The same question in a fresh domain (computed from scratch) and streamed in the
     * first one (its prefix cached): the same greedy answer. */
    cJSON *c = chat("When does the hut close?", "tenant-b", false, &t3);
    assert_int_equal(cached_tokens(c), 0);
    assert_string_equal(t2, t3);
    cJSON *d = chat("When does the hut close?", "tenant-a", true, &t4);
    assert_true(cached_tokens(d) >= hit);
    assert_string_equal(t2, t4);
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(c);
    cJSON_Delete(d);
    free(t1);
    free(t2);
    free(t3);
    free(t4);
}

static int setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    cairn_server_options_t o;
    cairn_server_options_default(&o);
    o.port = 0;
    return test_server_start(&g_srv, "gemma3", &o, 64);
}

static int teardown(void **state)
{
    (void)state;
    test_server_stop(&g_srv);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_system_prompt_is_reused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
