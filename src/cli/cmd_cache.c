/*
 * cmd_cache.c — `cairn cache`: inspect and maintain a cold tier cache directory.
 *
 * Works on every model directory under the root (or one, with --model) by opening a
 * filesystem store with layout "any" and no writer thread, so it needs no model files.
 * Each action maps to one call of the tier's store interface (include/cairn/tier_store.h):
 * stats -> cairn_tier_store_stats, ls -> _foreach, verify -> _verify, prune -> _prune,
 * clear -> _clear; only finding and opening the model directories is the filesystem
 * store's own. Opening a store already removes leftover temporary files and objects whose
 * header is invalid (counted in the corruptions it reports).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cairn/cold_tier.h"
#include "cairn/shared_tier.h"
#include "cli/cli.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: cairn cache ACTION [--dir DIR] [--model FINGERPRINT_HEX] [options]\n"
            "\n"
            "Inspect and maintain the SSD cold tier (one directory per model fingerprint).\n"
            "\n"
            "actions:\n"
            "  stats    objects, bytes and counters of each model directory, and the event\n"
            "           counters of the processes that used it (JSON with --json)\n"
            "  ls       list the objects: block hash, parent hash, tokens, bytes (LRU order)\n"
            "  verify   read every object fully, validate it, delete invalid ones\n"
            "  prune    evict least-recently-used objects down to --quota\n"
            "  clear    delete every object (requires --yes)\n"
            "\n"
            "options:\n"
            "  --dir DIR            cache root (default: CAIRN_CACHE_DIR, else\n"
            "                       $XDG_CACHE_HOME/cairn, else ~/.cache/cairn)\n"
            "  --model HEX          only this model fingerprint (64 hex digits)\n"
            "  --quota SIZE         prune target per model: bytes, or with suffix K, M, G (KiB, MiB, GiB)\n"
            "  --yes                confirm `clear`\n"
            "  --json               stats as one JSON object per model\n"
            "  --shared-tier URL    the shared tier (redis://HOST[:PORT][/DB], default\n"
            "                       CAIRN_SHARED_TIER): stats reports it too; ls, verify, prune\n"
            "                       and clear act on it instead of the local directories\n"
            "  --shared-tier-auth-file FILE  Redis AUTH (default: CAIRN_SHARED_TIER_AUTH)\n"
            "  -v, --verbose        log what is removed\n"
            "  -h, --help           this help\n"
            "\n"
            "Opening a model directory removes leftover temporary files and objects with\n"
            "invalid headers. Exit status: 0 ok, 1 failure or invalid objects found by verify,\n"
            "2 usage error.\n");
}

typedef struct {
    const char *action;
    const char *root;
    bool json, yes, has_quota;
    uint64_t quota;
    int status;
    size_t models;
    const cairn_shared_tier_config_t *shared;
    bool server_shown;
} ctx_t;

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-')
        return -1;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10, end++;
    else if (*end == 'M' || *end == 'm')
        shift = 20, end++;
    else if (*end == 'G' || *end == 'g')
        shift = 30, end++;
    if (shift && (*end == 'i' || *end == 'I'))
        end++;
    if (shift && (*end == 'B' || *end == 'b'))
        end++;
    if (*end || (shift && v > (UINT64_MAX >> shift)))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static int print_entry(void *user, const cairn_tier_entry_t *e)
{
    (void)user;
    char h[65], p[65];
    cairn_tier_hash_hex(&e->key.hash, h);
    cairn_tier_hash_hex(&e->parent, p);
    printf("%s  parent %.16s  %u tokens  %llu bytes\n", h, p, e->n_tokens, (unsigned long long)e->bytes);
    return 0;
}

/* Objects being written right now: the temporary files (".tmp.*") of live writers in the
 * model directory's shards, their count and bytes (what a running server has accepted and
 * not yet committed; its own queue and the blocks it has not copied yet are in its
 * /metrics: cairn_cold_awaiting_bytes). */
