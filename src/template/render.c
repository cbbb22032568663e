/*
 * render.c — evaluates a parsed chat template against a context, as jinja2 would.
 *
 * Model: statements write into the current output buffer; expressions produce tvals
 * allocated from the render's arena. Variables live in frames: the root frame holds the
 * context and top-level `set`s; each for-loop iteration and each macro call gets its own
 * frame (so, as in Jinja2, a `set` inside a loop does not survive the iteration, which is
 * why templates use namespace()). Lookup walks frames outward, then the globals.
 * Semantics follow jinja2's ImmutableSandboxedEnvironment with transformers' settings:
 * undefined values print as "", are falsy and iterate as empty, but taking an attribute
 * of one (or doing arithmetic with it) is an error; `obj.x` and `obj['x']` fall back to
 * each other; out-of-range indexes give undefined; dicts keep insertion order.
 * Invariants: every recursion is bounded (evaluation depth, macro depth), every render
 * is bounded in steps, string size and arena bytes, so hostile templates fail with
 * CAIRN_ERANGE instead of running away. The first error message wins.
 * Thread-safety: all state is in the per-render `rctx`; the template is read-only.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/template_impl.h"
#include "template/render.h"

#define MAX_EVAL_DEPTH 1000
#define MAX_MACRO_DEPTH 64
#define MAX_RANGE 10000000
#define SIG_BREAK 1
#define SIG_CONTINUE 2

typedef struct frame {
    struct frame *parent;
    tdict vars;
} frame;

typedef struct {
    const cairn_chat_template_t *t;
    tarena *a;
    tbuf *out;
    frame *root;
    uint64_t steps;
    int depth, macro_depth;
    char *err;
    size_t errlen;
    bool err_set;
} rctx;

enum { G_RANGE, G_NAMESPACE, G_RAISE, G_STRFTIME, G_DICT, G_UNSUPPORTED_CYCLER,
       G_UNSUPPORTED_JOINER, G_UNSUPPORTED_LIPSUM };
static const char *const GLOBALS[] = {"range", "namespace", "raise_exception", "strftime_now",
                                      "dict", "cycler", "joiner", "lipsum"};

enum {
    M_SPLIT, M_RSPLIT, M_STARTSWITH, M_ENDSWITH, M_STRIP, M_LSTRIP, M_RSTRIP, M_REPLACE,
    M_UPPER, M_LOWER, M_TITLE, M_CAPITALIZE, M_FIND, M_RFIND, M_COUNT, M_JOIN,
    M_REMOVEPREFIX, M_REMOVESUFFIX, M_ISDIGIT, M_ISSPACE, M_ISALPHA, M_ISALNUM, M_ISLOWER,
    M_ISUPPER, M_STR_END,
    M_ITEMS = M_STR_END, M_KEYS, M_VALUES, M_GET, M_DICT_END,
    M_CYCLE = M_DICT_END,
};
static const char *const STR_METHODS[] = {
    "split", "rsplit", "startswith", "endswith", "strip", "lstrip", "rstrip", "replace",
    "upper", "lower", "title", "capitalize", "find", "rfind", "count", "join",
    "removeprefix", "removesuffix", "isdigit", "isspace", "isalpha", "isalnum", "islower",
    "isupper"};
static const char *const DICT_METHODS[] = {"items", "keys", "values", "get"};
/* Python methods Cairn does not implement: reported as unsupported, not as undefined. */
static const char *const STR_UNSUPPORTED[] = {
    "casefold", "center", "encode", "expandtabs", "format", "format_map", "index",
    "isascii", "isdecimal", "isidentifier", "isnumeric", "isprintable", "istitle", "ljust",
    "partition", "rindex", "rjust", "rpartition", "splitlines", "swapcase", "translate",
    "zfill"};
static const char *const DICT_UNSUPPORTED[] = {"copy", "pop", "popitem", "setdefault", "update",
                                               "clear", "fromkeys"};
static const char *const LIST_UNSUPPORTED[] = {"append", "extend", "insert", "pop", "remove",
                                               "sort", "reverse", "clear", "index", "count",
                                               "copy"};

/* ---- Errors ------------------------------------------------------------------------- */

static int rfail(rctx *R, const tnode *n, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int rfail(rctx *R, const tnode *n, int code, const char *fmt, ...)
{
    if (!R->err_set && R->err && R->errlen) {
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (n)
            snprintf(R->err, R->errlen, "%s at line %d, column %d", msg, n->line, n->col);
        else
            snprintf(R->err, R->errlen, "%s", msg);
    }
    R->err_set = true;
    return code;
}

/* Gives a resource failure from a helper its message. */
static int rcheck(rctx *R, const tnode *n, int rc)
{
    if (rc == 0 || R->err_set)
        return rc;
    if (rc == CAIRN_ENOMEM && R->a->over)
        return rfail(R, n, CAIRN_ERANGE, "render exceeded its memory limit");
    if (rc == CAIRN_ENOMEM)
        return rfail(R, n, rc, "out of memory");
    if (rc == CAIRN_ERANGE)
        return rfail(R, n, rc, "string or output larger than the render limit (or nested too deeply)");
    return rfail(R, n, rc, "render failed");
}

static int undefined_error(rctx *R, const tnode *n, tval u)
{
    if (u.u.s.n)
        return rfail(R, n, CAIRN_ETEMPLATE, "'%.*s' is undefined", (int)(u.u.s.n > 64 ? 64 : u.u.s.n), u.u.s.p);
    return rfail(R, n, CAIRN_ETEMPLATE, "undefined value used");
}

static tval tv_undef_named(const char *p, size_t n)
{
    tval v = tv_undef();
    v.u.s.p = p;
    v.u.s.n = n;
    return v;
}

/* ---- Small constructors --------------------------------------------------------------- */

static int mkstr(rctx *R, const tnode *n, const char *p, size_t len, tval *out)
{
    if (len > R->t->max_output)
        return rfail(R, n, CAIRN_ERANGE, "string larger than the render limit");
    char *s = tarena_alloc(R->a, len + 1);
    if (!s)
        return rcheck(R, n, CAIRN_ENOMEM);
    if (len)
        memcpy(s, p, len);
    *out = tv_str(s, len);
    return 0;
}

static int mklist(rctx *R, const tnode *n, size_t len, bool tuple, tval *out)
{
    tlist *l = tarena_alloc(R->a, sizeof *l);
    if (!l || (len && !(l->v = tarena_alloc(R->a, len * sizeof(tval)))))
        return rcheck(R, n, CAIRN_ENOMEM);
    l->n = len;
    l->is_tuple = tuple;
    out->t = TV_LIST;
    out->u.l = l;
    return 0;
}

static int mkdict(rctx *R, const tnode *n, tval *out, tval_type t)
{
    tdict *d = tarena_alloc(R->a, sizeof *d);
    if (!d)
        return rcheck(R, n, CAIRN_ENOMEM);
    out->t = t;
    out->u.d = d;
    return 0;
}

/* str(v) as a new string value. */
static int to_str(rctx *R, const tnode *n, tval v, tval *out)
{
    if (v.t == TV_STR) {
        *out = v;
        return 0;
    }
    if (v.t == TV_UNDEF) {
        *out = tv_str("", 0);
        return 0;
    }
    tbuf b = {.limit = R->t->max_output};
    int rc = tv_to_str(&b, v);
    if (rc == 0)
        rc = mkstr(R, n, b.p ? b.p : "", b.n, out);
    tbuf_fini(&b);
    return rcheck(R, n, rc);
}

static bool is_num(tval v) { return v.t == TV_BOOL || v.t == TV_INT || v.t == TV_FLOAT; }
static double num_f(tval v) { return v.t == TV_FLOAT ? v.u.f : v.t == TV_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t num_i(tval v) { return v.t == TV_INT ? v.u.i : (int64_t)v.u.b; }
static bool is_intlike(tval v) { return v.t == TV_INT || v.t == TV_BOOL; }

static bool name_is(const char *p, size_t n, const char *s)
{
    return strlen(s) == n && memcmp(p, s, n) == 0;
}

static int find_name(const char *const *tab, size_t count, const char *p, size_t n)
{
    for (size_t i = 0; i < count; i++)
        if (name_is(p, n, tab[i]))
            return (int)i;
    return -1;
}

/* ---- Frames ------------------------------------------------------------------------- */

static int frame_set(rctx *R, const tnode *n, frame *f, const char *name, size_t len, tval v)
{
    return rcheck(R, n, tdict_set(R->a, &f->vars, tv_str(name, len), v));
}

static tval lookup(rctx *R, frame *f, const char *name, size_t len)
{
    for (; f; f = f->parent) {
        tval *v = tdict_get_str(&f->vars, name, len);
        if (v)
            return *v;
    }
    int g = find_name(GLOBALS, CAIRN_ARRAY_LEN(GLOBALS), name, len);
    if (g >= 0) {
        tval v = {.t = TV_FUNC};
        v.u.fn = g;
        return v;
    }
    (void)R;
    return tv_undef_named(name, len);
}

/* ---- Iteration ---------------------------------------------------------------------- */

/* Materialises what `for x in v` iterates over: list items, dict keys, string chars. */
static int iter_items(rctx *R, const tnode *n, tval v, const tval **items, size_t *count)
{
    switch (v.t) {
    case TV_UNDEF:
        *items = NULL;
        *count = 0;
        return 0;
    case TV_LIST:
        *items = v.u.l->v;
        *count = v.u.l->n;
        return 0;
    case TV_DICT:
        *items = v.u.d->k;
        *count = v.u.d->n;
        return 0;
    case TV_STR: {
        size_t len = tv_utf8_len(v.u.s.p, v.u.s.n), off = 0;
        tval *out = len ? tarena_alloc(R->a, len * sizeof(tval)) : NULL;
        if (len && !out)
            return rcheck(R, n, CAIRN_ENOMEM);
        for (size_t i = 0; i < len; i++) {
            size_t next = tv_utf8_offset(v.u.s.p + off, v.u.s.n - off, 1) + off;
            out[i] = tv_str(v.u.s.p + off, next - off);
            off = next;
        }
        *items = out;
        *count = len;
        return 0;
    }
    default:
        return rfail(R, n, CAIRN_ETEMPLATE, "'%s' object is not iterable", tv_type_name(v));
    }
}

/* ---- Forward declarations ------------------------------------------------------------- */

static int step(rctx *R, const tnode *n);

static int eval(rctx *R, frame *f, const tnode *n, tval *out);
static int exec_body(rctx *R, frame *f, const tnodes *body);
static int apply_filter(rctx *R, frame *f, const tnode *n, const char *name, size_t name_n,
                        tval in, const tval *args, size_t nargs, const char *const *kwn,
                        const size_t *kwl, const tval *kwv, size_t nkw, tval *out);
static int apply_test(rctx *R, const tnode *n, const char *name, size_t name_n, tval in,
                      const tval *args, size_t nargs, bool *out);

/* Evaluated call arguments. */
typedef struct {
    tval *pos;
    size_t npos;
    const char *const *kwn;
    const size_t *kwl;
    tval *kwv;
    size_t nkw;
} targs;

static int eval_args(rctx *R, frame *f, const tnode *n, size_t skip, targs *a)
{
    memset(a, 0, sizeof *a);
    size_t np = n->items.n > skip ? n->items.n - skip : 0;
    if (np && !(a->pos = tarena_alloc(R->a, np * sizeof(tval))))
        return rcheck(R, n, CAIRN_ENOMEM);
    if (n->kw_vals.n && !(a->kwv = tarena_alloc(R->a, n->kw_vals.n * sizeof(tval))))
        return rcheck(R, n, CAIRN_ENOMEM);
    for (size_t i = 0; i < np; i++) {
        int rc = eval(R, f, n->items.v[skip + i], &a->pos[i]);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < n->kw_vals.n; i++) {
        int rc = eval(R, f, n->kw_vals.v[i], &a->kwv[i]);
        if (rc)
            return rc;
    }
    a->npos = np;
    a->kwn = n->kw_names;
    a->kwl = n->kw_name_n;
    a->nkw = n->kw_vals.n;
    return 0;
}

/* Argument `idx` (positional) or `name` (keyword); false when absent. */
static bool arg(const targs *a, size_t idx, const char *name, tval *out)
{
    if (idx < a->npos) {
        *out = a->pos[idx];
        return true;
    }
    for (size_t i = 0; name && i < a->nkw; i++)
        if (name_is(a->kwn[i], a->kwl[i], name)) {
            *out = a->kwv[i];
            return true;
        }
    return false;
}

static int want_str(rctx *R, const tnode *n, tval v, const char *what)
{
    if (v.t != TV_STR)
        return rfail(R, n, CAIRN_ETEMPLATE, "%s must be a string, not '%s'", what, tv_type_name(v));
    return 0;
}

/* ---- Attribute and item access -------------------------------------------------------- */

static int mkmethod(rctx *R, const tnode *n, tval self, int id, tval *out)
{
    tmethod *m = tarena_alloc(R->a, sizeof *m);
    if (!m)
        return rcheck(R, n, CAIRN_ENOMEM);
    m->self = self;
    m->id = id;
    out->t = TV_METHOD;
    out->u.m = m;
    return 0;
}

static int loop_attr(rctx *R, const tnode *n, tval obj, const char *name, size_t len, tval *out)
{
    const tloop *lp = obj.u.lp;
    if (name_is(name, len, "index")) *out = tv_int((int64_t)lp->i + 1);
    else if (name_is(name, len, "index0")) *out = tv_int((int64_t)lp->i);
    else if (name_is(name, len, "revindex")) *out = tv_int((int64_t)(lp->n - lp->i));
    else if (name_is(name, len, "revindex0")) *out = tv_int((int64_t)(lp->n - lp->i - 1));
    else if (name_is(name, len, "first")) *out = tv_bool(lp->i == 0);
    else if (name_is(name, len, "last")) *out = tv_bool(lp->i + 1 == lp->n);
    else if (name_is(name, len, "length")) *out = tv_int((int64_t)lp->n);
    else if (name_is(name, len, "depth")) *out = tv_int(1);
    else if (name_is(name, len, "depth0")) *out = tv_int(0);
    else if (name_is(name, len, "previtem"))
        *out = lp->i > 0 ? lp->items[lp->i - 1] : tv_undef_named("previtem", 8);
    else if (name_is(name, len, "nextitem"))
        *out = lp->i + 1 < lp->n ? lp->items[lp->i + 1] : tv_undef_named("nextitem", 8);
    else if (name_is(name, len, "cycle")) return mkmethod(R, n, obj, M_CYCLE, out);
    else if (name_is(name, len, "changed"))
        return rfail(R, n, CAIRN_EUNSUPPORTED, "unsupported loop.changed");
    else *out = tv_undef_named(name, len);
    return 0;
}

/* jinja2 getattr(obj, name): the attribute (methods), falling back to obj[name]. */
static int get_attr(rctx *R, const tnode *n, tval obj, const char *name, size_t len, tval *out)
{
    int id;
    switch (obj.t) {
    case TV_UNDEF:
        return undefined_error(R, n, obj);
    case TV_DICT:
        if ((id = find_name(DICT_METHODS, CAIRN_ARRAY_LEN(DICT_METHODS), name, len)) >= 0)
            return mkmethod(R, n, obj, M_ITEMS + id, out);
        if (find_name(DICT_UNSUPPORTED, CAIRN_ARRAY_LEN(DICT_UNSUPPORTED), name, len) >= 0)
            return rfail(R, n, CAIRN_EUNSUPPORTED, "unsupported dict method '%.*s'", (int)len, name);
        /* fall through */
    case TV_NS: {
        tval *v = tdict_get_str(obj.u.d, name, len);
        *out = v ? *v : tv_undef_named(name, len);
        return 0;
    }
    case TV_STR:
        if ((id = find_name(STR_METHODS, CAIRN_ARRAY_LEN(STR_METHODS), name, len)) >= 0)
            return mkmethod(R, n, obj, id, out);
        if (find_name(STR_UNSUPPORTED, CAIRN_ARRAY_LEN(STR_UNSUPPORTED), name, len) >= 0)
            return rfail(R, n, CAIRN_EUNSUPPORTED, "unsupported string method '%.*s'", (int)len, name);
        break;
    case TV_LIST:
        if (find_name(LIST_UNSUPPORTED, CAIRN_ARRAY_LEN(LIST_UNSUPPORTED), name, len) >= 0)
            return rfail(R, n, CAIRN_EUNSUPPORTED, "unsupported list method '%.*s'", (int)len, name);
        break;
    case TV_LOOP:
        return loop_attr(R, n, obj, name, len, out);
    default:
        break;
    }
    *out = tv_undef_named(name, len);
    return 0;
}

/* jinja2 getitem(obj, key): obj[key], falling back to the attribute for string keys. */
static int get_item(rctx *R, const tnode *n, tval obj, tval key, tval *out)
{
    if (obj.t == TV_UNDEF)
        return undefined_error(R, n, obj);
    if ((obj.t == TV_LIST || obj.t == TV_STR) && is_intlike(key)) {
        int64_t i = num_i(key);
        size_t len = obj.t == TV_LIST ? obj.u.l->n : tv_utf8_len(obj.u.s.p, obj.u.s.n);
        if (i < 0)
            i += (int64_t)len;
        if (i < 0 || (uint64_t)i >= len) {
            *out = tv_undef();
            return 0;
        }
        if (obj.t == TV_LIST) {
            *out = obj.u.l->v[i];
        } else {
            size_t a = tv_utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)i);
            size_t b = tv_utf8_offset(obj.u.s.p + a, obj.u.s.n - a, 1) + a;
            *out = tv_str(obj.u.s.p + a, b - a);
        }
        return 0;
    }
    if (obj.t == TV_DICT || obj.t == TV_NS) {
        tval *v = tdict_get(obj.u.d, key);
        if (v) {
            *out = *v;
            return 0;
        }
    }
    if (key.t == TV_STR && obj.t != TV_NS)
        return get_attr(R, n, obj, key.u.s.p, key.u.s.n, out);
    *out = tv_undef();
    return 0;
}

