/*
 * test_hf_config.c — formats/hf_config.h: the config.json reading every family shares.
 * text_config unwrapping (gemma3 / qwen3_5 wrappers), the top-level model_type, typed
 * fields naming themselves in errors, the RoPE block, eos merging, and out of memory told
 * apart from malformed JSON for every allocation of a parse.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "formats/hf_config.h"

static const char wrapper[] =
    "{\"model_type\": \"gemma3\", \"eos_token_id\": [1, 106],"
    " \"text_config\": {\"model_type\": \"gemma3_text\", \"hidden_size\": 64,"
    "  \"rope_theta\": 1000000.0, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0,"
    "  \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}},"
    " \"vision_config\": {\"hidden_size\": 1152}}";

static void test_text_config(void **state)
{
    cJSON *doc = NULL;
    hf_config_t hf;
    char err[256] = "";
    assert_int_equal(hf_config_parse(wrapper, strlen(wrapper), &doc, &hf, err, sizeof err), 0);
    assert_string_equal(hf.model_type, "gemma3"); /* the top level picks the family */
    assert_ptr_not_equal(hf.text, hf.top);
    int hidden = 0;
    assert_int_equal(hf_get_int(hf.text, "hidden_size", true, 0, 1, 1 << 20, &hidden, err, sizeof err), 0);
    assert_int_equal(hidden, 64);
    cairn_model_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    assert_int_equal(hf_parse_rope(hf.text, &cfg, err, sizeof err), 0);
    assert_int_equal(cfg.rope_type, CAIRN_ROPE_LLAMA3);
    assert_true(cfg.rope_theta == 1e6f);
    assert_int_equal(cfg.rope_orig_max_pos, 8192);
    cfg.vocab = 262144;
    assert_int_equal(hf_parse_eos(hf.top, &cfg, "config.json", err, sizeof err), 0);
    assert_int_equal(cfg.n_eos, 2);
    assert_int_equal(cfg.eos_ids[1], 106);
    cJSON_Delete(doc);

    /* Without text_config the text model is the top level. */
    const char *flat = "{\"model_type\": \"llama\", \"hidden_size\": 8}";
    assert_int_equal(hf_config_parse(flat, strlen(flat), &doc, &hf, err, sizeof err), 0);
    assert_ptr_equal(hf.text, hf.top);
    cJSON_Delete(doc);
}

static void expect_error(const char *json, int rc, const char *needle)
{
    cJSON *doc = NULL;
    hf_config_t hf;
    char err[256] = "";
    assert_int_equal(hf_config_parse(json, strlen(json), &doc, &hf, err, sizeof err), rc);
    assert_null(doc);
    if (!strstr(err, needle))
        fail_msg("'%s' does not mention '%s'", err, needle);
}

static void test_errors(void **state)
{
    expect_error("{\"model_type\": ", CAIRN_EFORMAT, "config.json: not valid JSON");
    expect_error("[1]", CAIRN_EFORMAT, "not a JSON object");
    expect_error("{\"hidden_size\": 4}", CAIRN_EFORMAT, "missing model_type");
    expect_error("{\"model_type\": \"gemma3\", \"text_config\": 3}", CAIRN_EFORMAT, "text_config");
    char err[256] = "";
    int v;
    cJSON *o = cJSON_Parse("{\"n\": 2.5, \"b\": 1, \"eps\": -1}");
    assert_int_equal(hf_get_int(o, "n", true, 0, 0, 9, &v, err, sizeof err), CAIRN_EFORMAT);
    assert_non_null(strstr(err, "n must be an integer"));
    assert_int_equal(hf_get_int(o, "absent", true, 0, 0, 9, &v, err, sizeof err), CAIRN_EFORMAT);
    assert_non_null(strstr(err, "missing absent"));
    bool b;
    assert_int_equal(hf_get_bool(o, "b", false, &b, err, sizeof err), CAIRN_EFORMAT);
    assert_non_null(strstr(err, "b must be true or false"));
    float f;
    assert_int_equal(hf_get_pos_float(o, "config", "eps", false, 1, &f, err, sizeof err), CAIRN_EFORMAT);
    assert_non_null(strstr(err, "eps must be a positive number"));
    cJSON_Delete(o);
    cairn_model_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    const char *bad = "{\"eos_token_id\": \"x\"}";
    assert_int_equal(hf_generation_config_merge(bad, strlen(bad), &cfg, err, sizeof err), CAIRN_EFORMAT);
    assert_non_null(strstr(err, "generation_config.json"));
    assert_int_equal(cfg.n_eos, 0);
}

/* Each allocation of a valid parse fails in turn: CAIRN_ENOMEM "out of memory", never
 * "not valid JSON". */
static void test_alloc_failures(void **state)
{
    cJSON *doc = NULL;
    hf_config_t hf;
    char err[256];
    unsigned long before = cairn_alloc_count();
    assert_int_equal(hf_config_parse(wrapper, strlen(wrapper), &doc, &hf, err, sizeof err), 0);
    long n = (long)(cairn_alloc_count() - before);
    cJSON_Delete(doc);
    assert_true(n > 10);
    for (long k = 0; k < n; k++) {
        err[0] = '\0';
        cairn_alloc_fail_after(k, false);
        int rc = hf_config_parse(wrapper, strlen(wrapper), &doc, &hf, err, sizeof err);
        cairn_alloc_fail_after(-1, false);
        assert_int_equal(rc, CAIRN_ENOMEM);
        assert_null(doc);
        assert_string_equal(err, "config.json: out of memory");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_config),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
