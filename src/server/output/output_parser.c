/*
 * output_parser.c — the streaming split of one choice's text into answer, reasoning and
 * tool calls (output.h).
 *
 * Model. Input accumulates in `buf`; each feed consumes from its front as far as the
 * state allows and keeps the rest (a possible marker prefix, a call section not closed
 * yet, newlines that may precede </think>). The states, in the order the text can take
 * them:
 *
 *   START ──"<think>"──> REASON_NL ──> REASON ──"</think>"──> ANSWER_NL ──> ANSWER_START
 *     └────────── anything else ─────────────────────────────────────────────┘   │
 *                                  ANSWER <──"close" / parsed── CALL <──"open"───┘
 *
 * START decides whether a reasoning block opens; *_NL drop the newlines after a tag;
 * ANSWER_START decides whether the answer opens with a call section (formats whose calls
 * are the whole answer, like llama3_json); ANSWER emits text up to the next call's
 * open marker; CALL buffers the section until its close marker (or the end) and has the
 * format parse it, or, for formats that stream (output.h), begins the call and moves to
 * CALL_ARGS -> CALL_TAIL (JSON arguments) or XML_PARAMS -> XML_TAIL (XML parameters).
 * Invariant: bytes leave buf exactly once, as an event (XML parameters as the JSON they
 * convert to) or as a dropped marker/whitespace.
 *
 * Thread-safety: one thread per parser (output.h).
 */
#include <string.h>

#include "server/api/api.h"
#include "server/output/output.h"
#include "util/json.h"

typedef enum {
    ST_START = 0,
    ST_REASON_NL,
    ST_REASON,
    ST_ANSWER_NL,
    ST_ANSWER_START,
    ST_ANSWER,
    ST_CALL,
    ST_CALL_ARGS,   /* stream_json: the arguments are streaming */
    ST_CALL_TAIL,   /* stream_json: the arguments closed; the section's rest */
    ST_XML_PARAMS,  /* stream_xml: between parameters of a streaming call */
    ST_XML_TAIL,    /* stream_xml: the call ended; the section's rest */
} out_state_t;

struct output_parser {
    output_options_t o;
    out_state_t st;
    char *buf;          /* [len] input not consumed yet */
    size_t len, cap;
    int n_tools;
    bool after_call;    /* in ANSWER right after a call: whitespace is held, then dropped */
    bool finished;
    /* ST_CALL_ARGS: the JSON scanner's state over the streamed arguments. */
    int depth;
    bool in_string, escaped;
    /* ST_XML_*: the streaming call's function name and parameters so far. */
    char fn[OUT_NAME_MAX];
    int n_params;
};

static const char THINK_OPEN[] = "<think>";
static const char THINK_CLOSE[] = "</think>";

int output_parser_create(const output_options_t *o, output_parser_t **out)
{
    if (!out || !o)
        return CAIRN_EINVAL;
    *out = NULL;
    output_parser_t *p = cairn_calloc(1, sizeof *p);
    if (!p)
        return CAIRN_ENOMEM;
    p->o = *o;
    p->st = o->in_reasoning ? ST_REASON_NL : o->reasoning ? ST_START : ST_ANSWER_START;
    *out = p;
    return 0;
}

void output_parser_destroy(output_parser_t *p)
{
    if (!p)
        return;
    cairn_free(p->buf);
    cairn_free(p);
}

int output_parser_tool_calls(const output_parser_t *p) { return p->n_tools; }

/* ---- Helpers ------------------------------------------------------------------------ */

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static bool all_space(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_space(s[i]))
            return false;
    return true;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of marker. */
static size_t partial_suffix(const char *s, size_t n, const char *marker)
{
    size_t m = strlen(marker);
    size_t k = n < m - 1 ? n : m - 1;
    for (; k > 0; k--)
        if (!memcmp(s + n - k, marker, k))
            return k;
    return 0;
}

