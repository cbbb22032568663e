/*
 * attention.c — causal grouped-query attention, written once for every K/V path.
 *
 * Model: query head h reads K/V head h / G, G = n_heads / n_kv_heads. For a query at
 * position p the span is positions 0..p of its sequence, fetched through the attn_kv_t
 * accessor in runs of contiguous rows.
 *
 * Work is cut into units of (tile, K/V head). A tile is up to `tq` consecutive queries of
 * one sequence; its rows are the G heads of each of those queries (G * tq <= TILE_ROWS
 * when G allows). For each block of KEY_BLOCK keys the unit widens the K rows of its K/V
 * head to f32 once and scores every row against them; then it runs the softmax of every
 * row; then it widens the V rows once per block and accumulates every row. So a K/V row
 * is read once per tile instead of once per (query, head).
 *
 * Invariant (determinism): every row follows the canonical order of attention_impl.h,
 * whose steps depend only on the row's position and head_dim: scores in blocks of 16
 * keys aligned to position 0, the max and exp-sum in 16 lanes over the same blocks, the
 * V rows by increasing position. Tiles only decide which rows share a widened K/V block,
 * never what is added to what, so flat, paged, chunked, batched and decode runs agree bit
 * for bit. The implementation (generic, AVX2 or AVX-512) follows the kernels' choice
 * (kern_impl_name) and all give the same bits.
 *
 * Thread-safety: unit u runs on task u % n_tasks; each task writes only its own scratch
 * slot and the output heads of its units.
 */
#include <math.h>
#include <string.h>

#include "compute/cpu/attention_impl.h"

enum {
    TILE_ROWS = 32, /* rows (query x head) per tile: bounds the score rows of one unit */
    KEY_BLOCK = 64, /* keys widened to f32 at a time (a multiple of 16) */
};

/* ---- the generic implementation: the canonical order spelled out ------------------- */

static void gen_to_f32(float *dst, const void *src, size_t stride, int rows, cairn_dtype_t t, int n)
{
    for (int r = 0; r < rows; r++)
        kern_row_to_f32(dst + (size_t)r * n, (const unsigned char *)src + (size_t)r * stride, t, n);
}

static void gen_scores16(float *s, const float *q, const float *kb, int hd, float scale)
{
    /* kern_dot follows the canonical dot order in every kernel implementation. */
    for (int k = 0; k < 16; k++)
        s[k] = kern_dot(q, kb + (size_t)k * hd, CAIRN_DTYPE_F32, hd) * scale;
}

static inline float max2(float a, float b) { return a > b ? a : b; }

static float gen_softmax(float *s, int n)
{
    float a[16], b[8], c[4], d[2];
    for (int j = 0; j < 16; j++)
        a[j] = -INFINITY;
    for (int k = 0; k < n; k += 16)
        for (int j = 0; j < 16; j++)
            a[j] = max2(a[j], k + j < n ? s[k + j] : -INFINITY);
    for (int j = 0; j < 8; j++)
        b[j] = max2(a[j], a[j + 8]);
    for (int j = 0; j < 4; j++)
        c[j] = max2(b[j], b[j + 4]);
    for (int j = 0; j < 2; j++)
        d[j] = max2(c[j], c[j + 2]);
    const float m = max2(d[0], d[1]);

    for (int j = 0; j < 16; j++)
        a[j] = 0.0f;
    for (int k = 0; k < n; k += 16)
        for (int j = 0; j < 16; j++) {
            float e = 0.0f; /* the padding adds +0 */
            if (k + j < n) {
                e = kern__exp(s[k + j] - m);
                s[k + j] = e;
            }
            a[j] = a[j] + e;
        }
    for (int j = 0; j < 8; j++)
        b[j] = a[j] + a[j + 8];
    for (int j = 0; j < 4; j++)
        c[j] = b[j] + b[j + 4];
    for (int j = 0; j < 2; j++)
        d[j] = c[j] + c[j + 2];
    return d[0] + d[1];
}

