/*
 * kernels.h — the CPU backend's numeric kernels on host memory, with run-time SIMD
 * dispatch.
 *
 * These are the CPU implementation of the compute backend's ops (src/compute/backend.h;
 * cpu_backend.c wraps them); a model family calls the backend, not these. Every kernel
 * has a scalar reference (kern_ref_*) beside the dispatched version; tests hold the SIMD
 * versions to their references. The dispatched implementation (AVX-512, AVX2+FMA or
 * scalar; only scalar in a build with CAIRN_X86=OFF) is chosen once per process by
 * kern_init() (override with CAIRN_KERNELS=scalar|avx2|avx512|avx512-emubf16 for tests
 * and benchmarks) and is a table of function pointers resolved at that moment
 * (kernels_impl.h): no call compares names or switches on a type.
 *
 * DETERMINISM CONTRACT. For a given dispatched implementation, every output element is
 * reduced in a fixed order that depends only on the reduction length — never on the
 * number of rows in the call, on which thread computed it, or on how the caller chunked
 * its work. So kern_matmul over 7 rows gives, row for row, the same bits as 7 calls over
 * 1 row, for any thread count. The forward pass relies on this for bit-identical logits
 * across batching, chunked prefill, prefix-cache hits and thread counts.
 *
 * Layouts: activations are float32, row-major [rows][n]. Weights are [out][in] row-major
 * in f32, f16 or bf16 (the HF layout). K/V rows are [n] in their storage dtype. A type
 * outside the element-type table is a broken invariant here (types are checked when a
 * model binds its weights), never computed as another type.
 *
 * Thread-safety: kernels are pure functions of their arguments; matmul uses the pool.
 */
#ifndef CAIRN_COMPUTE_CPU_KERNELS_H
#define CAIRN_COMPUTE_CPU_KERNELS_H

#include "cairn/common.h"
#include "compute/backend.h"
#include "util/thread_pool.h"

/* Activation precision inside matmul: cairn_math_t (backend.h). F32: x stays float32
 * (exact mode; reference checks). BF16: x is rounded to bf16 and multiplied with AVX-512
 * BF16 dot products (fast prefill); falls back to a bit-identical emulation where the CPU
 * lacks it. BF16 math applies to bf16 weights only: with f32 or f16 weights a BF16 call
 * computes exactly the F32 result (weights are never rounded to bf16).
 *
 * Stronger than the contract: all implementations follow one canonical accumulation
 * order (16 fma lanes, fixed tree; see kernels_impl.h), so scalar, AVX2 and AVX-512 give
 * the same bits for matmul, dot, axpy, rmsnorm and the gated activations. */

/* Selects the implementation (idempotent, thread-safe). Returns its name. */
const char *kern_init(void);
/* Name of the selected implementation: "scalar", "avx2", "avx512" (native AVX512_BF16
 * dot products) or "avx512-emubf16" (AVX-512 without AVX512_BF16; same bits). */
const char *kern_impl_name(void);
/* True if this build has the named implementation and the CPU can run it. */
bool kern_impl_available(const char *name);
/*
 * Test and benchmark hook: switches the process to the named implementation. Returns
 * CAIRN_EINVAL for a name no build has, CAIRN_EUNSUPPORTED if this build or this CPU
 * lacks it. Not thread-safe with respect to kernels running concurrently.
 */
int kern_set_impl(const char *name);
/* True when MATH_BF16 matmuls run on a fast path ("avx512" or "avx512-emubf16");
 * "scalar" and "avx2" compute the same bits much more slowly. */
bool kern_bf16_math_fast(void);

/* ---- conversions (the element-type table's, type_traits.h) ---- */
float kern_bf16_to_f32(uint16_t h);
uint16_t kern_f32_to_bf16(float f);   /* round to nearest even; NaN stays NaN */
float kern_f16_to_f32(uint16_t h);
uint16_t kern_f32_to_f16(float f);    /* round to nearest even */
/* dst[i] = (float)src[i] for a row of n elements of type t (n a multiple of its block). */
void kern_row_to_f32(float *dst, const void *src, cairn_dtype_t t, int n);
/* dst (type t) [i] = round(src[i]), the type's reference rounding. */
void kern_row_from_f32(void *dst, cairn_dtype_t t, const float *src, int n);

/* ---- linear algebra ---- */
/*
 * y[r][o] = sum_i x[r][i] * w[o][i] for r < rows, o < out. x: [rows][in] f32,
 * w: [out][in] of type wt, y: [rows][out] f32 (must not alias x). Splits `out` across
 * the pool's threads in fixed ranges.
 */
