/*
 * bench_cuda_gemm — the CUDA backend's matrix products on the model shapes: the
 * batch-invariant mode (one cuBLASLt algorithm per shape, no split-K, no workspace)
 * against the fast mode (cuBLASLt's heuristic per row count, 32 MiB workspace), which is
 * "cuBLAS" as a user would call it.
 *
 *   bench_cuda_gemm [ROWS ...]     default 1 8 64 512 2048
 *
 * Shapes: every product of a Qwen3-0.6B and a Qwen3-8B layer plus the lm_head (bf16
 * weights, f32 x converted to bf16 inside the op, f32 out). Each (mode, shape, rows) is
 * compute_matmul timed with CUDA events on the backend's stream, 20 runs after 3 warm-ups,
 * median. Prints TFLOP/s (2 out in rows / t), weight GB/s, and the invariant/fast ratio;
 * the summary gives the prefill ratio (512 rows) per model as time-weighted totals.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/cuda/cuda_host.h"

#define CK(x)                                                                                                   \
    do {                                                                                                        \
        cudaError_t e_ = (x);                                                                                   \
        if (e_ != cudaSuccess) {                                                                                \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                         \
            exit(1);                                                                                            \
        }                                                                                                       \
    } while (0)

typedef struct {
    const char *model, *name;
    int out, in;
} shape_t;

static const shape_t shapes[] = {
    {"0.6B", "q", 2048, 1024},     {"0.6B", "k|v", 1024, 1024},   {"0.6B", "o", 1024, 2048},
    {"0.6B", "gate|up", 3072, 1024}, {"0.6B", "down", 1024, 3072}, {"0.6B", "lm_head", 151936, 1024},
    {"8B", "q", 4096, 4096},       {"8B", "k|v", 1024, 4096},     {"8B", "o", 4096, 4096},
    {"8B", "gate|up", 12288, 4096}, {"8B", "down", 4096, 12288},   {"8B", "lm_head", 151936, 4096},
};
/* How often each product runs per layer (k and v, gate and up: twice); lm_head once. */
static const int weight[] = {1, 2, 1, 2, 1, 1, 1, 2, 1, 2, 1, 1};

