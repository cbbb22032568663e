/*
 * json_scan.c — a purpose-built JSON scanner for the two large sections of tokenizer.json:
 * model.vocab (an object of string -> id, ~150K entries) and model.merges (~150-300K
 * "a b" strings or ["a","b"] arrays).
 *
 * Why not cJSON: building a cJSON tree of a 10 MB tokenizer.json costs ~1M small mallocs
 * and 300+ ms in a fresh process; scanning the text directly into the vocab arena and the
 * hash maps keeps a Qwen3 load well under the 150 ms budget. The small remaining sections
 * (normalizer, pre_tokenizer, added_tokens, ...) are parsed with cJSON by tokenizer.c,
 * which locates them with tok_json_find.
 *
 * Invariants: the scanner never reads past `len` (inputs need no NUL terminator) and
 * rejects malformed JSON with CAIRN_EFORMAT; nesting depth is bounded (64) so hostile
 * input cannot exhaust the stack. Thread-safety: pure functions over their arguments.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/util.h"

typedef struct {
    const char *p, *end;
} scan_t;

static void skip_ws(scan_t *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

static bool read_hex4(scan_t *s, uint32_t *out)
{
    if (s->end - s->p < 4) return false;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = cairn_hexval(s->p[i]);
        if (h < 0) return false;
        v = v << 4 | (uint32_t)h;
    }
    s->p += 4;
    *out = v;
    return true;
}

/*
 * Scans a string at s->p (which must be '"'). If it has no escapes, *out and *n point into
 * the JSON text; otherwise it is decoded into scratch (reset first). Returns 0 or
 * CAIRN_EFORMAT / CAIRN_ENOMEM.
 */
static int scan_string(scan_t *s, tok_buf_t *scratch, const char **out, size_t *n)
{
    if (s->p >= s->end || *s->p != '"') return CAIRN_EFORMAT;
    const char *start = ++s->p;
    const char *q = start;
    while (q < s->end && *q != '"' && *q != '\\') {
        if ((unsigned char)*q < 0x20) return CAIRN_EFORMAT;
        q++;
    }
    if (q >= s->end) return CAIRN_EFORMAT;
    if (*q == '"') {
        *out = start;
        *n = (size_t)(q - start);
        s->p = q + 1;
        return 0;
    }
    scratch->len = 0;
    if (tok_buf_append(scratch, start, (size_t)(q - start))) return CAIRN_ENOMEM;
    s->p = q;
    for (;;) {
        if (s->p >= s->end) return CAIRN_EFORMAT;
        char c = *s->p++;
        if (c == '"') break;
        if ((unsigned char)c < 0x20) return CAIRN_EFORMAT;
        if (c != '\\') {
            if (tok_buf_append(scratch, &c, 1)) return CAIRN_ENOMEM;
            continue;
        }
        if (s->p >= s->end) return CAIRN_EFORMAT;
        char e = *s->p++;
        char ch;
        switch (e) {
        case '"': ch = '"'; break;
        case '\\': ch = '\\'; break;
        case '/': ch = '/'; break;
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'n': ch = '\n'; break;
        case 'r': ch = '\r'; break;
        case 't': ch = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (!read_hex4(s, &cp)) return CAIRN_EFORMAT;
            if (cp >= 0xD800 && cp < 0xDC00) {
                uint32_t lo;
                if (s->end - s->p < 2 || s->p[0] != '\\' || s->p[1] != 'u') return CAIRN_EFORMAT;
                s->p += 2;
                if (!read_hex4(s, &lo) || lo < 0xDC00 || lo > 0xDFFF) return CAIRN_EFORMAT;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return CAIRN_EFORMAT;
            }
            char enc[4];
            size_t k = tok_utf8_encode(cp, enc);
            if (tok_buf_append(scratch, enc, k)) return CAIRN_ENOMEM;
            continue;
        }
        default: return CAIRN_EFORMAT;
        }
        if (tok_buf_append(scratch, &ch, 1)) return CAIRN_ENOMEM;
    }
    *out = scratch->p;
    *n = scratch->len;
    return 0;
}

