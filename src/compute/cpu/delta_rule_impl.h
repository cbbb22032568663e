/*
 * delta_rule_impl.h — private to the CPU backend: the delta_rule op over a kernel table,
 * and the SIMD renditions of the gated delta step (compute/cpu/x86/delta_rule_x86.c),
 * each bit-identical to the scalar code of delta_rule.c (the order is delta_rule.h's
 * contract). Only call a rendition after kern_init found the instruction set it names.
 */
#ifndef CAIRN_COMPUTE_CPU_DELTA_RULE_IMPL_H
#define CAIRN_COMPUTE_CPU_DELTA_RULE_IMPL_H

#include "compute/cpu/delta_rule.h"
#include "compute/cpu/kernels_impl.h"

/*
 * The backend op compute_delta_rule (backend.h) on kernel table k: n consecutive tokens of
 * one sequence, q, k [n][Hk][dk], v, out [n][Hv][dv], g, beta [n][Hv], state [Hv][dk][dv].
 * Per token and value head h (key head h / (Hv / Hk)): q and k of the key head are
 * L2-normalised (x * (1 / sqrtf(sum x^2 + 1e-6)), the sum in the canonical order), q is
 * then scaled by dk^-0.5 (float32), and k->delta_step runs with decay = expf(g). One pool
 * task per value head walks the tokens in order, so the bits do not depend on the thread
 * count or on n. dk <= DR_MAX_DK, dv <= DR_MAX_DV.
 */
void dr__rule(const kern_impl_t *k, cairn_thread_pool_t *tp, float *out, const float *q,
              const float *kk, const float *v, const float *g, const float *beta, int n,
              int n_k_heads, int n_v_heads, int dk, int dv, float *state);

void dr__delta_avx512(float *S, const float *q, const float *k, const float *v, float decay,
                      float beta, int dk, int dv, float *o);
void dr__delta_avx2(float *S, const float *q, const float *k, const float *v, float decay,
                    float beta, int dk, int dv, float *o);

#endif
