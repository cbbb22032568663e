/*
 * Tests for the compute backend interface (src/compute/backend.h), from outside it:
 *  - a test double defined here — a complete backend that records every call and forwards
 *    it to another backend — proves a backend can be written without touching the library;
 *  - a small Llama-shaped forward pass (2 layers, GQA, bf16 weights, a K/V store per
 *    layer) written only against the compute_* API runs on the CPU backend with the
 *    process's implementation, on one forced to the scalar reference, and through the
 *    double: same logits bit for bit, and the same bits as the pass written against the
 *    kernels (kern_*) the engine called before the interface existed;
 *  - prefill in one call vs token by token through the backend: same bits;
 *  - the row-parallel ops (RMSNorm, RoPE and its angles, the GLUs, add / mul / scale) on
 *    pools of 2, 3 and 5 threads give the 1-thread backend's bits, lengths not a multiple
 *    of 16 and in-place calls included;
 *  - registry, options, numerics ids, capabilities and buffers.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "compute/backend.h"
#include "compute/cpu/attention.h"
#include "compute/cpu/attention_impl.h"
#include "compute/cpu/kernels.h"

/* ---- the test double: records and forwards ----------------------------------------- */

enum { OP_MATMUL, OP_GET_ROWS, OP_RMSNORM, OP_ROPE_ANGLES, OP_ROPE, OP_GLU, OP_ADD, OP_KV_STORE, OP_ATTENTION,
       OP_OTHER, N_REC };

typedef struct {
    compute_backend_t base; /* first */
    compute_backend_t *inner;
    int calls[N_REC];
    int matmul_products;    /* products over all matmul calls */
} rec_backend_t;

static rec_backend_t *rec(compute_backend_t *be) { return (rec_backend_t *)be; }
static compute_backend_t *in(compute_backend_t *be) { return rec(be)->inner; }

static void rec_destroy(compute_backend_t *be) { free(be); }
static const char *rec_numerics(const compute_backend_t *be, cairn_math_t m, cairn_dtype_t kv)
{
    return compute_numerics_id(((const rec_backend_t *)be)->inner, m, kv);
}
static bool rec_supports(const compute_backend_t *be, compute_op_t op, cairn_dtype_t t)
{
    return compute_supports(((const rec_backend_t *)be)->inner, op, t);
}
static int rec_alloc(compute_backend_t *be, size_t n, compute_buffer_t *b) { return compute_buffer_alloc(in(be), n, b); }
static int rec_from_host(compute_backend_t *be, const void *h, size_t n, compute_buffer_t *b)
{
    return compute_buffer_from_host(in(be), h, n, b);
}
static void rec_free(compute_backend_t *be, compute_buffer_t *b) { compute_buffer_free(in(be), b); }
static int rec_write(compute_backend_t *be, compute_buffer_t *b, size_t o, const void *s, size_t n)
{
    return compute_buffer_write(in(be), b, o, s, n);
}
static int rec_read(compute_backend_t *be, const compute_buffer_t *b, size_t o, void *d, size_t n)
{
    return compute_buffer_read(in(be), b, o, d, n);
}
static int rec_sync(compute_backend_t *be) { return compute_sync(in(be)); }
static void rec_matmul(compute_backend_t *be, const float *x, int rows, int n_in, const compute_mm_t *outs, int n,
                       cairn_math_t m)
{
    rec(be)->calls[OP_MATMUL]++;
    rec(be)->matmul_products += n;
    compute_matmul(in(be), x, rows, n_in, outs, n, m);
}
static void rec_get_rows(compute_backend_t *be, float *d, compute_mat_t t, const int32_t *ids, int n)
{
    rec(be)->calls[OP_GET_ROWS]++;
    compute_get_rows(in(be), d, t, ids, n);
}
static void rec_rmsnorm(compute_backend_t *be, float *o, const float *x, int rows, compute_mat_t w, float eps, bool u)
{
    rec(be)->calls[OP_RMSNORM]++;
    compute_rmsnorm(in(be), o, x, rows, w, eps, u);
}
static void rec_rope_angles(compute_backend_t *be, float *cs, const float *f, int half, const int *pos, int rows)
{
    rec(be)->calls[OP_ROPE_ANGLES]++;
    compute_rope_angles(in(be), cs, f, half, pos, rows);
}
static void rec_rope(compute_backend_t *be, float *x, int rows, int nh, int hd, int rot, const float *cs)
{
    rec(be)->calls[OP_ROPE]++;
    compute_rope(in(be), x, rows, nh, hd, rot, cs);
}
static void rec_glu(compute_backend_t *be, float *o, const float *g, const float *u, size_t n, compute_glu_t a)
{
    rec(be)->calls[OP_GLU]++;
    compute_glu(in(be), o, g, u, n, a);
}
static void rec_mul(compute_backend_t *be, float *o, const float *a, const float *b, size_t n)
{
    rec(be)->calls[OP_OTHER]++;
    compute_mul(in(be), o, a, b, n);
}
static void rec_add(compute_backend_t *be, float *x, const float *y, size_t n)
{
    rec(be)->calls[OP_ADD]++;
    compute_add(in(be), x, y, n);
}
static void rec_scale(compute_backend_t *be, float *x, float s, size_t n)
{
    rec(be)->calls[OP_OTHER]++;
    compute_scale(in(be), x, s, n);
}
static void rec_kv_store(compute_backend_t *be, void *d, cairn_dtype_t t, const float *s, int n)
{
    rec(be)->calls[OP_KV_STORE]++;
    compute_kv_store(in(be), d, t, s, n);
}
static int rec_attn_create(compute_backend_t *be, const compute_attn_params_t *p, compute_attn_t **out)
{
    return compute_attn_create(in(be), p, out);
}
static void rec_attn_destroy(compute_backend_t *be, compute_attn_t *a) { compute_attn_destroy(in(be), a); }
static void rec_attention(compute_backend_t *be, compute_attn_t *a, int layer, const attn_query_t *q, int n)
{
    rec(be)->calls[OP_ATTENTION]++;
    compute_attention(in(be), a, layer, q, n);
}

