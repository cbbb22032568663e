/*
 * The LFM2 forward pass (src/models/lfm2) on the fixture ../shared/fixtures/models/lfm2,
 * over a flat per-sequence K/V store and conv state:
 *   - HF parity (reference.json, computed by transformers in float32): last-position
 *     logits within 2e-3, the teacher-forced argmax at every position with a reference
 *     top-2 margin >= 1e-3, and the greedy continuation fed token by token, up to the
 *     first step whose margin is below 1e-3 (the criteria of `cairn check-reference`);
 *   - bit identity (memcmp) of every position's logits and of the final conv state
 *     across chunked prefill (chunks of 1, 7, 16, 100 and the whole prompt), batching with
 *     another sequence in the same call, and 1 vs 2 threads, in both math modes.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine/kv_flat.h"
#include "formats/safetensors.h"
#include "models/lfm2/lfm2.h"

#define DIR CAIRN_FIXTURES_DIR "/models/lfm2"
#define MAX_ROWS 1024
#define MAX_POS 1024

typedef struct {
    char name[64];
    int32_t *prompt, *argmax, *greedy;
    float *margin, *gmargin, *last;
    int n_prompt, n_greedy;
} ref_case_t;

static cairn_checkpoint_t *ck;
static const lfm2_t *model;
static const lfm2_config_t *cfg;
static ref_case_t cases[8];
static int n_cases;

/* ---- one sequence on the flat path ------------------------------------------------ */

typedef struct {
    kv_flat_t kv;      /* the family's cache layout: attention layers hold rows */
    void *state;       /* [cfg->state_bytes] */
    int n_past;
} flat_seq_t;

static void seq_init(flat_seq_t *s, cairn_dtype_t kv_dtype)
{
    memset(s, 0, sizeof(*s));
    cairn_layer_cache_t layers[LFM2_MAX_LAYERS];
    size_t state_bytes = 0;
    assert_int_equal(cairn_model_cache_layout(cairn_checkpoint_model(ck), kv_dtype, layers,
                                              &state_bytes), 0);
    assert_int_equal(state_bytes, cfg->state_bytes);
    for (int l = 0; l < cfg->base.n_layers; l++)
        assert_int_equal(cairn_model_state_offset(layers, l), cfg->state_off[l]);
    assert_int_equal(kv_flat_init(&s->kv, layers, cfg->base.n_layers, kv_dtype), 0);
    assert_int_equal(kv_flat_reserve(&s->kv, MAX_POS), 0);
    s->state = aligned_alloc(64, (cfg->state_bytes + 64) / 64 * 64);
    assert_non_null(s->state);
    memset(s->state, 0, cfg->state_bytes);
}

static void seq_fini(flat_seq_t *s)
{
    kv_flat_fini(&s->kv);
    free(s->state);
}

typedef struct {
    compute_backend_t *be;
    lfm2_fwd_t fwd;
    cairn_dtype_t kv_dtype;
} runner_t;

static void runner_init(runner_t *r, int threads, cairn_math_t math, cairn_dtype_t kv_dtype)
{
    compute_backend_options_t bo = {threads, NULL, NULL};
    char err[128];
    assert_int_equal(compute_backend_create("cpu", &bo, &r->be, err, sizeof err), 0);
    assert_int_equal(lfm2_fwd_init(&r->fwd, cfg, &model->w, r->be, math, kv_dtype, MAX_ROWS,
                                   MAX_POS), 0);
    r->kv_dtype = kv_dtype;
}

static void runner_fini(runner_t *r)
{
    lfm2_fwd_fini(&r->fwd);
    compute_backend_destroy(r->be);
}

/*
 * Feeds ids [n] to the sequences of `seqs` side by side: in each call, up to `chunk`
 * tokens of every sequence (0: all at once), rows of sequence 0 first. Logits of every
 * position go to out[i] ([n][vocab] each).
 */
