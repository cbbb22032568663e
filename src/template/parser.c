/*
 * parser.c — recursive-descent parser from tokens to the template AST.
 *
 * The expression grammar and operator precedence follow jinja2/parser.py, lowest first:
 *   cond (`a if c else b`) < or < and < not < compare (== != < <= > >= in, not in)
 *   < + - < ~ < * / // % < ** < unary - + < primary with postfix (. [] ()) and then
 *   filters/tests (`|f`, `is t`), which bind tighter than every binary operator.
 * Statements: if/elif/else, for (targets, `if` filter, else), set (name, ns.attr,
 * tuple unpacking, block set), macro, break/continue, generation. Other Jinja2 tags
 * are reported as unsupported with their position.
 * Invariants: every node lives in the template arena; nesting (blocks, parentheses and
 * operator chains) is bounded by TMPL_MAX_DEPTH so neither parsing nor rendering can
 * overflow the stack. Thread-safety: pure function of its input.
 */
#include <stdio.h>
#include <string.h>

#include "template/template_impl.h"

typedef struct {
    tarena *a;
    const ttok *t;
    size_t n, i;
    char *err;
    size_t errlen;
    int depth;
} parser;

static const ttok *cur(parser *P) { return &P->t[P->i < P->n ? P->i : P->n - 1]; }
static const ttok *peek(parser *P, size_t k) { return &P->t[P->i + k < P->n ? P->i + k : P->n - 1]; }
static void adv(parser *P) { if (P->i + 1 < P->n) P->i++; }

static bool tok_is(const ttok *t, ttok_type type, const char *s)
{
    return t->type == type && (!s || (t->n == strlen(s) && memcmp(t->s, s, t->n) == 0));
}
static bool is_op(parser *P, const char *s) { return tok_is(cur(P), TK_OP, s); }
static bool is_name(parser *P, const char *s) { return tok_is(cur(P), TK_NAME, s); }
static bool accept_op(parser *P, const char *s) { if (is_op(P, s)) { adv(P); return true; } return false; }
static bool accept_name(parser *P, const char *s) { if (is_name(P, s)) { adv(P); return true; } return false; }

static int fail_at(parser *P, const ttok *t, int code, const char *fmt, const char *arg)
{
    char msg[160];
    snprintf(msg, sizeof msg, fmt, arg);
    terr(P->err, P->errlen, "%s at line %d, column %d", msg, t->line, t->col);
    return code;
}

static const char *tok_desc(const ttok *t, char *buf, size_t n)
{
    switch (t->type) {
    case TK_EOF: return "end of template";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_END: return "'%}'";
    case TK_STRING: return "a string";
    default: snprintf(buf, n, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s); return buf;
    }
}

static int unexpected(parser *P, const char *expected)
{
    char buf[64], msg[160];
    snprintf(msg, sizeof msg, "syntax error: expected %s, got %s", expected,
             tok_desc(cur(P), buf, sizeof buf));
    return fail_at(P, cur(P), CAIRN_ETEMPLATE, "%s", msg);
}

static int expect_op(parser *P, const char *s)
{
    if (accept_op(P, s))
        return 0;
    char want[16];
    snprintf(want, sizeof want, "'%s'", s);
    return unexpected(P, want);
}

static int expect_type(parser *P, ttok_type type, const char *what)
{
    if (cur(P)->type == type) {
        adv(P);
        return 0;
    }
    return unexpected(P, what);
}

static tnode *mk(parser *P, tnode_kind kind, const ttok *at)
{
    tnode *n = tarena_alloc(P->a, sizeof *n);
    if (n) {
        n->kind = kind;
        n->line = at->line;
        n->col = at->col;
    }
    return n;
}

/* Appends to a node list kept in the arena; *cap tracks its capacity. */
static int push(parser *P, tnodes *v, size_t *cap, tnode *x)
{
    if (v->n == *cap) {
        size_t c = *cap ? *cap * 2 : 4;
        tnode **p = tarena_alloc(P->a, c * sizeof(tnode *));
        if (!p)
            return CAIRN_ENOMEM;
        if (v->n)
            memcpy(p, v->v, v->n * sizeof(tnode *));
        v->v = p;
        *cap = c;
    }
    v->v[v->n++] = x;
    return 0;
}

static int deeper(parser *P)
{
    if (++P->depth > TMPL_MAX_DEPTH)
        return fail_at(P, cur(P), CAIRN_ERANGE, "%s", "template nested too deeply");
    return 0;
}