static const compute_backend_ops_t rec_ops = {
    .name = "recording",
    .host_memory = true,
    .destroy = rec_destroy,
    .numerics_id = rec_numerics,
    .supports = rec_supports,
    .buffer_alloc = rec_alloc,
    .buffer_from_host = rec_from_host,
    .buffer_free = rec_free,
    .buffer_write = rec_write,
    .buffer_read = rec_read,
    .sync = rec_sync,
    .matmul = rec_matmul,
    .get_rows = rec_get_rows,
    .rmsnorm = rec_rmsnorm,
    .rope_angles = rec_rope_angles,
    .rope = rec_rope,
    .glu = rec_glu,
    .mul = rec_mul,
    .add = rec_add,
    .scale = rec_scale,
    .kv_store = rec_kv_store,
    .attn_create = rec_attn_create,
    .attn_destroy = rec_attn_destroy,
    .attention = rec_attention,
};

static compute_backend_t *rec_create(compute_backend_t *inner)
{
    rec_backend_t *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    r->base.ops = &rec_ops;
    r->inner = inner;
    return &r->base;
}

/* ---- a toy Llama: weights, K/V store, two forward passes -------------------------------- */

enum { L = 2, HID = 96, NH = 4, NKV = 2, HD = 24, FFN = 160, VOCAB = 77, MAXPOS = 40, QD = NH * HD, KVD = NKV * HD };

static uint64_t rng = 0x853c49e6748fea9bull;
static float rndf(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((int)(rng % 2001) - 1000) * 1e-3f;
}

typedef struct {
    uint16_t *embed, *wq[L], *wk[L], *wv[L], *wo[L], *wg[L], *wu[L], *wd[L], *head; /* bf16 [out][in] */
    float *attn_norm[L], *ffn_norm[L], *norm;                                      /* f32 [HID] */
    float inv_freq[HD / 2];
} toy_t;

static uint16_t *bf16_matrix(int rows, int cols, float scale)
{
    uint16_t *m = malloc((size_t)rows * cols * 2);
    assert_non_null(m);
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        m[i] = kern_f32_to_bf16(rndf() * scale);
    return m;
}

static float *f32_vector(int n)
{
    float *v = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++)
        v[i] = 1.0f + 0.2f * rndf();
    return v;
}

static void toy_init(toy_t *t)
{
    t->embed = bf16_matrix(VOCAB, HID, 1.0f);
    t->head = bf16_matrix(VOCAB, HID, 0.2f);
    for (int l = 0; l < L; l++) {
        t->wq[l] = bf16_matrix(QD, HID, 0.2f);
        t->wk[l] = bf16_matrix(KVD, HID, 0.2f);
        t->wv[l] = bf16_matrix(KVD, HID, 0.2f);
        t->wo[l] = bf16_matrix(HID, QD, 0.2f);
        t->wg[l] = bf16_matrix(FFN, HID, 0.2f);
        t->wu[l] = bf16_matrix(FFN, HID, 0.2f);
        t->wd[l] = bf16_matrix(HID, FFN, 0.2f);
        t->attn_norm[l] = f32_vector(HID);
        t->ffn_norm[l] = f32_vector(HID);
    }
    t->norm = f32_vector(HID);
    for (int i = 0; i < HD / 2; i++)
        t->inv_freq[i] = 1.0f / powf(10000.0f, (float)(2 * i) / HD);
}

