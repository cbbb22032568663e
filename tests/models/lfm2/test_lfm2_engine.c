/*
 * LFM2 through the engine (fixture ../shared/fixtures/models/lfm2), bit-identical logits
 * (memcmp) across every path that must not change a bit, with the recurrent conv state
 * checkpointed at block boundaries (engine/seq_state.h):
 *   - flat vs paged; chunked prefill (chunks of 1, 7, 16, 100 and the whole prompt);
 *     1 vs 2 threads; sub-batches of 64 rows; batched with another sequence vs alone;
 *   - a prefix hit at every block boundary vs the fresh prefill: prompts of P + 1 tokens,
 *     each resuming at the checkpoint its predecessor left at P - 16;
 *   - a hit only where a checkpoint at exactly that length exists (a shared prefix whose
 *     tail diverges inside a block resumes at the deepest checkpoint below it);
 *   - fork (n > 1) carries the state; truncate to lengths with and without a checkpoint
 *     recomputes from the deepest one and continues exactly like a fresh sequence;
 *   - the counters report saves, restores and, under a tiny budget, evictions.
 * Both math modes and f32 / bf16 K/V.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cairn/engine.h"
#include "../../engine/engine_fixtures.h"
#include "../../engine/engine_runs.h"

#define MODEL "lfm2"
#define VOCAB 4096
#define ROW (VOCAB * sizeof(float))

static cairn_checkpoint_t *ck;
static int32_t *lng, *shr;
static int n_lng, n_shr;

typedef struct {
    cairn_engine_math_t math;
    cairn_dtype_t kv;
} mode_t_;

static cairn_engine_t *engine(const mode_t_ *m, cairn_kv_path_t path, int threads, int max_step)
{
    cairn_engine_options_t o = engine_runs_options(m->math, m->kv, path, threads, max_step);
    o.pool_mib = 16;
    return engine_runs_create(ck, &o);
}

/* engine_runs_compute with this fixture's vocabulary. */
static int compute(cairn_engine_t *e, cairn_seq_t *s, int chunk, float *out)
{
    return engine_runs_compute(e, s, chunk, VOCAB, out);
}

/* A whole prompt in a fresh sequence: logits of the computed positions, malloc'd. */
static float *run(cairn_engine_t *e, const char *salt, const int32_t *ids, int n, int chunk,
                  int *cached)
{
    cairn_seq_t *s;
    int hit = -1;
    assert_int_equal(cairn_seq_begin(e, salt, ids, n, &s, &hit), 0);
    if (cached)
        *cached = hit;
    float *out = malloc((size_t)n * ROW);
    assert_int_equal(compute(e, s, chunk, out), n - hit);
    cairn_seq_release(s);
    return out;
}

