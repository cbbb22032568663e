/*
 * amx_simde_check.c — quant_amx.c's AMX-INT8 kernels on a CPU without AVX-512 (a dev check,
 * not a CI test): the file is compiled with its AVX-512 intrinsics mapped to SIMDe's portable
 * implementations (libsimde-dev; the few it lacks, gathers, scatters and _cvtsh_ss, are
 * written below), its tile instructions replaced by the software tile model of
 * tests/compute/amx_tile_model.h (tdpbssd as in test_quant_amx_emulated.c), and its target
 * attributes removed (scripts/dev/amx_simde_check.sh does that with sed), so the packing,
 * the tile shapes and the float folds are checked bit for bit against the portable rows
 * (kern__scalar's qmatmul_range) for rows in whole tiles of 16 (the VNNI remainder rows are
 * not exercised: they need AVX-512). Model: one process, random weights and activations;
 * exits 1 on the first differing case, 0 when every case agrees.
 */
#define _IMMINTRIN_H_INCLUDED 1 /* SIMDe provides every intrinsic and type */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>

/* cmocka's asserts as the tile model uses them */
#define assert_int_equal(a, b) do { if ((a) != (b)) { fprintf(stderr, "tile model: %s != %s\n", #a, #b); abort(); } } while (0)
#define assert_true(a) do { if (!(a)) { fprintf(stderr, "tile model: !(%s)\n", #a); abort(); } } while (0)

/* ---- what SIMDe 0.7.4 lacks ---- */
typedef simde__mmask16 __mmask16;
typedef simde__mmask8 __mmask8;
static inline simde__m512i sim_cvtepu8_epi16(simde__m256i a)
{
    uint8_t u[32];
    int16_t r[32];
    memcpy(u, &a, 32);
    for (int i = 0; i < 32; i++)
        r[i] = u[i];
    simde__m512i o;
    memcpy(&o, r, 64);
    return o;
}
#define _mm512_cvtepu8_epi16(a) sim_cvtepu8_epi16(a)
static inline simde__m512 sim_cvtepi32_ps(simde__m512i a)
{
    int32_t u[16];
    float r[16];
    memcpy(u, &a, 64);
    for (int i = 0; i < 16; i++)
        r[i] = (float)u[i];
    simde__m512 o;
    memcpy(&o, r, 64);
    return o;
}
#define _mm512_cvtepi32_ps(a) sim_cvtepi32_ps(a)
static inline simde__m512 sim_maskz_loadu_ps(simde__mmask16 k, const void *p)
{
    float r[16];
    for (int i = 0; i < 16; i++)
        r[i] = (k >> i & 1) ? ((const float *)p)[i] : 0.0f;
    simde__m512 o;
    memcpy(&o, r, 64);
    return o;
}
#define _mm512_maskz_loadu_ps(k, p) sim_maskz_loadu_ps(k, p)
static inline void sim_mask_storeu_ps(void *p, simde__mmask16 k, simde__m512 v)
{
    float r[16];
    memcpy(r, &v, 64);
    for (int i = 0; i < 16; i++)
        if (k >> i & 1)
            ((float *)p)[i] = r[i];
}
#define _mm512_mask_storeu_ps(p, k, v) sim_mask_storeu_ps(p, k, v)
static inline float sim_cvtsh_ss(uint16_t h)
{
    simde__m128 f = simde_mm_cvtph_ps(simde_mm_cvtsi32_si128(h));
    return simde_mm_cvtss_f32(f);
}
#undef _cvtsh_ss
#define _cvtsh_ss(h) sim_cvtsh_ss(h)
static inline simde__m512 sim_cvtph_ps512(simde__m256i a)
{
    uint16_t h[16];
    float r[16];
    memcpy(h, &a, 32);
    for (int i = 0; i < 16; i++)
        r[i] = sim_cvtsh_ss(h[i]);
    simde__m512 o;
    memcpy(&o, r, 64);
    return o;
}
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps(a) sim_cvtph_ps512(a)
static inline simde__m256i sim_cvtepi32_epi16(simde__m512i a)
{
    int32_t u[16];
    int16_t r[16];
    memcpy(u, &a, 64);
    for (int i = 0; i < 16; i++)
        r[i] = (int16_t)u[i];
    simde__m256i o;
    memcpy(&o, r, 32);
    return o;
}
#undef _mm512_cvtepi32_epi16
#define _mm512_cvtepi32_epi16(a) sim_cvtepi32_epi16(a)
static inline void sim_i32scatter_epi32_256(void *base, simde__m256i idx, simde__m256i v, int scale)
{
    int32_t ix[8], vv[8];
    memcpy(ix, &idx, 32);
    memcpy(vv, &v, 32);
    for (int i = 0; i < 8; i++)
        memcpy((char *)base + (ptrdiff_t)ix[i] * scale, &vv[i], 4);
}
#undef _mm256_i32scatter_epi32
#define _mm256_i32scatter_epi32(b, i, v, s) sim_i32scatter_epi32_256(b, i, v, s)
static inline simde__m512i sim_i32gather_epi32(simde__m512i idx, const void *base, int scale)
{
    int32_t ix[16], r[16];
    memcpy(ix, &idx, 64);
    for (int i = 0; i < 16; i++)
        memcpy(&r[i], (const char *)base + (ptrdiff_t)ix[i] * scale, 4);
    simde__m512i out;
    memcpy(&out, r, 64);
    return out;
}
#undef _mm512_i32gather_epi32
#define _mm512_i32gather_epi32(i, b, s) sim_i32gather_epi32(i, b, s)
static inline simde__m512i sim_i64gather_epi64(simde__m512i idx, const void *base, int scale)
{
    int64_t ix[8], r[8];
    memcpy(ix, &idx, 64);
    for (int i = 0; i < 8; i++)
        memcpy(&r[i], (const char *)base + ix[i] * scale, 8);
    simde__m512i out;
    memcpy(&out, r, 64);
    return out;
}
#undef _mm512_i64gather_epi64
#define _mm512_i64gather_epi64(i, b, s) sim_i64gather_epi64(i, b, s)

