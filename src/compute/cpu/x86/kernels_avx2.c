/*
 * kernels_avx2.c — AVX2+FMA rendition of the canonical kernels (kernels_impl.h).
 *
 * The canonical 16 lanes live in two ymm registers (lanes 0-7 and 8-15), so the bits
 * match the scalar and AVX-512 code. matmul walks register tiles of up to 2 rows x 3
 * outputs (12 ymm accumulators); the zero-padded last block is staged through small
 * stack buffers. BF16 math with bf16 weights (vdpbf16ps's canonical steps: per lane and
 * pair, acc = FTZ(fma(a1, b1, acc)) then FTZ(fma(a0, b0, acc)), inputs DAZ) has no
 * instruction of its own on AVX2: bf16_math_rows emulates it eight lanes at a time with
 * the same fmas and flushes as the portable emulation (kernels.c's dpbf16_lane), so the
 * bits are the same; it is still several times slower than f32 math, so
 * kern_bf16_math_fast() stays false here.
 *
 * Only runs where kern__x86_has_avx2() (AVX2, FMA, F16C and the OS saving YMM). Pure
 * functions; thread-safe.
 */
#include "compute/cpu/x86/x86_impls.h"
#include "compute/cpu/delta_rule_impl.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "compute/type_traits.h"

#define T256 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

#include "compute/cpu/x86/kernels_exp_x86.h" /* exp8 / exp16, after T256/T512 */

enum { TILE_R = 2, TILE_O = 3 };

/* Lanes 0-7 and 8-15 of a canonical accumulator. */
typedef struct {
    __m256 lo, hi;
} acc16;

T256 INLINE float hsum16(acc16 a)
{
    __m256 s8 = _mm256_add_ps(a.lo, a.hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

/* 8 elements of a row of type t from element i (in bounds) as f32. */
T256 INLINE __m256 load8(const void *row, cairn_dtype_t t, size_t i)
{
    if (t == CAIRN_DTYPE_F32)
        return _mm256_loadu_ps((const float *)row + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + i));
    if (t == CAIRN_DTYPE_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Copies the last partial block (valid < 16 elements from i) into a zero-padded buffer
 * and returns it as a row pointer with element index 0. */
static inline const void *stage_tail(void *buf, const void *row, cairn_dtype_t t, size_t i, int valid)
{
    size_t es = t == CAIRN_DTYPE_F32 ? 4 : 2; /* the plain float types only */
    memset(buf, 0, 16 * es);
    memcpy(buf, (const char *)row + i * es, (size_t)valid * es);
    return buf;
}

T256 INLINE void tile_f32(float *y, int ldy, const float *x, int ldx, int R, const void *const wr[TILE_O],
                          cairn_dtype_t t, int n_valid, int in)
{
    acc16 acc[TILE_R][TILE_O];
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
#pragma GCC unroll 3
        for (int o = 0; o < TILE_O; o++)
            acc[r][o].lo = acc[r][o].hi = _mm256_setzero_ps();
    for (int k = 0; k < in; k += 16) {
        const void *wp[TILE_O];
        const float *xp[TILE_R];
        size_t at = (size_t)k;
        float xbuf[TILE_R][16], wbuf[TILE_O][16]; /* f32-sized: large enough for any dtype */
        if (in - k < 16) {
            for (int o = 0; o < TILE_O; o++)
                wp[o] = stage_tail(wbuf[o], wr[o], t, at, in - k);
            for (int r = 0; r < R; r++)
                xp[r] = stage_tail(xbuf[r], x + (size_t)r * ldx, CAIRN_DTYPE_F32, at, in - k);
            at = 0;
        } else {
            for (int o = 0; o < TILE_O; o++)
                wp[o] = wr[o];
            for (int r = 0; r < R; r++)
                xp[r] = x + (size_t)r * ldx;
        }
#pragma GCC unroll 3
        for (int o = 0; o < TILE_O; o++) {
            __m256 wlo = load8(wp[o], t, at), whi = load8(wp[o], t, at + 8);
#pragma GCC unroll 2
            for (int r = 0; r < R; r++) {
                acc[r][o].lo = _mm256_fmadd_ps(_mm256_loadu_ps(xp[r] + at), wlo, acc[r][o].lo);
                acc[r][o].hi = _mm256_fmadd_ps(_mm256_loadu_ps(xp[r] + at + 8), whi, acc[r][o].hi);
            }
        }
    }
    /* Reduce every accumulator with constant indices (so they stay in registers), then
     * store the valid outputs. */
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        float s[TILE_O];
#pragma GCC unroll 4
        for (int o = 0; o < TILE_O; o++)
            s[o] = hsum16(acc[r][o]);
        for (int o = 0; o < n_valid; o++)
            y[(size_t)r * ldy + o] = s[o];
    }
}

#define F32_TILE_FN(NAME, DT)                                                                    \
    T256 static void NAME(float *y, int ldy, const float *x, int ldx, int R,                     \
                          const void *const wr[TILE_O], int n_valid, int in)                     \
    {                                                                                            \
        if (R == 1)                                                                              \
            tile_f32(y, ldy, x, ldx, 1, wr, DT, n_valid, in);                                    \
        else                                                                                     \
            tile_f32(y, ldy, x, ldx, 2, wr, DT, n_valid, in);                                    \
    }
F32_TILE_FN(tile_wf32, CAIRN_DTYPE_F32)
F32_TILE_FN(tile_wf16, CAIRN_DTYPE_F16)
F32_TILE_FN(tile_wbf16, CAIRN_DTYPE_BF16)

/* ---- BF16 math with bf16 weights: vdpbf16ps's steps, eight lanes at a time ---------------- */

enum { BF_O = 4 }; /* outputs per pass: 8 accumulators */

/* Signed zero where v's exponent is zero (DAZ on an input, FTZ on a result). */
T256 INLINE __m256 flush8(__m256 v)
{
    const __m256i b = _mm256_castps_si256(v);
    const __m256i den = _mm256_cmpeq_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7f800000)), _mm256_setzero_si256());
    return _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_and_si256(den, _mm256_set1_epi32(0x7fffffff)), b));
}

