/*
 * attn_tile_checks.h — the tile order's checks (attention_impl.h, steps 1T and 4T) that
 * test_attention_tile_emulated (modelled tiles, any AVX-512 CPU) and test_attention_tile
 * (the real AMX-BF16 tiles) share. Each runs whole attention calls through
 * kern__attn_forward on a kernel implementation whose bf16 K/V attention takes the tile
 * order, over a flat bf16 K/V store whose positions past the stored ones hold NaN bits
 * (unwritten cache memory) and, optionally, a run without storage (a null block):
 *  - tile_identity: one prefill call of every query (after a short first chunk) = each
 *    query alone (decode) = chunks of 7 = chunks of 64 on 3 threads, bit for bit, for the
 *    plain causal mask, a window with a soft-cap, a null run, and a window of 200;
 *  - tile_accuracy: the prefill result within a stated tolerance of the textbook formula
 *    in double (q and K/V as stored; the tile order rounds q and p to bf16).
 * The includer sets the problem's shape (tc_nh, tc_nkv, tc_hd, tc_n) before each check
 * and includes this after cmocka and attention_impl.h.
 */
#ifndef CAIRN_TESTS_COMPUTE_ATTN_TILE_CHECKS_H
#define CAIRN_TESTS_COMPUTE_ATTN_TILE_CHECKS_H

#include "util/thread_pool.h"

static int tc_nh = 16, tc_nkv = 8, tc_hd = 128, tc_n = 600; /* the problem's shape */

static uint64_t tc_rng = 0x2545f4914f6cdd1dull;
static uint32_t tc_rnd32(void)
{
    tc_rng ^= tc_rng << 13;
    tc_rng ^= tc_rng >> 7;
    tc_rng ^= tc_rng << 17;
    return (uint32_t)(tc_rng >> 16);
}
static float tc_rndf(void) { return (float)((int)(tc_rnd32() % 2000001) - 1000000) * 1e-6f; }

/* A flat bf16 K/V store: positions [0, n) stored, [n, cap) NaN bits never reported;
 * positions [null0, null1) reported without storage. */
typedef struct {
    uint16_t *k, *v;
    int n, cap, kv_dim, null0, null1;
} tc_flat_t;

static int tc_rows(void *ctx, int layer, int pos, void **k, void **v)
{
    tc_flat_t *f = ctx;
    (void)layer;
    if (pos < 0 || pos >= f->n)
        return 0;
    if (pos >= f->null0 && pos < f->null1) {
        *k = *v = NULL;
        return f->null1 - pos;
    }
    *k = f->k + (size_t)pos * f->kv_dim;
    *v = f->v + (size_t)pos * f->kv_dim;
    return (pos < f->null0 ? f->null0 : f->n) - pos;
}

static void tc_fill(tc_flat_t *f, int n)
{
    const int kvd = tc_nkv * tc_hd, cap = n + 64;
    *f = (tc_flat_t){malloc(sizeof(uint16_t) * cap * kvd), malloc(sizeof(uint16_t) * cap * kvd), n, cap, kvd, 0, 0};
    assert_non_null(f->k);
    assert_non_null(f->v);
    float *row = malloc(sizeof(float) * kvd);
    assert_non_null(row);
    for (int pos = 0; pos < n; pos++) {
        for (int i = 0; i < kvd; i++)
            row[i] = 2.0f * tc_rndf();
        kern_row_from_f32(f->k + (size_t)pos * kvd, CAIRN_DTYPE_BF16, row, kvd);
        for (int i = 0; i < kvd; i++)
            row[i] = tc_rndf();
        kern_row_from_f32(f->v + (size_t)pos * kvd, CAIRN_DTYPE_BF16, row, kvd);
    }
    for (size_t i = (size_t)n * kvd; i < (size_t)cap * kvd; i++)
        f->k[i] = f->v[i] = 0x7fc1; /* NaN bits where nothing was written */
    free(row);
}

/* Queries [q0, q0 + n) (query i at position i) in one call. */
static void tc_run(const kern_impl_t *k, cairn_thread_pool_t *tp, int slots, attn_kv_t *kv, const attn_math_t *m,
                   const float *q, float *out, int q0, int n, int n_pos)
{
    const int NH = tc_nh, NKV = tc_nkv, HD = tc_hd;
    attn_cfg_t cfg = {NH, NKV, HD, CAIRN_DTYPE_BF16, NULL, slots, n_pos};
    cfg.scratch = malloc(sizeof(float) * attn_scratch_floats(NH, NKV, HD, n_pos) * (size_t)slots);
    attn_query_t *qs = malloc((size_t)n * sizeof(*qs));
    assert_non_null(cfg.scratch);
    assert_non_null(qs);
    for (int i = 0; i < n; i++)
        qs[i] = (attn_query_t){q + (size_t)(q0 + i) * NH * HD, out + (size_t)(q0 + i) * NH * HD, kv, q0 + i};
    kern__attn_forward(k, tp, &cfg, m, 0, qs, n);
    free(qs);
    free(cfg.scratch);
}

