/*
 * fuzz_stop_matcher.c — libFuzzer target for the incremental stop-string matcher.
 *
 * Input: byte 0 picks the number of stop strings (1..4), byte 1 seeds the chunk sizes,
 * the rest is split on NUL bytes into the stop strings followed by the text. The text is
 * fed in pseudo-random chunks and the result is checked against a one-shot reference
 * (the match that ends first, then starts first, then has the lowest index); the
 * emitted bytes must be a prefix of the text and the held bytes fewer than the longest
 * stop string. Any disagreement traps.
 */
#include "cairn/sampler.h"

#include <stdlib.h>
#include <string.h>

static void check(bool ok)
{
    if (!ok)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t want = 1 + data[0] % 4;
    uint32_t rng = data[1] * 2654435761u + 1;
    const char *p = (const char *)data + 2, *end = (const char *)data + size;

    char *stops[4] = { 0 };
    size_t ns = 0, max_len = 0;
    while (ns < want && p < end) {
        const char *z = memchr(p, '\0', (size_t)(end - p));
        size_t len = z ? (size_t)(z - p) : (size_t)(end - p);
        if (len > 0) {
            stops[ns] = strndup(p, len);
            if (!stops[ns])
                goto out;
            if (len > max_len)
                max_len = len;
            ns++;
        }
        p += len + (z ? 1 : 0);
    }
    if (ns == 0)
        return 0;
    const char *text = p;
    size_t tl = (size_t)(end - p);

    /* Reference: earliest end, then earliest start, then lowest index. */
    size_t ref_end = SIZE_MAX, ref_start = SIZE_MAX;
    int ref_idx = -1;
    for (size_t i = 0; i < ns; i++) {
        size_t l = strlen(stops[i]);
        const char *hit = memmem(text, tl, stops[i], l);
        if (!hit)
            continue;
        size_t st = (size_t)(hit - text);
        if (st + l < ref_end || (st + l == ref_end && st < ref_start)) {
            ref_end = st + l;
            ref_start = st;
            ref_idx = (int)i;
        }
    }

    cairn_stop_matcher_t *m = NULL;
    if (cairn_stop_matcher_create((const char *const *)stops, ns, &m) != CAIRN_OK)
        goto out;
    size_t fed = 0, out_len = 0;
    bool stopped = false;
    while (fed < tl && !stopped) {
        rng = rng * 1664525u + 1013904223u;
        size_t c = (rng >> 24) % 9;
        if (c > tl - fed)
            c = tl - fed;
        const char *e;
        size_t el;
        check(cairn_stop_matcher_feed(m, text + fed, c, &e, &el, &stopped) == CAIRN_OK);
        fed += c;
        check(memcmp(e, text + out_len, el) == 0);
        out_len += el;
        check(stopped || fed - out_len < max_len);
    }
    if (!stopped) {
        const char *e;
        size_t el;
        check(cairn_stop_matcher_flush(m, &e, &el) == CAIRN_OK);
        check(memcmp(e, text + out_len, el) == 0);
        out_len += el;
    }
    if (ref_idx >= 0)
        check(stopped && out_len == ref_start && cairn_stop_matcher_matched(m) == ref_idx);
    else
        check(!stopped && out_len == tl);
    cairn_stop_matcher_destroy(m);
out:
    for (size_t i = 0; i < 4; i++)
        free(stops[i]);
    return 0;
}
