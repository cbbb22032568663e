/*
 * Tokenizer tests: every encoding of the independent references (qwen3, llama3 and the
 * shared small-model tokenizer, computed by HF `tokenizers`) must match exactly; decoding
 * must round-trip; added-token options, Split behaviours, post-processors and unsupported
 * features are checked on small hand-written tokenizer.json files; allocation failures
 * are injected on every allocation of load, encode and decode.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <utf8proc.h>

#include "cairn/tokenizer.h"

#define TOK_DIR CAIRN_BINARY_DIR "/fixtures/tokenizers"
#define SMALL_DIR CAIRN_FIXTURES_DIR "/models/tokenizer"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("missing fixture %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = '\0';
    fclose(f);
    if (len) *len = (size_t)n;
    return b;
}

static cJSON *load_ref(const char *path)
{
    char *s = slurp(path, NULL);
    cJSON *j = cJSON_Parse(s);
    free(s);
    assert_non_null(j);
    return j;
}

/* The two large tokenizers are loaded once for the whole group (see main). */
static cairn_tokenizer_t *g_qwen3, *g_llama3;

static cairn_tokenizer_t *load_tok(const char *dir)
{
    cairn_tokenizer_t *t = NULL;
    char err[256] = "";
    int rc = cairn_tokenizer_load(dir, &t, err, sizeof err);
    if (rc) fail_msg("loading %s: %s (%s)", dir, cairn_strerror(rc), err);
    return t;
}

static void assert_ids(const int32_t *got, size_t n, const cJSON *exp, const char *what)
{
    size_t en = (size_t)cJSON_GetArraySize(exp);
    for (size_t i = 0; i < n && i < en; i++) {
        int e = cJSON_GetArrayItem(exp, (int)i)->valueint;
        if (got[i] != e) fail_msg("%s: id %zu differs: expected %d, got %d", what, i, e, got[i]);
    }
    if (n != en) fail_msg("%s: %zu ids, expected %zu", what, n, en);
}

static void assert_encode(cairn_tokenizer_t *t, const char *text, const cJSON *exp)
{
    int32_t *ids;
    size_t n;
    assert_int_equal(cairn_tokenizer_encode(t, text, strlen(text), false, &ids, &n), 0);
    assert_ids(ids, n, exp, text);
    cairn_free(ids);
}

/* NFC form of s (malloc'd), for tokenizers with an NFC normalizer. */
static char *nfc(const char *s)
{
    return (char *)utf8proc_NFC((const utf8proc_uint8_t *)s);
}

/* Runs every case and every chat `text` -> `ids` of a reference file, and checks that
 * decode(encode(text)) gives back the (normalized) text. */
static void run_reference(cairn_tokenizer_t *t, const char *ref_path, bool is_nfc, size_t min_cases)
{
    cJSON *ref = load_ref(ref_path);
    const cJSON *cases = cJSON_GetObjectItem(ref, "cases"), *c;
    size_t ncase = 0;
    cJSON_ArrayForEach(c, cases) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        const cJSON *exp = cJSON_GetObjectItem(c, "ids");
        assert_encode(t, text, exp);
        int32_t *ids;
        size_t n, len;
        char *back;
        assert_int_equal(cairn_tokenizer_encode(t, text, strlen(text), false, &ids, &n), 0);
        assert_int_equal(cairn_tokenizer_decode(t, ids, n, false, &back, &len), 0);
        char *want = is_nfc ? nfc(text) : strdup(text);
        assert_string_equal(back, want);
        assert_int_equal(len, strlen(want));
        free(want);
        cairn_free(back);
        cairn_free(ids);
        ncase++;
    }
    assert_true(ncase >= min_cases);
    const cJSON *chat = cJSON_GetObjectItem(ref, "chat");
    if (cJSON_IsObject(chat)) {
        assert_encode(t, cJSON_GetObjectItem(chat, "text")->valuestring, cJSON_GetObjectItem(chat, "ids"));
    } else {
        size_t nchat = 0;
        cJSON_ArrayForEach(c, chat) {
            assert_encode(t, cJSON_GetObjectItem(c, "text")->valuestring, cJSON_GetObjectItem(c, "ids"));
            nchat++;
        }
        assert_int_equal(nchat, 4);
    }
    cJSON_Delete(ref);
}