/* fused multiply-adds, one rounding (SIMDe's portable ones may round twice) */
static inline simde__m512 sim_fmadd_ps(simde__m512 a, simde__m512 b, simde__m512 c, float sgn)
{
    float x[16], y[16], z[16];
    memcpy(x, &a, 64);
    memcpy(y, &b, 64);
    memcpy(z, &c, 64);
    for (int i = 0; i < 16; i++)
        z[i] = fmaf(sgn * x[i], y[i], z[i]);
    simde__m512 o;
    memcpy(&o, z, 64);
    return o;
}
#undef _mm512_fmadd_ps
#undef _mm512_fnmadd_ps
#define _mm512_fmadd_ps(a, b, c) sim_fmadd_ps(a, b, c, 1.0f)
#define _mm512_fnmadd_ps(a, b, c) sim_fmadd_ps(a, b, c, -1.0f)

/* ---- the tile model ---- */
#include "../../tests/compute/amx_tile_model.h"
static long n_dp;
static void emu_dpbssd(int c, int a, int b)
{
    assert_true(configured);
    assert_int_equal(tmm[c].rows, tmm[a].rows);
    assert_int_equal(tmm[c].colsb, tmm[b].colsb);
    assert_int_equal(tmm[a].colsb / 4, tmm[b].rows);
    n_dp++;
    for (int m = 0; m < tmm[c].rows; m++)
        for (int n = 0; n < tmm[c].colsb / 4; n++) {
            int32_t acc;
            memcpy(&acc, tmm[c].d[m] + 4 * n, 4);
            for (int k = 0; k < tmm[a].colsb / 4; k++)
                for (int i = 0; i < 4; i++)
                    acc += (int8_t)tmm[a].d[m][4 * k + i] * (int8_t)tmm[b].d[k][4 * n + i];
            memcpy(tmm[c].d[m] + 4 * n, &acc, 4);
        }
}
#undef _tile_dpbssd
#define _tile_dpbssd(c, a, b) emu_dpbssd(c, a, b)
#define kern__amx_qmm_q8_0 emu_amx_qmm_q8_0
#define kern__amx_qmm_q4_0 emu_amx_qmm_q4_0
#define kern__amx_qmm_q4_k emu_amx_qmm_q4_k
#define kern__amx_qmm_q5_k emu_amx_qmm_q5_k
#define kern__amx_qmm_q6_k emu_amx_qmm_q6_k
#include "compute/cpu/x86/x86_impls.h"
void emu_amx_qmm_q8_0(KERN_QMM_ARGS);
void emu_amx_qmm_q4_0(KERN_QMM_ARGS);
void emu_amx_qmm_q4_k(KERN_QMM_ARGS);
void emu_amx_qmm_q5_k(KERN_QMM_ARGS);
void emu_amx_qmm_q6_k(KERN_QMM_ARGS);
#include QUANT_AMX_C
#include "compute/type_traits.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) { return (float)((int)(rnd32() % 2000001) - 1000000) * 1e-6f; }

static void random_weights(unsigned char *w, cairn_dtype_t t, int rows, int in)
{
    const size_t rb = cairn_dtype_row_bytes(t, in), nb = (size_t)rows * (size_t)(in / cairn_dtype_block_elems(t));
    const size_t bb = rb * (size_t)rows / nb;
    for (size_t i = 0; i < rb * (size_t)rows; i++)
        w[i] = (unsigned char)rnd32();
    for (size_t b = 0; b < nb; b++) {
        uint16_t d = compute_f32_to_f16(rndf() * 0.02f), dm = compute_f32_to_f16(fabsf(rndf()) * 0.01f);
        unsigned char *blk = w + b * bb;
        if (t == CAIRN_DTYPE_Q6_K) {
            memcpy(blk + 208, &d, 2);
        } else {
            memcpy(blk, &d, 2);
            if (t == CAIRN_DTYPE_Q4_K || t == CAIRN_DTYPE_Q5_K)
                memcpy(blk + 2, &dm, 2);
        }
    }
}

