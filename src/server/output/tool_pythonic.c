/*
 * tool_pythonic.c — tool calls as a Python list of calls (docs/API.md names the models):
 *
 *     <|tool_call_start|>[get_weather(city="Paris"), get_time(tz='CET')]<|tool_call_end|>
 *
 * Each call is NAME(KEY=VALUE, ...) with Python literal values: strings ('...' or "..."
 * with backslash escapes), numbers, True/False/None, lists, tuples and dicts. The
 * arguments are reported as the equivalent JSON object ({"city": "Paris"}); anything else
 * (positional arguments, expressions) makes the section text. Detected by
 * "<|tool_list_start|>" in the template.
 *
 * Thread-safety: pure.
 */
#include <stdio.h>
#include <string.h>

#include "server/api/api.h"
#include "server/output/output.h"
#include "util/json.h"

typedef struct {
    const char *s;
    size_t n, i;
    api_buf_t out;  /* the JSON of the current call's arguments */
    int depth;
} py_t;

#define PY_MAX_DEPTH 64

static void ws(py_t *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\n' || p->s[p->i] == '\r'
                           || p->s[p->i] == '\t'))
        p->i++;
}

static bool eat(py_t *p, char c)
{
    ws(p);
    if (p->i < p->n && p->s[p->i] == c) {
        p->i++;
        return true;
    }
    return false;
}

static bool ident_char(char c, bool first)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
           || (!first && ((c >= '0' && c <= '9') || c == '.' || c == '-'));
}

/* An identifier at the cursor: [at, at+len). */
static bool ident(py_t *p, const char **at, size_t *len)
{
    ws(p);
    size_t b = p->i;
    while (p->i < p->n && ident_char(p->s[p->i], p->i == b))
        p->i++;
    *at = p->s + b;
    *len = p->i - b;
    return *len > 0;
}

static int put(py_t *p, const char *s, size_t n) { return api_buf_append(&p->out, s, n); }

/* A JSON string of raw bytes s[0..n). */
static int put_json_string(py_t *p, const char *s, size_t n)
{
    int rc = put(p, "\"", 1);
    for (size_t k = 0; !rc && k < n; k++) {
        unsigned char c = (unsigned char)s[k];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            rc = put(p, e, 2);
        } else if (c == '\n') {
            rc = put(p, "\\n", 2);
        } else if (c == '\t') {
            rc = put(p, "\\t", 2);
        } else if (c < 0x20) {
            rc = api_buf_printf(&p->out, "\\u%04x", c);
        } else {
            rc = put(p, (const char *)&c, 1);
        }
    }
    return rc ? rc : put(p, "\"", 1);
}

/* A Python string literal at the cursor, as a JSON string. */
static int py_string(py_t *p)
{
    char q = p->s[p->i++];
    api_buf_t raw = {0};
    int rc = CAIRN_EFORMAT;
    while (p->i < p->n && p->s[p->i] != q) {
        char c = p->s[p->i++];
        int arc = 0;
        if (c == '\\') {
            if (p->i >= p->n)
                goto out;
            char e = p->s[p->i++];
            const char *rep = e == 'n' ? "\n" : e == 't' ? "\t" : e == 'r' ? "\r" : NULL;
            if (rep)
                arc = api_buf_append(&raw, rep, 1);
            else if (e == '\\' || e == '\'' || e == '"')
                arc = api_buf_append(&raw, &e, 1);
            else
                goto out; /* \x, \u, octal: not worth guessing */
        } else if (c == '\n') {
            goto out;
        } else {
            arc = api_buf_append(&raw, &c, 1);
        }
        if (arc) {
            rc = arc;
            goto out;
        }
    }
    if (p->i >= p->n)
        goto out;
    p->i++;
    rc = put_json_string(p, raw.p, raw.len);
out:
    api_buf_free(&raw);
    return rc;
}

static int py_value(py_t *p);

static size_t digits(const char *s, size_t n, size_t i)
{
    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++;
    return i;
}

/* Whether s[0..n) is a JSON number (Python's 1., .5 and 1_000 are not). */
static bool json_number(const char *s, size_t n)
{
    size_t i = n && s[0] == '-' ? 1 : 0, d;
    if (i < n && s[i] == '0')
        i++;
    else if ((d = digits(s, n, i)) > i)
        i = d;
    else
        return false;
    if (i < n && s[i] == '.') {
        if ((d = digits(s, n, i + 1)) == i + 1)
            return false;
        i = d;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        if ((d = digits(s, n, i)) == i)
            return false;
        i = d;
    }
    return i == n;
}

/* Items of a list or tuple (closed by close) or of a dict, as JSON. */
static int py_items(py_t *p, char close, bool dict)
{
    int rc = put(p, dict ? "{" : "[", 1);
    bool first = true;
    while (!rc) {
        if (eat(p, close))
            return put(p, dict ? "}" : "]", 1);
        if (!first && !eat(p, ','))
            return CAIRN_EFORMAT;
        if (!first && eat(p, close))
            return put(p, dict ? "}" : "]", 1); /* trailing comma */
        if (!first && (rc = put(p, ",", 1)))
            return rc;
        first = false;
        ws(p);
        if (dict) {
            if (p->i >= p->n || (p->s[p->i] != '"' && p->s[p->i] != '\''))
                return CAIRN_EFORMAT; /* JSON keys are strings */
            if ((rc = py_string(p)))
                return rc;
            if (!eat(p, ':'))
                return CAIRN_EFORMAT;
            if ((rc = put(p, ":", 1)))
                return rc;
        }
        rc = py_value(p);
    }
    return rc;
}