static void test_reference_qwen3(void **state)
{
    (void)state;
    run_reference(g_qwen3, CAIRN_FIXTURES_DIR "/tokenizers/qwen3/reference.json", true, 224);
}

static void test_reference_llama3(void **state)
{
    (void)state;
    run_reference(g_llama3, CAIRN_FIXTURES_DIR "/tokenizers/llama3/reference.json", false, 224);
}

static void test_reference_small(void **state)
{
    (void)state;
    cairn_tokenizer_t *t = load_tok(SMALL_DIR);
    run_reference(t, SMALL_DIR "/reference.json", true, 15);
    cairn_tokenizer_destroy(t);
}

static void test_config_and_accessors(void **state)
{
    (void)state;
    cairn_tokenizer_t *q = g_qwen3;
    assert_int_equal(cairn_tokenizer_vocab_size(q), 151669);
    assert_null(cairn_tokenizer_bos_token(q));
    assert_int_equal(cairn_tokenizer_bos_id(q), -1);
    assert_string_equal(cairn_tokenizer_eos_token(q), "<|im_end|>");
    assert_int_equal(cairn_tokenizer_eos_id(q), 151645);
    const char *tmpl = cairn_tokenizer_chat_template(q, NULL);
    assert_non_null(tmpl);
    assert_true(strncmp(tmpl, "{%- if tools %}", 15) == 0);
    assert_ptr_equal(cairn_tokenizer_chat_template(q, "default"), tmpl);
    assert_null(cairn_tokenizer_chat_template(q, "tool_use"));
    assert_true(cairn_tokenizer_is_special(q, 151644));
    assert_false(cairn_tokenizer_is_special(q, 151668)); /* </think>: added, not special */
    assert_false(cairn_tokenizer_is_special(q, 9707));
    assert_string_equal(cairn_tokenizer_token_text(q, 1879), "Ġworld");
    assert_int_equal(cairn_tokenizer_piece_to_id(q, "Ġworld"), 1879);
    assert_int_equal(cairn_tokenizer_piece_to_id(q, "<|im_start|>"), 151644);
    assert_int_equal(cairn_tokenizer_piece_to_id(q, "no-such-token-xyz"), -1);
    assert_null(cairn_tokenizer_token_text(q, 151669));
    assert_null(cairn_tokenizer_token_text(q, -1));
    char buf[16];
    size_t len;
    assert_int_equal(cairn_tokenizer_token_to_piece(q, 1879, buf, sizeof buf, &len), 0);
    assert_int_equal(len, 6);
    assert_memory_equal(buf, " world", 6);
    assert_int_equal(cairn_tokenizer_token_to_piece(q, 1879, buf, 2, &len), 0);
    assert_int_equal(len, 6); /* full length reported even when truncated */
    assert_int_equal(cairn_tokenizer_token_to_piece(q, 999999, buf, sizeof buf, &len), CAIRN_EINVAL);

    cairn_tokenizer_t *l = g_llama3;
    assert_string_equal(cairn_tokenizer_bos_token(l), "<|begin_of_text|>");
    assert_int_equal(cairn_tokenizer_bos_id(l), 128000);
    assert_int_equal(cairn_tokenizer_eos_id(l), 128001);
    assert_non_null(cairn_tokenizer_chat_template(l, NULL));
    /* Llama 3's post-processor here is ByteLevel: add_special adds nothing. */
    int32_t *ids;
    size_t n;
    assert_int_equal(cairn_tokenizer_encode(l, "Hello world", 11, true, &ids, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 9906);
    cairn_free(ids);

    /* A tokenizer.json path works like its directory; chat_template.jinja wins over
     * tokenizer_config.json. */
    cairn_tokenizer_t *s = load_tok(SMALL_DIR "/tokenizer.json");
    char *jinja = slurp(SMALL_DIR "/chat_template.jinja", NULL);
    assert_string_equal(cairn_tokenizer_chat_template(s, NULL), jinja);
    free(jinja);
    assert_string_equal(cairn_tokenizer_eos_token(s), "<|im_end|>");
    assert_int_equal(cairn_tokenizer_eos_id(s), 4095);
    cairn_tokenizer_destroy(s);
}

static bool valid_utf8(const char *s, size_t n)
{
    utf8proc_int32_t cp;
    for (size_t i = 0; i < n;) {
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) return false;
        i += (size_t)k;
    }
    return true;
}

