/*
 * fs_store.c — the filesystem store's directory, in-memory index, LRU quota, validated
 * reads, chain queries, maintenance (verify, prune, clear) and counters.
 *
 * Model: <root>/<fingerprint hex>/<hh>/<hash hex>.kv, one immutable object per full block,
 * and <hh>/<hash hex>.<group>.st, one per STATE sidecar at a block boundary (format:
 * docs/FORMAT.md 1.1-1.2 and 1.8). The index maps (hash, kind, group) -> entry and keeps
 * one LRU list over both kinds (one quota); it is built at open from names and headers
 * (never payloads) and updated by the writer after each committed object.
 * Invariants:
 *  - an indexed entry's file had a valid header for this model and block and the exact
 *    size that header implies when it was indexed; reads re-validate everything anyway,
 *    because the file may have changed since (another process, a bit flip, a power cut);
 *  - used == sum of file_bytes over indexed entries;
 *  - a pinned entry (pins > 0) is never evicted; an entry removed while pinned is freed by
 *    the last unpin;
 *  - used <= quota once no read holds a pin (an eviction passes over pinned entries; the
 *    last unpin of an entry evicts down to the quota again).
 * Thread-safety: all public functions lock s->mu around index and counter access; file
 * I/O of reads happens outside the lock with the entry pinned.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "tier/fs/fs_store_impl.h"

/* ---- paths ---- */

char *fs__shard_path(const cairn_cold_store_t *s, const cairn_tier_hash_t *h)
{
    char hex[65];
    cairn_tier_hash_hex(h, hex);
    size_t n = strlen(s->dir) + 4;
    char *p = cairn_malloc(n);
    if (p)
        snprintf(p, n, "%s/%.2s", s->dir, hex);
    return p;
}

cairn_tier_key_t fs__block_key(const cairn_tier_hash_t *h)
{
    cairn_tier_key_t k;
    memset(&k, 0, sizeof k);
    k.kind = CAIRN_TIER_BLOCK;
    k.hash = *h;
    return k;
}

char *fs__object_path(const cairn_cold_store_t *s, const cairn_tier_key_t *k)
{
    char hex[65];
    cairn_tier_hash_hex(&k->hash, hex);
    size_t n = strlen(s->dir) + 4 + 64 + 16 + 1;
    char *p = cairn_malloc(n);
    if (!p)
        return NULL;
    if (k->kind == CAIRN_TIER_STATE)
        snprintf(p, n, "%s/%.2s/%s.%u.st", s->dir, hex, hex, (unsigned)k->group);
    else
        snprintf(p, n, "%s/%.2s/%s.kv", s->dir, hex, hex);
    return p;
}

char *cairn_cold_default_root(const char *config_root)
{
    const char *r = cairn_knob_str("CAIRN_CACHE_DIR", config_root, NULL);
    if (r)
        return cairn_strdup(r);
    const char *base = getenv("XDG_CACHE_HOME");
    const char *suffix = "/cairn";
    if (!base || base[0] != '/') {
        base = getenv("HOME");
        suffix = "/.cache/cairn";
        if (!base || !*base)
            return NULL;
    }
    size_t n = strlen(base) + strlen(suffix) + 1;
    char *p = cairn_malloc(n);
    if (p)
        snprintf(p, n, "%s%s", base, suffix);
    return p;
}

/* mkdir -p with mode 0700 for each created component. */
static int make_dirs(const char *path)
{
    char *p = cairn_strdup(path);
    if (!p)
        return CAIRN_ENOMEM;
    int rc = CAIRN_OK;
    for (char *q = p + 1;; q++) {
        if (*q == '/' || *q == '\0') {
            char c = *q;
            *q = '\0';
            if (cairn_io_check("mkdir", p) < 0 || (mkdir(p, 0700) < 0 && errno != EEXIST)) {
                rc = CAIRN_EIO;
                break;
            }
            *q = c;
            if (!c)
                break;
        }
    }
    cairn_free(p);
    return rc;
}

/* ---- index ---- */

static size_t bucket_of(const cairn_cold_store_t *s, const cairn_tier_hash_t *h)
{
    uint64_t v;
    memcpy(&v, h->bytes, 8);
    return (size_t)(v & (s->n_buckets - 1));
}

fs_entry_t *fs__find_locked(cairn_cold_store_t *s, const cairn_tier_key_t *k)
{
    const uint32_t group = k->kind == CAIRN_TIER_STATE ? k->group : 0;
    for (fs_entry_t *e = s->buckets[bucket_of(s, &k->hash)]; e; e = e->next)
        if (e->kind == (uint8_t)k->kind && e->group == group && !memcmp(e->hash.bytes, k->hash.bytes, 32))
            return e;
    return NULL;
}

static void lru_unlink(cairn_cold_store_t *s, fs_entry_t *e)
{
    if (e->prev_lru)
        e->prev_lru->next_lru = e->next_lru;
    else
        s->lru_head = e->next_lru;
    if (e->next_lru)
        e->next_lru->prev_lru = e->prev_lru;
    else
        s->lru_tail = e->prev_lru;
    e->prev_lru = e->next_lru = NULL;
}

static void lru_push_tail(cairn_cold_store_t *s, fs_entry_t *e)
{
    e->prev_lru = s->lru_tail;
    e->next_lru = NULL;
    if (s->lru_tail)
        s->lru_tail->next_lru = e;
    else
        s->lru_head = e;
    s->lru_tail = e;
}

static int grow_buckets(cairn_cold_store_t *s)
{
    size_t nb = s->n_buckets * 2;
    fs_entry_t **b = cairn_calloc(nb, sizeof *b);
    if (!b)
        return CAIRN_ENOMEM;
    fs_entry_t **old = s->buckets;
    size_t on = s->n_buckets;
    s->buckets = b;
    s->n_buckets = nb;
    for (size_t i = 0; i < on; i++) {
        for (fs_entry_t *e = old[i], *nx; e; e = nx) {
            nx = e->next;
            size_t k = bucket_of(s, &e->hash);
            e->next = b[k];
            b[k] = e;
        }
    }
    cairn_free(old);
    return CAIRN_OK;
}

