/*
 * delta_rule.c — the scalar gated delta step (the reference every faster version is held
 * to) and the backend's delta_rule op over a kernel table (the backend object's). The
 * order of operations is the contract of delta_rule.h; fmaf() spells out each fused
 * multiply-add so a vector version reproduces it exactly.
 *
 * Thread-safety: pure functions; the op fans out on the pool it is given.
 */
#include <math.h>
#include <string.h>

#include "compute/cpu/delta_rule_impl.h"

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

/* ---- the backend op ---- */

/* x = x * (1 / sqrt(sum x^2 + eps)) (HF / FLA l2norm), the sum in the canonical F32 dot
 * order (not RMSNorm's double sum: kernels_impl.h). */
static void l2norm(const kern_impl_t *k, float *x, int n, float eps)
{
    float inv = 1.0f / sqrtf(k->types[CAIRN_DTYPE_F32].dot(x, x, n) + eps); /* torch.rsqrt on CPU is 1 / sqrt */
    for (int i = 0; i < n; i++)
        x[i] = x[i] * inv;
}

typedef struct {
    const kern_impl_t *k;
    float *out;
    const float *q, *kk, *v, *g, *beta;
    int n, n_k_heads, n_v_heads, dk, dv;
    float *state;
    float scale;
} rule_job_t;

/* One value head over every token, in order. */
static void rule_task(void *ctx, int h, int n_tasks)
{
    (void)n_tasks;
    const rule_job_t *j = ctx;
    const int dk = j->dk, dv = j->dv, Hk = j->n_k_heads, Hv = j->n_v_heads;
    const int kh = h / (Hv / Hk);
    float *S = j->state + (size_t)h * dk * dv;
    float qn[DR_MAX_DK], kn[DR_MAX_DK];
    for (int t = 0; t < j->n; t++) {
        memcpy(qn, j->q + ((size_t)t * Hk + kh) * dk, (size_t)dk * sizeof(float));
        memcpy(kn, j->kk + ((size_t)t * Hk + kh) * dk, (size_t)dk * sizeof(float));
        l2norm(j->k, qn, dk, 1e-6f);
        l2norm(j->k, kn, dk, 1e-6f);
        for (int i = 0; i < dk; i++)
            qn[i] = qn[i] * j->scale;
        const size_t th = (size_t)t * Hv + h;
        j->k->delta_step(S, qn, kn, j->v + th * dv, expf(j->g[th]), j->beta[th], dk, dv,
                         j->out + th * dv);
    }
}

void dr__rule(const kern_impl_t *k, cairn_thread_pool_t *tp, float *out, const float *q,
              const float *kk, const float *v, const float *g, const float *beta, int n,
              int n_k_heads, int n_v_heads, int dk, int dv, float *state)
{
    CAIRN_ASSERT(n_k_heads > 0 && n_v_heads % n_k_heads == 0 && dk <= DR_MAX_DK && dv <= DR_MAX_DV);
    /* HF: query * (dk ** -0.5), the Python float rounded to float32. */
    rule_job_t job = {k, out, q, kk, v, g, beta, n, n_k_heads, n_v_heads, dk, dv, state,
                      (float)pow((double)dk, -0.5)};
    cairn_thread_pool_run(tp, rule_task, &job, n_v_heads);
}
