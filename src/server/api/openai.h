/*
 * server/api/openai.h — what the OpenAI adapters share (openai_common.c): the request
 * field machinery and the fields both endpoints accept, the error shape, the response
 * envelope, usage, and the SSE framing ("data: {...}\n\n" ... "data: [DONE]\n\n").
 *
 *   openai_chat.c         POST /v1/chat/completions, GET /v1/models (api_openai_chat)
 *   openai_completions.c  POST /v1/completions      (api_openai_completions)
 *   openai_responses.c    POST /v1/responses        (api_openai_responses)
 *
 * Shapes follow the OpenAI API (docs/API.md). Thread-safety: pure functions.
 */
#ifndef CAIRN_SERVER_API_OPENAI_H
#define CAIRN_SERVER_API_OPENAI_H

#include "server/api/api.h"

extern const api_adapter_t api_openai_chat;
extern const api_adapter_t api_openai_completions;
extern const api_adapter_t api_openai_responses;

/* Where both OpenAI endpoints read the API key: Authorization: Bearer KEY. */
extern const api_auth_t oai_auth[1];
#define OAI_OOM_BODY                                                                        \
    "{\"error\":{\"message\":\"The server is out of memory; retry later\",\"type\":"        \
    "\"server_error\",\"param\":null,\"code\":\"out_of_memory\"}}"

/* ---- Requests ---------------------------------------------------------------------- */

/*
 * One accepted field: its handler validates v (never NULL; JSON null included) into *r.
 * Returns 0, or a negative code with *err set (CAIRN_ENOMEM may leave *err unset: the
 * caller turns it into api_error_oom).
 */
typedef int (*oai_field_fn)(const cJSON *v, gen_request_t *r, api_error_t *err);

typedef struct {
    const char *name;
    oai_field_fn parse;
} oai_field_t;

/* The fields both endpoints accept (model, stream, sampling, stop, n, cache_salt, ...). */
extern const oai_field_t oai_common_fields[];
extern const size_t oai_common_count;

/*
 * Parses a body as one JSON object whose every key is in `fields` or oai_common_fields
 * (else 400 unknown_parameter: "Unrecognized request argument supplied"), dispatching each
 * in body order; then `required` (a field name, or NULL) must be present, and
 * stream_options needs stream. *r must be initialized (gen_request_init plus the
 * endpoint's defaults). On failure *r is finalized.
 */
int oai_parse_body(const api_input_t *in, const oai_field_t *fields, size_t n_fields,
                   const char *required, gen_request_t *r, api_error_t *err);
/* max_tokens (common) and chat's max_completion_tokens: an integer >= 1. */
int oai_field_max_tokens(const cJSON *v, gen_request_t *r, api_error_t *err);

/*
 * Fields accepted only at their default value, named by v->string: null is always the
 * default; anything else the default does not allow is 400 unsupported_parameter ("'%s'
 * is only supported at its default value"), a value of the wrong type 400 naming it.
 *   oai_default_bool: a boolean, false (or, with any_value, either).
 *   oai_default_int:  an integer equal to want.
 */
int oai_default_bool(const cJSON *v, bool any_value, api_error_t *err);
int oai_default_int(const cJSON *v, long long want, api_error_t *err);
int oai_unsupported(const cJSON *v, api_error_t *err);
/* A JSON number that is an integer in [lo, hi]. */
bool oai_get_int(const cJSON *v, double lo, double hi, long long *out);
/* The token ids of arr, a JSON array of n >= 1 items, into *ids (allocated here; the
 * request frees it): each a non-negative integer, else a 400 on param, "<param>[i] must be
 * <what>": CAIRN_EINVAL. CAIRN_ENOMEM when *ids cannot be allocated. */
int oai_token_ids(const cJSON *arr, int n, const char *param, const char *what, int32_t **ids, api_error_t *err);

/* ---- Responses --------------------------------------------------------------------- */

/* Adds item to obj; a NULL item (out of memory upstream) or a failed add returns false. */
bool oai_add(cJSON *obj, const char *key, cJSON *item);
/* A JSON string of s[0..n) (s may be NULL when n is 0). */
cJSON *oai_string_n(const char *s, size_t n);
/* {"id", "object", "created", "model"} for r. */
cJSON *oai_envelope(const api_render_t *r, const char *object);
/* The usage object: prompt/completion/total tokens and prompt_tokens_details with
 * cached_tokens (every prompt token not computed) and its split, hot_cached_tokens and
 * cold_restored_tokens (Cairn extensions). */