/* Whether s[0..n) is a proper prefix of marker (more input could complete it). */
static bool proper_prefix(const char *s, size_t n, const char *marker)
{
    size_t m = strlen(marker);
    return n < m && (n == 0 || !memcmp(s, marker, n));
}

static const char *find(const char *s, size_t n, const char *marker)
{
    return n ? memmem(s, n, marker, strlen(marker)) : NULL;
}

static void consume(output_parser_t *p, size_t n)
{
    if (n == 0)
        return;
    memmove(p->buf, p->buf + n, p->len - n);
    p->len -= n;
}

static int emit_kind(out_emit_fn emit, void *ctx, out_kind_t k, const char *s, size_t n)
{
    if (n == 0)
        return 0;
    out_event_t ev = {.kind = k, .tool = 0, .text = s, .len = n};
    return emit(ctx, &ev);
}

/* Emits answer text, holding whitespace right after a call (dropped before the next call
 * or at the end). */
static int emit_answer(output_parser_t *p, const char *s, size_t n, out_emit_fn emit,
                       void *ctx)
{
    if (p->after_call && all_space(s, n))
        return 0;
    p->after_call = false;
    return emit_kind(emit, ctx, OUT_TEXT, s, n);
}

/* A finished call section: the format's calls, or the section as the text it was. */
static int settle_call(output_parser_t *p, const char *body, size_t n, bool closed,
                       out_emit_fn emit, void *ctx)
{
    const tool_format_t *f = p->o.tools;
    int got = f->parse(body, n, p->n_tools, p->o.tool_schemas, emit, ctx);
    if (got > 0) {
        p->n_tools += got;
        p->after_call = true;
        return 0;
    }
    if (got != CAIRN_EFORMAT && got != 0)
        return got;
    p->after_call = false;
    int rc = 0;
    if (f->open && !f->open_at_start)
        rc = emit_kind(emit, ctx, OUT_TEXT, f->open, strlen(f->open));
    if (!rc)
        rc = emit_kind(emit, ctx, OUT_TEXT, body, n);
    if (!rc && closed && f->close)
        rc = emit_kind(emit, ctx, OUT_TEXT, f->close, strlen(f->close));
    return rc;
}

/* ---- Streamed JSON calls ----------------------------------------------------------- */

typedef enum { HEAD_WAIT, HEAD_NO, HEAD_YES } head_t;

/* Skips spaces from *i; false when the buffer ends there. */
static bool ws_at(const char *s, size_t n, size_t *i)
{
    while (*i < n && is_space(s[*i]))
        (*i)++;
    return *i < n;
}

/* Whether s[i..n) starts with lit (HEAD_YES, *i advanced), could still (HEAD_WAIT) or not. */
static head_t lit_at(const char *s, size_t n, size_t *i, const char *lit)
{
    size_t l = strlen(lit), k = 0;
    while (k < l && *i + k < n && s[*i + k] == lit[k])
        k++;
    if (k == l) {
        *i += l;
        return HEAD_YES;
    }
    return *i + k == n ? HEAD_WAIT : HEAD_NO;
}

/*
 * The head of a streamed call in s[0..n): ws '{' ws "name" ws ':' ws STRING ws ',' ws
 * ("arguments"|"parameters") ws ':' ws '{'. HEAD_YES: the name's string literal at
 * *name_at (*name_len bytes), the arguments' '{' at *args_at.
 */
