/*
 * delta_rule.c — the scalar Gated DeltaNet kernels (the reference every faster version is
 * held to) and their dispatch. The order of operations is the contract of delta_rule.h;
 * fmaf() spells out each fused multiply-add so a vector version reproduces it exactly.
 * Dispatch follows the kernels' implementation choice (kern_impl_name(): "avx512*",
 * "avx2" or "scalar"), so CAIRN_KERNELS and kern_set_impl() switch these too; all give
 * the same bits.
 *
 * Thread-safety: pure functions.
 */
#include <math.h>
#include <string.h>

#include "compute/cpu/delta_rule_impl.h"
#include "compute/cpu/kernels.h"

typedef enum { DR_SCALAR, DR_AVX2, DR_AVX512 } dr_isa_t;

static dr_isa_t isa(void)
{
#ifdef CAIRN_HAVE_X86
    const char *n = kern_impl_name();
    if (!strncmp(n, "avx512", 6))
        return DR_AVX512;
    if (!strcmp(n, "avx2"))
        return DR_AVX2;
#endif
    return DR_SCALAR;
}

static void conv_scalar(float *out, const float *state, const float *x, const float *w, int C,
                        int K)
{
    for (int c = 0; c < C; c++) {
        float acc = 0.0f;
        for (int j = 0; j < K - 1; j++)
            acc = fmaf(w[(size_t)j * C + c], state[(size_t)j * C + c], acc);
        out[c] = fmaf(w[(size_t)(K - 1) * C + c], x[c], acc);
    }
}

void dr_conv_step(float *out, float *state, const float *x, const float *w, int C, int K)
{
    dr_isa_t i = isa();
#ifdef CAIRN_HAVE_X86
    if (i == DR_AVX512)
        dr__conv_avx512(out, state, x, w, C, K);
    else if (i == DR_AVX2)
        dr__conv_avx2(out, state, x, w, C, K);
    else
#endif
        conv_scalar(out, state, x, w, C, K);
    (void)i;
    if (K > 1) {
        memmove(state, state + C, (size_t)(K - 2) * C * sizeof(float));
        memcpy(state + (size_t)(K - 2) * C, x, (size_t)C * sizeof(float));
    }
}

void dr_l2norm(float *x, int n, float eps)
{
    float ss = kern_dot(x, x, CAIRN_DTYPE_F32, n);
    float inv = 1.0f / sqrtf(ss + eps); /* torch.rsqrt on CPU is 1 / sqrt */
    for (int i = 0; i < n; i++)
        x[i] = x[i] * inv;
}

void dr_ref_delta_step(float *S, const float *q, const float *k, const float *v, float decay,
                       float beta, int dk, int dv, float *o)
{
    /* o doubles as the kv accumulator, then as the output. */
    float *kv = o;
    for (int j = 0; j < dv; j++)
        kv[j] = 0.0f;
    for (int i = 0; i < dk; i++) {
        float *row = S + (size_t)i * dv;
        for (int j = 0; j < dv; j++) {
            row[j] = row[j] * decay;
            kv[j] = fmaf(row[j], k[i], kv[j]);
        }
    }
    /* d needs its own storage: o restarts from zero and accumulates S^T q row by row,
     * right after each row's update. */
    float d[DR_MAX_DV];
    CAIRN_ASSERT(dv <= DR_MAX_DV);
    for (int j = 0; j < dv; j++)
        d[j] = (v[j] - kv[j]) * beta;
    for (int j = 0; j < dv; j++)
        o[j] = 0.0f;
    for (int i = 0; i < dk; i++) {
        float *row = S + (size_t)i * dv;
        for (int j = 0; j < dv; j++) {
            row[j] = fmaf(k[i], d[j], row[j]);
            o[j] = fmaf(row[j], q[i], o[j]);
        }
    }
}

void dr_delta_step(float *S, const float *q, const float *k, const float *v, float decay,
                   float beta, int dk, int dv, float *o)
{
    dr_isa_t i = isa();
#ifdef CAIRN_HAVE_X86
    if (i == DR_AVX512)
        dr__delta_avx512(S, q, k, v, decay, beta, dk, dv, o);
    else if (i == DR_AVX2)
        dr__delta_avx2(S, q, k, v, decay, beta, dk, dv, o);
    else
#endif
        dr_ref_delta_step(S, q, k, v, decay, beta, dk, dv, o);
    (void)i;
}
