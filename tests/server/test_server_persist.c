/*
 * test_server_persist.c — a whole long prompt survives a restart of `cairn serve` (issue 17).
 *
 * Child processes of the built binary over the qwen3 fixture (loopback, ephemeral ports):
 *  1. write-through: server A computes an 8150-token prompt (POST /v1/completions with
 *     token ids, greedy) and is SIGTERMed as soon as it answered, while its background
 *     capture may still be copying the chain; the exit persists the rest. Server B, a fresh
 *     process over the same cache directory, gets the same prompt: >= 99% of its full
 *     blocks restored, the same completion as A's (which computed everything over an
 *     empty directory: the no-cache run; restored K/V are bit-identical, so a --no-cold
 *     server answers the same, as test_server_restart checks);
 *  2. write-back with a pool too small for two such prompts: server D computes the prompt,
 *     then another 8150-token prompt that evicts most of it (held back until persisted:
 *     cairn_cold_writeback_holds_total > 0), SIGTERM; server E restores >= 99% of the
 *     first prompt's blocks and answers as A did.
 * Every child is killed on failure paths by the group teardown.
 */
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "http_test_util.h"

#define MODEL_DIR CAIRN_FIXTURES_DIR "/models/qwen3"
#define CAIRN_BIN CAIRN_BINARY_DIR "/src/cairn"
/* 8150 tokens (+ MAX_TOKENS within the fixture's 8192 positions); under the sanitizers
 * (CAIRN_SANITIZED, scripts/test.sh's ASan stage, or a ThreadSanitizer build) 1600, with
 * the write-back pool scaled alike (2 MiB: 128 blocks for two prompts of 100), so those
 * stages check the same paths in time (a 3600-token prefill alone took 144 s under ASan on
 * the loaded machine). */
static int N_PROMPT = 8150;
static const char *g_wb_pool = "9";
#define MAX_TOKENS 8
#define BS 16

typedef test_child_t child_t;

static child_t g_children[5];
static char g_dir_wt[256], g_dir_wb[256];

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Starts `cairn serve` with extra options (NULL-terminated) on an ephemeral port
 * (test_child_serve). Returns 0 and fills *c, or -1. */
static int server_start(child_t *c, const char *cache_dir, const char *pool_mib, const char *const *extra)
{
    const char *argv[32] = {CAIRN_BIN, "serve", MODEL_DIR, "--host", "127.0.0.1", "--port", "0",
                            "--threads", "2", "--http-threads", "2", "--pool-mib", pool_mib,
                            "--cache-dir", cache_dir};
    int n = 15;
    for (int i = 0; extra && extra[i] && n < 31; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    return test_child_serve(c, argv, NULL);
}

/* SIGTERM, then waits up to 60 s for a clean exit. Returns the exit status or -1. */
static int server_stop(child_t *c)
{
    return test_child_stop(c, 60000);
}

/* A prompt of N_PROMPT token ids (a seeded LCG over the fixture's 4093 ordinary ids). */
static int32_t *make_prompt(uint32_t seed)
{
    int32_t *p = malloc((size_t)N_PROMPT * sizeof *p);
    assert_non_null(p);
    uint32_t x = seed;
    for (int i = 0; i < N_PROMPT; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (int32_t)((x >> 8) % 4093u);
    }
    return p;
}

typedef struct {
    char *text;
    int prompt_tokens, completion_tokens;
    int cached_tokens;             /* every prompt token not computed (hot + restored) */
    int hot_tokens, restored_tokens; /* its split: hot pool, cold tier */
} reply_t;

/* POST /v1/completions with the token ids, greedy, MAX_TOKENS, ignore_eos. */
static void complete(int port, const int32_t *ids, reply_t *out)
{
    double t0 = now_ms();
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "model", "qwen3");
    cJSON_AddItemToObject(req, "prompt", cJSON_CreateIntArray((const int *)ids, N_PROMPT));
    cJSON_AddNumberToObject(req, "max_tokens", MAX_TOKENS);
    cJSON_AddNumberToObject(req, "temperature", 0);
    cJSON_AddBoolToObject(req, "ignore_eos", 1);
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    http_resp_t r;
    assert_int_equal(http_request(port, "POST", "/v1/completions", NULL, body, strlen(body), &r), 0);
    free(body);
    if (r.status != 200)
        fprintf(stderr, "completions: %d %s\n", r.status, r.body);
    assert_int_equal(r.status, 200);
    cJSON *j = http_json(&r);
    assert_non_null(j);
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    out->text = strdup(cJSON_GetObjectItem(c0, "text")->valuestring);
    cJSON *u = cJSON_GetObjectItem(j, "usage");
    cJSON *d = cJSON_GetObjectItem(u, "prompt_tokens_details");
    out->prompt_tokens = cJSON_GetObjectItem(u, "prompt_tokens")->valueint;
    out->completion_tokens = cJSON_GetObjectItem(u, "completion_tokens")->valueint;
    out->cached_tokens = cJSON_GetObjectItem(d, "cached_tokens")->valueint;
    out->hot_tokens = cJSON_GetObjectItem(d, "hot_cached_tokens")->valueint;
    out->restored_tokens = cJSON_GetObjectItem(d, "cold_restored_tokens")->valueint;
    cJSON_Delete(j);
    http_resp_free(&r);
    fprintf(stderr, "  request: %.0f ms (%d restored)\n", now_ms() - t0, out->restored_tokens);
}

