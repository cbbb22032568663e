/*
 * bf16_amx.c — AMX-BF16 rendition of the BF16-math matmul with bf16 weights (kernels_impl.h,
 * canonical BF16 order): the "amx" implementation's bf16 row; prefill of bf16 checkpoints.
 *
 * Model. The canonical order gives each (row, output) 16 lane accumulators: lane j takes the
 * pair (32b + 2j, 32b + 2j + 1) of every 32-element block b in increasing b, as vdpbf16ps
 * (odd element first, DAZ inputs, FTZ output, RNE), then the fixed 16 -> 1 tree. A TDPBF16PS
 * tile product adds into each C element the pairs of its K dimension one after the other,
 * with the same rounding in Intel's SDM (the checks below test that the CPU does). So the tiles run
 * one lane at a time, with the K dimension walking the blocks: for lane j, A row r holds
 * row r's pair j of blocks b0 .. b0+15 and B row k the 16 outputs' pair j of block b0 + k,
 * and C (16 rows x 16 outputs) is lane j's accumulator, exactly. Each lane's C is stored,
 * the blocks past the last whole 16 (nb % 16) are added with vdpbf16ps on the stored
 * values, and the tree reduces the 16 stored lanes into y. The pairs are stored with their
 * halves swapped when the tiles take the even element first (the SDM's order), so that the
 * tiles add the odd one first, as vdpbf16ps does.
 *
 * Packing (per call): the weights of the call's outputs [o0, o1) once, lane-major
 * (wp[group of 16][lane][block][16 outputs], a 16 x 16 dword transpose per block); x in
 * pieces of 32 rows (rounded by vcvtne2ps2bf16 as the canonical order says, then
 * lane-major xa[lane][row][block]). Rows past the last whole 16 (rows % 16), calls of fewer
 * than AMX_BF16_MIN_ROWS rows, F32 math, and calls whose buffers cannot be allocated run
 * the AVX-512 kernel (kernels_avx512.c), which gives the same bits: a row's result does not
 * depend on which kernel computed it, so not on the rows in the call.
 *
 * The checks. Before the first tiled call (once per process) a probe (one tile product on
 * crafted operands) tells which element of a pair the tiles add first and that they round
 * each product's sum, flush output denormals and read input denormals as zero; then a
 * self-check computes one whole product through the tiles and through the AVX-512 kernel
 * and compares the bits. A CPU without AMX-BF16, or whose tiles fail either check, runs the
 * AVX-512 kernel for every call: the bits never depend on the CPU's tile arithmetic, only
 * the speed. On the device machine's Xeon (family 6 model 207, 2026-12-01) the tiles passed
 * the probe (even element first) but their products differed from vdpbf16ps's
 * (test_quant_kernels' edge values; test_quant_determinism's q256 activations); the
 * self-check turns the tiles off there (device run amx2). bench/bench_amx_bf16_probe.c
 * characterized it (session 5): that CPU sums a pair's two products and rounds once before
 * adding to C (RNE(c + RNE(a0 b0 + a1 b1)) on every random element), and over two pairs
 * rounds close to once overall, so no tile chain gives vdpbf16ps's per-product roundings
 * there. The tiles are off by default: only CAIRN_AMX_BF16=1 lets the checks run and the
 * tiles serve (read once per process).
 *
 * Tiles: tmm0-3 the C of (row tile t, output group g) = tmm(2t + g), tmm4-5 A of the two
 * row tiles, tmm6-7 B of the two output groups; all 16 rows x 64 bytes. Each call loads its
 * configuration and releases the tiles before returning.
 *
 * Tiles only where kern__x86_has_amx_bf16() and the checks passed. Pure functions otherwise;
 * thread-safe (the checks' decision behind a mutex, read atomically).
 */
#include "compute/cpu/x86/x86_impls.h"

#include <immintrin.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#define TB __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,amx-tile,amx-bf16")))
#define INLINE static inline __attribute__((always_inline))

enum {
    AMX_BF16_MIN_ROWS = 32, /* fewer rows: the AVX-512 kernel (the packing would not pay) */
    XPIECE = 32,            /* rows of x packed at a time (two row tiles) */
    LANES = 16,
};

/* ldtilecfg's 64-byte operand (palette 1): every tile 16 rows x 64 bytes. */
typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_bf16_cfg_t;

TB INLINE void bf16_load_cfg(void)
{
    _Alignas(64) amx_bf16_cfg_t c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.rows[t] = 16;
        c.colsb[t] = 64;
    }
    AMX_BARRIER(c);
    _tile_loadconfig(&c);
}

