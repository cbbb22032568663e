/*
 * test_openai_request.c — the OpenAI adapters' request parsers (src/server/api/
 * openai_chat.c, openai_completions.c, openai_common.c) and their renderers, without a
 * network: field types, defaults, ranges, unknown and default-only fields, UTF-8
 * validation, content-part normalization, allocation failures.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "server/api/openai.h"

extern const api_adapter_t api_anthropic_messages;

/* The endpoint a body is parsed for: its adapter. */
typedef const api_adapter_t *oai_kind_t;
#define OAI_CHAT (&api_openai_chat)
#define OAI_COMPLETION (&api_openai_completions)

static int oai_request_parse(oai_kind_t k, const char *body, size_t len, gen_request_t *r,
                             api_error_t *e)
{
    api_input_t in = {.op = API_OP_GENERATE, .body = body, .len = len};
    return k->parse(&in, r, e);
}

static int parse(oai_kind_t k, const char *body, gen_request_t *r, api_error_t *e)
{
    memset(e, 0, sizeof *e);
    return oai_request_parse(k, body, strlen(body), r, e);
}

/* The error body as the adapters render it (cairn_malloc'd). */
static char *oai_error_json(const api_error_t *e)
{
    api_buf_t b = {0};
    assert_int_equal(oai_render_error(e, &b), 0);
    return b.p;
}

static void test_chat_defaults(void **state)
{
    gen_request_t r;
    api_error_t e;
    assert_int_equal(parse(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &r, &e), 0);
    assert_int_equal(r.n, 1);
    assert_false(r.stream);
    assert_int_equal(r.sampling.max_tokens, -1);
    assert_true(r.sampling.temperature == 1.0f);
    assert_null(r.cache_salt);
    assert_int_equal(cJSON_GetArraySize(r.messages), 1);
    gen_request_fini(&r);
    assert_int_equal(parse(OAI_COMPLETION, "{\"prompt\":\"hi\"}", &r, &e), 0);
    assert_int_equal(r.sampling.max_tokens, 16); /* OpenAI's completions default */
    assert_string_equal(r.prompt_text, "hi");
    gen_request_fini(&r);
}

static void test_all_fields(void **state)
{
    gen_request_t r;
    api_error_t e;
    const char *body =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"content\":\"42\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
        "\"max_completion_tokens\":9,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,\"min_p\":0.1,"
        "\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,"
        "\"seed\":-3,\"stop\":[\"x\",\"yz\"],\"n\":2,\"cache_salt\":\"salt\",\"user\":\"u\","
        "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"logit_bias\":{\"5\":-100},"
        "\"stop_token_ids\":[1,2],\"min_tokens\":1,\"ignore_eos\":false,\"logprobs\":false,"
        "\"response_format\":{\"type\":\"text\"},\"tool_choice\":\"auto\","
        "\"chat_template_kwargs\":{\"enable_thinking\":false}}";
    assert_int_equal(parse(OAI_CHAT, body, &r, &e), 0);
    assert_string_equal(r.model, "m");
    assert_int_equal(r.sampling.max_tokens, 9);
    assert_true(r.sampling.temperature == 0.5f);
    assert_int_equal(r.sampling.top_k, 40);
    assert_true(r.sampling.has_seed);
    assert_true(r.sampling.seed == (uint64_t)-3);
    assert_int_equal((int)r.sampling.n_stop, 2);
    assert_string_equal(r.sampling.stop[1], "yz");
    assert_int_equal(r.n, 2);
    assert_string_equal(r.cache_salt, "salt");
    assert_true(r.stream && r.include_usage);
    assert_int_equal((int)r.sampling.n_logit_bias, 1);
    assert_int_equal(r.sampling.logit_bias[0].token, 5);
    assert_int_equal((int)r.sampling.n_stop_token_ids, 2);
    assert_non_null(r.tools);
    assert_non_null(r.template_kwargs);
    cJSON *m1 = cJSON_GetArrayItem(r.messages, 1);
    assert_string_equal(cJSON_GetObjectItem(m1, "content")->valuestring, "a\nb");
    assert_non_null(cJSON_GetObjectItem(cJSON_GetArrayItem(r.messages, 2), "tool_calls"));
    assert_int_equal(cairn_sampling_params_validate(&r.sampling, 100, NULL, 0), 0);
    gen_request_fini(&r);
}

