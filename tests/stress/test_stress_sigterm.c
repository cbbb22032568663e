/*
 * test_stress_sigterm.c — SIGTERM in the middle of a storm, on the real `cairn serve`
 * (CAIRN_BINARY_DIR/src/cairn, built with the same sanitizer as this test, so a race in
 * the child fails it too: its exit status is ThreadSanitizer's 66 then).
 *
 * Rounds over one cache directory. Each round starts a server (1 MiB pool, the cold tier
 * on, a request log, a drain deadline of 0, 400 or 5000 ms), lets 8 clients stream,
 * request, hang up and poll /metrics, sends SIGTERM at a random moment after the first
 * whole response, and lets the clients go on until the server refuses them. Then a last
 * server answers every conversation again, restoring from what the rounds captured.
 *
 * What must hold:
 *  - before SIGTERM every response is whole and its text equals the sequential run's (a
 *    server with the cold tier off, one request at a time); after it, a response is whole
 *    with that text, or a stream ended by an error event and [DONE], or an HTTP error
 *    (503 shutting down, 429), or no connection at all — never a stream cut without its
 *    end, never a hang;
 *  - the server exits with status 0 within its drain deadline plus a bound, leaves no temp
 *    file, and every object in the directory validates; every request-log line is one
 *    whole JSON object;
 *  - the last server restores turn prefixes from disk (cold_restored_tokens > 0) and
 *    answers every conversation with the sequential run's text.
 */
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "cairn/cold_tier.h"
#include "server/http_test_util.h"
#include "stress/stress.h"
#include "stress/stress_http.h"
#include "tier/tier_test_util.h"

#define MODEL_DIR CAIRN_FIXTURES_DIR "/models/qwen3"
#define CAIRN_BIN CAIRN_BINARY_DIR "/src/cairn"
#define N_CONV 4
#define MAX_TOKENS 24
#define ROUNDS 3
#define ROUND_MS 5000
#define EXCHANGE_MS 180000
#define FIRST_MS 60000 /* the first whole response of a round comes by then */
#define EXIT_MS 120000 /* after the drain deadline: the server must be gone by then */

static stress_cfg_t g_cfg;
static char *g_sys;
static char *g_ref[N_CONV];

static char *chat_body(int c, bool stream)
{
    size_t cap = strlen(g_sys) + 1024;
    char *b = malloc(cap);
    assert_non_null(b);
    snprintf(b, cap,
             "{\"messages\":[{\"role\":\"system\",\"content\":\"%s\"},"
             "{\"role\":\"user\",\"content\":\"Shutdown drill %d: what survives a restart?\"}],"
             "\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true%s}",
             g_sys, c, MAX_TOKENS, stream ? ",\"stream\":true,\"stream_options\":{\"include_usage\":true}" : "");
    return b;
}

static char *content_of(const char *body, int *restored)
{
    cJSON *j = cJSON_Parse(body);
    cJSON *m = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "message");
    cJSON *t = cJSON_GetObjectItem(m, "content");
    char *r = cJSON_IsString(t) ? strdup(t->valuestring) : NULL;
    if (restored) {
        cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens_details");
        *restored = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(d, "cold_restored_tokens"));
    }
    cJSON_Delete(j);
    return r;
}

/* ---- The child server --------------------------------------------------------------- */

typedef struct {
    pid_t pid;
    int port;
} child_t;

