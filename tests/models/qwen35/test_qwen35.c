/*
 * Qwen3.5 numerics against HF transformers (models/qwen3_5 fixture: 3 Gated DeltaNet
 * layers + 1 gated full-attention layer, partial rotary 0.25), and the exactness the
 * sequential recurrence promises: chunked prefill (1, 7, 16, 100, whole), batching with
 * another sequence and 1 vs 2 threads give memcmp-identical logits.
 *
 * Reference criteria (as `cairn check-reference` for the dense families): last-position
 * logits within 2e-3; teacher-forced argmax equal wherever the reference top-2 margin is
 * >= 1e-3; greedy continuation equal up to the first step whose margin is below 1e-3.
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
#include <cjson/cJSON.h>

#include "compute/cpu/cpu_backend.h"
#include "compute/cpu/kernels.h"
#include "engine/kv_flat.h"
#include "models/qwen35/qwen35.h"
#include "util/thread_pool.h"

#define MIN_MARGIN 1e-3f
#define MAX_TOL 2e-3
#define MAX_ROWS 1400

static cairn_checkpoint_t *ck;
static const cairn_model_t *model;
static const q35_config_t *cfg;
static cairn_layer_cache_t layers[Q35_MAX_LAYERS];
static size_t state_bytes;
static int V;

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

static ref_case_t cases[8];
static int n_cases;

static const char *model_dir(void)
{
    static char buf[1024];
    snprintf(buf, sizeof(buf), "%s/models/qwen3_5", CAIRN_FIXTURES_DIR);
    return buf;
}

static char *slurp(const char *path, long *len)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_true(fread(buf, 1, (size_t)n, fp) == (size_t)n);
    buf[n] = 0;
    fclose(fp);
    if (len)
        *len = n;
    return buf;
}

static void numbers(const cJSON *arr, int32_t **ints, float **floats, int *n)
{
    *n = cJSON_GetArraySize(arr);
    if (ints)
        *ints = malloc((size_t)*n * sizeof(int32_t));
    if (floats)
        *floats = malloc((size_t)*n * sizeof(float));
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (ints)
            (*ints)[i] = (int32_t)it->valuedouble;
        if (floats)
            (*floats)[i] = (float)it->valuedouble;
        i++;
    }
}

static void load_reference(void)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/reference.json", model_dir());
    char *text = slurp(path, NULL);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) {
        ref_case_t *rc = &cases[n_cases++];
        snprintf(rc->name, sizeof(rc->name), "%s", cJSON_GetObjectItem(c, "name")->valuestring);
        int n;
        numbers(cJSON_GetObjectItem(c, "prompt_ids"), &rc->prompt, NULL, &rc->n_prompt);
        numbers(cJSON_GetObjectItem(c, "argmax_per_position"), &rc->argmax, NULL, &n);
        assert_int_equal(n, rc->n_prompt);
        numbers(cJSON_GetObjectItem(c, "top2_margin_per_position"), NULL, &rc->margin, &n);
        numbers(cJSON_GetObjectItem(c, "greedy_ids"), &rc->greedy, NULL, &rc->n_greedy);
        numbers(cJSON_GetObjectItem(c, "greedy_top2_margin"), NULL, &rc->gmargin, &n);
        snprintf(path, sizeof(path), "%s/%s", model_dir(),
                 cJSON_GetObjectItem(c, "last_logits_file")->valuestring);
        long len;
        rc->last = (float *)slurp(path, &len);
        assert_int_equal(len, (long)V * 4);
    }
    cJSON_Delete(root);
}

/* One sequence being run: its state handle, flat K/V (every layer index addressable) and
 * the number of positions it holds. */
typedef struct {
    void *state;
    size_t state_bytes;
    kv_flat_t kv;
    int n_past;
} seq_t;

static void seq_init(seq_t *s, int cap)
{
    s->state_bytes = state_bytes;
    s->state = aligned_alloc(64, (state_bytes + 63) & ~(size_t)63);
    memset(s->state, 0, state_bytes);
    assert_int_equal(kv_flat_init(&s->kv, layers, cfg->base.n_layers, CAIRN_DTYPE_F32), 0);
    assert_int_equal(kv_flat_reserve(&s->kv, cap), 0);
    s->n_past = 0;
}

