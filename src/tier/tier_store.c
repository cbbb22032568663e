/*
 * tier_store.c — the store interface's dispatchers (include/cairn/tier_store.h), the hash
 * text form and the stats JSON every store's counters are rendered with.
 *
 * Model: a store is a struct whose first member points at its ops table; the dispatchers
 * check what every store would otherwise check again (NULL store, NULL arguments, missing
 * optional ops) and then call the op. A NULL store behaves as a store that holds nothing,
 * so a caller with the tier off needs no special case.
 * Thread-safety: the dispatchers hold no state; each op is as thread-safe as its store.
 */
#include <string.h>
#include <cjson/cJSON.h>

#include "cairn/tier_store.h"
#include "util/util.h"

bool cairn_tier_store_contains(cairn_tier_store_t *s, const cairn_tier_key_t *key)
{
    return s && key && s->ops->contains(s, key);
}

size_t cairn_tier_store_chain_length(cairn_tier_store_t *s, const cairn_tier_key_t *keys, size_t n)
{
    return s && keys && n ? s->ops->chain_length(s, keys, n) : 0;
}

int cairn_tier_store_put(cairn_tier_store_t *s, const cairn_tier_object_t *obj, uint32_t wait_ms, bool *queued)
{
    if (queued)
        *queued = false;
    if (!s || !obj || (!obj->payload && obj->payload_size) || (!obj->tokens && obj->n_tokens) ||
        (!obj->layout && obj->layout_size))
        return CAIRN_EINVAL;
    return s->ops->put(s, obj, wait_ms, queued);
}

int cairn_tier_store_get(cairn_tier_store_t *s, const cairn_tier_object_t *want, cairn_tier_dest_fn dest,
                         void *user)
{
    if (!s)
        return CAIRN_ENOENT;
    if (!want || !dest || (!want->tokens && want->n_tokens) || (!want->layout && want->layout_size))
        return CAIRN_EINVAL;
    return s->ops->get(s, want, dest, user);
}

void cairn_tier_store_prefetch(cairn_tier_store_t *s, const cairn_tier_key_t *keys, size_t n)
{
    if (s && keys && n && s->ops->prefetch)
        s->ops->prefetch(s, keys, n);
}

void cairn_tier_store_flush(cairn_tier_store_t *s)
{
    if (s)
        s->ops->flush(s);
}

void cairn_tier_store_stats(cairn_tier_store_t *s, cairn_tier_stats_t *out)
{
    memset(out, 0, sizeof *out);
    if (s)
        s->ops->stats(s, out);
}

void cairn_tier_store_destroy(cairn_tier_store_t *s)
{
    if (s)
        s->ops->destroy(s);
}

const char *cairn_tier_store_name(const cairn_tier_store_t *s) { return s ? s->ops->name : "none"; }

int cairn_tier_store_foreach(cairn_tier_store_t *s, int (*fn)(void *user, const cairn_tier_entry_t *e),
                             void *user)
{
    if (!s || !fn)
        return CAIRN_EINVAL;
    return s->ops->foreach ? s->ops->foreach(s, fn, user) : CAIRN_EUNSUPPORTED;
}

int cairn_tier_store_verify(cairn_tier_store_t *s, size_t *checked, size_t *bad)
{
    size_t c = 0, b = 0;
    int rc = !s ? CAIRN_EINVAL : s->ops->verify ? s->ops->verify(s, &c, &b) : CAIRN_EUNSUPPORTED;
    if (checked)
        *checked = c;
    if (bad)
        *bad = b;
    return rc;
}

int cairn_tier_store_prune(cairn_tier_store_t *s, uint64_t quota_bytes, size_t *evicted)
{
    size_t n = 0;
    int rc = !s ? CAIRN_EINVAL : s->ops->prune ? s->ops->prune(s, quota_bytes, &n) : CAIRN_EUNSUPPORTED;
    if (evicted)
        *evicted = n;
    return rc;
}

int cairn_tier_store_clear(cairn_tier_store_t *s, size_t *removed)
{
    size_t n = 0;
    int rc = !s ? CAIRN_EINVAL : s->ops->clear ? s->ops->clear(s, &n) : CAIRN_EUNSUPPORTED;
    if (removed)
        *removed = n;
    return rc;
}

/* ---- hashes ---- */

void cairn_tier_hash_hex(const cairn_tier_hash_t *h, char out[65])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[h->bytes[i] >> 4];
        out[2 * i + 1] = hex[h->bytes[i] & 15];
    }
    out[64] = '\0';
}

int cairn_tier_hash_parse(const char *s, cairn_tier_hash_t *out)
{
    if (!s || !out)
        return CAIRN_EINVAL;
    for (int i = 0; i < 32; i++) {
        int hi = cairn_hexval(s[2 * i]), lo = hi < 0 ? -1 : cairn_hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return CAIRN_EINVAL;
        out->bytes[i] = (uint8_t)(hi << 4 | lo);
    }
    return s[64] == '\0' ? CAIRN_OK : CAIRN_EINVAL;
}

/* ---- telemetry ---- */

char *cairn_tier_stats_json(const cairn_tier_stats_t *cur, const cairn_tier_stats_t *d)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
#define CTR(f) cJSON_AddNumberToObject(o, #f, (double)(cur->f - (d ? d->f : 0)))
    CTR(hits);
    CTR(misses);
    CTR(enqueued);
    CTR(queue_drops);
    CTR(bytes_written);
    CTR(reads);
    CTR(bytes_restored);
    CTR(evictions);
    CTR(corruptions);
    CTR(write_errors);
    CTR(restore_declines);
#undef CTR
    cJSON_AddBoolToObject(o, "enabled", cur->enabled);
    if (cur->root)
        cJSON_AddStringToObject(o, "root", cur->root);
    else
        cJSON_AddNullToObject(o, "root");
    cJSON_AddNumberToObject(o, "quota_bytes", (double)cur->quota_bytes);
    if (!d) {
        cJSON_AddNumberToObject(o, "used_bytes", (double)cur->used_bytes);
        cJSON_AddNumberToObject(o, "objects", (double)cur->objects);
        cJSON_AddNumberToObject(o, "queue_len", cur->queue_len);
        cJSON_AddNumberToObject(o, "state_objects", (double)cur->state_objects);
        cJSON_AddNumberToObject(o, "state_bytes", (double)cur->state_bytes);
    }
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!txt)
        return NULL;
    char *r = cairn_strdup(txt);
    cJSON_free(txt);
    return r;
}
