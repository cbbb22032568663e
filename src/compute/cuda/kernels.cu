/*
 * kernels.cu — the CUDA backend's row and elementwise kernels: K/V stores, bf16
 * conversion, embedding rows, RMSNorm, RoPE, gated activations, mul/add/scale.
 *
 * Every kernel is row-local (a row's output depends on that row alone) with a fixed
 * reduction order, so batching never changes a bit. Arithmetic that must not be fused is
 * written with the __f*_rn intrinsics (nvcc contracts a*b+c into an fma otherwise): RoPE
 * rounds each product then sums, exactly as the CPU backend and HF do, and the gates use
 * the CPU backend's canonical exp (kernels_impl.h), so RoPE and the gates give the CPU's
 * bits; RMSNorm's sum of squares has its own (fixed) order.
 *
 * Thread-safety: launchers only enqueue on the stream they are given.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "compute/cuda/cuda_internal.h"

namespace {

constexpr int kThreads = 256;

inline unsigned blocks_for(size_t n, int per = kThreads)
{
    size_t b = (n + per - 1) / per;
    return (unsigned)(b > 1048576 ? 1048576 : b); /* grid-stride loops cover the rest */
}

__device__ __forceinline__ float load_elem(const void *p, int t, size_t i)
{
    switch (t) {
    case CUDA_T_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case CUDA_T_F16: return __half2float(((const __half *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* The CPU backend's canonical exp (kernels_impl.h: Cody-Waite reduction, degree-7
 * polynomial, two-step scaling), operation for operation. */
__device__ __forceinline__ float canon_exp(float x)
{
    if (isnan(x))
        return x;
    if (x > 88.72283f)
        return __int_as_float(0x7f800000);
    if (x < -87.33654f)
        return 0.0f;
    float k = rintf(__fmul_rn(x, 1.44269502f));
    float r = __fmaf_rn(-k, 0.693145751953125f, x);
    r = __fmaf_rn(-k, 1.42860677e-06f, r);
    float p = 1.0f / 5040.0f;
    p = __fmaf_rn(p, r, 1.0f / 720.0f);
    p = __fmaf_rn(p, r, 1.0f / 120.0f);
    p = __fmaf_rn(p, r, 1.0f / 24.0f);
    p = __fmaf_rn(p, r, 1.0f / 6.0f);
    p = __fmaf_rn(p, r, 0.5f);
    p = __fmaf_rn(p, r, 1.0f);
    p = __fmaf_rn(p, r, 1.0f);
    int ki = (int)k;
    int k1 = (int)floorf(__fmul_rn(k, 0.5f)), k2 = ki - k1;
    float s1 = __int_as_float((k1 + 127) << 23), s2 = __int_as_float((k2 + 127) << 23);
    return __fmul_rn(__fmul_rn(p, s1), s2);
}

__global__ void kv_store_kernel(const cuda_kv_store_t *stores)
{
    const cuda_kv_store_t st = stores[blockIdx.x];
    __nv_bfloat16 *d = (__nv_bfloat16 *)st.dst;
    for (int i = threadIdx.x; i < st.n; i += blockDim.x)
        d[i] = __float2bfloat16_rn(st.src[i]);
}

__global__ void to_bf16_kernel(__nv_bfloat16 *y, const float *x, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i * 4 < n; i += stride) {
        if (i * 4 + 4 <= n && ((uintptr_t)x % 16) == 0 && ((uintptr_t)y % 8) == 0) {
            float4 v = ((const float4 *)x)[i];
            __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
            ((__nv_bfloat162 *)y)[2 * i] = a;
            ((__nv_bfloat162 *)y)[2 * i + 1] = b;
        } else {
            for (size_t j = i * 4; j < n && j < i * 4 + 4; j++)
                y[j] = __float2bfloat16_rn(x[j]);
        }
    }
}

__global__ void get_rows_kernel(float *dst, const void *table, int t, int cols, const int32_t *ids)
{
    const size_t id = (size_t)ids[blockIdx.x];
    float *o = dst + (size_t)blockIdx.x * cols;
    for (int i = threadIdx.x; i < cols; i += blockDim.x)
        o[i] = load_elem(table, t, id * (size_t)cols + i);
}

/* One warp per row: lane-strided squares, then a fixed butterfly. */
__global__ void rmsnorm_kernel(float *out, const float *x, int rows, int n, const void *w, int wt, float eps,
                               int unit_offset)
{
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    const float *xr = x + (size_t)row * n;
    float *o = out + (size_t)row * n;
    float ss = 0.0f;
    for (int i = lane; i < n; i += 32)
        ss = __fmaf_rn(xr[i], xr[i], ss);
    for (int off = 16; off > 0; off >>= 1)
        ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, off));
    const float scale = 1.0f / sqrtf(__fadd_rn(ss / (float)n, eps));
    for (int i = lane; i < n; i += 32) {
        float ww = load_elem(w, wt, (size_t)i);
        if (unit_offset)
            ww = __fadd_rn(1.0f, ww);
        o[i] = __fmul_rn(ww, __fmul_rn(xr[i], scale));
    }
}

__global__ void rope_kernel(float *x, int rows, int n_heads, int head_dim, int rot, const float *cos_sin)
{
    const int half = rot / 2;
    const size_t total = (size_t)rows * n_heads * half;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int i = (int)(idx % half);
        const size_t rh = idx / half; /* row * n_heads + head */
        const int row = (int)(rh / n_heads);
        float *q = x + rh * head_dim;
        const float c = cos_sin[(size_t)row * rot + 2 * i], s = cos_sin[(size_t)row * rot + 2 * i + 1];
        const float x1 = q[i], x2 = q[i + half];
        q[i] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
        q[i + half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
    }
}

__global__ void glu_kernel(float *out, const float *gate, const float *up, size_t n, int act)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float g = gate[i], u = up[i];
        float s;
        if (act == 0) { /* silu: g / (1 + exp(-g)) */
            s = __fdiv_rn(g, __fadd_rn(1.0f, canon_exp(-g)));
        } else if (act == 1) { /* GELU-tanh: g / (1 + exp(-2c(g + k g^3))) */
            const float g3 = __fmul_rn(__fmul_rn(g, g), g);
            const float v = __fadd_rn(g, __fmul_rn(0.044715f, g3));
            s = __fdiv_rn(g, __fadd_rn(1.0f, canon_exp(__fmul_rn(-1.59576912160573f, v))));
        } else { /* sigmoid */
            s = __fdiv_rn(1.0f, __fadd_rn(1.0f, canon_exp(-g)));
        }
        out[i] = __fmul_rn(s, u);
    }
}

