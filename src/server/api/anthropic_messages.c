/*
 * anthropic_messages.c — the Anthropic Messages API adapter: POST /v1/messages and
 * POST /v1/messages/count_tokens (what Claude Code and the official SDKs speak).
 *
 * Request. `model`, `messages` and `max_tokens` (count_tokens: no max_tokens) are
 * required. `system` (a string or text blocks) becomes the first system message; content
 * blocks convert to the chat-template shape the server renders (Hugging Face's
 * convention): text blocks join into `content`, `thinking` blocks into
 * `reasoning_content`, `tool_use` blocks into the assistant's `tool_calls` (arguments:
 * the input object, which templates print with tojson), and each `tool_result` block into
 * a `tool` message (tool_call_id, its text) placed before the user text of its turn. A
 * final assistant turn is a prefill: the model continues its text.
 * `tools` become {"type": "function", "function": {name, description, parameters}}.
 * `tool_choice` none turns call parsing off (auto/any/tool are accepted; the output is not
 * constrained); `thinking` enabled/disabled sets the template's enable_thinking;
 * `stop_sequences`, `temperature`, `top_p`, `top_k` sample; `metadata.user_id` is the
 * user. `cache_control` anywhere is accepted (the prefix cache is automatic); on a
 * system block, a tool or a message block it makes the request a retention hint, as
 * OpenAI's prompt_cache_key does. Fields of the API this server has no use for (service_tier, container,
 * mcp_servers, context_management, betas...) are accepted and ignored; Cairn's own
 * sampling extensions (cache_salt, seed, logit_bias, stop_token_ids, ignore_eos,
 * min_tokens, repetition_penalty, chat_template_kwargs) are accepted too; anything else is
 * a 400 naming the field. Images, documents and server tools are refused with a 400.
 *
 * Response. A `message` with content blocks (thinking, text, tool_use), stop_reason
 * end_turn / max_tokens / tool_use, and usage in Anthropic's split: input_tokens are the
 * prompt tokens computed, cache_read_input_tokens those served from any cache tier
 * (hot pool or SSD), cache_creation_input_tokens 0. A stream is the SSE sequence
 * message_start, ping, then per block content_block_start / content_block_delta
 * (text_delta, thinking_delta, input_json_delta) / content_block_stop, then message_delta
 * (stop_reason, usage) and message_stop; a failure after it began is an `error` event.
 * A stream silent for the server's keepalive_ms (queued, a long prefill) gets `ping`
 * events, as the Anthropic API sends them (its SDKs skip them wherever they come).
 * Errors are {"type": "error", "error": {"type", "message"}}.
 *
 * Keys: x-api-key, or Authorization: Bearer. GET /v1/models with an anthropic-version
 * header (Anthropic's clients send one) lists the model in Anthropic's shape.
 *
 * Thread-safety: pure functions over the request's own render state (api.h).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "server/api/api.h"
#include "server/api/openai.h"
#include "util/json.h"

#define BAD(param, ...) \
    api_error_set(err, 400, API_ERR_INVALID_REQUEST, param, NULL, __VA_ARGS__)

static const api_auth_t ant_auth[2] = {{"x-api-key", NULL}, {"Authorization", "Bearer"}};

#define ANT_OOM_BODY                                                                         \
    "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"The server is " \
    "out of memory; retry later\"}}"

/* ---- Small JSON helpers ---------------------------------------------------------------- */

static bool add(cJSON *obj, const char *key, cJSON *item)
{
    if (!item)
        return false;
    if (!cJSON_AddItemToObject(obj, key, item)) {
        cJSON_Delete(item);
        return false;
    }
    return true;
}

static bool push(cJSON *arr, cJSON *item)
{
    if (!item)
        return false;
    if (!cJSON_AddItemToArray(arr, item)) {
        cJSON_Delete(item);
        return false;
    }
    return true;
}

static cJSON *string_n(const char *s, size_t n)
{
    char *tmp = cairn_strndup(s ? s : "", s ? n : 0);
    if (!tmp)
        return NULL;
    cJSON *j = cJSON_CreateString(tmp);
    cairn_free(tmp);
    return j;
}

