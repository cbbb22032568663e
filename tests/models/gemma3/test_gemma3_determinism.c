/*
 * Gemma 3 on the paged cache, bit for bit (issue 10, "Exactness"): the logits of a token
 * are memcmp-equal whether the prompt ran on the flat or the paged path, in one step or
 * in chunks of 1, 7, 16 or 100 tokens, alone or batched with another sequence (across
 * sub-batch boundaries), on 1 or 2 threads, and with a prefix served by the cache at
 * every block boundary of the prompt (the sliding layers then hold only the blocks of
 * the window, the null block before it) versus a fresh prefill. Both math modes, f32 and
 * bf16 K/V. And the memory claim: the blocks a long conversation holds grow with the
 * full layers only.
 *
 * Fixture: models/gemma3 (5 sliding layers with window 32 + 1 full layer), prompts
 * long_720 and shared_prefix_672 (their first 512 tokens are equal).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cairn/engine.h"
#include "engine/engine_fixtures.h"
#include "engine/engine_runs.h"

#define MODEL "gemma3"
#define VOCAB 4096
#define BS 16

static cairn_checkpoint_t *ck;
static int32_t *lng, *shr;
static int n_lng, n_shr;

static cairn_engine_t *engine(cairn_engine_math_t math, cairn_dtype_t kv, cairn_kv_path_t path,
                              int threads, int max_step)
{
    cairn_engine_options_t o = engine_runs_options(math, kv, path, threads, max_step);
    o.block_tokens = BS;
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
    const size_t row = VOCAB * sizeof(float);

    /* Reference: flat, one thread, one step. Then chunks of 1, 7, 16 and 100, and 2
     * threads with sub-batches of 64 rows. */
    cairn_engine_t *flat1 = engine(math, kv, CAIRN_KV_FLAT, 1, 1024);
    float *ref = run(flat1, NULL, lng, n_lng, 0, NULL);
    float *ref_shr = run(flat1, NULL, shr, n_shr, 0, NULL);
    static const int chunks[] = {1, 7, 16, 100};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(chunks); i++) {
        float *x = run(flat1, NULL, lng, n_lng, chunks[i], NULL);
        assert_memory_equal(x, ref, (size_t)n_lng * row);
        free(x);
    }
    cairn_engine_destroy(flat1);
    cairn_engine_t *flat2 = engine(math, kv, CAIRN_KV_FLAT, 2, 64);
    float *x = run(flat2, NULL, lng, n_lng, 0, NULL);
    assert_memory_equal(x, ref, (size_t)n_lng * row);
    free(x);
    cairn_engine_destroy(flat2);

    /* Paged, cold, each chunking in its own salt. */
    cairn_engine_t *paged = engine(math, kv, CAIRN_KV_PAGED, 2, 512);
    static const int pchunks[] = {0, 1, 7, 16, 100};
    engine_runs_check_chunkings(paged, run, pchunks, CAIRN_ARRAY_LEN(pchunks), lng, n_lng, ref, VOCAB);
    /* shared_prefix_672 reuses long_720's first 512 tokens. */
    int cached = -1;
    x = run(paged, "chunks-0", shr, n_shr, 0, &cached);
    assert_int_equal(cached, 512);
    assert_memory_equal(x, ref_shr + (size_t)512 * VOCAB, (size_t)(n_shr - 512) * row);
    free(x);
    cairn_engine_destroy(paged);

    /* Batched: both prompts in one step (sub-batches of 512 rows), then one decode token
     * each in one step against a solo sequence. */
    for (int p = 0; p < 2; p++) {
        cairn_engine_t *e = engine(math, kv, p ? CAIRN_KV_PAGED : CAIRN_KV_FLAT, p ? 1 : 2, 512);
        cairn_seq_t *a, *b;
        assert_int_equal(cairn_seq_begin(e, "batch-a", shr, n_shr, &a, NULL), 0);
        assert_int_equal(cairn_seq_begin(e, "batch-b", lng, n_lng, &b, NULL), 0);
        cairn_batch_item_t items[2] = {{a, 0, CAIRN_LOGITS_ALL}, {b, 0, CAIRN_LOGITS_ALL}};
        const float *lg;
        int rows;
        assert_int_equal(cairn_engine_step(e, items, 2, &lg, &rows), 0);
        assert_int_equal(rows, n_shr + n_lng);
        assert_memory_equal(lg, ref_shr, (size_t)n_shr * row);
        assert_memory_equal(lg + (size_t)n_shr * VOCAB, ref, (size_t)n_lng * row);
        const int32_t ta = 77, tb = 1234;
        assert_int_equal(cairn_seq_feed(a, &ta, 1), 0);
        assert_int_equal(cairn_seq_feed(b, &tb, 1), 0);
        items[0] = (cairn_batch_item_t){a, 1, CAIRN_LOGITS_LAST};
        items[1] = (cairn_batch_item_t){b, 1, CAIRN_LOGITS_LAST};
        assert_int_equal(cairn_engine_step(e, items, 2, &lg, &rows), 0);
        float both[2][VOCAB];
        memcpy(both, lg, sizeof both);
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
    free(ref);
    free(ref_shr);
}

