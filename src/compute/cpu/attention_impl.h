/*
 * attention_impl.h — private: the primitives an attention implementation provides, and the
 * canonical order every implementation follows (so they agree bit for bit).
 *
 * CANONICAL ORDER, for one query row (a token at position p, one head) over keys 0..p:
 *  1. score s_j = dot(q, k_j) * scale, the dot in kern_dot's canonical order (16 fma lanes
 *     over blocks of 16, zero-padded tail, fixed tree; kernels_impl.h), then one rounded
 *     product with scale = 1 / sqrtf(head_dim).
 *  2. max m: 16 lanes M[l] = -inf; for each block of 16 keys from position 0 (the last
 *     one padded with -inf), M[l] = M[l] > s ? M[l] : s; then the tree of kernels_impl.h
 *     with x > y ? x : y in place of the sum.
 *  3. e_j = kern__exp(s_j - m) (the canonical exp), and l = the 16-lane sum of e_j over the
 *     same blocks (padding adds +0), reduced by the fixed tree.
 *  4. acc[d] = fma(e_j, v_j[d], acc[d]) from acc = +0, for j = 0..p in increasing order;
 *     out[d] = acc[d] / l.
 * Every step depends only on p, head_dim and the stored K/V bytes, never on which other
 * rows or keys share a tile, so decode, chunked prefill and batches give the same bits.
 */
#ifndef CAIRN_COMPUTE_CPU_ATTENTION_IMPL_H
#define CAIRN_COMPUTE_CPU_ATTENTION_IMPL_H

#include "compute/cpu/attention.h"
#include "compute/cpu/kernels_impl.h"

typedef struct attn_impl {
    const char *name;
    /* dst[r*n + i] = (float)src[r*stride bytes][i], i < n, r < rows: `rows` K/V rows of
     * type t, `stride` bytes apart, widened exactly. */
    void (*to_f32)(float *dst, const void *src, size_t stride, int rows, cairn_dtype_t t, int n);
    /* s[k] = step 1 for the 16 f32 key rows kb[k][hd] (rows are contiguous, stride hd). */
    void (*scores16)(float *s, const float *q, const float *kb, int hd, float scale);
    /* Steps 2 and 3 over s[0..n): replaces s[j] by e_j for j < n and returns l. s must have
     * room up to n rounded up to 16 (the padding may be read, never written). */
    float (*softmax)(float *s, int n);
    /* Step 4 for `rows` rows sharing one count: acc[r*lda + d] = fma(p[r*ldp + j],
     * vb[j*hd + d], acc[r*lda + d]) for j < cnt in increasing order, d < hd. */
    void (*pv)(float *acc, int lda, const float *p, int ldp, int rows, int cnt,
               const float *vb, int hd);
} attn_impl_t;

/* Portable rendition (attention.c): kern_dot, kern__exp and fmaf; for "scalar". */
extern const attn_impl_t attn__generic;
/* AVX2+FMA rendition (attention_avx2.c); only when the kernels run "avx2". */
extern const attn_impl_t attn__avx2;
/* AVX-512F rendition (attention_avx512.c); only when the kernels run "avx512*". */
extern const attn_impl_t attn__avx512;

#endif
