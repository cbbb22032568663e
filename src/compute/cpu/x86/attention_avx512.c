/*
 * attention_avx512.c — AVX-512 rendition of the attention primitives (attention_impl.h).
 *
 * scores16 keeps one zmm accumulator per key (the 16 canonical lanes of its dot product)
 * and reduces the 16 accumulators together: each level of the canonical tree adds the
 * 128-bit chunks or the lane pairs of two vectors at once, so 16 scores cost 15 adds and
 * 30 shuffles instead of 16 separate trees, and every score still sees exactly the tree
 * (j, j+8), (j, j+4), (j, j+2), (0, 1). softmax runs 16 keys per vector with the
 * canonical exp. pv broadcasts one probability per (row, key) and accumulates up to 4
 * rows x 64 dimensions in registers, each element an fma chain by increasing key.
 *
 * scores16_t (tiles of many rows) works on 16 keys transposed (transpose16: kt[d][k]):
 * lane l of the canonical dot of one row, taken over the keys, is the fma chain
 * acc = fma(q[16b + l], kt[16b + l][0..15], acc) by increasing block b, so each vector
 * holds lane l of 16 scores and the canonical tree (l, l+8), (l, l+4), (l, l+2), (0, 1)
 * becomes 15 vertical adds per 16 scores. Lanes are taken in the order 0, 8, 4, 12, 2,
 * 10, 6, 14, 1, 9, ... so each level folds as soon as its operands exist (five live
 * vectors per row); 4 rows share each kt load and q is an embedded broadcast. Same
 * operations on the same operands as scores16, so the same bits.
 *
 * attn__avx512_pair is the pair order of bf16 K/V (attention_impl.h, steps 1' and 4'):
 * per pair of elements (scores: over 16 transposed keys, q an f32 broadcast of its packed
 * bf16) or of positions (p.v) one multiply, one fma and one add, under MXCSR.DAZ|FTZ,
 * which is what one AMX-BF16 tile step computes on the device's Xeon; where the tiles
 * passed their self-check (x86/attention_amx.c) it hands them the rows of whole 16-row
 * tiles and computes the rest (decode, leftover rows) itself, with the same bits.
 *
 * K/V rows are widened by the AVX-512 kernels' rows_to_f32. The attention of the
 * "avx512" and "avx512-emubf16" kernel implementations (kernels_avx512.c), which run only
 * where AVX-512F/BW/VL/DQ are present. Pure functions; thread-safe.
 */
#include "compute/cpu/attention_impl.h"

#include <immintrin.h>
#include <string.h>

#include "compute/cpu/x86/x86_impls.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

#include "compute/cpu/x86/kernels_exp_x86.h" /* exp8 / exp16, after T256/T512 */

T512 INLINE __mmask16 tail_mask(int valid)
{
    return valid >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << valid) - 1u);
}

/* Level 1 of the tree for two accumulators: [a(j)+a(j+8) | b(j)+b(j+8)], j < 8. */
T512 INLINE __m512 tree_l1(__m512 a, __m512 b)
{
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
}

/* Level 2: from [x | y] and [z | w] (8 lanes each), [x(j)+x(j+4) | y.. | z.. | w..], j < 4. */
T512 INLINE __m512 tree_l2(__m512 a, __m512 b)
{
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xdd));
}

/* Level 3: per 128-bit chunk, [a(0)+a(2), a(1)+a(3), b(0)+b(2), b(1)+b(3)]. */
T512 INLINE __m512 tree_l3(__m512 a, __m512 b)
{
    return _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xee));
}

/* Level 4: per 128-bit chunk, [a(0)+a(1), a(2)+a(3), b(0)+b(1), b(2)+b(3)]. */
T512 INLINE __m512 tree_l4(__m512 a, __m512 b)
{
    return _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xdd));
}