static void test_f32_math_f32_kv(void **state) { (void)state; check_mode(CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_F32); }
static void test_f32_math_bf16_kv(void **state) { (void)state; check_mode(CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_BF16); }
static void test_bf16_math_bf16_kv(void **state) { (void)state; check_mode(CAIRN_ENGINE_MATH_BF16, CAIRN_DTYPE_BF16); }

/*
 * A prefix hit at every block boundary P of long_720 versus the fresh prefill: in its own
 * salt, a first request computes long_720[0, P + 1) (publishing P / 16 full blocks; its
 * sliding blocks before the window are released), then long_720 attaches exactly P tokens
 * and its computed positions [P, 720) must equal the fresh run's.
 */
static void test_prefix_hit_at_every_boundary(void **state)
{
    (void)state;
    const size_t row = VOCAB * sizeof(float);
    cairn_engine_t *flat = engine(CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_BF16, CAIRN_KV_FLAT, 2, 1024);
    float *ref = run(flat, NULL, lng, n_lng, 0, NULL);
    cairn_engine_destroy(flat);
    cairn_engine_t *e = engine(CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_BF16, CAIRN_KV_PAGED, 2, 1024);
    int boundaries = 0;
    for (int P = BS; P < n_lng; P += BS) {
        char salt[32];
        snprintf(salt, sizeof salt, "hit-%d", P);
        int cached = -1;
        float *first = run(e, salt, lng, P + 1, 0, &cached);
        assert_int_equal(cached, 0);
        assert_memory_equal(first, ref, (size_t)(P + 1) * row);
        free(first);
        float *x = run(e, salt, lng, n_lng, 0, &cached);
        assert_int_equal(cached, P);
        assert_memory_equal(x, ref + (size_t)P * VOCAB, (size_t)(n_lng - P) * row);
        free(x);
        boundaries++;
    }
    assert_int_equal(boundaries, (n_lng - 1) / BS);
    cairn_engine_destroy(e);
    free(ref);
}

/*
 * Memory grows with the full layers only: after prefilling n tokens a sequence holds
 * ceil(n / 16) blocks of the full group and, per sliding group, only the blocks that
 * cover the window (p - 32, p] of its next position; a block is one layer's K/V (the
 * core splits the 5 sliding layers into groups of the full class's size, 1).
 */
