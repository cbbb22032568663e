/*
 * cmd_check_tokenizer.c — `cairn check-tokenizer TOKENIZER_DIR REFERENCE_JSON`: checks a
 * tokenizer (and its chat template) against a reference file computed by HF
 * transformers/tokenizers.
 *
 * Reference format (the fixtures' reference.json):
 *   {"cases": [{"text": "...", "ids": [...], "add_special_tokens": false?}, ...],
 *    "chat":  [{"label": "...", "messages": [...], "kwargs": {...}?,
 *               "add_generation_prompt": true, "text": "...", "ids": [...]}, ...]}
 * "chat" may also be a single object; a top-level "add_special_tokens" sets the default
 * (false). For a case, text is encoded and compared with ids. For a chat entry, the
 * template is rendered with {messages, add_generation_prompt, bos_token, eos_token, and
 * every kwargs key}, compared byte for byte with text, and the rendered text is encoded
 * (special tokens recognized) and compared with ids.
 *
 * Every failure prints the first difference (id index with expected/got, or byte offset
 * with context); the last line is "N passed, N failed". Exit 0 only if none failed, 1 on
 * a failure or a load error, 2 on usage.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "cairn/chat_template.h"
#include "cairn/tokenizer.h"
#include "cli/cli.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: cairn check-tokenizer TOKENIZER_DIR REFERENCE_JSON [--verbose]\n"
            "\n"
            "TOKENIZER_DIR holds tokenizer.json, tokenizer_config.json and optionally\n"
            "chat_template.jinja, or is a .gguf file (its tokenizer and chat template). Every \"cases\" entry (text -> ids) and every \"chat\" entry\n"
            "(messages -> rendered text -> ids) of REFERENCE_JSON is checked; each failure is\n"
            "printed with its first difference, then \"N passed, N failed\".\n"
            "\n"
            "  --verbose   also print a line for every passing check\n");
}

/* A short printable name for a case: its label, or the start of its text (escaped). */
static void make_name(char *out, size_t cap, const char *kind, int index, const char *label,
                      const char *text)
{
    size_t w = (size_t)snprintf(out, cap, "%s %d ", kind, index);
    if (label) {
        snprintf(out + w, cap - w, "'%s'", label);
        return;
    }
    out[w++] = '"';
    for (size_t i = 0; text[i] && w + 8 < cap; i++) {
        unsigned char c = (unsigned char)text[i];
        if (i >= 40 && (c & 0xC0) != 0x80) {
            w += (size_t)snprintf(out + w, cap - w, "...");
            break;
        }
        if (c == '\n') w += (size_t)snprintf(out + w, cap - w, "\\n");
        else if (c == '"' || c == '\\') w += (size_t)snprintf(out + w, cap - w, "\\%c", c);
        else if (c < 0x20 || c == 0x7F) w += (size_t)snprintf(out + w, cap - w, "\\x%02x", c);
        else out[w++] = (char)c;
    }
    snprintf(out + w, cap - w, "\"");
}

/* Compares ids with the expected JSON array; prints the first difference. */
static bool compare_ids(const char *name, const int32_t *got, size_t n, const cJSON *exp)
{
    size_t en = (size_t)cJSON_GetArraySize(exp);
    for (size_t i = 0; i < n || i < en; i++) {
        const cJSON *e = i < en ? cJSON_GetArrayItem(exp, (int)i) : NULL;
        long ev = e && cJSON_IsNumber(e) ? (long)e->valuedouble : -1;
        if (i < n && i < en && got[i] == ev) continue;
        printf("%s: ids differ at index %zu: expected ", name, i);
        if (i < en) printf("%ld", ev); else fputs("(end)", stdout);
        fputs(", got ", stdout);
        if (i < n) printf("%d", got[i]); else fputs("(end)", stdout);
        printf(" (%zu expected ids, %zu got)\n", en, n);
        return false;
    }
    return true;
}

