/*
 * quant_avx2.c — AVX2 rendition of the quantized matmul rows (kernels_impl.h, canonical
 * quantized order), for x86 CPUs without AVX-512 VNNI.
 *
 * One row against a tile of 8 outputs at a time, weights in their GGUF layout: each
 * output's block products are taken 32 elements per ymm (vpmaddubsw, then vpmaddwd with
 * the sub-block scale or with ones), a horizontal-add tree turns the 8 outputs' lane
 * vectors into one vector of their exact block sums, and the float chain runs in 8 lanes.
 * The integers are those of quant_kernels.c and the float operations the same, so the
 * results equal the portable rows bit for bit. Activation rounding and K/V widening take
 * the portable rows (resolution fills them in).
 *
 * Only runs where kern__x86_has_avx2(). Pure functions; thread-safe.
 */
#include "compute/cpu/x86/x86_impls.h"

#include <immintrin.h>
#include <string.h>

#include "compute/quant_blocks.h"

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

/* Lane o of the result = the sum of the 8 lanes of v[o] (exact: integers). */
T2 INLINE __m256i reduce8x8(const __m256i v[8])
{
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

T2 INLINE __m256 f16x8(const uint16_t h[8]) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)); }

/* Lanes below nv (the tile's valid outputs). */
T2 INLINE __m256i mask8(int nv)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(nv), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

INLINE void tile_rows8(const unsigned char *wr[8], const void *w, size_t ldw, int nv)
{
    for (int o = 0; o < 8; o++)
        wr[o] = (const unsigned char *)w + (size_t)(o < nv ? o : nv - 1) * ldw;
}

T2 INLINE __m256 start8(const float *y, int nv, bool acc)
{
    return acc ? _mm256_maskload_ps(y, mask8(nv)) : _mm256_setzero_ps();
}

T2 INLINE void store8(float *y, int nv, __m256 v) { _mm256_maskstore_ps(y, mask8(nv), v); }

/* sum over one ymm of 32 elements: pairs q*x (u8 * s8, no saturation for q <= 63) times the
 * int16 scales s, in 8 int32 lanes. */
T2 INLINE __m256i dot32(__m256i q, const int8_t *x, __m256i s)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)x)), s);
}

INLINE void k4_scales2(const uint8_t *s, uint8_t sc[8], uint8_t m[8])
{
    for (int j = 0; j < 8; j++) {
        int a, b;
        quant_k4_scale_min(s, j, &a, &b);
        sc[j] = (uint8_t)a;
        m[j] = (uint8_t)b;
    }
}

T2 static void row_k4(float *y, const blk_q8_k_t *x, int nb, const void *w, size_t ldw, int nv, bool acc, bool q5)
{
    const unsigned char *wr[8];
    tile_rows8(wr, w, ldw, nv);
    __m256 accv = start8(y, nv, acc);
    const size_t bsz = q5 ? sizeof(blk_q5_k_t) : sizeof(blk_q4_k_t);
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    for (int b = 0; b < nb; b++) {
        const blk_q8_k_t *xb = x + b;
        __m256i S[8], M[8];
        _Alignas(16) uint16_t dw[8], dm[8];
        for (int o = 0; o < 8; o++) {
            const unsigned char *blk = wr[o] + (size_t)b * bsz;
            memcpy(&dw[o], blk, 2);
            memcpy(&dm[o], blk + 2, 2);
            uint8_t sc[8], mn[8];
            k4_scales2(blk + 4, sc, mn);
            const uint8_t *qs = q5 ? ((const blk_q5_k_t *)blk)->qs : ((const blk_q4_k_t *)blk)->qs;
            const __m256i qh = q5 ? _mm256_loadu_si256((const __m256i *)((const blk_q5_k_t *)blk)->qh)
                                  : _mm256_setzero_si256();
            __m256i s = _mm256_setzero_si256();
            for (int g = 0; g < 4; g++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * g));
                __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                if (q5) {
                    __m256i bl = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g)), one);
                    __m256i bh = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g + 1)), one);
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16(bl, 4));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16(bh, 4));
                }
                s = _mm256_add_epi32(s, dot32(lo, xb->q + 64 * g, _mm256_set1_epi16(sc[2 * g])));
                s = _mm256_add_epi32(s, dot32(hi, xb->q + 64 * g + 32, _mm256_set1_epi16(sc[2 * g + 1])));
            }
            S[o] = s;
            __m128i m16 = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)mn));
            __m256i mdup = _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
            M[o] = _mm256_madd_epi16(mdup, _mm256_loadu_si256((const __m256i *)xb->bsums));
        }
        const __m256 dx = _mm256_set1_ps(xb->d);
        accv = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8x8(S)), _mm256_mul_ps(f16x8(dw), dx), accv);
        accv = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(reduce8x8(M)), _mm256_mul_ps(f16x8(dm), dx), accv);
    }
    store8(y, nv, accv);
}

