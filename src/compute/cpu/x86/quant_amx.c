/*
 * quant_amx.c — AMX-INT8 rendition of the quantized matmul's prefill shape (kernels_impl.h,
 * canonical quantized order); everything else of the "amx" implementation is "avx512"'s.
 *
 * Model. A call with at least AMX_MIN_ROWS rows runs its rows in tiles of 16 (two tiles at
 * a time) against tiles of 16 outputs; the rows left over (rows % 16) and calls with fewer
 * rows run the AVX-512 VNNI kernels (quant_avx512.c). Both give the canonical bits: a row's
 * result does not depend on which kernel computed it.
 *
 *  - k-quants (q4_k, q5_k, q6_k). The integer S = sum_j sc_j sum_(i in j) q_i x_i of one
 *    super-block is sum_i w_i x_i with w_i = sc_j q_i (j the sub-block of i), which does not
 *    fit a byte; it is split into two digits, w_i = 2^s h_i + l_i (s = 5 for q4_k / q5_k,
 *    6 for q6_k, whose signed scales make h signed), each a byte. Two TDPBSSD chains over
 *    the 256 elements (four steps of 64) give C_h and C_l for 16 rows x 16 outputs, and
 *    S = (C_h << s) + C_l exactly. The mins term M (and q6_k's -32 offset) comes from the
 *    activation block's bsums as in the VNNI kernel; then the float chain per block.
 *  - q8_0, q4_0: per block of 32, C = sum_i w_i x_i by one TDPBSSD (q4_0 weights 0..15,
 *    minus 8 sum x from the activation sums), then the block's float step.
 * The tiles: tmm0-3 accumulators (C_h, C_l of row tiles 0 and 1; or C of row tiles 0, 1),
 * tmm4-5 activations of the two row tiles, tmm6-7 weights (h, l digits; or one).
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
#include <string.h>

#include "compute/quant_blocks.h"

#define TA __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,amx-tile,amx-int8")))
#define INLINE static inline __attribute__((always_inline))

enum {
    AMX_MIN_ROWS = 32, /* fewer rows: the VNNI kernels (the packing would not pay) */
    KQ_PIECE = 4,      /* k-quant super-blocks packed at a time (2 x 4 KiB each) */
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
 * digit of output o's element 64g + 4k + t; mp[p] lane o = the int16 pair multiplying the
 * activation bsums pair p (the VNNI kernel's); d, dmin lane o = the block's scales. */
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
            for (int j = 0; j < 8; j++) {
                int sc6, m;
                quant_k4_scale_min(blk + 4, j, &sc6, &m);
                pk->mp[j][o] = (int32_t)((uint32_t)m | (uint32_t)m << 16);
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

/* acc (16 floats, lanes o) of one row gets one super-block: S (exact), M from the bsums,
 * then the canonical float steps (quant_avx512.c's pk_rows_k_n, lane for lane). */
TA INLINE __m512 kq_fold(__m512 acc, __m512i ch, __m512i cl, int s, const kq_pack_t *pk, const blk_q8_k_t *x, bool q6)
{
    __m512i S = _mm512_add_epi32(_mm512_sll_epi32(ch, _mm_cvtsi32_si128(s)), cl);
    __m512i M = _mm512_setzero_si512();
    for (int p = 0; p < 8; p++) {
        int32_t bp;
        memcpy(&bp, &x->bsums[2 * p], 4);
        M = _mm512_dpwssd_epi32(M, _mm512_load_si512(pk->mp[p]), _mm512_set1_epi32(bp));
    }
    const __m512 dx = _mm512_set1_ps(x->d);
    if (q6) {
        S = _mm512_sub_epi32(S, _mm512_slli_epi32(M, 5)); /* the -32 of every q */
        return _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(_mm512_load_ps(pk->d), dx), acc);
    }
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(_mm512_load_ps(pk->d), dx), acc);
    return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(_mm512_load_ps(pk->dmin), dx), acc);
}

/* Rows r0 .. r0 + 16 * nt - 1 (nt = 1 or 2 row tiles) x the 16 outputs at y + o, over the
 * packed super-blocks pk[0 .. nbk) (blocks b0 ..), continuing from y when from_y. */
