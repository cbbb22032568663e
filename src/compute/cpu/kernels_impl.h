/*
 * kernels_impl.h — private to the CPU backend: the table each kernel implementation fills
 * in, the registry of implementations, and the canonical reduction order every
 * implementation follows (see kernels.c for the model).
 *
 * CANONICAL ORDER (shared by scalar, AVX2 and AVX-512, which therefore agree bit for bit;
 * its numerics id is "f32" / "bf16", backend.h):
 *  - F32 math, length n: 16 lane accumulators a[j] = +0. For each block of 16 elements
 *    (the last one zero-padded): a[j] = fma(x[16k+j], w[16k+j], a[j]). Then the fixed tree
 *    b[j] = a[j] + a[j+8] (j<8), c[j] = b[j] + b[j+4] (j<4), d[j] = c[j] + c[j+2] (j<2),
 *    result = d[0] + d[1].
 *  - BF16 math (bf16 weights): x rounded to bf16 as vcvtne2ps2bf16 does (input denormals
 *    to signed zero, round to nearest even, NaN quieted). For each block of 32 elements
 *    (the last zero-padded), lane j takes the pair (2j, 2j+1) exactly as vdpbf16ps:
 *    a[j] = ftz(fma(x[2j+1], w[2j+1], daz(a[j]))); a[j] = ftz(fma(x[2j], w[2j], a[j])),
 *    with bf16 inputs denormals-as-zero. Then the same tree.
 *  - RMSNorm's sum of squares: each x[i] * x[i] rounded to float, summed in double in 8
 *    lanes over blocks of 8 (the last zero-padded), tree (j, j+4), (j, j+2), (0, 1); the
 *    mean is (float)(sum / n) (llama.cpp's rounding of it, which matters once activations
 *    are quantized downstream: it halved the logit gap to llama.cpp on the k-quant fixtures).
 *  - Quantized weights (q8_0, q4_0, q4_k, q5_k, q6_k; any math mode): x is first rounded
 *    row by row to the weight type's activation type `act` (q8_0 for q8_0 / q4_0 weights,
 *    q8_k for the k-quants) by the activation rule (quant_blocks.h: llama.cpp's activation
 *    rounding, ties to even; the scalar rows' from_f32). Then, for each block b of the weight
 *    type in increasing order, the block's exact integer sums (int32; no rounding, so any
 *    grouping of the integer additions gives them) enter one float accumulator, acc = +0:
 *      q8_0, q4_0:  S = sum_i w_i x_i (w_i = q_i, or q_i - 8);
 *                   acc = fma((float)S, dw * dx, acc)                      (dw, dx from f16)
 *      q4_k, q5_k:  S = sum_j sc_j sum_(i in j) q_i x_i,  M = sum_j m_j sum_(i in j) x_i;
 *                   acc = fma((float)S, d * dx, acc); acc = fma(-(float)M, dmin * dx, acc)
 *      q6_k:        S = sum_j sc_j sum_(i in j) (q_i - 32) x_i;  acc = fma((float)S, d * dx, acc)
 *    (j: the sub-blocks of 32, or 16 for q6_k; dx the activation block's scale; every
 *    product of two scales is one rounded f32 multiply). The result is acc. A kernel may
 *    compute S and M in any way that gives the exact integers (SIMD lanes, VNNI, AMX tiles)
 *    and may split the input into pieces of whole blocks, carrying acc between them.
 *
 * IMPLEMENTATIONS. An implementation is a kern_impl_t: per element type a row of kernels
 * (types[], the CPU half of the traits table, type_traits.h), the elementwise kernels and
 * its attention primitives. A NULL entry means "the scalar implementation's": the registry
 * resolves every implementation once (kern__resolve) into a complete table, so no kernel
 * call tests a type or compares a name. The scalar implementation is complete for every
 * type the CPU backend supports; a type whose scalar row is empty is unsupported.
 */
#ifndef CAIRN_COMPUTE_CPU_KERNELS_IMPL_H
#define CAIRN_COMPUTE_CPU_KERNELS_IMPL_H

#include "compute/cpu/kernels.h"
#include "compute/type_traits.h"

struct attn_impl;

