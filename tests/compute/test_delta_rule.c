/*
 * Gated DeltaNet on the CPU backend (compute/cpu/delta_rule.h, backend.h's delta_rule op):
 * the scalar delta step against a double-precision evaluation of its definition over a
 * long random run; the op (L2 norms, q scale, exp of the log-decay, GQA head mapping) on
 * every implementation the CPU can run against the scalar backend, memcmp, for head
 * widths with and without vector tails, and fed in chunks vs all at once vs on 2 threads;
 * the op against its definition written out with the scalar step.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/backend.h"
#include "compute/cpu/delta_rule.h"
#include "compute/cpu/kernels.h"
#include "util/thread_pool.h"

static const char *const impls[] = {"scalar", "avx2", "avx512-emubf16", "avx512"};

static uint64_t rng = 12345;
static float rnd(void)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)(rng >> 40) / (float)(1 << 24) - 0.5f;
}

/* Random op inputs for T tokens: q, k [T][Hk][dk], v [T][Hv][dv], g (log decay) and
 * beta [T][Hv]. */
typedef struct {
    int T, Hk, Hv, dk, dv;
    float *q, *k, *v, *g, *beta;
} rule_in_t;

static void rule_in(rule_in_t *in, int T, int Hk, int Hv, int dk, int dv)
{
    *in = (rule_in_t){T, Hk, Hv, dk, dv, malloc((size_t)T * Hk * dk * 4), malloc((size_t)T * Hk * dk * 4),
                      malloc((size_t)T * Hv * dv * 4), malloc((size_t)T * Hv * 4), malloc((size_t)T * Hv * 4)};
    rng = 777;
    for (int i = 0; i < T * Hk * dk; i++)
        in->q[i] = rnd(), in->k[i] = rnd();
    for (int i = 0; i < T * Hv * dv; i++)
        in->v[i] = 4 * rnd();
    for (int i = 0; i < T * Hv; i++)
        in->g[i] = -1.5f * (rnd() + 0.5f), in->beta[i] = 0.5f + rnd();
}

static void rule_in_free(rule_in_t *in)
{
    free(in->q), free(in->k), free(in->v), free(in->g), free(in->beta);
}

static compute_backend_t *backend(const char *impl, int threads)
{
    compute_backend_options_t o = {threads, NULL, impl};
    compute_backend_t *be = NULL;
    char err[128];
    assert_int_equal(compute_backend_create("cpu", &o, &be, err, sizeof(err)), CAIRN_OK);
    return be;
}

/* The op over the tokens in pieces of `chunk` (0: all at once) from a zero state; out
 * [T][Hv][dv] and the final state [Hv][dk][dv]. */
static void run_rule(compute_backend_t *be, const rule_in_t *in, int chunk, float *out, float *S)
{
    memset(S, 0, (size_t)in->Hv * in->dk * in->dv * 4);
    for (int t = 0; t < in->T;) {
        int n = chunk && chunk < in->T - t ? chunk : in->T - t;
        compute_delta_rule(be, out + (size_t)t * in->Hv * in->dv, in->q + (size_t)t * in->Hk * in->dk,
                           in->k + (size_t)t * in->Hk * in->dk, in->v + (size_t)t * in->Hv * in->dv,
                           in->g + (size_t)t * in->Hv, in->beta + (size_t)t * in->Hv, n, in->Hk, in->Hv,
                           in->dk, in->dv, S);
        t += n;
    }
}

