/*
 * prompt.c — a neutral request's prompt as token ids (server_impl.h), whichever API it
 * came in: the one place that templates and tokenizes for the server.
 *
 * Model. MESSAGES are rendered by the model's chat template with the request's
 * template_kwargs as extra variables, its messages and tools, add_generation_prompt true,
 * and the tokenizer's bos_token/eos_token unless the kwargs set them; the text is then
 * tokenized without adding special tokens (the template wrote them), as transformers'
 * apply_chat_template(tokenize=True). TEXT is tokenized with add_special as the request
 * says. IDS are copied after a vocabulary check. Errors name the API's prompt field
 * (gen_request_t.prompt_param).
 *
 * Thread-safety: reentrant (the template and the tokenizer are read-only here).
 */
#include <string.h>

#include "server/server_impl.h"
#include "util/json.h"

static int from_ids(const prompt_ctx_t *pc, const gen_request_t *r, int32_t **ids, int *n_ids,
                    api_error_t *e)
{
    for (int i = 0; i < r->n_prompt_ids; i++)
        if (r->prompt_ids[i] >= pc->vocab) {
            api_error_set(e, 400, API_ERR_INVALID_REQUEST, r->prompt_param, NULL,
                          "%s[%d] = %d is outside the vocabulary [0, %d)", r->prompt_param, i,
                          r->prompt_ids[i], pc->vocab);
            return CAIRN_EINVAL;
        }
    if (r->n_prompt_ids > 0) {
        if (!(*ids = cairn_malloc((size_t)r->n_prompt_ids * sizeof **ids))) {
            api_error_oom(e);
            return CAIRN_ENOMEM;
        }
        memcpy(*ids, r->prompt_ids, (size_t)r->n_prompt_ids * sizeof **ids);
    }
    *n_ids = r->n_prompt_ids;
    return 0;
}

/*
 * Continuing the final (assistant) message: the prompt ends right after its content, as
 * transformers' continue_final_message does (the last occurrence of the content in the
 * rendering; what the template writes after it, its end-of-turn, is cut).
 */
static int cut_after_final(const gen_request_t *r, char *text, size_t *len, api_error_t *e)
{
    const cJSON *last = cJSON_GetArrayItem(r->messages, cJSON_GetArraySize(r->messages) - 1);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(last, "role");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(last, "content");
    if (!cJSON_IsString(role) || strcmp(role->valuestring, "assistant") != 0
        || !cJSON_IsString(content) || !content->valuestring[0]) {
        api_error_set(e, 400, API_ERR_INVALID_REQUEST, r->prompt_param, NULL,
                      "To continue the final message it must be an assistant message with "
                      "text content");
        return CAIRN_EINVAL;
    }
    size_t cl = strlen(content->valuestring);
    const char *hit = NULL;
    for (const char *p = text; (p = memmem(p, *len - (size_t)(p - text), content->valuestring, cl));
         p++)
        hit = p;
    if (!hit) {
        api_error_set(e, 400, API_ERR_INVALID_REQUEST, r->prompt_param, NULL,
                      "The chat template does not render the final message's content "
                      "verbatim, so it cannot be continued");
        return CAIRN_EINVAL;
    }
    *len = (size_t)(hit - text) + cl;
    text[*len] = '\0';
    return 0;
}

/*
 * A copy of the messages whose tool-call arguments given as JSON object text are the
 * objects themselves (for templates that print arguments as a mapping). NULL with
 * *changed false when nothing needs converting; NULL with *changed true: out of memory.
 */
