/*
 * short_conv.c — LFM2's causal depthwise short convolution (contract in short_conv.h).
 *
 * Products and sums are separate statements so that no compiler contracts them into a
 * fused multiply-add (clang's -ffp-contract=on fuses within one expression): the order
 * and rounding of short_conv.h hold in every build. The channel loops vectorize without
 * changing a bit (each lane does the scalar sequence of one channel).
 */
#include <string.h>

#include "compute/cpu/kernels.h"
#include "compute/cpu/short_conv.h"

void short_conv_step(float *out, float *state, const float *in, const float *taps, int C, int L)
{
    const int S = L - 1; /* state rows */
    const float *s0 = S > 0 ? state : in;
    for (int c = 0; c < C; c++)
        out[c] = taps[c] * s0[c];
    for (int k = 1; k < L; k++) {
        const float *sk = k < S ? state + (size_t)k * C : in, *wk = taps + (size_t)k * C;
        for (int c = 0; c < C; c++) {
            const float p = wk[c] * sk[c];
            out[c] = out[c] + p;
        }
    }
    if (S > 0) {
        memmove(state, state + C, (size_t)(S - 1) * C * sizeof(float));
        memcpy(state + (size_t)(S - 1) * C, in, (size_t)C * sizeof(float));
    }
}

static float tap(const void *w, cairn_dtype_t wt, size_t i)
{
    switch (wt) {
    case CAIRN_DTYPE_F32:
        return ((const float *)w)[i];
    case CAIRN_DTYPE_F16:
        return kern_f16_to_f32(((const uint16_t *)w)[i]);
    case CAIRN_DTYPE_BF16:
        return kern_bf16_to_f32(((const uint16_t *)w)[i]);
    }
    CAIRN_ASSERT(!"unknown dtype");
    return 0;
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