/* Pairs (even, odd) of 8 dwords of bf16 as f32, each flushed. */
T256 INLINE void bf16_pairs(__m256i d, __m256 *even, __m256 *odd)
{
    *even = flush8(_mm256_castsi256_ps(_mm256_slli_epi32(d, 16)));
    *odd = flush8(_mm256_castsi256_ps(_mm256_and_si256(d, _mm256_set1_epi32((int)0xffff0000u))));
}

/* One pair step of 8 lanes: acc + a1 b1, then + a0 b0, each result flushed (acc is flushed
 * on entry: it is 0 or a previous step's result). */
T256 INLINE __m256 dp_step(__m256 acc, __m256 a0, __m256 a1, __m256 b0, __m256 b1)
{
    acc = flush8(_mm256_fmadd_ps(a1, b1, acc));
    return flush8(_mm256_fmadd_ps(a0, b0, acc));
}

/* y[o] for the nv <= BF_O outputs wr[], x's row already rounded to bf16 (DAZ) and
 * zero-padded to `inpad` (a multiple of 32) in xb; the weight rows' last partial block is
 * read through a zero-padded copy. The lanes and the final tree are the canonical ones. */
T256 static void bf16_math_tile(float *y, const uint16_t *xb, const uint16_t *const wr[BF_O], int nv, int in,
                                int inpad)
{
    acc16 acc[BF_O];
    for (int j = 0; j < BF_O; j++)
        acc[j].lo = acc[j].hi = _mm256_setzero_ps();
    const int full = in / 32 * 32;
    for (int k = 0; k < inpad; k += 32) {
        __m256 x0l, x1l, x0h, x1h;
        bf16_pairs(_mm256_loadu_si256((const __m256i *)(xb + k)), &x0l, &x1l);
        bf16_pairs(_mm256_loadu_si256((const __m256i *)(xb + k + 16)), &x0h, &x1h);
        _Alignas(32) uint16_t wt[BF_O][32];
#pragma GCC unroll 4
        for (int j = 0; j < BF_O; j++) {
            const uint16_t *wp = wr[j] + k;
            if (k >= full) { /* the zero-padded last block */
                memset(wt[j], 0, sizeof wt[j]);
                memcpy(wt[j], wp, (size_t)(in - k) * 2);
                wp = wt[j];
            }
            __m256 w0, w1;
            bf16_pairs(_mm256_loadu_si256((const __m256i *)wp), &w0, &w1);
            acc[j].lo = dp_step(acc[j].lo, x0l, x1l, w0, w1);
            bf16_pairs(_mm256_loadu_si256((const __m256i *)(wp + 16)), &w0, &w1);
            acc[j].hi = dp_step(acc[j].hi, x0h, x1h, w0, w1);
        }
    }
    for (int j = 0; j < nv; j++)
        y[j] = hsum16(acc[j]);
}

