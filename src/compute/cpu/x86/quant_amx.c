/*
 * quant_amx.c — AMX-INT8 rendition of the quantized matmul's prefill shape (kernels_impl.h,
 * canonical quantized order); everything else of the "amx" implementation is "avx512"'s.
 *
 * Model. A call with at least AMX_MIN_ROWS rows runs its rows in tiles of 16 against tiles
 * of 16 outputs; the rows left over (rows % 16) and calls with fewer rows run the AVX-512
 * VNNI kernels (quant_avx512.c). Both give the canonical bits: a row's result does not
 * depend on which kernel computed it.
 *
 *  - k-quants (q4_k, q5_k, q6_k). The integer S = sum_j sc_j sum_(i in j) q_i x_i of one
 *    super-block is sum_i w_i x_i with w_i = sc_j q_i (j the sub-block of i), which does not
 *    fit a byte; it is split into two digits, w_i = 2^s h_i + l_i (s = 5 for q4_k / q5_k,
 *    6 for q6_k, whose signed scales make h signed), each a byte. Two TDPBSSD chains over
 *    the 256 elements (four steps of 64) give C_h and C_l for 16 rows x 16 outputs, and
 *    S = (C_h << s) + C_l exactly. The mins term M (and q6_k's -32 offset) is the VNNI
 *    kernel's integer from the activation block's bsums (q4_k / q5_k: summed per sub-block
 *    first, 4 dpwssd a row; q6_k: 8; exact either way); then the float chain per block.
 *    Two row tiles share the weight tiles (tmm0-3: C_h, C_l of row tiles 0 and 1; tmm4-5
 *    their activations; tmm6-7 the h, l digits), a piece's tile sums are stored first, then
 *    each row tile's folds (AMX_KQ_SCHED 2); by default (schedule 3) one row tile shares its
 *    activation tiles with two groups of 16 outputs instead (kq_tiles2).
 *  - q8_0, q4_0: per block of 32, C = sum_i w_i x_i by one TDPBSSD (q4_0 weights 0..15,
 *    minus 8 sum x from the activation sums), then the block's float step; one row tile at
 *    a time, each block's C in its own tile (tmm0-3 in turn), the products AMX_B32_AHEAD
 *    blocks ahead of the folds.
 * The folds (int32 tile sums into the float chains, the canonical per-block step) keep each
 * row tile's 16 accumulators in registers over a piece's blocks. The activation terms they
 * read (each row's f32 block scales, q4_0's 8 x sums, the k-quants' bsums pairs) depend on
 * the rows only: they are computed into a side table [block][row] (kq_act_t, b32_act_t), not
 * once per 16 outputs x piece. The driver builds that table once per call and weight type
 * (kern_type_ops_t qmm_table_bytes / qmm_table_fill, its row tiles cut among the pool's
 * threads) and every task of the call reads it (the *_table kernels); called without one,
 * a kernel builds its own (one heap block it frees) before its output loop. The same table holds the rows' int8 activations copied into the A tiles'
 * layout (16 rows x 64 or 32 bytes, contiguous and aligned), so no tile load reads the q8_k /
 * q8_0 blocks at their 292 / 34-byte strides. When that table cannot be allocated the call runs all its rows on the
 * VNNI kernel (same bits), so the kernel has no failure to report.
 *
 * Tile state: the kernel requests permission for the tile data once per process
 * (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); when the CPU lacks AMX-INT8 or the
 * kernel refuses, kern__x86_has_amx_int8() is false and the registry runs "avx512". Each
 * call loads its tile configuration and releases the tiles before returning, so no tile
 * state outlives a call (threads of the pool each load their own).
 *
 * Only runs where kern__x86_has_amx_int8(). Pure functions otherwise; thread-safe.
 */
#include "compute/cpu/x86/x86_impls.h"

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "compute/quant_blocks.h"

#define TA __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,amx-tile,amx-int8")))
#define INLINE static inline __attribute__((always_inline))

#ifndef AMX_KQ_PIECE
#define AMX_KQ_PIECE 4
#endif
enum {
    AMX_MIN_ROWS = 32,       /* fewer rows: the VNNI kernels (the packing would not pay) */
    KQ_PIECE = AMX_KQ_PIECE, /* k-quant super-blocks packed at a time (2 x 4 KiB each) */
    B32_PIECE = 32,    /* q8_0 / q4_0 blocks packed at a time (512 bytes each) */
};

/* ldtilecfg's 64-byte operand (palette 1). */
typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg_t;

/* Tiles 0-7 of 16 rows; A (activations) and C 64 bytes a row; B (weights) `brows` rows
 * of 64 bytes; the activation tiles hold `acolsb` bytes a row (K). */
TA INLINE void load_cfg(int acolsb, int brows)
{
    _Alignas(64) amx_cfg_t c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.rows[t] = 16;
        c.colsb[t] = 64;
    }
    c.colsb[4] = c.colsb[5] = (uint16_t)acolsb;
    c.rows[6] = c.rows[7] = (uint8_t)brows;
    AMX_BARRIER(c);
    _tile_loadconfig(&c);
}

TA INLINE __mmask16 mask16(int n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u); }

TA INLINE float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* ---- k-quants ---------------------------------------------------------------------------- */

/* One super-block of 16 outputs in the tiles' layout: hd/ld[g][k][4o + t] = the h / l
 * digit of output o's element 64g + 4k + t; mp[p] lane o = the int16 pair multiplying
 * dword p of the row's kq_act_t bs (q4_k / q5_k, p < 4: the mins of sub-blocks 2p, 2p + 1;
 * q6_k, p < 8: the scales of sub-blocks 2p, 2p + 1); d, dmin lane o = the block's scales. */
typedef struct {
    int8_t hd[4][16][64];
    int8_t ld[4][16][64];
    _Alignas(64) int32_t mp[8][16];
    _Alignas(64) float d[16], dmin[16];
} kq_pack_t;

/* The 256 q of one super-block and its sub-block scales (q4_k / q5_k: 8 of 32 elements,
 * 6-bit; q6_k: 16 of 16, signed). Plain loops over the layout of quant_blocks.h. */