void kern_matmul(cairn_thread_pool_t *tp, float *y, const float *x, int rows, int in,
                 const void *w, cairn_dtype_t wt, int out, cairn_math_t math);
/* One product of a fused matmul: y [rows][out] = x w^T, w [out][in]. */
typedef struct {
    float *y;
    const void *w;
    int out;
} kern_mm_out_t;
/*
 * Several products of the same x (e.g. q/k/v, or gate/up), as one parallel run: the
 * outputs of all n products are split across the pool's threads as one range, so a decode
 * step wakes the workers once instead of n times and every thread streams an equal share
 * of all the weights. Bit-identical to n kern_matmul calls (each output element is the
 * same canonical reduction). Every w has type wt; no y may alias x.
 */
void kern_matmul_n(cairn_thread_pool_t *tp, const float *x, int rows, int in, cairn_dtype_t wt,
                   const kern_mm_out_t *outs, int n, cairn_math_t math);
/* Dot product of an f32 vector with a row of type t (attention scores). Same bits as a
 * one-row, one-output kern_matmul in F32 math. */
float kern_dot(const float *a, const void *b, cairn_dtype_t t, int n);
/* acc[i] += s * row[i] for a row of type t (attention value accumulation): a rounded
 * product, then a rounded sum (no fma), so every implementation gives the same bits. */
void kern_axpy(float *acc, float s, const void *row, cairn_dtype_t t, int n);

/* ---- elementwise ---- */
/* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]; w of type wt (HF LlamaRMSNorm, float32):
 * ss = sum x^2 in the canonical order, scale = 1.0f / sqrtf(ss / n + eps) (torch.rsqrt on
 * CPU is 1/sqrt), out[i] = w[i] * (x[i] * scale). out may alias x. */
void kern_rmsnorm(float *out, const float *x, const void *w, cairn_dtype_t wt, int n, float eps);
/* As kern_rmsnorm with the weight taken as 1 + w (computed in float32): Gemma's RMSNorm. */
void kern_rmsnorm_unit_offset(float *out, const float *x, const void *w, cairn_dtype_t wt, int n, float eps);
/* out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)), with the canonical
 * vectorizable exp (<= 1 ulp measured; same bits in every implementation). out may alias
 * gate or up. */
void kern_silu_mul(float *out, const float *gate, const float *up, int n);
/* out[i] = act(gate[i]) * up[i] for the activations of compute_glu_t: silu as
 * kern_silu_mul, GELU-tanh and sigmoid as spelled out in kernels_impl.h, every one with
 * the canonical exp and the same bits in every implementation. out may alias gate or up. */
void kern_glu(float *out, const float *gate, const float *up, size_t n, compute_glu_t act);
/*
 * Rotates n_heads heads of head_dim (rotate_half / NeoX pairing i <-> i + head_dim/2) in
 * place: x' = x*cos + rotate_half(x)*sin, with cos/sin of the precomputed angles
 * cos_sin[2*i], cos_sin[2*i+1] for i < head_dim/2 (see kern_rope_angles).
 */
void kern_rope(float *x, int n_heads, int head_dim, const float *cos_sin);
/* As kern_rope over the first rot_dims (even, <= head_dim) dimensions of each head only,
 * pairing i <-> i + rot_dims/2 with cos_sin [rot_dims/2][2]; the other dimensions pass
 * through (partial rotary). kern_rope is rot_dims = head_dim. */
void kern_rope_partial(float *x, int n_heads, int head_dim, int rot_dims, const float *cos_sin);
/* Computes cos/sin of pos * inv_freq[i] the way HF does in float32: angle = (float)pos *
 * inv_freq[i] (one float product), then cosf/sinf of it. cos_sin: [half_dim][2]. The
 * forward pass computes this once per position and reuses it for every layer and head. */
void kern_rope_angles(float *cos_sin, const float *inv_freq, int half_dim, int pos);
/* x[i] += y[i]. */
void kern_add(float *x, const float *y, int n);

/* ---- scalar references (tests compare the dispatched kernels to these) ---- */
void kern_ref_matmul(float *y, const float *x, int rows, int in, const void *w,
                     cairn_dtype_t wt, int out, cairn_math_t math);
float kern_ref_dot(const float *a, const void *b, cairn_dtype_t t, int n);
void kern_ref_axpy(float *acc, float s, const void *row, cairn_dtype_t t, int n);
void kern_ref_rmsnorm(float *out, const float *x, const void *w, cairn_dtype_t wt, int n, float eps);
void kern_ref_silu_mul(float *out, const float *gate, const float *up, int n);
/* act in double precision (libm exp), rounded once: an independent reference. */
void kern_ref_glu(float *out, const float *gate, const float *up, int n, compute_glu_t act);

#endif
