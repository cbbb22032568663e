/*
 * Tests for the sampler (parameters, penalties, truncation, RNG, finish checks) and the
 * stop-string matcher. Expectations are computed by hand on small logits vectors, or by
 * brute force (a full sort in the test) for the larger ones.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cairn/sampler.h"

/* ---- helpers ----------------------------------------------------------------------- */

static cairn_sampler_t *make(const cairn_sampling_params_t *p, int32_t vocab)
{
    cairn_sampler_model_t m = { .vocab_size = vocab };
    cairn_sampler_t *s = NULL;
    assert_int_equal(cairn_sampler_create(p, &m, &s), CAIRN_OK);
    assert_non_null(s);
    return s;
}

/* Samples once from a copy of logits (sample() rewrites its input). */
static int32_t draw(cairn_sampler_t *s, const float *logits, int32_t vocab)
{
    float *l = malloc((size_t)vocab * sizeof(float));
    assert_non_null(l);
    memcpy(l, logits, (size_t)vocab * sizeof(float));
    int32_t tok = -1;
    assert_int_equal(cairn_sampler_sample(s, l, &tok), CAIRN_OK);
    free(l);
    assert_true(tok >= 0 && tok < vocab);
    return tok;
}

/* A deterministic test-side generator for random logits (independent of the sampler). */
static uint32_t lcg(uint32_t *x)
{
    *x = *x * 1664525u + 1013904223u;
    return *x >> 8;
}

static float rand_logit(uint32_t *x) { return (float)(lcg(x) % 20000) / 1000.0f - 10.0f; }

/* ---- parameters -------------------------------------------------------------------- */

static void test_params_defaults(void **state)
{
    (void)state;
    cairn_sampling_params_t p;
    cairn_sampling_params_init(&p);
    assert_true(p.temperature == 1.0f);
    assert_int_equal(p.top_k, -1);
    assert_true(p.top_p == 1.0f);
    assert_true(p.min_p == 0.0f);
    assert_true(p.repetition_penalty == 1.0f);
    assert_true(p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f);
    assert_int_equal(p.max_tokens, -1);
    assert_false(p.has_seed);
    char err[128];
    assert_int_equal(cairn_sampling_params_validate(&p, 100, err, sizeof(err)), CAIRN_OK);
    assert_string_equal(err, "");
    assert_string_equal(cairn_finish_reason_name(CAIRN_FINISH_STOP), "stop");
    assert_string_equal(cairn_finish_reason_name(CAIRN_FINISH_LENGTH), "length");
    assert_null(cairn_finish_reason_name(CAIRN_FINISH_NONE));
}

static void expect_invalid(const cairn_sampling_params_t *p, const char *field)
{
    char err[160];
    assert_int_equal(cairn_sampling_params_validate(p, 100, err, sizeof(err)), CAIRN_EINVAL);
    if (!strstr(err, field))
        fail_msg("message \"%s\" does not name %s", err, field);
    cairn_sampler_model_t m = { .vocab_size = 100 };
    cairn_sampler_t *s = (cairn_sampler_t *)&m; /* must stay untouched */
    assert_int_equal(cairn_sampler_create(p, &m, &s), CAIRN_EINVAL);
    assert_ptr_equal(s, (cairn_sampler_t *)&m);
}

static void test_params_invalid(void **state)
{
    (void)state;
    cairn_sampling_params_t p;
    int32_t bad_ids[] = { 3, 100 };
    cairn_logit_bias_t bad_tok[] = { { -1, 1.0f } }, bad_bias[] = { { 5, 100.5f } };
    const char *bad_stop[] = { "ok", "" };
#define CASE(field, stmt) do { cairn_sampling_params_init(&p); stmt; expect_invalid(&p, field); } while (0)
    CASE("temperature", p.temperature = -0.1f);
    CASE("temperature", p.temperature = NAN);
    CASE("temperature", p.temperature = INFINITY);
    CASE("top_k", p.top_k = -2);
    CASE("top_p", p.top_p = 0.0f);
    CASE("top_p", p.top_p = 1.5f);
    CASE("top_p", p.top_p = NAN);
    CASE("min_p", p.min_p = -0.01f);
    CASE("min_p", p.min_p = 1.01f);
    CASE("repetition_penalty", p.repetition_penalty = 0.0f);
    CASE("repetition_penalty", p.repetition_penalty = INFINITY);
    CASE("presence_penalty", p.presence_penalty = 2.5f);
    CASE("frequency_penalty", p.frequency_penalty = -2.01f);
    CASE("max_tokens", p.max_tokens = 0);
    CASE("max_tokens", p.max_tokens = -5);
    CASE("min_tokens", p.min_tokens = -1);
    CASE("min_tokens", (p.max_tokens = 4, p.min_tokens = 5));
    CASE("stop_token_ids", (p.stop_token_ids = bad_ids, p.n_stop_token_ids = 2));
    CASE("logit_bias", (p.logit_bias = bad_tok, p.n_logit_bias = 1));
    CASE("logit_bias", (p.logit_bias = bad_bias, p.n_logit_bias = 1));
    CASE("stop[1]", (p.stop = bad_stop, p.n_stop = 2));
#undef CASE
    /* Boundaries that are valid. */
    cairn_sampling_params_init(&p);
    p.temperature = 0.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 1.0f;
    p.presence_penalty = -2.0f;
    p.frequency_penalty = 2.0f;
    p.max_tokens = 1;
    p.min_tokens = 1;
    assert_int_equal(cairn_sampling_params_validate(&p, 100, NULL, 0), CAIRN_OK);
    /* Model errors. */
    cairn_sampler_t *s = NULL;
    cairn_sampler_model_t m = { .vocab_size = 0 };
    assert_int_equal(cairn_sampler_create(&p, &m, &s), CAIRN_EINVAL);
    int32_t eos = 10;
    m = (cairn_sampler_model_t){ .vocab_size = 10, .eos_ids = &eos, .n_eos = 1 };
    assert_int_equal(cairn_sampler_create(&p, &m, &s), CAIRN_EINVAL);
    assert_null(s);
}

/* ---- greedy -------------------------------------------------------------------------- */