static void test_prompt_forms(void **state)
{
    gen_request_t r;
    api_error_t e;
    assert_int_equal(parse(OAI_COMPLETION, "{\"prompt\":[1,2,3]}", &r, &e), 0);
    assert_int_equal(r.n_prompt_ids, 3);
    assert_int_equal(r.prompt_ids[2], 3);
    gen_request_fini(&r);
    assert_int_equal(parse(OAI_COMPLETION, "{\"prompt\":[[4,5]]}", &r, &e), 0);
    assert_int_equal(r.n_prompt_ids, 2);
    gen_request_fini(&r);
    assert_int_equal(parse(OAI_COMPLETION, "{\"prompt\":[\"only\"]}", &r, &e), 0);
    assert_string_equal(r.prompt_text, "only");
    gen_request_fini(&r);
    assert_int_not_equal(parse(OAI_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", &r, &e), 0);
    assert_string_equal(e.param, "prompt");
    assert_int_not_equal(parse(OAI_COMPLETION, "{\"prompt\":[1,-2]}", &r, &e), 0);
    assert_int_not_equal(parse(OAI_COMPLETION, "{\"prompt\":[]}", &r, &e), 0);
    assert_int_not_equal(parse(OAI_COMPLETION, "{\"prompt\":7}", &r, &e), 0);
}

static void expect_bad(oai_kind_t k, const char *body, int status, const char *param)
{
    gen_request_t r;
    api_error_t e;
    assert_int_not_equal(parse(k, body, &r, &e), 0);
    assert_int_equal(e.http_status, status);
    if (param)
        assert_string_equal(e.param, param);
    assert_true(strlen(e.message) > 0);
    char *j = oai_error_json(&e);
    assert_non_null(j);
    cJSON *p = cJSON_Parse(j);
    assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(p, "error"), "message"));
    cJSON_Delete(p);
    cairn_free(j);
}

/* Fields an agent client sends: accepted, and mapped where they mean something here. */
static void test_agent_fields(void **state)
{
    gen_request_t r;
    api_error_t e;
    assert_int_equal(parse(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
                                     "{\"role\":\"assistant\",\"content\":null}],"
                                     "\"prompt_cache_key\":\"conv-1\",\"store\":true,"
                                     "\"metadata\":{\"a\":\"b\"},\"service_tier\":\"auto\","
                                     "\"reasoning_effort\":\"none\",\"parallel_tool_calls\":false,"
                                     "\"safety_identifier\":\"s\",\"verbosity\":\"low\","
                                     "\"tool_choice\":\"none\",\"logprobs\":true,\"top_logprobs\":3,"
                                     "\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                                     "\"max_completion_tokens\":5,\"audio\":null,\"functions\":[],"
                                     "\"function_call\":\"none\",\"prediction\":null,"
                                     "\"web_search_options\":null}", &r, &e), 0);
    assert_int_equal(r.enable_thinking, 0);
    assert_true(r.no_tool_calls);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 3);
    assert_int_equal(r.sampling.max_tokens, 5);
    /* A null content becomes "" (templates concatenate it). */
    cJSON *a = cJSON_GetArrayItem(r.messages, 1);
    assert_string_equal(cJSON_GetObjectItem(a, "content")->valuestring, "");
    gen_request_fini(&r);
    assert_int_equal(parse(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                     "\"reasoning_effort\":\"high\",\"tool_choice\":\"required\"}", &r, &e), 0);
    assert_int_equal(r.enable_thinking, 1);
    assert_false(r.no_tool_calls);
    gen_request_fini(&r);
    assert_int_equal(parse(OAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":2}", &r, &e), 0);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 2);
    gen_request_fini(&r);
}