static void test_stream_decoder(void **state)
{
    (void)state;
    cairn_tokenizer_t *t = g_llama3;
    /* "中" is E4 B8 AD: push its three byte tokens one at a time. */
    char piece[3][4];
    const unsigned char bytes[3] = {0xE4, 0xB8, 0xAD};
    int32_t bid[3];
    for (int i = 0; i < 3; i++) {
        /* Byte b >= 0xA1 (except 0xAD) maps to U+00b; 0xAD maps to U+0143. */
        uint32_t cp = bytes[i] == 0xAD ? 0x143 : bytes[i];
        piece[i][0] = (char)(0xC0 | cp >> 6);
        piece[i][1] = (char)(0x80 | (cp & 0x3F));
        piece[i][2] = '\0';
        bid[i] = cairn_tokenizer_piece_to_id(t, piece[i]);
        assert_true(bid[i] >= 0);
    }
    cairn_tokenizer_stream_t *st;
    const char *out;
    size_t len;
    assert_int_equal(cairn_tokenizer_stream_create(t, true, &st), 0);
    assert_int_equal(cairn_tokenizer_stream_push(st, bid[0], &out, &len), 0);
    assert_int_equal(len, 0);
    assert_int_equal(cairn_tokenizer_stream_push(st, bid[1], &out, &len), 0);
    assert_int_equal(len, 0);
    assert_int_equal(cairn_tokenizer_stream_push(st, bid[2], &out, &len), 0);
    assert_string_equal(out, "中");
    /* A special token is skipped; an orphan continuation byte becomes U+FFFD at once. */
    assert_int_equal(cairn_tokenizer_stream_push(st, 128000, &out, &len), 0);
    assert_int_equal(len, 0);
    assert_int_equal(cairn_tokenizer_stream_push(st, bid[2], &out, &len), 0);
    assert_string_equal(out, "\xEF\xBF\xBD");
    /* A lead byte then flush: the incomplete character is flushed as U+FFFD. */
    assert_int_equal(cairn_tokenizer_stream_push(st, bid[0], &out, &len), 0);
    assert_int_equal(len, 0);
    assert_int_equal(cairn_tokenizer_stream_flush(st, &out, &len), 0);
    assert_string_equal(out, "\xEF\xBF\xBD");
    assert_int_equal(cairn_tokenizer_stream_push(st, -5, &out, &len), CAIRN_EINVAL);

    /* Streaming a real encoding reproduces decode(), chunk by chunk valid UTF-8. */
    const char *text = "emoji 🤖🚀 and ZWJ 👩‍💻, 中文字符和日本語のテキスト — “quotes” done";
    int32_t *ids;
    size_t n;
    assert_int_equal(cairn_tokenizer_encode(t, text, strlen(text), false, &ids, &n), 0);
    char acc[512] = "";
    size_t acc_len = 0;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(cairn_tokenizer_stream_push(st, ids[i], &out, &len), 0);
        assert_true(valid_utf8(out, len)); /* never half a character */
        assert_true(acc_len + len < sizeof acc);
        memcpy(acc + acc_len, out, len);
        acc_len += len;
        acc[acc_len] = '\0';
    }
    assert_int_equal(cairn_tokenizer_stream_flush(st, &out, &len), 0);
    assert_int_equal(len, 0);
    assert_string_equal(acc, text);
    cairn_free(ids);
    cairn_tokenizer_stream_destroy(st);

    /* decode of lone bytes is lossy like from_utf8_lossy: E4 B8 then 'a'. */
    int32_t lone[3] = {bid[0], bid[1], cairn_tokenizer_piece_to_id(t, "a")};
    char *d;
    assert_int_equal(cairn_tokenizer_decode(t, lone, 3, false, &d, &len), 0);
    assert_string_equal(d, "\xEF\xBF\xBD" "a");
    cairn_free(d);
    int32_t bad = 1 << 30;
    assert_int_equal(cairn_tokenizer_decode(t, &bad, 1, false, &d, &len), CAIRN_EINVAL);
}

/* ---- small hand-written tokenizers ---------------------------------------------- */

/*
 * Vocab: a b c Ġ ab abc Ġa < > x, added token <x> (special, id 10) and options below.
 * merges: a+b (rank 0), ab+c (1), Ġ+a (2), in both JSON forms.
 */