static void test_greedy_ties_lowest_id(void **state)
{
    (void)state;
    cairn_sampling_params_t p;
    cairn_sampling_params_init(&p);
    p.temperature = 0.0f;
    cairn_sampler_t *s = make(&p, 6);
    const float l1[] = { 1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 3.0f };
    for (int i = 0; i < 5; i++)
        assert_int_equal(draw(s, l1, 6), 1);
    const float l2[] = { NAN, -INFINITY, 0.25f, NAN, 0.25f, 0.0f };
    assert_int_equal(draw(s, l2, 6), 2);
    const float l3[] = { 1.0f, INFINITY, 2.0f, INFINITY, 0.0f, 0.0f };
    assert_int_equal(draw(s, l3, 6), 1);
    const float none[] = { -INFINITY, NAN, -INFINITY, -INFINITY, NAN, -INFINITY };
    float c[6];
    memcpy(c, none, sizeof(c));
    int32_t tok = 7;
    assert_int_equal(cairn_sampler_sample(s, c, &tok), CAIRN_ERANGE);
    assert_int_equal(tok, 7);
    assert_int_equal(cairn_sampler_sample(s, NULL, &tok), CAIRN_EINVAL);
    cairn_sampler_destroy(s);

    /* Greedy ignores the seed entirely. */
    p.has_seed = true;
    p.seed = 1;
    cairn_sampler_t *a = make(&p, 6);
    p.seed = 2;
    cairn_sampler_t *b = make(&p, 6);
    const float l4[] = { 0.1f, 0.2f, 0.3f, 0.29f, 0.0f, 0.3f };
    for (int i = 0; i < 3; i++) {
        assert_int_equal(draw(a, l4, 6), 2);
        assert_int_equal(draw(b, l4, 6), 2);
    }
    cairn_sampler_destroy(a);
    cairn_sampler_destroy(b);
}

/* ---- top-k, top-p, min-p ----------------------------------------------------------- */

static void test_top_k(void **state)
{
    (void)state;
    cairn_sampling_params_t p;
    cairn_sampling_params_init(&p);
    p.has_seed = true;
    p.seed = 42;
    p.top_k = 2;
    p.temperature = 5.0f;   /* flat enough that every token would show up without top-k */
    cairn_sampler_t *s = make(&p, 5);
    const float l[] = { 0.2f, 1.0f, -0.5f, 1.0f, 0.9f };
    int hist[5] = { 0 };
    for (int i = 0; i < 2000; i++)
        hist[draw(s, l, 5)]++;
    assert_int_equal(hist[0] + hist[2] + hist[4], 0);
    assert_true(hist[1] > 800 && hist[3] > 800);   /* equal logits: about 1000 each */
    cairn_sampler_destroy(s);

    /* top_k larger than the vocabulary is no truncation. */
    p.top_k = 1000;
    s = make(&p, 5);
    memset(hist, 0, sizeof(hist));
    for (int i = 0; i < 2000; i++)
        hist[draw(s, l, 5)]++;
    for (int i = 0; i < 5; i++)
        assert_true(hist[i] > 100);
    cairn_sampler_destroy(s);
}

/* top-k=50 over a real-size vocabulary: every sample is among the brute-force 50 best. */
static void test_top_k_large_vocab(void **state)
{
    (void)state;
    enum { V = 151936, K = 50 };
    float *l = malloc(V * sizeof(float));
    assert_non_null(l);
    uint32_t x = 7;
    for (int i = 0; i < V; i++)
        l[i] = rand_logit(&x);
    /* The K-th best logit by brute force (counting sort over the 20000 distinct values). */
    int *cnt = calloc(20000, sizeof(int));
    assert_non_null(cnt);
    for (int i = 0; i < V; i++)
        cnt[(int)lroundf((l[i] + 10.0f) * 1000.0f)]++;
    int acc = 0, kth = 19999;
    for (; kth >= 0; kth--)
        if ((acc += cnt[kth]) >= K)
            break;
    free(cnt);
    float kth_logit = (float)kth / 1000.0f - 10.0f;

    cairn_sampling_params_t p;
    cairn_sampling_params_init(&p);
    p.has_seed = true;
    p.seed = 3;
    p.top_k = K;
    p.temperature = 50.0f;
    cairn_sampler_t *s = make(&p, V);
    for (int i = 0; i < 200; i++) {
        int32_t t = draw(s, l, V);
        assert_true(l[t] >= kth_logit);
    }
    cairn_sampler_destroy(s);
    free(l);
}

static void test_top_p_exact_boundaries(void **state)
{
    (void)state;
    /* Four equal logits: each token has probability exactly 0.25. */
    const float l[] = { 0.0f, 0.0f, 0.0f, 0.0f };
    struct { float top_p; int32_t top_k; int kept; } cases[] = {
        { 0.25f, -1, 1 },        /* 0.25 reached by the first token */
        { 0.2500001f, -1, 2 },
        { 0.5f, -1, 2 },         /* cum 0.5 >= 0.5: the third token is dropped */
        { 0.5000001f, -1, 3 },
        { 0.75f, -1, 3 },
        { 0.76f, -1, 4 },
        { 1.0f, -1, 4 },
        { 0.5f, 2, 1 },          /* renormalized over top-k: 0.5 each, the first suffices */
        { 0.6f, 2, 2 },
    };
    for (size_t c = 0; c < CAIRN_ARRAY_LEN(cases); c++) {
        cairn_sampling_params_t p;
        cairn_sampling_params_init(&p);
        p.has_seed = true;
        p.seed = c;
        p.top_p = cases[c].top_p;
        p.top_k = cases[c].top_k;
        cairn_sampler_t *s = make(&p, 4);
        int hist[4] = { 0 };
        for (int i = 0; i < 1000; i++)
            hist[draw(s, l, 4)]++;
        /* Ties keep the lowest ids: exactly tokens [0, kept) appear. */
        for (int t = 0; t < 4; t++) {
            if (t < cases[c].kept && hist[t] == 0)
                fail_msg("case %zu: token %d never sampled", c, t);
            if (t >= cases[c].kept && hist[t] != 0)
                fail_msg("case %zu: token %d sampled %d times", c, t, hist[t]);
        }
        cairn_sampler_destroy(s);
    }
}