cJSON *oai_usage_json(const api_usage_t *u);
/* "stop" / "length", "tool_calls" for a stop after tool calls, or null while running. */
cJSON *oai_finish_json(cairn_finish_reason_t f, int tool_calls);
/* Prints root (deleting it; NULL: out of memory) between prefix and suffix onto out. */
int oai_emit(api_buf_t *out, cJSON *root, const char *prefix, const char *suffix);

/* Adds choice i's fields after its "index" (false: out of memory; the choice is freed by
 * the caller either way). */
typedef bool (*oai_choice_fn)(api_render_t *r, const api_end_t *e, int i, cJSON *choice);
/*
 * The body of a non-streaming response (chat and completions): the envelope of `object`,
 * "choices" with one object per choice ({"index": i} then what add_choice adds) and
 * "usage", printed onto r->out. 0, or CAIRN_ENOMEM with nothing printed.
 */
int oai_emit_full(api_render_t *r, const char *object, const api_end_t *e, oai_choice_fn add_choice);

/*
 * One streaming chunk for choice `index` of r: chat ("chat.completion.chunk", a delta with
 * the role when with_role and the content when len > 0 or with_role) or completions
 * ("text_completion", text), logprobs null, finish_reason; "usage": null when
 * r->req->include_usage. Appended to r->out as "data: {...}\n\n".
 */
int oai_emit_chunk(api_render_t *r, bool chat, int index, const char *text, size_t len,
                   bool with_role, cairn_finish_reason_t finish);
/* The same with the finish reason of a choice that made tool_calls calls. */
int oai_emit_chunk_calls(api_render_t *r, bool chat, int index, const char *text, size_t len,
                         bool with_role, cairn_finish_reason_t finish, int tool_calls);
/* One chunk with a given chat delta object (taken, even on failure; chat) or completion
 * text (text, len; !chat). */
int oai_emit_delta(api_render_t *r, bool chat, int index, cJSON *delta, const char *text,
                   size_t len, cairn_finish_reason_t finish, int tool_calls);
/* A stream's closing events: one finish chunk per choice, the usage chunk ("choices": [])
 * when include_usage, then "data: [DONE]". */
int oai_emit_stream_end(api_render_t *r, bool chat, const api_end_t *e);

/* GET /v1/models and /v1/models/{id}: {"object": "list", "data": [model]} or the model,
 * {"id", "object": "model", "created", "owned_by", "max_model_len"}; another id is 404
 * model_not_found. */
int oai_render_models(const api_model_t *m, const char *want, api_buf_t *out,
                      api_error_t *err);
/* {"error": {"message", "type", "param", "code"}}. */
int oai_render_error(const api_error_t *e, api_buf_t *out);
/* A failure after a stream began: "data: {"error": ...}\n\n" then "data: [DONE]\n\n". */
int oai_fail(api_render_t *r, const api_error_t *e);

/* Per-request state of both endpoints: what each choice of a non-streaming response said
 * (streams send each delta at once). */
typedef struct {
    api_buf_t text[API_MAX_N];
    api_buf_t reasoning[API_MAX_N];
    cJSON *calls[API_MAX_N];  /* chat tool_calls objects, or NULL */
    api_buf_t args;           /* the arguments of the call being received */
    bool chat;                /* chat completions (else completions) */
    cJSON *lp[API_MAX_N];     /* logprobs so far: chat content items / completions object */
    long long offset[API_MAX_N]; /* completions: bytes of the choice's text so far */
} oai_state_t;

/* A stream chunk carrying a LOGPROBS delta (chat: an empty delta and logprobs.content;
 * completions: empty text and the legacy tokens/token_logprobs/top_logprobs/text_offset). */
int oai_emit_logprobs(api_render_t *r, bool chat, const api_delta_t *d);
/* A whole response's logprobs for choice i (null when not asked for); takes them. */
cJSON *oai_logprobs_final(api_render_t *r, bool chat, int i);

int oai_begin(api_render_t *r);
/* Non-streaming: adds the delta to its choice (text, reasoning, tool calls). */
int oai_accumulate(api_render_t *r, const api_delta_t *d);
void oai_release(api_render_t *r);

#endif
