/*
 * The Gemma 3 forward pass against HF transformers (fixtures/models/gemma3, computed by
 * transformers 5.17 in float32), standalone over a flat K/V store, with the criteria of
 * `cairn check-reference`: last-position logits within 2e-3, the teacher-forced argmax at
 * every position whose reference top-2 margin is >= 1e-3, by prefill and by
 * token-at-a-time decode, and the greedy continuation under the same margin rule.
 * Then determinism: the same logits bit for bit for any chunking and thread count.
 *
 * Usage: test_gemma3_forward [MODEL_DIR] (default: the fixture), so reference files of the
 * same format with other geometries run through the same checks.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>

#include "models/gemma3/gemma3_test_util.h"

static const char *model_dir = CAIRN_FIXTURES_DIR "/models/gemma3";

typedef struct {
    char name[64];
    int32_t *prompt;
    int n_prompt;
    int32_t *argmax;
    float *margin;
    int32_t *greedy;
    float *gmargin;
    int n_greedy;
    float *last;
} ref_case_t;

static int load_ints(const cJSON *a, int32_t **out)
{
    int n = cJSON_GetArraySize(a), i = 0;
    *out = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    const cJSON *e;
    cJSON_ArrayForEach(e, a) (*out)[i++] = (int32_t)e->valuedouble;
    return n;
}

static int load_floats(const cJSON *a, float **out)
{
    int n = cJSON_GetArraySize(a), i = 0;
    *out = malloc((size_t)(n ? n : 1) * sizeof(float));
    const cJSON *e;
    cJSON_ArrayForEach(e, a) (*out)[i++] = (float)e->valuedouble;
    return n;
}

/* All cases of model_dir/reference.json; *n their count. */
static ref_case_t *load_cases(int vocab, int *n)
{
    char path[1200];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/reference.json", model_dir);
    char *text = g3_read_text(path, &len);
    assert_non_null(text);
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *cases = cJSON_GetObjectItem(root, "cases"), *c;
    *n = cJSON_GetArraySize(cases);
    ref_case_t *rc = calloc((size_t)*n, sizeof *rc);
    int i = 0;
    cJSON_ArrayForEach(c, cases)
    {
        ref_case_t *r = &rc[i++];
        snprintf(r->name, sizeof r->name, "%s", cJSON_GetObjectItem(c, "name")->valuestring);
        r->n_prompt = load_ints(cJSON_GetObjectItem(c, "prompt_ids"), &r->prompt);
        assert_int_equal(load_ints(cJSON_GetObjectItem(c, "argmax_per_position"), &r->argmax),
                         r->n_prompt);
        assert_int_equal(load_floats(cJSON_GetObjectItem(c, "top2_margin_per_position"), &r->margin),
                         r->n_prompt);
        r->n_greedy = load_ints(cJSON_GetObjectItem(c, "greedy_ids"), &r->greedy);
        assert_int_equal(load_floats(cJSON_GetObjectItem(c, "greedy_top2_margin"), &r->gmargin),
                         r->n_greedy);
        snprintf(path, sizeof path, "%s/%s", model_dir,
                 cJSON_GetObjectItem(c, "last_logits_file")->valuestring);
        char *raw = g3_read_text(path, &len);
        assert_non_null(raw);
        assert_int_equal(len, (size_t)vocab * sizeof(float));
        r->last = (float *)raw;
    }
    cJSON_Delete(root);
    return rc;
}