static const char *type_of(const cJSON *block)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(block, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* ---- Request: content blocks --------------------------------------------------------- */

/*
 * Claude Code (2.1.36 on) opens `system` with a text block "x-anthropic-billing-header:
 * cc_version=...; cc_entrypoint=...; cch=XXXXX;" whose cch changes with every request.
 * It means nothing to the model and, rendered first, would make every prompt's prefix
 * new: no turn would ever hit the prefix cache. Such blocks (and such a first line of a
 * string system) are dropped.
 */
static const char BILLING_HEADER[] = "x-anthropic-billing-header:";

static bool is_billing_header(const char *text)
{
    return !strncmp(text, BILLING_HEADER, sizeof BILLING_HEADER - 1);
}

/* Appends the text of a string or of an array of text blocks to b (blocks joined by
 * newlines). Other block types are a 400 naming `what`. With dropped != NULL, billing
 * headers (above) are left out and *dropped says whether there was one. */
static int text_of_blocks(const cJSON *v, const char *what, bool *dropped, api_buf_t *b,
                          api_error_t *err)
{
    bool drop_billing = dropped != NULL;
    if (cJSON_IsString(v)) {
        const char *t = v->valuestring;
        if (drop_billing && is_billing_header(t)) {
            *dropped = true;
            const char *nl = strchr(t, '\n');
            t = nl ? nl + 1 : t + strlen(t);
        }
        return api_buf_append(b, t, strlen(t));
    }
    if (!cJSON_IsArray(v)) {
        BAD(what, "%s must be a string or an array of text blocks", what);
        return CAIRN_EINVAL;
    }
    const cJSON *blk;
    bool first = true;
    cJSON_ArrayForEach(blk, v) {
        const char *t = type_of(blk);
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(blk, "text");
        if (!t || strcmp(t, "text") != 0 || !cJSON_IsString(text)) {
            BAD(what, "%s: only text blocks are supported here (got %s)", what, t ? t : "no type");
            return CAIRN_EINVAL;
        }
        if (drop_billing && is_billing_header(text->valuestring)) {
            *dropped = true;
            continue;
        }
        int rc = first ? 0 : api_buf_append(b, "\n", 1);
        rc = rc ? rc : api_buf_append(b, text->valuestring, strlen(text->valuestring));
        if (rc)
            return rc;
        first = false;
    }
    return 0;
}

/* text_of_blocks keeping every block. */
static int text_of(const cJSON *v, const char *what, api_buf_t *b, api_error_t *err)
{
    return text_of_blocks(v, what, NULL, b, err);
}

/* A template message {"role": role, "content": text[0..n)} appended to msgs; *out the
 * message (owned by msgs). */
static int add_message(cJSON *msgs, const char *role, const char *text, size_t n, cJSON **out)
{
    cJSON *m = cJSON_CreateObject();
    if (!m)
        return CAIRN_ENOMEM;
    if (!add(m, "role", cJSON_CreateString(role)) || !add(m, "content", string_n(text, n))) {
        cJSON_Delete(m);
        return CAIRN_ENOMEM;
    }
    if (!push(msgs, m)) /* push freed it */
        return CAIRN_ENOMEM;
    if (out)
        *out = m;
    return 0;
}

/* One assistant turn: text, thinking and tool_use blocks. */
static int assistant_turn(const cJSON *content, const char *param, cJSON *msgs, api_error_t *err)
{
    api_buf_t text = {0}, thinking = {0};
    cJSON *calls = NULL, *m = NULL;
    int rc = 0;
    if (cJSON_IsString(content)) {
        rc = api_buf_append(&text, content->valuestring, strlen(content->valuestring));
        goto build;
    }
    if (!cJSON_IsArray(content)) {
        BAD(param, "%s.content must be a string or an array of content blocks", param);
        return CAIRN_EINVAL;
    }
    const cJSON *blk;
    cJSON_ArrayForEach(blk, content) {
        const char *t = type_of(blk);
        if (t && !strcmp(t, "text")) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(blk, "text");
            if (!cJSON_IsString(s)) {
                BAD(param, "%s: a text block needs a string \"text\"", param);
                rc = CAIRN_EINVAL;
                goto out;
            }
            rc = api_buf_append(&text, s->valuestring, strlen(s->valuestring));
        } else if (t && !strcmp(t, "thinking")) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(blk, "thinking");
            if (cJSON_IsString(s))
                rc = api_buf_append(&thinking, s->valuestring, strlen(s->valuestring));
        } else if (t && !strcmp(t, "redacted_thinking")) {
            continue;
        } else if (t && !strcmp(t, "tool_use")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(blk, "id");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(blk, "name");
            const cJSON *input = cJSON_GetObjectItemCaseSensitive(blk, "input");
            if (!cJSON_IsString(id) || !cJSON_IsString(name) || (input && !cJSON_IsObject(input))) {
                BAD(param, "%s: a tool_use block needs string id and name and an object input",
                    param);
                rc = CAIRN_EINVAL;
                goto out;
            }
            if (!calls && !(calls = cJSON_CreateArray())) {
                rc = CAIRN_ENOMEM;
                goto out;
            }
            cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
            bool ok = call && fn && add(call, "id", cJSON_CreateString(id->valuestring))
                      && add(call, "type", cJSON_CreateString("function"))
                      && add(fn, "name", cJSON_CreateString(name->valuestring))
                      && add(fn, "arguments", input ? cJSON_Duplicate(input, true)
                                                    : cJSON_CreateObject());
            if (ok) {
                ok = add(call, "function", fn);
                fn = NULL;
            }
            cJSON_Delete(fn);
            if (!ok || !push(calls, call)) {
                if (!ok)
                    cJSON_Delete(call);
                rc = CAIRN_ENOMEM;
                goto out;
            }
        } else {
            BAD(param, "%s: content block type '%s' is not supported in assistant turns", param,
                t ? t : "(none)");
            rc = CAIRN_EINVAL;
            goto out;
        }
        if (rc)
            goto out;
    }
build:
    if (rc)
        goto out;
    if ((rc = add_message(msgs, "assistant", text.p, text.len, &m)))
        goto out;
    if (thinking.len && !add(m, "reasoning_content", string_n(thinking.p, thinking.len))) {
        rc = CAIRN_ENOMEM;
        goto out;
    }
    if (calls) {
        if (!add(m, "tool_calls", calls)) {
            calls = NULL;
            rc = CAIRN_ENOMEM;
            goto out;
        }
        calls = NULL;
    }
out:
    cJSON_Delete(calls);
    api_buf_free(&text);
    api_buf_free(&thinking);
    return rc;
}

