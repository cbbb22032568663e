/*
 * test_shared_tier.c — two `cairn serve` processes sharing one Redis (the shared tier).
 *
 * Runs the built binary twice (servers A and B) over the qwen3 fixture, each with its own
 * temporary --cache-dir (separate local SSD tiers) and --api-keys (two tenants), both with
 * --shared-tier pointing at a private redis-server on loopback (redis_server.h). Checks:
 *   1. a conversation started on A continues on B: B's turn 2 has nothing hot and nothing
 *      on its own disk, yet restores the whole shared prefix (cold_restored_tokens, and
 *      /metrics' shared-tier restored blocks cover it), and B's reply is bit-identical to
 *      A continuing the conversation itself; the restored blocks reach B's local tier;
 *   2. with Redis restarted empty, B recomputes another conversation's turn 2 (nothing
 *      restored, the outage counted) and still answers exactly as A does;
 *   3. tenants stay apart through the API: tenant beta sending tenant alpha's exact
 *      conversation to B neither hits (nothing restored) nor reads (no command that names
 *      a key of alpha's domain reaches Redis: MONITOR) nor overwrites (alpha's values are
 *      byte-identical afterwards) alpha's keys; alpha on B still restores them.
 *   4. `cairn cache stats --shared-tier` shows the server, its policy and the model's keys;
 *      `cairn cache verify --shared-tier` deletes a value damaged on the server.
 * Every child is killed on failure paths; nothing talks to any non-loopback address.
 */
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "http_test_util.h"
#include "tier/redis/redis_server.h"

#define MODEL_DIR CAIRN_FIXTURES_DIR "/models/qwen3"
#define CAIRN_BIN CAIRN_BINARY_DIR "/src/cairn"
#define MAX_TOKENS 16
#define BLOCK 16

static const char *const ALPHA = "Authorization: Bearer key-alpha\r\n";
static const char *const BETA = "Authorization: Bearer key-beta\r\n";

typedef test_child_t child_t;

static child_t g_a, g_b;
static test_redis_t g_redis;
static char g_dir_a[64], g_dir_b[64], g_keys[64];

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Starts `cairn serve` on an ephemeral port with the tenants' keys and the Redis tier
 * (test_child_serve). Returns 0 and fills *c, or -1. */
static int server_start(const char *cache_dir, child_t *c)
{
    static const char *const env[] = {"CAIRN_COLD_CAPTURE_BUDGET_MS", "10000", NULL};
    const char *argv[] = {CAIRN_BIN, "serve", MODEL_DIR, "--host", "127.0.0.1", "--port", "0", "--threads", "1",
                          "--http-threads", "2", "--pool-mib", "16", "--cache-dir", cache_dir,
                          "--api-keys", g_keys, "--shared-tier", g_redis.url, "-v", NULL};
    return test_child_serve(c, argv, env);
}

static void server_kill(child_t *c)
{
    test_child_kill(c);
}

/* ---- conversations ---- */

static char *system_prompt(int variant)
{
    size_t cap = 16384, len = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    len += (size_t)snprintf(s, cap, "You are assistant number %d of the Cairn fleet. ", variant);
    for (int i = 0; i < 10; i++)
        len += (size_t)snprintf(s + len, cap - len,
                                "Rule %d of fleet %d: when a block is missing from machine %d, fetch it from "
                                "the shared tier before computing it again, and log section %d. ",
                                i + 1, variant, 3 + i, 40 + i * variant);
    return s;
}

static cJSON *message(const char *role, const char *content)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    return m;
}

static cJSON *conversation(int variant)
{
    char *sys = system_prompt(variant);
    cJSON *msgs = cJSON_CreateArray();
    cJSON_AddItemToArray(msgs, message("system", sys));
    cJSON_AddItemToArray(msgs, message("user", "Machine A served the first turn. What does machine B do?"));
    free(sys);
    return msgs;
}

typedef struct {
    char *content;
    int prompt_tokens, completion_tokens, cached_tokens, hot_tokens, restored_tokens;
} reply_t;

