/*
 * openai_request.c — OpenAI request bodies -> validated oai_request_t.
 *
 * Model. The body is untrusted bytes. It must be UTF-8 (checked here: cJSON does not),
 * one JSON object, and every field must be known: fields the server implements are typed
 * and range-checked; a few it accepts only at their default value (logprobs false, echo
 * false, best_of 1, ...) so a client asking for more gets a 400, not a silent difference;
 * anything else is "Unrecognized request argument", as OpenAI answers. Checks that need
 * the model (vocab range of token ids, context length) happen in http_server.c.
 *
 * Invariant: on success every pointer in the result is owned by it; on failure nothing
 * is allocated and *err holds the client-facing message with the offending field.
 *
 * Thread-safety: pure functions; no shared state.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"

void oai_error_set(oai_error_t *e, int http_status, const char *type, const char *param,
                   const char *code, const char *fmt, ...)
{
    e->http_status = http_status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

bool oai_utf8_valid(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        unsigned cp, min;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1; cp = c & 0x1F; min = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2; cp = c & 0x0F; min = 0x800;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3; cp = c & 0x07; min = 0x10000;
        } else {
            return false;
        }
        if (n - i <= need)
            return false;
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += need + 1;
    }
    return true;
}

#define BAD(param, ...) \
    oai_error_set(err, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

/* A JSON number that is an integer in [lo, hi]. */
static bool get_int(const cJSON *v, double lo, double hi, long long *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!isfinite(d) || floor(d) != d || d < lo || d > hi)
        return false;
    *out = (long long)d;
    return true;
}

static bool get_float(const cJSON *v, float *out)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return false;
    *out = (float)v->valuedouble;
    return true;
}

/* Chat content: a string, null, or an array of {"type": "text", "text": ...} parts, which
 * is joined with newlines into a string (templates of text models expect strings). */
static int normalize_content(cJSON *msg, int idx, oai_error_t *err)
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
    if (!joined) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return CAIRN_ENOMEM;
    }
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
        oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return CAIRN_ENOMEM;
    }
    return 0;
}

static int parse_messages(const cJSON *v, oai_request_t *r, oai_error_t *err)
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
    r->messages = cJSON_Duplicate(v, true);
    if (!r->messages) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return CAIRN_ENOMEM;
    }
    idx = 0;
    cJSON *mm;
    cJSON_ArrayForEach(mm, r->messages) {
        int rc = normalize_content(mm, idx++, err);
        if (rc)
            return rc;
    }
    return 0;
}

static int parse_prompt(const cJSON *v, oai_request_t *r, oai_error_t *err)
{
    if (cJSON_IsString(v)) {
        r->prompt_len = strlen(v->valuestring);
        r->prompt_text = cairn_strdup(v->valuestring);
        return r->prompt_text ? 0 : CAIRN_ENOMEM;
    }
    if (!cJSON_IsArray(v)) {
        BAD("prompt", "prompt must be a string or an array of token ids");
        return CAIRN_EINVAL;
    }
    int n = cJSON_GetArraySize(v);
    const cJSON *first = cJSON_GetArrayItem(v, 0);
    if (n == 1 && (cJSON_IsString(first) || cJSON_IsArray(first)))
        return parse_prompt(first, r, err); /* a batch of one */
    if (n == 0) {
        BAD("prompt", "prompt must not be empty");
        return CAIRN_EINVAL;
    }
    if (cJSON_IsString(first) || cJSON_IsArray(first)) {
        BAD("prompt", "batched prompts are not supported; send one prompt per request");
        return CAIRN_EINVAL;
    }
    r->prompt_ids = cairn_malloc((size_t)n * sizeof *r->prompt_ids);
    if (!r->prompt_ids)
        return CAIRN_ENOMEM;
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, v) {
        long long id;
        if (!get_int(t, 0, INT32_MAX, &id)) {
            BAD("prompt", "prompt[%d] must be a non-negative integer token id", i);
            return CAIRN_EINVAL;
        }
        r->prompt_ids[i++] = (int32_t)id;
    }
    r->n_prompt_ids = n;
    return 0;
}