T512 static void avx512_scores16(float *s, const float *q, const float *kb, int hd, float scale)
{
    __m512 a[16];
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++)
        a[k] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 16) {
        __mmask16 m = tail_mask(hd - d); /* the zero-padded last block */
        __m512 qv = _mm512_maskz_loadu_ps(m, q + d);
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++)
            a[k] = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, kb + (size_t)k * hd + d), a[k]);
    }
    /* Pairings chosen so that lane k of the result is key k: z_i holds keys i, i+4, i+8,
     * i+12 in its four chunks; level 3 pairs (z0, z1) and (z2, z3); level 4 interleaves. */
    __m512 z0 = tree_l2(tree_l1(a[0], a[4]), tree_l1(a[8], a[12]));
    __m512 z1 = tree_l2(tree_l1(a[1], a[5]), tree_l1(a[9], a[13]));
    __m512 z2 = tree_l2(tree_l1(a[2], a[6]), tree_l1(a[10], a[14]));
    __m512 z3 = tree_l2(tree_l1(a[3], a[7]), tree_l1(a[11], a[15]));
    __m512 r = tree_l4(tree_l3(z0, z1), tree_l3(z2, z3));
    _mm512_storeu_ps(s, _mm512_mul_ps(r, _mm512_set1_ps(scale)));
}

T512 static float avx512_softmax(float *s, int n)
{
    const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
    __m512 mx = ninf;
    for (int k = 0; k < n; k += 16)
        mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(ninf, tail_mask(n - k), s + k));
    /* The canonical tree with max (x > y ? x : y is what max_ps computes). */
    __m256 m8 = _mm256_max_ps(_mm512_castps512_ps256(mx),
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(mx), 1)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    __m128 m1 = _mm_max_ss(m2, _mm_movehdup_ps(m2));
    const __m512 m = _mm512_broadcastss_ps(m1);

    __m512 sum = _mm512_setzero_ps();
    for (int k = 0; k < n; k += 16) {
        __mmask16 mk = tail_mask(n - k);
        __m512 e = _mm512_maskz_mov_ps(mk, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, s + k), m)));
        _mm512_mask_storeu_ps(s + k, mk, e);
        sum = _mm512_add_ps(sum, e); /* the padding adds +0 */
    }
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(sum),
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sum), 1)));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

/* R rows (R <= 4) x dimensions [d0, d0 + 64) of step 4; mk masks the 4 vectors to hd. */
T512 INLINE void pv_tile(float *acc, int lda, const float *p, int ldp, int R, int cnt,
                         const float *vb, int hd, int d0, const __mmask16 mk[4])
{
    __m512 a[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            a[i][c] = _mm512_maskz_loadu_ps(mk[c], acc + (size_t)i * lda + d0 + 16 * c);
    for (int j = 0; j < cnt; j++) {
        const float *v = vb + (size_t)j * hd + d0;
        __m512 vv[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            vv[c] = _mm512_maskz_loadu_ps(mk[c], v + 16 * c);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            __m512 pb = _mm512_set1_ps(p[(size_t)i * ldp + j]);
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                a[i][c] = _mm512_fmadd_ps(pb, vv[c], a[i][c]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            _mm512_mask_storeu_ps(acc + (size_t)i * lda + d0 + 16 * c, mk[c], a[i][c]);
}

T512 static void avx512_pv(float *acc, int lda, const float *p, int ldp, int rows, int cnt,
                           const float *vb, int hd)
{
    for (int d0 = 0; d0 < hd; d0 += 64) {
        __mmask16 mk[4];
        for (int c = 0; c < 4; c++)
            mk[c] = d0 + 16 * c < hd ? tail_mask(hd - d0 - 16 * c) : 0;
        int r = 0;
        for (; r + 4 <= rows; r += 4)
            pv_tile(acc + (size_t)r * lda, lda, p + (size_t)r * ldp, ldp, 4, cnt, vb, hd, d0, mk);
        if (rows - r >= 2) {
            pv_tile(acc + (size_t)r * lda, lda, p + (size_t)r * ldp, ldp, 2, cnt, vb, hd, d0, mk);
            r += 2;
        }
        if (r < rows)
            pv_tile(acc + (size_t)r * lda, lda, p + (size_t)r * ldp, ldp, 1, cnt, vb, hd, d0, mk);
    }
}

/* kt [hdp][16] = the transpose of kb [16][hd], zeros for d >= hd: per block of 16
 * dimensions a 16 x 16 transpose in four stages (pairs of rows, pairs of pairs, then
 * 128-bit chunks twice). */
T512 static void avx512_transpose16(float *kt, const float *kb, int hd)
{
    for (int d0 = 0; d0 < hd; d0 += 16) {
        const __mmask16 m = tail_mask(hd - d0);
        __m512 r[16], t[16], u[16];
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++)
            r[k] = _mm512_maskz_loadu_ps(m, kb + (size_t)k * hd + d0);
#pragma GCC unroll 8
        for (int k = 0; k < 16; k += 2) {
            t[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);     /* chunk c: k[4c], k1[4c], k[4c+1], k1[4c+1] */
            t[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]); /* chunk c: elements 4c+2, 4c+3 */
        }
#pragma GCC unroll 4
        for (int k = 0; k < 16; k += 4) {
            /* u[k + i], chunk c: element 4c + i of keys k..k+3 */
            u[k] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[k]), _mm512_castps_pd(t[k + 2])));
            u[k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[k]), _mm512_castps_pd(t[k + 2])));
            u[k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[k + 1]), _mm512_castps_pd(t[k + 3])));
            u[k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[k + 1]), _mm512_castps_pd(t[k + 3])));
        }
        float *o = kt + (size_t)d0 * 16;
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            /* v: elements i, i+8 (keys 0-3, 4-7); w: the same of keys 8-15; then i+4, i+12 */
            __m512 v0 = _mm512_shuffle_f32x4(u[i], u[4 + i], 0x88), v1 = _mm512_shuffle_f32x4(u[i], u[4 + i], 0xdd);
            __m512 w0 = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0x88);
            __m512 w1 = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0xdd);
            _mm512_storeu_ps(o + (size_t)i * 16, _mm512_shuffle_f32x4(v0, w0, 0x88));
            _mm512_storeu_ps(o + (size_t)(i + 8) * 16, _mm512_shuffle_f32x4(v0, w0, 0xdd));
            _mm512_storeu_ps(o + (size_t)(i + 4) * 16, _mm512_shuffle_f32x4(v1, w1, 0x88));
            _mm512_storeu_ps(o + (size_t)(i + 12) * 16, _mm512_shuffle_f32x4(v1, w1, 0xdd));
        }
    }
}