/* One user turn: tool_result blocks become tool messages (in order), then the text. */
static int user_turn(const cJSON *content, const char *param, cJSON *msgs, api_error_t *err)
{
    if (cJSON_IsString(content))
        return add_message(msgs, "user", content->valuestring, strlen(content->valuestring),
                           NULL);
    if (!cJSON_IsArray(content)) {
        BAD(param, "%s.content must be a string or an array of content blocks", param);
        return CAIRN_EINVAL;
    }
    api_buf_t text = {0};
    bool any_text = false;
    int rc = 0;
    const cJSON *blk;
    cJSON_ArrayForEach(blk, content) {
        const char *t = type_of(blk);
        if (t && !strcmp(t, "text")) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(blk, "text");
            if (!cJSON_IsString(s)) {
                BAD(param, "%s: a text block needs a string \"text\"", param);
                rc = CAIRN_EINVAL;
                break;
            }
            if (any_text && (rc = api_buf_append(&text, "\n", 1)))
                break;
            any_text = true;
            if ((rc = api_buf_append(&text, s->valuestring, strlen(s->valuestring))))
                break;
        } else if (t && !strcmp(t, "tool_result")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(blk, "tool_use_id");
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(blk, "content");
            if (!cJSON_IsString(id)) {
                BAD(param, "%s: a tool_result block needs a string tool_use_id", param);
                rc = CAIRN_EINVAL;
                break;
            }
            api_buf_t r = {0};
            if (c && !cJSON_IsNull(c))
                rc = text_of(c, param, &r, err);
            cJSON *m = NULL;
            if (!rc)
                rc = add_message(msgs, "tool", r.p, r.len, &m);
            if (!rc && !add(m, "tool_call_id", cJSON_CreateString(id->valuestring)))
                rc = CAIRN_ENOMEM;
            api_buf_free(&r);
            if (rc)
                break;
        } else {
            BAD(param, "%s: content block type '%s' is not supported (text and tool_result only)",
                param, t ? t : "(none)");
            rc = CAIRN_EINVAL;
            break;
        }
    }
    if (!rc && (any_text || cJSON_GetArraySize(content) == 0))
        rc = add_message(msgs, "user", text.p, text.len, NULL);
    api_buf_free(&text);
    return rc;
}

/* ---- Request: fields ----------------------------------------------------------------- */

typedef struct {
    const cJSON *system, *messages, *tools;
    bool has_max_tokens;
} ant_body_t;

static bool get_int(const cJSON *v, double lo, double hi, long long *out)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || floor(v->valuedouble) != v->valuedouble
        || v->valuedouble < lo || v->valuedouble > hi)
        return false;
    *out = (long long)v->valuedouble;
    return true;
}

static int set_number(const cJSON *v, float *dst, api_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        BAD(v->string, "%s must be a number", v->string);
        return CAIRN_EINVAL;
    }
    *dst = (float)v->valuedouble;
    return 0;
}

static int f_stop_sequences(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > API_MAX_STOP) {
        BAD("stop_sequences", "stop_sequences must be an array of at most %d strings",
            API_MAX_STOP);
        return CAIRN_EINVAL;
    }
    return gen_request_stop_strings(r, v, "stop_sequences", err);
}

static int f_thinking(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    const char *t = type_of(v);
    if (!cJSON_IsObject(v) || !t) {
        BAD("thinking", "thinking must be an object with a type");
        return CAIRN_EINVAL;
    }
    if (!strcmp(t, "enabled") || !strcmp(t, "adaptive"))
        r->enable_thinking = 1;
    else if (!strcmp(t, "disabled"))
        r->enable_thinking = 0;
    else {
        BAD("thinking", "thinking.type must be enabled, adaptive or disabled");
        return CAIRN_EINVAL;
    }
    return 0;
}

static int f_tool_choice(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    const char *t = type_of(v);
    if (!cJSON_IsObject(v) || !t
        || (strcmp(t, "auto") && strcmp(t, "any") && strcmp(t, "tool") && strcmp(t, "none"))) {
        BAD("tool_choice", "tool_choice.type must be auto, any, tool or none");
        return CAIRN_EINVAL;
    }
    r->no_tool_calls = !strcmp(t, "none");
    return 0;
}

static int f_metadata(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(v, "user_id");
    if (!cJSON_IsObject(v) || (u && !cJSON_IsString(u) && !cJSON_IsNull(u))) {
        BAD("metadata", "metadata must be an object with an optional string user_id");
        return CAIRN_EINVAL;
    }
    if (cJSON_IsString(u) && !(r->user = cairn_strdup(u->valuestring)))
        return CAIRN_ENOMEM;
    return 0;
}

/* Converts the Anthropic tools to the template's function schemas. */
static int convert_tools(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsArray(v)) {
        BAD("tools", "tools must be an array");
        return CAIRN_EINVAL;
    }
    if (!(r->tools = cJSON_CreateArray()))
        return CAIRN_ENOMEM;
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, v) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
        const char *type = type_of(t);
        if (!cJSON_IsObject(t) || !cJSON_IsString(name) || (desc && !cJSON_IsString(desc))) {
            BAD("tools", "tools[%d] must be an object with a string name", i);
            return CAIRN_EINVAL;
        }
        if (type && strcmp(type, "custom") != 0 && !schema) {
            BAD("tools", "tools[%d]: server tool '%s' is not supported (custom tools only)", i,
                type);
            return CAIRN_EINVAL;
        }
        if (schema && !cJSON_IsObject(schema)) {
            BAD("tools", "tools[%d].input_schema must be an object", i);
            return CAIRN_EINVAL;
        }
        cJSON *fn = cJSON_CreateObject(), *o = cJSON_CreateObject();
        bool ok = fn && o && add(o, "type", cJSON_CreateString("function"))
                  && add(fn, "name", cJSON_CreateString(name->valuestring))
                  && (!desc || add(fn, "description", cJSON_CreateString(desc->valuestring)))
                  && add(fn, "parameters", schema ? cJSON_Duplicate(schema, true)
                                                  : cJSON_CreateObject());
        if (ok) {
            ok = add(o, "function", fn);
            fn = NULL;
        }
        cJSON_Delete(fn);
        if (!ok || !push(r->tools, o)) {
            if (!ok)
                cJSON_Delete(o);
            return CAIRN_ENOMEM;
        }
        i++;
    }
    return 0;
}