/* Compares rendered text; prints the first differing byte offset with context. */
static bool compare_text(const char *name, const char *got, size_t n, const char *exp)
{
    size_t en = strlen(exp), i = 0;
    while (i < n && i < en && got[i] == exp[i]) i++;
    if (i == n && i == en) return true;
    size_t from = i > 30 ? i - 30 : 0;
    printf("%s: text differs at byte %zu\n    expected: ", name, i);
    cairn_cli_print_escaped(exp + from, (en - from) > 70 ? 70 : en - from);
    fputs("\n    got:      ", stdout);
    cairn_cli_print_escaped(got + from, (n - from) > 70 ? 70 : n - from);
    printf("\n    (%zu expected bytes, %zu got)\n", en, n);
    return false;
}

static bool encode_and_compare(const char *name, const cairn_tokenizer_t *tok, const char *text,
                               size_t len, bool add_special, const cJSON *exp)
{
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = cairn_tokenizer_encode(tok, text, len, add_special, &ids, &n);
    if (rc) {
        printf("%s: encode failed: %s\n", name, cairn_strerror(rc));
        return false;
    }
    bool ok = compare_ids(name, ids, n, exp);
    cairn_free(ids);
    return ok;
}

static bool flag(const cJSON *obj, const char *key, bool dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* Builds the render context of one chat entry (caller deletes). */
static cJSON *chat_context(const cairn_tokenizer_t *tok, const cJSON *entry)
{
    cJSON *ctx = cJSON_CreateObject();
    if (!ctx) return NULL;
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(entry, "messages");
    const cJSON *kwargs = cJSON_GetObjectItemCaseSensitive(entry, "kwargs"), *kv;
    cJSON *m = msgs ? cJSON_Duplicate(msgs, true) : cJSON_CreateArray();
    if (!m || !cJSON_AddItemToObject(ctx, "messages", m)) goto fail;
    if (!cJSON_AddBoolToObject(ctx, "add_generation_prompt", flag(entry, "add_generation_prompt", false)))
        goto fail;
    const char *bos = cairn_tokenizer_bos_token(tok), *eos = cairn_tokenizer_eos_token(tok);
    if (bos && !cJSON_AddStringToObject(ctx, "bos_token", bos)) goto fail;
    if (eos && !cJSON_AddStringToObject(ctx, "eos_token", eos)) goto fail;
    cJSON_ArrayForEach(kv, kwargs) {
        cJSON *dup = cJSON_Duplicate(kv, true);
        if (!dup) goto fail;
        cJSON_DeleteItemFromObjectCaseSensitive(ctx, kv->string);
        cJSON_AddItemToObject(ctx, kv->string, dup);
    }
    return ctx;
fail:
    cJSON_Delete(ctx);
    return NULL;
}

static bool check_chat(const cairn_tokenizer_t *tok, const cairn_chat_template_t *tmpl,
                       const char *tmpl_err, const cJSON *entry, int index, bool dflt_special,
                       bool verbose)
{
    const cJSON *label = cJSON_GetObjectItemCaseSensitive(entry, "label");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(entry, "text");
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(entry, "ids");
    char name[256];
    make_name(name, sizeof name, "chat", index,
              cJSON_IsString(label) ? label->valuestring : "(unlabelled)", NULL);
    if (!cJSON_IsString(text) || !cJSON_IsArray(ids)) {
        printf("%s: malformed entry (needs text and ids)\n", name);
        return false;
    }
    if (!tmpl) {
        printf("%s: %s\n", name, tmpl_err);
        return false;
    }
    cJSON *ctx = chat_context(tok, entry);
    if (!ctx) {
        printf("%s: out of memory\n", name);
        return false;
    }
    char err[512] = "";
    char *out = NULL;
    size_t n = 0;
    int rc = cairn_chat_template_render(tmpl, ctx, &out, &n, err, sizeof err);
    cJSON_Delete(ctx);
    if (rc) {
        printf("%s: render failed: %s (%s)\n", name, err, cairn_strerror(rc));
        return false;
    }
    bool ok = compare_text(name, out, n, text->valuestring);
    bool special = flag(entry, "add_special_tokens", dflt_special);
    if (ok) {
        ok = encode_and_compare(name, tok, out, n, special, ids);
    } else {
        /* Tell template problems from tokenizer problems: does the expected text encode? */
        char name2[300];
        snprintf(name2, sizeof name2, "%s (expected text)", name);
        if (encode_and_compare(name2, tok, text->valuestring, strlen(text->valuestring), special, ids))
            printf("%s: ids match\n", name2);
    }
    if (ok && verbose) printf("%s: ok\n", name);
    cairn_free(out);
    return ok;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
            if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
            } else {
                buf[n] = '\0';
                *len = (size_t)n;
            }
        }
    }
    fclose(f);
    return buf;
}