/* BF16 math, bf16 weights: rows x [o0, o1), blocks of outputs whose weights fit L2 walked
 * by every row. Returns false (nothing written) when the row buffer cannot be had. */
T256 static bool bf16_math_rows(float *y, const float *x, int rows, int in, const uint16_t *w, int out, int o0,
                                int o1)
{
    const int inpad = (in + 31) / 32 * 32;
    uint16_t *xb = malloc(sizeof(uint16_t) * (size_t)inpad * (size_t)(rows > 0 ? rows : 1));
    if (!xb)
        return false;
    for (int r = 0; r < rows; r++) {
        uint16_t *d = xb + (size_t)r * inpad;
        const float *xr = x + (size_t)r * in;
        for (int i = 0; i < in; i++) {
            uint32_t b;
            memcpy(&b, &xr[i], 4);
            const float f = (b & 0x7f800000u) ? xr[i] : compute_bits_f32(b & 0x80000000u); /* DAZ */
            d[i] = compute_f32_to_bf16(f);
        }
        for (int i = in; i < inpad; i++)
            d[i] = 0;
    }
    int block = (int)((192 * 1024) / (in > 0 ? (size_t)in * 2 : 1));
    block -= block % BF_O;
    if (block < 4 * BF_O)
        block = 4 * BF_O;
    for (int b0 = o0; b0 < o1; b0 += block) {
        const int b1 = o1 - b0 > block ? b0 + block : o1;
        for (int r = 0; r < rows; r++)
            for (int o = b0; o < b1; o += BF_O) {
                const int nv = b1 - o < BF_O ? b1 - o : BF_O;
                const uint16_t *wr[BF_O];
                for (int j = 0; j < BF_O; j++)
                    wr[j] = w + (size_t)(o + (j < nv ? j : nv - 1)) * (size_t)in;
                bf16_math_tile(y + (size_t)r * out + o, xb + (size_t)r * inpad, wr, nv, in, inpad);
            }
    }
    free(xb);
    return true;
}

/* One row of the weight-type table: the tile above with the type a constant; BF16 math
 * with bf16 weights through bf16_math_rows (the portable emulation if its buffer fails). */
