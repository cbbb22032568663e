/*
 * delta_rule.h — the CPU kernel of Gated DeltaNet (Qwen3.5's linear-attention layers):
 * one token of the gated delta rule for one value head, the scalar reference of the
 * kernel table's delta_step (kernels_impl.h) behind the backend's delta_rule op
 * (backend.h). (The causal conv of its q/k/v channels is the backend's short_conv.)
 *
 * Order of operations (the determinism contract). Every kernel works on one token of one
 * sequence, and each output element is computed by a fixed sequence of float32 operations
 * that depends only on the dimensions:
 *   - delta: S[i][j] = S[i][j] * decay for every i, j; then u[j] = sum over i ascending
 *     of fma(S[i][j], k[i], .) from 0; d[j] = (v[j] - u[j]) * beta; S[i][j] =
 *     fma(k[i], d[j], S[i][j]); o[j] = sum over i ascending of fma(S[i][j], q[i], .) from 0.
 * The reductions run over the row index i while lanes run over j, so there is no
 * horizontal sum: a vector implementation of any width gives the scalar bits exactly, and
 * one token at a time or a whole prompt give the same bits.
 *
 * Thread-safety: pure functions of their arguments (the state is the caller's).
 */
#ifndef CAIRN_COMPUTE_CPU_DELTA_RULE_H
#define CAIRN_COMPUTE_CPU_DELTA_RULE_H

#include "cairn/common.h"

/* Largest value head dimension the kernels take (Qwen3.5 uses 128). */
#define DR_MAX_DV 1024
/* Largest key head dimension the backend op takes. */
#define DR_MAX_DK 1024

/*
 * One token of the gated delta rule for one value head, in place on S [dk][dv]:
 *   S = decay * S;  d = beta * (v - S^T k);  S = S + k d^T;  o = S^T q
 * q [dk] (normalised and scaled), k [dk] (normalised), v [dv], o [dv] (must not alias).
 * decay = exp(g) in [0, 1]; dv <= DR_MAX_DV. The scalar reference: the kernel table of
 * every implementation either points here or to a rendition with the same bits.
 */
void dr_ref_delta_step(float *S, const float *q, const float *k, const float *v, float decay,
                       float beta, int dk, int dv, float *o);

#endif
