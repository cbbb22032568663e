/*
 * quant_blocks.c — reference conversions of the block-quantized types (quant_blocks.h):
 * the dequantizers (the exact float expression of each format) and Cairn's reference
 * rounding into each format.
 *
 * Invariant: every function reads and writes whole blocks only, and from_f32 then to_f32
 * reproduces what a matmul with these weights computes with (the dots use the same
 * integers and scales). Thread-safety: pure functions, no state.
 */
#include <math.h>
#include <string.h>

#include "compute/quant_blocks.h"
#include "compute/type_traits.h"

static inline float h2f(uint16_t h) { return compute_f16_to_f32(h); }
static inline uint16_t f2h(float f) { return compute_f32_to_f16(f); }

/* v rounded to nearest even and clamped to [lo, hi]; NaN gives 0 (never a float-to-int
 * conversion out of range). */
static inline int round_clamp(float v, int lo, int hi)
{
    if (v != v)
        return 0;
    v = rintf(v);
    return v < (float)lo ? lo : v > (float)hi ? hi : (int)v;
}

/* ---- E4M3 ------------------------------------------------------------------------------ */

float quant_e4m3_to_f32(uint8_t c)
{
    int e = (c >> 3) & 15, m = c & 7;
    float v;
    if (e == 15 && m == 7)
        return NAN;
    v = e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), e - 10);
    return c & 0x80 ? -v : v;
}

uint8_t quant_f32_to_e4m3(float v)
{
    if (isnan(v))
        return 0x7f;
    uint8_t sign = signbit(v) ? 0x80 : 0;
    float a = fabsf(v);
    if (a >= 448.0f)
        return sign | 0x7e;
    uint32_t code;
    if (a < 0x1p-6f) {
        /* Subnormal codes are m * 2^-9, and 8 * 2^-9 is the smallest normal (code 8), so
         * rounding a * 512 to an integer gives the code directly. */
        code = (uint32_t)rintf(a * 512.0f);
    } else {
        uint32_t b = compute_f32_bits(a);
        int e = (int)(b >> 23) - 127; /* >= -6 */
        uint32_t mant = b & 0x7fffffu, rem = mant & 0xfffffu;
        code = (uint32_t)(e + 7) << 3 | mant >> 20;
        if (rem > 0x80000u || (rem == 0x80000u && (code & 1u)))
            code++; /* a carry into the exponent is the correct rounding */
        if (code > 0x7e)
            code = 0x7e;
    }
    return (uint8_t)(sign | code);
}

/* ---- q8_0 ------------------------------------------------------------------------------ */

void quant_q8_0_to_f32(float *dst, const void *src, int64_t n)
{
    const blk_q8_0_t *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, b++) {
        const float d = h2f(b->d);
        for (int j = 0; j < QK8_0; j++)
            *dst++ = d * (float)b->q[j];
    }
}

/* The q8_0 activation rule: d = amax / 127 and the multiplier 127 / amax (0 for an all-zero
 * block), as llama.cpp rounds activations for its q8_0 / q4_0 products. */
static inline void q8_scale(const float *x, int n, float *d, float *id)
{
    float amax = 0.0f;
    for (int j = 0; j < n; j++) {
        float a = fabsf(x[j]);
        amax = a > amax ? a : amax;
    }
    *d = amax / 127.0f;
    *id = amax != 0.0f ? 127.0f / amax : 0.0f;
}

void quant_q8_0_round_act(void *dst, const float *src, int64_t n)
{
    blk_q8_0_t *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, b++, src += QK8_0) {
        float d, id;
        q8_scale(src, QK8_0, &d, &id);
        b->d = f2h(d);
        for (int j = 0; j < QK8_0; j++)
            b->q[j] = (int8_t)round_clamp(src[j] * id, -127, 127);
    }
}

void quant_q8_0_from_f32(void *dst, const float *src, int64_t n)
{
    /* The weight rule of llama-quantize's q8_0 (multiplier 1 / d, halves away from zero),
     * so a model converted here has the bytes of the same weights quantized there. */
    blk_q8_0_t *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, b++, src += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++)
            amax = fabsf(src[j]) > amax ? fabsf(src[j]) : amax;
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f2h(d);
        for (int j = 0; j < QK8_0; j++) {
            float v = src[j] * id;
            b->q[j] = (int8_t)(v != v ? 0 : v >= 127.0f ? 127 : v <= -127.0f ? -127 : (int)roundf(v));
        }
    }
}

/* ---- q8_k ------------------------------------------------------------------------------ */