static void check_paths(const mode_t_ *m)
{
    /* Reference: flat, one thread, one step. */
    cairn_engine_t *flat = engine(m, CAIRN_KV_FLAT, 1, 1024);
    float *ref = run(flat, NULL, lng, n_lng, 0, NULL);
    float *ref_shr = run(flat, NULL, shr, n_shr, 0, NULL);
    float *x = run(flat, NULL, lng, n_lng, 7, NULL);
    assert_memory_equal(x, ref, (size_t)n_lng * ROW);
    free(x);
    cairn_engine_destroy(flat);

    /* Paged: each chunking in its own salt (cold), 2 threads, sub-batches of 64 rows. */
    static const int chunks[] = {0, 1, 7, 16, 100};
    cairn_engine_t *paged = engine(m, CAIRN_KV_PAGED, 2, 64);
    engine_runs_check_chunkings(paged, run, chunks, CAIRN_ARRAY_LEN(chunks), lng, n_lng, ref, VOCAB);
    /* shared_prefix_672 shares 512 tokens with long_720, whose grid checkpoint at 256 is
     * the deepest at or below 512 (long_720's prompt end is 720): the hit is 256, never
     * 512, and the 416 computed positions equal the fresh prefill's. */
    int cached = -1;
    x = run(paged, "chunks-0", shr, n_shr, 0, &cached);
    assert_int_equal(cached, 256);
    assert_memory_equal(x, ref_shr + (size_t)256 * VOCAB, (size_t)(n_shr - 256) * ROW);
    free(x);
    cairn_engine_counters_t c;
    cairn_engine_counters(paged, &c);
    assert_true(c.ckpt_saves > 0 && c.ckpt_restores == 1 && c.ckpt_count > 0);
    cairn_engine_destroy(paged);

    /* Batched: both prompts in one step of sub-batches of 100, then one decode token
     * each; a sequence alone must agree. */
    paged = engine(m, CAIRN_KV_PAGED, 1, 100);
    cairn_seq_t *a, *b;
    assert_int_equal(cairn_seq_begin(paged, "batch-a", shr, n_shr, &a, NULL), 0);
    assert_int_equal(cairn_seq_begin(paged, "batch-b", lng, n_lng, &b, NULL), 0);
    cairn_batch_item_t items[2] = {{a, 0, CAIRN_LOGITS_ALL}, {b, 0, CAIRN_LOGITS_ALL}};
    const float *lg;
    int rows;
    assert_int_equal(cairn_engine_step(paged, items, 2, &lg, &rows), 0);
    assert_int_equal(rows, n_shr + n_lng);
    assert_memory_equal(lg, ref_shr, (size_t)n_shr * ROW);
    assert_memory_equal(lg + (size_t)n_shr * VOCAB, ref, (size_t)n_lng * ROW);
    cairn_seq_release(a);
    cairn_seq_release(b);
    cairn_engine_destroy(paged);
    free(ref);
    free(ref_shr);
}

static void test_paths_f32(void **st)
{
    (void)st;
    mode_t_ m = {CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_F32};
    check_paths(&m);
}

static void test_paths_bf16(void **st)
{
    (void)st;
    mode_t_ m = {CAIRN_ENGINE_MATH_BF16, CAIRN_DTYPE_BF16};
    check_paths(&m);
}

/* A hit at every block boundary: prompts of P + 1 tokens for P = 16, 32, ..., in one salt;
 * each resumes at the previous one's checkpoint P - 16 (the end of its last full block)
 * and its computed logits equal the fresh prefill's; the whole prompt then resumes at
 * 704 (the deepest checkpoint at or below its 719 usable tokens). */
static void test_hit_at_every_boundary(void **st)
{
    (void)st;
    mode_t_ m = {CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_BF16};
    cairn_engine_t *flat = engine(&m, CAIRN_KV_FLAT, 1, 1024);
    float *ref = run(flat, NULL, lng, n_lng, 0, NULL);
    cairn_engine_destroy(flat);
    cairn_engine_t *e = engine(&m, CAIRN_KV_PAGED, 1, 512);
    const int checked = engine_runs_check_boundaries(e, run, "boundary", lng, n_lng, ref, VOCAB);
    cairn_engine_counters_t c;
    cairn_engine_counters(e, &c);
    assert_int_equal(c.ckpt_restores, (uint64_t)checked); /* every prompt but the first, and the last */
    cairn_engine_destroy(e);
    free(ref);
}

/* n > 1: forks share the prompt and carry its state; each choice then continues like a
 * fresh sequence over its own tokens. */
static void test_fork(void **st)
{
    (void)st;
    const mode_t_ m = {CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_BF16};
    cairn_engine_t *e = engine(&m, CAIRN_KV_PAGED, 1, 512);
    cairn_engine_t *flat = engine(&m, CAIRN_KV_FLAT, 1, 1024);
    engine_runs_check_fork(e, flat, lng, VOCAB);
    cairn_engine_destroy(flat);
    cairn_engine_destroy(e);
}

/* Truncation to lengths on and off checkpoints: the sequence restarts from the deepest
 * checkpoint at or below the new length and then agrees with a fresh sequence. */
