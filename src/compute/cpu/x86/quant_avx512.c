/*
 * quant_avx512.c — AVX-512 VNNI rendition of the quantized rows (kernels_impl.h, canonical
 * quantized order): activation rounding, the K/V widening of q8_0 / fp8_e4m3, and the
 * quantized matmul in two shapes that compute the same integers:
 *
 *  - row kernel (decode, few rows): the weights are read in their GGUF layout. For one row
 *    and a tile of 16 outputs, each output's block products are computed in 16 int32 lanes
 *    (vpmaddubsw + vpdpwssd applying the sub-block scales, or vpdpbusd), then one
 *    transposing reduction turns the 16 outputs' lane vectors into one vector whose lane o
 *    is output o's exact block sum S (and M), and the float chain runs in 16 lanes at once
 *    (q8_0 / q4_0: one block of two outputs per vector, a reduction level shorter). Every
 *    row of the call runs against a tile while it is cached, and the next tile of the
 *    range is streamed into L2 meanwhile (pf_tile_t).
 *
 *  - packed kernel (prefill, >= PACK_ROWS rows): a tile of 16 outputs x a piece of the
 *    input is unpacked once into the VNNI layout — for each group of 4 inputs, one zmm
 *    holding those 4 weights of each of the 16 outputs as u8 — with the scales as int32
 *    lanes, then every row multiplies it by broadcasting 4 of its int8 activations per
 *    vpdpbusd. Lane o is output o throughout, so no reduction is needed; the unpack cost
 *    is shared by all rows of the call.
 *
 * Both produce the exact integers of quant_kernels.c and fold them in block order with
 * the same rounded operations, so every output equals the portable row bit for bit, for
 * any number of rows (tests/compute/test_quant_kernels.c).
 *
 * Only runs where kern__x86_has_avx512_vnni(). Pure functions; thread-safe.
 */
#include "compute/cpu/x86/x86_impls.h"

#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#include "compute/quant_blocks.h"

#define TV __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

/* Full unrolling of the packed micro-kernel's row loops (only when optimizing: at -O0 GCC
 * rejects the annotation on loops it does not analyse). */
#ifdef __OPTIMIZE__
#define PK_UNROLL(n) _Pragma(PK_STR(GCC unroll n))
#define PK_STR(x) #x
#else
#define PK_UNROLL(n)
#endif

enum {
    PACK_ROWS = 8,   /* rows from which the packed kernel pays for its unpacking */
    PACK_R = 6,      /* rows per packed micro-kernel step (independent vpdpbusd chains) */
};

/* ---- helpers ------------------------------------------------------------------------------ */

TV INLINE __mmask16 mask16(int n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u); }

TV INLINE float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* One level of the transposing reduction: c = a and b's lanes picked by lo, plus those
 * picked by hi (indices >= 16 name b's lanes). */
TV INLINE __m512i pair_add(__m512i a, __m512i b, __m512i lo, __m512i hi)
{
    return _mm512_add_epi32(_mm512_permutex2var_epi32(a, lo, b), _mm512_permutex2var_epi32(a, hi, b));
}

/* c[i] (i < 8): lanes 0-7 the 8 partial sums of output 2i, lanes 8-15 those of output
 * 2i + 1. Returns the vector whose lane o is output o's total (exact: integer sums). */
TV INLINE __m512i reduce_level1_outputs(const __m512i c[8])
{
    const __m512i l2 = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    const __m512i h2 = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    const __m512i l3 = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29);
    const __m512i h3 = _mm512_setr_epi32(2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
    const __m512i l4 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i h4 = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    __m512i d0 = pair_add(c[0], c[1], l2, h2), d1 = pair_add(c[2], c[3], l2, h2);
    __m512i d2 = pair_add(c[4], c[5], l2, h2), d3 = pair_add(c[6], c[7], l2, h2);
    __m512i e0 = pair_add(d0, d1, l3, h3), e1 = pair_add(d2, d3, l3, h3);
    return pair_add(e0, e1, l4, h4);
}

/* Lane o = the sum of the 16 lanes of v[o]. */
TV INLINE __m512i reduce16x16(const __m512i v[16])
{
    const __m512i l1 = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    const __m512i h1 = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    __m512i c[8];
    for (int i = 0; i < 8; i++)
        c[i] = pair_add(v[2 * i], v[2 * i + 1], l1, h1);
    return reduce_level1_outputs(c);
}

/* The 6-bit scales (sc) and mins (m) of a q4_k / q5_k scales[12], 8 bytes each (byte j =
 * sub-block j; quant_k4_scale_min's unpacking, four sub-blocks at a time). */
INLINE void k4_scales(const uint8_t *s, uint64_t *sc, uint64_t *m)
{
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    *sc = (u0 & 0x3f3f3f3fu) | (uint64_t)((u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u)) << 32;
    *m = (u1 & 0x3f3f3f3fu) | (uint64_t)(((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u)) << 32;
}

/* Shift counts per int16 lane: 0 in the low 256 bits, c in the high 256 bits. */
TV INLINE __m512i shift_hi(int lo, int hi)
{
    return _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16((short)lo), _mm512_set1_epi16((short)hi));
}

/* The 64 q (u8) of chunk g of a q4_k-layout qs: low nibbles of qs[32g..] then high. */
TV INLINE __m512i k4_chunk(const uint8_t *qs, int g)
{
    __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * g)));
    return _mm512_and_si512(_mm512_srlv_epi16(v, shift_hi(0, 4)), _mm512_set1_epi8(0x0f));
}

/* Bit 4 of the 64 q of chunk g of a q5_k block (from qh). */
TV INLINE __m512i k5_high(__m512i qh2, int g)
{
    __m512i b = _mm512_and_si512(_mm512_srlv_epi16(qh2, shift_hi(2 * g, 2 * g + 1)), _mm512_set1_epi8(1));
    return _mm512_slli_epi16(b, 4);
}

/* ---- activation rounding (bit for bit the traits' reference, quant_blocks.c) ---------------- */

/* amax of v (NaN lanes ignored, as the scalar comparisons ignore them). */
TV INLINE __m512 abs_ord(__m512 v)
{
    __mmask16 ord = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
    return _mm512_castsi512_ps(_mm512_maskz_and_epi32(ord, _mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)));
}

/* rint(v) as int32, NaN -> 0, clamped to [lo, hi]. */
TV INLINE __m512i round_clamp16(__m512 v, int lo, int hi)
{
    __mmask16 ord = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
    __m512 r = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_max_ps(_mm512_min_ps(r, _mm512_set1_ps((float)hi)), _mm512_set1_ps((float)lo));
    return _mm512_maskz_cvtps_epi32(ord, r);
}

TV void kern__avx512_from_q8_0(void *dst, const float *src, int n)
{
    blk_q8_0_t *b = dst;
    for (int i = 0; i < n / QK8_0; i++, b++, src += QK8_0) {
        __m512 v0 = _mm512_loadu_ps(src), v1 = _mm512_loadu_ps(src + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(abs_ord(v0), abs_ord(v1)));
        const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        b->d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        const __m512 idv = _mm512_set1_ps(id);
        __m512i q0 = round_clamp16(_mm512_mul_ps(v0, idv), -127, 127);
        __m512i q1 = round_clamp16(_mm512_mul_ps(v1, idv), -127, 127);
        _mm_storeu_si128((__m128i *)b->q, _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(b->q + 16), _mm512_cvtepi32_epi8(q1));
    }
}

