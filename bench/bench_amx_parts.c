/*
 * bench_amx_parts.c — where the AMX-INT8 prefill kernel's time goes (issue 12): one thread,
 * one call of 512 rows x 1024 -> 3072 (the 0.6B shape's gate projection), thread CPU time,
 * median of --reps (default 7), for q4_k, q6_k and q8_0 weights:
 *
 *   full      quant_amx.c as compiled into this bench (amx_parts_real.c: real tiles under
 *             other names, so a variant build of the file can be measured; skipped where
 *             AMX-INT8 is not granted), its result compared bit for bit with "vnni"'s
 *             (`bits same` / `bits DIFFER` at the end of the line);
 *   no tiles  quant_amx.c compiled into this file with every tile instruction a stub
 *             (a tile store writes its 1 KiB with 16 vector stores, everything else is empty):
 *             the weight packing, the folds of the tile sums into the float chains and the
 *             loops, without the tile products, loads and stores;
 *   pack      the packing alone (kq_pack / b32_pack of every 16 outputs x block);
 *   act       the activation rounding of the 512 rows (q8_k / q8_0, the driver's step);
 *   vnni      the library's "avx512" kernel (the VNNI rows) for comparison.
 *
 * So "full - no tiles" is what the tiles cost (products, tile loads and stores, and any
 * stall on their results) and "no tiles - pack" what the folds and loops cost. GMAC/s count
 * one int8 multiply-add per (row, output, element). Usage: bench_amx_parts [reps].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>

/* ---- quant_amx.c without its tile instructions -------------------------------------- */

/* 16 rows of 64 bytes, as a tile store writes them (a pattern no memset can make). */
__attribute__((target("avx512f"))) static inline void stub_store(void *base, long stride)
{
    const __m512i v = _mm512_set1_epi32(0x01020304);
    for (int r = 0; r < 16; r++)
        _mm512_storeu_si512((unsigned char *)base + r * stride, v);
}
#undef _tile_loadconfig
#undef _tile_release
#undef _tile_zero
#undef _tile_loadd
#undef _tile_stored
#undef _tile_dpbssd
#define _tile_loadconfig(c) ((void)(c))
#define _tile_release() ((void)0)
#define _tile_zero(t) ((void)0)
#define _tile_loadd(t, base, stride) ((void)(base), (void)(stride))
#define _tile_stored(t, base, stride) stub_store(base, stride)
#define _tile_dpbssd(c, a, b) ((void)0)
#define kern__amx_qmm_q8_0 stub_amx_qmm_q8_0
#define kern__amx_qmm_q4_0 stub_amx_qmm_q4_0
#define kern__amx_qmm_q4_k stub_amx_qmm_q4_k
#define kern__amx_qmm_q5_k stub_amx_qmm_q5_k
#define kern__amx_qmm_q6_k stub_amx_qmm_q6_k
#define kern__amx_qmm_q8_0_table stub_amx_qmm_q8_0_table
#define kern__amx_qmm_q4_0_table stub_amx_qmm_q4_0_table
#define kern__amx_qmm_q4_k_table stub_amx_qmm_q4_k_table
#define kern__amx_qmm_q5_k_table stub_amx_qmm_q5_k_table
#define kern__amx_qmm_q6_k_table stub_amx_qmm_q6_k_table
#define kern__amx_qmm_table_bytes_kq stub_amx_qmm_table_bytes_kq
#define kern__amx_qmm_table_bytes_b32 stub_amx_qmm_table_bytes_b32
#define kern__amx_qmm_table_fill_q4_k stub_amx_qmm_table_fill_q4_k
#define kern__amx_qmm_table_fill_q6_k stub_amx_qmm_table_fill_q6_k
#define kern__amx_qmm_table_fill_q8_0 stub_amx_qmm_table_fill_q8_0
#define kern__amx_qmm_table_fill_q4_0 stub_amx_qmm_table_fill_q4_0
#include "compute/cpu/x86/x86_impls.h"
void stub_amx_qmm_q8_0(KERN_QMM_ARGS);
void stub_amx_qmm_q4_0(KERN_QMM_ARGS);
void stub_amx_qmm_q4_k(KERN_QMM_ARGS);
void stub_amx_qmm_q5_k(KERN_QMM_ARGS);
void stub_amx_qmm_q6_k(KERN_QMM_ARGS);
#include "compute/cpu/x86/quant_amx.c"
#undef kern__amx_qmm_q8_0
#undef kern__amx_qmm_q4_0
#undef kern__amx_qmm_q4_k
#undef kern__amx_qmm_q5_k
#undef kern__amx_qmm_q6_k

