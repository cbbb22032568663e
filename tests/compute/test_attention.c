/*
 * Tests for attention (src/engine/attention.c): the tiled attention against a textbook
 * double-precision reference (tolerance), and its determinism as bit identity — every
 * query computed alone vs inside tiles of any alignment and order, K/V rows served in runs
 * of 1, 16 or all, 1 vs 3 threads, f32/bf16/f16/q8_0 K/V, and the generic vs the AVX2 and
 * AVX-512 implementations, for MHA, GQA and MQA shapes and a head_dim that is not a
 * multiple of 16.
 * The primitives are also held to their definitions: scores equal kern_dot * scale, and
 * the vector exp equals kern__exp.
 *
 * `test_attention --bench` instead times a 4K-token prefill tile of the 8-layer Llama shape
 * (8/2 heads x 64, bf16 K/V) against the former per-(query, key, head) kern_dot/kern_axpy
 * loop, in thread CPU time, in the same process.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <cmocka.h>

#include "compute/cpu/attention_impl.h"
#include "compute/quant_blocks.h"

static const char *const impls[] = {"scalar", "avx2", "avx512"};
/* The K/V types: the first N_FLOAT_DTYPES for every shape, then q8_0 (8-bit K/V, blocks of
 * 32: head_dim a multiple of 32). */
static const cairn_dtype_t dtypes_q8[] = {CAIRN_DTYPE_F32, CAIRN_DTYPE_BF16, CAIRN_DTYPE_F16, CAIRN_DTYPE_Q8_0};
#define N_FLOAT_DTYPES 3

/* The K/V types to run a shape of head_dim hd with: q8_0 too where its blocks fit. */
static size_t n_dtypes(int hd) { return hd % 32 ? N_FLOAT_DTYPES : CAIRN_ARRAY_LEN(dtypes_q8); }

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) { return (float)((int)(rnd32() % 2000001) - 1000000) * 1e-6f; }

/* ---- a K/V store with a configurable run length (flat = all, paged = 16, worst = 1) ---- */

typedef struct {
    unsigned char *k, *v; /* [n_pos][kv_dim] of dtype */
    size_t row_bytes;
    int n_pos, run;
    int null_lo, null_hi; /* positions [null_lo, null_hi) have no storage (a null block) */
    int floor;            /* no position below it may be asked for ... */
    int below_floor;      /* ... and how many times one was */
} store_t;

static int store_rows(void *ctx, int layer, int pos, void **k, void **v)
{
    store_t *s = ctx;
    (void)layer;
    if (pos < 0 || pos >= s->n_pos)
        return 0;
    if (pos < s->floor)
        s->below_floor++;
    if (pos >= s->null_lo && pos < s->null_hi) {
        *k = *v = NULL;
        return s->null_hi - pos;
    }
    *k = s->k + (size_t)pos * s->row_bytes;
    *v = s->v + (size_t)pos * s->row_bytes;
    int left = (pos < s->null_lo ? s->null_lo : s->n_pos) - pos, in_run = s->run - pos % s->run;
    return left < in_run ? left : in_run;
}

typedef struct {
    int n_heads, n_kv_heads, hd, n_pos;
    cairn_dtype_t dt;
    float *q;  /* [n_pos][n_heads * hd] */
    store_t st;
    attn_kv_t kv;
    float *kf, *vf; /* [n_pos][n_kv_heads * hd] the stored rows widened (the reference's) */
} problem_t;

static void problem_init(problem_t *p, int n_heads, int n_kv_heads, int hd, int n_pos, cairn_dtype_t dt)
{
    *p = (problem_t){n_heads, n_kv_heads, hd, n_pos, dt, NULL, {0}, {0}, NULL, NULL};
    const int q_dim = n_heads * hd, kv_dim = n_kv_heads * hd;
    p->q = malloc((size_t)n_pos * q_dim * sizeof(float));
    for (size_t i = 0; i < (size_t)n_pos * q_dim; i++)
        p->q[i] = 2.0f * rndf();
    p->st.row_bytes = cairn_dtype_row_bytes(dt, kv_dim);
    p->st.k = malloc((size_t)n_pos * p->st.row_bytes);
    p->st.v = malloc((size_t)n_pos * p->st.row_bytes);
    p->st.n_pos = n_pos;
    p->st.run = n_pos;
    p->kf = malloc((size_t)n_pos * kv_dim * sizeof(float));
    p->vf = malloc((size_t)n_pos * kv_dim * sizeof(float));
    float *row = malloc((size_t)kv_dim * sizeof(float));
    for (int pos = 0; pos < n_pos; pos++) {
        unsigned char *k = p->st.k + (size_t)pos * p->st.row_bytes, *v = p->st.v + (size_t)pos * p->st.row_bytes;
        for (int i = 0; i < kv_dim; i++)
            row[i] = 2.0f * rndf();
        kern_row_from_f32(k, dt, row, kv_dim);
        for (int i = 0; i < kv_dim; i++)
            row[i] = rndf();
        kern_row_from_f32(v, dt, row, kv_dim);
        kern_row_to_f32(p->kf + (size_t)pos * kv_dim, k, dt, kv_dim);
        kern_row_to_f32(p->vf + (size_t)pos * kv_dim, v, dt, kv_dim);
    }
    free(row);
    p->kv = (attn_kv_t){store_rows, &p->st};
}

static void problem_fini(problem_t *p)
{
    free(p->kf);
    free(p->vf);
    free(p->q);
    free(p->st.k);
    free(p->st.v);
}

/* Runs attention for the queries at positions pos[0..n) (in that order) into out, which
 * is indexed by position: out[pos][n_heads * hd]. */
