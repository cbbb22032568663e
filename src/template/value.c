/*
 * value.c — Python-like values for the chat-template interpreter, and their text forms.
 *
 * Owns: the arena allocator every template object lives in, the bounded byte buffer,
 * and the conversions that must match Python byte for byte: str(), repr() and
 * json.dumps(ensure_ascii=False, ...) as transformers' `tojson` filter calls it.
 * Invariants: values are immutable once built (except namespace dicts, mutated only by
 * `{% set ns.x = ... %}`), so they are shared by pointer freely; every recursive walk is
 * depth-limited because a namespace may contain itself.
 * Thread-safety: no globals; an arena or buffer belongs to one render or one template.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/template_impl.h"

#define MAX_VALUE_DEPTH 256

/* ---- Arena ------------------------------------------------------------------------- */

struct tarena_chunk {
    tarena_chunk *next;
    size_t used, cap;
    max_align_t data[];
};

void *tarena_alloc(tarena *a, size_t n)
{
    const size_t align = sizeof(max_align_t);
    if (n > ((size_t)1 << 40))
        return NULL;
    n = (n + align - 1) / align * align;
    if (n == 0)
        n = align;
    if (a->limit && (n > a->limit || a->total > a->limit - n)) {
        a->over = true;
        return NULL;
    }
    a->total += n;
    tarena_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        c = cairn_malloc(sizeof(*c) + cap);
        if (!c)
            return NULL;
        c->cap = cap;
        c->used = 0;
        c->next = a->head;
        a->head = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *tarena_strndup(tarena *a, const char *s, size_t n)
{
    char *p = tarena_alloc(a, n + 1);
    if (p) {
        if (n)
            memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

void tarena_free(tarena *a)
{
    tarena_chunk *c = a->head;
    while (c) {
        tarena_chunk *next = c->next;
        cairn_free(c);
        c = next;
    }
    a->head = NULL;
}

/* ---- Buffer ------------------------------------------------------------------------ */

int tbuf_put(tbuf *b, const char *s, size_t n)
{
    if (n > b->limit || b->n > b->limit - n)
        return CAIRN_ERANGE;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = cairn_realloc(b->p, cap);
        if (!p)
            return CAIRN_ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

int tbuf_putc(tbuf *b, char c) { return tbuf_put(b, &c, 1); }

int tbuf_printf(tbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0)
        return CAIRN_EINVAL;
    CAIRN_ASSERT((size_t)k < sizeof tmp);
    return tbuf_put(b, tmp, (size_t)k);
}

void tbuf_fini(tbuf *b)
{
    cairn_free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

void terr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- UTF-8 ------------------------------------------------------------------------- */

size_t tv_utf8_len(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            k++;
    return k;
}

size_t tv_utf8_offset(const char *s, size_t n, size_t idx)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (k == idx)
                return i;
            k++;
        }
    }
    return n;
}

/* Decodes one code point at s[*i] (advancing *i); invalid bytes decode as themselves. */
static uint32_t utf8_next(const char *s, size_t n, size_t *i)
{
    const unsigned char *u = (const unsigned char *)s;
    uint32_t c = u[*i];
    int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    if (extra == 0) {
        (*i)++;
        return c;
    }
    uint32_t cp = c & (0x3F >> extra);
    for (int k = 1; k <= extra; k++) {
        if (*i + (size_t)k >= n || (u[*i + (size_t)k] & 0xC0) != 0x80) {
            (*i)++;
            return c;
        }
        cp = (cp << 6) | (u[*i + (size_t)k] & 0x3F);
    }
    *i += (size_t)extra + 1;
    return cp;
}

/* ---- Truth and equality --------------------------------------------------------------- */

bool tv_truthy(tval v)
{
    switch (v.t) {
    case TV_UNDEF: case TV_NONE: return false;
    case TV_BOOL: return v.u.b;
    case TV_INT: return v.u.i != 0;
    case TV_FLOAT: return v.u.f != 0.0;
    case TV_STR: return v.u.s.n != 0;
    case TV_LIST: return v.u.l->n != 0;
    case TV_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

static bool is_num(tval v) { return v.t == TV_BOOL || v.t == TV_INT || v.t == TV_FLOAT; }

static bool equal_depth(tval a, tval b, int depth)
{
    if (depth > MAX_VALUE_DEPTH)
        return false;
    if (is_num(a) && is_num(b)) {
        if (a.t == TV_FLOAT || b.t == TV_FLOAT) {
            double x = a.t == TV_FLOAT ? a.u.f : a.t == TV_INT ? (double)a.u.i : a.u.b;
            double y = b.t == TV_FLOAT ? b.u.f : b.t == TV_INT ? (double)b.u.i : b.u.b;
            return x == y;
        }
        int64_t x = a.t == TV_INT ? a.u.i : a.u.b, y = b.t == TV_INT ? b.u.i : b.u.b;
        return x == y;
    }
    if (a.t != b.t)
        return false;
    switch (a.t) {
    case TV_UNDEF: case TV_NONE: return true;
    case TV_STR: return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    case TV_LIST:
        if (a.u.l->n != b.u.l->n || a.u.l->is_tuple != b.u.l->is_tuple)
            return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!equal_depth(a.u.l->v[i], b.u.l->v[i], depth + 1))
                return false;
        return true;
    case TV_DICT:
        if (a.u.d->n != b.u.d->n)
            return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            tval *o = tdict_get(b.u.d, a.u.d->k[i]);
            if (!o || !equal_depth(a.u.d->v[i], *o, depth + 1))
                return false;
        }
        return true;
    case TV_NS: return a.u.d == b.u.d;
    case TV_MACRO: return a.u.macro == b.u.macro;
    case TV_FUNC: return a.u.fn == b.u.fn;
    case TV_METHOD: return a.u.m == b.u.m;
    case TV_LOOP: return a.u.lp == b.u.lp;
    default: return false;
    }
}

bool tv_equal(tval a, tval b) { return equal_depth(a, b, 0); }

/* ---- Dicts ------------------------------------------------------------------------- */

tval *tdict_get(const tdict *d, tval key)
{
    for (size_t i = 0; i < d->n; i++)
        if (tv_equal(d->k[i], key))
            return &d->v[i];
    return NULL;
}

tval *tdict_get_str(const tdict *d, const char *key, size_t n)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == TV_STR && d->k[i].u.s.n == n && memcmp(d->k[i].u.s.p, key, n) == 0)
            return &d->v[i];
    return NULL;
}

