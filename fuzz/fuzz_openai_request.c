/*
 * fuzz_openai_request.c — libFuzzer target for the API adapters' request parsers
 * (src/server/api/), no network: every adapter of the built-in registry (OpenAI chat
 * completions, completions, Responses, Anthropic Messages). The first byte picks the
 * adapter (byte modulo the registry size: 0 chat, 1 completions, 2 responses,
 * 3 anthropic) and the route's operation (byte / size: Anthropic's 1 is count_tokens);
 * the rest is the body. Rendering drives every delta kind (logprobs, reasoning, text, a
 * tool call). Every input must either parse into a neutral request
 * that keeps the parser's promises, and then render (begin, a delta per choice, end; for a
 * stream also begin then fail) as the server would, or fail with a 4xx/5xx error the
 * adapter renders.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api.h"

static void check_request(const gen_request_t *r)
{
    if (r->n < 1 || r->n > API_MAX_N || r->sampling.n_stop > API_MAX_STOP)
        abort();
    if (r->cache_salt && strlen(r->cache_salt) > API_MAX_SALT)
        abort();
    if (r->include_usage && !r->stream)
        abort();
    if (!r->prompt_param || !r->max_tokens_param)
        abort();
    switch (r->prompt_kind) {
    case GEN_PROMPT_MESSAGES:
        if (!cJSON_IsArray(r->messages))
            abort();
        break;
    case GEN_PROMPT_TEXT:
        if (!r->prompt_text || strlen(r->prompt_text) != r->prompt_len)
            abort();
        break;
    case GEN_PROMPT_IDS:
        if (!r->prompt_ids || r->n_prompt_ids < 1)
            abort();
        for (int i = 0; i < r->n_prompt_ids; i++)
            if (r->prompt_ids[i] < 0)
                abort();
        break;
    }
    for (size_t i = 0; i < r->sampling.n_stop; i++)
        if (!r->sampling.stop[i] || !r->sampling.stop[i][0])
            abort();
    cairn_sampling_params_validate(&r->sampling, 4096, NULL, 0);
}

/* The typed deltas the server produces for one choice: logprobs (when asked), reasoning,
 * text and a tool call (chat prompts only: raw prompts are never parsed). */
static int deltas(const api_adapter_t *a, api_render_t *r, const gen_request_t *req, int i)
{
    int rc = 0;
    if (req->logprobs) {
        api_logprob_t lp = {.token = {"h\xc3", 2, -0.5f}, .n_top = req->top_logprobs};
        for (int k = 0; k < lp.n_top; k++)
            lp.top[k] = (api_token_lp_t){k & 1 ? "\xa9" : "x", 1, -1.0f - (float)k};
        api_delta_t d = {.kind = API_DELTA_LOGPROBS, .choice = i, .text = "", .tool_id = "",
                         .logprobs = &lp, .n_logprobs = 1};
        rc = a->delta(r, &d);
    }
    bool chat = req->prompt_kind == GEN_PROMPT_MESSAGES;
    api_delta_t d = {.kind = API_DELTA_REASONING, .choice = i, .text = "plan", .len = 4, .tool_id = ""};
    if (!rc && chat)
        rc = a->delta(r, &d);
    d = (api_delta_t){.kind = API_DELTA_TEXT, .choice = i, .text = "h\xc3\xa9\"", .len = 4, .tool_id = ""};
    if (!rc)
        rc = a->delta(r, &d);
    const api_delta_t call[3] = {
        {.kind = API_DELTA_TOOL_CALL_BEGIN, .choice = i, .text = "f", .len = 1, .tool_id = "call_1"},
        {.kind = API_DELTA_TOOL_CALL_ARGS, .choice = i, .text = "{\"a\": 1}", .len = 8, .tool_id = "call_1"},
        {.kind = API_DELTA_TOOL_CALL_END, .choice = i, .text = "", .len = 0, .tool_id = "call_1"},
    };
    for (int k = 0; !rc && chat && k < 3; k++)
        rc = a->delta(r, &call[k]);
    return rc;
}

static void render(const api_adapter_t *a, const gen_request_t *req)
{
    api_render_t r = {.req = req, .id = "fuzz-1", .created = 1700000000, .model = "fuzz"};
    cairn_finish_reason_t finish[API_MAX_N];
    int calls[API_MAX_N] = {0};
    int rc = a->begin(&r);
    for (int i = 0; !rc && i < req->n; i++) {
        rc = deltas(a, &r, req, i);
        finish[i] = i & 1 ? CAIRN_FINISH_LENGTH : CAIRN_FINISH_STOP;
        calls[i] = req->prompt_kind == GEN_PROMPT_MESSAGES;
    }
    api_end_t end = {.finish = finish, .tool_calls = calls,
                     .usage = {.prompt_tokens = 7, .completion_tokens = 3, .cached_tokens = 6,
                               .hot_tokens = 4, .restored_tokens = 2}};
    if (!rc)
        rc = a->end(&r, &end);
    if (rc || !r.out.p || !r.out.len)
        abort();
    a->release(&r);
    api_buf_free(&r.out);
    if (!req->stream)
        return;
    /* A stream that fails after it began. */
    api_error_t e;
    api_error_set(&e, 503, API_ERR_UNAVAILABLE, NULL, "canceled", "canceled");
    rc = a->begin(&r);
    if (!rc)
        rc = deltas(a, &r, req, 0);
    if (!rc)
        rc = a->fail(&r, &e);
    if (rc || !r.out.p || !r.out.len)
        abort();
    a->release(&r);
    api_buf_free(&r.out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const api_adapter_t *a = api_registry[data[0] % api_registry_count];
    const api_route_t *route = &a->routes[(data[0] / api_registry_count) % a->n_routes];
    if (route->op == API_OP_LIST_MODELS)
        route = &a->routes[0]; /* GET routes have no body */
    api_input_t in = {.op = route->op, .body = (const char *)data + 1, .len = size - 1};
    gen_request_t r;
    api_error_t e;
    memset(&e, 0, sizeof e);
    int rc = a->parse(&in, &r, &e);
    if (rc == 0) {
        check_request(&r);
        if (route->op == API_OP_GENERATE)
            render(a, &r);
        if (route->op == API_OP_COUNT_TOKENS) {
            api_buf_t b = {0};
            if (a->render_count(&r, 42, &b) != 0 || !b.len)
                abort();
            api_buf_free(&b);
        }
        gen_request_fini(&r);
    } else {
        if (e.http_status < 400 || e.http_status > 599 || !e.message[0])
            abort();
        api_buf_t b = {0};
        if (a->render_error(&e, &b) != 0 || !b.len)
            abort();
        api_buf_free(&b);
    }
    return 0;
}
