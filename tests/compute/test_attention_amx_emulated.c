/*
 * The pair-order attention tiles (src/compute/cpu/x86/attention_amx.c) on any AVX-512 CPU:
 * the file is compiled here with its tile instructions replaced by a software model
 * (tiles of rows x colsb bytes from the configuration; tdpbf16ps as the device's Xeon
 * computes one pair per C element, RNE(c + RNE(a0 b0 + a1 b1)) with bf16 input denormals
 * as zero and output denormals flushed, docs/PERFORMANCE.md), so the packing of q, K, p
 * and V, the tile shapes, the row and dimension tiles and the p.v accumulators are
 * checked against the AVX-512 emulation (attention_avx512.c) bit for bit here. The model
 * also checks each tdpbf16ps's shapes against the configuration. A second model (each
 * product added with its own rounding, vdpbf16ps's order) must fail the file's
 * self-check: a CPU whose tiles round otherwise keeps them off. The real tiles run in
 * test_attention_amx on an AMX-BF16 machine.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>
#include <immintrin.h>

#include "amx_tile_model.h"

static int model; /* 0: one rounding per pair (the Xeon's); 1: one per product */

static void emu_dpbf16ps(int c, int a, int b)
{
    assert_true(configured);
    assert_int_equal(tmm[c].rows, tmm[a].rows);
    assert_int_equal(tmm[c].colsb, tmm[b].colsb);
    assert_int_equal(tmm[a].colsb / 4, tmm[b].rows);
    for (int m = 0; m < tmm[c].rows; m++)
        for (int n = 0; n < tmm[c].colsb / 4; n++) {
            float acc;
            memcpy(&acc, tmm[c].d[m] + 4 * n, 4);
            for (int k = 0; k < tmm[a].colsb / 4; k++) {
                const float a0 = bf16_in(tmm[a].d[m] + 4 * k), a1 = bf16_in(tmm[a].d[m] + 4 * k + 2);
                const float b0 = bf16_in(tmm[b].d[k] + 4 * n), b1 = bf16_in(tmm[b].d[k] + 4 * n + 2);
                if (model == 0)
                    acc = flush(acc + flush((float)((double)a0 * b0 + (double)a1 * b1)));
                else
                    acc = flush(fmaf(a1, b1, flush(fmaf(a0, b0, acc))));
            }
            memcpy(tmm[c].d[m] + 4 * n, &acc, 4);
        }
}

#undef _tile_dpbf16ps
#define _tile_dpbf16ps(c, a, b) emu_dpbf16ps(c, a, b)
/* The library has the real tiles under these names; the modelled ones get others. */
#define kern__attn_amx_on emu_attn_amx_on
#define kern__attn_amx_state emu_attn_amx_state
#define kern__attn_amx_allow emu_attn_amx_allow
#define kern__attn_amx_scores emu_attn_amx_scores
#define kern__attn_amx_pv_fits emu_attn_amx_pv_fits
#define kern__attn_amx_pv emu_attn_amx_pv
#include "compute/cpu/x86/x86_impls.h"
bool emu_attn_amx_on(void);
const char *emu_attn_amx_state(void);
void emu_attn_amx_allow(bool allow);
void emu_attn_amx_scores(float *s, size_t lds, const float *q, int rows, const float *kt, int hdp);
bool emu_attn_amx_pv_fits(int hd, int cnt);
void emu_attn_amx_pv(float *acc, int lda, const float *p, int ldp, int rows, int cnt, const float *vb, int hd);
#include "compute/cpu/x86/attention_amx.c"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) { return (float)((int)(rnd32() % 2000001) - 1000000) * 1e-6f; }

/* Modelled tiles = the emulation, bit for bit: scores of 16..80 rows (4 row tiles, then
 * fewer) at head_dim 128 and 40 (padded to 48); p.v of 16..48 rows over 1..64 positions
 * (odd counts: the phantom position) at head_dim 128, 80 (4 dim tiles, then 1) and 16. */
