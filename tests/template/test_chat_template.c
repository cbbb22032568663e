/*
 * Tests for the chat-template interpreter against independent references:
 *  - the chat renderings in the fixtures (computed by transformers' apply_chat_template),
 *  - the real Qwen3 and Llama 3 templates on edge conversations (edge_cases.json, rendered
 *    by jinja2 with transformers' environment; see gen_jinja_cases.py),
 *  - many small language snippets (jinja_cases.inc, rendered by jinja2),
 * plus error paths, limits and allocation-failure injection.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <cjson/cJSON.h>

#include "cairn/chat_template.h"

/* ---- helpers ---------------------------------------------------------------------------- */

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    buf[got] = '\0';
    if (len)
        *len = got;
    return buf;
}

static cJSON *read_json(const char *path)
{
    char *text = read_file(path, NULL);
    if (!text)
        fail_msg("cannot read %s", path);
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j)
        fail_msg("cannot parse %s", path);
    return j;
}

/* Directory of this source file, for edge_cases.json. */
static void here(char *out, size_t n, const char *name)
{
    const char *slash = strrchr(__FILE__, '/');
    int dir = slash ? (int)(slash - __FILE__) : 1;
    snprintf(out, n, "%.*s/%s", dir, slash ? __FILE__ : ".", name);
}

/* Renders src with ctx; returns the status, the text in *out (caller frees). */
static int render(const char *src, const cJSON *ctx, char **out, char *err, size_t errlen)
{
    cairn_chat_template_t *t = NULL;
    *out = NULL;
    int rc = cairn_chat_template_compile(src, strlen(src), &t, err, errlen);
    if (rc)
        return rc;
    size_t len = 0;
    rc = cairn_chat_template_render(t, ctx, out, &len, err, errlen);
    if (rc == 0)
        assert_int_equal(len, strlen(*out));
    cairn_chat_template_destroy(t);
    return rc;
}

static void expect_render(const char *src, const char *ctx_json, const char *expected)
{
    cJSON *ctx = ctx_json ? cJSON_Parse(ctx_json) : NULL;
    char *out, err[512];
    int rc = render(src, ctx, &out, err, sizeof err);
    if (rc)
        fail_msg("template %s\nfailed (%d): %s", src, rc, err);
    if (strcmp(out, expected) != 0)
        fail_msg("template %s\nexpected [%s]\n     got [%s]", src, expected, out);
    cairn_free(out);
    cJSON_Delete(ctx);
}

static int expect_error(const char *src, const char *ctx_json, int code, const char *needle)
{
    cJSON *ctx = ctx_json ? cJSON_Parse(ctx_json) : NULL;
    char *out = NULL, err[512];
    int rc = render(src, ctx, &out, err, sizeof err);
    cJSON_Delete(ctx);
    if (rc != code)
        fail_msg("template %s: expected status %d, got %d (%s)", src, code, rc, rc ? err : out);
    assert_null(out);
    if (needle && !strstr(err, needle))
        fail_msg("template %s: error [%s] lacks [%s]", src, err, needle);
    return rc;
}

/* ---- fixture renderings -------------------------------------------------------------------- */

/* The context transformers builds: messages, add_generation_prompt, kwargs, special tokens. */
static cJSON *chat_context(const cJSON *chat, const cJSON *config)
{
    cJSON *ctx = cJSON_CreateObject();
    cJSON_AddItemToObject(ctx, "messages", cJSON_Duplicate(cJSON_GetObjectItem(chat, "messages"), 1));
    cJSON_AddItemToObject(ctx, "add_generation_prompt",
                          cJSON_Duplicate(cJSON_GetObjectItem(chat, "add_generation_prompt"), 1));
    const cJSON *kw;
    cJSON_ArrayForEach(kw, cJSON_GetObjectItem(chat, "kwargs"))
        cJSON_AddItemToObject(ctx, kw->string, cJSON_Duplicate(kw, 1));
    static const char *const special[] = {"bos_token", "eos_token", "pad_token", "unk_token"};
    for (size_t i = 0; config && i < sizeof special / sizeof special[0]; i++) {
        const cJSON *v = cJSON_GetObjectItem(config, special[i]);
        if (cJSON_IsString(v))
            cJSON_AddStringToObject(ctx, special[i], v->valuestring);
    }
    return ctx;
}