static void run_many(runner_t *r, flat_seq_t **seqs, int32_t *const *ids, const int *n,
                     int n_seqs, int chunk, float **out)
{
    const int V = cfg->base.vocab;
    cairn_fwd_row_t rows[MAX_ROWS];
    cairn_fwd_seq_t views[4];
    float *logits = malloc((size_t)MAX_ROWS * V * sizeof(float));
    assert_non_null(logits);
    for (;;) {
        int nr = 0, take[4];
        for (int s = 0; s < n_seqs; s++) {
            int left = n[s] - seqs[s]->n_past;
            take[s] = chunk > 0 && left > chunk ? chunk : left;
            for (int t = 0; t < take[s]; t++, nr++) {
                int pos = seqs[s]->n_past + t;
                rows[nr] = (cairn_fwd_row_t){s, pos, ids[s][pos], nr};
            }
            views[s] = (cairn_fwd_seq_t){{kv_flat_rows, &seqs[s]->kv}, NULL, seqs[s]->state, seqs[s]->n_past};
        }
        if (nr == 0)
            break;
        CAIRN_ASSERT(nr <= MAX_ROWS);
        cairn_fwd_batch_t b = {rows, nr, views, n_seqs, logits};
        lfm2_fwd_run(&r->fwd, &b);
        for (int i = 0; i < nr; i++)
            memcpy(out[rows[i].seq] + (size_t)rows[i].pos * V, logits + (size_t)i * V,
                   (size_t)V * sizeof(float));
        for (int s = 0; s < n_seqs; s++)
            seqs[s]->n_past += take[s];
    }
    free(logits);
}