/* acc[r] = lane l of the canonical dot of row r with the 16 keys of kt, as a vector over
 * the keys: fma by increasing block, from +0. */
T512 INLINE void lane_dots(__m512 *acc, const float *q, int hdp, const float *kt, int l, const int R)
{
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        acc[r] = _mm512_setzero_ps();
    for (int d = l; d < hdp; d += 16) {
        const __m512 k = _mm512_loadu_ps(kt + (size_t)d * 16);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[(size_t)r * hdp + d]), k, acc[r]);
    }
}

/* Level 1 of the tree for lanes i and i + 8 of R rows. */
T512 INLINE void lane_pair(__m512 *b, const float *q, int hdp, const float *kt, int i, const int R)
{
    __m512 x[4], y[4];
    lane_dots(x, q, hdp, kt, i, R);
    lane_dots(y, q, hdp, kt, i + 8, R);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        b[r] = _mm512_add_ps(x[r], y[r]);
}

/* R rows (R <= 4) of scores16_t. The lanes are taken in the order that lets each level of
 * the tree fold as soon as its two operands exist (0, 8, 4, 12, 2, 10, ...), so at most
 * five partial vectors per row are live. */
T512 INLINE void scores_t_rows(float *s, size_t lds, const float *q, const float *kt, int hdp, float scale,
                               const int R)
{
    __m512 b0[4], b1[4], c0[4], c1[4], d0[4], d1[4];
    lane_pair(b0, q, hdp, kt, 0, R);
    lane_pair(b1, q, hdp, kt, 4, R);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        c0[r] = _mm512_add_ps(b0[r], b1[r]); /* c[0] = b[0] + b[4] */
    lane_pair(b0, q, hdp, kt, 2, R);
    lane_pair(b1, q, hdp, kt, 6, R);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        d0[r] = _mm512_add_ps(c0[r], _mm512_add_ps(b0[r], b1[r])); /* d[0] = c[0] + c[2] */
    lane_pair(b0, q, hdp, kt, 1, R);
    lane_pair(b1, q, hdp, kt, 5, R);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        c1[r] = _mm512_add_ps(b0[r], b1[r]); /* c[1] = b[1] + b[5] */
    lane_pair(b0, q, hdp, kt, 3, R);
    lane_pair(b1, q, hdp, kt, 7, R);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        d1[r] = _mm512_add_ps(c1[r], _mm512_add_ps(b0[r], b1[r])); /* d[1] = c[1] + c[3] */
        _mm512_storeu_ps(s + (size_t)r * lds, _mm512_mul_ps(_mm512_add_ps(d0[r], d1[r]), _mm512_set1_ps(scale)));
    }
}

