/*
 * fuzz_tokenizer_roundtrip.c — libFuzzer target over encode/decode round trips.
 *
 * Loads the shared small-model tokenizer (byte-level BPE, NFC normalizer) once, from
 * $CAIRN_FUZZ_TOKENIZER or, by default, ../shared/fixtures/models/tokenizer relative to the
 * working directory. For each input:
 *  - invalid UTF-8 must be rejected with CAIRN_EINVAL;
 *  - valid UTF-8 x must satisfy decode(encode(x)) == NFC(x), both with special tokens
 *    recognized and with SPLIT_SPECIAL;
 *  - streaming the ids must produce the same text, never half a character per push.
 * Any violation aborts (a finding). Seeds: fuzz/corpus/tokenizer_roundtrip/.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "cairn/tokenizer.h"

static cairn_tokenizer_t *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("CAIRN_FUZZ_TOKENIZER");
    char err[256];
    if (!dir) dir = "../shared/fixtures/models/tokenizer";
    if (cairn_tokenizer_load(dir, &tok, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_tokenizer_roundtrip: cannot load %s: %s (set CAIRN_FUZZ_TOKENIZER)\n", dir, err);
        abort();
    }
    return 0;
}

static bool valid_utf8(const char *s, size_t n)
{
    utf8proc_int32_t cp;
    for (size_t i = 0; i < n;) {
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) return false;
        i += (size_t)k;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    bool valid = valid_utf8(text, size);
    for (unsigned flags = 0; flags <= CAIRN_TOKENIZE_SPLIT_SPECIAL; flags += CAIRN_TOKENIZE_SPLIT_SPECIAL) {
        int32_t *ids = NULL;
        size_t n = 0;
        int rc = cairn_tokenizer_encode_ex(tok, text, size, flags, &ids, &n);
        if (!valid) {
            if (rc != CAIRN_EINVAL) abort();
            return 0;
        }
        if (rc != 0) abort();
        char *out = NULL;
        size_t len = 0;
        if (cairn_tokenizer_decode(tok, ids, n, false, &out, &len) != 0) abort();
        /* The tokenizer normalizes to NFC; NUL-free inputs only for utf8proc's C-string API. */
        utf8proc_uint8_t *want = NULL;
        utf8proc_ssize_t wn = utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)size, &want,
                                           UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (wn < 0 || (size_t)wn != len || memcmp(want, out, len) != 0) abort();
        free(want);
        cairn_tokenizer_stream_t *st = NULL;
        if (cairn_tokenizer_stream_create(tok, false, &st) != 0) abort();
        size_t got = 0;
        for (size_t i = 0; i < n; i++) {
            const char *piece;
            size_t plen;
            if (cairn_tokenizer_stream_push(st, ids[i], &piece, &plen) != 0) abort();
            if (!valid_utf8(piece, plen) || got + plen > len || memcmp(out + got, piece, plen) != 0) abort();
            got += plen;
        }
        const char *piece;
        size_t plen;
        if (cairn_tokenizer_stream_flush(st, &piece, &plen) != 0 || plen != 0 || got != len) abort();
        cairn_tokenizer_stream_destroy(st);
        cairn_free(out);
        cairn_free(ids);
    }
    return 0;
}