static void run_attn(const problem_t *p, cairn_thread_pool_t *tp, const int *pos, int n, float *out)
{
    const int q_dim = p->n_heads * p->hd;
    const int slots = cairn_thread_pool_size(tp);
    attn_cfg_t cfg = {p->n_heads, p->n_kv_heads, p->hd, p->dt, NULL, slots, p->n_pos};
    cfg.scratch = malloc((size_t)slots * sizeof(float) *
                         attn_scratch_floats(p->n_heads, p->n_kv_heads, p->hd, p->n_pos));
    attn_query_t *qs = malloc((size_t)n * sizeof(*qs));
    for (int i = 0; i < n; i++)
        qs[i] = (attn_query_t){p->q + (size_t)pos[i] * q_dim, out + (size_t)pos[i] * q_dim, &p->kv, pos[i]};
    attn_forward(tp, &cfg, 0, qs, n);
    free(qs);
    free(cfg.scratch);
}

/* Element i of the stored K (k true) or V row at pos, widened. */
static double elem(const problem_t *p, bool k, int pos, int i)
{
    return (k ? p->kf : p->vf)[(size_t)pos * p->n_kv_heads * p->hd + i];
}

/* The query the attention multiplies with K: q itself, or with q8_0 K (step 1q of
 * attention_impl.h) q rounded to q8_0 and widened back. buf holds hd floats. */
static const float *ref_query(const problem_t *p, const float *q, float *buf)
{
    if (p->dt != CAIRN_DTYPE_Q8_0)
        return q;
    blk_q8_0_t b[128 / QK8_0];
    assert_true(p->hd <= 128);
    quant_q8_0_round_act(b, q, p->hd);
    quant_q8_0_to_f32(buf, b, p->hd);
    return buf;
}

/* The textbook formula in double for every position; against out (indexed by position). */
static void check_reference(const problem_t *p, const float *out)
{
    const int hd = p->hd, G = p->n_heads / p->n_kv_heads;
    double *s = malloc((size_t)p->n_pos * sizeof(double));
    float qbuf[128];
    for (int pos = 0; pos < p->n_pos; pos++)
        for (int h = 0; h < p->n_heads; h++) {
            const float *q = ref_query(p, p->q + ((size_t)pos * p->n_heads + h) * hd, qbuf);
            const int kvh = h / G;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j <= pos; j++) {
                double d = 0;
                for (int i = 0; i < hd; i++)
                    d += (double)q[i] * elem(p, true, j, kvh * hd + i);
                s[j] = d / sqrt((double)hd);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j <= pos; j++)
                sum += (s[j] = exp(s[j] - mx));
            for (int i = 0; i < hd; i++) {
                double o = 0;
                for (int j = 0; j <= pos; j++)
                    o += s[j] / sum * elem(p, false, j, kvh * hd + i);
                double got = out[((size_t)pos * p->n_heads + h) * hd + i];
                if (!(fabs(got - o) <= 2e-5 + 2e-5 * fabs(o))) {
                    fprintf(stderr, "pos %d head %d dim %d: got %.9g want %.9g\n", pos, h, i, got, o);
                    fail();
                }
            }
        }
    free(s);
}

static const int shapes[][4] = {
    /* n_heads, n_kv_heads, head_dim, positions */
    {8, 2, 64, 150},   /* Llama GQA, group 4 */
    {4, 2, 128, 97},   /* Qwen3 GQA, group 2 */
    {3, 3, 40, 70},    /* MHA, head_dim with a tail */
    {40, 1, 24, 45},   /* MQA with a group larger than a tile */
};

/* Every layout and order of the same queries gives the bits of each query alone. */
static void check_determinism(problem_t *p, cairn_thread_pool_t *tp1, cairn_thread_pool_t *tp3,
                              const float *alone)
{
    const int n = p->n_pos;
    const size_t bytes = (size_t)n * p->n_heads * p->hd * sizeof(float);
    float *out = malloc(bytes);
    int *pos = malloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++)
        pos[i] = i;
    const int runs[] = {1, 16, n};
    for (size_t ri = 0; ri < sizeof(runs) / sizeof(runs[0]); ri++) {
        p->st.run = runs[ri];
        /* All at once, 1 and 3 threads. */
        memset(out, 0xff, bytes);
        run_attn(p, tp1, pos, n, out);
        assert_memory_equal(out, alone, bytes);
        memset(out, 0xff, bytes);
        run_attn(p, tp3, pos, n, out);
        assert_memory_equal(out, alone, bytes);
        /* Chunks of 7 from an odd offset: every tile alignment. */
        memset(out, 0xff, bytes);
        run_attn(p, tp3, pos, 3, out);
        for (int i = 3; i < n; i += 7)
            run_attn(p, tp1, pos + i, n - i < 7 ? n - i : 7, out);
        assert_memory_equal(out, alone, bytes);
    }
    /* A shuffled order: tiles of non-consecutive positions. */
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rnd32() % (uint32_t)(i + 1)), t = pos[i];
        pos[i] = pos[j];
        pos[j] = t;
    }
    memset(out, 0xff, bytes);
    run_attn(p, tp3, pos, n, out);
    assert_memory_equal(out, alone, bytes);
    p->st.run = n;
    free(pos);
    free(out);
}

static void test_attention_all(void **state)
{
    (void)state;
    cairn_thread_pool_t *tp1 = NULL, *tp3 = NULL;
    assert_int_equal(cairn_thread_pool_create(1, &tp1), 0);
    assert_int_equal(cairn_thread_pool_create(3, &tp3), 0);
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
        /* q8_0 on the Qwen3 shape (the window and null-block tests take it on others) */
        for (size_t di = 0; di < (shapes[si][2] == 128 ? n_dtypes(128) : N_FLOAT_DTYPES); di++) {
            problem_t p;
            problem_init(&p, shapes[si][0], shapes[si][1], shapes[si][2], shapes[si][3], dtypes_q8[di]);
            const size_t bytes = (size_t)p.n_pos * p.n_heads * p.hd * sizeof(float);
            float *first = NULL;
            for (size_t ii = 0; ii < sizeof(impls) / sizeof(impls[0]); ii++) {
                if (!kern_impl_available(impls[ii]))
                    continue;
                assert_int_equal(kern_set_impl(impls[ii]), 0);
                /* Each query alone: the decode shape. */
                float *alone = malloc(bytes);
                for (int i = 0; i < p.n_pos; i++)
                    run_attn(&p, tp1, &i, 1, alone);
                if (!first) {
                    check_reference(&p, alone);
                    first = alone;
                } else {
                    assert_memory_equal(alone, first, bytes); /* every implementation */
                }
                check_determinism(&p, tp1, tp3, first);
                if (alone != first)
                    free(alone);
            }
            free(first);
            problem_fini(&p);
        }
    cairn_thread_pool_destroy(tp1);
    cairn_thread_pool_destroy(tp3);
    kern_set_impl(NULL);
    kern_init();
}

