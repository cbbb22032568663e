/*
 * bench_kernels.c — throughput of the matmul kernels and the thread pool's per-run cost.
 *
 * Prints, for the dispatched implementation (override with CAIRN_KERNELS): decode
 * matvec GB/s of weights streamed at the model shapes, prefill GFLOP/s for 512 rows in
 * both math modes, and the pool's run overhead. Every figure is the median of repeated
 * timed runs. Usage: bench_kernels [reps] (default 15).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/kernels.h"

static double now_s(void)
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

static uint64_t rng = 88172645463325252ull;
static float rndf(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((int)(rng % 2001) - 1000) * 1e-3f;
}

/* Median seconds of one kern_matmul call. */
static double time_matmul(cairn_thread_pool_t *tp, int reps, float *y, const float *x, int rows, int in,
                          const void *w, cairn_dtype_t wt, int out, cairn_math_t math)
{
    double t[64];
    if (reps > 64)
        reps = 64;
    kern_matmul(tp, y, x, rows, in, w, wt, out, math); /* warm up */
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        kern_matmul(tp, y, x, rows, in, w, wt, out, math);
        t[r] = now_s() - t0;
    }
    return median(t, reps);
}

static void empty_task(void *ctx, int task, int n_tasks) { (void)ctx, (void)task, (void)n_tasks; }

static void cpu_name(char *buf, size_t n)
{
    snprintf(buf, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) {
                snprintf(buf, n, "%s", c + 2);
                buf[strcspn(buf, "\n")] = 0;
            }
            break;
        }
    fclose(f);
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 15;
    if (reps < 1)
        reps = 15;
    char cpu[128];
    cpu_name(cpu, sizeof(cpu));
    printf("cpu: %s, %ld online cores; kernels: %s (bf16 math fast: %s); %d reps, medians\n", cpu,
           sysconf(_SC_NPROCESSORS_ONLN), kern_init(), kern_bf16_math_fast() ? "yes" : "no", reps);

    cairn_thread_pool_t *tps[2] = {NULL, NULL};
    for (int t = 0; t < 2; t++)
        if (cairn_thread_pool_create(t + 1, &tps[t]) != CAIRN_OK) {
            fprintf(stderr, "thread pool creation failed\n");
            return 1;
        }

    /* Pool overhead: an empty parallel-for with one task per thread. */
    for (int t = 0; t < 2; t++) {
        double v[15];
        for (int r = 0; r < 15; r++) {
            enum { N = 20000 };
            double t0 = now_s();
            for (int i = 0; i < N; i++)
                cairn_thread_pool_run(tps[t], empty_task, NULL, t + 1);
            v[r] = (now_s() - t0) / N;
        }
        printf("pool run overhead, %d thread(s): %.2f us\n", t + 1, median(v, 15) * 1e6);
    }

    /* Decode: one row, bf16 weights. */
    static const int shapes[][2] = {{512, 1536}, {1024, 3072}, {1024, 151936}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int in = shapes[s][0], out = shapes[s][1];
        size_t nw = (size_t)in * out;
        uint16_t *w = malloc(nw * 2);
        float *x = malloc(sizeof(float) * in), *y = malloc(sizeof(float) * out);
        if (!w || !x || !y)
            return 1;
        for (size_t i = 0; i < nw; i++)
            w[i] = kern_f32_to_bf16(rndf());
        for (int i = 0; i < in; i++)
            x[i] = rndf();
        for (int m = 0; m < 2; m++)
            for (int t = 0; t < 2; t++) {
                double sec = time_matmul(tps[t], reps, y, x, 1, in, w, CAIRN_DTYPE_BF16, out, (cairn_math_t)m);
                printf("decode %5d -> %6d bf16 %s, %d thread(s): %7.1f us  %6.1f GB/s\n", in, out,
                       m ? "math=bf16" : "math=f32 ", t + 1, sec * 1e6, (double)nw * 2 / sec / 1e9);
            }
        free(w);
        free(x);
        free(y);
    }

    /* Prefill: 512 rows x 512 -> 1536, bf16 weights. */
    {
        int rows = 512, in = 512, out = 1536;
        size_t nw = (size_t)in * out;
        uint16_t *w = malloc(nw * 2);
        float *x = malloc(sizeof(float) * rows * in), *y = malloc(sizeof(float) * rows * out);
        if (!w || !x || !y)
            return 1;
        for (size_t i = 0; i < nw; i++)
            w[i] = kern_f32_to_bf16(rndf());
        for (size_t i = 0; i < (size_t)rows * in; i++)
            x[i] = rndf();
        for (int m = 0; m < 2; m++)
            for (int t = 0; t < 2; t++) {
                double sec = time_matmul(tps[t], reps, y, x, rows, in, w, CAIRN_DTYPE_BF16, out, (cairn_math_t)m);
                printf("prefill %d x %d -> %d bf16 %s, %d thread(s): %7.2f ms  %6.1f GFLOP/s\n", rows, in, out,
                       m ? "math=bf16" : "math=f32 ", t + 1, sec * 1e3, 2.0 * rows * in * out / sec / 1e9);
            }
        free(w);
        free(x);
        free(y);
    }
    for (int t = 0; t < 2; t++)
        cairn_thread_pool_destroy(tps[t]);
    return 0;
}