/*
 * top-p over 3000 shuffled logits decaying with rank, checked against a brute-force
 * nucleus. decay 0.002: the nucleus spans many 1/64-nat bins (the "certainly inside"
 * path); decay 1e-5: nearly flat, all in the boundary bins, which are ordered in several
 * selection rounds (64, 256, 1024, ...). Every sample must be inside the nucleus and the
 * ranks next to the cut must be reached.
 */
static void check_top_p_large(float decay, float top_p, uint64_t seed)
{
    enum { V = 3000 };
    static float l[V];
    static int32_t rank_to_id[V], id_to_rank[V];
    for (int i = 0; i < V; i++)
        rank_to_id[i] = i;
    uint32_t x = 99;
    for (int i = V - 1; i > 0; i--) {
        int j = (int)(lcg(&x) % (uint32_t)(i + 1));
        int32_t t = rank_to_id[i];
        rank_to_id[i] = rank_to_id[j];
        rank_to_id[j] = t;
    }
    for (int r = 0; r < V; r++) {
        l[rank_to_id[r]] = -decay * (float)r;
        id_to_rank[rank_to_id[r]] = r;
    }
    double z = 0.0;
    for (int i = 0; i < V; i++)
        z += expf(l[i] - l[rank_to_id[0]]);
    int nucleus = 0;
    double cum = 0.0;
    while (cum < (double)top_p * z)
        cum += expf(l[rank_to_id[nucleus++]] - l[rank_to_id[0]]);
    assert_true(nucleus > 300 && nucleus < V);
    /* Keep the cut well clear of rounding differences in the summation order. */
    assert_true(cum - (double)top_p * z > 1e-6 * z);
    assert_true((double)top_p * z - (cum - expf(l[rank_to_id[nucleus - 1]])) > 1e-6 * z);

    cairn_sampling_params_t p;
    cairn_sampling_params_init(&p);
    p.has_seed = true;
    p.seed = seed;
    p.top_p = top_p;
    cairn_sampler_t *s = make(&p, V);
    int max_rank = 0;
    for (int i = 0; i < 10000; i++) {
        int r = id_to_rank[draw(s, l, V)];
        if (r >= nucleus)
            fail_msg("decay %g: rank %d sampled, nucleus has %d", decay, r, nucleus);
        if (r > max_rank)
            max_rank = r;
    }
    assert_true(max_rank >= nucleus - 1 - nucleus / 20);
    cairn_sampler_destroy(s);
}

static void test_top_p_large(void **state)
{
    (void)state;
    check_top_p_large(0.002f, 0.6f, 11);
    check_top_p_large(1e-5f, 0.6f, 12);
    check_top_p_large(1e-5f, 0.93f, 13);
}

static void test_min_p(void **state)
{
    (void)state;
    /* Relative weights exp(l_i - l_max) / T. */
    const float l[] = { 0.0f, -0.5f, -1.0f, -3.0f, -3.0f };
    struct { float temp, min_p; int32_t top_k; float top_p; int kept; } cases[] = {
        { 1.0f, 0.30f, -1, 1.0f, 3 },    /* e^-1 = 0.368 kept, e^-3 = 0.050 dropped */
        { 1.0f, 0.37f, -1, 1.0f, 2 },    /* e^-1 < 0.37, e^-0.5 = 0.607 kept */
        { 1.0f, 0.37f, 4, 1.0f, 2 },     /* same on the sorted (top-k) path */
        { 1.0f, 0.30f, -1, 0.999f, 3 },  /* and on the top-p path */
        { 2.0f, 0.20f, -1, 1.0f, 5 },    /* T=2: e^-1.5 = 0.223 kept */
        { 2.0f, 0.20f, 4, 1.0f, 4 },     /* top-k=4 then min-p: token 4 cut by top-k */
        { 1.0f, 1.0f, -1, 1.0f, 1 },     /* min_p 1: only the best */
    };
    for (size_t c = 0; c < CAIRN_ARRAY_LEN(cases); c++) {
        cairn_sampling_params_t p;
        cairn_sampling_params_init(&p);
        p.has_seed = true;
        p.seed = 100 + c;
        p.temperature = cases[c].temp;
        p.min_p = cases[c].min_p;
        p.top_k = cases[c].top_k;
        p.top_p = cases[c].top_p;
        cairn_sampler_t *s = make(&p, 5);
        int hist[5] = { 0 };
        for (int i = 0; i < 3000; i++)
            hist[draw(s, l, 5)]++;
        for (int t = 0; t < 5; t++) {
            if (t < cases[c].kept && hist[t] == 0)
                fail_msg("case %zu: token %d never sampled", c, t);
            if (t >= cases[c].kept && hist[t] != 0)
                fail_msg("case %zu: token %d sampled %d times", c, t, hist[t]);
        }
        cairn_sampler_destroy(s);
    }
}

/* ---- penalties and logit bias ------------------------------------------------------ */

