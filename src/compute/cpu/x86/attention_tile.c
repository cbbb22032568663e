/*
 * attention_tile.c — the tile order of bf16 K/V attention (attention_impl.h, steps 1T and
 * 4T) on AMX-BF16 tiles, for every attention row of an AMX machine (decode rows too).
 *
 * Model. The order is what the tiles compute, so this file is its definition on the CPU it
 * runs on (no emulation exists: the device's Xeon sums a K = 32 step with one rounding of
 * an internal adder of finite width). What makes a row's bits independent of batch,
 * chunking, threads and prefix hits is only the tiles' row independence (C[i][j] depends
 * on c, A row i and B column j) and fixed blocks:
 *  - scores (step 1T, scores16_t): C [16 rows][16 keys] from zero, hd32 / 32 steps of
 *    K = 32 in order: A = 16 packed q rows (bf16, 32 per step; the slots of attention.c's
 *    qpad, stride hdp floats), B = the 16 keys' pairs of the step (attention.c's kt: the
 *    keys' bf16 rows as stored, transposed as dwords [hd32/2][16], zero past head_dim);
 *    up to 4 row tiles share each B. A row tile past
 *    the last row reads other slots' (or stale) q rows, whose C rows are never stored;
 *    each valid row is scaled (one f32 product) into s.
 *  - p.v (step 4T, pv_tile): per block of 256 keys aligned to position 0 (attention.c's
 *    TILE_PV_BLOCK), V (bf16 as stored) packed once as pairs of positions (vp [128][hd16]
 *    dwords, zero past nk), and per 16-row tile holding a row with keys in the block: P
 *    packed (each row's e_j in its key range rounded to bf16 by vcvtne2ps2bf16, +0
 *    elsewhere and in rows past the last), C zeroed, eight K = 32 steps, C stored and
 *    added to acc (f32). V may come packed beforehand (pv_pack, once per call and K/V head
 *    by attention.c, shared by all its units; pv_tile_vp restricts a packed block to the
 *    unit's positions, zero elsewhere): the tiles then see the same operands as when the
 *    unit packs V itself.
 * Tiles: tmm0-3 C (16 x 64 B), tmm4-5 A (16 x 64 B), tmm6-7 B (16 x 64 B): one
 * configuration for both, loaded by tiles_begin for a whole unit of attention.c and
 * released by tiles_end.
 *
 * The sanity check (once per process, before the tile order is chosen): the tiles'
 * scores and p.v of a random problem within 2e-2 relative of the exact products (double),
 * and one row computed alone equal to the same row inside a full tile (row independence)
 * — it guards against a broken tile configuration or a CPU whose tiles misbehave, not
 * against the rounding, which is whatever this CPU's is. CAIRN_ATTN_BF16TILE=0 keeps the
 * tiles (and the tile order) off.
 *
 * Thread-safety: pure functions, each call owning the tile state of its thread; the
 * decision behind a mutex, read atomically.
 */
#include "compute/cpu/x86/x86_impls.h"
#include "compute/cpu/attention_impl.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

/* ATTN_TILE_PORTABLE (tests only: test_attention_tile_emulated_portable, on CPUs without
 * AVX-512): the packing, scaling and accumulation below in plain C with the same results
 * (moves, exact conversions, one f32 product or sum each, vcvtneps2bf16's rounding as
 * attn__bf16_round), the softmax and key transpose the generic ones; with the tile
 * instructions modelled, nothing here then needs AVX-512. */
#ifdef ATTN_TILE_PORTABLE
#define TT
#else
#define TT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,amx-tile,amx-bf16")))
#endif

enum {
    MAX_HD = 256, /* head_dim the packing buffers hold (attention.c asserts it) */
    KB = 256,     /* keys per p.v block (attention.c's TILE_PV_BLOCK): 8 steps of K = 32 */
};

/* ldtilecfg's 64-byte operand (palette 1). */
typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_cfg_t;

