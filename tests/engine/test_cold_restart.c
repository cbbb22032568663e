/*
 * test_cold_restart.c — the engine's cold tier end to end, across real processes.
 *
 * Every scenario runs the engine in fork()ed children (the parent never creates an
 * engine, so it has no threads when it forks) or execs the built `cairn generate`, and
 * compares what a child computed with a reference computed with the cold tier off:
 *  - restart parity, for every family of cairn_cold_eligible_families() on its fixture
 *    and two prompts: (1) persist, (2) a fresh process restores, (3) persistence off give
 *    bit-identical last-prompt logits and greedy tokens, with blocks restored and no
 *    corruption in (2);
 *  - corruption of one stored object (bit flip, truncation, another block's object under
 *    its name): the restore stops there, the object is deleted and counted, output equal;
 *  - kill -9 of persisting `cairn generate` processes at random moments (its background
 *    capture and the exit's persistence), 100 times: each restart serves only valid K/V
 *    (logits equal), restores every block the killed process acknowledged (its final
 *    names, from block 0) and leaves no temporary file behind (argument "kill": run
 *    alone, as ctest's test_cold_kill);
 *  - ENOSPC / EIO injected through cairn_io_set_hook during capture: counted, output equal;
 *  - two processes sharing one cache directory at the same time;
 *  - a hybrid through the shared tier (argument "shared", ctest test_cold_shared): lfm2
 *    and qwen3_5 persist into a local directory and a private Redis; a fresh process with
 *    no local directory, only Redis behind its pool, restores the prompt with its STATE
 *    sidecar, bit-identical to the tier-off run.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cairn/cold_tier.h"
#include "cairn/engine.h"
#include "cairn/kv_cache.h"
#include "engine/engine_fixtures.h"
#include "tier/redis/redis_server.h"

#define MAX_VOCAB 4096
#define N_GEN 4
#define BS 16

/* What a child reports back through shared memory. */
typedef struct {
    int status;               /* 0: ran to the end; else the failing step's code */
    int hot, restored, n_past;
    uint64_t restored_blocks, corruptions, write_errors, objects;
    uint64_t sidecars_installed, sidecar_corruptions, sidecars_captured, state_objects;
    uint64_t shared_hits, shared_restored_blocks, shared_corruptions; /* the shared tier's */
    int miss;                 /* the restore's cairn_tier_miss_t */
    int probe_exists;         /* 1 if `probe` existed right after begin */
    int32_t ids[N_GEN];
    char root[1024];          /* the store's model directory */
    float logits[MAX_VOCAB];  /* last prompt position */
} result_t;

typedef struct {
    const char *model;
    const char *root;         /* NULL: cold tier off */
    const char *salt;
    const int32_t *prompt;
    int n;
    const char *probe;        /* a path whose existence is sampled after begin, or NULL */
    int io_fail;              /* 0, or a negative errno injected into cold-tier writes */
    bool no_capture;          /* restore only (CAIRN_COLD_CAPTURE_OFF): the run writes nothing */
} job_t;

#define N_RESULTS 16
static result_t *g_res;       /* MAP_SHARED array of N_RESULTS results */
static const char *g_shared_url; /* a shared tier behind every child's local one, or NULL */
static int g_fail_errno;

static int io_hook(const char *op, const char *path, void *user)
{
    (void)user;
    if (g_fail_errno && path && (strstr(path, ".tmp.") || strstr(path, ".kv")) &&
        (!strcmp(op, "write") || !strcmp(op, "fsync")))
        return g_fail_errno;
    return 0;
}

/* The child's body: one prompt, N_GEN greedy tokens, release (capture), destroy (drain). */
static int child_body(const job_t *j, result_t *r)
{
    memset(r, 0, sizeof(*r));
    r->status = -100;
    if (j->io_fail) {
        g_fail_errno = j->io_fail;
        cairn_io_set_hook(io_hook, NULL);
    }
    cairn_checkpoint_t *ck = fixture_open(j->model);
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.n_threads = 2;
    o.pool_mib = 64;
    cairn_shared_tier_config_t shared = {.url = g_shared_url};
    if (g_shared_url)
        o.shared_tier = &shared;
    if (j->root)
        o.cold_root = j->root;
    else if (!g_shared_url)
        o.cold = -1;
    o.cold_capture_blocks = 1 << 16;
    o.cold_capture_ms = 20000;
    o.cold_drain_ms = 20000;
    if (j->no_capture)
        o.cold_policy = CAIRN_COLD_CAPTURE_OFF;
    cairn_engine_t *e = NULL;
    char err[256];
    int rc = cairn_engine_create(ck, &o, &e, err, sizeof(err));
    if (rc)
        return rc;
    if (cairn_engine_config(e)->vocab > MAX_VOCAB)
        return -101;
    cairn_seq_t *s = NULL;
    rc = cairn_seq_begin(e, j->salt, j->prompt, j->n, &s, &r->hot);
    if (rc)
        return rc;
    r->probe_exists = j->probe && access(j->probe, F_OK) == 0;
    r->restored = cairn_seq_restored_tokens(s);
    r->n_past = cairn_seq_n_past(s);
    const int vocab = cairn_engine_config(e)->vocab;
    for (int g = 0; g < N_GEN; g++) {
        cairn_batch_item_t it = {s, 0, CAIRN_LOGITS_LAST};
        const float *lg = NULL;
        int rows = 0;
        if ((rc = cairn_engine_step(e, &it, 1, &lg, &rows)))
            return rc;
        if (g == 0)
            memcpy(r->logits, lg, (size_t)vocab * sizeof(float));
        int best = 0;
        for (int v = 1; v < vocab; v++)
            if (lg[v] > lg[best])
                best = v;
        r->ids[g] = best;
        if ((rc = cairn_seq_feed(s, &r->ids[g], 1)))
            return rc;
    }
    cairn_seq_release(s);
    cairn_engine_cold_flush(e);
    cairn_engine_cold_counters_t c;
    cairn_engine_cold_counters(e, &c);
    r->restored_blocks = c.restored_blocks;
    r->corruptions = c.store.corruptions;
    r->write_errors = c.store.write_errors;
    r->objects = c.store.objects;
    r->sidecars_installed = c.sidecars_installed;
    r->sidecar_corruptions = c.sidecar_corruptions;
    r->sidecars_captured = c.sidecars_captured;
    r->state_objects = c.store.state_objects;
    r->shared_hits = c.shared.tier.hits;
    r->shared_restored_blocks = c.shared_restored_blocks;
    r->shared_corruptions = c.shared.tier.corruptions;
    r->miss = c.last_miss;
    snprintf(r->root, sizeof(r->root), "%s", c.store.root ? c.store.root : "");
    cairn_engine_destroy(e);
    cairn_checkpoint_close(ck);
    return 0;
}

