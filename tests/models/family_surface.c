/*
 * family_surface.c — one model family through the two user surfaces, over the fixture
 * models/<FIXTURE> (issue 10, "Done when"):
 *   - `cairn generate` (the built binary, --prompt-ids, greedy, 1 and 2 threads) prints
 *     the reference's greedy continuation of chat_short (HF transformers' ids; the fixtures
 *     have no near-tie in it);
 *   - `cairn serve`'s server (in process, loopback): chats of one tenant that share a long
 *     system prompt reuse it (usage.prompt_tokens_details.cached_tokens > 0 on the second),
 *     the same question in a fresh tenant (computed from scratch) and streamed in the first
 *     give the same greedy answer, and /metrics shows where the prefix's state came from: a
 *     family with recurrent layers saves and restores checkpoints, one without never does.
 *
 * Usage: FAMILY_TEST FIXTURE recurrent|attention. Each family's tests/models/<family>/
 * CMakeLists.txt registers it with its fixture, so the file names no family.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "server/http_test_util.h"

#define CAIRN_BIN CAIRN_BINARY_DIR "/src/cairn"

static const char *g_fixture;
static bool g_recurrent;
static char g_dir[1024];
static test_server_t g_srv;

/* About 150 tokens of the fixtures' byte-level BPE: past the 64-token grid checkpoint. */
#define SYSTEM                                                                              \
    "You are a careful assistant for a mountain hut high in the Alps. Answer briefly and "  \
    "politely, cite the hut rules when they apply, never invent facts about the weather, "  \
    "the trails or the opening hours, and say plainly when you do not know. Guests arrive " \
    "tired and cold: be kind, be exact, and remind them that dinner is served at seven, "   \
    "that boots stay in the boot room, and that the last cable car leaves at five."

/* ---- cairn generate ---------------------------------------------------------------- */

/* "a,b,c" of a JSON id array. */
static void join_ids(const cJSON *arr, char *buf, size_t cap)
{
    size_t len = 0;
    const cJSON *it;
    buf[0] = 0;
    cJSON_ArrayForEach(it, arr)
        len += (size_t)snprintf(buf + len, cap - len, "%s%d", len ? "," : "", it->valueint);
}

static cJSON *load_case(const char *name)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/reference.json", g_dir);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
    text[n] = 0;
    fclose(f);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    cJSON *found = NULL, *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases"))
        if (!strcmp(cJSON_GetObjectItem(c, "name")->valuestring, name))
            found = cJSON_DetachItemViaPointer(cJSON_GetObjectItem(root, "cases"), c);
    cJSON_Delete(root);
    assert_non_null(found);
    return found;
}

static void test_generate_greedy(void **state)
{
    (void)state;
    cJSON *c = load_case("chat_short");
    const cJSON *greedy = cJSON_GetObjectItem(c, "greedy_ids");
    const cJSON *gm = cJSON_GetObjectItem(c, "greedy_top2_margin"), *it;
    cJSON_ArrayForEach(it, gm)
        assert_true(it->valuedouble >= 1e-3); /* no near-tie: every id must match */
    static char ids[8192], expect[8192], cmd[16384], out[16384];
    join_ids(cJSON_GetObjectItem(c, "prompt_ids"), ids, sizeof ids);
    join_ids(greedy, expect, sizeof expect);
    /* 1 and 2 threads without the cold tier; then as users run it, with a cache directory
     * (the tier stays off for a family it cannot restore, and must not get in the way). */
    char cache[] = "/tmp/cairn-surface-XXXXXX";
    assert_non_null(mkdtemp(cache));
    for (int run = 0; run < 3; run++) {
        const int threads = run == 1 ? 2 : 1;
        char cold[128] = "--no-cold";
        if (run == 2)
            snprintf(cold, sizeof cold, "--cache-dir %s", cache);
        snprintf(cmd, sizeof cmd,
                 "%s generate %s --prompt-ids %s --max-tokens %d --temperature 0 --threads %d "
                 "%s --print-ids 2>/dev/null",
                 CAIRN_BIN, g_dir, ids, cJSON_GetArraySize(greedy), threads, cold);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        size_t n = fread(out, 1, sizeof out - 1, p);
        out[n] = 0;
        int st = pclose(p);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        out[strcspn(out, "\n")] = 0;
        fprintf(stderr, "%s, %d thread(s), %s: cairn generate printed %s\n", g_fixture, threads,
                cold, out);
        assert_string_equal(out, expect);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
    assert_int_equal(system(cmd), 0);
    cJSON_Delete(c);
}

/* ---- cairn serve ------------------------------------------------------------------- */

/* POSTs a greedy chat completion; returns the parsed body (caller deletes), the answer in
 * *text (malloc'd). */
static cJSON *chat(const char *user, const char *salt, bool stream, char **text)
{
    char body[4096];
    snprintf(body, sizeof body,
             "{\"model\":\"%s\",\"max_tokens\":12,\"temperature\":0,\"stream\":%s,"
             "\"cache_salt\":\"%s\",\"messages\":[{\"role\":\"system\",\"content\":\"" SYSTEM "\"},"
             "{\"role\":\"user\",\"content\":\"%s\"}]%s}",
             g_fixture, stream ? "true" : "false", salt, user,
             stream ? ",\"stream_options\":{\"include_usage\":true}" : "");
    http_resp_t r;
    assert_int_equal(http_request(g_srv.port, "POST", "/v1/chat/completions", NULL, body,
                                  strlen(body), &r),
                     0);
    assert_int_equal(r.status, 200);
    cJSON *out = NULL;
    if (stream) {
        int n_events = 0, done = 0;
        char finish[32] = "";
        cJSON *usage = NULL;
        *text = sse_collect(r.body, &n_events, finish, sizeof finish, &usage, &done);
        assert_true(done);
        assert_non_null(usage);
        out = cJSON_CreateObject();
        cJSON_AddItemToObject(out, "usage", usage);
    } else {
        out = http_json(&r);
        assert_non_null(out);
        const cJSON *msg = cJSON_GetObjectItem(
            cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(out, "choices"), 0), "message"),
            "content");
        assert_non_null(cJSON_GetStringValue(msg));
        *text = strdup(cJSON_GetStringValue(msg));
    }
    http_resp_free(&r);
    return out;
}