static void in_flight(const char *dir, uint64_t *n, uint64_t *bytes)
{
    *n = *bytes = 0;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strlen(de->d_name) != 2)
            continue;
        char shard[4096];
        snprintf(shard, sizeof shard, "%s/%s", dir, de->d_name);
        DIR *sd = opendir(shard);
        if (!sd)
            continue;
        struct dirent *fe;
        while ((fe = readdir(sd))) {
            if (strncmp(fe->d_name, ".tmp.", 5))
                continue;
            char path[8192];
            struct stat st;
            snprintf(path, sizeof path, "%s/%s", shard, fe->d_name);
            if (stat(path, &st) == 0) {
                (*n)++;
                *bytes += (uint64_t)st.st_size;
            }
        }
        closedir(sd);
    }
    closedir(d);
}

/* The event counters of the processes that used the directory (events.json): one line
 * per counter, or one JSON member "events" (with a leading comma). Missing: a line saying
 * so (JSON: null); invalid: the reason. */
static void show_events(const char *dir, bool json)
{
    cairn_cold_events_t *ev = cairn_malloc(sizeof *ev);
    char err[160] = "";
    int rc = ev ? cairn_cold_events_read(dir, ev, err, sizeof err) : CAIRN_ENOMEM;
    if (json) {
        if (rc) {
            printf(",\"events\":null");
        } else {
            printf(",\"events\":{\"processes\":%llu,\"updated\":%llu,\"counters\":{",
                   (unsigned long long)ev->processes, (unsigned long long)ev->updated_s);
            for (uint32_t i = 0; i < ev->n; i++)
                printf("%s\"%s\":%llu", i ? "," : "", ev->names[i], (unsigned long long)ev->values[i]);
            printf("}}");
        }
    } else if (rc == CAIRN_ENOENT) {
        printf("  events       none recorded (no process has closed an engine over this directory)\n");
    } else if (rc) {
        printf("  events       unreadable: %s\n", err[0] ? err : cairn_strerror(rc));
    } else {
        time_t t = (time_t)ev->updated_s;
        struct tm tm;
        char when[32] = "?";
        if (gmtime_r(&t, &tm))
            strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
        printf("  events       of %llu processes (the last closed %s):\n", (unsigned long long)ev->processes,
               when);
        for (uint32_t i = 0; i < ev->n; i++)
            printf("    %-26s %llu\n", ev->names[i], (unsigned long long)ev->values[i]);
    }
    cairn_free(ev);
}

