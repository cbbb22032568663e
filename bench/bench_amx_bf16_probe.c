/*
 * bench_amx_bf16_probe.c — what TDPBF16PS computes on this CPU, beside candidate roundings.
 *
 * Not a timing: a characterization (issue 12). bf16_amx.c's kernel needs each tile product
 * to equal vdpbf16ps's canonical bits; on the device's Xeon (family 6 model 207) the tiles
 * passed its order probe but not its self-check, so something in their rounding differs
 * from the SDM's pseudo-code. This program runs random 16 x 16 tile products of one and of
 * two bf16 pairs per C element (C = c + a . b) and, for every element, compares the tile's
 * float with candidate models computed in software from the same operands:
 *
 *   even-RNE   c + a0 b0, rounded to nearest even, then + a1 b1, rounded (the SDM)
 *   odd-RNE    the same with the odd element first (vdpbf16ps's order)
 *   fused-RNE  c + a0 b0 + a1 b1 exact, one rounding to nearest even
 *   pair-RNE   a0 b0 + a1 b1 rounded, then + c rounded
 *   even-RTZ   as even-RNE, each step rounded toward zero
 *   fused-RTZ  one rounding toward zero of the exact sum
 *   pair-RTZ   a0 b0 + a1 b1 rounded toward zero, then + c to nearest even
 *   pair-RTO   a0 b0 + a1 b1 rounded to odd (sticky bit), then + c to nearest even
 *
 * (with two pairs per element: the same per pair, pair 0 then pair 1, and "fused" over all
 * four products). Operands are normal numbers whose exact sums fit a double, so every model
 * is computed exactly. Prints, per case set, how many elements each model matches and the
 * first elements where the best model does not. Usage: bench_amx_bf16_probe [samples of
 * 256] (default 64). On CPUs without AMX-BF16 (or without the tile permission) it says so
 * and exits 0.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TB __attribute__((target("amx-tile,amx-bf16,avx512f")))

enum { N_MODELS = 8 };
static const char *const model_names[N_MODELS] = {"even-RNE", "odd-RNE", "fused-RNE", "pair-RNE",
                                                  "even-RTZ", "fused-RTZ", "pair-RTZ", "pair-RTO"};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* A random normal bf16 (as its float value) with exponent in [-e, e]. */
static uint16_t rnd_bf16(int e)
{
    const uint32_t sign = rnd() & 1, exp = (uint32_t)(127 - e + (int)(rnd() % (uint32_t)(2 * e + 1))), man = rnd() & 0x7f;
    return (uint16_t)(sign << 15 | exp << 7 | man);
}

static float bf(uint16_t h) { return bits_f((uint32_t)h << 16); }

static float rne(double x) { return (float)x; }

static float rtz(double x)
{
    float f = (float)x;
    if (fabs((double)f) > fabs(x))
        f = nextafterf(f, 0.0f);
    return f;
}

/* Round to odd: toward zero, then the last bit set when inexact. */
static float rto(double x)
{
    float f = rtz(x);
    if ((double)f != x)
        f = bits_f(f_bits(f) | 1u);
    return f;
}

/* The models for C = c + sum over np pairs (a[2p], a[2p+1]) . (b[2p], b[2p+1]). */
static void models(float out[N_MODELS], float c, const uint16_t *a, const uint16_t *b, int np)
{
    float even = c, odd = c, evz = c, pair = c, pairz = c, pairo = c;
    double exact = c;
    for (int p = 0; p < np; p++) {
        const double p0 = (double)bf(a[2 * p]) * bf(b[2 * p]), p1 = (double)bf(a[2 * p + 1]) * bf(b[2 * p + 1]);
        even = rne((double)rne((double)even + p0) + p1);
        odd = rne((double)rne((double)odd + p1) + p0);
        evz = rtz((double)rtz((double)evz + p0) + p1);
        pair = rne((double)pair + (double)rne(p0 + p1));
        pairz = rne((double)pairz + (double)rtz(p0 + p1));
        pairo = rne((double)pairo + (double)rto(p0 + p1));
        exact += p0 + p1;
    }
    out[0] = even;
    out[1] = odd;
    out[2] = rne(exact);
    out[3] = pair;
    out[4] = evz;
    out[5] = rtz(exact);
    out[6] = pairz;
    out[7] = pairo;
}

typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} cfg_t;

