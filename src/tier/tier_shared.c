/*
 * tier_shared.c — the shared tier's credentials: read from a file or the environment,
 * never from the command line (a process's arguments are visible to every user of the
 * machine in `ps` and /proc).
 *
 * Format (file, or CAIRN_SHARED_TIER_AUTH): one line, "PASSWORD" or "USERNAME PASSWORD"
 * (Redis 6 ACL), surrounding blanks and the line end ignored; anything after the first
 * line is ignored. Messages never contain the secret. Fuzzed with the URL parser by
 * fuzz/fuzz_shared_tier_url.c (tier_shared_parse_auth).
 * Thread-safety: reentrant (getenv aside).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn/shared_tier.h"
#include "util/util.h"

#define AUTH_MAX 4096

int tier_shared_parse_auth(const char *text, size_t len, char **username, char **password, char *err,
                           size_t err_len);

static bool blank(char c) { return c == ' ' || c == '\t'; }

/* Parses one credentials line (see the file comment). Exposed for the fuzzer. */
int tier_shared_parse_auth(const char *text, size_t len, char **username, char **password, char *err,
                           size_t err_len)
{
    *username = *password = NULL;
    size_t end = 0;
    while (end < len && text[end] != '\n' && text[end] != '\r')
        end++;
    const char *w[3];
    size_t wl[3], n = 0;
    for (size_t i = 0; i < end;) {
        while (i < end && blank(text[i]))
            i++;
        if (i == end)
            break;
        size_t j = i;
        while (j < end && !blank(text[j]))
            j++;
        if (n == 2) {
            cairn_errf(err, err_len, "shared tier auth: expected 'PASSWORD' or 'USERNAME PASSWORD' on the first line");
            return CAIRN_EINVAL;
        }
        for (size_t k = i; k < j; k++)
            if ((unsigned char)text[k] < 0x20 || text[k] == 0x7f) {
                cairn_errf(err, err_len, "shared tier auth: control characters in the credentials");
                return CAIRN_EINVAL;
            }
        w[n] = text + i;
        wl[n++] = j - i;
        i = j;
    }
    if (!n) {
        cairn_errf(err, err_len, "shared tier auth: empty (expected 'PASSWORD' or 'USERNAME PASSWORD')");
        return CAIRN_EINVAL;
    }
    char *u = n == 2 ? cairn_strndup(w[0], wl[0]) : NULL;
    char *p = cairn_strndup(w[n - 1], wl[n - 1]);
    if (!p || (n == 2 && !u)) {
        cairn_free(u);
        cairn_free(p);
        cairn_errf(err, err_len, "shared tier auth: out of memory");
        return CAIRN_ENOMEM;
    }
    *username = u;
    *password = p;
    return CAIRN_OK;
}

int cairn_shared_tier_read_auth(const char *file, char **username, char **password, char *err, size_t err_len)
{
    *username = *password = NULL;
    if (!file) {
        const char *env = getenv("CAIRN_SHARED_TIER_AUTH");
        if (!env || !env[0])
            return CAIRN_OK;
        return tier_shared_parse_auth(env, strlen(env), username, password, err, err_len);
    }
    FILE *f = fopen(file, "re");
    if (!f) {
        if (err && err_len)
            cairn_errf(err, err_len, "shared tier auth file %s: %s", file, strerror(errno));
        return CAIRN_EIO;
    }
    char *buf = cairn_malloc(AUTH_MAX);
    if (!buf) {
        fclose(f);
        cairn_errf(err, err_len, "shared tier auth: out of memory");
        return CAIRN_ENOMEM;
    }
    size_t n = fread(buf, 1, AUTH_MAX, f);
    bool failed = ferror(f);
    fclose(f);
    int rc;
    if (failed) {
        if (err && err_len)
            cairn_errf(err, err_len, "shared tier auth file %s: read error", file);
        rc = CAIRN_EIO;
    } else {
        rc = tier_shared_parse_auth(buf, n, username, password, err, err_len);
        if (rc == CAIRN_EINVAL && err && err_len)
            snprintf(err + strlen(err), err_len - strlen(err), " (file %s)", file);
    }
    memset(buf, 0, AUTH_MAX);
    cairn_free(buf);
    return rc;
}
