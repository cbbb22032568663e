/*
 * The Gemma 3 operations held to independent references:
 *  - gelu-tanh against torch's formula 0.5 x (1 + tanh(u)) evaluated in double, and its
 *    limits (large |x|, zero, NaN);
 *  - windowed, scaled, soft-capped attention against a textbook double-precision
 *    reference, for MHA/GQA/MQA shapes, windows smaller and larger than the span, with and
 *    without a cap; keys below the window are never read (the accessor refuses them, as a
 *    released sliding block would); K/V served in runs of 1, 16 or all and 1 vs 3
 *    threads give the same bits; with no window and no cap it equals the engine's
 *    attention (the canonical order of attention_impl.h) bit for bit.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/cpu/attention.h"
#include "models/gemma3/gemma3.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float rndf(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((int)((rng >> 16) % 2000001) - 1000000) * 1e-6f;
}

static void test_gelu_tanh(void **state)
{
    (void)state;
    /* Relative error where the double formula itself is accurate (1 + tanh(u) >= ~1e-7,
     * x >= -5), absolute error everywhere on [-20, 20]. */
    double worst_rel = 0, worst_abs = 0;
    for (int i = -200000; i <= 200000; i++) {
        float x = (float)i * 1e-4f;
        double u = sqrt(2.0 / M_PI) * ((double)x + 0.044715 * (double)x * x * x);
        double ref = 0.5 * x * (1.0 + tanh(u)), got = gemma3_gelu_tanh(x);
        worst_abs = fmax(worst_abs, fabs(got - ref));
        if (x >= -5.0f && ref != 0)
            worst_rel = fmax(worst_rel, fabs(got - ref) / fabs(ref));
    }
    fprintf(stderr, "gelu_tanh: worst relative error %.3g on [-5, 20], absolute %.3g on [-20, 20]\n",
            worst_rel, worst_abs);
    assert_true(worst_rel < 1e-5);
    assert_true(worst_abs < 1e-5);
    assert_true(gemma3_gelu_tanh(0.0f) == 0.0f);
    assert_true(gemma3_gelu_tanh(1e30f) == 1e30f);
    assert_true(gemma3_gelu_tanh(-1e30f) == 0.0f);
    assert_true(isnan(gemma3_gelu_tanh(NAN)));
    float g[3] = {1.0f, -2.0f, 0.5f}, u[3] = {2.0f, 3.0f, -1.0f}, o[3];
    gemma3_gelu_tanh_mul(o, g, u, 3);
    for (int i = 0; i < 3; i++)
        assert_true(o[i] == gemma3_gelu_tanh(g[i]) * u[i]);
}

/* ---- attention ---- */

typedef struct {
    unsigned char *k, *v; /* [n_pos][kv_dim] of dtype */
    size_t row_bytes;
    int n_pos, run;
    int lowest_allowed; /* positions below it are "released" */
    int refused;        /* reads of released positions */
} store_t;

static int store_rows(void *ctx, int layer, int pos, void **k, void **v)
{
    store_t *s = ctx;
    (void)layer;
    if (pos < s->lowest_allowed) {
        s->refused++;
        return 0;
    }
    *k = s->k + (size_t)pos * s->row_bytes;
    *v = s->v + (size_t)pos * s->row_bytes;
    int left = s->n_pos - pos, in_run = s->run - pos % s->run;
    return left < in_run ? left : in_run;
}

typedef struct {
    int n_heads, n_kv_heads, hd, n_pos;
    cairn_dtype_t dt;
    float *q; /* [n_pos][n_heads*hd] */
    store_t st;
    attn_kv_t kv;
} problem_t;