static int skip_value(scan_t *s, int depth)
{
    skip_ws(s);
    if (s->p >= s->end || depth > 64) return CAIRN_EFORMAT;
    char c = *s->p;
    if (c == '"') {
        /* memchr to the next quote, then check it is not escaped (an odd run of
         * backslashes before it): scanning 10 MB this way takes a few milliseconds. */
        const char *q = s->p + 1;
        for (;;) {
            q = memchr(q, '"', (size_t)(s->end - q));
            if (!q) return CAIRN_EFORMAT;
            size_t bs = 0;
            while (q - bs > s->p + 1 && q[-1 - (ptrdiff_t)bs] == '\\') bs++;
            if (bs % 2 == 0) break;
            q++;
        }
        s->p = q + 1;
        return 0;
    }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        s->p++;
        skip_ws(s);
        if (s->p < s->end && *s->p == close) { s->p++; return 0; }
        for (;;) {
            if (c == '{') {
                skip_ws(s);
                if (s->p >= s->end || *s->p != '"') return CAIRN_EFORMAT;
                int rc = skip_value(s, depth + 1);
                if (rc) return rc;
                skip_ws(s);
                if (s->p >= s->end || *s->p != ':') return CAIRN_EFORMAT;
                s->p++;
            }
            int rc = skip_value(s, depth + 1);
            if (rc) return rc;
            skip_ws(s);
            if (s->p >= s->end) return CAIRN_EFORMAT;
            if (*s->p == ',') { s->p++; continue; }
            if (*s->p == close) { s->p++; return 0; }
            return CAIRN_EFORMAT;
        }
    }
    /* number, true, false, null */
    const char *st = s->p;
    while (s->p < s->end && (strchr("+-.eE", *s->p) || (*s->p >= '0' && *s->p <= '9') ||
                             (*s->p >= 'a' && *s->p <= 'z')))
        s->p++;
    return s->p > st ? 0 : CAIRN_EFORMAT;
}

int tok_json_members(const char *json, size_t len, const char *const *names, size_t n,
                     size_t *voff, size_t *vlen, tok_json_hook_fn hook, void *user, size_t *end)
{
    scan_t s = {json, json + len};
    tok_buf_t scratch = {0};
    int rc = CAIRN_EFORMAT;
    for (size_t i = 0; i < n; i++) voff[i] = vlen[i] = 0;
    skip_ws(&s);
    if (s.p >= s.end || *s.p != '{') goto done;
    s.p++;
    skip_ws(&s);
    if (s.p < s.end && *s.p == '}') { s.p++; rc = 0; goto done; }
    for (;;) {
        const char *k;
        size_t kn, which = n;
        skip_ws(&s);
        if ((rc = scan_string(&s, &scratch, &k, &kn))) goto done;
        skip_ws(&s);
        if (s.p >= s.end || *s.p != ':') { rc = CAIRN_EFORMAT; goto done; }
        s.p++;
        skip_ws(&s);
        for (size_t i = 0; i < n; i++)
            if (strlen(names[i]) == kn && memcmp(k, names[i], kn) == 0) which = i;
        const char *vstart = s.p;
        rc = 1;
        if (which < n && hook) {
            size_t vend = 0;
            rc = hook(user, which, json, len, (size_t)(vstart - json), &vend);
            if (rc < 0) goto done;
            if (rc == 0) s.p = json + vend;
        }
        if (rc == 1 && (rc = skip_value(&s, 0))) goto done;
        if (which < n) {
            voff[which] = (size_t)(vstart - json);
            vlen[which] = (size_t)(s.p - vstart);
        }
        skip_ws(&s);
        if (s.p >= s.end) { rc = CAIRN_EFORMAT; goto done; }
        if (*s.p == ',') { s.p++; continue; }
        if (*s.p != '}') { rc = CAIRN_EFORMAT; goto done; }
        s.p++;
        rc = 0;
        goto done;
    }
done:
    if (end) *end = (size_t)(s.p - json);
    cairn_free(scratch.p);
    return rc;
}

