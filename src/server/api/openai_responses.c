/*
 * openai_responses.c — the OpenAI Responses API adapter: POST /v1/responses (what Codex
 * and the `openai` SDK's client.responses speak).
 *
 * Request. `input` is a string (one user message) or a list of items: messages ({role,
 * content: a string or input_text/output_text parts}), `function_call` items (they join
 * the assistant turn before them as its tool_calls; arguments as the string the client
 * got), `function_call_output` items (tool messages) and `reasoning` items (the next
 * assistant turn's reasoning_content). `instructions` is the system message. `tools`
 * (function tools) become the template's schemas; `tool_choice` "none" turns call
 * parsing off (the rest are accepted, the output is not constrained); `reasoning.effort`
 * sets the template's enable_thinking ("none"/"minimal" off); `max_output_tokens`,
 * `temperature`, `top_p` sample. There is no response store: `previous_response_id` and
 * `conversation` are refused with a 400 (send the whole conversation), `store` is
 * accepted and nothing is stored, `background` must be false. `text.format` must be
 * text (json_schema needs constrained decoding). metadata, user, safety_identifier,
 * prompt_cache_key, service_tier, truncation, include, parallel_tool_calls and
 * max_tool_calls are accepted with no effect; the OpenAI sampling extensions of
 * openai_common.c (cache_salt, seed, ...) are accepted too.
 *
 * Response. A `response` object whose output lists, in order, reasoning items, message
 * items (one output_text part) and function_call items; status completed, or incomplete
 * (max_output_tokens) with incomplete_details; usage with input_tokens_details.
 * cached_tokens (every prompt token not computed) and its hot/cold split. A stream sends
 * the events the SDK expects, each with a sequence_number: response.created,
 * response.in_progress, then per item output_item.added, (content_part.added,
 * output_text.delta*, output_text.done, content_part.done | reasoning_text.delta*,
 * reasoning_text.done | function_call_arguments.delta*, function_call_arguments.done),
 * output_item.done, and finally response.completed (or response.incomplete); a failure
 * after it began is response.failed.
 *
 * Thread-safety: pure functions over the request's own render state (api.h).
 */
#include <stdio.h>
#include <string.h>

#include "server/api/openai.h"

#define BAD(param, ...) \
    api_error_set(err, 400, API_ERR_INVALID_REQUEST, param, NULL, __VA_ARGS__)

/* ---- Request ------------------------------------------------------------------------- */

/* What the response echoes back (its parameters). */
typedef struct {
    cJSON *tools;         /* the request's tools, as given */
    cJSON *tool_choice;   /* as given, or NULL */
    char *instructions;
    int max_output_tokens; /* 0: none given */
    bool parallel_tool_calls;
} resp_data_t;

static void data_free(void *p)
{
    resp_data_t *d = p;
    cJSON_Delete(d->tools);
    cJSON_Delete(d->tool_choice);
    cairn_free(d->instructions);
    cairn_free(d);
}

static resp_data_t *data_of(gen_request_t *r) { return r->api_data; }

static const char *type_of(const cJSON *v)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* The text of a string or of an array of text parts (input_text, output_text, text). */
static int parts_text(const cJSON *c, const char *param, api_buf_t *b, api_error_t *err)
{
    if (cJSON_IsString(c))
        return api_buf_append(b, c->valuestring, strlen(c->valuestring));
    if (!cJSON_IsArray(c)) {
        BAD(param, "%s.content must be a string or an array of text parts", param);
        return CAIRN_EINVAL;
    }
    const cJSON *p;
    bool first = true;
    cJSON_ArrayForEach(p, c) {
        const char *t = type_of(p);
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!t || (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text")
                   && strcmp(t, "reasoning_text") && strcmp(t, "summary_text"))
            || !cJSON_IsString(text)) {
            BAD(param, "%s: content part type '%s' is not supported (text parts only)", param,
                t ? t : "(none)");
            return CAIRN_EINVAL;
        }
        int rc = first ? 0 : api_buf_append(b, "\n", 1);
        rc = rc ? rc : api_buf_append(b, text->valuestring, strlen(text->valuestring));
        if (rc)
            return rc;
        first = false;
    }
    return 0;
}

static cJSON *new_message(cJSON *msgs, const char *role, const char *text, size_t n)
{
    cJSON *m = cJSON_CreateObject();
    if (!m)
        return NULL;
    if (!oai_add(m, "role", cJSON_CreateString(role)) || !oai_add(m, "content", oai_string_n(text, n))
        || !cJSON_AddItemToArray(msgs, m)) {
        cJSON_Delete(m);
        return NULL;
    }
    return m;
}

