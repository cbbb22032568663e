/*
 * attention_avx2.c — AVX2+FMA rendition of the attention primitives (attention_impl.h).
 *
 * The 16 canonical lanes are two ymm halves (lanes 0-7 and 8-15), so the tree's first
 * level is the sum of the halves. Scores use the AVX2 kernels' canonical dot; softmax and
 * pv are written here so that the exp and the fmas are instructions rather than calls to
 * libm's fmaf. K/V rows are widened by the AVX2 kernels' rows_to_f32.
 *
 * The attention of the "avx2" kernel implementation (kernels_avx2.c), which runs only
 * where AVX2 and FMA are present. Pure functions; thread-safe.
 */
#include "compute/cpu/attention_impl.h"
#include "compute/cpu/x86/x86_impls.h"

#include <immintrin.h>
#include <string.h>

#define T256 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

#include "compute/cpu/x86/kernels_exp_x86.h" /* exp8 / exp16, after T256/T512 */

T256 INLINE __m256i tail_mask8(int valid)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), idx); /* lane i: i < valid */
}

T256 static void avx2_scores16(float *s, const float *q, const float *kb, int hd, float scale)
{
    float (*dot)(const float *, const void *, int) = kern__avx2.types[CAIRN_DTYPE_F32].dot;
    for (int k = 0; k < 16; k++)
        s[k] = dot(q, kb + (size_t)k * hd, hd) * scale;
}

/* 8 scores from s[i], lanes at or past n replaced by `pad`. */
T256 INLINE __m256 load8(const float *s, int i, int n, __m256 pad)
{
    if (n - i >= 8)
        return _mm256_loadu_ps(s + i);
    if (n - i <= 0)
        return pad;
    __m256i m = tail_mask8(n - i);
    return _mm256_blendv_ps(pad, _mm256_maskload_ps(s + i, m), _mm256_castsi256_ps(m));
}

T256 static float avx2_softmax(float *s, int n)
{
    const __m256 ninf = _mm256_set1_ps(-__builtin_inff()), zero = _mm256_setzero_ps();
    __m256 mlo = ninf, mhi = ninf; /* canonical lanes 0-7 and 8-15 */
    for (int k = 0; k < n; k += 16) {
        mlo = _mm256_max_ps(mlo, load8(s, k, n, ninf));
        mhi = _mm256_max_ps(mhi, load8(s, k + 8, n, ninf));
    }
    __m256 m8 = _mm256_max_ps(mlo, mhi);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    __m128 m1 = _mm_max_ss(m2, _mm_movehdup_ps(m2));
    const __m256 m = _mm256_broadcastss_ps(m1);

    __m256 slo = zero, shi = zero;
    for (int k = 0; k < n; k += 16) {
        for (int h = 0; h < 2; h++) {
            int i = k + 8 * h;
            __m256 e = zero; /* the padding adds +0 */
            if (i < n) {
                __m256i mk = tail_mask8(n - i);
                e = _mm256_and_ps(exp8(_mm256_sub_ps(load8(s, i, n, zero), m)), _mm256_castsi256_ps(mk));
                _mm256_maskstore_ps(s + i, mk, e);
            }
            if (h)
                shi = _mm256_add_ps(shi, e);
            else
                slo = _mm256_add_ps(slo, e);
        }
    }
    __m256 s8 = _mm256_add_ps(slo, shi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

T256 static void avx2_pv(float *acc, int lda, const float *p, int ldp, int rows, int cnt,
                         const float *vb, int hd)
{
    for (int r = 0; r < rows; r++) {
        float *a = acc + (size_t)r * lda;
        const float *pr = p + (size_t)r * ldp;
        int d = 0;
        for (; d + 32 <= hd; d += 32) {
            __m256 a0 = _mm256_loadu_ps(a + d), a1 = _mm256_loadu_ps(a + d + 8);
            __m256 a2 = _mm256_loadu_ps(a + d + 16), a3 = _mm256_loadu_ps(a + d + 24);
            for (int j = 0; j < cnt; j++) {
                const float *v = vb + (size_t)j * hd + d;
                __m256 pb = _mm256_set1_ps(pr[j]);
                a0 = _mm256_fmadd_ps(pb, _mm256_loadu_ps(v), a0);
                a1 = _mm256_fmadd_ps(pb, _mm256_loadu_ps(v + 8), a1);
                a2 = _mm256_fmadd_ps(pb, _mm256_loadu_ps(v + 16), a2);
                a3 = _mm256_fmadd_ps(pb, _mm256_loadu_ps(v + 24), a3);
            }
            _mm256_storeu_ps(a + d, a0);
            _mm256_storeu_ps(a + d + 8, a1);
            _mm256_storeu_ps(a + d + 16, a2);
            _mm256_storeu_ps(a + d + 24, a3);
        }
        for (; d < hd; d += 8) {
            __m256i mk = tail_mask8(hd - d);
            __m256 a0 = _mm256_maskload_ps(a + d, mk);
            for (int j = 0; j < cnt; j++)
                a0 = _mm256_fmadd_ps(_mm256_set1_ps(pr[j]), _mm256_maskload_ps(vb + (size_t)j * hd + d, mk), a0);
            _mm256_maskstore_ps(a + d, mk, a0);
        }
    }
}

/* ---- step 1q (q8_0 K): the integer q.k ------------------------------------------------- */

/* The generic transpose (a plain dword copy; the AVX2 scores read its layout). */
static void avx2_q8_transpose16(int32_t *kt, const int8_t *kq, int hd) { attn__generic.q8_transpose16(kt, kq, hd); }

/* Key dword x query dword -> 8 int32 (keys of the half): vpmaddubsw multiplies u8 by s8,
 * so the sign trick gives it |k| (-128 included: 128 as u8) and q with k's sign
 * (q8_0's q is within +-127, so negating it is exact); each pair sum is at most
 * 2 * 128 * 127 < 2^15 (no saturation), and vpmaddwd adds the pairs into int32. */
T256 INLINE __m256i dot4(__m256i k, __m256i q, __m256i ones)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(k), _mm256_sign_epi8(q, k)), ones);
}

