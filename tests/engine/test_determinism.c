/*
 * Determinism contract of the engine (docs/DESIGN.md, "Engine / Determinism"): for one
 * math mode and K/V dtype, the logits of a token are bit-identical (memcmp) whether the
 * prompt ran on the flat or the paged path, cold or with its prefix served by the cache,
 * in one step or in chunks of 1, 7, 16 or 100 tokens, alone or batched with another
 * sequence (across sub-batch boundaries), and on 1 or 2 threads. Checked for both math
 * modes and for f32 and bf16 K/V on the qwen3 fixture (GQA, per-head q/k norms) with the
 * long_720 and shared_prefix_672 prompts, which share their first 512 tokens.
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
#include "engine/engine_runs.h"

#define MODEL "qwen3"
#define VOCAB 4096

static cairn_checkpoint_t *ck;
static int32_t *lng, *shr; /* long_720 and shared_prefix_672 prompt ids */
static int n_lng, n_shr;

typedef struct {
    cairn_engine_math_t math;
    cairn_dtype_t kv;
    float *ref_long;   /* [n_lng][VOCAB] flat, 1 thread, one step */
    float *ref_shared; /* [n_shr][VOCAB] */
} mode_t_;

static cairn_engine_t *engine(const mode_t_ *m, cairn_kv_path_t path, int threads, int max_step)
{
    cairn_engine_options_t o = engine_runs_options(m->math, m->kv, path, threads, max_step);
    o.cold = 0; /* the default: on when CAIRN_CACHE_DIR is set */
    return engine_runs_create(ck, &o);
}

/* engine_runs_prompt with this fixture's vocabulary. */
static float *run(cairn_engine_t *e, const char *salt, const int32_t *ids, int n, int chunk,
                  int *cached)
{
    return engine_runs_prompt(e, salt, ids, n, chunk, VOCAB, cached);
}

static void check_mode(cairn_engine_math_t math, cairn_dtype_t kv)
{
    mode_t_ m = {math, kv, NULL, NULL};
    const size_t row = VOCAB * sizeof(float);

    /* Reference: flat, one thread, each prompt in one step. */
    cairn_engine_t *flat1 = engine(&m, CAIRN_KV_FLAT, 1, 1024);
    m.ref_long = run(flat1, NULL, lng, n_lng, 0, NULL);
    m.ref_shared = run(flat1, NULL, shr, n_shr, 0, NULL);
    /* Chunked prefill on the flat path: chunks of 1 and 100. */
    float *x = run(flat1, NULL, lng, n_lng, 1, NULL);
    assert_memory_equal(x, m.ref_long, (size_t)n_lng * row);
    free(x);
    x = run(flat1, NULL, lng, n_lng, 100, NULL);
    assert_memory_equal(x, m.ref_long, (size_t)n_lng * row);
    free(x);
    cairn_engine_destroy(flat1);

    /* Two threads, flat, sub-batches of 64 rows. */
    cairn_engine_t *flat2 = engine(&m, CAIRN_KV_FLAT, 2, 64);
    x = run(flat2, NULL, lng, n_lng, 0, NULL);
    assert_memory_equal(x, m.ref_long, (size_t)n_lng * row);
    free(x);
    cairn_engine_destroy(flat2);

    /* Paged, cold: one step, then chunks of 7 and 16 (each in its own salt, so cold). */
    cairn_engine_t *paged = engine(&m, CAIRN_KV_PAGED, 2, 512);
    int cached = -1;
    x = run(paged, NULL, lng, n_lng, 0, &cached);
    assert_int_equal(cached, 0);
    assert_memory_equal(x, m.ref_long, (size_t)n_lng * row);
    free(x);
    x = run(paged, "chunks-7", lng, n_lng, 7, &cached);
    assert_int_equal(cached, 0);
    assert_memory_equal(x, m.ref_long, (size_t)n_lng * row);
    free(x);
    x = run(paged, "chunks-16", lng, n_lng, 16, &cached);
    assert_int_equal(cached, 0);
    assert_memory_equal(x, m.ref_long, (size_t)n_lng * row);
    free(x);

    /* Prefix hit: shared_prefix_672 reuses long_720's first 512 tokens; the 160 computed
     * positions equal the cold run's. */
    x = run(paged, NULL, shr, n_shr, 0, &cached);
    assert_int_equal(cached, 512);
    assert_memory_equal(x, m.ref_shared + (size_t)512 * VOCAB, (size_t)(n_shr - 512) * row);
    free(x);
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
        assert_memory_equal(lg, m.ref_shared, (size_t)n_shr * row);
        assert_memory_equal(lg + (size_t)n_shr * VOCAB, m.ref_long, (size_t)n_lng * row);

        /* Mixed decode: a and b each take one token together; a fresh sequence running
         * the same tokens alone must agree. */
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
        cairn_engine_destroy(e);
    }
    free(m.ref_long);
    free(m.ref_shared);
}

static void test_f32_math_f32_kv(void **state) { (void)state; check_mode(CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_F32); }
static void test_f32_math_bf16_kv(void **state) { (void)state; check_mode(CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_BF16); }
static void test_bf16_math_f32_kv(void **state) { (void)state; check_mode(CAIRN_ENGINE_MATH_BF16, CAIRN_DTYPE_F32); }
static void test_bf16_math_bf16_kv(void **state) { (void)state; check_mode(CAIRN_ENGINE_MATH_BF16, CAIRN_DTYPE_BF16); }

/* Different modes must actually differ (the knobs reach the kernels). */
static void test_modes_differ(void **state)
{
    (void)state;
    float *lg[3];
    mode_t_ modes[3] = {{CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_F32, NULL, NULL},
                        {CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_BF16, NULL, NULL},
                        {CAIRN_ENGINE_MATH_BF16, CAIRN_DTYPE_F32, NULL, NULL}};
    for (int i = 0; i < 3; i++) {
        cairn_engine_t *e = engine(&modes[i], CAIRN_KV_FLAT, 1, 512);
        lg[i] = run(e, NULL, shr, 64, 0, NULL);
        cairn_engine_destroy(e);
    }
    assert_memory_not_equal(lg[0], lg[1], 64 * VOCAB * sizeof(float));
    assert_memory_not_equal(lg[0], lg[2], 64 * VOCAB * sizeof(float));
    for (int i = 0; i < 3; i++)
        free(lg[i]);
}

static int setup(void **state)
{
    (void)state;
    return engine_runs_open(MODEL, VOCAB, &ck, &lng, &n_lng, &shr, &n_shr);
}

static int teardown(void **state)
{
    (void)state;
    engine_runs_close(ck, lng, shr);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_math_f32_kv),
        cmocka_unit_test(test_f32_math_bf16_kv),
        cmocka_unit_test(test_bf16_math_f32_kv),
        cmocka_unit_test(test_bf16_math_bf16_kv),
        cmocka_unit_test(test_modes_differ),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
