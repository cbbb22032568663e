/*
 * Tests for the numeric kernels: exact conversions (all 65536 half values, ties, NaN,
 * inf, subnormals), the canonical exp, every implementation this CPU can run against the
 * double-precision references (tolerance ~ sqrt(n)·eps·|x||w|), and the determinism
 * contract as bit identity: rows batched vs one by one, 1/2/3 threads, every
 * implementation vs the scalar one, native vs emulated AVX512_BF16.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "compute/cpu/kernels_impl.h"

static const char *const impls[] = {"scalar", "avx2", "avx512", "avx512-emubf16", "amx"};
static const cairn_dtype_t dtypes[] = {CAIRN_DTYPE_F32, CAIRN_DTYPE_F16, CAIRN_DTYPE_BF16};

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) { return (float)((int)(rnd32() % 2000001) - 1000000) * 1e-6f; }

/* ---- conversions ---- */

static void test_bf16_conversions(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kern_bf16_to_f32((uint16_t)h);
        assert_int_equal(fbits(f), h << 16);
        uint16_t back = kern_f32_to_bf16(f);
        if (isnan(f)) {
            assert_true(isnan(kern_bf16_to_f32(back)));
            assert_int_equal(back & 0x8000, h & 0x8000);
            continue;
        }
        assert_int_equal(back, h);
        if ((h & 0x7fff) >= 0x7f80)
            continue; /* inf: no next value */
        /* Just below, at and just above the midpoint to the next magnitude. */
        uint32_t mid = (h << 16) | 0x8000u;
        assert_int_equal(kern_f32_to_bf16(bitsf(mid - 1)), h);
        assert_int_equal(kern_f32_to_bf16(bitsf(mid + 1)), h + 1);
        assert_int_equal(kern_f32_to_bf16(bitsf(mid)), (h & 1) ? h + 1 : h); /* ties to even */
    }
    assert_int_equal(kern_f32_to_bf16(bitsf(0x7f7f8000u)), 0x7f80); /* max+half -> inf */
    assert_int_equal(kern_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(kern_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(kern_f32_to_bf16(bitsf(0x7f800001u)) & 0x7fc0, 0x7fc0); /* sNaN -> qNaN */
    assert_int_equal(kern_f32_to_bf16(bitsf(0x00000001u)), 0x0000);          /* subnormals */
    assert_int_equal(kern_f32_to_bf16(bitsf(0x00018000u)), 0x0002);
    assert_int_equal(kern_f32_to_bf16(bitsf(0x80008000u)), 0x8000);
}

/* Independent value of an f16 bit pattern. */
static double f16_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static void test_f16_conversions(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        double ref = f16_value((uint16_t)h);
        float f = kern_f16_to_f32((uint16_t)h);
        uint16_t back = kern_f32_to_f16(f);
        if (isnan(ref)) {
            assert_true(isnan(f));
            assert_true(isnan(kern_f16_to_f32(back)));
            continue;
        }
        assert_true((double)f == ref);
        assert_int_equal(signbit(f) != 0, (h & 0x8000) != 0);
        assert_int_equal(back, h);
        uint16_t mag = h & 0x7fff;
        if (mag >= 0x7bff)
            continue; /* max finite and inf */
        /* Midpoint to the next magnitude is exact in f32 (f16 has 11 significant bits). */
        double next = f16_value((uint16_t)(h + 1));
        float mid = (float)((ref + next) / 2);
        assert_true((double)mid == (ref + next) / 2);
        assert_int_equal(kern_f32_to_f16(mid), (h & 1) ? h + 1 : h);
        assert_int_equal(kern_f32_to_f16(nextafterf(mid, 0.0f)), h);
        assert_int_equal(kern_f32_to_f16(nextafterf(mid, (h & 0x8000) ? -INFINITY : INFINITY)), h + 1);
    }
    assert_int_equal(kern_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(kern_f32_to_f16(65519.996f), 0x7bff);
    assert_int_equal(kern_f32_to_f16(65520.0f), 0x7c00); /* tie with odd max -> inf */
    assert_int_equal(kern_f32_to_f16(-1e10f), 0xfc00);
    assert_int_equal(kern_f32_to_f16(0x1p-25f), 0x0000);              /* tie -> even zero */
    assert_int_equal(kern_f32_to_f16(nextafterf(0x1p-25f, 1)), 0x0001);
    assert_int_equal(kern_f32_to_f16(0x1.8p-24f), 0x0002);            /* tie 1.5 -> 2 */
    assert_int_equal(kern_f32_to_f16(bitsf(0x00000001u)), 0x0000);    /* f32 subnormal */
    assert_int_equal(kern_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(kern_f32_to_f16(bitsf(0x7f800001u)) & 0x7e00, 0x7e00);
    assert_int_equal(kern_f32_to_f16(0x1.ffcp-15f), 0x0400); /* rounds up to min normal */
}

static void test_row_conversions(void **state)
{
    (void)state;
    enum { N = 37 };
    float src[N], dst[N];
    uint16_t half[N];
    for (int i = 0; i < N; i++)
        src[i] = rndf() * 100;
    for (size_t d = 0; d < CAIRN_ARRAY_LEN(dtypes); d++) {
        kern_row_from_f32(half, dtypes[d], src, dtypes[d] == CAIRN_DTYPE_F32 ? 0 : N);
        if (dtypes[d] == CAIRN_DTYPE_F32)
            continue;
        kern_row_to_f32(dst, half, dtypes[d], N);
        for (int i = 0; i < N; i++) {
            uint16_t h = dtypes[d] == CAIRN_DTYPE_BF16 ? kern_f32_to_bf16(src[i]) : kern_f32_to_f16(src[i]);
            assert_int_equal(half[i], h);
            assert_int_equal(fbits(dst[i]), fbits(dtypes[d] == CAIRN_DTYPE_BF16 ? kern_bf16_to_f32(h)
                                                                                  : kern_f16_to_f32(h)));
        }
    }
    kern_row_to_f32(dst, src, CAIRN_DTYPE_F32, N);
    assert_memory_equal(dst, src, sizeof(src));
}

/* ---- exp ---- */

static double ulp_err(float got, double want)
{
    if (want == 0)
        return got == 0 ? 0 : INFINITY;
    int e;
    frexp(want, &e);
    double ulp = ldexp(1.0, (e - 24) < -149 ? -149 : e - 24);
    return fabs((double)got - want) / ulp;
}

static void test_exp_accuracy(void **state)
{
    (void)state;
    double worst = 0;
    for (float x = -87.0f; x < 88.7f; x += 0.0007f) {
        double e = ulp_err(kern__exp(x), exp((double)x));
        if (e > worst)
            worst = e;
    }
    for (int i = 0; i < 200000; i++) {
        float x = bitsf((rnd32() & 0x807fffffu) | ((uint32_t)(100 + rnd32() % 30) << 23)); /* |x| < 4 */
        double e = ulp_err(kern__exp(x), exp((double)x));
        if (e > worst)
            worst = e;
    }
    print_message("canonical exp: max error %.2f ulp\n", worst);
    assert_true(worst <= 2.0);
    assert_true(kern__exp(0.0f) == 1.0f);
    assert_true(isinf(kern__exp(89.0f)) && isinf(kern__exp(INFINITY)));
    assert_true(kern__exp(-88.0f) == 0.0f && kern__exp(-INFINITY) == 0.0f);
    assert_true(isnan(kern__exp(NAN)));
}

/* ---- matmul and friends against the references, for each implementation ---- */

static void *make_weights(cairn_dtype_t t, const float *src, size_t n)
{
    void *w = malloc(n * cairn_dtype_size(t) + 64);
    assert_non_null(w);
    if (t == CAIRN_DTYPE_F32)
        memcpy(w, src, n * 4);
    else
        kern_row_from_f32(w, t, src, (int)n);
    return w;
}

static void check_matmul_shape(cairn_thread_pool_t *tp, int rows, int in, int out, cairn_dtype_t t,
                               cairn_math_t math, const char *impl)
{
    size_t nw = (size_t)out * in;
    float *x = malloc(sizeof(float) * ((size_t)rows * in + 1)), *wf = malloc(sizeof(float) * (nw + 1));
    float *y = malloc(sizeof(float) * ((size_t)rows * out + 1)), *y1 = malloc(sizeof(float) * (out + 1));
    float *ref = malloc(sizeof(float) * ((size_t)rows * out + 1));
    float *ys = malloc(sizeof(float) * ((size_t)rows * out + 1));
    assert_true(x && wf && y && y1 && ref && ys);
    for (size_t i = 0; i < (size_t)rows * in; i++)
        x[i] = rndf();
    for (size_t i = 0; i < nw; i++)
        wf[i] = rndf() * 0.1f;
    void *w = make_weights(t, wf, nw);
    /* |x|·|w| per element for the tolerance, on the values actually multiplied. */
    assert_int_equal(kern_set_impl(impl), CAIRN_OK);
    kern_matmul(tp, y, x, rows, in, w, t, out, math);
    kern_ref_matmul(ref, x, rows, in, w, t, out, math);
    assert_int_equal(kern_set_impl("scalar"), CAIRN_OK);
    kern_matmul(NULL, ys, x, rows, in, w, t, out, math);
    assert_int_equal(kern_set_impl(impl), CAIRN_OK);
    size_t wrow = (size_t)in * cairn_dtype_size(t);
    for (int r = 0; r < rows; r++) {
        double nx = 0;
        for (int i = 0; i < in; i++)
            nx += (double)x[(size_t)r * in + i] * x[(size_t)r * in + i];
        /* One row alone gives the same bits as inside the batch. */
        kern_matmul(NULL, y1, x + (size_t)r * in, 1, in, w, t, out, math);
        for (int o = 0; o < out; o++) {
            double nwo = 0;
            float wrowf[1024];
            kern_row_to_f32(wrowf, (const char *)w + o * wrow, t, in);
            for (int i = 0; i < in; i++)
                nwo += (double)wrowf[i] * wrowf[i];
            /* bf16 rounding of x moves the reference too; it rounds x the same way. */
            double tol = 2.0 * sqrt((double)in + 1) * 0x1p-24 * sqrt(nx) * sqrt(nwo) * 1.01 + 1e-30;
            float got = y[(size_t)r * out + o];
            if (fabs((double)got - ref[(size_t)r * out + o]) > tol)
                fail_msg("%s %s math=%d rows=%d in=%d out=%d r=%d o=%d: %.9g vs ref %.9g (tol %.3g)", impl,
                         cairn_dtype_name(t), (int)math, rows, in, out, r, o, got, ref[(size_t)r * out + o], tol);
            assert_int_equal(fbits(y1[o]), fbits(got));
            assert_int_equal(fbits(ys[(size_t)r * out + o]), fbits(got)); /* same bits as scalar */
            if (math == CAIRN_MATH_F32 || t != CAIRN_DTYPE_BF16)
                assert_int_equal(fbits(kern_dot(x + (size_t)r * in, (const char *)w + o * wrow, t, in)), fbits(got));
        }
    }
    free(w);
    free(x);
    free(wf);
    free(y);
    free(y1);
    free(ref);
    free(ys);
}

static void test_matmul_all_impls(void **state)
{
    (void)state;
    cairn_thread_pool_t *tp = NULL;
    assert_int_equal(cairn_thread_pool_create(2, &tp), CAIRN_OK);
    const int ins[] = {1, 15, 16, 17, 31, 32, 33, 100, 257};
    const int outs[] = {1, 3, 5, 17};
    const int rowss[] = {1, 2, 7, 13};
    int ran = 0;
    for (size_t im = 0; im < CAIRN_ARRAY_LEN(impls); im++) {
        if (!kern_impl_available(impls[im]))
            continue;
        ran++;
        for (size_t d = 0; d < CAIRN_ARRAY_LEN(dtypes); d++)
            for (int math = 0; math < 2; math++)
                for (size_t a = 0; a < CAIRN_ARRAY_LEN(ins); a++)
                    for (size_t b = 0; b < CAIRN_ARRAY_LEN(outs); b++)
                        for (size_t c = 0; c < CAIRN_ARRAY_LEN(rowss); c++)
                            check_matmul_shape(tp, rowss[c], ins[a], outs[b], dtypes[d], (cairn_math_t)math,
                                               impls[im]);
    }
    print_message("matmul checked on %d implementation(s)\n", ran);
    cairn_thread_pool_destroy(tp);
    kern_set_impl("scalar");
}

/* The same products over 1, 2 and 3 threads, bit for bit, for a shape that splits. */
static void test_matmul_thread_counts(void **state)
{
    (void)state;
    enum { ROWS = 9, IN = 301, OUT = 211 };
    static float x[ROWS * IN], wf[OUT * IN], y[3][ROWS * OUT];
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(x); i++)
        x[i] = rndf();
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(wf); i++)
        wf[i] = rndf();
    cairn_thread_pool_t *tps[3] = {NULL, NULL, NULL};
    for (int t = 0; t < 3; t++)
        assert_int_equal(cairn_thread_pool_create(t + 1, &tps[t]), CAIRN_OK);
    for (size_t im = 0; im < CAIRN_ARRAY_LEN(impls); im++) {
        if (!kern_impl_available(impls[im]))
            continue;
        assert_int_equal(kern_set_impl(impls[im]), CAIRN_OK);
        for (size_t d = 0; d < CAIRN_ARRAY_LEN(dtypes); d++) {
            void *w = make_weights(dtypes[d], wf, CAIRN_ARRAY_LEN(wf));
            for (int math = 0; math < 2; math++) {
                for (int t = 0; t < 3; t++)
                    kern_matmul(tps[t], y[t], x, ROWS, IN, w, dtypes[d], OUT, (cairn_math_t)math);
                assert_memory_equal(y[0], y[1], sizeof(y[0]));
                assert_memory_equal(y[0], y[2], sizeof(y[0]));
                /* Row chunks of 4 + 5 rows give the same bits as the 9-row call. */
                kern_matmul(tps[1], y[1], x, 4, IN, w, dtypes[d], OUT, (cairn_math_t)math);
                kern_matmul(tps[2], y[1] + 4 * OUT, x + 4 * IN, 5, IN, w, dtypes[d], OUT, (cairn_math_t)math);
                assert_memory_equal(y[0], y[1], sizeof(y[0]));
            }
            free(w);
        }
    }
    for (int t = 0; t < 3; t++)
        cairn_thread_pool_destroy(tps[t]);
    kern_set_impl("scalar");
}