static int parse_stop(const cJSON *v, oai_request_t *r, oai_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    if (cJSON_IsString(v)) {
        if (!v->valuestring[0]) {
            BAD("stop", "stop strings must not be empty");
            return CAIRN_EINVAL;
        }
        if (!(r->stop_store[0] = cairn_strdup(v->valuestring)))
            return CAIRN_ENOMEM;
        r->sampling.n_stop = 1;
        return 0;
    }
    if (!cJSON_IsArray(v)) {
        BAD("stop", "stop must be a string or an array of strings");
        return CAIRN_EINVAL;
    }
    if (cJSON_GetArraySize(v) > OAI_MAX_STOP) {
        BAD("stop", "stop has more than %d strings", OAI_MAX_STOP);
        return CAIRN_EINVAL;
    }
    const cJSON *s;
    size_t k = 0;
    cJSON_ArrayForEach(s, v) {
        if (!cJSON_IsString(s) || !s->valuestring[0]) {
            BAD("stop", "stop[%zu] must be a non-empty string", k);
            return CAIRN_EINVAL;
        }
        if (!(r->stop_store[k] = cairn_strdup(s->valuestring)))
            return CAIRN_ENOMEM;
        r->sampling.n_stop = ++k;
    }
    return 0;
}

static int parse_stop_ids(const cJSON *v, oai_request_t *r, oai_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsArray(v)) {
        BAD("stop_token_ids", "stop_token_ids must be an array of token ids");
        return CAIRN_EINVAL;
    }
    int n = cJSON_GetArraySize(v);
    if (n == 0)
        return 0;
    if (!(r->stop_ids = cairn_malloc((size_t)n * sizeof *r->stop_ids)))
        return CAIRN_ENOMEM;
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, v) {
        long long id;
        if (!get_int(t, 0, INT32_MAX, &id)) {
            BAD("stop_token_ids", "stop_token_ids[%d] must be a non-negative integer", i);
            return CAIRN_EINVAL;
        }
        r->stop_ids[i++] = (int32_t)id;
    }
    r->sampling.stop_token_ids = r->stop_ids;
    r->sampling.n_stop_token_ids = (size_t)n;
    return 0;
}

static int parse_logit_bias(const cJSON *v, oai_request_t *r, oai_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsObject(v)) {
        BAD("logit_bias", "logit_bias must be an object mapping token ids to biases");
        return CAIRN_EINVAL;
    }
    int n = cJSON_GetArraySize(v);
    if (n == 0)
        return 0;
    if (!(r->bias = cairn_malloc((size_t)n * sizeof *r->bias)))
        return CAIRN_ENOMEM;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        char *end;
        long id = strtol(e->string, &end, 10);
        float b;
        if (!e->string[0] || *end || id < 0 || id > INT32_MAX) {
            BAD("logit_bias", "logit_bias key '%s' is not a token id", e->string);
            return CAIRN_EINVAL;
        }
        if (!get_float(e, &b)) {
            BAD("logit_bias", "logit_bias[%s] must be a number", e->string);
            return CAIRN_EINVAL;
        }
        r->bias[i].token = (int32_t)id;
        r->bias[i].bias = b;
        i++;
    }
    r->sampling.logit_bias = r->bias;
    r->sampling.n_logit_bias = (size_t)n;
    return 0;
}

/* Fields accepted only at their default value: a request for more gets a clear 400. */
static int check_default_only(const char *name, const cJSON *v, oai_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    if (!strcmp(name, "logprobs") || !strcmp(name, "echo") || !strcmp(name, "parallel_tool_calls")
        || !strcmp(name, "store")) {
        if (cJSON_IsBool(v) && (cJSON_IsFalse(v) || !strcmp(name, "parallel_tool_calls")))
            return 0;
        if (!cJSON_IsBool(v)) {
            BAD(name, "%s must be a boolean", name);
            return CAIRN_EINVAL;
        }
    } else if (!strcmp(name, "top_logprobs") || !strcmp(name, "best_of")) {
        long long x;
        long long want = !strcmp(name, "best_of") ? 1 : 0;
        if (get_int(v, 0, 1e9, &x) && x == want)
            return 0;
        if (!cJSON_IsNumber(v)) {
            BAD(name, "%s must be an integer", name);
            return CAIRN_EINVAL;
        }
    } else if (!strcmp(name, "response_format")) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
        if (cJSON_IsObject(v) && cJSON_IsString(t) && !strcmp(t->valuestring, "text"))
            return 0;
    } else if (!strcmp(name, "suffix")) {
        if (cJSON_IsString(v) && !v->valuestring[0])
            return 0;
    } else if (!strcmp(name, "tool_choice")) {
        if (cJSON_IsString(v) && (!strcmp(v->valuestring, "auto") || !strcmp(v->valuestring, "none")))
            return 0;
    } else if (!strcmp(name, "metadata")) {
        if (cJSON_IsObject(v))
            return 0;
        BAD(name, "metadata must be an object");
        return CAIRN_EINVAL;
    }
    oai_error_set(err, 400, "invalid_request_error", name, "unsupported_parameter",
                  "'%s' is only supported at its default value", name);
    return CAIRN_EUNSUPPORTED;
}