TA static void kq_unpack(const unsigned char *blk, cairn_dtype_t t, uint8_t q[256], int16_t sc[16])
{
    if (t == CAIRN_DTYPE_Q6_K) {
        const blk_q6_k_t *b = (const blk_q6_k_t *)blk;
        for (int h = 0; h < 2; h++) {
            const uint8_t *L = b->ql + 64 * h, *H = b->qh + 32 * h;
            uint8_t *o = q + 128 * h;
            for (int l = 0; l < 32; l++) {
                o[l] = (uint8_t)((L[l] & 15) | (H[l] & 3) << 4);
                o[32 + l] = (uint8_t)((L[l + 32] & 15) | (H[l] >> 2 & 3) << 4);
                o[64 + l] = (uint8_t)((L[l] >> 4) | (H[l] >> 4 & 3) << 4);
                o[96 + l] = (uint8_t)((L[l + 32] >> 4) | (H[l] >> 6) << 4);
            }
        }
        for (int j = 0; j < 16; j++)
            sc[j] = b->scales[j];
        return;
    }
    const bool q5 = t == CAIRN_DTYPE_Q5_K;
    const uint8_t *qs = q5 ? ((const blk_q5_k_t *)blk)->qs : ((const blk_q4_k_t *)blk)->qs;
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) {
            q[64 * g + l] = qs[32 * g + l] & 15;
            q[64 * g + 32 + l] = qs[32 * g + l] >> 4;
        }
    if (q5) {
        const uint8_t *qh = ((const blk_q5_k_t *)blk)->qh;
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) {
                q[64 * g + l] |= (uint8_t)((qh[l] >> (2 * g) & 1) << 4);
                q[64 * g + 32 + l] |= (uint8_t)((qh[l] >> (2 * g + 1) & 1) << 4);
            }
    }
    for (int j = 0; j < 8; j++) {
        int s6, m6;
        quant_k4_scale_min(blk + 4, j, &s6, &m6);
        sc[j] = (int16_t)s6;
    }
}

/* Output o's digits of one super-block, in element order: w = sc q = 2^s h + l with
 * 0 <= l < 2^s, h = floor(w / 2^s) (w < 0 for q6_k's negative scales; |w| < 2^13, so 16-bit
 * lanes hold it and both digits fit a byte). */
TA INLINE void kq_digits(int8_t hb[256], int8_t lb[256], const uint8_t q[256], const int16_t sc[16], int s, int sub)
{
    const __m512i lmask = _mm512_set1_epi16((short)((1 << s) - 1));
    const __m128i sh = _mm_cvtsi32_si128(s);
    for (int e0 = 0; e0 < QK_K; e0 += 32) {
        const __m512i qv = _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)(q + e0)));
        const __m512i scv = sub == 32 ? _mm512_set1_epi16(sc[e0 / 32])
                                      : _mm512_inserti64x4(_mm512_set1_epi16(sc[e0 / 16]),
                                                           _mm256_set1_epi16(sc[e0 / 16 + 1]), 1);
        const __m512i w = _mm512_mullo_epi16(qv, scv);
        _mm256_store_si256((__m256i *)(hb + e0), _mm512_cvtepi16_epi8(_mm512_sra_epi16(w, sh)));
        _mm256_store_si256((__m256i *)(lb + e0), _mm512_cvtepi16_epi8(_mm512_and_si512(w, lmask)));
    }
}

/* dst row k (64 bytes) = dword k of v[0], of v[1], ..., of v[15]: a 16 x 16 dword transpose
 * in registers. After the dword and qword unpacks, u[4j + m]'s 128-bit lane L holds dword
 * 4L + m of v[4j .. 4j + 3]; row 4L + m is then lane L of u[m], u[4 + m], u[8 + m], u[12 + m]
 * (a 4 x 4 transpose of 128-bit lanes, two rounds of vshufi32x4). */
TA INLINE void transpose16_store(int8_t dst[16][64], const __m512i v[16])
{
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
    }
    for (int j = 0; j < 16; j += 4) {
        u[j] = _mm512_unpacklo_epi64(t[j], t[j + 2]);
        u[j + 1] = _mm512_unpackhi_epi64(t[j], t[j + 2]);
        u[j + 2] = _mm512_unpacklo_epi64(t[j + 1], t[j + 3]);
        u[j + 3] = _mm512_unpackhi_epi64(t[j + 1], t[j + 3]);
    }
    for (int m = 0; m < 4; m++) {
        const __m512i p0 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0x44), p1 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0xee);
        const __m512i p2 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0x44),
                      p3 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0xee);
        _mm512_store_si512(dst[m], _mm512_shuffle_i32x4(p0, p2, 0x88));
        _mm512_store_si512(dst[4 + m], _mm512_shuffle_i32x4(p0, p2, 0xdd));
        _mm512_store_si512(dst[8 + m], _mm512_shuffle_i32x4(p1, p3, 0x88));
        _mm512_store_si512(dst[12 + m], _mm512_shuffle_i32x4(p1, p3, 0xdd));
    }
}

/* Packs super-block b of the 16 rows wr (missing outputs repeat the last row): each output's
 * digits in element order, then per group g of 64 elements one transpose of the 16 outputs'
 * dwords (element e's digits go to byte 4o + e % 4 of row e / 4: hd[g][k] is row 16g + k). */
TA static void kq_pack(kq_pack_t *pk, const unsigned char *const wr[16], int b, cairn_dtype_t t)
{
    const size_t bsz = t == CAIRN_DTYPE_Q6_K ? sizeof(blk_q6_k_t)
                       : t == CAIRN_DTYPE_Q5_K ? sizeof(blk_q5_k_t) : sizeof(blk_q4_k_t);
    const int s = t == CAIRN_DTYPE_Q6_K ? 6 : 5, sub = t == CAIRN_DTYPE_Q6_K ? 16 : 32;
    _Alignas(64) int8_t hb[16][256], lb[16][256];
    for (int o = 0; o < 16; o++) {
        const unsigned char *blk = wr[o] + (size_t)b * bsz;
        _Alignas(32) uint8_t q[256];
        int16_t sc[16];
        kq_unpack(blk, t, q, sc);
        kq_digits(hb[o], lb[o], q, sc, s, sub);
        uint16_t d16, dm16 = 0;
        if (t == CAIRN_DTYPE_Q6_K) {
            const blk_q6_k_t *q6 = (const blk_q6_k_t *)blk;
            d16 = q6->d;
            for (int p = 0; p < 8; p++)
                pk->mp[p][o] = (int32_t)((uint32_t)(uint16_t)q6->scales[2 * p] |
                                         (uint32_t)(uint16_t)q6->scales[2 * p + 1] << 16);
        } else {
            memcpy(&d16, blk, 2);
            memcpy(&dm16, blk + 2, 2);
            for (int j = 0; j < 8; j += 2) {
                int sc6, m0, m1;
                quant_k4_scale_min(blk + 4, j, &sc6, &m0);
                quant_k4_scale_min(blk + 4, j + 1, &sc6, &m1);
                pk->mp[j / 2][o] = (int32_t)((uint32_t)m0 | (uint32_t)m1 << 16);
            }
        }
        pk->d[o] = h2f(d16);
        pk->dmin[o] = h2f(dm16);
    }
    for (int g = 0; g < 4; g++) {
        __m512i vh[16], vl[16];
        for (int o = 0; o < 16; o++) {
            vh[o] = _mm512_load_si512(hb[o] + 64 * g);
            vl[o] = _mm512_load_si512(lb[o] + 64 * g);
        }
        transpose16_store(pk->hd[g], vh);
        transpose16_store(pk->ld[g], vl);
    }
}

