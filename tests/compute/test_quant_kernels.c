/*
 * Tests for the quantized kernels of the CPU backend (src/compute/cpu/quant_kernels.c and
 * x86/quant_*.c): every implementation this CPU runs against the portable one bit for bit
 * (products over every weight type, row counts on both sides of the packed kernel's
 * threshold, partial tiles, odd block counts, accumulation across pieces; activation
 * rounding with ties, zeros, NaN and inf; K/V widening), the determinism contract with
 * memcmp (a row batched or alone, 1/2/3 threads, the heap buffer or the stack pieces the
 * driver falls back to when allocation fails), the canonical product against an
 * independent double-precision reference with the activation rounding's error bound,
 * and the activation rounding against its definition; the decode (row) kernel against the
 * prefill (packed) kernel of each implementation through qmatmul_range. Implementations this
 * CPU lacks (AMX) are reported as skipped with the reason. Also the "amx" implementation's bf16 row
 * (AMX-BF16 tiles for BF16-math prefill, x86/bf16_amx.c) against the portable BF16 rows
 * and across rows / threads; it prints what the tiles' probe chose on this CPU.
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

#include "compute/cpu/kernels_impl.h"
#include "compute/quant_blocks.h"

static const char *const impls[] = {"scalar", "avx2", "avx512", "avx512-emubf16", "amx"};
static const cairn_dtype_t wtypes[] = {CAIRN_DTYPE_Q8_0, CAIRN_DTYPE_Q4_0, CAIRN_DTYPE_Q4_K, CAIRN_DTYPE_Q5_K,
                                       CAIRN_DTYPE_Q6_K};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) { return (float)((int)(rnd32() % 2000001) - 1000000) * 1e-6f; }

/* Implementations present: each one this build has and this CPU runs; the others are
 * named once with the reason. */
static bool usable(const char *name)
{
    int st = kern__impl_status(name);
    if (st == CAIRN_OK)
        return true;
    static bool told[8];
    for (size_t i = 0; i < sizeof impls / sizeof impls[0]; i++)
        if (!strcmp(impls[i], name) && !told[i]) {
            told[i] = true;
            printf("    skipped: kernel implementation '%s': %s\n", name,
                   st == CAIRN_EUNSUPPORTED ? "not in this build or not supported by this CPU (for amx: no "
                                              "AMX-INT8 tiles, or the kernel refused the tile state)"
                                            : "unknown");
        }
    return false;
}

/* Random weights of type t: random quant bits, scales of a plausible size. */
static void random_weights(void *dst, cairn_dtype_t t, int rows, int in)
{
    const size_t rb = cairn_dtype_row_bytes(t, in);
    uint8_t *p = dst;
    for (size_t i = 0; i < rb * (size_t)rows; i++)
        p[i] = (uint8_t)rnd32();
    const int be = cairn_dtype_block_elems(t);
    const size_t bb = rb / (size_t)(in / be);
    for (size_t b = 0; b < (size_t)rows * (size_t)(in / be); b++) {
        uint8_t *blk = p + b * bb;
        uint16_t d = compute_f32_to_f16(rndf() * 0.02f), dm = compute_f32_to_f16(fabsf(rndf()) * 0.01f);
        switch (t) {
        case CAIRN_DTYPE_Q8_0:
        case CAIRN_DTYPE_Q4_0: memcpy(blk, &d, 2); break;
        case CAIRN_DTYPE_Q4_K:
        case CAIRN_DTYPE_Q5_K:
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &dm, 2);
            break;
        case CAIRN_DTYPE_Q6_K: memcpy(blk + 208, &d, 2); break;
        case CAIRN_DTYPE_F32:
        case CAIRN_DTYPE_F16:
        case CAIRN_DTYPE_BF16:
        case CAIRN_DTYPE_Q8_K:
        case CAIRN_DTYPE_FP8_E4M3: fail_msg("not a quantized weight type");
        }
    }
}

static void random_x(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rndf() * (i % 53 == 0 ? 20.0f : 1.0f);
}

static void mm_math(const char *impl, cairn_thread_pool_t *tp, float *y, const float *x, int rows, int in,
                    const void *w, cairn_dtype_t wt, int out, cairn_math_t math)
{
    const kern_impl_t *k = kern__impl_by_name(impl);
    assert_non_null(k);
    kern_mm_t m = {y, w, wt, out};
    kern__matmul_n(k, tp, x, rows, in, &m, 1, math);
}

