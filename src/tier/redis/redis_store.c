/*
 * redis_store.c — the Redis store: the cache tier's shared store (include/cairn/shared_tier.h)
 * behind the store interface (include/cairn/tier_store.h).
 *
 * Model. One store serves one model fingerprint. An object is one Redis string value under
 *     cairn:<fingerprint hex>:<domain hex>:<hash hex>:<group>          (BLOCK)
 *     cairn:<fingerprint hex>:<domain hex>:<hash hex>:<group>:state    (STATE)
 * (docs/FORMAT.md 1.9): the kind is the suffix, so a BLOCK and the STATE at its boundary
 * (same chain hash) are different keys, and every key of a tenant starts with its domain.
 * The value is the object's byte form, the same bytes as on disk: a BLOCK is FORMAT.md 1.2
 * (a `.kv` file), a STATE is 1.8; both carry the fingerprint, the hash and XXH3-128
 * checksums of header and payload.
 *
 * Reads run on the caller's thread over the read connection (rd_mu held for the whole
 * operation): chain_length pipelines EXISTS (metadata only, no payload moves), prefetch
 * sends GETs ahead without reading their replies, and get reads the reply of its key
 * (dropping prefetched replies of keys before it), validating the value while hiredis
 * holds it and copying the payload straight into the caller's destination. A value that
 * fails validation (truncated, another model's or another block's bytes, a flipped bit) is
 * a counted corruption, logged once, deleted, and never handed out.
 * Writes are asynchronous (redis_writer.c). contains() never touches the network: it asks
 * the key cache (keys this process queued, wrote or saw on the server, confirmed within
 * confirm_ms); a key it has forgotten is written again with SET NX, which never rewrites
 * an existing value.
 *
 * Faults: any failed operation (timeout, reset, error reply) drops its connection and marks
 * the store unreachable (one outage, logged once); until the I/O thread reconnects, reads
 * answer "absent" and puts are refused at once (counted as unavailable), so a request is
 * served by the other tiers or by computing. A reconnect forgets the key cache (the server
 * may have restarted empty).
 * Thread-safety and locks: redis_impl.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "tier/redis/redis_impl.h"
#include "util/util.h"

#define EXISTS_BATCH 64
#define SCAN_COUNT "512"
#define MAINT_BATCH 128

static redis_store_t *rs_of(cairn_tier_store_t *t) { return (redis_store_t *)t; }

/* ---- keys ---- */

size_t redis__key_text(const redis_store_t *s, const cairn_tier_key_t *k, char *out)
{
    char dom[65], h[65];
    cairn_tier_hash_hex(&k->domain, dom);
    cairn_tier_hash_hex(&k->hash, h);
    int n = snprintf(out, REDIS_KEY_MAX, "cairn:%s:%s:%s:%u%s", s->fp_hex, dom, h, k->group,
                     k->kind == CAIRN_TIER_STATE ? ":state" : "");
    return n > 0 && n < REDIS_KEY_MAX ? (size_t)n : 0;
}

/* Parses a key text of this store's fingerprint back into a key. */
static bool key_parse(const redis_store_t *s, const char *txt, size_t len, cairn_tier_key_t *k)
{
    /* cairn: fp(64) : dom(64) : hash(64) : group [:state] */
    const size_t fixed = 6 + 64 + 1 + 64 + 1 + 64 + 1;
    if (len <= fixed || len >= REDIS_KEY_MAX || memcmp(txt, "cairn:", 6) || memcmp(txt + 6, s->fp_hex, 64) ||
        txt[70] != ':' || txt[135] != ':' || txt[200] != ':')
        return false;
    char buf[REDIS_KEY_MAX];
    memcpy(buf, txt, len);
    buf[len] = '\0';
    buf[135] = buf[200] = '\0';
    memset(k, 0, sizeof *k);
    if (cairn_tier_hash_parse(buf + 71, &k->domain) || cairn_tier_hash_parse(buf + 136, &k->hash))
        return false;
    char *end = NULL;
    unsigned long g = strtoul(buf + 201, &end, 10);
    if (end == buf + 201 || g > UINT32_MAX)
        return false;
    k->group = (uint32_t)g;
    if (!*end)
        k->kind = CAIRN_TIER_BLOCK;
    else if (!strcmp(end, ":state"))
        k->kind = CAIRN_TIER_STATE;
    else
        return false;
    return true;
}

/* Whether the store holds objects of key's kind and group at all. */
static bool held_kind(const redis_store_t *s, const cairn_tier_key_t *k)
{
    if (k->kind != CAIRN_TIER_BLOCK && k->kind != CAIRN_TIER_STATE)
        return false;
    return k->kind == CAIRN_TIER_STATE || !s->n_groups || k->group < s->n_groups;
}

/* ---- key cache ---- */

static void key_digest(const cairn_tier_key_t *k, uint64_t *lo, uint64_t *hi)
{
    uint8_t b[8 + 64];
    uint32_t kind = (uint32_t)k->kind;
    memcpy(b, &kind, 4);
    memcpy(b + 4, &k->group, 4);
    memcpy(b + 8, k->hash.bytes, 32);
    memcpy(b + 40, k->domain.bytes, 32);
    XXH128_hash_t h = XXH3_128bits(b, sizeof b);
    *lo = h.low64 | 1u; /* never (0, 0): that is an empty slot */
    *hi = h.high64;
}

static redis_known_t *known_set_of(redis_store_t *s, uint64_t lo)
{
    return s->known + (size_t)((lo >> 1) & (REDIS_KNOWN_SETS - 1)) * REDIS_KNOWN_WAYS;
}

int redis__known_get_locked(redis_store_t *s, const cairn_tier_key_t *k)
{
    uint64_t lo, hi;
    key_digest(k, &lo, &hi);
    redis_known_t *set = known_set_of(s, lo);
    for (int w = 0; w < REDIS_KNOWN_WAYS; w++) {
        redis_known_t *e = &set[w];
        if (e->lo != lo || e->hi != hi)
            continue;
        if (e->state == KNOWN_PRESENT && redis__now_ms() - e->stamp_ms >= s->confirm_ms)
            return KNOWN_NONE; /* not confirmed recently: it may have expired or been evicted */
        return e->state;
    }
    return KNOWN_NONE;
}