static void check_reference(const char *tokenizer)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizers/%s/tokenizer_config.json", CAIRN_FIXTURES_DIR, tokenizer);
    cJSON *config = read_json(path);
    snprintf(path, sizeof path, "%s/tokenizers/%s/reference.json", CAIRN_FIXTURES_DIR, tokenizer);
    cJSON *ref = read_json(path);
    const char *src;
    assert_int_equal(cairn_chat_template_pick(cJSON_GetObjectItem(config, "chat_template"), NULL, &src), 0);
    cairn_chat_template_t *t;
    char err[512];
    assert_int_equal(cairn_chat_template_compile(src, strlen(src), &t, err, sizeof err), 0);
    int count = 0;
    const cJSON *chat;
    cJSON_ArrayForEach(chat, cJSON_GetObjectItem(ref, "chat"))
    {
        cJSON *ctx = chat_context(chat, config);
        char *out;
        size_t len;
        int rc = cairn_chat_template_render(t, ctx, &out, &len, err, sizeof err);
        if (rc)
            fail_msg("%s/%s: %s", tokenizer, cJSON_GetObjectItem(chat, "label")->valuestring, err);
        const char *want = cJSON_GetObjectItem(chat, "text")->valuestring;
        if (strcmp(out, want) != 0)
            fail_msg("%s/%s:\nexpected [%s]\n     got [%s]", tokenizer,
                     cJSON_GetObjectItem(chat, "label")->valuestring, want, out);
        cairn_free(out);
        cJSON_Delete(ctx);
        count++;
    }
    assert_int_equal(count, 4);
    cairn_chat_template_destroy(t);
    cJSON_Delete(ref);
    cJSON_Delete(config);
}

static void test_qwen3_reference(void **state) { (void)state; check_reference("qwen3"); }
static void test_llama3_reference(void **state) { (void)state; check_reference("llama3"); }

/* Every model directory's chat_template.jinja renders the shared tokenizer's chat exactly. */
static void test_model_templates(void **state)
{
    (void)state;
    static const char *const dirs[] = {"tokenizer", "llama", "llama31", "qwen3", "qwen3_f32",
                                       "gemma3", "lfm2", "qwen3_5"};
    char path[1024];
    snprintf(path, sizeof path, "%s/models/tokenizer/reference.json", CAIRN_FIXTURES_DIR);
    cJSON *ref = read_json(path);
    const cJSON *chat = cJSON_GetObjectItem(ref, "chat");
    cJSON *ctx = cJSON_CreateObject();
    cJSON_AddItemToObject(ctx, "messages", cJSON_Duplicate(cJSON_GetObjectItem(chat, "messages"), 1));
    cJSON_AddItemToObject(ctx, "add_generation_prompt",
                          cJSON_Duplicate(cJSON_GetObjectItem(chat, "add_generation_prompt"), 1));
    cJSON_AddStringToObject(ctx, "eos_token", "<|im_end|>");
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(path, sizeof path, "%s/models/%s/chat_template.jinja", CAIRN_FIXTURES_DIR, dirs[i]);
        char *src = read_file(path, NULL);
        if (!src)
            fail_msg("cannot read %s", path);
        char *out, err[512];
        if (render(src, ctx, &out, err, sizeof err))
            fail_msg("%s: %s", dirs[i], err);
        assert_string_equal(out, cJSON_GetObjectItem(chat, "text")->valuestring);
        cairn_free(out);
        free(src);
    }
    cJSON_Delete(ctx);
    cJSON_Delete(ref);
}

/* Real templates on conversations the fixtures do not cover, against jinja2's output. */
static void test_edge_conversations(void **state)
{
    (void)state;
    char path[1024];
    here(path, sizeof path, "edge_cases.json");
    cJSON *cases = read_json(path);
    cJSON *configs[2];
    static const char *const names[] = {"qwen3", "llama3"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/tokenizers/%s/tokenizer_config.json", CAIRN_FIXTURES_DIR, names[i]);
        configs[i] = read_json(path);
    }
    int count = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases)
    {
        const char *tok = cJSON_GetObjectItem(c, "tokenizer")->valuestring;
        const cJSON *cfg = configs[strcmp(tok, "qwen3") == 0 ? 0 : 1];
        const char *src = cJSON_GetObjectItem(cfg, "chat_template")->valuestring;
        char *out, err[512];
        if (render(src, cJSON_GetObjectItem(c, "context"), &out, err, sizeof err))
            fail_msg("%s/%s: %s", tok, cJSON_GetObjectItem(c, "label")->valuestring, err);
        const char *want = cJSON_GetObjectItem(c, "text")->valuestring;
        if (strcmp(out, want) != 0)
            fail_msg("%s/%s:\nexpected [%s]\n     got [%s]", tok, cJSON_GetObjectItem(c, "label")->valuestring,
                     want, out);
        cairn_free(out);
        count++;
    }
    assert_int_equal(count, 12);
    cJSON_Delete(configs[0]);
    cJSON_Delete(configs[1]);
    cJSON_Delete(cases);
}