int tdict_set(tarena *a, tdict *d, tval key, tval val)
{
    tval *old = tdict_get(d, key);
    if (old) {
        *old = val;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        tval *k = tarena_alloc(a, cap * sizeof(tval)), *v = tarena_alloc(a, cap * sizeof(tval));
        if (!k || !v)
            return CAIRN_ENOMEM;
        if (d->n) {
            memcpy(k, d->k, d->n * sizeof(tval));
            memcpy(v, d->v, d->n * sizeof(tval));
        }
        d->k = k;
        d->v = v;
        d->cap = cap;
    }
    d->k[d->n] = key;
    d->v[d->n] = val;
    d->n++;
    return 0;
}

/* ---- Text forms -------------------------------------------------------------------- */

const char *tv_type_name(tval v)
{
    switch (v.t) {
    case TV_UNDEF: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return "str";
    case TV_LIST: return v.u.l->is_tuple ? "tuple" : "list";
    case TV_DICT: return "dict";
    case TV_NS: return "Namespace";
    case TV_MACRO: return "Macro";
    case TV_FUNC: return "function";
    case TV_METHOD: return "method";
    case TV_LOOP: return "LoopContext";
    }
    return "object";
}

void tv_float_repr(double f, char out[32])
{
    if (isnan(f)) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(f)) {
        strcpy(out, f < 0 ? "-inf" : "inf");
        return;
    }
    /* Shortest %e form that reads back exactly: the digits Python's repr uses. */
    char e[40];
    for (int prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec, f);
        if (strtod(e, NULL) == f)
            break;
    }
    const char *p = e;
    bool neg = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    char digits[24];
    size_t nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < sizeof digits - 1)
            digits[nd++] = *p;
    int exp10 = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    char *o = out;
    if (neg)
        *o++ = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++)
                *o++ = (size_t)i < nd ? digits[i] : '0';
            *o++ = '.';
            if ((size_t)exp10 + 1 < nd)
                for (size_t i = (size_t)exp10 + 1; i < nd; i++)
                    *o++ = digits[i];
            else
                *o++ = '0';
        } else {
            *o++ = '0';
            *o++ = '.';
            for (int i = 0; i < -exp10 - 1; i++)
                *o++ = '0';
            for (size_t i = 0; i < nd; i++)
                *o++ = digits[i];
        }
        *o = '\0';
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            for (size_t i = 1; i < nd; i++)
                *o++ = digits[i];
        }
        int ex = exp10 < 0 ? -exp10 : exp10; /* at most 324 */
        *o++ = 'e';
        *o++ = exp10 < 0 ? '-' : '+';
        if (ex >= 100)
            *o++ = (char)('0' + ex / 100);
        *o++ = (char)('0' + ex / 10 % 10);
        *o++ = (char)('0' + ex % 10);
        *o = '\0';
    }
}