#define TRY(x) do { int rc_ = (x); if (rc_) return rc_; } while (0)
#define NEW(var, kind, at) do { var = mk(P, kind, at); if (!var) return CAIRN_ENOMEM; } while (0)

static int parse_expr(parser *P, tnode **out);
static int parse_or(parser *P, tnode **out);
static int parse_unary(parser *P, bool with_filter, tnode **out);
static int parse_primary(parser *P, tnode **out);
static int parse_postfix(parser *P, tnode **node);

/* ( args ) for calls, filters and tests: positional, then name=value keywords. */
static int parse_call_args(parser *P, tnode *n)
{
    size_t cap = 0, kcap = 0;
    TRY(expect_op(P, "("));
    while (!is_op(P, ")")) {
        if (n->items.n + n->kw_vals.n)
            TRY(expect_op(P, ","));
        if (is_op(P, ")"))
            break;
        if (is_op(P, "*") || is_op(P, "**"))
            return fail_at(P, cur(P), CAIRN_EUNSUPPORTED, "%s", "unsupported *args/**kwargs in call");
        if (cur(P)->type == TK_NAME && tok_is(peek(P, 1), TK_OP, "=")) {
            const ttok *k = cur(P);
            adv(P);
            adv(P);
            tnode *v;
            TRY(parse_expr(P, &v));
            if (n->kw_vals.n == kcap) {
                size_t c = kcap ? kcap * 2 : 4;
                const char **names = tarena_alloc(P->a, c * sizeof(char *));
                size_t *lens = tarena_alloc(P->a, c * sizeof(size_t));
                if (!names || !lens)
                    return CAIRN_ENOMEM;
                if (n->kw_vals.n) {
                    memcpy(names, n->kw_names, n->kw_vals.n * sizeof(char *));
                    memcpy(lens, n->kw_name_n, n->kw_vals.n * sizeof(size_t));
                }
                n->kw_names = names;
                n->kw_name_n = lens;
            }
            n->kw_names[n->kw_vals.n] = k->s;
            n->kw_name_n[n->kw_vals.n] = k->n;
            size_t c2 = kcap;
            TRY(push(P, &n->kw_vals, &c2, v));
            kcap = c2;
        } else {
            if (n->kw_vals.n)
                return unexpected(P, "a keyword argument (positional after keyword)");
            tnode *v;
            TRY(parse_expr(P, &v));
            TRY(push(P, &n->items, &cap, v));
        }
    }
    adv(P);
    return 0;
}

/*
 * Comma-separated expressions; a tuple when there is a comma (or explicit parentheses
 * around nothing). with_cond=false stops at `if`, as in the iterable of a for loop.
 */
static int parse_tuple(parser *P, bool with_cond, bool parens, tnode **out)
{
    const ttok *at = cur(P);
    tnode *tup;
    NEW(tup, E_TUPLE, at);
    size_t cap = 0;
    bool is_tuple = false;
    for (;;) {
        if (tup->items.n)
            TRY(expect_op(P, ","));
        const ttok *t = cur(P);
        if (t->type == TK_VAR_END || t->type == TK_BLOCK_END || tok_is(t, TK_OP, ")") ||
            tok_is(t, TK_NAME, "in") || tok_is(t, TK_NAME, "recursive"))
            break;
        tnode *e;
        TRY(with_cond ? parse_expr(P, &e) : parse_or(P, &e));
        TRY(push(P, &tup->items, &cap, e));
        if (is_op(P, ","))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (tup->items.n) {
            *out = tup->items.v[0];
            return 0;
        }
        if (!parens)
            return unexpected(P, "an expression");
    }
    *out = tup;
    return 0;
}

static int parse_subscript(parser *P, tnode **node)
{
    const ttok *at = cur(P);
    adv(P); /* [ */
    tnode *parts[3] = {NULL, NULL, NULL};
    int k = 0;
    bool slice = false;
    for (;;) {
        if (!is_op(P, ":") && !is_op(P, "]"))
            TRY(parse_expr(P, &parts[k]));
        if (is_op(P, ":") && k < 2) {
            adv(P);
            slice = true;
            k++;
            continue;
        }
        break;
    }
    if (is_op(P, ","))
        return fail_at(P, cur(P), CAIRN_EUNSUPPORTED, "%s", "unsupported tuple subscript");
    TRY(expect_op(P, "]"));
    tnode *n;
    if (slice) {
        NEW(n, E_SLICE, at);
        size_t cap = 0;
        for (int i = 0; i < 3; i++)
            TRY(push(P, &n->items, &cap, parts[i]));
    } else {
        if (!parts[0])
            return unexpected(P, "an index");
        NEW(n, E_ITEM, at);
        n->b = parts[0];
    }
    n->a = *node;
    *node = n;
    return 0;
}

