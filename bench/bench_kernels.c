/*
 * bench_kernels.c — throughput of the matmul kernels and the thread pool's per-run cost.
 *
 * Prints, for the dispatched implementation (override with CAIRN_KERNELS): decode
 * matvec GB/s of weights streamed at the model shapes, prefill GFLOP/s for 512 rows in
 * both math modes, and the pool's run overhead. Every figure is the median of repeated
 * timed runs. Usage: bench_kernels [reps] (default 15).
 *
 * "model decode" runs one decode token's matmuls of the llama-8l / qwen3-8l shapes (all
 * layers' projections, fused the way forward.c issues them, plus the vocab head) over a
 * weight set larger than the caches, so weights stream from DRAM as in real decode. The
 * baseline in the same process is a plain AVX-512 read of the same bytes (1 and 2
 * threads): the memory bandwidth this machine gives right now. The two run alternately and
 * the ratio is taken per pair, since the bandwidth of a shared machine swings from minute
 * to minute. "backend dispatch" then runs the llama-8l token through the compute backend
 * interface (compute_matmul, as a family's forward pass issues it) alternately with the
 * kern_* calls: the cost of the interface. BENCH_MODEL_ONLY=1 in the environment stops
 * after these sections.
 *
 * "quantized" (issue 12; BENCH_QUANT_ONLY=1 runs only it): for q8_0, q4_0, q4_k, q5_k and
 * q6_k weights, decode over the 0.6B shape's vocab head (1024 -> 151936, larger than the
 * caches) alternated with a raw read of the same bytes (GB/s of weights and the ratio to
 * the read), and prefill of 512 rows x 1024 -> 3072 (GMAC/s, one int8 multiply-add each;
 * 1 and 2 threads, plus per thread-CPU second; BENCH_QUANT_NO_PREFILL=1 leaves the prefill
 * out). "quantized layers" (BENCH_QUANT_LAYERS=1 runs only it): the 28 layers of one 0.6B
 * decode token in q8_0, q4_k and q6_k beside a raw read (bench_quant_layers).
 *
 * "quantized row kernels in L2" (BENCH_QUANT_L2=1 runs only it, after the pool figures): the
 * decode row kernel of each quantized type called directly (qmatmul_range, one row, one
 * thread) on a 1024 -> 256 matrix that stays in L2, many times over: ns and user-mode
 * instructions (perf_event_open, "n/a" where the kernel or VM refuses it) per output and
 * weight block (q8_0 / q4_0: 32 weights, k-quants: a 256-weight super-block), GB/s of
 * weights and GMAC/s from the cache. That is the kernels' compute per byte, apart from
 * the memory.
 *
 * The pool's run overhead is measured first, at 1 and 2 threads or at the counts listed in
 * BENCH_POOL_THREADS (e.g. "2,16"), with one and four empty tasks per thread (wall clock and
 * the process CPU time, spinning included); BENCH_POOL_ONLY=1 stops after it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BENCH_X86 1
#endif

#include "compute/backend.h"
#include "compute/cpu/kernels.h"
#include "compute/cpu/kernels_impl.h"

#ifdef __linux__
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#endif

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

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Median calling-thread CPU seconds of the last time_matmul's calls (with 1 thread: the
 * kernel's cost without the time other processes held the core). */
static double last_cpu;

/* Median seconds of one kern_matmul call. */
static double time_matmul(cairn_thread_pool_t *tp, int reps, float *y, const float *x, int rows, int in,
                          const void *w, cairn_dtype_t wt, int out, cairn_math_t math)
{
    double t[64];
    if (reps > 64)
        reps = 64;
    kern_matmul(tp, y, x, rows, in, w, wt, out, math); /* warm up */
    double c[64];
    for (int r = 0; r < reps; r++) {
        double t0 = now_s(), c0 = thread_cpu_s();
        kern_matmul(tp, y, x, rows, in, w, wt, out, math);
        t[r] = now_s() - t0;
        c[r] = thread_cpu_s() - c0;
    }
    last_cpu = median(c, reps);
    return median(t, reps);
}

/* Plain streaming read of [bytes] by the pool's threads (each a contiguous half). */
struct read_job {
    const unsigned char *p;
    size_t n;
    float sink[2];
};