static int convert_messages(const ant_body_t *b, gen_request_t *r, api_error_t *err)
{
    if (!cJSON_IsArray(b->messages) || cJSON_GetArraySize(b->messages) == 0) {
        BAD("messages", "messages must be a non-empty array");
        return CAIRN_EINVAL;
    }
    if (!(r->messages = cJSON_CreateArray()))
        return CAIRN_ENOMEM;
    int rc = 0;
    if (b->system && !cJSON_IsNull(b->system)) {
        api_buf_t s = {0};
        bool billing = false;
        rc = text_of_blocks(b->system, "system", &billing, &s, err);
        if (!rc && (s.len || !billing)) /* a system of only the header is none */
            rc = add_message(r->messages, "system", s.p, s.len, NULL);
        api_buf_free(&s);
        if (rc)
            return rc;
    }
    int idx = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, b->messages) {
        char param[64];
        snprintf(param, sizeof param, "messages[%d]", idx++);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role) || !content) {
            BAD(param, "%s must be an object with a role and content", param);
            return CAIRN_EINVAL;
        }
        if (!strcmp(role->valuestring, "user"))
            rc = user_turn(content, param, r->messages, err);
        else if (!strcmp(role->valuestring, "assistant"))
            rc = assistant_turn(content, param, r->messages, err);
        else if (!strcmp(role->valuestring, "system")) { /* Claude Code sends these */
            api_buf_t s = {0};
            rc = text_of(content, param, &s, err);
            if (!rc)
                rc = add_message(r->messages, "system", s.p, s.len, NULL);
            api_buf_free(&s);
        } else {
            BAD(param, "%s.role must be user, assistant or system, got '%s'", param,
                role->valuestring);
            return CAIRN_EINVAL;
        }
        if (rc)
            return rc;
    }
    /* A final assistant turn is a prefill: the model continues it. */
    const cJSON *last = cJSON_GetArrayItem(r->messages, cJSON_GetArraySize(r->messages) - 1);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(last, "role");
    r->continue_final = cJSON_IsString(role) && !strcmp(role->valuestring, "assistant");
    return 0;
}

/* Fields accepted and ignored: parts of the API that do not change a local model's output. */
static const char *const ignored_fields[] = {
    "service_tier", "container", "mcp_servers", "context_management", "betas",
    "output_config", "output_format", "inference_geo", "anthropic_version", NULL,
};

static bool ignored(const char *k)
{
    for (const char *const *f = ignored_fields; *f; f++)
        if (!strcmp(*f, k))
            return true;
    return false;
}

/* Cairn's extensions shared with the OpenAI adapters' names and ranges. */
static int f_extension(const cJSON *v, gen_request_t *r, api_error_t *err);

/* Whether a block of blocks (system, tools, a message's content) carries cache_control. */
static bool blocks_cache_control(const cJSON *blocks)
{
    const cJSON *b;
    if (!cJSON_IsArray(blocks))
        return false;
    cJSON_ArrayForEach(b, blocks) {
        const cJSON *cc = cJSON_GetObjectItemCaseSensitive(b, "cache_control");
        if (cc && !cJSON_IsNull(cc))
            return true;
    }
    return false;
}

/* cache_control on a system block, a tool or a message's block: the client asks for the
 * prefix to be cached, so the request is a retention hint (gen_request_t.retain). */
static bool asks_caching(const ant_body_t *b)
{
    if (blocks_cache_control(b->system) || blocks_cache_control(b->tools))
        return true;
    const cJSON *m;
    if (cJSON_IsArray(b->messages))
        cJSON_ArrayForEach(m, b->messages) {
            if (blocks_cache_control(cJSON_GetObjectItemCaseSensitive(m, "content")))
                return true;
        }
    return false;
}