/* The BLOCK entry e is anchored on: a block's parent, a sidecar's boundary block; NULL
 * for block 0 or when the anchor is not indexed. */
static fs_entry_t *anchor_locked(cairn_cold_store_t *s, const fs_entry_t *e)
{
    static const cairn_tier_hash_t zero;
    if (e->kind == CAIRN_TIER_STATE) {
        cairn_tier_key_t k = fs__block_key(&e->hash);
        return fs__find_locked(s, &k);
    }
    if (!memcmp(e->parent.bytes, zero.bytes, sizeof zero.bytes))
        return NULL;
    cairn_tier_key_t k = fs__block_key(&e->parent);
    return fs__find_locked(s, &k);
}

/* Recounts every entry's children (after the open's scan, which inserts in file order). */
static void recount_children_locked(cairn_cold_store_t *s)
{
    for (fs_entry_t *e = s->lru_head; e; e = e->next_lru)
        e->children = 0;
    for (fs_entry_t *e = s->lru_head; e; e = e->next_lru) {
        fs_entry_t *a = anchor_locked(s, e);
        if (a)
            a->children++;
    }
}

int fs__insert_locked(cairn_cold_store_t *s, const cairn_tier_key_t *k, const cairn_tier_hash_t *parent,
                      uint64_t file_bytes, uint32_t n_tokens, uint64_t boundary)
{
    fs_entry_t *e = fs__find_locked(s, k);
    if (e) {
        lru_unlink(s, e);
        lru_push_tail(s, e);
        return CAIRN_OK;
    }
    if (s->count + 1 > s->n_buckets && grow_buckets(s))
        return CAIRN_ENOMEM;
    e = cairn_calloc(1, sizeof *e);
    if (!e)
        return CAIRN_ENOMEM;
    e->hash = k->hash;
    e->kind = (uint8_t)k->kind;
    e->group = k->kind == CAIRN_TIER_STATE ? k->group : 0;
    if (parent)
        e->parent = *parent;
    e->file_bytes = file_bytes;
    e->n_tokens = n_tokens;
    e->boundary = boundary;
    size_t b = bucket_of(s, &k->hash);
    e->next = s->buckets[b];
    s->buckets[b] = e;
    lru_push_tail(s, e);
    s->count++;
    s->used += file_bytes;
    if (e->kind == CAIRN_TIER_STATE) {
        s->n_state++;
        s->state_used += file_bytes;
    }
    fs_entry_t *a = anchor_locked(s, e);
    if (a)
        a->children++;
    return CAIRN_OK;
}

/* Takes e out of the index; frees it unless pinned (the last unpin frees it then). */
static void remove_locked(cairn_cold_store_t *s, fs_entry_t *e)
{
    if (e->removed)
        return;
    fs_entry_t **pp = &s->buckets[bucket_of(s, &e->hash)];
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    lru_unlink(s, e);
    fs_entry_t *a = anchor_locked(s, e);
    if (a && a->children)
        a->children--;
    s->count--;
    s->used -= e->file_bytes;
    if (e->kind == CAIRN_TIER_STATE) {
        s->n_state--;
        s->state_used -= e->file_bytes;
    }
    e->removed = true;
    if (!e->pins)
        cairn_free(e);
}

/* Drops a read's pin. An eviction that had to pass over pinned entries may have left the
 * store above its quota: the last pin of an entry lets it catch up (else the overshoot
 * would last until the next insert). */
static void unpin_locked(cairn_cold_store_t *s, fs_entry_t *e)
{
    if (--e->pins)
        return;
    if (e->removed)
        cairn_free(e);
    else if (s->used > s->quota)
        fs__evict_locked(s, s->quota, NULL);
}

/* The key an entry names (domain zero: not stored). */
static cairn_tier_key_t entry_key(const fs_entry_t *e)
{
    cairn_tier_key_t k;
    memset(&k, 0, sizeof k);
    k.kind = (cairn_tier_kind_t)e->kind;
    k.group = e->group;
    k.hash = e->hash;
    return k;
}

static void unlink_object(cairn_cold_store_t *s, const fs_entry_t *e)
{
    cairn_tier_key_t k = entry_key(e);
    char *p = fs__object_path(s, &k);
    if (p) {
        unlink(p);
        cairn_free(p);
    }
}

static bool evictable(const fs_entry_t *e, const fs_entry_t *keep)
{
    return !e->pins && e != keep && e->children == 0;
}

size_t fs__evict_locked(cairn_cold_store_t *s, uint64_t quota, const fs_entry_t *keep)
{
    size_t n = 0;
    fs_entry_t *e = s->lru_head;
    while (s->used > quota && e) {
        fs_entry_t *nx = e->next_lru;
        /* A leaf, then each anchor its eviction leaves without children. */
        for (fs_entry_t *x = e; x && s->used > quota && evictable(x, keep);) {
            fs_entry_t *a = anchor_locked(s, x);
            if (x == nx)
                nx = x->next_lru;
            unlink_object(s, x);
            remove_locked(s, x);
            s->c.evictions++;
            n++;
            x = a && a->children == 0 ? a : NULL;
        }
        e = nx;
    }
    return n;
}

/* ---- open: scan ---- */

typedef struct {
    cairn_tier_key_t key;
    cairn_tier_hash_t parent;
    uint64_t bytes, boundary;
    uint32_t n_tokens;
    struct timespec mtime;
} scan_item_t;

static bool is_hex_name(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return s[n] == '\0' || s[n] == '.';
}

/*
 * Parses an object's file name inside shard `shard`: "<64 hex>.kv" (a BLOCK of group 0) or
 * "<64 hex>.<group>.st" (a STATE; group in decimal, no leading zero). False for anything
 * else, including a name in the wrong shard.
 */