static void test_penalties_arithmetic(void **state)
{
    (void)state;
    cairn_sampling_params_t p;
    cairn_sampling_params_init(&p);
    p.temperature = 0.0f;
    p.repetition_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    cairn_sampler_t *s = make(&p, 7);
    const int32_t prompt[] = { 0, 1, 1 };
    assert_int_equal(cairn_sampler_set_prompt(s, prompt, 3), CAIRN_OK);
    assert_int_equal(cairn_sampler_set_prompt(s, prompt, 3), CAIRN_ESTATE);
    assert_int_equal(cairn_sampler_accept(s, 2, NULL), CAIRN_OK);
    assert_int_equal(cairn_sampler_accept(s, 3, NULL), CAIRN_OK);
    assert_int_equal(cairn_sampler_accept(s, 2, NULL), CAIRN_OK);
    assert_int_equal(cairn_sampler_accept(s, 0, NULL), CAIRN_OK);
    float l[] = { 2.0f, -1.0f, 3.0f, 1.0f, 4.0f, -2.0f, 0.0f };
    int32_t tok;
    assert_int_equal(cairn_sampler_sample(s, l, &tok), CAIRN_OK);
    /* token 0: prompt and generated once: 2/2 = 1, - 0.25*1 - 0.5 = 0.25 */
    assert_true(l[0] == 0.25f);
    /* token 1: prompt only: -1 * 2 = -2 (no presence/frequency for prompt tokens) */
    assert_true(l[1] == -2.0f);
    /* token 2: generated twice: 3/2 = 1.5, - 0.25*2 = 1.0, - 0.5 = 0.5 */
    assert_true(l[2] == 0.5f);
    /* token 3: generated once: 1/2 = 0.5, - 0.25 = 0.25, - 0.5 = -0.25 */
    assert_true(l[3] == -0.25f);
    assert_true(l[4] == 4.0f && l[5] == -2.0f && l[6] == 0.0f);
    assert_int_equal(tok, 4);
    assert_int_equal(cairn_sampler_generated(s), 4);

    /* After reset the counts are gone. */
    cairn_sampler_reset(s);
    float l2[] = { 2.0f, -1.0f, 3.0f, 1.0f, 4.0f, -2.0f, 0.0f };
    assert_int_equal(cairn_sampler_sample(s, l2, &tok), CAIRN_OK);
    assert_true(l2[0] == 2.0f && l2[1] == -1.0f && l2[2] == 3.0f && l2[3] == 1.0f);
    cairn_sampler_destroy(s);

    /* Negative presence/frequency encourage repeats; the prompt is ignored without
     * repetition penalty. */
    cairn_sampling_params_init(&p);
    p.temperature = 0.0f;
    p.presence_penalty = -1.0f;
    p.frequency_penalty = -0.5f;
    s = make(&p, 4);
    assert_int_equal(cairn_sampler_set_prompt(s, (const int32_t[]){ 1 }, 1), CAIRN_OK);
    assert_int_equal(cairn_sampler_accept(s, 3, NULL), CAIRN_OK);
    float l3[] = { 1.0f, 1.0f, 1.0f, 1.0f };
    assert_int_equal(cairn_sampler_sample(s, l3, &tok), CAIRN_OK);
    assert_true(l3[1] == 1.0f && l3[3] == 2.5f);
    assert_int_equal(tok, 3);
    cairn_sampler_destroy(s);
}

/* Many distinct tokens: the sparse table grows and still counts exactly. */
static void test_penalty_table_growth(void **state)
{
    (void)state;
    enum { V = 5000 };
    cairn_sampling_params_t p;
    cairn_sampling_params_init(&p);
    p.temperature = 0.0f;
    p.frequency_penalty = 1.0f;
    cairn_sampler_t *s = make(&p, V);
    for (int i = 0; i < 3000; i++)
        assert_int_equal(cairn_sampler_accept(s, (i * 7) % V, NULL), CAIRN_OK);
    for (int i = 0; i < 3000; i += 3)
        assert_int_equal(cairn_sampler_accept(s, (i * 7) % V, NULL), CAIRN_OK);
    static float l[V];
    int32_t tok;
    assert_int_equal(cairn_sampler_sample(s, l, &tok), CAIRN_OK);
    for (int i = 0; i < 3000; i++) {
        float want = (i % 3 == 0) ? -2.0f : -1.0f;
        assert_true(l[(i * 7) % V] == want);
    }
    int zeros = 0;
    for (int i = 0; i < V; i++)
        zeros += l[i] == 0.0f;
    assert_int_equal(zeros, V - 3000);
    int32_t first_unpenalized = 0;
    while (l[first_unpenalized] != 0.0f)
        first_unpenalized++;
    assert_int_equal(tok, first_unpenalized);   /* greedy: the lowest id among the zeros */
    cairn_sampler_destroy(s);
}

static void test_logit_bias_and_min_tokens(void **state)
{
    (void)state;
    cairn_sampling_params_t p;
    cairn_sampling_params_init(&p);
    p.temperature = 0.0f;
    const cairn_logit_bias_t bias[] = { { 3, 100.0f }, { 0, -100.0f } };
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    p.min_tokens = 2;
    int32_t eos = 3;
    cairn_sampler_model_t m = { .vocab_size = 5, .eos_ids = &eos, .n_eos = 1 };
    cairn_sampler_t *s = NULL;
    assert_int_equal(cairn_sampler_create(&p, &m, &s), CAIRN_OK);
    float l[] = { 5.0f, 1.0f, 2.0f, 0.0f, 0.5f };
    int32_t tok;
    assert_int_equal(cairn_sampler_sample(s, l, &tok), CAIRN_OK);
    /* eos is masked until min_tokens are generated; the bias on token 0 still applies. */
    assert_true(l[0] == -95.0f && isinf(l[3]) && l[3] < 0);
    assert_int_equal(tok, 2);
    cairn_finish_reason_t fin;
    /* A forced eos before min_tokens does not stop (vLLM: output length < min_tokens). */
    assert_int_equal(cairn_sampler_accept(s, 3, &fin), CAIRN_OK);
    assert_int_equal(fin, CAIRN_FINISH_NONE);
    float l1[] = { 5.0f, 1.0f, 2.0f, 0.0f, 0.5f };
    assert_int_equal(cairn_sampler_sample(s, l1, &tok), CAIRN_OK);
    assert_true(isinf(l1[3]));   /* one generated, still masked */
    assert_int_equal(tok, 2);
    assert_int_equal(cairn_sampler_accept(s, 2, &fin), CAIRN_OK);
    assert_int_equal(fin, CAIRN_FINISH_NONE);
    float l2[] = { 5.0f, 1.0f, 2.0f, 0.0f, 0.5f };
    assert_int_equal(cairn_sampler_sample(s, l2, &tok), CAIRN_OK);
    assert_true(l2[3] == 100.0f);
    assert_int_equal(tok, 3);
    assert_int_equal(cairn_sampler_accept(s, tok, &fin), CAIRN_OK);
    assert_int_equal(fin, CAIRN_FINISH_STOP);
    cairn_sampler_destroy(s);
}

/* ---- randomness ---------------------------------------------------------------------- */