INLINE void matmul_t(float *y, const float *x, int rows, int in, const void *w, cairn_dtype_t wt, int out,
                     int o0, int o1, cairn_math_t math,
                     void (*tile)(float *, int, const float *, int, int, const void *const[TILE_O], int, int))
{
    if (math == CAIRN_MATH_BF16 && wt == CAIRN_DTYPE_BF16) {
        if (!bf16_math_rows(y, x, rows, in, w, out, o0, o1))
            kern__scalar.types[CAIRN_DTYPE_BF16].matmul_range(y, x, rows, in, w, out, o0, o1, math);
        return;
    }
    size_t wrow = (size_t)in * (wt == CAIRN_DTYPE_F32 ? 4 : 2);
    int block = (int)((192 * 1024) / (wrow ? wrow : 1));
    block -= block % TILE_O;
    if (block < 4 * TILE_O)
        block = 4 * TILE_O;
    for (int b0 = o0; b0 < o1; b0 += block) {
        int b1 = o1 - b0 > block ? b0 + block : o1;
        for (int r0 = 0; r0 < rows; r0 += TILE_R) {
            int R = rows - r0 < TILE_R ? rows - r0 : TILE_R;
            for (int o = b0; o < b1; o += TILE_O) {
                int nv = b1 - o < TILE_O ? b1 - o : TILE_O;
                const void *wr[TILE_O];
                for (int j = 0; j < TILE_O; j++)
                    wr[j] = (const char *)w + (size_t)(o + (j < nv ? j : nv - 1)) * wrow;
                tile(y + (size_t)r0 * out + o, out, x + (size_t)r0 * in, in, R, wr, nv, in);
            }
        }
    }
}

T256 INLINE float dot_t(const float *a, const void *b, cairn_dtype_t t, int n)
{
    acc16 acc = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    float abuf[16], bbuf[16];
    for (int k = 0; k < n; k += 16) {
        const float *ap = a;
        const void *bp = b;
        size_t at = (size_t)k;
        if (n - k < 16) {
            ap = stage_tail(abuf, a, CAIRN_DTYPE_F32, at, n - k);
            bp = stage_tail(bbuf, b, t, at, n - k);
            at = 0;
        }
        acc.lo = _mm256_fmadd_ps(_mm256_loadu_ps(ap + at), load8(bp, t, at), acc.lo);
        acc.hi = _mm256_fmadd_ps(_mm256_loadu_ps(ap + at + 8), load8(bp, t, at + 8), acc.hi);
    }
    return hsum16(acc);
}

/* The canonical RMSNorm sum: lanes 0-3 in lo, 4-7 in hi (kernels_impl.h). */
T256 static double avx2_sumsq(const float *x, int n)
{
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    for (int k = 0; k < n; k += 8) {
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 v = _mm256_maskload_ps(x + k, m);
        __m256 sq = _mm256_mul_ps(v, v);
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
    }
    __m256d b = _mm256_add_pd(lo, hi);
    __m128d c = _mm_add_pd(_mm256_castpd256_pd128(b), _mm256_extractf128_pd(b, 1));
    return _mm_cvtsd_f64(_mm_add_sd(c, _mm_unpackhi_pd(c, c)));
}

T256 INLINE void axpy_t(float *acc, float s, const void *row, cairn_dtype_t t, int n)
{
    __m256 sv = _mm256_set1_ps(s);
    int k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256 p = _mm256_mul_ps(sv, load8(row, t, (size_t)k)); /* product, then sum */
        _mm256_storeu_ps(acc + k, _mm256_add_ps(_mm256_loadu_ps(acc + k), p));
    }
    kern__scalar.types[t].axpy(acc + k, s, (const char *)row + (size_t)k * (t == CAIRN_DTYPE_F32 ? 4 : 2), n - k);
}

/* rows of K/V of type t, stride bytes apart, widened (attention's tiles). */
T256 INLINE void rows_to_f32_t(float *dst, const void *src, size_t stride, int rows, cairn_dtype_t t, int n)
{
    for (int r = 0; r < rows; r++, dst += n, src = (const unsigned char *)src + stride) {
        int i = 0;
        if (t != CAIRN_DTYPE_F32)
            for (; i + 8 <= n; i += 8)
                _mm256_storeu_ps(dst + i, load8(src, t, (size_t)i));
        kern_row_to_f32(dst + i, (const unsigned char *)src + (size_t)i * (t == CAIRN_DTYPE_F32 ? 4 : 2), t, n - i);
    }
}