/* Anthropic Messages and the Responses API convert to the chat-template shape. */
static void test_anthropic_and_responses(void **state)
{
    gen_request_t r;
    api_error_t e;
    const char *ant =
        "{\"model\":\"m\",\"max_tokens\":9,\"system\":[{\"type\":\"text\",\"text\":\"S\","
        "\"cache_control\":{\"type\":\"ephemeral\"}}],\"thinking\":{\"type\":\"disabled\"},"
        "\"tools\":[{\"name\":\"f\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"stop_sequences\":[\"END\"],\"metadata\":{\"user_id\":\"u1\"},\"context_management\":{},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"T\",\"signature\":\"\"},"
        "{\"type\":\"text\",\"text\":\"A\"},{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"f\","
        "\"input\":{\"x\":1}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
        "\"tool_use_id\":\"t1\",\"content\":[{\"type\":\"text\",\"text\":\"R\"}]},"
        "{\"type\":\"text\",\"text\":\"more\"}]},{\"role\":\"system\",\"content\":\"late\"}]}";
    assert_int_equal(parse(&api_anthropic_messages, ant, &r, &e), 0);
    char *m = cJSON_PrintUnformatted(r.messages);
    assert_string_equal(m, "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"hi\"},"
                           "{\"role\":\"assistant\",\"content\":\"A\",\"reasoning_content\":\"T\","
                           "\"tool_calls\":[{\"id\":\"t1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                           "\"arguments\":{\"x\":1}}}]},{\"role\":\"tool\",\"content\":\"R\","
                           "\"tool_call_id\":\"t1\"},{\"role\":\"user\",\"content\":\"more\"},"
                           "{\"role\":\"system\",\"content\":\"late\"}]");
    cJSON_free(m);
    char *t = cJSON_PrintUnformatted(r.tools);
    assert_string_equal(t, "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"d\","
                           "\"parameters\":{\"type\":\"object\"}}}]");
    cJSON_free(t);
    assert_int_equal(r.enable_thinking, 0);
    assert_int_equal(r.sampling.max_tokens, 9);
    assert_string_equal(r.sampling.stop[0], "END");
    assert_string_equal(r.user, "u1");
    gen_request_fini(&r);
    /* count_tokens needs no max_tokens; generation does. */
    const char *noMax = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    api_input_t in = {.op = API_OP_COUNT_TOKENS, .body = noMax, .len = strlen(noMax)};
    assert_int_equal(api_anthropic_messages.parse(&in, &r, &e), 0);
    gen_request_fini(&r);
    /* Claude Code's per-request billing header is not part of the prompt (block or first
     * line); a system of only the header is no system message. */
    const char *billing[][2] = {
        {"[{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: cc_version=2.1.197.abc; "
         "cch=1f2e3;\"},{\"type\":\"text\",\"text\":\"You are Claude Code.\"},"
         "{\"type\":\"text\",\"text\":\"Rules.\"}]",
         "[{\"role\":\"system\",\"content\":\"You are Claude Code.\\nRules.\"},"
         "{\"role\":\"user\",\"content\":\"x\"}]"},
        {"\"x-anthropic-billing-header: cch=00000;\\nYou are Claude Code.\"",
         "[{\"role\":\"system\",\"content\":\"You are Claude Code.\"},{\"role\":\"user\",\"content\":\"x\"}]"},
        {"[{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: cch=00000;\"}]",
         "[{\"role\":\"user\",\"content\":\"x\"}]"},
        {"\"\"", "[{\"role\":\"system\",\"content\":\"\"},{\"role\":\"user\",\"content\":\"x\"}]"},
    };
    for (size_t i = 0; i < sizeof billing / sizeof *billing; i++) {
        char body[1024];
        snprintf(body, sizeof body, "{\"model\":\"m\",\"max_tokens\":1,\"system\":%s,"
                 "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", billing[i][0]);
        assert_int_equal(parse(&api_anthropic_messages, body, &r, &e), 0);
        m = cJSON_PrintUnformatted(r.messages);
        assert_string_equal(m, billing[i][1]);
        cJSON_free(m);
        gen_request_fini(&r);
    }
    assert_int_not_equal(parse(&api_anthropic_messages, noMax, &r, &e), 0);
    assert_string_equal(e.param, "max_tokens");
    assert_int_not_equal(parse(&api_anthropic_messages,
                               "{\"model\":\"m\",\"max_tokens\":1,\"bogus\":1,\"messages\":[]}", &r, &e), 0);
    assert_string_equal(e.param, "bogus");
    assert_int_not_equal(parse(&api_anthropic_messages,
                               "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\","
                               "\"content\":[{\"type\":\"image\"}]}]}", &r, &e), 0);
    assert_int_equal(e.http_status, 400);
    api_buf_t b = {0};
    assert_int_equal(api_anthropic_messages.render_error(&e, &b), 0);
    assert_non_null(strstr(b.p, "\"type\":\"error\""));
    assert_non_null(strstr(b.p, "invalid_request_error"));
    api_buf_free(&b);

    const char *resp =
        "{\"model\":\"m\",\"instructions\":\"I\",\"max_output_tokens\":7,\"store\":false,"
        "\"reasoning\":{\"effort\":\"minimal\"},\"tools\":[{\"type\":\"function\",\"name\":\"f\","
        "\"parameters\":{\"type\":\"object\"}}],\"input\":[{\"role\":\"user\",\"content\":"
        "[{\"type\":\"input_text\",\"text\":\"q\"}]},{\"type\":\"reasoning\",\"summary\":[],"
        "\"content\":[{\"type\":\"reasoning_text\",\"text\":\"T\"}]},{\"type\":\"function_call\","
        "\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{\\\"x\\\": 1}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"R\"}]}";
    assert_int_equal(parse(&api_openai_responses, resp, &r, &e), 0);
    m = cJSON_PrintUnformatted(r.messages);
    assert_string_equal(m, "[{\"role\":\"system\",\"content\":\"I\"},{\"role\":\"user\",\"content\":\"q\"},"
                           "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"T\","
                           "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                           "\"arguments\":\"{\\\"x\\\": 1}\"}}]},{\"role\":\"tool\",\"content\":\"R\","
                           "\"tool_call_id\":\"c1\"}]");
    cJSON_free(m);
    assert_int_equal(r.enable_thinking, 0);
    assert_int_equal(r.sampling.max_tokens, 7);
    gen_request_fini(&r);
    assert_int_not_equal(parse(&api_openai_responses, "{\"input\":\"x\",\"previous_response_id\":\"r\"}", &r, &e), 0);
    assert_string_equal(e.param, "previous_response_id");
    assert_int_not_equal(parse(&api_openai_responses, "{\"input\":\"x\",\"text\":{\"format\":"
                                                       "{\"type\":\"json_schema\"}}}", &r, &e), 0);
    assert_string_equal(e.param, "text.format");
    assert_int_not_equal(parse(&api_openai_responses, "{\"instructions\":\"x\"}", &r, &e), 0);
    assert_string_equal(e.param, "input");
}

