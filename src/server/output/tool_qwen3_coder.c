/*
 * tool_qwen3_coder.c — the qwen3_coder format: XML-style calls, one function per
 * <tool_call> section, each argument in its own tag (the models whose templates instruct
 * and render exactly this: docs/API.md names them):
 *
 *     <tool_call>
 *     <function=get_weather>
 *     <parameter=city>
 *     Paris
 *     </parameter>
 *     <parameter=days>
 *     3
 *     </parameter>
 *     </function>
 *     </tool_call>
 *
 * Detected by "<parameter=" in the chat template (before hermes: these templates contain
 * "<tool_call>" too). A value is the text between its tags, less one newline at each end
 * (the templates write one there). Values are untyped text, so the request's tool schema
 * types them: a parameter declared string is a JSON string; integer/number a number when
 * the text is one; boolean true/false; null, object and array the JSON the text holds
 * (types without a JSON shape: whatever JSON it holds); a text that is not what its type
 * needs, and a parameter the schema does not declare, is a string. The arguments are the
 * JSON object of the parameters in the order written (a repeated one is passed on).
 *
 * The parser streams these calls a parameter at a time (output.h, stream_xml) with the
 * scanners below; parse reads a whole section the same way. A section whose body is a
 * JSON object is a hermes call (the model falling back to its family's other format).
 *
 * Thread-safety: pure.
 */
#include <stdbool.h>
#include <string.h>

#include "server/api/api.h"
#include "server/output/output.h"
#include "util/json.h"

static const char FN_OPEN[] = "<function=";
static const char FN_CLOSE[] = "</function>";
static const char P_OPEN[] = "<parameter=";
static const char P_CLOSE[] = "</parameter>";

#define LIT(s) (sizeof(s) - 1)

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && is_space(s[i]))
        i++;
    return i;
}

/* A tag's name: from i up to '>' (no newline or '<' inside, at most OUT_NAME_MAX - 1
 * bytes). */
static out_match_t tag_name(const char *s, size_t n, size_t i, size_t *len, size_t *end)
{
    size_t b = i;
    while (i < n && s[i] != '>' && s[i] != '\n' && s[i] != '<' && i - b < OUT_NAME_MAX - 1)
        i++;
    if (i >= n)
        return OUT_MATCH_WAIT;
    if (s[i] != '>' || i == b)
        return OUT_MATCH_NO;
    *len = i - b;
    *end = i + 1;
    return OUT_MATCH_YES;
}

/* Whether s[i..n) starts with lit (YES), could still (WAIT) or cannot (NO). */
static out_match_t lit_at(const char *s, size_t n, size_t i, const char *lit, size_t l)
{
    size_t k = n - i < l ? n - i : l;
    if (memcmp(s + i, lit, k) != 0)
        return OUT_MATCH_NO;
    return k == l ? OUT_MATCH_YES : OUT_MATCH_WAIT;
}

out_match_t output_xml_function(const char *s, size_t n, size_t *name_at, size_t *name_len,
                                size_t *end)
{
    size_t i = skip_ws(s, n, 0);
    if (i == n)
        return OUT_MATCH_WAIT;
    out_match_t m = lit_at(s, n, i, FN_OPEN, LIT(FN_OPEN));
    if (m != OUT_MATCH_YES)
        return m;
    *name_at = i + LIT(FN_OPEN);
    return tag_name(s, n, *name_at, name_len, end);
}

out_match_t output_xml_parameter(const char *s, size_t n, size_t *key_at, size_t *key_len,
                                 size_t *val_at, size_t *val_len, size_t *end)
{
    size_t i = skip_ws(s, n, 0), vb;
    if (i == n)
        return OUT_MATCH_WAIT;
    out_match_t m = lit_at(s, n, i, P_OPEN, LIT(P_OPEN));
    if (m != OUT_MATCH_YES)
        return m;
    *key_at = i + LIT(P_OPEN);
    if ((m = tag_name(s, n, *key_at, key_len, &vb)) != OUT_MATCH_YES)
        return m;
    const char *close = vb < n ? memmem(s + vb, n - vb, P_CLOSE, LIT(P_CLOSE)) : NULL;
    if (!close)
        return OUT_MATCH_WAIT;
    size_t ve = (size_t)(close - s);
    *end = ve + LIT(P_CLOSE);
    if (vb < ve && s[vb] == '\n')
        vb++;
    if (ve > vb && s[ve - 1] == '\n')
        ve--;
    *val_at = vb;
    *val_len = ve - vb;
    return OUT_MATCH_YES;
}