static char *mini_json(const char *normalizer, const char *pre, const char *extra_added,
                       const char *post, const char *merges, const char *model_extra,
                       const char *decoder)
{
    static char buf[8192];
    snprintf(buf, sizeof buf,
             "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,"
             "\"added_tokens\":[{\"id\":10,\"content\":\"<x>\",\"single_word\":false,"
             "\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}%s],"
             "\"normalizer\":%s,\"pre_tokenizer\":%s,\"post_processor\":%s,\"decoder\":%s,"
             "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null%s,"
             "\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"\\u0120\":3,\"ab\":4,\"abc\":5,\"Ġa\":6,"
             "\"<\":7,\">\":8,\"x\":9,\"A\":15},\"merges\":%s}}",
             extra_added, normalizer, pre, post, decoder, model_extra, merges);
    return buf;
}

#define BL_REGEX "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}"
#define MERGES_MIXED "[\"a b\",[\"ab\",\"c\"],\"\\u0120 a\"]"
#define BL_DEC "{\"type\":\"ByteLevel\"}"
#define TEMPLATE_POST "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<x>\",\"type_id\":0}}," \
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{\"<x>\":{\"id\":\"<x>\",\"ids\":[10],\"tokens\":[\"<x>\"]}}}"

static cairn_tokenizer_t *mini(const char *json)
{
    cairn_tokenizer_t *t = NULL;
    char err[256] = "";
    int rc = cairn_tokenizer_load_json(json, strlen(json), &t, err, sizeof err);
    if (rc) fail_msg("mini tokenizer: %s (%s)", cairn_strerror(rc), err);
    return t;
}

static void expect(cairn_tokenizer_t *t, const char *text, unsigned flags, const int32_t *want,
                   size_t nwant)
{
    int32_t *ids;
    size_t n;
    assert_int_equal(cairn_tokenizer_encode_ex(t, text, strlen(text), flags, &ids, &n), 0);
    if (n != nwant) {
        for (size_t i = 0; i < n; i++) print_message("%d ", ids[i]);
        fail_msg("'%s': %zu ids, expected %zu", text, n, nwant);
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] != want[i]) fail_msg("'%s': id %zu is %d, expected %d", text, i, ids[i], want[i]);
    cairn_free(ids);
}
#define EXPECT(t, text, flags, ...) do { \
        const int32_t w_[] = {__VA_ARGS__}; expect(t, text, flags, w_, sizeof w_ / sizeof w_[0]); \
    } while (0)

static void test_mini_bpe_and_post(void **state)
{
    (void)state;
    cairn_tokenizer_t *t = mini(mini_json("null", BL_REGEX, "", TEMPLATE_POST, MERGES_MIXED, "", BL_DEC));
    EXPECT(t, "abc ab", 0, 5, 3, 4);                       /* a+b before Ġ+a (lower rank) */
    EXPECT(t, "abc ab", CAIRN_TOKENIZE_ADD_SPECIAL, 10, 5, 3, 4);
    EXPECT(t, "a<x>b", 0, 0, 10, 1);
    EXPECT(t, "a<x>b", CAIRN_TOKENIZE_SPLIT_SPECIAL, 0, 7, 9, 8, 1);
    EXPECT(t, " a", 0, 6);
    int32_t ids[4] = {10, 5, 3, 4};
    char *d;
    size_t len;
    assert_int_equal(cairn_tokenizer_decode(t, ids, 4, true, &d, &len), 0);
    assert_string_equal(d, "abc ab");
    cairn_free(d);
    assert_int_equal(cairn_tokenizer_decode(t, ids, 4, false, &d, &len), 0);
    assert_string_equal(d, "<x>abc ab");
    cairn_free(d);
    /* Invalid UTF-8 is rejected, not tokenized. */
    int32_t *out;
    size_t n;
    assert_int_equal(cairn_tokenizer_encode(t, "a\xC3", 2, false, &out, &n), CAIRN_EINVAL);
    assert_int_equal(cairn_tokenizer_encode(t, "\xED\xA0\x80", 3, false, &out, &n), CAIRN_EINVAL);
    assert_int_equal(cairn_tokenizer_encode(t, "", 0, true, &out, &n), 0);
    assert_int_equal(n, 1); /* just the template's <x> */
    cairn_free(out);
    cairn_tokenizer_destroy(t);

    /* Without the ab+c merge, abc splits; ignore_merges takes the whole word from the vocab. */
    t = mini(mini_json("null", BL_REGEX, "", "null", "[\"a b\"]", "", BL_DEC));
    EXPECT(t, "abc", 0, 4, 2);
    cairn_tokenizer_destroy(t);
    t = mini(mini_json("null", BL_REGEX, "", "null", "[\"a b\"]", ",\"ignore_merges\":true", BL_DEC));
    EXPECT(t, "abc", 0, 5);
    cairn_tokenizer_destroy(t);
}

