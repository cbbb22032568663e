/*
 * template_impl.h — private structures of the chat-template interpreter.
 *
 * Pipeline: lexer.c turns the source into tokens (applying Jinja2's whitespace control:
 * trim_blocks, lstrip_blocks, `-`/`+` modifiers), parser.c builds an AST of `tnode`s in
 * the template's arena, and render.c walks the AST with Python-like values (`tval`, in
 * value.c) allocated from a per-render arena. Nothing is freed individually: an arena
 * dies whole, which keeps every error path a single cleanup.
 */
#ifndef CAIRN_TEMPLATE_IMPL_H
#define CAIRN_TEMPLATE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "cairn/chat_template.h"

/* ---- Arena ------------------------------------------------------------------------- */

typedef struct tarena_chunk tarena_chunk;
typedef struct {
    tarena_chunk *head;
    size_t total, limit; /* bytes handed out; limit 0 = unlimited */
    bool over;           /* an allocation failed because of limit (not the allocator) */
} tarena;

/* Returns zeroed, max-aligned memory or NULL when the allocator fails. */
void *tarena_alloc(tarena *a, size_t n);
char *tarena_strndup(tarena *a, const char *s, size_t n);
void tarena_free(tarena *a);

/* ---- Growable byte buffer with a size limit ----------------------------------------- */

typedef struct {
    char *p;
    size_t n, cap, limit; /* limit: largest n allowed */
} tbuf;

/* Both return 0, CAIRN_ENOMEM or CAIRN_ERANGE (limit). */
int tbuf_put(tbuf *b, const char *s, size_t n);
int tbuf_putc(tbuf *b, char c);
int tbuf_printf(tbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tbuf_fini(tbuf *b);

/* ---- Values ------------------------------------------------------------------------- */

typedef enum {
    TV_UNDEF,   /* jinja2.Undefined; s holds the missing name (may be empty) */
    TV_NONE,
    TV_BOOL,
    TV_INT,
    TV_FLOAT,
    TV_STR,     /* UTF-8 bytes, not NUL-terminated */
    TV_LIST,    /* list or tuple (l->is_tuple) — immutable once built */
    TV_DICT,    /* insertion-ordered mapping — immutable once built */
    TV_NS,      /* namespace(): the only mutable object (d) */
    TV_MACRO,   /* a {% macro %} (node) */
    TV_FUNC,    /* a global function (fn) */
    TV_METHOD,  /* a bound method (m) */
    TV_LOOP,    /* the `loop` object of a for loop (lp), advanced in place */
} tval_type;

typedef struct tlist tlist;
typedef struct tdict tdict;
typedef struct tmethod tmethod;
typedef struct tloop tloop;
struct tnode;

typedef struct tval {
    tval_type t;
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t n;
        } s;
        tlist *l;
        tdict *d;
        const struct tnode *macro;
        int fn;
        tmethod *m;
        tloop *lp;
    } u;
} tval;

struct tlist {
    size_t n;
    bool is_tuple;
    tval *v;
};

struct tdict {
    size_t n, cap;
    tval *k, *v;
};

struct tmethod {
    tval self;
    int id; /* render.c's method enum */
};

struct tloop {
    const tval *items;
    size_t n, i; /* i: index0 of the current iteration */
};

static inline tval tv_undef(void) { tval v = {.t = TV_UNDEF}; return v; }
static inline tval tv_none(void) { tval v = {.t = TV_NONE}; return v; }
static inline tval tv_bool(bool b) { tval v = {.t = TV_BOOL}; v.u.b = b; return v; }
static inline tval tv_int(int64_t i) { tval v = {.t = TV_INT}; v.u.i = i; return v; }
static inline tval tv_float(double f) { tval v = {.t = TV_FLOAT}; v.u.f = f; return v; }
static inline tval tv_str(const char *p, size_t n)
{
    tval v = {.t = TV_STR};
    v.u.s.p = p;
    v.u.s.n = n;
    return v;
}

/* Python truthiness (undefined is falsy). */
bool tv_truthy(tval v);
/* Python ==, used by ==, `in`, dict keys. Returns false beyond a nesting depth. */
bool tv_equal(tval a, tval b);
/* Number of UTF-8 code points in s[0..n). */
size_t tv_utf8_len(const char *s, size_t n);
/* Byte offset of code point `idx` (idx <= length) in s. */
size_t tv_utf8_offset(const char *s, size_t n, size_t idx);

/* Dict helpers: lookup returns NULL when absent; set appends or replaces (0 / ENOMEM). */
tval *tdict_get(const tdict *d, tval key);
tval *tdict_get_str(const tdict *d, const char *key, size_t n);
int tdict_set(tarena *a, tdict *d, tval key, tval val);

