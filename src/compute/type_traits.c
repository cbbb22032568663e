/*
 * type_traits.c — the element-type table (type_traits.h) and the public cairn_dtype_*
 * functions of include/cairn/common.h, which read it.
 *
 * Invariant: a cairn_dtype_t value has a row here exactly when it is below
 * COMPUTE_DTYPE_COUNT; every lookup of another value reports it (NULL, 0, "?" or
 * CAIRN_EINVAL) instead of treating it like some other type.
 * Thread-safety: immutable table, pure functions.
 */
#include <strings.h>

#include "compute/quant_blocks.h"
#include "compute/type_traits.h"

uint16_t compute_f32_to_f16(float f)
{
    uint32_t b = compute_f32_bits(f);
    uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
    uint32_t a = b & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* quiet NaN */
    if (a >= 0x477ff000u) /* >= 65520: rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* normal f16 */
        uint32_t r = ((a >> 23) - 112u) << 10 | ((a >> 13) & 0x3ffu);
        uint32_t rem = a & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
            r++; /* a carry into the exponent is the correct rounding */
        return (uint16_t)(sign | r);
    }
    /* Subnormal f16 (or zero): round(|f| * 2^24) to an integer, ties to even. */
    uint32_t e = a >> 23;
    uint32_t m = e ? ((a & 0x7fffffu) | 0x800000u) : (a & 0x7fffffu);
    uint32_t s = 126u - (e ? e : 1u); /* value = m * 2^(e-150); want m >> s */
    if (s >= 25u)
        return sign; /* below half the smallest subnormal */
    uint32_t r = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
    if (rem > half || (rem == half && (r & 1u)))
        r++;
    return (uint16_t)(sign | r);
}

/* ---- rows of the plain float types -------------------------------------------------- */

static void f32_to_f32(float *dst, const void *src, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
static void f32_from_f32(void *dst, const float *src, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

static void f16_to_f32(float *dst, const void *src, int64_t n)
{
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = compute_f16_to_f32(s[i]);
}

static void f16_from_f32(void *dst, const float *src, int64_t n)
{
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++)
        d[i] = compute_f32_to_f16(src[i]);
}

static void bf16_to_f32(float *dst, const void *src, int64_t n)
{
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = compute_bf16_to_f32(s[i]);
}

static void bf16_from_f32(void *dst, const float *src, int64_t n)
{
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++)
        d[i] = compute_f32_to_bf16(src[i]);
}

static const compute_type_traits_t traits[COMPUTE_DTYPE_COUNT] = {
    [CAIRN_DTYPE_F32] = {"f32", "float32", 1, 4, false, f32_to_f32, f32_from_f32},
    [CAIRN_DTYPE_F16] = {"f16", "float16", 1, 2, false, f16_to_f32, f16_from_f32},
    [CAIRN_DTYPE_BF16] = {"bf16", "bfloat16", 1, 2, false, bf16_to_f32, bf16_from_f32},
    /* The block-quantized types (quant_blocks.h has their layouts and conversions). */
    [CAIRN_DTYPE_Q8_0] = {"q8_0", "q8_0", 32, 34, true, quant_q8_0_to_f32, quant_q8_0_from_f32},
    [CAIRN_DTYPE_Q4_0] = {"q4_0", "q4_0", 32, 18, true, quant_q4_0_to_f32, quant_q4_0_from_f32},
    [CAIRN_DTYPE_Q4_K] = {"q4_k", "q4_k", 256, 144, true, quant_q4_k_to_f32, quant_q4_k_from_f32},
    [CAIRN_DTYPE_Q5_K] = {"q5_k", "q5_k", 256, 176, true, quant_q5_k_to_f32, quant_q5_k_from_f32},
    [CAIRN_DTYPE_Q6_K] = {"q6_k", "q6_k", 256, 210, true, quant_q6_k_to_f32, quant_q6_k_from_f32},
    [CAIRN_DTYPE_Q8_K] = {"q8_k", "q8_k", 256, 292, true, quant_q8_k_to_f32, quant_q8_k_from_f32},
    [CAIRN_DTYPE_FP8_E4M3] = {"fp8_e4m3", "float8_e4m3", 32, 34, true, quant_fp8_to_f32, quant_fp8_from_f32},
};

const compute_type_traits_t *compute_type_traits(cairn_dtype_t t)
{
    /* An out-of-range value (a corrupt header, a newer file) has no row. */
    if ((unsigned)t >= COMPUTE_DTYPE_COUNT || !traits[t].name)
        return NULL;
    return &traits[t];
}

/* ---- include/cairn/common.h ---------------------------------------------------------- */

size_t cairn_dtype_size(cairn_dtype_t t)
{
    const compute_type_traits_t *tt = compute_type_traits(t);
    return tt && tt->block_elems == 1 ? (size_t)tt->block_bytes : 0;
}

size_t cairn_dtype_row_bytes(cairn_dtype_t t, int64_t n)
{
    const compute_type_traits_t *tt = compute_type_traits(t);
    if (!tt || n < 0 || n % tt->block_elems)
        return 0;
    return (size_t)(n / tt->block_elems) * (size_t)tt->block_bytes;
}

int cairn_dtype_block_elems(cairn_dtype_t t)
{
    const compute_type_traits_t *tt = compute_type_traits(t);
    return tt ? tt->block_elems : 0;
}

const char *cairn_dtype_name(cairn_dtype_t t)
{
    const compute_type_traits_t *tt = compute_type_traits(t);
    return tt ? tt->name : "?";
}

int cairn_dtype_parse(const char *s, cairn_dtype_t *out)
{
    if (!s)
        return CAIRN_EINVAL;
    for (int t = 0; t < COMPUTE_DTYPE_COUNT; t++)
        if (traits[t].name && (!strcasecmp(s, traits[t].name) || !strcasecmp(s, traits[t].long_name))) {
            *out = (cairn_dtype_t)t;
            return CAIRN_OK;
        }
    return CAIRN_EINVAL;
}