__global__ void mul_kernel(float *out, const float *a, const float *b, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = __fmul_rn(a[i], b[i]);
}

__global__ void add_kernel(float *x, const float *y, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] = __fadd_rn(x[i], y[i]);
}

__global__ void scale_kernel(float *x, float v, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] = __fmul_rn(x[i], v);
}

int launched() { return (int)cudaGetLastError(); }

} // namespace

extern "C" {

int cuda_k_kv_store(const cuda_kv_store_t *stores, int n_stores, cudaStream_t s)
{
    if (n_stores <= 0)
        return 0;
    kv_store_kernel<<<n_stores, 128, 0, s>>>(stores);
    return launched();
}

int cuda_k_to_bf16(void *y, const float *x, size_t n, cudaStream_t s)
{
    if (!n)
        return 0;
    to_bf16_kernel<<<blocks_for((n + 3) / 4), kThreads, 0, s>>>((__nv_bfloat16 *)y, x, n);
    return launched();
}

int cuda_k_get_rows(float *dst, const void *table, int t, int cols, const int32_t *ids, int n, cudaStream_t s)
{
    if (n <= 0)
        return 0;
    get_rows_kernel<<<n, kThreads, 0, s>>>(dst, table, t, cols, ids);
    return launched();
}

int cuda_k_rmsnorm(float *out, const float *x, int rows, int n, const void *w, int wt, float eps, int unit_offset,
                   cudaStream_t s)
{
    if (rows <= 0 || n <= 0)
        return 0;
    const int warps = 4;
    rmsnorm_kernel<<<(rows + warps - 1) / warps, warps * 32, 0, s>>>(out, x, rows, n, w, wt, eps, unit_offset);
    return launched();
}

int cuda_k_rope(float *x, int rows, int n_heads, int head_dim, int rot, const float *cos_sin, cudaStream_t s)
{
    const size_t total = (size_t)rows * n_heads * (rot / 2);
    if (!total)
        return 0;
    rope_kernel<<<blocks_for(total), kThreads, 0, s>>>(x, rows, n_heads, head_dim, rot, cos_sin);
    return launched();
}

int cuda_k_glu(float *out, const float *gate, const float *up, size_t n, int act, cudaStream_t s)
{
    if (!n)
        return 0;
    glu_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, gate, up, n, act);
    return launched();
}

int cuda_k_mul(float *out, const float *a, const float *b, size_t n, cudaStream_t s)
{
    if (!n)
        return 0;
    mul_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, a, b, n);
    return launched();
}

int cuda_k_add(float *x, const float *y, size_t n, cudaStream_t s)
{
    if (!n)
        return 0;
    add_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
    return launched();
}

int cuda_k_scale(float *x, float v, size_t n, cudaStream_t s)
{
    if (!n)
        return 0;
    scale_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, v, n);
    return launched();
}

} // extern "C"