/* Python slice indices (start, stop, step) over a sequence of length len. */
static int slice_indices(rctx *R, const tnode *n, const tval *parts, size_t len, int64_t *start,
                         int64_t *stop, int64_t *step)
{
    *step = 1;
    for (int k = 0; k < 3; k++)
        if (parts[k].t != TV_NONE && parts[k].t != TV_UNDEF && !is_intlike(parts[k]))
            return rfail(R, n, CAIRN_ETEMPLATE, "slice indices must be integers or None");
    if (parts[2].t != TV_NONE && parts[2].t != TV_UNDEF)
        *step = num_i(parts[2]);
    if (*step == 0)
        return rfail(R, n, CAIRN_ETEMPLATE, "slice step cannot be zero");
    int64_t L = (int64_t)len;
    int64_t lo = *step < 0 ? -1 : 0, hi = *step < 0 ? L - 1 : L;
    for (int k = 0; k < 2; k++) {
        int64_t *dst = k == 0 ? start : stop;
        if (parts[k].t == TV_NONE || parts[k].t == TV_UNDEF) {
            *dst = (k == 0) == (*step > 0) ? lo : hi;
            continue;
        }
        int64_t v = num_i(parts[k]);
        if (v < 0) {
            v += L;
            if (v < lo)
                v = lo;
        } else if (v > hi) {
            v = hi;
        }
        *dst = v;
    }
    return 0;
}

static int do_slice(rctx *R, const tnode *n, tval obj, const tval *parts, tval *out)
{
    if (obj.t == TV_UNDEF)
        return undefined_error(R, n, obj);
    if (obj.t != TV_LIST && obj.t != TV_STR)
        return rfail(R, n, CAIRN_ETEMPLATE, "'%s' object is not subscriptable", tv_type_name(obj));
    const tval *items;
    size_t len;
    int rc = iter_items(R, n, obj, &items, &len);
    if (rc)
        return rc;
    int64_t start = 0, stop = 0, step = 1;
    if ((rc = slice_indices(R, n, parts, len, &start, &stop, &step)))
        return rc;
    size_t count = 0;
    if (step > 0 && start < stop)
        count = (size_t)((stop - start + step - 1) / step);
    else if (step < 0 && start > stop)
        count = (size_t)((start - stop + (-step) - 1) / (-step));
    if (obj.t == TV_LIST) {
        if ((rc = mklist(R, n, count, obj.u.l->is_tuple, out)))
            return rc;
        for (size_t i = 0; i < count; i++)
            out->u.l->v[i] = items[start + (int64_t)i * step];
        return 0;
    }
    tbuf b = {.limit = R->t->max_output};
    for (size_t i = 0; rc == 0 && i < count; i++) {
        tval c = items[start + (int64_t)i * step];
        rc = tbuf_put(&b, c.u.s.p, c.u.s.n);
    }
    if (rc == 0)
        rc = mkstr(R, n, b.p ? b.p : "", b.n, out);
    tbuf_fini(&b);
    return rcheck(R, n, rc);
}

/* ---- Operators ---------------------------------------------------------------------- */

static const char *op_text(top op)
{
    static const char *const t[] = {"+", "-", "*", "/", "//", "%", "**", "==", "!=", "<", "<=",
                                    ">", ">=", "in", "not in"};
    return t[op];
}

static int type_error(rctx *R, const tnode *n, top op, tval a, tval b)
{
    return rfail(R, n, CAIRN_ETEMPLATE, "unsupported operand type(s) for %s: '%s' and '%s'",
                 op_text(op), tv_type_name(a), tv_type_name(b));
}

static int repeat(rctx *R, const tnode *n, tval seq, int64_t times, tval *out)
{
    if (times < 0)
        times = 0;
    size_t unit = seq.t == TV_STR ? seq.u.s.n : seq.u.l->n * sizeof(tval);
    if (unit && (uint64_t)times > R->t->max_output / unit)
        return rfail(R, n, CAIRN_ERANGE, "repetition larger than the render limit");
    if (seq.t == TV_STR) {
        char *s = tarena_alloc(R->a, seq.u.s.n * (size_t)times + 1);
        if (!s)
            return rcheck(R, n, CAIRN_ENOMEM);
        for (int64_t i = 0; i < times; i++)
            memcpy(s + (size_t)i * seq.u.s.n, seq.u.s.p, seq.u.s.n);
        *out = tv_str(s, seq.u.s.n * (size_t)times);
        return 0;
    }
    int rc = mklist(R, n, seq.u.l->n * (size_t)times, seq.u.l->is_tuple, out);
    for (int64_t i = 0; rc == 0 && i < times; i++)
        if (seq.u.l->n)
            memcpy(out->u.l->v + (size_t)i * seq.u.l->n, seq.u.l->v, seq.u.l->n * sizeof(tval));
    return rc;
}

