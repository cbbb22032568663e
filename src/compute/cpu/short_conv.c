/*
 * short_conv.c — LFM2's causal depthwise short convolution on the CPU (short_conv.h).
 *
 * Channels are independent, so the rows are processed a block of 64 channels at a time:
 * the block's taps are widened to f32 once (64 x L floats on the stack), then every row
 * of the call, then the block's state. Products and sums are separate statements so that
 * no compiler contracts them into a fused multiply-add (clang's -ffp-contract=on fuses
 * within one expression): the order and rounding of short_conv.h hold in every build.
 */
#include <string.h>

#include "compute/cpu/kernels.h"
#include "compute/cpu/short_conv.h"

#define BLOCK 64

/* xs_i[c] of the call: state row i for i < L-1, else row i - (L-1) of x. */
static inline float xs_at(const float *state, const float *x, int C, int L, int i, int c)
{
    return i < L - 1 ? state[(size_t)i * C + c] : x[(size_t)(i - (L - 1)) * C + c];
}

void short_conv_rows(float *out, const float *x, int n, const void *w, cairn_dtype_t wt, int C,
                     int L, float *state)
{
    CAIRN_ASSERT(L >= 1 && L <= SHORT_CONV_MAX_TAPS && n >= 0);
    const size_t es = cairn_dtype_size(wt);
    float taps[BLOCK * SHORT_CONV_MAX_TAPS]; /* [c - c0][j] */
    for (int c0 = 0; c0 < C; c0 += BLOCK) {
        const int nc = C - c0 < BLOCK ? C - c0 : BLOCK;
        kern_row_to_f32(taps, (const unsigned char *)w + (size_t)c0 * L * es, wt, nc * L);
        for (int t = 0; t < n; t++) {
            float *o = out + (size_t)t * C;
            for (int c = c0; c < c0 + nc; c++) {
                const float *tc = taps + (size_t)(c - c0) * L;
                float acc = tc[0] * xs_at(state, x, C, L, t, c);
                for (int j = 1; j < L; j++) {
                    const float p = tc[j] * xs_at(state, x, C, L, t + j, c);
                    acc = acc + p;
                }
                o[c] = acc;
            }
        }
        /* The new state: the last L-1 rows of xs, in increasing order (each read is at or
         * after the row it overwrites). */
        for (int i = 0; i < L - 1; i++)
            for (int c = c0; c < c0 + nc; c++)
                state[(size_t)i * C + c] = xs_at(state, x, C, L, n + i, c);
    }
}

static float tap(const void *w, cairn_dtype_t wt, size_t i)
{
    float v;
    kern_row_to_f32(&v, (const unsigned char *)w + i * cairn_dtype_size(wt), wt, 1);
    return v;
}

void short_conv_ref(float *out, const float *in, int T, const void *w, cairn_dtype_t wt, int C,
                    int L)
{
    for (int t = 0; t < T; t++) {
        for (int c = 0; c < C; c++) {
            float acc = 0;
            for (int k = 0; k < L; k++) {
                const int j = t - L + 1 + k;
                const float s = j >= 0 ? in[(size_t)j * C + c] : 0.0f;
                const float p = tap(w, wt, (size_t)c * L + k) * s;
                acc = k == 0 ? p : acc + p;
            }
            out[(size_t)t * C + c] = acc;
        }
    }
}
