/*
 * openai_chat.c — the OpenAI chat completions adapter: POST /v1/chat/completions.
 *
 * Request. `messages` (roles system, developer, user, assistant, tool; content a string,
 * null or text parts, which are joined with newlines because text models' templates
 * expect strings), `tools` and `chat_template_kwargs` go to the chat template as given;
 * everything else is openai_common.c's. The prompt is GEN_PROMPT_MESSAGES; the server
 * renders it with add_generation_prompt.
 *
 * Response. chat.completion with one message per choice; a stream starts with a
 * {"role":"assistant","content":""} chunk per choice, then content chunks, then one
 * finish chunk per choice, the usage chunk (include_usage) and "data: [DONE]".
 *
 * Also GET /v1/models (and /v1/models/{id}): the one served model.
 *
 * Thread-safety: pure functions over the request's own render state (api.h).
 */
#include <stdio.h>
#include <string.h>

#include "server/api/openai.h"

#define BAD(param, ...) \
    api_error_set(err, 400, API_ERR_INVALID_REQUEST, param, NULL, __VA_ARGS__)

/* ---- Request ----------------------------------------------------------------------- */

/* Content: a string, null, or an array of {"type": "text", "text": ...} parts, joined
 * with newlines into one string. */
static int normalize_content(cJSON *msg, int idx, api_error_t *err)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", idx);
    cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (!c || cJSON_IsNull(c) || cJSON_IsString(c))
        return 0;
    if (!cJSON_IsArray(c)) {
        BAD(param, "%s must be a string, null or an array of text parts", param);
        return CAIRN_EINVAL;
    }
    size_t total = 0;
    int np = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type)) {
            BAD(param, "%s parts must be objects with a \"type\"", param);
            return CAIRN_EINVAL;
        }
        if (strcmp(type->valuestring, "text") != 0) {
            BAD(param, "%s: content part type '%s' is not supported (text only)", param,
                type->valuestring);
            return CAIRN_EINVAL;
        }
        if (!cJSON_IsString(text)) {
            BAD(param, "%s: a text part needs a string \"text\"", param);
            return CAIRN_EINVAL;
        }
        total += strlen(text->valuestring) + 1;
        np++;
    }
    char *joined = cairn_malloc(total + 1);
    if (!joined)
        return CAIRN_ENOMEM;
    size_t o = 0;
    int k = 0;
    cJSON_ArrayForEach(part, c) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t l = strlen(t);
        memcpy(joined + o, t, l);
        o += l;
        if (++k < np)
            joined[o++] = '\n';
    }
    joined[o] = '\0';
    cJSON *s = cJSON_CreateString(joined);
    cairn_free(joined);
    if (!s || !cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", s)) {
        cJSON_Delete(s);
        return CAIRN_ENOMEM;
    }
    return 0;
}

static int f_messages(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0) {
        BAD("messages", "messages must be a non-empty array");
        return CAIRN_EINVAL;
    }
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    int idx = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, v) {
        char param[64];
        snprintf(param, sizeof param, "messages[%d]", idx);
        if (!cJSON_IsObject(m)) {
            BAD(param, "%s must be an object", param);
            return CAIRN_EINVAL;
        }
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role)) {
            BAD(param, "%s.role must be a string", param);
            return CAIRN_EINVAL;
        }
        bool known = false;
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(roles); i++)
            known |= !strcmp(role->valuestring, roles[i]);
        if (!known) {
            BAD(param, "%s.role '%s' is not one of system, developer, user, assistant, tool",
                param, role->valuestring);
            return CAIRN_EINVAL;
        }
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (tc && !cJSON_IsArray(tc) && !cJSON_IsNull(tc)) {
            BAD(param, "%s.tool_calls must be an array", param);
            return CAIRN_EINVAL;
        }
        idx++;
    }
    if (!(r->messages = cJSON_Duplicate(v, true)))
        return CAIRN_ENOMEM;
    idx = 0;
    cJSON *mm;
    cJSON_ArrayForEach(mm, r->messages) {
        int rc = normalize_content(mm, idx++, err);
        if (rc)
            return rc;
    }
    return 0;
}

/* tools (an array) and chat_template_kwargs (an object), kept as given for the template. */
static int template_input(const cJSON *v, bool array, cJSON **dst, api_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    if (array ? !cJSON_IsArray(v) : !cJSON_IsObject(v)) {
        BAD(v->string, "%s must be %s", v->string, array ? "an array" : "an object");
        return CAIRN_EINVAL;
    }
    return (*dst = cJSON_Duplicate(v, true)) ? 0 : CAIRN_ENOMEM;
}

static int f_tools(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    return template_input(v, true, &r->tools, err);
}

static int f_template_kwargs(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    return template_input(v, false, &r->template_kwargs, err);
}

/* Accepted at their default value only (docs/API.md). */
static int f_top_logprobs(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    (void)r;
    return oai_default_int(v, 0, err);
}

static int f_parallel_tool_calls(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    (void)r;
    return oai_default_bool(v, true, err);
}