TT static void tile_begin(void)
{
    _Alignas(64) tile_cfg_t c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++)
        c.rows[t] = 16, c.colsb[t] = 64;
    /* x86_impls.h, AMX_BARRIER: GCC's _tile_loadconfig declares 8 of the 64 bytes read. */
    AMX_BARRIER(c);
    _tile_loadconfig(&c);
}

TT static void tile_end(void) { _tile_release(); }

static int round32(int hd) { return (hd + 31) / 32 * 32; }

/* The vector steps of the primitives: scale_row (16 scores times scale), v_pack (pairs
 * of positions of V, zero past nk and hd), p_pack_row (a row's e_j in its keys, bf16, +0
 * elsewhere), add_row (acc += 16 tile sums, d < hd). */
#ifndef ATTN_TILE_PORTABLE
TT static inline __mmask16 tail16(int valid)
{
    return valid >= 16 ? (__mmask16)0xffff : valid <= 0 ? (__mmask16)0 : (__mmask16)((1u << valid) - 1u);
}

TT static inline void scale_row(float *s, const float *c, float scale)
{
    _mm512_storeu_ps(s, _mm512_mul_ps(_mm512_load_ps(c), _mm512_set1_ps(scale)));
}

TT static void v_pack(uint32_t *vp, const uint16_t *vb, int nk, int hd, int hd16)
{
    for (int i = 0; i < KB / 2; i++) {
        const bool v0ok = 2 * i < nk, v1ok = 2 * i + 1 < nk;
        const uint16_t *v0 = vb + (size_t)(2 * i) * hd, *v1 = v0 + hd;
        for (int d = 0; d < hd16; d += 16) {
            const __mmask16 m = tail16(hd - d);
            const __m512i lo = v0ok ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, v0 + d)) : _mm512_setzero_si512();
            const __m512i hi = v1ok ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, v1 + d)) : _mm512_setzero_si512();
            _mm512_store_si512(vp + (size_t)i * hd16 + d, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
    }
}

/* The keys [j0, j1) that fall in [h, h + 16), as a mask of 16 lanes. */
TT static inline __mmask16 range16(int j0, int j1, int h)
{
    const int a = j0 - h < 0 ? 0 : j0 - h > 16 ? 16 : j0 - h, b = j1 - h < 0 ? 0 : j1 - h > 16 ? 16 : j1 - h;
    return b > a ? (__mmask16)(((1u << b) - 1u) & ~((1u << a) - 1u)) : (__mmask16)0;
}

TT static void p_pack_row(uint16_t *pb, const float *pr, int j0, int j1)
{
    for (int h = 0; h < KB; h += 32) {
        const __mmask16 mlo = range16(j0, j1, h), mhi = range16(j0, j1, h + 16);
        if (!(mlo | mhi)) {
            _mm512_store_si512(pb + h, _mm512_setzero_si512());
            continue;
        }
        const __m512 lo = _mm512_maskz_loadu_ps(mlo, pr + h), hi = _mm512_maskz_loadu_ps(mhi, pr + h + 16);
        const __m512bh b = _mm512_cvtne2ps_pbh(hi, lo);
        memcpy(pb + h, &b, sizeof b);
    }
}

TT static inline void add_row(float *a, const float *c, int valid)
{
    const __mmask16 m = tail16(valid);
    _mm512_mask_storeu_ps(a, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, a), _mm512_load_ps(c)));
}

static float tile_softmax(float *s, int n) { return kern__avx512_softmax(s, n); }
static void tile_transpose16(float *kt, const float *kb, int hd) { kern__avx512_transpose16(kt, kb, hd); }
#else
static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static void scale_row(float *s, const float *c, float scale)
{
    for (int k = 0; k < 16; k++)
        s[k] = c[k] * scale;
}

static void v_pack(uint32_t *vp, const uint16_t *vb, int nk, int hd, int hd16)
{
    for (int i = 0; i < KB / 2; i++)
        for (int d = 0; d < hd16; d++) {
            const uint32_t lo = 2 * i < nk && d < hd ? vb[(size_t)(2 * i) * hd + d] : 0;
            const uint32_t hi = 2 * i + 1 < nk && d < hd ? vb[(size_t)(2 * i + 1) * hd + d] : 0;
            vp[(size_t)i * hd16 + d] = lo | hi << 16;
        }
}