/* kern_matmul_n (fused q/k/v, gate/up) gives the same bits as separate kern_matmul calls,
 * for any thread count and row count, including products whose widths are not multiples
 * of the scheduling unit and an empty product; more than 8 products take several runs. */
static void test_matmul_fused(void **state)
{
    (void)state;
    enum { IN = 133, NP = 10, MAXO = 70, MAXR = 8 };
    static const int widths[NP] = {64, 17, 17, 1, 0, 70, 33, 5, 16, 48};
    static float x[MAXR * IN], wf[NP][MAXO * IN], yf[NP][MAXR * MAXO], ys[MAXR * MAXO];
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(x); i++)
        x[i] = rndf();
    for (int p = 0; p < NP; p++)
        for (int i = 0; i < MAXO * IN; i++)
            wf[p][i] = rndf() * 0.1f;
    cairn_thread_pool_t *tps[3] = {NULL, NULL, NULL};
    for (int t = 0; t < 3; t++)
        assert_int_equal(cairn_thread_pool_create(t + 1, &tps[t]), CAIRN_OK);
    for (size_t im = 0; im < CAIRN_ARRAY_LEN(impls); im++) {
        if (!kern_impl_available(impls[im]))
            continue;
        assert_int_equal(kern_set_impl(impls[im]), CAIRN_OK);
        for (size_t d = 0; d < CAIRN_ARRAY_LEN(dtypes); d++) {
            void *w[NP];
            for (int p = 0; p < NP; p++)
                w[p] = make_weights(dtypes[d], wf[p], (size_t)MAXO * IN);
            for (int math = 0; math < 2; math++)
                for (int rows = 1; rows <= MAXR; rows += 3)
                    for (int t = 0; t < 3; t++)
                        for (int np = 2; np <= NP; np += 4) {
                            kern_mm_out_t outs[NP];
                            for (int p = 0; p < np; p++)
                                outs[p] = (kern_mm_out_t){yf[p], w[p], widths[p]};
                            kern_matmul_n(tps[t], x, rows, IN, dtypes[d], outs, np, (cairn_math_t)math);
                            for (int p = 0; p < np; p++) {
                                if (!widths[p])
                                    continue;
                                kern_matmul(tps[t], ys, x, rows, IN, w[p], dtypes[d], widths[p], (cairn_math_t)math);
                                assert_memory_equal(ys, yf[p], sizeof(float) * (size_t)rows * widths[p]);
                            }
                        }
            for (int p = 0; p < NP; p++)
                free(w[p]);
        }
    }
    for (int t = 0; t < 3; t++)
        cairn_thread_pool_destroy(tps[t]);
    kern_set_impl("scalar");
}