static int f_store(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    (void)r;
    return oai_default_bool(v, false, err);
}

static int f_response_format(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    (void)r;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
    if (cJSON_IsNull(v) || (cJSON_IsObject(v) && cJSON_IsString(t) && !strcmp(t->valuestring, "text")))
        return 0;
    return oai_unsupported(v, err);
}

static int f_tool_choice(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    (void)r;
    if (cJSON_IsNull(v)
        || (cJSON_IsString(v) && (!strcmp(v->valuestring, "auto") || !strcmp(v->valuestring, "none"))))
        return 0;
    return oai_unsupported(v, err);
}

static int f_metadata(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    (void)r;
    if (cJSON_IsNull(v) || cJSON_IsObject(v))
        return 0;
    BAD(v->string, "metadata must be an object");
    return CAIRN_EINVAL;
}

static const oai_field_t chat_fields[] = {
    {"messages", f_messages},
    {"tools", f_tools},
    {"chat_template_kwargs", f_template_kwargs},
    {"max_completion_tokens", oai_field_max_tokens},
    {"top_logprobs", f_top_logprobs},
    {"response_format", f_response_format},
    {"tool_choice", f_tool_choice},
    {"parallel_tool_calls", f_parallel_tool_calls},
    {"store", f_store},
    {"metadata", f_metadata},
};

static int chat_parse(const api_input_t *in, gen_request_t *r, api_error_t *err)
{
    gen_request_init(r);
    r->prompt_kind = GEN_PROMPT_MESSAGES;
    r->prompt_param = "messages";
    return oai_parse_body(in, chat_fields, CAIRN_ARRAY_LEN(chat_fields), "messages", r, err);
}

/* ---- Response ---------------------------------------------------------------------- */

static int chat_begin(api_render_t *r)
{
    int rc = oai_begin(r);
    for (int i = 0; !rc && r->req->stream && i < r->req->n; i++)
        rc = oai_emit_chunk(r, true, i, "", 0, true, CAIRN_FINISH_NONE);
    return rc;
}

static int chat_delta(api_render_t *r, const api_delta_t *d)
{
    switch (d->kind) {
    case API_DELTA_TEXT:
        if (!r->req->stream)
            return oai_accumulate(r, d);
        return oai_emit_chunk(r, true, d->choice, d->text, d->len, false, CAIRN_FINISH_NONE);
    }
    return CAIRN_EINVAL; /* not reached: every kind is handled above */
}

static int chat_full(api_render_t *r, const api_end_t *e)
{
    oai_state_t *st = r->state;
    cJSON *o = oai_envelope(r, "chat.completion");
    cJSON *choices = cJSON_CreateArray();
    bool ok = o && choices;
    for (int i = 0; ok && i < r->req->n; i++) {
        cJSON *c = cJSON_CreateObject();
        ok = c && cJSON_AddItemToArray(choices, c);
        if (!ok) {
            cJSON_Delete(c);
            break;
        }
        cJSON *msg = cJSON_CreateObject();
        ok = oai_add(c, "index", cJSON_CreateNumber(i)) && msg
             && oai_add(msg, "role", cJSON_CreateString("assistant"))
             && oai_add(msg, "content", oai_string_n(st->text[i].p, st->text[i].len));
        if (ok)
            ok = oai_add(c, "message", msg);
        else
            cJSON_Delete(msg);
        ok = ok && oai_add(c, "logprobs", cJSON_CreateNull())
             && oai_add(c, "finish_reason", oai_finish_json(e->finish[i]));
    }
    if (ok) {
        ok = oai_add(o, "choices", choices);
        choices = NULL;
    }
    ok = ok && oai_add(o, "usage", oai_usage_json(&e->usage));
    cJSON_Delete(choices);
    if (!ok) {
        cJSON_Delete(o);
        return CAIRN_ENOMEM;
    }
    return oai_emit(&r->out, o, "", "");
}

static int chat_end(api_render_t *r, const api_end_t *e)
{
    return r->req->stream ? oai_emit_stream_end(r, true, e) : chat_full(r, e);
}

/* The model list is OpenAI's too; it lives with chat, the API every OpenAI client uses. */
static const api_route_t chat_routes[] = {
    {"/v1/chat/completions", API_OP_GENERATE},
    {"/v1/models", API_OP_LIST_MODELS},
};

const api_adapter_t api_openai_chat = {
    .name = "openai.chat",
    .routes = chat_routes,
    .n_routes = CAIRN_ARRAY_LEN(chat_routes),
    .auth = oai_auth,
    .n_auth = CAIRN_ARRAY_LEN(oai_auth),
    .id_prefix = "chatcmpl",
    .content_type = "application/json",
    .stream_content_type = "text/event-stream",
    .oom_body = OAI_OOM_BODY,
    .parse = chat_parse,
    .render_error = oai_render_error,
    .begin = chat_begin,
    .delta = chat_delta,
    .end = chat_end,
    .fail = oai_fail,
    .release = oai_release,
    .render_count = NULL,
    .render_models = oai_render_models,
};
