/*
 * Qwen3.5 through the engine (the family behind models/family.h): for one math mode and
 * K/V dtype, a token's logits are bit-identical (memcmp) on the flat and the paged path,
 * for a prompt in one step or in chunks of 1, 7, 16 and 100 tokens, on 1 or 2 threads,
 * alone or batched with another sequence across sub-batch boundaries, and for a decode
 * token taken together with another sequence's. The fixture (models/qwen3_5) has 3 Gated
 * DeltaNet layers, whose recurrent state lives in each sequence's state handle, and 1
 * gated full-attention layer on the K/V paths.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cairn/engine.h"
#include "engine/engine_fixtures.h"
#include "models/qwen35/qwen35.h"
#include "tools/synth.h"

#define MODEL "qwen3_5"
#define VOCAB 4096

static cairn_checkpoint_t *ck;
static int32_t *lng, *shr; /* long_720 and shared_prefix_672 prompt ids */
static int n_lng, n_shr;

typedef struct {
    cairn_engine_math_t math;
    cairn_dtype_t kv;
} mode_t_;

static cairn_engine_t *engine(const mode_t_ *m, cairn_kv_path_t path, int threads, int max_step)
{
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.kv_path = path;
    o.kv_dtype = m->kv;
    o.math = m->math;
    o.n_threads = threads;
    o.pool_mib = 32;
    o.max_step_tokens = max_step;
    o.cold = -1; /* off: nothing here is about the SSD tier */
    cairn_engine_t *e = NULL;
    char err[256] = "";
    assert_int_equal(cairn_engine_create(ck, &o, &e, err, sizeof(err)), 0);
    return e;
}

/* Runs ids in chunks of `chunk` tokens (0: one step) with logits at every position from
 * the first computed one; returns them malloc'd [n - cached][VOCAB]. */
static float *run(cairn_engine_t *e, const char *salt, const int32_t *ids, int n, int chunk,
                  int *cached)
{
    cairn_seq_t *s;
    int hit = 0;
    assert_int_equal(cairn_seq_begin(e, salt, ids, n, &s, &hit), 0);
    if (cached)
        *cached = hit;
    float *out = malloc((size_t)(n - hit) * VOCAB * sizeof(float));
    int done = 0;
    while (cairn_seq_n_pending(s) > 0) {
        int len = chunk ? chunk : n;
        if (len > cairn_seq_n_pending(s))
            len = cairn_seq_n_pending(s);
        cairn_batch_item_t it = {s, len, CAIRN_LOGITS_ALL};
        const float *lg;
        int rows;
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
        assert_int_equal(rows, len);
        memcpy(out + (size_t)done * VOCAB, lg, (size_t)rows * VOCAB * sizeof(float));
        done += rows;
    }
    assert_int_equal(done, n - hit);
    assert_int_equal(cairn_seq_end_turn(s), 0);
    cairn_seq_release(s);
    return out;
}

