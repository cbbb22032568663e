/*
 * kernels_avx512.c — AVX-512 rendition of the canonical kernels (kernels_impl.h).
 *
 * One zmm accumulator holds the 16 lanes of one (row, output) dot product, so every
 * output element sees exactly the canonical order however many rows or outputs a call
 * covers. matmul walks register tiles of up to 6 rows x 4 outputs (24 accumulators):
 * each weight block is loaded and widened once per tile and each x block once per row.
 * Edge tiles with fewer than 4 outputs repeat the last valid weight row and drop the
 * extra results. Blocks of `out` are sized so a block of weights stays in L2 while all
 * row tiles pass over it. When the rows fit one row tile (decode), each weight byte is
 * read once, from DRAM: the tiles then prefetch PF_DIST bytes ahead of the 4 contiguous
 * weight rows they read.
 *
 * BF16 math uses vdpbf16ps and vcvtne2ps2bf16 through inline asm in the native variant
 * ("avx512"), and an exact AVX-512F emulation of both (DAZ inputs, two fmas per pair,
 * FTZ output) in "avx512-emubf16"; asm keeps both variants in one function body and lets
 * this file build without -mavx512bf16. The tests hold the two to bit identity.
 *
 * Only runs where kern__x86_has_avx512() (and kern__x86_has_avx512_bf16() for the native
 * variant). Pure functions; thread-safe.
 */
#include "compute/cpu/x86/x86_impls.h"
#include "compute/cpu/delta_rule_impl.h"

#include <immintrin.h>
#include <stdlib.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

#include "compute/cpu/x86/kernels_exp_x86.h" /* exp8 / exp16, after T256/T512 */

enum { TILE_R = 6, TILE_O = 4 };

/* The canonical 16 -> 1 tree: (j, j+8), (j, j+4), (j, j+2), (0, 1). */
T512 INLINE float hsum16(__m512 v)
{
    __m256 lo = _mm512_castps512_ps256(v);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

/* hsum16 of four vectors at once, [hsum16(a), hsum16(b), hsum16(c), hsum16(d)]: the same
 * additions on the same operands (so the same bits), with the lanes of four
 * accumulators packed into each add. */
T512 INLINE __m128 hsum16x4(__m512 a, __m512 b, __m512 c, __m512 d)
{
    /* j + (j+8): quarters [a0 a1 b0 b1] + [a2 a3 b2 b3] */
    __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
    __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xee));
    /* j + (j+4): quarters [a b c d] of the first 4 plus those of the second 4 */
    __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xdd));
    /* j + (j+2), then 0 + 1, inside each quarter */
    s = _mm512_add_ps(s, _mm512_permute_ps(s, 0x4e));
    s = _mm512_add_ps(s, _mm512_permute_ps(s, 0xb1));
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), s));
}

/* 16 elements of a row of type t from element i as f32; the first `valid` only, the rest
 * zero (valid >= 16: a full block). */
T512 INLINE __m512 load16(const void *row, cairn_dtype_t t, size_t i, int valid)
{
    __mmask16 m = valid >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << valid) - 1u);
    if (t == CAIRN_DTYPE_F32)
        return _mm512_maskz_loadu_ps(m, (const float *)row + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i);
    if (t == CAIRN_DTYPE_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* ---- F32 math ---- */

/* y[r][o] for R rows and TILE_O outputs (n_valid stored), canonical F32 order. */
T512 INLINE void tile_f32(float *y, int ldy, const float *x, int ldx, int R, const void *const wr[TILE_O],
                          cairn_dtype_t t, int n_valid, int in, const char *pf)
{
    const int esz = t == CAIRN_DTYPE_F32 ? 4 : 2; /* 16 elements x 4 rows: 2 or 4 lines */
    __m512 acc[TILE_R][TILE_O];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int o = 0; o < TILE_O; o++)
            acc[r][o] = _mm512_setzero_ps();
    for (int k = 0; k < in; k += 16) {
        int valid = in - k;
        __m512 wv[TILE_O];
#pragma GCC unroll 4
        for (int o = 0; o < TILE_O; o++)
            wv[o] = load16(wr[o], t, (size_t)k, valid);
        if (pf) {
            const char *p = pf + (size_t)k * esz * TILE_O;
            for (int l = 0; l < esz * TILE_O * 16; l += 64)
                _mm_prefetch(p + l, _MM_HINT_T0);
        }
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m512 xv = load16(x + (size_t)r * ldx, CAIRN_DTYPE_F32, (size_t)k, valid);
#pragma GCC unroll 4
            for (int o = 0; o < TILE_O; o++)
                acc[r][o] = _mm512_fmadd_ps(xv, wv[o], acc[r][o]);
        }
    }
    /* Reduce each row's 4 accumulators together (constant indices keep them in
     * registers), then store the valid outputs. */
    const __mmask8 sm = (__mmask8)((1u << n_valid) - 1u);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
        _mm_mask_storeu_ps(y + (size_t)r * ldy, sm, hsum16x4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
}