static void toy_fini(toy_t *t)
{
    free(t->embed);
    free(t->head);
    for (int l = 0; l < L; l++) {
        free(t->wq[l]), free(t->wk[l]), free(t->wv[l]), free(t->wo[l]);
        free(t->wg[l]), free(t->wu[l]), free(t->wd[l]);
        free(t->attn_norm[l]), free(t->ffn_norm[l]);
    }
    free(t->norm);
}

/* One sequence's K/V: [L][MAXPOS][KVD] bf16. */
typedef struct {
    uint16_t k[L][MAXPOS][KVD], v[L][MAXPOS][KVD];
} kv_store_t;

static int kv_rows(void *ctx, int layer, int pos, void **k, void **v)
{
    kv_store_t *s = ctx;
    if (pos < 0 || pos >= MAXPOS)
        return 0;
    *k = s->k[layer][pos];
    *v = s->v[layer][pos];
    return MAXPOS - pos;
}

/* Scratch for up to MAXPOS rows. */
typedef struct {
    float x[MAXPOS][HID], xb[MAXPOS][HID], xb2[MAXPOS][HID], q[MAXPOS][QD], k[MAXPOS][KVD], v[MAXPOS][KVD];
    float att[MAXPOS][QD], hb[MAXPOS][FFN], hb2[MAXPOS][FFN], cs[MAXPOS][HD];
} act_t;

static compute_mat_t mat(const void *d, cairn_dtype_t t, int rows, int cols) { return (compute_mat_t){d, t, rows, cols}; }

/* Tokens at positions p0 .. p0 + n - 1 of the sequence behind kv, through the backend;
 * logits [n][VOCAB]. */
static void toy_forward_backend(compute_backend_t *be, compute_attn_t *attn, const toy_t *t, kv_store_t *kvs,
                                const int32_t *tokens, int p0, int n, float *logits, cairn_math_t math)
{
    static act_t a;
    attn_kv_t kv = {kv_rows, kvs};
    attn_query_t qs[MAXPOS];
    int pos[MAXPOS];
    for (int r = 0; r < n; r++)
        pos[r] = p0 + r;
    compute_get_rows(be, a.x[0], mat(t->embed, CAIRN_DTYPE_BF16, VOCAB, HID), tokens, n);
    compute_rope_angles(be, a.cs[0], t->inv_freq, HD / 2, pos, n);
    for (int l = 0; l < L; l++) {
        compute_rmsnorm(be, a.xb[0], a.x[0], n, mat(t->attn_norm[l], CAIRN_DTYPE_F32, 1, HID), 1e-5f, false);
        compute_mm_t qkv[3] = {{a.q[0], mat(t->wq[l], CAIRN_DTYPE_BF16, QD, HID)},
                               {a.k[0], mat(t->wk[l], CAIRN_DTYPE_BF16, KVD, HID)},
                               {a.v[0], mat(t->wv[l], CAIRN_DTYPE_BF16, KVD, HID)}};
        compute_matmul(be, a.xb[0], n, HID, qkv, 3, math);
        compute_rope(be, a.q[0], n, NH, HD, HD, a.cs[0]);
        compute_rope(be, a.k[0], n, NKV, HD, HD, a.cs[0]);
        for (int r = 0; r < n; r++) {
            compute_kv_store(be, kvs->k[l][pos[r]], CAIRN_DTYPE_BF16, a.k[r], KVD);
            compute_kv_store(be, kvs->v[l][pos[r]], CAIRN_DTYPE_BF16, a.v[r], KVD);
            qs[r] = (attn_query_t){a.q[r], a.att[r], &kv, pos[r]};
        }
        compute_attention(be, attn, l, qs, n);
        compute_mm_t o = {a.xb2[0], mat(t->wo[l], CAIRN_DTYPE_BF16, HID, QD)};
        compute_matmul(be, a.att[0], n, QD, &o, 1, math);
        compute_add(be, a.x[0], a.xb2[0], (size_t)n * HID);
        compute_rmsnorm(be, a.xb[0], a.x[0], n, mat(t->ffn_norm[l], CAIRN_DTYPE_F32, 1, HID), 1e-5f, false);
        compute_mm_t gu[2] = {{a.hb[0], mat(t->wg[l], CAIRN_DTYPE_BF16, FFN, HID)},
                              {a.hb2[0], mat(t->wu[l], CAIRN_DTYPE_BF16, FFN, HID)}};
        compute_matmul(be, a.xb[0], n, HID, gu, 2, math);
        compute_glu(be, a.hb[0], a.hb[0], a.hb2[0], (size_t)n * FFN, COMPUTE_GLU_SILU);
        compute_mm_t d = {a.xb2[0], mat(t->wd[l], CAIRN_DTYPE_BF16, HID, FFN)};
        compute_matmul(be, a.hb[0], n, FFN, &d, 1, math);
        compute_add(be, a.x[0], a.xb2[0], (size_t)n * HID);
    }
    compute_rmsnorm(be, a.xb[0], a.x[0], n, mat(t->norm, CAIRN_DTYPE_F32, 1, HID), 1e-5f, false);
    compute_mm_t h = {logits, mat(t->head, CAIRN_DTYPE_BF16, VOCAB, HID)};
    compute_matmul(be, a.xb[0], n, HID, &h, 1, math);
    assert_int_equal(compute_sync(be), CAIRN_OK);
}