/* Without AVX-512 (or off x86): a plain read, 8 bytes at a time. */
static void read_task_portable(struct read_job *j, size_t a, size_t b, int task)
{
    uint64_t s = 0;
    for (size_t i = a; i < b; i += 8) {
        uint64_t w;
        memcpy(&w, j->p + i, 8);
        s += w;
    }
    j->sink[task & 1] += (float)(s & 0xff);
}

#ifdef BENCH_X86
__attribute__((target("avx512f"))) static void read_avx512(struct read_job *j, size_t a, size_t b, int task)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = a; i < b; i += 256) {
        s0 = _mm512_add_ps(s0, _mm512_load_ps((const float *)(j->p + i)));
        s1 = _mm512_add_ps(s1, _mm512_load_ps((const float *)(j->p + i + 64)));
        s2 = _mm512_add_ps(s2, _mm512_load_ps((const float *)(j->p + i + 128)));
        s3 = _mm512_add_ps(s3, _mm512_load_ps((const float *)(j->p + i + 192)));
    }
    j->sink[task & 1] += _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}
#endif

static void read_task(void *ctx, int task, int n_tasks)
{
    struct read_job *j = ctx;
    size_t a = j->n * (size_t)task / (size_t)n_tasks & ~(size_t)255, b = j->n * (size_t)(task + 1) / (size_t)n_tasks & ~(size_t)255;
#ifdef BENCH_X86
    if (__builtin_cpu_supports("avx512f")) {
        read_avx512(j, a, b, task);
        return;
    }
#endif
    read_task_portable(j, a, b, task);
}

struct model_shape {
    const char *name;
    int layers, hidden, q_dim, kv_dim, ffn, vocab;
};

/* One decode token of a model shape (vocab 0: the layers only). Weights of any type, plain
 * or quantized: each matrix takes out rows of cairn_dtype_row_bytes(wt, in) bytes. */
static void model_token(cairn_thread_pool_t *tp, const struct model_shape *m, const unsigned char *w,
                        cairn_dtype_t wt, float *x, float *y, cairn_math_t math)
{
    const size_t rh = cairn_dtype_row_bytes(wt, m->hidden), rq = cairn_dtype_row_bytes(wt, m->q_dim),
                 rf = cairn_dtype_row_bytes(wt, m->ffn);
    const unsigned char *p = w;
    for (int l = 0; l < m->layers; l++) {
        const void *wq = p, *wk = (p += (size_t)m->q_dim * rh), *wv = (p += (size_t)m->kv_dim * rh);
        p += (size_t)m->kv_dim * rh;
        kern_mm_out_t qkv[3] = {{y, wq, m->q_dim}, {y + m->q_dim, wk, m->kv_dim},
                                {y + m->q_dim + m->kv_dim, wv, m->kv_dim}};
        kern_matmul_n(tp, x, 1, m->hidden, wt, qkv, 3, math);
        kern_matmul(tp, y, x, 1, m->q_dim, p, wt, m->hidden, math); /* wo */
        p += (size_t)m->hidden * rq;
        kern_mm_out_t gu[2] = {{y, p, m->ffn}, {y + m->ffn, p + (size_t)m->ffn * rh, m->ffn}};
        kern_matmul_n(tp, x, 1, m->hidden, wt, gu, 2, math);
        p += 2 * (size_t)m->ffn * rh;
        kern_matmul(tp, y, x, 1, m->ffn, p, wt, m->hidden, math); /* w_down */
        p += (size_t)m->hidden * rf;
    }
    if (m->vocab > 0)
        kern_matmul(tp, y, x, 1, m->hidden, p, wt, m->vocab, math);
}

/* Bytes of model_token's weights. */
static size_t model_bytes(const struct model_shape *m, cairn_dtype_t wt)
{
    const size_t rh = cairn_dtype_row_bytes(wt, m->hidden), rq = cairn_dtype_row_bytes(wt, m->q_dim),
                 rf = cairn_dtype_row_bytes(wt, m->ffn);
    const size_t layer = rh * ((size_t)m->q_dim + 2 * (size_t)m->kv_dim + 2 * (size_t)m->ffn) + rq * m->hidden +
                         rf * m->hidden;
    return layer * (size_t)m->layers + rh * (size_t)m->vocab;
}

/* model_token through the compute backend interface (what a family's forward pass
 * calls): the same products, the same fusion. */
