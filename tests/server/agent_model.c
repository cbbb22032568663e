/*
 * agent_model.c — see agent_model.h. Test code: plain libc, no failure injection.
 */
#include "agent_model.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/synth.h"

static const char *const extra_tokens[] = {
    "<think>\nThe user wants the weather in Paris.\n</think>\n\n",
    "<tool_call>\n{\"name\": \"get_weather\", ",
    "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
    "It is sunny in Paris.",
    "<tool_call>\n{not json}\n</tool_call>",
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n",
    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
    /* one piece: parentheses, or clang's -Wstring-concatenation takes it for a lost comma */
    ("<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"echo cairn-tool-ok\", "
     "\"description\": \"Print the marker\"}}\n</tool_call>"),
    "cairn-tool-ok",
};

/* Written into dir/.complete: a folder written by another version is rewritten. */
static const char VERSION[] = "agent-model 4";

const char *agent_bias_tool_call(void)
{
    return "{\"151669\": 100, \"151670\": 90, \"151671\": 80, \"151643\": 70}";
}

const char *agent_bias_answer(void) { return "{\"151672\": 100, \"151643\": 70}"; }

const char *agent_bias_bad_call(void) { return "{\"151673\": 100, \"151643\": 70}"; }

/* Text of turn t's whole call token. */
static void turn_call_text(int t, char *buf, size_t n)
{
    snprintf(buf, n, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
             "\"Paris\", \"day\": %d}}\n</tool_call>", t);
}

const char *agent_bias_turn_call(int t)
{
    static char buf[128];
    if (t < 0 || t >= AGENT_TURNS)
        return NULL;
    snprintf(buf, sizeof buf, "{\"%d\": 100, \"%d\": 90, \"%d\": 70}", AGENT_T_THINK,
             AGENT_T_TURN0 + t, AGENT_EOT);
    return buf;
}

const char *agent_bias_xml_call(void)
{
    return "{\"151669\": 100, \"151674\": 90, \"151675\": 80, \"151643\": 70}";
}

static char *slurp_cmd(const char *cmd, size_t *len)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return NULL;
    size_t cap = 1 << 20, n = 0;
    char *b = malloc(cap);
    size_t got;
    while (b && (got = fread(b + n, 1, cap - n - 1, p)) > 0) {
        n += got;
        if (cap - n < 4096) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                b = NULL;
            }
            b = nb;
        }
    }
    int st = pclose(p);
    if (!b || st != 0) {
        free(b);
        return NULL;
    }
    b[n] = '\0';
    *len = n;
    return b;
}

static cJSON *read_json(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    cJSON *j = NULL;
    if (b && fread(b, 1, (size_t)n, f) == (size_t)n) {
        b[n] = '\0';
        j = cJSON_Parse(b);
    }
    free(b);
    fclose(f);
    return j;
}

static int write_file(const char *dir, const char *name, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t n = strlen(text);
    int rc = fwrite(text, 1, n, f) == n ? 0 : -1;
    return fclose(f) || rc ? -1 : 0;
}

static int write_json(const char *dir, const char *name, const cJSON *j)
{
    char *t = cJSON_Print(j);
    int rc = t ? write_file(dir, name, t) : -1;
    free(t);
    return rc;
}

/* config.json / generation_config.json: the Qwen3 tokenizer's eos ids. */
static int patch_ids(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cJSON *j = read_json(path);
    if (!j)
        return -1;
    cJSON_DeleteItemFromObject(j, "eos_token_id");
    cJSON_DeleteItemFromObject(j, "bos_token_id");
    cJSON_DeleteItemFromObject(j, "pad_token_id");
    int ids[3] = {151645, AGENT_EOT, AGENT_T_MARKER};
    cJSON_AddItemToObject(j, "eos_token_id", cJSON_CreateIntArray(ids, 3));
    cJSON_AddNullToObject(j, "bos_token_id");
    cJSON_AddNumberToObject(j, "pad_token_id", AGENT_EOT);
    int rc = write_json(dir, name, j);
    cJSON_Delete(j);
    return rc;
}