enum { F_BOTH = 0, F_CHAT = 1, F_COMPL = 2 };

static int field_scope(const char *name, bool *default_only)
{
    static const struct { const char *name; int scope; bool def_only; } fields[] = {
        {"model", F_BOTH, false}, {"stream", F_BOTH, false}, {"stream_options", F_BOTH, false},
        {"max_tokens", F_BOTH, false}, {"max_completion_tokens", F_CHAT, false},
        {"temperature", F_BOTH, false}, {"top_p", F_BOTH, false}, {"top_k", F_BOTH, false},
        {"min_p", F_BOTH, false}, {"presence_penalty", F_BOTH, false},
        {"frequency_penalty", F_BOTH, false}, {"repetition_penalty", F_BOTH, false},
        {"seed", F_BOTH, false}, {"stop", F_BOTH, false}, {"stop_token_ids", F_BOTH, false},
        {"min_tokens", F_BOTH, false}, {"ignore_eos", F_BOTH, false},
        {"logit_bias", F_BOTH, false}, {"n", F_BOTH, false}, {"cache_salt", F_BOTH, false},
        {"user", F_BOTH, false}, {"messages", F_CHAT, false}, {"tools", F_CHAT, false},
        {"chat_template_kwargs", F_CHAT, false}, {"prompt", F_COMPL, false},
        {"logprobs", F_BOTH, true}, {"top_logprobs", F_CHAT, true}, {"echo", F_COMPL, true},
        {"best_of", F_COMPL, true}, {"suffix", F_COMPL, true},
        {"response_format", F_CHAT, true}, {"tool_choice", F_CHAT, true},
        {"parallel_tool_calls", F_CHAT, true}, {"store", F_CHAT, true},
        {"metadata", F_CHAT, true},
    };
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(fields); i++)
        if (!strcmp(fields[i].name, name)) {
            *default_only = fields[i].def_only;
            return fields[i].scope;
        }
    return -1;
}