static cJSON *args_to_objects(const cJSON *messages, bool *changed)
{
    *changed = false;
    const cJSON *m, *tc;
    bool any = false;
    cJSON_ArrayForEach(m, messages) {
        cJSON_ArrayForEach(tc, cJSON_GetObjectItemCaseSensitive(m, "tool_calls")) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
            any |= cJSON_IsString(cJSON_GetObjectItemCaseSensitive(fn ? fn : tc, "arguments"));
        }
    }
    if (!any)
        return NULL;
    *changed = true;
    cJSON *copy = cJSON_Duplicate(messages, true);
    cJSON *mm, *t;
    cJSON_ArrayForEach(mm, copy) {
        cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(mm, "tool_calls")) {
            cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
            cJSON *holder = fn ? fn : t;
            cJSON *a = cJSON_GetObjectItemCaseSensitive(holder, "arguments");
            if (!cJSON_IsString(a))
                continue;
            cJSON *obj = NULL;
            int rc = cairn_json_parse(a->valuestring, strlen(a->valuestring), NULL, &obj, NULL);
            if (rc == CAIRN_ENOMEM) {
                cJSON_Delete(copy);
                return NULL;
            }
            if (rc || !cJSON_IsObject(obj) || !cJSON_ReplaceItemInObjectCaseSensitive(holder, "arguments", obj))
                cJSON_Delete(obj); /* not an object: left as the client sent it */
        }
    }
    return copy;
}

/*
 * A copy of messages whose system messages after the first message are user messages,
 * or NULL when there are none (or on no memory: *oom). Some templates (docs/API.md) take
 * a system message only first and raise otherwise, while clients send them later too
 * (Claude Code an agent list after the user's text, others a late developer note): those
 * become user turns in place, so the conversation's prefix stays as it was and keeps
 * hitting the cache (merging them into the first message would change every prompt's
 * start).
 */
static cJSON *late_system_as_user(const cJSON *messages, bool *oom)
{
    *oom = false;
    bool any = false;
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, messages) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        any = any || (i++ > 0 && cJSON_IsString(role) && !strcmp(role->valuestring, "system"));
    }
    if (!any)
        return NULL;
    cJSON *copy = cJSON_Duplicate(messages, true);
    if (!copy) {
        *oom = true;
        return NULL;
    }
    i = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, copy) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(c, "role");
        if (i++ == 0 || !cJSON_IsString(role) || strcmp(role->valuestring, "system") != 0)
            continue;
        cJSON *user = cJSON_CreateString("user");
        if (!user || !cJSON_ReplaceItemInObjectCaseSensitive(c, "role", user)) {
            cJSON_Delete(user);
            cJSON_Delete(copy);
            *oom = true;
            return NULL;
        }
    }
    return copy;
}

/* Renders the chat template into *text (cairn_malloc'd). */
static int render_messages(const prompt_ctx_t *pc, const gen_request_t *r, char **text,
                           size_t *len, api_error_t *e)
{
    if (!pc->tmpl) {
        api_error_set(e, 400, API_ERR_INVALID_REQUEST, r->prompt_param, NULL,
                      "This model has no chat template; use /v1/completions");
        return CAIRN_EINVAL;
    }
    cJSON *ctx = r->template_kwargs ? cJSON_Duplicate(r->template_kwargs, true)
                                    : cJSON_CreateObject();
    if (!ctx)
        goto oom;
    cJSON_DeleteItemFromObjectCaseSensitive(ctx, "messages");
    cJSON_DeleteItemFromObjectCaseSensitive(ctx, "tools");
    cJSON_DeleteItemFromObjectCaseSensitive(ctx, "add_generation_prompt");
    cJSON *converted = NULL;
    bool changed = false;
    if (pc->args_as_objects && !(converted = args_to_objects(r->messages, &changed)) && changed) {
        cJSON_Delete(ctx);
        goto oom;
    }
    bool ok = converted ? cJSON_AddItemToObject(ctx, "messages", converted)
                        : cJSON_AddItemReferenceToObject(ctx, "messages", r->messages);
    if (!ok)
        cJSON_Delete(converted);
    if (ok && r->tools)
        ok = cJSON_AddItemReferenceToObject(ctx, "tools", r->tools);
    ok = ok && cJSON_AddBoolToObject(ctx, "add_generation_prompt",
                                     !r->continue_final && !r->no_generation_prompt);
    if (ok && r->enable_thinking >= 0 && !cJSON_GetObjectItemCaseSensitive(ctx, "enable_thinking"))
        ok = cJSON_AddBoolToObject(ctx, "enable_thinking", r->enable_thinking > 0);
    const char *bos = cairn_tokenizer_bos_token(pc->tok), *eos = cairn_tokenizer_eos_token(pc->tok);
    if (ok && bos && !cJSON_GetObjectItemCaseSensitive(ctx, "bos_token"))
        ok = cJSON_AddStringToObject(ctx, "bos_token", bos);
    if (ok && eos && !cJSON_GetObjectItemCaseSensitive(ctx, "eos_token"))
        ok = cJSON_AddStringToObject(ctx, "eos_token", eos);
    if (!ok) {
        cJSON_Delete(ctx);
        goto oom;
    }
    char terr[256] = "";
    int rc = cairn_chat_template_render(pc->tmpl, ctx, text, len, terr, sizeof terr);
    if (rc && rc != CAIRN_ENOMEM) { /* retried with later system messages as user turns */
        bool oom = false;
        cJSON *alt = late_system_as_user(cJSON_GetObjectItemCaseSensitive(ctx, "messages"), &oom);
        if (oom) {
            rc = CAIRN_ENOMEM;
        } else if (alt && !cJSON_ReplaceItemInObjectCaseSensitive(ctx, "messages", alt)) {
            cJSON_Delete(alt);
            rc = CAIRN_ENOMEM;
        } else if (alt) {
            char terr2[256] = "";
            int rc2 = cairn_chat_template_render(pc->tmpl, ctx, text, len, terr2, sizeof terr2);
            if (rc2 == 0 || rc2 == CAIRN_ENOMEM)
                rc = rc2; /* else the first failure is the one to report */
        }
    }
    cJSON_Delete(ctx);
    if (rc == CAIRN_ENOMEM)
        goto oom;
    if (rc) {
        api_error_set(e, 400, API_ERR_INVALID_REQUEST, r->prompt_param, NULL,
                      "The chat template failed: %s", terr[0] ? terr : cairn_strerror(rc));
        return rc;
    }
    if (r->continue_final && (rc = cut_after_final(r, *text, len, e))) {
        cairn_free(*text);
        *text = NULL;
        return rc;
    }
    return 0;
oom:
    api_error_oom(e);
    return CAIRN_ENOMEM;
}

