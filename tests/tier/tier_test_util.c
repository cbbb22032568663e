/* Shared helpers for the cache tier tests (see tier_test_util.h). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/evp.h>

#include "tier/tier_test_util.h"

const uint64_t t_layer_bytes[T_LAYERS] = {T_LAYER_BYTES, T_LAYER_BYTES, T_LAYER_BYTES, T_LAYER_BYTES};

char *t_mkroot(void)
{
    char tmpl[] = "/tmp/cairn-cold-test-XXXXXX";
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}

void t_rmrf(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", path, de->d_name);
            struct stat st;
            if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
                t_rmrf(p);
            else
                unlink(p);
        }
        closedir(d);
    }
    rmdir(path);
}

cairn_tier_hash_t t_fingerprint(int variant)
{
    cairn_tier_model_desc_t d = {
        .architecture = "llama", .n_layers = T_LAYERS, .n_heads = 4, .n_kv_heads = 2, .head_dim = 64,
        .block_tokens = T_TOKENS, .kv_dtype = CAIRN_DTYPE_BF16, .rope_theta = 10000.0 + variant,
    };
    cairn_tier_hash_t fp;
    if (cairn_tier_fingerprint(&d, &fp))
        abort();
    return fp;
}

cairn_cold_config_t t_config(const char *root, int variant, uint64_t quota)
{
    cairn_cold_config_t c = {
        .root = root, .fingerprint = t_fingerprint(variant), .dtype = CAIRN_DTYPE_BF16,
        .block_tokens = T_TOKENS, .n_layers = T_LAYERS, .layer_bytes = t_layer_bytes,
        .has_quota = quota != 0, .quota_bytes = quota,
    };
    return c;
}

void t_block(uint32_t seed, size_t i, cairn_tier_hash_t *hash, cairn_tier_hash_t *parent, int32_t *tokens,
             uint8_t *payload)
{
    cairn_tier_hash_t prev;
    memset(&prev, 0, sizeof prev);
    int32_t tk[T_TOKENS];
    for (size_t b = 0; b <= i; b++) {
        for (int t = 0; t < T_TOKENS; t++)
            tk[t] = (int32_t)(seed * 7919u + b * 31u + (uint32_t)t);
        cairn_tier_hash_t h;
        EVP_MD_CTX *c = EVP_MD_CTX_new();
        unsigned int n;
        EVP_DigestInit_ex(c, EVP_sha256(), NULL);
        EVP_DigestUpdate(c, prev.bytes, 32);
        EVP_DigestUpdate(c, tk, sizeof tk);
        EVP_DigestFinal_ex(c, h.bytes, &n);
        EVP_MD_CTX_free(c);
        if (b == i) {
            *hash = h;
            if (parent)
                *parent = prev;
        }
        prev = h;
    }
    if (tokens)
        memcpy(tokens, tk, sizeof tk);
    if (payload) {
        uint32_t x = seed * 2654435761u ^ (uint32_t)i * 40503u ^ 0x9e3779b9u;
        for (size_t k = 0; k < T_PAYLOAD; k++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            payload[k] = (uint8_t)x;
        }
    }
}

void t_object(uint32_t seed, size_t i, cairn_tier_object_t *obj, int32_t *tokens, uint8_t *payload)
{
    memset(obj, 0, sizeof *obj);
    obj->key.kind = CAIRN_TIER_BLOCK;
    t_block(seed, i, &obj->key.hash, &obj->parent, tokens, payload);
    obj->tokens = tokens;
    obj->n_tokens = T_TOKENS;
    obj->payload = payload;
    obj->payload_size = T_PAYLOAD;
}

size_t t_state_bytes(size_t i) { return (i % 4 + 1) * (T_PAYLOAD / 4); }

void t_state(uint32_t seed, size_t i, uint32_t group, cairn_tier_object_t *obj, uint8_t *layout, uint8_t *payload)
{
    memset(obj, 0, sizeof *obj);
    obj->key.kind = CAIRN_TIER_STATE;
    obj->key.group = group;
    t_block(seed, i, &obj->key.hash, NULL, NULL, NULL);
    obj->boundary = (uint64_t)(i + 1) * T_TOKENS;
    memset(layout, 0, T_STATE_LAYOUT);
    snprintf((char *)layout, T_STATE_LAYOUT, "t.state;rows=%zu", i % 4 + 1);
    obj->layout = layout;
    obj->layout_size = T_STATE_LAYOUT;
    uint32_t x = seed * 2246822519u ^ (uint32_t)i * 3266489917u ^ group * 668265263u ^ 0x85ebca6bu;
    for (size_t k = 0; k < t_state_bytes(i); k++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        payload[k] = (uint8_t)x;
    }
    obj->payload = payload;
    obj->payload_size = t_state_bytes(i);
}

void t_chain(uint32_t seed, size_t n, cairn_tier_key_t *keys, int32_t *tokens)
{
    for (size_t i = 0; i < n; i++) {
        memset(&keys[i], 0, sizeof keys[i]);
        keys[i].kind = CAIRN_TIER_BLOCK;
        t_block(seed, i, &keys[i].hash, NULL, tokens ? tokens + i * T_TOKENS : NULL, NULL);
    }
}

size_t t_count_files(const char *dir, const char *prefix)
{
    size_t n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            n += t_count_files(p, prefix);
        else if (!strncmp(de->d_name, prefix, strlen(prefix)))
            n++;
    }
    closedir(d);
    return n;
}
