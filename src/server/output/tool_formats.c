/*
 * tool_formats.c — the registry of native tool-call formats and what they share: finding
 * a member's raw bytes in a JSON object, and emitting one call (output.h).
 *
 * Adding a format is one file defining a const tool_format_t and one line in
 * tool_formats[] below. Detection order matters where a template could match two.
 *
 * Thread-safety: immutable tables and pure functions.
 */
#include <string.h>

#include "server/output/output.h"

extern const tool_format_t tool_format_qwen3_coder;
extern const tool_format_t tool_format_hermes;
extern const tool_format_t tool_format_llama3_json;
extern const tool_format_t tool_format_pythonic;
extern const tool_format_t tool_format_tool_code;

const tool_format_t *const tool_formats[] = {
    &tool_format_qwen3_coder, /* before hermes: its templates contain <tool_call> too */
    &tool_format_hermes,
    &tool_format_pythonic,
    &tool_format_llama3_json,
    &tool_format_tool_code,
    NULL,
};

const tool_format_t *tool_format_find(const char *name)
{
    for (const tool_format_t *const *f = tool_formats; name && *f; f++)
        if (!strcmp((*f)->name, name))
            return *f;
    return NULL;
}

const tool_format_t *tool_format_detect(const char *src)
{
    for (const tool_format_t *const *f = tool_formats; src && *f; f++)
        if (strstr(src, (*f)->template_marker))
            return *f;
    return NULL;
}

bool output_template_reasons(const char *src)
{
    return src && strstr(src, "<think>") && strstr(src, "</think>");
}

int output_emit_call(int index, const char *name, const char *args, size_t args_len,
                     out_emit_fn emit, void *ctx)
{
    out_event_t ev = {.kind = OUT_TOOL_BEGIN, .tool = index, .text = name, .len = strlen(name)};
    int rc = emit(ctx, &ev);
    if (rc)
        return rc;
    ev.kind = OUT_TOOL_ARGS;
    ev.text = args && args_len ? args : "{}";
    ev.len = args && args_len ? args_len : 2;
    if ((rc = emit(ctx, &ev)))
        return rc;
    ev.kind = OUT_TOOL_END;
    ev.text = "";
    ev.len = 0;
    return emit(ctx, &ev);
}

/* ---- Raw spans of a valid JSON text -------------------------------------------------- */

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t'))
        i++;
    return i;
}

/* End (one past) of the string starting at s[i] == '"'. */
static size_t string_end(const char *s, size_t n, size_t i)
{
    for (i++; i < n; i++) {
        if (s[i] == '\\')
            i++;
        else if (s[i] == '"')
            return i + 1;
    }
    return n;
}

/* End (one past) of the value starting at s[i]. */
static size_t value_end(const char *s, size_t n, size_t i)
{
    if (i >= n)
        return n;
    if (s[i] == '"')
        return string_end(s, n, i);
    if (s[i] == '{' || s[i] == '[') {
        int depth = 0;
        while (i < n) {
            char c = s[i];
            if (c == '"') {
                i = string_end(s, n, i);
                continue;
            }
            if (c == '{' || c == '[')
                depth++;
            else if (c == '}' || c == ']') {
                if (--depth == 0)
                    return i + 1;
            }
            i++;
        }
        return n;
    }
    while (i < n && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\n'
           && s[i] != '\r' && s[i] != '\t')
        i++;
    return i;
}

bool output_json_member(const char *s, size_t n, const char *key, const char **at, size_t *len)
{
    size_t kl = strlen(key);
    size_t i = skip_ws(s, n, 0);
    if (i >= n || s[i] != '{')
        return false;
    i++;
    for (;;) {
        i = skip_ws(s, n, i);
        if (i >= n || s[i] != '"')
            return false;
        size_t ke = string_end(s, n, i);
        bool match = ke - i == kl + 2 && !memcmp(s + i + 1, key, kl);
        i = skip_ws(s, n, ke);
        if (i >= n || s[i] != ':')
            return false;
        i = skip_ws(s, n, i + 1);
        size_t ve = value_end(s, n, i);
        if (match) {
            *at = s + i;
            *len = ve - i;
            return true;
        }
        i = skip_ws(s, n, ve);
        if (i >= n || s[i] != ',')
            return false;
        i++;
    }
}