static int py_value(py_t *p)
{
    ws(p);
    if (p->i >= p->n || ++p->depth > PY_MAX_DEPTH)
        return CAIRN_EFORMAT;
    char c = p->s[p->i];
    int rc;
    if (c == '"' || c == '\'') {
        rc = py_string(p);
    } else if (c == '[' || c == '(' || c == '{') {
        p->i++;
        rc = py_items(p, c == '[' ? ']' : c == '(' ? ')' : '}', c == '{');
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        size_t b = p->i++;
        while (p->i < p->n && ((p->s[p->i] >= '0' && p->s[p->i] <= '9') || p->s[p->i] == '.'
                               || p->s[p->i] == 'e' || p->s[p->i] == 'E' || p->s[p->i] == '+'
                               || p->s[p->i] == '-'))
            p->i++;
        rc = json_number(p->s + b, p->i - b) ? put(p, p->s + b, p->i - b) : CAIRN_EFORMAT;
    } else {
        const char *at;
        size_t len;
        if (!ident(p, &at, &len))
            return CAIRN_EFORMAT;
        if (len == 4 && !memcmp(at, "True", 4))
            rc = put(p, "true", 4);
        else if (len == 5 && !memcmp(at, "False", 5))
            rc = put(p, "false", 5);
        else if (len == 4 && !memcmp(at, "None", 4))
            rc = put(p, "null", 4);
        else
            rc = CAIRN_EFORMAT;
    }
    p->depth--;
    return rc;
}

/* One NAME(k=v, ...) call: its name in *name, *name_len; its arguments in p->out. */
static int py_call(py_t *p, const char **name, size_t *name_len)
{
    p->out.len = 0;
    if (p->out.p)
        p->out.p[0] = '\0';
    if (!ident(p, name, name_len) || !eat(p, '('))
        return CAIRN_EFORMAT;
    int rc = put(p, "{", 1);
    bool first = true;
    while (!rc) {
        if (eat(p, ')'))
            return put(p, "}", 1);
        if (!first && !eat(p, ','))
            return CAIRN_EFORMAT;
        if (!first && eat(p, ')'))
            return put(p, "}", 1);
        const char *k;
        size_t kl;
        if (!ident(p, &k, &kl) || !eat(p, '='))
            return CAIRN_EFORMAT;
        if ((!first && (rc = put(p, ",", 1))) || (rc = put_json_string(p, k, kl))
            || (rc = put(p, ":", 1)))
            return rc;
        first = false;
        rc = py_value(p);
    }
    return rc;
}

/* Walks the list; emits the calls when emit_it. Returns the count or a negative code. */
static int walk(const char *body, size_t len, int first, bool emit_it, out_emit_fn emit,
                void *ctx)
{
    py_t p = {.s = body, .n = len, .i = 0, .out = {0}, .depth = 0};
    int count = 0, rc = CAIRN_EFORMAT;
    bool list = eat(&p, '[');
    for (;;) {
        const char *name;
        size_t name_len;
        if ((rc = py_call(&p, &name, &name_len)))
            goto out;
        /* The arguments must be JSON (a check of the conversion above). */
        cJSON *j = NULL;
        rc = cairn_json_parse(p.out.p, p.out.len, NULL, &j, NULL);
        cJSON_Delete(j);
        if (rc) {
            rc = rc == CAIRN_ENOMEM ? rc : CAIRN_EFORMAT;
            goto out;
        }
        if (emit_it) {
            char nm[256];
            if (name_len >= sizeof nm) {
                rc = CAIRN_EFORMAT;
                goto out;
            }
            memcpy(nm, name, name_len);
            nm[name_len] = '\0';
            if ((rc = output_emit_call(first + count, nm, p.out.p, p.out.len, emit, ctx)))
                goto out;
        }
        count++;
        if (!list || !eat(&p, ','))
            break;
    }
    rc = CAIRN_EFORMAT;
    if (list && !eat(&p, ']'))
        goto out;
    ws(&p);
    if (p.i != p.n)
        goto out;
    rc = count;
out:
    api_buf_free(&p.out);
    return rc;
}

int output_pythonic_parse(const char *body, size_t len, int first, const cJSON *tools,
                          out_emit_fn emit, void *ctx)
{
    (void)tools;
    int rc = walk(body, len, first, false, emit, ctx);
    return rc < 0 ? rc : walk(body, len, first, true, emit, ctx);
}

const tool_format_t tool_format_pythonic = {
    .name = "pythonic",
    .template_marker = "<|tool_list_start|>",
    .open = "<|tool_call_start|>",
    .close = "<|tool_call_end|>",
    .open_at_start = false,
    .starts = NULL,
    .parse = output_pythonic_parse,
};
