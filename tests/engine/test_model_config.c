/*
 * test_model_config.c — config.json / generation_config.json parsing: the fixtures'
 * transformers-5 configs, legacy rope fields, HF defaults, and every rejection naming its
 * field.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cairn/checkpoint.h"
#include "formats/safetensors.h"

static char *slurp_fixture(const char *model, const char *file, size_t *len)
{
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/models/%s/%s", CAIRN_FIXTURES_DIR, model, file);
    char *text = NULL;
    assert_int_equal(st_read_file(path, 1 << 20, &text, len, err, sizeof err), 0);
    return text;
}

static int parse(const char *json, cairn_model_config_t *c, char *err, size_t err_len)
{
    return cairn_model_config_parse(json, strlen(json), c, err, err_len);
}

/* Parses json, expecting rc and an error message containing needle. */
static void expect_reject(const char *json, int rc, const char *needle)
{
    cairn_model_config_t c;
    char err[256] = "";
    assert_int_equal(parse(json, &c, err, sizeof err), rc);
    if (!strstr(err, needle))
        fail_msg("error '%s' does not mention '%s'", err, needle);
}

#define BASE                                                                                  \
    "\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"hidden_size\": 64, "              \
    "\"num_attention_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": 300"

static void test_fixture_llama(void **state)
{
    size_t len;
    char *text = slurp_fixture("llama", "config.json", &len);
    cairn_model_config_t c;
    char err[256] = "";
    assert_int_equal(cairn_model_config_parse(text, len, &c, err, sizeof err), 0);
    assert_string_equal(c.family, "llama");
    assert_string_equal(c.model_type, "llama");
    assert_int_equal(c.n_layers, 3);
    assert_int_equal(c.hidden, 128);
    assert_int_equal(c.n_heads, 4);
    assert_int_equal(c.n_kv_heads, 1);
    assert_int_equal(c.head_dim, 32);
    assert_int_equal(c.ffn, 320);
    assert_int_equal(c.vocab, 4096);
    assert_int_equal(c.max_pos, 8192);
    assert_float_equal(c.rms_eps, 1e-5f, 1e-12);
    assert_false(c.tie_embeddings);
    assert_int_equal(c.rope_type, CAIRN_ROPE_DEFAULT);
    assert_float_equal(c.rope_theta, 500000.0f, 0);
    assert_int_equal(c.bos_id, -1);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_ids[0], 4095);
    cairn_free(text);
}

static void test_fixture_llama31_rope(void **state)
{
    size_t len;
    char *text = slurp_fixture("llama31", "config.json", &len);
    cairn_model_config_t c;
    char err[256] = "";
    assert_int_equal(cairn_model_config_parse(text, len, &c, err, sizeof err), 0);
    assert_int_equal(c.rope_type, CAIRN_ROPE_LLAMA3);
    assert_float_equal(c.rope_theta, 500000.0f, 0);
    assert_float_equal(c.rope_factor, 8.0f, 0);
    assert_float_equal(c.rope_low_freq_factor, 1.0f, 0);
    assert_float_equal(c.rope_high_freq_factor, 4.0f, 0);
    assert_int_equal(c.rope_orig_max_pos, 8192);
    assert_int_equal(c.max_pos, 131072);
    assert_true(c.tie_embeddings);
    assert_int_equal(c.n_kv_heads, 2);
    cairn_free(text);
}

static void test_fixture_qwen3(void **state)
{
    size_t len;
    char *text = slurp_fixture("qwen3", "config.json", &len);
    cairn_model_config_t c;
    char err[256] = "";
    assert_int_equal(cairn_model_config_parse(text, len, &c, err, sizeof err), 0);
    assert_string_equal(c.model_type, "qwen3");
    assert_int_equal(c.n_layers, 4);
    assert_int_equal(c.ffn, 384);
    assert_int_equal(c.head_dim, 32);
    assert_true(c.tie_embeddings);
    assert_float_equal(c.rope_theta, 1e6f, 0);
    assert_float_equal(c.rms_eps, 1e-6f, 1e-13);
    cairn_free(text);
}

