/*
 * Gemma 3 config.json parsing (src/models/gemma3/gemma3_config.c): the fixture, both RoPE
 * spellings (transformers 5 rope_parameters keyed by layer kind; rope_local_base_freq +
 * rope_theta + rope_scaling before it) giving the same config, layer kinds from
 * layer_types or the sliding-window pattern, the gemma3 text_config wrapper, every error
 * naming its field, and allocation failure at every allocation.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/gemma3/gemma3.h"

/* The common config of the last parse. */
static cairn_model_config_t common;

/* config.json text -> the family's config (and `common`), as the loader calls it. */
static int parse_len(const char *json, size_t len, gemma3_config_t *c, char *err, size_t err_len)
{
    cJSON *doc = NULL;
    hf_config_t hf;
    memset(c, 0, sizeof *c);
    memset(&common, 0, sizeof common);
    int rc = hf_config_parse(json, len, &doc, &hf, err, err_len);
    if (rc == 0)
        rc = gemma3_config_from_hf(&hf, &common, c, err, err_len);
    cJSON_Delete(doc);
    return rc;
}

static int parse(const char *json, gemma3_config_t *c, char *err, size_t err_len)
{
    return parse_len(json, strlen(json), c, err, err_len);
}

static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = 0;
        *len = (size_t)n;
    } else {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

static void test_fixture(void **state)
{
    (void)state;
    char path[1024], err[256] = "";
    size_t len = 0;
    snprintf(path, sizeof path, "%s/models/gemma3/config.json", CAIRN_FIXTURES_DIR);
    char *text = read_text(path, &len);
    assert_non_null(text);
    gemma3_config_t c;
    assert_int_equal(parse_len(text, len, &c, err, sizeof err), 0);
    free(text);
    assert_string_equal(c.model_type, "gemma3_text");
    assert_int_equal(c.n_layers, 6);
    assert_int_equal(c.hidden, 128);
    assert_int_equal(c.n_heads, 4);
    assert_int_equal(c.n_kv_heads, 2);
    assert_int_equal(c.head_dim, 32);
    assert_int_equal(c.ffn, 256);
    assert_int_equal(c.vocab, 4096);
    assert_int_equal(c.sliding_window, 32);
    for (int l = 0; l < 5; l++)
        assert_int_equal(c.kind[l], GEMMA3_SLIDING);
    assert_int_equal(c.kind[5], GEMMA3_FULL);
    assert_true(c.rope[GEMMA3_SLIDING].theta == 10000.0f);
    assert_true(c.rope[GEMMA3_FULL].theta == 1000000.0f);
    assert_true(c.rope[GEMMA3_FULL].linear_factor == 1.0f);
    assert_true(c.attn_scale == (float)pow(32.0, -0.5));
    assert_true(c.embed_scale == (float)sqrt(128.0));
    assert_true(c.attn_softcap == 0 && c.final_softcap == 0);
    assert_true(c.tie_embeddings);
    assert_int_equal(common.n_eos, 1);
    assert_int_equal(common.eos_ids[0], 4095);
    assert_int_equal(common.bos_id, -1);
    assert_int_equal(common.n_layers, 6);
    assert_int_equal(common.head_dim, 32);
    assert_true(common.rope_theta == 1000000.0f);
    assert_true(common.tie_embeddings);
}

#define BASE "\"hidden_size\": 64, \"num_hidden_layers\": 8, \"num_attention_heads\": 4, " \
             "\"num_key_value_heads\": 1, \"head_dim\": 16, \"intermediate_size\": 128, " \
             "\"vocab_size\": 300, \"sliding_window\": 512, \"query_pre_attn_scalar\": 256"

/* The 4B/12B/27B spelling before transformers 5, and the same model written by 5.x. */
static void test_rope_spellings_agree(void **state)
{
    (void)state;
    char err[256] = "";
    gemma3_config_t a, b;
    cairn_model_config_t ca;
    assert_int_equal(parse("{\"model_type\": \"gemma3_text\", " BASE ", \"rope_theta\": 1000000, "
                           "\"rope_local_base_freq\": 10000, \"sliding_window_pattern\": 3, "
                           "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8.0}}",
                           &a, err, sizeof err),
                     0);
    ca = common;
    assert_int_equal(
        parse("{\"model_type\": \"gemma3_text\", " BASE ", \"layer_types\": [\"sliding_attention\", "
              "\"sliding_attention\", \"full_attention\", \"sliding_attention\", \"sliding_attention\", "
              "\"full_attention\", \"sliding_attention\", \"sliding_attention\"], \"rope_parameters\": "
              "{\"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0}, "
              "\"full_attention\": {\"rope_type\": \"linear\", \"factor\": 8.0, \"rope_theta\": 1000000.0}}}",
              &b, err, sizeof err),
        0);
    assert_memory_equal(&a, &b, sizeof a);
    assert_memory_equal(&ca, &common, sizeof ca);
    assert_true(common.rope_factor == 8.0f);
    assert_true(a.rope[GEMMA3_FULL].linear_factor == 8.0f);
    assert_true(a.rope[GEMMA3_SLIDING].linear_factor == 1.0f);
    assert_true(a.rope[GEMMA3_SLIDING].theta == 10000.0f);
    assert_int_equal(a.kind[2], GEMMA3_FULL);
    assert_int_equal(a.kind[7], GEMMA3_SLIDING);
    assert_true(a.attn_scale == 0.0625f);

    /* Defaults: pattern 6, rope 1e6 / 1e4, Gemma3TextConfig sizes. */
    assert_int_equal(parse("{\"model_type\": \"gemma3_text\"}", &a, err, sizeof err), 0);
    assert_int_equal(a.n_layers, 26);
    assert_int_equal(a.hidden, 2304);
    assert_int_equal(a.head_dim, 256);
    assert_int_equal(a.sliding_window, 4096);
    assert_int_equal(a.vocab, 262208);
    for (int l = 0; l < 26; l++)
        assert_int_equal(a.kind[l], (l + 1) % 6 ? GEMMA3_SLIDING : GEMMA3_FULL);
    assert_true(a.rope[GEMMA3_FULL].theta == 1e6f && a.rope[GEMMA3_SLIDING].theta == 1e4f);

    /* The "_sliding_window_pattern" key transformers 5 writes back. */
    assert_int_equal(parse("{\"model_type\": \"gemma3_text\", " BASE ", \"_sliding_window_pattern\": 2}",
                           &a, err, sizeof err),
                     0);
    assert_int_equal(a.kind[0], GEMMA3_SLIDING);
    assert_int_equal(a.kind[1], GEMMA3_FULL);
}

/* Gemma3ForConditionalGeneration: the text model in text_config, specials at the root. */
static void test_text_config_wrapper(void **state)
{
    (void)state;
    char err[256] = "";
    gemma3_config_t c;
    assert_int_equal(parse("{\"model_type\": \"gemma3\", \"eos_token_id\": [1, 106], "
                           "\"vision_config\": {\"hidden_size\": 1152}, \"text_config\": "
                           "{\"model_type\": \"gemma3_text\", " BASE ", \"final_logit_softcapping\": 30.0,"
                           " \"attn_logit_softcapping\": 50}}",
                           &c, err, sizeof err),
                     0);
    assert_string_equal(c.model_type, "gemma3");
    assert_int_equal(c.hidden, 64);
    assert_int_equal(common.n_eos, 2);
    assert_int_equal(common.eos_ids[1], 106);
    assert_true(c.final_softcap == 30.0f && c.attn_softcap == 50.0f);
    assert_true(c.tie_embeddings);
    assert_int_equal(parse("{\"model_type\": \"gemma3\", \"tie_word_embeddings\": false, "
                           "\"text_config\": {" BASE "}}",
                           &c, err, sizeof err),
                     0);
    assert_false(c.tie_embeddings);
}

static void test_errors_name_the_field(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        int rc;
        const char *needle;
    } cases[] = {
        {"{\"model_type\": \"llama\"}", CAIRN_EUNSUPPORTED, "model_type"},
        {"{\"model_type\": \"gemma3\"}", CAIRN_EFORMAT, "text_config"},
        {"{\"model_type\": \"gemma3\", \"text_config\": {\"model_type\": \"siglip\"}}",
         CAIRN_EUNSUPPORTED, "gemma3_text"},
        {"{\"model_type\": \"gemma3_text\", \"attention_bias\": true}", CAIRN_EUNSUPPORTED,
         "attention_bias"},
        {"{\"model_type\": \"gemma3_text\", \"use_bidirectional_attention\": true}",
         CAIRN_EUNSUPPORTED, "use_bidirectional_attention"},
        {"{\"model_type\": \"gemma3_text\", \"hidden_activation\": \"silu\"}", CAIRN_EUNSUPPORTED,
         "hidden_activation"},
        {"{\"model_type\": \"gemma3_text\", \"quantization_config\": {}}", CAIRN_EUNSUPPORTED,
         "quantization_config"},
        {"{\"model_type\": \"gemma3_text\", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}}",
         CAIRN_EUNSUPPORTED, "yarn"},
        {"{\"model_type\": \"gemma3_text\", \"rope_scaling\": {\"rope_type\": \"linear\"}}",
         CAIRN_EFORMAT, "factor"},
        {"{\"model_type\": \"gemma3_text\", \"rope_parameters\": {\"sliding_attention\": "
         "{\"rope_type\": \"default\"}}}",
         CAIRN_EFORMAT, "full_attention"},
        {"{\"model_type\": \"gemma3_text\", \"rope_parameters\": {\"full_attention\": "
         "{\"rope_type\": \"default\", \"partial_rotary_factor\": 0.5}, \"sliding_attention\": {}}}",
         CAIRN_EUNSUPPORTED, "partial_rotary_factor"},
        {"{\"model_type\": \"gemma3_text\", \"num_hidden_layers\": 2, \"layer_types\": "
         "[\"full_attention\"]}",
         CAIRN_EFORMAT, "layer_types"},
        {"{\"model_type\": \"gemma3_text\", \"num_hidden_layers\": 1, \"layer_types\": "
         "[\"chunked_attention\"]}",
         CAIRN_EUNSUPPORTED, "chunked_attention"},
        {"{\"model_type\": \"gemma3_text\", \"num_attention_heads\": 6, \"num_key_value_heads\": 4}",
         CAIRN_EFORMAT, "num_key_value_heads"},
        {"{\"model_type\": \"gemma3_text\", \"head_dim\": 33}", CAIRN_EFORMAT, "head_dim"},
        {"{\"model_type\": \"gemma3_text\", \"sliding_window\": 0}", CAIRN_EFORMAT, "sliding_window"},
        {"{\"model_type\": \"gemma3_text\", \"query_pre_attn_scalar\": -1}", CAIRN_EFORMAT,
         "query_pre_attn_scalar"},
        {"{\"model_type\": \"gemma3_text\", \"rms_norm_eps\": 1e-60}", CAIRN_EFORMAT,
         "rms_norm_eps"}, /* positive, but 0 in float32 (found by fuzz_gemma3_config) */
        {"{\"model_type\": \"gemma3_text\", \"vocab_size\": 10, \"eos_token_id\": 10}", CAIRN_EFORMAT,
         "eos_token_id"},
        {"{\"model_type\": \"gemma3_text\", \"tie_word_embeddings\": 1}", CAIRN_EFORMAT,
         "tie_word_embeddings"},
        {"{\"model_type\": \"gemma3_text\",", CAIRN_EFORMAT, "JSON"},
        {"[]", CAIRN_EFORMAT, "JSON"},
    };
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(cases); i++) {
        char err[256] = "";
        gemma3_config_t c;
        int rc = parse(cases[i].json, &c, err, sizeof err);
        if (rc != cases[i].rc || !strstr(err, cases[i].needle))
            fprintf(stderr, "case %zu: rc %d, err \"%s\"\n", i, rc, err);
        assert_int_equal(rc, cases[i].rc);
        assert_non_null(strstr(err, cases[i].needle));
    }
}

static void test_alloc_failures(void **state)
{
    (void)state;
    const char *json = "{\"model_type\": \"gemma3\", \"text_config\": {" BASE "}}";
    for (long n = 0; n < 200; n++) {
        char err[256] = "";
        gemma3_config_t c;
        cairn_alloc_fail_after(n, false);
        int rc = parse(json, &c, err, sizeof err);
        cairn_alloc_fail_after(-1, false);
        if (rc == 0)
            return;
        assert_int_equal(rc, CAIRN_ENOMEM);
    }
    fail_msg("parse never succeeded");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture),
        cmocka_unit_test(test_rope_spellings_agree),
        cmocka_unit_test(test_text_config_wrapper),
        cmocka_unit_test(test_errors_name_the_field),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