static void seq_fini(seq_t *s)
{
    free(s->state);
    kv_flat_fini(&s->kv);
}

static cairn_fwd_seq_t seq_view(seq_t *s)
{
    return (cairn_fwd_seq_t){{kv_flat_rows, &s->kv}, NULL, s->state, s->n_past};
}

static int argmax(const float *x)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* A CPU backend of `threads` threads running kernel implementation impl (NULL: the
 * process choice). */
static compute_backend_t *backend(const char *impl, int threads)
{
    compute_backend_options_t o = {threads, NULL, impl};
    compute_backend_t *be = NULL;
    char err[128];
    assert_int_equal(compute_backend_create("cpu", &o, &be, err, sizeof(err)), 0);
    return be;
}

/* The family's forward context on be for max_rows rows, f32 math and K/V. */
static void *fwd_new(compute_backend_t *be)
{
    cairn_fwd_env_t env = {be, compute_cpu_thread_pool(be), CAIRN_ENGINE_MATH_F32, CAIRN_DTYPE_F32,
                           MAX_ROWS, 1024};
    void *f = NULL;
    assert_int_equal(model->family->fwd_create(model, &env, &f), 0);
    return f;
}

/* Feeds ids [n] to seq in chunks of `chunk` (0: one call), logits of every position into
 * out [n][V]. */
static void feed(void *f, seq_t *s, const int32_t *ids, int n, int chunk, float *out)
{
    static cairn_fwd_row_t rows[MAX_ROWS];
    for (int done = 0; done < n;) {
        int len = chunk ? chunk : n;
        if (len > n - done)
            len = n - done;
        for (int i = 0; i < len; i++)
            rows[i] = (cairn_fwd_row_t){0, s->n_past + i, ids[done + i], i};
        cairn_fwd_seq_t view = seq_view(s);
        cairn_fwd_batch_t b = {rows, len, &view, 1, out + (size_t)done * V};
        assert_int_equal(model->family->fwd_step(f, &b), 0);
        s->n_past += len;
        done += len;
    }
}

/* Logits of every position of ids on a fresh sequence; malloc'd [n][V]. */
static float *run_prompt(const char *impl, int threads, const int32_t *ids, int n, int chunk)
{
    compute_backend_t *be = backend(impl, threads);
    void *f = fwd_new(be);
    seq_t s;
    seq_init(&s, 1024);
    float *out = malloc((size_t)n * V * sizeof(float));
    feed(f, &s, ids, n, chunk, out);
    seq_fini(&s);
    model->family->fwd_destroy(f);
    compute_backend_destroy(be);
    return out;
}

static int setup(void **state)
{
    (void)state;
    char err[512] = "";
    if (cairn_checkpoint_open(model_dir(), &ck, err, sizeof(err)) != 0) {
        fprintf(stderr, "open %s: %s\n", model_dir(), err);
        return -1;
    }
    model = cairn_checkpoint_model(ck);
    cfg = q35_model_config(model);
    if (!cfg || cairn_model_cache_layout(model, CAIRN_DTYPE_F32, layers, &state_bytes) != 0)
        return -1;
    V = cfg->base.vocab;
    kern_init();
    load_reference();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < n_cases; i++) {
        free(cases[i].prompt);
        free(cases[i].argmax);
        free(cases[i].margin);
        free(cases[i].greedy);
        free(cases[i].gmargin);
        free(cases[i].last);
    }
    cairn_checkpoint_close(ck);
    return 0;
}

static void test_config_of_fixture(void **state)
{
    (void)state;
    assert_int_equal(cfg->base.n_layers, 4);
    assert_int_equal(cfg->n_linear, 3);
    assert_int_equal(cfg->n_full, 1);
    assert_int_equal(cfg->kind[3], Q35_LAYER_FULL);
    assert_int_equal(cfg->rope_dim, 8);
    assert_int_equal(q35_conv_dim(cfg), 2 * 2 * 32 + 4 * 32);
    assert_false(cfg->base.tie_embeddings);
    assert_string_equal(cfg->prefix, "model.");
    assert_string_equal(model->cfg.family, "qwen35");
    assert_int_equal(model->cfg.n_eos, 1);
    assert_int_equal(model->cfg.eos_ids[0], 4095);
    /* Layers 0-2 recurrent: conv taps [3][256] + 4 heads of [32][32], float32; layer 3 full. */
    assert_int_equal(layers[0].kv.kind, CAIRN_KV_LAYER_RECURRENT);
    assert_int_equal(layers[0].state_bytes, (3 * 256 + 4 * 32 * 32) * 4);
    assert_int_equal(layers[3].kv.kind, CAIRN_KV_LAYER_FULL);
    assert_int_equal(layers[3].kv.n_kv_heads, 2);
    assert_int_equal(state_bytes, 3 * (3 * 256 + 4 * 32 * 32) * 4);
}

