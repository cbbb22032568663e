/*
 * Qwen3.5 through the engine (the family behind models/family.h). The fixture
 * (models/qwen3_5) has 3 Gated DeltaNet layers, whose recurrent state (conv taps + one
 * [32][32] delta-rule matrix per value head) lives in each sequence's state handle and is
 * checkpointed at exact block boundaries, and 1 gated full-attention layer on the K/V
 * paths. Bit-identical logits (memcmp), for one math mode and K/V dtype, across:
 *   - flat vs paged; a prompt in one step or in chunks of 1, 7, 16 and 100 tokens; 1 vs 2
 *     threads; batched with another sequence across sub-batch boundaries vs alone; a
 *     decode token taken together with another sequence's (all four modes);
 *   - a prefix hit at every block boundary vs the fresh prefill, and a shared prefix that
 *     resumes at the deepest checkpoint below the divergence (256, not 512);
 *   - fork (n > 1) and truncation on and off checkpoints;
 *   - a small checkpoint budget evicting the least recently used states.
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
    cairn_engine_options_t o = engine_runs_options(m->math, m->kv, path, threads, max_step);
    return engine_runs_create(ck, &o);
}

/* engine_runs.h's helpers with this fixture's vocabulary. */
static float *run(cairn_engine_t *e, const char *salt, const int32_t *ids, int n, int chunk,
                  int *cached)
{
    return engine_runs_prompt(e, salt, ids, n, chunk, VOCAB, cached);
}

static int compute(cairn_engine_t *e, cairn_seq_t *s, int chunk, float *out)
{
    return engine_runs_compute(e, s, chunk, VOCAB, out);
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

    /* Paged: one step, then chunks of 7 and 16 (and, in the first mode, of 1 and 100),
     * each in its own salt. */
    cairn_engine_t *paged = engine(&m, CAIRN_KV_PAGED, 2, 512);
    static const char *const salts[] = {NULL, "chunks-7", "chunks-16", "chunks-1", "chunks-100"};
    static const int paged_chunks[] = {0, 7, 16, 1, 100};
    const int n_paged = math == CAIRN_ENGINE_MATH_F32 && kv == CAIRN_DTYPE_F32 ? 5 : 3;
    for (int i = 0; i < n_paged; i++) {
        int cached = -1;
        x = run(paged, salts[i], lng, n_lng, paged_chunks[i], &cached);
        assert_int_equal(cached, 0);
        assert_memory_equal(x, ref_long, (size_t)n_lng * row);
        free(x);
    }
    /* shared_prefix_672 shares 512 tokens with long_720, whose grid checkpoint at 256 is
     * the deepest at or below 512 (long_720's prompt end is 720): the hit is 256, and the
     * 416 computed positions equal the fresh prefill's. */
    int cached = -1;
    x = run(paged, NULL, shr, n_shr, 0, &cached);
    assert_int_equal(cached, 256);
    assert_memory_equal(x, ref_shared + (size_t)256 * VOCAB, (size_t)(n_shr - 256) * row);
    free(x);
    cairn_engine_counters_t c;
    cairn_engine_counters(paged, &c);
    assert_true(c.ckpt_saves > 0 && c.ckpt_restores == 1 && c.ckpt_count > 0);
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

/* A hit at every block boundary: in one salt, prompts of P + 1 tokens for P = 16, 32, ...
 * Each resumes at the checkpoint the previous one left at its last full block (P - 16),
 * so every boundary is hit once, each state is one restored from a restored state, and
 * the 17 computed positions must equal the fresh prefill's. */
static void test_hit_at_every_boundary(void **state)
{
    (void)state;
    const mode_t_ m = {CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_BF16};
    cairn_engine_t *flat = engine(&m, CAIRN_KV_FLAT, 1, 1024);
    float *ref = run(flat, NULL, lng, n_lng, 0, NULL);
    cairn_engine_destroy(flat);
    cairn_engine_t *e = engine(&m, CAIRN_KV_PAGED, 2, 512);
    /* The whole prompt then resumes at its deepest boundary below 720, 704. */
    engine_runs_check_boundaries(e, run, "boundaries", lng, n_lng, ref, VOCAB);
    cairn_engine_destroy(e);
    free(ref);
}

/* n > 1: forks share the prompt and carry its state; each choice then continues like a
 * fresh sequence over its own tokens. */
static void test_fork(void **state)
{
    (void)state;
    const mode_t_ m = {CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_BF16};
    cairn_engine_t *e = engine(&m, CAIRN_KV_PAGED, 1, 512);
    cairn_engine_t *flat = engine(&m, CAIRN_KV_FLAT, 1, 1024);
    engine_runs_check_fork(e, flat, lng, VOCAB);
    cairn_engine_destroy(flat);
    cairn_engine_destroy(e);
}

/* Truncation to lengths on and off checkpoints: the sequence restarts from the deepest
 * checkpoint at or below the new length (the recurrent state cannot be rewound) and then
 * agrees with a fresh sequence. */
static void test_truncate(void **state)
{
    (void)state;
    const mode_t_ m = {CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_F32};
    const size_t row = VOCAB * sizeof(float);
    cairn_engine_t *flat = engine(&m, CAIRN_KV_FLAT, 1, 1024);
    float *ref = run(flat, NULL, lng, n_lng, 0, NULL);
    cairn_engine_t *e = engine(&m, CAIRN_KV_PAGED, 1, 512);
    /* cut -> n_past after the cut: grid checkpoints 16, 64, 256, the prompt's last full
     * block 304 */
    static const int cuts[][2] = {{305, 304}, {299, 256}, {256, 256}, {255, 64}, {64, 64},
                                  {20, 16}, {15, 0}};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(cuts); i++) {
        cairn_seq_t *s;
        float *buf = malloc((size_t)n_lng * row);
        assert_int_equal(cairn_seq_begin(e, "trunc", lng, 305, &s, NULL), 0);
        compute(e, s, 50, buf);
        int32_t junk[7] = {1, 2, 3, 4, 5, 6, 7}; /* tokens past the prompt, then cut */
        assert_int_equal(cairn_seq_feed(s, junk, 7), 0);
        compute(e, s, 0, buf);
        assert_int_equal(cairn_seq_truncate(s, cuts[i][0]), 0);
        assert_int_equal(cairn_seq_n_past(s), cuts[i][1]);
        assert_int_equal(cairn_seq_feed(s, lng + cuts[i][0], n_lng - cuts[i][0]), 0);
        int got = compute(e, s, 0, buf);
        assert_int_equal(got, n_lng - cuts[i][1]);
        assert_memory_equal(buf, ref + (size_t)cuts[i][1] * VOCAB, (size_t)got * row);
        cairn_seq_release(s);
        free(buf);
    }
    cairn_engine_destroy(e);
    cairn_engine_destroy(flat);
    free(ref);
}