TV void kern__avx512_from_q8_k(void *dst, const float *src, int n)
{
    blk_q8_k_t *b = dst;
    for (int i = 0; i < n / QK_K; i++, b++, src += QK_K) {
        __m512 m = _mm512_setzero_ps();
        for (int j = 0; j < QK_K; j += 16)
            m = _mm512_max_ps(m, abs_ord(_mm512_loadu_ps(src + j)));
        const float amax = _mm512_reduce_max_ps(m);
        if (amax == 0.0f) {
            memset(b, 0, sizeof *b);
            continue;
        }
        /* The first element whose |x| is amax gives the sign. */
        float max = 0.0f;
        const __m512 av = _mm512_set1_ps(amax);
        for (int j = 0; j < QK_K; j += 16) {
            __mmask16 hit = _mm512_cmp_ps_mask(abs_ord(_mm512_loadu_ps(src + j)), av, _CMP_EQ_OQ);
            if (hit) {
                max = src[j + __builtin_ctz(hit)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m512 isv = _mm512_set1_ps(iscale);
        for (int j = 0; j < QK_K; j += 16) {
            __m512i q = round_clamp16(_mm512_mul_ps(_mm512_loadu_ps(src + j), isv), -128, 127);
            _mm_storeu_si128((__m128i *)(b->q + j), _mm512_cvtepi32_epi8(q));
            b->bsums[j / 16] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        b->d = 1.0f / iscale;
    }
}

/* ---- K/V rows (attention's tiles) ------------------------------------------------------------- */

TV void kern__avx512_rows_q8_0(float *dst, const void *src, size_t stride, int rows, int n)
{
    for (int r = 0; r < rows; r++) {
        const blk_q8_0_t *b = (const blk_q8_0_t *)((const unsigned char *)src + (size_t)r * stride);
        float *o = dst + (size_t)r * n;
        for (int i = 0; i < n / QK8_0; i++, o += QK8_0) {
            const __m512 d = _mm512_set1_ps(h2f(b[i].d));
            __m128i q0 = _mm_loadu_si128((const __m128i *)b[i].q), q1 = _mm_loadu_si128((const __m128i *)(b[i].q + 16));
            _mm512_storeu_ps(o, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0))));
            _mm512_storeu_ps(o + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1))));
        }
    }
}

/* E4M3 codes -> f32, exactly quant_e4m3_to_f32: (8 + m) 2^(e-10) built from its bits,
 * m 2^-9 for e = 0, NaN for e = 15, m = 7. */
TV INLINE __m512 e4m3_16(__m128i codes)
{
    __m512i c = _mm512_cvtepu8_epi32(codes);
    __m512i e = _mm512_and_si512(_mm512_srli_epi32(c, 3), _mm512_set1_epi32(15));
    __m512i m = _mm512_and_si512(c, _mm512_set1_epi32(7));
    __m512i bits = _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(120)), 23),
                                   _mm512_slli_epi32(m, 20));
    __m512 v = _mm512_castsi512_ps(bits);
    __mmask16 sub = _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512());
    v = _mm512_mask_mul_ps(v, sub, _mm512_cvtepi32_ps(m), _mm512_set1_ps(0x1p-9f));
    __mmask16 nan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(c, _mm512_set1_epi32(0x7f)), _mm512_set1_epi32(0x7f));
    v = _mm512_mask_mov_ps(v, nan, _mm512_set1_ps(__builtin_nanf("")));
    __mmask16 neg = _mm512_test_epi32_mask(c, _mm512_set1_epi32(0x80));
    return _mm512_mask_sub_ps(v, neg, _mm512_setzero_ps(), v);
}

TV void kern__avx512_rows_fp8(float *dst, const void *src, size_t stride, int rows, int n)
{
    for (int r = 0; r < rows; r++) {
        const blk_fp8_t *b = (const blk_fp8_t *)((const unsigned char *)src + (size_t)r * stride);
        float *o = dst + (size_t)r * n;
        for (int i = 0; i < n / QK_FP8; i++, o += QK_FP8) {
            const __m512 d = _mm512_set1_ps(h2f(b[i].d));
            _mm512_storeu_ps(o, _mm512_mul_ps(d, e4m3_16(_mm_loadu_si128((const __m128i *)b[i].e))));
            _mm512_storeu_ps(o + 16, _mm512_mul_ps(d, e4m3_16(_mm_loadu_si128((const __m128i *)(b[i].e + 16)))));
        }
    }
}

/* ---- row kernels: one row, a tile of up to 16 outputs ------------------------------------------ */

/* The 16 weight rows of a tile (missing lanes repeat the last valid row). */
INLINE void tile_rows(const unsigned char *wr[16], const void *w, size_t ldw, int nv)
{
    for (int o = 0; o < 16; o++)
        wr[o] = (const unsigned char *)w + (size_t)(o < nv ? o : nv - 1) * ldw;
}

/*
 * The row kernel's prefetch: a tile's 16 weight rows are contiguous (16 ldw bytes), but the
 * kernel reads them block column by block column, 16 strided streams that the hardware
 * prefetchers do not follow (measured: a 1024 -> 151936 q6_k matvec streamed 6 GB/s on one
 * Zen 5 thread). So while it computes a tile it streams the next tile of its range into L2
 * in one linear pass, a slice per block step (11-17 GB/s; into L1 it gained little, two or
 * more tiles ahead no more). Prefetches only: no value depends on them.
 */
typedef struct {
    const char *p;  /* the next tile's first byte (NULL: none in this range) */
    size_t slice;   /* bytes per block step, whole cache lines */
    size_t step;    /* bytes between two prefetches: 64 times CAIRN_QMM_PF_STRIDE */
    size_t ldw;     /* bytes per weight row (the linear order prefetches row by row) */
    int rows;       /* rows of the next tile */
    const char **cur; /* the stream order's cursor (NULL: the tile order above) */
    const char *end;  /* the range's end: the stream order prefetches nothing past it */
} pf_tile_t;

static const pf_tile_t PF_NONE = {NULL, 0, 64, 0, 0, NULL, NULL};

/*
 * The order a row kernel reads its tile in: "column" block column by block column, the 16
 * outputs of one block at a time, as the reduction consumes them; "linear" output by
 * output, each output's blocks in a row, so the tile is read front to back as the core's
 * own streamers expect, the block products kept in a stack buffer (16 KiB at most) until
 * the reduction and the float chain run in block order. The same integers and the same
 * float operations in the same order: the bits do not depend on it (the tests run both).
 * Default: linear for the k-quants (AMD dev VM, vocab head from DRAM: q6_k 0.88-0.95 of a
 * raw read against 0.44-0.56, q4_k 0.75-0.85 against 0.62-0.73; Q4_K_M decode 1.19x),
 * column for q8_0 / q4_0 (linear was no faster there). On the device's Xeon the two orders
 * decode alike (sessions 6 and 7: Q4_K_M tg128 within that machine's +-15% either way, the
 * 28 layers' matmuls q4_k 13.3-14.3 GB/s in both), so the default is not per CPU.
 * CAIRN_QMM_ORDER=0 (column) or 1 (linear) sets every type, read once per process
 * (docs/PERFORMANCE.md, sessions 6 and 7).
 */
static bool qmm_linear(bool kquant)
{
    static _Atomic int cached = -2;
    int d = atomic_load_explicit(&cached, memory_order_relaxed);
    if (d == -2) {
        d = (int)cairn_knob_int("CAIRN_QMM_ORDER", false, 0, -1, -1, 1);
        atomic_store_explicit(&cached, d, memory_order_relaxed);
    }
    return d < 0 ? kquant : d == 1;
}

/* Lines per prefetch instruction (CAIRN_QMM_PF_STRIDE, 1..8, default 1: every line): a
 * measuring knob for CPUs whose hardware streamer may fetch the lines between (on Intel a
 * software prefetch holds a line fill buffer until its line arrives), read once. */
static size_t pf_step_bytes(void)
{
    static _Atomic int cached = -1;
    int d = atomic_load_explicit(&cached, memory_order_relaxed);
    if (d < 0) {
        d = (int)cairn_knob_int("CAIRN_QMM_PF_STRIDE", false, 0, 1, 1, 8);
        atomic_store_explicit(&cached, d, memory_order_relaxed);
    }
    return (size_t)d * 64;
}

/* How many tiles ahead the row kernel streams (CAIRN_QMM_PF_TILES, 0..4, default 1; 0 turns
 * the prefetch off): a measuring knob for CPUs whose memory wants a longer lead (the
 * device's Xeon), read once per process. Tile o + 16 d is streamed while tile o computes;
 * the first d - 1 tiles after a range's first are not streamed. */
static int pf_tiles(void)
{
    static _Atomic int cached = -1;
    int d = atomic_load_explicit(&cached, memory_order_relaxed);
    if (d < 0) {
        d = (int)cairn_knob_int("CAIRN_QMM_PF_TILES", false, 0, 1, 0, 4);
        atomic_store_explicit(&cached, d, memory_order_relaxed);
    }
    return d;
}

