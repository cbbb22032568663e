/*
 * Gated DeltaNet kernels (compute/cpu/delta_rule.h): the scalar delta step against a
 * double-precision evaluation of its definition over a long random run; every
 * implementation the CPU can run against the scalar one, memcmp, for row widths with and
 * without vector tails; the conv step against the causal convolution it defines (state
 * shifting one row per token), likewise memcmp across implementations; l2norm.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/cpu/delta_rule.h"
#include "compute/cpu/kernels.h"

static const char *const impls[] = {"scalar", "avx2", "avx512-emubf16", "avx512"};

static uint64_t rng = 12345;
static float rnd(void)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)(rng >> 40) / (float)(1 << 24) - 0.5f;
}

/* T tokens through a head of dk x dv; returns the outputs [T][dv] and leaves S. */
static void run_delta(const char *impl, int dk, int dv, int T, float *S, float *outs)
{
    assert_int_equal(kern_set_impl(impl), CAIRN_OK);
    rng = 777;
    memset(S, 0, (size_t)dk * dv * sizeof(float));
    float *q = malloc((size_t)dk * 4), *k = malloc((size_t)dk * 4), *v = malloc((size_t)dv * 4);
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < dk; i++)
            q[i] = rnd(), k[i] = rnd();
        for (int j = 0; j < dv; j++)
            v[j] = 4 * rnd();
        dr_l2norm(q, dk, 1e-6f);
        dr_l2norm(k, dk, 1e-6f);
        float decay = 0.55f + rnd() * 0.9f, beta = 0.5f + rnd();
        dr_delta_step(S, q, k, v, decay, beta, dk, dv, outs + (size_t)t * dv);
    }
    free(q);
    free(k);
    free(v);
}

static void test_delta_implementations_agree(void **state)
{
    (void)state;
    static const int shapes[][2] = {{32, 128}, {128, 128}, {32, 48}, {16, 20}, {8, 7}, {3, 200}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int dk = shapes[s][0], dv = shapes[s][1], T = 40;
        float *S0 = malloc((size_t)dk * dv * 4), *o0 = malloc((size_t)T * dv * 4);
        float *S1 = malloc((size_t)dk * dv * 4), *o1 = malloc((size_t)T * dv * 4);
        run_delta("scalar", dk, dv, T, S0, o0);
        for (size_t i = 1; i < sizeof(impls) / sizeof(impls[0]); i++) {
            if (!kern_impl_available(impls[i]))
                continue;
            run_delta(impls[i], dk, dv, T, S1, o1);
            assert_memory_equal(o0, o1, (size_t)T * dv * 4);
            assert_memory_equal(S0, S1, (size_t)dk * dv * 4);
        }
        free(S0), free(o0), free(S1), free(o1);
    }
    kern_set_impl("scalar");
}

/* The scalar kernel against S = decay S; d = beta (v - S^T k); S += k d^T; o = S^T q in
 * double precision. */
static void test_delta_matches_definition(void **state)
{
    (void)state;
    enum { DK = 32, DV = 48, T = 300 };
    static float S[DK * DV];
    static double Sd[DK * DV];
    memset(S, 0, sizeof(S));
    memset(Sd, 0, sizeof(Sd));
    assert_int_equal(kern_set_impl("scalar"), CAIRN_OK);
    rng = 99;
    double max_err = 0;
    for (int t = 0; t < T; t++) {
        float q[DK], k[DK], v[DV], o[DV];
        for (int i = 0; i < DK; i++)
            q[i] = rnd(), k[i] = rnd();
        for (int j = 0; j < DV; j++)
            v[j] = 4 * rnd();
        dr_l2norm(q, DK, 1e-6f);
        dr_l2norm(k, DK, 1e-6f);
        float decay = 0.55f + rnd() * 0.9f, beta = 0.5f + rnd();
        dr_ref_delta_step(S, q, k, v, decay, beta, DK, DV, o);
        double d[DV];
        for (int j = 0; j < DV; j++) {
            double kv = 0;
            for (int i = 0; i < DK; i++)
                kv += (Sd[i * DV + j] *= decay) * k[i];
            d[j] = beta * (v[j] - kv);
        }
        for (int j = 0; j < DV; j++) {
            double oj = 0;
            for (int i = 0; i < DK; i++) {
                Sd[i * DV + j] += (double)k[i] * d[j];
                oj += Sd[i * DV + j] * q[i];
            }
            max_err = fmax(max_err, fabs(oj - o[j]) / (1 + fabs(oj)));
        }
    }
    assert_true(max_err < 1e-4);
}

static void test_l2norm(void **state)
{
    (void)state;
    float x[37];
    double ss = 0;
    for (int i = 0; i < 37; i++)
        x[i] = (float)(i - 18) * 0.25f, ss += (double)x[i] * x[i];
    float y[37];
    memcpy(y, x, sizeof(x));
    dr_l2norm(y, 37, 1e-6f);
    for (int i = 0; i < 37; i++)
        assert_true(fabs(y[i] - x[i] / sqrt(ss + 1e-6)) < 1e-6);
    float z[5] = {0};
    dr_l2norm(z, 5, 1e-6f); /* eps keeps a zero vector finite */
    for (int i = 0; i < 5; i++)
        assert_true(z[i] == 0.0f);
}

/* Causal conv over T tokens of C channels, K taps: out_t[c] = sum_j w[j][c] x_{t-K+1+j}[c]. */
static void run_conv(const char *impl, int C, int K, int T, const float *w, const float *x,
                     float *outs)
{
    assert_int_equal(kern_set_impl(impl), CAIRN_OK);
    float *st = calloc((size_t)(K > 1 ? K - 1 : 1) * C, sizeof(float));
    for (int t = 0; t < T; t++)
        dr_conv_step(outs + (size_t)t * C, st, x + (size_t)t * C, w, C, K);
    free(st);
}

static void test_conv(void **state)
{
    (void)state;
    static const int shapes[][2] = {{5, 4}, {256, 4}, {6144, 4}, {37, 3}, {16, 1}, {40, 7}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int C = shapes[s][0], K = shapes[s][1], T = 11;
        float *w = malloc((size_t)K * C * 4), *x = malloc((size_t)T * C * 4);
        float *o0 = malloc((size_t)T * C * 4), *o1 = malloc((size_t)T * C * 4);
        rng = 5;
        for (int i = 0; i < K * C; i++)
            w[i] = rnd();
        for (int i = 0; i < T * C; i++)
            x[i] = rnd();
        run_conv("scalar", C, K, T, w, x, o0);
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                double want = 0;
                for (int j = 0; j < K; j++) {
                    int src = t - (K - 1) + j;
                    if (src >= 0)
                        want += (double)w[(size_t)j * C + c] * x[(size_t)src * C + c];
                }
                assert_true(fabs(want - o0[(size_t)t * C + c]) < 1e-5);
            }
        for (size_t i = 1; i < sizeof(impls) / sizeof(impls[0]); i++) {
            if (!kern_impl_available(impls[i]))
                continue;
            run_conv(impls[i], C, K, T, w, x, o1);
            assert_memory_equal(o0, o1, (size_t)T * C * 4);
        }
        free(w), free(x), free(o0), free(o1);
    }
    kern_set_impl("scalar");
}

int main(void)
{
    kern_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delta_matches_definition),
        cmocka_unit_test(test_delta_implementations_agree),
        cmocka_unit_test(test_l2norm),
        cmocka_unit_test(test_conv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