static head_t call_head(const char *s, size_t n, size_t *name_at, size_t *name_len, size_t *args_at)
{
    size_t i = 0;
    head_t h;
#define STEP(expr)                       \
    do {                                 \
        if (!ws_at(s, n, &i))            \
            return HEAD_WAIT;            \
        if ((h = (expr)) != HEAD_YES)    \
            return h;                    \
    } while (0)
    STEP(lit_at(s, n, &i, "{"));
    STEP(lit_at(s, n, &i, "\"name\""));
    STEP(lit_at(s, n, &i, ":"));
    if (!ws_at(s, n, &i))
        return HEAD_WAIT;
    if (s[i] != '"')
        return HEAD_NO;
    size_t b = i++;
    for (; i < n && s[i] != '"'; i++)
        if (s[i] == '\\')
            i++;
    if (i >= n)
        return HEAD_WAIT;
    *name_at = b;
    *name_len = ++i - b;
    STEP(lit_at(s, n, &i, ","));
    if (!ws_at(s, n, &i))
        return HEAD_WAIT;
    size_t save = i;
    h = lit_at(s, n, &i, "\"arguments\"");
    if (h == HEAD_NO) {
        i = save;
        h = lit_at(s, n, &i, "\"parameters\"");
    }
    if (h != HEAD_YES)
        return h;
    STEP(lit_at(s, n, &i, ":"));
    if (!ws_at(s, n, &i))
        return HEAD_WAIT;
    if (s[i] != '{')
        return HEAD_NO;
    *args_at = i;
    return HEAD_YES;
#undef STEP
}

/* Emits a TOOL_ARGS fragment of the current call. */
static int emit_args(output_parser_t *p, const char *s, size_t n, out_emit_fn emit, void *ctx)
{
    if (n == 0)
        return 0;
    out_event_t ev = {.kind = OUT_TOOL_ARGS, .tool = p->n_tools, .text = s, .len = n};
    return emit(ctx, &ev);
}

/* Ends the current streamed call. */
static int end_call(output_parser_t *p, out_emit_fn emit, void *ctx)
{
    out_event_t ev = {.kind = OUT_TOOL_END, .tool = p->n_tools, .text = "", .len = 0};
    p->n_tools++;
    p->after_call = true;
    return emit(ctx, &ev);
}

/* ST_CALL of a stream_json format: waits for the head, then begins the call. Returns
 * 1 when the section is not a streamable call (the caller settles it whole). */
static int stream_head(output_parser_t *p, bool final, out_emit_fn emit, void *ctx, bool *more)
{
    const tool_format_t *f = p->o.tools;
    const char *m = find(p->buf, p->len, f->close);
    size_t limit = m ? (size_t)(m - p->buf) : p->len;
    size_t name_at = 0, name_len = 0, args_at = 0;
    head_t h = call_head(p->buf, limit, &name_at, &name_len, &args_at);
    if (h == HEAD_NO || (h == HEAD_WAIT && (m || final)))
        return 1;
    if (h == HEAD_WAIT)
        return 0;
    cJSON *name = NULL;
    int rc = cairn_json_parse(p->buf + name_at, name_len, NULL, &name, NULL);
    if (rc == CAIRN_ENOMEM)
        return rc;
    if (rc || !cJSON_IsString(name) || !name->valuestring[0]) {
        cJSON_Delete(name);
        return 1;
    }
    out_event_t ev = {.kind = OUT_TOOL_BEGIN, .tool = p->n_tools, .text = name->valuestring,
                      .len = strlen(name->valuestring)};
    rc = emit(ctx, &ev);
    cJSON_Delete(name);
    consume(p, args_at);
    p->depth = 0;
    p->in_string = p->escaped = false;
    p->st = ST_CALL_ARGS;
    *more = true;
    return rc;
}

/* ST_CALL_ARGS: streams the arguments up to where their object closes. */
static int stream_args(output_parser_t *p, bool final, out_emit_fn emit, void *ctx, bool *more)
{
    size_t i = 0;
    bool closed = false;
    for (; i < p->len && !closed; i++) {
        char c = p->buf[i];
        if (p->in_string) {
            if (p->escaped)
                p->escaped = false;
            else if (c == '\\')
                p->escaped = true;
            else if (c == '"')
                p->in_string = false;
        } else if (c == '"') {
            p->in_string = true;
        } else if (c == '{' || c == '[') {
            p->depth++;
        } else if ((c == '}' || c == ']') && --p->depth == 0) {
            closed = true;
        }
    }
    int rc = emit_args(p, p->buf, i, emit, ctx);
    consume(p, i);
    if (rc)
        return rc;
    if (closed) {
        p->st = ST_CALL_TAIL;
        *more = true;
    } else if (final) {
        rc = end_call(p, emit, ctx); /* cut off: the arguments as far as they went */
        p->st = ST_ANSWER;
    }
    return rc;
}

