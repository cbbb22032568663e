/*
 * LFM2 config.json parsing (src/models/lfm2/lfm2_config.c) against transformers'
 * Lfm2Config / Lfm2MLP semantics: the feed-forward width rule (the real LFM2-1.2B and
 * LFM2-350M configs), layer kinds from layer_types or full_attn_idxs, LiquidAI key
 * aliases, defaults, and a clear CAIRN_EUNSUPPORTED / CAIRN_EFORMAT naming the field for
 * everything that changes the math and is not implemented.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <stdlib.h>
#include <unistd.h>

#include "cairn/engine.h"
#include "models/lfm2/lfm2.h"
#include "tools/synth.h"

/* The published LiquidAI/LFM2-1.2B config.json (the fields that matter). */
#define LFM2_1_2B                                                                          \
    "\"model_type\": \"lfm2\", \"vocab_size\": 65536, \"hidden_size\": 2048, "              \
    "\"num_hidden_layers\": 16, \"num_attention_heads\": 32, \"num_key_value_heads\": 8, " \
    "\"max_position_embeddings\": 128000, \"norm_eps\": 1e-05, \"conv_bias\": false, "      \
    "\"conv_L_cache\": 3, \"block_dim\": 2048, \"block_ff_dim\": 12288, "                  \
    "\"block_multiple_of\": 256, \"block_ffn_dim_multiplier\": 1.0, "                      \
    "\"block_auto_adjust_ff_dim\": true, \"rope_theta\": 1000000.0, "                      \
    "\"full_attn_idxs\": [2, 5, 8, 10, 12, 14], \"eos_token_id\": 7, \"bos_token_id\": 1"

static int parse(const char *body, lfm2_config_t *c, char *err)
{
    char json[4096];
    snprintf(json, sizeof json, "{%s}", body);
    err[0] = 0;
    return lfm2_config_parse_text(json, strlen(json), c, err, 256);
}

static void test_lfm2_1_2b(void **st)
{
    (void)st;
    lfm2_config_t c;
    char err[256];
    assert_int_equal(parse(LFM2_1_2B, &c, err), 0);
    assert_int_equal(c.base.hidden, 2048);
    assert_int_equal(c.base.n_layers, 16);
    assert_int_equal(c.base.head_dim, 64);
    assert_int_equal(c.base.ffn, 8192); /* int(2 * 12288 / 3) = 8192, a multiple of 256 */
    assert_int_equal(c.n_attn, 6);
    assert_int_equal(c.n_conv, 10);
    assert_int_equal(c.conv_taps, 3);
    assert_true(c.base.tie_embeddings);
    assert_true(c.base.rope_theta == 1e6f);
    assert_true(c.base.rms_eps == 1e-5f);
    static const int attn[] = {2, 5, 8, 10, 12, 14};
    int a = 0;
    for (int l = 0; l < 16; l++) {
        bool is_attn = a < 6 && attn[a] == l;
        assert_int_equal(c.kind[l], is_attn ? LFM2_LAYER_ATTN : LFM2_LAYER_CONV);
        assert_int_equal(c.slot[l], is_attn ? a : l - a);
        a += is_attn;
    }
    assert_int_equal(c.base.n_eos, 1);
    assert_int_equal(c.base.eos_ids[0], 7);
    assert_int_equal(c.base.bos_id, 1);
    assert_int_equal(c.state_bytes, 10 * 2 * 2048 * 4);
    assert_int_equal(c.state_off[3], 2 * 2 * 2048 * 4); /* after conv layers 0 and 1 */
}

