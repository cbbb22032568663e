/*
 * bench_llc_stream.c — what the last-level cache does for a decode's weight stream.
 *
 * Decode reads every weight byte once per token, front to back, the same bytes each token.
 * Whether part of them can stay in the L3 between tokens decides how fast that is: a cyclic
 * read larger than the cache misses every line under LRU, one that fits hits every line.
 * This bench reads a huge-page buffer cyclically with T threads (each its own contiguous
 * share, a barrier per pass, like one decode token's matmuls) and prints per-pass GB/s:
 *
 *   sizes   : the cyclic read of S MiB, for S from 32 MiB to 512 MiB (where the L3 ends);
 *   split   : a pass reads A MiB with plain loads ("the layers") and then B MiB ("the
 *             vocab head") either plain or with prefetchnta D bytes ahead, which on Intel's
 *             non-inclusive L3 fills L1 only, so B should not evict A from the L3. Per part
 *             GB/s: if A stays resident it reads at the L3's rate, not the memory's;
 *   work    : 448 MiB at a row kernel's pace (4 or 8 vpdpbusd per line) with no software
 *             prefetch or one per line 1-16 KiB ahead (t0, t1, nta): which feeds a core
 *             that computes between its loads (an Intel core has 16 line fill buffers;
 *             every software prefetch holds one).
 *
 * Usage: bench_llc_stream [threads (2)] [first cpu (0)] [sections: any of "sizes", "split",
 * "work" (all)]; threads are pinned to consecutive
 * CPUs from the first. Medians of >= 5 passes after one warm pass. x86-64 with AVX-512 only
 * (it reads with 512-bit loads); prints the L3 size sysfs reports.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define MIB ((size_t)1 << 20)

enum { MODE_PLAIN, MODE_NTA };

typedef uint64_t (*work_fn)(const char *, size_t, size_t);

typedef struct {
    const char *a;  /* region A (plain) */
    size_t a_len;
    const char *b;  /* region B, read in mode b_mode */
    size_t b_len;
    int b_mode;
    size_t dist;    /* prefetch distance in MODE_NTA and the work modes */
    work_fn a_work; /* A read at a kernel's pace instead (NULL: plain) */
} share_t;

static pthread_barrier_t bar;
static int n_threads, first_cpu;
static share_t shares[64];
static double t_start[64], t_mid[64], t_end[64];
static volatile int passes_to_run;
static volatile uint64_t sink;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

__attribute__((target("avx512f"))) static uint64_t read_plain(const char *p, size_t len)
{
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 256 <= len; i += 256) {
        s0 = _mm512_add_epi64(s0, _mm512_load_si512(p + i));
        s1 = _mm512_add_epi64(s1, _mm512_load_si512(p + i + 64));
        s2 = _mm512_add_epi64(s2, _mm512_load_si512(p + i + 128));
        s3 = _mm512_add_epi64(s3, _mm512_load_si512(p + i + 192));
    }
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
}

__attribute__((target("avx512f"))) static uint64_t read_nta(const char *p, size_t len, size_t dist)
{
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 256 <= len; i += 256) {
        _mm_prefetch(p + i + dist, _MM_HINT_NTA);
        _mm_prefetch(p + i + dist + 64, _MM_HINT_NTA);
        _mm_prefetch(p + i + dist + 128, _MM_HINT_NTA);
        _mm_prefetch(p + i + dist + 192, _MM_HINT_NTA);
        s0 = _mm512_add_epi64(s0, _mm512_load_si512(p + i));
        s1 = _mm512_add_epi64(s1, _mm512_load_si512(p + i + 64));
        s2 = _mm512_add_epi64(s2, _mm512_load_si512(p + i + 128));
        s3 = _mm512_add_epi64(s3, _mm512_load_si512(p + i + 192));
    }
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
}

/* A kernel's pace: per 64-byte line, W vpdpbusd on the loaded vector (four independent
 * chains, so ~W cycles of port-0 work per line), with a software prefetch DIST bytes ahead
 * of every line (HINT 0 none, 1 prefetcht0, 2 prefetcht1, 3 prefetchnta). */
#define WORK_FN(NAME, W, HINT)                                                                  \
    __attribute__((target("avx512f,avx512vnni"))) static uint64_t NAME(const char *p, size_t len, size_t dist) \
    {                                                                                           \
        __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), \
                        _mm512_setzero_si512()};                                                \
        const __m512i one = _mm512_set1_epi8(1);                                                \
        for (size_t i = 0; i + 64 <= len; i += 64) {                                            \
            if (HINT == 1) _mm_prefetch(p + i + dist, _MM_HINT_T0);                             \
            if (HINT == 2) _mm_prefetch(p + i + dist, _MM_HINT_T1);                             \
            if (HINT == 3) _mm_prefetch(p + i + dist, _MM_HINT_NTA);                            \
            const __m512i v = _mm512_load_si512(p + i);                                         \
            _Pragma("GCC unroll 16")                                                            \
            for (int k = 0; k < W; k++)                                                         \
                a[k & 3] = _mm512_dpbusd_epi32(a[k & 3], v, one);                               \
        }                                                                                       \
        return (uint64_t)_mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a[0], a[1]), \
                                                                  _mm512_add_epi32(a[2], a[3]))); \
    }
