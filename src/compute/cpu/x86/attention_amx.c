/*
 * attention_amx.c — the pair order of bf16 K/V attention (attention_impl.h, steps 1' and
 * 4') on AMX-BF16 tiles: q.k^T and p.v of the prefill tiles of attention.c, whole tiles of
 * 16 rows; the AVX-512 emulation (attention_avx512.c) computes every other row, with the
 * same bits.
 *
 * Model. Each tile product takes ONE pair per C element (A: 16 rows x 4 bytes, B: 1 row x
 * 64 bytes), because on the device's Xeon (model 207) tdpbf16ps computes
 * RNE(c + RNE(a0 b0 + a1 b1)) for one pair and something not characterized (a fused sum of
 * finite width) for more (docs/PERFORMANCE.md, "AMX-BF16: what tdpbf16ps computes
 * there"). So the chain of tile products over the pairs in increasing order is exactly
 * the pair order, with the tiles' DAZ inputs and FTZ outputs:
 *  - scores: C [16 rows][16 keys] from zero; per pair i, A = the 16 q rows' pair i (the
 *    packed bf16 slots of attention.c's qpad: stride hdp * 4 bytes), B = the 16 keys'
 *    pair i (kp [hdp/2][16] dwords, packed per call from the transposed f32 keys, whose
 *    values are bf16 and narrow exactly); up to 4 row tiles share each B. The raw sums go
 *    to s; the caller scales them (one rounded product, as the emulation).
 *  - p.v: C [16 rows][16 dims] loaded from acc; per pair of positions i, A = the 16 rows'
 *    (p_2i, p_2i+1) (packed per 16 rows into pb, zero past cnt), B = (v_2i[d], v_2i+1[d])
 *    for 16 dims (vp [cnt/2][hd] dwords, packed per call, zero past cnt); 4 dim tiles per
 *    A load, C stored back.
 * Each call loads its tile configuration (tmm0-3 C 16 x 64 B, tmm4-5 A 16 x 4 B, tmm6-7 B
 * 1 x 64 B) and releases the tiles before it returns.
 *
 * The self-check (once per process, before the first tiled call): scores and p.v of a
 * random problem (48 rows, 16 keys / 37 positions, head_dim 128, values like a model's q,
 * K, V and probabilities, a few exact cancellations and zeros) through the tiles and
 * through the emulation; the tiles serve only when both agree bit for bit (so the bits
 * never depend on the CPU's tile arithmetic: a CPU whose tdpbf16ps rounds otherwise keeps
 * the f32 attention order by default). CAIRN_ATTN_TILES=0 keeps them off.
 *
 * Thread-safety: pure functions, each call owning the tile state of its thread; the
 * decision behind a mutex, read atomically.
 */
#include "compute/cpu/x86/x86_impls.h"
#include "compute/cpu/attention_impl.h"

#include <immintrin.h>
#include <pthread.h>
#include <string.h>

#define TB __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,amx-tile,amx-bf16")))

enum {
    MAX_HD = 256,  /* head_dim the packing buffers hold (larger: the emulation) */
    MAX_CNT = 64,  /* positions per p.v call (attention.c's KEY_BLOCK) */
};

/* PACKED_BARRIER: x86_impls.h's AMX_BARRIER (why GCC's tile intrinsics need it). */
#define PACKED_BARRIER(obj) AMX_BARRIER(obj)

/* ldtilecfg's 64-byte operand (palette 1). */
typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} attn_tile_cfg_t;

TB static void load_cfg(void)
{
    _Alignas(64) attn_tile_cfg_t c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 4; t++) /* C */
        c.rows[t] = 16, c.colsb[t] = 64;
    for (int t = 4; t < 6; t++) /* A: one pair of 16 rows */
        c.rows[t] = 16, c.colsb[t] = 4;
    for (int t = 6; t < 8; t++) /* B: one pair of 16 columns */
        c.rows[t] = 1, c.colsb[t] = 64;
    /* GCC's _tile_loadconfig tells the compiler it reads 8 bytes of c, which let it drop
     * the stores above (device run, session 7: every tile unconfigured, #UD): make all 64
     * bytes visible to it. */
    PACKED_BARRIER(c);
    _tile_loadconfig(&c);
}

