/*
 * openai_common.c — the parts of the OpenAI API that chat completions and completions
 * share (openai.h).
 *
 * Requests. The body is untrusted bytes: api_json_object checks UTF-8, syntax and
 * duplicate keys; then every field must be known. Fields the server implements are typed
 * and range-checked into the neutral request; a few it accepts only at their default
 * value (logprobs false, echo false, best_of 1, ...) so a client asking for more gets a
 * 400, not a silent difference; anything else is "Unrecognized request argument", as
 * OpenAI answers. Checks that need the model (vocabulary range of token ids, context
 * length, sampler ranges) are the server's.
 *
 * Responses. chat.completion / chat.completion.chunk and text_completion objects;
 * streams are "data: <json>\n\n" events ended by "data: [DONE]\n\n". Generated text
 * arrives as valid UTF-8 (the scheduler's stream decoder emits whole characters); cJSON
 * escapes what JSON requires.
 *
 * Invariant: a failed parse leaves nothing allocated and *err holds the client-facing
 * message with the offending field. Thread-safety: pure functions; no shared state.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/openai.h"

const api_auth_t oai_auth[1] = {{"Authorization", "Bearer"}};

#define BAD(param, ...) \
    api_error_set(err, 400, API_ERR_INVALID_REQUEST, param, NULL, __VA_ARGS__)

/* ---- Field helpers ----------------------------------------------------------------- */

bool oai_get_int(const cJSON *v, double lo, double hi, long long *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!isfinite(d) || floor(d) != d || d < lo || d > hi)
        return false;
    *out = (long long)d;
    return true;
}

int oai_token_ids(const cJSON *arr, int n, const char *param, const char *what, int32_t **ids, api_error_t *err)
{
    if (!(*ids = cairn_malloc((size_t)n * sizeof **ids)))
        return CAIRN_ENOMEM;
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, arr) {
        long long id;
        if (!oai_get_int(t, 0, INT32_MAX, &id)) {
            BAD(param, "%s[%d] must be %s", param, i, what);
            return CAIRN_EINVAL;
        }
        (*ids)[i++] = (int32_t)id;
    }
    return 0;
}

static bool get_float(const cJSON *v, float *out)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return false;
    *out = (float)v->valuedouble;
    return true;
}

int oai_unsupported(const cJSON *v, api_error_t *err)
{
    api_error_set(err, 400, API_ERR_INVALID_REQUEST, v->string, "unsupported_parameter",
                  "'%s' is only supported at its default value", v->string);
    return CAIRN_EUNSUPPORTED;
}

int oai_default_bool(const cJSON *v, bool any_value, api_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsBool(v)) {
        BAD(v->string, "%s must be a boolean", v->string);
        return CAIRN_EINVAL;
    }
    return cJSON_IsFalse(v) || any_value ? 0 : oai_unsupported(v, err);
}

int oai_default_int(const cJSON *v, long long want, api_error_t *err)
{
    long long x;
    if (cJSON_IsNull(v) || (oai_get_int(v, 0, 1e9, &x) && x == want))
        return 0;
    if (!cJSON_IsNumber(v)) {
        BAD(v->string, "%s must be an integer", v->string);
        return CAIRN_EINVAL;
    }
    return oai_unsupported(v, err);
}

/* ---- Fields both endpoints accept -------------------------------------------------- */

static int f_model(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsString(v)) {
        BAD(v->string, "model must be a string");
        return CAIRN_EINVAL;
    }
    return (r->model = cairn_strdup(v->valuestring)) ? 0 : CAIRN_ENOMEM;
}

static int f_stream(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsBool(v)) {
        BAD(v->string, "stream must be a boolean");
        return CAIRN_EINVAL;
    }
    r->stream = cJSON_IsTrue(v);
    return 0;
}