static bool parse_object_name(const char *nm, const char *shard, cairn_tier_key_t *k)
{
    memset(k, 0, sizeof *k);
    size_t len = strlen(nm);
    if (len < 64 + 3 || !is_hex_name(nm, 64) || nm[64] != '.' || memcmp(nm, shard, 2))
        return false;
    char hex[65];
    memcpy(hex, nm, 64);
    hex[64] = '\0';
    if (cairn_tier_hash_parse(hex, &k->hash) != CAIRN_OK)
        return false;
    const char *t = nm + 65;
    if (!strcmp(t, "kv")) {
        k->kind = CAIRN_TIER_BLOCK;
        return true;
    }
    /* <group>.st */
    uint64_t g = 0;
    const char *d = t;
    while (*d >= '0' && *d <= '9' && d - t < 10)
        g = g * 10 + (uint64_t)(*d++ - '0');
    if (d == t || (d - t > 1 && *t == '0') || g > UINT32_MAX || strcmp(d, ".st"))
        return false;
    k->kind = CAIRN_TIER_STATE;
    k->group = (uint32_t)g;
    return true;
}

/* Checks a BLOCK header against the store's identity and layout. */
static bool header_matches(const cairn_cold_store_t *s, const tier_object_header_t *h, const cairn_tier_hash_t *hash)
{
    if (memcmp(h->fingerprint.bytes, s->fp.bytes, 32) || memcmp(h->hash.bytes, hash->bytes, 32))
        return false;
    if (!s->n_layers)
        return true;
    if (h->dtype != (uint32_t)s->dtype || h->n_tokens != s->block_tokens || h->n_layers != s->n_layers)
        return false;
    for (uint32_t l = 0; l < s->n_layers; l++)
        if (tier_object_layer_bytes(h, l) != s->layer_bytes[l])
            return false;
    return true;
}

/* Checks a STATE header against the store's identity and the key it is named by. */
static bool state_header_matches(const cairn_cold_store_t *s, const tier_state_header_t *h,
                                 const cairn_tier_key_t *k)
{
    return !memcmp(h->fingerprint.bytes, s->fp.bytes, 32) && !memcmp(h->hash.bytes, k->hash.bytes, 32) &&
           h->group == k->group;
}

/* Reads an object's header (the first bytes of fd, growing the buffer when the header is
 * longer than the stack buffer) and parses it as the key's kind. 0, CAIRN_ECORRUPT or
 * CAIRN_ENOMEM; *buf is the caller's to free when it is not stackbuf. */
static int read_header(int fd, off_t size, const cairn_tier_key_t *k, uint8_t *stackbuf, size_t stack_len,
                       uint8_t **buf, tier_object_header_t *bh, tier_state_header_t *sh)
{
    *buf = stackbuf;
    size_t want = size < (off_t)stack_len ? (size_t)size : stack_len;
    ssize_t got = pread(fd, *buf, want, 0);
    if (got < 0 || (size_t)got != want)
        return CAIRN_ECORRUPT;
    bool state = k->kind == CAIRN_TIER_STATE;
    int prc = state ? tier_state_parse_header(*buf, want, sh) : tier_object_parse_header(*buf, want, bh);
    uint32_t hb = state ? sh->header_bytes : bh->header_bytes;
    if (prc == CAIRN_ERANGE && hb > want && (off_t)hb <= size) {
        if (!(*buf = cairn_malloc(hb)))
            return CAIRN_ENOMEM;
        want = hb;
        got = pread(fd, *buf, want, 0);
        if (got < 0 || (size_t)got != want)
            return CAIRN_ECORRUPT;
        prc = state ? tier_state_parse_header(*buf, want, sh) : tier_object_parse_header(*buf, want, bh);
    }
    return prc ? CAIRN_ECORRUPT : CAIRN_OK;
}

/* Reads and checks one object's header. 0 when it belongs in the index. */
static int scan_object(cairn_cold_store_t *s, int dfd, const char *name, const cairn_tier_key_t *k,
                       scan_item_t *it)
{
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? CAIRN_ENOENT : CAIRN_ECORRUPT;
    struct stat st;
    uint8_t stackbuf[4096];
    uint8_t *buf = stackbuf;
    int rc = CAIRN_ECORRUPT;
    if (fstat(fd, &st) < 0)
        goto out;
    tier_object_header_t h;
    tier_state_header_t sh;
    int prc = read_header(fd, st.st_size, k, stackbuf, sizeof stackbuf, &buf, &h, &sh);
    if (prc) {
        rc = prc;
        goto out;
    }
    memset(it, 0, sizeof *it);
    if (k->kind == CAIRN_TIER_STATE) {
        if (!state_header_matches(s, &sh, k) || (uint64_t)st.st_size != sh.header_bytes + sh.payload_bytes)
            goto out;
        it->boundary = sh.boundary;
    } else {
        if (!header_matches(s, &h, &k->hash) || (uint64_t)st.st_size != h.header_bytes + h.payload_bytes)
            goto out;
        it->parent = h.parent;
        it->n_tokens = h.n_tokens;
    }
    it->key = *k;
    it->bytes = (uint64_t)st.st_size;
    it->mtime = st.st_mtim;
    rc = CAIRN_OK;
out:
    if (buf != stackbuf)
        cairn_free(buf);
    close(fd);
    return rc;
}