/* The kernels of one weight / K/V element type. */
typedef struct kern_type_ops {
    /* y[r*out + o] for r < rows and o in [o0, o1): x [rows][in] f32 times the weight rows
     * w [out][in] of this type (see kern_matmul). */
    void (*matmul_range)(float *y, const float *x, int rows, int in, const void *w, int out, int o0, int o1,
                         cairn_math_t math);
    /* F32-math dot product of a [n] with a row of this type (kern_dot). */
    float (*dot)(const float *a, const void *b, int n);
    /* acc[i] += s * row[i], a rounded product then a rounded sum (kern_axpy). */
    void (*axpy)(float *acc, float s, const void *row, int n);
    /* dst[r*n + i] = row r (src + r*stride bytes) element i, widened exactly; r < rows
     * (attention's K/V tiles). Only for the types K/V can be stored in. */
    void (*rows_to_f32)(float *dst, const void *src, size_t stride, int rows, int n);
    /* dst = src [n] rounded to this type for K/V stores and activation quantization, bit for
     * bit the scalar row's: the traits row's from_f32, except q8_0's activation rule
     * (quant_q8_0_round_act; its from_f32 is the weight rule). */
    void (*from_f32)(void *dst, const float *src, int n);
    /* Quantized weight types only (NULL for the plain float types). `act` is the type x is
     * rounded to (the canonical order above; resolution takes the scalar row's, so every
     * implementation agrees). qmatmul_range: for r < rows and o in [o0, o1),
     *   y[r*ldy + o] = the canonical product over one piece of n input elements (whole
     *   blocks of both types), continuing from acc = y[r*ldy + o] when `acc`, else from +0;
     * xq: row r at xq + r*ldq bytes (the piece's blocks of act); xsum[r * (n / 32) + b] =
     * the sum of the q of act block b of row r when act is q8_0 (whose blocks carry no
     * sums; NULL for q8_k, whose blocks do); w: weight row o's piece at w + o*ldw bytes. */
    cairn_dtype_t act;
    void (*qmatmul_range)(float *y, int ldy, const void *xq, size_t ldq, const int32_t *xsum, int rows, int n,
                          const void *w, size_t ldw, int o0, int o1, bool acc);
    /* Optional (NULL: none; only the AMX rows have them): a side table of a call's rows that
     * the tasks of its products of this weight type share, built by the driver once per call
     * (piece) instead of by each task. qmm_table_bytes(rows, n): its size for rows x a piece
     * of n elements, 0 when this call takes none (qmatmul_range runs then). The driver hands
     * a 64-byte aligned block of that size to qmm_table_fill for row tiles [t0, t1) of 16
     * rows (clipped to the table's rows; disjoint ranges may be filled concurrently; xq, ldq,
     * xsum as for qmatmul_range), and once all are filled qmatmul_range_table reads it: the
     * arguments of qmatmul_range plus the table, the same bits. */
    size_t (*qmm_table_bytes)(int rows, int n);
    void (*qmm_table_fill)(void *table, const void *xq, size_t ldq, const int32_t *xsum, int rows, int n, int t0,
                           int t1);
    void (*qmatmul_range_table)(float *y, int ldy, const void *xq, size_t ldq, const int32_t *xsum, int rows,
                                int n, const void *w, size_t ldw, int o0, int o1, bool acc, const void *table);
} kern_type_ops_t;

typedef struct kern_impl {
    const char *name;
    /* True when this CPU can run it; NULL: always. */
    bool (*available)(void);
    /* The implementation to run instead when this one is asked for (CAIRN_KERNELS) on a
     * CPU that cannot run it, computing the same bits; NULL: none. */
    const char *stand_in;
    kern_type_ops_t types[COMPUTE_DTYPE_COUNT];
    /* sum of x[i]^2 in the canonical RMSNorm order (below) */
    double (*sumsq)(const float *x, int n);
    /* RMSNorm's normalize step: out[i] = w[i] * (x[i] * s), two rounded f32 products, w of
     * type wt (F32, F16 or BF16, widened exactly); out may be x. */
    void (*norm_apply)(float *out, const float *x, float s, const void *w, cairn_dtype_t wt, int n);
    /* out[i] = act(gate[i]) * up[i] (kernels.h, kern_glu) */
    void (*glu[COMPUTE_GLU_COUNT])(float *out, const float *gate, const float *up, size_t n);
    /* BF16-math matmuls run at full speed (not the scalar emulation). */
    bool bf16_math_fast;
    const struct attn_impl *attn;
    /* Kernels behind the backend's optional ops (backend.h: short_conv, delta_rule), for
     * the hybrid families' issues to fill; NULL where an implementation has none:
     *   conv_step: out [C] = one token of a causal depthwise convolution over the rows
     *     state [K-1][C] (oldest first) and x [C] with taps w [K][C] (no state shift);
     *   delta_step: one token of the gated delta rule for one value head, S [dk][dv] in
     *     place, o [dv] out (see compute_delta_rule). */
    void (*conv_step)(float *out, const float *state, const float *x, const float *w, int C, int K);
    void (*delta_step)(float *S, const float *q, const float *k, const float *v, float decay, float beta,
                       int dk, int dv, float *o);
} kern_impl_t;