/* Whether text ends inside an open <think> block (the template opened it for the model). */
static bool ends_in_think(const char *text, size_t len)
{
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' '))
        len--;
    return len >= 7 && !memcmp(text + len - 7, "<think>", 7);
}

int prompt_build(const prompt_ctx_t *pc, const gen_request_t *r, int32_t **ids, int *n_ids,
                 bool *opens_reasoning, api_error_t *e)
{
    *ids = NULL;
    *n_ids = 0;
    if (opens_reasoning)
        *opens_reasoning = false;
    char *text = NULL;
    size_t len = 0;
    bool add_special = r->add_special, known = false;
    switch (r->prompt_kind) {
    case GEN_PROMPT_IDS:
        return from_ids(pc, r, ids, n_ids, e);
    case GEN_PROMPT_MESSAGES: {
        int rc = render_messages(pc, r, &text, &len, e);
        if (rc)
            return rc;
        add_special = false; /* the template wrote them */
        known = true;
        if (opens_reasoning)
            *opens_reasoning = ends_in_think(text, len);
        break;
    }
    case GEN_PROMPT_TEXT:
        text = r->prompt_text;
        len = r->prompt_len;
        known = true;
        break;
    }
    if (!known) { /* an adapter bug, not the client's */
        api_error_set(e, 500, API_ERR_SERVER, NULL, NULL, "unknown prompt kind %d",
                      (int)r->prompt_kind);
        return CAIRN_EINVAL;
    }
    size_t n = 0;
    int rc = cairn_tokenizer_encode(pc->tok, text ? text : "", len, add_special, ids, &n);
    if (text != r->prompt_text)
        cairn_free(text);
    if (rc == CAIRN_ENOMEM) {
        api_error_oom(e);
        return rc;
    }
    if (rc) {
        api_error_set(e, 400, API_ERR_INVALID_REQUEST, r->prompt_param, NULL,
                      "The prompt could not be tokenized: %s", cairn_strerror(rc));
        return rc;
    }
    if (n > INT32_MAX) {
        cairn_free(*ids);
        *ids = NULL;
        api_error_set(e, 400, API_ERR_INVALID_REQUEST, r->prompt_param, NULL,
                      "The prompt has too many tokens");
        return CAIRN_ERANGE;
    }
    *n_ids = (int)n;
    return 0;
}