static pid_t spawn(const job_t *j, result_t *r)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int rc = child_body(j, r);
        r->status = rc;
        _exit(rc == 0 ? 0 : 1);
    }
    return pid;
}

static void wait_ok(pid_t pid, const result_t *r)
{
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || r->status != 0)
        fprintf(stderr, "child failed: wait status %d, step status %d\n", st, r->status);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(r->status, 0);
}

static void run_job(const job_t *j, result_t *r) { wait_ok(spawn(j, r), r); }

static void assert_same_output(const result_t *a, const result_t *b)
{
    assert_memory_equal(a->logits, b->logits, sizeof(a->logits));
    assert_memory_equal(a->ids, b->ids, sizeof(a->ids));
}

/* The tier-off run of a fixture prompt, computed once per process (each scenario compares
 * against it; it does not depend on what ran before): a copy owned by the cache. */
static const result_t *reference(const char *model, const char *prompt_name)
{
    static struct {
        const char *model, *prompt;
        result_t r;
    } cache[8];
    static int n_cache;
    for (int i = 0; i < n_cache; i++)
        if (!strcmp(cache[i].model, model) && !strcmp(cache[i].prompt, prompt_name))
            return &cache[i].r;
    assert_true(n_cache < (int)(sizeof(cache) / sizeof(cache[0])));
    int n = 0;
    int32_t *prompt = fixture_prompt(model, prompt_name, &n);
    job_t off = {model, NULL, NULL, prompt, n, NULL, 0, false};
    const char *shared = g_shared_url; /* the tier-off run has no shared tier either */
    g_shared_url = NULL;
    run_job(&off, &g_res[N_RESULTS - 1]);
    g_shared_url = shared;
    free(prompt);
    assert_int_equal(g_res[N_RESULTS - 1].restored, 0);
    cache[n_cache].model = model;
    cache[n_cache].prompt = prompt_name;
    cache[n_cache].r = g_res[N_RESULTS - 1];
    return &cache[n_cache++].r;
}

/* A fresh, empty cache root under /tmp. */
static void make_root(char *buf, size_t len, const char *tag)
{
    snprintf(buf, len, "/tmp/cairn-cold-%s-%d-XXXXXX", tag, (int)getpid());
    assert_non_null(mkdtemp(buf));
}

static void rm_rf(const char *path)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

static int count_files_as(const char *dir, const char *prefix, const char *suffix);

/* Counts files under dir whose name starts with prefix (".tmp.") or ends with ".kv". */
static int count_files(const char *dir, const char *prefix) { return count_files_as(dir, prefix, ".kv"); }

/* Counts files under dir whose name starts with prefix, or (prefix NULL) ends with suffix. */
static int count_files_as(const char *dir, const char *prefix, const char *suffix)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[2048];
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        struct stat sb;
        if (lstat(p, &sb) != 0)
            continue;
        size_t nl = strlen(de->d_name), sl = strlen(suffix);
        if (S_ISDIR(sb.st_mode))
            n += count_files_as(p, prefix, suffix);
        else if (prefix ? !strncmp(de->d_name, prefix, strlen(prefix))
                        : nl > sl && !strcmp(de->d_name + nl - sl, suffix))
            n++;
    }
    closedir(d);
    return n;
}

/* The object path of block k of a prompt in the default domain (or salt's). */
static void object_path(const char *store_dir, const char *salt, const int32_t *prompt, int k,
                        char *out, size_t len)
{
    cairn_kv_layer_spec_t spec = {CAIRN_KV_LAYER_FULL, 1, 8, 0, 0};
    cairn_kv_config_t kc = {0};
    kc.n_layers = 1;
    kc.layers = &spec;
    kc.dtype = CAIRN_DTYPE_BF16;
    kc.block_size = BS;
    kc.memory_mib = 1;
    cairn_kv_cache_t *c = NULL;
    assert_int_equal(cairn_kv_cache_create(&kc, &c), 0);
    cairn_kv_hash_t dom, h[64];
    assert_true(k < 64);
    assert_int_equal(cairn_kv_domain_from_salt(c, salt, salt ? strlen(salt) : 0, &dom), 0);
    assert_int_equal(cairn_kv_cache_hash_blocks(c, &dom, NULL, 0, prompt, (size_t)(k + 1) * BS, h), 0);
    cairn_kv_cache_destroy(c);
    char hex[65];
    cairn_tier_hash_hex((const cairn_tier_hash_t *)&h[k], hex);
    snprintf(out, len, "%s/%.2s/%s.kv", store_dir, hex, hex);
}

/* The path of the STATE sidecar of cache group 0 at the boundary of k + 1 blocks. */
static void sidecar_path(const char *store_dir, const char *salt, const int32_t *prompt, int k, char *out,
                         size_t len)
{
    char kv[1400];
    object_path(store_dir, salt, prompt, k, kv, sizeof(kv));
    size_t n = strlen(kv);
    assert_true(n > 3 && n - 3 + 6 < len);
    snprintf(out, len, "%.*s.0.st", (int)(n - 3), kv);
}

/* ---- The family list is the list the parity test covers ---------------------------- */