/* The input items as template messages. */
typedef struct {
    cJSON *msgs;
    cJSON *last_assistant; /* the assistant message function_call items join, or NULL */
    api_buf_t reasoning;   /* a reasoning item waiting for its assistant turn */
} conv_t;

static int take_reasoning(conv_t *cv, cJSON *m)
{
    if (!cv->reasoning.len)
        return 0;
    bool ok = oai_add(m, "reasoning_content", oai_string_n(cv->reasoning.p, cv->reasoning.len));
    api_buf_free(&cv->reasoning);
    return ok ? 0 : CAIRN_ENOMEM;
}

static int input_item(conv_t *cv, const cJSON *it, const char *param, api_error_t *err)
{
    if (!cJSON_IsObject(it)) {
        BAD(param, "%s must be an object", param);
        return CAIRN_EINVAL;
    }
    const char *t = type_of(it);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
    int rc = 0;
    if (!t || !strcmp(t, "message")) {
        static const char *const roles[] = {"user", "assistant", "system", "developer"};
        bool known = false;
        for (size_t i = 0; cJSON_IsString(role) && i < CAIRN_ARRAY_LEN(roles); i++)
            known |= !strcmp(role->valuestring, roles[i]);
        if (!known) {
            BAD(param, "%s.role must be user, assistant, system or developer", param);
            return CAIRN_EINVAL;
        }
        api_buf_t text = {0};
        rc = parts_text(cJSON_GetObjectItemCaseSensitive(it, "content"), param, &text, err);
        cJSON *m = NULL;
        if (!rc && !(m = new_message(cv->msgs, role->valuestring, text.p, text.len)))
            rc = CAIRN_ENOMEM;
        api_buf_free(&text);
        if (rc)
            return rc;
        bool assistant = !strcmp(role->valuestring, "assistant");
        cv->last_assistant = assistant ? m : NULL;
        return assistant ? take_reasoning(cv, m) : 0;
    }
    if (!strcmp(t, "function_call")) {
        const cJSON *call_id = cJSON_GetObjectItemCaseSensitive(it, "call_id");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(it, "arguments");
        if (!cJSON_IsString(call_id) || !cJSON_IsString(name) || !cJSON_IsString(args)) {
            BAD(param, "%s: a function_call needs string call_id, name and arguments", param);
            return CAIRN_EINVAL;
        }
        cJSON *m = cv->last_assistant;
        if (!m) {
            if (!(m = new_message(cv->msgs, "assistant", "", 0)))
                return CAIRN_ENOMEM;
            cv->last_assistant = m;
            if ((rc = take_reasoning(cv, m)))
                return rc;
        }
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (!calls && !oai_add(m, "tool_calls", calls = cJSON_CreateArray()))
            return CAIRN_ENOMEM;
        cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        bool ok = call && fn && oai_add(call, "id", cJSON_CreateString(call_id->valuestring))
                  && oai_add(call, "type", cJSON_CreateString("function"))
                  && oai_add(fn, "name", cJSON_CreateString(name->valuestring))
                  && oai_add(fn, "arguments", cJSON_CreateString(args->valuestring));
        if (ok) {
            ok = oai_add(call, "function", fn);
            fn = NULL;
        }
        cJSON_Delete(fn);
        if (ok && cJSON_AddItemToArray(calls, call))
            return 0;
        cJSON_Delete(call);
        return CAIRN_ENOMEM;
    }
    if (!strcmp(t, "function_call_output")) {
        const cJSON *call_id = cJSON_GetObjectItemCaseSensitive(it, "call_id");
        const cJSON *out = cJSON_GetObjectItemCaseSensitive(it, "output");
        if (!cJSON_IsString(call_id) || !out) {
            BAD(param, "%s: a function_call_output needs a string call_id and an output", param);
            return CAIRN_EINVAL;
        }
        api_buf_t text = {0};
        rc = parts_text(out, param, &text, err);
        cJSON *m = NULL;
        if (!rc && (!(m = new_message(cv->msgs, "tool", text.p, text.len))
                    || !oai_add(m, "tool_call_id", cJSON_CreateString(call_id->valuestring))))
            rc = CAIRN_ENOMEM;
        api_buf_free(&text);
        cv->last_assistant = NULL;
        return rc;
    }
    if (!strcmp(t, "reasoning")) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!c || cJSON_IsNull(c))
            c = cJSON_GetObjectItemCaseSensitive(it, "summary");
        api_buf_free(&cv->reasoning);
        if (c && cJSON_IsArray(c))
            rc = parts_text(c, param, &cv->reasoning, err);
        cv->last_assistant = NULL;
        return rc;
    }
    BAD(param, "%s: input item type '%s' is not supported", param, t);
    return CAIRN_EINVAL;
}