static void test_defaults(void **state)
{
    cairn_model_config_t c;
    char err[256] = "";
    assert_int_equal(parse("{" BASE "}", &c, err, sizeof err), 0);
    assert_int_equal(c.n_kv_heads, 4);
    assert_int_equal(c.head_dim, 16);
    assert_float_equal(c.rope_theta, 10000.0f, 0);
    assert_float_equal(c.rms_eps, 1e-6f, 1e-13);
    assert_int_equal(c.max_pos, 2048);
    assert_false(c.tie_embeddings);
    assert_int_equal(c.bos_id, -1);
    assert_int_equal(c.n_eos, 0);
    /* Qwen3Config defaults head_dim to 128 and max_position_embeddings to 32768. */
    assert_int_equal(parse("{\"model_type\": \"qwen3\", \"num_hidden_layers\": 2, "
                           "\"hidden_size\": 64, \"num_attention_heads\": 4, "
                           "\"intermediate_size\": 128, \"vocab_size\": 300}",
                           &c, err, sizeof err),
                     0);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.max_pos, 32768);
}

static void test_legacy_rope_and_eos_list(void **state)
{
    cairn_model_config_t c;
    char err[256] = "";
    assert_int_equal(parse("{" BASE ", \"rope_theta\": 500000.0, \"bos_token_id\": 1, "
                           "\"eos_token_id\": [7, 8, 7], \"rope_scaling\": {\"type\": \"llama3\", "
                           "\"factor\": 32.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                           "\"original_max_position_embeddings\": 8192}, \"unknown_field\": [1]}",
                           &c, err, sizeof err),
                     0);
    assert_float_equal(c.rope_theta, 500000.0f, 0);
    assert_int_equal(c.rope_type, CAIRN_ROPE_LLAMA3);
    assert_float_equal(c.rope_factor, 32.0f, 0);
    assert_int_equal(c.bos_id, 1);
    assert_int_equal(c.n_eos, 2);
    assert_int_equal(c.eos_ids[0], 7);
    assert_int_equal(c.eos_ids[1], 8);
    /* rope_scaling null and rope_type "default" are both plain RoPE. */
    assert_int_equal(parse("{" BASE ", \"rope_scaling\": null}", &c, err, sizeof err), 0);
    assert_int_equal(c.rope_type, CAIRN_ROPE_DEFAULT);
    assert_int_equal(parse("{" BASE ", \"rope_scaling\": {\"rope_type\": \"default\"}}", &c, err,
                           sizeof err),
                     0);
    assert_int_equal(c.rope_type, CAIRN_ROPE_DEFAULT);
}

static void test_generation_config(void **state)
{
    cairn_model_config_t c;
    char err[256] = "";
    assert_int_equal(parse("{" BASE ", \"eos_token_id\": 5}", &c, err, sizeof err), 0);
    const char *g = "{\"eos_token_id\": [5, 6, 299], \"do_sample\": true}";
    assert_int_equal(cairn_generation_config_parse(g, strlen(g), &c, err, sizeof err), 0);
    assert_int_equal(c.n_eos, 3);
    assert_int_equal(c.eos_ids[0], 5);
    assert_int_equal(c.eos_ids[1], 6);
    assert_int_equal(c.eos_ids[2], 299);
    const char *none = "{\"temperature\": 0.7}";
    assert_int_equal(cairn_generation_config_parse(none, strlen(none), &c, err, sizeof err), 0);
    assert_int_equal(c.n_eos, 3);
    const char *bad = "{\"eos_token_id\": 300}";
    assert_int_equal(cairn_generation_config_parse(bad, strlen(bad), &c, err, sizeof err),
                     CAIRN_EFORMAT);
    assert_non_null(strstr(err, "eos_token_id"));
    assert_int_equal(c.n_eos, 3); /* untouched on failure */
    const char *junk = "{\"eos_token_id\": ";
    assert_int_equal(cairn_generation_config_parse(junk, strlen(junk), &c, err, sizeof err),
                     CAIRN_EFORMAT);
}