/* HF parity: prefill (one call) and decode (token by token) against reference.json. */
static void check_case(const ref_case_t *rc, int chunk)
{
    compute_backend_t *be = backend(NULL, 1);
    void *f = fwd_new(be);
    seq_t s;
    seq_init(&s, 1024);
    float *lg = malloc((size_t)rc->n_prompt * V * sizeof(float));
    feed(f, &s, rc->prompt, rc->n_prompt, chunk, lg);

    double max_diff = 0;
    const float *last = lg + (size_t)(rc->n_prompt - 1) * V;
    for (int i = 0; i < V; i++)
        max_diff = fmax(max_diff, fabs((double)last[i] - rc->last[i]));
    int checked = 0, agree = 0, first_bad = -1;
    for (int p = 0; p < rc->n_prompt; p++) {
        if (rc->margin[p] < MIN_MARGIN)
            continue;
        checked++;
        if (argmax(lg + (size_t)p * V) == rc->argmax[p])
            agree++;
        else if (first_bad < 0)
            first_bad = p;
    }
    /* Greedy: the prompt's last argmax, then feed each greedy token. */
    int g_ok = 0, g_checked = 0;
    int next = argmax(last);
    float *step = malloc((size_t)V * sizeof(float));
    for (int i = 0; i < rc->n_greedy; i++) {
        if (rc->gmargin[i] < MIN_MARGIN)
            break;
        g_checked++;
        if (next != rc->greedy[i])
            break;
        g_ok++;
        if (i + 1 == rc->n_greedy)
            break;
        feed(f, &s, &rc->greedy[i], 1, 1, step);
        next = argmax(step);
    }
    printf("  %-18s chunk %-3d max|dlogit| %.3g  argmax %d/%d  greedy %d/%d (of %d)\n", rc->name,
           chunk, max_diff, agree, checked, g_ok, g_checked, rc->n_greedy);
    if (first_bad >= 0)
        printf("    first argmax mismatch at %d\n", first_bad);
    assert_true(max_diff <= MAX_TOL);
    assert_int_equal(agree, checked);
    assert_int_equal(g_ok, g_checked);
    free(step);
    free(lg);
    seq_fini(&s);
    model->family->fwd_destroy(f);
    compute_backend_destroy(be);
}

static void test_reference_prefill(void **state)
{
    (void)state;
    for (int i = 0; i < n_cases; i++)
        check_case(&cases[i], 0);
}

static void test_reference_decode(void **state)
{
    (void)state;
    for (int i = 0; i < n_cases; i++)
        check_case(&cases[i], 1);
}

static const ref_case_t *find_case(const char *name)
{
    for (int i = 0; i < n_cases; i++)
        if (!strcmp(cases[i].name, name))
            return &cases[i];
    fail_msg("no case %s", name);
    return NULL;
}

/* Chunked prefill: every position's logits are the same bits for any chunking. */
static void test_chunking_bit_identical(void **state)
{
    (void)state;
    const ref_case_t *rc = find_case("long_720");
    float *whole = run_prompt(NULL, 1, rc->prompt, rc->n_prompt, 0);
    static const int chunks[] = {1, 7, 16, 100};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(chunks); i++) {
        float *got = run_prompt(NULL, 1, rc->prompt, rc->n_prompt, chunks[i]);
        assert_memory_equal(got, whole, (size_t)rc->n_prompt * V * sizeof(float));
        free(got);
    }
    free(whole);
}

/* 1 vs 2 threads (the delta rule splits (sequence, head) tasks; matmuls split outputs). */
static void test_threads_bit_identical(void **state)
{
    (void)state;
    const ref_case_t *rc = find_case("long_720");
    float *one = run_prompt(NULL, 1, rc->prompt, rc->n_prompt, 100);
    float *two = run_prompt(NULL, 2, rc->prompt, rc->n_prompt, 100);
    assert_memory_equal(one, two, (size_t)rc->n_prompt * V * sizeof(float));
    free(one);
    free(two);
}

