/*
 * The AMX-INT8 kernels (src/compute/cpu/x86/quant_amx.c) on any x86 CPU: the file is
 * compiled here with its tile instructions (ldtilecfg, tilezero, tileloadd, tilestored,
 * tdpbssd, tilerelease) replaced by a software model of their architectural semantics
 * (Intel SDM: a tile is rows x colsb bytes from the configuration; tdpbssd adds, for each
 * C element, the dot products of 4 signed bytes of A's row with 4 signed bytes of B's
 * column group, over A's colsb / 4 groups), so the packing, the digit split of the
 * k-quant weights, the tile shapes, the remainder rows and the float folds are checked
 * against the portable rows bit for bit on machines without AMX. What this cannot check
 * is the hardware itself: on an AMX machine test_quant_kernels and
 * test_quant_determinism run the real instructions (skipped with a reason elsewhere).
 * The model also checks each tdpbssd's shapes against the configuration (C rows = A
 * rows, C colsb = B colsb, A colsb / 4 = B rows) and that no tile is used unconfigured.
 *
 * The AMX-BF16 matmul (bf16_amx.c) likewise, with tdpbf16ps modelled three ways: the SDM's
 * (per C element, each pair's even element then its odd one, each product added with one
 * RNE rounding, bf16 input denormals as zero, output denormals flushed), the odd element
 * first, and each pair's two products summed before one rounding. The kernel's probe must
 * tell the three apart (the last one runs no tiles), and with either sequential order its
 * rows must equal the portable BF16-math rows bit for bit, on values near the denormal
 * range as well. A fourth model (the SDM's order rounding toward zero) passes the probe
 * and must fail the kernel's self-check, as the device's Xeon did (docs/PERFORMANCE.md).
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
#include <fenv.h>
#include <cmocka.h>
#include <immintrin.h>

/* ---- the tile model ---------------------------------------------------------------------- */

#include "amx_tile_model.h"

static void emu_dpbssd(int c, int a, int b)
{
    assert_true(configured);
    assert_int_equal(tmm[c].rows, tmm[a].rows);
    assert_int_equal(tmm[c].colsb, tmm[b].colsb);
    assert_int_equal(tmm[a].colsb / 4, tmm[b].rows);
    for (int m = 0; m < tmm[c].rows; m++)
        for (int n = 0; n < tmm[c].colsb / 4; n++) {
            int32_t acc;
            memcpy(&acc, tmm[c].d[m] + 4 * n, 4);
            for (int k = 0; k < tmm[a].colsb / 4; k++)
                for (int i = 0; i < 4; i++)
                    acc += (int8_t)tmm[a].d[m][4 * k + i] * (int8_t)tmm[b].d[k][4 * n + i];
            memcpy(tmm[c].d[m] + 4 * n, &acc, 4);
        }
}

/* tdpbf16ps: 0 the SDM's order (even element first), 1 odd first, 2 each pair summed once,
 * 3 the SDM's order rounding toward zero (passes the probe, fails the self-check). */
static int bf16_model;

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
                if (bf16_model == 0 || bf16_model == 3) {
                    if (bf16_model == 3)
                        fesetround(FE_TOWARDZERO);
                    acc = flush(fmaf(a0, b0, acc));
                    acc = flush(fmaf(a1, b1, acc));
                    fesetround(FE_TONEAREST);
                } else if (bf16_model == 1) {
                    acc = flush(fmaf(a1, b1, acc));
                    acc = flush(fmaf(a0, b0, acc));
                } else {
                    acc = flush((float)((double)a0 * b0 + (double)a1 * b1 + (double)acc));
                }
            }
            memcpy(tmm[c].d[m] + 4 * n, &acc, 4);
        }
}