static void test_mini_added_options(void **state)
{
    (void)state;
    const char *extra =
        ",{\"id\":12,\"content\":\"<m>\",\"single_word\":false,\"lstrip\":true,\"rstrip\":true,\"normalized\":false,\"special\":false}"
        ",{\"id\":13,\"content\":\"xx\",\"single_word\":true,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":false}"
        ",{\"id\":14,\"content\":\"CB\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":true,\"special\":false}";
    cairn_tokenizer_t *t = mini(mini_json("{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":\"Lowercase\"}]}",
                                          BL_REGEX, extra, "null", MERGES_MIXED, "", BL_DEC));
    EXPECT(t, "a <m> b", 0, 0, 12, 1);          /* lstrip and rstrip absorb the spaces */
    EXPECT(t, "xx axx", 0, 13, 6, 9, 9);        /* single_word: only the free-standing xx */
    EXPECT(t, "ACB", 0, 0, 14);                 /* normalized token matches after lowercasing */
    EXPECT(t, "A", 0, 0);                       /* "A" (15) is never reached: lowercased */
    cairn_tokenizer_destroy(t);
}

static void test_mini_split_behaviors(void **state)
{
    (void)state;
    /* Split on "b" with each behaviour, then ByteLevel without regex; merges a+b only. */
    struct { const char *beh; bool invert; int32_t want[6]; size_t n; } cases[] = {
        {"Isolated", false, {0, 1, 2, 1, 0}, 5},       /* a|b|c|b|a */
        {"Removed", false, {0, 2, 0}, 3},              /* a|c|a */
        {"MergedWithPrevious", false, {4, 2, 1, 0}, 4},/* ab|cb|a: cb has no merge */
        {"MergedWithNext", false, {0, 1, 2, 1, 0}, 5}, /* a|bc|ba -> no merges apply */
        {"Contiguous", false, {0, 1, 2, 1, 0}, 5},
        {"Removed", true, {1, 1}, 2},                  /* invert: keep only the b's */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char pre[512];
        snprintf(pre, sizeof pre,
                 "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"String\":\"b\"},"
                 "\"behavior\":\"%s\",\"invert\":%s},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}",
                 cases[i].beh, cases[i].invert ? "true" : "false");
        cairn_tokenizer_t *t = mini(mini_json("null", pre, "", "null", "[\"a b\"]", "", BL_DEC));
        expect(t, "abcba", 0, cases[i].want, cases[i].n);
        cairn_tokenizer_destroy(t);
    }
    /* ByteLevel add_prefix_space adds Ġ to each piece not starting with a space. */
    cairn_tokenizer_t *t = mini(mini_json("null",
        "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"use_regex\":true}", "", "null",
        MERGES_MIXED, "", BL_DEC));
    EXPECT(t, "a", 0, 6);
    EXPECT(t, "a<x>a", 0, 6, 10, 6);
    cairn_tokenizer_destroy(t);
}

static void expect_load_error(const char *json, int status, const char *msg)
{
    cairn_tokenizer_t *t = (cairn_tokenizer_t *)0x1;
    char err[256] = "";
    assert_int_equal(cairn_tokenizer_load_json(json, strlen(json), &t, err, sizeof err), status);
    assert_null(t);
    if (!strstr(err, msg)) fail_msg("error '%s' does not mention '%s'", err, msg);
}

