/*
 * fuzz_cold_events.c — libFuzzer target for the events file parser (cairn_cold_events_parse,
 * docs/FORMAT.md 1.11: <model dir>/events.json, which every engine rewrites at close and
 * `cairn cache stats` reads).
 *
 * Invariants: no out-of-bounds access (ASan); an accepted file has at most
 * CAIRN_COLD_EVENTS_MAX counters, each named [a-z0-9_]{1,47} and named once; rendering it
 * (fs_events_render, what an update writes) and parsing that again gives the same
 * counters, processes and time.
 * Seed corpus: fuzz/corpus/cold_events/.
 */
#include <stdlib.h>
#include <string.h>

#include "cairn/cold_tier.h"
#include "util/util.h"

char *fs_events_render(const cairn_cold_events_t *e, size_t *len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static cairn_cold_events_t a, b;
    char err[160];
    if (cairn_cold_events_parse((const char *)data, size, &a, err, sizeof err) != CAIRN_OK)
        return 0;
    if (a.n > CAIRN_COLD_EVENTS_MAX)
        abort();
    for (uint32_t i = 0; i < a.n; i++) {
        size_t n = strnlen(a.names[i], CAIRN_COLD_EVENT_NAME);
        if (n == 0 || n >= CAIRN_COLD_EVENT_NAME || strspn(a.names[i], "abcdefghijklmnopqrstuvwxyz0123456789_") != n)
            abort();
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(a.names[i], a.names[j]))
                abort();
    }
    size_t len = 0;
    char *text = fs_events_render(&a, &len);
    if (!text)
        return 0;
    if (cairn_cold_events_parse(text, len, &b, err, sizeof err) != CAIRN_OK || b.n != a.n ||
        b.processes != a.processes || b.updated_s != a.updated_s)
        abort();
    for (uint32_t i = 0; i < a.n; i++)
        if (strcmp(a.names[i], b.names[i]) || a.values[i] != b.values[i])
            abort();
    cairn_free(text);
    return 0;
}