/* Whether a range's first tiles are prefetched when it starts (CAIRN_QMM_PF_FIRST, 0 or 1,
 * default 0), read once per process: a decode matmul is cut into 8 tasks per 2 threads, and
 * the streaming above only covers the tile after the one being computed, so every task's
 * first tile (and, at a lead of d tiles, the d - 1 after it) came from demand misses. On the
 * device's Xeon (session 7) it gave the 28 layers' matmuls 16.0-16.6 GB/s against 13.4-14.5
 * (one run each) but Q4_K_M decode 33.6 against 32.4-34.3 tok/s: off by default. */
static bool pf_first(void)
{
    static _Atomic int cached = -1;
    int d = atomic_load_explicit(&cached, memory_order_relaxed);
    if (d < 0) {
        d = (int)cairn_knob_int("CAIRN_QMM_PF_FIRST", false, 0, 0, 0, 1);
        atomic_store_explicit(&cached, d, memory_order_relaxed);
    }
    return d == 1;
}

/*
 * The stream order of the linear tile order (CAIRN_QMM_PF_AHEAD = D bytes, 0..65536; 0
 * keeps the tile order above; read once per process; default 4096 on Intel CPUs, 0 on
 * others: session 14 measured Q4_K_M tg128 +12% on the device's Xeon and -8 to -15% on an
 * AMD Zen 4, docs/PERFORMANCE.md): instead of
 * the next tile's rows in bursts (a row of the next tile before each row of this one: 9-40
 * lines at once), one cursor per range running D bytes ahead of the bytes the kernel has
 * consumed. Every block an output consumes advances it by the block's size and prefetches
 * (T0) each line that starts in the bytes it passed: one or two lines per block, at the
 * rate the kernel reads, the way bench_llc_stream's "work" section fed a core at 0.9-1.0 of
 * a raw read on the device's Xeon (session 13) where the bursts hold every line fill buffer.
 * The column order keeps the tile scheme (its reads span the whole tile from the first
 * block on; a cursor a tile plus D ahead measured slower, Q8_0 tg128 on both machines:
 * docs/PERFORMANCE.md, session 14). Prefetches only: no value depends on them.
 */
static size_t pf_ahead(void)
{
    static _Atomic int cached = -1;
    int d = atomic_load_explicit(&cached, memory_order_relaxed);
    if (d < 0) {
        __builtin_cpu_init();
        const int def = __builtin_cpu_is("intel") ? 4096 : 0;
        d = (int)cairn_knob_int("CAIRN_QMM_PF_AHEAD", false, 0, def, 0, 65536);
        atomic_store_explicit(&cached, d, memory_order_relaxed);
    }
    return (size_t)d;
}

/* The stream order's advance by n consumed bytes (a no-op in the tile order). */
TV INLINE void pf_adv(const pf_tile_t *t, size_t n)
{
    if (!t->cur)
        return;
    const char *u = *t->cur, *v = u + n;
    *t->cur = v;
    if (v > t->end)
        v = t->end;
    for (const char *l = (const char *)(((uintptr_t)u + 63) & ~(uintptr_t)63); l < v; l += 64)
        _mm_prefetch(l, _MM_HINT_T0);
}

/* At the start of range [o0, o1), read in the linear order or not: with CAIRN_QMM_PF_FIRST,
 * the bytes no prefetch will cover (the stream order's first D; the tile order's tiles
 * [o0, o0 + 16 max(d, 1)), which pf_next_tile's lead of d tiles will not stream), in one
 * linear pass. Then the stream order's cursor for the range (NULL: the tile order). */
TV INLINE const char *pf_range_start(const void *w, size_t ldw, int o0, int o1, bool linear)
{
    if (o0 >= o1)
        return NULL;
    const char *p = (const char *)w + (size_t)o0 * ldw, *e = (const char *)w + (size_t)o1 * ldw;
    const size_t ahead = linear ? pf_ahead() : 0;
    if (pf_first()) {
        const int d = pf_tiles() > 1 ? pf_tiles() : 1;
        const size_t len = ahead ? ahead : (size_t)(o1 - o0 < 16 * d ? o1 - o0 : 16 * d) * ldw;
        const size_t s = ahead ? 64 : pf_step_bytes();
        for (const char *l = p; l < p + len && l < e; l += s) {
            if (ahead)
                _mm_prefetch(l, _MM_HINT_T0);
            else
                _mm_prefetch(l, _MM_HINT_T1);
        }
    }
    return ahead ? p + ahead : NULL;
}

/* The prefetch of the tile at o of range [o, o1): the stream order's (cursor *cur) when
 * cur holds one, else the next tile's. */
INLINE pf_tile_t pf_next_tile(const void *w, size_t ldw, int o, int o1, int nb, const char **cur)
{
    pf_tile_t t = {NULL, 0, 64, ldw, 0, NULL, NULL};
    if (*cur) {
        t.cur = cur;
        t.end = (const char *)w + (size_t)o1 * ldw;
        return t;
    }
    const int d = pf_tiles(), first = o + 16 * d;
    const int n = o1 - first < 16 ? o1 - first : 16;
    if (d == 0 || n <= 0 || nb <= 0)
        return t;
    t.p = (const char *)w + (size_t)first * ldw;
    t.slice = (((size_t)n * ldw + (size_t)nb - 1) / (size_t)nb + 63) & ~(size_t)63;
    t.step = pf_step_bytes();
    t.rows = n;
    return t;
}

TV INLINE void pf_step(const pf_tile_t *t, int b)
{
    if (!t->p)
        return;
    const char *p = t->p + (size_t)b * t->slice;
    size_t l = 0;
    const size_t s = t->step;
    for (; l + 4 * s <= t->slice; l += 4 * s) { /* four per turn: the loop's own instructions were */
        _mm_prefetch(p + l, _MM_HINT_T1);     /* a tenth of the q4_k kernel's */
        _mm_prefetch(p + l + s, _MM_HINT_T1);
        _mm_prefetch(p + l + 2 * s, _MM_HINT_T1);
        _mm_prefetch(p + l + 3 * s, _MM_HINT_T1);
    }
    for (; l < t->slice; l += s)
        _mm_prefetch(p + l, _MM_HINT_T1);
}

/* The linear order's prefetch: bytes [off, off + len) of the next tile's row o. */
TV INLINE void pf_row(const pf_tile_t *t, int o, size_t off, size_t len)
{
    if (!t->p || o >= t->rows)
        return;
    const char *a = t->p + (size_t)o * t->ldw + off;
    const char *p = (const char *)((uintptr_t)a & ~(uintptr_t)63), *e = a + len;
    for (; p + 4 * t->step <= e; p += 4 * t->step) {
        _mm_prefetch(p, _MM_HINT_T1);
        _mm_prefetch(p + t->step, _MM_HINT_T1);
        _mm_prefetch(p + 2 * t->step, _MM_HINT_T1);
        _mm_prefetch(p + 3 * t->step, _MM_HINT_T1);
    }
    for (; p < e; p += t->step)
        _mm_prefetch(p, _MM_HINT_T1);
}

enum { LIN_BLOCKS = 16 }; /* blocks per piece of the linear order (its buffers: 16 KiB) */

TV INLINE __m512 acc_start(const float *y, int nv, bool acc)
{
    return acc ? _mm512_maskz_loadu_ps(mask16(nv), y) : _mm512_setzero_ps();
}

TV INLINE __m512 f16x16(const uint16_t h[16]) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h)); }

