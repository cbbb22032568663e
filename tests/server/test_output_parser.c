/*
 * test_output_parser.c — the output parser (src/server/output/): reasoning blocks, the
 * Hermes, Qwen3-Coder XML, Llama 3 JSON, pythonic and tool_code tool-call formats,
 * malformed calls kept as text, and independence from how the text is cut (every input
 * fed whole, byte by byte and in every two-piece split gives the same events).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/output/output.h"

/* Events rendered as one string: T[text] R[reasoning] B0[name] A0[args] E0; adjacent
 * TEXT, REASONING or ARGS pieces merge, so the string does not depend on the chunking. */
typedef struct {
    char s[8192];
    size_t n;
    int last;
} rec_t;

static int record(void *ctx, const out_event_t *ev)
{
    rec_t *r = ctx;
    char head[32];
    bool merge = (ev->kind == OUT_TEXT || ev->kind == OUT_REASONING || ev->kind == OUT_TOOL_ARGS)
                 && r->last == (int)ev->kind;
    if (merge)
        r->n--; /* reopen the bracket */
    else if (ev->kind == OUT_TEXT)
        snprintf(head, sizeof head, "T[");
    else if (ev->kind == OUT_REASONING)
        snprintf(head, sizeof head, "R[");
    else if (ev->kind == OUT_TOOL_BEGIN)
        snprintf(head, sizeof head, "B%d[", ev->tool);
    else if (ev->kind == OUT_TOOL_ARGS)
        snprintf(head, sizeof head, "A%d[", ev->tool);
    else
        snprintf(head, sizeof head, "E%d[", ev->tool);
    size_t hl = merge ? 0 : strlen(head);
    assert_true(r->n + hl + ev->len + 2 < sizeof r->s);
    memcpy(r->s + r->n, head, hl);
    r->n += hl;
    memcpy(r->s + r->n, ev->text, ev->len);
    r->n += ev->len;
    r->s[r->n++] = ']';
    r->s[r->n] = '\0';
    r->last = (int)ev->kind;
    return 0;
}

/* Runs text through a parser, cut at the given offsets (sorted, -1 terminated). */
static void run_cut(const output_options_t *o, const char *text, const int *cuts, rec_t *r,
                    int *n_tools)
{
    memset(r, 0, sizeof *r);
    r->last = -1;
    output_parser_t *p;
    assert_int_equal(output_parser_create(o, &p), 0);
    size_t len = strlen(text), at = 0;
    for (int i = 0; cuts && cuts[i] >= 0; i++) {
        assert_int_equal(output_parser_feed(p, text + at, (size_t)cuts[i] - at, record, r), 0);
        at = (size_t)cuts[i];
    }
    assert_int_equal(output_parser_feed(p, text + at, len - at, record, r), 0);
    assert_int_equal(output_parser_finish(p, record, r), 0);
    if (n_tools)
        *n_tools = output_parser_tool_calls(p);
    output_parser_destroy(p);
}

/* The events of text, checked to be the same for every chunking; returns them. */
static const char *parse_all(const output_options_t *o, const char *text, int *n_tools)
{
    static rec_t whole;
    rec_t other;
    run_cut(o, text, NULL, &whole, n_tools);
    int len = (int)strlen(text);
    int *bytes = malloc(sizeof(int) * (size_t)(len + 1));
    for (int i = 0; i < len; i++)
        bytes[i] = i + 1 < len ? i + 1 : -1;
    bytes[len > 0 ? len - 1 : 0] = -1;
    run_cut(o, text, bytes, &other, NULL);
    assert_string_equal(other.s, whole.s);
    free(bytes);
    for (int c = 1; c < len; c++) {
        int cut[2] = {c, -1};
        run_cut(o, text, cut, &other, NULL);
        assert_string_equal(other.s, whole.s);
    }
    return whole.s;
}

static output_options_t opts(bool reasoning, const char *tools)
{
    output_options_t o = {.reasoning = reasoning, .in_reasoning = false,
                          .tools = tools ? tool_format_find(tools) : NULL};
    if (tools)
        assert_non_null(o.tools);
    return o;
}

static void test_plain_text(void **state)
{
    output_options_t o = opts(false, NULL);
    assert_string_equal(parse_all(&o, "Hello <think> x", NULL), "T[Hello <think> x]");
    o = opts(true, "hermes");
    assert_string_equal(parse_all(&o, "Hello, world", NULL), "T[Hello, world]");
    assert_string_equal(parse_all(&o, "<thin", NULL), "T[<thin]");
    assert_string_equal(parse_all(&o, "a <tool_ca", NULL), "T[a <tool_ca]");
    assert_string_equal(parse_all(&o, "", NULL), "");
}