/* Lfm2MLP: int(2*size/3); with a multiplier int(m*w) rounded up to multiple_of. */
static void test_ffn_width_rule(void **st)
{
    (void)st;
    static const struct {
        const char *extra;
        int ffn;
    } cases[] = {
        /* LFM2-350M: 6656 -> 4437 -> 4608 */
        {"\"intermediate_size\": 6656", 4608},
        {"\"intermediate_size\": 6656, \"block_ffn_dim_multiplier\": null", 4437},
        {"\"intermediate_size\": 6656, \"block_auto_adjust_ff_dim\": false", 6656},
        {"\"intermediate_size\": 1000, \"block_ffn_dim_multiplier\": 1.5, \"block_multiple_of\": 64", 1024},
        {"\"intermediate_size\": 300, \"block_ffn_dim_multiplier\": 0.5, \"block_multiple_of\": 7", 105},
        /* block_ff_dim wins over intermediate_size, as Lfm2Config reads it first */
        {"\"intermediate_size\": 9, \"block_ff_dim\": 768, \"block_auto_adjust_ff_dim\": false", 768},
    };
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(cases); i++) {
        char body[1024];
        snprintf(body, sizeof body,
                 "\"model_type\": \"lfm2\", \"vocab_size\": 64, \"hidden_size\": 32, "
                 "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, %s", cases[i].extra);
        lfm2_config_t c;
        char err[256];
        assert_int_equal(parse(body, &c, err), 0);
        assert_int_equal(c.base.ffn, cases[i].ffn);
    }
}

static void test_layer_kinds_and_defaults(void **st)
{
    (void)st;
    lfm2_config_t c;
    char err[256];
    const char *base = "\"model_type\": \"lfm2\", \"vocab_size\": 64, \"hidden_size\": 32, "
                       "\"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"intermediate_size\": 96";
    char body[1024];
    /* layer_types wins over full_attn_idxs */
    snprintf(body, sizeof body, "%s, \"layer_types\": [\"full_attention\", \"conv\", \"conv\"], "
             "\"full_attn_idxs\": [2]", base);
    assert_int_equal(parse(body, &c, err), 0);
    assert_int_equal(c.kind[0], LFM2_LAYER_ATTN);
    assert_int_equal(c.kind[2], LFM2_LAYER_CONV);
    assert_int_equal(c.n_attn, 1);
    /* neither: every layer attends; defaults */
    assert_int_equal(parse(base, &c, err), 0);
    assert_int_equal(c.n_attn, 3);
    assert_int_equal(c.n_conv, 0);
    assert_int_equal(c.conv_taps, 3);
    assert_int_equal(c.base.n_kv_heads, 4);
    assert_true(c.base.tie_embeddings);
    assert_true(c.base.rope_theta == 1e6f);
    assert_int_equal(c.base.max_pos, 128000);
    /* aliases: tie_embedding, theta; rope_parameters wins */
    snprintf(body, sizeof body, "%s, \"tie_embedding\": false, \"theta\": 5000.0", base);
    assert_int_equal(parse(body, &c, err), 0);
    assert_false(c.base.tie_embeddings);
    assert_true(c.base.rope_theta == 5000.0f);
    snprintf(body, sizeof body, "%s, \"rope_parameters\": {\"rope_theta\": 250.0, "
             "\"rope_type\": \"default\"}, \"head_dim\": 16", base);
    assert_int_equal(parse(body, &c, err), 0);
    assert_true(c.base.rope_theta == 250.0f);
    assert_int_equal(c.base.head_dim, 16);
}

