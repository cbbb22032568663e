/*
 * tool_llama3.c — the llama3_json format (docs/API.md names the models): the whole answer
 * is one or more call objects (separated by ';' or whitespace), optionally after
 * <|python_tag|>:
 *
 *     {"name": "get_weather", "parameters": {"city": "Paris"}}
 *
 * Detected by the template's "<|python_tag|>" or its "parameters" instruction. An answer
 * that starts like a call but is not a list of valid calls stays text.
 *
 * Thread-safety: pure.
 */
#include <string.h>

#include "server/output/output.h"
#include "util/json.h"

static const char PYTHON_TAG[] = "<|python_tag|>";

static size_t skip_sep(const char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t' || s[i] == ';'))
        i++;
    return i;
}

/* Walks the calls; emits them when emit_it. Returns the count or a negative code. */
static int walk(const char *s, size_t n, int first, bool emit_it, out_emit_fn emit, void *ctx)
{
    size_t i = 0;
    if (n >= sizeof PYTHON_TAG - 1 && !memcmp(s, PYTHON_TAG, sizeof PYTHON_TAG - 1))
        i = sizeof PYTHON_TAG - 1;
    int count = 0;
    for (i = skip_sep(s, n, i); i < n; i = skip_sep(s, n, i)) {
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
        i += len;
    }
    return count ? count : CAIRN_EFORMAT;
}

static int llama3_parse(const char *body, size_t len, int first, const cJSON *tools,
                        out_emit_fn emit, void *ctx)
{
    (void)tools;
    int rc = walk(body, len, first, false, emit, ctx);
    return rc < 0 ? rc : walk(body, len, first, true, emit, ctx);
}

static const char *const llama3_starts[] = {"<|python_tag|>", "{\"name\"", "{ \"name\"", NULL};

const tool_format_t tool_format_llama3_json = {
    .name = "llama3_json",
    .template_marker = "\"parameters\": dictionary of argument name",
    .open = NULL,
    .close = NULL,
    .open_at_start = true,
    .starts = llama3_starts,
    .parse = llama3_parse,
};
