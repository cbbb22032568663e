/*
 * compute/cpu/short_conv.h — the causal depthwise short convolution of LFM2's conv
 * layers, as a per-token recurrence (a backend op of the CPU backend).
 *
 * A conv layer convolves each channel c of its gated input s_t with L taps:
 *
 *     out_t[c] = sum_{k < L} w[k][c] * s_{t-L+1+k}[c]        (s_j = 0 for j < 0)
 *
 * Its state after token t is the last L-1 inputs s_{t-L+2..t} (oldest first). Order of
 * the sum, fixed for every implementation: acc = w[0] s_0, then acc = acc + w[k] s_k for
 * k = 1 .. L-1, every product and every sum rounded to float32 (no fused multiply-add).
 * Because the recurrence and the whole-sequence form (short_conv_ref) perform exactly
 * these operations, one token at a time and a whole prompt at once give the same bits.
 *
 * Thread-safety: pure functions of their arguments.
 */
#ifndef CAIRN_COMPUTE_CPU_SHORT_CONV_H
#define CAIRN_COMPUTE_CPU_SHORT_CONV_H

#include "cairn/common.h"

/*
 * One token: out [C] = the convolution of (state rows, in) with taps [L][C] (float32,
 * tap-major), then state [L-1][C] drops its oldest row and appends in. out must not alias
 * state or in; in may not alias state. L >= 1 (L == 1: no state, out = w[0] * in).
 */
void short_conv_step(float *out, float *state, const float *in, const float *taps, int C, int L);

/*
 * Reference: the convolution form over a whole zero-padded sequence, straight from the
 * checkpoint's weight layout. in, out: [T][C] (no aliasing); w: [C][1][L] of type wt (the
 * HF nn.Conv1d depthwise weight). Same operations, in the same order, as T calls of
 * short_conv_step from a zero state.
 */
void short_conv_ref(float *out, const float *in, int T, const void *w, cairn_dtype_t wt, int C,
                    int L);

#endif
