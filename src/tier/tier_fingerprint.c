/*
 * tier_fingerprint.c — the model fingerprint that names a store (a cold tier directory, a
 * key prefix), and the weights digest it includes.
 *
 * Model: both are SHA-256 over a canonical, explicitly little-endian serialization
 * (docs/FORMAT.md 1.4 and 1.5) of plain inputs the engine fills from its config, so the
 * same model always maps to the same store on any host and any field that changes the
 * meaning of K/V bytes gives another one. The object format version is part of the
 * serialization, so a format change never reads old objects. Fields added later (the
 * numerics id) serialize nothing at their "as before" value, so every fingerprint computed
 * before them is unchanged.
 * Thread-safety: pure functions.
 */
#include <string.h>
#include <openssl/evp.h>

#include "tier/tier_object.h"

static int sha_update(EVP_MD_CTX *c, const void *p, size_t n) { return EVP_DigestUpdate(c, p, n) == 1 ? 0 : -1; }

static int sha_u32(EVP_MD_CTX *c, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return sha_update(c, b, 4);
}

static int sha_u64(EVP_MD_CTX *c, uint64_t v)
{
    return sha_u32(c, (uint32_t)v) | sha_u32(c, (uint32_t)(v >> 32));
}

static int sha_f64(EVP_MD_CTX *c, double d)
{
    if (d == 0.0)
        d = 0.0; /* -0.0 and 0.0 serialize alike */
    uint64_t bits;
    memcpy(&bits, &d, 8);
    return sha_u64(c, bits);
}

static int sha_str(EVP_MD_CTX *c, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    return sha_u32(c, (uint32_t)n) | (n ? sha_update(c, s, n) : 0);
}

static int sha_final(EVP_MD_CTX *c, uint8_t out[32])
{
    unsigned int n = 0;
    return EVP_DigestFinal_ex(c, out, &n) == 1 && n == 32 ? 0 : -1;
}

int cairn_tier_weights_digest(const cairn_tier_weights_file_t *files, size_t n, uint8_t out[32])
{
    if ((!files && n) || !out)
        return CAIRN_EINVAL;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c)
        return CAIRN_ENOMEM;
    int bad = EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1;
    bad |= sha_update(c, "cairn.weights.v1", 16);
    bad |= sha_u64(c, n);
    for (size_t i = 0; i < n && !bad; i++) {
        if (!files[i].name || (!files[i].header && files[i].header_len)) {
            EVP_MD_CTX_free(c);
            return CAIRN_EINVAL;
        }
        bad |= sha_str(c, files[i].name);
        bad |= sha_u64(c, files[i].header_len);
        if (files[i].header_len)
            bad |= sha_update(c, files[i].header, files[i].header_len);
        bad |= sha_u64(c, files[i].file_size);
    }
    bad |= sha_final(c, out);
    EVP_MD_CTX_free(c);
    return bad ? CAIRN_ENOMEM : CAIRN_OK;
}

int cairn_tier_fingerprint(const cairn_tier_model_desc_t *d, cairn_tier_hash_t *out)
{
    if (!d || !out || !d->architecture || !cairn_dtype_block_elems(d->kv_dtype))
        return CAIRN_EINVAL;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c)
        return CAIRN_ENOMEM;
    int bad = EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1;
    bad |= sha_update(c, "cairn.cold.fingerprint.v1", 25);
    bad |= sha_u32(c, TIER_OBJECT_VERSION);
    bad |= sha_str(c, d->architecture);
    bad |= sha_u32(c, d->n_layers);
    bad |= sha_u32(c, d->n_heads);
    bad |= sha_u32(c, d->n_kv_heads);
    bad |= sha_u32(c, d->head_dim);
    bad |= sha_u32(c, d->block_tokens);
    bad |= sha_u32(c, (uint32_t)d->kv_dtype);
    bad |= sha_u32(c, d->rope_dim ? d->rope_dim : d->head_dim);
    bad |= sha_f64(c, d->rope_theta);
    bad |= sha_u32(c, d->rope_scaling);
    bad |= sha_f64(c, d->rope_scaling_factor);
    bad |= sha_u32(c, d->rope_original_ctx);
    bad |= sha_str(c, d->extra);
    bad |= sha_update(c, d->weights_digest, 32);
    /* Appended only when set: the CPU numerics keep the fingerprint they always had. The
     * length prefix keeps the serialization unambiguous. */
    if (d->numerics && d->numerics[0])
        bad |= sha_str(c, d->numerics);
    bad |= sha_final(c, out->bytes);
    EVP_MD_CTX_free(c);
    return bad ? CAIRN_ENOMEM : CAIRN_OK;
}