static void test_unsupported_and_malformed(void **state)
{
    (void)state;
    expect_load_error(mini_json("null", "{\"type\":\"Metaspace\",\"replacement\":\"_\"}", "", "null", MERGES_MIXED, "", BL_DEC),
                      CAIRN_EUNSUPPORTED, "unsupported pre_tokenizer type 'Metaspace'");
    expect_load_error(mini_json("{\"type\":\"BertNormalizer\"}", BL_REGEX, "", "null", MERGES_MIXED, "", BL_DEC),
                      CAIRN_EUNSUPPORTED, "unsupported normalizer type 'BertNormalizer'");
    expect_load_error(mini_json("null", BL_REGEX, "", "null", MERGES_MIXED, "", "{\"type\":\"WordPiece\"}"),
                      CAIRN_EUNSUPPORTED, "unsupported decoder type 'WordPiece'");
    expect_load_error(mini_json("null", BL_REGEX, "", "{\"type\":\"Weird\"}", MERGES_MIXED, "", BL_DEC),
                      CAIRN_EUNSUPPORTED, "unsupported post_processor type 'Weird'");
    expect_load_error(mini_json("null", BL_REGEX, "", "null", MERGES_MIXED, ",\"byte_fallback\":true", BL_DEC),
                      CAIRN_EUNSUPPORTED, "byte_fallback");
    expect_load_error(mini_json("null", BL_REGEX, "", "null", MERGES_MIXED, ",\"continuing_subword_prefix\":\"##\"", BL_DEC),
                      CAIRN_EUNSUPPORTED, "continuing_subword_prefix");
    expect_load_error("{\"model\":{\"type\":\"Unigram\",\"vocab\":[],\"merges\":[]}}", CAIRN_EUNSUPPORTED,
                      "unsupported model type 'Unigram'");
    expect_load_error(mini_json("null", BL_REGEX, "", "null", "[\"a q\"]", "", BL_DEC), CAIRN_EFORMAT,
                      "merge token 'q' is not in the vocab");
    expect_load_error(mini_json("null", BL_REGEX, "", "null", "[\"a c\"]", "", BL_DEC), CAIRN_EFORMAT,
                      "merge token 'ac' is not in the vocab");
    expect_load_error(mini_json("null", "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}", "", "null",
                                MERGES_MIXED, "", BL_DEC), CAIRN_EFORMAT, "regex");
    expect_load_error("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[\"a", CAIRN_EFORMAT, "");
    expect_load_error("[1,2]", CAIRN_EFORMAT, "not a JSON object");
    /* Strings that enter the text must be valid UTF-8 (the regexes skip the UTF check). */
    expect_load_error(mini_json("{\"type\":\"Prepend\",\"prepend\":\"\xff\"}", BL_REGEX, "", "null", MERGES_MIXED, "", BL_DEC),
                      CAIRN_EFORMAT, "not valid UTF-8");
    expect_load_error(mini_json("null", BL_REGEX, ",{\"id\":12,\"content\":\"\xc3(\"}", "null", MERGES_MIXED, "", BL_DEC),
                      CAIRN_EFORMAT, "not valid UTF-8");
    expect_load_error("{\"model\":{\"vocab\":{\"a\":-3},\"merges\":[]}}", CAIRN_EFORMAT, "out of range");
    cairn_tokenizer_t *t;
    char err[256];
    assert_int_equal(cairn_tokenizer_load("/nonexistent/dir", &t, err, sizeof err), CAIRN_ENOENT);
    assert_int_equal(cairn_tokenizer_load(NULL, &t, err, sizeof err), CAIRN_EINVAL);
}

/* Every allocation of load, encode and decode fails in turn: each must report ENOMEM
 * cleanly (ASan checks for leaks), and the run with no failure must succeed. */