static int arith(rctx *R, const tnode *n, top op, tval a, tval b, tval *out)
{
    if (a.t == TV_UNDEF)
        return undefined_error(R, n, a);
    if (b.t == TV_UNDEF)
        return undefined_error(R, n, b);
    if (is_num(a) && is_num(b)) {
        bool ints = is_intlike(a) && is_intlike(b);
        int64_t x = ints ? num_i(a) : 0, y = ints ? num_i(b) : 0, r;
        double fx = num_f(a), fy = num_f(b);
        switch (op) {
        case OP_ADD:
            if (!ints) { *out = tv_float(fx + fy); return 0; }
            if (__builtin_add_overflow(x, y, &r)) break;
            *out = tv_int(r);
            return 0;
        case OP_SUB:
            if (!ints) { *out = tv_float(fx - fy); return 0; }
            if (__builtin_sub_overflow(x, y, &r)) break;
            *out = tv_int(r);
            return 0;
        case OP_MUL:
            if (!ints) { *out = tv_float(fx * fy); return 0; }
            if (__builtin_mul_overflow(x, y, &r)) break;
            *out = tv_int(r);
            return 0;
        case OP_DIV:
            if (fy == 0.0)
                return rfail(R, n, CAIRN_ETEMPLATE, "division by zero");
            *out = tv_float(fx / fy);
            return 0;
        case OP_FLOORDIV:
        case OP_MOD:
            if (fy == 0.0)
                return rfail(R, n, CAIRN_ETEMPLATE, "integer division or modulo by zero");
            if (ints) {
                if (x == INT64_MIN && y == -1)
                    break;
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    q -= 1;
                    m += y;
                }
                *out = tv_int(op == OP_FLOORDIV ? q : m);
            } else {
                double m = fmod(fx, fy);
                if (m != 0.0 && ((m < 0) != (fy < 0)))
                    m += fy;
                *out = tv_float(op == OP_FLOORDIV ? floor(fx / fy) : m);
            }
            return 0;
        case OP_POW:
            if (ints && y >= 0) {
                int64_t acc = 1, base = x;
                for (int64_t e = y; e > 0; e >>= 1) {
                    if ((e & 1) && __builtin_mul_overflow(acc, base, &acc))
                        goto overflow;
                    if (e > 1 && __builtin_mul_overflow(base, base, &base))
                        goto overflow;
                }
                *out = tv_int(acc);
                return 0;
            }
            if (fx == 0.0 && fy < 0)
                return rfail(R, n, CAIRN_ETEMPLATE, "0.0 cannot be raised to a negative power");
            *out = tv_float(pow(fx, fy));
            return 0;
        default:
            break;
        }
    overflow:
        return rfail(R, n, CAIRN_ERANGE, "integer overflow in '%s'", op_text(op));
    }
    if (op == OP_ADD && a.t == TV_STR && b.t == TV_STR) {
        if (a.u.s.n + b.u.s.n > R->t->max_output)
            return rfail(R, n, CAIRN_ERANGE, "string larger than the render limit");
        char *s = tarena_alloc(R->a, a.u.s.n + b.u.s.n + 1);
        if (!s)
            return rcheck(R, n, CAIRN_ENOMEM);
        memcpy(s, a.u.s.p, a.u.s.n);
        memcpy(s + a.u.s.n, b.u.s.p, b.u.s.n);
        *out = tv_str(s, a.u.s.n + b.u.s.n);
        return 0;
    }
    if (op == OP_ADD && a.t == TV_LIST && b.t == TV_LIST && a.u.l->is_tuple == b.u.l->is_tuple) {
        int rc = mklist(R, n, a.u.l->n + b.u.l->n, a.u.l->is_tuple, out);
        if (rc)
            return rc;
        if (a.u.l->n)
            memcpy(out->u.l->v, a.u.l->v, a.u.l->n * sizeof(tval));
        if (b.u.l->n)
            memcpy(out->u.l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(tval));
        return 0;
    }
    if (op == OP_MUL && (a.t == TV_STR || a.t == TV_LIST) && is_intlike(b))
        return repeat(R, n, a, num_i(b), out);
    if (op == OP_MUL && (b.t == TV_STR || b.t == TV_LIST) && is_intlike(a))
        return repeat(R, n, b, num_i(a), out);
    if (op == OP_MOD && a.t == TV_STR)
        return rfail(R, n, CAIRN_EUNSUPPORTED, "unsupported printf-style string formatting ('%%')");
    return type_error(R, n, op, a, b);
}

/* <, <=, >, >= as Python orders numbers, strings (by code point) and lists. */
static int order(rctx *R, const tnode *n, top op, tval a, tval b, int *cmp)
{
    if (a.t == TV_UNDEF)
        return undefined_error(R, n, a);
    if (b.t == TV_UNDEF)
        return undefined_error(R, n, b);
    if (is_num(a) && is_num(b)) {
        if (is_intlike(a) && is_intlike(b))
            *cmp = (num_i(a) > num_i(b)) - (num_i(a) < num_i(b));
        else
            *cmp = (num_f(a) > num_f(b)) - (num_f(a) < num_f(b));
        return 0;
    }
    if (a.t == TV_STR && b.t == TV_STR) {
        size_t m = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int c = memcmp(a.u.s.p, b.u.s.p, m);
        *cmp = c ? (c > 0) - (c < 0) : (a.u.s.n > b.u.s.n) - (a.u.s.n < b.u.s.n);
        return 0;
    }
    if (a.t == TV_LIST && b.t == TV_LIST && a.u.l->is_tuple == b.u.l->is_tuple) {
        size_t m = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < m; i++) {
            if (tv_equal(a.u.l->v[i], b.u.l->v[i]))
                continue;
            if (++R->depth > MAX_EVAL_DEPTH)
                return rfail(R, n, CAIRN_ERANGE, "values nested too deeply to compare");
            int rc = order(R, n, op, a.u.l->v[i], b.u.l->v[i], cmp);
            R->depth--;
            return rc;
        }
        *cmp = (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
        return 0;
    }
    return rfail(R, n, CAIRN_ETEMPLATE, "'%s' not supported between instances of '%s' and '%s'",
                 op_text(op), tv_type_name(a), tv_type_name(b));
}

static int contains(rctx *R, const tnode *n, tval needle, tval hay, bool *out)
{
    switch (hay.t) {
    case TV_UNDEF:
        *out = false;
        return 0;
    case TV_STR:
        if (needle.t != TV_STR)
            return rfail(R, n, CAIRN_ETEMPLATE, "'in <string>' requires string as left operand, not %s",
                         tv_type_name(needle));
        *out = needle.u.s.n == 0 || memmem(hay.u.s.p, hay.u.s.n, needle.u.s.p, needle.u.s.n) != NULL;
        return 0;
    case TV_LIST:
        *out = false;
        for (size_t i = 0; i < hay.u.l->n && !*out; i++)
            *out = tv_equal(hay.u.l->v[i], needle);
        return 0;
    case TV_DICT:
        *out = tdict_get(hay.u.d, needle) != NULL;
        return 0;
    default:
        return rfail(R, n, CAIRN_ETEMPLATE, "argument of type '%s' is not iterable", tv_type_name(hay));
    }
}

static int compare(rctx *R, const tnode *n, top op, tval a, tval b, tval *out)
{
    bool r;
    int cmp = 0, rc = 0;
    switch (op) {
    case OP_EQ: r = tv_equal(a, b); break;
    case OP_NE: r = !tv_equal(a, b); break;
    case OP_IN: rc = contains(R, n, a, b, &r); break;
    case OP_NOTIN: rc = contains(R, n, a, b, &r); r = !r; break;
    default:
        rc = order(R, n, op, a, b, &cmp);
        r = op == OP_LT ? cmp < 0 : op == OP_LE ? cmp <= 0 : op == OP_GT ? cmp > 0 : cmp >= 0;
    }
    if (rc)
        return rc;
    *out = tv_bool(r);
    return 0;
}

/* ---- Calls -------------------------------------------------------------------------- */

static int call_macro(rctx *R, frame *f, const tnode *n, const tnode *m, const targs *a, tval *out)
{
    (void)f;
    if (a->npos > m->items.n)
        return rfail(R, n, CAIRN_ETEMPLATE, "macro '%.*s' takes not more than %zu argument(s)",
                     (int)m->name_n, m->name, m->items.n);
    if (R->macro_depth >= MAX_MACRO_DEPTH)
        return rfail(R, n, CAIRN_ERANGE, "macro calls nested too deeply");
    frame *mf = tarena_alloc(R->a, sizeof *mf);
    if (!mf)
        return rcheck(R, n, CAIRN_ENOMEM);
    mf->parent = R->root;
    for (size_t k = 0; k < a->nkw; k++) {
        bool known = false;
        for (size_t i = 0; i < m->items.n; i++)
            known |= name_is(a->kwn[k], a->kwl[k], "") ||
                     (m->items.v[i]->name_n == a->kwl[k] &&
                      memcmp(m->items.v[i]->name, a->kwn[k], a->kwl[k]) == 0);
        if (!known)
            return rfail(R, n, CAIRN_ETEMPLATE, "macro '%.*s' has no argument '%.*s'",
                         (int)m->name_n, m->name, (int)a->kwl[k], a->kwn[k]);
    }
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < m->items.n; i++) {
        const tnode *p = m->items.v[i];
        tval v;
        if (!arg(a, i, NULL, &v)) {
            bool got = false;
            for (size_t k = 0; k < a->nkw && !got; k++)
                if (p->name_n == a->kwl[k] && memcmp(p->name, a->kwn[k], p->name_n) == 0) {
                    v = a->kwv[k];
                    got = true;
                }
            if (!got && m->kw_vals.v[i])
                rc = eval(R, mf, m->kw_vals.v[i], &v);
            else if (!got)
                v = tv_undef_named(p->name, p->name_n);
        }
        if (rc == 0)
            rc = frame_set(R, n, mf, p->name, p->name_n, v);
    }
    if (rc)
        return rc;
    tbuf body = {.limit = R->t->max_output};
    tbuf *saved = R->out;
    R->out = &body;
    R->macro_depth++;
    rc = exec_body(R, mf, &m->body);
    R->macro_depth--;
    R->out = saved;
    if (rc > 0)
        rc = rfail(R, n, CAIRN_ETEMPLATE, "'break' or 'continue' outside of a loop");
    if (rc == 0)
        rc = mkstr(R, n, body.p ? body.p : "", body.n, out);
    tbuf_fini(&body);
    return rc;
}