void redis__known_set_locked(redis_store_t *s, const cairn_tier_key_t *k, int state)
{
    uint64_t lo, hi;
    key_digest(k, &lo, &hi);
    redis_known_t *set = known_set_of(s, lo), *slot = NULL;
    for (int w = 0; w < REDIS_KNOWN_WAYS && !slot; w++)
        if (set[w].lo == lo && set[w].hi == hi)
            slot = &set[w];
    if (state == KNOWN_NONE) {
        if (slot)
            memset(slot, 0, sizeof *slot);
        return;
    }
    if (!slot) { /* an empty way, else the one confirmed longest ago */
        slot = &set[0];
        for (int w = 0; w < REDIS_KNOWN_WAYS; w++) {
            if (!set[w].lo) {
                slot = &set[w];
                break;
            }
            if (set[w].stamp_ms < slot->stamp_ms)
                slot = &set[w];
        }
    }
    slot->lo = lo;
    slot->hi = hi;
    slot->state = (uint8_t)state;
    slot->stamp_ms = redis__now_ms();
}

void redis__known_clear_locked(redis_store_t *s)
{
    /* Pending writes stay known: they are still queued and will be sent. */
    for (size_t i = 0; i < (size_t)REDIS_KNOWN_SETS * REDIS_KNOWN_WAYS; i++)
        if (s->known[i].state != KNOWN_PENDING)
            memset(&s->known[i], 0, sizeof s->known[i]);
}

/* ---- faults ---- */

void redis__fault_locked(redis_store_t *s, redis_fault_t f, const char *what)
{
    if (f == REDIS_FAULT_TIMEOUT)
        s->c.timeouts++;
    else
        s->c.io_errors++;
    s->c.faults++;
    if (s->up) {
        s->up = false;
        s->c.outages++;
        s->down_since_ms = redis__now_ms();
        cairn_log(CAIRN_LOG_WARN,
                  "shared tier: %s unreachable (%s during %s); serving without it, reconnecting in the background",
                  s->url.text, redis_fault_name(f), what);
    }
    pthread_cond_broadcast(&s->cv_work);
    pthread_cond_broadcast(&s->cv_room);
    pthread_cond_broadcast(&s->cv_idle);
}

void redis__drop_reader(redis_store_t *s, redis_fault_t f, const char *what)
{
    redis_conn_close(s->rd);
    s->rd = NULL;
    s->ahead_n = 0;
    pthread_mutex_lock(&s->mu);
    redis__fault_locked(s, f, what);
    pthread_mutex_unlock(&s->mu);
}

bool redis__first_error_locked(redis_store_t *s, const char *text)
{
    char code[16];
    size_t n = strcspn(text, " ");
    n = n < sizeof code - 1 ? n : sizeof code - 1;
    memcpy(code, text, n);
    code[n] = '\0';
    size_t i = 0;
    for (; i < CAIRN_ARRAY_LEN(s->logged_errors) && s->logged_errors[i][0]; i++)
        if (!strcmp(s->logged_errors[i], code))
            return false;
    if (i < CAIRN_ARRAY_LEN(s->logged_errors))
        memcpy(s->logged_errors[i], code, n + 1);
    return true; /* a full table logs every further new code: still bounded by its kinds */
}

/* An error reply: counted; logged the first time its code is seen since the last connect. */
static void server_error(redis_store_t *s, const char *what, const char *text)
{
    pthread_mutex_lock(&s->mu);
    s->c.server_errors++;
    s->c.faults++;
    bool log = redis__first_error_locked(s, text);
    pthread_mutex_unlock(&s->mu);
    if (log)
        cairn_log(CAIRN_LOG_WARN, "shared tier: %s refused by %s: %s (further %.*s refusals are counted, not logged)",
                  what, s->url.text, text, (int)strcspn(text, " "), text);
}

static void unavailable(redis_store_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->c.unavailable++;
    pthread_mutex_unlock(&s->mu);
}

/* Reads and drops the replies of every GET sent ahead. Caller holds rd_mu; false when the
 * connection failed (and was dropped). */
static bool discard_ahead(redis_store_t *s, size_t n)
{
    while (n-- && s->rd) {
        s->rd->sink = (redis_sink_t){NULL, NULL, true};
        redis_fault_t f;
        rreply_t *r = redis_conn_reply(s->rd, &f);
        if (s->rd)
            s->rd->sink = (redis_sink_t){0};
        if (!r) {
            redis__drop_reader(s, f, "GET");
            return false;
        }
        rreply_free(r);
        memmove(s->ahead, s->ahead + 1, (s->ahead_n - 1) * sizeof *s->ahead);
        s->ahead_n--;
    }
    return s->rd != NULL;
}

static bool same_key(const cairn_tier_key_t *a, const cairn_tier_key_t *b)
{
    return a->kind == b->kind && a->group == b->group && !memcmp(a->hash.bytes, b->hash.bytes, 32) &&
           !memcmp(a->domain.bytes, b->domain.bytes, 32);
}

/* ---- reads ---- */

static bool rs_contains(cairn_tier_store_t *t, const cairn_tier_key_t *key)
{
    redis_store_t *s = rs_of(t);
    if (!held_kind(s, key))
        return false;
    pthread_mutex_lock(&s->mu);
    bool r = redis__known_get_locked(s, key) != KNOWN_NONE;
    pthread_mutex_unlock(&s->mu);
    return r;
}

static size_t rs_chain_length(cairn_tier_store_t *t, const cairn_tier_key_t *keys, size_t n)
{
    redis_store_t *s = rs_of(t);
    size_t len = 0;
    pthread_mutex_lock(&s->rd_mu);
    if (!s->rd) {
        pthread_mutex_unlock(&s->rd_mu);
        unavailable(s);
        return 0;
    }
    /* A new walk: what an earlier one prefetched and did not read is dropped. */
    if (!discard_ahead(s, s->ahead_n))
        goto out;
    for (size_t i = 0; i < n;) {
        size_t m = 0;
        char key[REDIS_KEY_MAX];
        while (m < EXISTS_BATCH && i + m < n && held_kind(s, &keys[i + m])) {
            size_t kl = redis__key_text(s, &keys[i + m], key);
            const char *argv[2] = {"EXISTS", key};
            size_t lens[2] = {6, kl};
            if (redis_conn_append(s->rd, 2, argv, lens)) {
                redis__drop_reader(s, REDIS_FAULT_NOMEM, "EXISTS");
                goto out;
            }
            m++;
        }
        bool hole = m == 0;
        for (size_t j = 0; j < m; j++) {
            redis_fault_t f;
            rreply_t *r = redis_conn_reply(s->rd, &f);
            if (!r) {
                redis__drop_reader(s, f, "EXISTS");
                goto out;
            }
            bool present = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
            if (r->type == REDIS_REPLY_ERROR)
                server_error(s, "EXISTS", r->text);
            rreply_free(r);
            if (!hole && present) {
                len++;
                pthread_mutex_lock(&s->mu);
                redis__known_set_locked(s, &keys[i + j], KNOWN_PRESENT);
                pthread_mutex_unlock(&s->mu);
            } else {
                hole = true;
            }
        }
        if (hole)
            break;
        i += m;
    }
out:
    pthread_mutex_unlock(&s->rd_mu);
    return len;
}