#undef _tile_dpbf16ps
#define _tile_dpbf16ps(c, a, b) emu_dpbf16ps(c, a, b)
#undef _tile_dpbssd
#define _tile_dpbssd(c, a, b) emu_dpbssd(c, a, b)
/* The library has the real kernels under these names; the emulated ones get others. */
#define kern__amx_qmm_q8_0 emu_amx_qmm_q8_0
#define kern__amx_qmm_q4_0 emu_amx_qmm_q4_0
#define kern__amx_qmm_q4_k emu_amx_qmm_q4_k
#define kern__amx_qmm_q5_k emu_amx_qmm_q5_k
#define kern__amx_qmm_q6_k emu_amx_qmm_q6_k
#define kern__amx_qmm_q8_0_table emu_amx_qmm_q8_0_table
#define kern__amx_qmm_q4_0_table emu_amx_qmm_q4_0_table
#define kern__amx_qmm_q4_k_table emu_amx_qmm_q4_k_table
#define kern__amx_qmm_q5_k_table emu_amx_qmm_q5_k_table
#define kern__amx_qmm_q6_k_table emu_amx_qmm_q6_k_table
#define kern__amx_qmm_table_bytes_kq emu_amx_qmm_table_bytes_kq
#define kern__amx_qmm_table_bytes_b32 emu_amx_qmm_table_bytes_b32
#define kern__amx_qmm_table_fill_q4_k emu_amx_qmm_table_fill_q4_k
#define kern__amx_qmm_table_fill_q6_k emu_amx_qmm_table_fill_q6_k
#define kern__amx_qmm_table_fill_q8_0 emu_amx_qmm_table_fill_q8_0
#define kern__amx_qmm_table_fill_q4_0 emu_amx_qmm_table_fill_q4_0
#define kern__amx_matmul_bf16w emu_amx_matmul_bf16w
#define kern__amx_bf16_state emu_amx_bf16_state
#include "compute/cpu/x86/x86_impls.h"
void emu_amx_qmm_q8_0(KERN_QMM_ARGS);
void emu_amx_qmm_q4_0(KERN_QMM_ARGS);
void emu_amx_qmm_q4_k(KERN_QMM_ARGS);
void emu_amx_qmm_q5_k(KERN_QMM_ARGS);
void emu_amx_qmm_q6_k(KERN_QMM_ARGS);
#include "compute/cpu/x86/quant_amx.c"
#include "compute/cpu/x86/bf16_amx.c"

/* ---- the test ---------------------------------------------------------------------------- */

#include "compute/type_traits.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) { return (float)((int)(rnd32() % 2000001) - 1000000) * 1e-6f; }

/* Random quant bits with plausible f16 scales (q6_k's d last, the others' first). */
static void random_weights(unsigned char *w, cairn_dtype_t t, int rows, int in)
{
    const size_t rb = cairn_dtype_row_bytes(t, in), nb = (size_t)rows * (size_t)(in / cairn_dtype_block_elems(t));
    const size_t bb = rb * (size_t)rows / nb;
    for (size_t i = 0; i < rb * (size_t)rows; i++)
        w[i] = (unsigned char)rnd32();
    for (size_t b = 0; b < nb; b++) {
        uint16_t d = compute_f32_to_f16(rndf() * 0.02f), dm = compute_f32_to_f16(fabsf(rndf()) * 0.01f);
        unsigned char *blk = w + b * bb;
        if (t == CAIRN_DTYPE_Q6_K) {
            memcpy(blk + 208, &d, 2);
        } else {
            memcpy(blk, &d, 2);
            if (t == CAIRN_DTYPE_Q4_K || t == CAIRN_DTYPE_Q5_K)
                memcpy(blk + 2, &dm, 2);
        }
    }
}

typedef void qmm_fn(KERN_QMM_ARGS);
typedef void qmm_table_fn(KERN_QMM_ARGS, const void *table);
typedef void fill_fn(KERN_QMM_FILL_ARGS);
typedef size_t bytes_fn(int rows, int n);

/* Rows on both sides of the tile threshold and of whole tiles (pairs, a single last tile,
 * VNNI remainder rows), partial output tiles, short and long inputs, with and without
 * continuing from y: the emulated AMX rows equal the portable rows bit for bit, also when
 * the kernel's side table cannot be allocated (the call falls back to the VNNI rows). */