/* Every kernel implementation the CPU runs (scalar, AVX2, AVX-512) gives the same bits. */
static void test_implementations_bit_identical(void **state)
{
    (void)state;
    const ref_case_t *rc = find_case("chat_short");
    float *ref = run_prompt(NULL, 1, rc->prompt, rc->n_prompt, 7);
    static const char *const impls[] = {"scalar", "avx2", "avx512-emubf16", "avx512"};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(impls); i++) {
        if (!kern_impl_available(impls[i]))
            continue;
        float *got = run_prompt(impls[i], 1, rc->prompt, rc->n_prompt, 7);
        assert_memory_equal(got, ref, (size_t)rc->n_prompt * V * sizeof(float));
        free(got);
    }
    free(ref);
}

/* Two sequences whose rows alternate in the same calls vs each alone. */
static void test_batched_bit_identical(void **state)
{
    (void)state;
    const ref_case_t *a = find_case("long_720"), *b = find_case("shared_prefix_672");
    float *alone_a = run_prompt(NULL, 1, a->prompt, a->n_prompt, 0);
    float *alone_b = run_prompt(NULL, 1, b->prompt, b->n_prompt, 0);

    compute_backend_t *be2 = backend(NULL, 2);
    void *f = fwd_new(be2);
    seq_t s[2];
    seq_init(&s[0], 1024);
    seq_init(&s[1], 1024);
    float *got_a = malloc((size_t)a->n_prompt * V * sizeof(float));
    float *got_b = malloc((size_t)b->n_prompt * V * sizeof(float));
    float *lg = malloc((size_t)MAX_ROWS * V * sizeof(float));
    static cairn_fwd_row_t rows[MAX_ROWS];
    /* Steps of 37 tokens of a interleaved with 23 of b, then the rest. */
    int da = 0, db = 0;
    while (da < a->n_prompt || db < b->n_prompt) {
        int n = 0, ia = 0, ib = 0;
        while ((ia < 37 && da + ia < a->n_prompt) || (ib < 23 && db + ib < b->n_prompt)) {
            if (ia < 37 && da + ia < a->n_prompt) {
                rows[n] = (cairn_fwd_row_t){0, da + ia, a->prompt[da + ia], n};
                n++, ia++;
            }
            if (ib < 23 && db + ib < b->n_prompt) {
                rows[n] = (cairn_fwd_row_t){1, db + ib, b->prompt[db + ib], n};
                n++, ib++;
            }
        }
        cairn_fwd_seq_t views[2] = {seq_view(&s[0]), seq_view(&s[1])};
        cairn_fwd_batch_t batch = {rows, n, views, 2, lg};
        assert_int_equal(model->family->fwd_step(f, &batch), 0);
        s[0].n_past += ia;
        s[1].n_past += ib;
        for (int r = 0; r < n; r++) {
            float *dst = rows[r].seq == 0 ? got_a : got_b;
            memcpy(dst + (size_t)rows[r].pos * V, lg + (size_t)r * V, (size_t)V * sizeof(float));
        }
        da += ia;
        db += ib;
    }
    assert_memory_equal(got_a, alone_a, (size_t)a->n_prompt * V * sizeof(float));
    assert_memory_equal(got_b, alone_b, (size_t)b->n_prompt * V * sizeof(float));
    free(lg);
    free(got_a);
    free(got_b);
    free(alone_a);
    free(alone_b);
    seq_fini(&s[0]);
    seq_fini(&s[1]);
    model->family->fwd_destroy(f);
    compute_backend_destroy(be2);
}

/* Parses through the registry (model_type -> family); *c gets the family's config. */
static int parse(const char *json, q35_config_t *c, char *err)
{
    cairn_model_t m;
    int rc = cairn_model_parse_config(json, strlen(json), &m, err, 256);
    if (rc == 0) {
        *c = *q35_model_config(&m);
        cairn_model_fini(&m);
    }
    return rc;
}