static void rs_prefetch(cairn_tier_store_t *t, const cairn_tier_key_t *keys, size_t n)
{
    redis_store_t *s = rs_of(t);
    if (!s->n_groups)
        return;
    pthread_mutex_lock(&s->rd_mu);
    size_t sent = 0;
    for (size_t i = 0; s->rd && i < n && s->ahead_n < REDIS_AHEAD_MAX; i++) {
        if (!held_kind(s, &keys[i]))
            break;
        bool dup = false;
        for (size_t j = 0; j < s->ahead_n && !dup; j++)
            dup = same_key(&s->ahead[j], &keys[i]);
        if (dup)
            continue;
        char key[REDIS_KEY_MAX];
        size_t kl = redis__key_text(s, &keys[i], key);
        const char *argv[2] = {"GET", key};
        size_t lens[2] = {3, kl};
        if (redis_conn_append(s->rd, 2, argv, lens))
            break; /* a hint: nothing owed */
        s->ahead[s->ahead_n++] = keys[i];
        sent++;
    }
    if (sent) {
        redis_fault_t f = redis_conn_send(s->rd);
        if (f)
            redis__drop_reader(s, f, "GET (prefetch)");
    }
    pthread_mutex_unlock(&s->rd_mu);
}

typedef struct {
    redis_store_t *s;
    const cairn_tier_object_t *want;
    cairn_tier_dest_fn dest;
    void *user;
    size_t payload;            /* bytes delivered */
    const char *why;           /* what made the value invalid */
} get_ctx_t;

