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
    if (c && cJSON_IsString(c))
        return 0;
    if (!c || cJSON_IsNull(c)) { /* templates concatenate content: "" (an assistant turn
                                  * that only called tools has none) */
        cJSON *e = cJSON_CreateString("");
        bool ok = e && (c ? cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", e)
                          : cJSON_AddItemToObject(msg, "content", e));
        if (!ok) {
            cJSON_Delete(e);
            return CAIRN_ENOMEM;
        }
        return 0;
    }
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

/* reasoning_effort: "none"/"minimal" turn the template's thinking switch off, the other
 * efforts on (the effort itself has no further effect). */
static int f_reasoning_effort(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    static const char *const off[] = {"none", "minimal"};
    static const char *const on[] = {"low", "medium", "high", "xhigh"};
    if (cJSON_IsNull(v))
        return 0;
    for (size_t i = 0; cJSON_IsString(v) && i < CAIRN_ARRAY_LEN(off); i++)
        if (!strcmp(v->valuestring, off[i])) {
            r->enable_thinking = 0;
            return 0;
        }
    for (size_t i = 0; cJSON_IsString(v) && i < CAIRN_ARRAY_LEN(on); i++)
        if (!strcmp(v->valuestring, on[i])) {
            r->enable_thinking = 1;
            return 0;
        }
    BAD(v->string, "reasoning_effort must be one of none, minimal, low, medium, high, xhigh");
    return CAIRN_EINVAL;
}

/* Accepted, with no effect on generation (docs/API.md): strings. */
static int f_ignored_string(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    (void)r;
    if (cJSON_IsNull(v) || cJSON_IsString(v))
        return 0;
    BAD(v->string, "%s must be a string", v->string);
    return CAIRN_EINVAL;
}

/* prompt_cache_key: a string; a non-empty one is a retention hint (docs/API.md), never a
 * cache domain (cache_salt and the API key are). */
static int f_prompt_cache_key(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsString(v)) {
        BAD(v->string, "%s must be a string", v->string);
        return CAIRN_EINVAL;
    }
    r->retain = v->valuestring[0] != '\0';
    return 0;
}

/* modalities: text only. */
static int f_modalities(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    (void)r;
    if (cJSON_IsNull(v))
        return 0;
    const cJSON *m;
    bool ok = cJSON_IsArray(v);
    cJSON_ArrayForEach(m, v) ok = ok && cJSON_IsString(m) && !strcmp(m->valuestring, "text");
    if (ok)
        return 0;
    api_error_set(err, 400, API_ERR_INVALID_REQUEST, "modalities", "unsupported_parameter",
                  "modalities: this server produces text only");
    return CAIRN_EUNSUPPORTED;
}

static int f_logprobs(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsBool(v)) {
        BAD("logprobs", "logprobs must be a boolean");
        return CAIRN_EINVAL;
    }
    r->logprobs = cJSON_IsTrue(v);
    return 0;
}

static int f_top_logprobs(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    long long x;
    if (cJSON_IsNull(v))
        return 0;
    if (!oai_get_int(v, 0, 20, &x)) {
        BAD("top_logprobs", "top_logprobs must be an integer in [0, 20]");
        return CAIRN_EINVAL;
    }
    r->top_logprobs = (int)x;
    return 0;
}

static int f_parallel_tool_calls(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    (void)r;
    return oai_default_bool(v, true, err);
}

/* store: accepted either way; nothing is ever stored. */
static int f_store(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    (void)r;
    return oai_default_bool(v, true, err);
}

static int f_response_format(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    (void)r;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
    if (cJSON_IsNull(v) || (cJSON_IsObject(v) && cJSON_IsString(t) && !strcmp(t->valuestring, "text")))
        return 0;
    api_error_set(err, 400, API_ERR_INVALID_REQUEST, "response_format", "unsupported_parameter",
                  "response_format: only {\"type\": \"text\"} is supported (json_object and "
                  "json_schema need constrained decoding, which this server does not do)");
    return CAIRN_EUNSUPPORTED;
}

/* tool_choice: "none" turns call parsing off; "auto", "required" and a named function
 * are accepted, but the output is not constrained (the model decides). */