static void test_rejections(void **state)
{
    const char *M = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char b[1024];
#define BODY(extra) (snprintf(b, sizeof b, "{%s,%s}", M, extra), b)
    expect_bad(OAI_CHAT, "", 400, "");
    expect_bad(OAI_CHAT, "{", 400, "");
    expect_bad(OAI_CHAT, "null", 400, "");
    expect_bad(OAI_CHAT, BODY("\"temperature\":\"1\""), 400, "temperature");
    expect_bad(OAI_CHAT, BODY("\"max_tokens\":0"), 400, "max_tokens");
    expect_bad(OAI_CHAT, BODY("\"max_tokens\":2.5"), 400, "max_tokens");
    expect_bad(OAI_CHAT, BODY("\"n\":0"), 400, "n");
    expect_bad(OAI_CHAT, BODY("\"n\":17"), 400, "n");
    expect_bad(OAI_CHAT, BODY("\"stream\":1"), 400, "stream");
    expect_bad(OAI_CHAT, BODY("\"stop\":5"), 400, "stop");
    expect_bad(OAI_CHAT, BODY("\"stop\":[\"a\",2]"), 400, "stop");
    expect_bad(OAI_CHAT, BODY("\"seed\":1.5"), 400, "seed");
    expect_bad(OAI_CHAT, BODY("\"logit_bias\":{\"x\":1}"), 400, "logit_bias");
    expect_bad(OAI_CHAT, BODY("\"cache_salt\":5"), 400, "cache_salt");
    expect_bad(OAI_CHAT, BODY("\"unknown\":5"), 400, "unknown");
    expect_bad(OAI_CHAT, BODY("\"echo\":false"), 400, "echo"); /* completions only */
    expect_bad(OAI_CHAT, BODY("\"logprobs\":1"), 400, "logprobs");
    expect_bad(OAI_CHAT, BODY("\"top_logprobs\":3"), 400, "top_logprobs"); /* needs logprobs */
    expect_bad(OAI_CHAT, BODY("\"logprobs\":true,\"top_logprobs\":21"), 400, "top_logprobs");
    expect_bad(OAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":6}", 400, "logprobs");
    expect_bad(OAI_CHAT, BODY("\"reasoning_effort\":\"huge\""), 400, "reasoning_effort");
    expect_bad(OAI_CHAT, BODY("\"tool_choice\":5"), 400, "tool_choice");
    expect_bad(OAI_CHAT, BODY("\"prompt_cache_key\":5"), 400, "prompt_cache_key");
    expect_bad(OAI_CHAT, BODY("\"modalities\":[\"audio\"]"), 400, "modalities");
    expect_bad(OAI_CHAT, BODY("\"audio\":{\"voice\":\"x\"}"), 400, "audio");
    expect_bad(OAI_CHAT, BODY("\"functions\":[{\"name\":\"f\"}]"), 400, "functions");
    expect_bad(OAI_CHAT, BODY("\"prediction\":{\"type\":\"content\"}"), 400, "prediction");
    expect_bad(OAI_CHAT, BODY("\"response_format\":{\"type\":\"json_object\"}"), 400, "response_format");
    expect_bad(OAI_CHAT, BODY("\"stream_options\":{\"include_usage\":true}"), 400, "stream_options");
    expect_bad(OAI_CHAT, BODY("\"stream\":true,\"stream_options\":{\"x\":1}"), 400, "stream_options");
    expect_bad(OAI_CHAT, BODY("\"temperature\":1,\"temperature\":2"), 400, "temperature");
    expect_bad(OAI_CHAT, "{\"messages\":[]}", 400, "messages");
    expect_bad(OAI_CHAT, "{\"messages\":{}}", 400, "messages");
    expect_bad(OAI_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", 400, "messages[0]");
    expect_bad(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content");
    expect_bad(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
               400, "messages[0].content");
    expect_bad(OAI_COMPLETION, "{\"max_tokens\":3}", 400, "prompt");
    char salt[300];
    memset(salt, 'a', 257);
    salt[257] = '\0';
    snprintf(b, sizeof b, "{\"prompt\":\"x\",\"cache_salt\":\"%s\"}", salt);
    expect_bad(OAI_COMPLETION, b, 400, "cache_salt");
    salt[256] = '\0';
    gen_request_t r;
    api_error_t e;
    snprintf(b, sizeof b, "{\"prompt\":\"x\",\"cache_salt\":\"%s\"}", salt);
    assert_int_equal(parse(OAI_COMPLETION, b, &r, &e), 0);
    gen_request_fini(&r);
#undef BODY
}

static void test_utf8(void **state)
{
    assert_true(api_utf8_valid("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14));
    assert_false(api_utf8_valid("\xc3\x28", 2));
    assert_false(api_utf8_valid("\xc0\xaf", 2));         /* overlong */
    assert_false(api_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
    assert_false(api_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
    assert_false(api_utf8_valid("\xe2\x82", 2));         /* truncated */
    gen_request_t r;
    api_error_t e;
    const char bad[] = "{\"prompt\":\"\xff\"}";
    assert_int_not_equal(oai_request_parse(OAI_COMPLETION, bad, sizeof bad - 1, &r, &e), 0);
    assert_int_equal(e.http_status, 400);
    assert_non_null(strstr(e.message, "UTF-8"));
    /* A lone surrogate escape is refused by the JSON parser. */
    assert_int_not_equal(parse(OAI_COMPLETION, "{\"prompt\":\"\\ud800\"}", &r, &e), 0);
}

/* Renders a whole response through the adapter's begin / delta / end, as the server does. */
static char *render_full(const api_adapter_t *a, gen_request_t *req, api_render_t *r, int n,
                         char *const *texts, const size_t *lens,
                         const cairn_finish_reason_t *finish, const api_usage_t *u)
{
    assert_int_equal(a->begin(r), 0);
    for (int i = 0; i < n; i++) {
        api_delta_t d = {.kind = API_DELTA_TEXT, .choice = i, .text = texts[i], .len = lens[i]};
        assert_int_equal(a->delta(r, &d), 0);
    }
    api_end_t end = {.finish = finish, .usage = *u};
    assert_int_equal(a->end(r, &end), 0);
    a->release(r);
    (void)req;
    char *out = r->out.p;
    memset(&r->out, 0, sizeof r->out);
    return out;
}

static void test_render(void **state)
{
    gen_request_t req;
    gen_request_init(&req);
    req.n = 2;
    api_render_t m = {.req = &req, .id = "chatcmpl-1", .created = 1700000000, .model = "qwen3"};
    char *texts[2] = {"he\"llo\n", "x"};
    size_t lens[2] = {7, 1};
    cairn_finish_reason_t f[2] = {CAIRN_FINISH_STOP, CAIRN_FINISH_LENGTH};
    api_usage_t u = {.prompt_tokens = 10, .completion_tokens = 3, .cached_tokens = 40,
                     .hot_tokens = 8, .restored_tokens = 32};
    char *full = render_full(OAI_CHAT, &req, &m, 2, texts, lens, f, &u);
    cJSON *j = cJSON_Parse(full);
    assert_non_null(j);
    cJSON *c1 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 1);
    assert_string_equal(cJSON_GetObjectItem(c1, "finish_reason")->valuestring, "length");
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "message"), "content")->valuestring,
                        "he\"llo\n");
    cJSON *usage = cJSON_GetObjectItem(j, "usage");
    assert_int_equal(cJSON_GetObjectItem(usage, "total_tokens")->valueint, 13);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(usage, "prompt_tokens_details"),
                                         "cached_tokens")->valueint, 40);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(usage, "prompt_tokens_details"),
                                         "hot_cached_tokens")->valueint, 8);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(usage, "prompt_tokens_details"),
                                         "cold_restored_tokens")->valueint, 32);
    cJSON_Delete(j);
    cairn_free(full);
    req.include_usage = true;
    assert_int_equal(oai_emit_chunk(&m, true, 0, "ab", 2, true, CAIRN_FINISH_NONE), 0);
    char *ch = m.out.p;
    assert_int_equal(strncmp(ch, "data: {", 7), 0);
    assert_string_equal(ch + strlen(ch) - 2, "\n\n");
    assert_non_null(strstr(ch, "\"delta\":{\"role\":\"assistant\",\"content\":\"ab\"}"));
    assert_non_null(strstr(ch, "\"finish_reason\":null"));
    assert_non_null(strstr(ch, "\"usage\":null"));
    api_buf_free(&m.out);
    req.include_usage = false;
    assert_int_equal(oai_emit_chunk(&m, false, 1, "", 0, false, CAIRN_FINISH_STOP), 0);
    ch = m.out.p;
    assert_non_null(strstr(ch, "\"object\":\"text_completion\""));
    assert_non_null(strstr(ch, "\"finish_reason\":\"stop\""));
    api_buf_free(&m.out);
    gen_request_fini(&req);
}