static void test_seed_reproducible(void **state)
{
    (void)state;
    enum { V = 1000, N = 64 };
    static float l[V];
    uint32_t x = 5;
    for (int i = 0; i < V; i++)
        l[i] = rand_logit(&x) * 0.3f;
    cairn_sampling_params_t p;
    cairn_sampling_params_init(&p);
    p.has_seed = true;
    p.seed = 1234;
    p.top_p = 0.95f;
    p.top_k = 200;
    p.repetition_penalty = 1.1f;
    int32_t a[N], b[N], c[N], d[N];
    cairn_sampler_t *sa = make(&p, V), *sb = make(&p, V);
    p.seed = 1235;
    cairn_sampler_t *sc = make(&p, V);
    for (int i = 0; i < N; i++) {
        a[i] = draw(sa, l, V);
        b[i] = draw(sb, l, V);
        c[i] = draw(sc, l, V);
        assert_int_equal(cairn_sampler_accept(sa, a[i], NULL), CAIRN_OK);
        assert_int_equal(cairn_sampler_accept(sb, b[i], NULL), CAIRN_OK);
        assert_int_equal(cairn_sampler_accept(sc, c[i], NULL), CAIRN_OK);
    }
    assert_memory_equal(a, b, sizeof(a));
    int same = 0;
    for (int i = 0; i < N; i++)
        same += a[i] == c[i];
    assert_true(same < N / 2);
    /* Reset re-seeds: the same tokens again. */
    cairn_sampler_reset(sa);
    for (int i = 0; i < N; i++) {
        d[i] = draw(sa, l, V);
        assert_int_equal(cairn_sampler_accept(sa, d[i], NULL), CAIRN_OK);
    }
    assert_memory_equal(a, d, sizeof(a));
    cairn_sampler_destroy(sa);
    cairn_sampler_destroy(sb);
    cairn_sampler_destroy(sc);

    /* Without a seed, two samplers should not agree on 64 draws from a flat vocabulary. */
    cairn_sampling_params_init(&p);
    sa = make(&p, V);
    sb = make(&p, V);
    same = 0;
    for (int i = 0; i < N; i++)
        same += draw(sa, l, V) == draw(sb, l, V);
    assert_true(same < N / 2);
    cairn_sampler_destroy(sa);
    cairn_sampler_destroy(sb);
}

/* 20000 draws from a 4-token softmax match the probabilities (chi-square and 4 sigma). */
static void check_distribution(float temperature, uint64_t seed)
{
    enum { N = 20000 };
    const float l[] = { 1.0f, 2.0f, 0.5f, -1.0f };
    double prob[4], z = 0.0;
    for (int i = 0; i < 4; i++)
        z += prob[i] = exp(((double)l[i] - 2.0) / temperature);
    for (int i = 0; i < 4; i++)
        prob[i] /= z;
    cairn_sampling_params_t p;
    cairn_sampling_params_init(&p);
    p.has_seed = true;
    p.seed = seed;
    p.temperature = temperature;
    cairn_sampler_t *s = make(&p, 4);
    int hist[4] = { 0 };
    for (int i = 0; i < N; i++)
        hist[draw(s, l, 4)]++;
    double chi2 = 0.0;
    for (int i = 0; i < 4; i++) {
        double e = N * prob[i], sd = sqrt(N * prob[i] * (1.0 - prob[i]));
        chi2 += (hist[i] - e) * (hist[i] - e) / e;
        if (fabs(hist[i] - e) > 4.0 * sd)
            fail_msg("T=%g token %d: %d draws, expected %.1f +- %.1f", temperature, i,
                     hist[i], e, sd);
    }
    /* 3 degrees of freedom: P(chi2 > 16.27) = 0.001. */
    if (chi2 > 16.27)
        fail_msg("T=%g chi-square %.2f over 3 dof", temperature, chi2);
    cairn_sampler_destroy(s);
}

static void test_distribution(void **state)
{
    (void)state;
    check_distribution(1.0f, 2024);
    check_distribution(0.7f, 77);
    check_distribution(1.8f, 9);
}

/* ---- finish conditions ------------------------------------------------------------- */

static void test_finish_reasons(void **state)
{
    (void)state;
    cairn_sampling_params_t p;
    cairn_sampling_params_init(&p);
    int32_t eos[] = { 7, 2 };
    int32_t extra[] = { 5 };
    p.stop_token_ids = extra;
    p.n_stop_token_ids = 1;
    p.max_tokens = 4;
    cairn_sampler_model_t m = { .vocab_size = 10, .context_len = 0, .eos_ids = eos, .n_eos = 2 };
    cairn_sampler_t *s = NULL;
    cairn_finish_reason_t fin;
    assert_int_equal(cairn_sampler_create(&p, &m, &s), CAIRN_OK);

    assert_int_equal(cairn_sampler_accept(s, 1, &fin), CAIRN_OK);
    assert_int_equal(fin, CAIRN_FINISH_NONE);
    assert_int_equal(cairn_sampler_accept(s, 2, &fin), CAIRN_OK);   /* an eos id */
    assert_int_equal(fin, CAIRN_FINISH_STOP);
    assert_int_equal(cairn_sampler_finish_reason(s), CAIRN_FINISH_STOP);
    assert_int_equal(cairn_sampler_accept(s, 1, &fin), CAIRN_ESTATE);
    float l[10] = { 0 };
    int32_t tok;
    assert_int_equal(cairn_sampler_sample(s, l, &tok), CAIRN_ESTATE);

    cairn_sampler_reset(s);
    assert_int_equal(cairn_sampler_accept(s, 5, &fin), CAIRN_OK);   /* a stop_token_id */
    assert_int_equal(fin, CAIRN_FINISH_STOP);

    cairn_sampler_reset(s);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(cairn_sampler_accept(s, 0, &fin), CAIRN_OK);
        assert_int_equal(fin, CAIRN_FINISH_NONE);
    }
    assert_int_equal(cairn_sampler_accept(s, 0, &fin), CAIRN_OK);
    assert_int_equal(fin, CAIRN_FINISH_LENGTH);

    /* eos as the max_tokens-th token: "stop" wins. */
    cairn_sampler_reset(s);
    for (int i = 0; i < 3; i++)
        assert_int_equal(cairn_sampler_accept(s, 0, NULL), CAIRN_OK);
    assert_int_equal(cairn_sampler_accept(s, 7, &fin), CAIRN_OK);
    assert_int_equal(fin, CAIRN_FINISH_STOP);
    assert_int_equal(cairn_sampler_accept(s, 10, &fin), CAIRN_EINVAL);
    assert_int_equal(cairn_sampler_accept(s, -1, &fin), CAIRN_EINVAL);
    cairn_sampler_destroy(s);

    /* ignore_eos: the model's eos does not stop, the request's stop ids still do; the
     * context limit counts the prompt. */
    p.ignore_eos = true;
    p.max_tokens = -1;
    m.context_len = 6;
    assert_int_equal(cairn_sampler_create(&p, &m, &s), CAIRN_OK);
    const int32_t prompt[] = { 1, 1, 1 };
    assert_int_equal(cairn_sampler_set_prompt(s, prompt, 3), CAIRN_OK);
    assert_int_equal(cairn_sampler_accept(s, 7, &fin), CAIRN_OK);
    assert_int_equal(fin, CAIRN_FINISH_NONE);
    assert_int_equal(cairn_sampler_accept(s, 2, &fin), CAIRN_OK);
    assert_int_equal(fin, CAIRN_FINISH_NONE);
    assert_int_equal(cairn_sampler_accept(s, 3, &fin), CAIRN_OK);
    assert_int_equal(fin, CAIRN_FINISH_LENGTH);   /* 3 prompt + 3 generated = 6 */
    cairn_sampler_reset(s);
    assert_int_equal(cairn_sampler_accept(s, 5, &fin), CAIRN_OK);
    assert_int_equal(fin, CAIRN_FINISH_STOP);
    cairn_sampler_destroy(s);
}