static int bad(get_ctx_t *g, const char *why)
{
    g->why = why;
    return CAIRN_ECORRUPT;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Copies the payload to the destination and checks its checksum there. */
static int deliver(get_ctx_t *g, const uint8_t *payload, size_t n, const uint8_t *sum)
{
    void *dst = g->dest(g->user, n);
    if (!dst)
        return CAIRN_ECANCELED;
    memcpy(dst, payload, n);
    uint8_t got[TIER_OBJECT_SUM_BYTES];
    tier_object_checksum(dst, n, got);
    if (memcmp(got, sum, TIER_OBJECT_SUM_BYTES))
        return bad(g, "payload checksum");
    g->payload = n;
    return CAIRN_OK;
}

static int decode_block(get_ctx_t *g, const uint8_t *v, size_t len)
{
    const redis_store_t *s = g->s;
    const cairn_tier_object_t *w = g->want;
    const redis_group_t *grp = &s->groups[w->key.group];
    tier_object_header_t h;
    if (tier_object_parse_header(v, len, &h))
        return bad(g, len < 16 || memcmp(v, TIER_OBJECT_MAGIC, 8) ? "not a block object" : "header");
    if ((uint64_t)len - h.header_bytes != h.payload_bytes)
        return bad(g, "truncated or padded");
    if (memcmp(h.fingerprint.bytes, s->fp.bytes, 32))
        return bad(g, "another model's fingerprint");
    if (memcmp(h.hash.bytes, w->key.hash.bytes, 32))
        return bad(g, "another block's hash");
    if (h.dtype != (uint32_t)s->dtype || h.n_tokens != s->block_tokens || h.n_layers != grp->n_layers)
        return bad(g, "another layout");
    for (uint32_t l = 0; l < grp->n_layers; l++)
        if (tier_object_layer_bytes(&h, l) != grp->layer_bytes[l])
            return bad(g, "another layout");
    if (memcmp(h.parent.bytes, w->parent.bytes, 32) || h.n_tokens != w->n_tokens)
        return bad(g, "another parent or length");
    for (uint32_t i = 0; i < w->n_tokens; i++)
        if (le32(h.tokens_le + 4u * i) != (uint32_t)w->tokens[i])
            return bad(g, "other tokens");
    return deliver(g, v + h.header_bytes, (size_t)h.payload_bytes, h.payload_sum);
}

static int decode_state(get_ctx_t *g, const uint8_t *v, size_t len)
{
    const redis_store_t *s = g->s;
    const cairn_tier_object_t *w = g->want;
    tier_state_header_t h;
    if (tier_state_parse_header(v, len, &h))
        return bad(g, len < 16 || memcmp(v, TIER_STATE_MAGIC, 8) ? "not a state object" : "header");
    if ((uint64_t)len - h.header_bytes != h.payload_bytes)
        return bad(g, "truncated or padded");
    if (memcmp(h.fingerprint.bytes, s->fp.bytes, 32))
        return bad(g, "another model's fingerprint");
    if (memcmp(h.hash.bytes, w->key.hash.bytes, 32) || h.group != w->key.group)
        return bad(g, "another boundary's hash or group");
    if (h.boundary != w->boundary)
        return bad(g, "another boundary");
    if (h.layout_size != w->layout_size || (h.layout_size && memcmp(h.layout, w->layout, h.layout_size)))
        return bad(g, "another layout descriptor");
    return deliver(g, v + h.header_bytes, (size_t)h.payload_bytes, h.payload_sum);
}

static int decode_value(void *user, const char *str, size_t len)
{
    get_ctx_t *g = user;
    const uint8_t *v = (const uint8_t *)str;
    return g->want->key.kind == CAIRN_TIER_STATE ? decode_state(g, v, len) : decode_block(g, v, len);
}

/* Deletes an invalid value. Caller holds rd_mu; nothing is sent ahead any more. */
static void delete_key(redis_store_t *s, const char *key, size_t kl)
{
    if (!s->rd)
        return;
    const char *argv[2] = {"DEL", key};
    size_t lens[2] = {3, kl};
    redis_fault_t f;
    rreply_t *r = redis_conn_call(s->rd, &f, 2, argv, lens);
    if (!r) {
        redis__drop_reader(s, f, "DEL");
        return;
    }
    if (r->type == REDIS_REPLY_ERROR)
        server_error(s, "DEL", r->text);
    rreply_free(r);
}

static int rs_get(cairn_tier_store_t *t, const cairn_tier_object_t *want, cairn_tier_dest_fn dest, void *user)
{
    redis_store_t *s = rs_of(t);
    if (!held_kind(s, &want->key))
        return CAIRN_EUNSUPPORTED;
    if (!s->n_groups)
        return CAIRN_EINVAL; /* layout "any": nothing to check a block against */
    char key[REDIS_KEY_MAX];
    size_t kl = redis__key_text(s, &want->key, key);
    pthread_mutex_lock(&s->rd_mu);
    if (!s->rd) {
        pthread_mutex_unlock(&s->rd_mu);
        unavailable(s);
        return CAIRN_ENOENT;
    }
    /* The reply of this key: sent ahead by a prefetch (replies before it are dropped), or
     * asked for now (after dropping every reply sent ahead). */
    size_t at = 0;
    while (at < s->ahead_n && !same_key(&s->ahead[at], &want->key))
        at++;
    bool ahead = at < s->ahead_n;
    if (!discard_ahead(s, ahead ? at : s->ahead_n)) {
        pthread_mutex_unlock(&s->rd_mu);
        return CAIRN_EIO;
    }
    if (!ahead) {
        const char *argv[2] = {"GET", key};
        size_t lens[2] = {3, kl};
        if (redis_conn_append(s->rd, 2, argv, lens)) {
            pthread_mutex_unlock(&s->rd_mu);
            return CAIRN_ENOMEM;
        }
    }
    get_ctx_t g = {s, want, dest, user, 0, NULL};
    s->rd->sink = (redis_sink_t){decode_value, &g, false};
    redis_fault_t f;
    rreply_t *r = redis_conn_reply(s->rd, &f);
    s->rd->sink = (redis_sink_t){0};
    if (ahead) {
        memmove(s->ahead, s->ahead + 1, (s->ahead_n - 1) * sizeof *s->ahead);
        s->ahead_n--;
    }
    if (!r) {
        redis__drop_reader(s, f, "GET");
        pthread_mutex_unlock(&s->rd_mu);
        return f == REDIS_FAULT_NOMEM ? CAIRN_ENOMEM : CAIRN_EIO;
    }
    int rc;
    if (r->type == REDIS_REPLY_NIL) {
        rc = CAIRN_ENOENT;
    } else if (r->type == REDIS_REPLY_STRING && r->decoded) {
        rc = r->outcome;
    } else {
        if (r->type == REDIS_REPLY_ERROR)
            server_error(s, "GET", r->text);
        rc = CAIRN_EIO;
    }
    rreply_free(r);
    if (rc == CAIRN_ECORRUPT) {
        /* The walk stops here: drop what was sent ahead, then delete the value. */
        if (discard_ahead(s, s->ahead_n))
            delete_key(s, key, kl);
    }
    pthread_mutex_unlock(&s->rd_mu);

    pthread_mutex_lock(&s->mu);
    if (rc == CAIRN_OK) {
        s->c.tier.hits++;
        s->c.tier.reads++;
        s->c.tier.bytes_restored += g.payload;
        redis__known_set_locked(s, &want->key, KNOWN_PRESENT);
    } else if (rc == CAIRN_ENOENT) {
        s->c.tier.misses++;
        redis__known_set_locked(s, &want->key, KNOWN_NONE);
    } else if (rc == CAIRN_ECORRUPT) {
        s->c.tier.reads++;
        s->c.tier.corruptions++;
        s->c.faults++;
        redis__known_set_locked(s, &want->key, KNOWN_NONE);
    } else if (rc == CAIRN_ECANCELED) {
        s->c.tier.restore_declines++;
    }
    pthread_mutex_unlock(&s->mu);
    if (rc == CAIRN_ECORRUPT)
        cairn_log(CAIRN_LOG_WARN, "shared tier: deleted invalid value %.*s (%s)", (int)kl, key,
                  g.why ? g.why : "invalid");
    return rc;
}

/* ---- writes, stats, lifetime ---- */

static int rs_put(cairn_tier_store_t *t, const cairn_tier_object_t *obj, uint32_t wait_ms, bool *queued)
{
    redis_store_t *s = rs_of(t);
    if (!held_kind(s, &obj->key))
        return CAIRN_EUNSUPPORTED;
    return redis__enqueue(s, obj, wait_ms, queued);
}

static void rs_flush(cairn_tier_store_t *t) { redis__flush(rs_of(t)); }

/* Objects of this fingerprint on the server and their bytes (a SCAN; tools and tests). */
static int count_objects(redis_store_t *s, uint64_t *objects, uint64_t *bytes);

static void rs_stats(cairn_tier_store_t *t, cairn_tier_stats_t *out)
{
    redis_store_t *s = rs_of(t);
    cairn_shared_tier_stats_t st;
    (void)cairn_shared_tier_stats(t, &st);
    *out = st.tier;
    if (s->count_objects)
        (void)count_objects(s, &out->objects, &out->used_bytes);
}

static void rs_destroy(cairn_tier_store_t *t)
{
    redis_store_t *s = rs_of(t);
    redis__writer_stop(s);
    redis_conn_close(s->rd);
    redis_conn_close(s->wr);
    for (redis_job_t *j = s->head; j;) {
        redis_job_t *n = j->next;
        cairn_free(j->value);
        cairn_free(j);
        j = n;
    }
    for (uint32_t g = 0; g < s->n_groups; g++)
        cairn_free(s->groups[g].layer_bytes);
    cairn_free(s->groups);
    cairn_free(s->known);
    if (s->password) {
        memset(s->password, 0, strlen(s->password));
        cairn_free(s->password);
    }
    cairn_free(s->username);
    pthread_cond_destroy(&s->cv_work);
    pthread_cond_destroy(&s->cv_room);
    pthread_cond_destroy(&s->cv_idle);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->rd_mu);
    cairn_free(s);
}

/* ---- maintenance (tools: `cairn cache --shared-tier`) ---- */

