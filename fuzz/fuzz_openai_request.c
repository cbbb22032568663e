/*
 * fuzz_openai_request.c — libFuzzer target for the HTTP request body parser/validator
 * (src/server/openai_request.c), no network. The first byte picks the endpoint (chat or
 * completions); the rest is the body. Every input must either parse into a request whose
 * fields satisfy the parser's promises, or fail with an OpenAI-shaped 4xx/5xx error that
 * renders as JSON.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    oai_kind_t kind = (data[0] & 1) ? OAI_COMPLETION : OAI_CHAT;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    oai_request_t r;
    oai_error_t e;
    memset(&e, 0, sizeof e);
    int rc = oai_request_parse(kind, body, len, &r, &e);
    if (rc == 0) {
        if (r.n < 1 || r.n > OAI_MAX_N || r.sampling.n_stop > OAI_MAX_STOP)
            abort();
        if (r.cache_salt && strlen(r.cache_salt) > OAI_MAX_SALT)
            abort();
        if (kind == OAI_CHAT ? !r.messages : (!r.prompt_text && !r.prompt_ids))
            abort();
        if (r.include_usage && !r.stream)
            abort();
        for (size_t i = 0; i < r.sampling.n_stop; i++)
            if (!r.sampling.stop[i] || !r.sampling.stop[i][0])
                abort();
        cairn_sampling_params_validate(&r.sampling, 4096, NULL, 0);
        oai_request_fini(&r);
    } else {
        if (e.http_status < 400 || e.http_status > 599 || !e.message[0])
            abort();
        char *j = oai_error_json(&e);
        cairn_free(j);
    }
    return 0;
}
