/*
 * test_stress_http.c — the whole server in one process (HTTP threads, the engine thread,
 * the cold-tier writer) under clients that start, stream, hang up and cancel at once.
 *
 * The server has a 1 MiB pool (63 blocks) and the cold tier on in a temporary directory;
 * conversations share a system prompt of ~200 tokens, so admission waits, decode
 * preempts, the prefix cache evicts and the cold tier restores while HTTP threads parse,
 * template and tokenize the next requests and the engine thread resumes suspended
 * streams. Each client loops, choosing: a chat stream read to the end; a non-streaming
 * chat; a completion with n = 2; a stream it hangs up on after the first event; a request
 * it hangs up on right after sending; /metrics and /health; a malformed body.
 *
 * What must hold:
 *  - every response a client read to the end is whole: a stream has a finish reason and
 *    [DONE] (or an error event and [DONE]), a body is complete JSON; nothing timed out;
 *  - every finished text equals the sequential run's (a server with the cold tier off,
 *    one request at a time): for streams, non-streams and both choices of n = 2;
 *  - then a shorter storm of requests that end at once (one or two tokens, streamed or
 *    not, or hung up on) on the otherwise idle server: every one answered whole;
 *  - afterwards the server is idle with no block in use, /metrics says so, hang-ups were
 *    counted as cancellations, and a prompt of every usable block is served;
 *  - the cold tier counted no corruption or write error and every object on disk
 *    validates; the storm really preempted, evicted and restored.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "cairn/cold_tier.h"
#include "server/http_test_util.h"
#include "stress/stress.h"
#include "stress/stress_http.h"
#include "tier/tier_test_util.h"

#define N_CONV 6
#define MAX_TOKENS 24
#define STORM_MS 8000
#define EXCHANGE_MS 180000 /* a response that takes longer is a hang */
#define OVERTIME_MS 120000 /* the most a storm goes on past its time to reach its goals */

static stress_cfg_t g_cfg;
static char *g_sys;                  /* the shared system prompt */
static char *g_ref_chat[N_CONV];     /* the sequential run's texts */
static char *g_ref_comp[N_CONV];

/* ---- Requests ----------------------------------------------------------------------- */

static char *chat_body(int c, bool stream)
{
    size_t cap = strlen(g_sys) + 1024;
    char *b = malloc(cap);
    assert_non_null(b);
    snprintf(b, cap,
             "{\"messages\":[{\"role\":\"system\",\"content\":\"%s\"},"
             "{\"role\":\"user\",\"content\":\"Incident %d: the writer queue of region %d is full. "
             "What do I check first, and what must I not touch?\"}],"
             "\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true%s}",
             g_sys, c, c % 3, MAX_TOKENS, stream ? ",\"stream\":true" : "");
    return b;
}

static char *completion_body(int c)
{
    size_t cap = strlen(g_sys) + 1024;
    char *b = malloc(cap);
    assert_non_null(b);
    snprintf(b, cap,
             "{\"prompt\":\"%s Runbook entry %d, step by step:\",\"max_tokens\":%d,"
             "\"temperature\":0,\"ignore_eos\":true,\"n\":2}",
             g_sys, c, MAX_TOKENS);
    return b;
}

/* The text of choice i of a non-streaming body (chat: message.content; completion: text). */
static char *choice_text(const char *body, int i)
{
    cJSON *j = cJSON_Parse(body);
    cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), i);
    cJSON *m = cJSON_GetObjectItem(ch, "message");
    cJSON *t = m ? cJSON_GetObjectItem(m, "content") : cJSON_GetObjectItem(ch, "text");
    char *r = cJSON_IsString(t) ? strdup(t->valuestring) : NULL;
    cJSON_Delete(j);
    return r;
}

static void build_system_prompt(void)
{
    static const char *const parts[] = {"the block pool", "the prefix index", "the cold tier",
                                        "the scheduler", "the tokenizer", "the writer queue",
                                        "the engine thread", "the HTTP threads"};
    size_t cap = 8192, n = 0;
    g_sys = malloc(cap);
    assert_non_null(g_sys);
    n += (size_t)snprintf(g_sys, cap, "You are the on-call assistant of a storage team.");
    for (int i = 0; i < 16; i++)
        n += (size_t)snprintf(g_sys + n, cap - n, " Rule %d: before changing %s, read its runbook "
                              "section %d and write down what you saw.", i + 1,
                              parts[i % 8], 10 + i);
}

/* ---- The server --------------------------------------------------------------------- */

