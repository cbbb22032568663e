/*
 * quant_blocks.h — the block-quantized element types: their byte layouts and the reference
 * conversions of the traits table (type_traits.c), backend-independent.
 *
 * The GGUF types use ggml's layouts (docs/FORMAT.md section 4 numbers every field); all
 * integers little-endian, an f16 is IEEE binary16, elements of a row are blocks back to
 * back, a block is self-contained (its scales come first or last as below):
 *
 *   q8_0  (32 elements, 34 bytes):  f16 d; int8 q[32].              x_i = d * q_i
 *   q4_0  (32, 18):   f16 d; u8 qs[16]; element i < 16 is qs[i] & 15, element i + 16 is
 *                     qs[i] >> 4.                                     x_i = d * (q_i - 8)
 *   q4_k  (256, 144): f16 d, dmin; u8 scales[12]; u8 qs[128]. Eight sub-blocks of 32, each
 *                     a 6-bit scale sc_j and 6-bit min m_j packed in scales (below); group
 *                     g < 4 of 64 elements is qs[32g .. 32g+31]: element 64g + l is the low
 *                     nibble of qs[32g + l] (sub-block 2g), element 64g + 32 + l its high
 *                     nibble (sub-block 2g + 1).        x = (d * sc_j) * q - (dmin * m_j)
 *   q5_k  (256, 176): f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]. As q4_k, plus bit 4
 *                     of q from qh: element 64g + l has bit 2g of qh[l], element
 *                     64g + 32 + l bit 2g + 1 (q in 0..31).
 *   q6_k  (256, 210): u8 ql[128]; u8 qh[64]; int8 scales[16]; f16 d. Sixteen sub-blocks of
 *                     16, scale sc_(e/16) for element e. In half h < 2 (elements 128h ..
 *                     128h + 127), with L = ql + 64h, H = qh + 32h and l < 32, the 6-bit q of
 *                     element 128h + 32k + l is: k=0: L[l] & 15 | (H[l] & 3) << 4;
 *                     k=1: L[l+32] & 15 | (H[l] >> 2 & 3) << 4; k=2: L[l] >> 4 | (H[l] >> 4 & 3) << 4;
 *                     k=3: L[l+32] >> 4 | (H[l] >> 6) << 4.      x = (d * sc) * (q - 32)
 *   q8_k  (256, 292): f32 d; int8 q[256]; int16 bsums[16] = sums of q over each 16.
 *                     x_i = d * q_i. Only an activation format (the k-quants' products).
 *   fp8_e4m3 (32, 34): f16 d; u8 e[32], OCP E4M3 (bias 7, no infinities, 0x7f/0xff NaN,
 *                     largest 448).                          x_i = d * e4m3(e_i)
 *
 * q4_k / q5_k scales[12] hold sc_j, m_j (6 bits each): for j < 4, sc_j = scales[j] & 63 and
 * m_j = scales[j + 4] & 63; for j >= 4, sc_j = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4
 * and m_j = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4.
 *
 * The to_f32 functions compute exactly the float expressions on the right (in that order,
 * each product rounded): what llama.cpp's dequantizer gives and what an embedding row reads.
 * The from_f32 functions are Cairn's reference rounding. q8_k follows the activation rule
 * of the quantized matmul (kernels_impl.h), the rounding llama.cpp applies to activations:
 * the first element of largest |x| maps to -127 (q = rint(x * (-127 / max)), d its
 * reciprocal), ties to even. q8_0 has two rules: weights as llama-quantize rounds them
 * (d = amax / 127, q = round(x * (1 / d)), halves away from zero: quant_q8_0_from_f32)
 * and activations and K/V as llama.cpp rounds activations (q = rint(x * (127 / amax)):
 * quant_q8_0_round_act). q4_0 maps the signed largest |x| to -8; the k-quants fit each sub-block
 * by a small least-squares search, then round the sub-block scales against the block's
 * d (and dmin); fp8_e4m3 scales the block's amax to 448 and rounds to nearest even.
 *
 * Thread-safety: pure functions.
 */
#ifndef CAIRN_COMPUTE_QUANT_BLOCKS_H
#define CAIRN_COMPUTE_QUANT_BLOCKS_H

#include <stdint.h>

enum { QK4_0 = 32, QK8_0 = 32, QK_K = 256, QK_FP8 = 32 };

typedef struct {
    uint16_t d;      /* f16 */
    int8_t q[32];
} blk_q8_0_t;