/* The portable implementation (kernels.c); always available and complete. */
extern const kern_impl_t kern__scalar;

/* The portable rows of the quantized weight types and the 8-bit K/V types
 * (quant_kernels.c): the canonical order above, spelled out. */
extern const kern_type_ops_t kern__scalar_q8_0, kern__scalar_q4_0, kern__scalar_q4_k, kern__scalar_q5_k,
    kern__scalar_q6_k, kern__scalar_q8_k, kern__scalar_fp8;
/* The canonical product of one weight row of type wt with one activation row (n
 * elements, acc the starting value): the scalar definition the SIMD kernels equal. */
float kern__qdot(cairn_dtype_t wt, const void *w, const void *xq, int n, float acc);
/* sums[b] = the sum of the 32 q of q8_0 block b < nb (the xsum of qmatmul_range). */
void kern__q8_0_sums(int32_t *sums, const void *q8_0, int nb);

/* The resolved (complete) table of the implementation named `name`, or NULL when no
 * implementation has that name in this build. Resolution happens once per process. */
const kern_impl_t *kern__impl_by_name(const char *name);
/* CAIRN_OK when this build has `name` and the CPU runs it, CAIRN_EUNSUPPORTED when another
 * build or CPU would, CAIRN_EINVAL for a name no build has (kern_set_impl's rules). */
int kern__impl_status(const char *name);
/* The resolved table the process runs (kern_init's choice or kern_set_impl's). */
const kern_impl_t *kern__current(void);

/* The kern_* operations on an explicit implementation (the CPU backend's objects each hold
 * one; the kern_* functions pass kern__current()). Same contracts as kernels.h. */
typedef struct {
    float *y;
    const void *w;
    cairn_dtype_t wt;
    int out;
} kern_mm_t;
void kern__matmul_n(const kern_impl_t *k, cairn_thread_pool_t *tp, const float *x, int rows, int in,
                    const kern_mm_t *outs, int n, cairn_math_t math);
void kern__rmsnorm(const kern_impl_t *k, float *out, const float *x, const void *w, cairn_dtype_t wt, int n,
                   float eps, bool unit_offset);

/* The canonical exp used by silu and softmax (all implementations): exp(x) = p(r) * 2^k1 *
 * 2^k2 with k = rint(x*log2e), r = x - k*ln2 (Cody-Waite, two fmas), p the degree-7 Taylor
 * polynomial (Horner, fmas), k1 = floor(k/2), k2 = k - k1. x is clamped to
 * [KERN_EXP_LO, KERN_EXP_HI]; above HI gives +inf, below LO gives +0, NaN gives NaN. */
#define KERN_EXP_LO (-87.33654f)
#define KERN_EXP_HI 88.72283f
#define KERN_LOG2E 1.44269502f
#define KERN_LN2_HI 0.693145751953125f
#define KERN_LN2_LO 1.42860677e-06f
#define KERN_EXP_C7 (1.0f / 5040.0f)
#define KERN_EXP_C6 (1.0f / 720.0f)
#define KERN_EXP_C5 (1.0f / 120.0f)
#define KERN_EXP_C4 (1.0f / 24.0f)
#define KERN_EXP_C3 (1.0f / 6.0f)
#define KERN_EXP_C2 0.5f

/* The canonical GELU-tanh gate, as float32 operations in this order (no fma):
 *   g3 = (g * g) * g;  u = g + KERN_GELU_K * g3;  e = exp(KERN_GELU_M2C * u);
 *   out = (g / (1 + e)) * up,
 * i.e. g * sigmoid(2c u) = 0.5 g (1 + tanh(c u)), c = sqrt(2/pi), with the canonical exp. */
#define KERN_GELU_K 0.044715f
#define KERN_GELU_M2C (-1.59576912160573f) /* -2 sqrt(2/pi) */

/* Scalar canonical exp (kernels.c); exposed for tests. */
float kern__exp(float x);

#endif