static int start_server(test_server_t *ts, int pool_mib)
{
    cairn_server_options_t o;
    cairn_server_options_default(&o);
    o.port = 0;
    o.http_threads = 4;
    o.sched.max_running = 6;
    o.sched.max_queued = 256;
    o.sched.prefill_chunk = 64;
    o.sched.step_tokens = 128;
    return test_server_start(ts, "qwen3", &o, pool_mib);
}

/* One request at a time on a server without the cold tier and with a pool that never
 * evicts: the reference texts. The environment is set while no thread of ours runs. */
static void run_reference(void)
{
    setenv("CAIRN_COLD", "0", 1);
    test_server_t ts;
    assert_int_equal(start_server(&ts, 64), 0);
    for (int c = 0; c < N_CONV; c++) {
        sh_resp_t r;
        char *b = chat_body(c, false);
        assert_int_equal(sh_exchange(ts.port, "/v1/chat/completions", b, NULL, EXCHANGE_MS, &r), SH_COMPLETE);
        assert_int_equal(r.status, 200);
        assert_non_null(g_ref_chat[c] = choice_text(r.body, 0));
        sh_free(&r);
        free(b);
        b = completion_body(c);
        assert_int_equal(sh_exchange(ts.port, "/v1/completions", b, NULL, EXCHANGE_MS, &r), SH_COMPLETE);
        assert_int_equal(r.status, 200);
        assert_non_null(g_ref_comp[c] = choice_text(r.body, 0));
        char *t1 = choice_text(r.body, 1);
        assert_non_null(t1);
        assert_string_equal(t1, g_ref_comp[c]); /* temperature 0: both choices greedy */
        free(t1);
        sh_free(&r);
        free(b);
    }
    test_server_stop(&ts);
    unsetenv("CAIRN_COLD");
}

/* ---- The storm ---------------------------------------------------------------------- */

typedef struct {
    int port;
    cairn_sched_t *sched;  /* the server's, for the storm's goals */
    atomic_long streams, fulls, n2, hangups, busy, other;
} storm_t;

static long fail_resp(const char *what, const sh_resp_t *r)
{
    fprintf(stderr, "%s: outcome %d, status %d, body %.400s\n", what, (int)r->outcome, r->status, r->body);
    return 1;
}

static long one_request(storm_t *st, uint64_t *rng)
{
    int c = (int)stress_below(rng, N_CONV);
    int kind = (int)stress_below(rng, 10);
    sh_resp_t r;
    long bad = 0;
    char *b = NULL;
    switch (kind) {
    case 0: case 1: case 2: { /* a stream read to the end */
        b = chat_body(c, true);
        sh_exchange(st->port, "/v1/chat/completions", b, NULL, EXCHANGE_MS, &r);
        if (r.outcome == SH_COMPLETE && r.status == 429) {
            atomic_fetch_add(&st->busy, 1);
            break;
        }
        if (r.outcome != SH_COMPLETE || r.status != 200) {
            bad = fail_resp("stream", &r);
            break;
        }
        char fin[32];
        bool err, done;
        char *t = sh_sse_text(r.body, fin, sizeof fin, &err, &done);
        if (!done || err || !fin[0])
            bad = fail_resp("stream without a finish and [DONE]", &r);
        else if (strcmp(t, g_ref_chat[c])) {
            fprintf(stderr, "stream %d: \"%s\" differs from the sequential \"%s\"\n", c, t, g_ref_chat[c]);
            bad = 1;
        }
        free(t);
        atomic_fetch_add(&st->streams, 1);
        break;
    }
    case 3: case 4: { /* non-streaming */
        b = chat_body(c, false);
        sh_exchange(st->port, "/v1/chat/completions", b, NULL, EXCHANGE_MS, &r);
        if (r.outcome == SH_COMPLETE && r.status == 429) {
            atomic_fetch_add(&st->busy, 1);
            break;
        }
        char *t = r.outcome == SH_COMPLETE && r.status == 200 ? choice_text(r.body, 0) : NULL;
        if (!t)
            bad = fail_resp("chat", &r);
        else if (strcmp(t, g_ref_chat[c])) {
            fprintf(stderr, "chat %d: \"%s\" differs from the sequential \"%s\"\n", c, t, g_ref_chat[c]);
            bad = 1;
        }
        free(t);
        atomic_fetch_add(&st->fulls, 1);
        break;
    }
    case 5: { /* n = 2: a fork, both choices the sequential text */
        b = completion_body(c);
        sh_exchange(st->port, "/v1/completions", b, NULL, EXCHANGE_MS, &r);
        if (r.outcome == SH_COMPLETE && r.status == 429) {
            atomic_fetch_add(&st->busy, 1);
            break;
        }
        if (r.outcome != SH_COMPLETE || r.status != 200) {
            bad = fail_resp("n=2", &r);
            break;
        }
        for (int i = 0; i < 2 && !bad; i++) {
            char *t = choice_text(r.body, i);
            if (!t || strcmp(t, g_ref_comp[c])) {
                fprintf(stderr, "n=2 %d choice %d: \"%s\" differs from \"%s\"\n", c, i, t ? t : "(none)",
                        g_ref_comp[c]);
                bad = 1;
            }
            free(t);
        }
        atomic_fetch_add(&st->n2, 1);
        break;
    }
    case 6: /* hang up on a stream after its first event */
    case 7: /* hang up right after sending (stream or not) */
        b = chat_body(c, kind == 6 || stress_below(rng, 2));
        sh_exchange(st->port, "/v1/chat/completions", b, kind == 6 ? "data: " : "", EXCHANGE_MS, &r);
        if (r.outcome != SH_HUNG_UP && !(r.outcome == SH_COMPLETE && r.status == 429))
            bad = fail_resp("hang-up", &r);
        atomic_fetch_add(&st->hangups, 1);
        break;
    case 8:
        sh_exchange(st->port, stress_below(rng, 2) ? "/metrics" : "/health", NULL, NULL, EXCHANGE_MS, &r);
        if (r.outcome != SH_COMPLETE || r.status != 200)
            bad = fail_resp("metrics/health", &r);
        atomic_fetch_add(&st->other, 1);
        break;
    default:
        sh_exchange(st->port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\"}],\"n\":\"x\"}",
                    NULL, EXCHANGE_MS, &r);
        if (r.outcome != SH_COMPLETE || r.status != 400)
            bad = fail_resp("malformed", &r);
        atomic_fetch_add(&st->other, 1);
        break;
    }
    sh_free(&r);
    free(b);
    return bad;
}