/* A temporary file ".tmp.<hash>.<pid>.<seq>" is garbage once its writer process is gone. */
static bool temp_is_stale(const char *name)
{
    const char *p = name + 5 + 64;
    if (strlen(name) < 5 + 64 + 2 || *p != '.')
        return true;
    char *end;
    long pid = strtol(p + 1, &end, 10);
    if (pid <= 0 || *end != '.')
        return true;
    return kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

static int scan_shard(cairn_cold_store_t *s, const char *shard, scan_item_t **items, size_t *n, size_t *cap)
{
    size_t plen = strlen(s->dir) + 4;
    char *path = cairn_malloc(plen);
    if (!path)
        return CAIRN_ENOMEM;
    snprintf(path, plen, "%s/%s", s->dir, shard);
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    cairn_free(path);
    if (dfd < 0)
        return CAIRN_OK;
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return CAIRN_ENOMEM;
    }
    int rc = CAIRN_OK;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, ".."))
            continue;
        if (!strncmp(nm, ".tmp.", 5)) {
            if (temp_is_stale(nm))
                unlinkat(dfd, nm, 0);
            continue;
        }
        struct stat st;
        if (fstatat(dfd, nm, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode))
            continue;
        cairn_tier_key_t k;
        bool named = parse_object_name(nm, shard, &k);
        int orc = CAIRN_ECORRUPT;
        if (named && S_ISREG(st.st_mode)) {
            if (*n == *cap) {
                size_t nc = *cap ? *cap * 2 : 256;
                scan_item_t *ni = cairn_realloc(*items, nc * sizeof *ni);
                if (!ni) {
                    rc = CAIRN_ENOMEM;
                    break;
                }
                *items = ni;
                *cap = nc;
            }
            orc = scan_object(s, dfd, nm, &k, &(*items)[*n]);
            if (orc == CAIRN_ENOMEM) {
                rc = orc;
                break;
            }
            if (orc == CAIRN_OK)
                (*n)++;
        }
        if (orc == CAIRN_ECORRUPT) {
            cairn_log(CAIRN_LOG_WARN, "cold tier: removing invalid object %s/%s/%s", s->dir, shard, nm);
            unlinkat(dfd, nm, 0);
            s->c.corruptions++;
        }
    }
    closedir(d);
    return rc;
}

static int cmp_mtime(const void *a, const void *b)
{
    const scan_item_t *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return 0;
}

static int scan_dir(cairn_cold_store_t *s)
{
    DIR *d = opendir(s->dir);
    if (!d)
        return CAIRN_EIO;
    scan_item_t *items = NULL;
    size_t n = 0, cap = 0;
    int rc = CAIRN_OK;
    struct dirent *de;
    while ((de = readdir(d)) && !rc) {
        const char *nm = de->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, ".."))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), nm, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            if (strlen(nm) == 2 && is_hex_name(nm, 2))
                rc = scan_shard(s, nm, &items, &n, &cap);
            continue;
        }
        /* The event counters (fs_events.c) live at the model level too. */
        if (!strcmp(nm, "events.json") || !strcmp(nm, ".events.lock") || !strcmp(nm, ".events.tmp"))
            continue;
        /* Anything else at the model level is not ours to keep: objects live in shards. */
        cairn_log(CAIRN_LOG_WARN, "cold tier: removing stray file %s/%s", s->dir, nm);
        unlinkat(dirfd(d), nm, 0);
        s->c.corruptions++;
    }
    closedir(d);
    if (!rc) {
        /* Oldest first, so the LRU starts in modification order. */
        if (n)
            qsort(items, n, sizeof *items, cmp_mtime);
        for (size_t i = 0; i < n && !rc; i++)
            rc = fs__insert_locked(s, &items[i].key, &items[i].parent, items[i].bytes, items[i].n_tokens,
                                   items[i].boundary);
    }
    cairn_free(items);
    return rc;
}

/* ---- lifecycle ---- */

int cairn_cold_store_create(const cairn_cold_config_t *cfg, cairn_cold_store_t **out)
{
    if (!cfg || !out || (cfg->n_layers && (!cfg->layer_bytes || !cfg->block_tokens ||
                                           cfg->n_layers > TIER_OBJECT_MAX_LAYERS ||
                                           cfg->block_tokens > TIER_OBJECT_MAX_BLOCK_TOKENS ||
                                           !cairn_dtype_block_elems(cfg->dtype))))
        return CAIRN_EINVAL;
    *out = NULL;
    cairn_cold_store_t *s = cairn_calloc(1, sizeof *s);
    if (!s)
        return CAIRN_ENOMEM;
    int rc = CAIRN_ENOMEM;
    s->base.ops = &fs__ops;
    s->direct = -1; /* direct reads are set up at the first prefetch (fs_ahead.c) */
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->qmu, NULL);
    pthread_mutex_init(&s->amu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->q_not_full, &ca);
    pthread_cond_init(&s->q_not_empty, &ca);
    pthread_cond_init(&s->q_idle, &ca);
    pthread_condattr_destroy(&ca);

    s->fp = cfg->fingerprint;
    s->dtype = cfg->dtype;
    s->block_tokens = cfg->block_tokens;
    s->n_layers = cfg->n_layers;
    if (s->n_layers) {
        s->layer_bytes = cairn_malloc(s->n_layers * sizeof *s->layer_bytes);
        if (!s->layer_bytes)
            goto fail;
        for (uint32_t l = 0; l < s->n_layers; l++) {
            s->layer_bytes[l] = cfg->layer_bytes[l];
            s->payload_bytes += cfg->layer_bytes[l];
        }
        if (!s->payload_bytes || s->payload_bytes > TIER_OBJECT_MAX_PAYLOAD) {
            rc = CAIRN_EINVAL;
            goto fail;
        }
    }
    /* The environment wins (in MiB); -1 means unset or unparseable. */
    int64_t qmib = cairn_knob_int("CAIRN_COLD_QUOTA_MIB", false, 0, -1, 0, INT64_C(1) << 40);
    s->quota = qmib >= 0 ? (uint64_t)qmib << 20
                         : cfg->has_quota ? cfg->quota_bytes : (uint64_t)CAIRN_COLD_DEFAULT_QUOTA_MIB << 20;
    s->depth = (uint32_t)cairn_knob_int("CAIRN_COLD_QUEUE_DEPTH", cfg->queue_depth != 0, cfg->queue_depth,
                                        CAIRN_COLD_DEFAULT_QUEUE_DEPTH, 1, 4096);
    s->n_buckets = 1024;
    s->buckets = cairn_calloc(s->n_buckets, sizeof *s->buckets);
    s->batch_max = (uint32_t)cairn_knob_int("CAIRN_COLD_WRITE_BATCH", cfg->write_batch != 0, cfg->write_batch,
                                            s->depth, 1, 4096);
    s->qcap = s->depth + FS_STATE_SLOTS;
    s->queue = cairn_calloc(s->qcap, sizeof *s->queue);
    s->batch = cairn_calloc(s->batch_max, sizeof *s->batch);
    char *root = cairn_cold_default_root(cfg->root);
    if (!s->buckets || !s->queue || !s->batch || !root) {
        cairn_free(root);
        goto fail;
    }
    char hex[65];
    cairn_tier_hash_hex(&s->fp, hex);
    size_t n = strlen(root) + 66;
    s->dir = cairn_malloc(n);
    if (s->dir)
        snprintf(s->dir, n, "%s/%s", root, hex);
    cairn_free(root);
    if (!s->dir)
        goto fail;
    if ((rc = make_dirs(s->dir))) {
        cairn_log(CAIRN_LOG_ERROR, "cold tier: cannot create %s: %s", s->dir, strerror(errno));
        goto fail;
    }
    chmod(s->dir, 0700);
    if ((rc = scan_dir(s)))
        goto fail;
    recount_children_locked(s);
    fs__evict_locked(s, s->quota, NULL);
    if (!cfg->no_writer && (rc = fs__writer_start(s)))
        goto fail;
    cairn_log(CAIRN_LOG_INFO, "cold tier: %s: %zu objects, %llu bytes", s->dir, s->count,
              (unsigned long long)s->used);
    *out = s;
    return CAIRN_OK;