static int f_stream_options(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    const cJSON *iu = cJSON_GetObjectItemCaseSensitive(v, "include_usage");
    if (!cJSON_IsObject(v) || (iu && !cJSON_IsBool(iu))) {
        BAD(v->string, "stream_options must be an object with a boolean include_usage");
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

int oai_field_max_tokens(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    long long x;
    if (cJSON_IsNull(v))
        return 0;
    if (!oai_get_int(v, 1, INT32_MAX, &x)) {
        BAD(v->string, "%s must be an integer >= 1", v->string);
        return CAIRN_EINVAL;
    }
    r->sampling.max_tokens = (int32_t)x;
    return 0;
}

static int f_min_tokens(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    long long x;
    if (cJSON_IsNull(v))
        return 0;
    if (!oai_get_int(v, 0, INT32_MAX, &x)) {
        BAD(v->string, "min_tokens must be an integer >= 0");
        return CAIRN_EINVAL;
    }
    r->sampling.min_tokens = (int32_t)x;
    return 0;
}

static int f_top_k(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    long long x;
    if (cJSON_IsNull(v))
        return 0;
    if (!oai_get_int(v, -1, INT32_MAX, &x)) {
        BAD(v->string, "top_k must be an integer >= -1");
        return CAIRN_EINVAL;
    }
    r->sampling.top_k = (int32_t)x;
    return 0;
}

static int f_n(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    long long x;
    if (cJSON_IsNull(v))
        return 0;
    if (!oai_get_int(v, 1, API_MAX_N, &x)) {
        BAD(v->string, "n must be an integer in [1, %d]", API_MAX_N);
        return CAIRN_EINVAL;
    }
    r->n = (int)x;
    return 0;
}

static int f_seed(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    long long x;
    if (cJSON_IsNull(v))
        return 0;
    if (!oai_get_int(v, -9007199254740992.0, 9007199254740992.0, &x)) {
        BAD(v->string, "seed must be an integer");
        return CAIRN_EINVAL;
    }
    r->sampling.has_seed = true;
    r->sampling.seed = (uint64_t)x;
    return 0;
}

static int f_ignore_eos(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsBool(v)) {
        BAD(v->string, "ignore_eos must be a boolean");
        return CAIRN_EINVAL;
    }
    r->sampling.ignore_eos = cJSON_IsTrue(v);
    return 0;
}

static int set_float(const cJSON *v, float *dst, api_error_t *err)
{
    float f;
    if (cJSON_IsNull(v))
        return 0;
    if (!get_float(v, &f)) {
        BAD(v->string, "%s must be a number", v->string);
        return CAIRN_EINVAL;
    }
    *dst = f;
    return 0;
}

static int f_temperature(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    return set_float(v, &r->sampling.temperature, err);
}
static int f_top_p(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    return set_float(v, &r->sampling.top_p, err);
}
static int f_min_p(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    return set_float(v, &r->sampling.min_p, err);
}
static int f_presence_penalty(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    return set_float(v, &r->sampling.presence_penalty, err);
}
static int f_frequency_penalty(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    return set_float(v, &r->sampling.frequency_penalty, err);
}
static int f_repetition_penalty(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    return set_float(v, &r->sampling.repetition_penalty, err);
}

static int f_stop(const cJSON *v, gen_request_t *r, api_error_t *err)
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
    if (cJSON_GetArraySize(v) > API_MAX_STOP) {
        BAD("stop", "stop has more than %d strings", API_MAX_STOP);
        return CAIRN_EINVAL;
    }
    return gen_request_stop_strings(r, v, "stop", err);
}

static int f_stop_token_ids(const cJSON *v, gen_request_t *r, api_error_t *err)
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
    int rc = oai_token_ids(v, n, "stop_token_ids", "a non-negative integer", &r->stop_ids, err);
    if (rc)
        return rc;
    r->sampling.stop_token_ids = r->stop_ids;
    r->sampling.n_stop_token_ids = (size_t)n;
    return 0;
}

static int f_logit_bias(const cJSON *v, gen_request_t *r, api_error_t *err)
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

static int f_cache_salt(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsString(v)) {
        BAD(v->string, "%s must be a string", v->string);
        return CAIRN_EINVAL;
    }
    if (strlen(v->valuestring) > API_MAX_SALT) {
        BAD(v->string, "cache_salt must be at most %d bytes, got %zu", API_MAX_SALT,
            strlen(v->valuestring));
        return CAIRN_EINVAL;
    }
    return (r->cache_salt = cairn_strdup(v->valuestring)) ? 0 : CAIRN_ENOMEM;
}

static int f_user(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsString(v)) {
        BAD(v->string, "%s must be a string", v->string);
        return CAIRN_EINVAL;
    }
    return (r->user = cairn_strdup(v->valuestring)) ? 0 : CAIRN_ENOMEM;
}

