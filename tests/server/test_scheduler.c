/*
 * test_scheduler.c — the scheduler over the qwen3 fixture (4 layers, vocab 4096):
 * concurrent requests produce exactly their solo outputs, shared prefixes are cached and
 * computed once, a tiny pool preempts without changing any output, cancel frees the
 * blocks, a full queue answers CAIRN_EBUSY, n > 1 forks choices equal to solo runs with
 * seed + index, and shutdown cancels what is left.
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

#include <cjson/cJSON.h>
#include <math.h>

#include "cairn/scheduler.h"
#include "server/sched_collector.h"
#include "server/sched_specs.h"

#define MODEL "qwen3"

static char g_dir[1024];
static cairn_checkpoint_t *g_ck;
static cairn_tokenizer_t *g_tok;


/* ---- Fixture set-up ----------------------------------------------------------------- */

static int group_setup(void **state)
{
    snprintf(g_dir, sizeof(g_dir), "%s/models/%s", CAIRN_FIXTURES_DIR, MODEL);
    char err[512] = "";
    if (cairn_checkpoint_open(g_dir, &g_ck, err, sizeof(err))) {
        fprintf(stderr, "fixture %s: %s\n", g_dir, err);
        return -1;
    }
    if (cairn_tokenizer_load(g_dir, &g_tok, err, sizeof(err))) {
        fprintf(stderr, "fixture tokenizer %s: %s\n", g_dir, err);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    cairn_tokenizer_destroy(g_tok);
    cairn_checkpoint_close(g_ck);
    return 0;
}

/* An engine with a pool of pool_mib; f32 K/V blocks are 32 KiB (31 usable blocks per MiB,
 * bf16: 63), which keeps the small-pool tests small. */
static cairn_engine_t *make_engine_kv(int pool_mib, cairn_dtype_t kv)
{
    cairn_engine_options_t eo;
    cairn_engine_options_default(&eo);
    eo.n_threads = 1;
    eo.pool_mib = pool_mib;
    eo.kv_dtype = kv;
    eo.cold = -1; /* token counts below are of the hot cache alone */
    cairn_engine_t *e = NULL;
    char err[256] = "";
    int rc = cairn_engine_create(g_ck, &eo, &e, err, sizeof(err));
    if (rc)
        fprintf(stderr, "engine: %s\n", err);
    assert_int_equal(rc, 0);
    return e;
}

static cairn_engine_t *make_engine(int pool_mib) { return make_engine_kv(pool_mib, CAIRN_DTYPE_BF16); }

static cairn_sched_t *make_sched(cairn_engine_t *e, const cairn_sched_options_t *o)
{
    cairn_sched_t *s = NULL;
    assert_int_equal(cairn_sched_create(e, g_tok, o, &s), 0);
    return s;
}

static uint64_t submit(cairn_sched_t *s, const sched_spec_t *r, sched_collector_t *c)
{
    cairn_req_params_t p = sched_spec_params(r);
    p.on_event = sched_on_event;
    p.user = c;
    c->sched = s;
    char err[256] = "";
    uint64_t id = 0;
    /* Hold the collector's lock until the id is stored: the engine thread may deliver
     * events (and a cancel_at callback may cancel by id) before submit returns. */
    pthread_mutex_lock(&c->mu);
    int rc = cairn_sched_submit(s, &p, &id, err, sizeof(err));
    c->id = id;
    pthread_mutex_unlock(&c->mu);
    if (rc)
        fprintf(stderr, "submit: %s (%s)\n", cairn_strerror(rc), err);
    assert_int_equal(rc, 0);
    return id;
}

/* Runs each spec alone (one at a time) on a fresh engine: the reference outputs. */
static void run_solo(const sched_spec_t *specs, int n, sched_collector_t *out, cairn_dtype_t kv)
{
    cairn_engine_t *e = make_engine_kv(64, kv);
    cairn_sched_t *s = make_sched(e, NULL);
    for (int i = 0; i < n; i++) {
        sched_col_init(&out[i]);
        submit(s, &specs[i], &out[i]);
        sched_col_wait(&out[i]);
        assert_int_equal(out[i].status, 0);
    }
    cairn_sched_destroy(s, 1000);
    cairn_engine_destroy(e);
}

/* Stats are published after each engine step, so they can trail the final event: wait
 * until every submitted request is accounted for and nothing runs. */
static void stats_settled(cairn_sched_t *s, cairn_sched_stats_t *st)
{
    for (int tries = 0; tries < 100000; tries++) {
        cairn_sched_stats(s, st);
        if (st->running == 0 && st->queued == 0 &&
            st->requests_done + st->requests_failed + st->requests_canceled == st->requests_submitted)
            return;
        sched_yield();
    }
    fail_msg("the scheduler's stats never settled");
}

/* The pool after every request finished, from the KV core: no block referenced by a
 * sequence, the rest cached or free. */
static void assert_pool_idle(const cairn_sched_stats_t *st)
{
    assert_int_equal(st->pool_blocks_used, 0);
    assert_true(st->pool_blocks_total > 0);
    assert_int_equal(st->pool_blocks_cached + st->pool_blocks_free, st->pool_blocks_total);
    assert_true(st->pool_block_bytes > 0);
    assert_true(st->pool_bytes_committed > 0);
}

/* A request whose prompt fills every usable block of the pool (salt "probe", so nothing is
 * cached for it): it can only be admitted when no block is held by any sequence. After
 * it, the KV core holds no block in use again, and the probe's blocks stay cached. */
static void probe_pool_empty(cairn_sched_t *s)
{
    cairn_sched_stats_t st;
    stats_settled(s, &st);
    assert_pool_idle(&st);
    static sched_spec_t r;
    memset(&r, 0, sizeof(r));
    r.n_prompt = (int)st.pool_blocks_total * 16;
    assert_true(r.n_prompt <= (int)CAIRN_ARRAY_LEN(r.prompt));
    for (int k = 0; k < r.n_prompt; k++)
        r.prompt[k] = (int32_t)((k * 7919 + 5) % 4000);
    r.max_tokens = 1;
    r.n = 1;
    r.salt = "probe";
    sched_collector_t *c = malloc(sizeof(*c));
    sched_col_init(c);
    submit(s, &r, c);
    sched_col_wait(c);
    assert_int_equal(c->status, 0);
    assert_int_equal(c->n_ids[0], 1);
    sched_col_fini(c);
    free(c);
    stats_settled(s, &st);
    assert_pool_idle(&st);
    assert_true(st.pool_blocks_cached > 0);
}

static void assert_same_output(const sched_collector_t *a, const sched_collector_t *b, int choice)
{
    assert_int_equal(a->n_ids[choice], b->n_ids[choice]);
    assert_memory_equal(a->ids[choice], b->ids[choice], (size_t)a->n_ids[choice] * sizeof(int32_t));
    assert_int_equal(a->text_len[choice], b->text_len[choice]);
    assert_memory_equal(a->text[choice], b->text[choice], a->text_len[choice]);
    assert_int_equal(a->finish[choice], b->finish[choice]);
}

/* ---- Tests -------------------------------------------------------------------------- */

static void test_concurrent_equals_solo(void **state)
{
    enum { N = 16 };
    static sched_spec_t specs[N];
    static sched_collector_t solo[N], conc[N];
    sched_specs_shared_prefix(specs, N, 64, 8);
    run_solo(specs, N, solo, CAIRN_DTYPE_BF16);

    cairn_engine_t *e = make_engine(1); /* 63 blocks: enough for all, and for the probe */
    cairn_sched_t *s = make_sched(e, NULL);
    for (int i = 0; i < N; i++) {
        sched_col_init(&conc[i]);
        submit(s, &specs[i], &conc[i]);
    }
    int cached = 0;
    for (int i = 0; i < N; i++) {
        sched_col_wait(&conc[i]);
        assert_int_equal(conc[i].status, 0);
        assert_same_output(&solo[i], &conc[i], 0);
        assert_int_equal(conc[i].usage.completion_tokens, specs[i].max_tokens);
        assert_int_equal(conc[i].finish[0], CAIRN_FINISH_LENGTH);
        assert_int_equal(conc[i].usage.prompt_tokens, specs[i].n_prompt);
        if (i > 0 && conc[i].usage.cached_tokens > 0) {
            assert_int_equal(conc[i].usage.cached_tokens, 64);
            cached++;
        }
    }
    /* Everything after the first shares the 4 prefix blocks (held, then attached). */
    assert_int_equal(cached, N - 1);
    cairn_sched_stats_t st;
    stats_settled(s, &st);
    assert_int_equal(st.requests_done, N);
    assert_int_equal(st.running, 0);
    assert_int_equal(st.cached_tokens, 64 * (N - 1));
    probe_pool_empty(s);
    cairn_sched_destroy(s, 1000);
    cairn_engine_destroy(e);
    for (int i = 0; i < N; i++) {
        sched_col_fini(&solo[i]);
        sched_col_fini(&conc[i]);
    }
}

static void test_preemption_small_pool(void **state)
{
    enum { N = 16 };
    static sched_spec_t specs[N];
    static sched_collector_t solo[N], conc[N];
    sched_specs_shared_prefix(specs, N, 24, 160);
    /* Distinct salts: nothing is shared. Each request ends at 189-215 tokens (12-14
     * blocks), so any 3 running at once overflow the 31 f32 blocks of a 1 MiB pool while
     * they decode, however the arrivals interleave with the engine thread. */
    static char salts[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(salts[i], sizeof(salts[i]), "tenant-%d", i);
        specs[i].salt = salts[i];
    }
    run_solo(specs, N, solo, CAIRN_DTYPE_F32);

    cairn_engine_t *e = make_engine_kv(1, CAIRN_DTYPE_F32);
    cairn_sched_t *s = make_sched(e, NULL);
    for (int i = 0; i < N; i++) {
        sched_col_init(&conc[i]);
        submit(s, &specs[i], &conc[i]);
    }
    int preempted = 0;
    for (int i = 0; i < N; i++) {
        sched_col_wait(&conc[i]);
        assert_int_equal(conc[i].status, 0);
        assert_same_output(&solo[i], &conc[i], 0);
        preempted += conc[i].usage.preemptions;
    }
    cairn_sched_stats_t st;
    stats_settled(s, &st);
    assert_true(preempted > 0);
    assert_int_equal(st.preemptions, (uint64_t)preempted);
    assert_int_equal(st.requests_done, N);
    assert_int_equal(st.requests_failed, 0);
    probe_pool_empty(s);
    cairn_sched_destroy(s, 1000);
    cairn_engine_destroy(e);
    for (int i = 0; i < N; i++) {
        sched_col_fini(&solo[i]);
        sched_col_fini(&conc[i]);
    }
}

static void test_shared_prefix_computed_once(void **state)
{
    enum { N = 4, PREFIX = 256, SUFFIX = 10, GEN = 4 };
    static sched_spec_t specs[N];
    static sched_collector_t c[N];
    for (int i = 0; i < N; i++) {
        sched_spec_t *r = &specs[i];
        memset(r, 0, sizeof(*r));
        for (int k = 0; k < PREFIX; k++)
            r->prompt[k] = (int32_t)((k * 53 + 7) % 4000);
        for (int k = 0; k < SUFFIX; k++)
            r->prompt[PREFIX + k] = (int32_t)((i * 97 + k * 13 + 1) % 4000);
        r->n_prompt = PREFIX + SUFFIX;
        r->max_tokens = GEN;
        r->n = 1;
    }
    cairn_engine_t *e = make_engine(16);
    cairn_sched_options_t o;
    cairn_sched_options_default(&o);
    o.prefill_chunk = 32; /* the first prompt takes 9 steps: the others arrive meanwhile */
    cairn_sched_t *s = make_sched(e, &o);
    for (int i = 0; i < N; i++) {
        sched_col_init(&c[i]);
        submit(s, &specs[i], &c[i]);
    }
    for (int i = 0; i < N; i++) {
        sched_col_wait(&c[i]);
        assert_int_equal(c[i].status, 0);
    }
    cairn_sched_stats_t st;
    stats_settled(s, &st);
    /* The prefix once, each suffix, and GEN - 1 decode rows per request (the last token
     * sampled is never computed). */
    assert_int_equal(st.engine_tokens_computed,
                     (uint64_t)(PREFIX + N * SUFFIX + N * (GEN - 1)));
    assert_int_equal(st.engine_tokens_reused, (uint64_t)((N - 1) * PREFIX));
    for (int i = 1; i < N; i++)
        assert_int_equal(c[i].usage.cached_tokens, PREFIX);
    assert_int_equal(c[0].usage.cached_tokens, 0);
    assert_string_equal(c[1].usage.miss_reason, "none");
    cairn_sched_destroy(s, 1000);
    cairn_engine_destroy(e);
    for (int i = 0; i < N; i++)
        sched_col_fini(&c[i]);
}

static void test_cancel_frees_blocks(void **state)
{
    cairn_engine_t *e = make_engine_kv(1, CAIRN_DTYPE_F32);
    cairn_sched_t *s = make_sched(e, NULL);
    static sched_spec_t r;
    memset(&r, 0, sizeof(r));
    for (int k = 0; k < 100; k++)
        r.prompt[k] = (int32_t)((k * 31 + 2) % 4000);
    r.n_prompt = 100;
    r.max_tokens = 800;
    r.n = 1;
    static sched_collector_t c;
    sched_col_init(&c);
    c.cancel_at = 5; /* canceled from the callback, mid-stream */
    submit(s, &r, &c);
    sched_col_wait(&c);
    assert_int_equal(c.status, CAIRN_ECANCELED);
    assert_true(c.n_ids[0] >= 5 && c.n_ids[0] < 800);
    assert_int_equal(c.n_done_events, 0);

    /* And from another thread, while it runs. */
    static sched_collector_t c2;
    sched_col_init(&c2);
    uint64_t id = submit(s, &r, &c2);
    for (;;) {
        pthread_mutex_lock(&c2.mu);
        int got = c2.n_ids[0];
        pthread_mutex_unlock(&c2.mu);
        if (got >= 3)
            break;
        sched_yield();
    }
    cairn_sched_cancel(s, id);
    cairn_sched_cancel(s, 987654); /* unknown: no-op */
    sched_col_wait(&c2);
    assert_int_equal(c2.status, CAIRN_ECANCELED);
    cairn_sched_stats_t st;
    stats_settled(s, &st);
    assert_int_equal(st.requests_canceled, 2);
    probe_pool_empty(s);
    cairn_sched_destroy(s, 1000);
    cairn_engine_destroy(e);
    sched_col_fini(&c);
    sched_col_fini(&c2);
}

static void test_queue_full_and_shutdown(void **state)
{
    cairn_engine_t *e = make_engine(8);
    cairn_sched_options_t o;
    cairn_sched_options_default(&o);
    o.max_running = 1;
    o.max_queued = 2;
    cairn_sched_t *s = make_sched(e, &o);
    static sched_spec_t r;
    memset(&r, 0, sizeof(r));
    for (int k = 0; k < 20; k++)
        r.prompt[k] = (int32_t)(k + 100);
    r.n_prompt = 20;
    r.max_tokens = 4000;
    r.n = 1;
    static sched_collector_t c[4];
    cairn_req_params_t p = {0};
    p.prompt = r.prompt;
    p.n_prompt = r.n_prompt;
    cairn_sampling_params_init(&p.sampling);
    p.sampling.temperature = 0;
    p.sampling.max_tokens = r.max_tokens;
    p.sampling.ignore_eos = true;
    p.on_event = sched_on_event;
    int accepted = 0, busy = -1;
    for (int i = 0; i < 4; i++) {
        sched_col_init(&c[i]);
        p.user = &c[i];
        uint64_t id;
        char err[128] = "";
        int rc = cairn_sched_submit(s, &p, &id, err, sizeof(err));
        if (rc == CAIRN_EBUSY) {
            busy = i;
            assert_string_equal(err, "too many queued requests");
            break;
        }
        assert_int_equal(rc, 0);
        accepted++;
    }
    /* One request may be running; at most two wait. */
    assert_true(busy == 2 || busy == 3);

    /* Bad input is rejected at submit with a message, and no event follows. */
    char err[256] = "";
    uint64_t id;
    cairn_req_params_t bad = p;
    bad.n_prompt = 0;
    assert_int_equal(cairn_sched_submit(s, &bad, &id, err, sizeof(err)), CAIRN_EINVAL);
    bad = p;
    bad.sampling.top_p = 1.5f;
    assert_int_equal(cairn_sched_submit(s, &bad, &id, err, sizeof(err)), CAIRN_EINVAL);
    assert_non_null(strstr(err, "top_p"));
    bad = p;
    bad.sampling.max_tokens = 9000; /* the fixture's context is 8192 */
    assert_int_equal(cairn_sched_submit(s, &bad, &id, err, sizeof(err)), CAIRN_ERANGE);
    bad = p;
    bad.n = 17;
    assert_int_equal(cairn_sched_submit(s, &bad, &id, err, sizeof(err)), CAIRN_EINVAL);

    /* Shutdown with a short deadline cancels everything still running or queued. */
    cairn_sched_destroy(s, 50);
    for (int i = 0; i < accepted; i++) {
        assert_true(c[i].final);
        assert_int_equal(c[i].status, CAIRN_ECANCELED);
    }
    cairn_engine_destroy(e);
    for (int i = 0; i < 4; i++)
        sched_col_fini(&c[i]);
}

static void test_n_choices_fork(void **state)
{
    enum { N = 3 };
    static sched_spec_t spec, solo_spec[N];
    static sched_collector_t multi, solo[N];
    sched_specs_shared_prefix(&spec, 1, 48, 10);
    spec.temperature = 1.0f;
    spec.seed = 77;
    spec.n = N;
    sched_spec_choices_solo(&spec, solo_spec);
    run_solo(solo_spec, N, solo, CAIRN_DTYPE_F32);

    cairn_engine_t *e = make_engine_kv(1, CAIRN_DTYPE_F32);
    cairn_sched_t *s = make_sched(e, NULL);
    sched_col_init(&multi);
    submit(s, &spec, &multi);
    sched_col_wait(&multi);
    assert_int_equal(multi.status, 0);
    assert_int_equal(multi.n_done_events, N);
    for (int i = 0; i < N; i++) {
        sched_collector_t one = {0};
        memcpy(one.ids[0], multi.ids[i], sizeof(one.ids[0]));
        one.n_ids[0] = multi.n_ids[i];
        memcpy(one.text[0], multi.text[i], sizeof(one.text[0]));
        one.text_len[0] = multi.text_len[i];
        one.finish[0] = multi.finish[i];
        assert_same_output(&solo[i], &one, 0);
    }
    assert_int_equal(multi.usage.completion_tokens, N * spec.max_tokens);
    cairn_sched_stats_t st;
    stats_settled(s, &st);
    /* The prompt once, then N x (max_tokens - 1) decode rows. */
    assert_int_equal(st.engine_tokens_computed, (uint64_t)(spec.n_prompt + N * (spec.max_tokens - 1)));
    probe_pool_empty(s);
    cairn_sched_destroy(s, 1000);
    cairn_engine_destroy(e);
    sched_col_fini(&multi);
    for (int i = 0; i < N; i++)
        sched_col_fini(&solo[i]);
}

static void test_stop_string_and_text(void **state)
{
    /* Greedy text of a prompt, then the same request with a stop string taken from the
     * middle of that text: the output is the text before it, finish "stop". */
    cairn_engine_t *e = make_engine(8);
    cairn_sched_t *s = make_sched(e, NULL);
    static sched_spec_t r;
    sched_specs_shared_prefix(&r, 1, 32, 24);
    static sched_collector_t a, b;
    sched_col_init(&a);
    submit(s, &r, &a);
    sched_col_wait(&a);
    assert_int_equal(a.status, 0);
    /* The text equals the decode of the ids. */
    char *dec = NULL;
    size_t dec_len = 0;
    assert_int_equal(cairn_tokenizer_decode(g_tok, a.ids[0], (size_t)a.n_ids[0], true, &dec, &dec_len), 0);
    assert_int_equal(dec_len, a.text_len[0]);
    assert_memory_equal(dec, a.text[0], dec_len);
    cairn_free(dec);
    size_t at = a.text_len[0] / 2;
    while (at + 3 <= a.text_len[0] &&
           !((unsigned char)a.text[0][at] < 0x80 && (unsigned char)a.text[0][at + 1] < 0x80 &&
             (unsigned char)a.text[0][at + 2] < 0x80 && a.text[0][at] && a.text[0][at + 1] &&
             a.text[0][at + 2]))
        at++;
    if (at + 3 <= a.text_len[0]) {
        char stop[4];
        memcpy(stop, a.text[0] + at, 3);
        stop[3] = 0;
        const char *first = strstr(a.text[0], stop);
        const char *stops[1] = {stop};
        cairn_req_params_t p = {0};
        p.prompt = r.prompt;
        p.n_prompt = r.n_prompt;
        cairn_sampling_params_init(&p.sampling);
        p.sampling.temperature = 0;
        p.sampling.max_tokens = r.max_tokens;
        p.sampling.ignore_eos = true;
        p.sampling.stop = stops;
        p.sampling.n_stop = 1;
        p.on_event = sched_on_event;
        sched_col_init(&b);
        p.user = &b;
        uint64_t id;
        assert_int_equal(cairn_sched_submit(s, &p, &id, NULL, 0), 0);
        sched_col_wait(&b);
        assert_int_equal(b.status, 0);
        assert_int_equal(b.finish[0], CAIRN_FINISH_STOP);
        assert_int_equal(b.text_len[0], (size_t)(first - a.text[0]));
        assert_memory_equal(b.text[0], a.text[0], b.text_len[0]);
        sched_col_fini(&b);
    }
    cairn_sched_destroy(s, 1000);
    cairn_engine_destroy(e);
    sched_col_fini(&a);
}

/* Logprobs against an independent reference: HF's float32 logits at the last prompt
 * position of chat_short (reference.json), log-softmaxed here. f32 K/V keeps the engine
 * within float rounding of them. Also: DELTA events carry the prompt's usage. */
static void test_logprobs_match_reference(void **state)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/reference.json", g_dir);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *txt = malloc((size_t)n + 1);
    assert_int_equal(fread(txt, 1, (size_t)n, f), (size_t)n);
    txt[n] = '\0';
    fclose(f);
    cJSON *ref = cJSON_Parse(txt);
    free(txt);
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "cases"), 0);
    cJSON *ids = cJSON_GetObjectItem(c0, "prompt_ids");
    sched_spec_t spec;
    memset(&spec, 0, sizeof spec);
    spec.n_prompt = cJSON_GetArraySize(ids);
    for (int i = 0; i < spec.n_prompt; i++)
        spec.prompt[i] = cJSON_GetArrayItem(ids, i)->valueint;
    spec.max_tokens = 1;
    spec.n = 1;
    snprintf(path, sizeof path, "%s/%s", g_dir,
             cJSON_GetObjectItem(c0, "last_logits_file")->valuestring);
    float *logits = malloc(4096 * sizeof(float));
    f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(logits, sizeof(float), 4096, f), 4096);
    fclose(f);
    cJSON_Delete(ref);
    double mx = -1e30, sum = 0;
    int best = 0;
    for (int i = 0; i < 4096; i++)
        if (logits[i] > mx) {
            mx = logits[i];
            best = i;
        }
    for (int i = 0; i < 4096; i++)
        sum += exp(logits[i] - mx);
    double lse = mx + log(sum);

    cairn_engine_t *e = make_engine_kv(64, CAIRN_DTYPE_F32);
    cairn_sched_t *s = make_sched(e, NULL);
    sched_collector_t c;
    sched_col_init(&c);
    c.delta_prompt_tokens = -1;
    cairn_req_params_t p = {0};
    p.prompt = spec.prompt;
    p.n_prompt = spec.n_prompt;
    cairn_sampling_params_init(&p.sampling);
    p.sampling.temperature = 0;
    p.sampling.max_tokens = 1;
    p.sampling.ignore_eos = true;
    p.logprobs = true;
    p.top_logprobs = 5;
    p.on_event = sched_on_event;
    p.user = &c;
    uint64_t id;
    char err[256] = "";
    assert_int_equal(cairn_sched_submit(s, &p, &id, err, sizeof err), 0);
    sched_col_wait(&c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.n_lp, 1);
    assert_int_equal(c.lp[0].token, best);
    assert_int_equal(c.ids[0][0], best);
    assert_true(fabs(c.lp[0].logprob - (logits[best] - lse)) < 1e-3);
    assert_int_equal(c.lp[0].n_top, 5);
    assert_int_equal(c.lp[0].top_ids[0], best);
    for (int k = 0; k < 5; k++) {
        int t = c.lp[0].top_ids[k];
        assert_true(fabs(c.lp[0].top_logprobs[k] - (logits[t] - lse)) < 1e-3);
        if (k > 0) /* sorted, and nothing outside the top k beats them (up to rounding) */
            assert_true(c.lp[0].top_logprobs[k] <= c.lp[0].top_logprobs[k - 1]);
    }
    int beat = 0;
    for (int i = 0; i < 4096; i++)
        beat += logits[i] > logits[c.lp[0].top_ids[4]] + 1e-3;
    assert_true(beat <= 4);
    assert_int_equal(c.delta_prompt_tokens, spec.n_prompt);
    /* Without logprobs asked, DELTA events carry none. */
    sched_collector_t d;
    sched_col_init(&d);
    p.logprobs = false;
    p.user = &d;
    assert_int_equal(cairn_sched_submit(s, &p, &id, err, sizeof err), 0);
    sched_col_wait(&d);
    assert_int_equal(d.n_lp, 0);
    /* Out of range. */
    p.logprobs = true;
    p.top_logprobs = 21;
    assert_int_equal(cairn_sched_submit(s, &p, &id, err, sizeof err), CAIRN_EINVAL);
    sched_col_fini(&c);
    sched_col_fini(&d);
    cairn_sched_destroy(s, 1000);
    cairn_engine_destroy(e);
    free(logits);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_equals_solo),
        cmocka_unit_test(test_preemption_small_pool),
        cmocka_unit_test(test_shared_prefix_computed_once),
        cmocka_unit_test(test_cancel_frees_blocks),
        cmocka_unit_test(test_queue_full_and_shutdown),
        cmocka_unit_test(test_n_choices_fork),
        cmocka_unit_test(test_stop_string_and_text),
        cmocka_unit_test(test_logprobs_match_reference),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