/* ---- allocation failures ----------------------------------------------------------- */

static void test_alloc_failures(void **state)
{
    (void)state;
    cairn_sampling_params_t p;
    cairn_sampling_params_init(&p);
    int32_t extra[] = { 1, 2 };
    cairn_logit_bias_t bias[] = { { 3, 1.0f } };
    p.stop_token_ids = extra;
    p.n_stop_token_ids = 2;
    p.logit_bias = bias;
    p.n_logit_bias = 1;
    p.top_p = 0.9f;
    p.repetition_penalty = 1.3f;
    int32_t eos = 0;
    cairn_sampler_model_t m = { .vocab_size = 4096, .eos_ids = &eos, .n_eos = 1 };
    int failures = 0;
    for (long n = 0;; n++) {
        cairn_sampler_t *s = NULL;
        cairn_alloc_fail_after(n, false);
        int rc = cairn_sampler_create(&p, &m, &s);
        cairn_alloc_fail_after(-1, false);
        if (rc == CAIRN_OK) {
            assert_non_null(s);
            cairn_sampler_destroy(s);
            break;
        }
        assert_int_equal(rc, CAIRN_ENOMEM);
        assert_null(s);
        failures++;
    }
    assert_true(failures >= 5);   /* struct, stop ids, bias, index, count table */

    /* Growing the count table fails cleanly: the token is not recorded. */
    cairn_sampler_t *s = NULL;
    assert_int_equal(cairn_sampler_create(&p, &m, &s), CAIRN_OK);
    int i = 0, grown = 0;
    for (; i < 200; i++) {
        cairn_alloc_fail_after(0, true);
        int rc = cairn_sampler_accept(s, 100 + i, NULL);
        cairn_alloc_fail_after(-1, false);
        if (rc == CAIRN_ENOMEM) {
            assert_int_equal(cairn_sampler_generated(s), i);
            assert_int_equal(cairn_sampler_accept(s, 100 + i, NULL), CAIRN_OK);
            grown++;
        } else {
            assert_int_equal(rc, CAIRN_OK);
        }
    }
    assert_true(grown >= 2);
    assert_int_equal(cairn_sampler_generated(s), 200);
    /* The failed prompt leaves nothing behind. */
    int32_t prompt[300];
    for (int k = 0; k < 300; k++)
        prompt[k] = 1000 + k;
    cairn_sampler_reset(s);
    cairn_alloc_fail_after(0, true);
    assert_int_equal(cairn_sampler_set_prompt(s, prompt, 300), CAIRN_ENOMEM);
    cairn_alloc_fail_after(-1, false);
    assert_int_equal(cairn_sampler_set_prompt(s, prompt, 300), CAIRN_OK);
    cairn_sampler_destroy(s);

    /* Stop matcher creation and buffer growth. */
    const char *stops[] = { "END", "###" };
    failures = 0;
    for (long n = 0;; n++) {
        cairn_stop_matcher_t *mt = NULL;
        cairn_alloc_fail_after(n, false);
        int rc = cairn_stop_matcher_create(stops, 2, &mt);
        cairn_alloc_fail_after(-1, false);
        if (rc == CAIRN_OK) {
            cairn_stop_matcher_destroy(mt);
            break;
        }
        assert_int_equal(rc, CAIRN_ENOMEM);
        assert_null(mt);
        failures++;
    }
    assert_int_equal(failures, 4);
    cairn_stop_matcher_t *mt = NULL;
    assert_int_equal(cairn_stop_matcher_create(stops, 2, &mt), CAIRN_OK);
    const char *e;
    size_t el;
    bool stopped;
    cairn_alloc_fail_after(0, true);
    assert_int_equal(cairn_stop_matcher_feed(mt, "hello E", 7, &e, &el, &stopped), CAIRN_ENOMEM);
    cairn_alloc_fail_after(-1, false);
    assert_int_equal(cairn_stop_matcher_feed(mt, "hello E", 7, &e, &el, &stopped), CAIRN_OK);
    assert_int_equal(el, 6);
    assert_memory_equal(e, "hello ", 6);
    assert_int_equal(cairn_stop_matcher_feed(mt, "ND", 2, &e, &el, &stopped), CAIRN_OK);
    assert_true(stopped);
    assert_int_equal(el, 0);
    cairn_stop_matcher_destroy(mt);
}

/* ---- stop matcher -------------------------------------------------------------------- */

/* Feeds chunks; collects the emitted text; returns whether it stopped. */
static bool run_chunks(cairn_stop_matcher_t *m, const char *const *chunks, size_t n, char *out,
                       size_t *out_len)
{
    *out_len = 0;
    for (size_t i = 0; i < n; i++) {
        const char *e;
        size_t el;
        bool stopped;
        assert_int_equal(cairn_stop_matcher_feed(m, chunks[i], strlen(chunks[i]), &e, &el,
                                                 &stopped), CAIRN_OK);
        memcpy(out + *out_len, e, el);
        *out_len += el;
        if (stopped) {
            out[*out_len] = '\0';
            return true;
        }
    }
    const char *e;
    size_t el;
    assert_int_equal(cairn_stop_matcher_flush(m, &e, &el), CAIRN_OK);
    memcpy(out + *out_len, e, el);
    *out_len += el;
    out[*out_len] = '\0';
    return false;
}