static int call_global(rctx *R, const tnode *n, int fn, const targs *a, tval *out)
{
    tval v;
    int rc;
    switch (fn) {
    case G_RANGE: {
        int64_t lo = 0, hi = 0, step = 1;
        if (a->npos < 1 || a->npos > 3 || a->nkw)
            return rfail(R, n, CAIRN_ETEMPLATE, "range expects 1 to 3 integer arguments");
        for (size_t i = 0; i < a->npos; i++)
            if (!is_intlike(a->pos[i]))
                return rfail(R, n, CAIRN_ETEMPLATE, "'%s' object cannot be interpreted as an integer",
                             tv_type_name(a->pos[i]));
        if (a->npos == 1) {
            hi = num_i(a->pos[0]);
        } else {
            lo = num_i(a->pos[0]);
            hi = num_i(a->pos[1]);
            if (a->npos == 3)
                step = num_i(a->pos[2]);
        }
        if (step == 0)
            return rfail(R, n, CAIRN_ETEMPLATE, "range() arg 3 must not be zero");
        double cnt = step > 0 ? ceil(((double)hi - (double)lo) / (double)step)
                              : ceil(((double)lo - (double)hi) / (double)-step);
        if (cnt < 0)
            cnt = 0;
        if (cnt > MAX_RANGE)
            return rfail(R, n, CAIRN_ERANGE, "range too large");
        if ((rc = mklist(R, n, (size_t)cnt, false, out)))
            return rc;
        for (size_t i = 0; i < (size_t)cnt; i++)
            out->u.l->v[i] = tv_int(lo + (int64_t)i * step);
        return 0;
    }
    case G_NAMESPACE:
    case G_DICT:
        if ((rc = mkdict(R, n, out, fn == G_NAMESPACE ? TV_NS : TV_DICT)))
            return rc;
        if (a->npos > 1)
            return rfail(R, n, CAIRN_ETEMPLATE, "%s expected at most 1 positional argument",
                         GLOBALS[fn]);
        if (a->npos == 1) {
            if (a->pos[0].t != TV_DICT)
                return rfail(R, n, CAIRN_ETEMPLATE, "%s() positional argument must be a dict",
                             GLOBALS[fn]);
            for (size_t i = 0; i < a->pos[0].u.d->n; i++)
                if ((rc = rcheck(R, n, tdict_set(R->a, out->u.d, a->pos[0].u.d->k[i], a->pos[0].u.d->v[i]))))
                    return rc;
        }
        for (size_t i = 0; i < a->nkw; i++)
            if ((rc = rcheck(R, n, tdict_set(R->a, out->u.d, tv_str(a->kwn[i], a->kwl[i]), a->kwv[i]))))
                return rc;
        return 0;
    case G_RAISE: {
        tval msg = tv_str("", 0);
        arg(a, 0, "message", &msg);
        if ((rc = to_str(R, n, msg, &v)))
            return rc;
        if (!R->err_set && R->err && R->errlen)
            snprintf(R->err, R->errlen, "%.*s", (int)(v.u.s.n > 1 << 20 ? 1 << 20 : v.u.s.n), v.u.s.p);
        R->err_set = true;
        return CAIRN_ETEMPLATE;
    }
    case G_STRFTIME: {
        if (!arg(a, 0, "format", &v) || v.t != TV_STR)
            return rfail(R, n, CAIRN_ETEMPLATE, "strftime_now expects a format string");
        char fmt[256], buf[512];
        if (v.u.s.n >= sizeof fmt)
            return rfail(R, n, CAIRN_ERANGE, "strftime_now format too long");
        memcpy(fmt, v.u.s.p, v.u.s.n);
        fmt[v.u.s.n] = '\0';
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        size_t k = strftime(buf, sizeof buf, fmt, &tm);
        return mkstr(R, n, buf, k, out);
    }
    default:
        return rfail(R, n, CAIRN_EUNSUPPORTED, "unsupported global '%s'", GLOBALS[fn]);
    }
}

/* Python whitespace for str.split()/strip() without arguments (ASCII and common Unicode). */
static bool py_space(uint32_t c)
{
    return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 ||
           c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static uint32_t cp_at(const char *s, size_t n, size_t i, size_t *len)
{
    const unsigned char *u = (const unsigned char *)s + i;
    size_t left = n - i;
    if (u[0] < 0x80 || left < 2) {
        *len = 1;
        return u[0];
    }
    if (u[0] >= 0xC0 && u[0] < 0xE0) {
        *len = 2;
        return ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
    }
    if (u[0] >= 0xE0 && u[0] < 0xF0 && left >= 3) {
        *len = 3;
        return ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    }
    if (u[0] >= 0xF0 && left >= 4) {
        *len = 4;
        return ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
               ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
    }
    *len = 1;
    return u[0];
}

/* Start of the code point that ends at byte `end` (exclusive). */
static size_t cp_back(const char *s, size_t end)
{
    size_t i = end - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80 && end - i < 4)
        i--;
    return i;
}

static bool in_chars(uint32_t c, tval chars)
{
    if (chars.t != TV_STR)
        return py_space(c);
    for (size_t i = 0; i < chars.u.s.n;) {
        size_t l;
        if (cp_at(chars.u.s.p, chars.u.s.n, i, &l) == c)
            return true;
        i += l;
    }
    return false;
}

/* str.strip/lstrip/rstrip; chars: a string, or None/absent for whitespace. */
static tval strip(tval s, tval chars, bool left, bool right)
{
    size_t a = 0, b = s.u.s.n, l;
    while (left && a < b && in_chars(cp_at(s.u.s.p, b, a, &l), chars))
        a += l;
    while (right && b > a) {
        size_t st = cp_back(s.u.s.p, b);
        if (!in_chars(cp_at(s.u.s.p, b, st, &l), chars))
            break;
        b = st;
    }
    return tv_str(s.u.s.p + a, b - a);
}

/*
 * Simple case mapping of Python's str.upper()/lower() for ASCII, Latin-1, Latin
 * Extended-A, Greek and Cyrillic (the mappings that keep one code point); other code
 * points are left unchanged. 'ß'.upper() is "SS", as in Python.
 */
static uint32_t cp_upper(uint32_t c)
{
    if (c >= 'a' && c <= 'z') return c - 32;
    if (c < 0x80) return c;
    if (c == 0xB5) return 0x39C;
    if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 0x20;
    if (c == 0xFF) return 0x178;
    if ((c >= 0x100 && c <= 0x12F) || (c >= 0x132 && c <= 0x137) || (c >= 0x14A && c <= 0x177))
        return c & ~1u;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E))
        return (c & 1) ? c : c - 1;
    if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 0x20;
    if (c == 0x3C2) return 0x3A3;
    if (c == 0x3AC) return 0x386;
    if (c >= 0x3AD && c <= 0x3AF) return c - 0x25;
    if (c == 0x3CC) return 0x38C;
    if (c == 0x3CD || c == 0x3CE) return c - 0x3F;
    if (c >= 0x430 && c <= 0x44F) return c - 0x20;
    if (c >= 0x450 && c <= 0x45F) return c - 0x50;
    return c;
}

static uint32_t cp_lower(uint32_t c)
{
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c < 0x80) return c;
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 0x20;
    if (c == 0x178) return 0xFF;
    if ((c >= 0x100 && c <= 0x12F) || (c >= 0x132 && c <= 0x137) || (c >= 0x14A && c <= 0x177))
        return c | 1u;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E))
        return (c & 1) ? c + 1 : c;
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 0x20;
    if (c == 0x386) return 0x3AC;
    if (c >= 0x388 && c <= 0x38A) return c + 0x25;
    if (c == 0x38C) return 0x3CC;
    if (c == 0x38E || c == 0x38F) return c + 0x3F;
    if (c >= 0x410 && c <= 0x42F) return c + 0x20;
    if (c >= 0x400 && c <= 0x40F) return c + 0x50;
    return c;
}

static bool cp_cased(uint32_t c) { return cp_upper(c) != c || cp_lower(c) != c || c >= 0x80; }

static size_t put_cp(char *o, uint32_t cp, uint32_t orig, const char *src, size_t len)
{
    if (cp == orig) {
        memcpy(o, src, len);
        return len;
    }
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    o[0] = (char)(0xC0 | (cp >> 6)); /* every mapped code point is below U+0800 */
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* upper/lower/capitalize/title; the result is at most twice as long (ß -> SS). */
enum { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_TITLE_JINJA, CASE_TITLE_PY };
static int change_case(rctx *R, const tnode *n, tval s, int mode, tval *out)
{
    char *p = tarena_alloc(R->a, s.u.s.n * 2 + 1);
    if (!p)
        return rcheck(R, n, CAIRN_ENOMEM);
    bool word_start = true;
    size_t k = 0, l;
    for (size_t i = 0; i < s.u.s.n; i += l) {
        uint32_t c = cp_at(s.u.s.p, s.u.s.n, i, &l);
        bool to_up;
        switch (mode) {
        case CASE_UPPER: to_up = true; break;
        case CASE_LOWER: to_up = false; break;
        case CASE_CAPITALIZE: to_up = i == 0; break;
        case CASE_TITLE_JINJA:
            /* jinja2 do_title: words start after runs of '-', whitespace, ( { [ < */
            to_up = word_start;
            word_start = c == '-' || py_space(c) || c == '(' || c == '{' || c == '[' || c == '<';
            break;
        default: /* str.title: a cased letter after an uncased character starts a word */
            to_up = word_start;
            word_start = !cp_cased(c);
        }
        if (to_up && c == 0xDF) {
            p[k++] = 'S';
            p[k++] = 'S';
            continue;
        }
        k += put_cp(p + k, to_up ? cp_upper(c) : cp_lower(c), c, s.u.s.p + i, l);
    }
    *out = tv_str(p, k);
    return 0;
}

static int str_replace(rctx *R, const tnode *n, tval s, tval old, tval rep, int64_t count, tval *out)
{
    tbuf b = {.limit = R->t->max_output};
    int rc = 0;
    size_t i = 0;
    int64_t done = 0;
    if (old.u.s.n == 0) {
        /* Python inserts `rep` before every code point and at the end */
        size_t l;
        while (rc == 0 && (count < 0 || done < count)) {
            rc = tbuf_put(&b, rep.u.s.p, rep.u.s.n);
            done++;
            if (i >= s.u.s.n)
                break;
            cp_at(s.u.s.p, s.u.s.n, i, &l);
            if (rc == 0)
                rc = tbuf_put(&b, s.u.s.p + i, l);
            i += l;
        }
    } else {
        while (rc == 0 && (count < 0 || done < count)) {
            const char *hit = memmem(s.u.s.p + i, s.u.s.n - i, old.u.s.p, old.u.s.n);
            if (!hit)
                break;
            size_t at = (size_t)(hit - s.u.s.p);
            rc = tbuf_put(&b, s.u.s.p + i, at - i);
            if (rc == 0)
                rc = tbuf_put(&b, rep.u.s.p, rep.u.s.n);
            i = at + old.u.s.n;
            done++;
        }
    }
    if (rc == 0 && i < s.u.s.n)
        rc = tbuf_put(&b, s.u.s.p + i, s.u.s.n - i);
    if (rc == 0)
        rc = mkstr(R, n, b.p ? b.p : "", b.n, out);
    tbuf_fini(&b);
    return rcheck(R, n, rc);
}

typedef struct {
    tval *v;
    size_t n, cap;
} tparts;

static int part_push(rctx *R, const tnode *n, tparts *p, const char *s, size_t len)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 8;
        tval *v = tarena_alloc(R->a, cap * sizeof(tval));
        if (!v)
            return rcheck(R, n, CAIRN_ENOMEM);
        if (p->n)
            memcpy(v, p->v, p->n * sizeof(tval));
        p->v = v;
        p->cap = cap;
    }
    p->v[p->n++] = tv_str(s, len);
    return 0;
}

/* str.split / str.rsplit (sep None: runs of whitespace, no empty pieces). */
static int str_split(rctx *R, const tnode *n, tval str, tval sep, int64_t maxsplit, bool from_right, tval *out)
{
    const char *s = str.u.s.p;
    size_t len = str.u.s.n, l, i;
    bool ws = sep.t != TV_STR;
    const char *sp = ws ? NULL : sep.u.s.p;
    size_t sn = ws ? 0 : sep.u.s.n;
    tparts p = {0};
    int64_t splits = 0;
    int rc = 0;
    if (!ws && sn == 0)
        return rfail(R, n, CAIRN_ETEMPLATE, "empty separator");
    if (!from_right) {
        i = 0;
        for (;;) {
            if (ws) {
                while (i < len && py_space(cp_at(s, len, i, &l)))
                    i += l;
                if (i >= len)
                    break;
            }
            if (maxsplit >= 0 && splits >= maxsplit) {
                rc = part_push(R, n, &p, s + i, len - i); /* the rest, as is */
                break;
            }
            size_t a = i;
            if (ws) {
                while (i < len && !py_space(cp_at(s, len, i, &l)))
                    i += l;
                rc = part_push(R, n, &p, s + a, i - a);
            } else {
                const char *hit = memmem(s + i, len - i, sp, sn);
                if (!hit) {
                    rc = part_push(R, n, &p, s + a, len - a);
                    break;
                }
                rc = part_push(R, n, &p, s + a, (size_t)(hit - s) - a);
                i = (size_t)(hit - s) + sn;
            }
            if (rc)
                return rc;
            splits++;
        }
    } else {
        i = len;
        for (;;) {
            if (ws) {
                while (i > 0 && py_space(cp_at(s, len, cp_back(s, i), &l)))
                    i = cp_back(s, i);
                if (i == 0)
                    break;
            }
            if (maxsplit >= 0 && splits >= maxsplit) {
                rc = part_push(R, n, &p, s, i);
                break;
            }
            size_t b = i;
            if (ws) {
                while (i > 0 && !py_space(cp_at(s, len, cp_back(s, i), &l)))
                    i = cp_back(s, i);
                rc = part_push(R, n, &p, s + i, b - i);
            } else {
                size_t k = i + 1;
                bool found = false;
                while (k-- > 0)
                    if (k + sn <= i && memcmp(s + k, sp, sn) == 0) {
                        found = true;
                        break;
                    }
                if (!found) {
                    rc = part_push(R, n, &p, s, i);
                    break;
                }
                rc = part_push(R, n, &p, s + k + sn, b - k - sn);
                i = k;
            }
            if (rc)
                return rc;
            splits++;
        }
    }
    if (rc || (rc = mklist(R, n, p.n, false, out)))
        return rc;
    for (size_t k = 0; k < p.n; k++)
        out->u.l->v[k] = from_right ? p.v[p.n - 1 - k] : p.v[k];
    return 0;
}