static void log_stderr(cairn_log_level_t level, const char *msg, void *user)
{
    (void)user;
    if (level >= CAIRN_LOG_INFO)
        fprintf(stderr, "log: %s\n", msg);
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static float time_mm(compute_backend_t *be, const float *x, int rows, int in, void *w, int out, float *y)
{
    cuda_backend_t *b = (cuda_backend_t *)be;
    compute_mm_t mm = {y, {w, CAIRN_DTYPE_BF16, out, in}};
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float ms[20];
    for (int i = 0; i < 23; i++) {
        CK(cudaEventRecord(e0, b->stream));
        compute_matmul(be, x, rows, in, &mm, 1, CAIRN_MATH_BF16);
        CK(cudaEventRecord(e1, b->stream));
        CK(cudaEventSynchronize(e1));
        if (i >= 3)
            CK(cudaEventElapsedTime(&ms[i - 3], e0, e1));
    }
    if (compute_sync(be)) {
        fprintf(stderr, "matmul failed\n");
        exit(1);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(ms, 20, sizeof(float), cmp_f);
    return ms[10];
}

int main(int argc, char **argv)
{
    cairn_log_set_handler(log_stderr, NULL);
    int rows_list[16] = {1, 8, 64, 512, 2048}, n_rows = 5;
    if (argc > 1) {
        n_rows = 0;
        for (int i = 1; i < argc && n_rows < 16; i++)
            rows_list[n_rows++] = atoi(argv[i]);
    }
    compute_backend_t *be[2] = {NULL, NULL}; /* [0] invariant, [1] fast */
    char err[256];
    for (int m = 0; m < 2; m++) {
        setenv("CAIRN_CUDA_INVARIANT", m ? "0" : "1", 1);
        if (compute_backend_create("cuda", NULL, &be[m], err, sizeof(err))) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
    }
    printf("numerics: invariant %s, fast %s\n", compute_numerics_id(be[0], CAIRN_MATH_BF16, CAIRN_DTYPE_BF16),
           compute_numerics_id(be[1], CAIRN_MATH_BF16, CAIRN_DTYPE_BF16));
    int max_rows = 0;
    for (int i = 0; i < n_rows; i++)
        max_rows = rows_list[i] > max_rows ? rows_list[i] : max_rows;
    size_t max_in = 12288, max_out = 151936;
    float *x, *y;
    CK(cudaMalloc((void **)&x, (size_t)max_rows * max_in * 4));
    CK(cudaMalloc((void **)&y, (size_t)max_rows * max_out * 4));
    float *hx = malloc((size_t)max_rows * max_in * 4);
    for (size_t i = 0; i < (size_t)max_rows * max_in; i++)
        hx[i] = (float)((int)(i * 2654435761u % 2001) - 1000) * 1e-3f;
    CK(cudaMemcpy(x, hx, (size_t)max_rows * max_in * 4, cudaMemcpyHostToDevice));
    free(hx);
    double tot[2][2][16]; /* [model][mode][rows] weighted time */
    memset(tot, 0, sizeof(tot));
    printf("%-5s %-8s %-14s %5s %10s %10s %8s %10s %10s %8s %7s\n", "model", "product", "out x in", "rows", "inv_ms",
           "inv_TF/s", "inv_GB/s", "fast_ms", "fast_TF/s", "fastGB/s", "inv/fast");
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        const shape_t *sh = &shapes[s];
        size_t wb = (size_t)sh->out * sh->in * 2;
        uint16_t *hw = malloc(wb);
        for (size_t i = 0; i < wb / 2; i++)
            hw[i] = (uint16_t)(((i * 40503u) & 0x8000) | ((0x78 + (i % 5)) << 7) | (i * 2654435761u >> 25));
        void *w;
        CK(cudaMalloc(&w, wb));
        CK(cudaMemcpy(w, hw, wb, cudaMemcpyHostToDevice));
        free(hw);
        for (int r = 0; r < n_rows; r++) {
            const int rows = rows_list[r];
            float ms[2];
            for (int m = 0; m < 2; m++) {
                ms[m] = time_mm(be[m], x, rows, sh->in, w, sh->out, y);
                tot[sh->model[0] == '8'][m][r] += weight[s] * ms[m];
            }
            double flop = 2.0 * sh->out * sh->in * rows;
            char dims[32];
            snprintf(dims, sizeof(dims), "%dx%d", sh->out, sh->in);
            printf("%-5s %-8s %-14s %5d %10.4f %10.1f %8.0f %10.4f %10.1f %8.0f %7.3f\n", sh->model, sh->name, dims, rows,
                   ms[0], flop / (ms[0] * 1e-3) / 1e12, wb / (ms[0] * 1e-3) / 1e9, ms[1], flop / (ms[1] * 1e-3) / 1e12,
                   wb / (ms[1] * 1e-3) / 1e9, ms[0] / ms[1]);
        }
        cudaFree(w);
    }
    printf("summary (one layer's products + lm_head, time-weighted; invariant as %% of fast = fast/inv):\n");
    for (int md = 0; md < 2; md++)
        for (int r = 0; r < n_rows; r++)
            printf("  %s rows %5d: invariant %.4f ms, fast %.4f ms: invariant at %.1f%% of cuBLAS heuristic speed\n",
                   md ? "8B  " : "0.6B", rows_list[r], tot[md][0][r], tot[md][1][r],
                   100.0 * tot[md][1][r] / tot[md][0][r]);
    cudaFree(x);
    cudaFree(y);
    compute_backend_destroy(be[0]);
    compute_backend_destroy(be[1]);
    return 0;
}