static void test_stop_matcher_basics(void **state)
{
    (void)state;
    const char *stops[] = { "</s>", "\n\nUser:" };
    cairn_stop_matcher_t *m = NULL;
    assert_int_equal(cairn_stop_matcher_create(stops, 2, &m), CAIRN_OK);
    const char *e;
    size_t el;
    bool stopped;

    /* A partial stop string is held back, then released when it diverges. */
    assert_int_equal(cairn_stop_matcher_feed(m, "Hi </", 5, &e, &el, &stopped), CAIRN_OK);
    assert_false(stopped);
    assert_int_equal(el, 3);
    assert_memory_equal(e, "Hi ", 3);
    assert_int_equal(cairn_stop_matcher_feed(m, "b>", 2, &e, &el, &stopped), CAIRN_OK);
    assert_int_equal(el, 4);
    assert_memory_equal(e, "</b>", 4);
    /* Across three chunks, text before it in the same chunk is emitted. */
    assert_int_equal(cairn_stop_matcher_feed(m, "ok\n", 3, &e, &el, &stopped), CAIRN_OK);
    assert_int_equal(el, 2);
    assert_int_equal(cairn_stop_matcher_feed(m, "\nUs", 3, &e, &el, &stopped), CAIRN_OK);
    assert_int_equal(el, 0);
    assert_int_equal(cairn_stop_matcher_feed(m, "er: more", 8, &e, &el, &stopped), CAIRN_OK);
    assert_true(stopped);
    assert_int_equal(el, 0);   /* "\n\nUser:" and the rest are dropped */
    assert_int_equal(cairn_stop_matcher_matched(m), 1);
    assert_int_equal(cairn_stop_matcher_feed(m, "x", 1, &e, &el, &stopped), CAIRN_ESTATE);
    assert_int_equal(cairn_stop_matcher_flush(m, &e, &el), CAIRN_ESTATE);

    /* Reset; a stop string at the very start emits nothing. */
    cairn_stop_matcher_reset(m);
    assert_int_equal(cairn_stop_matcher_matched(m), -1);
    assert_int_equal(cairn_stop_matcher_feed(m, "</s>tail", 8, &e, &el, &stopped), CAIRN_OK);
    assert_true(stopped);
    assert_int_equal(el, 0);
    assert_int_equal(cairn_stop_matcher_matched(m), 0);

    /* Flush releases the held prefix at end of stream. */
    cairn_stop_matcher_reset(m);
    assert_int_equal(cairn_stop_matcher_feed(m, "done\n\nUse", 9, &e, &el, &stopped), CAIRN_OK);
    assert_int_equal(el, 4);
    assert_int_equal(cairn_stop_matcher_feed(m, "", 0, &e, &el, &stopped), CAIRN_OK);
    assert_int_equal(el, 0);
    assert_false(stopped);
    assert_int_equal(cairn_stop_matcher_flush(m, &e, &el), CAIRN_OK);
    assert_int_equal(el, 5);
    assert_memory_equal(e, "\n\nUse", 5);
    cairn_stop_matcher_destroy(m);

    /* No stop strings: everything passes through at once. */
    assert_int_equal(cairn_stop_matcher_create(NULL, 0, &m), CAIRN_OK);
    assert_int_equal(cairn_stop_matcher_feed(m, "abc", 3, &e, &el, &stopped), CAIRN_OK);
    assert_int_equal(el, 3);
    cairn_stop_matcher_destroy(m);

    const char *empty[] = { "x", "" };
    m = NULL;
    assert_int_equal(cairn_stop_matcher_create(empty, 2, &m), CAIRN_EINVAL);
    assert_null(m);
}

static void test_stop_matcher_overlapping(void **state)
{
    (void)state;
    char out[256];
    size_t n;
    cairn_stop_matcher_t *m = NULL;

    /* "bc" completes before "abcd" could: it wins, as in a byte-by-byte stream. */
    const char *s1[] = { "abcd", "bc" };
    assert_int_equal(cairn_stop_matcher_create(s1, 2, &m), CAIRN_OK);
    assert_true(run_chunks(m, (const char *[]){ "xxabcd" }, 1, out, &n));
    assert_string_equal(out, "xxa");
    assert_int_equal(cairn_stop_matcher_matched(m), 1);
    cairn_stop_matcher_destroy(m);

    /* Same end byte: the one starting first (longer) wins. */
    const char *s2[] = { "cd", "bcd" };
    assert_int_equal(cairn_stop_matcher_create(s2, 2, &m), CAIRN_OK);
    assert_true(run_chunks(m, (const char *[]){ "ab", "c", "d!" }, 3, out, &n));
    assert_string_equal(out, "a");
    assert_int_equal(cairn_stop_matcher_matched(m), 1);
    cairn_stop_matcher_destroy(m);

    /* Self-overlapping stop string: "aab" inside "aaaab" must be found. */
    const char *s3[] = { "aab" };
    assert_int_equal(cairn_stop_matcher_create(s3, 1, &m), CAIRN_OK);
    assert_true(run_chunks(m, (const char *[]){ "a", "a", "a", "a", "b" }, 5, out, &n));
    assert_string_equal(out, "aa");
    cairn_stop_matcher_destroy(m);

    /* The held suffix is the longest that could still match, across several strings. */
    const char *s4[] = { "STOP", "TOPAZ" };
    assert_int_equal(cairn_stop_matcher_create(s4, 2, &m), CAIRN_OK);
    const char *e;
    size_t el;
    bool stopped;
    assert_int_equal(cairn_stop_matcher_feed(m, "xSTO", 4, &e, &el, &stopped), CAIRN_OK);
    assert_int_equal(el, 1);   /* "STO" held */
    assert_int_equal(cairn_stop_matcher_feed(m, "PA", 2, &e, &el, &stopped), CAIRN_OK);
    assert_true(stopped);      /* "STOP" completes first */
    assert_int_equal(el, 0);
    assert_int_equal(cairn_stop_matcher_matched(m), 0);
    cairn_stop_matcher_destroy(m);
}