TV INLINE __m512i pair256(const int8_t *a, const int8_t *b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* vpshufb controls for row_q4_k, against the 8 scale bytes broadcast to every 64-bit lane:
 * int16 lanes of the low 256 bits take scale byte j0, of the high 256 bits j1, zero-extended
 * (control 0x80 zeroes the high byte). */
TV INLINE __m512i k4_pick2(int j0, int j1)
{
    const __m512i lo = _mm512_set1_epi16((short)(j0 | 0x80 << 8));
    const __m512i hi = _mm512_set1_epi16((short)(j1 | 0x80 << 8));
    return _mm512_mask_blend_epi16(0xffff0000u, lo, hi);
}

/*
 * The mins term of a q4_k / q5_k super-block for 16 outputs at once: lane o =
 * sum_j m[o][j] (bsums[2j] + bsums[2j + 1]), exact. mins[o] holds output o's 8 six-bit
 * mins (u8), so a zmm of mins is 8 outputs x two dwords (sub-blocks 0-3, 4-7). The
 * activation's sub-block sums s_j (|s_j| <= 4096) are split as s_j = 128 a_j + b_j with
 * a_j = s_j >> 7 and b_j = s_j & 127, both int8, so two vpdpbusd (u8 mins x s8) give each
 * dword's m . s; one pairwise add then puts output o in lane o. Replaces a widening and a
 * 256-bit multiply per output plus a 16 x 8 transposing reduction.
 */
TV INLINE __m512i k4_mins16(const uint64_t mins[16], const int16_t bsums[16])
{
    const __m256i s = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bsums), _mm256_set1_epi16(1));
    const __m512i a = _mm512_broadcastq_epi64(_mm256_cvtepi32_epi8(_mm256_srai_epi32(s, 7)));
    const __m512i b = _mm512_broadcastq_epi64(_mm256_cvtepi32_epi8(_mm256_and_si256(s, _mm256_set1_epi32(127))));
    const __m512i m0 = _mm512_loadu_si512(mins), m1 = _mm512_loadu_si512(mins + 8);
    __m512i t0 = _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), m0, a), 7);
    __m512i t1 = _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), m1, a), 7);
    t0 = _mm512_dpbusd_epi32(t0, m0, b);
    t1 = _mm512_dpbusd_epi32(t1, m1, b);
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    return pair_add(t0, t1, ev, od);
}

/*
 * q4_k / q5_k, one row against a tile of 16 outputs. The 128 qs bytes are read as two
 * 64-byte halves h: their low nibbles are sub-blocks 4h and 4h + 2 (256-bit halves), their
 * high nibbles 4h + 1 and 4h + 3, so the activations are regrouped once per block to match
 * (xa, xb) and each output costs two loads, the nibble masks, one broadcast of its 8 scale
 * bytes and four vpshufb picking them per super-block; the mins term runs for the 16
 * outputs together (k4_mins16). q5 is a constant once inlined (row_q4_k, row_q5_k).
 */
/* The activation of super-block xb regrouped to match the two 64-byte halves of qs. */
TV INLINE void k4_xgroup(__m512i xg[4], const blk_q8_k_t *xb)
{
    for (int h = 0; h < 2; h++) {
        xg[2 * h] = pair256(xb->q + 128 * h, xb->q + 128 * h + 64);
        xg[2 * h + 1] = pair256(xb->q + 128 * h + 32, xb->q + 128 * h + 96);
    }
}

/* One output's super-block blk against xg: the lane vector of its scaled sum S, its mins
 * (*mins) and d | dmin << 16 (*dd). */
TV INLINE __m512i k4_block(const unsigned char *blk, const __m512i xg[4], const bool q5, uint64_t *mins, uint32_t *dd)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(1);
    const __m512i pa[2] = {k4_pick2(0, 2), k4_pick2(4, 6)}, pb[2] = {k4_pick2(1, 3), k4_pick2(5, 7)};
    memcpy(dd, blk, 4);
    uint64_t sc8;
    k4_scales(blk + 4, &sc8, mins);
    const __m512i scb = _mm512_set1_epi64((long long)sc8);
    const uint8_t *qs = q5 ? ((const blk_q5_k_t *)blk)->qs : ((const blk_q4_k_t *)blk)->qs;
    __m512i qh2 = _mm512_setzero_si512();
    if (q5)
        qh2 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)((const blk_q5_k_t *)blk)->qh));
    __m512i s = _mm512_setzero_si512();
    for (int h = 0; h < 2; h++) {
        const __m512i v = _mm512_loadu_si512(qs + 64 * h);
        __m512i qa = _mm512_and_si512(v, m4), qb = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if (q5) { /* bit 4 of sub-block j is bit j of qh[l] */
            qa = _mm512_or_si512(qa, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh2, shift_hi(4 * h, 4 * h + 2)), one), 4));
            qb = _mm512_or_si512(qb, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh2, shift_hi(4 * h + 1, 4 * h + 3)), one), 4));
        }
        s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(qa, xg[2 * h]), _mm512_shuffle_epi8(scb, pa[h]));
        s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(qb, xg[2 * h + 1]), _mm512_shuffle_epi8(scb, pb[h]));
    }
    return s;
}

/* The float chain of one super-block of 16 outputs: the S sums, then the mins term. */
TV INLINE __m512 k4_fold(__m512 accv, const __m512i S[16], const uint64_t mins[16], const uint32_t dd[16],
                         const blk_q8_k_t *xb)
{
    const __m512i ddv = _mm512_loadu_si512(dd);
    const __m512 dx = _mm512_set1_ps(xb->d);
    const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(ddv));
    const __m512 dm = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(ddv, 16)));
    accv = _mm512_fmadd_ps(_mm512_cvtepi32_ps(reduce16x16(S)), _mm512_mul_ps(dw, dx), accv);
    return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(k4_mins16(mins, xb->bsums)), _mm512_mul_ps(dm, dx), accv);
}

/*
 * q4_k / q5_k, one row against a tile of 16 outputs. The 128 qs bytes are read as two
 * 64-byte halves h: their low nibbles are sub-blocks 4h and 4h + 2 (256-bit halves), their
 * high nibbles 4h + 1 and 4h + 3, so the activations are regrouped once per block to match
 * (k4_xgroup) and each output costs two loads, the nibble masks, one broadcast of its 8
 * scale bytes and four vpshufb picking them per super-block; the mins term runs for the 16
 * outputs together (k4_mins16). q5 is a constant once inlined (row_q4_k, row_q5_k). The
 * tile is read in either order (qmm_linear), same operations.
 */
TV INLINE void row_k4_body(float *y, const blk_q8_k_t *x, int nb, const void *w, size_t ldw, int nv, bool acc,
                           const bool q5, const pf_tile_t *pf)
{
    const unsigned char *wr[16];
    tile_rows(wr, w, ldw, nv);
    __m512 accv = acc_start(y, nv, acc);
    const size_t bsz = q5 ? sizeof(blk_q5_k_t) : sizeof(blk_q4_k_t);
    if (!qmm_linear(true)) {
        for (int b = 0; b < nb; b++) {
            pf_step(pf, b);
            __m512i xg[4], S[16];
            k4_xgroup(xg, x + b);
            _Alignas(64) uint64_t mins[16];
            _Alignas(64) uint32_t dd[16];
            for (int o = 0; o < 16; o++) {
                S[o] = k4_block(wr[o] + (size_t)b * bsz, xg, q5, &mins[o], &dd[o]);
                pf_adv(pf, bsz);
            }
            accv = k4_fold(accv, S, mins, dd, x + b);
        }
    } else {
        for (int b0 = 0; b0 < nb; b0 += LIN_BLOCKS) {
            const int nbc = nb - b0 < LIN_BLOCKS ? nb - b0 : LIN_BLOCKS;
            _Alignas(64) __m512i xg[LIN_BLOCKS][4], S[LIN_BLOCKS][16];
            _Alignas(64) uint64_t mins[LIN_BLOCKS][16];
            _Alignas(64) uint32_t dd[LIN_BLOCKS][16];
            for (int k = 0; k < nbc; k++)
                k4_xgroup(xg[k], x + b0 + k);
            for (int o = 0; o < 16; o++) {
                pf_row(pf, o, (size_t)b0 * bsz, (size_t)nbc * bsz);
                const unsigned char *row = wr[o] + (size_t)b0 * bsz;
                for (int k = 0; k < nbc; k++) {
                    S[k][o] = k4_block(row + (size_t)k * bsz, xg[k], q5, &mins[k][o], &dd[k][o]);
                    pf_adv(pf, bsz);
                }
            }
            for (int k = 0; k < nbc; k++)
                accv = k4_fold(accv, S[k], mins[k], dd[k], x + b0 + k);
        }
    }
    _mm512_mask_storeu_ps(y, mask16(nv), accv);
}

