/*
 * The scheduler (src/server/scheduler.c) over a fixture whose layers carry recurrent
 * state (LFM2's conv layers, Qwen3.5's Gated DeltaNet layers): the scheduler's fork
 * (n > 1), preemption (release, then a begin over prompt + generated that resumes at the
 * deepest recurrent checkpoint) and prefix reuse must leave every output exactly what the
 * request gives alone.
 *   - 12 concurrent requests over a shared 64-token prefix equal their solo runs, and
 *     every one after the first reuses exactly the 64 tokens (a grid checkpoint);
 *   - a pool too small for the decodes (1 MiB: 63 LFM2 or 127 Qwen3.5 fixture blocks of
 *     f32 K/V; each request ends at 360-390 tokens, 23-25 blocks) preempts, and the outputs
 *     do not change;
 *   - n = 3 forks choices equal to solo runs with seed + index.
 * Outputs are compared as token ids, a coarse check (a state wrong for two tokens
 * perturbs later logits only slightly); each family's engine test holds the logits to
 * memcmp.
 *
 * Usage: FAMILY_TEST FIXTURE (models/<FIXTURE>); each family's tests/models/<family>/
 * CMakeLists.txt registers it with its fixture.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn/scheduler.h"
#include "server/sched_collector.h"
#include "server/sched_specs.h"

static const char *g_model;

static cairn_checkpoint_t *g_ck;
static cairn_tokenizer_t *g_tok;

/* Waits for the request's final event and destroys the collector's lock. */
static void col_wait(sched_collector_t *c)
{
    sched_col_wait(c);
    sched_col_fini(c);
}

static cairn_engine_t *make_engine(int pool_mib)
{
    cairn_engine_options_t eo;
    cairn_engine_options_default(&eo);
    eo.pool_mib = pool_mib;
    eo.kv_dtype = CAIRN_DTYPE_F32; /* LFM2 fixture: 16 KiB blocks, Qwen3.5: 8 KiB */
    eo.cold = -1;
    cairn_engine_t *e = NULL;
    char err[256] = "";
    assert_int_equal(cairn_engine_create(g_ck, &eo, &e, err, sizeof(err)), 0);
    return e;
}

static void submit(cairn_sched_t *s, const sched_spec_t *r, sched_collector_t *c)
{
    cairn_req_params_t p = sched_spec_params(r);
    p.on_event = sched_on_event;
    p.user = c;
    char err[256] = "";
    uint64_t id = 0;
    assert_int_equal(cairn_sched_submit(s, &p, &id, err, sizeof(err)), 0);
}

static void run_solo(const sched_spec_t *specs, int n, sched_collector_t *out)
{
    cairn_engine_t *e = make_engine(64);
    cairn_sched_t *s = NULL;
    assert_int_equal(cairn_sched_create(e, g_tok, NULL, &s), 0);
    for (int i = 0; i < n; i++) {
        sched_col_init(&out[i]);
        submit(s, &specs[i], &out[i]);
        col_wait(&out[i]);
        assert_int_equal(out[i].status, 0);
    }
    cairn_sched_destroy(s, 1000);
    cairn_engine_destroy(e);
}

static void same(const sched_collector_t *a, int ca, const sched_collector_t *b, int cb)
{
    assert_int_equal(a->n_ids[ca], b->n_ids[cb]);
    assert_memory_equal(a->ids[ca], b->ids[cb], (size_t)a->n_ids[ca] * sizeof(int32_t));
}

