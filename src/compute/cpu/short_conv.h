/*
 * compute/cpu/short_conv.h — the causal depthwise short convolution of LFM2's conv
 * layers: the CPU backend's compute_short_conv (contract in compute/backend.h).
 *
 * A conv layer convolves each channel c of its gated input with L taps:
 *
 *     out_t[c] = sum_{j < L} w[c][j] * xs_{t+j}[c],   xs = state [L-1] then x [n]
 *
 * and afterwards the state holds the last L-1 rows of xs (oldest first; a fresh sequence
 * starts from zeros, HF's zero padding). Order of the sum, fixed for every n: acc =
 * w[c][0] xs_t, then acc = acc + w[c][j] xs_{t+j} for j = 1 .. L-1, every product and
 * every sum rounded to float32 (no fused multiply-add). A sequence fed in chunks of any
 * size therefore gives the same bits, and so does the whole-sequence convolution form
 * (short_conv_ref), which performs exactly these operations.
 *
 * Thread-safety: pure functions of their arguments.
 */
#ifndef CAIRN_COMPUTE_CPU_SHORT_CONV_H
#define CAIRN_COMPUTE_CPU_SHORT_CONV_H

#include "cairn/common.h"

#define SHORT_CONV_MAX_TAPS 64

/*
 * n consecutive rows x [n][C] of one sequence; w [C][L] of type wt (a plain element type:
 * f32, f16, bf16; HF conv.weight [C][1][L]); state [L-1][C] f32 in/out; out [n][C] must
 * not alias x or state. 1 <= L <= SHORT_CONV_MAX_TAPS.
 */
void short_conv_rows(float *out, const float *x, int n, const void *w, cairn_dtype_t wt, int C,
                     int L, float *state);

/*
 * Reference: the convolution form over a whole zero-padded sequence in [T][C] -> out
 * [T][C], straight from the weights, one output at a time.
 */
void short_conv_ref(float *out, const float *in, int T, const void *w, cairn_dtype_t wt, int C,
                    int L);

#endif
