/*
 * pipeline.c — everything between the raw text and the BPE model: UTF-8 helpers, the
 * normalizers, added-token matching and the pre-tokenizers (Split, ByteLevel).
 *
 * Semantics mirror the `tokenizers` crate:
 *  - Added tokens are found leftmost-longest (as its Aho-Corasick automaton does); a match
 *    rejected by single_word (or a special token under SPLIT_SPECIAL) stays plain text and
 *    scanning resumes after it. lstrip/rstrip absorb neighbouring Unicode whitespace.
 *  - Split divides each piece into matches and gaps, then applies the behaviour.
 *  - ByteLevel prepends a space to each piece not starting with one (add_prefix_space),
 *    optionally splits with the GPT-2 regex, and maps every byte to its printable code
 *    point (the GPT-2 byte-to-unicode table).
 *  - Normalizers rewrite a piece; NF* normalization runs through utf8proc on the pieces
 *    that contain non-ASCII text (a boundary before an ASCII character is always safe:
 *    ASCII characters are starters that nothing before them can combine with).
 *
 * Thread-safety: the configuration is immutable after load; per-call PCRE2 match data
 * and JIT stacks are created by each call, so concurrent calls are safe.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_internal.h"

/* ---- buffers -------------------------------------------------------------------- */

int tok_buf_reserve(tok_buf_t *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t nc = b->cap ? b->cap : 64;
    while (nc < b->len + extra + 1) nc *= 2;
    char *p = cairn_realloc(b->p, nc);
    if (!p) return CAIRN_ENOMEM;
    b->p = p;
    b->cap = nc;
    return 0;
}

int tok_buf_append(tok_buf_t *b, const void *s, size_t n)
{
    if (tok_buf_reserve(b, n)) return CAIRN_ENOMEM;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int tok_spans_push(tok_spans_t *v, size_t off, size_t len)
{
    if (v->len == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 64;
        tok_span_t *p = cairn_realloc(v->p, nc * sizeof *p);
        if (!p) return CAIRN_ENOMEM;
        v->p = p;
        v->cap = nc;
    }
    v->p[v->len++] = (tok_span_t){off, len};
    return 0;
}

int tok_ids_push(tok_ids_t *v, int32_t id)
{
    if (v->len == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 64;
        int32_t *p = cairn_realloc(v->p, nc * sizeof *p);
        if (!p) return CAIRN_ENOMEM;
        v->p = p;
        v->cap = nc;
    }
    v->p[v->len++] = id;
    return 0;
}

int tok_err(char *err, size_t errlen, int status, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return status;
}

/* ---- UTF-8 and Unicode ---------------------------------------------------------- */

size_t tok_utf8_valid_len(const unsigned char *s, size_t n)
{
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) return n >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[1] < 0xA0) return 0;  /* overlong */
        if (c == 0xED && s[1] >= 0xA0) return 0; /* surrogate */
        return 3;
    }
    if (c < 0xF5) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        if (c == 0xF0 && s[1] < 0x90) return 0;  /* overlong */
        if (c == 0xF4 && s[1] >= 0x90) return 0; /* > U+10FFFF */
        return 4;
    }
    return 0;
}

bool tok_utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) { i++; continue; }
        size_t k = tok_utf8_valid_len(u + i, n - i);
        if (!k) return false;
        i += k;
    }
    return true;
}

uint32_t tok_utf8_decode(const unsigned char *s, size_t *adv)
{
    unsigned c = s[0];
    if (c < 0x80) { *adv = 1; return c; }
    if (c < 0xE0) { *adv = 2; return (c & 0x1F) << 6 | (s[1] & 0x3F); }
    if (c < 0xF0) { *adv = 3; return (c & 0x0F) << 12 | (s[1] & 0x3F) << 6 | (s[2] & 0x3F); }
    *adv = 4;
    return (c & 0x07) << 18 | (s[1] & 0x3F) << 12 | (s[2] & 0x3F) << 6 | (s[3] & 0x3F);
}

size_t tok_utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

bool tok_is_whitespace(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool tok_is_word_char(uint32_t cp)
{
    if (cp == '_') return true;
    if (cp < 0x80)
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return true;
    default:
        return false;
    }
}