static void mm(const char *impl, cairn_thread_pool_t *tp, float *y, const float *x, int rows, int in, const void *w,
               cairn_dtype_t wt, int out)
{
    mm_math(impl, tp, y, x, rows, in, w, wt, out, CAIRN_MATH_F32);
}

/* Every implementation = scalar, bit for bit, over shapes around every tile and threshold. */
static void test_impls_equal_scalar(void **state)
{
    (void)state;
    /* 32 and 49: the AMX tiles (a pair of 16-row tiles; three and a VNNI remainder row). */
    static const int rows_set[] = {1, 2, 5, 7, 8, 9, 13, 31, 32, 49};
    static const int outs_set[] = {1, 7, 16, 17, 50};
    for (size_t t = 0; t < sizeof wtypes / sizeof wtypes[0]; t++) {
        const cairn_dtype_t wt = wtypes[t];
        const int be = cairn_dtype_block_elems(wt);
        const int ins[] = {be == 32 ? 32 : 256, be == 32 ? 96 : 512, be == 32 ? 1056 : 1280};
        for (size_t ii = 0; ii < 3; ii++) {
            const int in = ins[ii];
            void *w = malloc(cairn_dtype_row_bytes(wt, in) * 50);
            float *x = malloc(sizeof(float) * 49 * (size_t)in);
            float *y0 = malloc(sizeof(float) * 49 * 50), *y1 = malloc(sizeof(float) * 49 * 50);
            assert_non_null(w);
            assert_non_null(x);
            random_weights(w, wt, 50, in);
            random_x(x, 49 * (size_t)in);
            for (size_t ri = 0; ri < sizeof rows_set / sizeof rows_set[0]; ri++)
                for (size_t oi = 0; oi < sizeof outs_set / sizeof outs_set[0]; oi++) {
                    const int rows = rows_set[ri], out = outs_set[oi];
                    mm("scalar", NULL, y0, x, rows, in, w, wt, out);
                    for (size_t k = 1; k < sizeof impls / sizeof impls[0]; k++) {
                        if (!usable(impls[k]))
                            continue;
                        memset(y1, 0xff, sizeof(float) * 49 * 50);
                        mm(impls[k], NULL, y1, x, rows, in, w, wt, out);
                        if (memcmp(y0, y1, sizeof(float) * (size_t)rows * out))
                            fail_msg("%s %s: rows %d in %d out %d differ from scalar", impls[k], cairn_dtype_name(wt),
                                     rows, in, out);
                    }
                }
            free(w);
            free(x);
            free(y0);
            free(y1);
        }
    }
}

/* qmatmul_range continuing from y (a later piece of the input) equals one call over the
 * whole input, in every implementation. */
