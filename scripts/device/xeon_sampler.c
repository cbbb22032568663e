/*
 * xeon_sampler.c — a CPU-time sampling profiler for device runs where perf is absent
 * (scripts/device/run_xeon.sh, issue 12): LD_PRELOAD it into a benchmark and every
 * XEON_SAMPLER_US microseconds of the process's CPU time (ITIMER_PROF, default 1000) the
 * thread then running records the interrupted instruction address, from
 * XEON_SAMPLER_SKIP_MS of process CPU time on (default 0: a warm-up left out). At exit it writes
 * "path file-offset samples" lines, one per distinct address, to $XEON_SAMPLER_OUT
 * (default xeon_sampler.txt), which scripts/device/xeon_symbolize.py turns into a
 * per-function profile with the same binary. Built by stage_xeon.sh:
 *   cc -O2 -shared -fPIC -o libxeon_sampler.so scripts/device/xeon_sampler.c
 *
 * Model: the signal handler only appends to a fixed array (async-signal-safe: one atomic
 * index); the histogram and the address-to-file mapping (/proc/self/maps) are made once,
 * in the destructor; a process with fewer than 100 samples (a shell the benchmark ran)
 * writes nothing. Samples past the array's end are counted as dropped. A measuring
 * tool, not part of Cairn: it allocates with malloc and exits quietly on failure.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <ucontext.h>

enum { MAX_SAMPLES = 1 << 21 };

static uintptr_t *pcs;
static atomic_long n_pcs;

static void on_prof(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)si;
    long i = atomic_fetch_add_explicit(&n_pcs, 1, memory_order_relaxed);
    if (i < MAX_SAMPLES)
        pcs[i] = (uintptr_t)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
}

__attribute__((constructor)) static void sampler_start(void)
{
    pcs = malloc(sizeof(*pcs) * MAX_SAMPLES);
    if (!pcs)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_prof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, NULL))
        return;
    const char *e = getenv("XEON_SAMPLER_US");
    long us = e ? atol(e) : 1000;
    if (us < 50)
        us = 50;
    /* XEON_SAMPLER_SKIP_MS: process CPU milliseconds before the first sample (a warm-up). */
    const char *sk = getenv("XEON_SAMPLER_SKIP_MS");
    long skip_us = sk ? atol(sk) * 1000 : 0;
    if (skip_us < us)
        skip_us = us;
    struct itimerval it = {{us / 1000000, us % 1000000}, {skip_us / 1000000, skip_us % 1000000}};
    setitimer(ITIMER_PROF, &it, NULL);
}

static int cmp_pc(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}

__attribute__((destructor)) static void sampler_stop(void)
{
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    if (!pcs)
        return;
    long n = atomic_load(&n_pcs), kept = n < MAX_SAMPLES ? n : MAX_SAMPLES;
    FILE *out = NULL, *maps = NULL;
    if (n < 100) /* a child the benchmark ran (system("rm ...")) must not overwrite its file */
        goto done;
    qsort(pcs, (size_t)kept, sizeof(*pcs), cmp_pc);
    const char *path = getenv("XEON_SAMPLER_OUT");
    out = fopen(path ? path : "xeon_sampler.txt", "w");
    maps = fopen("/proc/self/maps", "r");
    if (!out || !maps)
        goto done;
    struct { uintptr_t lo, hi, off; char file[256]; } m[512];
    int nm = 0;
    char line[512];
    while (nm < 512 && fgets(line, sizeof line, maps)) {
        unsigned long lo, hi, off;
        char perm[8], file[256] = "";
        if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %255s", &lo, &hi, perm, &off, file) >= 4 && perm[2] == 'x') {
            m[nm].lo = lo, m[nm].hi = hi, m[nm].off = off;
            snprintf(m[nm].file, sizeof m[nm].file, "%s", file[0] ? file : "?");
            nm++;
        }
    }
    fprintf(out, "# samples %ld (dropped %ld), period %s us of process CPU\n", n, n - kept,
            getenv("XEON_SAMPLER_US") ? getenv("XEON_SAMPLER_US") : "1000");
    for (long i = 0; i < kept;) {
        long j = i;
        while (j < kept && pcs[j] == pcs[i])
            j++;
        int k = 0;
        while (k < nm && !(pcs[i] >= m[k].lo && pcs[i] < m[k].hi))
            k++;
        if (k < nm)
            fprintf(out, "%s %lx %ld\n", m[k].file, (unsigned long)(pcs[i] - m[k].lo + m[k].off), j - i);
        else
            fprintf(out, "? %lx %ld\n", (unsigned long)pcs[i], j - i);
        i = j;
    }
done:
    if (out)
        fclose(out);
    if (maps)
        fclose(maps);
}
