/*
 * engine_runs.h — how the bit-identity tests of the engine and of each model family
 * (test_determinism, tests/models/<family>/ engine and determinism tests) drive an engine:
 * their fixture (a checkpoint and its long_720 / shared_prefix_672 prompts), the engines
 * they compare, a prompt run in chunks with the logits of every computed position
 * collected, cold prefills in several chunkings, and the checks the families with recurrent
 * state share (a hit at every block boundary, fork).
 *
 * Model. A test builds a reference (flat path, one thread, one step) and asserts with
 * memcmp that every other path gives the same bytes; these helpers only run the steps
 * and copy the logits out, so the comparisons stay in the tests. Every failure (an
 * engine that does not open, a step that fails or returns the wrong row count) fails the
 * calling cmocka test.
 *
 * Buffers: logits are [rows][vocab] f32, rows in position order. Returned buffers are
 * malloc'd and the caller frees them.
 *
 * Thread-safety: one test thread per engine, as the engine itself requires.
 */
#ifndef CAIRN_TEST_ENGINE_RUNS_H
#define CAIRN_TEST_ENGINE_RUNS_H

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

/* A prompt run as one turn of a fresh sequence: logits of its computed positions,
 * malloc'd [n - cached][vocab of the test]; *cached (when not NULL) the prefix the cache
 * served. Each test's own, over engine_runs_prompt or engine_runs_compute. */
typedef float *(*engine_runs_fn)(cairn_engine_t *e, const char *salt, const int32_t *ids, int n, int chunk,
                                 int *cached);

/* Opens fixture `model` (models/<model>) and its prompts long_720 (*lng) and
 * shared_prefix_672 (*shr), checking the vocabulary and that the prompts share their first
 * 512 tokens and *shr is longer; a cmocka group setup's result (0: ready). */
static inline int engine_runs_open(const char *model, int vocab, cairn_checkpoint_t **ck, int32_t **lng, int *n_lng,
                                   int32_t **shr, int *n_shr)
{
    *ck = fixture_open(model);
    assert_int_equal(cairn_checkpoint_config(*ck)->vocab, vocab);
    *lng = fixture_prompt(model, "long_720", n_lng);
    *shr = fixture_prompt(model, "shared_prefix_672", n_shr);
    return memcmp(*lng, *shr, 512 * sizeof(int32_t)) != 0 || *n_shr <= 512;
}

/* Frees what engine_runs_open returned. */
static inline void engine_runs_close(cairn_checkpoint_t *ck, int32_t *lng, int32_t *shr)
{
    free(lng);
    free(shr);
    cairn_checkpoint_close(ck);
}

/* The options the bit-identity tests vary: math, K/V dtype, path, threads and the step
 * size (sub-batch rows); a 32 MiB pool and the cold tier off (nothing there is about the
 * SSD tier). The caller may change any field before engine_runs_create. */
static inline cairn_engine_options_t engine_runs_options(cairn_engine_math_t math, cairn_dtype_t kv,
                                                         cairn_kv_path_t path, int threads, int max_step)
{
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.kv_path = path;
    o.kv_dtype = kv;
    o.math = math;
    o.n_threads = threads;
    o.pool_mib = 32;
    o.max_step_tokens = max_step;
    o.cold = -1;
    return o;
}

/* An engine over ck with options o; one that does not open fails the test. */
static inline cairn_engine_t *engine_runs_create(const cairn_checkpoint_t *ck, const cairn_engine_options_t *o)
{
    cairn_engine_t *e = NULL;
    char err[256] = "";
    int rc = cairn_engine_create(ck, o, &e, err, sizeof(err));
    if (rc)
        fprintf(stderr, "engine: %s\n", err);
    assert_int_equal(rc, 0);
    return e;
}

/* Computes the pending tokens of s in chunks of `chunk` tokens (0: one step), the logits
 * of every computed position into out ([n_pending][vocab], the caller's); returns how
 * many positions that was. */
static inline int engine_runs_compute(cairn_engine_t *e, cairn_seq_t *s, int chunk, int vocab, float *out)
{
    int done = 0;
    while (cairn_seq_n_pending(s) > 0) {
        int len = chunk && chunk < cairn_seq_n_pending(s) ? chunk : cairn_seq_n_pending(s);
        cairn_batch_item_t it = {s, len, CAIRN_LOGITS_ALL};
        const float *lg;
        int rows;
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
        assert_int_equal(rows, len);
        memcpy(out + (size_t)done * vocab, lg, (size_t)rows * vocab * sizeof(float));
        done += rows;
    }
    return done;
}

/* Runs ids[0..n) as one turn of a fresh sequence in cache_salt `salt` (NULL: none), in
 * chunks of `chunk` tokens (0: one step), ends the turn and releases the sequence. Returns
 * the logits of every computed position, malloc'd [n - cached][vocab]; *cached (when not
 * NULL) receives the prefix the cache served. */
static inline float *engine_runs_prompt(cairn_engine_t *e, const char *salt, const int32_t *ids, int n, int chunk,
                                        int vocab, int *cached)
{
    cairn_seq_t *s;
    int hit = 0;
    assert_int_equal(cairn_seq_begin(e, salt, ids, n, &s, &hit), 0);
    if (cached)
        *cached = hit;
    float *out = malloc((size_t)(n - hit) * vocab * sizeof(float));
    assert_non_null(out);
    assert_int_equal(engine_runs_compute(e, s, chunk, vocab, out), n - hit);
    assert_int_equal(cairn_seq_end_turn(s), 0);
    cairn_seq_release(s);
    return out;
}