/* What the storm must have made happen (asserted afterwards). */
static bool storm_goals_met(storm_t *st)
{
    cairn_sched_stats_t ss;
    cairn_sched_stats(st->sched, &ss);
    return ss.preemptions > 0 && ss.pool_evictions > 0 && ss.cold_restored_blocks > 0;
}

/* Until the deadline, and past it (up to OVERTIME_MS) until the storm has preempted,
 * evicted and restored: a sanitized build on a loaded machine may serve only ~20 requests
 * in the storm's time (ASan, load average 33 on 2 cores: no preemption yet). */
static long storm_worker(void *ctx, int w, uint64_t *rng, double deadline_ms)
{
    storm_t *st = ctx;
    long bad = 0;
    double hard = deadline_ms + OVERTIME_MS;
    while (bad == 0 && stress_now_ms() < hard && (stress_now_ms() < deadline_ms || !storm_goals_met(st)))
        bad += one_request(st, rng);
    return bad;
}

/* Only requests that end at once, on an otherwise idle server: the engine thread's final
 * event then races the HTTP thread still finishing the submit (the request's references,
 * the response it queues), which the long storm, always queued, rarely lets happen. */
static long quick_worker(void *ctx, int w, uint64_t *rng, double deadline_ms)
{
    storm_t *st = ctx;
    long bad = 0;
    while (stress_now_ms() < deadline_ms && bad == 0) {
        static const char *const bodies[] = {
            "{\"prompt\":\"ok\",\"max_tokens\":1,\"stream\":true}",
            "{\"prompt\":\"ok\",\"max_tokens\":1}",
            "{\"prompt\":\"ok\",\"max_tokens\":2,\"n\":2,\"stream\":true}",
        };
        uint32_t k = stress_below(rng, 4);
        sh_resp_t r;
        sh_exchange(st->port, "/v1/completions", bodies[k % 3], k == 3 ? "" : NULL, EXCHANGE_MS, &r);
        if (k == 3 ? r.outcome != SH_HUNG_UP : r.outcome != SH_COMPLETE || r.status != 200)
            bad += fail_resp("quick", &r);
        atomic_fetch_add(k == 3 ? &st->hangups : &st->other, 1);
        sh_free(&r);
    }
    return bad;
}

static double metric(int port, const char *name)
{
    sh_resp_t r;
    double v = -2;
    if (sh_exchange(port, "/metrics", NULL, NULL, EXCHANGE_MS, &r) == SH_COMPLETE)
        v = metrics_value(r.body, name);
    sh_free(&r);
    return v;
}

