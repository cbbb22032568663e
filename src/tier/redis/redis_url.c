/*
 * redis_url.c — the shared tier's URL: redis://HOST[:PORT][/DB] and rediss://.
 *
 * Model: a strict parser of the one form the CLI accepts (docs/API.md, "Shared tier").
 * HOST is a DNS name or IPv4 address (letters, digits, '-', '.', '_') or a bracketed IPv6
 * address; PORT 1..65535 (default 6379); DB 0..2^31-1 (default 0). Credentials
 * (user:pass@) are refused on purpose: a URL on the command line shows in `ps` and in
 * shell history, so AUTH comes from a file or the environment. Query strings and
 * fragments are refused rather than ignored. TLS: this build's hiredis (0.14, Debian 12)
 * has no SSL support, so rediss:// is a clear error, not a silent plaintext connection.
 * Fuzzed by fuzz/fuzz_shared_tier_url.c.
 * Thread-safety: pure functions.
 */
#include <stdio.h>
#include <string.h>

#include "tier/redis/redis_impl.h"

static void say(char *err, size_t err_len, const char *url, const char *why)
{
    cairn_errf(err, err_len, "shared tier URL '%.120s': %s", url, why);
}

static bool host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_';
}

static bool v6_char(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.';
}

/* Parses digits [p, end) into *out within [lo, hi]. */
static bool number(const char *p, const char *end, long long lo, long long hi, long long *out)
{
    if (p == end || end - p > 10)
        return false;
    long long v = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return false;
        v = v * 10 + (*p - '0');
    }
    if (v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

int redis_url_parse(const char *url, redis_url_t *out, char *err, size_t err_len)
{
    memset(out, 0, sizeof *out);
    if (!url) {
        say(err, err_len, "", "missing");
        return CAIRN_EINVAL;
    }
    const char *p;
    if (!strncmp(url, "redis://", 8)) {
        p = url + 8;
    } else if (!strncmp(url, "rediss://", 9)) {
        p = url + 9;
        out->tls = true;
    } else {
        say(err, err_len, url, "must start with redis:// (or rediss:// for TLS)");
        return CAIRN_EINVAL;
    }
    if (strchr(p, '@')) {
        say(err, err_len, "redis://...@...",
            "credentials in the URL would show in the process list; give them with "
            "--shared-tier-auth-file FILE or the environment variable CAIRN_SHARED_TIER_AUTH");
        return CAIRN_EINVAL;
    }
    if (strpbrk(p, "?#")) {
        say(err, err_len, url, "query strings and fragments are not supported");
        return CAIRN_EINVAL;
    }
    const char *h0, *h1, *q;
    if (*p == '[') {
        h0 = p + 1;
        h1 = strchr(h0, ']');
        if (!h1 || h1 == h0) {
            say(err, err_len, url, "an IPv6 host needs its closing ']'");
            return CAIRN_EINVAL;
        }
        for (const char *c = h0; c < h1; c++)
            if (!v6_char(*c)) {
                say(err, err_len, url, "not an IPv6 address between [ and ]");
                return CAIRN_EINVAL;
            }
        q = h1 + 1;
    } else {
        h0 = p;
        h1 = p;
        while (host_char(*h1))
            h1++;
        if (h1 == h0) {
            say(err, err_len, url, "no host");
            return CAIRN_EINVAL;
        }
        q = h1;
    }
    if ((size_t)(h1 - h0) >= sizeof out->host) {
        say(err, err_len, url, "host name too long");
        return CAIRN_EINVAL;
    }
    memcpy(out->host, h0, (size_t)(h1 - h0));
    out->port = 6379;
    long long v;
    if (*q == ':') {
        const char *e = q + 1;
        while (*e && *e != '/')
            e++;
        if (!number(q + 1, e, 1, 65535, &v)) {
            say(err, err_len, url, "the port must be a number in 1..65535");
            return CAIRN_EINVAL;
        }
        out->port = (int)v;
        q = e;
    }
    if (*q == '/') {
        const char *e = q + 1 + strlen(q + 1);
        if (e > q + 1) {
            if (!number(q + 1, e, 0, 2147483647LL, &v)) {
                say(err, err_len, url, "the database must be a number (redis://HOST:PORT/DB)");
                return CAIRN_EINVAL;
            }
            out->db = (int)v;
        }
        q = e;
    }
    if (*q) {
        say(err, err_len, url, "unexpected text after the host (expected :PORT or /DB)");
        return CAIRN_EINVAL;
    }
    bool v6 = strchr(out->host, ':') != NULL;
    snprintf(out->text, sizeof out->text, "%s://%s%s%s:%d/%d", out->tls ? "rediss" : "redis", v6 ? "[" : "",
             out->host, v6 ? "]" : "", out->port, out->db);
    return CAIRN_OK;
}

int redis_url_supported(const redis_url_t *u, char *err, size_t err_len)
{
    if (!u->tls)
        return CAIRN_OK;
    /* hiredis gained TLS (the separate hiredis_ssl library) in 1.0; Debian 12 ships 0.14. */
    if (err && err_len)
        cairn_errf(err, err_len,
                 "shared tier URL '%s': TLS (rediss://) needs hiredis built with SSL support (hiredis >= 1.0 "
                 "with hiredis_ssl); this build uses hiredis %d.%d.%d without it. Use redis:// on a trusted "
                 "network or a TLS tunnel (stunnel, spiped) to the server",
                 u->text, HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH);
    return CAIRN_EUNSUPPORTED;
}
