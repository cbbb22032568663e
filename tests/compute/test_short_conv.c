/*
 * The short convolution of LFM2 (src/compute/cpu/short_conv.h): the per-token recurrence
 * gives the same bits as the whole-sequence convolution form for every tap count, the
 * state holds exactly the last L-1 inputs, and both agree with a float64 evaluation of
 * the formula (an independent check of indices and tap order, within rounding).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/cpu/kernels.h"
#include "compute/cpu/short_conv.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Recurrence over T tokens (from a zero state) vs the convolution form, for tap count L;
 * weights in bf16 as the checkpoints store them. */
static void check_taps(int L)
{
    enum { T = 37, C = 48 };
    uint16_t w[C * 8];
    float taps[8 * C], in[T * C], ref[T * C], out[T * C], state[8 * C];
    for (int c = 0; c < C; c++)
        for (int k = 0; k < L; k++) {
            w[c * L + k] = kern_f32_to_bf16(frand());
            taps[k * C + c] = kern_bf16_to_f32(w[c * L + k]);
        }
    for (int i = 0; i < T * C; i++)
        in[i] = frand();
    short_conv_ref(ref, in, T, w, CAIRN_DTYPE_BF16, C, L);
    memset(state, 0, sizeof state);
    for (int t = 0; t < T; t++)
        short_conv_step(out + t * C, state, in + t * C, taps, C, L);
    assert_memory_equal(out, ref, sizeof out);
    /* The state is the last L-1 inputs, oldest first. */
    if (L > 1)
        assert_memory_equal(state, in + (T - (L - 1)) * C, (size_t)(L - 1) * C * sizeof(float));
    /* Independent float64 evaluation of out_t[c] = sum_k w[c][k] in[t-L+1+k][c]. */
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            double acc = 0;
            for (int k = 0; k < L; k++)
                if (t - L + 1 + k >= 0)
                    acc += (double)taps[k * C + c] * in[(t - L + 1 + k) * C + c];
            assert_true(fabs(acc - out[t * C + c]) <= 1e-5 * (1 + fabs(acc)));
        }
}

static void test_recurrence_equals_convolution(void **st)
{
    (void)st;
    for (int L = 1; L <= 6; L++)
        check_taps(L);
}

/* Splitting a sequence at any point and carrying the state gives the same bits. */
static void test_state_carries_across_calls(void **st)
{
    (void)st;
    enum { T = 20, C = 16, L = 3 };
    float taps[L * C], in[T * C], a[T * C], b[T * C], s1[(L - 1) * C], s2[(L - 1) * C];
    for (int i = 0; i < L * C; i++)
        taps[i] = frand();
    for (int i = 0; i < T * C; i++)
        in[i] = frand();
    memset(s1, 0, sizeof s1);
    for (int t = 0; t < T; t++)
        short_conv_step(a + t * C, s1, in + t * C, taps, C, L);
    for (int split = 1; split < T; split++) {
        float saved[(L - 1) * C];
        memset(s2, 0, sizeof s2);
        for (int t = 0; t < split; t++)
            short_conv_step(b + t * C, s2, in + t * C, taps, C, L);
        memcpy(saved, s2, sizeof saved); /* a checkpoint: restore into a fresh buffer */
        memset(s2, 0x7f, sizeof s2);
        memcpy(s2, saved, sizeof saved);
        for (int t = split; t < T; t++)
            short_conv_step(b + t * C, s2, in + t * C, taps, C, L);
        assert_memory_equal(a, b, sizeof a);
        assert_memory_equal(s1, s2, sizeof s1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recurrence_equals_convolution),
        cmocka_unit_test(test_state_carries_across_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