static int scan_int(scan_t *s, long *out)
{
    skip_ws(s);
    bool neg = false;
    if (s->p < s->end && *s->p == '-') { neg = true; s->p++; }
    if (s->p >= s->end || *s->p < '0' || *s->p > '9') return CAIRN_EFORMAT;
    long v = 0;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
        if (v > 100000000L) return CAIRN_EFORMAT;
        v = v * 10 + (*s->p++ - '0');
    }
    if (s->p < s->end && (*s->p == '.' || *s->p == 'e' || *s->p == 'E')) return CAIRN_EFORMAT;
    *out = neg ? -v : v;
    return 0;
}

/* Largest id accepted in a vocab: bounds memory for hostile files. */
#define TOK_MAX_ID (1 << 24)

int tok_json_load_vocab(cairn_tokenizer_t *t, const char *json, size_t len, size_t *used,
                        char *err, size_t errlen)
{
    scan_t s = {json, json + len};
    tok_buf_t scratch = {0};
    uint32_t *offs = NULL, *lens = NULL, *ids = NULL;
    size_t n = 0, cap = 0, arena_len = 0;
    long max_id = -1;
    int rc;

    t->arena = cairn_malloc(len + 1);
    if (!t->arena) { rc = CAIRN_ENOMEM; goto fail; }
    skip_ws(&s);
    if (s.p >= s.end || *s.p != '{') { rc = tok_err(err, errlen, CAIRN_EFORMAT, "model.vocab is not an object"); goto fail; }
    s.p++;
    skip_ws(&s);
    if (s.p < s.end && *s.p == '}') s.p++;
    else for (;;) {
        const char *k;
        size_t kn;
        long id;
        if (arena_len + 1 > len) { rc = CAIRN_EFORMAT; goto bad; }
        skip_ws(&s);
        if ((rc = scan_string(&s, &scratch, &k, &kn))) goto bad;
        skip_ws(&s);
        if (s.p >= s.end || *s.p != ':') { rc = CAIRN_EFORMAT; goto bad; }
        s.p++;
        if ((rc = scan_int(&s, &id))) goto bad;
        if (id < 0 || id >= TOK_MAX_ID) {
            rc = tok_err(err, errlen, CAIRN_EFORMAT, "model.vocab id %ld out of range", id);
            goto fail;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 1024;
            uint32_t *a = cairn_realloc(offs, nc * sizeof *a);
            if (!a) { rc = CAIRN_ENOMEM; goto fail; }
            offs = a;
            a = cairn_realloc(lens, nc * sizeof *a);
            if (!a) { rc = CAIRN_ENOMEM; goto fail; }
            lens = a;
            a = cairn_realloc(ids, nc * sizeof *a);
            if (!a) { rc = CAIRN_ENOMEM; goto fail; }
            ids = a;
            cap = nc;
        }
        /* Decoded strings are never longer than their JSON form plus separator, so the
         * arena (len + 1 bytes) cannot overflow. */
        memcpy(t->arena + arena_len, k, kn);
        t->arena[arena_len + kn] = '\0';
        offs[n] = (uint32_t)arena_len;
        lens[n] = (uint32_t)kn;
        ids[n] = (uint32_t)id;
        n++;
        arena_len += kn + 1;
        if (id > max_id) max_id = id;
        skip_ws(&s);
        if (s.p >= s.end) { rc = CAIRN_EFORMAT; goto bad; }
        if (*s.p == ',') { s.p++; continue; }
        if (*s.p == '}') { s.p++; break; }
        rc = CAIRN_EFORMAT;
        goto bad;
    }
    *used = (size_t)(s.p - json);

    size_t n_ids = (size_t)(max_id + 1);
    if (n_ids > t->n_ids) {
        char **nt = cairn_realloc(t->text, n_ids * sizeof *nt);
        if (!nt) { rc = CAIRN_ENOMEM; goto fail; }
        t->text = nt;
        uint32_t *nl = cairn_realloc(t->text_len, n_ids * sizeof *nl);
        if (!nl) { rc = CAIRN_ENOMEM; goto fail; }
        t->text_len = nl;
        for (size_t i = t->n_ids; i < n_ids; i++) { t->text[i] = NULL; t->text_len[i] = 0; }
        t->n_ids = n_ids;
    }
    if ((rc = tok_strmap_init(&t->bpe.vocab, n))) goto fail;
    for (size_t i = 0; i < n; i++) {
        t->text[ids[i]] = t->arena + offs[i];
        t->text_len[ids[i]] = lens[i];
    }
    /* Insert in batches: hash and prefetch 64 slots, then write them (see flush_merges). */
    for (size_t i0 = 0; i0 < n; i0 += 64) {
        uint64_t h[64];
        size_t m = n - i0 < 64 ? n - i0 : 64;
        for (size_t i = 0; i < m; i++) {
            h[i] = tok_hash(t->arena + offs[i0 + i], lens[i0 + i]);
            tok_strmap_prefetch(&t->bpe.vocab, h[i]);
        }
        for (size_t i = 0; i < m; i++)
            tok_strmap_put_h(&t->bpe.vocab, t->arena + offs[i0 + i], lens[i0 + i],
                             (int32_t)ids[i0 + i], h[i]);
    }
    rc = 0;
    goto done;
bad:
    if (rc == CAIRN_EFORMAT)
        rc = tok_err(err, errlen, rc, "malformed model.vocab near byte %zu",
                     (size_t)(s.p - json));
fail:
done:
    cairn_free(scratch.p);
    cairn_free(offs);
    cairn_free(lens);
    cairn_free(ids);
    return rc;
}