static int py_find(tval s, tval sub, bool rev)
{
    if (sub.u.s.n > s.u.s.n)
        return -1;
    if (!rev) {
        const char *h = memmem(s.u.s.p, s.u.s.n, sub.u.s.p, sub.u.s.n);
        return h ? (int)tv_utf8_len(s.u.s.p, (size_t)(h - s.u.s.p)) : -1;
    }
    for (size_t k = s.u.s.n - sub.u.s.n + 1; k-- > 0;)
        if (memcmp(s.u.s.p + k, sub.u.s.p, sub.u.s.n) == 0)
            return (int)tv_utf8_len(s.u.s.p, k);
    return -1;
}

static bool affix(tval s, tval x, bool end)
{
    if (x.u.s.n > s.u.s.n)
        return false;
    return memcmp(s.u.s.p + (end ? s.u.s.n - x.u.s.n : 0), x.u.s.p, x.u.s.n) == 0;
}

static int join_values(rctx *R, const tnode *n, tval sep, const tval *items, size_t cnt, tval *out)
{
    tbuf b = {.limit = R->t->max_output};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < cnt; i++) {
        if (i)
            rc = tbuf_put(&b, sep.u.s.p, sep.u.s.n);
        if (rc == 0)
            rc = tv_to_str(&b, items[i]);
    }
    if (rc == 0)
        rc = mkstr(R, n, b.p ? b.p : "", b.n, out);
    tbuf_fini(&b);
    return rcheck(R, n, rc);
}

static int call_method(rctx *R, const tnode *n, const tmethod *m, const targs *a, tval *out)
{
    tval s = m->self, x, y;
    int rc;
    if (m->id < M_STR_END) {
        switch (m->id) {
        case M_SPLIT:
        case M_RSPLIT: {
            tval sep = tv_none(), mx = tv_int(-1);
            arg(a, 0, "sep", &sep);
            arg(a, 1, "maxsplit", &mx);
            if (sep.t != TV_NONE && (rc = want_str(R, n, sep, "separator")))
                return rc;
            if (!is_intlike(mx))
                return rfail(R, n, CAIRN_ETEMPLATE, "maxsplit must be an integer");
            return str_split(R, n, s, sep, num_i(mx), m->id == M_RSPLIT, out);
        }
        case M_STARTSWITH:
        case M_ENDSWITH:
            if (!arg(a, 0, NULL, &x))
                return rfail(R, n, CAIRN_ETEMPLATE, "%s takes a prefix argument", STR_METHODS[m->id]);
            if (x.t == TV_LIST && x.u.l->is_tuple) {
                bool any = false;
                for (size_t i = 0; i < x.u.l->n; i++) {
                    if ((rc = want_str(R, n, x.u.l->v[i], "tuple item")))
                        return rc;
                    any |= affix(s, x.u.l->v[i], m->id == M_ENDSWITH);
                }
                *out = tv_bool(any);
                return 0;
            }
            if ((rc = want_str(R, n, x, "argument")))
                return rc;
            *out = tv_bool(affix(s, x, m->id == M_ENDSWITH));
            return 0;
        case M_STRIP:
        case M_LSTRIP:
        case M_RSTRIP:
            x = tv_none();
            arg(a, 0, "chars", &x);
            if (x.t != TV_NONE && (rc = want_str(R, n, x, "chars")))
                return rc;
            *out = strip(s, x, m->id != M_RSTRIP, m->id != M_LSTRIP);
            return 0;
        case M_REPLACE: {
            tval cnt = tv_int(-1);
            if (!arg(a, 0, "old", &x) || !arg(a, 1, "new", &y))
                return rfail(R, n, CAIRN_ETEMPLATE, "replace expects 2 arguments");
            arg(a, 2, "count", &cnt);
            if ((rc = want_str(R, n, x, "old")) || (rc = want_str(R, n, y, "new")))
                return rc;
            if (!is_intlike(cnt))
                return rfail(R, n, CAIRN_ETEMPLATE, "count must be an integer");
            return str_replace(R, n, s, x, y, num_i(cnt), out);
        }
        case M_UPPER: return change_case(R, n, s, CASE_UPPER, out);
        case M_LOWER: return change_case(R, n, s, CASE_LOWER, out);
        case M_TITLE: return change_case(R, n, s, CASE_TITLE_PY, out);
        case M_CAPITALIZE: return change_case(R, n, s, CASE_CAPITALIZE, out);
        case M_FIND:
        case M_RFIND:
            if (!arg(a, 0, "sub", &x) || (rc = want_str(R, n, x, "argument")))
                return rfail(R, n, CAIRN_ETEMPLATE, "find expects a string");
            if (a->npos > 1)
                return rfail(R, n, CAIRN_EUNSUPPORTED, "unsupported find() start/end arguments");
            *out = tv_int(py_find(s, x, m->id == M_RFIND));
            return 0;
        case M_COUNT: {
            if (!arg(a, 0, "sub", &x) || (rc = want_str(R, n, x, "argument")))
                return rfail(R, n, CAIRN_ETEMPLATE, "count expects a string");
            int64_t c = 0;
            if (x.u.s.n == 0) {
                c = (int64_t)tv_utf8_len(s.u.s.p, s.u.s.n) + 1;
            } else {
                for (size_t i = 0; i + x.u.s.n <= s.u.s.n;) {
                    const char *h = memmem(s.u.s.p + i, s.u.s.n - i, x.u.s.p, x.u.s.n);
                    if (!h)
                        break;
                    c++;
                    i = (size_t)(h - s.u.s.p) + x.u.s.n;
                }
            }
            *out = tv_int(c);
            return 0;
        }
        case M_JOIN: {
            const tval *items;
            size_t cnt;
            if (!arg(a, 0, "iterable", &x))
                return rfail(R, n, CAIRN_ETEMPLATE, "join expects an iterable");
            if ((rc = iter_items(R, n, x, &items, &cnt)))
                return rc;
            for (size_t i = 0; i < cnt; i++)
                if (items[i].t != TV_STR)
                    return rfail(R, n, CAIRN_ETEMPLATE, "sequence item %zu: expected str instance, %s found",
                                 i, tv_type_name(items[i]));
            return join_values(R, n, s, items, cnt, out);
        }
        case M_REMOVEPREFIX:
        case M_REMOVESUFFIX:
            if (!arg(a, 0, NULL, &x) || (rc = want_str(R, n, x, "argument")))
                return rfail(R, n, CAIRN_ETEMPLATE, "%s expects a string", STR_METHODS[m->id]);
            *out = s;
            if (affix(s, x, m->id == M_REMOVESUFFIX)) {
                out->u.s.n -= x.u.s.n;
                if (m->id == M_REMOVEPREFIX)
                    out->u.s.p += x.u.s.n;
            }
            return 0;
        default: { /* isdigit, isspace, isalpha, isalnum, islower, isupper (ASCII) */
            bool r = s.u.s.n > 0, cased = false;
            for (size_t i = 0; i < s.u.s.n; i++) {
                char c = s.u.s.p[i];
                bool dig = c >= '0' && c <= '9', lo = c >= 'a' && c <= 'z', hi = c >= 'A' && c <= 'Z';
                switch (m->id) {
                case M_ISDIGIT: r &= dig; break;
                case M_ISSPACE: r &= py_space((unsigned char)c); break;
                case M_ISALPHA: r &= lo || hi; break;
                case M_ISALNUM: r &= lo || hi || dig; break;
                case M_ISLOWER: r &= !hi; cased |= lo; break;
                default: r &= !lo; cased |= hi; break;
                }
            }
            if (m->id == M_ISLOWER || m->id == M_ISUPPER)
                r = r && cased;
            *out = tv_bool(r);
            return 0;
        }
        }
    }
    if (m->id == M_CYCLE) {
        if (a->npos == 0)
            return rfail(R, n, CAIRN_ETEMPLATE, "no items for cycling given");
        *out = a->pos[s.u.lp->i % a->npos];
        return 0;
    }
    /* dict methods */
    const tdict *d = s.u.d;
    if (m->id == M_GET) {
        if (!arg(a, 0, "key", &x))
            return rfail(R, n, CAIRN_ETEMPLATE, "get expected at least 1 argument");
        tval dflt = tv_none();
        arg(a, 1, "default", &dflt);
        tval *v = tdict_get(d, x);
        *out = v ? *v : dflt;
        return 0;
    }
    if ((rc = mklist(R, n, d->n, false, out)))
        return rc;
    for (size_t i = 0; i < d->n; i++) {
        if (m->id == M_KEYS) {
            out->u.l->v[i] = d->k[i];
        } else if (m->id == M_VALUES) {
            out->u.l->v[i] = d->v[i];
        } else {
            if ((rc = mklist(R, n, 2, true, &out->u.l->v[i])))
                return rc;
            out->u.l->v[i].u.l->v[0] = d->k[i];
            out->u.l->v[i].u.l->v[1] = d->v[i];
        }
    }
    return 0;
}

static int eval_call(rctx *R, frame *f, const tnode *n, tval *out)
{
    tval callee;
    targs a;
    int rc = eval(R, f, n->a, &callee);
    if (rc == 0)
        rc = eval_args(R, f, n, 0, &a);
    if (rc)
        return rc;
    switch (callee.t) {
    case TV_MACRO: return call_macro(R, f, n, callee.u.macro, &a, out);
    case TV_FUNC: return call_global(R, n, callee.u.fn, &a, out);
    case TV_METHOD: return call_method(R, n, callee.u.m, &a, out);
    case TV_UNDEF: return undefined_error(R, n, callee);
    default:
        return rfail(R, n, CAIRN_ETEMPLATE, "'%s' object is not callable", tv_type_name(callee));
    }
}

/* ---- Filters ------------------------------------------------------------------------ */

/* Follows a dotted attribute path ("a.b", "0") as jinja2's make_attrgetter does. */
static int attr_path(rctx *R, const tnode *n, tval obj, tval path, tval *out)
{
    int rc;
    if (is_intlike(path))
        return get_item(R, n, obj, path, out);
    if ((rc = want_str(R, n, path, "attribute")))
        return rc;
    const char *p = path.u.s.p, *end = p + path.u.s.n;
    *out = obj;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t len = dot ? (size_t)(dot - p) : (size_t)(end - p);
        tval key = tv_str(p, len);
        bool digits = len > 0;
        int64_t iv = 0;
        for (size_t i = 0; i < len && digits; i++) {
            digits = p[i] >= '0' && p[i] <= '9' && i < 18;
            iv = iv * 10 + (p[i] - '0');
        }
        if (digits)
            key = tv_int(iv);
        if (out->t == TV_UNDEF) /* a missing step yields undefined, not an error */
            return 0;
        if ((rc = get_item(R, n, *out, key, out)))
            return rc;
        if (!dot)
            break;
        p = dot + 1;
    }
    return 0;
}