static void test_stop_matcher_utf8(void **state)
{
    (void)state;
    /* "é" is C3 A9, "è" is C3 A8, "。" is E3 80 82, "😀" is F0 9F 98 80. */
    const char *stops[] = { "\xc3\xa9t\xc3\xa9", "\xe3\x80\x82\xe3\x80\x82" };
    cairn_stop_matcher_t *m = NULL;
    assert_int_equal(cairn_stop_matcher_create(stops, 2, &m), CAIRN_OK);
    const char *e;
    size_t el;
    bool stopped;
    /* "l'\xc3\xa8t" then "\xc3\xa9": diverges at the second byte, released whole. */
    assert_int_equal(cairn_stop_matcher_feed(m, "l'\xc3\xa8", 4, &e, &el, &stopped), CAIRN_OK);
    assert_int_equal(el, 4);
    assert_int_equal(cairn_stop_matcher_feed(m, "\xc3", 1, &e, &el, &stopped), CAIRN_OK);
    assert_int_equal(el, 0);
    assert_int_equal(cairn_stop_matcher_feed(m, "\xa9t\xf0\x9f\x98\x80", 6, &e, &el, &stopped),
                     CAIRN_OK);
    assert_false(stopped);
    assert_int_equal(el, 7);
    assert_memory_equal(e, "\xc3\xa9t\xf0\x9f\x98\x80", 7);
    /* A CJK stop string split inside a character. */
    assert_int_equal(cairn_stop_matcher_feed(m, "\xe5\xa5\xbd\xe3\x80", 5, &e, &el, &stopped),
                     CAIRN_OK);
    assert_int_equal(el, 3);   /* emitted text ends on a character boundary */
    assert_int_equal(cairn_stop_matcher_feed(m, "\x82\xe3", 2, &e, &el, &stopped), CAIRN_OK);
    assert_int_equal(el, 0);
    assert_int_equal(cairn_stop_matcher_feed(m, "\x80\x82!", 3, &e, &el, &stopped), CAIRN_OK);
    assert_true(stopped);
    assert_int_equal(el, 0);
    assert_int_equal(cairn_stop_matcher_matched(m), 1);
    cairn_stop_matcher_destroy(m);
}

/*
 * Chunking independence: random texts over a small alphabet, random stop strings and
 * random chunkings give exactly the one-shot reference answer (first end, then first
 * start, then lowest index), and the held text never reaches the longest stop string.
 */
static void test_stop_matcher_random_chunking(void **state)
{
    (void)state;
    uint32_t x = 12345;
    for (int iter = 0; iter < 3000; iter++) {
        char stopbuf[4][8];
        const char *stops[4];
        size_t ns = 1 + lcg(&x) % 4, max_len = 0;
        for (size_t i = 0; i < ns; i++) {
            size_t len = 1 + lcg(&x) % 5;
            for (size_t j = 0; j < len; j++)
                stopbuf[i][j] = (char)('a' + lcg(&x) % 3);
            stopbuf[i][len] = '\0';
            stops[i] = stopbuf[i];
            if (len > max_len)
                max_len = len;
        }
        char text[64];
        size_t tl = lcg(&x) % 40;
        for (size_t j = 0; j < tl; j++)
            text[j] = (char)('a' + lcg(&x) % 4);
        text[tl] = '\0';

        /* Reference. */
        size_t ref_end = SIZE_MAX, ref_start = SIZE_MAX;
        int ref_idx = -1;
        for (size_t i = 0; i < ns; i++) {
            const char *hit = strstr(text, stops[i]);
            if (!hit)
                continue;
            size_t st = (size_t)(hit - text), en = st + strlen(stops[i]);
            if (en < ref_end || (en == ref_end && st < ref_start)) {
                ref_end = en;
                ref_start = st;
                ref_idx = (int)i;
            }
        }

        cairn_stop_matcher_t *m = NULL;
        assert_int_equal(cairn_stop_matcher_create(stops, ns, &m), CAIRN_OK);
        char out[64];
        size_t ol = 0, fed = 0;
        bool stopped = false;
        while (fed < tl && !stopped) {
            size_t c = lcg(&x) % 6;
            if (c > tl - fed)
                c = tl - fed;
            const char *e;
            size_t el;
            assert_int_equal(cairn_stop_matcher_feed(m, text + fed, c, &e, &el, &stopped),
                             CAIRN_OK);
            fed += c;
            memcpy(out + ol, e, el);
            ol += el;
            if (!stopped)
                assert_true(fed - ol < max_len);   /* held < longest stop string */
        }
        if (!stopped) {
            const char *e;
            size_t el;
            assert_int_equal(cairn_stop_matcher_flush(m, &e, &el), CAIRN_OK);
            memcpy(out + ol, e, el);
            ol += el;
        }
        if (ref_idx >= 0) {
            assert_true(stopped);
            assert_int_equal(ol, ref_start);
            assert_int_equal(cairn_stop_matcher_matched(m), ref_idx);
        } else {
            assert_false(stopped);
            assert_int_equal(ol, tl);
        }
        assert_memory_equal(out, text, ol);
        cairn_stop_matcher_destroy(m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params_defaults),
        cmocka_unit_test(test_params_invalid),
        cmocka_unit_test(test_greedy_ties_lowest_id),
        cmocka_unit_test(test_top_k),
        cmocka_unit_test(test_top_k_large_vocab),
        cmocka_unit_test(test_top_p_exact_boundaries),
        cmocka_unit_test(test_top_p_large),
        cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_penalties_arithmetic),
        cmocka_unit_test(test_penalty_table_growth),
        cmocka_unit_test(test_logit_bias_and_min_tokens),
        cmocka_unit_test(test_seed_reproducible),
        cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_finish_reasons),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_stop_matcher_basics),
        cmocka_unit_test(test_stop_matcher_overlapping),
        cmocka_unit_test(test_stop_matcher_utf8),
        cmocka_unit_test(test_stop_matcher_random_chunking),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