/* dword = (bf16 of lo) | (bf16 of hi) << 16, 16 lanes; the f32 values are bf16 already. */
TB static inline __m512i pair16(__m512 lo, __m512 hi)
{
    return _mm512_or_si512(_mm512_srli_epi32(_mm512_castps_si512(lo), 16),
                           _mm512_and_si512(_mm512_castps_si512(hi), _mm512_set1_epi32((int)0xffff0000u)));
}

void kern__attn_amx_scores(float *s, size_t lds, const float *q, int rows, const float *kt, int hdp)
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,amx-tile,amx-bf16")));
void kern__attn_amx_scores(float *s, size_t lds, const float *q, int rows, const float *kt, int hdp)
{
    const int np = hdp / 2;
    _Alignas(64) uint32_t kp[MAX_HD / 2 * 16];
    _Alignas(64) float c[4][16][16];
    CAIRN_ASSERT(hdp <= MAX_HD && rows % 16 == 0);
    for (int i = 0; i < np; i++)
        _mm512_store_si512(kp + (size_t)i * 16,
                           pair16(_mm512_loadu_ps(kt + (size_t)(2 * i) * 16), _mm512_loadu_ps(kt + (size_t)(2 * i + 1) * 16)));
    const long qstride = (long)hdp * 4;
    PACKED_BARRIER(kp);
    load_cfg();
    for (int r0 = 0; r0 < rows; r0 += 64) {
        const int nt = (rows - r0) / 16 < 4 ? (rows - r0) / 16 : 4;
        const char *a = (const char *)(q + (size_t)r0 * hdp);
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int i = 0; i < np; i++) {
            _tile_loadd(6, kp + (size_t)i * 16, 64);
            _tile_loadd(4, a + 4 * i, qstride);
            _tile_dpbf16ps(0, 4, 6);
            if (nt > 1) {
                _tile_loadd(5, a + 16 * qstride + 4 * i, qstride);
                _tile_dpbf16ps(1, 5, 6);
            }
            if (nt > 2) {
                _tile_loadd(4, a + 32 * qstride + 4 * i, qstride);
                _tile_dpbf16ps(2, 4, 6);
            }
            if (nt > 3) {
                _tile_loadd(5, a + 48 * qstride + 4 * i, qstride);
                _tile_dpbf16ps(3, 5, 6);
            }
        }
        _tile_stored(0, c[0], 64);
        _tile_stored(1, c[1], 64);
        _tile_stored(2, c[2], 64);
        _tile_stored(3, c[3], 64);
        PACKED_BARRIER(c);
        for (int t = 0; t < nt; t++)
            for (int r = 0; r < 16; r++)
                memcpy(s + (size_t)(r0 + 16 * t + r) * lds, c[t][r], sizeof c[t][r]);
    }
    _tile_release();
}

bool kern__attn_amx_pv_fits(int hd, int cnt) { return hd % 16 == 0 && hd <= MAX_HD && cnt <= MAX_CNT; }

