/*
 * bench_agent_api.c — an agent-shaped replay through each HTTP API: how much of every
 * prompt the cache serves when real clients' conversations (tool calls sent back, tool
 * results appended) come through OpenAI chat completions, the OpenAI Responses API and
 * Anthropic Messages.
 *
 * Workload. An in-process `cairn serve` (loopback, cold tier off) over the agent test
 * model (tests/server/agent_model.h: the real Qwen3 tokenizer and chat template; the
 * answer forced by logit_bias). S sessions share one system prompt (~N tokens) and one
 * tool schema; each runs T turns. In every turn but the last the model calls a tool
 * (reasoning, then get_weather); the client appends the call exactly as the API returned
 * it and a tool result of about R tokens, and sends the whole conversation again, as
 * agents do. The last turn answers text. The S sessions of one turn run one after the
 * other. Each API gets a fresh server (an empty pool).
 *
 * Reported per API: prompt tokens, the cached ones as that API's own usage reports them
 * (prompt_tokens_details.cached_tokens, input_tokens_details.cached_tokens,
 * cache_read_input_tokens), their share (target >= 90%), requests, and the median
 * request wall time (loopback, a shared machine: indicative only).
 *
 * usage: bench_agent_api [--sessions S] [--turns T] [--system N] [--tool R] [--dir DIR]
 * Defaults: 4 sessions, 8 turns, a ~2000-token system prompt, ~200-token tool results,
 * the model under /tmp/cairn-bench-agent-model (kept between runs).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/agent_model.h"
#include "server/http_test_util.h"

typedef enum { API_CHAT = 0, API_RESPONSES, API_ANTHROPIC } api_kind_t;
static const char *const api_names[] = {"chat completions", "responses", "anthropic messages"};

typedef struct {
    int sessions, turns, system, tool;
    const char *dir;
} opts_t;

typedef struct {
    long long prompt, cached;
    int requests, errors;
    double *wall;       /* [requests] seconds */
} totals_t;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* About n tokens of deterministic English-like text (the Qwen3 tokenizer: ~1 token/word). */
static char *words(int n, unsigned seed, const char *lead)
{
    static const char *const w[] = {"agent", "cache", "block", "prompt", "tool", "result",
                                    "weather", "city", "server", "token", "reply", "turn",
                                    "file", "patch", "test", "build", "line", "value"};
    size_t cap = (size_t)n * 10 + strlen(lead) + 64, len = 0;
    char *s = malloc(cap);
    len += (size_t)snprintf(s, cap, "%s", lead);
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        len += (size_t)snprintf(s + len, cap - len, "%s%s", w[(seed >> 16) % 18],
                                i % 12 == 11 ? ".\n" : " ");
    }
    return s;
}

static cJSON *tools_json(api_kind_t k)
{
    cJSON *params = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
                                "\"required\":[\"city\"]}");
    cJSON *t = cJSON_CreateObject();
    if (k == API_CHAT) {
        cJSON *fn = cJSON_AddObjectToObject(t, "function");
        cJSON_AddStringToObject(t, "type", "function");
        cJSON_AddStringToObject(fn, "name", "get_weather");
        cJSON_AddStringToObject(fn, "description", "Current weather of a city");
        cJSON_AddItemToObject(fn, "parameters", params);
    } else if (k == API_RESPONSES) {
        cJSON_AddStringToObject(t, "type", "function");
        cJSON_AddStringToObject(t, "name", "get_weather");
        cJSON_AddStringToObject(t, "description", "Current weather of a city");
        cJSON_AddItemToObject(t, "parameters", params);
    } else {
        cJSON_AddStringToObject(t, "name", "get_weather");
        cJSON_AddStringToObject(t, "description", "Current weather of a city");
        cJSON_AddItemToObject(t, "input_schema", params);
    }
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, t);
    return a;
}

static cJSON *message(const char *role, const char *content)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    return m;
}

/* One session's conversation in the API's own shape, and how to extend it. */
typedef struct {
    api_kind_t k;
    cJSON *conv;        /* chat/anthropic: messages; responses: input items */
} session_t;

static void session_init(session_t *s, api_kind_t k, const char *system, int idx)
{
    char q[128];
    snprintf(q, sizeof q, "Session %d: what is the weather in Paris today?", idx);
    s->k = k;
    s->conv = cJSON_CreateArray();
    if (k == API_CHAT)
        cJSON_AddItemToArray(s->conv, message("system", system));
    cJSON_AddItemToArray(s->conv, message("user", q));
}