static void model_token_backend(compute_backend_t *be, const struct model_shape *m, const unsigned char *w,
                                cairn_dtype_t wt, float *x, float *y, cairn_math_t math)
{
    const size_t es = cairn_dtype_size(wt);
    const unsigned char *p = w;
    for (int l = 0; l < m->layers; l++) {
        const void *wq = p, *wk = (p += (size_t)m->q_dim * m->hidden * es),
                   *wv = (p += (size_t)m->kv_dim * m->hidden * es);
        p += (size_t)m->kv_dim * m->hidden * es;
        compute_mm_t qkv[3] = {{y, {wq, wt, m->q_dim, m->hidden}},
                               {y + m->q_dim, {wk, wt, m->kv_dim, m->hidden}},
                               {y + m->q_dim + m->kv_dim, {wv, wt, m->kv_dim, m->hidden}}};
        compute_matmul(be, x, 1, m->hidden, qkv, 3, math);
        compute_mm_t o = {y, {p, wt, m->hidden, m->q_dim}};
        compute_matmul(be, x, 1, m->q_dim, &o, 1, math);
        p += (size_t)m->q_dim * m->hidden * es;
        compute_mm_t gu[2] = {{y, {p, wt, m->ffn, m->hidden}},
                              {y + m->ffn, {p + (size_t)m->ffn * m->hidden * es, wt, m->ffn, m->hidden}}};
        compute_matmul(be, x, 1, m->hidden, gu, 2, math);
        p += 2 * (size_t)m->ffn * m->hidden * es;
        compute_mm_t d = {y, {p, wt, m->hidden, m->ffn}};
        compute_matmul(be, x, 1, m->ffn, &d, 1, math);
        p += (size_t)m->ffn * m->hidden * es;
    }
    compute_mm_t h = {y, {p, wt, m->vocab, m->hidden}};
    compute_matmul(be, x, 1, m->hidden, &h, 1, math);
}

/* The backend interface's cost: a decode token of the llama-8l shape through the kernels
 * and through the CPU backend on the same pool, alternately; medians of each and of the
 * per-pair ratio (bf16 weights, F32 math). */
static void bench_backend_dispatch(cairn_thread_pool_t *tps[2], int reps)
{
    static const struct model_shape m = {"llama-8l", 8, 512, 512, 128, 1536, 32000};
    if (reps > 64)
        reps = 64;
    size_t per_layer = (size_t)m.hidden * (2 * (size_t)m.q_dim + 2 * (size_t)m.kv_dim + 3 * (size_t)m.ffn);
    size_t n = per_layer * m.layers + (size_t)m.vocab * m.hidden;
    uint16_t *w = aligned_alloc(64, (n * 2 + 255) & ~(size_t)255);
    float *x = aligned_alloc(64, sizeof(float) * 4096), *y = aligned_alloc(64, sizeof(float) * (size_t)(m.vocab + 2 * m.ffn));
    if (!w || !x || !y)
        exit(1);
    for (int i = 0; i < 4096; i++)
        x[i] = rndf();
    for (size_t i = 0; i < n; i++)
        w[i] = kern_f32_to_bf16(rndf() * 0.1f);
    for (int t = 0; t < 2; t++) {
        compute_backend_t *be = NULL;
        compute_backend_options_t o = {.pool = tps[t]};
        if (compute_backend_create("cpu", &o, &be, NULL, 0))
            exit(1);
        double tk[64], tb[64], ratio[64], ck[64], cb[64], cratio[64];
        model_token(tps[t], &m, (const unsigned char *)w, CAIRN_DTYPE_BF16, x, y, CAIRN_MATH_F32);
        model_token_backend(be, &m, (const unsigned char *)w, CAIRN_DTYPE_BF16, x, y, CAIRN_MATH_F32);
        for (int r = 0; r < reps; r++) {
            /* Either order in turn, so neither path always runs on a warmer cache. */
            for (int k = 0; k < 2; k++) {
                double t0 = now_s(), c0 = thread_cpu_s();
                bool backend = (r + k) % 2;
                if (backend)
                    model_token_backend(be, &m, (const unsigned char *)w, CAIRN_DTYPE_BF16, x, y, CAIRN_MATH_F32);
                else
                    model_token(tps[t], &m, (const unsigned char *)w, CAIRN_DTYPE_BF16, x, y, CAIRN_MATH_F32);
                *(backend ? &tb[r] : &tk[r]) = now_s() - t0;
                *(backend ? &cb[r] : &ck[r]) = thread_cpu_s() - c0;
            }
            ratio[r] = tb[r] / tk[r];
            cratio[r] = cb[r] / ck[r];
        }
        printf("backend dispatch, llama-8l decode token, bf16 weights, %d thread(s): kern_* %.3f ms, "
               "compute_* %.3f ms; ratio backend/kern %.3f", t + 1, median(tk, reps) * 1e3, median(tb, reps) * 1e3,
               median(ratio, reps));
        if (t == 0)
            printf(" (thread CPU time: %.3f / %.3f ms, ratio %.3f)", median(ck, reps) * 1e3, median(cb, reps) * 1e3,
                   median(cratio, reps));
        printf("\n");
        compute_backend_destroy(be);
    }
    free(w);
    free(x);
    free(y);
}