/* The primitives against their definitions (attention_impl.h), on awkward inputs. */
static void test_primitives(void **state)
{
    (void)state;
    /* Each implementation's primitives, as the kernel registry resolves them. */
    const attn_impl_t *ims[3] = {&attn__generic,
                                 kern_impl_available("avx2") ? kern__impl_by_name("avx2")->attn : NULL,
                                 kern_impl_available("avx512") ? kern__impl_by_name("avx512")->attn : NULL};
    const int hds[] = {16, 24, 64, 128};
    float q[128], kb[16 * 128], s[16];
    for (int m = 0; m < 3; m++) {
        if (!ims[m])
            continue;
        for (size_t hi = 0; hi < sizeof(hds) / sizeof(hds[0]); hi++) {
            const int hd = hds[hi];
            for (int rep = 0; rep < 20; rep++) {
                for (int i = 0; i < hd; i++)
                    q[i] = rndf() * (rep % 3 ? 1.0f : 1e-20f);
                for (int i = 0; i < 16 * hd; i++)
                    kb[i] = rndf();
                const float scale = 1.0f / sqrtf((float)hd);
                ims[m]->scores16(s, q, kb, hd, scale);
                for (int k = 0; k < 16; k++) {
                    float want = kern_dot(q, kb + (size_t)k * hd, CAIRN_DTYPE_F32, hd) * scale;
                    assert_memory_equal(&s[k], &want, sizeof(float));
                }
            }
        }
        /* The transposed scores (where the implementation has them): every row count
         * 1..9 (the 4-row blocks and each remainder), head_dim with and without a tail,
         * equal bit for bit to kern_dot * scale. */
        if (ims[m]->scores16_t) {
            const int hds_t[] = {16, 24, 40, 64, 128};
            enum { MAXR = 9, LDS = 19 };
            float qp[MAXR * 128], kt[128 * 16], st[MAXR * LDS];
            for (size_t hi = 0; hi < sizeof(hds_t) / sizeof(hds_t[0]); hi++) {
                const int hd = hds_t[hi], hdp = (hd + 15) / 16 * 16;
                for (int rows = 1; rows <= MAXR; rows++) {
                    for (int i = 0; i < 16 * hd; i++)
                        kb[i] = rndf();
                    memset(qp, 0, sizeof(qp));
                    for (int r = 0; r < rows; r++)
                        for (int i = 0; i < hd; i++)
                            qp[r * hdp + i] = rndf() * (r % 3 ? 1.0f : 1e-20f);
                    memset(kt, 0xff, sizeof(kt));
                    ims[m]->transpose16(kt, kb, hd);
                    for (int d = 0; d < hdp; d++)
                        for (int k = 0; k < 16; k++) {
                            float want = d < hd ? kb[k * hd + d] : 0.0f;
                            assert_memory_equal(&kt[d * 16 + k], &want, sizeof(float));
                        }
                    const float scale = 1.0f / sqrtf((float)hd);
                    ims[m]->scores16_t(st, LDS, qp, rows, kt, hdp, scale);
                    for (int r = 0; r < rows; r++)
                        for (int k = 0; k < 16; k++) {
                            float want = kern_dot(qp + r * hdp, kb + (size_t)k * hd, CAIRN_DTYPE_F32, hd) * scale;
                            assert_memory_equal(&st[r * LDS + k], &want, sizeof(float));
                        }
                }
            }
        }
        /* softmax: the exp of every score equals kern__exp, including far below the max
         * (underflow to +0), NaN-free ties, and every tail length. */
        float x[80], y[80], e[80];
        for (int n = 1; n <= 70; n++) {
            for (int i = 0; i < n; i++)
                x[i] = (i % 9 == 4) ? -200.0f + rndf() : 30.0f * rndf();
            x[n / 2] = x[0]; /* a tie */
            memcpy(y, x, sizeof(x));
            float l = ims[m]->softmax(y, n);
            float mx = -INFINITY;
            for (int i = 0; i < n; i++)
                mx = x[i] > mx ? x[i] : mx;
            for (int i = 0; i < n; i++) {
                e[i] = kern__exp(x[i] - mx);
                assert_memory_equal(&y[i], &e[i], sizeof(float));
            }
            float l2 = attn__generic.softmax(x, n);
            assert_memory_equal(&l, &l2, sizeof(float));
            assert_true(fabsf(l - 1.0f) <= (float)n); /* at least the max contributes 1 */
        }
    }
}

/*
 * Step 1q (q8_0 K) of every implementation against its definition: kern__qdot(Q8_0, key,
 * q8(q), hd, +0) * scale, bit for bit, for head_dim 32..128, every row count 1..9, keys
 * and queries at the int8 extremes (-128 in K, +-127 in q: the sign trick's worst case)
 * and blocks whose scales differ by orders of magnitude (a wrong block scale or a wrong
 * block order changes bits).
 */