static void test_tiles_equal_emulation(void **state)
{
    (void)state;
    enum { MAXR = 80, HDP = 128, LD = 80 };
    static float q[MAXR * HDP], kt[HDP * 16], s0[MAXR * LD], s1[MAXR * LD], p[MAXR * LD], vb[64 * HDP],
        a0[MAXR * HDP], a1[MAXR * HDP], row[HDP];
    model = 0;
    const int hds[] = {128, 40};
    for (size_t hi = 0; hi < 2; hi++) {
        const int hd = hds[hi], hdp = (hd + 15) / 16 * 16;
        for (int rows = 16; rows <= MAXR; rows += 16) {
            for (int r = 0; r < rows; r++) {
                for (int d = 0; d < hd; d++)
                    row[d] = 4.0f * rndf();
                attn__pair_pack_q(q + (size_t)r * hdp, row, hd, hdp);
            }
            for (int i = 0; i < hdp * 16; i++)
                kt[i] = (i / 16) < hd ? attn__bf16_round(2.0f * rndf()) : 0.0f;
            memset(s0, 0, sizeof s0);
            memset(s1, 0, sizeof s1);
            kern__avx512_pair_scores(s0, LD, q, rows, kt, hdp);
            emu_attn_amx_scores(s1, LD, q, rows, kt, hdp);
            assert_memory_equal(s0, s1, sizeof s0);
        }
    }
    const int pv_hds[] = {128, 80, 16};
    for (size_t hi = 0; hi < 3; hi++) {
        const int hd = pv_hds[hi];
        for (int rows = 16; rows <= 48; rows += 16)
            for (int cnt = 1; cnt <= 64; cnt += (cnt < 4 ? 1 : 13)) {
                assert_true(emu_attn_amx_pv_fits(hd, cnt));
                for (int i = 0; i < rows * LD; i++)
                    p[i] = attn__bf16_round(fabsf(rndf()) * 0.2f);
                for (int i = 0; i < 64 * hd; i++)
                    vb[i] = attn__bf16_round(rndf());
                for (int i = 0; i < rows * hd; i++)
                    a0[i] = a1[i] = rndf();
                kern__avx512_pair_pv(a0, hd, p, LD, rows, cnt, vb, hd);
                emu_attn_amx_pv(a1, hd, p, LD, rows, cnt, vb, hd);
                assert_memory_equal(a0, a1, sizeof(float) * (size_t)rows * hd);
            }
    }
}

/* kern__avx512_pair_pack_q (the packing of q the tile orders use) = attn__pair_pack_q bit
 * for bit: special values (zeros, denormals, ties, the largest finite values rounding to
 * infinity, infinities, signalling and quiet NaNs of both signs) and random bit patterns,
 * head dims 1..130 padded to 16, to 32 and beyond; nothing written past hdp values. */
static void test_pack_q_matches_scalar(void **state)
{
    (void)state;
    enum { MAXD = 192 };
    static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00400000u,
                                       0x00800000u, 0x80800000u, 0x3f808000u, 0x3f818000u, 0x3f808001u,
                                       0x3f807fffu, 0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, 0x7f800000u,
                                       0xff800000u, 0x7f800001u, 0xff800001u, 0x7fc00000u, 0xffffffffu,
                                       0x7fbfffffu, 0x00ffffffu, 0x3f7fffffu, 0x4b7fffffu};
    const int nsp = (int)(sizeof special / sizeof special[0]);
    float q[MAXD], a[MAXD + 16], b[MAXD + 16];
    for (int hd = 1; hd <= 130; hd++) {
        const int pads[] = {(hd + 15) / 16 * 16, (hd + 31) / 32 * 32, hd + 48 < MAXD ? hd + 48 : MAXD};
        for (int pi = 0; pi < 3; pi++) {
            const int hdp = pads[pi];
            for (int d = 0; d < MAXD; d++) {
                uint32_t u = (d + hd) % 3 == 0 ? special[(d + 7 * hd) % nsp] : rnd32() ^ (rnd32() << 16);
                memcpy(&q[d], &u, 4);
            }
            memset(a, 0xa5, sizeof a);
            memset(b, 0xa5, sizeof b);
            attn__pair_pack_q(a, q, hd, hdp);
            kern__avx512_pair_pack_q(b, q, hd, hdp);
            assert_memory_equal(a, b, sizeof a);
        }
    }
}

/* The self-check passes on the Xeon's rounding and fails on a per-product rounding. */
static void test_self_check(void **state)
{
    (void)state;
    model = 0;
    assert_int_equal(self_check(), 1);
    model = 1;
    assert_int_equal(self_check(), 0);
    model = 0;
}

int main(void)
{
    if (!kern__x86_has_avx512()) {
        printf("test_attention_amx_emulated: skipped: the emulation it compares against needs AVX-512\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiles_equal_emulation),
        cmocka_unit_test(test_self_check),
        cmocka_unit_test(test_pack_q_matches_scalar),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
