/*
 * quant_kernels.c — the portable ("scalar") rows of the quantized types: the canonical
 * quantized products of kernels_impl.h spelled out one block at a time, and the K/V rows
 * of the 8-bit K/V types.
 *
 * Model. A product of a weight row with an activation row is a sequence of exact integer
 * block sums (int32; the bounds below keep every one in range) folded into one float
 * accumulator in block order. The SIMD kernels (x86/quant_*.c) compute the same integers
 * by other groupings and fold them in the same order, so they agree bit for bit with this
 * file; tests/compute/test_quant_kernels.c holds them to it.
 *
 * Bounds (why int32 is exact): |S| of a q6_k block <= 256 * 128 * 32 * 127 < 2^31, of q5_k
 * <= 256 * 63 * 31 * 127, |M| <= 8 * 63 * 32 * 127; q8_0 <= 32 * 128 * 127.
 *
 * Thread-safety: pure functions.
 */
#include <math.h>
#include <string.h>

#include "compute/cpu/kernels_impl.h"
#include "compute/quant_blocks.h"

static inline float h2f(uint16_t h) { return compute_f16_to_f32(h); }

/* ---- the canonical products ------------------------------------------------------------- */

static float dot_q8_0(const blk_q8_0_t *w, const blk_q8_0_t *x, int nb, float acc)
{
    for (int b = 0; b < nb; b++) {
        int32_t s = 0;
        for (int i = 0; i < QK8_0; i++)
            s += (int32_t)w[b].q[i] * x[b].q[i];
        acc = fmaf((float)s, h2f(w[b].d) * h2f(x[b].d), acc);
    }
    return acc;
}

static float dot_q4_0(const blk_q4_0_t *w, const blk_q8_0_t *x, int nb, float acc)
{
    for (int b = 0; b < nb; b++) {
        int32_t s = 0;
        for (int i = 0; i < 16; i++) {
            s += ((w[b].qs[i] & 15) - 8) * x[b].q[i];
            s += ((w[b].qs[i] >> 4) - 8) * x[b].q[i + 16];
        }
        acc = fmaf((float)s, h2f(w[b].d) * h2f(x[b].d), acc);
    }
    return acc;
}

/* The sum of x's q over sub-block j of 32 (from the block's sums of 16). */
static inline int32_t q8k_sum32(const blk_q8_k_t *x, int j) { return x->bsums[2 * j] + x->bsums[2 * j + 1]; }

static float dot_q4_k(const blk_q4_k_t *w, const blk_q8_k_t *x, int nb, float acc)
{
    for (int b = 0; b < nb; b++) {
        int32_t s = 0, m = 0;
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            quant_k4_scale_min(w[b].scales, j, &sc, &mn);
            int32_t isum = 0;
            for (int e = 32 * j; e < 32 * j + 32; e++)
                isum += quant_q4_k_q(&w[b], e) * x[b].q[e];
            s += sc * isum;
            m += mn * q8k_sum32(&x[b], j);
        }
        acc = fmaf((float)s, h2f(w[b].d) * x[b].d, acc);
        acc = fmaf(-(float)m, h2f(w[b].dmin) * x[b].d, acc);
    }
    return acc;
}

static float dot_q5_k(const blk_q5_k_t *w, const blk_q8_k_t *x, int nb, float acc)
{
    for (int b = 0; b < nb; b++) {
        int32_t s = 0, m = 0;
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            quant_k4_scale_min(w[b].scales, j, &sc, &mn);
            int32_t isum = 0;
            for (int e = 32 * j; e < 32 * j + 32; e++)
                isum += quant_q5_k_q(&w[b], e) * x[b].q[e];
            s += sc * isum;
            m += mn * q8k_sum32(&x[b], j);
        }
        acc = fmaf((float)s, h2f(w[b].d) * x[b].d, acc);
        acc = fmaf(-(float)m, h2f(w[b].dmin) * x[b].d, acc);
    }
    return acc;
}

static float dot_q6_k(const blk_q6_k_t *w, const blk_q8_k_t *x, int nb, float acc)
{
    for (int b = 0; b < nb; b++) {
        int32_t s = 0;
        for (int j = 0; j < 16; j++) {
            int32_t isum = 0;
            for (int e = 16 * j; e < 16 * j + 16; e++)
                isum += (quant_q6_k_q(&w[b], e) - 32) * x[b].q[e];
            s += w[b].scales[j] * isum;
        }
        acc = fmaf((float)s, h2f(w[b].d) * x[b].d, acc);
    }
    return acc;
}