static void check_mode(cairn_engine_math_t math, cairn_dtype_t kv)
{
    const mode_t_ m = {math, kv};
    const size_t row = VOCAB * sizeof(float);

    /* Reference: flat, one thread, each prompt in one step. */
    cairn_engine_t *flat1 = engine(&m, CAIRN_KV_FLAT, 1, 1024);
    float *ref_long = run(flat1, NULL, lng, n_lng, 0, NULL);
    float *ref_shared = run(flat1, NULL, shr, n_shr, 0, NULL);
    static const int chunks[] = {1, 7, 16, 100};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(chunks); i++) {
        float *x = run(flat1, NULL, lng, n_lng, chunks[i], NULL);
        assert_memory_equal(x, ref_long, (size_t)n_lng * row);
        free(x);
    }
    cairn_engine_destroy(flat1);

    /* Two threads, flat, sub-batches of 64 rows. */
    cairn_engine_t *flat2 = engine(&m, CAIRN_KV_FLAT, 2, 64);
    float *x = run(flat2, NULL, lng, n_lng, 0, NULL);
    assert_memory_equal(x, ref_long, (size_t)n_lng * row);
    free(x);
    cairn_engine_destroy(flat2);

    /* Paged: one step, then chunks of 7 and 16, each in its own salt. */
    cairn_engine_t *paged = engine(&m, CAIRN_KV_PAGED, 2, 512);
    static const char *const salts[] = {NULL, "chunks-7", "chunks-16"};
    static const int paged_chunks[] = {0, 7, 16};
    for (int i = 0; i < 3; i++) {
        int cached = -1;
        x = run(paged, salts[i], lng, n_lng, paged_chunks[i], &cached);
        assert_int_equal(cached, 0);
        assert_memory_equal(x, ref_long, (size_t)n_lng * row);
        free(x);
    }
    cairn_engine_destroy(paged);

    /* Batched: both prompts in one step (1392 rows over sub-batches of 512, so the
     * sequences straddle sub-batch boundaries), then one decode token each in one step. */
    for (int p = 0; p < 2; p++) {
        cairn_engine_t *e = engine(&m, p ? CAIRN_KV_PAGED : CAIRN_KV_FLAT, p ? 1 : 2, 512);
        cairn_seq_t *a, *b;
        assert_int_equal(cairn_seq_begin(e, "batch-a", shr, n_shr, &a, NULL), 0);
        assert_int_equal(cairn_seq_begin(e, "batch-b", lng, n_lng, &b, NULL), 0);
        cairn_batch_item_t items[2] = {{a, 0, CAIRN_LOGITS_ALL}, {b, 0, CAIRN_LOGITS_ALL}};
        const float *lg;
        int rows;
        assert_int_equal(cairn_engine_step(e, items, 2, &lg, &rows), 0);
        assert_int_equal(rows, n_shr + n_lng);
        assert_memory_equal(lg, ref_shared, (size_t)n_shr * row);
        assert_memory_equal(lg + (size_t)n_shr * VOCAB, ref_long, (size_t)n_lng * row);

        const int32_t ta = 77, tb = 1234;
        assert_int_equal(cairn_seq_feed(a, &ta, 1), 0);
        assert_int_equal(cairn_seq_feed(b, &tb, 1), 0);
        items[0] = (cairn_batch_item_t){a, 1, CAIRN_LOGITS_LAST};
        items[1] = (cairn_batch_item_t){b, 1, CAIRN_LOGITS_LAST};
        assert_int_equal(cairn_engine_step(e, items, 2, &lg, &rows), 0);
        assert_int_equal(rows, 2);
        float both[2][VOCAB];
        memcpy(both, lg, sizeof(both));

        cairn_seq_t *solo;
        assert_int_equal(cairn_seq_begin(e, "solo", lng, n_lng, &solo, NULL), 0);
        assert_int_equal(cairn_seq_feed(solo, &tb, 1), 0);
        cairn_batch_item_t it = {solo, 0, CAIRN_LOGITS_LAST};
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
        assert_memory_equal(lg, both[1], row);
        cairn_seq_release(solo);
        cairn_seq_release(a);
        cairn_seq_release(b);
        cairn_engine_destroy(e);
    }
    free(ref_long);
    free(ref_shared);
}

static void test_f32_math_f32_kv(void **state) { (void)state; check_mode(CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_F32); }
static void test_f32_math_bf16_kv(void **state) { (void)state; check_mode(CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_BF16); }
static void test_bf16_math_f32_kv(void **state) { (void)state; check_mode(CAIRN_ENGINE_MATH_BF16, CAIRN_DTYPE_F32); }
static void test_bf16_math_bf16_kv(void **state) { (void)state; check_mode(CAIRN_ENGINE_MATH_BF16, CAIRN_DTYPE_BF16); }

/* The qwen3.5-0.8b synth preset, shrunk (GQA in both mixers: 2 key heads for 4 value
 * heads, 4 query heads for 2 K/V heads; two full layers), loads as this family and runs
 * the same bits on the flat and paged paths. */
