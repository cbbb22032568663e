/*
 * bench_restore_stall.c — how much a cold-tier restore stalls the decodes running beside
 * it: inter-token latency of 8 streaming requests before and while other requests
 * restore long prompts from the SSD tier, through the scheduler, in process.
 *
 * Workload (token ids). First, R prompts of N tokens (distinct salts) are computed and
 * persisted by one server (max_tokens 1), which is then destroyed (writes drained) and the
 * object files dropped from the page cache (posix_fadvise DONTNEED), so a restore reads
 * the disk. A fresh server on the same directory then runs 8 streams (64-token prompts of
 * their own salts, G tokens each, greedy, ignore_eos); once every stream has produced W
 * tokens, the R prompts are submitted again one every P ms: each restores its blocks
 * (and, on a hybrid, its sidecars) at admission, on the engine thread today. Every token
 * a stream receives is timestamped; a gap between two consecutive tokens of a stream is
 * "before" when it ends before the first restore is submitted and "during" when it
 * overlaps [first restore submitted, last restore finished].
 *
 * Reported: p50, p99 and max of the gaps before and during, in ms, over all 8 streams,
 * and the restored tokens (usage.restored_tokens) of the R requests. Wall-clock: on a
 * shared machine the figures are noisy; the ratio of the two p99s taken in one run is
 * the number to read.
 *
 * usage: bench_restore_stall [--arch llama|lfm2] [--restores R] [--tokens N] [--gen G]
 *                            [--every-ms P] [--threads T] [--reps K] [--dir DIR]
 * Defaults: llama-8l's shape (f16 weights, bf16 K/V), 6 restores of 4096 tokens, 240
 * tokens per stream, one restore every 200 ms, 2 threads, a directory under /tmp, 2
 * repetitions of the pair (reads on the engine thread: CAIRN_COLD_RESTORE_ASYNC=0, the
 * issue-11 "before"; then on the tier's I/O thread), alternated in one process.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cairn/scheduler.h"
#include "tools/synth.h"

#include "cold_files.h"

#define STREAMS 8
#define WARM 24 /* tokens each stream produces before the restores start */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_restore_stall: %s: %s\n", what, cairn_strerror(rc));
    exit(1);
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool final;
    int status;
    cairn_req_usage_t usage;
    double *t;        /* [cap] arrival time of each token (ms) */
    int n, cap;
    double t_final;
} req_t;

