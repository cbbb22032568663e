/*
 * The tokenizer of a GGUF file (src/tokenizer/tokenizer_gguf.c, docs/FORMAT.md 3.6),
 * against independent references:
 *   - q256-bf16.gguf (its tokenizer written by llama.cpp's tools) encodes every string of
 *     models/tokenizer/reference.json (and the 224 of the Qwen3 fixture) exactly as the
 *     tokenizer.json of the same tokenizer does, to the ids HF computed; its vocabulary,
 *     special tokens and chat template are the folder's;
 *   - the real Qwen3 and Llama 3 tokenizers, written as llama.cpp's converter writes them
 *     (pre "qwen2", "llama-bpe"), equal their tokenizer.json on the 224 HF reference cases
 *     (and the CLI checks them with their chat templates: tests/tokenizer/CMakeLists.txt);
 *   - the "gpt-4o", "gpt-2" and "default" pre-tokenizers split like llama.cpp does on the
 *     239 strings (its ids, computed by peer-tok, in gguf_pre_llamacpp.json);
 *   - SentencePiece vocabularies (tokenizer.ggml.model "llama": scores, byte tokens, "▁",
 *     add_space_prefix on and off) encode those strings and 36 harder ones as llama.cpp
 *     does (spm-llama.gguf / spm-gemma.gguf and peer-tok's ids in spm_llamacpp.json, all
 *     written by make_spm_gguf.py), and decode back to the text;
 *   - metadata that does not describe a tokenizer we implement is an error naming it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include <cjson/cJSON.h>

#include "cairn/tokenizer.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"

#define Q256_GGUF CAIRN_FIXTURES_DIR "/gguf/q256/q256-bf16.gguf"
#define SMALL_DIR CAIRN_FIXTURES_DIR "/models/tokenizer"
#define TOK_DIR CAIRN_BINARY_DIR "/fixtures/tokenizers"
#define OUT_DIR CAIRN_BINARY_DIR "/fixtures/gguf_tokenizers"

static char err[512];

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    p[n] = 0;
    fclose(f);
    if (len)
        *len = (size_t)n;
    return p;
}

static cJSON *load_json(const char *path)
{
    char *text = slurp(path, NULL);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    return j;
}

static cairn_tokenizer_t *load(const char *path)
{
    cairn_tokenizer_t *t = NULL;
    int rc = cairn_tokenizer_load(path, &t, err, sizeof err);
    if (rc)
        fail_msg("%s: %s", path, err);
    return t;
}

/* The texts: models/tokenizer's cases, then tokenizers/qwen3's (the order of
 * gguf_pre_llamacpp.json). */
typedef struct {
    cJSON *small, *qwen3;
    const cJSON *texts[512];
    const cJSON *ids[512]; /* HF ids where the small tokenizer's reference has them */
    int n, n_small;
} texts_t;

static void load_texts(texts_t *t)
{
    memset(t, 0, sizeof *t);
    t->small = load_json(SMALL_DIR "/reference.json");
    t->qwen3 = load_json(CAIRN_FIXTURES_DIR "/tokenizers/qwen3/reference.json");
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(t->small, "cases"))
    {
        t->ids[t->n] = cJSON_GetObjectItem(c, "ids");
        t->texts[t->n++] = cJSON_GetObjectItem(c, "text");
    }
    t->n_small = t->n;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(t->qwen3, "cases"))
        t->texts[t->n++] = cJSON_GetObjectItem(c, "text");
}

static void free_texts(texts_t *t)
{
    cJSON_Delete(t->small);
    cJSON_Delete(t->qwen3);
}

static void assert_ids_json(const int32_t *got, size_t n, const cJSON *want, const char *what)
{
    size_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, want)
    {
        if (i >= n || got[i] != x->valueint)
            fail_msg("%s: id %zu: got %d, want %d", what, i, i < n ? got[i] : -1, x->valueint);
        i++;
    }
    if (i != n)
        fail_msg("%s: %zu ids, want %zu", what, n, i);
}

/* Encodes text with both tokenizers; the ids must be equal. */
static void assert_same_encoding(const cairn_tokenizer_t *a, const cairn_tokenizer_t *b,
                                 const char *text, const cJSON *want)
{
    int32_t *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0, len = strlen(text);
    assert_int_equal(cairn_tokenizer_encode(a, text, len, false, &x, &nx), 0);
    assert_int_equal(cairn_tokenizer_encode(b, text, len, false, &y, &ny), 0);
    if (nx != ny || (nx && memcmp(x, y, nx * sizeof *x)))
        fail_msg("'%.60s': the GGUF tokenizer and tokenizer.json disagree", text);
    if (want)
        assert_ids_json(x, nx, want, text);
    /* Decoding agrees too. */
    char *da = NULL, *db = NULL;
    size_t la, lb;
    assert_int_equal(cairn_tokenizer_decode(a, x, nx, false, &da, &la), 0);
    assert_int_equal(cairn_tokenizer_decode(b, y, ny, false, &db, &lb), 0);
    assert_int_equal(la, lb);
    assert_memory_equal(da, db, la);
    cairn_free(da);
    cairn_free(db);
    cairn_free(x);
    cairn_free(y);
}

