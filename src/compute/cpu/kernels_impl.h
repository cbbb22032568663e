/*
 * kernels_impl.h — private: the table each kernel implementation fills in, and the
 * canonical reduction order every implementation follows (see kernels.c for the model).
 *
 * CANONICAL ORDER (shared by scalar, AVX2 and AVX-512, which therefore agree bit for bit):
 *  - F32 math, length n: 16 lane accumulators a[j] = +0. For each block of 16 elements
 *    (the last one zero-padded): a[j] = fma(x[16k+j], w[16k+j], a[j]). Then the fixed tree
 *    b[j] = a[j] + a[j+8] (j<8), c[j] = b[j] + b[j+4] (j<4), d[j] = c[j] + c[j+2] (j<2),
 *    result = d[0] + d[1].
 *  - BF16 math (bf16 weights): x rounded to bf16 as vcvtne2ps2bf16 does (input denormals
 *    to signed zero, round to nearest even, NaN quieted). For each block of 32 elements
 *    (the last zero-padded), lane j takes the pair (2j, 2j+1) exactly as vdpbf16ps:
 *    a[j] = ftz(fma(x[2j+1], w[2j+1], daz(a[j]))); a[j] = ftz(fma(x[2j], w[2j], a[j])),
 *    with bf16 inputs denormals-as-zero. Then the same tree.
 */
#ifndef CAIRN_COMPUTE_CPU_KERNELS_IMPL_H
#define CAIRN_COMPUTE_CPU_KERNELS_IMPL_H

#include "compute/cpu/kernels.h"

typedef struct kern_impl {
    const char *name;
    /* y[r*out + o] for r < rows and o in [o0, o1) (see kern_matmul). */
    void (*matmul_range)(float *y, const float *x, int rows, int in, const void *w,
                         cairn_dtype_t wt, int out, int o0, int o1, cairn_math_t math);
    float (*dot)(const float *a, const void *b, cairn_dtype_t t, int n);
    void (*axpy)(float *acc, float s, const void *row, cairn_dtype_t t, int n);
    /* sum of x[i]^2 in the canonical F32 order */
    float (*sumsq)(const float *x, int n);
    void (*silu_mul)(float *out, const float *gate, const float *up, int n);
} kern_impl_t;

/* The portable implementation (kernels.c); always available. */
extern const kern_impl_t kern__scalar;
/* kernels_avx2.c / kernels_avx512.c; only call when the CPU supports them. */
extern const kern_impl_t kern__avx2;
extern const kern_impl_t kern__avx512;        /* native AVX512_BF16 dot products */
extern const kern_impl_t kern__avx512_emubf16; /* same bits, BF16 dot emulated with AVX-512F */

/* The canonical exp used by silu (all implementations): exp(x) = p(r) * 2^k1 * 2^k2 with
 * k = rint(x*log2e), r = x - k*ln2 (Cody-Waite, two fmas), p the degree-7 Taylor
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

/* Scalar canonical exp (kernels.c); exposed for tests. */
float kern__exp(float x);

#endif
