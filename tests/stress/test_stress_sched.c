/*
 * test_stress_sched.c — two engines over one checkpoint and one cold-tier directory, each
 * with its scheduler, driven from many threads at once (the scheduler API, no HTTP: more
 * requests per second under ThreadSanitizer than over sockets).
 *
 * The storm. Conversations share a system prefix; each has a first turn and a second turn
 * (first turn + its reply + a new tail), greedy or seeded-sampled with n = 2. Every worker
 * submits to either engine, and either waits for the end, or cancels after a random delay.
 * The pools are tiny (1 MiB: 63 blocks of 16 tokens for prompts of 7 to 30 blocks, 6
 * running), so admission waits, decode preempts, cached blocks are evicted and come back
 * from the cold tier — captured by this engine or by the other one, whose writer thread
 * may be committing them while they are read. Each engine's compute pool has two threads
 * (the spin/futex hand-off runs under TSan too) and a stats reader polls both schedulers.
 *
 * What must hold:
 *  - every request ends with exactly one final event; DONE ends each choice once;
 *  - a request that finished has exactly the tokens of a sequential run of the same
 *    request on a third engine (cold tier off, a pool that never evicts), whatever was
 *    preempted, restored or computed by whom; a canceled one delivered a prefix of them;
 *  - afterwards each scheduler is idle with no block in use (cached + free == total), and
 *    a prompt that needs every usable block is admitted and finishes;
 *  - the cold tier counted no corruption and no write error, and every object in the
 *    directory validates when reopened; the storm really preempted, evicted and restored.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cairn/checkpoint.h"
#include "cairn/cold_tier.h"
#include "cairn/scheduler.h"
#include "stress/stress.h"
#include "tier/tier_test_util.h"

#define MODEL_DIR CAIRN_FIXTURES_DIR "/models/qwen3"
#define N_CONV 6
#define SYS_TOKENS 64
#define MAX_PROMPT 640
#define GEN 32
#define TAIL 16
#define N_VARIANTS 2 /* greedy n = 1; seeded sampling n = 2 */
#define STORM_MS 6000
#define WAIT_MS 180000 /* a request that never ends is a hang: fail, do not wait forever */

typedef struct {
    int32_t prompt[MAX_PROMPT];
    int n_prompt;
    int variant;
    int32_t ref[2][GEN]; /* the sequential run's tokens per choice */
    int n_ref[2];
} job_t;

/* Conversation c, turn t (0, 1), variant v: jobs[c][t][v]. */
static job_t g_jobs[N_CONV][2][N_VARIANTS];
static cairn_checkpoint_t *g_ck;
static cairn_tokenizer_t *g_tok;
static stress_cfg_t g_cfg;

/* ---- One request ------------------------------------------------------------------ */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t toks[2][GEN + 1];
    int n_toks[2];
    int n_done;
    bool final, late;   /* late: an event after the final one */
    int status;         /* the ERROR's */
    cairn_req_usage_t usage;
} req_t;

