/*
 * delta_rule_impl.h — private: the SIMD renditions of the Gated DeltaNet kernels
 * (compute/cpu/x86/delta_rule_x86.c), each bit-identical to the scalar code of
 * delta_rule.c (the order is delta_rule.h's contract). Only call one after kern_init found
 * the instruction set it names.
 */
#ifndef CAIRN_COMPUTE_CPU_DELTA_RULE_IMPL_H
#define CAIRN_COMPUTE_CPU_DELTA_RULE_IMPL_H

#include "compute/cpu/delta_rule.h"

/* out[c] of dr_conv_step, without the state shift. */
void dr__conv_avx512(float *out, const float *state, const float *x, const float *w, int C, int K);
void dr__conv_avx2(float *out, const float *state, const float *x, const float *w, int C, int K);
void dr__delta_avx512(float *S, const float *q, const float *k, const float *v, float decay,
                      float beta, int dk, int dv, float *o);
void dr__delta_avx2(float *S, const float *q, const float *k, const float *v, float decay,
                    float beta, int dk, int dv, float *o);

#endif