static void p_pack_row(uint16_t *pb, const float *pr, int j0, int j1)
{
    for (int k = 0; k < KB; k++)
        pb[k] = k >= j0 && k < j1 ? (uint16_t)(bits_of(attn__bf16_round(pr[k])) >> 16) : 0;
}

static void add_row(float *a, const float *c, int valid)
{
    for (int d = 0; d < 16 && d < valid; d++)
        a[d] = a[d] + c[d];
}

static float tile_softmax(float *s, int n) { return attn__generic.softmax(s, n); }

static void tile_transpose16(float *kt, const float *kb, int hd) /* bits moved as dwords */
{
    const int hdp = (hd + 15) / 16 * 16;
    uint32_t w;
    for (int d = 0; d < hdp; d++)
        for (int k = 0; k < 16; k++) {
            w = 0;
            if (d < hd)
                memcpy(&w, kb + (size_t)k * hd + d, 4);
            memcpy(kt + (size_t)d * 16 + k, &w, 4);
        }
}
#endif

/* The tile order's q slot: hd32 bf16 values (q rounded as step 1' says, zero past hd) in
 * the first half of the slot of hdp floats (hd32 <= 2 hdp). */
static void tile_pack_q(float *slot, const float *q, int hd, int hdp)
{
    (void)hdp;
    kern__avx512_pair_pack_q(slot, q, hd, round32(hd));
}

/* Step 1T: s[r * lds + k] = scale * the tile dot of q row r with key k of kt, the keys'
 * bf16 pairs as dwords [hd32 / 2][16] (attn_impl_t's pv_tile). */
TT static void tile_scores16_t(float *s, size_t lds, const float *q, int rows, const float *kt, int hdp, float scale)
{
    const int hd32 = round32(hdp), steps = hd32 / 32;
    const uint32_t *kp = (const uint32_t *)kt;
    _Alignas(64) float c[4][16][16];
    CAIRN_ASSERT(hd32 <= MAX_HD);
    const long qstride = (long)hdp * 4;
    AMX_BARRIER(*kp); /* and, by its memory clobber, the rest of kt */
    for (int r0 = 0; r0 < rows; r0 += 64) {
        const int left = rows - r0, nt = left >= 64 ? 4 : (left + 15) / 16;
        const char *a = (const char *)(q + (size_t)r0 * hdp);
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int st = 0; st < steps; st++) {
            _tile_loadd(6, kp + (size_t)st * 256, 64);
            _tile_loadd(4, a + 64 * st, qstride);
            _tile_dpbf16ps(0, 4, 6);
            if (nt > 1) {
                _tile_loadd(5, a + 16 * qstride + 64 * st, qstride);
                _tile_dpbf16ps(1, 5, 6);
            }
            if (nt > 2) {
                _tile_loadd(4, a + 32 * qstride + 64 * st, qstride);
                _tile_dpbf16ps(2, 4, 6);
            }
            if (nt > 3) {
                _tile_loadd(5, a + 48 * qstride + 64 * st, qstride);
                _tile_dpbf16ps(3, 5, 6);
            }
        }
        _tile_stored(0, c[0], 64);
        _tile_stored(1, c[1], 64);
        _tile_stored(2, c[2], 64);
        _tile_stored(3, c[3], 64);
        AMX_BARRIER(c);
        const int n = left < 64 ? left : 64;
        for (int r = 0; r < n; r++)
            scale_row(s + (size_t)(r0 + r) * lds, c[r / 16][r % 16], scale);
    }
}

/* V of one block packed as pairs of positions (attention_impl.h, pv_pack): vp [KB / 2][hd16]
 * dwords, zero past nk and past hd. */
TT static void tile_pv_pack(uint32_t *vp, const uint16_t *vb, int nk, int hd)
{
    v_pack(vp, vb, nk, hd, (hd + 15) / 16 * 16);
}