fail:
    cairn_cold_store_destroy(s);
    return rc;
}

void cairn_cold_store_destroy(cairn_cold_store_t *s)
{
    if (!s)
        return;
    fs__writer_stop(s);
    fs__drop_ahead(s);
    if (s->buckets)
        for (size_t i = 0; i < s->n_buckets; i++)
            for (fs_entry_t *e = s->buckets[i], *nx; e; e = nx) {
                nx = e->next;
                cairn_free(e);
            }
    cairn_free(s->buckets);
    cairn_free(s->queue);
    cairn_free(s->batch);
    cairn_free(s->layer_bytes);
    cairn_free(s->dir);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->qmu);
    pthread_mutex_destroy(&s->amu);
    pthread_cond_destroy(&s->q_not_full);
    pthread_cond_destroy(&s->q_not_empty);
    pthread_cond_destroy(&s->q_idle);
    cairn_free(s);
}

const char *cairn_cold_store_dir(const cairn_cold_store_t *s) { return s->dir; }

bool cairn_cold_store_contains(cairn_cold_store_t *s, const cairn_tier_hash_t *hash)
{
    cairn_tier_key_t k = fs__block_key(hash);
    pthread_mutex_lock(&s->mu);
    bool r = fs__find_locked(s, &k) != NULL;
    pthread_mutex_unlock(&s->mu);
    return r;
}

size_t cairn_cold_store_chain_length(cairn_cold_store_t *s, const cairn_tier_hash_t *hashes, size_t n)
{
    size_t i = 0;
    pthread_mutex_lock(&s->mu);
    for (; i < n; i++) {
        cairn_tier_key_t k = fs__block_key(&hashes[i]);
        if (!fs__find_locked(s, &k))
            break;
    }
    pthread_mutex_unlock(&s->mu);
    return i;
}

/* ---- reads ---- */