typedef struct {
    char key[REDIS_KEY_MAX];
    size_t kl;
    cairn_tier_entry_t e;
    long long idle;            /* seconds since last access (OBJECT IDLETIME), -1 unknown */
} maint_item_t;

typedef struct {
    maint_item_t *items;
    size_t n, cap;
} maint_list_t;

/* Every key of this fingerprint (SCAN MATCH), with its size, idle time and, from the
 * first bytes of its value, parent and tokens. Caller holds rd_mu. */
static int collect(redis_store_t *s, maint_list_t *L)
{
    char match[REDIS_KEY_MAX];
    snprintf(match, sizeof match, "cairn:%s:*", s->fp_hex);
    char cursor[32] = "0";
    do {
        const char *argv[6] = {"SCAN", cursor, "MATCH", match, "COUNT", SCAN_COUNT};
        size_t lens[6] = {4, strlen(cursor), 5, strlen(match), 5, strlen(SCAN_COUNT)};
        redis_fault_t f;
        rreply_t *r = redis_conn_call(s->rd, &f, 6, argv, lens);
        if (!r) {
            redis__drop_reader(s, f, "SCAN");
            return f == REDIS_FAULT_NOMEM ? CAIRN_ENOMEM : CAIRN_EIO;
        }
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !r->element[0] || !r->element[0]->str ||
            !r->element[1] || r->element[1]->type != REDIS_REPLY_ARRAY) {
            rreply_free(r);
            return CAIRN_EIO;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        rreply_t *keys = r->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            rreply_t *k = keys->element[i];
            cairn_tier_key_t key;
            if (!k || !k->str || !key_parse(s, k->str, k->len, &key))
                continue;
            if (cairn_grow_array((void **)&L->items, &L->cap, L->n + 1, sizeof *L->items, 256)) {
                rreply_free(r);
                return CAIRN_ENOMEM;
            }
            maint_item_t *it = &L->items[L->n++];
            memset(it, 0, sizeof *it);
            memcpy(it->key, k->str, k->len);
            it->kl = k->len;
            it->e.key = key;
            it->idle = -1;
        }
        rreply_free(r);
    } while (strcmp(cursor, "0"));
    /* Sizes, idle times and header prefixes, pipelined. */
    for (size_t i = 0; i < L->n; i += MAINT_BATCH) {
        size_t m = L->n - i < MAINT_BATCH ? L->n - i : MAINT_BATCH;
        for (size_t j = 0; j < m; j++) {
            maint_item_t *it = &L->items[i + j];
            const char *a1[2] = {"STRLEN", it->key};
            size_t l1[2] = {6, it->kl};
            const char *a2[3] = {"OBJECT", "IDLETIME", it->key};
            size_t l2[3] = {6, 8, it->kl};
            const char *a3[4] = {"GETRANGE", it->key, "0", "127"};
            size_t l3[4] = {8, it->kl, 1, 3};
            if (redis_conn_append(s->rd, 2, a1, l1) || redis_conn_append(s->rd, 3, a2, l2) ||
                redis_conn_append(s->rd, 4, a3, l3)) {
                redis__drop_reader(s, REDIS_FAULT_NOMEM, "STRLEN");
                return CAIRN_ENOMEM;
            }
        }
        for (size_t j = 0; j < 3 * m; j++) {
            redis_fault_t f;
            rreply_t *r = redis_conn_reply(s->rd, &f);
            if (!r) {
                redis__drop_reader(s, f, "STRLEN");
                return f == REDIS_FAULT_NOMEM ? CAIRN_ENOMEM : CAIRN_EIO;
            }
            maint_item_t *it = &L->items[i + j / 3];
            if (j % 3 == 0 && r->type == REDIS_REPLY_INTEGER)
                it->e.bytes = (uint64_t)r->integer;
            else if (j % 3 == 1 && r->type == REDIS_REPLY_INTEGER)
                it->idle = r->integer;
            else if (j % 3 == 2 && r->str && r->len >= 120) {
                const uint8_t *v = (const uint8_t *)r->str;
                if (it->e.key.kind == CAIRN_TIER_BLOCK && !memcmp(v, TIER_OBJECT_MAGIC, 8)) {
                    memcpy(it->e.parent.bytes, v + 80, 32);
                    it->e.n_tokens = le32(v + 116);
                }
            }
            rreply_free(r);
        }
    }
    return CAIRN_OK;
}

static int by_idle_desc(const void *a, const void *b)
{
    const maint_item_t *x = a, *y = b;
    return x->idle < y->idle ? 1 : x->idle > y->idle ? -1 : 0;
}

/* Runs fn under rd_mu over the collected keys, least recently used first. */
static int with_items(redis_store_t *s, int (*fn)(redis_store_t *s, maint_list_t *L, void *user), void *user)
{
    pthread_mutex_lock(&s->rd_mu);
    maint_list_t L = {0};
    int rc = !s->rd ? CAIRN_EIO : collect(s, &L);
    if (rc == CAIRN_OK) {
        if (L.n)
            qsort(L.items, L.n, sizeof *L.items, by_idle_desc);
        rc = fn(s, &L, user);
    }
    pthread_mutex_unlock(&s->rd_mu);
    cairn_free(L.items);
    return rc;
}

static int count_fn(redis_store_t *s, maint_list_t *L, void *user)
{
    (void)s;
    uint64_t *out = user;
    out[0] = L->n;
    out[1] = 0;
    for (size_t i = 0; i < L->n; i++)
        out[1] += L->items[i].e.bytes;
    return CAIRN_OK;
}

static int count_objects(redis_store_t *s, uint64_t *objects, uint64_t *bytes)
{
    uint64_t r[2] = {0, 0};
    int rc = with_items(s, count_fn, r);
    *objects = r[0];
    *bytes = r[1];
    return rc;
}

typedef struct {
    int (*fn)(void *user, const cairn_tier_entry_t *e);
    void *user;
} foreach_ctx_t;

static int foreach_fn(redis_store_t *s, maint_list_t *L, void *user)
{
    (void)s;
    foreach_ctx_t *c = user;
    for (size_t i = 0; i < L->n; i++)
        if (c->fn(c->user, &L->items[i].e))
            break;
    return CAIRN_OK;
}

static int rs_foreach(cairn_tier_store_t *t, int (*fn)(void *user, const cairn_tier_entry_t *e), void *user)
{
    foreach_ctx_t c = {fn, user};
    return with_items(rs_of(t), foreach_fn, &c);
}