static int run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"verbose", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    bool verbose = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
        switch (c) {
        case 'v': verbose = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (argc - optind != 2) {
        usage(stderr);
        return 2;
    }
    const char *dir = argv[optind], *ref_path = argv[optind + 1];
    char err[512];
    cairn_tokenizer_t *tok = NULL;
    int rc = cairn_tokenizer_load(dir, &tok, err, sizeof err);
    if (rc) {
        fprintf(stderr, "cairn check-tokenizer: %s: %s (%s)\n", dir, err, cairn_strerror(rc));
        return 1;
    }
    size_t len = 0;
    char *text = read_all(ref_path, &len);
    cJSON *ref = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    if (!ref || !cJSON_IsObject(ref)) {
        fprintf(stderr, "cairn check-tokenizer: %s: %s\n", ref_path,
                text ? "not a JSON object" : "cannot read");
        cJSON_Delete(ref);
        cairn_tokenizer_destroy(tok);
        return 1;
    }
    bool dflt_special = flag(ref, "add_special_tokens", false);
    int passed = 0, failed = 0, index = 0;
    const cJSON *e, *cases = cJSON_GetObjectItemCaseSensitive(ref, "cases");
    cJSON_ArrayForEach(e, cases) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "text");
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(e, "ids");
        bool ok;
        if (!cJSON_IsString(t) || !cJSON_IsArray(ids)) {
            printf("case %d: malformed entry (needs text and ids)\n", index);
            ok = false;
        } else {
            char name[256];
            make_name(name, sizeof name, "case", index, NULL, t->valuestring);
            ok = encode_and_compare(name, tok, t->valuestring, strlen(t->valuestring),
                                    flag(e, "add_special_tokens", dflt_special), ids);
            if (ok && verbose) printf("%s: ok\n", name);
        }
        ok ? passed++ : failed++;
        index++;
    }

    const cJSON *chat = cJSON_GetObjectItemCaseSensitive(ref, "chat");
    if (chat) {
        const char *src = cairn_tokenizer_chat_template(tok, NULL);
        cairn_chat_template_t *tmpl = NULL;
        char tmpl_err[600] = "the tokenizer has no chat template";
        if (src) {
            char cerr[512] = "";
            int crc = cairn_chat_template_compile(src, strlen(src), &tmpl, cerr, sizeof cerr);
            if (crc) snprintf(tmpl_err, sizeof tmpl_err, "chat template failed to compile: %s (%s)",
                              cerr, cairn_strerror(crc));
        }
        index = 0;
        if (cJSON_IsObject(chat)) {
            check_chat(tok, tmpl, tmpl_err, chat, index, dflt_special, verbose) ? passed++ : failed++;
        } else {
            cJSON_ArrayForEach(e, chat) {
                check_chat(tok, tmpl, tmpl_err, e, index++, dflt_special, verbose) ? passed++ : failed++;
            }
        }
        cairn_chat_template_destroy(tmpl);
    }
    printf("%d passed, %d failed\n", passed, failed);
    cJSON_Delete(ref);
    cairn_tokenizer_destroy(tok);
    return failed ? 1 : 0;
}

CAIRN_CLI_COMMAND(check_tokenizer, "check-tokenizer",
                  "check a tokenizer and chat template against a reference file", run)