const oai_field_t oai_common_fields[] = {
    {"model", f_model},
    {"stream", f_stream},
    {"stream_options", f_stream_options},
    {"max_tokens", oai_field_max_tokens},
    {"temperature", f_temperature},
    {"top_p", f_top_p},
    {"top_k", f_top_k},
    {"min_p", f_min_p},
    {"presence_penalty", f_presence_penalty},
    {"frequency_penalty", f_frequency_penalty},
    {"repetition_penalty", f_repetition_penalty},
    {"seed", f_seed},
    {"stop", f_stop},
    {"stop_token_ids", f_stop_token_ids},
    {"min_tokens", f_min_tokens},
    {"ignore_eos", f_ignore_eos},
    {"logit_bias", f_logit_bias},
    {"n", f_n},
    {"cache_salt", f_cache_salt},
    {"user", f_user},
};
const size_t oai_common_count = CAIRN_ARRAY_LEN(oai_common_fields);

static oai_field_fn find_field(const char *name, const oai_field_t *fields, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(fields[i].name, name))
            return fields[i].parse;
    for (size_t i = 0; i < oai_common_count; i++)
        if (!strcmp(oai_common_fields[i].name, name))
            return oai_common_fields[i].parse;
    return NULL;
}

int oai_parse_body(const api_input_t *in, const oai_field_t *fields, size_t n_fields,
                   const char *required, gen_request_t *r, api_error_t *err)
{
    cJSON *root = NULL;
    int rc = api_json_object(in->body, in->len, 64, &root, err);
    if (rc)
        goto fail;
    const cJSON *v;
    cJSON_ArrayForEach(v, root) {
        oai_field_fn parse = find_field(v->string, fields, n_fields);
        if (!parse) {
            api_error_set(err, 400, API_ERR_INVALID_REQUEST, v->string, "unknown_parameter",
                          "Unrecognized request argument supplied: %s", v->string);
            rc = CAIRN_EINVAL;
            goto fail;
        }
        rc = parse(v, r, err);
        if (rc == CAIRN_ENOMEM)
            api_error_oom(err);
        if (rc)
            goto fail;
    }
    if (required && !cJSON_GetObjectItemCaseSensitive(root, required)) {
        BAD(required, "Missing required parameter: '%s'", required);
        rc = CAIRN_EINVAL;
        goto fail;
    }
    if (r->include_usage && !r->stream) {
        BAD("stream_options", "stream_options is only allowed when stream is true");
        rc = CAIRN_EINVAL;
        goto fail;
    }
    cJSON_Delete(root);
    return 0;
fail:
    cJSON_Delete(root);
    gen_request_fini(r);
    return rc;
}

/* ---- Rendering --------------------------------------------------------------------- */

bool oai_add(cJSON *obj, const char *key, cJSON *item)
{
    if (!item)
        return false;
    if (!cJSON_AddItemToObject(obj, key, item)) {
        cJSON_Delete(item);
        return false;
    }
    return true;
}

cJSON *oai_string_n(const char *s, size_t n)
{
    char *tmp = cairn_strndup(s ? s : "", s ? n : 0);
    if (!tmp)
        return NULL;
    cJSON *j = cJSON_CreateString(tmp);
    cairn_free(tmp);
    return j;
}

int oai_emit(api_buf_t *out, cJSON *root, const char *prefix, const char *suffix)
{
    if (!root)
        return CAIRN_ENOMEM;
    char *txt = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!txt)
        return CAIRN_ENOMEM;
    size_t mark = out->len;
    int rc = api_buf_append(out, prefix, strlen(prefix));
    if (!rc)
        rc = api_buf_append(out, txt, strlen(txt));
    if (!rc)
        rc = api_buf_append(out, suffix, strlen(suffix));
    if (rc && out->p) { /* never leave half an event */
        out->len = mark;
        out->p[mark] = '\0';
    }
    cJSON_free(txt);
    return rc;
}