static void test_synth_preset(void **state)
{
    (void)state;
    char dir[] = "/tmp/cairn-q35-synth-XXXXXX";
    assert_non_null(mkdtemp(dir));
    cairn_synth_options_t o;
    cairn_synth_options_default(&o);
    assert_int_equal(cairn_synth_options_preset("qwen3.5-0.8b", &o), 0);
    o.n_layers = 8, o.hidden = 64, o.n_heads = 4, o.n_kv_heads = 2, o.head_dim = 32;
    o.ffn = 96, o.vocab = 300, o.lin_k_heads = 2, o.lin_v_heads = 4, o.lin_k_dim = 16;
    o.lin_v_dim = 24;
    char err[256] = "";
    assert_int_equal(cairn_synth_write(dir, &o, err, sizeof(err)), 0);
    cairn_checkpoint_t *sck = NULL;
    if (cairn_checkpoint_open(dir, &sck, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    const q35_config_t *c = q35_model_config(cairn_checkpoint_model(sck));
    assert_non_null(c);
    assert_int_equal(c->n_full, 2);
    assert_int_equal(c->kind[3], Q35_LAYER_FULL);
    assert_int_equal(c->rope_dim, 8);
    assert_true(cairn_checkpoint_config(sck)->tie_embeddings);

    int32_t ids[40];
    for (int i = 0; i < 40; i++)
        ids[i] = (i * 37) % 300;
    float *lg[2];
    for (int p = 0; p < 2; p++) {
        cairn_engine_options_t eo;
        cairn_engine_options_default(&eo);
        eo.kv_path = p ? CAIRN_KV_PAGED : CAIRN_KV_FLAT;
        eo.pool_mib = 8;
        eo.cold = -1;
        cairn_engine_t *e = NULL;
        assert_int_equal(cairn_engine_create(sck, &eo, &e, err, sizeof(err)), 0);
        cairn_seq_t *s;
        assert_int_equal(cairn_seq_begin(e, NULL, ids, 40, &s, NULL), 0);
        cairn_batch_item_t it = {s, p ? 9 : 40, CAIRN_LOGITS_ALL};
        const float *out;
        int rows;
        lg[p] = malloc(40 * 300 * sizeof(float));
        for (int done = 0; done < 40; done += rows) {
            it.n_tokens = 40 - done < it.n_tokens ? 40 - done : it.n_tokens;
            assert_int_equal(cairn_engine_step(e, &it, 1, &out, &rows), 0);
            memcpy(lg[p] + (size_t)done * 300, out, (size_t)rows * 300 * sizeof(float));
        }
        cairn_seq_release(s);
        cairn_engine_destroy(e);
    }
    assert_memory_equal(lg[0], lg[1], 40 * 300 * sizeof(float));
    for (int i = 0; i < 40 * 300; i++)
        assert_true(lg[0][i] == lg[0][i]); /* no NaN */
    free(lg[0]);
    free(lg[1]);
    cairn_checkpoint_close(sck);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static int setup(void **state)
{
    (void)state;
    ck = fixture_open(MODEL);
    assert_int_equal(cairn_checkpoint_config(ck)->vocab, VOCAB);
    lng = fixture_prompt(MODEL, "long_720", &n_lng);
    shr = fixture_prompt(MODEL, "shared_prefix_672", &n_shr);
    return memcmp(lng, shr, 512 * sizeof(int32_t)) != 0 || n_shr <= 512;
}

static int teardown(void **state)
{
    (void)state;
    free(lng);
    free(shr);
    cairn_checkpoint_close(ck);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_math_f32_kv),
        cmocka_unit_test(test_f32_math_bf16_kv),
        cmocka_unit_test(test_bf16_math_f32_kv),
        cmocka_unit_test(test_bf16_math_bf16_kv),
        cmocka_unit_test(test_synth_preset),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