WORK_FN(work4_none, 4, 0)
WORK_FN(work4_t0, 4, 1)
WORK_FN(work4_t1, 4, 2)
WORK_FN(work4_nta, 4, 3)
WORK_FN(work8_none, 8, 0)
WORK_FN(work8_t0, 8, 1)
WORK_FN(work8_t1, 8, 2)
WORK_FN(work8_nta, 8, 3)

static work_fn work_of(int w, int hint)
{
    static const work_fn f4[4] = {work4_none, work4_t0, work4_t1, work4_nta};
    static const work_fn f8[4] = {work8_none, work8_t0, work8_t1, work8_nta};
    return w == 4 ? f4[hint] : f8[hint];
}

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    cpu_set_t cs;
    CPU_ZERO(&cs);
    CPU_SET(first_cpu + t, &cs);
    if (pthread_setaffinity_np(pthread_self(), sizeof cs, &cs) != 0)
        fprintf(stderr, "thread %d: cannot pin to cpu %d\n", t, first_cpu + t);
    for (;;) {
        pthread_barrier_wait(&bar);
        int n = passes_to_run;
        if (n < 0)
            return NULL;
        for (int k = 0; k < n; k++) {
            pthread_barrier_wait(&bar);
            const share_t *s = &shares[t];
            t_start[t] = now();
            uint64_t v = s->a_work ? s->a_work(s->a, s->a_len, s->dist) : read_plain(s->a, s->a_len);
            t_mid[t] = now();
            if (s->b_len)
                v += s->b_mode == MODE_NTA ? read_nta(s->b, s->b_len, s->dist) : read_plain(s->b, s->b_len);
            t_end[t] = now();
            sink += v;
            pthread_barrier_wait(&bar);
        }
    }
}

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Splits [a, a + a_len) and [b, b + b_len) into n_threads contiguous shares (256-byte
 * multiples) and runs passes, timed from the threads' own clocks (this thread may share a
 * CPU with them): A from the first start to the last t_mid, B from there to the last t_end. */
static void run(const char *a, size_t a_len, const char *b, size_t b_len, int mode, size_t dist, work_fn wf,
                double *ga, double *gb)
{
    for (int t = 0; t < n_threads; t++) {
        size_t a0 = a_len / (size_t)n_threads * (size_t)t & ~(size_t)255, a1 = a_len / (size_t)n_threads * (size_t)(t + 1) & ~(size_t)255;
        size_t b0 = b_len / (size_t)n_threads * (size_t)t & ~(size_t)255, b1 = b_len / (size_t)n_threads * (size_t)(t + 1) & ~(size_t)255;
        shares[t] = (share_t){a + a0, a1 - a0, b ? b + b0 : NULL, b ? b1 - b0 : 0, mode, dist, wf};
    }
    enum { MAXP = 64 };
    double ta[MAXP], tb[MAXP];
    int np = 0;
    double t_total = 0;
    /* one warm pass, then passes until 0.3 s and >= 5 */
    for (int k = 0; k < MAXP && (k < 6 || t_total < 0.3); k++) {
        passes_to_run = 1;
        pthread_barrier_wait(&bar);
        pthread_barrier_wait(&bar);
        pthread_barrier_wait(&bar);
        double t0 = t_start[0], m = 0, e = 0;
        for (int t = 0; t < n_threads; t++) {
            if (t_start[t] < t0) t0 = t_start[t];
            if (t_mid[t] > m) m = t_mid[t];
            if (t_end[t] > e) e = t_end[t];
        }
        if (k > 0) {
            ta[np] = (m - t0);
            tb[np] = (e - m);
            t_total += e - t0;
            np++;
        }
    }
    *ga = (double)a_len / median(ta, np) / 1e9;
    *gb = b_len ? (double)b_len / median(tb, np) / 1e9 : 0;
}

/* The first line of a sysfs file into buf ("?" when it cannot be read). */
static void first_line(const char *path, char *buf, int n)
{
    FILE *f = fopen(path, "r");
    if (!f || !fgets(buf, n, f))
        snprintf(buf, (size_t)n, "?");
    if (f)
        fclose(f);
    buf[strcspn(buf, "\n")] = 0;
}