static void test_pieces_accumulate(void **state)
{
    (void)state;
    for (size_t t = 0; t < sizeof wtypes / sizeof wtypes[0]; t++) {
        const cairn_dtype_t wt = wtypes[t];
        const int in = 1024, rows = 33, out = 19;
        const kern_type_ops_t *sc = &kern__impl_by_name("scalar")->types[wt];
        const cairn_dtype_t act = sc->act;
        const size_t ldw = cairn_dtype_row_bytes(wt, in), ldq = cairn_dtype_row_bytes(act, in);
        void *w = malloc(ldw * out), *xq = malloc(ldq * rows);
        int32_t *sums = malloc(sizeof(int32_t) * rows * (in / 32)), *sp = malloc(sizeof(int32_t) * rows * (in / 32));
        float *x = malloc(sizeof(float) * rows * in), *y0 = malloc(sizeof(float) * rows * out),
              *y1 = malloc(sizeof(float) * rows * out);
        random_weights(w, wt, out, in);
        random_x(x, (size_t)rows * in);
        for (int r = 0; r < rows; r++) {
            compute_type_traits(act)->from_f32((char *)xq + r * ldq, x + (size_t)r * in, in);
            kern__q8_0_sums(sums + r * (in / 32), (char *)xq + r * ldq, in / 32);
        }
        const int32_t *xs = act == CAIRN_DTYPE_Q8_0 ? sums : NULL;
        for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
            if (!usable(impls[k]))
                continue;
            const kern_type_ops_t *o = &kern__impl_by_name(impls[k])->types[wt];
            for (int pass = 0; pass < 3; pass++) { /* 1 row: the row kernel; 9: packed; 33: AMX tiles */
                const int R = pass == 0 ? 1 : pass == 1 ? 9 : rows;
                o->qmatmul_range(y0, out, xq, ldq, xs, R, in, w, ldw, 0, out, false);
                /* Two pieces: [0, 512) then [512, 1024), carrying acc. */
                const size_t q_half = cairn_dtype_row_bytes(act, 512);
                unsigned char *xq2 = malloc(q_half * 2 * rows);
                for (int r = 0; r < R; r++) {
                    memcpy(xq2 + r * q_half, (char *)xq + r * ldq, q_half);
                    memcpy(xq2 + (R + r) * q_half, (char *)xq + r * ldq + q_half, q_half);
                    for (int b = 0; b < 16; b++) {
                        sp[r * 16 + b] = sums[r * 32 + b];
                        sp[R * 16 + r * 16 + b] = sums[r * 32 + 16 + b];
                    }
                }
                o->qmatmul_range(y1, out, xq2, q_half, xs ? sp : NULL, R, 512, w, ldw, 0, out, false);
                o->qmatmul_range(y1, out, xq2 + R * q_half, q_half, xs ? sp + R * 16 : NULL, R, 512,
                                 (char *)w + cairn_dtype_row_bytes(wt, 512), ldw, 0, out, true);
                free(xq2);
                if (memcmp(y0, y1, sizeof(float) * (size_t)R * out))
                    fail_msg("%s %s: two pieces != one (%d rows)", impls[k], cairn_dtype_name(wt), R);
            }
        }
        free(w);
        free(xq);
        free(sums);
        free(sp);
        free(x);
        free(y0);
        free(y1);
    }
}

/* The determinism contract: a row batched = alone, for 1/2/3 threads, and through the
 * stack pieces the driver falls back to when its buffer cannot be allocated. */
static void test_determinism(void **state)
{
    (void)state;
    cairn_thread_pool_t *tp[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(cairn_thread_pool_create(i + 1, &tp[i]), CAIRN_OK);
    const int in = 3072, out = 200, rows = 40;
    for (size_t t = 0; t < sizeof wtypes / sizeof wtypes[0]; t++) {
        const cairn_dtype_t wt = wtypes[t];
        void *w = malloc(cairn_dtype_row_bytes(wt, in) * out);
        float *x = malloc(sizeof(float) * rows * in), *ya = malloc(sizeof(float) * rows * out),
              *yb = malloc(sizeof(float) * rows * out);
        random_weights(w, wt, out, in);
        random_x(x, (size_t)rows * in);
        for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
            if (!usable(impls[k]))
                continue;
            mm(impls[k], tp[0], ya, x, rows, in, w, wt, out);
            for (int r = 0; r < rows; r++) {
                mm(impls[k], tp[1], yb + (size_t)r * out, x + (size_t)r * in, 1, in, w, wt, out);
                if (memcmp(ya + (size_t)r * out, yb + (size_t)r * out, sizeof(float) * out))
                    fail_msg("%s %s: row %d alone differs from the batch", impls[k], cairn_dtype_name(wt), r);
            }
            for (int th = 1; th < 3; th++) {
                mm(impls[k], tp[th], yb, x, rows, in, w, wt, out);
                if (memcmp(ya, yb, sizeof(float) * rows * out))
                    fail_msg("%s %s: %d threads differ", impls[k], cairn_dtype_name(wt), th + 1);
            }
            /* The activation buffer (rows x in) is on the heap; failing every allocation
             * makes the driver cut the call into stack pieces. */
            unsigned long before = cairn_alloc_count();
            cairn_alloc_fail_after(0, true);
            mm(impls[k], tp[1], yb, x, rows, in, w, wt, out);
            cairn_alloc_fail_after(-1, false);
            assert_true(cairn_alloc_count() > before); /* the driver did ask */
            if (memcmp(ya, yb, sizeof(float) * rows * out))
                fail_msg("%s %s: the stack pieces differ from one buffer", impls[k], cairn_dtype_name(wt));
        }
        free(w);
        free(x);
        free(ya);
        free(yb);
        /* A row wider than the stack buffer: the fallback cuts the input too, and the
         * products carry their accumulators across the pieces. */
        const int wide = 36864, wrows = 3, wout = 21;
        w = malloc(cairn_dtype_row_bytes(wt, wide) * wout);
        x = malloc(sizeof(float) * wrows * wide);
        ya = malloc(sizeof(float) * wrows * wout);
        yb = malloc(sizeof(float) * wrows * wout);
        random_weights(w, wt, wout, wide);
        random_x(x, (size_t)wrows * wide);
        for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
            if (!usable(impls[k]))
                continue;
            mm(impls[k], tp[1], ya, x, wrows, wide, w, wt, wout);
            cairn_alloc_fail_after(0, true);
            mm(impls[k], tp[1], yb, x, wrows, wide, w, wt, wout);
            cairn_alloc_fail_after(-1, false);
            if (memcmp(ya, yb, sizeof(float) * wrows * wout))
                fail_msg("%s %s: input pieces differ from one buffer", impls[k], cairn_dtype_name(wt));
        }
        free(w);
        free(x);
        free(ya);
        free(yb);
    }
    for (int i = 0; i < 3; i++)
        cairn_thread_pool_destroy(tp[i]);
}