static int ant_parse(const api_input_t *in, gen_request_t *r, api_error_t *err)
{
    gen_request_init(r);
    r->prompt_kind = GEN_PROMPT_MESSAGES;
    r->prompt_param = "messages";
    r->max_tokens_param = "max_tokens";
    r->max_tokens_is_bound = true; /* Anthropic's clients know no context but Claude's */
    bool count = in->op == API_OP_COUNT_TOKENS;
    cJSON *root = NULL;
    ant_body_t b = {0};
    bool have_model = false;
    int rc = api_json_object(in->body, in->len, 64, &root, err);
    if (rc)
        goto fail;
    const cJSON *v;
    cJSON_ArrayForEach(v, root) {
        const char *k = v->string;
        rc = 0;
        if (!strcmp(k, "model")) {
            if (!cJSON_IsString(v)) {
                BAD("model", "model must be a string");
                rc = CAIRN_EINVAL;
            } else if (!(r->model = cairn_strdup(v->valuestring))) {
                rc = CAIRN_ENOMEM;
            }
            have_model = true;
        } else if (!strcmp(k, "messages")) {
            b.messages = v;
        } else if (!strcmp(k, "system")) {
            b.system = v;
        } else if (!strcmp(k, "tools")) {
            b.tools = v;
        } else if (!strcmp(k, "max_tokens")) {
            long long x;
            if (!get_int(v, 1, INT32_MAX, &x)) {
                BAD("max_tokens", "max_tokens must be an integer >= 1");
                rc = CAIRN_EINVAL;
            } else {
                r->sampling.max_tokens = (int32_t)x;
                b.has_max_tokens = true;
            }
        } else if (!strcmp(k, "stream")) {
            if (!cJSON_IsBool(v) && !cJSON_IsNull(v)) {
                BAD("stream", "stream must be a boolean");
                rc = CAIRN_EINVAL;
            }
            r->stream = cJSON_IsTrue(v);
        } else if (!strcmp(k, "temperature")) {
            rc = set_number(v, &r->sampling.temperature, err);
        } else if (!strcmp(k, "top_p")) {
            rc = set_number(v, &r->sampling.top_p, err);
        } else if (!strcmp(k, "top_k")) {
            long long x = 0;
            if (!cJSON_IsNull(v) && !get_int(v, -1, INT32_MAX, &x)) {
                BAD("top_k", "top_k must be an integer");
                rc = CAIRN_EINVAL;
            } else if (!cJSON_IsNull(v)) {
                r->sampling.top_k = (int32_t)x;
            }
        } else if (!strcmp(k, "stop_sequences")) {
            rc = f_stop_sequences(v, r, err);
        } else if (!strcmp(k, "thinking")) {
            rc = f_thinking(v, r, err);
        } else if (!strcmp(k, "tool_choice")) {
            rc = f_tool_choice(v, r, err);
        } else if (!strcmp(k, "metadata")) {
            rc = f_metadata(v, r, err);
        } else if (ignored(k)) {
            rc = 0;
        } else {
            rc = f_extension(v, r, err);
        }
        if (rc == CAIRN_ENOMEM)
            api_error_oom(err);
        if (rc)
            goto fail;
    }
    rc = CAIRN_EINVAL;
    if (!have_model) {
        BAD("model", "model: Field required");
        goto fail;
    }
    if (!b.messages) {
        BAD("messages", "messages: Field required");
        goto fail;
    }
    if (!count && !b.has_max_tokens) {
        BAD("max_tokens", "max_tokens: Field required");
        goto fail;
    }
    if ((rc = convert_messages(&b, r, err)) || (rc = convert_tools(b.tools, r, err))) {
        if (rc == CAIRN_ENOMEM)
            api_error_oom(err);
        goto fail;
    }
    r->retain = asks_caching(&b);
    cJSON_Delete(root);
    return 0;
fail:
    cJSON_Delete(root);
    gen_request_fini(r);
    return rc;
}

/* Extensions: the OpenAI adapters' sampling fields, parsed by their own handlers. */
static int f_extension(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    static const char *const names[] = {"cache_salt", "seed", "logit_bias", "stop_token_ids",
                                        "ignore_eos", "min_tokens", "repetition_penalty",
                                        "presence_penalty", "frequency_penalty", "min_p", NULL};
    for (const char *const *n = names; *n; n++) {
        if (strcmp(*n, v->string) != 0)
            continue;
        for (size_t i = 0; i < oai_common_count; i++)
            if (!strcmp(oai_common_fields[i].name, *n))
                return oai_common_fields[i].parse(v, r, err);
    }
    if (!strcmp(v->string, "chat_template_kwargs")) {
        if (cJSON_IsNull(v))
            return 0;
        if (!cJSON_IsObject(v)) {
            BAD(v->string, "chat_template_kwargs must be an object");
            return CAIRN_EINVAL;
        }
        return (r->template_kwargs = cJSON_Duplicate(v, true)) ? 0 : CAIRN_ENOMEM;
    }
    api_error_set(err, 400, API_ERR_INVALID_REQUEST, v->string, "unknown_parameter",
                  "%s: Extra inputs are not permitted", v->string);
    return CAIRN_EINVAL;
}

/* ---- Errors -------------------------------------------------------------------------- */

static const char *error_type(const api_error_t *e)
{
    if (e->http_status == 413)
        return "request_too_large";
    if (e->http_status == 404 || e->http_status == 405)
        return "not_found_error";
    switch (e->kind) {
    case API_ERR_INVALID_REQUEST: return "invalid_request_error";
    case API_ERR_AUTHENTICATION: return "authentication_error";
    case API_ERR_NOT_FOUND: return "not_found_error";
    case API_ERR_RATE_LIMIT: return "rate_limit_error";
    case API_ERR_SERVER: return "api_error";
    case API_ERR_UNAVAILABLE: return "overloaded_error";
    }
    return "api_error"; /* not reached: every kind is listed above */
}

static cJSON *error_json(const api_error_t *e)
{
    cJSON *o = cJSON_CreateObject(), *in = cJSON_CreateObject();
    bool ok = o && in && add(o, "type", cJSON_CreateString("error"))
              && add(in, "type", cJSON_CreateString(error_type(e)))
              && add(in, "message", cJSON_CreateString(e->message));
    if (ok) {
        ok = add(o, "error", in);
        in = NULL;
    }
    cJSON_Delete(in);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Prints root (deleting it) onto out between prefix and suffix; never half an event. */
static int emit(api_buf_t *out, cJSON *root, const char *prefix, const char *suffix)
{
    if (!root)
        return CAIRN_ENOMEM;
    char *txt = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!txt)
        return CAIRN_ENOMEM;
    size_t mark = out->len;
    int rc = api_buf_append(out, prefix, strlen(prefix));
    rc = rc ? rc : api_buf_append(out, txt, strlen(txt));
    rc = rc ? rc : api_buf_append(out, suffix, strlen(suffix));
    if (rc && out->p) {
        out->len = mark;
        out->p[mark] = '\0';
    }
    cJSON_free(txt);
    return rc;
}