static void test_alloc_failures(void **state)
{
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]}],"
                       "\"stop\":[\"x\"],\"cache_salt\":\"s\",\"model\":\"m\",\"logit_bias\":{\"1\":2}}";
    for (long n = 0; n < 64; n++) {
        gen_request_t r;
        api_error_t e;
        cairn_alloc_fail_after(n, false);
        int rc = parse(OAI_CHAT, body, &r, &e);
        cairn_alloc_fail_after(-1, false);
        if (rc == 0) {
            gen_request_fini(&r);
            break;
        }
        assert_int_equal(e.http_status, 503); /* memory pressure: retry, not a server fault */
    }
}

/*
 * A sweep over every allocation of valid requests' parses, cJSON's included (cairn_init
 * routes them through cairn_malloc): each failure answers 503 out_of_memory, never a 400
 * "not valid JSON", and the sweep ends in a success (it reached the last allocation).
 */
static void test_alloc_failure_sweep(void **state)
{
    static const struct {
        oai_kind_t kind;
        const char *body;
    } cases[] = {
        {OAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
                   "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                   "{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":null,"
                   "\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}],"
                   "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                   "\"chat_template_kwargs\":{\"enable_thinking\":false},\"stop\":[\"x\",\"yz\"],"
                   "\"stop_token_ids\":[1,2],\"logit_bias\":{\"5\":-100},\"cache_salt\":\"salt\","
                   "\"user\":\"u\",\"n\":2,\"stream\":true,\"stream_options\":{\"include_usage\":true}}"},
        {OAI_COMPLETION, "{\"prompt\":\"hello there\",\"stop\":\"x\",\"max_tokens\":3}"},
        {OAI_COMPLETION, "{\"prompt\":[[1,2,3]],\"echo\":false,\"seed\":4}"},
        {&api_anthropic_messages,
         "{\"model\":\"m\",\"max_tokens\":9,\"system\":[{\"type\":\"text\",\"text\":\"S\"}],"
         "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],\"stop_sequences\":[\"E\"],"
         "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":"
         "[{\"type\":\"thinking\",\"thinking\":\"T\"},{\"type\":\"text\",\"text\":\"A\"},"
         "{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"f\",\"input\":{\"x\":1}}]},"
         "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\","
         "\"content\":\"R\"},{\"type\":\"text\",\"text\":\"more\"}]}]}"},
        {&api_openai_responses,
         "{\"model\":\"m\",\"instructions\":\"I\",\"tools\":[{\"type\":\"function\",\"name\":\"f\","
         "\"parameters\":{}}],\"tool_choice\":\"auto\",\"input\":[{\"role\":\"user\",\"content\":\"q\"},"
         "{\"type\":\"reasoning\",\"content\":[{\"type\":\"reasoning_text\",\"text\":\"T\"}]},"
         "{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"{}\"},"
         "{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":\"R\"}]}"},
    };
    cairn_init();
    for (size_t c = 0; c < CAIRN_ARRAY_LEN(cases); c++) {
        long n, failures = 0;
        for (n = 0; n < 100000; n++) {
            gen_request_t r;
            api_error_t e;
            cairn_alloc_fail_after(n, false);
            int rc = parse(cases[c].kind, cases[c].body, &r, &e);
            cairn_alloc_fail_after(-1, false);
            if (rc == 0) {
                gen_request_fini(&r);
                break;
            }
            if (e.http_status != 503)
                fprintf(stderr, "case %zu, allocation %ld: %d %s\n", c, n, e.http_status,
                        e.message);
            assert_int_equal(rc, CAIRN_ENOMEM);
            assert_int_equal(e.http_status, 503);
            assert_string_equal(e.code, "out_of_memory");
            failures++;
        }
        assert_true(n < 100000);
        assert_true(failures > 5);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_defaults), cmocka_unit_test(test_all_fields),
        cmocka_unit_test(test_prompt_forms),  cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_utf8),          cmocka_unit_test(test_render),
        cmocka_unit_test(test_alloc_failures), cmocka_unit_test(test_alloc_failure_sweep),
        cmocka_unit_test(test_agent_fields),  cmocka_unit_test(test_anthropic_and_responses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