/* Cold prefills on the paged engine: ids[0..n) in chunks of chunks[i] tokens (0: one
 * step), each chunking in its own salt "chunks-<chunk>" so nothing is cached; every
 * position's logits must equal ref's ([n][vocab]). */
static inline void engine_runs_check_chunkings(cairn_engine_t *paged, engine_runs_fn run, const int *chunks,
                                               size_t n_chunks, const int32_t *ids, int n, const float *ref, int vocab)
{
    for (size_t i = 0; i < n_chunks; i++) {
        char salt[32];
        snprintf(salt, sizeof salt, "chunks-%d", chunks[i]);
        int cached = -1;
        float *x = run(paged, salt, ids, n, chunks[i], &cached);
        assert_int_equal(cached, 0);
        assert_memory_equal(x, ref, (size_t)n * vocab * sizeof(float));
        free(x);
    }
}

/*
 * A hit at every block boundary on a family with recurrent state (16-token blocks, the
 * engine's default): in one salt, prompts of P + 1 tokens of ids for P = 16, 32, ... < n.
 * Each resumes at the checkpoint the previous one left at its last full block (P - 16), so
 * every boundary is hit once and each state is one restored from a restored state; the 17
 * computed positions must equal ref's (the fresh prefill of ids, [n][vocab]). The whole
 * prompt then resumes at its deepest boundary below n. Returns how many boundary prompts
 * ran ((n - 1) / 16).
 */
static inline int engine_runs_check_boundaries(cairn_engine_t *paged, engine_runs_fn run, const char *salt,
                                               const int32_t *ids, int n, const float *ref, int vocab)
{
    const size_t row = (size_t)vocab * sizeof(float);
    int checked = 0, cached = -1;
    for (int P = 16; P < n; P += 16) {
        float *x = run(paged, salt, ids, P + 1, 0, &cached);
        assert_int_equal(cached, P - 16);
        assert_memory_equal(x, ref + (size_t)cached * vocab, (size_t)(P + 1 - cached) * row);
        free(x);
        checked++;
    }
    assert_int_equal(checked, (n - 1) / 16);
    const int deepest = (n - 1) / 16 * 16;
    float *x = run(paged, salt, ids, n, 0, &cached);
    assert_int_equal(cached, deepest);
    assert_memory_equal(x, ref + (size_t)deepest * vocab, (size_t)(n - deepest) * row);
    free(x);
    return checked;
}

/*
 * n > 1 on a family with recurrent state: a 100-token prefix of `prompt` computed on the
 * paged engine, forked three times; the children are fed 40 tokens of their own, one per
 * step, all three in one batch. Each child's logits must be memcmp-equal to those a fresh
 * sequence over prefix + its tokens gives on the flat engine (so a fork carries the
 * prompt's state, and choices do not disturb one another).
 */
static inline void engine_runs_check_fork(cairn_engine_t *paged, cairn_engine_t *flat, const int32_t *prompt,
                                          int vocab)
{
    enum { N = 100, KIDS = 3, TAIL = 40 };
    const size_t row = (size_t)vocab * sizeof(float);
    cairn_seq_t *p, *kids[KIDS];
    float *buf = malloc(N * row), *got = malloc((size_t)KIDS * TAIL * row); /* [KIDS][TAIL][vocab] */
    assert_true(buf && got);
    assert_int_equal(cairn_seq_begin(paged, "fork", prompt, N, &p, NULL), 0);
    engine_runs_compute(paged, p, 0, vocab, buf);
    for (int k = 0; k < KIDS; k++)
        assert_int_equal(cairn_seq_fork(p, &kids[k]), 0);
    int32_t tail[KIDS][TAIL];
    for (int k = 0; k < KIDS; k++)
        for (int t = 0; t < TAIL; t++)
            tail[k][t] = (int32_t)((k * 977 + t * 31 + 5) % vocab);
    for (int t = 0; t < TAIL; t++) {
        cairn_batch_item_t items[KIDS];
        for (int k = 0; k < KIDS; k++) {
            assert_int_equal(cairn_seq_feed(kids[k], &tail[k][t], 1), 0);
            items[k] = (cairn_batch_item_t){kids[k], 1, CAIRN_LOGITS_LAST};
        }
        const float *lg;
        int rows;
        assert_int_equal(cairn_engine_step(paged, items, KIDS, &lg, &rows), 0);
        for (int k = 0; k < KIDS; k++)
            memcpy(got + ((size_t)k * TAIL + t) * vocab, lg + (size_t)k * vocab, row);
    }
    for (int k = 0; k < KIDS; k++) {
        int32_t ids[N + TAIL];
        memcpy(ids, prompt, N * sizeof(int32_t));
        memcpy(ids + N, tail[k], sizeof tail[k]);
        float *ref = engine_runs_prompt(flat, NULL, ids, N + TAIL, 0, vocab, NULL);
        assert_memory_equal(got + (size_t)k * TAIL * vocab, ref + (size_t)N * vocab, TAIL * row);
        free(ref);
        cairn_seq_release(kids[k]);
    }
    cairn_seq_release(p);
    free(buf);
    free(got);
}

#endif