/* Python's str.isprintable() for a non-ASCII code point, approximated without Unicode
 * tables: C1 controls, non-space separators and the common format characters are not. */
static bool cp_printable(uint32_t c)
{
    if (c < 0xA0)
        return false;
    if (c == 0xA0 || c == 0xAD || c == 0x1680 || (c >= 0x2000 && c <= 0x200F) ||
        (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F) || c == 0x3000 ||
        c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) || (c >= 0xD800 && c <= 0xDFFF) ||
        (c >= 0xE000 && c <= 0xF8FF) || c > 0x10FFFF)
        return false;
    return true;
}

static int repr_str(tbuf *b, const char *s, size_t n)
{
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    int rc = tbuf_putc(b, q);
    size_t i = 0;
    while (rc == 0 && i < n) {
        size_t start = i;
        uint32_t c = utf8_next(s, n, &i);
        if (c == (uint32_t)q || c == '\\') {
            char esc[2] = {'\\', (char)c};
            rc = tbuf_put(b, esc, 2);
        } else if (c == '\n') {
            rc = tbuf_put(b, "\\n", 2);
        } else if (c == '\r') {
            rc = tbuf_put(b, "\\r", 2);
        } else if (c == '\t') {
            rc = tbuf_put(b, "\\t", 2);
        } else if (c < 0x20 || c == 0x7F) {
            rc = tbuf_printf(b, "\\x%02x", c);
        } else if (c < 0x80 || (i - start > 1 && cp_printable(c))) {
            rc = tbuf_put(b, s + start, i - start);
        } else if (i - start == 1) {
            rc = tbuf_printf(b, "\\x%02x", c); /* an invalid byte */
        } else if (c < 0x100) {
            rc = tbuf_printf(b, "\\x%02x", c);
        } else if (c < 0x10000) {
            rc = tbuf_printf(b, "\\u%04x", c);
        } else {
            rc = tbuf_printf(b, "\\U%08x", c);
        }
    }
    return rc ? rc : tbuf_putc(b, q);
}

static int repr_depth(tbuf *b, tval v, int depth);

static int str_depth(tbuf *b, tval v, int depth)
{
    char f[32];
    switch (v.t) {
    case TV_UNDEF: return 0;
    case TV_NONE: return tbuf_put(b, "None", 4);
    case TV_BOOL: return v.u.b ? tbuf_put(b, "True", 4) : tbuf_put(b, "False", 5);
    case TV_INT: return tbuf_printf(b, "%lld", (long long)v.u.i);
    case TV_FLOAT:
        tv_float_repr(v.u.f, f);
        return tbuf_put(b, f, strlen(f));
    case TV_STR: return tbuf_put(b, v.u.s.p, v.u.s.n);
    default: return repr_depth(b, v, depth);
    }
}

static int repr_depth(tbuf *b, tval v, int depth)
{
    int rc = 0;
    if (depth > MAX_VALUE_DEPTH)
        return CAIRN_ERANGE;
    switch (v.t) {
    case TV_UNDEF: return tbuf_put(b, "Undefined", 9);
    case TV_STR: return repr_str(b, v.u.s.p, v.u.s.n);
    case TV_LIST: {
        const tlist *l = v.u.l;
        rc = tbuf_putc(b, l->is_tuple ? '(' : '[');
        for (size_t i = 0; rc == 0 && i < l->n; i++) {
            if (i)
                rc = tbuf_put(b, ", ", 2);
            if (rc == 0)
                rc = repr_depth(b, l->v[i], depth + 1);
        }
        if (rc == 0 && l->is_tuple && l->n == 1)
            rc = tbuf_putc(b, ',');
        return rc ? rc : tbuf_putc(b, l->is_tuple ? ')' : ']');
    }
    case TV_NS:
        rc = tbuf_put(b, "<Namespace ", 11);
        /* fall through */
    case TV_DICT: {
        const tdict *d = v.u.d;
        if (rc == 0)
            rc = tbuf_putc(b, '{');
        for (size_t i = 0; rc == 0 && i < d->n; i++) {
            if (i)
                rc = tbuf_put(b, ", ", 2);
            if (rc == 0)
                rc = repr_depth(b, d->k[i], depth + 1);
            if (rc == 0)
                rc = tbuf_put(b, ": ", 2);
            if (rc == 0)
                rc = repr_depth(b, d->v[i], depth + 1);
        }
        if (rc == 0)
            rc = tbuf_putc(b, '}');
        return rc == 0 && v.t == TV_NS ? tbuf_putc(b, '>') : rc;
    }
    case TV_MACRO: return tbuf_put(b, "<Macro>", 7);
    case TV_FUNC: return tbuf_put(b, "<function>", 10);
    case TV_METHOD: return tbuf_put(b, "<built-in method>", 17);
    case TV_LOOP: return tbuf_printf(b, "<LoopContext %zu/%zu>", v.u.lp->i + 1, v.u.lp->n);
    default: return str_depth(b, v, depth);
    }
}