/* Starts `cairn serve` and reads its port from stdout (up to 60 s). */
static int child_start(child_t *c, const char *root, const char *log, int drain_ms)
{
    int fds[2];
    if (pipe(fds))
        return -1;
    char drain[16];
    snprintf(drain, sizeof drain, "%d", drain_ms);
    char *argv[] = {CAIRN_BIN, "serve", MODEL_DIR, "--host", "127.0.0.1", "--port", "0", "--threads", "2",
                    "--http-threads", "4", "--pool-mib", "1", "--max-running", "6", "--max-queued", "256",
                    "--drain-ms", drain, "--cache-dir", (char *)root, "--request-log", (char *)log, NULL};
    c->pid = stress_spawn(argv, fds[1]);
    close(fds[1]);
    c->port = 0;
    char buf[4096];
    size_t len = 0;
    double deadline = stress_now_ms() + 60000;
    while (c->port == 0 && stress_now_ms() < deadline && len < sizeof buf - 1) {
        struct pollfd p = {fds[0], POLLIN, 0};
        if (poll(&p, 1, 200) <= 0)
            continue;
        ssize_t n = read(fds[0], buf + len, sizeof buf - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        const char *at = strstr(buf, "listening on http://127.0.0.1:");
        if (at && strchr(at, '\n'))
            c->port = atoi(at + strlen("listening on http://127.0.0.1:"));
    }
    close(fds[0]);
    if (c->port <= 0) {
        fprintf(stderr, "cairn serve did not start: %.*s\n", (int)len, buf);
        bool to;
        kill(c->pid, SIGKILL);
        stress_reap(c->pid, 10000, &to);
        return -1;
    }
    return 0;
}

/* ---- Clients ------------------------------------------------------------------------ */

typedef struct {
    int port;
    atomic_bool term_sent;  /* SIGTERM was sent: shutdown outcomes are allowed from now on */
    atomic_bool gone;       /* a client was refused after SIGTERM: the others stop too */
    atomic_long whole, errors_after, refused, hangups, shut_errors;
} round_t;

static long check_one(round_t *rd, uint64_t *rng)
{
    int c = (int)stress_below(rng, N_CONV);
    uint32_t kind = stress_below(rng, 8);
    bool stream = kind < 4;
    bool hang = kind == 6;
    bool metrics = kind == 7;
    char *b = metrics ? NULL : chat_body(c, stream);
    sh_resp_t r;
    sh_exchange(rd->port, metrics ? "/metrics" : "/v1/chat/completions", b,
                hang ? (stress_below(rng, 2) ? "" : "data: ") : NULL, EXCHANGE_MS, &r);
    free(b);
    /* Shutdown outcomes are allowed once SIGTERM is on its way (it is flagged before it
     * is sent, so an outcome it caused always sees the flag). */
    bool after = atomic_load(&rd->term_sent);
    long bad = 0;
    switch (r.outcome) {
    case SH_TIMEOUT:
        fprintf(stderr, "a request hung (%d ms)\n", EXCHANGE_MS);
        bad = 1;
        break;
    case SH_HUNG_UP:
        atomic_fetch_add(&rd->hangups, 1);
        break;
    case SH_REFUSED:
    case SH_TRUNCATED:
        /* No connection, or closed with nothing sent: only once the server is stopping.
         * A stream cut after its headers is never allowed. */
        if (!after || (r.outcome == SH_TRUNCATED && (r.status != 0 || r.body_len))) {
            fprintf(stderr, "%s %s (status %d, %zu body bytes, after SIGTERM: %d): %.300s\n",
                    stream ? "stream" : "request", r.outcome == SH_REFUSED ? "refused" : "cut",
                    r.status, r.body_len, (int)after, r.body);
            bad = 1;
        } else {
            atomic_fetch_add(&rd->refused, 1);
            atomic_store(&rd->gone, true);
        }
        break;
    case SH_COMPLETE:
        if (metrics) {
            bad = r.status != 200 && !(after && r.status == 503);
        } else if (r.status == 429) {
            /* the queue bound: allowed */
        } else if (r.status == 503 && after) {
            atomic_fetch_add(&rd->shut_errors, 1);
        } else if (r.status != 200) {
            fprintf(stderr, "status %d (after SIGTERM: %d): %.300s\n", r.status, (int)after, r.body);
            bad = 1;
        } else if (stream) {
            char fin[32];
            bool err, done;
            char *t = sh_sse_text(r.body, fin, sizeof fin, &err, &done);
            if (!done || (err && !after) || (!err && (!fin[0] || strcmp(t, g_ref[c])))) {
                fprintf(stderr, "stream %d (after SIGTERM: %d, error %d, [DONE] %d, finish '%s'): \"%s\" vs "
                        "\"%s\"\n", c, (int)after, (int)err, (int)done, fin, t, g_ref[c]);
                bad = 1;
            }
            atomic_fetch_add(err ? &rd->errors_after : &rd->whole, 1);
            free(t);
        } else {
            char *t = content_of(r.body, NULL);
            if (!t || strcmp(t, g_ref[c])) {
                fprintf(stderr, "chat %d: \"%s\" vs \"%s\"\n", c, t ? t : "(none)", g_ref[c]);
                bad = 1;
            }
            atomic_fetch_add(&rd->whole, 1);
            free(t);
        }
        break;
    }
    sh_free(&r);
    return bad;
}

static long client_worker(void *ctx, int w, uint64_t *rng, double deadline_ms)
{
    round_t *rd = ctx;
    long bad = 0;
    /* Until the server is gone (the deadline only bounds a server that never stops). */
    while (!atomic_load(&rd->gone) && stress_now_ms() < deadline_ms && bad == 0)
        bad += check_one(rd, rng);
    return bad;
}

typedef struct {
    round_t *rd;
    pid_t pid;
    int delay_ms;
} killer_t;

/* SIGTERM at a random delay after the first whole response, so that every round checks
 * answers before SIGTERM too: a sanitized build on a loaded machine may take seconds for
 * the first one, and a delay from the server's start then often fell before it (TSan,
 * load average 20 on 2 cores: a round with no whole response). */
static void *killer_main(void *arg)
{
    killer_t *k = arg;
    double until = stress_now_ms() + FIRST_MS;
    while (atomic_load(&k->rd->whole) == 0 && stress_now_ms() < until)
        stress_sleep_ms(10);
    stress_sleep_ms(k->delay_ms);
    atomic_store(&k->rd->term_sent, true);
    kill(k->pid, SIGTERM);
    return NULL;
}

static void check_log(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        size_t l = strlen(line);
        assert_true(l > 0 && line[l - 1] == '\n');
        cJSON *j = cJSON_Parse(line);
        if (!j)
            fprintf(stderr, "request log line %d is not JSON: %s", n + 1, line);
        assert_non_null(j);
        assert_non_null(cJSON_GetObjectItem(j, "endpoint"));
        cJSON_Delete(j);
        n++;
    }
    fclose(f);
    fprintf(stderr, "request log: %d lines, each one JSON object\n", n);
}

