/*
 * server/output/output.h — the output parser: one choice's generated text, as it streams,
 * split into what the model meant: answer text, reasoning, and tool calls.
 *
 * Model. Between the scheduler's text and an API adapter (http_server.c's deliver_text)
 * each choice has one output_parser_t. It is fed the choice's text in whatever pieces the
 * detokenizer produced and reports typed events through a callback, in stream order:
 *
 *      "<think>\nplan\n</think>\n\nOK<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>"
 *        -> REASONING "plan"  TEXT "OK"  TOOL_BEGIN 0 "f"  TOOL_ARGS 0 "{\"a\": 1}"  TOOL_END 0
 *
 * Arguments of the JSON call formats stream as they are generated (several TOOL_ARGS);
 * a call whose head (name, start of the arguments) was streamed and that then breaks
 * off or turns malformed still ends with TOOL_END, its arguments as far as they went,
 * and anything after them in the section as text.
 *
 * Reasoning is the text between <think> and </think> at the start of the output (or from
 * the start, when the prompt already opened the block: in_reasoning); the newlines right
 * inside the tags and right after </think> are dropped, as the chat templates that
 * render reasoning_content back write them. Tool calls follow the model's native format
 * (a tool_format_t: <tool_call> JSON, a JSON answer, a pythonic call list, a tool_code
 * fence; docs/API.md),
 * chosen from the chat template or by name. A call is reported once it is complete and
 * valid (its arguments are the model's own bytes, so a client sending them back renders
 * the same prompt); a call that is malformed before its arguments begin is reported as
 * the text it was, never dropped and never an error. Whitespace between consecutive calls is dropped.
 *
 * Invariants: the concatenation of every TEXT, REASONING and (re-rendered) tool call is
 * the input minus the markers and the dropped whitespace; events never split a UTF-8
 * character that the input did not split (markers are ASCII); the parser holds back only
 * a suffix that may still become a marker, and finish releases it. The result does not
 * depend on how the input was cut into pieces (tests/server/test_output_parser.c and
 * fuzz/fuzz_output_parser.c check this).
 *
 * Thread-safety: a parser is used by one thread at a time; formats are immutable tables.
 * Cost: linear in the text (each byte is scanned a bounded number of times, plus one
 * JSON parse per call).
 */
#ifndef CAIRN_SERVER_OUTPUT_H
#define CAIRN_SERVER_OUTPUT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "cairn/common.h"

typedef enum {
    OUT_TEXT = 0,       /* answer text */
    OUT_REASONING = 1,  /* reasoning text (the <think> block) */
    OUT_TOOL_BEGIN = 2, /* a tool call starts: text = its function name */
    OUT_TOOL_ARGS = 3,  /* a fragment of its arguments (JSON text) */
    OUT_TOOL_END = 4,   /* the call is complete */
} out_kind_t;

typedef struct {
    out_kind_t kind;
    int tool;           /* TOOL_*: the call's index within the choice, from 0 */
    const char *text;   /* not NUL-terminated; valid during the callback only */
    size_t len;
} out_event_t;

/* Receives one event; a non-zero return stops the parser and is returned by feed/finish. */
typedef int (*out_emit_fn)(void *ctx, const out_event_t *ev);

/* ---- Tool-call formats --------------------------------------------------------------- */

/*
 * A native tool-call format. A call section starts at `open` (or, when open_at_start is
 * set, at the first non-space text of the answer if it starts with one of `starts`) and
 * ends at `close` (NULL: at the end of the output). parse turns a complete section body
 * into calls through emit (TOOL_BEGIN/ARGS/END with tool = first, first+1, ...) and
 * returns how many, or CAIRN_EFORMAT when the body is not a valid call list (then nothing
 * was emitted), or the callback's code. tools is the request's tool list (OpenAI chat
 * shape, possibly NULL), for formats whose argument values need the schema's types.
 *
 * stream_json: sections are one {"name": ..., "arguments": {...}} object (with `close`),
 * and the parser streams it: once the name and the opening of the arguments object are
 * in, TOOL_BEGIN goes out and the arguments follow as they arrive (their JSON structure
 * tracked, so a close marker inside a string does not end them); sections that do not
 * start that way are settled whole by parse.
 *
 * stream_xml: sections are <function=NAME> <parameter=KEY>VALUE</parameter>...
 * </function> (tool_qwen3_coder.c), streamed a parameter at a time: TOOL_BEGIN once the
 * function tag is in, then `{"KEY":VALUE` and `,"KEY":VALUE` as each parameter closes
 * (typed by the request's schema), `}` at </function> (or at the close marker, or where
 * the section stops being parameters: what follows is text; or at the end of the
 * output: an unfinished parameter is text).
 */
typedef struct tool_format {
    const char *name;                  /* "hermes", "qwen3_coder", "llama3_json", ... */
    const char *template_marker;       /* a chat template containing this uses the format */
    const char *open, *close;          /* section markers (close NULL: end of output) */
    bool open_at_start;                /* sections open only at the start of the answer */
    bool stream_json;                  /* stream JSON arguments (see above) */
    bool stream_xml;                   /* stream XML parameters (see above) */
    const char *const *starts;         /* open_at_start: prefixes that open a section */
    int (*parse)(const char *body, size_t len, int first, const cJSON *tools, out_emit_fn emit,
                 void *ctx);
} tool_format_t;