static int convert_input(const cJSON *input, const char *instructions, gen_request_t *r,
                         api_error_t *err)
{
    conv_t cv = {cJSON_CreateArray(), NULL, {0}};
    if (!(r->messages = cv.msgs))
        return CAIRN_ENOMEM;
    if (instructions && !new_message(cv.msgs, "system", instructions, strlen(instructions)))
        return CAIRN_ENOMEM;
    if (cJSON_IsString(input))
        return new_message(cv.msgs, "user", input->valuestring, strlen(input->valuestring))
                   ? 0
                   : CAIRN_ENOMEM;
    if (!cJSON_IsArray(input) || cJSON_GetArraySize(input) == 0) {
        BAD("input", "input must be a string or a non-empty array of items");
        return CAIRN_EINVAL;
    }
    int idx = 0, rc = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, input) {
        char param[64];
        snprintf(param, sizeof param, "input[%d]", idx++);
        if ((rc = input_item(&cv, it, param, err)))
            break;
    }
    api_buf_free(&cv.reasoning);
    return rc;
}

/* Function tools -> the template's {"type": "function", "function": {...}} schemas. */
static int convert_tools(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (!(r->tools = cJSON_CreateArray()))
        return CAIRN_ENOMEM;
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, v) {
        const char *type = type_of(t);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        if (!type || strcmp(type, "function") || !cJSON_IsString(name)) {
            BAD("tools", "tools[%d]: only function tools with a name are supported", i);
            return CAIRN_EINVAL;
        }
        cJSON *fn = cJSON_CreateObject(), *o = cJSON_CreateObject();
        bool ok = fn && o && oai_add(o, "type", cJSON_CreateString("function"))
                  && oai_add(fn, "name", cJSON_CreateString(name->valuestring));
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(t, "parameters");
        if (ok && cJSON_IsString(desc))
            ok = oai_add(fn, "description", cJSON_CreateString(desc->valuestring));
        if (ok && cJSON_IsObject(params))
            ok = oai_add(fn, "parameters", cJSON_Duplicate(params, true));
        if (ok) {
            ok = oai_add(o, "function", fn);
            fn = NULL;
        }
        cJSON_Delete(fn);
        if (!ok || !cJSON_AddItemToArray(r->tools, o)) {
            cJSON_Delete(o);
            return CAIRN_ENOMEM;
        }
        i++;
    }
    return 0;
}

/* Names accepted and ignored (no effect on a local model's output). */
static const char *const ignored_fields[] = {
    "metadata", "safety_identifier", "prompt_cache_key", "prompt_cache_retention",
    "service_tier", "truncation", "include", "max_tool_calls", "parallel_tool_calls",
    "stream_options", "store", NULL,
};

/* OpenAI sampling extensions the Responses API shares with chat (openai_common.c). */
static const char *const common_fields[] = {
    "model", "stream", "temperature", "top_p", "seed", "cache_salt", "user", "logit_bias",
    "stop_token_ids", "ignore_eos", "min_tokens", "repetition_penalty", "presence_penalty",
    "frequency_penalty", "top_k", "min_p", NULL,
};

static oai_field_fn common(const char *k)
{
    for (const char *const *f = common_fields; *f; f++)
        if (!strcmp(*f, k))
            for (size_t i = 0; i < oai_common_count; i++)
                if (!strcmp(oai_common_fields[i].name, k))
                    return oai_common_fields[i].parse;
    return NULL;
}

static bool in_list(const char *const *l, const char *k)
{
    for (; *l; l++)
        if (!strcmp(*l, k))
            return true;
    return false;
}