/* ST_CALL_TAIL: the object's '}' and the close marker end the call; anything else in the
 * section is kept as text after it. */
static int stream_tail(output_parser_t *p, bool final, out_emit_fn emit, void *ctx, bool *more)
{
    const tool_format_t *f = p->o.tools;
    const char *m = find(p->buf, p->len, f->close);
    if (!m && !final)
        return 0;
    size_t k = m ? (size_t)(m - p->buf) : p->len;
    size_t i = 0;
    ws_at(p->buf, k, &i);
    if (i < k && p->buf[i] == '}')
        i++;
    ws_at(p->buf, k, &i);
    int rc = end_call(p, emit, ctx);
    if (!rc && i < k) { /* junk after the object: the text it was */
        p->after_call = false;
        rc = emit_kind(emit, ctx, OUT_TEXT, p->buf + i, k - i);
    }
    consume(p, m ? k + strlen(f->close) : k);
    p->st = ST_ANSWER;
    *more = true;
    return rc;
}

/* ---- Streamed XML calls ------------------------------------------------------------ */

/* ST_CALL of a stream_xml format: waits for the function tag, then begins the call.
 * Returns 1 when the section is not an XML call (the caller settles it whole). */
static int xml_head(output_parser_t *p, bool final, out_emit_fn emit, void *ctx, bool *more)
{
    const tool_format_t *f = p->o.tools;
    const char *m = find(p->buf, p->len, f->close);
    size_t limit = m ? (size_t)(m - p->buf) : p->len;
    size_t at = 0, len = 0, end = 0;
    out_match_t h = output_xml_function(p->buf, limit, &at, &len, &end);
    if (h == OUT_MATCH_NO || (h == OUT_MATCH_WAIT && (m || final)))
        return 1;
    if (h == OUT_MATCH_WAIT)
        return 0;
    memcpy(p->fn, p->buf + at, len);
    p->fn[len] = '\0';
    out_event_t ev = {.kind = OUT_TOOL_BEGIN, .tool = p->n_tools, .text = p->fn, .len = len};
    int rc = emit(ctx, &ev);
    consume(p, end);
    p->n_params = 0;
    p->st = ST_XML_PARAMS;
    *more = true;
    return rc;
}

/* Closes the streaming XML call's arguments object and ends the call. */
static int xml_end_call(output_parser_t *p, out_emit_fn emit, void *ctx)
{
    int rc = emit_args(p, p->n_params ? "}" : "{}", p->n_params ? 1 : 2, emit, ctx);
    return rc ? rc : end_call(p, emit, ctx);
}

/* ST_XML_PARAMS: the next parameter, </function>, the close marker, or the end. */
static int xml_params(output_parser_t *p, bool final, out_emit_fn emit, void *ctx, bool *more)
{
    const tool_format_t *f = p->o.tools;
    size_t end = 0;
    bool fn_wait = false;
    int rc;
    if (output_xml_function_end(p->buf, p->len, &end, &fn_wait)) {
        rc = xml_end_call(p, emit, ctx);
        consume(p, end);
        p->st = ST_XML_TAIL;
        *more = true;
        return rc;
    }
    size_t i = 0, cl = strlen(f->close);
    while (i < p->len && is_space(p->buf[i]))
        i++;
    if (p->len - i >= cl && !memcmp(p->buf + i, f->close, cl)) { /* no </function> */
        rc = xml_end_call(p, emit, ctx);
        consume(p, i + cl);
        p->st = ST_ANSWER;
        *more = true;
        return rc;
    }
    bool close_wait = proper_prefix(p->buf + i, p->len - i, f->close);
    size_t ka = 0, kl = 0, va = 0, vl = 0;
    out_match_t m = output_xml_parameter(p->buf, p->len, &ka, &kl, &va, &vl, &end);
    if (m == OUT_MATCH_YES) {
        api_buf_t frag = {0};
        rc = api_buf_append(&frag, p->n_params ? "," : "{", 1);
        if (!rc)
            rc = output_xml_member(p->o.tool_schemas, p->fn, p->buf + ka, kl, p->buf + va, vl,
                                   &frag);
        if (!rc)
            rc = emit_args(p, frag.p, frag.len, emit, ctx);
        api_buf_free(&frag);
        p->n_params++;
        consume(p, end);
        *more = true;
        return rc;
    }
    if (!final && (m == OUT_MATCH_WAIT || fn_wait || close_wait))
        return 0;
    /* Not a parameter, or the output ended inside one: the call ends, the rest is text. */
    rc = xml_end_call(p, emit, ctx);
    p->st = ST_XML_TAIL;
    *more = true;
    return rc;
}

