/*
 * bench_attention.c — the CPU causal attention alone (src/compute/cpu/attention.c), at the
 * Qwen3-0.6B shape (16 query heads, 8 K/V heads, head_dim 128), over K/V rows served in
 * runs of 16 (a paged store) of bf16 (or --kv f32|q8_0).
 *
 * For each context N (--ctx, default 2048,8192,18432) it times:
 *  - prefill: the last chunk of a cold N-token prompt (--chunk queries, default 512, at
 *    positions N - chunk .. N - 1, one call, as the engine issues a prefill step);
 *  - decode: single-query calls at position N - 1.
 * Figures are the median thread CPU time of --reps runs (default 5) on the calling thread
 * (--threads 1, the default, runs the tasks inline, so the CPU time is the work's) and
 * the GFLOP/s of that time, counting 4 * head_dim flops per visible (query, head, key):
 * 2 * head_dim for q.k and 2 * head_dim for p.v. With --threads T > 1 the wall time of a
 * T-thread pool is reported instead (noisy on a shared machine).
 *
 * "whole prompt" extrapolates to the attention's CPU seconds in a cold N-token prefill
 * (every 512-token chunk, all 28 layers, the linear layers excluded) at the last chunk's
 * GFLOP/s for every chunk: timing each chunk at its own context would take minutes.
 *
 * --numerics f32,pair,emu (bf16 K/V; default: this process's choice, "auto") times each
 * listed attention order in turn within every repetition, rotating which goes first (so
 * the orders see the same machine): f32 the canonical order, pair the pair order of
 * attention_impl.h (on AMX-BF16 tiles where they passed their check), emu the pair order
 * with the tiles off (the AVX-512 emulation), tile the tile order (AMX-BF16 tiles only:
 * refused where they are absent). Each order's medians, then each one's time over the
 * first's.
 *
 * Usage: bench_attention [--ctx N,N,..] [--chunk C] [--reps R] [--kv bf16|f32|q8_0]
 *                        [--threads T] [--numerics LIST]. Kernels: the dispatched ones
 *                        (CAIRN_KERNELS overrides).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compute/cpu/attention.h"
#include "compute/cpu/attention_impl.h"
#include "compute/cpu/kernels.h"
#include "util/thread_pool.h"

enum { N_HEADS = 16, N_KV_HEADS = 8, HEAD_DIM = 128, RUN = 16, N_LAYERS = 28 };

static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float rndf(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((int)((rng >> 16) % 2000001) - 1000000) * 1e-6f;
}

typedef struct {
    unsigned char *k, *v; /* [n_pos][kv_dim] of the K/V dtype */
    size_t row_bytes;
    int n_pos;
} store_t;

/* The accessor: rows in runs of RUN positions, like the paged store's blocks. */
static int store_rows(void *ctx, int layer, int pos, void **k, void **v)
{
    store_t *s = ctx;
    (void)layer;
    if (pos < 0 || pos >= s->n_pos)
        return 0;
    *k = s->k + (size_t)pos * s->row_bytes;
    *v = s->v + (size_t)pos * s->row_bytes;
    int left = s->n_pos - pos, in_run = RUN - pos % RUN;
    return left < in_run ? left : in_run;
}

/* The attention orders --numerics names. */
enum { NUM_AUTO = -1, NUM_F32, NUM_PAIR, NUM_EMU, NUM_TILE, NUM_KINDS };
static const char *const num_names[NUM_KINDS] = {"f32", "pair", "emu", "tile"};

static void set_numerics(int m)
{
    kern__attn_tile_set(m == NUM_AUTO ? -1 : m == NUM_TILE);
    kern__attn_pair_set(m == NUM_AUTO ? -1 : m == NUM_PAIR || m == NUM_EMU);
    kern__attn_pair_tiles_allow(m != NUM_EMU);
}

static int parse_numerics(const char *s, int *list, int *n)
{
    *n = 0;
    while (*s && *n < NUM_KINDS) {
        int k = 0;
        while (k < NUM_KINDS && strncmp(s, num_names[k], strlen(num_names[k])))
            k++;
        if (k == NUM_KINDS)
            return -1;
        list[(*n)++] = k;
        s += strlen(num_names[k]);
        if (*s == ',')
            s++;
        else if (*s)
            return -1;
    }
    return *n ? 0 : -1;
}