/* The same pass written against the kernels, the way forward.c called them before the
 * backend interface existed. */
static void toy_forward_kernels(cairn_thread_pool_t *tp, const toy_t *t, kv_store_t *kvs, const int32_t *tokens,
                                int p0, int n, float *logits, cairn_math_t math)
{
    static act_t a;
    attn_kv_t kv = {kv_rows, kvs};
    attn_query_t qs[MAXPOS];
    const int slots = cairn_thread_pool_size(tp);
    attn_cfg_t cfg = {NH, NKV, HD, CAIRN_DTYPE_BF16, NULL, slots, MAXPOS};
    cfg.scratch = malloc((size_t)slots * sizeof(float) * attn_scratch_floats(NH, NKV, HD, MAXPOS));
    for (int r = 0; r < n; r++) {
        kern_row_to_f32(a.x[r], t->embed + (size_t)tokens[r] * HID, CAIRN_DTYPE_BF16, HID);
        kern_rope_angles(a.cs[r], t->inv_freq, HD / 2, p0 + r);
    }
    for (int l = 0; l < L; l++) {
        for (int r = 0; r < n; r++)
            kern_rmsnorm(a.xb[r], a.x[r], t->attn_norm[l], CAIRN_DTYPE_F32, HID, 1e-5f);
        kern_mm_out_t qkv[3] = {{a.q[0], t->wq[l], QD}, {a.k[0], t->wk[l], KVD}, {a.v[0], t->wv[l], KVD}};
        kern_matmul_n(tp, a.xb[0], n, HID, CAIRN_DTYPE_BF16, qkv, 3, math);
        for (int r = 0; r < n; r++) {
            kern_rope(a.q[r], NH, HD, a.cs[r]);
            kern_rope(a.k[r], NKV, HD, a.cs[r]);
            kern_row_from_f32(kvs->k[l][p0 + r], CAIRN_DTYPE_BF16, a.k[r], KVD);
            kern_row_from_f32(kvs->v[l][p0 + r], CAIRN_DTYPE_BF16, a.v[r], KVD);
            qs[r] = (attn_query_t){a.q[r], a.att[r], &kv, p0 + r};
        }
        attn_forward(tp, &cfg, l, qs, n);
        kern_matmul(tp, a.xb2[0], a.att[0], n, QD, t->wo[l], CAIRN_DTYPE_BF16, HID, math);
        kern_add(a.x[0], a.xb2[0], n * HID);
        for (int r = 0; r < n; r++)
            kern_rmsnorm(a.xb[r], a.x[r], t->ffn_norm[l], CAIRN_DTYPE_F32, HID, 1e-5f);
        kern_mm_out_t gu[2] = {{a.hb[0], t->wg[l], FFN}, {a.hb2[0], t->wu[l], FFN}};
        kern_matmul_n(tp, a.xb[0], n, HID, CAIRN_DTYPE_BF16, gu, 2, math);
        kern_silu_mul(a.hb[0], a.hb[0], a.hb2[0], n * FFN);
        kern_matmul(tp, a.xb2[0], a.hb[0], n, FFN, t->wd[l], CAIRN_DTYPE_BF16, HID, math);
        kern_add(a.x[0], a.xb2[0], n * HID);
    }
    for (int r = 0; r < n; r++)
        kern_rmsnorm(a.xb[r], a.x[r], t->norm, CAIRN_DTYPE_F32, HID, 1e-5f);
    kern_matmul(tp, logits, a.xb[0], n, HID, t->head, CAIRN_DTYPE_BF16, VOCAB, math);
    free(cfg.scratch);
}