static void test_q8_scores(void **state)
{
    (void)state;
    const attn_impl_t *ims[3] = {&attn__generic,
                                 kern_impl_available("avx2") ? kern__impl_by_name("avx2")->attn : NULL,
                                 kern_impl_available("avx512") ? kern__impl_by_name("avx512")->attn : NULL};
    enum { MAXR = 9, LDS = 21, NB = 4 };
    const int hds[] = {32, 64, 96, 128};
    blk_q8_0_t kb[16][NB], qb[MAXR][NB];
    int8_t kq[16 * 128], qq[MAXR * 128];
    float qd[MAXR * NB], kdt[NB * 16], s[MAXR * LDS];
    int32_t qsum[MAXR * NB], kt[32 * 16];
    float x[128];
    int tested = 0;
    for (int m = 0; m < 3; m++) {
        const attn_impl_t *im = ims[m];
        if (!im)
            continue;
        if (!im->scores_q8t || (im->q8_usable && !im->q8_usable()))
            im = &attn__generic; /* what the driver runs */
        for (size_t hi = 0; hi < sizeof(hds) / sizeof(hds[0]); hi++) {
            const int hd = hds[hi], nb = hd / QK8_0;
            for (int rows = 1; rows <= MAXR; rows++) {
                for (int k = 0; k < 16; k++) {
                    for (int i = 0; i < hd; i++) /* block scales 1e-3 .. 1e3 apart */
                        x[i] = rndf() * powf(10.0f, (float)((i / QK8_0 + k) % 7) - 3.0f);
                    quant_q8_0_round_act(kb[k], x, hd);
                    if (rows % 3 == 0)
                        for (int b = 0; b < nb; b++)
                            for (int i = 0; i < QK8_0; i++)
                                kb[k][b].q[i] = (i + k) % 2 ? -128 : 127; /* extremes */
                    for (int b = 0; b < nb; b++) {
                        memcpy(kq + k * hd + b * QK8_0, kb[k][b].q, QK8_0);
                        kdt[b * 16 + k] = compute_f16_to_f32(kb[k][b].d);
                    }
                }
                for (int r = 0; r < rows; r++) {
                    for (int i = 0; i < hd; i++)
                        x[i] = rndf() * powf(10.0f, (float)((i / QK8_0 * 3 + r) % 5) - 2.0f);
                    if (rows % 3 == 0)
                        for (int i = 0; i < hd; i++)
                            x[i] = (i + r) % 3 ? 1.0f : -1.0f; /* q = +-127 */
                    quant_q8_0_round_act(qb[r], x, hd);
                    for (int b = 0; b < nb; b++) {
                        memcpy(qq + r * hd + b * QK8_0, qb[r][b].q, QK8_0);
                        qd[r * nb + b] = compute_f16_to_f32(qb[r][b].d);
                    }
                    kern__q8_0_sums(qsum + r * nb, qb[r], nb);
                }
                memset(kt, 0xa5, sizeof(kt));
                im->q8_transpose16(kt, kq, hd);
                const float scale = 1.0f / sqrtf((float)hd);
                memset(s, 0xff, sizeof(s));
                im->scores_q8t(s, LDS, qq, qd, qsum, rows, kt, kdt, hd, scale);
                for (int r = 0; r < rows; r++)
                    for (int k = 0; k < 16; k++) {
                        float want = kern__qdot(CAIRN_DTYPE_Q8_0, kb[k], qb[r], hd, 0.0f) * scale;
                        if (memcmp(&s[r * LDS + k], &want, sizeof(float))) {
                            fprintf(stderr, "%s hd %d rows %d: row %d key %d: got %.9g want %.9g\n", im->name, hd,
                                    rows, r, k, (double)s[r * LDS + k], (double)want);
                            fail();
                        }
                    }
                tested++;
            }
        }
    }
    assert_true(tested >= 36);
}

/* ---- window, scale, soft-cap and positions without storage ---- */

typedef struct {
    attn_math_t m;
    const char *what;
} math_case_t;

static int lo_of(const attn_math_t *m, int pos) { return m->window > 0 && pos - m->window + 1 > 0 ? pos - m->window + 1 : 0; }

/* Runs the queries at pos[0..n) with math m on the process's implementation; the store
 * records any request below the lowest window start of the call. */
static void run_attn_math(problem_t *p, cairn_thread_pool_t *tp, const int *pos, int n, float *out,
                          const attn_math_t *m)
{
    const int q_dim = p->n_heads * p->hd;
    const int slots = cairn_thread_pool_size(tp);
    attn_cfg_t cfg = {p->n_heads, p->n_kv_heads, p->hd, p->dt, NULL, slots, p->n_pos};
    cfg.scratch = malloc((size_t)slots * sizeof(float) *
                         attn_scratch_floats(p->n_heads, p->n_kv_heads, p->hd, p->n_pos));
    attn_query_t *qs = malloc((size_t)n * sizeof(*qs));
    int floor = p->n_pos;
    for (int i = 0; i < n; i++) {
        qs[i] = (attn_query_t){p->q + (size_t)pos[i] * q_dim, out + (size_t)pos[i] * q_dim, &p->kv, pos[i]};
        if (lo_of(m, pos[i]) < floor)
            floor = lo_of(m, pos[i]);
    }
    p->st.floor = floor;
    kern__attn_forward(kern__current(), tp, &cfg, m, 0, qs, n);
    p->st.floor = 0;
    free(qs);
    free(cfg.scratch);
}

/* The textbook formula in double over the visible keys (window, storage), with the scale
 * and soft-cap of m, for every position that has storage (the others have no query). */
static void check_reference_math(const problem_t *p, const float *out, const attn_math_t *m)
{
    const int hd = p->hd, G = p->n_heads / p->n_kv_heads;
    const double scale = m->scale != 0.0f ? m->scale : 1.0 / sqrt((double)hd);
    double *s = malloc((size_t)p->n_pos * sizeof(double));
    float qbuf[128];
    for (int pos = 0; pos < p->n_pos; pos++)
        for (int h = 0; h < p->n_heads && !(pos >= p->st.null_lo && pos < p->st.null_hi); h++) {
            const float *q = ref_query(p, p->q + ((size_t)pos * p->n_heads + h) * hd, qbuf);
            const int kvh = h / G, lo = lo_of(m, pos);
            double mx = -INFINITY, sum = 0;
            for (int j = lo; j <= pos; j++) {
                if (j >= p->st.null_lo && j < p->st.null_hi)
                    continue;
                double d = 0;
                for (int i = 0; i < hd; i++)
                    d += (double)q[i] * elem(p, true, j, kvh * hd + i);
                s[j] = d * scale;
                if (m->softcap > 0)
                    s[j] = m->softcap * tanh(s[j] / m->softcap);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = lo; j <= pos; j++)
                if (!(j >= p->st.null_lo && j < p->st.null_hi))
                    sum += (s[j] = exp(s[j] - mx));
            for (int i = 0; i < hd; i++) {
                double o = 0;
                for (int j = lo; j <= pos; j++)
                    if (!(j >= p->st.null_lo && j < p->st.null_hi))
                        o += s[j] / sum * elem(p, false, j, kvh * hd + i);
                double got = out[((size_t)pos * p->n_heads + h) * hd + i];
                if (!(fabs(got - o) <= 2e-5 + 2e-5 * fabs(o))) {
                    fprintf(stderr, "math window=%d scale=%g cap=%g: pos %d head %d dim %d: got %.9g want %.9g\n",
                            m->window, (double)m->scale, (double)m->softcap, pos, h, i, got, o);
                    fail();
                }
            }
        }
    free(s);
}

