/*
 * test_prompt.c — prompt building (src/server/prompt.c) details that agents depend on:
 * tool-call arguments sent as JSON text reach a template that prints them as a mapping
 * parsed (and stay text for one that tests "is string"), enable_thinking reaches the
 * template unless chat_template_kwargs set it, and later system messages reach a template
 * that refuses them as user turns. Over the qwen3 fixture's tokenizer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/server_impl.h"

static cairn_tokenizer_t *g_tok;

static int setup(void **state)
{
    char dir[1024], err[256];
    snprintf(dir, sizeof dir, "%s/models/qwen3", CAIRN_FIXTURES_DIR);
    return cairn_tokenizer_load(dir, &g_tok, err, sizeof err);
}

static int teardown(void **state)
{
    cairn_tokenizer_destroy(g_tok);
    return 0;
}

/* The rendered prompt of messages (a JSON text) through template src, decoded back. */
static char *render(const char *src, bool args_as_objects, const char *messages,
                    const char *kwargs)
{
    cairn_chat_template_t *t = NULL;
    char err[256];
    assert_int_equal(cairn_chat_template_compile(src, strlen(src), &t, err, sizeof err), 0);
    prompt_ctx_t pc = {.tok = g_tok, .tmpl = t, .vocab = 4096, .args_as_objects = args_as_objects};
    gen_request_t r;
    gen_request_init(&r);
    r.prompt_kind = GEN_PROMPT_MESSAGES;
    r.messages = cJSON_Parse(messages);
    r.template_kwargs = kwargs ? cJSON_Parse(kwargs) : NULL;
    r.enable_thinking = 0;
    int32_t *ids = NULL;
    int n = 0;
    api_error_t e;
    assert_int_equal(prompt_build(&pc, &r, &ids, &n, NULL, &e), 0);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(cairn_tokenizer_decode(g_tok, ids, (size_t)n, false, &text, &len), 0);
    cairn_free(ids);
    gen_request_fini(&r);
    cairn_chat_template_destroy(t);
    return text;
}

static const char *CALLS =
    "[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\","
    "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]}]";

static void test_arguments_as_the_template_wants(void **state)
{
    const char *as_map = "{% for m in messages %}{% for t in m.tool_calls %}"
                         "{{ t.function.arguments | tojson }}|{{ t.function.arguments.city }}"
                         "{% endfor %}{% endfor %}";
    char *s = render(as_map, true, CALLS, NULL);
    assert_string_equal(s, "{\"city\": \"Paris\"}|Paris");
    cairn_free(s);
    /* A template that handles strings gets the client's text, byte for byte. */
    const char *either = "{% for m in messages %}{% for t in m.tool_calls %}"
                         "{% if t.function.arguments is string %}{{ t.function.arguments }}"
                         "{% else %}{{ t.function.arguments | tojson }}{% endif %}"
                         "{% endfor %}{% endfor %}";
    s = render(either, false, CALLS, NULL);
    assert_string_equal(s, "{\"city\": \"Paris\"}");
    cairn_free(s);
    /* Arguments that are not an object stay as sent. */
    s = render(as_map, true,
               "[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":"
               "{\"name\":\"f\",\"arguments\":\"not json\"}}]}]", NULL);
    assert_string_equal(s, "\"not json\"|");
    cairn_free(s);
}

static void test_enable_thinking(void **state)
{
    const char *t = "{{ enable_thinking }}";
    const char *msgs = "[{\"role\":\"user\",\"content\":\"x\"}]";
    char *s = render(t, false, msgs, NULL); /* request: 0 */
    assert_string_equal(s, "False");
    cairn_free(s);
    s = render(t, false, msgs, "{\"enable_thinking\": true}"); /* kwargs win */
    assert_string_equal(s, "True");
    cairn_free(s);
}

/* A template that takes a system message only first (as Qwen3.5's) gets later ones as
 * user turns, in place; a template that takes them gets them as they are; a template
 * that fails for another reason still fails with its own message. */
static void test_late_system_messages(void **state)
{
    const char *strict =
        "{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
        "{{ raise_exception('System message must be at the beginning.') }}{% endif %}"
        "[{{ m.role }}:{{ m.content }}]{% endfor %}";
    const char *msgs = "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U\"},"
                       "{\"role\":\"system\",\"content\":\"agents\"}]";
    char *s = render(strict, false, msgs, NULL);
    assert_string_equal(s, "[system:S][user:U][user:agents]");
    cairn_free(s);
    s = render("{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}", false, msgs, NULL);
    assert_string_equal(s, "[system:S][user:U][system:agents]");
    cairn_free(s);

    cairn_chat_template_t *t = NULL;
    char err[256];
    const char *bad = "{{ raise_exception('no tools here') }}";
    assert_int_equal(cairn_chat_template_compile(bad, strlen(bad), &t, err, sizeof err), 0);
    prompt_ctx_t pc = {.tok = g_tok, .tmpl = t, .vocab = 4096};
    gen_request_t r;
    gen_request_init(&r);
    r.prompt_kind = GEN_PROMPT_MESSAGES;
    r.prompt_param = "messages";
    r.messages = cJSON_Parse(msgs);
    int32_t *ids = NULL;
    int n = 0;
    api_error_t e;
    assert_int_not_equal(prompt_build(&pc, &r, &ids, &n, NULL, &e), 0);
    assert_int_equal(e.http_status, 400);
    assert_non_null(strstr(e.message, "no tools here"));
    gen_request_fini(&r);
    cairn_chat_template_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arguments_as_the_template_wants),
        cmocka_unit_test(test_enable_thinking),
        cmocka_unit_test(test_late_system_messages),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