/* One MiB holds 17 states of this fixture (3 layers x (3 x 256 + 4 x 32 x 32) x 4 bytes,
 * each part 64-byte aligned): many distinct prompts
 * evict the least recently used checkpoints; a prompt whose checkpoints were evicted
 * computes from scratch, with the same logits. */
static void test_budget_evicts(void **state)
{
    (void)state;
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.kv_dtype = CAIRN_DTYPE_BF16;
    o.pool_mib = 64;
    o.cold = -1;
    o.state_ckpt_mib = 1;
    cairn_engine_t *e = NULL;
    char err[256];
    assert_int_equal(cairn_engine_create(ck, &o, &e, err, sizeof err), 0);
    int32_t ids[40];
    memcpy(ids, lng, sizeof ids);
    float *first = NULL;
    for (int i = 0; i < 100; i++) { /* 100 prompts x 2 checkpoints (16, 32) */
        char salt[32];
        snprintf(salt, sizeof salt, "tenant-%d", i);
        float *x = run(e, salt, ids, 40, 0, NULL);
        if (i == 0)
            first = x;
        else
            free(x);
    }
    cairn_engine_counters_t c;
    cairn_engine_counters(e, &c);
    const uint64_t per = 3 * (3 * 256 + 4 * 32 * 32) * 4, held = ((uint64_t)1 << 20) / per;
    assert_int_equal(held, 17);
    assert_true(c.ckpt_bytes <= c.ckpt_budget);
    assert_int_equal(c.ckpt_count, held);
    assert_int_equal(c.ckpt_evictions, 200 - held);
    int cached = -1;
    float *again = run(e, "tenant-0", ids, 40, 0, &cached);
    assert_int_equal(cached, 0);
    assert_memory_equal(again, first, 40 * VOCAB * sizeof(float));
    free(run(e, "tenant-99", ids, 40, 0, &cached));
    assert_int_equal(cached, 32);
    free(again);
    free(first);
    cairn_engine_destroy(e);
}

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
        cmocka_unit_test(test_hit_at_every_boundary),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_truncate),
        cmocka_unit_test(test_budget_evicts),
        cmocka_unit_test(test_synth_preset),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