static int field(const cJSON *v, gen_request_t *r, const cJSON **input, api_error_t *err)
{
    resp_data_t *d = data_of(r);
    const char *k = v->string;
    oai_field_fn f = common(k);
    if (f)
        return f(v, r, err);
    if (!strcmp(k, "input")) {
        *input = v;
        return 0;
    }
    if (!strcmp(k, "instructions")) {
        if (cJSON_IsNull(v))
            return 0;
        if (!cJSON_IsString(v)) {
            BAD(k, "instructions must be a string");
            return CAIRN_EINVAL;
        }
        return (d->instructions = cairn_strdup(v->valuestring)) ? 0 : CAIRN_ENOMEM;
    }
    if (!strcmp(k, "max_output_tokens")) {
        int rc = oai_field_max_tokens(v, r, err);
        if (!rc && !cJSON_IsNull(v))
            d->max_output_tokens = r->sampling.max_tokens;
        return rc;
    }
    if (!strcmp(k, "tools")) {
        if (cJSON_IsNull(v))
            return 0;
        if (!cJSON_IsArray(v)) {
            BAD(k, "tools must be an array");
            return CAIRN_EINVAL;
        }
        if (!(d->tools = cJSON_Duplicate(v, true)))
            return CAIRN_ENOMEM;
        return convert_tools(v, r, err);
    }
    if (!strcmp(k, "tool_choice")) {
        if (cJSON_IsNull(v))
            return 0;
        if (cJSON_IsString(v) && !strcmp(v->valuestring, "none"))
            r->no_tool_calls = true;
        else if (!(cJSON_IsString(v) && (!strcmp(v->valuestring, "auto")
                                         || !strcmp(v->valuestring, "required")))
                 && !(cJSON_IsObject(v) && type_of(v))) {
            BAD(k, "tool_choice must be \"none\", \"auto\", \"required\" or a tool object");
            return CAIRN_EINVAL;
        }
        return (d->tool_choice = cJSON_Duplicate(v, true)) ? 0 : CAIRN_ENOMEM;
    }
    if (!strcmp(k, "reasoning")) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(v, "effort");
        if (cJSON_IsNull(v) || !e || cJSON_IsNull(e))
            return 0;
        if (!cJSON_IsString(e)) {
            BAD(k, "reasoning.effort must be a string");
            return CAIRN_EINVAL;
        }
        r->enable_thinking = strcmp(e->valuestring, "none") && strcmp(e->valuestring, "minimal");
        return 0;
    }
    if (!strcmp(k, "text")) {
        const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(v, "format");
        const char *t = fmt ? type_of(fmt) : "text";
        if (cJSON_IsNull(v) || !fmt || cJSON_IsNull(fmt) || (t && !strcmp(t, "text")))
            return 0;
        api_error_set(err, 400, API_ERR_INVALID_REQUEST, "text.format", "unsupported_parameter",
                      "text.format: only text is supported (json_schema needs constrained "
                      "decoding, which this server does not do)");
        return CAIRN_EUNSUPPORTED;
    }
    if (!strcmp(k, "previous_response_id") || !strcmp(k, "conversation") || !strcmp(k, "prompt")) {
        if (cJSON_IsNull(v))
            return 0;
        api_error_set(err, 400, API_ERR_INVALID_REQUEST, k, "unsupported_parameter",
                      "%s is not supported: this server stores no responses; send the whole "
                      "conversation in input", k);
        return CAIRN_EUNSUPPORTED;
    }
    if (!strcmp(k, "background"))
        return oai_default_bool(v, false, err);
    if (!strcmp(k, "top_logprobs"))
        return oai_default_int(v, 0, err);
    if (in_list(ignored_fields, k))
        return 0;
    api_error_set(err, 400, API_ERR_INVALID_REQUEST, k, "unknown_parameter",
                  "Unrecognized request argument supplied: %s", k);
    return CAIRN_EINVAL;
}

static int resp_parse(const api_input_t *in, gen_request_t *r, api_error_t *err)
{
    gen_request_init(r);
    r->prompt_kind = GEN_PROMPT_MESSAGES;
    r->prompt_param = "input";
    r->max_tokens_param = "max_output_tokens";
    r->max_tokens_is_bound = true; /* agents (Codex) send their model's output limit */
    cJSON *root = NULL;
    const cJSON *input = NULL;
    resp_data_t *d = cairn_calloc(1, sizeof *d);
    int rc = CAIRN_ENOMEM;
    if (!d) {
        api_error_oom(err);
        goto fail;
    }
    r->api_data = d;
    r->api_data_free = data_free;
    d->parallel_tool_calls = true;
    if ((rc = api_json_object(in->body, in->len, 64, &root, err)))
        goto fail;
    const cJSON *v;
    cJSON_ArrayForEach(v, root) {
        if ((rc = field(v, r, &input, err))) {
            if (rc == CAIRN_ENOMEM)
                api_error_oom(err);
            goto fail;
        }
        if (!strcmp(v->string, "parallel_tool_calls") && cJSON_IsFalse(v))
            d->parallel_tool_calls = false;
    }
    if (!input) {
        BAD("input", "Missing required parameter: 'input'");
        rc = CAIRN_EINVAL;
        goto fail;
    }
    if ((rc = convert_input(input, d->instructions, r, err))) {
        if (rc == CAIRN_ENOMEM)
            api_error_oom(err);
        goto fail;
    }
    cJSON_Delete(root);
    return 0;
fail:
    cJSON_Delete(root);
    gen_request_fini(r);
    return rc;
}

/* ---- Response ------------------------------------------------------------------------ */

typedef enum { ITEM_NONE = 0, ITEM_MESSAGE, ITEM_REASONING, ITEM_CALL } item_kind_t;

