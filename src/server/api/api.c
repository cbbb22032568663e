/*
 * api.c — what every API adapter shares (api.h): byte buffers, neutral errors, the
 * neutral request's lifetime and its stop strings, the adapter-list check, and the untrusted-body checks of
 * JSON APIs (UTF-8, one object, no trailing data, no duplicate keys).
 *
 * Invariant: a gen_request_t is either zeroed or owns every pointer in it; fini returns
 * it to zero, so a parser's single failure path is "fini and return".
 *
 * Out of memory. Bodies are parsed with cairn_json_parse (util/json.h), which tells an
 * allocation failure inside cJSON from malformed text, so a valid request under memory
 * pressure is a 503 ("retry"), never a 400 ("not valid JSON").
 *
 * Thread-safety: pure functions; no shared state.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "server/api/api.h"
#include "util/json.h"

/* ---- Buffers ----------------------------------------------------------------------- */

int api_buf_append(api_buf_t *b, const char *s, size_t n)
{
    if (n > SIZE_MAX / 2 - b->len - 1)
        return CAIRN_ENOMEM;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n + 1)
            nc *= 2;
        char *np = cairn_realloc(b->p, nc);
        if (!np)
            return CAIRN_ENOMEM;
        b->p = np;
        b->cap = nc;
    }
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int api_buf_take(api_buf_t *b, char *s)
{
    if (!s)
        return CAIRN_ENOMEM;
    int rc = api_buf_append(b, s, strlen(s));
    cairn_free(s);
    return rc;
}

int api_buf_printf(api_buf_t *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return CAIRN_EINVAL;
    if ((size_t)n < sizeof small)
        return api_buf_append(b, small, (size_t)n);
    char *big = cairn_malloc((size_t)n + 1);
    if (!big)
        return CAIRN_ENOMEM;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = api_buf_append(b, big, (size_t)n);
    cairn_free(big);
    return rc;
}