static int run_model(void *user, const cairn_tier_hash_t *fp)
{
    ctx_t *c = user;
    char hex[65];
    cairn_tier_hash_hex(fp, hex);
    cairn_cold_config_t cfg = {.root = c->root, .fingerprint = *fp, .no_writer = true,
                               .has_quota = true, .quota_bytes = UINT64_MAX};
    cairn_cold_store_t *fs = NULL;
    int rc = cairn_cold_store_create(&cfg, &fs);
    if (rc) {
        fprintf(stderr, "cairn cache: cannot open model %s: %s\n", hex, cairn_strerror(rc));
        c->status = 1;
        return 0;
    }
    c->models++;
    cairn_tier_store_t *s = cairn_cold_store_tier(fs);
    cairn_tier_stats_t st;
    const char *a = c->action;
    if (!strcmp(a, "stats")) {
        cairn_tier_store_stats(s, &st);
        if (c->json) {
            char *js = cairn_tier_stats_json(&st, NULL);
            printf("{\"model\":\"%s\",\"stats\":%s", hex, js ? js : "null");
            cairn_free(js);
            show_events(st.root, true);
            printf("}\n");
        } else {
            uint64_t nw = 0, bw = 0;
            in_flight(st.root, &nw, &bw);
            printf("model %s\n  dir          %s\n  objects      %llu\n  bytes        %llu\n"
                   "  blocks       %llu (%llu bytes)\n  sidecars     %llu (%llu bytes)\n"
                   "  removed      %llu invalid or stray files at open\n"
                   "  awaiting     %llu bytes being written by running processes (%llu objects)\n",
                   hex, st.root, (unsigned long long)st.objects, (unsigned long long)st.used_bytes,
                   (unsigned long long)(st.objects - st.state_objects),
                   (unsigned long long)(st.used_bytes - st.state_bytes), (unsigned long long)st.state_objects,
                   (unsigned long long)st.state_bytes, (unsigned long long)st.corruptions,
                   (unsigned long long)bw, (unsigned long long)nw);
            show_events(st.root, false);
        }
    } else if (!strcmp(a, "ls")) {
        printf("model %s\n", hex);
        cairn_tier_store_foreach(s, print_entry, NULL);
    } else if (!strcmp(a, "verify")) {
        size_t checked = 0, bad = 0;
        rc = cairn_tier_store_verify(s, &checked, &bad);
        cairn_tier_store_stats(s, &st);
        printf("model %s: %zu objects read, %zu invalid deleted (%llu invalid at open)\n", hex, checked, bad,
               (unsigned long long)(st.corruptions - bad));
        if (rc || st.corruptions)
            c->status = 1;
    } else if (!strcmp(a, "prune")) {
        size_t ev = 0;
        cairn_tier_store_prune(s, c->quota, &ev);
        cairn_tier_store_stats(s, &st);
        printf("model %s: evicted %zu objects, %llu bytes left\n", hex, ev, (unsigned long long)st.used_bytes);
    } else if (!strcmp(a, "clear")) {
        size_t n = 0;
        cairn_tier_store_clear(s, &n);
        printf("model %s: removed %zu objects\n", hex, n);
    }
    char *dir = cairn_strdup(cairn_cold_store_dir(fs));
    cairn_tier_store_destroy(s);
    if (!strcmp(a, "clear") && dir) {
        /* The event counters go with the objects (events.json, its lock). */
        static const char *const extra[] = {"events.json", ".events.lock"};
        for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
            char p[4200];
            snprintf(p, sizeof p, "%s/%s", dir, extra[i]);
            unlink(p);
        }
        rmdir(dir); /* only succeeds once empty */
    }
    cairn_free(dir);
    return 0;
}

/* One model of the shared tier: the same action through the store interface. */
static int run_shared_model(void *user, const cairn_tier_hash_t *fp)
{
    ctx_t *c = user;
    char hex[65];
    cairn_tier_hash_hex(fp, hex);
    cairn_shared_tier_config_t cfg = *c->shared;
    cfg.count_objects = true;
    const cairn_tier_layout_t layout = {.fingerprint = *fp};
    cairn_tier_store_t *s = NULL;
    char err[512] = "";
    int rc = cairn_shared_tier_open(&cfg, &layout, &s, err, sizeof err);
    if (rc) {
        fprintf(stderr, "cairn cache: %s\n", err[0] ? err : cairn_strerror(rc));
        c->status = 1;
        return 1;
    }
    c->models++;
    const char *a = c->action;
    cairn_shared_tier_stats_t sh;
    (void)cairn_shared_tier_stats(s, &sh);
    if (!strcmp(a, "stats")) {
        cairn_tier_stats_t st;
        cairn_tier_store_stats(s, &st);
        if (c->json) {
            char *js = cairn_tier_stats_json(&st, NULL);
            printf("{\"model\":\"%s\",\"tier\":\"shared\",\"stats\":%s}\n", hex, js ? js : "null");
            cairn_free(js);
        } else {
            printf("shared model %s\n  server       %s\n  objects      %llu\n  bytes        %llu\n", hex, sh.url,
                   (unsigned long long)st.objects, (unsigned long long)st.used_bytes);
        }
    } else if (!strcmp(a, "ls")) {
        printf("shared model %s\n", hex);
        rc = cairn_tier_store_foreach(s, print_entry, NULL);
    } else if (!strcmp(a, "verify")) {
        size_t checked = 0, bad = 0;
        rc = cairn_tier_store_verify(s, &checked, &bad);
        printf("shared model %s: %zu objects read, %zu invalid deleted\n", hex, checked, bad);
        if (bad)
            c->status = 1;
    } else if (!strcmp(a, "prune")) {
        size_t ev = 0;
        rc = cairn_tier_store_prune(s, c->quota, &ev);
        printf("shared model %s: evicted %zu objects\n", hex, ev);
    } else if (!strcmp(a, "clear")) {
        size_t n = 0;
        rc = cairn_tier_store_clear(s, &n);
        printf("shared model %s: removed %zu objects\n", hex, n);
    }
    if (rc) {
        fprintf(stderr, "cairn cache: shared tier %s: %s failed: %s\n", sh.url, a, cairn_strerror(rc));
        c->status = 1;
    }
    cairn_tier_store_destroy(s);
    return 0;
}