static int read_full(int fd, struct iovec *iov, int cnt, size_t total)
{
    size_t done = 0;
    while (done < total) {
        ssize_t r = preadv(fd, iov, cnt, (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return CAIRN_EIO;
        if (r == 0)
            return CAIRN_ECORRUPT; /* short read: the file is shorter than its header says */
        done += (size_t)r;
        size_t adv = (size_t)r;
        while (cnt && adv >= iov->iov_len) {
            adv -= iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt) {
            iov->iov_base = (uint8_t *)iov->iov_base + adv;
            iov->iov_len -= adv;
        }
    }
    return CAIRN_OK;
}

/* Checks an object's header, read into hbuf[0..hb), against the store, the exact payload
 * size and the caller's identity (hash, parent, tokens). h receives the parsed header. */
static int check_header(const cairn_cold_store_t *s, const uint8_t *hbuf, size_t hb, uint64_t payload,
                        const cairn_tier_hash_t *hash, const cairn_tier_hash_t *parent, const int32_t *tokens,
                        uint32_t n_tokens, tier_object_header_t *h)
{
    if (tier_object_parse_header(hbuf, hb, h) || h->payload_bytes != payload || !header_matches(s, h, hash))
        return CAIRN_ECORRUPT;
    if (memcmp(h->parent.bytes, parent->bytes, 32) || h->n_tokens != n_tokens)
        return CAIRN_ECORRUPT;
    for (uint32_t i = 0; i < n_tokens; i++) {
        const uint8_t *p = h->tokens_le + 4u * i;
        uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        if (v != (uint32_t)tokens[i])
            return CAIRN_ECORRUPT;
    }
    return CAIRN_OK;
}

/* Whether payload bytes at dst have the header's checksum. */
static bool payload_ok(const tier_object_header_t *h, const void *dst, uint64_t payload)
{
    uint8_t sum[TIER_OBJECT_SUM_BYTES];
    tier_object_checksum(dst, (size_t)payload, sum);
    return !memcmp(sum, h->payload_sum, TIER_OBJECT_SUM_BYTES);
}

/* Validates an object from fd whose header goes to hbuf and payload to dst. */
static int read_object(cairn_cold_store_t *s, int fd, const cairn_tier_hash_t *hash,
                       const cairn_tier_hash_t *parent, const int32_t *tokens, uint32_t n_tokens,
                       void *dst, size_t dst_size, uint64_t *payload_out, uint64_t *file_out)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return CAIRN_EIO;
    uint8_t stackbuf[4096];
    uint8_t *hbuf = stackbuf;
    size_t hb;
    int rc;
    if (s->n_layers) {
        hb = tier_object_header_size(s->block_tokens, s->n_layers);
    } else {
        uint8_t pre[16];
        if (pread(fd, pre, 16, 0) != 16)
            return CAIRN_ECORRUPT;
        tier_object_header_t tmp;
        if (tier_object_parse_header(pre, 16, &tmp) != CAIRN_ERANGE)
            return CAIRN_ECORRUPT;
        hb = tmp.header_bytes;
    }
    if ((uint64_t)st.st_size < hb)
        return CAIRN_ECORRUPT;
    uint64_t payload = (uint64_t)st.st_size - hb;
    if (s->n_layers && payload != s->payload_bytes)
        return CAIRN_ECORRUPT;
    if (payload > dst_size)
        return payload > TIER_OBJECT_MAX_PAYLOAD ? CAIRN_ECORRUPT : CAIRN_ERANGE;
    if (hb > sizeof stackbuf && !(hbuf = cairn_malloc(hb)))
        return CAIRN_ENOMEM;
    struct iovec iov[2] = {{hbuf, hb}, {dst, (size_t)payload}};
    rc = read_full(fd, iov, payload ? 2 : 1, hb + (size_t)payload);
    if (rc)
        goto out;
    tier_object_header_t h;
    rc = check_header(s, hbuf, hb, payload, hash, parent, tokens, n_tokens, &h);
    if (rc)
        goto out;
    if (!payload_ok(&h, dst, payload)) {
        rc = CAIRN_ECORRUPT;
        goto out;
    }
    *payload_out = payload;
    *file_out = (uint64_t)st.st_size;
out:
    if (hbuf != stackbuf)
        cairn_free(hbuf);
    return rc;
}

/* Validates an object the read-ahead read whole (fs_ahead.c): `len` bytes at buf, from a
 * read sized past the expected object, so a longer file shows as more bytes and a
 * truncated one as fewer. The payload is copied to dst and its checksum taken there (the
 * bytes handed on are the bytes checked). Needs the store's layout (s->n_layers). */
static int read_direct(cairn_cold_store_t *s, const uint8_t *buf, size_t len, const cairn_tier_hash_t *hash,
                       const cairn_tier_hash_t *parent, const int32_t *tokens, uint32_t n_tokens, void *dst,
                       size_t dst_size, uint64_t *payload_out, uint64_t *file_out)
{
    const size_t hb = tier_object_header_size(s->block_tokens, s->n_layers);
    if (len < hb || (uint64_t)(len - hb) != s->payload_bytes)
        return CAIRN_ECORRUPT;
    const uint64_t payload = len - hb;
    if (payload > dst_size)
        return CAIRN_ERANGE;
    tier_object_header_t h;
    int rc = check_header(s, buf, hb, payload, hash, parent, tokens, n_tokens, &h);
    if (rc)
        return rc;
    memcpy(dst, buf + hb, (size_t)payload);
    if (!payload_ok(&h, dst, payload))
        return CAIRN_ECORRUPT;
    *payload_out = payload;
    *file_out = len;
    return CAIRN_OK;
}

uint64_t fs__direct_reads(cairn_cold_store_t *s) { return __atomic_load_n(&s->direct_reads, __ATOMIC_RELAXED); }

static void finish_read(cairn_cold_store_t *s, fs_entry_t *e, const cairn_tier_key_t *key, const char *path,
                        bool opened, int rc, uint64_t payload, uint64_t file_bytes,
                        const cairn_tier_hash_t *parent, uint32_t n_tokens, uint64_t boundary);

/* The read path of cairn_cold_store_read and the interface's get (fs_store_impl.h). */
int fs__read(cairn_cold_store_t *s, const cairn_tier_hash_t *hash, const cairn_tier_hash_t *parent,
             const int32_t *tokens, uint32_t n_tokens, void *dst, size_t dst_size, cairn_tier_dest_fn dest,
             void *user)
{
    fs_taken_t t = fs__take_ahead(s, hash); /* opened (or read) by a prefetch, if any */
    const cairn_tier_key_t key = fs__block_key(hash);
    char *path = fs__object_path(s, &key);
    if (!path) {
        fs__give_back(s, &t);
        return CAIRN_ENOMEM;
    }
    pthread_mutex_lock(&s->mu);
    fs_entry_t *e = fs__find_locked(s, &key);
    if (e)
        e->pins++;
    pthread_mutex_unlock(&s->mu);

    /* Evicted since the prefetch opened it: only the name, not an old inode, counts. A
     * direct read that failed (an I/O error, a filesystem that refuses the alignment) is
     * read again through the page cache, which says what is wrong. */
    if (!e || (t.buf >= 0 && t.res < 0))
        fs__give_back(s, &t);
    int rc;
    bool opened;
    uint64_t payload = 0, file_bytes = 0;
    if (t.buf >= 0) {
        opened = true;
        if (dest) {
            dst_size = (size_t)s->payload_bytes;
            dst = dest(user, dst_size);
        }
        rc = dst || !dest ? read_direct(s, t.bytes, (size_t)t.res, hash, parent, tokens, n_tokens, dst, dst_size,
                                        &payload, &file_bytes)
                          : CAIRN_ECANCELED;
        fs__give_back(s, &t);
        if (rc == CAIRN_OK)
            __atomic_fetch_add(&s->direct_reads, 1, __ATOMIC_RELAXED);
    } else {
        int fd = t.fd >= 0 ? t.fd : open(path, O_RDONLY | O_CLOEXEC);
        opened = fd >= 0;
        if (fd < 0) {
            rc = errno == ENOENT ? CAIRN_ENOENT : CAIRN_EIO;
        } else {
            if (dest) {
                dst_size = (size_t)s->payload_bytes;
                dst = dest(user, dst_size);
            }
            rc = dst || !dest ? read_object(s, fd, hash, parent, tokens, n_tokens, dst, dst_size, &payload,
                                            &file_bytes)
                              : CAIRN_ECANCELED;
            close(fd);
        }
    }

    finish_read(s, e, &key, path, opened, rc, payload, file_bytes, parent, n_tokens, 0);
    cairn_free(path);
    return rc;
}

/*
 * What every read does afterwards, under mu: counters; a hit becomes most recently used
 * (or, written by another process since open, is adopted into the index); an absent
 * object leaves the index; an invalid one is deleted and counted. Then the read's pin on
 * e (may be NULL) is dropped.
 */
static void finish_read(cairn_cold_store_t *s, fs_entry_t *e, const cairn_tier_key_t *key, const char *path,
                        bool opened, int rc, uint64_t payload, uint64_t file_bytes,
                        const cairn_tier_hash_t *parent, uint32_t n_tokens, uint64_t boundary)
{
    pthread_mutex_lock(&s->mu);
    if (opened && rc != CAIRN_ECANCELED)
        s->c.reads++;
    if (rc == CAIRN_OK) {
        s->c.hits++;
        s->c.bytes_restored += payload;
        if (e && !e->removed) {
            lru_unlink(s, e);
            lru_push_tail(s, e);
        } else if (!e && access(path, F_OK) == 0) {
            /* Written by another process since open: adopt it (if it is still there). */
            fs__insert_locked(s, key, parent, file_bytes, n_tokens, boundary);
            fs__evict_locked(s, s->quota, fs__find_locked(s, key));
        }
    } else if (rc == CAIRN_ECANCELED) {
        s->c.restore_declines++;
    } else if (rc == CAIRN_ENOENT) {
        s->c.misses++;
        if (e)
            remove_locked(s, e);
    } else if (rc == CAIRN_ECORRUPT) {
        s->c.corruptions++;
        unlink(path);
        if (e)
            remove_locked(s, e);
        cairn_log(CAIRN_LOG_WARN, "cold tier: removed invalid object %s", path);
    }
    if (e)
        unpin_locked(s, e);
    pthread_mutex_unlock(&s->mu);
}

static int pread_full(int fd, void *buf, size_t len, off_t off)
{
    size_t done = 0;
    while (done < len) {
        ssize_t r = pread(fd, (uint8_t *)buf + done, len - done, off + (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return CAIRN_EIO;
        if (r == 0)
            return CAIRN_ECORRUPT; /* the file is shorter than its header says */
        done += (size_t)r;
    }
    return CAIRN_OK;
}

/* Validates a STATE object from fd against `want` (docs/FORMAT.md 1.8): header first, then
 * the payload into dest's buffer, then its checksum. */
static int read_state_object(cairn_cold_store_t *s, int fd, const cairn_tier_object_t *want,
                             cairn_tier_dest_fn dest, void *user, uint64_t *payload_out, uint64_t *file_out)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return CAIRN_EIO;
    const size_t hb = tier_state_header_size(want->layout_size);
    if ((uint64_t)st.st_size < hb || (uint64_t)st.st_size - hb > TIER_OBJECT_MAX_PAYLOAD)
        return CAIRN_ECORRUPT;
    const uint64_t payload = (uint64_t)st.st_size - hb;
    uint8_t stackbuf[4096];
    uint8_t *hbuf = hb <= sizeof stackbuf ? stackbuf : cairn_malloc(hb);
    if (!hbuf)
        return CAIRN_ENOMEM;
    tier_state_header_t h;
    int rc = pread_full(fd, hbuf, hb, 0);
    if (rc)
        goto out;
    rc = CAIRN_ECORRUPT;
    /* The stored descriptor must be the reader's byte for byte: same size (so the header
     * has the size the reader computed), same bytes. */
    if (tier_state_parse_header(hbuf, hb, &h) || h.header_bytes != hb || !state_header_matches(s, &h, &want->key) ||
        h.boundary != want->boundary || h.layout_size != want->layout_size || h.payload_bytes != payload ||
        (want->layout_size && memcmp(h.layout, want->layout, want->layout_size)))
        goto out;
    void *dst = dest(user, (size_t)payload);
    if (!dst) {
        rc = CAIRN_ECANCELED;
        goto out;
    }
    if ((rc = pread_full(fd, dst, (size_t)payload, (off_t)hb)))
        goto out;
    uint8_t sum[TIER_OBJECT_SUM_BYTES];
    tier_object_checksum(dst, (size_t)payload, sum);
    rc = memcmp(sum, h.payload_sum, TIER_OBJECT_SUM_BYTES) ? CAIRN_ECORRUPT : CAIRN_OK;
    *payload_out = payload;
    *file_out = (uint64_t)st.st_size;
out:
    if (hbuf != stackbuf)
        cairn_free(hbuf);
    return rc;
}

int fs__read_state(cairn_cold_store_t *s, const cairn_tier_object_t *want, cairn_tier_dest_fn dest, void *user)
{
    if (want->layout_size > TIER_STATE_MAX_LAYOUT || (want->layout_size && !want->layout) || !want->boundary)
        return CAIRN_EINVAL;
    const cairn_tier_key_t *key = &want->key;
    char *path = fs__object_path(s, key);
    if (!path)
        return CAIRN_ENOMEM;
    pthread_mutex_lock(&s->mu);
    fs_entry_t *e = fs__find_locked(s, key);
    if (e)
        e->pins++;
    pthread_mutex_unlock(&s->mu);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc;
    uint64_t payload = 0, file_bytes = 0;
    if (fd < 0) {
        rc = errno == ENOENT ? CAIRN_ENOENT : CAIRN_EIO;
    } else {
        rc = read_state_object(s, fd, want, dest, user, &payload, &file_bytes);
        close(fd);
    }
    finish_read(s, e, key, path, fd >= 0, rc, payload, file_bytes, NULL, 0, want->boundary);
    cairn_free(path);
    return rc;
}

int cairn_cold_store_read(cairn_cold_store_t *s, const cairn_tier_hash_t *hash,
                          const cairn_tier_hash_t *parent, const int32_t *tokens, uint32_t n_tokens,
                          void *dst, size_t dst_size)
{
    static const cairn_tier_hash_t zero;
    if (!s || !hash || (!tokens && n_tokens) || (!dst && dst_size))
        return CAIRN_EINVAL;
    return fs__read(s, hash, parent ? parent : &zero, tokens, n_tokens, dst, dst_size, NULL, NULL);
}

void cairn_cold_store_note_decline(cairn_cold_store_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->c.restore_declines++;
    pthread_mutex_unlock(&s->mu);
}

/* ---- maintenance ---- */

void cairn_cold_store_foreach(cairn_cold_store_t *s, int (*fn)(void *user, const cairn_tier_entry_t *e),
                              void *user)
{
    pthread_mutex_lock(&s->mu);
    for (fs_entry_t *e = s->lru_head; e; e = e->next_lru) {
        cairn_tier_entry_t info = {.key = entry_key(e),
                                   .parent = e->parent,
                                   .bytes = e->file_bytes,
                                   .n_tokens = e->n_tokens,
                                   .pinned = e->pins > 0,
                                   .boundary = e->boundary};
        if (fn(user, &info))
            break;
    }
    pthread_mutex_unlock(&s->mu);
}

static int verify_one(cairn_cold_store_t *s, const cairn_tier_key_t *k)
{
    char *path = fs__object_path(s, k);
    if (!path)
        return CAIRN_ENOMEM;
    int rc = CAIRN_ECORRUPT;
    uint8_t *buf = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        rc = errno == ENOENT ? CAIRN_ENOENT : CAIRN_ECORRUPT;
        goto out;
    }
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_size > TIER_OBJECT_MAX_PAYLOAD + 65536)
        goto out;
    buf = cairn_malloc(st.st_size ? (size_t)st.st_size : 1);
    if (!buf) {
        rc = CAIRN_ENOMEM;
        goto out;
    }
    struct iovec iov = {buf, (size_t)st.st_size};
    if (read_full(fd, &iov, 1, (size_t)st.st_size))
        goto out;
    if (k->kind == CAIRN_TIER_STATE) {
        tier_state_header_t sh;
        if (tier_state_validate(buf, (size_t)st.st_size, &s->fp, &sh) == CAIRN_OK && state_header_matches(s, &sh, k))
            rc = CAIRN_OK;
    } else {
        tier_object_header_t hd;
        if (tier_object_validate(buf, (size_t)st.st_size, &s->fp, &k->hash, &hd) == CAIRN_OK &&
            header_matches(s, &hd, &k->hash))
            rc = CAIRN_OK;
    }
out:
    if (fd >= 0)
        close(fd);
    pthread_mutex_lock(&s->mu);
    fs_entry_t *e = fs__find_locked(s, k);
    if (rc == CAIRN_ECORRUPT) {
        cairn_log(CAIRN_LOG_WARN, "cold tier: verify removed invalid object %s", path);
        unlink(path);
        s->c.corruptions++;
    }
    if ((rc == CAIRN_ECORRUPT || rc == CAIRN_ENOENT) && e)
        remove_locked(s, e);
    pthread_mutex_unlock(&s->mu);
    cairn_free(buf);
    cairn_free(path);
    return rc;
}