static const compute_attn_params_t toy_attn = {NH, NKV, HD, CAIRN_DTYPE_BF16, MAXPOS, 0, 0.0f, 0.0f};

/* Prefill of n tokens through a backend, into logits [n][VOCAB]. */
static void run_backend(compute_backend_t *be, const toy_t *t, const int32_t *tok, int n, float *logits,
                        cairn_math_t math)
{
    static kv_store_t kvs;
    memset(&kvs, 0, sizeof(kvs));
    compute_attn_t *a = NULL;
    assert_int_equal(compute_attn_create(be, &toy_attn, &a), CAIRN_OK);
    toy_forward_backend(be, a, t, &kvs, tok, 0, n, logits, math);
    compute_attn_destroy(be, a);
}

static void test_forward_through_backends(void **state)
{
    (void)state;
    static toy_t t;
    static float ref[MAXPOS * VOCAB], got[MAXPOS * VOCAB];
    static kv_store_t kvs;
    enum { N = 33 };
    int32_t tok[N];
    toy_init(&t);
    for (int i = 0; i < N; i++)
        tok[i] = (int32_t)((i * 37 + 11) % VOCAB);
    cairn_thread_pool_t *tp = NULL;
    assert_int_equal(cairn_thread_pool_create(2, &tp), CAIRN_OK);
    char err[160];
    compute_backend_t *best = NULL, *scalar = NULL;
    compute_backend_options_t bo = {.pool = tp};
    assert_int_equal(compute_backend_create("cpu", &bo, &best, err, sizeof(err)), CAIRN_OK);
    compute_backend_options_t so = {.n_threads = 3, .impl = "scalar"};
    assert_int_equal(compute_backend_create("cpu", &so, &scalar, err, sizeof(err)), CAIRN_OK);
    compute_backend_t *dbl = rec_create(best);

    for (int math = 0; math < 2; math++) {
        memset(&kvs, 0, sizeof(kvs));
        toy_forward_kernels(tp, &t, &kvs, tok, 0, N, ref, (cairn_math_t)math);
        memset(got, 0xff, sizeof(got));
        run_backend(best, &t, tok, N, got, (cairn_math_t)math);
        assert_memory_equal(got, ref, sizeof(float) * N * VOCAB);
        memset(got, 0xff, sizeof(got));
        run_backend(scalar, &t, tok, N, got, (cairn_math_t)math);
        assert_memory_equal(got, ref, sizeof(float) * N * VOCAB);

        memset(rec(dbl)->calls, 0, sizeof(rec(dbl)->calls));
        rec(dbl)->matmul_products = 0;
        memset(got, 0xff, sizeof(got));
        run_backend(dbl, &t, tok, N, got, (cairn_math_t)math);
        assert_memory_equal(got, ref, sizeof(float) * N * VOCAB);
        /* What the pass asked of the backend: 4 matmul calls per layer + the head, 7
         * products; 2 norms per layer + 1; 2 ropes and 2 K/V stores per row and layer. */
        const rec_backend_t *r = rec(dbl);
        assert_int_equal(r->calls[OP_MATMUL], 4 * L + 1);
        assert_int_equal(r->matmul_products, 7 * L + 1);
        assert_int_equal(r->calls[OP_RMSNORM], 2 * L + 1);
        assert_int_equal(r->calls[OP_ROPE], 2 * L);
        assert_int_equal(r->calls[OP_KV_STORE], 2 * L * N);
        assert_int_equal(r->calls[OP_ATTENTION], L);
        assert_int_equal(r->calls[OP_GLU], L);
        assert_int_equal(r->calls[OP_ADD], 2 * L);
        assert_int_equal(r->calls[OP_GET_ROWS], 1);
        assert_int_equal(r->calls[OP_ROPE_ANGLES], 1);
        assert_string_equal(compute_numerics_id(dbl, (cairn_math_t)math, CAIRN_DTYPE_BF16), compute_numerics_id(best, (cairn_math_t)math, CAIRN_DTYPE_BF16));

        /* Token by token through the backend (decode) gives the prefill's bits. */
        compute_attn_t *a = NULL;
        assert_int_equal(compute_attn_create(best, &toy_attn, &a), CAIRN_OK);
        memset(&kvs, 0, sizeof(kvs));
        for (int i = 0; i < N; i++)
            toy_forward_backend(best, a, &t, &kvs, tok + i, i, 1, got + (size_t)i * VOCAB, (cairn_math_t)math);
        assert_memory_equal(got, ref, sizeof(float) * N * VOCAB);
        compute_attn_destroy(best, a);
    }
    compute_backend_destroy(dbl);
    compute_backend_destroy(scalar);
    compute_backend_destroy(best);
    cairn_thread_pool_destroy(tp);
    toy_fini(&t);
}