/* vp restricted to the positions [a, b) of its block: the others' halves zero (moves only). */
static void vp_restrict(uint32_t *dst, const uint32_t *src, int a, int b, int hd16)
{
    for (int i = 0; i < KB / 2; i++) {
        const bool lo = 2 * i >= a && 2 * i < b, hi = 2 * i + 1 >= a && 2 * i + 1 < b;
        const uint32_t m = (lo ? 0xffffu : 0u) | (hi ? 0xffff0000u : 0u);
        const uint32_t *s = src + (size_t)i * hd16;
        uint32_t *d = dst + (size_t)i * hd16;
        if (m == 0xffffffffu)
            memcpy(d, s, (size_t)hd16 * sizeof *d);
        else if (!m)
            memset(d, 0, (size_t)hd16 * sizeof *d);
        else
            for (int j = 0; j < hd16; j++)
                d[j] = s[j] & m;
    }
}

/* The tiles of step 4T for one block of keys, V given packed (vp, 64-byte aligned; NULL:
 * packed here from vb on the first row tile that needs it, into local). */
TT static void pv_core(float *acc, int lda, const float *p, size_t ldp, int rows, int G, const int *j0,
                       const int *j1, const uint32_t *vp, const uint16_t *vb, int nk, int hd, uint32_t *local)
{
    const int hd16 = (hd + 15) / 16 * 16;
    _Alignas(64) uint16_t pb[16][KB];
    _Alignas(64) float c[4][16][16];
    CAIRN_ASSERT(hd16 <= MAX_HD && nk <= KB);
    for (int r0 = 0; r0 < rows; r0 += 16) {
        const int n = rows - r0 < 16 ? rows - r0 : 16;
        bool any = false;
        for (int r = r0; r < r0 + n && !any; r++)
            any = j0[r / G] < j1[r / G];
        if (!any)
            continue;
        if (!vp) { /* V as pairs of positions, zero past nk and past hd */
            v_pack(local, vb, nk, hd, hd16);
            vp = local;
        }
        for (int i = 0; i < 16; i++) {
            const int r = r0 + i;
            if (i < n)
                p_pack_row(pb[i], p + (size_t)r * ldp, j0[r / G], j1[r / G]);
            else
                p_pack_row(pb[i], p, 0, 0); /* rows past the last: P = +0 */
        }
        AMX_BARRIER(pb);
        AMX_BARRIER(*vp); /* and, by its memory clobber, the rest of vp */
        const long vstride = (long)hd16 * 4;
        for (int d0 = 0; d0 < hd16; d0 += 64) {
            const int nd = (hd16 - d0) / 16 < 4 ? (hd16 - d0) / 16 : 4;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int st = 0; st < KB / 32; st++) {
                const uint32_t *b = vp + (size_t)(16 * st) * hd16 + d0;
                _tile_loadd(4, &pb[0][32 * st], (long)sizeof pb[0]);
                _tile_loadd(6, b, vstride);
                _tile_dpbf16ps(0, 4, 6);
                if (nd > 1) {
                    _tile_loadd(7, b + 16, vstride);
                    _tile_dpbf16ps(1, 4, 7);
                }
                if (nd > 2) {
                    _tile_loadd(6, b + 32, vstride);
                    _tile_dpbf16ps(2, 4, 6);
                }
                if (nd > 3) {
                    _tile_loadd(7, b + 48, vstride);
                    _tile_dpbf16ps(3, 4, 7);
                }
            }
            _tile_stored(0, c[0], 64);
            _tile_stored(1, c[1], 64);
            _tile_stored(2, c[2], 64);
            _tile_stored(3, c[3], 64);
            AMX_BARRIER(c);
            for (int i = 0; i < n; i++) {
                const int r = r0 + i;
                if (j0[r / G] >= j1[r / G])
                    continue; /* no key in the block: T = +0, acc unchanged */
                float *a = acc + (size_t)r * lda + d0;
                for (int t = 0; t < nd; t++)
                    add_row(a + 16 * t, c[t][i], hd - d0 - 16 * t);
            }
        }
    }
}

