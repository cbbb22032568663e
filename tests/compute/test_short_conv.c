/*
 * The CPU backend's short convolution (src/compute/cpu/short_conv.h, LFM2's conv layers):
 * for every tap count, the rows of a sequence fed in one call, one row at a time, or in
 * uneven chunks give the same bits as the whole-sequence convolution form; the state holds
 * exactly the last L-1 inputs; both agree with a float64 evaluation of the formula (an
 * independent check of indices and tap order, within rounding); and the op reached through
 * the backend interface is this kernel.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/backend.h"
#include "compute/cpu/kernels.h"
#include "compute/cpu/short_conv.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

enum { T = 37, C = 150 }; /* C: two full blocks of 64 channels and a partial one */

static void check_taps(int L)
{
    static uint16_t w[C * 8];
    static float in[T * C], ref[T * C], out[T * C], state[8 * C];
    for (int i = 0; i < C * L; i++)
        w[i] = kern_f32_to_bf16(frand());
    for (int i = 0; i < T * C; i++)
        in[i] = frand();
    short_conv_ref(ref, in, T, w, CAIRN_DTYPE_BF16, C, L);
    /* One call, one row at a time, uneven chunks: all equal the reference. */
    static const int patterns[3][5] = {{T}, {1}, {5, 1, 2, 13, 16}};
    for (size_t k = 0; k < CAIRN_ARRAY_LEN(patterns); k++) {
        int np = 0;
        while (np < 5 && patterns[k][np])
            np++;
        memset(state, 0, sizeof state);
        for (int t = 0, i = 0; t < T; i++) {
            int len = patterns[k][i % np];
            if (len > T - t)
                len = T - t;
            short_conv_rows(out + t * C, in + t * C, len, w, CAIRN_DTYPE_BF16, C, L, state);
            t += len;
        }
        assert_memory_equal(out, ref, sizeof out);
        /* The state is the last L-1 inputs, oldest first. */
        if (L > 1)
            assert_memory_equal(state, in + (T - (L - 1)) * C, (size_t)(L - 1) * C * sizeof(float));
    }
    /* Independent float64 evaluation of out_t[c] = sum_k w[c][k] in[t-L+1+k][c]. */
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            double acc = 0;
            for (int k = 0; k < L; k++)
                if (t - L + 1 + k >= 0)
                    acc += (double)kern_bf16_to_f32(w[c * L + k]) * in[(t - L + 1 + k) * C + c];
            assert_true(fabs(acc - out[t * C + c]) <= 1e-5 * (1 + fabs(acc)));
        }
}

static void test_chunking_equals_convolution(void **st)
{
    (void)st;
    for (int L = 1; L <= 6; L++)
        check_taps(L);
}

/* A checkpoint: the state copied out at a split and restored into a fresh buffer. */
static void test_state_carries_across_calls(void **st)
{
    (void)st;
    enum { N = 20, L = 3 };
    static float w[C * L], in[N * C], a[N * C], b[N * C], s1[(L - 1) * C], s2[(L - 1) * C];
    for (int i = 0; i < C * L; i++)
        w[i] = frand();
    for (int i = 0; i < N * C; i++)
        in[i] = frand();
    memset(s1, 0, sizeof s1);
    short_conv_rows(a, in, N, w, CAIRN_DTYPE_F32, C, L, s1);
    for (int split = 1; split < N; split++) {
        float saved[(L - 1) * C];
        memset(s2, 0, sizeof s2);
        short_conv_rows(b, in, split, w, CAIRN_DTYPE_F32, C, L, s2);
        memcpy(saved, s2, sizeof saved);
        memset(s2, 0x7f, sizeof s2);
        memcpy(s2, saved, sizeof saved);
        short_conv_rows(b + split * C, in + split * C, N - split, w, CAIRN_DTYPE_F32, C, L, s2);
        assert_memory_equal(a, b, sizeof a);
        assert_memory_equal(s1, s2, sizeof s1);
    }
}

/* compute_short_conv on the CPU backend is this kernel, for every plain weight type. */
static void test_backend_op(void **st)
{
    (void)st;
    compute_backend_t *be = NULL;
    char err[128];
    assert_int_equal(compute_backend_create("cpu", NULL, &be, err, sizeof err), 0);
    static const cairn_dtype_t types[] = {CAIRN_DTYPE_F32, CAIRN_DTYPE_F16, CAIRN_DTYPE_BF16};
    enum { L = 3, N = 9 };
    static float in[N * C], a[N * C], b[N * C], sa[(L - 1) * C], sb[(L - 1) * C], wf[C * L];
    static uint16_t wh[C * L];
    for (int i = 0; i < N * C; i++)
        in[i] = frand();
    for (size_t k = 0; k < CAIRN_ARRAY_LEN(types); k++) {
        assert_true(compute_supports(be, COMPUTE_OP_SHORT_CONV, types[k]));
        for (int i = 0; i < C * L; i++) {
            wf[i] = frand();
            wh[i] = types[k] == CAIRN_DTYPE_F16 ? kern_f32_to_f16(wf[i]) : kern_f32_to_bf16(wf[i]);
        }
        const void *w = types[k] == CAIRN_DTYPE_F32 ? (const void *)wf : (const void *)wh;
        memset(sa, 0, sizeof sa);
        memset(sb, 0, sizeof sb);
        short_conv_rows(a, in, N, w, types[k], C, L, sa);
        compute_short_conv(be, b, in, N, (compute_mat_t){w, types[k], C, L}, sb);
        assert_memory_equal(a, b, sizeof a);
        assert_memory_equal(sa, sb, sizeof sa);
    }
    compute_backend_destroy(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunking_equals_convolution),
        cmocka_unit_test(test_state_carries_across_calls),
        cmocka_unit_test(test_backend_op),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