const uint16_t tok_byte_to_cp[256] = {
    256, 257, 258, 259, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271,
    272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287,
    288, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
    48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
    64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79,
    80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95,
    96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111,
    112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 289,
    290, 291, 292, 293, 294, 295, 296, 297, 298, 299, 300, 301, 302, 303, 304, 305,
    306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317, 318, 319, 320, 321,
    322, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 323, 174, 175,
    176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191,
    192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207,
    208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223,
    224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239,
    240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255,
};

int tok_cp_to_byte(uint32_t cp)
{
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return (int)cp;
    if (cp >= 256 && cp <= 288) return (int)(cp - 256);
    if (cp >= 289 && cp <= 322) return (int)(127 + cp - 289);
    if (cp == 323) return 173;
    return -1;
}

/* ---- regex matching ------------------------------------------------------------- */

/* Per-call matching state: match data and, if a pattern needs more, a larger JIT stack. */
typedef struct {
    const cairn_tokenizer_t *t;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
} matcher_t;

static void matcher_fini(matcher_t *m)
{
    pcre2_match_data_free(m->md);
    pcre2_match_context_free(m->mctx);
    pcre2_jit_stack_free(m->jit);
}

/*
 * Finds the next match of re in subj[0..n) at or after `from`; empty matches are skipped.
 * Returns 1 with [*ms, *me), 0 when there is none, or a negative status.
 */
static int next_match(matcher_t *m, const pcre2_code *re, const char *subj, size_t n,
                      size_t from, size_t *ms, size_t *me)
{
    if (!m->md) {
        m->md = pcre2_match_data_create(16, m->t->gctx);
        if (!m->md) return CAIRN_ENOMEM;
    }
    while (from <= n) {
        /* The subject was validated once up front; pcre2_jit_match skips the per-call
         * checks of pcre2_match (it falls back to the interpreter if JIT failed). */
        int rc = m->t->jit_ok ? pcre2_jit_match(re, (PCRE2_SPTR)subj, n, from, 0, m->md, m->mctx)
                              : pcre2_match(re, (PCRE2_SPTR)subj, n, from, PCRE2_NO_UTF_CHECK, m->md, m->mctx);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !m->jit) {
            m->mctx = pcre2_match_context_create(m->t->gctx);
            m->jit = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, m->t->gctx);
            if (!m->mctx || !m->jit) return CAIRN_ENOMEM;
            pcre2_jit_stack_assign(m->mctx, NULL, m->jit);
            continue;
        }
        if (rc == PCRE2_ERROR_NOMATCH) return 0;
        if (rc < 0) return rc == PCRE2_ERROR_NOMEMORY ? CAIRN_ENOMEM : CAIRN_EFORMAT;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
        if (ov[1] > ov[0]) {
            *ms = ov[0];
            *me = ov[1];
            return 1;
        }
        /* An empty match: move one character on. */
        if (ov[0] >= n) return 0;
        size_t adv;
        tok_utf8_decode((const unsigned char *)subj + ov[0], &adv);
        from = ov[0] + adv;
    }
    return 0;
}

/* ---- normalizers ---------------------------------------------------------------- */

static int nf_chunk(tok_norm_kind_t kind, const char *s, size_t n, tok_buf_t *out)
{
    int opts = UTF8PROC_STABLE;
    switch (kind) {
    case TOK_NORM_NFC: opts |= UTF8PROC_COMPOSE; break;
    case TOK_NORM_NFD: opts |= UTF8PROC_DECOMPOSE; break;
    case TOK_NORM_NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    default: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                                      (utf8proc_option_t)opts);
    if (r < 0) {
        free(dst);
        return r == UTF8PROC_ERROR_NOMEM ? CAIRN_ENOMEM : CAIRN_EINVAL;
    }
    int rc = tok_buf_append(out, dst, (size_t)r);
    free(dst); /* utf8proc allocates with malloc */
    return rc;
}

static int norm_unicode(tok_norm_kind_t kind, const char *s, size_t n, tok_buf_t *out)
{
    size_t i = 0;
    while (i < n) {
        /* ASCII run (all but its last character are unaffected by what follows). */
        size_t j = i;
        while (j < n && (unsigned char)s[j] < 0x80) j++;
        if (j == n) return tok_buf_append(out, s + i, n - i);
        size_t start = j > i ? j - 1 : i; /* the last ASCII char may compose with marks */
        if (start > i && tok_buf_append(out, s + i, start - i)) return CAIRN_ENOMEM;
        size_t k = j;
        while (k < n && (unsigned char)s[k] >= 0x80) k++;
        int rc = nf_chunk(kind, s + start, k - start, out);
        if (rc) return rc;
        i = k;
    }
    return 0;
}