/* Step 4T for one block of keys (attention_impl.h, pv_tile): V packed here, per call. */
TT static void tile_pv(float *acc, int lda, const float *p, size_t ldp, int rows, int G, const int *j0, const int *j1,
                    int nk, const uint16_t *vb, int hd)
{
    _Alignas(64) uint32_t vp[KB / 2 * MAX_HD];
    pv_core(acc, lda, p, ldp, rows, G, j0, j1, NULL, vb, nk, hd, vp);
}

/* Step 4T with V packed beforehand (attention_impl.h, pv_tile_vp): positions outside
 * [a, b) of the block read as +0 (a copy of vp restricted to them, when needed). */
TT static void tile_pv_vp(float *acc, int lda, const float *p, size_t ldp, int rows, int G, const int *j0,
                       const int *j1, const uint32_t *vp, int a, int b, int hd)
{
    if (a <= 0 && b >= KB) {
        pv_core(acc, lda, p, ldp, rows, G, j0, j1, vp, NULL, KB, hd, NULL);
        return;
    }
    _Alignas(64) uint32_t local[KB / 2 * MAX_HD];
    bool any = false;
    for (int r = 0; r < rows && !any; r++)
        any = j0[r / G] < j1[r / G];
    if (!any)
        return;
    vp_restrict(local, vp, a, b, (hd + 15) / 16 * 16);
    pv_core(acc, lda, p, ldp, rows, G, j0, j1, local, NULL, KB, hd, NULL);
}

const attn_impl_t attn__amx_tile = {.name = "amx-tile",
                                    .softmax = tile_softmax,
                                    .scores16_t = tile_scores16_t,
                                    .transpose16 = tile_transpose16,
                                    .pack_q = tile_pack_q,
                                    .pv_tile = tile_pv,
                                    .pv_pack = tile_pv_pack,
                                    .pv_tile_vp = tile_pv_vp,
                                    .tiles_begin = tile_begin,
                                    .tiles_end = tile_end};

/* ---- the sanity check ------------------------------------------------------------------ */