T2 static void row_k6(float *y, const blk_q8_k_t *x, int nb, const void *w, size_t ldw, int nv, bool acc)
{
    const unsigned char *wr[8];
    tile_rows8(wr, w, ldw, nv);
    __m256 accv = start8(y, nv, acc);
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(0x03);
    for (int b = 0; b < nb; b++) {
        const blk_q8_k_t *xb = x + b;
        __m256i S[8];
        _Alignas(16) uint16_t dw[8];
        for (int o = 0; o < 8; o++) {
            const blk_q6_k_t *blk = (const blk_q6_k_t *)wr[o] + b;
            dw[o] = blk->d;
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)blk->scales));
            __m256i s = _mm256_madd_epi16(_mm256_mullo_epi16(sc16, _mm256_set1_epi16(-32)),
                                          _mm256_loadu_si256((const __m256i *)xb->bsums));
            for (int h = 0; h < 2; h++) {
                const __m256i l0 = _mm256_loadu_si256((const __m256i *)(blk->ql + 64 * h));
                const __m256i l1 = _mm256_loadu_si256((const __m256i *)(blk->ql + 64 * h + 32));
                const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk->qh + 32 * h));
                const __m256i q[4] = {
                    _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4)),
                    _mm256_or_si256(_mm256_and_si256(l1, m4),
                                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4)),
                };
                for (int k = 0; k < 4; k++) {
                    const int e = 128 * h + 32 * k, j = e / 16;
                    __m256i sv = _mm256_set_m128i(_mm_set1_epi16(blk->scales[j + 1]), _mm_set1_epi16(blk->scales[j]));
                    s = _mm256_add_epi32(s, dot32(q[k], xb->q + e, sv));
                }
            }
            S[o] = s;
        }
        accv = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8x8(S)), _mm256_mul_ps(f16x8(dw), _mm256_set1_ps(xb->d)), accv);
    }
    store8(y, nv, accv);
}

T2 static void row_b32(float *y, const blk_q8_0_t *x, const int32_t *xsum, int nb, const void *w, size_t ldw,
                       int nv, bool acc, bool q4)
{
    const unsigned char *wr[8];
    tile_rows8(wr, w, ldw, nv);
    __m256 accv = start8(y, nv, acc);
    const size_t bsz = q4 ? sizeof(blk_q4_0_t) : sizeof(blk_q8_0_t);
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0f);
    for (int b = 0; b < nb; b++) {
        const __m256i xv = _mm256_loadu_si256((const __m256i *)x[b].q);
        __m256i P[8];
        _Alignas(16) uint16_t dw[8];
        for (int o = 0; o < 8; o++) {
            const unsigned char *blk = wr[o] + (size_t)b * bsz;
            memcpy(&dw[o], blk, 2);
            if (q4) {
                __m128i l = _mm_loadu_si128((const __m128i *)((const blk_q4_0_t *)blk)->qs);
                __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(l, 4), l), m4);
                P[o] = _mm256_madd_epi16(_mm256_maddubs_epi16(q, xv), ones); /* sum q x; -8 sum x below */
            } else {
                __m256i wv = _mm256_loadu_si256((const __m256i *)((const blk_q8_0_t *)blk)->q);
                /* |w| * (x with w's sign): pairs of at most 2 * 128 * 127, no saturation */
                __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
                P[o] = _mm256_madd_epi16(p, ones);
            }
        }
        __m256i s = reduce8x8(P);
        if (q4)
            s = _mm256_sub_epi32(s, _mm256_set1_epi32(8 * xsum[b]));
        const __m256 dx = _mm256_set1_ps(_cvtsh_ss(x[b].d));
        accv = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(f16x8(dw), dx), accv);
    }
    store8(y, nv, accv);
}

#define QMM_K(NAME, CALL)                                                                              \
    T2 void NAME(KERN_QMM_ARGS)                                                                        \
    {                                                                                                  \
        (void)xsum;                                                                                    \
        for (int r = 0; r < rows; r++)                                                                 \
            for (int o = o0; o < o1; o += 8) {                                                         \
                float *yy = y + (size_t)r * ldy + o;                                                   \
                const blk_q8_k_t *xx = (const blk_q8_k_t *)((const unsigned char *)xq + (size_t)r * ldq); \
                const unsigned char *ww = (const unsigned char *)w + (size_t)o * ldw;                  \
                const int nv = o1 - o < 8 ? o1 - o : 8;                                                \
                CALL;                                                                                  \
            }                                                                                          \
    }
QMM_K(kern__avx2_qmm_q4_k, row_k4(yy, xx, n / QK_K, ww, ldw, nv, acc, false))
QMM_K(kern__avx2_qmm_q5_k, row_k4(yy, xx, n / QK_K, ww, ldw, nv, acc, true))
QMM_K(kern__avx2_qmm_q6_k, row_k6(yy, xx, n / QK_K, ww, ldw, nv, acc))

#define QMM_B32(NAME, Q4)                                                                              \
    T2 void NAME(KERN_QMM_ARGS)                                                                        \
    {                                                                                                  \
        const int nb = n / QK8_0;                                                                      \
        for (int r = 0; r < rows; r++)                                                                 \
            for (int o = o0; o < o1; o += 8)                                                           \
                row_b32(y + (size_t)r * ldy + o,                                                       \
                        (const blk_q8_0_t *)((const unsigned char *)xq + (size_t)r * ldq),             \
                        xsum + (size_t)r * (size_t)nb, nb, (const unsigned char *)w + (size_t)o * ldw, \
                        ldw, o1 - o < 8 ? o1 - o : 8, acc, Q4);                                        \
    }
QMM_B32(kern__avx2_qmm_q8_0, false)
QMM_B32(kern__avx2_qmm_q4_0, true)