T512 static void avx512_scores16_t(float *s, size_t lds, const float *q, int rows, const float *kt, int hdp,
                                   float scale)
{
    int r = 0;
    for (; r + 4 <= rows; r += 4)
        scores_t_rows(s + (size_t)r * lds, lds, q + (size_t)r * hdp, kt, hdp, scale, 4);
    switch (rows - r) {
    case 3:
        scores_t_rows(s + (size_t)r * lds, lds, q + (size_t)r * hdp, kt, hdp, scale, 3);
        break;
    case 2:
        scores_t_rows(s + (size_t)r * lds, lds, q + (size_t)r * hdp, kt, hdp, scale, 2);
        break;
    case 1:
        scores_t_rows(s + (size_t)r * lds, lds, q + (size_t)r * hdp, kt, hdp, scale, 1);
        break;
    default: /* rows is a multiple of 4 */
        break;
    }
}

/* ---- step 1q (q8_0 K): the integer q.k, AVX-512 VNNI ---------------------------------- */

#define TVNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))

/* kt [hd4p][16] int32: the 16 x hd / 4 dwords of the group transposed, by the float
 * transpose (moves only: the bits are carried, never computed on). */
T512 static void avx512_q8_transpose16(int32_t *kt, const int8_t *kq, int hd)
{
    avx512_transpose16((float *)kt, (const float *)(const void *)kq, hd / 4);
}

/* R rows (R <= 4) of step 1q against one transposed group. vpdpbusd multiplies u8 by s8,
 * so the keys' bytes are flipped to k + 128 (xor 0x80) and 128 * qsum_b taken off after:
 * sum (k + 128) q - 128 sum q = sum k q, exactly (|S| <= 32 * 128 * 255 fits int32). Each
 * block's 8 dwords run as two chains (even, odd dwords) added after: integer adds, so the
 * grouping changes nothing. Lane k of every vector is key k throughout; the float chain
 * is the canonical one, block by block. */
