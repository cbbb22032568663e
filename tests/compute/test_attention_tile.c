/*
 * The tile order of bf16 K/V attention (attention_impl.h, steps 1T and 4T) on the real
 * AMX-BF16 tiles (src/compute/cpu/x86/attention_tile.c): decode = prefill = chunks of 7 =
 * chunks on 3 threads bit for bit (causal, a window with a soft-cap, a null run; NaN bits
 * in the cache past the stored positions) at the Qwen3 head shape (16 / 8 heads x 128)
 * and at head_dim 80 with 4 heads per K/V head; the result within 2e-2 of the textbook
 * formula (attn_tile_checks.h). Skips with the reason where the tile order cannot run
 * (no AMX-BF16, or the tiles refused); fails where the CPU has AMX-BF16, the tile data
 * was granted and the tiles failed their sanity check. test_attention_tile_emulated runs
 * the same checks on modelled tiles on any AVX-512 CPU.
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

#include "attn_tile_checks.h"

static void test_identity(void **state)
{
    (void)state;
    kern__attn_tile_set(1);
    tc_nh = 16, tc_nkv = 8, tc_hd = 128, tc_n = 600;
    tile_identity(kern__current());
    tc_nh = 8, tc_nkv = 2, tc_hd = 80, tc_n = 300;
    tile_identity(kern__current());
    kern__attn_tile_set(-1);
}

static void test_accuracy(void **state)
{
    (void)state;
    kern__attn_tile_set(1);
    tc_nh = 16, tc_nkv = 8, tc_hd = 128, tc_n = 600;
    const double e = tile_max_error(kern__current());
    printf("tile order (real tiles) vs the textbook formula: max |d| %.3g\n", e);
    kern__attn_tile_set(0);
    const double e32 = tile_max_error(kern__current());
    printf("f32 order, same problem: max |d| %.3g\n", e32);
    kern__attn_tile_set(-1);
    assert_true(e < 2e-2);
}

int main(void)
{
    kern_init();
    if (!kern__x86_has_amx_bf16()) {
        printf("test_attention_tile: skipped: %s\n", kern__attn_tile_state());
        return 0;
    }
    if (!kern__attn_tile_impl()) {
        printf("test_attention_tile: FAILED: %s\n", kern__attn_tile_state());
        return 1;
    }
    printf("test_attention_tile: %s; numerics tag %s\n", kern__attn_tile_state(), kern__attn_tile_cpu());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_accuracy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