enum { AWK_IN = 77, AWK_OUT = 9, AWK_ROWS = 5 };

/* Awkward BF16-math operands for repetition rep: denormal weights and x, values near
 * 2^-126, huge and tiny magnitudes, every fourth rep products whose sums fall in the
 * denormals (so each step's flush decides bits), an inf weight (rep 7), a NaN x (rep 8). */
static void awkward_bf16_operands(float *x, uint16_t *w, int rep)
{
    for (int i = 0; i < AWK_ROWS * AWK_IN; i++) {
        uint32_t k = rnd32() % 16;
        int e = (int)(rnd32() % 60) - 30;
        x[i] = k == 0 ? bitsf(rnd32() & 0x807fffffu)                    /* f32 denormal */
               : k == 1 ? bitsf((rnd32() & 0x80000000u) | 0x007f8000u | (rnd32() & 0x7fff)) /* near 2^-126 */
               : k == 2 ? ldexpf(rndf(), -120)
                        : ldexpf(rndf(), e);
    }
    for (int i = 0; i < AWK_OUT * AWK_IN; i++) {
        uint32_t k = rnd32() % 16;
        w[i] = k == 0 ? (uint16_t)(rnd32() & 0x807f) : kern_f32_to_bf16(ldexpf(rndf(), (int)(rnd32() % 60) - 30));
    }
    if (rep % 4 == 3) { /* whole rows near the bottom of the range: sums in the denormals */
        for (int i = 0; i < AWK_ROWS * AWK_IN; i++)
            x[i] = ldexpf(rndf(), -118 - (int)(rnd32() % 8));
        for (int i = 0; i < AWK_OUT * AWK_IN; i++)
            w[i] = kern_f32_to_bf16(ldexpf(rndf(), -(int)(rnd32() % 8)));
    }
    if (rep == 7)
        w[3] = 0x7f80; /* inf */
    if (rep == 8)
        x[5] = NAN;
}