static uint32_t chk_rng(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* A bf16 value as f32 in [-1, 1) (one in 16 zero). */
static float chk_value(uint32_t *s)
{
    const uint32_t r = chk_rng(s);
    if ((r & 15) == 0)
        return 0.0f;
    float v = (float)(r >> 4 & 0xffff) / 32768.0f - 1.0f;
    uint32_t u;
    memcpy(&u, &v, 4);
    u &= 0xffff0000u;
    memcpy(&v, &u, 4);
    return v;
}

static float bf16_value(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t bf16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}

/* 1: the tiles' products are close to the exact ones and rows independent; 0: not;
 * -1: no memory for the check. */
static int sanity_check(void)
{
    enum { R = 48, HD = 128, LD = KB };
    const size_t qf = (size_t)2 * (R + 16) * HD, kf = (size_t)HD / 2 * 16, sf = (size_t)2 * R * LD,
                 vf = (size_t)KB * HD / 2, af = (size_t)R * HD;
    float *buf = cairn_malloc(sizeof(float) * (qf + kf + sf + vf + af));
    if (!buf)
        return -1;
    float *q = buf, *q1 = q + (R + 16) * HD, *s = buf + qf, *s1 = s + R * LD, *a = s + sf;
    uint32_t *kp = (uint32_t *)(buf + qf + sf + af);     /* [HD/2][16] pairs of 16 keys */
    uint16_t *vb = (uint16_t *)(kp + kf);                /* [KB][HD] */
    uint32_t st = 0x2545f491u;
    float row[HD];
    for (int r = 0; r < R + 16; r++) {
        for (int d = 0; d < HD; d++)
            row[d] = chk_value(&st);
        attn__pair_pack_q(q + (size_t)r * HD, row, HD, HD);
    }
    memset(q1, 0, sizeof(float) * (R + 16) * HD);
    memcpy(q1, q + (size_t)5 * HD, sizeof(float) * HD); /* row 5 alone */
    for (size_t i = 0; i < kf; i++)
        kp[i] = (uint32_t)bf16_bits(chk_value(&st)) | (uint32_t)bf16_bits(chk_value(&st)) << 16;
    for (int i = 0; i < R * LD; i++)
        s[i] = fabsf(chk_value(&st));
    for (int i = 0; i < KB * HD; i++)
        vb[i] = bf16_bits(chk_value(&st));
    memset(a, 0, sizeof(float) * R * HD);
    int ok = 1;
    tile_begin();
    /* p.v first (it reads s as probabilities), then the scores overwrite s. */
    int j0[R], j1[R];
    for (int r = 0; r < R; r++)
        j0[r] = r % 3, j1[r] = KB - r % 5;
    tile_pv(a, HD, s, LD, R, 1, j0, j1, KB, vb, HD);
    for (int r = 0; r < R && ok; r++)
        for (int d = 0; d < HD; d++) {
            double e = 0, mag = 0;
            for (int j = j0[r]; j < j1[r]; j++) {
                const double t = (double)attn__bf16_round(s[(size_t)r * LD + j]) * bf16_value(vb[(size_t)j * HD + d]);
                e += t;
                mag += fabs(t);
            }
            if (fabs(a[(size_t)r * HD + d] - e) > 2e-2 * mag + 1e-6)
                ok = 0;
        }
    tile_scores16_t(s, LD, q, R, (const float *)kp, HD, 1.0f);
    tile_scores16_t(s1, LD, q1, 1, (const float *)kp, HD, 1.0f);
    tile_end();
    ok &= !memcmp(s + (size_t)5 * LD, s1, 16 * sizeof(float));
    for (int r = 0; r < R && ok; r++)
        for (int k = 0; k < 16; k++) {
            const uint16_t *qb = (const uint16_t *)(q + (size_t)r * HD);
            double e = 0, mag = 0;
            for (int d = 0; d < HD; d++) {
                const uint32_t w = kp[(d / 2) * 16 + k];
                const double t = (double)bf16_value(qb[d]) * bf16_value((uint16_t)(d % 2 ? w >> 16 : w & 0xffff));
                e += t;
                mag += fabs(t);
            }
            if (fabs(s[(size_t)r * LD + k] - e) > 2e-2 * mag + 1e-6)
                ok = 0;
        }
    cairn_free(buf);
    return ok;
}

enum { TILE_UNKNOWN = 0, TILE_NO_AMX, TILE_CHECK_FAILED, TILE_ON };
static int tile_mode = TILE_UNKNOWN; /* atomic; written under the mutex */
static pthread_mutex_t tile_lock = PTHREAD_MUTEX_INITIALIZER;

static int tile_decide(void)
{
    int m = __atomic_load_n(&tile_mode, __ATOMIC_ACQUIRE);
    if (m != TILE_UNKNOWN)
        return m;
    pthread_mutex_lock(&tile_lock);
    if ((m = tile_mode) == TILE_UNKNOWN) {
        if (!kern__x86_has_amx_bf16()) {
            m = TILE_NO_AMX;
        } else {
            const int ok = sanity_check();
            m = ok < 0 ? TILE_UNKNOWN : ok ? TILE_ON : TILE_CHECK_FAILED;
        }
        __atomic_store_n(&tile_mode, m, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&tile_lock);
    return m;
}

bool kern__attn_tile_amx_usable(void) { return tile_decide() == TILE_ON; }

const char *kern__attn_tile_amx_state(void)
{
    switch (tile_decide()) {
    case TILE_NO_AMX: return "no AMX-BF16 (or no tile permission)";
    case TILE_CHECK_FAILED: return "AMX-BF16 tiles failed the tile order's sanity check";
    case TILE_ON: return "AMX-BF16 tiles, K = 32 steps";
    default: return "undecided (no memory for the sanity check yet)";
    }
}