static int norm_lowercase(const char *s, size_t n, tok_buf_t *out)
{
    if (tok_buf_reserve(out, n)) return CAIRN_ENOMEM;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            char lc = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
            if (tok_buf_append(out, &lc, 1)) return CAIRN_ENOMEM;
            i++;
            continue;
        }
        size_t adv;
        uint32_t cp = tok_utf8_decode((const unsigned char *)s + i, &adv);
        char enc[4];
        size_t k = tok_utf8_encode((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), enc);
        if (tok_buf_append(out, enc, k)) return CAIRN_ENOMEM;
        i += adv;
    }
    return 0;
}

static int norm_one(const tok_norm_t *nm, const char *s, size_t n, tok_buf_t *out)
{
    switch (nm->kind) {
    case TOK_NORM_NFC: case TOK_NORM_NFD: case TOK_NORM_NFKC: case TOK_NORM_NFKD:
        return norm_unicode(nm->kind, s, n, out);
    case TOK_NORM_LOWERCASE:
        return norm_lowercase(s, n, out);
    case TOK_NORM_PREPEND:
        if (n && tok_buf_append(out, nm->a, nm->alen)) return CAIRN_ENOMEM;
        return tok_buf_append(out, s, n);
    case TOK_NORM_STRIP: {
        size_t b = 0, e = n, adv;
        while (nm->left && b < e && tok_is_whitespace(tok_utf8_decode((const unsigned char *)s + b, &adv)))
            b += adv;
        while (nm->right && e > b) {
            size_t k = e - 1;
            while (k > b && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
            if (!tok_is_whitespace(tok_utf8_decode((const unsigned char *)s + k, &adv))) break;
            e = k;
        }
        return tok_buf_append(out, s + b, e - b);
    }
    case TOK_NORM_REPLACE: {
        size_t pos = 0;
        while (pos < n) {
            const char *f = nm->alen ? memmem(s + pos, n - pos, nm->a, nm->alen) : NULL;
            if (!f) break;
            size_t at = (size_t)(f - s);
            if (tok_buf_append(out, s + pos, at - pos) || tok_buf_append(out, nm->b, nm->blen))
                return CAIRN_ENOMEM;
            pos = at + nm->alen;
        }
        return tok_buf_append(out, s + pos, n - pos);
    }
    }
    return CAIRN_EINVAL;
}

int tok_normalize(const cairn_tokenizer_t *t, const char *s, size_t n, tok_buf_t *out)
{
    tok_buf_t cur = {0};
    int rc = 0;
    for (size_t i = 0; i < t->n_norms; i++) {
        tok_buf_t next = {0};
        const char *src = i ? cur.p : s;
        size_t srcn = i ? cur.len : n;
        rc = tok_buf_reserve(&next, srcn + srcn / 8 + 16);
        if (!rc) rc = norm_one(&t->norms[i], src, srcn, &next);
        cairn_free(cur.p);
        cur = next;
        if (rc) goto fail;
    }
    if (!t->n_norms && (rc = tok_buf_append(&cur, s, n))) goto fail;
    cairn_free(out->p);
    *out = cur;
    return 0;
fail:
    cairn_free(cur.p);
    return rc;
}

/* ---- added tokens --------------------------------------------------------------- */

static bool ends_with_word(const char *s, size_t n)
{
    if (n == 0) return false;
    size_t k = n - 1, adv;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    return tok_is_word_char(tok_utf8_decode((const unsigned char *)s + k, &adv));
}

int tok_split_added(const cairn_tokenizer_t *t, int cls, bool skip_special, const char *s,
                    size_t n, tok_spans_t *segs, tok_ids_t *seg_ids)
{
    size_t pos = 0, last = 0, adv;
    const uint8_t *first = t->added_first[cls];
    while (pos < n) {
        if (!first[(unsigned char)s[pos]]) { pos++; continue; }
        int32_t idx = -1;
        size_t L = 0;
        for (size_t li = 0; li < t->n_added_lens[cls]; li++) {
            L = t->added_lens[cls][li];
            if (L > n - pos) continue;
            idx = tok_strmap_get(&t->added_map[cls], s + pos, L);
            if (idx >= 0) break;
        }
        if (idx < 0) { pos++; continue; }
        const tok_added_t *a = &t->added[idx];
        size_t start = pos, stop = pos + L;
        bool reject = skip_special && a->special;
        if (!reject && a->single_word) {
            bool start_ok = start == 0 || !ends_with_word(s, start);
            bool stop_ok = stop == n ||
                           !tok_is_word_char(tok_utf8_decode((const unsigned char *)s + stop, &adv));
            reject = !start_ok || !stop_ok;
        }
        if (reject) { pos = stop; continue; }
        if (a->lstrip) {
            while (start > last) {
                size_t k = start - 1;
                while (k > last && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
                if (!tok_is_whitespace(tok_utf8_decode((const unsigned char *)s + k, &adv))) break;
                start = k;
            }
        }
        if (a->rstrip) {
            while (stop < n && tok_is_whitespace(tok_utf8_decode((const unsigned char *)s + stop, &adv)))
                stop += adv;
        }
        if (start > last && (tok_spans_push(segs, last, start - last) || tok_ids_push(seg_ids, -1)))
            return CAIRN_ENOMEM;
        if (tok_spans_push(segs, start, stop - start) || tok_ids_push(seg_ids, a->id))
            return CAIRN_ENOMEM;
        pos = last = stop;
    }
    if (n > last && (tok_spans_push(segs, last, n - last) || tok_ids_push(seg_ids, -1)))
        return CAIRN_ENOMEM;
    return 0;
}

/* ---- pre-tokenizers ------------------------------------------------------------- */

/*
 * The pre-tokenizers run depth-first: each piece a stage produces goes straight through
 * the later stages and into BPE before the stage looks for its next piece. Memory is
 * then bounded by the longest piece, not by the text (a multi-megabyte encode would
 * otherwise build arrays of millions of spans, and page faults dominate).
 */
typedef struct {
    const cairn_tokenizer_t *t;
    matcher_t m;
    tok_buf_t *bufs;  /* two scratch buffers per stage: [2*i] input copy, [2*i+1] mapped */
    tok_ids_t *out;
} pretok_t;

static int run_stage(pretok_t *pt, size_t stage, const char *s, size_t n);

/*
 * Fast path for the two Split regexes nearly every byte-level model ships (Qwen2/2.5/3
 * and Llama 3, which differ only in \p{N} vs \p{N}{1,3}):
 *
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
 *   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *
 * Every character is covered by some alternative, so a match always starts at `from`.
 * The hand-written matcher evaluates the alternatives in order with the regex's greedy
 * and backtracking semantics, but only while every character it has to classify is
 * ASCII (where letter/digit/space classes are unambiguous); the moment it would need to
 * classify a non-ASCII character it returns -1 and PCRE2 decides that match. So it agrees
 * with PCRE2 by construction (tests/tokenizer compares the two on random text).
 */
enum { C_L, C_N, C_S, C_O, C_X };

static inline int ascii_class(unsigned char c)
{
    if (c >= 0x80) return C_X;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return C_L;
    if (c >= '0' && c <= '9') return C_N;
    if (c == ' ' || (c >= '\t' && c <= '\r')) return C_S;
    return C_O;
}

/* Returns the match end (> from), or 0 when a non-ASCII character must be classified. */
static size_t fast_match(const unsigned char *s, size_t n, size_t p, int max_digits)
{
    int c0 = ascii_class(s[p]);
    size_t q;
    if (c0 == C_X) return 0;
    /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
    if (s[p] == '\'' && p + 1 < n) {
        if (s[p + 1] >= 0x80) return 0; /* e.g. U+017F folds to 's' */
        int c1 = s[p + 1] | 0x20;
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return p + 2;
        if ((c1 == 'r' || c1 == 'v' || c1 == 'l') && p + 2 < n) {
            if (s[p + 2] >= 0x80) return 0;
            int c2 = s[p + 2] | 0x20;
            if ((c1 == 'l' && c2 == 'l') || (c1 != 'l' && c2 == 'e')) return p + 3;
        }
    }
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    q = p;
    if (c0 != C_L && c0 != C_N && s[p] != '\r' && s[p] != '\n' && p + 1 < n) {
        int c1 = ascii_class(s[p + 1]);
        if (c1 == C_X) return 0;
        if (c1 == C_L) q = p + 1;
    }
    if (ascii_class(s[q]) == C_L) {
        while (q < n && ascii_class(s[q]) == C_L) q++;
        return q < n && s[q] >= 0x80 ? 0 : q;
    }
    /* \p{N}{1,max_digits} */
    if (c0 == C_N) {
        q = p + 1;
        while (q < n && q < p + (size_t)max_digits) {
            int c = ascii_class(s[q]);
            if (c == C_X) return 0;
            if (c != C_N) break;
            q++;
        }
        return q;
    }
    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
    q = p;
    if (s[p] == ' ' && p + 1 < n) {
        int c1 = ascii_class(s[p + 1]);
        if (c1 == C_X) return 0;
        if (c1 == C_O) q = p + 1;
    }
    if (ascii_class(s[q]) == C_O) {
        while (q < n && ascii_class(s[q]) == C_O) q++;
        if (q < n && s[q] >= 0x80) return 0;
        while (q < n && (s[q] == '\r' || s[q] == '\n')) q++;
        return q;
    }
    /* Whitespace: \s*[\r\n]+ | \s+(?!\S) | \s+ over the run [p, q). */
    q = p;
    while (q < n && ascii_class(s[q]) == C_S) q++;
    if (q < n && s[q] >= 0x80) return 0;
    for (size_t j = q; j-- > p;)
        if (s[j] == '\r' || s[j] == '\n') return j + 1;
    if (q == n) return n;
    return q - 1 > p ? q - 1 : q;
}

/* The Split behaviours as a left-to-right state machine with one pending piece; this is
 * the same fold `tokenizers` applies to the full (offsets, is_match) list. */
typedef struct {
    pretok_t *pt;
    size_t stage;
    const char *s;
    tok_split_behavior_t beh;
    bool have, pend_m, prev_m;
    size_t ps, pe;
} splitter_t;

static int emit(splitter_t *sp, size_t b, size_t e)
{
    return e > b ? run_stage(sp->pt, sp->stage + 1, sp->s + b, e - b) : 0;
}

static int split_piece(splitter_t *sp, size_t b, size_t e, bool m)
{
    int rc = 0;
    switch (sp->beh) {
    case TOK_SPLIT_ISOLATED:
        rc = emit(sp, b, e);
        break;
    case TOK_SPLIT_REMOVED:
        if (!m) rc = emit(sp, b, e);
        break;
    case TOK_SPLIT_MERGED_PREV:
    case TOK_SPLIT_CONTIGUOUS: {
        bool join = sp->beh == TOK_SPLIT_MERGED_PREV ? (m && !sp->prev_m) : (m == sp->prev_m);
        if (join && sp->have) {
            sp->pe = e;
        } else {
            if (sp->have) rc = emit(sp, sp->ps, sp->pe);
            sp->have = true;
            sp->ps = b;
            sp->pe = e;
        }
        break;
    }
    case TOK_SPLIT_MERGED_NEXT:
        /* A match directly followed by a non-match is joined to it. */
        if (sp->have && sp->pend_m && !m) {
            rc = emit(sp, sp->ps, e);
            sp->have = false;
        } else {
            if (sp->have) rc = emit(sp, sp->ps, sp->pe);
            sp->have = true;
            sp->ps = b;
            sp->pe = e;
            sp->pend_m = m;
        }
        break;
    }
    sp->prev_m = m;
    return rc;
}

static int apply_split(pretok_t *pt, size_t stage, const tok_pre_t *p, const char *s, size_t n)
{
    splitter_t sp = {.pt = pt, .stage = stage, .s = s, .beh = p->behavior};
    size_t pos = 0, ms = 0, me = 0;
    int rc;
    for (;;) {
        int found;
        size_t fe = p->fast_digits && pos < n ? fast_match((const unsigned char *)s, n, pos, p->fast_digits) : 0;
        if (fe) {
            found = 1;
            ms = pos;
            me = fe;
        } else if (p->re) {
            found = next_match(&pt->m, p->re, s, n, pos, &ms, &me);
            if (found < 0) return found;
        } else {
            const char *f = p->literal_len && pos < n ? memmem(s + pos, n - pos, p->literal, p->literal_len) : NULL;
            found = f != NULL;
            if (f) { ms = (size_t)(f - s); me = ms + p->literal_len; }
        }
        if (!found) break;
        if (ms > pos && (rc = split_piece(&sp, pos, ms, p->invert))) return rc;
        if ((rc = split_piece(&sp, ms, me, !p->invert))) return rc;
        pos = me;
    }
    if (pos < n && (rc = split_piece(&sp, pos, n, p->invert))) return rc;
    return sp.have ? emit(&sp, sp.ps, sp.pe) : 0;
}

/* Maps bytes to the GPT-2 alphabet into dst (replacing its content). */
static int map_bytes(const char *src, size_t n, tok_buf_t *dst)
{
    dst->len = 0;
    if (tok_buf_reserve(dst, 2 * n)) return CAIRN_ENOMEM;
    char *w = dst->p;
    for (size_t i = 0; i < n; i++) {
        uint16_t cp = tok_byte_to_cp[(unsigned char)src[i]];
        if (cp < 0x80) {
            *w++ = (char)cp;
        } else {
            *w++ = (char)(0xC0 | cp >> 6);
            *w++ = (char)(0x80 | (cp & 0x3F));
        }
    }
    dst->len = (size_t)(w - dst->p);
    dst->p[dst->len] = '\0';
    return 0;
}

static int apply_bytelevel(pretok_t *pt, size_t stage, const tok_pre_t *p, const char *s, size_t n)
{
    tok_buf_t *in = &pt->bufs[2 * stage], *mapped = &pt->bufs[2 * stage + 1];
    int rc;
    if (p->add_prefix_space && s[0] != ' ') {
        in->len = 0;
        if ((rc = tok_buf_append(in, " ", 1)) || (rc = tok_buf_append(in, s, n))) return rc;
        s = in->p;
        n = in->len;
    }
    if (!p->use_regex) {
        if ((rc = map_bytes(s, n, mapped))) return rc;
        return run_stage(pt, stage + 1, mapped->p, mapped->len);
    }
    size_t pos = 0, ms, me;
    for (;;) {
        int found = next_match(&pt->m, pt->t->gpt2_re, s, n, pos, &ms, &me);
        if (found < 0) return found;
        if (!found) break;
        if (ms > pos) {
            if ((rc = map_bytes(s + pos, ms - pos, mapped))) return rc;
            if ((rc = run_stage(pt, stage + 1, mapped->p, mapped->len))) return rc;
        }
        if ((rc = map_bytes(s + ms, me - ms, mapped))) return rc;
        if ((rc = run_stage(pt, stage + 1, mapped->p, mapped->len))) return rc;
        pos = me;
    }
    if (pos < n) {
        if ((rc = map_bytes(s + pos, n - pos, mapped))) return rc;
        return run_stage(pt, stage + 1, mapped->p, mapped->len);
    }
    return 0;
}

static int run_stage(pretok_t *pt, size_t stage, const char *s, size_t n)
{
    if (n == 0) return 0;
    if (stage == pt->t->n_pres) return tok_bpe_encode_word(pt->t, s, n, pt->out);
    const tok_pre_t *p = &pt->t->pres[stage];
    return p->kind == TOK_PRE_SPLIT ? apply_split(pt, stage, p, s, n)
                                    : apply_bytelevel(pt, stage, p, s, n);
}

int tok_pretokenize_encode(const cairn_tokenizer_t *t, const char *s, size_t n, tok_ids_t *out)
{
    pretok_t pt = {.t = t, .m = {.t = t}, .out = out};
    int rc;
    if (n == 0) return 0;
    if (t->n_pres) {
        pt.bufs = cairn_calloc(2 * t->n_pres, sizeof *pt.bufs);
        if (!pt.bufs) return CAIRN_ENOMEM;
    }
    rc = run_stage(&pt, 0, s, n);
    for (size_t i = 0; i < 2 * t->n_pres; i++) cairn_free(pt.bufs[i].p);
    cairn_free(pt.bufs);
    matcher_fini(&pt.m);
    return rc;
}

/* ---- loading -------------------------------------------------------------------- */

static const char *jstr(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool jbool(const cJSON *o, const char *key, bool dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
    return dflt;
}

static int compile_regex(cairn_tokenizer_t *t, const char *pat, pcre2_code **out,
                         const char *what, char *err, size_t errlen)
{
    int ec;
    PCRE2_SIZE eo;
    pcre2_compile_context *cc = pcre2_compile_context_create(t->gctx);
    if (!cc) return CAIRN_ENOMEM;
    *out = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec,
                         &eo, cc);
    pcre2_compile_context_free(cc);
    if (!*out) {
        if (ec == PCRE2_ERROR_NOMEMORY || ec == PCRE2_ERROR_HEAP_FAILED) return CAIRN_ENOMEM;
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return tok_err(err, errlen, CAIRN_EFORMAT, "%s regex: %s at offset %zu", what,
                       (const char *)msg, (size_t)eo);
    }
    /* JIT is an optimization: without it (no JIT support) matching still works, through
     * pcre2_match; jit_ok records whether every pattern compiled. */
    if (pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE) != 0) t->jit_ok = false;
    return 0;
}

/* Strings from tokenizer.json that end up inside the text being tokenized must be valid
 * UTF-8: the regexes run with PCRE2_NO_UTF_CHECK on text validated once up front. */
static bool utf8_ok(const char *s)
{
    return tok_utf8_valid(s, strlen(s));
}

static int add_norm(cairn_tokenizer_t *t, const cJSON *j, int depth, char *err, size_t errlen)
{
    if (!j || cJSON_IsNull(j)) return 0;
    const char *type = jstr(j, "type");
    if (!type || depth > 8) return tok_err(err, errlen, CAIRN_EFORMAT, "normalizer without a type");
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "normalizers"), *e;
        if (!cJSON_IsArray(arr)) return tok_err(err, errlen, CAIRN_EFORMAT, "normalizer Sequence without a list");
        cJSON_ArrayForEach(e, arr) {
            int rc = add_norm(t, e, depth + 1, err, errlen);
            if (rc) return rc;
        }
        return 0;
    }
    tok_norm_t nm = {0};
    if (strcmp(type, "NFC") == 0) nm.kind = TOK_NORM_NFC;
    else if (strcmp(type, "NFD") == 0) nm.kind = TOK_NORM_NFD;
    else if (strcmp(type, "NFKC") == 0) nm.kind = TOK_NORM_NFKC;
    else if (strcmp(type, "NFKD") == 0) nm.kind = TOK_NORM_NFKD;
    else if (strcmp(type, "Lowercase") == 0) nm.kind = TOK_NORM_LOWERCASE;
    else if (strcmp(type, "Strip") == 0) {
        nm.kind = TOK_NORM_STRIP;
        nm.left = jbool(j, "strip_left", true);
        nm.right = jbool(j, "strip_right", true);
    } else if (strcmp(type, "Prepend") == 0) {
        const char *pre = jstr(j, "prepend");
        if (!pre) return tok_err(err, errlen, CAIRN_EFORMAT, "normalizer Prepend without 'prepend'");
        if (!utf8_ok(pre)) return tok_err(err, errlen, CAIRN_EFORMAT, "normalizer Prepend is not valid UTF-8");
        nm.kind = TOK_NORM_PREPEND;
        if (!(nm.a = cairn_strdup(pre))) return CAIRN_ENOMEM;
        nm.alen = strlen(pre);
    } else if (strcmp(type, "Replace") == 0) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        const char *lit = jstr(pat, "String"), *content = jstr(j, "content");
        if (!lit) {
            if (jstr(pat, "Regex"))
                return tok_err(err, errlen, CAIRN_EUNSUPPORTED,
                               "unsupported normalizer 'Replace' with a Regex pattern");
            return tok_err(err, errlen, CAIRN_EFORMAT, "normalizer Replace without a pattern");
        }
        if (!content) return tok_err(err, errlen, CAIRN_EFORMAT, "normalizer Replace without content");
        if (!utf8_ok(lit) || !utf8_ok(content))
            return tok_err(err, errlen, CAIRN_EFORMAT, "normalizer Replace is not valid UTF-8");
        nm.kind = TOK_NORM_REPLACE;
        nm.a = cairn_strdup(lit);
        nm.b = cairn_strdup(content);
        if (!nm.a || !nm.b) { cairn_free(nm.a); cairn_free(nm.b); return CAIRN_ENOMEM; }
        nm.alen = strlen(lit);
        nm.blen = strlen(content);
    } else {
        return tok_err(err, errlen, CAIRN_EUNSUPPORTED, "unsupported normalizer type '%s'", type);
    }
    tok_norm_t *nn = cairn_realloc(t->norms, (t->n_norms + 1) * sizeof *nn);
    if (!nn) { cairn_free(nm.a); cairn_free(nm.b); return CAIRN_ENOMEM; }
    t->norms = nn;
    t->norms[t->n_norms++] = nm;
    return 0;
}