static int f_tool_choice(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    if (cJSON_IsString(v) && !strcmp(v->valuestring, "none")) {
        r->no_tool_calls = true;
        return 0;
    }
    if (cJSON_IsString(v) && (!strcmp(v->valuestring, "auto") || !strcmp(v->valuestring, "required")))
        return 0;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
    if (cJSON_IsObject(v) && cJSON_IsString(t)
        && (!strcmp(t->valuestring, "function") || !strcmp(t->valuestring, "allowed_tools")
            || !strcmp(t->valuestring, "custom")))
        return 0;
    BAD("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or a tool object");
    return CAIRN_EINVAL;
}

static int f_metadata(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    (void)r;
    if (cJSON_IsNull(v) || cJSON_IsObject(v))
        return 0;
    BAD(v->string, "metadata must be an object");
    return CAIRN_EINVAL;
}

/* Fields of the API with nothing to do here, accepted only when null or empty: audio
 * output, predicted outputs, web search, and the deprecated functions/function_call
 * (send tools). Anything else names the field in a 400. */
static int f_null_only(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    (void)r;
    if (cJSON_IsNull(v) || (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0)
        || (cJSON_IsString(v) && !strcmp(v->string, "function_call") && !strcmp(v->valuestring, "none")))
        return 0;
    return oai_unsupported(v, err);
}

/* vLLM's extensions: continue_final_message (the last message is an assistant prefill to
 * continue) and add_generation_prompt (false: no assistant header). */
static int f_continue_final(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsBool(v)) {
        BAD(v->string, "continue_final_message must be a boolean");
        return CAIRN_EINVAL;
    }
    r->continue_final = cJSON_IsTrue(v);
    return 0;
}

static int f_add_generation_prompt(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsBool(v)) {
        BAD(v->string, "add_generation_prompt must be a boolean");
        return CAIRN_EINVAL;
    }
    r->no_generation_prompt = cJSON_IsFalse(v);
    return 0;
}

static const oai_field_t chat_fields[] = {
    {"messages", f_messages},
    {"tools", f_tools},
    {"chat_template_kwargs", f_template_kwargs},
    {"max_completion_tokens", oai_field_max_tokens},
    {"logprobs", f_logprobs},
    {"top_logprobs", f_top_logprobs},
    {"response_format", f_response_format},
    {"tool_choice", f_tool_choice},
    {"parallel_tool_calls", f_parallel_tool_calls},
    {"store", f_store},
    {"metadata", f_metadata},
    {"reasoning_effort", f_reasoning_effort},
    {"prompt_cache_key", f_prompt_cache_key},
    {"prompt_cache_retention", f_ignored_string},
    {"safety_identifier", f_ignored_string},
    {"service_tier", f_ignored_string},
    {"verbosity", f_ignored_string},
    {"modalities", f_modalities},
    {"continue_final_message", f_continue_final},
    {"audio", f_null_only},
    {"prediction", f_null_only},
    {"web_search_options", f_null_only},
    {"functions", f_null_only},
    {"function_call", f_null_only},
    {"add_generation_prompt", f_add_generation_prompt},
};

static int chat_parse(const api_input_t *in, gen_request_t *r, api_error_t *err)
{
    gen_request_init(r);
    r->prompt_kind = GEN_PROMPT_MESSAGES;
    r->prompt_param = "messages";
    int rc = oai_parse_body(in, chat_fields, CAIRN_ARRAY_LEN(chat_fields), "messages", r, err);
    if (!rc && r->top_logprobs > 0 && !r->logprobs) {
        BAD("top_logprobs", "top_logprobs requires logprobs: true");
        gen_request_fini(r);
        return CAIRN_EINVAL;
    }
    return rc;
}

/* ---- Response ---------------------------------------------------------------------- */

static int chat_begin(api_render_t *r)
{
    int rc = oai_begin(r);
    if (!rc)
        ((oai_state_t *)r->state)->chat = true;
    for (int i = 0; !rc && r->req->stream && i < r->req->n; i++)
        rc = oai_emit_chunk(r, true, i, "", 0, true, CAIRN_FINISH_NONE);
    return rc;
}

/* A streamed tool-call delta: {"tool_calls": [{"index", "id", "type", "function": {...}}]},
 * the id, type and name in the call's first chunk, argument fragments after it. */