/* One call of several products (as q/k/v and gate/up are fused), of weight types that share
 * a side table (two q4_k) and of types that do not (q6_k, q5_k, q8_0, q4_0): each product
 * equals the portable rows run alone, bit for bit, at 1-3 threads, at 48 rows (three tiles)
 * and 40 (two tiles and VNNI rows), and when the driver's side tables cannot be had (the
 * kernels then build their own). */
static void test_fused_products(void **state)
{
    (void)state;
    static const cairn_dtype_t ft[] = {CAIRN_DTYPE_Q4_K, CAIRN_DTYPE_Q6_K, CAIRN_DTYPE_Q4_K,
                                       CAIRN_DTYPE_Q5_K, CAIRN_DTYPE_Q8_0, CAIRN_DTYPE_Q4_0};
    static const int fo[] = {40, 24, 33, 17, 50, 16};
    enum { NP = 6, IN = 512, MAXR = 48 };
    cairn_thread_pool_t *tp[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(cairn_thread_pool_create(i + 1, &tp[i]), CAIRN_OK);
    void *w[NP];
    float *y0[NP], *y1[NP], *x = malloc(sizeof(float) * MAXR * IN);
    assert_non_null(x);
    random_x(x, (size_t)MAXR * IN);
    for (int p = 0; p < NP; p++) {
        w[p] = malloc(cairn_dtype_row_bytes(ft[p], IN) * (size_t)fo[p]);
        y0[p] = malloc(sizeof(float) * MAXR * (size_t)fo[p]);
        y1[p] = malloc(sizeof(float) * MAXR * (size_t)fo[p]);
        assert_true(w[p] && y0[p] && y1[p]);
        random_weights(w[p], ft[p], fo[p], IN);
    }
    const int rows_set[] = {48, 40};
    for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
        if (!usable(impls[k]))
            continue;
        const kern_impl_t *im = kern__impl_by_name(impls[k]);
        for (int ri = 0; ri < 2; ri++) {
            const int rows = rows_set[ri];
            for (int p = 0; p < NP; p++)
                mm("scalar", tp[0], y0[p], x, rows, IN, w[p], ft[p], fo[p]);
            for (int mode = 0; mode < 4; mode++) { /* 1, 2, 3 threads; 2 without the tables */
                kern_mm_t m[NP];
                for (int p = 0; p < NP; p++) {
                    memset(y1[p], 0xa5, sizeof(float) * MAXR * (size_t)fo[p]);
                    m[p] = (kern_mm_t){y1[p], w[p], ft[p], fo[p]};
                }
                if (mode == 3)
                    cairn_alloc_fail_after(1, false); /* the activations' buffer, then not the tables */
                kern__matmul_n(im, tp[mode < 3 ? mode : 1], x, rows, IN, m, NP, CAIRN_MATH_F32);
                cairn_alloc_fail_after(-1, false);
                for (int p = 0; p < NP; p++)
                    if (memcmp(y0[p], y1[p], sizeof(float) * (size_t)rows * (size_t)fo[p]))
                        fail_msg("%s: fused product %d (%s) at %d rows, mode %d differs from the portable rows",
                                 impls[k], p, cairn_dtype_name(ft[p]), rows, mode);
            }
        }
    }
    for (int p = 0; p < NP; p++) {
        free(w[p]);
        free(y0[p]);
        free(y1[p]);
    }
    free(x);
    for (int i = 0; i < 3; i++)
        cairn_thread_pool_destroy(tp[i]);
}