static void gen_pv(float *acc, int lda, const float *p, int ldp, int rows, int cnt,
                   const float *vb, int hd)
{
    for (int r = 0; r < rows; r++) {
        float *a = acc + (size_t)r * lda;
        for (int j = 0; j < cnt; j++) {
            const float pj = p[(size_t)r * ldp + j], *v = vb + (size_t)j * hd;
            for (int d = 0; d < hd; d++)
                a[d] = fmaf(pj, v[d], a[d]);
        }
    }
}

const attn_impl_t attn__generic = {"generic", gen_to_f32, gen_scores16, gen_softmax, gen_pv};

/* ---- the tiled driver -------------------------------------------------------------- */

typedef struct {
    const attn_cfg_t *cfg;
    const attn_impl_t *im;
    int layer;
    const attn_query_t *queries;
    int n_queries;
    int tq; /* queries per tile */
} attn_job_t;

static int group_size(const attn_cfg_t *cfg) { return cfg->n_heads / cfg->n_kv_heads; }

static int tile_queries(int n_heads, int n_kv_heads)
{
    int g = n_heads / n_kv_heads;
    return g >= TILE_ROWS ? 1 : TILE_ROWS / g;
}

/* Score row stride: the span rounded up to whole key blocks. */
static size_t score_stride(int max_positions)
{
    return ((size_t)max_positions + KEY_BLOCK - 1) / KEY_BLOCK * KEY_BLOCK;
}

size_t attn_scratch_floats(int n_heads, int n_kv_heads, int head_dim, int max_positions)
{
    size_t rows = (size_t)tile_queries(n_heads, n_kv_heads) * (size_t)(n_heads / n_kv_heads);
    /* scores [rows][stride], sums [rows], K/V block [KEY_BLOCK][hd], accumulators [rows][hd] */
    return rows * score_stride(max_positions) + rows + (size_t)KEY_BLOCK * head_dim +
           rows * (size_t)head_dim;
}

/*
 * Widens the K (or V) rows [k0, k0 + nk) of K/V head kvh into buf [KEY_BLOCK][hd], and
 * zeroes the rows after them up to the next multiple of 16 (scores16 reads whole groups).
 */
static void load_block(const attn_job_t *job, const attn_kv_t *kv, int k0, int nk, int kvh,
                       bool want_v, float *buf)
{
    const attn_cfg_t *cfg = job->cfg;
    const int hd = cfg->head_dim;
    const size_t esz = cairn_dtype_size(cfg->kv_dtype);
    const size_t row_bytes = (size_t)cfg->n_kv_heads * hd * esz; /* one position's K (or V) */
    const size_t head_off = (size_t)kvh * hd * esz;
    for (int i = 0; i < nk;) {
        void *k, *v;
        int run = kv->rows(kv->ctx, job->layer, k0 + i, &k, &v);
        CAIRN_ASSERT(run > 0);
        if (run > nk - i)
            run = nk - i;
        const unsigned char *src = (const unsigned char *)(want_v ? v : k) + head_off;
        job->im->to_f32(buf + (size_t)i * hd, src, row_bytes, run, cfg->kv_dtype, hd);
        i += run;
    }
    int padded = (nk + 15) / 16 * 16;
    memset(buf + (size_t)nk * hd, 0, (size_t)(padded - nk) * hd * sizeof(float));
}

/* One unit: queries [q0, q1) of one sequence, K/V head kvh. Row r = t * G + g is query
 * q0 + t, head kvh * G + g. */