#define F32_TILE_FN(NAME, DT)                                                                    \
    T512 static void NAME(float *y, int ldy, const void *xv, int ldx, int R,                     \
                          const void *const wr[TILE_O], int n_valid, int in, const char *pf)     \
    {                                                                                            \
        const float *x = xv;                                                                     \
        switch (R) {                                                                             \
        case 1: tile_f32(y, ldy, x, ldx, 1, wr, DT, n_valid, in, pf); break;                     \
        case 2: tile_f32(y, ldy, x, ldx, 2, wr, DT, n_valid, in, pf); break;                     \
        case 3: tile_f32(y, ldy, x, ldx, 3, wr, DT, n_valid, in, pf); break;                     \
        case 4: tile_f32(y, ldy, x, ldx, 4, wr, DT, n_valid, in, pf); break;                     \
        case 5: tile_f32(y, ldy, x, ldx, 5, wr, DT, n_valid, in, pf); break;                     \
        default: tile_f32(y, ldy, x, ldx, 6, wr, DT, n_valid, in, pf); break;                    \
        }                                                                                        \
    }
F32_TILE_FN(tile_f32_wf32, CAIRN_DTYPE_F32)
F32_TILE_FN(tile_f32_wf16, CAIRN_DTYPE_F16)
F32_TILE_FN(tile_f32_wbf16, CAIRN_DTYPE_BF16)

/* ---- BF16 math ---- */

/* x[i .. i+31] rounded to bf16 as vcvtne2ps2bf16 (zero past `valid`), as 16 pairs. */
T512 INLINE __m512i cvt_x32(const float *x, size_t i, int valid, bool native)
{
    __m512 lo = load16(x, CAIRN_DTYPE_F32, i, valid);
    __m512 hi = load16(x, CAIRN_DTYPE_F32, i + 16, valid - 16 > 0 ? valid - 16 : 0);
    if (native) {
        __m512i r;
        __asm__("vcvtne2ps2bf16 %2, %1, %0" : "=v"(r) : "v"(hi), "v"(lo));
        return r;
    }
    const __m512i expm = _mm512_set1_epi32(0x7f800000), sign = _mm512_set1_epi32((int)0x80000000u);
    __m256i half[2];
    for (int h = 0; h < 2; h++) {
        __m512 v = h ? hi : lo;
        __m512i b = _mm512_castps_si512(v);
        b = _mm512_mask_and_epi32(b, _mm512_testn_epi32_mask(b, expm), b, sign); /* DAZ */
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
        __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(b, 16), _mm512_set1_epi32(0x40));
        half[h] = _mm512_cvtepi32_epi16(r);
    }
    return _mm512_inserti64x4(_mm512_castsi256_si512(half[0]), half[1], 1);
}

/* xb [rows][ldx] = x [rows][in] rounded by cvt_x32, zero past in (ldx: in rounded up to 32). */
T512 static void round_x_bf16(uint16_t *xb, const float *x, int rows, int in, int ldx, bool native)
{
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < ldx; k += 32)
            _mm512_storeu_si512(xb + (size_t)r * ldx + k, native ? cvt_x32(x + (size_t)r * in, (size_t)k, in - k, true)
                                                                 : cvt_x32(x + (size_t)r * in, (size_t)k, in - k, false));
}