static int first_model(void *user, const cairn_tier_hash_t *fp)
{
    *(cairn_tier_hash_t *)user = *fp;
    return 1;
}

static void check_disk(const char *root)
{
    assert_int_equal(t_count_files(root, ".tmp."), 0); /* a clean exit leaves no temp file */
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
    fprintf(stderr, "disk: %zu objects, all valid\n", checked);
    cairn_cold_store_destroy(s);
}

static void build_reference(void)
{
    size_t cap = 8192, n = 0;
    g_sys = malloc(cap);
    assert_non_null(g_sys);
    n += (size_t)snprintf(g_sys, cap, "You keep the shutdown checklist of the Cairn runtime.");
    for (int i = 0; i < 14; i++)
        n += (size_t)snprintf(g_sys + n, cap - n, " Item %d: confirm that queue %d drained and that "
                              "shard %d was synced before the next step.", i + 1, i * 3, 40 + i);
    setenv("CAIRN_COLD", "0", 1);
    test_server_t ts;
    assert_int_equal(test_server_start(&ts, "qwen3", NULL, 64), 0);
    for (int c = 0; c < N_CONV; c++) {
        char *b = chat_body(c, false);
        sh_resp_t r;
        assert_int_equal(sh_exchange(ts.port, "/v1/chat/completions", b, NULL, EXCHANGE_MS, &r), SH_COMPLETE);
        assert_int_equal(r.status, 200);
        assert_non_null(g_ref[c] = content_of(r.body, NULL));
        sh_free(&r);
        free(b);
    }
    test_server_stop(&ts);
    unsetenv("CAIRN_COLD");
}