static void test_errors_name_the_field(void **st)
{
    (void)st;
    static const struct {
        const char *extra;
        int rc;
        const char *needle;
    } cases[] = {
        {"\"conv_bias\": true", CAIRN_EUNSUPPORTED, "conv_bias"},
        {"\"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2.0}", CAIRN_EUNSUPPORTED, "rope_type"},
        {"\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}", CAIRN_EUNSUPPORTED, "rope_scaling"},
        {"\"quantization_config\": {\"bits\": 4}", CAIRN_EUNSUPPORTED, "quantization_config"},
        {"\"layer_types\": [\"conv\", \"sliding_attention\"]", CAIRN_EUNSUPPORTED, "layer_types[1]"},
        {"\"layer_types\": [\"conv\"]", CAIRN_EFORMAT, "layer_types"},
        {"\"full_attn_idxs\": [0, 2]", CAIRN_EFORMAT, "full_attn_idxs"},
        {"\"num_key_value_heads\": 3", CAIRN_EFORMAT, "num_key_value_heads"},
        {"\"conv_L_cache\": 0", CAIRN_EFORMAT, "conv_L_cache"},
        {"\"block_ffn_dim_multiplier\": -1", CAIRN_EFORMAT, "block_ffn_dim_multiplier"},
        {"\"eos_token_id\": 64", CAIRN_EFORMAT, "eos_token_id"},
        /* positive in JSON, zero in float32 (found by fuzz_lfm2_config) */
        {"\"norm_eps\": 1e-50", CAIRN_EFORMAT, "norm_eps"},
        {"\"theta\": 1e-60", CAIRN_EFORMAT, "theta"},
    };
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(cases); i++) {
        char body[1024];
        snprintf(body, sizeof body,
                 "\"model_type\": \"lfm2\", \"vocab_size\": 64, \"hidden_size\": 32, "
                 "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 96, %s",
                 cases[i].extra);
        lfm2_config_t c;
        char err[256];
        int rc = parse(body, &c, err);
        if (rc != cases[i].rc || !strstr(err, cases[i].needle))
            fail_msg("case %zu (%s): rc %d, err \"%s\"", i, cases[i].extra, rc, err);
    }
    lfm2_config_t c;
    char err[256];
    assert_int_equal(parse("\"model_type\": \"lfm2_moe\"", &c, err), CAIRN_EUNSUPPORTED);
    assert_non_null(strstr(err, "lfm2_moe"));
    assert_int_equal(parse("\"model_type\": \"lfm2\", \"vocab_size\": 64", &c, err), CAIRN_EFORMAT);
    assert_non_null(strstr(err, "missing"));
}

/* `cairn synth --preset lfm2-1.2b` has the real shape; a small lfm2 synth opens through
 * the family, with the attention pattern it wrote, and runs. */
static void test_synth(void **st)
{
    (void)st;
    cairn_synth_options_t o;
    cairn_synth_options_default(&o);
    assert_int_equal(cairn_synth_options_preset("lfm2-1.2b", &o), 0);
    assert_int_equal(o.arch, CAIRN_SYNTH_LFM2);
    assert_int_equal(o.n_layers, 16);
    assert_int_equal(o.hidden, 2048);
    assert_int_equal(o.ffn, 8192);
    assert_int_equal(o.vocab, 65536);
    assert_int_equal(o.attn_layers, (1u << 2) | (1u << 5) | (1u << 8) | (1u << 10) | (1u << 12) | (1u << 14));

    char dir[] = "/tmp/cairn-lfm2-synth-XXXXXX";
    assert_non_null(mkdtemp(dir));
    cairn_synth_options_default(&o);
    o.arch = CAIRN_SYNTH_LFM2;
    o.n_layers = 7;
    o.attn_layers = (1u << 1) | (1u << 6);
    o.conv_taps = 4;
    char err[512] = "";
    assert_int_equal(cairn_synth_write(dir, &o, err, sizeof err), 0);
    cairn_checkpoint_t *ck = NULL;
    assert_int_equal(cairn_checkpoint_open(dir, &ck, err, sizeof err), 0);
    const lfm2_t *m = lfm2_of(cairn_checkpoint_model(ck));
    assert_non_null(m);
    assert_int_equal(m->cfg.n_attn, 2);
    assert_int_equal(m->cfg.kind[1], LFM2_LAYER_ATTN);
    assert_int_equal(m->cfg.kind[6], LFM2_LAYER_ATTN);
    assert_int_equal(m->cfg.conv_taps, 4);
    assert_string_equal(cairn_checkpoint_config(ck)->family, "lfm2");
    cairn_engine_t *e = NULL;
    assert_int_equal(cairn_engine_create(ck, NULL, &e, err, sizeof err), 0);
    int32_t toks[20];
    for (int i = 0; i < 20; i++)
        toks[i] = i * 7;
    cairn_seq_t *s = NULL;
    assert_int_equal(cairn_seq_begin(e, NULL, toks, 20, &s, NULL), 0);
    cairn_batch_item_t it = {s, 0, CAIRN_LOGITS_LAST};
    const float *lg;
    int rows;
    assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
    assert_int_equal(rows, 1);
    cairn_engine_destroy(e);
    cairn_checkpoint_close(ck);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synth),
        cmocka_unit_test(test_lfm2_1_2b),
        cmocka_unit_test(test_ffn_width_rule),
        cmocka_unit_test(test_layer_kinds_and_defaults),
        cmocka_unit_test(test_errors_name_the_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