/* The activation terms of a call's tiled rows, computed once per call (amx_kq, before its
 * output loop: they depend on the rows only, not on the outputs), in [block][row] order so
 * one row tile's 16 values of a block are one 64-byte line: dx[b rows + r] row r's scale of
 * super-block b; bs[b rows + r] the int16 pairs its mins term multiplies, dword p
 * lane-broadcast by the fold: q4_k / q5_k dwords 0-3 = the sub-block sums (bsums 4p + {0,1},
 * bsums 4p + {2,3}) packed (each |sum| <= 2 x 16 x 128, an int16), q6_k dwords 0-7 = bsums
 * pairs 2p, 2p + 1 as stored. And the rows' int8 activations themselves, copied into the
 * A tiles' layout: xa + KQ_ATILE(b, rt, g) is the 16 rows of row tile rt x elements 64g ..
 * 64g + 63 of super-block b, 64 bytes a row, contiguous and 64-byte aligned, so a tile load
 * reads 16 whole cache lines instead of 16 rows split across two lines each at the q8_k
 * blocks' 292-byte stride (bench_amx_parts, q4_k: ~0.88x the kernel's time with the A tiles
 * from one aligned buffer). One heap block (kq_act_alloc) owned by the call. */
typedef struct {
    int rows;          /* the call's tiled rows: the stride of one block's values */
    float *dx;         /* [nb][rows] */
    int32_t (*bs)[8];  /* [nb][rows][8] */
    int8_t *xa;        /* [nb][rows / 16][4][16][64] */
    void *mem;         /* what cairn_free takes */
} kq_act_t;

/* Byte offset in kq_act_t xa of super-block b, row tile rt, 64-element group g. */
#define KQ_ATILE(a, b, rt, g) ((((size_t)(b) * (size_t)((a)->rows / 16) + (size_t)(rt)) * 4 + (size_t)(g)) * 1024)

/* Bytes of the side table of rows (a multiple of 16) x nb super-blocks from a 64-byte
 * aligned start; 0 when that does not fit a size_t. */
static size_t kq_act_bytes(int rows, int nb)
{
    const size_t cells = (size_t)rows * (size_t)nb;
    return cells <= (SIZE_MAX - 128) / (QK_K + 40) ? cells * (QK_K + sizeof(float) + 8 * sizeof(int32_t)) : 0;
}

/* The table's parts in p (64-byte aligned, kq_act_bytes long); mem is left NULL. */
static void kq_act_view(kq_act_t *a, void *p64, int rows, int nb)
{
    const size_t cells = (size_t)rows * (size_t)nb;
    unsigned char *p = p64;
    a->rows = rows;
    a->mem = NULL;
    /* xa (QK_K bytes a cell), bs (32), dx (4): each part's size a multiple of 64 bytes
     * (rows is a multiple of 16), so the aligned start aligns all three */
    a->xa = (int8_t *)p;
    a->bs = (int32_t (*)[8])(p + cells * QK_K);
    a->dx = (float *)(p + cells * QK_K + cells * 8 * sizeof(int32_t));
}

/* Allocates the side table of rows x nb super-blocks; false (nothing to free) when it
 * cannot be had. */
static bool kq_act_alloc(kq_act_t *a, int rows, int nb)
{
    const size_t bytes = kq_act_bytes(rows, nb);
    void *mem = bytes ? cairn_malloc(bytes + 64) : NULL;
    if (!mem)
        return false;
    kq_act_view(a, (unsigned char *)mem + (64 - (uintptr_t)mem % 64) % 64, rows, nb);
    a->mem = mem;
    return true;
}

/* Fills rows [r0, r1) of the side table from the rows' q8_k blocks (row r at xq + r ldq);
 * disjoint row ranges may be filled concurrently. */
TA __attribute__((noinline)) static void kq_act(kq_act_t *a, const void *xq, size_t ldq, int nb, bool q6, int r0,
                                                int r1)
{
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = r0; r < r1; r++)
        for (int k = 0; k < nb; k++) {
            const blk_q8_k_t *x = (const blk_q8_k_t *)((const unsigned char *)xq + (size_t)r * ldq) + k;
            const __m256i b = _mm256_loadu_si256((const __m256i *)x->bsums);
            const size_t i = (size_t)k * (size_t)a->rows + (size_t)r;
            a->dx[i] = x->d;
            /* madd: dword j = bsums 2j + 2j+1; packs: its int16s in dwords 0, 1 (low lane)
             * and 4, 5 (high lane); the permute brings qwords 0 and 2 together */
            const __m256i m = _mm256_madd_epi16(b, ones);
            const __m256i packed = _mm256_permute4x64_epi64(_mm256_packs_epi32(m, m), 0x08);
            _mm256_store_si256((__m256i *)a->bs[i], q6 ? b : packed);
            int8_t *xa = a->xa + KQ_ATILE(a, k, r / 16, 0) + (size_t)(r % 16) * 64;
            for (int g = 0; g < 4; g++)
                _mm512_store_si512(xa + 1024 * g, _mm512_loadu_si512(x->q + 64 * g));
        }
}

/* acc (16 floats, lanes o) of one row gets one super-block: S (exact) from the two digits'
 * tile sums, M from the row's bs (the VNNI kernel's integer, summed in another grouping:
 * q4_k / q5_k 4 dpwssd of (m_2q, m_2q+1) x (sub-block sums), q6_k 8 of the scale pairs x the
 * bsums pairs), then the canonical float steps (quant_avx512.c's pk_rows_k_n, lane for lane). */