int oai_emit_full(api_render_t *r, const char *object, const api_end_t *e, oai_choice_fn add_choice)
{
    cJSON *o = oai_envelope(r, object);
    cJSON *choices = cJSON_CreateArray();
    bool ok = o && choices;
    for (int i = 0; ok && i < r->req->n; i++) {
        cJSON *c = cJSON_CreateObject();
        ok = c && cJSON_AddItemToArray(choices, c);
        if (!ok) {
            cJSON_Delete(c);
            break;
        }
        ok = oai_add(c, "index", cJSON_CreateNumber(i)) && add_choice(r, e, i, c);
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

cJSON *oai_finish_json(cairn_finish_reason_t f, int tool_calls)
{
    if (f == CAIRN_FINISH_STOP && tool_calls > 0)
        return cJSON_CreateString("tool_calls");
    const char *name = cairn_finish_reason_name(f);
    return name ? cJSON_CreateString(name) : cJSON_CreateNull();
}

cJSON *oai_usage_json(const api_usage_t *u)
{
    cJSON *o = cJSON_CreateObject(), *d = cJSON_CreateObject();
    bool ok = o && d;
    ok = ok && oai_add(o, "prompt_tokens", cJSON_CreateNumber(u->prompt_tokens));
    ok = ok && oai_add(o, "completion_tokens", cJSON_CreateNumber(u->completion_tokens));
    ok = ok && oai_add(o, "total_tokens",
                       cJSON_CreateNumber(u->prompt_tokens + u->completion_tokens));
    ok = ok && oai_add(d, "cached_tokens", cJSON_CreateNumber(u->cached_tokens));
    ok = ok && oai_add(d, "hot_cached_tokens", cJSON_CreateNumber(u->hot_tokens));
    ok = ok && oai_add(d, "cold_restored_tokens", cJSON_CreateNumber(u->restored_tokens));
    if (ok) {
        ok = oai_add(o, "prompt_tokens_details", d);
        d = NULL;
    }
    if (!ok) {
        cJSON_Delete(o);
        cJSON_Delete(d);
        return NULL;
    }
    return o;
}

cJSON *oai_envelope(const api_render_t *r, const char *object)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = o && oai_add(o, "id", cJSON_CreateString(r->id))
              && oai_add(o, "object", cJSON_CreateString(object))
              && oai_add(o, "created", cJSON_CreateNumber((double)r->created))
              && oai_add(o, "model", cJSON_CreateString(r->model));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int oai_emit_chunk(api_render_t *r, bool chat, int index, const char *text, size_t len,
                   bool with_role, cairn_finish_reason_t finish)
{
    return oai_emit_chunk_calls(r, chat, index, text, len, with_role, finish, 0);
}

int oai_emit_chunk_calls(api_render_t *r, bool chat, int index, const char *text, size_t len,
                         bool with_role, cairn_finish_reason_t finish, int tool_calls)
{
    cJSON *d = NULL;
    if (chat) {
        d = cJSON_CreateObject();
        bool ok = d != NULL;
        if (ok && with_role)
            ok = oai_add(d, "role", cJSON_CreateString("assistant"));
        if (ok && (len > 0 || with_role))
            ok = oai_add(d, "content", oai_string_n(text, len));
        if (!ok) {
            cJSON_Delete(d);
            return CAIRN_ENOMEM;
        }
    }
    return oai_emit_delta(r, chat, index, d, text, len, finish, tool_calls);
}

static int emit_delta_lp(api_render_t *r, bool chat, int index, cJSON *delta, const char *text,
                         size_t len, cairn_finish_reason_t finish, int tool_calls, cJSON *lp);

int oai_emit_delta(api_render_t *r, bool chat, int index, cJSON *delta, const char *text,
                   size_t len, cairn_finish_reason_t finish, int tool_calls)
{
    return emit_delta_lp(r, chat, index, delta, text, len, finish, tool_calls, NULL);
}

/* ---- Logprobs ---------------------------------------------------------------------- */

/* The token's text (its bytes, U+FFFD for a partial character) as a JSON string. */
static cJSON *token_string(const api_token_lp_t *t)
{
    api_buf_t b = {0};
    cJSON *j = api_utf8_lossy(&b, t->bytes, t->len) ? NULL : cJSON_CreateString(b.p);
    api_buf_free(&b);
    return j;
}

static cJSON *bytes_json(const api_token_lp_t *t)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < t->len; i++)
        if (!cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)t->bytes[i]))) {
            cJSON_Delete(a);
            return NULL;
        }
    return a;
}

static cJSON *chat_lp_entry(const api_token_lp_t *t)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = o && oai_add(o, "token", token_string(t))
              && oai_add(o, "logprob", cJSON_CreateNumber(t->logprob))
              && oai_add(o, "bytes", bytes_json(t));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Appends chat logprobs.content items for d's tokens to arr. */