TVNNI INLINE void q8_rows(float *s, size_t lds, const int8_t *qq, const float *qd, const int32_t *qsum,
                          const int32_t *kt, const float *kdt, int hd, float scale, const int R)
{
    const int nb = hd / 32;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 acc[4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        acc[r] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m512i e[4], o[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            e[r] = o[r] = _mm512_setzero_si512();
        const int32_t *kb = kt + (size_t)b * 8 * 16;
#pragma GCC unroll 4
        for (int d = 0; d < 8; d += 2) {
            const __m512i k0 = _mm512_xor_si512(_mm512_loadu_si512(kb + d * 16), flip);
            const __m512i k1 = _mm512_xor_si512(_mm512_loadu_si512(kb + (d + 1) * 16), flip);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                int32_t w0, w1;
                memcpy(&w0, qq + (size_t)r * hd + 32 * b + 4 * d, sizeof(w0));
                memcpy(&w1, qq + (size_t)r * hd + 32 * b + 4 * d + 4, sizeof(w1));
                e[r] = _mm512_dpbusd_epi32(e[r], k0, _mm512_set1_epi32(w0));
                o[r] = _mm512_dpbusd_epi32(o[r], k1, _mm512_set1_epi32(w1));
            }
        }
        const __m512 kd = _mm512_loadu_ps(kdt + b * 16);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512i S = _mm512_sub_epi32(_mm512_add_epi32(e[r], o[r]),
                                               _mm512_set1_epi32(qsum[(size_t)r * nb + b] * 128));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(kd, _mm512_set1_ps(qd[(size_t)r * nb + b])),
                                     acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        _mm512_storeu_ps(s + (size_t)r * lds, _mm512_mul_ps(acc[r], _mm512_set1_ps(scale)));
}

TVNNI static void avx512_scores_q8t(float *s, size_t lds, const int8_t *qq, const float *qd, const int32_t *qsum,
                                    int rows, const int32_t *kt, const float *kdt, int hd, float scale)
{
    const int nb = hd / 32;
    int r = 0;
    for (; r + 4 <= rows; r += 4)
        q8_rows(s + (size_t)r * lds, lds, qq + (size_t)r * hd, qd + (size_t)r * nb, qsum + (size_t)r * nb, kt, kdt,
                hd, scale, 4);
    switch (rows - r) {
    case 3:
        q8_rows(s + (size_t)r * lds, lds, qq + (size_t)r * hd, qd + (size_t)r * nb, qsum + (size_t)r * nb, kt, kdt,
                hd, scale, 3);
        break;
    case 2:
        q8_rows(s + (size_t)r * lds, lds, qq + (size_t)r * hd, qd + (size_t)r * nb, qsum + (size_t)r * nb, kt, kdt,
                hd, scale, 2);
        break;
    case 1:
        q8_rows(s + (size_t)r * lds, lds, qq + (size_t)r * hd, qd + (size_t)r * nb, qsum + (size_t)r * nb, kt, kdt,
                hd, scale, 1);
        break;
    default: /* rows is a multiple of 4 */
        break;
    }
}

/* The q8_0 K rows split into int8 q and f32 scales: 32-byte moves and F16C's exact
 * widening (vcvtph2ps; a NaN scale stays a NaN, quieted). */
T512 static void avx512_q8_split(int8_t *kq, float *kd, const void *src, size_t stride, int rows, int hd, int key0)
{
    const int nb = hd / 32;
    for (int r = 0; r < rows; r++) {
        const unsigned char *blk = (const unsigned char *)src + (size_t)r * stride; /* nb blocks of 34 bytes */
        const int key = key0 + r;
        float *d = kd + (size_t)(key / 16) * nb * 16 + key % 16;
        for (int b = 0; b < nb; b++) {
            uint16_t h;
            memcpy(&h, blk + 34 * b, sizeof(h));
            _mm256_storeu_si256((__m256i *)(kq + (size_t)key * hd + 32 * b),
                                _mm256_loadu_si256((const __m256i *)(blk + 34 * b + 2)));
            d[b * 16] = _cvtsh_ss(h);
        }
    }
}

/* ---- the pair order (attention_impl.h, steps 1' and 4'): the emulation of the tiles ---- */

/* MXCSR with DAZ (bit 6) and FTZ (bit 15) for the pair order's arithmetic. The vector work
 * runs in a separate (noinline) function between the two ldmxcsr, so that the compiler
 * cannot move any of it across them. */
enum { CSR_DAZ_FTZ = 0x8040 };
static inline unsigned csr_enter(void)
{
    const unsigned c = _mm_getcsr();
    _mm_setcsr(c | CSR_DAZ_FTZ);
    return c;
}
static inline void csr_leave(unsigned c) { _mm_setcsr(c); }

/* One bf16 value of a packed q slot, as an f32 broadcast. */
T512 INLINE __m512 bcast_bf16(const uint16_t *b) { return _mm512_castsi512_ps(_mm512_set1_epi32((int)((uint32_t)*b << 16))); }

/* R rows (R <= 4) of the pair order's scores against the 16 transposed keys kt [hdp][16]:
 * q rows of packed bf16 (row r at q + r * hdp floats); acc (unscaled) into s rows. */
T512 INLINE void pair_scores_rows(float *s, size_t lds, const float *q, const float *kt, int hdp, const int R)
{
    __m512 acc[4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        acc[r] = _mm512_setzero_ps();
    for (int d = 0; d < hdp; d += 2) {
        const __m512 k0 = _mm512_loadu_ps(kt + (size_t)d * 16), k1 = _mm512_loadu_ps(kt + (size_t)(d + 1) * 16);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint16_t *qr = (const uint16_t *)(q + (size_t)r * hdp) + d;
            __m512 t = _mm512_mul_ps(bcast_bf16(qr), k0);
            t = _mm512_fmadd_ps(bcast_bf16(qr + 1), k1, t);
            acc[r] = _mm512_add_ps(acc[r], t);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        _mm512_storeu_ps(s + (size_t)r * lds, acc[r]);
}

/* Unscaled pair-order scores of `rows` rows (under DAZ/FTZ: the caller's csr_enter). */
T512 __attribute__((noinline)) static void pair_scores_emu(float *s, size_t lds, const float *q, int rows,
                                                           const float *kt, int hdp)
{
    int r = 0;
    for (; r + 4 <= rows; r += 4)
        pair_scores_rows(s + (size_t)r * lds, lds, q + (size_t)r * hdp, kt, hdp, 4);
    for (; r < rows; r++)
        pair_scores_rows(s + (size_t)r * lds, lds, q + (size_t)r * hdp, kt, hdp, 1);
}

/* s rows *= scale (one rounded product each, under DAZ/FTZ). */
T512 __attribute__((noinline)) static void pair_scale(float *s, size_t lds, int rows, float scale)
{
    for (int r = 0; r < rows; r++)
        _mm512_storeu_ps(s + (size_t)r * lds, _mm512_mul_ps(_mm512_loadu_ps(s + (size_t)r * lds), _mm512_set1_ps(scale)));
}

void kern__avx512_pair_scores(float *s, size_t lds, const float *q, int rows, const float *kt, int hdp)
{
    const unsigned c = csr_enter();
    pair_scores_emu(s, lds, q, rows, kt, hdp);
    csr_leave(c);
}

T512 static void pair_scores16_t(float *s, size_t lds, const float *q, int rows, const float *kt, int hdp,
                                 float scale)
{
    int tiled = 0;
    if (kern__attn_amx_on() && rows >= 16) {
        tiled = rows / 16 * 16;
        kern__attn_amx_scores(s, lds, q, tiled, kt, hdp);
    }
    const unsigned c = csr_enter();
    if (rows > tiled)
        pair_scores_emu(s + (size_t)tiled * lds, lds, q + (size_t)tiled * hdp, rows - tiled, kt, hdp);
    pair_scale(s, lds, rows, scale);
    csr_leave(c);
}

/* Decode rows: the key group transposed and q packed here, then the same kernel. */
T512 static void pair_scores16(float *s, const float *q, const float *kb, int hd, float scale)
{
    enum { MAX_HDP = 512 };
    CAIRN_ASSERT(hd <= MAX_HDP);
    const int hdp = (hd + 15) / 16 * 16;
    _Alignas(64) float kt[MAX_HDP * 16];
    _Alignas(64) float qs[MAX_HDP];
    avx512_transpose16(kt, kb, hd);
    attn__pair_pack_q(qs, q, hd, hdp);
    const unsigned c = csr_enter();
    pair_scores_emu(s, 16, qs, 1, kt, hdp);
    pair_scale(s, 16, 1, scale);
    csr_leave(c);
}

/* x rounded to bf16 as attn__bf16_round, 16 lanes. */
T512 INLINE __m512 round_bf16(__m512 x)
{
    const __m512i u = _mm512_castps_si512(x), mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 den = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7f800000));
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                     _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
    r = _mm512_and_si512(r, hi);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_and_si512(_mm512_or_si512(u, _mm512_set1_epi32(0x00400000)), hi));
    r = _mm512_mask_mov_epi32(r, den, _mm512_and_si512(u, _mm512_set1_epi32((int)0x80000000u)));
    return _mm512_castsi512_ps(r);
}

