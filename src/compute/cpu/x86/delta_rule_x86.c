/*
 * delta_rule_x86.c — AVX-512 and AVX2 renditions of the gated delta step.
 *
 * Lanes run over the value index and every reduction over the row index, one fused
 * multiply-add per step, so each element sees exactly the scalar
 * sequence of operations of delta_rule.c: the results are bit-identical for any vector
 * width. The delta step keeps a tile of up to 8 vectors of a state row's columns in
 * registers while it walks the dk rows; the tail of a row is masked (AVX-512) or run
 * through the scalar formula (AVX2), which is the same arithmetic.
 *
 * Only called after kern_init found the instruction set. Pure functions; thread-safe.
 */
#include "compute/cpu/delta_rule_impl.h"

#include <immintrin.h>
#include <math.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define T256 __attribute__((target("avx2,fma")))

enum { TILE = 8 }; /* vectors of one row held in registers */

/* ---- AVX-512 ---- */

T512 static inline __mmask16 tail_mask(int n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u); }

T512 void dr__delta_avx512(float *S, const float *q, const float *k, const float *v, float decay,
                           float beta, int dk, int dv, float *o)
{
    const __m512 dec = _mm512_set1_ps(decay), bet = _mm512_set1_ps(beta);
    for (int j0 = 0; j0 < dv; j0 += 16 * TILE) {
        int nb = (dv - j0 + 15) / 16;
        if (nb > TILE)
            nb = TILE;
        __mmask16 m[TILE];
        __m512 acc[TILE], d[TILE];
        for (int b = 0; b < TILE; b++) {
            m[b] = b < nb ? tail_mask(dv - j0 - 16 * b) : 0;
            acc[b] = _mm512_setzero_ps();
        }
        /* S = decay * S; kv = S^T k. */
        for (int i = 0; i < dk; i++) {
            float *row = S + (size_t)i * dv + j0;
            __m512 ki = _mm512_set1_ps(k[i]);
            for (int b = 0; b < nb; b++) {
                __m512 s = _mm512_mul_ps(_mm512_maskz_loadu_ps(m[b], row + 16 * b), dec);
                _mm512_mask_storeu_ps(row + 16 * b, m[b], s);
                acc[b] = _mm512_fmadd_ps(s, ki, acc[b]);
            }
        }
        /* d = (v - kv) * beta; S += k d^T; o = S^T q. */
        for (int b = 0; b < nb; b++) {
            d[b] = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m[b], v + j0 + 16 * b), acc[b]), bet);
            acc[b] = _mm512_setzero_ps();
        }
        for (int i = 0; i < dk; i++) {
            float *row = S + (size_t)i * dv + j0;
            __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
            for (int b = 0; b < nb; b++) {
                __m512 s = _mm512_fmadd_ps(ki, d[b], _mm512_maskz_loadu_ps(m[b], row + 16 * b));
                _mm512_mask_storeu_ps(row + 16 * b, m[b], s);
                acc[b] = _mm512_fmadd_ps(s, qi, acc[b]);
            }
        }
        for (int b = 0; b < nb; b++)
            _mm512_mask_storeu_ps(o + j0 + 16 * b, m[b], acc[b]);
    }
}

/* ---- AVX2 ---- */

T256 void dr__delta_avx2(float *S, const float *q, const float *k, const float *v, float decay,
                         float beta, int dk, int dv, float *o)
{
    const __m256 dec = _mm256_set1_ps(decay), bet = _mm256_set1_ps(beta);
    const int dv8 = dv - dv % 8;
    for (int j0 = 0; j0 < dv8; j0 += 8 * TILE) {
        int nb = (dv8 - j0) / 8;
        if (nb > TILE)
            nb = TILE;
        __m256 acc[TILE], d[TILE];
        for (int b = 0; b < TILE; b++)
            acc[b] = _mm256_setzero_ps();
        for (int i = 0; i < dk; i++) {
            float *row = S + (size_t)i * dv + j0;
            __m256 ki = _mm256_set1_ps(k[i]);
            for (int b = 0; b < nb; b++) {
                __m256 s = _mm256_mul_ps(_mm256_loadu_ps(row + 8 * b), dec);
                _mm256_storeu_ps(row + 8 * b, s);
                acc[b] = _mm256_fmadd_ps(s, ki, acc[b]);
            }
        }
        for (int b = 0; b < nb; b++) {
            d[b] = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(v + j0 + 8 * b), acc[b]), bet);
            acc[b] = _mm256_setzero_ps();
        }
        for (int i = 0; i < dk; i++) {
            float *row = S + (size_t)i * dv + j0;
            __m256 ki = _mm256_set1_ps(k[i]), qi = _mm256_set1_ps(q[i]);
            for (int b = 0; b < nb; b++) {
                __m256 s = _mm256_fmadd_ps(ki, d[b], _mm256_loadu_ps(row + 8 * b));
                _mm256_storeu_ps(row + 8 * b, s);
                acc[b] = _mm256_fmadd_ps(s, qi, acc[b]);
            }
        }
        for (int b = 0; b < nb; b++)
            _mm256_storeu_ps(o + j0 + 8 * b, acc[b]);
    }
    /* The columns past the last full vector: the scalar formula, column by column. */
    for (int j = dv8; j < dv; j++) {
        float kv = 0.0f;
        for (int i = 0; i < dk; i++) {
            float *s = S + (size_t)i * dv + j;
            *s = *s * decay;
            kv = fmaf(*s, k[i], kv);
        }
        float dj = (v[j] - kv) * beta, oj = 0.0f;
        for (int i = 0; i < dk; i++) {
            float *s = S + (size_t)i * dv + j;
            *s = fmaf(k[i], dj, *s);
            oj = fmaf(*s, q[i], oj);
        }
        o[j] = oj;
    }
}