/* The known formats, NULL-terminated, in template-detection order. */
extern const tool_format_t *const tool_formats[];

/* The format called name, or NULL. */
const tool_format_t *tool_format_find(const char *name);

/* The format a chat template's source implies (its template_marker), or NULL. */
const tool_format_t *tool_format_detect(const char *template_src);

/* Whether a chat template's source renders reasoning as a <think> block. */
bool output_template_reasons(const char *template_src);

/* ---- The parser ---------------------------------------------------------------------- */

typedef struct output_parser output_parser_t;

typedef struct {
    bool reasoning;             /* split a leading <think>...</think> block */
    bool in_reasoning;          /* the prompt opened <think>: the output starts inside it */
    const tool_format_t *tools; /* NULL: no tool-call parsing */
    const cJSON *tool_schemas;  /* the request's tools (OpenAI chat shape) or NULL; borrowed,
                                 * must outlive the parser */
} output_options_t;

/* Creates a parser. Errors: CAIRN_EINVAL (NULL out), CAIRN_ENOMEM. */
int output_parser_create(const output_options_t *o, output_parser_t **out);
void output_parser_destroy(output_parser_t *p);

/* Feeds text[0..len). Returns 0, CAIRN_ENOMEM (the parser is then unusable), or the
 * callback's non-zero code. */
int output_parser_feed(output_parser_t *p, const char *text, size_t len, out_emit_fn emit,
                       void *ctx);

/* Ends the output: releases held text, settles an unfinished block (reasoning stays
 * reasoning; an unfinished call section is parsed as is, else reported as text). Further
 * feeds are CAIRN_ESTATE. Returns as feed. */
int output_parser_finish(output_parser_t *p, out_emit_fn emit, void *ctx);

/* Tool calls reported so far. */
int output_parser_tool_calls(const output_parser_t *p);

/* ---- Shared by the formats (output_json.c) ------------------------------------------- */

/*
 * Emits one call: name, then its arguments as one fragment, then the end. args may be
 * NULL (no arguments: "{}").
 */
int output_emit_call(int index, const char *name, const char *args, size_t args_len,
                     out_emit_fn emit, void *ctx);

/*
 * One call object {"name": ..., "arguments" | "parameters": ...} in s[0..n): validated,
 * and emitted as call `index` when emit_it. Returns 0, CAIRN_EFORMAT (not such an
 * object; nothing emitted), CAIRN_ENOMEM or the callback's code.
 */
int output_json_call(const char *s, size_t n, int index, bool emit_it, out_emit_fn emit,
                     void *ctx);

/* ---- XML calls (tool_qwen3_coder.c) ------------------------------------------------ */

/* Whether text could still become a match (WAIT), is one (YES) or cannot be (NO). */
typedef enum { OUT_MATCH_WAIT = 0, OUT_MATCH_NO = 1, OUT_MATCH_YES = 2 } out_match_t;

/* Longest function or parameter name, plus one. */
#define OUT_NAME_MAX 256

/* Spaces, then "<function=NAME>" in s[0..n): the name at s + *name_at (*name_len bytes),
 * *end past the '>'. */
out_match_t output_xml_function(const char *s, size_t n, size_t *name_at, size_t *name_len,
                                size_t *end);

/* Spaces, then "<parameter=KEY>VALUE</parameter>" in s[0..n): the key and the value (one
 * newline at each end dropped) as offsets into s, *end past the close tag. */
out_match_t output_xml_parameter(const char *s, size_t n, size_t *key_at, size_t *key_len,
                                 size_t *val_at, size_t *val_len, size_t *end);

/* Whether s[0..n) is spaces then "</function>" (*end past it); *wait when more text could
 * still make it so. */
bool output_xml_function_end(const char *s, size_t n, size_t *end, bool *wait);

/* Appends `"KEY":VALUE` to out: the value typed by function fn's schema in tools (OpenAI
 * chat shape, may be NULL; see tool_qwen3_coder.c). Returns 0 or CAIRN_ENOMEM. */
struct api_buf_s;
int output_xml_member(const cJSON *tools, const char *fn, const char *key, size_t kl,
                      const char *v, size_t vn, struct api_buf_s *out);

/* A pythonic call list ("[f(a=1), g()]") or one call ("f(a=1)") in body[0..len): the
 * calls, or CAIRN_EFORMAT (tool_pythonic.c; the tool_code format uses it too). */
int output_pythonic_parse(const char *body, size_t len, int first, const cJSON *tools,
                          out_emit_fn emit, void *ctx);

/*
 * The raw bytes of member `key` of the JSON object text s[0..n) (which must be a valid
 * JSON object): *at and *len, spaces trimmed. Returns false when absent.
 */
bool output_json_member(const char *s, size_t n, const char *key, const char **at,
                        size_t *len);

#endif