static int parse_postfix(parser *P, tnode **node)
{
    int saved = P->depth, rc = 0;
    for (;;) {
        const ttok *at = cur(P);
        if (is_op(P, ".")) {
            TRY(deeper(P));
            adv(P);
            tnode *n;
            if (cur(P)->type == TK_NAME) {
                NEW(n, E_ATTR, at);
                n->name = cur(P)->s;
                n->name_n = cur(P)->n;
            } else if (cur(P)->type == TK_INT) {
                NEW(n, E_ITEM, at);
                tnode *c;
                NEW(c, E_CONST, cur(P));
                c->cval = tv_int(cur(P)->i);
                n->b = c;
            } else {
                return unexpected(P, "an attribute name");
            }
            adv(P);
            n->a = *node;
            *node = n;
        } else if (is_op(P, "[")) {
            TRY(deeper(P));
            TRY(parse_subscript(P, node));
        } else if (is_op(P, "(")) {
            TRY(deeper(P));
            tnode *n;
            NEW(n, E_CALL, at);
            n->a = *node;
            TRY(parse_call_args(P, n));
            *node = n;
        } else {
            break;
        }
    }
    P->depth = saved;
    return rc;
}

static int parse_filter_expr(parser *P, tnode **node)
{
    int saved = P->depth;
    for (;;) {
        const ttok *at = cur(P);
        if (is_op(P, "|")) {
            TRY(deeper(P));
            adv(P);
            if (cur(P)->type != TK_NAME)
                return unexpected(P, "a filter name");
            tnode *n;
            NEW(n, E_FILTER, cur(P));
            n->name = cur(P)->s;
            n->name_n = cur(P)->n;
            adv(P);
            if (is_op(P, "("))
                TRY(parse_call_args(P, n));
            n->a = *node;
            *node = n;
        } else if (is_name(P, "is")) {
            TRY(deeper(P));
            adv(P);
            tnode *n;
            NEW(n, E_TEST, at);
            n->negated = accept_name(P, "not");
            if (cur(P)->type != TK_NAME)
                return unexpected(P, "a test name");
            n->name = cur(P)->s;
            n->name_n = cur(P)->n;
            adv(P);
            const ttok *t = cur(P);
            if (is_op(P, "(")) {
                TRY(parse_call_args(P, n));
            } else if ((t->type == TK_NAME || t->type == TK_STRING || t->type == TK_INT ||
                        t->type == TK_FLOAT || tok_is(t, TK_OP, "[") || tok_is(t, TK_OP, "{")) &&
                       !tok_is(t, TK_NAME, "else") && !tok_is(t, TK_NAME, "or") &&
                       !tok_is(t, TK_NAME, "and")) {
                if (tok_is(t, TK_NAME, "is"))
                    return unexpected(P, "not a second 'is' (tests cannot be chained)");
                tnode *arg;
                size_t cap = 0;
                TRY(parse_primary(P, &arg));
                TRY(parse_postfix(P, &arg));
                TRY(push(P, &n->items, &cap, arg));
            }
            n->a = *node;
            *node = n;
        } else if (is_op(P, "(")) {
            TRY(deeper(P));
            tnode *n;
            NEW(n, E_CALL, at);
            n->a = *node;
            TRY(parse_call_args(P, n));
            *node = n;
        } else {
            break;
        }
    }
    P->depth = saved;
    return 0;
}