/* Denormal lanes become zero of the same sign. */
T512 INLINE __m512 flush16(__m512 v)
{
    __m512i b = _mm512_castps_si512(v);
    b = _mm512_mask_and_epi32(b, _mm512_testn_epi32_mask(b, _mm512_set1_epi32(0x7f800000)), b,
                              _mm512_set1_epi32((int)0x80000000u));
    return _mm512_castsi512_ps(b);
}

/* acc += a.pair . b.pair per lane, as vdpbf16ps (odd element first, DAZ, FTZ, RNE). */
T512 INLINE __m512 dp_bf16(__m512 acc, __m512i a, __m512i b, bool native)
{
    if (native) {
        __asm__("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
        return acc;
    }
    const __m512i himask = _mm512_set1_epi32((int)0xffff0000u);
    __m512 a1 = flush16(_mm512_castsi512_ps(_mm512_and_si512(a, himask)));
    __m512 b1 = flush16(_mm512_castsi512_ps(_mm512_and_si512(b, himask)));
    __m512 a0 = flush16(_mm512_castsi512_ps(_mm512_slli_epi32(a, 16)));
    __m512 b0 = flush16(_mm512_castsi512_ps(_mm512_slli_epi32(b, 16)));
    acc = flush16(_mm512_fmadd_ps(a1, b1, flush16(acc)));
    return flush16(_mm512_fmadd_ps(a0, b0, acc));
}

/* x: R rows of ldx bf16 pairs' halves (uint16), already rounded (cvt_x32) and zero-padded
 * to a multiple of 32 elements. */
T512 INLINE void tile_bf16(float *y, int ldy, const uint16_t *x, int ldx, int R, const void *const wr[TILE_O],
                           int n_valid, int in, const char *pf, bool native)
{
    __m512 acc[TILE_R][TILE_O];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int o = 0; o < TILE_O; o++)
            acc[r][o] = _mm512_setzero_ps();
    for (int k = 0; k < in; k += 32) {
        int valid = in - k;
        __mmask32 m = valid >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << valid) - 1u);
        __m512i wv[TILE_O];
#pragma GCC unroll 4
        for (int o = 0; o < TILE_O; o++)
            wv[o] = _mm512_maskz_loadu_epi16(m, (const uint16_t *)wr[o] + k);
        if (pf) { /* 32 elements x 4 rows: 4 lines */
            const char *p = pf + (size_t)k * 2 * TILE_O;
            for (int l = 0; l < 4 * 64; l += 64)
                _mm_prefetch(p + l, _MM_HINT_T0);
        }
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m512i xv = _mm512_loadu_si512(x + (size_t)r * ldx + k);
#pragma GCC unroll 4
            for (int o = 0; o < TILE_O; o++)
                acc[r][o] = dp_bf16(acc[r][o], xv, wv[o], native);
        }
    }
    /* Reduce each row's 4 accumulators together (constant indices keep them in
     * registers), then store the valid outputs. */
    const __mmask8 sm = (__mmask8)((1u << n_valid) - 1u);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
        _mm_mask_storeu_ps(y + (size_t)r * ldy, sm, hsum16x4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
}

#define BF16_TILE_FN(NAME, NATIVE)                                                               \
    T512 static void NAME(float *y, int ldy, const void *xv, int ldx, int R,                     \
                          const void *const wr[TILE_O], int n_valid, int in, const char *pf)     \
    {                                                                                            \
        const uint16_t *x = xv;                                                                  \
        switch (R) {                                                                             \
        case 1: tile_bf16(y, ldy, x, ldx, 1, wr, n_valid, in, pf, NATIVE); break;                \
        case 2: tile_bf16(y, ldy, x, ldx, 2, wr, n_valid, in, pf, NATIVE); break;                \
        case 3: tile_bf16(y, ldy, x, ldx, 3, wr, n_valid, in, pf, NATIVE); break;                \
        case 4: tile_bf16(y, ldy, x, ldx, 4, wr, n_valid, in, pf, NATIVE); break;                \
        case 5: tile_bf16(y, ldy, x, ldx, 5, wr, n_valid, in, pf, NATIVE); break;                \
        default: tile_bf16(y, ldy, x, ldx, 6, wr, n_valid, in, pf, NATIVE); break;               \
        }                                                                                        \
    }