static void reply_free(reply_t *r)
{
    free(r->content);
    memset(r, 0, sizeof *r);
}

static void chat(int port, const char *auth, const cJSON *messages, reply_t *out)
{
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "model", "qwen3");
    cJSON_AddItemToObject(req, "messages", cJSON_Duplicate(messages, 1));
    cJSON_AddNumberToObject(req, "max_tokens", MAX_TOKENS);
    cJSON_AddNumberToObject(req, "temperature", 0);
    cJSON_AddBoolToObject(req, "ignore_eos", 1);
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    http_resp_t r;
    assert_int_equal(http_request(port, "POST", "/v1/chat/completions", auth, body, strlen(body), &r), 0);
    free(body);
    if (r.status != 200)
        fprintf(stderr, "chat: %d %s\n", r.status, r.body);
    assert_int_equal(r.status, 200);
    cJSON *j = http_json(&r);
    assert_non_null(j);
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    out->content = strdup(cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "message"), "content")->valuestring);
    cJSON *u = cJSON_GetObjectItem(j, "usage");
    cJSON *d = cJSON_GetObjectItem(u, "prompt_tokens_details");
    out->prompt_tokens = cJSON_GetObjectItem(u, "prompt_tokens")->valueint;
    out->completion_tokens = cJSON_GetObjectItem(u, "completion_tokens")->valueint;
    out->cached_tokens = cJSON_GetObjectItem(d, "cached_tokens")->valueint; /* hot + restored */
    out->hot_tokens = cJSON_GetObjectItem(d, "hot_cached_tokens")->valueint;
    out->restored_tokens = cJSON_GetObjectItem(d, "cold_restored_tokens")->valueint;
    cJSON_Delete(j);
    http_resp_free(&r);
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

/* Turn 1's reply appended and a second user message. */
static void add_turn(cJSON *msgs, const char *assistant, const char *user)
{
    cJSON_AddItemToArray(msgs, message("assistant", assistant));
    cJSON_AddItemToArray(msgs, message("user", user));
}

/* ---- the shared tier as Redis sees it ---- */

static redisReply *rcmd(const char *fmt, ...)
{
    redisContext *c = test_redis_client(&g_redis);
    assert_non_null(c);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    assert_non_null(r);
    return r;
}

static size_t count_keys(void)
{
    redisReply *r = rcmd("KEYS cairn:*");
    size_t n = r->elements;
    freeReplyObject(r);
    return n;
}

/* Waits until Redis holds at least `want` keys and the count stopped moving (the servers
 * write asynchronously). */
static size_t wait_keys(size_t want)
{
    size_t n = 0, last = (size_t)-1;
    double deadline = now_ms() + 20000, stable_since = now_ms();
    while (now_ms() < deadline) {
        n = count_keys();
        if (n != last) {
            last = n;
            stable_since = now_ms();
        } else if (n >= want && now_ms() - stable_since > 400) {
            break;
        }
        usleep(50000);
    }
    return n;
}

/* The distinct domain segments (hex) of the keys, as one space-separated string. */
static void key_domains(char *out, size_t cap)
{
    out[0] = '\0';
    redisReply *r = rcmd("KEYS cairn:*");
    for (size_t i = 0; i < r->elements; i++) {
        const char *k = r->element[i]->str;
        if (r->element[i]->len < 135)
            continue;
        char dom[66];
        memcpy(dom, k + 71, 64);
        dom[64] = ' ';
        dom[65] = '\0';
        if (!strstr(out, dom) && strlen(out) + 66 < cap)
            strcat(out, dom);
    }
    freeReplyObject(r);
}

static int count_files(const char *dir)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "find '%s' -name '*.kv' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1)
            n = -1;
        pclose(p);
    }
    return n;
}

/* ---- tests ---- */