static void test_fixture_gguf_equals_tokenizer_json(void **state)
{
    (void)state;
    cairn_tokenizer_t *g = load(Q256_GGUF), *j = load(SMALL_DIR);
    texts_t t;
    load_texts(&t);
    for (int i = 0; i < t.n; i++)
        assert_same_encoding(g, j, t.texts[i]->valuestring, i < t.n_small ? t.ids[i] : NULL);
    /* The same vocabulary, special tokens and specials' ids. */
    assert_int_equal(cairn_tokenizer_vocab_size(g), cairn_tokenizer_vocab_size(j));
    for (int32_t id = 0; id < (int32_t)cairn_tokenizer_vocab_size(j); id++) {
        assert_string_equal(cairn_tokenizer_token_text(g, id), cairn_tokenizer_token_text(j, id));
        assert_int_equal(cairn_tokenizer_is_special(g, id), cairn_tokenizer_is_special(j, id));
    }
    assert_int_equal(cairn_tokenizer_eos_id(g), 4095);
    assert_string_equal(cairn_tokenizer_eos_token(g), cairn_tokenizer_eos_token(j));
    assert_null(cairn_tokenizer_bos_token(g));
    assert_int_equal(cairn_tokenizer_piece_to_id(g, "<|im_start|>"), 4094);
    /* add_bos_token false: adding special tokens adds nothing. */
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(cairn_tokenizer_encode(g, "Hi", 2, true, &ids, &n), 0);
    int32_t *ids2 = NULL;
    size_t n2 = 0;
    assert_int_equal(cairn_tokenizer_encode(g, "Hi", 2, false, &ids2, &n2), 0);
    assert_int_equal(n, n2);
    cairn_free(ids);
    cairn_free(ids2);
    /* The chat template is the folder's chat_template.jinja, byte for byte. */
    char *jinja = slurp(SMALL_DIR "/chat_template.jinja", NULL);
    assert_non_null(cairn_tokenizer_chat_template(g, NULL));
    assert_string_equal(cairn_tokenizer_chat_template(g, NULL), jinja);
    assert_string_equal(cairn_tokenizer_chat_template(g, "default"), jinja);
    free(jinja);
    free_texts(&t);
    cairn_tokenizer_destroy(g);
    cairn_tokenizer_destroy(j);
}

/* ---- real tokenizers written as llama.cpp's converter writes them ------------------- */

/* The id of a token string in a tokenizer.json (vocab, then added tokens), or -1. */
static int token_id(const cJSON *vocab, const cJSON *added, const char *s)
{
    const cJSON *a;
    cJSON_ArrayForEach(a, added) if (!strcmp(cJSON_GetObjectItem(a, "content")->valuestring, s))
        return cJSON_GetObjectItem(a, "id")->valueint;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(vocab, s);
    return v ? v->valueint : -1;
}