/*
 * Sliding windows, a configurable scale and soft-capping, against the double reference;
 * and, as bit identity, every query alone vs all at once (1 and 3 threads), vs chunks of
 * 7, in every implementation. No position below a window is ever asked of the accessor
 * (a sliding layer's released blocks may not be readable).
 */
static void test_attention_window_scale_softcap(void **state)
{
    (void)state;
    static const math_case_t cases[] = {
        {{1, 0.0f, 0.0f}, "window 1"},
        {{5, 0.0f, 0.0f}, "window 5"},
        {{16, 0.0f, 0.0f}, "window 16"},
        {{37, 0.0f, 0.0f}, "window 37"},
        {{64, 0.0f, 0.0f}, "window 64"},
        {{100, 0.0f, 0.0f}, "window 100 (beyond some spans)"},
        {{0, 0.0625f, 0.0f}, "scale 1/16 (query_pre_attn_scalar 256)"},
        {{0, 0.0f, 5.0f}, "soft-cap 5"},
        {{23, 0.3f, 2.0f}, "window 23, scale 0.3, soft-cap 2"},
    };
    cairn_thread_pool_t *tp1 = NULL, *tp3 = NULL;
    assert_int_equal(cairn_thread_pool_create(1, &tp1), 0);
    assert_int_equal(cairn_thread_pool_create(3, &tp3), 0);
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
        for (size_t ci = 0; ci < CAIRN_ARRAY_LEN(cases); ci++) {
            const attn_math_t *m = &cases[ci].m;
            problem_t p;
            problem_init(&p, shapes[si][0], shapes[si][1], shapes[si][2], shapes[si][3],
                         dtypes_q8[ci % n_dtypes(shapes[si][2])]);
            p.st.run = 16;
            const int n = p.n_pos;
            const size_t bytes = (size_t)n * p.n_heads * p.hd * sizeof(float);
            float *alone = malloc(bytes), *first = NULL, *out = malloc(bytes);
            int *pos = malloc((size_t)n * sizeof(int));
            for (int i = 0; i < n; i++)
                pos[i] = i;
            for (size_t ii = 0; ii < CAIRN_ARRAY_LEN(impls); ii++) {
                if (!kern_impl_available(impls[ii]))
                    continue;
                assert_int_equal(kern_set_impl(impls[ii]), 0);
                for (int i = 0; i < n; i++)
                    run_attn_math(&p, tp1, &i, 1, alone, m);
                if (!first) {
                    check_reference_math(&p, alone, m);
                    first = malloc(bytes);
                    memcpy(first, alone, bytes);
                } else {
                    assert_memory_equal(alone, first, bytes);
                }
                memset(out, 0xff, bytes);
                run_attn_math(&p, tp3, pos, n, out, m);
                assert_memory_equal(out, first, bytes);
                memset(out, 0xff, bytes);
                run_attn_math(&p, tp1, pos, 3, out, m);
                for (int i = 3; i < n; i += 7)
                    run_attn_math(&p, tp3, pos + i, n - i < 7 ? n - i : 7, out, m);
                assert_memory_equal(out, first, bytes);
            }
            if (p.st.below_floor)
                fail_msg("%s: attention asked for %d positions below the window", cases[ci].what, p.st.below_floor);
            free(alone);
            free(first);
            free(out);
            free(pos);
            problem_fini(&p);
        }
    cairn_thread_pool_destroy(tp1);
    cairn_thread_pool_destroy(tp3);
    kern_set_impl("scalar");
}

/*
 * The queries of p that have storage (a query's own K/V is always stored: those outside
 * [null_lo, null_hi)), each run alone in every available implementation and then all at
 * once on tp: every result the same bits (with check_ref, the first also within the
 * reference's tolerance of the double-precision reference).
 */
static void null_runs_agree(problem_t *p, cairn_thread_pool_t *tp, const attn_math_t *math, bool check_ref)
{
    int *pos = malloc((size_t)p->n_pos * sizeof(int)), n = 0;
    for (int i = 0; i < p->n_pos; i++)
        if (i < p->st.null_lo || i >= p->st.null_hi)
            pos[n++] = i;
    const size_t bytes = (size_t)p->n_pos * p->n_heads * p->hd * sizeof(float);
    float *alone = calloc(1, bytes), *first = NULL, *out = calloc(1, bytes);
    for (size_t ii = 0; ii < CAIRN_ARRAY_LEN(impls); ii++) {
        if (!kern_impl_available(impls[ii]))
            continue;
        assert_int_equal(kern_set_impl(impls[ii]), 0);
        for (int i = 0; i < n; i++)
            run_attn_math(p, NULL, &pos[i], 1, alone, math);
        if (!first) {
            if (check_ref)
                check_reference_math(p, alone, math);
            first = malloc(bytes);
            memcpy(first, alone, bytes);
        } else {
            assert_memory_equal(alone, first, bytes);
        }
        memcpy(out, first, bytes);
        run_attn_math(p, tp, pos, n, out, math);
        assert_memory_equal(out, first, bytes);
    }
    free(alone);
    free(first);
    free(out);
    free(pos);
}