static void test_conversation_moves_to_b(void **state)
{
    (void)state;
    freeReplyObject(rcmd("FLUSHALL"));
    cJSON *msgs = conversation(1);
    reply_t t1;
    chat(g_a.port, ALPHA, msgs, &t1);
    assert_int_equal(t1.restored_tokens, 0);
    size_t keys = wait_keys((size_t)t1.prompt_tokens / BLOCK);
    fprintf(stderr, "A: turn 1, %d prompt tokens; the shared tier holds %zu blocks\n", t1.prompt_tokens, keys);
    assert_true(keys >= (size_t)t1.prompt_tokens / BLOCK);
    add_turn(msgs, t1.content, "And if Redis is empty?");

    double sh0 = metric(g_b.port, "cairn_shared_tier_restored_blocks_total");
    reply_t b2;
    chat(g_b.port, ALPHA, msgs, &b2);
    double sh1 = metric(g_b.port, "cairn_shared_tier_restored_blocks_total");
    fprintf(stderr, "B: turn 2, %d prompt tokens, %d hot, %d restored (%g blocks from the shared tier)\n",
            b2.prompt_tokens, b2.hot_tokens, b2.restored_tokens, sh1 - sh0);
    assert_int_equal(b2.hot_tokens, 0);                            /* B never saw it */
    assert_int_equal(b2.cached_tokens, b2.restored_tokens);         /* all of it restored */
    assert_true(b2.restored_tokens >= t1.prompt_tokens - 2 * BLOCK); /* the whole shared prefix */
    assert_true((sh1 - sh0) * BLOCK == b2.restored_tokens);          /* all of it from Redis */
    assert_true(metric(g_b.port, "cairn_shared_tier_corruptions_total") == 0);
    assert_true(metric(g_b.port, "cairn_cold_corruptions_total") == 0);

    /* A continues the same conversation itself (hot): the same reply, bit for bit. */
    reply_t a2;
    chat(g_a.port, ALPHA, msgs, &a2);
    assert_true(a2.cached_tokens > 0);
    assert_int_equal(a2.prompt_tokens, b2.prompt_tokens);
    assert_int_equal(a2.completion_tokens, b2.completion_tokens);
    assert_string_equal(a2.content, b2.content);

    /* The blocks B read from Redis are on B's own disk now (promoted, or captured). */
    int files = 0;
    for (int i = 0; i < 100 && files < b2.restored_tokens / BLOCK; i++) {
        files = count_files(g_dir_b);
        usleep(100000);
    }
    assert_true(files >= b2.restored_tokens / BLOCK);
    reply_free(&t1);
    reply_free(&b2);
    reply_free(&a2);
    cJSON_Delete(msgs);
}

static void test_redis_restarted_empty(void **state)
{
    (void)state;
    cJSON *msgs = conversation(2);
    reply_t t1;
    chat(g_a.port, ALPHA, msgs, &t1);
    (void)wait_keys(count_keys() + (size_t)t1.prompt_tokens / BLOCK);
    add_turn(msgs, t1.content, "What if the shared tier restarted?");
    assert_int_equal(test_redis_restart(&g_redis), 0); /* empty: --save "" */
    assert_int_equal(count_keys(), 0);

    double out0 = metric(g_b.port, "cairn_shared_tier_outages_total");
    reply_t b2;
    chat(g_b.port, ALPHA, msgs, &b2);
    fprintf(stderr, "B after the Redis restart: %d prompt tokens, %d hot, %d restored\n", b2.prompt_tokens,
            b2.cached_tokens, b2.restored_tokens);
    assert_int_equal(b2.cached_tokens, 0);
    assert_int_equal(b2.restored_tokens, 0); /* recomputed */
    assert_true(metric(g_b.port, "cairn_shared_tier_outages_total") == out0 + 1); /* its connection died */
    reply_t a2;
    chat(g_a.port, ALPHA, msgs, &a2);
    assert_string_equal(a2.content, b2.content);
    assert_int_equal(a2.completion_tokens, b2.completion_tokens);
    reply_free(&t1);
    reply_free(&b2);
    reply_free(&a2);
    cJSON_Delete(msgs);
}