static const char *token_string(const cJSON *v)
{
    if (cJSON_IsObject(v))
        v = cJSON_GetObjectItem(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/*
 * dir's tokenizer.json and tokenizer_config.json as the metadata of a GGUF file
 * (convert_hf_to_gguf.py's gpt2 vocabulary): tokens by id (holes "[PADn]", type unused),
 * added tokens typed control (special) or user-defined, merges as "a b", the pre name,
 * bos/eos ids of the config's tokens, and its chat template.
 */
static void write_tokenizer_gguf(const char *dir, const char *pre, const char *out)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    cJSON *tj = load_json(path);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    cJSON *tc = load_json(path);
    const cJSON *model = cJSON_GetObjectItem(tj, "model");
    const cJSON *vocab = cJSON_GetObjectItem(model, "vocab");
    const cJSON *added = cJSON_GetObjectItem(tj, "added_tokens"), *e;
    int n = 0;
    cJSON_ArrayForEach(e, vocab) if (e->valueint + 1 > n) n = e->valueint + 1;
    cJSON_ArrayForEach(e, added) if (cJSON_GetObjectItem(e, "id")->valueint + 1 > n)
        n = cJSON_GetObjectItem(e, "id")->valueint + 1;
    const char **toks = calloc((size_t)n, sizeof *toks);
    int32_t *types = calloc((size_t)n, sizeof *types);
    cJSON_ArrayForEach(e, vocab)
    {
        toks[e->valueint] = e->string;
        types[e->valueint] = 1;
    }
    cJSON_ArrayForEach(e, added)
    {
        int id = cJSON_GetObjectItem(e, "id")->valueint;
        toks[id] = cJSON_GetObjectItem(e, "content")->valuestring;
        types[id] = cJSON_IsTrue(cJSON_GetObjectItem(e, "special")) ? 3 : 4;
    }
    char (*pads)[24] = calloc((size_t)n, sizeof *pads);
    for (int i = 0; i < n; i++)
        if (!toks[i]) {
            snprintf(pads[i], sizeof pads[i], "[PAD%d]", i);
            toks[i] = pads[i];
            types[i] = 5;
        }
    const cJSON *merges = cJSON_GetObjectItem(model, "merges");
    int nm = cJSON_GetArraySize(merges), i = 0;
    char **ms = calloc((size_t)nm, sizeof *ms);
    cJSON_ArrayForEach(e, merges)
    {
        if (cJSON_IsString(e)) {
            ms[i] = strdup(e->valuestring);
        } else {
            const char *a = cJSON_GetArrayItem(e, 0)->valuestring, *b = cJSON_GetArrayItem(e, 1)->valuestring;
            ms[i] = malloc(strlen(a) + strlen(b) + 2);
            sprintf(ms[i], "%s %s", a, b);
        }
        i++;
    }
    gw_t *w = gw_new();
    gw_kv_str(w, "general.architecture", "none");
    gw_kv_str(w, "tokenizer.ggml.model", "gpt2");
    gw_kv_str(w, "tokenizer.ggml.pre", pre);
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, (size_t)n);
    gw_kv_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_I32, types, (size_t)n);
    gw_kv_arr_str(w, "tokenizer.ggml.merges", (const char *const *)ms, NULL, (size_t)nm);
    gw_kv_bool(w, "tokenizer.ggml.add_bos_token", 0);
    const char *bos = token_string(cJSON_GetObjectItem(tc, "bos_token"));
    const char *eos = token_string(cJSON_GetObjectItem(tc, "eos_token"));
    if (bos)
        gw_kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)token_id(vocab, added, bos));
    if (eos)
        gw_kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)token_id(vocab, added, eos));
    const cJSON *tmpl = cJSON_GetObjectItem(tc, "chat_template");
    if (cJSON_IsString(tmpl))
        gw_kv_str(w, "tokenizer.chat_template", tmpl->valuestring);
    assert_int_equal(gw_write(w, out), 0);
    gw_free(w);
    for (i = 0; i < nm; i++)
        free(ms[i]);
    free(ms);
    free(pads);
    free(toks);
    free(types);
    cJSON_Delete(tj);
    cJSON_Delete(tc);
}

static void check_real(const char *name, const char *pre)
{
    char dir[1024], out[1024], ref[1024];
    snprintf(dir, sizeof dir, TOK_DIR "/%s", name);
    snprintf(out, sizeof out, OUT_DIR "/%s.gguf", name);
    snprintf(ref, sizeof ref, CAIRN_FIXTURES_DIR "/tokenizers/%s/reference.json", name);
    mkdir(CAIRN_BINARY_DIR "/fixtures", 0755);
    mkdir(OUT_DIR, 0755);
    write_tokenizer_gguf(dir, pre, out);
    cairn_tokenizer_t *g = load(out), *j = load(dir);
    cJSON *r = load_json(ref);
    const cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(r, "cases"))
    {
        assert_same_encoding(g, j, cJSON_GetObjectItem(c, "text")->valuestring,
                             cJSON_GetObjectItem(c, "ids"));
        n++;
    }
    assert_int_equal(n, 224);
    assert_int_equal(cairn_tokenizer_vocab_size(g), cairn_tokenizer_vocab_size(j));
    assert_string_equal(cairn_tokenizer_chat_template(g, NULL), cairn_tokenizer_chat_template(j, NULL));
    assert_int_equal(cairn_tokenizer_eos_id(g), cairn_tokenizer_eos_id(j));
    cJSON_Delete(r);
    cairn_tokenizer_destroy(g);
    cairn_tokenizer_destroy(j);
}

static void test_qwen3_as_gguf(void **state) { (void)state; check_real("qwen3", "qwen2"); }
static void test_llama3_as_gguf(void **state) { (void)state; check_real("llama3", "llama-bpe"); }

/* ---- the pre-tokenizer names -------------------------------------------------------- */

/* The fixture's metadata with tokenizer.ggml.pre replaced (or removed: NULL), and extra
 * entries added by `more`. */