/* Deletes items[from, to) with pipelined UNLINKs; returns how many were removed. */
static size_t unlink_items(redis_store_t *s, const maint_item_t *items, size_t n)
{
    size_t removed = 0;
    for (size_t i = 0; i < n && s->rd; i += MAINT_BATCH) {
        size_t m = n - i < MAINT_BATCH ? n - i : MAINT_BATCH;
        for (size_t j = 0; j < m; j++) {
            const char *argv[2] = {"UNLINK", items[i + j].key};
            size_t lens[2] = {6, items[i + j].kl};
            if (redis_conn_append(s->rd, 2, argv, lens)) {
                redis__drop_reader(s, REDIS_FAULT_NOMEM, "UNLINK");
                return removed;
            }
        }
        for (size_t j = 0; j < m; j++) {
            redis_fault_t f;
            rreply_t *r = redis_conn_reply(s->rd, &f);
            if (!r) {
                redis__drop_reader(s, f, "UNLINK");
                return removed;
            }
            removed += r->type == REDIS_REPLY_INTEGER && r->integer == 1;
            rreply_free(r);
        }
    }
    return removed;
}

typedef struct {
    uint64_t quota;
    size_t done;
} prune_ctx_t;

static int prune_fn(redis_store_t *s, maint_list_t *L, void *user)
{
    prune_ctx_t *p = user;
    uint64_t used = 0;
    for (size_t i = 0; i < L->n; i++)
        used += L->items[i].e.bytes;
    size_t k = 0;
    while (k < L->n && used > p->quota)
        used -= L->items[k++].e.bytes;
    p->done = unlink_items(s, L->items, k);
    return s->rd ? CAIRN_OK : CAIRN_EIO;
}