/*
 * Conversions to text, all bounded by the buffer's limit and a nesting depth:
 *  - tv_to_str: Python str() (undefined -> "", None -> "None", lists as repr);
 *  - tv_repr: Python repr();
 *  - tv_to_json: json.dumps(x, ensure_ascii=False, indent, separators, sort_keys).
 * They return 0, CAIRN_ENOMEM, CAIRN_ERANGE or CAIRN_ETEMPLATE (a value json cannot
 * encode; *bad receives its type name).
 */
int tv_to_str(tbuf *b, tval v);
int tv_repr(tbuf *b, tval v);
typedef struct {
    int indent;              /* < 0: none */
    const char *indent_str;  /* when indent is given as a string (else NULL) */
    size_t indent_str_n;
    const char *item_sep, *key_sep;
    size_t item_sep_n, key_sep_n;
    bool sort_keys;
} tjson_opts;
int tv_to_json(tbuf *b, tval v, const tjson_opts *o, const char **bad);
/* Python float repr ("1.0", "1e-05", "inf", "nan"); writes at most 32 bytes into out. */
void tv_float_repr(double f, char out[32]);
/* Python type name, for messages. */
const char *tv_type_name(tval v);

/* Converts a cJSON value to a tval in arena a (deep). 0 or CAIRN_ENOMEM. */
int tv_from_cjson(tarena *a, const cJSON *j, tval *out);

/* ---- Lexer -------------------------------------------------------------------------- */

typedef enum {
    TK_TEXT,        /* s/n: literal template text after whitespace control */
    TK_VAR_BEGIN,   /* {{ */
    TK_VAR_END,     /* }} */
    TK_BLOCK_BEGIN, /* {% */
    TK_BLOCK_END,   /* %} */
    TK_NAME,
    TK_STRING,      /* s/n: decoded value */
    TK_INT,
    TK_FLOAT,
    TK_OP,          /* s/n: operator text */
    TK_EOF,
} ttok_type;

typedef struct {
    ttok_type type;
    int line, col;
    const char *s;
    size_t n;
    int64_t i;
    double f;
} ttok;

typedef struct {
    ttok *v;
    size_t n, cap;
} ttoks;

/*
 * Tokenizes src (newlines already normalised to \n, trailing newline already dropped) into
 * toks; string literals are decoded into arena a. Returns 0, CAIRN_ENOMEM or
 * CAIRN_ETEMPLATE with a message in err.
 */
int tlex(tarena *a, const char *src, size_t n, ttoks *toks, char *err, size_t errlen);
void ttoks_fini(ttoks *t);

/* ---- AST ---------------------------------------------------------------------------- */

typedef enum {
    /* statements */
    N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SET_BLOCK, N_MACRO, N_BREAK, N_CONTINUE,
    N_GROUP,
    /* expressions */
    E_CONST, E_NAME, E_LIST, E_TUPLE, E_DICT, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER,
    E_TEST, E_NEG, E_POS, E_NOT, E_BINOP, E_CONCAT, E_AND, E_OR, E_COMPARE, E_COND,
} tnode_kind;

/* Operators of E_BINOP and E_COMPARE. */
typedef enum {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
} top;

typedef struct tnode tnode;
typedef struct {
    tnode **v;
    size_t n;
} tnodes;

struct tnode {
    tnode_kind kind;
    int line, col;
    top op;
    bool negated;          /* E_TEST: `is not` */
    const char *name;      /* E_NAME, E_ATTR, E_FILTER/E_TEST name, N_MACRO, N_SET_BLOCK */
    size_t name_n;
    tval cval;             /* E_CONST */
    tnode *a, *b, *c;      /* operands: see parser.c for each kind */
    tnodes items;          /* E_LIST/E_TUPLE/E_DICT(k,v,...), call/filter args, targets */
    tnodes kw_vals;        /* keyword arguments (names in kw_names) / macro defaults */
    const char **kw_names;
    size_t *kw_name_n;
    tnodes body, else_body;
};

/* Parses toks into a statement list; 0 or an error code with a message (line:col). */
int tparse(tarena *a, const ttoks *toks, tnodes *out, char *err, size_t errlen);

/* Maximum nesting of blocks and expressions the parser accepts. */
#define TMPL_MAX_DEPTH 200

/* ---- Compiled template -------------------------------------------------------------- */

struct cairn_chat_template {
    tarena arena; /* source copy, decoded strings and the AST */
    tnodes body;
    size_t max_output;
    uint64_t max_steps;
};

/* Formats into err (if non-NULL): "<msg>". Used by lexer and parser. */
void terr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif /* CAIRN_TEMPLATE_IMPL_H */
