/*
 * stress.c — see stress.h. Test code: a failure to start a thread is reported to the
 * caller, never hidden.
 */
#include "stress/stress.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double stress_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

void stress_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void stress_config(stress_cfg_t *c, const char *name, int default_ms)
{
    const char *ms = getenv("CAIRN_STRESS_MS");
    const char *seed = getenv("CAIRN_STRESS_SEED");
    c->duration_ms = ms && atoi(ms) > 0 ? atoi(ms) : default_ms;
    if (seed && *seed) {
        c->seed = strtoull(seed, NULL, 0);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        c->seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 32;
    }
    fprintf(stderr, "stress %s: CAIRN_STRESS_SEED=%llu CAIRN_STRESS_MS=%d\n", name,
            (unsigned long long)c->seed, c->duration_ms);
}

uint64_t stress_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint32_t stress_below(uint64_t *state, uint32_t n) { return (uint32_t)(stress_rand(state) % n); }

typedef struct {
    stress_worker_fn fn;
    void *ctx;
    int index;
    uint64_t rng;
    pthread_barrier_t *start;
    const double *deadline;
    long failures;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    pthread_barrier_wait(w->start);
    w->failures = w->fn(w->ctx, w->index, &w->rng, *w->deadline);
    return NULL;
}

long stress_run(const stress_cfg_t *c, int n_workers, stress_worker_fn fn, void *ctx)
{
    worker_t *ws = calloc((size_t)n_workers, sizeof *ws);
    pthread_t *th = calloc((size_t)n_workers, sizeof *th);
    pthread_barrier_t start;
    if (!ws || !th || pthread_barrier_init(&start, NULL, (unsigned)n_workers + 1) != 0) {
        free(ws);
        free(th);
        return -1;
    }
    /* Written before the barrier, read after it: the barrier orders it for every worker. */
    double deadline = 0;
    int started = 0;
    long failures = 0;
    for (int i = 0; i < n_workers; i++) {
        ws[i] = (worker_t){.fn = fn, .ctx = ctx, .index = i, .start = &start,
                           .deadline = &deadline};
        ws[i].rng = c->seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(i + 1));
        if (pthread_create(&th[i], NULL, worker_main, &ws[i]) != 0)
            break;
        started++;
    }
    if (started < n_workers) {
        /* The barrier can never open: report, and let the process end (ctest fails it). */
        fprintf(stderr, "stress: could not start worker %d of %d\n", started, n_workers);
        abort();
    }
    deadline = stress_now_ms() + c->duration_ms;
    pthread_barrier_wait(&start);
    for (int i = 0; i < n_workers; i++) {
        pthread_join(th[i], NULL);
        failures += ws[i].failures;
    }
    pthread_barrier_destroy(&start);
    free(ws);
    free(th);
    return failures;
}

pid_t stress_spawn(char *const argv[], int out_fd)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    if (out_fd >= 0 && out_fd != STDOUT_FILENO) {
        dup2(out_fd, STDOUT_FILENO);
        close(out_fd);
    }
    execv(argv[0], argv);
    _exit(127);
}

int stress_reap(pid_t pid, int timeout_ms, bool *timed_out)
{
    int st = 0;
    double deadline = stress_now_ms() + timeout_ms;
    *timed_out = false;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            return st;
        if (w < 0 && errno != EINTR)
            return -1;
        if (stress_now_ms() >= deadline)
            break;
        stress_sleep_ms(10);
    }
    *timed_out = true;
    kill(pid, SIGKILL);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return st;
}
