/*
 * fuzz_tokenizer_load.c — libFuzzer target over tokenizer.json loading.
 *
 * The input is a whole tokenizer.json text. Loading must never crash, leak or read out of
 * bounds; it either fails with a status (and a message) or yields a tokenizer, which is
 * then exercised once: encode a fixed string (with and without special handling), decode
 * the ids, and stream them. Seeds: fuzz/corpus/tokenizer_load/.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cairn/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cairn_tokenizer_t *tok = NULL;
    char err[256];
    if (cairn_tokenizer_load_json((const char *)data, size, &tok, err, sizeof err) != 0)
        return 0;
    static const char text[] = "Hello <|im_start|> wörld 123 'll\n\n  x<x>ab";
    for (unsigned flags = 0; flags < 4; flags++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (cairn_tokenizer_encode_ex(tok, text, sizeof text - 1, flags, &ids, &n) == 0) {
            char *out = NULL;
            size_t len = 0;
            if (cairn_tokenizer_decode(tok, ids, n, flags & 1, &out, &len) == 0) cairn_free(out);
            cairn_tokenizer_stream_t *st = NULL;
            if (cairn_tokenizer_stream_create(tok, false, &st) == 0) {
                const char *piece;
                size_t plen;
                for (size_t i = 0; i < n; i++) cairn_tokenizer_stream_push(st, ids[i], &piece, &plen);
                cairn_tokenizer_stream_flush(st, &piece, &plen);
                cairn_tokenizer_stream_destroy(st);
            }
            cairn_free(ids);
        }
    }
    cairn_tokenizer_destroy(tok);
    return 0;
}