/* ST_XML_TAIL: up to the close marker; anything but spaces there is text after the call. */
static int xml_tail(output_parser_t *p, bool final, out_emit_fn emit, void *ctx, bool *more)
{
    const tool_format_t *f = p->o.tools;
    const char *m = find(p->buf, p->len, f->close);
    if (!m && !final)
        return 0;
    size_t k = m ? (size_t)(m - p->buf) : p->len;
    size_t i = 0;
    ws_at(p->buf, k, &i);
    int rc = 0;
    if (i < k) {
        p->after_call = false;
        rc = emit_kind(emit, ctx, OUT_TEXT, p->buf + i, k - i);
    }
    consume(p, m ? k + strlen(f->close) : k);
    p->st = ST_ANSWER;
    *more = true;
    return rc;
}

/* ---- The state machine -------------------------------------------------------------- */

/* Consumes what it can of buf; `final`: no more input will come. Returns 0 or an error;
 * *more is false when the state cannot advance without more input. */
static int step(output_parser_t *p, bool final, out_emit_fn emit, void *ctx, bool *more)
{
    const tool_format_t *f = p->o.tools;
    *more = false;
    int rc = 0;
    switch (p->st) {
    case ST_START: {
        if (p->len >= sizeof THINK_OPEN - 1 && !memcmp(p->buf, THINK_OPEN, sizeof THINK_OPEN - 1)) {
            consume(p, sizeof THINK_OPEN - 1);
            p->st = ST_REASON_NL;
        } else if (!final && proper_prefix(p->buf, p->len, THINK_OPEN)) {
            return 0; /* wait */
        } else {
            p->st = ST_ANSWER_START;
        }
        *more = true;
        return 0;
    }
    case ST_REASON_NL:
    case ST_ANSWER_NL: {
        size_t k = 0;
        while (k < p->len && (p->buf[k] == '\n' || p->buf[k] == '\r'))
            k++;
        consume(p, k);
        if (p->len == 0 && !final)
            return 0;
        p->st = p->st == ST_REASON_NL ? ST_REASON : ST_ANSWER_START;
        *more = true;
        return 0;
    }
    case ST_REASON: {
        const char *m = find(p->buf, p->len, THINK_CLOSE);
        if (m) {
            size_t k = (size_t)(m - p->buf);
            size_t t = k;
            while (t > 0 && (p->buf[t - 1] == '\n' || p->buf[t - 1] == '\r'))
                t--;
            rc = emit_kind(emit, ctx, OUT_REASONING, p->buf, t);
            consume(p, k + sizeof THINK_CLOSE - 1);
            p->st = ST_ANSWER_NL;
            *more = true;
            return rc;
        }
        size_t k = final ? p->len : p->len - partial_suffix(p->buf, p->len, THINK_CLOSE);
        while (!final && k > 0 && (p->buf[k - 1] == '\n' || p->buf[k - 1] == '\r'))
            k--;
        rc = emit_kind(emit, ctx, OUT_REASONING, p->buf, k);
        consume(p, k);
        return rc;
    }
    case ST_ANSWER_START: {
        if (!f || !f->open_at_start) {
            p->st = ST_ANSWER;
            *more = true;
            return 0;
        }
        size_t k = 0;
        while (k < p->len && is_space(p->buf[k]))
            k++;
        const char *s = p->buf + k;
        size_t n = p->len - k;
        if (n == 0 && !final)
            return 0;
        for (const char *const *st = f->starts; *st; st++) {
            size_t sl = strlen(*st);
            if (n >= sl && !memcmp(s, *st, sl)) {
                consume(p, k);
                p->st = ST_CALL;
                *more = true;
                return 0;
            }
            if (!final && proper_prefix(s, n, *st))
                return 0;
        }
        p->st = ST_ANSWER;
        *more = true;
        return 0;
    }
    case ST_ANSWER: {
        if (!f || f->open_at_start) {
            rc = emit_answer(p, p->buf, p->len, emit, ctx);
            consume(p, p->len);
            return rc;
        }
        const char *m = find(p->buf, p->len, f->open);
        if (m) {
            size_t k = (size_t)(m - p->buf);
            rc = emit_answer(p, p->buf, k, emit, ctx);
            consume(p, k + strlen(f->open));
            p->st = ST_CALL;
            *more = true;
            return rc;
        }
        size_t k = final ? p->len : p->len - partial_suffix(p->buf, p->len, f->open);
        if (p->after_call && all_space(p->buf, k) && !final)
            return 0; /* keep holding: a call may follow */
        rc = emit_answer(p, p->buf, k, emit, ctx);
        consume(p, k);
        return rc;
    }
    case ST_CALL_ARGS:
        return stream_args(p, final, emit, ctx, more);
    case ST_CALL_TAIL:
        return stream_tail(p, final, emit, ctx, more);
    case ST_XML_PARAMS:
        return xml_params(p, final, emit, ctx, more);
    case ST_XML_TAIL:
        return xml_tail(p, final, emit, ctx, more);
    case ST_CALL: {
        if (f->stream_json) {
            rc = stream_head(p, final, emit, ctx, more);
            if (rc != 1)
                return rc; /* streaming, waiting, or an error */
        }
        if (f->stream_xml) {
            rc = xml_head(p, final, emit, ctx, more);
            if (rc != 1)
                return rc;
        }
        const char *m = f->close ? find(p->buf, p->len, f->close) : NULL;
        if (m) {
            size_t k = (size_t)(m - p->buf);
            rc = settle_call(p, p->buf, k, true, emit, ctx);
            consume(p, k + strlen(f->close));
            p->st = ST_ANSWER;
            *more = true;
            return rc;
        }
        if (!final)
            return 0;
        rc = settle_call(p, p->buf, p->len, false, emit, ctx);
        consume(p, p->len);
        p->st = ST_ANSWER;
        return rc;
    }
    }
    return CAIRN_EINVAL; /* not reached: every state is handled above */
}

static int run(output_parser_t *p, bool final, out_emit_fn emit, void *ctx)
{
    bool more = true;
    while (more) {
        int rc = step(p, final, emit, ctx, &more);
        if (rc)
            return rc;
    }
    return 0;
}

int output_parser_feed(output_parser_t *p, const char *text, size_t len, out_emit_fn emit,
                       void *ctx)
{
    if (p->finished)
        return CAIRN_ESTATE;
    if (len == 0)
        return 0;
    if (p->len + len > p->cap) {
        size_t cap = p->cap ? p->cap : 64;
        while (cap < p->len + len)
            cap *= 2;
        char *b = cairn_realloc(p->buf, cap);
        if (!b)
            return CAIRN_ENOMEM;
        p->buf = b;
        p->cap = cap;
    }
    memcpy(p->buf + p->len, text, len);
    p->len += len;
    return run(p, false, emit, ctx);
}

int output_parser_finish(output_parser_t *p, out_emit_fn emit, void *ctx)
{
    if (p->finished)
        return CAIRN_ESTATE;
    p->finished = true;
    return run(p, true, emit, ctx);
}
