/*
 * test_agent_cli.c — a real agent CLI against the server: Claude Code
 * (`@anthropic-ai/claude-code` from npm, installed into the build tree by setup_client.sh)
 * in print mode, headless, with ANTHROPIC_BASE_URL at an in-process server on loopback
 * and a throwaway HOME. It sends its real system prompt and tool schemas (~19K tokens of
 * the Qwen3 tokenizer) to /v1/messages; the served model is the agent test model
 * (agent_model.h), its answers forced by a logit_bias every request carries
 * (CLAUDE_CODE_EXTRA_BODY). Three runs: "Hello" twice (the second must find all but its
 * last turn in the cache), then an agent loop: the model calls Claude Code's Bash tool,
 * Claude Code runs it and sends the output back (a prompt that is again mostly cached),
 * the model answers text. Every run must succeed and every request be answered 200.
 * Each run is bounded by `timeout`.
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
#include "util/util.h"

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

/*
 * One `claude -p` run with allowed tools `tools` ("" for none) and at most max_turns
 * model turns; `bias` is the logit_bias object that every request of the run carries
 * (CLAUDE_CODE_EXTRA_BODY, with repetition_penalty 1e6 and temperature 0: agent_model.h).
 * Returns its JSON result (caller deletes) or NULL; *secs the run's wall time.
 */
static cJSON *claude(int port, const char *prompt, const char *bias, const char *tools,
                     int max_turns, int run, double *secs)
{
    char cmd[8192], out[512];
    snprintf(out, sizeof out, WORK "/run%d.json", run);
    snprintf(cmd, sizeof cmd,
             "cd '" WORK "/cwd' && env HOME='" WORK "/home' CLAUDE_CONFIG_DIR='" WORK "/home/.claude' "
             "ANTHROPIC_BASE_URL=http://127.0.0.1:%d ANTHROPIC_API_KEY=sk-cairn-test "
             "ANTHROPIC_MODEL=agent ANTHROPIC_SMALL_FAST_MODEL=agent "
             "ANTHROPIC_DEFAULT_HAIKU_MODEL=agent ANTHROPIC_DEFAULT_SONNET_MODEL=agent "
             "ANTHROPIC_DEFAULT_OPUS_MODEL=agent "
             "CLAUDE_CODE_EXTRA_BODY='{\"logit_bias\": %s, \"repetition_penalty\": 1e6, "
             "\"temperature\": 0}' "
             "DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 DISABLE_AUTOUPDATER=1 "
             "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 API_TIMEOUT_MS=%d CLAUDE_STREAM_IDLE_TIMEOUT_MS=%d "
             "timeout %d '" NPM "/node_modules/.bin/claude' -p '%s' --model agent "
             "--output-format json --max-turns %d %s%s%s < /dev/null > '%s' 2> '" WORK "/run%d.err'",
             port, bias, RUN_TIMEOUT_S * 1000, RUN_TIMEOUT_S * 1000, RUN_TIMEOUT_S, prompt,
             max_turns,
             tools[0] ? "--allowedTools '" : "", tools, tools[0] ? "'" : "", out, run);
    double t0 = cairn_now_seconds();
    int rc = system(cmd);
    *secs = cairn_now_seconds() - t0;
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

/* The request log's lines (requests.jsonl), parsed; *n their count. */
static cJSON *request_log(int *n)
{
    char *log = slurp(WORK "/requests.jsonl");
    assert_non_null(log);
    cJSON *all = cJSON_CreateArray();
    *n = 0;
    for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *e = cJSON_Parse(line);
        assert_non_null(e);
        cJSON_AddItemToArray(all, e);
        (*n)++;
    }
    free(log);
    return all;
}