static void test_concurrent_equals_solo(void **state)
{
    (void)state;
    enum { N = 12 };
    static sched_spec_t specs[N];
    static sched_collector_t solo[N], conc[N];
    sched_specs_shared_prefix(specs, N, 64, 8);
    run_solo(specs, N, solo);
    cairn_engine_t *e = make_engine(4);
    cairn_sched_t *s = NULL;
    assert_int_equal(cairn_sched_create(e, g_tok, NULL, &s), 0);
    for (int i = 0; i < N; i++) {
        sched_col_init(&conc[i]);
        submit(s, &specs[i], &conc[i]);
    }
    for (int i = 0; i < N; i++) {
        col_wait(&conc[i]);
        assert_int_equal(conc[i].status, 0);
        same(&solo[i], 0, &conc[i], 0);
        if (i > 0)
            assert_int_equal(conc[i].usage.cached_tokens, 64);
    }
    /* The scheduler's stats (what /metrics renders) carry the checkpoint counters. */
    cairn_sched_stats_t st;
    for (int tries = 0; tries < 100000; tries++) {
        cairn_sched_stats(s, &st);
        if (st.running == 0 && st.queued == 0 && st.ckpt_restores >= N - 1)
            break;
        sched_yield();
    }
    assert_true(st.ckpt_saves > 0 && st.ckpt_count > 0 && st.ckpt_bytes > 0);
    assert_true(st.ckpt_restores >= N - 1);
    cairn_sched_destroy(s, 1000);
    cairn_engine_counters_t c;
    cairn_engine_counters(e, &c);
    assert_true(c.ckpt_restores >= N - 1);
    cairn_engine_destroy(e);
}

static void test_preemption_small_pool(void **state)
{
    (void)state;
    enum { N = 10 };
    static sched_spec_t specs[N];
    static sched_collector_t solo[N], conc[N];
    static char salts[N][16];
    sched_specs_shared_prefix(specs, N, 24, 330);
    for (int i = 0; i < N; i++) {
        snprintf(salts[i], sizeof(salts[i]), "tenant-%d", i);
        specs[i].salt = salts[i];
    }
    run_solo(specs, N, solo);
    /* 1 MiB: the decodes of a few requests at once overflow the pool. */
    cairn_engine_t *e = make_engine(1);
    cairn_sched_t *s = NULL;
    assert_int_equal(cairn_sched_create(e, g_tok, NULL, &s), 0);
    for (int i = 0; i < N; i++) {
        sched_col_init(&conc[i]);
        submit(s, &specs[i], &conc[i]);
    }
    int preempted = 0;
    for (int i = 0; i < N; i++) {
        col_wait(&conc[i]);
        assert_int_equal(conc[i].status, 0);
        same(&solo[i], 0, &conc[i], 0);
        preempted += conc[i].usage.preemptions;
    }
    cairn_sched_destroy(s, 1000);
    cairn_engine_counters_t c;
    cairn_engine_counters(e, &c);
    print_message("preemptions: %d, checkpoint restores %llu\n", preempted,
                  (unsigned long long)c.ckpt_restores);
    assert_true(preempted > 0);
    cairn_engine_destroy(e);
}

static void test_n_choices_fork(void **state)
{
    (void)state;
    enum { N = 3 };
    static sched_spec_t spec, solo_spec[N];
    static sched_collector_t multi, solo[N];
    sched_specs_shared_prefix(&spec, 1, 48, 20);
    spec.temperature = 1.0f;
    spec.seed = 77;
    spec.n = N;
    sched_spec_choices_solo(&spec, solo_spec);
    run_solo(solo_spec, N, solo);
    cairn_engine_t *e = make_engine(4);
    cairn_sched_t *s = NULL;
    assert_int_equal(cairn_sched_create(e, g_tok, NULL, &s), 0);
    sched_col_init(&multi);
    submit(s, &spec, &multi);
    col_wait(&multi);
    assert_int_equal(multi.status, 0);
    assert_int_equal(multi.n_done_events, N);
    for (int i = 0; i < N; i++)
        same(&solo[i], 0, &multi, i);
    cairn_sched_destroy(s, 1000);
    cairn_engine_destroy(e);
}

static int group_setup(void **state)
{
    (void)state;
    char dir[1024], err[512] = "";
    snprintf(dir, sizeof(dir), "%s/models/%s", CAIRN_FIXTURES_DIR, g_model);
    if (cairn_checkpoint_open(dir, &g_ck, err, sizeof(err)) ||
        cairn_tokenizer_load(dir, &g_tok, err, sizeof(err))) {
        fprintf(stderr, "fixture %s: %s\n", dir, err);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    cairn_tokenizer_destroy(g_tok);
    cairn_checkpoint_close(g_ck);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s FIXTURE\n", argv[0]);
        return 2;
    }
    g_model = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_equals_solo),
        cmocka_unit_test(test_preemption_small_pool),
        cmocka_unit_test(test_n_choices_fork),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