TA INLINE __m512 kq_fold(__m512 acc, __m512i ch, __m512i cl, int s, const __m512i *mp, const int32_t *bs, float dx,
                         __m512 d, __m512 dmin, bool q6)
{
    __m512i S = _mm512_add_epi32(_mm512_sll_epi32(ch, _mm_cvtsi32_si128(s)), cl);
#define KQ_DP(p) M = _mm512_dpwssd_epi32(M, mp[p], _mm512_set1_epi32(bs[p]))
    __m512i M = _mm512_setzero_si512();
    KQ_DP(0);
    KQ_DP(1);
    KQ_DP(2);
    KQ_DP(3);
    if (q6) {
        KQ_DP(4);
        KQ_DP(5);
        KQ_DP(6);
        KQ_DP(7);
    }
#undef KQ_DP
    const __m512 dxv = _mm512_set1_ps(dx);
    if (q6) {
        S = _mm512_sub_epi32(S, _mm512_slli_epi32(M, 5)); /* the -32 of every q */
        return _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(d, dxv), acc);
    }
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(d, dxv), acc);
    return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(dmin, dxv), acc);
}

/* Super-block k of one row tile into C tiles CH, CL (the activations in tiles 4 and 5 by
 * the parity of g, the digits in tiles 6, 7), stored to c[0], c[1]. */
#define KQ_TILE(CH, CL, k, c)                                                            \
    do {                                                                                 \
        const int8_t *xk_ = a->xa + KQ_ATILE(a, b0 + (k), r0 / 16 + rt, 0);              \
        _tile_zero(CH);                                                                  \
        _tile_zero(CL);                                                                  \
        for (int g = 0; g < 4; g += 2) {                                                 \
            _tile_loadd(4, xk_ + 1024 * g, 64);                                          \
            _tile_loadd(6, pk[k].hd[g], 64);                                             \
            _tile_dpbssd(CH, 4, 6);                                                      \
            _tile_loadd(7, pk[k].ld[g], 64);                                             \
            _tile_dpbssd(CL, 4, 7);                                                      \
            _tile_loadd(5, xk_ + 1024 * (g + 1), 64);                                    \
            _tile_loadd(6, pk[k].hd[g + 1], 64);                                         \
            _tile_dpbssd(CH, 5, 6);                                                      \
            _tile_loadd(7, pk[k].ld[g + 1], 64);                                         \
            _tile_dpbssd(CL, 5, 7);                                                      \
        }                                                                                \
        _tile_stored(CH, (c)[0], 64);                                                    \
        _tile_stored(CL, (c)[1], 64);                                                    \
    } while (0)

/* The 16 rows' folds of one super-block from the tile sums c (ch = c[0], cl = c[1]); dx, bs
 * the 16 rows' activation terms of that block (kq_act_t). */
TA INLINE void kq_fold16(__m512 acc[16], int32_t c[2][16][16], int s, const kq_pack_t *pk, const float *dx,
                         const int32_t (*bs)[8], bool q6)
{
    __m512i mp[8];
    for (int p = 0; p < 8; p++)
        mp[p] = p < 4 || q6 ? _mm512_load_si512(pk->mp[p]) : _mm512_setzero_si512();
    const __m512 d = _mm512_load_ps(pk->d), dmin = _mm512_load_ps(pk->dmin);
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++)
        acc[r] = kq_fold(acc[r], _mm512_load_si512(c[0][r]), _mm512_load_si512(c[1][r]), s, mp, bs[r], dx[r], d,
                         dmin, q6);
}

TA INLINE void kq_acc_load(__m512 acc[16], const float *y, int ldy, int nv, bool from_y)
{
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++)
        acc[r] = from_y ? _mm512_maskz_loadu_ps(mask16(nv), y + (size_t)r * ldy) : _mm512_setzero_ps();
}

TA INLINE void kq_acc_store(float *y, int ldy, int nv, const __m512 acc[16])
{
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++)
        _mm512_mask_storeu_ps(y + (size_t)r * ldy, mask16(nv), acc[r]);
}

/*
 * Rows r0 .. r0 + 16 nt - 1 x the 16 outputs at y + o, over the packed super-blocks
 * pk[0 .. nbk) (blocks b0 ..), continuing from y when from_y. Each row tile's 16
 * accumulators stay in registers over the blocks. Three schedules (AMX_KQ_SCHED; same bits):
 *   1: one row tile (nt = 1) at a time; block k + 1's tile products are issued before block
 *      k's folds (C tiles 0, 1 and c[0] for even k, 2, 3 and c[1] for odd k), so the tile
 *      unit can work while the vector units fold; two C chains per block.
 *   2: two row tiles sharing the weight tiles (four C chains, B loaded once for both), all
 *      nbk blocks' tile sums stored first, then each row tile's folds (a last single row
 *      tile runs schedule 1).
 *   3: one row tile against two output groups (kq_tiles2 below; a last single group runs
 *      schedule 2), each activation tile loaded once for 32 outputs (the default).
 * On the device's Xeon (docs/PERFORMANCE.md, "Session 8 ... (branch amxfold)") schedule 1's
 * tile part (full - no tiles) of q4_k took ~7.5-10.8 ms against ~3.4-4.7 for main's
 * two-row-tile schedule and for schedule 2: two C chains and twice the weight-tile loads
 * cost more than the overlap with the folds gave. Session 9 (branch kq9, "Session 9 ... the
 * AMX-INT8 activation terms once per call"): schedule 3's q4_k / q6_k kernel measured ~1.24x
 * schedule 2's in bench_amx_parts (each line's q4_k time over its q8_0 time, 6 lines each),
 * and the lead's device run lead9 confirmed it: test_quant_kernels 7/7 built with
 * AMX_KQ_SCHED=3 on the real tiles, and pp512 Q4_K_M 1.23x / 1.28x schedule 2's in both
 * neighbouring pairs (351.9 vs 285.8, 378.9 vs 296.6 tok/s): 3 is the default since.
 */