typedef struct {
    cJSON *output;      /* the output items so far (closed ones complete) */
    item_kind_t open;   /* the last item of output is still receiving deltas */
    api_buf_t text;     /* its text (message, reasoning) or arguments (call) */
    int seq;            /* sequence_number of the next event */
    char item_id[64];   /* the open item's id */
} resp_state_t;

static cJSON *usage_json(const api_usage_t *u)
{
    cJSON *o = cJSON_CreateObject(), *in = cJSON_CreateObject(), *out = cJSON_CreateObject();
    bool ok = o && in && out
              && oai_add(o, "input_tokens", cJSON_CreateNumber(u->prompt_tokens))
              && oai_add(in, "cached_tokens", cJSON_CreateNumber(u->cached_tokens))
              && oai_add(in, "hot_cached_tokens", cJSON_CreateNumber(u->hot_tokens))
              && oai_add(in, "cold_restored_tokens", cJSON_CreateNumber(u->restored_tokens))
              && oai_add(o, "output_tokens", cJSON_CreateNumber(u->completion_tokens))
              && oai_add(out, "reasoning_tokens", cJSON_CreateNumber(0))
              && oai_add(o, "total_tokens",
                         cJSON_CreateNumber(u->prompt_tokens + u->completion_tokens));
    if (ok) {
        ok = oai_add(o, "input_tokens_details", in);
        in = NULL;
    }
    if (ok) {
        ok = oai_add(o, "output_tokens_details", out);
        out = NULL;
    }
    cJSON_Delete(in);
    cJSON_Delete(out);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The response object: status "in_progress", "completed" or "incomplete"; output and usage
 * (NULL: [] and null). */
static cJSON *response_json(const api_render_t *r, const char *status, const cJSON *output,
                            const api_usage_t *u)
{
    const resp_data_t *d = r->req->api_data;
    const cairn_sampling_params_t *sp = &r->req->sampling;
    cJSON *o = cJSON_CreateObject();
    bool incomplete = !strcmp(status, "incomplete");
    bool ok = o && oai_add(o, "id", cJSON_CreateString(r->id))
              && oai_add(o, "object", cJSON_CreateString("response"))
              && oai_add(o, "created_at", cJSON_CreateNumber((double)r->created))
              && oai_add(o, "status", cJSON_CreateString(status))
              && oai_add(o, "error", cJSON_CreateNull());
    if (ok && incomplete) {
        cJSON *det = cJSON_CreateObject();
        if (!det || !oai_add(det, "reason", cJSON_CreateString("max_output_tokens"))) {
            cJSON_Delete(det);
            ok = false;
        } else {
            ok = oai_add(o, "incomplete_details", det);
        }
    } else if (ok) {
        ok = oai_add(o, "incomplete_details", cJSON_CreateNull());
    }
    ok = ok && oai_add(o, "instructions", d->instructions ? cJSON_CreateString(d->instructions)
                                                          : cJSON_CreateNull())
         && oai_add(o, "max_output_tokens", d->max_output_tokens
                                                ? cJSON_CreateNumber(d->max_output_tokens)
                                                : cJSON_CreateNull())
         && oai_add(o, "model", cJSON_CreateString(r->model))
         && oai_add(o, "output", output ? cJSON_Duplicate(output, true) : cJSON_CreateArray())
         && oai_add(o, "parallel_tool_calls", cJSON_CreateBool(d->parallel_tool_calls))
         && oai_add(o, "previous_response_id", cJSON_CreateNull())
         && oai_add(o, "store", cJSON_CreateFalse())
         && oai_add(o, "temperature", cJSON_CreateNumber(sp->temperature))
         && oai_add(o, "top_p", cJSON_CreateNumber(sp->top_p))
         && oai_add(o, "tool_choice", d->tool_choice ? cJSON_Duplicate(d->tool_choice, true)
                                                     : cJSON_CreateString("auto"))
         && oai_add(o, "tools", d->tools ? cJSON_Duplicate(d->tools, true) : cJSON_CreateArray())
         && oai_add(o, "truncation", cJSON_CreateString("disabled"))
         && oai_add(o, "usage", u ? usage_json(u) : cJSON_CreateNull())
         && oai_add(o, "metadata", cJSON_CreateObject());
    if (ok) {
        cJSON *text = cJSON_CreateObject(), *fmt = cJSON_CreateObject();
        ok = text && fmt && oai_add(fmt, "type", cJSON_CreateString("text"));
        if (ok) {
            ok = oai_add(text, "format", fmt);
            fmt = NULL;
        }
        cJSON_Delete(fmt);
        if (ok)
            ok = oai_add(o, "text", text);
        else
            cJSON_Delete(text);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* A stream event: "event: TYPE\ndata: {"type": TYPE, "sequence_number": n, ...}\n\n". */
static int event(api_render_t *r, const char *type, cJSON *data)
{
    resp_state_t *st = r->state;
    if (!data)
        return CAIRN_ENOMEM;
    if (!oai_add(data, "type", cJSON_CreateString(type))
        || !oai_add(data, "sequence_number", cJSON_CreateNumber(st->seq++))) {
        cJSON_Delete(data);
        return CAIRN_ENOMEM;
    }
    char prefix[96];
    snprintf(prefix, sizeof prefix, "event: %s\ndata: ", type);
    return oai_emit(&r->out, data, prefix, "\n\n");
}

/* {"output_index": i, "item_id": id} plus key: value (taken), for item events. */
static cJSON *item_event(const resp_state_t *st, const char *key, cJSON *value)
{
    cJSON *d = cJSON_CreateObject();
    bool ok = d && oai_add(d, "output_index", cJSON_CreateNumber(cJSON_GetArraySize(st->output) - 1))
              && oai_add(d, "item_id", cJSON_CreateString(st->item_id));
    if (ok && key)
        ok = oai_add(d, key, value);
    else if (key)
        cJSON_Delete(value);
    if (!ok) {
        cJSON_Delete(d);
        return NULL;
    }
    return d;
}

static cJSON *text_part(const char *type, const char *text, size_t len)
{
    cJSON *p = cJSON_CreateObject();
    bool ok = p && oai_add(p, "type", cJSON_CreateString(type))
              && oai_add(p, "text", oai_string_n(text, len));
    if (ok && !strcmp(type, "output_text"))
        ok = oai_add(p, "annotations", cJSON_CreateArray())
             && oai_add(p, "logprobs", cJSON_CreateArray());
    if (!ok) {
        cJSON_Delete(p);
        return NULL;
    }
    return p;
}

/* Opens a new output item of kind k (call: name and call_id from d). */
static int item_open(api_render_t *r, item_kind_t k, const api_delta_t *d)
{
    resp_state_t *st = r->state;
    int n = cJSON_GetArraySize(st->output);
    const char *prefix = k == ITEM_MESSAGE ? "msg" : k == ITEM_REASONING ? "rs" : "fc";
    size_t idl = strlen(r->id);
    snprintf(st->item_id, sizeof st->item_id, "%s_%s%02x", prefix,
             idl > 24 ? r->id + idl - 24 : r->id, n & 0xff);
    cJSON *it = cJSON_CreateObject();
    bool ok = it && oai_add(it, "id", cJSON_CreateString(st->item_id));
    if (k == ITEM_MESSAGE)
        ok = ok && oai_add(it, "type", cJSON_CreateString("message"))
             && oai_add(it, "status", cJSON_CreateString("in_progress"))
             && oai_add(it, "role", cJSON_CreateString("assistant"))
             && oai_add(it, "content", cJSON_CreateArray());
    else if (k == ITEM_REASONING) {
        cJSON *content = cJSON_CreateArray(), *part = text_part("reasoning_text", "", 0);
        ok = ok && oai_add(it, "type", cJSON_CreateString("reasoning"))
             && oai_add(it, "summary", cJSON_CreateArray()) && content && part
             && cJSON_AddItemToArray(content, part);
        if (ok) {
            part = NULL;
            ok = oai_add(it, "content", content);
        } else {
            cJSON_Delete(part);
            cJSON_Delete(content);
        }
    } else
        ok = ok && oai_add(it, "type", cJSON_CreateString("function_call"))
             && oai_add(it, "status", cJSON_CreateString("in_progress"))
             && oai_add(it, "call_id", cJSON_CreateString(d->tool_id))
             && oai_add(it, "name", oai_string_n(d->text, d->len))
             && oai_add(it, "arguments", cJSON_CreateString(""));
    if (!ok || !cJSON_AddItemToArray(st->output, it)) {
        cJSON_Delete(it);
        return CAIRN_ENOMEM;
    }
    st->open = k;
    api_buf_free(&st->text);
    if (!r->req->stream)
        return 0;
    cJSON *ev = cJSON_CreateObject();
    if (!ev || !oai_add(ev, "output_index", cJSON_CreateNumber(n))
        || !oai_add(ev, "item", cJSON_Duplicate(it, true))) {
        cJSON_Delete(ev);
        return CAIRN_ENOMEM;
    }
    int rc = event(r, "response.output_item.added", ev);
    if (!rc && k == ITEM_MESSAGE) {
        cJSON *e = item_event(st, "part", text_part("output_text", "", 0));
        if (e && !oai_add(e, "content_index", cJSON_CreateNumber(0))) {
            cJSON_Delete(e);
            e = NULL;
        }
        rc = event(r, "response.content_part.added", e);
    }
    return rc;
}

/* Closes the open item: completes it in output and, streaming, sends its done events. */
static int item_close(api_render_t *r)
{
    resp_state_t *st = r->state;
    if (st->open == ITEM_NONE)
        return 0;
    item_kind_t k = st->open;
    st->open = ITEM_NONE;
    cJSON *it = cJSON_GetArrayItem(st->output, cJSON_GetArraySize(st->output) - 1);
    int rc = 0;
    bool ok = true;
    if (k == ITEM_MESSAGE) {
        cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        cJSON *p = text_part("output_text", st->text.p, st->text.len);
        ok = p && cJSON_AddItemToArray(content, p);
        if (!ok)
            cJSON_Delete(p);
    } else if (k == ITEM_REASONING) {
        cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        cJSON *p = text_part("reasoning_text", st->text.p, st->text.len);
        ok = p && cJSON_ReplaceItemInArray(content, 0, p);
        if (!ok)
            cJSON_Delete(p);
    } else {
        cJSON *a = oai_string_n(st->text.p, st->text.len);
        ok = a && cJSON_ReplaceItemInObjectCaseSensitive(it, "arguments", a);
        if (!ok)
            cJSON_Delete(a);
    }
    if (ok && k != ITEM_REASONING) {
        cJSON *s = cJSON_CreateString("completed");
        ok = s && cJSON_ReplaceItemInObjectCaseSensitive(it, "status", s);
        if (!ok)
            cJSON_Delete(s);
    }
    if (!ok)
        return CAIRN_ENOMEM;
    if (r->req->stream) {
        cJSON *e;
        if (k == ITEM_MESSAGE) {
            e = item_event(st, "text", oai_string_n(st->text.p, st->text.len));
            ok = e && oai_add(e, "content_index", cJSON_CreateNumber(0))
                 && oai_add(e, "logprobs", cJSON_CreateArray());
            rc = event(r, "response.output_text.done", ok ? e : (cJSON_Delete(e), NULL));
            if (!rc) {
                e = item_event(st, "part", text_part("output_text", st->text.p, st->text.len));
                ok = e && oai_add(e, "content_index", cJSON_CreateNumber(0));
                rc = event(r, "response.content_part.done", ok ? e : (cJSON_Delete(e), NULL));
            }
        } else if (k == ITEM_REASONING) {
            e = item_event(st, "text", oai_string_n(st->text.p, st->text.len));
            ok = e && oai_add(e, "content_index", cJSON_CreateNumber(0));
            rc = event(r, "response.reasoning_text.done", ok ? e : (cJSON_Delete(e), NULL));
        } else {
            e = item_event(st, "arguments", oai_string_n(st->text.p, st->text.len));
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
            ok = e && name && oai_add(e, "name", cJSON_CreateString(name->valuestring));
            rc = event(r, "response.function_call_arguments.done",
                       ok ? e : (cJSON_Delete(e), NULL));
        }
        if (!rc) {
            e = cJSON_CreateObject();
            ok = e && oai_add(e, "output_index", cJSON_CreateNumber(cJSON_GetArraySize(st->output) - 1))
                 && oai_add(e, "item", cJSON_Duplicate(it, true));
            rc = event(r, "response.output_item.done", ok ? e : (cJSON_Delete(e), NULL));
        }
    }
    api_buf_free(&st->text);
    return rc;
}

static int resp_begin(api_render_t *r)
{
    resp_state_t *st = cairn_calloc(1, sizeof *st);
    if (!(r->state = st) || !(st->output = cJSON_CreateArray()))
        return CAIRN_ENOMEM;
    if (!r->req->stream)
        return 0;
    cJSON *d = cJSON_CreateObject();
    if (!d || !oai_add(d, "response", response_json(r, "in_progress", NULL, NULL))) {
        cJSON_Delete(d);
        return CAIRN_ENOMEM;
    }
    int rc = event(r, "response.created", d);
    if (rc)
        return rc;
    d = cJSON_CreateObject();
    if (!d || !oai_add(d, "response", response_json(r, "in_progress", NULL, NULL))) {
        cJSON_Delete(d);
        return CAIRN_ENOMEM;
    }
    return event(r, "response.in_progress", d);
}

/* A text fragment of the open item: accumulated, and streamed as event `type`. */
static int item_text(api_render_t *r, const char *type, const api_delta_t *d, bool indexed)
{
    resp_state_t *st = r->state;
    int rc = api_buf_append(&st->text, d->text, d->len);
    if (rc || !r->req->stream)
        return rc;
    cJSON *e = item_event(st, "delta", oai_string_n(d->text, d->len));
    bool ok = e != NULL;
    if (ok && indexed)
        ok = oai_add(e, "content_index", cJSON_CreateNumber(0));
    if (ok && !strcmp(type, "response.output_text.delta"))
        ok = oai_add(e, "logprobs", cJSON_CreateArray());
    if (!ok) {
        cJSON_Delete(e);
        return CAIRN_ENOMEM;
    }
    return event(r, type, e);
}

static int resp_delta(api_render_t *r, const api_delta_t *d)
{
    resp_state_t *st = r->state;
    int rc = 0;
    if (d->choice != 0)
        return CAIRN_EINVAL;
    switch (d->kind) {
    case API_DELTA_TEXT:
        if (st->open != ITEM_MESSAGE && ((rc = item_close(r)) || (rc = item_open(r, ITEM_MESSAGE, d))))
            return rc;
        return item_text(r, "response.output_text.delta", d, true);
    case API_DELTA_REASONING:
        if (st->open != ITEM_REASONING
            && ((rc = item_close(r)) || (rc = item_open(r, ITEM_REASONING, d))))
            return rc;
        return item_text(r, "response.reasoning_text.delta", d, true);
    case API_DELTA_TOOL_CALL_BEGIN:
        if ((rc = item_close(r)))
            return rc;
        return item_open(r, ITEM_CALL, d);
    case API_DELTA_TOOL_CALL_ARGS:
        return item_text(r, "response.function_call_arguments.delta", d, false);
    case API_DELTA_TOOL_CALL_END:
        return item_close(r);
    case API_DELTA_LOGPROBS:
        return 0; /* not requested by this adapter (top_logprobs is 0 only) */
    }
    return CAIRN_EINVAL; /* not reached: every kind is handled above */
}

static int resp_end(api_render_t *r, const api_end_t *e)
{
    resp_state_t *st = r->state;
    int rc = item_close(r);
    if (rc)
        return rc;
    bool incomplete = e->finish[0] == CAIRN_FINISH_LENGTH;
    const char *status = incomplete ? "incomplete" : "completed";
    cJSON *resp = response_json(r, status, st->output, &e->usage);
    if (!r->req->stream)
        return oai_emit(&r->out, resp, "", "");
    cJSON *d = cJSON_CreateObject();
    if (!d) {
        cJSON_Delete(resp);
        return CAIRN_ENOMEM;
    }
    if (!oai_add(d, "response", resp)) {
        cJSON_Delete(d);
        return CAIRN_ENOMEM;
    }
    return event(r, incomplete ? "response.incomplete" : "response.completed", d);
}

static int resp_fail(api_render_t *r, const api_error_t *e)
{
    cJSON *resp = response_json(r, "failed", NULL, NULL), *err = cJSON_CreateObject();
    bool ok = resp && err && oai_add(err, "code", cJSON_CreateString(e->code ? e->code : "server_error"))
              && oai_add(err, "message", cJSON_CreateString(e->message));
    if (ok && (ok = cJSON_ReplaceItemInObjectCaseSensitive(resp, "error", err)))
        err = NULL;
    cJSON_Delete(err);
    cJSON *d = ok ? cJSON_CreateObject() : NULL;
    if (!d) {
        cJSON_Delete(resp);
        return CAIRN_ENOMEM;
    }
    if (!oai_add(d, "response", resp)) {
        cJSON_Delete(d);
        return CAIRN_ENOMEM;
    }
    return event(r, "response.failed", d);
}

static void resp_release(api_render_t *r)
{
    resp_state_t *st = r->state;
    if (!st)
        return;
    cJSON_Delete(st->output);
    api_buf_free(&st->text);
    cairn_free(st);
    r->state = NULL;
}

static const api_route_t resp_routes[] = {{"/v1/responses", API_OP_GENERATE, NULL}};

const api_adapter_t api_openai_responses = {
    .name = "openai.responses",
    .routes = resp_routes,
    .n_routes = CAIRN_ARRAY_LEN(resp_routes),
    .auth = oai_auth,
    .n_auth = CAIRN_ARRAY_LEN(oai_auth),
    .id_prefix = "resp_",
    .content_type = "application/json",
    .stream_content_type = "text/event-stream",
    .oom_body = OAI_OOM_BODY,
    .parse = resp_parse,
    .render_error = oai_render_error,
    .begin = resp_begin,
    .delta = resp_delta,
    .end = resp_end,
    .fail = resp_fail,
    .release = resp_release,
    .render_count = NULL,
    .render_models = NULL,
};