BF16_TILE_FN(tile_bf16_native, true)
BF16_TILE_FN(tile_bf16_emu, false)

/* x: rows of ldx elements (f32, or pre-rounded bf16 for the BF16 tiles). */
typedef void (*tile_fn)(float *y, int ldy, const void *x, int ldx, int R, const void *const wr[TILE_O],
                        int n_valid, int in, const char *pf);

/* Software prefetch distance (bytes ahead of the tile being read) when the weights are
 * streamed once (all rows fit one row tile: decode). Weights then come from DRAM; with
 * the hardware prefetcher alone, f32-math decode read at ~0.5x of a plain read of the
 * same bytes (fewer bytes in flight per instruction window than the bf16 path); 8 KiB
 * ahead brought it to ~0.8-0.9x (bench_kernels "model decode"; 2 and 32 KiB were worse). */
enum { PF_DIST = 8192 };

/* Walks [o0, o1) in L2-sized blocks of weights; inside a block, row tiles of TILE_R over
 * output tiles of TILE_O. The walk never changes a result, only speed. */
static void matmul_walk(tile_fn tile, float *y, const void *x, int ldx, size_t xsz, int rows, int in,
                        const void *w, size_t wrow, int out, int o0, int o1)
{
    int block = (int)((192 * 1024) / (wrow ? wrow : 1)) & ~(TILE_O - 1);
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
                const char *pf = rows <= TILE_R ? (const char *)wr[0] + PF_DIST : NULL;
                tile(y + (size_t)r0 * out + o, out, (const char *)x + (size_t)r0 * ldx * xsz, ldx, R, wr, nv,
                     in, pf);
            }
        }
    }
}

INLINE void matmul_range(float *y, const float *x, int rows, int in, const void *w, cairn_dtype_t wt,
                         int out, int o0, int o1, cairn_math_t math, bool native)
{
    size_t wrow = (size_t)in * (wt == CAIRN_DTYPE_F32 ? 4 : 2); /* the plain float types only */
    tile_fn tile;
    if (wt == CAIRN_DTYPE_BF16)
        tile = math == CAIRN_MATH_BF16 ? (native ? tile_bf16_native : tile_bf16_emu) : tile_f32_wbf16;
    else
        tile = wt == CAIRN_DTYPE_F16 ? tile_f32_wf16 : tile_f32_wf32;
    if (tile == tile_f32_wbf16 || tile == tile_f32_wf16 || tile == tile_f32_wf32) {
        matmul_walk(tile, y, x, in, sizeof(float), rows, in, w, wrow, out, o0, o1);
        return;
    }
    /* BF16 math: round x to bf16 once per call (not once per output tile), rows padded
     * with zeros to whole 32-element blocks; the same cvt_x32 as before, so the same bits. */
    int ldx = (in + 31) & ~31;
    size_t nx = (size_t)rows * ldx;
    uint16_t stackbuf[4096];
    uint16_t *xb = nx <= 4096 ? stackbuf : aligned_alloc(64, (nx * 2 + 63) & ~(size_t)63);
    CAIRN_ASSERT(xb != NULL);
    round_x_bf16(xb, x, rows, in, ldx, native);
    matmul_walk(tile, y, xb, ldx, 2, rows, in, w, wrow, out, o0, o1);
    if (xb != stackbuf)
        free(xb);
}

/* The rows of the weight-type table: matmul_range with the type (and for bf16 weights the
 * BF16-math variant) a constant. */
static void matmul_f32w(float *y, const float *x, int rows, int in, const void *w, int out, int o0, int o1,
                        cairn_math_t math)
{
    matmul_range(y, x, rows, in, w, CAIRN_DTYPE_F32, out, o0, o1, math, false);
}

static void matmul_f16w(float *y, const float *x, int rows, int in, const void *w, int out, int o0, int o1,
                        cairn_math_t math)
{
    matmul_range(y, x, rows, in, w, CAIRN_DTYPE_F16, out, o0, o1, math, false);
}

void kern__avx512_matmul_bf16w(float *y, const float *x, int rows, int in, const void *w, int out, int o0, int o1,
                               cairn_math_t math)
{
    matmul_range(y, x, rows, in, w, CAIRN_DTYPE_BF16, out, o0, o1, math, true);
}