static char *with_pre(const char *pre, void (*more)(gw_t *), const char *skip2)
{
    static char path[64];
    gguf_file_t *g = NULL;
    gw_t *w = gw_new();
    assert_int_equal(gguf_open(Q256_GGUF, GGUF_OPEN_METADATA, &g, err, sizeof err), 0);
    if (skip2) {
        /* gw_copy_kvs skips one key: skip the second through an intermediate file. */
        gw_t *tmp = gw_new();
        gw_copy_kvs(tmp, g, skip2);
        size_t len;
        uint8_t *bytes = gw_finish(tmp, &len);
        gw_free(tmp);
        gguf_file_t *h = NULL;
        assert_int_equal(gguf_parse(bytes, len, "tmp", &h, err, sizeof err), 0);
        gw_copy_kvs(w, h, "tokenizer.ggml.pre");
        gguf_close(h);
        free(bytes);
    } else {
        gw_copy_kvs(w, g, "tokenizer.ggml.pre");
    }
    gguf_close(g);
    if (pre)
        gw_kv_str(w, "tokenizer.ggml.pre", pre);
    if (more)
        more(w);
    strcpy(path, "/tmp/cairn-tok-XXXXXX.gguf");
    int fd = mkstemps(path, 5);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(gw_write(w, path), 0);
    gw_free(w);
    return path;
}

static void test_pre_tokenizers_like_llamacpp(void **state)
{
    (void)state;
    cJSON *ref = load_json(CAIRN_SOURCE_TESTS "/tokenizer/gguf_pre_llamacpp.json");
    texts_t t;
    load_texts(&t);
    const cJSON *per_pre;
    int names = 0;
    cJSON_ArrayForEach(per_pre, cJSON_GetObjectItem(ref, "ids"))
    {
        char *path = with_pre(per_pre->string, NULL, NULL);
        cairn_tokenizer_t *g = load(path);
        unlink(path);
        assert_int_equal(cJSON_GetArraySize(per_pre), t.n);
        for (int i = 0; i < t.n; i++) {
            int32_t *ids = NULL;
            size_t n = 0;
            const char *text = t.texts[i]->valuestring;
            assert_int_equal(cairn_tokenizer_encode(g, text, strlen(text), false, &ids, &n), 0);
            char what[128];
            snprintf(what, sizeof what, "pre %s, text %d", per_pre->string, i);
            assert_ids_json(ids, n, cJSON_GetArrayItem(per_pre, i), what);
            cairn_free(ids);
        }
        cairn_tokenizer_destroy(g);
        names++;
    }
    assert_int_equal(names, 3); /* gpt-4o, default, gpt-2 */
    /* A file without the key is read as "default", as llama.cpp reads it. */
    char *path = with_pre(NULL, NULL, NULL);
    cairn_tokenizer_t *g = load(path);
    unlink(path);
    const cJSON *def = cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "ids"), "default");
    for (int i = 0; i < t.n; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        const char *text = t.texts[i]->valuestring;
        assert_int_equal(cairn_tokenizer_encode(g, text, strlen(text), false, &ids, &n), 0);
        assert_ids_json(ids, n, cJSON_GetArrayItem(def, i), "no pre key");
        cairn_free(ids);
    }
    cairn_tokenizer_destroy(g);
    free_texts(&t);
    cJSON_Delete(ref);
}

static void add_bos(gw_t *w)
{
    gw_kv_bool(w, "tokenizer.ggml.add_bos_token", 1);
    gw_kv_u32(w, "tokenizer.ggml.bos_token_id", 4093);
    gw_kv_bool(w, "tokenizer.ggml.add_eos_token", 1);
    gw_kv_str(w, "tokenizer.chat_template.tool_use", "{{ 'tools' }}");
}

/* add_bos/add_eos become the post-processor; named templates are kept by name. */
static void test_specials_and_named_templates(void **state)
{
    (void)state;
    char *path = with_pre("qwen2", add_bos, "tokenizer.ggml.add_bos_token");
    cairn_tokenizer_t *g = load(path);
    unlink(path);
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(cairn_tokenizer_encode(g, "Hello world", 11, true, &ids, &n), 0);
    assert_int_equal(n, 8);
    assert_int_equal(ids[0], 4093);
    assert_int_equal(ids[1], 39);
    assert_int_equal(ids[7], 4095);
    cairn_free(ids);
    assert_string_equal(cairn_tokenizer_bos_token(g), "<|endoftext|>");
    assert_string_equal(cairn_tokenizer_chat_template(g, "tool_use"), "{{ 'tools' }}");
    assert_non_null(cairn_tokenizer_chat_template(g, NULL));
    cairn_tokenizer_destroy(g);
}

/* llama-bpe ignores merges for a pre-token that is itself a token (Llama 3's
 * ignore_merges); qwen2 does not: "abc" is one token there, [ab, c] here. */