#ifndef AMX_KQ_SCHED
#define AMX_KQ_SCHED 3
#endif
TA INLINE void kq_tiles(float *y, int ldy, int r0, int nt, const kq_pack_t *pk, int b0,
                        int nbk, int nv, bool from_y, const kq_act_t *a, cairn_dtype_t t)
{
    const int s = t == CAIRN_DTYPE_Q6_K ? 6 : 5;
    const bool q6 = t == CAIRN_DTYPE_Q6_K;
    /* block k's terms of row tile rt: a->dx[KQ_AT(k, rt)], a->bs[KQ_AT(k, rt)] */
#define KQ_AT(k, rt) ((size_t)(b0 + (k)) * (size_t)a->rows + (size_t)(r0 + 16 * (rt)))
    __m512 acc[16];
    if (AMX_KQ_SCHED == 1 || nt == 1) {
        _Alignas(64) int32_t c[2][2][16][16];
        for (int rt = 0; rt < nt; rt++) {
            float *yr = y + (size_t)(r0 + 16 * rt) * ldy;
            kq_acc_load(acc, yr, ldy, nv, from_y);
            KQ_TILE(0, 1, 0, c[0]);
            for (int k = 0; k < nbk; k += 2) {
                if (k + 1 < nbk)
                    KQ_TILE(2, 3, k + 1, c[1]);
                AMX_BARRIER(c);
                kq_fold16(acc, c[0], s, &pk[k], a->dx + KQ_AT(k, rt), a->bs + KQ_AT(k, rt), q6);
                if (k + 1 >= nbk)
                    break;
                if (k + 2 < nbk)
                    KQ_TILE(0, 1, k + 2, c[0]);
                AMX_BARRIER(c);
                kq_fold16(acc, c[1], s, &pk[k + 1], a->dx + KQ_AT(k + 1, rt), a->bs + KQ_AT(k + 1, rt), q6);
            }
            kq_acc_store(yr, ldy, nv, acc);
        }
        return;
    }
    /* AMX_KQ_SCHED 2, nt = 2: cb[k][row tile][digit] */
    _Alignas(64) int32_t cb[KQ_PIECE][2][2][16][16];
    for (int k = 0; k < nbk; k++) {
        const int8_t *xk = a->xa + KQ_ATILE(a, b0 + k, r0 / 16, 0);
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int g = 0; g < 4; g++) {
            _tile_loadd(4, xk + 1024 * g, 64);
            _tile_loadd(5, xk + KQ_ATILE(a, 0, 1, g), 64);
            _tile_loadd(6, pk[k].hd[g], 64);
            _tile_dpbssd(0, 4, 6);
            _tile_dpbssd(2, 5, 6);
            _tile_loadd(7, pk[k].ld[g], 64);
            _tile_dpbssd(1, 4, 7);
            _tile_dpbssd(3, 5, 7);
        }
        _tile_stored(0, cb[k][0][0], 64);
        _tile_stored(1, cb[k][0][1], 64);
        _tile_stored(2, cb[k][1][0], 64);
        _tile_stored(3, cb[k][1][1], 64);
    }
    AMX_BARRIER(cb);
    for (int rt = 0; rt < 2; rt++) {
        float *yr = y + (size_t)(r0 + 16 * rt) * ldy;
        kq_acc_load(acc, yr, ldy, nv, from_y);
        for (int k = 0; k < nbk; k++)
            kq_fold16(acc, cb[k][rt], s, &pk[k], a->dx + KQ_AT(k, rt), a->bs + KQ_AT(k, rt), q6);
        kq_acc_store(yr, ldy, nv, acc);
    }
#undef KQ_AT
}

/*
 * Schedule 3 (AMX_KQ_SCHED=3, the default): one row tile (r0 .. r0 + 15) against two
 * output groups, y + 0 .. 15 (pk0, all 16 valid) and y + 16 .. (pk1, nv1 valid), so each
 * activation tile is loaded once for 32 outputs (half the A traffic from L2 of schedule 2)
 * at the price of four weight-tile loads per four products instead of two: C tiles 0, 1
 * (group 0's h, l) and 2, 3 (group 1's), A in tile 4, the weights in 5, 6, 7, 5. All nbk
 * blocks' tile sums are stored first, then each group's folds (the same kq_fold16).
 */
TA INLINE void kq_tiles2(float *y, int ldy, int r0, const kq_pack_t *pk0,
                         const kq_pack_t *pk1, int b0, int nbk, int nv1, bool from_y, const kq_act_t *a,
                         cairn_dtype_t t)
{
    const int s = t == CAIRN_DTYPE_Q6_K ? 6 : 5;
    const bool q6 = t == CAIRN_DTYPE_Q6_K;
    _Alignas(64) int32_t cb[KQ_PIECE][2][2][16][16]; /* [k][group][digit] */
    for (int k = 0; k < nbk; k++) {
        const int8_t *xk = a->xa + KQ_ATILE(a, b0 + k, r0 / 16, 0);
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int g = 0; g < 4; g++) {
            _tile_loadd(4, xk + 1024 * g, 64);
            _tile_loadd(5, pk0[k].hd[g], 64);
            _tile_dpbssd(0, 4, 5);
            _tile_loadd(6, pk0[k].ld[g], 64);
            _tile_dpbssd(1, 4, 6);
            _tile_loadd(7, pk1[k].hd[g], 64);
            _tile_dpbssd(2, 4, 7);
            _tile_loadd(5, pk1[k].ld[g], 64);
            _tile_dpbssd(3, 4, 5);
        }
        _tile_stored(0, cb[k][0][0], 64);
        _tile_stored(1, cb[k][0][1], 64);
        _tile_stored(2, cb[k][1][0], 64);
        _tile_stored(3, cb[k][1][1], 64);
    }
    AMX_BARRIER(cb);
    __m512 acc[16];
    for (int gr = 0; gr < 2; gr++) {
        const kq_pack_t *pk = gr ? pk1 : pk0;
        float *yr = y + (size_t)r0 * ldy + 16 * gr;
        const int nv = gr ? nv1 : 16;
        kq_acc_load(acc, yr, ldy, nv, from_y);
        for (int k = 0; k < nbk; k++) {
            const size_t at = (size_t)(b0 + k) * (size_t)a->rows + (size_t)r0;
            kq_fold16(acc, cb[k][gr], s, &pk[k], a->dx + at, a->bs + at, q6);
        }
        kq_acc_store(yr, ldy, nv, acc);
    }
}

/* Rows [0, rows) (whole tiles) x outputs [o0, o1); false (nothing written) when the side
 * table cannot be allocated. */