int tv_to_str(tbuf *b, tval v) { return str_depth(b, v, 0); }
int tv_repr(tbuf *b, tval v) { return repr_depth(b, v, 0); }

/* ---- JSON -------------------------------------------------------------------------- */

static int json_str(tbuf *b, const char *s, size_t n)
{
    int rc = tbuf_putc(b, '"');
    size_t run = 0; /* bytes copied verbatim in bulk */
    for (size_t i = 0; rc == 0 && i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char tmp[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(tmp, sizeof tmp, "\\u%04x", c);
                esc = tmp;
            }
        }
        if (esc) {
            rc = tbuf_put(b, s + run, i - run);
            if (rc == 0)
                rc = tbuf_put(b, esc, strlen(esc));
            run = i + 1;
        }
    }
    if (rc == 0)
        rc = tbuf_put(b, s + run, n - run);
    return rc ? rc : tbuf_putc(b, '"');
}

static int json_newline(tbuf *b, const tjson_opts *o, int level)
{
    int rc = tbuf_putc(b, '\n');
    for (int i = 0; rc == 0 && i < level; i++) {
        if (o->indent_str)
            rc = tbuf_put(b, o->indent_str, o->indent_str_n);
        else
            for (int k = 0; rc == 0 && k < o->indent; k++)
                rc = tbuf_putc(b, ' ');
    }
    return rc;
}

static bool json_pretty(const tjson_opts *o) { return o->indent >= 0 || o->indent_str; }

/* json.dumps turns keys into strings: str keys as is, numbers/bools/None converted. */
static int json_key(tbuf *b, tval k, const char **bad)
{
    char f[32];
    switch (k.t) {
    case TV_STR: return json_str(b, k.u.s.p, k.u.s.n);
    case TV_INT: return tbuf_printf(b, "\"%lld\"", (long long)k.u.i);
    case TV_BOOL: return k.u.b ? tbuf_put(b, "\"true\"", 6) : tbuf_put(b, "\"false\"", 7);
    case TV_NONE: return tbuf_put(b, "\"null\"", 6);
    case TV_FLOAT:
        tv_float_repr(k.u.f, f);
        if (isnan(k.u.f))
            strcpy(f, "NaN");
        else if (isinf(k.u.f))
            strcpy(f, k.u.f < 0 ? "-Infinity" : "Infinity");
        return tbuf_printf(b, "\"%s\"", f);
    default:
        *bad = "keys must be str, int, float, bool or None";
        return CAIRN_ETEMPLATE;
    }
}

static int key_cmp(tval a, tval b)
{
    size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
    int c = memcmp(a.u.s.p, b.u.s.p, n);
    return c ? c : (a.u.s.n > b.u.s.n) - (a.u.s.n < b.u.s.n);
}

