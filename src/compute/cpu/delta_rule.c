/*
 * delta_rule.c — the scalar Gated DeltaNet kernels (the references every faster version
 * is held to), the backend's delta_rule op over a kernel table, and the conv step's
 * dispatch. The order of operations is the contract of delta_rule.h; fmaf() spells out
 * each fused multiply-add so a vector version reproduces it exactly. The conv step follows
 * the process's kernel implementation (kern_impl_name(): "avx512*", "avx2" or "scalar",
 * so CAIRN_KERNELS and kern_set_impl() switch it too); the op uses the table it is given
 * (the backend object's). Every choice gives the same bits.
 *
 * Thread-safety: pure functions; the op fans out on the pool it is given.
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

/* x = x * (1 / sqrt(sum x^2 + eps)) (HF / FLA l2norm), the sum in the canonical order. */
static void l2norm(const kern_impl_t *k, float *x, int n, float eps)
{
    float inv = 1.0f / sqrtf(k->sumsq(x, n) + eps); /* torch.rsqrt on CPU is 1 / sqrt */
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