int agent_model_write(const char *dir, int n_layers, int max_pos)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/.complete", dir);
    char seen[64] = "";
    FILE *cf = fopen(path, "rb");
    if (cf) {
        size_t got = fread(seen, 1, sizeof seen - 1, cf);
        seen[got] = '\0';
        fclose(cf);
        if (!strcmp(seen, VERSION))
            return 0;
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (system(cmd) != 0)
        return -1;
    cairn_synth_options_t o;
    cairn_synth_options_default(&o);
    cairn_synth_options_preset("tiny", &o);
    o.arch = CAIRN_SYNTH_QWEN3;
    o.n_layers = n_layers;
    o.vocab = AGENT_VOCAB;
    o.max_pos = max_pos;
    o.tied = true;
    o.seed = 13;
    char err[512] = "";
    if (cairn_synth_write(dir, &o, err, sizeof err) != 0) {
        fprintf(stderr, "agent_model: synth: %s\n", err);
        return -1;
    }
    /* The real Qwen3 tokenizer, plus the answer pieces as added (non-special) tokens. */
    size_t len = 0;
    snprintf(cmd, sizeof cmd, "xz -dc '%s/tokenizers/qwen3/tokenizer.json.xz'", CAIRN_FIXTURES_DIR);
    char *text = slurp_cmd(cmd, &len);
    cJSON *tok = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    if (!tok) {
        fprintf(stderr, "agent_model: cannot read the Qwen3 tokenizer (%s)\n", cmd);
        return -1;
    }
    cJSON *added = cJSON_GetObjectItem(tok, "added_tokens");
    for (size_t i = 0; i < sizeof extra_tokens / sizeof *extra_tokens; i++) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", AGENT_T_THINK + (int)i);
        cJSON_AddStringToObject(a, "content", extra_tokens[i]);
        cJSON_AddBoolToObject(a, "single_word", 0);
        cJSON_AddBoolToObject(a, "lstrip", 0);
        cJSON_AddBoolToObject(a, "rstrip", 0);
        cJSON_AddBoolToObject(a, "normalized", 0);
        cJSON_AddBoolToObject(a, "special", 0);
        cJSON_AddItemToArray(added, a);
    }
    for (int t = 0; t < AGENT_TURNS; t++) {
        char piece[160];
        turn_call_text(t, piece, sizeof piece);
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", AGENT_T_TURN0 + t);
        cJSON_AddStringToObject(a, "content", piece);
        cJSON_AddBoolToObject(a, "single_word", 0);
        cJSON_AddBoolToObject(a, "lstrip", 0);
        cJSON_AddBoolToObject(a, "rstrip", 0);
        cJSON_AddBoolToObject(a, "normalized", 0);
        cJSON_AddBoolToObject(a, "special", 0);
        cJSON_AddItemToArray(added, a);
    }
    char *ttext = cJSON_PrintUnformatted(tok);
    cJSON_Delete(tok);
    int rc = ttext ? write_file(dir, "tokenizer.json", ttext) : -1;
    free(ttext);
    /* The real chat template and the special tokens' names. */
    snprintf(path, sizeof path, "%s/tokenizers/qwen3/tokenizer_config.json", CAIRN_FIXTURES_DIR);
    cJSON *cfg = read_json(path);
    const cJSON *tmpl = cJSON_GetObjectItem(cfg, "chat_template");
    if (rc || !cJSON_IsString(tmpl)) {
        fprintf(stderr, "agent_model: cannot write the tokenizer or read the template\n");
        cJSON_Delete(cfg);
        return -1;
    }
    cJSON *tc = cJSON_CreateObject();
    cJSON_AddStringToObject(tc, "tokenizer_class", "Qwen2Tokenizer");
    cJSON_AddStringToObject(tc, "eos_token", "<|im_end|>");
    cJSON_AddStringToObject(tc, "pad_token", "<|endoftext|>");
    cJSON_AddNullToObject(tc, "bos_token");
    cJSON_AddBoolToObject(tc, "add_bos_token", 0);
    cJSON_AddNumberToObject(tc, "model_max_length", max_pos);
    cJSON_AddStringToObject(tc, "chat_template", tmpl->valuestring);
    rc = write_json(dir, "tokenizer_config.json", tc);
    rc = rc ? rc : write_file(dir, "chat_template.jinja", tmpl->valuestring);
    cJSON_Delete(tc);
    cJSON_Delete(cfg);
    rc = rc ? rc : patch_ids(dir, "config.json");
    rc = rc ? rc : patch_ids(dir, "generation_config.json");
    snprintf(path, sizeof path, "%s/.complete", dir);
    rc = rc ? rc : write_file(dir, ".complete", VERSION);
    if (rc)
        fprintf(stderr, "agent_model: writing %s failed: %s\n", dir, strerror(errno));
    return rc;
}