/* The canonical product against dequantized weights times unrounded x, in double: the
 * difference is the activation rounding, at most sum |w_i| * d_x / 2 per block (plus
 * float noise). A wrong scale, offset, min or bit layout breaks the bound. */
static void test_against_reference(void **state)
{
    (void)state;
    const int in = 1024, out = 33, rows = 3;
    for (size_t t = 0; t < sizeof wtypes / sizeof wtypes[0]; t++) {
        const cairn_dtype_t wt = wtypes[t];
        void *w = malloc(cairn_dtype_row_bytes(wt, in) * out);
        float *x = malloc(sizeof(float) * rows * in), *y = malloc(sizeof(float) * rows * out),
              *ref = malloc(sizeof(float) * rows * out), *wf = malloc(sizeof(float) * in);
        random_weights(w, wt, out, in);
        random_x(x, (size_t)rows * in);
        mm("scalar", NULL, y, x, rows, in, w, wt, out);
        kern_ref_matmul(ref, x, rows, in, w, wt, out, CAIRN_MATH_F32);
        const int ab = cairn_dtype_block_elems(kern__impl_by_name("scalar")->types[wt].act);
        for (int o = 0; o < out; o++) {
            compute_type_traits(wt)->to_f32(wf, (const char *)w + cairn_dtype_row_bytes(wt, in) * o, in);
            for (int r = 0; r < rows; r++) {
                double bound = 0, mag = 0;
                for (int b0 = 0; b0 < in; b0 += ab) {
                    float amax = 0;
                    double sw = 0;
                    for (int i = b0; i < b0 + ab; i++) {
                        amax = fmaxf(amax, fabsf(x[(size_t)r * in + i]));
                        sw += fabs(wf[i]);
                        mag += fabs((double)wf[i] * x[(size_t)r * in + i]);
                    }
                    bound += sw * amax / 127.0 * 0.5;
                }
                double diff = fabs((double)y[r * out + o] - ref[r * out + o]);
                if (!(diff <= bound * 1.01 + mag * 1e-5))
                    fail_msg("%s row %d out %d: |%g - %g| = %g > bound %g", cairn_dtype_name(wt), r, o,
                             y[r * out + o], ref[r * out + o], diff, bound);
            }
        }
        free(w);
        free(x);
        free(y);
        free(ref);
        free(wf);
    }
}

/* Activation rounding and K/V stores: every implementation = the traits' reference, on
 * random rows and on the edge cases (ties, zeros, NaN, inf, the largest |x| negative,
 * two elements of equal |x| and opposite sign). */