static void test_config_parse(void **state)
{
    (void)state;
    q35_config_t c;
    char err[256];
    /* The multimodal wrapper: text_config, model.language_model. prefix, defaults. */
    const char *wrapped = "{\"model_type\":\"qwen3_5\",\"tie_word_embeddings\":true,"
        "\"text_config\":{\"model_type\":\"qwen3_5_text\",\"hidden_size\":64,\"num_hidden_layers\":8,"
        "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16,\"intermediate_size\":96,"
        "\"vocab_size\":300,\"tie_word_embeddings\":true,\"attn_output_gate\":true,"
        "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":1e7,\"partial_rotary_factor\":0.25,"
        "\"mrope_interleaved\":true,\"mrope_section\":[11,11,10]},\"eos_token_id\":299}}";
    assert_int_equal(parse(wrapped, &c, err), 0);
    assert_string_equal(c.prefix, "model.language_model.");
    assert_true(c.base.tie_embeddings);
    assert_int_equal(c.rope_dim, 4);
    assert_int_equal(c.n_full, 2);
    assert_int_equal(c.kind[3], Q35_LAYER_FULL);
    assert_int_equal(c.kind[7], Q35_LAYER_FULL);
    assert_int_equal(c.slot[7], 1);
    assert_int_equal(c.slot[6], 5);
    assert_int_equal(c.lin_v_heads, 32); /* the Qwen3_5TextConfig default */
    assert_int_equal(c.base.n_eos, 1);
    assert_int_equal(c.base.eos_ids[0], 299);

    static const struct {
        const char *extra, *needle;
        int rc;
    } bad[] = {
        {"\"attention_bias\":true", "attention_bias", CAIRN_EUNSUPPORTED},
        {"\"hidden_act\":\"gelu\"", "hidden_act", CAIRN_EUNSUPPORTED},
        {"\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":4}", "rope_type", CAIRN_EUNSUPPORTED},
        {"\"quantization_config\":{\"bits\":4}", "quantization_config", CAIRN_EUNSUPPORTED},
        {"\"num_experts\":8", "num_experts", CAIRN_EUNSUPPORTED},
        {"\"layer_types\":[\"linear_attention\",\"sliding_attention\"]", "layer_types[1]", CAIRN_EUNSUPPORTED},
        {"\"layer_types\":[\"linear_attention\"]", "layer_types", CAIRN_EFORMAT},
        {"\"linear_num_key_heads\":3", "linear_num_value_heads", CAIRN_EFORMAT},
        {"\"partial_rotary_factor\":0.01", "rotary", CAIRN_EFORMAT},
        /* positive, but 0 in float32: RMSNorm would divide by zero (fuzz_qwen35_config) */
        {"\"rms_norm_eps\":1e-60", "rms_norm_eps", CAIRN_EFORMAT},
        {"\"rope_parameters\":{\"rope_theta\":1e-50}", "rope_theta", CAIRN_EFORMAT},
        /* nothing to page: the cache layout would be refused later (fuzz_qwen35_config) */
        {"\"layer_types\":[\"linear_attention\",\"linear_attention\"]", "no full_attention", CAIRN_EUNSUPPORTED},
    };
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(bad); i++) {
        char json[1024];
        snprintf(json, sizeof(json), "{\"model_type\":\"qwen3_5_text\",\"hidden_size\":64,"
                 "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
                 "\"head_dim\":16,\"intermediate_size\":96,\"vocab_size\":300,"
                 "\"full_attention_interval\":2,%s}", bad[i].extra);
        err[0] = 0;
        assert_int_equal(parse(json, &c, err), bad[i].rc);
        if (!strstr(err, bad[i].needle))
            fail_msg("case %zu: '%s' does not name %s", i, err, bad[i].needle);
    }
    assert_int_equal(parse("{\"model_type\":\"qwen3_next\"}", &c, err), CAIRN_EUNSUPPORTED);
    assert_int_equal(parse("{\"model_type\":\"qwen3_5\"}", &c, err), CAIRN_EFORMAT);
    assert_int_equal(parse("{\"model_type\":", &c, err), CAIRN_EFORMAT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_of_fixture),
        cmocka_unit_test(test_config_parse),
        cmocka_unit_test(test_reference_prefill),
        cmocka_unit_test(test_reference_decode),
        cmocka_unit_test(test_chunking_bit_identical),
        cmocka_unit_test(test_threads_bit_identical),
        cmocka_unit_test(test_batched_bit_identical),
        cmocka_unit_test(test_implementations_bit_identical),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