void kern__attn_amx_pv(float *acc, int lda, const float *p, int ldp, int rows, int cnt, const float *vb, int hd)
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,amx-tile,amx-bf16")));
void kern__attn_amx_pv(float *acc, int lda, const float *p, int ldp, int rows, int cnt, const float *vb, int hd)
{
    const int np = (cnt + 1) / 2;
    _Alignas(64) uint32_t vp[MAX_CNT / 2 * MAX_HD];
    _Alignas(64) uint32_t pb[16][MAX_CNT / 2];
    CAIRN_ASSERT(kern__attn_amx_pv_fits(hd, cnt) && rows % 16 == 0);
    for (int i = 0; i < np; i++) {
        const float *v0 = vb + (size_t)(2 * i) * hd, *v1 = v0 + hd;
        const bool two = 2 * i + 1 < cnt;
        for (int d = 0; d < hd; d += 16)
            _mm512_store_si512(vp + (size_t)i * hd + d,
                               pair16(_mm512_loadu_ps(v0 + d), two ? _mm512_loadu_ps(v1 + d) : _mm512_setzero_ps()));
    }
    const long lstride = (long)lda * 4;
    PACKED_BARRIER(vp);
    load_cfg();
    for (int r0 = 0; r0 < rows; r0 += 16) {
        for (int r = 0; r < 16; r++) {
            const float *pr = p + (size_t)(r0 + r) * ldp;
            for (int i = 0; i < np; i++) {
                uint32_t lo, hi = 0;
                memcpy(&lo, pr + 2 * i, 4);
                if (2 * i + 1 < cnt)
                    memcpy(&hi, pr + 2 * i + 1, 4);
                pb[r][i] = (lo >> 16) | (hi & 0xffff0000u);
            }
        }
        PACKED_BARRIER(pb);
        for (int d0 = 0; d0 < hd; d0 += 64) {
            const int nd = (hd - d0) / 16 < 4 ? (hd - d0) / 16 : 4;
            float *c = acc + (size_t)r0 * lda + d0;
            _tile_loadd(0, c, lstride);
            if (nd > 1)
                _tile_loadd(1, c + 16, lstride);
            if (nd > 2)
                _tile_loadd(2, c + 32, lstride);
            if (nd > 3)
                _tile_loadd(3, c + 48, lstride);
            for (int i = 0; i < np; i++) {
                const uint32_t *b = vp + (size_t)i * hd + d0;
                _tile_loadd(4, &pb[0][i], (long)sizeof pb[0]);
                _tile_loadd(6, b, 64);
                _tile_dpbf16ps(0, 4, 6);
                if (nd > 1) {
                    _tile_loadd(7, b + 16, 64);
                    _tile_dpbf16ps(1, 4, 7);
                }
                if (nd > 2) {
                    _tile_loadd(6, b + 32, 64);
                    _tile_dpbf16ps(2, 4, 6);
                }
                if (nd > 3) {
                    _tile_loadd(7, b + 48, 64);
                    _tile_dpbf16ps(3, 4, 7);
                }
            }
            _tile_stored(0, c, lstride);
            if (nd > 1)
                _tile_stored(1, c + 16, lstride);
            if (nd > 2)
                _tile_stored(2, c + 32, lstride);
            if (nd > 3)
                _tile_stored(3, c + 48, lstride);
        }
    }
    _tile_release();
}

/* ---- the self-check ------------------------------------------------------------------- */