bool output_xml_function_end(const char *s, size_t n, size_t *end, bool *wait)
{
    size_t i = skip_ws(s, n, 0);
    out_match_t m = i == n ? OUT_MATCH_WAIT : lit_at(s, n, i, FN_CLOSE, LIT(FN_CLOSE));
    *wait = m == OUT_MATCH_WAIT;
    if (m == OUT_MATCH_YES)
        *end = i + LIT(FN_CLOSE);
    return m == OUT_MATCH_YES;
}

/* The JSON schema `type` names of parameter key[0..kl) of function name in tools (OpenAI
 * chat shape); NULL when not declared. */
static const cJSON *param_type(const cJSON *tools, const char *name, const char *key, size_t kl)
{
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(nm) || strcmp(nm->valuestring, name) != 0)
            continue;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties");
        const cJSON *p;
        cJSON_ArrayForEach(p, props)
            if (p->string && strlen(p->string) == kl && !memcmp(p->string, key, kl))
                return cJSON_GetObjectItemCaseSensitive(p, "type");
        return NULL;
    }
    return NULL;
}

/* Whether the schema type (a name or a list of names) includes want. */
static bool has_type(const cJSON *type, const char *want)
{
    if (cJSON_IsString(type))
        return !strcmp(type->valuestring, want);
    const cJSON *t;
    cJSON_ArrayForEach(t, type)
        if (cJSON_IsString(t) && !strcmp(t->valuestring, want))
            return true;
    return false;
}

/* v[0..n) as JSON when it is exactly one JSON value (spaces around allowed), else NULL;
 * *oom on an allocation failure. */