static int ant_render_error(const api_error_t *e, api_buf_t *out)
{
    return emit(out, error_json(e), "", "");
}

/* ---- Responses ----------------------------------------------------------------------- */

typedef enum { BLK_NONE = 0, BLK_TEXT, BLK_THINKING, BLK_TOOL } blk_kind_t;

typedef struct {
    /* Streams: the open content block. */
    blk_kind_t open;
    int index;                /* content blocks started so far */
    /* Whole responses: the content array being built. */
    cJSON *content;
    api_buf_t text, args;     /* the open text/thinking block, the open call's input */
    blk_kind_t cur;
    cJSON *call;              /* the tool_use block being received */
} ant_state_t;

static cJSON *usage_json(const api_usage_t *u, int output_tokens)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = o && add(o, "input_tokens", cJSON_CreateNumber(u->prompt_tokens - u->cached_tokens))
              && add(o, "cache_creation_input_tokens", cJSON_CreateNumber(0))
              && add(o, "cache_read_input_tokens", cJSON_CreateNumber(u->cached_tokens))
              && add(o, "output_tokens", cJSON_CreateNumber(output_tokens));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static const char *stop_reason(const api_end_t *e)
{
    if (e->finish[0] == CAIRN_FINISH_LENGTH)
        return "max_tokens";
    return e->tool_calls && e->tool_calls[0] > 0 ? "tool_use" : "end_turn";
}

/* An SSE event: "event: TYPE\ndata: {...}\n\n". */
static int event(api_render_t *r, const char *type, cJSON *data)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "event: %s\ndata: ", type);
    if (data && !add(data, "type", cJSON_CreateString(type))) {
        cJSON_Delete(data);
        return CAIRN_ENOMEM;
    }
    return emit(&r->out, data, prefix, "\n\n");
}

static cJSON *message_json(const api_render_t *r, cJSON *content, const char *stop,
                           const api_usage_t *u, int output_tokens)
{
    cJSON *m = cJSON_CreateObject();
    bool ok = m && add(m, "id", cJSON_CreateString(r->id))
              && add(m, "type", cJSON_CreateString("message"))
              && add(m, "role", cJSON_CreateString("assistant"))
              && add(m, "model", cJSON_CreateString(r->model));
    if (ok)
        ok = add(m, "content", content ? content : cJSON_CreateArray());
    else
        cJSON_Delete(content);
    ok = ok && add(m, "stop_reason", stop ? cJSON_CreateString(stop) : cJSON_CreateNull())
         && add(m, "stop_sequence", cJSON_CreateNull())
         && add(m, "usage", usage_json(u, output_tokens));
    if (!ok) {
        cJSON_Delete(m);
        return NULL;
    }
    return m;
}

static int ant_begin(api_render_t *r)
{
    ant_state_t *st = cairn_calloc(1, sizeof *st);
    if (!(r->state = st))
        return CAIRN_ENOMEM;
    if (!r->req->stream)
        return (st->content = cJSON_CreateArray()) ? 0 : CAIRN_ENOMEM;
    cJSON *d = cJSON_CreateObject();
    if (!d || !add(d, "message", message_json(r, NULL, NULL, &r->usage, 1))) {
        cJSON_Delete(d);
        return CAIRN_ENOMEM;
    }
    int rc = event(r, "message_start", d);
    return rc ? rc : event(r, "ping", cJSON_CreateObject());
}

/* Streams: closes the open block. */
static int stream_close(api_render_t *r)
{
    ant_state_t *st = r->state;
    if (st->open == BLK_NONE)
        return 0;
    int rc = 0;
    if (st->open == BLK_THINKING) { /* a local model signs nothing: an empty signature */
        cJSON *d = cJSON_CreateObject(), *delta = cJSON_CreateObject();
        bool ok = d && delta && add(d, "index", cJSON_CreateNumber(st->index - 1))
                  && add(delta, "type", cJSON_CreateString("signature_delta"))
                  && add(delta, "signature", cJSON_CreateString(""));
        if (ok) {
            ok = add(d, "delta", delta);
            delta = NULL;
        }
        cJSON_Delete(delta);
        if (!ok) {
            cJSON_Delete(d);
            return CAIRN_ENOMEM;
        }
        rc = event(r, "content_block_delta", d);
    }
    cJSON *d = cJSON_CreateObject();
    if (!rc && (!d || !add(d, "index", cJSON_CreateNumber(st->index - 1)))) {
        cJSON_Delete(d);
        return CAIRN_ENOMEM;
    }
    if (rc) {
        cJSON_Delete(d);
        return rc;
    }
    st->open = BLK_NONE;
    return event(r, "content_block_stop", d);
}

/* Streams: opens a block of kind k (block: its content_block object, taken). */
static int stream_open(api_render_t *r, blk_kind_t k, cJSON *block)
{
    ant_state_t *st = r->state;
    int rc = stream_close(r);
    cJSON *d = rc ? NULL : cJSON_CreateObject();
    if (!rc && (!d || !block || !add(d, "index", cJSON_CreateNumber(st->index)))) {
        cJSON_Delete(d);
        cJSON_Delete(block);
        return CAIRN_ENOMEM;
    }
    if (rc) {
        cJSON_Delete(block);
        return rc;
    }
    if (!add(d, "content_block", block)) {
        cJSON_Delete(d);
        return CAIRN_ENOMEM;
    }
    st->open = k;
    st->index++;
    return event(r, "content_block_start", d);
}