void quant_q8_k_to_f32(float *dst, const void *src, int64_t n)
{
    const blk_q8_k_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++)
        for (int j = 0; j < QK_K; j++)
            *dst++ = b->d * (float)b->q[j];
}

void quant_q8_k_from_f32(void *dst, const float *src, int64_t n)
{
    blk_q8_k_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b++, src += QK_K) {
        /* The first element of largest |x| maps to -127 exactly (the multiplier
         * -127 / max, d its reciprocal): llama.cpp's q8_k rounding, so that products with
         * k-quant weights round the same activations the same way. */
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_K; j++)
            if (fabsf(src[j]) > amax) {
                amax = fabsf(src[j]);
                max = src[j];
            }
        if (amax == 0.0f) {
            memset(b, 0, sizeof *b);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++)
            b->q[j] = (int8_t)round_clamp(iscale * src[j], -128, 127);
        b->d = 1.0f / iscale;
        for (int s = 0; s < 16; s++) {
            int sum = 0;
            for (int j = 0; j < 16; j++)
                sum += b->q[16 * s + j];
            b->bsums[s] = (int16_t)sum;
        }
    }
}

/* ---- q4_0 ------------------------------------------------------------------------------ */

void quant_q4_0_to_f32(float *dst, const void *src, int64_t n)
{
    const blk_q4_0_t *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++, b++, dst += QK4_0) {
        const float d = h2f(b->d);
        for (int j = 0; j < 16; j++) {
            dst[j] = d * (float)((b->qs[j] & 15) - 8);
            dst[j + 16] = d * (float)((b->qs[j] >> 4) - 8);
        }
    }
}

void quant_q4_0_from_f32(void *dst, const float *src, int64_t n)
{
    blk_q4_0_t *b = dst;
    for (int64_t i = 0; i < n / QK4_0; i++, b++, src += QK4_0) {
        /* The element of largest |x|, with its sign, becomes -8: the asymmetric range
         * -8..7 then covers the block without clipping it. */
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK4_0; j++)
            if (fabsf(src[j]) > amax) {
                amax = fabsf(src[j]);
                max = src[j];
            }
        const float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f2h(d);
        uint8_t q[QK4_0];
        for (int j = 0; j < QK4_0; j++)
            q[j] = (uint8_t)round_clamp(floorf(src[j] * id + 8.5f), 0, 15);
        for (int j = 0; j < 16; j++)
            b->qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
    }
}

/* ---- k-quant fitting ---------------------------------------------------------------------- */

/*
 * Fits x[0..n) as scale * q - min with q in 0..nmax and min >= 0 (the k-quants' sub-block
 * model), minimising the squared error: a few candidate grids over [min(x, 0), max(x)],
 * each refined once by least squares over its assignment. Deterministic (no SIMD).
 */
static void fit_scale_min(const float *x, int n, int nmax, float *scale, float *min)
{
    float lo = 0.0f, hi = x[0];
    for (int i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    *scale = 0.0f;
    *min = -lo;
    if (!(hi > lo))
        return;
    float best_err = INFINITY;
    for (int step = -4; step <= 4; step++) {
        float iscale = ((float)nmax + 0.25f * (float)step) / (hi - lo);
        if (!(iscale > 0.0f))
            continue;
        double sq = 0, sx = 0, sqq = 0, sqx = 0;
        for (int i = 0; i < n; i++) {
            int q = round_clamp((x[i] - lo) * iscale, 0, nmax);
            sq += q;
            sx += x[i];
            sqq += (double)q * q;
            sqx += (double)q * x[i];
        }
        double det = n * sqq - sq * sq, a, b;
        if (det > 0) {
            a = (n * sqx - sq * sx) / det;
            b = (sx - a * sq) / n; /* x ~ a q + b */
        } else {
            a = 0;
            b = sx / n;
        }
        if (b > 0) { /* the model needs min >= 0, i.e. b <= 0 */
            b = 0;
            a = sqq > 0 ? sqx / sqq : 0;
        }
        if (!(a > 0))
            continue;
        double err = 0;
        for (int i = 0; i < n; i++) {
            int q = round_clamp((float)((x[i] - b) / a), 0, nmax);
            double e = a * q + b - x[i];
            err += e * e;
        }
        if (err < best_err) {
            best_err = (float)err;
            *scale = (float)a;
            *min = (float)-b;
        }
    }
}

/* Rounds the sub-block scales s[0..8) and mins m[0..8) against the super-block d, dmin
 * (6 bits each) and packs them as quant_k4_scale_min reads them. */
static void k4_pack_scales(const float *s, const float *m, uint16_t *d16, uint16_t *dmin16, uint8_t *scales,
                           int isc[8], int imn[8])
{
    float smax = 0.0f, mmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        smax = s[j] > smax ? s[j] : smax;
        mmax = m[j] > mmax ? m[j] : mmax;
    }
    *d16 = f2h(smax / 63.0f);
    *dmin16 = f2h(mmax / 63.0f);
    const float d = h2f(*d16), dmin = h2f(*dmin16);
    for (int j = 0; j < 8; j++) {
        isc[j] = d > 0.0f ? round_clamp(s[j] / d, 0, 63) : 0;
        imn[j] = dmin > 0.0f ? round_clamp(m[j] / dmin, 0, 63) : 0;
    }
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)(isc[j] | (isc[j + 4] >> 4) << 6);
        scales[j + 4] = (uint8_t)(imn[j] | (imn[j + 4] >> 4) << 6);
        scales[j + 8] = (uint8_t)((isc[j + 4] & 15) | (imn[j + 4] & 15) << 4);
    }
}

