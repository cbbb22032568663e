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
 * format parse it. Invariant: bytes leave buf exactly once, as an event or as a dropped
 * marker/whitespace.
 *
 * Thread-safety: one thread per parser (output.h).
 */
#include <string.h>

#include "server/output/output.h"

typedef enum {
    ST_START = 0,
    ST_REASON_NL,
    ST_REASON,
    ST_ANSWER_NL,
    ST_ANSWER_START,
    ST_ANSWER,
    ST_CALL,
} out_state_t;

struct output_parser {
    output_options_t o;
    out_state_t st;
    char *buf;          /* [len] input not consumed yet */
    size_t len, cap;
    int n_tools;
    bool after_call;    /* in ANSWER right after a call: whitespace is held, then dropped */
    bool finished;
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
    return n < m && !memcmp(s, marker, n);
}

static const char *find(const char *s, size_t n, const char *marker)
{
    return memmem(s, n, marker, strlen(marker));
}

static void consume(output_parser_t *p, size_t n)
{
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
    int got = f->parse(body, n, p->n_tools, emit, ctx);
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
    case ST_CALL: {
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