static int run_local(ctx_t *c, const char *model, const char *dir);
static int show_server(const cairn_shared_tier_config_t *cfg, bool json);

/* --shared-tier: stats of the local directories, then the shared tier; the other actions
 * on the shared tier alone. */
static int run_shared(ctx_t *c, const char *url, const char *auth_file, const char *model, const char *dir)
{
    char err[512] = "";
    if (cairn_shared_tier_check_url(url, err, sizeof err)) {
        fprintf(stderr, "cairn cache: --shared-tier: %s\n", err);
        return 2;
    }
    char *user = NULL, *pass = NULL;
    if (cairn_shared_tier_read_auth(auth_file, &user, &pass, err, sizeof err)) {
        fprintf(stderr, "cairn cache: %s\n", err);
        return 2;
    }
    cairn_shared_tier_config_t cfg = {.url = url, .username = user, .password = pass};
    c->shared = &cfg;
    int status = 0;
    if (!strcmp(c->action, "stats")) {
        status = run_local(c, model, dir);
        if (show_server(&cfg, c->json))
            status = 1;
    }
    size_t before = c->models;
    if (model) {
        cairn_tier_hash_t fp;
        if (cairn_tier_hash_parse(model, &fp)) {
            fprintf(stderr, "cairn cache: --model: not a 64-digit hex fingerprint: %s\n", model);
            status = 2;
        } else {
            run_shared_model(c, &fp);
        }
    } else if (cairn_shared_tier_list_models(&cfg, run_shared_model, c, err, sizeof err)) {
        fprintf(stderr, "cairn cache: %s\n", err);
        c->status = 1;
    }
    if (c->models == before && !c->status && status != 2)
        printf("no model keys on the shared tier %s\n", url);
    if (pass) {
        memset(pass, 0, strlen(pass));
        cairn_free(pass);
    }
    cairn_free(user);
    return status ? status : c->status;
}

/* The shared tier's server: memory, eviction policy, and whether it suits a cache. */
static int show_server(const cairn_shared_tier_config_t *cfg, bool json)
{
    /* Any fingerprint opens a connection; the server figures are not per model. */
    const cairn_tier_layout_t layout = {{{0}}, CAIRN_DTYPE_F32, 0, 0, NULL};
    cairn_tier_store_t *s = NULL;
    char err[512] = "";
    if (cairn_shared_tier_open(cfg, &layout, &s, err, sizeof err)) {
        fprintf(stderr, "cairn cache: %s\n", err);
        return 1;
    }
    cairn_shared_tier_server_t sv;
    cairn_shared_tier_stats_t sh;
    (void)cairn_shared_tier_stats(s, &sh);
    int rc = cairn_shared_tier_server_info(s, &sv);
    if (rc) {
        fprintf(stderr, "cairn cache: shared tier %s unreachable\n", sh.url);
    } else if (json) {
        printf("{\"shared_tier\":\"%s\",\"redis_version\":\"%s\",\"used_memory\":%llu,\"maxmemory\":%llu,"
               "\"maxmemory_policy\":\"%s\",\"evicted_keys\":%llu,\"expired_keys\":%llu}\n",
               sh.url, sv.version, (unsigned long long)sv.used_memory, (unsigned long long)sv.maxmemory, sv.policy,
               (unsigned long long)sv.evicted_keys, (unsigned long long)sv.expired_keys);
    } else {
        printf("shared tier %s (redis %s)\n  used memory  %llu bytes\n  maxmemory    %llu bytes%s\n"
               "  policy       %s\n  evicted keys %llu, expired keys %llu\n",
               sh.url, sv.version, (unsigned long long)sv.used_memory, (unsigned long long)sv.maxmemory,
               sv.maxmemory ? "" : " (none: the tier grows until the TTL expires keys)", sv.policy,
               (unsigned long long)sv.evicted_keys, (unsigned long long)sv.expired_keys);
        if (strstr(sv.policy, "noeviction"))
            printf("  warning: with maxmemory-policy noeviction a full server refuses writes (OOM); "
                   "use allkeys-lru for a cache\n");
    }
    cairn_tier_store_destroy(s);
    return rc ? 1 : 0;
}