/*
 * Merges are resolved in batches: parse MERGE_BATCH entries, hash all their strings and
 * prefetch the vocab slots, then look them up and prefetch the merge-map slots, then
 * insert. The maps are far larger than the caches, so overlapping the misses matters.
 */
#define MERGE_BATCH 64
typedef struct {
    tok_buf_t text;  /* for each merge: a then b, back to back (so a+b is one span) */
    size_t off[MERGE_BATCH], an[MERGE_BATCH], bn[MERGE_BATCH];
    size_t n, first_rank;
} merge_batch_t;

static int missing_part(const char *s, size_t n, char *err, size_t errlen)
{
    return tok_err(err, errlen, CAIRN_EFORMAT, "merge token '%.*s' is not in the vocab",
                   (int)(n > 64 ? 64 : n), s);
}

static int flush_merges(cairn_tokenizer_t *t, merge_batch_t *mb, char *err, size_t errlen)
{
    uint64_t h[MERGE_BATCH][3];
    uint32_t ids[MERGE_BATCH][3];
    const tok_strmap_t *v = &t->bpe.vocab;
    for (size_t i = 0; i < mb->n; i++) {
        const char *a = mb->text.p + mb->off[i];
        h[i][0] = tok_hash(a, mb->an[i]);
        h[i][1] = tok_hash(a + mb->an[i], mb->bn[i]);
        h[i][2] = tok_hash(a, mb->an[i] + mb->bn[i]);
        for (int k = 0; k < 3; k++) tok_strmap_prefetch(v, h[i][k]);
    }
    for (size_t i = 0; i < mb->n; i++) {
        const char *a = mb->text.p + mb->off[i];
        const char *part[3] = {a, a + mb->an[i], a};
        size_t plen[3] = {mb->an[i], mb->bn[i], mb->an[i] + mb->bn[i]};
        for (int k = 0; k < 3; k++) {
            int32_t id = tok_strmap_get_h(v, part[k], plen[k], h[i][k]);
            if (id < 0) return missing_part(part[k], plen[k], err, errlen);
            ids[i][k] = (uint32_t)id;
        }
        tok_mergemap_prefetch(&t->bpe.merges, ids[i][0], ids[i][1]);
    }
    for (size_t i = 0; i < mb->n; i++) {
        int rc = tok_mergemap_put(&t->bpe.merges, ids[i][0], ids[i][1],
                                  (uint32_t)(mb->first_rank + i), ids[i][2]);
        if (rc) return rc;
    }
    mb->first_rank += mb->n;
    mb->n = 0;
    mb->text.len = 0;
    return 0;
}