/* Registry, options, numerics ids and capabilities. */
static uint32_t rp_rng = 0x12345678u;
static float rp_rnd(void)
{
    rp_rng = rp_rng * 1664525u + 1013904223u;
    return (float)(int32_t)(rp_rng >> 8 & 0xffff) / 8192.0f - 4.0f;
}

/* One run of every row-parallel op on backend be into out[] (fresh copies of the inputs). */
enum { RP_ROWS = 70, RP_COLS = 1000, RP_N = 100003, RP_HEADS = 16, RP_HD = 128, RP_POS = 300,
       RP_X = 100 * RP_HEADS * RP_HD /* x: the largest input (RoPE's 100 rows) */ };
typedef struct {
    float norm[RP_ROWS * RP_COLS], norm_bf[RP_ROWS * RP_COLS], norm_inplace[RP_ROWS * RP_COLS];
    float angles[RP_POS * RP_HD], rope[100 * RP_HEADS * RP_HD];
    float glu[COMPUTE_GLU_COUNT][RP_N], add[RP_N], mul[RP_N], scale[RP_N];
} rp_out_t;

static void rp_run(compute_backend_t *be, rp_out_t *o, const float *x, const float *y, const float *w,
                   const uint16_t *wb, const float *inv_freq, const int *pos)
{
    compute_mat_t wf = {w, CAIRN_DTYPE_F32, 1, RP_COLS}, wbf = {wb, CAIRN_DTYPE_BF16, 1, RP_COLS};
    compute_rmsnorm(be, o->norm, x, RP_ROWS, wf, 1e-6f, false);
    compute_rmsnorm(be, o->norm_bf, x, RP_ROWS, wbf, 1e-6f, true);
    memcpy(o->norm_inplace, x, sizeof o->norm_inplace);
    compute_rmsnorm(be, o->norm_inplace, o->norm_inplace, RP_ROWS, wf, 1e-6f, false);
    compute_rope_angles(be, o->angles, inv_freq, RP_HD / 2, pos, RP_POS);
    memcpy(o->rope, x, sizeof o->rope);
    compute_rope(be, o->rope, 100, RP_HEADS, RP_HD, RP_HD - 32, o->angles);
    for (int a = 0; a < COMPUTE_GLU_COUNT; a++)
        compute_glu(be, o->glu[a], x, y, RP_N, (compute_glu_t)a);
    memcpy(o->add, x, sizeof o->add);
    compute_add(be, o->add, y, RP_N);
    compute_mul(be, o->mul, x, y, RP_N);
    memcpy(o->scale, y, sizeof o->scale);
    compute_scale(be, o->scale, 0.37f, RP_N);
}

static void test_row_ops_any_thread_count(void **state)
{
    (void)state;
    char err[200];
    float *x = malloc(sizeof(float) * RP_X), *y = malloc(sizeof(float) * RP_N),
          *w = malloc(sizeof(float) * RP_COLS), inv_freq[RP_HD / 2];
    uint16_t *wb = malloc(sizeof(uint16_t) * RP_COLS);
    int pos[RP_POS];
    rp_out_t *want = malloc(sizeof *want), *got = malloc(sizeof *got);
    assert_true(x && y && w && wb && want && got);
    for (int i = 0; i < RP_X; i++)
        x[i] = rp_rnd();
    for (int i = 0; i < RP_N; i++)
        y[i] = rp_rnd();
    for (int i = 0; i < RP_COLS; i++) {
        w[i] = rp_rnd() * 0.25f;
        wb[i] = kern_f32_to_bf16(w[i]);
    }
    for (int i = 0; i < RP_HD / 2; i++)
        inv_freq[i] = powf(1e6f, -2.0f * (float)i / RP_HD);
    for (int i = 0; i < RP_POS; i++)
        pos[i] = 37 * i + 5;
    compute_backend_t *be = NULL;
    compute_backend_options_t o = {.n_threads = 1};
    assert_int_equal(compute_backend_create("cpu", &o, &be, err, sizeof(err)), CAIRN_OK);
    rp_run(be, want, x, y, w, wb, inv_freq, pos);
    compute_backend_destroy(be);
    static const int threads[] = {2, 3, 5};
    for (size_t t = 0; t < CAIRN_ARRAY_LEN(threads); t++) {
        o.n_threads = threads[t];
        assert_int_equal(compute_backend_create("cpu", &o, &be, err, sizeof(err)), CAIRN_OK);
        memset(got, 0xff, sizeof *got);
        rp_run(be, got, x, y, w, wb, inv_freq, pos);
        compute_backend_destroy(be);
        if (memcmp(want, got, sizeof *want)) {
            const unsigned char *a = (const unsigned char *)want, *b = (const unsigned char *)got;
            size_t i = 0;
            while (a[i] == b[i])
                i++;
            fail_msg("%d threads: row-parallel ops differ from 1 thread at byte %zu of %zu", threads[t], i,
                     sizeof *want);
        }
    }
    free(x);
    free(y);
    free(w);
    free(wb);
    free(want);
    free(got);
}