static cJSON *block_json(const char *type, const char *key, const char *text, size_t len)
{
    cJSON *b = cJSON_CreateObject();
    bool ok = b && add(b, "type", cJSON_CreateString(type))
              && add(b, key, string_n(text, len));
    if (ok && !strcmp(type, "thinking"))
        ok = add(b, "signature", cJSON_CreateString(""));
    if (!ok) {
        cJSON_Delete(b);
        return NULL;
    }
    return b;
}

static int stream_delta(api_render_t *r, const api_delta_t *d)
{
    ant_state_t *st = r->state;
    const char *dtype = NULL, *key = NULL;
    int rc = 0;
    switch (d->kind) {
    case API_DELTA_TEXT:
        if (st->open != BLK_TEXT)
            rc = stream_open(r, BLK_TEXT, block_json("text", "text", "", 0));
        dtype = "text_delta";
        key = "text";
        break;
    case API_DELTA_REASONING:
        if (st->open != BLK_THINKING)
            rc = stream_open(r, BLK_THINKING, block_json("thinking", "thinking", "", 0));
        dtype = "thinking_delta";
        key = "thinking";
        break;
    case API_DELTA_TOOL_CALL_BEGIN: {
        cJSON *b = cJSON_CreateObject();
        bool ok = b && add(b, "type", cJSON_CreateString("tool_use"))
                  && add(b, "id", cJSON_CreateString(d->tool_id))
                  && add(b, "name", string_n(d->text, d->len))
                  && add(b, "input", cJSON_CreateObject());
        if (!ok) {
            cJSON_Delete(b);
            return CAIRN_ENOMEM;
        }
        return stream_open(r, BLK_TOOL, b);
    }
    case API_DELTA_TOOL_CALL_ARGS:
        dtype = "input_json_delta";
        key = "partial_json";
        break;
    case API_DELTA_TOOL_CALL_END:
        return stream_close(r);
    case API_DELTA_LOGPROBS:
        return 0; /* this API never asks for them (gen_request_t.logprobs stays false) */
    }
    if (rc || !dtype)
        return rc ? rc : CAIRN_EINVAL;
    cJSON *ev = cJSON_CreateObject(), *delta = cJSON_CreateObject();
    bool ok = ev && delta && add(ev, "index", cJSON_CreateNumber(st->index - 1))
              && add(delta, "type", cJSON_CreateString(dtype))
              && add(delta, key, string_n(d->text, d->len));
    if (ok) {
        ok = add(ev, "delta", delta);
        delta = NULL;
    }
    cJSON_Delete(delta);
    if (!ok) {
        cJSON_Delete(ev);
        return CAIRN_ENOMEM;
    }
    return event(r, "content_block_delta", ev);
}

/* Whole responses: closes the block being accumulated into st->content. */
static int full_close(ant_state_t *st)
{
    int rc = 0;
    if (st->cur == BLK_TEXT || st->cur == BLK_THINKING) {
        bool thinking = st->cur == BLK_THINKING;
        rc = push(st->content, block_json(thinking ? "thinking" : "text",
                                          thinking ? "thinking" : "text", st->text.p,
                                          st->text.len))
                 ? 0
                 : CAIRN_ENOMEM;
        api_buf_free(&st->text);
    }
    st->cur = BLK_NONE;
    return rc;
}

static int full_delta(ant_state_t *st, const api_delta_t *d)
{
    int rc = 0;
    switch (d->kind) {
    case API_DELTA_TEXT:
    case API_DELTA_REASONING: {
        blk_kind_t k = d->kind == API_DELTA_TEXT ? BLK_TEXT : BLK_THINKING;
        if (st->cur != k && (rc = full_close(st)))
            return rc;
        st->cur = k;
        return api_buf_append(&st->text, d->text, d->len);
    }
    case API_DELTA_TOOL_CALL_BEGIN: {
        if ((rc = full_close(st)))
            return rc;
        cJSON *b = cJSON_CreateObject();
        bool ok = b && add(b, "type", cJSON_CreateString("tool_use"))
                  && add(b, "id", cJSON_CreateString(d->tool_id))
                  && add(b, "name", string_n(d->text, d->len));
        if (!ok) {
            cJSON_Delete(b);
            return CAIRN_ENOMEM;
        }
        st->call = b;
        api_buf_free(&st->args);
        st->cur = BLK_TOOL;
        return 0;
    }
    case API_DELTA_TOOL_CALL_ARGS:
        return api_buf_append(&st->args, d->text, d->len);
    case API_DELTA_TOOL_CALL_END: {
        /* A call cut off mid-arguments has no valid JSON: its input is then {}. */
        cJSON *input = NULL;
        if (st->args.p && cairn_json_parse(st->args.p, st->args.len, NULL, &input, NULL) == CAIRN_ENOMEM) {
            api_buf_free(&st->args);
            return CAIRN_ENOMEM;
        }
        if (!cJSON_IsObject(input)) {
            cJSON_Delete(input);
            input = cJSON_CreateObject();
        }
        api_buf_free(&st->args);
        cJSON *b = st->call;
        st->call = NULL;
        st->cur = BLK_NONE;
        if (!b || !add(b, "input", input) || !push(st->content, b)) {
            cJSON_Delete(b);
            return CAIRN_ENOMEM;
        }
        return 0;
    }
    case API_DELTA_LOGPROBS:
        return 0; /* this API never asks for them (gen_request_t.logprobs stays false) */
    }
    return CAIRN_EINVAL; /* not reached: every kind is handled above */
}