static int parse_dtype(const char *s, cairn_dtype_t *out)
{
    if (!strcmp(s, "bf16"))
        *out = CAIRN_DTYPE_BF16;
    else if (!strcmp(s, "f32"))
        *out = CAIRN_DTYPE_F32;
    else if (!strcmp(s, "q8_0"))
        *out = CAIRN_DTYPE_Q8_0;
    else
        return -1;
    return 0;
}

/* Times one call of attention over queries [first, first + n) of the store; returns
 * seconds (thread CPU with one thread, wall with a pool). */
static double time_call(cairn_thread_pool_t *tp, const attn_cfg_t *cfg, attn_query_t *qs, int n)
{
    double c0 = thread_cpu(), w0 = wall();
    attn_forward(tp, cfg, 0, qs, n);
    return tp ? wall() - w0 : thread_cpu() - c0;
}

int main(int argc, char **argv)
{
    int ctxs[16] = {2048, 8192, 18432}, n_ctx = 3, chunk = 512, reps = 5, threads = 1;
    int nums[NUM_KINDS] = {NUM_AUTO}, n_num = 1;
    cairn_dtype_t dt = CAIRN_DTYPE_BF16;
    const char *dt_name = "bf16";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ctx") && i + 1 < argc) {
            n_ctx = 0;
            for (char *s = argv[++i]; *s && n_ctx < 16;) {
                ctxs[n_ctx++] = (int)strtol(s, &s, 10);
                if (*s == ',')
                    s++;
            }
        } else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) {
            chunk = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--numerics") && i + 1 < argc && !parse_numerics(argv[i + 1], nums, &n_num)) {
            i++;
        } else if (!strcmp(argv[i], "--kv") && i + 1 < argc && !parse_dtype(argv[i + 1], &dt)) {
            dt_name = argv[++i];
        } else {
            fprintf(stderr, "usage: bench_attention [--ctx N,N,..] [--chunk C] [--reps R] "
                            "[--kv bf16|f32|q8_0] [--threads T] [--numerics f32,pair,emu,tile]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 64 || chunk < 1 || threads < 1) {
        fprintf(stderr, "bench_attention: --reps 1..64, --chunk >= 1, --threads >= 1\n");
        return 2;
    }
    kern_init();
    cairn_thread_pool_t *tp = NULL;
    if (threads > 1 && cairn_thread_pool_create(threads, &tp)) {
        fprintf(stderr, "bench_attention: cannot create a pool of %d threads\n", threads);
        return 1;
    }
    printf("attention, kernels %s, %d/%d heads x %d, %s K/V in runs of %d, %s, median of %d\n",
           kern_impl_name(), N_HEADS, N_KV_HEADS, HEAD_DIM, dt_name, RUN,
           tp ? "wall time of a pool" : "1 thread CPU time", reps);
    printf("pair order: %s by default here; its tiles: %s\n", kern__attn_pair_on() ? "on" : "off",
           kern__attn_pair_tiles_state());
    printf("tile order: %s by default here; the tiles: %s (CPU %s)\n", kern__attn_tile_on() ? "on" : "off",
           kern__attn_tile_state(), kern__attn_tile_cpu());
    for (int m = 0; m < n_num; m++)
        if (nums[m] == NUM_TILE && (!kern__attn_tile_impl() || dt != CAIRN_DTYPE_BF16)) {
            fprintf(stderr, "bench_attention: the tile order needs AMX-BF16 tiles and bf16 K/V\n");
            cairn_thread_pool_destroy(tp);
            return 2;
        }
    const int q_dim = N_HEADS * HEAD_DIM, kv_dim = N_KV_HEADS * HEAD_DIM;
    int rc = 0;
    for (int c = 0; c < n_ctx; c++) {
        const int n_pos = ctxs[c], nq = chunk < n_pos ? chunk : n_pos;
        store_t st = {NULL, NULL, cairn_dtype_row_bytes(dt, kv_dim), n_pos};
        attn_kv_t kv = {store_rows, &st};
        const int slots = tp ? cairn_thread_pool_size(tp) : 1;
        attn_cfg_t cfg = {N_HEADS, N_KV_HEADS, HEAD_DIM, dt, NULL, slots, n_pos};
        size_t per = attn_scratch_floats(N_HEADS, N_KV_HEADS, HEAD_DIM, n_pos);
        float *q = malloc((size_t)nq * q_dim * sizeof(float));
        float *out = malloc((size_t)nq * q_dim * sizeof(float));
        float *row = malloc((size_t)kv_dim * sizeof(float));
        attn_query_t *qs = malloc((size_t)nq * sizeof(*qs));
        st.k = malloc((size_t)n_pos * st.row_bytes);
        st.v = malloc((size_t)n_pos * st.row_bytes);
        cfg.scratch = malloc((size_t)slots * per * sizeof(float));
        if (!q || !out || !row || !qs || !st.k || !st.v || !cfg.scratch) {
            fprintf(stderr, "bench_attention: out of memory at context %d\n", n_pos);
            rc = 1;
        } else {
            for (size_t i = 0; i < (size_t)nq * q_dim; i++)
                q[i] = 2.0f * rndf();
            for (int p = 0; p < n_pos; p++) {
                for (int i = 0; i < kv_dim; i++)
                    row[i] = 2.0f * rndf();
                kern_row_from_f32(st.k + (size_t)p * st.row_bytes, dt, row, kv_dim);
                for (int i = 0; i < kv_dim; i++)
                    row[i] = rndf();
                kern_row_from_f32(st.v + (size_t)p * st.row_bytes, dt, row, kv_dim);
            }
            for (int i = 0; i < nq; i++)
                qs[i] = (attn_query_t){q + (size_t)i * q_dim, out + (size_t)i * q_dim, &kv, n_pos - nq + i};
            double keys = 0; /* visible (query, key) pairs of the chunk */
            for (int i = 0; i < nq; i++)
                keys += qs[i].pos + 1;
            const double flops = keys * N_HEADS * 4.0 * HEAD_DIM;
            double tpre[NUM_KINDS][64], tdec[NUM_KINDS][64], pre[NUM_KINDS], dec[NUM_KINDS];
            for (int m = 0; m < n_num; m++) { /* warm: pages, caches, the tiles' self-check */
                set_numerics(nums[m]);
                time_call(tp, &cfg, qs, nq);
            }
            for (int r = 0; r < reps; r++)
                for (int i = 0; i < n_num; i++) {
                    const int m = (i + r) % n_num; /* each order first in turn */
                    set_numerics(nums[m]);
                    tpre[m][r] = time_call(tp, &cfg, qs, nq);
                    tdec[m][r] = time_call(tp, &cfg, qs + nq - 1, 1);
                }
            const double dflops = (double)n_pos * N_HEADS * 4.0 * HEAD_DIM;
            /* All chunks of the prompt, all layers: pairs n(n+1)/2 per head. */
            const double prompt_flops = (double)n_pos * (n_pos + 1) / 2 * N_HEADS * 4.0 * HEAD_DIM * N_LAYERS;
            for (int m = 0; m < n_num; m++) {
                pre[m] = median(tpre[m], reps);
                dec[m] = median(tdec[m], reps);
                printf("  ctx %6d %-4s prefill %4d queries %8.2f ms  %6.1f GFLOP/s | decode %7.3f ms  %6.1f GFLOP/s"
                       " | whole prompt, %d layers ~%.1f s (%.2f GFLOP/token)",
                       n_pos, nums[m] == NUM_AUTO ? "auto" : num_names[nums[m]], nq, pre[m] * 1e3,
                       flops / pre[m] * 1e-9, dec[m] * 1e3, dflops / dec[m] * 1e-9, N_LAYERS,
                       prompt_flops / (flops / pre[m]), prompt_flops / n_pos * 1e-9);
                if (m)
                    printf(" | %.2fx the %s time (decode %.2fx)", pre[m] / pre[0], num_names[nums[0]],
                           dec[m] / dec[0]);
                printf("\n");
            }
            set_numerics(NUM_AUTO);
        }
        free(q);
        free(out);
        free(row);
        free(qs);
        free(st.k);
        free(st.v);
        free(cfg.scratch);
        if (rc)
            break;
    }
    cairn_thread_pool_destroy(tp);
    return rc;
}
