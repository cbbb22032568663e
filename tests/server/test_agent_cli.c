/*
 * test_agent_cli.c — a real agent CLI against the server: Claude Code
 * (`@anthropic-ai/claude-code` from npm, installed into the build tree by setup_client.sh)
 * in print mode, headless, with ANTHROPIC_BASE_URL at an in-process server on loopback
 * and a throwaway HOME. It sends its real system prompt and tool schemas (~19K tokens of
 * the Qwen3 tokenizer) to /v1/messages; the served model is the agent test model with
 * quick_stop (agent_model.h), so each answer is one token and the exchange is fast.
 * Two runs in a row: both must complete without error, the second must report cached
 * input tokens > 0 (its prompt shares the first one's prefix), and every request the CLI
 * sent must have been answered 200. Each run is bounded by `timeout`.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent_model.h"
#include "http_test_util.h"

#ifndef CAIRN_SOURCE_DIR
#error "CAIRN_SOURCE_DIR must be defined"
#endif

#ifndef CAIRN_TIMEOUT_SCALE
#define CAIRN_TIMEOUT_SCALE 1
#endif
/* Seconds one `claude -p` run may take (sanitized and scalar builds prefill slower). */
#define RUN_TIMEOUT_S (240 * CAIRN_TIMEOUT_SCALE)

#define NPM CAIRN_BINARY_DIR "/tests/server/npm-claude"
#define WORK CAIRN_BINARY_DIR "/tests/server/claude-run"

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b)
        b[n] = '\0';
    fclose(f);
    return b;
}

/* One `claude -p` run; returns its JSON result (caller deletes) or NULL. */
static cJSON *claude(int port, const char *prompt, int run)
{
    char cmd[4096], out[512];
    snprintf(out, sizeof out, WORK "/run%d.json", run);
    snprintf(cmd, sizeof cmd,
             "cd '" WORK "/cwd' && env HOME='" WORK "/home' CLAUDE_CONFIG_DIR='" WORK "/home/.claude' "
             "ANTHROPIC_BASE_URL=http://127.0.0.1:%d ANTHROPIC_API_KEY=sk-cairn-test "
             "ANTHROPIC_MODEL=agent ANTHROPIC_SMALL_FAST_MODEL=agent "
             "ANTHROPIC_DEFAULT_HAIKU_MODEL=agent ANTHROPIC_DEFAULT_SONNET_MODEL=agent "
             "ANTHROPIC_DEFAULT_OPUS_MODEL=agent CLAUDE_CODE_MAX_OUTPUT_TOKENS=64 "
             "DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 DISABLE_AUTOUPDATER=1 "
             "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 API_TIMEOUT_MS=%d "
             "timeout %d '" NPM "/node_modules/.bin/claude' -p '%s' --model agent "
             "--output-format json --max-turns 1 < /dev/null > '%s' 2> '" WORK "/run%d.err'",
             port, RUN_TIMEOUT_S * 1000, RUN_TIMEOUT_S, prompt, out, run);
    int rc = system(cmd);
    char *text = slurp(out);
    if (rc != 0) {
        char errp[512];
        snprintf(errp, sizeof errp, WORK "/run%d.err", run);
        char *e = slurp(errp);
        fprintf(stderr, "claude run %d exited %d: %s\n%s\n", run, rc, text ? text : "", e ? e : "");
        free(e);
    }
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    if (!j)
        fprintf(stderr, "claude run %d: no JSON result (%s)\n", run, text ? text : "no output");
    free(text);
    return j;
}

static int usage_of(const cJSON *res, const char *key)
{
    const cJSON *u = cJSON_GetObjectItem(res, "usage");
    const cJSON *v = cJSON_GetObjectItem(u, key);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

static void test_claude_code_print_mode(void **state)
{
    signal(SIGPIPE, SIG_IGN);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "bash '%s/tests/server/setup_client.sh' '" NPM
             "' @anthropic-ai/claude-code@2", CAIRN_SOURCE_DIR);
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "setup_client.sh failed (%d): node/npm/registry unavailable?\n", rc);
    assert_int_equal(rc, 0);
    assert_int_equal(system("rm -rf '" WORK "' && mkdir -p '" WORK "/home' '" WORK "/cwd'"), 0);

    const char *dir = CAIRN_BINARY_DIR "/tests/server/agent-model-quick";
    assert_int_equal(agent_model_write(dir, 1, 131072, true), 0);
    cairn_server_options_t so;
    cairn_server_options_default(&so);
    so.port = 0;
    so.model_id = "agent";
    so.request_log_path = WORK "/requests.jsonl";
    test_server_t ts;
    assert_int_equal(test_server_start_dir(&ts, dir, "agent", &so, 128, 65536), 0);

    cJSON *r1 = claude(ts.port, "Say hello.", 1);
    cJSON *r2 = claude(ts.port, "Say hello again.", 2);
    test_server_stop(&ts);
    assert_non_null(r1);
    assert_non_null(r2);
    char *t1 = cJSON_PrintUnformatted(r1), *t2 = cJSON_PrintUnformatted(r2);
    fprintf(stderr, "run 1: %.600s\nrun 2: %.600s\n", t1, t2);
    free(t1);
    free(t2);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(r1, "is_error")));
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(r2, "is_error")));
    /* Run 1 met a fresh pool; run 2 sends the same system prompt and tools. */
    assert_true(usage_of(r1, "input_tokens") > 10000);
    assert_true(usage_of(r2, "cache_read_input_tokens") > 10000);
    cJSON_Delete(r1);
    cJSON_Delete(r2);

    /* Every request the CLI made was served. */
    char *log = slurp(WORK "/requests.jsonl");
    assert_non_null(log);
    int n = 0;
    for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *e = cJSON_Parse(line);
        assert_non_null(e);
        if (cJSON_GetObjectItem(e, "status")->valueint != 200)
            fprintf(stderr, "request not served: %s\n", line);
        assert_int_equal(cJSON_GetObjectItem(e, "status")->valueint, 200);
        cJSON_Delete(e);
        n++;
    }
    free(log);
    assert_true(n >= 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_claude_code_print_mode)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