static bool chat_lp_items(cJSON *arr, const api_delta_t *d)
{
    for (int i = 0; i < d->n_logprobs; i++) {
        const api_logprob_t *lp = &d->logprobs[i];
        cJSON *o = chat_lp_entry(&lp->token), *top = cJSON_CreateArray();
        bool ok = o && top;
        for (int k = 0; ok && k < lp->n_top; k++) {
            cJSON *e = chat_lp_entry(&lp->top[k]);
            ok = e && cJSON_AddItemToArray(top, e);
            if (!ok)
                cJSON_Delete(e);
        }
        if (ok) {
            ok = oai_add(o, "top_logprobs", top);
            top = NULL;
        }
        cJSON_Delete(top);
        if (!ok || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            return false;
        }
    }
    return true;
}

/* Appends legacy completions logprobs for d's tokens to the four arrays of lp. */
static bool comp_lp_items(cJSON *lp, const api_delta_t *d, long long *offset)
{
    cJSON *toks = cJSON_GetObjectItemCaseSensitive(lp, "tokens");
    cJSON *vals = cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs");
    cJSON *tops = cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs");
    cJSON *offs = cJSON_GetObjectItemCaseSensitive(lp, "text_offset");
    for (int i = 0; i < d->n_logprobs; i++) {
        const api_logprob_t *e = &d->logprobs[i];
        cJSON *top = cJSON_CreateObject();
        bool ok = top != NULL;
        for (int k = 0; ok && k < e->n_top; k++) {
            api_buf_t b = {0};
            ok = !api_utf8_lossy(&b, e->top[k].bytes, e->top[k].len)
                 && !cJSON_GetObjectItemCaseSensitive(top, b.p) /* keep the likelier */
                 ? oai_add(top, b.p, cJSON_CreateNumber(e->top[k].logprob))
                 : b.p != NULL;
            api_buf_free(&b);
        }
        cJSON *t = token_string(&e->token);
        ok = ok && t && cJSON_AddItemToArray(toks, t);
        if (!ok)
            cJSON_Delete(t);
        ok = ok && cJSON_AddItemToArray(vals, cJSON_CreateNumber(e->token.logprob))
             && cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)*offset));
        if (ok && cJSON_AddItemToArray(tops, top))
            top = NULL;
        else
            ok = false;
        cJSON_Delete(top);
        if (!ok)
            return false;
        *offset += (long long)e->token.len;
    }
    return true;
}

static cJSON *new_comp_lp(void)
{
    cJSON *lp = cJSON_CreateObject();
    if (!lp || !oai_add(lp, "tokens", cJSON_CreateArray())
        || !oai_add(lp, "token_logprobs", cJSON_CreateArray())
        || !oai_add(lp, "top_logprobs", cJSON_CreateArray())
        || !oai_add(lp, "text_offset", cJSON_CreateArray())) {
        cJSON_Delete(lp);
        return NULL;
    }
    return lp;
}