/* q of each element of one 256 super-block against the rounded scales (q4_k / q5_k). */
static void k4_assign(const float *x, uint16_t d16, uint16_t dmin16, const int isc[8], const int imn[8], int nmax,
                      uint8_t q[256])
{
    const float d = h2f(d16), dmin = h2f(dmin16);
    for (int j = 0; j < 8; j++) {
        const float ds = d * (float)isc[j], dm = dmin * (float)imn[j];
        for (int i = 0; i < 32; i++)
            q[32 * j + i] = ds > 0.0f ? (uint8_t)round_clamp((x[32 * j + i] + dm) / ds, 0, nmax) : 0;
    }
}

/* ---- q4_k ------------------------------------------------------------------------------ */

void quant_q4_k_to_f32(float *dst, const void *src, int64_t n)
{
    const blk_q4_k_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++, dst += QK_K) {
        const float d = h2f(b->d), dmin = h2f(b->dmin);
        for (int j = 0; j < 8; j++) {
            int sc, m;
            quant_k4_scale_min(b->scales, j, &sc, &m);
            const float ds = d * (float)sc, dm = dmin * (float)m;
            for (int e = 32 * j; e < 32 * j + 32; e++)
                dst[e] = ds * (float)quant_q4_k_q(b, e) - dm;
        }
    }
}

void quant_q4_k_from_f32(void *dst, const float *src, int64_t n)
{
    blk_q4_k_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b++, src += QK_K) {
        float s[8], m[8];
        int isc[8], imn[8];
        uint8_t q[256];
        for (int j = 0; j < 8; j++)
            fit_scale_min(src + 32 * j, 32, 15, &s[j], &m[j]);
        k4_pack_scales(s, m, &b->d, &b->dmin, b->scales, isc, imn);
        k4_assign(src, b->d, b->dmin, isc, imn, 15, q);
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++)
                b->qs[32 * g + l] = (uint8_t)(q[64 * g + l] | q[64 * g + 32 + l] << 4);
    }
}

/* ---- q5_k ------------------------------------------------------------------------------ */

void quant_q5_k_to_f32(float *dst, const void *src, int64_t n)
{
    const blk_q5_k_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++, dst += QK_K) {
        const float d = h2f(b->d), dmin = h2f(b->dmin);
        for (int j = 0; j < 8; j++) {
            int sc, m;
            quant_k4_scale_min(b->scales, j, &sc, &m);
            const float ds = d * (float)sc, dm = dmin * (float)m;
            for (int e = 32 * j; e < 32 * j + 32; e++)
                dst[e] = ds * (float)quant_q5_k_q(b, e) - dm;
        }
    }
}

void quant_q5_k_from_f32(void *dst, const float *src, int64_t n)
{
    blk_q5_k_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b++, src += QK_K) {
        float s[8], m[8];
        int isc[8], imn[8];
        uint8_t q[256];
        for (int j = 0; j < 8; j++)
            fit_scale_min(src + 32 * j, 32, 31, &s[j], &m[j]);
        k4_pack_scales(s, m, &b->d, &b->dmin, b->scales, isc, imn);
        k4_assign(src, b->d, b->dmin, isc, imn, 31, q);
        memset(b->qh, 0, sizeof b->qh);
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) {
                int lo = q[64 * g + l], hi = q[64 * g + 32 + l];
                b->qs[32 * g + l] = (uint8_t)((lo & 15) | (hi & 15) << 4);
                b->qh[l] |= (uint8_t)((lo >> 4) << (2 * g) | (hi >> 4) << (2 * g + 1));
            }
    }
}