/*
 * A run of positions without storage (the accessor returns NULL rows: a null block of a
 * block table) is skipped: the result is the reference over the other positions, the
 * same in every implementation, tile and thread count. The former attention asserted on
 * (or dereferenced) such a run.
 */
static void test_attention_null_blocks(void **state)
{
    (void)state;
    static const int ranges[][2] = {{0, 16}, {16, 48}, {3, 5}, {40, 41}};
    static const attn_math_t maths[] = {{0, 0.0f, 0.0f}, {60, 0.0f, 0.0f}};
    cairn_thread_pool_t *tp3 = NULL;
    assert_int_equal(cairn_thread_pool_create(3, &tp3), 0);
    for (size_t ri = 0; ri < CAIRN_ARRAY_LEN(ranges); ri++)
        for (size_t mi = 0; mi < CAIRN_ARRAY_LEN(maths); mi++) {
            problem_t p;
            /* q8_0 for a whole null group with a window and a null position inside a group */
            problem_init(&p, 8, 2, 64, 97, dtypes_q8[(2 * ri + mi + ri / 2) % CAIRN_ARRAY_LEN(dtypes_q8)]);
            p.st.run = 16;
            p.st.null_lo = ranges[ri][0];
            p.st.null_hi = ranges[ri][1];
            null_runs_agree(&p, tp3, &maths[mi], true);
            problem_fini(&p);
        }
    cairn_thread_pool_destroy(tp3);
    kern_set_impl("scalar");
}

static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The former attention: kern_dot and kern_axpy per (query, key, head), for comparison. */
static void former_attention(const problem_t *p, const int *pos, int n, float *out, float *scores)
{
    const int hd = p->hd, G = p->n_heads / p->n_kv_heads;
    const size_t esz = cairn_dtype_size(p->dt);
    const float scale = 1.0f / sqrtf((float)hd);
    for (int i = 0; i < n; i++)
        for (int h = 0; h < p->n_heads; h++) {
            const float *q = p->q + ((size_t)pos[i] * p->n_heads + h) * hd;
            float *o = out + ((size_t)pos[i] * p->n_heads + h) * hd;
            const size_t off = (size_t)(h / G) * hd * esz;
            float mx = -INFINITY, sum = 0;
            for (int j = 0; j <= pos[i]; j++) {
                scores[j] = kern_dot(q, p->st.k + (size_t)j * p->st.row_bytes + off, p->dt, hd) * scale;
                mx = scores[j] > mx ? scores[j] : mx;
            }
            for (int j = 0; j <= pos[i]; j++)
                sum += (scores[j] = expf(scores[j] - mx));
            memset(o, 0, (size_t)hd * sizeof(float));
            for (int j = 0; j <= pos[i]; j++)
                kern_axpy(o, scores[j] / sum, p->st.v + (size_t)j * p->st.row_bytes + off, p->dt, hd);
        }
}

static int bench(void)
{
    kern_init();
    problem_t p;
    const int n_pos = 4096, n = 256; /* the last 256 queries of a 4K prompt */
    problem_init(&p, 8, 2, 64, n_pos, CAIRN_DTYPE_BF16);
    p.st.run = 16;
    int *pos = malloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++)
        pos[i] = n_pos - n + i;
    float *out = malloc((size_t)n_pos * 8 * 64 * sizeof(float));
    float *scores = malloc((size_t)n_pos * sizeof(float));
    double t0 = thread_cpu();
    former_attention(&p, pos, n, out, scores);
    double t_former = thread_cpu() - t0;
    double t_tiled = 1e30, t_decode = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        t0 = thread_cpu();
        run_attn(&p, NULL, pos, n, out);
        double t = thread_cpu() - t0;
        t_tiled = t < t_tiled ? t : t_tiled;
        t0 = thread_cpu();
        for (int i = 0; i < n; i++)
            run_attn(&p, NULL, pos + i, 1, out);
        t = thread_cpu() - t0;
        t_decode = t < t_decode ? t : t_decode;
    }
    printf("attention, kernels %s, 8/2 heads x 64, bf16 K/V, queries %d..%d (1 thread CPU time):\n",
           kern_impl_name(), n_pos - n, n_pos - 1);
    printf("  former per-(query, key, head) loop  %.3f s\n", t_former);
    printf("  tiled, one call                     %.3f s  (%.1fx)\n", t_tiled, t_former / t_tiled);
    printf("  tiled, one query per call (decode)  %.3f s  (%.1fx)\n", t_decode, t_former / t_decode);
    /* All 8 layers of a cold 4K prompt attend over n_pos^2/2 pairs per head; scale by it. */
    double pairs_part = (double)n * (n_pos - n / 2), pairs_all = (double)n_pos * (n_pos + 1) / 2;
    printf("  estimate for a cold 4K prompt, 8 layers: former %.1f s, tiled %.2f s of CPU\n",
           8 * t_former * pairs_all / pairs_part, 8 * t_tiled * pairs_all / pairs_part);
    free(pos);
    free(out);
    free(scores);
    problem_fini(&p);
    return 0;
}

/* ---- the pair order of bf16 K/V (attention_impl.h, steps 1' and 4') ------------------ */

/* The pair order, written independently of attention_pair.c: each pair's exact sum in
 * double (exact for these magnitudes: products of 8-bit significands within 2^36 of each
 * other) rounded once to float, then a float add (no denormals arise at these values).
 * `perturbed` computes what a kernel that lost the pair rounding would: the two products
 * added one after the other (vdpbf16ps's order). */
static float pair_sum_ref(float acc, float a0, float b0, float a1, float b1, bool perturbed)
{
    if (perturbed)
        return fmaf(a1, b1, fmaf(a0, b0, acc));
    return acc + (float)((double)a0 * b0 + (double)a1 * b1);
}