static void test_registry_and_capabilities(void **state)
{
    (void)state;
    char err[200];
    compute_backend_t *be = NULL;
    const char *const *names = compute_backend_names();
    assert_string_equal(names[0], "cpu");
    assert_string_equal(names[1], "cuda");
    assert_null(names[2]);
#ifndef CAIRN_TEST_HAVE_CUDA
    /* A build without CUDA knows the name and says what is missing. */
    assert_int_equal(compute_backend_create("cuda", NULL, &be, err, sizeof(err)), CAIRN_EUNSUPPORTED);
    assert_null(be);
    assert_non_null(strstr(err, "CAIRN_CUDA"));
#endif
    assert_int_equal(compute_backend_create("tpu", NULL, &be, err, sizeof(err)), CAIRN_ENOENT);
    assert_null(be);
    assert_non_null(strstr(err, "tpu"));
    compute_backend_options_t o = {.impl = "nonsense"};
    assert_int_equal(compute_backend_create("cpu", &o, &be, err, sizeof(err)), CAIRN_EINVAL);
    assert_non_null(strstr(err, "nonsense"));
    o = (compute_backend_options_t){.n_threads = -3};
    assert_int_equal(compute_backend_create("cpu", &o, &be, err, sizeof(err)), CAIRN_EINVAL);
    /* The f32 attention order (whatever the CPU would choose), then the pair order of bf16
     * K/V (attention_impl.h), which has ids of its own: a cache written under one is never
     * restored under the other (the ids name the cold tier's directories). */
    kern__attn_pair_set(1);
    assert_int_equal(compute_backend_create("cpu", NULL, &be, err, sizeof(err)), CAIRN_OK);
    assert_string_equal(compute_numerics_id(be, CAIRN_MATH_F32, CAIRN_DTYPE_BF16), "cpu-attnpair1-f32.2");
    assert_string_equal(compute_numerics_id(be, CAIRN_MATH_BF16, CAIRN_DTYPE_BF16), "cpu-attnpair1-bf16.2");
    compute_backend_destroy(be);
    /* The tile order (AMX-BF16 machines) wins over the pair order, and its ids name the
     * CPU model whose tiles define its bits ("x86f6m207" on the device's Xeon). */
    kern__attn_tile_set(1);
    assert_int_equal(compute_backend_create("cpu", NULL, &be, err, sizeof(err)), CAIRN_OK);
    char want[96];
    snprintf(want, sizeof want, "cpu-attntile1-%s-f32.2", kern__attn_tile_cpu());
    assert_string_equal(compute_numerics_id(be, CAIRN_MATH_F32, CAIRN_DTYPE_BF16), want);
    snprintf(want, sizeof want, "cpu-attntile1-%s-bf16.2", kern__attn_tile_cpu());
    assert_string_equal(compute_numerics_id(be, CAIRN_MATH_BF16, CAIRN_DTYPE_BF16), want);
    compute_backend_destroy(be);
    kern__attn_tile_set(0);
    kern__attn_pair_set(0);
    const char *x86[] = {"avx2", "avx512", "avx512-emubf16", "amx"};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(x86); i++) {
        o = (compute_backend_options_t){.impl = x86[i]};
        int rc = compute_backend_create("cpu", &o, &be, err, sizeof(err));
        assert_int_equal(rc, kern_impl_available(x86[i]) ? CAIRN_OK : CAIRN_EUNSUPPORTED);
        if (rc == CAIRN_OK) {
            /* Every CPU implementation has the canonical numerics. */
            assert_string_equal(compute_numerics_id(be, CAIRN_MATH_F32, CAIRN_DTYPE_BF16), "f32.2");
            assert_string_equal(compute_numerics_id(be, CAIRN_MATH_BF16, CAIRN_DTYPE_BF16), "bf16.2");
            compute_backend_destroy(be);
        }
    }
    assert_int_equal(compute_backend_create(NULL, NULL, &be, err, sizeof(err)), CAIRN_OK);
    assert_string_equal(be->ops->name, "cpu");
    assert_true(be->ops->host_memory);
    assert_string_equal(compute_numerics_id(be, CAIRN_MATH_F32, CAIRN_DTYPE_BF16), "f32.2");
    assert_string_equal(compute_numerics_id(be, CAIRN_MATH_BF16, CAIRN_DTYPE_BF16), "bf16.2");
    /* The optional ops, both present (tests/compute/test_short_conv.c and
     * test_delta_rule.c); an unknown type is reported with a message. */
    assert_true(compute_supports(be, COMPUTE_OP_SHORT_CONV, CAIRN_DTYPE_BF16));
    assert_true(compute_supports(be, COMPUTE_OP_DELTA_RULE, CAIRN_DTYPE_F32));
    assert_non_null(be->ops->short_conv);
    assert_non_null(be->ops->delta_rule);
    assert_int_equal(compute_backend_require(be, COMPUTE_OP_DELTA_RULE, CAIRN_DTYPE_BF16, err, sizeof(err)),
                     CAIRN_EUNSUPPORTED); /* its operands are float32 */
    assert_non_null(strstr(err, "gated delta rule kernel"));
    assert_int_equal(compute_backend_require(be, COMPUTE_OP_DELTA_RULE, CAIRN_DTYPE_F32, err, sizeof(err)),
                     CAIRN_OK);
    assert_int_equal(compute_backend_require(be, COMPUTE_OP_MATMUL, CAIRN_DTYPE_BF16, err, sizeof(err)), CAIRN_OK);
    /* Attention parameters are checked. */
    compute_attn_t *a = NULL;
    compute_attn_params_t p = {6, 4, 64, CAIRN_DTYPE_BF16, 128, 0, 0.0f, 0.0f};
    assert_int_equal(compute_attn_create(be, &p, &a), CAIRN_EINVAL); /* 6 heads over 4 K/V heads */
    p = (compute_attn_params_t){8, 2, 64, CAIRN_DTYPE_BF16, 128, -1, 0.0f, 0.0f};
    assert_int_equal(compute_attn_create(be, &p, &a), CAIRN_EINVAL);
    p = (compute_attn_params_t){8, 2, 64, (cairn_dtype_t)42, 128, 0, 0.0f, 0.0f};
    assert_int_equal(compute_attn_create(be, &p, &a), CAIRN_EUNSUPPORTED);
    assert_null(a);
    compute_backend_destroy(be);
}

