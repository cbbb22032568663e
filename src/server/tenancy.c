/*
 * tenancy.c — API keys and the cache domains they imply.
 *
 * Model. The key file lists one bearer key per line. Only SHA-256 digests of the keys are
 * kept in memory, and a presented key is hashed and compared against every digest in
 * constant time. A tenant's cache domain is hex(SHA-256(key)); a client-supplied
 * cache_salt is appended as "/" hex(SHA-256(salt)), so the engine's salt always starts
 * with the tenant's own prefix: a client's salt can split its tenant's domain, never name
 * another tenant's. Hashing the client part keeps the salt at 129 bytes, inside the KV
 * core's CAIRN_KV_MAX_SALT whatever the client sent. In open mode (no key file) the
 * client's salt is the domain itself and no salt is the shared default domain.
 *
 * Thread-safety: immutable after tenancy_create; tenancy_resolve is reentrant.
 */
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>

#include "server/server_impl.h"

struct tenancy {
    size_t n_keys;
    unsigned char (*digests)[SHA256_DIGEST_LENGTH];
};

static void hex(const unsigned char *d, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[2 * n] = '\0';
}

int tenancy_create(const char *keys_path, tenancy_t **out, char *err, size_t err_len)
{
    *out = NULL;
    tenancy_t *t = cairn_calloc(1, sizeof *t);
    if (!t)
        return CAIRN_ENOMEM;
    if (!keys_path) {
        *out = t;
        return 0;
    }
    int rc = 0;
    char *line = NULL;
    size_t cap = 0;
    FILE *f = fopen(keys_path, "r");
    if (!f) {
        snprintf(err, err_len, "cannot open API key file %s: %s", keys_path, strerror(errno));
        rc = errno == ENOENT ? CAIRN_ENOENT : CAIRN_EIO;
        goto fail;
    }
    ssize_t len;
    size_t slots = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        char *s = line, *e = line + len;
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        while (e > s && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (s == e || *s == '#')
            continue;
        if (t->n_keys == slots) {
            size_t ns = slots ? slots * 2 : 8;
            void *p = cairn_realloc(t->digests, ns * sizeof *t->digests);
            if (!p) {
                rc = CAIRN_ENOMEM;
                goto fail;
            }
            t->digests = p;
            slots = ns;
        }
        SHA256((const unsigned char *)s, (size_t)(e - s), t->digests[t->n_keys++]);
    }
    if (ferror(f)) {
        snprintf(err, err_len, "cannot read API key file %s", keys_path);
        rc = CAIRN_EIO;
        goto fail;
    }
    if (t->n_keys == 0) {
        snprintf(err, err_len, "API key file %s lists no keys", keys_path);
        rc = CAIRN_EFORMAT;
        goto fail;
    }
    fclose(f);
    free(line); /* getline allocates with malloc */
    *out = t;
    return 0;
fail:
    if (f)
        fclose(f);
    free(line);
    tenancy_destroy(t);
    return rc;
}

void tenancy_destroy(tenancy_t *t)
{
    if (!t)
        return;
    if (t->digests)
        OPENSSL_cleanse(t->digests, t->n_keys * sizeof *t->digests);
    cairn_free(t->digests);
    cairn_free(t);
}

bool tenancy_enabled(const tenancy_t *t) { return t && t->n_keys > 0; }

int tenancy_resolve(const tenancy_t *t, const char *key, size_t kl, const char *client_salt,
                    char **salt, char domain_tag[17])
{
    *salt = NULL;
    char buf[64 + 1 + 64 + 1];
    const char *chosen = client_salt;
    if (tenancy_enabled(t)) {
        if (!key)
            return CAIRN_ENOENT;
        unsigned char d[SHA256_DIGEST_LENGTH];
        SHA256((const unsigned char *)key, kl, d);
        int found = 0;
        for (size_t i = 0; i < t->n_keys; i++)
            found |= CRYPTO_memcmp(d, t->digests[i], sizeof d) == 0;
        if (!kl || !found)
            return CAIRN_ENOENT;
        hex(d, sizeof d, buf);
        if (client_salt) {
            unsigned char sd[SHA256_DIGEST_LENGTH];
            SHA256((const unsigned char *)client_salt, strlen(client_salt), sd);
            buf[64] = '/';
            hex(sd, sizeof sd, buf + 65);
        }
        chosen = buf;
    }
    if (!chosen) {
        snprintf(domain_tag, 17, "default");
        return 0;
    }
    unsigned char td[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)chosen, strlen(chosen), td);
    char th[65];
    hex(td, sizeof td, th);
    memcpy(domain_tag, th, 16);
    domain_tag[16] = '\0';
    *salt = cairn_strdup(chosen);
    return *salt ? 0 : CAIRN_ENOMEM;
}