/* C[16][16] += A[16][np pairs] . B[np][16 pairs] on the tiles. */
#ifndef PROBE_EMULATE
TB static void tile_product(float C[16][16], const uint16_t A[16][4], const uint16_t B[2][32], int np)
{
    _Alignas(64) cfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    cfg.rows[0] = 16, cfg.colsb[0] = 64;                    /* C */
    cfg.rows[1] = 16, cfg.colsb[1] = (uint16_t)(4 * np);    /* A */
    cfg.rows[2] = (uint8_t)np, cfg.colsb[2] = 64;           /* B */
    _tile_loadconfig(&cfg);
    _tile_loadd(0, C, 64);
    _tile_loadd(1, A, 8);
    _tile_loadd(2, B, 64);
    _tile_dpbf16ps(0, 1, 2);
    _tile_stored(0, C, 64);
    _tile_release();
}
#else /* the SDM's model in software: checks this program's own arithmetic */
static void tile_product(float C[16][16], const uint16_t A[16][4], const uint16_t B[2][32], int np)
{
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++)
            for (int p = 0; p < np; p++) {
                C[m][n] = rne((double)C[m][n] + (double)bf(A[m][2 * p]) * bf(B[p][2 * n]));
                C[m][n] = rne((double)C[m][n] + (double)bf(A[m][2 * p + 1]) * bf(B[p][2 * n + 1]));
            }
}
#define amx_bf16_usable() true
#endif

#ifndef PROBE_EMULATE
static bool amx_bf16_usable(void)
{
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7)
        return false;
    __cpuid_count(7, 0, a, b, c, d);
    if (!(d & (1u << 22)) || !(d & (1u << 24)))
        return false;
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0x60000) != 0x60000)
        return false;
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0; /* ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA */
}
#endif

static void run_set(const char *name, int np, int samples, int cbase, int ce, int pe)
{
    long match[N_MODELS] = {0}, informative = 0, total = 0;
    int shown = 0;
    float firstbad[8][N_MODELS + 2];
    for (int s = 0; s < samples; s++) {
        _Alignas(64) float C[16][16], C0[16][16];
        _Alignas(64) uint16_t A[16][4], B[2][32];
        for (int m = 0; m < 16; m++)
            for (int k = 0; k < 4; k++)
                A[m][k] = rnd_bf16(pe);
        for (int k = 0; k < 2; k++)
            for (int n = 0; n < 32; n++)
                B[k][n] = rnd_bf16(pe);
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 16; n++)
                C[m][n] = C0[m][n] = bits_f((rnd() & 0x807fffffu) | (uint32_t)(127 + cbase - ce + (int)(rnd() % (uint32_t)(2 * ce + 1))) << 23);
        tile_product(C, A, B, np);
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 16; n++) {
                uint16_t a[4], b[4];
                for (int p = 0; p < np; p++) {
                    a[2 * p] = A[m][2 * p], a[2 * p + 1] = A[m][2 * p + 1];
                    b[2 * p] = B[p][2 * n], b[2 * p + 1] = B[p][2 * n + 1];
                }
                float mo[N_MODELS];
                models(mo, C0[m][n], a, b, np);
                bool all_same = true;
                for (int i = 0; i < N_MODELS; i++) {
                    match[i] += f_bits(mo[i]) == f_bits(C[m][n]);
                    all_same &= f_bits(mo[i]) == f_bits(mo[0]);
                }
                informative += !all_same;
                total++;
                if (f_bits(mo[0]) != f_bits(C[m][n]) && shown < 8) {
                    firstbad[shown][0] = C0[m][n];
                    firstbad[shown][1] = C[m][n];
                    memcpy(&firstbad[shown][2], mo, sizeof mo);
                    shown++;
                }
            }
    }
    printf("%s: %ld elements, %ld where the models differ; matches:", name, total, informative);
    for (int i = 0; i < N_MODELS; i++)
        printf(" %s %ld", model_names[i], match[i]);
    printf("\n");
    for (int i = 0; i < shown; i++) {
        printf("  differs from even-RNE: c %a tile %a |", firstbad[i][0], firstbad[i][1]);
        for (int k = 0; k < N_MODELS; k++)
            printf(" %s %a", model_names[k], firstbad[i][2 + k]);
        printf("\n");
    }
}

int main(int argc, char **argv)
{
    const int samples = argc > 1 && atoi(argv[1]) > 0 ? atoi(argv[1]) : 64;
    if (!amx_bf16_usable()) {
        printf("amx bf16 probe: no AMX-BF16 on this CPU (or no tile permission): nothing to characterize\n");
        return 0;
    }
    /* c near the products' scale (their sums round), then c much larger (a product is a
     * fraction of c's ulp: the rounding of each step shows). */
    run_set("one pair, c ~ products", 1, samples, 0, 6, 3);
    run_set("two pairs, c ~ products", 2, samples, 0, 6, 3);
    run_set("one pair, products ~ ulp(c)", 1, samples, 20, 2, 2);
    run_set("two pairs, products ~ ulp(c)", 2, samples, 20, 2, 2);
    return 0;
}
#else
int main(void)
{
    printf("amx bf16 probe: not an x86-64 build\n");
    return 0;
}
#endif