static int rs_prune(cairn_tier_store_t *t, uint64_t quota_bytes, size_t *evicted)
{
    redis_store_t *s = rs_of(t);
    prune_ctx_t p = {quota_bytes, 0};
    int rc = with_items(s, prune_fn, &p);
    *evicted = p.done;
    pthread_mutex_lock(&s->mu);
    s->c.tier.evictions += p.done;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int rs_clear(cairn_tier_store_t *t, size_t *removed)
{
    prune_ctx_t p = {0, 0};
    int rc = with_items(rs_of(t), prune_fn, &p);
    *removed = p.done;
    return rc;
}

typedef struct {
    const redis_store_t *s;
    const maint_item_t *it;
} check_ctx_t;

/* Validates a value on its own: its form, the fingerprint, the hash (and group) its key
 * names, the group's layout when the store has one, and the payload checksum. */
static int check_alone(void *user, const char *str, size_t len)
{
    const check_ctx_t *c = user;
    const uint8_t *v = (const uint8_t *)str;
    const cairn_tier_key_t *k = &c->it->e.key;
    if (k->kind == CAIRN_TIER_STATE) {
        tier_state_header_t h;
        if (tier_state_validate(v, len, &c->s->fp, &h) || memcmp(h.hash.bytes, k->hash.bytes, 32) ||
            h.group != k->group)
            return CAIRN_ECORRUPT;
        return CAIRN_OK;
    }
    tier_object_header_t h;
    if (tier_object_validate(v, len, &c->s->fp, &k->hash, &h))
        return CAIRN_ECORRUPT;
    if (c->s->n_groups) {
        const redis_group_t *g = &c->s->groups[k->group];
        if (h.dtype != (uint32_t)c->s->dtype || h.n_tokens != c->s->block_tokens || h.n_layers != g->n_layers)
            return CAIRN_ECORRUPT;
        for (uint32_t l = 0; l < g->n_layers; l++)
            if (tier_object_layer_bytes(&h, l) != g->layer_bytes[l])
                return CAIRN_ECORRUPT;
    }
    return CAIRN_OK;
}

typedef struct {
    size_t checked, bad;
} verify_ctx_t;

static int verify_fn(redis_store_t *s, maint_list_t *L, void *user)
{
    verify_ctx_t *v = user;
    for (size_t i = 0; i < L->n && s->rd; i++) {
        maint_item_t *it = &L->items[i];
        if (s->n_groups && it->e.key.kind == CAIRN_TIER_BLOCK && it->e.key.group >= s->n_groups)
            continue; /* a group this layout does not describe */
        const char *argv[2] = {"GET", it->key};
        size_t lens[2] = {3, it->kl};
        check_ctx_t c = {s, it};
        if (redis_conn_append(s->rd, 2, argv, lens))
            return CAIRN_ENOMEM;
        s->rd->sink = (redis_sink_t){check_alone, &c, false};
        redis_fault_t f;
        rreply_t *r = redis_conn_reply(s->rd, &f);
        if (s->rd)
            s->rd->sink = (redis_sink_t){0};
        if (!r) {
            redis__drop_reader(s, f, "GET (verify)");
            return CAIRN_EIO;
        }
        bool present = r->type == REDIS_REPLY_STRING, bad_value = present && r->outcome != CAIRN_OK;
        rreply_free(r);
        if (!present)
            continue; /* expired or evicted since the scan */
        v->checked++;
        if (bad_value) {
            v->bad += unlink_items(s, it, 1);
            cairn_log(CAIRN_LOG_INFO, "shared tier: deleted invalid value %s", it->key);
        }
    }
    return s->rd ? CAIRN_OK : CAIRN_EIO;
}

static int rs_verify(cairn_tier_store_t *t, size_t *checked, size_t *bad)
{
    redis_store_t *s = rs_of(t);
    verify_ctx_t v = {0, 0};
    int rc = with_items(s, verify_fn, &v);
    pthread_mutex_lock(&s->mu);
    s->c.tier.reads += v.checked;
    s->c.tier.corruptions += v.bad;
    pthread_mutex_unlock(&s->mu);
    *checked = v.checked;
    *bad = v.bad;
    return rc;
}

static const cairn_tier_store_ops_t redis_ops = {
    .name = "redis",
    .contains = rs_contains,
    .chain_length = rs_chain_length,
    .put = rs_put,
    .get = rs_get,
    .prefetch = rs_prefetch,
    .flush = rs_flush,
    .stats = rs_stats,
    .destroy = rs_destroy,
    .foreach = rs_foreach,
    .verify = rs_verify,
    .prune = rs_prune,
    .clear = rs_clear,
};

/* ---- creation and the public calls of cairn/shared_tier.h ---- */

static redis_store_t *redis_of(cairn_tier_store_t *t)
{
    return t && t->ops == &redis_ops ? (redis_store_t *)t : NULL;
}

static int copy_layout(redis_store_t *s, const cairn_tier_layout_t *L, char *err, size_t err_len)
{
    s->fp = L->fingerprint;
    cairn_tier_hash_hex(&s->fp, s->fp_hex);
    s->dtype = L->dtype;
    s->block_tokens = L->block_tokens;
    if (!L->n_groups)
        return CAIRN_OK;
    if (!L->groups || L->n_groups > 64 || !cairn_dtype_block_elems(L->dtype) || !L->block_tokens ||
        L->block_tokens > TIER_OBJECT_MAX_BLOCK_TOKENS) {
        cairn_errf(err, err_len, "shared tier: bad block layout (element type, tokens per block or groups)");
        return CAIRN_EINVAL;
    }
    if (!(s->groups = cairn_calloc(L->n_groups, sizeof *s->groups)))
        return CAIRN_ENOMEM;
    s->n_groups = L->n_groups;
    for (uint32_t g = 0; g < L->n_groups; g++) {
        const cairn_tier_group_layout_t *in = &L->groups[g];
        if (!in->n_layers || in->n_layers > TIER_OBJECT_MAX_LAYERS || !in->layer_bytes) {
            cairn_errf(err, err_len, "shared tier: bad block layout of cache group %u", g);
            return CAIRN_EINVAL;
        }
        redis_group_t *o = &s->groups[g];
        if (!(o->layer_bytes = cairn_calloc(in->n_layers, sizeof *o->layer_bytes)))
            return CAIRN_ENOMEM;
        o->n_layers = in->n_layers;
        for (uint32_t l = 0; l < in->n_layers; l++) {
            o->layer_bytes[l] = in->layer_bytes[l];
            o->payload_bytes += in->layer_bytes[l];
        }
        if (!o->payload_bytes || o->payload_bytes > TIER_OBJECT_MAX_PAYLOAD) {
            cairn_errf(err, err_len, "shared tier: block payload of cache group %u out of range", g);
            return CAIRN_EINVAL;
        }
    }
    return CAIRN_OK;
}

int cairn_shared_tier_open(const cairn_shared_tier_config_t *cfg, const cairn_tier_layout_t *layout,
                           cairn_tier_store_t **out, char *err, size_t err_len)
{
    char scratch[2];
    if (!err || !err_len) {
        err = scratch;
        err_len = sizeof scratch;
    }
    err[0] = '\0';
    if (!out)
        return CAIRN_EINVAL;
    *out = NULL;
    if (!cfg || !layout) {
        cairn_errf(err, err_len, "shared tier: no configuration");
        return CAIRN_EINVAL;
    }
    redis_url_t u;
    int rc = redis_url_parse(cfg->url, &u, err, err_len);
    if (rc || (rc = redis_url_supported(&u, err, err_len)))
        return rc;
    redis_store_t *s = cairn_calloc(1, sizeof *s);
    if (!s)
        return CAIRN_ENOMEM;
    s->base.ops = &redis_ops;
    s->url = u;
    pthread_mutex_init(&s->rd_mu, NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv_work, &ca);
    pthread_cond_init(&s->cv_room, &ca);
    pthread_cond_init(&s->cv_idle, &ca);
    pthread_condattr_destroy(&ca);
    s->ttl_s = (uint32_t)cairn_knob_int("CAIRN_SHARED_TIER_TTL_S", cfg->has_ttl, cfg->ttl_s,
                                        CAIRN_SHARED_TIER_DEFAULT_TTL_S, 0, 100LL * 365 * 86400);
    s->timeout_ms = (uint32_t)cairn_knob_int("CAIRN_SHARED_TIER_TIMEOUT_MS", cfg->timeout_ms > 0, cfg->timeout_ms,
                                             CAIRN_SHARED_TIER_DEFAULT_TIMEOUT_MS, 1, 600000);
    bool hq = cfg->queue_bytes > 0;
    s->queue_cap = (uint64_t)cairn_knob_int("CAIRN_SHARED_TIER_QUEUE_MIB", hq, hq ? (int64_t)(cfg->queue_bytes >> 20) : 0,
                                            CAIRN_SHARED_TIER_DEFAULT_QUEUE_MIB, 0, 1 << 20)
                   << 20;
    if (hq && !getenv("CAIRN_SHARED_TIER_QUEUE_MIB"))
        s->queue_cap = cfg->queue_bytes; /* exact bytes when given (tests of a full queue) */
    /* A key the store has not seen confirmed for this long is written again (SET NX: never
     * rewritten on the server) rather than trusted: it may have expired or been evicted. */
    uint64_t confirm_s = (uint64_t)cairn_knob_int("CAIRN_SHARED_TIER_CONFIRM_S", false, 0, 60, 0, 86400);
    if (s->ttl_s && confirm_s > s->ttl_s / 2)
        confirm_s = s->ttl_s / 2;
    s->confirm_ms = (uint32_t)(confirm_s * 1000u);
    s->count_objects = cfg->count_objects;
    s->backoff_ms = 0;
    if ((cfg->username && !(s->username = cairn_strdup(cfg->username))) ||
        (cfg->password && !(s->password = cairn_strdup(cfg->password))) ||
        !(s->known = cairn_calloc((size_t)REDIS_KNOWN_SETS * REDIS_KNOWN_WAYS, sizeof *s->known))) {
        rc = CAIRN_ENOMEM;
        goto fail;
    }
    if ((rc = copy_layout(s, layout, err, err_len)))
        goto fail;
    char why[256] = "";
    if (redis__connect(s, why, sizeof why)) {
        pthread_mutex_lock(&s->mu);
        s->c.outages++;
        s->c.connect_failures++;
        s->c.faults++;
        s->down_since_ms = redis__now_ms();
        pthread_mutex_unlock(&s->mu);
        cairn_log(CAIRN_LOG_WARN, "shared tier: %s unreachable at start (%s); serving without it, reconnecting "
                                  "in the background", s->url.text, why);
    } else {
        cairn_log(CAIRN_LOG_INFO, "shared tier: %s (key TTL %u s)", s->url.text, s->ttl_s);
    }
    if ((rc = redis__writer_start(s))) {
        cairn_errf(err, err_len, "shared tier: cannot start its I/O thread");
        goto fail;
    }
    *out = &s->base;
    return CAIRN_OK;
fail:
    rs_destroy(&s->base);
    return rc;
}

int cairn_shared_tier_check_url(const char *url, char *err, size_t err_len)
{
    redis_url_t u;
    int rc = redis_url_parse(url, &u, err, err_len);
    return rc ? rc : redis_url_supported(&u, err, err_len);
}

int cairn_shared_tier_stats(cairn_tier_store_t *t, cairn_shared_tier_stats_t *out)
{
    memset(out, 0, sizeof *out);
    redis_store_t *s = redis_of(t);
    if (!s)
        return CAIRN_EINVAL;
    pthread_mutex_lock(&s->mu);
    *out = s->c;
    out->connected = s->up;
    out->tier.queue_len = s->queued_n + s->inflight_n;
    pthread_mutex_unlock(&s->mu);
    out->tier.enabled = true;
    out->tier.root = s->url.text;
    out->url = s->url.text;
    out->ttl_s = s->ttl_s;
    return CAIRN_OK;
}

/* One command on the read connection, for the informational calls. Caller holds rd_mu. */
static rreply_t *info_call(redis_store_t *s, int argc, const char **argv)
{
    size_t lens[4];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    redis_fault_t f;
    rreply_t *r = redis_conn_call(s->rd, &f, argc, argv, lens);
    if (!r)
        redis__drop_reader(s, f, argv[0]);
    return r;
}

/* The value of "name:" in an INFO text, or 0. */
static uint64_t info_field(const char *text, const char *name, char *str, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (!strncmp(p, name, nl) && p[nl] == ':') {
            const char *v = p + nl + 1;
            if (str) {
                size_t n = strcspn(v, "\r\n");
                n = n < cap - 1 ? n : cap - 1;
                memcpy(str, v, n);
                str[n] = '\0';
            }
            return strtoull(v, NULL, 10);
        }
    }
    return 0;
}