static int ant_delta(api_render_t *r, const api_delta_t *d)
{
    if (d->choice != 0)
        return CAIRN_EINVAL;
    return r->req->stream ? stream_delta(r, d) : full_delta(r->state, d);
}

static int ant_end(api_render_t *r, const api_end_t *e)
{
    ant_state_t *st = r->state;
    int out = e->usage.completion_tokens;
    if (!r->req->stream) {
        int rc = full_close(st);
        if (rc)
            return rc;
        if (cJSON_GetArraySize(st->content) == 0 && !push(st->content, block_json("text", "text", "", 0)))
            return CAIRN_ENOMEM;
        cJSON *m = message_json(r, st->content, stop_reason(e), &e->usage, out);
        st->content = NULL;
        return emit(&r->out, m, "", "");
    }
    int rc = stream_close(r);
    cJSON *d = rc ? NULL : cJSON_CreateObject(), *delta = rc ? NULL : cJSON_CreateObject();
    bool ok = !rc && d && delta && add(delta, "stop_reason", cJSON_CreateString(stop_reason(e)))
              && add(delta, "stop_sequence", cJSON_CreateNull());
    if (ok) {
        ok = add(d, "delta", delta);
        delta = NULL;
    }
    ok = ok && add(d, "usage", usage_json(&e->usage, out));
    cJSON_Delete(delta);
    if (!ok) {
        cJSON_Delete(d);
        return rc ? rc : CAIRN_ENOMEM;
    }
    rc = event(r, "message_delta", d);
    return rc ? rc : event(r, "message_stop", cJSON_CreateObject());
}

static int ant_fail(api_render_t *r, const api_error_t *e)
{
    return emit(&r->out, error_json(e), "event: error\ndata: ", "\n\n");
}

static void ant_release(api_render_t *r)
{
    ant_state_t *st = r->state;
    if (!st)
        return;
    cJSON_Delete(st->content);
    cJSON_Delete(st->call);
    api_buf_free(&st->text);
    api_buf_free(&st->args);
    cairn_free(st);
    r->state = NULL;
}

static int ant_render_count(const gen_request_t *req, int n_tokens, api_buf_t *out)
{
    (void)req;
    return api_buf_printf(out, "{\"input_tokens\":%d}", n_tokens);
}

/* GET /v1/models with anthropic-version (what Anthropic clients send): the one served
 * model as {"type": "model", "id", "display_name", "created_at"}. */
static int ant_render_models(const api_model_t *m, const char *want, api_buf_t *out,
                             api_error_t *err)
{
    if (want && strcmp(want, m->id) != 0) {
        api_error_set(err, 404, API_ERR_NOT_FOUND, "model", "model_not_found",
                      "model: %s", want);
        return CAIRN_ENOENT;
    }
    char created[32];
    time_t t = (time_t)m->created;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON *mo = cJSON_CreateObject();
    bool ok = mo && add(mo, "type", cJSON_CreateString("model"))
              && add(mo, "id", cJSON_CreateString(m->id))
              && add(mo, "display_name", cJSON_CreateString(m->id))
              && add(mo, "created_at", cJSON_CreateString(created))
              && add(mo, "max_input_tokens", cJSON_CreateNumber(m->max_model_len));
    if (!ok) {
        cJSON_Delete(mo);
        return CAIRN_ENOMEM;
    }
    if (want)
        return emit(out, mo, "", "");
    cJSON *root = cJSON_CreateObject(), *data = cJSON_CreateArray();
    if (!root || !data)
        cJSON_Delete(mo);
    ok = root && data && push(data, mo); /* push frees mo when it fails */
    if (ok) {
        ok = add(root, "data", data);
        data = NULL;
    }
    cJSON_Delete(data);
    ok = ok && add(root, "has_more", cJSON_CreateFalse())
         && add(root, "first_id", cJSON_CreateString(m->id))
         && add(root, "last_id", cJSON_CreateString(m->id));
    if (!ok) {
        cJSON_Delete(root);
        return CAIRN_ENOMEM;
    }
    return emit(out, root, "", "");
}

static const api_route_t ant_routes[] = {
    {"/v1/messages", API_OP_GENERATE, NULL},
    {"/v1/messages/count_tokens", API_OP_COUNT_TOKENS, NULL},
    {"/v1/models", API_OP_LIST_MODELS, "anthropic-version"},
};

const api_adapter_t api_anthropic_messages = {
    .name = "anthropic.messages",
    .routes = ant_routes,
    .n_routes = CAIRN_ARRAY_LEN(ant_routes),
    .auth = ant_auth,
    .n_auth = CAIRN_ARRAY_LEN(ant_auth),
    .id_prefix = "msg_",
    .content_type = "application/json",
    .stream_content_type = "text/event-stream",
    .oom_body = ANT_OOM_BODY,
    .keepalive = "event: ping\ndata: {\"type\":\"ping\"}\n\n",
    .parse = ant_parse,
    .render_error = ant_render_error,
    .begin = ant_begin,
    .delta = ant_delta,
    .end = ant_end,
    .fail = ant_fail,
    .release = ant_release,
    .render_count = ant_render_count,
    .render_models = ant_render_models,
};