static float *run_one(runner_t *r, flat_seq_t *s, int32_t *ids, int n, int chunk)
{
    float *out = malloc((size_t)n * cfg->base.vocab * sizeof(float));
    assert_non_null(out);
    run_many(r, &s, &ids, &n, 1, chunk, &out);
    return out;
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* ---- HF parity ---------------------------------------------------------------------- */

static void test_reference(void **st)
{
    (void)st;
    const int V = cfg->base.vocab;
    runner_t r;
    runner_init(&r, 1, CAIRN_MATH_F32, CAIRN_DTYPE_F32);
    for (int c = 0; c < n_cases; c++) {
        ref_case_t *rc = &cases[c];
        flat_seq_t s;
        seq_init(&s, CAIRN_DTYPE_F32);
        int32_t *ids = malloc((size_t)(rc->n_prompt + rc->n_greedy) * sizeof(int32_t));
        memcpy(ids, rc->prompt, (size_t)rc->n_prompt * sizeof(int32_t));
        float *lg = run_one(&r, &s, ids, rc->n_prompt, 0);

        int checked = 0, agree = 0;
        for (int p = 0; p < rc->n_prompt; p++) {
            if (rc->margin[p] < 1e-3f)
                continue;
            checked++;
            int ours = argmax(lg + (size_t)p * V, V);
            if (ours == rc->argmax[p])
                agree++;
            else
                print_message("%s: position %d: argmax %d, reference %d (margin %g)\n", rc->name,
                              p, ours, rc->argmax[p], rc->margin[p]);
        }
        double diff = 0;
        const float *last = lg + (size_t)(rc->n_prompt - 1) * V;
        for (int i = 0; i < V; i++)
            diff = fmax(diff, fabs((double)last[i] - rc->last[i]));

        /* Greedy continuation, token by token from the prompt's state. */
        float *step = malloc((size_t)V * sizeof(float));
        memcpy(step, last, (size_t)V * sizeof(float));
        int g_checked = 0, g_agree = 0;
        for (int i = 0; i < rc->n_greedy && rc->gmargin[i] >= 1e-3f; i++) {
            g_checked++;
            if (argmax(step, V) != rc->greedy[i])
                break;
            g_agree++;
            ids[rc->n_prompt + i] = rc->greedy[i];
            float *one = malloc((size_t)(rc->n_prompt + i + 1) * V * sizeof(float));
            flat_seq_t *sp = &s;
            int32_t *idp = ids;
            int n1 = rc->n_prompt + i + 1;
            run_many(&r, &sp, &idp, &n1, 1, 0, &one);
            memcpy(step, one + (size_t)(n1 - 1) * V, (size_t)V * sizeof(float));
            free(one);
        }
        print_message("%s: %d tokens, argmax %d/%d, last-logit max |diff| %.3g, greedy %d/%d\n",
                      rc->name, rc->n_prompt, agree, checked, diff, g_agree, g_checked);
        assert_int_equal(agree, checked);
        assert_true(checked > rc->n_prompt / 2);
        assert_true(diff <= 2e-3);
        assert_int_equal(g_agree, g_checked);
        free(step);
        free(lg);
        free(ids);
        seq_fini(&s);
    }
    runner_fini(&r);
}

/* ---- bit identity ------------------------------------------------------------------ */

static const ref_case_t *find_case(const char *name)
{
    for (int c = 0; c < n_cases; c++)
        if (!strcmp(cases[c].name, name))
            return &cases[c];
    fail_msg("reference.json lacks case %s", name);
    return NULL;
}

static void check_chunking(cairn_math_t math, cairn_dtype_t kv)
{
    const ref_case_t *rc = find_case("long_720");
    const size_t bytes = (size_t)rc->n_prompt * cfg->base.vocab * sizeof(float);
    const size_t sbytes = cfg->state_bytes;
    runner_t r;
    runner_init(&r, 1, math, kv);
    flat_seq_t whole;
    seq_init(&whole, kv);
    float *ref = run_one(&r, &whole, rc->prompt, rc->n_prompt, 0);
    static const int chunks[] = {1, 7, 16, 100};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(chunks); i++) {
        flat_seq_t s;
        seq_init(&s, kv);
        float *got = run_one(&r, &s, rc->prompt, rc->n_prompt, chunks[i]);
        assert_memory_equal(got, ref, bytes);
        assert_memory_equal(s.state, whole.state, sbytes);
        free(got);
        seq_fini(&s);
    }
    runner_fini(&r);

    /* Two threads. */
    runner_init(&r, 2, math, kv);
    flat_seq_t s2;
    seq_init(&s2, kv);
    float *got = run_one(&r, &s2, rc->prompt, rc->n_prompt, 100);
    assert_memory_equal(got, ref, bytes);
    assert_memory_equal(s2.state, whole.state, sbytes);
    free(got);
    seq_fini(&s2);
    runner_fini(&r);
    free(ref);
    seq_fini(&whole);
}

static void test_chunking_and_threads(void **st)
{
    (void)st;
    check_chunking(CAIRN_MATH_F32, CAIRN_DTYPE_F32);
    check_chunking(CAIRN_MATH_BF16, CAIRN_DTYPE_BF16);
}

/* Two sequences in the same calls (rows of both in one activation matrix) vs alone. */
static void test_batched(void **st)
{
    (void)st;
    const ref_case_t *a = find_case("long_720"), *b = find_case("shared_prefix_672");
    const int V = cfg->base.vocab;
    runner_t r;
    runner_init(&r, 2, CAIRN_MATH_F32, CAIRN_DTYPE_BF16);
    flat_seq_t sa, sb, alone_a, alone_b;
    seq_init(&sa, CAIRN_DTYPE_BF16);
    seq_init(&sb, CAIRN_DTYPE_BF16);
    seq_init(&alone_a, CAIRN_DTYPE_BF16);
    seq_init(&alone_b, CAIRN_DTYPE_BF16);
    float *ra = run_one(&r, &alone_a, a->prompt, a->n_prompt, 0);
    float *rb = run_one(&r, &alone_b, b->prompt, b->n_prompt, 0);
    float *out[2] = {malloc((size_t)a->n_prompt * V * 4), malloc((size_t)b->n_prompt * V * 4)};
    flat_seq_t *seqs[2] = {&sa, &sb};
    int32_t *ids[2] = {a->prompt, b->prompt};
    int n[2] = {a->n_prompt, b->n_prompt};
    run_many(&r, seqs, ids, n, 2, 333, out);
    assert_memory_equal(out[0], ra, (size_t)a->n_prompt * V * 4);
    assert_memory_equal(out[1], rb, (size_t)b->n_prompt * V * 4);
    assert_memory_equal(sa.state, alone_a.state, cfg->state_bytes);
    /* The shared 512-token prefix gives the same logits in both prompts. */
    assert_memory_equal(ra, rb, (size_t)512 * V * 4);
    free(out[0]);
    free(out[1]);
    free(ra);
    free(rb);
    seq_fini(&sa);
    seq_fini(&sb);
    seq_fini(&alone_a);
    seq_fini(&alone_b);
    runner_fini(&r);
}

