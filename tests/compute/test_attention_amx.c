/*
 * The pair-order attention on the real AMX-BF16 tiles (src/compute/cpu/x86/attention_amx.c)
 * against its AVX-512 emulation, bit for bit: the primitives at the tiles' shapes, and
 * whole attention calls (a 512-query prefill chunk and chunks of 7 at 600 positions, the
 * Qwen3 head shape, bf16 K/V) with the tiles on and off. Skips with the reason on a CPU
 * without AMX-BF16; fails, printing why, where the CPU has AMX-BF16 and the tiles failed
 * their self-check. test_attention_amx_emulated checks the same code against a
 * model of the tiles on any AVX-512 CPU.
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

#include "compute/cpu/attention_impl.h"
#include "compute/cpu/x86/x86_impls.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) { return (float)((int)(rnd32() % 2000001) - 1000000) * 1e-6f; }

static void test_primitives_tiles(void **state)
{
    (void)state;
    enum { MAXR = 128, HDP = 128, LD = 80 };
    static float q[MAXR * HDP], kt[HDP * 16], s0[MAXR * LD], s1[MAXR * LD], p[MAXR * LD], vb[64 * HDP],
        a0[MAXR * HDP], a1[MAXR * HDP], row[HDP];
    for (int rows = 16; rows <= MAXR; rows += 16) {
        for (int r = 0; r < rows; r++) {
            for (int d = 0; d < HDP; d++)
                row[d] = 4.0f * rndf();
            attn__pair_pack_q(q + (size_t)r * HDP, row, HDP, HDP);
        }
        for (int i = 0; i < HDP * 16; i++)
            kt[i] = attn__bf16_round(2.0f * rndf());
        memset(s0, 0, sizeof s0);
        memset(s1, 0, sizeof s1);
        kern__avx512_pair_scores(s0, LD, q, rows, kt, HDP);
        kern__attn_amx_scores(s1, LD, q, rows, kt, HDP);
        assert_memory_equal(s0, s1, sizeof s0);
        for (int cnt = 1; cnt <= 64; cnt += 21) {
            for (int i = 0; i < rows * LD; i++)
                p[i] = attn__bf16_round(fabsf(rndf()) * 0.2f);
            for (int i = 0; i < 64 * HDP; i++)
                vb[i] = attn__bf16_round(rndf());
            for (int i = 0; i < rows * HDP; i++)
                a0[i] = a1[i] = rndf();
            kern__avx512_pair_pv(a0, HDP, p, LD, rows, cnt, vb, HDP);
            kern__attn_amx_pv(a1, HDP, p, LD, rows, cnt, vb, HDP);
            assert_memory_equal(a0, a1, sizeof(float) * (size_t)rows * HDP);
        }
    }
}

/* A flat bf16 K/V store of n positions (one run). */
typedef struct {
    uint16_t *k, *v;
    int n, kv_dim;
} flat_t;

static int flat_rows(void *ctx, int layer, int pos, void **k, void **v)
{
    flat_t *f = ctx;
    (void)layer;
    if (pos < 0 || pos >= f->n)
        return 0;
    *k = f->k + (size_t)pos * f->kv_dim;
    *v = f->v + (size_t)pos * f->kv_dim;
    return f->n - pos;
}

static void run(const flat_t *f, attn_kv_t *kv, const float *q, float *out, int q0, int n, int n_pos)
{
    enum { NH = 16, NKV = 8, HD = 128 };
    attn_cfg_t cfg = {NH, NKV, HD, CAIRN_DTYPE_BF16, NULL, 1, n_pos};
    cfg.scratch = malloc(sizeof(float) * attn_scratch_floats(NH, NKV, HD, n_pos));
    attn_query_t *qs = malloc((size_t)n * sizeof(*qs));
    for (int i = 0; i < n; i++)
        qs[i] = (attn_query_t){q + (size_t)(q0 + i) * NH * HD, out + (size_t)(q0 + i) * NH * HD, kv, q0 + i};
    kern__attn_forward(kern__current(), NULL, &cfg, NULL, 0, qs, n);
    (void)f;
    free(qs);
    free(cfg.scratch);
}

static void test_attention_tiles(void **state)
{
    (void)state;
    enum { NH = 16, NKV = 8, HD = 128, N = 600 };
    flat_t f = {malloc(sizeof(uint16_t) * N * NKV * HD), malloc(sizeof(uint16_t) * N * NKV * HD), N, NKV * HD};
    float *row = malloc(sizeof(float) * NKV * HD), *q = malloc(sizeof(float) * N * NH * HD);
    for (int pos = 0; pos < N; pos++) {
        for (int i = 0; i < NKV * HD; i++)
            row[i] = 2.0f * rndf();
        kern_row_from_f32(f.k + (size_t)pos * NKV * HD, CAIRN_DTYPE_BF16, row, NKV * HD);
        for (int i = 0; i < NKV * HD; i++)
            row[i] = rndf();
        kern_row_from_f32(f.v + (size_t)pos * NKV * HD, CAIRN_DTYPE_BF16, row, NKV * HD);
    }
    for (int i = 0; i < N * NH * HD; i++)
        q[i] = 2.0f * rndf();
    attn_kv_t kv = {flat_rows, &f};
    const size_t bytes = sizeof(float) * N * NH * HD;
    float *tiles = malloc(bytes), *emu = malloc(bytes), *chunks = malloc(bytes);
    kern__attn_pair_set(1);
    run(&f, &kv, q, tiles, 0, 88, N); /* 88 + 512 queries: a prefill chunk after a short one */
    run(&f, &kv, q, tiles, 88, 512, N);
    for (int q0 = 0; q0 < N; q0 += 7) /* chunks of 7: tiles of 14 rows, the emulation only */
        run(&f, &kv, q, chunks, q0, N - q0 < 7 ? N - q0 : 7, N);
    kern__attn_amx_allow(false);
    run(&f, &kv, q, emu, 0, 88, N);
    run(&f, &kv, q, emu, 88, 512, N);
    kern__attn_amx_allow(true);
    kern__attn_pair_set(-1);
    assert_memory_equal(tiles, emu, bytes);
    assert_memory_equal(chunks, emu, bytes);
    free(tiles);
    free(emu);
    free(chunks);
    free(row);
    free(q);
    free(f.k);
    free(f.v);
}

int main(void)
{
    kern_init();
    kern__attn_tile_set(0); /* the pair order's tiles (the tile order: test_attention_tile) */
    if (!kern__x86_has_amx_bf16()) {
        printf("test_attention_amx: skipped: %s\n", kern__attn_amx_state());
        return 0;
    }
    if (!kern__attn_amx_on()) { /* AMX-BF16 present, the tiles refused: report it */
        printf("test_attention_amx: FAILED: %s\n", kern__attn_amx_state());
        return 1;
    }
    printf("test_attention_amx: %s\n", kern__attn_amx_state());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_primitives_tiles),
        cmocka_unit_test(test_attention_tiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