static int stream_call(api_render_t *r, const api_delta_t *d, bool first)
{
    cJSON *delta = cJSON_CreateObject(), *calls = cJSON_CreateArray();
    cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    bool ok = delta && calls && call && fn
              && oai_add(call, "index", cJSON_CreateNumber(d->tool));
    if (ok && first)
        ok = oai_add(call, "id", cJSON_CreateString(d->tool_id))
             && oai_add(call, "type", cJSON_CreateString("function"))
             && oai_add(fn, "name", oai_string_n(d->text, d->len))
             && oai_add(fn, "arguments", cJSON_CreateString(""));
    else if (ok)
        ok = oai_add(fn, "arguments", oai_string_n(d->text, d->len));
    if (ok) {
        ok = oai_add(call, "function", fn);
        fn = NULL;
    }
    if (ok && cJSON_AddItemToArray(calls, call))
        call = NULL;
    else
        ok = false;
    if (ok) {
        ok = oai_add(delta, "tool_calls", calls);
        calls = NULL;
    }
    cJSON_Delete(fn);
    cJSON_Delete(call);
    cJSON_Delete(calls);
    if (!ok) {
        cJSON_Delete(delta);
        return CAIRN_ENOMEM;
    }
    return oai_emit_delta(r, true, d->choice, delta, NULL, 0, CAIRN_FINISH_NONE, 0);
}

static int chat_delta(api_render_t *r, const api_delta_t *d)
{
    if (!r->req->stream)
        return oai_accumulate(r, d);
    switch (d->kind) {
    case API_DELTA_TEXT:
        return oai_emit_chunk(r, true, d->choice, d->text, d->len, false, CAIRN_FINISH_NONE);
    case API_DELTA_REASONING: {
        cJSON *delta = cJSON_CreateObject();
        if (!delta || !oai_add(delta, "reasoning_content", oai_string_n(d->text, d->len))) {
            cJSON_Delete(delta);
            return CAIRN_ENOMEM;
        }
        return oai_emit_delta(r, true, d->choice, delta, NULL, 0, CAIRN_FINISH_NONE, 0);
    }
    case API_DELTA_TOOL_CALL_BEGIN:
        return stream_call(r, d, true);
    case API_DELTA_TOOL_CALL_ARGS:
        return stream_call(r, d, false);
    case API_DELTA_TOOL_CALL_END:
        return 0; /* a chat stream has no end-of-call event */
    case API_DELTA_LOGPROBS:
        return oai_emit_logprobs(r, true, d);
    }
    return CAIRN_EINVAL; /* not reached: every kind is handled above */
}

/* A chat choice: the assistant message (content null for a turn that only called tools,
 * reasoning_content, tool_calls), logprobs and finish_reason. */
static bool chat_choice(api_render_t *r, const api_end_t *e, int i, cJSON *c)
{
    oai_state_t *st = r->state;
    cJSON *msg = cJSON_CreateObject();
    int n_calls = cJSON_GetArraySize(st->calls[i]);
    /* A turn that only called tools has null content, as OpenAI answers. */
    bool no_text = n_calls > 0 && st->text[i].len == 0;
    bool ok = msg && oai_add(msg, "role", cJSON_CreateString("assistant"))
              && oai_add(msg, "content", no_text ? cJSON_CreateNull()
                                                 : oai_string_n(st->text[i].p, st->text[i].len));
    if (ok && st->reasoning[i].len)
        ok = oai_add(msg, "reasoning_content", oai_string_n(st->reasoning[i].p, st->reasoning[i].len));
    if (ok && n_calls) {
        ok = oai_add(msg, "tool_calls", st->calls[i]);
        st->calls[i] = NULL;
    }
    if (ok)
        ok = oai_add(c, "message", msg);
    else
        cJSON_Delete(msg);
    return ok && oai_add(c, "logprobs", oai_logprobs_final(r, true, i))
           && oai_add(c, "finish_reason", oai_finish_json(e->finish[i], e->tool_calls ? e->tool_calls[i] : 0));
}

static int chat_end(api_render_t *r, const api_end_t *e)
{
    return r->req->stream ? oai_emit_stream_end(r, true, e)
                          : oai_emit_full(r, "chat.completion", e, chat_choice);
}

/* The model list is OpenAI's too; it lives with chat, the API every OpenAI client uses. */
static const api_route_t chat_routes[] = {
    {"/v1/chat/completions", API_OP_GENERATE, NULL},
    {"/v1/models", API_OP_LIST_MODELS, NULL},
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