/* Runs raw read and a decode token alternately (so both see the same machine load) and
 * prints medians of each and of the per-pair ratio. */
static void bench_model_decode(cairn_thread_pool_t *tps[2], int reps)
{
    static const struct model_shape shapes[] = {
        {"llama-8l", 8, 512, 512, 128, 1536, 32000},
        {"qwen3-8l", 8, 1024, 2048, 1024, 3072, 32000},
    };
    if (reps > 64)
        reps = 64;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        const struct model_shape *m = &shapes[s];
        size_t per_layer = (size_t)m->hidden * (2 * (size_t)m->q_dim + 2 * (size_t)m->kv_dim + 3 * (size_t)m->ffn);
        size_t n = per_layer * m->layers + (size_t)m->vocab * m->hidden;
        int maxd = m->ffn > m->q_dim ? m->ffn : m->q_dim;
        uint16_t *w = aligned_alloc(64, (n * 2 + 255) & ~(size_t)255);
        float *x = aligned_alloc(64, sizeof(float) * 4096), *y = aligned_alloc(64, sizeof(float) * (size_t)(m->vocab + 2 * maxd));
        if (!w || !x || !y)
            exit(1);
        for (int i = 0; i < 4096; i++)
            x[i] = rndf();
        for (int d = 0; d < 2; d++) {
            cairn_dtype_t wt = d ? CAIRN_DTYPE_F16 : CAIRN_DTYPE_BF16;
            for (size_t i = 0; i < n; i++)
                w[i] = d ? kern_f32_to_f16(rndf() * 0.1f) : kern_f32_to_bf16(rndf() * 0.1f);
            for (int t = 0; t < 2; t++)
                for (int mm = 0; mm < (d ? 1 : 2); mm++) {
                    struct read_job rj = {(const unsigned char *)w, n * 2, {0, 0}};
                    double rd[64], tk[64], ratio[64];
                    model_token(tps[t], m, (const unsigned char *)w, wt, x, y, (cairn_math_t)mm);
                    for (int r = 0; r < reps; r++) {
                        double t0 = now_s();
                        cairn_thread_pool_run(tps[t], read_task, &rj, t + 1);
                        double t1 = now_s();
                        model_token(tps[t], m, (const unsigned char *)w, wt, x, y, (cairn_math_t)mm);
                        rd[r] = t1 - t0;
                        tk[r] = now_s() - t1;
                        ratio[r] = rd[r] / tk[r];
                    }
                    double sec = median(tk, reps), rsec = median(rd, reps);
                    printf("model decode %s, %s weights %.1f MB, math %-4s %d thread(s): %6.0f tok/s %5.1f GB/s; "
                           "raw read %5.1f GB/s; ratio %.2f\n", m->name, d ? "f16" : "bf16", n * 2 / 1e6,
                           mm ? "bf16" : "f32", t + 1, 1 / sec, n * 2 / sec / 1e9, n * 2 / rsec / 1e9,
                           median(ratio, reps));
                }
        }
        free(w);
        free(x);
        free(y);
    }
}

/* Random quantized weights: random bits with plausible f16 scales (quant_blocks.h layouts:
 * d (and dmin) first, q6_k's d last). */
