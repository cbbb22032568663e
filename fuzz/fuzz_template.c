/*
 * fuzz_template.c — libFuzzer target for the chat-template compiler and renderer.
 *
 * The input is template source. It is compiled and, when it compiles, rendered with a
 * fixed chat-shaped context (messages with a tool call, tools, special tokens), under
 * small render limits so runaway loops and huge strings end quickly with CAIRN_ERANGE.
 * Any crash, sanitizer report or leak is a bug; error returns are expected.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cairn/chat_template.h"

static const char CONTEXT[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"You are helpful.\"},"
    "{\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
    "{\"role\": \"assistant\", \"content\": \"<think>\\nhm\\n</think>\\n\\nok\", \"reasoning_content\": null,"
    " \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    " \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2.5, true, null]}}}]},"
    "{\"role\": \"tool\", \"content\": \"{\\\"temp\\\": 21}\", \"tool_call_id\": \"c1\"},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"caf\\u00e9\"}, {\"type\": \"image\"}]}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}],"
    "\"add_generation_prompt\": true, \"enable_thinking\": false,"
    "\"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static cJSON *ctx;
    if (!ctx)
        ctx = cJSON_Parse(CONTEXT);
    cairn_chat_template_t *t = NULL;
    char err[256];
    if (cairn_chat_template_compile((const char *)data, size, &t, err, sizeof err) != 0)
        return 0;
    cairn_chat_template_set_limits(t, (size_t)1 << 20, 200000);
    char *out = NULL;
    size_t len = 0;
    if (cairn_chat_template_render(t, ctx, &out, &len, err, sizeof err) == 0) {
        if (strlen(out) > len) /* the length reported covers the text */
            __builtin_trap();
        cairn_free(out);
    }
    cairn_chat_template_destroy(t);
    return 0;
}