static cJSON *as_json(const char *v, size_t n, bool *oom)
{
    cJSON *j = NULL;
    const char *end = NULL;
    int rc = cairn_json_parse(v, n, &end, &j, NULL);
    if (rc == CAIRN_ENOMEM)
        *oom = true;
    if (rc) {
        cJSON_Delete(j);
        return NULL;
    }
    if (skip_ws(v, n, (size_t)(end - v)) != n) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* The typed value of one parameter (see the file comment), or NULL on no memory. */
static cJSON *typed_value(const cJSON *type, const char *v, size_t n, bool *oom)
{
    cJSON *j = NULL;
    if (type && !has_type(type, "string")) {
        j = as_json(v, n, oom);
        if (*oom)
            return NULL;
        bool other = !has_type(type, "number") && !has_type(type, "integer")
                     && !has_type(type, "boolean") && !has_type(type, "null")
                     && !has_type(type, "object") && !has_type(type, "array");
        bool fits = j && (other
                          || (cJSON_IsNumber(j) && (has_type(type, "number") || has_type(type, "integer")))
                          || (cJSON_IsBool(j) && has_type(type, "boolean"))
                          || (cJSON_IsNull(j) && has_type(type, "null"))
                          || (cJSON_IsObject(j) && has_type(type, "object"))
                          || (cJSON_IsArray(j) && has_type(type, "array")));
        if (fits)
            return j;
        cJSON_Delete(j);
    }
    char *s = cairn_malloc(n + 1);
    if (!s) {
        *oom = true;
        return NULL;
    }
    memcpy(s, v, n);
    s[n] = '\0';
    j = cJSON_CreateString(s);
    cairn_free(s);
    if (!j)
        *oom = true;
    return j;
}

int output_xml_member(const cJSON *tools, const char *fn, const char *key, size_t kl,
                      const char *v, size_t vn, api_buf_t *out)
{
    bool oom = false;
    cJSON *j = typed_value(param_type(tools, fn, key, kl), v, vn, &oom);
    char *k = j ? cairn_malloc(kl + 1) : NULL;
    cJSON *ks = NULL;
    if (k) {
        memcpy(k, key, kl);
        k[kl] = '\0';
        ks = cJSON_CreateString(k);
        cairn_free(k);
    }
    char *kt = ks ? cJSON_PrintUnformatted(ks) : NULL;
    char *vt = kt ? cJSON_PrintUnformatted(j) : NULL;
    int rc = vt ? 0 : CAIRN_ENOMEM;
    if (!rc)
        rc = api_buf_append(out, kt, strlen(kt));
    if (!rc)
        rc = api_buf_append(out, ":", 1);
    if (!rc)
        rc = api_buf_append(out, vt, strlen(vt));
    cJSON_free(kt);
    cJSON_free(vt);
    cJSON_Delete(ks);
    cJSON_Delete(j);
    return rc;
}

/*
 * One <function=...>...</function> at body[*i..n): emitted as call `index` when emit_it.
 * Returns 0 (*i past it), CAIRN_EFORMAT or CAIRN_ENOMEM.
 */
static int one_function(const char *s, size_t n, size_t *i, const cJSON *tools, int index,
                        bool emit_it, out_emit_fn emit, void *ctx)
{
    size_t at = *i, name_at, name_len, end;
    if (output_xml_function(s + at, n - at, &name_at, &name_len, &end) != OUT_MATCH_YES)
        return CAIRN_EFORMAT;
    char name[OUT_NAME_MAX];
    memcpy(name, s + at + name_at, name_len);
    name[name_len] = '\0';
    at += end;
    api_buf_t args = {0};
    int rc = api_buf_append(&args, "{", 1);
    for (bool first = true; !rc; first = false) {
        bool wait;
        if (output_xml_function_end(s + at, n - at, &end, &wait)) {
            *i = at + end;
            rc = api_buf_append(&args, "}", 1);
            if (!rc && emit_it)
                rc = output_emit_call(index, name, args.p, args.len, emit, ctx);
            break;
        }
        size_t ka, kl, va, vl;
        if (output_xml_parameter(s + at, n - at, &ka, &kl, &va, &vl, &end) != OUT_MATCH_YES) {
            rc = CAIRN_EFORMAT;
            break;
        }
        if (!first)
            rc = api_buf_append(&args, ",", 1);
        if (!rc)
            rc = output_xml_member(tools, name, s + at + ka, kl, s + at + va, vl, &args);
        at += end;
    }
    api_buf_free(&args);
    return rc;
}

/* Walks the section's functions; emits them when emit_it. The count or a code. */
static int walk(const char *body, size_t len, int first, const cJSON *tools, bool emit_it,
                out_emit_fn emit, void *ctx)
{
    int count = 0;
    size_t i = 0;
    while (skip_ws(body, len, i) < len) {
        int rc = one_function(body, len, &i, tools, first + count, emit_it, emit, ctx);
        if (rc)
            return rc;
        count++;
    }
    return count ? count : CAIRN_EFORMAT;
}
static int qwen3_coder_parse(const char *body, size_t len, int first, const cJSON *tools,
                             out_emit_fn emit, void *ctx)
{
    size_t at = skip_ws(body, len, 0);
    if (at < len && body[at] == '{') { /* a hermes JSON call in the same section */
        int rc = output_json_call(body, len, first, false, emit, ctx);
        if (!rc)
            rc = output_json_call(body, len, first, true, emit, ctx);
        return rc ? rc : 1;
    }
    int rc = walk(body, len, first, tools, false, emit, ctx);
    return rc < 0 ? rc : walk(body, len, first, tools, true, emit, ctx);
}

const tool_format_t tool_format_qwen3_coder = {
    .name = "qwen3_coder",
    .template_marker = "<parameter=",
    .open = "<tool_call>",
    .close = "</tool_call>",
    .open_at_start = false,
    .stream_json = true, /* the hermes form, when the model writes it */
    .stream_xml = true,
    .starts = NULL,
    .parse = qwen3_coder_parse,
};
