/*
 * stop_matcher.c — incremental stop-string matching over a sequence's decoded text.
 *
 * Model. The matcher owns one buffer laid out as [emitted | held]: the bytes returned by
 * the last call, then the held-back suffix. A feed moves the held bytes to the front,
 * appends the new chunk and looks for a stop string that ends inside the new bytes
 * (none can end inside the held bytes: those were searched when they arrived).
 *
 * Invariants, which make the result independent of how the text is chunked:
 *  - the held suffix is the longest suffix of the text seen so far that is a proper
 *    prefix of some stop string, so any match in progress starts inside it;
 *  - a match is the one that ends first; among those ending at the same byte the one
 *    that starts first, then the lowest index — the match a byte-by-byte feed would see.
 *
 * Cost: a feed of c bytes with h held bytes is O((h + c) * n_stops) byte comparisons of
 * the last byte plus a memcmp per candidate, and O(max_len * n_stops * max_len) for the
 * held suffix; stop strings are short, so this is small next to a decode step.
 *
 * Thread-safety: one matcher per sequence; calls must be serialized.
 */
#include "cairn/sampler.h"

#include <string.h>

struct cairn_stop_matcher {
    size_t n;
    const char **stops;  /* [n] pointers into `blob` */
    size_t *lens;        /* [n] byte lengths, each >= 1 */
    char *blob;          /* the stop strings, NUL-separated */
    size_t max_len;

    char *buf;           /* [cap] emitted bytes then held bytes */
    size_t cap;
    size_t hold_off, hold_len;
    bool finished;
    int matched;         /* index of the matching stop string, or -1 */
};

int cairn_stop_matcher_create(const char *const *stops, size_t n, cairn_stop_matcher_t **out)
{
    if (!out || (n && !stops))
        return CAIRN_EINVAL;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0])
            return CAIRN_EINVAL;
        total += strlen(stops[i]) + 1;
    }
    cairn_stop_matcher_t *m = cairn_calloc(1, sizeof(*m));
    if (!m)
        return CAIRN_ENOMEM;
    m->n = n;
    m->matched = -1;
    if (n) {
        m->stops = cairn_malloc(n * sizeof(*m->stops));
        m->lens = cairn_malloc(n * sizeof(*m->lens));
        m->blob = cairn_malloc(total);
        if (!m->stops || !m->lens || !m->blob) {
            cairn_stop_matcher_destroy(m);
            return CAIRN_ENOMEM;
        }
        char *p = m->blob;
        for (size_t i = 0; i < n; i++) {
            size_t len = strlen(stops[i]);
            memcpy(p, stops[i], len + 1);
            m->stops[i] = p;
            m->lens[i] = len;
            if (len > m->max_len)
                m->max_len = len;
            p += len + 1;
        }
    }
    *out = m;
    return CAIRN_OK;
}

void cairn_stop_matcher_destroy(cairn_stop_matcher_t *m)
{
    if (!m)
        return;
    cairn_free(m->stops);
    cairn_free(m->lens);
    cairn_free(m->blob);
    cairn_free(m->buf);
    cairn_free(m);
}

void cairn_stop_matcher_reset(cairn_stop_matcher_t *m)
{
    m->hold_off = 0;
    m->hold_len = 0;
    m->finished = false;
    m->matched = -1;
}

int cairn_stop_matcher_matched(const cairn_stop_matcher_t *m) { return m->matched; }

/* Length of the longest suffix of t[0..len) that is a proper prefix of a stop string. */
static size_t held_suffix(const cairn_stop_matcher_t *m, const char *t, size_t len)
{
    size_t h = m->max_len ? m->max_len - 1 : 0;
    if (h > len)
        h = len;
    for (; h > 0; h--)
        for (size_t i = 0; i < m->n; i++)
            if (m->lens[i] > h && memcmp(t + len - h, m->stops[i], h) == 0)
                return h;
    return 0;
}

int cairn_stop_matcher_feed(cairn_stop_matcher_t *m, const char *text, size_t len,
                            const char **emit, size_t *emit_len, bool *stopped)
{
    if (!m || (len && !text) || !emit || !emit_len || !stopped)
        return CAIRN_EINVAL;
    if (m->finished)
        return CAIRN_ESTATE;
    *stopped = false;

    /* [emitted | held] -> [held], then append the chunk. */
    if (m->hold_off) {
        memmove(m->buf, m->buf + m->hold_off, m->hold_len);
        m->hold_off = 0;
    }
    size_t total = m->hold_len + len;
    if (total > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        while (cap < total)
            cap *= 2;
        char *nb = cairn_realloc(m->buf, cap);
        if (!nb)
            return CAIRN_ENOMEM;
        m->buf = nb;
        m->cap = cap;
    }
    if (len)
        memcpy(m->buf + m->hold_len, text, len);
    const char *t = m->buf ? m->buf : "";   /* never hand out NULL, even for 0 bytes */

    /* The first end position at which any stop string completes. */
    for (size_t e = m->hold_len + 1; e <= total; e++) {
        size_t best_start = SIZE_MAX;
        int best = -1;
        for (size_t i = 0; i < m->n; i++) {
            size_t l = m->lens[i];
            if (l > e || t[e - 1] != m->stops[i][l - 1])
                continue;
            if (e - l < best_start && memcmp(t + e - l, m->stops[i], l) == 0) {
                best_start = e - l;
                best = (int)i;
            }
        }
        if (best >= 0) {
            m->matched = best;
            m->finished = true;
            m->hold_len = 0;
            *emit = t;
            *emit_len = best_start;
            *stopped = true;
            return CAIRN_OK;
        }
    }

    size_t h = held_suffix(m, t, total);
    m->hold_off = total - h;
    m->hold_len = h;
    *emit = t;
    *emit_len = total - h;
    return CAIRN_OK;
}

int cairn_stop_matcher_flush(cairn_stop_matcher_t *m, const char **emit, size_t *emit_len)
{
    if (!m || !emit || !emit_len)
        return CAIRN_EINVAL;
    if (m->finished)
        return CAIRN_ESTATE;
    *emit = m->buf ? m->buf + m->hold_off : "";
    *emit_len = m->hold_len;
    m->hold_len = 0;
    m->finished = true;
    return CAIRN_OK;
}
