/*
 * lexer.c — turns chat-template source into tokens, applying Jinja2's whitespace control
 * exactly as transformers configures it (trim_blocks=True, lstrip_blocks=True).
 *
 * Rules (jinja2/lexer.py semantics):
 *  - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` strip all
 *    whitespace after it.
 *  - lstrip_blocks: before `{%` or `{#` (not `{{`) without a `+`/`-` modifier, spaces and
 *    tabs between the start of the line and the tag are removed. "Start of the line" is a
 *    newline in the preceding text, or the start of the text when the previous token ended
 *    with a newline (or it is the start of the template).
 *  - trim_blocks: after `%}` or `#}` (not `}}`, not `+%}`), one newline is removed.
 *  - Inside a tag, end delimiters are not recognised while brackets are open, so
 *    `{{ {'a': 1}}}` works.
 *  - `{% raw %}...{% endraw %}` yields its content as text.
 * Invariants: TK_TEXT and TK_NAME/TK_OP tokens point into the (arena-owned) source;
 * string literals are decoded into the arena. Thread-safety: pure function of its input.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/template_impl.h"
#include "util/util.h"

typedef struct {
    tarena *a;
    const char *src;
    size_t n;
    ttoks *toks;
    char *err;
    size_t errlen;
    /* line/column cursor: offsets are queried in increasing order */
    size_t loc_off;
    int loc_line, loc_col;
} lexer;

static void locate(lexer *L, size_t off, int *line, int *col)
{
    if (off < L->loc_off) {
        L->loc_off = 0;
        L->loc_line = 1;
        L->loc_col = 1;
    }
    for (; L->loc_off < off && L->loc_off < L->n; L->loc_off++) {
        if (L->src[L->loc_off] == '\n') {
            L->loc_line++;
            L->loc_col = 1;
        } else {
            L->loc_col++;
        }
    }
    *line = L->loc_line;
    *col = L->loc_col;
}

static int push(lexer *L, ttok_type type, size_t off, const char *s, size_t n, ttok **out)
{
    ttoks *t = L->toks;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        ttok *v = cairn_realloc(t->v, cap * sizeof(ttok));
        if (!v)
            return CAIRN_ENOMEM;
        t->v = v;
        t->cap = cap;
    }
    ttok *k = &t->v[t->n++];
    memset(k, 0, sizeof *k);
    k->type = type;
    k->s = s;
    k->n = n;
    locate(L, off, &k->line, &k->col);
    if (out)
        *out = k;
    return 0;
}

static int fail(lexer *L, size_t off, const char *what)
{
    int line, col;
    locate(L, off, &line, &col);
    terr(L->err, L->errlen, "syntax error at line %d, column %d: %s", line, col, what);
    return CAIRN_ETEMPLATE;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static size_t put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decodes a string literal body with Python's escapes; unknown escapes stay verbatim. */
static int lex_string(lexer *L, size_t *pos)
{
    size_t start = *pos;
    char q = L->src[start];
    size_t i = start + 1;
    while (i < L->n && L->src[i] != q) {
        if (L->src[i] == '\\' && i + 1 < L->n)
            i++;
        i++;
    }
    if (i >= L->n)
        return fail(L, start, "unterminated string");
    size_t end = i; /* closing quote */
    char *o = tarena_alloc(L->a, end - start + 1);
    if (!o)
        return CAIRN_ENOMEM;
    size_t k = 0;
    for (i = start + 1; i < end; i++) {
        char c = L->src[i];
        if (c != '\\') {
            o[k++] = c;
            continue;
        }
        char e = L->src[++i];
        int digits = 0;
        switch (e) {
        case 'n': o[k++] = '\n'; break;
        case 't': o[k++] = '\t'; break;
        case 'r': o[k++] = '\r'; break;
        case '\\': o[k++] = '\\'; break;
        case '\'': o[k++] = '\''; break;
        case '"': o[k++] = '"'; break;
        case 'a': o[k++] = '\a'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'v': o[k++] = '\v'; break;
        case '\n': break; /* line continuation */
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                uint32_t v = 0;
                int m = 0;
                while (m < 3 && i < end && L->src[i] >= '0' && L->src[i] <= '7') {
                    v = v * 8 + (uint32_t)(L->src[i] - '0');
                    i++;
                    m++;
                }
                i--;
                k += put_utf8(o + k, v);
            } else {
                o[k++] = '\\';
                o[k++] = e;
            }
        }
        if (digits) {
            uint32_t v = 0;
            for (int m = 0; m < digits; m++) {
                int h = i + 1 + (size_t)m < end ? cairn_hexval(L->src[i + 1 + (size_t)m]) : -1;
                if (h < 0)
                    return fail(L, i - 1, "truncated \\x/\\u escape in string");
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF)
                return fail(L, i - 1, "escape out of Unicode range");
            i += (size_t)digits;
            k += put_utf8(o + k, v); /* never longer than the escape it replaces */
        }
    }
    ttok *t;
    int rc = push(L, TK_STRING, start, o, k, &t);
    *pos = end + 1;
    return rc;
}