static int cmd_cache(int argc, char **argv)
{
    ctx_t c = {0};
    const char *model = NULL, *dir = NULL, *shared_url = getenv("CAIRN_SHARED_TIER"), *shared_auth = NULL;
    int verbose = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--dir") && i + 1 < argc) {
            dir = argv[++i];
        } else if (!strcmp(a, "--model") && i + 1 < argc) {
            model = argv[++i];
        } else if (!strcmp(a, "--quota") && i + 1 < argc) {
            if (parse_size(argv[++i], &c.quota)) {
                fprintf(stderr, "cairn cache: --quota: not a size: %s\n", argv[i]);
                return 2;
            }
            c.has_quota = true;
        } else if (!strcmp(a, "--shared-tier") && i + 1 < argc) {
            shared_url = argv[++i];
        } else if (!strcmp(a, "--shared-tier-auth-file") && i + 1 < argc) {
            shared_auth = argv[++i];
        } else if (!strcmp(a, "--yes")) {
            c.yes = true;
        } else if (!strcmp(a, "--json")) {
            c.json = true;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            verbose++;
        } else if (a[0] != '-' && !c.action) {
            c.action = a;
        } else {
            fprintf(stderr, "cairn cache: unexpected argument '%s' (see --help)\n", a);
            return 2;
        }
    }
    static const char *actions[] = {"stats", "ls", "verify", "prune", "clear"};
    bool known = false;
    for (size_t i = 0; c.action && i < CAIRN_ARRAY_LEN(actions); i++)
        known |= !strcmp(c.action, actions[i]);
    if (!known) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(c.action, "prune") && !c.has_quota) {
        fprintf(stderr, "cairn cache: prune needs --quota SIZE\n");
        return 2;
    }
    if (!strcmp(c.action, "clear") && !c.yes) {
        fprintf(stderr, "cairn cache: clear deletes every cached block; add --yes to confirm\n");
        return 2;
    }
    cairn_cli_install_logger(verbose);
    if (shared_url && shared_url[0])
        return run_shared(&c, shared_url, shared_auth, model, dir);
    return run_local(&c, model, dir);
}

static int run_local(ctx_t *cp, const char *model, const char *dir)
{
    ctx_t c = *cp;
    char *root = cairn_cold_default_root(dir);
    if (!root) {
        fprintf(stderr, "cairn cache: no cache directory (set --dir, CAIRN_CACHE_DIR or HOME)\n");
        return 1;
    }
    c.root = root;
    if (model) {
        cairn_tier_hash_t fp;
        if (cairn_tier_hash_parse(model, &fp)) {
            fprintf(stderr, "cairn cache: --model: not a 64-digit hex fingerprint: %s\n", model);
            cairn_free(root);
            return 2;
        }
        run_model(&c, &fp);
    } else if (cairn_cold_list_models(root, run_model, &c)) {
        fprintf(stderr, "cairn cache: no cache directory at %s\n", root);
        cairn_free(root);
        return 1;
    }
    if (!c.models && !c.status)
        printf("no model directories under %s\n", root);
    cairn_free(root);
    cp->status = c.status;
    return c.status;
}

CAIRN_CLI_COMMAND(cache, "cache", "inspect, verify, prune or clear the SSD cold tier cache", cmd_cache)