TA static void kq_tiles(float *y, int ldy, const void *xq, size_t ldq, int r0, int nt, const kq_pack_t *pk,
                        int b0, int nbk, int nv, bool from_y, cairn_dtype_t t)
{
    const int s = t == CAIRN_DTYPE_Q6_K ? 6 : 5;
    const bool q6 = t == CAIRN_DTYPE_Q6_K;
    _Alignas(64) int32_t ch[2][16][16], cl[2][16][16];
    __m512 acc[32];
    for (int r = 0; r < 16 * nt; r++)
        acc[r] = from_y ? _mm512_maskz_loadu_ps(mask16(nv), y + (size_t)(r0 + r) * ldy) : _mm512_setzero_ps();
    for (int k = 0; k < nbk; k++) {
        const unsigned char *xb0 = (const unsigned char *)xq + (size_t)r0 * ldq + (size_t)(b0 + k) * sizeof(blk_q8_k_t) +
                                   offsetof(blk_q8_k_t, q);
        const unsigned char *xb1 = nt > 1 ? xb0 + 16 * ldq : xb0;
        _tile_zero(0);
        _tile_zero(1);
        if (nt > 1) {
            _tile_zero(2);
            _tile_zero(3);
        }
        for (int g = 0; g < 4; g++) {
            _tile_loadd(6, pk[k].hd[g], 64);
            _tile_loadd(7, pk[k].ld[g], 64);
            _tile_loadd(4, xb0 + 64 * g, (long)ldq);
            _tile_dpbssd(0, 4, 6);
            _tile_dpbssd(1, 4, 7);
            if (nt > 1) {
                _tile_loadd(5, xb1 + 64 * g, (long)ldq);
                _tile_dpbssd(2, 5, 6);
                _tile_dpbssd(3, 5, 7);
            }
        }
        _tile_stored(0, ch[0], 64);
        _tile_stored(1, cl[0], 64);
        if (nt > 1) {
            _tile_stored(2, ch[1], 64);
            _tile_stored(3, cl[1], 64);
        }
        AMX_BARRIER(ch);
        for (int r = 0; r < 16 * nt; r++) {
            const blk_q8_k_t *x = (const blk_q8_k_t *)((const unsigned char *)xq + (size_t)(r0 + r) * ldq) + b0 + k;
            acc[r] = kq_fold(acc[r], _mm512_load_si512(ch[r / 16][r % 16]), _mm512_load_si512(cl[r / 16][r % 16]), s,
                             &pk[k], x, q6);
        }
    }
    for (int r = 0; r < 16 * nt; r++)
        _mm512_mask_storeu_ps(y + (size_t)(r0 + r) * ldy, mask16(nv), acc[r]);
}

TA static void amx_kq(float *y, int ldy, const void *xq, size_t ldq, int rows, int n, const void *w, size_t ldw,
                      int o0, int o1, bool acc, cairn_dtype_t t)
{
    _Alignas(64) kq_pack_t pk[KQ_PIECE];
    const int nb = n / QK_K, tiles = rows / 16;
    load_cfg(64, 16);
    for (int o = o0; o < o1; o += 16) {
        const int nv = o1 - o < 16 ? o1 - o : 16;
        const unsigned char *wr[16];
        for (int i = 0; i < 16; i++)
            wr[i] = (const unsigned char *)w + (size_t)(o + (i < nv ? i : nv - 1)) * ldw;
        for (int b0 = 0; b0 < nb; b0 += KQ_PIECE) {
            const int nbk = nb - b0 < KQ_PIECE ? nb - b0 : KQ_PIECE;
            for (int k = 0; k < nbk; k++)
                kq_pack(&pk[k], wr, b0 + k, t);
            AMX_BARRIER(pk);
            for (int tt = 0; tt < tiles; tt += 2)
                kq_tiles(y + o, ldy, xq, ldq, 16 * tt, tiles - tt >= 2 ? 2 : 1, pk, b0, nbk, nv, acc || b0 > 0, t);
        }
    }
    _tile_release();
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

TA static void b32_tiles(float *y, int ldy, const void *xq, size_t ldq, const int32_t *xsum, int nb, int r0, int nt,
                         const b32_pack_t *pk, int b0, int nbk, int nv, bool from_y, bool q4)
{
    _Alignas(64) int32_t c[2][16][16];
    __m512 acc[32];
    for (int r = 0; r < 16 * nt; r++)
        acc[r] = from_y ? _mm512_maskz_loadu_ps(mask16(nv), y + (size_t)(r0 + r) * ldy) : _mm512_setzero_ps();
    for (int k = 0; k < nbk; k++) {
        const unsigned char *xb0 = (const unsigned char *)xq + (size_t)r0 * ldq + (size_t)(b0 + k) * sizeof(blk_q8_0_t) +
                                   offsetof(blk_q8_0_t, q);
        _tile_loadd(6, pk[k].q, 64);
        _tile_zero(0);
        _tile_loadd(4, xb0, (long)ldq);
        _tile_dpbssd(0, 4, 6);
        if (nt > 1) {
            _tile_zero(1);
            _tile_loadd(5, xb0 + 16 * ldq, (long)ldq);
            _tile_dpbssd(1, 5, 6);
        }
        _tile_stored(0, c[0], 64);
        if (nt > 1)
            _tile_stored(1, c[1], 64);
        AMX_BARRIER(c);
        const __m512 dw = _mm512_load_ps(pk[k].d);
        for (int r = 0; r < 16 * nt; r++) {
            const int rr = r0 + r;
            const blk_q8_0_t *x = (const blk_q8_0_t *)((const unsigned char *)xq + (size_t)rr * ldq) + b0 + k;
            __m512i s = _mm512_load_si512(c[r / 16][r % 16]);
            if (q4)
                s = _mm512_sub_epi32(s, _mm512_set1_epi32(8 * xsum[(size_t)rr * (size_t)nb + b0 + k]));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(h2f(x->d))), acc[r]);
        }
    }
    for (int r = 0; r < 16 * nt; r++)
        _mm512_mask_storeu_ps(y + (size_t)(r0 + r) * ldy, mask16(nv), acc[r]);
}