int cairn_shared_tier_server_info(cairn_tier_store_t *t, cairn_shared_tier_server_t *out)
{
    memset(out, 0, sizeof *out);
    redis_store_t *s = redis_of(t);
    if (!s)
        return CAIRN_EINVAL;
    pthread_mutex_lock(&s->rd_mu);
    int rc = CAIRN_EIO;
    const char *a_info[1] = {"INFO"};
    const char *a_pol[3] = {"CONFIG", "GET", "maxmemory-policy"};
    rreply_t *r = s->rd ? info_call(s, 1, a_info) : NULL;
    if (r && r->str) {
        out->used_memory = info_field(r->str, "used_memory", NULL, 0);
        out->maxmemory = info_field(r->str, "maxmemory", NULL, 0);
        out->evicted_keys = info_field(r->str, "evicted_keys", NULL, 0);
        out->expired_keys = info_field(r->str, "expired_keys", NULL, 0);
        info_field(r->str, "redis_version", out->version, sizeof out->version);
        info_field(r->str, "maxmemory_policy", out->policy, sizeof out->policy);
        rc = CAIRN_OK;
    }
    rreply_free(r);
    if (rc == CAIRN_OK && !out->policy[0] && s->rd) {
        /* Older servers do not report the policy in INFO. */
        r = info_call(s, 3, a_pol);
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1] && r->element[1]->str)
            snprintf(out->policy, sizeof out->policy, "%s", r->element[1]->str);
        rreply_free(r);
    }
    pthread_mutex_unlock(&s->rd_mu);
    return rc;
}

int cairn_shared_tier_list_models(const cairn_shared_tier_config_t *cfg,
                                  int (*fn)(void *user, const cairn_tier_hash_t *fingerprint), void *user,
                                  char *err, size_t err_len)
{
    redis_url_t u;
    int rc = redis_url_parse(cfg->url, &u, err, err_len);
    if (rc || (rc = redis_url_supported(&u, err, err_len)))
        return rc;
    uint32_t timeout = cfg->timeout_ms ? cfg->timeout_ms : 2000;
    redis_conn_t *c = NULL;
    if ((rc = redis_conn_open(&u, cfg->username, cfg->password, timeout, &c, err, err_len)))
        return rc;
    cairn_tier_hash_t *seen = NULL;
    size_t n_seen = 0, cap = 0;
    char cursor[32] = "0";
    do {
        const char *argv[6] = {"SCAN", cursor, "MATCH", "cairn:*", "COUNT", SCAN_COUNT};
        size_t lens[6] = {4, strlen(cursor), 5, 7, 5, strlen(SCAN_COUNT)};
        redis_fault_t f;
        rreply_t *r = redis_conn_call(c, &f, 6, argv, lens);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !r->element[0] || !r->element[0]->str ||
            !r->element[1] || r->element[1]->type != REDIS_REPLY_ARRAY) {
            cairn_errf(err, err_len, "shared tier %s: SCAN failed (%s)", u.text,
                     r ? (r->type == REDIS_REPLY_ERROR ? r->text : "unexpected reply") : redis_fault_name(f));
            rreply_free(r);
            rc = r || f != REDIS_FAULT_NOMEM ? CAIRN_EIO : CAIRN_ENOMEM;
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            rreply_t *k = r->element[1]->element[i];
            if (!k || !k->str || k->len < 71 || k->str[70] != ':')
                continue;
            char hex[65];
            memcpy(hex, k->str + 6, 64);
            hex[64] = '\0';
            cairn_tier_hash_t fp;
            if (cairn_tier_hash_parse(hex, &fp))
                continue;
            bool dup = false;
            for (size_t j = 0; j < n_seen && !dup; j++)
                dup = !memcmp(seen[j].bytes, fp.bytes, 32);
            if (dup)
                continue;
            if (cairn_grow_array((void **)&seen, &cap, n_seen + 1, sizeof *seen, 16)) {
                rc = CAIRN_ENOMEM;
                break;
            }
            seen[n_seen++] = fp;
        }
        rreply_free(r);
    } while (rc == CAIRN_OK && strcmp(cursor, "0"));
    redis_conn_close(c);
    for (size_t i = 0; rc == CAIRN_OK && i < n_seen; i++)
        if (fn(user, &seen[i]))
            break;
    cairn_free(seen);
    return rc;
}