static const char *const abc_toks[] = {"a", "b", "c", "ab", "abc"};
static const char *const abc_merges[] = {"a b"};
static void abc(gw_t *w, const char *pre)
{
    gw_kv_str(w, "tokenizer.ggml.model", "gpt2");
    gw_kv_str(w, "tokenizer.ggml.pre", pre);
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", abc_toks, NULL, 5);
    gw_kv_arr_str(w, "tokenizer.ggml.merges", abc_merges, NULL, 1);
    gw_kv_bool(w, "tokenizer.ggml.add_bos_token", 0);
}
static void abc_llama(gw_t *w) { abc(w, "llama-bpe"); }
static void abc_qwen(gw_t *w) { abc(w, "qwen2"); }
static char *tokenizer_file(void (*build)(gw_t *));

static void test_ignore_merges(void **state)
{
    (void)state;
    void (*builds[2])(gw_t *) = {abc_llama, abc_qwen};
    for (int k = 0; k < 2; k++) {
        char *path = tokenizer_file(builds[k]);
        cairn_tokenizer_t *t = load(path);
        unlink(path);
        int32_t *ids = NULL;
        size_t n = 0;
        assert_int_equal(cairn_tokenizer_encode(t, "abc", 3, false, &ids, &n), 0);
        if (k == 0) {
            assert_int_equal(n, 1);
            assert_int_equal(ids[0], 4);
        } else {
            assert_int_equal(n, 2);
            assert_int_equal(ids[0], 3);
            assert_int_equal(ids[1], 2);
        }
        cairn_free(ids);
        cairn_tokenizer_destroy(t);
    }
}

/* ---- SentencePiece vocabularies ------------------------------------------------------ */

#define SPM_DIR CAIRN_SOURCE_TESTS "/tokenizer"

/* The ids of the fixed part of make_spm_gguf.py's vocabulary. */
enum { SPM_UNK = 0, SPM_BOS = 1, SPM_EOS = 2, SPM_BYTE0 = 3, SPM_SOT = 259, SPM_EOT = 260,
       SPM_TOOL = 261, SPM_UNUSED = 262 };

static void test_spm_like_llamacpp(void **state)
{
    (void)state;
    cJSON *ref = load_json(SPM_DIR "/spm_llamacpp.json");
    const cJSON *extra = cJSON_GetObjectItem(ref, "extra_texts"), *e;
    texts_t t;
    load_texts(&t);
    cJSON_ArrayForEach(e, extra) t.texts[t.n++] = e;
    assert_int_equal(t.n, 239 + 36);
    static const char *const names[] = {"spm-llama", "spm-gemma"};
    for (int k = 0; k < 2; k++) {
        char path[256];
        snprintf(path, sizeof path, SPM_DIR "/%s.gguf", names[k]);
        cairn_tokenizer_t *g = load(path);
        assert_int_equal(cairn_tokenizer_vocab_size(g), cJSON_GetObjectItem(ref, "n_tokens")->valueint);
        const cJSON *want = cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "ids"), names[k]);
        assert_int_equal(cJSON_GetArraySize(want), t.n);
        int byte_fallbacks = 0, roundtrips = 0;
        for (int i = 0; i < t.n; i++) {
            const char *text = t.texts[i]->valuestring;
            int32_t *ids = NULL;
            size_t n = 0;
            assert_int_equal(cairn_tokenizer_encode(g, text, strlen(text), false, &ids, &n), 0);
            char what[128];
            snprintf(what, sizeof what, "%s, text %d", names[k], i);
            assert_ids_json(ids, n, cJSON_GetArrayItem(want, i), what);
            /* Without added tokens the ids decode back to the text (the prefix space the
             * encoder adds is dropped again); a typed "▁" comes back as a space. */
            bool added = strstr(text, "\xE2\x96\x81") != NULL;
            for (size_t j = 0; j < n; j++) {
                added |= ids[j] <= SPM_EOS || (ids[j] >= SPM_SOT && ids[j] <= SPM_UNUSED);
                byte_fallbacks += ids[j] >= SPM_BYTE0 && ids[j] < SPM_SOT;
            }
            if (!added) {
                char *back = NULL;
                size_t len = 0;
                assert_int_equal(cairn_tokenizer_decode(g, ids, n, false, &back, &len), 0);
                if (len != strlen(text) || memcmp(back, text, len))
                    fail_msg("%s: decodes to '%.60s'", what, back);
                cairn_free(back);
                roundtrips++;
            }
            cairn_free(ids);
        }
        /* The references exercise the byte tokens and most texts round-trip. */
        assert_true(byte_fallbacks > 100);
        assert_true(roundtrips > 250);
        cairn_tokenizer_destroy(g);
    }
    free_texts(&t);
    cJSON_Delete(ref);
}