typedef void qmm_fn(KERN_QMM_ARGS);

int main(int argc, char **argv)
{
    /* argv[1] = "break": flip one bit of one emulated result to show the check can fail */
    const bool brk = argc > 1 && !strcmp(argv[1], "break");
    static const cairn_dtype_t types[] = {CAIRN_DTYPE_Q8_0, CAIRN_DTYPE_Q4_0, CAIRN_DTYPE_Q4_K, CAIRN_DTYPE_Q5_K,
                                          CAIRN_DTYPE_Q6_K};
    static qmm_fn *const amx[] = {emu_amx_qmm_q8_0, emu_amx_qmm_q4_0, emu_amx_qmm_q4_k, emu_amx_qmm_q5_k,
                                  emu_amx_qmm_q6_k};
    static const int rows_set[] = {32, 48, 64};
    static const int outs_set[] = {1, 16, 17, 50};
    enum { R = 64, O = 50 };
    const kern_impl_t *portable = kern__impl_by_name("scalar");
    if (!portable)
        return 2;
    int cases = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const kern_type_ops_t *sc = &portable->types[types[t]];
        const cairn_dtype_t act = sc->act;
        const int be = cairn_dtype_block_elems(types[t]);
        const int ins[] = {be == 32 ? 32 : 256, be == 32 ? 1056 : 1280, be == 32 ? 2080 : 2304, be == 32 ? 96 : 768,
                           be == 32 ? 64 : 512};
        for (size_t ii = 0; ii < 5; ii++) {
            const int in = ins[ii];
            const size_t ldw = cairn_dtype_row_bytes(types[t], in), ldq = cairn_dtype_row_bytes(act, in);
            unsigned char *w = malloc(ldw * O), *xq = malloc(ldq * R);
            int32_t *sums = malloc(sizeof(int32_t) * R * (size_t)(in / 32));
            float *x = malloc(sizeof(float) * R * (size_t)in), *y0 = malloc(sizeof(float) * R * O),
                  *y1 = malloc(sizeof(float) * R * O);
            if (!(w && xq && sums && x && y0 && y1))
                return 2;
            random_weights(w, types[t], O, in);
            for (size_t i = 0; i < (size_t)R * in; i++)
                x[i] = rndf() * (i % 53 == 0 ? 20.0f : 1.0f);
            for (int r = 0; r < R; r++) {
                portable->types[act].from_f32(xq + (size_t)r * ldq, x + (size_t)r * in, in);
                kern__q8_0_sums(sums + r * (in / 32), xq + (size_t)r * ldq, in / 32);
            }
            const int32_t *xs = act == CAIRN_DTYPE_Q8_0 ? sums : NULL;
            for (size_t ri = 0; ri < sizeof rows_set / sizeof rows_set[0]; ri++)
                for (size_t oi = 0; oi < sizeof outs_set / sizeof outs_set[0]; oi++)
                    for (int acc = 0; acc < 2; acc++) {
                        const int rows = rows_set[ri], out = outs_set[oi];
                        for (int i = 0; i < R * O; i++)
                            y0[i] = y1[i] = acc ? 0.25f * (float)(i % 7) : 0.0f;
                        sc->qmatmul_range(y0, out, xq, ldq, xs, rows, in, w, ldw, 0, out, acc);
                        amx[t](y1, out, xq, ldq, xs, rows, in, w, ldw, 0, out, acc);
                        if (brk && cases == 7) {
                            uint32_t u;
                            memcpy(&u, &y1[rows * out - 1], 4);
                            u ^= 1;
                            memcpy(&y1[rows * out - 1], &u, 4);
                        }
                        cases++;
                        for (int i = 0; i < rows * out; i++)
                            if (memcmp(&y0[i], &y1[i], 4)) {
                                printf("DIFFER %s rows %d in %d out %d acc %d: first at row %d out %d: %.9g vs %.9g\n",
                                       cairn_dtype_name(types[t]), rows, in, out, acc, i / out, i % out, y0[i], y1[i]);
                                return 1;
                            }
                    }
            free(w);
            free(xq);
            free(sums);
            free(x);
            free(y0);
            free(y1);
        }
    }
    if (configured) {
        printf("tiles left configured\n");
        return 1;
    }
    printf("amx_simde_check: %d cases, emulated AMX = portable rows bit for bit (%ld tile products)\n", cases, n_dp);
    return 0;
}