static int json_depth(tbuf *b, tval v, const tjson_opts *o, const char **bad, int level)
{
    char f[32];
    int rc = 0;
    if (level > MAX_VALUE_DEPTH)
        return CAIRN_ERANGE;
    switch (v.t) {
    case TV_NONE: return tbuf_put(b, "null", 4);
    case TV_BOOL: return v.u.b ? tbuf_put(b, "true", 4) : tbuf_put(b, "false", 5);
    case TV_INT: return tbuf_printf(b, "%lld", (long long)v.u.i);
    case TV_FLOAT:
        if (isnan(v.u.f))
            return tbuf_put(b, "NaN", 3);
        if (isinf(v.u.f))
            return v.u.f < 0 ? tbuf_put(b, "-Infinity", 9) : tbuf_put(b, "Infinity", 8);
        tv_float_repr(v.u.f, f);
        return tbuf_put(b, f, strlen(f));
    case TV_STR: return json_str(b, v.u.s.p, v.u.s.n);
    case TV_LIST: {
        const tlist *l = v.u.l;
        if (l->n == 0)
            return tbuf_put(b, "[]", 2);
        rc = tbuf_putc(b, '[');
        for (size_t i = 0; rc == 0 && i < l->n; i++) {
            if (i)
                rc = tbuf_put(b, o->item_sep, o->item_sep_n);
            if (rc == 0 && json_pretty(o))
                rc = json_newline(b, o, level + 1);
            if (rc == 0)
                rc = json_depth(b, l->v[i], o, bad, level + 1);
        }
        if (rc == 0 && json_pretty(o))
            rc = json_newline(b, o, level);
        return rc ? rc : tbuf_putc(b, ']');
    }
    case TV_DICT: {
        const tdict *d = v.u.d;
        if (d->n == 0)
            return tbuf_put(b, "{}", 2);
        /* Order of keys: insertion order, or sorted (str keys only, as Python requires). */
        size_t *ord = cairn_malloc(d->n * sizeof(size_t));
        if (!ord)
            return CAIRN_ENOMEM;
        for (size_t i = 0; i < d->n; i++)
            ord[i] = i;
        if (o->sort_keys) {
            for (size_t i = 0; i < d->n; i++)
                if (d->k[i].t != TV_STR) {
                    *bad = "sort_keys needs str keys";
                    cairn_free(ord);
                    return CAIRN_ETEMPLATE;
                }
            for (size_t i = 1; i < d->n; i++) /* stable insertion sort */
                for (size_t j = i; j > 0 && key_cmp(d->k[ord[j - 1]], d->k[ord[j]]) > 0; j--) {
                    size_t t = ord[j];
                    ord[j] = ord[j - 1];
                    ord[j - 1] = t;
                }
        }
        rc = tbuf_putc(b, '{');
        for (size_t i = 0; rc == 0 && i < d->n; i++) {
            if (i)
                rc = tbuf_put(b, o->item_sep, o->item_sep_n);
            if (rc == 0 && json_pretty(o))
                rc = json_newline(b, o, level + 1);
            if (rc == 0)
                rc = json_key(b, d->k[ord[i]], bad);
            if (rc == 0)
                rc = tbuf_put(b, o->key_sep, o->key_sep_n);
            if (rc == 0)
                rc = json_depth(b, d->v[ord[i]], o, bad, level + 1);
        }
        cairn_free(ord);
        if (rc == 0 && json_pretty(o))
            rc = json_newline(b, o, level);
        return rc ? rc : tbuf_putc(b, '}');
    }
    default:
        *bad = tv_type_name(v);
        return CAIRN_ETEMPLATE;
    }
}

int tv_to_json(tbuf *b, tval v, const tjson_opts *o, const char **bad)
{
    return json_depth(b, v, o, bad, 0);
}

/* ---- From cJSON -------------------------------------------------------------------- */

int tv_from_cjson(tarena *a, const cJSON *j, tval *out)
{
    if (cJSON_IsNull(j) || !j) {
        *out = tv_none();
    } else if (cJSON_IsBool(j)) {
        *out = tv_bool(cJSON_IsTrue(j));
    } else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (isfinite(d) && floor(d) == d && fabs(d) <= 9007199254740992.0)
            *out = tv_int((int64_t)d);
        else
            *out = tv_float(d);
    } else if (cJSON_IsString(j) || cJSON_IsRaw(j)) {
        const char *s = j->valuestring ? j->valuestring : "";
        *out = tv_str(s, strlen(s));
    } else if (cJSON_IsArray(j)) {
        tlist *l = tarena_alloc(a, sizeof *l);
        if (!l)
            return CAIRN_ENOMEM;
        size_t n = (size_t)cJSON_GetArraySize(j);
        if (n) {
            l->v = tarena_alloc(a, n * sizeof(tval));
            if (!l->v)
                return CAIRN_ENOMEM;
        }
        const cJSON *it;
        cJSON_ArrayForEach(it, j)
        {
            int rc = tv_from_cjson(a, it, &l->v[l->n]);
            if (rc)
                return rc;
            l->n++;
        }
        out->t = TV_LIST;
        out->u.l = l;
    } else if (cJSON_IsObject(j)) {
        tdict *d = tarena_alloc(a, sizeof *d);
        if (!d)
            return CAIRN_ENOMEM;
        const cJSON *it;
        cJSON_ArrayForEach(it, j)
        {
            tval v;
            int rc = tv_from_cjson(a, it, &v);
            const char *k = it->string ? it->string : "";
            if (rc == 0)
                rc = tdict_set(a, d, tv_str(k, strlen(k)), v);
            if (rc)
                return rc;
        }
        out->t = TV_DICT;
        out->u.d = d;
    } else {
        *out = tv_none();
    }
    return 0;
}