/* The AVX2 rendition of vdpbf16ps's steps (kernels_avx2.c's bf16_math_rows) against the
 * portable emulation on the awkward operands: the same bits (NaN where it is NaN). */
static void test_bf16_avx2_vs_portable(void **state)
{
    (void)state;
    if (!kern_impl_available("avx2")) {
        print_message("no AVX2 on this CPU: its BF16 math is not testable here\n");
        skip();
    }
    enum { IN = AWK_IN, OUT = AWK_OUT, ROWS = AWK_ROWS };
    static float x[ROWS * IN], y1[ROWS * OUT], ys[ROWS * OUT];
    static uint16_t w[OUT * IN];
    for (int rep = 0; rep < 300; rep++) {
        awkward_bf16_operands(x, w, rep);
        assert_int_equal(kern_set_impl("avx2"), CAIRN_OK);
        kern_matmul(NULL, y1, x, ROWS, IN, w, CAIRN_DTYPE_BF16, OUT, CAIRN_MATH_BF16);
        assert_int_equal(kern_set_impl("scalar"), CAIRN_OK);
        kern_matmul(NULL, ys, x, ROWS, IN, w, CAIRN_DTYPE_BF16, OUT, CAIRN_MATH_BF16);
        for (int i = 0; i < ROWS * OUT; i++) {
            if (isnan(ys[i])) {
                assert_true(isnan(y1[i]));
                continue;
            }
            if (fbits(y1[i]) != fbits(ys[i]))
                fail_msg("rep %d element %d: avx2 %a, portable %a", rep, i, (double)y1[i], (double)ys[i]);
        }
    }
}