TA static bool amx_kq(float *y, int ldy, const void *xq, size_t ldq, int rows, int n, const void *w, size_t ldw,
                      int o0, int o1, bool acc, cairn_dtype_t t, const void *table)
{
    _Alignas(64) kq_pack_t pk[KQ_PIECE];
    const int nb = n / QK_K, tiles = rows / 16;
    kq_act_t a;
    if (table) {
        kq_act_view(&a, (void *)(uintptr_t)table, rows, nb);
    } else {
        if (!kq_act_alloc(&a, rows, nb))
            return false;
        kq_act(&a, xq, ldq, nb, t == CAIRN_DTYPE_Q6_K, 0, rows);
    }
    load_cfg(64, 16);
    for (int o = o0; o < o1; o += 16) {
        const int nv = o1 - o < 16 ? o1 - o : 16;
        const unsigned char *wr[16];
        for (int i = 0; i < 16; i++)
            wr[i] = (const unsigned char *)w + (size_t)(o + (i < nv ? i : nv - 1)) * ldw;
#if AMX_KQ_SCHED == 3
        if (o1 - o > 16) { /* two output groups: o .. o + 15 and o + 16 .. */
            _Alignas(64) kq_pack_t pk1[KQ_PIECE];
            const int nv1 = o1 - o - 16 < 16 ? o1 - o - 16 : 16;
            const unsigned char *wr1[16];
            for (int i = 0; i < 16; i++)
                wr1[i] = (const unsigned char *)w + (size_t)(o + 16 + (i < nv1 ? i : nv1 - 1)) * ldw;
            for (int b0 = 0; b0 < nb; b0 += KQ_PIECE) {
                const int nbk = nb - b0 < KQ_PIECE ? nb - b0 : KQ_PIECE;
                for (int k = 0; k < nbk; k++) {
                    kq_pack(&pk[k], wr, b0 + k, t);
                    kq_pack(&pk1[k], wr1, b0 + k, t);
                }
                AMX_BARRIER(pk);
                AMX_BARRIER(pk1);
                for (int tt = 0; tt < tiles; tt++) {
                    if (t == CAIRN_DTYPE_Q6_K)
                        kq_tiles2(y + o, ldy, 16 * tt, pk, pk1, b0, nbk, nv1, acc || b0 > 0, &a,
                                  CAIRN_DTYPE_Q6_K);
                    else
                        kq_tiles2(y + o, ldy, 16 * tt, pk, pk1, b0, nbk, nv1, acc || b0 > 0, &a,
                                  CAIRN_DTYPE_Q4_K);
                }
            }
            o += 16;
            continue;
        }
#endif
        for (int b0 = 0; b0 < nb; b0 += KQ_PIECE) {
            const int nbk = nb - b0 < KQ_PIECE ? nb - b0 : KQ_PIECE;
            for (int k = 0; k < nbk; k++)
                kq_pack(&pk[k], wr, b0 + k, t);
            AMX_BARRIER(pk);
            for (int tt = 0; tt < tiles; tt += 2) {
                const int nt = tiles - tt >= 2 ? 2 : 1;
                if (t == CAIRN_DTYPE_Q6_K)
                    kq_tiles(y + o, ldy, 16 * tt, nt, pk, b0, nbk, nv, acc || b0 > 0, &a, CAIRN_DTYPE_Q6_K);
                else
                    kq_tiles(y + o, ldy, 16 * tt, nt, pk, b0, nbk, nv, acc || b0 > 0, &a, CAIRN_DTYPE_Q4_K);
            }
        }
    }
    _tile_release();
    cairn_free(a.mem);
    return true;
}

/* ---- q8_0, q4_0 ------------------------------------------------------------------------------ */

/* One block of 16 outputs: q[k][4o + t] = output o's weight 4k + t (q8_0: w; q4_0: q,
 * 0..15); d lane o its scale. */
typedef struct {
    int8_t q[8][64];
    _Alignas(64) float d[16];
} b32_pack_t;

TA static void b32_pack(b32_pack_t *pk, const unsigned char *const wr[16], int b, bool q4)
{
    /* the 32 weights' dword i (weights 4i .. 4i+3) is row i's dword o: 8 rows a scatter */
    const __m256i rows = _mm256_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448);
    for (int o = 0; o < 16; o++) {
        uint16_t d16;
        __m256i v;
        if (q4) {
            const blk_q4_0_t *blk = (const blk_q4_0_t *)wr[o] + b;
            const __m128i qs = _mm_loadu_si128((const __m128i *)blk->qs), m4 = _mm_set1_epi8(15);
            v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), m4), _mm_and_si128(qs, m4));
            d16 = blk->d;
        } else {
            const blk_q8_0_t *blk = (const blk_q8_0_t *)wr[o] + b;
            v = _mm256_loadu_si256((const __m256i *)blk->q);
            d16 = blk->d;
        }
        _mm256_i32scatter_epi32((int *)((int8_t *)pk->q + 4 * o), rows, v, 1);
        pk->d[o] = h2f(d16);
    }
}

/* The activation terms of a call's tiled rows, computed once per call (amx_b32, before its
 * output loop), in [block][row] order so one row tile's 16 values of a block are one 64-byte
 * line: dx[b rows + r] row r's scale of block b (f32); q4_0: x8[b rows + r] = 8 x the
 * block's sum (the weights' -8 offset). One heap block (b32_act_alloc) owned by the call. */
typedef struct {
    int rows;    /* the call's tiled rows: the stride of one block's values */
    float *dx;   /* [nb][rows] */
    int32_t *x8; /* [nb][rows]; q4_0 only */
    int8_t *xa;  /* [nb][rows / 16][16][32]: the rows' q in the A tiles' layout (as kq_act_t's) */
    void *mem;   /* what cairn_free takes */
} b32_act_t;

/* Byte offset in b32_act_t xa of block b, row tile rt (16 rows of 32 bytes). */
#define B32_ATILE(a, b, rt) (((size_t)(b) * (size_t)((a)->rows / 16) + (size_t)(rt)) * 512)

/* Bytes of the side table of rows (a multiple of 16) x nb blocks from a 64-byte aligned
 * start; 0 when that does not fit a size_t. */
static size_t b32_act_bytes(int rows, int nb)
{
    const size_t cells = (size_t)rows * (size_t)nb;
    return cells <= (SIZE_MAX - 128) / (QK8_0 + 8) ? cells * (QK8_0 + sizeof(float) + sizeof(int32_t)) : 0;
}

/* The table's parts in p (64-byte aligned, b32_act_bytes long); mem is left NULL. */
static void b32_act_view(b32_act_t *a, void *p64, int rows, int nb)
{
    const size_t cells = (size_t)rows * (size_t)nb;
    unsigned char *p = p64;
    a->rows = rows;
    a->mem = NULL;
    /* xa (QK8_0 bytes a cell), dx, x8: each part a multiple of 64 bytes (rows % 16 == 0) */
    a->xa = (int8_t *)p;
    a->dx = (float *)(p + cells * QK8_0);
    a->x8 = (int32_t *)(p + cells * QK8_0 + cells * sizeof(float));
}

/* Allocates the side table of rows x nb blocks; false (nothing to free) when it cannot be
 * had. */
static bool b32_act_alloc(b32_act_t *a, int rows, int nb)
{
    const size_t bytes = b32_act_bytes(rows, nb);
    void *mem = bytes ? cairn_malloc(bytes + 64) : NULL;
    if (!mem)
        return false;
    b32_act_view(a, (unsigned char *)mem + (64 - (uintptr_t)mem % 64) % 64, rows, nb);
    a->mem = mem;
    return true;
}