TV static void row_q4_k(float *y, const blk_q8_k_t *x, int nb, const void *w, size_t ldw, int nv, bool acc,
                        const pf_tile_t *pf)
{
    row_k4_body(y, x, nb, w, ldw, nv, acc, false, pf);
}

TV static void row_q5_k(float *y, const blk_q8_k_t *x, int nb, const void *w, size_t ldw, int nv, bool acc,
                        const pf_tile_t *pf)
{
    row_k4_body(y, x, nb, w, ldw, nv, acc, true, pf);
}

/* int16 lane k < 32 of chunk c (64 elements) of a q6_k block takes scale 4c + k / 8. */
TV INLINE __m512i k6_scale_idx(int c)
{
    return _mm512_mask_blend_epi16(0xffff0000u,
                                   _mm512_mask_blend_epi16(0xff00ff00u, _mm512_set1_epi16((short)(4 * c)),
                                                           _mm512_set1_epi16((short)(4 * c + 1))),
                                   _mm512_mask_blend_epi16(0xff00ff00u, _mm512_set1_epi16((short)(4 * c + 2)),
                                                           _mm512_set1_epi16((short)(4 * c + 3))));
}

/* The two chunks (64 q each, u8 0..63) of half h of a q6_k block. */
TV INLINE void k6_chunks(const blk_q6_k_t *blk, int h, __m512i *qa, __m512i *qb)
{
    const __m512i ql = _mm512_loadu_si512(blk->ql + 64 * h);
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk->qh + 32 * h)));
    const __m512i qh2 = _mm512_srlv_epi16(qh, shift_hi(0, 2));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    *qa = _mm512_or_si512(_mm512_and_si512(ql, m4),
                          _mm512_slli_epi16(_mm512_and_si512(qh2, _mm512_set1_epi8(0x03)), 4));
    *qb = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(qh2, _mm512_set1_epi8(0x30)));
}

/* One output's q6_k super-block against xb: the lane vector of its sum S (the -32 of
 * every q included). */
TV INLINE __m512i k6_block(const blk_q6_k_t *blk, const blk_q8_k_t *xb)
{
    const __m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)blk->scales));
    const __m512i scz = _mm512_zextsi256_si512(sc16);
    /* The -32 of every q: -32 sum_j sc_j bsum_j, exact in int32. */
    __m512i s = _mm512_zextsi256_si512(_mm256_madd_epi16(_mm256_mullo_epi16(sc16, _mm256_set1_epi16(-32)), bs));
    for (int h = 0; h < 2; h++) {
        __m512i qa, qb;
        k6_chunks(blk, h, &qa, &qb);
        __m512i pa = _mm512_maddubs_epi16(qa, _mm512_loadu_si512(xb->q + 128 * h));
        __m512i pb = _mm512_maddubs_epi16(qb, _mm512_loadu_si512(xb->q + 128 * h + 64));
        s = _mm512_dpwssd_epi32(s, pa, _mm512_permutexvar_epi16(k6_scale_idx(2 * h), scz));
        s = _mm512_dpwssd_epi32(s, pb, _mm512_permutexvar_epi16(k6_scale_idx(2 * h + 1), scz));
    }
    return s;
}

TV static void row_q6_k(float *y, const blk_q8_k_t *x, int nb, const void *w, size_t ldw, int nv, bool acc,
                        const pf_tile_t *pf)
{
    const unsigned char *wr[16];
    tile_rows(wr, w, ldw, nv);
    __m512 accv = acc_start(y, nv, acc);
    if (!qmm_linear(true)) {
        for (int b = 0; b < nb; b++) {
            pf_step(pf, b);
            __m512i S[16];
            _Alignas(32) uint16_t dw[16];
            for (int o = 0; o < 16; o++) {
                const blk_q6_k_t *blk = (const blk_q6_k_t *)wr[o] + b;
                dw[o] = blk->d;
                S[o] = k6_block(blk, x + b);
                pf_adv(pf, sizeof(blk_q6_k_t));
            }
            accv = _mm512_fmadd_ps(_mm512_cvtepi32_ps(reduce16x16(S)), _mm512_mul_ps(f16x16(dw), _mm512_set1_ps(x[b].d)),
                                   accv);
        }
    } else {
        for (int b0 = 0; b0 < nb; b0 += LIN_BLOCKS) {
            const int nbc = nb - b0 < LIN_BLOCKS ? nb - b0 : LIN_BLOCKS;
            _Alignas(64) __m512i S[LIN_BLOCKS][16];
            _Alignas(32) uint16_t dw[LIN_BLOCKS][16];
            for (int o = 0; o < 16; o++) {
                pf_row(pf, o, (size_t)b0 * sizeof(blk_q6_k_t), (size_t)nbc * sizeof(blk_q6_k_t));
                const blk_q6_k_t *row = (const blk_q6_k_t *)wr[o] + b0;
                for (int k = 0; k < nbc; k++) {
                    dw[k][o] = row[k].d;
                    S[k][o] = k6_block(row + k, x + b0 + k);
                    pf_adv(pf, sizeof(blk_q6_k_t));
                }
            }
            for (int k = 0; k < nbc; k++)
                accv = _mm512_fmadd_ps(_mm512_cvtepi32_ps(reduce16x16(S[k])),
                                       _mm512_mul_ps(f16x16(dw[k]), _mm512_set1_ps(x[b0 + k].d)), accv);
        }
    }
    _mm512_mask_storeu_ps(y, mask16(nv), accv);
}

/* The 64 unsigned q (0..15) of q4_0 blocks b0, b1: [b0 low, b0 high, b1 low, b1 high]. */
TV INLINE __m512i q4_0_pair(const blk_q4_0_t *b0, const blk_q4_0_t *b1)
{
    __m128i l0 = _mm_loadu_si128((const __m128i *)b0->qs), l1 = _mm_loadu_si128((const __m128i *)b1->qs);
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(l0, l0)), _mm256_set_m128i(l1, l1), 1);
    const __m512i cnt = _mm512_setr_epi64(0, 0, 0x0004000400040004ll, 0x0004000400040004ll, 0, 0,
                                          0x0004000400040004ll, 0x0004000400040004ll);
    return _mm512_and_si512(_mm512_srlv_epi16(v, cnt), _mm512_set1_epi8(0x0f));
}

/* One block of outputs pa and pb (rows, at block b) against x's broadcast block xv: lanes 0-7
 * output pa's partial sums of sum (q) x with the weights unsigned (q4_0's q, q8_0's w + 128),
 * lanes 8-15 output pb's; their d to da[0], da[1]. */
TV INLINE __m512i b32_block(const unsigned char *pa, const unsigned char *pb, __m512i xv, const bool q4,
                            uint16_t da[2])
{
    const __m512i k80 = _mm512_set1_epi8((char)0x80);
    memcpy(&da[0], pa, 2); /* d first in both layouts */
    memcpy(&da[1], pb, 2);
    const __m512i wv = q4 ? q4_0_pair((const blk_q4_0_t *)pa, (const blk_q4_0_t *)pb)
                          : _mm512_xor_si512(pair256(((const blk_q8_0_t *)pa)->q, ((const blk_q8_0_t *)pb)->q), k80);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xv);
}

/* The float chain of block b for 16 outputs: S = the reduced sums less off times x's block
 * sum, acc = fma((float)S, dw dx, acc). */
TV INLINE __m512 b32_fold(__m512 accv, const __m512i c[8], const uint16_t d[16], const blk_q8_0_t *xb, int32_t xs,
                          int off)
{
    const __m512i sa = _mm512_sub_epi32(reduce_level1_outputs(c), _mm512_set1_epi32(off * xs));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sa), _mm512_mul_ps(f16x16(d), _mm512_set1_ps(h2f(xb->d))), accv);
}

/* q8_0 and q4_0 weights: blocks of 32, two per 512-bit step (one block of two outputs per
 * vector: lanes 0-7 output 2i, 8-15 output 2i + 1, the offset times x's block sum
 * subtracted after the reduction; one reduction level fewer than a pair of blocks of one
 * output). The tile is read in either order (qmm_linear), same operations. */