/* ---- the language, against jinja2 ---------------------------------------------------------- */

static const struct {
    const char *src, *want;
} JINJA_CASES[] = {
#include "jinja_cases.inc"
};

static void test_jinja_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof JINJA_CASES / sizeof JINJA_CASES[0]; i++)
        expect_render(JINJA_CASES[i].src, JINJA_CASES_CONTEXT, JINJA_CASES[i].want);
}

/* Hand-checked semantics that matter for chat templates (each verified with jinja2 3.1.6). */
static void test_whitespace_control(void **state)
{
    (void)state;
    /* trim_blocks + lstrip_blocks */
    expect_render("  {% if true %}\n  x\n  {% endif %}\n", NULL, "  x\n");
    /* a single trailing newline of the source is dropped, others kept */
    expect_render("a\n\n", NULL, "a\n");
    expect_render("{{ 'a' }}\n{{ 'b' }}", NULL, "a\nb");
    /* {{- and -}} strip all whitespace, newlines included */
    expect_render("a  \n {{- 'b' -}} \n\n c", NULL, "abc");
    /* {%+ disables lstrip, +%} disables trim */
    expect_render("  {%+ if true %}y{% endif %}", NULL, "  y");
    expect_render("{% if true +%}\nx{% endif %}", NULL, "\nx");
    /* comments strip like blocks */
    expect_render("a\n  {# c #}\nb", NULL, "a\nb");
    /* \r\n is normalised */
    expect_render("{% if true %}\r\nx\r\n{% endif %}", NULL, "x\n");
}

static void test_loop_and_scope(void **state)
{
    (void)state;
    /* set inside a loop does not escape; namespace does */
    expect_render("{% set x = 0 %}{% for i in range(3) %}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}", NULL, "1110");
    expect_render("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
                  NULL, "3");
    expect_render("{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ b }}{% endfor %}{{ loop.index }}{% endfor %}",
                  NULL, "1x2y11x2y2");
    expect_render("{% for x in [] %}a{% else %}empty{% endfor %}", NULL, "empty");
    expect_render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{{ loop.last }}{% endfor %}", NULL,
                  "a1Falseb2True");
    expect_render("{% for i in range(10) if i is odd %}{{ loop.revindex }}{% endfor %}", NULL, "54321");
    expect_render("{% macro m(x) %}{{ loop is defined }}{{ x }}{% endmacro %}{% for i in [1] %}{{ m(i) }}{% endfor %}",
                  NULL, "False1");
}

static void test_undefined_and_none(void **state)
{
    (void)state;
    expect_render("[{{ missing }}][{{ missing | default('d') }}][{{ none }}][{{ missing is defined }}]", NULL,
                  "[][d][None][False]");
    expect_render("{{ m.content is defined }}{{ m.x is none }}", "{\"m\": {\"content\": \"c\", \"x\": null}}",
                  "TrueTrue");
    /* as in jinja2, an attribute of an undefined value is an error even under `is defined` */
    expect_error("{{ m.missing.deeper is defined }}", "{\"m\": {}}", CAIRN_ETEMPLATE, "'missing' is undefined");
    expect_render("{% if m.tool_calls %}yes{% else %}no{% endif %}", "{\"m\": {}}", "no");
}

static void test_tojson(void **state)
{
    (void)state;
    /* json.dumps(ensure_ascii=False): non-ASCII verbatim, insertion order, ", " and ": " */
    expect_render("{{ v | tojson }}", "{\"v\": {\"z\": \"\\u00e9\\n\\\"\", \"a\": [1, 2.5, true, null]}}",
                  "{\"z\": \"\xc3\xa9\\n\\\"\", \"a\": [1, 2.5, true, null]}");
    expect_render("{{ v | tojson(indent=2) }}", "{\"v\": {\"a\": [1], \"b\": {}}}",
                  "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}");
    expect_render("{{ '\\u2028<>&' | tojson }}", NULL, "\"\xe2\x80\xa8<>&\"");
}

/* ---- errors ------------------------------------------------------------------------------- */

static void test_raise_exception(void **state)
{
    (void)state;
    char path[1024];
    expect_error("{{ raise_exception('System message must be at the beginning.') }}", NULL, CAIRN_ETEMPLATE,
                 "System message must be at the beginning.");
    /* the exact text, without a position */
    cairn_chat_template_t *t;
    char err[128], *out;
    const char *src = "{% if true %}{{ raise_exception('No user query found in messages.') }}{% endif %}";
    assert_int_equal(cairn_chat_template_compile(src, strlen(src), &t, err, sizeof err), 0);
    assert_int_equal(cairn_chat_template_render(t, NULL, &out, NULL, err, sizeof err), CAIRN_ETEMPLATE);
    assert_string_equal(err, "No user query found in messages.");
    assert_null(out);
    cairn_chat_template_destroy(t);
    (void)path;
}