static int add_pre(cairn_tokenizer_t *t, const cJSON *j, int depth, char *err, size_t errlen)
{
    if (!j || cJSON_IsNull(j)) return 0;
    const char *type = jstr(j, "type");
    if (!type || depth > 8) return tok_err(err, errlen, CAIRN_EFORMAT, "pre_tokenizer without a type");
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers"), *e;
        if (!cJSON_IsArray(arr)) return tok_err(err, errlen, CAIRN_EFORMAT, "pre_tokenizer Sequence without a list");
        cJSON_ArrayForEach(e, arr) {
            int rc = add_pre(t, e, depth + 1, err, errlen);
            if (rc) return rc;
        }
        return 0;
    }
    tok_pre_t p = {0};
    int rc;
    if (strcmp(type, "ByteLevel") == 0) {
        p.kind = TOK_PRE_BYTELEVEL;
        p.add_prefix_space = jbool(j, "add_prefix_space", true);
        p.use_regex = jbool(j, "use_regex", true);
        if (p.use_regex && !t->gpt2_re) {
            static const char gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
            if ((rc = compile_regex(t, gpt2, &t->gpt2_re, "ByteLevel", err, errlen))) return rc;
        }
        t->has_bytelevel_pre = true;
    } else if (strcmp(type, "Split") == 0) {
        p.kind = TOK_PRE_SPLIT;
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        const char *re = jstr(pat, "Regex"), *lit = jstr(pat, "String");
        const char *beh = jstr(j, "behavior");
        if (!re && !lit) return tok_err(err, errlen, CAIRN_EFORMAT, "pre_tokenizer Split without a pattern");
        if (!beh) return tok_err(err, errlen, CAIRN_EFORMAT, "pre_tokenizer Split without a behavior");
        if (strcmp(beh, "Isolated") == 0) p.behavior = TOK_SPLIT_ISOLATED;
        else if (strcmp(beh, "Removed") == 0) p.behavior = TOK_SPLIT_REMOVED;
        else if (strcmp(beh, "MergedWithPrevious") == 0) p.behavior = TOK_SPLIT_MERGED_PREV;
        else if (strcmp(beh, "MergedWithNext") == 0) p.behavior = TOK_SPLIT_MERGED_NEXT;
        else if (strcmp(beh, "Contiguous") == 0) p.behavior = TOK_SPLIT_CONTIGUOUS;
        else return tok_err(err, errlen, CAIRN_EUNSUPPORTED, "unsupported Split behavior '%s'", beh);
        p.invert = jbool(j, "invert", false);
        if (re) {
            static const char qwen[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
            static const char llama3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
            if (strcmp(re, qwen) == 0) p.fast_digits = 1;
            else if (strcmp(re, llama3) == 0) p.fast_digits = 3;
            if ((rc = compile_regex(t, re, &p.re, "pre_tokenizer Split", err, errlen))) return rc;
        } else {
            if (!utf8_ok(lit)) return tok_err(err, errlen, CAIRN_EFORMAT, "pre_tokenizer Split pattern is not valid UTF-8");
            if (!(p.literal = cairn_strdup(lit))) return CAIRN_ENOMEM;
            p.literal_len = strlen(lit);
        }
    } else {
        return tok_err(err, errlen, CAIRN_EUNSUPPORTED, "unsupported pre_tokenizer type '%s'", type);
    }
    tok_pre_t *np = cairn_realloc(t->pres, (t->n_pres + 1) * sizeof *np);
    if (!np) {
        pcre2_code_free(p.re);
        cairn_free(p.literal);
        return CAIRN_ENOMEM;
    }
    t->pres = np;
    t->pres[t->n_pres++] = p;
    return 0;
}

int tok_pipeline_load(cairn_tokenizer_t *t, const cJSON *normalizer, const cJSON *pre,
                      char *err, size_t errlen)
{
    int rc = add_norm(t, normalizer, 0, err, errlen);
    if (rc) return rc;
    return add_pre(t, pre, 0, err, errlen);
}

void tok_pipeline_fini(cairn_tokenizer_t *t)
{
    for (size_t i = 0; i < t->n_norms; i++) {
        cairn_free(t->norms[i].a);
        cairn_free(t->norms[i].b);
    }
    cairn_free(t->norms);
    t->norms = NULL;
    for (size_t i = 0; i < t->n_pres; i++) {
        pcre2_code_free(t->pres[i].re);
        cairn_free(t->pres[i].literal);
    }
    cairn_free(t->pres);
    t->pres = NULL;
    pcre2_code_free(t->gpt2_re);
    t->gpt2_re = NULL;
}
