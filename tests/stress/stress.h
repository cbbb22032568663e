/*
 * stress.h — the concurrency stress harness (tests/stress): bounded in time, loopback only,
 * built to make races likely and to state what must hold once the storm is over.
 *
 * Model. A stress test starts n workers on one barrier (so they collide from the first
 * microsecond), lets each loop until a shared deadline, and sums the failures they report
 * (a worker counts and prints what went wrong; it never asserts from a thread, which
 * cmocka cannot report). Afterwards the test checks its invariants on the quiet system
 * (pool accounting, what is on disk, outputs against a sequential run). Randomness comes
 * from one seed, printed at the start, so a failure can be replayed.
 *
 * Knobs (environment; ctest sets the first per test, see cairn_add_stress_test in
 * tests/stress/CMakeLists.txt):
 *   CAIRN_STRESS_MS    how long each storm lasts (the test's own default otherwise);
 *   CAIRN_STRESS_SEED  the seed (default: from the clock, printed).
 * The duration is wall time, not work: under ThreadSanitizer the same storm does fewer
 * iterations, so tests assert on what happened (counters), never on iteration counts
 * beyond "at least one of each kind".
 *
 * Child processes: stress_spawn runs a program (usually the test itself,
 * /proc/self/exe, in a child mode) and stress_reap waits for it with a deadline (SIGKILL
 * past it), so a stuck child cannot outlive the test.
 *
 * Thread-safety: stress_run and the random helpers are for the test's main thread and its
 * workers as documented per function; nothing here is shared without a lock or an atomic.
 */
#ifndef CAIRN_TESTS_STRESS_H
#define CAIRN_TESTS_STRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
    uint64_t seed;       /* CAIRN_STRESS_SEED, else from the clock */
    int duration_ms;     /* CAIRN_STRESS_MS, else the test's default */
} stress_cfg_t;

/* Reads the knobs (default_ms when CAIRN_STRESS_MS is unset) and prints them with `name`
 * to stderr, so every log says how to replay the run. */
void stress_config(stress_cfg_t *c, const char *name, int default_ms);

/* CLOCK_MONOTONIC in milliseconds. */
double stress_now_ms(void);

/* splitmix64: a worker's own generator (state private to the worker). */
uint64_t stress_rand(uint64_t *state);
/* Uniform in [0, n) (n >= 1). */
uint32_t stress_below(uint64_t *state, uint32_t n);

/*
 * One worker: loops until stress_now_ms() >= deadline_ms, returns its failure count.
 * `rng` is the worker's own generator, seeded from the run's seed and the worker index.
 */
typedef long (*stress_worker_fn)(void *ctx, int worker, uint64_t *rng, double deadline_ms);

/* Runs n_workers threads of fn (worker i gets index i) released together from a barrier,
 * each until now + c->duration_ms, joins them and returns the sum of their failures, or -1
 * if a thread could not be started. */
long stress_run(const stress_cfg_t *c, int n_workers, stress_worker_fn fn, void *ctx);

/* Starts argv[0] with argv (NULL-terminated) in a child process; the child's stdout goes
 * to out_fd when >= 0 (else it is inherited). Returns the pid or -1. */
pid_t stress_spawn(char *const argv[], int out_fd);

/* Waits up to timeout_ms for pid; past it the child is SIGKILLed and reaped. Returns the
 * wait status (as waitpid fills it) or -1 on error; *timed_out says whether it was killed. */
int stress_reap(pid_t pid, int timeout_ms, bool *timed_out);

/* Sleeps ms milliseconds (EINTR resumed). */
void stress_sleep_ms(int ms);

#endif