static void fill_quant(unsigned char *w, cairn_dtype_t t, size_t rows, int in)
{
    const size_t rb = cairn_dtype_row_bytes(t, in), nb = rows * (size_t)(in / cairn_dtype_block_elems(t)),
                 bb = rb / (size_t)(in / cairn_dtype_block_elems(t));
    for (size_t i = 0; i < rb * rows; i++)
        w[i] = (unsigned char)((rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 56);
    for (size_t b = 0; b < nb; b++) {
        uint16_t d = kern_f32_to_f16(0.001f + 0.01f * (rndf() + 1.0f)), dm = kern_f32_to_f16(0.005f);
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

static void bench_quant(cairn_thread_pool_t *tps[2], int reps)
{
    static const cairn_dtype_t types[] = {CAIRN_DTYPE_Q8_0, CAIRN_DTYPE_Q4_0, CAIRN_DTYPE_Q4_K, CAIRN_DTYPE_Q5_K,
                                          CAIRN_DTYPE_Q6_K};
    if (reps > 64)
        reps = 64;
    const int hin = 1024, hout = 151936, rows = 512, pin = 1024, pout = 3072;
    float *x = aligned_alloc(64, sizeof(float) * (size_t)rows * pin);
    float *y = aligned_alloc(64, sizeof(float) * (size_t)rows * pout > sizeof(float) * (size_t)hout
                                     ? sizeof(float) * (size_t)rows * pout : sizeof(float) * (size_t)hout);
    if (!x || !y)
        exit(1);
    for (size_t i = 0; i < (size_t)rows * pin; i++)
        x[i] = rndf();
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
        const cairn_dtype_t t = types[k];
        const size_t hb = cairn_dtype_row_bytes(t, hin) * (size_t)hout, pb = cairn_dtype_row_bytes(t, pin) * (size_t)pout;
        unsigned char *wh = aligned_alloc(64, (hb + 255) & ~(size_t)255), *wp = aligned_alloc(64, (pb + 255) & ~(size_t)255);
        if (!wh || !wp)
            exit(1);
        fill_quant(wh, t, (size_t)hout, hin);
        fill_quant(wp, t, (size_t)pout, pin);
        for (int th = 0; th < 2; th++) {
            struct read_job rj = {wh, hb & ~(size_t)255, {0, 0}};
            double rd[64], tk[64], ratio[64];
            kern_matmul(tps[th], y, x, 1, hin, wh, t, hout, CAIRN_MATH_F32);
            for (int r = 0; r < reps; r++) {
                double t0 = now_s();
                cairn_thread_pool_run(tps[th], read_task, &rj, th + 1);
                double t1 = now_s();
                kern_matmul(tps[th], y, x, 1, hin, wh, t, hout, CAIRN_MATH_F32);
                rd[r] = t1 - t0;
                tk[r] = now_s() - t1;
                ratio[r] = rd[r] / tk[r];
            }
            printf("quantized decode 1024 -> 151936 %-4s (%.0f MB), %d thread(s): %6.2f ms %5.1f GB/s; raw read %5.1f "
                   "GB/s; ratio %.2f\n", cairn_dtype_name(t), hb / 1e6, th + 1, median(tk, reps) * 1e3,
                   hb / median(tk, reps) / 1e9, hb / median(rd, reps) / 1e9, median(ratio, reps));
        }
        for (int th = 0; th < 2 && !getenv("BENCH_QUANT_NO_PREFILL"); th++) {
            double sec = time_matmul(tps[th], reps < 5 ? reps : 5, y, x, rows, pin, wp, t, pout, CAIRN_MATH_F32);
            printf("quantized prefill %d x %d -> %d %-4s, %d thread(s): %7.2f ms %6.1f GMAC/s", rows, pin, pout,
                   cairn_dtype_name(t), th + 1, sec * 1e3, (double)rows * pin * pout / sec / 1e9);
            if (th == 0)
                printf("  (per thread-CPU second: %.1f GMAC/s)", (double)rows * pin * pout / last_cpu / 1e9);
            printf("\n");
        }
        free(wh);
        free(wp);
    }
    free(x);
    free(y);
}

/*
 * "quantized layers" (BENCH_QUANT_LAYERS=1 runs only it): the 28 layers of one decode token
 * of the Qwen3-0.6B shape (q/k/v fused, o, gate/up fused, down: model_token, no vocab head)
 * in q8_0, q4_k and q6_k weights (a Q4_K_M file mixes the last two), alternated with a raw
 * read of the same bytes, 1 and 2 threads: the small matrices a decode token is made of,
 * cut into the pool's tasks as the engine cuts them (each task's first tile starts cold),
 * where the vocab head above measures one long stream. BENCH_QUANT_TYPES (e.g. "q4_k,q6_k")
 * keeps the types named, BENCH_QUANT_THREADS=1|2 one thread count.
 */
static void bench_quant_layers(cairn_thread_pool_t *tps[2], int reps)
{
    static const struct model_shape m = {"qwen3-0.6b layers", 28, 1024, 2048, 1024, 3072, 0};
    static const cairn_dtype_t types[] = {CAIRN_DTYPE_Q8_0, CAIRN_DTYPE_Q4_K, CAIRN_DTYPE_Q6_K};
    if (reps > 64)
        reps = 64;
    float *x = aligned_alloc(64, sizeof(float) * 4096), *y = aligned_alloc(64, sizeof(float) * 8192);
    if (!x || !y)
        exit(1);
    for (int i = 0; i < 4096; i++)
        x[i] = rndf();
    const char *only_types = getenv("BENCH_QUANT_TYPES"), *only_th = getenv("BENCH_QUANT_THREADS");
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
        const cairn_dtype_t t = types[k];
        if (only_types && !strstr(only_types, cairn_dtype_name(t)))
            continue;
        const size_t n = model_bytes(&m, t);
        unsigned char *w = aligned_alloc(64, (n + 255) & ~(size_t)255);
        if (!w)
            exit(1);
        /* Whole rows of 1024 inputs: every matrix's rows are whole blocks of either width. */
        fill_quant(w, t, n / cairn_dtype_row_bytes(t, 1024), 1024);
        for (int th = 0; th < 2; th++) {
            if (only_th && atoi(only_th) != th + 1)
                continue;
            struct read_job rj = {w, n & ~(size_t)255, {0, 0}};
            double rd[64], tk[64], ratio[64];
            model_token(tps[th], &m, w, t, x, y, CAIRN_MATH_F32);
            for (int r = 0; r < reps; r++) {
                double t0 = now_s();
                cairn_thread_pool_run(tps[th], read_task, &rj, th + 1);
                double t1 = now_s();
                model_token(tps[th], &m, w, t, x, y, CAIRN_MATH_F32);
                rd[r] = t1 - t0;
                tk[r] = now_s() - t1;
                ratio[r] = rd[r] / tk[r];
            }
            printf("quantized layers, 28 x 0.6B decode %-4s (%.0f MB), %d thread(s): %6.2f ms %5.1f GB/s; raw read "
                   "%5.1f GB/s; ratio %.2f\n", cairn_dtype_name(t), n / 1e6, th + 1, median(tk, reps) * 1e3,
                   n / median(tk, reps) / 1e9, n / median(rd, reps) / 1e9, median(ratio, reps));
        }
        free(w);
    }
    free(x);
    free(y);
}

/* User-mode instructions retired by this thread from now on (-1: no counter). */
static int insn_open(void)
{
#ifdef __linux__
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.type = PERF_TYPE_HARDWARE;
    a.size = sizeof a;
    a.config = PERF_COUNT_HW_INSTRUCTIONS;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
#else
    return -1;
#endif
}

static long long insn_read(int fd)
{
    long long v = -1;
    if (fd < 0 || read(fd, &v, sizeof v) != (ssize_t)sizeof v)
        return -1;
    return v;
}

/* The decode row kernels from L2 (see the file comment): per type, the median of 15 timed
 * batches of `reps` calls of 1 row x 1024 -> 256. */
static void bench_quant_l2(int reps)
{
    static const cairn_dtype_t types[] = {CAIRN_DTYPE_Q8_0, CAIRN_DTYPE_Q4_0, CAIRN_DTYPE_Q4_K, CAIRN_DTYPE_Q5_K,
                                          CAIRN_DTYPE_Q6_K};
    const kern_impl_t *k = kern__current();
    const int in = 1024, out = 256;
    float x[1024];
    _Alignas(64) float y[256];
    _Alignas(64) unsigned char xq[2048];
    int32_t xsum[1024 / 32];
    for (int i = 0; i < in; i++)
        x[i] = rndf();
    const int fd = insn_open();
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        const cairn_dtype_t t = types[ti];
        const kern_type_ops_t *ops = &k->types[t];
        if (!ops->qmatmul_range)
            continue;
        const size_t ldw = cairn_dtype_row_bytes(t, in);
        unsigned char *w = aligned_alloc(64, (ldw * out + 63) & ~(size_t)63);
        if (!w)
            exit(1);
        fill_quant(w, t, (size_t)out, in);
        k->types[ops->act].from_f32(xq, x, in);
        if (ops->act == CAIRN_DTYPE_Q8_0)
            kern__q8_0_sums(xsum, xq, in / 32);
        const int nb = in / cairn_dtype_block_elems(t);
        double ns[15], cpu[15];
        long long ins[15];
        for (int r = 0; r < 15; r++) {
            double t0 = now_s(), c0 = thread_cpu_s();
            long long i0 = insn_read(fd);
            for (int i = 0; i < reps; i++)
                ops->qmatmul_range(y, out, xq, 0, xsum, 1, in, w, ldw, 0, out, false);
            long long i1 = insn_read(fd);
            ns[r] = (now_s() - t0) / reps / out / nb * 1e9;
            cpu[r] = (thread_cpu_s() - c0) / reps / out / nb * 1e9;
            ins[r] = i0 >= 0 && i1 >= 0 ? i1 - i0 : -1;
        }
        const double cns = median(cpu, 15), blk = (double)ldw / nb;
        char ib[32] = "n/a";
        if (ins[0] >= 0)
            snprintf(ib, sizeof ib, "%.1f", (double)ins[7] / reps / out / nb);
        printf("quantized row kernel in L2 %-4s (%d x %d, %.0f KB): %6.2f ns (thread CPU %6.2f ns) and %s "
               "instructions per output x block of %.0f B; %5.1f GB/s, %6.1f GMAC/s per thread-CPU second\n",
               cairn_dtype_name(t), in, out, (double)ldw * out / 1e3, median(ns, 15), cns, ib, blk, blk / cns,
               (double)cairn_dtype_block_elems(t) / cns);
        (void)y;
        free(w);
    }
    if (fd >= 0)
        close(fd);
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

    /* Pool overhead: an empty parallel-for with one task per thread (and four), at 1 and 2
     * threads or the counts in BENCH_POOL_THREADS (comma-separated, e.g. "2,16"). */
    {
        const char *list = getenv("BENCH_POOL_THREADS");
        int counts[16], nc = 0;
        for (const char *c = list ? list : "1,2"; *c && nc < 16;) {
            int v = atoi(c);
            if (v >= 1 && v <= 1024)
                counts[nc++] = v;
            c += strcspn(c, ",");
            c += *c == ',';
        }
        for (int i = 0; i < nc; i++) {
            cairn_thread_pool_t *tp = NULL;
            if (cairn_thread_pool_create(counts[i], &tp) != CAIRN_OK) {
                fprintf(stderr, "thread pool creation failed\n");
                return 1;
            }
            for (int per = 1; per <= 4; per *= 4) {
                double v[15], c[15];
                for (int r = 0; r < 15; r++) {
                    enum { N = 20000 };
                    double t0 = now_s(), c0 = cpu_s();
                    for (int k = 0; k < N; k++)
                        cairn_thread_pool_run(tp, empty_task, NULL, per * counts[i]);
                    v[r] = (now_s() - t0) / N;
                    c[r] = (cpu_s() - c0) / N;
                }
                printf("pool run overhead, %d thread(s), %d task(s): %.2f us (process CPU %.2f us)\n", counts[i],
                       per * counts[i], median(v, 15) * 1e6, median(c, 15) * 1e6);
            }
            cairn_thread_pool_destroy(tp);
        }
        if (getenv("BENCH_POOL_ONLY"))
            return 0;
    }

    if (getenv("BENCH_QUANT_L2")) {
        bench_quant_l2(2000);
        return 0;
    }
    if (getenv("BENCH_QUANT_LAYERS")) {
        bench_quant_layers(tps, reps);
        return 0;
    }
    if (getenv("BENCH_QUANT_ONLY")) {
        bench_quant(tps, reps);
        return 0;
    }
    bench_model_decode(tps, reps);
    bench_backend_dispatch(tps, reps);
    bench_quant(tps, reps);
    if (getenv("BENCH_MODEL_ONLY"))
        return 0;

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
                printf("prefill %d x %d -> %d bf16 %s, %d thread(s): %7.2f ms  %6.1f GFLOP/s", rows, in, out,
                       m ? "math=bf16" : "math=f32 ", t + 1, sec * 1e3, 2.0 * rows * in * out / sec / 1e9);
                if (t == 0)
                    printf("  (per thread-CPU second: %.1f GFLOP/s)", 2.0 * rows * in * out / last_cpu / 1e9);
                printf("\n");
            }
        free(w);
        free(x);
        free(y);
    }
    for (int t = 0; t < 2; t++)
        cairn_thread_pool_destroy(tps[t]);
    return 0;
}
