/*
 * chat_template.c — the public chat-template API: compile, render, limits, pick.
 *
 * Owns the compiled template object: one arena holding the normalised source copy,
 * decoded string literals and the AST. Compilation mirrors jinja2's preprocessing:
 * "\r\n" and "\r" become "\n" and a single trailing newline is dropped
 * (keep_trailing_newline=False) before lexing.
 * Invariants: a compiled template is never modified by rendering (only by
 * cairn_chat_template_set_limits), so concurrent renders are safe.
 */
#include <string.h>

#include "template/render.h"
#include "template/template_impl.h"

int cairn_chat_template_compile(const char *src, size_t len, cairn_chat_template_t **out,
                                char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!out || (!src && len)) {
        terr(err, errlen, "invalid argument");
        return CAIRN_EINVAL;
    }
    *out = NULL;
    ttoks toks = {0};
    int rc;
    cairn_chat_template_t *t = cairn_calloc(1, sizeof *t);
    if (!t) {
        terr(err, errlen, "out of memory");
        return CAIRN_ENOMEM;
    }
    t->max_output = CAIRN_CHAT_TEMPLATE_MAX_OUTPUT;
    t->max_steps = CAIRN_CHAT_TEMPLATE_MAX_STEPS;
    char *copy = tarena_alloc(&t->arena, len + 1);
    if (!copy) {
        rc = CAIRN_ENOMEM;
        goto fail;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            copy[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            copy[n++] = src[i];
        }
    }
    if (n > 0 && copy[n - 1] == '\n')
        n--;
    copy[n] = '\0';
    if ((rc = tlex(&t->arena, copy, n, &toks, err, errlen)))
        goto fail;
    if ((rc = tparse(&t->arena, &toks, &t->body, err, errlen)))
        goto fail;
    ttoks_fini(&toks);
    *out = t;
    return 0;
fail:
    if (rc == CAIRN_ENOMEM)
        terr(err, errlen, "out of memory");
    ttoks_fini(&toks);
    cairn_chat_template_destroy(t);
    return rc;
}

int cairn_chat_template_render(const cairn_chat_template_t *tmpl, const cJSON *context,
                               char **out_text, size_t *out_len, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (out_text)
        *out_text = NULL;
    if (out_len)
        *out_len = 0;
    if (!tmpl || !out_text || (context && !cJSON_IsObject(context))) {
        terr(err, errlen, "invalid argument: need a template, an output pointer and an object context");
        return CAIRN_EINVAL;
    }
    tbuf out = {.limit = tmpl->max_output};
    int rc = trender(tmpl, context, &out, err, errlen);
    if (rc == 0 && !out.p)
        rc = tbuf_put(&out, "", 0); /* an empty rendering is still a string */
    if (rc) {
        if (rc == CAIRN_ENOMEM && err && errlen && !err[0])
            terr(err, errlen, "out of memory");
        tbuf_fini(&out);
        return rc;
    }
    *out_text = out.p;
    if (out_len)
        *out_len = out.n;
    return 0;
}

void cairn_chat_template_set_limits(cairn_chat_template_t *tmpl, size_t max_output,
                                    uint64_t max_steps)
{
    if (!tmpl)
        return;
    if (max_output)
        tmpl->max_output = max_output;
    if (max_steps)
        tmpl->max_steps = max_steps;
}

void cairn_chat_template_destroy(cairn_chat_template_t *tmpl)
{
    if (!tmpl)
        return;
    tarena_free(&tmpl->arena);
    cairn_free(tmpl);
}

int cairn_chat_template_pick(const cJSON *field, const char *name, const char **out_src)
{
    if (!field || !out_src)
        return CAIRN_EINVAL;
    *out_src = NULL;
    if (cJSON_IsString(field)) {
        *out_src = field->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(field))
        return CAIRN_EFORMAT;
    if (!name)
        name = "default";
    const cJSON *it;
    cJSON_ArrayForEach(it, field)
    {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
        const cJSON *tp = cJSON_GetObjectItemCaseSensitive(it, "template");
        if (!cJSON_IsString(nm) || !cJSON_IsString(tp))
            return CAIRN_EFORMAT;
        if (strcmp(nm->valuestring, name) == 0) {
            *out_src = tp->valuestring;
            return 0;
        }
    }
    return CAIRN_ENOENT;
}