/* BOS from llama.cpp's SPM default, the special classes, the stream's leading space. */
static void test_spm_specials_and_decoding(void **state)
{
    (void)state;
    cairn_tokenizer_t *g = load(SPM_DIR "/spm-llama.gguf");
    int32_t *ids = NULL, *plain = NULL;
    size_t n = 0, np = 0;
    assert_int_equal(cairn_tokenizer_encode(g, "Hello world", 11, true, &ids, &n), 0);
    assert_int_equal(cairn_tokenizer_encode(g, "Hello world", 11, false, &plain, &np), 0);
    assert_int_equal(n, np + 1); /* add_bos_token absent: true for SPM, as llama.cpp */
    assert_int_equal(ids[0], SPM_BOS);
    assert_memory_equal(ids + 1, plain, np * sizeof *ids);
    assert_string_equal(cairn_tokenizer_bos_token(g), "<s>");
    assert_string_equal(cairn_tokenizer_eos_token(g), "</s>");
    assert_int_equal(cairn_tokenizer_eos_id(g), SPM_EOS);
    assert_true(cairn_tokenizer_is_special(g, SPM_BOS));
    assert_true(cairn_tokenizer_is_special(g, SPM_UNK));  /* matched in text, like llama.cpp */
    assert_true(cairn_tokenizer_is_special(g, SPM_SOT));
    assert_false(cairn_tokenizer_is_special(g, SPM_TOOL)); /* user-defined */
    assert_false(cairn_tokenizer_is_special(g, SPM_UNUSED));
    /* The stream keeps the prefix space (llama.cpp's token_to_piece); decode drops it. */
    cairn_tokenizer_stream_t *st = NULL;
    assert_int_equal(cairn_tokenizer_stream_create(g, true, &st), 0);
    char acc[128] = "";
    for (size_t i = 0; i < n; i++) {
        const char *piece;
        size_t len;
        assert_int_equal(cairn_tokenizer_stream_push(st, ids[i], &piece, &len), 0);
        strncat(acc, piece, len);
    }
    cairn_tokenizer_stream_destroy(st);
    assert_string_equal(acc, " Hello world");
    char *text = NULL;
    size_t len;
    assert_int_equal(cairn_tokenizer_decode(g, ids, n, true, &text, &len), 0);
    assert_string_equal(text, "Hello world");
    cairn_free(text);
    /* A byte token decodes to its byte (alone: invalid UTF-8, shown as U+FFFD). */
    int32_t byte = SPM_BYTE0 + 'A';
    assert_int_equal(cairn_tokenizer_decode(g, &byte, 1, false, &text, &len), 0);
    assert_string_equal(text, "A");
    cairn_free(text);
    cairn_free(ids);
    cairn_free(plain);
    /* Split-special: control tokens are text, user-defined ones are still matched. */
    assert_int_equal(cairn_tokenizer_encode_ex(g, "<s><|tool|>", 11, CAIRN_TOKENIZE_SPLIT_SPECIAL,
                                               &ids, &n), 0);
    bool bos = false, tool = false;
    for (size_t i = 0; i < n; i++) {
        bos |= ids[i] == SPM_BOS;
        tool |= ids[i] == SPM_TOOL;
    }
    assert_false(bos);
    assert_true(tool);
    cairn_free(ids);
    cairn_tokenizer_destroy(g);
}

/* A vocabulary without byte tokens: a character outside it becomes <unk> per byte. */
static const char *const spm_small[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "\xE2\x96\x81\x61"}; /* U+2581 then "a" (\x61: a literal a would extend the hex escape) */
static void spm_nobytes(gw_t *w)
{
    gw_kv_str(w, "tokenizer.ggml.model", "llama");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", spm_small, NULL, 6);
    float sc[6] = {0, 0, 0, -2, -3, -1};
    gw_kv_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_F32, sc, 6);
    int32_t ty[6] = {2, 3, 3, 1, 1, 1};
    gw_kv_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_I32, ty, 6);
}

static void test_spm_unknown_bytes(void **state)
{
    (void)state;
    char *path = tokenizer_file(spm_nobytes);
    cairn_tokenizer_t *g = load(path);
    unlink(path);
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(cairn_tokenizer_encode(g, "a \xC3\xA9", 4, false, &ids, &n), 0);
    /* "▁a" "▁" then the two bytes of é as <unk> */
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], 5);
    assert_int_equal(ids[1], 3);
    assert_int_equal(ids[2], 0);
    assert_int_equal(ids[3], 0);
    cairn_free(ids);
    cairn_tokenizer_destroy(g);
}

/* ---- errors ------------------------------------------------------------------------- */

static void expect_error(const char *path, int rc, const char *msg)
{
    cairn_tokenizer_t *t = NULL;
    err[0] = 0;
    int got = cairn_tokenizer_load(path, &t, err, sizeof err);
    if (got != rc || !strstr(err, msg))
        fprintf(stderr, "got %d '%s', want %d '%s'\n", got, err, rc, msg);
    assert_int_equal(got, rc);
    assert_non_null(strstr(err, msg));
    assert_null(t);
    unlink(path);
}