static int parse_field(const cJSON *v, oai_request_t *r, oai_error_t *err)
{
    const char *k = v->string;
    long long x;
    float f;
    bool null = cJSON_IsNull(v);
    if (!strcmp(k, "model")) {
        if (null)
            return 0;
        if (!cJSON_IsString(v)) {
            BAD(k, "model must be a string");
            return CAIRN_EINVAL;
        }
        return (r->model = cairn_strdup(v->valuestring)) ? 0 : CAIRN_ENOMEM;
    }
    if (!strcmp(k, "stream")) {
        if (null)
            return 0;
        if (!cJSON_IsBool(v)) {
            BAD(k, "stream must be a boolean");
            return CAIRN_EINVAL;
        }
        r->stream = cJSON_IsTrue(v);
        return 0;
    }
    if (!strcmp(k, "stream_options")) {
        if (null)
            return 0;
        const cJSON *iu = cJSON_GetObjectItemCaseSensitive(v, "include_usage");
        if (!cJSON_IsObject(v) || (iu && !cJSON_IsBool(iu))) {
            BAD(k, "stream_options must be an object with a boolean include_usage");
            return CAIRN_EINVAL;
        }
        const cJSON *o;
        cJSON_ArrayForEach(o, v) {
            if (strcmp(o->string, "include_usage") != 0) {
                BAD("stream_options", "Unrecognized stream_options field: %s", o->string);
                return CAIRN_EINVAL;
            }
        }
        r->include_usage = cJSON_IsTrue(iu);
        return 0;
    }
    if (!strcmp(k, "max_tokens") || !strcmp(k, "max_completion_tokens")) {
        if (null)
            return 0;
        if (!get_int(v, 1, INT32_MAX, &x)) {
            BAD(k, "%s must be an integer >= 1", k);
            return CAIRN_EINVAL;
        }
        r->sampling.max_tokens = (int32_t)x;
        return 0;
    }
    if (!strcmp(k, "min_tokens")) {
        if (null)
            return 0;
        if (!get_int(v, 0, INT32_MAX, &x)) {
            BAD(k, "min_tokens must be an integer >= 0");
            return CAIRN_EINVAL;
        }
        r->sampling.min_tokens = (int32_t)x;
        return 0;
    }
    if (!strcmp(k, "top_k")) {
        if (null)
            return 0;
        if (!get_int(v, -1, INT32_MAX, &x)) {
            BAD(k, "top_k must be an integer >= -1");
            return CAIRN_EINVAL;
        }
        r->sampling.top_k = (int32_t)x;
        return 0;
    }
    if (!strcmp(k, "n")) {
        if (null)
            return 0;
        if (!get_int(v, 1, OAI_MAX_N, &x)) {
            BAD(k, "n must be an integer in [1, %d]", OAI_MAX_N);
            return CAIRN_EINVAL;
        }
        r->n = (int)x;
        return 0;
    }
    if (!strcmp(k, "seed")) {
        if (null)
            return 0;
        if (!get_int(v, -9007199254740992.0, 9007199254740992.0, &x)) {
            BAD(k, "seed must be an integer");
            return CAIRN_EINVAL;
        }
        r->sampling.has_seed = true;
        r->sampling.seed = (uint64_t)x;
        return 0;
    }
    if (!strcmp(k, "ignore_eos")) {
        if (null)
            return 0;
        if (!cJSON_IsBool(v)) {
            BAD(k, "ignore_eos must be a boolean");
            return CAIRN_EINVAL;
        }
        r->sampling.ignore_eos = cJSON_IsTrue(v);
        return 0;
    }
    struct { const char *name; float *dst; } floats[] = {
        {"temperature", &r->sampling.temperature}, {"top_p", &r->sampling.top_p},
        {"min_p", &r->sampling.min_p}, {"presence_penalty", &r->sampling.presence_penalty},
        {"frequency_penalty", &r->sampling.frequency_penalty},
        {"repetition_penalty", &r->sampling.repetition_penalty},
    };
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(floats); i++) {
        if (strcmp(k, floats[i].name) != 0)
            continue;
        if (null)
            return 0;
        if (!get_float(v, &f)) {
            BAD(k, "%s must be a number", k);
            return CAIRN_EINVAL;
        }
        *floats[i].dst = f;
        return 0;
    }
    if (!strcmp(k, "stop"))
        return parse_stop(v, r, err);
    if (!strcmp(k, "stop_token_ids"))
        return parse_stop_ids(v, r, err);
    if (!strcmp(k, "logit_bias"))
        return parse_logit_bias(v, r, err);
    if (!strcmp(k, "cache_salt") || !strcmp(k, "user")) {
        if (null)
            return 0;
        if (!cJSON_IsString(v)) {
            BAD(k, "%s must be a string", k);
            return CAIRN_EINVAL;
        }
        if (!strcmp(k, "cache_salt")) {
            if (strlen(v->valuestring) > OAI_MAX_SALT) {
                BAD(k, "cache_salt must be at most %d bytes, got %zu", OAI_MAX_SALT,
                    strlen(v->valuestring));
                return CAIRN_EINVAL;
            }
            return (r->cache_salt = cairn_strdup(v->valuestring)) ? 0 : CAIRN_ENOMEM;
        }
        return (r->user = cairn_strdup(v->valuestring)) ? 0 : CAIRN_ENOMEM;
    }
    if (!strcmp(k, "messages"))
        return parse_messages(v, r, err);
    if (!strcmp(k, "prompt"))
        return parse_prompt(v, r, err);
    if (!strcmp(k, "tools") || !strcmp(k, "chat_template_kwargs")) {
        if (null)
            return 0;
        bool tools = !strcmp(k, "tools");
        if (tools ? !cJSON_IsArray(v) : !cJSON_IsObject(v)) {
            BAD(k, "%s must be %s", k, tools ? "an array" : "an object");
            return CAIRN_EINVAL;
        }
        cJSON *d = cJSON_Duplicate(v, true);
        if (!d)
            return CAIRN_ENOMEM;
        if (tools)
            r->tools = d;
        else
            r->template_kwargs = d;
        return 0;
    }
    return 0;
}

/* Every decoded key and string must be UTF-8 too. cJSON refuses lone surrogate escapes
 * today; this keeps the guarantee independent of it. Depth: cJSON's nesting limit. */