#include "compute/cpu/kernels_impl.h"

/* amx_parts_real.c */
void real_amx_qmm_q8_0(KERN_QMM_ARGS);
void real_amx_qmm_q4_k(KERN_QMM_ARGS);
void real_amx_qmm_q6_k(KERN_QMM_ARGS);

static double thread_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd32(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 32);
}
static float rndf(void) { return (float)((int)(rnd32() % 2000001) - 1000000) * 1e-6f; }

/* Random bits with plausible f16 scales (d, dmin first; q6_k's d last). */
static void fill_quant(unsigned char *w, cairn_dtype_t t, int rows, int in)
{
    const size_t rb = cairn_dtype_row_bytes(t, in), per = (size_t)(in / cairn_dtype_block_elems(t)),
                 bb = rb / per;
    for (size_t i = 0; i < rb * (size_t)rows; i++)
        w[i] = (unsigned char)rnd32();
    for (size_t b = 0; b < (size_t)rows * per; b++) {
        uint16_t d = compute_f32_to_f16(0.001f + 0.01f * (rndf() + 1.0f)), dm = compute_f32_to_f16(0.005f);
        unsigned char *blk = w + b * bb;
        if (t == CAIRN_DTYPE_Q6_K) {
            memcpy(blk + 208, &d, 2);
        } else {
            memcpy(blk, &d, 2);
            if (t != CAIRN_DTYPE_Q8_0)
                memcpy(blk + 2, &dm, 2);
        }
    }
}

enum { ROWS = 512, IN = 1024, OUT = 3072 };

typedef struct {
    cairn_dtype_t t;
    const kern_type_ops_t *ops;
    unsigned char *w, *xq;
    int32_t *xsum;
    size_t ldw, ldq;
    const float *x;
    float *y;
} case_t;

typedef enum { P_FULL, P_STUB, P_PACK, P_ACT, P_VNNI } part_t;

