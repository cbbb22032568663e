/*
 * tool_code.c — tool calls in a code fence, as Gemma 3 function-calling prompts ask for
 * them and as templates without a native format use (docs/API.md):
 *
 *     ```tool_code                  ```tool_code                      ```json
 *     get_weather(city="Paris")     {"name": "get_weather",           {"name": "get_weather",
 *     ```                            "parameters": {"city": "Paris"}}  "arguments": {...}}
 *                                   ```                               ```
 *
 * The body of a ```tool_code or ```json fence is a pythonic call or a list of them
 * (tool_pythonic.c), or a JSON call object ({"name", "arguments" | "parameters"}, as
 * output_json_call) or a JSON array of them. Both forms stream (output.h: stream_py,
 * stream_json). A fence that is none of these is the text it was. Detected by
 * "tool_code" in the chat template; otherwise chosen with --tool-parser tool_code.
 *
 * Thread-safety: pure.
 */
#include "server/output/output.h"
#include "util/json.h"

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t'))
        i++;
    return i;
}

/* A JSON call object or an array of them in s[0..n); emits them when emit_it. Returns
 * the count or a negative code. */
static int json_walk(const char *s, size_t n, int first, bool emit_it, out_emit_fn emit,
                     void *ctx)
{
    size_t i = skip_ws(s, n, 0);
    bool list = i < n && s[i] == '[';
    if (list)
        i = skip_ws(s, n, i + 1);
    int count = 0;
    while (i < n && !(list && s[i] == ']')) {
        if (count > 0) {
            if (!list || s[i] != ',')
                return CAIRN_EFORMAT;
            i = skip_ws(s, n, i + 1);
        }
        const char *end = NULL;
        cJSON *o = NULL;
        int rc = cairn_json_parse(s + i, n - i, &end, &o, NULL);
        cJSON_Delete(o);
        if (rc == CAIRN_ENOMEM)
            return rc;
        if (rc || !end || end <= s + i)
            return CAIRN_EFORMAT;
        size_t len = (size_t)(end - (s + i));
        if ((rc = output_json_call(s + i, len, first + count, emit_it, emit, ctx)))
            return rc;
        count++;
        i = skip_ws(s, n, i + len);
    }
    if (list) {
        if (i >= n || s[i] != ']')
            return CAIRN_EFORMAT;
        i = skip_ws(s, n, i + 1);
    }
    return count && i == n ? count : CAIRN_EFORMAT;
}

static int tool_code_parse(const char *body, size_t len, int first, const cJSON *tools,
                           out_emit_fn emit, void *ctx)
{
    int rc = output_pythonic_parse(body, len, first, tools, emit, ctx);
    if (rc != CAIRN_EFORMAT)
        return rc;
    rc = json_walk(body, len, first, false, emit, ctx);
    return rc < 0 ? rc : json_walk(body, len, first, true, emit, ctx);
}

const tool_format_t tool_format_tool_code = {
    .name = "tool_code",
    .template_marker = "tool_code",
    .open = "```tool_code",
    .open_alt = "```json",
    .close = "```",
    .open_at_start = false,
    .stream_json = true,
    .stream_py = true,
    .starts = NULL,
    .parse = tool_code_parse,
};