static void test_rejections(void **state)
{
    expect_reject("{\"model_type\": \"llama\", ", CAIRN_EFORMAT, "not valid JSON");
    expect_reject("[1, 2]", CAIRN_EFORMAT, "not a JSON object");
    expect_reject("{\"model_type\": \"gpt_neox\"}", CAIRN_EUNSUPPORTED, "gpt_neox");
    expect_reject("{\"model_type\": \"mamba\"}", CAIRN_EUNSUPPORTED, "mamba");
    expect_reject("{\"hidden_size\": 4}", CAIRN_EFORMAT, "model_type");
    expect_reject("{\"model_type\": \"llama\", \"num_hidden_layers\": 2}", CAIRN_EFORMAT,
                  "hidden_size");
    expect_reject("{" BASE ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
                  "\"rope_theta\": 10000.0}}",
                  CAIRN_EUNSUPPORTED, "yarn");
    expect_reject("{" BASE ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}}",
                  CAIRN_EUNSUPPORTED, "linear");
    expect_reject("{" BASE ", \"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                  "\"rope_theta\": 10000.0}}",
                  CAIRN_EFORMAT, "low_freq_factor");
    expect_reject("{" BASE ", \"attention_bias\": true}", CAIRN_EUNSUPPORTED, "attention_bias");
    expect_reject("{" BASE ", \"mlp_bias\": true}", CAIRN_EUNSUPPORTED, "mlp_bias");
    expect_reject("{" BASE ", \"hidden_act\": \"gelu\"}", CAIRN_EUNSUPPORTED, "hidden_act");
    expect_reject("{\"model_type\": \"qwen3\", \"num_hidden_layers\": 2, \"hidden_size\": 64, "
                  "\"num_attention_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": 300, "
                  "\"use_sliding_window\": true, \"sliding_window\": 4096}",
                  CAIRN_EUNSUPPORTED, "sliding_window");
    expect_reject("{" BASE ", \"num_key_value_heads\": 3}", CAIRN_EFORMAT, "num_key_value_heads");
    expect_reject("{" BASE ", \"head_dim\": 15}", CAIRN_EFORMAT, "head_dim");
    expect_reject("{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"hidden_size\": 64, "
                  "\"num_attention_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": 0}",
                  CAIRN_EFORMAT, "vocab_size");
    expect_reject("{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"hidden_size\": 64.5, "
                  "\"num_attention_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": 9}",
                  CAIRN_EFORMAT, "hidden_size");
    expect_reject("{" BASE ", \"rms_norm_eps\": -1}", CAIRN_EFORMAT, "rms_norm_eps");
    expect_reject("{" BASE ", \"eos_token_id\": 300}", CAIRN_EFORMAT, "eos_token_id");
    expect_reject("{" BASE ", \"quantization_config\": {\"quant_method\": \"fp8\"}}",
                  CAIRN_EUNSUPPORTED, "quantization_config");
    expect_reject("{" BASE ", \"layer_types\": [\"sliding_attention\", \"full_attention\"]}",
                  CAIRN_EUNSUPPORTED, "sliding_attention");
}

static void test_alloc_failures(void **state)
{
    size_t len;
    char *text = slurp_fixture("llama31", "config.json", &len);
    cairn_model_config_t c;
    char err[256];
    int rc = -1;
    for (long n = 0; n < 10000 && rc != 0; n++) {
        cairn_alloc_fail_after(n, false);
        rc = cairn_model_config_parse(text, len, &c, err, sizeof err);
        cairn_alloc_fail_after(-1, false);
        assert_true(rc == 0 || rc == CAIRN_ENOMEM);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(c.rope_type, CAIRN_ROPE_LLAMA3);
    cairn_free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_llama),
        cmocka_unit_test(test_fixture_llama31_rope),
        cmocka_unit_test(test_fixture_qwen3),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_legacy_rope_and_eos_list),
        cmocka_unit_test(test_generation_config),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