static char *request_body(const session_t *s, const char *system, const char *bias)
{
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "model", "agent");
    cJSON_AddItemToObject(b, s->k == API_RESPONSES ? "input" : "messages",
                          cJSON_Duplicate(s->conv, 1));
    cJSON_AddItemToObject(b, "tools", tools_json(s->k));
    if (s->k == API_RESPONSES)
        cJSON_AddStringToObject(b, "instructions", system);
    if (s->k == API_ANTHROPIC)
        cJSON_AddStringToObject(b, "system", system);
    cJSON_AddNumberToObject(b, s->k == API_RESPONSES ? "max_output_tokens" : "max_tokens", 16);
    cJSON_AddItemToObject(b, "logit_bias", cJSON_Parse(bias));
    cJSON_AddNumberToObject(b, "repetition_penalty", 1e6);
    cJSON_AddNumberToObject(b, "temperature", 0);
    char *txt = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    return txt;
}

/* Appends the answer (and, for a call, a tool result) to the conversation; adds the
 * prompt and cached tokens the API reported. Returns 1 when the answer called the tool,
 * 0 when it was text. */
static int absorb(session_t *s, cJSON *resp, const char *result, totals_t *t)
{
    cJSON *u = cJSON_GetObjectItem(resp, "usage");
    const char *call_id = NULL;
    if (s->k == API_CHAT) {
        cJSON *msg = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(resp, "choices"), 0),
                                         "message");
        t->prompt += cJSON_GetObjectItem(u, "prompt_tokens")->valueint;
        t->cached += cJSON_GetObjectItem(cJSON_GetObjectItem(u, "prompt_tokens_details"),
                                         "cached_tokens")->valueint;
        cJSON *calls = cJSON_GetObjectItem(msg, "tool_calls");
        cJSON_AddItemToArray(s->conv, cJSON_Duplicate(msg, 1));
        if (!calls)
            return 0;
        call_id = cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "id")->valuestring;
        cJSON *m = message("tool", result);
        cJSON_AddStringToObject(m, "tool_call_id", call_id);
        cJSON_AddItemToArray(s->conv, m);
        return 1;
    } else if (s->k == API_RESPONSES) {
        t->prompt += cJSON_GetObjectItem(u, "input_tokens")->valueint;
        t->cached += cJSON_GetObjectItem(cJSON_GetObjectItem(u, "input_tokens_details"),
                                         "cached_tokens")->valueint;
        cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(resp, "output")) {
            cJSON_AddItemToArray(s->conv, cJSON_Duplicate(it, 1));
            if (!strcmp(cJSON_GetObjectItem(it, "type")->valuestring, "function_call"))
                call_id = cJSON_GetObjectItem(it, "call_id")->valuestring;
        }
        if (!call_id)
            return 0;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "function_call_output");
        cJSON_AddStringToObject(o, "call_id", call_id);
        cJSON_AddStringToObject(o, "output", result);
        cJSON_AddItemToArray(s->conv, o);
        return 1;
    } else {
        int read = cJSON_GetObjectItem(u, "cache_read_input_tokens")->valueint;
        t->prompt += cJSON_GetObjectItem(u, "input_tokens")->valueint + read;
        t->cached += read;
        cJSON *content = cJSON_GetObjectItem(resp, "content"), *blk;
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddItemToObject(m, "content", cJSON_Duplicate(content, 1));
        cJSON_AddItemToArray(s->conv, m);
        cJSON_ArrayForEach(blk, content)
            if (!strcmp(cJSON_GetObjectItem(blk, "type")->valuestring, "tool_use"))
                call_id = cJSON_GetObjectItem(blk, "id")->valuestring;
        if (!call_id)
            return 0;
        cJSON *r = cJSON_CreateObject(), *rc = cJSON_CreateArray();
        cJSON_AddStringToObject(r, "type", "tool_result");
        cJSON_AddStringToObject(r, "tool_use_id", call_id);
        cJSON_AddStringToObject(r, "content", result);
        cJSON_AddItemToArray(rc, r);
        cJSON *um = cJSON_CreateObject();
        cJSON_AddStringToObject(um, "role", "user");
        cJSON_AddItemToObject(um, "content", rc);
        cJSON_AddItemToArray(s->conv, um);
        return 1;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int run_api(const opts_t *o, api_kind_t k, const char *system, totals_t *t)
{
    cairn_server_options_t so;
    cairn_server_options_default(&so);
    so.port = 0;
    so.model_id = "agent";
    test_server_t ts;
    if (test_server_start_dir(&ts, o->dir, "agent", &so, 512, 32768))
        return -1;
    static const char *const paths[] = {"/v1/chat/completions", "/v1/responses", "/v1/messages"};
    session_t *ss = calloc((size_t)o->sessions, sizeof *ss);
    t->wall = calloc((size_t)(o->sessions * o->turns), sizeof(double));
    for (int i = 0; i < o->sessions; i++)
        session_init(&ss[i], k, system, i);
    for (int turn = 0; turn < o->turns; turn++)
        for (int i = 0; i < o->sessions; i++) {
            bool last = turn == o->turns - 1;
            char *body = request_body(&ss[i], system, last ? agent_bias_answer()
                                                           : agent_bias_turn_call(turn));
            http_resp_t r;
            double t0 = now();
            int rc = http_request(ts.port, "POST", paths[k], NULL, body, strlen(body), &r);
            t->wall[t->requests++] = now() - t0;
            free(body);
            cJSON *j = rc == 0 && r.status == 200 ? http_json(&r) : NULL;
            if (!j) {
                fprintf(stderr, "%s: turn %d session %d: %d %s\n", api_names[k], turn, i,
                        rc ? -1 : r.status, rc ? "" : r.body);
                t->errors++;
            } else {
                char lead[96];
                snprintf(lead, sizeof lead, "{\"session\": %d, \"turn\": %d, \"report\": \"", i, turn);
                char *res = words(o->tool, (unsigned)(i * 1000 + turn), lead);
                strcat(res, "\"}");
                if (absorb(&ss[i], j, res, t) != 1 - last) {
                    fprintf(stderr, "%s: turn %d session %d: %s\n", api_names[k], turn, i,
                            last ? "a call, not the answer" : "no call");
                    t->errors++;
                }
                free(res);
                cJSON_Delete(j);
            }
            if (rc == 0)
                http_resp_free(&r);
        }
    for (int i = 0; i < o->sessions; i++)
        cJSON_Delete(ss[i].conv);
    free(ss);
    test_server_stop(&ts);
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o = {4, 8, 2000, 200, "/tmp/cairn-bench-agent-model"};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--sessions"))
            o.sessions = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--turns"))
            o.turns = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--system"))
            o.system = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tool"))
            o.tool = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dir"))
            o.dir = argv[i + 1];
        else {
            fprintf(stderr, "usage: bench_agent_api [--sessions S] [--turns T] [--system N] "
                            "[--tool R] [--dir DIR]\n");
            return 2;
        }
    }
    if (o.sessions < 1 || o.turns < 1 || o.turns > AGENT_TURNS + 1 || agent_model_write(o.dir, 2, 32768))
        return 1;
    char *system = words(o.system, 7, "You are a coding agent. Follow these rules.\n");
    printf("bench_agent_api: %d sessions x %d turns, system ~%d tokens, tool results ~%d tokens\n",
           o.sessions, o.turns, o.system, o.tool);
    printf("%-20s %10s %10s %7s %9s %12s\n", "api", "prompt", "cached", "share", "requests",
           "median ms");
    int bad = 0;
    for (int k = 0; k < 3; k++) {
        totals_t t = {0};
        if (run_api(&o, (api_kind_t)k, system, &t)) {
            fprintf(stderr, "%s: cannot start the server\n", api_names[k]);
            return 1;
        }
        qsort(t.wall, (size_t)t.requests, sizeof(double), cmp_double);
        double share = t.prompt ? 100.0 * (double)t.cached / (double)t.prompt : 0;
        printf("%-20s %10lld %10lld %6.1f%% %9d %12.1f\n", api_names[k], t.prompt, t.cached,
               share, t.requests, t.requests ? t.wall[t.requests / 2] * 1e3 : 0);
        bad += t.errors;
        free(t.wall);
    }
    free(system);
    if (bad)
        fprintf(stderr, "bench_agent_api: %d requests failed or answered unexpectedly\n", bad);
    return bad ? 1 : 0;
}