/* Fills rows [ra, rb) (multiples of 16) of the side table from the rows' q8_0 blocks (row r
 * at xq + r ldq) and, for q4_0, the driver's block sums xs ([rows][nb]); disjoint row
 * ranges may be filled concurrently. Gathered 16 rows at a time (a row tile); a row stride
 * too large for 32-bit gather indices takes the scalar loop. */
TA __attribute__((noinline)) static void b32_act(b32_act_t *a, const void *xq, size_t ldq, const int32_t *xs, int nb,
                                                 bool q4, int ra, int rb)
{
    const size_t rows = (size_t)a->rows;
    for (size_t r = (size_t)ra; r < (size_t)rb; r++)
        for (int k = 0; k < nb; k++) {
            const blk_q8_0_t *x = (const blk_q8_0_t *)((const unsigned char *)xq + r * ldq) + k;
            _mm256_store_si256((__m256i *)(a->xa + B32_ATILE(a, k, r / 16) + (r % 16) * 32),
                               _mm256_loadu_si256((const __m256i *)x->q));
        }
    if (ldq <= (size_t)INT32_MAX / 16 && (size_t)nb <= (size_t)INT32_MAX / 16) {
        const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const __m512i rx = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)ldq));
        const __m512i rs = _mm512_mullo_epi32(lane, _mm512_set1_epi32(nb));
        for (size_t r0 = (size_t)ra; r0 < (size_t)rb; r0 += 16) {
            const unsigned char *xr = (const unsigned char *)xq + r0 * ldq;
            for (int k = 0; k < nb; k++) {
                /* the f16 d and the block's first two q: the low half of each dword */
                const __m512i g = _mm512_i32gather_epi32(rx, xr + (size_t)k * sizeof(blk_q8_0_t), 1);
                _mm512_store_ps(a->dx + (size_t)k * rows + r0, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g)));
                if (q4)
                    _mm512_store_si512(a->x8 + (size_t)k * rows + r0,
                                       _mm512_slli_epi32(_mm512_i32gather_epi32(rs, xs + r0 * (size_t)nb + k, 4), 3));
            }
        }
        return;
    }
    for (size_t r = (size_t)ra; r < (size_t)rb; r++)
        for (int k = 0; k < nb; k++) {
            a->dx[(size_t)k * rows + r] = h2f(((const blk_q8_0_t *)((const unsigned char *)xq + r * ldq) + k)->d);
            if (q4)
                a->x8[(size_t)k * rows + r] = 8 * xs[r * (size_t)nb + (size_t)k];
        }
}

/* Block k of one row tile into C tile C_ (A tile TA_, weights tile TB), stored to c. */
#define B32_TILE(C_, TA_, TB, k, c)                                                          \
    do {                                                                                      \
        _tile_loadd(TB, pk[k].q, 64);                                                         \
        _tile_zero(C_);                                                                       \
        _tile_loadd(TA_, a->xa + B32_ATILE(a, b0 + (k), r0 / 16), 32);                          \
        _tile_dpbssd(C_, TA_, TB);                                                            \
        _tile_stored(C_, (c), 64);                                                            \
    } while (0)

/* The 16 rows' canonical float steps of one block from its tile sums c; dx, x8 the 16 rows'
 * activation terms of that block (b32_act_t; x8 read for q4_0 only). */
TA INLINE void b32_fold16(__m512 acc[16], int32_t c[16][16], const b32_pack_t *pk, const float *dx, const int32_t *x8,
                          bool q4)
{
    const __m512 dw = _mm512_load_ps(pk->d);
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
        __m512i s = _mm512_load_si512(c[r]);
        if (q4)
            s = _mm512_sub_epi32(s, _mm512_set1_epi32(x8[r]));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(dx[r])), acc[r]);
    }
}

/*
 * Rows r0 .. r0 + 15 x the 16 outputs at y + o over the packed blocks pk[0 .. nbk) (blocks
 * b0 ..), continuing from y when from_y; the 16 accumulators stay in registers. Block
 * k + AMX_B32_AHEAD's tile product is issued before block k's folds (0: none ahead), block
 * j in slot j mod (AHEAD + 1): C tile and buffer c[slot], activations and weights in tiles
 * 4, 6 or 5, 7 by the slot's parity; each block has its own C (no chain), so the tile unit
 * can run ahead of the folds by AHEAD blocks. On the device's Xeon 0 and 3 measured the same
 * within the noise (q8_0 512 x 1024 -> 3072: medians 10.75 / 10.95 ms, bench_amx_parts); 3
 * is what the session-8 pp512 figures ran.
 */
#ifndef AMX_B32_AHEAD
#define AMX_B32_AHEAD 3
#endif
_Static_assert(AMX_B32_AHEAD >= 0 && AMX_B32_AHEAD <= 3, "four C tiles");
#define B32_ISSUE(j)                                                  \
    do {                                                              \
        switch ((j) % (AMX_B32_AHEAD + 1)) {                          \
        case 0: B32_TILE(0, 4, 6, (j), c[0]); break;                  \
        case 1: B32_TILE(1, 5, 7, (j), c[1]); break;                  \
        case 2: B32_TILE(2, 4, 6, (j), c[2]); break;                  \
        default: B32_TILE(3, 5, 7, (j), c[3]); break;                 \
        }                                                             \
    } while (0)

TA INLINE void b32_tiles(float *y, int ldy, int r0, const b32_pack_t *pk, int b0, int nbk,
                         int nv, bool from_y, const b32_act_t *a, bool q4)
{
    _Alignas(64) int32_t c[AMX_B32_AHEAD + 1][16][16];
    const size_t at = (size_t)b0 * (size_t)a->rows + (size_t)r0; /* block b0's terms of this row tile */
    __m512 acc[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++)
        acc[r] = from_y ? _mm512_maskz_loadu_ps(mask16(nv), y + (size_t)(r0 + r) * ldy) : _mm512_setzero_ps();
    for (int j = 0; j < AMX_B32_AHEAD && j < nbk; j++)
        B32_ISSUE(j);
    for (int k = 0; k < nbk; k++) {
        if (k + AMX_B32_AHEAD < nbk)
            B32_ISSUE(k + AMX_B32_AHEAD);
        AMX_BARRIER(c);
        const size_t ak = at + (size_t)k * (size_t)a->rows;
        b32_fold16(acc, c[k % (AMX_B32_AHEAD + 1)], &pk[k], a->dx + ak, a->x8 + ak, q4);
    }
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++)
        _mm512_mask_storeu_ps(y + (size_t)(r0 + r) * ldy, mask16(nv), acc[r]);
}

