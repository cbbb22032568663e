/*
 * attention.c — causal grouped-query attention, written once for every K/V path.
 *
 * Model: query head h reads K/V head h / (n_heads / n_kv_heads). For a query at position
 * p the span is positions 0..p of its sequence, fetched through the attn_kv_t accessor in
 * runs of contiguous rows.
 *
 * Invariant (determinism): a (query, head) pair is reduced start to end by one task in a
 * fixed order — scores by increasing position, max, exp-sum by increasing position, then
 * the weighted V rows by increasing position — with kernels whose reduction order depends
 * only on head_dim. Nothing depends on the thread count, on the other queries in the call,
 * or on where the rows live, so flat, paged, chunked and batched runs agree bit for bit.
 *
 * Thread-safety: each task writes only its own scratch row and its own output heads.
 */
#include <math.h>
#include <string.h>

#include "engine/attention.h"
#include "engine/kernels.h"

typedef struct {
    const attn_cfg_t *cfg;
    int layer;
    const attn_query_t *queries;
    int n_queries;
} attn_job_t;

/* One (query, head) pair: out_h [head_dim] = sum_p softmax(s)_p * v_p[kvh]. */
static void attend_head(const attn_cfg_t *cfg, int layer, const attn_query_t *qr, int h,
                        float *scores)
{
    const int hd = cfg->head_dim;
    const int kvh = h / (cfg->n_heads / cfg->n_kv_heads);
    const size_t esz = cairn_dtype_size(cfg->kv_dtype);
    const size_t row_bytes = (size_t)cfg->n_kv_heads * hd * esz; /* one position's K (or V) */
    const size_t head_off = (size_t)kvh * hd * esz;
    const float scale = 1.0f / sqrtf((float)hd);
    const float *q = qr->q + (size_t)h * hd;
    float *out = qr->out + (size_t)h * hd;
    const int n = qr->pos + 1;

    /* Pass 1: scores, by increasing position. */
    float max = -INFINITY;
    for (int p = 0; p < n;) {
        void *k, *v;
        int run = qr->kv->rows(qr->kv->ctx, layer, p, &k, &v);
        CAIRN_ASSERT(run > 0);
        if (run > n - p)
            run = n - p;
        const unsigned char *krow = (const unsigned char *)k + head_off;
        for (int i = 0; i < run; i++, krow += row_bytes) {
            float s = kern_dot(q, krow, cfg->kv_dtype, hd) * scale;
            scores[p + i] = s;
            if (s > max)
                max = s;
        }
        p += run;
    }

    /* Pass 2: softmax in float32, the exp-sum in order. */
    float sum = 0.0f;
    for (int p = 0; p < n; p++) {
        scores[p] = expf(scores[p] - max);
        sum += scores[p];
    }
    const float inv = 1.0f / sum;

    /* Pass 3: probabilities times V, by increasing position. */
    memset(out, 0, (size_t)hd * sizeof(float));
    for (int p = 0; p < n;) {
        void *k, *v;
        int run = qr->kv->rows(qr->kv->ctx, layer, p, &k, &v);
        if (run > n - p)
            run = n - p;
        const unsigned char *vrow = (const unsigned char *)v + head_off;
        for (int i = 0; i < run; i++, vrow += row_bytes)
            kern_axpy(out, scores[p + i] * inv, vrow, cfg->kv_dtype, hd);
        p += run;
    }
}

/* Task t takes the pairs u = t, t + n_tasks, ...: interleaving balances causal spans. */
static void attn_task(void *ctx, int task, int n_tasks)
{
    const attn_job_t *job = ctx;
    const attn_cfg_t *cfg = job->cfg;
    float *scores = cfg->scratch + (size_t)task * cfg->max_positions;
    const int units = job->n_queries * cfg->n_heads;
    for (int u = task; u < units; u += n_tasks)
        attend_head(cfg, job->layer, &job->queries[u / cfg->n_heads], u % cfg->n_heads, scores);
}

void attn_forward(cairn_thread_pool_t *tp, const attn_cfg_t *cfg, int layer,
                  const attn_query_t *queries, int n_queries)
{
    for (int i = 0; i < n_queries; i++)
        CAIRN_ASSERT(queries[i].pos < cfg->max_positions);
    attn_job_t job = {cfg, layer, queries, n_queries};
    int n_tasks = cfg->n_slots;
    int units = n_queries * cfg->n_heads;
    if (n_tasks > units)
        n_tasks = units;
    if (n_tasks < 1)
        return;
    cairn_thread_pool_run(tp, attn_task, &job, n_tasks);
}