int cairn_cold_store_verify(cairn_cold_store_t *s, size_t *checked, size_t *bad)
{
    pthread_mutex_lock(&s->mu);
    size_t n = s->count, k = 0;
    cairn_tier_key_t *ks = cairn_malloc((n ? n : 1) * sizeof *ks);
    if (ks)
        for (fs_entry_t *e = s->lru_head; e; e = e->next_lru)
            ks[k++] = entry_key(e);
    pthread_mutex_unlock(&s->mu);
    if (!ks)
        return CAIRN_ENOMEM;
    size_t nbad = 0;
    int rc = CAIRN_OK;
    for (size_t i = 0; i < k; i++) {
        int r = verify_one(s, &ks[i]);
        if (r == CAIRN_ENOMEM) {
            rc = r;
            break;
        }
        if (r == CAIRN_ECORRUPT)
            nbad++;
    }
    cairn_free(ks);
    if (checked)
        *checked = k;
    if (bad)
        *bad = nbad;
    return rc;
}

void cairn_cold_store_prune(cairn_cold_store_t *s, uint64_t quota_bytes, size_t *evicted)
{
    pthread_mutex_lock(&s->mu);
    size_t n = fs__evict_locked(s, quota_bytes, NULL);
    pthread_mutex_unlock(&s->mu);
    if (evicted)
        *evicted = n;
}