static void test_tenants_apart(void **state)
{
    (void)state;
    /* After the restart of the previous test, A's connections are dead until its next
     * operation notices: a request of another conversation makes each server reconnect. */
    cJSON *warm = conversation(9);
    reply_t w;
    chat(g_a.port, ALPHA, warm, &w);
    reply_free(&w);
    chat(g_b.port, ALPHA, warm, &w);
    reply_free(&w);
    cJSON_Delete(warm);
    usleep(500000);
    freeReplyObject(rcmd("FLUSHALL"));
    cJSON *msgs = conversation(3);
    reply_t t1;
    chat(g_a.port, ALPHA, msgs, &t1);
    size_t n_alpha = wait_keys((size_t)t1.prompt_tokens / BLOCK);
    assert_true(n_alpha >= (size_t)t1.prompt_tokens / BLOCK);
    char alpha_dom[256];
    key_domains(alpha_dom, sizeof alpha_dom);
    assert_int_equal(strlen(alpha_dom), 65); /* one domain: alpha's */
    alpha_dom[64] = '\0';
    /* Alpha's values, to compare afterwards. */
    redisReply *keys = rcmd("KEYS cairn:*");
    redisReply **before = calloc(keys->elements, sizeof *before);
    for (size_t i = 0; i < keys->elements; i++)
        before[i] = rcmd("GET %s", keys->element[i]->str);
    add_turn(msgs, t1.content, "Can another tenant read this?");

    /* Everything beta's request makes B send to Redis, as Redis received it. */
    redisContext *mon = test_redis_client(&g_redis);
    assert_non_null(mon);
    redisReply *ok = redisCommand(mon, "MONITOR");
    assert_non_null(ok);
    freeReplyObject(ok);
    reply_t beta;
    chat(g_b.port, BETA, msgs, &beta);
    (void)wait_keys(n_alpha + 1); /* beta's own blocks are written under beta's domain */
    struct timeval tv = {0, 300000};
    redisSetTimeout(mon, tv);
    size_t seen = 0, naming_alpha = 0;
    for (;;) {
        void *r = NULL;
        if (redisGetReply(mon, &r) != REDIS_OK || !r)
            break;
        redisReply *line = r;
        if (line->type == REDIS_REPLY_STATUS && strstr(line->str, "cairn:")) {
            seen++;
            naming_alpha += strstr(line->str, alpha_dom) != NULL;
        }
        freeReplyObject(line);
    }
    redisFree(mon);
    fprintf(stderr, "beta on B: %d prompt tokens, %d hot, %d restored; %zu commands on cairn keys, %zu naming "
                    "alpha's domain\n",
            beta.prompt_tokens, beta.cached_tokens, beta.restored_tokens, seen, naming_alpha);
    assert_int_equal(beta.cached_tokens, 0);   /* no hit */
    assert_int_equal(beta.restored_tokens, 0);
    assert_true(seen > 0);                     /* B did talk to Redis (for beta's own keys) */
    assert_int_equal(naming_alpha, 0);         /* never read, probed or written alpha's keys */
    for (size_t i = 0; i < keys->elements; i++) { /* alpha's values untouched */
        redisReply *now = rcmd("GET %s", keys->element[i]->str);
        assert_int_equal(now->len, before[i]->len);
        assert_memory_equal(now->str, before[i]->str, now->len);
        freeReplyObject(now);
        freeReplyObject(before[i]);
    }
    free(before);
    freeReplyObject(keys);
    char doms[512];
    key_domains(doms, sizeof doms);
    assert_int_equal(strlen(doms), 2 * 65); /* alpha's and beta's */

    /* Alpha on B does restore its own conversation: the keys were there to be hit. */
    reply_t alpha;
    chat(g_b.port, ALPHA, msgs, &alpha);
    assert_true(alpha.restored_tokens >= t1.prompt_tokens - 2 * BLOCK);
    assert_string_equal(alpha.content, beta.content); /* same prompt, same greedy reply */
    reply_free(&t1);
    reply_free(&beta);
    reply_free(&alpha);
    cJSON_Delete(msgs);
}

