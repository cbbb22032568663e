/*
 * attention_impl.h — private: the primitives an attention implementation provides, and the
 * canonical order every implementation follows (so they agree bit for bit).
 *
 * CANONICAL ORDER, for one query row (a token at position p, one head). Key j is visible
 * when j <= p, j > p - W (with a window W; every j >= 0 without) and j has storage. Let
 * lo = the first position the window admits (0 without one) and b0 = lo rounded down to a
 * multiple of 16; the keys taken are b0..p.
 *  1. score s_j = dot(q, k_j) * scale, the dot in kern_dot's canonical order (16 fma lanes
 *     over blocks of 16, zero-padded tail, fixed tree; kernels_impl.h), then one rounded
 *     product with scale (default 1 / sqrtf(head_dim)); with a soft-cap c,
 *     s_j = c * tanhf(s_j / c) (libm tanhf, computed by the portable driver). A key that
 *     is not visible gets s_j = -inf.
 *  2. max m: 16 lanes M[l] = -inf; for each block of 16 keys from position b0 (the last
 *     one padded with -inf), M[l] = M[l] > s ? M[l] : s; then the tree of kernels_impl.h
 *     with x > y ? x : y in place of the sum.
 *  3. e_j = kern__exp(s_j - m) (the canonical exp; +0 for a key that is not visible), and
 *     l = the 16-lane sum of e_j over the same blocks (padding adds +0), reduced by the
 *     fixed tree.
 *  4. acc[d] = fma(e_j, v_j[d], acc[d]) from acc = +0, for j = b0..p in increasing order
 *     (a key without storage has v_j = 0); out[d] = acc[d] / l.
 * With q8_0 K (numerics revision 3, "q8 q.k") step 1's dot is an integer one instead:
 *  1q. the query row is rounded to q8_0 once (quant_q8_0_round_act: per block of 32 one
 *     f16 scale qd_b and int8 q), and s_j = D * scale with D = kern__qdot(Q8_0, k_j, q8(q),
 *     head_dim, +0) (quant_kernels.c): for each block b = 0, 1, ... in order, the exact
 *     int32 S_b = sum of q8(q)_i * k_i over the block's 32 elements, then
 *     D = fmaf((float)S_b, kd_b * qd_b, D) (kd_b, qd_b widened from f16, one rounded
 *     product). Every implementation computes the same integers (by any grouping: integer
 *     sums are exact) and the same float chain, so they agree bit for bit; the soft-cap,
 *     mask and steps 2-4 are unchanged (V stays widened to f32). head_dim is a multiple
 *     of 32 (a q8_0 head is whole blocks).
 * Starting at b0 instead of 0 changes no bit: the blocks before b0 hold only -inf scores
 * (max unchanged) and +0 terms. Without a window and without missing storage this is the
 * plain causal order over 0..p. Every step depends only on p, the window, head_dim and
 * the stored K/V bytes, never on which other rows or keys share a tile, so decode,
 * chunked prefill and batches give the same bits.
 */
#ifndef CAIRN_COMPUTE_CPU_ATTENTION_IMPL_H
#define CAIRN_COMPUTE_CPU_ATTENTION_IMPL_H

#include "compute/cpu/attention.h"
#include "compute/cpu/kernels_impl.h"

typedef struct attn_impl {
    const char *name;
    /* (K/V rows are widened by the kernel implementation's types[kv_type].rows_to_f32.) */
    /* s[k] = step 1 for the 16 f32 key rows kb[k][hd] (rows are contiguous, stride hd). */
    void (*scores16)(float *s, const float *q, const float *kb, int hd, float scale);
    /* Steps 2 and 3 over s[0..n): replaces s[j] by e_j for j < n and returns l. s must have
     * room up to n rounded up to 16 (the padding may be read, never written). */
    float (*softmax)(float *s, int n);
    /* Step 4 for `rows` rows sharing one count: acc[r*lda + d] = fma(p[r*ldp + j],
     * vb[j*hd + d], acc[r*lda + d]) for j < cnt in increasing order, d < hd. */
    void (*pv)(float *acc, int lda, const float *p, int ldp, int rows, int cnt,
               const float *vb, int hd);
    /* Optional (NULL: the driver scores every row with scores16). Step 1 for `rows` rows
     * against one group of 16 keys given transposed: kt[d*16 + k] = element d of key k for
     * d < hdp (hd rounded up to 16; zero for d >= hd), q rows zero-padded to hdp, row r at
     * q + r*hdp; s[r*lds + k] = the score of row r and key k. The same bits as scores16:
     * lane l of the canonical dot is a vector over the 16 keys, so the tree's levels are
     * vertical adds and one K load serves every row of the call. */
    void (*scores16_t)(float *s, size_t lds, const float *q, int rows, const float *kt, int hdp, float scale);
    /* With scores16_t: kt [hdp][16] = the transpose of kb [16][hd] (zeros for d >= hd). */
    void (*transpose16)(float *kt, const float *kb, int hd);
    /* Step 1q (q8_0 K), optional (NULL, or q8_usable() false: attn__generic's). The 16 keys
     * of a group come as int8 q, kq [16][hd], and are transposed by q8_transpose16 into
     * kt [hd4p][16] int32 (hd4p = hd / 4 rounded up to 16; kt[d4*16 + k] = bytes
     * 4*d4 .. 4*d4 + 3 of key k, zero for d4 >= hd / 4); their block scales kdt [nb][16]
     * (nb = hd / 32, kdt[b*16 + k] = kd_b of key k). The query rows: qq [rows][hd] int8,
     * qd [rows][nb] f32 scales, qsum [rows][nb] = the sum of qq over each block.
     * scores_q8t writes s[r*lds + k] = step 1q's score of row r and key k. */
    bool (*q8_usable)(void);
    void (*q8_transpose16)(int32_t *kt, const int8_t *kq, int hd);
    void (*scores_q8t)(float *s, size_t lds, const int8_t *qq, const float *qd, const int32_t *qsum, int rows,
                       const int32_t *kt, const float *kdt, int hd, float scale);
    /* Optional (NULL: attn__generic's): the q8_0 K rows src[r * stride] (hd elements of
     * one head, r < rows) split into kq [key0 + r][hd] int8 and their block scales widened
     * from f16 into kd[((key0 + r) / 16) * nb * 16 + b * 16 + (key0 + r) % 16]. Moves and
     * exact conversions only. */
    void (*q8_split)(int8_t *kq, float *kd, const void *src, size_t stride, int rows, int hd, int key0);
} attn_impl_t;

/* Portable rendition (attention.c): the scalar dot, kern__exp and fmaf. Each kernel
 * implementation names its attention rendition (kern_impl_t.attn): x86/attention_avx2.c,
 * x86/attention_avx512.c. */
extern const attn_impl_t attn__generic;

/* attn_forward on an explicit kernel implementation (the CPU backend's) with window,
 * scale and soft-cap (math NULL: all zero). */
void kern__attn_forward(const kern_impl_t *k, cairn_thread_pool_t *tp, const attn_cfg_t *cfg,
                        const attn_math_t *math, int layer, const attn_query_t *queries, int n_queries);

#endif