void cairn_cold_store_clear(cairn_cold_store_t *s, size_t *removed)
{
    size_t n = 0;
    pthread_mutex_lock(&s->mu);
    for (fs_entry_t *e = s->lru_head, *nx; e; e = nx) {
        nx = e->next_lru;
        if (e->pins)
            continue;
        unlink_object(s, e);
        remove_locked(s, e);
        n++;
    }
    pthread_mutex_unlock(&s->mu);
    /* Drop the emptied shard directories (rmdir fails harmlessly on non-empty ones). */
    size_t plen = strlen(s->dir) + 4;
    char *p = cairn_malloc(plen);
    if (p) {
        static const char hex[] = "0123456789abcdef";
        for (int i = 0; i < 256; i++) {
            snprintf(p, plen, "%s/%c%c", s->dir, hex[i >> 4], hex[i & 15]);
            rmdir(p);
        }
        cairn_free(p);
    }
    if (removed)
        *removed = n;
}

int cairn_cold_list_models(const char *root, int (*fn)(void *user, const cairn_tier_hash_t *fp), void *user)
{
    DIR *d = opendir(root);
    if (!d)
        return CAIRN_ENOENT;
    struct dirent *de;
    while ((de = readdir(d))) {
        cairn_tier_hash_t h;
        if (strlen(de->d_name) == 64 && is_hex_name(de->d_name, 64) &&
            cairn_tier_hash_parse(de->d_name, &h) == CAIRN_OK && fn(user, &h))
            break;
    }
    closedir(d);
    return CAIRN_OK;
}

/* ---- telemetry ---- */

void cairn_cold_store_stats(cairn_cold_store_t *s, cairn_tier_stats_t *out)
{
    memset(out, 0, sizeof *out);
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    *out = s->c;
    out->used_bytes = s->used;
    out->objects = s->count;
    out->state_objects = s->n_state;
    out->state_bytes = s->state_used;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&s->qmu);
    out->queue_len = s->qlen;
    pthread_mutex_unlock(&s->qmu);
    out->enabled = true;
    out->root = s->dir;
    out->quota_bytes = s->quota;
}