static void test_alloc_failures(void **state)
{
    (void)state;
    char *json = NULL;
    size_t len;
    json = slurp(SMALL_DIR "/tokenizer.json", &len);
    const char *text = "<|im_start|>user\nnaïve café — “quotes” 123456 <|im_end|>";
    cairn_tokenizer_t *t = NULL;
    for (long k = 0;; k++) {
        cairn_alloc_fail_after(k, true);
        int rc = cairn_tokenizer_load_json(json, len, &t, NULL, 0);
        cairn_alloc_fail_after(-1, false);
        if (rc == 0) break;
        assert_int_equal(rc, CAIRN_ENOMEM);
        assert_null(t);
        assert_true(k < 100000);
    }
    int32_t *ids;
    size_t n;
    for (long k = 0;; k++) {
        cairn_alloc_fail_after(k, true);
        int rc = cairn_tokenizer_encode(t, text, strlen(text), true, &ids, &n);
        cairn_alloc_fail_after(-1, false);
        if (rc == 0) break;
        assert_int_equal(rc, CAIRN_ENOMEM);
        assert_null(ids);
    }
    char *d;
    for (long k = 0;; k++) {
        cairn_alloc_fail_after(k, true);
        int rc = cairn_tokenizer_decode(t, ids, n, false, &d, &len);
        cairn_alloc_fail_after(-1, false);
        if (rc == 0) break;
        assert_int_equal(rc, CAIRN_ENOMEM);
    }
    char *want = nfc(text);
    assert_string_equal(d, want);
    free(want);
    cairn_free(d);
    cairn_tokenizer_stream_t *st = NULL;
    cairn_alloc_fail_after(0, true);
    assert_int_equal(cairn_tokenizer_stream_create(t, false, &st), CAIRN_ENOMEM);
    cairn_alloc_fail_after(-1, false);
    assert_int_equal(cairn_tokenizer_stream_create(t, false, &st), 0);
    const char *out;
    size_t olen;
    cairn_alloc_fail_after(0, true);
    assert_int_equal(cairn_tokenizer_stream_push(st, ids[0], &out, &olen), CAIRN_ENOMEM);
    cairn_alloc_fail_after(-1, false);
    assert_int_equal(cairn_tokenizer_stream_push(st, ids[0], &out, &olen), 0);
    assert_string_equal(out, "<|im_start|>");
    cairn_tokenizer_stream_destroy(st);
    cairn_free(ids);
    cairn_tokenizer_destroy(t);
    free(json);
}

/* Loads the small tokenizer with its Split regex replaced by `pattern` (NULL: unchanged). */
static cairn_tokenizer_t *small_with_regex(const char *pattern)
{
    char *json = slurp(SMALL_DIR "/tokenizer.json", NULL);
    cJSON *j = cJSON_Parse(json);
    free(json);
    assert_non_null(j);
    cJSON *pre = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "pre_tokenizer"), "pretokenizers"), 0);
    cJSON *pat = cJSON_GetObjectItem(pre, "pattern");
    if (pattern) cJSON_ReplaceItemInObject(pat, "Regex", cJSON_CreateString(pattern));
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    cairn_tokenizer_t *t = mini(out);
    free(out);
    return t;
}

/*
 * The hand-written matcher for the Qwen/Llama 3 Split regexes must agree with PCRE2: the
 * same regex wrapped in (?:...) is not recognized, so it runs in PCRE2. Random strings mix
 * ASCII classes with the non-ASCII characters where the fast path must defer (letters,
 * digits, spaces and punctuation outside ASCII, U+017F which folds to 's').
 */
