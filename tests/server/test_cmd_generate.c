/*
 * test_cmd_generate.c — `cairn generate` end to end: runs the built binary
 * (CAIRN_BINARY_DIR/src/cairn) with popen on the qwen3 fixture and checks that greedy
 * output equals the fixture's greedy_ids for the chat_short case, both from exact
 * --prompt-ids and from --chat rendering of the same conversation through the model's
 * chat template; that a second run of the same prompt restores it from the cold tier, gives
 * the same ids and reports hot / restored / computed tokens on its summary line; plus the
 * usage errors (exit status 2) and a missing model (1).
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cairn/tokenizer.h"

#define MODEL_DIR CAIRN_FIXTURES_DIR "/models/qwen3"
#define CAIRN_BIN CAIRN_BINARY_DIR "/src/cairn"

static cJSON *g_case; /* the chat_short case of reference.json */
static cJSON *g_root;

static int group_setup(void **state)
{
    FILE *f = fopen(MODEL_DIR "/reference.json", "rb");
    if (!f) {
        fprintf(stderr, "missing fixture %s/reference.json\n", MODEL_DIR);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        return -1;
    }
    text[n] = 0;
    fclose(f);
    g_root = cJSON_Parse(text);
    free(text);
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g_root, "cases"))
        if (strcmp(cJSON_GetObjectItem(c, "name")->valuestring, "chat_short") == 0)
            g_case = (cJSON *)c;
    return g_case ? 0 : -1;
}

static int group_teardown(void **state)
{
    cJSON_Delete(g_root);
    return 0;
}

/* Runs a shell command line; returns its exit status and its stdout in out. */
static int run_cmd(const char *cmd, char *out, size_t cap)
{
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* "a,b,c" of a JSON id array. */
static void join_ids(const cJSON *arr, char *buf, size_t cap)
{
    size_t len = 0;
    const cJSON *it;
    buf[0] = 0;
    cJSON_ArrayForEach(it, arr)
        len += (size_t)snprintf(buf + len, cap - len, "%s%d", len ? "," : "", it->valueint);
}

static void test_greedy_ids_from_prompt_ids(void **state)
{
    static char ids[8192], expect[8192], cmd[16384], out[16384];
    join_ids(cJSON_GetObjectItem(g_case, "prompt_ids"), ids, sizeof(ids));
    const cJSON *greedy = cJSON_GetObjectItem(g_case, "greedy_ids");
    join_ids(greedy, expect, sizeof(expect));
    snprintf(cmd, sizeof(cmd),
             "%s generate %s --prompt-ids %s --max-tokens %d --temperature 0 --threads 1 --no-cold "
             "--print-ids 2>/dev/null",
             CAIRN_BIN, MODEL_DIR, ids, cJSON_GetArraySize(greedy));
    assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
    out[strcspn(out, "\n")] = 0;
    assert_string_equal(out, expect);
}

/* Splits the chat_short prompt back into its system and user messages (ChatML), then asks
 * `generate --chat` for them: the template must rebuild exactly the same prompt. */
static void test_greedy_ids_from_chat(void **state)
{
    cairn_tokenizer_t *tok = NULL;
    char err[256];
    assert_int_equal(cairn_tokenizer_load(MODEL_DIR, &tok, err, sizeof(err)), 0);
    const cJSON *pj = cJSON_GetObjectItem(g_case, "prompt_ids");
    int n = cJSON_GetArraySize(pj);
    int32_t *pid = calloc((size_t)n, sizeof(int32_t));
    for (int i = 0; i < n; i++)
        pid[i] = cJSON_GetArrayItem(pj, i)->valueint;
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(cairn_tokenizer_decode(tok, pid, (size_t)n, false, &text, &len), 0);
    const char *sys_tag = "<|im_start|>system\n", *user_tag = "<|im_start|>user\n", *end = "<|im_end|>";
    char *sys = strstr(text, sys_tag), *user = strstr(text, user_tag);
    assert_non_null(sys);
    assert_non_null(user);
    sys += strlen(sys_tag);
    user += strlen(user_tag);
    *strstr(sys, end) = 0;
    *strstr(user, end) = 0;
    /* The messages are plain text without quotes, so single-quoting is safe. */
    assert_null(strchr(sys, '\''));
    assert_null(strchr(user, '\''));

    static char expect[8192], cmd[16384], out[16384];
    const cJSON *greedy = cJSON_GetObjectItem(g_case, "greedy_ids");
    join_ids(greedy, expect, sizeof(expect));
    snprintf(cmd, sizeof(cmd),
             "%s generate %s --chat --system '%s' --user '%s' --max-tokens %d --temperature 0 "
             "--threads 1 --no-cold --print-ids 2>&1 >/dev/null | grep -c 'prompt %d tokens: 0 hot, 0 restored, %d computed at'",
             CAIRN_BIN, MODEL_DIR, sys, user, cJSON_GetArraySize(greedy), n, n);
    assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0); /* the summary names the prompt length */
    snprintf(cmd, sizeof(cmd),
             "%s generate %s --chat --system '%s' --user '%s' --max-tokens %d --temperature 0 "
             "--threads 1 --no-cold --print-ids 2>/dev/null",
             CAIRN_BIN, MODEL_DIR, sys, user, cJSON_GetArraySize(greedy));
    assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
    out[strcspn(out, "\n")] = 0;
    assert_string_equal(out, expect);

    /* Text mode streams the decoded text of the same ids. */
    char *gtext = NULL;
    size_t glen = 0;
    int32_t gid[256];
    int ng = cJSON_GetArraySize(greedy);
    for (int i = 0; i < ng; i++)
        gid[i] = cJSON_GetArrayItem(greedy, i)->valueint;
    assert_int_equal(cairn_tokenizer_decode(tok, gid, (size_t)ng, true, &gtext, &glen), 0);
    snprintf(cmd, sizeof(cmd),
             "%s generate %s --chat --system '%s' -p '%s' --max-tokens %d --temperature 0 "
             "--threads 1 --no-cold 2>/dev/null",
             CAIRN_BIN, MODEL_DIR, sys, user, ng);
    assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
    assert_int_equal(strlen(out), glen + 1);
    assert_memory_equal(out, gtext, glen);
    cairn_free(gtext);
    cairn_free(text);
    free(pid);
    cairn_tokenizer_destroy(tok);
}

