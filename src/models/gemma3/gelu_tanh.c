/*
 * gelu_tanh.c — the gated GELU (tanh approximation) of the Gemma MLP, scalar reference.
 *
 * torch's gelu(approximate="tanh") is 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
 * Since 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)), this computes the same function as
 *     gelu_tanh(x) = x / (1 + exp(-2u))
 * with the canonical exp of the kernels (kern__exp), which has no cancellation where
 * tanh(u) is near -1 and needs no tanh. Operations, each rounded to float32 in this order:
 *     c = x * x; c = c * x; t = 0.044715f * c; t = x + t; u = kBeta * t;
 *     e = kern__exp(-2 * u); g = x / (1 + e); out = g * up
 * with kBeta = (float)(sqrt(2) * 2/sqrt(pi) * 0.5), torch's constant. A vector rendition
 * must follow the same steps (no fma contraction) to give the same bits.
 *
 * Pure; thread-safe.
 */
#include <math.h>

#include "compute/cpu/kernels_impl.h"
#include "models/gemma3/gemma3.h"

#define GELU_KAPPA 0.044715f
#define GELU_BETA ((float)(M_SQRT2 * M_2_SQRTPI * 0.5))

float gemma3_gelu_tanh(float x)
{
    float c = x * x;
    c = c * x;
    float t = GELU_KAPPA * c;
    t = x + t;
    const float u = GELU_BETA * t;
    const float e = kern__exp(-2.0f * u);
    return x / (1.0f + e);
}

void gemma3_gelu_tanh_mul(float *out, const float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = gemma3_gelu_tanh(gate[i]) * up[i];
}