static void test_errors(void **state)
{
    (void)state;
    /* unsupported constructs name themselves and their position */
    expect_error("ab\n  {% include 'x.jinja' %}", NULL, CAIRN_EUNSUPPORTED, "unsupported tag 'include' at line 2, column 6");
    expect_error("{% for x in l recursive %}{% endfor %}", NULL, CAIRN_EUNSUPPORTED, "recursive");
    expect_error("{{ 'x' | wordwrap(3) }}", NULL, CAIRN_EUNSUPPORTED, "unsupported filter 'wordwrap' at line 1");
    expect_error("{{ 1 is foo }}", NULL, CAIRN_EUNSUPPORTED, "unsupported test 'foo'");
    expect_error("{{ 'x'.zfill(3) }}", NULL, CAIRN_EUNSUPPORTED, "unsupported string method 'zfill'");
    /* syntax errors */
    expect_error("{% if x %}a", NULL, CAIRN_ETEMPLATE, "missing '{% endif %}'");
    expect_error("{{ 1 + }}", NULL, CAIRN_ETEMPLATE, "line 1, column 8");
    expect_error("{{ 'abc }}", NULL, CAIRN_ETEMPLATE, "unterminated string");
    expect_error("{% frobnicate %}", NULL, CAIRN_ETEMPLATE, "unknown tag 'frobnicate'");
    expect_error("{# open", NULL, CAIRN_ETEMPLATE, "unclosed comment");
    /* runtime errors, as jinja2 raises them */
    expect_error("{{ missing.attr }}", NULL, CAIRN_ETEMPLATE, "'missing' is undefined");
    expect_error("{{ m.content.startswith('x') }}", "{\"m\": {}}", CAIRN_ETEMPLATE, "'content' is undefined");
    expect_error("{{ 'a' + 1 }}", NULL, CAIRN_ETEMPLATE, "unsupported operand");
    /* '~' binds tighter than '+' / '-' (jinja2 raises on both; with the levels swapped they
     * would render 'x2' and '2x'), the only precedence the rendered cases cannot show */
    expect_error("{{ 'x' ~ 5 - 3 }}", NULL, CAIRN_ETEMPLATE, "unsupported operand");
    expect_error("{{ 5 - 3 ~ 'x' }}", NULL, CAIRN_ETEMPLATE, "unsupported operand");
    expect_error("{{ 1 / 0 }}", NULL, CAIRN_ETEMPLATE, "division by zero");
    expect_error("{{ x | tojson }}", "{}", CAIRN_ETEMPLATE, "not JSON serializable");
    expect_error("{% break %}", NULL, CAIRN_ETEMPLATE, "outside of a loop");
    expect_error("{% set x = 1 %}{% set x.y = 2 %}", NULL, CAIRN_ETEMPLATE, "non-namespace");
}

static void test_limits(void **state)
{
    (void)state;
    /* runaway loops, output and recursion end with CAIRN_ERANGE */
    cairn_chat_template_t *t;
    char err[256], *out;
    const char *src = "{% for i in range(1000) %}{% for j in range(1000) %}{{ i }}{% endfor %}{% endfor %}";
    assert_int_equal(cairn_chat_template_compile(src, strlen(src), &t, err, sizeof err), 0);
    cairn_chat_template_set_limits(t, 0, 10000);
    assert_int_equal(cairn_chat_template_render(t, NULL, &out, NULL, err, sizeof err), CAIRN_ERANGE);
    assert_non_null(strstr(err, "step limit"));
    cairn_chat_template_set_limits(t, 1000, 100000000);
    assert_int_equal(cairn_chat_template_render(t, NULL, &out, NULL, err, sizeof err), CAIRN_ERANGE);
    cairn_chat_template_destroy(t);
    expect_error("{{ 'x' * 1000000000000 }}", NULL, CAIRN_ERANGE, NULL);
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, CAIRN_ERANGE, "nested too deeply");
    expect_error("{{ 9223372036854775807 + 1 }}", NULL, CAIRN_ERANGE, "overflow");
    /* deep nesting is refused by the parser, not by the stack */
    char deep[4096] = "{{ ";
    for (int i = 0; i < 1000; i++)
        strcat(deep, "(");
    strcat(deep, "1");
    for (int i = 0; i < 1000; i++)
        strcat(deep, ")");
    strcat(deep, " }}");
    assert_int_equal(cairn_chat_template_compile(deep, strlen(deep), &t, err, sizeof err), CAIRN_ERANGE);
}