/* Reads the summary line's token split out of a run's stderr; false when it is missing. */
static bool summary_split(const char *err, int *prompt, int *hot, int *restored, int *computed)
{
    const char *l = strstr(err, "cairn: prompt ");
    double rate;
    return l && sscanf(l, "cairn: prompt %d tokens: %d hot, %d restored, %d computed at %lf tok/s;",
                       prompt, hot, restored, computed, &rate) == 5;
}

/* The same prompt twice with one cold-tier directory: the first run computes all of it,
 * the second restores the prompt's full blocks but the last token from disk, computes only
 * the rest, produces the same greedy ids, and says so on its one summary line. */
static void test_restored_prompt_summary(void **state)
{
    static char ids[8192], expect[8192], cmd[16384], out[16384], err_path[64];
    char dir[] = "/tmp/cairn-generate-XXXXXX";
    assert_non_null(mkdtemp(dir));
    snprintf(err_path, sizeof(err_path), "%s/stderr", dir);
    join_ids(cJSON_GetObjectItem(g_case, "prompt_ids"), ids, sizeof(ids));
    const int n = cJSON_GetArraySize(cJSON_GetObjectItem(g_case, "prompt_ids"));
    const cJSON *greedy = cJSON_GetObjectItem(g_case, "greedy_ids");
    join_ids(greedy, expect, sizeof(expect));
    /* The default block size (16 tokens): the full blocks before the last prompt token. */
    const int full = (n - 1) / 16 * 16;
    assert_true(full > 0);
    for (int run = 0; run < 2; run++) {
        snprintf(cmd, sizeof(cmd),
                 "env -u CAIRN_KV_BLOCK_SIZE %s generate %s --prompt-ids %s --max-tokens %d "
                 "--temperature 0 --threads 1 --cache-dir %s/cold --print-ids 2>%s",
                 CAIRN_BIN, MODEL_DIR, ids, cJSON_GetArraySize(greedy), dir, err_path);
        assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
        out[strcspn(out, "\n")] = 0;
        assert_string_equal(out, expect);
        static char err[8192];
        FILE *f = fopen(err_path, "rb");
        assert_non_null(f);
        size_t len = fread(err, 1, sizeof(err) - 1, f);
        err[len] = 0;
        fclose(f);
        int prompt, hot, restored, computed;
        if (!summary_split(err, &prompt, &hot, &restored, &computed))
            fail_msg("no summary line in:\n%s", err);
        assert_int_equal(prompt, n);
        assert_int_equal(hot, 0);
        assert_int_equal(restored, run ? full : 0);
        assert_int_equal(computed, n - restored);
        assert_null(strstr(err, "from disk")); /* one line, not a second one for the cold tier */
    }
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_usage_errors(void **state)
{
    static char out[4096];
    const char *cases[] = {
        "generate " MODEL_DIR " -p hi --bogus",
        "generate " MODEL_DIR " -p hi --max-tokens 0",
        "generate " MODEL_DIR " -p hi --temperature x",
        "generate " MODEL_DIR,
        "generate -p hi",
        "generate " MODEL_DIR " --chat",
        "generate " MODEL_DIR " -p hi --prompt-ids 1,2",
        "generate " MODEL_DIR " --prompt-ids 1,x",
        "generate " MODEL_DIR " -p hi --kv-dtype int4",
        "generate " MODEL_DIR " -p hi --top-p 2",
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char cmd[1024];
        snprintf(cmd, sizeof(cmd), "%s %s 2>&1", CAIRN_BIN, cases[i]);
        int st = run_cmd(cmd, out, sizeof(out));
        if (st != 2)
            fprintf(stderr, "case %zu: %s -> %d: %s\n", i, cases[i], st, out);
        assert_int_equal(st, 2);
        assert_non_null(strstr(out, "cairn generate: "));
    }
    assert_int_equal(run_cmd(CAIRN_BIN " generate /nonexistent/model -p hi 2>&1", out, sizeof(out)), 1);
    assert_non_null(strstr(out, "not a model directory"));
    assert_int_equal(run_cmd(CAIRN_BIN " generate --help", out, sizeof(out)), 0);
    assert_non_null(strstr(out, "usage: cairn generate MODEL"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_ids_from_prompt_ids),
        cmocka_unit_test(test_greedy_ids_from_chat),
        cmocka_unit_test(test_restored_prompt_summary),
        cmocka_unit_test(test_usage_errors),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