static int parse_primary(parser *P, tnode **out)
{
    const ttok *t = cur(P);
    tnode *n;
    TRY(deeper(P));
    switch (t->type) {
    case TK_NAME:
        NEW(n, E_CONST, t);
        if (tok_is(t, TK_NAME, "true") || tok_is(t, TK_NAME, "True"))
            n->cval = tv_bool(true);
        else if (tok_is(t, TK_NAME, "false") || tok_is(t, TK_NAME, "False"))
            n->cval = tv_bool(false);
        else if (tok_is(t, TK_NAME, "none") || tok_is(t, TK_NAME, "None"))
            n->cval = tv_none();
        else {
            n->kind = E_NAME;
            n->name = t->s;
            n->name_n = t->n;
        }
        adv(P);
        break;
    case TK_STRING: {
        /* adjacent literals concatenate, as in Python */
        NEW(n, E_CONST, t);
        size_t total = 0, k = P->i;
        while (P->t[k].type == TK_STRING)
            total += P->t[k++].n;
        if (k == P->i + 1) {
            n->cval = tv_str(t->s, t->n);
            adv(P);
        } else {
            char *s = tarena_alloc(P->a, total + 1);
            if (!s)
                return CAIRN_ENOMEM;
            size_t off = 0;
            while (cur(P)->type == TK_STRING) {
                memcpy(s + off, cur(P)->s, cur(P)->n);
                off += cur(P)->n;
                adv(P);
            }
            n->cval = tv_str(s, total);
        }
        break;
    }
    case TK_INT:
        NEW(n, E_CONST, t);
        n->cval = tv_int(t->i);
        adv(P);
        break;
    case TK_FLOAT:
        NEW(n, E_CONST, t);
        n->cval = tv_float(t->f);
        adv(P);
        break;
    case TK_OP:
        if (accept_op(P, "(")) {
            TRY(parse_tuple(P, true, true, &n));
            TRY(expect_op(P, ")"));
        } else if (accept_op(P, "[")) {
            NEW(n, E_LIST, t);
            size_t cap = 0;
            while (!is_op(P, "]")) {
                if (n->items.n)
                    TRY(expect_op(P, ","));
                if (is_op(P, "]"))
                    break;
                tnode *e;
                TRY(parse_expr(P, &e));
                TRY(push(P, &n->items, &cap, e));
            }
            adv(P);
        } else if (accept_op(P, "{")) {
            NEW(n, E_DICT, t);
            size_t cap = 0;
            while (!is_op(P, "}")) {
                if (n->items.n)
                    TRY(expect_op(P, ","));
                if (is_op(P, "}"))
                    break;
                tnode *k, *v;
                TRY(parse_expr(P, &k));
                TRY(expect_op(P, ":"));
                TRY(parse_expr(P, &v));
                TRY(push(P, &n->items, &cap, k));
                TRY(push(P, &n->items, &cap, v));
            }
            adv(P);
        } else {
            return unexpected(P, "an expression");
        }
        break;
    default:
        return unexpected(P, "an expression");
    }
    P->depth--;
    *out = n;
    return 0;
}

static int parse_unary(parser *P, bool with_filter, tnode **out)
{
    const ttok *at = cur(P);
    tnode *n;
    TRY(deeper(P));
    if (is_op(P, "-") || is_op(P, "+")) {
        NEW(n, is_op(P, "-") ? E_NEG : E_POS, at);
        adv(P);
        TRY(parse_unary(P, false, &n->a));
    } else {
        TRY(parse_primary(P, &n));
    }
    TRY(parse_postfix(P, &n));
    if (with_filter)
        TRY(parse_filter_expr(P, &n));
    P->depth--;
    *out = n;
    return 0;
}

typedef int (*level_fn)(parser *P, tnode **out);

/* One left-associative binary level of the grammar: the operators it accepts (a token of
 * the given type and text, building a node of the given kind and op) and the tighter level
 * that parses each operand. `a op b op c` parses as `(a op b) op c`. */
typedef struct {
    ttok_type type;
    const char *text;
    tnode_kind kind;
    top op;
} binop_spec;

typedef struct {
    const binop_spec *ops;
    size_t n_ops;
    level_fn next;
} binop_level;

static int parse_chain(parser *P, const binop_level *L, tnode **out)
{
    int saved = P->depth;
    TRY(L->next(P, out));
    for (;;) {
        const binop_spec *hit = NULL;
        for (size_t k = 0; k < L->n_ops && !hit; k++)
            if (tok_is(cur(P), L->ops[k].type, L->ops[k].text))
                hit = &L->ops[k];
        if (!hit)
            break;
        const ttok *at = cur(P);
        adv(P);
        tnode *n;
        TRY(deeper(P));
        NEW(n, hit->kind, at);
        n->op = hit->op;
        n->a = *out;
        TRY(L->next(P, &n->b));
        *out = n;
    }
    P->depth = saved;
    return 0;
}