void api_buf_free(api_buf_t *b)
{
    cairn_free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- Errors ------------------------------------------------------------------------ */

void api_error_set(api_error_t *e, int http_status, api_error_kind_t kind, const char *param,
                   const char *code, const char *fmt, ...)
{
    e->http_status = http_status;
    e->kind = kind;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

void api_error_oom(api_error_t *e)
{
    api_error_set(e, 503, API_ERR_UNAVAILABLE, NULL, "out_of_memory",
                  "The server is out of memory; retry later");
}

/* ---- The neutral request ----------------------------------------------------------- */

void gen_request_init(gen_request_t *r)
{
    memset(r, 0, sizeof *r);
    r->n = 1;
    r->enable_thinking = -1;
    cairn_sampling_params_init(&r->sampling);
    r->sampling.stop = (const char *const *)r->stop_store;
    r->prompt_param = "prompt";
    r->max_tokens_param = "max_tokens";
}

void gen_request_fini(gen_request_t *r)
{
    if (!r)
        return;
    cJSON_Delete(r->messages);
    cJSON_Delete(r->tools);
    cJSON_Delete(r->template_kwargs);
    cairn_free(r->prompt_text);
    cairn_free(r->prompt_ids);
    cairn_free(r->model);
    for (int i = 0; i < API_MAX_STOP; i++)
        cairn_free(r->stop_store[i]);
    cairn_free(r->stop_ids);
    cairn_free(r->bias);
    cairn_free(r->cache_salt);
    cairn_free(r->user);
    if (r->api_data && r->api_data_free)
        r->api_data_free(r->api_data);
    memset(r, 0, sizeof *r);
}

int gen_request_stop_strings(gen_request_t *r, const cJSON *arr, const char *param, api_error_t *err)
{
    const cJSON *s;
    size_t k = 0;
    cJSON_ArrayForEach(s, arr) {
        if (!cJSON_IsString(s) || !s->valuestring[0]) {
            api_error_set(err, 400, API_ERR_INVALID_REQUEST, param, NULL, "%s[%zu] must be a non-empty string", param,
                          k);
            return CAIRN_EINVAL;
        }
        if (!(r->stop_store[k] = cairn_strdup(s->valuestring)))
            return CAIRN_ENOMEM;
        r->sampling.n_stop = ++k;
    }
    return 0;
}

/* ---- Adapter lists ----------------------------------------------------------------- */

static bool server_path(const char *p) { return !strcmp(p, "/health") || !strcmp(p, "/metrics"); }

int api_list_check(const api_adapter_t *const *apis, size_t n, char *err, size_t err_len)
{
    if (!apis || n == 0) {
        snprintf(err, err_len, "no API adapters to serve");
        return CAIRN_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        const api_adapter_t *a = apis[i];
        if (!a || !a->name || !a->routes || !a->n_routes || !a->auth || !a->n_auth
            || !a->id_prefix || !a->content_type || !a->stream_content_type || !a->oom_body
            || !a->parse || !a->render_error || !a->begin || !a->delta || !a->end || !a->fail
            || !a->release) {
            snprintf(err, err_len, "API adapter %zu (%s) is incomplete", i,
                     a && a->name ? a->name : "unnamed");
            return CAIRN_EINVAL;
        }
        for (size_t k = 0; k < a->n_auth; k++)
            if (!a->auth[k].header) {
                snprintf(err, err_len, "API %s: auth entry %zu has no header", a->name, k);
                return CAIRN_EINVAL;
            }
        for (size_t r = 0; r < a->n_routes; r++) {
            const char *p = a->routes[r].path;
            if (!p || p[0] != '/' || server_path(p)) {
                snprintf(err, err_len, "API %s: route '%s' is not a free path", a->name,
                         p ? p : "(null)");
                return CAIRN_EINVAL;
            }
            api_op_t op = a->routes[r].op;
            if ((op == API_OP_COUNT_TOKENS && !a->render_count)
                || (op == API_OP_LIST_MODELS && !a->render_models)
                || (op != API_OP_GENERATE && op != API_OP_COUNT_TOKENS
                    && op != API_OP_LIST_MODELS)) {
                snprintf(err, err_len, "API %s: %s has an operation (%d) it cannot render",
                         a->name, p, (int)op);
                return CAIRN_EINVAL;
            }
            const char *h = a->routes[r].when_header;
            for (size_t j = 0; j <= i; j++)
                for (size_t s = 0; s < (j == i ? r : apis[j]->n_routes); s++)
                    if (!strcmp(apis[j]->routes[s].path, p)
                        && (h == NULL) == (apis[j]->routes[s].when_header == NULL)
                        && (!h || !strcasecmp(h, apis[j]->routes[s].when_header))) {
                        snprintf(err, err_len, "APIs %s and %s both serve %s", apis[j]->name,
                                 a->name, p);
                        return CAIRN_EINVAL;
                    }
        }
    }
    return 0;
}

/* ---- JSON bodies ------------------------------------------------------------------- */

bool api_utf8_valid(const char *str, size_t n)
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

int api_utf8_lossy(api_buf_t *out, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        /* The longest valid run from i, character by character. */
        while (j < n) {
            size_t k = 1;
            unsigned c = (unsigned char)s[j];
            if (c >= 0xC2 && c <= 0xDF)
                k = 2;
            else if (c >= 0xE0 && c <= 0xEF)
                k = 3;
            else if (c >= 0xF0 && c <= 0xF4)
                k = 4;
            else if (c >= 0x80)
                break;
            if (j + k > n || !api_utf8_valid(s + j, k))
                break;
            j += k;
        }
        int rc = api_buf_append(out, s + i, j - i);
        if (!rc && j < n)
            rc = api_buf_append(out, "\xEF\xBF\xBD", 3);
        if (rc)
            return rc;
        i = j < n ? j + 1 : j;
    }
    return out->p ? 0 : api_buf_append(out, "", 0);
}

/* Every decoded key and string must be UTF-8 too. cJSON refuses lone surrogate escapes
 * today; this keeps the guarantee independent of it. Depth: cJSON's nesting limit. */
static bool strings_valid(const cJSON *v)
{
    for (; v; v = v->next) {
        if (v->string && !api_utf8_valid(v->string, strlen(v->string)))
            return false;
        if (cJSON_IsString(v) && !api_utf8_valid(v->valuestring, strlen(v->valuestring)))
            return false;
        if (v->child && !strings_valid(v->child))
            return false;
    }
    return true;
}

#define BAD(...) api_error_set(err, 400, API_ERR_INVALID_REQUEST, NULL, NULL, __VA_ARGS__)

int api_json_object(const char *body, size_t len, int max_fields, cJSON **out,
                    api_error_t *err)
{
    *out = NULL;
    if (!api_utf8_valid(body, len)) {
        BAD("The request body is not valid UTF-8");
        return CAIRN_EINVAL;
    }
    const char *end = NULL;
    cJSON *root = NULL;
    int rc = cairn_json_parse(body, len, &end, &root, NULL);
    if (rc == CAIRN_ENOMEM) { /* the body may be valid: never call it malformed */
        api_error_oom(err);
        return rc;
    }
    if (rc) {
        BAD("The request body is not valid JSON");
        return CAIRN_EFORMAT;
    }
    rc = CAIRN_EINVAL;
    while (end && end < body + len && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t'))
        end++;
    if (end && end < body + len && *end) {
        BAD("The request body has trailing data after the JSON object");
        rc = CAIRN_EFORMAT;
        goto fail;
    }
    if (!strings_valid(root)) {
        BAD("The request body has a string that is not valid UTF-8");
        goto fail;
    }
    if (!cJSON_IsObject(root)) {
        BAD("The request body must be a JSON object");
        goto fail;
    }
    /* Duplicate keys are refused (cJSON keeps both). The key count is bounded first, so
     * the quadratic check stays cheap. */
    if (cJSON_GetArraySize(root) > max_fields) {
        BAD("The request has too many fields");
        goto fail;
    }
    for (const cJSON *a = root->child; a; a = a->next)
        for (const cJSON *b = a->next; b; b = b->next)
            if (!strcmp(a->string, b->string)) {
                api_error_set(err, 400, API_ERR_INVALID_REQUEST, a->string, NULL,
                              "Duplicate field: %s", a->string);
                goto fail;
            }
    *out = root;
    return 0;
fail:
    cJSON_Delete(root);
    return rc;
}