static void attend_tile(const attn_job_t *job, int q0, int q1, int kvh, float *slot)
{
    const attn_cfg_t *cfg = job->cfg;
    const attn_impl_t *im = job->im;
    const int hd = cfg->head_dim, G = group_size(cfg), nt = q1 - q0, rows = nt * G;
    const size_t ld = score_stride(cfg->max_positions);
    const size_t max_rows = (size_t)job->tq * G;
    float *S = slot;                  /* [max_rows][ld] scores, then e_j */
    float *sums = S + max_rows * ld;  /* [max_rows] */
    float *kvbuf = sums + max_rows;   /* [KEY_BLOCK][hd] */
    float *acc = kvbuf + (size_t)KEY_BLOCK * hd; /* [max_rows][hd] */
    const float scale = 1.0f / sqrtf((float)hd);
    const attn_query_t *qs = job->queries + q0;
    const attn_kv_t *kv = qs[0].kv;

    int span = 0;
    for (int t = 0; t < nt; t++)
        if (qs[t].pos + 1 > span)
            span = qs[t].pos + 1;

    /* Scores, in groups of 16 keys aligned to position 0. */
    for (int k0 = 0; k0 < span; k0 += KEY_BLOCK) {
        const int nk = span - k0 < KEY_BLOCK ? span - k0 : KEY_BLOCK;
        load_block(job, kv, k0, nk, kvh, false, kvbuf);
        for (int t = 0; t < nt; t++) {
            const int pos = qs[t].pos;
            for (int g = 0; g < G; g++) {
                const float *q = qs[t].q + (size_t)(kvh * G + g) * hd;
                float *s = S + (size_t)(t * G + g) * ld;
                for (int j = k0; j <= pos && j < k0 + nk; j += 16)
                    im->scores16(s + j, q, kvbuf + (size_t)(j - k0) * hd, hd, scale);
            }
        }
    }

    for (int r = 0; r < rows; r++)
        sums[r] = im->softmax(S + (size_t)r * ld, qs[r / G].pos + 1);

    /* Probabilities times V, by increasing position; a query's G rows share one count. */
    memset(acc, 0, (size_t)rows * hd * sizeof(float));
    for (int k0 = 0; k0 < span; k0 += KEY_BLOCK) {
        const int nk = span - k0 < KEY_BLOCK ? span - k0 : KEY_BLOCK;
        load_block(job, kv, k0, nk, kvh, true, kvbuf);
        for (int t = 0; t < nt; t++) {
            int cnt = qs[t].pos + 1 - k0;
            if (cnt <= 0)
                continue;
            if (cnt > nk)
                cnt = nk;
            im->pv(acc + (size_t)t * G * hd, hd, S + (size_t)t * G * ld + k0, (int)ld, G, cnt,
                   kvbuf, hd);
        }
    }

    for (int t = 0; t < nt; t++)
        for (int g = 0; g < G; g++) {
            float *out = qs[t].out + (size_t)(kvh * G + g) * hd;
            const float *a = acc + (size_t)(t * G + g) * hd;
            const float l = sums[t * G + g];
            for (int d = 0; d < hd; d++)
                out[d] = a[d] / l;
        }
}

/* The end of the tile that starts at query q0. */
static int tile_end(const attn_job_t *job, int q0)
{
    int q1 = q0 + 1;
    while (q1 < job->n_queries && q1 - q0 < job->tq && job->queries[q1].kv == job->queries[q0].kv)
        q1++;
    return q1;
}

static void attn_task(void *ctx, int task, int n_tasks)
{
    const attn_job_t *job = ctx;
    const attn_cfg_t *cfg = job->cfg;
    float *slot = cfg->scratch + (size_t)task * attn_scratch_floats(cfg->n_heads, cfg->n_kv_heads,
                                                                     cfg->head_dim, cfg->max_positions);
    int u = 0;
    for (int q0 = 0, q1; q0 < job->n_queries; q0 = q1) {
        q1 = tile_end(job, q0);
        for (int kvh = 0; kvh < cfg->n_kv_heads; kvh++, u++)
            if (u % n_tasks == task)
                attend_tile(job, q0, q1, kvh, slot);
    }
}

void attn_forward(cairn_thread_pool_t *tp, const attn_cfg_t *cfg, int layer,
                  const attn_query_t *queries, int n_queries)
{
    for (int i = 0; i < n_queries; i++)
        CAIRN_ASSERT(queries[i].pos < cfg->max_positions);
    attn_job_t job = {cfg, &attn__generic, layer, queries, n_queries,
                      tile_queries(cfg->n_heads, cfg->n_kv_heads)};
    const char *kname = kern_impl_name();
    if (!strncmp(kname, "avx512", 6))
        job.im = &attn__avx512;
    else if (!strcmp(kname, "avx2"))
        job.im = &attn__avx2;

    int units = 0;
    for (int q0 = 0; q0 < n_queries; q0 = tile_end(&job, q0))
        units += cfg->n_kv_heads;
    int n_tasks = cfg->n_slots < units ? cfg->n_slots : units;
    if (n_tasks < 1)
        return;
    cairn_thread_pool_run(tp, attn_task, &job, n_tasks);
}