static void test_emulated_amx_equals_portable(void **state)
{
    (void)state;
    static const cairn_dtype_t types[] = {CAIRN_DTYPE_Q8_0, CAIRN_DTYPE_Q4_0, CAIRN_DTYPE_Q4_K, CAIRN_DTYPE_Q5_K,
                                          CAIRN_DTYPE_Q6_K};
    static qmm_fn *const amx[] = {emu_amx_qmm_q8_0, emu_amx_qmm_q4_0, emu_amx_qmm_q4_k, emu_amx_qmm_q5_k,
                                  emu_amx_qmm_q6_k};
    static qmm_table_fn *const amx_t[] = {emu_amx_qmm_q8_0_table, emu_amx_qmm_q4_0_table, emu_amx_qmm_q4_k_table,
                                          emu_amx_qmm_q5_k_table, emu_amx_qmm_q6_k_table};
    static fill_fn *const fill[] = {emu_amx_qmm_table_fill_q8_0, emu_amx_qmm_table_fill_q4_0,
                                    emu_amx_qmm_table_fill_q4_k, emu_amx_qmm_table_fill_q4_k,
                                    emu_amx_qmm_table_fill_q6_k};
    static bytes_fn *const bytes[] = {emu_amx_qmm_table_bytes_b32, emu_amx_qmm_table_bytes_b32,
                                      emu_amx_qmm_table_bytes_kq, emu_amx_qmm_table_bytes_kq,
                                      emu_amx_qmm_table_bytes_kq};
#ifdef __SANITIZE_ADDRESS__
    /* The model runs ~10x slower instrumented: a tile pair, a single tile, remainder rows
     * and a partial output tile still meet in these. */
    static const int rows_set[] = {33, 49};
    static const int outs_set[] = {17};
#else
    static const int rows_set[] = {1, 31, 32, 33, 48, 49, 64};
    static const int outs_set[] = {1, 16, 17, 50};
#endif
    enum { R = 64, O = 50 };
    if (!kern_impl_available("avx512")) {
        /* quant_amx.c's folds and its remainder rows are AVX-512 (scripts/dev/amx_simde_check.sh
         * runs the file through SIMDe on such a CPU) */
        printf("    skipped: the AMX-INT8 model needs the \"avx512\" kernels' CPU (AVX-512 VNNI) on this CPU\n");
        skip();
    }
    const kern_impl_t *portable = kern__impl_by_name("scalar");
    assert_non_null(portable);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const kern_type_ops_t *sc = &portable->types[types[t]];
        const cairn_dtype_t act = sc->act;
        const int be = cairn_dtype_block_elems(types[t]);
        /* one block; a piece and one block; fewer blocks than the q8_0 tiles run ahead (3) */
        const int ins[] = {be == 32 ? 32 : 256, be == 32 ? 1056 : 1280, be == 32 ? 96 : 768};
        for (size_t ii = 0; ii < 3; ii++) {
            const int in = ins[ii];
            const size_t ldw = cairn_dtype_row_bytes(types[t], in), ldq = cairn_dtype_row_bytes(act, in);
            unsigned char *w = malloc(ldw * O), *xq = malloc(ldq * R);
            int32_t *sums = malloc(sizeof(int32_t) * R * (size_t)(in / 32));
            float *x = malloc(sizeof(float) * R * (size_t)in), *y0 = malloc(sizeof(float) * R * O),
                  *y1 = malloc(sizeof(float) * R * O);
            assert_true(w && xq && sums && x && y0 && y1);
            random_weights(w, types[t], O, in);
            for (size_t i = 0; i < (size_t)R * in; i++)
                x[i] = rndf() * (i % 53 == 0 ? 20.0f : 1.0f);
            for (int r = 0; r < R; r++) {
                portable->types[act].from_f32(xq + (size_t)r * ldq, x + (size_t)r * in, in);
                kern__q8_0_sums(sums + r * (in / 32), xq + (size_t)r * ldq, in / 32);
            }
            const int32_t *xs = act == CAIRN_DTYPE_Q8_0 ? sums : NULL;
            for (size_t ri = 0; ri < sizeof rows_set / sizeof rows_set[0]; ri++)
                for (size_t oi = 0; oi < sizeof outs_set / sizeof outs_set[0]; oi++)
                    for (int acc = 0; acc < 2; acc++) {
                        const int rows = rows_set[ri], out = outs_set[oi];
                        for (int i = 0; i < R * O; i++)
                            y0[i] = y1[i] = acc ? 0.25f * (float)(i % 7) : 0.0f;
                        sc->qmatmul_range(y0, out, xq, ldq, xs, rows, in, w, ldw, 0, out, acc);
                        amx[t](y1, out, xq, ldq, xs, rows, in, w, ldw, 0, out, acc);
                        if (memcmp(y0, y1, sizeof(float) * (size_t)rows * out))
                            fail_msg("emulated amx %s: rows %d in %d out %d acc %d differ from the portable rows",
                                     cairn_dtype_name(types[t]), rows, in, out, acc);
                        /* the side table of the activation terms not had: every row on the
                         * VNNI kernel, the same bits */
                        for (int i = 0; i < R * O; i++)
                            y1[i] = acc ? 0.25f * (float)(i % 7) : 0.0f;
                        cairn_alloc_fail_after(0, false);
                        amx[t](y1, out, xq, ldq, xs, rows, in, w, ldw, 0, out, acc);
                        cairn_alloc_fail_after(-1, false);
                        if (memcmp(y0, y1, sizeof(float) * (size_t)rows * out))
                            fail_msg("emulated amx %s without its side table: rows %d in %d out %d acc %d differ",
                                     cairn_dtype_name(types[t]), rows, in, out, acc);
                        /* the driver's table (none below the tile threshold), filled in two
                         * calls (the second past the last tile: clipped), shared by two
                         * output ranges as by two tasks */
                        const size_t tb = bytes[t](rows, in);
                        assert_true(rows >= 32 ? tb > 0 : tb == 0);
                        if (!tb)
                            continue;
                        void *tmem = NULL;
                        assert_int_equal(posix_memalign(&tmem, 64, tb), 0);
                        memset(tmem, 0xa5, tb);
                        const int tiles = rows / 16;
                        fill[t](tmem, xq, ldq, xs, rows, in, tiles / 2, tiles + 3);
                        fill[t](tmem, xq, ldq, xs, rows, in, 0, tiles / 2);
                        for (int i = 0; i < R * O; i++)
                            y1[i] = acc ? 0.25f * (float)(i % 7) : 0.0f;
                        const int half = out > 16 ? 16 : out;
                        amx_t[t](y1, out, xq, ldq, xs, rows, in, w, ldw, 0, half, acc, tmem);
                        if (half < out)
                            amx_t[t](y1, out, xq, ldq, xs, rows, in, w, ldw, half, out, acc, tmem);
                        free(tmem);
                        if (memcmp(y0, y1, sizeof(float) * (size_t)rows * out))
                            fail_msg("emulated amx %s with the driver's table: rows %d in %d out %d acc %d differ",
                                     cairn_dtype_name(types[t]), rows, in, out, acc);
                    }
            free(w);
            free(xq);
            free(sums);
            free(x);
            free(y0);
            free(y1);
        }
    }
    assert_false(configured); /* every call released its tiles */
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* x near every rounding edge of the BF16 order: f32 denormals (read as zero), values near
 * 2^-126 and products that flush, ordinary values over a wide exponent range. */
