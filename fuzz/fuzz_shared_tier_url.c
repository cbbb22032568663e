/*
 * fuzz_shared_tier_url.c — libFuzzer target for the shared tier's configuration parsers:
 * the URL (redis_url_parse: redis://HOST[:PORT][/DB]) and the credentials line
 * (tier_shared_parse_auth: "PASSWORD" or "USERNAME PASSWORD").
 *
 * The input is split at its first NUL: the URL before it, the credentials after it.
 * Invariants: no out-of-bounds access (ASan); an accepted URL has a non-empty host, a port
 * in 1..65535 and a DB >= 0, never carries credentials, and its normalized text parses
 * again to the same host, port and DB; accepted credentials are 1 or 2 non-empty words
 * without control characters.
 * Seed corpus: fuzz/corpus/shared_tier_url/.
 */
#include <stdlib.h>
#include <string.h>

#include "tier/redis/redis_impl.h"

int tier_shared_parse_auth(const char *text, size_t len, char **username, char **password, char *err,
                           size_t err_len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t ul = nul ? (size_t)(nul - data) : size;
    char *url = malloc(ul + 1);
    if (!url)
        abort();
    memcpy(url, data, ul);
    url[ul] = '\0';
    redis_url_t u, v;
    char err[256];
    if (redis_url_parse(url, &u, err, sizeof err) == CAIRN_OK) {
        if (!u.host[0] || u.port < 1 || u.port > 65535 || u.db < 0 || strchr(url, '@'))
            abort();
        if (redis_url_parse(u.text, &v, err, sizeof err) != CAIRN_OK || strcmp(u.host, v.host) ||
            u.port != v.port || u.db != v.db || u.tls != v.tls)
            abort();
    }
    free(url);
    if (nul) {
        const char *a = (const char *)nul + 1;
        size_t al = size - ul - 1;
        char *user = NULL, *pass = NULL;
        if (tier_shared_parse_auth(a, al, &user, &pass, err, sizeof err) == CAIRN_OK) {
            if (!pass || !pass[0] || (user && !user[0]))
                abort();
            for (const char *p = pass; *p; p++)
                if ((unsigned char)*p < 0x20 || *p == ' ')
                    abort();
            cairn_free(user);
            cairn_free(pass);
        }
    }
    return 0;
}