TA static void amx_b32(float *y, int ldy, const void *xq, size_t ldq, const int32_t *xsum, int rows, int n,
                       const void *w, size_t ldw, int o0, int o1, bool acc, bool q4)
{
    _Alignas(64) b32_pack_t pk[B32_PIECE];
    const int nb = n / QK8_0, tiles = rows / 16;
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
            for (int tt = 0; tt < tiles; tt += 2)
                b32_tiles(y + o, ldy, xq, ldq, xsum, nb, 16 * tt, tiles - tt >= 2 ? 2 : 1, pk, b0, nbk, nv,
                          acc || b0 > 0, q4);
        }
    }
    _tile_release();
}

/* ---- the rows of the table ------------------------------------------------------------------ */

/* The AMX tiles take the rows in whole tiles of 16; the rest (and small calls) the VNNI
 * kernel `vnni`, which computes the same bits. */
#define AMX_QMM(NAME, VNNI, CALL)                                                                       \
    TA void NAME(KERN_QMM_ARGS)                                                                         \
    {                                                                                                   \
        const int tiled = rows >= AMX_MIN_ROWS ? rows / 16 * 16 : 0;                                    \
        if (tiled)                                                                                      \
            CALL;                                                                                       \
        if (rows > tiled) {                                                                             \
            const int nb32 = n / QK8_0;                                                                 \
            VNNI(y + (size_t)tiled * ldy, ldy, (const unsigned char *)xq + (size_t)tiled * ldq, ldq,    \
                 xsum ? xsum + (size_t)tiled * (size_t)nb32 : NULL, rows - tiled, n, w, ldw, o0, o1, acc); \
        }                                                                                               \
    }
AMX_QMM(kern__amx_qmm_q4_k, kern__avx512_qmm_q4_k, amx_kq(y, ldy, xq, ldq, tiled, n, w, ldw, o0, o1, acc, CAIRN_DTYPE_Q4_K))
AMX_QMM(kern__amx_qmm_q5_k, kern__avx512_qmm_q5_k, amx_kq(y, ldy, xq, ldq, tiled, n, w, ldw, o0, o1, acc, CAIRN_DTYPE_Q5_K))
AMX_QMM(kern__amx_qmm_q6_k, kern__avx512_qmm_q6_k, amx_kq(y, ldy, xq, ldq, tiled, n, w, ldw, o0, o1, acc, CAIRN_DTYPE_Q6_K))
AMX_QMM(kern__amx_qmm_q8_0, kern__avx512_qmm_q8_0, amx_b32(y, ldy, xq, ldq, xsum, tiled, n, w, ldw, o0, o1, acc, false))
AMX_QMM(kern__amx_qmm_q4_0, kern__avx512_qmm_q4_0, amx_b32(y, ldy, xq, ldq, xsum, tiled, n, w, ldw, o0, o1, acc, true))