static void matmul_bf16w_emu(float *y, const float *x, int rows, int in, const void *w, int out, int o0,
                             int o1, cairn_math_t math)
{
    matmul_range(y, x, rows, in, w, CAIRN_DTYPE_BF16, out, o0, o1, math, false);
}

/* ---- vector kernels ---- */

T512 INLINE float dot_t(const float *a, const void *b, cairn_dtype_t t, int n)
{
    __m512 acc = _mm512_setzero_ps();
    for (int k = 0; k < n; k += 16)
        acc = _mm512_fmadd_ps(load16(a, CAIRN_DTYPE_F32, (size_t)k, n - k), load16(b, t, (size_t)k, n - k), acc);
    return hsum16(acc);
}

/* The canonical RMSNorm sum: 8 double lanes in one zmm (kernels_impl.h). */
T512 static double avx512_sumsq(const float *x, int n)
{
    __m512d a = _mm512_setzero_pd();
    for (int k = 0; k < n; k += 8) {
        __mmask8 m = n - k >= 8 ? (__mmask8)0xff : (__mmask8)((1u << (n - k)) - 1u);
        __m256 v = _mm256_maskz_loadu_ps(m, x + k);
        a = _mm512_add_pd(a, _mm512_cvtps_pd(_mm256_mul_ps(v, v)));
    }
    __m256d b = _mm256_add_pd(_mm512_castpd512_pd256(a), _mm512_extractf64x4_pd(a, 1));
    __m128d c = _mm_add_pd(_mm256_castpd256_pd128(b), _mm256_extractf128_pd(b, 1));
    return _mm_cvtsd_f64(_mm_add_sd(c, _mm_unpackhi_pd(c, c)));
}

/* RMSNorm's normalize step (kern_impl_t norm_apply), 16 lanes: the same two products. */
T512 static void avx512_norm_apply(float *out, const float *x, float s, const void *w, cairn_dtype_t wt, int n)
{
    if (wt != CAIRN_DTYPE_F32 && wt != CAIRN_DTYPE_F16 && wt != CAIRN_DTYPE_BF16) {
        kern__scalar.norm_apply(out, x, s, w, wt, n); /* its assertion names the type */
        return;
    }
    const __m512 sv = _mm512_set1_ps(s);
    for (int k = 0; k < n; k += 16) {
        const __mmask16 m = n - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - k)) - 1u);
        const __m512 h = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + k), sv);
        _mm512_mask_storeu_ps(out + k, m, _mm512_mul_ps(load16(w, wt, (size_t)k, n - k), h));
    }
}

T512 INLINE void axpy_t(float *acc, float s, const void *row, cairn_dtype_t t, int n)
{
    __m512 sv = _mm512_set1_ps(s);
    for (int k = 0; k < n; k += 16) {
        int valid = n - k;
        __mmask16 m = valid >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << valid) - 1u);
        __m512 p = _mm512_mul_ps(sv, load16(row, t, (size_t)k, valid)); /* product, then sum */
        _mm512_mask_storeu_ps(acc + k, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, acc + k), p));
    }
}

/* rows of K/V of type t, stride bytes apart, widened (attention's tiles). */
T512 INLINE void rows_to_f32_t(float *dst, const void *src, size_t stride, int rows, cairn_dtype_t t, int n)
{
    for (int r = 0; r < rows; r++, dst += n, src = (const unsigned char *)src + stride)
        for (int i = 0; i < n; i += 16) {
            __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
            _mm512_mask_storeu_ps(dst + i, m, load16(src, t, (size_t)i, n - i));
        }
}

#define AVX512_TYPE_OPS(SUF, T)                                                                        \
    T512 static float avx512_dot_##SUF(const float *a, const void *b, int n) { return dot_t(a, b, T, n); } \
    T512 static void avx512_axpy_##SUF(float *acc, float s, const void *row, int n)                    \
    {                                                                                                  \
        axpy_t(acc, s, row, T, n);                                                                     \
    }                                                                                                  \
    T512 static void avx512_rows_##SUF(float *dst, const void *src, size_t stride, int rows, int n)    \
    {                                                                                                  \
        rows_to_f32_t(dst, src, stride, rows, T, n);                                                   \
    }