static void on_event(void *user, const cairn_req_event_t *ev)
{
    req_t *r = user;
    pthread_mutex_lock(&r->mu);
    if (r->final)
        r->late = true;
    int i = ev->index == 1 ? 1 : 0;
    if (ev->kind == CAIRN_REQ_EVENT_DELTA) {
        for (int k = 0; k < ev->n_tokens; k++)
            if (r->n_toks[i] <= GEN)
                r->toks[i][r->n_toks[i]++] = ev->tokens[k];
    } else if (ev->kind == CAIRN_REQ_EVENT_DONE) {
        r->n_done++;
    } else {
        r->status = ev->status;
    }
    if (ev->usage)
        r->usage = *ev->usage;
    if (ev->final) {
        r->final = true;
        pthread_cond_signal(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

static void job_params(const job_t *j, cairn_req_params_t *p, req_t *r)
{
    memset(p, 0, sizeof *p);
    p->prompt = j->prompt;
    p->n_prompt = j->n_prompt;
    cairn_sampling_params_init(&p->sampling);
    p->sampling.max_tokens = GEN;
    p->sampling.ignore_eos = true;
    if (j->variant == 0) {
        p->sampling.temperature = 0;
        p->n = 1;
    } else {
        p->sampling.temperature = 0.9f;
        p->sampling.top_k = 40;
        p->sampling.has_seed = true;
        p->sampling.seed = (uint64_t)j->n_prompt * 7919u;
        p->n = 2;
    }
    p->on_event = on_event;
    p->user = r;
}

/* Waits for the final event; false on a hang. */
static bool req_wait(req_t *r)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock(&r->mu);
    int rc = 0;
    while (!r->final && rc == 0)
        rc = pthread_cond_timedwait(&r->cv, &r->mu, &dl);
    bool ok = r->final;
    pthread_mutex_unlock(&r->mu);
    return ok;
}

/* Submits j and waits (cancel_after_ms >= 0: cancels after that delay). Returns 0 when
 * the outcome is one the contract allows, else prints why and returns 1. *canceled and
 * *preempted report what happened. CAIRN_EBUSY at submit counts as allowed (queue full). */
static int run_job(cairn_sched_t *s, const job_t *j, int cancel_after_ms, bool *canceled,
                   int *preempted)
{
    req_t r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    cairn_req_params_t p;
    job_params(j, &p, &r);
    uint64_t id = 0;
    char err[256] = "";
    int bad = 0;
    *canceled = false;
    *preempted = 0;
    int rc = cairn_sched_submit(s, &p, &id, err, sizeof err);
    if (rc == CAIRN_EBUSY)
        goto out;
    if (rc) {
        fprintf(stderr, "submit: %s (%s)\n", cairn_strerror(rc), err);
        bad = 1;
        goto out;
    }
    if (cancel_after_ms >= 0) {
        stress_sleep_ms(cancel_after_ms);
        cairn_sched_cancel(s, id);
    }
    if (!req_wait(&r)) {
        fprintf(stderr, "request %llu: no final event within %d ms\n", (unsigned long long)id, WAIT_MS);
        abort(); /* the scheduler still holds &r: returning would free it under its feet */
    }
    int n = p.n;
    *preempted = r.usage.preemptions;
    if (r.late) {
        fprintf(stderr, "request %llu: an event after the final one\n", (unsigned long long)id);
        bad = 1;
    }
    if (r.status) {
        if (r.status != CAIRN_ECANCELED || cancel_after_ms < 0) {
            fprintf(stderr, "request %llu failed: %s\n", (unsigned long long)id, cairn_strerror(r.status));
            bad = 1;
        }
        *canceled = true;
    } else if (r.n_done != n) {
        fprintf(stderr, "request %llu: %d DONE events for %d choices\n", (unsigned long long)id, r.n_done, n);
        bad = 1;
    }
    for (int c = 0; c < n && !bad; c++) {
        /* Finished: all of the reference; canceled: a prefix of it. */
        int want = r.status ? r.n_toks[c] : j->n_ref[c];
        if (r.n_toks[c] != want || r.n_toks[c] > j->n_ref[c] ||
            memcmp(r.toks[c], j->ref[c], (size_t)want * sizeof(int32_t))) {
            fprintf(stderr, "request %llu choice %d (prompt %d tokens, variant %d): %d tokens differ from the "
                    "sequential run's %d (preempted %d, cached %d, restored %d)\n",
                    (unsigned long long)id, c, j->n_prompt, j->variant, r.n_toks[c], j->n_ref[c],
                    r.usage.preemptions, r.usage.cached_tokens, r.usage.restored_tokens);
            bad = 1;
        }
    }
out:
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv);
    return bad;
}

/* ---- Engines ---------------------------------------------------------------------- */

static cairn_engine_t *engine_open(int pool_mib, const char *cold_root)
{
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.n_threads = 2;
    o.pool_mib = pool_mib;
    if (cold_root) {
        o.cold_root = cold_root;
        o.cold = 1;
        o.cold_capture_blocks = 1 << 16;
        o.cold_capture_ms = 20000; /* a slow (sanitized, shared) machine must not skip captures */
        o.cold_drain_ms = 60000;
    } else {
        o.cold = -1;
    }
    cairn_engine_t *e = NULL;
    char err[256] = "";
    if (cairn_engine_create(g_ck, &o, &e, err, sizeof err)) {
        fprintf(stderr, "engine: %s\n", err);
        return NULL;
    }
    return e;
}

static cairn_sched_t *sched_open(cairn_engine_t *e, int max_running)
{
    cairn_sched_options_t so;
    cairn_sched_options_default(&so);
    so.max_running = max_running;
    so.prefill_chunk = 48; /* prefill interleaves with decode in every step */
    so.step_tokens = 128;
    so.max_queued = 64;
    cairn_sched_t *s = NULL;
    return cairn_sched_create(e, g_tok, &so, &s) == CAIRN_OK ? s : NULL;
}

/* Deterministic prompts: a shared system prefix, a body per conversation; turn 2 appends
 * turn 1's greedy reply and a tail. */
static void build_turn1(void)
{
    uint64_t rng = 12345;
    int32_t sys[SYS_TOKENS];
    for (int i = 0; i < SYS_TOKENS; i++)
        sys[i] = 16 + (int32_t)stress_below(&rng, 4000);
    for (int c = 0; c < N_CONV; c++) {
        int body = 48 + 64 * c; /* 112 .. 432 prompt tokens: 7 to 27 blocks */
        for (int v = 0; v < N_VARIANTS; v++) {
            job_t *j = &g_jobs[c][0][v];
            memcpy(j->prompt, sys, sizeof sys);
            uint64_t r2 = 777 + (uint64_t)c;
            for (int i = 0; i < body; i++)
                j->prompt[SYS_TOKENS + i] = 16 + (int32_t)stress_below(&r2, 4000);
            j->n_prompt = SYS_TOKENS + body;
            j->variant = v;
        }
    }
}

static void build_turn2(void)
{
    for (int c = 0; c < N_CONV; c++)
        for (int v = 0; v < N_VARIANTS; v++) {
            const job_t *t1 = &g_jobs[c][0][0];
            job_t *j = &g_jobs[c][1][v];
            memcpy(j->prompt, t1->prompt, (size_t)t1->n_prompt * sizeof(int32_t));
            memcpy(j->prompt + t1->n_prompt, t1->ref[0], (size_t)t1->n_ref[0] * sizeof(int32_t));
            j->n_prompt = t1->n_prompt + t1->n_ref[0];
            uint64_t r3 = 999 + (uint64_t)c;
            for (int i = 0; i < TAIL; i++)
                j->prompt[j->n_prompt++] = 16 + (int32_t)stress_below(&r3, 4000);
            j->variant = v;
        }
}

/* The reference: each job alone, one after another, on an engine that never evicts and
 * has no cold tier. */
static void run_reference(int turn)
{
    cairn_engine_t *e = engine_open(64, NULL);
    assert_non_null(e);
    cairn_sched_t *s = sched_open(e, 1);
    assert_non_null(s);
    for (int c = 0; c < N_CONV; c++)
        for (int v = 0; v < N_VARIANTS; v++) {
            job_t *j = &g_jobs[c][turn][v];
            req_t r;
            memset(&r, 0, sizeof r);
            pthread_mutex_init(&r.mu, NULL);
            pthread_cond_init(&r.cv, NULL);
            cairn_req_params_t p;
            job_params(j, &p, &r);
            uint64_t id;
            assert_int_equal(cairn_sched_submit(s, &p, &id, NULL, 0), 0);
            assert_true(req_wait(&r));
            assert_int_equal(r.status, 0);
            for (int k = 0; k < p.n; k++) {
                assert_int_equal(r.n_toks[k], GEN);
                memcpy(j->ref[k], r.toks[k], sizeof j->ref[k]);
                j->n_ref[k] = r.n_toks[k];
            }
            pthread_mutex_destroy(&r.mu);
            pthread_cond_destroy(&r.cv);
        }
    cairn_sched_destroy(s, 1000);
    cairn_engine_destroy(e);
}

static int setup(void **state)
{
    char err[512] = "";
    if (cairn_checkpoint_open(MODEL_DIR, &g_ck, err, sizeof err) ||
        cairn_tokenizer_load(MODEL_DIR, &g_tok, err, sizeof err)) {
        fprintf(stderr, "fixture: %s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    cairn_tokenizer_destroy(g_tok);
    cairn_checkpoint_close(g_ck);
    return 0;
}

/* ---- The storm -------------------------------------------------------------------- */

typedef struct {
    cairn_sched_t *sched[2];
    atomic_long done, canceled, preempted, busy_stats;
} storm_t;

static long request_worker(storm_t *st, uint64_t *rng)
{
    int c = (int)stress_below(rng, N_CONV), t = (int)stress_below(rng, 2);
    int v = (int)stress_below(rng, N_VARIANTS);
    cairn_sched_t *s = st->sched[stress_below(rng, 2)];
    int cancel = stress_below(rng, 4) == 0 ? (int)stress_below(rng, 40) : -1;
    bool canceled;
    int preempted;
    int bad = run_job(s, &g_jobs[c][t][v], cancel, &canceled, &preempted);
    atomic_fetch_add(canceled ? &st->canceled : &st->done, 1);
    atomic_fetch_add(&st->preempted, preempted);
    return bad;
}

/* The snapshot is taken under the scheduler's lock: it must always be within the pool. */
static long stats_worker(storm_t *st)
{
    long bad = 0;
    for (int k = 0; k < 2; k++) {
        cairn_sched_stats_t ss;
        cairn_sched_stats(st->sched[k], &ss);
        if (ss.pool_blocks_used + ss.pool_blocks_cached > ss.pool_blocks_total) {
            fprintf(stderr, "stats: used %llu + cached %llu blocks > the %llu usable\n",
                    (unsigned long long)ss.pool_blocks_used, (unsigned long long)ss.pool_blocks_cached,
                    (unsigned long long)ss.pool_blocks_total);
            bad++;
        }
        if (ss.cold_corruptions || ss.cold_write_errors) {
            fprintf(stderr, "stats: cold tier %llu corruptions, %llu write errors\n",
                    (unsigned long long)ss.cold_corruptions, (unsigned long long)ss.cold_write_errors);
            bad++;
        }
    }
    atomic_fetch_add(&st->busy_stats, 1);
    stress_sleep_ms(2);
    return bad;
}

static long storm_worker(void *ctx, int w, uint64_t *rng, double deadline_ms)
{
    storm_t *st = ctx;
    long bad = 0;
    while (stress_now_ms() < deadline_ms && bad == 0)
        bad += w == 0 ? stats_worker(st) : request_worker(st, rng);
    return bad;
}

/* Idle: nothing queued or running, no block in use; then a prompt of every usable block. */
static void check_idle_and_full_admission(cairn_sched_t *s, cairn_sched_stats_t *out)
{
    cairn_sched_stats_t ss;
    for (int i = 0; i < 2000; i++) {
        cairn_sched_stats(s, &ss);
        if (ss.running == 0 && ss.queued == 0 && ss.pool_blocks_used == 0)
            break;
        stress_sleep_ms(10);
    }
    if (ss.running || ss.queued || ss.pool_blocks_used)
        fprintf(stderr, "not idle after 20 s: %d running, %d queued, %llu blocks in use (%llu cached, %llu free); "
                "cold tier: %llu awaiting, %llu bytes pinned, %llu capture lost\n",
                (int)ss.running, (int)ss.queued, (unsigned long long)ss.pool_blocks_used,
                (unsigned long long)ss.pool_blocks_cached, (unsigned long long)ss.pool_blocks_free,
                (unsigned long long)ss.cold_awaiting_blocks, (unsigned long long)ss.cold_pinned_bytes,
                (unsigned long long)ss.cold_capture_lost);
    assert_int_equal(ss.running, 0);
    assert_int_equal(ss.queued, 0);
    assert_int_equal(ss.pool_blocks_used, 0);
    assert_int_equal(ss.pool_blocks_cached + ss.pool_blocks_free, ss.pool_blocks_total);
    *out = ss;

    /* Every usable block: total * 16 tokens, the last one generated. */
    static int32_t big[4096];
    int n = (int)ss.pool_blocks_total * 16 - 1;
    assert_true(n < (int)(sizeof big / sizeof big[0]));
    uint64_t rng = 4242;
    for (int i = 0; i < n; i++)
        big[i] = 16 + (int32_t)stress_below(&rng, 4000);
    job_t *j = calloc(1, sizeof *j);
    assert_non_null(j);
    req_t r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    cairn_req_params_t p;
    job_params(j, &p, &r);
    p.prompt = big;
    p.n_prompt = n;
    p.sampling.max_tokens = 1;
    uint64_t id;
    char err[256] = "";
    int rc = cairn_sched_submit(s, &p, &id, err, sizeof err);
    if (rc)
        fprintf(stderr, "full-pool prompt: %s (%s)\n", cairn_strerror(rc), err);
    assert_int_equal(rc, 0);
    assert_true(req_wait(&r));
    assert_int_equal(r.status, 0);
    assert_int_equal(r.n_toks[0], 1);
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv);
    free(j);
}

static int count_object(void *user, const cairn_tier_entry_t *e)
{
    (void)e;
    (*(size_t *)user)++;
    return 0;
}

static int first_model(void *user, const cairn_tier_hash_t *fp)
{
    *(cairn_tier_hash_t *)user = *fp;
    return 1;
}

/* Every object under root validates (a store of layout "any" over the one model dir). */
static void check_disk(const char *root)
{
    cairn_tier_hash_t fp;
    assert_int_equal(cairn_cold_list_models(root, first_model, &fp), 0);
    cairn_cold_config_t c = {.root = root, .fingerprint = fp, .no_writer = true};
    cairn_cold_store_t *s = NULL;
    assert_int_equal(cairn_cold_store_create(&c, &s), 0);
    cairn_tier_stats_t ss;
    cairn_cold_store_stats(s, &ss);
    assert_int_equal(ss.corruptions, 0);
    size_t n = 0, checked = 0, bad = 99;
    cairn_cold_store_foreach(s, count_object, &n);
    assert_int_equal(cairn_cold_store_verify(s, &checked, &bad), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(checked, n);
    assert_true(n > 0);
    assert_int_equal(t_count_files(root, ".tmp."), 0);
    fprintf(stderr, "disk: %zu objects, all valid\n", n);
    cairn_cold_store_destroy(s);
}

static void test_two_engines_one_cold_dir(void **state)
{
    build_turn1();
    run_reference(0);
    build_turn2();
    run_reference(1);

    char *root = t_mkroot();
    assert_non_null(root);
    cairn_engine_t *e[2];
    storm_t st;
    memset(&st, 0, sizeof st);
    for (int k = 0; k < 2; k++) {
        assert_non_null(e[k] = engine_open(1, root));
        assert_non_null(st.sched[k] = sched_open(e[k], 6));
    }
    /* Storms until each event the test is for has happened at least once (a slow machine,
     * e.g. a sanitizer build under load, may finish few requests in one storm): at most 4. */
    long bad = 0;
    for (int round = 0; round < 4 && bad == 0; round++) {
        bad = stress_run(&g_cfg, 9, storm_worker, &st);
        uint64_t seen[4] = {0};
        for (int k = 0; k < 2; k++) {
            cairn_sched_stats_t ss;
            cairn_sched_stats(st.sched[k], &ss);
            seen[0] += ss.pool_evictions;
            seen[1] += ss.cold_captured_blocks;
            seen[2] += ss.cold_restored_blocks;
            seen[3] += ss.preemptions;
        }
        if (seen[0] && seen[1] && seen[2] && seen[3])
            break;
        fprintf(stderr, "storm %d: %llu evictions, %llu captured, %llu restored, %llu preemptions: "
                "another storm\n", round, (unsigned long long)seen[0], (unsigned long long)seen[1],
                (unsigned long long)seen[2], (unsigned long long)seen[3]);
    }
    fprintf(stderr, "storm: %ld finished, %ld canceled, %ld preemptions, %ld stats snapshots\n",
            atomic_load(&st.done), atomic_load(&st.canceled), atomic_load(&st.preempted),
            atomic_load(&st.busy_stats));
    assert_int_equal(bad, 0);
    assert_true(atomic_load(&st.done) > 0);

    uint64_t preemptions = 0, evictions = 0, restored = 0, captured = 0;
    for (int k = 0; k < 2; k++) {
        cairn_sched_stats_t ss;
        check_idle_and_full_admission(st.sched[k], &ss);
        assert_int_equal(ss.cold_corruptions, 0);
        assert_int_equal(ss.cold_write_errors, 0);
        preemptions += ss.preemptions;
        evictions += ss.pool_evictions;
        restored += ss.cold_restored_blocks;
        captured += ss.cold_captured_blocks;
        fprintf(stderr, "engine %d: %llu done, %llu canceled, %llu preemptions, %llu evictions, "
                "%llu blocks captured, %llu restored, %llu queue drops\n", k,
                (unsigned long long)ss.requests_done, (unsigned long long)ss.requests_canceled,
                (unsigned long long)ss.preemptions, (unsigned long long)ss.pool_evictions,
                (unsigned long long)ss.cold_captured_blocks, (unsigned long long)ss.cold_restored_blocks,
                (unsigned long long)ss.cold_queue_drops);
    }
    /* The storm did what it is for (at least once each, whatever the machine's speed). */
    assert_true(evictions > 0);
    assert_true(captured > 0);
    assert_true(restored > 0);
    assert_true(preemptions > 0);
    for (int k = 0; k < 2; k++) {
        cairn_sched_destroy(st.sched[k], 10000);
        cairn_engine_destroy(e[k]); /* drains its writer queue */
    }
    check_disk(root);
    t_rmrf(root);
    free(root);
}

int main(void)
{
    stress_config(&g_cfg, "sched", STORM_MS);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_engines_one_cold_dir),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
