/*
 * tool_hermes.c — Hermes-style tool calls (docs/API.md names the models that write them):
 * one JSON object per section,
 *
 *     <tool_call>
 *     {"name": "get_weather", "arguments": {"city": "Paris"}}
 *     </tool_call>
 *
 * `arguments` (or `parameters`) must be an object, or a string holding one; the name a
 * non-empty string. The arguments reported are the model's own bytes (output.h).
 *
 * Thread-safety: pure.
 */
#include <string.h>

#include "server/output/output.h"
#include "util/json.h"

int output_json_call(const char *s, size_t n, int index, bool emit_it, out_emit_fn emit,
                     void *ctx)
{
    cJSON *o = NULL;
    int rc = cairn_json_parse(s, n, NULL, &o, NULL);
    if (rc == CAIRN_ENOMEM)
        return rc;
    if (rc)
        return CAIRN_EFORMAT;
    rc = CAIRN_EFORMAT;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    const char *key = "arguments";
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!args) {
        key = "parameters";
        args = cJSON_GetObjectItemCaseSensitive(o, key);
    }
    if (!cJSON_IsObject(o) || !cJSON_IsString(name) || !name->valuestring[0])
        goto out;
    if (args && !cJSON_IsObject(args) && !cJSON_IsString(args) && !cJSON_IsNull(args))
        goto out;
    rc = 0;
    if (!emit_it)
        goto out;
    if (cJSON_IsString(args)) { /* a JSON text inside a string: its decoded bytes */
        rc = output_emit_call(index, name->valuestring, args->valuestring,
                              strlen(args->valuestring), emit, ctx);
        goto out;
    }
    const char *at = NULL;
    size_t len = 0;
    if (cJSON_IsObject(args) && !output_json_member(s, n, key, &at, &len)) {
        rc = CAIRN_EFORMAT;
        goto out;
    }
    rc = output_emit_call(index, name->valuestring, at, len, emit, ctx);
out:
    cJSON_Delete(o);
    return rc;
}

static int hermes_parse(const char *body, size_t len, int first, const cJSON *tools,
                        out_emit_fn emit, void *ctx)
{
    (void)tools;
    int rc = output_json_call(body, len, first, false, emit, ctx);
    if (rc)
        return rc;
    rc = output_json_call(body, len, first, true, emit, ctx);
    return rc ? rc : 1;
}

const tool_format_t tool_format_hermes = {
    .name = "hermes",
    .template_marker = "<tool_call>",
    .open = "<tool_call>",
    .close = "</tool_call>",
    .open_at_start = false,
    .stream_json = true,
    .starts = NULL,
    .parse = hermes_parse,
};