/* vdpbf16ps emulation vs the instruction, on awkward values: denormal weights and x,
 * huge and tiny magnitudes, exact cancellation, inf and NaN. */
static void test_bf16_native_vs_emulated(void **state)
{
    (void)state;
    if (!kern_impl_available("avx512")) {
        print_message("no AVX512_BF16 on this CPU: native path not testable here\n");
        skip();
    }
    enum { IN = AWK_IN, OUT = AWK_OUT, ROWS = AWK_ROWS };
    static float x[ROWS * IN], y1[ROWS * OUT], y2[ROWS * OUT], ys[ROWS * OUT];
    static uint16_t w[OUT * IN];
    for (int rep = 0; rep < 300; rep++) {
        awkward_bf16_operands(x, w, rep);
        assert_int_equal(kern_set_impl("avx512"), CAIRN_OK);
        kern_matmul(NULL, y1, x, ROWS, IN, w, CAIRN_DTYPE_BF16, OUT, CAIRN_MATH_BF16);
        assert_int_equal(kern_set_impl("avx512-emubf16"), CAIRN_OK);
        kern_matmul(NULL, y2, x, ROWS, IN, w, CAIRN_DTYPE_BF16, OUT, CAIRN_MATH_BF16);
        assert_int_equal(kern_set_impl("scalar"), CAIRN_OK);
        kern_matmul(NULL, ys, x, ROWS, IN, w, CAIRN_DTYPE_BF16, OUT, CAIRN_MATH_BF16);
        for (int i = 0; i < ROWS * OUT; i++) {
            if (isnan(y1[i])) {
                assert_true(isnan(y2[i]) && isnan(ys[i]));
                continue;
            }
            assert_int_equal(fbits(y1[i]), fbits(y2[i]));
            assert_int_equal(fbits(y1[i]), fbits(ys[i]));
        }
    }
}