static float pair_dot_ref(const float *q, const float *k, int hd, bool perturbed)
{
    float acc = 0.0f;
    for (int d = 0; d < hd; d += 2)
        acc = pair_sum_ref(acc, attn__bf16_round(q[d]), k[d], d + 1 < hd ? attn__bf16_round(q[d + 1]) : 0.0f,
                           d + 1 < hd ? k[d + 1] : 0.0f, perturbed);
    return acc;
}

/* A value with a bf16's bits (as the K/V store holds). */
static float bf16_rndf(float scale) { return attn__bf16_round(scale * rndf()); }

/* The pair renditions each implementation runs (scalar, AVX2: the generic one; AVX-512:
 * the emulation, and the tiles inside it where they passed their check). */
static const attn_impl_t *pair_impl(const char *name)
{
    const attn_impl_t *a = kern__impl_by_name(name)->attn;
    return a->pair ? a->pair : &attn__generic_pair;
}

/* Every pair rendition's primitives equal the independent definition above, and the
 * definition is sensitive to the pair rounding: on the same inputs the perturbed order
 * gives other bits for some scores (so a kernel that lost the rounding fails here). */
static void test_pair_primitives(void **state)
{
    (void)state;
    const int hds[] = {16, 24, 64, 128, 40};
    static float q[128], kb[16 * 128], kt[128 * 16], qslot[9 * 128], s[9 * 16], p[9 * 70], vb[70 * 128],
        acc[9 * 128], want[9 * 128];
    int perturbed_differs = 0;
    for (size_t ii = 0; ii < sizeof(impls) / sizeof(impls[0]); ii++) {
        if (!kern_impl_available(impls[ii]))
            continue;
        const attn_impl_t *im = pair_impl(impls[ii]);
        for (size_t hi = 0; hi < sizeof(hds) / sizeof(hds[0]); hi++) {
            const int hd = hds[hi], hdp = (hd + 15) / 16 * 16;
            for (int rep = 0; rep < 10; rep++) {
                for (int i = 0; i < hd; i++)
                    q[i] = 4.0f * rndf();
                for (int i = 0; i < 16 * hd; i++)
                    kb[i] = bf16_rndf(2.0f);
                const float scale = 1.0f / sqrtf((float)hd);
                im->scores16(s, q, kb, hd, scale);
                for (int k = 0; k < 16; k++) {
                    const float w = pair_dot_ref(q, kb + (size_t)k * hd, hd, false) * scale;
                    assert_memory_equal(&s[k], &w, sizeof(float));
                    const float x = pair_dot_ref(q, kb + (size_t)k * hd, hd, true) * scale;
                    perturbed_differs += memcmp(&w, &x, sizeof(float)) != 0;
                }
                /* The transposed scores, 1..9 rows (the tiles' 16-row blocks are
                 * test_attention_amx's). */
                if (im->scores16_t) {
                    const int rows = 1 + rep % 9;
                    for (int r = 0; r < rows; r++) {
                        for (int i = 0; i < hd; i++)
                            q[i] = 4.0f * rndf();
                        im->pack_q(qslot + (size_t)r * hdp, q, hd, hdp);
                        memcpy(acc + (size_t)r * hd, q, sizeof(float) * (size_t)hd); /* keep the row */
                    }
                    im->transpose16(kt, kb, hd);
                    im->scores16_t(s, 16, qslot, rows, kt, hdp, scale);
                    for (int r = 0; r < rows; r++)
                        for (int k = 0; k < 16; k++) {
                            const float w = pair_dot_ref(acc + (size_t)r * hd, kb + (size_t)k * hd, hd, false) * scale;
                            assert_memory_equal(&s[r * 16 + k], &w, sizeof(float));
                        }
                }
                /* p.v over an odd and an even count, rows 1..9, continuing acc. */
                const int rows = 1 + (rep * 5) % 9, cnt = rep % 2 ? 37 : 64;
                for (int i = 0; i < rows * 70; i++)
                    p[i] = attn__bf16_round(fabsf(rndf()) * 0.1f);
                for (int i = 0; i < cnt * hd; i++)
                    vb[i] = bf16_rndf(1.0f);
                for (int i = 0; i < rows * hd; i++)
                    acc[i] = want[i] = rndf();
                im->pv(acc, hd, p, 70, rows, cnt, vb, hd);
                for (int r = 0; r < rows; r++)
                    for (int d = 0; d < hd; d++) {
                        float w = want[r * hd + d];
                        for (int j = 0; j < cnt; j += 2)
                            w = pair_sum_ref(w, p[r * 70 + j], vb[(size_t)j * hd + d], j + 1 < cnt ? p[r * 70 + j + 1] : 0.0f,
                                             j + 1 < cnt ? vb[(size_t)(j + 1) * hd + d] : 0.0f, false);
                        want[r * hd + d] = w;
                    }
                assert_memory_equal(acc, want, sizeof(float) * (size_t)rows * hd);
            }
        }
        /* The softmax: the canonical one, then e_j rounded to bf16; l unrounded. */
        float sm[70], sm2[70];
        for (int i = 0; i < 70; i++)
            sm[i] = sm2[i] = 8.0f * rndf();
        const float l = im->softmax(sm, 53), l2 = attn__generic.softmax(sm2, 53);
        assert_memory_equal(&l, &l2, sizeof l);
        for (int i = 0; i < 53; i++) {
            const float w = attn__bf16_round(sm2[i]);
            assert_memory_equal(&sm[i], &w, sizeof w);
        }
    }
    assert_true(perturbed_differs > 0);
    /* The rounding of q and p: nearest even, denormals to signed zero, NaN quieted. */
    const uint32_t in[] = {0x3f808000u, 0x3f818000u, 0x3f80c000u, 0x00400000u, 0x80000001u, 0x7f800001u, 0x7f7fffffu};
    const uint32_t out[] = {0x3f800000u, 0x3f820000u, 0x3f810000u, 0x00000000u, 0x80000000u, 0x7fc00000u, 0x7f800000u};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(in); i++) {
        float x, y;
        memcpy(&x, &in[i], 4);
        y = attn__bf16_round(x);
        uint32_t u;
        memcpy(&u, &y, 4);
        assert_int_equal(u, out[i]);
    }
}