static int log_int(const cJSON *e, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(e, key);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

static void test_claude_code_print_mode(void **state)
{
    signal(SIGPIPE, SIG_IGN);
    char cmd[4096];
    /* Pinned: the version these assertions were measured with. 2.1.332 (the newest on
     * 2026-12-01) sends an 11.7K-token first request whose second session reuses only 82%
     * (9600 of 11719 tokens): something in it past token 9600 varies per session, not yet
     * found; unpin when it is. */
    snprintf(cmd, sizeof cmd, "bash '%s/tests/server/setup_client.sh' '" NPM
             "' @anthropic-ai/claude-code@2.1.197", CAIRN_SOURCE_DIR);
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "setup_client.sh failed (%d): node/npm/registry unavailable?\n", rc);
    assert_int_equal(rc, 0);
    assert_int_equal(system("rm -rf '" WORK "' && mkdir -p '" WORK "/home' '" WORK "/cwd'"), 0);

    const char *dir = CAIRN_BINARY_DIR "/tests/server/agent-model-cli";
    assert_int_equal(agent_model_write(dir, 1, 131072), 0);
    cairn_server_options_t so;
    cairn_server_options_default(&so);
    so.port = 0;
    so.model_id = "agent";
    so.request_log_path = WORK "/requests.jsonl";
    test_server_t ts;
    /* A 32K context: Claude Code's max_tokens (32000 by default) is lowered to what the
     * context leaves, not refused. */
    assert_int_equal(test_server_start_dir(&ts, dir, "agent", &so, 128, 32768), 0);

    /* Runs 1 and 2: "Hello", then the end. Run 3: the Bash call (its turn ends at the
     * marker token), Claude Code runs it and sends its output back; in that prompt the
     * call and the marker are penalized, so the model answers text. */
    char hello[128], tool[256];
    snprintf(hello, sizeof hello, "{\"%d\": 100, \"%d\": 70}", AGENT_HELLO, AGENT_EOT);
    snprintf(tool, sizeof tool, "{\"%d\": 100, \"%d\": 90, \"%d\": 80, \"%d\": 70}",
             AGENT_T_BASH, AGENT_T_MARKER, AGENT_T_ANSWER, AGENT_EOT);
    double s1, s2, s3;
    cJSON *r1 = claude(ts.port, "Say hello.", hello, "", 1, 1, &s1);
    cJSON *r2 = claude(ts.port, "Say hello again.", hello, "", 1, 2, &s2);
    cJSON *r3 = claude(ts.port, "Print the marker with Bash.", tool, "Bash(echo cairn-tool-ok)", 3,
                       3, &s3);
    test_server_stop(&ts);
    assert_non_null(r1);
    assert_non_null(r2);
    assert_non_null(r3);
    char *t1 = cJSON_PrintUnformatted(r1), *t2 = cJSON_PrintUnformatted(r2);
    char *t3 = cJSON_PrintUnformatted(r3);
    fprintf(stderr, "run 1 (%.1f s): %.700s\nrun 2 (%.1f s): %.700s\nrun 3 (%.1f s): %.900s\n", s1,
            t1, s2, t2, s3, t3);
    free(t1);
    free(t2);
    free(t3);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(r1, "is_error")));
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(r2, "is_error")));
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(r3, "is_error")));
    assert_string_equal(cJSON_GetObjectItem(r1, "result")->valuestring, "Hello");
    assert_string_equal(cJSON_GetObjectItem(r3, "result")->valuestring, "It is sunny in Paris.");
    /* Run 1 met a fresh pool; run 2 sends the same system prompt and tools: all but its
     * last user turn comes from the cache (Claude Code's per-request billing header is
     * not part of the prompt). */
    int in1 = usage_of(r1, "input_tokens"), in2 = usage_of(r2, "input_tokens");
    int cached2 = usage_of(r2, "cache_read_input_tokens");
    assert_true(in1 > 10000);
    assert_true(cached2 >= 9 * (in2 + cached2) / 10);

    /* Every request the CLI made was served; run 3 made two, the second (the tool
     * result) with its prompt cached. */
    int n = 0;
    cJSON *log = request_log(&n);
    const cJSON *e;
    cJSON_ArrayForEach(e, log) {
        if (log_int(e, "status") != 200)
            fprintf(stderr, "request not served: %s\n", cJSON_PrintUnformatted(e));
        assert_int_equal(log_int(e, "status"), 200);
    }
    assert_true(n >= 4);
    const cJSON *last = cJSON_GetArrayItem(log, n - 1), *call = cJSON_GetArrayItem(log, n - 2);
    fprintf(stderr, "tool turn: prompt %d cached %d; its result turn: prompt %d cached %d\n",
            log_int(call, "prompt_tokens"), log_int(call, "cached_tokens"),
            log_int(last, "prompt_tokens"), log_int(last, "cached_tokens"));
    /* Run 3's first request is a new session with another prompt: its system prompt and
     * tools are run 1's, but Claude Code's billing header differs (it is derived from the
     * prompt), so without the header dropped only a block or so would be cached. What
     * follows the user's text (the agent list Claude Code sends after it) is computed. */
    assert_true(log_int(call, "cached_tokens") >= 8 * log_int(call, "prompt_tokens") / 10);
    assert_true(log_int(last, "cached_tokens") >= 9 * log_int(last, "prompt_tokens") / 10);
    assert_true(cJSON_GetObjectItem(r3, "num_turns")->valueint >= 2);
    cJSON_Delete(log);
    cJSON_Delete(r1);
    cJSON_Delete(r2);
    cJSON_Delete(r3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_claude_code_print_mode)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
