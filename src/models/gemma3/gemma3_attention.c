/*
 * gemma3_attention.c — causal GQA attention over a window, with a score scale and an
 * optional tanh soft cap: the scalar reference of what Gemma 3 needs from the backend.
 *
 * Model: query head h reads K/V head h / G (G = n_heads / n_kv_heads). A query at
 * position p attends keys [lo, p] with lo = max(0, p - W + 1) for a window W (W = 0: the
 * whole prefix), which is HF's sliding mask (kv > q - W). K/V rows come through the
 * attn_kv_t accessor; nothing below lo is ever read, so a paged sliding layer may have
 * released those blocks (their table entries are the null block).
 *
 * Invariant (determinism): every (query, head) row is reduced by one task in an order
 * that depends only on p, W and head_dim (gemma3.h, gemma3_attention); with W = 0 and no
 * cap it is the canonical order of engine/attention_impl.h, so a window only removes
 * keys, it never reorders the others.
 *
 * Thread-safety: unit u = (query, K/V head) runs on task u % n_tasks; each task writes
 * its own scratch slot and its units' output heads.
 */
#include <math.h>
#include <string.h>

#include "compute/cpu/kernels_impl.h"
#include "models/gemma3/gemma3.h"

typedef struct {
    const gemma3_attn_cfg_t *a;
    int layer, window;
    const gemma3_query_t *queries;
    int n_queries;
} job_t;

static int group(const gemma3_attn_cfg_t *a) { return a->n_heads / a->n_kv_heads; }

size_t gemma3_attn_scratch_floats(const gemma3_attn_cfg_t *a)
{
    /* scores [G][max_positions], accumulators [G][hd], one widened V row [hd] */
    const size_t G = (size_t)group(a);
    return G * (size_t)a->max_positions + G * (size_t)a->head_dim + (size_t)a->head_dim;
}

static inline float max2(float x, float y) { return x > y ? x : y; }

/* The fixed tree of kernels_impl.h over 16 lanes, with op = max or +. */
static float tree16(const float *l, bool is_max)
{
    float b[8], c[4], d[2];
    for (int j = 0; j < 8; j++)
        b[j] = is_max ? max2(l[j], l[j + 8]) : l[j] + l[j + 8];
    for (int j = 0; j < 4; j++)
        c[j] = is_max ? max2(b[j], b[j + 4]) : b[j] + b[j + 4];
    for (int j = 0; j < 2; j++)
        d[j] = is_max ? max2(c[j], c[j + 2]) : c[j] + c[j + 2];
    return is_max ? max2(d[0], d[1]) : d[0] + d[1];
}

/* Query qi, K/V head kvh: the G rows of that group. */
static void attend(const job_t *job, int qi, int kvh, float *slot)
{
    const gemma3_attn_cfg_t *a = job->a;
    const gemma3_query_t *qr = &job->queries[qi];
    const int hd = a->head_dim, G = group(a), p = qr->pos;
    const int lo = job->window > 0 && p - job->window + 1 > 0 ? p - job->window + 1 : 0;
    const size_t esz = cairn_dtype_size(a->kv_dtype), head_off = (size_t)kvh * hd * esz;
    float *S = slot;                                  /* [G][max_positions], key j at j - lo */
    float *acc = S + (size_t)G * a->max_positions;    /* [G][hd] */
    float *vrow = acc + (size_t)G * hd;               /* [hd] */

    const size_t row_bytes = (size_t)a->n_kv_heads * hd * esz; /* one position's K (or V) */

    /* Scores. */
    for (int j = lo; j <= p;) {
        void *k, *v;
        int run = qr->kv->rows(qr->kv->ctx, job->layer, j, &k, &v);
        CAIRN_ASSERT(run > 0);
        for (int r = 0; r < run && j <= p; r++, j++) {
            const unsigned char *krow = (const unsigned char *)k + (size_t)r * row_bytes + head_off;
            for (int g = 0; g < G; g++) {
                float s = kern_dot(qr->q + (size_t)(kvh * G + g) * hd, krow, a->kv_dtype, hd) * a->scale;
                if (a->softcap > 0)
                    s = tanhf(s / a->softcap) * a->softcap;
                S[(size_t)g * a->max_positions + (j - lo)] = s;
            }
        }
    }

    /* Softmax per row: 16 lanes by absolute position, the fixed tree. */
    float sums[64];
    CAIRN_ASSERT(G <= 64);
    for (int g = 0; g < G; g++) {
        float *s = S + (size_t)g * a->max_positions, lane[16];
        for (int l = 0; l < 16; l++)
            lane[l] = -INFINITY;
        for (int j = lo; j <= p; j++)
            lane[j % 16] = max2(lane[j % 16], s[j - lo]);
        const float m = tree16(lane, true);
        for (int l = 0; l < 16; l++)
            lane[l] = 0.0f;
        for (int j = lo; j <= p; j++) {
            const float e = kern__exp(s[j - lo] - m);
            s[j - lo] = e;
            lane[j % 16] = lane[j % 16] + e;
        }
        sums[g] = tree16(lane, false);
    }

    /* Probabilities times V by increasing position. */
    memset(acc, 0, (size_t)G * hd * sizeof(float));
    for (int j = lo; j <= p;) {
        void *k, *v;
        int run = qr->kv->rows(qr->kv->ctx, job->layer, j, &k, &v);
        CAIRN_ASSERT(run > 0);
        for (int r = 0; r < run && j <= p; r++, j++) {
            kern_row_to_f32(vrow, (const unsigned char *)v + (size_t)r * row_bytes + head_off,
                            a->kv_dtype, hd);
            for (int g = 0; g < G; g++) {
                const float e = S[(size_t)g * a->max_positions + (j - lo)];
                float *ac = acc + (size_t)g * hd;
                for (int d = 0; d < hd; d++)
                    ac[d] = fmaf(e, vrow[d], ac[d]);
            }
        }
    }
    for (int g = 0; g < G; g++) {
        float *out = qr->out + (size_t)(kvh * G + g) * hd;
        const float *ac = acc + (size_t)g * hd;
        for (int d = 0; d < hd; d++)
            out[d] = ac[d] / sums[g];
    }
}

static void task(void *ctx, int t, int n_tasks)
{
    const job_t *job = ctx;
    const gemma3_attn_cfg_t *a = job->a;
    float *slot = a->scratch + (size_t)t * gemma3_attn_scratch_floats(a);
    const int units = job->n_queries * a->n_kv_heads;
    for (int u = t; u < units; u += n_tasks)
        attend(job, u / a->n_kv_heads, u % a->n_kv_heads, slot);
}

void gemma3_attention(cairn_thread_pool_t *tp, const gemma3_attn_cfg_t *a, int layer, int window,
                      const gemma3_query_t *queries, int n_queries)
{
    for (int i = 0; i < n_queries; i++)
        CAIRN_ASSERT(queries[i].pos >= 0 && queries[i].pos < a->max_positions);
    job_t job = {a, layer, window, queries, n_queries};
    const int units = n_queries * a->n_kv_heads;
    const int n_tasks = a->n_slots < units ? a->n_slots : units;
    if (n_tasks >= 1)
        cairn_thread_pool_run(tp, task, &job, n_tasks);
}