static void test_sigterm_during_storm(void **state)
{
    /* The children inherit it: a slow (sanitized, shared) machine must not skip captures. */
    setenv("CAIRN_COLD_CAPTURE_BUDGET_MS", "20000", 1);
    build_reference();
    char *root = t_mkroot();
    assert_non_null(root);
    char log[512];
    snprintf(log, sizeof log, "%s/requests.jsonl", root);
    static const int drains[ROUNDS] = {400, 0, 5000};
    uint64_t rng = g_cfg.seed;
    for (int k = 0; k < ROUNDS; k++) {
        child_t ch;
        assert_int_equal(child_start(&ch, root, log, drains[k]), 0);
        round_t rd;
        memset(&rd, 0, sizeof rd);
        rd.port = ch.port;
        killer_t kl = {&rd, ch.pid, (int)stress_below(&rng, (uint32_t)g_cfg.duration_ms / 2)};
        pthread_t kt;
        assert_int_equal(pthread_create(&kt, NULL, killer_main, &kl), 0);
        stress_cfg_t c = g_cfg;
        c.seed = g_cfg.seed + (uint64_t)k;
        c.duration_ms = FIRST_MS + g_cfg.duration_ms; /* bounds a server that does not stop */
        long bad = stress_run(&c, 8, client_worker, &rd);
        pthread_join(kt, NULL);
        bool timed_out;
        int st = stress_reap(ch.pid, drains[k] + EXIT_MS, &timed_out);
        fprintf(stderr, "round %d (drain %d ms, SIGTERM %d ms after the first whole response): %ld whole, "
                "%ld streams ended by an error, %ld 503, %ld refused, %ld hang-ups; exit status 0x%x\n",
                k, drains[k], kl.delay_ms,
                atomic_load(&rd.whole), atomic_load(&rd.errors_after), atomic_load(&rd.shut_errors),
                atomic_load(&rd.refused), atomic_load(&rd.hangups), st);
        assert_int_equal(bad, 0);
        assert_false(timed_out);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
        assert_true(atomic_load(&rd.whole) > 0);
        check_disk(root);
    }
    check_log(log);

    /* A last server over what the rounds left: every conversation again, restored. */
    child_t ch;
    assert_int_equal(child_start(&ch, root, log, 1000), 0);
    int restored_total = 0;
    for (int c = 0; c < N_CONV; c++) {
        char *b = chat_body(c, false);
        sh_resp_t r;
        assert_int_equal(sh_exchange(ch.port, "/v1/chat/completions", b, NULL, EXCHANGE_MS, &r), SH_COMPLETE);
        assert_int_equal(r.status, 200);
        int restored = 0;
        char *t = content_of(r.body, &restored);
        assert_non_null(t);
        assert_string_equal(t, g_ref[c]);
        restored_total += restored;
        free(t);
        sh_free(&r);
        free(b);
    }
    fprintf(stderr, "last server: %d prompt tokens restored from disk\n", restored_total);
    assert_true(restored_total > 0);
    kill(ch.pid, SIGTERM);
    bool timed_out;
    int st = stress_reap(ch.pid, EXIT_MS, &timed_out);
    assert_false(timed_out);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    check_disk(root);
    t_rmrf(root);
    free(root);
    for (int c = 0; c < N_CONV; c++)
        free(g_ref[c]);
    free(g_sys);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    stress_config(&g_cfg, "sigterm", ROUND_MS);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigterm_during_storm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