int tok_json_load_merges(cairn_tokenizer_t *t, const char *json, size_t len, size_t *used,
                         char *err, size_t errlen)
{
    scan_t s = {json, json + len};
    tok_buf_t scratch = {0}, scratch2 = {0};
    merge_batch_t mb = {0};
    int rc;
    size_t rank = 0;

    skip_ws(&s);
    if (s.p >= s.end || *s.p != '[') { rc = tok_err(err, errlen, CAIRN_EFORMAT, "model.merges is not an array"); goto fail; }
    s.p++;
    skip_ws(&s);
    /* Size the map from the number of quotes: 2 per "a b" merge, 4 per ["a","b"]. Escaped
     * quotes only over-count; the map still grows if needed. */
    size_t quotes = 0;
    for (const char *q = s.p; (q = memchr(q, '"', (size_t)(s.end - q))) != NULL; q++) quotes++;
    if ((rc = tok_mergemap_init(&t->bpe.merges, quotes / (s.p < s.end && *s.p == '[' ? 4 : 2) + 16)))
        goto fail;
    if (s.p < s.end && *s.p == ']') s.p++;
    else for (;;) {
        const char *a, *b;
        if (t->bpe.merges.count > (1u << 26)) { rc = CAIRN_EFORMAT; goto bad; }
        size_t an, bn;
        skip_ws(&s);
        if (s.p >= s.end) { rc = CAIRN_EFORMAT; goto bad; }
        if (*s.p == '"') {
            const char *m;
            size_t mn;
            if ((rc = scan_string(&s, &scratch, &m, &mn))) goto bad;
            const char *sp = memchr(m, ' ', mn);
            if (!sp) {
                rc = tok_err(err, errlen, CAIRN_EFORMAT, "merge %zu ('%.*s') has no space",
                             rank, (int)(mn > 64 ? 64 : mn), m);
                goto fail;
            }
            a = m; an = (size_t)(sp - m);
            b = sp + 1; bn = mn - an - 1;
        } else if (*s.p == '[') {
            s.p++;
            skip_ws(&s);
            if ((rc = scan_string(&s, &scratch, &a, &an))) goto bad;
            skip_ws(&s);
            if (s.p >= s.end || *s.p != ',') { rc = CAIRN_EFORMAT; goto bad; }
            s.p++;
            skip_ws(&s);
            if ((rc = scan_string(&s, &scratch2, &b, &bn))) goto bad;
            skip_ws(&s);
            if (s.p >= s.end || *s.p != ']') { rc = CAIRN_EFORMAT; goto bad; }
            s.p++;
        } else {
            rc = CAIRN_EFORMAT;
            goto bad;
        }
        mb.off[mb.n] = mb.text.len;
        mb.an[mb.n] = an;
        mb.bn[mb.n] = bn;
        if (tok_buf_append(&mb.text, a, an) || tok_buf_append(&mb.text, b, bn)) { rc = CAIRN_ENOMEM; goto fail; }
        rank++;
        if (++mb.n == MERGE_BATCH && (rc = flush_merges(t, &mb, err, errlen))) goto fail;
        skip_ws(&s);
        if (s.p >= s.end) { rc = CAIRN_EFORMAT; goto bad; }
        if (*s.p == ',') { s.p++; continue; }
        if (*s.p == ']') { s.p++; break; }
        rc = CAIRN_EFORMAT;
        goto bad;
    }
    if ((rc = flush_merges(t, &mb, err, errlen))) goto fail;
    *used = (size_t)(s.p - json);
    rc = 0;
    goto done;
bad:
    if (rc == CAIRN_EFORMAT)
        rc = tok_err(err, errlen, rc, "malformed model.merges near byte %zu",
                     (size_t)(s.p - json));
fail:
done:
    cairn_free(scratch.p);
    cairn_free(scratch2.p);
    cairn_free(mb.text.p);
    return rc;
}