float kern__qdot(cairn_dtype_t wt, const void *w, const void *xq, int n, float acc)
{
    switch (wt) {
    case CAIRN_DTYPE_Q8_0: return dot_q8_0(w, xq, n / QK8_0, acc);
    case CAIRN_DTYPE_Q4_0: return dot_q4_0(w, xq, n / QK4_0, acc);
    case CAIRN_DTYPE_Q4_K: return dot_q4_k(w, xq, n / QK_K, acc);
    case CAIRN_DTYPE_Q5_K: return dot_q5_k(w, xq, n / QK_K, acc);
    case CAIRN_DTYPE_Q6_K: return dot_q6_k(w, xq, n / QK_K, acc);
    case CAIRN_DTYPE_F32:
    case CAIRN_DTYPE_F16:
    case CAIRN_DTYPE_BF16:
    case CAIRN_DTYPE_Q8_K:
    case CAIRN_DTYPE_FP8_E4M3: break;
    }
    CAIRN_ASSERT(!"kern__qdot: not a quantized weight type");
    return 0.0f;
}

void kern__q8_0_sums(int32_t *sums, const void *q8_0, int nb)
{
    const blk_q8_0_t *b = q8_0;
    for (int i = 0; i < nb; i++) {
        int32_t s = 0;
        for (int j = 0; j < QK8_0; j++)
            s += b[i].q[j];
        sums[i] = s;
    }
}

/* ---- the rows ---------------------------------------------------------------------------- */

#define SCALAR_QMATMUL(SUF, DOT, BLK)                                                                  \
    static void qmm_##SUF(float *y, int ldy, const void *xq, size_t ldq, const int32_t *xsum, int rows,  \
                          int n, const void *w, size_t ldw, int o0, int o1, bool acc)                  \
    {                                                                                                  \
        (void)xsum; /* the integers are computed from the blocks themselves */                       \
        for (int r = 0; r < rows; r++) {                                                               \
            const void *xr = (const unsigned char *)xq + (size_t)r * ldq;                              \
            for (int o = o0; o < o1; o++) {                                                            \
                float *yo = y + (size_t)r * ldy + o;                                                   \
                *yo = DOT((const void *)((const unsigned char *)w + (size_t)o * ldw), xr, n / (BLK),    \
                          acc ? *yo : 0.0f);                                                           \
            }                                                                                          \
        }                                                                                              \
    }
SCALAR_QMATMUL(q8_0, dot_q8_0, QK8_0)
SCALAR_QMATMUL(q4_0, dot_q4_0, QK4_0)
SCALAR_QMATMUL(q4_k, dot_q4_k, QK_K)
SCALAR_QMATMUL(q5_k, dot_q5_k, QK_K)
SCALAR_QMATMUL(q6_k, dot_q6_k, QK_K)

/* Rows of K/V widened (attention's tiles): the traits' dequantizer, row by row. */
static void rows_q8_0(float *dst, const void *src, size_t stride, int rows, int n)
{
    for (int r = 0; r < rows; r++)
        quant_q8_0_to_f32(dst + (size_t)r * n, (const unsigned char *)src + (size_t)r * stride, n);
}

static void rows_fp8(float *dst, const void *src, size_t stride, int rows, int n)
{
    for (int r = 0; r < rows; r++)
        quant_fp8_to_f32(dst + (size_t)r * n, (const unsigned char *)src + (size_t)r * stride, n);
}

#define FROM_F32(SUF)                                                                                  \
    static void from_##SUF(void *dst, const float *src, int n) { quant_##SUF##_from_f32(dst, src, n); }
static void from_q8_0(void *dst, const float *src, int n) { quant_q8_0_round_act(dst, src, n); }
FROM_F32(q4_0)
FROM_F32(q4_k)
FROM_F32(q5_k)
FROM_F32(q6_k)
FROM_F32(q8_k)
FROM_F32(fp8)

const kern_type_ops_t kern__scalar_q8_0 = {.rows_to_f32 = rows_q8_0, .from_f32 = from_q8_0,
                                           .act = CAIRN_DTYPE_Q8_0, .qmatmul_range = qmm_q8_0};
const kern_type_ops_t kern__scalar_q4_0 = {.from_f32 = from_q4_0, .act = CAIRN_DTYPE_Q8_0,
                                           .qmatmul_range = qmm_q4_0};
const kern_type_ops_t kern__scalar_q4_k = {.from_f32 = from_q4_k, .act = CAIRN_DTYPE_Q8_K,
                                           .qmatmul_range = qmm_q4_k};
const kern_type_ops_t kern__scalar_q5_k = {.from_f32 = from_q5_k, .act = CAIRN_DTYPE_Q8_K,
                                           .qmatmul_range = qmm_q5_k};
const kern_type_ops_t kern__scalar_q6_k = {.from_f32 = from_q6_k, .act = CAIRN_DTYPE_Q8_K,
                                           .qmatmul_range = qmm_q6_k};
const kern_type_ops_t kern__scalar_q8_k = {.from_f32 = from_q8_k};
const kern_type_ops_t kern__scalar_fp8 = {.rows_to_f32 = rows_fp8, .from_f32 = from_fp8};