static int first_model(void *user, const cairn_tier_hash_t *fp)
{
    *(cairn_tier_hash_t *)user = *fp;
    return 1;
}

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
    size_t checked = 0, bad = 99;
    assert_int_equal(cairn_cold_store_verify(s, &checked, &bad), 0);
    assert_int_equal(bad, 0);
    assert_true(checked > 0);
    assert_int_equal(t_count_files(root, ".tmp."), 0);
    fprintf(stderr, "disk: %zu objects, all valid\n", checked);
    cairn_cold_store_destroy(s);
}

static void test_clients_storm_one_server(void **state)
{
    build_system_prompt();
    run_reference();

    char *root = t_mkroot();
    assert_non_null(root);
    setenv("CAIRN_CACHE_DIR", root, 1);
    setenv("CAIRN_COLD_CAPTURE_BUDGET_MS", "20000", 1);
    test_server_t ts;
    assert_int_equal(start_server(&ts, 1), 0);
    storm_t st = {.port = ts.port, .sched = cairn_server_sched(ts.srv)};
    long bad = stress_run(&g_cfg, 10, storm_worker, &st);
    fprintf(stderr, "storm: %ld streams, %ld non-streams, %ld n=2, %ld hang-ups, %ld busy (429), %ld other\n",
            atomic_load(&st.streams), atomic_load(&st.fulls), atomic_load(&st.n2), atomic_load(&st.hangups),
            atomic_load(&st.busy), atomic_load(&st.other));
    assert_int_equal(bad, 0);
    stress_cfg_t quick = g_cfg;
    quick.duration_ms = g_cfg.duration_ms / 4;
    assert_int_equal(stress_run(&quick, 8, quick_worker, &st), 0);

    cairn_sched_t *s = cairn_server_sched(ts.srv);
    cairn_sched_stats_t ss;
    for (int i = 0; i < 3000; i++) {
        cairn_sched_stats(s, &ss);
        if (ss.running == 0 && ss.queued == 0 && ss.pool_blocks_used == 0)
            break;
        stress_sleep_ms(10);
    }
    fprintf(stderr, "server: %llu done, %llu canceled, %llu preemptions, %llu evictions, %llu captured, "
            "%llu restored blocks\n", (unsigned long long)ss.requests_done,
            (unsigned long long)ss.requests_canceled, (unsigned long long)ss.preemptions,
            (unsigned long long)ss.pool_evictions, (unsigned long long)ss.cold_captured_blocks,
            (unsigned long long)ss.cold_restored_blocks);
    assert_int_equal(ss.running, 0);
    assert_int_equal(ss.queued, 0);
    assert_int_equal(ss.pool_blocks_used, 0);
    assert_int_equal(ss.pool_blocks_cached + ss.pool_blocks_free, ss.pool_blocks_total);
    assert_true(metric(ts.port, "cairn_pool_blocks_used") == 0);
    assert_true(metric(ts.port, "cairn_running_requests") == 0);
    assert_int_equal(ss.cold_corruptions, 0);
    assert_int_equal(ss.cold_write_errors, 0);
    assert_true(ss.requests_canceled > 0 || atomic_load(&st.hangups) == 0);
    assert_true(ss.pool_evictions > 0);
    assert_true(ss.preemptions > 0);
    assert_true(ss.cold_restored_blocks > 0);

    /* A prompt of every usable block (the last slot for the one generated token). */
    int n = (int)ss.pool_blocks_total * 16 - 1;
    size_t cap = (size_t)n * 6 + 128, len = 0;
    char *b = malloc(cap);
    assert_non_null(b);
    len += (size_t)snprintf(b, cap, "{\"prompt\":[");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(b + len, cap - len, "%s%d", i ? "," : "", 16 + (i * 37) % 4000);
    snprintf(b + len, cap - len, "],\"max_tokens\":1,\"temperature\":0}");
    sh_resp_t r;
    assert_int_equal(sh_exchange(ts.port, "/v1/completions", b, NULL, EXCHANGE_MS, &r), SH_COMPLETE);
    if (r.status != 200)
        fprintf(stderr, "full-pool prompt: %d %s\n", r.status, r.body);
    assert_int_equal(r.status, 200);
    sh_free(&r);
    free(b);

    test_server_stop(&ts); /* drains the writer queue */
    unsetenv("CAIRN_CACHE_DIR");
    unsetenv("CAIRN_COLD_CAPTURE_BUDGET_MS");
    check_disk(root);
    t_rmrf(root);
    free(root);
    for (int c = 0; c < N_CONV; c++) {
        free(g_ref_chat[c]);
        free(g_ref_comp[c]);
    }
    free(g_sys);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    stress_config(&g_cfg, "http", STORM_MS);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clients_storm_one_server),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