static void test_api(void **state)
{
    (void)state;
    cairn_chat_template_t *t = NULL;
    char err[128], *out;
    assert_int_equal(cairn_chat_template_compile(NULL, 3, &t, err, sizeof err), CAIRN_EINVAL);
    assert_int_equal(cairn_chat_template_compile("", 0, &t, err, sizeof err), 0);
    assert_int_equal(cairn_chat_template_render(t, NULL, &out, NULL, err, sizeof err), 0);
    assert_string_equal(out, "");
    cairn_free(out);
    cJSON *arr = cJSON_CreateArray();
    assert_int_equal(cairn_chat_template_render(t, arr, &out, NULL, err, sizeof err), CAIRN_EINVAL);
    cairn_chat_template_destroy(t);
    cairn_chat_template_destroy(NULL);
    /* the source need not be NUL-terminated */
    assert_int_equal(cairn_chat_template_compile("{{ 1 }}xyz", 7, &t, NULL, 0), 0);
    assert_int_equal(cairn_chat_template_render(t, NULL, &out, NULL, NULL, 0), 0);
    assert_string_equal(out, "1");
    cairn_free(out);
    cairn_chat_template_destroy(t);
    /* pick: a string, or a list of named templates */
    const char *src;
    cJSON *named = cJSON_Parse("[{\"name\": \"default\", \"template\": \"D\"}, {\"name\": \"tool_use\", \"template\": \"T\"}]");
    assert_int_equal(cairn_chat_template_pick(named, NULL, &src), 0);
    assert_string_equal(src, "D");
    assert_int_equal(cairn_chat_template_pick(named, "tool_use", &src), 0);
    assert_string_equal(src, "T");
    assert_int_equal(cairn_chat_template_pick(named, "rag", &src), CAIRN_ENOENT);
    assert_int_equal(cairn_chat_template_pick(arr, NULL, &src), CAIRN_ENOENT);
    cJSON *num = cJSON_CreateNumber(1);
    assert_int_equal(cairn_chat_template_pick(num, NULL, &src), CAIRN_EFORMAT);
    cJSON_Delete(num);
    cJSON_Delete(named);
    cJSON_Delete(arr);
}

/* Every allocation of compile and render can fail: the call reports CAIRN_ENOMEM, leaks
 * nothing (ASan checks) and a later call succeeds. */
static void test_alloc_failures(void **state)
{
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizers/qwen3/tokenizer_config.json", CAIRN_FIXTURES_DIR);
    cJSON *config = read_json(path);
    snprintf(path, sizeof path, "%s/tokenizers/qwen3/reference.json", CAIRN_FIXTURES_DIR);
    cJSON *ref = read_json(path);
    const cJSON *tools_chat = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "chat"), 3);
    cJSON *ctx = chat_context(tools_chat, config);
    const char *src = cJSON_GetObjectItem(config, "chat_template")->valuestring;
    const char *want = cJSON_GetObjectItem(tools_chat, "text")->valuestring;
    int failures = 0;
    for (long k = 0; k < 100000; k++) {
        cairn_chat_template_t *t = NULL;
        char *out = NULL, err[256];
        cairn_alloc_fail_after(k, false);
        int rc = cairn_chat_template_compile(src, strlen(src), &t, err, sizeof err);
        if (rc == 0) {
            rc = cairn_chat_template_render(t, ctx, &out, NULL, err, sizeof err);
            cairn_chat_template_destroy(t);
        }
        cairn_alloc_fail_after(-1, false);
        if (rc == 0) {
            assert_string_equal(out, want);
            cairn_free(out);
            break;
        }
        assert_int_equal(rc, CAIRN_ENOMEM);
        assert_null(out);
        failures++;
    }
    assert_true(failures > 10);
    cJSON_Delete(ctx);
    cJSON_Delete(ref);
    cJSON_Delete(config);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_reference),
        cmocka_unit_test(test_llama3_reference),
        cmocka_unit_test(test_model_templates),
        cmocka_unit_test(test_edge_conversations),
        cmocka_unit_test(test_jinja_cases),
        cmocka_unit_test(test_whitespace_control),
        cmocka_unit_test(test_loop_and_scope),
        cmocka_unit_test(test_undefined_and_none),
        cmocka_unit_test(test_tojson),
        cmocka_unit_test(test_raise_exception),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_api),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