static void run_part(const case_t *c, part_t p, const kern_impl_t *vnni)
{
    switch (p) {
    case P_FULL:
        if (c->t == CAIRN_DTYPE_Q8_0)
            real_amx_qmm_q8_0(c->y, OUT, c->xq, c->ldq, c->xsum, ROWS, IN, c->w, c->ldw, 0, OUT, false);
        else if (c->t == CAIRN_DTYPE_Q6_K)
            real_amx_qmm_q6_k(c->y, OUT, c->xq, c->ldq, c->xsum, ROWS, IN, c->w, c->ldw, 0, OUT, false);
        else
            real_amx_qmm_q4_k(c->y, OUT, c->xq, c->ldq, c->xsum, ROWS, IN, c->w, c->ldw, 0, OUT, false);
        return;
    case P_VNNI: vnni->types[c->t].qmatmul_range(c->y, OUT, c->xq, c->ldq, c->xsum, ROWS, IN, c->w, c->ldw, 0, OUT, false); return;
    case P_STUB:
        if (c->t == CAIRN_DTYPE_Q8_0)
            stub_amx_qmm_q8_0(c->y, OUT, c->xq, c->ldq, c->xsum, ROWS, IN, c->w, c->ldw, 0, OUT, false);
        else if (c->t == CAIRN_DTYPE_Q6_K)
            stub_amx_qmm_q6_k(c->y, OUT, c->xq, c->ldq, c->xsum, ROWS, IN, c->w, c->ldw, 0, OUT, false);
        else
            stub_amx_qmm_q4_k(c->y, OUT, c->xq, c->ldq, c->xsum, ROWS, IN, c->w, c->ldw, 0, OUT, false);
        return;
    case P_PACK: {
        static _Alignas(64) kq_pack_t kp;
        static _Alignas(64) b32_pack_t bp;
        const bool k = c->t != CAIRN_DTYPE_Q8_0;
        const int nb = IN / (k ? QK_K : QK8_0);
        for (int o = 0; o < OUT; o += 16) {
            const unsigned char *wr[16];
            for (int i = 0; i < 16; i++)
                wr[i] = c->w + (size_t)(o + i) * c->ldw;
            for (int b = 0; b < nb; b++) {
                if (k)
                    kq_pack(&kp, wr, b, c->t);
                else
                    b32_pack(&bp, wr, b, false);
                __asm__ volatile("" : : "r"(&kp), "r"(&bp) : "memory");
            }
        }
        return;
    }
    case P_ACT: {
        const kern_type_ops_t *a = &kern__impl_by_name("avx512")->types[c->ops->act];
        for (int r = 0; r < ROWS; r++) {
            a->from_f32(c->xq + (size_t)r * c->ldq, c->x + (size_t)r * IN, IN);
            if (c->xsum)
                kern__q8_0_sums(c->xsum + (size_t)r * (IN / 32), c->xq + (size_t)r * c->ldq, IN / 32);
        }
        return;
    }
    }
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    if (reps < 1 || reps > 64)
        reps = 7;
    const bool amx = kern_impl_available("amx"), vnni_ok = kern_impl_available("avx512");
    if (!vnni_ok) {
        printf("bench_amx_parts: this CPU cannot run the \"avx512\" kernels (AVX512_BF16 and VNNI); nothing to do\n");
        return 0;
    }
    const kern_impl_t *k = kern__impl_by_name("amx"), *v = kern__impl_by_name("avx512");
    printf("bench_amx_parts: %d x %d -> %d, one thread, thread CPU time, median of %d; AMX-INT8 %s\n", ROWS, IN, OUT,
           reps, amx ? "granted" : "not available (the \"full\" line is skipped)");
    static const cairn_dtype_t types[] = {CAIRN_DTYPE_Q4_K, CAIRN_DTYPE_Q6_K, CAIRN_DTYPE_Q8_0};
    static const char *const names[] = {"full", "no tiles", "pack", "act", "vnni"};
    float *x = aligned_alloc(64, sizeof(float) * ROWS * IN), *y = aligned_alloc(64, sizeof(float) * ROWS * OUT),
          *yfull = aligned_alloc(64, sizeof(float) * ROWS * OUT);
    if (!x || !y || !yfull)
        return 1;
    for (size_t i = 0; i < (size_t)ROWS * IN; i++)
        x[i] = rndf();
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        case_t c = {.t = types[ti], .ops = &k->types[types[ti]], .x = x, .y = y};
        c.ldw = cairn_dtype_row_bytes(c.t, IN);
        c.ldq = cairn_dtype_row_bytes(c.ops->act, IN);
        c.w = aligned_alloc(64, (c.ldw * OUT + 63) & ~(size_t)63);
        c.xq = aligned_alloc(64, (c.ldq * ROWS + 63) & ~(size_t)63);
        c.xsum = c.ops->act == CAIRN_DTYPE_Q8_0 ? aligned_alloc(64, sizeof(int32_t) * ROWS * (IN / 32)) : NULL;
        if (!c.w || !c.xq)
            return 1;
        fill_quant(c.w, c.t, OUT, IN);
        run_part(&c, P_ACT, v);
        printf("%-5s", cairn_dtype_name(c.t));
        for (int p = 0; p <= P_VNNI; p++) {
            if (p == P_FULL && !amx) {
                printf("  full -");
                continue;
            }
            double s[64];
            run_part(&c, (part_t)p, v);
            for (int r = 0; r < reps; r++) {
                const double t0 = thread_s();
                run_part(&c, (part_t)p, v);
                s[r] = thread_s() - t0;
            }
            qsort(s, (size_t)reps, sizeof s[0], cmp_double);
            const double med = s[reps / 2];
            printf("  %s %.2f ms", names[p], med * 1e3);
            if (p == P_FULL || p == P_VNNI)
                printf(" (%.0f GMAC/s)", (double)ROWS * IN * OUT / med / 1e9);
            if (p == P_FULL)
                memcpy(yfull, y, sizeof(float) * ROWS * OUT);
        }
        if (amx)
            printf("  bits %s", memcmp(yfull, y, sizeof(float) * ROWS * OUT) ? "DIFFER" : "same");
        printf("\n");
        free(c.w);
        free(c.xq);
        free(c.xsum);
    }
    free(x);
    free(y);
    free(yfull);
    return 0;
}
#else
int main(void)
{
    printf("bench_amx_parts: x86 only\n");
    return 0;
}
#endif