/* acc += a.pair . b.pair per lane: vdpbf16ps (odd element first, DAZ, FTZ, RNE). */
TB INLINE __m512 vdpbf16(__m512 acc, __m512i a, __m512i b)
{
    __asm__("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

/* x[0 .. valid) (valid <= 32) rounded to bf16 as vcvtne2ps2bf16, zero past valid: 16 pairs. */
TB INLINE __m512i cvt32(const float *x, int valid)
{
    const __mmask16 m0 = valid >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (valid > 0 ? valid : 0)) - 1u);
    const int v1 = valid - 16;
    const __mmask16 m1 = v1 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (v1 > 0 ? v1 : 0)) - 1u);
    __m512 lo = _mm512_maskz_loadu_ps(m0, x), hi = _mm512_maskz_loadu_ps(m1, x + 16);
    __m512i r;
    __asm__("vcvtne2ps2bf16 %2, %1, %0" : "=v"(r) : "v"(hi), "v"(lo));
    return r;
}

/* v[i].dword[j] -> v[j].dword[i] (16 x 16 dwords). */
TB INLINE void transpose16(__m512i v[16])
{
    __m512i t[16], s[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    /* s[4i + e], 128-bit lane L: element 4L + e of rows 4i .. 4i+3 */
    for (int i = 0; i < 4; i++) {
        s[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        s[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        s[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        s[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int e = 0; e < 4; e++) {
        __m512i u0 = _mm512_shuffle_i32x4(s[e], s[4 + e], 0x88), u1 = _mm512_shuffle_i32x4(s[e], s[4 + e], 0xdd);
        __m512i w0 = _mm512_shuffle_i32x4(s[8 + e], s[12 + e], 0x88), w1 = _mm512_shuffle_i32x4(s[8 + e], s[12 + e], 0xdd);
        v[0 + e] = _mm512_shuffle_i32x4(u0, w0, 0x88);
        v[8 + e] = _mm512_shuffle_i32x4(u0, w0, 0xdd);
        v[4 + e] = _mm512_shuffle_i32x4(u1, w1, 0x88);
        v[12 + e] = _mm512_shuffle_i32x4(u1, w1, 0xdd);
    }
}

/* The pair's halves exchanged (the tiles' even-first order becomes odd-first). */
TB INLINE __m512i swap_halves(__m512i v, bool swap) { return swap ? _mm512_rol_epi32(v, 16) : v; }

/* wp[j][b][n] (dwords) = the pair j of block b of weight row n of the 16 rows wr, for
 * b < nb (in elements per row; the last block zero past in). */
TB static void pack_w(uint32_t *wp, const uint16_t *const wr[16], int in, int nb, bool swap)
{
    for (int b0 = 0; b0 < nb; b0 += 16) {
        for (int b = b0; b < b0 + 16 && b < nb; b++) {
            const int valid = in - 32 * b;
            const __mmask32 m = valid >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << valid) - 1u);
            __m512i v[16];
            for (int n = 0; n < 16; n++)
                v[n] = swap_halves(_mm512_maskz_loadu_epi16(m, wr[n] + 32 * b), swap);
            transpose16(v);
            for (int j = 0; j < LANES; j++)
                _mm512_storeu_si512(wp + ((size_t)j * nb + b) * 16, v[j]);
        }
    }
}

/* xa[j][r][b] (dwords, rows of nb) = the pair j of block b of x row r rounded, r < nr. */
TB static void pack_x(uint32_t *xa, const float *x, int nr, int in, int nb, bool swap)
{
    for (int r = 0; r < nr; r++)
        for (int b0 = 0; b0 < nb; b0 += 16) {
            const int nk = nb - b0 < 16 ? nb - b0 : 16;
            __m512i v[16];
            for (int k = 0; k < 16; k++)
                v[k] = k < nk ? swap_halves(cvt32(x + (size_t)r * in + 32 * (b0 + k), in - 32 * (b0 + k)), swap)
                              : _mm512_setzero_si512();
            transpose16(v);
            const __mmask16 m = (__mmask16)((1u << nk) - 1u);
            for (int j = 0; j < LANES; j++)
                _mm512_mask_storeu_epi32(xa + ((size_t)j * XPIECE + r) * nb + b0, m, v[j]);
        }
}

/* Rows 0 .. 16 nt - 1 of the piece xa x the 16 ng outputs of the packed groups wg[0 .. ng):
 * y rows of ldy floats, nv outputs valid in the last group. lacc: LANES x 32 x 32 floats. */
TB static void tiles(float *y, int ldy, const uint32_t *xa, const uint32_t *const wg[2], int nt, int ng, int nv,
                     int nb, bool swap, float *lacc)
{
    const int nb16 = nb / 16 * 16;
    const long lda = (long)nb * 4;
    for (int j = 0; j < LANES; j++) {
        const uint32_t *a0 = xa + (size_t)j * XPIECE * nb, *a1 = a0 + (size_t)16 * nb;
        const uint32_t *b0 = wg[0] + (size_t)j * nb * 16, *b1 = wg[ng - 1] + (size_t)j * nb * 16;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int k = 0; k < nb16; k += 16) {
            _tile_loadd(4, a0 + k, lda);
            _tile_loadd(6, b0 + (size_t)k * 16, 64);
            _tile_dpbf16ps(0, 4, 6);
            if (ng > 1) {
                _tile_loadd(7, b1 + (size_t)k * 16, 64);
                _tile_dpbf16ps(1, 4, 7);
            }
            if (nt > 1) {
                _tile_loadd(5, a1 + k, lda);
                _tile_dpbf16ps(2, 5, 6);
                if (ng > 1)
                    _tile_dpbf16ps(3, 5, 7);
            }
        }
        float *l = lacc + (size_t)j * 32 * 32;
        _tile_stored(0, l, 128);
        _tile_stored(1, l + 16, 128);
        _tile_stored(2, l + 16 * 32, 128);
        _tile_stored(3, l + 16 * 32 + 16, 128);
        AMX_BARRIER(*l);
        /* The last blocks (fewer than 16) with vdpbf16ps on the stored accumulators. */
        for (int b = nb16; b < nb; b++)
            for (int r = 0; r < 16 * nt; r++) {
                const uint32_t *ar = (r < 16 ? a0 : a1) + (size_t)(r % 16) * nb;
                const __m512i xv = swap_halves(_mm512_set1_epi32((int)ar[b]), swap);
                for (int g = 0; g < ng; g++) {
                    const uint32_t *bg = (g ? b1 : b0) + (size_t)b * 16;
                    float *c = l + r * 32 + 16 * g;
                    _mm512_storeu_ps(c, vdpbf16(_mm512_loadu_ps(c), xv, swap_halves(_mm512_loadu_si512(bg), swap)));
                }
            }
    }
    /* The canonical tree over the lanes: (j, j+8), (j, j+4), (j, j+2), (0, 1). */
    for (int r = 0; r < 16 * nt; r++)
        for (int g = 0; g < ng; g++) {
            __m512 a[LANES];
            for (int j = 0; j < LANES; j++)
                a[j] = _mm512_loadu_ps(lacc + ((size_t)j * 32 + r) * 32 + 16 * g);
            for (int j = 0; j < 8; j++)
                a[j] = _mm512_add_ps(a[j], a[j + 8]);
            for (int j = 0; j < 4; j++)
                a[j] = _mm512_add_ps(a[j], a[j + 4]);
            for (int j = 0; j < 2; j++)
                a[j] = _mm512_add_ps(a[j], a[j + 2]);
            const int v = g == ng - 1 ? nv : 16;
            _mm512_mask_storeu_ps(y + (size_t)r * ldy + 16 * g, (__mmask16)((1u << v) - 1u), _mm512_add_ps(a[0], a[1]));
        }
}

/* Rows [0, rows) (a multiple of 16) x outputs [o0, o1) through the tiles; false (nothing
 * written) when the buffers cannot be allocated. */
TB static bool amx_bf16_rows(float *y, const float *x, int rows, int in, const uint16_t *w, int out, int o0, int o1,
                             bool swap)
{
    const int nb = (in + 31) / 32, ngr = (o1 - o0 + 15) / 16;
    const size_t wp_n = (size_t)ngr * LANES * nb * 16, xa_n = (size_t)LANES * XPIECE * nb, lacc_n = LANES * 32 * 32;
    uint32_t *buf = cairn_malloc((wp_n + xa_n + lacc_n) * 4);
    if (!buf)
        return false;
    uint32_t *wp = buf, *xa = buf + wp_n;
    float *lacc = (float *)(xa + xa_n);
    for (int g = 0; g < ngr; g++) {
        const int o = o0 + 16 * g, nv = o1 - o < 16 ? o1 - o : 16;
        const uint16_t *wr[16];
        for (int i = 0; i < 16; i++)
            wr[i] = w + (size_t)(o + (i < nv ? i : nv - 1)) * in;
        pack_w(wp + (size_t)g * LANES * nb * 16, wr, in, nb, swap);
    }
    bf16_load_cfg();
    for (int r0 = 0; r0 < rows; r0 += XPIECE) {
        const int nt = rows - r0 >= 32 ? 2 : 1;
        pack_x(xa, x + (size_t)r0 * in, 16 * nt, in, nb, swap);
        AMX_BARRIER(*xa); /* and wp's packing above: the barrier clobbers all memory */
        for (int g = 0; g < ngr; g += 2) {
            const int ng = ngr - g >= 2 ? 2 : 1, o = o0 + 16 * (g + ng - 1), nv = o1 - o < 16 ? o1 - o : 16;
            const uint32_t *wg[2] = {wp + (size_t)g * LANES * nb * 16, wp + (size_t)(g + ng - 1) * LANES * nb * 16};
            tiles(y + (size_t)r0 * out + o0 + 16 * g, out, xa, wg, nt, ng, nv, nb, swap, lacc);
        }
    }
    _tile_release();
    cairn_free(buf);
    return true;
}

/* ---- the probe --------------------------------------------------------------------------- */

/* bf16 bit patterns of the probe's operands */
enum { BF_ONE = 0x3f80, BF_MONE = 0xbf80, BF_2M24 = 0x3380, BF_2M63 = 0x2000, BF_2M64 = 0x1f80, BF_2P100 = 0x7180,
       BF_DENORM = 0x0001 };

/* C[t][t] of one tile product for the cases t (A row t = ones, B column t = the products):
 *  0: (1, 0) then (-1, 2^-24): even first 2^-24, odd first 0
 *  1: (1, 0) then (2^-24, 2^-24): each product's sum rounded 1, the pair's sum rounded once 1 + 2^-23
 *  2: (1, 0), (2^-24, 0), (2^-24, 0): rounded per step 1, the K dimension summed once 1 + 2^-23
 *  3: (2^-63 * 2^-64, 0) = 2^-127: flushed to +0
 *  4: (2^100 * a bf16 denormal, 0): the denormal read as 0, so +0
 * Returns 1 for the SDM's order (even element first), 0 for odd first (vdpbf16ps's), -1
 * for anything else. */
TB static int probe_order(void)
{
    _Alignas(64) uint16_t a[16][32], b[16][32];
    _Alignas(64) float c[16][16];
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    for (int t = 0; t < 5; t++)
        for (int k = 0; k < 3; k++)
            a[t][2 * k] = a[t][2 * k + 1] = BF_ONE;
    /* b[k][2n + e]: pair k, element e, output n */
    for (int t = 0; t < 3; t++)
        b[0][2 * t] = BF_ONE;
    b[1][0] = BF_MONE, b[1][1] = BF_2M24;
    b[1][2] = BF_2M24, b[1][3] = BF_2M24;
    b[1][4] = BF_2M24, b[2][4] = BF_2M24;
    a[3][0] = BF_2M63, b[0][6] = BF_2M64;
    a[4][0] = BF_2P100, b[0][8] = BF_DENORM;
    bf16_load_cfg();
    AMX_BARRIER(a);
    AMX_BARRIER(b);
    _tile_zero(0);
    _tile_loadd(4, a, 64);
    _tile_loadd(6, b, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_stored(0, c, 64);
    AMX_BARRIER(c);
    _tile_release();
    uint32_t r[5];
    for (int t = 0; t < 5; t++)
        memcpy(&r[t], &c[t][t], 4);
    const uint32_t one = 0x3f800000u, two_m24 = 0x33800000u;
    if (r[1] != one || r[2] != one || r[3] != 0 || r[4] != 0)
        return -1;
    return r[0] == two_m24 ? 1 : r[0] == 0 ? 0 : -1;
}

/* The self-check: one product (64 rows, 32 outputs, 1088 inputs: tile pairs, two output
 * groups and a tail of blocks; mostly ordinary values, some near the denormal range)
 * through the tiles and through the AVX-512 kernel. 1: the same bits; 0: they differ; -1: no memory for it (asked again next call). */
TB static int self_check(bool swap)
{
    enum { SR = 64, SO = 32, SK = 1088 };
    float *x = cairn_malloc(sizeof(float) * (SR * SK + 2 * SR * SO));
    uint16_t *w = cairn_malloc(sizeof(uint16_t) * SO * SK);
    int ok = -1;
    if (!x || !w)
        goto done;
    float *y0 = x + SR * SK, *y1 = y0 + SR * SO;
    uint32_t s = 0x2545f491u;
    for (int i = 0; i < SR * SK + SO * SK; i++) {
        s = s * 1664525u + 1013904223u;
        /* a uniform mantissa in [-1, 1) times 2^(-8 .. 7); one value in 16 near 2^-120 (its
         * products flush) and one an f32 denormal (read as zero) */
        float v = ((float)(int32_t)(s & 0xffffffu) / 8388608.0f - 1.0f) * (float)(1 << (s >> 28)) / 256.0f;
        const uint32_t k = (s >> 24) & 15, den = s & 0x807fffffu;
        if (k == 0)
            memcpy(&v, &den, 4);
        else if (k == 1)
            v = v * 0x1p-112f;
        if (i < SR * SK) {
            x[i] = v;
        } else {
            uint32_t u;
            memcpy(&u, &v, 4);
            w[i - SR * SK] = (uint16_t)(u >> 16);
        }
    }
    if (!amx_bf16_rows(y1, x, SR, SK, w, SO, 0, SO, swap))
        goto done;
    kern__avx512_matmul_bf16w(y0, x, SR, SK, w, SO, 0, SO, CAIRN_MATH_BF16);
    ok = memcmp(y0, y1, sizeof(float) * SR * SO) == 0;
done:
    cairn_free(x);
    cairn_free(w);
    return ok;
}

/* What the tiles' checks said: */
enum { BF16_UNKNOWN = 0, BF16_OFF, BF16_NO_AMX, BF16_PROBE_FAILED, BF16_SELF_CHECK_FAILED, BF16_TILES_SWAPPED, BF16_TILES };
static int amx_bf16_mode = BF16_UNKNOWN; /* atomic loads and stores; written under the mutex */
static pthread_mutex_t amx_bf16_lock = PTHREAD_MUTEX_INITIALIZER;

static int amx_bf16_decide(void)
{
    int m = __atomic_load_n(&amx_bf16_mode, __ATOMIC_ACQUIRE);
    if (m != BF16_UNKNOWN)
        return m;
    pthread_mutex_lock(&amx_bf16_lock);
    m = amx_bf16_mode;
    if (m == BF16_UNKNOWN && !cairn_knob_bool("CAIRN_AMX_BF16", false, false, false)) {
        m = BF16_OFF;
        __atomic_store_n(&amx_bf16_mode, m, __ATOMIC_RELEASE);
    } else if (m == BF16_UNKNOWN) {
        const int order = kern__x86_has_amx_bf16() ? probe_order() : -2;
        const int check = order >= 0 ? self_check(order == 1) : 0;
        m = order == -2   ? BF16_NO_AMX
            : order < 0   ? BF16_PROBE_FAILED
            : check < 0   ? BF16_UNKNOWN /* no memory: decide on a later call */
            : check == 0  ? BF16_SELF_CHECK_FAILED
            : order == 1  ? BF16_TILES_SWAPPED
                          : BF16_TILES;
        __atomic_store_n(&amx_bf16_mode, m, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&amx_bf16_lock);
    return m;
}

const char *kern__amx_bf16_state(void)
{
    switch (amx_bf16_decide()) {
    case BF16_OFF: return "AVX-512 only: the AMX-BF16 tiles are off unless CAIRN_AMX_BF16=1 (unverified on real tiles)";
    case BF16_NO_AMX: return "AVX-512 only: no AMX-BF16 (or no tile permission)";
    case BF16_PROBE_FAILED: return "AVX-512 only: tdpbf16ps failed the probe (order, rounding, DAZ/FTZ)";
    case BF16_SELF_CHECK_FAILED:
        return "AVX-512 only: tdpbf16ps passed the probe but its product differs from vdpbf16ps's (self-check)";
    case BF16_TILES_SWAPPED: return "AMX-BF16 tiles (even element first, pairs swapped)";
    case BF16_TILES: return "AMX-BF16 tiles (odd element first)";
    default: return "undecided (no memory for the self-check yet)";
    }
}

void kern__amx_matmul_bf16w(float *y, const float *x, int rows, int in, const void *w, int out, int o0, int o1,
                            cairn_math_t math)
{
    const int mode = math == CAIRN_MATH_BF16 && rows >= AMX_BF16_MIN_ROWS ? amx_bf16_decide() : BF16_UNKNOWN;
    const int tiled = mode == BF16_TILES_SWAPPED || mode == BF16_TILES ? rows / 16 * 16 : 0;
    if (tiled && !amx_bf16_rows(y, x, tiled, in, w, out, o0, o1, mode == BF16_TILES_SWAPPED)) {
        kern__avx512_matmul_bf16w(y, x, rows, in, w, out, o0, o1, math);
        return;
    }
    if (rows > tiled)
        kern__avx512_matmul_bf16w(y + (size_t)tiled * out, x + (size_t)tiled * in, rows - tiled, in, w, out, o0, o1,
                                  math);
}