static void problem_init(problem_t *p, int nh, int nkv, int hd, int n_pos, cairn_dtype_t dt)
{
    *p = (problem_t){nh, nkv, hd, n_pos, dt, NULL, {0}, {0}};
    p->q = malloc((size_t)n_pos * nh * hd * sizeof(float));
    for (size_t i = 0; i < (size_t)n_pos * nh * hd; i++)
        p->q[i] = 2.0f * rndf();
    p->st.row_bytes = (size_t)nkv * hd * cairn_dtype_size(dt);
    p->st.k = malloc((size_t)n_pos * p->st.row_bytes);
    p->st.v = malloc((size_t)n_pos * p->st.row_bytes);
    p->st.n_pos = n_pos;
    p->st.run = n_pos;
    float *row = malloc((size_t)nkv * hd * sizeof(float));
    for (int t = 0; t < n_pos; t++) {
        for (int i = 0; i < nkv * hd; i++)
            row[i] = 2.0f * rndf();
        kern_row_from_f32(p->st.k + (size_t)t * p->st.row_bytes, dt, row, nkv * hd);
        for (int i = 0; i < nkv * hd; i++)
            row[i] = rndf();
        kern_row_from_f32(p->st.v + (size_t)t * p->st.row_bytes, dt, row, nkv * hd);
    }
    free(row);
    p->kv = (attn_kv_t){store_rows, &p->st};
}

static void problem_fini(problem_t *p)
{
    free(p->q);
    free(p->st.k);
    free(p->st.v);
}

/* Runs queries [q0, q1) on tp; out [n_pos][n_heads*hd]. */
static void run(problem_t *p, cairn_thread_pool_t *tp, int window, float scale, float cap, int q0,
                int q1, float *out)
{
    gemma3_attn_cfg_t a = {p->n_heads, p->n_kv_heads, p->hd, p->dt, scale, cap, p->n_pos, NULL,
                           cairn_thread_pool_size(tp)};
    a.scratch = malloc((size_t)a.n_slots * gemma3_attn_scratch_floats(&a) * sizeof(float));
    gemma3_query_t *qs = malloc((size_t)(q1 - q0) * sizeof *qs);
    const int qd = p->n_heads * p->hd;
    for (int t = q0; t < q1; t++)
        qs[t - q0] = (gemma3_query_t){p->q + (size_t)t * qd, out + (size_t)t * qd, &p->kv, t};
    gemma3_attention(tp, &a, 0, window, qs, q1 - q0);
    free(qs);
    free(a.scratch);
}

/* Textbook attention in double over the stored (dtype-rounded) K/V. */
static void reference(const problem_t *p, int window, double scale, double cap, float *out)
{
    const int hd = p->hd, G = p->n_heads / p->n_kv_heads, qd = p->n_heads * hd;
    float *k = malloc((size_t)hd * sizeof(float)), *v = malloc((size_t)hd * sizeof(float));
    double *s = malloc((size_t)p->n_pos * sizeof(double)), *acc = malloc((size_t)hd * sizeof(double));
    for (int t = 0; t < p->n_pos; t++)
        for (int h = 0; h < p->n_heads; h++) {
            const float *q = p->q + (size_t)t * qd + (size_t)h * hd;
            int lo = window > 0 && t - window + 1 > 0 ? t - window + 1 : 0;
            double m = -INFINITY, l = 0;
            for (int j = lo; j <= t; j++) {
                kern_row_to_f32(k, p->st.k + (size_t)j * p->st.row_bytes +
                                       (size_t)(h / G) * hd * cairn_dtype_size(p->dt), p->dt, hd);
                double d = 0;
                for (int i = 0; i < hd; i++)
                    d += (double)q[i] * k[i];
                d *= scale;
                if (cap > 0)
                    d = tanh(d / cap) * cap;
                s[j] = d;
                m = d > m ? d : m;
            }
            memset(acc, 0, (size_t)hd * sizeof(double));
            for (int j = lo; j <= t; j++) {
                double e = exp(s[j] - m);
                l += e;
                kern_row_to_f32(v, p->st.v + (size_t)j * p->st.row_bytes +
                                       (size_t)(h / G) * hd * cairn_dtype_size(p->dt), p->dt, hd);
                for (int i = 0; i < hd; i++)
                    acc[i] += e * v[i];
            }
            for (int i = 0; i < hd; i++)
                out[(size_t)t * qd + (size_t)h * hd + i] = (float)(acc[i] / l);
        }
    free(k);
    free(v);
    free(s);
    free(acc);
}

