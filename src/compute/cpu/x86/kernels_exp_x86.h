/*
 * kernels_exp_x86.h — the canonical vector exp of kernels_impl.h (kern__exp) in 8 lanes
 * (AVX2+FMA) and 16 lanes (AVX-512), shared by the matmul-side kernels (silu) and the
 * attention softmax so that every file computes exp with the same operations and bits.
 *
 * Include it after <immintrin.h> and after defining T256 / T512 (the target attributes of
 * the including file) and INLINE; the functions are static inline and carry their target,
 * so they compile into whichever file includes them without extra build flags.
 */
#ifndef CAIRN_COMPUTE_CPU_X86_KERNELS_EXP_X86_H
#define CAIRN_COMPUTE_CPU_X86_KERNELS_EXP_X86_H

#include "compute/cpu/kernels_impl.h"

#include <immintrin.h>

#ifdef T256
/* exp of 8 lanes: kern__exp's range reduction, degree-7 polynomial and 2^k split. */
T256 INLINE __m256 exp8(__m256 x)
{
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(KERN_EXP_LO)), _mm256_set1_ps(KERN_EXP_HI));
    __m256 k = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(KERN_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(KERN_LN2_HI), xc);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(KERN_LN2_LO), r);
    __m256 p = _mm256_set1_ps(KERN_EXP_C7);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KERN_EXP_C6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KERN_EXP_C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KERN_EXP_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KERN_EXP_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KERN_EXP_C2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i ki = _mm256_cvtps_epi32(k);
    __m256i k1 = _mm256_srai_epi32(ki, 1), k2 = _mm256_sub_epi32(ki, k1);
    __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    __m256 res = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    res = _mm256_blendv_ps(res, _mm256_set1_ps(__builtin_inff()),
                           _mm256_cmp_ps(x, _mm256_set1_ps(KERN_EXP_HI), _CMP_GT_OQ));
    res = _mm256_blendv_ps(res, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(KERN_EXP_LO), _CMP_LT_OQ));
    return _mm256_blendv_ps(res, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
#endif

#ifdef T512
/* exp of 16 lanes: kern__exp's range reduction, degree-7 polynomial and 2^k split. */
T512 INLINE __m512 exp16(__m512 x)
{
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(KERN_EXP_LO)), _mm512_set1_ps(KERN_EXP_HI));
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(KERN_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(KERN_LN2_HI), xc);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(KERN_LN2_LO), r);
    __m512 p = _mm512_set1_ps(KERN_EXP_C7);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KERN_EXP_C6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KERN_EXP_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KERN_EXP_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KERN_EXP_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KERN_EXP_C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512i ki = _mm512_cvtps_epi32(k);
    __m512i k1 = _mm512_srai_epi32(ki, 1), k2 = _mm512_sub_epi32(ki, k1);
    __m512i bias = _mm512_set1_epi32(127);
    __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k1, bias), 23));
    __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k2, bias), 23));
    __m512 res = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
    res = _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, _mm512_set1_ps(KERN_EXP_HI), _CMP_GT_OQ),
                             _mm512_set1_ps(__builtin_inff()));
    res = _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, _mm512_set1_ps(KERN_EXP_LO), _CMP_LT_OQ),
                             _mm512_setzero_ps());
    return _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}
#endif

#endif