static int usage_field(const cJSON *resp, const char *name)
{
    const cJSON *u = cJSON_GetObjectItem(resp, "usage");
    if (!strcmp(name, "cached_tokens"))
        u = cJSON_GetObjectItem(u, "prompt_tokens_details");
    const cJSON *v = cJSON_GetObjectItem(u, name);
    assert_true(cJSON_IsNumber(v));
    return (int)cJSON_GetNumberValue(v);
}

static double metric(const char *name)
{
    http_resp_t r;
    assert_int_equal(http_request(g_srv.port, "GET", "/metrics", NULL, NULL, 0, &r), 0);
    assert_int_equal(r.status, 200);
    double v = metrics_value(r.body, name);
    http_resp_free(&r);
    assert_true(v >= 0); /* the line exists */
    return v;
}

static void test_serve_shared_system_prompt(void **state)
{
    (void)state;
    char *t1, *t2, *t3, *t4;
    cJSON *a = chat("Where is the water tap?", "tenant-a", false, &t1);
    assert_int_equal(usage_field(a, "cached_tokens"), 0);
    const int n_prompt = usage_field(a, "prompt_tokens");
    assert_true(n_prompt > 64 + 16); /* the system prompt passes the 64-token grid point */
    cJSON *b = chat("When does the hut close?", "tenant-a", false, &t2);
    const int hit = usage_field(b, "cached_tokens");
    fprintf(stderr, "%s: first prompt %d tokens; the second reuses %d of its %d\n", g_fixture,
            n_prompt, hit, usage_field(b, "prompt_tokens"));
    assert_true(hit >= 16);
    assert_int_equal(hit % 16, 0);

    /* The same question in a fresh tenant, computed from scratch, and streamed in the first
     * (now served up to its own last full block): the same greedy answer. */
    cJSON *c = chat("When does the hut close?", "tenant-b", false, &t3);
    assert_int_equal(usage_field(c, "cached_tokens"), 0);
    assert_string_equal(t2, t3);
    cJSON *d = chat("When does the hut close?", "tenant-a", true, &t4);
    assert_true(usage_field(d, "cached_tokens") >= hit);
    assert_string_equal(t2, t4);

    /* Where the reused state came from. */
    const double saved = metric("cairn_state_checkpoints_saved_total");
    const double restored = metric("cairn_state_checkpoints_restored_total");
    const double held = metric("cairn_state_checkpoints");
    fprintf(stderr, "%s: recurrent checkpoints saved %.0f, restored %.0f, held %.0f\n", g_fixture,
            saved, restored, held);
    if (g_recurrent) {
        assert_true(saved >= 1 && held >= 1);
        assert_true(restored >= 2); /* requests b and d */
    } else {
        assert_true(saved == 0 && restored == 0 && held == 0);
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(c);
    cJSON_Delete(d);
    free(t1);
    free(t2);
    free(t3);
    free(t4);
}

static int setup_server(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    cairn_server_options_t o;
    cairn_server_options_default(&o);
    o.port = 0;
    return test_server_start(&g_srv, g_fixture, &o, 64);
}

static int teardown_server(void **state)
{
    (void)state;
    test_server_stop(&g_srv);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[2], "recurrent") && strcmp(argv[2], "attention"))) {
        fprintf(stderr, "usage: %s FIXTURE recurrent|attention\n", argv[0]);
        return 2;
    }
    g_fixture = argv[1];
    g_recurrent = !strcmp(argv[2], "recurrent");
    snprintf(g_dir, sizeof g_dir, "%s/models/%s", CAIRN_FIXTURES_DIR, g_fixture);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generate_greedy),
        cmocka_unit_test_setup_teardown(test_serve_shared_system_prompt, setup_server,
                                        teardown_server),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
