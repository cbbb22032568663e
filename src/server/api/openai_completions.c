/*
 * openai_completions.c — the OpenAI (legacy) completions adapter: POST /v1/completions.
 *
 * Request. `prompt` is a string (GEN_PROMPT_TEXT, tokenized with the tokenizer's special
 * tokens), an array of token ids (GEN_PROMPT_IDS), or a one-element batch of either;
 * larger batches are refused. max_tokens defaults to 16, as OpenAI's. `echo`, `best_of`
 * and `suffix` are accepted at their defaults only; the rest is openai_common.c's.
 *
 * Response. text_completion objects, streamed as text_completion chunks, a finish chunk
 * per choice, the usage chunk (include_usage) and "data: [DONE]".
 *
 * Thread-safety: pure functions over the request's own render state (api.h).
 */
#include <string.h>

#include "server/api/openai.h"

#define BAD(param, ...) \
    api_error_set(err, 400, API_ERR_INVALID_REQUEST, param, NULL, __VA_ARGS__)

/* ---- Request ----------------------------------------------------------------------- */

static int prompt_value(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    if (cJSON_IsString(v)) {
        r->prompt_kind = GEN_PROMPT_TEXT;
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
        return prompt_value(first, r, err); /* a batch of one */
    if (n == 0) {
        BAD("prompt", "prompt must not be empty");
        return CAIRN_EINVAL;
    }
    if (cJSON_IsString(first) || cJSON_IsArray(first)) {
        BAD("prompt", "batched prompts are not supported; send one prompt per request");
        return CAIRN_EINVAL;
    }
    r->prompt_kind = GEN_PROMPT_IDS;
    int rc = oai_token_ids(v, n, "prompt", "a non-negative integer token id", &r->prompt_ids, err);
    if (rc)
        return rc;
    r->n_prompt_ids = n;
    return 0;
}

static int f_prompt(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    return prompt_value(v, r, err);
}

/* logprobs: an integer 0..5, the alternatives per token (null: none). */
static int f_logprobs(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    long long x;
    if (cJSON_IsNull(v))
        return 0;
    if (!oai_get_int(v, 0, 5, &x)) {
        BAD("logprobs", "logprobs must be an integer in [0, 5]");
        return CAIRN_EINVAL;
    }
    r->logprobs = true;
    r->top_logprobs = (int)x;
    return 0;
}

static int f_echo(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    (void)r;
    return oai_default_bool(v, false, err);
}

static int f_best_of(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    (void)r;
    return oai_default_int(v, 1, err);
}

static int f_suffix(const cJSON *v, gen_request_t *r, api_error_t *err)
{
    (void)r;
    if (cJSON_IsNull(v) || (cJSON_IsString(v) && !v->valuestring[0]))
        return 0;
    return oai_unsupported(v, err);
}

static const oai_field_t completion_fields[] = {
    {"prompt", f_prompt},
    {"logprobs", f_logprobs},
    {"echo", f_echo},
    {"best_of", f_best_of},
    {"suffix", f_suffix},
};

static int completions_parse(const api_input_t *in, gen_request_t *r, api_error_t *err)
{
    gen_request_init(r);
    r->prompt_kind = GEN_PROMPT_TEXT;
    r->add_special = true;
    r->prompt_param = "prompt";
    r->sampling.max_tokens = 16; /* OpenAI's legacy completions default */
    return oai_parse_body(in, completion_fields, CAIRN_ARRAY_LEN(completion_fields), "prompt",
                          r, err);
}

/* ---- Response ---------------------------------------------------------------------- */

static int completions_delta(api_render_t *r, const api_delta_t *d)
{
    switch (d->kind) {
    case API_DELTA_TEXT:
        if (!r->req->stream)
            return oai_accumulate(r, d);
        return oai_emit_chunk(r, false, d->choice, d->text, d->len, false, CAIRN_FINISH_NONE);
    case API_DELTA_LOGPROBS:
        if (!r->req->stream)
            return oai_accumulate(r, d);
        return oai_emit_logprobs(r, false, d);
    case API_DELTA_REASONING:
    case API_DELTA_TOOL_CALL_BEGIN:
    case API_DELTA_TOOL_CALL_ARGS:
    case API_DELTA_TOOL_CALL_END:
        /* A raw prompt's output is never parsed (only chat prompts are): not produced. */
        return CAIRN_EINVAL;
    }
    return CAIRN_EINVAL; /* not reached: every kind is handled above */
}

/* A completion choice: text, logprobs and finish_reason. */
static bool completion_choice(api_render_t *r, const api_end_t *e, int i, cJSON *c)
{
    oai_state_t *st = r->state;
    return oai_add(c, "text", oai_string_n(st->text[i].p, st->text[i].len))
           && oai_add(c, "logprobs", oai_logprobs_final(r, false, i))
           && oai_add(c, "finish_reason", oai_finish_json(e->finish[i], 0));
}

static int completions_end(api_render_t *r, const api_end_t *e)
{
    return r->req->stream ? oai_emit_stream_end(r, false, e)
                          : oai_emit_full(r, "text_completion", e, completion_choice);
}

static const api_route_t completion_routes[] = {{"/v1/completions", API_OP_GENERATE, NULL}};

const api_adapter_t api_openai_completions = {
    .name = "openai.completions",
    .routes = completion_routes,
    .n_routes = CAIRN_ARRAY_LEN(completion_routes),
    .auth = oai_auth,
    .n_auth = CAIRN_ARRAY_LEN(oai_auth),
    .id_prefix = "cmpl",
    .content_type = "application/json",
    .stream_content_type = "text/event-stream",
    .oom_body = OAI_OOM_BODY,
    .parse = completions_parse,
    .render_error = oai_render_error,
    .begin = oai_begin,
    .delta = completions_delta,
    .end = completions_end,
    .fail = oai_fail,
    .release = oai_release,
    .render_count = NULL,
    .render_models = NULL,
};