static void test_attention_vs_reference_and_window(void **state)
{
    (void)state;
    static const int shapes[][3] = {{4, 4, 32}, {4, 1, 40}, {8, 2, 16}}; /* MHA, MQA, GQA */
    static const int windows[] = {0, 1, 7, 32, 200};
    static const float caps[] = {0.0f, 5.0f};
    const cairn_dtype_t dts[] = {CAIRN_DTYPE_F32, CAIRN_DTYPE_BF16};
    cairn_thread_pool_t *tp1 = NULL, *tp3 = NULL;
    assert_int_equal(cairn_thread_pool_create(1, &tp1), 0);
    assert_int_equal(cairn_thread_pool_create(3, &tp3), 0);
    const int n_pos = 90;
    for (size_t si = 0; si < CAIRN_ARRAY_LEN(shapes); si++)
        for (size_t di = 0; di < CAIRN_ARRAY_LEN(dts); di++) {
            problem_t p;
            problem_init(&p, shapes[si][0], shapes[si][1], shapes[si][2], n_pos, dts[di]);
            const size_t n_out = (size_t)n_pos * p.n_heads * p.hd;
            float *ref = malloc(n_out * sizeof(float)), *a = malloc(n_out * sizeof(float));
            float *b = malloc(n_out * sizeof(float));
            const float scale = 1.0f / sqrtf(256.0f) * 3.0f;
            for (size_t wi = 0; wi < CAIRN_ARRAY_LEN(windows); wi++)
                for (size_t ci = 0; ci < CAIRN_ARRAY_LEN(caps); ci++) {
                    const int W = windows[wi];
                    reference(&p, W, scale, caps[ci], ref);
                    p.st.run = n_pos;
                    run(&p, tp1, W, scale, caps[ci], 0, n_pos, a);
                    double worst = 0;
                    for (size_t i = 0; i < n_out; i++)
                        worst = fmax(worst, fabs((double)a[i] - ref[i]));
                    assert_true(worst < 2e-5);

                    /* Each query alone, with everything below its window released and K/V
                     * in runs of 1 or 16, on 3 threads: same bits, nothing refused. */
                    for (int t = 0; t < n_pos; t++) {
                        p.st.lowest_allowed = W > 0 && t - W + 1 > 0 ? t - W + 1 : 0;
                        p.st.run = t % 2 ? 1 : 16;
                        run(&p, t % 3 ? tp3 : tp1, W, scale, caps[ci], t, t + 1, b);
                    }
                    p.st.lowest_allowed = 0;
                    assert_int_equal(p.st.refused, 0);
                    assert_memory_equal(a, b, n_out * sizeof(float));
                }
            /* No window, no cap, the engine's scale: the engine's canonical attention. */
            attn_cfg_t e = {p.n_heads, p.n_kv_heads, p.hd, p.dt, NULL, 1, n_pos};
            e.scratch = malloc(attn_scratch_floats(p.n_heads, p.n_kv_heads, p.hd, n_pos) * sizeof(float));
            attn_query_t *qs = malloc((size_t)n_pos * sizeof *qs);
            for (int t = 0; t < n_pos; t++)
                qs[t] = (attn_query_t){p.q + (size_t)t * p.n_heads * p.hd,
                                       ref + (size_t)t * p.n_heads * p.hd, &p.kv, t};
            p.st.run = 16;
            attn_forward(NULL, &e, 0, qs, n_pos);
            run(&p, tp1, 0, 1.0f / sqrtf((float)p.hd), 0.0f, 0, n_pos, a);
            assert_memory_equal(a, ref, n_out * sizeof(float));
            free(qs);
            free(e.scratch);
            free(ref);
            free(a);
            free(b);
            problem_fini(&p);
        }
    cairn_thread_pool_destroy(tp1);
    cairn_thread_pool_destroy(tp3);
}

int main(void)
{
    kern_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gelu_tanh),
        cmocka_unit_test(test_attention_vs_reference_and_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