static void test_vector_kernels(void **state)
{
    (void)state;
    const int ns[] = {1, 7, 16, 63, 64, 100, 128, 1000};
    static float a[1024], b[1024], acc[1024], acc_ref[1024], out[1024], out_ref[1024], out_s[1024];
    static uint16_t row16[1024];
    for (size_t im = 0; im < CAIRN_ARRAY_LEN(impls); im++) {
        if (!kern_impl_available(impls[im]))
            continue;
        for (size_t ni = 0; ni < CAIRN_ARRAY_LEN(ns); ni++) {
            int n = ns[ni];
            for (int i = 0; i < n; i++) {
                a[i] = rndf() * 3;
                b[i] = rndf() * 3;
                acc[i] = acc_ref[i] = rndf();
            }
            for (size_t d = 0; d < CAIRN_ARRAY_LEN(dtypes); d++) {
                cairn_dtype_t t = dtypes[d];
                const void *row = b;
                if (t != CAIRN_DTYPE_F32) {
                    kern_row_from_f32(row16, t, b, n);
                    row = row16;
                }
                assert_int_equal(kern_set_impl("scalar"), CAIRN_OK);
                float ds = kern_dot(a, row, t, n);
                assert_int_equal(kern_set_impl(impls[im]), CAIRN_OK);
                float dv = kern_dot(a, row, t, n), dr = kern_ref_dot(a, row, t, n);
                double na = 0, nb = 0;
                for (int i = 0; i < n; i++) {
                    na += (double)a[i] * a[i];
                    nb += (double)b[i] * b[i];
                }
                assert_true(fabs((double)dv - dr) <= 2.0 * sqrt(n + 1.0) * 0x1p-24 * sqrt(na * nb) * 1.02 + 1e-30);
                assert_int_equal(fbits(dv), fbits(ds));
                kern_axpy(acc, 0.37f, row, t, n);
                kern_ref_axpy(acc_ref, 0.37f, row, t, n);
                assert_memory_equal(acc, acc_ref, sizeof(float) * n); /* no fma: exact */
                kern_rmsnorm(out, a, row, t, n, 1e-6f);
                kern_ref_rmsnorm(out_ref, a, row, t, n, 1e-6f);
                assert_int_equal(kern_set_impl("scalar"), CAIRN_OK);
                kern_rmsnorm(out_s, a, row, t, n, 1e-6f);
                assert_memory_equal(out, out_s, sizeof(float) * n);
                for (int i = 0; i < n; i++)
                    assert_true(fabsf(out[i] - out_ref[i]) <= 1e-5f * fabsf(out_ref[i]) + 1e-30f);
            }
            assert_int_equal(kern_set_impl(impls[im]), CAIRN_OK);
            for (int i = 0; i < n; i++)
                a[i] = rndf() * 30; /* gates up to ±30 */
            if (n > 5) {
                a[0] = 100.0f;
                a[1] = -100.0f;
                a[2] = 0.0f;
                a[3] = -0.0f;
                a[4] = 88.5f;
            }
            kern_silu_mul(out, a, b, n);
            kern_ref_silu_mul(out_ref, a, b, n);
            assert_int_equal(kern_set_impl("scalar"), CAIRN_OK);
            kern_silu_mul(out_s, a, b, n);
            assert_memory_equal(out, out_s, sizeof(float) * n);
            for (int i = 0; i < n; i++)
                assert_true(fabsf(out[i] - out_ref[i]) <= 8 * 0x1p-24f * fabsf(out_ref[i]) + 1e-37f);
        }
    }
    kern_set_impl("scalar");
}

static void test_rope(void **state)
{
    (void)state;
    enum { HD = 64, HALF = 32, NH = 3 };
    float inv_freq[HALF], cs[2 * HALF], x[NH * HD], x0[NH * HD];
    for (int i = 0; i < HALF; i++)
        inv_freq[i] = 1.0f / powf(10000.0f, (float)(2 * i) / HD);
    kern_rope_angles(cs, inv_freq, HALF, 0);
    for (int i = 0; i < HALF; i++) {
        assert_true(cs[2 * i] == 1.0f);
        assert_true(cs[2 * i + 1] == 0.0f);
    }
    int pos = 1234;
    kern_rope_angles(cs, inv_freq, HALF, pos);
    for (int i = 0; i < HALF; i++) {
        float ang = (float)pos * inv_freq[i];
        assert_true(cs[2 * i] == cosf(ang) && cs[2 * i + 1] == sinf(ang));
    }
    for (int i = 0; i < NH * HD; i++)
        x[i] = x0[i] = rndf();
    kern_rope(x, NH, HD, cs);
    for (int h = 0; h < NH; h++)
        for (int i = 0; i < HALF; i++) {
            double c = cs[2 * i], s = cs[2 * i + 1];
            double a = x0[h * HD + i], b = x0[h * HD + i + HALF];
            assert_true(fabs(x[h * HD + i] - (a * c - b * s)) < 1e-6);
            assert_true(fabs(x[h * HD + i + HALF] - (b * c + a * s)) < 1e-6);
        }
    float y[5] = {1, 2, 3, 4, 5}, z[5] = {0.5f, -2, 0, 1, 1};
    kern_add(y, z, 5);
    assert_true(y[0] == 1.5f && y[1] == 0 && y[4] == 6);
}

