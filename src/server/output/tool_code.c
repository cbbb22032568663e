/*
 * tool_code.c — tool calls in a ```tool_code fence, the convention function-calling
 * prompts for templates without a native format use (docs/API.md):
 *
 *     ```tool_code
 *     get_weather(city="Paris")
 *     ```
 *
 * The body is one pythonic call or a list of them (tool_pythonic.c). Detected by
 * "tool_code" in the chat template; otherwise chosen with --tool-parser tool_code.
 *
 * Thread-safety: pure.
 */
#include "server/output/output.h"

const tool_format_t tool_format_tool_code = {
    .name = "tool_code",
    .template_marker = "tool_code",
    .open = "```tool_code",
    .close = "```",
    .open_at_start = false,
    .starts = NULL,
    .parse = output_pythonic_parse,
};