static void test_family_list(void **state)
{
    (void)state;
    const char *const *fam = cairn_cold_eligible_families();
    int n = 0;
    for (; fam[n]; n++)
        assert_true(cairn_cold_family_eligible(fam[n]));
    assert_true(n >= 1);
    /* Every family restores since the hybrids' sidecars (issue 11). */
    assert_true(cairn_cold_family_eligible("gemma3"));
    assert_true(cairn_cold_family_eligible("lfm2"));
    assert_true(cairn_cold_family_eligible("qwen3_5"));
    assert_false(cairn_cold_family_eligible("mistral")); /* no parity fixture */
    assert_false(cairn_cold_family_eligible(NULL));
}

/* ---- Restart parity ----------------------------------------------------------------- */

/* Whether the fixture's model keeps state outside its full layers' blocks. */
static bool is_hybrid(const char *model)
{
    return !strcmp(model, "lfm2") || !strcmp(model, "gemma3") || !strcmp(model, "qwen3_5");
}

/* The model directory's event counters after a persisting run and a restoring one
 * (events.json, each engine's at its close), and `cairn cache stats` printing them: two
 * processes, the first one's restore found an empty chain, the second one restored every
 * full block (a hybrid: with a sidecar read and installed). */
static void assert_events(const char *store_dir, bool hybrid, int blocks)
{
    static cairn_cold_events_t ev;
    char err[160] = "";
    if (cairn_cold_events_read(store_dir, &ev, err, sizeof err) != CAIRN_OK)
        fail_msg("events.json under %s: %s", store_dir, err);
    assert_int_equal(ev.processes, 2);
    assert_int_equal(cairn_cold_events_get(&ev, "restored_blocks"), (uint64_t)blocks);
    assert_true(cairn_cold_events_get(&ev, "restore_lookups") >= 2);
    assert_true(cairn_cold_events_get(&ev, "restore_miss_chain_empty") >= 1);
    assert_true(cairn_cold_events_get(&ev, "capture_walks") >= 2);
    assert_true(cairn_cold_events_get(&ev, "capture_reached") >= (uint64_t)(2 * blocks));
    assert_int_equal(cairn_cold_events_get(&ev, "corruptions"), 0);
    if (hybrid) {
        assert_true(cairn_cold_events_get(&ev, "sidecars_installed") >= 1);
        assert_true(cairn_cold_events_get(&ev, "sidecar_reads") >= 1);
        assert_true(cairn_cold_events_get(&ev, "sidecars_reached") >= 1);
    } else {
        assert_int_equal(cairn_cold_events_get(&ev, "sidecars_reached"), 0);
    }
    /* The store directory is <root>/<fingerprint>: `cairn cache stats --dir <root>`. */
    char root[1100], cmd[1400], out[8192];
    snprintf(root, sizeof root, "%s", store_dir);
    char *slash = strrchr(root, '/');
    assert_non_null(slash);
    *slash = '\0';
    snprintf(cmd, sizeof cmd, "%s/src/cairn cache stats --dir '%s'", CAIRN_BINARY_DIR, root);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t len = fread(out, 1, sizeof out - 1, p);
    out[len] = '\0';
    assert_int_equal(pclose(p), 0);
    assert_non_null(strstr(out, "events       of 2 processes"));
    char line[80];
    snprintf(line, sizeof line, "    %-26s %d\n", "restored_blocks", blocks);
    assert_non_null(strstr(out, line));
}

static void parity_case(const char *model, const char *prompt_name)
{
    int n = 0;
    int32_t *prompt = fixture_prompt(model, prompt_name, &n);
    char root[512];
    make_root(root, sizeof(root), "parity");
    job_t persist = {model, root, NULL, prompt, n, NULL, 0, false};
    result_t *r1 = &g_res[0], *r2 = &g_res[1];
    run_job(&persist, r1);              /* (1) persist */
    assert_int_equal(r1->restored, 0);
    assert_true(r1->objects >= (uint64_t)((n - 1) / BS));
    run_job(&persist, r2);              /* (2) a fresh process restores */
    const result_t *r3 = reference(model, prompt_name); /* (3) persistence off */
    assert_int_equal(r2->restored, (n - 1) / BS * BS);
    assert_true(r2->restored_blocks > 0);
    assert_int_equal(r2->corruptions, 0);
    assert_int_equal(r2->sidecar_corruptions, 0);
    assert_int_equal(r2->n_past, (n - 1) / BS * BS);
    if (is_hybrid(model)) {
        assert_true(r1->sidecars_captured >= 1);
        assert_true(r2->sidecars_installed >= 1);
    } else {
        assert_int_equal(r1->state_objects, 0);
    }
    assert_int_equal(r3->restored, 0);
    assert_same_output(r1, r3);
    assert_same_output(r2, r3);
    assert_events(r1->root, is_hybrid(model), (n - 1) / BS);
    fprintf(stderr, "  %s/%s: %d of %d prompt tokens restored (%llu sidecars), logits and %d tokens equal\n",
            model, prompt_name, r2->restored, n, (unsigned long long)r2->sidecars_installed, N_GEN);
    rm_rf(root);
    free(prompt);
}

/* The divergent-prompt variant: the restore prompt shares 512 tokens with the captured
 * one, then differs. A dense model would restore the shared 32 blocks (test_shared_
 * directory covers that); a hybrid lands on the deepest grid rung the shared body holds
 * (256 tokens: a state exists only at captured boundaries), strictly below the captured
 * prompt's deepest boundary. */
static void divergent_case(const char *model)
{
    int n1 = 0, n2 = 0;
    int32_t *p1 = fixture_prompt(model, "long_720", &n1);
    int32_t *p2 = fixture_prompt(model, "shared_prefix_672", &n2);
    char root[512];
    make_root(root, sizeof(root), "diverge");
    job_t persist = {model, root, NULL, p1, n1, NULL, 0, false};
    job_t restore = {model, root, NULL, p2, n2, NULL, 0, false};
    result_t *r1 = &g_res[0], *r2 = &g_res[1];
    run_job(&persist, r1);
    run_job(&restore, r2);
    const result_t *r3 = reference(model, "shared_prefix_672");
    assert_same_output(r2, r3);
    assert_int_equal(r2->corruptions, 0);
    if (is_hybrid(model)) {
        assert_int_equal(r2->restored, 256);
        assert_true(r2->restored < (n1 - 1) / BS * BS);
        assert_true(r2->sidecars_installed >= 1);
    } else {
        assert_int_equal(r2->restored, 512);
    }
    fprintf(stderr, "  %s divergent: %d tokens restored of a 512-token shared body\n", model, r2->restored);
    rm_rf(root);
    free(p1);
    free(p2);
}