TV INLINE void row_b32(float *y, const blk_q8_0_t *x, const int32_t *xsum, int nb, const void *w, size_t ldw,
                       int nv, bool acc, bool q4, const pf_tile_t *pf)
{
    const unsigned char *wr[16];
    tile_rows(wr, w, ldw, nv);
    __m512 accv = acc_start(y, nv, acc);
    const size_t bsz = q4 ? sizeof(blk_q4_0_t) : sizeof(blk_q8_0_t);
    const int off = q4 ? 8 : 128; /* the unsigned weights' offset: sum (q) x = sum w x + off sum x */
    if (!qmm_linear(false)) {
        for (int b = 0; b < nb; b += 2) {
            pf_step(pf, b / 2);
            const bool two = b + 1 < nb; /* an odd last block runs alone */
            const __m512i x0 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x[b].q));
            const __m512i x1v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x[two ? b + 1 : b].q));
            _Alignas(32) uint16_t da[16], db[16];
            __m512i ca[8], cb[8];
            for (int i = 0; i < 8; i++) {
                const unsigned char *pa = wr[2 * i] + (size_t)b * bsz, *pb = wr[2 * i + 1] + (size_t)b * bsz;
                ca[i] = b32_block(pa, pb, x0, q4, &da[2 * i]);
                pf_adv(pf, 2 * bsz);
                if (two) {
                    cb[i] = b32_block(pa + bsz, pb + bsz, x1v, q4, &db[2 * i]);
                    pf_adv(pf, 2 * bsz);
                }
            }
            accv = b32_fold(accv, ca, da, &x[b], xsum[b], off);
            if (two)
                accv = b32_fold(accv, cb, db, &x[b + 1], xsum[b + 1], off);
        }
    } else {
        enum { LIN_B32 = 2 * LIN_BLOCKS }; /* blocks per piece: 32 x 8 vectors, 16 KiB */
        for (int b0 = 0; b0 < nb; b0 += LIN_B32) {
            const int nbc = nb - b0 < LIN_B32 ? nb - b0 : LIN_B32;
            _Alignas(64) __m512i xv[LIN_B32], c[LIN_B32][8];
            _Alignas(32) uint16_t d[LIN_B32][16];
            for (int k = 0; k < nbc; k++)
                xv[k] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x[b0 + k].q));
            for (int i = 0; i < 8; i++) {
                pf_row(pf, 2 * i, (size_t)b0 * bsz, (size_t)nbc * bsz);
                pf_row(pf, 2 * i + 1, (size_t)b0 * bsz, (size_t)nbc * bsz);
                const unsigned char *pa = wr[2 * i] + (size_t)b0 * bsz, *pb = wr[2 * i + 1] + (size_t)b0 * bsz;
                for (int k = 0; k < nbc; k++) {
                    c[k][i] = b32_block(pa + (size_t)k * bsz, pb + (size_t)k * bsz, xv[k], q4, &d[k][2 * i]);
                    pf_adv(pf, 2 * bsz);
                }
            }
            for (int k = 0; k < nbc; k++)
                accv = b32_fold(accv, c[k], d[k], &x[b0 + k], xsum[b0 + k], off);
        }
    }
    _mm512_mask_storeu_ps(y, mask16(nv), accv);
}

/* ---- packed kernels: a tile of 16 outputs unpacked once, every row against it ----------------- */

/*
 * Packed tile of one weight block (k-quant super-block or b32 block) for 16 outputs:
 *   q[g]:  lane o = the 4 u8 weights 4g..4g+3 of output o (vpdpbusd's unsigned operand);
 *   sc[j]: lane o = output o's integer scale of sub-block j (k-quants);
 *   mp[p]: lane o = an int16 pair multiplying the activation bsums pair p (q4_k / q5_k:
 *          (m_p, m_p), the mins; q6_k: (sc_2p, sc_2p+1), the -32 offset's scales);
 *   d, dmin: lane o = the block's scales as f32.
 */
typedef struct {
    __m512i q[64];
    __m512i sc[16];
    __m512i mp[8];
    __m512 d, dmin;
} pk_block_t;

enum { PK_BLOCKS = 4 }; /* k-quant super-blocks per packed piece (~22 KiB: stays in L1) */

/* Gathers lane o = 32-bit word `word` of 16 records `stride` bytes apart. */
TV INLINE __m512i gather_words(const void *base, int stride_words, int word)
{
    const __m512i idx = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                            _mm512_set1_epi32(stride_words)),
                                         _mm512_set1_epi32(word));
    return _mm512_i32gather_epi32(idx, base, 4);
}

/* Unpacks super-block b of the 16 rows wr into pk (q4_k, q5_k or q6_k). */
TV static void pack_k(pk_block_t *pk, const unsigned char *const wr[16], int b, cairn_dtype_t t)
{
    _Alignas(64) uint8_t q[16][256];
    _Alignas(64) int32_t sc[16][16];
    _Alignas(64) int32_t mp[16][8];
    _Alignas(32) uint16_t d[16], dm[16];
    for (int o = 0; o < 16; o++) {
        if (t == CAIRN_DTYPE_Q6_K) {
            const blk_q6_k_t *blk = (const blk_q6_k_t *)wr[o] + b;
            for (int h = 0; h < 2; h++) {
                __m512i qa, qb;
                k6_chunks(blk, h, &qa, &qb);
                _mm512_store_si512(q[o] + 128 * h, qa);
                _mm512_store_si512(q[o] + 128 * h + 64, qb);
            }
            for (int j = 0; j < 16; j++)
                sc[o][j] = blk->scales[j];
            for (int p = 0; p < 8; p++)
                mp[o][p] = (int32_t)((uint32_t)(uint16_t)blk->scales[2 * p] | (uint32_t)(uint16_t)blk->scales[2 * p + 1] << 16);
            d[o] = blk->d;
            dm[o] = 0;
            continue;
        }
        const bool q5 = t == CAIRN_DTYPE_Q5_K;
        const unsigned char *blk = wr[o] + (size_t)b * (q5 ? sizeof(blk_q5_k_t) : sizeof(blk_q4_k_t));
        const uint8_t *qs = q5 ? ((const blk_q5_k_t *)blk)->qs : ((const blk_q4_k_t *)blk)->qs;
        __m512i qh2 = _mm512_setzero_si512();
        if (q5)
            qh2 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)((const blk_q5_k_t *)blk)->qh));
        for (int g = 0; g < 4; g++) {
            __m512i v = k4_chunk(qs, g);
            if (q5)
                v = _mm512_or_si512(v, k5_high(qh2, g));
            _mm512_store_si512(q[o] + 64 * g, v);
        }
        uint64_t sc8, m8;
        k4_scales(blk + 4, &sc8, &m8);
        for (int j = 0; j < 8; j++) {
            sc[o][j] = (int32_t)((sc8 >> (8 * j)) & 63);
            uint32_t m = (uint32_t)((m8 >> (8 * j)) & 63);
            mp[o][j] = (int32_t)(m | m << 16);
        }
        memcpy(&d[o], blk, 2);
        memcpy(&dm[o], blk + 2, 2);
    }
    for (int g = 0; g < 64; g++)
        pk->q[g] = gather_words(q, 64, g);
    const int nsc = t == CAIRN_DTYPE_Q6_K ? 16 : 8;
    for (int j = 0; j < nsc; j++)
        pk->sc[j] = gather_words(sc, 16, j);
    for (int p = 0; p < 8; p++)
        pk->mp[p] = gather_words(mp, 8, p);
    pk->d = f16x16(d);
    pk->dmin = f16x16(dm);
}

/* R rows (a constant once inlined) against one packed k-quant super-block: the integer
 * sums, then the float chain of each row's 16 outputs (acc[r]). */