#define AVX2_TYPE_OPS(SUF, T, TILE)                                                                    \
    static void avx2_matmul_##SUF(float *y, const float *x, int rows, int in, const void *w, int out,    \
                                  int o0, int o1, cairn_math_t math)                                   \
    {                                                                                                  \
        matmul_t(y, x, rows, in, w, T, out, o0, o1, math, TILE);                                       \
    }                                                                                                  \
    T256 static float avx2_dot_##SUF(const float *a, const void *b, int n) { return dot_t(a, b, T, n); } \
    T256 static void avx2_axpy_##SUF(float *acc, float s, const void *row, int n)                      \
    {                                                                                                  \
        axpy_t(acc, s, row, T, n);                                                                     \
    }                                                                                                  \
    T256 static void avx2_rows_##SUF(float *dst, const void *src, size_t stride, int rows, int n)      \
    {                                                                                                  \
        rows_to_f32_t(dst, src, stride, rows, T, n);                                                   \
    }
AVX2_TYPE_OPS(f32, CAIRN_DTYPE_F32, tile_wf32)
AVX2_TYPE_OPS(f16, CAIRN_DTYPE_F16, tile_wf16)
AVX2_TYPE_OPS(bf16, CAIRN_DTYPE_BF16, tile_wbf16)
#define AVX2_ROW(SUF) \
    {.matmul_range = avx2_matmul_##SUF, .dot = avx2_dot_##SUF, .axpy = avx2_axpy_##SUF, .rows_to_f32 = avx2_rows_##SUF}

/* s = g / (1 + exp(-g)) (silu), 8 lanes. */
T256 INLINE __m256 silu8(__m256 g)
{
    __m256 e = exp8(_mm256_xor_ps(g, _mm256_set1_ps(-0.0f)));
    return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/* s = g / (1 + exp(M2C * (g + K * g^3))) (GELU-tanh; kernels_impl.h spells the order out). */
T256 INLINE __m256 gelu_tanh8(__m256 g)
{
    __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
    __m256 u = _mm256_add_ps(g, _mm256_mul_ps(_mm256_set1_ps(KERN_GELU_K), g3));
    __m256 e = exp8(_mm256_mul_ps(_mm256_set1_ps(KERN_GELU_M2C), u));
    return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/* s = 1 / (1 + exp(-g)). */
T256 INLINE __m256 sigmoid8(__m256 g)
{
    __m256 e = exp8(_mm256_xor_ps(g, _mm256_set1_ps(-0.0f)));
    return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

#define AVX2_GLU(NAME, ACT, GLU)                                                                       \
    T256 static void NAME(float *out, const float *gate, const float *up, size_t n)                    \
    {                                                                                                  \
        size_t k = 0;                                                                                  \
        for (; k + 8 <= n; k += 8)                                                                     \
            _mm256_storeu_ps(out + k, _mm256_mul_ps(ACT(_mm256_loadu_ps(gate + k)), _mm256_loadu_ps(up + k))); \
        kern__scalar.glu[GLU](out + k, gate + k, up + k, n - k);                                       \
    }
AVX2_GLU(avx2_silu_mul, silu8, COMPUTE_GLU_SILU)
AVX2_GLU(avx2_gelu_tanh_mul, gelu_tanh8, COMPUTE_GLU_GELU_TANH)
AVX2_GLU(avx2_sigmoid_mul, sigmoid8, COMPUTE_GLU_SIGMOID)

extern const struct attn_impl attn__avx2;

const kern_impl_t kern__avx2 = {
    .name = "avx2",
    .available = kern__x86_has_avx2,
    .types = {[CAIRN_DTYPE_F32] = AVX2_ROW(f32), [CAIRN_DTYPE_F16] = AVX2_ROW(f16),
              [CAIRN_DTYPE_BF16] = AVX2_ROW(bf16), KERN_AVX2_QROWS},
    .sumsq = avx2_sumsq,
    .glu = {[COMPUTE_GLU_SILU] = avx2_silu_mul, [COMPUTE_GLU_GELU_TANH] = avx2_gelu_tanh_mul,
            [COMPUTE_GLU_SIGMOID] = avx2_sigmoid_mul},
    .bf16_math_fast = false,
    .attn = &attn__avx2,
    .delta_step = dr__delta_avx2, /* delta_rule_x86.c */
};