static int to_int(tval v, tval dflt, tval *out)
{
    if (is_intlike(v)) {
        *out = tv_int(num_i(v));
        return 0;
    }
    if (v.t == TV_FLOAT) {
        if (isfinite(v.u.f) && fabs(v.u.f) < 9.2e18)
            *out = tv_int((int64_t)v.u.f);
        else
            *out = dflt;
        return 0;
    }
    if (v.t == TV_STR) {
        char buf[64];
        tval t = strip(v, tv_none(), true, true);
        if (t.u.s.n == 0 || t.u.s.n >= sizeof buf) {
            *out = dflt;
            return 0;
        }
        size_t k = 0;
        for (size_t i = 0; i < t.u.s.n; i++)
            if (t.u.s.p[i] != '_')
                buf[k++] = t.u.s.p[i];
        buf[k] = '\0';
        char *end;
        long long ll = strtoll(buf, &end, 10);
        if (*end == '\0' && end != buf && buf[0] != ' ') {
            *out = tv_int(ll);
            return 0;
        }
        double d = strtod(buf, &end);
        if (*end == '\0' && end != buf && isfinite(d) && fabs(d) < 9.2e18) {
            *out = tv_int((int64_t)d);
            return 0;
        }
    }
    *out = dflt;
    return 0;
}