typedef struct {
    uint16_t d;      /* f16 */
    uint8_t qs[16];
} blk_q4_0_t;

typedef struct {
    uint16_t d, dmin; /* f16 */
    uint8_t scales[12];
    uint8_t qs[128];
} blk_q4_k_t;

typedef struct {
    uint16_t d, dmin; /* f16 */
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
} blk_q5_k_t;

typedef struct {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;      /* f16 */
} blk_q6_k_t;

typedef struct {
    float d;
    int8_t q[256];
    int16_t bsums[16];
} blk_q8_k_t;

typedef struct {
    uint16_t d;      /* f16 */
    uint8_t e[32];
} blk_fp8_t;

_Static_assert(sizeof(blk_q8_0_t) == 34, "q8_0 block");
_Static_assert(sizeof(blk_q4_0_t) == 18, "q4_0 block");
_Static_assert(sizeof(blk_q4_k_t) == 144, "q4_k block");
_Static_assert(sizeof(blk_q5_k_t) == 176, "q5_k block");
_Static_assert(sizeof(blk_q6_k_t) == 210, "q6_k block");
_Static_assert(sizeof(blk_q8_k_t) == 292, "q8_k block");
_Static_assert(sizeof(blk_fp8_t) == 34, "fp8_e4m3 block");

/* The 6-bit scale and min of sub-block j < 8 of a q4_k / q5_k scales[12] field. */
static inline void quant_k4_scale_min(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* The q of element e < 256 of a q6_k block (0..63; the value is q - 32). */
static inline int quant_q6_k_q(const blk_q6_k_t *b, int e)
{
    int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const uint8_t *L = b->ql + 64 * h, *H = b->qh + 32 * h;
    int lo = k & 1 ? L[l + 32] : L[l];
    lo = k & 2 ? lo >> 4 : lo & 15;
    return lo | ((H[l] >> (2 * k)) & 3) << 4;
}

/* The q of element e < 256 of a q4_k block (0..15). */
static inline int quant_q4_k_q(const blk_q4_k_t *b, int e)
{
    int g = e / 64, l = e % 64;
    return l < 32 ? b->qs[32 * g + l] & 15 : b->qs[32 * g + l - 32] >> 4;
}

/* The q of element e < 256 of a q5_k block (0..31). */
static inline int quant_q5_k_q(const blk_q5_k_t *b, int e)
{
    int g = e / 64, l = e % 64;
    int lo = l < 32 ? b->qs[32 * g + l] & 15 : b->qs[32 * g + l - 32] >> 4;
    int bit = (b->qh[l % 32] >> (2 * g + (l >= 32))) & 1;
    return lo | bit << 4;
}

/* The value of an E4M3 code (exact); NaN for 0x7f / 0xff. */
float quant_e4m3_to_f32(uint8_t c);
/* v rounded to E4M3, to nearest even, saturating at +-448; NaN gives 0x7f. */
uint8_t quant_f32_to_e4m3(float v);

/* The traits rows' conversions (n a multiple of the type's block). */
void quant_q8_0_to_f32(float *dst, const void *src, int64_t n);
void quant_q8_0_from_f32(void *dst, const float *src, int64_t n);
/* q8_0 by the activation rule (multiplier 127 / amax, ties to even): what the matmul rounds
 * activations to for q8_0 / q4_0 weights and what q8_0 K/V stores hold. */
void quant_q8_0_round_act(void *dst, const float *src, int64_t n);
void quant_q4_0_to_f32(float *dst, const void *src, int64_t n);
void quant_q4_0_from_f32(void *dst, const float *src, int64_t n);
void quant_q4_k_to_f32(float *dst, const void *src, int64_t n);
void quant_q4_k_from_f32(void *dst, const float *src, int64_t n);
void quant_q5_k_to_f32(float *dst, const void *src, int64_t n);
void quant_q5_k_from_f32(void *dst, const float *src, int64_t n);
void quant_q6_k_to_f32(float *dst, const void *src, int64_t n);
void quant_q6_k_from_f32(void *dst, const float *src, int64_t n);
void quant_q8_k_to_f32(float *dst, const void *src, int64_t n);
void quant_q8_k_from_f32(void *dst, const float *src, int64_t n);
void quant_fp8_to_f32(float *dst, const void *src, int64_t n);
void quant_fp8_from_f32(void *dst, const float *src, int64_t n);

#endif