static void test_reasoning(void **state)
{
    output_options_t o = opts(true, NULL);
    assert_string_equal(parse_all(&o, "<think>\nplan it\n</think>\n\nThe answer.", NULL),
                        "R[plan it]T[The answer.]");
    /* Newlines inside the reasoning stay; only those next to the tags go. */
    assert_string_equal(parse_all(&o, "<think>\na\n\nb\n</think>c", NULL), "R[a\n\nb]T[c]");
    /* Unfinished reasoning (max_tokens) stays reasoning, trailing newlines included. */
    assert_string_equal(parse_all(&o, "<think>\nstill going\n", NULL), "R[still going\n]");
    /* Empty block (enable_thinking false in a template that writes it in the output). */
    assert_string_equal(parse_all(&o, "<think>\n\n</think>\n\nHi", NULL), "T[Hi]");
    /* Only a block at the start is reasoning. */
    assert_string_equal(parse_all(&o, "Hi <think>x</think>", NULL), "T[Hi <think>x</think>]");
    /* The prompt opened the block. */
    o.in_reasoning = true;
    assert_string_equal(parse_all(&o, "\nthinking\n</think>\n\nDone", NULL),
                        "R[thinking]T[Done]");
}

static void test_hermes_calls(void **state)
{
    output_options_t o = opts(true, "hermes");
    int n = 0;
    const char *txt = "<think>\nweather\n</think>\n\nLet me check.\n<tool_call>\n"
                      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": [1, 2]}}\n"
                      "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
                      "</tool_call>";
    assert_string_equal(parse_all(&o, txt, &n),
                        "R[weather]T[Let me check.\n]B0[get_weather]"
                        "A0[{\"city\": \"Paris\", \"n\": [1, 2]}]E0[]B1[get_time]A1[{}]E1[]");
    assert_int_equal(n, 2);
    /* Arguments as a string holding JSON; parameters instead of arguments; no arguments. */
    assert_string_equal(parse_all(&o, "<tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}</tool_call>", NULL),
                        "B0[f]A0[{\"a\":1}]E0[]");
    assert_string_equal(parse_all(&o, "<tool_call>{\"name\":\"f\",\"parameters\":{\"a\":1}}</tool_call>", NULL),
                        "B0[f]A0[{\"a\":1}]E0[]");
    assert_string_equal(parse_all(&o, "<tool_call>{\"name\":\"f\"}</tool_call>", NULL),
                        "B0[f]A0[{}]E0[]");
    /* Text after the calls is kept, the whitespace between calls and at the end is not. */
    assert_string_equal(parse_all(&o, "<tool_call>{\"name\":\"f\"}</tool_call>\n\nand more\n", NULL),
                        "B0[f]A0[{}]E0[]T[\n\nand more\n]");
    assert_string_equal(parse_all(&o, "<tool_call>{\"name\":\"f\"}</tool_call>\n\n", NULL),
                        "B0[f]A0[{}]E0[]");
}

static void test_hermes_malformed_is_text(void **state)
{
    output_options_t o = opts(false, "hermes");
    int n = 1;
    /* Not JSON, no name, a name that is not a string, arguments of the wrong type. */
    assert_string_equal(parse_all(&o, "<tool_call>{oops}</tool_call> x", &n),
                        "T[<tool_call>{oops}</tool_call> x]");
    assert_int_equal(n, 0);
    assert_string_equal(parse_all(&o, "<tool_call>{\"arguments\":{}}</tool_call>", NULL),
                        "T[<tool_call>{\"arguments\":{}}</tool_call>]");
    assert_string_equal(parse_all(&o, "<tool_call>{\"name\":3}</tool_call>", NULL),
                        "T[<tool_call>{\"name\":3}</tool_call>]");
    assert_string_equal(parse_all(&o, "<tool_call>{\"name\":\"f\",\"arguments\":[1]}</tool_call>", NULL),
                        "T[<tool_call>{\"name\":\"f\",\"arguments\":[1]}</tool_call>]");
    /* Cut off before the close marker: a complete object is still a call... */
    assert_string_equal(parse_all(&o, "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":1}}\n", NULL),
                        "B0[f]A0[{\"a\":1}]E0[]");
    /* ...a partial one is the text it was. */
    assert_string_equal(parse_all(&o, "<tool_call>\n{\"name\":\"f\",\"argu", NULL),
                        "T[<tool_call>\n{\"name\":\"f\",\"argu]");
}

