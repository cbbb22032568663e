/*
 * registry.c — the APIs `cairn serve` speaks, in routing order. Adding an API is one new
 * file in this folder defining `const api_adapter_t api_<name>` (api.h) and one line in
 * CAIRN_APIS below; nothing else changes. The first entry also renders the errors of
 * routes no API owns (unknown paths, /v1/models).
 *
 * Thread-safety: immutable after load.
 */
#include "server/api/api.h"

#define CAIRN_APIS(X)          \
    X(api_openai_chat)         \
    X(api_openai_completions)  \
    X(api_openai_responses)    \
    X(api_anthropic_messages)

#define DECLARE(name) extern const api_adapter_t name;
CAIRN_APIS(DECLARE)
#undef DECLARE

#define ENTRY(name) &name,
const api_adapter_t *const api_registry[] = {CAIRN_APIS(ENTRY)};
#undef ENTRY

const size_t api_registry_count = sizeof api_registry / sizeof api_registry[0];
