/*
 * decode.c — ids back to text: the ByteLevel decoder, lossy UTF-8 assembly and the
 * streaming decoder.
 *
 * A token decodes to bytes: with the ByteLevel decoder each character of its string maps
 * back through the GPT-2 byte table (a token with a character outside that alphabet, e.g.
 * an added token with a space, contributes its raw UTF-8, as `tokenizers` does); with the
 * SentencePiece decoder a byte token <0xXX> is its byte and "▁" is a space (decode drops
 * the leading space of the first token when the encoder adds one; the stream keeps it, as
 * llama.cpp's token_to_piece does); with no decoder, tokens are joined with spaces. The concatenated bytes become text with every
 * maximal invalid UTF-8 subpart replaced by U+FFFD (Rust's from_utf8_lossy).
 *
 * The stream keeps the bytes of an unfinished character between pushes, so it never emits
 * half a character and a token completing a character begun by the previous one emits
 * the whole character. Thread-safety: a stream is single-threaded; the tokenizer is
 * only read.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

struct cairn_tokenizer_stream {
    const cairn_tokenizer_t *tok;
    bool skip_special;
    bool started;      /* a token was emitted (for the space-joining null decoder) */
    tok_buf_t pending; /* bytes of an incomplete character */
    tok_buf_t out;     /* text returned by the last call */
};

/* A SentencePiece token's bytes: a byte token's byte, else its text with "▁" as ' '. */
static int spm_bytes(const cairn_tokenizer_t *t, int32_t id, tok_buf_t *out)
{
    if (t->spm.byte_of[id] >= 0) {
        char b = (char)t->spm.byte_of[id];
        return tok_buf_append(out, &b, 1);
    }
    const char *s = t->text[id];
    size_t n = t->text_len[id];
    if (tok_buf_reserve(out, n)) return CAIRN_ENOMEM;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && !memcmp(s + i, "\xE2\x96\x81", 3)) {
            out->p[out->len++] = ' ';
            i += 3;
        } else {
            out->p[out->len++] = s[i++];
        }
    }
    out->p[out->len] = '\0';
    return 0;
}

/* Appends the bytes token id decodes to. */
static int token_bytes(const cairn_tokenizer_t *t, int32_t id, tok_buf_t *out)
{
    const char *s = t->text[id];
    size_t n = t->text_len[id];
    if (t->decoder == TOK_DEC_SPM) return spm_bytes(t, id, out);
    if (t->decoder != TOK_DEC_BYTELEVEL) return tok_buf_append(out, s, n);
    size_t start = out->len;
    if (tok_buf_reserve(out, n)) return CAIRN_ENOMEM;
    for (size_t i = 0; i < n;) {
        size_t adv;
        int b = -1;
        if (tok_utf8_valid_len((const unsigned char *)s + i, n - i)) {
            b = tok_cp_to_byte(tok_utf8_decode((const unsigned char *)s + i, &adv));
        } else {
            adv = 1;
        }
        if (b < 0) {
            out->len = start;
            return tok_buf_append(out, s, n);
        }
        out->p[out->len++] = (char)b;
        i += adv;
    }
    out->p[out->len] = '\0';
    return 0;
}

/* How many bytes at s are a valid prefix of some UTF-8 sequence (0 if s[0] cannot start
 * one), and the full length that sequence needs. */
static size_t valid_prefix(const unsigned char *s, size_t n, size_t *need)
{
    unsigned c = s[0];
    if (c < 0xC2 || c > 0xF4) { *need = 1; return 0; }
    *need = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (n < 2) return 1;
    unsigned lo = 0x80, hi = 0xBF;
    if (c == 0xE0) lo = 0xA0;
    else if (c == 0xED) hi = 0x9F;
    else if (c == 0xF0) lo = 0x90;
    else if (c == 0xF4) hi = 0x8F;
    if (s[1] < lo || s[1] > hi) return 1;
    size_t k = 2;
    while (k < n && k < *need && (s[k] & 0xC0) == 0x80) k++;
    return k;
}

static const char replacement[] = "\xEF\xBF\xBD";

/*
 * Moves the complete part of src[0..n) into out as valid UTF-8. If hold_tail, a trailing
 * incomplete-but-valid prefix is left unconsumed; returns the number of bytes consumed.
 */
static int lossy_append(const char *src, size_t n, bool hold_tail, tok_buf_t *out, size_t *used)
{
    const unsigned char *s = (const unsigned char *)src;
    size_t i = 0;
    if (tok_buf_reserve(out, n + 3)) return CAIRN_ENOMEM;
    while (i < n) {
        if (s[i] < 0x80) {
            out->p[out->len++] = (char)s[i++];
            continue;
        }
        size_t k = tok_utf8_valid_len(s + i, n - i);
        if (k) {
            memcpy(out->p + out->len, s + i, k);
            out->len += k;
            i += k;
            continue;
        }
        size_t need, p = valid_prefix(s + i, n - i, &need);
        if (p && i + p == n && p < need && hold_tail) break;
        if (tok_buf_reserve(out, n - i + 3)) return CAIRN_ENOMEM;
        memcpy(out->p + out->len, replacement, 3);
        out->len += 3;
        i += p ? p : 1;
    }
    out->p[out->len] = '\0';
    *used = i;
    return 0;
}

