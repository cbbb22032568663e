/*
 * `cairn synth` for Gemma 3 (src/tools/synth.c): the gemma3-1b preset has the shape of
 * google/gemma-3-1b-it, and a small synthesized gemma3_text folder opens through the
 * gemma3 family (every tensor bound, layer kinds and window as written), runs on both K/V
 * paths with the same bits, and is a pure function of the seed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cairn/engine.h"
#include "models/gemma3/gemma3.h"
#include "tools/synth.h"

static void test_preset(void **state)
{
    (void)state;
    cairn_synth_options_t o;
    cairn_synth_options_default(&o);
    assert_int_equal(cairn_synth_options_preset("gemma3-1b", &o), 0);
    assert_int_equal(o.arch, CAIRN_SYNTH_GEMMA3);
    assert_int_equal(o.n_layers, 26);
    assert_int_equal(o.hidden, 1152);
    assert_int_equal(o.n_heads, 4);
    assert_int_equal(o.n_kv_heads, 1);
    assert_int_equal(o.head_dim, 256);
    assert_int_equal(o.ffn, 6912);
    assert_int_equal(o.vocab, 262144);
    assert_int_equal(o.max_pos, 32768);
    assert_true(o.tied);
    assert_true(o.rope_theta == 1e6);
    assert_int_equal(o.sliding_window, 0); /* 512 */
    assert_int_equal(o.sliding_pattern, 0); /* 6 */
}

static float *last_logits(cairn_checkpoint_t *ck, cairn_kv_path_t path, const int32_t *ids, int n)
{
    cairn_engine_options_t eo;
    cairn_engine_options_default(&eo);
    eo.kv_path = path;
    eo.pool_mib = 16;
    eo.cold = -1;
    cairn_engine_t *e;
    char err[256] = "";
    assert_int_equal(cairn_engine_create(ck, &eo, &e, err, sizeof err), 0);
    cairn_seq_t *s;
    assert_int_equal(cairn_seq_begin(e, NULL, ids, n, &s, NULL), 0);
    cairn_batch_item_t it = {s, 0, CAIRN_LOGITS_LAST};
    const float *lg;
    int rows;
    assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
    const int V = cairn_checkpoint_config(ck)->vocab;
    float *out = malloc((size_t)V * sizeof(float));
    memcpy(out, lg, (size_t)V * sizeof(float));
    for (int i = 0; i < V; i++)
        assert_true(out[i] == out[i]); /* finite, not NaN */
    cairn_seq_release(s);
    cairn_engine_destroy(e);
    return out;
}

static void test_small_model_opens_and_runs(void **state)
{
    (void)state;
    char dir[] = "/tmp/cairn-g3synth-XXXXXX";
    assert_non_null(mkdtemp(dir));
    cairn_synth_options_t o;
    cairn_synth_options_default(&o);
    o.arch = CAIRN_SYNTH_GEMMA3;
    o.n_layers = 7;
    o.hidden = 96;
    o.n_heads = 4;
    o.n_kv_heads = 2;
    o.head_dim = 24;
    o.ffn = 160;
    o.vocab = 600;
    o.tied = true;
    o.sliding_window = 20;
    o.sliding_pattern = 3;
    o.seed = 7;
    char err[512] = "";
    assert_int_equal(cairn_synth_write(dir, &o, err, sizeof err), 0);
    cairn_checkpoint_t *ck;
    assert_int_equal(cairn_checkpoint_open(dir, &ck, err, sizeof err), 0);
    const cairn_model_config_t *c = cairn_checkpoint_config(ck);
    assert_string_equal(c->family, "gemma3");
    assert_string_equal(c->model_type, "gemma3_text");
    const gemma3_t *g = cairn_checkpoint_model(ck)->priv;
    assert_int_equal(g->cfg.sliding_window, 20);
    for (int l = 0; l < 7; l++)
        assert_int_equal(g->cfg.kind[l], (l + 1) % 3 ? GEMMA3_SLIDING : GEMMA3_FULL);
    int32_t ids[70];
    for (int i = 0; i < 70; i++)
        ids[i] = (i * 37 + 11) % 597;
    float *flat = last_logits(ck, CAIRN_KV_FLAT, ids, 70);
    float *paged = last_logits(ck, CAIRN_KV_PAGED, ids, 70);
    assert_memory_equal(flat, paged, (size_t)c->vocab * sizeof(float));
    cairn_checkpoint_close(ck);

    /* The same seed writes the same bytes. */
    char dir2[] = "/tmp/cairn-g3synth-XXXXXX";
    assert_non_null(mkdtemp(dir2));
    assert_int_equal(cairn_synth_write(dir2, &o, err, sizeof err), 0);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "cmp -s %s/model.safetensors %s/model.safetensors", dir, dir2);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", dir, dir2);
    assert_int_equal(system(cmd), 0);
    free(flat);
    free(paged);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_preset),
        cmocka_unit_test(test_small_model_opens_and_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