/* decode = prefill = chunks of 7 = chunks of 64 on 3 threads, for three masks. */
static void tile_identity(const kern_impl_t *k)
{
    const int NH = tc_nh, N = tc_n, HD = tc_hd;
    tc_flat_t f;
    tc_fill(&f, N);
    float *q = malloc(sizeof(float) * N * NH * HD);
    assert_non_null(q);
    for (int i = 0; i < N * NH * HD; i++)
        q[i] = 2.0f * tc_rndf();
    attn_kv_t kv = {tc_rows, &f};
    const size_t bytes = sizeof(float) * N * NH * HD;
    float *pre = malloc(bytes), *dec = malloc(bytes), *ch7 = malloc(bytes), *ch64 = malloc(bytes);
    assert_true(pre && dec && ch7 && ch64);
    cairn_thread_pool_t *tp3 = NULL;
    assert_int_equal(cairn_thread_pool_create(3, &tp3), CAIRN_OK);
    /* causal; a window within one p.v block with a soft-cap; a null run; a window of 200
     * (a row's keys cross a 256-key block boundary where it crosses one at absolute
     * positions: blocks anchored anywhere else would split them elsewhere). */
    const attn_math_t maths[] = {{0, 0.0f, 0.0f}, {100, 0.1f, 30.0f}, {0, 0.0f, 0.0f}, {200, 0.0f, 0.0f}};
    for (size_t mi = 0; mi < CAIRN_ARRAY_LEN(maths); mi++) {
        f.null0 = mi == 2 ? 64 : 0; /* a null run of 48 positions, not on a block boundary's end */
        f.null1 = mi == 2 ? 112 : 0;
        const attn_math_t *m = &maths[mi];
        memset(pre, 0, bytes);
        tc_run(k, NULL, 1, &kv, m, q, pre, 0, 37, N);
        tc_run(k, NULL, 1, &kv, m, q, pre, 37, N - 37, N);
        for (int i = 0; i < N; i++)
            tc_run(k, NULL, 1, &kv, m, q, dec, i, 1, N);
        for (int q0 = 0; q0 < N; q0 += 7)
            tc_run(k, NULL, 1, &kv, m, q, ch7, q0, N - q0 < 7 ? N - q0 : 7, N);
        for (int q0 = 0; q0 < N; q0 += 64)
            tc_run(k, tp3, 3, &kv, m, q, ch64, q0, N - q0 < 64 ? N - q0 : 64, N);
        for (int i = 0; i < N * NH * HD; i++)
            assert_true(isfinite(pre[i]));
        assert_memory_equal(pre, dec, bytes);
        assert_memory_equal(pre, ch7, bytes);
        assert_memory_equal(pre, ch64, bytes);
        /* The K/V packed once per call (the prefill above) = loaded by every unit (off) =
         * packed one K/V head per phase = no memory for the pack (the per-unit loads). */
        kern__attn_tile_pack_set(0);
        tc_run(k, tp3, 3, &kv, m, q, ch7, 0, N, N);
        kern__attn_tile_pack_set(-1);
        assert_memory_equal(pre, ch7, bytes);
        kern__attn_tile_pack_budget(1);
        tc_run(k, tp3, 3, &kv, m, q, ch7, 37, N - 37, N); /* under one head: per-unit loads */
        assert_memory_equal(pre, ch7, bytes);
        kern__attn_tile_pack_budget((size_t)300 << 10); /* one head of < 512 positions a phase */
        tc_run(k, tp3, 3, &kv, m, q, ch7, 37, N - 37, N);
        assert_memory_equal(pre, ch7, bytes);
        kern__attn_tile_pack_budget(0);
        kern__attn_tile_pack_drop();
        cairn_alloc_fail_after(0, true);
        tc_run(k, NULL, 1, &kv, m, q, ch7, 37, N - 37, N);
        cairn_alloc_fail_after(-1, false);
        assert_memory_equal(pre, ch7, bytes);
    }
    cairn_thread_pool_destroy(tp3);
    free(pre);
    free(dec);
    free(ch7);
    free(ch64);
    free(q);
    free(f.k);
    free(f.v);
}

static double tc_bf16(const uint16_t *p)
{
    const uint32_t u = (uint32_t)*p << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* max |tile - textbook| over the outputs, the textbook in double over the stored K/V. */
static double tile_max_error(const kern_impl_t *k)
{
    const int NH = tc_nh, N = tc_n, HD = tc_hd, G = tc_nh / tc_nkv;
    tc_flat_t f;
    tc_fill(&f, N);
    float *q = malloc(sizeof(float) * N * NH * HD), *out = malloc(sizeof(float) * N * NH * HD);
    double *s = malloc(sizeof(double) * N);
    assert_true(q && out && s);
    for (int i = 0; i < N * NH * HD; i++)
        q[i] = 2.0f * tc_rndf();
    attn_kv_t kv = {tc_rows, &f};
    tc_run(k, NULL, 1, &kv, NULL, q, out, 0, N, N);
    double worst = 0;
    for (int p = 0; p < N; p += 3)
        for (int h = 0; h < NH; h++) {
            const float *qr = q + ((size_t)p * NH + h) * HD;
            const size_t off = (size_t)(h / G) * HD;
            double mx = -INFINITY, l = 0;
            for (int j = 0; j <= p; j++) {
                double d = 0;
                for (int i = 0; i < HD; i++)
                    d += (double)qr[i] * tc_bf16(f.k + (size_t)j * f.kv_dim + off + i);
                s[j] = d / sqrt((double)HD);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j <= p; j++)
                l += (s[j] = exp(s[j] - mx));
            for (int i = 0; i < HD; i++) {
                double o = 0;
                for (int j = 0; j <= p; j++)
                    o += s[j] * tc_bf16(f.v + (size_t)j * f.kv_dim + off + i);
                const double e = fabs(o / l - out[((size_t)p * NH + h) * HD + i]);
                worst = e > worst ? e : worst;
            }
        }
    free(s);
    free(q);
    free(out);
    free(f.k);
    free(f.v);
    return worst;
}

#endif