AVX512_TYPE_OPS(f32, CAIRN_DTYPE_F32)
AVX512_TYPE_OPS(f16, CAIRN_DTYPE_F16)
AVX512_TYPE_OPS(bf16, CAIRN_DTYPE_BF16)

T512 INLINE __mmask16 mask16(size_t valid)
{
    return valid >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << valid) - 1u);
}

T512 INLINE __m512 neg16(__m512 g)
{
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), _mm512_set1_epi32((int)0x80000000u)));
}

/* s = g / (1 + exp(-g)) (silu), 16 lanes. */
T512 INLINE __m512 silu16(__m512 g)
{
    return _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(neg16(g))));
}

/* s = g / (1 + exp(M2C * (g + K * g^3))) (GELU-tanh; kernels_impl.h spells the order out). */
T512 INLINE __m512 gelu_tanh16(__m512 g)
{
    __m512 g3 = _mm512_mul_ps(_mm512_mul_ps(g, g), g);
    __m512 u = _mm512_add_ps(g, _mm512_mul_ps(_mm512_set1_ps(KERN_GELU_K), g3));
    __m512 e = exp16(_mm512_mul_ps(_mm512_set1_ps(KERN_GELU_M2C), u));
    return _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

/* s = 1 / (1 + exp(-g)). */
T512 INLINE __m512 sigmoid16(__m512 g)
{
    return _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(neg16(g))));
}

#define AVX512_GLU(NAME, ACT)                                                                          \
    T512 static void NAME(float *out, const float *gate, const float *up, size_t n)                    \
    {                                                                                                  \
        for (size_t k = 0; k < n; k += 16) {                                                           \
            __mmask16 m = mask16(n - k);                                                               \
            __m512 s = ACT(_mm512_maskz_loadu_ps(m, gate + k));                                        \
            _mm512_mask_storeu_ps(out + k, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + k)));     \
        }                                                                                              \
    }
AVX512_GLU(avx512_silu_mul, silu16)
AVX512_GLU(avx512_gelu_tanh_mul, gelu_tanh16)
AVX512_GLU(avx512_sigmoid_mul, sigmoid16)

/* f32 -> bf16 as compute_f32_to_bf16, 16 lanes: round to nearest even on the bits, a NaN
 * kept quiet with its upper payload; no DAZ (the K/V store's rounding, bit for bit). */
T512 static void avx512_from_f32_bf16(void *dst, const float *src, int n)
{
    uint16_t *d = dst;
    const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff), abs = _mm512_set1_epi32(0x7fffffff),
                  inf = _mm512_set1_epi32(0x7f800000), quiet = _mm512_set1_epi32(0x40);
    for (int k = 0; k < n; k += 16) {
        const __mmask16 m = mask16((size_t)(n - k));
        const __m512i b = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, src + k));
        const __m512i hi = _mm512_srli_epi32(b, 16);
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(half, _mm512_and_si512(hi, one))), 16);
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, abs), inf);
        r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, quiet));
        _mm256_mask_storeu_epi16(d + k, m, _mm512_cvtepi32_epi16(r));
    }
}

extern const struct attn_impl attn__avx512;