static void test_rounding_and_kv_rows(void **state)
{
    (void)state;
    enum { N = 1024 };
    static float x[N];
    static uint8_t a[N * 2], b[N * 2];
    static float fa[N], fb[N];
    const cairn_dtype_t types[] = {CAIRN_DTYPE_Q8_0, CAIRN_DTYPE_Q8_K, CAIRN_DTYPE_FP8_E4M3, CAIRN_DTYPE_Q4_K};
    for (int pattern = 0; pattern < 6; pattern++) {
        for (int i = 0; i < N; i++) {
            switch (pattern) {
            case 0: x[i] = rndf(); break;
            case 1: x[i] = (float)(i % 255 - 127) + 0.5f; break; /* halves: ties at amax 127 */
            case 2: x[i] = 0.0f; break;
            case 3: x[i] = i % 7 == 0 ? NAN : i % 11 == 0 ? INFINITY : rndf(); break;
            case 4: x[i] = i % 256 == 5 ? -3.0f : i % 256 == 9 ? 3.0f : rndf(); break; /* equal |x| */
            default: x[i] = rndf() * 1e-30f; break;                                   /* tiny scales */
            }
        }
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            const compute_type_traits_t *tt = compute_type_traits(types[t]);
            /* The rounding of the scalar row (the activation rule; = the traits row's except for
             * q8_0, whose weight rule is llama-quantize's). */
            kern__impl_by_name("scalar")->types[types[t]].from_f32(a, x, N);
            for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
                if (!usable(impls[k]))
                    continue;
                const kern_type_ops_t *o = &kern__impl_by_name(impls[k])->types[types[t]];
                memset(b, 0xa5, sizeof b);
                o->from_f32(b, x, N);
                if (memcmp(a, b, cairn_dtype_row_bytes(types[t], N)))
                    fail_msg("%s %s: rounding pattern %d differs from the reference", impls[k], tt->name, pattern);
                if (!o->rows_to_f32)
                    continue;
                /* Two rows 3 blocks apart (attention reads heads out of wider rows). */
                const size_t stride = cairn_dtype_row_bytes(types[t], 96);
                tt->to_f32(fa, a, 64);
                tt->to_f32(fa + 64, a + stride, 64);
                o->rows_to_f32(fb, a, stride, 2, 64);
                if (memcmp(fa, fb, sizeof(float) * 128))
                    fail_msg("%s %s: K/V rows widen differently (pattern %d)", impls[k], tt->name, pattern);
            }
        }
    }
    /* The q8_k rule itself: the first element of largest |x| becomes -127. */
    for (int i = 0; i < 256; i++)
        x[i] = 0.25f;
    x[3] = -2.0f;
    x[7] = 2.0f;
    blk_q8_k_t k8;
    compute_type_traits(CAIRN_DTYPE_Q8_K)->from_f32(&k8, x, 256);
    assert_int_equal(k8.q[3], -127);
    assert_int_equal(k8.q[7], 127);
    assert_float_equal(k8.d, 1.0f / (-127.0f / -2.0f), 0.0f);
    /* And q8_0 activations: d = amax / 127, q = rint(x * 127 / amax), ties to even; q8_0
     * weights round halves away from zero, as llama-quantize does. */
    blk_q8_0_t q8;
    for (int i = 0; i < 32; i++)
        x[i] = (float)(i - 16) + 0.5f; /* amax 16.5: not a tie */
    x[0] = 127.0f;
    x[1] = 2.5f;
    x[2] = -3.5f;
    quant_q8_0_round_act(&q8, x, 32);
    assert_int_equal(q8.q[0], 127);
    assert_int_equal(q8.q[1], 2);  /* 2.5 -> 2 */
    assert_int_equal(q8.q[2], -4); /* -3.5 -> -4 */
    assert_int_equal(q8.d, compute_f32_to_f16(1.0f));
    compute_type_traits(CAIRN_DTYPE_Q8_0)->from_f32(&q8, x, 32);
    assert_int_equal(q8.q[1], 3); /* 2.5 -> 3 */
    assert_int_equal(q8.q[2], -4);
}

/* x86/bf16_amx.c's word on what runs there (absent in builds without the x86 kernels). */
__attribute__((weak)) const char *kern__amx_bf16_state(void);

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Values near every edge of the BF16 order: f32 denormals, values near 2^-126, products
 * that flush to zero, ordinary values over a wide exponent range. */
static float edge_x(void)
{
    const uint32_t k = rnd32() % 16;
    return k == 0   ? bitsf(rnd32() & 0x807fffffu)
           : k == 1 ? bitsf((rnd32() & 0x80000000u) | 0x007f8000u | (rnd32() & 0x7fff))
           : k == 2 ? ldexpf(rndf(), -120)
                    : ldexpf(rndf(), (int)(rnd32() % 40) - 20);
}

/* "amx" with bf16 weights in BF16 math (the AMX-BF16 tiles from 32 rows, AVX-512 below and
 * for the rows past the last 16) = the portable BF16 rows bit for bit, over tile pairs,
 * single tiles, remainder rows, partial output groups, block tails (in % 512) and inputs
 * not a multiple of 32; a row batched = alone, and 1 = 2 = 3 threads. */