static double metric(int port, const char *name)
{
    http_resp_t r;
    assert_int_equal(http_request(port, "GET", "/metrics", NULL, NULL, 0, &r), 0);
    assert_int_equal(r.status, 200);
    double v = metrics_value(r.body, name);
    http_resp_free(&r);
    return v;
}

/* Polls a counter until it reaches at least `want`, for up to 20 s; returns its last value.
 * The scheduler publishes its stats snapshot after the step that sent the reply, so a
 * /metrics read right after the reply can see the snapshot before that step's release
 * (seen under ASan on a loaded machine: the write-back prompt's blocks not yet counted). */
static double metric_at_least(int port, const char *name, double want)
{
    double v = 0;
    for (int i = 0; i < 400 && (v = metric(port, name)) < want; i++) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return v;
}

/* The restored share of the prompt's full blocks must be >= 99%. */
static void assert_restored(const reply_t *r, const char *what)
{
    const int full = (N_PROMPT - 1) / BS * BS;
    fprintf(stderr, "%s: %d of %d full-block prompt tokens restored after the restart (%.1f%%)\n", what,
            r->restored_tokens, full, 100.0 * r->restored_tokens / full);
    assert_int_equal(r->prompt_tokens, N_PROMPT);
    assert_int_equal(r->hot_tokens, 0); /* a fresh pool: nothing hot */
    assert_int_equal(r->cached_tokens, r->restored_tokens);
    assert_true(r->restored_tokens * 100 >= full * 99);
}

static void test_long_prompt_survives_restart(void **state)
{
    (void)state;
    int32_t *p = make_prompt(17), *q = make_prompt(18);
    reply_t a, b, d1, d2, e;

    /* A: write-through over an empty cache directory (so it computes everything: the
     * no-cache run), SIGTERM at once after the answer. */
    assert_int_equal(server_start(&g_children[0], g_dir_wt, "16", NULL), 0);
    complete(g_children[0].port, p, &a);
    assert_int_equal(a.restored_tokens, 0);
    assert_int_equal(a.cached_tokens, 0);
    assert_int_equal(a.completion_tokens, MAX_TOKENS);
    assert_int_equal(server_stop(&g_children[0]), 0);
    const reply_t *ref = &a;

    /* B: fresh process, same directory. */
    assert_int_equal(server_start(&g_children[1], g_dir_wt, "16", NULL), 0);
    complete(g_children[1].port, p, &b);
    assert_true(metric(g_children[1].port, "cairn_cold_corruptions_total") == 0);
    assert_int_equal(server_stop(&g_children[1]), 0);
    assert_restored(&b, "write-through");
    assert_string_equal(b.text, ref->text);

    /* D: write-back, a pool of 576 blocks for two prompts of 510 (sanitized: 128 for two of
     * 100): q evicts most of p. */
    const char *wb[] = {"--cold-policy", "write-back", NULL};
    assert_int_equal(server_start(&g_children[3], g_dir_wb, g_wb_pool, wb), 0);
    complete(g_children[3].port, p, &d1);
    assert_true(metric_at_least(g_children[3].port, "cairn_cold_awaiting_blocks", (N_PROMPT - 1) / BS) >=
                (N_PROMPT - 1) / BS);
    assert_true(metric(g_children[3].port, "cairn_cold_written_bytes_total") == 0);
    complete(g_children[3].port, q, &d2);
    assert_true(metric_at_least(g_children[3].port, "cairn_cold_writeback_holds_total", 1) > 0);
    assert_true(metric(g_children[3].port, "cairn_cold_capture_lost_total") == 0);
    assert_int_equal(server_stop(&g_children[3]), 0);
    assert_string_equal(d1.text, ref->text);

    /* E: the first prompt comes back from disk. */
    assert_int_equal(server_start(&g_children[4], g_dir_wb, g_wb_pool, wb), 0);
    complete(g_children[4].port, p, &e);
    assert_int_equal(server_stop(&g_children[4]), 0);
    assert_restored(&e, "write-back");
    assert_string_equal(e.text, ref->text);

    reply_t *all[] = {&a, &b, &d1, &d2, &e};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]->text);
    free(p);
    free(q);
}

static int setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    bool sanitized = getenv("CAIRN_SANITIZED") != NULL;
#if defined(__SANITIZE_THREAD__)
    sanitized = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
    sanitized = true;
#endif
#endif
    if (sanitized) {
        N_PROMPT = 1600;
        g_wb_pool = "2";
    }
    snprintf(g_dir_wt, sizeof g_dir_wt, "/tmp/cairn_persist_wt.XXXXXX");
    snprintf(g_dir_wb, sizeof g_dir_wb, "/tmp/cairn_persist_wb.XXXXXX");
    if (!mkdtemp(g_dir_wt) || !mkdtemp(g_dir_wb))
        return -1;
    if (access(CAIRN_BIN, X_OK)) {
        fprintf(stderr, "missing %s\n", CAIRN_BIN);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < 5; i++)
        test_child_kill(&g_children[i]);
    char cmd[900];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", g_dir_wt, g_dir_wb);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_prompt_survives_restart),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