/* Hermes calls stream: the name and the arguments go out as they are generated. */
static void test_hermes_streams_arguments(void **state)
{
    output_options_t o = opts(false, "hermes");
    output_parser_t *p;
    rec_t r;
    memset(&r, 0, sizeof r);
    r.last = -1;
    assert_int_equal(output_parser_create(&o, &p), 0);
    const char *head = "Hi<tool_call>\n{\"name\": \"write\", \"arguments\": {\"text\": \"line one";
    assert_int_equal(output_parser_feed(p, head, strlen(head), record, &r), 0);
    assert_string_equal(r.s, "T[Hi]B0[write]A0[{\"text\": \"line one]");
    const char *rest = ", line two\"}}\n</tool_call>";
    assert_int_equal(output_parser_feed(p, rest, strlen(rest), record, &r), 0);
    assert_int_equal(output_parser_finish(p, record, &r), 0);
    assert_string_equal(r.s, "T[Hi]B0[write]A0[{\"text\": \"line one, line two\"}]E0[]");
    output_parser_destroy(p);

    /* The close marker inside a string does not end the arguments. */
    assert_string_equal(parse_all(&o, "<tool_call>{\"name\":\"w\",\"arguments\":{\"s\":\"</tool_call>\"}}</tool_call>", NULL),
                        "B0[w]A0[{\"s\":\"</tool_call>\"}]E0[]");
    /* Escaped quotes and nesting. */
    assert_string_equal(parse_all(&o, "<tool_call>{\"name\":\"w\",\"arguments\":{\"s\":\"a\\\"}\",\"n\":[{\"x\":[1]}]}}</tool_call>", NULL),
                        "B0[w]A0[{\"s\":\"a\\\"}\",\"n\":[{\"x\":[1]}]}]E0[]");
    /* Junk after the arguments stays text; a call cut off mid-arguments still ends. */
    assert_string_equal(parse_all(&o, "<tool_call>{\"name\":\"f\",\"arguments\":{}} extra</tool_call>", NULL),
                        "B0[f]A0[{}]E0[]T[extra]");
    assert_string_equal(parse_all(&o, "<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":1", NULL),
                        "B0[f]A0[{\"a\":1]E0[]");
    /* Another key order is not streamed, but parsed whole. */
    assert_string_equal(parse_all(&o, "<tool_call>{\"arguments\":{\"a\":1},\"name\":\"f\"}</tool_call>", NULL),
                        "B0[f]A0[{\"a\":1}]E0[]");
}

static void test_llama3_json(void **state)
{
    output_options_t o = opts(false, "llama3_json");
    int n = 0;
    assert_string_equal(parse_all(&o, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", &n),
                        "B0[get_weather]A0[{\"city\": \"Paris\"}]E0[]");
    assert_int_equal(n, 1);
    assert_string_equal(parse_all(&o, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1}}", &n),
                        "B0[a]A0[{}]E0[]B1[b]A1[{\"x\": 1}]E1[]");
    assert_int_equal(n, 2);
    /* JSON that is not a call, and calls not at the start, stay text. */
    assert_string_equal(parse_all(&o, "{\"name\": \"a\"} trailing words", NULL),
                        "T[{\"name\": \"a\"} trailing words]");
    assert_string_equal(parse_all(&o, "{\"x\": 1}", NULL), "T[{\"x\": 1}]");
    assert_string_equal(parse_all(&o, "Sure: {\"name\": \"a\", \"parameters\": {}}", NULL),
                        "T[Sure: {\"name\": \"a\", \"parameters\": {}}]");
}

static void test_pythonic(void **state)
{
    output_options_t o = opts(false, "pythonic");
    int n = 0;
    assert_string_equal(
        parse_all(&o, "Checking.<|tool_call_start|>[get_weather(city=\"Paris\", days=3), "
                      "f(a='it\\'s', b=[True, None, 1.5], c={'k': (1, 2)})]<|tool_call_end|>", &n),
        "T[Checking.]B0[get_weather]A0[{\"city\":\"Paris\",\"days\":3}]E0[]"
        "B1[f]A1[{\"a\":\"it's\",\"b\":[true,null,1.5],\"c\":{\"k\":[1,2]}}]E1[]");
    assert_int_equal(n, 2);
    assert_string_equal(parse_all(&o, "<|tool_call_start|>[g()]<|tool_call_end|>", NULL),
                        "B0[g]A0[{}]E0[]");
    /* Positional arguments, expressions and bad numbers are not calls. */
    assert_string_equal(parse_all(&o, "<|tool_call_start|>[g(1)]<|tool_call_end|>", NULL),
                        "T[<|tool_call_start|>[g(1)]<|tool_call_end|>]");
    assert_string_equal(parse_all(&o, "<|tool_call_start|>[g(a=x+1)]<|tool_call_end|>", NULL),
                        "T[<|tool_call_start|>[g(a=x+1)]<|tool_call_end|>]");
    assert_string_equal(parse_all(&o, "<|tool_call_start|>[g(a=1.)]<|tool_call_end|>", NULL),
                        "T[<|tool_call_start|>[g(a=1.)]<|tool_call_end|>]");
}

static void test_tool_code(void **state)
{
    output_options_t o = opts(false, "tool_code");
    int n = 0;
    assert_string_equal(parse_all(&o, "Let me look.\n```tool_code\nget_weather(city=\"Paris\")\n```\n", &n),
                        "T[Let me look.\n]B0[get_weather]A0[{\"city\":\"Paris\"}]E0[]");
    assert_int_equal(n, 1);
    /* Another fence is text; a fence that is not a call is text. */
    assert_string_equal(parse_all(&o, "```python\nx = 1\n```", NULL), "T[```python\nx = 1\n```]");
    assert_string_equal(parse_all(&o, "```tool_code\nprint(1)\n```", NULL),
                        "T[```tool_code\nprint(1)\n```]");
}

/* Qwen3-Coder / Qwen3.5 XML calls: values typed by the request's schema. */
static void test_qwen3_coder(void **state)
{
    cJSON *tools = cJSON_Parse(
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"
        "\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
        "\"days\":{\"type\":\"integer\"},\"metric\":{\"type\":\"boolean\"},"
        "\"where\":{\"type\":\"object\"},\"zip\":{\"type\":\"string\"},"
        "\"limit\":{\"type\":[\"number\",\"null\"]}}}}}]");
    assert_non_null(tools);
    output_options_t o = opts(true, "qwen3_coder");
    o.tool_schemas = tools;
    int n = 0;
    assert_string_equal(
        parse_all(&o, "<think>\nplan\n</think>\n\nChecking.\n<tool_call>\n<function=get_weather>\n"
                      "<parameter=city>\nSan \"Fran\"\ncisco\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
                      "<parameter=metric>\ntrue\n</parameter>\n<parameter=zip>\n01234\n</parameter>\n"
                      "<parameter=where>\n{\"lat\": 1.5}\n</parameter>\n<parameter=limit>\nnull\n</parameter>\n"
                      "<parameter=extra>\n7\n</parameter>\n</function>\n</tool_call>", &n),
        "R[plan]T[Checking.\n]B0[get_weather]A0[{\"city\":\"San \\\"Fran\\\"\\ncisco\",\"days\":3,"
        "\"metric\":true,\"zip\":\"01234\",\"where\":{\"lat\":1.5},\"limit\":null,\"extra\":\"7\"}]E0[]");
    assert_int_equal(n, 1);
    /* A value that is not its declared type stays a string; no parameters is {}. */
    assert_string_equal(parse_all(&o, "<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n"
                                      "</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
                                      "<function=now>\n</function>\n</tool_call>", &n),
                        "B0[get_weather]A0[{\"days\":\"three\"}]E0[]B1[now]A1[{}]E1[]");
    assert_int_equal(n, 2);
    /* Without a schema every value is a string. */
    o.tool_schemas = NULL;
    assert_string_equal(parse_all(&o, "<tool_call><function=f><parameter=a>1</parameter></function></tool_call>", NULL),
                        "B0[f]A0[{\"a\":\"1\"}]E0[]");
    /* The hermes JSON form in the same section is a call too. */
    assert_string_equal(parse_all(&o, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>", NULL),
                        "B0[f]A0[{\"a\": 1}]E0[]");
    /* The call streams: it begins at the function tag, each parameter goes out as it
     * closes. */
    output_parser_t *p;
    rec_t r;
    memset(&r, 0, sizeof r);
    r.last = -1;
    o.tool_schemas = tools;
    assert_int_equal(output_parser_create(&o, &p), 0);
    const char *part = "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n"
                       "<parameter=city>\nPar";
    assert_int_equal(output_parser_feed(p, part, strlen(part), record, &r), 0);
    assert_string_equal(r.s, "B0[get_weather]A0[{\"days\":3]");
    part = "is\n</parameter>\n</function>\n</tool_call>";
    assert_int_equal(output_parser_feed(p, part, strlen(part), record, &r), 0);
    assert_string_equal(r.s, "B0[get_weather]A0[{\"days\":3,\"city\":\"Paris\"}]E0[]");
    assert_int_equal(output_parser_finish(p, record, &r), 0);
    output_parser_destroy(p);
    o.tool_schemas = NULL;
    /* Once begun, a call always ends with a valid object: at the close marker without
     * </function>, before text that is not a parameter, at the end of the output (an
     * unfinished parameter is text). A repeated parameter is passed on as written. */
    assert_string_equal(parse_all(&o, "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call>x", &n),
                        "B0[f]A0[{\"a\":\"1\"}]E0[]T[x]");
    assert_string_equal(parse_all(&o, "<tool_call>\n<function=f>\n</function>\ntrailing\n</tool_call>", &n),
                        "B0[f]A0[{}]E0[]T[trailing\n]");
    assert_string_equal(parse_all(&o, "<tool_call>\n<function=f>\nnot a parameter</tool_call>", &n),
                        "B0[f]A0[{}]E0[]T[not a parameter]");
    assert_string_equal(parse_all(&o, "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>", &n),
                        "B0[f]A0[{}]E0[]T[<parameter=a>\n1\n</function>\n]");
    assert_string_equal(parse_all(&o, "<tool_call><function=f><parameter=a>1</parameter><parameter=a>2</parameter></function></tool_call>", &n),
                        "B0[f]A0[{\"a\":\"1\",\"a\":\"2\"}]E0[]");
    assert_int_equal(n, 1);
    /* Malformed before the call begins: the text it was. */
    const char *bad[] = {
        "<tool_call>\n<function=>\n</function>\n</tool_call>",
        "<tool_call>\nfunction=f\n</tool_call>",
        "<tool_call>\n<function=f",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char want[512];
        snprintf(want, sizeof want, "T[%s]", bad[i]);
        assert_string_equal(parse_all(&o, bad[i], &n), want);
        assert_int_equal(n, 0);
    }
    cJSON_Delete(tools);
}

static void test_detection(void **state)
{
    assert_string_equal(
        tool_format_detect("<tool_call>\\n<function=example_function_name>\\n<parameter=")->name,
        "qwen3_coder");
    assert_string_equal(tool_format_detect("... <tool_call>\\n{\"name\": ...")->name, "hermes");
    assert_string_equal(tool_format_detect("List of tools: <|tool_list_start|>[")->name, "pythonic");
    assert_string_equal(
        tool_format_detect("{\"name\": function name, \"parameters\": dictionary of argument name and its value}")->name,
        "llama3_json");
    assert_null(tool_format_detect("{{ messages }}"));
    assert_null(tool_format_find("nope"));
    assert_true(output_template_reasons("<think>\\n\\n</think>"));
    assert_false(output_template_reasons("<|im_start|>"));
}

/* A callback error stops the parser and comes back from feed. */
static int refuse(void *ctx, const out_event_t *ev)
{
    (void)ctx;
    (void)ev;
    return CAIRN_ENOMEM;
}

static void test_callback_error(void **state)
{
    output_options_t o = opts(true, "hermes");
    output_parser_t *p;
    assert_int_equal(output_parser_create(&o, &p), 0);
    assert_int_equal(output_parser_feed(p, "hello", 5, refuse, NULL), CAIRN_ENOMEM);
    output_parser_destroy(p);
    assert_int_equal(output_parser_create(&o, &p), 0);
    assert_int_equal(output_parser_feed(p, "<tool_call>{\"name\":\"f\"}", 24, refuse, NULL), 0);
    assert_int_equal(output_parser_finish(p, refuse, NULL), CAIRN_ENOMEM);
    assert_int_equal(output_parser_feed(p, "x", 1, refuse, NULL), CAIRN_ESTATE);
    output_parser_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_text),
        cmocka_unit_test(test_reasoning),
        cmocka_unit_test(test_hermes_calls),
        cmocka_unit_test(test_hermes_malformed_is_text),
        cmocka_unit_test(test_hermes_streams_arguments),
        cmocka_unit_test(test_llama3_json),
        cmocka_unit_test(test_pythonic),
        cmocka_unit_test(test_tool_code),
        cmocka_unit_test(test_qwen3_coder),
        cmocka_unit_test(test_detection),
        cmocka_unit_test(test_callback_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