/* Runs `cairn cache ARGS` and returns its stdout (malloc'd) and exit status. */
static char *cache_cli(const char *args, int *status)
{
    char cmdline[512];
    snprintf(cmdline, sizeof cmdline, "'%s' cache %s 2>/dev/null", CAIRN_BIN, args);
    FILE *p = popen(cmdline, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    size_t n;
    while ((n = fread(out + len, 1, cap - 1 - len, p)) > 0)
        len += n;
    out[len] = '\0';
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

/* `cairn cache` shows and maintains the tier: stats name the server, its policy and this
 * model's keys; verify reads every value and deletes one that was damaged. */
static void test_cache_cli(void **state)
{
    (void)state;
    size_t keys = wait_keys(1); /* the servers' last captures have landed */
    assert_true(keys > 0);
    char args[300];
    int status;
    snprintf(args, sizeof args, "stats --json --dir '%s' --shared-tier %s", g_dir_b, g_redis.url);
    char *out = cache_cli(args, &status);
    fprintf(stderr, "cairn cache stats:\n%s", out);
    assert_int_equal(status, 0);
    char want[128];
    snprintf(want, sizeof want, "{\"shared_tier\":\"%s/0\"", g_redis.url);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "\"maxmemory_policy\":\"noeviction\"")); /* the test server's default */
    const char *shared = strstr(out, "\"tier\":\"shared\"");
    assert_non_null(shared);
    const char *objs = strstr(shared, "\"objects\":");
    assert_non_null(objs);
    assert_int_equal(strtoull(objs + strlen("\"objects\":"), NULL, 10), keys);
    free(out);
    /* One value damaged on the server: verify finds it, deletes it, exits 1. */
    redisReply *all = rcmd("KEYS cairn:*");
    assert_true(all->elements > 0);
    redisReply *v = rcmd("GET %s", all->element[0]->str);
    v->str[v->len - 1] ^= 0x01;
    freeReplyObject(rcmd("SET %s %b", all->element[0]->str, v->str, v->len));
    freeReplyObject(v);
    snprintf(args, sizeof args, "verify --shared-tier %s", g_redis.url);
    out = cache_cli(args, &status);
    fprintf(stderr, "cairn cache verify:\n%s", out);
    assert_int_equal(status, 1);
    assert_non_null(strstr(out, "1 invalid deleted"));
    free(out);
    redisReply *e = rcmd("EXISTS %s", all->element[0]->str);
    assert_int_equal(e->integer, 0);
    freeReplyObject(e);
    freeReplyObject(all);
    assert_int_equal(count_keys(), keys - 1);
}

static int setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    if (access(CAIRN_BIN, X_OK)) {
        fprintf(stderr, "missing %s\n", CAIRN_BIN);
        return -1;
    }
    if (test_redis_start(&g_redis, NULL))
        return -1;
    snprintf(g_dir_a, sizeof g_dir_a, "/tmp/cairn_shared_a.XXXXXX");
    snprintf(g_dir_b, sizeof g_dir_b, "/tmp/cairn_shared_b.XXXXXX");
    snprintf(g_keys, sizeof g_keys, "/tmp/cairn_shared_keys.XXXXXX");
    if (!mkdtemp(g_dir_a) || !mkdtemp(g_dir_b))
        return -1;
    int fd = mkstemp(g_keys);
    if (fd < 0 || write(fd, "key-alpha\nkey-beta\n", 19) != 19)
        return -1;
    close(fd);
    if (server_start(g_dir_a, &g_a) || server_start(g_dir_b, &g_b))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    server_kill(&g_a);
    server_kill(&g_b);
    test_redis_stop(&g_redis);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s'", g_dir_a, g_dir_b, g_keys);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conversation_moves_to_b),
        cmocka_unit_test(test_redis_restarted_empty),
        cmocka_unit_test(test_tenants_apart),
        cmocka_unit_test(test_cache_cli),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