static float edge_x(void)
{
    const uint32_t k = rnd32() % 16;
    return k == 0   ? bitsf(rnd32() & 0x807fffffu)
           : k == 1 ? bitsf((rnd32() & 0x80000000u) | 0x007f8000u | (rnd32() & 0x7fff))
           : k == 2 ? ldexpf(rndf(), -120)
                    : ldexpf(rndf(), (int)(rnd32() % 40) - 20);
}

/* The probe tells the three tdpbf16ps models apart; with either sequential order the AMX
 * rows (whole tiles, tile pairs, remainder rows through AVX-512, partial output groups, a
 * tail of blocks past the last 16, inputs not a multiple of 32) equal the portable
 * BF16-math rows bit for bit, and so does the fallback when the buffers cannot be had. */
static void test_emulated_amx_bf16_equals_portable(void **state)
{
    (void)state;
    if (!kern__x86_has_avx512_bf16()) {
        printf("    skipped: the AMX-BF16 model needs AVX512_BF16 (vcvtne2ps2bf16, vdpbf16ps) on this CPU\n");
        skip();
    }
    for (bf16_model = 0; bf16_model < 4; bf16_model++)
        assert_int_equal(probe_order(), bf16_model == 0 || bf16_model == 3 ? 1 : bf16_model == 1 ? 0 : -1);
    bf16_model = 0;
    assert_int_equal(self_check(true), 1);
    bf16_model = 1;
    assert_int_equal(self_check(false), 1);
    bf16_model = 3;
    assert_int_equal(self_check(true), 0);
    cairn_alloc_fail_after(0, true);
    assert_int_equal(self_check(true), -1); /* no memory: undecided */
    cairn_alloc_fail_after(-1, false);
    /* Off unless asked for; asked for, this CPU's decision: without AMX-BF16, none; with it
     * (the device's Xeon), the modelled tiles' (model 3: passes the probe, fails the
     * self-check). */
    unsetenv("CAIRN_AMX_BF16");
    assert_non_null(strstr(emu_amx_bf16_state(), "off unless CAIRN_AMX_BF16=1"));
    amx_bf16_mode = BF16_UNKNOWN;
    setenv("CAIRN_AMX_BF16", "1", 1);
    const char *decided = emu_amx_bf16_state();
    printf("    with CAIRN_AMX_BF16=1 on this CPU: %s\n", decided);
    assert_non_null(strstr(decided, kern__x86_has_amx_bf16() ? "differs from vdpbf16ps" : "no AMX-BF16"));
    unsetenv("CAIRN_AMX_BF16");
#ifdef __SANITIZE_ADDRESS__
    static const int rows_set[] = {49};
    static const int ins[] = {77, 544};
    static const int outs_set[] = {17};
#else
    static const int rows_set[] = {1, 32, 33, 48, 49, 64};
    static const int ins[] = {32, 77, 512, 544, 1056};
    static const int outs_set[] = {1, 16, 17, 50};
#endif
    enum { R = 64, O = 50, IN = 1056 };
    const kern_impl_t *portable = kern__impl_by_name("scalar");
    assert_non_null(portable);
    float *x = malloc(sizeof(float) * R * IN), *y0 = malloc(sizeof(float) * R * O), *y1 = malloc(sizeof(float) * R * O);
    uint16_t *w = malloc(sizeof(uint16_t) * O * IN);
    assert_true(x && y0 && y1 && w);
    for (bf16_model = 0; bf16_model < 2; bf16_model++) {
        amx_bf16_mode = bf16_model == 0 ? BF16_TILES_SWAPPED : BF16_TILES; /* what the probe said above */
        for (size_t ii = 0; ii < sizeof ins / sizeof ins[0]; ii++) {
            const int in = ins[ii];
            for (int i = 0; i < R * in; i++)
                x[i] = edge_x();
            for (int i = 0; i < O * in; i++)
                w[i] = rnd32() % 16 == 0 ? (uint16_t)(rnd32() & 0x807f)
                                         : kern_f32_to_bf16(ldexpf(rndf(), (int)(rnd32() % 40) - 20));
            for (size_t ri = 0; ri < sizeof rows_set / sizeof rows_set[0]; ri++)
                for (size_t oi = 0; oi < sizeof outs_set / sizeof outs_set[0]; oi++) {
                    const int rows = rows_set[ri], out = outs_set[oi];
                    portable->types[CAIRN_DTYPE_BF16].matmul_range(y0, x, rows, in, w, out, 0, out, CAIRN_MATH_BF16);
                    memset(y1, 0xff, sizeof(float) * R * O);
                    emu_amx_matmul_bf16w(y1, x, rows, in, w, out, 0, out, CAIRN_MATH_BF16);
                    if (memcmp(y0, y1, sizeof(float) * (size_t)rows * out))
                        fail_msg("emulated amx bf16 (model %d): rows %d in %d out %d differ from the portable rows",
                                 bf16_model, rows, in, out);
                    /* a range of outputs inside the product (the thread pool's split) */
                    if (out == 50) {
                        memset(y1, 0xff, sizeof(float) * R * O);
                        emu_amx_matmul_bf16w(y1, x, rows, in, w, out, 16, 49, CAIRN_MATH_BF16);
                        for (int r = 0; r < rows; r++)
                            if (memcmp(y0 + r * out + 16, y1 + r * out + 16, sizeof(float) * 33))
                                fail_msg("emulated amx bf16: outputs [16, 49) of row %d differ", r);
                    }
                }
        }
        cairn_alloc_fail_after(0, true); /* no buffers: the AVX-512 rows, same bits */
        emu_amx_matmul_bf16w(y1, x, 48, 544, w, 17, 0, 17, CAIRN_MATH_BF16);
        cairn_alloc_fail_after(-1, false);
        portable->types[CAIRN_DTYPE_BF16].matmul_range(y0, x, 48, 544, w, 17, 0, 17, CAIRN_MATH_BF16);
        assert_memory_equal(y0, y1, sizeof(float) * 48 * 17);
    }
    amx_bf16_mode = BF16_NO_AMX;
    free(x);
    free(y0);
    free(y1);
    free(w);
    assert_false(configured);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_emulated_amx_equals_portable),
        cmocka_unit_test(test_emulated_amx_bf16_equals_portable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