static void free_cases(ref_case_t *rc, int n)
{
    for (int i = 0; i < n; i++) {
        free(rc[i].prompt);
        free(rc[i].argmax);
        free(rc[i].margin);
        free(rc[i].greedy);
        free(rc[i].gmargin);
        free(rc[i].last);
    }
    free(rc);
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

static double max_abs_diff(const float *a, const float *b, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

/* Prefill, greedy and decode checks of every case, as check-reference does them. */
static void test_reference(void **state)
{
    (void)state;
    g3_model_t *m = g3_open(model_dir);
    const int V = m->cfg.vocab;
    int n_cases;
    ref_case_t *cases = load_cases(V, &n_cases);
    for (int ci = 0; ci < n_cases; ci++) {
        const ref_case_t *r = &cases[ci];
        const int max_pos = r->n_prompt + r->n_greedy + 1;
        float *lg = malloc((size_t)r->n_prompt * V * sizeof(float));

        /* 1. prefill in one call, logits at every position. */
        g3_seq_t s;
        g3_seq_init(&s, m, NULL, CAIRN_DTYPE_F32, r->n_prompt, max_pos);
        g3_seq_feed(&s, r->prompt, r->n_prompt, lg);
        int checked = 0, agree = 0;
        for (int p = 0; p < r->n_prompt; p++) {
            if (r->margin[p] < 1e-3f)
                continue;
            checked++;
            int ours = argmax(lg + (size_t)p * V, V);
            agree += ours == r->argmax[p];
            if (ours != r->argmax[p])
                fprintf(stderr, "%s: prefill argmax at %d: %d, reference %d (margin %g)\n",
                        r->name, p, ours, r->argmax[p], r->margin[p]);
        }
        float *last = lg + (size_t)(r->n_prompt - 1) * V;
        double diff = max_abs_diff(last, r->last, V);
        fprintf(stderr, "%s: %d prompt tokens, prefill max |dlogit| %.3g, argmax %d/%d\n",
                r->name, r->n_prompt, diff, agree, checked);
        assert_true(diff <= 2e-3);
        assert_int_equal(agree, checked);

        /* 2. greedy continuation, one token per call, reference tokens fed back. */
        float *step = malloc((size_t)V * sizeof(float));
        memcpy(step, last, (size_t)V * sizeof(float));
        int g_checked = 0;
        for (int i = 0; i < r->n_greedy; i++) {
            if (r->gmargin[i] < 1e-3f)
                break;
            g_checked++;
            assert_int_equal(argmax(step, V), r->greedy[i]);
            if (i + 1 < r->n_greedy)
                g3_seq_feed(&s, &r->greedy[i], 1, step);
        }
        fprintf(stderr, "%s: greedy %d/%d tokens compared, all equal\n", r->name, g_checked,
                r->n_greedy);
        g3_seq_fini(&s);

        /* 3. decode: the prompt one token at a time. */
        g3_seq_init(&s, m, NULL, CAIRN_DTYPE_F32, 1, max_pos);
        int d_checked = 0;
        for (int p = 0; p < r->n_prompt; p++) {
            g3_seq_feed(&s, &r->prompt[p], 1, step);
            if (r->margin[p] < 1e-3f)
                continue;
            d_checked++;
            assert_int_equal(argmax(step, V), r->argmax[p]);
        }
        double ddiff = max_abs_diff(step, r->last, V);
        fprintf(stderr, "%s: decode max |dlogit| %.3g, argmax %d/%d\n", r->name, ddiff,
                d_checked, d_checked);
        assert_true(ddiff <= 2e-3);
        g3_seq_fini(&s);
        free(step);
        free(lg);
    }
    free_cases(cases, n_cases);
    g3_close(m);
}

/* Last logits of `prompt` fed in chunks of `chunk` on a pool of `threads`. */
static float *run_chunked(g3_model_t *m, const int32_t *prompt, int n, int chunk, int threads,
                          cairn_dtype_t kv)
{
    cairn_thread_pool_t *tp = NULL;
    assert_int_equal(cairn_thread_pool_create(threads, &tp), 0);
    const int V = m->cfg.vocab;
    float *lg = malloc((size_t)chunk * V * sizeof(float));
    float *last = malloc((size_t)V * sizeof(float));
    g3_seq_t s;
    g3_seq_init(&s, m, tp, kv, chunk, n);
    for (int p = 0; p < n; p += chunk) {
        int c = n - p < chunk ? n - p : chunk;
        g3_seq_feed(&s, prompt + p, c, lg);
        if (p + c == n)
            memcpy(last, lg + (size_t)(c - 1) * V, (size_t)V * sizeof(float));
    }
    g3_seq_fini(&s);
    cairn_thread_pool_destroy(tp);
    free(lg);
    return last;
}

/* Chunks of 1, 7, 16, 100 and the whole prompt, 1 and 2 threads: memcmp-equal logits. */
static void test_chunking_and_threads_bit_identical(void **state)
{
    (void)state;
    g3_model_t *m = g3_open(model_dir);
    const int V = m->cfg.vocab;
    int n_cases;
    ref_case_t *cases = load_cases(V, &n_cases);
    const ref_case_t *r = &cases[0];
    for (int ci = 0; ci < n_cases; ci++)
        if (cases[ci].n_prompt > r->n_prompt)
            r = &cases[ci]; /* the longest: crosses the sliding window */
    static const cairn_dtype_t kvs[2] = {CAIRN_DTYPE_F32, CAIRN_DTYPE_BF16};
    for (int k = 0; k < 2; k++) {
        float *whole = run_chunked(m, r->prompt, r->n_prompt, r->n_prompt, 1, kvs[k]);
        static const int chunks[] = {1, 7, 16, 100};
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(chunks); i++) {
            float *c = run_chunked(m, r->prompt, r->n_prompt, chunks[i], i % 2 ? 2 : 1, kvs[k]);
            assert_memory_equal(c, whole, (size_t)V * sizeof(float));
            free(c);
        }
        float *t2 = run_chunked(m, r->prompt, r->n_prompt, r->n_prompt, 2, kvs[k]);
        assert_memory_equal(t2, whole, (size_t)V * sizeof(float));
        free(t2);
        free(whole);
    }
    free_cases(cases, n_cases);
    g3_close(m);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        model_dir = argv[1];
    kern_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_chunking_and_threads_bit_identical),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