static void l3_size(void)
{
    char l3[64], thp[128];
    first_line("/sys/devices/system/cpu/cpu0/cache/index3/size", l3, sizeof l3);
    first_line("/sys/kernel/mm/transparent_hugepage/enabled", thp, sizeof thp);
    printf("L3 (sysfs, cpu0): %s; THP: %s\n", l3, thp);
}

int main(int argc, char **argv)
{
    n_threads = argc > 1 ? atoi(argv[1]) : 2;
    first_cpu = argc > 2 ? atoi(argv[2]) : 0;
    if (n_threads < 1 || n_threads > 64) {
        fprintf(stderr, "bench_llc_stream: threads must be 1..64\n");
        return 2;
    }
    const size_t total = 1024 * MIB;
    char *buf = mmap(NULL, total + 2 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    buf = (char *)(((uintptr_t)buf + 2 * MIB - 1) & ~(uintptr_t)(2 * MIB - 1));
    madvise(buf, total, MADV_HUGEPAGE);
    for (size_t i = 0; i < total; i += 64)
        buf[i] = (char)(i >> 6);
    l3_size();
    printf("threads %d from cpu %d\n", n_threads, first_cpu);
    pthread_barrier_init(&bar, NULL, (unsigned)n_threads + 1);
    pthread_t th[64];
    for (int t = 0; t < n_threads; t++)
        pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);

    const char *sec = argc > 3 ? argv[3] : "sizes,split,work";
    static const int sizes[] = {32, 64, 128, 192, 224, 256, 288, 320, 384, 512};
    if (strstr(sec, "sizes"))
        printf("sizes: cyclic read, GB/s (median pass)\n");
    for (size_t i = 0; strstr(sec, "sizes") && i < sizeof sizes / sizeof *sizes; i++) {
        double ga, gb;
        run(buf, (size_t)sizes[i] * MIB, NULL, 0, MODE_PLAIN, 0, NULL, &ga, &gb);
        printf("  %4d MiB  %6.1f GB/s\n", sizes[i], ga);
        fflush(stdout);
    }
    static const int as[] = {160, 224, 272};
    if (strstr(sec, "split"))
        printf("split: A plain then B = 128 MiB, GB/s of A / of B / of the pass\n");
    for (size_t i = 0; strstr(sec, "split") && i < sizeof as / sizeof *as; i++) {
        size_t a_len = (size_t)as[i] * MIB, b_len = 128 * MIB;
        const char *b = buf + a_len;
        struct { int mode; size_t dist; const char *name; } m[] = {
            {MODE_PLAIN, 0, "plain"}, {MODE_NTA, 1024, "nta+1K"}, {MODE_NTA, 4096, "nta+4K"}, {MODE_NTA, 16384, "nta+16K"}};
        for (size_t k = 0; k < sizeof m / sizeof *m; k++) {
            double ga, gb;
            run(buf, a_len, b, b_len, m[k].mode, m[k].dist, NULL, &ga, &gb);
            double pass = (double)a_len / ga + (double)b_len / gb;
            printf("  A %3d MiB, B %-8s  A %6.1f  B %6.1f  pass %6.1f GB/s\n", as[i], m[k].name, ga, gb,
                   (double)(a_len + b_len) / pass);
            fflush(stdout);
        }
    }
    if (strstr(sec, "work"))
        printf("work in L2 (512 KiB per thread, compute only), GB/s\n");
    for (int w = 4; strstr(sec, "work") && w <= 8; w += 4) {
        double ga, gb;
        run(buf, (size_t)n_threads * 512 * 1024, NULL, 0, MODE_PLAIN, 0, work_of(w, 0), &ga, &gb);
        printf("  W %d  %6.1f GB/s\n", w, ga);
    }
    if (strstr(sec, "work"))
        printf("work: 448 MiB at a kernel's pace (W vpdpbusd per line) with a prefetch per line, GB/s\n");
    static const char *hn[4] = {"none", "t0", "t1", "nta"};
    static const size_t dists[] = {1024, 4096, 16384};
    for (int w = 4; strstr(sec, "work") && w <= 8; w += 4)
        for (int h = 0; h < 4; h++)
            for (size_t d = 0; d < (h ? sizeof dists / sizeof *dists : 1); d++) {
                double ga, gb;
                run(buf, 448 * MIB, NULL, 0, MODE_PLAIN, dists[d], work_of(w, h), &ga, &gb);
                printf("  W %d  %-4s %5zu B ahead  %6.1f GB/s\n", w, hn[h], h ? dists[d] : 0, ga);
                fflush(stdout);
            }
    passes_to_run = -1;
    pthread_barrier_wait(&bar);
    for (int t = 0; t < n_threads; t++)
        pthread_join(th[t], NULL);
    return (int)(sink & 0);
}