int cairn_tokenizer_token_to_piece(const cairn_tokenizer_t *t, int32_t id, char *buf,
                                   size_t cap, size_t *len)
{
    tok_buf_t b = {0};
    if (!t || !len || (!buf && cap) || id < 0 || (size_t)id >= t->n_ids || !t->text[id])
        return CAIRN_EINVAL;
    int rc = token_bytes(t, id, &b);
    if (rc == 0) {
        *len = b.len;
        if (cap) memcpy(buf, b.p, b.len < cap ? b.len : cap);
    }
    cairn_free(b.p);
    return rc;
}

int cairn_tokenizer_decode(const cairn_tokenizer_t *t, const int32_t *ids, size_t n,
                           bool skip_special, char **text, size_t *len)
{
    tok_buf_t raw = {0}, out = {0};
    size_t used;
    bool first = true;
    int rc;
    if (!t || (!ids && n) || !text || !len) return CAIRN_EINVAL;
    *text = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= t->n_ids || !t->text[id]) { rc = CAIRN_EINVAL; goto fail; }
        if (skip_special && t->is_special[id]) continue;
        if (t->decoder == TOK_DEC_NONE && !first && (rc = tok_buf_append(&raw, " ", 1))) goto fail;
        size_t start = raw.len;
        if ((rc = token_bytes(t, id, &raw))) goto fail;
        /* SentencePiece with add_space_prefix: the space the encoder put before the text is
         * dropped from the first token (llama.cpp's detokenize, HF's Strip decoder). */
        if (first && t->spm.on && t->spm.add_space_prefix && raw.len > start && raw.p[start] == ' ') {
            memmove(raw.p + start, raw.p + start + 1, raw.len - start - 1);
            raw.p[--raw.len] = '\0';
        }
        first = false;
    }
    if ((rc = tok_buf_append(&out, "", 0))) goto fail;
    if ((rc = lossy_append(raw.p ? raw.p : "", raw.len, false, &out, &used))) goto fail;
    cairn_free(raw.p);
    *text = out.p;
    *len = out.len;
    return 0;
fail:
    cairn_free(raw.p);
    cairn_free(out.p);
    return rc;
}

int cairn_tokenizer_stream_create(const cairn_tokenizer_t *t, bool skip_special,
                                  cairn_tokenizer_stream_t **out)
{
    if (!t || !out) return CAIRN_EINVAL;
    cairn_tokenizer_stream_t *st = cairn_calloc(1, sizeof *st);
    if (!st) return CAIRN_ENOMEM;
    st->tok = t;
    st->skip_special = skip_special;
    if (tok_buf_append(&st->out, "", 0)) {
        cairn_free(st);
        return CAIRN_ENOMEM;
    }
    *out = st;
    return 0;
}

int cairn_tokenizer_stream_push(cairn_tokenizer_stream_t *st, int32_t id, const char **text,
                                size_t *len)
{
    if (!st || !text || !len) return CAIRN_EINVAL;
    const cairn_tokenizer_t *t = st->tok;
    *text = NULL;
    *len = 0;
    if (id < 0 || (size_t)id >= t->n_ids || !t->text[id]) return CAIRN_EINVAL;
    st->out.len = 0;
    st->out.p[0] = '\0';
    if (!(st->skip_special && t->is_special[id])) {
        size_t before = st->pending.len;
        int rc = 0;
        if (t->decoder == TOK_DEC_NONE && st->started) rc = tok_buf_append(&st->pending, " ", 1);
        if (!rc) rc = token_bytes(t, id, &st->pending);
        if (rc) {
            st->pending.len = before; /* the push had no effect */
            return rc;
        }
        st->started = true;
        size_t used;
        if ((rc = lossy_append(st->pending.p, st->pending.len, true, &st->out, &used))) {
            st->pending.len = before;
            return rc;
        }
        memmove(st->pending.p, st->pending.p + used, st->pending.len - used);
        st->pending.len -= used;
    }
    *text = st->out.p;
    *len = st->out.len;
    return 0;
}

int cairn_tokenizer_stream_flush(cairn_tokenizer_stream_t *st, const char **text, size_t *len)
{
    if (!st || !text || !len) return CAIRN_EINVAL;
    size_t used;
    st->out.len = 0;
    st->out.p[0] = '\0';
    int rc = lossy_append(st->pending.p ? st->pending.p : "", st->pending.len, false, &st->out, &used);
    if (rc) return rc;
    st->pending.len = 0;
    st->started = false;
    *text = st->out.p;
    *len = st->out.len;
    return 0;
}

void cairn_tokenizer_stream_destroy(cairn_tokenizer_stream_t *st)
{
    if (!st) return;
    cairn_free(st->pending.p);
    cairn_free(st->out.p);
    cairn_free(st);
}