#define AVX512_ROW(MM, SUF) \
    {.matmul_range = MM, .dot = avx512_dot_##SUF, .axpy = avx512_axpy_##SUF, .rows_to_f32 = avx512_rows_##SUF}
#define AVX512_IMPL(NAME, AVAILABLE, STAND_IN, BF16MM, QROWS)                                                 \
    {                                                                                                  \
        .name = NAME, .available = AVAILABLE, .stand_in = STAND_IN,                                    \
        .types = {[CAIRN_DTYPE_F32] = AVX512_ROW(matmul_f32w, f32),                                    \
                  [CAIRN_DTYPE_F16] = AVX512_ROW(matmul_f16w, f16),                                    \
                  [CAIRN_DTYPE_BF16] = {.matmul_range = BF16MM, .dot = avx512_dot_bf16, .axpy = avx512_axpy_bf16, \
                                        .rows_to_f32 = avx512_rows_bf16, .from_f32 = avx512_from_f32_bf16},  \
                  QROWS},                               \
        .sumsq = avx512_sumsq, .norm_apply = avx512_norm_apply,                                        \
        .glu = {[COMPUTE_GLU_SILU] = avx512_silu_mul, [COMPUTE_GLU_GELU_TANH] = avx512_gelu_tanh_mul,  \
                [COMPUTE_GLU_SIGMOID] = avx512_sigmoid_mul},                                           \
        .bf16_math_fast = true, .attn = &attn__avx512, .delta_step = dr__delta_avx512,                 \
    }

/* The quantized rows: AVX-512 VNNI (quant_avx512.c) where "avx512" runs (it needs
 * AVX512_BF16 and AVX512_VNNI); the AVX2 rows (quant_avx2.c) in "avx512-emubf16", which
 * runs on AVX-512 CPUs that may lack VNNI. Same bits either way. */
#define QROWS_VNNI                                                                                     \
    [CAIRN_DTYPE_Q8_0] = {.rows_to_f32 = kern__avx512_rows_q8_0, .from_f32 = kern__avx512_from_q8_0,   \
                          .qmatmul_range = kern__avx512_qmm_q8_0},                                     \
    [CAIRN_DTYPE_Q4_0] = {.qmatmul_range = kern__avx512_qmm_q4_0},                                     \
    [CAIRN_DTYPE_Q4_K] = {.qmatmul_range = kern__avx512_qmm_q4_k},                                     \
    [CAIRN_DTYPE_Q5_K] = {.qmatmul_range = kern__avx512_qmm_q5_k},                                     \
    [CAIRN_DTYPE_Q6_K] = {.qmatmul_range = kern__avx512_qmm_q6_k},                                     \
    [CAIRN_DTYPE_Q8_K] = {.from_f32 = kern__avx512_from_q8_k},                                         \
    [CAIRN_DTYPE_FP8_E4M3] = {.rows_to_f32 = kern__avx512_rows_fp8}
#define QROWS_AVX2 KERN_AVX2_QROWS
/* "amx": the VNNI rows with AMX-INT8 tiles for prefill (quant_amx.c); same bits. */
#define AMX_TABLE(T, BYTES, FILL)                                                                      \
    .qmatmul_range = kern__amx_qmm_##T, .qmm_table_bytes = kern__amx_qmm_table_bytes_##BYTES,          \
    .qmm_table_fill = kern__amx_qmm_table_fill_##FILL, .qmatmul_range_table = kern__amx_qmm_##T##_table
#define QROWS_AMX                                                                                      \
    [CAIRN_DTYPE_Q8_0] = {.rows_to_f32 = kern__avx512_rows_q8_0, .from_f32 = kern__avx512_from_q8_0,   \
                          AMX_TABLE(q8_0, b32, q8_0)},                                                 \
    [CAIRN_DTYPE_Q4_0] = {AMX_TABLE(q4_0, b32, q4_0)},                                                 \
    [CAIRN_DTYPE_Q4_K] = {AMX_TABLE(q4_k, kq, q4_k)},                                                  \
    [CAIRN_DTYPE_Q5_K] = {AMX_TABLE(q5_k, kq, q4_k)},                                                  \
    [CAIRN_DTYPE_Q6_K] = {AMX_TABLE(q6_k, kq, q6_k)},                                                  \
    [CAIRN_DTYPE_Q8_K] = {.from_f32 = kern__avx512_from_q8_k},                                         \
    [CAIRN_DTYPE_FP8_E4M3] = {.rows_to_f32 = kern__avx512_rows_fp8}

const kern_impl_t kern__avx512 = AVX512_IMPL("avx512", kern__x86_has_avx512_native, "avx512-emubf16",
                                             kern__avx512_matmul_bf16w, QROWS_VNNI);
const kern_impl_t kern__amx = AVX512_IMPL("amx", kern__x86_has_amx_int8, "avx512", kern__amx_matmul_bf16w, QROWS_AMX);
const kern_impl_t kern__avx512_emubf16 = AVX512_IMPL("avx512-emubf16", kern__x86_has_avx512, NULL,
                                                     matmul_bf16w_emu, QROWS_AVX2);
