/*
 * spm.c — the SentencePiece (llama.cpp's "llama" tokenizer model, LLAMA_VOCAB_TYPE_SPM)
 * encoder of a GGUF file's vocabulary: tokens with scores, byte-fallback tokens <0xXX>,
 * spaces escaped as U+2581 "▁". Built by tokenizer_gguf.c; the result is llama.cpp's
 * tokenization (llama_tokenize) id for id.
 *
 * Model (what llama.cpp does, docs/DESIGN.md "Tokenizer"):
 *   - the text is first cut at the added tokens (control, unknown and user-defined tokens
 *     found in the raw text; tok_split_added);
 *   - each remaining fragment gets a leading space when add_space_prefix is set and it is
 *     the first fragment or follows an added token, then every ' ' becomes "▁";
 *   - the fragment starts as one symbol per UTF-8 character; the adjacent pair whose
 *     concatenation is a vocabulary token (any token type) of the highest score is merged,
 *     the leftmost pair on equal scores, until no pair is a token (a max-heap of candidate
 *     pairs with a staleness check: a candidate whose two symbols no longer have the
 *     lengths it was made with is dropped);
 *   - each final symbol is its token, or, when it is not one (a character outside the
 *     vocabulary), one token per byte: <0xXX>, else the byte's own one-character token,
 *     else the unknown token (llama.cpp throws there; the loader refuses a vocabulary
 *     where a byte has none of the three).
 * Memory: three arrays proportional to the fragment's length, freed before return.
 *
 * Thread-safety: reads the immutable tokenizer only; any number of concurrent calls.
 */
#include <string.h>

#include "tokenizer/tok_internal.h"

/* A symbol: a run of the escaped fragment; n == 0 once merged into its left neighbour. */
typedef struct {
    uint32_t off, n;
    int32_t prev, next;
} sym_t;

/* A candidate merge of symbols left and right (their lengths summing to size). */
typedef struct {
    float score;
    int32_t left, right;
    uint32_t size;
} pair_t;

/* llama.cpp's order: the higher score first; on equal scores the smaller left index. */
static inline bool pair_before(const pair_t *a, const pair_t *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct {
    pair_t *p;
    size_t n, cap;
} heap_t;

static void heap_push(heap_t *h, pair_t x)
{
    CAIRN_ASSERT(h->n < h->cap);
    size_t i = h->n++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!pair_before(&x, &h->p[up]))
            break;
        h->p[i] = h->p[up];
        i = up;
    }
    h->p[i] = x;
}

static pair_t heap_pop(heap_t *h)
{
    pair_t top = h->p[0], last = h->p[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && pair_before(&h->p[c + 1], &h->p[c]))
            c++;
        if (!pair_before(&h->p[c], &last))
            break;
        h->p[i] = h->p[c];
        i = c;
    }
    if (h->n)
        h->p[i] = last;
    return top;
}

/* Queues the merge of symbols l and r when their concatenation is a token. */
static void try_pair(const cairn_tokenizer_t *t, const char *buf, const sym_t *s, heap_t *h,
                     int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return;
    uint32_t size = s[l].n + s[r].n;
    if (size > t->spm.max_len)
        return;
    int32_t id = tok_strmap_get(&t->bpe.vocab, buf + s[l].off, size);
    if (id < 0)
        return;
    heap_push(h, (pair_t){t->spm.scores[id], l, r, size});
}

/* Appends the ids of one escaped fragment buf[0, n). */
static int encode_escaped(const cairn_tokenizer_t *t, const char *buf, size_t n, tok_ids_t *out)
{
    if (n == 0)
        return 0;
    if (n > INT32_MAX / 4)
        return CAIRN_ERANGE;
    sym_t *s = cairn_malloc(n * sizeof *s);
    /* At most n - 1 initial pairs and two per merge (n - 1 merges). */
    heap_t h = {cairn_malloc(3 * n * sizeof *h.p), 0, 3 * n};
    int rc = CAIRN_ENOMEM;
    if (!s || !h.p)
        goto done;
    int32_t m = 0;
    for (size_t off = 0; off < n; m++) {
        size_t len = tok_utf8_valid_len((const unsigned char *)buf + off, n - off);
        if (len == 0)
            len = 1; /* not reached: the text is valid UTF-8 */
        s[m] = (sym_t){(uint32_t)off, (uint32_t)len, m - 1, off + len == n ? -1 : m + 1};
        off += len;
    }
    for (int32_t i = 1; i < m; i++)
        try_pair(t, buf, s, &h, i - 1, i);
    while (h.n) {
        pair_t p = heap_pop(&h);
        sym_t *l = &s[p.left], *r = &s[p.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.size)
            continue; /* one of them was merged since */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            s[r->next].prev = p.left;
        try_pair(t, buf, s, &h, l->prev, p.left);
        try_pair(t, buf, s, &h, p.left, l->next);
    }
    rc = 0;
    for (int32_t i = 0; i >= 0 && !rc; i = s[i].next) {
        int32_t id = tok_strmap_get(&t->bpe.vocab, buf + s[i].off, s[i].n);
        if (id >= 0) {
            rc = tok_ids_push(out, id);
            continue;
        }
        for (uint32_t k = 0; k < s[i].n && !rc; k++) {
            int32_t b = t->spm.byte_id[(unsigned char)buf[s[i].off + k]];
            rc = tok_ids_push(out, b >= 0 ? b : t->bpe.unk_id);
        }
    }
done:
    cairn_free(s);
    cairn_free(h.p);
    return rc;
}

/* One fragment of raw text: the optional prefix space, spaces escaped, then the merges. */
static int encode_fragment(const cairn_tokenizer_t *t, const char *s, size_t n, bool prefix,
                           tok_ids_t *out)
{
    static const char sp[3] = {'\xE2', '\x96', '\x81'}; /* U+2581 */
    tok_buf_t b = {0};
    size_t spaces = prefix;
    for (size_t i = 0; i < n; i++)
        spaces += s[i] == ' ';
    int rc = tok_buf_reserve(&b, n + 2 * spaces + 3);
    if (rc)
        return rc;
    if (prefix) {
        memcpy(b.p, sp, 3);
        b.len = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(b.p + b.len, sp, 3);
            b.len += 3;
        } else {
            b.p[b.len++] = s[i];
        }
    }
    rc = encode_escaped(t, b.p, b.len, out);
    cairn_free(b.p);
    return rc;
}

int tok_spm_encode(const cairn_tokenizer_t *t, bool split_special, const char *text, size_t len,
                   tok_ids_t *out)
{
    tok_spans_t segs = {0};
    tok_ids_t seg_ids = {0};
    int rc = 0;
    if (len == 0)
        return 0;
    if (!t->n_added_lens[0])
        return encode_fragment(t, text, len, t->spm.add_space_prefix, out);
    if ((rc = tok_split_added(t, 0, split_special, text, len, &segs, &seg_ids)))
        goto done;
    bool after_added = true; /* the first fragment is prefixed as if one preceded it */
    for (size_t i = 0; i < segs.len && !rc; i++) {
        if (seg_ids.p[i] >= 0) {
            rc = tok_ids_push(out, seg_ids.p[i]);
            after_added = true;
        } else if (segs.p[i].len) {
            rc = encode_fragment(t, text + segs.p[i].off, segs.p[i].len,
                                 t->spm.add_space_prefix && after_added, out);
            after_added = false;
        }
    }
done:
    cairn_free(segs.p);
    cairn_free(seg_ids.p);
    return rc;
}