/* Rows [0, rows) (whole tiles) x outputs [o0, o1); false (nothing written) when the side
 * table cannot be allocated. */
TA static bool amx_b32(float *y, int ldy, const void *xq, size_t ldq, const int32_t *xsum, int rows, int n,
                       const void *w, size_t ldw, int o0, int o1, bool acc, bool q4, const void *table)
{
    _Alignas(64) b32_pack_t pk[B32_PIECE];
    const int nb = n / QK8_0, tiles = rows / 16;
    b32_act_t a;
    if (table) {
        b32_act_view(&a, (void *)(uintptr_t)table, rows, nb);
    } else {
        if (!b32_act_alloc(&a, rows, nb))
            return false;
        b32_act(&a, xq, ldq, xsum, nb, q4, 0, rows);
    }
    load_cfg(32, 8);
    for (int o = o0; o < o1; o += 16) {
        const int nv = o1 - o < 16 ? o1 - o : 16;
        const unsigned char *wr[16];
        for (int i = 0; i < 16; i++)
            wr[i] = (const unsigned char *)w + (size_t)(o + (i < nv ? i : nv - 1)) * ldw;
        for (int b0 = 0; b0 < nb; b0 += B32_PIECE) {
            const int nbk = nb - b0 < B32_PIECE ? nb - b0 : B32_PIECE;
            for (int k = 0; k < nbk; k++)
                b32_pack(&pk[k], wr, b0 + k, q4);
            AMX_BARRIER(pk);
            for (int tt = 0; tt < tiles; tt++) {
                if (q4)
                    b32_tiles(y + o, ldy, 16 * tt, pk, b0, nbk, nv, acc || b0 > 0, &a, true);
                else
                    b32_tiles(y + o, ldy, 16 * tt, pk, b0, nbk, nv, acc || b0 > 0, &a, false);
            }
        }
    }
    _tile_release();
    cairn_free(a.mem);
    return true;
}

/* ---- the rows of the table ------------------------------------------------------------------ */

/* The rows a call of `rows` rows runs on the tiles: whole tiles of 16, none below
 * AMX_MIN_ROWS. */
static int tiled_rows(int rows) { return rows >= AMX_MIN_ROWS ? rows / 16 * 16 : 0; }

/* The AMX tiles take the rows in whole tiles of 16; the rest (and small calls, and every
 * row of a call whose side table cannot be allocated) the VNNI kernel `vnni`, which computes
 * the same bits. TABLE: the driver's filled side table of the tiled rows, or NULL. */
#define AMX_QMM_BODY(VNNI, CALL)                                                                        \
    int tiled = tiled_rows(rows);                                                                       \
    if (tiled && !(CALL))                                                                               \
        tiled = 0;                                                                                      \
    if (rows > tiled) {                                                                                 \
        const int nb32 = n / QK8_0;                                                                     \
        VNNI(y + (size_t)tiled * ldy, ldy, (const unsigned char *)xq + (size_t)tiled * ldq, ldq,        \
             xsum ? xsum + (size_t)tiled * (size_t)nb32 : NULL, rows - tiled, n, w, ldw, o0, o1, acc);  \
    }
#define AMX_QMM(NAME, VNNI, CALL)                                                                       \
    TA void NAME(KERN_QMM_ARGS)                                                                         \
    {                                                                                                   \
        const void *table = NULL;                                                                       \
        AMX_QMM_BODY(VNNI, CALL)                                                                        \
    }                                                                                                   \
    TA void NAME##_table(KERN_QMM_ARGS, const void *table) { AMX_QMM_BODY(VNNI, CALL) }
AMX_QMM(kern__amx_qmm_q4_k, kern__avx512_qmm_q4_k,
        amx_kq(y, ldy, xq, ldq, tiled, n, w, ldw, o0, o1, acc, CAIRN_DTYPE_Q4_K, table))
AMX_QMM(kern__amx_qmm_q5_k, kern__avx512_qmm_q5_k,
        amx_kq(y, ldy, xq, ldq, tiled, n, w, ldw, o0, o1, acc, CAIRN_DTYPE_Q5_K, table))
AMX_QMM(kern__amx_qmm_q6_k, kern__avx512_qmm_q6_k,
        amx_kq(y, ldy, xq, ldq, tiled, n, w, ldw, o0, o1, acc, CAIRN_DTYPE_Q6_K, table))
AMX_QMM(kern__amx_qmm_q8_0, kern__avx512_qmm_q8_0,
        amx_b32(y, ldy, xq, ldq, xsum, tiled, n, w, ldw, o0, o1, acc, false, table))
AMX_QMM(kern__amx_qmm_q4_0, kern__avx512_qmm_q4_0,
        amx_b32(y, ldy, xq, ldq, xsum, tiled, n, w, ldw, o0, o1, acc, true, table))

/* The side tables as the driver builds them once per call (kern_type_ops_t qmm_table_*):
 * the tiled rows' activation terms, the same table amx_kq / amx_b32 otherwise build per
 * task. */
size_t kern__amx_qmm_table_bytes_kq(int rows, int n) { return tiled_rows(rows) ? kq_act_bytes(tiled_rows(rows), n / QK_K) : 0; }
size_t kern__amx_qmm_table_bytes_b32(int rows, int n)
{
    return tiled_rows(rows) ? b32_act_bytes(tiled_rows(rows), n / QK8_0) : 0;
}
#define AMX_FILL(NAME, VIEW, FILL, NB, ...)                                                              \
    TA void NAME(void *table, const void *xq, size_t ldq, const int32_t *xsum, int rows, int n, int t0, int t1) \
    {                                                                                                    \
        (void)xsum;                                                                                      \
        const int tiled = tiled_rows(rows), nb = n / (NB);                                               \
        if (t1 * 16 > tiled)                                                                             \
            t1 = tiled / 16;                                                                             \
        if (t0 >= t1)                                                                                    \
            return;                                                                                      \
        VIEW##_t a;                                                                                      \
        VIEW##_view(&a, table, tiled, nb);                                                               \
        FILL(&a, xq, ldq, __VA_ARGS__, 16 * t0, 16 * t1);                                                \
    }
AMX_FILL(kern__amx_qmm_table_fill_q4_k, kq_act, kq_act, QK_K, nb, false)
AMX_FILL(kern__amx_qmm_table_fill_q6_k, kq_act, kq_act, QK_K, nb, true)
AMX_FILL(kern__amx_qmm_table_fill_q8_0, b32_act, b32_act, QK8_0, xsum, nb, false)
AMX_FILL(kern__amx_qmm_table_fill_q4_0, b32_act, b32_act, QK8_0, xsum, nb, true)