TV INLINE void pk_rows_k_n(__m512 *acc, const pk_block_t *pk, const blk_q8_k_t *const *xr, const int R, const bool q6)
{
    __m512i S[PACK_R];
    PK_UNROLL(6)
    for (int r = 0; r < R; r++)
        S[r] = _mm512_setzero_si512();
    const int sub = q6 ? 16 : 32, nsub = 256 / sub;
    for (int j = 0; j < nsub; j++) {
        __m512i t[PACK_R];
    PK_UNROLL(6)
    for (int r = 0; r < R; r++)
            t[r] = _mm512_setzero_si512();
    PK_UNROLL(8)
        for (int g = j * sub / 4; g < (j + 1) * sub / 4; g++) {
            const __m512i wq = _mm512_load_si512(&pk->q[g]);
    PK_UNROLL(6)
    for (int r = 0; r < R; r++) {
                int32_t x4;
                memcpy(&x4, xr[r]->q + 4 * g, 4);
                t[r] = _mm512_dpbusd_epi32(t[r], wq, _mm512_set1_epi32(x4));
            }
        }
        const __m512i scj = _mm512_load_si512(&pk->sc[j]);
    PK_UNROLL(6)
    for (int r = 0; r < R; r++)
            S[r] = _mm512_add_epi32(S[r], _mm512_mullo_epi32(t[r], scj));
    }
    PK_UNROLL(6)
    for (int r = 0; r < R; r++) {
        __m512i M = _mm512_setzero_si512();
    PK_UNROLL(8)
        for (int p = 0; p < 8; p++) {
            int32_t bp;
            memcpy(&bp, &xr[r]->bsums[2 * p], 4);
            M = _mm512_dpwssd_epi32(M, _mm512_load_si512(&pk->mp[p]), _mm512_set1_epi32(bp));
        }
        const __m512 dx = _mm512_set1_ps(xr[r]->d);
        if (q6) {
            S[r] = _mm512_sub_epi32(S[r], _mm512_slli_epi32(M, 5)); /* the -32 of every q */
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[r]), _mm512_mul_ps(pk->d, dx), acc[r]);
        } else {
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[r]), _mm512_mul_ps(pk->d, dx), acc[r]);
            acc[r] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(pk->dmin, dx), acc[r]);
        }
    }
}

/* One compiled body per (row count, q6): constant trip counts keep t[] and S[] in registers. */
#define PK_K_FN(R)                                                                                     \
    TV static void pk_rows_k_##R(__m512 *acc, const pk_block_t *pk, const blk_q8_k_t *const *xr, bool q6) \
    {                                                                                                  \
        if (q6)                                                                                        \
            pk_rows_k_n(acc, pk, xr, R, true);                                                         \
        else                                                                                           \
            pk_rows_k_n(acc, pk, xr, R, false);                                                        \
    }
PK_K_FN(1)
PK_K_FN(2)
PK_K_FN(3)
PK_K_FN(4)
PK_K_FN(5)
PK_K_FN(6)

TV static void pk_rows_k(__m512 *acc, const pk_block_t *pk, const blk_q8_k_t *const *xr, int R, bool q6)
{
    switch (R) {
    case 1: pk_rows_k_1(acc, pk, xr, q6); break;
    case 2: pk_rows_k_2(acc, pk, xr, q6); break;
    case 3: pk_rows_k_3(acc, pk, xr, q6); break;
    case 4: pk_rows_k_4(acc, pk, xr, q6); break;
    case 5: pk_rows_k_5(acc, pk, xr, q6); break;
    default: pk_rows_k_6(acc, pk, xr, q6); break;
    }
}

TV static void packed_k(float *y, int ldy, const void *xq, size_t ldq, int rows, int n, const void *w, size_t ldw,
                        int o0, int o1, bool acc, cairn_dtype_t t)
{
    _Alignas(64) pk_block_t pk[PK_BLOCKS];
    const int nb = n / QK_K;
    const bool q6 = t == CAIRN_DTYPE_Q6_K;
    for (int o = o0; o < o1; o += 16) {
        const int nv = o1 - o < 16 ? o1 - o : 16;
        const unsigned char *wr[16];
        tile_rows(wr, (const unsigned char *)w + (size_t)o * ldw, ldw, nv);
        for (int b0 = 0; b0 < nb; b0 += PK_BLOCKS) {
            const int nbk = nb - b0 < PK_BLOCKS ? nb - b0 : PK_BLOCKS;
            for (int k = 0; k < nbk; k++)
                pack_k(&pk[k], wr, b0 + k, t);
            const bool from_y = acc || b0 > 0;
            for (int r0 = 0; r0 < rows; r0 += PACK_R) {
                const int R = rows - r0 < PACK_R ? rows - r0 : PACK_R;
                __m512 av[PACK_R];
                const blk_q8_k_t *xr[PACK_R];
                for (int r = 0; r < PACK_R; r++) {
                    int rr = r < R ? r0 + r : r0;
                    av[r] = acc_start(y + (size_t)rr * ldy + o, nv, from_y);
                    xr[r] = (const blk_q8_k_t *)((const unsigned char *)xq + (size_t)rr * ldq) + b0;
                }
                for (int k = 0; k < nbk; k++) {
                    const blk_q8_k_t *xk[PACK_R];
                    for (int r = 0; r < PACK_R; r++)
                        xk[r] = xr[r] + k;
                    pk_rows_k(av, &pk[k], xk, R, q6);
                }
                for (int r = 0; r < R; r++)
                    _mm512_mask_storeu_ps(y + (size_t)(r0 + r) * ldy + o, mask16(nv), av[r]);
            }
        }
    }
}

/* b32 types (q8_0, q4_0): a packed block is q[0..8) and d; pieces of PKB blocks. */
enum { PKB = 32 };

TV static void pack_b32(pk_block_t *pk, const unsigned char *const wr[16], int b, bool q4)
{
    _Alignas(64) uint8_t q[16][32];
    _Alignas(32) uint16_t d[16];
    for (int o = 0; o < 16; o++) {
        if (q4) {
            const blk_q4_0_t *blk = (const blk_q4_0_t *)wr[o] + b;
            __m128i l = _mm_loadu_si128((const __m128i *)blk->qs), m4 = _mm_set1_epi8(0x0f);
            _mm_store_si128((__m128i *)q[o], _mm_and_si128(l, m4));
            _mm_store_si128((__m128i *)(q[o] + 16), _mm_and_si128(_mm_srli_epi16(l, 4), m4));
            d[o] = blk->d;
        } else {
            const blk_q8_0_t *blk = (const blk_q8_0_t *)wr[o] + b;
            _mm256_store_si256((__m256i *)q[o], _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)blk->q),
                                                                  _mm256_set1_epi8((char)0x80))); /* w + 128 */
            d[o] = blk->d;
        }
    }
    for (int g = 0; g < 8; g++)
        pk->q[g] = gather_words(q, 8, g);
    pk->d = f16x16(d);
}

/* Packed b32 blocks use pk_block_t's first 8 q and d only. */
typedef struct {
    __m512i q[8];
    __m512 d;
} pkb_t;

/* R rows (a constant once inlined) against one packed b32 block: S = sum (w + off) x
 * - off sum x, exact, then acc = fma((float)S, dw * dx, acc) per row. */
TV INLINE void pk_rows_b32_n(__m512 *acc, const pkb_t *pk, const blk_q8_0_t *const *xr, const int32_t *const *sr,
                             const int off, const int R)
{
    __m512i t[PACK_R];
    PK_UNROLL(6)
    for (int r = 0; r < R; r++)
        t[r] = _mm512_setzero_si512();
    PK_UNROLL(8)
    for (int g = 0; g < 8; g++) {
        const __m512i wq = _mm512_load_si512(&pk->q[g]);
        PK_UNROLL(6)
        for (int r = 0; r < R; r++) {
            int32_t x4;
            memcpy(&x4, xr[r]->q + 4 * g, 4);
            t[r] = _mm512_dpbusd_epi32(t[r], wq, _mm512_set1_epi32(x4));
        }
    }
    PK_UNROLL(6)
    for (int r = 0; r < R; r++) {
        __m512i s = _mm512_sub_epi32(t[r], _mm512_set1_epi32(off * *sr[r]));
        __m512 dd = _mm512_mul_ps(pk->d, _mm512_set1_ps(h2f(xr[r]->d)));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), dd, acc[r]);
    }
}

#define PK_B32_FN(R)                                                                                   \
    TV static void pk_rows_b32_##R(__m512 *acc, const pkb_t *pk, const blk_q8_0_t *const *xr,          \
                                   const int32_t *const *sr, bool q4)                                  \
    {                                                                                                  \
        if (q4)                                                                                        \
            pk_rows_b32_n(acc, pk, xr, sr, 8, R);                                                      \
        else                                                                                           \
            pk_rows_b32_n(acc, pk, xr, sr, 128, R);                                                    \
    }