static void test_truncate(void **st)
{
    (void)st;
    mode_t_ m = {CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_F32};
    cairn_engine_t *flat = engine(&m, CAIRN_KV_FLAT, 1, 1024);
    float *ref = run(flat, NULL, lng, n_lng, 0, NULL);
    static const int paths[] = {CAIRN_KV_PAGED, CAIRN_KV_FLAT};
    for (size_t pi = 0; pi < 2; pi++) {
        cairn_engine_t *e = paths[pi] == CAIRN_KV_PAGED ? engine(&m, CAIRN_KV_PAGED, 1, 512) : flat;
        /* cut -> n_past expected on the paged path (checkpoints 16, 64, 256 from the grid,
         * 304 from the prompt's last full block), flat always 0 */
        static const int cuts[][2] = {{299, 256}, {256, 256}, {255, 64}, {70, 64}, {64, 64},
                                      {20, 16}, {15, 0}};
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(cuts); i++) {
            cairn_seq_t *s;
            float *buf = malloc((size_t)n_lng * ROW);
            assert_int_equal(cairn_seq_begin(e, "trunc", lng, 305, &s, NULL), 0);
            compute(e, s, 50, buf);
            assert_int_equal(cairn_seq_truncate(s, cuts[i][0]), 0);
            int expect = paths[pi] == CAIRN_KV_PAGED ? cuts[i][1] : 0;
            assert_int_equal(cairn_seq_n_past(s), expect);
            assert_int_equal(cairn_seq_n_pending(s), cuts[i][0] - expect);
            /* Continue with the rest of long_720 from the cut. */
            assert_int_equal(cairn_seq_feed(s, lng + cuts[i][0], n_lng - cuts[i][0]), 0);
            int got = compute(e, s, 0, buf);
            assert_int_equal(got, n_lng - expect);
            /* the recomputed positions [expect, cut), then the new ones */
            assert_memory_equal(buf, ref + (size_t)expect * VOCAB, (size_t)got * ROW);
            cairn_seq_release(s);
            free(buf);
        }
        if (e != flat)
            cairn_engine_destroy(e);
    }
    cairn_engine_destroy(flat);
    free(ref);
}

/* A budget of one MiB holds 256 states of this fixture (4 KiB each): many distinct
 * prompts evict the least recently used checkpoints, and a prompt whose checkpoint was
 * evicted no longer resumes (it computes from scratch, with the same logits). */
static void test_budget_evicts(void **st)
{
    (void)st;
    mode_t_ m = {CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_BF16};
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.kv_dtype = m.kv;
    o.pool_mib = 64;
    o.cold = -1;
    o.state_ckpt_mib = 1;
    cairn_engine_t *e = NULL;
    char err[256];
    assert_int_equal(cairn_engine_create(ck, &o, &e, err, sizeof err), 0);
    int32_t ids[40];
    memcpy(ids, lng, sizeof ids);
    float *first = NULL;
    for (int i = 0; i < 300; i++) { /* 300 prompts x 2 checkpoints (16, 32) */
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
    assert_true(c.ckpt_bytes <= c.ckpt_budget);
    assert_int_equal(c.ckpt_count, 256);
    assert_int_equal(c.ckpt_evictions, 600 - 256);
    /* tenant-0's checkpoints are long gone: no prefix, same logits. */
    int cached = -1;
    float *again = run(e, "tenant-0", ids, 40, 0, &cached);
    assert_int_equal(cached, 0);
    assert_memory_equal(again, first, 40 * ROW);
    /* tenant-299's are the most recent: resumed at 32. */
    free(run(e, "tenant-299", ids, 40, 0, &cached));
    assert_int_equal(cached, 32);
    free(again);
    free(first);
    cairn_engine_destroy(e);
}

static int setup(void **st)
{
    (void)st;
    return engine_runs_open(MODEL, VOCAB, &ck, &lng, &n_lng, &shr, &n_shr);
}

static int teardown(void **st)
{
    (void)st;
    engine_runs_close(ck, lng, shr);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths_f32),
        cmocka_unit_test(test_paths_bf16),
        cmocka_unit_test(test_hit_at_every_boundary),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_truncate),
        cmocka_unit_test(test_budget_evicts),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