/* The fixture of each eligible family. */
static const char *family_fixture(const char *family)
{
    static const char *const map[][2] = {
        {"llama", "llama"}, {"qwen3", "qwen3"}, {"lfm2", "lfm2"}, {"gemma3_text", "gemma3"},
        {"gemma3", "gemma3"}, {"qwen3_5_text", "qwen3_5"}, {"qwen3_5", "qwen3_5"},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (!strcmp(family, map[i][0]))
            return map[i][1];
    return NULL;
}

/* Each fixture once, in the order of the eligible list. */
static bool seen_fixture(const char *const *fam, int i, const char *model)
{
    for (int j = 0; j < i; j++)
        if (family_fixture(fam[j]) && !strcmp(family_fixture(fam[j]), model))
            return true;
    return false;
}

/* Every eligible family's fixture once: the dense ones (hybrid false) or the hybrids. */
static void parity_families(bool hybrid)
{
    const char *const *fam = cairn_cold_eligible_families();
    for (int i = 0; fam[i]; i++) {
        const char *model = family_fixture(fam[i]);
        if (!model)
            fail_msg("eligible family %s has no restart-parity fixture", fam[i]);
        if (seen_fixture(fam, i, model) || is_hybrid(model) != hybrid)
            continue;
        parity_case(model, "long_720");
        if (hybrid) /* a hybrid's second prompt is the divergent one, in the same store */
            divergent_case(model);
        else
            parity_case(model, "shared_prefix_672");
    }
}

static void test_restart_parity(void **state)
{
    (void)state;
    parity_families(false);
}

static void test_restart_parity_hybrid(void **state)
{
    (void)state;
    parity_families(true);
}

/* ---- Corruption at the engine level -------------------------------------------------- */

static void corrupt_case(int mode)
{
    const char *model = "qwen3";
    int n = 0;
    int32_t *prompt = fixture_prompt(model, "long_720", &n);
    char root[512], path[1400], other[1400];
    make_root(root, sizeof(root), "corrupt");
    job_t persist = {model, root, NULL, prompt, n, NULL, 0, false};
    const result_t *ref = reference(model, "long_720");
    result_t *r = &g_res[1];
    run_job(&persist, r);
    const int k = 10;
    object_path(r->root, NULL, prompt, k, path, sizeof(path));
    object_path(r->root, NULL, prompt, k + 1, other, sizeof(other));
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    if (mode == 0) { /* flip one bit of the payload */
        int fd = open(path, O_RDWR);
        assert_true(fd >= 0);
        uint8_t b;
        off_t at = sb.st_size - 37;
        assert_int_equal(pread(fd, &b, 1, at), 1);
        b ^= 0x10;
        assert_int_equal(pwrite(fd, &b, 1, at), 1);
        close(fd);
    } else if (mode == 1) { /* truncate */
        assert_int_equal(truncate(path, sb.st_size / 2), 0);
    } else { /* another block's object under this name */
        char cmd[3000];
        snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", other, path);
        assert_int_equal(system(cmd), 0);
    }
    job_t restore = {model, root, NULL, prompt, n, path, 0, false};
    run_job(&restore, r);
    assert_int_equal(r->restored, k * BS);   /* stopped at the bad block */
    assert_int_equal(r->corruptions, 1);
    assert_int_equal(r->probe_exists, 0);    /* deleted before anything used it */
    assert_same_output(r, ref);
    /* The recomputed block was captured again: the next restart restores everything. */
    run_job(&restore, r);
    assert_int_equal(r->restored, (n - 1) / BS * BS);
    assert_int_equal(r->corruptions, 0);
    assert_same_output(r, ref);
    rm_rf(root);
    free(prompt);
}

static void test_corruption(void **state)
{
    (void)state;
    for (int mode = 0; mode < 3; mode++)
        corrupt_case(mode);
}

/* ---- Sidecar corruption and mismatch -------------------------------------------------- */

/*
 * One damaged or missing object of a hybrid's capture of long_720 (sidecars at the grid
 * rungs 16, 64, 256 tokens and at 704): each mode is a counted miss that reconciles the
 * restore down to the rung 256, never wrong output. Modes: 0 a flipped payload byte of
 * the sidecar at 704, 1 that sidecar truncated, 2 the sidecar at 256 under its name
 * (another boundary), 3 another model's sidecar under its name (another fingerprint and
 * geometry), 4 a block below 704 deleted (a sidecar without its blocks), 5 the sidecar
 * at 704 deleted (blocks without their sidecar).
 */
typedef struct {
    const char *model;
    int32_t *prompt;
    int n;
    char pristine[512];       /* a cache root the capture run persisted into */
    char store_sub[1200];     /* its model directory, relative to the root */
    result_t ref;             /* the tier-off run */
} sidecar_fixture_t;

static void sidecar_fixture(const char *model, sidecar_fixture_t *f)
{
    memset(f, 0, sizeof(*f));
    f->model = model;
    f->prompt = fixture_prompt(model, "long_720", &f->n);
    make_root(f->pristine, sizeof(f->pristine), "sidecar");
    job_t persist = {model, f->pristine, NULL, f->prompt, f->n, NULL, 0, false};
    f->ref = *reference(model, "long_720");
    run_job(&persist, &g_res[1]);
    assert_true(strncmp(g_res[1].root, f->pristine, strlen(f->pristine)) == 0);
    snprintf(f->store_sub, sizeof(f->store_sub), "%s", g_res[1].root + strlen(f->pristine));
}

static void sidecar_fixture_free(sidecar_fixture_t *f)
{
    rm_rf(f->pristine);
    free(f->prompt);
}

static void sidecar_case(const sidecar_fixture_t *f, int mode, const char *foreign_st)
{
    const char *model = f->model;
    const int32_t *prompt = f->prompt;
    const int n = f->n;
    char root[512], path[1400], other[1400], store[1800], cmd[3000];
    make_root(root, sizeof(root), "sidecar");
    snprintf(cmd, sizeof(cmd), "cp -a '%s'/. '%s'/", f->pristine, root);
    assert_int_equal(system(cmd), 0);
    snprintf(store, sizeof(store), "%s%s", root, f->store_sub);
    const result_t *ref = &f->ref;
    result_t *r = &g_res[1];
    sidecar_path(store, NULL, prompt, 704 / BS - 1, path, sizeof(path));
    sidecar_path(store, NULL, prompt, 256 / BS - 1, other, sizeof(other));
    struct stat sb;
    assert_int_equal(stat(other, &sb), 0);  /* the rung below was captured too */
    assert_int_equal(stat(path, &sb), 0);
    const char *probe = path;
    if (mode == 0) {
        int fd = open(path, O_RDWR);
        assert_true(fd >= 0);
        uint8_t b;
        off_t at = sb.st_size - 5;
        assert_int_equal(pread(fd, &b, 1, at), 1);
        b ^= 0x01;
        assert_int_equal(pwrite(fd, &b, 1, at), 1);
        close(fd);
    } else if (mode == 1) {
        assert_int_equal(truncate(path, sb.st_size - 7), 0);
    } else if (mode == 2 || mode == 3) {
        snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", mode == 2 ? other : foreign_st, path);
        assert_int_equal(system(cmd), 0);
    } else if (mode == 4) {
        object_path(store, NULL, prompt, 30, path, sizeof(path));
        assert_int_equal(unlink(path), 0);
        probe = NULL;
    } else {
        assert_int_equal(unlink(path), 0);
        probe = NULL;
    }
    job_t restore = {model, root, NULL, prompt, n, probe, 0, false};
    run_job(&restore, r);
    assert_same_output(r, ref);
    assert_int_equal(r->restored, 256);          /* reconciled down to the rung below */
    assert_true(r->sidecars_installed >= 1);
    if (mode <= 3) {
        assert_true(r->corruptions >= 1);        /* counted, removed before any use */
        assert_int_equal(r->probe_exists, 0);
    } else {
        assert_int_equal(r->corruptions, 0);
    }
    /* The recomputed suffix was captured again: the next restart restores everything. */
    run_job(&restore, r);
    assert_same_output(r, ref);
    assert_int_equal(r->restored, (n - 1) / BS * BS);
    assert_int_equal(r->corruptions, 0);
    rm_rf(root);
}

static void test_sidecar_corruption(void **state)
{
    (void)state;
    /* Another model's sidecar: qwen3_5's at its 704 boundary. */
    int n = 0;
    int32_t *prompt = fixture_prompt("qwen3_5", "long_720", &n);
    char root[512], foreign[1400];
    make_root(root, sizeof(root), "foreign");
    job_t persist = {"qwen3_5", root, NULL, prompt, n, NULL, 0, false};
    run_job(&persist, &g_res[2]);
    char kept[600];
    snprintf(kept, sizeof(kept), "%s.st", root);
    sidecar_path(g_res[2].root, NULL, prompt, 704 / BS - 1, foreign, sizeof(foreign));
    char cmd[3000];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", foreign, kept);
    assert_int_equal(system(cmd), 0);
    rm_rf(root);
    free(prompt);
    static sidecar_fixture_t f;
    sidecar_fixture("lfm2", &f);
    for (int mode = 0; mode < 6; mode++)
        sidecar_case(&f, mode, kept);
    sidecar_fixture_free(&f);
    sidecar_fixture("gemma3", &f); /* a sliding window's sidecar */
    sidecar_case(&f, 0, kept);
    sidecar_case(&f, 5, kept);
    sidecar_fixture_free(&f);
    unlink(kept);
}

/* ---- I/O errors during capture ------------------------------------------------------- */

static void test_io_errors(void **state)
{
    (void)state;
    const char *model = "llama";
    int n = 0;
    int32_t *prompt = fixture_prompt(model, "long_720", &n);
    const result_t *ref = reference(model, "long_720");
    result_t *r = &g_res[1];
    const int errs[] = {-ENOSPC, -EIO};
    for (int i = 0; i < 2; i++) {
        char root[512];
        make_root(root, sizeof(root), "ioerr");
        job_t bad = {model, root, NULL, prompt, n, NULL, errs[i], false};
        run_job(&bad, r);
        assert_true(r->write_errors > 0);
        assert_same_output(r, ref);
        assert_int_equal(count_files(root, NULL), 0);     /* nothing half-written survives */
        assert_int_equal(count_files(root, ".tmp."), 0);
        /* The next process finds nothing to restore and still computes the same. */
        job_t good = {model, root, NULL, prompt, n, NULL, 0, false};
        run_job(&good, r);
        assert_int_equal(r->restored, 0);
        assert_int_equal(r->write_errors, 0);
        assert_same_output(r, ref);
        rm_rf(root);
    }
    free(prompt);
}

/* ---- Two processes on one directory -------------------------------------------------- */

static void test_shared_directory(void **state)
{
    (void)state;
    const char *model = "qwen3";
    int n1 = 0, n2 = 0;
    int32_t *p1 = fixture_prompt(model, "long_720", &n1);
    int32_t *p2 = fixture_prompt(model, "shared_prefix_672", &n2);
    const result_t *ref1 = reference(model, "long_720"), *ref2 = reference(model, "shared_prefix_672");
    char root[512];
    make_root(root, sizeof(root), "shared");
    job_t j1 = {model, root, NULL, p1, n1, NULL, 0, false}, j2 = {model, root, NULL, p2, n2, NULL, 0, false};
    for (int round = 0; round < 3; round++) {
        /* Same prompt in both, then different prompts sharing a prefix. */
        const job_t *a = &j1, *b = round == 0 ? &j1 : &j2;
        pid_t pa = spawn(a, &g_res[2]);
        pid_t pb = spawn(b, &g_res[3]);
        wait_ok(pa, &g_res[2]);
        wait_ok(pb, &g_res[3]);
        assert_same_output(&g_res[2], ref1);
        assert_same_output(&g_res[3], b == &j1 ? ref1 : ref2);
        assert_int_equal(g_res[2].corruptions, 0);
        assert_int_equal(g_res[3].corruptions, 0);
    }
    /* Afterwards both prompts restore fully from what the two wrote. */
    run_job(&j2, &g_res[2]);
    assert_int_equal(g_res[2].restored, (n2 - 1) / BS * BS);
    assert_same_output(&g_res[2], ref2);
    assert_int_equal(count_files(root, ".tmp."), 0);
    rm_rf(root);
    free(p1);
    free(p2);
}

/* ---- A hybrid through the shared tier --------------------------------------------- */

static test_redis_t g_redis;

/* Keys of STATE sidecars on the test's Redis. */
static size_t redis_state_keys(void)
{
    redisContext *rc = test_redis_client(&g_redis);
    assert_non_null(rc);
    redisReply *r = redisCommand(rc, "KEYS cairn:*:state");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    size_t n = r->elements;
    freeReplyObject(r);
    redisFree(rc);
    return n;
}

/*
 * lfm2 (a conv state) and qwen3_5 (GDN conv and recurrent states, a full-attention layer)
 * persist long_720 into a local directory and Redis (the layered store writes both). A
 * fresh process with no local directory, only Redis behind its pool, restores the whole
 * prompt: the full blocks and the STATE sidecar at 704 come from Redis (its hits), logits
 * and tokens bit-identical to the tier-off run, sidecars installed >= 1, no corruption.
 * With Redis restarted empty, the next fresh process restores nothing and answers the same.
 */
static void test_shared_tier_hybrid(void **state)
{
    (void)state;
    assert_int_equal(test_redis_start(&g_redis, NULL), 0);
    g_shared_url = g_redis.url;
    static const char *const models[] = {"lfm2", "qwen3_5"};
    result_t *r = &g_res[1];
    for (size_t m = 0; m < sizeof(models) / sizeof(models[0]); m++) {
        const char *model = models[m];
        int n = 0;
        int32_t *prompt = fixture_prompt(model, "long_720", &n);
        const size_t states_before = redis_state_keys();
        char root[512];
        make_root(root, sizeof(root), "shared-hybrid");
        job_t persist = {model, root, NULL, prompt, n, NULL, 0, false};
        run_job(&persist, &g_res[0]);
        assert_int_equal(g_res[0].restored, 0);
        assert_true(g_res[0].sidecars_captured >= 1);
        rm_rf(root); /* the local copy is gone: only Redis holds the chain and its states */
        assert_true(redis_state_keys() > states_before);
        job_t restore = {model, NULL, NULL, prompt, n, NULL, 0, false};
        run_job(&restore, r);
        const result_t *ref = reference(model, "long_720");
        assert_same_output(r, ref);
        if (r->restored != (n - 1) / BS * BS)
            fprintf(stderr, "  %s through Redis: %d restored, miss %s, %llu shared reads, %llu sidecars installed\n",
                    model, r->restored, cairn_tier_miss_name((cairn_tier_miss_t)r->miss),
                    (unsigned long long)r->shared_hits, (unsigned long long)r->sidecars_installed);
        assert_int_equal(r->restored, (n - 1) / BS * BS);
        assert_int_equal(r->shared_restored_blocks, (uint64_t)((n - 1) / BS));
        assert_true(r->shared_hits > (uint64_t)((n - 1) / BS)); /* the blocks and a sidecar */
        assert_true(r->sidecars_installed >= 1);
        assert_int_equal(r->sidecar_corruptions, 0);
        assert_int_equal(r->shared_corruptions, 0);
        fprintf(stderr, "  %s through Redis alone: %d of %d prompt tokens restored (%llu sidecars, %llu shared "
                "reads), logits and %d tokens equal\n", model, r->restored, n,
                (unsigned long long)r->sidecars_installed, (unsigned long long)r->shared_hits, N_GEN);
        free(prompt);
    }
    /* Redis restarted empty: nothing to restore, the same output. */
    test_redis_kill(&g_redis);
    assert_int_equal(test_redis_restart(&g_redis), 0);
    int n = 0;
    int32_t *prompt = fixture_prompt("lfm2", "long_720", &n);
    job_t restore = {"lfm2", NULL, NULL, prompt, n, NULL, 0, false};
    run_job(&restore, r);
    assert_same_output(r, reference("lfm2", "long_720"));
    assert_int_equal(r->restored, 0);
    assert_int_equal(r->sidecars_installed, 0);
    free(prompt);
    g_shared_url = NULL;
}

static int shared_teardown(void **state)
{
    (void)state;
    if (g_redis.pid > 0)
        test_redis_stop(&g_redis);
    memset(&g_redis, 0, sizeof(g_redis));
    return 0;
}

/* ---- kill -9 of persisting `cairn generate` processes -------------------------------- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Starts `cairn generate` on the prompt with a salt (a fresh chain each time). */
static pid_t spawn_generate(const char *model_dir, const char *root, const char *salt,
                            const char *ids_arg)
{
    char bin[1024];
    snprintf(bin, sizeof(bin), "%s/src/cairn", CAIRN_BINARY_DIR);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(devnull, 2);
        execl(bin, bin, "generate", model_dir, "--prompt-ids", ids_arg, "--max-tokens", "2",
              "--temperature", "0", "--threads", "1", "--cache-dir", root, "--salt", salt,
              "--print-ids", (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* The kill loop alternates a dense model (BLOCK objects only) and a hybrid one (blocks,
 * then the conv-state sidecars of its anchors 16, 64, 256 and 320 tokens). */
static const char *const kill_models[2] = {"llama", "lfm2"};
/* The hybrid's anchors in blocks, deepest first. */
static const int kill_anchors[] = {20, 16, 4, 1};
#define KILL_N 321      /* prompt tokens: 20 full blocks to write, the last token computed */
#define KILL_LANES 4    /* kill runs in flight at once, each in its own cache root: a run
                         * mostly waits on its fsyncs, not on a core */

/* The model directory (64 hex digits) under a cache root. */
static void find_store_dir(const char *root, char *out, size_t len)
{
    DIR *d = opendir(root);
    assert_non_null(d);
    struct dirent *de;
    out[0] = '\0';
    while ((de = readdir(d)))
        if (strlen(de->d_name) == 64)
            snprintf(out, len, "%s", de->d_name);
    closedir(d);
    assert_true(out[0] != '\0');
}

/* One run of the kill loop: a persisting `cairn generate`, killed (or reaped) by the rule
 * of its iteration, then the restart that checks what it left. */
typedef struct {
    int iter;                 /* -1: idle */
    int m;                    /* kill_models index */
    int rule;                 /* 0: at a random moment; 1: after its first sidecar; 2: first block */
    pid_t gen, restart;       /* the persisting run, then the restart (0: none) */
    double start_ms, kill_ms; /* rule 0: when to kill */
    int expect;               /* prompt tokens the restart must restore */
    char root[512];           /* this lane's cache root */
    char salt[32];
    result_t *r;
} kill_lane_t;

/* Whether any object of the lane's chain is committed: a block (rule 2) or a sidecar (1). */
static bool kill_lane_committed(const kill_lane_t *l, const char *store, const int32_t *prompt)
{
    char path[2048];
    if (l->rule == 1) {
        for (size_t a = 0; a < sizeof(kill_anchors) / sizeof(kill_anchors[0]); a++) {
            sidecar_path(store, l->salt, prompt, kill_anchors[a] - 1, path, sizeof(path));
            if (access(path, F_OK) == 0)
                return true;
        }
        return false;
    }
    for (int k = 0; k < KILL_N / BS; k++) {
        object_path(store, l->salt, prompt, k, path, sizeof(path));
        if (access(path, F_OK) == 0)
            return true;
    }
    return false;
}

/* What the killed process acknowledged, as prompt tokens the restart must restore: the
 * final names of its chain from block 0 (a name appears only once its payload is synced);
 * a hybrid: the deepest anchor those blocks reach whose sidecar is on disk. */
static int kill_lane_expect(const kill_lane_t *l, const char *store, const int32_t *prompt)
{
    int acked = 0;
    char path[2048];
    for (; acked < KILL_N / BS; acked++) {
        object_path(store, l->salt, prompt, acked, path, sizeof(path));
        if (access(path, F_OK) != 0)
            break;
    }
    if (l->m == 0)
        return acked * BS;
    for (size_t a = 0; a < sizeof(kill_anchors) / sizeof(kill_anchors[0]); a++) {
        sidecar_path(store, l->salt, prompt, kill_anchors[a] - 1, path, sizeof(path));
        if (kill_anchors[a] <= acked && access(path, F_OK) == 0)
            return kill_anchors[a] * BS;
    }
    return 0;
}

/* How many runs the kill loop kills: CAIRN_COLD_KILL_RUNS when set (a bigger sweep),
 * else 100, the issues' count, in a release build; 24 under the sanitizers (CAIRN_SANITIZED,
 * scripts/test.sh's ASan stage, or a ThreadSanitizer build), where one run costs ~1 s of
 * CPU for start-up alone: the same four rules, six times each. */
static int kill_runs(void)
{
    const char *env = getenv("CAIRN_COLD_KILL_RUNS");
    if (env && atoi(env) > 0)
        return atoi(env);
    bool sanitized = getenv("CAIRN_SANITIZED") != NULL;
#if defined(__SANITIZE_THREAD__)
    sanitized = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
    sanitized = true;
#endif
#endif
    return sanitized ? 24 : 100;
}

/* kill -9 of persisting `cairn generate` processes (their background capture and the
 * exit's persistence), kill_runs() times (100 in a release build), KILL_LANES at once: a quarter at a random moment of a
 * run's life, a quarter just after their first sidecar is committed, a quarter just after
 * their first block is, the rest at random again; each restart (a fresh process that only
 * reads) serves the reference's output, restores every acknowledged block (a hybrid: to
 * the deepest anchor with its sidecar), finds no corruption and no temporary file. */
static void test_crash_kill9(void **state)
{
    (void)state;
    int32_t *alls[2];
    char *ids_args[2];
    result_t *refs[2] = {&g_res[0], &g_res[2]};
    for (int m = 0; m < 2; m++) {
        int n_all = 0;
        alls[m] = fixture_prompt(kill_models[m], "long_720", &n_all);
        assert_true(n_all >= KILL_N);
        ids_args[m] = malloc((size_t)KILL_N * 8 + 1);
        assert_non_null(ids_args[m]);
        size_t len = 0;
        for (int i = 0; i < KILL_N; i++)
            len += (size_t)sprintf(ids_args[m] + len, "%s%d", i ? "," : "", (int)alls[m][i]);
        job_t off = {kill_models[m], NULL, NULL, alls[m], KILL_N, NULL, 0, false};
        run_job(&off, refs[m]);
    }
    kill_lane_t lanes[KILL_LANES];
    for (int l = 0; l < KILL_LANES; l++) {
        memset(&lanes[l], 0, sizeof(lanes[l]));
        lanes[l].iter = -1;
        lanes[l].r = &g_res[3 + l];
        make_root(lanes[l].root, sizeof(lanes[l].root), "crash");
    }

    /* How long one persisting run takes, to spread the kills over its whole life; and
     * each model's store directory name (the same under every root). */
    char store_names[2][80];
    double span_ms = 0;
    for (int m = 0; m < 2; m++) {
        char sub[600];
        snprintf(sub, sizeof(sub), "%s/m%d", lanes[0].root, m);
        assert_int_equal(mkdir(sub, 0700), 0);
        double t0 = now_ms();
        pid_t pid = spawn_generate(fixture_model_dir(kill_models[m]), sub, "calibrate", ids_args[m]);
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        if (m == 0)
            span_ms = now_ms() - t0;
        find_store_dir(sub, store_names[m], sizeof(store_names[m]));
        rm_rf(sub);
    }
    /* Bounded so the loop stays bounded in time, but wide enough that a sanitized build
     * (whose start-up alone can take most of a second) still sees kills after a capture. */
    if (span_ms > 3000)
        span_ms = 3000;

    srand(12345);
    const int iters = kill_runs();
    int restored_runs = 0, restored_total = 0, after_commit = 0, after_sidecar = 0;
    int next = 0, done = 0;
    double start = now_ms();
    while (done < iters) {
        for (int li = 0; li < KILL_LANES; li++) {
            kill_lane_t *l = &lanes[li];
            char store[700];
            if (l->iter < 0) {
                if (next == iters)
                    continue;
                l->iter = next++;
                l->m = l->iter % 4 == 1 || l->iter % 4 == 2; /* 0, 3: llama; 1, 2: lfm2 */
                l->rule = l->iter % 4 == 1 ? 1 : l->iter % 4 == 3 ? 2 : 0;
                after_sidecar += l->rule == 1;
                after_commit += l->rule == 2;
                snprintf(l->salt, sizeof(l->salt), "crash-%d", l->iter);
                l->start_ms = now_ms();
                l->kill_ms = l->start_ms + (double)rand() / RAND_MAX * span_ms;
                l->gen = spawn_generate(fixture_model_dir(kill_models[l->m]), l->root, l->salt, ids_args[l->m]);
                continue;
            }
            snprintf(store, sizeof(store), "%s/%s", l->root, store_names[l->m]);
            int st = 0;
            if (l->gen) {
                /* A run can commit its whole chain and exit before its rule fires. */
                bool reaped = waitpid(l->gen, &st, WNOHANG) == l->gen;
                if (!reaped) {
                    double t = now_ms();
                    bool fire = l->rule == 0 ? t >= l->kill_ms
                                             : kill_lane_committed(l, store, alls[l->m]) ||
                                                   t - l->start_ms > 60000;
                    if (!fire)
                        continue;
                    kill(l->gen, SIGKILL);
                    assert_int_equal(waitpid(l->gen, &st, 0), l->gen);
                }
                l->gen = 0;
                l->expect = kill_lane_expect(l, store, alls[l->m]);
                /* Restart: whatever the killed writer left is either a valid object or
                 * garbage the store removes. */
                job_t again = {kill_models[l->m], l->root, l->salt, alls[l->m], KILL_N, NULL, 0, true};
                l->restart = spawn(&again, l->r);
                continue;
            }
            pid_t w = waitpid(l->restart, &st, WNOHANG);
            assert_true(w >= 0);
            if (w == 0)
                continue;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || l->r->status != 0)
                fprintf(stderr, "restart of run %d failed: wait status %d, step status %d\n", l->iter, st,
                        l->r->status);
            assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
            assert_int_equal(l->r->status, 0);
            assert_same_output(l->r, refs[l->m]);
            assert_int_equal(l->r->sidecar_corruptions, 0);
            assert_int_equal(l->r->corruptions, 0);
            assert_int_equal(l->r->restored, l->expect);
            assert_int_equal(count_files(l->root, ".tmp."), 0);
            restored_runs += l->r->restored > 0;
            restored_total += l->r->restored;
            l->restart = 0;
            l->iter = -1;
            done++;
        }
        usleep(100);
    }
    fprintf(stderr, "  kill -9: %d runs (llama, lfm2), %d at once, in %.1f s (%d killed after their first "
            "block, %d after their first sidecar); %d restarts restored (%d tokens in all), none invalid\n",
            iters, KILL_LANES, (now_ms() - start) / 1e3, after_commit, after_sidecar, restored_runs,
            restored_total);
    assert_true(restored_runs > 0); /* some kills landed after blocks were committed */
    for (int l = 0; l < KILL_LANES; l++)
        rm_rf(lanes[l].root);
    for (int m = 0; m < 2; m++) {
        free(ids_args[m]);
        free(alls[m]);
    }
}

/* `test_cold_restart` runs the dense families' scenarios, `test_cold_restart hybrid` the
 * hybrids' parity and sidecar cases (ctest: test_cold_restart_hybrid), `test_cold_restart
 * shared` a hybrid through Redis (ctest: test_cold_shared), `test_cold_restart kill` the
 * kill loop alone (ctest: test_cold_kill), so each stays short and ctest -j runs
 * them side by side. */
int main(int argc, char **argv)
{
    g_res = mmap(NULL, N_RESULTS * sizeof(result_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_res == MAP_FAILED)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_family_list),
        cmocka_unit_test(test_restart_parity),
        cmocka_unit_test(test_corruption),
        cmocka_unit_test(test_io_errors),
        cmocka_unit_test(test_shared_directory),
    };
    const struct CMUnitTest kill_tests[] = {
        cmocka_unit_test(test_crash_kill9),
    };
    const struct CMUnitTest hybrid_tests[] = {
        cmocka_unit_test(test_restart_parity_hybrid),
        cmocka_unit_test(test_sidecar_corruption),
    };
    const struct CMUnitTest shared_tests[] = {
        cmocka_unit_test(test_shared_tier_hybrid),
    };
    if (argc > 1 && !strcmp(argv[1], "shared"))
        return cmocka_run_group_tests(shared_tests, NULL, shared_teardown);
    if (argc > 1 && !strcmp(argv[1], "kill"))
        return cmocka_run_group_tests(kill_tests, NULL, NULL);
    if (argc > 1 && !strcmp(argv[1], "hybrid"))
        return cmocka_run_group_tests(hybrid_tests, NULL, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