#define LEVEL(name, next_fn, ...)                                                          \
    static const binop_spec name##_ops[] = {__VA_ARGS__};                                  \
    static const binop_level name##_level = {name##_ops,                                   \
                                             sizeof name##_ops / sizeof name##_ops[0],     \
                                             next_fn};                                     \
    static int name(parser *P, tnode **out) { return parse_chain(P, &name##_level, out); }

static int parse_unary_f(parser *P, tnode **out) { return parse_unary(P, true, out); }

/* Tightest first, so each level names the one below it. */
LEVEL(parse_pow, parse_unary_f, {TK_OP, "**", E_BINOP, OP_POW})
LEVEL(parse_math2, parse_pow,
      {TK_OP, "*", E_BINOP, OP_MUL}, {TK_OP, "/", E_BINOP, OP_DIV},
      {TK_OP, "//", E_BINOP, OP_FLOORDIV}, {TK_OP, "%", E_BINOP, OP_MOD})
LEVEL(parse_concat, parse_math2, {TK_OP, "~", E_CONCAT, OP_ADD})
LEVEL(parse_math1, parse_concat, {TK_OP, "+", E_BINOP, OP_ADD}, {TK_OP, "-", E_BINOP, OP_SUB})

static int parse_compare(parser *P, tnode **out)
{
    int saved = P->depth;
    TRY(parse_math1(P, out));
    tnode *last_right = NULL;
    for (;;) {
        const ttok *at = cur(P);
        top op;
        if (is_op(P, "==")) op = OP_EQ;
        else if (is_op(P, "!=")) op = OP_NE;
        else if (is_op(P, "<")) op = OP_LT;
        else if (is_op(P, "<=")) op = OP_LE;
        else if (is_op(P, ">")) op = OP_GT;
        else if (is_op(P, ">=")) op = OP_GE;
        else if (is_name(P, "in")) op = OP_IN;
        else if (is_name(P, "not") && tok_is(peek(P, 1), TK_NAME, "in")) { op = OP_NOTIN; adv(P); }
        else break;
        adv(P);
        TRY(deeper(P));
        tnode *c;
        NEW(c, E_COMPARE, at);
        c->op = op;
        c->a = last_right ? last_right : *out;
        TRY(parse_math1(P, &c->b));
        if (!last_right) {
            *out = c;
        } else {
            /* a < b < c  ==  (a < b) and (b < c) */
            tnode *and_;
            NEW(and_, E_AND, at);
            and_->a = *out;
            and_->b = c;
            *out = and_;
        }
        last_right = c->b;
    }
    P->depth = saved;
    return 0;
}

static int parse_not(parser *P, tnode **out)
{
    if (is_name(P, "not")) {
        tnode *n;
        NEW(n, E_NOT, cur(P));
        adv(P);
        TRY(deeper(P));
        TRY(parse_not(P, &n->a));
        P->depth--;
        *out = n;
        return 0;
    }
    return parse_compare(P, out);
}

LEVEL(parse_and, parse_not, {TK_NAME, "and", E_AND, OP_ADD})
LEVEL(parse_or, parse_and, {TK_NAME, "or", E_OR, OP_ADD})
#undef LEVEL

static int parse_expr(parser *P, tnode **out)
{
    int saved = P->depth;
    TRY(deeper(P));
    TRY(parse_or(P, out));
    while (is_name(P, "if")) {
        tnode *n;
        NEW(n, E_COND, cur(P));
        adv(P);
        TRY(deeper(P));
        TRY(parse_or(P, &n->b));
        if (accept_name(P, "else"))
            TRY(parse_expr(P, &n->c));
        n->a = *out;
        *out = n;
    }
    P->depth = saved;
    return 0;
}

/* ---- Statements --------------------------------------------------------------------- */

static int parse_body(parser *P, tnodes *out, const char *const *ends, const char **which);

static int end_tag(parser *P)
{
    return expect_type(P, TK_BLOCK_END, "'%}'");
}

static int parse_if(parser *P, const ttok *at, tnode **out)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    tnode *n;
    NEW(n, N_IF, at);
    TRY(parse_tuple(P, true, false, &n->a));
    TRY(end_tag(P));
    const char *which;
    TRY(parse_body(P, &n->body, ends, &which));
    const ttok *kw = cur(P);
    adv(P);
    if (strcmp(which, "elif") == 0) {
        tnode *elif;
        size_t cap = 0;
        TRY(parse_if(P, kw, &elif));
        TRY(push(P, &n->else_body, &cap, elif));
    } else if (strcmp(which, "else") == 0) {
        static const char *const ends2[] = {"endif", NULL};
        TRY(end_tag(P));
        TRY(parse_body(P, &n->else_body, ends2, &which));
        adv(P);
        TRY(end_tag(P));
    } else {
        TRY(end_tag(P));
    }
    *out = n;
    return 0;
}

static int parse_targets(parser *P, tnode *n, bool allow_attr)
{
    size_t cap = 0;
    do {
        if (cur(P)->type != TK_NAME)
            return unexpected(P, "a variable name");
        tnode *t;
        NEW(t, E_NAME, cur(P));
        t->name = cur(P)->s;
        t->name_n = cur(P)->n;
        adv(P);
        if (allow_attr && is_op(P, ".")) {
            adv(P);
            if (cur(P)->type != TK_NAME)
                return unexpected(P, "an attribute name");
            tnode *a;
            NEW(a, E_ATTR, cur(P));
            a->a = t;
            a->name = cur(P)->s;
            a->name_n = cur(P)->n;
            adv(P);
            t = a;
        }
        TRY(push(P, &n->items, &cap, t));
    } while (accept_op(P, ","));
    return 0;
}

static int parse_for(parser *P, const ttok *at, tnode **out)
{
    static const char *const ends[] = {"else", "endfor", NULL};
    tnode *n;
    NEW(n, N_FOR, at);
    bool paren = accept_op(P, "(");
    TRY(parse_targets(P, n, false));
    if (paren)
        TRY(expect_op(P, ")"));
    if (!accept_name(P, "in"))
        return unexpected(P, "'in'");
    TRY(parse_tuple(P, false, false, &n->a));
    if (accept_name(P, "if"))
        TRY(parse_expr(P, &n->b));
    if (is_name(P, "recursive"))
        return fail_at(P, cur(P), CAIRN_EUNSUPPORTED, "%s", "unsupported recursive for loop");
    TRY(end_tag(P));
    const char *which;
    TRY(parse_body(P, &n->body, ends, &which));
    adv(P);
    TRY(end_tag(P));
    if (strcmp(which, "else") == 0) {
        static const char *const ends2[] = {"endfor", NULL};
        TRY(parse_body(P, &n->else_body, ends2, &which));
        adv(P);
        TRY(end_tag(P));
    }
    *out = n;
    return 0;
}

static int parse_set(parser *P, const ttok *at, tnode **out)
{
    tnode *n;
    NEW(n, N_SET, at);
    TRY(parse_targets(P, n, true));
    if (accept_op(P, "=")) {
        TRY(parse_tuple(P, true, false, &n->a));
        TRY(end_tag(P));
    } else {
        if (n->items.n != 1 || n->items.v[0]->kind != E_NAME)
            return unexpected(P, "'='");
        if (is_op(P, "|"))
            return fail_at(P, cur(P), CAIRN_EUNSUPPORTED, "%s", "unsupported filter on block set");
        TRY(end_tag(P));
        static const char *const ends[] = {"endset", NULL};
        const char *which;
        n->kind = N_SET_BLOCK;
        TRY(parse_body(P, &n->body, ends, &which));
        adv(P);
        TRY(end_tag(P));
    }
    *out = n;
    return 0;
}

static int parse_macro(parser *P, const ttok *at, tnode **out)
{
    tnode *n;
    NEW(n, N_MACRO, at);
    if (cur(P)->type != TK_NAME)
        return unexpected(P, "a macro name");
    n->name = cur(P)->s;
    n->name_n = cur(P)->n;
    adv(P);
    TRY(expect_op(P, "("));
    size_t cap = 0, dcap = 0;
    while (!is_op(P, ")")) {
        if (n->items.n)
            TRY(expect_op(P, ","));
        if (is_op(P, ")"))
            break;
        if (cur(P)->type != TK_NAME)
            return unexpected(P, "a parameter name");
        tnode *p, *def = NULL;
        NEW(p, E_NAME, cur(P));
        p->name = cur(P)->s;
        p->name_n = cur(P)->n;
        adv(P);
        if (accept_op(P, "="))
            TRY(parse_expr(P, &def));
        TRY(push(P, &n->items, &cap, p));
        TRY(push(P, &n->kw_vals, &dcap, def));
    }
    adv(P);
    TRY(end_tag(P));
    static const char *const ends[] = {"endmacro", NULL};
    const char *which;
    TRY(parse_body(P, &n->body, ends, &which));
    adv(P);
    if (cur(P)->type == TK_NAME)
        adv(P); /* {% endmacro name %} */
    TRY(end_tag(P));
    *out = n;
    return 0;
}

static int parse_statement(parser *P, tnode **out)
{
    const ttok *kw = cur(P);
    if (kw->type != TK_NAME)
        return unexpected(P, "a tag name");
    adv(P);
    if (tok_is(kw, TK_NAME, "if"))
        return parse_if(P, kw, out);
    if (tok_is(kw, TK_NAME, "for"))
        return parse_for(P, kw, out);
    if (tok_is(kw, TK_NAME, "set"))
        return parse_set(P, kw, out);
    if (tok_is(kw, TK_NAME, "macro"))
        return parse_macro(P, kw, out);
    if (tok_is(kw, TK_NAME, "break") || tok_is(kw, TK_NAME, "continue")) {
        tnode *n;
        NEW(n, tok_is(kw, TK_NAME, "break") ? N_BREAK : N_CONTINUE, kw);
        TRY(end_tag(P));
        *out = n;
        return 0;
    }
    if (tok_is(kw, TK_NAME, "generation")) {
        /* transformers' AssistantTracker: renders its body unchanged */
        static const char *const ends[] = {"endgeneration", NULL};
        tnode *n;
        const char *which;
        NEW(n, N_GROUP, kw);
        TRY(end_tag(P));
        TRY(parse_body(P, &n->body, ends, &which));
        adv(P);
        TRY(end_tag(P));
        *out = n;
        return 0;
    }
    static const char *const known[] = {"call", "filter", "include", "import", "from",
                                        "extends", "block", "with", "autoescape", "do",
                                        "trans", "pluralize"};
    char name[48];
    snprintf(name, sizeof name, "%.*s", (int)(kw->n > 40 ? 40 : kw->n), kw->s);
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(known); i++)
        if (strcmp(name, known[i]) == 0)
            return fail_at(P, kw, CAIRN_EUNSUPPORTED, "unsupported tag '%s'", name);
    return fail_at(P, kw, CAIRN_ETEMPLATE, "unknown tag '%s'", name);
}