static int lex_number(lexer *L, size_t *pos)
{
    size_t start = *pos, i = start;
    char buf[64];
    size_t k = 0;
    bool is_float = false;
    while (i < L->n && (is_digit(L->src[i]) || (L->src[i] == '_' && i + 1 < L->n && is_digit(L->src[i + 1])))) {
        if (L->src[i] != '_' && k < sizeof buf - 1)
            buf[k++] = L->src[i];
        i++;
    }
    if (i + 1 < L->n && L->src[i] == '.' && is_digit(L->src[i + 1])) {
        is_float = true;
        buf[k < sizeof buf - 1 ? k++ : k] = '.';
        i++;
        while (i < L->n && (is_digit(L->src[i]) || (L->src[i] == '_' && i + 1 < L->n && is_digit(L->src[i + 1])))) {
            if (L->src[i] != '_' && k < sizeof buf - 1)
                buf[k++] = L->src[i];
            i++;
        }
    }
    if (i < L->n && (L->src[i] == 'e' || L->src[i] == 'E')) {
        size_t j = i + 1;
        if (j < L->n && (L->src[j] == '+' || L->src[j] == '-'))
            j++;
        if (j < L->n && is_digit(L->src[j])) {
            is_float = true;
            while (i < j && k < sizeof buf - 1)
                buf[k++] = L->src[i++];
            while (i < L->n && is_digit(L->src[i])) {
                if (k < sizeof buf - 1)
                    buf[k++] = L->src[i];
                i++;
            }
        }
    }
    buf[k] = '\0';
    ttok *t;
    int rc = push(L, is_float ? TK_FLOAT : TK_INT, start, L->src + start, i - start, &t);
    if (rc)
        return rc;
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        errno = 0;
        t->i = strtoll(buf, NULL, 10);
        if (errno == ERANGE || k >= sizeof buf - 1)
            return fail(L, start, "integer literal too large (Cairn's ints are 64-bit)");
    }
    *pos = i;
    return 0;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", "<=", ">="};
static const char OPS1[] = "+-/*%~[](){}<>=.:|,;";

/*
 * Lexes the inside of a `{{ }}` or `{% %}` tag starting at *pos, up to and including the
 * end delimiter. Sets *strip_after for `-}}`/`-%}` and *keep_nl for `+%}`.
 */
static int lex_tag(lexer *L, size_t *pos, bool block, bool *strip_after, bool *keep_nl)
{
    size_t i = *pos;
    int depth = 0;
    char endc = block ? '%' : '}';
    for (;;) {
        while (i < L->n && is_ws(L->src[i]))
            i++;
        if (i >= L->n)
            return fail(L, *pos, block ? "unclosed '{%' tag" : "unclosed '{{' tag");
        const char *s = L->src + i;
        size_t left = L->n - i;
        if (depth == 0) {
            size_t skip = 0;
            if (left >= 3 && (s[0] == '-' || s[0] == '+') && s[1] == endc && s[2] == '}') {
                *strip_after = s[0] == '-';
                *keep_nl = s[0] == '+';
                skip = 3;
            } else if (left >= 2 && s[0] == endc && s[1] == '}') {
                skip = 2;
            }
            if (skip) {
                int rc = push(L, block ? TK_BLOCK_END : TK_VAR_END, i, s, skip, NULL);
                *pos = i + skip;
                return rc;
            }
        }
        int rc;
        if (is_alpha(s[0])) {
            size_t j = i;
            while (j < L->n && (is_alpha(L->src[j]) || is_digit(L->src[j])))
                j++;
            rc = push(L, TK_NAME, i, s, j - i, NULL);
            i = j;
        } else if (is_digit(s[0])) {
            rc = lex_number(L, &i);
        } else if (s[0] == '\'' || s[0] == '"') {
            rc = lex_string(L, &i);
        } else {
            size_t len = 0;
            for (size_t k = 0; k < CAIRN_ARRAY_LEN(OPS2); k++)
                if (left >= 2 && s[0] == OPS2[k][0] && s[1] == OPS2[k][1])
                    len = 2;
            if (!len && strchr(OPS1, s[0]) && s[0] != '\0')
                len = 1;
            if (!len) {
                char what[48];
                snprintf(what, sizeof what, "unexpected character '%c'", s[0]);
                return fail(L, i, what);
            }
            if (s[0] == '(' || s[0] == '[' || s[0] == '{')
                depth++;
            else if ((s[0] == ')' || s[0] == ']' || s[0] == '}') && depth > 0)
                depth--;
            rc = push(L, TK_OP, i, s, len, NULL);
            i += len;
        }
        if (rc)
            return rc;
    }
}

