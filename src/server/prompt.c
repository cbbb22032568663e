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
    bool ok = cJSON_AddItemReferenceToObject(ctx, "messages", r->messages);
    if (ok && r->tools)
        ok = cJSON_AddItemReferenceToObject(ctx, "tools", r->tools);
    ok = ok && cJSON_AddBoolToObject(ctx, "add_generation_prompt", true);
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
    cJSON_Delete(ctx);
    if (rc == CAIRN_ENOMEM)
        goto oom;
    if (rc) {
        api_error_set(e, 400, API_ERR_INVALID_REQUEST, r->prompt_param, NULL,
                      "The chat template failed: %s", terr[0] ? terr : cairn_strerror(rc));
        return rc;
    }
    return 0;
oom:
    api_error_oom(e);
    return CAIRN_ENOMEM;
}

int prompt_build(const prompt_ctx_t *pc, const gen_request_t *r, int32_t **ids, int *n_ids,
                 api_error_t *e)
{
    *ids = NULL;
    *n_ids = 0;
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