static bool strings_valid(const cJSON *v)
{
    for (; v; v = v->next) {
        if (v->string && !oai_utf8_valid(v->string, strlen(v->string)))
            return false;
        if (cJSON_IsString(v) && !oai_utf8_valid(v->valuestring, strlen(v->valuestring)))
            return false;
        if (v->child && !strings_valid(v->child))
            return false;
    }
    return true;
}

int oai_request_parse(oai_kind_t kind, const char *body, size_t len, oai_request_t *out,
                      oai_error_t *err)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->n = 1;
    cairn_sampling_params_init(&out->sampling);
    if (kind == OAI_COMPLETION)
        out->sampling.max_tokens = 16; /* OpenAI's legacy completions default */
    out->sampling.stop = (const char *const *)out->stop_store;

    if (!oai_utf8_valid(body, len)) {
        BAD(NULL, "The request body is not valid UTF-8");
        return CAIRN_EINVAL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!root) {
        BAD(NULL, "The request body is not valid JSON");
        return CAIRN_EFORMAT;
    }
    int rc = 0;
    while (end && end < body + len && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t'))
        end++;
    if (end && end < body + len && *end) {
        BAD(NULL, "The request body has trailing data after the JSON object");
        rc = CAIRN_EFORMAT;
        goto fail;
    }
    if (!strings_valid(root)) {
        BAD(NULL, "The request body has a string that is not valid UTF-8");
        rc = CAIRN_EINVAL;
        goto fail;
    }
    if (!cJSON_IsObject(root)) {
        BAD(NULL, "The request body must be a JSON object");
        rc = CAIRN_EINVAL;
        goto fail;
    }
    /* Duplicate keys are refused (cJSON keeps both). The key count is bounded first, so
     * the quadratic check stays cheap: every known field is listed once. */
    if (cJSON_GetArraySize(root) > 64) {
        BAD(NULL, "The request has too many fields");
        rc = CAIRN_EINVAL;
        goto fail;
    }
    for (const cJSON *a = root->child; a; a = a->next)
        for (const cJSON *b = a->next; b; b = b->next)
            if (!strcmp(a->string, b->string)) {
                BAD(a->string, "Duplicate field: %s", a->string);
                rc = CAIRN_EINVAL;
                goto fail;
            }
    const cJSON *v;
    cJSON_ArrayForEach(v, root) {
        bool def_only = false;
        int scope = field_scope(v->string, &def_only);
        if (scope < 0 || (scope == F_CHAT && kind != OAI_CHAT)
            || (scope == F_COMPL && kind != OAI_COMPLETION)) {
            oai_error_set(err, 400, "invalid_request_error", v->string, "unknown_parameter",
                          "Unrecognized request argument supplied: %s", v->string);
            rc = CAIRN_EINVAL;
            goto fail;
        }
        rc = def_only ? check_default_only(v->string, v, err) : parse_field(v, out, err);
        if (rc == CAIRN_ENOMEM)
            oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        if (rc)
            goto fail;
    }
    if (kind == OAI_CHAT && !out->messages) {
        BAD("messages", "Missing required parameter: 'messages'");
        rc = CAIRN_EINVAL;
        goto fail;
    }
    if (kind == OAI_COMPLETION && !out->prompt_text && !out->prompt_ids) {
        BAD("prompt", "Missing required parameter: 'prompt'");
        rc = CAIRN_EINVAL;
        goto fail;
    }
    if (out->include_usage && !out->stream) {
        BAD("stream_options", "stream_options is only allowed when stream is true");
        rc = CAIRN_EINVAL;
        goto fail;
    }
    cJSON_Delete(root);
    return 0;
fail:
    cJSON_Delete(root);
    oai_request_fini(out);
    return rc;
}

void oai_request_fini(oai_request_t *r)
{
    if (!r)
        return;
    cairn_free(r->model);
    cJSON_Delete(r->messages);
    cJSON_Delete(r->tools);
    cJSON_Delete(r->template_kwargs);
    cairn_free(r->prompt_text);
    cairn_free(r->prompt_ids);
    for (int i = 0; i < OAI_MAX_STOP; i++)
        cairn_free(r->stop_store[i]);
    cairn_free(r->stop_ids);
    cairn_free(r->bias);
    cairn_free(r->cache_salt);
    cairn_free(r->user);
    memset(r, 0, sizeof *r);
}