static void test_fast_split_matches_pcre2(void **state)
{
    (void)state;
    static const char qwen[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const char llama[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const char *pieces[] = {
        "a", "Zq", "e", "'s", "'S", "'re", "'VE", "'ll", "'lx", "'x", "'", "1", "23", "4567",
        " ", "  ", "\t", "\n", "\r\n", " \n ", "(", "!!", "-", ".", "\v", "\f", "\x1c",
        "é", "ſ", "—", "中", "\u00a0", "\u2003", "\u0663", "\xC2\x85", "x\u0301", "'\u017f",
    };
    char wrapped[2][400];
    const char *pats[2] = {qwen, llama};
    for (int v = 0; v < 2; v++) {
        snprintf(wrapped[v], sizeof wrapped[v], "(?:%s)", pats[v]);
        cairn_tokenizer_t *fast = small_with_regex(pats[v]);
        cairn_tokenizer_t *slow = small_with_regex(wrapped[v]);
        uint64_t seed = 42 + (uint64_t)v;
        for (int iter = 0; iter < 1500; iter++) {
            char text[512];
            size_t n = 0;
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            int count = 1 + (int)((seed >> 33) % 24);
            for (int k = 0; k < count; k++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                const char *pc = pieces[(seed >> 33) % (sizeof pieces / sizeof pieces[0])];
                size_t pl = strlen(pc);
                memcpy(text + n, pc, pl);
                n += pl;
            }
            text[n] = '\0';
            int32_t *a, *b;
            size_t na, nb;
            assert_int_equal(cairn_tokenizer_encode(fast, text, n, false, &a, &na), 0);
            assert_int_equal(cairn_tokenizer_encode(slow, text, n, false, &b, &nb), 0);
            if (na != nb || memcmp(a, b, na * sizeof *a) != 0) fail_msg("fast/PCRE2 split differ on '%s'", text);
            cairn_free(a);
            cairn_free(b);
        }
        cairn_tokenizer_destroy(fast);
        cairn_tokenizer_destroy(slow);
    }
}

/* Concurrent encodes share the word cache; results must equal the single-threaded ones. */
typedef struct { cairn_tokenizer_t *t; const char *text; int32_t *ids; size_t n; int rc; } job_t;

static void *encode_job(void *p)
{
    job_t *j = p;
    for (int i = 0; i < 20 && j->rc == 0; i++) {
        cairn_free(j->ids);
        j->rc = cairn_tokenizer_encode(j->t, j->text, strlen(j->text), false, &j->ids, &j->n);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    cairn_tokenizer_t *t = g_qwen3;
    cJSON *ref = load_ref(CAIRN_FIXTURES_DIR "/tokenizers/qwen3/reference.json");
    const cJSON *cases = cJSON_GetObjectItem(ref, "cases");
    for (int c = 0; c + 1 < cJSON_GetArraySize(cases) && c < 40; c += 2) {
        job_t jobs[2];
        pthread_t th[2];
        for (int k = 0; k < 2; k++) {
            const cJSON *e = cJSON_GetArrayItem(cases, c + k);
            jobs[k] = (job_t){t, cJSON_GetObjectItem(e, "text")->valuestring, NULL, 0, 0};
            assert_int_equal(pthread_create(&th[k], NULL, encode_job, &jobs[k]), 0);
        }
        for (int k = 0; k < 2; k++) {
            pthread_join(th[k], NULL);
            assert_int_equal(jobs[k].rc, 0);
            assert_ids(jobs[k].ids, jobs[k].n, cJSON_GetObjectItem(cJSON_GetArrayItem(cases, c + k), "ids"), jobs[k].text);
            cairn_free(jobs[k].ids);
        }
    }
    cJSON_Delete(ref);
}

static int setup(void **state)
{
    (void)state;
    g_qwen3 = load_tok(TOK_DIR "/qwen3");
    g_llama3 = load_tok(TOK_DIR "/llama3");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cairn_tokenizer_destroy(g_qwen3);
    cairn_tokenizer_destroy(g_llama3);
    return 0;
}

/* A valid folder (tokenizer.json + tokenizer_config.json) with each allocation of the load
 * failing in turn, once: every failure is CAIRN_ENOMEM, never "malformed", and some of
 * them land inside the cJSON parse of tokenizer_config.json (the hooks are installed by
 * the load itself, as in the `cairn` binary). */
static void test_alloc_failures_config(void **state)
{
    (void)state;
    char err[256];
    cairn_tokenizer_t *t = NULL;
    unsigned long before = cairn_alloc_count();
    assert_int_equal(cairn_tokenizer_load(SMALL_DIR, &t, err, sizeof err), 0);
    long n_allocs = (long)(cairn_alloc_count() - before);
    cairn_tokenizer_destroy(t);
    bool config_oom = false;
    for (long k = 0; k < n_allocs; k++) {
        t = NULL;
        err[0] = '\0';
        cairn_alloc_fail_after(k, false);
        int rc = cairn_tokenizer_load(SMALL_DIR, &t, err, sizeof err);
        cairn_alloc_fail_after(-1, false);
        cairn_tokenizer_destroy(t);
        if (rc == 0)
            continue;
        if (rc != CAIRN_ENOMEM || strstr(err, "malformed"))
            fail_msg("allocation %ld failed: rc %d, '%s'", k, rc, err);
        if (strstr(err, "tokenizer_config.json: out of memory"))
            config_oom = true;
    }
    assert_true(config_oom);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_qwen3),
        cmocka_unit_test(test_reference_llama3),
        cmocka_unit_test(test_reference_small),
        cmocka_unit_test(test_config_and_accessors),
        cmocka_unit_test(test_stream_decoder),
        cmocka_unit_test(test_mini_bpe_and_post),
        cmocka_unit_test(test_mini_added_options),
        cmocka_unit_test(test_mini_split_behaviors),
        cmocka_unit_test(test_unsupported_and_malformed),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_alloc_failures_config),
        cmocka_unit_test(test_fast_split_matches_pcre2),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