/* Length of a `{% raw %}` / `{% endraw %}` tag at s (0 if it is not one). */
static size_t raw_tag(const char *s, size_t left, const char *word, char *mod_l, char *mod_r)
{
    if (left < 4 || s[0] != '{' || s[1] != '%')
        return 0;
    size_t i = 2;
    *mod_l = (s[i] == '-' || s[i] == '+') ? s[i++] : 0;
    while (i < left && is_ws(s[i]))
        i++;
    size_t wl = strlen(word);
    if (left - i < wl || memcmp(s + i, word, wl) != 0)
        return 0;
    i += wl;
    if (i < left && (is_alpha(s[i]) || is_digit(s[i])))
        return 0;
    while (i < left && is_ws(s[i]))
        i++;
    *mod_r = (i < left && (s[i] == '-' || s[i] == '+')) ? s[i++] : 0;
    if (left - i < 2 || s[i] != '%' || s[i + 1] != '}')
        return 0;
    return i + 2;
}

/* Text before a tag, after `-` stripping or lstrip_blocks. */
static int emit_text(lexer *L, size_t from, size_t to, char mod, bool lstrip, bool line_starting)
{
    const char *s = L->src;
    if (mod == '-') {
        while (to > from && is_ws(s[to - 1]))
            to--;
    } else if (mod != '+' && lstrip) {
        size_t l = to;
        while (l > from && s[l - 1] != '\n')
            l--;
        bool at_line = l > from ? true : line_starting;
        bool only_ws = l < to;
        for (size_t k = l; k < to; k++)
            if (!is_ws(s[k]))
                only_ws = false;
        if (at_line && only_ws)
            to = l;
    }
    if (to > from)
        return push(L, TK_TEXT, from, s + from, to - from, NULL);
    return 0;
}

int tlex(tarena *a, const char *src, size_t n, ttoks *toks, char *err, size_t errlen)
{
    lexer L = {.a = a, .src = src, .n = n, .toks = toks, .err = err, .errlen = errlen,
               .loc_line = 1, .loc_col = 1};
    size_t pos = 0;
    bool line_starting = true;
    int rc = 0;
    while (pos < n) {
        size_t t = pos;
        while (t + 1 < n && !(src[t] == '{' && (src[t + 1] == '{' || src[t + 1] == '%' || src[t + 1] == '#')))
            t++;
        if (t + 1 >= n) {
            rc = push(&L, TK_TEXT, pos, src + pos, n - pos, NULL);
            pos = n;
            break;
        }
        char kind = src[t + 1];
        char mod = (t + 2 < n && (src[t + 2] == '-' || src[t + 2] == '+')) ? src[t + 2] : 0;
        rc = emit_text(&L, pos, t, mod, kind != '{', line_starting);
        if (rc)
            return rc;
        size_t p = t + 2 + (mod ? 1 : 0);
        bool strip_after = false, keep_nl = false;
        char ml, mr;
        size_t rl = kind == '%' ? raw_tag(src + t, n - t, "raw", &ml, &mr) : 0;
        if (kind == '#') {
            size_t e = p;
            while (e + 1 < n && !(src[e] == '#' && src[e + 1] == '}'))
                e++;
            if (e + 1 >= n)
                return fail(&L, t, "unclosed comment");
            if (e > p && (src[e - 1] == '-' || src[e - 1] == '+')) {
                strip_after = src[e - 1] == '-';
                keep_nl = src[e - 1] == '+';
            }
            pos = e + 2;
        } else if (rl) {
            /* raw: find the matching endraw and emit everything between as text */
            size_t b = t + rl, e = b, el = 0;
            char el_mod = 0, er_mod = 0;
            for (; e < n; e++)
                if (src[e] == '{' && (el = raw_tag(src + e, n - e, "endraw", &el_mod, &er_mod)))
                    break;
            if (e >= n)
                return fail(&L, t, "'raw' block without 'endraw'");
            if (mr == '-')
                while (b < e && is_ws(src[b]))
                    b++;
            else if (mr != '+' && b < e && src[b] == '\n')
                b++;
            /* lstrip_blocks also applies before {% endraw %} */
            rc = emit_text(&L, b, e, el_mod, true, false);
            if (rc)
                return rc;
            strip_after = er_mod == '-';
            keep_nl = er_mod == '+';
            pos = e + el;
        } else {
            bool block = kind == '%';
            rc = push(&L, block ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, t, src + t, p - t, NULL);
            if (rc)
                return rc;
            pos = p;
            rc = lex_tag(&L, &pos, block, &strip_after, &keep_nl);
            if (rc)
                return rc;
            if (!block)
                keep_nl = true; /* trim_blocks never applies to }} */
        }
        if (strip_after) {
            while (pos < n && is_ws(src[pos]))
                pos++;
        } else if (!keep_nl && pos < n && src[pos] == '\n') {
            pos++;
        }
        line_starting = pos > 0 && src[pos - 1] == '\n';
    }
    if (rc == 0)
        rc = push(&L, TK_EOF, n, src + n, 0, NULL);
    return rc;
}

void ttoks_fini(ttoks *t)
{
    cairn_free(t->v);
    t->v = NULL;
    t->n = t->cap = 0;
}
