/*
 * type_traits.h — the element types, one row each in one traits table.
 *
 * Model (like ggml's type traits). An element type is a block format: `block_elems`
 * consecutive elements are stored in `block_bytes` bytes. The plain float types (f32,
 * f16, bf16) are blocks of one element; the block-quantized types (GGUF's q8_0, q4_0
 * blocks of 32, q4_k, q5_k, q6_k blocks of 256, the activation format q8_k, the K/V type
 * fp8_e4m3; layouts in quant_blocks.h) are rows of the same table.
 * A row holds what is true of the format on every backend: its names, its block
 * geometry, the exact row-to-f32 conversion (the reference dequantizer) and, where the
 * type can be written, the reference row-from-f32 rounding.
 *
 * The table has a second half per backend: each backend keeps its own per-type kernels
 * indexed by the same cairn_dtype_t (the CPU backend's are the `types[]` rows of each
 * implementation in src/compute/cpu/kernels_impl.h). A type a backend has no kernel for
 * is refused when a model binds its weights (compute_backend_require), never computed
 * through a default branch.
 *
 * Adding a type: its enum value in include/cairn/common.h, COMPUTE_DTYPE_COUNT here, one
 * row in type_traits.c (tested by tests/compute/test_type_traits.c against the format's
 * definition), then kernels in the backends that support it.
 *
 * Thread-safety: the table is immutable; every function is pure.
 */
#ifndef CAIRN_COMPUTE_TYPE_TRAITS_H
#define CAIRN_COMPUTE_TYPE_TRAITS_H

#include <string.h>

#include "cairn/common.h"

/* Number of element types (every cairn_dtype_t is below it). */
enum { COMPUTE_DTYPE_COUNT = CAIRN_DTYPE_FP8_E4M3 + 1 };

typedef struct compute_type_traits {
    const char *name;      /* short name: "f32", "q4_k", ... (cairn_dtype_name; GGUF's
                            * lowercase ggml name for the GGUF types) */
    const char *long_name; /* "float32", ... (also accepted by cairn_dtype_parse) */
    int block_elems;       /* elements per block */
    int block_bytes;       /* bytes per block */
    bool quantized;        /* blocks carry their own scales */
    /* dst[i] = the exact value of element i of src, for n elements (a multiple of
     * block_elems). dst must not overlap src. */
    void (*to_f32)(float *dst, const void *src, int64_t n);
    /* dst = src rounded to the type by the reference rounding, n a multiple of
     * block_elems; NULL when the type cannot be written. */
    void (*from_f32)(void *dst, const float *src, int64_t n);
} compute_type_traits_t;

/* The row of t, or NULL when t is not an element type. */
const compute_type_traits_t *compute_type_traits(cairn_dtype_t t);

/* ---- the exact scalar conversions of the plain float types -------------------------- */

static inline uint32_t compute_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float compute_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float compute_bf16_to_f32(uint16_t h) { return compute_bits_f32((uint32_t)h << 16); }

/* Round to nearest even; NaN stays NaN (quieted, sign and top payload kept). */
static inline uint16_t compute_f32_to_bf16(float f)
{
    uint32_t b = compute_f32_bits(f);
    if ((b & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((b >> 16) | 0x40);
    b += 0x7fffu + ((b >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(b >> 16);
}

static inline float compute_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * 0x1p-24f; /* zero or subnormal, exact */
        return sign ? -v : v;
    }
    if (e == 31)
        return compute_bits_f32(sign | 0x7f800000u | (m << 13));
    return compute_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* Round to nearest even (subnormals included); NaN stays NaN. */
uint16_t compute_f32_to_f16(float f);

#endif