T512 static float pair_softmax(float *s, int n)
{
    const float l = avx512_softmax(s, n);
    for (int k = 0; k < n; k += 16) {
        const __mmask16 m = tail_mask(n - k);
        _mm512_mask_storeu_ps(s + k, m, round_bf16(_mm512_maskz_loadu_ps(m, s + k)));
    }
    return l;
}

/* R rows (R <= 4) x dimensions [d0, d0 + 64) of step 4' (under DAZ/FTZ). */
T512 INLINE void pair_pv_tile(float *acc, int lda, const float *p, int ldp, int R, int cnt, const float *vb, int hd,
                              int d0, const __mmask16 mk[4])
{
    __m512 a[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            a[i][c] = _mm512_maskz_loadu_ps(mk[c], acc + (size_t)i * lda + d0 + 16 * c);
    for (int j = 0; j < cnt; j += 2) {
        const bool two = j + 1 < cnt; /* past the range: p = v = 0 */
        const float *v = vb + (size_t)j * hd + d0;
        __m512 v0[4], v1[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            v0[c] = _mm512_maskz_loadu_ps(mk[c], v + 16 * c);
            v1[c] = two ? _mm512_maskz_loadu_ps(mk[c], v + hd + 16 * c) : _mm512_setzero_ps();
        }
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            const __m512 p0 = _mm512_set1_ps(p[(size_t)i * ldp + j]);
            const __m512 p1 = two ? _mm512_set1_ps(p[(size_t)i * ldp + j + 1]) : _mm512_setzero_ps();
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                a[i][c] = _mm512_add_ps(a[i][c], _mm512_fmadd_ps(p1, v1[c], _mm512_mul_ps(p0, v0[c])));
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            _mm512_mask_storeu_ps(acc + (size_t)i * lda + d0 + 16 * c, mk[c], a[i][c]);
}

T512 __attribute__((noinline)) static void pair_pv_emu(float *acc, int lda, const float *p, int ldp, int rows,
                                                       int cnt, const float *vb, int hd)
{
    for (int d0 = 0; d0 < hd; d0 += 64) {
        __mmask16 mk[4];
        for (int c = 0; c < 4; c++)
            mk[c] = d0 + 16 * c < hd ? tail_mask(hd - d0 - 16 * c) : 0;
        int r = 0;
        for (; r + 4 <= rows; r += 4)
            pair_pv_tile(acc + (size_t)r * lda, lda, p + (size_t)r * ldp, ldp, 4, cnt, vb, hd, d0, mk);
        for (; r < rows; r++)
            pair_pv_tile(acc + (size_t)r * lda, lda, p + (size_t)r * ldp, ldp, 1, cnt, vb, hd, d0, mk);
    }
}

void kern__avx512_pair_pv(float *acc, int lda, const float *p, int ldp, int rows, int cnt, const float *vb, int hd)
{
    const unsigned c = csr_enter();
    pair_pv_emu(acc, lda, p, ldp, rows, cnt, vb, hd);
    csr_leave(c);
}

T512 static void pair_pv(float *acc, int lda, const float *p, int ldp, int rows, int cnt, const float *vb, int hd)
{
    int tiled = 0;
    if (rows >= 16 && kern__attn_amx_pv_fits(hd, cnt) && kern__attn_amx_on()) {
        tiled = rows / 16 * 16;
        kern__attn_amx_pv(acc, lda, p, ldp, tiled, cnt, vb, hd);
    }
    if (rows > tiled)
        kern__avx512_pair_pv(acc + (size_t)tiled * lda, lda, p + (size_t)tiled * ldp, ldp, rows - tiled, cnt, vb, hd);
}

/* attn__pair_pack_q, 16 lanes: q rounded by round_bf16 (the same bits as
 * attn__bf16_round), the upper halves stored as bf16, zero past hd up to hdp. */
T512 void kern__avx512_pair_pack_q(float *slot, const float *q, int hd, int hdp)
{
    uint16_t *b = (uint16_t *)slot; /* hdp bf16 values in the slot's first half */
    for (int d = 0; d < hdp; d += 16) {
        const __mmask16 mq = hd > d ? tail_mask(hd - d) : 0, mb = tail_mask(hdp - d);
        const __m512i r = _mm512_srli_epi32(_mm512_castps_si512(round_bf16(_mm512_maskz_loadu_ps(mq, q + d))), 16);
        _mm256_mask_storeu_epi16(b + d, mb, _mm512_cvtepi32_epi16(r));
    }
}

/* The canonical softmax and the key transpose, for the tile order's rendition
 * (x86/attention_tile.c). */
float kern__avx512_softmax(float *s, int n) { return avx512_softmax(s, n); }
void kern__avx512_transpose16(float *kt, const float *kb, int hd) { avx512_transpose16(kt, kb, hd); }

const attn_impl_t attn__avx512_pair = {"avx512-pair", pair_scores16, pair_softmax, pair_pv, pair_scores16_t,
                                       avx512_transpose16, NULL, NULL, NULL, NULL, kern__avx512_pair_pack_q, NULL,
                                       NULL, NULL, NULL, NULL, NULL, NULL};

/* The "avx512-emubf16" kernels may run where VNNI is absent: step 1q is then the generic's. */
const attn_impl_t attn__avx512 = {"avx512", avx512_scores16, avx512_softmax, avx512_pv, avx512_scores16_t,
                                  avx512_transpose16, kern__x86_has_avx512_vnni, avx512_q8_transpose16,
                                  avx512_scores_q8t, avx512_q8_split, NULL, &attn__avx512_pair,
                                  NULL, NULL, NULL, NULL, NULL, NULL};
