/*
 * openai_response.c — rendering OpenAI response bodies and server-sent events.
 *
 * Shapes follow the OpenAI API: chat.completion / chat.completion.chunk objects for
 * /v1/chat/completions and text_completion objects for /v1/completions; streams are
 * "data: <json>\n\n" events ended by "data: [DONE]\n\n" (written by http_server.c).
 * Generated text arrives as byte ranges that are valid UTF-8 (the scheduler's stream
 * decoder guarantees whole characters); cJSON escapes what JSON requires.
 *
 * Every function returns a cairn_malloc'd string or NULL when out of memory.
 * Thread-safety: pure functions.
 */
#include <string.h>

#include "server/server_impl.h"

/* cJSON allocates with malloc; hand the result back as a cairn_malloc'd copy so callers
 * free everything the same way. */
static char *print_owned(cJSON *root, const char *prefix, const char *suffix)
{
    if (!root)
        return NULL;
    char *txt = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!txt)
        return NULL;
    size_t lp = strlen(prefix), lt = strlen(txt), ls = strlen(suffix);
    char *out = cairn_malloc(lp + lt + ls + 1);
    if (out) {
        memcpy(out, prefix, lp);
        memcpy(out + lp, txt, lt);
        memcpy(out + lp + lt, suffix, ls + 1);
    }
    cJSON_free(txt);
    return out;
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

/* Adds item to obj; on NULL item marks the whole object as failed by returning false. */
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

static cJSON *finish_json(cairn_finish_reason_t f)
{
    const char *name = cairn_finish_reason_name(f);
    return name ? cJSON_CreateString(name) : cJSON_CreateNull();
}

static cJSON *usage_json(const oai_usage_t *u)
{
    cJSON *o = cJSON_CreateObject(), *d = cJSON_CreateObject();
    bool ok = o && d;
    ok = ok && add(o, "prompt_tokens", cJSON_CreateNumber(u->prompt_tokens));
    ok = ok && add(o, "completion_tokens", cJSON_CreateNumber(u->completion_tokens));
    ok = ok && add(o, "total_tokens", cJSON_CreateNumber(u->prompt_tokens + u->completion_tokens));
    ok = ok && add(d, "cached_tokens", cJSON_CreateNumber(u->cached_tokens));
    ok = ok && add(d, "cold_restored_tokens", cJSON_CreateNumber(u->cold_restored_tokens));
    if (ok) {
        ok = add(o, "prompt_tokens_details", d);
        d = NULL;
    }
    if (!ok) {
        cJSON_Delete(o);
        cJSON_Delete(d);
        return NULL;
    }
    return o;
}

static cJSON *envelope(const oai_meta_t *m, bool chunk)
{
    cJSON *o = cJSON_CreateObject();
    const char *object = m->kind == OAI_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                             : "text_completion";
    bool ok = o && add(o, "id", cJSON_CreateString(m->id))
              && add(o, "object", cJSON_CreateString(object))
              && add(o, "created", cJSON_CreateNumber((double)m->created))
              && add(o, "model", cJSON_CreateString(m->model));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

char *oai_render_full(const oai_meta_t *m, int n, char *const *texts, const size_t *lens,
                      const cairn_finish_reason_t *finish, const oai_usage_t *u)
{
    cJSON *o = envelope(m, false);
    cJSON *choices = cJSON_CreateArray();
    bool ok = o && choices;
    for (int i = 0; ok && i < n; i++) {
        cJSON *c = cJSON_CreateObject();
        ok = c && cJSON_AddItemToArray(choices, c);
        if (!ok) {
            cJSON_Delete(c);
            break;
        }
        ok = add(c, "index", cJSON_CreateNumber(i));
        if (m->kind == OAI_CHAT) {
            cJSON *msg = cJSON_CreateObject();
            ok = ok && msg && add(msg, "role", cJSON_CreateString("assistant"))
                 && add(msg, "content", string_n(texts[i], lens[i]));
            if (ok)
                ok = add(c, "message", msg);
            else
                cJSON_Delete(msg);
        } else {
            ok = ok && add(c, "text", string_n(texts[i], lens[i]));
        }
        ok = ok && add(c, "logprobs", cJSON_CreateNull())
             && add(c, "finish_reason", finish_json(finish[i]));
    }
    if (ok) {
        ok = add(o, "choices", choices);
        choices = NULL;
    }
    ok = ok && add(o, "usage", usage_json(u));
    cJSON_Delete(choices);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return print_owned(o, "", "");
}

char *oai_render_chunk(const oai_meta_t *m, int index, const char *text, size_t len,
                       bool with_role, cairn_finish_reason_t finish, bool with_usage_null)
{
    cJSON *o = envelope(m, true);
    cJSON *choices = cJSON_CreateArray();
    cJSON *c = cJSON_CreateObject();
    bool ok = o && choices && c && cJSON_AddItemToArray(choices, c);
    if (!ok)
        cJSON_Delete(c);
    ok = ok && add(c, "index", cJSON_CreateNumber(index));
    if (ok && m->kind == OAI_CHAT) {
        cJSON *d = cJSON_CreateObject();
        ok = d != NULL;
        if (ok && with_role)
            ok = add(d, "role", cJSON_CreateString("assistant"));
        if (ok && (len > 0 || with_role))
            ok = add(d, "content", string_n(text, len));
        if (ok)
            ok = add(c, "delta", d);
        else
            cJSON_Delete(d);
    } else if (ok) {
        ok = add(c, "text", string_n(text, len));
    }
    ok = ok && add(c, "logprobs", cJSON_CreateNull())
         && add(c, "finish_reason", finish_json(finish));
    if (ok) {
        ok = add(o, "choices", choices);
        choices = NULL;
    }
    if (ok && with_usage_null)
        ok = add(o, "usage", cJSON_CreateNull());
    cJSON_Delete(choices);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return print_owned(o, "data: ", "\n\n");
}

char *oai_render_usage_chunk(const oai_meta_t *m, const oai_usage_t *u)
{
    cJSON *o = envelope(m, true);
    bool ok = o && add(o, "choices", cJSON_CreateArray()) && add(o, "usage", usage_json(u));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return print_owned(o, "data: ", "\n\n");
}

static cJSON *error_object(const oai_error_t *e)
{
    cJSON *o = cJSON_CreateObject(), *in = cJSON_CreateObject();
    bool ok = o && in && add(in, "message", cJSON_CreateString(e->message))
              && add(in, "type", cJSON_CreateString(e->type ? e->type : "server_error"))
              && add(in, "param", e->param[0] ? cJSON_CreateString(e->param) : cJSON_CreateNull())
              && add(in, "code", e->code ? cJSON_CreateString(e->code) : cJSON_CreateNull());
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

char *oai_error_json(const oai_error_t *e) { return print_owned(error_object(e), "", ""); }

char *oai_render_error_event(const oai_error_t *e)
{
    return print_owned(error_object(e), "data: ", "\n\n");
}