/* Every gated activation of compute_glu_t: each implementation gives the scalar bits,
 * the scalar one is within a few ulp of the double reference (libm exp/tanh), on gates up
 * to +-30 plus overflow, zeros and the GELU's cubic blow-up; the GELU-tanh steps are the
 * ones kernels_impl.h spells out. */
static void test_glu_all_impls(void **state)
{
    (void)state;
    enum { N = 1000 };
    static float g[N], u[N], out[N], ref[N], sc[N];
    const int ns[] = {1, 7, 8, 15, 16, 17, 100, N};
    for (int i = 0; i < N; i++) {
        g[i] = rndf() * 30;
        u[i] = rndf() * 3;
    }
    const float special[] = {100.0f, -100.0f, 0.0f, -0.0f, 88.5f, -88.5f, 3e3f, -3e3f, 1e-20f, -5.0f};
    memcpy(g, special, sizeof(special));
    for (int act = 0; act < COMPUTE_GLU_COUNT; act++) {
        kern_ref_glu(ref, g, u, N, (compute_glu_t)act);
        assert_int_equal(kern_set_impl("scalar"), CAIRN_OK);
        kern_glu(sc, g, u, N, (compute_glu_t)act);
        for (int i = 0; i < N; i++) {
            /* exp turns the float32 rounding of its argument (|2u| for the GELU, whose u
             * takes a few roundings) into relative error. */
            double gd = g[i], arg = act == COMPUTE_GLU_GELU_TANH ? fabs(1.6 * (gd + 0.044715 * gd * gd * gd)) : 0;
            double tol = (16 + 4 * arg) * 0x1p-24 * fabs((double)ref[i]) + 1e-37;
            if (!(fabs((double)sc[i] - ref[i]) <= tol))
                fail_msg("act %d g=%.9g: %.9g vs ref %.9g", act, (double)g[i], (double)sc[i], (double)ref[i]);
        }
        if (act == COMPUTE_GLU_GELU_TANH)
            for (int i = 0; i < N; i++) {
                float x = g[i], c = x * x;
                c = c * x;
                float t = 0.044715f * c;
                t = x + t;
                float uu = (float)(M_SQRT2 * M_2_SQRTPI * 0.5) * t;
                float e = kern__exp(-2.0f * uu);
                float want = (x / (1.0f + e)) * u[i];
                assert_memory_equal(&want, &sc[i], sizeof(float));
            }
        if (act == COMPUTE_GLU_SILU) { /* kern_silu_mul is the SILU gate */
            kern_silu_mul(out, g, u, N);
            assert_memory_equal(out, sc, sizeof(out));
        }
        for (size_t im = 0; im < CAIRN_ARRAY_LEN(impls); im++) {
            if (!kern_impl_available(impls[im]))
                continue;
            assert_int_equal(kern_set_impl(impls[im]), CAIRN_OK);
            for (size_t ni = 0; ni < CAIRN_ARRAY_LEN(ns); ni++) {
                memset(out, 0xff, sizeof(out));
                kern_glu(out, g, u, (size_t)ns[ni], (compute_glu_t)act);
                assert_memory_equal(out, sc, sizeof(float) * (size_t)ns[ni]);
                if (ns[ni] < N)
                    assert_true(fbits(out[ns[ni]]) == 0xffffffffu); /* nothing past n */
            }
            memcpy(out, g, sizeof(out)); /* in place over the gate */
            kern_glu(out, out, u, N, (compute_glu_t)act);
            assert_memory_equal(out, sc, sizeof(out));
        }
    }
    kern_set_impl("scalar");
}

/* Partial rotary: the first rot_dims of each head rotate with pairing (i, i + rot/2), the
 * rest pass through bit for bit; rot_dims = head_dim is kern_rope. */
static void test_rope_partial(void **state)
{
    (void)state;
    enum { HD = 64, NH = 3 };
    const int rots[] = {16, 32, 64};
    float inv_freq[HD / 2], cs[HD], x[NH * HD], x0[NH * HD], full[NH * HD];
    for (size_t ri = 0; ri < CAIRN_ARRAY_LEN(rots); ri++) {
        const int rot = rots[ri], half = rot / 2;
        for (int i = 0; i < half; i++)
            inv_freq[i] = 1.0f / powf(10000.0f, (float)(2 * i) / rot);
        kern_rope_angles(cs, inv_freq, half, 777);
        for (int i = 0; i < NH * HD; i++)
            x[i] = x0[i] = rndf();
        kern_rope_partial(x, NH, HD, rot, cs);
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < half; i++) {
                double c = cs[2 * i], sn = cs[2 * i + 1];
                double a = x0[h * HD + i], b = x0[h * HD + i + half];
                assert_true(fabs(x[h * HD + i] - (a * c - b * sn)) < 1e-6);
                assert_true(fabs(x[h * HD + i + half] - (b * c + a * sn)) < 1e-6);
            }
            assert_memory_equal(x + h * HD + rot, x0 + h * HD + rot, sizeof(float) * (HD - rot));
        }
        if (rot == HD) {
            memcpy(full, x0, sizeof(full));
            kern_rope(full, NH, HD, cs);
            assert_memory_equal(full, x, sizeof(full));
        }
    }
}