static void test_rule_implementations_agree(void **state)
{
    (void)state;
    static const int shapes[][4] = {{2, 4, 32, 32}, {1, 1, 128, 128}, {2, 2, 32, 48}, {1, 3, 16, 20},
                                    {2, 2, 8, 7}, {1, 1, 3, 200}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        rule_in_t in;
        rule_in(&in, 23, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3]);
        const size_t on = (size_t)in.T * in.Hv * in.dv, sn = (size_t)in.Hv * in.dk * in.dv;
        float *o0 = malloc(on * 4), *S0 = malloc(sn * 4), *o1 = malloc(on * 4), *S1 = malloc(sn * 4);
        compute_backend_t *ref = backend("scalar", 1);
        run_rule(ref, &in, 0, o0, S0);
        /* Chunks of 1 and 5 on the scalar backend, then every implementation on 2 threads. */
        static const int chunks[] = {1, 5};
        for (int c = 0; c < 2; c++) {
            run_rule(ref, &in, chunks[c], o1, S1);
            assert_memory_equal(o0, o1, on * 4);
            assert_memory_equal(S0, S1, sn * 4);
        }
        compute_backend_destroy(ref);
        for (size_t i = 0; i < sizeof(impls) / sizeof(impls[0]); i++) {
            if (!kern_impl_available(impls[i]))
                continue;
            compute_backend_t *be = backend(impls[i], 2);
            run_rule(be, &in, 7, o1, S1);
            assert_memory_equal(o0, o1, on * 4);
            assert_memory_equal(S0, S1, sn * 4);
            compute_backend_destroy(be);
        }
        free(o0), free(S0), free(o1), free(S1);
        rule_in_free(&in);
    }
}

/* The op is its definition: per value head, the key head h / (Hv / Hk), q and k
 * L2-normalised, q scaled by dk^-0.5, decay expf(g), then the scalar step. */
static void test_rule_definition(void **state)
{
    (void)state;
    rule_in_t in;
    rule_in(&in, 9, 2, 6, 16, 24);
    const size_t on = (size_t)in.T * in.Hv * in.dv, sn = (size_t)in.Hv * in.dk * in.dv;
    float *o0 = malloc(on * 4), *S0 = malloc(sn * 4), *o1 = malloc(on * 4), *S1 = calloc(sn, 4);
    compute_backend_t *be = backend("scalar", 1);
    run_rule(be, &in, 0, o0, S0);
    compute_backend_destroy(be);
    for (int t = 0; t < in.T; t++)
        for (int h = 0; h < in.Hv; h++) {
            const int kh = h / 3;
            float q[16], k[16];
            double qs = 0, ks = 0;
            for (int i = 0; i < 16; i++) {
                q[i] = in.q[(t * 2 + kh) * 16 + i], k[i] = in.k[(t * 2 + kh) * 16 + i];
                qs += (double)q[i] * q[i], ks += (double)k[i] * k[i];
            }
            for (int i = 0; i < 16; i++)
                q[i] = (float)(q[i] / sqrt(qs + 1e-6)) * 0.25f, k[i] = (float)(k[i] / sqrt(ks + 1e-6));
            dr_ref_delta_step(S1 + (size_t)h * 16 * 24, q, k, in.v + ((size_t)t * 6 + h) * 24,
                              expf(in.g[t * 6 + h]), in.beta[t * 6 + h], 16, 24, o1 + ((size_t)t * 6 + h) * 24);
        }
    for (size_t i = 0; i < on; i++)
        assert_true(fabsf(o0[i] - o1[i]) <= 1e-5f * (1 + fabsf(o1[i])));
    /* A head's state after the run differs from every other head's: the mapping matters. */
    assert_memory_not_equal(S0, S0 + 16 * 24, 16 * 24 * 4);
    free(o0), free(S0), free(o1), free(S1);
    rule_in_free(&in);
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
    rng = 99;
    double max_err = 0;
    for (int t = 0; t < T; t++) {
        float q[DK], k[DK], v[DV], o[DV];
        for (int i = 0; i < DK; i++)
            q[i] = rnd(), k[i] = rnd();
        for (int j = 0; j < DV; j++)
            v[j] = 4 * rnd();
        double qs = 0, ks = 0; /* unit q and k keep the run a contraction */
        for (int i = 0; i < DK; i++)
            qs += (double)q[i] * q[i], ks += (double)k[i] * k[i];
        for (int i = 0; i < DK; i++)
            q[i] = (float)(q[i] / sqrt(qs)), k[i] = (float)(k[i] / sqrt(ks));
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

int main(void)
{
    kern_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delta_matches_definition),
        cmocka_unit_test(test_rule_implementations_agree),
        cmocka_unit_test(test_rule_definition),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