static uint32_t chk_rng(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* A bf16 value as f32: a uniform mantissa in [-1, 1) times 2^(-4 .. 3) (one in 16 zero). */
static float chk_value(uint32_t *s, bool positive)
{
    const uint32_t r = chk_rng(s);
    if ((r & 15) == 0)
        return 0.0f;
    float v = ((float)(r >> 8 & 0xffff) / 32768.0f - 1.0f) * (float)(1 << (r >> 4 & 7)) / 16.0f;
    if (positive)
        v = v < 0 ? -v : v;
    uint32_t u;
    memcpy(&u, &v, 4);
    u &= 0xffff0000u;
    memcpy(&v, &u, 4);
    return v;
}

/* 1: the tiles give the emulation's bits; 0: they differ; -1: no memory for the check. */
static int self_check(void)
{
    enum { R = 48, HD = 128, CNT = 37, LD = 64 };
    float *buf = cairn_malloc(sizeof(float) * (R * HD + HD * 16 + 2 * R * LD + R * LD + CNT * HD + 2 * R * HD));
    if (!buf)
        return -1;
    float *q = buf, *kt = q + R * HD, *s0 = kt + HD * 16, *s1 = s0 + R * LD, *p = s1 + R * LD, *v = p + R * LD,
          *a0 = v + CNT * HD, *a1 = a0 + R * HD;
    uint32_t st = 0x9e3779b9u;
    for (int r = 0; r < R; r++) {
        float row[HD];
        for (int d = 0; d < HD; d++)
            row[d] = chk_value(&st, false);
        if (r == 5) /* an exact cancellation inside pairs */
            for (int d = 0; d < HD; d += 2)
                row[d + 1] = -row[d];
        attn__pair_pack_q(q + (size_t)r * HD, row, HD, HD);
    }
    for (int i = 0; i < HD * 16; i++)
        kt[i] = chk_value(&st, false);
    for (int i = 0; i < R * LD; i++)
        p[i] = chk_value(&st, true) / 8.0f;
    for (int i = 0; i < CNT * HD; i++)
        v[i] = chk_value(&st, false);
    for (int i = 0; i < R * HD; i++)
        a0[i] = a1[i] = chk_value(&st, false) / 4.0f;
    memset(s0, 0, sizeof(float) * 2 * R * LD);
    kern__avx512_pair_scores(s0, LD, q, R, kt, HD);
    kern__attn_amx_scores(s1, LD, q, R, kt, HD);
    kern__avx512_pair_pv(a0, HD, p, LD, R, CNT, v, HD);
    kern__attn_amx_pv(a1, HD, p, LD, R, CNT, v, HD);
    int ok = 1;
    for (int r = 0; r < R; r++)
        ok &= !memcmp(s0 + (size_t)r * LD, s1 + (size_t)r * LD, 16 * sizeof(float));
    ok &= !memcmp(a0, a1, sizeof(float) * R * HD);
    cairn_free(buf);
    return ok;
}

enum { TILES_UNKNOWN = 0, TILES_OFF, TILES_NO_AMX, TILES_CHECK_FAILED, TILES_ON };
static int tiles_mode = TILES_UNKNOWN; /* atomic; written under the mutex */
static bool tiles_disallowed;          /* kern__attn_amx_allow; atomic */
static pthread_mutex_t tiles_lock = PTHREAD_MUTEX_INITIALIZER;

static int tiles_decide(void)
{
    int m = __atomic_load_n(&tiles_mode, __ATOMIC_ACQUIRE);
    if (m != TILES_UNKNOWN)
        return m;
    pthread_mutex_lock(&tiles_lock);
    if ((m = tiles_mode) == TILES_UNKNOWN) {
        if (!cairn_knob_bool("CAIRN_ATTN_TILES", false, false, true)) {
            m = TILES_OFF;
        } else if (!kern__x86_has_amx_bf16()) {
            m = TILES_NO_AMX;
        } else {
            const int ok = self_check();
            m = ok < 0 ? TILES_UNKNOWN : ok ? TILES_ON : TILES_CHECK_FAILED;
        }
        __atomic_store_n(&tiles_mode, m, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&tiles_lock);
    return m;
}

bool kern__attn_amx_on(void) { return !__atomic_load_n(&tiles_disallowed, __ATOMIC_ACQUIRE) && tiles_decide() == TILES_ON; }

void kern__attn_amx_allow(bool allow) { __atomic_store_n(&tiles_disallowed, !allow, __ATOMIC_RELEASE); }

const char *kern__attn_amx_state(void)
{
    switch (tiles_decide()) {
    case TILES_OFF: return "off (CAIRN_ATTN_TILES=0)";
    case TILES_NO_AMX: return "off: no AMX-BF16 (or no tile permission)";
    case TILES_CHECK_FAILED: return "off: the tiles' pair-order products differ from the emulation's (self-check)";
    case TILES_ON: return "AMX-BF16 tiles, one pair per step";
    default: return "undecided (no memory for the self-check yet)";
    }
}