static void test_bf16_amx(void **state)
{
    (void)state;
    if (kern__amx_bf16_state)
        printf("    amx bf16 rows on this CPU: %s\n", kern__amx_bf16_state());
    if (!usable("amx"))
        skip();
    enum { R = 97, O = 50 };
    static const int rows_set[] = {1, 31, 32, 33, 48, 49, 64, 97};
    static const int outs_set[] = {1, 16, 17, 50};
    static const int ins[] = {32, 77, 512, 544, 1056, 1536};
    float *x = malloc(sizeof(float) * R * 1536), *ref = malloc(sizeof(float) * R * O),
          *y = malloc(sizeof(float) * R * O);
    uint16_t *w = malloc(sizeof(uint16_t) * 200 * 1536);
    assert_true(x && ref && y && w);
    for (size_t ii = 0; ii < sizeof ins / sizeof ins[0]; ii++) {
        const int in = ins[ii];
        for (int i = 0; i < R * in; i++)
            x[i] = edge_x();
        for (int i = 0; i < O * in; i++)
            w[i] = rnd32() % 16 == 0 ? (uint16_t)(rnd32() & 0x807f)
                                     : kern_f32_to_bf16(ldexpf(rndf(), (int)(rnd32() % 40) - 20));
        mm_math("scalar", NULL, ref, x, R, in, w, CAIRN_DTYPE_BF16, O, CAIRN_MATH_BF16);
        for (size_t ri = 0; ri < sizeof rows_set / sizeof rows_set[0]; ri++)
            for (size_t oi = 0; oi < sizeof outs_set / sizeof outs_set[0]; oi++) {
                const int rows = rows_set[ri], out = outs_set[oi];
                memset(y, 0xff, sizeof(float) * R * O);
                mm_math("amx", NULL, y, x, rows, in, w, CAIRN_DTYPE_BF16, out, CAIRN_MATH_BF16);
                for (int r = 0; r < rows; r++)
                    if (memcmp(y + (size_t)r * out, ref + (size_t)r * O, sizeof(float) * out))
                        fail_msg("amx bf16: rows %d in %d out %d: row %d differs from scalar", rows, in, out, r);
            }
    }
    /* Threads and batching on a wider product (the pool splits the outputs). */
    cairn_thread_pool_t *tp[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(cairn_thread_pool_create(i + 1, &tp[i]), CAIRN_OK);
    const int in = 1536, out = 200;
    float *ya = malloc(sizeof(float) * R * out), *yb = malloc(sizeof(float) * R * out);
    assert_true(ya && yb);
    for (int i = 0; i < out * in; i++)
        w[i] = kern_f32_to_bf16(rndf());
    for (int i = 0; i < R * in; i++)
        x[i] = rndf();
    mm_math("amx", tp[0], ya, x, R, in, w, CAIRN_DTYPE_BF16, out, CAIRN_MATH_BF16);
    for (int th = 1; th < 3; th++) {
        mm_math("amx", tp[th], yb, x, R, in, w, CAIRN_DTYPE_BF16, out, CAIRN_MATH_BF16);
        if (memcmp(ya, yb, sizeof(float) * R * out))
            fail_msg("amx bf16: %d threads differ from 1", th + 1);
    }
    for (int r = 0; r < R; r += 7) {
        mm_math("amx", tp[1], yb, x + (size_t)r * in, 1, in, w, CAIRN_DTYPE_BF16, out, CAIRN_MATH_BF16);
        if (memcmp(ya + (size_t)r * out, yb, sizeof(float) * out))
            fail_msg("amx bf16: row %d alone differs from the batch", r);
    }
    mm_math("avx512", tp[1], yb, x, R, in, w, CAIRN_DTYPE_BF16, out, CAIRN_MATH_BF16);
    if (memcmp(ya, yb, sizeof(float) * R * out))
        fail_msg("amx bf16: differs from avx512");
    for (int i = 0; i < 3; i++)
        cairn_thread_pool_destroy(tp[i]);
    free(ya);
    free(yb);
    free(x);
    free(ref);
    free(y);
    free(w);
}

/*
 * The decode (row) kernel against the prefill (packed) kernel of the same implementation,
 * through qmatmul_range itself: each row of a 9- or 13-row call (packed: >= 8 rows) equals
 * that row alone and in a 3-row call (the row kernel), with memcmp, over odd block counts,
 * output ranges that start and end inside a 16-output tile, and a continued accumulator.
 * Any change to the float combination of one kernel (an order of the per-block fmas, a
 * scale product taken differently) breaks it.
 */
static void test_row_kernel_equals_packed(void **state)
{
    (void)state;
    enum { MAXR = 13, OUT = 53 };
    static const int ranges[][2] = {{0, OUT}, {3, 20}, {17, 18}, {5, 52}};
    for (size_t t = 0; t < sizeof wtypes / sizeof wtypes[0]; t++) {
        const cairn_dtype_t wt = wtypes[t];
        const int be = cairn_dtype_block_elems(wt);
        const cairn_dtype_t act = kern__impl_by_name("scalar")->types[wt].act;
        const int nbs[] = {1, 3, 5, be == 32 ? 33 : 7};
        for (size_t ni = 0; ni < sizeof nbs / sizeof nbs[0]; ni++) {
            const int in = nbs[ni] * be, nb32 = in / 32;
            const size_t ldw = cairn_dtype_row_bytes(wt, in), ldq = cairn_dtype_row_bytes(act, in);
            unsigned char *w = malloc(ldw * OUT), *xq = malloc(ldq * MAXR);
            int32_t *sums = malloc(sizeof(int32_t) * MAXR * (size_t)nb32);
            float *x = malloc(sizeof(float) * MAXR * (size_t)in), *y0 = malloc(sizeof(float) * MAXR * OUT);
            float *y1 = malloc(sizeof(float) * MAXR * OUT), *init = malloc(sizeof(float) * MAXR * OUT);
            assert_non_null(w);
            assert_non_null(xq);
            assert_non_null(sums);
            assert_non_null(x);
            assert_non_null(y0);
            assert_non_null(y1);
            assert_non_null(init);
            random_weights(w, wt, OUT, in);
            random_x(x, (size_t)MAXR * in);
            random_x(init, (size_t)MAXR * OUT);
            for (int r = 0; r < MAXR; r++) {
                compute_type_traits(act)->from_f32(xq + r * ldq, x + (size_t)r * in, in);
                kern__q8_0_sums(sums + r * nb32, xq + r * ldq, nb32);
            }
            const int32_t *xs = act == CAIRN_DTYPE_Q8_0 ? sums : NULL;
            for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
                if (!usable(impls[k]))
                    continue;
                const kern_type_ops_t *o = &kern__impl_by_name(impls[k])->types[wt];
                for (size_t ri = 0; ri < sizeof ranges / sizeof ranges[0]; ri++)
                    for (int accm = 0; accm < 2; accm++)
                        for (int R = 9; R <= MAXR; R += 4) {
                            const int o0 = ranges[ri][0], o1 = ranges[ri][1];
                            memcpy(y0, init, sizeof(float) * MAXR * OUT);
                            memcpy(y1, init, sizeof(float) * MAXR * OUT);
                            o->qmatmul_range(y0, OUT, xq, ldq, xs, R, in, w, ldw, o0, o1, accm);
                            for (int r = 0; r < R; r += 3) { /* alone when r % 2, else with the next 2 */
                                const int n = r % 2 ? 1 : (R - r < 3 ? R - r : 3);
                                o->qmatmul_range(y1 + (size_t)r * OUT, OUT, xq + r * ldq, ldq,
                                                 xs ? xs + r * nb32 : NULL, n, in, w, ldw, o0, o1, accm);
                                if (n == 1)
                                    for (int rr = r + 1; rr < r + 3 && rr < R; rr++)
                                        o->qmatmul_range(y1 + (size_t)rr * OUT, OUT, xq + rr * ldq, ldq,
                                                         xs ? xs + rr * nb32 : NULL, 1, in, w, ldw, o0, o1, accm);
                            }
                            if (memcmp(y0, y1, sizeof(float) * (size_t)R * OUT))
                                fail_msg("%s %s: in %d outputs [%d, %d) acc %d: the row kernel differs from the "
                                         "packed kernel (%d rows)", impls[k], cairn_dtype_name(wt), in, o0, o1, accm, R);
                        }
            }
            free(w);
            free(xq);
            free(sums);
            free(x);
            free(y0);
            free(y1);
            free(init);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_impls_equal_scalar),   cmocka_unit_test(test_pieces_accumulate),
        cmocka_unit_test(test_determinism),          cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_fused_products),
        cmocka_unit_test(test_rounding_and_kv_rows), cmocka_unit_test(test_bf16_amx),
        cmocka_unit_test(test_row_kernel_equals_packed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