/* One row of step 1q against the transposed group, keys 0-7 and 8-15 in two halves: the
 * exact block sums, then the canonical float chain block by block. */
T256 static void avx2_scores_q8t(float *s, size_t lds, const int8_t *qq, const float *qd, const int32_t *qsum,
                                 int rows, const int32_t *kt, const float *kdt, int hd, float scale)
{
    (void)qsum; /* the sign trick needs no offset */
    const int nb = hd / 32;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < rows; r++) {
        const int8_t *q = qq + (size_t)r * hd;
        __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            __m256i slo = _mm256_setzero_si256(), shi = _mm256_setzero_si256();
            for (int d = 8 * b; d < 8 * b + 8; d++) {
                int32_t w;
                memcpy(&w, q + 4 * d, sizeof(w));
                const __m256i qv = _mm256_set1_epi32(w);
                slo = _mm256_add_epi32(slo, dot4(_mm256_loadu_si256((const __m256i *)(kt + d * 16)), qv, ones));
                shi = _mm256_add_epi32(shi, dot4(_mm256_loadu_si256((const __m256i *)(kt + d * 16 + 8)), qv, ones));
            }
            const __m256 f = _mm256_set1_ps(qd[(size_t)r * nb + b]);
            lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(slo), _mm256_mul_ps(_mm256_loadu_ps(kdt + b * 16), f), lo);
            hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(shi), _mm256_mul_ps(_mm256_loadu_ps(kdt + b * 16 + 8), f), hi);
        }
        _mm256_storeu_ps(s + (size_t)r * lds, _mm256_mul_ps(lo, _mm256_set1_ps(scale)));
        _mm256_storeu_ps(s + (size_t)r * lds + 8, _mm256_mul_ps(hi, _mm256_set1_ps(scale)));
    }
}

const attn_impl_t attn__avx2 = {"avx2", avx2_scores16, avx2_softmax, avx2_pv, NULL, NULL, NULL,
                                avx2_q8_transpose16, avx2_scores_q8t, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                NULL, NULL};