static char *tokenizer_file(void (*build)(gw_t *))
{
    static char path[64];
    gw_t *w = gw_new();
    build(w);
    strcpy(path, "/tmp/cairn-tok-XXXXXX.gguf");
    int fd = mkstemps(path, 5);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(gw_write(w, path), 0);
    gw_free(w);
    return path;
}

static const char *const toks3[] = {"a", "b", "ab"};
static const char *const merge_ab[] = {"a b"};
static void base(gw_t *w, const char *model, const char *pre)
{
    gw_kv_str(w, "tokenizer.ggml.model", model);
    if (pre)
        gw_kv_str(w, "tokenizer.ggml.pre", pre);
}
static void bert(gw_t *w) { base(w, "bert", NULL); }
static void spm_scores_short(gw_t *w)
{
    base(w, "llama", NULL);
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks3, NULL, 3);
    float sc[2] = {0, 0};
    gw_kv_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_F32, sc, 2);
}
static void spm_scores_nan(gw_t *w)
{
    base(w, "llama", NULL);
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks3, NULL, 3);
    float sc[3] = {0, __builtin_nanf(""), 0};
    gw_kv_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_F32, sc, 3);
}
static void spm_bad_byte(gw_t *w)
{
    base(w, "llama", NULL);
    const char *const t[] = {"<unk>", "<0xZZ>"};
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", t, NULL, 2);
    int32_t ty[2] = {2, 6};
    gw_kv_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_I32, ty, 2);
}
static void spm_prefix_int(gw_t *w)
{
    spm_nobytes(w);
    gw_kv_u32(w, "tokenizer.ggml.add_space_prefix", 1);
}
static void bad_pre(gw_t *w)
{
    base(w, "gpt2", "deepseek-llm");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks3, NULL, 3);
    gw_kv_arr_str(w, "tokenizer.ggml.merges", merge_ab, NULL, 1);
}
static void no_tokens(gw_t *w) { base(w, "gpt2", "qwen2"); }
static void no_merges(gw_t *w)
{
    base(w, "gpt2", "qwen2");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks3, NULL, 3);
}
static void types_short(gw_t *w)
{
    base(w, "gpt2", "qwen2");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks3, NULL, 3);
    gw_kv_arr_str(w, "tokenizer.ggml.merges", merge_ab, NULL, 1);
    int32_t ty[2] = {1, 1};
    gw_kv_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_I32, ty, 2);
}
static void types_unknown(gw_t *w)
{
    base(w, "gpt2", "qwen2");
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks3, NULL, 3);
    gw_kv_arr_str(w, "tokenizer.ggml.merges", merge_ab, NULL, 1);
    int32_t ty[3] = {1, 9, 1};
    gw_kv_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_I32, ty, 3);
}
static void merge_missing(gw_t *w)
{
    base(w, "gpt2", "qwen2");
    const char *const m[] = {"a c"};
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks3, NULL, 3);
    gw_kv_arr_str(w, "tokenizer.ggml.merges", m, NULL, 1);
}
static void merge_no_space(gw_t *w)
{
    base(w, "gpt2", "qwen2");
    const char *const m[] = {"ab"};
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", toks3, NULL, 3);
    gw_kv_arr_str(w, "tokenizer.ggml.merges", m, NULL, 1);
}
static void bad_utf8(gw_t *w)
{
    base(w, "gpt2", "qwen2");
    const char *const t[] = {"a", "\xff", "ab"};
    gw_kv_arr_str(w, "tokenizer.ggml.tokens", t, NULL, 3);
    gw_kv_arr_str(w, "tokenizer.ggml.merges", merge_ab, NULL, 0);
}
static void bos_missing(gw_t *w)
{
    no_merges(w);
    gw_kv_arr_str(w, "tokenizer.ggml.merges", merge_ab, NULL, 1);
    gw_kv_bool(w, "tokenizer.ggml.add_bos_token", 1);
}
static void eos_range(gw_t *w)
{
    no_merges(w);
    gw_kv_arr_str(w, "tokenizer.ggml.merges", merge_ab, NULL, 1);
    gw_kv_u32(w, "tokenizer.ggml.eos_token_id", 3);
}
static void template_int(gw_t *w)
{
    no_merges(w);
    gw_kv_arr_str(w, "tokenizer.ggml.merges", merge_ab, NULL, 1);
    gw_kv_u32(w, "tokenizer.chat_template", 3);
}
static void no_model(gw_t *w) { gw_kv_str(w, "general.architecture", "llama"); }
static void tokens_ints(gw_t *w)
{
    base(w, "gpt2", "qwen2");
    int32_t x[2] = {1, 2};
    gw_kv_arr(w, "tokenizer.ggml.tokens", GGUF_TYPE_I32, x, 2);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error(tokenizer_file(bert), CAIRN_EUNSUPPORTED, "tokenizer.ggml.model \"bert\" is not supported");
    expect_error(tokenizer_file(spm_scores_short), CAIRN_EFORMAT, "tokenizer.ggml.scores and tokens differ in length");
    expect_error(tokenizer_file(spm_scores_nan), CAIRN_EFORMAT, "tokenizer.ggml.scores[1] is not a number");
    expect_error(tokenizer_file(spm_bad_byte), CAIRN_EFORMAT, "byte token 1 ('<0xZZ>') is not of the form <0xHH>");
    expect_error(tokenizer_file(spm_prefix_int), CAIRN_EFORMAT, "tokenizer.ggml.add_space_prefix");
    expect_error(tokenizer_file(bad_pre), CAIRN_EUNSUPPORTED, "tokenizer.ggml.pre \"deepseek-llm\" is not supported");
    expect_error(tokenizer_file(no_tokens), CAIRN_ENOENT, "missing metadata tokenizer.ggml.tokens");
    expect_error(tokenizer_file(no_merges), CAIRN_ENOENT, "missing metadata tokenizer.ggml.merges");
    expect_error(tokenizer_file(types_short), CAIRN_EFORMAT, "token_type and tokens differ in length");
    expect_error(tokenizer_file(types_unknown), CAIRN_EFORMAT, "token 1 has unknown type 9");
    expect_error(tokenizer_file(merge_missing), CAIRN_EFORMAT, "merge 0 ('a c') names a token that is not in the vocabulary");
    expect_error(tokenizer_file(merge_no_space), CAIRN_EFORMAT, "merge 0 ('ab') has no space");
    expect_error(tokenizer_file(bad_utf8), CAIRN_EFORMAT, "token 1 is not valid UTF-8");
    expect_error(tokenizer_file(bos_missing), CAIRN_EFORMAT, "add_bos_token is true but tokenizer.ggml.bos_token_id is not set");
    expect_error(tokenizer_file(eos_range), CAIRN_EFORMAT, "tokenizer.ggml.eos_token_id = 3 is out of range");
    expect_error(tokenizer_file(template_int), CAIRN_EFORMAT, "tokenizer.chat_template is not a string");
    expect_error(tokenizer_file(tokens_ints), CAIRN_EFORMAT, "tokenizer.ggml.tokens is array of i32, expected an array of string");
    /* A model file without tokenizer metadata. */
    expect_error(tokenizer_file(no_model), CAIRN_ENOENT, "missing metadata tokenizer.ggml.model");
}