static cJSON *chat_lp_object(cJSON *content)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !content || !oai_add(o, "content", content) || !oai_add(o, "refusal", cJSON_CreateNull())) {
        if (o && !cJSON_GetObjectItemCaseSensitive(o, "content"))
            cJSON_Delete(content);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int oai_emit_logprobs(api_render_t *r, bool chat, const api_delta_t *d)
{
    oai_state_t *st = r->state;
    cJSON *lp;
    if (chat) {
        cJSON *content = cJSON_CreateArray();
        if (!content || !chat_lp_items(content, d)) {
            cJSON_Delete(content);
            return CAIRN_ENOMEM;
        }
        lp = chat_lp_object(content);
    } else {
        lp = new_comp_lp();
        if (lp && !comp_lp_items(lp, d, &st->offset[d->choice])) {
            cJSON_Delete(lp);
            lp = NULL;
        }
    }
    if (!lp)
        return CAIRN_ENOMEM;
    cJSON *delta = chat ? cJSON_CreateObject() : NULL;
    if (chat && !delta) {
        cJSON_Delete(lp);
        return CAIRN_ENOMEM;
    }
    return emit_delta_lp(r, chat, d->choice, delta, "", 0, CAIRN_FINISH_NONE, 0, lp);
}

cJSON *oai_logprobs_final(api_render_t *r, bool chat, int i)
{
    oai_state_t *st = r->state;
    if (!r->req->logprobs)
        return cJSON_CreateNull();
    cJSON *v = st->lp[i];
    st->lp[i] = NULL;
    if (!v)
        v = chat ? cJSON_CreateArray() : new_comp_lp();
    return chat ? chat_lp_object(v) : v;
}

static int emit_delta_lp(api_render_t *r, bool chat, int index, cJSON *delta, const char *text,
                         size_t len, cairn_finish_reason_t finish, int tool_calls, cJSON *lp)
{
    cJSON *o = oai_envelope(r, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_CreateArray();
    cJSON *c = cJSON_CreateObject();
    bool ok = o && choices && c && cJSON_AddItemToArray(choices, c);
    if (!ok)
        cJSON_Delete(c);
    ok = ok && oai_add(c, "index", cJSON_CreateNumber(index));
    if (chat) {
        if (ok)
            ok = oai_add(c, "delta", delta);
        else
            cJSON_Delete(delta);
        delta = NULL;
    } else if (ok) {
        ok = oai_add(c, "text", oai_string_n(text, len));
    }
    if (ok)
        ok = oai_add(c, "logprobs", lp ? lp : cJSON_CreateNull());
    else
        cJSON_Delete(lp);
    lp = NULL;
    ok = ok && oai_add(c, "finish_reason", oai_finish_json(finish, tool_calls));
    if (ok) {
        ok = oai_add(o, "choices", choices);
        choices = NULL;
    }
    if (ok && r->req->include_usage)
        ok = oai_add(o, "usage", cJSON_CreateNull());
    cJSON_Delete(choices);
    if (!ok) {
        cJSON_Delete(o);
        return CAIRN_ENOMEM;
    }
    return oai_emit(&r->out, o, "data: ", "\n\n");
}

int oai_emit_stream_end(api_render_t *r, bool chat, const api_end_t *e)
{
    int rc = 0;
    for (int i = 0; !rc && i < r->req->n; i++)
        rc = oai_emit_chunk_calls(r, chat, i, "", 0, false, e->finish[i],
                                  e->tool_calls ? e->tool_calls[i] : 0);
    if (!rc && r->req->include_usage) {
        cJSON *o = oai_envelope(r, chat ? "chat.completion.chunk" : "text_completion");
        bool ok = o && oai_add(o, "choices", cJSON_CreateArray())
                  && oai_add(o, "usage", oai_usage_json(&e->usage));
        if (!ok) {
            cJSON_Delete(o);
            return CAIRN_ENOMEM;
        }
        rc = oai_emit(&r->out, o, "data: ", "\n\n");
    }
    return rc ? rc : api_buf_append(&r->out, "data: [DONE]\n\n", 14);
}

static const char *error_type(api_error_kind_t k)
{
    switch (k) {
    case API_ERR_INVALID_REQUEST: return "invalid_request_error";
    case API_ERR_AUTHENTICATION: return "authentication_error";
    case API_ERR_NOT_FOUND: return "invalid_request_error";
    case API_ERR_RATE_LIMIT: return "rate_limit_error";
    case API_ERR_SERVER: return "server_error";
    case API_ERR_UNAVAILABLE: return "server_error";
    }
    return "server_error"; /* not reached: every kind is listed above */
}

static cJSON *error_object(const api_error_t *e)
{
    cJSON *o = cJSON_CreateObject(), *in = cJSON_CreateObject();
    bool ok = o && in && oai_add(in, "message", cJSON_CreateString(e->message))
              && oai_add(in, "type", cJSON_CreateString(error_type(e->kind)))
              && oai_add(in, "param",
                         e->param[0] ? cJSON_CreateString(e->param) : cJSON_CreateNull())
              && oai_add(in, "code", e->code ? cJSON_CreateString(e->code) : cJSON_CreateNull());
    if (ok) {
        ok = oai_add(o, "error", in);
        in = NULL;
    }
    cJSON_Delete(in);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int oai_render_error(const api_error_t *e, api_buf_t *out)
{
    return oai_emit(out, error_object(e), "", "");
}

int oai_fail(api_render_t *r, const api_error_t *e)
{
    int rc = oai_emit(&r->out, error_object(e), "data: ", "\n\n");
    return rc ? rc : api_buf_append(&r->out, "data: [DONE]\n\n", 14);
}

int oai_render_models(const api_model_t *m, const char *want, api_buf_t *out,
                      api_error_t *err)
{
    if (want && strcmp(want, m->id) != 0) {
        api_error_set(err, 404, API_ERR_INVALID_REQUEST, "model", "model_not_found",
                      "The model '%s' does not exist", want);
        return CAIRN_ENOENT;
    }
    cJSON *mo = cJSON_CreateObject();
    bool ok = mo && oai_add(mo, "id", cJSON_CreateString(m->id))
              && oai_add(mo, "object", cJSON_CreateString("model"))
              && oai_add(mo, "created", cJSON_CreateNumber((double)m->created))
              && oai_add(mo, "owned_by", cJSON_CreateString("cairn"))
              && oai_add(mo, "max_model_len", cJSON_CreateNumber(m->max_model_len));
    if (!ok) {
        cJSON_Delete(mo);
        return CAIRN_ENOMEM;
    }
    if (want)
        return oai_emit(out, mo, "", "");
    cJSON *root = cJSON_CreateObject(), *data = cJSON_CreateArray();
    ok = root && data && oai_add(root, "object", cJSON_CreateString("list"));
    if (ok && cJSON_AddItemToArray(data, mo))
        mo = NULL;
    else
        ok = false;
    if (ok) {
        ok = oai_add(root, "data", data);
        data = NULL;
    }
    cJSON_Delete(mo);
    cJSON_Delete(data);
    if (!ok) {
        cJSON_Delete(root);
        return CAIRN_ENOMEM;
    }
    return oai_emit(out, root, "", "");
}

/* ---- Per-request state ------------------------------------------------------------- */

int oai_begin(api_render_t *r)
{
    r->state = cairn_calloc(1, sizeof(oai_state_t));
    return r->state ? 0 : CAIRN_ENOMEM;
}

int oai_accumulate(api_render_t *r, const api_delta_t *d)
{
    oai_state_t *st = r->state;
    if (d->choice < 0 || d->choice >= r->req->n)
        return CAIRN_EINVAL;
    int i = d->choice;
    switch (d->kind) {
    case API_DELTA_TEXT:
        return api_buf_append(&st->text[i], d->text, d->len);
    case API_DELTA_REASONING:
        return api_buf_append(&st->reasoning[i], d->text, d->len);
    case API_DELTA_TOOL_CALL_BEGIN: {
        if (!st->calls[i] && !(st->calls[i] = cJSON_CreateArray()))
            return CAIRN_ENOMEM;
        cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        bool ok = call && fn && oai_add(call, "id", cJSON_CreateString(d->tool_id))
                  && oai_add(call, "type", cJSON_CreateString("function"))
                  && oai_add(fn, "name", oai_string_n(d->text, d->len))
                  && oai_add(fn, "arguments", cJSON_CreateString(""));
        if (ok) {
            ok = oai_add(call, "function", fn);
            fn = NULL;
        }
        if (ok && cJSON_AddItemToArray(st->calls[i], call))
            call = NULL;
        else
            ok = false;
        cJSON_Delete(call);
        cJSON_Delete(fn);
        api_buf_free(&st->args);
        return ok ? 0 : CAIRN_ENOMEM;
    }
    case API_DELTA_TOOL_CALL_ARGS:
        return api_buf_append(&st->args, d->text, d->len);
    case API_DELTA_LOGPROBS: {
        bool chat = st->chat;
        if (!st->lp[i] && !(st->lp[i] = chat ? cJSON_CreateArray() : new_comp_lp()))
            return CAIRN_ENOMEM;
        bool ok = chat ? chat_lp_items(st->lp[i], d) : comp_lp_items(st->lp[i], d, &st->offset[i]);
        return ok ? 0 : CAIRN_ENOMEM;
    }
    case API_DELTA_TOOL_CALL_END: {
        cJSON *call = cJSON_GetArrayItem(st->calls[i], cJSON_GetArraySize(st->calls[i]) - 1);
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        cJSON *a = oai_string_n(st->args.p, st->args.len);
        api_buf_free(&st->args);
        if (!fn || !a || !cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", a)) {
            cJSON_Delete(a);
            return CAIRN_ENOMEM;
        }
        return 0;
    }
    }
    return CAIRN_EINVAL; /* not reached: every kind is handled above */
}

void oai_release(api_render_t *r)
{
    oai_state_t *st = r->state;
    if (!st)
        return;
    for (int i = 0; i < API_MAX_N; i++) {
        api_buf_free(&st->text[i]);
        api_buf_free(&st->reasoning[i]);
        cJSON_Delete(st->calls[i]);
        cJSON_Delete(st->lp[i]);
    }
    api_buf_free(&st->args);
    cairn_free(st);
    r->state = NULL;
}