PK_B32_FN(1)
PK_B32_FN(2)
PK_B32_FN(3)
PK_B32_FN(4)
PK_B32_FN(5)
PK_B32_FN(6)

TV static void pk_rows_b32(__m512 *acc, const pkb_t *pk, const blk_q8_0_t *const *xr, const int32_t *const *sr,
                           int R, bool q4)
{
    switch (R) {
    case 1: pk_rows_b32_1(acc, pk, xr, sr, q4); break;
    case 2: pk_rows_b32_2(acc, pk, xr, sr, q4); break;
    case 3: pk_rows_b32_3(acc, pk, xr, sr, q4); break;
    case 4: pk_rows_b32_4(acc, pk, xr, sr, q4); break;
    case 5: pk_rows_b32_5(acc, pk, xr, sr, q4); break;
    default: pk_rows_b32_6(acc, pk, xr, sr, q4); break;
    }
}

TV static void packed_b32(float *y, int ldy, const void *xq, size_t ldq, const int32_t *xsum, int rows, int n,
                          const void *w, size_t ldw, int o0, int o1, bool acc, bool q4)
{
    _Alignas(64) pkb_t pk[PKB];
    const int nb = n / QK8_0;
    for (int o = o0; o < o1; o += 16) {
        const int nv = o1 - o < 16 ? o1 - o : 16;
        const unsigned char *wr[16];
        tile_rows(wr, (const unsigned char *)w + (size_t)o * ldw, ldw, nv);
        for (int b0 = 0; b0 < nb; b0 += PKB) {
            const int nbk = nb - b0 < PKB ? nb - b0 : PKB;
            for (int k = 0; k < nbk; k++) {
                _Alignas(64) pk_block_t tmp;
                pack_b32(&tmp, wr, b0 + k, q4);
                memcpy(pk[k].q, tmp.q, sizeof pk[k].q);
                pk[k].d = tmp.d;
            }
            const bool from_y = acc || b0 > 0;
            for (int r0 = 0; r0 < rows; r0 += PACK_R) {
                const int R = rows - r0 < PACK_R ? rows - r0 : PACK_R;
                __m512 av[PACK_R];
                const blk_q8_0_t *xr[PACK_R];
                const int32_t *sr[PACK_R];
                for (int r = 0; r < PACK_R; r++) {
                    int rr = r < R ? r0 + r : r0;
                    av[r] = acc_start(y + (size_t)rr * ldy + o, nv, from_y);
                    xr[r] = (const blk_q8_0_t *)((const unsigned char *)xq + (size_t)rr * ldq) + b0;
                    sr[r] = xsum + (size_t)rr * (size_t)nb + b0;
                }
                for (int k = 0; k < nbk; k++) {
                    const blk_q8_0_t *xk[PACK_R];
                    const int32_t *sk[PACK_R];
                    for (int r = 0; r < PACK_R; r++) {
                        xk[r] = xr[r] + k;
                        sk[r] = sr[r] + k;
                    }
                    pk_rows_b32(av, &pk[k], xk, sk, R, q4);
                }
                for (int r = 0; r < R; r++)
                    _mm512_mask_storeu_ps(y + (size_t)(r0 + r) * ldy + o, mask16(nv), av[r]);
            }
        }
    }
}

/* ---- the rows of the table ------------------------------------------------------------------ */

TV void kern__avx512_qmm_q4_k(float *y, int ldy, const void *xq, size_t ldq, const int32_t *xsum, int rows, int n,
                        const void *w, size_t ldw, int o0, int o1, bool acc)
{
    (void)xsum;
    if (rows >= PACK_ROWS) {
        packed_k(y, ldy, xq, ldq, rows, n, w, ldw, o0, o1, acc, CAIRN_DTYPE_Q4_K);
        return;
    }
    /* Tile by tile, every row against the tile while it is in the cache. */
    const char *cur = pf_range_start(w, ldw, o0, o1, qmm_linear(true));
    for (int o = o0; o < o1; o += 16) {
        const pf_tile_t pf = pf_next_tile(w, ldw, o, o1, n / QK_K, &cur);
        for (int r = 0; r < rows; r++)
            row_q4_k(y + (size_t)r * ldy + o, (const blk_q8_k_t *)((const unsigned char *)xq + (size_t)r * ldq),
                     n / QK_K, (const unsigned char *)w + (size_t)o * ldw, ldw, o1 - o < 16 ? o1 - o : 16, acc,
                     r == 0 ? &pf : &PF_NONE);
    }
}

TV void kern__avx512_qmm_q5_k(float *y, int ldy, const void *xq, size_t ldq, const int32_t *xsum, int rows, int n,
                        const void *w, size_t ldw, int o0, int o1, bool acc)
{
    (void)xsum;
    if (rows >= PACK_ROWS) {
        packed_k(y, ldy, xq, ldq, rows, n, w, ldw, o0, o1, acc, CAIRN_DTYPE_Q5_K);
        return;
    }
    /* Tile by tile, every row against the tile while it is in the cache. */
    const char *cur = pf_range_start(w, ldw, o0, o1, qmm_linear(true));
    for (int o = o0; o < o1; o += 16) {
        const pf_tile_t pf = pf_next_tile(w, ldw, o, o1, n / QK_K, &cur);
        for (int r = 0; r < rows; r++)
            row_q5_k(y + (size_t)r * ldy + o, (const blk_q8_k_t *)((const unsigned char *)xq + (size_t)r * ldq),
                     n / QK_K, (const unsigned char *)w + (size_t)o * ldw, ldw, o1 - o < 16 ? o1 - o : 16, acc,
                     r == 0 ? &pf : &PF_NONE);
    }
}

TV void kern__avx512_qmm_q6_k(float *y, int ldy, const void *xq, size_t ldq, const int32_t *xsum, int rows, int n,
                        const void *w, size_t ldw, int o0, int o1, bool acc)
{
    (void)xsum;
    if (rows >= PACK_ROWS) {
        packed_k(y, ldy, xq, ldq, rows, n, w, ldw, o0, o1, acc, CAIRN_DTYPE_Q6_K);
        return;
    }
    const char *cur = pf_range_start(w, ldw, o0, o1, qmm_linear(true));
    for (int o = o0; o < o1; o += 16) {
        const pf_tile_t pf = pf_next_tile(w, ldw, o, o1, n / QK_K, &cur);
        for (int r = 0; r < rows; r++)
            row_q6_k(y + (size_t)r * ldy + o, (const blk_q8_k_t *)((const unsigned char *)xq + (size_t)r * ldq),
                     n / QK_K, (const unsigned char *)w + (size_t)o * ldw, ldw, o1 - o < 16 ? o1 - o : 16, acc,
                     r == 0 ? &pf : &PF_NONE);
    }
}

#define QMM_B32(NAME, Q4)                                                                              \
    TV void NAME(float *y, int ldy, const void *xq, size_t ldq, const int32_t *xsum, int rows, int n, \
                        const void *w, size_t ldw, int o0, int o1, bool acc)                           \
    {                                                                                                  \
        if (rows >= PACK_ROWS) {                                                                       \
            packed_b32(y, ldy, xq, ldq, xsum, rows, n, w, ldw, o0, o1, acc, Q4);                       \
            return;                                                                                    \
        }                                                                                              \
        const int nb = n / QK8_0;                                                                      \
        const char *cur = pf_range_start(w, ldw, o0, o1, qmm_linear(false));                           \
        for (int o = o0; o < o1; o += 16) {                                                            \
            const pf_tile_t pf = pf_next_tile(w, ldw, o, o1, (nb + 1) / 2, &cur);                      \
            for (int r = 0; r < rows; r++)                                                             \
                row_b32(y + (size_t)r * ldy + o,                                                       \
                        (const blk_q8_0_t *)((const unsigned char *)xq + (size_t)r * ldq),             \
                        xsum + (size_t)r * (size_t)nb, nb, (const unsigned char *)w + (size_t)o * ldw, \
                        ldw, o1 - o < 16 ? o1 - o : 16, acc, Q4, r == 0 ? &pf : &PF_NONE);             \
        }                                                                                              \
    }
QMM_B32(kern__avx512_qmm_q8_0, false)
QMM_B32(kern__avx512_qmm_q4_0, true)