static int to_float(tval v, tval dflt, tval *out)
{
    if (is_num(v)) {
        *out = tv_float(num_f(v));
        return 0;
    }
    if (v.t == TV_STR) {
        char buf[64];
        tval t = strip(v, tv_none(), true, true);
        if (t.u.s.n > 0 && t.u.s.n < sizeof buf) {
            memcpy(buf, t.u.s.p, t.u.s.n);
            buf[t.u.s.n] = '\0';
            char *end;
            double d = strtod(buf, &end);
            if (*end == '\0' && !(buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X'))) {
                *out = tv_float(d);
                return 0;
            }
        }
    }
    *out = dflt;
    return 0;
}

static int filter_tojson(rctx *R, const tnode *n, tval in, const targs *a, tval *out)
{
    tjson_opts o = {.indent = -1, .item_sep = ", ", .item_sep_n = 2, .key_sep = ": ", .key_sep_n = 2};
    tval v;
    if (arg(a, 1, "ensure_ascii", &v) && tv_truthy(v))
        return rfail(R, n, CAIRN_EUNSUPPORTED, "unsupported tojson(ensure_ascii=True)");
    if (arg(a, 0, "indent", &v) && v.t != TV_NONE) {
        if (is_intlike(v)) {
            o.indent = num_i(v) < 0 ? 0 : num_i(v) > 64 ? 64 : (int)num_i(v);
        } else if (v.t == TV_STR) {
            o.indent_str = v.u.s.p;
            o.indent_str_n = v.u.s.n;
        } else {
            return rfail(R, n, CAIRN_ETEMPLATE, "tojson indent must be an int or a string");
        }
        o.item_sep = ",";
        o.item_sep_n = 1;
    }
    if (arg(a, 2, "separators", &v) && v.t != TV_NONE) {
        if (v.t != TV_LIST || v.u.l->n != 2 || v.u.l->v[0].t != TV_STR || v.u.l->v[1].t != TV_STR)
            return rfail(R, n, CAIRN_ETEMPLATE, "tojson separators must be a pair of strings");
        o.item_sep = v.u.l->v[0].u.s.p;
        o.item_sep_n = v.u.l->v[0].u.s.n;
        o.key_sep = v.u.l->v[1].u.s.p;
        o.key_sep_n = v.u.l->v[1].u.s.n;
    }
    if (arg(a, 3, "sort_keys", &v))
        o.sort_keys = tv_truthy(v);
    tbuf b = {.limit = R->t->max_output};
    const char *bad = NULL;
    int rc = tv_to_json(&b, in, &o, &bad);
    if (rc == CAIRN_ETEMPLATE)
        rc = rfail(R, n, rc, "Object of type %s is not JSON serializable", bad ? bad : "?");
    if (rc == 0)
        rc = mkstr(R, n, b.p ? b.p : "", b.n, out);
    tbuf_fini(&b);
    return rcheck(R, n, rc);
}

/* map/select/reject/selectattr/rejectattr over a sequence. */
static int filter_seq(rctx *R, frame *f, const tnode *n, const char *name, size_t name_n,
                      tval in, const targs *a, tval *out)
{
    const tval *items;
    size_t cnt, k = 0;
    int rc = iter_items(R, n, in, &items, &cnt);
    if (rc || (rc = mklist(R, n, cnt, false, out)))
        return rc;
    bool is_map = name_is(name, name_n, "map");
    bool by_attr = name_is(name, name_n, "selectattr") || name_is(name, name_n, "rejectattr");
    bool reject = name_is(name, name_n, "reject") || name_is(name, name_n, "rejectattr");
    tval attr = tv_none(), test = tv_none(), dflt = tv_undef();
    size_t first_extra = 0;
    if (is_map) {
        if (arg(a, 0, NULL, &test) && test.t == TV_STR) {
            first_extra = 1; /* map('filter', args...) */
        } else if (!arg(a, 99, "attribute", &attr)) {
            return rfail(R, n, CAIRN_ETEMPLATE, "map needs a filter name or attribute=");
        }
        arg(a, 99, "default", &dflt);
    } else if (by_attr) {
        if (!arg(a, 0, "attribute", &attr))
            return rfail(R, n, CAIRN_ETEMPLATE, "%.*s needs an attribute", (int)name_n, name);
        arg(a, 1, NULL, &test);
        first_extra = 2;
    } else {
        arg(a, 0, NULL, &test);
        first_extra = 1;
    }
    if (test.t != TV_NONE && (rc = want_str(R, n, test, "test or filter name")))
        return rc;
    const tval *extra = a->npos > first_extra ? a->pos + first_extra : NULL;
    size_t nextra = a->npos > first_extra ? a->npos - first_extra : 0;
    for (size_t i = 0; i < cnt; i++) {
        tval v = items[i];
        if (attr.t != TV_NONE) {
            if ((rc = attr_path(R, n, items[i], attr, &v)))
                return rc;
            if (is_map && v.t == TV_UNDEF && dflt.t != TV_UNDEF)
                v = dflt;
        }
        if (is_map) {
            if (test.t == TV_STR &&
                (rc = apply_filter(R, f, n, test.u.s.p, test.u.s.n, v, extra, nextra, NULL, NULL, NULL, 0, &v)))
                return rc;
            out->u.l->v[k++] = v;
            continue;
        }
        bool keep;
        if (test.t == TV_STR) {
            if ((rc = apply_test(R, n, test.u.s.p, test.u.s.n, v, extra, nextra, &keep)))
                return rc;
        } else {
            keep = tv_truthy(v);
        }
        if (keep != reject)
            out->u.l->v[k++] = items[i];
    }
    out->u.l->n = k;
    return 0;
}

/* Sort key of an item: lowercased when it is a string and the sort is case-insensitive. */
static int sort_key(rctx *R, const tnode *n, tval v, bool case_sensitive, tval *out)
{
    if (v.t == TV_STR && !case_sensitive)
        return change_case(R, n, v, CASE_LOWER, out);
    *out = v;
    return 0;
}

/* dictsort(case_sensitive=False, by='key', reverse=False) and
 * sort(reverse=False, case_sensitive=False, attribute=None): stable, as Python's sorted. */
static int filter_sort(rctx *R, const tnode *n, bool dict, tval in, const targs *a, tval *out)
{
    tval cs = tv_bool(false), rev = tv_bool(false), by = tv_str("key", 3), attr = tv_none();
    int rc;
    if (dict) {
        arg(a, 0, "case_sensitive", &cs);
        arg(a, 1, "by", &by);
        arg(a, 2, "reverse", &rev);
        if (in.t != TV_DICT)
            return rfail(R, n, CAIRN_ETEMPLATE, "dictsort expects a mapping");
        if (!(by.t == TV_STR && (by.u.s.n == 3 || by.u.s.n == 5)))
            return rfail(R, n, CAIRN_ETEMPLATE, "You can only sort by either \"key\" or \"value\"");
        tmethod m = {.self = in, .id = M_ITEMS};
        targs none = {0};
        if ((rc = call_method(R, n, &m, &none, out)))
            return rc;
    } else {
        const tval *items;
        size_t cnt;
        arg(a, 0, "reverse", &rev);
        arg(a, 1, "case_sensitive", &cs);
        arg(a, 2, "attribute", &attr);
        if ((rc = iter_items(R, n, in, &items, &cnt)) || (rc = mklist(R, n, cnt, false, out)))
            return rc;
        if (cnt)
            memcpy(out->u.l->v, items, cnt * sizeof(tval));
    }
    tlist *l = out->u.l;
    tval *keys = l->n ? tarena_alloc(R->a, l->n * sizeof(tval)) : NULL;
    if (l->n && !keys)
        return rcheck(R, n, CAIRN_ENOMEM);
    for (size_t i = 0; i < l->n; i++) {
        tval k = l->v[i];
        if (dict)
            k = k.u.l->v[by.u.s.n == 3 ? 0 : 1];
        else if (attr.t != TV_NONE && (rc = attr_path(R, n, k, attr, &k)))
            return rc;
        if ((rc = sort_key(R, n, k, tv_truthy(cs), &keys[i])))
            return rc;
    }
    bool desc = tv_truthy(rev);
    for (size_t i = 1; i < l->n; i++) {
        for (size_t j = i; j > 0; j--) {
            int cmp;
            if ((rc = step(R, n)) || (rc = order(R, n, OP_LT, keys[j - 1], keys[j], &cmp)))
                return rc;
            if (desc ? cmp >= 0 : cmp <= 0)
                break;
            tval t = keys[j]; keys[j] = keys[j - 1]; keys[j - 1] = t;
            t = l->v[j]; l->v[j] = l->v[j - 1]; l->v[j - 1] = t;
        }
    }
    return 0;
}

static int apply_filter(rctx *R, frame *f, const tnode *n, const char *name, size_t name_n,
                        tval in, const tval *args, size_t nargs, const char *const *kwn,
                        const size_t *kwl, const tval *kwv, size_t nkw, tval *out)
{
    targs a = {.pos = (tval *)args, .npos = nargs, .kwn = kwn, .kwl = kwl, .kwv = (tval *)kwv, .nkw = nkw};
    tval x, y, s;
    int rc;
#define IS(lit) name_is(name, name_n, lit)
    if (IS("safe")) {
        *out = in;
        return 0;
    }
    if (IS("default") || IS("d")) {
        tval dflt = tv_str("", 0), boolean = tv_bool(false);
        arg(&a, 0, "default_value", &dflt);
        arg(&a, 1, "boolean", &boolean);
        *out = (in.t == TV_UNDEF || (tv_truthy(boolean) && !tv_truthy(in))) ? dflt : in;
        return 0;
    }
    if (IS("tojson"))
        return filter_tojson(R, n, in, &a, out);
    if (IS("length") || IS("count")) {
        switch (in.t) {
        case TV_UNDEF: *out = tv_int(0); return 0;
        case TV_STR: *out = tv_int((int64_t)tv_utf8_len(in.u.s.p, in.u.s.n)); return 0;
        case TV_LIST: *out = tv_int((int64_t)in.u.l->n); return 0;
        case TV_DICT: *out = tv_int((int64_t)in.u.d->n); return 0;
        default:
            return rfail(R, n, CAIRN_ETEMPLATE, "object of type '%s' has no len()", tv_type_name(in));
        }
    }
    if (IS("string"))
        return to_str(R, n, in, out);
    if (IS("list") || IS("first") || IS("last") || IS("reverse")) {
        const tval *items;
        size_t cnt;
        if (IS("reverse") && in.t != TV_STR && in.t != TV_LIST && in.t != TV_DICT && in.t != TV_UNDEF)
            return rfail(R, n, CAIRN_ETEMPLATE, "argument to reverse() is not reversible");
        if ((rc = iter_items(R, n, in, &items, &cnt)))
            return rc;
        if (IS("first")) {
            *out = cnt ? items[0] : tv_undef();
            return 0;
        }
        if (IS("last")) {
            *out = cnt ? items[cnt - 1] : tv_undef();
            return 0;
        }
        if (IS("reverse") && in.t == TV_STR) {
            char *p = tarena_alloc(R->a, in.u.s.n + 1);
            if (!p)
                return rcheck(R, n, CAIRN_ENOMEM);
            size_t off = 0;
            for (size_t i = cnt; i-- > 0;) {
                memcpy(p + off, items[i].u.s.p, items[i].u.s.n);
                off += items[i].u.s.n;
            }
            *out = tv_str(p, off);
            return 0;
        }
        if ((rc = mklist(R, n, cnt, false, out)))
            return rc;
        for (size_t i = 0; i < cnt; i++)
            out->u.l->v[i] = IS("reverse") ? items[cnt - 1 - i] : items[i];
        return 0;
    }
    if (IS("join")) {
        const tval *items;
        size_t cnt;
        tval sep = tv_str("", 0), attr = tv_none();
        arg(&a, 0, "d", &sep);
        arg(&a, 1, "attribute", &attr);
        if ((rc = to_str(R, n, sep, &sep)) || (rc = iter_items(R, n, in, &items, &cnt)))
            return rc;
        if (attr.t != TV_NONE) {
            tval *mapped = cnt ? tarena_alloc(R->a, cnt * sizeof(tval)) : NULL;
            if (cnt && !mapped)
                return rcheck(R, n, CAIRN_ENOMEM);
            for (size_t i = 0; i < cnt; i++)
                if ((rc = attr_path(R, n, items[i], attr, &mapped[i])))
                    return rc;
            items = mapped;
        }
        return join_values(R, n, sep, items, cnt, out);
    }
    if (IS("items")) {
        if (in.t == TV_UNDEF)
            return mklist(R, n, 0, false, out);
        if (in.t != TV_DICT)
            return rfail(R, n, CAIRN_ETEMPLATE, "can only get item pairs from a mapping");
        tmethod m = {.self = in, .id = M_ITEMS};
        targs none = {0};
        return call_method(R, n, &m, &none, out);
    }
    if (IS("map") || IS("select") || IS("reject") || IS("selectattr") || IS("rejectattr"))
        return filter_seq(R, f, n, name, name_n, in, &a, out);
    if (IS("dictsort") || IS("sort"))
        return filter_sort(R, n, IS("dictsort"), in, &a, out);
    if (IS("int")) {
        tval dflt = tv_int(0);
        arg(&a, 0, "default", &dflt);
        if (arg(&a, 1, "base", &x) && !(is_intlike(x) && num_i(x) == 10))
            return rfail(R, n, CAIRN_EUNSUPPORTED, "unsupported int(base=...) other than 10");
        return to_int(in, dflt, out);
    }
    if (IS("float")) {
        tval dflt = tv_float(0.0);
        arg(&a, 0, "default", &dflt);
        return to_float(in, dflt, out);
    }
    if (IS("abs")) {
        if (in.t == TV_FLOAT) *out = tv_float(fabs(in.u.f));
        else if (is_intlike(in) && num_i(in) != INT64_MIN) *out = tv_int(num_i(in) < 0 ? -num_i(in) : num_i(in));
        else return rfail(R, n, CAIRN_ETEMPLATE, "bad operand type for abs(): '%s'", tv_type_name(in));
        return 0;
    }
    /* the string filters work on str(value) */
    if ((rc = to_str(R, n, in, &s)))
        return rc;
    if (IS("trim")) {
        x = tv_none();
        arg(&a, 0, "chars", &x);
        if (x.t != TV_NONE && (rc = want_str(R, n, x, "chars")))
            return rc;
        *out = strip(s, x, true, true);
        return 0;
    }
    if (IS("upper")) return change_case(R, n, s, CASE_UPPER, out);
    if (IS("lower")) return change_case(R, n, s, CASE_LOWER, out);
    if (IS("capitalize")) return change_case(R, n, s, CASE_CAPITALIZE, out);
    if (IS("title")) return change_case(R, n, s, CASE_TITLE_JINJA, out);
    if (IS("replace")) {
        tval cnt = tv_none();
        if (!arg(&a, 0, "old", &x) || !arg(&a, 1, "new", &y))
            return rfail(R, n, CAIRN_ETEMPLATE, "replace expects 2 arguments");
        arg(&a, 2, "count", &cnt);
        if ((rc = to_str(R, n, x, &x)) || (rc = to_str(R, n, y, &y)))
            return rc;
        if (cnt.t != TV_NONE && !is_intlike(cnt))
            return rfail(R, n, CAIRN_ETEMPLATE, "count must be an integer");
        return str_replace(R, n, s, x, y, cnt.t == TV_NONE ? -1 : num_i(cnt), out);
    }
    if (IS("indent")) {
        tval width = tv_int(4), first = tv_bool(false), blank = tv_bool(false), ind;
        arg(&a, 0, "width", &width);
        arg(&a, 1, "first", &first);
        arg(&a, 2, "blank", &blank);
        if (width.t == TV_STR) {
            ind = width;
        } else if (is_intlike(width) && num_i(width) >= 0 && num_i(width) <= 256) {
            static const char spaces[257] = {[0 ... 255] = ' '};
            ind = tv_str(spaces, (size_t)num_i(width));
        } else {
            return rfail(R, n, CAIRN_ETEMPLATE, "indent width must be a small int or a string");
        }
        tbuf b = {.limit = R->t->max_output};
        rc = 0;
        if (tv_truthy(first))
            rc = tbuf_put(&b, ind.u.s.p, ind.u.s.n);
        /* s + "\n" split into lines; every line after the first gets the indent, unless
         * it is empty and blank is false */
        size_t i = 0;
        bool first_line = true;
        while (rc == 0 && i < s.u.s.n) {
            const char *nl = memchr(s.u.s.p + i, '\n', s.u.s.n - i);
            size_t e = nl ? (size_t)(nl - s.u.s.p) : s.u.s.n;
            if (!first_line) {
                rc = tbuf_putc(&b, '\n');
                if (rc == 0 && (e > i || tv_truthy(blank)))
                    rc = tbuf_put(&b, ind.u.s.p, ind.u.s.n);
            }
            if (rc == 0)
                rc = tbuf_put(&b, s.u.s.p + i, e - i);
            first_line = false;
            i = e + 1;
        }
        if (rc == 0)
            rc = mkstr(R, n, b.p ? b.p : "", b.n, out);
        tbuf_fini(&b);
        return rcheck(R, n, rc);
    }
#undef IS
    return rfail(R, n, CAIRN_EUNSUPPORTED, "unsupported filter '%.*s'", (int)name_n, name);
}

/* ---- Tests -------------------------------------------------------------------------- */

static int apply_test(rctx *R, const tnode *n, const char *name, size_t name_n, tval v,
                      const tval *args, size_t nargs, bool *out)
{
#define IS(lit) name_is(name, name_n, lit)
    tval x = nargs ? args[0] : tv_undef();
    if (IS("defined")) *out = v.t != TV_UNDEF;
    else if (IS("undefined")) *out = v.t == TV_UNDEF;
    else if (IS("none")) *out = v.t == TV_NONE;
    else if (IS("string")) *out = v.t == TV_STR;
    else if (IS("mapping")) *out = v.t == TV_DICT;
    else if (IS("iterable")) *out = v.t == TV_UNDEF || v.t == TV_STR || v.t == TV_LIST || v.t == TV_DICT;
    else if (IS("sequence")) *out = v.t == TV_UNDEF || v.t == TV_STR || v.t == TV_LIST || v.t == TV_DICT;
    else if (IS("number")) *out = is_num(v);
    else if (IS("integer")) *out = v.t == TV_INT;
    else if (IS("float")) *out = v.t == TV_FLOAT;
    else if (IS("boolean")) *out = v.t == TV_BOOL;
    else if (IS("true")) *out = v.t == TV_BOOL && v.u.b;
    else if (IS("false")) *out = v.t == TV_BOOL && !v.u.b;
    else if (IS("callable")) *out = v.t == TV_MACRO || v.t == TV_FUNC || v.t == TV_METHOD;
    else if (IS("odd") || IS("even") || IS("divisibleby")) {
        int64_t d = IS("divisibleby") ? (is_intlike(x) ? num_i(x) : 0) : 2;
        if (!is_intlike(v) || d == 0)
            return rfail(R, n, CAIRN_ETEMPLATE, "test '%.*s' needs integers", (int)name_n, name);
        int64_t m = d == -1 ? 0 : num_i(v) % d;
        *out = IS("odd") ? m != 0 : m == 0;
    } else if (IS("eq") || IS("equalto") || IS("==")) *out = tv_equal(v, x);
    else if (IS("ne") || IS("!=")) *out = !tv_equal(v, x);
    else if (IS("sameas")) *out = v.t == x.t && tv_equal(v, x);
    else if (IS("lt") || IS("lessthan") || IS("le") || IS("gt") || IS("greaterthan") || IS("ge")) {
        top op = IS("lt") || IS("lessthan") ? OP_LT : IS("le") ? OP_LE : IS("ge") ? OP_GE : OP_GT;
        tval r;
        int rc = compare(R, n, op, v, x, &r);
        if (rc)
            return rc;
        *out = r.u.b;
    } else if (IS("in")) {
        return contains(R, n, v, x, out);
    } else if (IS("lower") || IS("upper")) {
        bool lower = IS("lower"), cased = false, ok = v.t == TV_STR;
        for (size_t i = 0; ok && i < v.u.s.n; i++) {
            char c = v.u.s.p[i];
            if ((lower && c >= 'A' && c <= 'Z') || (!lower && c >= 'a' && c <= 'z'))
                ok = false;
            cased |= (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
        }
        *out = ok && cased;
    } else if (IS("escaped")) *out = false;
    else
        return rfail(R, n, CAIRN_EUNSUPPORTED, "unsupported test '%.*s'", (int)name_n, name);
#undef IS
    return 0;
}

/* ---- Expressions -------------------------------------------------------------------- */

static int eval_inner(rctx *R, frame *f, const tnode *n, tval *out)
{
    tval a, b;
    int rc;
    switch (n->kind) {
    case E_CONST:
        *out = n->cval;
        return 0;
    case E_NAME:
        *out = lookup(R, f, n->name, n->name_n);
        return 0;
    case E_LIST:
    case E_TUPLE:
        if ((rc = mklist(R, n, n->items.n, n->kind == E_TUPLE, out)))
            return rc;
        for (size_t i = 0; i < n->items.n; i++)
            if ((rc = eval(R, f, n->items.v[i], &out->u.l->v[i])))
                return rc;
        return 0;
    case E_DICT:
        if ((rc = mkdict(R, n, out, TV_DICT)))
            return rc;
        for (size_t i = 0; i + 1 < n->items.n; i += 2) {
            if ((rc = eval(R, f, n->items.v[i], &a)) || (rc = eval(R, f, n->items.v[i + 1], &b)))
                return rc;
            if (a.t == TV_LIST && !a.u.l->is_tuple)
                return rfail(R, n, CAIRN_ETEMPLATE, "unhashable type: 'list'");
            if (a.t == TV_DICT || a.t == TV_NS)
                return rfail(R, n, CAIRN_ETEMPLATE, "unhashable type: '%s'", tv_type_name(a));
            if ((rc = rcheck(R, n, tdict_set(R->a, out->u.d, a, b))))
                return rc;
        }
        return 0;
    case E_ATTR:
        if ((rc = eval(R, f, n->a, &a)))
            return rc;
        return get_attr(R, n, a, n->name, n->name_n, out);
    case E_ITEM:
        if ((rc = eval(R, f, n->a, &a)) || (rc = eval(R, f, n->b, &b)))
            return rc;
        return get_item(R, n, a, b, out);
    case E_SLICE: {
        tval parts[3];
        if ((rc = eval(R, f, n->a, &a)))
            return rc;
        for (int k = 0; k < 3; k++) {
            parts[k] = tv_none();
            if (n->items.v[k] && (rc = eval(R, f, n->items.v[k], &parts[k])))
                return rc;
        }
        return do_slice(R, n, a, parts, out);
    }
    case E_CALL:
        return eval_call(R, f, n, out);
    case E_FILTER: {
        targs args;
        if ((rc = eval(R, f, n->a, &a)) || (rc = eval_args(R, f, n, 0, &args)))
            return rc;
        return apply_filter(R, f, n, n->name, n->name_n, a, args.pos, args.npos, args.kwn,
                            args.kwl, args.kwv, args.nkw, out);
    }
    case E_TEST: {
        targs args;
        bool r;
        if ((rc = eval(R, f, n->a, &a)) || (rc = eval_args(R, f, n, 0, &args)))
            return rc;
        if ((rc = apply_test(R, n, n->name, n->name_n, a, args.pos, args.npos, &r)))
            return rc;
        *out = tv_bool(r != n->negated);
        return 0;
    }
    case E_NEG:
    case E_POS:
        if ((rc = eval(R, f, n->a, &a)))
            return rc;
        if (a.t == TV_UNDEF)
            return undefined_error(R, n, a);
        if (a.t == TV_FLOAT)
            *out = tv_float(n->kind == E_NEG ? -a.u.f : a.u.f);
        else if (is_intlike(a) && !(n->kind == E_NEG && num_i(a) == INT64_MIN))
            *out = tv_int(n->kind == E_NEG ? -num_i(a) : num_i(a));
        else
            return rfail(R, n, CAIRN_ETEMPLATE, "bad operand type for unary %c: '%s'",
                         n->kind == E_NEG ? '-' : '+', tv_type_name(a));
        return 0;
    case E_NOT:
        if ((rc = eval(R, f, n->a, &a)))
            return rc;
        *out = tv_bool(!tv_truthy(a));
        return 0;
    case E_AND:
    case E_OR:
        if ((rc = eval(R, f, n->a, &a)))
            return rc;
        if (tv_truthy(a) == (n->kind == E_OR)) {
            *out = a;
            return 0;
        }
        return eval(R, f, n->b, out);
    case E_BINOP:
        if ((rc = eval(R, f, n->a, &a)) || (rc = eval(R, f, n->b, &b)))
            return rc;
        return arith(R, n, n->op, a, b, out);
    case E_CONCAT: {
        if ((rc = eval(R, f, n->a, &a)) || (rc = eval(R, f, n->b, &b)))
            return rc;
        if ((rc = to_str(R, n, a, &a)) || (rc = to_str(R, n, b, &b)))
            return rc;
        return arith(R, n, OP_ADD, a, b, out);
    }
    case E_COMPARE:
        if ((rc = eval(R, f, n->a, &a)) || (rc = eval(R, f, n->b, &b)))
            return rc;
        return compare(R, n, n->op, a, b, out);
    case E_COND:
        if ((rc = eval(R, f, n->b, &a)))
            return rc;
        if (tv_truthy(a))
            return eval(R, f, n->a, out);
        if (n->c)
            return eval(R, f, n->c, out);
        *out = tv_undef();
        return 0;
    default:
        return rfail(R, n, CAIRN_ETEMPLATE, "internal error: statement used as expression");
    }
}

static int step(rctx *R, const tnode *n)
{
    if (++R->steps > R->t->max_steps)
        return rfail(R, n, CAIRN_ERANGE, "render exceeded its step limit");
    return 0;
}

static int eval(rctx *R, frame *f, const tnode *n, tval *out)
{
    int rc = step(R, n);
    if (rc)
        return rc;
    if (++R->depth > MAX_EVAL_DEPTH) {
        R->depth--;
        return rfail(R, n, CAIRN_ERANGE, "evaluation nested too deeply");
    }
    rc = eval_inner(R, f, n, out);
    R->depth--;
    return rc;
}

/* ---- Statements --------------------------------------------------------------------- */

static int assign(rctx *R, frame *f, const tnode *n, const tnodes *targets, tval v)
{
    int rc;
    if (targets->n > 1) {
        const tval *items;
        size_t cnt;
        if (v.t != TV_LIST && v.t != TV_STR)
            return rfail(R, n, CAIRN_ETEMPLATE, "cannot unpack non-iterable %s object", tv_type_name(v));
        if ((rc = iter_items(R, n, v, &items, &cnt)))
            return rc;
        if (cnt != targets->n)
            return rfail(R, n, CAIRN_ETEMPLATE, "expected %zu values to unpack, got %zu", targets->n, cnt);
        for (size_t i = 0; i < cnt; i++) {
            tnodes one = {.v = &targets->v[i], .n = 1};
            if ((rc = assign(R, f, n, &one, items[i])))
                return rc;
        }
        return 0;
    }
    const tnode *t = targets->v[0];
    if (t->kind == E_NAME)
        return frame_set(R, n, f, t->name, t->name_n, v);
    /* ns.attr = v */
    tval ns = lookup(R, f, t->a->name, t->a->name_n);
    if (ns.t != TV_NS)
        return rfail(R, n, CAIRN_ETEMPLATE, "cannot assign attribute on non-namespace object");
    return rcheck(R, n, tdict_set(R->a, ns.u.d, tv_str(t->name, t->name_n), v));
}

static int exec_for(rctx *R, frame *f, const tnode *n)
{
    tval it;
    const tval *items;
    size_t cnt;
    int rc = eval(R, f, n->a, &it);
    if (rc || (rc = iter_items(R, n, it, &items, &cnt)))
        return rc;
    frame *lf = tarena_alloc(R->a, sizeof *lf);
    tloop *lp = tarena_alloc(R->a, sizeof *lp);
    if (!lf || !lp)
        return rcheck(R, n, CAIRN_ENOMEM);
    lf->parent = f;
    if (n->b) {
        /* `for x in xs if cond`: filter first, so loop.length counts kept items */
        tval *kept = cnt ? tarena_alloc(R->a, cnt * sizeof(tval)) : NULL;
        size_t k = 0;
        if (cnt && !kept)
            return rcheck(R, n, CAIRN_ENOMEM);
        for (size_t i = 0; i < cnt; i++) {
            tval c;
            lf->vars.n = 0;
            if ((rc = step(R, n)) || (rc = assign(R, lf, n, &n->items, items[i])) ||
                (rc = eval(R, lf, n->b, &c)))
                return rc;
            if (tv_truthy(c))
                kept[k++] = items[i];
        }
        items = kept;
        cnt = k;
    }
    lp->items = items;
    lp->n = cnt;
    tval loopv = {.t = TV_LOOP};
    loopv.u.lp = lp;
    for (size_t i = 0; i < cnt; i++) {
        lp->i = i;
        lf->vars.n = 0; /* a fresh scope per iteration, as in Jinja2 */
        if ((rc = step(R, n)) || (rc = frame_set(R, n, lf, "loop", 4, loopv)) ||
            (rc = assign(R, lf, n, &n->items, items[i])))
            return rc;
        rc = exec_body(R, lf, &n->body);
        if (rc == SIG_BREAK)
            break;
        if (rc < 0)
            return rc;
    }
    if (cnt == 0 && n->else_body.n)
        return exec_body(R, f, &n->else_body);
    return 0;
}

static int exec_node(rctx *R, frame *f, const tnode *n)
{
    tval v;
    int rc = step(R, n);
    if (rc)
        return rc;
    switch (n->kind) {
    case N_TEXT:
        return rcheck(R, n, tbuf_put(R->out, n->cval.u.s.p, n->cval.u.s.n));
    case N_OUTPUT:
        if ((rc = eval(R, f, n->a, &v)))
            return rc;
        return rcheck(R, n, tv_to_str(R->out, v));
    case N_IF:
        if ((rc = eval(R, f, n->a, &v)))
            return rc;
        return exec_body(R, f, tv_truthy(v) ? &n->body : &n->else_body);
    case N_FOR:
        return exec_for(R, f, n);
    case N_SET:
        if ((rc = eval(R, f, n->a, &v)))
            return rc;
        return assign(R, f, n, &n->items, v);
    case N_SET_BLOCK: {
        tbuf body = {.limit = R->t->max_output};
        tbuf *saved = R->out;
        R->out = &body;
        rc = exec_body(R, f, &n->body);
        R->out = saved;
        if (rc == 0)
            rc = mkstr(R, n, body.p ? body.p : "", body.n, &v);
        tbuf_fini(&body);
        if (rc == 0)
            rc = assign(R, f, n, &n->items, v);
        return rc;
    }
    case N_MACRO:
        v.t = TV_MACRO;
        v.u.macro = n;
        return frame_set(R, n, f, n->name, n->name_n, v);
    case N_BREAK:
        return SIG_BREAK;
    case N_CONTINUE:
        return SIG_CONTINUE;
    case N_GROUP:
        return exec_body(R, f, &n->body);
    default:
        return rfail(R, n, CAIRN_ETEMPLATE, "internal error: expression used as statement");
    }
}

static int exec_body(rctx *R, frame *f, const tnodes *body)
{
    if (++R->depth > MAX_EVAL_DEPTH) {
        R->depth--;
        return rfail(R, NULL, CAIRN_ERANGE, "evaluation nested too deeply");
    }
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < body->n; i++)
        rc = exec_node(R, f, body->v[i]);
    R->depth--;
    return rc;
}

int trender(const cairn_chat_template_t *t, const cJSON *context, tbuf *out, char *err,
            size_t errlen)
{
    tarena arena = {.limit = t->max_output * 4 + ((size_t)64 << 20)};
    rctx R = {.t = t, .a = &arena, .out = out, .err = err, .errlen = errlen};
    int rc = 0;
    frame *root = tarena_alloc(&arena, sizeof *root);
    if (!root) {
        rc = rcheck(&R, NULL, CAIRN_ENOMEM);
        goto done;
    }
    R.root = root;
    if (context) {
        const cJSON *it;
        cJSON_ArrayForEach(it, context)
        {
            tval v;
            const char *k = it->string ? it->string : "";
            if ((rc = rcheck(&R, NULL, tv_from_cjson(&arena, it, &v))) ||
                (rc = frame_set(&R, NULL, root, k, strlen(k), v)))
                goto done;
        }
    }
    rc = exec_body(&R, root, &t->body);
    if (rc > 0)
        rc = rfail(&R, NULL, CAIRN_ETEMPLATE, "'break' or 'continue' outside of a loop");
done:
    tarena_free(&arena);
    return rc;
}