/* ---- fixture loading -------------------------------------------------------------- */

static int32_t *ints(const cJSON *a, int *n)
{
    *n = cJSON_GetArraySize(a);
    int32_t *v = malloc((size_t)(*n + 1) * sizeof(int32_t));
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) v[i++] = (int32_t)e->valuedouble;
    return v;
}

static float *floats(const cJSON *a)
{
    float *v = malloc((size_t)(cJSON_GetArraySize(a) + 1) * sizeof(float));
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) v[i++] = (float)e->valuedouble;
    return v;
}

static int setup(void **st)
{
    (void)st;
    char err[512] = "";
    if (cairn_checkpoint_open(DIR, &ck, err, sizeof err) != 0) {
        print_error("cannot open %s: %s\n", DIR, err);
        return -1;
    }
    model = lfm2_of(cairn_checkpoint_model(ck));
    if (!model)
        return -1;
    cfg = &model->cfg;
    char *text = NULL;
    size_t len = 0;
    if (st_read_file(DIR "/reference.json", 64 << 20, &text, &len, err, sizeof err) != 0)
        return -1;
    cJSON *root = cJSON_ParseWithLength(text, len);
    cairn_free(text);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "cases"), *c;
    cJSON_ArrayForEach(c, arr)
    {
        ref_case_t *rc = &cases[n_cases++];
        int n_arg, n_gm;
        snprintf(rc->name, sizeof rc->name, "%s",
                 cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring);
        rc->prompt = ints(cJSON_GetObjectItemCaseSensitive(c, "prompt_ids"), &rc->n_prompt);
        rc->argmax = ints(cJSON_GetObjectItemCaseSensitive(c, "argmax_per_position"), &n_arg);
        rc->greedy = ints(cJSON_GetObjectItemCaseSensitive(c, "greedy_ids"), &rc->n_greedy);
        rc->margin = floats(cJSON_GetObjectItemCaseSensitive(c, "top2_margin_per_position"));
        rc->gmargin = floats(cJSON_GetObjectItemCaseSensitive(c, "greedy_top2_margin"));
        (void)n_gm;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", DIR,
                 cJSON_GetObjectItemCaseSensitive(c, "last_logits_file")->valuestring);
        FILE *f = fopen(path, "rb");
        rc->last = malloc((size_t)cfg->base.vocab * sizeof(float));
        if (!f || fread(rc->last, sizeof(float), (size_t)cfg->base.vocab, f) != (size_t)cfg->base.vocab)
            return -1;
        fclose(f);
    }
    cJSON_Delete(root);
    return n_cases > 0 ? 0 : -1;
}

static int teardown(void **st)
{
    (void)st;
    for (int c = 0; c < n_cases; c++) {
        free(cases[c].prompt);
        free(cases[c].argmax);
        free(cases[c].greedy);
        free(cases[c].margin);
        free(cases[c].gmargin);
        free(cases[c].last);
    }
    cairn_checkpoint_close(ck);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_chunking_and_threads),
        cmocka_unit_test(test_batched),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