/* Allocation failures while building from metadata are CAIRN_ENOMEM, never a crash. */
static void oom_load(const char *path)
{
    bool loaded = false;
    for (long n = 0; n < 4000 && !loaded; n += n < 200 ? 1 : 37) {
        cairn_tokenizer_t *t = NULL;
        cairn_alloc_fail_after(n, false);
        int rc = cairn_tokenizer_load(path, &t, err, sizeof err);
        cairn_alloc_fail_after(-1, false);
        if (rc == 0) {
            loaded = true;
            cairn_tokenizer_destroy(t);
        } else {
            assert_int_equal(rc, CAIRN_ENOMEM);
        }
    }
    assert_true(loaded);
}

static void test_out_of_memory(void **state)
{
    (void)state;
    oom_load(Q256_GGUF);
    oom_load(SPM_DIR "/spm-llama.gguf");
    /* The SentencePiece encoder: every failing allocation is CAIRN_ENOMEM, none leaks. */
    cairn_tokenizer_t *t = load(SPM_DIR "/spm-llama.gguf");
    static const char text[] = "<s>Hello world \xE2\x98\x83<end_of_turn> and more text";
    bool done = false;
    for (long n = 0; n < 100 && !done; n++) {
        int32_t *ids = NULL;
        size_t k = 0;
        cairn_alloc_fail_after(n, false);
        int rc = cairn_tokenizer_encode(t, text, sizeof text - 1, true, &ids, &k);
        cairn_alloc_fail_after(-1, false);
        if (rc == 0) {
            done = true;
            cairn_free(ids);
        } else {
            assert_int_equal(rc, CAIRN_ENOMEM);
        }
    }
    assert_true(done);
    cairn_tokenizer_destroy(t);
}

int main(void)
{
    cairn_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_gguf_equals_tokenizer_json),
        cmocka_unit_test(test_qwen3_as_gguf),
        cmocka_unit_test(test_llama3_as_gguf),
        cmocka_unit_test(test_pre_tokenizers_like_llamacpp),
        cmocka_unit_test(test_specials_and_named_templates),
        cmocka_unit_test(test_ignore_merges),
        cmocka_unit_test(test_spm_like_llamacpp),
        cmocka_unit_test(test_spm_specials_and_decoding),
        cmocka_unit_test(test_spm_unknown_bytes),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