/* RMSNorm with (1 + w): Gemma's weights, the (1 + w) sum in float32. */
static void test_rmsnorm_unit_offset(void **state)
{
    (void)state;
    enum { N = 100 };
    float x[N], w[N], w1[N], out[N], want[N];
    for (int i = 0; i < N; i++) {
        x[i] = rndf() * 4;
        w[i] = rndf();
        w1[i] = 1.0f + w[i];
    }
    for (size_t im = 0; im < CAIRN_ARRAY_LEN(impls); im++) {
        if (!kern_impl_available(impls[im]))
            continue;
        assert_int_equal(kern_set_impl(impls[im]), CAIRN_OK);
        kern_rmsnorm_unit_offset(out, x, w, CAIRN_DTYPE_F32, N, 1e-6f);
        kern_rmsnorm(want, x, w1, CAIRN_DTYPE_F32, N, 1e-6f);
        assert_memory_equal(out, want, sizeof(out));
    }
    kern_set_impl("scalar");
}

/* Every implementation's bf16 row rounding (the K/V store's) equals the traits' reference
 * bit for bit: ties either way, NaNs (quieted), infinities, denormals, random bits, and a
 * length that leaves a partial vector. */
static void test_bf16_from_f32_all_impls(void **state)
{
    (void)state;
    enum { N = 1037 };
    static const uint32_t edge[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00008000u,
                                    0x00018000u, 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x7f7fffffu,
                                    0x7f800000u, 0xff800000u, 0x7f800001u, 0xffc00000u, 0x7fffffffu,
                                    0x7f80ffffu, 0x47ff8000u, 0x00ff7fffu};
    float src[N];
    uint16_t want[N], got[N + 8];
    for (int i = 0; i < N; i++) {
        uint32_t b = i < (int)CAIRN_ARRAY_LEN(edge) ? edge[i] : i % 3 ? rnd32() << 16 | rnd32() : (rnd32() << 16) | 0x8000u;
        memcpy(&src[i], &b, 4);
        want[i] = compute_f32_to_bf16(src[i]);
    }
    for (size_t im = 0; im < CAIRN_ARRAY_LEN(impls); im++) {
        const kern_impl_t *k = kern__impl_by_name(impls[im]);
        if (!k || !kern_impl_available(impls[im]))
            continue;
        memset(got, 0xa5, sizeof got);
        k->types[CAIRN_DTYPE_BF16].from_f32(got, src, N);
        assert_memory_equal(got, want, sizeof want);
        assert_int_equal(got[N], 0xa5a5); /* nothing written past n */
    }
}

static void test_dispatch(void **state)
{
    (void)state;
    const char *name = kern_init();
    assert_non_null(name);
    assert_true(kern_impl_available(name));
    assert_int_equal(kern_set_impl("nonsense"), CAIRN_EINVAL);
    assert_int_equal(kern_set_impl(NULL), CAIRN_EINVAL);
    assert_int_equal(kern_set_impl("scalar"), CAIRN_OK);
    assert_string_equal(kern_impl_name(), "scalar");
    assert_false(kern_bf16_math_fast());
    if (!kern_impl_available("avx512-emubf16"))
        assert_int_equal(kern_set_impl("avx512-emubf16"), CAIRN_EUNSUPPORTED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_bf16_conversions),
        cmocka_unit_test(test_f16_conversions),
        cmocka_unit_test(test_row_conversions),
        cmocka_unit_test(test_exp_accuracy),
        cmocka_unit_test(test_matmul_all_impls),
        cmocka_unit_test(test_matmul_thread_counts),
        cmocka_unit_test(test_matmul_fused),
        cmocka_unit_test(test_bf16_avx2_vs_portable),
        cmocka_unit_test(test_bf16_native_vs_emulated),
        cmocka_unit_test(test_vector_kernels),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_glu_all_impls),
        cmocka_unit_test(test_rope_partial),
        cmocka_unit_test(test_rmsnorm_unit_offset),
        cmocka_unit_test(test_bf16_from_f32_all_impls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