static void test_buffers(void **state)
{
    (void)state;
    compute_backend_t *be = NULL;
    assert_int_equal(compute_backend_create("cpu", NULL, &be, NULL, 0), CAIRN_OK);
    compute_buffer_t b;
    assert_int_equal(compute_buffer_alloc(be, 1000, &b), CAIRN_OK);
    assert_int_equal((uintptr_t)b.data % 64, 0);
    assert_int_equal(b.bytes, 1000);
    char src[100], dst[100];
    for (int i = 0; i < 100; i++)
        src[i] = (char)i;
    assert_int_equal(compute_buffer_write(be, &b, 900, src, 100), CAIRN_OK);
    assert_int_equal(compute_buffer_read(be, &b, 900, dst, 100), CAIRN_OK);
    assert_memory_equal(src, dst, 100);
    assert_int_equal(compute_buffer_write(be, &b, 901, src, 100), CAIRN_ERANGE);
    assert_int_equal(compute_buffer_read(be, &b, 1001, dst, 0), CAIRN_ERANGE);
    assert_int_equal(compute_buffer_read(be, &b, SIZE_MAX, dst, 2), CAIRN_ERANGE);
    compute_buffer_free(be, &b);
    assert_null(b.data);
    compute_buffer_free(be, &b); /* a zeroed buffer is a no-op */
    /* Host memory is wrapped, not copied, on a host-memory backend. */
    assert_int_equal(compute_buffer_from_host(be, src, sizeof(src), &b), CAIRN_OK);
    assert_ptr_equal(b.data, src);
    compute_buffer_free(be, &b);
    /* Allocation failure is reported. */
    cairn_alloc_fail_after(0, false);
    assert_int_equal(compute_buffer_alloc(be, 64, &b), CAIRN_ENOMEM);
    cairn_alloc_fail_after(-1, false);
    compute_backend_destroy(be);
}

int main(void)
{
    kern__attn_pair_set(0); /* the f32 attention order's ids and bits, on any CPU */
    kern__attn_tile_set(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_through_backends),
        cmocka_unit_test(test_row_ops_any_thread_count),
        cmocka_unit_test(test_registry_and_capabilities),
        cmocka_unit_test(test_buffers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
