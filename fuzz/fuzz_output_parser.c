/*
 * fuzz_output_parser.c — libFuzzer target for the output parser (src/server/output/):
 * reasoning blocks and every tool-call format over arbitrary text. The first byte picks
 * the format (none, then each of tool_formats[]) and the reasoning flags, the second
 * seeds how the rest is cut into pieces. The request's tool schemas are a fixed list
 * (function f, parameters a..e of each JSON type) for the formats that type values. Every input must parse without error, and the
 * events (adjacent text, reasoning and argument pieces merged) must be the same whole
 * and cut.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api.h"
#include "server/output/output.h"

typedef struct {
    api_buf_t b;
    int last;
} rec_t;

static int record(void *ctx, const out_event_t *ev)
{
    rec_t *r = ctx;
    bool merge = (ev->kind == OUT_TEXT || ev->kind == OUT_REASONING || ev->kind == OUT_TOOL_ARGS)
                 && r->last == (int)ev->kind;
    char head[16] = {(char)('0' + ev->kind), (char)('a' + (ev->tool & 15)), ':', 0};
    if (!merge && api_buf_append(&r->b, "\x01", 1))
        return CAIRN_ENOMEM;
    if (!merge && api_buf_append(&r->b, head, strlen(head)))
        return CAIRN_ENOMEM;
    r->last = (int)ev->kind;
    return api_buf_append(&r->b, ev->text, ev->len);
}

static void run(const output_options_t *o, const uint8_t *s, size_t n, unsigned seed, rec_t *r,
                int *calls)
{
    output_parser_t *p;
    if (output_parser_create(o, &p))
        abort();
    size_t at = 0;
    while (at < n) {
        size_t piece = seed ? 1 + (seed % 7) : n - at;
        seed = seed * 1103515245u + 12345u;
        if (piece > n - at)
            piece = n - at;
        if (output_parser_feed(p, (const char *)s + at, piece, record, r))
            abort();
        at += piece;
    }
    if (output_parser_finish(p, record, r))
        abort();
    *calls = output_parser_tool_calls(p);
    output_parser_destroy(p);
}

static const char SCHEMAS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"boolean\"},"
    "\"c\":{\"type\":\"object\"},\"d\":{\"type\":[\"number\",\"null\"]},"
    "\"e\":{\"type\":\"string\"}}}}}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static cJSON *schemas;
    if (!schemas && !(schemas = cJSON_Parse(SCHEMAS)))
        abort();
    if (size < 2)
        return 0;
    size_t n_formats = 0;
    while (tool_formats[n_formats])
        n_formats++;
    unsigned pick = data[0];
    output_options_t o = {
        .reasoning = pick & 1,
        .in_reasoning = (pick >> 1) & 1,
        .tools = (pick >> 2) % (n_formats + 1) ? tool_formats[(pick >> 2) % (n_formats + 1) - 1]
                                               : NULL,
        .tool_schemas = schemas,
    };
    rec_t whole = {{0}, -1}, cut = {{0}, -1};
    int c1 = 0, c2 = 0;
    run(&o, data + 2, size - 2, 0, &whole, &c1);
    run(&o, data + 2, size - 2, data[1] | 1u, &cut, &c2);
    if (c1 != c2 || whole.b.len != cut.b.len
        || (whole.b.len && memcmp(whole.b.p, cut.b.p, whole.b.len)))
        abort();
    api_buf_free(&whole.b);
    api_buf_free(&cut.b);
    return 0;
}