/* ---- q6_k ------------------------------------------------------------------------------ */

void quant_q6_k_to_f32(float *dst, const void *src, int64_t n)
{
    const blk_q6_k_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++, dst += QK_K) {
        const float d = h2f(b->d);
        for (int e = 0; e < QK_K; e++)
            dst[e] = (d * (float)b->scales[e / 16]) * (float)(quant_q6_k_q(b, e) - 32);
    }
}

/* Fits x[0..16) as s * q, q in -32..31: the signed element of largest |x| maps to -32
 * (candidate grids around it, each refined by least squares over its assignment). */
static float fit_scale_sym(const float *x)
{
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 16; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax == 0.0f)
        return 0.0f;
    float best = max / -32.0f;
    double best_err = INFINITY;
    for (int step = -4; step <= 4; step++) {
        float iscale = -(32.0f + 0.25f * (float)step) / max;
        double sqq = 0, sqx = 0;
        for (int i = 0; i < 16; i++) {
            int q = round_clamp(x[i] * iscale, -32, 31);
            sqq += (double)q * q;
            sqx += (double)q * x[i];
        }
        if (!(sqq > 0))
            continue;
        double a = sqx / sqq, err = 0;
        for (int i = 0; i < 16; i++) {
            int q = round_clamp((float)(x[i] / a), -32, 31);
            double e = a * q - x[i];
            err += e * e;
        }
        if (err < best_err) {
            best_err = err;
            best = (float)a;
        }
    }
    return best;
}

void quant_q6_k_from_f32(void *dst, const float *src, int64_t n)
{
    blk_q6_k_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b++, src += QK_K) {
        float s[16], amax = 0.0f;
        for (int j = 0; j < 16; j++) {
            s[j] = fit_scale_sym(src + 16 * j);
            amax = fabsf(s[j]) > amax ? fabsf(s[j]) : amax;
        }
        b->d = f2h(amax / 127.0f);
        const float d = h2f(b->d);
        uint8_t q[256];
        for (int j = 0; j < 16; j++) {
            int sc = d > 0.0f ? round_clamp(s[j] / d, -128, 127) : 0;
            b->scales[j] = (int8_t)sc;
            const float ds = d * (float)sc;
            for (int k = 0; k < 16; k++)
                q[16 * j + k] = (uint8_t)(ds != 0.0f ? round_clamp(src[16 * j + k] / ds, -32, 31) + 32 : 32);
        }
        memset(b->qh, 0, sizeof b->qh);
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const uint8_t *qq = q + 128 * h;
                b->ql[64 * h + l] = (uint8_t)((qq[l] & 15) | (qq[l + 64] & 15) << 4);
                b->ql[64 * h + l + 32] = (uint8_t)((qq[l + 32] & 15) | (qq[l + 96] & 15) << 4);
                b->qh[32 * h + l] = (uint8_t)(qq[l] >> 4 | (qq[l + 32] >> 4) << 2 | (qq[l + 64] >> 4) << 4 |
                                              (qq[l + 96] >> 4) << 6);
            }
    }
}

/* ---- fp8_e4m3 ---------------------------------------------------------------------------- */

void quant_fp8_to_f32(float *dst, const void *src, int64_t n)
{
    const blk_fp8_t *b = src;
    for (int64_t i = 0; i < n / QK_FP8; i++, b++) {
        const float d = h2f(b->d);
        for (int j = 0; j < QK_FP8; j++)
            *dst++ = d * quant_e4m3_to_f32(b->e[j]);
    }
}

void quant_fp8_from_f32(void *dst, const float *src, int64_t n)
{
    blk_fp8_t *b = dst;
    for (int64_t i = 0; i < n / QK_FP8; i++, b++, src += QK_FP8) {
        float amax = 0.0f;
        for (int j = 0; j < QK_FP8; j++)
            amax = fabsf(src[j]) > amax ? fabsf(src[j]) : amax;
        b->d = f2h(amax / 448.0f);
        /* Divide by the stored (rounded) scale, so d * e reconstructs the value best. */
        const float d = h2f(b->d);
        for (int j = 0; j < QK_FP8; j++)
            b->e[j] = d != 0.0f ? quant_f32_to_e4m3(src[j] / d) : 0;
    }
}