/* The textbook formula in double, at the pair order's tolerance: q and p rounded to bf16
 * (relative 2^-9 each) move an output by up to ~1e-2 of the V scale here. */
static void check_reference_pair(const problem_t *p, const float *out, double tol, double *max_err)
{
    const int hd = p->hd, G = p->n_heads / p->n_kv_heads;
    double *s = malloc((size_t)p->n_pos * sizeof(double));
    for (int pos = 0; pos < p->n_pos; pos++)
        for (int h = 0; h < p->n_heads; h++) {
            const float *q = p->q + ((size_t)pos * p->n_heads + h) * hd;
            const int kvh = h / G;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j <= pos; j++) {
                double d = 0;
                for (int i = 0; i < hd; i++)
                    d += (double)q[i] * elem(p, true, j, kvh * hd + i);
                s[j] = d / sqrt((double)hd);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j <= pos; j++)
                sum += (s[j] = exp(s[j] - mx));
            for (int i = 0; i < hd; i++) {
                double o = 0;
                for (int j = 0; j <= pos; j++)
                    o += s[j] / sum * elem(p, false, j, kvh * hd + i);
                const double e = fabs(out[((size_t)pos * p->n_heads + h) * hd + i] - o);
                *max_err = e > *max_err ? e : *max_err;
                if (!(e <= tol)) {
                    fprintf(stderr, "pair order: pos %d head %d dim %d: err %.3g > %.3g\n", pos, h, i, e, tol);
                    fail();
                }
            }
        }
    free(s);
}

/* bf16 K/V under the pair order: every query alone = in tiles of any alignment and order =
 * every run length = 1 and 3 threads = every implementation, bit for bit; near the
 * textbook formula; and not the f32 order's bits (the switch does switch). */
static void test_attention_pair(void **state)
{
    (void)state;
    cairn_thread_pool_t *tp1 = NULL, *tp3 = NULL;
    assert_int_equal(cairn_thread_pool_create(1, &tp1), 0);
    assert_int_equal(cairn_thread_pool_create(3, &tp3), 0);
    double max_err = 0;
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        problem_t p;
        problem_init(&p, shapes[si][0], shapes[si][1], shapes[si][2], shapes[si][3], CAIRN_DTYPE_BF16);
        const size_t bytes = (size_t)p.n_pos * p.n_heads * p.hd * sizeof(float);
        float *first = NULL, *f32 = malloc(bytes);
        kern__attn_pair_set(0);
        for (int i = 0; i < p.n_pos; i++)
            run_attn(&p, tp1, &i, 1, f32);
        kern__attn_pair_set(1);
        for (size_t ii = 0; ii < sizeof(impls) / sizeof(impls[0]); ii++) {
            if (!kern_impl_available(impls[ii]))
                continue;
            assert_int_equal(kern_set_impl(impls[ii]), 0);
            float *alone = malloc(bytes);
            for (int i = 0; i < p.n_pos; i++)
                run_attn(&p, tp1, &i, 1, alone);
            if (!first) {
                check_reference_pair(&p, alone, 2e-2, &max_err);
                assert_memory_not_equal(alone, f32, bytes);
                first = alone;
            } else {
                assert_memory_equal(alone, first, bytes);
            }
            /* Every layout, order, run length and thread count: on the fastest rendition
             * (the AVX-512 emulation, and the tiles inside it where they serve), to keep
             * the test short; the others are held to it query by query above. */
            if (!strcmp(impls[ii], "avx512") || !kern_impl_available("avx512"))
                check_determinism(&p, tp1, tp3, first);
            if (alone != first)
                free(alone);
        }
        free(first);
        free(f32);
        problem_fini(&p);
    }
    printf("pair order: max |out - textbook| %.3g\n", max_err);
    kern__attn_pair_set(0);
    cairn_thread_pool_destroy(tp1);
    cairn_thread_pool_destroy(tp3);
    kern_set_impl(NULL);
    kern_init();
}

/* The pair order with a window, a scale, a soft-cap and null blocks (bf16 K/V): each query
 * alone = all at once on 3 threads = every implementation, bit for bit. */
static void test_attention_pair_masks(void **state)
{
    (void)state;
    static const int ranges[][2] = {{16, 48}, {3, 5}, {0, 0}};
    static const attn_math_t maths[] = {{60, 0.0f, 0.0f}, {0, 0.1f, 30.0f}, {37, 0.0f, 50.0f}};
    cairn_thread_pool_t *tp3 = NULL;
    assert_int_equal(cairn_thread_pool_create(3, &tp3), 0);
    kern__attn_pair_set(1);
    for (size_t ri = 0; ri < CAIRN_ARRAY_LEN(ranges); ri++)
        for (size_t mi = 0; mi < CAIRN_ARRAY_LEN(maths); mi++) {
            problem_t p;
            problem_init(&p, 8, 2, 64, 97, CAIRN_DTYPE_BF16);
            p.st.run = 16;
            p.st.null_lo = ranges[ri][0];
            p.st.null_hi = ranges[ri][1];
            null_runs_agree(&p, tp3, &maths[mi], false);
            problem_fini(&p);
        }
    kern__attn_pair_set(0);
    cairn_thread_pool_destroy(tp3);
    kern_set_impl(NULL);
    kern_init();
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--bench"))
        return bench();
    kern_init();
    kern__attn_tile_set(0); /* the f32 and pair orders, on any CPU (the tile order: test_attention_tile) */
    /* The f32 order's tests, whatever this CPU or CAIRN_ATTN_BF16PAIR would choose. */
    kern__attn_pair_set(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_primitives),
        cmocka_unit_test(test_q8_scores),
        cmocka_unit_test(test_attention_all),
        cmocka_unit_test(test_attention_window_scale_softcap),
        cmocka_unit_test(test_attention_null_blocks),
        cmocka_unit_test(test_pair_primitives),
        cmocka_unit_test(test_attention_pair),
        cmocka_unit_test(test_attention_pair_masks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