/*
 * Parses statements until EOF (ends == NULL) or a `{% word %}` with word in ends; on the
 * latter *which is the word and the cursor is on it.
 */
static int parse_body(parser *P, tnodes *out, const char *const *ends, const char **which)
{
    size_t cap = 0;
    int saved = P->depth;
    TRY(deeper(P));
    for (;;) {
        const ttok *t = cur(P);
        tnode *n = NULL;
        if (t->type == TK_EOF) {
            if (ends) {
                size_t last = 0;
                while (ends[last + 1])
                    last++;
                return fail_at(P, t, CAIRN_ETEMPLATE, "syntax error: missing '{%% %s %%}'",
                               ends[last]);
            }
            break;
        }
        if (t->type == TK_TEXT) {
            NEW(n, N_TEXT, t);
            n->cval = tv_str(t->s, t->n);
            adv(P);
        } else if (t->type == TK_VAR_BEGIN) {
            adv(P);
            NEW(n, N_OUTPUT, t);
            TRY(parse_tuple(P, true, false, &n->a));
            TRY(expect_type(P, TK_VAR_END, "'}}'"));
        } else if (t->type == TK_BLOCK_BEGIN) {
            const ttok *kw = peek(P, 1);
            for (size_t i = 0; ends && ends[i]; i++) {
                if (tok_is(kw, TK_NAME, ends[i])) {
                    adv(P);
                    *which = ends[i];
                    P->depth = saved;
                    return 0;
                }
            }
            adv(P);
            TRY(parse_statement(P, &n));
        } else {
            return unexpected(P, "text or a tag");
        }
        TRY(push(P, out, &cap, n));
    }
    P->depth = saved;
    return 0;
}

int tparse(tarena *a, const ttoks *toks, tnodes *out, char *err, size_t errlen)
{
    parser P = {.a = a, .t = toks->v, .n = toks->n, .err = err, .errlen = errlen};
    memset(out, 0, sizeof *out);
    return parse_body(&P, out, NULL, NULL);
}