static void on_event(void *user, const cairn_req_event_t *ev)
{
    req_t *r = user;
    double t = now_ms();
    pthread_mutex_lock(&r->mu);
    if (ev->kind == CAIRN_REQ_EVENT_DELTA) {
        for (int i = 0; i < ev->n_tokens && r->n < r->cap; i++)
            r->t[r->n++] = t;
    } else {
        if (ev->usage)
            r->usage = *ev->usage;
        if (ev->kind == CAIRN_REQ_EVENT_ERROR)
            r->status = ev->status;
        if (ev->final) {
            r->final = true;
            r->t_final = t;
        }
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void req_init(req_t *r, int cap)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->cap = cap;
    if (!(r->t = calloc((size_t)cap, sizeof(double))))
        die("calloc", CAIRN_ENOMEM);
}

static void req_wait(req_t *r)
{
    pthread_mutex_lock(&r->mu);
    while (!r->final)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    if (r->status)
        die("request", r->status);
}

static void submit(cairn_sched_t *s, const char *salt, const int32_t *p, int n, int gen, req_t *r)
{
    cairn_req_params_t q = {0};
    q.prompt = p;
    q.n_prompt = n;
    q.cache_salt = salt;
    cairn_sampling_params_init(&q.sampling);
    q.sampling.temperature = 0;
    q.sampling.max_tokens = gen;
    q.sampling.ignore_eos = true;
    q.on_event = on_event;
    q.user = r;
    char err[256];
    uint64_t id;
    int rc = cairn_sched_submit(s, &q, &id, err, sizeof err);
    if (rc) {
        fprintf(stderr, "bench_restore_stall: submit: %s\n", err);
        exit(1);
    }
}

static void fill_tokens(int32_t *t, int n, unsigned seed, int vocab)
{
    unsigned x = seed * 2654435761u + 1u;
    for (int i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        t[i] = (int32_t)((x >> 8) % (unsigned)(vocab - 3));
    }
}

static void open_server(const cairn_checkpoint_t *ck, const cairn_tokenizer_t *tok, const char *dir, int threads,
                        cairn_engine_t **e, cairn_sched_t **s)
{
    cairn_engine_options_t eo;
    cairn_engine_options_default(&eo);
    eo.n_threads = threads;
    eo.pool_mib = 1024;
    eo.cold = 1;
    eo.cold_root = dir;
    eo.cold_capture_blocks = 1 << 16;
    eo.cold_capture_ms = 20000;
    char err[512] = "";
    int rc = cairn_engine_create(ck, &eo, e, err, sizeof err);
    if (rc) {
        fprintf(stderr, "bench_restore_stall: engine: %s\n", err);
        exit(1);
    }
    cairn_sched_options_t so;
    cairn_sched_options_default(&so);
    if (so.max_running < STREAMS + 8)
        so.max_running = STREAMS + 8;
    if ((rc = cairn_sched_create(*e, tok, &so, s)))
        die("sched_create", rc);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
    if (n == 0)
        return 0;
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

/* One measured run: 8 streams decoding, R restores submitted among them. */
static void measure(const cairn_checkpoint_t *ck, const cairn_tokenizer_t *tok, const char *dir, int threads,
                    const char *label, int R, int N, int G, int every, int vocab, const int32_t *prompts)
{
    cairn_engine_t *e;
    cairn_sched_t *s;
    int32_t short_p[STREAMS][64];
    char salts[16][32];
    req_t *rr = calloc((size_t)R, sizeof(req_t)), *sr = calloc(STREAMS, sizeof(req_t));
    if (!rr || !sr)
        die("malloc", CAIRN_ENOMEM);
    open_server(ck, tok, dir, threads, &e, &s);
    for (int i = 0; i < STREAMS; i++) {
        char salt[32];
        snprintf(salt, sizeof salt, "stream-%d", i);
        fill_tokens(short_p[i], 64, 9000u + (unsigned)i, vocab);
        req_init(&sr[i], G + 1);
        submit(s, salt, short_p[i], 64, G, &sr[i]);
    }
    for (int i = 0; i < STREAMS; i++) {
        pthread_mutex_lock(&sr[i].mu);
        while (sr[i].n < WARM && !sr[i].final)
            pthread_cond_wait(&sr[i].cv, &sr[i].mu);
        pthread_mutex_unlock(&sr[i].mu);
    }
    const double t_first = now_ms();
    for (int i = 0; i < R; i++) {
        snprintf(salts[i % 16], sizeof salts[0], "restore-%d", i);
        req_init(&rr[i], 4);
        submit(s, salts[i % 16], prompts + (size_t)i * N, N, 1, &rr[i]);
        if (every)
            usleep((useconds_t)every * 1000);
    }
    double t_last = t_first;
    long restored = 0;
    for (int i = 0; i < R; i++) {
        req_wait(&rr[i]);
        restored += rr[i].usage.restored_tokens;
        if (rr[i].t_final > t_last)
            t_last = rr[i].t_final;
    }
    for (int i = 0; i < STREAMS; i++)
        req_wait(&sr[i]);
    double *before = malloc(sizeof(double) * STREAMS * (size_t)G), *during = malloc(sizeof(double) * STREAMS * (size_t)G);
    int nb = 0, nd = 0;
    if (!before || !during)
        die("malloc", CAIRN_ENOMEM);
    for (int i = 0; i < STREAMS; i++)
        for (int k = 1; k < sr[i].n; k++) {
            double a = sr[i].t[k - 1], b = sr[i].t[k];
            if (b <= t_first)
                before[nb++] = b - a;
            else if (a < t_last && b > t_first)
                during[nd++] = b - a;
        }
    qsort(before, (size_t)nb, sizeof(double), cmp_double);
    qsort(during, (size_t)nd, sizeof(double), cmp_double);
    printf("  reads on the %s: %ld of %ld prompt tokens restored, window %.0f ms\n", label, restored,
           (long)R * N, t_last - t_first);
    printf("  inter-token gap (ms)   %6s %8s %8s %8s\n", "gaps", "p50", "p99", "max");
    printf("  before restores        %6d %8.1f %8.1f %8.1f\n", nb, pct(before, nb, 0.5), pct(before, nb, 0.99),
           nb ? before[nb - 1] : 0.0);
    printf("  while restoring        %6d %8.1f %8.1f %8.1f\n", nd, pct(during, nd, 0.5), pct(during, nd, 0.99),
           nd ? during[nd - 1] : 0.0);
    cairn_sched_destroy(s, 1000);
    cairn_engine_cold_counters_t cc;
    cairn_engine_cold_counters(e, &cc);
    printf("  engine thread in restores: %.1f ms per restore (%.1f ms in all, %llu restores; wall in "
           "restores %.1f ms each)\n",
           cc.restore_lookups ? cc.restore_engine_seconds * 1e3 / (double)cc.restore_lookups : 0.0,
           cc.restore_engine_seconds * 1e3, (unsigned long long)cc.restore_lookups,
           cc.restore_lookups ? cc.restore_seconds * 1e3 / (double)cc.restore_lookups : 0.0);
    cairn_engine_destroy(e);
    free(before);
    free(during);
    for (int i = 0; i < R; i++)
        free(rr[i].t);
    for (int i = 0; i < STREAMS; i++)
        free(sr[i].t);
    free(rr);
    free(sr);
}

int main(int argc, char **argv)
{
    int R = 6, N = 4096, G = 240, every = 200, threads = 2, reps = 2;
    bool lfm2 = false;
    const char *dir_arg = NULL;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            goto usage;
        const char *a = argv[i], *v = argv[++i];
        if (!strcmp(a, "--arch") && (!strcmp(v, "llama") || !strcmp(v, "lfm2")))
            lfm2 = !strcmp(v, "lfm2");
        else if (!strcmp(a, "--restores"))
            R = atoi(v);
        else if (!strcmp(a, "--tokens"))
            N = atoi(v);
        else if (!strcmp(a, "--gen"))
            G = atoi(v);
        else if (!strcmp(a, "--every-ms"))
            every = atoi(v);
        else if (!strcmp(a, "--threads"))
            threads = atoi(v);
        else if (!strcmp(a, "--reps"))
            reps = atoi(v);
        else if (!strcmp(a, "--dir"))
            dir_arg = v;
        else
            goto usage;
    }
    if (R < 1 || N < 32 || G <= WARM || every < 0 || threads < 1 || reps < 1)
        goto usage;
    char root[] = "/tmp/cairn-bench-stall-XXXXXX";
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    char model[sizeof root + 8], dir[1024];
    snprintf(model, sizeof model, "%s/model", root);
    snprintf(dir, sizeof dir, "%s", dir_arg ? dir_arg : root);
    if (!dir_arg)
        strncat(dir, "/cache", sizeof dir - strlen(dir) - 1);

    cairn_synth_options_t so;
    cairn_synth_options_default(&so);
    if (cairn_synth_options_preset("llama-8l", &so))
        die("preset", CAIRN_EINVAL);
    so.dtype = CAIRN_DTYPE_F16;
    if (lfm2) {
        so.arch = CAIRN_SYNTH_LFM2;
        so.attn_layers = 0;
        so.conv_taps = 3;
    }
    char err[512] = "";
    int rc = cairn_synth_write(model, &so, err, sizeof err);
    if (rc) {
        fprintf(stderr, "bench_restore_stall: synth: %s\n", err);
        return 1;
    }
    cairn_checkpoint_t *ck;
    if ((rc = cairn_checkpoint_open(model, &ck, err, sizeof err)))
        die(err, rc);
    cairn_tokenizer_t *tok;
    if ((rc = cairn_tokenizer_load(model, &tok, err, sizeof err)))
        die(err, rc);
    const int vocab = cairn_checkpoint_config(ck)->vocab;
    printf("bench_restore_stall: %s shape, %d streams x %d tokens; %d restores of %d tokens, one every %d ms; "
           "%d threads; cache %s\n",
           lfm2 ? "lfm2 of llama-8l's sizes" : "llama-8l", STREAMS, G, R, N, every, threads, dir);

    int32_t *prompts = malloc((size_t)R * N * sizeof(int32_t));
    req_t *rr = calloc((size_t)R, sizeof(req_t));
    if (!prompts || !rr)
        die("malloc", CAIRN_ENOMEM);
    char salts[16][32];
    for (int i = 0; i < R; i++)
        fill_tokens(prompts + (size_t)i * N, N, 100u + (unsigned)i, vocab);
    /* Persist the R prompts. */
    cairn_engine_t *e;
    cairn_sched_t *s;
    double t0 = now_ms();
    open_server(ck, tok, dir, threads, &e, &s);
    for (int i = 0; i < R; i++) {
        snprintf(salts[i % 16], sizeof salts[0], "restore-%d", i);
        req_init(&rr[i], 4);
        submit(s, salts[i % 16], prompts + (size_t)i * N, N, 1, &rr[i]);
        req_wait(&rr[i]);
    }
    cairn_sched_destroy(s, 1000);
    cairn_engine_destroy(e);
    (void)cf_drop(dir);
    printf("  persisted %d x %d tokens in %.1f s, page cache dropped\n", R, N, (now_ms() - t0) / 1e3);

    for (int rep = 0; rep < reps; rep++)
        for (int mode = 0; mode < 2; mode++) {
            /* Alternated: the engine thread reads (before issue 11's move), then the I/O thread. */
            setenv("CAIRN_COLD_RESTORE_ASYNC", mode ? "1" : "0", 1);
            (void)cf_drop(dir);
            measure(ck, tok, dir, threads, mode ? "I/O thread" : "engine thread", R, N, G, every, vocab, prompts);
        }
    cairn_tokenizer_destroy(tok);
    cairn_checkpoint_close(ck);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_restore_stall: could not remove %s\n", root);
    free(prompts);
    for (int i = 0; i < R; i++)
        free(rr[i].t);
    free(rr);
    return 0;
usage:
    fprintf(stderr, "usage: bench_restore_stall [--arch llama|lfm2] [--restores R] [--tokens N] [--gen G] "
                    "[--every-ms P] [--threads T] [--reps K] [--dir DIR]\n");
    return 2;
}