static void test_memory_grows_with_full_layers(void **state)
{
    (void)state;
    cairn_engine_t *e = engine(CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_BF16, CAIRN_KV_PAGED, 1, 1024);
    cairn_kv_stats_t st;
    const cairn_model_config_t *c = cairn_checkpoint_config(ck);
    const uint64_t layer_block = 2ull * BS * (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim * 2; /* K+V bf16 */
    const int n_sliding = 5, window = 32;
    for (int n = 64; n <= n_lng; n += 96) {
        cairn_seq_t *s;
        assert_int_equal(cairn_seq_begin(e, "memory", lng, n, &s, NULL), 0);
        cairn_batch_item_t it = {s, 0, CAIRN_LOGITS_LAST};
        const float *lg;
        int rows;
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
        assert_int_equal(cairn_engine_kv_stats(e, &st), 0);
        const uint32_t full = (uint32_t)((n + BS - 1) / BS);
        const uint32_t first_live = (uint32_t)(n + 1 > window ? (n + 1 - window) / BS : 0);
        const uint32_t sliding = full - first_live;
        fprintf(stderr, "%4d tokens: %u blocks in use of %llu bytes (full group %u, each sliding group %u); "
                        "an all-full cache would hold %u such blocks\n",
                n, st.blocks_in_use, (unsigned long long)st.block_bytes, full, sliding, 6 * full);
        assert_int_equal(st.block_bytes, layer_block);
        assert_int_equal(st.blocks_in_use, full + n_sliding * sliding);
        assert_true(sliding <= (uint32_t)(window / BS + 1));
        cairn_seq_release(s);
        /* Released: nothing stays in use (the blocks stay cached for reuse). */
        assert_int_equal(cairn_engine_kv_stats(e, &st), 0);
        assert_int_equal(st.blocks_in_use, 0);
    }
    cairn_engine_destroy(e);
}

/*
 * Truncating back across the window (the sliding groups released the blocks position n
 * needs) begins the sequence again over its first n tokens: the prefix cache serves what
 * it still holds, the rest is recomputed, and the logits of the positions fed again equal
 * the fresh run's bit for bit; on the flat path the same truncation is in place.
 */
static void test_truncate_across_the_window(void **state)
{
    (void)state;
    const size_t row = VOCAB * sizeof(float);
    cairn_engine_t *flat = engine(CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_BF16, CAIRN_KV_FLAT, 1, 1024);
    float *ref = run(flat, NULL, lng, n_lng, 0, NULL);
    for (int p = 0; p < 2; p++) {
        cairn_engine_t *e = p ? engine(CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_BF16, CAIRN_KV_PAGED, 2, 1024)
                              : flat;
        cairn_seq_t *s;
        assert_int_equal(cairn_seq_begin(e, "truncate", lng, n_lng, &s, NULL), 0);
        cairn_batch_item_t it = {s, 0, CAIRN_LOGITS_LAST};
        const float *lg;
        int rows;
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
        const int n = 300; /* 720 - 300 tokens back: far outside the 32-token window */
        assert_int_equal(cairn_seq_truncate(s, n), 0);
        assert_int_equal(cairn_seq_n_past(s) + cairn_seq_n_pending(s), n);
        if (p) /* whole blocks of the prefix served again, the last block's tokens pending */
            assert_int_equal(cairn_seq_n_past(s), n / BS * BS);
        else
            assert_int_equal(cairn_seq_n_past(s), n);
        if (cairn_seq_n_pending(s) > 0) {
            it = (cairn_batch_item_t){s, 0, CAIRN_LOGITS_ALL};
            assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
            assert_memory_equal(lg, ref + (size_t)(n - rows) * VOCAB,
                                (size_t)rows * row);
        }
        /* Feed the rest of the prompt again: the same logits as the first time. */
        assert_int_equal(cairn_seq_feed(s, lng + n, n_lng - n), 0);
        it = (cairn_batch_item_t){s, 0, CAIRN_LOGITS_ALL};
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
        assert_int_equal(rows, n_lng - n);
        assert_memory_equal(lg, ref + (size_t)n * VOCAB, (size_t)rows * row);
        cairn_seq_release(s);
        if (p)
            cairn_engine_destroy(e);
    }
    cairn_engine_destroy(flat);
    free(ref);
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
        cmocka_unit_test(test_bf16_math_bf16_kv),
        cmocka_unit_test(test_prefix_hit_at_every_boundary),
        cmocka_unit_test(test_memory_grows_with_full_layers),
        cmocka_unit_test(test_truncate_across_the_window),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
