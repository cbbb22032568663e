/*
 * The tile order of bf16 K/V attention (attention_impl.h, steps 1T and 4T;
 * src/compute/cpu/x86/attention_tile.c) on any AVX-512 CPU: the file is compiled here with
 * its tile instructions replaced by a software model (amx_tile_model.h; tdpbf16ps of any
 * K as ONE rounding of the double sum of the step's products added to c, bf16 input
 * denormals as zero, output denormals flushed — a stand-in for the Xeon's fused adder,
 * which is not characterized: the tile order's bits are whatever the CPU's are, so what
 * is checked here is the structure, not a rounding). Checks, through whole attention
 * calls on the modelled tiles (attn_tile_checks.h): decode = prefill = chunks of 7 =
 * chunks on 3 threads bit for bit (causal, a window with a soft-cap, a null run; NaN bits
 * in the cache past the stored positions), at head_dim 128 with 2 heads per K/V head and
 * head_dim 80 (zero-padded to 96) with 4; and the result within 2e-2 of the textbook
 * formula. And the file's sanity check: it passes on the model, and fails on a model
 * whose rows are not independent (what a broken tile configuration looks like).
 * The real tiles run the same checks in test_attention_tile on an AMX-BF16 machine.
 * Built twice: with the file's AVX-512 packing (skips without AVX512_BF16), and as
 * test_attention_tile_emulated_portable with ATTN_TILE_PORTABLE (its plain-C packing and
 * the generic softmax: runs on any x86 CPU).
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

static int model; /* 0: one rounding per K step (rows independent); 1: rows leak into each other */

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
            double sum = 0;
            for (int k = 0; k < tmm[a].colsb / 4; k++) {
                const float a0 = bf16_in(tmm[a].d[m] + 4 * k), a1 = bf16_in(tmm[a].d[m] + 4 * k + 2);
                const float b0 = bf16_in(tmm[b].d[k] + 4 * n), b1 = bf16_in(tmm[b].d[k] + 4 * n + 2);
                sum += (double)a0 * b0 + (double)a1 * b1;
            }
            if (model == 1)
                sum += 1e-3 * bf16_in(tmm[a].d[(m + 1) % tmm[a].rows]);
            acc = flush((float)((double)acc + sum));
            memcpy(tmm[c].d[m] + 4 * n, &acc, 4);
        }
}

#undef _tile_dpbf16ps
#define _tile_dpbf16ps(c, a, b) emu_dpbf16ps(c, a, b)
/* The library has the real tiles under these names; the modelled ones get others. */
#define attn__amx_tile emu_attn_tile
#define kern__attn_tile_amx_usable emu_tile_usable
#define kern__attn_tile_amx_state emu_tile_state
#include "compute/cpu/x86/x86_impls.h"
#include "compute/cpu/x86/attention_tile.c"

#include "attn_tile_checks.h"

/* The process's kernels with the modelled tile order as their bf16 K/V attention. */
static kern_impl_t modelled;
static attn_impl_t modelled_attn;

static void test_identity(void **state)
{
    (void)state;
    model = 0;
    kern__attn_tile_set(1);
    tc_nh = 4, tc_nkv = 2, tc_hd = 128, tc_n = 330;
    tile_identity(&modelled);
    tc_nh = 8, tc_nkv = 2, tc_hd = 80, tc_n = 280;
    tile_identity(&modelled);
    kern__attn_tile_set(-1);
}

static void test_accuracy(void **state)
{
    (void)state;
    model = 0;
    kern__attn_tile_set(1);
    tc_nh = 4, tc_nkv = 2, tc_hd = 128, tc_n = 200;
    const double e = tile_max_error(&modelled);
    printf("tile order (modelled tiles) vs the textbook formula: max |d| %.3g\n", e);
    assert_true(e < 2e-2);
    kern__attn_tile_set(-1);
}

static void test_sanity_check(void **state)
{
    (void)state;
    model = 0;
    assert_int_equal(sanity_check(), 1);
    model = 1;
    assert_int_equal(sanity_check(), 0);
    model = 0;
}

int main(void)
{
    kern_init();
#ifndef ATTN_TILE_PORTABLE
    if (!kern__x86_has_avx512_bf16()) {
        printf("test_attention_tile_emulated: skipped: the packing needs AVX512_BF16 "
               "(test_attention_tile_emulated_portable runs the portable one)\n");
        return 0;
    }
#endif
    modelled = *kern__current();
    modelled_attn = *modelled.attn;
    modelled_attn.tile = &emu_attn_tile;
    modelled.attn = &modelled_attn;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_accuracy),
        cmocka_unit_test(test_sanity_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
